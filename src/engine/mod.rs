//! The engine service: the deterministic [`core::EngineCore`] behind a lock, fed by the one
//! ingest path, driven by the wall clock and a deadline timer, persisting what it concludes.
//!
//! Order of work for every export: append to the store (durable), then audit, then answer.
//! Verdicts and escalations opened by the audit are written behind, by one persister task:
//! they are derived from the events and are rebuilt on start-up if a crash loses them.
//! A person's claim or resolution is the exception: it is the only copy, so it is durable
//! before the API answers.

pub mod core;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use self::core::{EngineCore, Outcome};
use crate::audit;
use crate::contract::Contracts;
use crate::escalation::EscalationError;
use crate::metrics::Metrics;
use crate::model::*;
use crate::store::{AnyStore, Store, StoreError};

/// The only place reckon reads the wall clock.
pub fn wall_now() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp(d.as_nanos() as i64)
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Escalation(#[from] EscalationError),
}

pub struct Engine {
    core: Mutex<EngineCore>,
    contracts: Arc<Contracts>,
    store: Arc<AnyStore>,
    metrics: Arc<Metrics>,
    /// Wakes the timer when a new, earlier deadline may have been booked. Shared with the timer
    /// task so that, while it sleeps, it holds no reference to the engine.
    wake: Arc<Notify>,
    /// Claims and resolutions, one at a time: each is made durable before the book changes.
    person_actions: tokio::sync::Mutex<()>,
    /// Taken on shutdown so the persister sees the end of the stream and finishes.
    persist: Mutex<Option<mpsc::UnboundedSender<Outcome>>>,
}

/// The engine's background tasks; awaited on shutdown so nothing concluded is left unwritten.
pub struct EngineTasks {
    timer: JoinHandle<()>,
    persister: JoinHandle<()>,
}

impl Engine {
    /// Rebuild state from the store, then start the deadline timer and the persister.
    pub async fn start(
        contracts: Arc<Contracts>,
        store: Arc<AnyStore>,
        metrics: Arc<Metrics>,
    ) -> Result<(Arc<Engine>, EngineTasks), StoreError> {
        let began = Instant::now();
        let events = store.load_events().await?;
        let escalations = store.load_escalations().await?;
        let n_events = events.len();
        let for_core = contracts.clone();
        let (core, restored) = tokio::task::spawn_blocking(move || {
            EngineCore::restore(for_core, events, escalations, wall_now())
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?;
        tracing::info!(
            events = n_events,
            intents = core.intents(),
            elapsed_ms = began.elapsed().as_millis() as u64,
            "engine state rebuilt from the store"
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let wake = Arc::new(Notify::new());
        let engine = Arc::new(Engine {
            core: Mutex::new(core),
            contracts: contracts.clone(),
            store: store.clone(),
            metrics,
            wake: wake.clone(),
            person_actions: tokio::sync::Mutex::new(()),
            persist: Mutex::new(Some(tx)),
        });
        {
            let core = engine.lock();
            engine.publish(&core, restored);
        }
        let timer = tokio::spawn(timer_loop(Arc::downgrade(&engine), wake));
        let persister = tokio::spawn(persist_loop(store, rx));
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
    ) -> Result<usize, StoreError> {
        if events.is_empty() {
            return Ok(0);
        }
        let engine = self.clone();
        tokio::spawn(async move {
            let done = engine.ingest_to_completion(events, received).await;
            drop(hold);
            done
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }

    async fn ingest_to_completion(
        &self,
        events: Vec<Event>,
        received: Instant,
    ) -> Result<usize, StoreError> {
        let began = Instant::now();
        let fresh = self.store.append(events.clone()).await?;
        self.metrics.store_append(began.elapsed());
        let new = fresh.iter().filter(|n| **n).count();
        // Counted before taking the lock: classifying needs only the contracts.
        for (e, is_new) in events.iter().zip(&fresh) {
            if let (Event::Attempt(a), true) = (e, is_new) {
                let contract = match self.contracts.for_tool(&a.tool) {
                    Some(c) => c,
                    None => audit::fallback_contract(),
                };
                self.metrics
                    .tool_attempt(&a.tool, audit::classify(a, contract).as_str());
            }
        }
        let mut core = self.lock();
        // Every event goes to the core, not only those the store called new: the ledger
        // ignores what it already has, and an event the store has but the engine missed (a
        // crash between the two) is taken in on its next re-send.
        let out = core.ingest(events, wall_now());
        self.publish(&core, out);
        drop(core);
        self.metrics.verdict_latency(received.elapsed());
        self.wake.notify_one();
        Ok(new)
    }

    pub fn verdict(&self, intent_id: &str) -> Option<Arc<Verdict>> {
        self.lock().shared_verdict(intent_id)
    }

    pub fn escalation(&self, id: &str) -> Option<Escalation> {
        self.lock().book().get(id).cloned()
    }

    pub fn escalations(&self, status: Option<EscalationStatus>) -> Vec<Escalation> {
        let core = self.lock();
        let mut all: Vec<Escalation> = core
            .book()
            .all()
            .filter(|e| status.is_none_or(|s| e.status == s))
            .cloned()
            .collect();
        all.sort_by(|a, b| (b.opened_at, &b.id).cmp(&(a.opened_at, &a.id)));
        all
    }

    pub fn contract_of(&self, v: &Verdict) -> Option<crate::contract::Contract> {
        v.contract
            .as_deref()
            .and_then(|name| self.contracts.by_name(name))
            .cloned()
    }

    pub fn intents(&self) -> usize {
        self.lock().intents()
    }

    /// Everything known about one intent (its events and its objects' observations), read-only.
    pub fn history(&self, intent_id: &str) -> Option<audit::History> {
        self.lock().history(intent_id)
    }

    /// The earliest re-audit booked: when it lies in the past for long, the timer is stuck.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.lock().next_deadline()
    }

    /// A person claims an escalation. Durable before it returns, and before anyone else sees it.
    pub async fn claim(self: &Arc<Self>, id: &str, by: &str) -> Result<Escalation, EngineError> {
        let (id, by) = (id.to_string(), by.to_string());
        self.person_action(move |core| core.book().claimed(&id, &by, wall_now()))
            .await
    }

    /// A person resolves an escalation. Durable before it returns, and before anyone else sees it.
    pub async fn resolve(
        self: &Arc<Self>,
        id: &str,
        by: &str,
        resolution: &str,
        note: Option<&str>,
    ) -> Result<Escalation, EngineError> {
        let (id, by, resolution, note) = (
            id.to_string(),
            by.to_string(),
            resolution.to_string(),
            note.map(str::to_string),
        );
        self.person_action(move |core| {
            let verdict = core
                .book()
                .get(&id)
                .and_then(|e| core.verdict(&e.intent_id));
            core.book()
                .resolved(&id, &by, &resolution, note.as_deref(), wall_now(), verdict)
        })
        .await
    }

    /// The store first: if it refuses, the book is unchanged and the API says so. Runs to
    /// completion even if the caller leaves, and one at a time. A finding may join the
    /// escalation while the write is under way (bumping its version); then the action is
    /// recomputed from the newer state and written again, so it is never lost under it.
    async fn person_action(
        self: &Arc<Self>,
        change: impl Fn(&EngineCore) -> Result<Escalation, EscalationError> + Send + 'static,
    ) -> Result<Escalation, EngineError> {
        let engine = self.clone();
        tokio::spawn(async move {
            let _one_at_a_time = engine.person_actions.lock().await;
            loop {
                let e = change(&engine.lock())?;
                if engine.lock().book().get(&e.id) == Some(&e) {
                    // Nothing to change (the same person claiming again).
                    return Ok(e);
                }
                engine.store.put_escalations(vec![e.clone()]).await?;
                let mut core = engine.lock();
                if core.book().get(&e.id).map(|x| x.version + 1) == Some(e.version) {
                    let out = core.commit_person_action(e.clone(), wall_now());
                    engine.publish(&core, out);
                    return Ok(e);
                }
            }
        })
        .await
        .map_err(|e| EngineError::Store(StoreError::Task(e.to_string())))?
    }

    /// Count what a step concluded and queue it for the store. Called with the core locked, so
    /// outcomes reach the persister in the order they were computed and a later verdict can
    /// never be overwritten by an earlier one.
    fn publish(&self, core: &EngineCore, out: Outcome) {
        if out.is_empty() {
            return;
        }
        for (tool, f) in &out.new_findings {
            self.metrics.finding(f.kind.as_str(), f.severity.as_str());
            if f.kind == FindingKind::DuplicateEffect {
                self.metrics
                    .duplicate_effect(tool.as_deref().unwrap_or("(none)"));
            }
        }
        let book = core.book();
        self.metrics.set_escalations(
            book.count(EscalationStatus::Open) as u64,
            book.count(EscalationStatus::Claimed) as u64,
            book.count(EscalationStatus::Resolved) as u64,
        );
        self.metrics.set_intents(core.intents() as u64);
        for e in &out.escalations {
            if e.version == 1 {
                tracing::warn!(escalation = %e.id, intent = %e.intent_id, severity = e.severity.as_str(), findings = ?e.findings.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(), "escalation opened");
            }
        }
        if let Some(tx) = self
            .persist
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            // The receiver lives until `close`; after it there is nothing left to write to.
            let _ = tx.send(out);
        }
    }

    /// Stop publishing: what was published is still written, nothing after this is.
    pub fn close(&self) {
        self.persist
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    fn tick(&self) -> Option<Timestamp> {
        let mut core = self.lock();
        let out = core.tick(wall_now());
        self.publish(&core, out);
        core.next_deadline()
    }
}

impl EngineTasks {
    /// Stop the timer and write out everything concluded so far. Call after [`Engine::close`].
    pub async fn finish(self) {
        self.timer.abort();
        let _ = self.timer.await;
        let _ = self.persister.await;
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
            Some(e) => e.tick(),
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

/// How long the persister gathers outcomes before writing them.
const PERSIST_LINGER: Duration = Duration::from_millis(50);

/// What the persister still has to write: the latest verdict per intent, removals, and the
/// newest version of each escalation.
#[derive(Default)]
struct Pending {
    verdicts: HashMap<String, Arc<Verdict>>,
    removed: std::collections::BTreeSet<String>,
    escalations: HashMap<String, Escalation>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.verdicts.is_empty() && self.removed.is_empty() && self.escalations.is_empty()
    }

    fn take(&mut self, o: Outcome) {
        for id in o.removed {
            self.verdicts.remove(&id);
            self.removed.insert(id);
        }
        for v in o.verdicts {
            self.removed.remove(&v.intent_id);
            self.verdicts.insert(v.intent_id.clone(), v);
        }
        for e in o.escalations {
            match self.escalations.get(&e.id) {
                Some(old) if old.version >= e.version => {}
                _ => {
                    self.escalations.insert(e.id.clone(), e);
                }
            }
        }
    }

    async fn write(&self, store: &AnyStore) -> Result<(), StoreError> {
        if !self.escalations.is_empty() {
            store
                .put_escalations(self.escalations.values().cloned().collect())
                .await?;
        }
        if !self.removed.is_empty() {
            store
                .delete_verdicts(self.removed.iter().cloned().collect())
                .await?;
        }
        if !self.verdicts.is_empty() {
            store
                .put_verdicts(self.verdicts.values().map(|v| Verdict::clone(v)).collect())
                .await?;
        }
        Ok(())
    }
}

/// Writes verdicts and escalations in batches: whatever queued while the last batch was being
/// written goes in the next one. A batch the store refuses is kept and merged with what comes
/// next, and retried with backoff: nothing concluded is dropped while the process lives.
async fn persist_loop(store: Arc<AnyStore>, mut rx: mpsc::UnboundedReceiver<Outcome>) {
    let mut pending = Pending::default();
    let mut failures = 0u32;
    let mut closing = false;
    loop {
        if pending.is_empty() {
            match rx.recv().await {
                Some(o) => pending.take(o),
                None => return,
            }
            // Linger briefly: an intent's events tend to arrive together (attempt, response,
            // webhooks), and each write of its verdict costs a row and a JSON document. Reads of
            // one intent come from the engine, so only lists and reports see the delay.
            closing = gather(&mut rx, &mut pending, PERSIST_LINGER).await;
        } else if !closing {
            // The last write failed: wait out the backoff whatever arrives meanwhile, so a
            // failing store is not hit once per outcome.
            closing = gather(
                &mut rx,
                &mut pending,
                Duration::from_millis(100u64 << failures.min(6)),
            )
            .await;
        }
        while let Ok(more) = rx.try_recv() {
            pending.take(more);
        }
        match pending.write(&store).await {
            Ok(()) => {
                pending = Pending::default();
                failures = 0;
            }
            Err(e) if closing && failures >= 3 => {
                // Verdicts are derived from durable events: the next start rebuilds them.
                tracing::error!(error = %e, "writing verdicts failed at shutdown; they will be rebuilt on restart");
                return;
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, failures, "writing verdicts failed; keeping them to retry");
                if closing {
                    tokio::time::sleep(Duration::from_millis(100u64 << failures)).await;
                }
            }
        }
        if closing && pending.is_empty() {
            return;
        }
    }
}

/// Take in outcomes for `wait`. Returns true when the channel closed (shutdown) meanwhile.
async fn gather(
    rx: &mut mpsc::UnboundedReceiver<Outcome>,
    pending: &mut Pending,
    wait: Duration,
) -> bool {
    let deadline = tokio::time::sleep(wait);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => return false,
            msg = rx.recv() => match msg {
                Some(o) => pending.take(o),
                None => return true,
            },
        }
    }
}
