//! The embedded store: one SQLite file, `reckon.sqlite`, under the data directory.
//!
//! Writes go through one group-commit writer thread ([`writer`]); reads use a small pool of
//! separate connections on blocking threads, which WAL lets run concurrently with the writer
//! and with each other.

mod schema;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use tokio::sync::{mpsc, oneshot};

use self::writer::{EncodedDerived, EncodedVerdict, Request};
use super::{
    escalation_limit, prefix_end, Appended, CursorKey, Derived, OutboxItem, OutboxPage,
    OutboxState, Page, Report, Store, StoreError, Swap, Unsettled, VerdictFilter,
};
use crate::codec::{EscalationFindingDoc, VerdictDoc};
use crate::model::{
    Amount, Attempt, AttemptClass, Decimal, Escalation, EscalationStatus, Event, FindingKind,
    IntentState, Readback, RecordObservation, ReportedOutcome, Severity, SpanRef, Timestamp,
    Verdict,
};

pub use schema::latest as schema_version;

/// File name inside the data directory.
pub const FILE_NAME: &str = "reckon.sqlite";

/// How long a connection waits for a lock held by another connection (a `reckon report` in
/// another process, a checkpoint) before failing with SQLITE_BUSY.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle read connections kept for reuse; more are opened on demand and closed after use.
const MAX_IDLE_READERS: usize = 8;

pub struct SqliteStore {
    path: PathBuf,
    /// `None` for a read-only open.
    writer: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    reads: Arc<ReadPool>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("read_only", &self.writer.is_none())
            .finish()
    }
}

fn now_nanos() -> i64 {
    crate::clock::wall_now().0
}

impl SqliteStore {
    /// Open (creating if needed) `data_dir/reckon.sqlite` for reading and writing, upgrading its
    /// schema to this binary's version.
    pub fn open(data_dir: &Path) -> Result<SqliteStore, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::Io {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let path = data_dir.join(FILE_NAME);
        let conn = Connection::open(&path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // WAL: readers never block the writer nor each other, and a commit is one sequential
        // append to the WAL instead of a rollback-journal dance.
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(%mode, "SQLite refused WAL mode; writes will be slower");
        }
        // FULL, not NORMAL: in WAL mode NORMAL skips the fsync at commit, so a committed batch
        // survives a process kill but can be lost on power failure. An acknowledged OTLP export
        // is deleted by the exporter, so an acknowledged batch must survive both. The fsync is
        // paid once per group commit, not per span.
        conn.pragma_update(None, "synchronous", "FULL")?;
        // On macOS a plain fsync does not reach the platter; F_FULLFSYNC does. No-op elsewhere.
        conn.pragma_update(None, "fullfsync", true)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // The writer's B-tree work (event identities, verdict indexes) is most of the durable
        // path's cost: a larger cache and fewer, larger checkpoints measured ~10-15% faster in
        // examples/profile_engine.rs.
        conn.pragma_update(None, "cache_size", -131_072)?; // 128 MiB
        conn.pragma_update(None, "wal_autocheckpoint", 8_192)?; // pages: ~32 MiB of WAL
        conn.set_prepared_statement_cache_capacity(32);
        schema::migrate(&conn, now_nanos())?;
        let seq: i64 = conn.query_row(
            "SELECT max(coalesce((SELECT max(seq) FROM reckon_attempts), 0),
                        coalesce((SELECT max(seq) FROM reckon_readbacks), 0),
                        coalesce((SELECT max(seq) FROM reckon_records), 0))",
            [],
            |r| r.get(0),
        )?;
        let (tx, rx) = mpsc::channel(writer::QUEUE_DEPTH);
        let thread = std::thread::Builder::new()
            .name("reckon-store-writer".into())
            .spawn(move || writer::run(conn, rx, seq))
            .map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(SqliteStore {
            reads: Arc::new(ReadPool {
                path: path.clone(),
                read_only: false,
                idle: Mutex::new(Vec::new()),
            }),
            path,
            writer: Some(tx),
            thread: Some(thread),
        })
    }

    /// Open an existing data directory for reading only (`reckon report`), whether its server
    /// is running or stopped. Never writes, so never upgrades: an older file is an error.
    pub fn open_read_only(data_dir: &Path) -> Result<SqliteStore, StoreError> {
        let path = data_dir.join(FILE_NAME);
        std::fs::metadata(&path).map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
        let reads = ReadPool {
            path: path.clone(),
            read_only: true,
            idle: Mutex::new(Vec::new()),
        };
        let conn = reads.open()?;
        schema::check(&conn)?;
        reads.put_back(conn);
        Ok(SqliteStore {
            path,
            writer: None,
            thread: None,
            reads: Arc::new(reads),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn write<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Request,
    ) -> Result<T, StoreError> {
        let tx = self.writer.as_ref().ok_or(StoreError::ReadOnly)?;
        let (reply, answer) = oneshot::channel();
        tx.send(make(reply))
            .await
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Run `f` on a pooled read connection on a blocking thread.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let pool = self.reads.clone();
        tokio::task::spawn_blocking(move || pool.with(f))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }
}

impl Drop for SqliteStore {
    /// Close the queue and wait for the writer to finish what was queued, so a reopen (or the
    /// process exiting) sees every acknowledged write and a checkpointed file.
    fn drop(&mut self) {
        self.writer.take();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("store writer thread panicked");
            }
        }
    }
}

struct ReadPool {
    path: PathBuf,
    read_only: bool,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    fn open(&self) -> Result<Connection, StoreError> {
        let conn = if self.read_only {
            Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?
        } else {
            let c = Connection::open(&self.path)?;
            // Belt and braces: only the writer thread writes.
            c.pragma_update(None, "query_only", true)?;
            c
        };
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Memory-mapped reads avoid a copy per page on the big start-up scan.
        conn.pragma_update(None, "mmap_size", 256i64 << 20)?;
        Ok(conn)
    }

    fn put_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => self.open()?,
        };
        let out = f(&conn);
        // A connection left inside a transaction (a failed read) is not reused.
        if conn.is_autocommit() {
            self.put_back(conn);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Row decoding. Every value read from disk is checked; a bad one names its table and column.

struct Dec<'r, 's> {
    row: &'r rusqlite::Row<'s>,
    table: &'static str,
}

impl<'r, 's> Dec<'r, 's> {
    fn corrupt(&self, column: &'static str, detail: impl Into<String>) -> StoreError {
        StoreError::corrupt(self.table, column, detail)
    }

    fn value(&self, i: usize, col: &'static str) -> Result<ValueRef<'r>, StoreError> {
        self.row
            .get_ref(i)
            .map_err(|e| self.corrupt(col, e.to_string()))
    }

    fn opt_str(&self, i: usize, col: &'static str) -> Result<Option<&'r str>, StoreError> {
        match self.value(i, col)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(b) => std::str::from_utf8(b)
                .map(Some)
                .map_err(|_| self.corrupt(col, "invalid UTF-8")),
            other => Err(self.corrupt(col, format!("expected text, found {}", other.data_type()))),
        }
    }

    fn str(&self, i: usize, col: &'static str) -> Result<&'r str, StoreError> {
        self.opt_str(i, col)?
            .ok_or_else(|| self.corrupt(col, "unexpected NULL"))
    }

    fn opt_string(&self, i: usize, col: &'static str) -> Result<Option<String>, StoreError> {
        Ok(self.opt_str(i, col)?.map(str::to_string))
    }

    fn string(&self, i: usize, col: &'static str) -> Result<String, StoreError> {
        Ok(self.str(i, col)?.to_string())
    }

    fn opt_i64(&self, i: usize, col: &'static str) -> Result<Option<i64>, StoreError> {
        match self.value(i, col)? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(n) => Ok(Some(n)),
            other => Err(self.corrupt(
                col,
                format!("expected integer, found {}", other.data_type()),
            )),
        }
    }

    fn i64(&self, i: usize, col: &'static str) -> Result<i64, StoreError> {
        self.opt_i64(i, col)?
            .ok_or_else(|| self.corrupt(col, "unexpected NULL"))
    }

    fn ts(&self, i: usize, col: &'static str) -> Result<Timestamp, StoreError> {
        self.i64(i, col).map(Timestamp)
    }

    fn opt_ts(&self, i: usize, col: &'static str) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.opt_i64(i, col)?.map(Timestamp))
    }

    fn hex<const N: usize>(&self, i: usize, col: &'static str) -> Result<[u8; N], StoreError> {
        let s = self.str(i, col)?;
        let mut out = [0u8; N];
        hex::decode_to_slice(s, &mut out).map_err(|e| self.corrupt(col, format!("{s:?}: {e}")))?;
        Ok(out)
    }

    fn outcome(&self, i: usize, col: &'static str) -> Result<Option<ReportedOutcome>, StoreError> {
        match self.opt_str(i, col)? {
            None => Ok(None),
            Some(s) => ReportedOutcome::parse(s)
                .map(Some)
                .ok_or_else(|| self.corrupt(col, format!("unknown {s:?}"))),
        }
    }
}

const ATTEMPT_COLS: &str =
    "seq, trace_id, span_id, intent_id, tool, started_at, ended_at, idempotency_key,
    http_status, error_type, span_error, object_id, object_status, reported_outcome, arguments";

fn decode_attempt(row: &rusqlite::Row<'_>) -> Result<(i64, Event), StoreError> {
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

const READBACK_COLS: &str =
    "seq, trace_id, span_id, intent_id, tool, at, ended_at, object_ids, reported_outcome";

fn decode_readback(row: &rusqlite::Row<'_>) -> Result<(i64, Event), StoreError> {
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

const RECORD_COLS: &str =
    "seq, source, kind, object_id, intent_id, idempotency_key, status, amount, amount_unit,
    currency, target, created_at, observed_at";

fn decode_record(row: &rusqlite::Row<'_>) -> Result<(i64, Event), StoreError> {
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

const ESCALATION_COLS: &str =
    "id, intent_id, status, severity, opened_at, findings, claimed_by, claimed_at,
    resolved_by, resolved_at, resolution, note, version, covered";

fn decode_escalation(row: &rusqlite::Row<'_>) -> Result<Escalation, StoreError> {
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
    let version = d.i64(12, "version")?;
    Ok(Escalation {
        id: d.string(0, "id")?,
        intent_id: d.string(1, "intent_id")?,
        status,
        opened_at,
        severity,
        findings,
        covered,
        claimed_by: d.opt_string(6, "claimed_by")?,
        claimed_at: d.opt_ts(7, "claimed_at")?,
        resolved_by: d.opt_string(8, "resolved_by")?,
        resolved_at: d.opt_ts(9, "resolved_at")?,
        resolution: d.opt_string(10, "resolution")?,
        note: d.opt_string(11, "note")?,
        version: u64::try_from(version)
            .map_err(|_| d.corrupt("version", format!("negative {version}")))?,
    })
}

const OUTBOX_COLS: &str = "id, target, escalation_id, escalation_version, event, body,
    created_at, state, attempts, next_at, last_error";

fn decode_outbox(row: &rusqlite::Row<'_>) -> Result<OutboxItem, StoreError> {
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

fn outbox_pending(
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

fn decode_doc(row: &rusqlite::Row<'_>, i: usize) -> Result<VerdictDoc, StoreError> {
    let d = Dec {
        row,
        table: "reckon_verdicts",
    };
    serde_json::from_str(d.str(i, "doc")?).map_err(|e| d.corrupt("doc", e.to_string()))
}

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
fn load_events(conn: &Connection, since: Option<Timestamp>) -> Result<Vec<Event>, StoreError> {
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

fn list_verdicts(
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

fn count(n: i64, table: &'static str, column: &'static str) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::corrupt(table, column, format!("negative count {n}")))
}

fn tool_key(tool: Option<String>) -> String {
    tool.unwrap_or_else(|| Report::NO_TOOL.to_string())
}

fn report(
    conn: &Connection,
    since: Option<Timestamp>,
    now: Timestamp,
) -> Result<Report, StoreError> {
    let mut rep = Report::empty(since, now);
    let from = since.map(|t| t.0).unwrap_or(i64::MIN);
    // One read transaction: all counts come from the same snapshot.
    let tx = conn.unchecked_transaction()?;

    let classes = schema::CLASS_COLUMNS
        .map(|c| format!("sum({c})"))
        .join(", ");
    let mut stmt = conn.prepare(&format!(
        "SELECT tool, state, decision, count(*), sum(attempts), {classes} FROM reckon_verdicts
         WHERE last_event >= ?1 GROUP BY tool, state, decision"
    ))?;
    let mut rows = stmt.query([from])?;
    while let Some(row) = rows.next()? {
        let d = Dec {
            row,
            table: "reckon_verdicts",
        };
        let tool = tool_key(d.opt_string(0, "tool")?);
        let state = d.str(1, "state")?;
        let state = IntentState::parse(state)
            .ok_or_else(|| d.corrupt("state", format!("unknown {state:?}")))?;
        let decision = d.str(2, "decision")?;
        let decision = crate::model::Decision::parse(decision)
            .ok_or_else(|| d.corrupt("decision", format!("unknown {decision:?}")))?;
        let n = count(d.i64(3, "intent_id")?, "reckon_verdicts", "intent_id")?;
        let attempts = count(d.i64(4, "attempts")?, "reckon_verdicts", "attempts")?;
        rep.intents += n;
        rep.attempts += attempts;
        *rep.by_state.entry(state.as_str().into()).or_default() += n;
        *rep.by_decision.entry(decision.as_str().into()).or_default() += n;
        for (i, class) in AttemptClass::ALL.iter().enumerate() {
            let col = schema::CLASS_COLUMNS[i];
            *rep.by_attempt_class
                .entry(class.as_str().into())
                .or_default() += count(d.i64(5 + i, col)?, "reckon_verdicts", col)?;
        }
        let t = rep.by_tool.entry(tool).or_default();
        t.intents += n;
        t.attempts += attempts;
        *t.by_state.entry(state.as_str().into()).or_default() += n;
    }
    drop(rows);
    drop(stmt);

    let mut stmt = conn.prepare(
        "SELECT f.tool, f.kind, f.severity, count(*), count(DISTINCT f.intent_id)
         FROM reckon_findings f JOIN reckon_verdicts v ON v.intent_id = f.intent_id
         WHERE v.last_event >= ?1 GROUP BY f.tool, f.kind, f.severity",
    )?;
    let mut rows = stmt.query([from])?;
    while let Some(row) = rows.next()? {
        let d = Dec {
            row,
            table: "reckon_findings",
        };
        let tool = tool_key(d.opt_string(0, "tool")?);
        let kind = d.str(1, "kind")?;
        let kind = FindingKind::parse(kind)
            .ok_or_else(|| d.corrupt("kind", format!("unknown {kind:?}")))?;
        let severity = d.str(2, "severity")?;
        let severity = Severity::parse(severity)
            .ok_or_else(|| d.corrupt("severity", format!("unknown {severity:?}")))?;
        let n = count(d.i64(3, "kind")?, "reckon_findings", "kind")?;
        let intents = count(d.i64(4, "intent_id")?, "reckon_findings", "intent_id")?;
        rep.findings += n;
        *rep.by_finding.entry(kind.as_str().into()).or_default() += n;
        *rep.by_severity.entry(severity.as_str().into()).or_default() += n;
        let t = rep.by_tool.entry(tool).or_default();
        t.findings += n;
        if kind == FindingKind::DuplicateEffect {
            t.duplicate_effects += intents;
        }
    }
    drop(rows);
    drop(stmt);

    let mut stmt = conn.prepare(
        "SELECT status, count(*) FROM reckon_escalations WHERE opened_at >= ?1 GROUP BY status",
    )?;
    let mut rows = stmt.query([from])?;
    while let Some(row) = rows.next()? {
        let d = Dec {
            row,
            table: "reckon_escalations",
        };
        let status = d.str(0, "status")?;
        let status = EscalationStatus::parse(status)
            .ok_or_else(|| d.corrupt("status", format!("unknown {status:?}")))?;
        *rep.escalations.entry(status.as_str().into()).or_default() +=
            count(d.i64(1, "id")?, "reckon_escalations", "id")?;
    }
    drop(rows);
    drop(stmt);
    tx.finish()?;
    Ok(rep)
}

/// Serialization is the costly part of a verdict write: done by the caller, not the writer thread.
fn encode_verdicts(verdicts: Vec<Verdict>) -> Result<Vec<EncodedVerdict>, StoreError> {
    verdicts
        .into_iter()
        .map(|v| {
            let doc = serde_json::to_string(&VerdictDoc::from_verdict(&v)).map_err(|e| {
                StoreError::WriteFailed(format!("encoding verdict {}: {e}", v.intent_id))
            })?;
            Ok(EncodedVerdict { verdict: v, doc })
        })
        .collect()
}

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

impl Store for SqliteStore {
    async fn append_received(
        &self,
        events: Vec<Event>,
        received_at: Timestamp,
    ) -> Result<Vec<Appended>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let (events, mask) = super::keep_holdable(events);
        if events.is_empty() {
            return Ok(vec![Appended::Refused; mask.len()]);
        }
        let statuses = self
            .write(|reply| Request::Append(events, received_at, reply))
            .await?;
        Ok(super::spread_statuses(&mask, statuses))
    }

    async fn load_events(&self) -> Result<Vec<Event>, StoreError> {
        self.read(|conn| load_events(conn, None)).await
    }

    async fn checkpoint(&self) -> Result<Option<Timestamp>, StoreError> {
        self.read(|conn| {
            let v: Option<i64> = conn
                .query_row(
                    "SELECT value FROM reckon_meta WHERE name = 'checkpoint'",
                    [],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(v.map(Timestamp))
        })
        .await
    }

    async fn unsettled_intents(&self) -> Result<Vec<Unsettled>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare("SELECT intent_id, fingerprint FROM reckon_verdicts WHERE settled = 0")?;
            let ids = stmt
                .query_map([], |r| {
                    Ok(Unsettled {
                        intent_id: r.get(0)?,
                        fingerprint: r.get::<_, i64>(1)? as u64,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ids)
        })
        .await
    }

    async fn events_received_since(&self, since: Timestamp) -> Result<Vec<Event>, StoreError> {
        self.read(move |conn| load_events(conn, Some(since))).await
    }

    async fn route_owners(&self, routes: Vec<String>) -> Result<Vec<String>, StoreError> {
        if routes.is_empty() {
            return Ok(Vec::new());
        }
        self.read(move |conn| {
            let mut stmt =
                conn.prepare_cached("SELECT intent_id FROM reckon_routes WHERE route = ?1")?;
            let mut out = std::collections::BTreeSet::new();
            for r in &routes {
                let mut rows = stmt.query([r])?;
                while let Some(row) = rows.next()? {
                    out.insert(row.get::<_, String>(0)?);
                }
            }
            Ok(out.into_iter().collect())
        })
        .await
    }

    async fn expire_events(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        self.write(|reply| Request::Expire(before, limit.max(1), reply))
            .await
    }

    async fn routes_after(&self, after: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let after = after.to_string();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT DISTINCT route FROM reckon_routes WHERE route > ?1 ORDER BY route LIMIT ?2",
            )?;
            let routes = stmt
                .query_map(rusqlite::params![after, limit as i64], |r| {
                    r.get::<_, String>(0)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(routes)
        })
        .await
    }

    async fn put_verdicts(&self, verdicts: Vec<Verdict>) -> Result<(), StoreError> {
        if verdicts.is_empty() {
            return Ok(());
        }
        let encoded = encode_verdicts(verdicts)?;
        self.write(|reply| Request::PutVerdicts(encoded, reply))
            .await
    }

    async fn put_derived(&self, d: Derived) -> Result<(), StoreError> {
        if d.is_empty() {
            return Ok(());
        }
        let encoded = EncodedDerived {
            escalations: d.escalations,
            removed: d.removed,
            verdicts: encode_verdicts(d.verdicts)?,
            outbox: d.outbox,
            routes: d.routes,
            checkpoint: d.checkpoint,
        };
        self.write(|reply| Request::PutDerived(encoded, reply))
            .await
    }

    async fn verdict_ids(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let prefix = prefix.to_string();
        self.read(move |conn| {
            // A key range where the prefix allows one, so only matching ids are read.
            let (sql, args) = match prefix_end(&prefix) {
                Some(end) => (
                    "SELECT intent_id FROM reckon_verdicts WHERE intent_id >= ?1 AND intent_id < ?2 ORDER BY intent_id",
                    vec![prefix.clone(), end],
                ),
                None => (
                    "SELECT intent_id FROM reckon_verdicts WHERE substr(intent_id, 1, length(?1)) = ?1 ORDER BY intent_id",
                    vec![prefix.clone()],
                ),
            };
            let mut stmt = conn.prepare_cached(sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let d = Dec {
                    row,
                    table: "reckon_verdicts",
                };
                out.push(d.string(0, "intent_id")?);
            }
            // `substr` counts characters, the range bytes: both agree for what they return.
            out.retain(|id| id.starts_with(&prefix));
            Ok(out)
        })
        .await
    }

    async fn delete_verdicts(&self, intent_ids: Vec<String>) -> Result<(), StoreError> {
        if intent_ids.is_empty() {
            return Ok(());
        }
        self.write(|reply| Request::DeleteVerdicts(intent_ids, reply))
            .await
    }

    async fn get_verdict(&self, intent_id: &str) -> Result<Option<VerdictDoc>, StoreError> {
        let id = intent_id.to_string();
        self.read(move |conn| {
            let mut stmt =
                conn.prepare_cached("SELECT doc FROM reckon_verdicts WHERE intent_id = ?1")?;
            let mut rows = stmt.query([&id])?;
            match rows.next()? {
                Some(row) => decode_doc(row, 0).map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    async fn list_verdicts(&self, filter: &VerdictFilter) -> Result<Page<VerdictDoc>, StoreError> {
        let filter = filter.clone();
        self.read(move |conn| list_verdicts(conn, &filter)).await
    }

    async fn put_escalations(&self, escalations: Vec<Escalation>) -> Result<(), StoreError> {
        if escalations.is_empty() {
            return Ok(());
        }
        self.write(|reply| Request::PutEscalations(escalations, reply))
            .await
    }

    async fn swap_escalation(
        &self,
        current: Escalation,
        new: Escalation,
    ) -> Result<Swap, StoreError> {
        self.swap_escalation_notify(current, new, Vec::new()).await
    }

    async fn swap_escalation_notify(
        &self,
        current: Escalation,
        new: Escalation,
        outbox: Vec<OutboxItem>,
    ) -> Result<Swap, StoreError> {
        self.write(|reply| Request::SwapEscalation(Box::new((current, new, outbox)), reply))
            .await
    }

    async fn outbox_put(&self, items: Vec<OutboxItem>) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        self.write(|reply| Request::PutOutbox(items, reply)).await
    }

    async fn outbox_pending(
        &self,
        target: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<OutboxPage, StoreError> {
        let target = target.to_string();
        let limit = escalation_limit(limit);
        self.read(move |conn| outbox_pending(conn, &target, since, limit))
            .await
    }

    async fn load_escalations(&self) -> Result<Vec<Escalation>, StoreError> {
        self.read(|conn| {
            query_escalations(
                conn,
                &format!("SELECT {ESCALATION_COLS} FROM reckon_escalations ORDER BY opened_at, id"),
                [],
            )
        })
        .await
    }

    async fn get_escalation(&self, id: &str) -> Result<Option<Escalation>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| {
            let sql = format!("SELECT {ESCALATION_COLS} FROM reckon_escalations WHERE id = ?1");
            Ok(query_escalations(conn, &sql, [&id])?.into_iter().next())
        })
        .await
    }

    async fn list_escalations(
        &self,
        status: Option<EscalationStatus>,
        limit: usize,
    ) -> Result<Vec<Escalation>, StoreError> {
        let limit = escalation_limit(limit) as i64;
        self.read(move |conn| match status {
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
        })
        .await
    }

    async fn report(&self, since: Option<Timestamp>, now: Timestamp) -> Result<Report, StoreError> {
        self.read(move |conn| report(conn, since, now)).await
    }

    async fn known_observations(
        &self,
        keys: Vec<super::RecordKey>,
    ) -> Result<std::collections::HashSet<super::RecordKey>, StoreError> {
        if keys.is_empty() {
            return Ok(Default::default());
        }
        self.read(move |conn| {
            // A prefix of the records' UNIQUE (source, object_id, status, observed_at) index.
            let mut stmt = conn.prepare_cached(
                "SELECT 1 FROM reckon_records WHERE source = ?1 AND object_id = ?2 AND status = ?3 LIMIT 1",
            )?;
            let mut known = std::collections::HashSet::new();
            for k in keys {
                if stmt.exists([&k.source, &k.object_id, &k.status])? {
                    known.insert(k);
                }
            }
            Ok(known)
        })
        .await
    }

    async fn events_touching(&self, q: super::EventQuery) -> Result<Vec<Event>, StoreError> {
        if q.is_empty() {
            return Ok(Vec::new());
        }
        self.read(move |conn| events_touching(conn, &q)).await
    }
}

/// [`Store::events_touching`]: indexed lookups (v4's indexes), one statement per chunk of ids.
fn events_touching(conn: &Connection, q: &super::EventQuery) -> Result<Vec<Event>, StoreError> {
    const CHUNK: usize = 500;
    let tx = conn.unchecked_transaction()?;
    let mut out: Vec<(i64, Event)> = Vec::new();
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
    // A record found by two of its columns is one event; ingest order, for a faithful replay.
    out.sort_by_key(|(seq, e)| (*seq, matches!(e, Event::Record(_))));
    out.dedup_by(|a, b| a.0 == b.0 && std::mem::discriminant(&a.1) == std::mem::discriminant(&b.1));
    Ok(out.into_iter().map(|(_, e)| e).collect())
}
