//! Retention's summary judged by the audit (`reckon::store::retention`): what stands for an
//! intent's expired raw events says what its verdict said, and a late event is judged against
//! it (README "Retention").

use super::support::*;
use reckon::codec::VerdictDoc;
use reckon::model::*;
use reckon::store::retention;

const CUT: f64 = 5_000.0;

fn doc_of(events: &[Event]) -> VerdictDoc {
    VerdictDoc::from_verdict(&verdict_of(events, "i1", at(10_000.0)).0)
}

/// What a summary stands for is what the verdict said: judged again, alone, it concludes the
/// same state, decision, attempts' classes and objects; the arguments are no longer known.
#[test]
fn a_summary_judged_again_says_what_the_verdict_said() {
    let history = [
        ev(attempt("i1", "issue_refund", 1.0, 30.0)
            .key("k1")
            .timeout()
            .args(refund_args("45.00"))),
        ev(readback("i1", "get_refund", 40.0, &["re_1"])),
        ev(attempt("i1", "issue_refund", 50.0, 1.0)
            .key("k1")
            .http(200)
            .object("re_1", "succeeded")),
        ev(record(Some("i1"), "re_9", "succeeded", 60.0)),
    ];
    let before = doc_of(&history);
    let summary = retention::summary(&before, at(CUT)).unwrap();
    let after = doc_of(&summary);
    assert_eq!(
        (&after.state, &after.decision, &after.objects),
        (&before.state, &before.decision, &before.objects)
    );
    let classes = |d: &VerdictDoc| {
        d.attempts
            .iter()
            .map(|a| a.class.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(classes(&after), classes(&before));
    assert_eq!(
        after
            .attempts
            .iter()
            .map(|a| a.arguments.as_deref())
            .collect::<Vec<_>>(),
        [Some("redacted"), Some("absent")],
        "captured arguments are no longer known; absent ones stay absent"
    );
    let record_of = |object: &str| {
        summary.iter().find_map(|e| match e {
            Event::Record(r) if r.object_id == object => Some(r.clone()),
            _ => None,
        })
    };
    assert_eq!(
        record_of("re_1").map(|r| r.intent_id),
        Some(None),
        "linked by the response that returned it"
    );
    assert_eq!(
        record_of("re_9").map(|r| r.intent_id),
        Some(Some("i1".into())),
        "linked by its record alone: the summary says whose it is"
    );
}

/// The point of it: a second refund under an intent whose events expired is still a second
/// refund.
#[test]
fn a_late_second_refund_against_a_summary_is_a_duplicate() {
    let history = [ev(attempt("i1", "issue_refund", 1.0, 1.0)
        .key("k1")
        .http(200)
        .object("re_1", "succeeded"))];
    let mut events = retention::summary(&doc_of(&history), at(CUT)).unwrap();
    events.push(ev(attempt("i1", "issue_refund", 9_000.0, 1.0)
        .key("k2")
        .http(200)
        .object("re_2", "succeeded")));
    check(
        "a second refund after retention",
        &events,
        "i1",
        at(10_000.0),
        "completed / escalate / duplicate_effect, new_key_retry, resend_after_terminal",
    );
}
