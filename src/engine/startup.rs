//! Start-up: what is read from the store before the engine serves (DESIGN.md "Memory and
//! history": what is open, not the history behind it), what is read back behind it while it
//! serves, and the derived rows made to converge with the rebuilt engine.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::core::{EngineCore, Stored};
use super::{back_off, Engine};
use crate::audit;
use crate::model::*;
use crate::store::{AnyStore, Derived, Store, StoreError};

/// How far before the checkpoint start-up reads events back. Receive times and the checkpoint
/// come from one clock that never goes back within a process ([`super::Progress::receive`]); the
/// margin covers what the store stamps on its own (ClickHouse's `ingested_ns`).
const CHECKPOINT_MARGIN: Dur = Dur::secs(1);

/// Routes read from the store per page while the filter fills after a start.
const ROUTE_PAGE: usize = 50_000;

/// What start-up loads (DESIGN.md "Memory and history"). With a checkpoint: the intents whose
/// stored verdict is not settled, the events received since the checkpoint (less a margin) and
/// the intents they name, with all their evidence, and every settled intent any of those
/// events reaches by a route; so start-up time follows what is open, not the history behind
/// it. Without one (a new store, or one written before checkpoints): everything. Returns the
/// events, whether settled history was left in the store, and the stored fingerprints.
pub(super) async fn load_unsettled(store: &AnyStore) -> Result<Loaded, StoreError> {
    let Some(checkpoint) = store.checkpoint().await? else {
        return Ok(Loaded {
            events: store.load_events().await?,
            routes: Vec::new(),
            asked: Default::default(),
            history_in_store: false,
            open_routes: store.routes_of_open_intents().await?,
            stored: Default::default(),
        });
    };
    // With every open intent's routes in the store, an event that reaches one finds it there:
    // the start reads only what the checkpoint's tail names and serves, and the open intents
    // are read back behind it (`restore_pending`).
    let open_routes = store.routes_of_open_intents().await?;
    // Each stage timed for the log: which one a slow start spends its time in.
    let started = Instant::now();
    let tail = store
        .events_received_since(checkpoint - CHECKPOINT_MARGIN)
        .await?;
    let unsettled = store.unsettled_intents().await?;
    let ids_at = started.elapsed();
    let mut intents: BTreeSet<String> = BTreeSet::new();
    let mut stored =
        foldhash::HashMap::with_capacity_and_hasher(unsettled.len(), Default::default());
    for u in unsettled {
        // An orphan record in its grace is always read now: a store written before orphans
        // had routes holds none that would find it.
        if !open_routes || u.intent_id.starts_with(audit::ORPHAN_PREFIX) {
            intents.insert(u.intent_id.clone());
        }
        stored.insert(
            u.intent_id,
            Stored {
                fingerprint: u.fingerprint,
                listed_at: u.listed_at,
            },
        );
    }
    let mut objects: BTreeSet<String> = intents
        .iter()
        .filter_map(|id| id.strip_prefix(audit::ORPHAN_PREFIX))
        .map(str::to_string)
        .collect();
    for e in &tail {
        match e {
            Event::Attempt(a) => intents.insert(a.intent_id.clone()),
            Event::Readback(r) => intents.insert(r.intent_id.clone()),
            Event::Record(r) => {
                intents.extend(r.intent_id.clone());
                objects.insert(r.object_id.clone())
            }
        };
    }
    let events = crate::store::evidence(
        store,
        intents.iter().cloned().collect(),
        objects.into_iter().collect(),
    )
    .await?;
    let evidence_at = started.elapsed();
    // An intent's own id reaches only itself, and these are loaded already.
    let routes: Vec<String> = tail
        .iter()
        .chain(&events)
        .flat_map(Event::routes)
        .filter(|r| r.strip_prefix("i:").is_none_or(|id| !intents.contains(id)))
        .collect();
    tracing::debug!(
        ids_ms = ids_at.as_millis() as u64,
        evidence_ms = (evidence_at - ids_at).as_millis() as u64,
        routes = routes.len(),
        "start-up read, by stage: the unsettled ids and the checkpoint's tail, their evidence"
    );
    let mut events = crate::store::EventSet::from(events);
    events.reserve(tail.len());
    for e in tail {
        events.insert(e);
    }
    Ok(Loaded {
        events: events.into_vec(),
        routes,
        asked: intents.into_iter().collect(),
        history_in_store: true,
        open_routes,
        stored,
    })
}

/// What start-up reads from the store ([`load_unsettled`]).
pub(super) struct Loaded {
    pub(super) events: Vec<Event>,
    /// The routes of those events that may reach settled intents in the store, to be asked.
    pub(super) routes: Vec<String>,
    /// The intents asked for by id (unsettled, or named since the checkpoint).
    pub(super) asked: foldhash::HashSet<String>,
    /// Settled intents were left in the store (their routes fill the filter behind serving).
    pub(super) history_in_store: bool,
    /// Every open intent's routes are in the store ([`Store::routes_of_open_intents`]): those
    /// not named since the checkpoint were left there, to be read back behind serving.
    pub(super) open_routes: bool,
    /// The stored verdicts of the unsettled intents (loaded, or left pending).
    pub(super) stored: foldhash::HashMap<String, Stored>,
}

/// Open intents read back per page behind the serving engine.
const PENDING_PAGE: usize = 10_000;

/// After a start that left open intents in the store: read them back a page at a time, as
/// events would bring them back ([`Engine::read_back`]), each due at once so the timer audits
/// it. An event that reaches one first brings it back itself.
pub(super) async fn restore_pending(engine: std::sync::Weak<Engine>) {
    let began = Instant::now();
    let mut failures = 0u32;
    loop {
        let Some(e) = engine.upgrade() else { return };
        let page = e.lock().pending_page(PENDING_PAGE);
        if page.is_empty() {
            tracing::info!(
                intents = e.intents(),
                elapsed_ms = began.elapsed().as_millis() as u64,
                "every open intent left in the store at start-up is in memory"
            );
            return;
        }
        match e.read_back(page, Vec::new(), &[]).await {
            Ok(()) => {
                failures = 0;
                e.wake.notify_one();
            }
            Err(err) => {
                drop(e);
                back_off(&mut failures, &err, "reading open intents back").await;
            }
        }
    }
}

/// Routes written per store call when a store from before routes were written for open intents
/// gets them.
const OPEN_ROUTES_PAGE: usize = 20_000;

/// Once, on a store from before open intents had their routes written: write the routes of
/// every intent in memory (this start read them all), then say so, so later starts may serve
/// before reading the open intents back. Intents that events reach meanwhile get theirs from
/// their steps; one whose step is not written yet is after the checkpoint, read at any start.
pub(super) async fn write_open_routes(engine: std::sync::Weak<Engine>) {
    let began = Instant::now();
    let Some(e) = engine.upgrade() else { return };
    let ids = e.lock().intent_ids();
    drop(e);
    let mut failures = 0u32;
    let mut written = 0usize;
    let mut pages = ids.chunks(OPEN_ROUTES_PAGE).peekable();
    loop {
        let Some(e) = engine.upgrade() else { return };
        let last = pages.peek().is_none();
        let derived = match pages.peek() {
            Some(page) => Derived {
                routes: e.lock().routes_of(page),
                ..Derived::default()
            },
            None => Derived {
                open_routes_complete: true,
                ..Derived::default()
            },
        };
        let routes = derived.routes.len();
        match e.store.put_derived(derived).await {
            Ok(()) => {
                failures = 0;
                written += routes;
                if last {
                    tracing::info!(
                        intents = ids.len(),
                        routes = written,
                        elapsed_ms = began.elapsed().as_millis() as u64,
                        "routes of the intents in memory written: later starts serve before reading open intents back"
                    );
                    return;
                }
                pages.next();
            }
            Err(err) => {
                drop(e);
                back_off(&mut failures, &err, "writing the open intents' routes").await;
            }
        }
    }
}

/// After a start that left settled history in the store: read its routes into the filter, a
/// chunk at a time under the core's lock, while the engine serves (every route is checked
/// against the store meanwhile). A failed scan starts over: inserting a route twice changes
/// nothing.
pub(super) async fn fill_route_filter(engine: std::sync::Weak<Engine>) {
    let began = Instant::now();
    let mut failures = 0u32;
    loop {
        let Some(store) = engine.upgrade().map(|e| Arc::clone(&e.store)) else {
            return;
        };
        // The engine may stop while the scan runs: each chunk finds it again, or stops the scan
        // (and then the engine is not found below either).
        let scan = store.scan_routes(ROUTE_PAGE, |chunk| {
            engine
                .upgrade()
                .map(|e| e.lock().fill_routes(chunk.iter().map(String::as_str)))
                .is_some()
        });
        match scan.await {
            Ok(routes) => {
                let Some(e) = engine.upgrade() else { return };
                e.lock().routes_filled();
                tracing::info!(
                    routes,
                    elapsed_ms = began.elapsed().as_millis() as u64,
                    "route filter filled from the store"
                );
                return;
            }
            Err(err) => back_off(&mut failures, &err, "reading routes for the filter").await,
        }
    }
}

/// Make the derived rows in the store converge to the rebuilt engine, whatever point a crash
/// interrupted the persister at. Every verdict the engine holds that differs from the stored one
/// (by fingerprint) is rewritten behind (the restore's outcome); what is left is stored verdicts
/// of intents that no longer exist. Only pseudo-intents (orphan records) ever stop existing: a
/// real intent's verdict outlives its events (raw events may expire, verdicts are kept), so only
/// `orphan:` rows are checked, and only those the start read (`asked` for as open, or whose
/// records it holds): an orphan at rest is not loaded, and is not stale for that. One that was
/// claimed before a crash lost the removal of its row was claimed by an event after the
/// checkpoint, which the start reads with the records it reaches. The store is asked about those
/// ids alone (and of objects only those with a record naming no intent: the others never were
/// orphans), so the check follows what the start read, not the orphans in the store's history.
/// Done before the engine serves, so no reader sees them once it is ready.
pub(super) async fn reconcile<'a>(
    store: &AnyStore,
    core: &EngineCore,
    asked: impl Iterator<Item = &'a str>,
) -> Result<(), StoreError> {
    let candidates: BTreeSet<String> = asked
        .filter(|id| id.starts_with(audit::ORPHAN_PREFIX))
        .map(str::to_string)
        .chain(
            core.objects_ever_unnamed()
                .map(|object| format!("{}{object}", audit::ORPHAN_PREFIX)),
        )
        .filter(|id| !core.holds(id))
        .collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let stale = store
        .stored_verdicts(candidates.into_iter().collect())
        .await?;
    if !stale.is_empty() {
        tracing::info!(
            verdicts = stale.len(),
            "removing stored verdicts of orphan records that now belong to an intent"
        );
        store.delete_verdicts(stale).await?;
    }
    Ok(())
}
