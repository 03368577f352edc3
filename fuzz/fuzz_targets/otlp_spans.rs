//! Structured trace exports: spans built from the attribute vocabulary of every emitter
//! convention (DESIGN.md "Recognising tool spans"), with values of every `AnyValue` type,
//! broken ids, extreme times, span events, padding past the attribute limit and values either
//! side of the size limit. Byte-level fuzzing rarely spells `gen_ai.tool.call.arguments` next
//! to a valid intent id; this target starts there. The gRPC path (decoded message) and the HTTP
//! path (protobuf bytes) must agree, and no span over a limit may become an event.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::trace::v1::{
    span::Event, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;
use reckon::ingest::limits;
use reckon::ingest::otlp::{traces_from_proto, traces_from_protobuf_bytes};
use reckon_fuzz::{check_decoded, CONTRACTS, NOW};

const NAMES: [&str; 8] = [
    "execute_tool issue_refund",
    "execute_tool",
    "ai.toolCall",
    "running tool",
    "tools/call send_email",
    "chat gpt-4.1",
    "create_bill_draft",
    "POST /v1/refunds",
];

const KEYS: [&str; 34] = [
    "reckon.intent.id",
    "reckon.idempotency_key",
    "reckon.action",
    "reckon.outcome",
    "reckon.downstream.object_id",
    "reckon.downstream.status",
    "reckon.readback.object_ids",
    "http.response.status_code",
    "http.status_code",
    "error.type",
    "gen_ai.operation.name",
    "gen_ai.tool.name",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gcp.vertex.agent.tool_call_args",
    "mcp.method.name",
    "openinference.span.kind",
    "tool.name",
    "input.value",
    "traceloop.span.kind",
    "traceloop.entity.name",
    "traceloop.entity.input",
    "ai.toolCall.name",
    "ai.toolCall.args",
    "tool_arguments",
    "lmnr.span.type",
    "lmnr.span.input",
    "langfuse.observation.type",
    "langfuse.observation.input",
    "content",
    "gen_ai.input.messages",
    "service.name",
    "",
    "x",
];

const STRINGS: [&str; 30] = [
    "int_1",
    "int_2",
    "k1",
    "k2",
    "read",
    "write",
    "READ",
    "succeeded",
    "failed",
    "pending",
    "timeout",
    "500",
    "409",
    "execute_tool",
    "tools/call",
    "TOOL",
    "tool",
    "issue_refund",
    "issue_refund_v2",
    "send_email",
    "create_bill_draft",
    "re_1",
    "[\"re_1\",\"re_2\"]",
    "[]",
    "[{\"id\":1}]",
    "__REDACTED__",
    r#"{"order_id":"1042","amount":45.00,"currency":"usd","idempotency_key":"k9","intent_id":"int_9"}"#,
    r#"{"input_str":"{'amount': 45}","inputs":{"amount":45},"kwargs":{},"tags":[]}"#,
    r#"{"args":[{"amount":"45.00","order_id":1042}],"kwargs":{}}"#,
    r#"[{"role":"assistant","parts":[{"type":"tool_call","arguments":"{\"amount\":45}"}]}]"#,
];

fn string(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(if u.ratio(1, 64)? {
        // Around the value size limit, either side of it.
        "x".repeat(limits::MAX_VALUE_BYTES - 8 + u.choose_index(16)?)
    } else if u.ratio(1, 5)? {
        u.arbitrary::<String>()?
    } else {
        STRINGS[u.choose_index(STRINGS.len())?].to_string()
    })
}

fn value(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<AnyValue> {
    let v = match u.choose_index(if depth > 3 { 6 } else { 8 })? {
        0 => None,
        1 | 2 => Some(Value::StringValue(string(u)?)),
        3 => Some(Value::IntValue(u.arbitrary()?)),
        4 => Some(Value::DoubleValue(u.arbitrary()?)),
        5 => Some(Value::BoolValue(u.arbitrary()?)),
        6 => Some(Value::ArrayValue(ArrayValue {
            values: (0..u.choose_index(4)?)
                .map(|_| value(u, depth + 1))
                .collect::<Result<_, _>>()?,
        })),
        _ => Some(Value::KvlistValue(KeyValueList {
            values: attributes(u, depth + 1, 4)?,
        })),
    };
    Ok(AnyValue { value: v })
}

fn attributes(
    u: &mut Unstructured<'_>,
    depth: u32,
    max: usize,
) -> arbitrary::Result<Vec<KeyValue>> {
    (0..u.choose_index(max + 1)?)
        .map(|_| {
            Ok(KeyValue {
                key: KEYS[u.choose_index(KEYS.len())?].to_string(),
                value: if u.ratio(1, 16)? {
                    None
                } else {
                    Some(value(u, depth)?)
                },
                key_strindex: 0,
            })
        })
        .collect()
}

fn id<const N: usize>(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    Ok(match u.choose_index(16)? {
        0 => Vec::new(),
        1 => vec![0; N],
        2 => vec![1; N - 1],
        n => vec![n as u8; N],
    })
}

fn time(u: &mut Unstructured<'_>) -> arbitrary::Result<u64> {
    let now = NOW.0 as u64;
    Ok(match u.choose_index(8)? {
        0 => 0,
        1 => u64::MAX,
        2 => u.arbitrary()?,
        n => now - (n as u64) * 60_000_000_000 + u.arbitrary::<u16>()? as u64,
    })
}

fn span(u: &mut Unstructured<'_>) -> arbitrary::Result<Span> {
    let mut attrs = attributes(u, 0, 12)?;
    // Past the per-span limit now and then, so the refusal is exercised too.
    if u.ratio(1, 16)? {
        let pad = u.int_in_range(0..=2 * limits::MAX_SPAN_ATTRIBUTES)?;
        attrs.extend((0..pad).map(|i| KeyValue {
            key: format!("pad.{i}"),
            value: Some(AnyValue {
                value: Some(Value::IntValue(i as i64)),
            }),
            key_strindex: 0,
        }));
    }
    let events = (0..u.choose_index(3)?)
        .map(|_| {
            Ok(Event {
                time_unix_nano: time(u)?,
                name: [
                    "gen_ai.tool.message",
                    "gen_ai.client.inference.operation.details",
                    "exception",
                ][u.choose_index(3)?]
                .to_string(),
                attributes: attributes(u, 0, 3)?,
                dropped_attributes_count: 0,
            })
        })
        .collect::<arbitrary::Result<_>>()?;
    Ok(Span {
        trace_id: id::<16>(u)?,
        span_id: id::<8>(u)?,
        name: if u.ratio(1, 8)? {
            u.arbitrary()?
        } else {
            NAMES[u.choose_index(NAMES.len())?].into()
        },
        start_time_unix_nano: time(u)?,
        end_time_unix_nano: time(u)?,
        attributes: attrs,
        events,
        status: if u.arbitrary()? {
            Some(Status {
                code: status::StatusCode::Error as i32,
                message: String::new(),
            })
        } else {
            None
        },
        ..Default::default()
    })
}

struct Export(ExportTraceServiceRequest);

impl<'a> Arbitrary<'a> for Export {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let spans = (0..u.int_in_range(1..=8)?)
            .map(|_| span(u))
            .collect::<Result<_, _>>()?;
        Ok(Export(ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }))
    }
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#?}", self.0)
    }
}

fuzz_target!(|export: Export| {
    let req = export.0;
    let decoded = traces_from_proto(&req, &CONTRACTS);
    let from_bytes = traces_from_protobuf_bytes(&req.encode_to_vec(), &CONTRACTS)
        .expect("an encoded request decodes");
    assert_eq!(decoded, from_bytes, "the gRPC and HTTP paths disagree");
    let spans = &req.resource_spans[0].scope_spans[0].spans;
    // An independent reading of the limits: no span over them becomes an event.
    let within = spans
        .iter()
        .filter(|s| {
            let small = |kvs: &[KeyValue]| {
                kvs.len() <= limits::MAX_SPAN_ATTRIBUTES
                    && kvs.iter().all(|kv| {
                        kv.value.as_ref().map_or(0, |v| v.encoded_len()) <= limits::MAX_VALUE_BYTES
                    })
            };
            small(&s.attributes) && s.events.iter().all(|e| small(&e.attributes))
        })
        .count();
    assert!(
        decoded.events.len() <= within,
        "a span over a limit became an event"
    );
    check_decoded(decoded);
});
