//! The group-commit writer: one thread owns the only write connection.
//!
//! Callers queue requests and await a oneshot. The thread takes the first queued request, drains
//! whatever else is queued (up to [`MAX_BATCH_ROWS`]), runs them all in ONE transaction, commits
//! once (one WAL fsync under `synchronous=FULL`) and only then answers every caller. Under load
//! the fsync cost is shared by everything that queued while the previous commit was syncing, so
//! throughput grows with concurrency instead of being capped at one fsync per export.
//!
//! Each request runs inside its own SAVEPOINT: a request that fails (say, a row SQLite refuses)
//! is rolled back and answered with its error without sinking the others in the batch.

use std::sync::{Arc, LazyLock};

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::{mpsc, oneshot};

use super::schema::CLASS_COLUMNS;
use crate::logging::{Throttle, REPEATED_FAILURE_EVERY};
use crate::model::{AttemptClass, Escalation, Event, Timestamp, Verdict, REDACTED_ARGUMENTS_JSON};
use crate::store::{Appended, OutboxItem, Route, StoreError, Swap};

/// Upper bound on rows written per transaction, so one commit (and the latency of everyone
/// waiting on it) stays bounded when a backlog has built up.
pub const MAX_BATCH_ROWS: usize = 50_000;

/// Queue depth in requests. A full queue makes `append` wait, which is the backpressure the
/// OTLP receiver turns into retryable refusals.
pub const QUEUE_DEPTH: usize = 4096;

pub type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// A verdict with its JSON document already encoded by the caller: serialization is the costly
/// part and runs on the caller's core, not on the single writer thread.
pub struct EncodedVerdict {
    /// Shared with the engine's outcome: the writer only reads it.
    pub verdict: Arc<Verdict>,
    pub doc: String,
}

pub enum Request {
    /// Events and when reckon received them.
    Append(Vec<Event>, Timestamp, Reply<Vec<Appended>>),
    PutVerdicts(Vec<EncodedVerdict>, Reply<()>),
    DeleteVerdicts(Vec<String>, Reply<()>),
    PutEscalations(Vec<Escalation>, Reply<()>),
    /// Escalations, removals and verdicts in one savepoint: all or nothing.
    PutDerived(EncodedDerived, Reply<()>),
    /// Compare-and-set of one escalation: (what must be stored, what to store, the
    /// notifications written with it when it is written).
    SwapEscalation(Box<(Escalation, Escalation, Vec<OutboxItem>)>, Reply<Swap>),
    /// Notifications, upserted by rank.
    PutOutbox(Vec<OutboxItem>, Reply<()>),
    /// Retention: raw events of settled intents older than the instant, at most so many intents.
    Expire(Timestamp, usize, Reply<usize>),
    /// Retention of the outbox: notifications enqueued before the instant.
    ExpireOutbox(Timestamp, Reply<usize>),
}

/// [`crate::store::Derived`] with its verdict documents encoded.
pub struct EncodedDerived {
    pub escalations: Vec<Escalation>,
    pub removed: Vec<String>,
    pub verdicts: Vec<EncodedVerdict>,
    pub outbox: Vec<OutboxItem>,
    pub routes: Vec<Route>,
    pub checkpoint: Option<Timestamp>,
    pub open_routes_complete: bool,
}

impl Request {
    fn rows(&self) -> usize {
        match self {
            Request::Append(v, _, _) => v.len(),
            Request::PutVerdicts(v, _) => v.len(),
            Request::DeleteVerdicts(v, _) => v.len(),
            Request::PutEscalations(v, _) => v.len(),
            Request::PutDerived(d, _) => {
                d.escalations.len()
                    + d.removed.len()
                    + d.verdicts.len()
                    + d.outbox.len()
                    + d.routes.len()
            }
            Request::SwapEscalation(s, _) => 1 + s.2.len(),
            Request::PutOutbox(v, _) => v.len(),
            Request::Expire(_, limit, _) => *limit,
            Request::ExpireOutbox(..) => 1,
        }
    }
}

/// A request's result, held until the batch has committed.
enum Done {
    Append(Result<Vec<Appended>, StoreError>, Reply<Vec<Appended>>),
    Unit(Result<(), StoreError>, Reply<()>),
    Swap(Result<Swap, StoreError>, Reply<Swap>),
    Count(Result<usize, StoreError>, Reply<usize>),
}

impl Done {
    fn fail_if_ok(&mut self, msg: &str) {
        match self {
            Done::Append(r, _) if r.is_ok() => *r = Err(StoreError::WriteFailed(msg.to_string())),
            Done::Unit(r, _) if r.is_ok() => *r = Err(StoreError::WriteFailed(msg.to_string())),
            Done::Swap(r, _) if r.is_ok() => *r = Err(StoreError::WriteFailed(msg.to_string())),
            Done::Count(r, _) if r.is_ok() => *r = Err(StoreError::WriteFailed(msg.to_string())),
            _ => {}
        }
    }

    fn send(self) {
        // A caller that gave up (dropped its future) no longer wants the answer; that is fine.
        match self {
            Done::Append(r, tx) => drop(tx.send(r)),
            Done::Unit(r, tx) => drop(tx.send(r)),
            Done::Swap(r, tx) => drop(tx.send(r)),
            Done::Count(r, tx) => drop(tx.send(r)),
        }
    }
}

/// Runs until every sender is gone, then checkpoints the WAL so a stopped server leaves a
/// single self-contained file.
pub fn run(conn: Connection, mut rx: mpsc::Receiver<Request>, mut seq: i64) {
    let mut batch: Vec<Request> = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        let mut rows = first.rows();
        batch.push(first);
        while rows < MAX_BATCH_ROWS {
            match rx.try_recv() {
                Ok(r) => {
                    rows += r.rows();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        commit_batch(&conn, &mut batch, &mut seq);
    }
    if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
        tracing::warn!(error = %e, "WAL checkpoint at close failed");
    }
}

fn commit_batch(conn: &Connection, batch: &mut Vec<Request>, seq: &mut i64) {
    let seq_before = *seq;
    let mut done = Vec::with_capacity(batch.len());
    let began = conn.execute_batch("BEGIN IMMEDIATE");
    if let Err(e) = began {
        let msg = e.to_string();
        for r in batch.drain(..) {
            let mut d = unanswered(r);
            d.fail_if_ok(&msg);
            d.send();
        }
        return;
    }
    for r in batch.drain(..) {
        let seq_at_request = *seq;
        if let Err(e) = conn.execute_batch("SAVEPOINT request") {
            let mut d = unanswered(r);
            d.fail_if_ok(&e.to_string());
            done.push(d);
            continue;
        }
        let d = match r {
            Request::Append(events, received_at, tx) => {
                Done::Append(append(conn, &events, received_at, seq), tx)
            }
            Request::PutVerdicts(v, tx) => Done::Unit(put_verdicts(conn, &v), tx),
            Request::DeleteVerdicts(ids, tx) => Done::Unit(delete_verdicts(conn, &ids), tx),
            Request::PutEscalations(e, tx) => Done::Unit(put_escalations(conn, &e), tx),
            Request::PutDerived(d, tx) => Done::Unit(put_derived(conn, &d), tx),
            Request::SwapEscalation(swap, tx) => {
                Done::Swap(swap_escalation(conn, &swap.0, &swap.1, &swap.2), tx)
            }
            Request::PutOutbox(items, tx) => Done::Unit(put_outbox(conn, &items), tx),
            Request::Expire(before, limit, tx) => Done::Count(expire(conn, before, limit), tx),
            Request::ExpireOutbox(before, tx) => Done::Count(
                conn.execute(
                    "DELETE FROM reckon_outbox WHERE created_at < ?1",
                    [before.0],
                )
                .map_err(StoreError::from),
                tx,
            ),
        };
        let ok = match &d {
            Done::Append(r, _) => r.is_ok(),
            Done::Unit(r, _) => r.is_ok(),
            // A conflict wrote nothing; only an error rolls the savepoint back.
            Done::Swap(r, _) => r.is_ok(),
            Done::Count(r, _) => r.is_ok(),
        };
        let end = if ok {
            "RELEASE request"
        } else {
            "ROLLBACK TO request; RELEASE request"
        };
        if !ok {
            *seq = seq_at_request;
        }
        if let Err(e) = conn.execute_batch(end) {
            static LOG: Throttle = Throttle::new(REPEATED_FAILURE_EVERY);
            if let Some(held_back) = LOG.admit(&crate::store::sqlite_kind(&e)) {
                tracing::error!(error = %e, held_back, "savepoint end failed");
            }
        }
        done.push(d);
    }
    if let Err(e) = conn.execute_batch("COMMIT") {
        let msg = e.to_string();
        static LOG: Throttle = Throttle::new(REPEATED_FAILURE_EVERY);
        if let Some(held_back) = LOG.admit(&crate::store::sqlite_kind(&e)) {
            tracing::error!(error = %msg, held_back, "group commit failed");
        }
        // Leave no half-open transaction for the next batch; errors here mean it is already gone.
        let _ = conn.execute_batch("ROLLBACK");
        *seq = seq_before;
        for d in &mut done {
            d.fail_if_ok(&msg);
        }
    }
    for d in done {
        d.send();
    }
}

/// A request that never ran, paired with an `Ok` placeholder for [`Done::fail_if_ok`] to replace.
fn unanswered(r: Request) -> Done {
    match r {
        Request::Append(_, _, tx) => Done::Append(Ok(Vec::new()), tx),
        Request::PutVerdicts(_, tx)
        | Request::DeleteVerdicts(_, tx)
        | Request::PutEscalations(_, tx)
        | Request::PutDerived(_, tx)
        | Request::PutOutbox(_, tx) => Done::Unit(Ok(()), tx),
        Request::Expire(_, _, tx) | Request::ExpireOutbox(_, tx) => Done::Count(Ok(0), tx),
        Request::SwapEscalation(_, tx) => Done::Swap(Ok(Swap::Written), tx),
    }
}

pub const INSERT_ATTEMPT: &str = "INSERT INTO reckon_attempts (seq, trace_id, span_id, intent_id, tool, started_at,
    ended_at, idempotency_key, http_status, error_type, span_error, object_id, object_status, reported_outcome,
    arguments, received_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
    ON CONFLICT DO NOTHING";
pub const INSERT_READBACK: &str = "INSERT INTO reckon_readbacks (seq, trace_id, span_id, intent_id, tool, at,
    ended_at, object_ids, reported_outcome, received_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
    ON CONFLICT DO NOTHING";
pub const INSERT_RECORD: &str =
    "INSERT INTO reckon_records (seq, source, kind, object_id, intent_id,
    idempotency_key, status, amount, amount_unit, currency, target, created_at, observed_at, received_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT DO NOTHING";

/// Hex into a stack buffer: no allocation per span id.
fn hex_into<'a>(bytes: &[u8], buf: &'a mut [u8]) -> &'a str {
    let out = &mut buf[..bytes.len() * 2];
    // Both cannot fail: the buffer is exactly twice the input and hex digits are ASCII.
    if hex::encode_to_slice(bytes, out).is_err() {
        return "";
    }
    std::str::from_utf8(out).unwrap_or("")
}

/// Stored copies by identity, for telling a re-send (same content) from a conflicting one.
const STORED_RECORD: &str =
    "WHERE source = ?1 AND object_id = ?2 AND status = ?3 AND observed_at = ?4";

/// The stored copy of `e`'s identity: it exists, since the insert found the identity taken.
type Decode = fn(&rusqlite::Row<'_>) -> Result<(i64, Event), StoreError>;

fn stored_copy(conn: &Connection, e: &Event) -> Result<Event, StoreError> {
    let (mut tbuf, mut sbuf) = ([0u8; 32], [0u8; 16]);
    // Attempts and read-backs are both identified by their span.
    let mut by_span = |table: &str, cols: &str, span: &crate::model::SpanRef, decode: Decode| {
        let sql = format!("SELECT {cols} FROM {table} WHERE trace_id = ?1 AND span_id = ?2");
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(params![
            hex_into(&span.trace_id, &mut tbuf),
            hex_into(&span.span_id, &mut sbuf)
        ])?;
        rows.next()?.map(decode).transpose()
    };
    let found = match e {
        Event::Attempt(a) => by_span(
            "reckon_attempts",
            super::ATTEMPT_COLS,
            &a.span,
            super::decode_attempt,
        )?,
        Event::Readback(r) => by_span(
            "reckon_readbacks",
            super::READBACK_COLS,
            &r.span,
            super::decode_readback,
        )?,
        Event::Record(r) => {
            let sql = format!(
                "SELECT {} FROM reckon_records {STORED_RECORD}",
                super::RECORD_COLS
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(params![r.source, r.object_id, r.status, r.observed_at.0])?;
            rows.next()?.map(super::decode_record).transpose()?
        }
    };
    found.map(|(_, e)| e).ok_or_else(|| {
        StoreError::WriteFailed("an identity the insert found taken is not stored".into())
    })
}

fn append(
    conn: &Connection,
    events: &[Event],
    received_at: Timestamp,
    seq: &mut i64,
) -> Result<Vec<Appended>, StoreError> {
    // Cached: prepared once per connection, then only re-bound per event.
    let mut attempt = conn.prepare_cached(INSERT_ATTEMPT)?;
    let mut readback = conn.prepare_cached(INSERT_READBACK)?;
    let mut record = conn.prepare_cached(INSERT_RECORD)?;
    let mut out = Vec::with_capacity(events.len());
    let (mut tbuf, mut sbuf) = ([0u8; 32], [0u8; 16]);
    for e in events {
        let next = *seq + 1;
        let changed = match e {
            Event::Attempt(a) => attempt.execute(params![
                next,
                hex_into(&a.span.trace_id, &mut tbuf),
                hex_into(&a.span.span_id, &mut sbuf),
                a.intent_id,
                a.tool,
                a.start.0,
                a.end.0,
                a.idempotency_key,
                a.http_status.map(i64::from),
                a.error_type,
                a.span_error,
                a.object_id,
                a.object_status,
                a.reported_outcome.map(|o| o.as_str()),
                a.arguments,
                received_at.0,
            ])?,
            Event::Readback(r) => {
                let ids = serde_json::to_string(&r.object_ids)
                    .map_err(|e| StoreError::WriteFailed(e.to_string()))?;
                readback.execute(params![
                    next,
                    hex_into(&r.span.trace_id, &mut tbuf),
                    hex_into(&r.span.span_id, &mut sbuf),
                    r.intent_id,
                    r.tool,
                    r.at.0,
                    r.end.0,
                    ids,
                    r.reported_outcome.map(|o| o.as_str()),
                    received_at.0,
                ])?
            }
            Event::Record(r) => {
                let (amount, unit) = match r.amount {
                    Some(crate::model::Amount::Major(d)) => (Some(d.to_string()), Some("major")),
                    Some(crate::model::Amount::Minor(m)) => (Some(m.to_string()), Some("minor")),
                    None => (None, None),
                };
                record.execute(params![
                    next,
                    r.source,
                    r.kind,
                    r.object_id,
                    r.intent_id,
                    r.idempotency_key,
                    r.status,
                    amount,
                    unit,
                    r.currency,
                    r.target,
                    r.created_at.map(|t| t.0),
                    r.observed_at.0,
                    received_at.0,
                ])?
            }
        };
        let status = if changed == 1 {
            *seq = next;
            Appended::New
        } else if stored_copy(conn, e)? == *e {
            // Compared as events, so by value: a record amount re-sent as 45.0 instead of
            // 45.00 is the same observation.
            Appended::Duplicate
        } else {
            Appended::Conflict
        };
        out.push(status);
    }
    Ok(out)
}

fn upsert_verdict_sql() -> String {
    let classes = CLASS_COLUMNS.join(", ");
    let placeholders = (14..14 + CLASS_COLUMNS.len())
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let updates = CLASS_COLUMNS
        .iter()
        .map(|c| format!("{c} = excluded.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    // The contract version (v6), the fingerprint (v8) and the listing time (v11) come last,
    // after the class counts. The listing time is never updated: the first write's stays
    // (`Verdict::listed_at`).
    let version = 14 + CLASS_COLUMNS.len();
    let fingerprint = version + 1;
    let listed_at = version + 2;
    format!(
        "INSERT INTO reckon_verdicts (intent_id, tool, contract, state, decision, first_seen, last_event, audited_at,
            escalation_id, finding_kinds, doc, attempts, settled, {classes}, contract_version, fingerprint, listed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, {placeholders}, ?{version}, ?{fingerprint}, ?{listed_at})
         ON CONFLICT (intent_id) DO UPDATE SET tool = excluded.tool, contract = excluded.contract,
            contract_version = excluded.contract_version, state = excluded.state, decision = excluded.decision, first_seen = excluded.first_seen,
            last_event = excluded.last_event, audited_at = excluded.audited_at,
            escalation_id = excluded.escalation_id, finding_kinds = excluded.finding_kinds, doc = excluded.doc,
            attempts = excluded.attempts, settled = excluded.settled, fingerprint = excluded.fingerprint, {updates}"
    )
}

const DELETE_FINDINGS: &str = "DELETE FROM reckon_findings WHERE intent_id = ?1";
const DELETE_LOOKUPS: &str = "DELETE FROM reckon_intent_lookup WHERE intent_id = ?1";
const INSERT_LOOKUP: &str =
    "INSERT OR IGNORE INTO reckon_intent_lookup (kind, value, intent_id) VALUES (?1, ?2, ?3)";
const INSERT_FINDING: &str =
    "INSERT INTO reckon_findings (intent_id, kind, severity, at, subject, detail, tool)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

// Built once; `prepare_cached` keys on the SQL text.
static UPSERT_VERDICT: LazyLock<String> = LazyLock::new(upsert_verdict_sql);

fn put_verdicts(conn: &Connection, verdicts: &[EncodedVerdict]) -> Result<(), StoreError> {
    let mut upsert = conn.prepare_cached(&UPSERT_VERDICT)?;
    let mut delete = conn.prepare_cached(DELETE_FINDINGS)?;
    let mut insert = conn.prepare_cached(INSERT_FINDING)?;
    let mut forget = conn.prepare_cached(DELETE_LOOKUPS)?;
    let mut lookup = conn.prepare_cached(INSERT_LOOKUP)?;
    for EncodedVerdict { verdict: v, doc } in verdicts {
        let mut counts = [0i64; 6];
        for a in &v.attempts {
            if let Some(i) = AttemptClass::ALL.iter().position(|c| *c == a.class) {
                counts[i] += 1;
            }
        }
        // ",kind,kind," so `LIKE '%,kind,%'` works for ad-hoc SQL without the findings table.
        let mut kinds: Vec<&str> = v.findings.iter().map(|f| f.kind.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        let finding_kinds = if kinds.is_empty() {
            String::new()
        } else {
            format!(",{},", kinds.join(","))
        };
        upsert.execute(params![
            v.intent_id,
            v.tool,
            v.contract,
            v.state.as_str(),
            v.decision.as_str(),
            v.first_seen.0,
            v.last_event.0,
            v.audited_at.0,
            v.escalation_id,
            finding_kinds,
            doc,
            v.attempts.len() as i64,
            v.rest() as u8,
            counts[0],
            counts[1],
            counts[2],
            counts[3],
            counts[4],
            counts[5],
            v.contract_version,
            // Stored as its bits: SQLite integers are signed.
            v.fingerprint() as i64,
            v.listed_at.0,
        ])?;
        delete.execute([&v.intent_id])?;
        for f in &v.findings {
            insert.execute(params![
                v.intent_id,
                f.kind.as_str(),
                f.severity.as_str(),
                f.at.0,
                f.subject,
                f.detail,
                v.tool
            ])?;
        }
        // What the intent is found by: what this verdict says, not what an earlier one did.
        forget.execute([&v.intent_id])?;
        for (kind, value) in crate::store::lookups_of(v) {
            lookup.execute(params![kind.as_str(), value, v.intent_id])?;
        }
    }
    Ok(())
}

/// Escalations before the verdicts that name them; the request's savepoint makes it atomic.
fn put_derived(conn: &Connection, d: &EncodedDerived) -> Result<(), StoreError> {
    put_outbox(conn, &d.outbox)?;
    put_escalations(conn, &d.escalations)?;
    delete_verdicts(conn, &d.removed)?;
    put_verdicts(conn, &d.verdicts)?;
    let mut route = conn.prepare_cached(
        "INSERT INTO reckon_routes (route, intent_id) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
    )?;
    for r in &d.routes {
        route.execute(params![r.route, r.intent_id])?;
    }
    if let Some(at) = d.checkpoint {
        conn.prepare_cached(
            "INSERT INTO reckon_meta (name, value) VALUES ('checkpoint', ?1)
             ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)",
        )?
        .execute([at.0])?;
    }
    if d.open_routes_complete {
        conn.prepare_cached(
            "INSERT INTO reckon_meta (name, value) VALUES ('open_routes', 1)
             ON CONFLICT (name) DO UPDATE SET value = 1",
        )?
        .execute([])?;
    }
    Ok(())
}

/// A pseudo-intent that stopped existing (an orphan record now claimed): its verdict, its
/// findings, and the routes that reached it, so no later event brings back what is gone and
/// retention does not count it as another owner of the record's object.
fn delete_verdicts(conn: &Connection, ids: &[String]) -> Result<(), StoreError> {
    let mut verdict = conn.prepare_cached("DELETE FROM reckon_verdicts WHERE intent_id = ?1")?;
    let mut findings = conn.prepare_cached(DELETE_FINDINGS)?;
    let mut routes = conn.prepare_cached("DELETE FROM reckon_routes WHERE intent_id = ?1")?;
    let mut lookups = conn.prepare_cached(DELETE_LOOKUPS)?;
    for id in ids {
        verdict.execute([id])?;
        findings.execute([id])?;
        routes.execute([id])?;
        lookups.execute([id])?;
    }
    Ok(())
}

/// `>=` so that, as with ClickHouse's ReplacingMergeTree(version), an equal version is replaced
/// by the later write while an older one never overwrites a newer one.
const UPSERT_ESCALATION: &str = "INSERT INTO reckon_escalations (id, intent_id, status, severity, opened_at,
    findings, claimed_by, claimed_at, resolved_by, resolved_at, resolution, note, version, covered,
    overrides, listed_at, tool)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
    ON CONFLICT (id) DO UPDATE SET intent_id = excluded.intent_id, tool = excluded.tool,
        status = excluded.status,
        severity = excluded.severity, opened_at = excluded.opened_at, findings = excluded.findings,
        claimed_by = excluded.claimed_by, claimed_at = excluded.claimed_at, resolved_by = excluded.resolved_by,
        resolved_at = excluded.resolved_at, resolution = excluded.resolution, note = excluded.note,
        version = excluded.version, covered = excluded.covered, overrides = excluded.overrides
    WHERE excluded.version >= reckon_escalations.version";

/// The stored form of an escalation's findings.
fn findings_json(e: &Escalation) -> Result<String, StoreError> {
    let findings: Vec<crate::codec::EscalationFindingDoc> = e
        .findings
        .iter()
        .map(crate::codec::EscalationFindingDoc::from_finding)
        .collect();
    serde_json::to_string(&findings).map_err(|e| StoreError::WriteFailed(e.to_string()))
}

/// The stored form of the evidence a resolution covered.
fn covered_json(e: &Escalation) -> Result<String, StoreError> {
    serde_json::to_string(&e.covered).map_err(|e| StoreError::WriteFailed(e.to_string()))
}

/// The stored form of an escalation's overrides: NULL for none (as rows from before v10).
fn overrides_json(e: &Escalation) -> Result<Option<String>, StoreError> {
    if e.overrides.is_empty() {
        return Ok(None);
    }
    let docs: Vec<crate::codec::OverrideDoc> = e
        .overrides
        .iter()
        .map(crate::codec::OverrideDoc::from_override)
        .collect();
    serde_json::to_string(&docs)
        .map(Some)
        .map_err(|e| StoreError::WriteFailed(e.to_string()))
}

/// Versions beyond i64 are not a real case; saturating keeps "highest wins" intact.
fn version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn put_escalations(conn: &Connection, escalations: &[Escalation]) -> Result<(), StoreError> {
    let mut upsert = conn.prepare_cached(UPSERT_ESCALATION)?;
    for e in escalations {
        upsert.execute(params![
            e.id,
            e.intent_id,
            e.status.as_str(),
            e.severity.as_str(),
            e.opened_at.0,
            findings_json(e)?,
            e.claimed_by,
            e.claimed_at.map(|t| t.0),
            e.resolved_by,
            e.resolved_at.map(|t| t.0),
            e.resolution,
            e.note,
            version(e.version),
            covered_json(e)?,
            overrides_json(e)?,
            e.listed_at.0,
            e.tool,
        ])?;
    }
    Ok(())
}

/// Only a row still as the caller saw it is changed (its version, status, people and how many
/// findings it holds: an engine write of an equal version may have replaced a person's action,
/// and a finding joins by appending). The writer thread runs one statement at a time, and
/// another process's writer holds the file's write lock for its whole transaction, so the
/// comparison and the write are one atomic step.
const SWAP_ESCALATION: &str = "UPDATE reckon_escalations SET intent_id = ?2, status = ?3,
    severity = ?4, opened_at = ?5, findings = ?6, claimed_by = ?7, claimed_at = ?8,
    resolved_by = ?9, resolved_at = ?10, resolution = ?11, note = ?12, version = ?13,
    covered = ?19, overrides = ?20
    WHERE id = ?1 AND version = ?14 AND status = ?15 AND claimed_by IS ?16
        AND resolved_by IS ?17 AND json_array_length(findings) = ?18";

fn swap_escalation(
    conn: &Connection,
    current: &Escalation,
    e: &Escalation,
    outbox: &[OutboxItem],
) -> Result<Swap, StoreError> {
    let mut update = conn.prepare_cached(SWAP_ESCALATION)?;
    let changed = update.execute(params![
        e.id,
        e.intent_id,
        e.status.as_str(),
        e.severity.as_str(),
        e.opened_at.0,
        findings_json(e)?,
        e.claimed_by,
        e.claimed_at.map(|t| t.0),
        e.resolved_by,
        e.resolved_at.map(|t| t.0),
        e.resolution,
        e.note,
        version(e.version),
        version(current.version),
        current.status.as_str(),
        current.claimed_by,
        current.resolved_by,
        current.findings.len() as i64,
        covered_json(e)?,
        overrides_json(e)?,
    ])?;
    if changed == 1 {
        // In the request's savepoint: the notifications exactly when the change is written.
        put_outbox(conn, outbox)?;
        return Ok(Swap::Written);
    }
    let sql = format!(
        "SELECT {} FROM reckon_escalations WHERE id = ?1",
        super::ESCALATION_COLS
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query([&e.id])?;
    let current = rows.next()?.map(super::decode_escalation).transpose()?;
    Ok(Swap::Conflict(current.map(Box::new)))
}

/// An upsert that keeps the row of higher rank (equal: the later write), as ClickHouse's
/// `ReplacingMergeTree(version)` does with the same number.
const UPSERT_OUTBOX: &str = "INSERT INTO reckon_outbox (id, target, escalation_id,
    escalation_version, event, body, created_at, state, attempts, next_at, last_error, rank)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
    ON CONFLICT (id) DO UPDATE SET target = excluded.target, escalation_id = excluded.escalation_id,
        escalation_version = excluded.escalation_version, event = excluded.event, body = excluded.body,
        created_at = excluded.created_at, state = excluded.state, attempts = excluded.attempts,
        next_at = excluded.next_at, last_error = excluded.last_error, rank = excluded.rank
    WHERE excluded.rank >= reckon_outbox.rank";

/// [`OutboxItem::rank`] in an INTEGER column: the two terminal ranks stay the two highest.
pub fn rank(item: &OutboxItem) -> i64 {
    match item.rank() {
        r if r >= u64::MAX - 1 => i64::MAX - (u64::MAX - r) as i64,
        r => i64::try_from(r).unwrap_or(i64::MAX - 2).min(i64::MAX - 2),
    }
}

fn put_outbox(conn: &Connection, items: &[OutboxItem]) -> Result<(), StoreError> {
    if items.is_empty() {
        return Ok(());
    }
    let mut upsert = conn.prepare_cached(UPSERT_OUTBOX)?;
    for it in items {
        upsert.execute(params![
            it.id,
            it.target,
            it.escalation_id,
            version(it.escalation_version),
            it.event,
            it.body,
            it.created_at.0,
            it.state.as_str(),
            i64::from(it.attempts),
            it.next_at.0,
            it.last_error,
            rank(it),
        ])?;
    }
    Ok(())
}

/// [`crate::store::Store::expire_events`]: one page of settled intents, oldest latest event
/// first from the `expired_through` mark, and their raw events. Intent-less records go with the
/// intent when it is the only one their object's route reaches.
fn expire(conn: &Connection, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
    let from: i64 = conn
        .query_row(
            "SELECT value FROM reckon_meta WHERE name = 'expired_through'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(i64::MIN);
    let page: Vec<(String, i64)> = conn
        .prepare_cached(
            "SELECT intent_id, last_event FROM reckon_verdicts
             WHERE settled = 1 AND last_event >= ?1 AND last_event < ?2
             ORDER BY last_event, intent_id LIMIT ?3",
        )?
        .query_map(params![from, before.0, limit as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    // What a later event is judged against stays (DESIGN.md "Memory and history": verdicts are
    // kept, and a verdict is only as true as the evidence it can be judged again with); the
    // tool-call arguments sent before the cut go, as the redaction marker: they existed, and
    // reckon no longer knows them.
    let mut strip = conn.prepare_cached(
        "UPDATE reckon_attempts SET arguments = ?3
         WHERE intent_id = ?1 AND started_at < ?2 AND arguments IS NOT NULL AND arguments <> ?3",
    )?;
    for (id, _) in &page {
        strip.execute(params![id, before.0, REDACTED_ARGUMENTS_JSON])?;
    }
    if let (Some(first), Some(last)) = (page.first(), page.last()) {
        let mark = crate::store::expiry_mark(page.len() == limit, first.1, last.1);
        conn.prepare_cached(
            "INSERT INTO reckon_meta (name, value) VALUES ('expired_through', ?1)
             ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)",
        )?
        .execute([mark])?;
    }
    Ok(page.len())
}
