//! OTLP/JSON, decoded as exporters really write it, into the prost types the protobuf path
//! uses, so both encodings share one recognizer.
//!
//! The OTLP/JSON mapping (hex ids, camelCase keys, enums as integers, 64-bit integers as
//! strings) is what the spec asks for; exporters and hand-written senders deviate, and the
//! generated serde types reject what they should tolerate. Tolerated here: ids in hex or
//! base64, enums as integers or names (with or without their prefix), 64-bit integers as
//! strings or numbers, unknown keys, `null` members, `{}` and empty `AnyValue`s, snake_case
//! keys, bare JSON scalars where an `AnyValue` belongs, the pre-1.0 `instrumentationLibrary*`
//! containers, and an empty body.
//!
//! Errors above the span/record level (the body is not JSON, `resourceSpans` is not an array)
//! fail the whole request. Errors inside one span or log record reject that item alone.

use base64::Engine as _;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use serde_json::{Map, Value};

use super::recognize::clip;
use super::DecodeError;

type Obj = Map<String, Value>;

/// A trace request and the reasons for the spans that could not be decoded.
pub(crate) fn trace_request(
    body: &[u8],
) -> Result<(ExportTraceServiceRequest, Vec<String>), DecodeError> {
    let mut rejected = Vec::new();
    let Some(top) = top_object(body)? else {
        return Ok((ExportTraceServiceRequest::default(), rejected));
    };
    let mut index = 0usize;
    let mut resource_spans = Vec::new();
    for rs in array(&top, &["resourceSpans", "resource_spans"], "resourceSpans")? {
        let rs = object(rs, "resourceSpans[]")?;
        let resource = resource(rs)?;
        let mut scope_spans = Vec::new();
        let scopes = array(rs, &["scopeSpans", "scope_spans"], "scopeSpans")?
            .iter()
            .chain(array(
                rs,
                &[
                    "instrumentationLibrarySpans",
                    "instrumentation_library_spans",
                ],
                "scopeSpans",
            )?);
        for ss in scopes {
            let ss = object(ss, "scopeSpans[]")?;
            let mut spans = Vec::new();
            for sp in array(ss, &["spans"], "spans")? {
                match decode_span(sp) {
                    Ok(s) => spans.push(s),
                    Err(e) => rejected.push(format!("span #{index} {e}")),
                }
                index += 1;
            }
            scope_spans.push(ScopeSpans {
                scope: scope(ss)?,
                spans,
                schema_url: string(ss, &["schemaUrl", "schema_url"]),
            });
        }
        resource_spans.push(ResourceSpans {
            resource,
            scope_spans,
            schema_url: string(rs, &["schemaUrl", "schema_url"]),
        });
    }
    Ok((ExportTraceServiceRequest { resource_spans }, rejected))
}

/// A log request and the reasons for the records that could not be decoded.
pub(crate) fn logs_request(
    body: &[u8],
) -> Result<(ExportLogsServiceRequest, Vec<String>), DecodeError> {
    let mut rejected = Vec::new();
    let Some(top) = top_object(body)? else {
        return Ok((ExportLogsServiceRequest::default(), rejected));
    };
    let mut index = 0usize;
    let mut resource_logs = Vec::new();
    for rl in array(&top, &["resourceLogs", "resource_logs"], "resourceLogs")? {
        let rl = object(rl, "resourceLogs[]")?;
        let resource = resource(rl)?;
        let mut scope_logs = Vec::new();
        let scopes = array(rl, &["scopeLogs", "scope_logs"], "scopeLogs")?
            .iter()
            .chain(array(
                rl,
                &["instrumentationLibraryLogs", "instrumentation_library_logs"],
                "scopeLogs",
            )?);
        for sl in scopes {
            let sl = object(sl, "scopeLogs[]")?;
            let mut log_records = Vec::new();
            for rec in array(sl, &["logRecords", "log_records"], "logRecords")? {
                match decode_log_record(rec) {
                    Ok(r) => log_records.push(r),
                    Err(e) => rejected.push(format!("log record #{index}: {e}")),
                }
                index += 1;
            }
            scope_logs.push(ScopeLogs {
                scope: scope(sl)?,
                log_records,
                schema_url: string(sl, &["schemaUrl", "schema_url"]),
            });
        }
        resource_logs.push(ResourceLogs {
            resource,
            scope_logs,
            schema_url: string(rl, &["schemaUrl", "schema_url"]),
        });
    }
    Ok((ExportLogsServiceRequest { resource_logs }, rejected))
}

/// The top-level object, or `None` for a request with nothing in it (empty body, `null`).
fn top_object(body: &[u8]) -> Result<Option<Obj>, DecodeError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match serde_json::from_slice::<Value>(body)? {
        Value::Object(o) => Ok(Some(o)),
        Value::Null => Ok(None),
        other => Err(DecodeError::Shape(format!(
            "the request must be a JSON object, not {}",
            kind(&other)
        ))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The first of `keys` present and not `null`: camelCase as the spec says, snake_case as the
/// proto field names some senders use.
fn get<'a>(o: &'a Obj, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| o.get(*k).filter(|v| !v.is_null()))
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Obj, DecodeError> {
    v.as_object()
        .ok_or_else(|| DecodeError::Shape(format!("{what} is {}, want an object", kind(v))))
}

fn array<'a>(o: &'a Obj, keys: &[&str], what: &str) -> Result<&'a [Value], DecodeError> {
    match get(o, keys) {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(v) => Err(DecodeError::Shape(format!(
            "{what} is {}, want an array",
            kind(v)
        ))),
    }
}

/// A string member; anything else counts as absent, since every string field we read is
/// informational (names, schema urls) or validated later.
fn string(o: &Obj, keys: &[&str]) -> String {
    match get(o, keys) {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn resource(o: &Obj) -> Result<Option<Resource>, DecodeError> {
    let Some(r) = get(o, &["resource"]) else {
        return Ok(None);
    };
    let r = object(r, "resource")?;
    Ok(Some(Resource {
        attributes: attributes(r).map_err(|e| DecodeError::Shape(format!("resource {e}")))?,
        ..Default::default()
    }))
}

fn scope(o: &Obj) -> Result<Option<InstrumentationScope>, DecodeError> {
    let Some(s) = get(
        o,
        &["scope", "instrumentationLibrary", "instrumentation_library"],
    ) else {
        return Ok(None);
    };
    let s = object(s, "scope")?;
    Ok(Some(InstrumentationScope {
        name: string(s, &["name"]),
        version: string(s, &["version"]),
        attributes: attributes(s).map_err(|e| DecodeError::Shape(format!("scope {e}")))?,
        dropped_attributes_count: 0,
    }))
}

fn decode_span(v: &Value) -> Result<Span, String> {
    let Value::Object(o) = v else {
        return Err(format!("is {}, want an object", kind(v)));
    };
    let name = string(o, &["name"]);
    let ctx = |e: String| format!("'{}': {e}", clip(&name));
    let span = Span {
        trace_id: id(o, &["traceId", "trace_id"], 16).map_err(ctx)?,
        span_id: id(o, &["spanId", "span_id"], 8).map_err(ctx)?,
        parent_span_id: id(o, &["parentSpanId", "parent_span_id"], 8).map_err(ctx)?,
        trace_state: string(o, &["traceState", "trace_state"]),
        flags: u32::try_from(uint(o, &["flags"]).map_err(ctx)?).unwrap_or(0),
        kind: enumeration(
            get(o, &["kind"]),
            |n| span::SpanKind::from_str_name(n).map(|k| k as i32),
            "SPAN_KIND_",
        ),
        start_time_unix_nano: uint(o, &["startTimeUnixNano", "start_time_unix_nano"])
            .map_err(ctx)?,
        end_time_unix_nano: uint(o, &["endTimeUnixNano", "end_time_unix_nano"]).map_err(ctx)?,
        attributes: attributes(o).map_err(ctx)?,
        events: events(o).map_err(ctx)?,
        status: status(o),
        name,
        ..Default::default()
    };
    Ok(span)
}

fn events(o: &Obj) -> Result<Vec<span::Event>, String> {
    let Some(v) = get(o, &["events"]) else {
        return Ok(Vec::new());
    };
    let Value::Array(a) = v else {
        return Err(format!("events is {}, want an array", kind(v)));
    };
    a.iter()
        .map(|e| {
            let Value::Object(e) = e else {
                return Err(format!("event is {}, want an object", kind(e)));
            };
            Ok(span::Event {
                time_unix_nano: uint(e, &["timeUnixNano", "time_unix_nano"])?,
                name: string(e, &["name"]),
                attributes: attributes(e)?,
                dropped_attributes_count: 0,
            })
        })
        .collect()
}

/// A status that cannot be read is no status: the span stays, `span_error` is only a hint.
fn status(o: &Obj) -> Option<Status> {
    let Some(Value::Object(s)) = get(o, &["status"]) else {
        return None;
    };
    Some(Status {
        code: enumeration(
            get(s, &["code"]),
            |n| status::StatusCode::from_str_name(n).map(|c| c as i32),
            "STATUS_CODE_",
        ),
        message: string(s, &["message"]),
    })
}

fn decode_log_record(v: &Value) -> Result<LogRecord, String> {
    let Value::Object(o) = v else {
        return Err(format!("is {}, want an object", kind(v)));
    };
    Ok(LogRecord {
        time_unix_nano: uint(o, &["timeUnixNano", "time_unix_nano"])?,
        observed_time_unix_nano: uint(o, &["observedTimeUnixNano", "observed_time_unix_nano"])?,
        severity_number: enumeration(
            get(o, &["severityNumber", "severity_number"]),
            |n| SeverityNumber::from_str_name(n).map(|s| s as i32),
            "SEVERITY_NUMBER_",
        ),
        severity_text: string(o, &["severityText", "severity_text"]),
        body: get(o, &["body"]).map(any_value).transpose()?,
        attributes: attributes(o)?,
        // Log records are matched on their attributes; an id that does not decode costs the
        // record nothing.
        trace_id: id(o, &["traceId", "trace_id"], 16).unwrap_or_default(),
        span_id: id(o, &["spanId", "span_id"], 8).unwrap_or_default(),
        flags: u32::try_from(uint(o, &["flags"])?).unwrap_or(0),
        event_name: string(o, &["eventName", "event_name"]),
        ..Default::default()
    })
}

/// A trace or span id: hex as the spec says, or base64 (the proto3 JSON mapping of `bytes`,
/// which some encoders apply), told apart by length. Empty stays empty; whether that is
/// acceptable is the caller's business (a root span has no parent).
fn id(o: &Obj, keys: &[&str], len: usize) -> Result<Vec<u8>, String> {
    let what = keys.first().copied().unwrap_or_default();
    let s = match get(o, keys) {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => s.trim(),
        Some(v) => return Err(format!("{what} is {}, want a hex string", kind(v))),
    };
    if s.is_empty() {
        return Ok(Vec::new());
    }
    if s.len() == 2 * len {
        return hex::decode(s).map_err(|_| format!("{what} \"{}\" is not hex", clip(s)));
    }
    let engines = [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines
        .iter()
        .find_map(|e| e.decode(s).ok().filter(|b| b.len() == len))
        .ok_or_else(|| {
            format!(
                "{what} \"{}\" is neither {} hex digits nor base64 of {len} bytes",
                clip(s),
                2 * len
            )
        })
}

/// A uint64 field: a JSON number or, as the proto3 mapping writes 64-bit integers, a string.
fn uint(o: &Obj, keys: &[&str]) -> Result<u64, String> {
    let what = keys.first().copied().unwrap_or_default();
    match get(o, keys) {
        None => Ok(0),
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0 && *f < u64::MAX as f64)
                    .map(|f| f as u64)
            })
            .ok_or_else(|| format!("{what} {n} is not an unsigned integer")),
        Some(Value::String(s)) => {
            let t = s.trim();
            if t.is_empty() {
                return Ok(0);
            }
            t.parse::<u64>()
                .map_err(|_| format!("{what} \"{}\" is not an unsigned integer", clip(t)))
        }
        Some(v) => Err(format!("{what} is {}, want an integer", kind(v))),
    }
}

/// An enum: its number, its full proto name, or its name without the prefix. An unknown name
/// reads as 0 (UNSPECIFIED/UNSET), which is what a receiver must do with an unknown number.
fn enumeration(v: Option<&Value>, from_name: impl Fn(&str) -> Option<i32>, prefix: &str) -> i32 {
    match v {
        Some(Value::Number(n)) => n.as_i64().and_then(|i| i32::try_from(i).ok()).unwrap_or(0),
        Some(Value::String(s)) => {
            let t = s.trim();
            if let Ok(i) = t.parse::<i32>() {
                return i;
            }
            let upper = t.to_ascii_uppercase();
            from_name(&upper)
                .or_else(|| from_name(&format!("{prefix}{upper}")))
                .unwrap_or(0)
        }
        _ => 0,
    }
}

fn attributes(o: &Obj) -> Result<Vec<KeyValue>, String> {
    let Some(v) = get(o, &["attributes"]) else {
        return Ok(Vec::new());
    };
    key_values(v, "attributes")
}

fn key_values(v: &Value, what: &str) -> Result<Vec<KeyValue>, String> {
    let Value::Array(a) = v else {
        return Err(format!("{what} is {}, want an array", kind(v)));
    };
    let mut out = Vec::with_capacity(a.len());
    for kv in a {
        let Value::Object(kv) = kv else {
            return Err(format!("{what} entry is {}, want an object", kind(kv)));
        };
        // An attribute without a key can be looked up by no one.
        let Some(Value::String(key)) = get(kv, &["key"]) else {
            continue;
        };
        let value = match get(kv, &["value"]) {
            None => None,
            Some(v) => Some(any_value(v).map_err(|e| format!("attribute \"{}\": {e}", clip(key)))?),
        };
        out.push(KeyValue {
            key: key.clone(),
            value,
            key_strindex: 0,
        });
    }
    Ok(out)
}

fn any_value(v: &Value) -> Result<AnyValue, String> {
    use any_value::Value as V;
    let value = match v {
        Value::Null => None,
        // A bare scalar where an AnyValue belongs: what hand-written senders do.
        Value::String(s) => Some(V::StringValue(s.clone())),
        Value::Bool(b) => Some(V::BoolValue(*b)),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => V::IntValue(i),
            None => V::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        }),
        Value::Array(a) => Some(V::ArrayValue(ArrayValue {
            values: a.iter().map(any_value).collect::<Result<_, _>>()?,
        })),
        Value::Object(o) => typed_any_value(o)?,
    };
    Ok(AnyValue { value })
}

/// The OTLP/JSON AnyValue object. `{}` (and an object of only unknown or `null` members) is the
/// empty AnyValue.
fn typed_any_value(o: &Obj) -> Result<Option<any_value::Value>, String> {
    use any_value::Value as V;
    if let Some(v) = get(o, &["stringValue", "string_value"]) {
        return Ok(Some(V::StringValue(match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })));
    }
    if let Some(v) = get(o, &["boolValue", "bool_value"]) {
        return match v {
            Value::Bool(b) => Ok(Some(V::BoolValue(*b))),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(Some(V::BoolValue(true))),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(Some(V::BoolValue(false))),
            other => Err(format!("boolValue is {}", kind(other))),
        };
    }
    if let Some(v) = get(o, &["intValue", "int_value"]) {
        let i = match v {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                    .map(|f| f as i64)
            }),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        return i
            .map(|i| Some(V::IntValue(i)))
            .ok_or_else(|| format!("intValue {} is not a 64-bit integer", clip(&v.to_string())));
    }
    if let Some(v) = get(o, &["doubleValue", "double_value"]) {
        let d = match v {
            Value::Number(n) => n.as_f64(),
            // proto3 JSON writes the non-finite doubles as these strings.
            Value::String(s) => match s.trim() {
                "NaN" => Some(f64::NAN),
                "Infinity" => Some(f64::INFINITY),
                "-Infinity" => Some(f64::NEG_INFINITY),
                t => t.parse::<f64>().ok(),
            },
            _ => None,
        };
        return d
            .map(|d| Some(V::DoubleValue(d)))
            .ok_or_else(|| format!("doubleValue {} is not a number", clip(&v.to_string())));
    }
    if let Some(v) = get(o, &["arrayValue", "array_value"]) {
        let values = match v {
            Value::Object(a) => match get(a, &["values"]) {
                None => Vec::new(),
                Some(Value::Array(vals)) => vals.iter().map(any_value).collect::<Result<_, _>>()?,
                Some(other) => return Err(format!("arrayValue.values is {}", kind(other))),
            },
            Value::Array(vals) => vals.iter().map(any_value).collect::<Result<_, _>>()?,
            other => return Err(format!("arrayValue is {}", kind(other))),
        };
        return Ok(Some(V::ArrayValue(ArrayValue { values })));
    }
    if let Some(v) = get(o, &["kvlistValue", "kvlist_value"]) {
        let values = match v {
            Value::Object(kv) => match get(kv, &["values"]) {
                None => Vec::new(),
                Some(vals) => key_values(vals, "kvlistValue.values")?,
            },
            Value::Array(_) => key_values(v, "kvlistValue")?,
            other => return Err(format!("kvlistValue is {}", kind(other))),
        };
        return Ok(Some(V::KvlistValue(KeyValueList { values })));
    }
    if let Some(v) = get(o, &["bytesValue", "bytes_value"]) {
        let Value::String(s) = v else {
            return Err(format!("bytesValue is {}", kind(v)));
        };
        let b = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(s.trim()))
            .map_err(|_| "bytesValue is not base64".to_string())?;
        return Ok(Some(V::BytesValue(b)));
    }
    Ok(None)
}
