//! `check`: run the ledger, the audit and the escalation book over a scenario and compare with
//! an expectation written as text; and the builders every suite shares (`src/test_builders.rs`).

use reckon::audit::{self, Ledger};
use reckon::contract::Contracts;
use reckon::escalation::EscalationBook;
use reckon::model::*;

#[path = "../../src/test_builders.rs"]
mod builders;
pub use builders::*;

/// Run every event through a ledger, audit `intent` at `now`, and pass the verdict through an
/// escalation book, as the engine does.
pub fn verdict_of(events: &[Event], intent: &str, now: Timestamp) -> (Verdict, EscalationBook) {
    verdict_under(&std::sync::Arc::new(contracts()), events, intent, now)
}

/// [`verdict_of`] under the given contracts.
pub fn verdict_under(
    contracts: &std::sync::Arc<Contracts>,
    events: &[Event],
    intent: &str,
    now: Timestamp,
) -> (Verdict, EscalationBook) {
    let mut ledger = Ledger::with_contracts(contracts.clone());
    for e in events {
        ledger.add(e.clone());
    }
    let h = ledger
        .history(intent)
        .unwrap_or_else(|| panic!("no events link to intent {intent}"));
    let mut v = audit::audit(&h, Ledger::contract_for(&h, contracts), now);
    let mut book = EscalationBook::new();
    book.observe(&v);
    book.apply(&mut v);
    (v, book)
}

/// A refund of `amount` by `intent` under `key`, sent at `start` and answered 0.4 s later.
pub fn refund(intent: &str, start: f64, key: &str, amount: &str) -> Attempt {
    attempt(intent, "issue_refund", start, 0.4)
        .key(key)
        .args(refund_args(amount))
}

/// [`refund`] that timed out after 30 s.
pub fn timed_out(intent: &str, start: f64, key: &str, amount: &str) -> Attempt {
    attempt(intent, "issue_refund", start, 30.0)
        .key(key)
        .args(refund_args(amount))
        .timeout()
}

/// The ids of the objects a verdict links.
pub fn object_ids(v: &Verdict) -> Vec<&str> {
    v.objects.iter().map(|o| o.object_id.as_str()).collect()
}

/// What a verdict shows, as one line: `state / decision / finding, finding` (`-`: none).
pub fn summary(v: &Verdict) -> String {
    summary_line(
        v.state.as_str(),
        v.decision.as_str(),
        v.findings.iter().map(|f| f.kind.as_str()),
    )
}

/// The one assertion every scenario makes. It also checks that the verdict does not depend on
/// the order events arrived in, nor on re-sent copies of them.
pub fn check(
    name: &str,
    events: &[Event],
    intent: &str,
    now: Timestamp,
    expected: &str,
) -> Verdict {
    let (v, _) = verdict_of(events, intent, now);
    assert_eq!(
        summary(&v),
        normalize_expectation(expected),
        "scenario `{name}`, intent {intent}:\n{v:#?}"
    );

    let mut reordered: Vec<Event> = events.iter().rev().cloned().collect();
    reordered.extend(events.iter().cloned());
    let (again, _) = verdict_of(&reordered, intent, now);
    assert_eq!(
        again, v,
        "scenario `{name}`: reversed and duplicated events gave another verdict"
    );
    v
}
