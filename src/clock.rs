//! The wall clock, read in one place. Everything below the edges takes `now` as an argument
//! (the audit, the escalation book, the engine's core, the decoders); the edges that need the
//! time of day (the engine's timer and persister, the ingest service's receive time, the API's
//! `since`, the stores' migration stamps and write versions) ask here, so a test or a tidy
//! check finds every reader by one name. Durations (`Instant`) are not the wall clock.

use crate::model::Timestamp;

/// Now, in unix nanoseconds.
pub fn wall_now() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
