//! The delivery task: the only part of `notify` that sends.
//!
//! It reads each target's pending items from the store (woken by the engine when new ones are
//! durable, and every couple of seconds for retries coming due), sends the due ones (see
//! [`outbox::due`]: per escalation and target in version order), and writes each attempt's
//! outcome back ([`outbox::after_attempt`]). Nothing is removed from the outbox before a target
//! answered 2xx, so a crash or a stop at any point means a re-send with the same
//! `Reckon-Delivery`, never a loss.
//!
//! For Alertmanager it also re-sends the whole unresolved set from the store every target's
//! `resend_interval` (plus escalations resolved within an alert's lifetime, with their end), so
//! an open escalation's alert does not expire (it ends four intervals after it was last sent)
//! and a late re-send cannot outlive its resolution. That push is not an outbox item: it is
//! recomputed from the store each time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::alertmanager::{self, Draft};
use super::outbox::{self, after_attempt, Attempt, OutboxItem, OutboxState, Policy};
use super::sign::sign;
use super::{Notifier, Target, TargetKind};
use crate::clock::wall_now;
use crate::metrics::Metrics;
use crate::model::{Dur, Escalation, Timestamp};
use crate::store::{AnyStore, Store};

/// How the task paces itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Where people open reckon: the escalation's page is `{public_url}/escalations/{id}`.
    pub public_url: String,
    pub policy: Policy,
    /// How often the outbox is read when nothing woke the task (default 2 s): retries coming
    /// due, and items other instances sharing the store enqueued.
    pub poll: Duration,
    /// One POST's limit, connecting included (default 10 s).
    pub request_timeout: Duration,
}

impl Settings {
    pub fn new(public_url: String) -> Settings {
        Settings {
            public_url,
            policy: Policy::default(),
            poll: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// Pending items read per target and pass: the oldest first, so heads are always among them.
const PAGE: usize = 1000;
/// POSTs in flight at once.
const CONCURRENCY: usize = 16;
/// Alerts per POST of the periodic re-send.
const ALERTS_PER_POST: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error("building the HTTP client for notifications: {0}")]
    Client(#[from] reqwest::Error),
}

/// The running task.
pub struct Delivery {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Delivery {
    /// Stop where it is: an attempt in flight is dropped, and its item stays pending (sent
    /// again, with the same id, by the next start).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

struct Deliverer {
    notifier: Arc<Notifier>,
    store: Arc<AnyStore>,
    metrics: Arc<Metrics>,
    settings: Settings,
    client: reqwest::Client,
    /// Per (target, escalation): the labels its alert was last sent with, to end the alert
    /// under old labels when they change (a more severe finding joined).
    sent_labels: Mutex<HashMap<(String, String), BTreeMap<String, String>>>,
}

/// Start delivering `notifier`'s targets from `store`'s outbox.
pub fn start(
    notifier: Arc<Notifier>,
    store: Arc<AnyStore>,
    metrics: Arc<Metrics>,
    settings: Settings,
) -> Result<Delivery, DeliverError> {
    let client = reqwest::Client::builder()
        .timeout(settings.request_timeout)
        .connect_timeout(settings.request_timeout.min(Duration::from_secs(5)))
        // A redirect is not an answer: the item is retried, and the log says where it pointed.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("reckon/", env!("CARGO_PKG_VERSION")))
        .build()?;
    for t in notifier.targets() {
        tracing::info!(target = %t.name, kind = t.kind_str(), url = %t.url(), "notifying");
    }
    let d = Arc::new(Deliverer {
        notifier,
        store,
        metrics,
        settings,
        client,
        sent_labels: Mutex::new(HashMap::new()),
    });
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run(d, stopped));
    Ok(Delivery { stop, task })
}

/// How long an alert lives unless re-sent: four re-send intervals, so one or two lost re-sends
/// do not end it.
fn alert_ttl(resend_interval: Duration) -> Dur {
    Dur(i64::try_from(resend_interval.as_nanos().saturating_mul(4)).unwrap_or(i64::MAX))
}

async fn run(d: Arc<Deliverer>, mut stopped: watch::Receiver<bool>) {
    // Each Alertmanager target's next re-send: at once, then every its interval.
    let mut refresh: Vec<(Target, Duration, Instant)> = d
        .notifier
        .targets()
        .iter()
        .filter_map(|t| match t.kind {
            TargetKind::Alertmanager {
                resend_interval, ..
            } => Some((t.clone(), resend_interval, Instant::now())),
            TargetKind::Webhook { .. } => None,
        })
        .collect();
    let mut store_failures = 0u32;
    loop {
        let step = async {
            for (t, every, next) in refresh.iter_mut() {
                if Instant::now() >= *next {
                    d.refresh(t, *every).await;
                    *next = Instant::now() + *every;
                }
            }
            d.pass().await
        };
        let pass = tokio::select! {
            _ = stopped.changed() => return,
            p = step => p,
        };
        let wait = if pass.store_failed {
            store_failures += 1;
            Duration::from_millis(250u64 << store_failures.min(5))
        } else {
            store_failures = 0;
            if pass.attempted > 0 {
                // A delivered head lets the next version of its escalation go: look again now.
                Duration::ZERO
            } else {
                let mut w = d.settings.poll;
                if let Some(at) = pass.next_due {
                    let until = at.0.saturating_sub(wall_now().0).max(0) as u64;
                    w = w.min(Duration::from_nanos(until));
                }
                for (_, _, next) in &refresh {
                    w = w.min(next.saturating_duration_since(Instant::now()));
                }
                // Never a busy loop, whatever the clock did since the pass read it.
                w.max(Duration::from_millis(10))
            }
        };
        if wait.is_zero() {
            continue;
        }
        tokio::select! {
            _ = stopped.changed() => return,
            _ = tokio::time::sleep(wait) => {}
            _ = d.notifier.woken() => {}
        }
    }
}

/// What one pass over the outbox did.
struct Pass {
    attempted: usize,
    next_due: Option<Timestamp>,
    store_failed: bool,
}

impl Deliverer {
    async fn pass(self: &Arc<Self>) -> Pass {
        let now = wall_now();
        // Items older than the retry window (plus an hour's slack) are past retrying.
        let since = now.saturating_sub(Dur(self.settings.policy.max_age.0 + Dur::hours(1).0));
        let mut pass = Pass {
            attempted: 0,
            next_due: None,
            store_failed: false,
        };
        let mut total = 0u64;
        let mut due: Vec<(Target, OutboxItem)> = Vec::new();
        for t in self.notifier.targets() {
            match self.store.outbox_pending(&t.name, since, PAGE).await {
                Ok(page) => {
                    total += page.total;
                    let next = outbox::next_due(&page.items);
                    pass.next_due = match (pass.next_due, next) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    due.extend(
                        outbox::due(&page.items, now)
                            .into_iter()
                            .map(|it| (t.clone(), it.clone())),
                    );
                }
                Err(e) => {
                    tracing::warn!(target = %t.name, error = %e, "reading the notification outbox failed");
                    pass.store_failed = true;
                }
            }
        }
        if !pass.store_failed {
            self.metrics.set_outbox_pending(total);
        }
        if due.is_empty() {
            return pass;
        }
        pass.attempted = due.len();
        let mut updated = Vec::with_capacity(due.len());
        let mut queue = due.into_iter();
        let mut running = JoinSet::new();
        loop {
            while running.len() < CONCURRENCY {
                let Some((t, it)) = queue.next() else { break };
                let d = self.clone();
                let span =
                    tracing::info_span!("notify.deliver", target = %t.name, event = %it.event);
                running.spawn(
                    async move {
                        let outcome = d.attempt(&t, &it).await;
                        (t, it, outcome)
                    }
                    .instrument(span),
                );
            }
            let Some(done) = running.join_next().await else {
                break;
            };
            let Ok((t, it, outcome)) = done else {
                continue;
            };
            let next = after_attempt(&it, outcome, wall_now(), &self.settings.policy);
            self.record(&t, &next);
            updated.push(next);
        }
        // Written back before the next pass reads: a failed write means the items are sent
        // again (same ids), never that they are lost.
        let mut tries = 0u32;
        while let Err(e) = self.store.outbox_put(updated.clone()).await {
            tries += 1;
            tracing::warn!(error = %e, tries, "recording notification attempts failed");
            if tries >= 3 {
                pass.store_failed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200 << tries)).await;
        }
        pass
    }

    fn record(&self, t: &Target, it: &OutboxItem) {
        match it.state {
            OutboxState::Delivered => {
                self.metrics.notification(t.kind_str(), "delivered");
                tracing::debug!(target = %t.name, delivery = %it.id, event = %it.event, attempts = it.attempts, "notification delivered");
            }
            OutboxState::Expired => {
                self.metrics.notification(t.kind_str(), "expired");
                tracing::error!(target = %t.name, delivery = %it.id, event = %it.event, attempts = it.attempts, error = it.last_error.as_deref().unwrap_or(""), "notification given up after its retry window");
            }
            OutboxState::Pending => {
                self.metrics.notification(t.kind_str(), "failed");
                tracing::warn!(target = %t.name, delivery = %it.id, event = %it.event, attempts = it.attempts, error = it.last_error.as_deref().unwrap_or(""), next = %crate::codec::rfc3339(it.next_at), "notification failed; will retry");
            }
        }
    }

    /// One POST of one item.
    async fn attempt(&self, t: &Target, it: &OutboxItem) -> Attempt {
        match &t.kind {
            TargetKind::Webhook { url, secret } => {
                let at = wall_now().0.div_euclid(1_000_000_000);
                let req = self
                    .client
                    .post(url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .header("Reckon-Delivery", it.id.as_str())
                    .header("Reckon-Event", it.event.as_str())
                    .header("Reckon-Signature", sign(secret, at, it.body.as_bytes()))
                    .body(it.body.clone());
                answer(req.send().await).await
            }
            TargetKind::Alertmanager {
                url,
                resend_interval,
            } => {
                let draft: Draft = match serde_json::from_str(&it.body) {
                    Ok(d) => d,
                    Err(e) => return Attempt::Failed(format!("stored alert does not decode: {e}")),
                };
                let ttl = alert_ttl(*resend_interval);
                let alerts = self.alerts(t, &it.escalation_id, &draft, wall_now(), ttl);
                let sent = answer(
                    self.client
                        .post(format!("{url}/api/v2/alerts"))
                        .json(&alerts)
                        .send()
                        .await,
                )
                .await;
                if sent == Attempt::Delivered {
                    self.sent(t, &it.escalation_id, &draft);
                }
                sent
            }
        }
    }

    /// The alert for `draft`, preceded by the same escalation's alert under the labels it was
    /// last sent with, ended, when those differ.
    fn alerts(
        &self,
        t: &Target,
        escalation_id: &str,
        draft: &Draft,
        now: Timestamp,
        ttl: Dur,
    ) -> Vec<serde_json::Value> {
        let url = alertmanager::generator_url(&self.settings.public_url, escalation_id);
        let mut out = Vec::with_capacity(2);
        let sent = self.sent_labels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = sent.get(&(t.name.clone(), escalation_id.to_string())) {
            if *old != draft.labels {
                out.push(alertmanager::ended(old, &url, now));
            }
        }
        out.push(alertmanager::complete(draft, &url, now, ttl));
        out
    }

    fn sent(&self, t: &Target, escalation_id: &str, draft: &Draft) {
        let mut sent = self.sent_labels.lock().unwrap_or_else(|p| p.into_inner());
        let key = (t.name.clone(), escalation_id.to_string());
        if draft.ends_at.is_some() {
            sent.remove(&key);
        } else {
            sent.insert(key, draft.labels.clone());
        }
    }

    /// Re-send every unresolved escalation (and those resolved within an alert's lifetime, with
    /// their end) to Alertmanager target `t`, from the store.
    async fn refresh(&self, t: &Target, every: Duration) {
        let TargetKind::Alertmanager { url, .. } = &t.kind else {
            return;
        };
        let ttl = alert_ttl(every);
        let now = wall_now();
        // Every unresolved one, or Alertmanager resolves the alerts of those left out.
        let escalations: Vec<Escalation> = match crate::store::unresolved_escalations(
            &*self.store,
            true,
        )
        .await
        {
            Ok(all) => all
                .into_iter()
                .filter(|e| {
                    e.status.unresolved()
                        || e.resolved_at
                            .is_some_and(|at| at >= now.saturating_sub(ttl))
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "reading escalations to re-send to Alertmanager failed");
                return;
            }
        };
        // Each labelled with the tool it carries: no verdict read per alert.
        let drafts: Vec<(String, alertmanager::Draft)> = escalations
            .iter()
            .map(|e| (e.id.clone(), alertmanager::draft(e)))
            .collect();
        for chunk in drafts.chunks(ALERTS_PER_POST) {
            let alerts: Vec<serde_json::Value> = chunk
                .iter()
                .flat_map(|(id, d)| self.alerts(t, id, d, now, ttl))
                .collect();
            if alerts.is_empty() {
                continue;
            }
            let sent = answer(
                self.client
                    .post(format!("{url}/api/v2/alerts"))
                    .json(&alerts)
                    .send()
                    .await,
            )
            .await;
            match sent {
                Attempt::Delivered => {
                    self.metrics.notification("alertmanager", "delivered");
                    for (id, d) in chunk {
                        self.sent(t, id, d);
                    }
                }
                Attempt::Failed(error) => {
                    self.metrics.notification("alertmanager", "failed");
                    tracing::warn!(target = %t.name, %error, alerts = alerts.len(), "re-sending unresolved escalations to Alertmanager failed");
                }
            }
        }
    }
}

/// 2xx is delivered; anything else is a failure worth retrying, described for the log.
async fn answer(sent: Result<reqwest::Response, reqwest::Error>) -> Attempt {
    match sent {
        Ok(resp) if resp.status().is_success() => Attempt::Delivered,
        Ok(resp) => {
            let status = resp.status();
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(|l| format!(" (to {l})"))
                .unwrap_or_default();
            let text = resp.text().await.unwrap_or_default();
            let text: String = text.chars().take(200).collect();
            Attempt::Failed(format!("HTTP {status}{location}: {}", text.trim()))
        }
        // Without the URL: it may hold credentials.
        Err(e) => {
            let kind = if e.is_timeout() {
                "timed out"
            } else if e.is_connect() {
                "could not connect"
            } else {
                "request failed"
            };
            let e = e.without_url();
            let mut detail = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                detail.push_str(": ");
                detail.push_str(&s.to_string());
                source = s.source();
            }
            Attempt::Failed(format!("{kind}: {detail}"))
        }
    }
}
