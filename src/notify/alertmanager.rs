//! One Alertmanager alert per unresolved escalation (DESIGN.md "Notifications").
//!
//! Labels identify the alert, so they hold what does not change while it is open (plus the
//! severity and most severe finding DESIGN.md pins): `alertname="ReckonEscalation"`,
//! `severity`, `tool`, `finding`, `intent_id`, `escalation_id`. Annotations say what a person
//! needs: `summary`, `description` (the findings, who holds it), and `generatorURL` links the
//! escalation's page. Alertmanager ends an alert that is not re-sent by its `endsAt`, so an open
//! escalation is re-sent periodically with `endsAt` a few minutes ahead, and a resolved one is
//! sent with `endsAt` = when it was resolved.
//!
//! The outbox keeps a [`Draft`] (everything but the link and the times that depend on when it is
//! sent); [`complete`] turns it into the JSON Alertmanager takes, at send time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::codec::{parse_rfc3339, rfc3339};
use crate::model::{Dur, Escalation, EscalationStatus, Finding, Timestamp};

pub const ALERTNAME: &str = "ReckonEscalation";

/// The label value for an intent whose tool is not known (as `reckon_escalations_unresolved`).
pub const NO_TOOL: &str = "(none)";

/// An alert as the outbox keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Draft {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339: when the escalation was opened.
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    /// RFC 3339, only once resolved: when it was resolved. Absent while unresolved (filled in
    /// at send time, a few minutes ahead).
    #[serde(rename = "endsAt", default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<String>,
}

/// The most severe finding the escalation holds (the first of the most severe, in the order
/// they joined).
pub fn most_severe(e: &Escalation) -> Option<&Finding> {
    let top = e.findings.iter().map(|f| f.severity).max()?;
    e.findings.iter().find(|f| f.severity == top)
}

/// The alert for escalation `e`, labelled with the tool it carries.
pub fn draft(e: &Escalation) -> Draft {
    let tool = e
        .tool
        .as_deref()
        .filter(|t| !t.is_empty())
        .unwrap_or(NO_TOOL);
    let finding = most_severe(e).map(|f| f.kind.as_str()).unwrap_or("(none)");
    let labels: BTreeMap<String, String> = [
        ("alertname", ALERTNAME),
        ("severity", e.severity.as_str()),
        ("tool", tool),
        ("finding", finding),
        ("intent_id", e.intent_id.as_str()),
        ("escalation_id", e.id.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let holder = match e.status {
        EscalationStatus::Open => "open, nobody has claimed it".to_string(),
        EscalationStatus::Claimed => format!(
            "claimed by {}",
            e.claimed_by.as_deref().unwrap_or("someone")
        ),
        EscalationStatus::Resolved => format!(
            "resolved by {}: {}",
            e.resolved_by.as_deref().unwrap_or("someone"),
            e.resolution.as_deref().unwrap_or("")
        ),
        EscalationStatus::Withdrawn => {
            "withdrawn: late evidence showed its findings never held".to_string()
        }
    };
    let findings: Vec<String> = e
        .findings
        .iter()
        .map(|f| {
            if f.detail.is_empty() {
                format!("{} ({})", f.kind.as_str(), f.severity.as_str())
            } else {
                format!(
                    "{} ({}): {}",
                    f.kind.as_str(),
                    f.severity.as_str(),
                    f.detail
                )
            }
        })
        .collect();
    let annotations: BTreeMap<String, String> = [
        (
            "summary",
            format!(
                "{finding} on {tool}: intent {} needs a person ({})",
                e.intent_id,
                e.severity.as_str()
            ),
        ),
        (
            "description",
            format!(
                "Escalation {} is {holder}. Findings: {}",
                e.id,
                findings.join("; ")
            ),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Draft {
        labels,
        annotations,
        starts_at: rfc3339(e.opened_at),
        ends_at: match e.status {
            // Withdrawn: the alert ends too. The escalation keeps no time of its own for that,
            // and any past instant ends an alert.
            EscalationStatus::Resolved | EscalationStatus::Withdrawn => {
                Some(rfc3339(e.resolved_at.unwrap_or(e.opened_at)))
            }
            _ => None,
        },
    }
}

/// `{public_url}/escalations/{id}`: the escalation's page.
pub fn generator_url(public_url: &str, escalation_id: &str) -> String {
    let mut out = format!("{}/escalations/", public_url.trim_end_matches('/'));
    for b in escalation_id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The alert as Alertmanager's `POST /api/v2/alerts` takes it, sent at `now`: an unresolved
/// escalation ends `ttl` from now unless re-sent; a resolved one at its resolution. Neither
/// time is allowed before the start, and the start not after now (Alertmanager refuses an alert
/// that ends before it starts; reckon's times come from other clocks).
pub fn complete(d: &Draft, generator_url: &str, now: Timestamp, ttl: Dur) -> serde_json::Value {
    let starts = parse_rfc3339(&d.starts_at).unwrap_or(now).min(now);
    let ends = match d.ends_at.as_deref() {
        Some(at) => parse_rfc3339(at).unwrap_or(now),
        None => now.saturating_add(ttl),
    }
    .max(starts);
    serde_json::json!({
        "labels": d.labels,
        "annotations": d.annotations,
        "startsAt": rfc3339(starts),
        "endsAt": rfc3339(ends),
        "generatorURL": generator_url,
    })
}

/// The same alert ended at `now`: sent when an escalation's labels changed (a more severe
/// finding joined), so the alert under the old labels does not linger until it expires.
pub fn ended(
    labels: &BTreeMap<String, String>,
    generator_url: &str,
    now: Timestamp,
) -> serde_json::Value {
    serde_json::json!({
        "labels": labels,
        "startsAt": rfc3339(now),
        "endsAt": rfc3339(now),
        "generatorURL": generator_url,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FindingKind, Severity};

    const S: i64 = 1_000_000_000;

    fn esc() -> Escalation {
        Escalation {
            id: "esc_0011223344556677_1".into(),
            intent_id: "int-1".into(),
            tool: Some("issue_refund".into()),
            status: EscalationStatus::Open,
            opened_at: Timestamp(1_000 * S),
            listed_at: Timestamp(1_000 * S),
            severity: Severity::Critical,
            findings: vec![
                Finding::new(
                    FindingKind::NewKeyRetry,
                    Timestamp(900 * S),
                    "int-1",
                    "two keys",
                ),
                Finding::new(
                    FindingKind::DuplicateEffect,
                    Timestamp(950 * S),
                    "re_2",
                    "two refunds",
                ),
                Finding::new(
                    FindingKind::DuplicateEffect,
                    Timestamp(960 * S),
                    "re_3",
                    "three",
                ),
            ],
            covered: vec![],
            claimed_by: None,
            claimed_at: None,
            resolved_by: None,
            resolved_at: None,
            resolution: None,
            note: None,
            overrides: vec![],
            version: 2,
        }
    }

    #[test]
    fn labels_are_the_pinned_ones() {
        let e = esc();
        let d = draft(&e);
        let labels: Vec<(&str, &str)> = d
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            labels,
            vec![
                ("alertname", "ReckonEscalation"),
                ("escalation_id", "esc_0011223344556677_1"),
                ("finding", "duplicate_effect"),
                ("intent_id", "int-1"),
                ("severity", "critical"),
                ("tool", "issue_refund"),
            ]
        );
        assert!(d.annotations["summary"].contains("duplicate_effect on issue_refund"));
        assert!(d.annotations["description"].contains("two refunds"));
        assert!(d.annotations["description"].contains("open"));
        assert_eq!(d.ends_at, None);
        let no_tool = Escalation {
            tool: None,
            ..e.clone()
        };
        assert_eq!(draft(&no_tool).labels["tool"], NO_TOOL);
        // Claiming does not change the labels (the same alert), only what it says.
        let mut claimed = e.clone();
        claimed.status = EscalationStatus::Claimed;
        claimed.claimed_by = Some("ana".into());
        let c = draft(&claimed);
        assert_eq!(c.labels, d.labels);
        assert!(c.annotations["description"].contains("claimed by ana"));
    }

    #[test]
    fn times_follow_the_status() {
        let now = Timestamp(2_000 * S);
        let ttl = Dur::minutes(3);
        let e = esc();
        let url = generator_url("http://reckon:8080/", &e.id);
        assert_eq!(url, "http://reckon:8080/escalations/esc_0011223344556677_1");
        let open = complete(&draft(&e), &url, now, ttl);
        assert_eq!(open["startsAt"], rfc3339(Timestamp(1_000 * S)));
        assert_eq!(open["endsAt"], rfc3339(now + ttl));
        assert_eq!(open["generatorURL"], url);
        let mut resolved = e.clone();
        resolved.status = EscalationStatus::Resolved;
        resolved.resolved_by = Some("ana".into());
        resolved.resolution = Some("refunded_once".into());
        resolved.resolved_at = Some(Timestamp(1_500 * S));
        let r = complete(&draft(&resolved), &url, now, ttl);
        assert_eq!(r["endsAt"], rfc3339(Timestamp(1_500 * S)));
        // Withdrawn (late evidence showed its findings never held): the alert ends too.
        let mut withdrawn = e.clone();
        withdrawn.status = EscalationStatus::Withdrawn;
        let w = draft(&withdrawn);
        assert_eq!(w.ends_at, Some(rfc3339(e.opened_at)));
        assert!(w.annotations["description"].contains("withdrawn"));
        assert_eq!(w.labels, draft(&e).labels, "the same alert, ended");
        // A start from a clock ahead of ours, and a resolution before it: never end < start.
        let mut ahead = resolved.clone();
        ahead.opened_at = Timestamp(3_000 * S);
        let a = complete(&draft(&ahead), &url, now, ttl);
        assert_eq!(a["startsAt"], rfc3339(now));
        assert_eq!(a["endsAt"], rfc3339(now));
        assert_eq!(
            generator_url("http://h", "a/b c"),
            "http://h/escalations/a%2Fb%20c"
        );
    }
}
