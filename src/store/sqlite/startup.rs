//! What start-up reads besides events: the checkpoint, the intents whose verdict is not
//! settled, and the routes of settled intents (who a route reaches, and every route in pages
//! for the engine's filter). Routes, like retention's deletions, are written by the writer.

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension};

use super::super::{StoreError, Unsettled};
use crate::model::Timestamp;

pub(super) fn checkpoint(conn: &Connection) -> Result<Option<Timestamp>, StoreError> {
    let v: Option<i64> = conn
        .query_row(
            "SELECT value FROM reckon_meta WHERE name = 'checkpoint'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(v.map(Timestamp))
}

pub(super) fn routes_of_open_intents(conn: &Connection) -> Result<bool, StoreError> {
    let v: Option<i64> = conn
        .query_row(
            "SELECT value FROM reckon_meta WHERE name = 'open_routes'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(v.is_some_and(|v| v > 0))
}

/// Each unsettled intent with its stored verdict's fingerprint (stored as its bits: SQLite
/// integers are signed). Read from the partial index alone.
pub(super) fn unsettled_intents(conn: &Connection) -> Result<Vec<Unsettled>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT intent_id, fingerprint, listed_at FROM reckon_verdicts WHERE settled = 0",
    )?;
    let ids = stmt
        .query_map([], |r| {
            Ok(Unsettled {
                intent_id: r.get(0)?,
                fingerprint: r.get::<_, i64>(1)? as u64,
                listed_at: Timestamp(r.get(2)?),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ids)
}

/// The intents any of `routes` reaches, each once, in order.
pub(super) fn route_owners(
    conn: &Connection,
    routes: &[String],
) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT intent_id FROM reckon_routes WHERE route = ?1")?;
    let mut out = BTreeSet::new();
    for r in routes {
        let mut rows = stmt.query([r])?;
        while let Some(row) = rows.next()? {
            out.insert(row.get::<_, String>(0)?);
        }
    }
    Ok(out.into_iter().collect())
}

/// Distinct routes greater than `after`, in order, at most `limit`.
pub(super) fn routes_after(
    conn: &Connection,
    after: &str,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT route FROM reckon_routes WHERE route > ?1 ORDER BY route LIMIT ?2",
    )?;
    let routes = stmt
        .query_map(rusqlite::params![after, limit as i64], |r| {
            r.get::<_, String>(0)
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(routes)
}
