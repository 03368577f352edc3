//! `Verdict::settled_at`: when an intent reached its settled state, from evidence (what time to
//! settle counts), not when reckon audited it.

use super::support::*;
use reckon::model::*;

fn settled(events: &[Event], now: f64) -> (IntentState, Option<Timestamp>) {
    let (v, _) = verdict_of(events, "i1", at(now));
    (v.state, v.settled_at)
}

fn record(status: &str, secs: f64) -> Event {
    ev(stripe_refund(Some("i1"), "re_1", status, secs, 4500, "usd"))
}

#[test]
fn a_refund_settles_when_the_downstream_first_says_it_succeeded() {
    // The webhook repeats itself later; a pending record came first. The first record in the
    // final status is the instant, whatever the audit time.
    let events = [
        ev(timed_out("i1", 0.0, "k1", "45.00")),
        record("pending", 20.0),
        record("succeeded", 50.0),
        record("succeeded", 70.0),
    ];
    assert_eq!(
        settled(&events, 3600.0),
        (IntentState::Completed, Some(at(50.0)))
    );
}

#[test]
fn a_record_outranks_the_response_that_returned_the_object() {
    let answered = ev(refund("i1", 0.0, "k1", "45.00")
        .http(200)
        .object("re_1", "succeeded"));
    assert_eq!(
        settled(std::slice::from_ref(&answered), 60.0),
        (IntentState::Completed, Some(at(0.4))),
        "no record yet: the response is the evidence"
    );
    assert_eq!(
        settled(&[answered, record("succeeded", 5.0)], 60.0),
        (IntentState::Completed, Some(at(5.0)))
    );
}

#[test]
fn a_failed_refund_settles_when_it_failed() {
    let events = [
        ev(timed_out("i1", 0.0, "k1", "45.00")),
        record("pending", 10.0),
        record("failed", 30.0),
    ];
    assert_eq!(
        settled(&events, 3600.0),
        (IntentState::FailedAfterExecution, Some(at(30.0)))
    );
}

#[test]
fn a_rejected_intent_settles_with_its_last_rejection() {
    let events = [
        ev(refund("i1", 0.0, "k1", "45.00").http(400)),
        ev(refund("i1", 5.0, "k1", "45.00").http(400)),
    ];
    assert_eq!(
        settled(&events, 60.0),
        (IntentState::FailedBeforeExecution, Some(at(5.4)))
    );
}

#[test]
fn unknown_and_pending_intents_have_not_settled() {
    assert_eq!(
        settled(&[ev(timed_out("i1", 0.0, "k1", "45.00"))], 60.0),
        (IntentState::Unknown, None)
    );
    assert_eq!(
        settled(
            &[
                ev(timed_out("i1", 0.0, "k1", "45.00")),
                record("pending", 10.0)
            ],
            60.0
        ),
        (IntentState::Pending, None)
    );
}
