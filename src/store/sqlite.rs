//! The embedded store: one SQLite file, `reckon.sqlite`, under the data directory.
//!
//! Writes go through one group-commit writer thread ([`writer`]); reads use a small pool of
//! separate connections on blocking threads, which WAL lets run concurrently with the writer
//! and with each other. This file is the [`Store`] implementation: each method hands a write to
//! the writer or runs a read on the pool. The rest is by concern: [`open`] (the file, its
//! pragmas, the read pool), [`schema`] (migrations), [`rows`] (row decoding), [`events`],
//! [`verdicts`], [`report`], [`escalations`] (and their outbox items) and [`startup`] (the
//! checkpoint, unsettled intents, routes): the reads of each.

mod escalations;
mod events;
mod open;
mod report;
mod rows;
mod schema;
mod startup;
mod verdicts;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use self::open::ReadPool;
// The writer finds the decoders here, where they were before the split.
use self::rows::{
    decode_attempt, decode_escalation, decode_readback, decode_record, ATTEMPT_COLS,
    ESCALATION_COLS, READBACK_COLS, RECORD_COLS,
};
use self::writer::{EncodedDerived, Request};
use super::{
    escalation_limit, Appended, Derived, EventQuery, OutboxItem, OutboxPage, Page, RecordKey,
    Report, Store, StoreError, Swap, Unsettled, VerdictFilter,
};
use crate::codec::VerdictDoc;
use crate::model::{Escalation, EscalationStatus, Event, Timestamp, Verdict};

pub use schema::latest as schema_version;

/// File name inside the data directory.
pub const FILE_NAME: &str = "reckon.sqlite";

pub struct SqliteStore {
    path: PathBuf,
    /// `None` for a read-only open.
    writer: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    reads: Arc<ReadPool>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("read_only", &self.writer.is_none())
            .finish()
    }
}

/// Questions about at least this many ids are split across read connections, one per core
/// (at most four): start-up asks about every open intent at once.
const SPLIT_READ_AT: usize = 16_384;

fn read_parts(ids: usize) -> usize {
    if ids < SPLIT_READ_AT {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4))
}

/// What an index probe costs, in rows of a table scan: past it, reading a whole table and
/// keeping what was asked for is cheaper than asking by id.
const PROBE_COST_IN_ROWS: usize = 4;

/// The parts of a split answer as one, allocated once: a start-up's are hundreds of megabytes,
/// and each doubling of a growing vector is fresh memory the kernel zeroes.
fn concat<T>(parts: Vec<Vec<T>>) -> Vec<T> {
    let mut all = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for p in parts {
        all.extend(p);
    }
    all
}

impl SqliteStore {
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn write<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Request,
    ) -> Result<T, StoreError> {
        let tx = self.writer.as_ref().ok_or(StoreError::ReadOnly)?;
        let (reply, answer) = oneshot::channel();
        tx.send(make(reply))
            .await
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Run `f` on each of `parts` at once, each on its own pooled read connection (so on every
    /// core): start-up asks about every open intent in one question.
    async fn read_split<P, T, F>(&self, parts: Vec<P>, f: F) -> Result<Vec<T>, StoreError>
    where
        P: Send + 'static,
        T: Send + 'static,
        F: Fn(&Connection, P) -> Result<T, StoreError> + Send + Copy + 'static,
    {
        let running: Vec<_> = parts
            .into_iter()
            .map(|p| {
                let pool = self.reads.clone();
                tokio::task::spawn_blocking(move || pool.with(move |conn| f(conn, p)))
            })
            .collect();
        let mut out = Vec::with_capacity(running.len());
        for r in running {
            out.push(r.await.map_err(|e| StoreError::Task(e.to_string()))??);
        }
        Ok(out)
    }

    /// Run `f` on a pooled read connection on a blocking thread.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let pool = self.reads.clone();
        tokio::task::spawn_blocking(move || pool.with(f))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }
}

impl Drop for SqliteStore {
    /// Close the queue and wait for the writer to finish what was queued, so a reopen (or the
    /// process exiting) sees every acknowledged write and a checkpointed file.
    fn drop(&mut self) {
        self.writer.take();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("store writer thread panicked");
            }
        }
    }
}

impl Store for SqliteStore {
    // ---- events

    async fn append_received(
        &self,
        events: Vec<Event>,
        received_at: Timestamp,
    ) -> Result<Vec<Appended>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let (events, mask) = super::keep_holdable(events);
        if events.is_empty() {
            return Ok(vec![Appended::Refused; mask.len()]);
        }
        let statuses = self
            .write(|reply| Request::Append(events, received_at, reply))
            .await?;
        Ok(super::spread_statuses(&mask, statuses))
    }

    async fn load_events(&self) -> Result<Vec<Event>, StoreError> {
        self.read(|conn| events::load_events(conn, None)).await
    }

    async fn events_received_since(&self, since: Timestamp) -> Result<Vec<Event>, StoreError> {
        self.read(move |conn| events::load_events(conn, Some(since)))
            .await
    }

    async fn events_touching(&self, q: EventQuery) -> Result<Vec<Event>, StoreError> {
        if q.is_empty() {
            return Ok(Vec::new());
        }
        let n = read_parts(q.len());
        let parts = q.split(n);
        let found = self
            .read_split(parts, |conn, q| events::events_touching(conn, &q))
            .await?;
        Ok(events::in_ingest_order(concat(found)))
    }

    async fn known_observations(
        &self,
        keys: Vec<RecordKey>,
    ) -> Result<std::collections::HashSet<RecordKey>, StoreError> {
        if keys.is_empty() {
            return Ok(Default::default());
        }
        self.read(move |conn| events::known_observations(conn, keys))
            .await
    }

    // ---- start-up, routes, retention

    async fn checkpoint(&self) -> Result<Option<Timestamp>, StoreError> {
        self.read(startup::checkpoint).await
    }

    async fn routes_of_open_intents(&self) -> Result<bool, StoreError> {
        self.read(startup::routes_of_open_intents).await
    }

    async fn unsettled_intents(&self) -> Result<Vec<Unsettled>, StoreError> {
        self.read(startup::unsettled_intents).await
    }

    async fn route_owners(&self, routes: Vec<String>) -> Result<Vec<String>, StoreError> {
        if routes.is_empty() {
            return Ok(Vec::new());
        }
        let parts = read_parts(routes.len());
        let size = routes.len().div_ceil(parts);
        let parts: Vec<Vec<String>> = routes.chunks(size).map(<[String]>::to_vec).collect();
        let owners = self
            .read_split(parts, |conn, routes| startup::route_owners(conn, &routes))
            .await?;
        let owners: std::collections::BTreeSet<String> = owners.into_iter().flatten().collect();
        Ok(owners.into_iter().collect())
    }

    /// In order and each once, a page at a time by the index (each page its own read, so the
    /// writer is not held up behind a year of routes).
    async fn scan_routes(
        &self,
        chunk: usize,
        mut each: impl FnMut(Vec<String>) -> bool + Send,
    ) -> Result<u64, StoreError> {
        let chunk = chunk.max(1);
        let mut after = String::new();
        let mut handed = 0u64;
        loop {
            let from = std::mem::take(&mut after);
            let page = self
                .read(move |conn| startup::routes_after(conn, &from, chunk))
                .await?;
            let Some(last) = page.last() else {
                return Ok(handed);
            };
            after = last.clone();
            handed += page.len() as u64;
            let full = page.len() == chunk;
            if !each(page) || !full {
                return Ok(handed);
            }
        }
    }

    async fn expire_events(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        self.write(|reply| Request::Expire(before, limit.max(1), reply))
            .await
    }

    async fn expire_outbox(&self, before: Timestamp) -> Result<u64, StoreError> {
        self.write(|reply| Request::ExpireOutbox(before, reply))
            .await
            .map(|n| n as u64)
    }

    // ---- verdicts

    async fn put_verdicts(&self, verdicts: Vec<Verdict>) -> Result<(), StoreError> {
        if verdicts.is_empty() {
            return Ok(());
        }
        let encoded = verdicts::encode_verdicts(verdicts.into_iter().map(Arc::new).collect())?;
        self.write(|reply| Request::PutVerdicts(encoded, reply))
            .await
    }

    async fn put_derived(&self, d: Derived) -> Result<(), StoreError> {
        if d.is_empty() {
            return Ok(());
        }
        // Key order (route, then intent), as for the verdicts: each index is walked once.
        let mut routes = d.routes;
        routes.sort_unstable();
        let encoded = EncodedDerived {
            escalations: d.escalations,
            removed: d.removed,
            verdicts: verdicts::encode_verdicts(d.verdicts)?,
            outbox: d.outbox,
            routes,
            checkpoint: d.checkpoint,
            open_routes_complete: d.open_routes_complete,
        };
        self.write(|reply| Request::PutDerived(encoded, reply))
            .await
    }

    async fn stored_verdicts(&self, intent_ids: Vec<String>) -> Result<Vec<String>, StoreError> {
        if intent_ids.is_empty() {
            return Ok(Vec::new());
        }
        self.read(move |conn| verdicts::stored_verdicts(conn, &intent_ids))
            .await
    }

    async fn listed_of(
        &self,
        intent_ids: Vec<String>,
    ) -> Result<Vec<(String, Timestamp)>, StoreError> {
        if intent_ids.is_empty() {
            return Ok(Vec::new());
        }
        self.read(move |conn| verdicts::listed_of(conn, &intent_ids))
            .await
    }

    async fn delete_verdicts(&self, intent_ids: Vec<String>) -> Result<(), StoreError> {
        if intent_ids.is_empty() {
            return Ok(());
        }
        self.write(|reply| Request::DeleteVerdicts(intent_ids, reply))
            .await
    }

    async fn get_verdict(&self, intent_id: &str) -> Result<Option<VerdictDoc>, StoreError> {
        let id = intent_id.to_string();
        self.read(move |conn| verdicts::get_verdict(conn, &id))
            .await
    }

    async fn list_verdicts(&self, filter: &VerdictFilter) -> Result<Page<VerdictDoc>, StoreError> {
        let filter = filter.clone();
        self.read(move |conn| verdicts::list_verdicts(conn, &filter))
            .await
    }

    async fn report(&self, since: Option<Timestamp>, now: Timestamp) -> Result<Report, StoreError> {
        self.read(move |conn| report::report(conn, since, now))
            .await
    }

    // ---- escalations and their notifications

    async fn put_escalations(&self, escalations: Vec<Escalation>) -> Result<(), StoreError> {
        if escalations.is_empty() {
            return Ok(());
        }
        self.write(|reply| Request::PutEscalations(escalations, reply))
            .await
    }

    async fn swap_escalation(
        &self,
        current: Escalation,
        new: Escalation,
    ) -> Result<Swap, StoreError> {
        self.swap_escalation_notify(current, new, Vec::new()).await
    }

    async fn swap_escalation_notify(
        &self,
        current: Escalation,
        new: Escalation,
        outbox: Vec<OutboxItem>,
    ) -> Result<Swap, StoreError> {
        self.write(|reply| Request::SwapEscalation(Box::new((current, new, outbox)), reply))
            .await
    }

    async fn load_escalations(&self) -> Result<Vec<Escalation>, StoreError> {
        self.read(escalations::load_escalations).await
    }

    async fn escalations_of(&self, intent_ids: Vec<String>) -> Result<Vec<Escalation>, StoreError> {
        if intent_ids.is_empty() {
            return Ok(Vec::new());
        }
        let total = self.read(escalations::escalation_total).await?;
        if total <= PROBE_COST_IN_ROWS * intent_ids.len() {
            let wanted: foldhash::HashSet<String> = intent_ids.into_iter().collect();
            return self
                .read(move |conn| escalations::escalations_among(conn, &wanted))
                .await;
        }
        let parts = read_parts(intent_ids.len());
        let size = intent_ids.len().div_ceil(parts);
        let parts: Vec<Vec<String>> = intent_ids.chunks(size).map(<[String]>::to_vec).collect();
        let found = self
            .read_split(parts, |conn, ids| escalations::escalations_of(conn, &ids))
            .await?;
        Ok(concat(found))
    }

    async fn escalation_counts(&self) -> Result<Vec<(EscalationStatus, u64)>, StoreError> {
        self.read(|conn| report::escalation_counts(conn, i64::MIN))
            .await
    }

    async fn get_escalation(&self, id: &str) -> Result<Option<Escalation>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| escalations::get_escalation(conn, &id))
            .await
    }

    async fn list_escalations(
        &self,
        status: Option<EscalationStatus>,
        limit: usize,
    ) -> Result<Vec<Escalation>, StoreError> {
        let limit = escalation_limit(limit) as i64;
        self.read(move |conn| escalations::list_escalations(conn, status, limit))
            .await
    }

    async fn page_escalations(
        &self,
        filter: &crate::store::EscalationFilter,
    ) -> Result<Page<Escalation>, StoreError> {
        let filter = filter.clone();
        self.read(move |conn| escalations::page_escalations(conn, &filter))
            .await
    }

    async fn outbox_put(&self, items: Vec<OutboxItem>) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        self.write(|reply| Request::PutOutbox(items, reply)).await
    }

    async fn outbox_pending(
        &self,
        target: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<OutboxPage, StoreError> {
        let target = target.to_string();
        let limit = escalation_limit(limit);
        self.read(move |conn| escalations::outbox_pending(conn, &target, since, limit))
            .await
    }
}
