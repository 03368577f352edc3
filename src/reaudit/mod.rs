//! `reckon reaudit`: stored history audited under other contracts, and what would change.
//!
//! Reads the store only. Intents are taken a page at a time from the stored verdicts (newest
//! first, the `--since` window applied by the store), each page's evidence is loaded with
//! [`Store::events_touching`] until no new key or object appears (the same closure the engine
//! uses to bring a settled intent back), and every intent of the page is audited twice at one
//! `now`: under the baseline contracts and under the proposed ones. Only the contracts differ
//! between the two verdicts, so every difference reported is the contracts' doing. Memory holds
//! one page's evidence at a time, whatever the size of the history.
//!
//! The decisions compared are the audit's own: an escalation that is open in the store makes a
//! live intent's decision `escalate` under either contract set, so it is left out of both.

mod print;

pub use print::{Format, Printer};

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::audit::{self, Ledger, ORPHAN_PREFIX};
use crate::contract::Contracts;
use crate::model::{Event, FindingKind, Timestamp, Verdict};
use crate::store::{evidence, Store, StoreError, VerdictFilter};

/// Rounds of widening one page's evidence by the keys and objects it names.

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

/// Audit `events` under both contract sets at `now` and return the changes of `ids` (pure: the
/// page step of [`run`], tested on its own). Intents that exist only under `new` (an object that
/// no longer links under the new contracts becomes an orphan) are reported too when they are
/// orphans of an object in `events`.
pub fn compare(
    events: &[Event],
    ids: &[String],
    old: &Arc<Contracts>,
    new: &Arc<Contracts>,
    now: Timestamp,
) -> (Vec<Change>, Vec<String>) {
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
    let mut out = Vec::new();
    for id in ids {
        let before = verdict(&lo, old, id);
        let after = verdict(&ln, new, id);
        if let Some(c) = diff(id, before.as_ref(), after.as_ref()) {
            out.push(c);
        }
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
    for id in &appeared {
        let after = verdict(&ln, new, id);
        if let Some(c) = diff(id, None, after.as_ref()) {
            out.push(c);
        }
    }
    (out, appeared)
}

/// Re-audit the stored history under `new` against `old`, page by page, handing each change to
/// `emit` as soon as its page is done. Returns the totals.
pub async fn run<S: Store>(
    store: &S,
    old: Arc<Contracts>,
    new: Arc<Contracts>,
    options: &Options,
    mut emit: impl FnMut(&Change) -> Result<(), std::io::Error>,
) -> Result<Totals, ReauditError> {
    let mut totals = Totals::new();
    let mut cursor: Option<String> = None;
    // Orphans that appear under the new contracts, reported once even when two pages load the
    // same object.
    let mut appeared: BTreeSet<String> = BTreeSet::new();
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
        let (mut intents, mut objects) = (Vec::new(), Vec::new());
        for id in &ids {
            match id.strip_prefix(ORPHAN_PREFIX) {
                Some(object) => objects.push(object.to_string()),
                None => intents.push(id.clone()),
            }
        }
        let events = evidence(store, intents, objects).await?;
        let (changes, fresh) = compare(&events, &ids, &old, &new, options.now);
        totals.intents += ids.len() as u64;
        for c in changes {
            let orphan_here = fresh.contains(&c.intent_id);
            if orphan_here && !appeared.insert(c.intent_id.clone()) {
                continue;
            }
            if orphan_here {
                totals.intents += 1;
            }
            totals.count(&c);
            emit(&c)?;
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(totals)
}
