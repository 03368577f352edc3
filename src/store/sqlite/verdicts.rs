//! Verdicts: encoding them for the writer, reading one, the ids under a prefix, and the
//! filtered, cursor-paged listing.

use std::sync::Arc;

use rusqlite::types::Value;
use rusqlite::Connection;

use super::super::{CursorKey, Page, StoreError, VerdictFilter};
use super::rows::{decode_doc, Dec};
use super::writer::EncodedVerdict;
use crate::codec::VerdictDoc;
use crate::model::Verdict;

/// Serialization is the costly part of a verdict write: done by the caller, not the writer thread.
pub(super) fn encode_verdicts(
    verdicts: Vec<Arc<Verdict>>,
) -> Result<Vec<EncodedVerdict>, StoreError> {
    let mut encoded = verdicts
        .into_iter()
        .map(|v| {
            let doc = serde_json::to_string(&VerdictDoc::from_verdict(&v)).map_err(|e| {
                StoreError::WriteFailed(format!("encoding verdict {}: {e}", v.intent_id))
            })?;
            Ok(EncodedVerdict { verdict: v, doc })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    // In key order, so the writer's inserts into the intent-keyed indexes walk each B-tree
    // once instead of seeking at random (~1.09x on the durable path; BENCHMARKS.md). Stable:
    // of two verdicts of one intent the later is still written last and wins.
    encoded.sort_by(|a, b| a.verdict.intent_id.cmp(&b.verdict.intent_id));
    Ok(encoded)
}

/// The stored document of `intent_id`'s verdict.
pub(super) fn get_verdict(conn: &Connection, id: &str) -> Result<Option<VerdictDoc>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT doc FROM reckon_verdicts WHERE intent_id = ?1")?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => decode_doc(row, 0).map(Some),
        None => Ok(None),
    }
}

/// Those of `intent_ids` with a stored verdict (the primary key), a statement per chunk of ids.
pub(super) fn stored_verdicts(
    conn: &Connection,
    intent_ids: &[String],
) -> Result<Vec<String>, StoreError> {
    const CHUNK: usize = 500;
    let mut out = Vec::new();
    for chunk in intent_ids.chunks(CHUNK) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let sql = format!("SELECT intent_id FROM reckon_verdicts WHERE intent_id IN ({marks})");
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(chunk.iter()))?;
        while let Some(row) = rows.next()? {
            let d = Dec {
                row,
                table: "reckon_verdicts",
            };
            out.push(d.string(0, "intent_id")?);
        }
    }
    Ok(out)
}

pub(super) fn list_verdicts(
    conn: &Connection,
    filter: &VerdictFilter,
) -> Result<Page<VerdictDoc>, StoreError> {
    let limit = filter.effective_limit();
    let mut sql =
        String::from("SELECT intent_id, last_event, doc FROM reckon_verdicts v WHERE 1 = 1");
    let mut args: Vec<Value> = Vec::new();
    if let Some(state) = filter.state {
        args.push(Value::Text(state.as_str().into()));
        sql.push_str(&format!(" AND state = ?{}", args.len()));
    }
    if let Some(tool) = &filter.tool {
        args.push(Value::Text(tool.clone()));
        sql.push_str(&format!(" AND tool = ?{}", args.len()));
    }
    if let Some(since) = filter.since {
        args.push(Value::Integer(since.0));
        sql.push_str(&format!(" AND last_event >= ?{}", args.len()));
    }
    if let Some(kind) = filter.finding {
        args.push(Value::Text(kind.as_str().into()));
        sql.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM reckon_findings f WHERE f.intent_id = v.intent_id AND f.kind = ?{})",
            args.len()
        ));
    }
    if let Some(cursor) = &filter.cursor {
        let key = CursorKey::decode(cursor)?;
        args.push(Value::Integer(key.last_event.0));
        let t = args.len();
        args.push(Value::Text(key.intent_id));
        // Mixed sort directions rule out a row-value comparison; this form still uses the index.
        sql.push_str(&format!(
            " AND (last_event < ?{t} OR (last_event = ?{t} AND intent_id > ?{}))",
            args.len()
        ));
    }
    // One extra row tells whether there is a next page.
    args.push(Value::Integer(limit as i64 + 1));
    sql.push_str(&format!(
        " ORDER BY last_event DESC, intent_id ASC LIMIT ?{}",
        args.len()
    ));

    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
    let mut items = Vec::with_capacity(limit.min(128));
    let mut last: Option<CursorKey> = None;
    let mut more = false;
    while let Some(row) = rows.next()? {
        if items.len() == limit {
            more = true;
            break;
        }
        let d = Dec {
            row,
            table: "reckon_verdicts",
        };
        last = Some(CursorKey {
            intent_id: d.string(0, "intent_id")?,
            last_event: d.ts(1, "last_event")?,
        });
        items.push(decode_doc(row, 2)?);
    }
    let next_cursor = if more { last.map(|k| k.encode()) } else { None };
    Ok(Page { items, next_cursor })
}
