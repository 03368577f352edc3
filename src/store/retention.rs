//! What retention leaves of an intent's raw events: the evidence its kept verdict lists, as
//! events (DESIGN.md "Memory and history": raw events may expire, verdicts are kept).
//!
//! Retention used to delete an intent's events outright, so a late event (a refund that fails
//! weeks after it succeeded, an executor replaying an old intent id) was judged against nothing:
//! the new verdict replaced the kept one, its attempts gone, and a second refund under the old
//! intent was no `duplicate_effect`. Now both stores replace the expired events with the ones
//! [`summary`] rebuilds from the stored verdict, in the same write, so the intent's history in
//! the store is never empty and the late event is judged against everything the verdict said.
//!
//! The summary is smaller than what it replaces and says less:
//! - attempts keep their span, times, key, status, error type, object and reported outcome, but
//!   not their arguments: captured arguments become the redaction marker (they existed, and
//!   reckon no longer knows them), so parameter findings are not found again;
//! - read-backs keep their span, start and objects; their end is their start (a read-back that
//!   may have ended after a send now counts as ended before it: its objects are set aside rather
//!   than claimed, the cautious side) and what the executor concluded from them is gone;
//! - each object is one observation of its folded status, amount, currency and target, from
//!   `source = "retention"`, observed at its last sighting. It names the intent when nothing else
//!   in the summary links it (its records named the intent, or carried its key); an object the
//!   intent's responses returned links by them, and one its read-backs listed stays provisional
//!   (its owner may still show up).
//!
//! Pure: no store, no clock. Both stores call it on the verdict document they hold.

use crate::codec::{parse_rfc3339, VerdictDoc};
use crate::model::{
    Amount, Attempt, Decimal, Event, Readback, RecordObservation, ReportedOutcome, SpanRef,
    Timestamp, REDACTED_ARGUMENTS_JSON,
};

/// The `source` of the observations a summary makes of an intent's objects.
pub const SUMMARY_SOURCE: &str = "retention";

/// A stored verdict document that cannot be read back as events: the store keeps the raw events
/// of that intent rather than lose them.
#[derive(Debug, thiserror::Error)]
#[error("the verdict of {intent_id} cannot be summarised: {what}")]
pub struct Unreadable {
    pub intent_id: String,
    pub what: String,
}

/// The events that stand for an intent's expired history, from its stored verdict: its attempts
/// and read-backs that began before `cut`, and one observation per object it was linked to.
/// Events from `cut` on are not expired, and so not summarised.
pub fn summary(doc: &VerdictDoc, cut: Timestamp) -> Result<Vec<Event>, Unreadable> {
    let bad = |what: String| Unreadable {
        intent_id: doc.intent_id.clone(),
        what,
    };
    let time = |field: &str, s: &str| {
        parse_rfc3339(s).ok_or_else(|| bad(format!("{field} {s:?} is not an RFC 3339 time")))
    };
    let span = |trace: &str, span: &str| -> Result<SpanRef, Unreadable> {
        let mut r = SpanRef::default();
        hex::decode_to_slice(trace, &mut r.trace_id)
            .map_err(|e| bad(format!("trace_id {trace:?}: {e}")))?;
        hex::decode_to_slice(span, &mut r.span_id)
            .map_err(|e| bad(format!("span_id {span:?}: {e}")))?;
        Ok(r)
    };
    let outcome = |s: &Option<String>| match s.as_deref() {
        None => Ok(None),
        Some(s) => ReportedOutcome::parse(s)
            .map(Some)
            .ok_or_else(|| bad(format!("reported_outcome {s:?}"))),
    };
    let tool = doc.tool.clone().unwrap_or_default();
    let mut out = Vec::new();
    let mut linked_otherwise: Vec<&str> = Vec::new();
    for a in &doc.attempts {
        linked_otherwise.extend(a.object_id.as_deref());
        let start = time("attempt start", &a.start)?;
        if start >= cut {
            continue;
        }
        let arguments = match a.arguments.as_deref() {
            Some("absent") => None,
            // Captured or redacted, or a document from before it was kept: there were
            // arguments, or may have been; either way they are unknown now.
            _ => Some(REDACTED_ARGUMENTS_JSON.to_string()),
        };
        out.push(Event::Attempt(Attempt {
            span: span(&a.trace_id, &a.span_id)?,
            intent_id: doc.intent_id.clone(),
            tool: tool.clone(),
            start,
            end: time("attempt end", &a.end)?,
            idempotency_key: a.idempotency_key.clone(),
            http_status: a.http_status,
            error_type: a.error_type.clone(),
            span_error: false,
            object_id: a.object_id.clone(),
            object_status: a.object_status.clone(),
            reported_outcome: outcome(&a.reported_outcome)?,
            arguments,
        }));
    }
    for r in &doc.readbacks {
        linked_otherwise.extend(r.object_ids.iter().map(String::as_str));
        let at = time("read-back at", &r.at)?;
        if at >= cut {
            continue;
        }
        out.push(Event::Readback(Readback {
            span: span(&r.trace_id, &r.span_id)?,
            intent_id: doc.intent_id.clone(),
            tool: tool.clone(),
            at,
            end: at,
            object_ids: r.object_ids.clone(),
            reported_outcome: None,
        }));
    }
    for o in &doc.objects {
        let amount = match o.amount.as_deref() {
            None => None,
            Some(s) => Some(Amount::Major(
                Decimal::parse(s).ok_or_else(|| bad(format!("amount {s:?}")))?,
            )),
        };
        out.push(Event::Record(RecordObservation {
            source: SUMMARY_SOURCE.into(),
            kind: None,
            object_id: o.object_id.clone(),
            intent_id: (!linked_otherwise.contains(&o.object_id.as_str()))
                .then(|| doc.intent_id.clone()),
            idempotency_key: None,
            status: o.status.clone(),
            amount,
            currency: o.currency.clone(),
            target: o.target.clone(),
            created_at: None,
            observed_at: time("object last_seen", &o.last_seen)?,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit;
    use crate::contract::{Contract, Contracts};
    use crate::model::{FindingKind, IntentState};
    use crate::test_builders::{at, attempt, readback, record, AttemptExt};

    fn contract() -> Contract {
        Contract::example("payments.refund", "issue_refund")
    }

    fn judged(events: Vec<Event>) -> crate::model::Verdict {
        let contracts = std::sync::Arc::new(Contracts::new(vec![contract()]));
        let mut ledger = audit::Ledger::with_contracts(contracts.clone());
        for e in events {
            ledger.add(e);
        }
        let h = ledger.history("i1").expect("the intent is in the ledger");
        let c = audit::Ledger::contract_for(&h, &contracts);
        audit::audit(&h, c, at(10_000.0))
    }

    fn doc_of(events: Vec<Event>) -> VerdictDoc {
        VerdictDoc::from_verdict(&judged(events))
    }

    /// What a summary stands for is what the verdict said: judged again, alone, it concludes the
    /// same state, decision, attempts' classes and objects.
    #[test]
    fn a_summary_judged_again_says_what_the_verdict_said() {
        let history = vec![
            Event::Attempt(
                attempt("i1", "issue_refund", 1.0, 30.0)
                    .key("k1")
                    .timeout()
                    .args(r#"{"amount": 45}"#.into()),
            ),
            Event::Readback(readback("i1", "get_refund", 40.0, &["re_1"])),
            Event::Attempt(
                attempt("i1", "issue_refund", 50.0, 1.0)
                    .key("k1")
                    .http(200)
                    .object("re_1", "succeeded"),
            ),
            Event::Record(record(Some("i1"), "re_9", "succeeded", 60.0)),
        ];
        let before = doc_of(history);
        let summary = summary(&before, at(5_000.0)).unwrap();
        let after = doc_of(summary.clone());
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
        let history = vec![Event::Attempt(
            attempt("i1", "issue_refund", 1.0, 2.0)
                .key("k1")
                .http(200)
                .object("re_1", "succeeded"),
        )];
        let mut events = summary(&doc_of(history), at(5_000.0)).unwrap();
        events.push(Event::Attempt(
            attempt("i1", "issue_refund", 9_000.0, 1.0)
                .key("k2")
                .http(200)
                .object("re_2", "succeeded"),
        ));
        let v = judged(events);
        assert_eq!(v.state, IntentState::Completed);
        let kinds: Vec<_> = v.findings.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&FindingKind::DuplicateEffect), "{kinds:?}");
        assert!(kinds.contains(&FindingKind::NewKeyRetry), "{kinds:?}");
    }

    /// Events from the cut on are not expired: the store keeps them, and the summary does not
    /// repeat them.
    #[test]
    fn what_began_after_the_cut_is_not_summarised() {
        let history = vec![
            Event::Attempt(attempt("i1", "issue_refund", 1.0, 30.0).key("k1").timeout()),
            Event::Attempt(
                attempt("i1", "issue_refund", 6_000.0, 1.0)
                    .key("k1")
                    .http(200)
                    .object("re_1", "succeeded"),
            ),
        ];
        let summary = summary(&doc_of(history), at(5_000.0)).unwrap();
        let attempts: Vec<_> = summary
            .iter()
            .filter_map(|e| match e {
                Event::Attempt(a) => Some(a.start),
                _ => None,
            })
            .collect();
        assert_eq!(attempts, [at(1.0)]);
    }

    #[test]
    fn an_unreadable_document_is_named() {
        let mut doc = doc_of(vec![Event::Attempt(
            attempt("i1", "issue_refund", 1.0, 2.0).key("k1").timeout(),
        )]);
        doc.attempts[0].start = "yesterday".into();
        let err = summary(&doc, at(5_000.0)).unwrap_err();
        assert_eq!(err.intent_id, "i1");
        assert!(err.to_string().contains("\"yesterday\""), "{err}");
    }
}
