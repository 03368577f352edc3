//! The audit core: one intent's events + its contract + `now` -> a verdict.
//!
//! Pure and deterministic: no I/O, no clock, no async runtime, no database (a tidy test holds
//! this line). Time is an input, so retention windows and deadlines are tested in microseconds
//! and history can be re-audited under a changed contract. The same set of events gives the
//! same verdict whatever order they arrived in and however often they were re-sent.

mod classify;
mod event_time;
mod findings;
mod ledger;
mod objects;
mod params;

pub use crate::model::keys_and_objects;
pub use classify::classify;
pub use ledger::{Ledger, LedgerChange, ORPHAN_PREFIX};
pub use params::Params;

use crate::contract::{Contract, Idempotency};
use crate::model::*;
use objects::Objects;

/// Everything known about one intent: its own events, the records of the objects attributed to
/// it, and what the ledger learnt about evidence it saw but does not own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub intent_id: String,
    pub attempts: Vec<Attempt>,
    pub readbacks: Vec<Readback>,
    /// Observations of the objects this intent owns or provisionally holds.
    pub records: Vec<RecordObservation>,
    /// Objects this intent's responses or read-backs named that another intent owns: never its
    /// effect (DESIGN.md "Evidence attribution" 2).
    pub foreign: Vec<String>,
    /// Objects linked only because a read-back of this intent listed them and nobody owns them
    /// yet: they count for the state, never for a finding about effects.
    pub provisional: Vec<String>,
    /// Keys this intent sent that other intents sent too.
    pub shared_keys: Vec<SharedKey>,
    /// Other intents' sends of this intent's keys whose responses returned an object this
    /// intent owns (DESIGN.md "Evidence attribution" 4: where the downstream keeps keys, such a
    /// response is this intent's first execution's object). Observations of its objects, never
    /// its attempts.
    pub answered_elsewhere: Vec<Attempt>,
}

/// An idempotency key sent by attempts of two or more intents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedKey {
    pub key: String,
    /// The intent that sent it first: under `replay`, the others receive its saved responses.
    pub first_intent: String,
    /// Every other intent that sent it, earliest first.
    pub others: Vec<String>,
    /// When a second intent first sent it.
    pub shared_at: Timestamp,
}

impl History {
    pub fn new(intent_id: impl Into<String>) -> Self {
        History {
            intent_id: intent_id.into(),
            ..Default::default()
        }
    }

    pub fn push(&mut self, event: Event) {
        match event {
            Event::Attempt(a) => self.attempts.push(a),
            Event::Readback(r) => self.readbacks.push(r),
            Event::Record(r) => self.records.push(r),
        }
    }

    /// The canonical form, borrowed when the history already is in it (the common case: the
    /// ledger appends in time order), so the hot path does not copy every event twice.
    pub fn canonical(&self) -> std::borrow::Cow<'_, History> {
        let attempts_ok = self
            .attempts
            .windows(2)
            .all(|w| attempt_order(&w[0]) < attempt_order(&w[1]))
            && !has_duplicate(&self.attempts, |a| a.span);
        let readbacks_ok = self
            .readbacks
            .windows(2)
            .all(|w| readback_order(&w[0]) < readback_order(&w[1]))
            && !has_duplicate(&self.readbacks, |r| r.span);
        let records_ok = self
            .records
            .windows(2)
            .all(|w| record_order(&w[0]) < record_order(&w[1]))
            && !has_duplicate(&self.records, RecordObservation::identity);
        let elsewhere_ok = self
            .answered_elsewhere
            .windows(2)
            .all(|w| attempt_order(&w[0]) < attempt_order(&w[1]));
        if attempts_ok && readbacks_ok && records_ok && elsewhere_ok {
            std::borrow::Cow::Borrowed(self)
        } else {
            std::borrow::Cow::Owned(self.normalized())
        }
    }

    /// Sorted by time with re-sent duplicates removed: the canonical form the audit reads.
    /// Identity follows DESIGN.md invariant 4; among copies that differ the smallest wins, so
    /// the choice does not depend on arrival order.
    pub fn normalized(&self) -> History {
        let mut attempts = self.attempts.clone();
        attempts.sort();
        attempts.dedup_by(|b, a| a.span == b.span);
        attempts.sort_by_key(attempt_order);

        let mut readbacks = self.readbacks.clone();
        readbacks.sort();
        readbacks.dedup_by(|b, a| a.span == b.span);
        readbacks.sort_by_key(readback_order);

        let mut records = self.records.clone();
        records.sort_by(|a, b| a.identity().cmp(&b.identity()).then_with(|| a.cmp(b)));
        records.dedup_by(|b, a| a.identity() == b.identity());
        records.sort_by(|a, b| record_order(a).cmp(&record_order(b)));

        let mut answered_elsewhere = self.answered_elsewhere.clone();
        answered_elsewhere.sort();
        answered_elsewhere.dedup_by(|b, a| a.span == b.span);
        answered_elsewhere.sort_by_key(attempt_order);

        History {
            intent_id: self.intent_id.clone(),
            attempts,
            readbacks,
            records,
            foreign: self.foreign.clone(),
            provisional: self.provisional.clone(),
            shared_keys: self.shared_keys.clone(),
            answered_elsewhere,
        }
    }

    /// Whether another intent owns this object.
    pub fn is_foreign(&self, object_id: &str) -> bool {
        self.foreign.iter().any(|o| o == object_id)
    }

    pub fn is_provisional(&self, object_id: &str) -> bool {
        self.provisional.iter().any(|o| o == object_id)
    }

    pub fn is_empty(&self) -> bool {
        self.attempts.is_empty() && self.readbacks.is_empty() && self.records.is_empty()
    }
}

/// The canonical order of each kind of event. `normalized` sorts by it, `canonical` checks it
/// and the ledger's "earliest" means it: one definition keeps the three agreeing.
pub fn attempt_order(a: &Attempt) -> (Timestamp, Timestamp, SpanRef) {
    (a.start, a.end, a.span)
}

pub fn readback_order(r: &Readback) -> (Timestamp, Timestamp, SpanRef) {
    (r.at, r.end, r.span)
}

pub fn record_order(r: &RecordObservation) -> (Timestamp, &str, &str, &str) {
    (r.observed_at, &r.object_id, &r.status, &r.source)
}

/// Whether two items share an identity.
fn has_duplicate<'a, T, K: std::hash::Hash + Eq>(items: &'a [T], key: impl Fn(&'a T) -> K) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    !items.iter().all(|item| seen.insert(key(item)))
}

/// The contract assumed for a tool no contract covers: no idempotency promise, no window in
/// which a retry is known to be safe.
pub fn fallback_contract() -> &'static Contract {
    static FALLBACK: std::sync::LazyLock<Contract> = std::sync::LazyLock::new(|| {
        let mut c = Contract::example("(none)", "");
        c.tools.clear();
        c.idempotency = Idempotency::None;
        c.key_retention = None;
        c.max_in_flight = None;
        c.max_attempts = None;
        c
    });
    &FALLBACK
}

/// Audit one intent. `contract` is `None` when no contract covers its tool. The verdict's
/// `held_before` says which high and critical findings held earlier in event time
/// ([`event_time::held_before`]): what its escalation carries beside the verdict's own.
pub fn audit(history: &History, contract: Option<&Contract>, now: Timestamp) -> Verdict {
    let h = history.canonical();
    let mut v = audit_at(&h, contract, now);
    v.held_before = event_time::held_before(&h, contract, &v);
    v
}

/// The verdict of the whole history at `now`, findings in event time left out.
fn audit_at(history: &History, contract: Option<&Contract>, now: Timestamp) -> Verdict {
    let c: &Contract = match contract {
        Some(c) => c,
        None => fallback_contract(),
    };
    let h = history.canonical();
    // Its attempts are the sends of its write (`Ledger::history` leaves out wrapper spans and
    // spans of contracts for other kinds of object), judged under its contract.
    let classes: Vec<AttemptClass> = h.attempts.iter().map(|a| classify(a, c)).collect();
    // A rejected attempt executed nothing: the intent's parameters and its key window start at
    // the first attempt that was not rejected (fixing the input under the same key is correct).
    let first_executed = h
        .attempts
        .iter()
        .zip(&classes)
        .position(|(_, &k)| k != AttemptClass::Rejected);
    // What a read-back listed that was there before the intent's first send is no candidate
    // for its effect: the ledger keeps it out of `provisional` (`Ledger::may_have_made`).
    let params = Params::of_intent(&h.attempts, &classes, c);
    let objects = Objects::fold(&h, c, params.currency.as_deref());
    let state = intent_state(&h, &classes, &objects, &params, c);
    let window_start = first_executed
        .map(|i| &h.attempts[i])
        .or(h.attempts.first())
        .map(|a| a.start);
    let safe_retry_until = window_start.and_then(|t| c.safe_retry_until(t));

    let ctx = findings::Ctx {
        h: &h,
        c,
        contract_known: contract.is_some(),
        classes: &classes,
        objects: &objects,
        params: &params,
        state,
        now,
        safe_retry_until,
        first_executed,
    };
    let findings = findings::all(&ctx);
    let decision = decide(&ctx);
    let next_change = next_change(&ctx);
    let settled_at = settled_at(&ctx);

    let mut keys: Vec<String> = Vec::new();
    let mut seen_keys = std::collections::HashSet::new();
    for a in &h.attempts {
        if let Some(k) = &a.idempotency_key {
            if seen_keys.insert(k.as_str()) {
                keys.push(k.clone());
            }
        }
    }
    let times = h
        .attempts
        .iter()
        .flat_map(|a| [a.start, a.end])
        .chain(h.readbacks.iter().map(|r| r.at))
        .chain(h.records.iter().map(|r| r.observed_at));
    let (first_seen, last_event) = times.fold(
        (None, None),
        |(lo, hi): (Option<Timestamp>, Option<Timestamp>), t| {
            (
                Some(lo.map_or(t, |l| l.min(t))),
                Some(hi.map_or(t, |x| x.max(t))),
            )
        },
    );

    Verdict {
        intent_id: h.intent_id.clone(),
        tool: h
            .attempts
            .first()
            .map(|a| a.tool.clone())
            .or_else(|| h.readbacks.first().map(|r| r.tool.clone())),
        contract: contract.map(|c| c.name.clone()),
        contract_version: contract.map(|c| c.version.clone()).unwrap_or_default(),
        idempotency_keys: keys,
        target: params.target.clone(),
        state,
        settled_at,
        decision,
        safe_retry_until,
        escalation_id: None,
        attempts: h
            .attempts
            .iter()
            .zip(&classes)
            .map(|(a, &class)| AttemptView {
                span: a.span,
                start: a.start,
                end: a.end,
                idempotency_key: a.idempotency_key.clone(),
                class,
                http_status: a.http_status,
                error_type: a.error_type.clone(),
                object_id: a.object_id.clone(),
                object_status: a.object_status.clone(),
                reported_outcome: a.reported_outcome,
                arguments: a.arguments_seen(),
            })
            .collect(),
        readbacks: h
            .readbacks
            .iter()
            .map(|r| ReadbackView {
                span: r.span,
                at: r.at,
                object_ids: r.object_ids.clone(),
            })
            .collect(),
        objects: objects.views(),
        findings,
        held_before: Vec::new(),
        next_change,
        audited_at: now,
        first_seen: first_seen.unwrap_or(now),
        listed_at: first_seen.unwrap_or(now),
        last_event: last_event.unwrap_or(now),
    }
}

/// DESIGN.md "Intent state". Downstream records outrank the attempts' view of them.
fn intent_state(
    h: &History,
    classes: &[AttemptClass],
    objects: &Objects,
    params: &Params,
    c: &Contract,
) -> IntentState {
    // A provisional object (only a read-back links it) is a lead, not proof (DESIGN.md
    // "Evidence attribution" 3): it never makes the intent completed, pending or failed, and
    // never outranks what the intent owns. Only owned objects decide the state.
    let current: Vec<_> = objects
        .current()
        .into_iter()
        .filter(|o| !h.is_provisional(&o.object_id))
        .collect();
    let succeeded: Vec<_> = current.iter().filter(|o| c.is_success(&o.status)).collect();
    if succeeded.iter().any(|o| params.matches(o)) {
        return IntentState::Completed;
    }
    if !succeeded.is_empty() {
        // An effect happened but not the one intended: not positively completed.
        return IntentState::Unknown;
    }
    // A failed object beside a live one leaves the intent pending: the live one may still succeed.
    if current.iter().any(|o| !c.is_terminal(&o.status)) {
        return IntentState::Pending;
    }
    if current.iter().any(|o| c.is_failure(&o.status)) {
        return IntentState::FailedAfterExecution;
    }
    if !h.attempts.is_empty() && classes.iter().all(|&k| k == AttemptClass::Rejected) {
        return IntentState::FailedBeforeExecution;
    }
    IntentState::Unknown
}

/// When the intent reached its state, if that state is settled: the evidence's own instant, not
/// when reckon audited. Completed: the first sight of the earliest owned object that succeeded as
/// intended, in its status (records outrank responses, as in [`Objects::fold`]). Failed after
/// execution: the latest such instant over the owned objects, since the state holds only once
/// every one of them is terminal. Failed before execution: the end of the last attempt (the last
/// rejection). Pending and unknown are not settled.
fn settled_at(x: &findings::Ctx) -> Option<Timestamp> {
    match x.state {
        IntentState::Completed => x
            .owned_objects()
            .filter(|o| x.c.is_success(&o.status) && x.params.matches(o))
            .filter_map(|o| o.reached_status_at())
            .min(),
        IntentState::FailedAfterExecution => x
            .owned_objects()
            .filter_map(|o| o.reached_status_at())
            .max(),
        IntentState::FailedBeforeExecution => x.h.attempts.iter().map(|a| a.end).max(),
        IntentState::Pending | IntentState::Unknown => None,
    }
}

/// What is safe for an executor now, from the evidence alone. The escalation book overrides it
/// with `escalate` while an escalation is open.
fn decide(x: &findings::Ctx) -> Decision {
    match x.state {
        IntentState::Completed => Decision::None,
        // A failed effect makes anything new a new intent, unless a send whose outcome is open
        // may have made an effect of its own (`Ctx::open_sends`: a retry under a new key, or
        // under `converge` the same key driving the failed work on): a new intent now could be
        // a second refund. Wait while it may still commit, then read the downstream.
        IntentState::FailedAfterExecution => {
            let open = x.open_sends();
            match x.c.max_in_flight {
                _ if open.is_empty() => Decision::NewIntent,
                Some(d) if open.iter().any(|a| x.now < a.start + d) => Decision::Wait,
                _ => Decision::Reconcile,
            }
        }
        IntentState::FailedBeforeExecution => Decision::FixInput,
        IntentState::Pending => Decision::Wait,
        IntentState::Unknown => {
            let Some(last) = x.h.attempts.last() else {
                return Decision::Reconcile;
            };
            // An object is linked but the state is not positive: the effect differs from the
            // intent. No retry can fix that; only a person decides what is next. A lead (an
            // object only a read-back links) is no such object: while it is the only candidate
            // for the effect, a same-key retry is what settles whose it is (its replayed
            // response names the object), so the decision falls through to the retry rules.
            if x.owned_objects().next().is_some() {
                return if x.params_differ_from_an_object() {
                    Decision::Escalate
                } else {
                    Decision::Reconcile
                };
            }
            let last_class = x.classes[x.classes.len() - 1];
            // A 409 means a request with this key is still executing elsewhere.
            if last_class == AttemptClass::Conflict
                && x.c.max_in_flight.is_none_or(|d| x.now < last.end + d)
            {
                return Decision::Wait;
            }
            if x.original_may_still_commit() {
                return Decision::Wait;
            }
            let budget_left =
                x.c.max_attempts
                    .is_none_or(|m| (x.h.attempts.len() as u64) < m as u64);
            // A retry under the same key is only as safe as the key: an intent that never
            // executed under one is unprotected, and a key another intent also sent replays
            // that intent's responses.
            let keyed = x
                .attempts()
                .any(|(a, k)| k != AttemptClass::Rejected && a.idempotency_key.is_some());
            let same_key_safe = x.c.idempotency != Idempotency::None
                && x.safe_retry_until.is_some_and(|until| x.now < until)
                && budget_left
                && keyed
                && x.h.shared_keys.is_empty();
            if same_key_safe {
                Decision::RetrySameKey
            } else {
                Decision::Reconcile
            }
        }
    }
}

/// The next instant at which the verdict changes with no new event, so the caller can schedule
/// a re-audit. Only deadlines that matter in the current state count: a settled intent has none.
fn next_change(x: &findings::Ctx) -> Option<Timestamp> {
    let mut at: Vec<Timestamp> = Vec::new();
    match x.state {
        IntentState::Unknown => {
            at.extend(x.safe_retry_until);
            for (a, &k) in x.h.attempts.iter().zip(x.classes) {
                if k == AttemptClass::Unknown {
                    at.extend(x.c.max_in_flight.map(|d| a.start + d));
                }
                if k == AttemptClass::Conflict {
                    at.extend(x.c.max_in_flight.map(|d| a.end + d));
                }
            }
            at.extend(x.first_unknown().map(|a| a.start + x.c.unknown_deadline));
        }
        IntentState::FailedAfterExecution => {
            let open = x.open_sends();
            at.extend(
                open.iter()
                    .filter_map(|a| x.c.max_in_flight.map(|d| a.start + d)),
            );
        }
        IntentState::Pending => at.extend(x.first_pending().map(|t| t + x.c.pending_deadline)),
        _ => {}
    }
    if x.h.attempts.is_empty() {
        at.extend(
            x.objects
                .current()
                .iter()
                .map(|o| o.first_seen + x.c.orphan_grace),
        );
    }
    at.into_iter().filter(|&t| t > x.now).min()
}
