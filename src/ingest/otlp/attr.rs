//! The span attributes an executor sets for reckon (DESIGN.md attribute table), named once for
//! the recognizer. The crate's own emitters (the demo executor, `loadgen`) are clients of the
//! public interfaces and may not name `crate::ingest`, so they spell the names out themselves.
//! Log-record attributes are in `logs`.

/// The logical action. Required, unless the tool's contract reads it from the arguments.
pub const INTENT_ID: &str = "reckon.intent.id";
/// The key sent with this attempt.
pub const IDEMPOTENCY_KEY: &str = "reckon.idempotency_key";
/// `write` (default) or `read` (a read-back).
pub const ACTION: &str = "reckon.action";
/// What the executor concluded and told the model.
pub const OUTCOME: &str = "reckon.outcome";
/// Object id in the downstream's response.
pub const DOWNSTREAM_OBJECT_ID: &str = "reckon.downstream.object_id";
/// Object status in the downstream's response.
pub const DOWNSTREAM_STATUS: &str = "reckon.downstream.status";
/// On a read: the objects found (`[]` when none).
pub const READBACK_OBJECT_IDS: &str = "reckon.readback.object_ids";
/// Semconv: the downstream's HTTP status, if a response came.
pub const HTTP_STATUS_CODE: &str = "http.response.status_code";
/// Semconv: the error type (`timeout`, `500`, an exception class).
pub const ERROR_TYPE: &str = "error.type";
