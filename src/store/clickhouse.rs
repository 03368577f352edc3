//! The ClickHouse store (`--store clickhouse://user:pass@host:8123/db`), through the official
//! `clickhouse` crate over HTTP.
//!
//! Works against every server from 18.16 (Debian's package) to the current LTS, which shapes it:
//! - the client's schema validation is off: it needs `describe_include_subcolumns` (and
//!   `RowBinaryWithNamesAndTypes` responses) that 18.16 lacks, so rows travel as plain
//!   `RowBinary` with the column list taken from the Rust structs in [`rows`];
//! - `optimize_move_to_prewhere = 0` on every query: servers before ~20.x move WHERE conditions
//!   into PREWHERE even under `FINAL`, which filters row versions *before* they are collapsed and
//!   would return a stale version that matches the filter (e.g. a verdict no longer `pending`).
//!   With it off, WHERE is evaluated on the collapsed rows everywhere;
//! - error codes are read from the exception text, since 18.16 sends no
//!   `X-ClickHouse-Exception-Code` header ([`error`]).
//!
//! Semantics against the [`Store`] contract:
//! - `append` keeps the first copy of an identity, as SQLite does: the group-commit writer (one
//!   task per process) looks the group's identities up before its INSERT and writes only those
//!   not stored yet, so it also reports exactly what was new, duplicate or conflicting. The
//!   event tables are `ReplacingMergeTree`, which would keep the *last* copy of a key, so the
//!   writer never gives it a second copy; `load_events` reads without `FINAL` and keeps the
//!   earliest `ingested_ns` of an identity stored twice anyway (by two processes at the same
//!   instant, or by an older reckon).
//! - verdict upserts are new rows with a higher `version`, deletes are tombstone rows; findings
//!   carry the version of the verdict write they belong to (see `schema.rs`).
//! - there are no multi-table snapshots: a report's counts come from separate queries.

mod counts;
pub mod error;
mod listing;
mod report;
mod rows;
pub mod schema;
mod writer;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ::clickhouse::Row;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

pub use self::error::{ClickHouseError, ErrorClass, RetryPolicy};
use self::rows::*;
use self::writer::{Request, Rows};
use super::{
    escalation_limit, Appended, Derived, IntentCursor, OutboxItem, OutboxPage, Page, Report, Store,
    StoreError, Swap, Unsettled, VerdictFilter,
};
use crate::codec::VerdictDoc;
use crate::model::*;

/// Longest wait to hand one INSERT chunk to the socket.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for ClickHouse to confirm an INSERT.
const END_TIMEOUT: Duration = Duration::from_secs(120);

/// See [`ClickHouseConfig::swap_settle`].
pub const DEFAULT_SWAP_SETTLE: Duration = Duration::from_millis(500);

/// Where and how to reach ClickHouse.
#[derive(Clone, PartialEq, Eq)]
pub struct ClickHouseConfig {
    /// The HTTP endpoint, `http://host:8123`.
    pub url: String,
    pub user: String,
    pub password: String,
    pub database: String,
    pub retry: RetryPolicy,
    /// How long a compare-and-set waits between writing and reading back (default 500 ms);
    /// see [`ClickHouseStore`].
    pub swap_settle: Duration,
    /// Settings sent with every query besides reckon's own, `(name, value)`: none in service;
    /// tests bound what a query may read (`max_rows_to_read`) to show a lookup reads an index.
    #[doc(hidden)]
    pub query_settings: Vec<(String, String)>,
}

impl std::fmt::Debug for ClickHouseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseConfig")
            .field("url", &self.url)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("database", &self.database)
            .field("retry", &self.retry)
            .field("swap_settle", &self.swap_settle)
            .finish()
    }
}

fn bad_config(msg: impl Into<String>) -> StoreError {
    StoreError::ClickHouseConfig(msg.into())
}

impl ClickHouseConfig {
    /// From the app's already parsed store URL (`config::value::parse_store`).
    pub fn new(
        url: &str,
        user: &str,
        password: &str,
        database: &str,
    ) -> Result<ClickHouseConfig, StoreError> {
        if !url.starts_with("http://") {
            return Err(bad_config(format!(
                "{url:?}: TLS is not built in; use an http:// endpoint"
            )));
        }
        let config = ClickHouseConfig {
            url: url.trim_end_matches('/').to_string(),
            user: if user.is_empty() {
                "default".into()
            } else {
                user.to_string()
            },
            password: password.to_string(),
            database: database.to_string(),
            retry: RetryPolicy::default(),
            swap_settle: DEFAULT_SWAP_SETTLE,
            query_settings: Vec::new(),
        };
        config.check()?;
        Ok(config)
    }

    /// The database name is spliced into DDL, so only plain identifiers are accepted.
    fn check(&self) -> Result<(), StoreError> {
        let ok = !self.database.is_empty()
            && self
                .database
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !self.database.as_bytes()[0].is_ascii_digit();
        if ok {
            Ok(())
        } else {
            Err(bad_config(format!(
                "database name {:?}: use letters, digits and _ (not starting with a digit)",
                self.database
            )))
        }
    }

    fn client(&self, database: Option<&str>) -> ::clickhouse::Client {
        let mut c = ::clickhouse::Client::default()
            .with_url(&self.url)
            .with_user(&self.user)
            // 18.16 has no `describe_include_subcolumns`, which validation needs.
            .with_validation(false)
            // See the module doc: WHERE must see collapsed versions under FINAL.
            .with_setting("optimize_move_to_prewhere", "0")
            .with_product_info("reckon", env!("CARGO_PKG_VERSION"));
        if !self.password.is_empty() {
            c = c.with_password(&self.password);
        }
        if let Some(db) = database {
            c = c.with_database(db);
        }
        for (name, value) in &self.query_settings {
            c = c.with_setting(name, value);
        }
        c
    }
}

/// Write versions: wall-clock nanoseconds, forced to increase within a process and never below
/// what the database already holds (so a clock stepped back across a restart cannot make new
/// verdict rows lose to old ones). Also stamps `ingested_ns`, the replay order.
struct Clock(AtomicU64);

impl Clock {
    fn new(floor: u64) -> Clock {
        Clock(AtomicU64::new(floor))
    }

    /// `n` consecutive values; returns the first.
    fn take(&self, n: u64) -> u64 {
        let now = crate::clock::wall_now().0.max(0) as u64;
        let mut prev = self.0.load(Ordering::Relaxed);
        loop {
            let first = now.max(prev + 1);
            match self.0.compare_exchange_weak(
                prev,
                first + n.max(1) - 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return first,
                Err(p) => prev = p,
            }
        }
    }
}

pub struct ClickHouseStore {
    /// Boxed: the client is several hundred bytes, and `AnyStore` is sized by its largest store.
    client: Box<::clickhouse::Client>,
    database: String,
    retry: RetryPolicy,
    clock: Arc<Clock>,
    writer: mpsc::Sender<Request>,
    swap_settle: Duration,
    /// The background tasks that read the store stop once this is dropped.
    _alive: Arc<()>,
}

impl std::fmt::Debug for ClickHouseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseStore")
            .field("database", &self.database)
            .finish()
    }
}

#[derive(Row, Deserialize)]
struct DocRow {
    doc: String,
    listed_ns: u64,
}

/// A value bound to a `?` of a query built from parts.
#[derive(Clone)]
enum Arg {
    S(String),
    U(u64),
}

fn bind_all(mut q: ::clickhouse::query::Query, args: &[Arg]) -> ::clickhouse::query::Query {
    for a in args {
        q = match a {
            Arg::S(s) => q.bind(s.as_str()),
            Arg::U(n) => q.bind(*n),
        };
    }
    q
}

/// An hour in nanoseconds: the unit of listing places the counts are kept by.
const HOUR_NS: u64 = 3_600_000_000_000;

/// Now in unix nanoseconds: where a first page's first slab reaches back from.
fn wall_ns() -> u64 {
    crate::clock::wall_now().0.max(0) as u64
}

/// Create the database if missing and bring its schema up to `target` (normally
/// [`schema::latest`]). Exposed for tests that need an older schema.
#[doc(hidden)]
pub async fn migrate_to(config: &ClickHouseConfig, target: u32) -> Result<(), StoreError> {
    migrate_sliced(config, target, schema::SLICE_NS).await
}

/// [`migrate_to`], with sliced fills ([`schema::SLICE`]) over ranges of `slice_ns` listing
/// nanoseconds (tests use a few seconds to run a fill as several slices).
pub async fn migrate_sliced(
    config: &ClickHouseConfig,
    target: u32,
    slice_ns: u64,
) -> Result<(), StoreError> {
    let slice_ns = slice_ns.max(1);
    config.check()?;
    let retry = config.retry;
    let root = config.client(None);
    let db = &config.database;
    retry
        .run(
            || format!("CREATE DATABASE {db}"),
            || {
                root.query(&format!("CREATE DATABASE IF NOT EXISTS `{db}`"))
                    .execute()
            },
        )
        .await?;
    let client = config.client(Some(db));
    let exec = |sql: String| {
        let client = client.clone();
        async move {
            retry
                .run(
                    || format!("schema: {}", first_line(&sql)),
                    || client.query(&sql).execute(),
                )
                .await
        }
    };
    exec(schema::CREATE_MIGRATIONS.to_string()).await?;
    let found: u32 = retry
        .run(
            || "read schema version".into(),
            || {
                client
                    .query("SELECT max(version) FROM reckon_schema_migrations")
                    .fetch_one::<u32>()
            },
        )
        .await?;
    if found > schema::latest() {
        return Err(StoreError::ClickHouseSchemaTooNew {
            database: db.clone(),
            found,
            known: schema::latest(),
        });
    }
    for m in schema::MIGRATIONS {
        if m.version <= found || m.version > target {
            continue;
        }
        for sql in m.statements {
            if sql.contains(schema::SLICE) {
                let q = format!(
                    "SELECT DISTINCT intDiv(listed_ns, {slice_ns}) AS s FROM reckon_intent_tally ORDER BY s"
                );
                let slices: Vec<u64> = retry
                    .run(
                        || "the listing places to fill".into(),
                        || client.query(&q).fetch_all::<u64>(),
                    )
                    .await?;
                for (i, s) in slices.iter().enumerate() {
                    let range = format!(
                        "listed_ns >= {} AND listed_ns < {}",
                        s * slice_ns,
                        (s + 1).saturating_mul(slice_ns)
                    );
                    exec(sql.replace(schema::SLICE, &range)).await?;
                    if (i + 1) % 30 == 0 || i + 1 == slices.len() {
                        tracing::info!(database = %db, version = m.version, done = i + 1, of = slices.len(), "schema fill");
                    }
                }
                continue;
            }
            match exec(sql.to_string()).await {
                // No server before 19.x has `ADD COLUMN IF NOT EXISTS`: a step interrupted after
                // its `ALTER` and before its version row finds the columns there when it runs
                // again. (Each such `ALTER` adds all of its step's columns at once.)
                Err(e)
                    if adds_columns(sql) && e.code.is_some_and(|c| COLUMN_EXISTS.contains(&c)) =>
                {
                    tracing::info!(database = %db, version = m.version, "columns of an interrupted schema step are there already");
                }
                done => done?,
            }
        }
        retry
            .run(
                || format!("record schema version {}", m.version),
                || {
                    client
                        .query("INSERT INTO reckon_schema_migrations (version, name, applied_at) SELECT ?, ?, now()")
                        .bind(m.version)
                        .bind(m.name)
                        .execute()
                },
            )
            .await?;
        tracing::info!(database = %db, version = m.version, name = m.name, "applied ClickHouse schema migration");
    }
    Ok(())
}

/// ClickHouse's answers to adding a column that exists: `ILLEGAL_COLUMN` (18.16 and later),
/// `DUPLICATE_COLUMN`.
const COLUMN_EXISTS: [u32; 2] = [44, 15];

/// Whether a schema statement is an `ALTER TABLE ... ADD COLUMN`.
fn adds_columns(sql: &str) -> bool {
    let sql = sql.trim_start();
    sql.starts_with("ALTER TABLE") && sql.contains("ADD COLUMN")
}

fn first_line(sql: &str) -> &str {
    sql.trim().lines().next().unwrap_or("")
}

impl ClickHouseStore {
    /// Events whose row was written at or after `since_ns` (`ingested_ns`; 0: all), each
    /// identity once. Not `FINAL`: that would keep the *last* copy of an identity stored twice
    /// (by two processes at once, or before the writer looked identities up). The first written
    /// is the one every store keeps.
    async fn load_events_since(&self, since_ns: u64) -> Result<Vec<Event>, StoreError> {
        // PREWHERE: the one column is read whole and the others only where it matched (the
        // client turns the automatic move off, see the module doc; no `FINAL` here). The
        // checkpoint is recent, so that is a few granules, not every event ever stored.
        let q = |table: &str| {
            self.client
                .query(&format!(
                    "SELECT ?fields FROM {table} PREWHERE ingested_ns >= ?"
                ))
                .bind(since_ns)
        };
        let attempts: Vec<AttemptRow> = self.fetch("load attempts", q(ATTEMPTS)).await?;
        let readbacks: Vec<ReadbackRow> = self.fetch("load read-backs", q(READBACKS)).await?;
        let records: Vec<RecordRow> = self.fetch("load records", q(RECORDS)).await?;
        let mut all: Vec<EventRow> =
            Vec::with_capacity(attempts.len() + readbacks.len() + records.len());
        all.extend(attempts.into_iter().map(EventRow::Attempt));
        all.extend(readbacks.into_iter().map(EventRow::Readback));
        all.extend(records.into_iter().map(EventRow::Record));
        first_copies(all)
    }
    /// Connect, create the database if missing, upgrade its schema to this binary's, and start
    /// the group-commit writer. Must be called inside a Tokio runtime.
    pub async fn open(config: ClickHouseConfig) -> Result<ClickHouseStore, StoreError> {
        migrate_to(&config, schema::latest()).await?;
        let client = config.client(Some(&config.database));
        let retry = config.retry;
        let floor: u64 = retry
            .run(
                || "read verdict versions".into(),
                || {
                    client
                        .query("SELECT max(version) FROM reckon_verdicts")
                        .fetch_one::<u64>()
                },
            )
            .await?;
        let clock = Arc::new(Clock::new(floor));
        let (tx, rx) = mpsc::channel(writer::QUEUE_DEPTH);
        let stored = writer::StoredFilter::cold();
        tokio::spawn(writer::fill(client.clone(), stored.clone()));
        let alive = Arc::new(());
        tokio::spawn(counts::run(
            counts::Conn {
                client: client.clone(),
                retry,
            },
            Arc::downgrade(&alive),
        ));
        tokio::spawn(writer::run(
            client.clone(),
            retry,
            clock.clone(),
            stored,
            rx,
        ));
        Ok(ClickHouseStore {
            client: Box::new(client),
            database: config.database,
            retry,
            clock,
            writer: tx,
            swap_settle: config.swap_settle,
            _alive: alive,
        })
    }

    /// Recount the hours of the intents listing written since they were counted (the
    /// background task does every few seconds; for tests and tools). Returns how many.
    pub async fn recount(&self) -> Result<usize, StoreError> {
        counts::recount(&self.conn()).await
    }

    fn conn(&self) -> counts::Conn {
        counts::Conn {
            client: (*self.client).clone(),
            retry: self.retry,
        }
    }

    /// Where each of `ids` is listed, as a lookup for tombstones: an id with no stored verdict
    /// gets 0 (its tombstone hides nothing in the listing, where it has no row).
    async fn listed_ns_of(&self, ids: &[String]) -> Result<impl Fn(&str) -> u64, StoreError> {
        let listed: HashMap<String, u64> = if ids.is_empty() {
            HashMap::new()
        } else {
            self.listed_of(ids.to_vec())
                .await?
                .into_iter()
                .map(|(id, t)| (id, t.0.max(0) as u64))
                .collect()
        };
        Ok(move |id: &str| listed.get(id).copied().unwrap_or(0))
    }

    pub fn database(&self) -> &str {
        &self.database
    }

    async fn write(&self, rows: Rows) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(Request::Write {
                rows: Box::new(rows),
                reply,
            })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    async fn fetch<T>(&self, op: &str, q: ::clickhouse::query::Query) -> Result<Vec<T>, StoreError>
    where
        T: ::clickhouse::RowOwned + ::clickhouse::RowRead,
    {
        counts::fetch(&self.retry, op, q).await
    }

    /// A statement that returns nothing, retried like a read.
    async fn execute(&self, op: &str, q: ::clickhouse::query::Query) -> Result<(), StoreError> {
        Ok(self
            .retry
            .run(|| op.to_string(), || q.clone().execute())
            .await?)
    }

    async fn escalations(
        &self,
        op: &str,
        q: ::clickhouse::query::Query,
    ) -> Result<Vec<Escalation>, StoreError> {
        self.fetch::<EscalationRow>(op, q)
            .await?
            .into_iter()
            .map(escalation)
            .collect()
    }
}

impl Store for ClickHouseStore {
    /// `received_at` is not stored: `ingested_ns`, stamped when the row is written (later, on
    /// the same clock), already says when reckon had it, and is what start-up reads back by.
    async fn append_received(
        &self,
        events: Vec<Event>,
        _received_at: Timestamp,
    ) -> Result<Vec<Appended>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        // Per item, before any row is built: a time a `UInt64`/`DateTime` column cannot hold
        // must not fail the INSERT of the whole batch.
        let (events, mask) = super::keep_holdable(events);
        if events.is_empty() {
            return Ok(vec![Appended::Refused; mask.len()]);
        }
        let events = events
            .iter()
            .map(EventRow::of)
            .collect::<Result<Vec<_>, _>>()?;
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(Request::Append { events, reply })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        let statuses = answer.await.map_err(|_| StoreError::WriterGone)??;
        Ok(super::spread_statuses(&mask, statuses))
    }

    async fn load_events(&self) -> Result<Vec<Event>, StoreError> {
        self.load_events_since(0).await
    }

    async fn checkpoint(&self) -> Result<Option<Timestamp>, StoreError> {
        let q = self.client.query(
            "SELECT value FROM reckon_meta WHERE name = 'checkpoint' ORDER BY value DESC LIMIT 1",
        );
        let found: Vec<u64> = self.fetch("read the checkpoint", q).await?;
        Ok(found
            .first()
            .map(|v| Timestamp(i64::try_from(*v).unwrap_or(i64::MAX))))
    }

    async fn routes_of_open_intents(&self) -> Result<bool, StoreError> {
        let q = self
            .client
            .query("SELECT count() FROM reckon_meta WHERE name = 'open_routes'");
        let found: Vec<u64> = self
            .fetch("read whether open intents have routes", q)
            .await?;
        Ok(found.first().is_some_and(|n| *n > 0))
    }

    async fn unsettled_intents(&self) -> Result<Vec<Unsettled>, StoreError> {
        // The filter sits outside the FINAL subquery (see reckon_current_verdicts).
        let q = self.client.query(
            "SELECT intent_id, fingerprint, listed_ns
             FROM (SELECT intent_id, fingerprint, listed_ns, settled, deleted FROM reckon_verdicts FINAL)
             WHERE settled = 0 AND deleted = 0",
        );
        let rows: Vec<(String, u64, u64)> = self.fetch("unsettled intents", q).await?;
        rows.into_iter()
            .map(|(intent_id, fingerprint, listed_ns)| {
                Ok(Unsettled {
                    intent_id,
                    fingerprint,
                    listed_at: ts(listed_ns, VERDICTS, "listed_ns")?,
                })
            })
            .collect()
    }

    async fn events_received_since(&self, since: Timestamp) -> Result<Vec<Event>, StoreError> {
        self.load_events_since(since.0.max(0) as u64).await
    }

    async fn route_owners(&self, routes: Vec<String>) -> Result<Vec<String>, StoreError> {
        const CHUNK: usize = 1000;
        let mut out = std::collections::BTreeSet::new();
        for chunk in routes.chunks(CHUNK) {
            let q = self
                .client
                .query("SELECT DISTINCT intent_id FROM reckon_routes WHERE route IN ?")
                .bind(writer::SqlTuple(chunk));
            let ids: Vec<String> = self.fetch("route owners", q).await?;
            out.extend(ids);
        }
        // A claimed orphan's routes stay (deleting them would be a mutation per claim): an
        // orphan owner counts only while its verdict does.
        let orphans: Vec<&str> = out
            .iter()
            .filter(|id| id.starts_with(crate::model::ORPHAN_PREFIX))
            .map(String::as_str)
            .collect();
        if !orphans.is_empty() {
            let live: std::collections::BTreeSet<String> = self
                .stored_verdicts(orphans.into_iter().map(str::to_string).collect())
                .await?
                .into_iter()
                .collect();
            out.retain(|id| !id.starts_with(crate::model::ORPHAN_PREFIX) || live.contains(id));
        }
        Ok(out.into_iter().collect())
    }

    /// Mutations (`ALTER TABLE ... DELETE`), which 18.16 runs in the background: rows leave
    /// the tables as the server rewrites their parts, not before this returns.
    async fn expire_events(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        let mark = self
            .client
            .query("SELECT value FROM reckon_meta WHERE name = 'expired_through' ORDER BY value DESC LIMIT 1");
        let from: u64 = self
            .fetch::<u64>("read the retention mark", mark)
            .await?
            .first()
            .copied()
            .unwrap_or(0);
        let q = self
            .client
            .query(
                "SELECT intent_id, last_event_ns FROM (
                     SELECT intent_id, last_event_ns, settled, deleted FROM reckon_verdicts FINAL
                     WHERE last_event_ns >= ? AND last_event_ns < ?)
                 WHERE settled = 1 AND deleted = 0 ORDER BY last_event_ns, intent_id LIMIT ?",
            )
            .bind(from)
            .bind(before.0.max(0) as u64)
            .bind(limit.max(1) as u64);
        let page: Vec<(String, u64)> = self.fetch("intents past retention", q).await?;
        let (Some(first), Some(last)) = (page.first(), page.last()) else {
            return Ok(0);
        };
        let ids: Vec<&str> = page.iter().map(|(id, _)| id.as_str()).collect();
        // What a later event is judged against stays; the tool-call arguments sent before the
        // cut become the redaction marker (see the SQLite writer's `expire`). One mutation,
        // applied by the server in the background.
        let q = self
            .client
            .query(&format!(
                "ALTER TABLE {ATTEMPTS} UPDATE arguments = ? WHERE intent_id IN ? AND started_ns < ?
                 AND isNotNull(arguments) AND arguments != ?"
            ))
            .bind(REDACTED_ARGUMENTS_JSON)
            .bind(writer::SqlTuple(&ids))
            .bind(before.0.max(0) as u64)
            .bind(REDACTED_ARGUMENTS_JSON);
        self.execute("expire tool-call arguments", q).await?;
        let mark = super::expiry_mark(page.len() == limit, first.1 as i64, last.1 as i64) as u64;
        let rows = Rows {
            meta: vec![MetaRow {
                name: "expired_through".into(),
                value: mark,
            }],
            ..Rows::default()
        };
        self.write(rows).await?;
        Ok(page.len())
    }

    async fn expire_outbox(&self, before: Timestamp) -> Result<u64, StoreError> {
        // Every version of an item carries its enqueue time, so the filter takes all of an
        // item's rows or none (a delivered item never comes back as pending). A mutation
        // rewrites the table's parts: asked for only when there is something to delete.
        let before = before.0.max(0) as u64;
        let q = self
            .client
            .query("SELECT count() FROM reckon_outbox WHERE created_ns < ?")
            .bind(before);
        let rows = self
            .fetch::<u64>("count expired notifications", q)
            .await?
            .pop()
            .unwrap_or(0);
        if rows > 0 {
            let q = self
                .client
                .query("ALTER TABLE reckon_outbox DELETE WHERE created_ns < ?")
                .bind(before);
            self.execute("expire notifications", q).await?;
        }
        Ok(rows)
    }

    /// One streamed read of the route column as stored: no `DISTINCT` or `ORDER BY`, which
    /// 18.16 (no read in order) answers by holding the rest of the table in memory: 1.4 GB for
    /// a first page of 50,000 at 2 M spans, past its 10 GB limit at 50 M. Not retried here: a
    /// failed scan is started again by its caller, and the filter's inserts are idempotent.
    async fn scan_routes(
        &self,
        chunk: usize,
        mut each: impl FnMut(Vec<String>) -> bool + Send,
    ) -> Result<u64, StoreError> {
        const OP: &str = "scan routes";
        let chunk = chunk.max(1);
        let mut rows = self
            .client
            .query("SELECT route FROM reckon_routes")
            .fetch::<String>()
            .map_err(|e| ClickHouseError::once(OP, e))?;
        let mut handed = 0u64;
        let mut page = Vec::with_capacity(chunk.min(1 << 16));
        while let Some(route) = rows
            .next()
            .await
            .map_err(|e| ClickHouseError::once(OP, e))?
        {
            page.push(route);
            if page.len() == chunk {
                handed += chunk as u64;
                if !each(std::mem::take(&mut page)) {
                    return Ok(handed);
                }
            }
        }
        handed += page.len() as u64;
        if !page.is_empty() {
            each(page);
        }
        Ok(handed)
    }

    async fn put_verdicts(&self, verdicts: Vec<Verdict>) -> Result<(), StoreError> {
        if verdicts.is_empty() {
            return Ok(());
        }
        let first = self.clock.take(verdicts.len() as u64);
        let mut rows = Rows::default();
        for (i, v) in verdicts.iter().enumerate() {
            push_audited(&mut rows, v, first + i as u64)?;
        }
        self.write(rows).await
    }

    async fn delete_verdicts(&self, intent_ids: Vec<String>) -> Result<(), StoreError> {
        if intent_ids.is_empty() {
            return Ok(());
        }
        let listed = self.listed_ns_of(&intent_ids).await?;
        let first = self.clock.take(intent_ids.len() as u64);
        let mut rows = Rows::default();
        for (i, id) in intent_ids.iter().enumerate() {
            rows.push_verdict(verdict_tombstone(id, listed(id), first + i as u64));
        }
        self.write(rows).await
    }

    async fn put_derived(&self, d: Derived) -> Result<(), StoreError> {
        if d.is_empty() {
            return Ok(());
        }
        let listed = self.listed_ns_of(&d.removed).await?;
        let n = d.removed.len() + d.verdicts.len();
        let first = self.clock.take(n as u64);
        let mut rows = Rows {
            escalations: d
                .escalations
                .iter()
                .map(escalation_row)
                .collect::<Result<_, _>>()?,
            outbox: d.outbox.iter().map(outbox_row).collect::<Result<_, _>>()?,
            routes: d
                .routes
                .into_iter()
                .map(|r| RouteRow {
                    route: r.route,
                    intent_id: r.intent_id,
                })
                .collect(),
            meta: d
                .checkpoint
                .map(|at| MetaRow {
                    name: "checkpoint".into(),
                    value: at.0.max(0) as u64,
                })
                .into_iter()
                .chain(d.open_routes_complete.then(|| MetaRow {
                    name: "open_routes".into(),
                    value: 1,
                }))
                .collect(),
            ..Rows::default()
        };
        // One INSERT into reckon_verdicts holds the tombstones and the verdicts beside them.
        for (i, id) in d.removed.iter().enumerate() {
            rows.push_verdict(verdict_tombstone(id, listed(id), first + i as u64));
        }
        let first = first + d.removed.len() as u64;
        for (i, v) in d.verdicts.iter().enumerate() {
            push_audited(&mut rows, v, first + i as u64)?;
        }
        self.write(rows).await
    }

    async fn listed_of(
        &self,
        intent_ids: Vec<String>,
    ) -> Result<Vec<(String, Timestamp)>, StoreError> {
        const CHUNK: usize = 1000;
        let mut out = Vec::new();
        for chunk in intent_ids.chunks(CHUNK) {
            // Any version will do: the place never changes (rows from before v11 take it from
            // their own first_seen_ns, so the current version's is the one listed).
            let q = self
                .client
                .query(
                    "SELECT intent_id, argMax(listed_ns, version) FROM reckon_verdicts
                     WHERE intent_id IN ? GROUP BY intent_id HAVING argMax(deleted, version) = 0",
                )
                .bind(writer::SqlTuple(chunk));
            for (id, ns) in self.fetch::<(String, u64)>("listed verdicts", q).await? {
                out.push((id, ts(ns, VERDICTS, "listed_ns")?));
            }
        }
        Ok(out)
    }

    async fn stored_verdicts(&self, intent_ids: Vec<String>) -> Result<Vec<String>, StoreError> {
        const CHUNK: usize = 1000;
        let mut out = Vec::new();
        for chunk in intent_ids.chunks(CHUNK) {
            // The filter on `deleted` sits outside the FINAL subquery (see
            // reckon_current_verdicts); the ids inside let the primary index skip the rest.
            let q = self
                .client
                .query(
                    "SELECT intent_id FROM (SELECT intent_id, deleted FROM reckon_verdicts FINAL
                     WHERE intent_id IN ?) WHERE deleted = 0",
                )
                .bind(writer::SqlTuple(chunk));
            out.extend(self.fetch::<String>("stored verdicts", q).await?);
        }
        Ok(out)
    }

    async fn get_verdict(&self, intent_id: &str) -> Result<Option<VerdictDoc>, StoreError> {
        let q = self
            .client
            // The document is in the listing (v11), found by the place the verdict row names;
            // under FINAL, the current version of that one key.
            .query(
                "SELECT doc, listed_ns FROM (SELECT doc, listed_ns, deleted FROM reckon_intent_list FINAL
                     WHERE (listed_ns, intent_id) IN (SELECT listed_ns, intent_id FROM reckon_verdicts WHERE intent_id = ?))
                 WHERE deleted = 0",
            )
            .bind(intent_id);
        match self.fetch::<DocRow>("get verdict", q).await?.pop() {
            Some(r) => serde_json::from_str::<VerdictDoc>(&r.doc)
                .map_err(|e| StoreError::corrupt(VERDICTS, "doc", e.to_string()))
                .and_then(|d| Ok(Some(d.listed(ts(r.listed_ns, VERDICTS, "listed_ns")?)))),
            None => Ok(None),
        }
    }

    /// From `reckon_intent_list`, in two reads shaped for 18.16 ([`listing`]): the page's keys
    /// from the narrow columns of the slabs it reaches (the total beside it, concurrently),
    /// then the documents of exactly those versions, a range of the primary index with no
    /// `FINAL`. A lookup names the intents' keys (`reckon_intent_lookup` by its primary index,
    /// their places from `reckon_verdicts` by theirs), so it is one read of those keys.
    async fn list_verdicts(&self, filter: &VerdictFilter) -> Result<Page<VerdictDoc>, StoreError> {
        let limit = filter.effective_limit();
        let after = filter
            .cursor
            .as_deref()
            .map(IntentCursor::decode)
            .transpose()?;
        let mut l = listing::Listing {
            table: INTENT_LIST,
            id: "intent_id",
            cols: vec!["deleted"],
            outer: String::from(" AND deleted = 0"),
            outer_args: Vec::new(),
            inner: String::new(),
            inner_args: Vec::new(),
            keyed: false,
        };
        if let Some(s) = filter.state {
            l.cols.push("state");
            l.outer.push_str(" AND state = ?");
            l.outer_args.push(Arg::S(s.as_str().into()));
        }
        if let Some(t) = &filter.tool {
            l.cols.push("tool");
            l.outer.push_str(" AND tool = ?");
            l.outer_args.push(Arg::S(t.clone()));
        }
        // An intent active since `since` is listed at or after the hour of `since`, or before
        // it with its activity in `reckon_intent_activity` (see `report.rs`): the walk reads
        // no further back than that hour but for those keys, and the counts answer the hours
        // after it (their every row is active since).
        let since_hour = filter.since.map(|s| {
            let from = s.0.max(0) as u64;
            (from, from / HOUR_NS * HOUR_NS)
        });
        if let Some((from, _)) = since_hour {
            l.cols.push("last_event_ns");
            l.outer.push_str(" AND last_event_ns >= ?");
            l.outer_args.push(Arg::U(from));
        }
        if let Some(k) = filter.finding {
            l.cols.push("finding_kinds");
            l.outer
                .push_str(" AND has(CAST(finding_kinds AS Array(String)), ?)");
            l.outer_args.push(Arg::S(k.as_str().into()));
        }
        // The first condition names the keys (the index skips the rest); the second keeps the
        // intents whose current verdict wrote the lookup row (as `reckon_current_findings`
        // does for findings).
        for (kind, value) in filter.lookups() {
            l.keyed = true;
            l.inner.push_str(
                " AND (listed_ns, intent_id) IN
                    (SELECT listed_ns, intent_id FROM reckon_verdicts WHERE intent_id IN
                        (SELECT intent_id FROM reckon_intent_lookup WHERE kind = ? AND value = ?))",
            );
            l.inner_args.push(Arg::S(kind.as_str().into()));
            l.inner_args.push(Arg::S(value.into()));
            l.outer.push_str(
                " AND (intent_id, version) IN
                      (SELECT intent_id, verdict_version FROM reckon_intent_lookup WHERE kind = ? AND value = ?)",
            );
            l.outer_args.push(Arg::S(kind.as_str().into()));
            l.outer_args.push(Arg::S(value.into()));
        }
        // With `since` (and no lookup, which names its few keys), the listing from the hour of
        // `since` on, then the intents listed before it and active since, by key: two reads,
        // since 18.16 reads the whole table for a key subquery in a disjunction.
        let since_hour = since_hour.filter(|_| !l.keyed);
        let active_before = since_hour.map(|(from, hour_lo)| {
            let mut a = l.clone();
            a.keyed = true;
            a.inner.push_str(
                " AND (listed_ns, intent_id) IN
                    (SELECT listed_ns, intent_id FROM reckon_intent_activity
                     WHERE last_event_ns >= ? AND listed_ns < ?)",
            );
            a.inner_args.extend([Arg::U(from), Arg::U(hour_lo)]);
            l.inner.push_str(" AND listed_ns >= ?");
            l.inner_args.push(Arg::U(hour_lo));
            a
        });
        let after = after.map(|c| (c.listed_at.0.max(0) as u64, c.intent_id));
        // The counts answer the filters they have dimensions for (see `counts.rs`): the total,
        // and how far back the page's rows lie.
        let dims = counts::Dims {
            dim1: filter.state.map(|s| s.as_str()),
            dim2: filter.tool.as_deref(),
            finding: filter.finding.map(|k| code(&FindingKind::ALL, k) as u8),
        };
        let hours = if !l.keyed {
            counts::hours_counted(&self.conn(), counts::Counted::Intents, &dims).await?
        } else {
            None
        };
        let live_below = since_hour.map_or(0, |(_, hour_lo)| hour_lo + HOUR_NS);
        let total = async {
            let (listed, active) = tokio::join!(
                l.total(self, "count verdicts", hours.as_deref(), live_below),
                async {
                    match &active_before {
                        Some(a) => a.count(self, "count verdicts active since", None).await,
                        None => Ok(0),
                    }
                }
            );
            Ok::<u64, StoreError>(listed? + active?)
        };
        let walk = async {
            let want = limit + 1;
            // A cursor below the hour of `since` is among the intents active since.
            let below = match (&after, since_hour) {
                (Some((ns, _)), Some((_, hour_lo))) => *ns < hour_lo,
                _ => false,
            };
            let mut keys = if below {
                Vec::new()
            } else {
                l.walk(
                    self,
                    "list verdicts",
                    listing::Walk {
                        after: after.clone(),
                        now: wall_ns(),
                        want,
                        counted: hours.as_deref(),
                        inline: Some("doc"),
                    },
                )
                .await?
            };
            if let Some(a) = active_before.as_ref().filter(|_| keys.len() < want) {
                let more = a
                    .walk(
                        self,
                        "list verdicts active since",
                        listing::Walk {
                            after: if below { after.clone() } else { None },
                            now: wall_ns(),
                            want: want - keys.len(),
                            counted: None,
                            inline: Some("doc"),
                        },
                    )
                    .await?;
                keys.extend(more);
            }
            Ok::<_, StoreError>(keys)
        };
        let (total, keys) = tokio::join!(total, walk);
        let (total, mut keys) = (total?, keys?);
        // One extra row tells whether there is a next page.
        let more = keys.len() > limit;
        keys.truncate(limit);
        let next_cursor = match (more, keys.last()) {
            (true, Some(last)) => Some(
                IntentCursor {
                    listed_at: Timestamp(last.listed_ns as i64),
                    intent_id: last.id.clone(),
                }
                .encode(),
            ),
            _ => None,
        };
        if keys.is_empty() {
            return Ok(Page {
                items: Vec::new(),
                next_cursor,
                total,
            });
        }
        let mut docs: HashMap<(String, u64), String> = HashMap::new();
        // Read with the keys when the page's range was small (see `Listing::walk`).
        for k in &mut keys {
            if let Some(doc) = k.inline.take() {
                docs.insert((k.id.clone(), k.version), doc);
            }
        }
        let missing: Vec<&listing::Key> = keys
            .iter()
            .filter(|k| !docs.contains_key(&(k.id.clone(), k.version)))
            .collect();
        if !missing.is_empty() {
            // By exact keys, not the range they span: a lookup's few intents may lie months
            // apart.
            let keyed: Vec<(u64, &str)> = missing
                .iter()
                .map(|k| (k.listed_ns, k.id.as_str()))
                .collect();
            let versions: Vec<u64> = missing.iter().map(|k| k.version).collect();
            let q = self
                .client
                .query(
                    "SELECT intent_id, version, doc FROM reckon_intent_list
                     WHERE (listed_ns, intent_id) IN ? AND version IN ?",
                )
                .bind(writer::SqlTuple(&keyed))
                .bind(writer::SqlTuple(&versions));
            docs.extend(
                self.fetch::<(String, u64, String)>("list verdicts: documents", q)
                    .await?
                    .into_iter()
                    .map(|(id, v, doc)| ((id, v), doc)),
            );
        }
        // A verdict rewritten and merged between the two reads has lost the version the first
        // chose: its current one is read instead (it keeps its place, which never changes).
        let lost: Vec<(u64, &str)> = keys
            .iter()
            .filter(|k| !docs.contains_key(&(k.id.clone(), k.version)))
            .map(|k| (k.listed_ns, k.id.as_str()))
            .collect();
        let mut current: HashMap<String, String> = HashMap::new();
        if !lost.is_empty() {
            let q = self
                .client
                .query(
                    "SELECT intent_id, doc FROM (SELECT intent_id, doc, deleted FROM reckon_intent_list FINAL
                     WHERE (listed_ns, intent_id) IN ?) WHERE deleted = 0",
                )
                .bind(writer::SqlTuple(&lost));
            current.extend(
                self.fetch::<(String, String)>("list verdicts: rewritten", q)
                    .await?,
            );
        }
        let items = keys
            .into_iter()
            .filter_map(|k| {
                let doc = docs
                    .remove(&(k.id.clone(), k.version))
                    .or_else(|| current.remove(&k.id))?;
                Some((doc, k.listed_ns))
            })
            .map(|(doc, listed_ns)| {
                let doc = serde_json::from_str::<VerdictDoc>(&doc)
                    .map_err(|e| StoreError::corrupt(INTENT_LIST, "doc", e.to_string()))?;
                Ok(doc.listed(ts(listed_ns, INTENT_LIST, "listed_ns")?))
            })
            .collect::<Result<Vec<VerdictDoc>, StoreError>>()?;
        Ok(Page {
            items,
            next_cursor,
            total,
        })
    }

    async fn put_escalations(&self, escalations: Vec<Escalation>) -> Result<(), StoreError> {
        let rows = Rows {
            escalations: escalations
                .iter()
                .map(escalation_row)
                .collect::<Result<_, _>>()?,
            ..Rows::default()
        };
        self.write(rows).await
    }

    /// Optimistic, in four steps: see `swap_escalation_notify` (this is it with no
    /// notifications), which says what it cannot rule out.
    async fn swap_escalation(
        &self,
        current: Escalation,
        new: Escalation,
    ) -> Result<Swap, StoreError> {
        self.swap_escalation_notify(current, new, Vec::new()).await
    }

    /// ClickHouse 18.16 has no conditional write, no transactions and (without ZooKeeper) no
    /// lock, so this is optimistic, in four steps:
    ///
    /// 1. read the stored row (`FINAL`); unless it is `current`, answer the conflict;
    /// 2. insert `new` right away (not behind the group commit);
    /// 3. if steps 1-2 took longer than `swap_settle`, this caller may be a late racer whose
    ///    insert landed after another's was confirmed: it looks for another row of the same
    ///    version, and if there is exactly one, re-inserts it (so it is the last one again)
    ///    and answers the conflict;
    /// 4. wait `swap_settle` and read back: of rows of one id and equal version,
    ///    `ReplacingMergeTree(version)` keeps the one inserted last, so of racers that both read
    ///    `current`, one whose insert landed after ours is seen here and we answer the conflict.
    ///
    /// Step 4 alone is exact when every racer's read and insert are less than `swap_settle`
    /// apart (a racer that read before our insert and inserted after our read-back took longer
    /// than that); step 3 covers one late racer. What is left, honestly: three or more racers
    /// with one of them stalled past the settle delay, or a background merge collapsing the
    /// other racer's row within the milliseconds between a late racer's insert and its check,
    /// can tell two callers they won (the store keeps the last); and a late racer whose rival
    /// had not yet read back can make both answer a conflict (the rival's write stands, and its
    /// retry is a no-op). Within one process the engine serializes person actions, so all of
    /// this needs two instances acting on one escalation at the same moment. A lock that closes
    /// it (ZooKeeper through replicated tables, or `CREATE TABLE` as a test-and-set on a single
    /// server) is left to the scale-out.
    ///
    /// `outbox` goes into step 2's insert, before the escalation row. When a late racer loses at
    /// step 3 or 4, its notifications stay (they carry the same ids as the winner's, and the
    /// store keeps the last written body): that same rare two-instance race can announce the
    /// losing action's text.
    async fn swap_escalation_notify(
        &self,
        current: Escalation,
        new: Escalation,
        outbox: Vec<OutboxItem>,
    ) -> Result<Swap, StoreError> {
        let began = std::time::Instant::now();
        let stored = self.get_escalation(&new.id).await?;
        if stored.as_ref() != Some(&current) {
            return Ok(Swap::Conflict(stored.map(Box::new)));
        }
        let mine = Rows {
            escalations: vec![escalation_row(&new)?],
            outbox: outbox.iter().map(outbox_row).collect::<Result<_, _>>()?,
            ..Rows::default()
        };
        writer::insert_now(&self.client, &self.retry, &mine).await?;
        if began.elapsed() > self.swap_settle {
            let q = self
                .client
                .query("SELECT ?fields FROM reckon_escalations WHERE id = ? AND version = ?")
                .bind(new.id.as_str())
                .bind(new.version);
            let mut others: Vec<Escalation> = Vec::new();
            for e in self.escalations("check a late swap", q).await? {
                if e != new && !others.contains(&e) {
                    others.push(e);
                }
            }
            match others.len() {
                0 => {}
                1 => {
                    let first = others.remove(0);
                    tracing::warn!(escalation = %new.id, "a person action raced another instance's and was late: keeping the other");
                    let rows = Rows {
                        escalations: vec![escalation_row(&first)?],
                        ..Rows::default()
                    };
                    writer::insert_now(&self.client, &self.retry, &rows).await?;
                    return Ok(Swap::Conflict(Some(Box::new(first))));
                }
                n => {
                    tracing::error!(escalation = %new.id, racers = n + 1, "person actions of several instances raced on one escalation version; the store keeps the last written");
                }
            }
        }
        tokio::time::sleep(self.swap_settle).await;
        let after = self.get_escalation(&new.id).await?;
        if after.as_ref() == Some(&new) {
            Ok(Swap::Written)
        } else {
            Ok(Swap::Conflict(after.map(Box::new)))
        }
    }

    async fn outbox_put(&self, items: Vec<OutboxItem>) -> Result<(), StoreError> {
        let rows = Rows {
            outbox: items.iter().map(outbox_row).collect::<Result<_, _>>()?,
            ..Rows::default()
        };
        self.write(rows).await
    }

    async fn outbox_pending(
        &self,
        target: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<OutboxPage, StoreError> {
        // `target` is part of the sorting key, so it may filter inside FINAL; the state and the
        // time are filtered on the collapsed rows.
        const PENDING: &str = "FROM (SELECT * FROM reckon_outbox FINAL WHERE target = ?)
            WHERE state = 'pending' AND created_ns >= ?";
        let since = since.0.max(0) as u64;
        let q = self
            .client
            .query(&format!(
                "SELECT ?fields {PENDING} ORDER BY created_ns, id LIMIT ?"
            ))
            .bind(target)
            .bind(since)
            .bind(escalation_limit(limit) as u64);
        let items = self
            .fetch::<OutboxRow>("list pending notifications", q)
            .await?
            .into_iter()
            .map(outbox_item)
            .collect::<Result<Vec<_>, _>>()?;
        let q = self
            .client
            .query(&format!("SELECT count() {PENDING}"))
            .bind(target)
            .bind(since);
        let total = self
            .fetch::<u64>("count pending notifications", q)
            .await?
            .pop()
            .unwrap_or(0);
        Ok(OutboxPage { items, total })
    }

    async fn load_escalations(&self) -> Result<Vec<Escalation>, StoreError> {
        let q = self
            .client
            .query("SELECT ?fields FROM reckon_escalations FINAL ORDER BY opened_ns, id");
        self.escalations("load escalations", q).await
    }

    async fn escalations_of(&self, intent_ids: Vec<String>) -> Result<Vec<Escalation>, StoreError> {
        // A filter, not the sorting key (`id`): each chunk reads the whole table, so past a
        // few chunks one read of it, kept to the intents asked for, is cheaper.
        const CHUNK: usize = 500;
        if intent_ids.len() > 4 * CHUNK {
            let wanted: HashSet<String> = intent_ids.into_iter().collect();
            let mut all = self.load_escalations().await?;
            all.retain(|e| wanted.contains(&e.intent_id));
            return Ok(all);
        }
        let mut out = Vec::new();
        for chunk in intent_ids.chunks(CHUNK) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let mut q = self.client.query(&format!(
                "SELECT ?fields FROM reckon_escalations FINAL WHERE intent_id IN ({marks})"
            ));
            for id in chunk {
                q = q.bind(id.as_str());
            }
            out.extend(self.escalations("escalations of intents", q).await?);
        }
        Ok(out)
    }

    async fn escalation_counts(&self) -> Result<Vec<(EscalationStatus, u64)>, StoreError> {
        report::escalations(&self.conn(), 0).await
    }

    async fn get_escalation(&self, id: &str) -> Result<Option<Escalation>, StoreError> {
        let q = self
            .client
            .query("SELECT ?fields FROM reckon_escalations FINAL WHERE id = ?")
            .bind(id);
        Ok(self.escalations("get escalation", q).await?.pop())
    }

    async fn list_escalations(
        &self,
        status: Option<EscalationStatus>,
        limit: usize,
    ) -> Result<Vec<Escalation>, StoreError> {
        let limit = escalation_limit(limit) as u64;
        // The hours that hold the newest `limit` with the status, by the listing's counts: the
        // unresolved few of a year of escalations are read from the hours that have some, not
        // from every row (an hour written since its count is read whatever it says, and
        // counts for nothing towards the limit).
        let dims = counts::Dims {
            dim1: status.map(EscalationStatus::as_str),
            dim2: None,
            finding: None,
        };
        let within = counts::hours_counted(&self.conn(), counts::Counted::Escalations, &dims)
            .await?
            .map(|hours| {
                let mut wanted = Vec::new();
                let mut surely = 0;
                for h in hours.iter().filter(|h| h.stale || h.matching > 0) {
                    if surely >= limit {
                        break;
                    }
                    wanted.push(h.hour);
                    if !h.stale {
                        surely += h.matching;
                    }
                }
                wanted.sort_unstable();
                wanted
            });
        let (cond, mut args) = match within {
            Some(hours) if hours.is_empty() => return Ok(Vec::new()),
            // Hours that hold none between them cost less read than a condition of a thousand
            // ranges evaluated on every row.
            Some(hours) => counts::covering_ranges(&hours, 16),
            None => ("1 = 1".to_string(), Vec::new()),
        };
        // The keys first, from the narrow columns' current versions (a tenth of the cost of
        // merging every column), then every column of those keys only: `PREWHERE` on the
        // sorting key drops the other rows before `FINAL` merges what is left, in the same
        // query, so no merge between two reads can lose a version.
        let mut outer = String::from("1 = 1");
        if let Some(s) = status {
            outer = "status = ?".to_string();
            args.push(Arg::S(s.as_str().into()));
        }
        args.push(Arg::U(limit));
        // The same conditions twice, in the order they appear: the keys' read, then the rows'.
        let args = [args.clone(), args].concat();
        let sql = format!(
            "SELECT ?fields FROM (SELECT * FROM {ESCALATION_LIST} FINAL
                 PREWHERE (listed_ns, id) IN
                     (SELECT listed_ns, id FROM
                         (SELECT listed_ns, id, version, status FROM {ESCALATION_LIST} FINAL WHERE {cond})
                      WHERE {outer} ORDER BY listed_ns DESC, id DESC LIMIT ?)
                 WHERE {cond})
             WHERE {outer} ORDER BY listed_ns DESC, id DESC LIMIT ?"
        );
        self.escalations("list escalations", bind_all(self.client.query(&sql), &args))
            .await
    }

    /// From `reckon_escalation_list` as the intents are listed ([`Store::list_verdicts`]).
    async fn page_escalations(
        &self,
        filter: &super::EscalationFilter,
    ) -> Result<Page<Escalation>, StoreError> {
        let limit = filter.effective_limit();
        let after = filter
            .cursor
            .as_deref()
            .map(super::EscalationCursor::decode)
            .transpose()?;
        let mut l = listing::Listing {
            table: ESCALATION_LIST,
            id: "id",
            cols: Vec::new(),
            outer: String::new(),
            outer_args: Vec::new(),
            inner: String::new(),
            inner_args: Vec::new(),
            keyed: false,
        };
        if let Some(s) = filter.status {
            l.cols.push("status");
            l.outer.push_str(" AND status = ?");
            l.outer_args.push(Arg::S(s.as_str().into()));
        }
        if let Some(s) = filter.severity {
            l.cols.push("severity");
            l.outer.push_str(" AND severity = ?");
            l.outer_args.push(Arg::S(s.as_str().into()));
        }
        if let Some(t) = &filter.tool {
            l.cols.push("tool");
            l.outer.push_str(" AND tool = ?");
            l.outer_args.push(Arg::S(t.clone()));
        }
        let after = match after {
            // Nothing stored is older than 1970: the page after such a place is empty.
            Some(c) if c.listed_at.0 < 0 => Some((0, String::new())),
            Some(c) => Some((c.listed_at.0 as u64, c.id)),
            None => None,
        };
        // The counts answer status and severity (an escalation's tool is its intent's).
        let dims = counts::Dims {
            dim1: filter.status.map(|s| s.as_str()),
            dim2: filter.severity.map(|s| s.as_str()),
            finding: None,
        };
        let hours = if filter.tool.is_none() {
            counts::hours_counted(&self.conn(), counts::Counted::Escalations, &dims).await?
        } else {
            None
        };
        let total = l.total(self, "count escalations", hours.as_deref(), 0);
        let (total, keys) = tokio::join!(
            total,
            l.walk(
                self,
                "page escalations",
                listing::Walk {
                    after,
                    now: wall_ns(),
                    want: limit + 1,
                    counted: hours.as_deref(),
                    inline: None,
                },
            ),
        );
        let (total, mut keys) = (total?, keys?);
        let more = keys.len() > limit;
        keys.truncate(limit);
        let mut items = Vec::with_capacity(keys.len());
        if !keys.is_empty() {
            let (lo, hi) = listing::span(&keys);
            let names: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
            let versions: Vec<u64> = keys.iter().map(|k| k.version).collect();
            let q = self
                .client
                .query(
                    "SELECT ?fields FROM reckon_escalation_list
                     WHERE listed_ns >= ? AND listed_ns <= ? AND id IN ? AND version IN ?",
                )
                .bind(lo)
                .bind(hi)
                .bind(writer::SqlTuple(&names))
                .bind(writer::SqlTuple(&versions));
            let mut rows: HashMap<(String, u64), Escalation> = self
                .escalations("page escalations: rows", q)
                .await?
                .into_iter()
                .map(|e| ((e.id.clone(), e.version), e))
                .collect();
            // One rewritten and merged between the two reads: its current row instead.
            let lost: Vec<&str> = keys
                .iter()
                .filter(|k| !rows.contains_key(&(k.id.clone(), k.version)))
                .map(|k| k.id.as_str())
                .collect();
            let mut current: HashMap<String, Escalation> = HashMap::new();
            if !lost.is_empty() {
                let q = self
                    .client
                    .query(
                        "SELECT ?fields FROM reckon_escalation_list FINAL
                         WHERE listed_ns >= ? AND listed_ns <= ? AND id IN ?",
                    )
                    .bind(lo)
                    .bind(hi)
                    .bind(writer::SqlTuple(&lost));
                current.extend(
                    self.escalations("page escalations: rewritten", q)
                        .await?
                        .into_iter()
                        .map(|e| (e.id.clone(), e)),
                );
            }
            items.extend(keys.iter().filter_map(|k| {
                rows.remove(&(k.id.clone(), k.version))
                    .or_else(|| current.remove(&k.id))
            }));
        }
        let next_cursor = match (more, items.last()) {
            (true, Some(last)) => Some(
                super::EscalationCursor {
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
            total,
        })
    }

    async fn report(&self, since: Option<Timestamp>, now: Timestamp) -> Result<Report, StoreError> {
        report::report(&self.conn(), since, now).await
    }

    async fn known_observations(
        &self,
        keys: Vec<super::RecordKey>,
    ) -> Result<HashSet<super::RecordKey>, StoreError> {
        // A prefix of the records' sorting key; no FINAL: any version of a row will do.
        const CHUNK: usize = 500;
        let mut known = HashSet::new();
        for chunk in keys.chunks(CHUNK) {
            let tuples = vec!["(?, ?, ?)"; chunk.len()].join(", ");
            let mut q = self.client.query(&format!(
                "SELECT DISTINCT source, object_id, status FROM reckon_records
                 WHERE (source, object_id, status) IN ({tuples})"
            ));
            for k in chunk {
                q = q
                    .bind(k.source.as_str())
                    .bind(k.object_id.as_str())
                    .bind(k.status.as_str());
            }
            let rows: Vec<(String, String, String)> = self.fetch("known records", q).await?;
            known.extend(
                rows.into_iter()
                    .map(|(source, object_id, status)| super::RecordKey {
                        source,
                        object_id,
                        status,
                    }),
            );
        }
        Ok(known)
    }

    async fn events_touching(&self, q: super::EventQuery) -> Result<Vec<Event>, StoreError> {
        // Attempts and read-backs by their sorting key's prefix; records by their whole key.
        const CHUNK: usize = 500;
        let mut all: Vec<EventRow> = Vec::new();
        let marks = |n: usize| vec!["?"; n].join(", ");
        for chunk in q.intents.chunks(CHUNK) {
            let m = marks(chunk.len());
            let mut a = self.client.query(&format!(
                "SELECT ?fields FROM {ATTEMPTS} WHERE intent_id IN ({m})"
            ));
            let mut r = self.client.query(&format!(
                "SELECT ?fields FROM {READBACKS} WHERE intent_id IN ({m})"
            ));
            for id in chunk {
                a = a.bind(id.as_str());
                r = r.bind(id.as_str());
            }
            let attempts: Vec<AttemptRow> = self.fetch("attempts of intents", a).await?;
            let readbacks: Vec<ReadbackRow> = self.fetch("read-backs of intents", r).await?;
            all.extend(attempts.into_iter().map(EventRow::Attempt));
            all.extend(readbacks.into_iter().map(EventRow::Readback));
        }
        // Records by their full sort key, from the lookup of what links them (v17).
        for (kind, ids) in [
            ("intent", &q.intents),
            ("key", &q.keys),
            ("object", &q.objects),
        ] {
            for chunk in ids.chunks(CHUNK) {
                let mut rq = self.client.query(&format!(
                    "SELECT ?fields FROM {RECORDS} WHERE (source, object_id, status, observed_ns) IN
                         (SELECT source, object_id, status, observed_ns FROM reckon_record_lookup
                          WHERE kind = '{kind}' AND value IN ({}))",
                    marks(chunk.len())
                ));
                for id in chunk {
                    rq = rq.bind(id.as_str());
                }
                let records: Vec<RecordRow> = self.fetch("records touching intents", rq).await?;
                all.extend(records.into_iter().map(EventRow::Record));
            }
        }
        first_copies(all)
    }
}

/// A verdict's rows at `version`: its document, its verdict, finding, lookup, listing and tally
/// rows.
fn push_audited(rows: &mut Rows, v: &Verdict, version: u64) -> Result<(), StoreError> {
    let doc = serde_json::to_string(&VerdictDoc::from_verdict(v))
        .map_err(|e| StoreError::WriteFailed(format!("encoding verdict {}: {e}", v.intent_id)))?;
    rows.lookups.extend(lookup_rows(v, version));
    rows.push_verdict(verdict_rows(v, doc, version)?);
    Ok(())
}

/// The first copy of each identity among `rows`, as events, in ingest order (the first written
/// is the one every store keeps; a second copy exists only when two processes wrote at once, or
/// before the writer looked identities up).
fn first_copies(mut rows: Vec<EventRow>) -> Result<Vec<Event>, StoreError> {
    rows.sort_by_key(EventRow::ingested_ns);
    let mut seen = HashSet::with_capacity(rows.len());
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        if seen.insert(r.identity()) {
            out.push(r.event()?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clickhouse_settings_are_checked() {
        let c = ClickHouseConfig::new("http://127.0.0.1:8123", "u", "p", "d1").unwrap();
        assert_eq!(
            (c.user.as_str(), c.password.as_str(), c.database.as_str()),
            ("u", "p", "d1")
        );
        assert!(!format!("{c:?}").contains("\"p\""), "password is redacted");
        assert_eq!(
            ClickHouseConfig::new("http://h:8123/", "", "", "db")
                .unwrap()
                .user,
            "default"
        );
        assert!(ClickHouseConfig::new("https://h:8443", "", "", "db").is_err());
        assert!(ClickHouseConfig::new("http://h:8123", "", "", "bad-name").is_err());
        assert!(ClickHouseConfig::new("http://h:8123", "", "", "x`y").is_err());
    }

    #[test]
    fn clock_increases_and_respects_its_floor() {
        let far = 4_000_000_000_000_000_000u64;
        let c = Clock::new(far);
        let a = c.take(3);
        let b = c.take(1);
        assert_eq!(a, far + 1);
        assert_eq!(b, far + 4);
        let c = Clock::new(0);
        let x = c.take(1);
        assert!(x > 1_600_000_000_000_000_000);
        assert!(c.take(1) > x);
    }
}
