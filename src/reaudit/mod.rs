//! `reckon reaudit`: stored history audited under other contracts, and what would change.
//!
//! Reads the store only. Intents are listed a page at a time from the stored verdicts (newest
//! first, the `--since` window applied by the store); the intents of a page not audited yet are
//! taken with their connected groups ([`connected`]: every intent linked to them by a key, an
//! object or a record, transitively, and the evidence of all of them), and every intent of the
//! groups is audited twice at one `now`: under the baseline contracts and under the proposed
//! ones. Only the contracts differ between the two verdicts, so every difference reported is
//! the contracts' doing; and since a group is audited whole, as the engine holds it, each
//! verdict is the one the engine gives, whatever the page size. Memory holds one page's groups
//! at a time (and the results of group members the listing has not reached yet), whatever the
//! size of the history.
//!
//! The decisions compared are the audit's own: an escalation that is open in the store makes a
//! live intent's decision `escalate` under either contract set, so it is left out of both.

mod print;

pub use print::{Format, Printer};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::audit::{self, Ledger, ORPHAN_PREFIX};
use crate::contract::Contracts;
use crate::model::{Event, FindingKind, Timestamp, Verdict};
use crate::store::{connected, Store, StoreError, VerdictFilter};

#[derive(Debug, thiserror::Error)]
pub enum ReauditError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

/// What to re-audit.
#[derive(Clone, Debug)]
pub struct Options {
    /// Intents whose latest event is at or after this instant (all if `None`).
    pub since: Option<Timestamp>,
    /// The instant both audits are computed for.
    pub now: Timestamp,
    /// Intents per page (at most [`VerdictFilter::MAX_LIMIT`]).
    pub page: usize,
}

/// One side of a change: what the intent's verdict says under one contract set. `None` fields
/// when the intent does not exist under it (an orphan record that now links to an intent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Side {
    pub contract: Option<String>,
    pub state: Option<String>,
    pub decision: Option<String>,
}

impl Side {
    fn of(v: Option<&Verdict>) -> Side {
        match v {
            None => Side::default(),
            Some(v) => Side {
                contract: v.contract.clone(),
                state: Some(v.state.as_str().to_string()),
                decision: Some(v.decision.as_str().to_string()),
            },
        }
    }
}

/// A finding present under one contract set and not the other.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FindingChange {
    pub kind: String,
    pub severity: String,
    /// What it is about (an object id, a key, a span id); empty for the intent as a whole.
    pub subject: String,
    pub detail: String,
}

/// How one intent's verdict changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    pub intent_id: String,
    pub tool: Option<String>,
    pub before: Side,
    pub after: Side,
    pub findings_added: Vec<FindingChange>,
    pub findings_removed: Vec<FindingChange>,
}

/// Counts over the whole re-audit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Intents audited under both contract sets.
    pub intents: u64,
    /// Intents whose verdict changes.
    pub changed: u64,
    pub state_changed: u64,
    pub decision_changed: u64,
    pub contract_changed: u64,
    /// Findings gained and lost, by kind (every kind listed, zeros included).
    pub findings_added: BTreeMap<String, u64>,
    pub findings_removed: BTreeMap<String, u64>,
    /// State transitions, `"before -> after"`.
    pub states: BTreeMap<String, u64>,
}

impl Totals {
    fn new() -> Totals {
        let zeroes = || {
            FindingKind::ALL
                .iter()
                .map(|k| (k.as_str().to_string(), 0))
                .collect()
        };
        Totals {
            findings_added: zeroes(),
            findings_removed: zeroes(),
            ..Totals::default()
        }
    }

    fn count(&mut self, c: &Change) {
        self.changed += 1;
        if c.before.state != c.after.state {
            self.state_changed += 1;
            let name = |s: &Option<String>| s.clone().unwrap_or_else(|| "(none)".into());
            *self
                .states
                .entry(format!(
                    "{} -> {}",
                    name(&c.before.state),
                    name(&c.after.state)
                ))
                .or_default() += 1;
        }
        if c.before.decision != c.after.decision {
            self.decision_changed += 1;
        }
        if c.before.contract != c.after.contract {
            self.contract_changed += 1;
        }
        for f in &c.findings_added {
            *self.findings_added.entry(f.kind.clone()).or_default() += 1;
        }
        for f in &c.findings_removed {
            *self.findings_removed.entry(f.kind.clone()).or_default() += 1;
        }
    }
}

/// The difference between two verdicts of one intent, `None` when they agree on contract,
/// state, decision and findings (by kind and subject).
pub fn diff(id: &str, before: Option<&Verdict>, after: Option<&Verdict>) -> Option<Change> {
    let set = |v: Option<&Verdict>| -> BTreeMap<(String, String), FindingChange> {
        v.map(|v| {
            v.findings
                .iter()
                .map(|f| {
                    (
                        (f.kind.as_str().to_string(), f.subject.clone()),
                        FindingChange {
                            kind: f.kind.as_str().to_string(),
                            severity: f.severity.as_str().to_string(),
                            subject: f.subject.clone(),
                            detail: f.detail.clone(),
                        },
                    )
                })
                .collect()
        })
        .unwrap_or_default()
    };
    let (old, new) = (set(before), set(after));
    let findings_added: Vec<FindingChange> = new
        .iter()
        .filter(|(k, _)| !old.contains_key(*k))
        .map(|(_, f)| f.clone())
        .collect();
    let findings_removed: Vec<FindingChange> = old
        .iter()
        .filter(|(k, _)| !new.contains_key(*k))
        .map(|(_, f)| f.clone())
        .collect();
    let (b, a) = (Side::of(before), Side::of(after));
    if b == a && findings_added.is_empty() && findings_removed.is_empty() {
        return None;
    }
    Some(Change {
        intent_id: id.to_string(),
        tool: after.or(before).and_then(|v| v.tool.clone()),
        before: b,
        after: a,
        findings_added,
        findings_removed,
    })
}

/// What [`compare`] found for one intent it was asked about.
#[derive(Clone, Debug, PartialEq)]
pub struct Compared {
    pub intent_id: String,
    /// `None` when both contract sets agree.
    pub change: Option<Change>,
    /// The latest event of the intent's history (under the baseline, else the proposed
    /// contracts); `None` when the intent exists under neither (a route that outlived it).
    pub last_event: Option<Timestamp>,
}

/// Audit `events` under both contract sets at `now` and say, for each of `ids`, how its verdict
/// changes (pure: the page step of [`run`], tested on its own). The second list holds the
/// intents that exist only under `new` (an object that no longer links under the new contracts
/// becomes an orphan), when they are orphans of an object in `events`, by id.
pub fn compare(
    events: &[Event],
    ids: &[String],
    old: &Arc<Contracts>,
    new: &Arc<Contracts>,
    now: Timestamp,
) -> (Vec<Compared>, Vec<Change>) {
    let build = |contracts: &Arc<Contracts>| {
        let mut l = Ledger::with_contracts(contracts.clone());
        for e in events {
            l.add(e.clone());
        }
        l
    };
    let (lo, ln) = (build(old), build(new));
    let verdict = |l: &Ledger, c: &Contracts, id: &str| {
        l.history(id).map(|h| {
            let contract = Ledger::contract_for(&h, c);
            audit::audit(&h, contract, now)
        })
    };
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let before = verdict(&lo, old, id);
        let after = verdict(&ln, new, id);
        out.push(Compared {
            intent_id: id.clone(),
            change: diff(id, before.as_ref(), after.as_ref()),
            last_event: before.as_ref().or(after.as_ref()).map(|v| v.last_event),
        });
    }
    let asked: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let old_ids: HashSet<String> = lo.ids().collect();
    let mut appeared: Vec<String> = ln
        .ids()
        .filter(|id| {
            id.starts_with(ORPHAN_PREFIX) && !old_ids.contains(id) && !asked.contains(id.as_str())
        })
        .collect();
    appeared.sort();
    let appeared = appeared
        .iter()
        .filter_map(|id| diff(id, None, verdict(&ln, new, id).as_ref()))
        .collect();
    (out, appeared)
}

/// Re-audit the stored history under `new` against `old`, handing each change to `emit` in the
/// order the store lists the intents (newest first), whatever `options.page`. Returns the
/// totals.
///
/// Intents are audited in whole connected groups ([`connected`]: every intent linked to one
/// by a key, an object or a record, transitively), as the engine holds them: a verdict judged
/// without the intent that shares its key or made the object it read is not the engine's. A
/// page is the groups of `options.page` listed intents not audited yet, so it may hold more
/// intents than that. A group's members that the listing has not reached yet keep their result
/// until it does (those outside `--since` are not reported); members it never reaches (a verdict
/// not written yet) and orphans that appear only under `new` follow at the end, by id.
pub async fn run<S: Store>(
    store: &S,
    old: Arc<Contracts>,
    new: Arc<Contracts>,
    options: &Options,
    mut emit: impl FnMut(&Change) -> Result<(), std::io::Error>,
) -> Result<Totals, ReauditError> {
    let mut totals = Totals::new();
    let mut cursor: Option<String> = None;
    // Results of intents audited with an earlier page's groups, until the listing reaches them.
    let mut ahead: HashMap<String, Option<Change>> = HashMap::new();
    // Orphans that appear under the new contracts (a group is audited once, so each once).
    let mut appeared: BTreeMap<String, Change> = BTreeMap::new();
    let in_window = |t: Option<Timestamp>| match (options.since, t) {
        (None, _) => true,
        (Some(since), Some(t)) => t >= since,
        (Some(_), None) => false,
    };
    let mut report = |totals: &mut Totals, change: Option<&Change>| -> Result<(), ReauditError> {
        totals.intents += 1;
        if let Some(c) = change {
            totals.count(c);
            emit(c)?;
        }
        Ok(())
    };
    loop {
        let page = store
            .list_verdicts(&VerdictFilter {
                since: options.since,
                limit: options.page.clamp(1, VerdictFilter::MAX_LIMIT),
                cursor: cursor.clone(),
                ..VerdictFilter::default()
            })
            .await?;
        let ids: Vec<String> = page.items.iter().map(|v| v.intent_id.clone()).collect();
        let listed: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let seeds: Vec<String> = ids
            .iter()
            .filter(|id| !ahead.contains_key(id.as_str()))
            .cloned()
            .collect();
        if !seeds.is_empty() {
            let (members, events) = connected(store, seeds).await?;
            let (results, fresh) = compare(&events, &members, &old, &new, options.now);
            for r in results {
                let here = listed.contains(r.intent_id.as_str());
                // A route that outlived its intent (an orphan record since linked) names
                // nothing to report, unless the listing holds it.
                let exists = r.last_event.is_some();
                if here || (exists && in_window(r.last_event)) {
                    ahead.insert(r.intent_id, r.change);
                }
            }
            for c in fresh {
                appeared.entry(c.intent_id.clone()).or_insert(c);
            }
        }
        for id in &ids {
            if let Some(change) = ahead.remove(id) {
                report(&mut totals, change.as_ref())?;
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut rest: Vec<(String, Option<Change>)> = ahead.into_iter().collect();
    rest.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, change) in rest {
        report(&mut totals, change.as_ref())?;
    }
    for change in appeared.values() {
        report(&mut totals, Some(change))?;
    }
    Ok(totals)
}
