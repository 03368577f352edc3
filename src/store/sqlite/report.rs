//! The audit report: counts by state, decision, attempt class, finding, severity, tool and
//! escalation status, from one snapshot.

use rusqlite::Connection;

use super::super::{Report, StoreError};
use super::rows::{count, Dec};
use super::schema;
use crate::model::{AttemptClass, EscalationStatus, FindingKind, IntentState, Severity, Timestamp};

fn tool_key(tool: Option<String>) -> String {
    tool.unwrap_or_else(|| Report::NO_TOOL.to_string())
}

pub(super) fn report(
    conn: &Connection,
    since: Option<Timestamp>,
    now: Timestamp,
) -> Result<Report, StoreError> {
    let mut rep = Report::empty(since, now);
    let from = since.map(|t| t.0).unwrap_or(i64::MIN);
    // One read transaction: all counts come from the same snapshot.
    let tx = conn.unchecked_transaction()?;

    let classes = schema::CLASS_COLUMNS
        .map(|c| format!("sum({c})"))
        .join(", ");
    let mut stmt = conn.prepare(&format!(
        "SELECT tool, state, decision, count(*), sum(attempts), {classes} FROM reckon_verdicts
         WHERE last_event >= ?1 GROUP BY tool, state, decision"
    ))?;
    let mut rows = stmt.query([from])?;
    while let Some(row) = rows.next()? {
        let d = Dec {
            row,
            table: "reckon_verdicts",
        };
        let tool = tool_key(d.opt_string(0, "tool")?);
        let state = d.str(1, "state")?;
        let state = IntentState::parse(state)
            .ok_or_else(|| d.corrupt("state", format!("unknown {state:?}")))?;
        let decision = d.str(2, "decision")?;
        let decision = crate::model::Decision::parse(decision)
            .ok_or_else(|| d.corrupt("decision", format!("unknown {decision:?}")))?;
        let n = count(d.i64(3, "intent_id")?, "reckon_verdicts", "intent_id")?;
        let attempts = count(d.i64(4, "attempts")?, "reckon_verdicts", "attempts")?;
        rep.intents += n;
        rep.attempts += attempts;
        *rep.by_state.entry(state.as_str().into()).or_default() += n;
        *rep.by_decision.entry(decision.as_str().into()).or_default() += n;
        for (i, class) in AttemptClass::ALL.iter().enumerate() {
            let col = schema::CLASS_COLUMNS[i];
            *rep.by_attempt_class
                .entry(class.as_str().into())
                .or_default() += count(d.i64(5 + i, col)?, "reckon_verdicts", col)?;
        }
        let t = rep.by_tool.entry(tool).or_default();
        t.intents += n;
        t.attempts += attempts;
        *t.by_state.entry(state.as_str().into()).or_default() += n;
    }
    drop(rows);
    drop(stmt);

    let mut stmt = conn.prepare(
        "SELECT f.tool, f.kind, f.severity, count(*), count(DISTINCT f.intent_id)
         FROM reckon_findings f JOIN reckon_verdicts v ON v.intent_id = f.intent_id
         WHERE v.last_event >= ?1 GROUP BY f.tool, f.kind, f.severity",
    )?;
    let mut rows = stmt.query([from])?;
    while let Some(row) = rows.next()? {
        let d = Dec {
            row,
            table: "reckon_findings",
        };
        let tool = tool_key(d.opt_string(0, "tool")?);
        let kind = d.str(1, "kind")?;
        let kind = FindingKind::parse(kind)
            .ok_or_else(|| d.corrupt("kind", format!("unknown {kind:?}")))?;
        let severity = d.str(2, "severity")?;
        let severity = Severity::parse(severity)
            .ok_or_else(|| d.corrupt("severity", format!("unknown {severity:?}")))?;
        let n = count(d.i64(3, "kind")?, "reckon_findings", "kind")?;
        let intents = count(d.i64(4, "intent_id")?, "reckon_findings", "intent_id")?;
        rep.findings += n;
        *rep.by_finding.entry(kind.as_str().into()).or_default() += n;
        *rep.by_severity.entry(severity.as_str().into()).or_default() += n;
        let t = rep.by_tool.entry(tool).or_default();
        t.findings += n;
        if kind == FindingKind::DuplicateEffect {
            t.duplicate_effects += intents;
        }
    }
    drop(rows);
    drop(stmt);

    for (status, n) in escalation_counts(conn, from)? {
        *rep.escalations.entry(status.as_str().into()).or_default() += n;
    }
    tx.finish()?;
    Ok(rep)
}

/// Escalations listed at or after `from` (unix nanoseconds; when they were first opened), by
/// status.
pub(super) fn escalation_counts(
    conn: &Connection,
    from: i64,
) -> Result<Vec<(EscalationStatus, u64)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT status, count(*) FROM reckon_escalations WHERE listed_at >= ?1 GROUP BY status",
    )?;
    let mut rows = stmt.query([from])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let d = Dec {
            row,
            table: "reckon_escalations",
        };
        let status = d.str(0, "status")?;
        let status = EscalationStatus::parse(status)
            .ok_or_else(|| d.corrupt("status", format!("unknown {status:?}")))?;
        out.push((status, count(d.i64(1, "id")?, "reckon_escalations", "id")?));
    }
    Ok(out)
}
