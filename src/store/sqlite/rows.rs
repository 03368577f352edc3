//! Row decoding. Every value read from disk is checked; a bad one names its table and column.
//! The column lists go with their decoders: every query that decodes a row selects them.

use rusqlite::types::ValueRef;

use super::super::{OutboxItem, OutboxState, StoreError};
use crate::codec::{EscalationFindingDoc, VerdictDoc};
use crate::model::{
    Amount, Attempt, Decimal, Escalation, EscalationStatus, Event, Override, Readback,
    RecordObservation, ReportedOutcome, Severity, SpanRef, Timestamp,
};

pub(super) struct Dec<'r, 's> {
    pub(super) row: &'r rusqlite::Row<'s>,
    pub(super) table: &'static str,
}

impl<'r, 's> Dec<'r, 's> {
    pub(super) fn corrupt(&self, column: &'static str, detail: impl Into<String>) -> StoreError {
        StoreError::corrupt(self.table, column, detail)
    }

    pub(super) fn value(&self, i: usize, col: &'static str) -> Result<ValueRef<'r>, StoreError> {
        self.row
            .get_ref(i)
            .map_err(|e| self.corrupt(col, e.to_string()))
    }

    pub(super) fn opt_str(
        &self,
        i: usize,
        col: &'static str,
    ) -> Result<Option<&'r str>, StoreError> {
        match self.value(i, col)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(b) => std::str::from_utf8(b)
                .map(Some)
                .map_err(|_| self.corrupt(col, "invalid UTF-8")),
            other => Err(self.corrupt(col, format!("expected text, found {}", other.data_type()))),
        }
    }

    pub(super) fn str(&self, i: usize, col: &'static str) -> Result<&'r str, StoreError> {
        self.opt_str(i, col)?
            .ok_or_else(|| self.corrupt(col, "unexpected NULL"))
    }

    pub(super) fn opt_string(
        &self,
        i: usize,
        col: &'static str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self.opt_str(i, col)?.map(str::to_string))
    }

    pub(super) fn string(&self, i: usize, col: &'static str) -> Result<String, StoreError> {
        Ok(self.str(i, col)?.to_string())
    }

    pub(super) fn opt_i64(&self, i: usize, col: &'static str) -> Result<Option<i64>, StoreError> {
        match self.value(i, col)? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(n) => Ok(Some(n)),
            other => Err(self.corrupt(
                col,
                format!("expected integer, found {}", other.data_type()),
            )),
        }
    }

    pub(super) fn i64(&self, i: usize, col: &'static str) -> Result<i64, StoreError> {
        self.opt_i64(i, col)?
            .ok_or_else(|| self.corrupt(col, "unexpected NULL"))
    }

    pub(super) fn ts(&self, i: usize, col: &'static str) -> Result<Timestamp, StoreError> {
        self.i64(i, col).map(Timestamp)
    }

    pub(super) fn opt_ts(
        &self,
        i: usize,
        col: &'static str,
    ) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.opt_i64(i, col)?.map(Timestamp))
    }

    pub(super) fn hex<const N: usize>(
        &self,
        i: usize,
        col: &'static str,
    ) -> Result<[u8; N], StoreError> {
        let s = self.str(i, col)?;
        let mut out = [0u8; N];
        hex::decode_to_slice(s, &mut out).map_err(|e| self.corrupt(col, format!("{s:?}: {e}")))?;
        Ok(out)
    }

    pub(super) fn outcome(
        &self,
        i: usize,
        col: &'static str,
    ) -> Result<Option<ReportedOutcome>, StoreError> {
        match self.opt_str(i, col)? {
            None => Ok(None),
            Some(s) => ReportedOutcome::parse(s)
                .map(Some)
                .ok_or_else(|| self.corrupt(col, format!("unknown {s:?}"))),
        }
    }
}

pub(super) const ATTEMPT_COLS: &str =
    "seq, trace_id, span_id, intent_id, tool, started_at, ended_at, idempotency_key,
    http_status, error_type, span_error, object_id, object_status, reported_outcome, arguments";

pub(super) fn decode_attempt(row: &rusqlite::Row<'_>) -> Result<(i64, Event), StoreError> {
    let d = Dec {
        row,
        table: "reckon_attempts",
    };
    let http_status = match d.opt_i64(8, "http_status")? {
        None => None,
        Some(n) => Some(
            u16::try_from(n).map_err(|_| d.corrupt("http_status", format!("{n} out of range")))?,
        ),
    };
    let attempt = Attempt {
        span: SpanRef {
            trace_id: d.hex(1, "trace_id")?,
            span_id: d.hex(2, "span_id")?,
        },
        intent_id: d.string(3, "intent_id")?,
        tool: d.string(4, "tool")?,
        start: d.ts(5, "started_at")?,
        end: d.ts(6, "ended_at")?,
        idempotency_key: d.opt_string(7, "idempotency_key")?,
        http_status,
        error_type: d.opt_string(9, "error_type")?,
        span_error: d.i64(10, "span_error")? != 0,
        object_id: d.opt_string(11, "object_id")?,
        object_status: d.opt_string(12, "object_status")?,
        reported_outcome: d.outcome(13, "reported_outcome")?,
        arguments: d.opt_string(14, "arguments")?,
    };
    Ok((d.i64(0, "seq")?, Event::Attempt(attempt)))
}

pub(super) const READBACK_COLS: &str =
    "seq, trace_id, span_id, intent_id, tool, at, ended_at, object_ids, reported_outcome";

pub(super) fn decode_readback(row: &rusqlite::Row<'_>) -> Result<(i64, Event), StoreError> {
    let d = Dec {
        row,
        table: "reckon_readbacks",
    };
    let ids = d.str(7, "object_ids")?;
    let object_ids: Vec<String> = serde_json::from_str(ids)
        .map_err(|e| d.corrupt("object_ids", format!("not a JSON string array: {e}")))?;
    let readback = Readback {
        span: SpanRef {
            trace_id: d.hex(1, "trace_id")?,
            span_id: d.hex(2, "span_id")?,
        },
        intent_id: d.string(3, "intent_id")?,
        tool: d.string(4, "tool")?,
        at: d.ts(5, "at")?,
        end: d.ts(6, "ended_at")?,
        object_ids,
        reported_outcome: d.outcome(8, "reported_outcome")?,
    };
    Ok((d.i64(0, "seq")?, Event::Readback(readback)))
}

pub(super) const RECORD_COLS: &str =
    "seq, source, kind, object_id, intent_id, idempotency_key, status, amount, amount_unit,
    currency, target, created_at, observed_at";

pub(super) fn decode_record(row: &rusqlite::Row<'_>) -> Result<(i64, Event), StoreError> {
    let d = Dec {
        row,
        table: "reckon_records",
    };
    let amount = match (d.opt_str(7, "amount")?, d.opt_str(8, "amount_unit")?) {
        (None, None) => None,
        (Some(a), Some("major")) => {
            Some(Amount::Major(Decimal::parse(a).ok_or_else(|| {
                d.corrupt("amount", format!("bad decimal {a:?}"))
            })?))
        }
        (Some(a), Some("minor")) => {
            Some(Amount::Minor(a.parse::<i128>().map_err(|_| {
                d.corrupt("amount", format!("bad integer {a:?}"))
            })?))
        }
        (a, u) => return Err(d.corrupt("amount_unit", format!("unit {u:?} for amount {a:?}"))),
    };
    let record = RecordObservation {
        source: d.string(1, "source")?,
        kind: d.opt_string(2, "kind")?,
        object_id: d.string(3, "object_id")?,
        intent_id: d.opt_string(4, "intent_id")?,
        idempotency_key: d.opt_string(5, "idempotency_key")?,
        status: d.string(6, "status")?,
        amount,
        currency: d.opt_string(9, "currency")?,
        target: d.opt_string(10, "target")?,
        created_at: d.opt_ts(11, "created_at")?,
        observed_at: d.ts(12, "observed_at")?,
    };
    Ok((d.i64(0, "seq")?, Event::Record(record)))
}

pub(super) const ESCALATION_COLS: &str =
    "id, intent_id, status, severity, opened_at, findings, claimed_by, claimed_at,
    resolved_by, resolved_at, resolution, note, version, covered, overrides, listed_at, tool";

pub(super) fn decode_escalation(row: &rusqlite::Row<'_>) -> Result<Escalation, StoreError> {
    let d = Dec {
        row,
        table: "reckon_escalations",
    };
    let status = d.str(2, "status")?;
    let status = EscalationStatus::parse(status)
        .ok_or_else(|| d.corrupt("status", format!("unknown {status:?}")))?;
    let severity = d.str(3, "severity")?;
    let severity = Severity::parse(severity)
        .ok_or_else(|| d.corrupt("severity", format!("unknown {severity:?}")))?;
    let findings: Vec<EscalationFindingDoc> = serde_json::from_str(d.str(5, "findings")?)
        .map_err(|e| d.corrupt("findings", e.to_string()))?;
    let opened_at = d.ts(4, "opened_at")?;
    let findings = findings
        .into_iter()
        .map(|f| match f.to_finding(opened_at) {
            Some(f) => Ok(f),
            None => Err(d.corrupt("findings", format!("unknown finding kind {:?}", f.kind))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let covered: Vec<String> = match d.opt_string(13, "covered")? {
        Some(text) => {
            serde_json::from_str(&text).map_err(|e| d.corrupt("covered", e.to_string()))?
        }
        None => Vec::new(),
    };
    let overrides: Vec<Override> = match d.opt_string(14, "overrides")? {
        Some(text) => serde_json::from_str::<Vec<crate::codec::OverrideDoc>>(&text)
            .map_err(|e| d.corrupt("overrides", e.to_string()))?
            .iter()
            .map(|o| {
                o.to_override()
                    .ok_or_else(|| d.corrupt("overrides", format!("bad override {o:?}")))
            })
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let version = d.i64(12, "version")?;
    Ok(Escalation {
        id: d.string(0, "id")?,
        intent_id: d.string(1, "intent_id")?,
        tool: d.opt_string(16, "tool")?,
        status,
        opened_at,
        listed_at: d.ts(15, "listed_at")?,
        severity,
        findings,
        covered,
        claimed_by: d.opt_string(6, "claimed_by")?,
        claimed_at: d.opt_ts(7, "claimed_at")?,
        resolved_by: d.opt_string(8, "resolved_by")?,
        resolved_at: d.opt_ts(9, "resolved_at")?,
        resolution: d.opt_string(10, "resolution")?,
        note: d.opt_string(11, "note")?,
        overrides,
        version: u64::try_from(version)
            .map_err(|_| d.corrupt("version", format!("negative {version}")))?,
    })
}

pub(super) const OUTBOX_COLS: &str = "id, target, escalation_id, escalation_version, event, body,
    created_at, state, attempts, next_at, last_error";

pub(super) fn decode_outbox(row: &rusqlite::Row<'_>) -> Result<OutboxItem, StoreError> {
    let d = Dec {
        row,
        table: "reckon_outbox",
    };
    let state = d.str(7, "state")?;
    let state = OutboxState::parse(state)
        .ok_or_else(|| d.corrupt("state", format!("unknown {state:?}")))?;
    let version = d.i64(3, "escalation_version")?;
    let attempts = d.i64(8, "attempts")?;
    Ok(OutboxItem {
        id: d.string(0, "id")?,
        target: d.string(1, "target")?,
        escalation_id: d.string(2, "escalation_id")?,
        escalation_version: u64::try_from(version)
            .map_err(|_| d.corrupt("escalation_version", format!("negative {version}")))?,
        event: d.string(4, "event")?,
        body: d.string(5, "body")?,
        created_at: d.ts(6, "created_at")?,
        state,
        attempts: u32::try_from(attempts)
            .map_err(|_| d.corrupt("attempts", format!("out of range {attempts}")))?,
        next_at: d.ts(9, "next_at")?,
        last_error: d.opt_string(10, "last_error")?,
    })
}

pub(super) fn decode_doc(row: &rusqlite::Row<'_>, i: usize) -> Result<VerdictDoc, StoreError> {
    let d = Dec {
        row,
        table: "reckon_verdicts",
    };
    serde_json::from_str(d.str(i, "doc")?).map_err(|e| d.corrupt("doc", e.to_string()))
}

pub(super) fn count(n: i64, table: &'static str, column: &'static str) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::corrupt(table, column, format!("negative count {n}")))
}
