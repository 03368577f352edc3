//! Acceptance tests for the audit's truth rules, end to end: DESIGN.md "Evidence attribution"
//! (rule 3: a read-back's provisional link is a lead, not proof; rule 1: object identity is
//! kind and id), the `no_idempotency_contract` and `resend_after_terminal` triggers, and the
//! paragraph under "Findings" on event time: a high or critical finding that holds after any
//! prefix of the intent's evidence in event time opens an escalation, whatever the batching, a
//! deadline finding holds after a prefix only if its deadline passed before the next event, and
//! an escalation whose findings late-but-earlier evidence shows never held is `withdrawn`.
//!
//! Everything goes through a running reckon: spans through the real `opentelemetry-otlp`
//! exporters (gRPC and HTTP/protobuf), records through `POST /api/v1/records`, refunds through
//! signed Stripe webhooks, verdicts and escalations read back over the API. The server runs the
//! repository's contracts plus a wire-transfer tool with no idempotency contract
//! (`send_wire`, [`WIRE_CONTRACT`]), from a contracts directory of the test's own.
//!
//! Where a case is judged by comparing two deliveries of the same evidence, both are reduced to
//! an [`Outcome`] (state, decision, sorted finding kinds, the escalation's status and sorted
//! finding kinds) and compared whole. Each test collects every expectation that failed
//! ([`Checks`]) and reports them together, with the verdicts, so one run says everything that
//! is still wrong.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::{json, Value};

use super::support::*;

const R: &str = "issue_refund";
const D: &str = "create_bill_draft";
const WIRE: &str = "send_wire";

/// A wire-transfer tool whose bank accepts no idempotency key: every send is a new wire.
const WIRE_CONTRACT: &str = r#"
[[contract]]
name = "payments.wire"
tools = ["send_wire"]
record_kind = "wire"
idempotency = "none"
max_in_flight = "60s"
unknown_deadline = "15m"
pending_deadline = "2h"
# Room for a resend: these tests are about what the resend proves, not the retry budget.
max_attempts = 3
success_states = ["succeeded"]
failure_states = ["failed", "returned"]
pending_states = ["pending"]
not_executed_status = [400, 401, 403, 404, 422, 429]
conflict_status = [409]
orphan_grace = "10m"

[contract.params]
amount = "/amount"
currency = "/currency"
target = "/beneficiary"
"#;

/// The repository's contracts and [`WIRE_CONTRACT`], in a directory under `root`.
fn contracts_dir(root: &Path) -> PathBuf {
    let dir = root.join("contracts");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(repo_contracts()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(dir.join("wires.toml"), WIRE_CONTRACT).unwrap();
    dir
}

/// reckon on this binary's store with [`contracts_dir`].
async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.contracts_dir = contracts_dir(dir.path());
    Server::start_with(dir, config).await
}

// ------------------------------------------------------------------ evidence

fn refund(start: SystemTime, secs: f64, intent: &str, key: &str) -> ToolSpan {
    ToolSpan::new(R, start, secs)
        .intent(intent)
        .key(key)
        .args(refund_args("45.00"))
}

fn wire(start: SystemTime, secs: f64, intent: &str) -> ToolSpan {
    ToolSpan::new(WIRE, start, secs).intent(intent).args(
        r#"{"beneficiary":"DE89370400440532013000","amount":2500.00,"currency":"EUR"}"#.into(),
    )
}

/// A refund of 45.00 USD on order 1042 as the payments system reports it through the records
/// API; `intent` and `key` only where the downstream knows them.
fn refund_record(
    object: &str,
    intent: Option<&str>,
    key: Option<&str>,
    status: &str,
    observed: SystemTime,
) -> Value {
    let mut r = json!({"kind": "refund", "object_id": object, "status": status,
        "amount": "45.00", "currency": "usd", "target": "1042",
        "observed_at": rfc3339(observed), "source": "payments"});
    if let Some(i) = intent {
        r["intent_id"] = json!(i);
    }
    if let Some(k) = key {
        r["idempotency_key"] = json!(k);
    }
    r
}

fn wire_record(object: &str, intent: &str, status: &str, observed: SystemTime) -> Value {
    json!({"kind": "wire", "object_id": object, "intent_id": intent, "status": status,
        "amount": "2500.00", "currency": "EUR", "target": "DE89370400440532013000",
        "observed_at": rfc3339(observed), "source": "bank"})
}

// ------------------------------------------------------------------ outcomes

/// A verdict and its escalation reduced to what two deliveries of one evidence must agree on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Outcome {
    state: String,
    decision: String,
    findings: Vec<String>,
    /// The escalation the verdict names (`escalation_id`): its status and finding kinds.
    escalation: Option<(String, Vec<String>)>,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |k: &[String]| {
            if k.is_empty() {
                "-".to_string()
            } else {
                k.join(", ")
            }
        };
        write!(
            f,
            "{} / {} / {} | ",
            self.state,
            self.decision,
            list(&self.findings)
        )?;
        match &self.escalation {
            None => write!(f, "no escalation"),
            Some((status, kinds)) => write!(f, "escalation {status}: {}", list(kinds)),
        }
    }
}

fn kinds(findings: &Value) -> Vec<String> {
    let mut k: Vec<String> = findings
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["kind"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    k.sort();
    k.dedup();
    k
}

/// The escalation `GET /api/v1/escalations/{id}` returns.
async fn escalation(s: &Server, id: &str) -> Value {
    let (code, body) = s.get(&format!("/api/v1/escalations/{id}")).await;
    assert_eq!(code, 200, "GET /api/v1/escalations/{id}: {body}");
    body
}

/// The intent's [`Outcome`], and its verdict document for messages.
async fn outcome(s: &Server, intent: &str) -> (Outcome, Value) {
    let v = s.verdict(intent).await;
    let escalation = match v["escalation_id"].as_str() {
        Some(id) => {
            let e = escalation(s, id).await;
            Some((
                e["status"].as_str().unwrap_or("?").to_string(),
                kinds(&e["findings"]),
            ))
        }
        None => None,
    };
    let o = Outcome {
        state: v["state"].as_str().unwrap_or("?").to_string(),
        decision: v["decision"].as_str().unwrap_or("?").to_string(),
        findings: kinds(&v["findings"]),
        escalation,
    };
    (o, v)
}

/// `state / decision / findings | no escalation` or `... | escalation STATUS: findings`, with
/// finding lists sorted, as [`Outcome`] displays.
fn normalize(expected: &str) -> String {
    let (verdict, esc) = expected
        .split_once(" | ")
        .unwrap_or_else(|| panic!("expectation needs ` | `: {expected}"));
    let esc = esc.trim();
    let esc = match esc.split_once(':') {
        None => esc.to_string(),
        Some((head, list)) => {
            let mut k: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty() && *k != "-")
                .collect();
            k.sort();
            let list = if k.is_empty() {
                "-".to_string()
            } else {
                k.join(", ")
            };
            format!("{}: {list}", head.trim())
        }
    };
    format!("{} | {esc}", normalize_expectation(verdict))
}

/// Expectations gathered over a test, reported together at its end.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    /// The outcome reads `expected` (see [`normalize`]).
    fn outcome(&mut self, step: &str, actual: &(Outcome, Value), expected: &str) {
        let expected = normalize(expected);
        let got = actual.0.to_string();
        if got != expected {
            self.0.push(format!(
                "{step}:\n    expected {expected}\n    actual   {got}\n    verdict {}",
                compact(&actual.1)
            ));
        }
    }

    fn that(&mut self, step: &str, ok: bool, detail: impl fmt::Display) {
        if !ok {
            self.0.push(format!("{step}: {detail}"));
        }
    }

    /// The same evidence delivered two ways reduces to the same outcome.
    fn same(&mut self, step: &str, a: &(Outcome, Value), b: &(Outcome, Value)) {
        if a.0 != b.0 {
            self.0.push(format!(
                "{step}: the deliveries disagree\n    one way   {}\n    other way {}\n    verdicts {}\n             {}",
                a.0,
                b.0,
                compact(&a.1),
                compact(&b.1)
            ));
        }
    }

    #[track_caller]
    fn done(self) {
        if !self.0.is_empty() {
            panic!(
                "{} expectation(s) failed:\n\n{}",
                self.0.len(),
                self.0.join("\n\n")
            );
        }
    }
}

/// The parts of a verdict a failure message needs.
fn compact(v: &Value) -> String {
    let attempts: Vec<String> = v["attempts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|a| format!("{}{}", a["class"], a["object_id"]))
                .collect()
        })
        .unwrap_or_default();
    let objects: Vec<String> = v["objects"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| format!("{}={}", o["object_id"], o["status"]))
                .collect()
        })
        .unwrap_or_default();
    let findings: Vec<String> = v["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| format!("{}({})", f["kind"], f["detail"]))
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{{state: {}, decision: {}, attempts: [{}], objects: [{}], findings: [{}], escalation_id: {}}}",
        v["state"],
        v["decision"],
        attempts.join(", "),
        objects.join(", "),
        findings.join(", "),
        v["escalation_id"]
    )
}

fn object_statuses(v: &Value) -> Vec<(String, String)> {
    v["objects"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| {
                    (
                        o["object_id"].as_str().unwrap_or("?").to_string(),
                        o["status"].as_str().unwrap_or("?").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

// ------------------------------------------------------------------ 1, 2: read-backs

/// Case 1. The intent's own refund (its key, its intent id) goes pending, then failed. An
/// order-wide read-back lists someone else's refund of the same amount on the same order, which
/// nobody claims (no intent id, no key) and which succeeded. That listing is a provisional link:
/// it never makes the reader completed and never outranks the object the reader owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readback_listing_an_unowned_success_never_completes_a_failed_refund() {
    let s = start().await;
    let mut c = Checks::default();
    let (i, k, re, other) = (unique("int"), unique("k"), unique("re"), unique("re"));
    let t0 = ago(12.0 * MIN);

    export_grpc(
        &s,
        &[&refund(t0, 0.5, &i, &k)
            .http(200)
            .object(&re, "pending")
            .told("pending")],
    )
    .await;
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
    // Someone refunded 45.00 on order 1042 by hand: no intent, no key.
    s.records(&refund_record(
        &other,
        None,
        None,
        "succeeded",
        after(t0, 30.0),
    ))
    .await;
    // "Refunds for order 1042": the reader's own and the other.
    export_http(&s, &[&ToolSpan::read(&i, after(t0, 60.0), &[&re, &other])]).await;
    c.outcome(
        "own refund pending, read-back lists an unowned success",
        &outcome(&s, &i).await,
        "pending / wait / - | no escalation",
    );

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
    let end = outcome(&s, &i).await;
    c.outcome(
        "own refund failed",
        &end,
        "failed_after_execution / new_intent / - | no escalation",
    );
    c.that(
        "own refund failed",
        object_statuses(&end.1).contains(&(re.clone(), "failed".into())),
        format!(
            "the intent's own refund {re} is failed: {}",
            compact(&end.1)
        ),
    );
    c.done();
    s.stop().await;
}

/// Case 2. A timed-out send; a read-back lists a refund nobody claims that failed. That says
/// nothing about the reader's own refund: still unknown, and a same-key retry is safe while
/// the key is fresh. Then the intent's own refund is recorded succeeded: completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readback_listing_an_unowned_failure_leaves_a_timeout_unknown() {
    let s = start().await;
    let mut c = Checks::default();
    let (i, k, re, other) = (unique("int"), unique("k"), unique("re"), unique("re"));
    let t0 = ago(5.0 * MIN);

    export_grpc(&s, &[&refund(t0, 30.0, &i, &k).timeout().told("unknown")]).await;
    s.records(&refund_record(
        &other,
        None,
        None,
        "failed",
        after(t0, 35.0),
    ))
    .await;
    export_http(&s, &[&ToolSpan::read(&i, after(t0, 40.0), &[&other])]).await;
    let read = outcome(&s, &i).await;
    c.outcome(
        "timeout, read-back lists an unowned failed refund",
        &read,
        "unknown / retry_same_key / - | no escalation",
    );
    c.that(
        "timeout, read-back lists an unowned failed refund",
        read.1["safe_retry_until"] == rfc3339(after(t0, 23.0 * HOUR)).as_str(),
        format!(
            "safe_retry_until is first send + 24h - 1h, got {}",
            read.1["safe_retry_until"]
        ),
    );

    // The intent's own refund, by its intent id and key.
    s.records(&refund_record(
        &re,
        Some(&i),
        Some(&k),
        "succeeded",
        after(t0, 50.0),
    ))
    .await;
    let end = outcome(&s, &i).await;
    c.outcome(
        "own refund recorded succeeded",
        &end,
        "completed / none / - | no escalation",
    );
    c.that(
        "own refund recorded succeeded",
        object_statuses(&end.1).contains(&(re.clone(), "succeeded".into())),
        format!(
            "the intent's own refund {re} is listed succeeded: {}",
            compact(&end.1)
        ),
    );
    c.done();
    s.stop().await;
}

// ------------------------------------------------------------------ 3: no idempotency contract

/// Case 3. A wire (no idempotency contract) times out; a resend settles with a 2xx and a
/// succeeded object. The first send may have gone out too: `no_idempotency_contract` holds and
/// escalates, the same whether the two spans came in one export or one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_wire_settled_by_a_resend_escalates_however_the_spans_were_batched() {
    let s = start().await;
    let mut c = Checks::default();
    let t0 = ago(5.0 * MIN);
    let spans = |i: &str, w: &str| {
        [
            wire(t0, 30.0, i).timeout().told("unknown"),
            wire(after(t0, 35.0), 0.5, i)
                .http(200)
                .object(w, "succeeded")
                .told("succeeded"),
        ]
    };
    let (together, apart) = (unique("int"), unique("int"));
    let [a1, a2] = spans(&together, &unique("wire"));
    export_grpc(&s, &[&a1, &a2]).await;
    let [b1, b2] = spans(&apart, &unique("wire"));
    export_grpc(&s, &[&b1]).await;
    export_http(&s, &[&b2]).await;

    let expected =
        "completed / escalate / no_idempotency_contract | escalation open: no_idempotency_contract";
    let one = outcome(&s, &together).await;
    let two = outcome(&s, &apart).await;
    c.outcome("both spans in one export", &one, expected);
    c.outcome("the spans one at a time", &two, expected);
    c.same("one export vs one at a time", &one, &two);
    c.done();
    s.stop().await;
}

// ------------------------------------------------------------------ 4: concurrent duplicates

/// Case 4, the seed's concurrent-duplicates row in full: two concurrent sends with one key, one
/// gets 409; the loser retries its key and gets the saved success (the same object). A same-key
/// retry under `replay` inside the key's retention can make no second effect: no
/// `resend_after_terminal`, no findings at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_the_409_loser_retries_its_key_and_gets_the_saved_success() {
    let s = start().await;
    let mut c = Checks::default();
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    let t0 = ago(MIN);
    let winner = refund(t0, 2.0, &i, &k)
        .http(200)
        .object(&re, "succeeded")
        .told("succeeded");
    let loser = refund(after(t0, 0.1), 0.1, &i, &k)
        .http(409)
        .error("idempotency_key_in_use")
        .told("pending");
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
    // The loser waits and retries its key: the saved response of the winner's execution.
    let retry = refund(after(t0, 3.0), 0.3, &i, &k)
        .http(200)
        .object(&re, "succeeded")
        .told("succeeded");
    export_grpc(&s, &[&retry]).await;

    let end = outcome(&s, &i).await;
    c.outcome(
        "winner, 409 loser, loser's same-key retry",
        &end,
        "completed / none / - | no escalation",
    );
    c.that(
        "winner, 409 loser, loser's same-key retry",
        object_statuses(&end.1) == [(re.clone(), "succeeded".to_string())],
        format!("one object, {re}: {}", compact(&end.1)),
    );
    c.done();
    s.stop().await;
}

// ------------------------------------------------------------------ 5: 2xx with no object

/// Case 5. HTTP 200 and `reckon.outcome = succeeded` with no object id on the span (the response
/// named none); Stripe's webhook (metadata.intent_id, request.idempotency_key) confirms the
/// refund succeeded. Telling the model `succeeded` on a 2xx that named no object is no
/// contradiction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_told_on_a_2xx_without_an_object_is_confirmed_by_the_webhook() {
    let s = start().await;
    let mut c = Checks::default();
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    let t0 = ago(2.0 * MIN);
    export_grpc(&s, &[&refund(t0, 0.4, &i, &k).http(200).told("succeeded")]).await;
    let before = outcome(&s, &i).await;
    c.that(
        "2xx with no object, before the webhook",
        !before
            .0
            .findings
            .contains(&"misreported_outcome".to_string()),
        format!("no misreported_outcome: {}", before.0),
    );

    s.stripe(&stripe_event(
        "refund.updated",
        &i,
        &re,
        "succeeded",
        4500,
        Some(&k),
        after(t0, 0.3),
    ))
    .await;
    let end = outcome(&s, &i).await;
    c.outcome(
        "the webhook confirms it",
        &end,
        "completed / none / - | no escalation",
    );
    c.done();
    s.stop().await;
}

// ------------------------------------------------------------------ 6: two systems, one id

/// Case 6. The bookkeeping service and the payments system both number objects from 1001. The
/// bookkeeping reconciler posts draft 1001 without `kind`, naming the draft intent; refund 1001
/// carries the refund intent's key, and the refund intent's own response names 1001 too. Object
/// identity is (kind, id): each intent keeps its own object, and nothing is a mismatch. In both
/// arrival orders (the draft's evidence first, or the refund's), each on a server of its own
/// (both use the id 1001).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_systems_numbering_from_1001_each_keep_their_own_object() {
    let mut c = Checks::default();
    for draft_first in [true, false] {
        let order = if draft_first {
            "draft first"
        } else {
            "refund first"
        };
        let s = start().await;
        let (w, kw, r, kr) = (unique("draft"), unique("dk"), unique("refund"), unique("k"));
        let t0 = ago(10.0 * MIN);
        let draft_span = ToolSpan::new(D, t0, 0.3)
            .intent(&w)
            .key(&kw)
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("1001", "created");
        // The reconciler names the intent but not the kind.
        let draft_record = json!({"object_id": "1001", "intent_id": w, "status": "created",
            "amount": "120.00", "currency": "EUR", "target": "ACME",
            "observed_at": rfc3339(after(t0, 5.0)), "source": "bookkeeping"});
        let refund_span = refund(after(t0, 20.0), 0.4, &r, &kr)
            .http(200)
            .object("1001", "succeeded")
            .told("succeeded");
        // The payments system's refund 1001, created with the refund intent's key.
        let refund_rec = refund_record("1001", None, Some(&kr), "succeeded", after(t0, 20.3));

        if draft_first {
            export_grpc(&s, &[&draft_span]).await;
            s.records(&draft_record).await;
        }
        export_http(&s, &[&refund_span]).await;
        s.records(&refund_rec).await;
        if !draft_first {
            export_grpc(&s, &[&draft_span]).await;
            s.records(&draft_record).await;
        }

        let refund_end = outcome(&s, &r).await;
        let step = format!("{order}: the refund intent");
        c.outcome(&step, &refund_end, "completed / none / - | no escalation");
        c.that(
            &step,
            object_statuses(&refund_end.1) == [("1001".to_string(), "succeeded".to_string())]
                && refund_end.1["objects"][0]["amount"] == "45.00",
            format!(
                "its object is refund 1001, succeeded, 45.00: {}",
                refund_end.1["objects"]
            ),
        );
        let draft_end = outcome(&s, &w).await;
        let step = format!("{order}: the draft intent");
        c.outcome(&step, &draft_end, "completed / none / - | no escalation");
        c.that(
            &step,
            object_statuses(&draft_end.1) == [("1001".to_string(), "created".to_string())]
                && draft_end.1["objects"][0]["amount"] == "120.00",
            format!(
                "its object is draft 1001, created, 120.00: {}",
                draft_end.1["objects"]
            ),
        );
        s.stop().await;
    }
    c.done();
}

// ------------------------------------------------------------------ 7: deadlines in event time

/// Case 7, the evidence read at once. A timeout and its object's record 12 s later, both an
/// hour old when reckon reads them (the unknown deadline, 15 min, long past): in event time the
/// intent was unknown for 12 s, so it never escalates. The record and the span cannot share one
/// request, so "together" is the record first and the span straight after (the span first is
/// the two-step case below); and the same evidence with the object named by a same-key retry
/// 12 s later instead, both spans in one export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_and_its_record_12s_later_read_an_hour_late_never_escalate() {
    let s = start().await;
    let mut c = Checks::default();
    let t0 = ago(HOUR);

    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    s.records(&refund_record(
        &re,
        Some(&i),
        Some(&k),
        "succeeded",
        after(t0, 42.0),
    ))
    .await;
    export_grpc(&s, &[&refund(t0, 30.0, &i, &k).timeout().told("unknown")]).await;
    c.outcome(
        "record then timeout, an hour late",
        &outcome(&s, &i).await,
        "completed / none / - | no escalation",
    );

    let (j, kj, rej) = (unique("int"), unique("k"), unique("re"));
    let lost = refund(t0, 30.0, &j, &kj).timeout().told("unknown");
    let retry = refund(after(t0, 42.0), 0.3, &j, &kj)
        .http(200)
        .object(&rej, "succeeded")
        .told("succeeded");
    export_http(&s, &[&lost, &retry]).await;
    c.outcome(
        "timeout and same-key retry in one export, an hour late",
        &outcome(&s, &j).await,
        "completed / none / - | no escalation",
    );
    c.done();
    s.stop().await;
}

/// Case 7 in two steps. The timeout alone, read an hour late, is past its deadline:
/// `unresolved_unknown` opens an escalation. Then the record arrives, observed 12 s after the
/// timeout: the finding never held in event time and nobody claimed the escalation, so it is
/// `withdrawn` (keeping the findings that opened it), and the intent is completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_record_12s_after_the_timeout_withdraws_its_unresolved_unknown_escalation() {
    let s = start().await;
    let mut c = Checks::default();
    let (i, k, re) = (unique("int"), unique("k"), unique("re"));
    let t0 = ago(HOUR);
    export_grpc(&s, &[&refund(t0, 30.0, &i, &k).timeout().told("unknown")]).await;
    let first = outcome(&s, &i).await;
    c.outcome(
        "the timeout alone, an hour late",
        &first,
        "unknown / escalate / unresolved_unknown | escalation open: unresolved_unknown",
    );
    let id = first.1["escalation_id"].as_str().map(String::from);

    // Observed 12 s after the timeout ended.
    s.records(&refund_record(
        &re,
        Some(&i),
        Some(&k),
        "succeeded",
        after(t0, 42.0),
    ))
    .await;
    // The verdict's own line; the escalation is read by its id (DESIGN.md does not say whether
    // the verdict keeps naming a withdrawn escalation, as it keeps naming a resolved one).
    let v = s.verdict(&i).await;
    c.that(
        "the record 12 s after the timeout",
        summary(&v) == "completed / none / -",
        format!(
            "expected completed / none / -, got {}: {}",
            summary(&v),
            compact(&v)
        ),
    );
    if let Some(id) = id {
        let e = escalation(&s, &id).await;
        let got = format!("{} {:?}", e["status"], kinds(&e["findings"]));
        c.that(
            "GET /api/v1/escalations/{id}",
            got == r#""withdrawn" ["unresolved_unknown"]"#,
            format!(
                "status withdrawn, keeping the finding that opened it (unresolved_unknown); got {got}"
            ),
        );
        let (code, body) = s.get("/api/v1/escalations?status=withdrawn").await;
        let listed = body["items"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["id"] == id.as_str()));
        c.that(
            "GET /api/v1/escalations?status=withdrawn",
            code == 200 && listed,
            format!("lists {id}: {code} {body}"),
        );
        c.that(
            "GET /api/v1/escalations?status=open",
            s.escalation_of(&i, "open").await.is_none(),
            "no longer listed open",
        );
    }
    c.done();
    s.stop().await;
}

// ------------------------------------------------------------------ 8, 9: findings after a prefix

/// Case 8. Under `replay`, two replayed 502s and then the 200, one key. After the two 502s
/// `replayed_server_error` held (the outcome was open), so the escalation opens whether the
/// three spans came one at a time or in one export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replayed_502s_before_the_200_escalate_however_the_spans_were_batched() {
    let s = start().await;
    let mut c = Checks::default();
    let t0 = ago(5.0 * MIN);
    let spans = |i: &str, k: &str, re: &str| {
        [
            refund(t0, 0.5, i, k).http(502).told("unknown"),
            refund(after(t0, 3.0), 0.5, i, k).http(502).told("unknown"),
            refund(after(t0, 8.0), 0.4, i, k)
                .http(200)
                .object(re, "succeeded")
                .told("succeeded"),
        ]
    };
    let (together, apart) = (unique("int"), unique("int"));
    let [a1, a2, a3] = spans(&together, &unique("k"), &unique("re"));
    export_grpc(&s, &[&a1, &a2, &a3]).await;
    let [b1, b2, b3] = spans(&apart, &unique("k"), &unique("re"));
    export_grpc(&s, &[&b1]).await;
    export_http(&s, &[&b2]).await;
    export_grpc(&s, &[&b3]).await;

    let one = outcome(&s, &together).await;
    let three = outcome(&s, &apart).await;
    for (how, o) in [("one export", &one), ("one at a time", &three)] {
        c.that(
            how,
            o.0.decision == "escalate"
                && o.0.escalation == Some(("open".into(), vec!["replayed_server_error".into()])),
            format!(
                "decision escalate, escalation open: replayed_server_error; got {}",
                o.0
            ),
        );
    }
    c.same("one export vs one at a time", &one, &three);
    c.done();
    s.stop().await;
}

/// Case 9. A tool with no idempotency contract sent twice: two wires, both live (pending), until
/// a record marks one failed. Before that record `duplicate_effect` held, so the escalation
/// exists whether the record came after the spans or first, with both spans in one export
/// after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_live_wires_escalate_as_duplicates_whether_the_failure_record_comes_after_or_first() {
    let s = start().await;
    let mut c = Checks::default();
    let t0 = ago(5.0 * MIN);
    let spans = |i: &str, w1: &str, w2: &str| {
        [
            wire(t0, 0.5, i)
                .http(200)
                .object(w1, "pending")
                .told("pending"),
            wire(after(t0, 20.0), 0.5, i)
                .http(200)
                .object(w2, "pending")
                .told("pending"),
        ]
    };

    let (after_spans, first) = (unique("int"), unique("int"));
    let (a_w1, a_w2) = (unique("wire"), unique("wire"));
    let [a1, a2] = spans(&after_spans, &a_w1, &a_w2);
    export_grpc(&s, &[&a1, &a2]).await;
    s.records(&wire_record(&a_w1, &after_spans, "failed", after(t0, 60.0)))
        .await;

    let (b_w1, b_w2) = (unique("wire"), unique("wire"));
    s.records(&wire_record(&b_w1, &first, "failed", after(t0, 60.0)))
        .await;
    let [b1, b2] = spans(&first, &b_w1, &b_w2);
    export_http(&s, &[&b1, &b2]).await;

    let late = outcome(&s, &after_spans).await;
    let early = outcome(&s, &first).await;
    for (how, o) in [
        ("record after the spans", &late),
        ("record first, then both spans", &early),
    ] {
        let escalated = o.0.decision == "escalate"
            && o.0
                .escalation
                .as_ref()
                .is_some_and(|(st, k)| st == "open" && k.contains(&"duplicate_effect".into()));
        c.that(
            how,
            escalated,
            format!(
                "decision escalate, an open escalation with duplicate_effect; got {}",
                o.0
            ),
        );
    }
    c.same("record after vs record first", &late, &early);
    c.done();
    s.stop().await;
}
