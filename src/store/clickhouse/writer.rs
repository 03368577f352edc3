//! The group-commit writer: one task turns many small writes into few INSERTs.
//!
//! Every ClickHouse INSERT makes a part per partition touched, and many small parts is what
//! ClickHouse handles worst (TOO_MANY_PARTS). So callers queue encoded rows and await a
//! oneshot; the task takes the first request, drains whatever else is queued (up to
//! [`MAX_BATCH_ROWS`]), sends ONE INSERT per table for all of them, and answers every caller only
//! after ClickHouse confirmed every INSERT of the group (the HTTP 200 of the INSERT means the
//! data is written to its parts). While an INSERT is in flight the next group accumulates, so
//! under load the number of INSERTs stays flat while the rows per INSERT grow.
//!
//! Retrying a group (transient failure) is safe: every table collapses identical rows by key and
//! version. When a group fails with bad data, its requests are retried one by one so only the
//! request holding the bad row fails.
//!
//! Before inserting, the group's event identities are looked up (the first copy wins), except
//! those the caller vouched for as having no earlier copy stored (a new intent's spans, a new
//! object's records) and that this writer has not written lately ([`Recent`]): on a stream of
//! new intents the look-up was half of what ClickHouse spent (parsing a `SELECT` of 500-tuple
//! `IN` lists per 500 events).

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::error::{ClickHouseError, ErrorClass, RetryPolicy};
use super::rows::*;
use super::Clock;
use crate::logging::{Throttle, REPEATED_FAILURE_EVERY};
use crate::store::{Appended, StoreError};

/// Upper bound on rows per group, so one INSERT (and the latency of everyone waiting on it)
/// stays bounded when a backlog has built up.
pub const MAX_BATCH_ROWS: usize = 100_000;

/// Queue depth in requests. A full queue makes writers wait: the backpressure the OTLP receiver
/// turns into retryable refusals.
pub const QUEUE_DEPTH: usize = 4096;

/// Encoded rows of one request, by table.
#[derive(Default)]
pub struct Rows {
    pub attempts: Vec<AttemptRow>,
    pub readbacks: Vec<ReadbackRow>,
    pub records: Vec<RecordRow>,
    pub findings: Vec<FindingRow>,
    pub verdicts: Vec<VerdictRow>,
    pub escalations: Vec<EscalationRow>,
    pub outbox: Vec<OutboxRow>,
    pub routes: Vec<RouteRow>,
    pub meta: Vec<MetaRow>,
    pub lookups: Vec<LookupRow>,
}

impl Rows {
    pub fn len(&self) -> usize {
        self.attempts.len()
            + self.readbacks.len()
            + self.records.len()
            + self.findings.len()
            + self.verdicts.len()
            + self.escalations.len()
            + self.outbox.len()
            + self.routes.len()
            + self.meta.len()
            + self.lookups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a caller queued.
pub enum Request {
    /// Events: the writer decides which are new (the first copy of an identity wins) and
    /// answers one status per event. `unstored[i]`: the caller knows no earlier copy of event
    /// `i` can be stored (see [`crate::store::Store::append_unstored`]); shorter than `events`
    /// means "may be stored" for the rest.
    Append {
        events: Vec<EventRow>,
        unstored: Vec<bool>,
        reply: oneshot::Sender<Result<Vec<Appended>, StoreError>>,
    },
    /// Derived rows (verdicts, findings, escalations), written as they are.
    Write {
        rows: Rows,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

impl Request {
    fn len(&self) -> usize {
        match self {
            Request::Append { events, .. } => events.len(),
            Request::Write { rows, .. } => rows.len(),
        }
    }

    fn answer(self, result: Result<Vec<Appended>, StoreError>) {
        // A caller that gave up (dropped its future) no longer wants the answer.
        match self {
            Request::Append { reply, .. } => drop(reply.send(result)),
            Request::Write { reply, .. } => drop(reply.send(result.map(|_| ()))),
        }
    }
}

/// Identities this writer inserted or tried to lately, as 64-bit hashes in two generations of
/// [`Recent::GENERATION`] (~5 MiB in all). A caller's "no earlier copy is stored" can be
/// stale by the time its group is written: two exports of one new intent in flight at once both
/// say so, and so does a re-send of an export whose append outlived its deadline before the
/// engine took it in, or whose group failed after landing in part. The earlier copy must still
/// be found, so an identity met here (written, or attempted) is looked up whatever the hint. A
/// collision only costs a look-up.
struct Recent {
    current: HashSet<u64>,
    previous: HashSet<u64>,
    hasher: foldhash::quality::FixedState,
}

impl Recent {
    /// Identities per generation: far more than are written between a hint and the write it
    /// precedes (the exports queued ahead, the moments until the engine takes the intent in).
    const GENERATION: usize = 1 << 18;

    fn new() -> Recent {
        Recent {
            current: HashSet::new(),
            previous: HashSet::new(),
            hasher: foldhash::quality::FixedState::with_seed(0x7265_636b_6f6e),
        }
    }

    fn hash(&self, id: &Identity<'_>) -> u64 {
        self.hasher.hash_one(id)
    }

    fn contains(&self, id: &Identity<'_>) -> bool {
        let h = self.hash(id);
        self.current.contains(&h) || self.previous.contains(&h)
    }

    fn insert(&mut self, id: &Identity<'_>) {
        if self.current.len() >= Self::GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        let h = self.hash(id);
        self.current.insert(h);
    }
}

pub async fn run(
    client: ::clickhouse::Client,
    retry: RetryPolicy,
    clock: Arc<Clock>,
    mut rx: mpsc::Receiver<Request>,
) {
    let mut recent = Recent::new();
    while let Some(first) = rx.recv().await {
        let mut total = first.len();
        let mut batch = vec![first];
        while total < MAX_BATCH_ROWS {
            match rx.try_recv() {
                Ok(r) => {
                    total += r.len();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        commit(&client, &retry, &clock, &mut recent, batch).await;
    }
}

async fn commit(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    clock: &Clock,
    recent: &mut Recent,
    batch: Vec<Request>,
) {
    match write_group(client, retry, clock, recent, &batch).await {
        Ok(statuses) => {
            for (r, s) in batch.into_iter().zip(statuses) {
                r.answer(Ok(s));
            }
        }
        Err(e) if e.class == ErrorClass::BadData && batch.len() > 1 => {
            tracing::warn!(error = %e, requests = batch.len(), "group insert refused as bad data; retrying its requests one by one");
            for r in batch {
                let result =
                    write_group(client, retry, clock, recent, std::slice::from_ref(&r)).await;
                let result = result
                    .map(|mut s| s.pop().unwrap_or_default())
                    .map_err(StoreError::from);
                r.answer(result);
            }
        }
        Err(e) => {
            static LOG: Throttle = Throttle::new(REPEATED_FAILURE_EVERY);
            if let Some(held_back) = LOG.admit(&e.kind()) {
                tracing::error!(error = %e, requests = batch.len(), held_back, "group insert failed");
            }
            let msg = e.to_string();
            let mut first = Some(e);
            for r in batch {
                // The error itself goes to one caller; the others get its text (it is not Clone).
                let err = match first.take() {
                    Some(e) => StoreError::from(e),
                    None => StoreError::WriteFailed(msg.clone()),
                };
                r.answer(Err(err));
            }
        }
    }
}

/// Write one group: look up which of its event identities the database already holds, keep
/// only first copies, then one INSERT per table. Returns the statuses of each request (empty
/// for derived writes).
///
/// Only this task inserts events, one group at a time, so within one reckon process an
/// identity is never inserted twice: the lookup is exact, and so is skipping it for an intent
/// the engine vouched for that is not in [`Recent`]. Two processes appending the same identity
/// at the same instant can both insert it (so can two that both took one intent for new);
/// `load_events` then keeps the copy written first.
async fn write_group(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    clock: &Clock,
    recent: &mut Recent,
    batch: &[Request],
) -> Result<Vec<Vec<Appended>>, ClickHouseError> {
    let stored = lookup(client, retry, recent, batch).await?;
    let mut known: HashMap<Identity<'_>, &EventRow> = HashMap::with_capacity(stored.len());
    for r in &stored {
        // `stored` is in write order: an identity stored twice is known by its first copy.
        known.entry(r.identity()).or_insert(r);
    }
    let n_events = batch
        .iter()
        .map(|r| match r {
            Request::Append { events, .. } => events.len(),
            Request::Write { .. } => 0,
        })
        .sum::<usize>();
    let mut fresh = Rows::default();
    let mut statuses = Vec::with_capacity(batch.len());
    let mut at = clock.take(n_events as u64);
    for r in batch {
        let Request::Append { events, .. } = r else {
            statuses.push(Vec::new());
            continue;
        };
        let mut out = Vec::with_capacity(events.len());
        for e in events {
            let status = match known.get(&e.identity()) {
                None => {
                    known.insert(e.identity(), e);
                    let mut row = e.clone();
                    row.set_ingested_ns(at);
                    at += 1;
                    match row {
                        EventRow::Attempt(r) => fresh.attempts.push(r),
                        EventRow::Readback(r) => fresh.readbacks.push(r),
                        EventRow::Record(r) => fresh.records.push(r),
                    }
                    Appended::New
                }
                Some(first) => match (first.event(), e.event()) {
                    (Ok(a), Ok(b)) if a == b => Appended::Duplicate,
                    // A stored row that does not decode is not this event either.
                    _ => Appended::Conflict,
                },
            };
            out.push(status);
        }
        statuses.push(out);
    }
    let mut parts: Vec<&Rows> = vec![&fresh];
    for r in batch {
        if let Request::Write { rows, .. } = r {
            parts.push(rows);
        }
    }
    // Before the INSERT: a group that fails may still have landed in part, so a re-send of
    // it is looked up rather than taken on the engine's word.
    for e in fresh
        .attempts
        .iter()
        .map(|r| Identity::Attempt(&r.trace_id, &r.span_id))
        .chain(
            fresh
                .readbacks
                .iter()
                .map(|r| Identity::Readback(&r.trace_id, &r.span_id)),
        )
        .chain(
            fresh
                .records
                .iter()
                .map(|r| Identity::Record(&r.source, &r.object_id, &r.status, r.observed_ns)),
        )
    {
        recent.insert(&e);
    }
    insert_all(client, retry, &parts).await?;
    Ok(statuses)
}

/// Lookups per query: small enough for 18.16's `max_query_size` (256 KiB) and AST limit.
const LOOKUP_CHUNK: usize = 500;
const LOOKUP_BYTES: usize = 128 * 1024;

/// `SELECT` the stored rows of every event identity in the group that may be stored. Attempts
/// and read-backs are looked up by `(intent_id, trace_id, span_id)`, their tables' sorting key,
/// so the lookup reads only the granules of the group's intents: a re-send that changed a
/// span's intent id is not found, and is stored a second time under the other intent
/// (`load_events` still returns the first copy only). Records are looked up by their whole
/// identity, which is their sorting key. Skipped: events the caller vouched for (no earlier
/// copy can be stored) whose identity this writer did not insert lately.
async fn lookup(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    recent: &Recent,
    batch: &[Request],
) -> Result<Vec<EventRow>, ClickHouseError> {
    let mut attempts: Vec<(&str, &str, &str)> = Vec::new();
    let mut readbacks: Vec<(&str, &str, &str)> = Vec::new();
    let mut records: Vec<(&str, &str, &str, u64)> = Vec::new();
    for r in batch {
        if let Request::Append {
            events, unstored, ..
        } = r
        {
            for (i, e) in events.iter().enumerate() {
                let vouched = unstored.get(i).copied().unwrap_or(false);
                if vouched && !recent.contains(&e.identity()) {
                    continue;
                }
                match e {
                    EventRow::Attempt(a) => attempts.push((&a.intent_id, &a.trace_id, &a.span_id)),
                    EventRow::Readback(b) => {
                        readbacks.push((&b.intent_id, &b.trace_id, &b.span_id))
                    }
                    EventRow::Record(c) => {
                        records.push((&c.source, &c.object_id, &c.status, c.observed_ns))
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for keys in chunks(&attempts, |k| k.0.len() + k.1.len() + k.2.len()) {
        let rows: Vec<AttemptRow> = fetch_keys(
            client,
            retry,
            ATTEMPTS,
            "(intent_id, trace_id, span_id)",
            keys,
        )
        .await?;
        out.extend(rows.into_iter().map(EventRow::Attempt));
    }
    for keys in chunks(&readbacks, |k| k.0.len() + k.1.len() + k.2.len()) {
        let rows: Vec<ReadbackRow> = fetch_keys(
            client,
            retry,
            READBACKS,
            "(intent_id, trace_id, span_id)",
            keys,
        )
        .await?;
        out.extend(rows.into_iter().map(EventRow::Readback));
    }
    for keys in chunks(&records, |k| k.0.len() + k.1.len() + k.2.len() + 20) {
        let rows: Vec<RecordRow> = fetch_keys(
            client,
            retry,
            RECORDS,
            "(source, object_id, status, observed_ns)",
            keys,
        )
        .await?;
        out.extend(rows.into_iter().map(EventRow::Record));
    }
    // Rows stored twice (by two processes, or before this lookup existed): the first written
    // is the copy that counts.
    out.sort_by_key(|r| r.ingested_ns());
    Ok(out)
}

fn chunks<T>(keys: &[T], size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, k) in keys.iter().enumerate() {
        let b = size(k) * 2 + 16;
        if i > start && (i - start >= LOOKUP_CHUNK || bytes + b > LOOKUP_BYTES) {
            out.push(&keys[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += b;
    }
    if start < keys.len() {
        out.push(&keys[start..]);
    }
    out
}

/// A SQL tuple of values, `(a, b, c)`: what `IN` takes on every server (18.16 refuses an array
/// on the right of a tuple `IN`).
pub(super) struct SqlTuple<'a, T>(pub(super) &'a [T]);

impl<T: serde::Serialize> serde::Serialize for SqlTuple<'_, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(self.0.len())?;
        for x in self.0 {
            t.serialize_element(x)?;
        }
        t.end()
    }
}

async fn fetch_keys<T, K>(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    table: &'static str,
    key: &'static str,
    keys: &[K],
) -> Result<Vec<T>, ClickHouseError>
where
    T: ::clickhouse::RowOwned + ::clickhouse::RowRead,
    K: serde::Serialize,
{
    let q = client
        .query(&format!("SELECT ?fields FROM {table} WHERE {key} IN ?"))
        .bind(SqlTuple(keys));
    retry
        .run(
            || format!("look up stored identities in {table}"),
            || q.clone().fetch_all::<T>(),
        )
        .await
}

/// Insert `rows` now, from the caller's task, instead of queueing them behind the group commit
/// (a compare-and-set wants its read and its write as close together as possible).
pub async fn insert_now(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    rows: &Rows,
) -> Result<(), ClickHouseError> {
    insert_all(client, retry, &[rows]).await
}

/// One INSERT per table, in an order that keeps reads consistent if the group fails midway:
/// events before anything derived from them, notifications before the escalation changes they
/// announce (a change is never stored unannounced), escalations before the verdicts that name
/// them, findings and lookups before the verdict version that makes them current, a settled intent's routes
/// before the verdict that lets it leave memory, and the checkpoint after everything it covers.
async fn insert_all(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    parts: &[&Rows],
) -> Result<(), ClickHouseError> {
    insert(client, retry, ATTEMPTS, parts, |r| &r.attempts).await?;
    insert(client, retry, READBACKS, parts, |r| &r.readbacks).await?;
    insert(client, retry, RECORDS, parts, |r| &r.records).await?;
    insert(client, retry, OUTBOX, parts, |r| &r.outbox).await?;
    insert(client, retry, ESCALATIONS, parts, |r| &r.escalations).await?;
    insert(client, retry, FINDINGS, parts, |r| &r.findings).await?;
    insert(client, retry, LOOKUPS, parts, |r| &r.lookups).await?;
    insert(client, retry, ROUTES, parts, |r| &r.routes).await?;
    insert(client, retry, VERDICTS, parts, |r| &r.verdicts).await?;
    insert(client, retry, META, parts, |r| &r.meta).await?;
    Ok(())
}

async fn insert<T>(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    table: &'static str,
    parts: &[&Rows],
    pick: impl Fn(&Rows) -> &Vec<T>,
) -> Result<(), ClickHouseError>
where
    T: ::clickhouse::RowOwned + ::clickhouse::RowWrite + serde::Serialize,
{
    if parts.iter().all(|p| pick(p).is_empty()) {
        return Ok(());
    }
    retry
        .run(
            || format!("INSERT INTO {table}"),
            || async {
                let mut ins = client
                    .insert::<T>(table)
                    .await?
                    .with_timeouts(Some(super::SEND_TIMEOUT), Some(super::END_TIMEOUT));
                for p in parts {
                    for row in pick(p) {
                        ins.write(row).await?;
                    }
                }
                ins.end().await
            },
        )
        .await
}
