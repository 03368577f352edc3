//! DESIGN.md "The seed matrix" through a running reckon: every row (and the invoice-draft note's
//! seven tests) as real OTLP spans over gRPC and HTTP/protobuf, downstream records as signed
//! Stripe webhooks and `POST /api/v1/records`, verdicts read back over the API.
//!
//! The server's clock is the wall clock, so each scenario is laid out in the past: `t0` is its
//! first send, a number of seconds (or hours) before now.

use serde_json::json;

use super::support::*;

const R: &str = "issue_refund";
const D: &str = "create_bill_draft";

fn refund(
    start: std::time::SystemTime,
    secs: f64,
    intent: &str,
    key: &str,
    amount: &str,
) -> ToolSpan {
    ToolSpan::new(R, start, secs)
        .intent(intent)
        .key(key)
        .args(refund_args(amount))
}

fn draft(
    start: std::time::SystemTime,
    secs: f64,
    intent: &str,
    key: &str,
    supplier: &str,
) -> ToolSpan {
    ToolSpan::new(D, start, secs)
        .intent(intent)
        .key(key)
        .args(draft_args(supplier, "120.00"))
}

/// A bill draft as the bookkeeping service reports it through the records API.
fn draft_record(
    intent: &str,
    object_id: &str,
    supplier: &str,
    observed: std::time::SystemTime,
) -> serde_json::Value {
    json!({"kind": "draft", "object_id": object_id, "intent_id": intent, "status": "created",
           "amount": "120.00", "currency": "EUR", "target": supplier,
           "observed_at": rfc3339(observed), "source": "bookkeeping"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_before_execution() {
    let s = Server::start().await;
    let i = unique("int");
    let span = refund(ago(MIN), 0.2, &i, &unique("k"), "-5")
        .http(422)
        .error("invalid_request_error")
        .told("rejected");
    export_grpc(&s, &[&span]).await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "failed_before_execution / fix_input / -");
    assert_eq!(v["attempts"][0]["class"], "rejected");
    assert_eq!(v["attempts"][0]["http_status"], 422);
    assert_eq!(v["objects"], json!([]));
    assert!(s.escalation_of(&i, "open").await.is_none());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_lost_after_commit_retried_with_same_key() {
    let s = Server::start().await;
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    let t0 = ago(5.0 * MIN);
    let lost = refund(t0, 30.0, &i, &k, "45.00").timeout().told("unknown");
    export_grpc(&s, &[&lost]).await;
    assert_verdict(&s.verdict(&i).await, "unknown / retry_same_key / -");

    // The downstream committed (its webhook says so) and the same-key retry gets the saved response.
    s.stripe(&stripe_event(
        "refund.created",
        &i,
        &re,
        "succeeded",
        4500,
        Some(&k),
        after(t0, 0.5),
    ))
    .await;
    let retry = refund(after(t0, 31.0), 0.4, &i, &k, "45.00")
        .http(200)
        .object(&re, "succeeded")
        .told("succeeded");
    export_http(&s, &[&retry]).await;

    let v = s.verdict(&i).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["objects"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v["objects"][0]["object_id"], re.as_str());
    assert_eq!(
        v["objects"][0]["amount"], "45.00",
        "4500 minor units of USD are 45.00"
    );
    let classes: Vec<&str> = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["class"].as_str().unwrap())
        .collect();
    assert_eq!(classes, ["unknown", "succeeded"]);
    assert_eq!(v["idempotency_keys"], json!([k]));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_lost_after_commit_not_yet_retried() {
    let s = Server::start().await;
    // Still inside max_in_flight (60 s from the send): the original may still commit.
    let in_flight = unique("int");
    let t_in = ago(40.0);
    export_http(
        &s,
        &[&refund(t_in, 30.0, &in_flight, &unique("k"), "45.00")
            .timeout()
            .told("unknown")],
    )
    .await;
    assert_verdict(&s.verdict(&in_flight).await, "unknown / wait / -");

    // Two minutes on, with no record: the same key is safe to retry until first send + 24h - 1h.
    let lost = unique("int");
    let t0 = ago(2.0 * MIN);
    export_grpc(
        &s,
        &[&refund(t0, 30.0, &lost, &unique("k"), "45.00")
            .timeout()
            .told("unknown")],
    )
    .await;
    let v = s.verdict(&lost).await;
    assert_verdict(&v, "unknown / retry_same_key / -");
    assert_eq!(
        v["attempts"][0]["class"], "unknown",
        "a timeout is never failed"
    );
    assert_eq!(v["attempts"][0]["error_type"], "timeout");
    assert_eq!(
        v["safe_retry_until"],
        rfc3339(after(t0, 23.0 * HOUR)).as_str()
    );

    // Nobody acted for 16 minutes: past the unknown deadline it escalates on its own.
    let stale = unique("int");
    export_grpc(
        &s,
        &[
            &refund(ago(16.0 * MIN), 30.0, &stale, &unique("k"), "45.00")
                .timeout()
                .told("unknown"),
        ],
    )
    .await;
    let v = s.verdict(&stale).await;
    assert_verdict(&v, "unknown / escalate / unresolved_unknown");
    let e = s
        .escalation_of(&stale, "open")
        .await
        .expect("an open escalation");
    assert_eq!(v["escalation_id"], e["id"]);
    assert_eq!(e["severity"], "high");
    assert_eq!(e["findings"][0]["kind"], "unresolved_unknown");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refund_pending_later_failed() {
    let s = Server::start().await;
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    let t0 = ago(11.0 * MIN);
    let span = refund(t0, 0.5, &i, &k, "45.00")
        .http(200)
        .object(&re, "pending")
        .told("pending");
    export_http(&s, &[&span]).await;
    s.stripe(&stripe_event(
        "refund.created",
        &i,
        &re,
        "pending",
        4500,
        Some(&k),
        after(t0, 0.4),
    ))
    .await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "pending / wait / -");
    assert_eq!(v["attempts"][0]["class"], "recorded");

    s.stripe(&stripe_event(
        "refund.failed",
        &i,
        &re,
        "failed",
        4500,
        Some(&k),
        after(t0, 10.0 * MIN),
    ))
    .await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "failed_after_execution / new_intent / -");
    assert_eq!(v["objects"][0]["status"], "failed");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_still_running_empty_readback_then_object() {
    let s = Server::start().await;
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    // T is now: the send was 36 s ago and timed out after 30 s; the read-back 1 s ago found nothing.
    let t0 = ago(36.0);
    export_grpc(
        &s,
        &[&refund(t0, 30.0, &i, &k, "45.00").timeout().told("unknown")],
    )
    .await;
    export_http(&s, &[&ToolSpan::read(&i, after(t0, 35.0), &[])]).await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "unknown / wait / -");
    assert_eq!(v["readbacks"][0]["object_ids"], json!([]));

    // The original commits after T, inside its 60 s.
    s.stripe(&stripe_event(
        "refund.updated",
        &i,
        &re,
        "succeeded",
        4500,
        Some(&k),
        std::time::SystemTime::now(),
    ))
    .await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["objects"].as_array().unwrap().len(), 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_still_running_resend_after_empty_readback() {
    let s = Server::start().await;
    let (i, k1, k2, re1, re2) = (
        unique("int"),
        unique("k"),
        unique("k"),
        unique("re"),
        unique("re"),
    );
    let t0 = ago(5.0 * MIN);
    let lost = refund(t0, 30.0, &i, &k1, "45.00").timeout().told("unknown");
    let read = ToolSpan::read(&i, after(t0, 35.0), &[]);
    // Concluding "not done", the executor resends under a fresh key and makes a second refund.
    let resend = refund(after(t0, 36.0), 0.4, &i, &k2, "45.00")
        .http(200)
        .object(&re2, "succeeded")
        .told("succeeded");
    export_grpc(&s, &[&lost, &read]).await;
    export_http(&s, &[&resend]).await;
    s.stripe(&stripe_event(
        "refund.created",
        &i,
        &re2,
        "succeeded",
        4500,
        Some(&k2),
        after(t0, 36.3),
    ))
    .await;
    s.stripe(&stripe_event(
        "refund.updated",
        &i,
        &re1,
        "succeeded",
        4500,
        Some(&k1),
        after(t0, 50.0),
    ))
    .await;
    let v = s.verdict(&i).await;
    assert_verdict(
        &v,
        "completed / escalate / inconclusive_readback_acted_on, new_key_retry, duplicate_effect",
    );
    assert_eq!(v["objects"].as_array().unwrap().len(), 2);
    let e = s
        .escalation_of(&i, "open")
        .await
        .expect("an open escalation");
    assert_eq!(
        e["severity"], "critical",
        "duplicate_effect is critical: {e:#}"
    );
    let kinds: Vec<&str> = e["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"duplicate_effect") && kinds.contains(&"new_key_retry"),
        "{e:#}"
    );
    assert!(
        !kinds.contains(&"inconclusive_readback_acted_on"),
        "medium findings do not escalate: {e:#}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_same_key_one_conflict() {
    let s = Server::start().await;
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    let t0 = ago(MIN);
    let winner = refund(t0, 2.0, &i, &k, "45.00")
        .http(200)
        .object(&re, "succeeded")
        .told("succeeded");
    // The second worker's send conflicts while the first executes.
    let loser = refund(after(t0, 0.1), 0.1, &i, &k, "45.00")
        .http(409)
        .error("idempotency_key_in_use")
        .told("pending");
    // The two workers export concurrently, one over each transport.
    let (a, b) = ([&winner], [&loser]);
    tokio::join!(export_grpc(&s, &a), export_http(&s, &b));
    s.stripe(&stripe_event(
        "refund.updated",
        &i,
        &re,
        "succeeded",
        4500,
        Some(&k),
        after(t0, 1.9),
    ))
    .await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "completed / none / -");
    let classes: Vec<&str> = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["class"].as_str().unwrap())
        .collect();
    assert_eq!(classes, ["succeeded", "conflict"]);
    assert_eq!(v["objects"].as_array().unwrap().len(), 1);
    s.stop().await;
}

/// Also the escalation queue over HTTP: listed while open, claimed once (409 for a second person),
/// resolved, and the decision falls back to the audit's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_changed_parameters_escalates_and_a_person_resolves_it() {
    let s = Server::start().await;
    let (i, k) = (unique("int"), unique("k"));
    let t0 = ago(2.0 * MIN);
    let lost = refund(t0, 30.0, &i, &k, "45.00").timeout().told("unknown");
    // The model re-issues 40.00 under the same key; the downstream refuses.
    let changed = refund(after(t0, 40.0), 0.2, &i, &k, "40.00")
        .http(400)
        .error("idempotency_error")
        .told("rejected");
    export_http(&s, &[&lost]).await;
    export_grpc(&s, &[&changed]).await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "unknown / escalate / key_reuse_mismatch");

    let e = s
        .escalation_of(&i, "open")
        .await
        .expect("an open escalation");
    let id = e["id"].as_str().unwrap().to_string();
    assert_eq!(v["escalation_id"], id.as_str());
    assert_eq!(e["findings"][0]["kind"], "key_reuse_mismatch");

    let claim = format!("/api/v1/escalations/{id}/claim");
    let (code, body) = s.post_json(&claim, &json!({"by": "ana"})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"], "claimed");
    assert_eq!(body["claimed_by"], "ana");
    // The same person again is a retry; someone else is a conflict.
    assert_eq!(s.post_json(&claim, &json!({"by": "ana"})).await.0, 200);
    let (code, body) = s.post_json(&claim, &json!({"by": "bo"})).await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    assert!(s.escalation_of(&i, "open").await.is_none());
    assert!(s.escalation_of(&i, "claimed").await.is_some());
    // Claimed is still not settled.
    assert_eq!(s.verdict(&i).await["decision"], "escalate");

    let (code, body) = s
        .post_json(
            &format!("/api/v1/escalations/{id}/resolve"),
            &json!({"by": "ana", "resolution": "refunded_once", "note": "checked in the Stripe dashboard: one refund of 45.00"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"], "resolved");
    assert_eq!(body["resolution"], "refunded_once");
    let resolved = s
        .escalation_of(&i, "resolved")
        .await
        .expect("listed as resolved");
    assert_eq!(resolved["resolved_by"], "ana");

    let v = s.verdict(&i).await;
    assert_eq!(v["state"], "unknown");
    assert_ne!(
        v["decision"], "escalate",
        "decision falls back after resolve: {v:#}"
    );
    assert_eq!(
        v["escalation_id"],
        id.as_str(),
        "the latest escalation stays linked"
    );
    // Resolved is final.
    let (code, _) = s.post_json(&claim, &json!({"by": "bo"})).await;
    assert_eq!(code, 409);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_key_expiry() {
    let s = Server::start().await;
    let (i, k, re1, re2) = (unique("int"), unique("k"), unique("re"), unique("re"));
    let t0 = ago(26.0 * HOUR);
    // 26 hours ago: a timed-out send, and Stripe's webhook that it committed.
    s.stripe(&stripe_event(
        "refund.created",
        &i,
        &re1,
        "succeeded",
        4500,
        Some(&k),
        after(t0, 0.5),
    ))
    .await;
    export_grpc(
        &s,
        &[&refund(t0, 30.0, &i, &k, "45.00").timeout().told("unknown")],
    )
    .await;
    assert_verdict(&s.verdict(&i).await, "completed / none / -");

    // 25 hours later the key was pruned and the same key executes again.
    let late = refund(after(t0, 25.0 * HOUR), 0.4, &i, &k, "45.00")
        .http(200)
        .object(&re2, "succeeded")
        .told("succeeded");
    export_http(&s, &[&late]).await;
    s.stripe(&stripe_event(
        "refund.created",
        &i,
        &re2,
        "succeeded",
        4500,
        Some(&k),
        after(t0, 25.0 * HOUR + 0.3),
    ))
    .await;
    let v = s.verdict(&i).await;
    assert_verdict(
        &v,
        "completed / escalate / expired_key_retry, duplicate_effect",
    );
    let e = s
        .escalation_of(&i, "open")
        .await
        .expect("an open escalation");
    assert_eq!(e["severity"], "critical");

    // Without a second object the late retry is still the breach.
    let (j, kj, rej) = (unique("int"), unique("k"), unique("re"));
    s.stripe(&stripe_event(
        "refund.created",
        &j,
        &rej,
        "succeeded",
        4500,
        Some(&kj),
        after(t0, 0.5),
    ))
    .await;
    let first = refund(t0, 30.0, &j, &kj, "45.00").timeout().told("unknown");
    let replayed = refund(after(t0, 25.0 * HOUR), 0.4, &j, &kj, "45.00")
        .http(200)
        .object(&rej, "succeeded");
    export_grpc(&s, &[&first, &replayed]).await;
    let v = s.verdict(&j).await;
    assert_verdict(&v, "completed / escalate / expired_key_retry");
    assert_eq!(v["objects"].as_array().unwrap().len(), 1);
    assert!(s.escalation_of(&j, "open").await.is_some());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_intended_actions_equal_parameters_two_keys() {
    let s = Server::start().await;
    let (i1, i2, re1, re2) = (unique("int"), unique("int"), unique("re"), unique("re"));
    let (k1, k2) = (unique("k"), unique("k"));
    let t0 = ago(MIN);
    let a = refund(t0, 0.4, &i1, &k1, "22.50")
        .http(200)
        .object(&re1, "succeeded");
    let b = refund(after(t0, 5.0), 0.4, &i2, &k2, "22.50")
        .http(200)
        .object(&re2, "succeeded");
    export_grpc(&s, &[&a]).await;
    export_http(&s, &[&b]).await;
    s.stripe(&stripe_event(
        "refund.updated",
        &i1,
        &re1,
        "succeeded",
        2250,
        Some(&k1),
        after(t0, 0.3),
    ))
    .await;
    s.stripe(&stripe_event(
        "refund.updated",
        &i2,
        &re2,
        "succeeded",
        2250,
        Some(&k2),
        after(t0, 5.3),
    ))
    .await;
    for (i, re) in [(&i1, &re1), (&i2, &re2)] {
        let v = s.verdict(i).await;
        assert_verdict(&v, "completed / none / -");
        assert_eq!(
            v["objects"].as_array().unwrap().len(),
            1,
            "equal parameters never merge two intents"
        );
        assert_eq!(v["objects"][0]["object_id"], re.as_str());
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_idempotency_contract_timeout() {
    let s = Server::start().await;
    let i = unique("int");
    let email = ToolSpan::new("send_email", ago(MIN), 30.0)
        .intent(&i)
        .args(r#"{"to":"ana@example.com","subject":"Your refund"}"#.into())
        .timeout()
        .told("unknown");
    // A tool with no contract at all is the same case when the executor marks the span as its
    // attempt (here by what it told the model; a key or `reckon.action` would do as well).
    let j = unique("int");
    let wire = ToolSpan::new("wire_transfer", ago(MIN), 30.0)
        .intent(&j)
        .timeout()
        .told("unknown");
    export_http(&s, &[&email, &wire]).await;

    let v = s.verdict(&i).await;
    assert_verdict(&v, "unknown / escalate / no_idempotency_contract");
    assert_eq!(v["contract"], "notifications.email");
    assert_eq!(v["safe_retry_until"], serde_json::Value::Null);
    let v = s.verdict(&j).await;
    assert_verdict(&v, "unknown / escalate / no_idempotency_contract");
    assert_eq!(v["contract"], serde_json::Value::Null);
    for intent in [&i, &j] {
        let e = s
            .escalation_of(intent, "open")
            .await
            .expect("an open escalation");
        assert_eq!(e["findings"][0]["kind"], "no_idempotency_contract");
    }
    s.stop().await;
}

// The second note: seven tests before retrying a tool call (invoice drafts), records by API.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drafts_1_to_3_same_key_sends_make_one_draft() {
    let s = Server::start().await;
    let t0 = ago(MIN);
    // 1: the same key twice, one draft; the deliberate resend after success is worth a note.
    let (d1, dr1) = (unique("d"), unique("dr"));
    let k = unique("dk");
    export_grpc(
        &s,
        &[
            &draft(t0, 0.3, &d1, &k, "ACME")
                .http(201)
                .object(&dr1, "created"),
            &draft(after(t0, 5.0), 0.3, &d1, &k, "ACME")
                .http(201)
                .object(&dr1, "created"),
        ],
    )
    .await;
    // 2: committed, response dropped (connection reset), same-key retry returns the draft.
    let (d2, dr2) = (unique("d"), unique("dr"));
    let k = unique("dk");
    export_http(
        &s,
        &[
            &draft(t0, 10.0, &d2, &k, "ACME").error("connection_reset"),
            &draft(after(t0, 11.0), 0.3, &d2, &k, "ACME")
                .http(201)
                .object(&dr2, "created"),
        ],
    )
    .await;
    // 3: a 503 before commit, then the retry creates it once.
    let (d3, dr3) = (unique("d"), unique("dr"));
    let k = unique("dk");
    export_grpc(
        &s,
        &[
            &draft(t0, 0.1, &d3, &k, "ACME").http(503),
            &draft(after(t0, 2.0), 0.3, &d3, &k, "ACME")
                .http(201)
                .object(&dr3, "created"),
        ],
    )
    .await;
    s.records(&json!([
        draft_record(&d1, &dr1, "ACME", after(t0, 0.2)),
        draft_record(&d2, &dr2, "ACME", after(t0, 0.2)),
        draft_record(&d3, &dr3, "ACME", after(t0, 2.2)),
    ]))
    .await;

    let v = s.verdict(&d1).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["objects"].as_array().unwrap().len(), 1);
    assert_verdict(&s.verdict(&d2).await, "completed / none / -");
    let v = s.verdict(&d3).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(
        v["attempts"][0]["class"], "unknown",
        "a 503 is not a known failure"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drafts_4_to_6_mismatch_simultaneous_and_two_keys() {
    let s = Server::start().await;
    let t0 = ago(5.0 * MIN);
    // 4: a completed key reused with a changed supplier is refused with a mismatch error.
    let (d4, dr4, k4) = (unique("d"), unique("dr"), unique("dk"));
    export_grpc(
        &s,
        &[
            &draft(t0, 0.3, &d4, &k4, "ACME")
                .http(201)
                .object(&dr4, "created"),
            &draft(after(t0, 9.0), 0.1, &d4, &k4, "Globex")
                .http(422)
                .error("idempotency_key_mismatch"),
        ],
    )
    .await;
    // 5: two simultaneous same-key sends; the loser observed the winner's draft.
    let (d5, dr5, k5) = (unique("d"), unique("dr"), unique("dk"));
    let w = draft(t0, 1.0, &d5, &k5, "ACME")
        .http(201)
        .object(&dr5, "created");
    let l = draft(after(t0, 0.05), 1.0, &d5, &k5, "ACME")
        .http(201)
        .object(&dr5, "created");
    let (a, b) = ([&w], [&l]);
    tokio::join!(export_grpc(&s, &a), export_http(&s, &b));
    // 6: identical fields, two keys: two intents, two drafts.
    let (d6a, d6b, dr6a, dr6b) = (unique("d"), unique("d"), unique("dr"), unique("dr"));
    export_http(
        &s,
        &[
            &draft(t0, 0.3, &d6a, &unique("dk"), "ACME")
                .http(201)
                .object(&dr6a, "created"),
            &draft(after(t0, 60.0), 0.3, &d6b, &unique("dk"), "ACME")
                .http(201)
                .object(&dr6b, "created"),
        ],
    )
    .await;
    // NDJSON, as a reconciler streams them.
    let ndjson: String = [
        draft_record(&d4, &dr4, "ACME", after(t0, 0.2)),
        draft_record(&d5, &dr5, "ACME", after(t0, 0.9)),
        draft_record(&d6a, &dr6a, "ACME", after(t0, 0.2)),
        draft_record(&d6b, &dr6b, "ACME", after(t0, 60.2)),
    ]
    .iter()
    .map(|r| format!("{r}\n"))
    .collect();
    let (code, reply) = s.post_records_raw(ndjson).await;
    assert_eq!(
        (code, reply["accepted"].as_u64()),
        (200, Some(4)),
        "{reply}"
    );

    let v = s.verdict(&d4).await;
    assert_verdict(&v, "completed / escalate / key_reuse_mismatch");
    assert_eq!(v["objects"].as_array().unwrap().len(), 1, "no second draft");
    assert!(s.escalation_of(&d4, "open").await.is_some());
    assert_verdict(&s.verdict(&d5).await, "completed / none / -");
    for (d, dr) in [(&d6a, &dr6a), (&d6b, &dr6b)] {
        let v = s.verdict(d).await;
        assert_verdict(&v, "completed / none / -");
        assert_eq!(v["objects"][0]["object_id"], dr.as_str());
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drafts_7_timeout_beyond_key_retention() {
    let s = Server::start().await;
    let t0 = ago(25.0 * HOUR);
    // Past the safe window: no resubmission is safe, and by now a person is on it.
    let d = unique("d");
    export_grpc(&s, &[&draft(t0, 30.0, &d, &unique("dk"), "ACME").timeout()]).await;
    let v = s.verdict(&d).await;
    assert_verdict(&v, "unknown / escalate / unresolved_unknown");

    // A runner that resubmits anyway is caught.
    let (d2, k) = (unique("d"), unique("dk"));
    let first = draft(ago(25.0 * HOUR + MIN), 30.0, &d2, &k, "ACME").timeout();
    let again = draft(ago(MIN), 0.3, &d2, &k, "ACME")
        .http(201)
        .object(&unique("dr"), "created");
    export_http(&s, &[&first, &again]).await;
    assert_verdict(
        &s.verdict(&d2).await,
        "completed / escalate / expired_key_retry",
    );
    s.stop().await;
}

/// Baggage processors copy `reckon.intent.id` onto every span of the intent's trace, the
/// agent's lookups too. A tool span of a tool no contract covers that carries the intent id and
/// nothing else of the executor's is context: not an attempt of unknown outcome, so no
/// `no_idempotency_contract` escalation per read. A contracted tool's span with the intent id
/// alone is still its attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_intent_id_alone_on_an_uncontracted_tool_is_context() {
    let s = Server::start().await;
    let i = unique("int");
    let lookup = ToolSpan::new("list_refunds", ago(MIN), 0.2).intent(&i);
    let slow_lookup = ToolSpan::new("get_order", ago(MIN), 30.0)
        .intent(&i)
        .timeout();
    let j = unique("int");
    let refund = ToolSpan::new("issue_refund", ago(MIN), 30.0)
        .intent(&j)
        .args(refund_args("45.00"))
        .timeout();
    export_http(&s, &[&lookup, &slow_lookup, &refund]).await;

    // The contracted refund is audited; the export was taken whole before its verdict showed.
    assert_verdict(&s.verdict(&j).await, "unknown / reconcile / -");
    let (status, _) = s.get(&format!("/api/v1/intents/{i}")).await;
    assert_eq!(status, 404, "the lookups made no intent of their own");
    assert!(s.escalation_of(&i, "open").await.is_none());
    s.stop().await;
}
