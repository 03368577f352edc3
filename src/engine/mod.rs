//! The engine service: the deterministic [`core::EngineCore`] behind a lock, fed by the one
//! ingest path, driven by the wall clock and a deadline timer, persisting what it concludes.
//!
//! Order of work for every export: append to the store (durable), then audit, then answer.
//! Verdicts are written behind, by one persister task: they are derived from the events and are
//! rebuilt on start-up if a crash loses them. Escalations are not: which findings opened one
//! depends on the order evidence arrived in, and a person acts on it, so a step that opens or
//! changes an escalation writes it to the store before anyone can see it (its intent's verdict,
//! the queue, the gauges, the log) and before the export is acknowledged, together with the
//! notifications that page someone about it (the outbox, see `crate::notify`). A person's claim
//! or resolution is durable, and announced the same way, before the API answers.
//!
//! The engine owns the contracts in force. A reload (SIGHUP) validates the whole directory
//! first, then swaps the set and re-audits what is in memory under the core lock, so no event
//! is judged half under one set and half under the other; its outcome is persisted like any
//! other step's.

pub mod core;
mod persister;
mod startup;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};
use tracing::Instrument;

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use self::core::{AuditOne, EngineCore, Outcome, Restore};
use crate::audit;
use crate::contract::{ContractError, Contracts};
use crate::escalation::{EscalationBook, EscalationError};
use crate::metrics::Metrics;
use crate::model::*;
use crate::notify::{Notifier, OutboxItem};
use crate::store::{event_kind, AnyStore, Appended, Derived, Store, StoreError, Swap};
use persister::persist_loop;
/// The engine's filter of the routes that may reach an intent out of memory.
pub type RouteFilter = crate::bloom::Bloom;
use startup::{
    fill_route_filter, load_unsettled, reconcile, restore_pending, write_open_routes, Loaded,
};

use crate::clock::wall_now;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Escalation(#[from] EscalationError),
    /// A person's action lost every compare-and-set it tried (HTTP 409).
    #[error("{0}")]
    Conflict(String),
}

/// Why a reload left the contracts in force as they were.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The directory did not validate (file, line and field named).
    #[error("contracts not reloaded: {0}")]
    Invalid(#[from] ContractError),
    #[error("reloading contracts failed: {0}")]
    Task(String),
}

/// What a reload changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Contracts added, removed or with another version, by name.
    pub changed: Vec<String>,
    /// Intents in memory judged again under the new set (none when nothing changed).
    pub reaudited: usize,
    /// Of those, the verdicts that changed (at least their `contract_version`).
    pub verdicts: usize,
    /// Intents in memory a shutdown left for the next start to judge under the new set.
    pub left: usize,
}

/// Compare-and-set rounds a person's action tries before answering a conflict.
const PERSON_ACTION_TRIES: u32 = 5;

/// What [`Engine::ingest`] did with an export's events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ingested {
    /// Events stored for the first time.
    pub new: usize,
    /// The events whose identity the store already held with other content
    /// ([`Appended::Conflict`]), each with its position in the events handed in: the first
    /// copy stays and these were not stored, so the caller must refuse them in its answer,
    /// never acknowledge them.
    pub conflicts: Vec<(usize, Event)>,
}

pub struct Engine {
    core: Mutex<EngineCore>,
    /// The contracts in force, for whoever reads them outside the core (ingest's decoders,
    /// the API): swapped whole, and only while the core lock is held, so it always equals the
    /// set the core judges by once the swap's step is done.
    contracts: RwLock<Arc<Contracts>>,
    /// Reloads, one at a time: each reads the directory after the previous one swapped.
    reloads: tokio::sync::Mutex<()>,
    /// Set at shutdown: a reload's re-audit stops at its next page ([`Engine::stop_reloads`]).
    reloads_stopped: AtomicBool,
    store: Arc<AnyStore>,
    metrics: Arc<Metrics>,
    /// Wakes the timer when a new, earlier deadline may have been booked. Shared with the timer
    /// task so that, while it sleeps, it holds no reference to the engine.
    wake: Arc<Notify>,
    /// Claims and resolutions, one at a time: each is made durable before the book changes.
    person_actions: tokio::sync::Mutex<()>,
    /// Taken on shutdown so the persister sees the end of the stream and finishes.
    persist: Mutex<Option<mpsc::UnboundedSender<Outcome>>>,
    /// What the persister has made durable, and the exports it must not checkpoint past.
    progress: Arc<Progress>,
    durability: Durability,
    append_deadline: Duration,
    max_unwritten_verdicts: usize,
    /// With `[[notify]]` targets: every escalation change is written together with the
    /// notifications that announce it (the outbox), in the same durable write.
    notifier: Option<Arc<Notifier>>,
    /// Said once: the route filter reached the most it may take ([`Engine::publish_memory`]).
    route_filter_full_told: AtomicBool,
}

/// The engine's background tasks; awaited on shutdown so nothing concluded is left unwritten.
pub struct EngineTasks {
    timer: JoinHandle<()>,
    persister: JoinHandle<()>,
}

/// Tuning of the engine's background work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// How long the persister gathers verdicts before writing them (default 50 ms): an intent's
    /// events tend to arrive together, and each write of its verdict costs a row and a document.
    pub persist_linger: Duration,
    /// How long an intent at rest ([`crate::model::Rest`]: no deadline, no open escalation)
    /// stays in memory before it leaves, to come back from the store when an event touches it
    /// (default 60 s: late webhooks and read-backs usually arrive sooner). `None`: never.
    pub evict_after: Option<Duration>,
    /// How long an export waits for the store to make it durable before it is refused as
    /// retryable (UNAVAILABLE / 503 with a retry hint; default 5 s). Exporters time out after
    /// 10-30 s: refusing sooner keeps their queues moving and their retries honest.
    pub append_deadline: Duration,
    /// Bytes of the first stage of the filter of routes to intents out of memory
    /// ([`RouteFilter`]), allocated and touched at start (default 32 MiB: ~36M routes, about
    /// 10-14M intents at rest, before the next stage).
    pub route_filter_bytes: usize,
    /// The most the route filter may grow to (default 512 MiB: 32 + 64 + 128 + 256 MiB, ~11
    /// times the first stage's routes). Past it false positives rise, each a store lookup.
    pub route_filter_max_bytes: usize,
    /// How long raw events of settled intents are kept (`None`, the default: for ever).
    pub retention: Option<Duration>,
    /// Verdicts the persister may fall behind by before new exports are refused (retryably)
    /// and the deadline timer waits (default 65,536: ~2.6 KB each, ~170 MB at most). The
    /// writer normally keeps up; this bounds memory when it cannot (a slow disk, a wave of a
    /// million deadlines falling due together).
    pub max_unwritten_verdicts: usize,
    /// Read the open intents a start left in the store back behind the serving engine, a page
    /// at a time (default: yes). Without it they come back only when an event, or a person's
    /// action, reaches them: for tests of exactly that.
    pub read_back_open: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            persist_linger: Duration::from_millis(50),
            evict_after: Some(Duration::from_secs(60)),
            append_deadline: Duration::from_secs(5),
            route_filter_bytes: 32 << 20,
            route_filter_max_bytes: 512 << 20,
            retention: None,
            max_unwritten_verdicts: 1 << 16,
            read_back_open: true,
        }
    }
}

/// Shared between the engine and its persister: the exports received but not yet concluded
/// (the checkpoint never passes the oldest), and the last step the store has made durable.
#[derive(Default)]
struct Progress {
    inflight: Mutex<Inflight>,
    durable: AtomicU64,
    /// Verdicts handed to the persister and not yet written (each counted as handed out, so
    /// an intent concluded twice before its write counts twice): what memory holds for it.
    unwritten: AtomicUsize,
}

#[derive(Default)]
struct Inflight {
    next: u64,
    /// The latest receive time handed out: the clock is read through it, so it never goes
    /// back (a stepped wall clock would otherwise put an export before a checkpoint taken
    /// while it was in flight).
    last: Timestamp,
    received: BTreeSet<(Timestamp, u64)>,
}

impl Inflight {
    fn now(&mut self) -> Timestamp {
        self.last = self.last.max(wall_now());
        self.last
    }
}

impl Progress {
    fn inflight(&self) -> MutexGuard<'_, Inflight> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An export received now: its receive time, held until the guard drops (after its
    /// outcome is queued for the persister, or it failed).
    fn receive(self: &Arc<Self>) -> Received {
        let mut i = self.inflight();
        // Read under the lock, so the checkpoint (read under it too) is never past it.
        let at = i.now();
        i.next += 1;
        let key = (at, i.next);
        i.received.insert(key);
        Received {
            progress: self.clone(),
            key,
        }
    }

    /// Every export received before this instant has its outcome queued for the persister.
    fn settled_before(&self) -> Timestamp {
        let mut i = self.inflight();
        match i.received.first() {
            Some((at, _)) => *at,
            None => i.now(),
        }
    }
}

struct Received {
    progress: Arc<Progress>,
    key: (Timestamp, u64),
}

impl Drop for Received {
    fn drop(&mut self) {
        self.progress.inflight().received.remove(&self.key);
    }
}

/// Due intents re-audited per step of the deadline timer, so a wave is written in pieces while
/// exports go on being served between them.
const TICK_PAGE: usize = 4096;

/// How long a reload's next page waits while the persister has no room for it.
const BEHIND_PAUSE: Duration = Duration::from_millis(10);

/// Rounds of bringing intents back for one batch: each round may name intents the previous
/// one's events concern. Linked evidence rarely chains beyond two.
const REHYDRATE_ROUNDS: usize = 16;

/// Escalation changes computed but not yet durable, and who waits for them. A step registers
/// its changes while it still holds the core lock, so a reader that takes the lock and finds
/// nothing registered for an intent knows everything it can see of it is in the store.
#[derive(Default)]
struct Durability {
    pending: Mutex<PendingEscalations>,
    /// Steps with changes in flight: readers skip the map while it is zero.
    in_flight: std::sync::atomic::AtomicUsize,
    done: Notify,
}

#[derive(Default)]
struct PendingEscalations {
    /// Intents with an escalation change in flight, and how many.
    intents: HashMap<String, usize>,
    /// Escalations opened (version 1) and not yet durable: the gauges leave them out.
    opened: u64,
}

impl Durability {
    fn pending(&self) -> MutexGuard<'_, PendingEscalations> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hold(&self, escalations: &[Escalation]) {
        let mut p = self.pending();
        for e in escalations {
            *p.intents.entry(e.intent_id.clone()).or_default() += 1;
            if e.version == 1 {
                p.opened += 1;
            }
        }
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn release(&self, escalations: &[Escalation]) {
        let mut p = self.pending();
        for e in escalations {
            if let Some(n) = p.intents.get_mut(&e.intent_id) {
                *n -= 1;
                if *n == 0 {
                    p.intents.remove(&e.intent_id);
                }
            }
            if e.version == 1 {
                p.opened = p.opened.saturating_sub(1);
            }
        }
        drop(p);
        self.in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.done.notify_waiters();
    }

    fn holds(&self, intent_id: &str) -> bool {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0
            && self.pending().intents.contains_key(intent_id)
    }

    fn opened(&self) -> u64 {
        if self.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            return 0;
        }
        self.pending().opened
    }
}

/// What a step concluded, once queued for the persister: escalation changes to make durable
/// (held back from readers until then) and what to count and log after.
struct Concluded {
    /// Nothing changed: nothing to write, count or log.
    nothing: bool,
    hold: Vec<Escalation>,
    /// The notifications announcing `hold`, written with it.
    outbox: Vec<OutboxItem>,
    new_findings: Vec<(Option<String>, Finding)>,
    opened: Vec<Escalation>,
}

/// How long a verdict read waits for its intent's escalation to become durable before it
/// answers without the engine (the API then reads the store's copy).
const VISIBILITY_WAIT: Duration = Duration::from_secs(10);

impl Engine {
    /// Rebuild state from the store, then start the deadline timer and the persister.
    pub async fn start(
        contracts: Arc<Contracts>,
        store: Arc<AnyStore>,
        metrics: Arc<Metrics>,
    ) -> Result<(Arc<Engine>, EngineTasks), StoreError> {
        Self::start_with(contracts, store, metrics, EngineOptions::default()).await
    }

    /// [`Engine::start`] with explicit [`EngineOptions`].
    pub async fn start_with(
        contracts: Arc<Contracts>,
        store: Arc<AnyStore>,
        metrics: Arc<Metrics>,
        options: EngineOptions,
    ) -> Result<(Arc<Engine>, EngineTasks), StoreError> {
        Self::start_notifying(contracts, store, metrics, options, None).await
    }

    /// [`Engine::start_with`], announcing every escalation change to `notifier`'s targets
    /// through the store's outbox.
    pub async fn start_notifying(
        contracts: Arc<Contracts>,
        store: Arc<AnyStore>,
        metrics: Arc<Metrics>,
        options: EngineOptions,
        notifier: Option<Arc<Notifier>>,
    ) -> Result<(Arc<Engine>, EngineTasks), StoreError> {
        let began = Instant::now();
        let Loaded {
            events,
            routes,
            asked,
            history_in_store,
            open_routes,
            stored,
        } = load_unsettled(&store).await?;
        let read = began.elapsed();
        let n_events = events.len();
        let for_core = contracts.clone();
        let evict_after = options
            .evict_after
            .map(|d| Dur(d.as_nanos().min(i64::MAX as u128) as i64));
        let (filter_bytes, filter_max) =
            (options.route_filter_bytes, options.route_filter_max_bytes);
        // The intents asked for are most of what the ledger will hold: their escalations are
        // read while it is built, the few others' (reached, named by a record) after.
        let build = tokio::task::spawn_blocking(move || {
            // Nothing is audited here: everything loaded is due now, and the timer audits it a
            // page at a time behind the serving engine, writing only what changed while the
            // process was down (deadlines passed, a crash's unwritten tail).
            let restore = Restore {
                events,
                escalations: Vec::new(),
                stored,
            };
            let mut core = EngineCore::restore_from(for_core, restore, wall_now())
                .with_eviction(evict_after)
                .with_route_filter(RouteFilter::new(filter_bytes, true).growing_to(filter_max));
            if history_in_store {
                core.routes_in_store();
            }
            core
        });
        // Three independent parts on however many cores there are: the ledger, the settled
        // intents the loaded routes reach, and the loaded intents' escalations.
        let here = |id: &str| asked.contains(id);
        let (core, reached, escalations, counts) = tokio::join!(
            build,
            crate::store::reached(&*store, routes, here),
            store.escalations_of(asked.iter().cloned().collect()),
            store.escalation_counts(),
        );
        let mut core = core.map_err(|e| StoreError::Task(e.to_string()))?;
        let (_, reached) = reached?;
        let mut escalations = escalations?;
        let counts = counts?;
        let built = began.elapsed();
        let mut core = tokio::task::spawn_blocking(move || {
            core.restore_more(reached, wall_now());
            core
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?;
        // Where the intents loaded without their stored verdict are listed: the store knows.
        let listed: foldhash::HashMap<String, Timestamp> = store
            .listed_of(core.unplaced())
            .await?
            .into_iter()
            .collect();
        core.place(&listed);
        // An intent's escalations are in memory while it is, and only while it is.
        let rest: Vec<String> = core
            .intent_ids()
            .into_iter()
            .filter(|id| !asked.contains(id))
            .collect();
        escalations.extend(store.escalations_of(rest).await?);
        escalations.retain(|e| core.holds(&e.intent_id));
        let n_escalations = escalations.len();
        core.restore_escalations(escalations, counts);
        tracing::debug!(
            parallel_ms = (built - read).as_millis() as u64,
            rest_ms = (began.elapsed() - built).as_millis() as u64,
            "start-up after the read: the ledger, reached routes and escalations at once, then the rest"
        );
        tracing::info!(
            events = n_events,
            escalations = n_escalations,
            intents = core.intents(),
            open_in_store = core.pending(),
            to_audit = core.unaudited(),
            settled_history_in_store = history_in_store,
            read_ms = read.as_millis() as u64,
            elapsed_ms = began.elapsed().as_millis() as u64,
            "engine state rebuilt from the store"
        );
        reconcile(&store, &core, asked.iter().map(String::as_str)).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let wake = Arc::new(Notify::new());
        let progress = Arc::new(Progress::default());
        metrics.set_contracts(versions(&contracts));
        let engine = Arc::new(Engine {
            core: Mutex::new(core),
            contracts: RwLock::new(contracts.clone()),
            reloads: tokio::sync::Mutex::new(()),
            reloads_stopped: AtomicBool::new(false),
            store: store.clone(),
            metrics,
            wake: wake.clone(),
            person_actions: tokio::sync::Mutex::new(()),
            persist: Mutex::new(Some(tx)),
            progress: progress.clone(),
            durability: Durability::default(),
            append_deadline: options.append_deadline,
            max_unwritten_verdicts: options.max_unwritten_verdicts,
            notifier,
            route_filter_full_told: AtomicBool::new(false),
        });
        engine.publish_gauges();
        let timer = tokio::spawn(timer_loop(Arc::downgrade(&engine), wake.clone()));
        let persister = tokio::spawn(persist_loop(
            store,
            rx,
            options.persist_linger,
            progress,
            wake,
        ));
        if history_in_store {
            tokio::spawn(fill_route_filter(Arc::downgrade(&engine)));
        }
        if options.read_back_open && engine.lock().pending() > 0 {
            tokio::spawn(restore_pending(Arc::downgrade(&engine)));
        }
        if !open_routes {
            tokio::spawn(write_open_routes(Arc::downgrade(&engine)));
        }
        if let Some(retention) = options.retention {
            tokio::spawn(expire_loop(Arc::downgrade(&engine), retention));
        }
        Ok((engine, EngineTasks { timer, persister }))
    }

    fn lock(&self) -> MutexGuard<'_, EngineCore> {
        // A panic while holding the lock would be a bug in the pure core; the state it guards
        // is still a valid cache of the store, so keep serving rather than poison every request.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one ingest path: durable first, then audited. Returns how many events were new.
    ///
    /// Runs to completion even if the caller stops waiting (an exporter's deadline drops the
    /// request future): once the store has the events, the engine must see them too, or a
    /// re-send (deduplicated by the store) would never reach the audit until a restart.
    /// `hold` (an admission permit) is kept until the work is done, not until the caller leaves.
    pub async fn ingest(
        self: &Arc<Self>,
        events: Vec<Event>,
        received: Instant,
        hold: impl Send + 'static,
    ) -> Result<Ingested, StoreError> {
        if events.is_empty() {
            return Ok(Ingested::default());
        }
        let engine = self.clone();
        let deadline = self.append_deadline;
        // reckon's own trace of the export (setting `self_traces`) follows the work.
        let span = tracing::info_span!("engine.ingest", events = events.len());
        let work = tokio::spawn(
            async move {
                let done = engine.ingest_to_completion(events, received).await;
                drop(hold);
                done
            }
            .instrument(span),
        );
        // The work goes on (holding its admission permit, so new exports are refused while the
        // store hangs), but the client hears within the deadline, plus a moment for the
        // escalations an append may open: they are written before anything is acknowledged.
        match tokio::time::timeout(deadline + Duration::from_secs(1), work).await {
            Ok(joined) => joined.map_err(|e| StoreError::Task(e.to_string()))?,
            Err(_) => Err(StoreError::Timeout(deadline)),
        }
    }

    async fn ingest_to_completion(
        &self,
        events: Vec<Event>,
        received: Instant,
    ) -> Result<Ingested, StoreError> {
        let began = Instant::now();
        // Held until the outcome is queued for the persister: the checkpoint stays before it.
        let receipt = self.progress.receive();
        // A write that outlives the deadline may still land: the client's retry then finds it
        // stored (a duplicate) and the engine takes it in then.
        let append = self
            .store
            .append_received(events.clone(), receipt.key.0)
            .instrument(tracing::info_span!("store.append", events = events.len()));
        let stored = match tokio::time::timeout(self.append_deadline, append).await {
            Ok(stored) => stored?,
            Err(_) => return Err(StoreError::Timeout(self.append_deadline)),
        };
        self.metrics.store_append(began.elapsed());
        let mut new = 0;
        let mut conflicts = Vec::new();
        let mut kept = Vec::with_capacity(events.len());
        // Counted before taking the lock: classifying needs only the contracts.
        let contracts = self.contracts();
        for (i, (e, status)) in events.into_iter().zip(stored).enumerate() {
            match status {
                Appended::New => {
                    new += 1;
                    match &e {
                        Event::Attempt(a) => {
                            let contract = match contracts.for_tool(&a.tool) {
                                Some(c) => c,
                                None => audit::fallback_contract(),
                            };
                            self.metrics
                                .tool_attempt(&a.tool, audit::classify(a, contract).as_str());
                        }
                        Event::Record(r) => self.metrics.records_received(&r.source, 1),
                        Event::Readback(_) => {}
                    }
                    kept.push(e);
                }
                Appended::Duplicate => kept.push(e),
                // The store kept the first copy; so does the engine, whichever of two
                // concurrent exports reaches the core first.
                // The caller refuses it in its answer (partial success, `rejected`), so nothing
                // acknowledged is silently dropped.
                Appended::Conflict => {
                    self.metrics.conflicting_resend(event_kind(&e));
                    conflicts.push((i, e));
                }
                // Not stored (a time no store can hold; ingest refuses these first): not audited.
                Appended::Refused => self.metrics.rejection("unholdable", 1),
            }
        }
        // Exact re-sends go to the core too, not only what the store called new: the ledger
        // ignores what it already has, and an event the store has but the engine missed is
        // taken in on its next re-send. Conflicting copies do not: the store dropped them.
        //
        // Settled intents these events concern come back from the store first, so the events
        // are judged against the whole history; if an intent left memory meanwhile, the step
        // checks again, so nothing can leave in between.
        let mut kept = Some(kept);
        for _ in 0..=REHYDRATE_ROUNDS {
            let batch = kept.take().unwrap_or_default();
            let (routes, evictions) = {
                let core = self.lock();
                (core.routes_to_check(&batch), core.evictions())
            };
            if !routes.is_empty() {
                self.read_back(Vec::new(), routes, &batch).await?;
            }
            let mut leftover = None;
            self.step(|core| {
                if core.evictions() == evictions || core.routes_to_check(&batch).is_empty() {
                    core.ingest(batch, wall_now())
                } else {
                    leftover = Some(batch);
                    Outcome::default()
                }
            })
            .await;
            match leftover {
                None => break,
                Some(b) => kept = Some(b),
            }
        }
        if let Some(batch) = kept {
            // Still touching intents that keep leaving: take it in as it is rather than never.
            tracing::warn!(
                events = batch.len(),
                "ingesting without bringing every settled intent back"
            );
            self.step(|core| core.ingest(batch, wall_now())).await;
        }
        self.metrics.verdict_latency(received.elapsed());
        self.wake.notify_one();
        Ok(Ingested { new, conflicts })
    }

    /// One step of the core: computed and queued for the persister under the lock (so
    /// outcomes reach it in the order they were computed), then its escalation changes made
    /// durable, and only then counted and announced.
    async fn step(&self, f: impl FnOnce(&mut EngineCore) -> Outcome) {
        let concluded = {
            let _audit = tracing::info_span!("audit.step").entered();
            let mut core = self.lock();
            let out = f(&mut core);
            self.conclude(&core, out, true)
        };
        self.finish(concluded).await;
    }

    async fn finish(&self, mut concluded: Concluded) {
        if !concluded.hold.is_empty() {
            let outbox = std::mem::take(&mut concluded.outbox);
            self.make_durable(&concluded.hold, outbox).await;
            self.durability.release(&concluded.hold);
        }
        self.announce(concluded);
    }

    /// Write escalations until the store takes them. They are the audit's record of what a
    /// person must look at: never dropped, never shown unwritten. While the store refuses, the
    /// export that caused them stays unacknowledged and keeps its admission permit, so new
    /// exports are refused (retryably) instead of piling up.
    /// The notifications announcing them (`outbox`) are in the same write.
    async fn make_durable(&self, escalations: &[Escalation], outbox: Vec<OutboxItem>) {
        let mut failures = 0u32;
        loop {
            let written = if outbox.is_empty() {
                self.store.put_escalations(escalations.to_vec()).await
            } else {
                self.store
                    .put_derived(Derived {
                        escalations: escalations.to_vec(),
                        outbox: outbox.clone(),
                        ..Derived::default()
                    })
                    .await
            };
            match written {
                Ok(()) => {
                    if !outbox.is_empty() {
                        self.wake_notifier();
                    }
                    return;
                }
                Err(e) => {
                    failures += 1;
                    tracing::error!(error = %e, failures, "writing escalations failed; retrying before they are shown");
                    tokio::time::sleep(Duration::from_millis(100u64 << failures.min(5))).await;
                }
            }
        }
    }

    /// The verdict the engine holds now, without waiting for an escalation write in flight: for
    /// figures (a gauge's tool label), never to show a person or an executor.
    pub fn cached_verdict(&self, intent_id: &str) -> Option<Arc<Verdict>> {
        self.lock().shared_verdict(intent_id)
    }

    /// The intent's verdict as the engine holds it. While a change of its escalation is being
    /// written, waits for it (the verdict names the escalation and says `escalate`); `None` if
    /// the engine does not hold the intent, or the write takes longer than the API should wait.
    pub async fn verdict(&self, intent_id: &str) -> Option<Arc<Verdict>> {
        let deadline = tokio::time::Instant::now() + VISIBILITY_WAIT;
        loop {
            let done = self.durability.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            {
                let core = self.lock();
                if !self.durability.holds(intent_id) {
                    return core.shared_verdict(intent_id);
                }
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return None;
            }
        }
    }

    /// The contract in force that `v` names (it may have been reloaded since `v` was computed:
    /// compare `v.contract_version` with its `version`).
    pub fn contract_of(&self, v: &Verdict) -> Option<crate::contract::Contract> {
        let name = v.contract.as_deref()?;
        self.contracts().by_name(name).cloned()
    }

    /// The contracts in force now (a snapshot: a reload swaps in a new set, this one stays as
    /// it is for whoever holds it).
    pub fn contracts(&self) -> Arc<Contracts> {
        self.contracts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reload the contracts from `dir`: validate every file first; on an error, log it (file,
    /// line, field), count it and keep the contracts in force. Otherwise swap the set and
    /// re-audit every intent in memory under it, in one step under the core lock: events
    /// ingested meanwhile wait for the lock and are judged under the new set; the outcome is
    /// persisted like any step's, escalations it opens durable before they are visible.
    /// Settled intents out of memory keep their stored verdicts until an event brings them
    /// back, when they are judged under the new set too.
    pub async fn reload_contracts(self: &Arc<Self>, dir: &Path) -> Result<Reloaded, ReloadError> {
        let _one_at_a_time = self.reloads.lock().await;
        let result = self.reload_from(dir).await;
        self.metrics.contract_reload(result.is_ok());
        match &result {
            Ok(r) if r.changed.is_empty() => {
                tracing::info!(dir = %dir.display(), "contracts reloaded: nothing changed")
            }
            Ok(r) if r.left > 0 => tracing::info!(
                dir = %dir.display(),
                changed = ?r.changed,
                reaudited = r.reaudited,
                verdicts_changed = r.verdicts,
                left = r.left,
                "contracts reloaded, cut short by shutdown: in force; the intents left are judged under them at the next start"
            ),
            Ok(r) => tracing::info!(
                dir = %dir.display(),
                changed = ?r.changed,
                reaudited = r.reaudited,
                verdicts_changed = r.verdicts,
                "contracts reloaded: intents in memory re-audited under the new contracts"
            ),
            Err(ReloadError::Invalid(ContractError::Invalid {
                file,
                line,
                field,
                message,
            })) => tracing::error!(
                file = %file.display(),
                line,
                field = field.as_str(),
                error = %message,
                "contracts not reloaded: {}:{line}: field `{field}`: {message}; the contracts in force stay",
                file.display()
            ),
            Err(e) => tracing::error!(
                dir = %dir.display(),
                error = %e,
                "contracts not reloaded; the contracts in force stay"
            ),
        }
        result
    }

    async fn reload_from(self: &Arc<Self>, dir: &Path) -> Result<Reloaded, ReloadError> {
        let path = dir.to_path_buf();
        let loaded = tokio::task::spawn_blocking(move || crate::contract::load_dir(&path))
            .await
            .map_err(|e| ReloadError::Task(e.to_string()))??;
        let new = Arc::new(Contracts::new(loaded));
        if new.contracts.is_empty() {
            tracing::warn!(dir = %dir.display(), "no contracts in the directory: only spans carrying reckon.intent.id will be audited");
        }
        let engine = self.clone();
        // Off the async workers: the swap may link every event again (a record kind changed).
        let swapped = tokio::task::spawn_blocking(move || {
            let mut core = engine.lock();
            let old = engine.contracts();
            // Also a reorder (which file comes first picks the contract of an orphan record's
            // kind) re-audits, though no version changed.
            if versions(&old) == versions(&new) {
                return None;
            }
            let changed = changed_contracts(&old, &new);
            *engine.contracts.write().unwrap_or_else(|p| p.into_inner()) = new.clone();
            let (out, ids) = core.swap_contracts(new);
            Some((engine.conclude(&core, out, true), ids, changed))
        })
        .await
        .map_err(|e| ReloadError::Task(e.to_string()))?;
        let Some((concluded, ids, changed)) = swapped else {
            return Ok(Reloaded::default());
        };
        self.finish(concluded).await;
        self.metrics.set_contracts(versions(&self.contracts()));
        // Every intent in memory judged again, a page at a time with the lock released in
        // between: a million open intents take seconds to re-audit, and exports, the timer
        // and person actions go on meanwhile. Paced by what waits to be written, with room
        // left for exports' verdicts, so a reload's are never all held at once and do not
        // crowd out live traffic.
        let mut verdicts = 0;
        let mut reaudited = 0;
        for page in ids.chunks(TICK_PAGE) {
            let stopped = || self.reloads_stopped.load(Ordering::Acquire);
            while !self.room_for_background() && !stopped() {
                tokio::time::sleep(BEHIND_PAUSE).await;
            }
            if stopped() {
                // Logged by `reload_contracts` with what was left.
                break;
            }
            let engine = self.clone();
            let page = page.to_vec();
            let n = page.len();
            let (concluded, changed_here) = tokio::task::spawn_blocking(move || {
                let mut core = engine.lock();
                let out = core.reaudit_with(&page, wall_now(), audit_on_every_core);
                let n = out.verdicts.len();
                (engine.conclude(&core, out, true), n)
            })
            .await
            .map_err(|e| ReloadError::Task(e.to_string()))?;
            verdicts += changed_here;
            reaudited += n;
            self.finish(concluded).await;
            // The page's deadlines were booked again under the new windows, maybe earlier
            // than the one the timer sleeps until.
            self.wake.notify_one();
        }
        self.wake.notify_one();
        Ok(Reloaded {
            changed,
            reaudited,
            verdicts,
            left: ids.len() - reaudited,
        })
    }

    pub fn intents(&self) -> usize {
        self.lock().intents()
    }

    /// Shutdown: a reload under way stops at its next page, and one that begins after only
    /// swaps the contracts in. Each page it judged is durable (its escalations before the next
    /// page); what it leaves is judged under the new contracts by the next start, which loads
    /// every open intent. A shutdown does not wait for a million re-audits.
    pub fn stop_reloads(&self) {
        self.reloads_stopped.store(true, Ordering::Release);
    }

    /// Everything known about one intent (its events and its objects' observations), read-only.
    pub fn history(&self, intent_id: &str) -> Option<audit::History> {
        self.lock().history(intent_id)
    }

    /// The earliest re-audit booked: when it lies in the past for long, the timer is stuck.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.lock().next_deadline()
    }

    /// A person claims an escalation. Checked against the store and durable before it returns,
    /// and before anyone else sees it.
    /// One someone else holds is taken over only with `take_over` (recorded on it).
    pub async fn claim(
        self: &Arc<Self>,
        id: &str,
        by: &str,
        take_over: bool,
    ) -> Result<Escalation, EngineError> {
        let by = by.to_string();
        self.person_action(id, move |book, id, _| {
            book.claimed(id, &by, wall_now(), take_over)
        })
        .await
    }

    /// A person resolves an escalation. Checked against the store and durable before it
    /// returns, and before anyone else sees it. One someone else claimed is resolved only with
    /// `take_over` (recorded on it).
    pub async fn resolve(
        self: &Arc<Self>,
        id: &str,
        by: &str,
        resolution: &str,
        note: Option<&str>,
        take_over: bool,
    ) -> Result<Escalation, EngineError> {
        let (by, resolution, note) = (
            by.to_string(),
            resolution.to_string(),
            note.map(str::to_string),
        );
        self.person_action(id, move |book, id, verdict| {
            book.resolved(
                id,
                &by,
                &resolution,
                note.as_deref(),
                wall_now(),
                verdict,
                take_over,
            )
        })
        .await
    }

    /// A conditional write on what the store holds, not a decision from this process's memory:
    /// the escalation is read from the store (another instance, or a person through another
    /// instance, may have acted on it), the action is computed from that copy, and written only
    /// if the store still holds it (compare-and-set). On a lost race the action is computed
    /// again from the newer copy, so a claim by someone else comes back as "already claimed
    /// by" them (409). Runs to completion even if the caller leaves, and one at a time within
    /// the process.
    async fn person_action(
        self: &Arc<Self>,
        id: &str,
        change: impl Fn(&EscalationBook, &str, Option<&Verdict>) -> Result<Escalation, EscalationError>
            + Send
            + 'static,
    ) -> Result<Escalation, EngineError> {
        let engine = self.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            let _one_at_a_time = engine.person_actions.lock().await;
            for attempt in 0..PERSON_ACTION_TRIES {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
                }
                // This process's own changes of the escalation reach the store first.
                let intent = engine.lock().book().get(&id).map(|e| e.intent_id.clone());
                if let Some(intent) = intent {
                    engine.wait_durable(&intent).await;
                }
                let Some(stored) = engine.store.get_escalation(&id).await? else {
                    return Err(EscalationError::NotFound(id.clone()).into());
                };
                // An intent a start has not read back yet (or one that left memory) comes back
                // first: the person acts on its verdict, and its book must hold the change.
                if !engine.lock().holds(&stored.intent_id) {
                    engine
                        .read_back(vec![stored.intent_id.clone()], Vec::new(), &[])
                        .await?;
                }
                engine.adopt(stored.clone()).await;
                // The verdict the person saw: a resolution covers its evidence.
                let verdict = engine.lock().shared_verdict(&stored.intent_id);
                let e = change(
                    &EscalationBook::restore([stored.clone()]),
                    &id,
                    verdict.as_deref(),
                )?;
                if e == stored {
                    // Nothing to change (the same person claiming again).
                    return Ok(e);
                }
                // Announced in the same write; the verdict is the one the person acted on.
                let outbox = engine.announce_change(&e, verdict.as_deref());
                let notifying = !outbox.is_empty();
                match engine
                    .store
                    .swap_escalation_notify(stored, e.clone(), outbox)
                    .await?
                {
                    Swap::Written => {
                        if notifying {
                            engine.wake_notifier();
                        }
                    }
                    Swap::Conflict(_) => continue,
                }
                let concluded = {
                    let mut core = engine.lock();
                    if core.book().get(&id).is_some_and(|b| b.version >= e.version) {
                        // A finding joined while the swap was written and took the version it
                        // wrote; its own write may land over this one. Wait for it (next
                        // round), then act again on what the store holds.
                        None
                    } else {
                        let mut out = core.commit_person_action(e.clone(), wall_now());
                        if out.escalations.iter().all(|x| *x == e) {
                            // The action itself is durable already.
                            out.escalations.clear();
                        }
                        Some(engine.conclude(&core, out, true))
                    }
                };
                if let Some(concluded) = concluded {
                    engine.finish(concluded).await;
                    // A resolution may settle the intent: the timer books its eviction.
                    engine.wake.notify_one();
                    return Ok(e);
                }
            }
            Err(EngineError::Conflict(format!(
                "escalation {id} kept changing while this action was written; try again"
            )))
        })
        .await
        .map_err(|e| EngineError::Store(StoreError::Task(e.to_string())))?
    }

    /// Until the intent has no escalation change in flight (or [`VISIBILITY_WAIT`] passed).
    /// Returns whether it is clear.
    async fn wait_durable(&self, intent_id: &str) -> bool {
        let deadline = tokio::time::Instant::now() + VISIBILITY_WAIT;
        loop {
            let done = self.durability.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if !self.durability.holds(intent_id) {
                return true;
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return false;
            }
        }
    }

    /// Take in an escalation as the store holds it, when it is newer than the book's: a person's
    /// action through another instance, or one this process lost a race to. The intent is
    /// re-audited (its decision depends on whether the escalation is open).
    async fn adopt(&self, stored: Escalation) {
        let concluded = {
            let mut core = self.lock();
            if core
                .book()
                .get(&stored.id)
                .is_some_and(|b| b.version >= stored.version)
            {
                return;
            }
            let mut out = core.commit_person_action(stored.clone(), wall_now());
            if out.escalations.iter().all(|x| *x == stored) {
                out.escalations.clear();
            }
            self.conclude(&core, out, true)
        };
        self.finish(concluded).await;
    }

    /// Queue what a step concluded for the persister and, with `hold`, keep its escalation
    /// changes from readers until they are durable. Called with the core locked, so outcomes
    /// reach the persister in the order they were computed and a later verdict can never be
    /// overwritten by an earlier one.
    fn conclude(&self, locked: &EngineCore, mut out: Outcome, hold: bool) -> Concluded {
        let nothing = out.is_empty() && out.new_findings.is_empty();
        let opened: Vec<Escalation> = out
            .escalations
            .iter()
            .filter(|e| e.version == 1)
            .cloned()
            .collect();
        let held = if hold {
            out.escalations.clone()
        } else {
            Vec::new()
        };
        if !held.is_empty() {
            self.durability.hold(&held);
        }
        let outbox = match &self.notifier {
            Some(n) if !held.is_empty() => announce_all(n, locked, &held),
            _ => Vec::new(),
        };
        let new_findings = std::mem::take(&mut out.new_findings);
        if !out.is_empty() {
            if let Some(tx) = self
                .persist
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                // The receiver lives until `close`; after it there is nothing left to write to.
                let handed = out.verdicts.len();
                if tx.send(out).is_ok() {
                    self.progress.unwritten.fetch_add(handed, Ordering::AcqRel);
                }
            }
        }
        Concluded {
            nothing,
            hold: held,
            outbox,
            new_findings,
            opened,
        }
    }

    /// The gauges of what the engine holds: escalations by status, intents in and out of memory.
    fn publish_gauges(&self) {
        let core = self.lock();
        let book = core.book();
        // Escalations other steps opened and are still writing are not shown yet.
        let unwritten = self.durability.opened();
        self.metrics.set_escalations(
            (book.count(EscalationStatus::Open) as u64).saturating_sub(unwritten),
            book.count(EscalationStatus::Claimed) as u64,
            book.count(EscalationStatus::Resolved) as u64,
            book.count(EscalationStatus::Withdrawn) as u64,
        );
        self.publish_memory(&core);
    }

    /// The gauges of what memory holds: intents in it, out of it and not read back yet, and
    /// the route filter that finds those out of it.
    fn publish_memory(&self, core: &EngineCore) {
        self.metrics.set_intents(core.intents() as u64);
        self.metrics.set_intents_evicted(core.evicted() as u64);
        self.metrics.set_intents_pending(core.pending() as u64);
        let filter = core.route_filter();
        self.metrics
            .set_route_filter(filter.bytes() as u64, filter.false_positive_rate());
        if filter.at_its_most() && !self.route_filter_full_told.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                bytes = filter.bytes(),
                false_positives = filter.false_positive_rate(),
                "the route filter is as large as it may grow: more events will ask the store \
                 whether they reach an intent out of memory (raise route_filter_max)"
            );
        }
    }

    /// Count and log what a step concluded, once its escalations are durable.
    fn announce(&self, c: Concluded) {
        if c.nothing {
            return;
        }
        for (tool, f) in &c.new_findings {
            self.metrics.finding(f.kind.as_str(), f.severity.as_str());
            if f.kind == FindingKind::DuplicateEffect {
                self.metrics
                    .duplicate_effect(tool.as_deref().unwrap_or("(none)"));
            }
        }
        self.publish_gauges();
        // One line each, up to a few per step: a restart after a long stop, or a wave of
        // deadlines, opens thousands in one page of audits, and a line each would bury the log.
        let (one_by_one, rest) = c
            .opened
            .split_at(c.opened.len().min(ESCALATIONS_LOGGED_PER_STEP));
        for e in one_by_one {
            tracing::warn!(escalation = %e.id, intent = %e.intent_id, severity = e.severity.as_str(), findings = ?e.findings.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(), "escalation opened");
        }
        if !rest.is_empty() {
            tracing::warn!(
                more = rest.len(),
                "more escalations opened in the same step (not logged one by one: see /api/v1/escalations)"
            );
        }
    }

    /// The notifications announcing `e`, a change about to be written, with `verdict` the
    /// intent's verdict it was made on.
    fn announce_change(&self, e: &Escalation, verdict: Option<&Verdict>) -> Vec<OutboxItem> {
        let Some(n) = &self.notifier else {
            return Vec::new();
        };
        let contract = verdict.and_then(|v| self.contract_of(v));
        n.items(e, verdict, contract.as_ref(), wall_now())
    }

    fn wake_notifier(&self) {
        if let Some(n) = &self.notifier {
            n.wake();
        }
    }

    /// Stop publishing: what was published is still written, nothing after this is.
    pub fn close(&self) {
        self.persist
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Every export received before this instant has been answered (acknowledged or refused)
    /// and, one instance being its own auditor, audited: the watermarks `GET /api/v1/cluster`
    /// reports.
    pub fn answered_before(&self) -> Timestamp {
        self.progress.settled_before()
    }

    /// Intents loaded at start-up that the timer has not audited again yet (see
    /// [`EngineCore::restore_from`]), and open intents the start left in the store that are
    /// not read back yet; their verdicts are as of the stop until then.
    pub fn unaudited(&self) -> usize {
        let core = self.lock();
        core.unaudited() + core.pending()
    }

    /// Verdicts concluded and not yet written.
    pub fn unwritten_verdicts(&self) -> usize {
        self.progress.unwritten.load(Ordering::Acquire)
    }

    /// The persister is too far behind for more work to be taken on: new exports are refused
    /// (retryably) and the deadline timer waits, so what waits to be written stays bounded.
    pub fn behind(&self) -> bool {
        self.unwritten_verdicts() > self.max_unwritten_verdicts
    }

    /// Work nobody waits on (a reload's pages) leaves the persister this much of its bound
    /// for exports: it goes on only while less than a quarter is taken, so live traffic is
    /// not refused as `overloaded` for a reload's sake.
    fn room_for_background(&self) -> bool {
        self.unwritten_verdicts() <= self.max_unwritten_verdicts / 4
    }

    /// Evict what may leave and re-audit a page of what is due (none while the persister is
    /// behind). Returns when to come back.
    async fn tick(&self) -> Option<Timestamp> {
        let durable = self.progress.durable.load(Ordering::Acquire);
        let behind = self.behind();
        let page = if behind { 0 } else { TICK_PAGE };
        let mut restore_done = false;
        self.step(|core| {
            core.mark_durable(durable);
            let before = core.unaudited() + core.pending();
            let out = core.tick_with(wall_now(), page, audit_on_every_core);
            restore_done = before > 0 && core.unaudited() + core.pending() == 0;
            out
        })
        .await;
        if restore_done {
            tracing::info!("every intent loaded at start-up has been audited again");
        }
        self.metrics
            .set_verdicts_unwritten(self.unwritten_verdicts() as u64);
        let core = self.lock();
        // Evictions change no verdict, so the step announces nothing: count them here.
        self.publish_memory(&core);
        let next = match (core.next_deadline(), core.next_eviction()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if behind {
            // The persister wakes the timer after each write; this is only the longest wait.
            let retry = wall_now() + Dur::millis(100);
            return Some(next.map_or(retry, |at| at.max(retry)));
        }
        next
    }

    /// Bring back `intents` and the intents out of memory that `routes` reach (and those their
    /// evidence reaches), with every record of the keys and objects their events name.
    /// `pending` (already in the store) is left for the step that ingests it. Every one of
    /// `intents` is out of the pending set afterwards, whether it came back now or was here.
    async fn read_back(
        &self,
        intents: Vec<String>,
        routes: Vec<String>,
        pending: &[Event],
    ) -> Result<(), StoreError> {
        let (mut ids, loaded) =
            crate::store::reached_from(&*self.store, intents.clone(), routes, |id| {
                self.lock().holds(id)
            })
            .await?;
        ids.extend(intents);
        let (escalations, listed) = tokio::join!(
            self.store.escalations_of(ids.clone()),
            self.store.listed_of(ids.clone()),
        );
        let (escalations, listed) = (escalations?, listed?.into_iter().collect());
        if !ids.is_empty() {
            self.lock()
                .rehydrate(&ids, loaded, escalations, &listed, pending, wall_now());
        }
        Ok(())
    }
}

/// Audit a page of due intents split across the machine's cores (everything loaded at
/// start-up, a wave of deadlines): each audit reads only the ledger, so the split changes
/// nothing but the time the core lock is held ([`EngineCore::tick_with`]).
fn audit_on_every_core(ids: &[String], audit: AuditOne) -> Vec<Option<Verdict>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    // Below this a page is over before the threads would have started.
    if threads < 2 || ids.len() < 512 {
        return self::core::in_order(ids, audit);
    }
    let part = ids.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = ids
            .chunks(part)
            .map(|ids| s.spawn(move || self::core::in_order(ids, audit)))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// After a background task's store call failed: say so and wait, longer for each failure in a
/// row (100 ms doubling, at most 6.4 s). Callers drop their engine handle first, so a shutdown
/// is not held up by the wait.
async fn back_off(failures: &mut u32, err: &StoreError, doing: &str) {
    *failures += 1;
    tracing::warn!(error = %err, failures = *failures, "{doing} failed; retrying");
    tokio::time::sleep(Duration::from_millis(100u64 << (*failures).min(6))).await;
}

/// Escalations opened in one step that are logged one line each; the rest get one line.
const ESCALATIONS_LOGGED_PER_STEP: usize = 16;

/// Intents expired per store call: one SQLite transaction, or one mutation.
const EXPIRE_PAGE: usize = 1000;

/// Retention: at start and then every `retention` (at most hourly), the raw events of settled
/// intents whose latest event is older than `retention` lose their content
/// ([`Store::expire_events`]), page by page.
/// Outbox items younger than this stay whatever the retention: a notification is retried for
/// 24 h after it was enqueued, and the delivery reads back the last 25 h.
const OUTBOX_KEPT_AT_LEAST: Dur = Dur::hours(48);

async fn expire_loop(engine: std::sync::Weak<Engine>, retention: Duration) {
    let every = retention.min(Duration::from_secs(3600));
    let retention = Dur(retention.as_nanos().min(i64::MAX as u128) as i64);
    loop {
        let Some(e) = engine.upgrade() else { return };
        let before = wall_now() - retention;
        let mut expired = 0u64;
        loop {
            match e.store.expire_events(before, EXPIRE_PAGE).await {
                Ok(n) => {
                    expired += n as u64;
                    e.metrics.intents_expired(n as u64);
                    if n < EXPIRE_PAGE {
                        break;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "expiring raw events failed; trying again later");
                    break;
                }
            }
        }
        if expired > 0 {
            tracing::info!(
                intents = expired,
                "tool-call arguments past retention deleted"
            );
        }
        // Notifications go with the same retention, never before they are past delivering.
        let past_delivery = wall_now() - OUTBOX_KEPT_AT_LEAST;
        match e.store.expire_outbox(before.min(past_delivery)).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(notifications = n, "outbox items past retention deleted"),
            Err(err) => {
                tracing::warn!(error = %err, "expiring outbox items failed; trying again later")
            }
        }
        drop(e);
        tokio::time::sleep(every).await;
    }
}

/// (name, version) of every contract of a set, in its order.
fn versions(contracts: &Contracts) -> Vec<(String, String)> {
    contracts
        .contracts
        .iter()
        .map(|c| (c.name.clone(), c.version.clone()))
        .collect()
}

/// Names of the contracts added, removed or changed (another version) from `old` to `new`.
fn changed_contracts(old: &Contracts, new: &Contracts) -> Vec<String> {
    let before: HashMap<&str, &str> = old
        .contracts
        .iter()
        .map(|c| (c.name.as_str(), c.version.as_str()))
        .collect();
    let after: HashMap<&str, &str> = new
        .contracts
        .iter()
        .map(|c| (c.name.as_str(), c.version.as_str()))
        .collect();
    let mut changed: Vec<String> = before
        .iter()
        .filter(|(name, version)| after.get(*name) != Some(*version))
        .chain(after.iter().filter(|(name, _)| !before.contains_key(*name)))
        .map(|(name, _)| name.to_string())
        .collect();
    changed.sort();
    changed
}

/// The notifications announcing `escalations` (changes a step made), each with its intent's
/// verdict as the core holds it now and the contract it was judged by.
fn announce_all(n: &Notifier, core: &EngineCore, escalations: &[Escalation]) -> Vec<OutboxItem> {
    let now = wall_now();
    escalations
        .iter()
        .flat_map(|e| {
            let verdict = core.shared_verdict(&e.intent_id);
            let contract = verdict
                .as_deref()
                .and_then(|v| v.contract.as_deref())
                .and_then(|name| core.contracts().by_name(name));
            n.items(e, verdict.as_deref(), contract, now)
        })
        .collect()
}

impl EngineTasks {
    /// Stop the timer and write out everything concluded so far. Call after [`Engine::close`].
    pub async fn finish(self) {
        self.timer.abort();
        let _ = self.timer.await;
        let _ = self.persister.await;
    }

    /// Stop both tasks where they are, dropping what the persister has not written yet: what a
    /// crash does (tests use it to check what survives one).
    pub async fn abort(self) {
        self.persister.abort();
        self.timer.abort();
        let _ = self.persister.await;
        let _ = self.timer.await;
    }
}

/// Sleeps until the earliest booked deadline (or a wake-up), then re-audits what is due. Holds
/// only a weak reference so dropping the engine ends it.
async fn timer_loop(engine: std::sync::Weak<Engine>, wake: Arc<Notify>) {
    loop {
        // Register for wake-ups before ticking, so a deadline booked during the tick is seen.
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next = match engine.upgrade() {
            Some(e) => e.tick().await,
            None => return,
        };
        let sleep = match next {
            Some(at) => Duration::from_nanos((at.0 - wall_now().0).max(0) as u64),
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = notified => {}
        }
    }
}
