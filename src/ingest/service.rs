//! The one ingest service every transport feeds. Transports decode; this makes the events
//! durable through the engine, counts them, and refuses work (retryably) when at capacity
//! instead of buffering without bound.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::bounds::{TimeBounds, TimeWindow};
use super::error::IngestError;
use super::otlp::Decoded;
use super::{records, stripe};
use crate::clock::wall_now;
use crate::contract::Contracts;
use crate::engine::Engine;
use crate::logging::{Throttle, REPEATED_FAILURE_EVERY};
use crate::metrics::Metrics;
use crate::model::{Dur, Event, RecordObservation};
use crate::store::{AnyStore, RecordKey, Store};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Http,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

/// What an export's response says: how many items were refused, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartialSuccess {
    pub rejected: u64,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RecordsReply {
    pub accepted: usize,
    pub rejected: Vec<records::RecordRejection>,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StripeReply {
    pub received: bool,
    /// `false` for event types reckon does not audit (Stripe still gets its 200).
    pub recorded: bool,
    pub event_type: String,
}

/// Leave to do ingest work, taken before a request's body is read or decoded so that load is
/// refused (retryably) before it costs memory. Dropped when the request is answered.
pub struct Admission(#[allow(dead_code)] OwnedSemaphorePermit);

pub struct IngestService {
    engine: Arc<Engine>,
    /// Read only, to tell a re-delivered record from news (the engine owns every write).
    store: Arc<AnyStore>,
    metrics: Arc<Metrics>,
    permits: Arc<Semaphore>,
    stripe_secret: Option<String>,
    stripe_tolerance: Dur,
    /// Which times from other clocks are accepted (`ingest::bounds`).
    time_bounds: TimeBounds,
    /// Contracted tool spans dropped for want of an intent id since the last warning, and when
    /// that was (unix seconds): one line per interval, not one per span.
    no_intent_unlogged: std::sync::atomic::AtomicU64,
    no_intent_logged_at: std::sync::atomic::AtomicI64,
}

/// At most one "no intent id" warning per this many seconds.
const NO_INTENT_LOG_EVERY_SECS: i64 = 60;

impl IngestService {
    pub fn new(
        engine: Arc<Engine>,
        store: Arc<AnyStore>,
        metrics: Arc<Metrics>,
        max_concurrent: usize,
        stripe_secret: Option<String>,
        stripe_tolerance: Dur,
    ) -> Self {
        IngestService {
            engine,
            store,
            metrics,
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            stripe_secret,
            stripe_tolerance,
            time_bounds: TimeBounds::DEFAULT,
            no_intent_unlogged: Default::default(),
            no_intent_logged_at: std::sync::atomic::AtomicI64::new(i64::MIN),
        }
    }

    /// The accepted window of times for an item received now: the one clock read of ingest,
    /// handed to the pure decoders.
    pub fn time_window(&self) -> TimeWindow {
        self.time_bounds.around(wall_now())
    }

    /// The contracts in force (the engine's, swapped whole by a reload): decoders recognise
    /// tool spans by the set they were handed when they started.
    pub fn contracts(&self) -> Arc<Contracts> {
        self.engine.contracts()
    }

    /// Stripe events are checked against a webhook secret (their signature authenticates them).
    pub fn verifies_stripe(&self) -> bool {
        self.stripe_secret.is_some()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Count a failure before any events were taken.
    pub fn refused(&self, e: &IngestError) {
        self.metrics.rejection(e.reason(), 1);
    }

    /// Admit one request, or refuse it as overloaded (429 / RESOURCE_EXHAUSTED, retryable).
    /// Also refused while the engine's verdicts wait to be written past their bound (a store
    /// slower than the traffic): taking more would grow memory without bound. Counted as
    /// `overloaded` too (the same answer); `reckon_verdicts_unwritten` tells the two apart.
    pub fn admit(&self) -> Result<Admission, IngestError> {
        if self.engine.behind() {
            self.metrics.rejection("overloaded", 1);
            return Err(IngestError::Overloaded);
        }
        self.permits
            .clone()
            .try_acquire_owned()
            .map(Admission)
            .map_err(|_| {
                self.metrics.rejection("overloaded", 1);
                IngestError::Overloaded
            })
    }

    /// Makes `events` durable through the engine. Returns the events the store refused as
    /// conflicting re-sends (their identity stored with other content), with their positions
    /// in `events`, each already counted and logged (at most once per 5 s): the caller refuses
    /// them in its answer, so nothing acknowledged is dropped silently.
    async fn durable(
        &self,
        admitted: Admission,
        events: Vec<Event>,
        received: Instant,
    ) -> Result<Vec<(usize, Event)>, IngestError> {
        let ingested = self.engine.ingest(events, received, admitted).await.map_err(|e| {
            static LOG: Throttle = Throttle::new(REPEATED_FAILURE_EVERY);
            if let Some(held_back) = LOG.admit(&e.kind()) {
                tracing::error!(error = %e, held_back, "store refused an append; the export is not acknowledged");
            }
            self.metrics.rejection("unavailable", 1);
            IngestError::Unavailable(e.to_string())
        })?;
        if let Some((_, first)) = ingested.conflicts.first() {
            let n = ingested.conflicts.len() as u64;
            self.metrics.rejection("conflict", n);
            static LOG: Throttle = Throttle::new(REPEATED_FAILURE_EVERY);
            if let Some(held_back) = LOG.admit(crate::store::event_kind(first)) {
                tracing::warn!(
                    refused = n,
                    held_back,
                    example = %conflict_reason(first),
                    "re-sent items whose identity is stored with other content were refused (the first copy is kept): an exporter or id generator reuses ids"
                );
            }
        }
        Ok(ingested.conflicts)
    }

    /// A contracted tool span without an intent id is dropped, not audited: the executor is not
    /// tagging its spans (or tags a span that is not the tool's). Counted in
    /// `reckon_spans_dropped_total{reason="no_intent_id"}`, and said in the log at most once a
    /// minute with one example to follow.
    fn warn_no_intent(&self, trace: &str, tool: &str, n: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let pending = self.no_intent_unlogged.fetch_add(n, Relaxed) + n;
        let now = crate::clock::wall_now().0 / 1_000_000_000;
        let last = self.no_intent_logged_at.load(Relaxed);
        if now.saturating_sub(last) < NO_INTENT_LOG_EVERY_SECS
            || self
                .no_intent_logged_at
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        self.no_intent_unlogged.fetch_sub(pending, Relaxed);
        tracing::warn!(
            spans = pending,
            example_trace_id = trace,
            tool,
            "contracted tool spans without reckon.intent.id were not audited: set it on the tool's own span, or read it from the arguments with the contract's intent_id pointer"
        );
    }

    pub async fn traces(
        &self,
        admitted: Admission,
        transport: Transport,
        mut decoded: Decoded,
        received: Instant,
    ) -> Result<PartialSuccess, IngestError> {
        let bad_time = decoded.check_times(&self.time_window());
        self.metrics
            .spans_received(transport.as_str(), decoded.seen);
        if decoded.dropped > 0 {
            self.metrics
                .spans_dropped("not_audited", decoded.dropped - decoded.dropped_no_intent);
            self.metrics
                .spans_dropped("no_intent_id", decoded.dropped_no_intent);
        }
        if let Some((trace, tool)) = &decoded.no_intent_example {
            self.warn_no_intent(trace, tool, decoded.dropped_no_intent);
        }
        if decoded.rejected > bad_time {
            self.metrics
                .rejection("malformed_span", decoded.rejected - bad_time);
        }
        if bad_time > 0 {
            self.metrics.rejection("bad_time", bad_time);
        }
        let events = std::mem::take(&mut decoded.events);
        for (_, e) in self.durable(admitted, events, received).await? {
            decoded.refuse(conflict_reason(&e));
        }
        Ok(PartialSuccess {
            rejected: decoded.rejected,
            message: decoded.error_message(),
        })
    }

    pub async fn logs(
        &self,
        admitted: Admission,
        transport: Transport,
        mut decoded: Decoded,
        received: Instant,
    ) -> Result<PartialSuccess, IngestError> {
        let bad_time = decoded.check_times(&self.time_window());
        self.metrics
            .log_records_received(transport.as_str(), decoded.seen);
        if decoded.rejected > bad_time {
            self.metrics
                .rejection("malformed_log_record", decoded.rejected - bad_time);
        }
        if bad_time > 0 {
            self.metrics.rejection("bad_time", bad_time);
        }
        let events = std::mem::take(&mut decoded.events);
        for (_, e) in self.durable(admitted, events, received).await? {
            decoded.refuse(conflict_reason(&e));
        }
        Ok(PartialSuccess {
            rejected: decoded.rejected,
            message: decoded.error_message(),
        })
    }

    /// `POST /api/v1/records`: good items are kept, bad ones named by index.
    pub async fn records(
        &self,
        admitted: Admission,
        body: &[u8],
    ) -> Result<RecordsReply, IngestError> {
        let received = Instant::now();
        let batch = records::parse_records(body, &self.time_window()).map_err(|e| {
            self.metrics.rejection("bad_record", 1);
            IngestError::BadRequest(e.to_string())
        })?;
        if !batch.rejected.is_empty() {
            self.metrics
                .rejection("bad_record", batch.rejected.len() as u64);
        }
        let mut accepted = batch.accepted.len();
        let (news, at) = self
            .without_redeliveries(batch.accepted, &batch.untimed, &batch.indices)
            .await?;
        let conflicts = self
            .durable(
                admitted,
                news.into_iter().map(Event::Record).collect(),
                received,
            )
            .await?;
        let mut rejected = batch.rejected;
        for (i, e) in conflicts {
            accepted -= 1;
            rejected.push(records::RecordRejection {
                index: at.get(i).copied().unwrap_or(i),
                error: conflict_reason(&e),
            });
        }
        rejected.sort_by_key(|r| r.index);
        Ok(RecordsReply { accepted, rejected })
    }

    /// Drops the re-deliveries among `accepted`: a record with no `observed_at` of its own
    /// (listed in `untimed`) whose (source, object_id, status) is already known, from the store
    /// or from a record of this batch that carries its own time. Stamped with the receive
    /// time it would be a new observation of old news: it would move the object's `last_seen`,
    /// pull an old intent into recent report windows, and a stale `succeeded` re-posted after
    /// `failed` would flip a failed refund back to completed. "Known" comes from the store, so
    /// it holds across restarts and instances. A re-delivery is still acknowledged (counted in
    /// `accepted`), as any re-sent item is.
    ///
    /// Returns the news with, for each, its index in the request (from `indices`, one per
    /// accepted record).
    async fn without_redeliveries(
        &self,
        accepted: Vec<RecordObservation>,
        untimed: &[usize],
        indices: &[usize],
    ) -> Result<(Vec<RecordObservation>, Vec<usize>), IngestError> {
        if untimed.is_empty() {
            return Ok((accepted, indices.to_vec()));
        }
        let key = |r: &RecordObservation| RecordKey {
            source: r.source.clone(),
            object_id: r.object_id.clone(),
            status: r.status.clone(),
        };
        let mut is_untimed = vec![false; accepted.len()];
        for &i in untimed {
            if let Some(u) = is_untimed.get_mut(i) {
                *u = true;
            }
        }
        let mut asked: Vec<RecordKey> = accepted
            .iter()
            .zip(&is_untimed)
            .filter(|(_, u)| **u)
            .map(|(r, _)| key(r))
            .collect();
        asked.sort();
        asked.dedup();
        let mut known = self.store.known_observations(asked).await.map_err(|e| {
            static LOG: Throttle = Throttle::new(REPEATED_FAILURE_EVERY);
            if let Some(held_back) = LOG.admit(&e.kind()) {
                tracing::error!(error = %e, held_back, "store could not say which records it knows; the post is not acknowledged");
            }
            self.metrics.rejection("unavailable", 1);
            IngestError::Unavailable(e.to_string())
        })?;
        // A record of this batch with its own time makes its state known too, wherever it is.
        known.extend(
            accepted
                .iter()
                .zip(&is_untimed)
                .filter(|(_, u)| !**u)
                .map(|(r, _)| key(r)),
        );
        let before = accepted.len();
        let (news, at): (Vec<RecordObservation>, Vec<usize>) = accepted
            .into_iter()
            .zip(is_untimed)
            .zip(indices.iter().copied().chain(before..))
            .filter(|((r, untimed), _)| !untimed || !known.contains(&key(r)))
            .map(|((r, _), i)| (r, i))
            .unzip();
        if news.len() < before {
            tracing::debug!(
                redelivered = before - news.len(),
                "records without observed_at already known: taken as re-deliveries"
            );
        }
        Ok((news, at))
    }

    /// `POST /api/v1/webhooks/stripe`.
    pub async fn stripe(
        &self,
        admitted: Admission,
        signature: Option<&str>,
        body: &[u8],
    ) -> Result<StripeReply, IngestError> {
        let received = Instant::now();
        let window = self.time_window();
        if let Some(secret) = &self.stripe_secret {
            stripe::verify_signature(
                signature.unwrap_or(""),
                body,
                secret,
                window.now,
                self.stripe_tolerance,
            )
            .map_err(|e| {
                self.metrics.rejection("bad_signature", 1);
                self.metrics.webhook(stripe::SOURCE, "-", "refused");
                IngestError::BadSignature(e.to_string())
            })?;
        }
        match stripe::parse_event(body, &window).map_err(|e| {
            self.metrics.rejection("bad_webhook", 1);
            self.metrics.webhook(stripe::SOURCE, "-", "refused");
            IngestError::BadRequest(e.to_string())
        })? {
            stripe::StripeOutcome::Ignored(event_type) => {
                // Stripe sends what the endpoint subscribes to; only refund events are evidence.
                self.metrics.webhook(stripe::SOURCE, &event_type, "ignored");
                tracing::debug!(
                    event_type,
                    "Stripe event of a type reckon does not audit: acknowledged, not recorded"
                );
                Ok(StripeReply {
                    received: true,
                    recorded: false,
                    event_type,
                })
            }
            stripe::StripeOutcome::Record {
                event_type, record, ..
            } => {
                let conflicts = self
                    .durable(admitted, vec![Event::Record(record)], received)
                    .await?;
                if let Some((_, e)) = conflicts.first() {
                    self.metrics
                        .webhook(stripe::SOURCE, &event_type, "conflict");
                    return Err(IngestError::Conflict(format!(
                        "{event_type}: {}",
                        conflict_reason(e)
                    )));
                }
                self.metrics
                    .webhook(stripe::SOURCE, &event_type, "recorded");
                Ok(StripeReply {
                    received: true,
                    recorded: true,
                    event_type,
                })
            }
        }
    }
}

/// Why an item the store refused as a conflicting re-send was not stored, naming its identity:
/// the partial-success message, the records API's `rejected[].error`, the webhook's 409.
pub fn conflict_reason(e: &Event) -> String {
    match e {
        Event::Attempt(a) => format!(
            "span {} of trace {}: conflicts with a stored span of different content (same trace_id and span_id; stored first, kept), not stored",
            a.span.span_hex(),
            a.span.trace_hex()
        ),
        Event::Readback(r) => format!(
            "span {} of trace {}: conflicts with a stored span of different content (same trace_id and span_id; stored first, kept), not stored",
            r.span.span_hex(),
            r.span.trace_hex()
        ),
        Event::Record(r) => format!(
            "record {:?} (source {:?}, status {:?}, observed_at {}): conflicts with a stored observation of different content (same source, object_id, status and observed_at; stored first, kept), not stored",
            r.object_id,
            r.source,
            r.status,
            crate::codec::rfc3339(r.observed_at)
        ),
    }
}
