//! Attempt classes, decided from evidence in DESIGN.md's order. The executor's own conclusion
//! (`reckon.outcome`) and the span's error status play no part: a timeout is never `failed`.

use crate::contract::Contract;
use crate::model::{Attempt, AttemptClass};

pub fn classify(a: &Attempt, c: &Contract) -> AttemptClass {
    let status = a.effective_status();
    if rejected(status, c) {
        return AttemptClass::Rejected;
    }
    if conflict(status, c) {
        return AttemptClass::Conflict;
    }
    if a.object_id.is_some() || a.object_status.is_some() {
        return match a.object_status.as_deref() {
            Some(s) if c.is_success(s) => AttemptClass::Succeeded,
            Some(s) if c.is_failure(s) => AttemptClass::Failed,
            // An object id means the request was recorded, not that it took effect.
            _ => AttemptClass::Recorded,
        };
    }
    // Timeouts, resets after send, 5xx, a 2xx without an object: nothing shows what happened.
    AttemptClass::Unknown
}

/// Whether the downstream's status says the request executed nothing (`rejected`).
pub fn rejected(effective_status: Option<u16>, c: &Contract) -> bool {
    effective_status.is_some_and(|s| c.not_executed_status.contains(&s))
}

/// Whether the downstream's status says another request under the same key was in flight
/// (`conflict`): this one executed nothing either.
pub fn conflict(effective_status: Option<u16>, c: &Contract) -> bool {
    effective_status.is_some_and(|s| c.conflict_status.contains(&s))
}
