//! Findings in event time (DESIGN.md "Findings"): whether a high or critical finding opened an
//! escalation is a function of the evidence, never of the order it arrived in. The audit reads
//! an intent's evidence as a sequence in event time, and a finding that held after any prefix of
//! it counts, each prefix judged just before the next event (the whole at `now`, which is the
//! verdict itself). So two replayed 502s before the 200 escalate whether the three spans came one
//! at a time or in one export, and a timeout whose record lies 12 s later never escalates for
//! being read an hour late: its deadline had not passed before the record.

use std::collections::HashSet;

use super::{audit_at, History};
use crate::contract::Contract;
use crate::model::*;

/// An event of the intent's evidence, placed in event time: an attempt or a read-back at its
/// end (when its outcome was known), a record at its observation time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    Attempt(usize),
    Elsewhere(usize),
    Readback(usize),
    Record(usize),
}

/// The high and critical findings that held after an earlier prefix of the evidence in event
/// time and do not hold in `verdict` (the whole at `now`): what, beside the verdict's own, an
/// escalation of the intent carries. Empty for almost every intent.
///
/// Only prefixes followed by an event that can take a finding away are judged. Every other kind
/// of event only adds to what an earlier prefix showed: an attempt that names no new object (a
/// timeout, a 5xx, a replayed response naming an object already named) changes neither the
/// objects nor the state, and findings about keys, parameters and retries only grow with
/// attempts. So a retry storm under one key costs one audit, not one per attempt.
pub fn held_before(h: &History, c: Option<&Contract>, verdict: &Verdict) -> Vec<Finding> {
    // Only attempts, none refused and none naming an object (timeouts, 5xx, a retry storm):
    // no event can take a finding away, so no prefix needs judging (see `may_take_away`).
    let only_sends = h.records.is_empty()
        && h.readbacks.is_empty()
        && h.answered_elsewhere.is_empty()
        && verdict
            .attempts
            .iter()
            .all(|a| a.object_id.is_none() && a.class != AttemptClass::Rejected);
    if only_sends {
        return Vec::new();
    }
    let mut events: Vec<(Timestamp, Place)> = Vec::with_capacity(
        h.attempts.len() + h.answered_elsewhere.len() + h.readbacks.len() + h.records.len(),
    );
    events.extend(
        h.attempts
            .iter()
            .enumerate()
            .map(|(i, a)| (a.end, Place::Attempt(i))),
    );
    events.extend(
        h.answered_elsewhere
            .iter()
            .enumerate()
            .map(|(i, a)| (a.end, Place::Elsewhere(i))),
    );
    events.extend(
        h.readbacks
            .iter()
            .enumerate()
            .map(|(i, r)| (r.end, Place::Readback(i))),
    );
    events.extend(
        h.records
            .iter()
            .enumerate()
            .map(|(i, r)| (r.observed_at, Place::Record(i))),
    );
    if events.len() < 2 {
        return Vec::new();
    }
    // Ties in a fixed order: the history is canonical, so indexes are too.
    events.sort_unstable();

    let final_ids: HashSet<(FindingKind, &str)> = verdict
        .findings
        .iter()
        .map(|f| (f.kind, f.subject.as_str()))
        .collect();
    let mut held: Vec<Finding> = Vec::new();
    let mut named: HashSet<(&str, Option<&str>)> = HashSet::new();
    let mut executed = false;
    for k in 0..events.len() - 1 {
        let (_, place) = events[k];
        if let Place::Attempt(i) = place {
            let a = &h.attempts[i];
            executed |= super::classify(a, c.unwrap_or(super::fallback_contract()))
                != AttemptClass::Rejected;
        }
        if let Place::Attempt(i) | Place::Elsewhere(i) = place {
            let a = match place {
                Place::Attempt(_) => &h.attempts[i],
                _ => &h.answered_elsewhere[i],
            };
            if let Some(id) = a.object_id.as_deref() {
                named.insert((id, a.object_status.as_deref()));
            }
        }
        let (next_at, next) = events[k + 1];
        if !may_take_away(h, next, &named, executed) {
            continue;
        }
        let prefix = prefix_of(h, &events[..=k]);
        // Just before the next event: a deadline counts only if it passed before it.
        let judged = audit_at(&prefix, c, Timestamp(next_at.0.saturating_sub(1)));
        for f in judged.findings {
            if f.severity.escalates()
                && !final_ids.contains(&(f.kind, f.subject.as_str()))
                && !held
                    .iter()
                    .any(|x| x.kind == f.kind && x.subject == f.subject)
            {
                held.push(f);
            }
        }
    }
    held.sort_by(|a, b| (a.at, a.kind, &a.subject).cmp(&(b.at, b.kind, &b.subject)));
    held
}

/// Whether the event after a prefix can remove a finding the prefix shows: a record or a
/// read-back (an object's status, what was found), a response naming an object (or a status of
/// one) no earlier response named, or the first send that executed (the intent's parameters
/// are those of its first executed send).
fn may_take_away(
    h: &History,
    next: Place,
    named: &HashSet<(&str, Option<&str>)>,
    executed: bool,
) -> bool {
    let names_new = |a: &Attempt| {
        a.object_id
            .as_deref()
            .is_some_and(|id| !named.contains(&(id, a.object_status.as_deref())))
    };
    match next {
        Place::Record(_) | Place::Readback(_) => true,
        Place::Elsewhere(i) => names_new(&h.answered_elsewhere[i]),
        Place::Attempt(i) => !executed || names_new(&h.attempts[i]),
    }
}

/// The history holding only the events of a prefix (and what the ledger says of the intent's
/// place among others, which is not an event of its own).
fn prefix_of(h: &History, prefix: &[(Timestamp, Place)]) -> History {
    let mut out = History {
        intent_id: h.intent_id.clone(),
        foreign: h.foreign.clone(),
        provisional: h.provisional.clone(),
        shared_keys: h.shared_keys.clone(),
        ..History::default()
    };
    let mut places: Vec<Place> = prefix.iter().map(|&(_, p)| p).collect();
    // Back in the history's own (canonical) order, so the prefix needs no sorting.
    places.sort_unstable();
    for p in places {
        match p {
            Place::Attempt(i) => out.attempts.push(h.attempts[i].clone()),
            Place::Elsewhere(i) => out.answered_elsewhere.push(h.answered_elsewhere[i].clone()),
            Place::Readback(i) => out.readbacks.push(h.readbacks[i].clone()),
            Place::Record(i) => out.records.push(h.records[i].clone()),
        }
    }
    out
}
