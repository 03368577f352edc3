//! `POST /api/v1/records`: the downstream's own objects, reported by whoever can read them.
//!
//! The body is one record object, a JSON array of them, or NDJSON (one object per line). Items
//! are independent: a bad one is rejected alone, named by its index, and the good ones are kept,
//! because a reconciler that posts a thousand records should not lose them over one typo. Only a
//! body that is not JSON or NDJSON at all is refused whole.
//!
//! Amounts are kept exact. `serde_json` (without `arbitrary_precision`) turns a JSON number into
//! an `f64`, which cannot hold every decimal, so each item's members are sliced from the
//! already-validated text and the amount's own digits are given to `Decimal::parse`.
//!
//! Times are checked against the receive time under the one time policy
//! ([`super::bounds`]): an `observed_at` or `created_at` before 2000 or more than the tolerated
//! skew ahead of reckon's clock rejects its item alone, naming the field.
//!
//! `observed_at` defaults to the receive time the caller passes in. An observation's identity is
//! (source, object_id, status, observed_at), so a record re-sent without `observed_at` would be a
//! second observation of the same state, stamped later: such items are listed in
//! [`RecordsBatch::untimed`], and the ingest service drops those whose (source, object_id,
//! status) the store already knows as re-deliveries. Send `observed_at` to have every
//! observation kept exactly.

use super::bounds::TimeWindow;
use super::limits::{IntentBudget, MAX_RECORDS_PER_POST, MAX_VALUE_BYTES};
use crate::codec::parse_rfc3339;
use crate::model::{Amount, Decimal, RecordObservation, Timestamp};
use serde::de::IgnoredAny;

/// The result of one body: what was kept and what was refused, item by item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordsBatch {
    pub accepted: Vec<RecordObservation>,
    /// Positions in `accepted` (ascending) of the records that carried no `observed_at` of
    /// their own: their time is the receive time, not the downstream's.
    pub untimed: Vec<usize>,
    /// The index in the request (as [`RecordRejection::index`]) of each record of `accepted`.
    pub indices: Vec<usize>,
    pub rejected: Vec<RecordRejection>,
}

/// One refused item. `index` is its position in the array, or its ordinal among the non-blank
/// lines of an NDJSON body (0-based either way).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RecordRejection {
    pub index: usize,
    /// `field: what was wrong`, e.g. `amount: expected a number or a decimal string, got true`.
    pub error: String,
}

/// The body as a whole could not be read as records.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    #[error("body is not valid UTF-8 (first bad byte at offset {valid_up_to})")]
    NotUtf8 { valid_up_to: usize },
    #[error("body is empty: send a record object, an array of records, or NDJSON")]
    Empty,
    #[error("body is neither JSON nor NDJSON: {0}")]
    Malformed(String),
    #[error("body must be a record object, an array of records, or NDJSON, not a JSON {0}")]
    NotRecords(&'static str),
    /// Each item costs its reply a line, accepted or not: a body of millions of tiny items
    /// would cost far more memory than its size.
    #[error("body holds more than {MAX_RECORDS_PER_POST} records: send them in several posts")]
    TooMany,
}

/// The fields a record may carry. Anything else is an error for that item: a misspelt
/// `intent_id` would otherwise silently make the record an orphan.
pub const FIELDS: [&str; 11] = [
    "kind",
    "object_id",
    "intent_id",
    "idempotency_key",
    "status",
    "amount",
    "currency",
    "target",
    "created_at",
    "observed_at",
    "source",
];

/// Source recorded for observations posted through this API without a `source`.
pub const DEFAULT_SOURCE: &str = "api";

/// Integer timestamps below this (about 1970-01-12 in nanoseconds) are taken as a unit mistake:
/// a unix time in seconds or milliseconds read as nanoseconds would land in January 1970 and
/// silently corrupt every window computed from it.
const MIN_PLAUSIBLE_NANOS: i64 = 1_000_000_000_000_000;

/// Parses a records body received at `window.now` (the default `observed_at`); every time must
/// lie in `window`.
pub fn parse_records(body: &[u8], window: &TimeWindow) -> Result<RecordsBatch, RecordsError> {
    let text = std::str::from_utf8(body).map_err(|e| RecordsError::NotUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(RecordsError::Empty);
    }

    let mut batch = RecordsBatch::default();
    let mut budget = IntentBudget::default();
    let mut push = |index: usize, item: Result<Item, String>| {
        let item = item.and_then(|item| {
            if budget.admit_record(&item.record) {
                Ok(item)
            } else {
                Err(IntentBudget::refusal())
            }
        });
        match item {
            Ok(Item { record, timed }) => {
                if !timed {
                    batch.untimed.push(batch.accepted.len());
                }
                batch.accepted.push(record);
                batch.indices.push(index);
            }
            Err(error) => batch.rejected.push(RecordRejection { index, error }),
        }
    };

    match serde_json::from_str::<IgnoredAny>(trimmed) {
        // One JSON document: an object or an array of them.
        Ok(_) => match trimmed.as_bytes()[0] {
            b'{' => push(0, parse_item(trimmed, window)),
            b'[' => {
                let items = raw::elements(trimmed, MAX_RECORDS_PER_POST + 1)
                    .ok_or_else(|| RecordsError::Malformed("unreadable array".into()))?;
                if items.len() > MAX_RECORDS_PER_POST {
                    return Err(RecordsError::TooMany);
                }
                for (i, item) in items.into_iter().enumerate() {
                    push(i, parse_item(item, window));
                }
            }
            b'"' => return Err(RecordsError::NotRecords("string")),
            b't' | b'f' => return Err(RecordsError::NotRecords("boolean")),
            b'n' => return Err(RecordsError::NotRecords("null")),
            _ => return Err(RecordsError::NotRecords("number")),
        },
        Err(whole) => {
            // Not one document. NDJSON needs at least two lines, one of them JSON on its own;
            // otherwise this is a broken document (a truncated object, a bad array) and saying
            // so is more useful than rejecting each of its lines.
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .take(MAX_RECORDS_PER_POST + 1)
                .collect();
            let ndjson = !trimmed.starts_with('[')
                && lines.len() >= 2
                && lines
                    .iter()
                    .any(|l| serde_json::from_str::<IgnoredAny>(l).is_ok());
            if !ndjson {
                return Err(RecordsError::Malformed(whole.to_string()));
            }
            if lines.len() > MAX_RECORDS_PER_POST {
                return Err(RecordsError::TooMany);
            }
            for (i, line) in lines.into_iter().enumerate() {
                let item = match serde_json::from_str::<IgnoredAny>(line) {
                    Ok(_) => parse_item(line, window),
                    Err(e) => Err(format!("invalid JSON: {e}")),
                };
                push(i, item);
            }
        }
    }
    Ok(batch)
}

/// One accepted item: the record, and whether its `observed_at` was its own.
struct Item {
    record: RecordObservation,
    timed: bool,
}

/// One record from the raw text of a JSON value already known to be valid.
fn parse_item(raw_item: &str, window: &TimeWindow) -> Result<Item, String> {
    // One member more than there are fields is enough: among them is an unknown or a repeated
    // field, refused below, and the rest of a huge object is never sliced.
    let members = raw::members(raw_item, FIELDS.len() + 1)
        .ok_or_else(|| format!("expected a record object, got {}", describe(raw_item)))?;
    let mut r = RecordObservation {
        source: DEFAULT_SOURCE.to_string(),
        kind: None,
        object_id: String::new(),
        intent_id: None,
        idempotency_key: None,
        status: String::new(),
        amount: None,
        currency: None,
        target: None,
        created_at: None,
        observed_at: window.now,
    };
    let (mut object_id, mut status, mut observed_at, mut source) = (None, None, None, None);
    let mut seen: Vec<String> = Vec::with_capacity(members.len());
    for (raw_key, v) in members {
        let key: String =
            serde_json::from_str(raw_key).map_err(|e| format!("unreadable field name: {e}"))?;
        if seen.contains(&key) {
            return Err(format!("{key}: given twice"));
        }
        let field = |e: String| format!("{key}: {e}");
        match key.as_str() {
            "kind" => r.kind = opt_string(v).map_err(field)?,
            "object_id" => object_id = opt_string(v).map_err(field)?,
            "intent_id" => r.intent_id = opt_string(v).map_err(field)?,
            "idempotency_key" => r.idempotency_key = opt_string(v).map_err(field)?,
            "status" => status = opt_string(v).map_err(field)?,
            "amount" => r.amount = amount(v).map_err(field)?,
            "currency" => r.currency = opt_string(v).map_err(field)?,
            "target" => r.target = target(v).map_err(field)?,
            "created_at" => r.created_at = timestamp(v).map_err(field)?,
            "observed_at" => observed_at = timestamp(v).map_err(field)?,
            "source" => source = opt_string(v).map_err(field)?,
            _ => {
                return Err(format!(
                    "{key}: unknown field (expected one of {})",
                    FIELDS.join(", ")
                ))
            }
        }
        seen.push(key);
    }
    r.object_id = object_id.ok_or("object_id: required (the downstream's id of the object)")?;
    r.status = status.ok_or("status: required (the object's status in the downstream)")?;
    let timed = observed_at.is_some();
    if let Some(t) = observed_at {
        r.observed_at = t;
    }
    for (field, at) in [
        ("observed_at", Some(r.observed_at)),
        ("created_at", r.created_at),
    ] {
        if let Some(at) = at {
            window.check(at).map_err(|e| format!("{field}: {e}"))?;
        }
    }
    if let Some(s) = source {
        r.source = s;
    }
    Ok(Item { record: r, timed })
}

/// A short rendering of a raw JSON value for error messages.
fn describe(raw: &str) -> String {
    const MAX: usize = 40;
    if raw.chars().count() <= MAX {
        raw.to_string()
    } else {
        format!("{}...", raw.chars().take(MAX - 3).collect::<String>())
    }
}

/// A string field: `null` means absent; an empty string is refused rather than stored, since an
/// empty id or status can match nothing and would hide the sender's bug.
fn opt_string(raw: &str) -> Result<Option<String>, String> {
    if raw.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "{} bytes, over the limit of {MAX_VALUE_BYTES}",
            raw.len()
        ));
    }
    match raw.as_bytes().first() {
        Some(b'n') => Ok(None),
        Some(b'"') => {
            let s: String = serde_json::from_str(raw).map_err(|e| e.to_string())?;
            if s.trim().is_empty() {
                Err("must not be empty (omit the field or send null)".into())
            } else {
                Ok(Some(s))
            }
        }
        _ => Err(format!("expected a string, got {}", describe(raw))),
    }
}

/// `target` is compared with a tool argument (`/order_id`), which is often a JSON integer, so an
/// integer is accepted and kept as its digits.
fn target(raw: &str) -> Result<Option<String>, String> {
    match raw.as_bytes().first() {
        Some(b'-' | b'0'..=b'9') if raw.bytes().all(|b| b == b'-' || b.is_ascii_digit()) => {
            Ok(Some(raw.to_string()))
        }
        Some(b'n' | b'"') => opt_string(raw),
        _ => Err(format!(
            "expected a string or an integer, got {}",
            describe(raw)
        )),
    }
}

/// In major units, as the tool's arguments: a JSON number (its digits, never through f64) or a
/// decimal string.
fn amount(raw: &str) -> Result<Option<Amount>, String> {
    let digits = match raw.as_bytes().first() {
        Some(b'n') => return Ok(None),
        Some(b'-' | b'0'..=b'9') => raw.to_string(),
        Some(b'"') => serde_json::from_str::<String>(raw).map_err(|e| e.to_string())?,
        _ => {
            return Err(format!(
                "expected a number or a decimal string, got {}",
                describe(raw)
            ))
        }
    };
    match Decimal::parse(&digits) {
        Some(d) => Ok(Some(Amount::Major(d))),
        None => Err(format!(
            "{} is not a decimal number in range",
            describe(raw)
        )),
    }
}

/// An RFC 3339 string or integer unix nanoseconds.
fn timestamp(raw: &str) -> Result<Option<Timestamp>, String> {
    match raw.as_bytes().first() {
        Some(b'n') => Ok(None),
        Some(b'"') => {
            let s: String = serde_json::from_str(raw).map_err(|e| e.to_string())?;
            parse_rfc3339(s.trim()).map(Some).ok_or_else(|| {
                format!(
                    "{} is not an RFC 3339 timestamp (e.g. \"2026-10-29T12:00:00.5Z\")",
                    describe(raw)
                )
            })
        }
        Some(b'-' | b'0'..=b'9') => {
            let n: i64 = raw.parse().map_err(|_| {
                format!(
                    "expected integer unix nanoseconds or an RFC 3339 string, got {}",
                    describe(raw)
                )
            })?;
            if n < MIN_PLAUSIBLE_NANOS {
                return Err(format!(
                    "{n} is not plausible as unix nanoseconds (seconds or milliseconds?); send nanoseconds or an RFC 3339 string"
                ));
            }
            Ok(Some(Timestamp(n)))
        }
        _ => Err(format!(
            "expected an RFC 3339 string or integer unix nanoseconds, got {}",
            describe(raw)
        )),
    }
}

/// Slicing of JSON text that `serde_json` has already validated: the members of an object and
/// the elements of an array, as raw text. Never panics: on text that is not valid JSON after all
/// it returns `None`.
mod raw {
    fn ws(b: &[u8], mut i: usize) -> usize {
        while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            i += 1;
        }
        i
    }

    /// End (exclusive) of the string starting at the quote `b[i]`.
    fn string_end(b: &[u8], i: usize) -> Option<usize> {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let mut j = i + 1;
        loop {
            match *b.get(j)? {
                b'\\' => j += 2,
                b'"' => return Some(j + 1),
                _ => j += 1,
            }
        }
    }

    /// End (exclusive) of the value starting at `b[i]`.
    fn value_end(b: &[u8], i: usize) -> Option<usize> {
        match *b.get(i)? {
            b'"' => string_end(b, i),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut j = i;
                loop {
                    match *b.get(j)? {
                        b'"' => {
                            j = string_end(b, j)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                return Some(j + 1);
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
            }
            _ => {
                let mut j = i;
                while j < b.len()
                    && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    j += 1;
                }
                (j > i).then_some(j)
            }
        }
    }

    /// `(raw key with its quotes, raw value)` for each member, in order, up to the first `max`;
    /// `None` if not an object.
    pub fn members(s: &str, max: usize) -> Option<Vec<(&str, &str)>> {
        let b = s.as_bytes();
        let mut i = ws(b, 0);
        if b.get(i) != Some(&b'{') {
            return None;
        }
        i = ws(b, i + 1);
        let mut out = Vec::new();
        if b.get(i) == Some(&b'}') {
            return Some(out);
        }
        loop {
            let key_end = string_end(b, i)?;
            let key = s.get(i..key_end)?;
            i = ws(b, key_end);
            if b.get(i) != Some(&b':') {
                return None;
            }
            i = ws(b, i + 1);
            let end = value_end(b, i)?;
            out.push((key, s.get(i..end)?));
            if out.len() == max {
                return Some(out);
            }
            i = ws(b, end);
            match b.get(i)? {
                b',' => i = ws(b, i + 1),
                b'}' => return Some(out),
                _ => return None,
            }
        }
    }

    /// Each element's raw text, up to the first `max`; `None` if not an array.
    pub fn elements(s: &str, max: usize) -> Option<Vec<&str>> {
        let b = s.as_bytes();
        let mut i = ws(b, 0);
        if b.get(i) != Some(&b'[') {
            return None;
        }
        i = ws(b, i + 1);
        let mut out = Vec::new();
        if b.get(i) == Some(&b']') {
            return Some(out);
        }
        loop {
            let end = value_end(b, i)?;
            out.push(s.get(i..end)?);
            if out.len() == max {
                return Some(out);
            }
            i = ws(b, end);
            match b.get(i)? {
                b',' => i = ws(b, i + 1),
                b']' => return Some(out),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp(1_761_739_200_000_000_000);

    fn w() -> TimeWindow {
        TimeWindow::default_at(NOW)
    }

    fn ok(body: &str) -> RecordsBatch {
        parse_records(body.as_bytes(), &w()).unwrap()
    }

    fn major(s: &str) -> Option<Amount> {
        Some(Amount::Major(Decimal::parse(s).unwrap()))
    }

    fn one_error(body: &str) -> String {
        let b = ok(body);
        assert!(b.accepted.is_empty(), "{b:?}");
        assert_eq!(b.rejected.len(), 1, "{b:?}");
        b.rejected[0].error.clone()
    }

    #[test]
    fn full_object() {
        let b = ok(r#"{
            "kind": "refund", "object_id": "re_1", "intent_id": "int-1", "idempotency_key": "k-1",
            "status": "succeeded", "amount": 45.10, "currency": "usd", "target": "1042",
            "created_at": "2025-10-29T12:00:00Z", "observed_at": 1761739260000000001, "source": "reconciler"
        }"#);
        assert!(b.rejected.is_empty());
        assert_eq!(
            b.accepted,
            vec![RecordObservation {
                source: "reconciler".into(),
                kind: Some("refund".into()),
                object_id: "re_1".into(),
                intent_id: Some("int-1".into()),
                idempotency_key: Some("k-1".into()),
                status: "succeeded".into(),
                amount: major("45.1"),
                currency: Some("usd".into()),
                target: Some("1042".into()),
                created_at: Some(Timestamp(1_761_739_200_000_000_000)),
                observed_at: Timestamp(1_761_739_260_000_000_001),
            }]
        );
    }

    #[test]
    fn defaults() {
        let b = ok(r#"{"object_id": "d_1", "status": "draft", "intent_id": null}"#);
        let r = &b.accepted[0];
        assert_eq!(r.source, "api");
        assert_eq!(r.observed_at, NOW);
        assert_eq!(
            b.untimed,
            vec![0],
            "its time is the receive time, not its own"
        );
        assert_eq!(
            (r.kind.as_ref(), r.intent_id.as_ref(), r.amount),
            (None, None, None)
        );
    }

    #[test]
    fn amounts_are_exact() {
        // 20 significant digits: an f64 would round it.
        let b = ok(
            r#"[{"object_id":"a","status":"s","amount":12345678901234567.89},
                       {"object_id":"b","status":"s","amount":"45.00"},
                       {"object_id":"c","status":"s","amount":4.5e1},
                       {"object_id":"d","status":"s","amount":-0.10},
                       {"object_id":"e","status":"s","amount":0.1}]"#,
        );
        assert!(b.rejected.is_empty(), "{:?}", b.rejected);
        let amounts: Vec<_> = b.accepted.iter().map(|r| r.amount).collect();
        assert_eq!(
            amounts,
            vec![
                major("12345678901234567.89"),
                major("45"),
                major("45"),
                major("-0.1"),
                major("0.1")
            ]
        );
        assert_eq!(
            b.accepted[0].amount,
            Some(Amount::Major(Decimal {
                mantissa: 1234567890123456789,
                scale: 2
            }))
        );
    }

    #[test]
    fn array_keeps_good_items_and_names_bad_ones() {
        let b = ok(r#"[
            {"object_id": "re_1", "status": "pending"},
            {"object_id": "re_2", "status": "pending", "amount": true},
            {"object_id": "re_3", "status": "pending", "intentid": "x"},
            {"status": "pending"},
            "re_5",
            {"object_id": "re_6", "status": "succeeded", "observed_at": "yesterday"},
            {"object_id": "re_7", "status": "succeeded"}
        ]"#);
        let ids: Vec<_> = b.accepted.iter().map(|r| r.object_id.as_str()).collect();
        assert_eq!(ids, ["re_1", "re_7"]);
        let rej: Vec<_> = b
            .rejected
            .iter()
            .map(|r| (r.index, r.error.as_str()))
            .collect();
        assert_eq!(
            rej[0],
            (1, "amount: expected a number or a decimal string, got true")
        );
        assert_eq!(rej[1].0, 2);
        assert!(
            rej[1].1.starts_with("intentid: unknown field"),
            "{}",
            rej[1].1
        );
        assert_eq!(rej[2].0, 3);
        assert!(rej[2].1.starts_with("object_id: required"), "{}", rej[2].1);
        assert_eq!(rej[3], (4, "expected a record object, got \"re_5\""));
        assert_eq!(rej[4].0, 5);
        assert!(
            rej[4]
                .1
                .starts_with("observed_at: \"yesterday\" is not an RFC 3339"),
            "{}",
            rej[4].1
        );
    }

    #[test]
    fn field_errors() {
        let cases = [
            (
                r#"{"object_id":"","status":"s"}"#,
                "object_id: must not be empty",
            ),
            (
                r#"{"object_id":7,"status":"s"}"#,
                "object_id: expected a string, got 7",
            ),
            (r#"{"object_id":"a"}"#, "status: required"),
            (
                r#"{"object_id":"a","status":"s","amount":"45,00"}"#,
                "amount: \"45,00\" is not a decimal",
            ),
            (
                r#"{"object_id":"a","status":"s","amount":{"value":1}}"#,
                "amount: expected a number or a decimal string, got {\"value\":1}",
            ),
            (
                r#"{"object_id":"a","status":"s","amount":"1e999"}"#,
                "amount: \"1e999\" is not a decimal number in range",
            ),
            (
                r#"{"object_id":"a","status":"s","observed_at":1761739200}"#,
                "observed_at: 1761739200 is not plausible",
            ),
            (
                r#"{"object_id":"a","status":"s","created_at":1.5e18}"#,
                "created_at: expected integer unix nanoseconds",
            ),
            (
                r#"{"object_id":"a","status":"s","target":[1]}"#,
                "target: expected a string or an integer",
            ),
            (
                r#"{"object_id":"a","status":"s","status":"t"}"#,
                "status: given twice",
            ),
            (
                r#"{"object_id":"a","status":"s","source":""}"#,
                "source: must not be empty",
            ),
        ];
        for (body, want) in cases {
            let e = one_error(body);
            assert!(e.starts_with(want), "{body}: {e}");
        }
    }

    #[test]
    fn times_outside_the_bounds_reject_their_item_alone() {
        // NOW is 2025-10-29T12:00:00Z; the skew tolerated ahead of it is 1h.
        let b = ok(r#"[
            {"object_id":"a","status":"s","observed_at":"1969-12-31T23:59:59Z"},
            {"object_id":"b","status":"s","created_at":"1969-07-20T20:17:40Z"},
            {"object_id":"c","status":"s","observed_at":"2200-01-01T00:00:00Z"},
            {"object_id":"d","status":"s","observed_at":"1999-12-31T23:59:59.999Z"},
            {"object_id":"e","status":"s","observed_at":"2025-10-29T12:59:59Z","created_at":"2000-01-01T00:00:00Z"},
            {"object_id":"f","status":"s","created_at":"2025-10-29T13:00:01Z"},
            {"object_id":"g","status":"s","observed_at":9223372036854775807}
        ]"#);
        let ids: Vec<_> = b.accepted.iter().map(|r| r.object_id.as_str()).collect();
        assert_eq!(ids, ["e"]);
        let rej: Vec<_> = b
            .rejected
            .iter()
            .map(|r| (r.index, r.error.as_str()))
            .collect();
        let want = [
            (0, "observed_at: 1969-12-31T23:59:59.000000000Z is before 2000-01-01T00:00:00.000000000Z, the earliest time reckon accepts"),
            (1, "created_at: 1969-07-20T20:17:40.000000000Z is before 2000-01-01"),
            (2, "observed_at: 2200-01-01T00:00:00.000000000Z is after 2025-10-29T13:00:00.000000000Z, the latest time reckon accepts"),
            (3, "observed_at: 1999-12-31T23:59:59.999000000Z is before"),
            (5, "created_at: 2025-10-29T13:00:01.000000000Z is after"),
            (6, "observed_at: 2262-04-11T23:47:16.854775807Z is after"),
        ];
        assert_eq!(rej.len(), want.len(), "{rej:#?}");
        for ((index, error), (want_index, want_error)) in rej.iter().zip(want) {
            assert_eq!(*index, want_index, "{error}");
            assert!(error.starts_with(want_error), "{error}");
        }
    }

    #[test]
    fn untimed_items_are_listed_by_position_in_accepted() {
        let b = ok(r#"[
            {"object_id":"a","status":"s"},
            {"object_id":"b","status":"s","observed_at":"2025-10-29T11:00:00Z"},
            {"object_id":"bad"},
            {"object_id":"c","status":"s","observed_at":null}
        ]"#);
        let ids: Vec<_> = b.accepted.iter().map(|r| r.object_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(b.untimed, vec![0, 2]);
        assert_eq!(
            b.accepted[1].observed_at,
            Timestamp(NOW.0 - 3_600_000_000_000)
        );
    }

    #[test]
    fn integer_target_and_escaped_strings() {
        let b = ok(r#"{"object_id":"a\"b\u00e9","status":"s","target":1042,"kind":"dra{ft]"}"#);
        let r = &b.accepted[0];
        assert_eq!(r.object_id, "a\"bé");
        assert_eq!(r.target.as_deref(), Some("1042"));
        assert_eq!(r.kind.as_deref(), Some("dra{ft]"));
    }

    #[test]
    fn ndjson() {
        let body = "{\"object_id\":\"a\",\"status\":\"s\"}\r\n\n   \n{\"object_id\":\"b\",\"status\":\"s\",\"amount\":false}\n{not json}\n{\"object_id\":\"c\",\"status\":\"s\"}\n";
        let b = ok(body);
        let ids: Vec<_> = b.accepted.iter().map(|r| r.object_id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(b.rejected[0].index, 1);
        assert!(b.rejected[0].error.starts_with("amount:"));
        assert_eq!(b.rejected[1].index, 2);
        assert!(
            b.rejected[1].error.starts_with("invalid JSON"),
            "{}",
            b.rejected[1].error
        );
    }

    #[test]
    fn single_line_object_and_bom() {
        let b = parse_records(
            "\u{feff}{\"object_id\":\"a\",\"status\":\"s\"}\n".as_bytes(),
            &w(),
        )
        .unwrap();
        assert_eq!(b.accepted.len(), 1);
    }

    #[test]
    fn whole_body_errors() {
        assert_eq!(
            parse_records(b"\xff\xfe{", &w()),
            Err(RecordsError::NotUtf8 { valid_up_to: 0 })
        );
        assert_eq!(parse_records(b"  \n ", &w()), Err(RecordsError::Empty));
        assert!(matches!(
            parse_records(br#"{"object_id":"a","sta"#, &w()),
            Err(RecordsError::Malformed(_))
        ));
        // A pretty-printed object cut short is one broken document, not NDJSON.
        assert!(matches!(
            parse_records(b"{\n  \"object_id\": \"a\",\n  \"status\": \"s\"\n", &w()),
            Err(RecordsError::Malformed(_))
        ));
        assert!(matches!(
            parse_records(
                b"[\n{\"object_id\":\"a\",\"status\":\"s\"},\n{\"object_id\":\"b\"\n",
                &w()
            ),
            Err(RecordsError::Malformed(_))
        ));
        assert_eq!(
            parse_records(b"42", &w()),
            Err(RecordsError::NotRecords("number"))
        );
        assert_eq!(parse_records(b"[]", &w()), Ok(RecordsBatch::default()));
    }

    #[test]
    fn garbage_never_panics() {
        let samples: [&[u8]; 9] = [
            b"{",
            b"}",
            b"[",
            b"[[[[",
            b"\"",
            b"{\"a\":}",
            b"\n\n{}\n\n[]\n",
            b"nul\nl",
            "{\"é\":1}\n{\"ü\"}".as_bytes(),
        ];
        for s in samples {
            let _ = parse_records(s, &w());
        }
    }

    #[test]
    fn string_fields_over_the_value_limit_are_refused_alone() {
        let long = "x".repeat(MAX_VALUE_BYTES);
        let b = ok(&format!(
            "{{\"object_id\":\"re_1\",\"status\":\"succeeded\"}}\n{{\"object_id\":\"{long}\",\"status\":\"succeeded\"}}"
        ));
        assert_eq!(b.accepted.len(), 1);
        assert_eq!(
            b.rejected,
            vec![RecordRejection {
                index: 1,
                error: "object_id: 65538 bytes, over the limit of 65536".into()
            }]
        );
    }

    #[test]
    fn a_post_of_more_records_than_the_limit_is_refused_whole() {
        let item = r#"{"object_id":"re_1","status":"pending"}"#;
        let array = |n: usize| format!("[{}]", vec![item; n].join(","));
        let ndjson = |n: usize| vec![item; n].join("\n");
        assert_eq!(
            ok(&array(MAX_RECORDS_PER_POST)).accepted.len(),
            MAX_RECORDS_PER_POST
        );
        assert_eq!(
            ok(&ndjson(MAX_RECORDS_PER_POST)).accepted.len(),
            MAX_RECORDS_PER_POST
        );
        for body in [
            array(MAX_RECORDS_PER_POST + 1),
            ndjson(MAX_RECORDS_PER_POST + 1),
        ] {
            let e = parse_records(body.as_bytes(), &w()).unwrap_err();
            assert_eq!(e, RecordsError::TooMany);
            assert_eq!(
                e.to_string(),
                "body holds more than 10000 records: send them in several posts"
            );
        }
        // Millions of one-byte items are refused before a slice or an error is kept for each.
        let tiny = format!("[{}0]", "0,".repeat(4_000_000));
        assert_eq!(
            parse_records(tiny.as_bytes(), &w()),
            Err(RecordsError::TooMany)
        );
    }

    #[test]
    fn an_object_of_many_members_is_refused_at_the_first_bad_one() {
        let padding: String = (0..100_000).map(|i| format!(r#","x{i}":1"#)).collect();
        let body = format!(r#"{{"object_id":"re_1","status":"pending"{padding}}}"#);
        assert_eq!(
            one_error(&body),
            format!("x0: unknown field (expected one of {})", FIELDS.join(", "))
        );
        let repeated = r#"{"object_id":"a","status":"s","status":"t"}"#;
        assert_eq!(one_error(repeated), "status: given twice");
    }

    #[test]
    fn a_post_naming_too_many_intents_keeps_the_first_ones() {
        use crate::ingest::limits::MAX_INTENTS_PER_EXPORT;
        let mut lines: Vec<String> = (0..=MAX_INTENTS_PER_EXPORT)
            .map(|i| {
                format!(r#"{{"object_id":"re_{i}","status":"pending","intent_id":"int_{i}"}}"#)
            })
            .collect();
        // An intent already admitted, and an orphan: it counts as its object's.
        lines.push(r#"{"object_id":"re_x","status":"succeeded","intent_id":"int_0"}"#.into());
        lines.push(r#"{"object_id":"re_orphan","status":"succeeded"}"#.into());
        let b = ok(&lines.join("\n"));
        assert_eq!(b.accepted.len(), MAX_INTENTS_PER_EXPORT + 1);
        let refusal = format!(
            "the export names more than {MAX_INTENTS_PER_EXPORT} distinct intents; send the rest in another export"
        );
        assert_eq!(
            b.rejected,
            [MAX_INTENTS_PER_EXPORT, MAX_INTENTS_PER_EXPORT + 2]
                .map(|index| RecordRejection {
                    index,
                    error: refusal.clone()
                })
                .to_vec()
        );
    }
}
