//! Edges an adversarial review probed: converge contracts, 409 conflicts under shared keys,
//! intents that use two contracted tools, escalations after a resolution, currencies without
//! decimals and the key window's boundary. Each defect test has a passing control beside it;
//! the ignored ones are open, each saying why.

use super::support::*;
use reckon::audit::{self, Ledger};
use reckon::contract::{Contract, Contracts, Idempotency};
use reckon::escalation::EscalationBook;
use reckon::model::*;
use std::sync::Arc;

const R: &str = "issue_refund";
const R2: &str = "issue_refund_v2";

/// The refund contract as Stripe API v2 promises it: a same-key retry drives the key's
/// operation to completion and returns the updated result.
fn converging_refunds() -> Contract {
    let mut c = refunds();
    c.idempotency = Idempotency::Converge;
    c
}

/// A second refund tool on the same downstream (Stripe v2 endpoint beside v1): same record kind.
fn refunds_v2_tool() -> Contract {
    let mut c = refunds();
    c.name = "payments.refund_v2".into();
    c.tools = vec![R2.into()];
    c.idempotency = Idempotency::Converge;
    c
}

/// As `support::check`, under the given contracts; also every rotation and the reverse.
fn check_under(
    set: &Arc<Contracts>,
    name: &str,
    events: &[Event],
    intent: &str,
    now: Timestamp,
    expected: &str,
) -> Verdict {
    let v = verdict_under(set, events, intent, now).0;
    assert_eq!(
        summary(&v),
        normalize_expectation(expected),
        "scenario `{name}`, intent {intent}:\n{v:#?}"
    );
    for r in 0..events.len() {
        let mut rotated = events.to_vec();
        rotated.rotate_left(r);
        assert_eq!(
            verdict_under(set, &rotated, intent, now).0,
            v,
            "`{name}` rotated {r}"
        );
        rotated.reverse();
        rotated.extend(events.iter().cloned());
        assert_eq!(
            verdict_under(set, &rotated, intent, now).0,
            v,
            "`{name}` reversed {r}"
        );
    }
    v
}

fn converge_set() -> Arc<Contracts> {
    Arc::new(Contracts::new(vec![
        converging_refunds(),
        drafts(),
        email(),
    ]))
}

fn two_tool_set() -> Arc<Contracts> {
    Arc::new(Contracts::new(vec![
        refunds(),
        refunds_v2_tool(),
        drafts(),
        email(),
    ]))
}

// ------------------------------------------------------------------------------------------
// Converge: a later sender of a shared key.

/// Control: under converge, with the downstream's record of the key's refund in, the refund is
/// the first executing sender's (rule 2), and B, the later sender, is not completed by it.
#[test]
fn control_converge_shared_key_with_a_record_of_the_key() {
    let set = converge_set();
    let events = [
        ev(timed_out("A", 0.0, "k-shared", "45.00")),
        ev(refund("B", 10.0, "k-shared", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 12.0, 4500, "usd"),
            "k-shared",
        )),
    ];
    let b = check_under(
        &set,
        "converge, record carries the key",
        &events,
        "B",
        at(2.0 * MIN),
        "unknown / escalate / key_shared_across_intents",
    );
    assert!(object_ids(&b).is_empty(), "{b:#?}");
    check_under(
        &set,
        "converge, record carries the key: A",
        &events,
        "A",
        at(2.0 * MIN),
        "completed / escalate / key_shared_across_intents",
    );
}

/// Defect: the same history before the downstream's record arrives. B's same-key request under
/// converge returned the key's one operation (A sent the key first and its send executed): the
/// refund was created with A's key, so it is A's (rule 2), exactly as it is once the record
/// carrying the key comes in. The audit gives it to B, as the intent "whose write response
/// returned it", and calls B's refund `completed` on A's refund; the record then flips it.
#[test]
fn converge_later_sender_of_a_shared_key_is_not_completed_by_the_first_senders_refund() {
    let set = converge_set();
    let events = [
        ev(timed_out("A", 0.0, "k-shared", "45.00")),
        ev(refund("B", 10.0, "k-shared", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
    ];
    let b = check_under(
        &set,
        "converge, response only",
        &events,
        "B",
        at(2.0 * MIN),
        "unknown / escalate / key_shared_across_intents",
    );
    assert!(
        object_ids(&b).is_empty(),
        "re_1 was made with A's key: {b:#?}"
    );
}

// ------------------------------------------------------------------------------------------
// 409 under a shared key.

fn conflicted(intent: &str, start: f64, key: &str) -> Attempt {
    attempt(intent, R, start, 0.1)
        .key(key)
        .args(refund_args("45.00"))
        .http(409)
        .error("idempotency_key_in_use")
}

/// Control: the intent whose send executed first sent first; the other got the 409. The refund
/// made with the key is the executing sender's.
#[test]
fn control_409_after_the_executing_send_of_a_shared_key() {
    let set = Arc::new(contracts());
    let events = [
        ev(timed_out("B", 0.0, "k-shared", "45.00")),
        ev(conflicted("A", 0.05, "k-shared")),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 12.0, 4500, "usd"),
            "k-shared",
        )),
    ];
    let a = check_under(
        &set,
        "A got the 409",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / escalate / key_shared_across_intents",
    );
    assert!(object_ids(&a).is_empty(), "{a:#?}");
    check_under(
        &set,
        "B executed",
        &events,
        "B",
        at(2.0 * MIN),
        "completed / escalate / key_shared_across_intents",
    );
}

/// Defect: seed row "concurrent duplicates, same key, one 409" across two intents that share a
/// key (a careless executor). Both send at the same instant; A's request is refused with a 409
/// (another request with the key was executing: "One executes; the other gets a conflict",
/// not saved, "no API endpoint initiates the execution"), B's executes and times out. The refund
/// made with the key is B's. The audit counts A's 409 as the key's first execution (it sorts
/// first: same start, earlier end) and gives A the refund: A `completed` on a refund its send
/// never made, B left without it.
#[test]
fn a_409_send_does_not_make_its_intent_the_owner_of_a_shared_keys_refund() {
    let set = Arc::new(contracts());
    let events = [
        ev(conflicted("A", 0.0, "k-shared")),
        ev(timed_out("B", 0.0, "k-shared", "45.00")),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 12.0, 4500, "usd"),
            "k-shared",
        )),
    ];
    let b = verdict_under(&set, &events, "B", at(2.0 * MIN)).0;
    let a = verdict_under(&set, &events, "A", at(2.0 * MIN)).0;
    assert_eq!(
        (summary(&a), object_ids(&a)),
        (
            normalize_expectation("unknown / escalate / key_shared_across_intents"),
            vec![]
        ),
        "A's send got a 409 and executed nothing:\nA {a:#?}\nB {b:#?}"
    );
    assert_eq!(
        summary(&b),
        normalize_expectation("completed / escalate / key_shared_across_intents"),
        "{b:#?}"
    );
}

// ------------------------------------------------------------------------------------------
// One intent, two contracted tools.

/// Control: the executor retries a timed-out refund under a new key with the same tool, and
/// the retry returns a succeeded refund: completed, and the new key is a high finding.
#[test]
fn control_new_key_retry_with_the_same_tool() {
    let set = two_tool_set();
    let events = [
        ev(timed_out("A", 0.0, "k1", "45.00")),
        ev(attempt("A", R, 90.0, 0.4)
            .key("k2")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_2", "succeeded")),
    ];
    check_under(
        &set,
        "same tool",
        &events,
        "A",
        at(3.0 * MIN),
        "completed / escalate / new_key_retry",
    );
}

/// The same retry sent through the downstream's second contracted refund tool (its v2
/// endpoint; both contracts' record kind is `refund`). Both spans are audited tool spans of
/// intent A ("A tool span is audited when its tool name matches a contract"): two sends under
/// two keys, new_key_retry, and re_2 is A's refund. (The audit used to keep only the sends of
/// the first tool's contract, as if the second were a wrapper span, and saw one timed-out send
/// and no refund: `unknown / retry_same_key`, inviting a second refund under k1 while re_2
/// existed.)
#[test]
fn a_retry_through_a_second_contracted_tool_is_a_send_of_the_intent() {
    let set = two_tool_set();
    let events = [
        ev(timed_out("A", 0.0, "k1", "45.00")),
        ev(attempt("A", R2, 90.0, 0.4)
            .key("k2")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_2", "succeeded")),
    ];
    let v = check_under(
        &set,
        "second tool",
        &events,
        "A",
        at(3.0 * MIN),
        "completed / escalate / new_key_retry",
    );
    assert_eq!(object_ids(&v), ["re_2"]);
}

// ------------------------------------------------------------------------------------------
// Replay: a second refund of A's, seen only as a saved response replayed to B.

/// Control: A refunds under k1 (re_1), then carelessly resends under kS, a key B also uses;
/// the kS send times out but made re_2, which the downstream's record (carrying kS) shows.
/// Two live refunds linked to A by its keys: duplicate_effect.
#[test]
fn control_second_refund_of_a_shared_key_seen_in_a_record() {
    let set = Arc::new(contracts());
    let events = [
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        ev(timed_out("A", 60.0, "kS", "45.00")),
        ev(refund("B", 120.0, "kS", "45.00")
            .http(200)
            .object("re_2", "succeeded")),
        ev(with_key(
            stripe_refund(None, "re_2", "succeeded", 62.0, 4500, "usd"),
            "kS",
        )),
    ];
    let a = check_under(
        &set,
        "record of re_2",
        &events,
        "A",
        at(5.0 * MIN),
        "completed / escalate / duplicate_effect, key_shared_across_intents, new_key_retry, \
         resend_after_terminal",
    );
    assert_eq!(object_ids(&a), ["re_1", "re_2"]);
}

/// Defect: the same before the record arrives. B's kS request came back 200 with re_2: under
/// replay that is the saved response of kS's first execution, A's send (rule 4: "the later
/// intent's responses are the earlier intent's saved responses"; rule 5). The ledger itself
/// makes A the owner of re_2 (`owner`: replayed key -> first to execute), yet A's history never
/// takes re_2 in (its candidates are its own responses, records of its keys, its reads), so A's
/// verdict shows one refund and no duplicate_effect: the critical finding is missed while
/// re_2 is known to be A's second refund.
#[test]
fn a_second_refund_replayed_to_another_sender_of_its_key_is_a_duplicate_effect() {
    let set = Arc::new(contracts());
    let events = [
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        ev(timed_out("A", 60.0, "kS", "45.00")),
        ev(refund("B", 120.0, "kS", "45.00")
            .http(200)
            .object("re_2", "succeeded")),
    ];
    // B is not completed by it (the fix of the previous hunt): the control of the point.
    check_under(
        &set,
        "B",
        &events,
        "B",
        at(5.0 * MIN),
        "unknown / escalate / key_shared_across_intents",
    );
    let a = check_under(
        &set,
        "re_2 only as B's replayed response",
        &events,
        "A",
        at(5.0 * MIN),
        "completed / escalate / duplicate_effect, key_shared_across_intents, new_key_retry, \
         resend_after_terminal",
    );
    assert_eq!(object_ids(&a), ["re_1", "re_2"]);
}

// ------------------------------------------------------------------------------------------
// After a resolution.

fn step(book: &mut EscalationBook, events: &[Event], intent: &str, now: Timestamp) -> Verdict {
    let set = Arc::new(contracts());
    let mut ledger = Ledger::with_contracts(set.clone());
    for e in events {
        ledger.add(e.clone());
    }
    let h = ledger.history(intent).expect("intent");
    let mut v = audit::audit(&h, Ledger::contract_for(&h, &set), now);
    book.observe(&v);
    book.apply(&mut v);
    v
}

fn resolve(book: &mut EscalationBook, v: &Verdict, now: Timestamp) {
    let id = book.open_for(&v.intent_id).expect("open").id.clone();
    book.resolve(&id, "ana", "checked", None, now, Some(v))
        .expect("resolves");
}

/// Two timed-out sends under two keys (new_key_retry), resolved by a person. Shared by the
/// control and the defect.
fn two_keys_resolved() -> (EscalationBook, Vec<Event>) {
    let mut book = EscalationBook::new();
    let events = vec![
        ev(timed_out("A", 0.0, "k1", "45.00")),
        ev(timed_out("A", 40.0, "k2", "45.00")),
    ];
    let v = step(&mut book, &events, "A", at(2.0 * MIN));
    assert_eq!(v.decision, Decision::Escalate);
    resolve(&mut book, &v, at(3.0 * MIN));
    let v = step(&mut book, &events, "A", at(4.0 * MIN));
    assert_eq!(v.decision, Decision::None);
    (book, events)
}

/// Control: after the resolution, a second refund appears (both keys executed): a new object
/// that brings a critical finding opens a new escalation.
#[test]
fn control_a_second_refund_after_resolution_escalates_again() {
    let (mut book, mut events) = two_keys_resolved();
    events.push(ev(stripe_refund(
        Some("A"),
        "re_1",
        "succeeded",
        5.0 * MIN,
        4500,
        "usd",
    )));
    events.push(ev(stripe_refund(
        Some("A"),
        "re_2",
        "succeeded",
        5.0 * MIN,
        4500,
        "usd",
    )));
    let v = step(&mut book, &events, "A", at(6.0 * MIN));
    assert!(v
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::DuplicateEffect));
    assert!(book.open_for("A").is_some());
    assert_eq!(v.decision, Decision::Escalate);
}

/// After the resolution, the one refund the person waited for arrives: re_1,
/// succeeded, for the intended amount. It brings no high or critical finding (the verdict's
/// only one, new_key_retry on k2, is from the attempts the person saw and resolved). DESIGN:
/// "a new attempt or object after it that brings a high or critical finding ... opens a new
/// escalation. After a resolution the decision is `none` until new evidence arrives"; with the
/// new evidence the intent is `completed` and its decision `none`. (The book used to open a
/// second escalation because a new object arrived beside an old high finding: a false page. A
/// new *send* beside an old finding still reopens: `an_email_timing_out_again_after_a_resolution_escalates_again`.)
#[test]
fn the_awaited_refund_after_a_resolution_asks_nobody_again() {
    let (mut book, mut events) = two_keys_resolved();
    events.push(ev(stripe_refund(
        Some("A"),
        "re_1",
        "succeeded",
        5.0 * MIN,
        4500,
        "usd",
    )));
    let v = step(&mut book, &events, "A", at(6.0 * MIN));
    assert_eq!(v.state, IntentState::Completed);
    assert!(
        v.findings
            .iter()
            .all(|f| f.kind == FindingKind::NewKeyRetry),
        "{:?}",
        v.findings
    );
    assert!(
        book.open_for("A").is_none(),
        "a second escalation for the refund that settled it: {:?}",
        book.open_for("A")
    );
    assert_eq!(v.decision, Decision::None);
}

/// An email send that timed out (no idempotency contract: high at once), resolved by a person
/// at 2 min. Shared by the control and the defect.
fn email_resolved() -> (EscalationBook, Vec<Event>) {
    let mut book = EscalationBook::new();
    let events = vec![ev(attempt("E", "send_email", 0.0, 30.0).timeout())];
    let v = step(&mut book, &events, "E", at(MIN));
    assert_eq!(v.decision, Decision::Escalate);
    resolve(&mut book, &v, at(2.0 * MIN));
    (book, events)
}

/// Control: before the unknown deadline, nothing new: the decision stays `none`.
#[test]
fn control_after_resolution_no_new_evidence_before_the_deadline() {
    let (mut book, events) = email_resolved();
    let v = step(&mut book, &events, "E", at(10.0 * MIN));
    assert_eq!(v.decision, Decision::None);
    assert!(book.open_for("E").is_none());
}

/// No new event at all, only time: at first unknown + unknown_deadline the verdict
/// gains unresolved_unknown (high) about the very timeout the person resolved. DESIGN: "A
/// resolution covers the evidence it saw: a new attempt or object after it that brings a high
/// or critical finding ... opens a new escalation. After a resolution the decision is `none`
/// until new evidence arrives." (The book used to open a second escalation with no new evidence,
/// for "a finding no escalation of the intent has held", and say `escalate`: the person was
/// asked again about what they settled.)
#[test]
fn after_a_resolution_a_deadline_alone_does_not_ask_a_person_again() {
    let (mut book, events) = email_resolved();
    let v = step(&mut book, &events, "E", at(20.0 * MIN));
    assert!(v
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::UnresolvedUnknown));
    assert!(
        book.open_for("E").is_none(),
        "reopened with no new evidence: {:?}",
        book.open_for("E")
    );
    assert_eq!(v.decision, Decision::None);
}

// ------------------------------------------------------------------------------------------
// Converge: a failed refund and a same-key retry still in flight.

fn failed_then_retry_in_flight() -> Vec<Event> {
    vec![
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "failed")),
        ev(stripe_refund(Some("A"), "re_1", "failed", 1.0, 4500, "usd")),
        ev(timed_out("A", 100.0, "k1", "45.00")),
    ]
}

/// Control: under replay the same-key retry can only replay the saved `failed`: the refund
/// failed after execution, and anything new is a new intent.
#[test]
fn control_replay_failed_refund_same_key_retry_in_flight() {
    let set = Arc::new(contracts());
    check_under(
        &set,
        "replay",
        &failed_then_retry_in_flight(),
        "A",
        at(140.0),
        "failed_after_execution / new_intent / -",
    );
}

/// Under converge ("retries failed or partially failed work to completion when possible") the
/// same-key retry sent at 100 s may still complete the key's refund until max_in_flight (60 s)
/// has passed. DESIGN: `wait` when "the original may still commit"; `new_intent` (as the
/// audit said before) told the executor to start a second refund under a new key now, while
/// the first might still turn succeeded: two refunds.
#[test]
fn converge_failed_refund_with_a_same_key_retry_in_flight_says_wait() {
    let set = converge_set();
    let v = verdict_under(&set, &failed_then_retry_in_flight(), "A", at(140.0)).0;
    assert_eq!(v.decision, Decision::Wait, "{}", summary(&v));
}

/// Under replay, after the first refund failed the agent retried under a new key and that send
/// timed out: it may have made the refund the customer was owed. `new_intent` would start a
/// third send beside it, possibly a second refund. The new key escalates (a person decides
/// first); under that, the audit's own decision (what stands once the escalation is resolved
/// and new evidence arrives) waits while the send may still commit, then reads the downstream.
#[test]
fn a_failed_refund_with_a_new_key_retry_in_flight_is_not_a_new_intent_yet() {
    let set = Arc::new(contracts());
    let mut events = vec![
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "failed")),
        ev(timed_out("A", 100.0, "k2", "45.00")),
    ];
    let audited = |events: &[Event], now: Timestamp| {
        let mut ledger = Ledger::with_contracts(set.clone());
        for e in events {
            ledger.add(e.clone());
        }
        let h = ledger.history("A").expect("A");
        audit::audit(&h, Ledger::contract_for(&h, &set), now)
    };
    let in_flight = audited(&events, at(140.0));
    assert_eq!(
        (in_flight.state, in_flight.decision, in_flight.next_change),
        (
            IntentState::FailedAfterExecution,
            Decision::Wait,
            Some(at(160.0))
        )
    );
    let past = audited(&events, at(200.0));
    assert_eq!(past.decision, Decision::Reconcile);
    // Not settled: a late record is what it waits for, so retention keeps its raw events.
    assert_eq!(past.rest(), reckon::model::Rest::Quiet);
    check_under(
        &set,
        "escalated",
        &events,
        "A",
        at(140.0),
        "failed_after_execution / escalate / new_key_retry, resend_after_terminal",
    );
    // Its refund shows up: completed.
    events.push(ev(with_key(
        stripe_refund(Some("A"), "re_2", "succeeded", 101.0, 4500, "usd"),
        "k2",
    )));
    assert_eq!(audited(&events, at(200.0)).state, IntentState::Completed);
}

// ------------------------------------------------------------------------------------------
// Probes that held (kept as regression guards).

fn jpy_args(amount: &str) -> String {
    format!(r#"{{"order_id":"1042","amount":{amount},"currency":"JPY"}}"#)
}

#[test]
fn held_jpy_minor_units_are_major_units() {
    let set = Arc::new(contracts());
    for (args, minor, expected) in [
        ("5000", 5000, "completed / none / -"),
        ("\"5000\"", 5000, "completed / none / -"),
        ("5000.0", 5000, "completed / none / -"),
        ("5000", 500000, "unknown / escalate / effect_mismatch"),
    ] {
        let events = [
            ev(attempt("A", R, 0.0, 30.0)
                .key("k1")
                .args(jpy_args(args))
                .timeout()),
            ev(stripe_refund(
                Some("A"),
                "re_1",
                "succeeded",
                5.0,
                minor,
                "jpy",
            )),
        ];
        check_under(&set, args, &events, "A", at(2.0 * MIN), expected);
    }
}

#[test]
fn held_expired_key_retry_at_the_boundary() {
    let set = Arc::new(contracts());
    let edge = 23.0 * HOUR;
    let first = ev(timed_out("A", 0.0, "k1", "45.00"));
    // Just before: no finding; at the instant: the finding.
    let before = attempt_at(fresh_span(), "A", R, at(edge) + Dur(-1), at(edge + 30.0))
        .key("k1")
        .args(refund_args("45.00"))
        .timeout();
    let on = attempt_at(fresh_span(), "A", R, at(edge), at(edge + 30.0))
        .key("k1")
        .args(refund_args("45.00"))
        .timeout();
    check_under(
        &set,
        "before",
        &[first.clone(), ev(before)],
        "A",
        at(edge + 2.0 * MIN),
        "unknown / escalate / unresolved_unknown",
    );
    check_under(
        &set,
        "on",
        &[first.clone(), ev(on)],
        "A",
        at(edge + 2.0 * MIN),
        "unknown / escalate / expired_key_retry, unresolved_unknown",
    );
    // The decision: retry_same_key strictly before the edge, reconcile at it.
    let v = verdict_under(&set, std::slice::from_ref(&first), "A", at(edge) + Dur(-1)).0;
    assert_eq!(v.decision, Decision::Escalate, "unresolved_unknown by then");
    let mut lenient = refunds();
    lenient.unknown_deadline = Dur::hours(48);
    let set = Arc::new(Contracts::new(vec![lenient, drafts(), email()]));
    let v = verdict_under(&set, std::slice::from_ref(&first), "A", at(edge) + Dur(-1)).0;
    assert_eq!(v.decision, Decision::RetrySameKey);
    let v = verdict_under(&set, &[first], "A", at(edge)).0;
    assert_eq!(v.decision, Decision::Reconcile);
}

#[test]
fn held_replayed_server_error_then_a_record_of_success() {
    let set = Arc::new(contracts());
    let send = |start: f64| {
        ev(attempt("A", R, start, 0.3)
            .key("k1")
            .args(refund_args("45.00"))
            .http(500))
    };
    let mut events = vec![send(0.0), send(70.0)];
    let mut book = EscalationBook::new();
    let mut ledger = Ledger::with_contracts(set.clone());
    for e in &events {
        ledger.add(e.clone());
    }
    let h = ledger.history("A").unwrap();
    let mut v = audit::audit(&h, Ledger::contract_for(&h, &set), at(2.0 * MIN));
    book.observe(&v);
    book.apply(&mut v);
    assert_eq!(summary(&v), "unknown / escalate / replayed_server_error");
    events.push(ev(with_key(
        stripe_refund(None, "re_1", "succeeded", 0.2, 4500, "usd"),
        "k1",
    )));
    check_under(
        &set,
        "record shows success",
        &events,
        "A",
        at(3.0 * MIN),
        "completed / none / -",
    );
    // The record lies before both 500s in event time: the refund had succeeded before any
    // replayed error came back, so `replayed_server_error` never held. Nobody claimed the
    // escalation: it is withdrawn (DESIGN.md "Findings").
    ledger.add(events[2].clone());
    let h = ledger.history("A").unwrap();
    let mut v = audit::audit(&h, Ledger::contract_for(&h, &set), at(3.0 * MIN));
    let withdrawn = book.observe(&v).expect("the escalation changes");
    book.apply(&mut v);
    assert_eq!(withdrawn.status, EscalationStatus::Withdrawn);
    assert_eq!(v.decision, Decision::None, "nobody is asked");
}

#[test]
fn held_three_senders_of_one_key_first_rejected_second_timed_out() {
    let set = Arc::new(contracts());
    let events = [
        ev(attempt("A", R, 0.0, 0.2)
            .key("kS")
            .args(refund_args("45.00"))
            .http(422)),
        ev(timed_out("B", 10.0, "kS", "45.00")),
        ev(refund("C", 50.0, "kS", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 12.0, 4500, "usd"),
            "kS",
        )),
    ];
    check_under(
        &set,
        "A",
        &events,
        "A",
        at(2.0 * MIN),
        "failed_before_execution / escalate / key_shared_across_intents",
    );
    let b = check_under(
        &set,
        "B",
        &events,
        "B",
        at(2.0 * MIN),
        "completed / escalate / key_shared_across_intents",
    );
    assert_eq!(object_ids(&b), ["re_1"]);
    let c = check_under(
        &set,
        "C",
        &events,
        "C",
        at(2.0 * MIN),
        "unknown / escalate / key_shared_across_intents",
    );
    assert!(object_ids(&c).is_empty());
}

#[test]
fn held_converge_same_key_retry_completes_failed_work() {
    let set = converge_set();
    let events = [
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "failed")),
        ev(refund("A", 60.0, "k1", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
    ];
    check_under(
        &set,
        "converge",
        &events,
        "A",
        at(3.0 * MIN),
        "completed / none / -",
    );
}

#[test]
fn held_one_409_with_a_pending_then_succeeded_record() {
    let set = Arc::new(contracts());
    let events = [
        ev(attempt("A", R, 0.0, 2.0)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "pending")),
        ev(conflicted("A", 0.0, "k1").told("failed")),
        ev(stripe_refund(
            Some("A"),
            "re_1",
            "pending",
            1.9,
            4500,
            "usd",
        )),
        ev(stripe_refund(
            Some("A"),
            "re_1",
            "succeeded",
            40.0,
            4500,
            "usd",
        )),
    ];
    check_under(
        &set,
        "409 + pending + succeeded",
        &events,
        "A",
        at(MIN),
        "completed / none / misreported_outcome",
    );
    check_under(
        &set,
        "409 + pending",
        &events[..3],
        "A",
        at(MIN),
        "pending / wait / misreported_outcome",
    );
}

#[test]
fn held_resend_at_the_instant_of_the_pending_response() {
    let set = Arc::new(contracts());
    let first = attempt_at(fresh_span(), "A", R, at(0.0), at(2.0))
        .key("k1")
        .args(refund_args("45.00"))
        .http(200)
        .object("re_1", "pending");
    let same = attempt_at(fresh_span(), "A", R, at(2.0), at(2.5))
        .key("k1")
        .args(refund_args("45.00"))
        .http(200)
        .object("re_1", "pending");
    let earlier = attempt_at(fresh_span(), "A", R, at(2.0) + Dur(-1), at(2.5))
        .key("k1")
        .args(refund_args("45.00"))
        .http(200)
        .object("re_1", "pending");
    check_under(
        &set,
        "same instant",
        &[ev(first.clone()), ev(same)],
        "A",
        at(MIN),
        "pending / wait / resend_while_pending",
    );
    check_under(
        &set,
        "a nanosecond before",
        &[ev(first), ev(earlier)],
        "A",
        at(MIN),
        "pending / wait / -",
    );
}
