//! The one ingest service every transport feeds. Transports decode; this makes the events
//! durable through the engine, counts them, and refuses work (retryably) when at capacity
//! instead of buffering without bound.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::IngestError;
use super::otlp::Decoded;
use super::{records, stripe};
use crate::contract::Contracts;
use crate::engine::{wall_now, Engine};
use crate::metrics::Metrics;
use crate::model::{Dur, Event};

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
    contracts: Arc<Contracts>,
    metrics: Arc<Metrics>,
    permits: Arc<Semaphore>,
    stripe_secret: Option<String>,
    stripe_tolerance: Dur,
}

impl IngestService {
    pub fn new(
        engine: Arc<Engine>,
        contracts: Arc<Contracts>,
        metrics: Arc<Metrics>,
        max_concurrent: usize,
        stripe_secret: Option<String>,
        stripe_tolerance: Dur,
    ) -> Self {
        IngestService {
            engine,
            contracts,
            metrics,
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            stripe_secret,
            stripe_tolerance,
        }
    }

    pub fn contracts(&self) -> &Contracts {
        &self.contracts
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Count a failure before any events were taken.
    pub fn refused(&self, e: &IngestError) {
        self.metrics.rejection(e.reason(), 1);
    }

    /// Admit one request, or refuse it as overloaded (429 / RESOURCE_EXHAUSTED, retryable).
    pub fn admit(&self) -> Result<Admission, IngestError> {
        self.permits
            .clone()
            .try_acquire_owned()
            .map(Admission)
            .map_err(|_| {
                self.metrics.rejection("overloaded", 1);
                IngestError::Overloaded
            })
    }

    async fn durable(
        &self,
        admitted: Admission,
        events: Vec<Event>,
        received: Instant,
    ) -> Result<(), IngestError> {
        self.engine.ingest(events, received, admitted).await.map_err(|e| {
            tracing::error!(error = %e, "store refused an append; the export is not acknowledged");
            self.metrics.rejection("unavailable", 1);
            IngestError::Unavailable(e.to_string())
        })?;
        Ok(())
    }

    pub async fn traces(
        &self,
        admitted: Admission,
        transport: Transport,
        decoded: Decoded,
        received: Instant,
    ) -> Result<PartialSuccess, IngestError> {
        self.metrics
            .spans_received(transport.as_str(), decoded.seen);
        if decoded.dropped > 0 {
            self.metrics
                .spans_dropped("not_audited", decoded.dropped - decoded.dropped_no_intent);
            self.metrics
                .spans_dropped("no_intent_id", decoded.dropped_no_intent);
        }
        if decoded.rejected > 0 {
            self.metrics.rejection("malformed_span", decoded.rejected);
        }
        let reply = PartialSuccess {
            rejected: decoded.rejected,
            message: decoded.error_message(),
        };
        self.durable(admitted, decoded.events, received).await?;
        Ok(reply)
    }

    pub async fn logs(
        &self,
        admitted: Admission,
        transport: Transport,
        decoded: Decoded,
        received: Instant,
    ) -> Result<PartialSuccess, IngestError> {
        self.metrics
            .log_records_received(transport.as_str(), decoded.seen);
        if decoded.rejected > 0 {
            self.metrics
                .rejection("malformed_log_record", decoded.rejected);
        }
        let reply = PartialSuccess {
            rejected: decoded.rejected,
            message: decoded.error_message(),
        };
        self.durable(admitted, decoded.events, received).await?;
        Ok(reply)
    }

    /// `POST /api/v1/records`: good items are kept, bad ones named by index.
    pub async fn records(
        &self,
        admitted: Admission,
        body: &[u8],
    ) -> Result<RecordsReply, IngestError> {
        let received = Instant::now();
        let batch = records::parse_records(body, wall_now()).map_err(|e| {
            self.metrics.rejection("bad_record", 1);
            IngestError::BadRequest(e.to_string())
        })?;
        if !batch.rejected.is_empty() {
            self.metrics
                .rejection("bad_record", batch.rejected.len() as u64);
        }
        let accepted = batch.accepted.len();
        self.durable(
            admitted,
            batch.accepted.into_iter().map(Event::Record).collect(),
            received,
        )
        .await?;
        Ok(RecordsReply {
            accepted,
            rejected: batch.rejected,
        })
    }

    /// `POST /api/v1/webhooks/stripe`.
    pub async fn stripe(
        &self,
        admitted: Admission,
        signature: Option<&str>,
        body: &[u8],
    ) -> Result<StripeReply, IngestError> {
        let received = Instant::now();
        if let Some(secret) = &self.stripe_secret {
            stripe::verify_signature(
                signature.unwrap_or(""),
                body,
                secret,
                wall_now(),
                self.stripe_tolerance,
            )
            .map_err(|e| {
                self.metrics.rejection("bad_signature", 1);
                IngestError::BadSignature(e.to_string())
            })?;
        }
        match stripe::parse_event(body).map_err(|e| {
            self.metrics.rejection("bad_webhook", 1);
            IngestError::BadRequest(e.to_string())
        })? {
            stripe::StripeOutcome::Ignored(event_type) => Ok(StripeReply {
                received: true,
                recorded: false,
                event_type,
            }),
            stripe::StripeOutcome::Record {
                event_type, record, ..
            } => {
                self.durable(admitted, vec![Event::Record(record)], received)
                    .await?;
                Ok(StripeReply {
                    received: true,
                    recorded: true,
                    event_type,
                })
            }
        }
    }
}
