//! Linking events to intents, following DESIGN.md "Evidence attribution".
//!
//! Attempts and read-backs name their intent. Records are kept per downstream object, and every
//! object has at most one **owner**, decided from the whole set of evidence, never from the order
//! it arrived in:
//!
//! 1. the intent its records name by `intent_id` (the earliest observation that names one);
//! 2. failing that, the intent that first sent the key it was created with;
//! 3. failing that, the intent whose write response first returned it.
//!
//! An object owned by one intent is never another's effect: it is *foreign* to every other intent
//! that saw it (a read-back of "refunds for order 1042", a replayed response under a shared key).
//! An object with no owner that a read-back listed links to the reader *provisionally*, and moves
//! to its owner the moment one shows up; only to a reader that may have made it (it sent before
//! the object was there) and only while no other reader may have (one refund is not two
//! intents' effect). An object that links to nothing is audited under a pseudo-intent
//! `orphan:{object_id}` until something claims it: an old refund a reader listed is one.
//!
//! Object identity is (kind, id): the kind from the record, or from the contract of the attempt
//! that returned or read it. An observation whose kind is not known matches any kind, so a record
//! posted without `kind` still joins the response that returned its id.

use std::collections::BTreeSet;
use std::sync::Arc;

use foldhash::{HashMap, HashSet};

use super::{attempt_order, readback_order, record_order, History, SharedKey};
use crate::contract::{Contract, Contracts, Idempotency};
use crate::model::{
    effective_status, Attempt, Dur, Event, Readback, RecordObservation, ReportedOutcome, SpanRef,
    Timestamp,
};

pub use crate::model::ORPHAN_PREFIX;

type Order = (Timestamp, Timestamp, SpanRef);

/// How much earlier than a send the downstream's own time for an object must be to show that the
/// object was there first. Its clock is not the executor's, and Stripe's times are whole seconds:
/// a refund created 0.2 s after a send at 100.7 s says `created: 100`. Within the margin it stays
/// a candidate; a check-then-act's old refund is minutes or days older.
const DOWNSTREAM_CLOCK_MARGIN: Dur = Dur::secs(5);

/// A small set of strings kept sorted. Most keys and objects belong to one intent, and a
/// one-element B-tree set costs a node of a few hundred bytes; per open intent that adds up.
#[derive(Debug, Default, Clone)]
struct Few(Vec<String>);

impl Few {
    fn insert(&mut self, s: &str) -> bool {
        match self.0.binary_search_by(|x| x.as_str().cmp(s)) {
            Ok(_) => false,
            Err(i) => {
                if self.0.len() == self.0.capacity() && self.0.len() < 4 {
                    self.0.reserve_exact(1);
                }
                self.0.insert(i, s.to_string());
                true
            }
        }
    }

    fn contains(&self, s: &str) -> bool {
        self.0.binary_search_by(|x| x.as_str().cmp(s)).is_ok()
    }

    fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }
}

/// One intent's use of something (a key sent, an object returned): the earliest such attempt,
/// and the record kind its contract gives.
#[derive(Debug, Clone)]
struct Use {
    order: Order,
    /// The key of the intent in [`Ledger`]'s map, shared.
    intent: Arc<str>,
    kind: Option<Arc<str>>,
}

/// The intent of the earliest use whose kind matches.
fn earliest_use<'a>(uses: Option<&'a Vec<Use>>, kind: Option<&str>) -> Option<&'a str> {
    uses.into_iter()
        .flatten()
        .filter(|u| kinds_match(u.kind.as_deref(), kind))
        .min_by(|a, b| (a.order, &a.intent).cmp(&(b.order, &b.intent)))
        .map(|u| &*u.intent)
}

/// Keep the earliest use per intent.
fn note_use(uses: &mut Vec<Use>, u: Use) {
    match uses.iter_mut().find(|x| x.intent == u.intent) {
        Some(x) if u.order < x.order => *x = u,
        Some(_) => {}
        None => push_small(uses, u),
    }
}

/// Push without `Vec`'s first growth to four slots: most intents have one attempt, most keys
/// and objects one user, and the ledger holds them for every open intent (DESIGN.md "Memory
/// and history": memory per open intent is a target). Past four, the usual doubling.
fn push_small<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() && v.len() < 4 {
        v.reserve_exact(1);
    }
    v.push(x);
}

#[derive(Debug, Default)]
struct IntentEvents {
    attempts: Vec<KeptAttempt>,
    readbacks: Vec<Readback>,
}

/// An [`Attempt`] as the ledger keeps it, for every open intent (DESIGN.md "Memory and
/// history" sets a budget per open intent): without its intent id (the map's key), its tool and
/// error type shared with every other attempt that names the same ones ([`Interned`]), each
/// string boxed to its length. 144 bytes against an `Attempt`'s 240, and three allocations
/// fewer. [`KeptAttempt::attempt`] gives the event back as it came in.
#[derive(Debug)]
struct KeptAttempt {
    span: SpanRef,
    tool: Arc<str>,
    start: Timestamp,
    end: Timestamp,
    idempotency_key: Option<Box<str>>,
    http_status: Option<u16>,
    error_type: Option<Arc<str>>,
    span_error: bool,
    object_id: Option<Box<str>>,
    object_status: Option<Box<str>>,
    reported_outcome: Option<ReportedOutcome>,
    arguments: Option<Box<str>>,
}

impl KeptAttempt {
    fn keep(a: Attempt, names: &mut Interned) -> KeptAttempt {
        KeptAttempt {
            span: a.span,
            tool: names.get(&a.tool),
            start: a.start,
            end: a.end,
            idempotency_key: a.idempotency_key.map(String::into_boxed_str),
            http_status: a.http_status,
            error_type: a.error_type.as_deref().map(|e| names.get(e)),
            span_error: a.span_error,
            object_id: a.object_id.map(String::into_boxed_str),
            object_status: a.object_status.map(String::into_boxed_str),
            reported_outcome: a.reported_outcome,
            arguments: a.arguments.map(String::into_boxed_str),
        }
    }

    fn attempt(&self, intent_id: &str) -> Attempt {
        let text = |s: &Option<Box<str>>| s.as_deref().map(str::to_string);
        Attempt {
            span: self.span,
            intent_id: intent_id.to_string(),
            tool: self.tool.to_string(),
            start: self.start,
            end: self.end,
            idempotency_key: text(&self.idempotency_key),
            http_status: self.http_status,
            error_type: self.error_type.as_deref().map(str::to_string),
            span_error: self.span_error,
            object_id: text(&self.object_id),
            object_status: text(&self.object_status),
            reported_outcome: self.reported_outcome,
            arguments: text(&self.arguments),
        }
    }

    /// [`attempt_order`] without building the attempt.
    fn order(&self) -> Order {
        (self.start, self.end, self.span)
    }
}

/// Tool names and error types, one shared copy of each: they take a handful of values across
/// millions of attempts. Bounded, since both come from the wire: past [`Interned::MAX`]
/// distinct values a name gets a copy of its own, as if it were not interned.
#[derive(Debug, Default)]
struct Interned(HashSet<Arc<str>>);

impl Interned {
    const MAX: usize = 4096;

    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.0.get(name) {
            return shared.clone();
        }
        let name: Arc<str> = Arc::from(name);
        if self.0.len() < Self::MAX {
            self.0.insert(name.clone());
        }
        name
    }
}

#[derive(Debug, Default)]
pub struct Ledger {
    contracts: Arc<Contracts>,
    /// Each intent's own events; the key is the one copy of its id the ledger holds (its
    /// uses of keys and objects share it).
    intents: HashMap<Arc<str>, IntentEvents>,
    /// Every observation of every object, by object id.
    records: HashMap<String, Vec<RecordObservation>>,
    /// The objects whose records name each intent.
    named_objects: HashMap<String, Few>,
    /// The intents that sent each key (earliest send per intent).
    key_senders: HashMap<String, Vec<Use>>,
    /// The objects whose observations carry each key.
    key_objects: HashMap<String, Few>,
    /// The intents whose write responses returned each object (earliest per intent).
    responders: HashMap<String, Vec<Use>>,
    /// The intents whose read-backs listed each object.
    readers: HashMap<String, Few>,
    /// Objects that currently link to no intent (audited as `orphan:{id}`).
    orphans: HashSet<String>,
    /// Every span taken in, so a re-sent one is recognised in constant time (a retry storm on
    /// one intent would otherwise make each add a scan of its attempts).
    attempt_spans: HashSet<SpanRef>,
    /// The same for read-backs: the store keeps the two kinds apart, so the ledger does too.
    readback_spans: HashSet<SpanRef>,
    /// The tool names and error types its attempts share.
    names: Interned,
}

/// What an event changed: intents to re-audit, and pseudo-intents that no longer exist.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LedgerChange {
    pub affected: BTreeSet<String>,
    pub removed: BTreeSet<String>,
}

impl LedgerChange {
    /// `other` came after `self`: where they disagree, the later state wins (a pseudo-intent
    /// removed by one event may exist again after the next: an orphan whose only candidate
    /// reader is set aside by a late read-back).
    pub fn merge(&mut self, other: LedgerChange) {
        for id in &other.removed {
            self.affected.remove(id);
        }
        for id in other.affected {
            if !other.removed.contains(&id) {
                self.removed.remove(&id);
                self.affected.insert(id);
            }
        }
        self.removed.extend(other.removed);
    }
}

/// Two observations can be of one object unless both kinds are known and differ.
fn kinds_match(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// How an object relates to one intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    Own,
    Provisional,
    Foreign,
}

impl Ledger {
    /// A ledger with no contracts: object identity is the id alone. Tests of linking use it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A ledger that knows each tool's record kind, so objects of two downstreams that reuse an
    /// id stay apart.
    pub fn with_contracts(contracts: Arc<Contracts>) -> Self {
        Ledger {
            contracts,
            ..Self::default()
        }
    }

    /// The same evidence under other contracts. The indexes depend on contracts only through
    /// the record kinds of tools ([`Ledger::tool_kind`], kept in each use of a key or object):
    /// when no tool's kind changed they stand and only the contracts are swapped (ownership
    /// and candidacy are judged live under the contracts in force; the orphan set is decided
    /// again), so a reload that changes a window or a limit costs little here; otherwise
    /// every event is linked again.
    pub fn under(mut self, contracts: Arc<Contracts>) -> Ledger {
        let kind =
            |set: &Contracts, tool: &str| set.for_tool(tool).and_then(|c| c.record_kind.clone());
        let same_kinds = self
            .contracts
            .contracts
            .iter()
            .chain(&contracts.contracts)
            .flat_map(|c| &c.tools)
            .all(|tool| kind(&self.contracts, tool) == kind(&contracts, tool));
        if same_kinds {
            self.contracts = contracts;
            // What counts as executed may have changed (a status moved in or out of
            // `not_executed_status`), and with it which reader may have made what: the
            // orphan set is decided again (ownership is decided live, from the attempts).
            let objects: Vec<String> = self.objects_ever_unnamed().map(str::to_string).collect();
            self.update_orphans(&objects, &mut LedgerChange::default());
            return self;
        }
        let mut relinked = Ledger::with_contracts(contracts);
        for e in self.events() {
            relinked.add(e);
        }
        relinked
    }

    /// Intents and pseudo-intents, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = String> + '_ {
        let orphans = self.orphans.iter().map(|o| format!("{ORPHAN_PREFIX}{o}"));
        self.intents.keys().map(|id| id.to_string()).chain(orphans)
    }

    /// Every event the ledger holds, in no particular order: a ledger built with other
    /// contracts from them links the same evidence under those contracts' record kinds.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        let own = self.intents.iter().flat_map(|(id, e)| {
            e.attempts
                .iter()
                .map(|a| Event::Attempt(a.attempt(id)))
                .chain(e.readbacks.iter().cloned().map(Event::Readback))
        });
        let records = self
            .records
            .values()
            .flat_map(|rs| rs.iter().cloned().map(Event::Record));
        own.chain(records)
    }

    /// The shared key of an intent's entry, which is created (empty) if it has none yet.
    fn intent_key(&mut self, id: &str) -> Arc<str> {
        if let Some((key, _)) = self.intents.get_key_value(id) {
            return key.clone();
        }
        let key: Arc<str> = Arc::from(id);
        self.intents.insert(key.clone(), IntentEvents::default());
        key
    }

    pub fn len(&self) -> usize {
        self.intents.len() + self.orphans.len()
    }

    /// Whether any observation of `object` is in memory.
    pub fn has_records_of(&self, object: &str) -> bool {
        self.records.contains_key(object)
    }

    /// The objects with an observation in memory that names no intent: the only ones that can
    /// ever have been orphans (an object whose every record names an intent was owned from its
    /// first record on).
    pub fn objects_ever_unnamed(&self) -> impl Iterator<Item = &str> {
        self.records
            .iter()
            .filter(|(_, rs)| rs.iter().any(|r| r.intent_id.is_none()))
            .map(|(o, _)| o.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.intents.is_empty() && self.records.is_empty()
    }

    fn tool_kind(&self, tool: &str) -> Option<Arc<str>> {
        self.contracts
            .for_tool(tool)
            .and_then(|c| c.record_kind.as_deref())
            .map(Arc::from)
    }

    /// The record kind of an intent's objects: from its contract (the one its earliest contracted
    /// attempt, else read-back, names), else from the records that name it.
    fn intent_kind(&self, id: &str) -> Option<String> {
        let e = self.intents.get(id)?;
        let contracted = |tool: &str| self.contracts.for_tool(tool);
        let by_attempt = e
            .attempts
            .iter()
            .filter_map(|a| contracted(&a.tool).map(|c| (a.order(), c)))
            .min_by_key(|(o, _)| *o)
            .map(|(_, c)| c);
        let contract: Option<&Contract> = match by_attempt {
            Some(c) => Some(c),
            None if !e.attempts.is_empty() => None,
            None => e
                .readbacks
                .iter()
                .filter_map(|r| contracted(&r.tool).map(|c| (readback_order(r), c)))
                .min_by_key(|(o, _)| *o)
                .map(|(_, c)| c),
        };
        if let Some(c) = contract {
            return c.record_kind.clone();
        }
        if !e.attempts.is_empty() {
            return None;
        }
        self.named_objects
            .get(id)
            .into_iter()
            .flat_map(|objects| objects.iter())
            .filter_map(|o| self.records.get(o))
            .flatten()
            .filter(|r| r.intent_id.as_deref() == Some(id) && r.kind.is_some())
            .min_by(|a, b| record_order(a).cmp(&record_order(b)))
            .and_then(|r| r.kind.clone())
    }

    /// The kind of object a record observes (DESIGN.md "Evidence attribution" 1): its own, else
    /// that of the intent it names (the contract of the send that made it), else unknown, which
    /// matches any kind. Two systems that both number from 1001: the reconciler's draft record
    /// 1001 naming the draft intent without `kind` is a draft, never the refund 1001 another
    /// intent's key made.
    fn record_kind(&self, r: &RecordObservation) -> Option<String> {
        if let Some(kind) = &r.kind {
            return Some(kind.clone());
        }
        self.intent_kind(r.intent_id.as_deref()?)
    }

    /// The owner of object `object` as seen with kind `kind` (DESIGN.md "Evidence attribution" 2).
    fn owner(&self, kind: Option<&str>, object: &str) -> Option<&str> {
        let records: Vec<&RecordObservation> = self
            .records
            .get(object)
            .into_iter()
            .flatten()
            .filter(|r| kinds_match(self.record_kind(r).as_deref(), kind))
            .collect();
        let earliest_with = |has: &dyn Fn(&RecordObservation) -> bool| {
            records
                .iter()
                .filter(|r| has(r))
                .min_by(|a, b| record_order(a).cmp(&record_order(b)))
                .copied()
        };
        if let Some(r) = earliest_with(&|r| r.intent_id.is_some()) {
            return r.intent_id.as_deref();
        }
        if let Some(r) = earliest_with(&|r| r.idempotency_key.is_some()) {
            let key = r.idempotency_key.as_deref().unwrap_or_default();
            if let Some(sender) = self.first_to_execute(key, kind) {
                return Some(sender);
            }
        }
        let responder = earliest_use(self.responders.get(object), kind)?;
        // Rule 4: where the downstream keeps keys, a response under a key is the key's first
        // execution's object (`replay`: its saved response; `converge`: the operation that key
        // started, driven on), and another intent's send may have been that execution: the
        // object was created with the key, so it is the first sender's to execute. (A record
        // carrying the key says the same above; a response must not say otherwise.)
        if let Some(key) = self.keyed_response(responder, object) {
            return self.first_to_execute(key, kind).or(Some(responder));
        }
        Some(responder)
    }

    /// The intent whose send of `key` executed first (rule 2's "the intent that sent the key it
    /// was created with"; a rejected send created nothing, rule 7). Judged from the attempts
    /// each time, under the contracts in force, so a reload that changes what counts as
    /// executed moves ownership as a restart would.
    fn first_to_execute(&self, key: &str, kind: Option<&str>) -> Option<&str> {
        self.key_senders
            .get(key)
            .into_iter()
            .flatten()
            .filter(|u| kinds_match(u.kind.as_deref(), kind))
            .filter_map(|u| {
                let e = self.intents.get(&*u.intent)?;
                // The send's own downstream: an intent's wrapper span carrying the key names
                // none, so its use of the key matches every kind, but its sends do not.
                let earliest = e
                    .attempts
                    .iter()
                    .filter(|a| {
                        a.idempotency_key.as_deref() == Some(key)
                            && self.executed(e, a)
                            && kinds_match(self.tool_kind(&a.tool).as_deref(), kind)
                    })
                    .map(KeptAttempt::order)
                    .min()?;
                Some((earliest, &*u.intent))
            })
            .min()
            .map(|(_, intent)| intent)
    }

    /// The objects made under `key` as far as the ledger knows: those whose records carry it,
    /// and those a send of it returned.
    fn objects_under(&self, key: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .key_objects
            .get(key)
            .into_iter()
            .flat_map(|f| f.iter().cloned())
            .collect();
        for u in self.key_senders.get(key).into_iter().flatten() {
            let attempts = self
                .intents
                .get(&*u.intent)
                .into_iter()
                .flat_map(|e| &e.attempts);
            out.extend(
                attempts
                    .filter(|a| a.idempotency_key.as_deref() == Some(key))
                    .filter_map(|a| a.object_id.as_deref().map(str::to_string)),
            );
        }
        out
    }

    /// The key `intent`'s earliest attempt that returned `object` carried, when its tool's
    /// contract has the downstream keep keys (`replay` or `converge`).
    fn keyed_response(&self, intent: &str, object: &str) -> Option<&str> {
        let a = self
            .intents
            .get(intent)?
            .attempts
            .iter()
            .filter(|a| a.object_id.as_deref() == Some(object))
            .min_by_key(|a| a.order())?;
        let keeps_keys = self
            .contracts
            .for_tool(&a.tool)
            .is_some_and(|c| c.idempotency != Idempotency::None);
        a.idempotency_key.as_deref().filter(|_| keeps_keys)
    }

    /// Whether an attempt of intent `e` executed, as far as ownership by key goes: neither
    /// `rejected` nor a `conflict` (the downstream refused it for a concurrent request under
    /// its key, and saved nothing) under its tool's contract, and of a contracted tool unless
    /// the intent has none (a wrapper span of another tool carrying the executor's attributes
    /// is not a send).
    fn executed(&self, e: &IntentEvents, a: &KeptAttempt) -> bool {
        let contract = match self.contracts.for_tool(&a.tool) {
            Some(c) => c,
            None if e
                .attempts
                .iter()
                .any(|x| self.contracts.for_tool(&x.tool).is_some()) =>
            {
                return false
            }
            None => super::fallback_contract(),
        };
        let status = effective_status(a.http_status, a.error_type.as_deref());
        !super::classify::rejected(status, contract) && !super::classify::conflict(status, contract)
    }

    /// The contract of an intent's earliest contracted attempt: the one it is audited under.
    fn primary_contract(&self, e: &IntentEvents) -> Option<&Contract> {
        e.attempts
            .iter()
            .filter_map(|x| self.contracts.for_tool(&x.tool).map(|c| (x.order(), c)))
            .min_by_key(|(order, _)| *order)
            .map(|(_, c)| c)
    }

    /// Whether an attempt is a send of the write of an intent audited under `primary`, which
    /// the audit judges: a span of its contract's tools, or of another contract's that makes
    /// objects of the same record kind (the downstream's second endpoint for one refund: a
    /// retry through it is a second send, and its refund the intent's). A wrapper span of an
    /// uncontracted tool that carries the executor's attributes is not, nor is a span of a
    /// contract for another kind of object. With no contracted attempt, every attempt is.
    fn sends_its_write(&self, primary: Option<&Contract>, a: &KeptAttempt) -> bool {
        let Some(primary) = primary else {
            return true;
        };
        self.contracts.for_tool(&a.tool).is_some_and(|c| {
            c.name == primary.name
                || (primary.record_kind.is_some() && c.record_kind == primary.record_kind)
        })
    }

    /// When intent `e` first executed a send of its write: the earliest moment an effect of
    /// its can exist. A send to another downstream (an email before the refund) is not one.
    fn first_send(&self, e: &IntentEvents) -> Option<Timestamp> {
        let primary = self.primary_contract(e);
        e.attempts
            .iter()
            .filter(|a| self.sends_its_write(primary, a) && self.executed(e, a))
            .map(|a| a.start)
            .min()
    }

    /// The intents that sent `key`.
    fn senders_of<'a>(&'a self, key: &str) -> impl Iterator<Item = String> + 'a {
        self.key_senders
            .get(key)
            .into_iter()
            .flatten()
            .map(|u| u.intent.to_string())
    }

    /// Every intent that may see `object` as evidence: named by its records, sender of a key
    /// its records carry or it was returned under, returned it, or read it.
    fn stakeholders(&self, object: &str, into: &mut BTreeSet<String>) {
        for r in self.records.get(object).into_iter().flatten() {
            into.extend(r.intent_id.iter().cloned());
            if let Some(k) = &r.idempotency_key {
                into.extend(self.senders_of(k));
            }
        }
        for u in self.responders.get(object).into_iter().flatten() {
            into.insert(u.intent.to_string());
            // Every sender of a key it was returned under may own it (rule 4).
            let keys = self
                .intents
                .get(&*u.intent)
                .into_iter()
                .flat_map(|e| &e.attempts)
                .filter(|a| a.object_id.as_deref() == Some(object))
                .filter_map(|a| a.idempotency_key.as_deref());
            for k in keys {
                into.extend(self.senders_of(k));
            }
        }
        into.extend(
            self.readers
                .get(object)
                .into_iter()
                .flat_map(|f| f.iter().cloned()),
        );
    }

    /// Whether `object` (or its observations of one kind) links to no intent: it has records
    /// of a kind that no intent owns and no reader holds (audited as `orphan:{object}`). Not
    /// quite "in no intent's history": an owner whose own kind excludes those records holds
    /// them nowhere (the ignored test `a_refund_owned_through_another_kinds_record_is_still_reported`).
    fn is_orphan(&self, object: &str) -> bool {
        let Some(records) = self.records.get(object) else {
            return false;
        };
        let kinds: BTreeSet<Option<String>> = records.iter().map(|r| self.record_kind(r)).collect();
        kinds
            .into_iter()
            .any(|kind| self.unclaimed(kind.as_deref(), object))
    }

    /// Whether `object`'s records of kind `kind` reach no intent: no owner, and no reader of a
    /// matching kind holds it provisionally (none may have made it, or two may have: one
    /// refund is not two intents' effect, and nothing says whose).
    fn unclaimed(&self, kind: Option<&str>, object: &str) -> bool {
        self.owner(kind, object).is_none()
            && !self
                .readers
                .get(object)
                .into_iter()
                .flat_map(|f| f.iter())
                .any(|r| {
                    let own = self.intent_kind(r);
                    kinds_match(own.as_deref(), kind)
                        && self.link(r, own.as_deref(), object) == Link::Provisional
                })
    }

    /// Bring the orphan set up to date for objects an event touched.
    fn update_orphans<'a>(
        &mut self,
        objects: impl IntoIterator<Item = &'a String>,
        change: &mut LedgerChange,
    ) {
        for o in objects {
            let pseudo = format!("{ORPHAN_PREFIX}{o}");
            if self.is_orphan(o) {
                self.orphans.insert(o.clone());
                change.affected.insert(pseudo);
            } else if self.orphans.remove(o.as_str()) {
                change.affected.remove(&pseudo);
                change.removed.insert(pseudo);
            }
        }
    }

    /// DESIGN.md "Evidence attribution" 3, in time: whether the unowned `object` can be the
    /// effect of `reader` (whose objects have kind `kind`), an intent whose read-back listed
    /// it. Only an intent that executed a send can have made it, and not when the evidence
    /// shows it was there first: a read-back of the reader's that ended before its first send
    /// began (one clock, the executor's: check-then-act's "refunds for order 1042"), or the
    /// downstream's own observation or creation time more than [`DOWNSTREAM_CLOCK_MARGIN`]
    /// before it (an old refund listed again after the send). Linked to the reader, an object
    /// that was there first would make its timed-out send `completed`.
    fn may_have_made(&self, reader: &str, kind: Option<&str>, object: &str) -> bool {
        let Some(e) = self.intents.get(reader) else {
            return false;
        };
        self.first_send(e)
            .is_some_and(|sent| self.made_after(e, sent, kind, object))
    }

    /// [`Ledger::may_have_made`] for an intent `e` whose first send began at `sent`.
    fn made_after(
        &self,
        e: &IntentEvents,
        sent: Timestamp,
        kind: Option<&str>,
        object: &str,
    ) -> bool {
        let listed_before = e
            .readbacks
            .iter()
            .any(|r| r.end <= sent && r.object_ids.iter().any(|o| o == object));
        let downstream_before = sent - DOWNSTREAM_CLOCK_MARGIN;
        let there_before = self
            .records
            .get(object)
            .into_iter()
            .flatten()
            .filter(|r| kinds_match(self.record_kind(r).as_deref(), kind))
            .any(|r| {
                r.observed_at < downstream_before
                    || r.created_at.is_some_and(|t| t < downstream_before)
            });
        !listed_before && !there_before
    }

    /// Whether another reader of the unowned `object` may as well have made it
    /// ([`Ledger::may_have_made`]). One object is at most one intent's effect, and nothing
    /// says whose: it is none of theirs until its owner shows up (DESIGN.md "Evidence
    /// attribution" 3).
    /// A reader of another kind contests it too when the object has a record that names no
    /// kind: either may be the one whose effect that record shows.
    fn contested(&self, id: &str, kind: Option<&str>, object: &str) -> bool {
        self.contested_apart_from(id, kind, object, None)
    }

    /// [`Ledger::contested`] by a reader other than `id` and `apart`.
    fn contested_apart_from(
        &self,
        id: &str,
        kind: Option<&str>,
        object: &str,
        apart: Option<&str>,
    ) -> bool {
        let Some(readers) = self.readers.get(object) else {
            return false;
        };
        let kindless = self
            .records
            .get(object)
            .is_some_and(|rs| rs.iter().any(|r| self.record_kind(r).is_none()));
        // A record naming no kind that an intent of another kind owns is in that owner's
        // history already: it is not this reader's to hold as well.
        if kindless && self.owner(None, object).is_some_and(|w| w != id) {
            return true;
        }
        let mut others = readers
            .iter()
            .filter(|r| r.as_str() != id && Some(r.as_str()) != apart);
        others.any(|r| {
            let own = self.intent_kind(r);
            (kindless || kinds_match(own.as_deref(), kind))
                && self.may_have_made(r, own.as_deref(), object)
        })
    }

    /// Which of `objects` intent `reader` may have made ([`Ledger::may_have_made`], under its
    /// own kind), as flags in the same order. Whether someone owns the object does not enter:
    /// an object owned under one kind may be unowned under another reader's.
    fn candidacies(&self, reader: &str, objects: &[String]) -> Vec<bool> {
        let e = match self.intents.get(reader) {
            Some(e) if !objects.is_empty() => e,
            _ => return vec![false; objects.len()],
        };
        let kind = self.intent_kind(reader);
        let kind = kind.as_deref();
        let sent = self.first_send(e);
        objects
            .iter()
            .map(|o| sent.is_some_and(|sent| self.made_after(e, sent, kind, o)))
            .collect()
    }

    /// `reader`'s candidacy for these objects may have changed (`changed`, in the same order).
    /// Another reader's link to such an object changes with it only if that reader may have
    /// made it too and nobody else contests it: only those look again, so the thousandth agent
    /// to list an order's refunds does not re-audit the other 999.
    fn contest_changed(
        &self,
        reader: &str,
        objects: &[String],
        changed: &[bool],
        change: &mut LedgerChange,
    ) {
        for (o, _) in objects.iter().zip(changed).filter(|(_, c)| **c) {
            let others = self.readers.get(o).into_iter().flat_map(|f| f.iter());
            for x in others.filter(|x| x.as_str() != reader) {
                let own = self.intent_kind(x);
                if self.may_have_made(x, own.as_deref(), o)
                    && !self.contested_apart_from(x, own.as_deref(), o, Some(reader))
                {
                    change.affected.insert(x.clone());
                }
            }
        }
    }

    /// How `object` relates to intent `id` (whose objects have kind `kind`).
    fn link(&self, id: &str, kind: Option<&str>, object: &str) -> Link {
        match self.owner(kind, object) {
            Some(owner) if owner == id => Link::Own,
            Some(_) => Link::Foreign,
            None if self.readers.get(object).is_some_and(|r| r.contains(id))
                && self.may_have_made(id, kind, object)
                && !self.contested(id, kind, object) =>
            {
                Link::Provisional
            }
            // Listed, but there before its send or contested by another reader; or seen by
            // this intent otherwise (a key it sent, a response it got) yet owned by nobody of
            // its kind, which a key or a response cannot be. Kept apart rather than guessed.
            None => Link::Foreign,
        }
    }

    /// The events attributed to an intent or pseudo-intent.
    pub fn history(&self, id: &str) -> Option<History> {
        if let Some(object) = id.strip_prefix(ORPHAN_PREFIX) {
            if !self.orphans.contains(object) {
                return None;
            }
            // Only its unclaimed observations: one downstream's draft 1001 may be an intent's
            // while another's refund 1001 links to nothing.
            let records: Vec<RecordObservation> = self
                .records
                .get(object)?
                .iter()
                .filter(|r| self.unclaimed(self.record_kind(r).as_deref(), object))
                .cloned()
                .collect();
            return Some(History {
                intent_id: id.to_string(),
                records,
                ..Default::default()
            });
        }
        let e = self.intents.get(id)?;
        let kind = self.intent_kind(id);
        let kind = kind.as_deref();

        let mut candidates: BTreeSet<&str> = BTreeSet::new();
        candidates.extend(
            self.named_objects
                .get(id)
                .into_iter()
                .flat_map(|f| f.iter().map(String::as_str)),
        );
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        for a in &e.attempts {
            if let Some(k) = a.idempotency_key.as_deref() {
                keys.insert(k);
            }
            candidates.extend(a.object_id.as_deref());
        }
        for k in &keys {
            candidates.extend(
                self.key_objects
                    .get(*k)
                    .into_iter()
                    .flat_map(|f| f.iter().map(String::as_str)),
            );
        }
        for r in &e.readbacks {
            candidates.extend(r.object_ids.iter().map(String::as_str));
        }
        // Objects returned to another sender of one of its keys that are its own (rule 4).
        let mut answered_elsewhere = Vec::new();
        for k in &keys {
            for u in self.key_senders.get(*k).into_iter().flatten() {
                let Some(other) = self.intents.get(&*u.intent).filter(|_| &*u.intent != id) else {
                    continue;
                };
                for a in &other.attempts {
                    let Some(o) = a.object_id.as_deref() else {
                        continue;
                    };
                    if a.idempotency_key.as_deref() == Some(*k) && self.owner(kind, o) == Some(id) {
                        candidates.insert(o);
                        answered_elsewhere.push(a.attempt(&u.intent));
                    }
                }
            }
        }

        let mut records = Vec::new();
        let mut foreign = Vec::new();
        let mut provisional = Vec::new();
        for object in candidates {
            let link = self.link(id, kind, object);
            match link {
                Link::Foreign => foreign.push(object.to_string()),
                Link::Own | Link::Provisional => {
                    if link == Link::Provisional {
                        provisional.push(object.to_string());
                    }
                    records.extend(
                        self.records
                            .get(object)
                            .into_iter()
                            .flatten()
                            .filter(|r| kinds_match(self.record_kind(r).as_deref(), kind))
                            .cloned(),
                    );
                }
            }
        }

        let mut shared_keys = Vec::new();
        for k in keys {
            // Keys are the downstream's: one string sent to two downstreams is two keys. A
            // sender's downstream is its intent's kind, not its span's (a wrapper span carrying
            // the key names none).
            let mut by_order: Vec<&Use> = self
                .key_senders
                .get(k)
                .into_iter()
                .flatten()
                .filter(|u| kinds_match(self.intent_kind(&u.intent).as_deref(), kind))
                .collect();
            if by_order.len() < 2 {
                continue;
            }
            by_order.sort_by(|a, b| (a.order, &a.intent).cmp(&(b.order, &b.intent)));
            shared_keys.push(SharedKey {
                key: k.to_string(),
                first_intent: by_order[0].intent.to_string(),
                others: by_order
                    .iter()
                    .filter(|u| &*u.intent != id)
                    .map(|u| u.intent.to_string())
                    .collect(),
                shared_at: by_order[1].order.0,
            });
        }

        Some(History {
            intent_id: id.to_string(),
            attempts: {
                let primary = self.primary_contract(e);
                e.attempts
                    .iter()
                    .filter(|a| self.sends_its_write(primary, a))
                    .map(|a| a.attempt(id))
                    .collect()
            },
            readbacks: e.readbacks.clone(),
            records,
            foreign,
            provisional,
            shared_keys,
            answered_elsewhere,
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
            .filter_map(|a| contracts.for_tool(&a.tool).map(|c| (attempt_order(a), c)))
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
            .filter_map(|r| contracts.for_tool(&r.tool).map(|c| (readback_order(r), c)))
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
                Some((record_order(r), c))
            })
            .min_by_key(|(order, _)| *order)
            .map(|(_, c)| c)
    }

    /// Everything this intent may see: objects named by its records, carrying its keys,
    /// returned by its responses or listed by its read-backs, and the keys it sent.
    fn reach(&self, id: &str) -> (BTreeSet<&str>, BTreeSet<&str>) {
        let mut objects: BTreeSet<&str> = BTreeSet::new();
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        objects.extend(
            self.named_objects
                .get(id)
                .into_iter()
                .flat_map(|f| f.iter().map(String::as_str)),
        );
        if let Some(e) = self.intents.get(id) {
            for a in &e.attempts {
                keys.extend(a.idempotency_key.as_deref());
                objects.extend(a.object_id.as_deref());
            }
            for r in &e.readbacks {
                objects.extend(r.object_ids.iter().map(String::as_str));
            }
        }
        for k in &keys {
            objects.extend(
                self.key_objects
                    .get(*k)
                    .into_iter()
                    .flat_map(|f| f.iter().map(String::as_str)),
            );
        }
        (objects, keys)
    }

    /// The routes by which later evidence can concern this intent (DESIGN.md "Memory and
    /// history"): its id (`i:`), every key it sent or its objects' records carry (`k:`), every
    /// object it may see (`o:`). [`Event::routes`] gives an incoming event's. An orphan record's
    /// pseudo-intent has its object and the keys its records carry: what a claim arrives by.
    pub fn routes(&self, id: &str) -> Vec<String> {
        if let Some(object) = id.strip_prefix(ORPHAN_PREFIX) {
            let keys: BTreeSet<&str> = self
                .records
                .get(object)
                .into_iter()
                .flatten()
                .filter_map(|r| r.idempotency_key.as_deref())
                .collect();
            let mut out: Vec<String> = keys.into_iter().map(|k| format!("k:{k}")).collect();
            out.push(format!("o:{object}"));
            return out;
        }
        let (objects, keys) = self.reach(id);
        let mut out = vec![format!("i:{id}")];
        let mut all_keys: BTreeSet<&str> = keys;
        for o in &objects {
            for r in self.records.get(*o).into_iter().flatten() {
                all_keys.extend(r.idempotency_key.as_deref());
            }
        }
        out.extend(all_keys.into_iter().map(|k| format!("k:{k}")));
        out.extend(objects.into_iter().map(|o| format!("o:{o}")));
        out
    }

    /// Whether nothing this intent may see concerns another intent in memory: it can leave
    /// memory without changing anyone else's evidence. An orphan record can when no intent in
    /// memory sees its object; one that a reader in memory listed (an old refund a
    /// check-then-act read), or whose id another downstream's object in memory shares, leaves
    /// with them ([`Ledger::linked`]).
    pub fn is_isolated(&self, id: &str) -> bool {
        let group = BTreeSet::from([id]);
        match id.strip_prefix(ORPHAN_PREFIX) {
            Some(object) => self.orphan_isolated_within(object, &group),
            None => self.is_isolated_within(id, &group),
        }
    }

    /// Whether everything this intent may see concerns only members of `group` (intents, and
    /// the pseudo-intents of orphan records in its reach).
    fn is_isolated_within(&self, id: &str, group: &BTreeSet<&str>) -> bool {
        if !self.intents.contains_key(id) {
            return false;
        }
        let (objects, keys) = self.reach(id);
        let within = |uses: Option<&Vec<Use>>| {
            uses.into_iter()
                .flatten()
                .all(|u| group.contains(&*u.intent))
        };
        keys.iter().all(|k| within(self.key_senders.get(*k)))
            && objects.iter().all(|o| {
                let mut others = BTreeSet::new();
                self.stakeholders(o, &mut others);
                others.iter().all(|x| group.contains(x.as_str()))
                    && (!self.orphans.contains(*o)
                        || group.contains(format!("{ORPHAN_PREFIX}{o}").as_str()))
            })
    }

    /// Whether `object` is an orphan record that only members of `group` (or intents not in
    /// memory) see.
    fn orphan_isolated_within(&self, object: &str, group: &BTreeSet<&str>) -> bool {
        let mut others = BTreeSet::new();
        self.stakeholders(object, &mut others);
        self.orphans.contains(object)
            && self.is_orphan(object)
            && others
                .iter()
                .all(|x| group.contains(x.as_str()) || !self.intents.contains_key(x.as_str()))
    }

    /// The intents linked to `id` in memory, itself included: those that share a key or an
    /// object with it, and theirs in turn, and the pseudo-intents of orphan records among
    /// those objects (an old refund its reader set aside). `None` past `limit` members.
    pub fn linked(&self, id: &str, limit: usize) -> Option<BTreeSet<String>> {
        let mut group = BTreeSet::from([id.to_string()]);
        let mut todo = vec![id.to_string()];
        while let Some(x) = todo.pop() {
            let (objects, keys) = match x.strip_prefix(ORPHAN_PREFIX) {
                Some(object) => (BTreeSet::from([object]), BTreeSet::new()),
                None => self.reach(&x),
            };
            let mut next = BTreeSet::new();
            for k in keys {
                next.extend(self.senders_of(k));
            }
            for o in objects {
                if self.orphans.contains(o) {
                    next.insert(format!("{ORPHAN_PREFIX}{o}"));
                }
                self.stakeholders(o, &mut next);
            }
            for y in next {
                // A record may name an intent that sent nothing (yet): not in memory, not held.
                let here = match y.strip_prefix(ORPHAN_PREFIX) {
                    Some(o) => self.orphans.contains(o),
                    None => self.intents.contains_key(y.as_str()),
                };
                if here && group.insert(y.clone()) {
                    if group.len() > limit {
                        return None;
                    }
                    todo.push(y);
                }
            }
        }
        Some(group)
    }

    /// Take an isolated intent and the evidence only it holds out of memory; its events stay in
    /// the store, and [`Ledger::add`] of them brings it back identical. Returns false (and
    /// changes nothing) when the intent is not isolated.
    pub fn evict(&mut self, id: &str) -> bool {
        self.evict_group(&BTreeSet::from([id.to_string()]))
    }

    /// [`Ledger::evict`] for intents that leave together: each may share keys and objects with
    /// the others (one read the refund another made, two sent one key), none with an intent
    /// that stays. Returns false (and changes nothing) otherwise.
    pub fn evict_group(&mut self, ids: &BTreeSet<String>) -> bool {
        let group: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let (orphans, intents): (BTreeSet<&str>, BTreeSet<&str>) =
            group.iter().partition(|id| id.starts_with(ORPHAN_PREFIX));
        let orphans: BTreeSet<&str> = orphans
            .iter()
            .filter_map(|id| id.strip_prefix(ORPHAN_PREFIX))
            .collect();
        if group.is_empty()
            || !intents.iter().all(|id| self.is_isolated_within(id, &group))
            || !orphans
                .iter()
                .all(|o| self.orphan_isolated_within(o, &group))
        {
            return false;
        }
        let (mut objects, mut keys) = (BTreeSet::new(), BTreeSet::new());
        objects.extend(orphans.iter().map(|o| o.to_string()));
        for id in &intents {
            let (o, k) = self.reach(id);
            objects.extend(o.into_iter().map(str::to_string));
            keys.extend(k.into_iter().map(str::to_string));
        }
        for id in &intents {
            if let Some(e) = self.intents.remove(*id) {
                for a in &e.attempts {
                    self.attempt_spans.remove(&a.span);
                }
                for r in &e.readbacks {
                    self.readback_spans.remove(&r.span);
                }
            }
            self.named_objects.remove(*id);
        }
        for k in &keys {
            self.key_senders.remove(k);
        }
        for o in &objects {
            self.orphans.remove(o.as_str());
            self.responders.remove(o);
            self.readers.remove(o);
            self.forget_records(o);
        }
        true
    }

    /// Drop every observation of `object` and its place among its keys' objects.
    fn forget_records(&mut self, object: &str) {
        if let Some(records) = self.records.remove(object) {
            for key in records.iter().filter_map(|r| r.idempotency_key.as_deref()) {
                if let Some(f) = self.key_objects.get_mut(key) {
                    f.0.retain(|x| x != object);
                    if f.0.is_empty() {
                        self.key_objects.remove(key);
                    }
                }
            }
        }
    }

    /// Add one event. A re-sent event (same identity) changes nothing.
    pub fn add(&mut self, event: Event) -> LedgerChange {
        let mut change = LedgerChange::default();
        let mut touched: Vec<String> = Vec::new();
        match event {
            Event::Attempt(a) => {
                if !self.attempt_spans.insert(a.span) {
                    return change;
                }
                // A send can make its intent a candidate for what its read-backs listed (or,
                // turning its wrappers into no sends, stop it being one).
                let listed: Vec<String> = self
                    .intents
                    .get(a.intent_id.as_str())
                    .into_iter()
                    .flat_map(|e| &e.readbacks)
                    .flat_map(|r| r.object_ids.iter().cloned())
                    .collect::<BTreeSet<String>>()
                    .into_iter()
                    .collect();
                let before = self.candidacies(&a.intent_id, &listed);
                // Its kind is its earliest contracted attempt's (else its first attempt's):
                // only a first attempt, or a contracted one earlier than every contracted one
                // it has, can change it. Checked without a scan in a retry storm, where the
                // first attempt is earlier than each new one.
                let contracted = self.contracts.for_tool(&a.tool).is_some();
                let kind_before = self.intents.get(a.intent_id.as_str()).and_then(|e| {
                    let may_change = e.attempts.is_empty()
                        || (contracted
                            && !e.attempts.iter().any(|x| {
                                x.order() < attempt_order(&a)
                                    && self.contracts.for_tool(&x.tool).is_some()
                            }));
                    may_change.then(|| self.intent_kind(&a.intent_id))
                });
                let reader = a.intent_id.clone();
                let id = self.intent_key(&a.intent_id);
                let kind = self.tool_kind(&a.tool);
                let order = attempt_order(&a);
                change.affected.insert(a.intent_id.clone());
                if let Some(key) = &a.idempotency_key {
                    let senders = self.key_senders.entry(key.clone()).or_default();
                    note_use(
                        senders,
                        Use {
                            order,
                            intent: id.clone(),
                            kind: kind.clone(),
                        },
                    );
                    // Every sender of a shared key carries the finding.
                    change
                        .affected
                        .extend(senders.iter().map(|u| u.intent.to_string()));
                    touched.extend(
                        self.key_objects
                            .get(key)
                            .into_iter()
                            .flat_map(|f| f.iter().cloned()),
                    );
                }
                if let Some(o) = &a.object_id {
                    note_use(
                        self.responders.entry(o.clone()).or_default(),
                        Use {
                            order,
                            intent: id.clone(),
                            kind,
                        },
                    );
                    touched.push(o.clone());
                }
                let kept = KeptAttempt::keep(a, &mut self.names);
                let contracts = &self.contracts;
                let e = self.intents.entry(id).or_default();
                // The intent's first contracted send makes its spans of uncontracted tools no
                // sends (wrappers), and with that may change who owns what was made under any
                // of their keys: those objects are decided again.
                let wrappers_turn = contracted
                    && e.attempts
                        .iter()
                        .all(|x| contracts.for_tool(&x.tool).is_none())
                    && !e.attempts.is_empty();
                let keys: BTreeSet<String> = if wrappers_turn {
                    e.attempts
                        .iter()
                        .filter_map(|a| a.idempotency_key.as_deref().map(str::to_string))
                        .collect()
                } else {
                    BTreeSet::new()
                };
                push_small(&mut e.attempts, kept);
                for k in &keys {
                    touched.extend(self.objects_under(k));
                }
                // A send may change its intent's kind too, which decides whom it contests:
                // where it is a candidate before or after, the other readers look again.
                let changed: Vec<bool> = self
                    .candidacies(&reader, &listed)
                    .into_iter()
                    .zip(&before)
                    .map(|(a, b)| a || *b)
                    .collect();
                self.contest_changed(&reader, &listed, &changed, &mut change);
                self.update_orphans(&listed, &mut change);
                // Its kind decides whom its keys are shared with (`history`'s shared keys):
                // when it changes, every sender of every key of its looks again.
                if kind_before.is_some_and(|k| self.intent_kind(&reader) != k) {
                    // So does the kind of the records that name it without one
                    // (`record_kind`): their objects' owners and orphan status are decided
                    // again.
                    touched.extend(
                        self.named_objects
                            .get(reader.as_str())
                            .into_iter()
                            .flat_map(|f| f.iter().cloned()),
                    );
                    let keys: BTreeSet<&str> = self
                        .intents
                        .get(reader.as_str())
                        .into_iter()
                        .flat_map(|e| &e.attempts)
                        .filter_map(|a| a.idempotency_key.as_deref())
                        .collect();
                    for k in keys {
                        change.affected.extend(self.senders_of(k));
                    }
                }
            }
            Event::Readback(r) => {
                if !self.readback_spans.insert(r.span) {
                    return change;
                }
                let id = r.intent_id.clone();
                let listed = r.object_ids.clone();
                // The reader's candidacy for what it listed before (only where it was a reader
                // already) and after: where it changed, other readers may gain or lose the
                // object (`contested`). A read-back never changes who owns what.
                let mut before = self.candidacies(&id, &listed);
                for (held, o) in before.iter_mut().zip(&listed) {
                    *held &= self.readers.get(o).is_some_and(|f| f.contains(&id));
                }
                for o in &listed {
                    self.readers.entry(o.clone()).or_default().insert(&id);
                }
                change.affected.insert(id.clone());
                let key = self.intent_key(&id);
                push_small(&mut self.intents.entry(key).or_default().readbacks, r);
                // Its kind is what it was (a read-back gives an intent with sends no kind):
                // only a candidacy that changed changes anyone else's view.
                let changed: Vec<bool> = self
                    .candidacies(&id, &listed)
                    .into_iter()
                    .zip(&before)
                    .map(|(a, b)| a != *b)
                    .collect();
                self.contest_changed(&id, &listed, &changed, &mut change);
                self.update_orphans(&listed, &mut change);
                return change;
            }
            Event::Record(r) => {
                let object = r.object_id.clone();
                let observations = self.records.entry(object.clone()).or_default();
                if observations.iter().any(|x| x.identity() == r.identity()) {
                    return change;
                }
                if let Some(id) = &r.intent_id {
                    self.named_objects
                        .entry(id.clone())
                        .or_default()
                        .insert(&object);
                    self.intent_key(id);
                }
                if let Some(key) = &r.idempotency_key {
                    self.key_objects
                        .entry(key.clone())
                        .or_default()
                        .insert(&object);
                }
                push_small(self.records.entry(object.clone()).or_default(), r);
                touched.push(object);
            }
        }
        let mut affected = BTreeSet::new();
        for o in &touched {
            self.stakeholders(o, &mut affected);
        }
        change.affected.extend(affected);
        self.update_orphans(&touched, &mut change);
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_builders::{attempt, AttemptExt};

    /// The compact form loses nothing: every field of every attempt comes back as it went in,
    /// through the history the audit reads and through `events` (what a reload rebuilds from).
    #[test]
    fn attempts_come_back_as_they_went_in() {
        let full = attempt("a", "issue_refund", 1.0, 2.0)
            .key("k-1")
            .args(r#"{"amount":45.0}"#.into())
            .http(503)
            .error("http_503")
            .object("re_1", "pending")
            .told("failed");
        let bare = attempt("a", "lookup", 5.0, 1.0);
        let other = attempt("b", "issue_refund", 2.0, 1.0).timeout();
        let mut ledger = Ledger::new();
        for a in [&full, &bare, &other] {
            ledger.add(Event::Attempt(a.clone()));
        }
        let mut history = ledger.history("a").expect("intent a").attempts;
        history.sort_by_key(attempt_order);
        assert_eq!(history, vec![full.clone(), bare.clone()]);
        let mut events: Vec<Event> = ledger.events().collect();
        events.sort_by_key(|e| match e {
            Event::Attempt(a) => attempt_order(a),
            _ => unreachable!("only attempts were added"),
        });
        let expected: Vec<Event> = [full, other, bare]
            .into_iter()
            .map(Event::Attempt)
            .collect();
        assert_eq!(events, expected);
    }

    /// A ledger moved under other contracts links exactly as one built under them, whether
    /// the change leaves every record kind as it was (the links are kept) or changes one (the
    /// events are linked again).
    #[test]
    fn under_other_contracts_links_as_a_ledger_built_under_them() {
        use crate::contract::Contract;
        use crate::test_builders::{record, with_key};
        let of_kind = |mut r: RecordObservation, kind: &str| {
            r.kind = Some(kind.into());
            r
        };
        let with_kind = |kind: Option<&str>, grace_minutes: i64| {
            let mut c = Contract::example("payments.refund", "issue_refund");
            c.record_kind = kind.map(str::to_string);
            c.orphan_grace = crate::model::Dur::minutes(grace_minutes);
            Arc::new(Contracts::new(vec![c]))
        };
        let events = vec![
            Event::Attempt(
                attempt("a", "issue_refund", 1.0, 1.0)
                    .key("k1")
                    .object("re_1", "pending"),
            ),
            Event::Attempt(attempt("b", "issue_refund", 3.0, 1.0).key("k1")),
            Event::Record(with_key(
                of_kind(record(None, "re_1", "succeeded", 5.0), "refund"),
                "k1",
            )),
            Event::Record(of_kind(record(None, "re_9", "succeeded", 6.0), "other")),
        ];
        let built = |contracts: &Arc<Contracts>| {
            let mut l = Ledger::with_contracts(contracts.clone());
            for e in &events {
                l.add(e.clone());
            }
            l
        };
        let histories = |l: &Ledger| {
            let mut ids: Vec<String> = l.ids().collect();
            ids.sort();
            ids.into_iter().map(|id| l.history(&id)).collect::<Vec<_>>()
        };
        let before = with_kind(Some("refund"), 10);
        for after in [
            with_kind(Some("refund"), 30),
            with_kind(Some("other"), 10),
            with_kind(None, 10),
        ] {
            let moved = built(&before).under(after.clone());
            assert_eq!(histories(&moved), histories(&built(&after)));
        }
    }

    #[test]
    fn names_are_shared_and_their_table_is_bounded() {
        let mut names = Interned::default();
        let a = names.get("issue_refund");
        let b = names.get("issue_refund");
        assert!(Arc::ptr_eq(&a, &b));
        for i in 0..Interned::MAX + 10 {
            names.get(&format!("tool-{i}"));
        }
        assert_eq!(names.0.len(), Interned::MAX);
        let late = names.get("one-more");
        assert_eq!(&*late, "one-more");
        assert_eq!(names.0.len(), Interned::MAX);
    }
}
