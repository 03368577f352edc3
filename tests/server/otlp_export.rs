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
