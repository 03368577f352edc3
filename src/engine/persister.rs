//! The persister: verdicts, routes and escalations written behind the engine, in batches and
//! pages, with the checkpoint that lets the next start read back only what came after it.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use tokio::sync::{mpsc, Notify};

use super::core::Outcome;
use super::Progress;
use crate::model::*;
use crate::store::{AnyStore, Derived, Route, Store, StoreError};

/// The checkpoint is written at most this often (each is a row; on ClickHouse, an insert).
const CHECKPOINT_EVERY: Dur = Dur::secs(1);

/// With nothing to write for this long, the persister writes the checkpoint alone, so a crash
/// after a quiet spell reads back little.
const IDLE_CHECKPOINT: Duration = Duration::from_secs(5);

/// Verdicts per write of the persister: one write is one transaction, and appends of new
/// exports queue behind it on the store's writer.
const WRITE_PAGE: usize = 8192;

/// What the persister still has to write: the latest verdict per intent, removals, and the
/// newest version of each escalation.
#[derive(Default)]
struct Pending {
    verdicts: HashMap<String, Arc<Verdict>>,
    removed: std::collections::BTreeSet<String>,
    escalations: HashMap<String, Escalation>,
    routes: BTreeSet<Route>,
    /// The latest step taken in.
    seq: u64,
    /// Verdicts taken in, counted as handed out (before an intent's newer verdict replaces its
    /// older one here): what to take off [`super::Progress::unwritten`] once written.
    taken: usize,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.verdicts.is_empty()
            && self.removed.is_empty()
            && self.escalations.is_empty()
            && self.routes.is_empty()
    }

    fn take(&mut self, o: Outcome) {
        self.seq = self.seq.max(o.seq);
        if !o.removed.is_empty() {
            // A pseudo-intent that stopped existing takes the routes it was given with it.
            let gone: std::collections::HashSet<&str> =
                o.removed.iter().map(String::as_str).collect();
            self.routes.retain(|r| !gone.contains(r.intent_id.as_str()));
        }
        self.routes.extend(o.routes);
        for id in o.removed {
            self.verdicts.remove(&id);
            self.removed.insert(id);
        }
        self.taken += o.verdicts.len();
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

    /// Written in pages of [`WRITE_PAGE`] verdicts, each one transaction, so that appends of
    /// new exports are not held behind one huge write and only a page is copied at a time.
    /// Escalations go with the first page, before the verdicts that name them; removals of
    /// pseudo-intents with the last, after every verdict that may have absorbed them (a reader
    /// in between sees an orphan a moment longer, never an intent's evidence missing); the
    /// checkpoint with the last, as it says everything before it is written. A page that fails
    /// fails the whole: it is all written again (writes are upserts).
    async fn write(
        &self,
        store: &AnyStore,
        checkpoint: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let verdicts: Vec<&Arc<Verdict>> = self.verdicts.values().collect();
        let pages = verdicts.len().div_ceil(WRITE_PAGE).max(1);
        for (i, page) in verdicts
            .chunks(WRITE_PAGE)
            .chain(verdicts.is_empty().then_some(&[][..]))
            .enumerate()
        {
            let (first, last) = (i == 0, i + 1 == pages);
            store
                .put_derived(Derived {
                    escalations: if first {
                        self.escalations.values().cloned().collect()
                    } else {
                        Vec::new()
                    },
                    removed: if last {
                        self.removed.iter().cloned().collect()
                    } else {
                        Vec::new()
                    },
                    verdicts: page.iter().map(|v| Arc::clone(v)).collect(),
                    outbox: Vec::new(),
                    routes: if first {
                        self.routes.iter().cloned().collect()
                    } else {
                        Vec::new()
                    },
                    checkpoint: if last { checkpoint } else { None },
                    open_routes_complete: false,
                })
                .await?;
        }
        Ok(())
    }
}

/// Writes verdicts and escalations in batches: whatever queued while the last batch was being
/// written goes in the next one. A batch the store refuses is kept and merged with what comes
/// next, and retried with backoff: nothing concluded is dropped while the process lives.
///
/// Each write carries the checkpoint (at most every [`CHECKPOINT_EVERY`]): the oldest export
/// still in flight, read *before* the queue is drained, so every export received before it has
/// its outcome in the write. After a write, the steps it covered are durable: the intents they
/// settled may leave memory (the timer is woken to see to it).
pub(super) async fn persist_loop(
    store: Arc<AnyStore>,
    mut rx: mpsc::UnboundedReceiver<Outcome>,
    linger: Duration,
    progress: Arc<Progress>,
    wake: Arc<Notify>,
) {
    let mut pending = Pending::default();
    let mut failures = 0u32;
    let mut closing = false;
    let mut last_checkpoint = Timestamp(0);
    loop {
        if pending.is_empty() {
            match tokio::time::timeout(IDLE_CHECKPOINT, rx.recv()).await {
                Ok(Some(o)) => pending.take(o),
                // Shut down, or idle: everything received so far is written; say so, so the
                // next start reads back only what comes after.
                Ok(None) | Err(_) => {
                    let done =
                        matches!(rx.try_recv(), Err(mpsc::error::TryRecvError::Disconnected));
                    let at = progress.settled_before();
                    if at > last_checkpoint {
                        let checkpoint = Derived {
                            checkpoint: Some(at),
                            ..Derived::default()
                        };
                        match store.put_derived(checkpoint).await {
                            Ok(()) => last_checkpoint = at,
                            Err(e) => tracing::warn!(error = %e, "writing the checkpoint failed"),
                        }
                    }
                    if done {
                        return;
                    }
                    continue;
                }
            }
            // Linger briefly: an intent's events tend to arrive together (attempt, response,
            // webhooks), and each write of its verdict costs a row and a JSON document. Reads of
            // one intent come from the engine, so only lists and reports see the delay.
            closing = gather(&mut rx, &mut pending, linger).await;
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
        let settled_before = progress.settled_before();
        while let Ok(more) = rx.try_recv() {
            pending.take(more);
        }
        let checkpoint = (closing || settled_before >= last_checkpoint + CHECKPOINT_EVERY)
            .then_some(settled_before);
        let span = tracing::info_span!("store.write", verdicts = pending.verdicts.len());
        match pending.write(&store, checkpoint).instrument(span).await {
            Ok(()) => {
                last_checkpoint = checkpoint.unwrap_or(last_checkpoint);
                progress.durable.fetch_max(pending.seq, Ordering::AcqRel);
                progress
                    .unwritten
                    .fetch_sub(pending.taken, Ordering::AcqRel);
                wake.notify_one();
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
