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
    use crate::codec::{AttemptDoc, ReadbackDoc};

    fn doc(attempts: Vec<AttemptDoc>, readbacks: Vec<ReadbackDoc>) -> VerdictDoc {
        serde_json::from_value(serde_json::json!({
            "intent_id": "i1", "tool": "issue_refund", "contract": null,
            "idempotency_keys": ["k1"], "state": "unknown", "decision": "reconcile",
            "safe_retry_until": null, "escalation_id": null,
            "attempts": attempts, "readbacks": readbacks, "objects": [], "findings": [],
            "next_change": null, "audited_at": "2026-06-01T00:00:00Z",
            "first_seen": "2026-06-01T00:00:00Z", "last_event": "2026-06-01T00:00:00Z"
        }))
        .unwrap()
    }

    fn sent_at(start: &str) -> AttemptDoc {
        AttemptDoc {
            trace_id: "0".repeat(32),
            span_id: "1".repeat(16),
            start: start.into(),
            end: start.into(),
            idempotency_key: Some("k1".into()),
            class: "unknown".into(),
            http_status: None,
            error_type: Some("timeout".into()),
            object_id: None,
            object_status: None,
            reported_outcome: None,
            arguments: Some("captured".into()),
        }
    }

    /// Events from the cut on are not expired: the store keeps them, and the summary does not
    /// repeat them.
    #[test]
    fn what_began_after_the_cut_is_not_summarised() {
        let cut = crate::codec::parse_rfc3339("2026-06-01T12:00:00Z").unwrap();
        let d = doc(
            vec![
                sent_at("2026-06-01T11:59:59Z"),
                sent_at("2026-06-01T12:00:00Z"),
            ],
            vec![ReadbackDoc {
                at: "2026-06-01T12:30:00Z".into(),
                object_ids: vec![],
                trace_id: "2".repeat(32),
                span_id: "3".repeat(16),
            }],
        );
        let starts: Vec<Timestamp> = summary(&d, cut).unwrap().iter().map(Event::at).collect();
        assert_eq!(starts.len(), 1);
        assert!(starts[0] < cut);
    }

    #[test]
    fn an_unreadable_document_is_named() {
        let d = doc(vec![sent_at("yesterday")], vec![]);
        let err = summary(&d, Timestamp(i64::MAX)).unwrap_err();
        assert_eq!(err.intent_id, "i1");
        assert!(err.to_string().contains("\"yesterday\""), "{err}");
    }
}
