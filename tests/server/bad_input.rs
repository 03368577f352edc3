//! Bad input gets its specific error, and nothing else is lost: every test first ingests a good
//! intent, sends the bad input, and checks the good intent is untouched and the server still
//! takes good input afterwards.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use reckon::ingest::http::RpcStatus;
use serde_json::{json, Value};
use std::time::SystemTime;

use super::support::*;

/// A settled refund ingested before the bad input; its verdict must not change.
async fn bystander(server: &Server) -> (String, Value) {
    let i = unique("int");
    let span = ToolSpan::new("issue_refund", ago(MIN), 0.3)
        .intent(&i)
        .key(&unique("k"))
        .args(refund_args("45.00"))
        .http(200)
        .object(&unique("re"), "succeeded");
    export_grpc(server, &[&span]).await;
    let v = server.verdict(&i).await;
    assert_verdict(&v, "completed / none / -");
    (i, v)
}

async fn unchanged(server: &Server, (i, before): &(String, Value)) {
    let now = server.verdict(i).await;
    assert_eq!(now["attempts"], before["attempts"]);
    assert_eq!(now["objects"], before["objects"]);
    assert_eq!(summary(&now), summary(before));
}

fn proto_span(intent: &str) -> Span {
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    let t0 = unix_nanos(ago(2.0 * MIN)) as u64;
    let kv = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    };
    Span {
        trace_id: rand_u128().to_be_bytes().to_vec(),
        span_id: (rand_u128() as u64 | 1).to_be_bytes().to_vec(),
        name: "execute_tool issue_refund".into(),
        start_time_unix_nano: t0,
        end_time_unix_nano: t0 + 30_000_000_000,
        attributes: vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "issue_refund"),
            kv("reckon.intent.id", intent),
            kv("reckon.idempotency_key", &format!("key-{intent}")),
            kv("error.type", "timeout"),
            // Padding, so that the cut lands inside a span.
            kv("gen_ai.tool.call.result", &"x".repeat(200)),
        ],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_protobuf_is_refused_with_a_status_over_http_and_grpc() {
    let server = Server::start().await;
    let good = bystander(&server).await;
    let (a, b) = (unique("int"), unique("int"));
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![proto_span(&a), proto_span(&b)],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let bytes = req.encode_to_vec();
    let cut = bytes[..bytes.len() - 100].to_vec();
    for gzipped in [false, true] {
        let body = if gzipped { gzip(&cut) } else { cut.clone() };
        let resp = server
            .post_otlp("/v1/traces", "application/x-protobuf", gzipped, body)
            .await;
        assert_eq!(resp.status(), 400);
        assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
        assert!(
            resp.headers().get("retry-after").is_none(),
            "a decode error is not retryable"
        );
        let status =
            RpcStatus::decode(resp.bytes().await.unwrap()).expect("a google.rpc.Status body");
        assert_eq!(status.code, tonic::Code::InvalidArgument as i32);
        assert!(
            status.message.starts_with("cannot decode request"),
            "{}",
            status.message
        );
    }
    // The same bytes over gRPC: INVALID_ARGUMENT with the same message, counted the same.
    let channel = tonic::transport::Channel::from_shared(server.r().grpc_url())
        .unwrap()
        .connect()
        .await
        .expect("connect over gRPC");
    let mut client = tonic::client::Grpc::new(channel);
    let refused = reckon::loadgen::export_grpc(&mut client, cut.clone().into())
        .await
        .expect_err("a truncated export is refused over gRPC too");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().starts_with("cannot decode request"),
        "{}",
        refused.message()
    );
    assert_eq!(
        server
            .metric("reckon_ingest_rejections_total{reason=\"decode_error\"}")
            .await,
        Some(3.0),
        "two over HTTP, one over gRPC"
    );
    // Nothing of the truncated batch was taken, not even the span before the cut.
    for i in [&a, &b] {
        assert_eq!(server.get(&format!("/api/v1/intents/{i}")).await.0, 404);
    }
    unchanged(&server, &good).await;
    // The whole request, re-sent intact, is taken, over gRPC as it was refused.
    reckon::loadgen::export_grpc(&mut client, bytes.clone().into())
        .await
        .expect("the intact export is acknowledged over gRPC");
    assert_verdict(&server.verdict(&a).await, "unknown / retry_same_key / -");
    let resp = server
        .post_otlp("/v1/traces", "application/x-protobuf", false, bytes)
        .await;
    assert_eq!(resp.status(), 200, "and again over HTTP: a re-send");
    assert_verdict(&server.verdict(&a).await, "unknown / retry_same_key / -");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_json_is_400_with_a_json_status() {
    let server = Server::start().await;
    let good = bystander(&server).await;
    for (body, want) in [
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"na"#,
            "cannot decode request",
        ),
        ("[1,2]", "must be a JSON object"),
        (r#"{"resourceSpans":{"a":1}}"#, "want an array"),
    ] {
        let resp = server
            .post_otlp("/v1/traces", "application/json", false, body.into())
            .await;
        assert_eq!(resp.status(), 400, "{body}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let status: Value = resp.json().await.unwrap();
        assert_eq!(status["code"], 3, "{status}");
        assert!(
            status["message"].as_str().unwrap().contains(want),
            "{body}: {status}"
        );
    }
    // Not OTLP at all.
    let resp = server
        .post_otlp("/v1/traces", "text/plain", false, "hello".into())
        .await;
    assert_eq!(resp.status(), 415);
    unchanged(&server, &good).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_malformed_span_among_good_ones_is_rejected_alone() {
    let server = Server::start().await;
    let good = bystander(&server).await;
    let t0 = unix_nanos(ago(2.0 * MIN));
    let span = |trace: &str, intent: &str| {
        json!({"traceId": trace, "spanId": format!("{:016x}", rand_u128() as u64 | 1),
               "name": "execute_tool issue_refund", "kind": 3,
               "startTimeUnixNano": t0.to_string(), "endTimeUnixNano": (t0 + 30_000_000_000u128).to_string(),
               "attributes": [{"key": "reckon.intent.id", "value": {"stringValue": intent}},
                              {"key": "reckon.idempotency_key", "value": {"stringValue": format!("key-{intent}")}},
                              {"key": "error.type", "value": {"stringValue": "timeout"}}],
               "status": {"code": 2}})
    };
    let (a, bad, c) = (unique("int"), unique("int"), unique("int"));
    let short_trace = "5b8efff798038103d269b633813fc6"; // 15 bytes
    let doc = json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        span(&format!("{:032x}", rand_u128()), &a),
        span(short_trace, &bad),
        span(&format!("{:032x}", rand_u128()), &c)]}]}]});
    let resp = server
        .post_otlp(
            "/v1/traces",
            "application/json",
            false,
            doc.to_string().into(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let reply: Value = resp.json().await.unwrap();
    assert_eq!(reply["partialSuccess"]["rejectedSpans"], "1", "{reply}");
    let msg = reply["partialSuccess"]["errorMessage"].as_str().unwrap();
    assert!(msg.starts_with("rejected 1 of 3"), "{msg}");
    assert!(
        msg.to_lowercase().contains("trace"),
        "the reason names the trace id: {msg}"
    );
    for i in [&a, &c] {
        assert_verdict(&server.verdict(i).await, "unknown / retry_same_key / -");
    }
    assert_eq!(server.get(&format!("/api/v1/intents/{bad}")).await.0, 404);
    unchanged(&server, &good).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_and_badly_signed_stripe_events_are_refused_and_not_recorded() {
    let server = Server::start().await;
    let good = bystander(&server).await;
    // A timed-out refund that a forged "succeeded" webhook would close.
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    export_http(
        &server,
        &[&ToolSpan::new("issue_refund", ago(2.0 * MIN), 30.0)
            .intent(&i)
            .key(&k)
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown")],
    )
    .await;
    let body = stripe_event(
        "refund.updated",
        &i,
        &re,
        "succeeded",
        4500,
        Some(&k),
        ago(MIN),
    );
    let now = unix_secs(std::time::SystemTime::now());
    let good_sig = reckon::ingest::stripe::sign(body.as_bytes(), STRIPE_SECRET, now);
    let cases: Vec<(&str, Option<String>, String)> = vec![
        ("unsigned", None, body.clone()),
        ("empty header", Some(String::new()), body.clone()),
        (
            "wrong secret",
            Some(reckon::ingest::stripe::sign(
                body.as_bytes(),
                "whsec_someone_else",
                now,
            )),
            body.clone(),
        ),
        ("not hex", Some(format!("t={now},v1=zzzz")), body.clone()),
        ("no v1", Some(format!("t={now},v0=abcd")), body.clone()),
        (
            "stale",
            Some(reckon::ingest::stripe::sign(
                body.as_bytes(),
                STRIPE_SECRET,
                now - 600,
            )),
            body.clone(),
        ),
        // Signed, then altered: the amount changed from 4500 to 9500.
        (
            "altered body",
            Some(good_sig.clone()),
            body.replace("4500", "9500"),
        ),
    ];
    for (what, sig, body) in &cases {
        let (code, reply) = server.stripe_raw(body, sig.as_deref()).await;
        assert_eq!(code, 400, "{what}: {reply}");
        assert_eq!(reply["error"]["code"], "bad_signature", "{what}: {reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("webhook signature rejected"),
            "{what}: {reply}"
        );
    }
    let v = server.verdict(&i).await;
    assert_verdict(&v, "unknown / retry_same_key / -");
    assert_eq!(v["objects"], json!([]), "nothing was recorded");

    // Correctly signed, well-formed JSON that is not a Stripe event: a 400 naming the field.
    let junk = r#"{"type":"refund.updated","created":1761739260,"data":{"object":{"id":"re_x","status":"succeeded","currency":"usd"}}}"#;
    let sig = reckon::ingest::stripe::sign(junk.as_bytes(), STRIPE_SECRET, now);
    let (code, reply) = server.stripe_raw(junk, Some(&sig)).await;
    assert_eq!(code, 400, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("data.object.amount"),
        "{reply}"
    );
    // An event type reckon does not audit is acknowledged so Stripe stops resending it.
    let other =
        r#"{"id":"evt_1","type":"customer.created","created":1761739260,"data":{"object":{}}}"#;
    let sig = reckon::ingest::stripe::sign(other.as_bytes(), STRIPE_SECRET, now);
    let (code, reply) = server.stripe_raw(other, Some(&sig)).await;
    assert_eq!((code, &reply["recorded"]), (200, &json!(false)), "{reply}");

    // The genuine event is then taken.
    let (code, reply) = server.stripe_raw(&body, Some(&good_sig)).await;
    assert_eq!(code, 200, "{reply}");
    assert_verdict(&server.verdict(&i).await, "completed / none / -");
    // Each webhook is counted by type and outcome: the ignored type by its name (an endpoint
    // subscribed to more than reckon audits shows here), refusals without one (their body was
    // not believed).
    let webhooks = |ty: &str, outcome: &str| {
        format!("reckon_webhooks_total{{source=\"stripe\",type=\"{ty}\",outcome=\"{outcome}\"}}")
    };
    assert_eq!(
        server
            .metric(&webhooks("customer.created", "ignored"))
            .await,
        Some(1.0)
    );
    assert_eq!(
        server.metric(&webhooks("refund.updated", "recorded")).await,
        Some(1.0)
    );
    assert!(
        server
            .metric(&webhooks("-", "refused"))
            .await
            .unwrap_or(0.0)
            >= 2.0
    );
    unchanged(&server, &good).await;
    server.stop().await;
}

const LIMIT: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_and_gzip_bombs_are_413() {
    let server = Server::start().await;
    let good = bystander(&server).await;
    // Valid JSON, just too big: one span with a 1.1 MiB attribute.
    let i = unique("int");
    let big = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": format!("{:032x}", rand_u128()), "spanId": "00000000000000a1",
        "name": "execute_tool issue_refund",
        "attributes": [{"key": "reckon.intent.id", "value": {"stringValue": i}},
                       {"key": "gen_ai.tool.call.result", "value": {"stringValue": "x".repeat(LIMIT + LIMIT / 10)}}]}]}]}]})
    .to_string()
    .into_bytes();
    let resp = server
        .post_otlp("/v1/traces", "application/json", false, big.clone())
        .await;
    assert_eq!(resp.status(), 413, "OTLP/HTTP plain body over the limit");
    // A gzip bomb: 27 KiB on the wire, 24 MiB inflated.
    let bomb = gzip(&vec![b' '; 24 * LIMIT]);
    assert!(bomb.len() < LIMIT / 8);
    let resp = server
        .post_otlp("/v1/traces", "application/json", true, bomb.clone())
        .await;
    assert_eq!(resp.status(), 413, "OTLP/HTTP gzip bomb");
    assert_eq!(resp.headers()["content-type"], "application/json");
    let status: Value = resp.json().await.unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("larger than the limit"),
        "{status}"
    );
    // The compressed form of the too-big span, small on the wire, is refused the same way.
    let resp = server
        .post_otlp("/v1/traces", "application/json", true, gzip(&big))
        .await;
    assert_eq!(resp.status(), 413);

    // The records API: too big, and a bomb.
    let records = json!([{"object_id": "re_big", "status": "pending", "kind": "x".repeat(LIMIT)}])
        .to_string();
    let (code, _) = server.post_records_raw(records).await;
    assert_eq!(code, 413, "records body over the limit");
    let resp = server
        .http
        .post(server.api("/api/v1/records"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(bomb)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413, "records gzip bomb");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "body_too_large", "{body}");

    // gRPC: the real exporter's message over the limit is refused, not half-taken.
    let j = unique("int");
    let huge = ToolSpan::new("issue_refund", ago(MIN), 30.0)
        .intent(&j)
        .timeout()
        .attr("gen_ai.tool.call.result", "x".repeat(LIMIT + 1));
    assert!(
        try_export_grpc(&server, &[&huge]).await.is_err(),
        "an over-limit gRPC export fails"
    );

    for x in [&i, &j] {
        assert_eq!(server.get(&format!("/api/v1/intents/{x}")).await.0, 404);
    }
    unchanged(&server, &good).await;
    server.stop().await;
}

/// A plain body over the limit gets OTLP's `google.rpc.Status` body, like a gzip bomb does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_otlp_body_is_413_with_a_status() {
    let server = Server::start().await;
    let resp = server
        .post_otlp(
            "/v1/traces",
            "application/x-protobuf",
            false,
            vec![b' '; LIMIT + 1],
        )
        .await;
    assert_eq!(resp.status(), 413);
    let body = resp.bytes().await.unwrap();
    let status = RpcStatus::decode(body.clone());
    assert!(
        status.as_ref().is_ok_and(
            |s| s.code == tonic::Code::InvalidArgument as i32 && s.message.contains("limit")
        ),
        "OTLP/HTTP 413 body is not a google.rpc.Status: {:?}",
        String::from_utf8_lossy(&body)
    );
    server.stop().await;
}

/// The API's 413 is its JSON error, for a plain body as for a gzip bomb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_api_body_is_413_with_the_json_error() {
    let server = Server::start().await;
    let resp = server
        .http
        .post(server.api("/api/v1/records"))
        .header("content-type", "application/json")
        .body(vec![b' '; LIMIT + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let text = resp.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert_eq!(
        body["error"]["code"], "body_too_large",
        "API 413 body is not the JSON error: {text:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_with_a_wrong_type_is_rejected_alone() {
    let server = Server::start().await;
    let good = bystander(&server).await;
    let (i, k) = (unique("int"), unique("k"));
    let t0 = ago(10.0 * MIN);
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
    let (re1, re2, re3) = (unique("re"), unique("re"), unique("re"));
    let body = json!([
        {"kind": "refund", "object_id": re1, "intent_id": i, "status": "pending", "amount": "45.00",
         "currency": "usd", "target": "1042", "observed_at": rfc3339(after(t0, 5.0))},
        {"kind": "refund", "object_id": re2, "intent_id": i, "status": "succeeded", "amount": true,
         "currency": "usd", "target": "1042", "observed_at": rfc3339(after(t0, 6.0))},
        {"kind": "refund", "object_id": re1, "intent_id": i, "status": "succeeded", "amount": 45.00,
         "currency": "usd", "target": 1042, "observed_at": rfc3339(after(t0, 60.0))},
        {"kind": "refund", "object_id": re3, "intent_id": i, "status": "succeeded",
         "observed_at": 1761739200}
    ]);
    let (code, reply) = server.post_json("/api/v1/records", &body).await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["accepted"], 2, "{reply}");
    let rejected = reply["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 2, "{reply}");
    assert_eq!(rejected[0]["index"], 1);
    assert_eq!(
        rejected[0]["error"],
        "amount: expected a number or a decimal string, got true"
    );
    assert_eq!(rejected[1]["index"], 3);
    assert!(
        rejected[1]["error"]
            .as_str()
            .unwrap()
            .starts_with("observed_at: 1761739200 is not plausible"),
        "{reply}"
    );

    // The two good items are one object's history: pending, then succeeded.
    let v = server.verdict(&i).await;
    assert_verdict(&v, "completed / none / -");
    let objects = v["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 1, "{v:#}");
    assert_eq!(
        (
            objects[0]["object_id"].as_str(),
            objects[0]["status"].as_str()
        ),
        (Some(re1.as_str()), Some("succeeded"))
    );

    // Whole-body failures are 400 with the JSON error.
    for (bad, want) in [
        ("{\"object_id\": \"a\", \"sta", "neither JSON nor NDJSON"),
        ("42", "not a JSON number"),
        ("", "body is empty"),
    ] {
        let (code, reply) = server.post_records_raw(bad.to_string()).await;
        assert_eq!(code, 400, "{bad:?}: {reply}");
        assert_eq!(reply["error"]["code"], "bad_request");
        assert!(
            reply["error"]["message"].as_str().unwrap().contains(want),
            "{bad:?}: {reply}"
        );
    }
    unchanged(&server, &good).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_are_json() {
    let server = Server::start().await;
    bystander(&server).await;
    let cases = [
        ("/api/v1/nope", 404, "not_found"),
        ("/api/v2/intents", 404, "not_found"),
        ("/api/v1/intents/no-such-intent", 404, "not_found"),
        ("/api/v1/escalations/no-such", 404, "not_found"),
        ("/api/v1/intents?state=done", 400, "bad_request"),
        ("/api/v1/intents?finding=oops", 400, "bad_request"),
        ("/api/v1/intents?since=last%20tuesday", 400, "bad_request"),
        ("/api/v1/intents?cursor=%25%25%25", 400, "bad_cursor"),
        ("/api/v1/escalations?status=closed", 400, "bad_request"),
        ("/api/v1/report?since=soon", 400, "bad_request"),
    ];
    for (path, status, code) in cases {
        let (got, body) = server.get(path).await;
        assert_eq!(got, status, "{path}: {body}");
        assert_eq!(body["error"]["code"], code, "{path}: {body}");
        assert!(
            !body["error"]["message"].as_str().unwrap().is_empty(),
            "{path}"
        );
    }
    let (_, body) = server.get("/api/v1/intents?state=done").await;
    assert!(
        body["error"]["message"].as_str().unwrap().contains("state"),
        "{body}"
    );
    // Claim and resolve bodies.
    let (code, body) = server
        .post_json("/api/v1/escalations/no-such/claim", &json!({"by": "ana"}))
        .await;
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (code, body) = server
        .post_json("/api/v1/escalations/x/claim", &json!({"who": "ana"}))
        .await;
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    server.stop().await;
}

/// A query parameter that does not parse is the JSON error DESIGN.md promises, not axum's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_query_parameter_is_a_json_400() {
    let server = Server::start().await;
    for path in ["/api/v1/intents?limit=ten", "/api/v1/intents?limit=-1"] {
        let resp = server.http.get(server.api(path)).send().await.unwrap();
        assert_eq!(resp.status(), 400, "{path}");
        let text = resp.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(
            body["error"]["code"], "bad_request",
            "{path}: not the JSON error body: {text:?}"
        );
    }
    server.stop().await;
}

/// A known path with the wrong method gets a 405 with the JSON error body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_method_is_a_json_405() {
    let server = Server::start().await;
    let resp = server
        .http
        .get(server.api("/api/v1/records"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    let text = resp.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert!(
        body["error"]["code"].is_string(),
        "405 without the JSON error body: {text:?}"
    );
    server.stop().await;
}

/// Store truth, item 1: a record whose time a store cannot hold (before 1970) used to fail the
/// whole batch on ClickHouse with a retryable 503, so the client re-sent it forever and the good
/// record beside it (here: proof of a duplicate refund) never landed. Every time outside the
/// bounds (before 2000, or more than the tolerated skew ahead) is now refused alone, by index,
/// identically on both stores, and the rest is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_with_impossible_times_are_rejected_alone_and_the_rest_lands() {
    let server = Server::start().await;
    let good = bystander(&server).await;
    let (i, k, re1, re2) = (unique("int"), unique("k"), unique("re"), unique("re"));
    let t0 = ago(10.0 * MIN);
    export_grpc(
        &server,
        &[&ToolSpan::new("issue_refund", t0, 0.3)
            .intent(&i)
            .key(&k)
            .args(refund_args("45.00"))
            .http(200)
            .object(&re1, "succeeded")],
    )
    .await;
    assert_verdict(&server.verdict(&i).await, "completed / none / -");
    let refund = |object: &str| {
        json!({"kind": "refund", "object_id": object, "intent_id": i, "status": "succeeded",
               "amount": "45.00", "currency": "usd", "target": "1042"})
    };
    let with = |mut v: Value, k: &str, t: &str| {
        v[k] = json!(t);
        v
    };
    let body = json!([
        // A second refund for the same intent: the evidence of a duplicate.
        with(refund(&re2), "observed_at", &rfc3339(after(t0, 60.0))),
        with(refund(&unique("re")), "observed_at", "1969-12-31T23:59:59Z"),
        with(
            with(
                refund(&unique("re")),
                "observed_at",
                &rfc3339(after(t0, 61.0))
            ),
            "created_at",
            "1969-07-20T20:17:40Z"
        ),
        with(refund(&unique("re")), "observed_at", "2200-01-01T00:00:00Z"),
        with(refund(&unique("re")), "observed_at", "1999-12-31T23:59:59Z"),
        with(
            refund(&unique("re")),
            "created_at",
            &rfc3339(after(SystemTime::now(), 2.0 * HOUR))
        ),
    ]);
    for attempt in 0..2 {
        let (code, reply) = server.post_json("/api/v1/records", &body).await;
        assert_eq!(code, 200, "attempt {attempt}: {reply}");
        assert_eq!(reply["accepted"], 1, "{reply}");
        let rejected: Vec<(u64, &str)> = reply["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["index"].as_u64().unwrap(), r["error"].as_str().unwrap()))
            .collect();
        let want = [
            (1, "observed_at: 1969-12-31T23:59:59.000000000Z is before 2000-01-01T00:00:00.000000000Z, the earliest time reckon accepts"),
            (2, "created_at: 1969-07-20T20:17:40.000000000Z is before 2000-01-01"),
            (3, "observed_at: 2200-01-01T00:00:00.000000000Z is after "),
            (4, "observed_at: 1999-12-31T23:59:59.000000000Z is before 2000-01-01"),
            (5, "created_at: "),
        ];
        assert_eq!(rejected.len(), want.len(), "{reply}");
        for ((index, error), (want_index, want_error)) in rejected.iter().zip(want) {
            assert_eq!(*index, want_index, "{reply}");
            assert!(error.starts_with(want_error), "{error}");
        }
        assert!(
            rejected[2].1.contains("the latest time reckon accepts")
                && rejected[4].1.contains("the latest time reckon accepts"),
            "{reply}"
        );
    }
    let v = server.verdict(&i).await;
    assert!(
        summary(&v).contains("duplicate_effect"),
        "the good record landed: {v:#}"
    );
    let mut objects: Vec<&str> = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["object_id"].as_str().unwrap())
        .collect();
    objects.sort();
    let mut want = vec![re1.as_str(), re2.as_str()];
    want.sort();
    assert_eq!(objects, want, "{v:#}");

    // The same over OTLP logs: one good log record, two a store cannot hold.
    let (j, re3) = (unique("int"), unique("re"));
    export_grpc(
        &server,
        &[&ToolSpan::new("issue_refund", ago(MIN), 30.0)
            .intent(&j)
            .key(&unique("k"))
            .args(refund_args("45.00"))
            .timeout()],
    )
    .await;
    let log = |object: &str, time: String, created: &str| {
        json!({"timeUnixNano": time, "attributes": [
            {"key": "reckon.record.object_id", "value": {"stringValue": object}},
            {"key": "reckon.record.status", "value": {"stringValue": "succeeded"}},
            {"key": "reckon.record.kind", "value": {"stringValue": "refund"}},
            {"key": "reckon.intent.id", "value": {"stringValue": j}},
            {"key": "reckon.record.created_at", "value": {"stringValue": created}}]})
    };
    let now_ns = unix_nanos(ago(5.0)).to_string();
    let doc = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        log(&re3, now_ns.clone(), &rfc3339(ago(6.0))),
        log(&unique("re"), now_ns, "1969-07-20T20:17:40Z"),
        log(&unique("re"), u64::MAX.to_string(), &rfc3339(ago(6.0))),
    ]}]}]});
    let resp = server
        .post_otlp(
            "/v1/logs",
            "application/json",
            false,
            doc.to_string().into(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let reply: Value = resp.json().await.unwrap();
    assert_eq!(
        reply["partialSuccess"]["rejectedLogRecords"], "2",
        "{reply}"
    );
    let msg = reply["partialSuccess"]["errorMessage"].as_str().unwrap();
    assert!(
        msg.starts_with("rejected 2 of 3: log record for object"),
        "{msg}"
    );
    assert!(msg.contains("reckon.record.created_at 1969-07-20"), "{msg}");
    assert!(msg.contains("time 2262-04-11"), "{msg}");
    let v = server.verdict(&j).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["objects"][0]["object_id"], json!(re3), "{v:#}");
    unchanged(&server, &good).await;
    server.stop().await;
}

/// Store truth, item 7: times from clocks that are wrong. A span at time 0 (which would escalate
/// at once: every key long expired), one at `u64::MAX` (which would sort first in every listing
/// and fall into every `since` window), one ending before it starts, one two hours ahead of
/// reckon's clock: each is rejected alone through OTLP partial success with its reason, on
/// every transport, and the span beside them is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_from_broken_clocks_are_rejected_alone() {
    let server = Server::start().await;
    let good = bystander(&server).await;
    let t0 = unix_nanos(ago(2.0 * MIN));
    let span = |intent: &str, start: String, end: String| {
        json!({"traceId": format!("{:032x}", rand_u128()), "spanId": format!("{:016x}", rand_u128() as u64 | 1),
               "name": "execute_tool issue_refund", "kind": 3,
               "startTimeUnixNano": start, "endTimeUnixNano": end,
               "attributes": [{"key": "reckon.intent.id", "value": {"stringValue": intent}},
                              {"key": "reckon.idempotency_key", "value": {"stringValue": unique("k")}},
                              {"key": "error.type", "value": {"stringValue": "timeout"}}],
               "status": {"code": 2}})
    };
    let ids: Vec<String> = (0..5).map(|_| unique("int")).collect();
    let ahead = unix_nanos(after(SystemTime::now(), 2.0 * HOUR));
    let doc = json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        span(&ids[0], t0.to_string(), (t0 + 30_000_000_000).to_string()),
        span(&ids[1], "0".into(), "0".into()),
        span(&ids[2], u64::MAX.to_string(), u64::MAX.to_string()),
        span(&ids[3], t0.to_string(), (t0 - 1_000_000_000).to_string()),
        span(&ids[4], ahead.to_string(), (ahead + 1_000_000_000).to_string()),
    ]}]}]});
    let resp = server
        .post_otlp(
            "/v1/traces",
            "application/json",
            false,
            doc.to_string().into(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let reply: Value = resp.json().await.unwrap();
    assert_eq!(reply["partialSuccess"]["rejectedSpans"], "4", "{reply}");
    let msg = reply["partialSuccess"]["errorMessage"].as_str().unwrap();
    assert!(msg.starts_with("rejected 4 of 5: span "), "{msg}");
    for want in [
        "start time 1970-01-01T00:00:00.000000000Z is before 2000-01-01T00:00:00.000000000Z, the earliest time reckon accepts",
        "start time 2262-04-11T23:47:16.854775807Z is after ",
        "precedes the start time",
        "plus 1h of skew",
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }
    assert_verdict(
        &server.verdict(&ids[0]).await,
        "unknown / retry_same_key / -",
    );
    for i in &ids[1..] {
        assert_eq!(
            server.get(&format!("/api/v1/intents/{i}")).await.0,
            404,
            "{i}"
        );
    }
    // The newest verdict is not one from a clock in the future.
    let (code, page) = server.get("/api/v1/intents?limit=1").await;
    assert_eq!(code, 200, "{page}");
    assert_ne!(page["items"][0]["intent_id"], json!(ids[2]), "{page}");

    // gRPC, with the real exporter: a span at the epoch beside a good one.
    let (epoch, fine) = (unique("int"), unique("int"));
    let spans = [
        ToolSpan::new("issue_refund", SystemTime::UNIX_EPOCH, 30.0)
            .intent(&epoch)
            .key(&unique("k"))
            .args(refund_args("45.00"))
            .timeout(),
        ToolSpan::new("issue_refund", ago(MIN), 30.0)
            .intent(&fine)
            .key(&unique("k"))
            .args(refund_args("45.00"))
            .timeout(),
    ];
    try_export_grpc(&server, &spans.iter().collect::<Vec<_>>())
        .await
        .expect("a partial success is a success");
    assert_verdict(&server.verdict(&fine).await, "unknown / retry_same_key / -");
    assert_eq!(server.get(&format!("/api/v1/intents/{epoch}")).await.0, 404);
    unchanged(&server, &good).await;
    server.stop().await;
}
