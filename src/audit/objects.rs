//! Downstream objects linked to an intent, folded from every observation of them: the
//! downstream's own records, objects returned in attempt responses, and objects a read-back
//! found.

use std::collections::BTreeMap;

use super::{attempt_order, History};
use crate::contract::{Contract, Idempotency};
use crate::model::{Attempt, Decimal, ObjectView, Timestamp};

/// Where an observation came from. Ordered by how far it is trusted when two observations of
/// one object carry the same instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    /// A read-back found the object but said nothing of its status.
    Readback,
    /// The object as an attempt's response described it.
    Response,
    /// The downstream's own record.
    Record,
}

/// Status given to an object whose existence is known but whose status is not.
pub const UNOBSERVED_STATUS: &str = "unknown";

#[derive(Clone, Debug)]
struct Observation {
    at: Timestamp,
    terminal: bool,
    /// A failure state: of two terminal states in one instant, the later one (DESIGN.md
    /// "Evidence attribution" 5: a refund can go from succeeded to failed).
    failure: bool,
    source: Source,
    status: String,
}

#[derive(Clone, Debug)]
pub struct Object {
    pub object_id: String,
    pub status: String,
    pub amount: Option<Decimal>,
    pub currency: Option<String>,
    pub target: Option<String>,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    /// Observations in the order they count: by time, then by trust.
    history: Vec<Observation>,
}

impl Object {
    /// The status as of `t`: see [`settled_status`].
    pub fn status_at(&self, t: Timestamp) -> Option<&str> {
        settled_status(self.history.iter().filter(|o| o.at <= t))
    }

    /// When the most trusted source first showed the object in the status it is in now: the
    /// instant it reached that status, as far as the evidence tells.
    pub fn reached_status_at(&self) -> Option<Timestamp> {
        self.history
            .iter()
            .find(|o| o.status == self.status)
            .map(|o| o.at)
    }

    /// When the object was first seen in a state that is not terminal, if ever.
    pub fn first_nonterminal(&self) -> Option<Timestamp> {
        self.history.iter().find(|o| !o.terminal).map(|o| o.at)
    }
}

/// The status a sequence of observations (in time order) shows. A terminal state is absorbing:
/// once any observation shows one, later non-terminal observations do not undo it. Clocks differ
/// between the agent and the downstream, and webhooks carry whole seconds, so a response saying
/// `pending` can carry a later instant than the record saying `succeeded`.
fn settled_status<'a>(
    observations: impl DoubleEndedIterator<Item = &'a Observation> + Clone,
) -> Option<&'a str> {
    observations
        .clone()
        .rev()
        .find(|o| o.terminal)
        .or_else(|| observations.clone().next_back())
        .map(|o| o.status.as_str())
}

pub struct Objects {
    by_id: BTreeMap<String, Object>,
}

impl Objects {
    pub fn fold(h: &History, c: &Contract, intent_currency: Option<&str>) -> Objects {
        let mut by_id: BTreeMap<String, Object> = BTreeMap::new();
        let mut observe = |id: &str, at: Timestamp, source: Source, status: &str| {
            let o = by_id.entry(id.to_string()).or_insert_with(|| Object {
                object_id: id.to_string(),
                status: String::new(),
                amount: None,
                currency: None,
                target: None,
                first_seen: at,
                last_seen: at,
                history: Vec::new(),
            });
            o.first_seen = o.first_seen.min(at);
            o.last_seen = o.last_seen.max(at);
            o.history.push(Observation {
                at,
                terminal: c.is_terminal(status),
                failure: c.is_failure(status),
                source,
                status: status.to_string(),
            });
        };
        for r in &h.records {
            observe(&r.object_id, r.observed_at, Source::Record, &r.status);
        }
        // Under `replay` a same-key retry that returns an object already returned under that key
        // is the saved first response, not a fresh observation of the object.
        let mut returned: std::collections::HashSet<(&str, &str)> = Default::default();
        // Its own responses and those to other senders of its keys that returned its objects,
        // in time order: of one key's responses the first is the observation.
        let mut responses: Vec<&Attempt> = h.attempts.iter().collect();
        if !h.answered_elsewhere.is_empty() {
            responses.extend(&h.answered_elsewhere);
            responses.sort_by_key(|a| attempt_order(a));
        }
        for a in responses {
            let Some(id) = a.object_id.as_deref().filter(|id| !h.is_foreign(id)) else {
                continue;
            };
            if let (Idempotency::Replay, Some(key)) = (c.idempotency, a.idempotency_key.as_deref())
            {
                if !returned.insert((key, id)) {
                    continue;
                }
            }
            let status = a.object_status.as_deref().unwrap_or(UNOBSERVED_STATUS);
            observe(id, a.end, Source::Response, status);
        }
        for rb in &h.readbacks {
            for id in rb.object_ids.iter().filter(|id| !h.is_foreign(id)) {
                observe(id, rb.at, Source::Readback, UNOBSERVED_STATUS);
            }
        }
        for o in by_id.values_mut() {
            // The downstream's own records say what state an object is in; a response is the
            // executor's view of it at one moment, and a read-back's bare "found" says nothing
            // about progress. The most trusted source that observed the object decides.
            let best = o.history.iter().map(|x| x.source).max();
            if let Some(best) = best {
                o.history.retain(|x| x.source == best);
            }
            // Ties: a terminal state outranks a non-terminal one (webhooks for one second arrive
            // in any order), a failure a success (the only way between them a refund may go;
            // Stripe's times are whole seconds), then the downstream's record outranks a
            // response.
            o.history.sort_by(|a, b| {
                (a.at, a.terminal, a.failure, a.source, &a.status)
                    .cmp(&(b.at, b.terminal, b.failure, b.source, &b.status))
            });
            o.status = settled_status(o.history.iter())
                .unwrap_or_default()
                .to_string();
        }
        // Amount, currency and target from the latest record that states them.
        for r in &h.records {
            if let Some(o) = by_id.get_mut(&r.object_id) {
                if r.currency.is_some() {
                    o.currency = r.currency.clone();
                }
                if let Some(amount) = r.amount {
                    let currency = r
                        .currency
                        .as_deref()
                        .or(o.currency.as_deref())
                        .or(intent_currency);
                    o.amount = Some(amount.to_major(currency));
                }
                if r.target.is_some() {
                    o.target = r.target.clone();
                }
            }
        }
        Objects { by_id }
    }

    /// Objects with their latest status, oldest first.
    pub fn current(&self) -> Vec<&Object> {
        let mut v: Vec<&Object> = self.by_id.values().collect();
        v.sort_by(|a, b| (a.first_seen, &a.object_id).cmp(&(b.first_seen, &b.object_id)));
        v
    }

    pub fn get(&self, id: &str) -> Option<&Object> {
        self.by_id.get(id)
    }

    pub fn views(&self) -> Vec<ObjectView> {
        self.current()
            .into_iter()
            .map(|o| ObjectView {
                object_id: o.object_id.clone(),
                status: o.status.clone(),
                amount: o.amount,
                currency: o.currency.clone(),
                target: o.target.clone(),
                first_seen: o.first_seen,
                last_seen: o.last_seen,
            })
            .collect()
    }
}
