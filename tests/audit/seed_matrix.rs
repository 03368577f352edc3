//! DESIGN.md "The seed matrix": every row of the first note's test matrix and every test of the
//! second note, as data.

use super::support::*;
use reckon::model::*;

const R: &str = "issue_refund";
const D: &str = "create_bill_draft";

#[test]
fn rejected_before_execution() {
    let events = [ev(attempt("i1", R, 0.0, 0.2)
        .key("k1")
        .args(refund_args("-5"))
        .http(422)
        .error("invalid_request_error")
        .told("rejected"))];
    check(
        "rejected before execution",
        &events,
        "i1",
        at(MIN),
        "failed_before_execution / fix_input / -",
    );
}

#[test]
fn response_lost_after_commit_retried_with_same_key() {
    let events = [
        ev(attempt("i1", R, 0.0, 30.0)
            .key("k1")
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown")),
        // The saved response is replayed (assumption A): the same object, not a second one.
        ev(attempt("i1", R, 31.0, 0.4)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "succeeded")
            .told("succeeded")),
        ev(with_key(
            stripe_refund(Some("i1"), "re_1", "succeeded", 0.5, 4500, "usd"),
            "k1",
        )),
    ];
    let v = check(
        "response lost after commit, retried",
        &events,
        "i1",
        at(5.0 * MIN),
        "completed / none / -",
    );
    assert_eq!(v.objects.len(), 1);
}

#[test]
fn response_lost_after_commit_not_yet_retried() {
    let events = [ev(attempt("i1", R, 0.0, 30.0)
        .key("k1")
        .args(refund_args("45.00"))
        .timeout()
        .told("unknown"))];
    // Inside max_in_flight the original may still commit: wait.
    check(
        "lost response, in flight",
        &events,
        "i1",
        at(40.0),
        "unknown / wait / -",
    );
    let v = check(
        "lost response, not retried",
        &events,
        "i1",
        at(2.0 * MIN),
        "unknown / retry_same_key / -",
    );
    assert_eq!(v.safe_retry_until, Some(at(23.0 * HOUR)));
    assert_eq!(
        v.attempts[0].class,
        AttemptClass::Unknown,
        "a timeout is never failed"
    );
    // Nobody acted: at the unknown deadline it escalates on its own.
    check(
        "lost response, past deadline",
        &events,
        "i1",
        at(15.0 * MIN),
        "unknown / escalate / unresolved_unknown",
    );
}

#[test]
fn refund_pending_later_failed() {
    let mut events = vec![
        ev(attempt("i1", R, 0.0, 0.5)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "pending")
            .told("pending")),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "pending",
            0.4,
            4500,
            "usd",
        )),
    ];
    let v = check(
        "refund pending",
        &events,
        "i1",
        at(5.0 * MIN),
        "pending / wait / -",
    );
    assert_eq!(v.attempts[0].class, AttemptClass::Recorded);
    events.push(ev(stripe_refund(
        Some("i1"),
        "re_1",
        "failed",
        10.0 * MIN,
        4500,
        "usd",
    )));
    check(
        "refund failed",
        &events,
        "i1",
        at(11.0 * MIN),
        "failed_after_execution / new_intent / -",
    );
}

#[test]
fn original_still_running_empty_readback_then_object() {
    let mut events = vec![
        ev(attempt("i1", R, 0.0, 30.0)
            .key("k1")
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown")),
        ev(readback("i1", "list_refunds", 35.0, &[])),
    ];
    // The empty read-back at T proves nothing: the original can commit until 60s.
    check("at T", &events, "i1", at(36.0), "unknown / wait / -");
    events.push(ev(stripe_refund(
        Some("i1"),
        "re_1",
        "succeeded",
        50.0,
        4500,
        "usd",
    )));
    let v = check(
        "at the end",
        &events,
        "i1",
        at(5.0 * MIN),
        "completed / none / -",
    );
    assert_eq!(v.objects.len(), 1);
}

#[test]
fn original_still_running_resend_after_empty_readback() {
    let events = [
        ev(attempt("i1", R, 0.0, 30.0)
            .key("k1")
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown")),
        ev(readback("i1", "list_refunds", 35.0, &[])),
        // Concluding "not done", the executor resends under a fresh key and makes a second refund.
        ev(attempt("i1", R, 36.0, 0.4)
            .key("k2")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_2", "succeeded")
            .told("succeeded")),
        ev(stripe_refund(
            Some("i1"),
            "re_2",
            "succeeded",
            36.3,
            4500,
            "usd",
        )),
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
        "resend after empty read-back",
        &events,
        "i1",
        at(5.0 * MIN),
        "completed / escalate / inconclusive_readback_acted_on, new_key_retry, duplicate_effect",
    );
}

#[test]
fn concurrent_duplicates_same_key_one_conflict() {
    let events = [
        ev(attempt("i1", R, 0.0, 2.0)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "succeeded")
            .told("succeeded")),
        // Assumption B: the second worker's send conflicts while the first executes, and is not saved.
        ev(attempt("i1", R, 0.1, 0.1)
            .key("k1")
            .args(refund_args("45.00"))
            .http(409)
            .error("idempotency_key_in_use")
            .told("pending")),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            1.9,
            4500,
            "usd",
        )),
    ];
    let v = check(
        "concurrent duplicates",
        &events,
        "i1",
        at(MIN),
        "completed / none / -",
    );
    assert_eq!(
        v.attempts.iter().map(|a| a.class).collect::<Vec<_>>(),
        [AttemptClass::Succeeded, AttemptClass::Conflict]
    );
}

#[test]
fn same_key_changed_parameters() {
    let events = [
        ev(attempt("i1", R, 0.0, 30.0)
            .key("k1")
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown")),
        // The model re-issues 40.00 under the same key; the downstream refuses (assumption C).
        ev(attempt("i1", R, 40.0, 0.2)
            .key("k1")
            .args(refund_args("40.00"))
            .http(400)
            .error("idempotency_error")
            .told("rejected")),
    ];
    check(
        "same key, changed parameters",
        &events,
        "i1",
        at(2.0 * MIN),
        "unknown / escalate / key_reuse_mismatch",
    );
}

#[test]
fn retry_after_key_expiry() {
    let events = [
        ev(attempt("i1", R, 0.0, 30.0)
            .key("k1")
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown")),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            0.5,
            4500,
            "usd",
        )),
        // 25 hours later the key is pruned (assumption D) and the same key executes again.
        ev(attempt("i1", R, 25.0 * HOUR, 0.4)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_2", "succeeded")
            .told("succeeded")),
        ev(stripe_refund(
            Some("i1"),
            "re_2",
            "succeeded",
            25.0 * HOUR + 0.3,
            4500,
            "usd",
        )),
    ];
    check(
        "retry after key expiry",
        &events,
        "i1",
        at(25.0 * HOUR + MIN),
        "completed / escalate / expired_key_retry, duplicate_effect",
    );

    // Before the late retry the record alone settles it.
    check(
        "before the late retry",
        &events[..2],
        "i1",
        at(MIN),
        "completed / none / -",
    );
    // Without a second object the late retry is still the breach.
    let replayed = [
        events[0].clone(),
        events[1].clone(),
        ev(attempt("i1", R, 25.0 * HOUR, 0.4)
            .key("k1")
            .args(refund_args("45.00"))
            .http(200)
            .object("re_1", "succeeded")),
    ];
    check(
        "retry after key expiry, replayed",
        &replayed,
        "i1",
        at(25.0 * HOUR + MIN),
        "completed / escalate / expired_key_retry",
    );
}

#[test]
fn two_intended_actions_equal_parameters() {
    let events = [
        ev(attempt("i1", R, 0.0, 0.4)
            .key("k1")
            .args(refund_args("22.50"))
            .http(200)
            .object("re_1", "succeeded")),
        ev(stripe_refund(
            Some("i1"),
            "re_1",
            "succeeded",
            0.3,
            2250,
            "usd",
        )),
        ev(attempt("i2", R, 5.0, 0.4)
            .key("k2")
            .args(refund_args("22.50"))
            .http(200)
            .object("re_2", "succeeded")),
        ev(stripe_refund(
            Some("i2"),
            "re_2",
            "succeeded",
            5.3,
            2250,
            "usd",
        )),
    ];
    let a = check(
        "two intents, first",
        &events,
        "i1",
        at(MIN),
        "completed / none / -",
    );
    let b = check(
        "two intents, second",
        &events,
        "i2",
        at(MIN),
        "completed / none / -",
    );
    assert_eq!(
        (a.objects.len(), b.objects.len()),
        (1, 1),
        "equal parameters never merge two intents"
    );
}

#[test]
fn no_idempotency_contract_timeout() {
    let events = [ev(attempt("i1", "send_email", 0.0, 30.0)
        .timeout()
        .told("unknown"))];
    let v = check(
        "no idempotency contract",
        &events,
        "i1",
        at(MIN),
        "unknown / escalate / no_idempotency_contract",
    );
    assert_eq!(v.safe_retry_until, None);
    // A tool with no contract at all, seen through reckon.intent.id, is the same case.
    let events = [ev(attempt("i2", "wire_transfer", 0.0, 30.0).timeout())];
    let v = check(
        "no contract at all",
        &events,
        "i2",
        at(MIN),
        "unknown / escalate / no_idempotency_contract",
    );
    assert_eq!(v.contract, None);
}

// The second note: seven tests to pass before retrying a tool call (invoice drafts).

#[test]
fn drafts_1_same_key_twice_one_draft() {
    let events = [
        ev(attempt("d1", D, 0.0, 0.3)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_1", "created")),
        ev(attempt("d1", D, 5.0, 0.3)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_1", "created")),
        ev(major(
            record(Some("d1"), "dr_1", "created", 0.2),
            "120.00",
            "EUR",
            "ACME",
        )),
    ];
    // One draft; a same-key retry inside the key's retention can make no second one, so it
    // is no resend_after_terminal (DESIGN.md "Findings").
    let v = check("drafts 1", &events, "d1", at(MIN), "completed / none / -");
    assert_eq!(v.objects.len(), 1);
}

#[test]
fn drafts_2_commit_then_response_dropped_retry() {
    let events = [
        ev(attempt("d1", D, 0.0, 10.0)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .error("connection_reset")),
        ev(attempt("d1", D, 11.0, 0.3)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_1", "created")),
        ev(major(
            record(Some("d1"), "dr_1", "created", 0.2),
            "120.00",
            "EUR",
            "ACME",
        )),
    ];
    check("drafts 2", &events, "d1", at(MIN), "completed / none / -");
}

#[test]
fn drafts_3_fail_before_commit_then_retry_completes_once() {
    let events = [
        ev(attempt("d1", D, 0.0, 0.1)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(503)),
        ev(attempt("d1", D, 2.0, 0.3)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_1", "created")),
        ev(major(
            record(Some("d1"), "dr_1", "created", 2.2),
            "120.00",
            "EUR",
            "ACME",
        )),
    ];
    let v = check("drafts 3", &events, "d1", at(MIN), "completed / none / -");
    assert_eq!(
        v.attempts[0].class,
        AttemptClass::Unknown,
        "a 503 is not a known failure"
    );
}

#[test]
fn drafts_4_completed_key_reused_with_changed_supplier() {
    let events = [
        ev(attempt("d1", D, 0.0, 0.3)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_1", "created")),
        ev(attempt("d1", D, 9.0, 0.1)
            .key("dk1")
            .args(draft_args("Globex", "120.00"))
            .http(422)
            .error("idempotency_key_mismatch")),
        ev(major(
            record(Some("d1"), "dr_1", "created", 0.2),
            "120.00",
            "EUR",
            "ACME",
        )),
    ];
    let v = check(
        "drafts 4",
        &events,
        "d1",
        at(MIN),
        "completed / escalate / key_reuse_mismatch",
    );
    assert_eq!(v.objects.len(), 1, "no second draft");
}

#[test]
fn drafts_5_simultaneous_same_key() {
    let events = [
        ev(attempt("d1", D, 0.0, 1.0)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_1", "created")),
        // The loser waited on the winner and observed its result.
        ev(attempt("d1", D, 0.05, 1.0)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_1", "created")),
        ev(major(
            record(Some("d1"), "dr_1", "created", 0.9),
            "120.00",
            "EUR",
            "ACME",
        )),
    ];
    check("drafts 5", &events, "d1", at(MIN), "completed / none / -");
}

#[test]
fn drafts_6_identical_fields_two_keys_two_drafts() {
    let events = [
        ev(attempt("d1", D, 0.0, 0.3)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_1", "created")),
        ev(attempt("d2", D, 60.0, 0.3)
            .key("dk2")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_2", "created")),
        ev(major(
            record(Some("d1"), "dr_1", "created", 0.2),
            "120.00",
            "EUR",
            "ACME",
        )),
        ev(major(
            record(Some("d2"), "dr_2", "created", 60.2),
            "120.00",
            "EUR",
            "ACME",
        )),
    ];
    check(
        "drafts 6, first",
        &events,
        "d1",
        at(5.0 * MIN),
        "completed / none / -",
    );
    check(
        "drafts 6, second",
        &events,
        "d2",
        at(5.0 * MIN),
        "completed / none / -",
    );
}

#[test]
fn drafts_7_timeout_beyond_key_retention() {
    let events = [ev(attempt("d1", D, 0.0, 30.0)
        .key("dk1")
        .args(draft_args("ACME", "120.00"))
        .timeout())];
    // Past the safe window no resubmission is safe: reconcile, and by now a person is on it.
    let (pure, _) = {
        let contracts = contracts();
        let mut ledger = reckon::audit::Ledger::new();
        ledger.add(events[0].clone());
        let h = ledger.history("d1").unwrap();
        (
            reckon::audit::audit(&h, contracts.for_tool(D), at(25.0 * HOUR)),
            (),
        )
    };
    assert_eq!(pure.decision, Decision::Reconcile);
    check(
        "drafts 7",
        &events,
        "d1",
        at(25.0 * HOUR),
        "unknown / escalate / unresolved_unknown",
    );
    // A runner that resubmits anyway is caught.
    let resubmitted = [
        events[0].clone(),
        ev(attempt("d1", D, 25.0 * HOUR, 0.3)
            .key("dk1")
            .args(draft_args("ACME", "120.00"))
            .http(201)
            .object("dr_2", "created")),
    ];
    check(
        "drafts 7, resubmitted",
        &resubmitted,
        "d1",
        at(25.0 * HOUR + MIN),
        "completed / escalate / expired_key_retry",
    );
}
