//! DESIGN.md "Evidence attribution": which evidence belongs to which intent when intents share
//! an order, a key or a downstream. Each case is one history a real executor or downstream
//! produces; `check` also replays it reversed and re-sent.

use super::support::*;
use reckon::escalation::EscalationBook;
use reckon::model::*;

const R: &str = "issue_refund";

/// Stripe's record of a refund in major units on order 1042.
fn refund_record(intent: Option<&str>, object: &str, status: &str, at: f64, minor: i128) -> Event {
    ev(stripe_refund(intent, object, status, at, minor, "usd"))
}

#[test]
fn a_read_back_of_the_order_lists_another_intents_refund() {
    // Two intended refunds of 22.50 on order 1042. B succeeded; A timed out and never
    // committed; A's read-back "refunds for order 1042" lists B's refund.
    let events = [
        ev(timed_out("A", 0.0, "kA", "22.50")),
        ev(refund("B", 5.0, "kB", "22.50")
            .http(200)
            .object("re_B", "succeeded")),
        refund_record(Some("B"), "re_B", "succeeded", 5.5, 2250),
        ev(readback("A", "list_refunds", 90.0, &["re_B"])),
    ];
    let a = check(
        "A's read lists B's refund",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert!(object_ids(&a).is_empty(), "re_B is B's, never A's: {a:#?}");
    let b = check("B", &events, "B", at(2.0 * MIN), "completed / none / -");
    assert_eq!(object_ids(&b), ["re_B"]);
}

#[test]
fn a_read_back_listing_both_refunds_is_no_duplicate() {
    let events = [
        ev(timed_out("A", 0.0, "kA", "22.50")),
        refund_record(Some("A"), "re_A", "succeeded", 10.0, 2250),
        ev(refund("B", 5.0, "kB", "22.50")
            .http(200)
            .object("re_B", "succeeded")),
        refund_record(Some("B"), "re_B", "succeeded", 5.5, 2250),
        ev(readback("A", "list_refunds", 90.0, &["re_A", "re_B"])),
        ev(readback("B", "list_refunds", 95.0, &["re_A", "re_B"])),
    ];
    let a = check("A", &events, "A", at(5.0 * MIN), "completed / none / -");
    assert_eq!(object_ids(&a), ["re_A"]);
    let b = check("B", &events, "B", at(5.0 * MIN), "completed / none / -");
    assert_eq!(object_ids(&b), ["re_B"]);
}

#[test]
fn a_response_returning_an_object_names_its_owner_when_no_record_does() {
    // B's record has no intent id and no key yet, but B's own response returned it: B owns it,
    // and A's read of the order says nothing about A.
    let events = [
        ev(timed_out("A", 0.0, "kA", "22.50")),
        ev(refund("B", 5.0, "kB", "22.50")
            .http(200)
            .object("re_B", "succeeded")),
        refund_record(None, "re_B", "succeeded", 5.5, 2250),
        ev(readback("A", "list_refunds", 90.0, &["re_B"])),
    ];
    check(
        "A",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    check("B", &events, "B", at(2.0 * MIN), "completed / none / -");
}

#[test]
fn an_unowned_listed_object_links_provisionally_and_moves_to_its_owner() {
    let before = [
        ev(timed_out("A", 0.0, "kA", "22.50")),
        ev(readback("A", "list_refunds", 90.0, &["re_X"])),
        refund_record(None, "re_X", "succeeded", 60.0, 2250),
    ];
    // Nobody owns re_X yet: it is A's for now (a read that finds what A asked for), as a lead,
    // not proof (DESIGN.md "Evidence attribution" 3): A stays unknown, and a same-key retry is
    // what asks the downstream whose it is.
    let a = check(
        "provisional",
        &before,
        "A",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert_eq!(object_ids(&a), ["re_X"]);

    // Its owner shows up: a record naming B.
    let mut after = before.to_vec();
    after.push(refund_record(Some("B"), "re_X", "succeeded", 61.0, 2250));
    let a = check(
        "moved",
        &after,
        "A",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert!(object_ids(&a).is_empty());
    check("owner", &after, "B", at(2.0 * MIN), "completed / none / -");
}

#[test]
fn a_refund_listed_before_the_first_send_is_not_its_effect() {
    // Check, then act: the executor lists the order's refunds (an old one, re_OLD, from before
    // reckon or made by hand: no intent, no key), then sends its own refund, which times out.
    // re_OLD was there before A wrote anything: it cannot be A's refund, and A is not
    // completed because of it. (Linking it made A `completed / none`: the refund that may
    // never have happened was called done.) Its record came in late, from a periodic sync: the
    // read-back is what shows it was there first.
    let events = [
        refund_record(None, "re_OLD", "succeeded", 90.0, 2250),
        ev(readback("A", "list_refunds", 10.0, &["re_OLD"])),
        ev(timed_out("A", 60.0, "kA", "22.50")),
    ];
    let a = check(
        "listed before the send",
        &events,
        "A",
        at(3.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert!(
        object_ids(&a).is_empty(),
        "re_OLD predates A's send: {a:#?}"
    );

    // Listed again after the send, it is still the refund that was there before.
    let mut again = events.to_vec();
    again.push(ev(readback("A", "list_refunds", 120.0, &["re_OLD"])));
    let a = check(
        "listed before and after",
        &again,
        "A",
        at(3.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert!(object_ids(&a).is_empty(), "{a:#?}");
}

#[test]
fn an_object_the_downstream_had_before_the_send_is_not_its_effect() {
    // Only read after the send, but the downstream's own record of it is older than the send.
    let events = [
        ev(timed_out("A", 60.0, "kA", "22.50")),
        refund_record(None, "re_OLD", "succeeded", 2.0, 2250),
        ev(readback("A", "list_refunds", 120.0, &["re_OLD"])),
    ];
    let a = check(
        "recorded before the send",
        &events,
        "A",
        at(3.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert!(object_ids(&a).is_empty(), "{a:#?}");

    // A record that says when the object was created counts the same, whenever it was sent.
    let mut created = stripe_refund(None, "re_OLD", "succeeded", 121.0, 2250, "usd");
    created.created_at = Some(at(2.0));
    let events = [
        ev(timed_out("A", 60.0, "kA", "22.50")),
        ev(created),
        ev(readback("A", "list_refunds", 120.0, &["re_OLD"])),
    ];
    let a = check(
        "created before the send",
        &events,
        "A",
        at(3.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert!(object_ids(&a).is_empty(), "{a:#?}");

    // Stripe's clock counts whole seconds and is not the executor's: a refund created 0.2 s
    // after a send at 60.7 s says `created: 60`. That is no proof it was there first.
    let mut same_second = stripe_refund(None, "re_A", "succeeded", 60.0, 2250, "usd");
    same_second.created_at = Some(at(60.0));
    let events = [
        ev(timed_out("A", 60.7, "kA", "22.50")),
        ev(same_second),
        ev(readback("A", "list_refunds", 120.0, &["re_A"])),
    ];
    let a = check(
        "created in the send's second",
        &events,
        "A",
        at(3.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert_eq!(object_ids(&a), ["re_A"]);
}

#[test]
fn an_intent_that_never_executed_owns_no_listed_object() {
    // Every send rejected: nothing executed, so nothing a read finds is its effect.
    let events = [
        ev(attempt("A", R, 0.0, 0.3)
            .key("kA")
            .args(refund_args("22.50"))
            .http(422)),
        ev(readback("A", "list_refunds", 10.0, &["re_X"])),
        refund_record(None, "re_X", "succeeded", 12.0, 2250),
    ];
    let a = check(
        "rejected, then read",
        &events,
        "A",
        at(3.0 * MIN),
        "failed_before_execution / fix_input / -",
    );
    assert!(object_ids(&a).is_empty(), "{a:#?}");
}

#[test]
fn a_provisional_object_never_raises_an_effect_finding() {
    // A owns re_A; the read of the order also lists re_Y, whose owner is not known yet. That is
    // not a duplicate refund (nor a mismatched one) until something attributes it to A.
    let events = [
        ev(refund("A", 0.0, "kA", "22.50")
            .http(200)
            .object("re_A", "succeeded")),
        refund_record(Some("A"), "re_A", "succeeded", 0.5, 2250),
        refund_record(None, "re_Y", "succeeded", 20.0, 999),
        ev(readback("A", "list_refunds", 90.0, &["re_A", "re_Y"])),
    ];
    check("A", &events, "A", at(5.0 * MIN), "completed / none / -");
}

#[test]
fn one_key_two_intents_under_replay() {
    // A careless executor sends A and B under one key; the downstream replays A's saved
    // response to B. One refund exists; the customer is owed two.
    let events = [
        ev(refund("A", 0.0, "k-shared", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        ev(refund("B", 10.0, "k-shared", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 0.5, 4500, "usd"),
            "k-shared",
        )),
    ];
    let a = check(
        "first sender",
        &events,
        "A",
        at(2.0 * MIN),
        "completed / escalate / key_shared_across_intents",
    );
    assert_eq!(object_ids(&a), ["re_1"]);
    let b = check(
        "second sender",
        &events,
        "B",
        at(2.0 * MIN),
        "unknown / escalate / key_shared_across_intents",
    );
    assert!(
        object_ids(&b).is_empty(),
        "the replayed response is A's refund: {b:#?}"
    );
    let f = &b.findings[0];
    assert_eq!((f.subject.as_str(), f.at), ("k-shared", at(10.0)));
    assert!(f.detail.contains("first sent by intent A"), "{}", f.detail);
}

#[test]
fn one_key_two_intents_without_records() {
    let events = [
        ev(refund("A", 0.0, "k-shared", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        ev(refund("B", 10.0, "k-shared", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
    ];
    check(
        "A",
        &events,
        "A",
        at(2.0 * MIN),
        "completed / escalate / key_shared_across_intents",
    );
    check(
        "B",
        &events,
        "B",
        at(2.0 * MIN),
        "unknown / escalate / key_shared_across_intents",
    );
}

#[test]
fn a_record_naming_an_intent_outranks_the_key_it_carries() {
    // The record says B made re_1, with A's key (the executor reused it). It is B's effect.
    let events = [
        ev(timed_out("A", 0.0, "kA", "45.00")),
        ev(with_key(
            stripe_refund(Some("B"), "re_1", "succeeded", 5.0, 4500, "usd"),
            "kA",
        )),
    ];
    let a = check(
        "A",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert!(object_ids(&a).is_empty());
}

#[test]
fn a_keyless_timeout_is_never_retried_with_the_same_key() {
    let events = [ev(attempt("A", R, 0.0, 30.0)
        .args(refund_args("45.00"))
        .timeout())];
    let v = check(
        "keyless",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / reconcile / -",
    );
    assert!(v.idempotency_keys.is_empty());
}

#[test]
fn a_keyless_resend_after_a_keyed_timeout_is_a_new_key() {
    let events = [
        ev(timed_out("A", 0.0, "k1", "45.00")),
        ev(attempt("A", R, 40.0, 30.0)
            .args(refund_args("45.00"))
            .timeout()),
    ];
    let v = check(
        "keyed then keyless",
        &events,
        "A",
        at(3.0 * MIN),
        "unknown / escalate / new_key_retry",
    );
    assert!(
        v.findings[0].detail.contains("(no key)"),
        "{}",
        v.findings[0].detail
    );
}

#[test]
fn two_keyless_sends_are_unprotected_and_never_retry_same_key() {
    let events = [
        ev(attempt("A", R, 0.0, 30.0)
            .args(refund_args("45.00"))
            .timeout()),
        ev(attempt("A", R, 40.0, 30.0)
            .args(refund_args("45.00"))
            .timeout()),
    ];
    check(
        "keyless twice",
        &events,
        "A",
        at(3.0 * MIN),
        "unknown / reconcile / -",
    );
}

#[test]
fn fixed_input_under_the_same_key_is_row_one_done_right() {
    let events = [
        ev(attempt("A", R, 0.0, 0.2)
            .key("k1")
            .args(refund_args("-5"))
            .http(422)),
        ev(refund("A", 60.0, "k1", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        refund_record(Some("A"), "re_1", "succeeded", 61.0, 4500),
    ];
    let v = check(
        "fixed input",
        &events,
        "A",
        at(5.0 * MIN),
        "completed / none / -",
    );
    // The key window starts at the send that executed, not at the rejected one.
    assert_eq!(
        v.safe_retry_until,
        Some(at(60.0 + 23.0 * HOUR)),
        "{:?}",
        v.safe_retry_until
    );
}

#[test]
fn a_resend_after_a_rejection_counts_the_window_from_the_executed_send() {
    // Rejected at 0, executed at 23h30m (timed out), retried at 23h33m: past the window a
    // rejected first send would open (23h), inside the one of the send that executed.
    let events = [
        ev(attempt("A", R, 0.0, 0.2)
            .key("k1")
            .args(refund_args("-5"))
            .http(422)),
        ev(timed_out("A", 23.5 * HOUR, "k1", "45.00")),
        ev(timed_out("A", 23.55 * HOUR, "k1", "45.00")),
    ];
    check(
        "window from the executed send",
        &events,
        "A",
        at(23.6 * HOUR),
        "unknown / retry_same_key / -",
    );
}

#[test]
fn amounts_compare_by_value_under_one_key() {
    let events = [
        ev(attempt("A", R, 0.0, 30.0)
            .key("k1")
            .args(r#"{"order_id":"1042","amount":45,"currency":"usd"}"#.into())
            .timeout()),
        ev(attempt("A", R, 40.0, 0.3)
            .key("k1")
            .args(r#"{"order_id":1042,"amount":"45.00","currency":"usd"}"#.into())
            .http(200)
            .object("re_1", "succeeded")),
    ];
    check(
        "45 = 45.00",
        &events,
        "A",
        at(2.0 * MIN),
        "completed / none / -",
    );
}

#[test]
fn a_changed_non_parameter_argument_under_one_key_is_still_a_mismatch() {
    let events = [
        ev(attempt("A", R, 0.0, 30.0)
            .key("k1")
            .args(r#"{"order_id":"1042","amount":45,"currency":"usd","reason":"duplicate"}"#.into())
            .timeout()),
        ev(attempt("A", R, 40.0, 30.0)
            .key("k1")
            .args(
                r#"{"order_id":"1042","amount":45,"currency":"usd","reason":"fraudulent"}"#.into(),
            )
            .timeout()),
    ];
    check(
        "reason changed",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / escalate / key_reuse_mismatch",
    );
}

#[test]
fn server_errors_reported_only_as_error_type_are_replayed() {
    let send = |start: f64| {
        ev(attempt("A", R, start, 0.3)
            .key("k1")
            .args(refund_args("45.00"))
            .error("500"))
    };
    let events = [send(0.0), send(70.0), send(140.0)];
    check(
        "error.type 500, three times",
        &events,
        "A",
        at(4.0 * MIN),
        "unknown / escalate / replayed_server_error",
    );
}

#[test]
fn a_wrapper_span_of_another_tool_is_not_a_send() {
    // A rejected refund plus the executor's `agent.step` span that carries the same intent id.
    let events = [
        ev(attempt("A", "agent.step", -1.0, 5.0)),
        ev(attempt("A", R, 0.0, 0.2)
            .key("k1")
            .args(refund_args("-5"))
            .http(422)),
    ];
    let v = check(
        "wrapper and a rejection",
        &events,
        "A",
        at(MIN),
        "failed_before_execution / fix_input / -",
    );
    assert_eq!((v.tool.as_deref(), v.attempts.len()), (Some(R), 1));
}

#[test]
fn two_downstreams_numbering_from_1001_keep_their_objects_apart() {
    // Refund 1001 belongs to A; invoice draft 1001 to D. Neither sees the other's.
    let events = [
        ev(refund("A", 0.0, "kA", "45.00")
            .http(200)
            .object("1001", "succeeded")),
        ev(attempt("D", "create_bill_draft", 1.0, 0.3)
            .key("kD")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("1001", "created")),
        ev(major(
            RecordObservation {
                kind: Some("draft".into()),
                ..record(None, "1001", "created", 1.5)
            },
            "120.00",
            "EUR",
            "ACME",
        )),
        ev(stripe_refund(None, "1001", "succeeded", 0.5, 4500, "usd")),
    ];
    let a = check("refund 1001", &events, "A", at(MIN), "completed / none / -");
    assert_eq!(a.objects[0].amount, Decimal::parse("45"));
    let d = check("draft 1001", &events, "D", at(MIN), "completed / none / -");
    assert_eq!(d.objects[0].amount, Decimal::parse("120"));
}

#[test]
fn a_refund_can_fail_after_succeeding_but_never_go_back_to_pending() {
    let events = [
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "pending")),
        refund_record(Some("A"), "re_1", "succeeded", 10.0, 4500),
        refund_record(Some("A"), "re_1", "pending", 11.0, 4500),
    ];
    check("no way back", &events, "A", at(MIN), "completed / none / -");
    let mut failed = events.to_vec();
    failed.push(refund_record(Some("A"), "re_1", "failed", 12.0, 4500));
    check(
        "failed later",
        &failed,
        "A",
        at(MIN),
        "failed_after_execution / new_intent / -",
    );
}

#[test]
fn records_outrank_responses_for_an_objects_status() {
    // The response said succeeded; the downstream's records say it failed.
    let events = [
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        refund_record(Some("A"), "re_1", "failed", 0.2, 4500),
    ];
    check(
        "record over response",
        &events,
        "A",
        at(MIN),
        "failed_after_execution / new_intent / -",
    );
}

// The escalation rules after resolution.

fn resolve(book: &mut EscalationBook, v: &Verdict, now: Timestamp) {
    let id = book
        .open_for(&v.intent_id)
        .expect("an open escalation")
        .id
        .clone();
    book.resolve(&id, "ana", "checked", None, now, Some(v))
        .expect("resolves");
}

/// Audit `intent` over `events` at `now` through `book`, as the engine does.
fn step(book: &mut EscalationBook, events: &[Event], intent: &str, now: Timestamp) -> Verdict {
    let contracts = std::sync::Arc::new(contracts());
    let mut ledger = reckon::audit::Ledger::with_contracts(contracts.clone());
    for e in events {
        ledger.add(e.clone());
    }
    let h = ledger.history(intent).expect("intent");
    let mut v = reckon::audit::audit(&h, reckon::audit::Ledger::contract_for(&h, &contracts), now);
    book.observe(&v);
    book.apply(&mut v);
    v
}

#[test]
fn an_email_timing_out_again_after_a_resolution_escalates_again() {
    let mut book = EscalationBook::new();
    let mut events = vec![ev(attempt("E", "send_email", 0.0, 30.0).timeout())];
    let v = step(&mut book, &events, "E", at(MIN));
    assert_eq!(v.decision, Decision::Escalate);
    resolve(&mut book, &v, at(2.0 * MIN));
    let v = step(&mut book, &events, "E", at(3.0 * MIN));
    assert_eq!(v.decision, Decision::None, "settled by a person");
    assert!(book.open_for("E").is_none());

    events.push(ev(attempt("E", "send_email", 4.0 * MIN, 30.0).timeout()));
    let v = step(&mut book, &events, "E", at(5.0 * MIN));
    let second = book
        .open_for("E")
        .expect("the new send needs a person again");
    assert!(second.id.ends_with("_2"), "{}", second.id);
    assert_eq!(v.decision, Decision::Escalate);
    assert!(second
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::NoIdempotencyContract));
}

#[test]
fn a_resolved_partial_refund_is_never_retried() {
    let mut book = EscalationBook::new();
    let mut events = vec![
        ev(timed_out("A", 0.0, "k1", "45.00")),
        refund_record(Some("A"), "re_1", "succeeded", 10.0, 2000),
    ];
    let v = step(&mut book, &events, "A", at(2.0 * MIN));
    assert_eq!(
        (v.state, v.decision),
        (IntentState::Unknown, Decision::Escalate)
    );
    resolve(&mut book, &v, at(3.0 * MIN));
    let v = step(&mut book, &events, "A", at(4.0 * MIN));
    assert_eq!(
        v.decision,
        Decision::None,
        "not retry_same_key: that would refund 45 again"
    );

    // Without the book, the audit itself says only a person decides.
    let (bare, _) = verdict_of(&events, "A", at(4.0 * MIN));
    assert!(bare
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::EffectMismatch));

    // The refund then fails: new evidence, and the decision follows it again.
    events.push(refund_record(Some("A"), "re_1", "failed", 5.0 * MIN, 2000));
    let v = step(&mut book, &events, "A", at(6.0 * MIN));
    assert_eq!(
        (v.state, v.decision),
        (IntentState::FailedAfterExecution, Decision::NewIntent)
    );
}

#[test]
fn an_escalation_keeps_the_findings_that_opened_it() {
    // A second refund recorded pending raises duplicate_effect; it fails right after, which
    // removes the finding from the verdict, not from the escalation.
    let mut book = EscalationBook::new();
    let mut events = vec![
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        refund_record(Some("A"), "re_1", "succeeded", 0.5, 4500),
        refund_record(Some("A"), "re_2", "pending", 20.0, 4500),
    ];
    let v = step(&mut book, &events, "A", at(MIN));
    assert!(v
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::DuplicateEffect));
    events.push(refund_record(Some("A"), "re_2", "failed", 21.0, 4500));
    let v = step(&mut book, &events, "A", at(2.0 * MIN));
    assert!(v.findings.is_empty(), "{:?}", v.findings);
    let e = book.open_for("A").expect("still open");
    assert_eq!(v.decision, Decision::Escalate);
    let f = &e.findings[0];
    assert_eq!(
        (f.kind, f.subject.as_str()),
        (FindingKind::DuplicateEffect, "re_2")
    );
    assert!(
        f.detail.contains("re_2"),
        "the person sees why: {}",
        f.detail
    );
}

#[test]
fn a_read_back_that_found_only_others_refunds_proves_nothing_either() {
    // A timed out and may still commit (refunds.toml: max_in_flight 60 s). At 20 s it lists the
    // order's refunds and finds only B's; taking that as "mine never happened", it re-sends
    // under a new key. The read-back found nothing of A's: acting on it is the inconclusive
    // read-back of the seed notes, as if the list had been empty.
    let events = [
        ev(timed_out("A", 0.0, "kA", "22.50")),
        ev(refund("B", 5.0, "kB", "22.50")
            .http(200)
            .object("re_B", "succeeded")),
        refund_record(Some("B"), "re_B", "succeeded", 5.5, 2250),
        ev(readback("A", "list_refunds", 20.0, &["re_B"])),
        ev(timed_out("A", 25.0, "kA2", "22.50")),
    ];
    check(
        "A acts on a read-back that listed only B's refund",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / escalate / inconclusive_readback_acted_on, new_key_retry",
    );

    // The same with a refund that was there before A's first send, and nobody's.
    let events = [
        refund_record(None, "re_OLD", "succeeded", -90.0, 2250),
        ev(timed_out("A", 0.0, "kA", "22.50")),
        ev(readback("A", "list_refunds", 20.0, &["re_OLD"])),
        ev(timed_out("A", 25.0, "kA", "22.50")),
    ];
    check(
        "A acts on a read-back that listed only an older refund",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / retry_same_key / inconclusive_readback_acted_on",
    );
}

#[test]
fn a_replayed_response_to_the_later_sender_of_a_shared_key_is_not_its_effect() {
    // Rule 4. A sends key k and times out; B (another intent, same careless key) sends k later
    // and, under replay, receives A's saved response: re_1 succeeded. No record has come in
    // yet. The response is A's, replayed; it proves nothing about B's own refund, which stays
    // unknown. (The audit made B the owner of re_1, as the intent "whose write response
    // returned it", and called B's refund done.)
    let events = [
        ev(timed_out("A", 0.0, "k-shared", "45.00")),
        ev(refund("B", 10.0, "k-shared", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
    ];
    let b = check(
        "later sender, replayed response only",
        &events,
        "B",
        at(2.0 * MIN),
        "unknown / escalate / key_shared_across_intents",
    );
    assert!(
        object_ids(&b).is_empty(),
        "re_1 is A's saved response: {b:#?}"
    );
}

#[test]
fn a_refund_succeeded_and_failed_in_one_second_is_failed() {
    // Rule 5: a refund can go from succeeded to failed, not the other way. Stripe's events
    // carry whole seconds, so `refund.updated` (succeeded) and `refund.failed` can bear the
    // same instant; the failure is the later state. (The audit broke the tie by the status
    // text, "failed" < "succeeded", and called the refund completed; for drafts, "created" <
    // "deleted", the same tie went the other way.)
    let events = [
        ev(refund("A", 0.0, "k1", "45.00")
            .http(200)
            .object("re_1", "pending")),
        refund_record(Some("A"), "re_1", "pending", 0.0, 4500),
        refund_record(Some("A"), "re_1", "succeeded", 30.0, 4500),
        refund_record(Some("A"), "re_1", "failed", 30.0, 4500),
    ];
    check(
        "succeeded and failed in one second",
        &events,
        "A",
        at(5.0 * MIN),
        "failed_after_execution / new_intent / -",
    );
}

#[test]
fn a_changed_amount_under_the_same_key_is_a_mismatch_though_the_downstream_refused_it() {
    // Seed row "same key, changed parameters": the model re-issues 40.00 under the key of a
    // timed-out 45.00; the downstream refuses it (assumption C) with a 400, which the HTTP
    // client records as semconv does (`error.type` = "400"). The key was sent with different
    // parameters: key_reuse_mismatch, escalate. (The audit skipped every rejected attempt when
    // comparing, as if it were the first, fixed send of rule 7, and said retry_same_key.)
    let events = [
        ev(timed_out("A", 0.0, "k1", "45.00")),
        ev(attempt("A", R, 40.0, 0.2)
            .key("k1")
            .args(refund_args("40.00"))
            .http(400)
            .error("400")),
    ];
    check(
        "same key, 40.00 after 45.00, refused",
        &events,
        "A",
        at(2.0 * MIN),
        "unknown / escalate / key_reuse_mismatch",
    );
}

#[test]
fn a_key_whose_first_send_was_rejected_does_not_give_that_intent_the_refund() {
    // Rules 2 and 7. A sends key k and is refused (422: nothing executed, nothing saved under
    // k). B sends the same k (a careless executor) and executes; its request times out, and
    // the refund it made, re_1, comes in by a record carrying k and no intent id. A executed
    // nothing, so re_1 cannot be A's refund. (The audit gave re_1 to the earliest sender of
    // k, A, which turned A `completed`, and left B with no refund.)
    let events = [
        ev(attempt("A", R, 0.0, 0.2)
            .key("k-shared")
            .args(refund_args("45.00"))
            .http(422)),
        ev(timed_out("B", 10.0, "k-shared", "45.00")),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 12.0, 4500, "usd"),
            "k-shared",
        )),
    ];
    let a = check(
        "rejected first sender",
        &events,
        "A",
        at(2.0 * MIN),
        "failed_before_execution / escalate / key_shared_across_intents",
    );
    assert!(object_ids(&a).is_empty(), "A executed nothing: {a:#?}");
    let b = check(
        "executed later sender",
        &events,
        "B",
        at(2.0 * MIN),
        "completed / escalate / key_shared_across_intents",
    );
    assert_eq!(object_ids(&b), ["re_1"]);
}

#[test]
fn a_rejected_send_of_the_same_key_by_another_intent_does_not_hide_a_duplicate() {
    // The same cause, seen from the intent that made two refunds. A refunds 45.00 under k1
    // (re_1, succeeded), then resends under k2, a key C had sent once and been refused (422)
    // with. A's k2 request makes a second refund, re_2, recorded with k2. Two live refunds
    // linked to A by its keys: duplicate_effect, critical. (The audit gave re_2 to C, whose
    // send executed nothing, so A's duplicate refund went unreported and C was `completed`.)
    let events = [
        ev(attempt("C", R, 0.0, 0.2)
            .key("k2")
            .args(refund_args("45.00"))
            .http(422)),
        ev(refund("A", 10.0, "k1", "45.00")
            .http(200)
            .object("re_1", "succeeded")),
        ev(timed_out("A", 20.0, "k2", "45.00")),
        ev(with_key(
            stripe_refund(None, "re_2", "succeeded", 25.0, 4500, "usd"),
            "k2",
        )),
    ];
    let a = check(
        "A, two refunds",
        &events,
        "A",
        at(5.0 * MIN),
        "completed / escalate / duplicate_effect, key_shared_across_intents, new_key_retry, \
         resend_after_terminal",
    );
    assert_eq!(object_ids(&a), ["re_1", "re_2"]);
    check(
        "C, refused",
        &events,
        "C",
        at(5.0 * MIN),
        "failed_before_execution / escalate / key_shared_across_intents",
    );
}

/// `a_key_whose_first_send_was_rejected_does_not_give_that_intent_the_refund` with the
/// executor's wrapper span that carries the intent's attributes (key included) around the
/// refused send: the audit does not count the wrapper as a send, and neither does ownership
/// (found by review: A, which executed nothing, took B's refund).
#[test]
fn a_wrapper_span_does_not_make_a_refused_sender_the_first_to_execute() {
    let events = [
        ev(attempt("A", "agent.step", -1.0, 5.0).key("k-shared")),
        ev(attempt("A", R, 0.0, 0.2)
            .key("k-shared")
            .args(refund_args("45.00"))
            .http(422)),
        ev(attempt("B", R, 10.0, 30.0)
            .key("k-shared")
            .args(refund_args("45.00"))
            .timeout()),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 12.0, 4500, "usd"),
            "k-shared",
        )),
    ];
    let a = check(
        "rejected first sender, with its wrapper span",
        &events,
        "A",
        at(120.0),
        "failed_before_execution / escalate / key_shared_across_intents",
    );
    assert!(object_ids(&a).is_empty(), "A executed nothing: {a:#?}");
    let b = check(
        "executed later sender",
        &events,
        "B",
        at(120.0),
        "completed / escalate / key_shared_across_intents",
    );
    assert_eq!(object_ids(&b), ["re_1"]);
}

/// A ledger moved under new contracts links as one built under them: a reload that changes
/// `not_executed_status` moves a key's objects as a restart would (found by review, when
/// whether a send executed was decided as it came in).
#[test]
fn a_reload_of_not_executed_status_moves_ownership_as_a_restart_would() {
    let events = [
        ev(attempt("A", R, 0.0, 0.2)
            .key("k-shared")
            .args(refund_args("45.00"))
            .http(429)),
        ev(attempt("B", R, 10.0, 30.0)
            .key("k-shared")
            .args(refund_args("45.00"))
            .timeout()),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 12.0, 4500, "usd"),
            "k-shared",
        )),
    ];
    use reckon::audit::{self, Ledger};
    use reckon::contract::Contracts;
    use std::sync::Arc;
    let before = Arc::new(contracts());
    let mut refunds_429 = refunds();
    refunds_429.not_executed_status.retain(|s| *s != 429);
    let after = Arc::new(Contracts::new(vec![refunds_429, drafts(), email()]));
    let built = |c: &Arc<Contracts>| {
        let mut l = Ledger::with_contracts(c.clone());
        for e in &events {
            l.add(e.clone());
        }
        l
    };
    let moved = built(&before).under(after.clone());
    let fresh = built(&after);
    let verdicts = |l: &Ledger| {
        ["A", "B"]
            .map(|id| {
                let h = l.history(id).unwrap();
                let v = audit::audit(&h, Ledger::contract_for(&h, &after), at(120.0));
                format!("{id}: {} {:?}", summary(&v), object_ids(&v))
            })
            .join("; ")
    };
    assert_eq!(verdicts(&moved), verdicts(&fresh));
}

/// Whether a span of an uncontracted tool is a send depends on the intent's other attempts (a
/// wrapper is not, once the intent has a contracted send), so a contracted attempt that
/// touches no object still changes who owns the objects under the intent's keys: the verdicts
/// must not depend on which came first (found by the audit fuzzer: the orphan set kept the
/// owner of the first arrival).
#[test]
fn a_contracted_send_arriving_after_a_keyed_wrapper_moves_the_keys_object_in_any_order() {
    use reckon::audit::Ledger;
    let record = ev(with_key(
        stripe_refund(None, "re_9", "succeeded", 100.0, 4500, "usd"),
        "k0",
    ));
    let wrapper = ev(attempt("A", "list_refunds", 200.0, 5.0).key("k0").http(200));
    let send = ev(attempt("A", R, 0.0, 0.0));
    let ids = |events: &[Event]| {
        let mut ledger = Ledger::with_contracts(std::sync::Arc::new(contracts()));
        for e in events {
            ledger.add(e.clone());
        }
        let mut ids: Vec<String> = ledger.ids().collect();
        ids.sort();
        ids
    };
    let in_order = [record.clone(), wrapper.clone(), send.clone()];
    assert_eq!(ids(&in_order), ["A", "orphan:re_9"], "re_9 is nobody's");
    assert_eq!(ids(&[send, record, wrapper]), ids(&in_order));
    check(
        "A",
        &in_order,
        "A",
        at(5.0 * MIN),
        "unknown / reconcile / -",
    );
}

#[test]
fn two_timed_out_readers_of_one_unowned_refund_are_not_both_completed() {
    // Two intents each meant to refund 22.50 on order 1042; both timed out, and each read the
    // order back. The one refund listed names no intent and carries no key: it is at most one
    // of them's effect, and nothing says whose. Neither is `completed` on it (before: both
    // were, and the second refund that was still owed went unseen). Their keys are still
    // fresh, so a same-key retry asks the downstream whose it is.
    let events = [
        ev(timed_out("A", 0.0, "kA", "22.50")),
        ev(timed_out("B", 5.0, "kB", "22.50")),
        refund_record(None, "re_X", "succeeded", 20.0, 2250),
        ev(readback("A", "list_refunds", 90.0, &["re_X"])),
        ev(readback("B", "list_refunds", 95.0, &["re_X"])),
    ];
    for intent in ["A", "B"] {
        let v = check(
            "two readers",
            &events,
            intent,
            at(2.0 * MIN),
            "unknown / retry_same_key / -",
        );
        assert!(object_ids(&v).is_empty(), "{intent}: {v:#?}");
    }

    // Linked to no intent, it is an orphan record (past its grace, its finding).
    check(
        "the refund",
        &events,
        "orphan:re_X",
        at(20.0 * MIN),
        "completed / none / orphan_record",
    );

    // A reader that had not sent when it listed the refund is no candidate: A keeps it (as a
    // lead: still unknown).
    let mut checked_first = events[..4].to_vec();
    checked_first.push(ev(readback("B", "list_refunds", 3.0, &["re_X"])));
    let a = check(
        "B checked before its send",
        &checked_first,
        "A",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert_eq!(object_ids(&a), ["re_X"]);

    // Its owner shows up (a later record names B): it is B's, and A is unknown.
    let mut claimed = events.to_vec();
    claimed.push(refund_record(Some("B"), "re_X", "succeeded", 21.0, 2250));
    check(
        "claimed",
        &claimed,
        "B",
        at(3.0 * MIN),
        "completed / none / -",
    );
    check(
        "A after the claim",
        &claimed,
        "A",
        at(3.0 * MIN),
        "unknown / retry_same_key / -",
    );
}

#[test]
fn one_key_string_on_two_downstreams_is_not_shared_across_intents() {
    // An executor that derives keys from the order sends "order-1042" to the refunds API for
    // A and to the invoicing API for D. The two downstreams keep their keys apart: no intent
    // shares a key, and neither one's retry is unsafe because of the other.
    let events = [
        ev(timed_out("A", 0.0, "order-1042", "45.00")),
        ev(attempt("D", "create_bill_draft", 1.0, 0.3)
            .key("order-1042")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("1001", "created")),
    ];
    check(
        "refund",
        &events,
        "A",
        at(MIN),
        "unknown / retry_same_key / -",
    );
    check("draft", &events, "D", at(MIN), "completed / none / -");

    // The same with A's send wrapped in a framework span that carries the key too and starts
    // first: a sender's downstream is its intent's, not its earliest span's.
    let mut wrapped = vec![ev(attempt("A", "agent.step", -1.0, 40.0).key("order-1042"))];
    wrapped.extend(events.iter().cloned());
    check(
        "draft, wrapped refund",
        &wrapped,
        "D",
        at(MIN),
        "completed / none / -",
    );
}

#[test]
fn an_old_refund_its_only_reader_sets_aside_is_an_orphan_record() {
    // A refund someone made by hand on order 1042 an hour ago, naming no intent. A's send
    // timed out; A's read-back of the order lists the old refund. It is not A's effect (it
    // was there before the send), and it links to no other intent: after its grace it is an
    // `orphan_record` (before: listed by a reader, it counted as linked and was never
    // reported).
    let events = [
        refund_record(None, "re_OLD", "succeeded", 0.0, 2250),
        ev(timed_out("A", 3600.0, "kA", "22.50")),
        ev(readback("A", "list_refunds", 3700.0, &["re_OLD"])),
    ];
    let a = check(
        "A",
        &events,
        "A",
        at(3720.0),
        "unknown / retry_same_key / -",
    );
    assert!(object_ids(&a).is_empty(), "{a:#?}");
    check(
        "the old refund",
        &events,
        "orphan:re_OLD",
        at(3720.0),
        "completed / none / orphan_record",
    );

    // A reader that can have made it holds it (provisionally): no orphan.
    let fresh = [
        ev(timed_out("A", 0.0, "kA", "22.50")),
        refund_record(None, "re_X", "succeeded", 20.0, 2250),
        ev(readback("A", "list_refunds", 90.0, &["re_X"])),
    ];
    // A lead is no proof: past the unknown deadline a person looks.
    check(
        "A's",
        &fresh,
        "A",
        at(20.0 * MIN),
        "unknown / escalate / unresolved_unknown",
    );
    assert_eq!(ids_of(&fresh), ["A"], "re_X is A's, not an orphan");
}

#[test]
fn an_unowned_refund_numbered_like_another_downstreams_draft_is_an_orphan_record() {
    // Draft 1001 is D's (its response returned it). Refund 1001, made by hand, names no
    // intent: another object (DESIGN.md "Evidence attribution" 1), linked to nothing, so an
    // `orphan_record` after its grace. Before, the draft's owner hid it.
    let events = [
        ev(attempt("D", "create_bill_draft", 1.0, 0.3)
            .key("kD")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("1001", "created")),
        ev(stripe_refund(None, "1001", "succeeded", 2.0, 4500, "usd")),
    ];
    let orphan = check(
        "refund 1001",
        &events,
        "orphan:1001",
        at(11.0 * MIN),
        "completed / none / orphan_record",
    );
    assert_eq!(orphan.contract.as_deref(), Some("payments.refund"));
    check(
        "draft 1001",
        &events,
        "D",
        at(11.0 * MIN),
        "completed / none / -",
    );
}

/// The intents and pseudo-intents a ledger of `events` holds, sorted.
fn ids_of(events: &[Event]) -> Vec<String> {
    let mut ledger = reckon::audit::Ledger::with_contracts(std::sync::Arc::new(contracts()));
    for e in events {
        ledger.add(e.clone());
    }
    let mut ids: Vec<String> = ledger.ids().collect();
    ids.sort();
    ids
}

#[test]
fn an_email_sent_before_the_refund_makes_no_listed_refund_the_intents() {
    // R's refund was rejected (nothing executed); R's email went out; R then listed the order
    // and saw a refund someone made by hand in between. The email is a send to another
    // downstream, not of R's write: the refund cannot be R's effect (before, the email's time
    // made R a candidate and R was `completed` by a refund it never made).
    let events = [
        ev(attempt("R", R, 100.0, 0.3)
            .key("kR")
            .args(refund_args("22.50"))
            .http(422)),
        ev(attempt("R", "send_email", 110.0, 0.3).http(200)),
        refund_record(None, "re_X", "succeeded", 200.0, 2250),
        ev(readback("R", "list_refunds", 300.0, &["re_X"])),
    ];
    let r = check(
        "R",
        &events,
        "R",
        at(20.0 * MIN),
        "failed_before_execution / fix_input / -",
    );
    assert!(object_ids(&r).is_empty(), "{r:#?}");
    check(
        "the refund",
        &events,
        "orphan:re_X",
        at(20.0 * MIN),
        "completed / none / orphan_record",
    );
}

#[test]
fn a_record_naming_no_kind_listed_by_two_downstreams_readers_is_neither_ones() {
    // Object 1001, posted without a kind. A refund and a draft both timed out, then each
    // reader listed 1001. Either may be the one whose effect it is, so it is neither's (before,
    // both were `completed` by one record) and reported as an orphan record.
    let events = [
        ev(timed_out("A", 0.0, "kA", "120.00")),
        ev(attempt("D", "create_bill_draft", 1.0, 30.0)
            .key("kD")
            .args(draft_args("ACME", "120.00"))
            .timeout()),
        ev(record(None, "1001", "succeeded", 40.0)),
        ev(readback("A", "list_refunds", 90.0, &["1001"])),
        ev(readback("D", "list_drafts", 95.0, &["1001"])),
    ];
    for intent in ["A", "D"] {
        let v = check(
            "kind-less",
            &events,
            intent,
            at(2.0 * MIN),
            "unknown / retry_same_key / -",
        );
        assert!(object_ids(&v).is_empty(), "{intent}: {v:#?}");
    }
    assert!(ids_of(&events).contains(&"orphan:1001".to_string()));
}

#[test]
fn a_record_naming_no_kind_that_another_kinds_intent_owns_is_not_a_readers_as_well() {
    // A's refund 1001 (its key's record says refund) and a second record of 1001 naming no
    // kind, intent or key. D, a draft intent that timed out, lists 1001. The kind-less record
    // is in A's history already (A owns 1001): D must not hold it provisionally too.
    let events = [
        ev(attempt("A", R, 0.0, 0.3)
            .key("kA")
            .args(refund_args("45.00"))
            .http(200)
            .object("1001", "succeeded")),
        ev(with_key(
            stripe_refund(None, "1001", "succeeded", 40.0, 4500, "usd"),
            "kA",
        )),
        ev(attempt("D", "create_bill_draft", 1.0, 30.0)
            .key("kD")
            .args(draft_args("ACME", "120.00"))
            .timeout()),
        ev(record(None, "1001", "succeeded", 40.0)),
        ev(readback("D", "list_drafts", 95.0, &["1001"])),
    ];
    let d = check(
        "D",
        &events,
        "D",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert!(object_ids(&d).is_empty(), "{d:#?}");
}

#[test]
fn a_refund_owned_through_another_kinds_record_is_still_reported() {
    // W's draft 1001 has a record naming W and no kind. Its kind is W's (a draft: DESIGN.md
    // "Evidence attribution" 1), so W does not own refund 1001 too (before, a kind-less record
    // matched every kind, and a hand-made refund 1001 reached no history and no orphan). R sent
    // before refund 1001 appeared and listed it: it is R's lead, not proof, so R stays unknown
    // with the refund in view, and W keeps its draft.
    let events = [
        ev(attempt("W", "create_bill_draft", 0.0, 0.3)
            .key("kW")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("1001", "created")),
        ev(record(Some("W"), "1001", "created", 5.0)),
        ev(timed_out("R", 20.0, "kR", "45.00")),
        ev(stripe_refund(None, "1001", "succeeded", 25.0, 4500, "usd")),
        ev(readback("R", "list_refunds", 90.0, &["1001"])),
    ];
    let r = check(
        "R's lead",
        &events,
        "R",
        at(5.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert_eq!(object_ids(&r), ["1001"]);
    assert_eq!(
        r.objects[0].status, "succeeded",
        "the refund's status, not the draft's"
    );
    check(
        "W's draft",
        &events,
        "W",
        at(20.0 * MIN),
        "completed / none / -",
    );
    // Without R's read, nothing links refund 1001: an orphan record.
    let unread = &events[..4];
    let orphan = check(
        "refund 1001",
        unread,
        "orphan:1001",
        at(20.0 * MIN),
        "completed / none / orphan_record",
    );
    assert_eq!(orphan.contract.as_deref(), Some("payments.refund"));
}
