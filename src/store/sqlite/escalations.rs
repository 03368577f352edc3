//! Escalations and their notifications as read: one escalation, the queue by status, all of
//! them for start-up, and a target's pending outbox items. Every change to them (the engine's,
//! and a person's compare-and-set) is the writer's (`writer.rs`).

use rusqlite::types::Value;
use rusqlite::Connection;

use super::super::{EscalationCursor, EscalationFilter, OutboxPage, Page, StoreError};
use super::rows::{count, decode_escalation, decode_outbox, ESCALATION_COLS, OUTBOX_COLS};
use crate::model::{Escalation, EscalationStatus, Timestamp};

fn query_escalations(
    conn: &Connection,
    sql: &str,
    args: impl rusqlite::Params,
) -> Result<Vec<Escalation>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(args)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode_escalation(row)?);
    }
    Ok(out)
}

/// Every escalation, oldest first.
pub(super) fn load_escalations(conn: &Connection) -> Result<Vec<Escalation>, StoreError> {
    query_escalations(
        conn,
        &format!("SELECT {ESCALATION_COLS} FROM reckon_escalations ORDER BY opened_at, id"),
        [],
    )
}

/// How many escalations the file holds.
pub(super) fn escalation_total(conn: &Connection) -> Result<usize, StoreError> {
    let n: i64 = conn.query_row("SELECT count(*) FROM reckon_escalations", [], |r| r.get(0))?;
    Ok(n.max(0) as usize)
}

/// Every escalation of these intents, read in one pass over the table, only those of the
/// intents asked for decoded: cheaper than a probe per id when the ids are many next to the
/// table (a start-up that loads a million open intents, each escalated).
pub(super) fn escalations_among(
    conn: &Connection,
    intent_ids: &foldhash::HashSet<String>,
) -> Result<Vec<Escalation>, StoreError> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {ESCALATION_COLS} FROM reckon_escalations"))?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::with_capacity(intent_ids.len());
    while let Some(row) = rows.next()? {
        // Column 1 of ESCALATION_COLS.
        let intent = row.get_ref(1)?.as_str().unwrap_or_default();
        if intent_ids.contains(intent) {
            out.push(decode_escalation(row)?);
        }
    }
    Ok(out)
}

/// Every escalation of these intents (the `reckon_escalations_intent` index), a statement per
/// chunk of ids.
pub(super) fn escalations_of(
    conn: &Connection,
    intent_ids: &[String],
) -> Result<Vec<Escalation>, StoreError> {
    const CHUNK: usize = 500;
    let mut out = Vec::new();
    for chunk in intent_ids.chunks(CHUNK) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let sql = format!(
            "SELECT {ESCALATION_COLS} FROM reckon_escalations WHERE intent_id IN ({marks})"
        );
        out.extend(query_escalations(
            conn,
            &sql,
            rusqlite::params_from_iter(chunk.iter()),
        )?);
    }
    Ok(out)
}

pub(super) fn get_escalation(
    conn: &Connection,
    id: &str,
) -> Result<Option<Escalation>, StoreError> {
    let sql = format!("SELECT {ESCALATION_COLS} FROM reckon_escalations WHERE id = ?1");
    Ok(query_escalations(conn, &sql, [id])?.into_iter().next())
}

/// The newest `limit` escalations, of `status` or of any.
pub(super) fn list_escalations(
    conn: &Connection,
    status: Option<EscalationStatus>,
    limit: i64,
) -> Result<Vec<Escalation>, StoreError> {
    match status {
        Some(s) => query_escalations(
            conn,
            &format!(
                "SELECT {ESCALATION_COLS} FROM reckon_escalations WHERE status = ?1
                 ORDER BY listed_at DESC, id DESC LIMIT ?2"
            ),
            rusqlite::params![s.as_str(), limit],
        ),
        None => query_escalations(
            conn,
            &format!("SELECT {ESCALATION_COLS} FROM reckon_escalations ORDER BY listed_at DESC, id DESC LIMIT ?1"),
            [limit],
        ),
    }
}

/// A page of escalations, newest first by `(listed_at, id)` after the cursor's, and how many
/// match in all, from one snapshot.
pub(super) fn page_escalations(
    conn: &Connection,
    filter: &EscalationFilter,
) -> Result<Page<Escalation>, StoreError> {
    let limit = filter.effective_limit();
    let after = filter
        .cursor
        .as_deref()
        .map(EscalationCursor::decode)
        .transpose()?;
    let mut conditions = String::from(" WHERE 1 = 1");
    let mut args: Vec<Value> = Vec::new();
    if let Some(status) = filter.status {
        args.push(Value::Text(status.as_str().into()));
        conditions.push_str(&format!(" AND e.status = ?{}", args.len()));
    }
    if let Some(severity) = filter.severity {
        args.push(Value::Text(severity.as_str().into()));
        conditions.push_str(&format!(" AND e.severity = ?{}", args.len()));
    }
    if let Some(tool) = &filter.tool {
        args.push(Value::Text(tool.clone()));
        conditions.push_str(&format!(" AND e.tool = ?{}", args.len()));
    }
    let tx = conn.unchecked_transaction()?;
    let total: i64 = conn.query_row(
        &format!("SELECT count(*) FROM reckon_escalations e{conditions}"),
        rusqlite::params_from_iter(args.iter()),
        |r| r.get(0),
    )?;
    let mut sql = format!("SELECT {ESCALATION_COLS} FROM reckon_escalations e{conditions}");
    if let Some(after) = after {
        args.push(Value::Integer(after.listed_at.0));
        args.push(Value::Text(after.id));
        sql.push_str(&format!(
            " AND (e.listed_at, e.id) < (?{}, ?{})",
            args.len() - 1,
            args.len()
        ));
    }
    args.push(Value::Integer(limit as i64 + 1));
    sql.push_str(&format!(
        " ORDER BY e.listed_at DESC, e.id DESC LIMIT ?{}",
        args.len()
    ));
    let mut items = query_escalations(conn, &sql, rusqlite::params_from_iter(args))?;
    tx.finish()?;
    let more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = match (more, items.last()) {
        (true, Some(last)) => Some(
            EscalationCursor {
                listed_at: last.listed_at,
                id: last.id.clone(),
            }
            .encode(),
        ),
        _ => None,
    };
    Ok(Page {
        items,
        next_cursor,
        total: count(total, "reckon_escalations", "count")?,
    })
}

pub(super) fn outbox_pending(
    conn: &Connection,
    target: &str,
    since: Timestamp,
    limit: usize,
) -> Result<OutboxPage, StoreError> {
    // One read transaction: the page and the count from one snapshot.
    let tx = conn.unchecked_transaction()?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {OUTBOX_COLS} FROM reckon_outbox
         WHERE target = ?1 AND state = 'pending' AND created_at >= ?2
         ORDER BY created_at, id LIMIT ?3"
    ))?;
    let mut rows = stmt.query(rusqlite::params![target, since.0, limit as i64])?;
    let mut items = Vec::new();
    while let Some(row) = rows.next()? {
        items.push(decode_outbox(row)?);
    }
    drop(rows);
    drop(stmt);
    let total: i64 = conn.query_row(
        "SELECT count(*) FROM reckon_outbox WHERE target = ?1 AND state = 'pending' AND created_at >= ?2",
        rusqlite::params![target, since.0],
        |r| r.get(0),
    )?;
    tx.finish()?;
    Ok(OutboxPage {
        items,
        total: count(total, "reckon_outbox", "count")?,
    })
}
