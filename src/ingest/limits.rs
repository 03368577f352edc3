//! What one item of an export may carry, beyond the body cap (`max_request_bytes`, counted after
//! decompression). The body cap bounds a request; these bound what one span, one log record or
//! one export can make reckon keep and work on: every accepted event is stored, held by the
//! engine and audited, and its tool name becomes a metric label. A span over a limit is refused
//! alone (OTLP partial success, naming the limit); the rest of the export is kept.
//!
//! The values are constants, documented in README "Limits": no conforming emitter comes near
//! them, and an operator has nothing to tune.

use std::collections::HashSet;

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::otlp::clip;
use crate::model::{Event, RecordObservation};

/// Attributes on one tool span or record log record (and on each of a span's events). The
/// OpenTelemetry SDKs' default attribute count limit, so an SDK never sends more on its own.
pub const MAX_SPAN_ATTRIBUTES: usize = 128;

/// Events on one tool span: the SDKs' default event count limit.
pub const MAX_SPAN_EVENTS: usize = 128;

/// Bytes of one attribute value (its protobuf encoding: a string's length plus a few bytes; a
/// kvlist or array with everything in it), and of a tool span's name. Large enough for the
/// arguments of any tool call an agent makes (captured content, a document to email), small
/// enough that a span cannot carry megabytes into the store and the verdicts.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Distinct intents one export (a trace or log request, a records post) may name. Exporters
/// batch at most 512 spans by default (the SDKs' `max_export_batch_size`) and the Collector
/// configuration in `deploy/` at most 2048: a legitimate batch stays below this, while one
/// request naming tens of thousands of made-up intents would make the engine create and audit
/// each of them under one lock.
pub const MAX_INTENTS_PER_EXPORT: usize = 2048;

/// Items in one records API post. Each item costs the reply a line, accepted or refused, so a
/// body of millions of one-byte items must not be answered item by item; a reconciler's batch
/// (at most `MAX_INTENTS_PER_EXPORT` objects of their own anyway) stays far below.
pub const MAX_RECORDS_PER_POST: usize = 10_000;

/// A tool span within the limits, or why not (for the partial-success message).
pub fn check_span(span: &Span) -> Result<(), String> {
    if span.name.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "the span name is {} bytes, over the limit of {MAX_VALUE_BYTES}",
            span.name.len()
        ));
    }
    check_attributes(&span.attributes)?;
    if span.events.len() > MAX_SPAN_EVENTS {
        return Err(format!(
            "{} span events, over the limit of {MAX_SPAN_EVENTS}",
            span.events.len()
        ));
    }
    for ev in &span.events {
        check_attributes(&ev.attributes)
            .map_err(|e| format!("span event '{}': {e}", clip(&ev.name)))?;
    }
    Ok(())
}

/// At most `MAX_SPAN_ATTRIBUTES` attributes, each value within `MAX_VALUE_BYTES`.
pub fn check_attributes(attrs: &[KeyValue]) -> Result<(), String> {
    if attrs.len() > MAX_SPAN_ATTRIBUTES {
        return Err(format!(
            "{} attributes, over the limit of {MAX_SPAN_ATTRIBUTES}",
            attrs.len()
        ));
    }
    for kv in attrs {
        if let Some(v) = &kv.value {
            check_value(&kv.key, v)?;
        }
    }
    Ok(())
}

/// One attribute value within `MAX_VALUE_BYTES`.
pub fn check_value(key: &str, v: &AnyValue) -> Result<(), String> {
    let len = v.encoded_len();
    if len > MAX_VALUE_BYTES {
        return Err(format!(
            "attribute '{}' is {len} bytes, over the limit of {MAX_VALUE_BYTES}",
            clip(key)
        ));
    }
    Ok(())
}

/// Counts the distinct intents of an export in order and tells, for each, whether it is within
/// `MAX_INTENTS_PER_EXPORT`: the first intents named are admitted, later new ones refused.
///
/// A record that names no intent counts as its object's: the engine audits it as an orphan of
/// its own until an intent claims it.
#[derive(Default)]
pub struct IntentBudget {
    seen: HashSet<String>,
}

impl IntentBudget {
    fn admit(&mut self, intent: &str) -> bool {
        self.seen.contains(intent)
            || (self.seen.len() < MAX_INTENTS_PER_EXPORT && self.seen.insert(intent.to_owned()))
    }

    /// Whether `event` may be kept.
    pub fn admit_event(&mut self, event: &Event) -> bool {
        match event {
            Event::Attempt(a) => self.admit(&a.intent_id),
            Event::Readback(r) => self.admit(&r.intent_id),
            Event::Record(r) => self.admit_record(r),
        }
    }

    /// Whether the record `r` may be kept.
    pub fn admit_record(&mut self, r: &RecordObservation) -> bool {
        self.admit(r.intent_id.as_deref().unwrap_or(&r.object_id))
    }

    /// The reason given for each refused item.
    pub fn refusal() -> String {
        format!(
            "the export names more than {MAX_INTENTS_PER_EXPORT} distinct intents; send the rest in another export"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_builders::record_at;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;

    fn s(key: &str, len: usize) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue("x".repeat(len))),
            }),
            key_strindex: 0,
        }
    }

    #[test]
    fn attribute_count_and_value_size_are_bounded() {
        let at_limit: Vec<KeyValue> = (0..MAX_SPAN_ATTRIBUTES)
            .map(|i| s(&format!("a{i}"), 1))
            .collect();
        assert_eq!(check_attributes(&at_limit), Ok(()));
        let mut over = at_limit.clone();
        over.push(s("one.more", 1));
        assert_eq!(
            check_attributes(&over).unwrap_err(),
            "129 attributes, over the limit of 128"
        );
        // A string's encoding is its bytes plus a tag and a length: 3 bytes at this size.
        assert_eq!(check_attributes(&[s("args", MAX_VALUE_BYTES - 4)]), Ok(()));
        assert_eq!(
            check_attributes(&[s("args", MAX_VALUE_BYTES)]).unwrap_err(),
            "attribute 'args' is 65540 bytes, over the limit of 65536"
        );
    }

    #[test]
    fn the_first_intents_of_an_export_are_admitted() {
        let record = |intent: Option<&str>, object: &str| {
            record_at(intent, object, "succeeded", crate::model::Timestamp(0))
        };
        let mut budget = IntentBudget::default();
        for i in 0..MAX_INTENTS_PER_EXPORT - 1 {
            assert!(budget.admit_record(&record(Some(&format!("int_{i}")), "re_1")));
        }
        // A record naming no intent counts as its object's: the last place.
        assert!(budget.admit_record(&record(None, "re_orphan")));
        assert!(!budget.admit_record(&record(Some("int_new"), "re_2")));
        assert!(!budget.admit_record(&record(None, "re_other")));
        // Intents already admitted stay admitted.
        assert!(budget.admit_record(&record(Some("int_0"), "re_3")));
        assert!(budget.admit_record(&record(None, "re_orphan")));
    }
}
