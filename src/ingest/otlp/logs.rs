//! Downstream records as OTLP log records.
//!
//! A downstream that already exports OpenTelemetry logs can report its objects (a refund, an
//! invoice draft) to reckon's OTLP endpoint (`/v1/logs`, or gRPC `LogsService/Export`) instead
//! of calling the records API. Each log record that carries `reckon.record.object_id` is one
//! observation of that object; every other log record is counted and dropped, so an
//! application's ordinary logs can share the pipeline.
//!
//! | attribute | type | required | meaning |
//! |---|---|---|---|
//! | `reckon.record.object_id` | string | yes | the downstream object's id (`re_3Mt...`) |
//! | `reckon.record.status` | string | yes | its status at this observation (`pending`, `succeeded`) |
//! | `reckon.record.kind` | string | no | object kind, matched to a contract's `record_kind` (`refund`) |
//! | `reckon.intent.id` | string | no | the intent that created it, when the downstream stored it |
//! | `reckon.idempotency_key` | string | no | the idempotency key the object was created with |
//! | `reckon.record.amount` | number or decimal string | no | the amount in major units (`45.00`), as in the tool's arguments |
//! | `reckon.record.currency` | string | no | ISO 4217 code (`EUR`) |
//! | `reckon.record.target` | string | no | what the effect applies to (the order id) |
//! | `reckon.record.created_at` | int (unix nanos) or RFC 3339 string | no | when the downstream created the object |
//! | `reckon.record.source` | string | no | who reports it; default `otlp` |
//!
//! The observation time is the record's `time_unix_nano`, or else its `observed_time_unix_nano`.
//! Attributes are read from the log record; `reckon.record.kind` and `reckon.record.source` fall
//! back to the resource's attributes, so a downstream service can declare them once.
//! A record with an object id but no status, no timestamp, or an amount or creation time that
//! does not parse is rejected alone (OTLP partial success) with the reason; so is one whose time
//! or creation time lies outside the bounds of `ingest::bounds` (checked by
//! [`super::Decoded::check_times`] against the receive time).
//!
//! An observation is identified by (source, object_id, status, observed_at): a re-sent export
//! adds nothing.

use std::borrow::Cow;

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::recognize::clip;
use super::value::{find, nanos, text_of};
use super::Outcome;
use crate::ingest::limits;
use crate::model::{Amount, Decimal, Event, RecordObservation, Timestamp};

pub const OBJECT_ID: &str = "reckon.record.object_id";
pub const STATUS: &str = "reckon.record.status";
pub const KIND: &str = "reckon.record.kind";
pub const INTENT_ID: &str = "reckon.intent.id";
pub const IDEMPOTENCY_KEY: &str = "reckon.idempotency_key";
pub const AMOUNT: &str = "reckon.record.amount";
pub const CURRENCY: &str = "reckon.record.currency";
pub const TARGET: &str = "reckon.record.target";
pub const CREATED_AT: &str = "reckon.record.created_at";
pub const SOURCE: &str = "reckon.record.source";
/// `reckon.record.source` when neither the record nor its resource names one.
pub const DEFAULT_SOURCE: &str = "otlp";

#[derive(Default)]
struct Scan<'a> {
    object_id: Option<&'a AnyValue>,
    status: Option<&'a AnyValue>,
    kind: Option<&'a AnyValue>,
    intent_id: Option<&'a AnyValue>,
    idempotency_key: Option<&'a AnyValue>,
    amount: Option<&'a AnyValue>,
    currency: Option<&'a AnyValue>,
    target: Option<&'a AnyValue>,
    created_at: Option<&'a AnyValue>,
    source: Option<&'a AnyValue>,
}

impl<'a> Scan<'a> {
    fn of(attrs: &'a [KeyValue]) -> Self {
        let mut s = Scan::default();
        for kv in attrs {
            let Some(v) = kv.value.as_ref() else { continue };
            let slot = match kv.key.as_str() {
                OBJECT_ID => &mut s.object_id,
                STATUS => &mut s.status,
                KIND => &mut s.kind,
                INTENT_ID => &mut s.intent_id,
                IDEMPOTENCY_KEY => &mut s.idempotency_key,
                AMOUNT => &mut s.amount,
                CURRENCY => &mut s.currency,
                TARGET => &mut s.target,
                CREATED_AT => &mut s.created_at,
                SOURCE => &mut s.source,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(v);
            }
        }
        s
    }
}

pub(crate) fn record_to_event(rec: &LogRecord, resource: Option<&Resource>) -> Outcome {
    // Cheap exit for the application's ordinary logs.
    if !rec.attributes.iter().any(|kv| kv.key == OBJECT_ID) {
        return Outcome::Dropped;
    }
    let scan = Scan::of(&rec.attributes);
    let Some(object_id) = scan.object_id.and_then(text_of) else {
        return Outcome::Rejected(format!("log record: {OBJECT_ID} is not a non-empty string"));
    };
    let why = |msg: &str| format!("log record for object '{}': {msg}", clip(&object_id));
    // The resource's kind and source are copied into the record too.
    let resource_attrs = resource.map(|r| r.attributes.as_slice()).unwrap_or(&[]);
    let mut from_resource = [KIND, SOURCE]
        .into_iter()
        .filter_map(|k| find(resource_attrs, k).map(|v| (k, v)));
    if let Err(e) = limits::check_attributes(&rec.attributes)
        .and_then(|()| from_resource.try_for_each(|(k, v)| limits::check_value(k, v)))
    {
        return Outcome::Rejected(why(&e));
    }
    let Some(status) = scan.status.and_then(text_of) else {
        return Outcome::Rejected(why(&format!("{STATUS} is missing or empty")));
    };
    let observed = if rec.time_unix_nano != 0 {
        rec.time_unix_nano
    } else {
        rec.observed_time_unix_nano
    };
    if observed == 0 {
        // The observation time is part of the record's identity; inventing one would make a
        // re-sent export a second observation.
        return Outcome::Rejected(why(
            "neither time_unix_nano nor observed_time_unix_nano is set",
        ));
    }
    let amount = match scan.amount.map(amount) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(a))) => Some(a),
        Some(Err(e)) => return Outcome::Rejected(why(&e)),
    };
    let created_at = match scan.created_at.map(created_at) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(t))) => Some(t),
        Some(Err(e)) => return Outcome::Rejected(why(&e)),
    };
    let owned = |v: Option<&AnyValue>| v.and_then(text_of).map(Cow::into_owned);
    let source = owned(scan.source.or_else(|| find(resource_attrs, SOURCE)))
        .unwrap_or_else(|| DEFAULT_SOURCE.to_string());
    Outcome::Event(Event::Record(RecordObservation {
        source,
        kind: owned(scan.kind.or_else(|| find(resource_attrs, KIND))),
        object_id: object_id.into_owned(),
        intent_id: owned(scan.intent_id),
        idempotency_key: owned(scan.idempotency_key),
        status: status.into_owned(),
        amount,
        currency: owned(scan.currency),
        target: owned(scan.target),
        created_at,
        observed_at: Timestamp(nanos(observed)),
    }))
}

/// Major units, exact. A double goes through its shortest decimal form, so `45.1` stays `45.1`
/// rather than the binary neighbour it stands for.
fn amount(v: &AnyValue) -> Result<Option<Amount>, String> {
    let bad = |s: &dyn std::fmt::Display| format!("{AMOUNT} {s} is not a decimal amount");
    let d = match &v.value {
        None => return Ok(None),
        Some(Value::IntValue(i)) => Decimal {
            mantissa: *i as i128,
            scale: 0,
        },
        Some(Value::DoubleValue(d)) if d.is_finite() => {
            Decimal::parse(&d.to_string()).ok_or_else(|| bad(d))?
        }
        Some(Value::StringValue(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::StringValue(s)) => {
            Decimal::parse(s).ok_or_else(|| bad(&format!("\"{}\"", clip(s))))?
        }
        Some(_) => return Err(bad(&"(not a number)")),
    };
    Ok(Some(Amount::Major(d)))
}

fn created_at(v: &AnyValue) -> Result<Option<Timestamp>, String> {
    let bad = || format!("{CREATED_AT} is neither unix nanoseconds nor an RFC 3339 time");
    match &v.value {
        None => Ok(None),
        Some(Value::IntValue(i)) => Ok(Some(Timestamp(*i))),
        Some(Value::DoubleValue(d)) if d.is_finite() && d.fract() == 0.0 && d.abs() < 9.0e18 => {
            Ok(Some(Timestamp(*d as i64)))
        }
        Some(Value::StringValue(s)) => {
            let t = s.trim();
            if t.is_empty() {
                Ok(None)
            } else if let Ok(n) = t.parse::<i64>() {
                Ok(Some(Timestamp(n)))
            } else {
                crate::codec::parse_rfc3339(t).map(Some).ok_or_else(bad)
            }
        }
        Some(_) => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> AnyValue {
        AnyValue {
            value: Some(Value::StringValue(v.into())),
        }
    }

    #[test]
    fn amount_reads_numbers_and_decimal_strings() {
        let major = |m: i128, scale: u32| Some(Amount::Major(Decimal { mantissa: m, scale }));
        assert_eq!(amount(&s("45.00")).unwrap(), major(45, 0));
        assert_eq!(
            amount(&AnyValue {
                value: Some(Value::DoubleValue(45.1))
            })
            .unwrap(),
            major(451, 1)
        );
        assert_eq!(
            amount(&AnyValue {
                value: Some(Value::IntValue(45))
            })
            .unwrap(),
            major(45, 0)
        );
        assert_eq!(amount(&s("")).unwrap(), None);
        assert!(amount(&s("forty-five")).unwrap_err().contains("forty-five"));
        assert!(amount(&AnyValue {
            value: Some(Value::DoubleValue(f64::NAN))
        })
        .is_err());
    }

    #[test]
    fn created_at_reads_nanos_and_rfc3339() {
        assert_eq!(
            created_at(&AnyValue {
                value: Some(Value::IntValue(1_700_000_000_000_000_000))
            })
            .unwrap(),
            Some(Timestamp(1_700_000_000_000_000_000))
        );
        assert_eq!(
            created_at(&s("1700000000000000000")).unwrap(),
            Some(Timestamp(1_700_000_000_000_000_000))
        );
        assert_eq!(
            created_at(&s("2023-11-14T22:13:20.5Z")).unwrap(),
            Some(Timestamp(1_700_000_000_500_000_000))
        );
        assert!(created_at(&s("yesterday")).is_err());
    }
}
