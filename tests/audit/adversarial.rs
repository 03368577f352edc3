//! What an adversarial (or merely model-driven) executor produces: the variants issue 2 names,
//! plus the evidence rules (records outrank claims, units, linking by key, orphans).

use super::support::*;
use reckon::model::*;

const R: &str = "issue_refund";

fn timeout(intent: &str, start: f64, key: &str) -> Event {
    ev(attempt(intent, R, start, 30.0)
        .key(key)
        .args(refund_args("45.00"))
        .timeout()
        .told("unknown"))
}

#[test]
fn new_key_after_timeout_makes_a_second_refund() {
    let events = [
        timeout("i1", 0.0, "k1"),
        ev(attempt("i1", R, 31.0, 0.4)
            .key("k2")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_2", "succeeded")),
        ev(stripe_refund(
            Some("i1"),
            "re_2",
            "succeeded",
            31.3,
            4500,
            "usd",
        )),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            45.0,
            4500,
            "usd",
        )),
    ];
    let v = check(
        "new key after timeout",
        &events,
        "i1",
        at(5.0 * MIN),
        "completed / escalate / new_key_retry, duplicate_effect",
    );
    let dup = v
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::DuplicateEffect)
        .unwrap();
    assert_eq!(
        (dup.severity, dup.subject.as_str()),
        (Severity::Critical, "re_1")
    );
}

#[test]
fn new_key_after_timeout_before_any_second_object() {
    let events = [timeout("i1", 0.0, "k1"), timeout("i1", 31.0, "k2")];
    check(
        "new key, both unknown",
        &events,
        "i1",
        at(2.0 * MIN),
        "unknown / escalate / new_key_retry",
    );
}

#[test]
fn empty_readback_then_failed_report() {
    let mut rb = readback("i1", "list_refunds", 35.0, &[]);
    rb.reported_outcome = Some(ReportedOutcome::Failed);
    let events = [
        timeout("i1", 0.0, "k1"),
        ev(rb),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            50.0,
            4500,
            "usd",
        )),
    ];
    check(
        "failed reported after empty read-back",
        &events,
        "i1",
        at(5.0 * MIN),
        "completed / none / inconclusive_readback_acted_on",
    );
}

#[test]
fn empty_readback_after_in_flight_bound_is_conclusive() {
    let events = [
        timeout("i1", 0.0, "k1"),
        ev(readback("i1", "list_refunds", 2.0 * MIN, &[])),
        ev(attempt("i1", R, 2.0 * MIN + 5.0, 0.4)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "succeeded")),
    ];
    check(
        "resend after a conclusive read-back",
        &events,
        "i1",
        at(5.0 * MIN),
        "completed / none / -",
    );
}

#[test]
fn resend_while_pending() {
    let events = [
        ev(attempt("i1", R, 0.0, 0.5)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "pending")),
        ev(attempt("i1", R, 10.0, 0.5)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "pending")),
    ];
    check(
        "resend while pending",
        &events,
        "i1",
        at(MIN),
        "pending / wait / resend_while_pending",
    );
}

#[test]
fn resend_after_terminal() {
    let events = [
        ev(attempt("i1", R, 0.0, 0.5)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "failed")
            .told("failed")),
        ev(attempt("i1", R, 10.0, 0.5)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "failed")
            .told("failed")),
    ];
    // A same-key retry under replay inside the key's retention can make no second effect: it
    // gets the saved `failed` back (DESIGN.md "Findings": no resend_after_terminal).
    check(
        "resend after failure",
        &events,
        "i1",
        at(MIN),
        "failed_after_execution / new_intent / -",
    );
}

#[test]
fn read_back_that_found_a_pending_object_then_resend() {
    let events = [
        timeout("i1", 0.0, "k1"),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "pending",
            5.0,
            4500,
            "usd",
        )),
        ev(readback("i1", "list_refunds", 2.0 * MIN, &["re_1"])),
        ev(attempt("i1", R, 3.0 * MIN, 0.4)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "pending")),
    ];
    check(
        "resend after a read found it pending",
        &events,
        "i1",
        at(4.0 * MIN),
        "pending / wait / resend_while_pending",
    );
}

#[test]
fn four_layers_of_retries_exceed_max_attempts() {
    // SDK, wrapper, framework and model each retry the same call.
    let events: Vec<Event> = (0..6)
        .map(|i| {
            ev(attempt("i1", R, i as f64 * 12.0, 10.0)
                .key("k1")
                .args(refund_args("45.00"))
                .timeout())
        })
        .collect();
    let v = check(
        "four layers of retries",
        &events,
        "i1",
        at(3.0 * MIN),
        "unknown / reconcile / retry_budget_exceeded",
    );
    assert_eq!(v.attempts.len(), 6);
    let f = v
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::RetryBudgetExceeded)
        .unwrap();
    assert_eq!(f.at, at(60.0), "the sixth attempt broke the budget of five");
}

#[test]
fn saved_server_error_replayed_three_times() {
    let events: Vec<Event> = (0..3)
        .map(|i| {
            ev(attempt("i1", R, i as f64 * 70.0, 0.3)
                .key("k1")
                .args(refund_args("45.00"))
                .http(500)
                .error("500"))
        })
        .collect();
    let v = check(
        "saved 500 replayed",
        &events,
        "i1",
        at(4.0 * MIN),
        "unknown / escalate / replayed_server_error",
    );
    assert!(
        v.attempts.iter().all(|a| a.class == AttemptClass::Unknown),
        "a 5xx is never failed"
    );
}

#[test]
fn single_server_error_is_only_unknown() {
    let events = [ev(attempt("i1", R, 0.0, 0.3)
        .key("k1")
        .args(refund_args("45.00"))
        .http(500)
        .error("500"))];
    check(
        "one 500",
        &events,
        "i1",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
}

#[test]
fn minor_units_compare_equal_to_major_arguments() {
    let events = [
        ev(attempt("i1", R, 0.0, 0.4)
            .key("k1")
            .args(refund_args("45"))
            .http(200)
            .object("re_1", "succeeded")),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            0.3,
            4500,
            "usd",
        )),
    ];
    let v = check("usd cents", &events, "i1", at(MIN), "completed / none / -");
    assert_eq!(v.objects[0].amount, Decimal::parse("45.00"));

    let yen = r#"{"order_id":"1042","amount":4500,"currency":"JPY"}"#.to_string();
    let events = [
        ev(attempt("i2", R, 0.0, 0.4)
            .key("k2")
            .args(yen)
            .http(200)
            .object("re_2", "succeeded")),
        ev(stripe_refund(
            Some("i2"),
            "re_2",
            "succeeded",
            0.3,
            4500,
            "jpy",
        )),
    ];
    check(
        "zero-decimal yen",
        &events,
        "i2",
        at(MIN),
        "completed / none / -",
    );
}

#[test]
fn effect_differs_from_the_intent() {
    let events = [
        ev(attempt("i1", R, 0.0, 0.4)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "succeeded")),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            0.3,
            4000,
            "usd",
        )),
    ];
    let v = check(
        "wrong amount",
        &events,
        "i1",
        at(MIN),
        "unknown / escalate / effect_mismatch",
    );
    assert!(
        v.findings[0].detail.contains("amount"),
        "{}",
        v.findings[0].detail
    );
}

#[test]
fn timeout_told_failed_is_misreported() {
    let events = [ev(attempt("i1", R, 0.0, 30.0)
        .key("k1")
        .args(refund_args("45.00"))
        .timeout()
        .told("failed"))];
    check(
        "told failed on a timeout",
        &events,
        "i1",
        at(2.0 * MIN),
        "unknown / retry_same_key / misreported_outcome",
    );
}

#[test]
fn told_failed_on_a_committed_object_is_misreported() {
    let events = [
        ev(attempt("i1", R, 0.0, 0.4)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "succeeded")
            .told("failed")),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            0.3,
            4500,
            "usd",
        )),
    ];
    check(
        "told failed on success",
        &events,
        "i1",
        at(MIN),
        "completed / none / misreported_outcome",
    );
}

#[test]
fn timed_out_attempt_completed_by_the_record() {
    let events = [
        timeout("i1", 0.0, "k1"),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            20.0,
            4500,
            "usd",
        )),
    ];
    let v = check(
        "record outranks the timeout",
        &events,
        "i1",
        at(2.0 * MIN),
        "completed / none / -",
    );
    assert_eq!(
        v.attempts[0].class,
        AttemptClass::Unknown,
        "the attempt stays unknown; the intent completes"
    );
}

#[test]
fn record_links_by_key_alone() {
    let events = [
        timeout("i1", 0.0, "k1"),
        ev(with_key(
            stripe_refund(None, "re_1", "succeeded", 20.0, 4500, "usd"),
            "k1",
        )),
    ];
    check(
        "linked by key",
        &events,
        "i1",
        at(2.0 * MIN),
        "completed / none / -",
    );
    // And in the other order: the record waits for the key, then joins.
    let reversed = [events[1].clone(), events[0].clone()];
    check(
        "linked by key, record first",
        &reversed,
        "i1",
        at(2.0 * MIN),
        "completed / none / -",
    );
}

#[test]
fn orphan_record_after_grace() {
    let events = [ev(stripe_refund(
        None,
        "re_9",
        "succeeded",
        0.0,
        4500,
        "usd",
    ))];
    check(
        "orphan, in grace",
        &events,
        "orphan:re_9",
        at(MIN),
        "completed / none / -",
    );
    check(
        "orphan, after grace",
        &events,
        "orphan:re_9",
        at(11.0 * MIN),
        "completed / none / orphan_record",
    );
}

#[test]
fn stuck_pending() {
    let events = [ev(attempt("i1", R, 0.0, 0.5)
        .key("k1")
        .args(refund_args("45.00"))
        .http(200)
        .object("re_1", "requires_action"))];
    check(
        "pending in time",
        &events,
        "i1",
        at(HOUR),
        "pending / wait / -",
    );
    check(
        "stuck pending",
        &events,
        "i1",
        at(2.0 * HOUR + 1.0),
        "pending / wait / stuck_pending",
    );
}

#[test]
fn next_change_reports_the_next_deadline() {
    let events = [timeout("i1", 0.0, "k1")];
    let (v, _) = verdict_of(&events, "i1", at(10.0));
    assert_eq!(
        v.next_change,
        Some(at(60.0)),
        "max_in_flight passing turns wait into retry_same_key"
    );
    let (v, _) = verdict_of(&events, "i1", at(2.0 * MIN));
    assert_eq!(
        v.next_change,
        Some(at(15.0 * MIN)),
        "then the unknown deadline"
    );
    let (v, _) = verdict_of(&events, "i1", at(16.0 * MIN));
    assert_eq!(
        v.next_change,
        Some(at(23.0 * HOUR)),
        "then the safe retry window closing"
    );
    let (v, _) = verdict_of(&events, "i1", at(24.0 * HOUR));
    assert_eq!(v.next_change, None);
    // Re-auditing exactly at each reported instant shows the change it announced.
    let (before, _) = verdict_of(&events, "i1", at(59.999));
    let (after, _) = verdict_of(&events, "i1", at(60.0));
    assert_eq!(
        (before.decision, after.decision),
        (Decision::Wait, Decision::RetrySameKey)
    );
    let (settled, _) = verdict_of(
        &[
            events[0].clone(),
            ev(stripe_refund(
                Some("i1"),
                "re_1",
                "succeeded",
                5.0,
                4500,
                "usd",
            )),
        ],
        "i1",
        at(10.0),
    );
    assert_eq!(
        settled.next_change, None,
        "a settled intent has no deadline"
    );
}

#[test]
fn conflict_in_flight_means_wait() {
    let events = [ev(attempt("i1", R, 0.0, 0.1)
        .key("k1")
        .args(refund_args("45.00"))
        .http(409))];
    check("conflict", &events, "i1", at(10.0), "unknown / wait / -");
    check(
        "conflict, later",
        &events,
        "i1",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
}

#[test]
fn a_terminal_record_outranks_a_later_pending_response() {
    // Stripe's event carries whole seconds; the agent's clock put the pending response later.
    let events = [
        ev(attempt("i1", R, 0.0, 0.3)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "pending")),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            0.0,
            4500,
            "usd",
        )),
    ];
    check(
        "terminal outranks a later pending",
        &events,
        "i1",
        at(3.0 * HOUR),
        "completed / none / -",
    );
}

#[test]
fn an_object_a_read_found_links_its_records() {
    let events = [
        timeout("i1", 0.0, "k1"),
        ev(readback("i1", "list_refunds", 2.0 * MIN, &["re_1"])),
        // The downstream's record names neither the intent nor the key.
        ev(stripe_refund(
            None,
            "re_1",
            "succeeded",
            3.0 * MIN,
            4500,
            "usd",
        )),
    ];
    // The read is a lead, not proof (DESIGN.md "Evidence attribution" 3): while the key is
    // fresh a same-key retry settles whose refund it is; past the unknown deadline a person
    // looks.
    check(
        "found by a read",
        &events,
        "i1",
        at(5.0 * MIN),
        "unknown / retry_same_key / -",
    );
    check(
        "found by a read, later",
        &events,
        "i1",
        at(20.0 * MIN),
        "unknown / escalate / unresolved_unknown",
    );
    let mut ledger = reckon::audit::Ledger::new();
    for e in &events {
        ledger.add(e.clone());
    }
    assert!(
        ledger.history("orphan:re_1").is_none(),
        "the record is not an orphan"
    );
}

#[test]
fn a_wrapper_span_without_a_contract_does_not_hide_the_tools_contract() {
    let events = [
        ev(attempt("i1", "refund_executor.run", -0.001, 31.0)),
        timeout("i1", 0.0, "k1"),
    ];
    let v = check(
        "wrapper span first",
        &events,
        "i1",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert_eq!(v.contract.as_deref(), Some("payments.refund"));
}

#[test]
fn only_conflicts_still_reach_the_unknown_deadline() {
    let events = [ev(attempt("i1", R, 0.0, 0.1)
        .key("k1")
        .args(refund_args("45.00"))
        .http(409))];
    check(
        "conflict past the deadline",
        &events,
        "i1",
        at(16.0 * MIN),
        "unknown / escalate / unresolved_unknown",
    );
}

#[test]
fn a_failed_object_beside_a_pending_one_stays_pending() {
    // DESIGN.md's table reads failed_after_execution here; the pending object may still succeed,
    // so telling the executor `new_intent` would invite a second refund. reckon says `pending`.
    let events = [
        ev(attempt("i1", R, 0.0, 0.4)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "failed")),
        ev(attempt("i1", R, 10.0, 0.4)
            .key("k2")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_2", "pending")),
    ];
    check(
        "failed beside pending",
        &events,
        "i1",
        at(MIN),
        "pending / escalate / new_key_retry, resend_after_terminal",
    );
}
