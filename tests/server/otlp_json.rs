//! OTLP/HTTP as non-Rust exporters send it: JSON bodies shaped exactly as the OpenTelemetry JS
//! exporter (`@opentelemetry/exporter-trace-otlp-http`) and a Python OTLP/JSON exporter write
//! them, plain and gzipped; protobuf answered in protobuf; downstream records as OTLP logs; and
//! the same batch re-sent over every transport making one attempt.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::{json, Value};

use super::support::*;

fn hex_trace() -> String {
    format!("{:032x}", rand_u128())
}

fn hex_span() -> String {
    format!("{:016x}", rand_u128() as u64 | 1)
}

fn s(key: &str, v: &str) -> Value {
    json!({"key": key, "value": {"stringValue": v}})
}

/// What `@opentelemetry/otlp-transformer` (JSON) writes: hex ids, nanosecond times as decimal
/// strings, integer attributes as JSON numbers, kind and status code as integers, the dropped
/// counters and empty event/link arrays always present, `flags` set.
fn js_doc(spans: Vec<Value>) -> Value {
    json!({"resourceSpans": [{
        "resource": {"attributes": [
            s("service.name", "refund-agent"),
            s("telemetry.sdk.language", "nodejs"),
            s("telemetry.sdk.name", "opentelemetry"),
            s("telemetry.sdk.version", "2.0.1"),
            s("process.runtime.name", "nodejs")],
            "droppedAttributesCount": 0},
        "scopeSpans": [{"scope": {"name": "ai", "version": "5.0.0"}, "spans": spans}]
    }]})
}

#[allow(clippy::too_many_arguments)]
fn js_span(
    trace: &str,
    parent: Option<&str>,
    name: &str,
    kind: i64,
    start: u128,
    end: u128,
    attributes: Vec<Value>,
    status: Value,
) -> Value {
    let mut span = json!({
        "traceId": trace, "spanId": hex_span(), "name": name, "kind": kind,
        "startTimeUnixNano": start.to_string(), "endTimeUnixNano": end.to_string(),
        "attributes": attributes, "droppedAttributesCount": 0,
        "events": [], "droppedEventsCount": 0, "status": status,
        "links": [], "droppedLinksCount": 0, "flags": 257
    });
    if let Some(p) = parent {
        span["parentSpanId"] = json!(p);
    }
    span
}

/// What a Python OTLP/JSON exporter writes (protobuf JSON mapping of the SDK's spans, ids as
/// hex): int64s as strings (`intValue` and the times), kind and status code as integers, default
/// values omitted, an exception event on the error span.
fn python_doc(spans: Vec<Value>) -> Value {
    json!({"resourceSpans": [{
        "resource": {"attributes": [
            s("service.name", "billing-agent"),
            s("telemetry.sdk.language", "python"),
            s("telemetry.sdk.name", "opentelemetry"),
            s("telemetry.sdk.version", "1.33.1")]},
        "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.openai_agents"},
                        "spans": spans}],
        "schemaUrl": "https://opentelemetry.io/schemas/1.11.0"
    }]})
}

async fn post_json_traces(server: &Server, body: &Value, gzipped: bool) -> Value {
    let raw = body.to_string().into_bytes();
    let raw = if gzipped { gzip(&raw) } else { raw };
    let resp = server
        .post_otlp("/v1/traces", "application/json", gzipped, raw)
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    resp.json()
        .await
        .expect("a JSON response to a JSON request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_exporter_json() {
    let server = Server::start().await;
    let trace = hex_trace();
    let agent_span = hex_span();
    let (ok, lost, re) = (unique("int"), unique("int"), unique("re"));
    let t0 = unix_nanos(ago(3.0 * MIN)) + 123; // odd nanoseconds survive the trip
    let chat = js_span(
        &trace,
        Some(&agent_span),
        "chat gpt-4.1",
        3,
        t0 - 2_000_000_000,
        t0 - 1_000_000,
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.request.model", "gpt-4.1"),
            json!({"key": "gen_ai.usage.input_tokens", "value": {"intValue": 812}}),
        ],
        json!({"code": 0}),
    );
    let succeeded = js_span(
        &trace,
        Some(&agent_span),
        "execute_tool issue_refund",
        1,
        t0,
        t0 + 400_000_000,
        vec![
            s("gen_ai.operation.name", "execute_tool"),
            s("gen_ai.tool.name", "issue_refund"),
            s("gen_ai.tool.call.id", "call_Qx7d"),
            s(
                "gen_ai.tool.call.arguments",
                r#"{"order_id":"1042","amount":45.0,"currency":"usd"}"#,
            ),
            s("reckon.intent.id", &ok),
            s("reckon.idempotency_key", &unique("k")),
            s("reckon.outcome", "succeeded"),
            s("reckon.downstream.object_id", &re),
            s("reckon.downstream.status", "succeeded"),
            json!({"key": "http.response.status_code", "value": {"intValue": 200}}),
        ],
        json!({"code": 1}),
    );
    let timed_out = js_span(
        &trace,
        Some(&agent_span),
        "execute_tool issue_refund",
        1,
        t0 + 1_000_000_000,
        t0 + 31_000_000_000,
        vec![
            s("gen_ai.operation.name", "execute_tool"),
            s("gen_ai.tool.name", "issue_refund"),
            s("reckon.intent.id", &lost),
            s("reckon.idempotency_key", &unique("k")),
            s("reckon.outcome", "unknown"),
            s("error.type", "timeout"),
        ],
        json!({"code": 2, "message": "The operation was aborted due to timeout"}),
    );
    let reply = post_json_traces(&server, &js_doc(vec![chat, succeeded, timed_out]), false).await;
    assert_eq!(reply, json!({}), "full success is an empty response");

    let v = server.verdict(&ok).await;
    assert_verdict(&v, "completed / none / -");
    let a = &v["attempts"][0];
    assert_eq!(a["trace_id"], trace.as_str());
    assert_eq!(a["http_status"], 200);
    assert_eq!(a["class"], "succeeded");
    assert_eq!(a["reported_outcome"], "succeeded");
    assert_eq!(
        a["start"],
        reckon::codec::rfc3339(reckon::model::Timestamp(t0 as i64)).as_str()
    );
    let v = server.verdict(&lost).await;
    assert_verdict(&v, "unknown / retry_same_key / -");
    assert_eq!(v["attempts"][0]["error_type"], "timeout");
    // The chat span is not an intent.
    assert_eq!(server.get("/readyz").await.1["intents"], 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_exporter_json_plain_and_gzip() {
    let server = Server::start().await;
    let trace = hex_trace();
    let t0 = unix_nanos(ago(2.0 * MIN));
    let span = |intent: &str, key: &str, status: &str| {
        json!({
            "traceId": trace, "spanId": hex_span(), "name": "issue_refund", "kind": 1,
            "startTimeUnixNano": t0.to_string(), "endTimeUnixNano": (t0 + 250_000_000).to_string(),
            "attributes": [
                s("openinference.span.kind", "TOOL"),
                s("tool.name", "issue_refund"),
                s("input.value", r#"{"order_id": "1042", "amount": "45.00", "currency": "usd"}"#),
                s("reckon.intent.id", intent),
                s("reckon.idempotency_key", key),
                json!({"key": "http.response.status_code", "value": {"intValue": status}}),
                json!({"key": "retry.count", "value": {"intValue": "0"}})],
            "events": [{"timeUnixNano": (t0 + 250_000_000).to_string(), "name": "exception",
                        "attributes": [s("exception.type", "httpx.HTTPStatusError"),
                                       s("exception.message", "Server error '503 Service Unavailable'")]}],
            "status": {"code": 2, "message": "HTTPStatusError: 503"}
        })
    };
    let (plain, zipped) = (unique("int"), unique("int"));
    let reply = post_json_traces(
        &server,
        &python_doc(vec![span(&plain, &unique("k"), "503")]),
        false,
    )
    .await;
    assert_eq!(reply, json!({}));
    let reply = post_json_traces(
        &server,
        &python_doc(vec![span(&zipped, &unique("k"), "422")]),
        true,
    )
    .await;
    assert_eq!(reply, json!({}));

    let v = server.verdict(&plain).await;
    assert_verdict(&v, "unknown / retry_same_key / -");
    assert_eq!(
        (
            v["attempts"][0]["http_status"].as_u64(),
            v["attempts"][0]["class"].as_str()
        ),
        (Some(503), Some("unknown"))
    );
    let v = server.verdict(&zipped).await;
    assert_verdict(&v, "failed_before_execution / fix_input / -");
    assert_eq!(v["attempts"][0]["http_status"], 422);
    server.stop().await;
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn proto_request(spans: Vec<Span>) -> ExportTraceServiceRequest {
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

fn proto_span(intent: &str, attrs: Vec<KeyValue>) -> Span {
    let t0 = unix_nanos(ago(MIN)) as u64;
    let mut attributes = vec![
        kv(
            "gen_ai.operation.name",
            any_value::Value::StringValue("execute_tool".into()),
        ),
        kv(
            "gen_ai.tool.name",
            any_value::Value::StringValue("issue_refund".into()),
        ),
        kv(
            "reckon.intent.id",
            any_value::Value::StringValue(intent.into()),
        ),
    ];
    attributes.extend(attrs);
    Span {
        trace_id: rand_u128().to_be_bytes().to_vec(),
        span_id: (rand_u128() as u64 | 1).to_be_bytes().to_vec(),
        name: "execute_tool issue_refund".into(),
        kind: 3,
        start_time_unix_nano: t0,
        end_time_unix_nano: t0 + 300_000_000,
        attributes,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_request_gets_protobuf_response() {
    let server = Server::start().await;
    let (good, read) = (unique("int"), unique("int"));
    let ok = proto_span(
        &good,
        vec![kv(
            "http.response.status_code",
            any_value::Value::IntValue(422),
        )],
    );
    // A read-back without reckon.readback.object_ids is malformed: rejected alone.
    let bad = proto_span(
        &read,
        vec![kv(
            "reckon.action",
            any_value::Value::StringValue("read".into()),
        )],
    );
    let resp = server
        .post_otlp(
            "/v1/traces",
            "application/x-protobuf",
            false,
            proto_request(vec![ok.clone()]).encode_to_vec(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
    let reply = ExportTraceServiceResponse::decode(resp.bytes().await.unwrap()).unwrap();
    assert_eq!(reply.partial_success, None);

    let body = gzip(&proto_request(vec![ok, bad]).encode_to_vec());
    let resp = server
        .post_otlp("/v1/traces", "application/x-protobuf", true, body)
        .await;
    assert_eq!(resp.status(), 200);
    let reply = ExportTraceServiceResponse::decode(resp.bytes().await.unwrap()).unwrap();
    let partial = reply.partial_success.expect("a partial success");
    assert_eq!(partial.rejected_spans, 1);
    assert!(
        partial.error_message.contains("reckon.readback.object_ids"),
        "{}",
        partial.error_message
    );

    let v = server.verdict(&good).await;
    assert_verdict(&v, "failed_before_execution / fix_input / -");
    assert_eq!(
        v["attempts"].as_array().unwrap().len(),
        1,
        "the re-sent span is the same attempt"
    );
    assert_eq!(server.get(&format!("/api/v1/intents/{read}")).await.0, 404);
    server.stop().await;
}

/// A downstream that exports OTel logs reports its refund through `/v1/logs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_carry_downstream_records() {
    let server = Server::start().await;
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    let t0 = ago(5.0 * MIN);
    export_grpc(
        &server,
        &[&ToolSpan::new("issue_refund", t0, 30.0)
            .intent(&i)
            .key(&k)
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown")],
    )
    .await;
    assert_verdict(&server.verdict(&i).await, "unknown / retry_same_key / -");

    let observed = unix_nanos(after(t0, 20.0));
    let record = json!({
        "timeUnixNano": observed.to_string(), "observedTimeUnixNano": observed.to_string(),
        "severityNumber": 9, "severityText": "INFO",
        "body": {"stringValue": "refund re created"},
        "attributes": [
            s("reckon.record.object_id", &re), s("reckon.record.status", "succeeded"),
            s("reckon.intent.id", &i), s("reckon.idempotency_key", &k),
            s("reckon.record.amount", "45.00"), s("reckon.record.currency", "usd"),
            s("reckon.record.target", "1042")],
        "traceId": hex_trace(), "spanId": hex_span()
    });
    // An ordinary application log shares the pipeline and is dropped; a record without a status
    // is rejected alone.
    let chatter = json!({"timeUnixNano": observed.to_string(), "severityNumber": 5,
                         "body": {"stringValue": "GET /health 200"}, "attributes": []});
    let broken = json!({"timeUnixNano": observed.to_string(),
                        "attributes": [s("reckon.record.object_id", &unique("re"))]});
    let doc = json!({"resourceLogs": [{
        "resource": {"attributes": [s("service.name", "payments"),
                                    s("reckon.record.kind", "refund"),
                                    s("reckon.record.source", "payments-svc")]},
        "scopeLogs": [{"scope": {"name": "payments.refunds"},
                       "logRecords": [record, chatter, broken]}]}]});
    for gzipped in [false, true] {
        let raw = doc.to_string().into_bytes();
        let raw = if gzipped { gzip(&raw) } else { raw };
        let resp = server
            .post_otlp("/v1/logs", "application/json", gzipped, raw)
            .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/json");
        let reply: Value = resp.json().await.unwrap();
        assert_eq!(
            reply["partialSuccess"]["rejectedLogRecords"], "1",
            "{reply}"
        );
        assert!(
            reply["partialSuccess"]["errorMessage"]
                .as_str()
                .unwrap()
                .contains("reckon.record.status"),
            "{reply}"
        );
    }

    let v = server.verdict(&i).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(
        v["objects"].as_array().unwrap().len(),
        1,
        "a re-sent log is one observation: {v:#}"
    );
    assert_eq!(v["objects"][0]["object_id"], re.as_str());
    assert_eq!(v["objects"][0]["amount"], "45.00");

    // The same in protobuf: an empty logs request is a success, answered in protobuf.
    let resp = server
        .post_otlp("/v1/logs", "application/x-protobuf", false, Vec::new())
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
    assert_eq!(
        ExportLogsServiceResponse::decode(resp.bytes().await.unwrap())
            .unwrap()
            .partial_success,
        None
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_json_requests_succeed() {
    let server = Server::start().await;
    for body in ["{}", r#"{"resourceSpans":[]}"#, ""] {
        let resp = server
            .post_otlp("/v1/traces", "application/json", false, body.into())
            .await;
        assert_eq!(resp.status(), 200, "{body:?}");
        assert_eq!(resp.json::<Value>().await.unwrap(), json!({}));
    }
    server.stop().await;
}

/// The issue's "re-export of the same batch three times": the batch that breaches (a resend after
/// an inconclusive read-back, making a second refund) re-sent over gRPC, HTTP/protobuf and as
/// JSON, with its webhooks redelivered: still one attempt per span, one object per refund, and
/// the same findings and escalation as after the first delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_batch_three_times_over_every_transport_is_one_attempt() {
    let server = Server::start().await;
    let (i, k1, k2, re1, re2) = (
        unique("int"),
        unique("k"),
        unique("k"),
        unique("re"),
        unique("re"),
    );
    let t0 = ago(5.0 * MIN);
    let lost = ToolSpan::new("issue_refund", t0, 30.0)
        .intent(&i)
        .key(&k1)
        .args(refund_args("45.00"))
        .timeout()
        .told("unknown");
    let read = ToolSpan::read(&i, after(t0, 35.0), &[]);
    let resend = ToolSpan::new("issue_refund", after(t0, 36.0), 0.4)
        .intent(&i)
        .key(&k2)
        .args(refund_args("45.00"))
        .http(200)
        .object(&re2, "succeeded")
        .told("succeeded");
    let hooks = [
        stripe_event(
            "refund.created",
            &i,
            &re2,
            "succeeded",
            4500,
            Some(&k2),
            after(t0, 36.3),
        ),
        stripe_event(
            "refund.updated",
            &i,
            &re1,
            "succeeded",
            4500,
            Some(&k1),
            after(t0, 50.0),
        ),
    ];
    let batch = [&lost, &read, &resend];
    export_grpc(&server, &batch).await;
    for h in &hooks {
        server.stripe(h).await;
    }
    let first = server.verdict(&i).await;
    assert_verdict(
        &first,
        "completed / escalate / inconclusive_readback_acted_on, new_key_retry, duplicate_effect",
    );
    let escalation = server.escalation_of(&i, "open").await.unwrap();

    // The same spans as OTLP/JSON, ids in hex: what a collector relaying them would send.
    let json_span = |t: &ToolSpan| {
        let d = t.data();
        let attrs: Vec<Value> = d
            .attributes
            .iter()
            .map(|kv| {
                let value = match &kv.value {
                    opentelemetry::Value::I64(n) => json!({"intValue": n.to_string()}),
                    opentelemetry::Value::Array(opentelemetry::Array::String(v)) => {
                        json!({"arrayValue": {"values":
                    v.iter().map(|s| json!({"stringValue": s.as_str()})).collect::<Vec<_>>()}})
                    }
                    other => json!({"stringValue": other.as_str()}),
                };
                json!({"key": kv.key.as_str(), "value": value})
            })
            .collect();
        json!({"traceId": format!("{:032x}", t.trace_id), "spanId": format!("{:016x}", t.span_id),
               "name": t.name, "kind": 3,
               "startTimeUnixNano": unix_nanos(t.start).to_string(), "endTimeUnixNano": unix_nanos(t.end).to_string(),
               "attributes": attrs, "status": {"code": if t.error.is_some() { 2 } else { 0 }}})
    };
    let doc = js_doc(batch.iter().map(|t| json_span(t)).collect());
    for _ in 0..3 {
        export_grpc(&server, &batch).await;
        export_http(&server, &batch).await;
        assert_eq!(post_json_traces(&server, &doc, true).await, json!({}));
        for h in &hooks {
            server.stripe(h).await;
        }
    }
    let v = server.verdict(&i).await;
    assert_eq!(v["attempts"].as_array().unwrap().len(), 2, "{v:#}");
    assert_eq!(v["readbacks"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v["objects"].as_array().unwrap().len(), 2, "{v:#}");
    assert_eq!(v["findings"], first["findings"], "no extra findings");
    assert_eq!(v["escalation_id"], first["escalation_id"]);
    assert_eq!(
        server.escalation_of(&i, "open").await.unwrap(),
        escalation,
        "the escalation is unchanged"
    );
    let (_, all) = server.get("/api/v1/escalations").await;
    assert_eq!(all["items"].as_array().unwrap().len(), 1);
    server.stop().await;
}
