//! The ClickHouse schema: versioned migrations, one `const` of DDL per step.
//!
//! Written for every server from 18.16 (Debian's package) to the current LTS, so only: `String`,
//! `UInt*`, `Float64`, `DateTime`, `Array`, `Nullable`, `Enum8`, `MergeTree` and
//! `ReplacingMergeTree(version)` with `PARTITION BY` / `ORDER BY` (no `LowCardinality`,
//! `DateTime64`, `Map`, `Bool`, `JSON`, TTLs or `IF NOT EXISTS` on columns).
//!
//! Conventions, stable for dashboards and `queries/`:
//! - every instant is `<name>_ns UInt64`, unix nanoseconds, exact; those used for partitioning or
//!   time filters also have `<name>_at DateTime` (whole seconds, UTC) beside them;
//! - booleans are `UInt8` (0/1); closed vocabularies are `Enum8` with codes 1..n in the order of
//!   the Rust enum's `ALL` (a unit test holds the two together);
//! - event tables are `ReplacingMergeTree` ordered by the event identity, so a re-delivered span
//!   or record collapses into one row; until a background merge has run, read with `FINAL`;
//! - verdicts, findings and escalations are `ReplacingMergeTree(version)`: the highest version of
//!   a key is the current row; read with `FINAL` (or `argMax(col, version)`);
//! - the views `reckon_current_verdicts` / `reckon_current_findings` hide versions and
//!   tombstones for ad-hoc SQL.
//!
//! Migrations only ever add. A newer reckon upgrades an older database in place; a database
//! whose `reckon_schema_migrations` has a version this binary does not know is refused.

/// The token a fill statement holds where it reads a table sorted by listing place
/// (`reckon_intent_tally`, `reckon_intent_list`): the migration runs the statement once per
/// range of listing places that holds rows (a day, [`SLICE_NS`]), replacing it with that range,
/// so its joins hold a day's rows, not the store's, and each granule is read once.
pub const SLICE: &str = "{slice}";

/// The width of a slice of listing places ([`SLICE`]): a day, in nanoseconds.
pub const SLICE_NS: u64 = 86_400_000_000_000;

/// One schema step. Each statement is idempotent (`IF NOT EXISTS`) so a step interrupted before
/// its row in `reckon_schema_migrations` was written is simply run again.
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub statements: &'static [&'static str],
}

/// Created before any migration runs; one row per applied step.
pub const CREATE_MIGRATIONS: &str = "
CREATE TABLE IF NOT EXISTS reckon_schema_migrations (
    version UInt32 COMMENT 'schema step applied',
    name String COMMENT 'what the step did',
    applied_at DateTime COMMENT 'when it was applied (UTC)'
) ENGINE = MergeTree ORDER BY version";

/// v1: tool-call attempts (one row per tool span).
pub const V1_ATTEMPTS: &str = "
CREATE TABLE IF NOT EXISTS reckon_attempts (
    trace_id String COMMENT 'span identity, part 1: 32 lowercase hex digits',
    span_id String COMMENT 'span identity, part 2: 16 lowercase hex digits',
    intent_id String COMMENT 'the logical action (reckon.intent.id)',
    tool String COMMENT 'tool name recognised on the span',
    started_at DateTime COMMENT 'span start (UTC seconds): partitioning and time filters',
    started_ns UInt64 COMMENT 'span start, unix nanoseconds',
    ended_ns UInt64 COMMENT 'span end, unix nanoseconds',
    idempotency_key Nullable(String) COMMENT 'reckon.idempotency_key sent with this attempt',
    http_status Nullable(UInt16) COMMENT 'downstream HTTP status, when a response came',
    error_type Nullable(String) COMMENT 'semconv error.type (timeout, 500, ...)',
    span_error UInt8 COMMENT '1 when the span status was ERROR (never evidence of failure alone)',
    object_id Nullable(String) COMMENT 'reckon.downstream.object_id in the response',
    object_status Nullable(String) COMMENT 'reckon.downstream.status in the response',
    reported_outcome Nullable(Enum8('succeeded' = 1, 'failed' = 2, 'pending' = 3, 'unknown' = 4, 'rejected' = 5)) COMMENT 'reckon.outcome: what the executor told the model',
    arguments Nullable(String) COMMENT 'tool-call arguments as JSON text, when content capture was on',
    ingested_ns UInt64 COMMENT 'when reckon wrote the row (unix ns, increasing per reckon process): replay order'
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(started_at)
ORDER BY (intent_id, trace_id, span_id)";

/// v1: read-backs (`reckon.action = read` spans).
pub const V1_READBACKS: &str = "
CREATE TABLE IF NOT EXISTS reckon_readbacks (
    trace_id String COMMENT 'span identity, part 1: 32 lowercase hex digits',
    span_id String COMMENT 'span identity, part 2: 16 lowercase hex digits',
    intent_id String COMMENT 'the intent whose downstream state was read',
    tool String COMMENT 'tool name of the read span',
    read_at DateTime COMMENT 'when the read ran (UTC seconds): partitioning and time filters',
    read_ns UInt64 COMMENT 'when the read ran (span start), unix nanoseconds',
    ended_ns UInt64 COMMENT 'span end, unix nanoseconds',
    object_ids Array(String) COMMENT 'objects the read found; empty: none found',
    reported_outcome Nullable(Enum8('succeeded' = 1, 'failed' = 2, 'pending' = 3, 'unknown' = 4, 'rejected' = 5)) COMMENT 'reckon.outcome the executor concluded from the read',
    ingested_ns UInt64 COMMENT 'when reckon wrote the row (unix ns, increasing per reckon process): replay order'
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(read_at)
ORDER BY (intent_id, trace_id, span_id)";

/// v1: downstream record observations (webhooks, records API, OTLP logs).
pub const V1_RECORDS: &str = "
CREATE TABLE IF NOT EXISTS reckon_records (
    source String COMMENT 'where the observation came from: api, stripe, otlp, ...',
    kind Nullable(String) COMMENT 'downstream object kind (refund, draft): matched to a contract record_kind',
    object_id String COMMENT 'the downstream object id',
    intent_id Nullable(String) COMMENT 'intent the downstream linked the object to, if any',
    idempotency_key Nullable(String) COMMENT 'idempotency key the downstream reported, if any',
    status String COMMENT 'object status at this observation',
    amount Nullable(String) COMMENT 'exact decimal as reported, in amount_unit',
    amount_unit Nullable(Enum8('major' = 1, 'minor' = 2)) COMMENT 'major: currency units (45.00); minor: Stripe-style minor units (4500)',
    amount_major Nullable(Float64) COMMENT 'amount in major units of its currency, for charts (approximate; amount is exact)',
    currency Nullable(String) COMMENT 'currency as reported',
    target Nullable(String) COMMENT 'what the effect applies to (order id, recipient)',
    created_ns Nullable(UInt64) COMMENT 'object creation time by the downstream, unix nanoseconds',
    observed_at DateTime COMMENT 'observation time (UTC seconds): partitioning and time filters',
    observed_ns UInt64 COMMENT 'observation time, unix nanoseconds',
    ingested_ns UInt64 COMMENT 'when reckon wrote the row (unix ns, increasing per reckon process): replay order'
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(observed_at)
ORDER BY (source, object_id, status, observed_ns)";

/// v1: the audit result per intent. Derived data: the engine rewrites every verdict at start-up.
pub const V1_VERDICTS: &str = "
CREATE TABLE IF NOT EXISTS reckon_verdicts (
    intent_id String COMMENT 'the logical action',
    tool Nullable(String) COMMENT 'tool of the intent; NULL for an orphan record',
    contract Nullable(String) COMMENT 'contract applied (contracts/*.toml name)',
    state Enum8('completed' = 1, 'failed_after_execution' = 2, 'pending' = 3, 'failed_before_execution' = 4, 'unknown' = 5) COMMENT 'intent state (DESIGN.md)',
    decision Enum8('none' = 1, 'fix_input' = 2, 'wait' = 3, 'retry_same_key' = 4, 'reconcile' = 5, 'new_intent' = 6, 'escalate' = 7) COMMENT 'what is safe for the executor now',
    idempotency_keys Array(String) COMMENT 'keys the intent was sent under',
    escalation_id Nullable(String) COMMENT 'the escalation holding this intent, if any',
    safe_retry_until_ns Nullable(UInt64) COMMENT 'until when a same-key retry is safe, unix nanoseconds',
    next_change_ns Nullable(UInt64) COMMENT 'when the verdict can next change without a new event, unix nanoseconds',
    first_seen DateTime COMMENT 'first event of the intent (UTC seconds)',
    first_seen_ns UInt64 COMMENT 'first event of the intent, unix nanoseconds',
    last_event DateTime COMMENT 'latest event of the intent (UTC seconds): time filters',
    last_event_ns UInt64 COMMENT 'latest event of the intent, unix nanoseconds',
    audited_ns UInt64 COMMENT 'the now the verdict was computed for, unix nanoseconds',
    attempts UInt32 COMMENT 'number of attempts',
    attempts_rejected UInt32 COMMENT 'attempts classed rejected',
    attempts_conflict UInt32 COMMENT 'attempts classed conflict',
    attempts_succeeded UInt32 COMMENT 'attempts classed succeeded',
    attempts_failed UInt32 COMMENT 'attempts classed failed',
    attempts_recorded UInt32 COMMENT 'attempts classed recorded (non-terminal object)',
    attempts_unknown UInt32 COMMENT 'attempts classed unknown',
    readbacks UInt32 COMMENT 'number of read-backs',
    objects UInt32 COMMENT 'downstream objects linked to the intent',
    findings UInt32 COMMENT 'number of findings',
    finding_kinds Array(Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15)) COMMENT 'distinct finding kinds, sorted',
    doc String COMMENT 'the whole verdict as GET /api/v1/intents/{id} serves it (JSON)',
    deleted UInt8 COMMENT '1: tombstone (the pseudo-intent of an orphan record that now links to an intent)',
    version UInt64 COMMENT 'write version: the highest is current'
) ENGINE = ReplacingMergeTree(version)
ORDER BY intent_id";

/// v1: the escalation queue.
pub const V1_ESCALATIONS: &str = "
CREATE TABLE IF NOT EXISTS reckon_escalations (
    id String COMMENT 'escalation id',
    intent_id String COMMENT 'the intent escalated',
    status Enum8('open' = 1, 'claimed' = 2, 'resolved' = 3) COMMENT 'queue status',
    severity Enum8('medium' = 1, 'high' = 2, 'critical' = 3) COMMENT 'most severe finding it holds',
    opened_at DateTime COMMENT 'when it was opened (UTC seconds)',
    opened_ns UInt64 COMMENT 'when it was opened, unix nanoseconds',
    finding_kinds Array(Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15)) COMMENT 'findings that opened or joined it (kind), parallel to finding_subjects',
    finding_subjects Array(String) COMMENT 'what each finding is about (object id, key, span id)',
    claimed_by Nullable(String) COMMENT 'who claimed it',
    claimed_at Nullable(DateTime) COMMENT 'when it was claimed (UTC seconds)',
    claimed_ns Nullable(UInt64) COMMENT 'when it was claimed, unix nanoseconds',
    resolved_by Nullable(String) COMMENT 'who resolved it',
    resolved_at Nullable(DateTime) COMMENT 'when it was resolved (UTC seconds)',
    resolved_ns Nullable(UInt64) COMMENT 'when it was resolved, unix nanoseconds',
    resolution Nullable(String) COMMENT 'the resolution given',
    note Nullable(String) COMMENT 'free-text note',
    version UInt64 COMMENT 'bumped on every change: the highest is current'
) ENGINE = ReplacingMergeTree(version)
ORDER BY id";

/// v2: one row per finding, for reports and dashboards without JSON scans. A verdict write
/// writes all its findings with `verdict_version` = the verdict row's `version`; a finding is
/// current while that equals the intent's current verdict version (findings a later verdict
/// dropped keep an older `verdict_version`). Use `reckon_current_findings` for ad-hoc SQL.
pub const V2_FINDINGS: &str = "
CREATE TABLE IF NOT EXISTS reckon_findings (
    intent_id String COMMENT 'the intent the finding is about',
    kind Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15) COMMENT 'finding kind (DESIGN.md catalogue)',
    severity Enum8('medium' = 1, 'high' = 2, 'critical' = 3) COMMENT 'finding severity; high and critical escalate',
    at DateTime COMMENT 'when the finding became true (UTC seconds)',
    at_ns UInt64 COMMENT 'when the finding became true, unix nanoseconds',
    subject String COMMENT 'what it is about: an object id, a key, a span id',
    detail String COMMENT 'human-readable explanation',
    tool Nullable(String) COMMENT 'tool of the intent',
    verdict_version UInt64 COMMENT 'reckon_verdicts.version this row was written with'
) ENGINE = ReplacingMergeTree(verdict_version)
ORDER BY (intent_id, kind, subject)";

/// v2: views for ad-hoc SQL and dashboards. The filter sits outside the `FINAL` subquery so no
/// server version evaluates it before versions are collapsed.
pub const V2_CURRENT_VERDICTS: &str = "
CREATE VIEW IF NOT EXISTS reckon_current_verdicts AS
SELECT * FROM (SELECT * FROM reckon_verdicts FINAL) WHERE deleted = 0";

pub const V2_CURRENT_FINDINGS: &str = "
CREATE VIEW IF NOT EXISTS reckon_current_findings AS
SELECT * FROM (SELECT * FROM reckon_findings FINAL)
WHERE (intent_id, verdict_version) IN
    (SELECT intent_id, version FROM (SELECT intent_id, version, deleted FROM reckon_verdicts FINAL) WHERE deleted = 0)";

/// v3: the finding `key_shared_across_intents` (adding an enum value is a metadata change on
/// every supported server), and escalations keep each finding's time and explanation as it read
/// when it joined, plus the evidence a resolution covered.
pub const V3_VERDICT_FINDING_KINDS: &str = "
ALTER TABLE reckon_verdicts MODIFY COLUMN finding_kinds Array(Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15, 'key_shared_across_intents' = 16))";
pub const V3_ESCALATION_FINDING_KINDS: &str = "
ALTER TABLE reckon_escalations MODIFY COLUMN finding_kinds Array(Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15, 'key_shared_across_intents' = 16))";
pub const V3_FINDING_KIND: &str = "
ALTER TABLE reckon_findings MODIFY COLUMN kind Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15, 'key_shared_across_intents' = 16)";
pub const V3_ESCALATION_EVIDENCE: &str = "
ALTER TABLE reckon_escalations
    ADD COLUMN finding_ns Array(UInt64) COMMENT 'when each finding became true, parallel to finding_kinds',
    ADD COLUMN finding_details Array(String) COMMENT 'each finding explained as it read when it joined',
    ADD COLUMN covered Array(String) COMMENT 'evidence ids the resolution covered'";

/// Current servers keep a view's column types from when it was created: recreated after the
/// enums grow, the views see the new value instead of failing on it.
pub const V3_DROP_CURRENT_FINDINGS: &str = "DROP TABLE IF EXISTS reckon_current_findings";
pub const V3_DROP_CURRENT_VERDICTS: &str = "DROP TABLE IF EXISTS reckon_current_verdicts";

/// v4: the notification outbox: one row per notification to one `[[notify]]` target, inserted
/// with (before) the escalation change it announces. `ReplacingMergeTree(version)` keeps an
/// item's furthest state: `version` is its attempts + 1 while pending, and the two highest
/// values once given up or delivered, so no late write brings a delivered item back. Not
/// partitioned: every version of an id must collapse, and the table stays small.
pub const V4_OUTBOX: &str = "
CREATE TABLE IF NOT EXISTS reckon_outbox (
    id String COMMENT 'delivery id {escalation_id}:{version}:{target}: the Reckon-Delivery header, the same on every retry',
    target String COMMENT 'the [[notify]] target it goes to (its name)',
    escalation_id String COMMENT 'the escalation the notification is about',
    escalation_version UInt64 COMMENT 'the escalation version it announces: delivered in this order per target',
    event String COMMENT 'escalation.opened, escalation.updated or escalation.resolved',
    body String COMMENT 'the payload as it was at the change (JSON): webhook body, or the Alertmanager alert',
    created_at DateTime COMMENT 'when it was enqueued (UTC seconds): time filters',
    created_ns UInt64 COMMENT 'when it was enqueued, unix nanoseconds: retried for 24 h from here',
    state Enum8('pending' = 1, 'delivered' = 2, 'expired' = 3) COMMENT 'pending until the target answered 2xx; expired when given up',
    attempts UInt32 COMMENT 'delivery attempts made',
    next_ns UInt64 COMMENT 'when the next attempt is due, unix nanoseconds',
    last_error Nullable(String) COMMENT 'what the last failed attempt said',
    version UInt64 COMMENT 'attempts + 1 while pending; 18446744073709551614 expired, 18446744073709551615 delivered: the highest is current'
) ENGINE = ReplacingMergeTree(version)
ORDER BY (target, id)";

/// v5: the version of the contract each verdict was computed under (`Contract::version`, a
/// content hash). Empty with no contract, and in rows written before v5 (their documents do not
/// say; the next write of the intent's verdict does).
pub const V5_VERDICT_CONTRACT_VERSION: &str = "
ALTER TABLE reckon_verdicts
    ADD COLUMN contract_version String DEFAULT '' COMMENT 'version of the contract applied (a hash of its content); empty with no contract'";

/// v6: what start-up needs so its time does not grow with history (DESIGN.md "Memory and
/// history"): which verdicts are settled (the others are loaded; `settled` holds
/// [`crate::model::Rest`] as a number: v8 says so in its comment), the routes by which later
/// evidence reaches a settled intent, and the engine's checkpoint (events with `ingested_ns`
/// from it on are read back). The verdicts view is recreated so current servers show the new
/// column.
pub const V6_VERDICT_SETTLED: &str = "
ALTER TABLE reckon_verdicts ADD COLUMN settled UInt8 DEFAULT 0 COMMENT '1: terminal, no deadline, no open escalation: out of memory until evidence touches it'";
pub const V6_ROUTES: &str = "
CREATE TABLE IF NOT EXISTS reckon_routes (
    route String COMMENT 'i:{intent_id}, k:{idempotency key} or o:{object id}: how later evidence reaches the intent',
    intent_id String COMMENT 'a settled intent the route reaches'
) ENGINE = ReplacingMergeTree
ORDER BY (route, intent_id)";
pub const V6_META: &str = "
CREATE TABLE IF NOT EXISTS reckon_meta (
    name String COMMENT 'checkpoint: every event ingested before value has its verdicts written',
    value UInt64 COMMENT 'unix nanoseconds; the highest is current'
) ENGINE = ReplacingMergeTree(value)
ORDER BY name";

/// v7: each verdict's fingerprint ([`crate::model::Verdict::fingerprint`]), read with the
/// unsettled intents at start-up so the verdicts a start recomputes unchanged are not written
/// again. The verdicts view is recreated so current servers show the new column.
pub const V7_VERDICT_FINGERPRINT: &str = "
ALTER TABLE reckon_verdicts ADD COLUMN fingerprint UInt64 DEFAULT 0 COMMENT 'a hash of the verdict but for audited_at: a start writes only verdicts whose hash changed; 0 before v7'";

/// v8: the `settled` column holds [`crate::model::Rest`] since quiet intents and orphans past
/// their grace leave memory too; its comment said only what 1 means. 18.16 drops the comment of
/// an `ADD COLUMN`, so the columns added since v5 get theirs here too.
pub const V8_SETTLED_COMMENT: &str = "
ALTER TABLE reckon_verdicts COMMENT COLUMN settled '0: open (loaded at start); 1: settled (terminal, no deadline, no open escalation); 2: quiet (unknown or pending with no deadline and no open escalation, or an orphan record past its grace). 1 and 2 are out of memory until evidence touches them; retention expires the raw events of 1 only'";
pub const V8_CONTRACT_VERSION_COMMENT: &str = "
ALTER TABLE reckon_verdicts COMMENT COLUMN contract_version 'version of the contract applied (a hash of its content); empty with no contract'";
pub const V8_FINGERPRINT_COMMENT: &str = "
ALTER TABLE reckon_verdicts COMMENT COLUMN fingerprint 'a hash of the verdict but for audited_at: a start writes only verdicts whose hash changed; 0 before v7'";

/// v9: the escalation status `withdrawn` (adding an enum value is a metadata change on every
/// supported server), and the take-overs of escalations someone else held (`"override": true`),
/// as parallel arrays: who, when, with which action, from whom.
pub const V9_ESCALATION_STATUS: &str = "
ALTER TABLE reckon_escalations MODIFY COLUMN status Enum8('open' = 1, 'claimed' = 2, 'resolved' = 3, 'withdrawn' = 4)";
pub const V9_ESCALATION_OVERRIDES: &str = "
ALTER TABLE reckon_escalations
    ADD COLUMN override_by Array(String),
    ADD COLUMN override_ns Array(UInt64),
    ADD COLUMN override_action Array(Enum8('claim' = 1, 'resolve' = 2)),
    ADD COLUMN override_held_by Array(String)";
pub const V9_STATUS_COMMENT: &str = "
ALTER TABLE reckon_escalations COMMENT COLUMN status 'queue status; withdrawn: late evidence showed its findings never held before anyone claimed or resolved it'";
pub const V9_OVERRIDE_BY_COMMENT: &str = "
ALTER TABLE reckon_escalations COMMENT COLUMN override_by 'who claimed or resolved it while someone else held it (override), oldest first'";
pub const V9_OVERRIDE_NS_COMMENT: &str = "
ALTER TABLE reckon_escalations COMMENT COLUMN override_ns 'when each override happened, unix nanoseconds, parallel to override_by'";
pub const V9_OVERRIDE_ACTION_COMMENT: &str = "
ALTER TABLE reckon_escalations COMMENT COLUMN override_action 'the action each override was part of, parallel to override_by'";
pub const V9_OVERRIDE_HELD_BY_COMMENT: &str = "
ALTER TABLE reckon_escalations COMMENT COLUMN override_held_by 'who held it (claimed_by) when each override took it over, parallel to override_by'";

/// v9: what an intent is looked up by (`GET /api/v1/intents?target=&object_id=&key=`): one
/// row per (kind, value, intent) of `crate::store::lookups_of`, written with every verdict
/// write and stamped with its version, as findings are: a row is current while its
/// `verdict_version` is the intent's current verdict version. Sorted by (kind, value), so a
/// lookup reads a range of the primary index, and the verdicts it names are read by theirs.
pub const V9_INTENT_LOOKUP: &str = "
CREATE TABLE IF NOT EXISTS reckon_intent_lookup (
    kind Enum8('target' = 1, 'object' = 2, 'key' = 3) COMMENT 'target: the intent parameter target or an object target (an order id); object: a downstream object linked to it or named by its responses; key: an idempotency key it sent',
    value String COMMENT 'the order id, object id or key',
    intent_id String COMMENT 'the intent it finds',
    verdict_version UInt64 COMMENT 'reckon_verdicts.version this row was written with: current while it is the intent current version'
) ENGINE = ReplacingMergeTree(verdict_version)
ORDER BY (kind, value, intent_id)";

/// v9's backfill from the stored verdicts: their keys (a column), and from their documents the
/// objects their attempts named or they hold (`"object_id":"..."`) and those objects' targets
/// (`"target":"..."`). 18.16 has no JSON parser but these regular expressions over reckon's own
/// compact JSON; an id with a quote or backslash in it is left out (written right with the
/// intent's next verdict).
pub const V9_LOOKUP_KEYS: &str = "
INSERT INTO reckon_intent_lookup (kind, value, intent_id, verdict_version)
SELECT CAST('key' AS Enum8('target' = 1, 'object' = 2, 'key' = 3)), k, intent_id, version
FROM (SELECT intent_id, version, idempotency_keys, deleted FROM reckon_verdicts FINAL)
ARRAY JOIN idempotency_keys AS k WHERE deleted = 0";
pub const V9_LOOKUP_OBJECTS: &str = r#"
INSERT INTO reckon_intent_lookup (kind, value, intent_id, verdict_version)
SELECT CAST('object' AS Enum8('target' = 1, 'object' = 2, 'key' = 3)), o, intent_id, version
FROM (SELECT intent_id, version, doc, deleted FROM reckon_verdicts FINAL)
ARRAY JOIN extractAll(doc, '"object_id":"([^"\\\\]*)"') AS o WHERE deleted = 0"#;
pub const V9_LOOKUP_TARGETS: &str = r#"
INSERT INTO reckon_intent_lookup (kind, value, intent_id, verdict_version)
SELECT CAST('target' AS Enum8('target' = 1, 'object' = 2, 'key' = 3)), t, intent_id, version
FROM (SELECT intent_id, version, doc, deleted FROM reckon_verdicts FINAL)
ARRAY JOIN extractAll(doc, '"target":"([^"\\\\]*)"') AS t WHERE deleted = 0"#;

/// v10: which intent each stored span belongs to, sorted by the span's identity, so a span
/// re-sent under another intent id is found (the event tables sort by intent first, so a lookup
/// by `(trace_id, span_id)` alone would read them whole). Written with every attempt and
/// read-back, before them; small granules because it is only ever read a few keys at a time.
/// The backfill streams the event tables as they are (no `DISTINCT`, which would hold every
/// identity in memory): copies collapse by the sorting key.
pub const V10_SPAN_OWNERS: &str = "
CREATE TABLE IF NOT EXISTS reckon_span_owners (
    trace_id String COMMENT 'span identity, part 1',
    span_id String COMMENT 'span identity, part 2',
    readback UInt8 COMMENT '1: a read-back span (reckon_readbacks), 0: an attempt (reckon_attempts); separate identity spaces',
    intent_id String COMMENT 'the intent the stored span names: its row is (intent_id, trace_id, span_id) in its table'
) ENGINE = ReplacingMergeTree
ORDER BY (trace_id, span_id, readback, intent_id)
SETTINGS index_granularity = 1024";
pub const V10_SPAN_OWNERS_ATTEMPTS: &str = "
INSERT INTO reckon_span_owners (trace_id, span_id, readback, intent_id)
SELECT trace_id, span_id, 0, intent_id FROM reckon_attempts";
pub const V10_SPAN_OWNERS_READBACKS: &str = "
INSERT INTO reckon_span_owners (trace_id, span_id, readback, intent_id)
SELECT trace_id, span_id, 1, intent_id FROM reckon_readbacks";

/// v11: the listings' fixed places (`Verdict::listed_at`, `Escalation::listed_at`: pages go
/// newest first by `(listed, id)`), and a table per listing sorted by it, partitioned by month
/// of it, so a page is a range of the primary index of the months it covers instead of a
/// `FINAL` over the whole table. Rows from before take their place from the time they hold
/// (a column `DEFAULT`, so nothing is rewritten); the listing tables are filled from the
/// current version of each row. The intents listing keeps the page's columns, the filters'
/// and the verdict document, in small granules (256 rows): a page reads the documents of its own
/// range.
/// It is the only copy of the document from v11 on: `reckon_verdicts.doc` is written empty.
/// The escalations listing is a copy of `reckon_escalations` (the same rows, written beside).
/// 18.16 drops the comment of an `ADD COLUMN`; current servers keep it.
pub const V11_VERDICT_LISTED: &str = "
ALTER TABLE reckon_verdicts
    ADD COLUMN listed_ns UInt64 DEFAULT first_seen_ns COMMENT 'where the intent is listed (unix ns): first_seen as its first verdict had it, never changed'";
pub const V11_ESCALATION_LISTED: &str = "
ALTER TABLE reckon_escalations
    ADD COLUMN listed_at DateTime DEFAULT opened_at COMMENT 'where the escalation is listed (UTC seconds): partitioning',
    ADD COLUMN listed_ns UInt64 DEFAULT opened_ns COMMENT 'where the escalation is listed (unix ns): opened_ns when it was created, never changed'";
pub const V11_INTENT_LIST: &str = "
CREATE TABLE IF NOT EXISTS reckon_intent_list (
    listed_at DateTime COMMENT 'where the intent is listed (UTC seconds): partitioning',
    listed_ns UInt64 COMMENT 'where the intent is listed, unix nanoseconds: reckon_verdicts.listed_ns',
    intent_id String COMMENT 'the logical action',
    tool Nullable(String) COMMENT 'tool of the intent; NULL for an orphan record',
    state Enum8('completed' = 1, 'failed_after_execution' = 2, 'pending' = 3, 'failed_before_execution' = 4, 'unknown' = 5) COMMENT 'intent state',
    last_event_ns UInt64 COMMENT 'latest event of the intent, unix nanoseconds',
    finding_kinds Array(Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15, 'key_shared_across_intents' = 16)) COMMENT 'distinct finding kinds, sorted',
    doc String COMMENT 'the verdict document, as reckon_verdicts.doc',
    deleted UInt8 COMMENT '1: tombstone',
    version UInt64 COMMENT 'reckon_verdicts.version of the same write: the highest is current'
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(listed_at)
ORDER BY (listed_ns, intent_id)
SETTINGS index_granularity = 256";
pub const V11_INTENT_LIST_FILL: &str = "
INSERT INTO reckon_intent_list
    (listed_at, listed_ns, intent_id, tool, state, last_event_ns, finding_kinds, doc, deleted, version)
SELECT first_seen, first_seen_ns, intent_id, tool, state, last_event_ns, finding_kinds, doc, deleted, version
FROM reckon_verdicts FINAL";
pub const V11_ESCALATION_LIST: &str = "
CREATE TABLE IF NOT EXISTS reckon_escalation_list AS reckon_escalations
ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(listed_at)
ORDER BY (listed_ns, id)
SETTINGS index_granularity = 256";
pub const V11_ESCALATION_LIST_FILL: &str = "
INSERT INTO reckon_escalation_list SELECT * FROM reckon_escalations FINAL";

/// v12: the listings' totals without reading the listings. `reckon_listing_counts` holds, per
/// listing and hour of listing places, how many rows of each pair of dimensions there are (for
/// intents state and tool, in all (`finding` 0) and with a finding of each kind (its code); for
/// escalations status and severity), as counted at a time: recounted from the hour's rows (a
/// range of the listing's primary index) by a background task whenever `reckon_listing_hours`
/// says the hour was written at or after that time. That table is filled by a materialized view
/// on every INSERT into each listing, stamped with the server's clock (one clock whichever
/// instance wrote, and the escalations' versions are per escalation, not an order of writes; a
/// retried INSERT changes nothing). A total is then the counts of the hours counted since their
/// last write plus a count of the listing's rows in the others (`counts.rs`); exact either way.
/// Hours are UTC hours whatever the server's time zone.
pub const V12_LISTING_HOURS: &str = "
CREATE TABLE IF NOT EXISTS reckon_listing_hours (
    listing Enum8('intents' = 1, 'escalations' = 2) COMMENT 'reckon_intent_list or reckon_escalation_list',
    hour DateTime COMMENT 'an hour of listing places (UTC): listed_at rounded down',
    written DateTime COMMENT 'when the listing was last written in that hour (the server clock)'
) ENGINE = ReplacingMergeTree(written)
ORDER BY (listing, hour)";
pub const V12_INTENT_HOURS_VIEW: &str = "
CREATE MATERIALIZED VIEW IF NOT EXISTS reckon_intent_list_hours_mv TO reckon_listing_hours AS
SELECT CAST('intents' AS Enum8('intents' = 1, 'escalations' = 2)) AS listing,
    toDateTime(intDiv(toUInt32(listed_at), 3600) * 3600) AS hour, max(now()) AS written
FROM reckon_intent_list GROUP BY hour";
pub const V12_ESCALATION_HOURS_VIEW: &str = "
CREATE MATERIALIZED VIEW IF NOT EXISTS reckon_escalation_list_hours_mv TO reckon_listing_hours AS
SELECT CAST('escalations' AS Enum8('intents' = 1, 'escalations' = 2)) AS listing,
    toDateTime(intDiv(toUInt32(listed_at), 3600) * 3600) AS hour, max(now()) AS written
FROM reckon_escalation_list GROUP BY hour";
pub const V12_INTENT_HOURS_FILL: &str = "
INSERT INTO reckon_listing_hours (listing, hour, written)
SELECT CAST('intents' AS Enum8('intents' = 1, 'escalations' = 2)),
    toDateTime(intDiv(toUInt32(listed_at), 3600) * 3600) AS hour, max(now())
FROM reckon_intent_list GROUP BY hour";
pub const V12_ESCALATION_HOURS_FILL: &str = "
INSERT INTO reckon_listing_hours (listing, hour, written)
SELECT CAST('escalations' AS Enum8('intents' = 1, 'escalations' = 2)),
    toDateTime(intDiv(toUInt32(listed_at), 3600) * 3600) AS hour, max(now())
FROM reckon_escalation_list GROUP BY hour";
pub const V12_LISTING_COUNTS: &str = "
CREATE TABLE IF NOT EXISTS reckon_listing_counts (
    listing Enum8('intents' = 1, 'escalations' = 2) COMMENT 'which listing',
    hour DateTime COMMENT 'an hour of listing places (UTC), as in reckon_listing_hours',
    dim1 String COMMENT 'intents: the state; escalations: the status',
    dim2 String COMMENT 'intents: the tool (empty for orphan records); escalations: the severity',
    finding UInt8 COMMENT 'intents: 0 every intent, n those with a finding of the kind whose finding_kinds code is n; escalations: 0',
    n UInt64 COMMENT 'how many rows',
    counted DateTime COMMENT 'when the count began (the server clock): the latest is current; stale once the hour is written at or after it'
) ENGINE = ReplacingMergeTree(counted)
ORDER BY (listing, hour, dim1, dim2, finding)";

/// v13: the audit report without reading every verdict (`report.rs`). The report covers the
/// intents whose latest event is at or after `since`. Every such intent is listed at or after
/// the hour of `since`, or listed before it and active since: so the report is the hourly
/// counts of `reckon_intent_tally` (by listing place, recounted like the listings' counts) for
/// the hours after `since`'s, plus the current rows of that hour and of the intents
/// `reckon_intent_activity` names, read by key. `reckon_intent_tally` is written beside every
/// verdict row with what the report counts of it; `reckon_intent_activity` holds the versions
/// whose latest event lies in a later hour than their listing place, by that event.
pub const V13_INTENT_TALLY: &str = "
CREATE TABLE IF NOT EXISTS reckon_intent_tally (
    listed_at DateTime COMMENT 'where the intent is listed (UTC seconds): partitioning',
    listed_ns UInt64 COMMENT 'where the intent is listed, unix nanoseconds: reckon_verdicts.listed_ns',
    intent_id String COMMENT 'the logical action',
    tool Nullable(String) COMMENT 'tool of the intent; NULL for an orphan record',
    state Enum8('completed' = 1, 'failed_after_execution' = 2, 'pending' = 3, 'failed_before_execution' = 4, 'unknown' = 5) COMMENT 'intent state',
    decision Enum8('none' = 1, 'fix_input' = 2, 'wait' = 3, 'retry_same_key' = 4, 'reconcile' = 5, 'new_intent' = 6, 'escalate' = 7) COMMENT 'what is safe for the executor now',
    last_event_ns UInt64 COMMENT 'latest event of the intent, unix nanoseconds',
    attempts UInt32 COMMENT 'number of attempts',
    attempts_rejected UInt32 COMMENT 'attempts classed rejected',
    attempts_conflict UInt32 COMMENT 'attempts classed conflict',
    attempts_succeeded UInt32 COMMENT 'attempts classed succeeded',
    attempts_failed UInt32 COMMENT 'attempts classed failed',
    attempts_recorded UInt32 COMMENT 'attempts classed recorded',
    attempts_unknown UInt32 COMMENT 'attempts classed unknown',
    finding_kind Array(Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15, 'key_shared_across_intents' = 16)) COMMENT 'the kind of each finding (repeats kept), parallel to finding_severity',
    finding_severity Array(Enum8('medium' = 1, 'high' = 2, 'critical' = 3)) COMMENT 'the severity of each finding',
    deleted UInt8 COMMENT '1: tombstone',
    version UInt64 COMMENT 'reckon_verdicts.version of the same write: the highest is current'
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(listed_at)
ORDER BY (listed_ns, intent_id)";
/// From the current verdicts and their findings (the findings' `FINAL` keeps each finding's
/// latest row: it is current when its version is the verdict's).
pub const V13_INTENT_TALLY_FILL: &str = "
INSERT INTO reckon_intent_tally
    (listed_at, listed_ns, intent_id, tool, state, decision, last_event_ns, attempts,
     attempts_rejected, attempts_conflict, attempts_succeeded, attempts_failed, attempts_recorded, attempts_unknown, finding_kind, finding_severity, deleted, version)
SELECT toDateTime(intDiv(listed_ns, 1000000000)), listed_ns, intent_id, tool, state, decision,
    last_event_ns, attempts, attempts_rejected, attempts_conflict, attempts_succeeded, attempts_failed, attempts_recorded, attempts_unknown, kinds, severities, deleted, version
FROM (SELECT intent_id, tool, state, decision, last_event_ns, attempts, attempts_rejected, attempts_conflict, attempts_succeeded, attempts_failed, attempts_recorded, attempts_unknown,
          deleted, version, listed_ns FROM reckon_verdicts FINAL) AS v
ANY LEFT JOIN
    (SELECT intent_id, verdict_version AS version, groupArray(kind) AS kinds,
         groupArray(severity) AS severities
     FROM reckon_findings FINAL GROUP BY intent_id, verdict_version) AS f
USING (intent_id, version)";
pub const V13_INTENT_ACTIVITY: &str = "
CREATE TABLE IF NOT EXISTS reckon_intent_activity (
    last_event_ns UInt64 COMMENT 'latest event of the intent in this version, unix nanoseconds: in a later hour than listed_ns',
    intent_id String COMMENT 'the logical action',
    listed_ns UInt64 COMMENT 'where the intent is listed, unix nanoseconds: its key in reckon_intent_tally with intent_id'
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(toDateTime(intDiv(last_event_ns, 1000000000)))
ORDER BY (last_event_ns, intent_id)";
pub const V13_INTENT_ACTIVITY_FILL: &str = "
INSERT INTO reckon_intent_activity (last_event_ns, intent_id, listed_ns)
SELECT last_event_ns, intent_id, listed_ns
FROM (SELECT intent_id, last_event_ns, listed_ns, deleted FROM reckon_verdicts FINAL)
WHERE deleted = 0 AND intDiv(last_event_ns, 3600000000000) > intDiv(listed_ns, 3600000000000)";
/// Hours of `reckon_intent_tally` join the listings' in `reckon_listing_hours` (adding an enum
/// value rewrites no data). 18.16 wants a view's columns to be of its table's types exactly, so
/// the listings' views are made again with the new enum. (A listing written by another
/// instance in between would leave its hour unstamped: migrations run before an instance
/// writes, and one store has one writing instance until the Scale-out work.)
pub const V13_DROP_INTENT_HOURS_VIEW: &str = "
DROP TABLE IF EXISTS reckon_intent_list_hours_mv";
pub const V13_DROP_ESCALATION_HOURS_VIEW: &str = "
DROP TABLE IF EXISTS reckon_escalation_list_hours_mv";
pub const V13_HOURS_LISTING: &str = "
ALTER TABLE reckon_listing_hours
    MODIFY COLUMN listing Enum8('intents' = 1, 'escalations' = 2, 'report' = 3) COMMENT 'reckon_intent_list, reckon_escalation_list or reckon_intent_tally'";
pub const V13_INTENT_HOURS_VIEW: &str = "
CREATE MATERIALIZED VIEW IF NOT EXISTS reckon_intent_list_hours_mv TO reckon_listing_hours AS
SELECT CAST('intents' AS Enum8('intents' = 1, 'escalations' = 2, 'report' = 3)) AS listing,
    toDateTime(intDiv(toUInt32(listed_at), 3600) * 3600) AS hour, max(now()) AS written
FROM reckon_intent_list GROUP BY hour";
pub const V13_ESCALATION_HOURS_VIEW: &str = "
CREATE MATERIALIZED VIEW IF NOT EXISTS reckon_escalation_list_hours_mv TO reckon_listing_hours AS
SELECT CAST('escalations' AS Enum8('intents' = 1, 'escalations' = 2, 'report' = 3)) AS listing,
    toDateTime(intDiv(toUInt32(listed_at), 3600) * 3600) AS hour, max(now()) AS written
FROM reckon_escalation_list GROUP BY hour";
pub const V13_TALLY_HOURS_VIEW: &str = "
CREATE MATERIALIZED VIEW IF NOT EXISTS reckon_intent_tally_hours_mv TO reckon_listing_hours AS
SELECT CAST('report' AS Enum8('intents' = 1, 'escalations' = 2, 'report' = 3)) AS listing,
    toDateTime(intDiv(toUInt32(listed_at), 3600) * 3600) AS hour, max(now()) AS written
FROM reckon_intent_tally GROUP BY hour";
pub const V13_TALLY_HOURS_FILL: &str = "
INSERT INTO reckon_listing_hours (listing, hour, written)
SELECT CAST('report' AS Enum8('intents' = 1, 'escalations' = 2, 'report' = 3)),
    toDateTime(intDiv(toUInt32(listed_at), 3600) * 3600) AS hour, max(now())
FROM reckon_intent_tally GROUP BY hour";
/// The report's counts per hour of listing places, as `reckon_listing_counts` (`counted`: the
/// latest is current; recounted whenever the hour is written at or after it).
pub const V13_REPORT_COUNTS: &str = "
CREATE TABLE IF NOT EXISTS reckon_report_counts (
    hour DateTime COMMENT 'an hour of listing places (UTC)',
    tool String COMMENT 'the tool (empty for orphan records)',
    state Enum8('completed' = 1, 'failed_after_execution' = 2, 'pending' = 3, 'failed_before_execution' = 4, 'unknown' = 5) COMMENT 'intent state',
    decision Enum8('none' = 1, 'fix_input' = 2, 'wait' = 3, 'retry_same_key' = 4, 'reconcile' = 5, 'new_intent' = 6, 'escalate' = 7) COMMENT 'the decision',
    intents UInt64 COMMENT 'how many intents',
    attempts UInt64 COMMENT 'their attempts',
    attempts_rejected UInt64 COMMENT 'attempts classed rejected',
    attempts_conflict UInt64 COMMENT 'attempts classed conflict',
    attempts_succeeded UInt64 COMMENT 'attempts classed succeeded',
    attempts_failed UInt64 COMMENT 'attempts classed failed',
    attempts_recorded UInt64 COMMENT 'attempts classed recorded',
    attempts_unknown UInt64 COMMENT 'attempts classed unknown',
    counted DateTime COMMENT 'when the count began (the server clock): the latest is current'
) ENGINE = ReplacingMergeTree(counted)
ORDER BY (hour, tool, state, decision)";
pub const V13_REPORT_FINDINGS: &str = "
CREATE TABLE IF NOT EXISTS reckon_report_findings (
    hour DateTime COMMENT 'an hour of listing places (UTC)',
    tool String COMMENT 'the tool (empty for orphan records)',
    kind Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15, 'key_shared_across_intents' = 16) COMMENT 'finding kind',
    severity Enum8('medium' = 1, 'high' = 2, 'critical' = 3) COMMENT 'finding severity',
    findings UInt64 COMMENT 'how many findings',
    intents UInt64 COMMENT 'how many intents have one',
    counted DateTime COMMENT 'when the count began (the server clock): the latest is current'
) ENGINE = ReplacingMergeTree(counted)
ORDER BY (hour, tool, kind, severity)";

/// v14: each escalation's tool (`Escalation::tool`, its intent's), so the escalation listing
/// filters by tool on its own rows, not through `FINAL` over every verdict. The fill writes each
/// escalation's current row again at the same version with its intent's tool: of equal
/// versions `ReplacingMergeTree` keeps the last inserted (merges and `FINAL` alike).
pub const V14_ESCALATION_TOOL: &str = "
ALTER TABLE reckon_escalations
    ADD COLUMN tool Nullable(String) COMMENT 'the tool of its intent; NULL for an orphan record'";
pub const V14_ESCALATION_LIST_TOOL: &str = "
ALTER TABLE reckon_escalation_list
    ADD COLUMN tool Nullable(String) COMMENT 'the tool of its intent; NULL for an orphan record'";
pub const V14_ESCALATION_TOOL_FILL: &str = "
INSERT INTO reckon_escalations (
    id, intent_id, status, severity, opened_at, opened_ns, finding_kinds, finding_subjects,
    claimed_by, claimed_at, claimed_ns, resolved_by, resolved_at, resolved_ns, resolution, note,
    version, finding_ns, finding_details, covered, override_by, override_ns, override_action,
    override_held_by, listed_at, listed_ns, tool)
SELECT id, intent_id, status, severity, opened_at, opened_ns, finding_kinds, finding_subjects,
    claimed_by, claimed_at, claimed_ns, resolved_by, resolved_at, resolved_ns, resolution, note,
    version, finding_ns, finding_details, covered, override_by, override_ns, override_action,
    override_held_by, listed_at, listed_ns, verdict_tool
FROM (SELECT id, intent_id, status, severity, opened_at, opened_ns, finding_kinds, finding_subjects,
    claimed_by, claimed_at, claimed_ns, resolved_by, resolved_at, resolved_ns, resolution, note,
    version, finding_ns, finding_details, covered, override_by, override_ns, override_action,
    override_held_by, listed_at, listed_ns FROM reckon_escalations FINAL) AS e
ANY LEFT JOIN
    (SELECT intent_id, tool AS verdict_tool
     FROM (SELECT intent_id, tool, deleted FROM reckon_verdicts FINAL) AS vv WHERE deleted = 0) AS v
USING intent_id";
pub const V14_ESCALATION_LIST_TOOL_FILL: &str = "
INSERT INTO reckon_escalation_list (
    id, intent_id, status, severity, opened_at, opened_ns, finding_kinds, finding_subjects,
    claimed_by, claimed_at, claimed_ns, resolved_by, resolved_at, resolved_ns, resolution, note,
    version, finding_ns, finding_details, covered, override_by, override_ns, override_action,
    override_held_by, listed_at, listed_ns, tool)
SELECT id, intent_id, status, severity, opened_at, opened_ns, finding_kinds, finding_subjects,
    claimed_by, claimed_at, claimed_ns, resolved_by, resolved_at, resolved_ns, resolution, note,
    version, finding_ns, finding_details, covered, override_by, override_ns, override_action,
    override_held_by, listed_at, listed_ns, verdict_tool
FROM (SELECT id, intent_id, status, severity, opened_at, opened_ns, finding_kinds, finding_subjects,
    claimed_by, claimed_at, claimed_ns, resolved_by, resolved_at, resolved_ns, resolution, note,
    version, finding_ns, finding_details, covered, override_by, override_ns, override_action,
    override_held_by, listed_at, listed_ns FROM reckon_escalation_list FINAL) AS e
ANY LEFT JOIN
    (SELECT intent_id, tool AS verdict_tool
     FROM (SELECT intent_id, tool, deleted FROM reckon_verdicts FINAL) AS vv WHERE deleted = 0) AS v
USING intent_id";

/// v15: what time to settle, the contracts panel and the findings' questions read, beside the
/// report's counts in `reckon_intent_tally`, so none rebuilds it from the verdicts, attempts,
/// lookups and records of every intent in its window (`Verdict::settled_at`: the audit computes
/// when an intent settled, from evidence and under its contract). One `ALTER` adds the columns,
/// so an interrupted step never leaves some of them.
pub const V15_TALLY_SETTLING: &str = "
ALTER TABLE reckon_intent_tally
    ADD COLUMN contract Nullable(String) COMMENT 'contract the verdict was judged under; NULL when none covers the tool',
    ADD COLUMN first_attempt_ns UInt64 COMMENT 'start of the first attempt of the intent, unix nanoseconds; 0 when it has none',
    ADD COLUMN settled_ns UInt64 COMMENT 'when the intent reached its settled state, from evidence, unix nanoseconds; 0 while pending or unknown',
    ADD COLUMN escalation_id Nullable(String) COMMENT 'the escalation holding the intent, as its verdict says'";
/// Each current tally row written again at its version with the new columns, from the verdict
/// document its write left in `reckon_intent_list` (the same key, so both are read one range of
/// listing places at a time, `{slice}`, see [`SLICE`]: no join holds more than a day's rows):
/// the contract and the escalation; the first attempt's start and the last attempt's end (the
/// documents' instants are RFC 3339 with nine digits). The settling instant of a verdict written
/// before v15 is not in its document (that needs each object's history): a rejected intent's is
/// its last attempt's end, exact; a completed or failed one gets its latest event, an upper
/// bound (later webhooks of the object can only move it later). A re-audit writes the audit's
/// value. Of equal versions `ReplacingMergeTree` keeps the last inserted.
pub const V15_TALLY_SETTLING_FILL: &str = r#"
INSERT INTO reckon_intent_tally
    (listed_at, listed_ns, intent_id, tool, state, decision, last_event_ns, attempts,
    attempts_rejected, attempts_conflict, attempts_succeeded, attempts_failed, attempts_recorded, attempts_unknown,
    finding_kind, finding_severity, deleted, version, contract, first_attempt_ns, settled_ns, escalation_id)
SELECT listed_at, listed_ns, intent_id, tool, state, decision, last_event_ns, attempts,
    attempts_rejected, attempts_conflict, attempts_succeeded, attempts_failed, attempts_recorded, attempts_unknown,
    finding_kind, finding_severity, deleted, version,
    doc_contract, doc_first_ns,
    multiIf(state = 'failed_before_execution', doc_last_end_ns,
            state IN ('completed', 'failed_after_execution'), last_event_ns,
            toUInt64(0)),
    doc_escalation
FROM
(
    SELECT listed_at, listed_ns, intent_id, tool, state, decision, last_event_ns, attempts,
    attempts_rejected, attempts_conflict, attempts_succeeded, attempts_failed, attempts_recorded, attempts_unknown,
    finding_kind, finding_severity, deleted, version
    FROM (SELECT listed_at, listed_ns, intent_id, tool, state, decision, last_event_ns, attempts,
    attempts_rejected, attempts_conflict, attempts_succeeded, attempts_failed, attempts_recorded, attempts_unknown,
    finding_kind, finding_severity, deleted, version FROM reckon_intent_tally FINAL WHERE {slice})
    WHERE deleted = 0
) AS t
ANY LEFT JOIN
(
    -- What the joined side keeps of each document: a few values, not the document.
    SELECT listed_ns, intent_id, version,
        nullIf(visitParamExtractString(doc, 'contract'), '') AS doc_contract,
        nullIf(visitParamExtractString(doc, 'escalation_id'), '') AS doc_escalation,
        arrayReduce('min', arrayMap(s -> (toUInt64(toDateTime(replaceOne(substring(s, 1, 19), 'T', ' '), 'UTC')) * 1000000000 + toUInt64(substring(s, 21, 9))), extractAll(doc, '"start":"([^"]+)"'))) AS doc_first_ns,
        arrayReduce('max', arrayMap(s -> (toUInt64(toDateTime(replaceOne(substring(s, 1, 19), 'T', ' '), 'UTC')) * 1000000000 + toUInt64(substring(s, 21, 9))), extractAll(doc, '"end":"([^"]+)"'))) AS doc_last_end_ns
    FROM reckon_intent_list
    WHERE {slice}
) AS l
USING (listed_ns, intent_id, version)"#;

/// v16: each finding row carries its intent's listing place, so a question about the findings
/// of a time window checks that they are current against `reckon_intent_tally` by its key
/// (`(listed_ns, intent_id)`: the window's granules), not through `FINAL` over every verdict.
/// The fill writes each finding's latest row again at its version with its verdict's place; of
/// equal versions `ReplacingMergeTree` keeps the last inserted. A row left with 0 (an intent
/// whose verdict is gone) is never current.
pub const V16_FINDING_PLACE: &str = "
ALTER TABLE reckon_findings
    ADD COLUMN listed_ns UInt64 COMMENT 'where its intent is listed, unix nanoseconds: its key in reckon_intent_tally with intent_id'";
pub const V16_FINDING_PLACE_FILL: &str = "
INSERT INTO reckon_findings (intent_id, kind, severity, at, at_ns, subject, detail, tool, verdict_version, listed_ns)
SELECT intent_id, kind, severity, at, at_ns, subject, detail, tool, verdict_version, verdict_listed_ns
FROM (SELECT intent_id, kind, severity, at, at_ns, subject, detail, tool, verdict_version FROM reckon_findings FINAL) AS f
ALL INNER JOIN (SELECT intent_id, listed_ns AS verdict_listed_ns FROM reckon_verdicts FINAL) AS v
USING intent_id";

/// v17: records found by what links them (`Store::events_touching`, the intent dashboard) read
/// a few granules: `reckon_records` sorts by source first, so a filter on its intent, key or
/// object read the whole table. `reckon_record_lookup` holds each record's sort key under each
/// of the three, filled by a materialized view on every insert (and once from the records
/// there); a read takes the keys from it and the records by their full sort key.
pub const V17_RECORD_LOOKUP: &str = "
CREATE TABLE IF NOT EXISTS reckon_record_lookup (
    kind Enum8('intent' = 1, 'key' = 2, 'object' = 3) COMMENT 'what finds the record: the intent the downstream linked it to, the idempotency key it reported, its object id',
    value String COMMENT 'the intent id, key or object id',
    source String COMMENT 'reckon_records.source',
    object_id String COMMENT 'reckon_records.object_id',
    status String COMMENT 'reckon_records.status',
    observed_ns UInt64 COMMENT 'reckon_records.observed_ns: with the three before, the sort key of the record'
) ENGINE = ReplacingMergeTree
ORDER BY (kind, value, source, object_id, status, observed_ns)";
pub const V17_RECORD_LOOKUP_VIEW: &str = "
CREATE MATERIALIZED VIEW IF NOT EXISTS reckon_record_lookup_mv TO reckon_record_lookup AS
SELECT tupleElement(l, 1) AS kind, tupleElement(l, 2) AS value, source, object_id, status, observed_ns
FROM reckon_records
ARRAY JOIN arrayFilter(x -> tupleElement(x, 2) != '', [
    tuple(CAST('intent' AS Enum8('intent' = 1, 'key' = 2, 'object' = 3)), ifNull(intent_id, '')),
    tuple(CAST('key' AS Enum8('intent' = 1, 'key' = 2, 'object' = 3)), ifNull(idempotency_key, '')),
    tuple(CAST('object' AS Enum8('intent' = 1, 'key' = 2, 'object' = 3)), object_id)]) AS l";
/// The records stored before the view. One written meanwhile has its rows twice: harmless.
pub const V17_RECORD_LOOKUP_FILL: &str = "
INSERT INTO reckon_record_lookup (kind, value, source, object_id, status, observed_ns)
SELECT tupleElement(l, 1) AS kind, tupleElement(l, 2) AS value, source, object_id, status, observed_ns
FROM reckon_records
ARRAY JOIN arrayFilter(x -> tupleElement(x, 2) != '', [
    tuple(CAST('intent' AS Enum8('intent' = 1, 'key' = 2, 'object' = 3)), ifNull(intent_id, '')),
    tuple(CAST('key' AS Enum8('intent' = 1, 'key' = 2, 'object' = 3)), ifNull(idempotency_key, '')),
    tuple(CAST('object' AS Enum8('intent' = 1, 'key' = 2, 'object' = 3)), object_id)]) AS l";

/// v18: the findings of a kind and a time window read a range of an index: `reckon_findings`
/// sorts by intent, so a window's findings were a scan of every finding ever written (its kind
/// and time columns, then the rest of every granule holding one), which grows with the history.
/// `reckon_finding_times` holds the same rows sorted by kind and time, partitioned by month of
/// it, filled by a materialized view on every insert (and once from the findings there). A row is
/// current as in `reckon_findings`: written with its intent's current verdict version (the
/// readers check that against `reckon_intent_tally` at the row's `(listed_ns, intent_id)`).
pub const V18_FINDING_TIMES: &str = "
CREATE TABLE IF NOT EXISTS reckon_finding_times (
    kind Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15, 'key_shared_across_intents' = 16) COMMENT 'finding kind',
    at DateTime COMMENT 'when the finding became true (UTC seconds): partitioning',
    at_ns UInt64 COMMENT 'when the finding became true, unix nanoseconds',
    intent_id String COMMENT 'the intent the finding is about',
    subject String COMMENT 'what it is about: an object id, a key, a span id',
    severity Enum8('medium' = 1, 'high' = 2, 'critical' = 3) COMMENT 'finding severity',
    detail String COMMENT 'human-readable explanation',
    tool Nullable(String) COMMENT 'tool of the intent',
    listed_ns UInt64 COMMENT 'where its intent is listed, unix nanoseconds: its key in reckon_intent_tally with intent_id',
    verdict_version UInt64 COMMENT 'reckon_verdicts.version this row was written with: current while it is the intent current version'
) ENGINE = ReplacingMergeTree(verdict_version)
PARTITION BY toYYYYMM(at)
ORDER BY (kind, at, intent_id, subject)";
pub const V18_FINDING_TIMES_VIEW: &str = "
CREATE MATERIALIZED VIEW IF NOT EXISTS reckon_finding_times_mv TO reckon_finding_times AS
SELECT kind, at, at_ns, intent_id, subject, severity, detail, tool, listed_ns, verdict_version
FROM reckon_findings";
/// The findings stored before the view. One written meanwhile has its row twice: harmless.
pub const V18_FINDING_TIMES_FILL: &str = "
INSERT INTO reckon_finding_times (kind, at, at_ns, intent_id, subject, severity, detail, tool, listed_ns, verdict_version)
SELECT kind, at, at_ns, intent_id, subject, severity, detail, tool, listed_ns, verdict_version
FROM reckon_findings";

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "event log, verdicts, escalations",
        statements: &[
            V1_ATTEMPTS,
            V1_READBACKS,
            V1_RECORDS,
            V1_VERDICTS,
            V1_ESCALATIONS,
        ],
    },
    Migration {
        version: 2,
        name: "findings table, current views",
        statements: &[V2_FINDINGS, V2_CURRENT_VERDICTS, V2_CURRENT_FINDINGS],
    },
    Migration {
        version: 3,
        name: "key_shared_across_intents, escalation finding details and covered evidence",
        statements: &[
            V3_VERDICT_FINDING_KINDS,
            V3_ESCALATION_FINDING_KINDS,
            V3_FINDING_KIND,
            V3_ESCALATION_EVIDENCE,
            V3_DROP_CURRENT_FINDINGS,
            V3_DROP_CURRENT_VERDICTS,
            V2_CURRENT_VERDICTS,
            V2_CURRENT_FINDINGS,
        ],
    },
    Migration {
        version: 4,
        name: "notification outbox",
        statements: &[V4_OUTBOX],
    },
    Migration {
        version: 5,
        name: "contract version of each verdict",
        // The verdicts view is recreated so current servers, which keep a view's columns from
        // when it was created, show the new column; the findings view reads no new column.
        statements: &[
            V5_VERDICT_CONTRACT_VERSION,
            V3_DROP_CURRENT_VERDICTS,
            V2_CURRENT_VERDICTS,
        ],
    },
    Migration {
        version: 6,
        name: "settled verdicts, routes, checkpoint",
        statements: &[
            V6_VERDICT_SETTLED,
            V6_ROUTES,
            V6_META,
            V3_DROP_CURRENT_VERDICTS,
            V2_CURRENT_VERDICTS,
        ],
    },
    Migration {
        version: 7,
        name: "verdict fingerprints",
        statements: &[
            V7_VERDICT_FINGERPRINT,
            V3_DROP_CURRENT_VERDICTS,
            V2_CURRENT_VERDICTS,
        ],
    },
    Migration {
        version: 8,
        name: "column comments: what settled holds, and those 18.16 dropped",
        statements: &[
            V8_SETTLED_COMMENT,
            V8_CONTRACT_VERSION_COMMENT,
            V8_FINGERPRINT_COMMENT,
        ],
    },
    Migration {
        version: 9,
        name: "escalation status withdrawn and overrides; intent lookups by target, object and key",
        statements: &[
            V9_ESCALATION_STATUS,
            V9_ESCALATION_OVERRIDES,
            V9_STATUS_COMMENT,
            V9_OVERRIDE_BY_COMMENT,
            V9_OVERRIDE_NS_COMMENT,
            V9_OVERRIDE_ACTION_COMMENT,
            V9_OVERRIDE_HELD_BY_COMMENT,
            V9_INTENT_LOOKUP,
            V9_LOOKUP_KEYS,
            V9_LOOKUP_OBJECTS,
            V9_LOOKUP_TARGETS,
        ],
    },
    Migration {
        version: 10,
        name: "span owners: a stored span found by its identity alone",
        statements: &[
            V10_SPAN_OWNERS,
            V10_SPAN_OWNERS_ATTEMPTS,
            V10_SPAN_OWNERS_READBACKS,
        ],
    },
    Migration {
        version: 11,
        name: "listing places; intents and escalations listings sorted by them",
        statements: &[
            V11_VERDICT_LISTED,
            V11_ESCALATION_LISTED,
            V11_INTENT_LIST,
            V11_INTENT_LIST_FILL,
            V11_ESCALATION_LIST,
            V11_ESCALATION_LIST_FILL,
        ],
    },
    Migration {
        version: 12,
        name: "listing totals by hour",
        statements: &[
            V12_LISTING_HOURS,
            V12_INTENT_HOURS_VIEW,
            V12_ESCALATION_HOURS_VIEW,
            V12_INTENT_HOURS_FILL,
            V12_ESCALATION_HOURS_FILL,
            V12_LISTING_COUNTS,
        ],
    },
    Migration {
        version: 13,
        name: "the report by hour of listing places",
        statements: &[
            V13_INTENT_TALLY,
            V13_INTENT_TALLY_FILL,
            V13_INTENT_ACTIVITY,
            V13_INTENT_ACTIVITY_FILL,
            V13_DROP_INTENT_HOURS_VIEW,
            V13_DROP_ESCALATION_HOURS_VIEW,
            V13_HOURS_LISTING,
            V13_INTENT_HOURS_VIEW,
            V13_ESCALATION_HOURS_VIEW,
            V13_TALLY_HOURS_VIEW,
            V13_TALLY_HOURS_FILL,
            V13_REPORT_COUNTS,
            V13_REPORT_FINDINGS,
        ],
    },
    Migration {
        version: 14,
        name: "the tool of each escalation",
        statements: &[
            V14_ESCALATION_TOOL,
            V14_ESCALATION_LIST_TOOL,
            V14_ESCALATION_TOOL_FILL,
            V14_ESCALATION_LIST_TOOL_FILL,
        ],
    },
    Migration {
        version: 15,
        name: "time to settle and contracts in the tally",
        statements: &[V15_TALLY_SETTLING, V15_TALLY_SETTLING_FILL],
    },
    Migration {
        version: 16,
        name: "the listing place of each finding",
        statements: &[V16_FINDING_PLACE, V16_FINDING_PLACE_FILL],
    },
    Migration {
        version: 17,
        name: "records by intent, key and object",
        statements: &[
            V17_RECORD_LOOKUP,
            V17_RECORD_LOOKUP_VIEW,
            V17_RECORD_LOOKUP_FILL,
        ],
    },
    Migration {
        version: 18,
        name: "findings by kind and time",
        statements: &[
            V18_FINDING_TIMES,
            V18_FINDING_TIMES_VIEW,
            V18_FINDING_TIMES_FILL,
        ],
    },
];

/// The schema version this binary writes.
pub fn latest() -> u32 {
    MIGRATIONS.last().map(|m| m.version).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        AttemptClass, Decision, EscalationStatus, FindingKind, IntentState, ReportedOutcome,
        Severity,
    };

    /// `Enum8('a' = 1, 'b' = 2)` for the Rust names in order.
    fn enum8(names: &[&str]) -> String {
        let items: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("'{n}' = {}", i + 1))
            .collect();
        format!("Enum8({})", items.join(", "))
    }

    fn all_ddl() -> String {
        MIGRATIONS
            .iter()
            .flat_map(|m| m.statements.iter())
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The finding kinds of v1 and v2, which v3 extends.
    const FINDING_KINDS_BEFORE_V3: &str = "Enum8('duplicate_effect' = 1, 'effect_mismatch' = 2, 'key_reuse_mismatch' = 3, 'new_key_retry' = 4, 'expired_key_retry' = 5, 'no_idempotency_contract' = 6, 'unresolved_unknown' = 7, 'replayed_server_error' = 8, 'misreported_outcome' = 9, 'resend_while_pending' = 10, 'resend_after_terminal' = 11, 'inconclusive_readback_acted_on' = 12, 'stuck_pending' = 13, 'retry_budget_exceeded' = 14, 'orphan_record' = 15)";

    /// The escalation statuses of v1 to v8, which v9 extends.
    const STATUSES_BEFORE_V9: &str = "Enum8('open' = 1, 'claimed' = 2, 'resolved' = 3)";

    /// The codes written in RowBinary are `index in ALL + 1`; the DDL must say the same.
    #[test]
    fn enum_literals_match_the_rust_enums() {
        let ddl = all_ddl();
        let expect = [
            enum8(&ReportedOutcome::ALL.map(ReportedOutcome::as_str)),
            enum8(&AttemptClass::ALL.map(AttemptClass::as_str)),
            enum8(&IntentState::ALL.map(IntentState::as_str)),
            enum8(&Decision::ALL.map(Decision::as_str)),
            enum8(&FindingKind::ALL.map(FindingKind::as_str)),
            enum8(&Severity::ALL.map(|s| s.as_str())),
            enum8(&EscalationStatus::ALL.map(EscalationStatus::as_str)),
            enum8(&crate::notify::OutboxState::ALL.map(crate::notify::OutboxState::as_str)),
            enum8(&crate::model::LookupKind::ALL.map(crate::model::LookupKind::as_str)),
            enum8(&crate::model::OverrideAction::ALL.map(crate::model::OverrideAction::as_str)),
        ];
        // Attempt classes are not stored per attempt (yet): only the per-class count columns.
        for (i, e) in expect.iter().enumerate() {
            if i == 1 {
                continue;
            }
            assert!(ddl.contains(e.as_str()), "DDL lacks {e}");
        }
        // Every Enum8 in the DDL is one of the above (or the amount unit).
        let mut rest = ddl.as_str();
        while let Some(i) = rest.find("Enum8(") {
            let tail = &rest[i..];
            let end = tail.find(')').expect("closing paren") + 1;
            let lit = &tail[..end];
            assert!(
                expect.iter().any(|e| e == lit)
                    || lit == "Enum8('major' = 1, 'minor' = 2)"
                    || lit == FINDING_KINDS_BEFORE_V3
                    || lit == STATUSES_BEFORE_V9
                    || lit == "Enum8('intents' = 1, 'escalations' = 2)"
                    || lit == "Enum8('intents' = 1, 'escalations' = 2, 'report' = 3)"
                    // reckon_record_lookup's kind: written by its view, named by its reads.
                    || lit == "Enum8('intent' = 1, 'key' = 2, 'object' = 3)",
                "unexpected enum literal {lit}"
            );
            rest = &tail[end..];
        }
        for c in AttemptClass::ALL {
            assert!(ddl.contains(&format!("attempts_{} UInt32", c.as_str())));
        }
    }

    #[test]
    fn versions_increase() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(versions.first(), Some(&1));
    }
}
