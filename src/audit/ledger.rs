//! Linking events to intents: a deterministic state machine that the engine drives.
//!
//! Attempts and read-backs name their intent. Records are kept per downstream object, and an
//! object links to every intent that any of its observations names, that used any key its
//! observations carry, or whose attempt response returned it. Links only ever grow, as unions
//! of sets, so the result does not depend on the order events arrive in. An object that links to
//! nothing is audited under a pseudo-intent `orphan:{object_id}` until something links it.

use std::collections::BTreeSet;

use foldhash::HashMap;

use super::History;
use crate::contract::{Contract, Contracts};
use crate::model::{Attempt, Event, Readback, RecordObservation, SpanRef};

pub const ORPHAN_PREFIX: &str = "orphan:";

/// A small set of strings kept sorted. Most keys and objects belong to one intent, and a
/// one-element B-tree set costs a node of a few hundred bytes; per open intent that adds up.
#[derive(Debug, Default, Clone)]
struct Few(Vec<String>);

impl Few {
    fn insert(&mut self, s: String) -> bool {
        match self.0.binary_search(&s) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, s);
                true
            }
        }
    }

    fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> IntoIterator for &'a Few {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[derive(Debug, Default)]
struct IntentEvents {
    attempts: Vec<Attempt>,
    readbacks: Vec<Readback>,
    objects: Few,
}

#[derive(Debug, Default)]
pub struct Ledger {
    intents: HashMap<String, IntentEvents>,
    /// Every observation of every object, by object id.
    records: HashMap<String, Vec<RecordObservation>>,
    /// The intents each object links to.
    object_intents: HashMap<String, Few>,
    /// The intents that sent each key.
    key_users: HashMap<String, Few>,
    /// Every span taken in, so a re-sent one is recognised in constant time (a retry storm on
    /// one intent would otherwise make each add a scan of its attempts).
    attempt_spans: foldhash::HashSet<SpanRef>,
    /// The same for read-backs: the store keeps the two kinds apart, so the ledger does too.
    readback_spans: foldhash::HashSet<SpanRef>,
    /// The objects whose observations carry each key.
    key_objects: HashMap<String, Few>,
}

/// What an event changed: intents to re-audit, and pseudo-intents that no longer exist.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LedgerChange {
    pub affected: BTreeSet<String>,
    pub removed: BTreeSet<String>,
}

impl LedgerChange {
    pub fn merge(&mut self, other: LedgerChange) {
        for id in &other.removed {
            self.affected.remove(id);
        }
        self.affected.extend(
            other
                .affected
                .into_iter()
                .filter(|id| !other.removed.contains(id) && !self.removed.contains(id)),
        );
        self.removed.extend(other.removed);
    }
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    /// Intents and pseudo-intents, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = String> + '_ {
        let orphans = self
            .records
            .keys()
            .filter(|o| self.object_intents.get(*o).is_none_or(|s| s.is_empty()))
            .map(|o| format!("{ORPHAN_PREFIX}{o}"));
        self.intents.keys().cloned().chain(orphans)
    }

    pub fn len(&self) -> usize {
        self.ids().count()
    }

    pub fn is_empty(&self) -> bool {
        self.intents.is_empty() && self.records.is_empty()
    }

    /// The events linked to an intent or pseudo-intent.
    pub fn history(&self, id: &str) -> Option<History> {
        if let Some(object) = id.strip_prefix(ORPHAN_PREFIX) {
            if self
                .object_intents
                .get(object)
                .is_some_and(|s| !s.is_empty())
            {
                return None;
            }
            let records = self.records.get(object)?.clone();
            return Some(History {
                intent_id: id.to_string(),
                records,
                ..Default::default()
            });
        }
        let e = self.intents.get(id)?;
        let records = e
            .objects
            .iter()
            .filter_map(|o| self.records.get(o))
            .flatten()
            .cloned()
            .collect();
        Some(History {
            intent_id: id.to_string(),
            attempts: e.attempts.clone(),
            readbacks: e.readbacks.clone(),
            records,
        })
    }

    pub fn histories(&self) -> impl Iterator<Item = History> + '_ {
        self.ids().filter_map(move |id| self.history(&id))
    }

    /// The contract an intent is audited under: its tool's, or for a record-only intent, the
    /// one whose record kind its records carry.
    pub fn contract_for<'c>(history: &History, contracts: &'c Contracts) -> Option<&'c Contract> {
        // The earliest attempt (in canonical order, so arrival order cannot change the choice)
        // whose tool has a contract: a wrapper span carrying the intent id must not make a
        // contracted tool look uncontracted.
        if let Some(c) = history
            .attempts
            .iter()
            .filter_map(|a| {
                contracts
                    .for_tool(&a.tool)
                    .map(|c| ((a.start, a.end, a.span), c))
            })
            .min_by_key(|(order, _)| *order)
            .map(|(_, c)| c)
        {
            return Some(c);
        }
        if !history.attempts.is_empty() {
            return None;
        }
        if let Some(c) = history
            .readbacks
            .iter()
            .filter_map(|r| {
                contracts
                    .for_tool(&r.tool)
                    .map(|c| ((r.at, r.end, r.span), c))
            })
            .min_by_key(|(order, _)| *order)
            .map(|(_, c)| c)
        {
            return Some(c);
        }
        history
            .records
            .iter()
            .filter_map(|r| {
                let c = contracts.for_record_kind(r.kind.as_deref()?)?;
                Some((super::record_order(r), c))
            })
            .min_by_key(|(order, _)| *order)
            .map(|(_, c)| c)
    }

    /// Add one event. A re-sent event (same identity) changes nothing.
    pub fn add(&mut self, event: Event) -> LedgerChange {
        let mut change = LedgerChange::default();
        match event {
            Event::Attempt(a) => {
                if !self.attempt_spans.insert(a.span) {
                    return change;
                }
                let id = a.intent_id.clone();
                let e = self.intents.entry(id.clone()).or_default();
                let key = a.idempotency_key.clone();
                let object = a.object_id.clone();
                e.attempts.push(a);
                change.affected.insert(id.clone());
                if let Some(key) = key {
                    self.key_users
                        .entry(key.clone())
                        .or_default()
                        .insert(id.clone());
                    let objects: Vec<String> = self
                        .key_objects
                        .get(&key)
                        .into_iter()
                        .flatten()
                        .cloned()
                        .collect();
                    for o in objects {
                        self.link(&o, &id, &mut change);
                    }
                }
                if let Some(o) = object {
                    self.link(&o, &id, &mut change);
                }
            }
            Event::Readback(r) => {
                if !self.readback_spans.insert(r.span) {
                    return change;
                }
                let id = r.intent_id.clone();
                let e = self.intents.entry(id.clone()).or_default();
                // An object a read found belongs to the intent the read was for: its records
                // must reach this intent, not wait as an orphan.
                let found = r.object_ids.clone();
                e.readbacks.push(r);
                change.affected.insert(id.clone());
                for o in found {
                    self.link(&o, &id, &mut change);
                }
            }
            Event::Record(r) => {
                let object = r.object_id.clone();
                let observations = self.records.entry(object.clone()).or_default();
                if observations.iter().any(|x| same_record(x, &r)) {
                    return change;
                }
                observations.push(r.clone());
                let mut targets: BTreeSet<String> = BTreeSet::new();
                targets.extend(r.intent_id.clone());
                if let Some(key) = &r.idempotency_key {
                    self.key_objects
                        .entry(key.clone())
                        .or_default()
                        .insert(object.clone());
                    targets.extend(self.key_users.get(key).into_iter().flatten().cloned());
                }
                for id in targets {
                    self.intents.entry(id.clone()).or_default();
                    self.link(&object, &id, &mut change);
                }
                match self.object_intents.get(&object) {
                    Some(linked) if !linked.is_empty() => {
                        change.affected.extend(linked.iter().cloned())
                    }
                    _ => {
                        change.affected.insert(format!("{ORPHAN_PREFIX}{object}"));
                    }
                }
            }
        }
        change
    }

    fn link(&mut self, object: &str, intent: &str, change: &mut LedgerChange) {
        let linked = self.object_intents.entry(object.to_string()).or_default();
        let was_orphan = linked.is_empty() && self.records.contains_key(object);
        if linked.insert(intent.to_string()) {
            if let Some(e) = self.intents.get_mut(intent) {
                e.objects.insert(object.to_string());
            }
            change.affected.insert(intent.to_string());
            if was_orphan {
                let orphan = format!("{ORPHAN_PREFIX}{object}");
                change.affected.remove(&orphan);
                change.removed.insert(orphan);
            }
        }
    }
}

fn same_record(a: &RecordObservation, b: &RecordObservation) -> bool {
    a.source == b.source
        && a.object_id == b.object_id
        && a.status == b.status
        && a.observed_at == b.observed_at
}
