//! JSON documents for verdicts, escalations and reports: the shapes DESIGN.md pins for the API.
//!
//! The API serves them and the stores keep them, so both edges share this one encoding.

use serde::{Deserialize, Serialize};

use crate::model::*;

/// RFC 3339 with nanoseconds, UTC.
pub fn rfc3339(t: Timestamp) -> String {
    let secs = t.0.div_euclid(1_000_000_000);
    let nanos = t.0.rem_euclid(1_000_000_000) as u32;
    match chrono::DateTime::from_timestamp(secs, nanos) {
        Some(dt) => dt.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        None => format!("{}", t.0),
    }
}

pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let dt = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(Timestamp(dt.timestamp_nanos_opt()?))
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttemptDoc {
    pub trace_id: String,
    pub span_id: String,
    pub start: String,
    pub end: String,
    pub idempotency_key: Option<String>,
    pub class: String,
    pub http_status: Option<u16>,
    pub error_type: Option<String>,
    pub object_id: Option<String>,
    pub object_status: Option<String>,
    pub reported_outcome: Option<String>,
    /// `captured`, `redacted` or `absent`: whether the span carried the call's arguments.
    /// Absent in documents written before it was kept.
    #[serde(default)]
    pub arguments: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReadbackDoc {
    pub at: String,
    pub object_ids: Vec<String>,
    pub trace_id: String,
    pub span_id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ObjectDoc {
    pub object_id: String,
    pub status: String,
    /// A decimal string in the major unit, so no precision is lost to floats.
    pub amount: Option<String>,
    pub currency: Option<String>,
    pub target: Option<String>,
    pub first_seen: String,
    pub last_seen: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FindingDoc {
    pub kind: String,
    pub severity: String,
    pub at: String,
    pub subject: String,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct VerdictDoc {
    pub intent_id: String,
    pub tool: Option<String>,
    pub contract: Option<String>,
    /// The version of `contract` the verdict was computed under (a content hash of the
    /// contract); empty with no contract, and in documents written before it was kept.
    #[serde(default)]
    pub contract_version: String,
    pub idempotency_keys: Vec<String>,
    /// The intent's parameter target (the contract's `params.target`, e.g. the order id); null
    /// when the arguments did not say, and in documents written before it was kept.
    #[serde(default)]
    pub target: Option<String>,
    pub state: String,
    /// When the intent reached `state`, from evidence, if it is settled; null while pending or
    /// unknown, and in documents written before it was kept.
    #[serde(default)]
    pub settled_at: Option<String>,
    pub decision: String,
    pub safe_retry_until: Option<String>,
    pub escalation_id: Option<String>,
    pub attempts: Vec<AttemptDoc>,
    pub readbacks: Vec<ReadbackDoc>,
    pub objects: Vec<ObjectDoc>,
    pub findings: Vec<FindingDoc>,
    pub next_change: Option<String>,
    pub audited_at: String,
    pub first_seen: String,
    pub last_event: String,
    /// Where the intent sits in `GET /api/v1/intents` (newest first by it, then by id): its
    /// first verdict's `first_seen`, never changed after. The stores fill it from their column
    /// for documents written before it was kept.
    #[serde(default)]
    pub listed_at: Option<String>,
}

impl VerdictDoc {
    pub fn from_verdict(v: &Verdict) -> Self {
        VerdictDoc {
            intent_id: v.intent_id.clone(),
            tool: v.tool.clone(),
            contract: v.contract.clone(),
            contract_version: v.contract_version.clone(),
            idempotency_keys: v.idempotency_keys.clone(),
            target: v.target.clone(),
            state: v.state.as_str().into(),
            settled_at: v.settled_at.map(rfc3339),
            decision: v.decision.as_str().into(),
            safe_retry_until: v.safe_retry_until.map(rfc3339),
            escalation_id: v.escalation_id.clone(),
            attempts: v
                .attempts
                .iter()
                .map(|a| AttemptDoc {
                    trace_id: a.span.trace_hex(),
                    span_id: a.span.span_hex(),
                    start: rfc3339(a.start),
                    end: rfc3339(a.end),
                    idempotency_key: a.idempotency_key.clone(),
                    class: a.class.as_str().into(),
                    http_status: a.http_status,
                    error_type: a.error_type.clone(),
                    object_id: a.object_id.clone(),
                    object_status: a.object_status.clone(),
                    reported_outcome: a.reported_outcome.map(|o| o.as_str().into()),
                    arguments: Some(a.arguments.as_str().into()),
                })
                .collect(),
            readbacks: v
                .readbacks
                .iter()
                .map(|r| ReadbackDoc {
                    at: rfc3339(r.at),
                    object_ids: r.object_ids.clone(),
                    trace_id: r.span.trace_hex(),
                    span_id: r.span.span_hex(),
                })
                .collect(),
            objects: v
                .objects
                .iter()
                .map(|o| ObjectDoc {
                    object_id: o.object_id.clone(),
                    status: o.status.clone(),
                    amount: o.amount.map(|a| a.to_string()),
                    currency: o.currency.clone(),
                    target: o.target.clone(),
                    first_seen: rfc3339(o.first_seen),
                    last_seen: rfc3339(o.last_seen),
                })
                .collect(),
            findings: v.findings.iter().map(FindingDoc::from_finding).collect(),
            next_change: v.next_change.map(rfc3339),
            audited_at: rfc3339(v.audited_at),
            first_seen: rfc3339(v.first_seen),
            last_event: rfc3339(v.last_event),
            listed_at: Some(rfc3339(v.listed_at)),
        }
    }

    /// The document as listed at `listed_at` (the store's column, which is what orders the
    /// listing; a document written before v11 lacks the member).
    pub fn listed(mut self, listed_at: Timestamp) -> Self {
        self.listed_at = Some(rfc3339(listed_at));
        self
    }
}

impl FindingDoc {
    pub fn from_finding(f: &Finding) -> Self {
        FindingDoc {
            kind: f.kind.as_str().into(),
            severity: f.severity.as_str().into(),
            at: rfc3339(f.at),
            subject: f.subject.clone(),
            detail: f.detail.clone(),
        }
    }
}

/// A finding as an escalation keeps it: as it read when it opened or joined the escalation.
/// `severity`, `at` and `detail` are absent in rows written before they were kept.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EscalationFindingDoc {
    pub kind: String,
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl EscalationFindingDoc {
    pub fn from_finding(f: &Finding) -> Self {
        EscalationFindingDoc {
            kind: f.kind.as_str().into(),
            subject: f.subject.clone(),
            severity: Some(f.severity.as_str().into()),
            at: Some(rfc3339(f.at)),
            detail: Some(f.detail.clone()),
        }
    }

    /// Back to the finding; `fallback_at` stands in for a missing time.
    pub fn to_finding(&self, fallback_at: Timestamp) -> Option<Finding> {
        let kind = FindingKind::parse(&self.kind)?;
        Some(Finding::new(
            kind,
            self.at
                .as_deref()
                .and_then(parse_rfc3339)
                .unwrap_or(fallback_at),
            self.subject.clone(),
            self.detail.clone().unwrap_or_default(),
        ))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EscalationDoc {
    pub id: String,
    pub intent_id: String,
    /// Its intent's tool (null for an orphan record's).
    #[serde(default)]
    pub tool: Option<String>,
    pub status: String,
    pub severity: String,
    pub opened_at: String,
    pub findings: Vec<EscalationFindingDoc>,
    pub claimed_by: Option<String>,
    pub claimed_at: Option<String>,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<String>,
    pub resolution: Option<String>,
    pub note: Option<String>,
    /// Claims and resolutions that took it over from someone else who held it, oldest first.
    #[serde(default)]
    pub overrides: Vec<OverrideDoc>,
}

/// One take-over of an escalation someone else held (`"override": true`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OverrideDoc {
    /// Who took it over.
    pub by: String,
    pub at: String,
    /// `claim` or `resolve`.
    pub action: String,
    /// Who held it then.
    pub held_by: String,
}

impl OverrideDoc {
    pub fn from_override(o: &Override) -> Self {
        OverrideDoc {
            by: o.by.clone(),
            at: rfc3339(o.at),
            action: o.action.as_str().into(),
            held_by: o.held_by.clone(),
        }
    }

    /// Back to the override; `None` when a field does not parse.
    pub fn to_override(&self) -> Option<Override> {
        Some(Override {
            by: self.by.clone(),
            at: parse_rfc3339(&self.at)?,
            action: OverrideAction::parse(&self.action)?,
            held_by: self.held_by.clone(),
        })
    }
}

impl EscalationDoc {
    pub fn from_escalation(e: &Escalation) -> Self {
        EscalationDoc {
            id: e.id.clone(),
            intent_id: e.intent_id.clone(),
            tool: e.tool.clone(),
            status: e.status.as_str().into(),
            severity: e.severity.as_str().into(),
            opened_at: rfc3339(e.opened_at),
            findings: e
                .findings
                .iter()
                .map(EscalationFindingDoc::from_finding)
                .collect(),
            claimed_by: e.claimed_by.clone(),
            claimed_at: e.claimed_at.map(rfc3339),
            resolved_by: e.resolved_by.clone(),
            resolved_at: e.resolved_at.map(rfc3339),
            resolution: e.resolution.clone(),
            note: e.note.clone(),
            overrides: e.overrides.iter().map(OverrideDoc::from_override).collect(),
        }
    }
}

/// A contract as the evidence bundle shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ContractDoc {
    pub name: String,
    /// Its content hash: what a verdict's `contract_version` names.
    #[serde(default)]
    pub version: String,
    pub tools: Vec<String>,
    pub record_kind: Option<String>,
    pub idempotency: String,
    pub key_retention: Option<String>,
    pub retry_margin: String,
    pub max_in_flight: Option<String>,
    pub unknown_deadline: String,
    pub pending_deadline: String,
    pub max_attempts: Option<u32>,
    pub success_states: Vec<String>,
    pub failure_states: Vec<String>,
    pub pending_states: Vec<String>,
    pub not_executed_status: Vec<u16>,
    pub conflict_status: Vec<u16>,
}

impl ContractDoc {
    pub fn from_contract(c: &crate::contract::Contract) -> Self {
        ContractDoc {
            name: c.name.clone(),
            version: c.version.clone(),
            tools: c.tools.clone(),
            record_kind: c.record_kind.clone(),
            idempotency: c.idempotency.as_str().into(),
            key_retention: c.key_retention.map(|d| d.to_string()),
            retry_margin: c.retry_margin.to_string(),
            max_in_flight: c.max_in_flight.map(|d| d.to_string()),
            unknown_deadline: c.unknown_deadline.to_string(),
            pending_deadline: c.pending_deadline.to_string(),
            max_attempts: c.max_attempts,
            success_states: c.success_states.clone(),
            failure_states: c.failure_states.clone(),
            pending_states: c.pending_states.clone(),
            not_executed_status: c.not_executed_status.clone(),
            conflict_status: c.conflict_status.clone(),
        }
    }
}

/// The evidence bundle of `GET /api/v1/escalations/{id}`: the escalation, the intent's verdict
/// (`null` when it is not known) and the contract it was judged by. The API serves it and the
/// webhooks carry it, so both say the same.
pub fn escalation_bundle(
    e: &Escalation,
    verdict: Option<VerdictDoc>,
    contract: Option<&crate::contract::Contract>,
) -> serde_json::Value {
    let mut doc = serde_json::to_value(EscalationDoc::from_escalation(e)).unwrap_or_default();
    doc["verdict"] = serde_json::to_value(verdict).unwrap_or_default();
    doc["contract"] =
        serde_json::to_value(contract.map(ContractDoc::from_contract)).unwrap_or_default();
    doc
}
