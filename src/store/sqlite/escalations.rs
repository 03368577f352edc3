//! Escalations and their notifications as read: one escalation, the queue by status, all of
//! them for start-up, and a target's pending outbox items. Every change to them (the engine's,
//! and a person's compare-and-set) is the writer's (`writer.rs`).

use rusqlite::Connection;

use super::super::{OutboxPage, StoreError};
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
                 ORDER BY opened_at DESC, id LIMIT ?2"
            ),
            rusqlite::params![s.as_str(), limit],
        ),
        None => query_escalations(
            conn,
            &format!("SELECT {ESCALATION_COLS} FROM reckon_escalations ORDER BY opened_at DESC, id LIMIT ?1"),
            [limit],
        ),
    }
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
