//! The system of record: events, verdicts, findings and escalations.
//!
//! [`Store`] is what the rest of reckon sees. It is implemented by [`sqlite::SqliteStore`] (the
//! embedded default) and [`clickhouse::ClickHouseStore`], so its contract is deliberately weak where
//! ClickHouse is weak: no multi-statement transactions are promised, and ordering of
//! `load_events` is a courtesy, not something the engine may rely on. Three rules hold on every
//! store: events keep their **first** copy (a later copy of an identity is never written, and
//! `append` says whether each event was new, a duplicate or a conflicting re-send); derived rows
//! (verdicts, findings) are upserts where the latest write wins when read back
//! (ReplacingMergeTree semantics); escalations change either by the engine's upserts (higher
//! version wins) or by a person's compare-and-set ([`Store::swap_escalation`]); the notification
//! outbox keeps each item's furthest state ([`Store::outbox_put`]).
//!
//! The app dispatches over an enum of stores, so the trait uses `impl Future + Send` returns
//! rather than `dyn`-compatible boxed futures.

pub mod any;
pub mod clickhouse;
pub mod sqlite;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use serde::Serialize;

use crate::codec::{rfc3339, VerdictDoc};
pub use crate::model::LookupKind;
pub use crate::model::Route;
use crate::model::{
    AttemptClass, Decision, Escalation, EscalationStatus, Event, FindingKind, IntentState,
    Severity, Timestamp, Verdict,
};
pub use crate::notify::{OutboxItem, OutboxState};

pub use self::clickhouse::{ClickHouseConfig, ClickHouseStore};
pub use any::AnyStore;
pub use sqlite::SqliteStore;

/// Everything that can go wrong below the store boundary.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A ClickHouse operation failed (after retrying, when it was transient).
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] self::clickhouse::ClickHouseError),
    #[error("ClickHouse store configuration: {0}")]
    ClickHouseConfig(String),
    #[error(
        "ClickHouse database {database} has schema version {found}, newer than this reckon knows \
         ({known}); run a newer reckon"
    )]
    ClickHouseSchemaTooNew {
        database: String,
        found: u32,
        known: u32,
    },
    /// A stored row that does not decode: the data file was edited or damaged. Never papered over,
    /// because a silently skipped event would change verdicts.
    #[error("corrupt row in {table}.{column}: {detail}")]
    Corrupt {
        table: &'static str,
        column: &'static str,
        detail: String,
    },
    #[error(
        "the data file has schema version {found}, newer than this reckon knows ({known}); \
         run a newer reckon or restore a backup"
    )]
    SchemaTooNew { found: i64, known: i64 },
    /// Only from a read-only open: upgrading needs a writable open (start the server once).
    #[error(
        "the data file has schema version {found}, older than this reckon's {known}; \
         open it read-write once (start the server) to upgrade it"
    )]
    SchemaOutdated { found: i64, known: i64 },
    #[error("bad cursor: {0}")]
    BadCursor(String),
    #[error("the store's writer has stopped")]
    WriterGone,
    #[error("the store is open read-only")]
    ReadOnly,
    /// The group commit this request was part of did not commit; nothing of it is durable.
    #[error("write not committed: {0}")]
    WriteFailed(String),
    /// A blocking store task panicked or was cancelled.
    #[error("store task failed: {0}")]
    Task(String),
    /// The store did not answer in time (a hung server, a partition): the caller refuses
    /// retryably instead of holding its client until the client gives up.
    #[error("the store did not confirm within {0:?}; nothing was acknowledged")]
    Timeout(std::time::Duration),
}

impl StoreError {
    /// A short, stable label of what went wrong (the SQLite result code, the ClickHouse error
    /// code, the variant): what a [`crate::logging::Throttle`] tells failures apart by.
    pub fn kind(&self) -> String {
        match self {
            StoreError::Io { source, .. } => format!("io:{:?}", source.kind()),
            StoreError::Sqlite(e) => sqlite_kind(e),
            StoreError::ClickHouse(e) => e.kind(),
            StoreError::ClickHouseConfig(_) => "clickhouse_config".into(),
            StoreError::ClickHouseSchemaTooNew { .. } => "clickhouse_schema_too_new".into(),
            StoreError::Corrupt { table, .. } => format!("corrupt:{table}"),
            StoreError::SchemaTooNew { .. } => "schema_too_new".into(),
            StoreError::SchemaOutdated { .. } => "schema_outdated".into(),
            StoreError::BadCursor(_) => "bad_cursor".into(),
            StoreError::WriterGone => "writer_gone".into(),
            StoreError::ReadOnly => "read_only".into(),
            // The commit's error, as every request of the group got it: its text tells kinds
            // apart (a full disk, a damaged page), and it has few.
            StoreError::WriteFailed(msg) => {
                format!("write_failed:{}", msg.chars().take(48).collect::<String>())
            }
            StoreError::Task(_) => "task".into(),
            StoreError::Timeout(_) => "timeout".into(),
        }
    }

    pub(crate) fn corrupt(
        table: &'static str,
        column: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        StoreError::Corrupt {
            table,
            column,
            detail: detail.into(),
        }
    }
}

/// [`StoreError::kind`] of a SQLite error: its result code (`DiskFull`, `DatabaseBusy`, ...).
pub fn sqlite_kind(e: &rusqlite::Error) -> String {
    match e.sqlite_error_code() {
        Some(code) => format!("sqlite:{code:?}"),
        None => "sqlite".into(),
    }
}

/// The earliest instant every store can hold: ClickHouse keeps event times as `UInt64` unix
/// nanoseconds, which have no value before 1970.
pub const EARLIEST_HOLDABLE: Timestamp = Timestamp(0);
/// The latest instant every store can hold: ClickHouse's `DateTime` beside each `_ns` column is
/// `UInt32` seconds, which end at 2106-02-07T06:28:15Z.
pub const LATEST_HOLDABLE: Timestamp = Timestamp(u32::MAX as i64 * 1_000_000_000);

/// A time in an event that no store can hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field} {} is outside the times every store can hold ({} to {})",
    rfc3339(*at),
    rfc3339(EARLIEST_HOLDABLE),
    rfc3339(LATEST_HOLDABLE)
)]
pub struct Unholdable {
    pub field: &'static str,
    pub at: Timestamp,
}

/// The instants an event carries, named as in the model (`start`, `end`, `at`, `observed_at`,
/// `created_at`).
pub fn event_times(e: &Event) -> [(&'static str, Option<Timestamp>); 2] {
    match e {
        Event::Attempt(a) => [("start", Some(a.start)), ("end", Some(a.end))],
        Event::Readback(r) => [("at", Some(r.at)), ("end", Some(r.end))],
        Event::Record(r) => [
            ("observed_at", Some(r.observed_at)),
            ("created_at", r.created_at),
        ],
    }
}

/// Whether every store can hold `e`: the one definition both stores apply in
/// [`Store::append`], so an event is refused (or kept) identically whatever the backend. The
/// ingest service refuses narrower bounds per item before anything reaches a store
/// (`ingest::bounds`), so this only catches a caller that bypassed it.
pub fn holdable(e: &Event) -> Result<(), Unholdable> {
    for (field, at) in event_times(e) {
        if let Some(at) = at {
            if !(EARLIEST_HOLDABLE..=LATEST_HOLDABLE).contains(&at) {
                return Err(Unholdable { field, at });
            }
        }
    }
    Ok(())
}

/// Leaves out of `events` those no store can hold ([`holdable`]), each logged: refused alone,
/// before the write, so one bad event never fails (and blocks the retries of) a whole batch.
/// Returns the events to write and, per original position, whether it was kept.
pub(crate) fn keep_holdable(events: Vec<Event>) -> (Vec<Event>, Vec<bool>) {
    if events.iter().all(|e| holdable(e).is_ok()) {
        let n = events.len();
        return (events, vec![true; n]);
    }
    let mut kept = Vec::with_capacity(events.len());
    let mut mask = Vec::with_capacity(events.len());
    for e in events {
        match holdable(&e) {
            Ok(()) => {
                kept.push(e);
                mask.push(true);
            }
            Err(why) => {
                tracing::error!(error = %why, "store refused an event it cannot hold");
                mask.push(false);
            }
        }
    }
    (kept, mask)
}

/// An append's statuses for the original positions: an event left out by [`keep_holdable`] is
/// [`Appended::Refused`].
pub(crate) fn spread_statuses(mask: &[bool], statuses: Vec<Appended>) -> Vec<Appended> {
    if mask.iter().all(|k| *k) {
        return statuses;
    }
    let mut statuses = statuses.into_iter();
    mask.iter()
        .map(|&kept| match kept {
            true => statuses.next().unwrap_or(Appended::Refused),
            false => Appended::Refused,
        })
        .collect()
}

/// A record observation's identity without its time: (source, object_id, status). Asked of
/// [`Store::known_observations`] to tell a re-delivered record from news.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    pub source: String,
    pub object_id: String,
    pub status: String,
}

/// Filter and page request for [`Store::list_verdicts`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerdictFilter {
    pub state: Option<IntentState>,
    /// Intents having at least one finding of this kind.
    pub finding: Option<FindingKind>,
    pub tool: Option<String>,
    /// `last_event >= since`.
    pub since: Option<Timestamp>,
    /// Intents whose parameter target, or one of whose objects' target, is this (an order id):
    /// a lookup ([`lookups_of`]), not a scan.
    pub target: Option<String>,
    /// Intents linked to this downstream object, or one of whose attempts' responses named it.
    pub object_id: Option<String>,
    /// Intents that sent this idempotency key.
    pub key: Option<String>,
    /// Page size; 0 means [`VerdictFilter::DEFAULT_LIMIT`], anything above
    /// [`VerdictFilter::MAX_LIMIT`] is capped.
    pub limit: usize,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl VerdictFilter {
    pub const DEFAULT_LIMIT: usize = 100;
    pub const MAX_LIMIT: usize = 1000;

    pub fn effective_limit(&self) -> usize {
        match self.limit {
            0 => Self::DEFAULT_LIMIT,
            n => n.min(Self::MAX_LIMIT),
        }
    }

    /// The lookups asked for, each `(kind, value)`.
    pub fn lookups(&self) -> Vec<(LookupKind, &str)> {
        [
            (LookupKind::Target, &self.target),
            (LookupKind::Object, &self.object_id),
            (LookupKind::Key, &self.key),
        ]
        .into_iter()
        .filter_map(|(kind, v)| v.as_deref().map(|v| (kind, v)))
        .collect()
    }
}

/// Filter and page request for [`Store::page_escalations`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EscalationFilter {
    pub status: Option<EscalationStatus>,
    /// Escalations of intents of this tool (their stored verdict's).
    pub tool: Option<String>,
    /// Escalations whose most severe finding is of this severity.
    pub severity: Option<Severity>,
    /// Page size, as [`VerdictFilter::limit`].
    pub limit: usize,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl EscalationFilter {
    pub fn effective_limit(&self) -> usize {
        match self.limit {
            0 => VerdictFilter::DEFAULT_LIMIT,
            n => n.min(VerdictFilter::MAX_LIMIT),
        }
    }
}

/// One page of a listing. `next_cursor` is `None` on the last page; `total` is how many
/// matched the filter in all (every page, not only this one), counted when this page was read.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
    pub total: u64,
}

/// Where a page of intents ends. Intents are listed by `intent_id` (ascending): the one
/// attribute of an intent that never changes, so a walk over the pages returns every intent
/// that exists for the whole walk exactly once, however its verdict changes meanwhile (the
/// latest activity, even the first event's time, move when late evidence arrives).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentCursor {
    pub listed_at: Timestamp,
    pub intent_id: String,
}

/// Where a page of escalations ends. Escalations are listed newest first by
/// `(listed_at, id)`: both are fixed when the escalation is opened ([`Escalation::listed_at`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EscalationCursor {
    pub listed_at: Timestamp,
    pub id: String,
}

/// Cursors are opaque to clients (base64url, no padding, of `{tag}:{fields...}`) so their
/// format can change; shared by all stores so a cursor survives switching the backend of a
/// running deployment. The tag tells the listings apart: a cursor of one is refused by the
/// other, as is one from before this format.
fn encode_cursor(raw: String) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_cursor(cursor: &str, tag: &str) -> Result<String, StoreError> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor.trim())
        .map_err(|e| StoreError::BadCursor(format!("not base64url: {e}")))?;
    let raw = String::from_utf8(bytes).map_err(|_| StoreError::BadCursor("not UTF-8".into()))?;
    match raw.strip_prefix(tag).and_then(|r| r.strip_prefix(':')) {
        Some(rest) => Ok(rest.to_string()),
        None => Err(StoreError::BadCursor(
            "not a cursor of this listing (expected one from its next_cursor)".into(),
        )),
    }
}

/// `{nanos}:{id}`, the body of both listings' cursors.
fn split_listed(rest: &str) -> Result<(Timestamp, String), StoreError> {
    let (nanos, id) = rest
        .split_once(':')
        .ok_or_else(|| StoreError::BadCursor("missing separator".into()))?;
    let nanos = nanos
        .parse::<i64>()
        .map_err(|_| StoreError::BadCursor("bad timestamp".into()))?;
    Ok((Timestamp(nanos), id.to_string()))
}

// The tags name the order too: a cursor from before the listings were ordered by `listed_at`
// ("i", "e") is refused rather than read in the wrong order.
impl IntentCursor {
    pub fn encode(&self) -> String {
        encode_cursor(format!("il:{}:{}", self.listed_at.0, self.intent_id))
    }

    pub fn decode(cursor: &str) -> Result<IntentCursor, StoreError> {
        let (listed_at, intent_id) = split_listed(&decode_cursor(cursor, "il")?)?;
        Ok(IntentCursor {
            listed_at,
            intent_id,
        })
    }
}

impl EscalationCursor {
    pub fn encode(&self) -> String {
        encode_cursor(format!("el:{}:{}", self.listed_at.0, self.id))
    }

    pub fn decode(cursor: &str) -> Result<EscalationCursor, StoreError> {
        let (listed_at, id) = split_listed(&decode_cursor(cursor, "el")?)?;
        Ok(EscalationCursor { listed_at, id })
    }
}

/// What a verdict is found by (`GET /api/v1/intents?target=&object_id=&key=`), each
/// `(kind, value)` once, sorted: its parameter target and its objects' targets, the objects
/// linked to it and those its attempts' responses named, the keys it sent. Written with every
/// verdict, replacing what its previous verdict said (so an object that moved to its owner
/// finds the owner, not the reader that listed it first).
pub fn lookups_of(v: &Verdict) -> Vec<(LookupKind, &str)> {
    let mut out: Vec<(LookupKind, &str)> = Vec::new();
    out.extend(v.target.as_deref().map(|t| (LookupKind::Target, t)));
    for o in &v.objects {
        out.push((LookupKind::Object, o.object_id.as_str()));
        out.extend(o.target.as_deref().map(|t| (LookupKind::Target, t)));
    }
    for a in &v.attempts {
        out.extend(a.object_id.as_deref().map(|o| (LookupKind::Object, o)));
        out.extend(a.idempotency_key.as_deref().map(|k| (LookupKind::Key, k)));
    }
    out.extend(
        v.idempotency_keys
            .iter()
            .map(|k| (LookupKind::Key, k.as_str())),
    );
    out.sort_unstable();
    out.dedup();
    out
}

/// Per-tool slice of the [`Report`].
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ToolReport {
    pub intents: u64,
    pub attempts: u64,
    /// Every [`IntentState`] present, zero included.
    pub by_state: BTreeMap<String, u64>,
    /// Finding rows of this tool's intents.
    pub findings: u64,
    /// Intents of this tool with at least one `duplicate_effect` finding (intents, not findings:
    /// "how many actions happened twice or more").
    pub duplicate_effects: u64,
}

impl Default for ToolReport {
    fn default() -> Self {
        ToolReport {
            intents: 0,
            attempts: 0,
            by_state: zeroes(IntentState::ALL.map(IntentState::as_str)),
            findings: 0,
            duplicate_effects: 0,
        }
    }
}

/// The audit report (`GET /api/v1/report`, `reckon report`). Every map carries every known enum
/// value, zero counts included, so dashboards and CSV exports have stable columns.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Report {
    /// The report covers intents whose latest event is at or after this instant (all if `None`),
    /// and escalations first opened at or after it (their listing place: an escalation's
    /// `opened_at` follows its findings and moves).
    pub since: Option<String>,
    pub generated_at: String,
    pub intents: u64,
    pub attempts: u64,
    pub findings: u64,
    pub by_state: BTreeMap<String, u64>,
    pub by_decision: BTreeMap<String, u64>,
    /// Summed over the covered verdicts' attempts.
    pub by_attempt_class: BTreeMap<String, u64>,
    pub by_finding: BTreeMap<String, u64>,
    pub by_severity: BTreeMap<String, u64>,
    /// Keyed by tool name; intents without a tool are under [`Report::NO_TOOL`].
    pub by_tool: BTreeMap<String, ToolReport>,
    pub escalations: BTreeMap<String, u64>,
}

fn zeroes<const N: usize>(keys: [&'static str; N]) -> BTreeMap<String, u64> {
    keys.into_iter().map(|k| (k.to_string(), 0)).collect()
}

impl Report {
    /// Key in `by_tool` for intents with no tool (e.g. orphan records).
    pub const NO_TOOL: &'static str = "(none)";

    /// An all-zero report: every store fills it in, so the shape is the same for all of them.
    pub fn empty(since: Option<Timestamp>, now: Timestamp) -> Report {
        Report {
            since: since.map(rfc3339),
            generated_at: rfc3339(now),
            intents: 0,
            attempts: 0,
            findings: 0,
            by_state: zeroes(IntentState::ALL.map(IntentState::as_str)),
            by_decision: zeroes(Decision::ALL.map(Decision::as_str)),
            by_attempt_class: zeroes(AttemptClass::ALL.map(AttemptClass::as_str)),
            by_finding: zeroes(FindingKind::ALL.map(FindingKind::as_str)),
            by_severity: zeroes(Severity::ALL.map(Severity::as_str)),
            by_tool: BTreeMap::new(),
            escalations: zeroes(EscalationStatus::ALL.map(EscalationStatus::as_str)),
        }
    }
}

/// What [`Store::append`] did with one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Appended {
    /// Its identity was not stored yet: it is now.
    New,
    /// Its identity was stored with the same content (a re-sent export): nothing was written.
    Duplicate,
    /// Its identity was stored with different content (a re-send that changed, say a timeout
    /// then a 200): the first copy stays, this one is dropped.
    Conflict,
    /// A value no store can hold (see [`holdable`]): not written. Ingest refuses such items
    /// before they get here; this is the stores' own guard.
    Refused,
}

impl Appended {
    pub fn is_new(self) -> bool {
        self == Appended::New
    }
}

/// An intent whose stored verdict is not at rest ([`crate::model::Rest::Open`]), and what that
/// verdict said
/// ([`Verdict::fingerprint`]; 0 for a row written before fingerprints were stored).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Unsettled {
    pub intent_id: String,
    pub fingerprint: u64,
    /// [`Verdict::listed_at`] of the stored verdict.
    pub listed_at: Timestamp,
}

/// What the engine derived from events since its last write: escalations opened or changed,
/// verdicts of pseudo-intents that no longer exist, and fresh verdicts. [`Store::put_derived`]
/// writes it as one unit.
#[derive(Clone, Debug, Default)]
pub struct Derived {
    pub escalations: Vec<Escalation>,
    /// Intent ids whose stored verdict (and findings) must go.
    pub removed: Vec<String>,
    pub verdicts: Vec<Arc<Verdict>>,
    /// Notifications announcing the escalation changes: in the same durable write, so an
    /// escalation anyone can see always has them (see [`Store::outbox_put`]).
    pub outbox: Vec<OutboxItem>,
    /// The routes of the intents among `verdicts` and of every intent an event reached (see
    /// [`Route`]): written with the verdicts of the step that found them, so an intent is
    /// findable from the store by key or object before it may leave memory, and an open one
    /// before a start has read it back.
    pub routes: Vec<Route>,
    /// Every intent the store holds has its routes in it now (written once, by the first start
    /// of a store from before routes were written for open intents, when it has written those):
    /// later starts may serve before the open intents are read back
    /// ([`Store::routes_of_open_intents`]).
    pub open_routes_complete: bool,
    /// Every event received before this instant has its verdicts and escalations written (this
    /// write included): start-up reads the events received since then ([`Store::checkpoint`]).
    pub checkpoint: Option<Timestamp>,
}

impl Derived {
    pub fn is_empty(&self) -> bool {
        self.escalations.is_empty()
            && self.removed.is_empty()
            && self.verdicts.is_empty()
            && self.outbox.is_empty()
            && self.routes.is_empty()
            && self.checkpoint.is_none()
            && !self.open_routes_complete
    }
}

/// One target's pending notifications (see [`Store::outbox_pending`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutboxPage {
    /// Oldest first (`created_at`, then id), at most the limit asked for.
    pub items: Vec<OutboxItem>,
    /// How many are pending in all (beyond the limit too).
    pub total: u64,
}

/// What a compare-and-set of an escalation ([`Store::swap_escalation`]) found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Swap {
    /// The stored version was the expected one: the new escalation is stored now.
    Written,
    /// It was not (another person, instance or step got there first): nothing of this write
    /// stands. Carries the stored escalation, if there is one.
    Conflict(Option<Box<Escalation>>),
}

/// The identity kind of an event, as metrics label it.
pub fn event_kind(e: &Event) -> &'static str {
    match e {
        Event::Attempt(_) => "attempt",
        Event::Readback(_) => "readback",
        Event::Record(_) => "record",
    }
}

/// The storage boundary. All methods may be called concurrently from many tasks.
pub trait Store: Send + Sync {
    /// Make `events` durable. When this returns `Ok` the events survive a crash or power loss
    /// (the OTLP receiver acknowledges an export only then). Idempotent by identity: an
    /// attempt or read-back by (trace_id, span_id), a record observation by
    /// (source, object_id, status, observed_at). **The first copy of an identity wins**, on
    /// every store: a later copy is never written, whatever its content, and is reported as
    /// [`Appended::Duplicate`] or [`Appended::Conflict`] (an earlier copy in the same call
    /// counts as stored). Returns one status per event, in order.
    /// An event no store can hold ([`holdable`]) is refused alone ([`Appended::Refused`]: not
    /// written), and the rest of the batch is written.
    ///
    /// `received_at` is when reckon received them (the ingest path's clock): start-up reads
    /// back what arrived after the last [`Derived::checkpoint`].
    fn append_received(
        &self,
        events: Vec<Event>,
        received_at: Timestamp,
    ) -> impl Future<Output = Result<Vec<Appended>, StoreError>> + Send;

    /// [`Store::append_received`] with no receive time (tests, tools): such events are never
    /// read back as received since a checkpoint.
    fn append(
        &self,
        events: Vec<Event>,
    ) -> impl Future<Output = Result<Vec<Appended>, StoreError>> + Send {
        self.append_received(events, Timestamp(0))
    }

    /// The last [`Derived::checkpoint`] written; `None` for a store no engine has checkpointed
    /// (new, or written by a version before checkpoints): start-up then reads everything.
    fn checkpoint(&self) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;

    /// Whether every open intent's routes are in the store ([`Derived::open_routes_complete`]
    /// was written): a start may then serve before reading the open intents back, since an
    /// event on one finds it by [`Store::route_owners`]. `false` for a store written before
    /// routes were written for open intents (its first start reads them all, then writes them).
    fn routes_of_open_intents(&self) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The intents whose stored verdict is not at rest ([`Verdict::rest`]): what start-up
    /// keeps in memory. Each with its stored verdict's fingerprint, so a start that audits
    /// them again writes only the verdicts that changed.
    fn unsettled_intents(&self) -> impl Future<Output = Result<Vec<Unsettled>, StoreError>> + Send;

    /// Every event received at or after `since` (first copies), for start-up: what may not be
    /// reflected in the stored verdicts yet.
    fn events_received_since(
        &self,
        since: Timestamp,
    ) -> impl Future<Output = Result<Vec<Event>, StoreError>> + Send;

    /// The intents any of `routes` reaches ([`Route`]), each once, sorted.
    fn route_owners(
        &self,
        routes: Vec<String>,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Retention (DESIGN.md "Memory and history"): the raw events of at most `limit` settled
    /// intents ([`crate::model::Rest::Settled`]; a quiet one keeps its events whole) whose
    /// latest event is before `before`, oldest first from where the last call stopped, lose
    /// their content: the tool-call arguments of their attempts sent before `before` become
    /// the redaction marker. What a later event is judged against stays (attempts, read-backs,
    /// records, routes): an expired history judged again must say what its verdict said, and
    /// every shorter form of it tried (a summary from the verdict) misattributed objects. The
    /// parameter checks are what a late event can no longer be judged by. Returns how many
    /// intents; fewer than `limit` means none are left for now.
    fn expire_events(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Retention of the outbox: every notification enqueued before `before` is deleted, whatever
    /// its state. The caller keeps `before` past the delivery's give-up age (24 h), so none of
    /// them is still being delivered: those are delivered, given up, or pending ones nobody
    /// reads any more (left by a process that stopped for longer than that). The bodies they
    /// carry are copies of what was sent; the escalations stay. Returns how many.
    fn expire_outbox(
        &self,
        before: Timestamp,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Every stored route, handed to `each` as it is read, in chunks of at most `chunk`, in no
    /// particular order and possibly more than once; `each` says whether to go on. Returns how
    /// many were handed over. For filling the engine's route filter, whose inserts are
    /// idempotent: a store need not sort or deduplicate a year of routes (on ClickHouse 18.16
    /// either holds every route of the rest of the table in the server's memory at once).
    fn scan_routes(
        &self,
        chunk: usize,
        each: impl FnMut(Vec<String>) -> bool + Send,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Every stored event, each identity once (its first copy), for rebuilding engine state at
    /// start-up. Returned in ingest order where the store knows it; the engine must not depend
    /// on the order.
    fn load_events(&self) -> impl Future<Output = Result<Vec<Event>, StoreError>> + Send;

    /// Upsert by intent id; each intent's findings rows are replaced by the verdict's findings.
    fn put_verdicts(
        &self,
        verdicts: Vec<Verdict>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    fn delete_verdicts(
        &self,
        intent_ids: Vec<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Notifications, escalations, removals, then verdicts, as one durable unit where the store
    /// has one (SQLite: one transaction; ClickHouse: one INSERT per table, notifications before
    /// the escalation changes they announce, escalations before the verdicts that name them, a
    /// removal in the same INSERT as the verdicts beside it). Notifications are upserted as by
    /// [`Store::outbox_put`].
    fn put_derived(&self, derived: Derived) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Those of `intent_ids` that have a stored (not deleted) verdict, in no order.
    fn stored_verdicts(
        &self,
        intent_ids: Vec<String>,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    fn get_verdict(
        &self,
        intent_id: &str,
    ) -> impl Future<Output = Result<Option<VerdictDoc>, StoreError>> + Send;

    /// Newest first by `(listed_at, intent_id)` ([`IntentCursor`], [`Verdict::listed_at`]), with the total that matched. The lookups
    /// (`target`, `object_id`, `key`) read an index of what each verdict is found by
    /// ([`lookups_of`]), never a scan. A malformed cursor is [`StoreError::BadCursor`].
    fn list_verdicts(
        &self,
        filter: &VerdictFilter,
    ) -> impl Future<Output = Result<Page<VerdictDoc>, StoreError>> + Send;

    /// Upsert by id; of two writes of one escalation the higher `version` wins (equal versions:
    /// the later write).
    fn put_escalations(
        &self,
        escalations: Vec<Escalation>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Compare-and-set: store `new` only if the store still holds `current` (same version, same
    /// status and people, same findings). A person's claim or resolution goes through it, so two
    /// people (or two reckon instances on one store) acting on one escalation cannot both
    /// succeed. SQLite: one conditional UPDATE. ClickHouse has no conditional write; see
    /// [`ClickHouseStore`] for how close it gets.
    fn swap_escalation(
        &self,
        current: Escalation,
        new: Escalation,
    ) -> impl Future<Output = Result<Swap, StoreError>> + Send;

    /// [`Store::swap_escalation`] that, when it writes `new`, writes `outbox` (the notifications
    /// announcing the change) with it: SQLite in the same transaction; ClickHouse in the same
    /// insert, before the escalation row (so a crash between the two can announce a change
    /// that a retry of the person's action then writes, never write one that goes unannounced).
    fn swap_escalation_notify(
        &self,
        current: Escalation,
        new: Escalation,
        outbox: Vec<OutboxItem>,
    ) -> impl Future<Output = Result<Swap, StoreError>> + Send;

    /// Upsert notifications by id. Of two writes of one id the one of higher
    /// [`OutboxItem::rank`] wins (equal ranks: the later write), so writing an escalation change
    /// again (same ids, nothing attempted) changes nothing that matters, an attempt's outcome
    /// replaces the item's earlier state, and nothing brings back an item that was delivered or
    /// given up. [`Store::put_derived`] writes its `outbox` the same way.
    fn outbox_put(
        &self,
        items: Vec<OutboxItem>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The pending notifications of one target created at or after `since` (older ones are past
    /// retrying), oldest first, at most `limit` (capped at 1000, 0 means 100), and how many
    /// there are in all.
    fn outbox_pending(
        &self,
        target: &str,
        since: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Result<OutboxPage, StoreError>> + Send;

    /// Every escalation (for tools and tests: the engine reads those of the intents it holds,
    /// [`Store::escalations_of`]).
    fn load_escalations(&self) -> impl Future<Output = Result<Vec<Escalation>, StoreError>> + Send;

    /// Every escalation of these intents, resolved ones included, in no particular order: an
    /// intent's escalations are in memory exactly while it is, so start-up reads those of what
    /// it loaded, and an intent that comes back brings its own.
    fn escalations_of(
        &self,
        intent_ids: Vec<String>,
    ) -> impl Future<Output = Result<Vec<Escalation>, StoreError>> + Send;

    /// Where the stored verdicts of these intents are listed ([`Verdict::listed_at`], which a
    /// recomputation cannot know); an intent with no stored verdict is left out.
    fn listed_of(
        &self,
        intent_ids: Vec<String>,
    ) -> impl Future<Output = Result<Vec<(String, Timestamp)>, StoreError>> + Send;

    /// How many escalations the store holds in each status, whatever their intents: the
    /// gauges count those out of memory too.
    fn escalation_counts(
        &self,
    ) -> impl Future<Output = Result<Vec<(EscalationStatus, u64)>, StoreError>> + Send;

    fn get_escalation(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Escalation>, StoreError>> + Send;

    /// A page of escalations, newest first by `(listed_at, id)` ([`EscalationCursor`]),
    /// with the total that matched. A malformed cursor is [`StoreError::BadCursor`].
    fn page_escalations(
        &self,
        filter: &EscalationFilter,
    ) -> impl Future<Output = Result<Page<Escalation>, StoreError>> + Send;

    /// Newest first by `(opened_at desc, id)`, at most `limit` (capped at
    /// [`UNRESOLVED_READ_LIMIT`], 0 means 100).
    fn list_escalations(
        &self,
        status: Option<EscalationStatus>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Escalation>, StoreError>> + Send;

    /// Counts over the stored verdicts, findings and escalations (see [`Report`]).
    fn report(
        &self,
        since: Option<Timestamp>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Report, StoreError>> + Send;

    /// Which of `keys` have at least one stored record observation, whatever its time. A
    /// record posted with no time of its own whose key is known is a re-delivery, not news.
    fn known_observations(
        &self,
        keys: Vec<RecordKey>,
    ) -> impl Future<Output = Result<HashSet<RecordKey>, StoreError>> + Send;

    /// The stored events an intent that left memory needs back (see [`EventQuery`]), first
    /// copies only, in no particular order.
    fn events_touching(
        &self,
        q: EventQuery,
    ) -> impl Future<Output = Result<Vec<Event>, StoreError>> + Send;
}

/// Rounds of widening in [`evidence`]: linked evidence rarely chains beyond two.
const EVIDENCE_ROUNDS: usize = 16;

/// Everything stored that the audit of `intents` (and of the orphan records of `objects`)
/// reads: their attempts and read-backs, and the records of every key and object these name,
/// widened until nothing new appears.
pub async fn evidence<S: Store + ?Sized>(
    store: &S,
    intents: Vec<String>,
    objects: Vec<String>,
) -> Result<Vec<Event>, StoreError> {
    evidence_within(store, intents, objects, EVIDENCE_ROUNDS).await
}

/// [`evidence`] widened at most `rounds` times.
async fn evidence_within<S: Store + ?Sized>(
    store: &S,
    intents: Vec<String>,
    objects: Vec<String>,
    rounds: usize,
) -> Result<Vec<Event>, StoreError> {
    let mut asked_objects: foldhash::HashSet<String> = objects.iter().cloned().collect();
    let mut asked_keys: foldhash::HashSet<String> = Default::default();
    let loaded = store
        .events_touching(EventQuery {
            intents,
            keys: Vec::new(),
            objects,
        })
        .await?;
    let mut loaded = EventSet::from(loaded);
    for _ in 0..rounds {
        let (keys, objects) = crate::model::keys_and_objects(loaded.as_slice());
        let keys: Vec<String> = keys
            .into_iter()
            .filter(|k| asked_keys.insert(k.clone()))
            .collect();
        let objects: Vec<String> = objects
            .into_iter()
            .filter(|o| asked_objects.insert(o.clone()))
            .collect();
        if keys.is_empty() && objects.is_empty() {
            break;
        }
        let more = store
            .events_touching(EventQuery {
                intents: Vec::new(),
                keys,
                objects,
            })
            .await?;
        for e in more {
            loaded.insert(e);
        }
    }
    Ok(loaded.into_vec())
}

/// Events gathered once each, in the order first seen, without copying every event to tell
/// them apart (start-up gathers millions): an index from each event's hash to its place,
/// compared in full on a match.
#[derive(Default)]
pub struct EventSet {
    events: Vec<Event>,
    by_hash: foldhash::HashMap<u64, usize>,
    /// Places of events whose hash an earlier, different event has (practically never).
    collided: Vec<usize>,
}

impl EventSet {
    fn hash(e: &Event) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::default().hash_one(e)
    }

    /// Adds `e` unless an equal event is in; says whether it was added.
    pub fn insert(&mut self, e: Event) -> bool {
        let h = Self::hash(&e);
        let at = self.events.len();
        match self.by_hash.entry(h) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(at);
            }
            std::collections::hash_map::Entry::Occupied(o) => {
                if self.events[*o.get()] == e || self.collided.iter().any(|&i| self.events[i] == e)
                {
                    return false;
                }
                self.collided.push(at);
            }
        }
        self.events.push(e);
        true
    }

    pub fn as_slice(&self) -> &[Event] {
        &self.events
    }

    pub fn into_vec(self) -> Vec<Event> {
        self.events
    }
}

impl EventSet {
    /// Room for `more` events without moving the ones in.
    pub fn reserve(&mut self, more: usize) {
        self.events.reserve(more);
    }
}

impl From<Vec<Event>> for EventSet {
    /// In place: the events stay in their vector (a start-up's are hundreds of megabytes), the
    /// repeated ones dropped.
    fn from(mut events: Vec<Event>) -> Self {
        let mut by_hash: foldhash::HashMap<u64, usize> =
            foldhash::HashMap::with_capacity_and_hasher(events.len(), Default::default());
        let mut collided = Vec::new();
        let mut kept = 0;
        for i in 0..events.len() {
            let h = Self::hash(&events[i]);
            let earlier = by_hash.get(&h).copied();
            let repeated = earlier.is_some_and(|at| {
                events[at] == events[i] || collided.iter().any(|&c: &usize| events[c] == events[i])
            });
            if repeated {
                continue;
            }
            events.swap(kept, i);
            match earlier {
                None => {
                    by_hash.insert(h, kept);
                }
                Some(_) => collided.push(kept),
            }
            kept += 1;
        }
        events.truncate(kept);
        EventSet {
            events,
            by_hash,
            collided,
        }
    }
}

/// Settled intents that `routes` reach (and that `here` says are not in memory already), with
/// everything their audit reads ([`evidence`]), and, transitively, the settled intents that
/// evidence's own routes reach: what must be in memory before an event on those routes is
/// judged, so the verdicts are those of a process that never let anything go.
pub async fn reached<S: Store + ?Sized>(
    store: &S,
    routes: Vec<String>,
    here: impl Fn(&str) -> bool,
) -> Result<(Vec<String>, Vec<Event>), StoreError> {
    reached_from(store, Vec::new(), routes, here).await
}

/// [`reached`], starting from `intents` themselves (those `here` says are not in memory) as well
/// as from the owners of `routes`: how a start's open intents are read back behind serving.
pub async fn reached_from<S: Store + ?Sized>(
    store: &S,
    intents: Vec<String>,
    routes: Vec<String>,
    here: impl Fn(&str) -> bool,
) -> Result<(Vec<String>, Vec<Event>), StoreError> {
    reached_within(store, intents, routes, here, EVIDENCE_ROUNDS).await
}

/// The connected groups of `intents` (orphan pseudo-intents included): every intent linked to
/// one of them by a key, an object or a record, transitively (by [`Store::route_owners`], the
/// routes `i:`, `k:`, `o:`), with everything their audit reads. Not cut after a number of
/// rounds as [`reached_from`] is: `reckon reaudit` audits a group only whole, since a verdict
/// judged without an intent that shares its key or object is not the one the engine gives.
/// Sorted ids, events in no particular order.
pub async fn connected<S: Store + ?Sized>(
    store: &S,
    intents: Vec<String>,
) -> Result<(Vec<String>, Vec<Event>), StoreError> {
    reached_within(store, intents, Vec::new(), |_| false, usize::MAX).await
}

/// [`reached_from`] widened at most `rounds` times (each round one question to the store).
async fn reached_within<S: Store + ?Sized>(
    store: &S,
    intents: Vec<String>,
    routes: Vec<String>,
    here: impl Fn(&str) -> bool,
    rounds: usize,
) -> Result<(Vec<String>, Vec<Event>), StoreError> {
    let mut ids: std::collections::BTreeSet<String> = Default::default();
    let mut asked: foldhash::HashSet<String> = Default::default();
    let mut events = EventSet::default();
    let mut routes = routes;
    let mut fresh: Vec<String> = intents.into_iter().filter(|id| !here(id)).collect();
    for _ in 0..rounds {
        if fresh.is_empty() {
            // An intent's own id reaches only itself: one loaded already is not asked about.
            routes.retain(|r| {
                r.strip_prefix("i:").is_none_or(|id| !ids.contains(id)) && asked.insert(r.clone())
            });
            if routes.is_empty() {
                break;
            }
            fresh = store
                .route_owners(std::mem::take(&mut routes))
                .await?
                .into_iter()
                .filter(|id| !here(id) && !ids.contains(id))
                .collect();
            if fresh.is_empty() {
                break;
            }
        }
        ids.extend(fresh.iter().cloned());
        // An orphan record's pseudo-intent is its object's records.
        let (orphans, intents): (Vec<String>, Vec<String>) = std::mem::take(&mut fresh)
            .into_iter()
            .partition(|id| id.starts_with(crate::model::ORPHAN_PREFIX));
        let objects = orphans
            .iter()
            .filter_map(|id| id.strip_prefix(crate::model::ORPHAN_PREFIX))
            .map(str::to_string)
            .collect();
        for e in evidence_within(store, intents, objects, rounds).await? {
            let routes_of = e.routes();
            if events.insert(e) {
                routes.extend(routes_of);
            }
        }
    }
    Ok((ids.into_iter().collect(), events.into_vec()))
}

/// Where the next page of [`Store::expire_events`] starts, after a page whose latest events
/// ran from `first` to `last`: past `last` when the page was not full (everything up to it is
/// done); at `last` when it was (intents of that instant may not all have fit; those done are
/// deleted again, harmlessly), unless the whole page was that one instant (then past it, so
/// the mark always moves).
pub fn expiry_mark(full: bool, first: i64, last: i64) -> i64 {
    if full && first != last {
        last
    } else {
        last.saturating_add(1)
    }
}

/// What [`Store::events_touching`] returns: the attempts and read-backs of `intents`, and the
/// records that name one of `intents`, carry one of `keys` or observe one of `objects`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    pub intents: Vec<String>,
    pub keys: Vec<String>,
    pub objects: Vec<String>,
}

impl EventQuery {
    pub fn is_empty(&self) -> bool {
        self.intents.is_empty() && self.keys.is_empty() && self.objects.is_empty()
    }

    /// How many ids it asks about.
    pub fn len(&self) -> usize {
        self.intents.len() + self.keys.len() + self.objects.len()
    }

    /// The same question in `parts` smaller ones (each list cut alike), to ask at once.
    pub fn split(self, parts: usize) -> Vec<EventQuery> {
        let parts = parts.max(1);
        let cut = |v: Vec<String>| -> Vec<Vec<String>> {
            let size = v.len().div_ceil(parts).max(1);
            let mut out: Vec<Vec<String>> = Vec::with_capacity(parts);
            let mut it = v.into_iter().peekable();
            while it.peek().is_some() {
                out.push(it.by_ref().take(size).collect());
            }
            out.resize_with(parts, Vec::new);
            out
        };
        let (intents, keys, objects) = (cut(self.intents), cut(self.keys), cut(self.objects));
        intents
            .into_iter()
            .zip(keys)
            .zip(objects)
            .map(|((intents, keys), objects)| EventQuery {
                intents,
                keys,
                objects,
            })
            .filter(|q| !q.is_empty())
            .collect()
    }
}

/// The page size rule shared by escalation listings. The API asks for at most
/// [`VerdictFilter::MAX_LIMIT`]; readers of every unresolved escalation ask for
/// [`UNRESOLVED_READ_LIMIT`].
pub fn escalation_limit(limit: usize) -> usize {
    match limit {
        0 => VerdictFilter::DEFAULT_LIMIT,
        n => n.min(UNRESOLVED_READ_LIMIT),
    }
}

/// What the readers of every unresolved escalation (Alertmanager's re-send, the unresolved
/// gauge, the queue page) read at most. An incident opens thousands at once: reading only the
/// newest 1,000 let Alertmanager resolve the older ones' alerts while they were still open.
/// Each unresolved escalation keeps its intent in memory, so this many is already ~170 MB held.
pub const UNRESOLVED_READ_LIMIT: usize = 100_000;

/// Every unresolved escalation (open, then claimed, each newest first), however old; with
/// `resolved`, the newest resolved ones after them and then the newest withdrawn ones (an API
/// page of each).
pub async fn unresolved_escalations<S: Store + ?Sized>(
    store: &S,
    resolved: bool,
) -> Result<Vec<Escalation>, StoreError> {
    // Each status its own read, all at once: on ClickHouse each is a few hundred ms at a year
    // of history, and these are read on every scrape and every load of the queue.
    // `None`: not asked for.
    let recent = resolved.then_some(VerdictFilter::MAX_LIMIT);
    let read = |status, limit: Option<usize>| async move {
        match limit {
            Some(n) => store.list_escalations(Some(status), n).await,
            None => Ok(Vec::new()),
        }
    };
    let (open, claimed, resolved, withdrawn) = tokio::try_join!(
        read(EscalationStatus::Open, Some(UNRESOLVED_READ_LIMIT)),
        read(EscalationStatus::Claimed, Some(UNRESOLVED_READ_LIMIT)),
        read(EscalationStatus::Resolved, recent),
        read(EscalationStatus::Withdrawn, recent),
    )?;
    Ok([open, claimed, resolved, withdrawn].concat())
}

#[cfg(test)]
mod tests {
    use super::{EventQuery, EventSet};
    use crate::model::Event;

    #[test]
    fn a_split_question_keeps_every_id_once() {
        let ids = |p: &str, n: usize| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        let q = EventQuery {
            intents: ids("i", 7),
            keys: ids("k", 2),
            objects: Vec::new(),
        };
        let parts = q.clone().split(3);
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| !p.is_empty()));
        let joined = |f: fn(&EventQuery) -> &Vec<String>| -> Vec<String> {
            parts.iter().flat_map(|p| f(p).iter().cloned()).collect()
        };
        assert_eq!(joined(|p| &p.intents), q.intents);
        assert_eq!(joined(|p| &p.keys), q.keys);
        assert_eq!(q.clone().split(1), std::slice::from_ref(&q));
        assert_eq!(q.clone().split(20).len(), 7, "no empty parts");
    }

    #[test]
    fn an_event_set_keeps_each_event_once_in_order() {
        use crate::test_builders::{attempt, record};
        let a = Event::Attempt(attempt("i1", "issue_refund", 0.0, 1.0));
        let b = Event::Record(record(Some("i1"), "re_1", "succeeded", 2.0));
        let mut set = EventSet::from(vec![a.clone(), b.clone(), a.clone()]);
        assert!(!set.insert(b.clone()));
        let c = Event::Record(record(Some("i1"), "re_1", "failed", 3.0));
        assert!(set.insert(c.clone()));
        assert_eq!(set.into_vec(), [a.clone(), b.clone(), c.clone()]);
        let set = EventSet::from(vec![
            a.clone(),
            a.clone(),
            b.clone(),
            a.clone(),
            c.clone(),
            b.clone(),
        ]);
        assert_eq!(
            set.into_vec(),
            [a, b, c],
            "repeats anywhere, the first kept"
        );
    }
}
