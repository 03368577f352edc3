//! Engine state is a cache of the store: a graceful restart and a SIGKILL right after an
//! acknowledged export both come back with every acknowledged event and the same verdicts.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::support::*;

/// A verdict without the fields that say when it was computed.
fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    let o = v.as_object_mut().unwrap();
    o.remove("audited_at");
    v
}

/// Intents in every state worth keeping: settled, unknown and safe to retry, pending, escalated
/// and claimed by a person, escalated and resolved, a duplicate. Returns their ids.
async fn scenarios(s: &Server) -> Vec<String> {
    let t0 = ago(10.0 * MIN);
    let ids: Vec<String> = (0..6).map(|_| unique("int")).collect();
    let (re0, re2, re5a, re5b) = (unique("re"), unique("re"), unique("re"), unique("re"));
    let refund = |i: &str, start, secs| {
        ToolSpan::new("issue_refund", start, secs)
            .intent(i)
            .args(refund_args("45.00"))
    };
    let spans = [
        refund(&ids[0], t0, 0.3)
            .key(&unique("k"))
            .http(200)
            .object(&re0, "succeeded"),
        refund(&ids[1], after(t0, 7.0 * MIN), 30.0)
            .key(&unique("k"))
            .timeout()
            .told("unknown"),
        refund(&ids[2], t0, 0.3)
            .key(&unique("k"))
            .http(200)
            .object(&re2, "pending")
            .told("pending"),
        ToolSpan::new("send_email", after(t0, 8.0 * MIN), 30.0)
            .intent(&ids[3])
            .timeout()
            .told("unknown"),
        ToolSpan::new("send_email", after(t0, 8.0 * MIN), 30.0)
            .intent(&ids[4])
            .timeout()
            .told("unknown"),
        refund(&ids[5], t0, 0.3)
            .key(&unique("k"))
            .http(200)
            .object(&re5a, "succeeded"),
        refund(&ids[5], after(t0, 5.0), 0.3)
            .key(&unique("k"))
            .http(200)
            .object(&re5b, "succeeded"),
    ];
    export_grpc(s, &spans.iter().collect::<Vec<_>>()).await;
    s.stripe(&stripe_event(
        "refund.created",
        &ids[2],
        &re2,
        "pending",
        4500,
        None,
        after(t0, 1.0),
    ))
    .await;
    s.records(&json!({"kind": "refund", "object_id": re0, "intent_id": ids[0], "status": "succeeded",
                      "amount": "45.00", "currency": "usd", "target": "1042", "observed_at": rfc3339(after(t0, 1.0))}))
        .await;
    // A person claims one escalation and resolves another.
    let e3 = s.escalation_of(&ids[3], "open").await.unwrap();
    let (code, _) = s
        .post_json(
            &format!("/api/v1/escalations/{}/claim", e3["id"].as_str().unwrap()),
            &json!({"by": "ana"}),
        )
        .await;
    assert_eq!(code, 200);
    let e4 = s.escalation_of(&ids[4], "open").await.unwrap();
    let (code, _) = s
        .post_json(
            &format!("/api/v1/escalations/{}/resolve", e4["id"].as_str().unwrap()),
            &json!({"by": "bo", "resolution": "not_sent", "note": "provider log shows no message"}),
        )
        .await;
    assert_eq!(code, 200);

    let want = [
        "completed / none / -",
        "unknown / retry_same_key / -",
        "pending / wait / -",
        "unknown / escalate / no_idempotency_contract",
        // Resolved by a person: nothing to do until new evidence arrives.
        "unknown / none / no_idempotency_contract",
        "completed / escalate / duplicate_effect, new_key_retry, resend_after_terminal",
    ];
    for (i, w) in ids.iter().zip(want) {
        assert_verdict(&s.verdict(i).await, w);
    }
    ids
}

async fn snapshot(s: &Server, ids: &[String]) -> (Vec<Value>, Value) {
    let mut verdicts = Vec::new();
    for i in ids {
        verdicts.push(comparable(&s.verdict(i).await));
    }
    let (code, escalations) = s.get("/api/v1/escalations").await;
    assert_eq!(code, 200);
    (verdicts, escalations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_restart_keeps_verdicts_and_escalations() {
    let s = Server::start().await;
    let ids = scenarios(&s).await;
    let before = snapshot(&s, &ids).await;
    let dir = s.stop().await;

    let s = Server::start_in(dir).await;
    // What settled a while before the stop stays in the store, served from there unchanged.
    let loaded = s.get("/readyz").await.1["intents"].as_u64().unwrap();
    assert!(loaded <= ids.len() as u64, "{loaded} intents in memory");
    let after = snapshot(&s, &ids).await;
    assert_eq!(after.0, before.0, "verdicts after restart");
    assert_eq!(
        after.1, before.1,
        "escalations after restart (claimed and resolved kept)"
    );
    s.stop().await;
}

/// Store truth, item 6: a record posted without `observed_at` takes the receive time, so a
/// re-post of one (a reconciler's retry, a sync re-sending its snapshot) would be a new
/// observation of old news: it moved the object's `last_seen`, and a stale `succeeded`
/// re-posted after `failed` flipped a failed refund back to completed. A timeless observation
/// whose (source, object, status) the store already knows is a re-delivery: acknowledged, not
/// stored again. The store, not the process, knows it, so it holds across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_reposted_without_observed_at_is_a_redelivery_even_after_a_restart() {
    let s = Server::start().await;
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    export_grpc(
        &s,
        &[&ToolSpan::new("issue_refund", ago(10.0 * MIN), 30.0)
            .intent(&i)
            .key(&k)
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown")],
    )
    .await;
    let record = |status: &str| {
        json!({"kind": "refund", "object_id": re, "intent_id": i, "status": status,
               "amount": "45.00", "currency": "usd", "target": "1042", "source": "reconciler"})
    };
    let object = |v: &Value| v["objects"][0].clone();
    // News: the refund succeeded (no time of its own: stamped on receipt).
    s.records(&record("succeeded")).await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "completed / none / -");
    let seen = object(&v);
    // Re-posted as is: acknowledged, and nothing moves.
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.records(&record("succeeded")).await;
    let v = s.verdict(&i).await;
    assert_eq!(object(&v), seen, "a re-delivery is not a new observation");
    // The refund then failed, as the downstream reports with its own time.
    let mut failed = record("failed");
    failed["observed_at"] = json!(rfc3339(std::time::SystemTime::now()));
    s.records(&failed).await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "failed_after_execution / new_intent / -");
    let failed_seen = object(&v);
    assert_eq!(failed_seen["status"], "failed");
    // A stale `succeeded` re-delivered without a time does not flip it back ...
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.records(&record("succeeded")).await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "failed_after_execution / new_intent / -");
    assert_eq!(object(&v), failed_seen);
    // ... nor after a restart, when only the store remembers what was seen.
    let dir = s.stop().await;
    let s = Server::start_in(dir).await;
    s.records(&json!([record("succeeded"), record("succeeded")]))
        .await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "failed_after_execution / new_intent / -");
    assert_eq!(object(&v), failed_seen);
    // A status not seen before is news even without a time, and a time of its own always is.
    let mut late = record("succeeded");
    late["observed_at"] = json!(rfc3339(std::time::SystemTime::now()));
    s.records(&late).await;
    assert_verdict(&s.verdict(&i).await, "completed / none / -");
    // In one batch, a timeless copy of an observation that carries its own time adds nothing.
    let at = std::time::SystemTime::now();
    let mut canceled = record("canceled");
    canceled["observed_at"] = json!(rfc3339(at));
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.records(&json!([record("canceled"), canceled])).await;
    let v = s.verdict(&i).await;
    assert_verdict(&v, "failed_after_execution / new_intent / -");
    assert_eq!(object(&v)["last_seen"], json!(rfc3339(at)), "{v:#}");
    s.stop().await;
}

/// "Store truth" item 5 end to end: three identical sends of an export of nine attempts are
/// nine attempts, a record posted three times is one record, on both stores. Counters are the
/// process's own (README, Metrics): after a restart they start over, while the report, read
/// from the store, still counts every attempt once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resent_exports_count_once_and_counters_are_per_process() {
    let s = Server::start().await;
    let t0 = ago(MIN);
    let intents: Vec<String> = (0..9).map(|_| unique("int")).collect();
    let objects: Vec<String> = (0..9).map(|_| unique("re")).collect();
    let spans: Vec<ToolSpan> = intents
        .iter()
        .zip(&objects)
        .map(|(i, re)| {
            ToolSpan::new("issue_refund", t0, 0.3)
                .intent(i)
                .key(&unique("k"))
                .args(refund_args("45.00"))
                .http(200)
                .object(re, "succeeded")
        })
        .collect();
    let refs: Vec<&ToolSpan> = spans.iter().collect();
    let record = json!({"kind": "refund", "object_id": objects[0], "intent_id": intents[0], "status": "succeeded",
                        "amount": "45.00", "currency": "usd", "target": "1042", "observed_at": rfc3339(after(t0, 1.0))});
    for _ in 0..3 {
        export_grpc(&s, &refs).await;
        s.records(&record).await;
    }
    assert_eq!(
        s.metric_sum("reckon_spans_received_total").await as u64,
        27,
        "arrivals are arrivals"
    );
    assert_eq!(s.metric_sum("reckon_tool_attempts_total").await as u64, 9);
    assert_eq!(
        s.metric_sum("reckon_records_received_total").await as u64,
        1
    );
    assert_eq!(
        s.metric_sum("reckon_conflicting_resends_total").await as u64,
        0
    );
    let dir = s.stop().await;

    let s = Server::start_in(dir).await;
    assert_eq!(
        s.metric_sum("reckon_tool_attempts_total").await as u64,
        0,
        "counters start over"
    );
    let report = s.poll("/api/v1/report", |r| r["intents"] == 9).await;
    assert_eq!(report["attempts"], 9, "{report:#}");
    s.stop().await;
}

/// `reckon serve` turns transparent huge pages off for itself before it starts (see
/// `reckon::process`): the kernel says so for the running process.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_without_transparent_huge_pages() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reckon::spawn(&dir.path().join("data"), &dir.path().join("reckon.log")).await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", r.child.id())).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("THP_enabled:"))
        .expect("THP_enabled in the status of reckon serve");
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    r.kill9();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_right_after_an_acknowledged_export_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("reckon.log");
    let r = Reckon::spawn(&data, &log).await;

    // First batch, audited and read back while the process is alive.
    let (a, b, re) = (unique("int"), unique("int"), unique("re"));
    let t0 = ago(5.0 * MIN);
    let lost = ToolSpan::new("issue_refund", t0, 30.0)
        .intent(&a)
        .key(&unique("k"))
        .args(refund_args("45.00"))
        .timeout()
        .told("unknown");
    let email = ToolSpan::new("send_email", t0, 30.0)
        .intent(&b)
        .timeout()
        .told("unknown");
    export_to(r.grpc, &[&lost, &email]).await;
    let before_a = r.verdict(&a).await;
    let before_b = r.verdict(&b).await;
    assert_verdict(&before_a, "unknown / retry_same_key / -");
    assert_verdict(&before_b, "unknown / escalate / no_idempotency_contract");

    // A record, then a second batch: killed the moment the export is acknowledged.
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("http://{}/api/v1/records", r.api))
        .json(&json!({"kind": "refund", "object_id": re, "intent_id": a, "status": "succeeded", "amount": "45.00",
                      "currency": "usd", "target": "1042", "observed_at": rfc3339(after(t0, 20.0))}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let c = unique("int");
    let pending = ToolSpan::new("issue_refund", ago(MIN), 0.3)
        .intent(&c)
        .key(&unique("k"))
        .args(refund_args("12.00"))
        .http(200)
        .object(&unique("re"), "pending")
        .told("pending");
    export_http_to(r.http, &[&pending]).await;
    r.kill9();

    let r = Reckon::spawn(&data, &log.with_extension("2.log")).await;
    let after_a = r.verdict(&a).await;
    assert_verdict(&after_a, "completed / none / -");
    assert_eq!(
        after_a["attempts"], before_a["attempts"],
        "the spans are there"
    );
    assert_eq!(
        after_a["objects"][0]["object_id"],
        re.as_str(),
        "the record is there"
    );
    let after_b = r.verdict(&b).await;
    assert_eq!(
        comparable(&after_b),
        comparable(&before_b),
        "same verdict, same escalation"
    );
    let after_c = r.verdict(&c).await;
    assert_verdict(&after_c, "pending / wait / -");
    assert_eq!(
        after_c["attempts"][0]["span_id"],
        format!("{:016x}", pending.span_id).as_str()
    );
    let resp: Value = client
        .get(format!("http://{}/api/v1/escalations?status=open", r.api))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let open: Vec<&str> = resp["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["intent_id"].as_str().unwrap())
        .collect();
    assert_eq!(open, [b.as_str()]);

    // The exporter's retry of the killed export, after the restart, is still the same attempt.
    export_http_to(r.http, &[&pending]).await;
    export_to(r.grpc, &[&lost, &email]).await;
    assert_eq!(comparable(&r.verdict(&c).await), comparable(&after_c));
    assert_eq!(r.verdict(&a).await["attempts"].as_array().unwrap().len(), 1);

    // Killed again with nothing in flight, restarted: still the same.
    r.kill9();
    let r = Reckon::spawn(&data, &log.with_extension("3.log")).await;
    assert_eq!(comparable(&r.verdict(&a).await), comparable(&after_a));
    assert_eq!(comparable(&r.verdict(&c).await), comparable(&after_c));
    drop(r);
}

/// Intents the store's report counts under no tool (orphan records' pseudo-intents).
async fn toolless(r: &Reckon) -> u64 {
    let (code, rep) = api_get(r, "/api/v1/report").await;
    assert_eq!(code, 200, "{rep}");
    rep["by_tool"]["(none)"]["intents"].as_u64().unwrap_or(0)
}

/// "Store truth" item 2 at its crash point: the span that claims an orphan record is
/// acknowledged, and reckon is SIGKILLed while the orphan's pseudo-intent verdict is still in
/// the store (the persister writes its removal behind). After the restart the refund counts once,
/// under its tool, and `GET /api/v1/intents/orphan:...` is a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_before_an_orphan_removal_is_written_heals_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("reckon.log");
    let r = Reckon::spawn(&data, &log).await;
    let client = reqwest::Client::new();
    let mut reached = None;
    // The crash point lasts as long as the persister's linger; each try checks it was inside.
    for _ in 0..5 {
        let (intent, key, re) = (unique("int"), unique("k"), unique("re"));
        let t0 = ago(5.0 * MIN);
        let resp = client
            .post(format!("http://{}/api/v1/records", r.api))
            .json(&json!({"kind": "refund", "object_id": re, "idempotency_key": key, "status": "succeeded",
                          "amount": "45.00", "currency": "usd", "target": "1042", "observed_at": rfc3339(after(t0, 1.0))}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let began = Instant::now();
        while toolless(&r).await != 1 {
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "the orphan's verdict never reached the store"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let span = ToolSpan::new("issue_refund", t0, 0.3)
            .intent(&intent)
            .key(&key)
            .args(refund_args("45.00"))
            .http(200)
            .object(&re, "succeeded")
            .told("succeeded");
        export_to(r.grpc, &[&span]).await;
        if toolless(&r).await == 1 {
            reached = Some((intent, re));
            break;
        }
        // The persister was faster than this check: let it settle and try again.
        while toolless(&r).await != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let (intent, re) = reached.expect("killed while the orphan's removal was still unwritten");
    r.kill9();

    let r = Reckon::spawn(&data, &log.with_extension("2.log")).await;
    let (code, body) = api_get(&r, &format!("/api/v1/intents/orphan:{re}")).await;
    assert_eq!(code, 404, "the pseudo-intent is gone: {body}");
    assert_eq!(
        toolless(&r).await,
        0,
        "the refund is not counted under (none)"
    );
    let v = r.verdict(&intent).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["objects"][0]["object_id"], re.as_str());
    // The restored verdicts are written behind: wait for them, then count.
    let began = Instant::now();
    let rep = loop {
        let (_, rep) = api_get(&r, "/api/v1/report").await;
        if rep["by_tool"]["issue_refund"]["intents"] == 1
            || began.elapsed() > Duration::from_secs(20)
        {
            break rep;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(rep["intents"], 1, "one refund, counted once: {rep:#}");
    assert_eq!(rep["by_tool"]["issue_refund"]["intents"], 1, "{rep:#}");
    drop(r);
}

/// `POST /api/v1/records` on a running binary, asserting it was accepted.
async fn post_record(r: &Reckon, record: Value) {
    let resp = reqwest::Client::new()
        .post(format!("http://{}/api/v1/records", r.api))
        .json(&record)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["accepted"], 1, "{body}");
}

/// "Store truth" item 3 at its crash point: a second refund recorded `pending` opens a critical
/// `duplicate_effect` and the queue shows it; the same refund recorded `failed` right after
/// takes the finding out of the verdict; SIGKILL within the persister's delay. After the restart
/// the escalation is still there, open, with the finding that opened it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_an_escalation_was_shown_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("reckon.log");
    let r = Reckon::spawn(&data, &log).await;
    let (intent, re1, re2) = (unique("int"), unique("re"), unique("re"));
    let t0 = ago(5.0 * MIN);
    let paid = ToolSpan::new("issue_refund", t0, 0.3)
        .intent(&intent)
        .key(&unique("k"))
        .args(refund_args("45.00"))
        .http(200)
        .object(&re1, "succeeded")
        .told("succeeded");
    export_to(r.grpc, &[&paid]).await;
    let second = |status: &str, secs: f64| {
        json!({"kind": "refund", "object_id": re2, "intent_id": intent, "status": status, "amount": "45.00",
               "currency": "usd", "target": "1042", "observed_at": rfc3339(after(t0, secs))})
    };
    post_record(&r, second("pending", 60.0)).await;
    // The queue shows it as soon as the record is acknowledged.
    let (code, open) = api_get(&r, "/api/v1/escalations?status=open").await;
    assert_eq!(code, 200);
    let shown = open["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["intent_id"] == intent.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("the escalation is in the queue: {open:#}"));
    assert_eq!(shown["severity"], "critical");
    assert_eq!(shown["findings"][0]["kind"], "duplicate_effect");
    post_record(&r, second("failed", 61.0)).await;
    r.kill9();

    let r = Reckon::spawn(&data, &log.with_extension("2.log")).await;
    let (code, open) = api_get(&r, "/api/v1/escalations?status=open").await;
    assert_eq!(code, 200);
    let items = open["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{open:#}");
    assert_eq!(items[0], shown, "the escalation as it was shown");
    let v = r.verdict(&intent).await;
    assert_verdict(&v, "completed / escalate / -");
    assert_eq!(v["escalation_id"], shown["id"]);
    drop(r);
}

/// `POST path` with a JSON body on a running binary's API.
async fn api_post(r: &Reckon, path: &str, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("http://{}{path}", r.api))
        .json(body)
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

/// "Store truth" item 8: two reckon processes on one store (DESIGN's scale-out shape). A claim
/// through one makes a claim by someone else through the other a 409 naming the claimant, and
/// both answer the same afterwards: person actions are checked against the store, not one
/// process's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_store_agree_on_claims() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let a = Reckon::spawn(&data, &dir.path().join("a.log")).await;
    let intent = unique("int");
    let email = ToolSpan::new("send_email", ago(MIN), 30.0)
        .intent(&intent)
        .timeout()
        .told("unknown");
    export_to(a.grpc, &[&email]).await;
    let v = a.verdict(&intent).await;
    assert_verdict(&v, "unknown / escalate / no_idempotency_contract");
    let id = v["escalation_id"].as_str().unwrap().to_string();
    // The second process starts with the escalation open in its memory.
    let b = Reckon::spawn(&data, &dir.path().join("b.log")).await;
    assert_eq!(b.verdict(&intent).await["escalation_id"], id.as_str());

    let claim = format!("/api/v1/escalations/{id}/claim");
    let (code, body) = api_post(&a, &claim, &json!({"by": "ana"})).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = api_post(&b, &claim, &json!({"by": "bo"})).await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("ana"),
        "{body}"
    );
    for r in [&a, &b] {
        let (code, e) = api_get(r, &format!("/api/v1/escalations/{id}")).await;
        assert_eq!(code, 200, "{e}");
        assert_eq!(
            (e["status"].as_str(), e["claimed_by"].as_str()),
            (Some("claimed"), Some("ana"))
        );
    }
    // Ana resolves through the other process; a second resolution through the first is refused.
    let resolve = format!("/api/v1/escalations/{id}/resolve");
    let (code, body) = api_post(
        &b,
        &resolve,
        &json!({"by": "ana", "resolution": "not_sent"}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    // Resolved by a person: nothing to do until new evidence arrives.
    assert_eq!(body["verdict"]["decision"], "none", "{body}");
    let (code, body) = api_post(&a, &resolve, &json!({"by": "bo", "resolution": "sent"})).await;
    assert_eq!(code, 409, "{body}");
    for r in [&a, &b] {
        let (_, e) = api_get(r, &format!("/api/v1/escalations/{id}")).await;
        assert_eq!(
            (e["status"].as_str(), e["resolution"].as_str()),
            (Some("resolved"), Some("not_sent"))
        );
        assert_eq!(
            e["verdict"]["decision"], "none",
            "both processes decide the same: {e}"
        );
    }
    drop(a);
    drop(b);
}

/// SIGKILL while the load generator keeps exporting (refunds that complete, refunds that time
/// out, records that settle them, over OTLP/gRPC as exporters default to): after the restart the
/// store holds at least every span that was acknowledged. The restarted process's verdicts are
/// recomputed from the store, so their attempts count what it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_sustained_load_loses_nothing_acknowledged() {
    use reckon::loadgen::{self, LoadgenArgs, Mix, Phase, Transport};

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("reckon.log");
    let r = Reckon::spawn(&data, &log).await;
    let args = LoadgenArgs {
        api: format!("http://{}", r.api),
        otlp_http: format!("http://{}", r.http),
        otlp_grpc: format!("http://{}", r.grpc),
        phases: vec![Phase {
            name: "killed".into(),
            transport: Transport::Grpc,
            mix: Mix::parse("completed=2,open=1,records=1").unwrap(),
        }],
        batch: 50,
        concurrency: 2,
        duration: Duration::from_secs(5),
        sample_every: 1_000_000,
        json: false,
    };
    let load = tokio::spawn(loadgen::run(args));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    r.kill9();
    let report = load
        .await
        .unwrap()
        .expect("a report, though the server died");
    let acked = report.phases[0].spans_acked;
    assert!(acked > 0, "load was acknowledged before the kill");

    let r = Reckon::spawn(&data, &log.with_extension("2.log")).await;
    // The restarted engine rewrites every verdict behind; wait for the report to cover them.
    let began = Instant::now();
    let stored = loop {
        let (code, rep) = api_get(&r, "/api/v1/report").await;
        assert_eq!(code, 200, "{rep}");
        let stored = rep["attempts"].as_u64().unwrap();
        if stored >= acked || began.elapsed() > Duration::from_secs(20) {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("{acked} spans acknowledged before SIGKILL, {stored} attempts after the restart");
    assert!(
        stored >= acked,
        "{acked} spans acknowledged before SIGKILL, {stored} attempts after the restart"
    );
    drop(r);
}
