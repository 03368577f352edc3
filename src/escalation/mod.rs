//! The escalation queue as a pure state machine.
//!
//! A high or critical finding opens an escalation for its intent; an intent has at most one open
//! (or claimed) escalation and later findings join it. An escalation keeps the findings that
//! opened it, as they read then, even when later evidence removes them from the verdict. A person
//! claims and resolves it; the resolution covers the evidence the verdict held at that moment.
//! After it, the intent's decision is `none` until new evidence arrives. A new attempt that comes
//! with a high or critical finding (of any kind, a resolved one included), or evidence that brings
//! a finding no escalation of the intent has held (a second refund, another intent sending its
//! key), opens a new escalation; time alone (a deadline passing over what the person settled)
//! does not. Every transition takes
//! its time as an input, and ids are derived from the intent, so a rebuilt book reaches the same
//! state.

use foldhash::HashMap;

use sha2::{Digest, Sha256};

use crate::model::*;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EscalationError {
    #[error("no escalation with id {0}")]
    NotFound(String),
    /// Someone else holds it: claiming or resolving it takes `"override": true`.
    #[error("escalation {id} is claimed by {by}; to take it over, act with \"override\": true")]
    AlreadyClaimed { id: String, by: String },
    #[error("escalation {0} is already resolved")]
    AlreadyResolved(String),
    #[error("escalation {0} was withdrawn: late evidence showed its findings never held")]
    Withdrawn(String),
    #[error("{0} must not be empty")]
    Missing(&'static str),
}

#[derive(Debug, Default)]
pub struct EscalationBook {
    /// Hashed, not ordered: a restart with a million open escalations looks each up several
    /// times, and ordered string keys made that a third of the start-up. Boxed: a table's
    /// slack costs a pointer per empty slot, not an escalation.
    by_id: HashMap<String, Box<Escalation>>,
    /// What the book keeps per intent with escalations in memory.
    intents: HashMap<String, IntentEscalations>,
    /// Escalations by status (open, claimed, resolved, withdrawn), kept current so gauges cost
    /// nothing: those of intents out of memory too (see [`EscalationBook::forget`]).
    counts: [usize; 4],
}

/// An intent's escalations, as small as they go: most intents with one have exactly one, with
/// one or two findings, and a restart may hold a million of them.
#[derive(Debug, Default)]
struct IntentEscalations {
    /// Its escalations' ids, oldest first.
    ids: Vec<String>,
    /// `(kind, subject)` of the findings any of them holds, sorted.
    seen: Vec<(FindingKind, String)>,
}

impl IntentEscalations {
    fn has_seen(&self, f: &Finding) -> bool {
        self.seen
            .binary_search_by(|(kind, subject)| {
                (*kind, subject.as_str()).cmp(&(f.kind, f.subject.as_str()))
            })
            .is_ok()
    }

    fn see(&mut self, f: &Finding) {
        let at = self.seen.binary_search_by(|(kind, subject)| {
            (*kind, subject.as_str()).cmp(&(f.kind, f.subject.as_str()))
        });
        if let Err(at) = at {
            self.seen.reserve_exact(1);
            self.seen.insert(at, (f.kind, f.subject.clone()));
        }
    }
}

fn slot(status: EscalationStatus) -> usize {
    match status {
        EscalationStatus::Open => 0,
        EscalationStatus::Claimed => 1,
        EscalationStatus::Resolved => 2,
        EscalationStatus::Withdrawn => 3,
    }
}

impl EscalationBook {
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuild from stored escalations (any order).
    pub fn restore(escalations: impl IntoIterator<Item = Escalation>) -> Self {
        let mut book = Self::new();
        for e in oldest_first(escalations) {
            book.insert(e);
        }
        book
    }

    /// Count what the store holds: `stored`, escalations by status over every intent, those
    /// whose intents are not in memory included (a start loads only the escalations of the
    /// intents it loads).
    pub fn count_stored(&mut self, stored: impl IntoIterator<Item = (EscalationStatus, u64)>) {
        self.counts = [0; 4];
        for (status, n) in stored {
            self.counts[slot(status)] += n as usize;
        }
    }

    /// The intent left memory (settled: its escalations are all resolved and stored): its
    /// escalations leave with it. They stay counted; they are still in the store.
    pub fn forget(&mut self, intent_id: &str) {
        for id in self.intents.remove(intent_id).unwrap_or_default().ids {
            self.by_id.remove(&id);
        }
    }

    /// An intent came back from the store with its escalations (counted already, see
    /// [`EscalationBook::forget`]); one the book holds stays as it is.
    pub fn bring_back(&mut self, escalations: impl IntoIterator<Item = Escalation>) {
        for e in oldest_first(escalations) {
            if !self.by_id.contains_key(&e.id) {
                let counted = &mut self.counts[slot(e.status)];
                *counted = counted.saturating_sub(1);
                self.insert(e);
            }
        }
    }

    fn insert(&mut self, e: Escalation) {
        let intent = match self.intents.get_mut(&e.intent_id) {
            Some(intent) => intent,
            None => self.intents.entry(e.intent_id.clone()).or_default(),
        };
        // A withdrawn escalation's findings never held: nothing was seen.
        if e.status != EscalationStatus::Withdrawn {
            for f in &e.findings {
                intent.see(f);
            }
        }
        if !intent.ids.contains(&e.id) {
            intent.ids.reserve_exact(1);
            intent.ids.push(e.id.clone());
        }
        self.counts[slot(e.status)] += 1;
        if let Some(old) = self.by_id.insert(e.id.clone(), Box::new(e)) {
            let counted = &mut self.counts[slot(old.status)];
            *counted = counted.saturating_sub(1);
        }
    }

    pub fn get(&self, id: &str) -> Option<&Escalation> {
        self.by_id.get(id).map(|e| &**e)
    }

    /// Every escalation in the book, in no particular order.
    pub fn all(&self) -> impl Iterator<Item = &Escalation> {
        self.by_id.values().map(|e| &**e)
    }

    pub fn count(&self, status: EscalationStatus) -> usize {
        self.counts[slot(status)]
    }

    /// The open or claimed escalation of an intent.
    pub fn open_for(&self, intent_id: &str) -> Option<&Escalation> {
        self.intents
            .get(intent_id)?
            .ids
            .iter()
            .filter_map(|id| self.get(id))
            .find(|e| e.status.unresolved())
    }

    /// The latest escalation of an intent a person resolved: what a resolution covered.
    fn last_resolved(&self, intent_id: &str) -> Option<&Escalation> {
        self.intents
            .get(intent_id)?
            .ids
            .iter()
            .rev()
            .filter_map(|id| self.get(id))
            .find(|e| e.status == EscalationStatus::Resolved)
    }

    /// What the intent's escalations hold, again from the escalations themselves: after one
    /// was withdrawn or lost findings that never held.
    fn reseen(&mut self, intent_id: &str) {
        let Some(intent) = self.intents.get(intent_id) else {
            return;
        };
        let mut seen: Vec<(FindingKind, String)> = intent
            .ids
            .iter()
            .filter_map(|id| self.by_id.get(id))
            .filter(|e| e.status != EscalationStatus::Withdrawn)
            .flat_map(|e| e.findings.iter().map(|f| (f.kind, f.subject.clone())))
            .collect();
        seen.sort();
        seen.dedup();
        if let Some(intent) = self.intents.get_mut(intent_id) {
            intent.seen = seen;
        }
    }

    pub fn latest_for(&self, intent_id: &str) -> Option<&Escalation> {
        self.intents
            .get(intent_id)?
            .ids
            .last()
            .and_then(|id| self.get(id))
    }

    /// Take in a fresh verdict: open, join or withdraw with the high and critical findings that
    /// held after any prefix of its evidence in event time (`findings` and `held_before`:
    /// DESIGN.md "Findings"). Returns the escalation that changed, if any.
    ///
    /// An open escalation nobody has claimed is a function of the evidence alone: it carries
    /// exactly the findings that held, and when late evidence (earlier in event time) shows none
    /// of them ever did, it is withdrawn. One a person claimed stays as the person left it;
    /// findings that held join it.
    pub fn observe(&mut self, verdict: &Verdict) -> Option<Escalation> {
        let mut held: Vec<&Finding> = verdict
            .findings
            .iter()
            .filter(|f| f.severity.escalates())
            .chain(&verdict.held_before)
            .collect();
        held.sort_by(|a, b| (a.at, a.kind, &a.subject).cmp(&(b.at, b.kind, &b.subject)));
        let intent_id = verdict.intent_id.as_str();
        if let Some(open) = self.open_for(intent_id) {
            let e = match open.status {
                EscalationStatus::Open => unclaimed_as_held(open, &held, verdict)?,
                _ => {
                    let fresh: Vec<&Finding> = held
                        .iter()
                        .copied()
                        .filter(|f| !holds(&open.findings, f))
                        .collect();
                    if fresh.is_empty() {
                        return None;
                    }
                    let mut e = open.clone();
                    e.findings.extend(fresh.iter().map(|f| (*f).clone()));
                    e.severity = e.severity.max(max_severity(&fresh));
                    e.version += 1;
                    e
                }
            };
            self.insert(e.clone());
            self.reseen(intent_id);
            return Some(e);
        }
        if held.is_empty() {
            return None;
        }
        let seen = self.intents.get(intent_id);
        let fresh: Vec<&Finding> = held
            .iter()
            .copied()
            .filter(|f| !seen.is_some_and(|s| s.has_seen(f)))
            .collect();
        // A resolution covers what it saw. A new send with a high finding present needs a person
        // again, whatever the finding's kind (the agent acted on what was settled: another email
        // may have gone out). Otherwise only a finding no escalation held does (a second refund,
        // another intent sending its key), not one the person saw and resolved (the refund they
        // waited for arriving); and a deadline's finding only with a new object beside it: time
        // alone, passing over evidence a person settled, is not new evidence.
        let reopens = match self.last_resolved(intent_id) {
            None => true,
            Some(resolved) => {
                let (send, object) = new_evidence(verdict, &resolved.covered);
                send || fresh.iter().any(|f| object || !comes_with_time(f.kind))
            }
        };
        if !reopens {
            return None;
        }
        let opened_at = fresh
            .iter()
            .map(|f| f.at)
            .min()
            .unwrap_or(verdict.last_event);
        let e = match self.latest_for(intent_id) {
            // Withdrawn last: its findings never held, but these do. The same escalation again,
            // so an intent's escalations do not depend on what arrived first.
            Some(w) if w.status == EscalationStatus::Withdrawn => Escalation {
                tool: verdict.tool.clone(),
                status: EscalationStatus::Open,
                opened_at,
                severity: max_severity(&held),
                findings: held.iter().map(|f| (*f).clone()).collect(),
                covered: Vec::new(),
                resolved_at: None,
                resolution: None,
                note: None,
                version: w.version + 1,
                ..w.clone()
            },
            _ => {
                let n = self.intents.get(intent_id).map_or(0, |v| v.ids.len()) + 1;
                Escalation {
                    id: escalation_id(intent_id, n),
                    intent_id: intent_id.to_string(),
                    tool: verdict.tool.clone(),
                    status: EscalationStatus::Open,
                    opened_at,
                    listed_at: opened_at,
                    severity: max_severity(&held),
                    findings: held.iter().map(|f| (*f).clone()).collect(),
                    covered: Vec::new(),
                    claimed_by: None,
                    claimed_at: None,
                    resolved_by: None,
                    resolved_at: None,
                    resolution: None,
                    note: None,
                    overrides: Vec::new(),
                    version: 1,
                }
            }
        };
        self.insert(e.clone());
        self.reseen(intent_id);
        Some(e)
    }

    /// Set the verdict's escalation id, and its decision to `escalate` while one is open.
    pub fn apply(&self, verdict: &mut Verdict) {
        if let Some(open) = self.open_for(&verdict.intent_id) {
            verdict.escalation_id = Some(open.id.clone());
            verdict.decision = Decision::Escalate;
        } else if let Some(latest) = self.last_resolved(&verdict.intent_id) {
            verdict.escalation_id = Some(latest.id.clone());
            // A person settled what the evidence showed; until something new arrives there is
            // nothing for an executor to do.
            if !has_new_evidence(verdict, &latest.covered, true) {
                verdict.decision = Decision::None;
            } else if verdict.decision == Decision::Escalate {
                // New statuses alone do not ask a person again (`observe`), so nobody is asked:
                // `escalate` with nothing open would leave the executor waiting on nobody (and
                // the intent never at rest). Reading the downstream is what is left to do.
                verdict.decision = Decision::Reconcile;
            }
        }
    }

    /// Claim and apply. [`EscalationBook::claimed`] is the same check without the change.
    pub fn claim(
        &mut self,
        id: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<Escalation, EscalationError> {
        let e = self.claimed(id, by, now, false)?;
        self.commit(e.clone());
        Ok(e)
    }

    /// Resolve and apply. [`EscalationBook::resolved`] is the same check without the change.
    pub fn resolve(
        &mut self,
        id: &str,
        by: &str,
        resolution: &str,
        note: Option<&str>,
        now: Timestamp,
        verdict: Option<&Verdict>,
    ) -> Result<Escalation, EscalationError> {
        let e = self.resolved(id, by, resolution, note, now, verdict, false)?;
        self.commit(e.clone());
        Ok(e)
    }

    /// Put a changed escalation in the book (once the store has it). An older version than the
    /// book holds changes nothing.
    pub fn commit(&mut self, e: Escalation) {
        match self.by_id.get(&e.id) {
            Some(old) if old.version >= e.version => {}
            _ => self.insert(e),
        }
    }

    /// The escalation as it would be once claimed by `by`, leaving the book unchanged so the
    /// caller can make it durable first. One someone else holds is taken over only with
    /// `take_over` (the API's `"override": true`), and the override is recorded on it.
    pub fn claimed(
        &self,
        id: &str,
        by: &str,
        now: Timestamp,
        take_over: bool,
    ) -> Result<Escalation, EscalationError> {
        if by.trim().is_empty() {
            return Err(EscalationError::Missing("by"));
        }
        let e = self
            .get(id)
            .ok_or_else(|| EscalationError::NotFound(id.into()))?;
        let mut held_by = None;
        match e.status {
            EscalationStatus::Resolved => return Err(EscalationError::AlreadyResolved(id.into())),
            EscalationStatus::Withdrawn => return Err(EscalationError::Withdrawn(id.into())),
            // Claiming twice by the same person is a retry, not a conflict.
            EscalationStatus::Claimed if e.claimed_by.as_deref() == Some(by) => {
                return Ok(e.clone())
            }
            EscalationStatus::Claimed => {
                let holder = e.claimed_by.clone().unwrap_or_default();
                if !take_over {
                    return Err(EscalationError::AlreadyClaimed {
                        id: id.into(),
                        by: holder,
                    });
                }
                held_by = Some(holder);
            }
            EscalationStatus::Open => {}
        }
        let mut e = e.clone();
        if let Some(held_by) = held_by {
            e.overrides.push(Override {
                by: by.to_string(),
                at: now,
                action: OverrideAction::Claim,
                held_by,
            });
        }
        e.status = EscalationStatus::Claimed;
        e.claimed_by = Some(by.to_string());
        e.claimed_at = Some(now);
        e.version += 1;
        Ok(e)
    }

    /// The escalation as it would be once resolved, leaving the book unchanged. `verdict` is the
    /// intent's verdict the person saw: the resolution covers its evidence. One claimed by
    /// someone else is resolved only with `take_over` (the API's `"override": true`), and the
    /// override is recorded on it.
    #[allow(clippy::too_many_arguments)]
    pub fn resolved(
        &self,
        id: &str,
        by: &str,
        resolution: &str,
        note: Option<&str>,
        now: Timestamp,
        verdict: Option<&Verdict>,
        take_over: bool,
    ) -> Result<Escalation, EscalationError> {
        if by.trim().is_empty() {
            return Err(EscalationError::Missing("by"));
        }
        if resolution.trim().is_empty() {
            return Err(EscalationError::Missing("resolution"));
        }
        let e = self
            .get(id)
            .ok_or_else(|| EscalationError::NotFound(id.into()))?;
        match e.status {
            EscalationStatus::Resolved => return Err(EscalationError::AlreadyResolved(id.into())),
            EscalationStatus::Withdrawn => return Err(EscalationError::Withdrawn(id.into())),
            EscalationStatus::Open | EscalationStatus::Claimed => {}
        }
        let holder = e
            .claimed_by
            .clone()
            .filter(|holder| e.status == EscalationStatus::Claimed && holder.as_str() != by);
        if let (Some(holder), false) = (&holder, take_over) {
            return Err(EscalationError::AlreadyClaimed {
                id: id.into(),
                by: holder.clone(),
            });
        }
        let mut e = e.clone();
        if let Some(held_by) = holder {
            e.overrides.push(Override {
                by: by.to_string(),
                at: now,
                action: OverrideAction::Resolve,
                held_by,
            });
        }
        e.status = EscalationStatus::Resolved;
        e.resolved_by = Some(by.to_string());
        e.resolved_at = Some(now);
        e.resolution = Some(resolution.to_string());
        e.note = note.map(str::to_string);
        e.covered = verdict.map(|v| evidence_of(v, true)).unwrap_or_default();
        e.version += 1;
        Ok(e)
    }
}

/// Stable across restarts and instances: derived from the intent id and the escalation's ordinal.
/// In the order a book takes escalations in: an intent's are numbered in it.
fn oldest_first(escalations: impl IntoIterator<Item = Escalation>) -> Vec<Escalation> {
    let mut all: Vec<Escalation> = escalations.into_iter().collect();
    all.sort_by(|a, b| (a.opened_at, &a.id).cmp(&(b.opened_at, &b.id)));
    all
}

pub fn escalation_id(intent_id: &str, n: usize) -> String {
    let digest = Sha256::digest(intent_id.as_bytes());
    format!("esc_{}_{n}", hex::encode(&digest[..8]))
}

/// Whether `findings` holds one with the identity (kind, subject) of `f`.
fn holds(findings: &[Finding], f: &Finding) -> bool {
    findings
        .iter()
        .any(|x| x.kind == f.kind && x.subject == f.subject)
}

/// An unclaimed escalation as the evidence has it: the findings that held (those it carried
/// keep their first reading), or withdrawn when none did. `None` when nothing changes.
fn unclaimed_as_held(
    open: &Escalation,
    held: &[&Finding],
    verdict: &Verdict,
) -> Option<Escalation> {
    let same = open.findings.len() == held.len() && held.iter().all(|f| holds(&open.findings, f));
    if same {
        return None;
    }
    let mut e = open.clone();
    e.version += 1;
    if held.is_empty() {
        // Late evidence, earlier in event time, shows that none of its findings ever held.
        e.status = EscalationStatus::Withdrawn;
        e.resolved_at = Some(verdict.audited_at);
        e.resolution = Some("withdrawn".to_string());
        e.covered = evidence_of(verdict, true);
        e.note = Some(format!(
            "withdrawn by reckon: with the evidence now known ({}), none of its findings ever held",
            e.covered.join(", ")
        ));
        return Some(e);
    }
    let mut findings: Vec<Finding> = open
        .findings
        .iter()
        .filter(|f| {
            held.iter()
                .any(|h| h.kind == f.kind && h.subject == f.subject)
        })
        .cloned()
        .collect();
    findings.extend(
        held.iter()
            .filter(|f| !holds(&open.findings, f))
            .map(|f| (*f).clone()),
    );
    findings.sort_by(|a, b| (a.at, a.kind, &a.subject).cmp(&(b.at, b.kind, &b.subject)));
    e.opened_at = findings.iter().map(|f| f.at).min().unwrap_or(e.opened_at);
    e.severity = findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(e.severity);
    e.findings = findings;
    Some(e)
}

fn max_severity(findings: &[&Finding]) -> Severity {
    findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::High)
}

/// The evidence a verdict holds, as stable ids: each attempt (`a:{trace}:{span}`) and each
/// object (`o:{id}`), and with `statuses` each object's status (`s:{id}={status}`). Sorted.
pub fn evidence_of(v: &Verdict, statuses: bool) -> Vec<String> {
    let mut out: Vec<String> = v
        .attempts
        .iter()
        .map(|a| format!("a:{}:{}", hex::encode(a.span.trace_id), a.span.span_hex()))
        .chain(v.objects.iter().map(|o| format!("o:{}", o.object_id)))
        .collect();
    if statuses {
        out.extend(
            v.objects
                .iter()
                .map(|o| format!("s:{}={}", o.object_id, o.status)),
        );
    }
    out.sort();
    out.dedup();
    out
}

/// Whether a finding is raised by a deadline passing rather than by evidence arriving.
fn comes_with_time(kind: FindingKind) -> bool {
    matches!(
        kind,
        FindingKind::UnresolvedUnknown | FindingKind::StuckPending | FindingKind::OrphanRecord
    )
}

/// Whether the verdict holds an attempt, and whether it holds an object, that a resolution did
/// not cover.
fn new_evidence(v: &Verdict, covered: &[String]) -> (bool, bool) {
    let uncovered = evidence_of(v, false);
    let uncovered = uncovered
        .iter()
        .filter(|x| covered.binary_search(x).is_err());
    let (mut send, mut object) = (false, false);
    for x in uncovered {
        send |= x.starts_with("a:");
        object |= x.starts_with("o:");
    }
    (send, object)
}

/// Whether the verdict holds evidence a resolution did not cover. Attempts and objects always
/// count; object statuses only with `statuses`.
fn has_new_evidence(v: &Verdict, covered: &[String], statuses: bool) -> bool {
    evidence_of(v, statuses)
        .iter()
        .any(|x| covered.binary_search(x).is_err())
}
