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
    store: Arc<AnyStore>,
    metrics: Arc<Metrics>,
    /// Wakes the timer when a new, earlier deadline may have been booked.
    wake: Notify,
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
        let (core, restored) = tokio::task::spawn_blocking(move || {
            EngineCore::restore(contracts, events, escalations, wall_now())
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
        let engine = Arc::new(Engine {
            core: Mutex::new(core),
            store: store.clone(),
            metrics,
            wake: Notify::new(),
            persist: Mutex::new(Some(tx)),
        });
        engine.publish(restored);
        let timer = tokio::spawn(timer_loop(Arc::downgrade(&engine)));
        let persister = tokio::spawn(persist_loop(store, rx));
        Ok((engine, EngineTasks { timer, persister }))
    }

    fn lock(&self) -> MutexGuard<'_, EngineCore> {
        // A panic while holding the lock would be a bug in the pure core; the state it guards
        // is still a valid cache of the store, so keep serving rather than poison every request.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one ingest path: durable first, then audited. Returns how many events were new.
    pub async fn ingest(&self, events: Vec<Event>, received: Instant) -> Result<usize, StoreError> {
        if events.is_empty() {
            return Ok(0);
        }
        let began = Instant::now();
        let fresh = self.store.append(events.clone()).await?;
        self.metrics.store_append(began.elapsed());
        let new: Vec<Event> = events
            .into_iter()
            .zip(fresh)
            .filter_map(|(e, new)| new.then_some(e))
            .collect();
        let count = new.len();
        if count == 0 {
            return Ok(0);
        }
        let out = {
            let mut core = self.lock();
            for e in &new {
                if let Event::Attempt(a) = e {
                    let contract = core
                        .contracts()
                        .for_tool(&a.tool)
                        .cloned()
                        .unwrap_or_else(audit::fallback_contract);
                    self.metrics
                        .tool_attempt(&a.tool, audit::classify(a, &contract).as_str());
                }
            }
            core.ingest(new, wall_now())
        };
        self.metrics.verdict_latency(received.elapsed());
        self.publish(out);
        self.wake.notify_one();
        Ok(count)
    }

    pub fn verdict(&self, intent_id: &str) -> Option<Verdict> {
        self.lock().verdict(intent_id).cloned()
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
        let core = self.lock();
        v.contract
            .as_deref()
            .and_then(|name| core.contracts().by_name(name))
            .cloned()
    }

    pub fn intents(&self) -> usize {
        self.lock().intents()
    }

    /// A person claims an escalation. Durable before it returns.
    pub async fn claim(&self, id: &str, by: &str) -> Result<Escalation, EngineError> {
        let (e, out) = self.lock().claim(id, by, wall_now())?;
        self.store.put_escalations(vec![e.clone()]).await?;
        self.publish(out);
        Ok(e)
    }

    /// A person resolves an escalation. Durable before it returns.
    pub async fn resolve(
        &self,
        id: &str,
        by: &str,
        resolution: &str,
        note: Option<&str>,
    ) -> Result<Escalation, EngineError> {
        let (e, out) = self.lock().resolve(id, by, resolution, note, wall_now())?;
        self.store.put_escalations(vec![e.clone()]).await?;
        self.publish(out);
        Ok(e)
    }

    fn publish(&self, out: Outcome) {
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
        {
            let core = self.lock();
            let book = core.book();
            self.metrics.set_escalations(
                book.count(EscalationStatus::Open) as u64,
                book.count(EscalationStatus::Claimed) as u64,
                book.count(EscalationStatus::Resolved) as u64,
            );
            self.metrics.set_intents(core.intents() as u64);
        }
        for e in &out.escalations {
            if e.version == 1 {
                tracing::warn!(escalation = %e.id, intent = %e.intent_id, severity = e.severity.as_str(), findings = ?e.findings.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), "escalation opened");
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
        let (out, next) = {
            let mut core = self.lock();
            let out = core.tick(wall_now());
            (out, core.next_deadline())
        };
        self.publish(out);
        next
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
async fn timer_loop(engine: std::sync::Weak<Engine>) {
    loop {
        let (next, notified) = {
            let Some(e) = engine.upgrade() else { return };
            let next = e.tick();
            (next, async move { e.wake.notified().await })
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

/// Writes verdicts and escalations in batches: whatever queued while the last batch was being
/// written goes in the next one, latest verdict per intent.
async fn persist_loop(store: Arc<AnyStore>, mut rx: mpsc::UnboundedReceiver<Outcome>) {
    while let Some(first) = rx.recv().await {
        let mut verdicts: HashMap<String, Verdict> = HashMap::new();
        let mut removed: Vec<String> = Vec::new();
        let mut escalations: HashMap<String, Escalation> = HashMap::new();
        let mut take = |o: Outcome| {
            for id in o.removed {
                verdicts.remove(&id);
                removed.push(id);
            }
            for v in o.verdicts {
                verdicts.insert(v.intent_id.clone(), v);
            }
            for e in o.escalations {
                match escalations.get(&e.id) {
                    Some(old) if old.version >= e.version => {}
                    _ => {
                        escalations.insert(e.id.clone(), e);
                    }
                }
            }
        };
        take(first);
        while let Ok(more) = rx.try_recv() {
            take(more);
        }
        let verdicts: Vec<Verdict> = verdicts.into_values().collect();
        let escalations: Vec<Escalation> = escalations.into_values().collect();
        for attempt in 1..=5u32 {
            let result = async {
                if !escalations.is_empty() {
                    store.put_escalations(escalations.clone()).await?;
                }
                if !removed.is_empty() {
                    store.delete_verdicts(removed.clone()).await?;
                }
                if !verdicts.is_empty() {
                    store.put_verdicts(verdicts.clone()).await?;
                }
                Ok::<(), StoreError>(())
            }
            .await;
            match result {
                Ok(()) => break,
                Err(e) if attempt < 5 => {
                    tracing::warn!(error = %e, attempt, "writing verdicts failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 * 2u64.pow(attempt))).await;
                }
                // Verdicts are derived from durable events; the next start rebuilds them.
                Err(e) => {
                    tracing::error!(error = %e, "writing verdicts failed; they will be rebuilt on restart")
                }
            }
        }
    }
}
