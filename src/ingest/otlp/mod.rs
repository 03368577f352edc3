//! OTLP ingest: export requests (protobuf or OTLP/JSON) in, `model::Event`s out.
//!
//! One implementation for every transport (DESIGN.md invariant 2): the gRPC adapter hands over
//! the decoded message, the HTTP adapter the (already decompressed) body bytes; both end in the
//! same span and log-record conversion. Everything here is pure: no I/O, no clock.
//!
//! Failure granularity follows OTLP partial success: a body that cannot be decoded at all is an
//! `Err`; a single malformed span or log record is counted in `Decoded::rejected` with a reason
//! while the rest of the request is kept.

pub mod attr;
mod json;
pub mod logs;
mod recognize;
mod salvage;
mod value;

#[cfg(test)]
mod tests;

pub(crate) use recognize::clip;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::bounds::TimeWindow;
use super::limits::IntentBudget;
use crate::contract::Contracts;
use crate::model::{Attempt, Event, Readback};

/// How many rejection reasons a `Decoded` keeps. The count stays exact; the reasons are for the
/// exporter's partial-success message and a log line, and an export of 100k broken spans must
/// not turn into 100k strings.
pub const MAX_REASONS: usize = 16;

/// The result of converting one export request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The events to store, in request order.
    pub events: Vec<Event>,
    /// Spans (or log records) in the request, whatever became of them.
    pub seen: u64,
    /// Well-formed items that carry nothing to audit: not a tool span, a tool with no contract,
    /// a log record that describes no downstream object.
    pub dropped: u64,
    /// Of `dropped`: tool spans that would be audited but name no intent (no `reckon.intent.id`
    /// and none readable through the contract's pointer). Worth a metric: it means the executor
    /// is not tagging its spans.
    pub dropped_no_intent: u64,
    /// The first such span, as (trace id, tool): for a log line an operator can follow.
    pub no_intent_example: Option<(String, String)>,
    /// Malformed items refused alone (OTLP `rejected_spans` / `rejected_log_records`).
    pub rejected: u64,
    /// Why, for the first `MAX_REASONS` rejections.
    pub reasons: Vec<String>,
}

impl Decoded {
    fn reject(&mut self, reason: String) {
        self.rejected += 1;
        if self.reasons.len() < MAX_REASONS {
            self.reasons.push(reason);
        }
    }

    /// Refuses an item after decoding (the store held its identity with other content): one
    /// more in `rejected`, with its reason.
    pub fn refuse(&mut self, reason: String) {
        self.reject(reason);
    }

    /// The partial-success `error_message` for the exporter: empty when nothing was rejected.
    pub fn error_message(&self) -> String {
        if self.rejected == 0 {
            return String::new();
        }
        let mut msg = format!("rejected {} of {}: ", self.rejected, self.seen);
        msg.push_str(&self.reasons.join("; "));
        let untold = self.rejected.saturating_sub(self.reasons.len() as u64);
        if untold > 0 {
            msg.push_str(&format!("; and {untold} more"));
        }
        msg
    }
}

/// The whole body could not be decoded; nothing in it was accepted.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("invalid OTLP protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("malformed OTLP/JSON: {0}")]
    Shape(String),
}

/// What became of one span or log record.
// Moved once into `Decoded`; boxing the large variant would cost an allocation per tool span.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Outcome {
    Event(Event),
    Dropped,
    /// A tool span that would be audited but names no intent: (trace id, tool).
    DroppedNoIntent(String, String),
    Rejected(String),
}

impl Decoded {
    fn add(&mut self, outcome: Outcome) {
        self.seen += 1;
        match outcome {
            Outcome::Event(e) => self.events.push(e),
            Outcome::Dropped => self.dropped += 1,
            Outcome::DroppedNoIntent(trace, tool) => {
                self.dropped += 1;
                self.dropped_no_intent += 1;
                if self.no_intent_example.is_none() {
                    self.no_intent_example = Some((trace, tool));
                }
            }
            Outcome::Rejected(reason) => self.reject(reason),
        }
    }
}

/// Tool spans of an already-decoded trace export (the gRPC path) as events.
pub fn traces_from_proto(req: &ExportTraceServiceRequest, contracts: &Contracts) -> Decoded {
    let mut out = Decoded::default();
    for rs in &req.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                out.add(recognize::span_to_event(span, contracts));
            }
        }
    }
    out.cap_intents();
    out
}

/// Tool spans of an OTLP/HTTP protobuf body (`application/x-protobuf`).
pub fn traces_from_protobuf_bytes(
    body: &[u8],
    contracts: &Contracts,
) -> Result<Decoded, DecodeError> {
    match ExportTraceServiceRequest::decode(body) {
        Ok(req) => Ok(traces_from_proto(&req, contracts)),
        Err(e) => {
            let (req, mut out) = salvaged::<ExportTraceServiceRequest, Span>(body, e)?;
            out.absorb(traces_from_proto(&req, contracts));
            Ok(out)
        }
    }
}

/// A request the whole decode refused (`whole`) decoded without the items that do not decode
/// alone (`salvage`: invalid UTF-8 in one span's string), those refused each in a `Decoded`
/// of their own. The whole decode's error when nothing could be cut out, or when the rest
/// still does not decode.
fn salvaged<R: Message + Default, M: salvage::Item>(
    body: &[u8],
    whole: prost::DecodeError,
) -> Result<(R, Decoded), DecodeError> {
    let Some((rest, cut)) = salvage::salvage::<M>(body) else {
        return Err(whole.into());
    };
    let req = R::decode(rest.as_slice()).map_err(|_| whole)?;
    let mut out = Decoded {
        seen: cut.items,
        rejected: cut.items,
        reasons: cut.reasons,
        ..Decoded::default()
    };
    out.reasons.truncate(MAX_REASONS);
    Ok((req, out))
}

/// Tool spans of an OTLP/HTTP JSON body (`application/json`), decoded as real exporters write it.
pub fn traces_from_json(body: &[u8], contracts: &Contracts) -> Result<Decoded, DecodeError> {
    let (req, bad) = json::trace_request(body)?;
    let mut out = Decoded::default();
    // Spans the JSON decoder refused never reach the proto form; count them first so `seen`
    // covers the whole request.
    for reason in bad {
        out.add(Outcome::Rejected(reason));
    }
    out.absorb(traces_from_proto(&req, contracts));
    Ok(out)
}

/// Downstream record observations of an already-decoded log export (the gRPC path).
pub fn logs_from_proto(req: &ExportLogsServiceRequest) -> Decoded {
    let mut out = Decoded::default();
    for rl in &req.resource_logs {
        let resource = rl.resource.as_ref();
        for sl in &rl.scope_logs {
            for rec in &sl.log_records {
                out.add(logs::record_to_event(rec, resource));
            }
        }
    }
    out.cap_intents();
    out
}

/// Downstream record observations of an OTLP/HTTP protobuf log body.
pub fn logs_from_protobuf_bytes(body: &[u8]) -> Result<Decoded, DecodeError> {
    match ExportLogsServiceRequest::decode(body) {
        Ok(req) => Ok(logs_from_proto(&req)),
        Err(e) => {
            let (req, mut out) = salvaged::<ExportLogsServiceRequest, LogRecord>(body, e)?;
            out.absorb(logs_from_proto(&req));
            Ok(out)
        }
    }
}

/// Downstream record observations of an OTLP/HTTP JSON log body.
pub fn logs_from_json(body: &[u8]) -> Result<Decoded, DecodeError> {
    let (req, bad) = json::logs_request(body)?;
    let mut out = Decoded::default();
    for reason in bad {
        out.add(Outcome::Rejected(reason));
    }
    out.absorb(logs_from_proto(&req));
    Ok(out)
}

impl Decoded {
    /// Refuses, each alone, the events with a time outside `window` (the receive time's bounds,
    /// `ingest::bounds`): a span starting before 2000 or more than the tolerated skew ahead, a
    /// span whose end precedes its start, a log record stamped likewise. They count in
    /// `rejected` with a reason naming the span or object and the field. Returns how many.
    pub fn check_times(&mut self, window: &TimeWindow) -> u64 {
        if self.events.iter().all(|e| window.check_event(e).is_ok()) {
            return 0;
        }
        let mut refused = 0;
        for e in std::mem::take(&mut self.events) {
            match window.check_event(&e) {
                Ok(()) => self.events.push(e),
                Err(err) => {
                    refused += 1;
                    let (what, field) = match &e {
                        Event::Attempt(a) => (
                            format!(
                                "span {}/{} '{}'",
                                a.span.trace_hex(),
                                a.span.span_hex(),
                                recognize::clip(&a.tool)
                            ),
                            if err.field == "start" {
                                "start time"
                            } else {
                                "end time"
                            },
                        ),
                        Event::Readback(r) => (
                            format!(
                                "read span {}/{} '{}'",
                                r.span.trace_hex(),
                                r.span.span_hex(),
                                recognize::clip(&r.tool)
                            ),
                            if err.field == "at" {
                                "start time"
                            } else {
                                "end time"
                            },
                        ),
                        Event::Record(r) => (
                            format!("log record for object '{}'", recognize::clip(&r.object_id)),
                            if err.field == "observed_at" {
                                "time"
                            } else {
                                logs::CREATED_AT
                            },
                        ),
                    };
                    self.reject(format!("{what}: {field} {}", err.error));
                }
            }
        }
        refused
    }

    /// Refuses, each alone, the events of intents past the export's first
    /// `limits::MAX_INTENTS_PER_EXPORT` distinct ones.
    fn cap_intents(&mut self) {
        // Fewer events than the limit cannot name more intents than it.
        if self.events.len() <= super::limits::MAX_INTENTS_PER_EXPORT {
            return;
        }
        let mut budget = IntentBudget::default();
        for e in std::mem::take(&mut self.events) {
            if budget.admit_event(&e) {
                self.events.push(e);
                continue;
            }
            let what = match &e {
                Event::Attempt(Attempt { span, .. }) | Event::Readback(Readback { span, .. }) => {
                    format!("span {}/{}", span.trace_hex(), span.span_hex())
                }
                Event::Record(r) => {
                    format!("log record for object '{}'", recognize::clip(&r.object_id))
                }
            };
            self.reject(format!("{what}: {}", IntentBudget::refusal()));
        }
    }

    fn absorb(&mut self, other: Decoded) {
        self.events.extend(other.events);
        self.seen += other.seen;
        self.dropped += other.dropped;
        self.dropped_no_intent += other.dropped_no_intent;
        if self.no_intent_example.is_none() {
            self.no_intent_example = other.no_intent_example;
        }
        self.rejected += other.rejected;
        let room = MAX_REASONS.saturating_sub(self.reasons.len());
        self.reasons.extend(other.reasons.into_iter().take(room));
    }
}
