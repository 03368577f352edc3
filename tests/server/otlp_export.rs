//! Real exporters, both transports, through to verdicts.

use std::time::{Duration, SystemTime};

use super::support::*;

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_refund_is_unknown_then_completed_by_its_record() {
    let server = Server::start().await;
    let intent = unique("refund");
    let key = unique("key");
    let start = SystemTime::now() - Duration::from_secs(120);
    let span = ToolSpan::new("issue_refund", start, 30.0)
        .attr("reckon.intent.id", intent.clone())
        .attr("reckon.idempotency_key", key.clone())
        .attr("reckon.outcome", "unknown")
        .attr(
            "gen_ai.tool.call.arguments",
            r#"{"order_id":"1042","amount":45.0,"currency":"usd"}"#,
        )
        .error("timeout");
    export_grpc(&server, &[&span]).await;

    let v = server.verdict(&intent).await;
    assert_eq!(summary(&v), "unknown / retry_same_key / -");
    assert_eq!(v["attempts"][0]["class"], "unknown");
    assert_eq!(v["idempotency_keys"][0], key.as_str());

    let record = serde_json::json!({"kind": "refund", "object_id": unique("re"), "intent_id": intent, "status": "succeeded",
        "amount": "45.00", "currency": "usd", "target": "1042", "observed_at": reckon::codec::rfc3339(reckon::clock::wall_now())});
    let resp = server
        .http
        .post(server.api("/api/v1/records"))
        .json(&record)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["accepted"], 1);
    let v = server.verdict(&intent).await;
    assert_eq!(summary(&v), "completed / none / -");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_export_and_three_resends_make_one_attempt() {
    let server = Server::start().await;
    let intent = unique("refund");
    let start = SystemTime::now() - 3 * HOUR;
    let span = ToolSpan::new("issue_refund", start, 0.3)
        .attr("reckon.intent.id", intent.clone())
        .attr("reckon.idempotency_key", unique("key"))
        .attr("http.response.status_code", 200i64)
        .attr("reckon.downstream.object_id", unique("re"))
        .attr("reckon.downstream.status", "pending");
    for _ in 0..3 {
        export_http(&server, &[&span]).await;
    }
    let v = server.verdict(&intent).await;
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
    // Pending for longer than the contract's 2h: stuck.
    assert_eq!(summary(&v), "pending / wait / stuck_pending");
    server.stop().await;
}

/// A baggage processor copies `reckon.intent.id` and `reckon.idempotency_key` onto every span
/// of the trace, the model's `chat gpt-4o` span too, and that span is exported before the tool
/// span. The chat span is context (its convention marks it as a model call): the clean refund
/// stays `completed`, with no finding and no escalation (not `no_idempotency_contract` for a
/// "write" of unknown outcome on a tool no contract covers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_span_carrying_the_intent_and_key_is_context() {
    let server = Server::start().await;
    let intent = unique("refund");
    let key = unique("key");
    let object = unique("re");
    let start = SystemTime::now() - Duration::from_secs(300);
    let chat = ToolSpan {
        name: "chat gpt-4o".into(),
        attributes: vec![
            opentelemetry::KeyValue::new("gen_ai.operation.name", "chat"),
            opentelemetry::KeyValue::new("gen_ai.system", "openai"),
            opentelemetry::KeyValue::new("gen_ai.request.model", "gpt-4o"),
            opentelemetry::KeyValue::new("reckon.intent.id", intent.clone()),
            opentelemetry::KeyValue::new("reckon.idempotency_key", key.clone()),
        ],
        ..ToolSpan::new("chat", start, 1.5)
    };
    export_grpc(&server, &[&chat]).await;
    let (status, body) = server.get(&format!("/api/v1/intents/{intent}")).await;
    assert_eq!(status, 404, "the chat span made an intent: {body}");

    let refund = ToolSpan::new("issue_refund", after(start, 2.0), 0.4)
        .intent(&intent)
        .key(&key)
        .args(refund_args("45.00"))
        .http(200)
        .object(&object, "succeeded")
        .told("succeeded");
    export_grpc(&server, &[&refund]).await;
    server
        .records(
            &serde_json::json!({"kind": "refund", "object_id": object, "intent_id": intent,
            "idempotency_key": key, "status": "succeeded", "amount": "45.00", "currency": "usd",
            "target": "1042", "observed_at": rfc3339(after(start, 3.0)), "source": "stripe"}),
        )
        .await;

    let v = server.verdict(&intent).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v["tool"], "issue_refund", "{v:#}");
    assert_eq!(v["escalation_id"], serde_json::Value::Null, "{v:#}");
    let (status, queue) = server.get("/api/v1/escalations").await;
    assert_eq!(status, 200, "{queue}");
    assert!(
        !queue.to_string().contains(intent.as_str()),
        "no escalation names the intent: {queue:#}"
    );
    server.stop().await;
}

/// With `self_traces`, reckon exports spans of its own work (an export, its decode, the durable
/// append, the audit step) by OTLP to the endpoint, here a second reckon: they arrive there as
/// non-tool spans, counted as dropped and never audited, and the first reckon's own verdicts
/// are unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_own_spans_go_to_the_self_traces_endpoint_and_are_not_audited() {
    let receiver = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("reckon.log");
    let endpoint = receiver.r().grpc_url();
    let traced = Reckon::spawn_with(
        &dir.path().join("data"),
        &log,
        &repo_contracts(),
        &[
            ("RECKON_SELF_TRACES", endpoint.as_str()),
            ("RECKON_SELF_TRACES_ONE_IN", "1"),
        ],
    )
    .await;
    let intent = unique("int");
    export_http_to(
        traced.http,
        &[&ToolSpan::new("issue_refund", ago(120.0), 30.0)
            .intent(&intent)
            .key(&unique("k"))
            .timeout()
            .told("unknown")],
    )
    .await;
    assert_verdict(
        &traced.verdict(&intent).await,
        "unknown / retry_same_key / -",
    );
    // The batch processor sends within its delay (5 s by default).
    let dropped = "reckon_spans_dropped_total{reason=\"not_audited\"}";
    let began = std::time::Instant::now();
    while receiver.metric(dropped).await.unwrap_or(0.0) < 4.0 {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "reckon's own spans never arrived; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, report) = receiver.get("/api/v1/report").await;
    assert_eq!(
        report["intents"], 0,
        "nothing of reckon's own is audited: {report}"
    );
    traced.kill9();
    receiver.stop().await;
}
