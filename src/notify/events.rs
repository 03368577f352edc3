//! What one escalation change enqueues: per target, one [`OutboxItem`] whose body is fixed now,
//! so every retry carries the same bytes.
//!
//! - webhook: `{"id", "type", "at", "escalation"}` where `escalation` is the evidence bundle of
//!   `GET /api/v1/escalations/{id}` as it was at the change;
//! - alertmanager: the alert [`alertmanager::Draft`] (its link and times are added when sent).

use super::alertmanager;
use super::outbox::{delivery_id, OutboxItem};
use super::{Target, TargetKind};
use crate::codec::{escalation_bundle, rfc3339, VerdictDoc};
use crate::contract::Contract;
use crate::model::{Escalation, EscalationStatus, Timestamp, Verdict};

pub const OPENED: &str = "escalation.opened";
pub const UPDATED: &str = "escalation.updated";
pub const RESOLVED: &str = "escalation.resolved";

/// The event a change of `e` is: its first version opens it, a resolution or a withdrawal (late
/// evidence showed its findings never held; the bundle says `withdrawn`) resolves it, and
/// everything between (a finding joined, a claim) updates it.
pub fn event_type(e: &Escalation) -> &'static str {
    match (e.status, e.version) {
        (EscalationStatus::Resolved | EscalationStatus::Withdrawn, _) => RESOLVED,
        (_, 0 | 1) => OPENED,
        _ => UPDATED,
    }
}

/// The webhook body for one delivery: `{"id", "type", "at", "escalation"}`, where `bundle` is
/// the escalation's evidence bundle ([`escalation_bundle`]).
pub fn webhook_body(
    id: &str,
    e: &Escalation,
    bundle: &serde_json::Value,
    now: Timestamp,
) -> String {
    serde_json::json!({
        "id": id,
        "type": event_type(e),
        "at": rfc3339(now),
        "escalation": bundle,
    })
    .to_string()
}

/// One item per target for the change that made `e`.
pub fn items_for(
    targets: &[Target],
    e: &Escalation,
    verdict: Option<&Verdict>,
    contract: Option<&Contract>,
    now: Timestamp,
) -> Vec<OutboxItem> {
    let kind = event_type(e);
    // Built once for every webhook.
    let mut bundle = None;
    targets
        .iter()
        .map(|t| {
            let body = match &t.kind {
                TargetKind::Webhook { .. } => {
                    let id = delivery_id(&e.id, e.version, &t.name);
                    let bundle = bundle.get_or_insert_with(|| {
                        escalation_bundle(e, verdict.map(VerdictDoc::from_verdict), contract)
                    });
                    webhook_body(&id, e, bundle, now)
                }
                TargetKind::Alertmanager { .. } => {
                    let d = alertmanager::draft(e);
                    serde_json::to_string(&d).unwrap_or_default()
                }
            };
            OutboxItem::new(&t.name, &e.id, e.version, kind, body, now)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Finding, FindingKind, Severity};

    fn esc(status: EscalationStatus, version: u64) -> Escalation {
        Escalation {
            id: "esc_ab_1".into(),
            intent_id: "int-1".into(),
            tool: Some("refund".into()),
            status,
            opened_at: Timestamp(1),
            listed_at: Timestamp(1),
            severity: Severity::Critical,
            findings: vec![Finding::new(
                FindingKind::DuplicateEffect,
                Timestamp(1),
                "re_2",
                "two refunds",
            )],
            covered: vec![],
            claimed_by: None,
            claimed_at: None,
            resolved_by: None,
            resolved_at: None,
            resolution: None,
            note: None,
            overrides: vec![],
            version,
        }
    }

    #[test]
    fn types_follow_the_change() {
        assert_eq!(event_type(&esc(EscalationStatus::Open, 1)), OPENED);
        assert_eq!(event_type(&esc(EscalationStatus::Open, 2)), UPDATED);
        assert_eq!(event_type(&esc(EscalationStatus::Claimed, 3)), UPDATED);
        assert_eq!(event_type(&esc(EscalationStatus::Resolved, 4)), RESOLVED);
        assert_eq!(
            event_type(&esc(EscalationStatus::Withdrawn, 2)),
            RESOLVED,
            "a withdrawn escalation's notifications are resolved"
        );
    }

    #[test]
    fn one_item_per_target_with_its_body() {
        let targets = vec![
            Target::new("webhook", "http://h/hook", Some("s"), Some("hook")).unwrap(),
            Target::new("alertmanager", "http://am:9093", None, Some("am")).unwrap(),
        ];
        let e = esc(EscalationStatus::Claimed, 2);
        let items = items_for(&targets, &e, None, None, Timestamp(5));
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].id, "esc_ab_1:2:hook");
        assert_eq!(items[0].event, UPDATED);
        let body: serde_json::Value = serde_json::from_str(&items[0].body).unwrap();
        assert_eq!(body["id"], "esc_ab_1:2:hook");
        assert_eq!(body["type"], UPDATED);
        assert_eq!(body["escalation"]["id"], "esc_ab_1");
        assert_eq!(body["escalation"]["status"], "claimed");
        assert_eq!(
            body["escalation"]["findings"][0]["kind"],
            "duplicate_effect"
        );
        assert!(body["escalation"]["verdict"].is_null());
        assert_eq!(items[1].id, "esc_ab_1:2:am");
        let d: alertmanager::Draft = serde_json::from_str(&items[1].body).unwrap();
        assert_eq!(d.labels["escalation_id"], "esc_ab_1");
        // The same change enqueued again is the same items.
        let again = items_for(&targets, &e, None, None, Timestamp(99));
        assert_eq!(again[0].id, items[0].id);
        assert_eq!(again[1].id, items[1].id);
    }

    /// A withdrawal resolves both: the webhook says `escalation.resolved` with the bundle's
    /// status `withdrawn`, and the alert has its end.
    #[test]
    fn a_withdrawal_is_announced_as_resolved() {
        let targets = vec![
            Target::new("webhook", "http://h/hook", Some("s"), Some("hook")).unwrap(),
            Target::new("alertmanager", "http://am:9093", None, Some("am")).unwrap(),
        ];
        let e = esc(EscalationStatus::Withdrawn, 2);
        let items = items_for(&targets, &e, None, None, Timestamp(5));
        assert_eq!(items[0].event, RESOLVED);
        let body: serde_json::Value = serde_json::from_str(&items[0].body).unwrap();
        assert_eq!(body["type"], RESOLVED);
        assert_eq!(body["escalation"]["status"], "withdrawn");
        let d: alertmanager::Draft = serde_json::from_str(&items[1].body).unwrap();
        assert!(d.ends_at.is_some(), "{d:?}");
    }
}
