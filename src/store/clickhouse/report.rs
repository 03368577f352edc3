//! The audit report (`GET /api/v1/report`) without reading every verdict.
//!
//! The report covers the intents whose latest event is at or after `since`. Grouping a week of
//! verdicts under `FINAL` takes seconds at a few million intents (18.16 merges every version in
//! one stream), so the report is counted by hour of listing places, like the listings' totals
//! (`counts.rs`): `reckon_intent_tally` holds what the report counts of each verdict write,
//! `reckon_report_counts` and `reckon_report_findings` its counts per hour, recounted in the
//! background whenever an hour is written.
//!
//! An intent's latest event is never before its listing place: the place is its first verdict's
//! first event, which stays among its events (only records move between intents, and an intent
//! whose every event is a record is an orphan record's, deleted when the record links). So the
//! intents active since `since` are
//! - every intent listed in a later hour than `since`'s: those hours' counts, or their rows when
//!   written since they were counted;
//! - those listed in `since`'s own hour whose latest event is not before it: that hour's rows;
//! - those listed before that hour and active since: `reckon_intent_activity` names every
//!   verdict whose latest event lies in a later hour than its place, by that event; their current
//!   rows are read by key and checked.
//!
//! Escalations are counted by their listing place (when they were first opened), from the
//! escalations listing's counts the same way.

use ::clickhouse::Row;
use serde::Deserialize;

use super::counts::{self, Conn, Counted};
use super::rows::{
    from_code, ReportCountRow, ReportFindingRow, ESCALATIONS, FINDINGS, REPORT_COUNTS,
    REPORT_FINDINGS, VERDICTS,
};
use super::{bind_all, Arg, StoreError, HOUR_NS};
use crate::model::{
    AttemptClass, Decision, EscalationStatus, FindingKind, IntentState, Severity, Timestamp,
};
use crate::store::Report;

/// The attempt count columns, in [`AttemptClass::ALL`] order.
const CLASSES: &str = "attempts_rejected, attempts_conflict, attempts_succeeded, attempts_failed, \
                       attempts_recorded, attempts_unknown";

/// The verdicts of one tool, state and decision.
#[derive(Row, Deserialize)]
struct VerdictCounts {
    tool: String,
    state: i8,
    decision: i8,
    intents: u64,
    attempts: u64,
    classes: [u64; 6],
}

/// The findings of one tool, kind and severity.
#[derive(Row, Deserialize)]
struct FindingCounts {
    tool: String,
    kind: i8,
    severity: i8,
    findings: u64,
    intents: u64,
}

/// `sum(c) AS c` of every attempt count column.
fn class_sums() -> String {
    CLASSES
        .split(", ")
        .map(|c| format!("sum({c}) AS {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The verdicts of the current tally rows the key condition `inner` selects and `outer` keeps.
fn live_verdicts(inner: &str, outer: &str) -> String {
    format!(
        "SELECT ifNull(tool, '') AS tool, state, decision, count() AS intents,
             sum(attempts) AS attempts, {sums}
         FROM (SELECT intent_id, listed_ns, tool, state, decision, last_event_ns, attempts,
                   {CLASSES}, deleted
               FROM reckon_intent_tally FINAL WHERE {inner})
         WHERE deleted = 0 AND {outer}
         GROUP BY tool, state, decision",
        sums = class_sums()
    )
}

/// The findings of the same rows.
fn live_findings(inner: &str, outer: &str) -> String {
    format!(
        "SELECT ifNull(tool, '') AS tool, kind, severity, count() AS findings,
             uniqExact(intent_id) AS intents
         FROM (SELECT intent_id, listed_ns, tool, last_event_ns, finding_kind, finding_severity,
                   deleted
               FROM reckon_intent_tally FINAL WHERE {inner})
         ARRAY JOIN finding_kind AS kind, finding_severity AS severity
         WHERE deleted = 0 AND {outer}
         GROUP BY tool, kind, severity"
    )
}

/// The verdicts of a recount, by hour.
#[derive(Row, Deserialize)]
struct HourVerdicts {
    hour: u32,
    counts: VerdictCounts,
}

/// The findings of a recount, by hour.
#[derive(Row, Deserialize)]
struct HourFindings {
    hour: u32,
    counts: FindingCounts,
}

/// `SELECT` of [`live_verdicts`] or [`live_findings`] by hour of listing place.
fn by_hour(sql: &str) -> String {
    sql.replacen(
        "SELECT ",
        "SELECT toUInt32(intDiv(listed_ns, 3600000000000) * 3600) AS hour, ",
        1,
    )
    .replace("GROUP BY ", "GROUP BY hour, ")
}

/// Count some hours of `reckon_intent_tally` into the report's counts, stamped with the
/// server's clock before counting, zeroing the groups each had and has no more. The findings
/// are written first: an hour reads as counted once its verdict counts are.
pub(super) async fn recount_hours(store: &Conn, hours: &[u32]) -> Result<(), StoreError> {
    if hours.is_empty() {
        return Ok(());
    }
    let began = counts::server_now(store).await?;
    let (within, args) = counts::ranges(hours);
    let q = |sql: String| bind_all(store.client.query(&sql), &args);
    let (verdicts, findings) = tokio::join!(
        store.fetch::<HourVerdicts>(
            "recount the report's hours",
            q(by_hour(&live_verdicts(&within, "1 = 1")))
        ),
        store.fetch::<HourFindings>(
            "recount the report's hours",
            q(by_hour(&live_findings(&within, "1 = 1")))
        ),
    );
    let (verdicts, findings) = (verdicts?, findings?);
    let (set, set_args) = counts::hour_set(hours);
    let q = |sql: String| bind_all(store.client.query(&sql), &set_args);
    let (had_verdicts, had_findings) = tokio::join!(
        store.fetch::<(u32, String, i8, i8)>(
            "the report's counts of hours",
            q(format!(
                "SELECT toUInt32(hour), tool, state, decision FROM
                    (SELECT hour, tool, state, decision, intents FROM reckon_report_counts FINAL
                     WHERE {set})
                 WHERE intents > 0"
            ))
        ),
        store.fetch::<(u32, String, i8, i8)>(
            "the report's counts of hours",
            q(format!(
                "SELECT toUInt32(hour), tool, kind, severity FROM
                    (SELECT hour, tool, kind, severity, findings FROM reckon_report_findings FINAL
                     WHERE {set})
                 WHERE findings > 0"
            ))
        ),
    );
    let (had_verdicts, had_findings) = (had_verdicts?, had_findings?);

    type Group = (String, i8, i8);
    let finding_row = |(hour, (tool, kind, severity)): &(u32, Group), c: Option<&FindingCounts>| {
        ReportFindingRow {
            hour: *hour,
            tool: tool.clone(),
            kind: *kind,
            severity: *severity,
            findings: c.map_or(0, |c| c.findings),
            intents: c.map_or(0, |c| c.intents),
            counted: began,
        }
    };
    let now: Vec<_> = findings
        .into_iter()
        .map(|f| {
            let key = (
                f.hour,
                (f.counts.tool.clone(), f.counts.kind, f.counts.severity),
            );
            let row = finding_row(&key, Some(&f.counts));
            (key, row)
        })
        .collect();
    let before = had_findings
        .into_iter()
        .map(|(h, t, k, s)| (h, (t, k, s)))
        .collect();
    let rows = counts::recounted(hours, now, before, |k| finding_row(k, None), |_| None);
    store.insert(REPORT_FINDINGS, &rows).await?;

    let verdict_row = |(hour, (tool, state, decision)): &(u32, Group),
                       v: Option<&VerdictCounts>| {
        let c = v.map_or([0; 6], |v| v.classes);
        ReportCountRow {
            hour: *hour,
            tool: tool.clone(),
            state: *state,
            decision: *decision,
            intents: v.map_or(0, |v| v.intents),
            attempts: v.map_or(0, |v| v.attempts),
            attempts_rejected: c[0],
            attempts_conflict: c[1],
            attempts_succeeded: c[2],
            attempts_failed: c[3],
            attempts_recorded: c[4],
            attempts_unknown: c[5],
            counted: began,
        }
    };
    let now: Vec<_> = verdicts
        .into_iter()
        .map(|v| {
            let key = (
                v.hour,
                (v.counts.tool.clone(), v.counts.state, v.counts.decision),
            );
            let row = verdict_row(&key, Some(&v.counts));
            (key, row)
        })
        .collect();
    let before = had_verdicts
        .into_iter()
        .map(|(h, t, s, d)| (h, (t, s, d)))
        .collect();
    // An hour with nothing in it but tombstones gets one zero row: counted.
    let rows = counts::recounted(
        hours,
        now,
        before,
        |k| verdict_row(k, None),
        |h| Some(verdict_row(&(h, (String::new(), 1, 1)), None)),
    );
    store.insert(REPORT_COUNTS, &rows).await
}

/// The hours whose counts stand (counted since last written) and those to read row by row,
/// for one counted table; `None` when the counts cannot answer yet (a store still being
/// counted).
async fn split_hours(
    store: &Conn,
    counted: Counted,
) -> Result<Option<(Vec<u32>, Vec<u32>)>, StoreError> {
    let (written, counted_at) = counts::hours(store, counted).await?;
    let stale = counts::stale(&written, &counted_at);
    if stale.len() > counts::MAX_LIVE_HOURS || (!written.is_empty() && stale.len() == written.len())
    {
        return Ok(None);
    }
    let fresh = written
        .keys()
        .copied()
        .filter(|h| stale.binary_search(h).is_err())
        .collect();
    Ok(Some((fresh, stale)))
}

/// `hour IN (...)` of the counted hours at or after `from` (unix seconds); never true when
/// there are none.
fn counted_hours(hours: &[u32], from: u32) -> (String, Vec<Arg>) {
    let hours: Vec<u32> = hours.iter().copied().filter(|h| *h >= from).collect();
    if hours.is_empty() {
        return ("0 = 1".to_string(), Vec::new());
    }
    (
        format!("toUInt32(hour) IN ({})", vec!["?"; hours.len()].join(", ")),
        hours.into_iter().map(|h| Arg::U(u64::from(h))).collect(),
    )
}

/// The report since `since` (all if `None`), as of `now`.
pub(super) async fn report(
    store: &Conn,
    since: Option<Timestamp>,
    now: Timestamp,
) -> Result<Report, StoreError> {
    let from = since.map_or(0, |t| t.0.max(0) as u64);
    // `since`'s hour: the rows listed in it are read and checked, those after it counted.
    let hour_lo = from / HOUR_NS * HOUR_NS;
    let hour_hi = hour_lo + HOUR_NS;
    let first_counted = (hour_hi / 1_000_000_000) as u32;

    let tally_hours = split_hours(store, Counted::Report).await?;

    // The tally rows read one by one: the stale hours after `since`'s and `since`'s own, as
    // ranges; then, by key, the intents listed before it that `reckon_intent_activity` says
    // were active since (a separate read: in one disjunction with the ranges, 18.16 would
    // read the whole table).
    let mut spans: Vec<(u64, u64)> = vec![(hour_lo, hour_hi)];
    match &tally_hours {
        Some((_, stale)) => spans.extend(stale.iter().filter(|h| **h >= first_counted).map(|&h| {
            (
                u64::from(h) * 1_000_000_000,
                u64::from(h) * 1_000_000_000 + HOUR_NS,
            )
        })),
        None => spans.push((hour_hi, u64::MAX)),
    }
    let (ranges, mut range_args) = counts::any_range(&spans);
    range_args.extend([Arg::U(hour_hi), Arg::U(from)]);
    let range_outer = "(listed_ns >= ? OR last_event_ns >= ?)";
    let active_before =
        "(listed_ns, intent_id) IN (SELECT listed_ns, intent_id FROM reckon_intent_activity
         WHERE last_event_ns >= ? AND listed_ns < ?)";
    let active_args = [Arg::U(from), Arg::U(hour_lo), Arg::U(from)];
    let active_outer = "last_event_ns >= ?";

    let (fresh_cond, fresh_args) = counted_hours(
        tally_hours.as_ref().map_or(&[][..], |(fresh, _)| fresh),
        first_counted,
    );
    let counted_verdicts = format!(
        "SELECT tool, state, decision, sum(intents) AS intents, sum(attempts) AS attempts, {sums}
         FROM (SELECT * FROM reckon_report_counts FINAL WHERE hour >= toDateTime(?))
         WHERE {fresh_cond}
         GROUP BY tool, state, decision",
        sums = class_sums()
    );
    let counted_findings = format!(
        "SELECT tool, kind, severity, sum(findings) AS findings, sum(intents) AS intents
         FROM (SELECT * FROM reckon_report_findings FINAL WHERE hour >= toDateTime(?))
         WHERE {fresh_cond}
         GROUP BY tool, kind, severity"
    );
    let mut counted_args = vec![Arg::U(u64::from(first_counted))];
    counted_args.extend(fresh_args);

    let q = |sql: &str, args: &[Arg]| bind_all(store.client.query(sql), args);
    let (lv, la, lf, lfa, cv, cf, escalations) = tokio::join!(
        store.fetch::<VerdictCounts>(
            "report: verdicts",
            q(&live_verdicts(&ranges, range_outer), &range_args)
        ),
        store.fetch::<VerdictCounts>(
            "report: verdicts active since",
            q(&live_verdicts(active_before, active_outer), &active_args)
        ),
        store.fetch::<FindingCounts>(
            "report: findings",
            q(&live_findings(&ranges, range_outer), &range_args)
        ),
        store.fetch::<FindingCounts>(
            "report: findings active since",
            q(&live_findings(active_before, active_outer), &active_args)
        ),
        store.fetch::<VerdictCounts>(
            "report: verdict counts",
            q(&counted_verdicts, &counted_args)
        ),
        store.fetch::<FindingCounts>(
            "report: finding counts",
            q(&counted_findings, &counted_args)
        ),
        escalations(store, from),
    );

    let mut rep = Report::empty(since, now);
    let tool_key = |t: String| {
        if t.is_empty() {
            Report::NO_TOOL.to_string()
        } else {
            t
        }
    };
    for r in lv?.into_iter().chain(la?).chain(cv?) {
        let state = from_code(&IntentState::ALL, r.state, VERDICTS, "state")?;
        let decision = from_code(&Decision::ALL, r.decision, VERDICTS, "decision")?;
        if r.intents == 0 {
            continue;
        }
        rep.intents += r.intents;
        rep.attempts += r.attempts;
        *rep.by_state.entry(state.as_str().into()).or_default() += r.intents;
        *rep.by_decision.entry(decision.as_str().into()).or_default() += r.intents;
        for (class, n) in AttemptClass::ALL.iter().zip(r.classes) {
            *rep.by_attempt_class
                .entry(class.as_str().into())
                .or_default() += n;
        }
        let t = rep.by_tool.entry(tool_key(r.tool)).or_default();
        t.intents += r.intents;
        t.attempts += r.attempts;
        *t.by_state.entry(state.as_str().into()).or_default() += r.intents;
    }
    for r in lf?.into_iter().chain(lfa?).chain(cf?) {
        let kind = from_code(&FindingKind::ALL, r.kind, FINDINGS, "kind")?;
        let severity = from_code(&Severity::ALL, r.severity, FINDINGS, "severity")?;
        if r.findings == 0 {
            continue;
        }
        rep.findings += r.findings;
        *rep.by_finding.entry(kind.as_str().into()).or_default() += r.findings;
        *rep.by_severity.entry(severity.as_str().into()).or_default() += r.findings;
        let t = rep.by_tool.entry(tool_key(r.tool)).or_default();
        t.findings += r.findings;
        if kind == FindingKind::DuplicateEffect {
            t.duplicate_effects += r.intents;
        }
    }
    for (status, n) in escalations? {
        *rep.escalations.entry(status.as_str().into()).or_default() += n;
    }
    Ok(rep)
}

/// The escalations listed at or after `from` (unix ns; when they were first opened), by
/// status: the escalations listing's counts of the hours after `from`'s, its rows for the rest.
pub(super) async fn escalations(
    store: &Conn,
    from: u64,
) -> Result<Vec<(EscalationStatus, u64)>, StoreError> {
    let hour_hi = from / HOUR_NS * HOUR_NS + HOUR_NS;
    let first_counted = (hour_hi / 1_000_000_000) as u32;
    let escalation_hours = split_hours(store, Counted::Escalations).await?;
    // Rows for `from`'s hour (from `from` on) and the stale hours after it, as ranges.
    let mut spans: Vec<(u64, u64)> = vec![(from, hour_hi)];
    let esc_counted = match &escalation_hours {
        Some((fresh, stale)) => {
            spans.extend(stale.iter().filter(|h| **h >= first_counted).map(|&h| {
                let lo = u64::from(h) * 1_000_000_000;
                (lo, lo + HOUR_NS)
            }));
            counted_hours(fresh, first_counted)
        }
        None => {
            spans.push((hour_hi, u64::MAX));
            ("0 = 1".to_string(), Vec::new())
        }
    };
    let (within, live_esc_args) = counts::any_range(&spans);
    let live_escalations = format!(
        "SELECT toString(status), count() FROM
            (SELECT id, listed_ns, status FROM reckon_escalation_list FINAL WHERE {within})
         GROUP BY status"
    );
    let counted_escalations = format!(
        "SELECT dim1, sum(n) FROM
            (SELECT * FROM reckon_listing_counts FINAL
             WHERE listing = 'escalations' AND hour >= toDateTime(?))
         WHERE finding = 0 AND n > 0 AND {}
         GROUP BY dim1",
        esc_counted.0
    );
    let mut counted_esc_args = vec![Arg::U(u64::from(first_counted))];
    counted_esc_args.extend(esc_counted.1);

    let q = |sql: &str, args: &[Arg]| bind_all(store.client.query(sql), args);
    let (live, counted) = tokio::join!(
        store.fetch::<(String, u64)>("escalations", q(&live_escalations, &live_esc_args)),
        store.fetch::<(String, u64)>(
            "escalation counts",
            q(&counted_escalations, &counted_esc_args)
        ),
    );
    let mut by_status: Vec<(EscalationStatus, u64)> = Vec::new();
    for (status, n) in live?.into_iter().chain(counted?) {
        let status = EscalationStatus::parse(&status).ok_or_else(|| {
            StoreError::corrupt(ESCALATIONS, "status", format!("unknown {status:?}"))
        })?;
        match by_status.iter_mut().find(|(s, _)| *s == status) {
            Some((_, total)) => *total += n,
            None => by_status.push((status, n)),
        }
    }
    Ok(by_status)
}
