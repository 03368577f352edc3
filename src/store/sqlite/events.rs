//! Event reads: every stored event in ingest order (start-up's full load, or what was received
//! since a checkpoint), the events that touch given intents, keys or objects, and which record
//! observations the store already knows.

use std::collections::HashSet;

use rusqlite::Connection;

use super::super::{EventQuery, RecordKey, StoreError};
use super::rows::{
    decode_attempt, decode_readback, decode_record, ATTEMPT_COLS, READBACK_COLS, RECORD_COLS,
};
use crate::model::{Event, Timestamp};

fn load_table(
    conn: &Connection,
    sql: &str,
    since: i64,
    decode: fn(&rusqlite::Row<'_>) -> Result<(i64, Event), StoreError>,
) -> Result<Vec<(i64, Event)>, StoreError> {
    let mut stmt = conn.prepare(sql)?;
    let mut rows = stmt.query([since])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// Events received at or after `since` (all of them for `None`), merged back into ingest
/// order from the three tables (each scanned in rowid order, which is `seq` order: a straight
/// B-tree walk, no sort; with `since`, from the receive-time index).
pub(super) fn load_events(
    conn: &Connection,
    since: Option<Timestamp>,
) -> Result<Vec<Event>, StoreError> {
    // One read transaction, so the three scans see the same snapshot.
    let tx = conn.unchecked_transaction()?;
    let (filter, since) = match since {
        Some(t) => ("WHERE received_at >= ?1", t.0),
        None => ("WHERE ?1 = ?1", 0),
    };
    let parts = [
        load_table(
            conn,
            &format!("SELECT {ATTEMPT_COLS} FROM reckon_attempts {filter} ORDER BY seq"),
            since,
            decode_attempt,
        )?,
        load_table(
            conn,
            &format!("SELECT {READBACK_COLS} FROM reckon_readbacks {filter} ORDER BY seq"),
            since,
            decode_readback,
        )?,
        load_table(
            conn,
            &format!("SELECT {RECORD_COLS} FROM reckon_records {filter} ORDER BY seq"),
            since,
            decode_record,
        )?,
    ];
    tx.finish()?;
    let total = parts.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut iters = parts.map(|p| p.into_iter().peekable());
    loop {
        let mut best: Option<(usize, i64)> = None;
        for (i, it) in iters.iter_mut().enumerate() {
            if let Some((seq, _)) = it.peek() {
                if best.is_none_or(|(_, b)| *seq < b) {
                    best = Some((i, *seq));
                }
            }
        }
        let Some((i, _)) = best else { break };
        if let Some((_, e)) = iters[i].next() {
            out.push(e);
        }
    }
    Ok(out)
}

/// [`Store::known_observations`](super::super::Store::known_observations).
pub(super) fn known_observations(
    conn: &Connection,
    keys: Vec<RecordKey>,
) -> Result<HashSet<RecordKey>, StoreError> {
    // A prefix of the records' UNIQUE (source, object_id, status, observed_at) index.
    let mut stmt = conn.prepare_cached(
        "SELECT 1 FROM reckon_records WHERE source = ?1 AND object_id = ?2 AND status = ?3 LIMIT 1",
    )?;
    let mut known = HashSet::new();
    for k in keys {
        if stmt.exists([&k.source, &k.object_id, &k.status])? {
            known.insert(k);
        }
    }
    Ok(known)
}

/// [`Store::events_touching`](super::super::Store::events_touching): indexed lookups (v4's indexes), one statement per chunk of ids.
/// Each with its `seq`; [`in_ingest_order`] makes the answer of one or several of these.
pub(super) fn events_touching(
    conn: &Connection,
    q: &EventQuery,
) -> Result<Vec<(i64, Event)>, StoreError> {
    const CHUNK: usize = 500;
    let tx = conn.unchecked_transaction()?;
    // Most intents have one attempt: sized for that, a start-up's millions are not copied
    // from one doubling to the next.
    let mut out: Vec<(i64, Event)> = Vec::with_capacity(q.intents.len());
    let mut by = |table: &str,
                  cols: &str,
                  column: &str,
                  ids: &[String],
                  decode: fn(&rusqlite::Row<'_>) -> Result<(i64, Event), StoreError>|
     -> Result<(), StoreError> {
        for chunk in ids.chunks(CHUNK) {
            let marks = vec!["?"; chunk.len()].join(", ");
            // Cached: every full chunk has the same text.
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {cols} FROM {table} WHERE {column} IN ({marks})"
            ))?;
            let mut rows = stmt.query(rusqlite::params_from_iter(chunk.iter()))?;
            while let Some(row) = rows.next()? {
                out.push(decode(row)?);
            }
        }
        Ok(())
    };
    by(
        "reckon_attempts",
        ATTEMPT_COLS,
        "intent_id",
        &q.intents,
        decode_attempt,
    )?;
    by(
        "reckon_readbacks",
        READBACK_COLS,
        "intent_id",
        &q.intents,
        decode_readback,
    )?;
    by(
        "reckon_records",
        RECORD_COLS,
        "intent_id",
        &q.intents,
        decode_record,
    )?;
    by(
        "reckon_records",
        RECORD_COLS,
        "idempotency_key",
        &q.keys,
        decode_record,
    )?;
    by(
        "reckon_records",
        RECORD_COLS,
        "object_id",
        &q.objects,
        decode_record,
    )?;
    tx.finish()?;
    Ok(out)
}

/// Events found by [`events_touching`], once each, in ingest order (for a faithful replay): a
/// record found by two of its columns, or by two parts of a split question, is one event.
pub(super) fn in_ingest_order(mut found: Vec<(i64, Event)>) -> Vec<Event> {
    found.sort_by_key(|(seq, e)| (*seq, matches!(e, Event::Record(_))));
    found.dedup_by(|a, b| {
        a.0 == b.0 && std::mem::discriminant(&a.1) == std::mem::discriminant(&b.1)
    });
    found.into_iter().map(|(_, e)| e).collect()
}
