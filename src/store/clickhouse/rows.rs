//! Rust mirrors of the tables' columns, and the conversions to and from the model.
//!
//! Field names are the column names (the client derives the INSERT column list and `?fields`
//! from them). Types follow RowBinary: `Enum8` travels as `i8` (its code), `DateTime` as `u32`
//! seconds, `Nullable(T)` as `Option<T>`. Everything read back is checked: a value that does not
//! decode is [`StoreError::Corrupt`] naming its table and column, never a panic or a guess.

use ::clickhouse::Row;
use serde::{Deserialize, Serialize};

use super::HOUR_NS;
use crate::model::*;
use crate::notify::{OutboxItem, OutboxState};
use crate::store::StoreError;

pub const ATTEMPTS: &str = "reckon_attempts";
pub const READBACKS: &str = "reckon_readbacks";
pub const RECORDS: &str = "reckon_records";
pub const VERDICTS: &str = "reckon_verdicts";
pub const FINDINGS: &str = "reckon_findings";
pub const ESCALATIONS: &str = "reckon_escalations";
pub const OUTBOX: &str = "reckon_outbox";
pub const ROUTES: &str = "reckon_routes";
pub const META: &str = "reckon_meta";
pub const LOOKUPS: &str = "reckon_intent_lookup";
pub const SPAN_OWNERS: &str = "reckon_span_owners";
pub const INTENT_LIST: &str = "reckon_intent_list";
pub const ESCALATION_LIST: &str = "reckon_escalation_list";
pub const COUNTS: &str = "reckon_listing_counts";
pub const TALLY: &str = "reckon_intent_tally";
pub const ACTIVITY: &str = "reckon_intent_activity";
pub const REPORT_COUNTS: &str = "reckon_report_counts";
pub const REPORT_FINDINGS: &str = "reckon_report_findings";

/// One hour's report counts of the verdicts of one tool, state and decision (`report.rs`).
#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct ReportCountRow {
    pub hour: u32,
    pub tool: String,
    pub state: i8,
    pub decision: i8,
    pub intents: u64,
    pub attempts: u64,
    pub attempts_rejected: u64,
    pub attempts_conflict: u64,
    pub attempts_succeeded: u64,
    pub attempts_failed: u64,
    pub attempts_recorded: u64,
    pub attempts_unknown: u64,
    pub counted: u32,
}

/// One hour's report counts of the findings of one tool, kind and severity.
#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct ReportFindingRow {
    pub hour: u32,
    pub tool: String,
    pub kind: i8,
    pub severity: i8,
    pub findings: u64,
    pub intents: u64,
    pub counted: u32,
}

/// One hour's count of a listing's rows with two dimensions and a finding kind (`counts.rs`).
#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct CountRow {
    pub listing: i8,
    pub hour: u32,
    pub dim1: String,
    pub dim2: String,
    pub finding: u8,
    pub n: u64,
    pub counted: u32,
}

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct AttemptRow {
    pub trace_id: String,
    pub span_id: String,
    pub intent_id: String,
    pub tool: String,
    pub started_at: u32,
    pub started_ns: u64,
    pub ended_ns: u64,
    pub idempotency_key: Option<String>,
    pub http_status: Option<u16>,
    pub error_type: Option<String>,
    pub span_error: u8,
    pub object_id: Option<String>,
    pub object_status: Option<String>,
    pub reported_outcome: Option<i8>,
    pub arguments: Option<String>,
    pub ingested_ns: u64,
}

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct ReadbackRow {
    pub trace_id: String,
    pub span_id: String,
    pub intent_id: String,
    pub tool: String,
    pub read_at: u32,
    pub read_ns: u64,
    pub ended_ns: u64,
    pub object_ids: Vec<String>,
    pub reported_outcome: Option<i8>,
    pub ingested_ns: u64,
}

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct RecordRow {
    pub source: String,
    pub kind: Option<String>,
    pub object_id: String,
    pub intent_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub status: String,
    pub amount: Option<String>,
    pub amount_unit: Option<i8>,
    pub amount_major: Option<f64>,
    pub currency: Option<String>,
    pub target: Option<String>,
    pub created_ns: Option<u64>,
    pub observed_at: u32,
    pub observed_ns: u64,
    pub ingested_ns: u64,
}

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct VerdictRow {
    pub intent_id: String,
    pub tool: Option<String>,
    pub contract: Option<String>,
    pub state: i8,
    pub decision: i8,
    pub idempotency_keys: Vec<String>,
    pub escalation_id: Option<String>,
    pub safe_retry_until_ns: Option<u64>,
    pub next_change_ns: Option<u64>,
    pub first_seen: u32,
    pub first_seen_ns: u64,
    pub last_event: u32,
    pub last_event_ns: u64,
    pub audited_ns: u64,
    pub attempts: u32,
    pub attempts_rejected: u32,
    pub attempts_conflict: u32,
    pub attempts_succeeded: u32,
    pub attempts_failed: u32,
    pub attempts_recorded: u32,
    pub attempts_unknown: u32,
    pub readbacks: u32,
    pub objects: u32,
    pub findings: u32,
    pub finding_kinds: Vec<i8>,
    pub doc: String,
    pub deleted: u8,
    pub version: u64,
    pub contract_version: String,
    pub settled: u8,
    pub fingerprint: u64,
    pub listed_ns: u64,
}

/// An intent's row in the listing (`reckon_intent_list`), written with each of its verdict
/// rows at the same version.
#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct IntentListRow {
    pub listed_at: u32,
    pub listed_ns: u64,
    pub intent_id: String,
    pub tool: Option<String>,
    pub state: i8,
    pub last_event_ns: u64,
    pub finding_kinds: Vec<i8>,
    pub doc: String,
    pub deleted: u8,
    pub version: u64,
}

impl IntentListRow {
    /// The listing row of a verdict row, holding its document.
    pub fn of(v: &VerdictRow, doc: String) -> IntentListRow {
        IntentListRow {
            listed_at: secs(v.listed_ns),
            listed_ns: v.listed_ns,
            intent_id: v.intent_id.clone(),
            tool: v.tool.clone(),
            state: v.state,
            last_event_ns: v.last_event_ns,
            finding_kinds: v.finding_kinds.clone(),
            doc,
            deleted: v.deleted,
            version: v.version,
        }
    }
}

/// What the report counts of a verdict (`reckon_intent_tally`), written with each of its verdict
/// rows at the same version.
#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct TallyRow {
    pub listed_at: u32,
    pub listed_ns: u64,
    pub intent_id: String,
    pub tool: Option<String>,
    pub state: i8,
    pub decision: i8,
    pub last_event_ns: u64,
    pub attempts: u32,
    pub attempts_rejected: u32,
    pub attempts_conflict: u32,
    pub attempts_succeeded: u32,
    pub attempts_failed: u32,
    pub attempts_recorded: u32,
    pub attempts_unknown: u32,
    pub finding_kind: Vec<i8>,
    pub finding_severity: Vec<i8>,
    pub deleted: u8,
    pub version: u64,
    pub contract: Option<String>,
    pub first_attempt_ns: u64,
    pub settled_ns: u64,
    pub escalation_id: Option<String>,
}

/// When an intent was first sent and when it settled ([`Verdict::settled_at`]), unix
/// nanoseconds, 0 for never: what `reckon_intent_tally` keeps for time to settle.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settling {
    pub first_attempt_ns: u64,
    pub settled_ns: u64,
}

/// The rows of one verdict write: its `reckon_verdicts` row, its findings and what the tally
/// keeps beside them ([`super::writer::Rows::push_verdict`] derives the rest).
pub struct VerdictWrite {
    pub row: VerdictRow,
    pub findings: Vec<FindingRow>,
    pub settling: Settling,
}

impl TallyRow {
    /// The tally of a verdict row and its findings.
    pub fn of(v: &VerdictRow, findings: &[FindingRow], settling: Settling) -> TallyRow {
        TallyRow {
            listed_at: secs(v.listed_ns),
            listed_ns: v.listed_ns,
            intent_id: v.intent_id.clone(),
            tool: v.tool.clone(),
            state: v.state,
            decision: v.decision,
            last_event_ns: v.last_event_ns,
            attempts: v.attempts,
            attempts_rejected: v.attempts_rejected,
            attempts_conflict: v.attempts_conflict,
            attempts_succeeded: v.attempts_succeeded,
            attempts_failed: v.attempts_failed,
            attempts_recorded: v.attempts_recorded,
            attempts_unknown: v.attempts_unknown,
            finding_kind: findings.iter().map(|f| f.kind).collect(),
            finding_severity: findings.iter().map(|f| f.severity).collect(),
            deleted: v.deleted,
            version: v.version,
            contract: v.contract.clone(),
            first_attempt_ns: settling.first_attempt_ns,
            settled_ns: settling.settled_ns,
            escalation_id: v.escalation_id.clone(),
        }
    }

    /// Its row in `reckon_intent_activity`: only a verdict whose latest event lies in a later
    /// hour than its listing place has one.
    pub fn activity(&self) -> Option<ActivityRow> {
        (self.deleted == 0 && self.last_event_ns / HOUR_NS > self.listed_ns / HOUR_NS).then(|| {
            ActivityRow {
                last_event_ns: self.last_event_ns,
                intent_id: self.intent_id.clone(),
                listed_ns: self.listed_ns,
            }
        })
    }
}

/// An intent active in a later hour than its listing place (`reckon_intent_activity`).
#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct ActivityRow {
    pub last_event_ns: u64,
    pub intent_id: String,
    pub listed_ns: u64,
}

/// Which intent a stored span names: its row in `reckon_attempts` (`readback` 0) or
/// `reckon_readbacks` (1) is found by `(intent_id, trace_id, span_id)`.
#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct SpanOwnerRow {
    pub trace_id: String,
    pub span_id: String,
    pub readback: u8,
    pub intent_id: String,
}

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct RouteRow {
    pub route: String,
    pub intent_id: String,
}

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct MetaRow {
    pub name: String,
    pub value: u64,
}

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct FindingRow {
    pub intent_id: String,
    pub kind: i8,
    pub severity: i8,
    pub at: u32,
    pub at_ns: u64,
    pub subject: String,
    pub detail: String,
    pub tool: Option<String>,
    pub verdict_version: u64,
    pub listed_ns: u64,
}

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct EscalationRow {
    pub id: String,
    pub intent_id: String,
    pub status: i8,
    pub severity: i8,
    pub opened_at: u32,
    pub opened_ns: u64,
    pub finding_kinds: Vec<i8>,
    pub finding_subjects: Vec<String>,
    pub claimed_by: Option<String>,
    pub claimed_at: Option<u32>,
    pub claimed_ns: Option<u64>,
    pub resolved_by: Option<String>,
    pub resolved_at: Option<u32>,
    pub resolved_ns: Option<u64>,
    pub resolution: Option<String>,
    pub note: Option<String>,
    pub version: u64,
    /// When each finding became true, parallel to `finding_kinds` (empty in rows from before v3).
    pub finding_ns: Vec<u64>,
    /// Each finding's explanation as it read then, parallel to `finding_kinds`.
    pub finding_details: Vec<String>,
    /// The evidence ids a resolution covered.
    pub covered: Vec<String>,
    /// Who took it over from someone else who held it, oldest first (v9).
    pub override_by: Vec<String>,
    /// When, parallel to `override_by`.
    pub override_ns: Vec<u64>,
    /// With which action (`OverrideAction` codes), parallel to `override_by`.
    pub override_action: Vec<i8>,
    /// From whom, parallel to `override_by`.
    pub override_held_by: Vec<String>,
    /// Where it is listed (v11): `Escalation::listed_at`.
    pub listed_at: u32,
    pub listed_ns: u64,
    /// Its intent's tool (v14): `Escalation::tool`.
    pub tool: Option<String>,
}

/// What an intent is looked up by: one of `crate::store::lookups_of`, stamped with the
/// version of the verdict write it came with.
#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct LookupRow {
    pub kind: i8,
    pub value: String,
    pub intent_id: String,
    pub verdict_version: u64,
}

/// The lookup rows of a verdict written at `version`.
pub fn lookup_rows(v: &Verdict, version: u64) -> Vec<LookupRow> {
    crate::store::lookups_of(v)
        .into_iter()
        .map(|(kind, value)| LookupRow {
            kind: code(&LookupKind::ALL, kind),
            value: value.to_string(),
            intent_id: v.intent_id.clone(),
            verdict_version: version,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Scalars.

/// A timestamp as `UInt64` nanoseconds. Instants before 1970 have no `UInt64` (nor `DateTime`)
/// form; refusing them beats storing a different instant.
pub fn ns(t: Timestamp, table: &str, column: &str) -> Result<u64, StoreError> {
    u64::try_from(t.0).map_err(|_| {
        StoreError::WriteFailed(format!(
            "{table}.{column}: timestamp {} is before 1970 and cannot be stored in ClickHouse",
            t.0
        ))
    })
}

/// The `DateTime` beside a `_ns` column: whole seconds, saturating at 2106 (the type's end).
pub fn secs(ns: u64) -> u32 {
    u32::try_from(ns / 1_000_000_000).unwrap_or(u32::MAX)
}

pub fn ts(n: u64, table: &'static str, column: &'static str) -> Result<Timestamp, StoreError> {
    i64::try_from(n)
        .map(Timestamp)
        .map_err(|_| StoreError::corrupt(table, column, format!("{n} ns is out of range")))
}

/// `Enum8` code of `v`: its position in `all`, from 1 (schema.rs holds the DDL to the same).
pub fn code<T: PartialEq + Copy>(all: &[T], v: T) -> i8 {
    all.iter().position(|x| *x == v).map_or(0, |i| i as i8 + 1)
}

pub fn from_code<T: Copy>(
    all: &[T],
    c: i8,
    table: &'static str,
    column: &'static str,
) -> Result<T, StoreError> {
    usize::try_from(c)
        .ok()
        .and_then(|c| c.checked_sub(1))
        .and_then(|i| all.get(i).copied())
        .ok_or_else(|| StoreError::corrupt(table, column, format!("unknown enum code {c}")))
}

fn hex_id<const N: usize>(
    s: &str,
    table: &'static str,
    column: &'static str,
) -> Result<[u8; N], StoreError> {
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out)
        .map_err(|e| StoreError::corrupt(table, column, format!("{s:?}: {e}")))?;
    Ok(out)
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

// ---------------------------------------------------------------------------------------------
// Events.

pub fn attempt_row(a: &Attempt, ingested_ns: u64) -> Result<AttemptRow, StoreError> {
    let started_ns = ns(a.start, ATTEMPTS, "started_ns")?;
    Ok(AttemptRow {
        trace_id: a.span.trace_hex(),
        span_id: a.span.span_hex(),
        intent_id: a.intent_id.clone(),
        tool: a.tool.clone(),
        started_at: secs(started_ns),
        started_ns,
        ended_ns: ns(a.end, ATTEMPTS, "ended_ns")?,
        idempotency_key: a.idempotency_key.clone(),
        http_status: a.http_status,
        error_type: a.error_type.clone(),
        span_error: u8::from(a.span_error),
        object_id: a.object_id.clone(),
        object_status: a.object_status.clone(),
        reported_outcome: a.reported_outcome.map(|o| code(&ReportedOutcome::ALL, o)),
        arguments: a.arguments.clone(),
        ingested_ns,
    })
}

fn outcome(c: Option<i8>, table: &'static str) -> Result<Option<ReportedOutcome>, StoreError> {
    c.map(|c| from_code(&ReportedOutcome::ALL, c, table, "reported_outcome"))
        .transpose()
}

pub fn attempt_event(r: AttemptRow) -> Result<Event, StoreError> {
    const T: &str = ATTEMPTS;
    Ok(Event::Attempt(Attempt {
        span: SpanRef {
            trace_id: hex_id(&r.trace_id, T, "trace_id")?,
            span_id: hex_id(&r.span_id, T, "span_id")?,
        },
        intent_id: r.intent_id,
        tool: r.tool,
        start: ts(r.started_ns, T, "started_ns")?,
        end: ts(r.ended_ns, T, "ended_ns")?,
        idempotency_key: r.idempotency_key,
        http_status: r.http_status,
        error_type: r.error_type,
        span_error: match r.span_error {
            0 => false,
            1 => true,
            n => {
                return Err(StoreError::corrupt(
                    T,
                    "span_error",
                    format!("{n} is not 0/1"),
                ))
            }
        },
        object_id: r.object_id,
        object_status: r.object_status,
        reported_outcome: outcome(r.reported_outcome, T)?,
        arguments: r.arguments,
    }))
}

pub fn readback_row(r: &Readback, ingested_ns: u64) -> Result<ReadbackRow, StoreError> {
    let read_ns = ns(r.at, READBACKS, "read_ns")?;
    Ok(ReadbackRow {
        trace_id: r.span.trace_hex(),
        span_id: r.span.span_hex(),
        intent_id: r.intent_id.clone(),
        tool: r.tool.clone(),
        read_at: secs(read_ns),
        read_ns,
        ended_ns: ns(r.end, READBACKS, "ended_ns")?,
        object_ids: r.object_ids.clone(),
        reported_outcome: r.reported_outcome.map(|o| code(&ReportedOutcome::ALL, o)),
        ingested_ns,
    })
}

pub fn readback_event(r: ReadbackRow) -> Result<Event, StoreError> {
    const T: &str = READBACKS;
    Ok(Event::Readback(Readback {
        span: SpanRef {
            trace_id: hex_id(&r.trace_id, T, "trace_id")?,
            span_id: hex_id(&r.span_id, T, "span_id")?,
        },
        intent_id: r.intent_id,
        tool: r.tool,
        at: ts(r.read_ns, T, "read_ns")?,
        end: ts(r.ended_ns, T, "ended_ns")?,
        object_ids: r.object_ids,
        reported_outcome: outcome(r.reported_outcome, T)?,
    }))
}

const UNIT_MAJOR: i8 = 1;
const UNIT_MINOR: i8 = 2;

pub fn record_row(r: &RecordObservation, ingested_ns: u64) -> Result<RecordRow, StoreError> {
    let observed_ns = ns(r.observed_at, RECORDS, "observed_ns")?;
    let (amount, unit) = match r.amount {
        Some(Amount::Major(d)) => (Some(d.to_string()), Some(UNIT_MAJOR)),
        Some(Amount::Minor(m)) => (Some(m.to_string()), Some(UNIT_MINOR)),
        None => (None, None),
    };
    // For charts only: the exact value stays in `amount`.
    let amount_major = r.amount.and_then(|a| {
        a.to_major(r.currency.as_deref())
            .to_string()
            .parse::<f64>()
            .ok()
    });
    Ok(RecordRow {
        source: r.source.clone(),
        kind: r.kind.clone(),
        object_id: r.object_id.clone(),
        intent_id: r.intent_id.clone(),
        idempotency_key: r.idempotency_key.clone(),
        status: r.status.clone(),
        amount,
        amount_unit: unit,
        amount_major,
        currency: r.currency.clone(),
        target: r.target.clone(),
        created_ns: r
            .created_at
            .map(|t| ns(t, RECORDS, "created_ns"))
            .transpose()?,
        observed_at: secs(observed_ns),
        observed_ns,
        ingested_ns,
    })
}

pub fn record_event(r: RecordRow) -> Result<Event, StoreError> {
    const T: &str = RECORDS;
    let amount = match (r.amount.as_deref(), r.amount_unit) {
        (None, None) => None,
        (Some(a), Some(UNIT_MAJOR)) => {
            Some(Amount::Major(Decimal::parse(a).ok_or_else(|| {
                StoreError::corrupt(T, "amount", format!("bad decimal {a:?}"))
            })?))
        }
        (Some(a), Some(UNIT_MINOR)) => {
            Some(Amount::Minor(a.parse::<i128>().map_err(|_| {
                StoreError::corrupt(T, "amount", format!("bad integer {a:?}"))
            })?))
        }
        (a, u) => {
            return Err(StoreError::corrupt(
                T,
                "amount_unit",
                format!("unit {u:?} for amount {a:?}"),
            ))
        }
    };
    Ok(Event::Record(RecordObservation {
        source: r.source,
        kind: r.kind,
        object_id: r.object_id,
        intent_id: r.intent_id,
        idempotency_key: r.idempotency_key,
        status: r.status,
        amount,
        currency: r.currency,
        target: r.target,
        created_at: r.created_ns.map(|n| ts(n, T, "created_ns")).transpose()?,
        observed_at: ts(r.observed_ns, T, "observed_ns")?,
    }))
}

/// One event's row, on its way through the writer (which stamps `ingested_ns`).
#[derive(Clone, Debug)]
pub enum EventRow {
    Attempt(AttemptRow),
    Readback(ReadbackRow),
    Record(RecordRow),
}

/// An event's identity as the tables hold it. Attempts and read-backs are separate spaces (a span
/// id may be both), as in SQLite and the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Identity<'a> {
    Attempt(&'a str, &'a str),
    Readback(&'a str, &'a str),
    Record(&'a str, &'a str, &'a str, u64),
}

impl Identity<'_> {
    /// The identity as bytes for [`crate::bloom::Bloom`], into `buf` (cleared first): a tag, then
    /// each part with its length.
    pub fn key_into(&self, buf: &mut Vec<u8>) {
        buf.clear();
        let mut part = |p: &[u8]| {
            buf.extend_from_slice(&(p.len() as u32).to_le_bytes());
            buf.extend_from_slice(p);
        };
        match self {
            Identity::Attempt(t, s) => {
                part(b"a");
                part(t.as_bytes());
                part(s.as_bytes());
            }
            Identity::Readback(t, s) => {
                part(b"b");
                part(t.as_bytes());
                part(s.as_bytes());
            }
            Identity::Record(source, object, status, at) => {
                part(b"r");
                part(source.as_bytes());
                part(object.as_bytes());
                part(status.as_bytes());
                part(&at.to_le_bytes());
            }
        }
    }
}

impl EventRow {
    pub fn of(e: &Event) -> Result<EventRow, StoreError> {
        Ok(match e {
            Event::Attempt(a) => EventRow::Attempt(attempt_row(a, 0)?),
            Event::Readback(r) => EventRow::Readback(readback_row(r, 0)?),
            Event::Record(r) => EventRow::Record(record_row(r, 0)?),
        })
    }

    pub fn identity(&self) -> Identity<'_> {
        match self {
            EventRow::Attempt(r) => Identity::Attempt(&r.trace_id, &r.span_id),
            EventRow::Readback(r) => Identity::Readback(&r.trace_id, &r.span_id),
            EventRow::Record(r) => {
                Identity::Record(&r.source, &r.object_id, &r.status, r.observed_ns)
            }
        }
    }

    pub fn ingested_ns(&self) -> u64 {
        match self {
            EventRow::Attempt(r) => r.ingested_ns,
            EventRow::Readback(r) => r.ingested_ns,
            EventRow::Record(r) => r.ingested_ns,
        }
    }

    pub fn set_ingested_ns(&mut self, at: u64) {
        match self {
            EventRow::Attempt(r) => r.ingested_ns = at,
            EventRow::Readback(r) => r.ingested_ns = at,
            EventRow::Record(r) => r.ingested_ns = at,
        }
    }

    /// Back to the model: what "same content" is judged on (by value, so a record amount stored
    /// as 45.00 equals one re-sent as 45.0).
    pub fn event(&self) -> Result<Event, StoreError> {
        match self.clone() {
            EventRow::Attempt(r) => attempt_event(r),
            EventRow::Readback(r) => readback_event(r),
            EventRow::Record(r) => record_event(r),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Verdicts and findings.

/// The verdict row, its finding rows (all stamped with `version`) and its settling times.
pub fn verdict_rows(v: &Verdict, doc: String, version: u64) -> Result<VerdictWrite, StoreError> {
    const T: &str = VERDICTS;
    let mut classes = [0u32; 6];
    for a in &v.attempts {
        if let Some(i) = AttemptClass::ALL.iter().position(|c| *c == a.class) {
            classes[i] += 1;
        }
    }
    let mut kinds: Vec<i8> = v
        .findings
        .iter()
        .map(|f| code(&FindingKind::ALL, f.kind))
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    let first_seen_ns = ns(v.first_seen, T, "first_seen_ns")?;
    let last_event_ns = ns(v.last_event, T, "last_event_ns")?;
    let row = VerdictRow {
        intent_id: v.intent_id.clone(),
        tool: v.tool.clone(),
        contract: v.contract.clone(),
        state: code(&IntentState::ALL, v.state),
        decision: code(&Decision::ALL, v.decision),
        idempotency_keys: v.idempotency_keys.clone(),
        escalation_id: v.escalation_id.clone(),
        safe_retry_until_ns: v
            .safe_retry_until
            .map(|t| ns(t, T, "safe_retry_until_ns"))
            .transpose()?,
        next_change_ns: v
            .next_change
            .map(|t| ns(t, T, "next_change_ns"))
            .transpose()?,
        first_seen: secs(first_seen_ns),
        first_seen_ns,
        last_event: secs(last_event_ns),
        last_event_ns,
        audited_ns: ns(v.audited_at, T, "audited_ns")?,
        attempts: count(v.attempts.len()),
        attempts_rejected: classes[0],
        attempts_conflict: classes[1],
        attempts_succeeded: classes[2],
        attempts_failed: classes[3],
        attempts_recorded: classes[4],
        attempts_unknown: classes[5],
        readbacks: count(v.readbacks.len()),
        objects: count(v.objects.len()),
        findings: count(v.findings.len()),
        finding_kinds: kinds,
        doc,
        deleted: 0,
        version,
        settled: v.rest() as u8,
        contract_version: v.contract_version.clone(),
        fingerprint: v.fingerprint(),
        listed_ns: ns(v.listed_at, T, "listed_ns")?,
    };
    let findings = v
        .findings
        .iter()
        .map(|f| {
            let at_ns = ns(f.at, FINDINGS, "at_ns")?;
            Ok(FindingRow {
                intent_id: v.intent_id.clone(),
                kind: code(&FindingKind::ALL, f.kind),
                severity: code(&Severity::ALL, f.severity),
                at: secs(at_ns),
                at_ns,
                subject: f.subject.clone(),
                detail: f.detail.clone(),
                tool: v.tool.clone(),
                verdict_version: version,
                listed_ns: row.listed_ns,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let settling = Settling {
        first_attempt_ns: v
            .attempts
            .iter()
            .map(|a| a.start)
            .min()
            .map(|t| ns(t, TALLY, "first_attempt_ns"))
            .transpose()?
            .unwrap_or(0),
        settled_ns: v
            .settled_at
            .map(|t| ns(t, TALLY, "settled_ns"))
            .transpose()?
            .unwrap_or(0),
    };
    Ok(VerdictWrite {
        row,
        findings,
        settling,
    })
}

/// A tombstone: hides the intent's verdict (and so its findings) from every read; at its
/// place in the listing, `listed_ns`.
pub fn verdict_tombstone(intent_id: &str, listed_ns: u64, version: u64) -> VerdictWrite {
    let row = VerdictRow {
        intent_id: intent_id.to_string(),
        tool: None,
        contract: None,
        state: code(&IntentState::ALL, IntentState::Unknown),
        decision: code(&Decision::ALL, Decision::None),
        idempotency_keys: Vec::new(),
        escalation_id: None,
        safe_retry_until_ns: None,
        next_change_ns: None,
        first_seen: 0,
        first_seen_ns: 0,
        last_event: 0,
        last_event_ns: 0,
        audited_ns: 0,
        attempts: 0,
        attempts_rejected: 0,
        attempts_conflict: 0,
        attempts_succeeded: 0,
        attempts_failed: 0,
        attempts_recorded: 0,
        attempts_unknown: 0,
        readbacks: 0,
        objects: 0,
        findings: 0,
        finding_kinds: Vec::new(),
        doc: String::new(),
        deleted: 1,
        version,
        settled: 0,
        contract_version: String::new(),
        fingerprint: 0,
        listed_ns,
    };
    VerdictWrite {
        row,
        findings: Vec::new(),
        settling: Settling::default(),
    }
}

// ---------------------------------------------------------------------------------------------
// Escalations.

pub fn escalation_row(e: &Escalation) -> Result<EscalationRow, StoreError> {
    const T: &str = ESCALATIONS;
    let opened_ns = ns(e.opened_at, T, "opened_ns")?;
    let claimed_ns = e.claimed_at.map(|t| ns(t, T, "claimed_ns")).transpose()?;
    let resolved_ns = e.resolved_at.map(|t| ns(t, T, "resolved_ns")).transpose()?;
    let listed_ns = ns(e.listed_at, T, "listed_ns")?;
    Ok(EscalationRow {
        listed_at: secs(listed_ns),
        listed_ns,
        id: e.id.clone(),
        intent_id: e.intent_id.clone(),
        tool: e.tool.clone(),
        status: code(&EscalationStatus::ALL, e.status),
        severity: code(&Severity::ALL, e.severity),
        opened_at: secs(opened_ns),
        opened_ns,
        finding_kinds: e
            .findings
            .iter()
            .map(|f| code(&FindingKind::ALL, f.kind))
            .collect(),
        finding_subjects: e.findings.iter().map(|f| f.subject.clone()).collect(),
        finding_ns: e
            .findings
            .iter()
            .map(|f| ns(f.at, T, "finding_ns"))
            .collect::<Result<_, _>>()?,
        finding_details: e.findings.iter().map(|f| f.detail.clone()).collect(),
        covered: e.covered.clone(),
        claimed_by: e.claimed_by.clone(),
        claimed_at: claimed_ns.map(secs),
        claimed_ns,
        resolved_by: e.resolved_by.clone(),
        resolved_at: resolved_ns.map(secs),
        resolved_ns,
        resolution: e.resolution.clone(),
        note: e.note.clone(),
        version: e.version,
        override_by: e.overrides.iter().map(|o| o.by.clone()).collect(),
        override_ns: e
            .overrides
            .iter()
            .map(|o| ns(o.at, T, "override_ns"))
            .collect::<Result<_, _>>()?,
        override_action: e
            .overrides
            .iter()
            .map(|o| code(&OverrideAction::ALL, o.action))
            .collect(),
        override_held_by: e.overrides.iter().map(|o| o.held_by.clone()).collect(),
    })
}

pub fn escalation(r: EscalationRow) -> Result<Escalation, StoreError> {
    const T: &str = ESCALATIONS;
    if r.finding_kinds.len() != r.finding_subjects.len() {
        return Err(StoreError::corrupt(
            T,
            "finding_subjects",
            format!(
                "{} subjects for {} kinds",
                r.finding_subjects.len(),
                r.finding_kinds.len()
            ),
        ));
    }
    let n = r.override_by.len();
    if r.override_ns.len() != n || r.override_action.len() != n || r.override_held_by.len() != n {
        return Err(StoreError::corrupt(
            T,
            "override_by",
            "override columns of different lengths",
        ));
    }
    let overrides = (0..n)
        .map(|i| {
            Ok(Override {
                by: r.override_by[i].clone(),
                at: ts(r.override_ns[i], T, "override_ns")?,
                action: from_code(
                    &OverrideAction::ALL,
                    r.override_action[i],
                    T,
                    "override_action",
                )?,
                held_by: r.override_held_by[i].clone(),
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let opened_at = ts(r.opened_ns, T, "opened_ns")?;
    let findings = r
        .finding_kinds
        .iter()
        .zip(r.finding_subjects)
        .enumerate()
        .map(|(i, (k, s))| {
            let at = match r.finding_ns.get(i) {
                Some(&n) => ts(n, T, "finding_ns")?,
                None => opened_at,
            };
            let detail = r.finding_details.get(i).cloned().unwrap_or_default();
            Ok(Finding::new(
                from_code(&FindingKind::ALL, *k, T, "finding_kinds")?,
                at,
                s,
                detail,
            ))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(Escalation {
        id: r.id,
        intent_id: r.intent_id,
        tool: r.tool,
        status: from_code(&EscalationStatus::ALL, r.status, T, "status")?,
        opened_at,
        listed_at: ts(r.listed_ns, T, "listed_ns")?,
        severity: from_code(&Severity::ALL, r.severity, T, "severity")?,
        findings,
        covered: r.covered,
        claimed_by: r.claimed_by,
        claimed_at: r.claimed_ns.map(|n| ts(n, T, "claimed_ns")).transpose()?,
        resolved_by: r.resolved_by,
        resolved_at: r.resolved_ns.map(|n| ts(n, T, "resolved_ns")).transpose()?,
        resolution: r.resolution,
        note: r.note,
        overrides,
        version: r.version,
    })
}

// ---------------------------------------------------------------------------------------------
// The notification outbox.

#[derive(Clone, Debug, Row, Serialize, Deserialize)]
pub struct OutboxRow {
    pub id: String,
    pub target: String,
    pub escalation_id: String,
    pub escalation_version: u64,
    pub event: String,
    pub body: String,
    pub created_at: u32,
    pub created_ns: u64,
    pub state: i8,
    pub attempts: u32,
    pub next_ns: u64,
    pub last_error: Option<String>,
    /// [`OutboxItem::rank`]: the highest is current.
    pub version: u64,
}

pub fn outbox_row(it: &OutboxItem) -> Result<OutboxRow, StoreError> {
    const T: &str = OUTBOX;
    let created_ns = ns(it.created_at, T, "created_ns")?;
    Ok(OutboxRow {
        id: it.id.clone(),
        target: it.target.clone(),
        escalation_id: it.escalation_id.clone(),
        escalation_version: it.escalation_version,
        event: it.event.clone(),
        body: it.body.clone(),
        created_at: secs(created_ns),
        created_ns,
        state: code(&OutboxState::ALL, it.state),
        attempts: it.attempts,
        next_ns: ns(it.next_at, T, "next_ns")?,
        last_error: it.last_error.clone(),
        version: it.rank(),
    })
}

pub fn outbox_item(r: OutboxRow) -> Result<OutboxItem, StoreError> {
    const T: &str = OUTBOX;
    Ok(OutboxItem {
        id: r.id,
        target: r.target,
        escalation_id: r.escalation_id,
        escalation_version: r.escalation_version,
        event: r.event,
        body: r.body,
        created_at: ts(r.created_ns, T, "created_ns")?,
        state: from_code(&OutboxState::ALL, r.state, T, "state")?,
        attempts: r.attempts,
        next_at: ts(r.next_ns, T, "next_ns")?,
        last_error: r.last_error,
    })
}
