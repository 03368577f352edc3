//! Nothing acknowledged vanishes (issue 36, item 3): an item whose identity is stored with
//! other content is refused in the answer (OTLP partial success over gRPC, HTTP protobuf and
//! HTTP JSON; the records API's `rejected` by index; the Stripe webhook's 409), counted and
//! never stored, while an identical re-send stays the silent no-op it is. And one span with a
//! string that is not UTF-8 is refused alone, not its whole export.

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{json, Value};
use std::time::SystemTime;

use super::support::*;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// A timed-out refund send of `intent` under `key`, with fixed ids.
fn span(trace: u128, span: u64, intent: &str, key: &str, t0: u64) -> Span {
    Span {
        trace_id: trace.to_be_bytes().to_vec(),
        span_id: span.to_be_bytes().to_vec(),
        name: "execute_tool issue_refund".into(),
        start_time_unix_nano: t0,
        end_time_unix_nano: t0 + 30_000_000_000,
        attributes: vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "issue_refund"),
            kv("reckon.intent.id", intent),
            kv("reckon.idempotency_key", key),
            kv("error.type", "timeout"),
        ],
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The span as OTLP/JSON writes it (hex ids, 64-bit integers as strings).
fn json_doc(s: &Span) -> Vec<u8> {
    let attrs: Vec<Value> = s
        .attributes
        .iter()
        .map(|a| {
            let Some(any_value::Value::StringValue(v)) =
                a.value.as_ref().and_then(|v| v.value.as_ref())
            else {
                unreachable!("string attributes only")
            };
            json!({"key": a.key, "value": {"stringValue": v}})
        })
        .collect();
    json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": hex::encode(&s.trace_id), "spanId": hex::encode(&s.span_id),
        "name": s.name, "kind": 3,
        "startTimeUnixNano": s.start_time_unix_nano.to_string(),
        "endTimeUnixNano": s.end_time_unix_nano.to_string(),
        "attributes": attrs}]}]}]})
    .to_string()
    .into_bytes()
}

#[derive(Clone, Copy, Debug)]
enum Via {
    Grpc,
    Protobuf,
    Json,
}

/// One export of `spans` as `via` sends it: (rejected spans, error message).
async fn export(
    server: &Server,
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    via: Via,
    spans: Vec<Span>,
) -> (i64, String) {
    match via {
        Via::Grpc => {
            let body = request(spans).encode_to_vec();
            let reply: ExportTraceServiceResponse = reckon::loadgen::export_grpc(grpc, body.into())
                .await
                .expect("acknowledged over gRPC");
            let p = reply.partial_success.unwrap_or_default();
            (p.rejected_spans, p.error_message)
        }
        Via::Protobuf => {
            let body = request(spans).encode_to_vec();
            let resp = server
                .post_otlp("/v1/traces", "application/x-protobuf", false, body)
                .await;
            assert_eq!(resp.status(), 200);
            let reply = ExportTraceServiceResponse::decode(resp.bytes().await.unwrap()).unwrap();
            let p = reply.partial_success.unwrap_or_default();
            (p.rejected_spans, p.error_message)
        }
        Via::Json => {
            assert_eq!(spans.len(), 1, "one span per JSON export here");
            let resp = server
                .post_otlp("/v1/traces", "application/json", false, json_doc(&spans[0]))
                .await;
            assert_eq!(resp.status(), 200);
            let reply: Value = resp.json().await.unwrap();
            let p = &reply["partialSuccess"];
            let rejected = match &p["rejectedSpans"] {
                Value::String(s) => s.parse().unwrap(),
                Value::Number(n) => n.as_i64().unwrap(),
                _ => 0,
            };
            (
                rejected,
                p["errorMessage"].as_str().unwrap_or("").to_string(),
            )
        }
    }
}

async fn grpc_client(server: &Server) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(server.r().grpc_url())
        .unwrap()
        .connect()
        .await
        .expect("connect over gRPC");
    tonic::client::Grpc::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_span_resent_with_other_content_is_rejected_and_an_identical_one_is_silent() {
    let server = Server::start().await;
    let mut grpc = grpc_client(&server).await;
    let t0 = unix_nanos(ago(2.0 * MIN)) as u64;
    let mut refused = 0.0;
    for via in [Via::Grpc, Via::Protobuf, Via::Json] {
        let (trace, id) = (rand_u128(), rand_u128() as u64 | 1);
        let (a, b) = (unique("int"), unique("int"));
        let first = span(trace, id, &a, &unique("k"), t0);
        assert_eq!(
            export(&server, &mut grpc, via, vec![first.clone()]).await,
            (0, String::new()),
            "{via:?}: the first copy"
        );
        assert_verdict(&server.verdict(&a).await, "unknown / retry_same_key / -");
        assert_eq!(
            export(&server, &mut grpc, via, vec![first.clone()]).await,
            (0, String::new()),
            "{via:?}: an identical re-send is acknowledged silently"
        );

        // The same ids with other content: a 200 response naming a refund, in the same intent.
        let mut changed = first.clone();
        changed.attributes.retain(|a| a.key != "error.type");
        changed
            .attributes
            .push(kv("reckon.downstream.object_id", "re_x"));
        changed
            .attributes
            .push(kv("reckon.downstream.status", "succeeded"));
        let (n, msg) = export(&server, &mut grpc, via, vec![changed]).await;
        refused += 1.0;
        assert_eq!(n, 1, "{via:?}: {msg}");
        let (trace_hex, span_hex) = (format!("{trace:032x}"), format!("{id:016x}"));
        assert!(
            msg.contains(&format!("span {span_hex} of trace {trace_hex}"))
                && msg.contains("conflicts with a stored span of different content"),
            "{via:?}: the message names the span and the conflict: {msg}"
        );
        assert_verdict(&server.verdict(&a).await, "unknown / retry_same_key / -");

        // The same ids naming another intent: refused too, on every store (ClickHouse finds
        // a span by its identity alone through reckon_span_owners).
        let mut other = first.clone();
        other.attributes[2] = kv("reckon.intent.id", &b);
        let (n, msg) = export(&server, &mut grpc, via, vec![other]).await;
        refused += 1.0;
        assert_eq!(n, 1, "{via:?}: {msg}");
        assert!(msg.contains(&span_hex), "{msg}");
        assert_eq!(
            server.get(&format!("/api/v1/intents/{b}")).await.0,
            404,
            "{via:?}: the refused copy is not stored"
        );
        // A batch mixing a conflict with a new span: only the conflict is refused.
        let c = unique("int");
        let mut changed = first.clone();
        changed.end_time_unix_nano += 1_000_000_000;
        let fresh = span(rand_u128(), rand_u128() as u64 | 1, &c, &unique("k"), t0);
        if !matches!(via, Via::Json) {
            let (n, msg) = export(&server, &mut grpc, via, vec![changed, fresh]).await;
            refused += 1.0;
            assert_eq!(n, 1, "{via:?}: {msg}");
            assert!(msg.starts_with("rejected 1 of 2: "), "{msg}");
            assert_verdict(&server.verdict(&c).await, "unknown / retry_same_key / -");
        }
    }
    assert_eq!(
        server
            .metric("reckon_conflicting_resends_total{kind=\"attempt\"}")
            .await,
        Some(refused)
    );
    assert_eq!(
        server
            .metric("reckon_ingest_rejections_total{reason=\"conflict\"}")
            .await,
        Some(refused)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_resent_with_other_content_is_rejected_by_index() {
    let server = Server::start().await;
    let intent = unique("int");
    let object = unique("re");
    let at = rfc3339(ago(MIN));
    let record = |amount: &str| {
        json!({"kind": "refund", "object_id": object, "intent_id": intent, "status": "succeeded",
               "amount": amount, "currency": "EUR", "observed_at": at, "source": "ledger"})
    };
    let (status, reply) = server
        .post_json("/api/v1/records", &json!([record("45.00")]))
        .await;
    assert_eq!((status, &reply["accepted"]), (200, &json!(1)), "{reply}");
    let other = unique("re");
    let fresh = json!({"kind": "refund", "object_id": other, "intent_id": intent,
                       "status": "pending", "observed_at": at, "source": "ledger"});
    // Index 1 conflicts with the stored copy; index 2 is that copy again (45 = 45.00).
    let (status, reply) = server
        .post_json(
            "/api/v1/records",
            &json!([fresh, record("99.00"), record("45")]),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["accepted"], 2, "{reply}");
    let rejected = reply["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{reply}");
    assert_eq!(rejected[0]["index"], 1, "{reply}");
    let error = rejected[0]["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("record \"{object}\""))
            && error.contains("conflicts with a stored observation of different content"),
        "{error}"
    );
    let v = server.verdict(&intent).await;
    let amounts: Vec<&Value> = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["object_id"] == object.as_str())
        .map(|o| &o["amount"])
        .collect();
    assert_eq!(amounts.len(), 1, "{v}");
    assert!(
        amounts[0].to_string().contains("45"),
        "the first copy stays: {v}"
    );
    assert_eq!(
        server
            .metric("reckon_conflicting_resends_total{kind=\"record\"}")
            .await,
        Some(1.0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_event_conflicting_with_a_stored_one_is_409() {
    let server = Server::start().await;
    let intent = unique("int");
    let refund = unique("re");
    let created = ago(MIN);
    let first = stripe_event(
        "refund.updated",
        &intent,
        &refund,
        "succeeded",
        4500,
        None,
        created,
    );
    server.stripe(&first).await;
    let sign = |body: &str| {
        reckon::ingest::stripe::sign(body.as_bytes(), STRIPE_SECRET, unix_secs(SystemTime::now()))
    };
    // Stripe re-delivers the same event: acknowledged again.
    let (status, reply) = server.stripe_raw(&first, Some(&sign(&first))).await;
    assert_eq!(status, 200, "{reply}");
    // Another event about the same refund, status and second, with another amount.
    let other = stripe_event(
        "refund.updated",
        &intent,
        &refund,
        "succeeded",
        9900,
        None,
        created,
    );
    let (status, reply) = server.stripe_raw(&other, Some(&sign(&other))).await;
    assert_eq!(status, 409, "{reply}");
    assert_eq!(reply["error"]["code"], "conflict", "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&refund) && message.contains("conflicts with a stored observation"),
        "{message}"
    );
    server.stop().await;
}

/// `body` with `marker` overwritten by as many 0xff bytes: not UTF-8, same framing.
fn poison(mut body: Vec<u8>, marker: &[u8]) -> Vec<u8> {
    let at = body
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("marker in the body");
    body[at..at + marker.len()].fill(0xff);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_span_with_invalid_utf8_is_rejected_alone_over_http_and_grpc() {
    let server = Server::start().await;
    let mut grpc = grpc_client(&server).await;
    let t0 = unix_nanos(ago(2.0 * MIN)) as u64;
    for via in [Via::Grpc, Via::Protobuf] {
        let (a, bad, c) = (unique("int"), unique("int"), unique("int"));
        let bad_id = rand_u128() as u64 | 1;
        let req = request(vec![
            span(rand_u128(), rand_u128() as u64 | 1, &a, &unique("k"), t0),
            span(rand_u128(), bad_id, &bad, "POISONED_KEY", t0),
            span(rand_u128(), rand_u128() as u64 | 1, &c, &unique("k"), t0),
        ]);
        let body = poison(req.encode_to_vec(), b"POISONED_KEY");
        assert!(ExportTraceServiceRequest::decode(body.as_slice()).is_err());
        let (n, msg) = match via {
            Via::Grpc => {
                let reply = reckon::loadgen::export_grpc(&mut grpc, body.into())
                    .await
                    .expect("the rest is acknowledged over gRPC");
                let p = reply.partial_success.unwrap_or_default();
                (p.rejected_spans, p.error_message)
            }
            _ => {
                let resp = server
                    .post_otlp("/v1/traces", "application/x-protobuf", false, body)
                    .await;
                assert_eq!(resp.status(), 200);
                let reply =
                    ExportTraceServiceResponse::decode(resp.bytes().await.unwrap()).unwrap();
                let p = reply.partial_success.unwrap_or_default();
                (p.rejected_spans, p.error_message)
            }
        };
        assert_eq!(n, 1, "{via:?}: {msg}");
        assert!(
            msg.starts_with("rejected 1 of 3: ")
                && msg.contains(&format!("span {bad_id:016x}"))
                && msg.contains("UTF-8"),
            "{via:?}: {msg}"
        );
        for i in [&a, &c] {
            assert_verdict(&server.verdict(i).await, "unknown / retry_same_key / -");
        }
        assert_eq!(server.get(&format!("/api/v1/intents/{bad}")).await.0, 404);
    }
    assert_eq!(
        server
            .metric("reckon_ingest_rejections_total{reason=\"malformed_span\"}")
            .await,
        Some(2.0)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_record_resent_with_other_content_is_rejected() {
    use opentelemetry_proto::tonic::collector::logs::v1::{
        ExportLogsServiceRequest, ExportLogsServiceResponse,
    };
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    let server = Server::start().await;
    let intent = unique("int");
    let object = unique("re");
    let t = unix_nanos(ago(MIN)) as u64;
    let body = |amount: &str| {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord {
                        time_unix_nano: t,
                        attributes: vec![
                            kv("reckon.record.kind", "refund"),
                            kv("reckon.record.object_id", &object),
                            kv("reckon.record.status", "succeeded"),
                            kv("reckon.intent.id", &intent),
                            kv("reckon.record.amount", amount),
                        ],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    };
    let send = |b: Vec<u8>| async {
        let resp = server
            .post_otlp("/v1/logs", "application/x-protobuf", false, b)
            .await;
        assert_eq!(resp.status(), 200);
        ExportLogsServiceResponse::decode(resp.bytes().await.unwrap())
            .unwrap()
            .partial_success
            .unwrap_or_default()
    };
    let p = send(body("45.00")).await;
    assert_eq!(p.rejected_log_records, 0, "{}", p.error_message);
    let p = send(body("45.00")).await;
    assert_eq!(
        p.rejected_log_records, 0,
        "an identical re-send is silent: {}",
        p.error_message
    );
    let p = send(body("99.00")).await;
    assert_eq!(p.rejected_log_records, 1, "{}", p.error_message);
    assert!(
        p.error_message.contains(&format!("record \"{object}\""))
            && p.error_message
                .contains("conflicts with a stored observation"),
        "{}",
        p.error_message
    );
    assert_eq!(
        server
            .metric("reckon_conflicting_resends_total{kind=\"record\"}")
            .await,
        Some(1.0)
    );
    server.stop().await;
}
