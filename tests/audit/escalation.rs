//! The escalation state machine: open on high/critical, one open per intent, later findings
//! join, claim and resolve, a new finding after resolution opens a new one.

use super::support::*;
use reckon::audit::{self, Ledger};
use reckon::escalation::{EscalationBook, EscalationError};
use reckon::model::*;

const R: &str = "issue_refund";

fn audit_all(ledger: &Ledger, intent: &str, now: Timestamp) -> Verdict {
    let h = ledger.history(intent).unwrap();
    audit::audit(&h, Ledger::contract_for(&h, &contracts()), now)
}

#[test]
fn lifecycle_open_join_claim_resolve_reopen() {
    let mut ledger = Ledger::new();
    let mut book = EscalationBook::new();
    ledger.add(ev(attempt("i1", R, 0.0, 30.0)
        .key("k1")
        .args(refund_args("45.00"))
        .timeout()));
    ledger.add(ev(attempt("i1", R, 31.0, 30.0)
        .key("k2")
        .args(refund_args("45.00"))
        .timeout()));

    // new_key_retry (high) opens one.
    let v = audit_all(&ledger, "i1", at(2.0 * MIN));
    let opened = book
        .observe(&v)
        .expect("a high finding opens an escalation");
    assert_eq!(
        (opened.status, opened.severity),
        (EscalationStatus::Open, Severity::High)
    );
    assert_eq!(
        opened.opened_at,
        at(31.0),
        "opened at the finding's instant, not the audit's"
    );
    assert!(
        book.observe(&v).is_none(),
        "re-auditing the same evidence changes nothing"
    );

    // A later critical finding joins the open one.
    ledger.add(ev(stripe_refund(
        Some("i1"),
        "re_1",
        "succeeded",
        40.0,
        4500,
        "usd",
    )));
    ledger.add(ev(stripe_refund(
        Some("i1"),
        "re_2",
        "succeeded",
        70.0,
        4500,
        "usd",
    )));
    let mut v = audit_all(&ledger, "i1", at(3.0 * MIN));
    let joined = book.observe(&v).expect("the duplicate joins");
    assert_eq!(joined.id, opened.id);
    assert_eq!(joined.severity, Severity::Critical);
    assert_eq!(joined.findings.len(), 2);
    book.apply(&mut v);
    assert_eq!(
        (v.decision, v.escalation_id.as_deref()),
        (Decision::Escalate, Some(opened.id.as_str()))
    );

    // Claim, claim again by the same person (a retry), by another (refused), resolve.
    let claimed = book.claim(&opened.id, "ana", at(4.0 * MIN)).unwrap();
    assert_eq!(
        (claimed.status, claimed.claimed_by.as_deref()),
        (EscalationStatus::Claimed, Some("ana"))
    );
    assert_eq!(
        book.claim(&opened.id, "ana", at(4.5 * MIN)).as_ref(),
        Ok(&claimed),
        "a retried claim changes nothing"
    );
    assert_eq!(
        book.claim(&opened.id, "bo", at(5.0 * MIN)),
        Err(EscalationError::AlreadyClaimed {
            id: opened.id.clone(),
            by: "ana".into()
        })
    );
    let resolved = book
        .resolve(
            &opened.id,
            "ana",
            "refunded_twice_reversed_one",
            Some("voided re_2"),
            at(6.0 * MIN),
            Some(&v),
        )
        .unwrap();
    assert_eq!(resolved.status, EscalationStatus::Resolved);
    assert_eq!(resolved.resolved_at, Some(at(6.0 * MIN)));
    assert!(resolved.version > joined.version);
    assert_eq!(
        book.resolve(&opened.id, "ana", "again", None, at(7.0 * MIN), Some(&v)),
        Err(EscalationError::AlreadyResolved(opened.id.clone()))
    );

    // After resolution the decision falls back to the evidence's.
    let mut v = audit_all(&ledger, "i1", at(7.0 * MIN));
    assert!(
        book.observe(&v).is_none(),
        "the same findings do not reopen"
    );
    book.apply(&mut v);
    assert_eq!(v.decision, Decision::None);
    assert_eq!(v.escalation_id.as_deref(), Some(opened.id.as_str()));

    // A third refund after resolution is a new critical finding: a new escalation.
    ledger.add(ev(stripe_refund(
        Some("i1"),
        "re_3",
        "succeeded",
        8.0 * MIN,
        4500,
        "usd",
    )));
    let v = audit_all(&ledger, "i1", at(9.0 * MIN));
    let second = book.observe(&v).expect("new critical after resolution");
    assert_ne!(second.id, opened.id);
    // It carries the whole picture the person needs, the resolved findings included.
    let held: Vec<(FindingKind, &str)> = second
        .findings
        .iter()
        .map(|f| (f.kind, f.subject.as_str()))
        .collect();
    assert!(
        held.contains(&(FindingKind::DuplicateEffect, "re_3")),
        "{held:?}"
    );
    assert!(
        held.contains(&(FindingKind::DuplicateEffect, "re_2")),
        "{held:?}"
    );
    assert_eq!(second.opened_at, at(8.0 * MIN), "opened when re_3 appeared");
    assert_eq!(
        book.open_for("i1").map(|e| e.id.clone()),
        Some(second.id.clone())
    );
}

#[test]
fn medium_findings_do_not_escalate() {
    let mut ledger = Ledger::new();
    ledger.add(ev(attempt("i1", R, 0.0, 30.0)
        .key("k1")
        .args(refund_args("45.00"))
        .timeout()
        .told("failed")));
    let v = audit_all(&ledger, "i1", at(2.0 * MIN));
    assert_eq!(v.findings.len(), 1);
    assert!(EscalationBook::new().observe(&v).is_none());
}

#[test]
fn restored_book_reaches_the_same_state() {
    let mut ledger = Ledger::new();
    let mut book = EscalationBook::new();
    ledger.add(ev(attempt("i1", R, 0.0, 30.0)
        .key("k1")
        .args(refund_args("45.00"))
        .timeout()));
    ledger.add(ev(attempt("i1", R, 40.0, 0.2)
        .key("k1")
        .args(refund_args("40.00"))
        .http(400)
        .error("idempotency_error")));
    let v = audit_all(&ledger, "i1", at(MIN));
    let e = book.observe(&v).unwrap();
    book.claim(&e.id, "ana", at(2.0 * MIN)).unwrap();

    let mut restored = EscalationBook::restore(book.all().cloned().collect::<Vec<_>>());
    assert!(
        restored.observe(&v).is_none(),
        "a restart does not open a second escalation"
    );
    assert_eq!(restored.get(&e.id), book.get(&e.id));
}

#[test]
fn claim_and_resolve_validate_input() {
    let mut book = EscalationBook::new();
    assert_eq!(
        book.claim("esc_nope_1", "ana", at(0.0)),
        Err(EscalationError::NotFound("esc_nope_1".into()))
    );
    let mut ledger = Ledger::new();
    ledger.add(ev(attempt("i1", "send_email", 0.0, 30.0).timeout()));
    let e = book.observe(&audit_all(&ledger, "i1", at(MIN))).unwrap();
    assert_eq!(
        book.claim(&e.id, " ", at(MIN)),
        Err(EscalationError::Missing("by"))
    );
    assert_eq!(
        book.resolve(&e.id, "ana", "", None, at(MIN), None),
        Err(EscalationError::Missing("resolution"))
    );
    // Resolving an unclaimed one is allowed.
    let resolved = book
        .resolve(
            &e.id,
            "ana",
            "sent_once_confirmed_with_customer",
            None,
            at(MIN),
            None,
        )
        .unwrap();
    assert_eq!(resolved.status, EscalationStatus::Resolved);
    assert_eq!(resolved.resolved_by.as_deref(), Some("ana"));
    assert_eq!(
        resolved.resolution.as_deref(),
        Some("sent_once_confirmed_with_customer")
    );
    assert_eq!(resolved.claimed_by, None);
}

/// A refund for the wrong amount, still pending: a person looks and resolves it. The refund
/// then succeeds: a new status, not new attempts or objects, so nobody is asked again, and the
/// evidence alone says `escalate` (an effect that differs from the intent). With nobody asked,
/// the decision is `reconcile` (read the downstream), never `escalate` with nothing open: that
/// left the executor waiting on nobody, and kept the intent from ever being at rest (found by
/// review).
#[test]
fn a_new_status_after_resolution_asks_nobody_and_says_reconcile() {
    let mut ledger = Ledger::new();
    let mut book = EscalationBook::new();
    ledger.add(ev(attempt("i9", R, 0.0, 30.0)
        .key("k9")
        .args(refund_args("45.00"))
        .timeout()));
    ledger.add(ev(stripe_refund(
        Some("i9"),
        "re_9",
        "pending",
        40.0,
        5000,
        "usd",
    )));
    let mut v = audit_all(&ledger, "i9", at(2.0 * MIN));
    let opened = book.observe(&v).expect("effect_mismatch is high");
    book.apply(&mut v);
    book.resolve(
        &opened.id,
        "ana",
        "amount_confirmed",
        None,
        at(3.0 * MIN),
        Some(&v),
    )
    .unwrap();

    ledger.add(ev(stripe_refund(
        Some("i9"),
        "re_9",
        "succeeded",
        4.0 * MIN,
        5000,
        "usd",
    )));
    let mut v = audit_all(&ledger, "i9", at(5.0 * MIN));
    assert_eq!(
        (v.state, v.decision),
        (IntentState::Unknown, Decision::Escalate),
        "the evidence alone"
    );
    assert!(book.observe(&v).is_none(), "a new status asks nobody again");
    book.apply(&mut v);
    assert_eq!(v.decision, Decision::Reconcile);
    assert!(book.open_for("i9").is_none());
}
