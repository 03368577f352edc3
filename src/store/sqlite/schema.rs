//! Versioned schema migrations for the SQLite file.
//!
//! Each migration runs in its own transaction together with the row that records it in
//! `reckon_schema_migrations`, so a crash mid-upgrade leaves the file at the previous version.
//! Migrations only ever add: a newer binary upgrades an older file in place and never drops data.
//! A file written by a newer binary (a version this one does not know) is refused rather than
//! guessed at.

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};

use crate::codec::{parse_rfc3339, VerdictDoc};
use crate::model::AttemptClass;
use crate::store::StoreError;

/// A data step of a migration, run after its SQL in the same transaction.
pub type Backfill = fn(&Connection) -> Result<(), StoreError>;

pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
    /// Data backfill run after `sql`, in the same transaction.
    pub backfill: Option<Backfill>,
}

/// v1: the event log, verdict documents and escalations.
///
/// `seq` is the ingest order, shared by the three event tables (assigned by the writer), so a
/// restart replays events in the order they arrived. Identity is a UNIQUE constraint so a re-sent
/// export is a no-op insert.
pub const V1_SQL: &str = "
CREATE TABLE reckon_attempts (
    seq INTEGER PRIMARY KEY,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    intent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at INTEGER NOT NULL,
    idempotency_key TEXT,
    http_status INTEGER,
    error_type TEXT,
    span_error INTEGER NOT NULL,
    object_id TEXT,
    object_status TEXT,
    reported_outcome TEXT,
    arguments TEXT,
    UNIQUE (trace_id, span_id)
);
CREATE TABLE reckon_readbacks (
    seq INTEGER PRIMARY KEY,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    intent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    at INTEGER NOT NULL,
    ended_at INTEGER NOT NULL,
    object_ids TEXT NOT NULL,
    reported_outcome TEXT,
    UNIQUE (trace_id, span_id)
);
CREATE TABLE reckon_records (
    seq INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    kind TEXT,
    object_id TEXT NOT NULL,
    intent_id TEXT,
    idempotency_key TEXT,
    status TEXT NOT NULL,
    amount TEXT,
    amount_unit TEXT,
    currency TEXT,
    target TEXT,
    created_at INTEGER,
    observed_at INTEGER NOT NULL,
    UNIQUE (source, object_id, status, observed_at)
);
CREATE TABLE reckon_verdicts (
    intent_id TEXT PRIMARY KEY,
    tool TEXT,
    contract TEXT,
    state TEXT NOT NULL,
    decision TEXT NOT NULL,
    first_seen INTEGER NOT NULL,
    last_event INTEGER NOT NULL,
    audited_at INTEGER NOT NULL,
    escalation_id TEXT,
    finding_kinds TEXT NOT NULL DEFAULT '',
    doc TEXT NOT NULL
);
CREATE INDEX reckon_verdicts_recent ON reckon_verdicts (last_event DESC, intent_id);
CREATE INDEX reckon_verdicts_state ON reckon_verdicts (state, last_event DESC, intent_id);
CREATE INDEX reckon_verdicts_tool ON reckon_verdicts (tool, last_event DESC, intent_id);
CREATE TABLE reckon_escalations (
    id TEXT PRIMARY KEY,
    intent_id TEXT NOT NULL,
    status TEXT NOT NULL,
    severity TEXT NOT NULL,
    opened_at INTEGER NOT NULL,
    findings TEXT NOT NULL,
    claimed_by TEXT,
    claimed_at INTEGER,
    resolved_by TEXT,
    resolved_at INTEGER,
    resolution TEXT,
    note TEXT,
    version INTEGER NOT NULL
);
CREATE INDEX reckon_escalations_status ON reckon_escalations (status, opened_at DESC, id);
CREATE INDEX reckon_escalations_recent ON reckon_escalations (opened_at DESC, id);
";

/// v2: a findings table and per-verdict attempt-class counts, so reports and finding filters are
/// plain SQL instead of JSON scans. Backfilled from the stored verdict documents.
pub const V2_SQL: &str = "
ALTER TABLE reckon_verdicts ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reckon_verdicts ADD COLUMN attempts_rejected INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reckon_verdicts ADD COLUMN attempts_conflict INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reckon_verdicts ADD COLUMN attempts_succeeded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reckon_verdicts ADD COLUMN attempts_failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reckon_verdicts ADD COLUMN attempts_recorded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reckon_verdicts ADD COLUMN attempts_unknown INTEGER NOT NULL DEFAULT 0;
CREATE TABLE reckon_findings (
    intent_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    severity TEXT NOT NULL,
    at INTEGER NOT NULL,
    subject TEXT NOT NULL,
    detail TEXT NOT NULL,
    tool TEXT
);
CREATE INDEX reckon_findings_intent ON reckon_findings (intent_id);
CREATE INDEX reckon_findings_kind ON reckon_findings (kind, intent_id);
";

/// v3: the evidence an escalation's resolution covered (a JSON array of evidence ids), so a new
/// attempt or object after it can open a new escalation, also after a restart.
pub const V3_SQL: &str = "
ALTER TABLE reckon_escalations ADD COLUMN covered TEXT;
";

/// v4: the notification outbox. One row per notification to one target, written in the same
/// transaction as the escalation change it announces; `rank` orders writes of one id (see
/// `OutboxItem::rank`: attempts while pending, then expired, then delivered).
pub const V4_SQL: &str = "
CREATE TABLE reckon_outbox (
    id TEXT PRIMARY KEY,
    target TEXT NOT NULL,
    escalation_id TEXT NOT NULL,
    escalation_version INTEGER NOT NULL,
    event TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_at INTEGER NOT NULL,
    last_error TEXT,
    rank INTEGER NOT NULL
);
CREATE INDEX reckon_outbox_pending ON reckon_outbox (target, state, created_at, id);
";

/// v5: lookups by intent, key and object, so an intent that left memory is brought back from
/// the store when later evidence touches it (`Store::events_touching`).
pub const V5_SQL: &str = "
CREATE INDEX reckon_attempts_intent ON reckon_attempts (intent_id);
CREATE INDEX reckon_readbacks_intent ON reckon_readbacks (intent_id);
CREATE INDEX reckon_records_intent ON reckon_records (intent_id);
CREATE INDEX reckon_records_key ON reckon_records (idempotency_key);
CREATE INDEX reckon_records_object ON reckon_records (object_id);
";

/// v6: the version of the contract each verdict was computed under (`Contract::version`, a
/// content hash), so a reload's effect can be read from the table. Empty with no contract, and
/// for rows written before v6 (their documents do not say; the next write of the row does).
pub const V6_SQL: &str = "
ALTER TABLE reckon_verdicts ADD COLUMN contract_version TEXT NOT NULL DEFAULT '';
";

/// v7: what start-up needs so its time does not grow with history (DESIGN.md "Memory and
/// history"): when each event was received (the events since the last checkpoint are read
/// back), which verdicts are settled (the others are loaded), the routes by which later
/// evidence reaches a settled intent, and the checkpoint itself. `settled` holds
/// [`crate::model::Rest`] as a number: 0 open (loaded at start), 1 settled (raw events may
/// expire), 2 quiet (at rest, not terminal; written as such from 2026-12).
pub const V7_SQL: &str = "
ALTER TABLE reckon_attempts ADD COLUMN received_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reckon_readbacks ADD COLUMN received_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reckon_records ADD COLUMN received_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX reckon_attempts_received ON reckon_attempts (received_at);
CREATE INDEX reckon_readbacks_received ON reckon_readbacks (received_at);
CREATE INDEX reckon_records_received ON reckon_records (received_at);
ALTER TABLE reckon_verdicts ADD COLUMN settled INTEGER NOT NULL DEFAULT 0;
CREATE INDEX reckon_verdicts_unsettled ON reckon_verdicts (intent_id) WHERE settled = 0;
CREATE INDEX reckon_verdicts_expiry ON reckon_verdicts (last_event, intent_id) WHERE settled = 1;
CREATE TABLE reckon_routes (
    route TEXT NOT NULL,
    intent_id TEXT NOT NULL,
    PRIMARY KEY (route, intent_id)
) WITHOUT ROWID;
CREATE INDEX reckon_routes_intent ON reckon_routes (intent_id);
CREATE TABLE reckon_meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
";

/// v8: each verdict's fingerprint ([`crate::model::Verdict::fingerprint`]), read with the
/// unsettled intents at start-up so the verdicts a start recomputes unchanged are not written
/// again. The unsettled index covers it: start-up reads it without touching the table.
pub const V8_SQL: &str = "
ALTER TABLE reckon_verdicts ADD COLUMN fingerprint INTEGER NOT NULL DEFAULT 0;
DROP INDEX reckon_verdicts_unsettled;
CREATE INDEX reckon_verdicts_unsettled ON reckon_verdicts (intent_id, fingerprint) WHERE settled = 0;
";

/// v9: escalations by intent: an intent's escalations are read back with it when it returns
/// to memory, and start-up reads only those of the intents it loads.
pub const V9_SQL: &str = "
CREATE INDEX reckon_escalations_intent ON reckon_escalations (intent_id);
";

/// v10: what an intent is looked up by (`GET /api/v1/intents?target=&object_id=&key=`):
/// one row per (kind, value, intent) of [`crate::store::lookups_of`], replaced with each
/// verdict write, so a lookup is a search of the primary key, not a scan of the verdicts.
/// Backfilled from the stored verdict documents (their keys, objects, the objects' targets and
/// the objects their attempts named; documents from before kept no parameter target). And the
/// take-overs of escalations someone else held (`"override": true`), a JSON array of
/// `{by, at, action, held_by}`; NULL is none.
pub const V10_SQL: &str = "
CREATE TABLE reckon_intent_lookup (
    kind TEXT NOT NULL,
    value TEXT NOT NULL,
    intent_id TEXT NOT NULL,
    PRIMARY KEY (kind, value, intent_id)
) WITHOUT ROWID;
CREATE INDEX reckon_intent_lookup_intent ON reckon_intent_lookup (intent_id);
INSERT OR IGNORE INTO reckon_intent_lookup (kind, value, intent_id)
    SELECT 'key', j.value, v.intent_id FROM reckon_verdicts v, json_each(v.doc, '$.idempotency_keys') j
    WHERE j.type = 'text';
INSERT OR IGNORE INTO reckon_intent_lookup (kind, value, intent_id)
    SELECT 'key', json_extract(j.value, '$.idempotency_key'), v.intent_id
    FROM reckon_verdicts v, json_each(v.doc, '$.attempts') j
    WHERE json_type(j.value, '$.idempotency_key') = 'text';
INSERT OR IGNORE INTO reckon_intent_lookup (kind, value, intent_id)
    SELECT 'object', json_extract(j.value, '$.object_id'), v.intent_id
    FROM reckon_verdicts v, json_each(v.doc, '$.objects') j
    WHERE json_type(j.value, '$.object_id') = 'text';
INSERT OR IGNORE INTO reckon_intent_lookup (kind, value, intent_id)
    SELECT 'target', json_extract(j.value, '$.target'), v.intent_id
    FROM reckon_verdicts v, json_each(v.doc, '$.objects') j
    WHERE json_type(j.value, '$.target') = 'text';
INSERT OR IGNORE INTO reckon_intent_lookup (kind, value, intent_id)
    SELECT 'object', json_extract(j.value, '$.object_id'), v.intent_id
    FROM reckon_verdicts v, json_each(v.doc, '$.attempts') j
    WHERE json_type(j.value, '$.object_id') = 'text';
INSERT OR IGNORE INTO reckon_intent_lookup (kind, value, intent_id)
    SELECT 'target', json_extract(v.doc, '$.target'), v.intent_id
    FROM reckon_verdicts v WHERE json_type(v.doc, '$.target') = 'text';
ALTER TABLE reckon_escalations ADD COLUMN overrides TEXT;
";

/// v11: where each intent and escalation is listed (`Verdict::listed_at`,
/// `Escalation::listed_at`): pages go newest first by `(listed_at, id)`, a place fixed when the
/// row is first written (the upserts never change it), so a walk meets every row once. Filled
/// from the first-seen and opened-at times the rows hold. The listing indexes replace those by
/// last event and opened-at time that the pages used; the unsettled index covers the listing
/// time too, which start-up reads beside the fingerprint.
pub const V11_SQL: &str = "
ALTER TABLE reckon_verdicts ADD COLUMN listed_at INTEGER NOT NULL DEFAULT 0;
UPDATE reckon_verdicts SET listed_at = first_seen;
DROP INDEX reckon_verdicts_state;
DROP INDEX reckon_verdicts_tool;
CREATE INDEX reckon_verdicts_listed ON reckon_verdicts (listed_at DESC, intent_id DESC);
CREATE INDEX reckon_verdicts_state ON reckon_verdicts (state, listed_at DESC, intent_id DESC);
CREATE INDEX reckon_verdicts_tool ON reckon_verdicts (tool, listed_at DESC, intent_id DESC);
DROP INDEX reckon_verdicts_unsettled;
CREATE INDEX reckon_verdicts_unsettled ON reckon_verdicts (intent_id, fingerprint, listed_at) WHERE settled = 0;
ALTER TABLE reckon_escalations ADD COLUMN listed_at INTEGER NOT NULL DEFAULT 0;
UPDATE reckon_escalations SET listed_at = opened_at;
DROP INDEX reckon_escalations_status;
DROP INDEX reckon_escalations_recent;
CREATE INDEX reckon_escalations_status ON reckon_escalations (status, listed_at DESC, id DESC);
CREATE INDEX reckon_escalations_recent ON reckon_escalations (listed_at DESC, id DESC);
";

/// v12: each escalation's tool (`Escalation::tool`, its intent's), which the queue, the gauges
/// and `?tool=` go by; filled from the verdicts.
pub const V12_SQL: &str = "
ALTER TABLE reckon_escalations ADD COLUMN tool TEXT;
UPDATE reckon_escalations SET tool =
    (SELECT v.tool FROM reckon_verdicts v WHERE v.intent_id = reckon_escalations.intent_id);
";

/// The attempt-class count columns of `reckon_verdicts`, in [`AttemptClass::ALL`] order.
pub const CLASS_COLUMNS: [&str; 6] = [
    "attempts_rejected",
    "attempts_conflict",
    "attempts_succeeded",
    "attempts_failed",
    "attempts_recorded",
    "attempts_unknown",
];

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "event log, verdicts, escalations",
        sql: V1_SQL,
        backfill: None,
    },
    Migration {
        version: 2,
        name: "findings table, attempt class counts",
        sql: V2_SQL,
        backfill: Some(backfill_v2),
    },
    Migration {
        version: 3,
        name: "evidence covered by a resolution",
        sql: V3_SQL,
        backfill: None,
    },
    Migration {
        version: 4,
        name: "notification outbox",
        sql: V4_SQL,
        backfill: None,
    },
    Migration {
        version: 5,
        name: "event lookups by intent, key and object",
        sql: V5_SQL,
        backfill: None,
    },
    Migration {
        version: 6,
        name: "contract version of each verdict",
        sql: V6_SQL,
        backfill: None,
    },
    Migration {
        version: 7,
        name: "receive times, settled verdicts, routes, checkpoint",
        sql: V7_SQL,
        backfill: None,
    },
    Migration {
        version: 8,
        name: "verdict fingerprints",
        sql: V8_SQL,
        backfill: None,
    },
    Migration {
        version: 9,
        name: "escalations by intent",
        sql: V9_SQL,
        backfill: None,
    },
    Migration {
        version: 10,
        name: "intent lookups by target, object and key; escalation overrides",
        sql: V10_SQL,
        backfill: None,
    },
    Migration {
        version: 11,
        name: "listing times of intents and escalations",
        sql: V11_SQL,
        backfill: None,
    },
    Migration {
        version: 12,
        name: "the tool of each escalation",
        sql: V12_SQL,
        backfill: None,
    },
];

/// The schema version this binary writes.
pub fn latest() -> i64 {
    MIGRATIONS.last().map(|m| m.version).unwrap_or(0)
}

const CREATE_MIGRATIONS: &str =
    "CREATE TABLE IF NOT EXISTS reckon_schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)";

/// The file's schema version: 0 for a new file.
pub fn current_version(conn: &Connection) -> Result<i64, StoreError> {
    let has_table: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'reckon_schema_migrations'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if has_table.is_none() {
        return Ok(0);
    }
    let v: Option<i64> = conn.query_row(
        "SELECT max(version) FROM reckon_schema_migrations",
        [],
        |r| r.get(0),
    )?;
    Ok(v.unwrap_or(0))
}

/// Bring the file up to [`latest`]. `now_nanos` stamps `applied_at`.
pub fn migrate(conn: &Connection, now_nanos: i64) -> Result<(), StoreError> {
    conn.execute_batch(CREATE_MIGRATIONS)?;
    for m in MIGRATIONS {
        // IMMEDIATE takes the write lock before reading the version, so two processes opening
        // one old file cannot both apply the same migration.
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        let found = current_version(conn)?;
        if found > latest() {
            return Err(StoreError::SchemaTooNew {
                found,
                known: latest(),
            });
        }
        if found >= m.version {
            tx.commit()?;
            continue;
        }
        conn.execute_batch(m.sql)?;
        if let Some(backfill) = m.backfill {
            backfill(conn)?;
        }
        conn.execute(
            "INSERT INTO reckon_schema_migrations (version, applied_at) VALUES (?1, ?2)",
            (m.version, now_nanos),
        )?;
        tx.commit()?;
        tracing::info!(
            version = m.version,
            name = m.name,
            "applied schema migration"
        );
    }
    Ok(())
}

/// Check without writing (read-only opens): the file must be exactly at [`latest`].
pub fn check(conn: &Connection) -> Result<(), StoreError> {
    let found = current_version(conn)?;
    if found > latest() {
        return Err(StoreError::SchemaTooNew {
            found,
            known: latest(),
        });
    }
    if found < latest() {
        return Err(StoreError::SchemaOutdated {
            found,
            known: latest(),
        });
    }
    Ok(())
}

/// Fill v2's findings table and class counts from the verdict documents v1 kept.
fn backfill_v2(conn: &Connection) -> Result<(), StoreError> {
    let mut select = conn.prepare("SELECT intent_id, tool, doc FROM reckon_verdicts")?;
    let mut insert = conn.prepare(
        "INSERT INTO reckon_findings (intent_id, kind, severity, at, subject, detail, tool)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    let mut update = conn.prepare(&format!(
        "UPDATE reckon_verdicts SET attempts = ?2, {} WHERE intent_id = ?1",
        CLASS_COLUMNS
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = ?{}", i + 3))
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let intent_id: String = row.get(0)?;
        let tool: Option<String> = row.get(1)?;
        let doc: String = row.get(2)?;
        let doc: VerdictDoc = serde_json::from_str(&doc)
            .map_err(|e| StoreError::corrupt("reckon_verdicts", "doc", e.to_string()))?;
        let mut counts = [0i64; 6];
        for a in &doc.attempts {
            let class = AttemptClass::parse(&a.class).ok_or_else(|| {
                StoreError::corrupt(
                    "reckon_verdicts",
                    "doc",
                    format!("unknown attempt class {:?}", a.class),
                )
            })?;
            if let Some(i) = AttemptClass::ALL.iter().position(|c| *c == class) {
                counts[i] += 1;
            }
        }
        update.execute(rusqlite::params![
            intent_id,
            doc.attempts.len() as i64,
            counts[0],
            counts[1],
            counts[2],
            counts[3],
            counts[4],
            counts[5]
        ])?;
        for f in &doc.findings {
            let at = parse_rfc3339(&f.at).ok_or_else(|| {
                StoreError::corrupt(
                    "reckon_verdicts",
                    "doc",
                    format!("bad finding time {:?}", f.at),
                )
            })?;
            insert.execute(rusqlite::params![
                intent_id, f.kind, f.severity, at.0, f.subject, f.detail, tool
            ])?;
        }
    }
    Ok(())
}
