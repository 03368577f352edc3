//! Reading attribute values as emitters actually set them: the same fact arrives as a string
//! in one SDK, an int in another and a JSON-encoded string in a third.

use std::borrow::Cow;

use base64::Engine as _;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};

/// The value of the first attribute named `key`.
pub(crate) fn find<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
}

pub(crate) fn str_of(v: &AnyValue) -> Option<&str> {
    match &v.value {
        Some(Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

/// An identifier-like value: a non-blank string (trimmed), or an int some SDK sent for an id.
/// Blank counts as absent, since an empty id joins nothing.
pub(crate) fn text_of(v: &AnyValue) -> Option<Cow<'_, str>> {
    match &v.value {
        Some(Value::StringValue(s)) => {
            let t = s.trim();
            (!t.is_empty()).then_some(Cow::Borrowed(t))
        }
        Some(Value::IntValue(i)) => Some(Cow::Owned(i.to_string())),
        _ => None,
    }
}

/// An integer, tolerating the double a JS SDK produces and the string a careless one does.
pub(crate) fn int_of(v: &AnyValue) -> Option<i64> {
    match &v.value {
        Some(Value::IntValue(i)) => Some(*i),
        Some(Value::DoubleValue(d)) if d.fract() == 0.0 && d.abs() < 9.0e18 => Some(*d as i64),
        Some(Value::StringValue(s)) => {
            let t = s.trim();
            t.parse::<i64>().ok().or_else(|| {
                let d = t.parse::<f64>().ok()?;
                (d.fract() == 0.0 && d.abs() < 9.0e18).then_some(d as i64)
            })
        }
        _ => None,
    }
}

/// The value as JSON data, structure for structure.
pub(crate) fn to_json(v: &AnyValue) -> serde_json::Value {
    use serde_json::Value as J;
    match &v.value {
        None | Some(Value::StringValueStrindex(_)) => J::Null,
        Some(Value::StringValue(s)) => J::String(s.clone()),
        Some(Value::BoolValue(b)) => J::Bool(*b),
        Some(Value::IntValue(i)) => J::from(*i),
        Some(Value::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map(J::Number)
            .unwrap_or(J::Null),
        Some(Value::ArrayValue(a)) => J::Array(a.values.iter().map(to_json).collect()),
        Some(Value::KvlistValue(kv)) => J::Object(
            kv.values
                .iter()
                .map(|kv| {
                    (
                        kv.key.clone(),
                        kv.value.as_ref().map(to_json).unwrap_or(J::Null),
                    )
                })
                .collect(),
        ),
        Some(Value::BytesValue(b)) => {
            J::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
    }
}

/// A payload (tool arguments, a message list) that is either JSON text in a string attribute
/// or structured as a kvlist/array. A string that is not JSON is no payload: emitters write
/// placeholders such as `<not specified>` there.
pub(crate) fn json_of(v: &AnyValue) -> Option<serde_json::Value> {
    match &v.value {
        Some(Value::StringValue(s)) => match serde_json::from_str(s).ok()? {
            // Double-encoded (`JSON.stringify` of a string that already was JSON).
            serde_json::Value::String(inner) => match serde_json::from_str(&inner) {
                Ok(v @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => Some(v),
                _ => Some(serde_json::Value::String(inner)),
            },
            v => Some(v),
        },
        Some(Value::KvlistValue(_)) | Some(Value::ArrayValue(_)) => Some(to_json(v)),
        _ => None,
    }
}

/// An id-like JSON value found through a contract pointer.
pub(crate) fn json_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Unix nanos as the model's signed type. OTLP's u64 only exceeds i64 after the year 2262.
pub(crate) fn nanos(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};

    fn s(v: &str) -> AnyValue {
        AnyValue {
            value: Some(Value::StringValue(v.into())),
        }
    }

    #[test]
    fn int_of_tolerates_double_and_string() {
        assert_eq!(
            int_of(&AnyValue {
                value: Some(Value::IntValue(504))
            }),
            Some(504)
        );
        assert_eq!(
            int_of(&AnyValue {
                value: Some(Value::DoubleValue(504.0))
            }),
            Some(504)
        );
        assert_eq!(
            int_of(&AnyValue {
                value: Some(Value::DoubleValue(504.5))
            }),
            None
        );
        assert_eq!(int_of(&s(" 504 ")), Some(504));
        assert_eq!(int_of(&s("504.0")), Some(504));
        assert_eq!(int_of(&s("five")), None);
        assert_eq!(int_of(&AnyValue { value: None }), None);
    }

    #[test]
    fn text_of_trims_and_treats_blank_as_absent() {
        assert_eq!(text_of(&s("  int_1 ")).as_deref(), Some("int_1"));
        assert_eq!(text_of(&s("   ")), None);
        assert_eq!(
            text_of(&AnyValue {
                value: Some(Value::IntValue(7))
            })
            .as_deref(),
            Some("7")
        );
        assert_eq!(
            text_of(&AnyValue {
                value: Some(Value::BoolValue(true))
            }),
            None
        );
    }

    #[test]
    fn json_of_reads_strings_and_structures() {
        let kv = AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: vec![
                    KeyValue {
                        key: "amount".into(),
                        value: Some(AnyValue {
                            value: Some(Value::DoubleValue(45.5)),
                        }),
                        key_strindex: 0,
                    },
                    KeyValue {
                        key: "tags".into(),
                        value: Some(AnyValue {
                            value: Some(Value::ArrayValue(ArrayValue {
                                values: vec![s("a"), s("b")],
                            })),
                        }),
                        key_strindex: 0,
                    },
                ],
            })),
        };
        assert_eq!(
            json_of(&kv).map(|j| j.to_string()).as_deref(),
            Some(r#"{"amount":45.5,"tags":["a","b"]}"#)
        );
        assert_eq!(
            json_of(&s(r#"{"a": 1}"#)).map(|j| j.to_string()).as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(json_of(&s("<not specified>")), None);
        assert_eq!(
            json_of(&s(r#""{\"a\": 1}""#))
                .map(|j| j.to_string())
                .as_deref(),
            Some(r#"{"a":1}"#)
        );
    }
}
