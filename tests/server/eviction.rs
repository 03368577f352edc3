//! DESIGN.md "Memory and history" end to end: a settled intent leaves memory, its verdict is
//! still served from the store, and later evidence that concerns it (another intent sending its
//! key, a late record of its refund) brings it back and is judged against its whole history.

use std::time::Duration;

use serde_json::{json, Value};

use super::support::*;

async fn evicted(s: &Server) -> u64 {
    s.metric("reckon_intents_evicted").await.unwrap_or(0.0) as u64
}

async fn until_evicted(s: &Server, at_least: u64) {
    for _ in 0..200 {
        if evicted(s).await >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no intent left memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_intent_leaves_memory_and_later_evidence_brings_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.evict_after = Some(Duration::from_millis(200));
    let s = Server::start_with(dir, config).await;

    let (a, b, key, re) = (unique("int"), unique("int"), unique("k"), unique("re"));
    export_http(
        &s,
        &[&ToolSpan::new("issue_refund", ago(3.0 * MIN), 0.4)
            .intent(&a)
            .key(&key)
            .args(refund_args("45.00"))
            .http(200)
            .object(&re, "succeeded")],
    )
    .await;
    assert_verdict(&s.verdict(&a).await, "completed / none / -");
    until_evicted(&s, 1).await;
    // Out of memory, still answered (from the store).
    let (code, v) = s.get(&format!("/api/v1/intents/{a}")).await;
    assert_eq!(code, 200, "{v}");
    assert_verdict(&v, "completed / none / -");

    // Another intent sends A's key: the key's route brings A back, and both carry the finding.
    export_http(
        &s,
        &[&ToolSpan::new("issue_refund", ago(MIN), 30.0)
            .intent(&b)
            .key(&key)
            .args(refund_args("45.00"))
            .timeout()],
    )
    .await;
    assert_verdict(
        &s.verdict(&b).await,
        "unknown / escalate / key_shared_across_intents",
    );
    let v = s.verdict(&a).await;
    assert_verdict(&v, "completed / escalate / key_shared_across_intents");
    assert_eq!(
        v["objects"][0]["object_id"],
        re.as_str(),
        "A's history came back whole: {v}"
    );
    assert!(s.escalation_of(&a, "open").await.is_some());

    // While B shares its key, A stays: leaving would change what B's verdict rests on.

    // Another refund completes and leaves; a late record says it failed after all.
    let (c, key_c, re_c) = (unique("int"), unique("k"), unique("re"));
    export_http(
        &s,
        &[&ToolSpan::new("issue_refund", ago(2.0 * MIN), 0.4)
            .intent(&c)
            .key(&key_c)
            .args(refund_args("45.00"))
            .http(200)
            .object(&re_c, "succeeded")],
    )
    .await;
    assert_verdict(&s.verdict(&c).await, "completed / none / -");
    let before = evicted(&s).await;
    until_evicted(&s, before + 1).await;
    s.records(
        &json!({"kind": "refund", "object_id": re_c, "status": "failed",
                      "amount": "45.00", "currency": "usd", "target": "1042",
                      "observed_at": rfc3339(std::time::SystemTime::now())}),
    )
    .await;
    let v: Value = s.verdict(&c).await;
    assert_verdict(&v, "failed_after_execution / new_intent / -");
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "{v}");
    s.stop().await;
}

/// A refund that timed out two days ago and that the downstream never reported on: `unknown`
/// for good, escalated. Once a person resolves the escalation nothing but evidence can change
/// it, so it leaves memory (it used to stay for ever, and be read at every start). Across a
/// restart its record, arriving by the key alone, still finds it and completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_unknown_intent_leaves_memory_and_its_late_record_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.evict_after = Some(Duration::from_millis(200));
    let s = Server::start_with(dir, config.clone()).await;
    let (a, key, re) = (unique("int"), unique("k"), unique("re"));
    export_http(
        &s,
        &[&ToolSpan::new("issue_refund", ago(2.0 * 86_400.0), 30.0)
            .intent(&a)
            .key(&key)
            .args(refund_args("45.00"))
            .timeout()],
    )
    .await;
    assert_verdict(
        &s.verdict(&a).await,
        "unknown / escalate / unresolved_unknown",
    );
    let escalation = s.escalation_of(&a, "open").await.expect("escalated");
    let id = escalation["id"].as_str().unwrap();
    let (code, body) = s
        .post_json(
            &format!("/api/v1/escalations/{id}/resolve"),
            &json!({"by": "ana", "resolution": "reconciled", "note": "no refund in Stripe yet"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    until_evicted(&s, 1).await;
    assert_eq!(
        s.metric("reckon_intents").await,
        Some(0.0),
        "nothing else is held"
    );
    // What finds it now: the route filter's first stage, nearly empty.
    assert_eq!(
        s.metric("reckon_route_filter_bytes").await,
        Some((32 << 20) as f64)
    );
    let false_positives = s
        .metric("reckon_route_filter_false_positive_ratio")
        .await
        .expect("exposed");
    assert!(false_positives < 1e-6, "{false_positives}");
    let (code, v) = s.get(&format!("/api/v1/intents/{a}")).await;
    assert_eq!(code, 200, "{v}");
    assert_verdict(&v, "unknown / none / unresolved_unknown");

    let dir = s.stop().await;
    let s = Server::start_with(dir, config).await;
    s.records(
        &json!({"kind": "refund", "object_id": re, "status": "succeeded",
                      "idempotency_key": key, "amount": "45.00", "currency": "usd",
                      "target": "1042", "observed_at": rfc3339(std::time::SystemTime::now())}),
    )
    .await;
    let v = s.verdict(&a).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["objects"][0]["object_id"], re.as_str(), "{v}");
    s.stop().await;
}

/// A refund record no agent's span claims (a person refunded by hand): an orphan, and past its
/// grace at once (observed an hour ago). It leaves memory; a restart neither loads it nor
/// drops its verdict; and when the span that made it arrives late, by the key alone, the
/// refund is that intent's and the pseudo-intent is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_record_past_its_grace_leaves_memory_until_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.evict_after = Some(Duration::from_millis(200));
    let s = Server::start_with(dir, config.clone()).await;
    let (a, key, re) = (unique("int"), unique("k"), unique("re"));
    let t0 = ago(3_600.0);
    s.records(
        &json!({"kind": "refund", "object_id": re, "idempotency_key": key,
                      "status": "succeeded", "amount": "45.00", "currency": "usd",
                      "target": "1042", "observed_at": rfc3339(after(t0, 1.0))}),
    )
    .await;
    let orphan = format!("orphan:{re}");
    let v = s
        .poll(&format!("/api/v1/intents/{orphan}"), |v| {
            v["intent_id"] == orphan.as_str()
        })
        .await;
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "orphan_record"),
        "{v}"
    );
    until_evicted(&s, 1).await;
    assert_eq!(s.metric("reckon_intents").await, Some(0.0));

    // Past the checkpoint's margin, so the start does not read the record back as part of
    // what arrived since the stop's checkpoint: it knows the orphan only by its stored verdict.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let dir = s.stop().await;
    let s = Server::start_with(dir, config).await;
    let (code, v) = s.get(&format!("/api/v1/intents/{orphan}")).await;
    assert_eq!(code, 200, "a restart keeps the orphan's verdict: {v}");
    export_http(
        &s,
        &[&ToolSpan::new("issue_refund", t0, 30.0)
            .intent(&a)
            .key(&key)
            .args(refund_args("45.00"))
            .timeout()],
    )
    .await;
    let v = s.verdict(&a).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["objects"][0]["object_id"], re.as_str(), "{v}");
    // Its removal is written behind the claim.
    let mut answer = (0, Value::Null);
    for _ in 0..150 {
        answer = s.get(&format!("/api/v1/intents/{orphan}")).await;
        if answer.0 == 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(answer.0, 404, "the pseudo-intent is gone: {}", answer.1);
    s.stop().await;
}

/// `retention`: the raw events of a settled intent older than it lose their content (the
/// tool-call arguments) while the service runs; its verdict is still served. The expiry runs at
/// start and every `retention` (here a second). After a restart (the intent out of memory), an
/// executor replays the intent under a new key and refunds again: judged against what retention
/// kept, that is a second refund, not a first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_strips_old_arguments_and_a_late_replay_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.retention = Some(Duration::from_secs(1));
    let s = Server::start_with(dir, config).await;
    let a = unique("int");
    // A refund of intent `a` that succeeded, sent `secs_ago`, under a key and object of its own.
    let refunded = |secs_ago: f64| {
        ToolSpan::new("issue_refund", ago(secs_ago), 0.4)
            .intent(&a)
            .key(&unique("k"))
            .args(refund_args("45.00"))
            .http(200)
            .object(&unique("re"), "succeeded")
    };
    export_http(&s, &[&refunded(3.0 * MIN)]).await;
    assert_verdict(&s.verdict(&a).await, "completed / none / -");
    let mut expired = 0.0;
    for _ in 0..100 {
        expired = s
            .metric("reckon_intents_expired_total")
            .await
            .unwrap_or(0.0);
        if expired >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(expired, 1.0, "the settled intent's arguments were expired");
    let (code, v) = s.get(&format!("/api/v1/intents/{a}")).await;
    assert_eq!(code, 200, "{v}");
    assert_verdict(&v, "completed / none / -");

    let dir = s.stop().await;
    let config = test_config(dir.path().join("data"));
    let s = Server::start_with(dir, config).await;
    export_http(&s, &[&refunded(1.0)]).await;
    let v = s.verdict(&a).await;
    assert_verdict(
        &v,
        "completed / escalate / duplicate_effect, new_key_retry, resend_after_terminal",
    );
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(2), "{v}");
    s.stop().await;
}
