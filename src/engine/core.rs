//! The engine's state machine: events and time in, verdicts and escalations out.
//!
//! Deterministic like the audit core it drives (time is an argument, nothing here does I/O), so
//! deadlines, reordering and restarts are tested without sleeping. The async service around it
//! owns the clock, the store and the timer.

use std::collections::{BTreeSet, VecDeque};

use foldhash::{HashMap, HashMapExt, HashSet};
use std::sync::Arc;

use super::RouteFilter;
use crate::audit::{self, Ledger};
use crate::contract::Contracts;
use crate::escalation::EscalationBook;
use crate::model::*;

/// What one step changed, for the store, the metrics and the API.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Fresh verdicts of every intent the step changed materially (shared, to write behind).
    pub verdicts: Vec<Arc<Verdict>>,
    /// Pseudo-intents (orphan records) that now belong to a real intent.
    pub removed: Vec<String>,
    /// Escalations opened or changed.
    pub escalations: Vec<Escalation>,
    /// Findings that were not in the intent's previous verdict, with the intent's tool.
    pub new_findings: Vec<(Option<String>, Finding)>,
    /// The routes of every intent this step found at rest or that its events reached: written
    /// with its verdict, so the store can find it once it has left memory, or while a start
    /// has not read it back yet.
    pub routes: Vec<Route>,
    /// This step's number: once the store has everything up to it
    /// ([`EngineCore::mark_durable`]), what it settled may leave memory.
    pub seq: u64,
}

impl Outcome {
    pub fn is_empty(&self) -> bool {
        self.verdicts.is_empty()
            && self.removed.is_empty()
            && self.escalations.is_empty()
            && self.routes.is_empty()
    }
}

pub struct EngineCore {
    contracts: Arc<Contracts>,
    ledger: Ledger,
    book: EscalationBook,
    /// What the core remembers of each in-memory intent's last verdict (not the verdict: it
    /// is recomputed when asked for, see [`Remembered`]). The key is the one copy of the id
    /// the core holds: the schedule shares it (memory per open intent is a target).
    verdicts: HashMap<Arc<str>, Remembered>,
    /// Re-audit instants, ordered (the one booked for each intent is its
    /// [`Remembered::booked`]), each naming its intent by the key of `verdicts`.
    schedule: BTreeSet<(Timestamp, Arc<str>)>,
    /// How long an intent at rest ([`crate::model::Rest`]: settled, or quiet) stays in memory
    /// after it came to rest (`None`: for ever).
    evict_after: Option<Dur>,
    /// Intents that were at rest when last audited, with the step that found them so, oldest
    /// first (an intent may appear more than once; the eviction re-checks).
    resting: VecDeque<(Timestamp, u64, String)>,
    /// Intents at rest whose turn to leave came while they were linked to others in memory:
    /// they leave with the last of their group ([`EngineCore::evict_idle`]). A new verdict takes
    /// an intent out (it must wait its turn again).
    lingering: HashSet<String>,
    /// Orphan records' pseudo-intents a route brought back that exist no more: removed (their
    /// stored verdicts and routes) by the next ingest step.
    stale_orphans: Vec<String>,
    /// Routes that may reach an intent out of memory (its routes are in the store, written
    /// with the verdict that put it at rest): a later event on one brings the intent back.
    routes: RouteFilter,
    evicted_count: usize,
    evictions: u64,
    /// Intents restored and not audited since ([`Since::Restore`]).
    unaudited: usize,
    /// Open intents a start left in the store to be read back behind the serving engine, with
    /// their stored verdicts' fingerprints: each comes back as a restore would have loaded it
    /// (due now, its first findings not new), by [`EngineCore::rehydrate`], when an event
    /// reaches it or its page is read ([`EngineCore::pending_page`]).
    pending: StoredMap,
    /// The last step number handed out, and the last the store has made durable.
    seq: u64,
    durable: u64,
}

/// What a restore starts from: the store's events and escalations, and the fingerprints of the
/// verdicts it holds (those recomputed unchanged are not handed out for writing again). An
/// intent in `stored` whose events are not in `events` (nor an orphan record's pseudo-intent)
/// is left in the store, pending ([`EngineCore::pending_page`]).
#[derive(Debug, Default)]
pub struct Restore {
    pub events: Vec<Event>,
    pub escalations: Vec<Escalation>,
    pub stored: StoredMap,
}

/// What the engine needs of a stored verdict it does not hold: whether a recomputation says
/// something new (`fingerprint`), and where the intent is listed (`listed_at`, which a
/// recomputation cannot know: [`Verdict::listed_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    pub fingerprint: u64,
    pub listed_at: Timestamp,
}

/// Stored verdicts by intent id.
pub type StoredMap = HashMap<String, Stored>;

/// The audit of one intent, as a page of due intents hands it to whoever runs the page.
pub type AuditOne<'a> = &'a (dyn Fn(&str) -> Option<Verdict> + Sync);

/// Audit a page of intents one after the other (see [`EngineCore::tick_with`]).
pub fn in_order(ids: &[String], audit: AuditOne) -> Vec<Option<Verdict>> {
    ids.iter().map(|id| audit(id)).collect()
}

/// The route filter of a core built for tests and tools: small, not pre-touched. The service
/// sizes its own ([`EngineCore::with_route_filter`]).
const DEFAULT_FILTER_BYTES: usize = 1 << 20;

/// The most intents that leave memory together: a group linked more widely than this (an
/// order listed by hundreds of read-backs) stays until a restart, which loads none of it.
const MAX_LEAVING_TOGETHER: usize = 256;

/// What the core keeps of an intent's last verdict. Not the verdict itself: at ~1 KiB each it
/// was most of an open intent's memory (DESIGN.md "Memory and history" asks for <= 1 KiB per
/// open intent), and the audit is a pure function of the history, the contract and `now`, so
/// [`EngineCore::verdict`] recomputes it exactly from `audited_at`. What remains is what the
/// core decides by: whether the next verdict is a material change (`fingerprint`), whether the
/// intent may leave memory (`at_rest`), and which findings are new (`findings`).
#[derive(Debug)]
struct Remembered {
    /// [`Verdict::fingerprint`]: everything but `audited_at`.
    fingerprint: u64,
    audited_at: Timestamp,
    at_rest: bool,
    /// The step that last handed out its routes at rest (0: they were in the store already):
    /// it may leave only once that step is durable, so an event on a route it gained since
    /// finds it in the store. Its older entries in the eviction queue are stale.
    rest_seq: u64,
    /// Where `fingerprint` and `findings` come from.
    since: Since,
    /// `(kind, hash of subject)` of its findings: one not among them is new.
    findings: Box<[(FindingKind, u64)]>,
    /// The re-audit booked for it in the schedule, if any. Here rather than in a map of its
    /// own: one copy of the intent id fewer per open intent.
    booked: Option<Timestamp>,
    /// [`Verdict::listed_at`] of every verdict it gets; `None` for an intent never written
    /// (its first verdict's `first_seen` becomes it).
    listed_at: Option<Timestamp>,
}

/// Where what is remembered of an intent comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Since {
    /// Its last audit by this core.
    Audit,
    /// A restore, not audited since: `fingerprint` is the stored verdict's and the findings
    /// are unknown (those its first audit finds are not new: they were found before the
    /// restart). Booked for a re-audit at the restore's `now`.
    Restore,
    /// A restore with no stored verdict (its first verdict was never written): its first
    /// audit is written whatever it says.
    RestoreUnwritten,
}

fn finding_identity(f: &Finding) -> (FindingKind, u64) {
    use std::hash::BuildHasher;
    (
        f.kind,
        foldhash::fast::FixedState::default().hash_one(&f.subject),
    )
}

impl Stored {
    /// What a store holds of `v`.
    pub fn of(v: &Verdict) -> Stored {
        Stored {
            fingerprint: v.fingerprint(),
            listed_at: v.listed_at,
        }
    }
}

impl Remembered {
    fn of(v: &Verdict) -> Self {
        Remembered {
            fingerprint: v.fingerprint(),
            audited_at: v.audited_at,
            at_rest: v.rest().may_leave_memory(),
            since: Since::Audit,
            // Those that held earlier in event time too: a finding is new once, whether it
            // arrived in the verdict or only in an earlier prefix of one export.
            findings: v
                .findings
                .iter()
                .chain(&v.held_before)
                .map(finding_identity)
                .collect(),
            booked: None,
            rest_seq: 0,
            listed_at: Some(v.listed_at),
        }
    }

    /// An intent loaded at a restore, before its first audit: `stored`, the fingerprint of
    /// the verdict the store holds, if any; as audited at `now` until it is.
    fn restored(stored: Option<Stored>, now: Timestamp) -> Self {
        Remembered {
            fingerprint: stored.map(|s| s.fingerprint).unwrap_or_default(),
            listed_at: stored.map(|s| s.listed_at),
            audited_at: now,
            at_rest: false,
            since: match stored {
                Some(_) => Since::Restore,
                None => Since::RestoreUnwritten,
            },
            findings: Box::default(),
            booked: None,
            rest_seq: 0,
        }
    }

    /// The fingerprint of the verdict last handed out or stored, if there is one.
    fn written(&self) -> Option<u64> {
        (self.since != Since::RestoreUnwritten).then_some(self.fingerprint)
    }

    /// Give a fresh audit of the intent the place it is listed at.
    fn list(&self, v: &mut Verdict) {
        if let Some(at) = self.listed_at {
            v.listed_at = at;
        }
    }
}

impl EngineCore {
    pub fn new(contracts: Arc<Contracts>) -> Self {
        EngineCore {
            ledger: Ledger::with_contracts(contracts.clone()),
            contracts,
            book: EscalationBook::new(),
            verdicts: HashMap::new(),
            schedule: BTreeSet::new(),
            evict_after: None,
            resting: VecDeque::new(),
            lingering: HashSet::default(),
            stale_orphans: Vec::new(),
            routes: RouteFilter::new(DEFAULT_FILTER_BYTES, false),
            evicted_count: 0,
            evictions: 0,
            unaudited: 0,
            pending: HashMap::new(),
            seq: 0,
            durable: 0,
        }
    }

    /// Use `filter` for the routes of intents out of memory (see [`RouteFilter`]).
    pub fn with_route_filter(mut self, filter: RouteFilter) -> Self {
        self.routes = filter;
        self
    }

    /// Intents out of memory exist whose routes the filter does not hold (a start that left
    /// settled history in the store): every route is checked against the store until
    /// [`EngineCore::routes_filled`].
    pub fn routes_in_store(&mut self) {
        self.routes.cold();
    }

    /// Routes read back from the store, into the filter.
    pub fn fill_routes<'a>(&mut self, routes: impl IntoIterator<Item = &'a str>) {
        for r in routes {
            self.routes.insert(r);
        }
    }

    /// The filter holds every route in the store: only its "maybe" needs the store now.
    pub fn routes_filled(&mut self) {
        self.routes.warmed();
    }

    pub fn routes_warm(&self) -> bool {
        self.routes.is_warm()
    }

    /// Whether any observation of `object` is in memory.
    pub fn holds_records_of(&self, object: &str) -> bool {
        self.ledger.has_records_of(object)
    }

    /// The objects in memory that can ever have been orphans ([`Ledger::objects_ever_unnamed`]).
    pub fn objects_ever_unnamed(&self) -> impl Iterator<Item = &str> {
        self.ledger.objects_ever_unnamed()
    }

    /// The filter of routes to intents out of memory, for its gauges.
    pub fn route_filter(&self) -> &RouteFilter {
        &self.routes
    }

    /// The store holds every outcome up to step `seq`: intents those settled may leave memory.
    pub fn mark_durable(&mut self, seq: u64) {
        self.durable = self.durable.max(seq);
    }

    /// A new step number.
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Let intents at rest leave memory `after` they came to rest (see
    /// [`EngineCore::evict_idle`]).
    pub fn with_eviction(mut self, after: Option<Dur>) -> Self {
        self.evict_after = after;
        self
    }

    /// Intents out of memory, waiting in the store.
    pub fn evicted(&self) -> usize {
        self.evicted_count
    }

    /// When the next intent at rest is due to leave memory.
    pub fn next_eviction(&self) -> Option<Timestamp> {
        let after = self.evict_after?;
        self.resting
            .front()
            .filter(|(_, seq, _)| *seq <= self.durable)
            .map(|(t, _, _)| *t + after)
    }

    /// Take out of memory every intent at rest for `evict_after` that still is (settled, or
    /// quiet: see [`crate::model::Rest`]), whose step that found it so is durable (its verdict
    /// and routes are in the store), and that shares no key or object with an intent in
    /// memory. What stays is its routes in the filter. Returns how many left.
    pub fn evict_idle(&mut self, now: Timestamp) -> usize {
        let Some(after) = self.evict_after else {
            return 0;
        };
        let mut n = 0;
        while let Some((t, seq, _)) = self.resting.front() {
            if *t + after > now || *seq > self.durable {
                break;
            }
            let Some((_, seq, id)) = self.resting.pop_front() else {
                break;
            };
            // An entry older than the intent's last step at rest is stale: that step has its
            // own entry (its routes may not be in the store yet).
            let still = self
                .verdicts
                .get(id.as_str())
                .is_some_and(|v| v.at_rest && v.rest_seq == seq)
                && self.book.open_for(&id).is_none();
            if !still {
                continue;
            }
            // Linked to others in memory (one read the refund another made, two sent one
            // key), it waits for them: the group leaves together once each of its intents may
            // leave on its own terms, or they would hold each other in memory for ever.
            let group = if self.ledger.is_isolated(&id) {
                BTreeSet::from([id])
            } else {
                self.lingering.insert(id.clone());
                match self.ledger.linked(&id, MAX_LEAVING_TOGETHER) {
                    Some(group) if group.iter().all(|m| self.may_leave_with_others(m)) => group,
                    _ => continue,
                }
            };
            let routes: Vec<(String, Vec<String>)> = group
                .iter()
                .map(|m| (m.clone(), self.ledger.routes(m)))
                .collect();
            if !self.ledger.evict_group(&group) {
                continue;
            }
            for (m, routes) in routes {
                for r in &routes {
                    self.routes.insert(r);
                }
                self.lingering.remove(&m);
                self.forget(&m);
                self.book.forget(&m);
                self.evicted_count += 1;
                self.evictions += 1;
                n += 1;
            }
        }
        n
    }

    /// A linked intent that passed its own turn to leave (at rest for `evict_after`, written,
    /// no open escalation) and has not changed since.
    fn may_leave_with_others(&self, id: &str) -> bool {
        self.lingering.contains(id)
            && self
                .verdicts
                .get(id)
                .is_some_and(|v| v.at_rest && v.rest_seq <= self.durable)
            && self.book.open_for(id).is_none()
    }

    /// The routes of these events that may reach an intent out of memory: the store says
    /// which intents they reach ([`crate::store::Store::route_owners`]); those not in memory
    /// ([`EngineCore::absent`]) must come back with [`EngineCore::rehydrate`] before the
    /// events are taken in.
    pub fn routes_to_check(&self, events: &[Event]) -> Vec<String> {
        let mut out: BTreeSet<String> = BTreeSet::new();
        for e in events {
            for r in e.routes() {
                // An intent id reaches one intent: in memory, it is here.
                let here = r
                    .strip_prefix("i:")
                    .is_some_and(|id| self.verdicts.contains_key(id));
                if !here && self.routes.may_contain(&r) {
                    out.insert(r);
                }
            }
        }
        out.into_iter().collect()
    }

    /// Which of `ids` are not in memory.
    pub fn absent(&self, ids: Vec<String>) -> Vec<String> {
        ids.into_iter()
            .filter(|id| !self.verdicts.contains_key(id.as_str()))
            .collect()
    }

    /// How many intents ever left memory: a step that checked routes before an eviction
    /// checks again.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Bring intents back from the store: their events (and the records of their objects) go
    /// back into the ledger, their escalations into the book, and their verdicts are
    /// recomputed quietly, as a restart would, so the events that follow are judged against
    /// the same history as if they had never left. An intent still pending from the start
    /// comes back unaudited and due at `now`, as the start would have loaded it.
    ///
    /// `pending` are the events about to be ingested: the store already holds them (durable
    /// first), but they must arrive through [`EngineCore::ingest`], which judges what they
    /// change, not slip in here unjudged. `listed` are the stored verdicts' places in the
    /// listings ([`Verdict::listed_at`]), which a recomputation cannot know.
    pub fn rehydrate(
        &mut self,
        ids: &[String],
        events: Vec<Event>,
        escalations: Vec<Escalation>,
        listed: &HashMap<String, Timestamp>,
        pending: &[Event],
        now: Timestamp,
    ) {
        self.book.bring_back(escalations);
        let pending: HashSet<&Event> = pending.iter().collect();
        for e in events {
            if !pending.contains(&e) {
                self.ledger.add(e);
            }
        }
        for id in ids {
            let left_at_start = self.pending.remove(id);
            if self.verdicts.contains_key(id.as_str()) {
                continue;
            }
            if let Some(stored) = left_at_start {
                // Open when the process stopped: its deadline may have passed since, and what
                // it found then was announced then. It comes back as a restore loads it.
                if self.ledger.history(id).is_some() {
                    self.remember_restored(id.clone(), Some(stored), now);
                }
                continue;
            }
            // A route may outlive what it reached: an orphan record claimed since has none. One
            // claimed while out of memory (a reload linked its object to an intent) still has a
            // stored verdict: the next step removes it.
            let Some(history) = self.ledger.history(id) else {
                if id.starts_with(audit::ORPHAN_PREFIX) {
                    self.stale_orphans.push(id.clone());
                }
                continue;
            };
            self.evicted_count = self.evicted_count.saturating_sub(1);
            let contract = Ledger::contract_for(&history, &self.contracts);
            let mut v = audit::audit(&history, contract, now);
            if let Some(at) = listed.get(id) {
                v.listed_at = *at;
            }
            self.book.apply(&mut v);
            if self.evict_after.is_some() && v.rest().may_leave_memory() {
                // Its routes are in the store already (it left memory at rest).
                self.resting.push_back((now, 0, id.clone()));
            }
            self.remember(id, Remembered::of(&v), v.next_change);
        }
        if self.pending.is_empty() && self.pending.capacity() > 0 {
            // A million ids' worth of table, not needed again until the next start.
            self.pending = HashMap::new();
        }
    }

    /// Rebuild from the store's contents and audit everything at once: the same events and
    /// escalations give the same verdicts a process that never stopped would have. For tests
    /// and tools; the service restores with [`EngineCore::restore_from`] and lets its timer
    /// audit a page at a time.
    pub fn restore(
        contracts: Arc<Contracts>,
        events: Vec<Event>,
        escalations: Vec<Escalation>,
        now: Timestamp,
    ) -> (Self, Outcome) {
        let mut core = Self::restore_from(
            contracts,
            Restore {
                events,
                escalations,
                stored: HashMap::new(),
            },
            now,
        );
        let out = core.tick(now);
        (core, out)
    }

    /// Rebuild from what the store holds, auditing nothing yet: every intent is booked for a
    /// re-audit at `now` and remembered with its stored fingerprint (`restore.stored`), so the
    /// deadline timer audits them a page at a time ([`EngineCore::tick_with`]) and hands out
    /// only the verdicts that changed while the process was down. Start-up time is the read;
    /// a million intents whose deadlines passed during a long stop are a million verdicts
    /// to write, and they come out as pages the persister keeps up with, not as one step.
    /// Until its first audit, an intent's verdict ([`EngineCore::verdict`]) is as of `now`.
    pub fn restore_from(contracts: Arc<Contracts>, restore: Restore, now: Timestamp) -> Self {
        let mut core = EngineCore::new(contracts);
        core.book = EscalationBook::restore(restore.escalations);
        for e in restore.events {
            core.ledger.add(e);
        }
        let mut ids: Vec<String> = core.ledger.ids().collect();
        ids.sort_unstable();
        core.verdicts.reserve(ids.len());
        let ids: Vec<Arc<str>> = ids.iter().map(|id| Arc::from(id.as_str())).collect();
        for id in &ids {
            let mut remembered = Remembered::restored(restore.stored.get(&**id).copied(), now);
            remembered.booked = Some(now);
            core.verdicts.insert(id.clone(), remembered);
        }
        core.unaudited = ids.len();
        core.pending = restore.stored;
        for id in &ids {
            core.pending.remove(&**id);
        }
        // An orphan record's pseudo-intent that is not in the ledger belongs to an intent now.
        core.pending
            .retain(|id, _| !id.starts_with(audit::ORPHAN_PREFIX));
        if core.pending.is_empty() {
            // Everything was loaded (a start that read it all): give the table's room back.
            core.pending = HashMap::new();
        }
        // Sorted, so the set is built in one pass rather than by a million inserts.
        core.schedule = ids.into_iter().map(|id| (now, id)).collect();
        core
    }

    /// More of a restore, read while the ledger was being built (the settled intents the
    /// restored routes reach): their events join the ledger and every intent new to memory is
    /// booked due at `now`, unaudited, exactly as if [`EngineCore::restore_from`] had had them.
    pub fn restore_more(&mut self, events: Vec<Event>, now: Timestamp) {
        let mut change = audit::LedgerChange::default();
        for e in events {
            change.merge(self.ledger.add(e));
        }
        for id in &change.removed {
            self.forget(id);
        }
        for id in change.affected {
            if self.verdicts.contains_key(id.as_str()) {
                continue;
            }
            let stored = self.pending.remove(&id);
            self.remember_restored(id, stored, now);
        }
    }

    /// Intents in memory whose place in the listings is not known ([`Verdict::listed_at`]):
    /// restored with no stored verdict read for them (a settled intent a restored route
    /// reached, an intent of the tail since the checkpoint). The store's place, if it holds a
    /// verdict for one, is given back by [`EngineCore::place`] before the first audit; one it
    /// does not hold takes its first verdict's `first_seen`.
    pub fn unplaced(&self) -> Vec<String> {
        self.verdicts
            .iter()
            .filter(|(_, r)| r.listed_at.is_none())
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// The stored places of intents [`EngineCore::unplaced`] named.
    pub fn place(&mut self, listed: &HashMap<String, Timestamp>) {
        for (id, at) in listed {
            if let Some(r) = self.verdicts.get_mut(id.as_str()) {
                r.listed_at.get_or_insert(*at);
            }
        }
    }

    /// An intent loaded by a restore, not audited yet: remembered with its stored verdict's
    /// fingerprint, if any, and due at `now`.
    fn remember_restored(&mut self, id: String, stored: Option<Stored>, now: Timestamp) {
        let mut remembered = Remembered::restored(stored, now);
        remembered.booked = Some(now);
        let id: Arc<str> = Arc::from(id);
        self.verdicts.insert(id.clone(), remembered);
        self.schedule.insert((now, id));
        self.unaudited += 1;
    }

    /// Up to `n` of the open intents left in the store at the start ([`Restore`]), to be read
    /// back ([`EngineCore::rehydrate`] takes them out of the pending set).
    pub fn pending_page(&self, n: usize) -> Vec<String> {
        self.pending.keys().take(n).cloned().collect()
    }

    /// Open intents left in the store at the start and not read back yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The routes of the intents in memory among `ids` (to write them for the open intents of
    /// a store from before routes were written for those).
    pub fn routes_of(&self, ids: &[String]) -> Vec<Route> {
        ids.iter()
            .filter(|id| self.verdicts.contains_key(id.as_str()))
            .flat_map(|id| {
                self.ledger.routes(id).into_iter().map(|route| Route {
                    route,
                    intent_id: id.clone(),
                })
            })
            .collect()
    }

    /// The escalations of the intents restored (`escalations`: an intent's are in memory while
    /// it is) and the store's count of all of them by status (`stored`, for the gauges).
    pub fn restore_escalations(
        &mut self,
        escalations: Vec<Escalation>,
        stored: impl IntoIterator<Item = (EscalationStatus, u64)>,
    ) {
        self.book = EscalationBook::restore(escalations);
        self.book.count_stored(stored);
    }

    /// The intents in memory, in no particular order.
    pub fn intent_ids(&self) -> Vec<String> {
        self.verdicts.keys().map(|id| id.to_string()).collect()
    }

    /// Intents restored and not audited since (see [`EngineCore::restore_from`]).
    pub fn unaudited(&self) -> usize {
        self.unaudited
    }

    pub fn ingest(&mut self, events: Vec<Event>, now: Timestamp) -> Outcome {
        let mut change = audit::LedgerChange::default();
        for e in events {
            change.merge(self.ledger.add(e));
        }
        let mut out = Outcome {
            seq: self.next_seq(),
            ..Outcome::default()
        };
        for id in &change.removed {
            self.forget(id);
            out.removed.push(id.clone());
        }
        for id in std::mem::take(&mut self.stale_orphans) {
            if !self.verdicts.contains_key(id.as_str()) && !change.affected.contains(&id) {
                out.removed.push(id);
            }
        }
        for id in &change.affected {
            self.audit_into(id, now, &mut out);
            // Events are what give an intent keys and objects: its routes go to the store with
            // this step (one at rest has them handed out already), so a start that leaves it
            // there while open, and an event that reaches it by key or object, find it.
            if self.verdicts.get(id.as_str()).is_some_and(|r| !r.at_rest) {
                out.routes
                    .extend(self.ledger.routes(id).into_iter().map(|route| Route {
                        route,
                        intent_id: id.to_string(),
                    }));
            }
        }
        out
    }

    /// Judge everything in memory under `contracts` from now on, in one outcome (tests and
    /// tools; the service takes the same two steps with its lock released between pages:
    /// [`EngineCore::swap_contracts`], then [`EngineCore::reaudit_with`]). The escalation book
    /// stays: what opened an escalation stays its evidence; a finding the new contracts bring
    /// opens or joins one. Intents out of memory keep their verdicts until an event brings
    /// them back, when they are judged under the new contracts too.
    pub fn reload(&mut self, contracts: Arc<Contracts>, now: Timestamp) -> Outcome {
        let (mut out, ids) = self.swap_contracts(contracts);
        self.reaudit_into(&ids, now, in_order, &mut out);
        out
    }

    /// A new set of contracts in force from now on: the ledger under it ([`Ledger::under`]:
    /// an object's identity depends on the record kinds the contracts name), and the
    /// pseudo-intents that no longer exist under it forgotten (the outcome's `removed`).
    /// Judges nothing: returns the intents in memory, sorted, for
    /// [`EngineCore::reaudit_with`] to judge again a page at a time. Until its page comes, an
    /// intent keeps what was remembered of its verdict under the old set, deadlines included.
    pub fn swap_contracts(&mut self, contracts: Arc<Contracts>) -> (Outcome, Vec<String>) {
        let ledger = std::mem::take(&mut self.ledger);
        self.ledger = ledger.under(contracts.clone());
        self.contracts = contracts;
        let mut out = Outcome {
            seq: self.next_seq(),
            ..Outcome::default()
        };
        let now_ids: HashSet<String> = self.ledger.ids().collect();
        let gone: Vec<String> = self
            .verdicts
            .keys()
            .filter(|id| !now_ids.contains(&***id))
            .map(|id| id.to_string())
            .collect();
        for id in gone {
            self.forget(&id);
            out.removed.push(id);
        }
        // Linked again, an intent at rest may reach other keys and objects: it stays until its
        // page judges it again and hands out its routes (no queued entry matches till then).
        for r in self.verdicts.values_mut() {
            if r.at_rest {
                r.rest_seq = u64::MAX;
            }
        }
        let mut ids: Vec<String> = now_ids.into_iter().collect();
        ids.sort_unstable();
        (out, ids)
    }

    /// Judge these intents again at `now`, their audits run by `audit_all` (see
    /// [`EngineCore::tick_with`]). One that left memory since it was listed (a reload's
    /// pages are apart in time) is not brought back.
    pub fn reaudit_with(
        &mut self,
        ids: &[String],
        now: Timestamp,
        audit_all: impl FnOnce(&[String], AuditOne) -> Vec<Option<Verdict>>,
    ) -> Outcome {
        let mut out = Outcome {
            seq: self.next_seq(),
            ..Outcome::default()
        };
        self.reaudit_into(ids, now, audit_all, &mut out);
        out
    }

    fn reaudit_into(
        &mut self,
        ids: &[String],
        now: Timestamp,
        audit_all: impl FnOnce(&[String], AuditOne) -> Vec<Option<Verdict>>,
        out: &mut Outcome,
    ) {
        let verdicts = {
            let core = &*self;
            audit_all(ids, &|id| core.audit_one(id, now))
        };
        for (id, v) in ids.iter().zip(verdicts) {
            self.take_verdict(id, v, now, out);
        }
    }

    /// Re-audit every intent whose deadline has come.
    pub fn tick(&mut self, now: Timestamp) -> Outcome {
        self.tick_with(now, usize::MAX, in_order)
    }

    /// Re-audit at most `max` of the intents whose deadline has come, earliest first; the
    /// rest stay due ([`EngineCore::next_deadline`] is then not after `now`). A burst of
    /// timeouts falls due together a `max_in_flight` later, and a restart books everything
    /// it loaded: taken whole, either would hand out a verdict per intent at once, all held
    /// until written. `audit_all` runs the page's audits (in order, or split across threads:
    /// each reads only the ledger, so the split changes nothing but the time); what they
    /// found is then taken in one intent after the other, in the page's order.
    pub fn tick_with(
        &mut self,
        now: Timestamp,
        max: usize,
        audit_all: impl FnOnce(&[String], AuditOne) -> Vec<Option<Verdict>>,
    ) -> Outcome {
        self.evict_idle(now);
        let mut out = Outcome {
            seq: self.next_seq(),
            ..Outcome::default()
        };
        let mut due = Vec::new();
        while due.len() < max && self.schedule.first().is_some_and(|(at, _)| *at <= now) {
            let Some((_, id)) = self.schedule.pop_first() else {
                break;
            };
            if let Some(r) = self.verdicts.get_mut(&id) {
                r.booked = None;
            }
            due.push(id.to_string());
        }
        if due.is_empty() {
            return out;
        }
        let verdicts = {
            let core = &*self;
            audit_all(&due, &|id| core.audit_one(id, now))
        };
        for (id, v) in due.iter().zip(verdicts) {
            self.take_verdict(id, v, now, &mut out);
        }
        out
    }

    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.schedule.first().map(|(t, _)| *t)
    }

    /// The intent's verdict, shared (to hand out of the lock).
    pub fn shared_verdict(&self, intent_id: &str) -> Option<Arc<Verdict>> {
        self.verdict(intent_id).map(Arc::new)
    }

    /// The intent's verdict as last audited: recomputed from its history at the `now` it was
    /// audited for, with the escalation book as it stands (every change of the book re-audits
    /// the intents it concerns), so it equals the verdict that audit handed out.
    pub fn verdict(&self, intent_id: &str) -> Option<Verdict> {
        let remembered = self.verdicts.get(intent_id)?;
        let mut v = self.audit_one(intent_id, remembered.audited_at)?;
        remembered.list(&mut v);
        self.book.apply(&mut v);
        Some(v)
    }

    /// Every verdict in memory, recomputed (see [`EngineCore::verdict`]); for tests and tools.
    pub fn verdicts(&self) -> impl Iterator<Item = Verdict> + '_ {
        self.verdicts.keys().filter_map(|id| self.verdict(id))
    }

    /// Whether the intent is in memory.
    pub fn holds(&self, intent_id: &str) -> bool {
        self.verdicts.contains_key(intent_id)
    }

    pub fn intents(&self) -> usize {
        self.verdicts.len()
    }

    /// Everything known about one intent, as the audit sees it (read-only; for the evidence
    /// page's object status histories).
    pub fn history(&self, intent_id: &str) -> Option<audit::History> {
        self.ledger.history(intent_id)
    }

    pub fn book(&self) -> &EscalationBook {
        &self.book
    }

    pub fn contracts(&self) -> &Contracts {
        &self.contracts
    }

    /// Apply a person's claim or resolution (already durable) and re-audit the intent: its
    /// decision depends on whether an escalation is open.
    pub fn commit_person_action(&mut self, e: Escalation, now: Timestamp) -> Outcome {
        self.book.commit(e.clone());
        self.after_person(e, now)
    }

    /// A person's action changes the intent's decision: re-audit it.
    fn after_person(&mut self, e: Escalation, now: Timestamp) -> Outcome {
        let mut out = Outcome {
            seq: self.next_seq(),
            ..Outcome::default()
        };
        self.audit_into(&e.intent_id, now, &mut out);
        if !out.escalations.iter().any(|x| x.id == e.id) {
            out.escalations.push(e);
        }
        out
    }

    fn audit_into(&mut self, id: &str, now: Timestamp, out: &mut Outcome) {
        let v = self.audit_one(id, now);
        self.take_verdict(id, v, now, out);
    }

    /// The audit of one intent as the ledger holds it, before the escalation book has its say;
    /// `None` if the intent no longer exists. Reads only.
    fn audit_one(&self, id: &str, now: Timestamp) -> Option<Verdict> {
        let history = self.ledger.history(id)?;
        let contract = Ledger::contract_for(&history, &self.contracts);
        Some(audit::audit(&history, contract, now))
    }

    /// Take an intent's fresh audit in: the escalation book observes and applies it, its
    /// deadline is booked, its routes are handed out if it is at rest, and the verdict is handed
    /// out for writing if it differs from the last one written (or stored, before the first
    /// audit after a restore).
    fn take_verdict(&mut self, id: &str, v: Option<Verdict>, now: Timestamp, out: &mut Outcome) {
        let Some(mut v) = v else {
            self.forget(id);
            return;
        };
        if let Some(old) = self.verdicts.get(id) {
            old.list(&mut v);
        }
        if let Some(e) = self.book.observe(&v) {
            out.escalations.push(e);
        }
        self.book.apply(&mut v);

        let previous = self.verdicts.get(id);
        // A restored intent's findings were found before the restart: none is new.
        let first_since_restore = previous.is_some_and(|old| old.since != Since::Audit);
        if !first_since_restore {
            let before = previous.map(|old| &old.findings);
            for f in v.findings.iter().chain(&v.held_before) {
                if before.is_none_or(|b| !b.contains(&finding_identity(f))) {
                    out.new_findings.push((v.tool.clone(), f.clone()));
                }
            }
        }
        if v.rest().may_leave_memory() {
            // Written with the verdict (again, if it was written before: a new key or object
            // may reach it now), so the store can find it once it leaves memory.
            out.routes
                .extend(self.ledger.routes(id).into_iter().map(|route| Route {
                    route,
                    intent_id: id.to_string(),
                }));
            if self.evict_after.is_some() {
                self.resting.push_back((now, out.seq, id.to_string()));
            }
        }
        // Written only when something material changed (a re-sent export, a deadline that
        // changed nothing): the stored row already says it. Callers audit each intent at most
        // once per step (ids come from sets), so no dedup here.
        let mut remembered = Remembered::of(&v);
        if remembered.at_rest {
            remembered.rest_seq = out.seq;
        }
        let before = self.verdicts.get(id).and_then(Remembered::written);
        // A restore's stored row was not at rest (start-up loads only those): one that is now
        // must say so, or every start would load it again. (Rows written before quiet intents
        // could rest, with the same fingerprint.)
        let comes_to_rest = first_since_restore && remembered.at_rest;
        let material = before != Some(remembered.fingerprint) || comes_to_rest;
        self.remember(id, remembered, v.next_change);
        if material {
            out.verdicts.push(Arc::new(v));
        }
    }

    /// Keep what is remembered of an intent's fresh verdict, its re-audit booked at `next`
    /// (the one booked before, if any, unbooked).
    fn remember(&mut self, id: &str, mut remembered: Remembered, next: Option<Timestamp>) {
        self.lingering.remove(id);
        remembered.booked = next;
        let key: Arc<str> = match self.verdicts.get_key_value(id) {
            Some((key, _)) => key.clone(),
            None => Arc::from(id),
        };
        let old = match self.verdicts.insert(key.clone(), remembered) {
            Some(old) => {
                if old.since != Since::Audit {
                    self.unaudited -= 1;
                }
                old.booked
            }
            None => None,
        };
        if old == next {
            return;
        }
        if let Some(at) = old {
            self.schedule.remove(&(at, key.clone()));
        }
        if let Some(at) = next {
            self.schedule.insert((at, key));
        }
    }

    /// An intent no longer held: what is remembered of it goes, and its booked re-audit.
    fn forget(&mut self, id: &str) {
        // What is forgotten waits for no group (a claimed orphan, an evicted group's member).
        self.lingering.remove(id);
        let Some((key, old)) = self.verdicts.remove_entry(id) else {
            return;
        };
        if old.since != Since::Audit {
            self.unaudited -= 1;
        }
        if let Some(at) = old.booked {
            self.schedule.remove(&(at, key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Contract;

    /// Every verdict in memory, by intent id.
    fn sorted_verdicts(c: &EngineCore) -> Vec<Verdict> {
        let mut v: Vec<Verdict> = c.verdicts().collect();
        v.sort_by(|x, y| x.intent_id.cmp(&y.intent_id));
        v
    }

    fn contracts() -> Arc<Contracts> {
        Arc::new(Contracts::new(vec![Contract::example(
            "payments.refund",
            "issue_refund",
        )]))
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(1_780_000_000 + secs)
    }

    fn timeout(intent: &str, n: u8, start: i64, key: &str) -> Event {
        Event::Attempt(Attempt {
            span: SpanRef {
                trace_id: [n; 16],
                span_id: [n; 8],
            },
            intent_id: intent.into(),
            tool: "issue_refund".into(),
            start: t(start),
            end: t(start + 30),
            idempotency_key: Some(key.into()),
            http_status: None,
            error_type: Some("timeout".into()),
            span_error: true,
            object_id: None,
            object_status: None,
            reported_outcome: None,
            arguments: None,
        })
    }

    fn record(object: &str, key: Option<&str>, status: &str, at: i64) -> Event {
        Event::Record(RecordObservation {
            source: "api".into(),
            kind: None,
            object_id: object.into(),
            intent_id: None,
            idempotency_key: key.map(str::to_string),
            status: status.into(),
            amount: None,
            currency: None,
            target: None,
            created_at: None,
            observed_at: t(at),
        })
    }

    /// A reload judges what is in memory under the new contracts: a stricter retry budget adds
    /// its finding; the old contracts again take it away; nothing is lost from the ledger.
    #[test]
    fn a_reload_re_audits_what_is_in_memory() {
        let mut core = EngineCore::new(contracts());
        core.ingest(
            vec![
                timeout("i1", 1, 0, "k1"),
                timeout("i1", 2, 40, "k1"),
                record("re_1", Some("k1"), "succeeded", 60),
                timeout("i2", 3, 0, "k2"),
            ],
            t(100),
        );
        let kinds = |core: &EngineCore, id: &str| -> Vec<FindingKind> {
            core.verdict(id)
                .unwrap()
                .findings
                .iter()
                .map(|f| f.kind)
                .collect()
        };
        assert!(kinds(&core, "i1").is_empty());
        let mut strict = Contract::example("payments.refund", "issue_refund");
        strict.max_attempts = Some(1);
        let out = core.reload(Arc::new(Contracts::new(vec![strict])), t(101));
        assert_eq!(kinds(&core, "i1"), [FindingKind::RetryBudgetExceeded]);
        assert_eq!(
            core.verdict("i1").map(|v| v.state),
            Some(IntentState::Completed),
            "the record still links after the rebuild"
        );
        assert!(out.verdicts.iter().any(|v| v.intent_id == "i1"));
        assert_eq!(core.intents(), 2);
        core.reload(contracts(), t(102));
        assert!(kinds(&core, "i1").is_empty());
        // Still taking events after it.
        core.ingest(vec![record("re_2", Some("k2"), "succeeded", 90)], t(103));
        assert_eq!(
            core.verdict("i2").map(|v| v.state),
            Some(IntentState::Completed)
        );
    }

    /// A reload taken a page at a time, with events arriving between its pages (the service
    /// releases its lock between them), ends where one taken at once would.
    #[test]
    fn a_reload_in_pages_ends_where_one_at_once_would() {
        let first = vec![
            timeout("i1", 1, 0, "k1"),
            timeout("i1", 2, 40, "k1"),
            record("re_1", Some("k1"), "succeeded", 60),
            timeout("i2", 3, 0, "k2"),
            timeout("i3", 4, 0, "k3"),
        ];
        let later = vec![
            timeout("i3", 5, 50, "k3"),
            record("re_2", Some("k2"), "succeeded", 70),
        ];
        let mut strict = Contract::example("payments.refund", "issue_refund");
        strict.max_attempts = Some(1);
        let strict = Arc::new(Contracts::new(vec![strict]));

        let mut at_once = EngineCore::new(contracts());
        at_once.ingest(first.clone(), t(100));
        at_once.reload(strict.clone(), t(101));
        at_once.ingest(later.clone(), t(102));

        let mut paged = EngineCore::new(contracts());
        paged.ingest(first, t(100));
        let (out, ids) = paged.swap_contracts(strict);
        assert!(out.verdicts.is_empty(), "the swap judges nothing");
        assert_eq!(ids, ["i1", "i2", "i3"]);
        paged.reaudit_with(&ids[..1], t(101), in_order);
        paged.ingest(later, t(102));
        paged.reaudit_with(&ids[1..], t(103), in_order);

        // Fingerprints: everything but `audited_at`, which differs by construction.
        let judged = |c: &EngineCore| {
            sorted_verdicts(c)
                .iter()
                .map(|v| (v.intent_id.clone(), v.fingerprint()))
                .collect::<Vec<_>>()
        };
        assert_eq!(judged(&paged), judged(&at_once));
        let kinds = |id: &str| -> Vec<FindingKind> {
            paged
                .verdict(id)
                .unwrap()
                .findings
                .iter()
                .map(|f| f.kind)
                .collect()
        };
        assert_eq!(kinds("i1"), [FindingKind::RetryBudgetExceeded]);
        assert_eq!(kinds("i3"), [FindingKind::RetryBudgetExceeded]);
    }

    /// A verdict names the version of the contract it was computed under. A reload that
    /// changes a contract in a way that changes no conclusion still writes the verdicts it
    /// judged (the stored row must name the version), and only theirs; a reload of the same
    /// set writes nothing. An intent no contract covers names none.
    #[test]
    fn a_verdict_names_its_contract_version_and_a_new_version_is_material() {
        let mut core = EngineCore::new(contracts());
        let mut email = timeout("e1", 9, 0, "k9");
        if let Event::Attempt(a) = &mut email {
            a.tool = "send_email".into();
        }
        core.ingest(
            vec![
                timeout("i1", 1, 0, "k1"),
                record("re_1", Some("k1"), "succeeded", 60),
                email,
            ],
            t(100),
        );
        let v1 = Contract::example("payments.refund", "issue_refund").version;
        assert_eq!(core.verdict("i1").unwrap().contract_version, v1);
        assert_eq!(core.verdict("e1").unwrap().contract_version, "");

        assert!(
            core.reload(contracts(), t(101)).verdicts.is_empty(),
            "the same contracts: nothing to write"
        );
        let mut later = Contract::example("payments.refund", "issue_refund");
        later.orphan_grace = Dur::minutes(30);
        let set = Arc::new(Contracts::new(vec![later]));
        let v2 = set.contracts[0].version.clone();
        assert_ne!(v1, v2);
        let before = core.verdict("e1");
        let out = core.reload(set, t(102));
        assert_eq!(
            out.verdicts
                .iter()
                .map(|v| (v.intent_id.as_str(), v.contract_version.as_str()))
                .collect::<Vec<_>>(),
            [("i1", v2.as_str())],
            "only the intent under the changed contract is written"
        );
        assert_eq!(
            core.verdict("i1").map(|v| (v.state, v.findings.len())),
            Some((IntentState::Completed, 0))
        );
        let after = core.verdict("e1").unwrap();
        assert_eq!(before.unwrap().fingerprint(), after.fingerprint());
        assert_eq!(after.contract_version, "");
    }

    /// A wave of deadlines is taken a page at a time, earliest first; what is left stays due,
    /// and the pages together conclude what one whole tick would.
    #[test]
    fn a_wave_of_deadlines_is_taken_a_page_at_a_time() {
        let wave: Vec<Event> = (0..10)
            .map(|i| timeout(&format!("i{i}"), i + 1, i as i64, &format!("k{i}")))
            .collect();
        let mut paged = EngineCore::new(contracts());
        let mut whole = EngineCore::new(contracts());
        paged.ingest(wave.clone(), t(31));
        whole.ingest(wave, t(31));
        let now = t(100);
        let mut pages = Vec::new();
        while paged.next_deadline().is_some_and(|at| at <= now) {
            let out = paged.tick_with(now, 4, in_order);
            assert!(out.verdicts.len() <= 4);
            pages.push(
                out.verdicts
                    .iter()
                    .map(|v| v.intent_id.clone())
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(
            pages,
            [
                vec!["i0", "i1", "i2", "i3"],
                vec!["i4", "i5", "i6", "i7"],
                vec!["i8", "i9"]
            ],
            "earliest deadline first, four at a time"
        );
        let all = whole.tick(now);
        assert_eq!(all.verdicts.len(), 10);
        for v in &all.verdicts {
            assert_eq!(paged.verdict(&v.intent_id).as_ref(), Some(&**v));
        }
        assert_eq!(paged.next_deadline(), whole.next_deadline());
    }

    #[test]
    fn a_deadline_escalates_with_no_new_event() {
        let mut core = EngineCore::new(contracts());
        let out = core.ingest(vec![timeout("i1", 1, 0, "k1")], t(31));
        assert_eq!(out.verdicts[0].decision, Decision::Wait);
        assert_eq!(core.next_deadline(), Some(t(60)));

        assert!(
            core.tick(t(59)).is_empty(),
            "nothing is due before the deadline"
        );
        let out = core.tick(t(60));
        assert_eq!(out.verdicts[0].decision, Decision::RetrySameKey);
        assert_eq!(core.next_deadline(), Some(t(15 * 60)));

        let out = core.tick(t(15 * 60));
        assert_eq!(
            out.escalations.len(),
            1,
            "unresolved_unknown opens an escalation on its own"
        );
        assert_eq!(out.verdicts[0].decision, Decision::Escalate);
        assert_eq!(
            out.new_findings
                .iter()
                .map(|(_, f)| f.kind)
                .collect::<Vec<_>>(),
            [FindingKind::UnresolvedUnknown]
        );
    }

    #[test]
    fn restore_reaches_the_same_verdicts() {
        let events = vec![
            timeout("i1", 1, 0, "k1"),
            timeout("i1", 2, 40, "k2"),
            record("re_1", Some("k1"), "succeeded", 20),
            record("re_9", None, "succeeded", 5),
        ];
        let mut live = EngineCore::new(contracts());
        let mut escalations = Vec::new();
        for e in events.clone() {
            escalations.extend(live.ingest(vec![e], t(100)).escalations);
        }
        let (restored, _) = EngineCore::restore(
            contracts(),
            events.into_iter().rev().collect(),
            escalations,
            t(100),
        );
        let mut a: Vec<Verdict> = live.verdicts().collect();
        let mut b: Vec<Verdict> = restored.verdicts().collect();
        a.sort_by(|x, y| x.intent_id.cmp(&y.intent_id));
        b.sort_by(|x, y| x.intent_id.cmp(&y.intent_id));
        assert_eq!(a, b);
        assert_eq!(
            restored.book().count(EscalationStatus::Open),
            1,
            "no second escalation after a restart"
        );
    }

    /// A restore audits nothing: everything it loaded is due at its `now`, and the timer's
    /// pages (here audited backwards, as threads might finish) hand out only the verdicts the
    /// store holds differently or not at all; findings found before the restart are not new.
    #[test]
    fn a_restore_is_audited_by_the_timer_and_writes_only_changes() {
        let events = vec![
            timeout("i1", 1, 0, "k1"),
            timeout("i2", 2, 10, "k2"),
            timeout("i3", 3, 20, "k3"),
            timeout("i4", 4, 30, "k4"),
            record("re_1", Some("k1"), "succeeded", 20),
        ];
        let (plain, all) = EngineCore::restore(contracts(), events.clone(), Vec::new(), t(2000));
        assert_eq!(all.verdicts.len(), 4);
        assert!(
            all.new_findings.is_empty(),
            "findings rebuilt from history are not new"
        );
        let stored: StoredMap = all
            .verdicts
            .iter()
            .filter(|v| v.intent_id != "i3")
            .map(|v| {
                let fingerprint = if v.intent_id == "i2" {
                    7
                } else {
                    v.fingerprint()
                };
                let listed_at = v.listed_at;
                (
                    v.intent_id.clone(),
                    Stored {
                        fingerprint,
                        listed_at,
                    },
                )
            })
            .collect();
        let restore = Restore {
            events,
            escalations: Vec::new(),
            stored,
        };
        let mut told = EngineCore::restore_from(contracts(), restore, t(2000));
        assert_eq!(told.unaudited(), 4);
        assert_eq!(told.next_deadline(), Some(t(2000)), "everything is due");
        let backwards = |ids: &[String], audit: AuditOne| {
            let mut out: Vec<Option<Verdict>> = ids.iter().rev().map(|id| audit(id)).collect();
            out.reverse();
            out
        };
        let mut written = Vec::new();
        while told.next_deadline().is_some_and(|at| at <= t(2000)) {
            let out = told.tick_with(t(2000), 2, backwards);
            assert!(out.new_findings.is_empty(), "{:?}", out.new_findings);
            written.extend(out.verdicts.iter().map(|v| v.intent_id.clone()));
        }
        assert_eq!(
            written,
            ["i1", "i2", "i3"],
            "the one that came to rest (start-up loads only rows not at rest: this one's must \
             say it is now), the one the store holds differently, and the one it does not hold; \
             not i4, still open and unchanged"
        );
        assert_eq!(told.unaudited(), 0);
        assert_eq!(sorted_verdicts(&told), sorted_verdicts(&plain));
        assert_eq!(told.next_deadline(), plain.next_deadline());
    }

    /// A store written before quiet intents could rest holds them as not at rest, so start-up
    /// loads them. Their first audit is then written even though the verdict is the stored
    /// one: the row must say the intent is at rest, or every start would load it again. Its
    /// routes go with it, so it can leave memory and be found.
    #[test]
    fn a_restored_intent_now_at_rest_is_written_once_so_the_next_start_leaves_it() {
        let events = vec![timeout("i1", 1, 0, "k1")];
        // Unknown for good past its key's retention, and its escalation resolved: quiet.
        let (mut plain, _) =
            EngineCore::restore(contracts(), events.clone(), Vec::new(), t(90_000));
        let before = plain.verdict("i1").unwrap();
        let resolved = plain
            .book()
            .resolved(
                before.escalation_id.as_deref().unwrap(),
                "ana",
                "reconciled",
                None,
                t(90_000),
                Some(&before),
                false,
            )
            .unwrap();
        let escalations = plain.commit_person_action(resolved, t(90_000)).escalations;
        let v = plain.verdict("i1").unwrap();
        assert_eq!(v.rest(), crate::model::Rest::Quiet, "{v:?}");
        let restore = Restore {
            events,
            escalations,
            stored: [("i1".to_string(), Stored::of(&v))].into_iter().collect(),
        };
        let mut told = EngineCore::restore_from(contracts(), restore, t(90_000));
        let out = told.tick(t(90_000));
        assert_eq!(
            out.verdicts.len(),
            1,
            "written though its fingerprint is the stored one"
        );
        let mut routes: Vec<&str> = out.routes.iter().map(|r| r.route.as_str()).collect();
        routes.sort();
        assert_eq!(routes, ["i:i1", "k:k1"]);
        assert_eq!(sorted_verdicts(&told), sorted_verdicts(&plain));
        // Audited again with nothing new: not written again.
        told.reload(contracts(), t(90_001));
        assert!(told.reload(contracts(), t(90_002)).verdicts.is_empty());
    }

    /// A start that leaves an open intent in the store (its routes are there) and serves: a
    /// record that reaches it by key alone brings it back as the start would have loaded it
    /// (due now, the findings it had before the stop not new), so the record is judged against
    /// the same history, and the verdicts, the findings handed out and the schedule are those
    /// of a start that had read it first.
    #[test]
    fn an_open_intent_left_in_the_store_comes_back_as_the_start_would_have_loaded_it() {
        let history = vec![
            timeout("i1", 1, 0, "k1"),
            timeout("i1", 2, 40, "k2"),
            timeout("i2", 3, 10, "k3"),
        ];
        // What the process that stopped had written: i1's verdict with its findings.
        let (before, written) =
            EngineCore::restore(contracts(), history.clone(), Vec::new(), t(60));
        assert!(before.verdict("i1").is_some_and(|v| !v.findings.is_empty()));
        let stored: StoredMap = written
            .verdicts
            .iter()
            .map(|v| (v.intent_id.clone(), Stored::of(v)))
            .collect();
        let late = record("re_1", Some("k1"), "succeeded", 70);
        let now = t(4000);

        let mut eager = EngineCore::restore_from(
            contracts(),
            Restore {
                events: history.clone(),
                escalations: Vec::new(),
                stored: stored.clone(),
            },
            now,
        );
        let eager_out = eager.ingest(vec![late.clone()], now);

        // The lazy start read only i2 (named since the checkpoint, say); i1 stays pending.
        let i1: Vec<Event> = history.iter().take(2).cloned().collect();
        let mut lazy = EngineCore::restore_from(
            contracts(),
            Restore {
                events: history[2..].to_vec(),
                escalations: Vec::new(),
                stored,
            },
            now,
        );
        assert_eq!(lazy.pending(), 1);
        assert_eq!(lazy.pending_page(10), ["i1"]);
        assert!(!lazy.holds("i1"));
        assert_eq!(lazy.absent(vec!["i1".into()]), ["i1"]);
        lazy.rehydrate(
            &["i1".into()],
            i1,
            Vec::new(),
            &HashMap::default(),
            std::slice::from_ref(&late),
            now,
        );
        assert_eq!(lazy.pending(), 0);
        assert_eq!(lazy.unaudited(), 2, "back unaudited, as loaded by a start");
        let lazy_out = lazy.ingest(vec![late], now);

        let summary = |o: &Outcome| {
            let mut v: Vec<(String, u64)> = o
                .verdicts
                .iter()
                .map(|v| (v.intent_id.clone(), v.fingerprint()))
                .collect();
            v.sort();
            let f: Vec<FindingKind> = o.new_findings.iter().map(|(_, f)| f.kind).collect();
            (v, f)
        };
        assert_eq!(summary(&lazy_out), summary(&eager_out));
        assert_eq!(sorted_verdicts(&lazy), sorted_verdicts(&eager));
        assert_eq!(lazy.next_deadline(), eager.next_deadline());
        assert_eq!(lazy.unaudited(), eager.unaudited());
        let mut lazy_routes: Vec<String> =
            lazy_out.routes.iter().map(|r| r.route.clone()).collect();
        lazy_routes.sort();
        assert!(
            lazy_routes.contains(&"k:k1".to_string()) && lazy_routes.contains(&"o:re_1".to_string()),
            "an open intent's routes go to the store with the step its events reached: {lazy_routes:?}"
        );
    }

    /// Start-up reads the settled intents the loaded routes reach while the ledger is built:
    /// handing them over afterwards must leave the core a one-piece restore would (here the
    /// late attempt claims an orphan's record, so the orphan leaves memory).
    #[test]
    fn a_restore_in_two_parts_is_the_restore_in_one() {
        let first = vec![
            record("re_1", Some("k1"), "succeeded", 20),
            timeout("i2", 2, 10, "k2"),
        ];
        let late = vec![timeout("i1", 1, 0, "k1")];
        let whole = Restore {
            events: first.iter().chain(&late).cloned().collect(),
            escalations: Vec::new(),
            stored: HashMap::new(),
        };
        let mut one = EngineCore::restore_from(contracts(), whole, t(2000));
        let part = Restore {
            events: first,
            escalations: Vec::new(),
            stored: HashMap::new(),
        };
        let mut two = EngineCore::restore_from(contracts(), part, t(2000));
        assert!(two.holds("orphan:re_1"));
        two.restore_more(late, t(2000));
        assert!(!two.holds("orphan:re_1"), "the record found its intent");
        assert_eq!(two.unaudited(), one.unaudited());
        assert_eq!(two.next_deadline(), Some(t(2000)), "everything is due");
        let audit_all = |c: &mut EngineCore| {
            let mut written = Vec::new();
            while c.next_deadline().is_some_and(|at| at <= t(2000)) {
                written.extend(c.tick_with(t(2000), 2, in_order).verdicts);
            }
            written.sort_by(|x, y| x.intent_id.cmp(&y.intent_id));
            written
        };
        let written = audit_all(&mut two);
        assert_eq!(written, audit_all(&mut one));
        assert_eq!(
            written
                .iter()
                .map(|v| v.intent_id.as_str())
                .collect::<Vec<_>>(),
            ["i1", "i2"]
        );
        assert_eq!(two.unaudited(), 0);
        assert_eq!(two.next_deadline(), one.next_deadline());
    }

    #[test]
    fn an_orphan_joins_its_intent_when_the_key_arrives() {
        let mut core = EngineCore::new(contracts());
        let out = core.ingest(vec![record("re_1", Some("k1"), "succeeded", 10)], t(11));
        assert_eq!(out.verdicts[0].intent_id, "orphan:re_1");
        let out = core.ingest(vec![timeout("i1", 1, 0, "k1")], t(40));
        assert_eq!(out.removed, ["orphan:re_1"]);
        assert_eq!(
            core.verdict("i1").map(|v| v.state),
            Some(IntentState::Completed)
        );
        assert!(core.verdict("orphan:re_1").is_none());
    }

    /// A record no intent claims is an orphan; past its grace (its `orphan_record` finding
    /// raised) only a claim can change it, so it leaves memory like an intent at rest (it used
    /// to stay, and be read at every start, for ever: every refund a person made by hand). The
    /// intent whose span arrives late with its key brings it back and takes it, as in an engine
    /// that never let go.
    #[test]
    fn an_orphan_past_its_grace_leaves_memory_and_its_claim_brings_it_back() {
        let orphan = record("re_9", Some("k9"), "succeeded", 10);
        let claim = timeout("late", 2, 0, "k9");
        let mut reference = EngineCore::new(contracts());
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        for c in [&mut reference, &mut core] {
            c.ingest(vec![orphan.clone()], t(11));
        }
        assert_eq!(core.evict_idle(t(1_000)), 0, "in its grace");
        let out = core.tick(t(7_200));
        reference.tick(t(7_200));
        let v = core.verdict("orphan:re_9").unwrap();
        assert!(
            v.findings
                .iter()
                .any(|f| f.kind == FindingKind::OrphanRecord),
            "{v:?}"
        );
        assert_eq!(v.rest(), crate::model::Rest::Quiet);
        let mut routes: Vec<&str> = out.routes.iter().map(|r| r.route.as_str()).collect();
        routes.sort();
        assert_eq!(routes, ["k:k9", "o:re_9"], "what a claim arrives by");
        core.mark_durable(out.seq);
        assert_eq!(core.evict_idle(t(7_261)), 1);
        assert_eq!((core.evicted(), core.intents()), (1, 0));
        assert!(!core.holds_records_of("re_9"));

        assert_eq!(core.routes_to_check(std::slice::from_ref(&claim)), ["k:k9"]);
        core.rehydrate(
            &["orphan:re_9".to_string()],
            vec![orphan],
            Vec::new(),
            &HashMap::default(),
            std::slice::from_ref(&claim),
            t(9_000),
        );
        assert_eq!(core.evicted(), 0);
        let out = core.ingest(vec![claim.clone()], t(9_000));
        let expected = reference.ingest(vec![claim], t(9_000));
        assert_eq!(out.removed, ["orphan:re_9"]);
        assert_eq!(out.removed, expected.removed);
        assert_eq!(core.verdict("late"), reference.verdict("late"));
        assert_eq!(
            core.verdict("late").map(|v| v.state),
            Some(IntentState::Completed)
        );
        // A route that outlived its orphan reaches nothing now, and counts nothing back; the
        // next step removes the pseudo-intent (its stored verdict and routes), in case it was
        // claimed while out of memory (a reload linked its object) and so never removed.
        core.rehydrate(
            &["orphan:re_9".to_string()],
            Vec::new(),
            Vec::new(),
            &HashMap::default(),
            &[],
            t(9_001),
        );
        assert_eq!(core.evicted(), 0);
        let next = core.ingest(vec![timeout("other", 3, 9_000, "k3")], t(9_002));
        assert_eq!(next.removed, ["orphan:re_9"]);
        assert!(core.ingest(Vec::new(), t(9_003)).removed.is_empty(), "once");
    }

    /// An old refund that a reader listed after its send is an orphan record, not the reader's
    /// (`Ledger::may_have_made`). The two see one object, so neither leaves memory alone (it
    /// would take evidence the other is judged with): they leave together once both are at
    /// rest, and a late record of the old refund brings both back, judged as an engine that
    /// never let go judges them.
    #[test]
    fn an_orphan_its_reader_listed_leaves_memory_with_the_reader() {
        let old = record("re_old", None, "succeeded", 0);
        let Event::Attempt(mut sent) = timeout("a", 1, 3_600, "ka") else {
            unreachable!()
        };
        (sent.error_type, sent.span_error, sent.end) = (None, false, t(3_601));
        (sent.http_status, sent.object_id) = (Some(200), Some("re_new".into()));
        sent.object_status = Some("succeeded".into());
        let read = Event::Readback(crate::test_builders::readback_at(
            crate::test_builders::span(9),
            "a",
            "list_refunds",
            t(3_700),
            t(3_701),
            &["re_new", "re_old"],
        ));
        let events = vec![old.clone(), Event::Attempt(sent), read];
        let mut reference = EngineCore::new(contracts());
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        let first = core.ingest(events.clone(), t(3_720));
        reference.ingest(events.clone(), t(3_720));
        assert_eq!(
            core.verdict("a").map(|v| v.state),
            Some(IntentState::Completed)
        );
        let orphan = core.verdict("orphan:re_old").unwrap();
        assert!(orphan
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::OrphanRecord));
        core.mark_durable(first.seq);
        assert_eq!(core.evict_idle(t(3_790)), 2, "the two leave together");
        assert_eq!(core.intents(), 0);
        assert!(!core.holds_records_of("re_old"));

        let late = record("re_old", None, "succeeded", 7_300);
        assert_eq!(
            core.routes_to_check(std::slice::from_ref(&late)),
            ["o:re_old"]
        );
        core.rehydrate(
            &["a".to_string(), "orphan:re_old".to_string()],
            events,
            Vec::new(),
            &HashMap::default(),
            std::slice::from_ref(&late),
            t(7_310),
        );
        let out = core.ingest(vec![late.clone()], t(7_310));
        assert_eq!(core.intents(), 2, "both back");
        reference.ingest(vec![late], t(7_310));
        assert!(out.removed.is_empty());
        assert_eq!(sorted_verdicts(&core), sorted_verdicts(&reference));
    }

    /// One batch can remove a pseudo-intent and make it again: a read-back makes the refund
    /// its reader's candidate (the orphan goes), and the reader's earlier check, arriving late
    /// in the same batch, shows the refund was there before the send (the orphan is back). The
    /// later state wins, as it does across two batches.
    #[test]
    fn an_orphan_removed_and_made_again_in_one_batch_is_audited() {
        let listing = |n: u64, at: i64| {
            Event::Readback(crate::test_builders::readback_at(
                crate::test_builders::span(n),
                "a",
                "list_refunds",
                t(at),
                t(at + 1),
                &["re_o"],
            ))
        };
        let first = vec![
            timeout("a", 1, 1_000, "ka"),
            record("re_o", None, "succeeded", 1_010),
        ];
        let (after, check) = (listing(7, 1_100), listing(8, 990));
        let mut one = EngineCore::new(contracts());
        let mut two = EngineCore::new(contracts());
        for c in [&mut one, &mut two] {
            c.ingest(first.clone(), t(1_020));
            assert!(c.holds("orphan:re_o"));
        }
        let out = one.ingest(vec![after.clone(), check.clone()], t(1_200));
        assert!(out.removed.is_empty(), "{:?}", out.removed);
        assert!(one.holds("orphan:re_o"), "the orphan is back");
        two.ingest(vec![after], t(1_200));
        assert!(!two.holds("orphan:re_o"), "a's candidate for a moment");
        two.ingest(vec![check], t(1_200));
        assert_eq!(sorted_verdicts(&one), sorted_verdicts(&two));
    }

    /// An intent at rest that gains a route (here an orphan's new record with a new key) may
    /// leave only once the step that handed that route out is durable: its older entry in the
    /// eviction queue, durable and due, is stale. (It used to leave on the older entry, so an
    /// event on the new key during the persister's lag found no owner in the store.)
    #[test]
    fn an_intent_at_rest_leaves_only_once_its_newest_routes_are_durable() {
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        core.ingest(vec![record("re_9", Some("k9"), "succeeded", 10)], t(11));
        let first = core.tick(t(7_200));
        assert_eq!(
            core.verdict("orphan:re_9").unwrap().rest(),
            crate::model::Rest::Quiet
        );
        core.mark_durable(first.seq);
        let later = core.ingest(
            vec![record("re_9", Some("k10"), "succeeded", 7_240)],
            t(7_250),
        );
        assert!(later.routes.iter().any(|r| r.route == "k:k10"));
        assert_eq!(
            core.evict_idle(t(7_261)),
            0,
            "k:k10 is not in the store yet"
        );
        assert_eq!(core.next_eviction(), None, "nothing durable is due");
        core.mark_durable(later.seq);
        assert_eq!(core.next_eviction(), Some(t(7_310)));
        assert_eq!(core.evict_idle(t(7_310)), 1);
    }

    /// A reload links everything again, so an intent at rest may reach other keys and objects
    /// under the new contracts: it does not leave on its old entry before its page has judged
    /// it and handed out its routes, and that step is durable.
    #[test]
    fn an_intent_at_rest_waits_for_its_reload_page_before_leaving() {
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        let settled = core.ingest(
            vec![
                timeout("a", 1, 0, "k1"),
                record("re_1", Some("k1"), "succeeded", 40),
            ],
            t(50),
        );
        core.mark_durable(settled.seq);
        let (swapped, ids) = core.swap_contracts(contracts());
        core.mark_durable(swapped.seq);
        assert_eq!(core.evict_idle(t(200)), 0, "its page has not judged it yet");
        let page = core.reaudit_with(&ids, t(200), in_order);
        assert!(page.routes.iter().any(|r| r.intent_id == "a"));
        core.mark_durable(page.seq);
        assert_eq!(core.evict_idle(t(260)), 1);
    }

    #[test]
    fn a_resent_batch_changes_nothing() {
        let mut core = EngineCore::new(contracts());
        core.ingest(vec![timeout("i1", 1, 0, "k1")], t(31));
        let again = core.ingest(vec![timeout("i1", 1, 0, "k1")], t(31));
        assert!(again.verdicts.is_empty() && again.new_findings.is_empty());
    }

    fn with_tool(e: Event, tool: &str) -> Event {
        match e {
            Event::Attempt(mut a) => {
                a.tool = tool.into();
                Event::Attempt(a)
            }
            other => other,
        }
    }

    #[test]
    fn a_stale_person_action_does_not_clobber_a_newer_escalation() {
        // The engine writes a claim to the store before committing it; if a finding joined the
        // escalation meanwhile, the claim it wrote is stale and must be recomputed, not applied.
        let mut core = EngineCore::new(contracts());
        core.ingest(
            vec![timeout("i1", 1, 0, "k1"), timeout("i1", 2, 40, "k2")],
            t(100),
        );
        let id = core.book().open_for("i1").unwrap().id.clone();
        let stale = core.book().claimed(&id, "ana", t(101), false).unwrap();
        core.ingest(vec![timeout("i1", 3, 80, "k3")], t(102));
        let joined = core.book().get(&id).unwrap().clone();
        assert_eq!(
            joined.version, stale.version,
            "the join took the version the claim computed"
        );
        core.commit_person_action(stale, t(103));
        assert_eq!(
            core.book().get(&id),
            Some(&joined),
            "a stale commit changes nothing"
        );
        let fresh = core.book().claimed(&id, "ana", t(104), false).unwrap();
        assert_eq!(fresh.version, joined.version + 1);
        assert_eq!(
            fresh.findings.len(),
            2,
            "the recomputed claim keeps the finding that joined"
        );
        core.commit_person_action(fresh, t(104));
        assert_eq!(
            core.book().get(&id).map(|e| e.status),
            Some(EscalationStatus::Claimed)
        );
    }

    #[test]
    fn the_contract_does_not_depend_on_arrival_order() {
        let mut none = Contract::example("payments.refund_none", "issue_refund_v0");
        none.idempotency = crate::contract::Idempotency::None;
        none.key_retention = None;
        let both = Arc::new(Contracts::new(vec![
            Contract::example("payments.refund", "issue_refund"),
            none,
        ]));
        let a = timeout("i1", 1, 0, "k1");
        let b = with_tool(timeout("i1", 2, 40, "k1"), "issue_refund_v0");
        let mut x = EngineCore::new(both.clone());
        x.ingest(vec![a.clone(), b.clone()], t(100));
        let mut y = EngineCore::new(both);
        y.ingest(vec![b, a], t(100));
        assert_eq!(x.verdict("i1"), y.verdict("i1"));
        assert_eq!(
            x.verdict("i1").and_then(|v| v.contract.clone()).as_deref(),
            Some("payments.refund")
        );
    }

    #[test]
    fn a_span_id_shared_by_an_attempt_and_a_read_keeps_both() {
        let a = timeout("i1", 1, 0, "k1");
        let r = Event::Readback(Readback {
            span: SpanRef {
                trace_id: [1; 16],
                span_id: [1; 8],
            },
            intent_id: "i1".into(),
            tool: "list_refunds".into(),
            at: t(10),
            end: t(11),
            object_ids: vec![],
            reported_outcome: None,
        });
        let mut x = EngineCore::new(contracts());
        x.ingest(vec![a.clone(), r.clone()], t(100));
        let mut y = EngineCore::new(contracts());
        y.ingest(vec![r, a], t(100));
        assert_eq!(x.verdict("i1"), y.verdict("i1"));
        let v = x.verdict("i1").unwrap();
        assert_eq!(
            (v.attempts.len(), v.readbacks.len()),
            (1, 1),
            "the store keeps both kinds apart, so does the ledger"
        );
    }

    /// A settled refund's routes are written with the verdict that settled it; it leaves
    /// memory once idle and once that write is durable, keeps only its routes in the filter,
    /// and a later event on its key (a duplicate under the same key, from another intent)
    /// brings it back so the finding lands on both.
    #[test]
    fn a_settled_intent_leaves_memory_and_comes_back_when_touched() {
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        let stored = vec![
            timeout("a", 1, 0, "k1"),
            record("re_1", Some("k1"), "succeeded", 40),
        ];
        let settled = core.ingest(stored.clone(), t(50));
        assert_eq!(
            core.verdict("a").map(|v| v.state),
            Some(IntentState::Completed)
        );
        let mut routes: Vec<&str> = settled.routes.iter().map(|r| r.route.as_str()).collect();
        routes.sort();
        assert_eq!(routes, ["i:a", "k:k1", "o:re_1"]);
        assert_eq!(core.evict_idle(t(100)), 0, "not idle long enough");
        assert_eq!(core.evict_idle(t(111)), 0, "its routes are not durable yet");
        assert_eq!(core.next_eviction(), None);
        core.mark_durable(settled.seq);
        assert_eq!(core.next_eviction(), Some(t(110)));
        assert_eq!(core.evict_idle(t(111)), 1);
        assert!(core.verdict("a").is_none());
        assert_eq!((core.evicted(), core.intents()), (1, 0));

        // Intent b sends a's key: the key's route may reach someone out of memory (the store
        // says who); another key does not.
        let late = timeout("b", 2, 200, "k1");
        assert!(core
            .routes_to_check(std::slice::from_ref(&late))
            .contains(&"k:k1".to_string()));
        assert!(core
            .routes_to_check(&[timeout("c", 3, 200, "k9")])
            .is_empty());
        let hits = core.absent(vec!["a".to_string()]);
        assert_eq!(hits, ["a"]);
        core.rehydrate(
            &hits,
            stored,
            Vec::new(),
            &HashMap::default(),
            std::slice::from_ref(&late),
            t(230),
        );
        assert_eq!(core.evicted(), 0);
        let out = core.ingest(vec![late], t(240));
        for id in ["a", "b"] {
            let v = core.verdict(id).unwrap();
            assert!(
                v.findings
                    .iter()
                    .any(|f| f.kind == FindingKind::KeySharedAcrossIntents),
                "{id}: {v:?}"
            );
        }
        assert!(
            out.verdicts.iter().any(|v| v.intent_id == "a"),
            "a's new verdict is written"
        );
    }

    /// A timeout the downstream never reported on is `unknown` for good once its key expired
    /// and a person resolved its escalation: nothing but evidence can change it, so it leaves
    /// memory like a settled intent (it used to stay, and be read at every start, for ever).
    /// Its record, arriving months late by its key, brings it back and completes it, with the
    /// verdict an engine that never let go would give.
    #[test]
    fn a_quiet_unknown_intent_leaves_memory_and_its_late_record_brings_it_back() {
        let stored = vec![timeout("a", 1, 0, "k1")];
        let late = record("re_1", Some("k1"), "succeeded", 300_000);
        // The same history in an engine that never lets go, for the verdict to compare with.
        let mut reference = EngineCore::new(contracts());
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        for c in [&mut reference, &mut core] {
            c.ingest(stored.clone(), t(50));
            // Past the key's retention: `unresolved_unknown`, a person is asked.
            c.tick(t(82_801));
        }
        let v = core.verdict("a").unwrap();
        assert_eq!(
            (v.state, v.decision),
            (IntentState::Unknown, Decision::Escalate)
        );
        assert_eq!(v.rest(), crate::model::Rest::Open);
        assert_eq!(
            core.evict_idle(t(90_000)),
            0,
            "an open escalation keeps it here"
        );

        let resolve = |c: &mut EngineCore| {
            let before = c.verdict("a").unwrap();
            let id = before.escalation_id.clone().unwrap();
            let resolved = c
                .book()
                .resolved(
                    &id,
                    "ana",
                    "reconciled",
                    None,
                    t(90_000),
                    Some(&before),
                    false,
                )
                .unwrap();
            c.commit_person_action(resolved, t(90_000))
        };
        resolve(&mut reference);
        let out = resolve(&mut core);
        let mut routes: Vec<&str> = out.routes.iter().map(|r| r.route.as_str()).collect();
        routes.sort();
        assert_eq!(routes, ["i:a", "k:k1"], "written so a late record finds it");
        core.mark_durable(out.seq);
        let escalations = out.escalations;
        let v = core.verdict("a").unwrap();
        assert_eq!((v.state, v.next_change), (IntentState::Unknown, None));
        assert_eq!(v.rest(), crate::model::Rest::Quiet);
        assert_eq!(core.evict_idle(t(90_061)), 1);
        assert!(core.verdict("a").is_none());
        assert_eq!((core.evicted(), core.intents()), (1, 0));

        // Months later the downstream's record of the refund arrives, by the key.
        assert_eq!(core.routes_to_check(std::slice::from_ref(&late)), ["k:k1"]);
        core.rehydrate(
            &["a".to_string()],
            stored,
            escalations,
            &HashMap::default(),
            std::slice::from_ref(&late),
            t(300_010),
        );
        let out = core.ingest(vec![late.clone()], t(300_010));
        reference.ingest(vec![late], t(300_010));
        let (back, never_left) = (core.verdict("a").unwrap(), reference.verdict("a").unwrap());
        assert_eq!(back.state, IntentState::Completed);
        assert_eq!(back, never_left);
        assert!(out.verdicts.iter().any(|v| v.intent_id == "a"));
    }

    /// Two settled intents linked by an object (a's read-back of the order listed b's refund
    /// as well as its own) cannot leave one at a time: each would take evidence the other
    /// reads. They leave together once both had their turn, and an event on the shared object
    /// brings both back with the verdicts they left with. (Each used to wait for the other
    /// for ever: memory grew with every order listed by two intents.)
    #[test]
    fn intents_linked_by_an_object_leave_memory_together() {
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        let listing = Event::Readback(Readback {
            span: SpanRef {
                trace_id: [9; 16],
                span_id: [9; 8],
            },
            intent_id: "a".into(),
            tool: "list_refunds".into(),
            at: t(45),
            end: t(46),
            object_ids: vec!["re_a".into(), "re_b".into()],
            reported_outcome: None,
        });
        let stored = vec![
            timeout("a", 1, 0, "ka"),
            record("re_a", Some("ka"), "succeeded", 40),
            timeout("b", 2, 20, "kb"),
            record("re_b", Some("kb"), "succeeded", 42),
            listing,
        ];
        let a_settles = core.ingest(stored[..2].to_vec(), t(50));
        let b_settles = core.ingest(stored[2..].to_vec(), t(80));
        let before = sorted_verdicts(&core);
        assert!(before.iter().all(|v| v.state == IntentState::Completed));
        assert!(!core.ledger.is_isolated("a") && !core.ledger.is_isolated("b"));
        core.mark_durable(a_settles.seq.max(b_settles.seq));

        assert_eq!(
            core.evict_idle(t(115)),
            0,
            "a's turn: b still has to wait its own"
        );
        assert_eq!(core.intents(), 2);
        assert_eq!(core.evict_idle(t(145)), 2, "b's turn: both leave");
        assert_eq!((core.evicted(), core.intents()), (2, 0));

        // A late record of b's refund: its route reaches both (b made it, a read it).
        let late = record("re_b", Some("kb"), "succeeded", 300);
        assert!(core
            .routes_to_check(std::slice::from_ref(&late))
            .contains(&"o:re_b".to_string()));
        let hits = core.absent(vec!["a".to_string(), "b".to_string()]);
        core.rehydrate(
            &hits,
            stored,
            Vec::new(),
            &HashMap::default(),
            std::slice::from_ref(&late),
            t(310),
        );
        assert_eq!(sorted_verdicts(&core).len(), 2);
        for (back, left) in sorted_verdicts(&core).iter().zip(&before) {
            assert_eq!(
                (&back.intent_id, back.state, back.decision, &back.findings),
                (&left.intent_id, left.state, left.decision, &left.findings)
            );
        }
    }

    /// A group that is not all settled stays whole: b is still open, so a waits with it.
    #[test]
    fn a_linked_intent_waits_for_an_open_one() {
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        // a's refund is recorded; b timed out and its read-back of the order lists a's refund.
        let out = core.ingest(
            vec![
                timeout("a", 1, 0, "ka"),
                record("re_a", Some("ka"), "succeeded", 40),
                timeout("b", 2, 45, "kb"),
                Event::Readback(Readback {
                    span: SpanRef {
                        trace_id: [9; 16],
                        span_id: [9; 8],
                    },
                    intent_id: "b".into(),
                    tool: "list_refunds".into(),
                    at: t(90),
                    end: t(91),
                    object_ids: vec!["re_a".into()],
                    reported_outcome: None,
                }),
            ],
            t(100),
        );
        core.mark_durable(out.seq);
        assert!(core.verdict("a").unwrap().is_settled());
        assert_eq!(
            core.verdict("b").map(|v| v.state),
            Some(IntentState::Unknown),
            "a's refund is a's, not b's"
        );
        assert!(!core.ledger.is_isolated("a"));
        assert_eq!(core.evict_idle(t(500)), 0);
        assert_eq!(core.intents(), 2);
    }

    /// An intent's escalations are in memory while it is: resolved and settled, they leave
    /// with it (still counted: the store holds them), and come back with it, so its next
    /// escalation is numbered after them and what the resolution covered opens nothing.
    #[test]
    fn escalations_leave_memory_with_their_intent_and_come_back_with_it() {
        let mut core = EngineCore::new(contracts()).with_eviction(Some(Dur::secs(60)));
        let stored = vec![
            timeout("a", 1, 0, "k1"),
            timeout("a", 2, 40, "k2"),
            record("re_1", Some("k1"), "succeeded", 50),
            record("re_2", Some("k2"), "succeeded", 60),
        ];
        let out = core.ingest(stored.clone(), t(70));
        let opened = out.escalations[0].clone();
        let verdict = core.verdict("a");
        let resolved = core
            .book()
            .resolved(
                &opened.id,
                "ana",
                "refunded one back",
                None,
                t(80),
                verdict.as_ref(),
                false,
            )
            .unwrap();
        let out = core.commit_person_action(resolved.clone(), t(80));
        assert!(
            core.verdict("a").unwrap().is_settled(),
            "resolved, nothing pending"
        );
        core.mark_durable(out.seq);
        assert_eq!(core.evict_idle(t(200)), 1);
        assert!(
            core.book().get(&opened.id).is_none(),
            "left with its intent"
        );
        assert_eq!(core.book().latest_for("a"), None);
        assert_eq!(
            core.book().count(EscalationStatus::Resolved),
            1,
            "still counted"
        );

        // The same refund read back again changes nothing; a third refund under a third key is
        // new evidence with a critical finding.
        let again = timeout("b", 3, 300, "k2");
        core.rehydrate(
            &["a".to_string()],
            stored,
            vec![resolved.clone()],
            &HashMap::default(),
            std::slice::from_ref(&again),
            t(310),
        );
        assert_eq!(core.book().get(&opened.id), Some(&resolved), "back with it");
        assert_eq!(
            core.book().count(EscalationStatus::Resolved),
            1,
            "counted once"
        );
        assert_eq!(
            core.verdict("a").map(|v| v.decision),
            Some(Decision::None),
            "what the resolution covered needs nothing"
        );
        let out = core.ingest(
            vec![
                timeout("a", 4, 320, "k3"),
                record("re_3", Some("k3"), "succeeded", 330),
            ],
            t(340),
        );
        let next = out
            .escalations
            .iter()
            .find(|e| e.intent_id == "a")
            .expect("a new escalation for a");
        assert_eq!(next.id, crate::escalation::escalation_id("a", 2));
    }

    /// A verdict is written when something material changed, not on every event: a re-sent
    /// export and a later re-audit that changes nothing produce no write.
    #[test]
    fn only_material_changes_are_written() {
        let mut core = EngineCore::new(contracts());
        let first = vec![timeout("a", 1, 0, "k1")];
        assert_eq!(core.ingest(first.clone(), t(35)).verdicts.len(), 1);
        assert!(
            core.ingest(first, t(36)).verdicts.is_empty(),
            "a re-sent export"
        );
        // Inside the in-flight bound the decision is `wait`; after it, `retry_same_key`.
        let out = core.tick(t(61));
        assert_eq!(out.verdicts.len(), 1, "the decision changed");
        assert_eq!(out.verdicts[0].decision, Decision::RetrySameKey);
        let later = core.ingest(vec![record("re_1", Some("k1"), "succeeded", 70)], t(71));
        assert_eq!(later.verdicts.len(), 1);
        assert_eq!(core.verdict("a").unwrap().audited_at, t(71));
    }
}
