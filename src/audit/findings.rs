//! The finding catalogue of DESIGN.md, one function per kind. Each reads the normalized history
//! and returns findings whose `(kind, subject)` is stable across re-audits.

use super::objects::{Object, Objects, UNOBSERVED_STATUS};
use std::collections::{HashMap, HashSet};

use super::params::Params;
use super::History;
use crate::contract::{Contract, Idempotency};
use crate::model::*;

pub struct Ctx<'a> {
    pub h: &'a History,
    pub c: &'a Contract,
    /// False when the intent's tool has no contract and `c` is the fallback.
    pub contract_known: bool,
    pub classes: &'a [AttemptClass],
    pub objects: &'a Objects,
    pub params: &'a Params,
    pub state: IntentState,
    pub now: Timestamp,
    pub safe_retry_until: Option<Timestamp>,
    /// Index of the first attempt that was not rejected: the one that executed the intent.
    pub first_executed: Option<usize>,
}

impl Ctx<'_> {
    pub fn attempts(&self) -> impl Iterator<Item = (&Attempt, AttemptClass)> {
        self.h.attempts.iter().zip(self.classes.iter().copied())
    }

    /// The first attempt whose outcome is open: unknown, or a conflict (another request with
    /// the key was executing; nothing says how it ended). Its time starts the unknown deadline.
    pub fn first_unknown(&self) -> Option<&Attempt> {
        self.attempts()
            .find(|(_, k)| matches!(k, AttemptClass::Unknown | AttemptClass::Conflict))
            .map(|(a, _)| a)
    }

    /// An unknown attempt could still commit at `t`: sent before `t`, and either no bound on how
    /// long a request can run or the bound has not passed.
    fn could_commit_at(&self, t: Timestamp) -> Option<&Attempt> {
        self.attempts()
            .filter(|(a, k)| *k == AttemptClass::Unknown && a.start <= t)
            .map(|(a, _)| a)
            .find(|a| self.c.max_in_flight.is_none_or(|d| t < a.start + d))
    }

    /// Decision-time check: only a bounded in-flight window is a reason to wait; with no bound,
    /// waiting never ends and the key is what makes a retry safe.
    pub fn original_may_still_commit(&self) -> bool {
        match self.c.max_in_flight {
            Some(d) => self
                .attempts()
                .any(|(a, k)| k == AttemptClass::Unknown && self.now < a.start + d),
            None => false,
        }
    }

    /// The sends whose outcome is open and that may have made an effect the records do not
    /// show yet. Under a key-keeping contract each key makes at most one object, and without
    /// one each send may: while fewer objects are linked than keys (sends) executed, any
    /// unknown send may be the one whose effect is missing (a retry under a new key). With
    /// every key accounted for, only `converge` can still act: a same-key retry after the
    /// key's work was answered may drive failed work on to completion.
    pub fn open_sends(&self) -> Vec<&Attempt> {
        let unknown = || {
            self.attempts()
                .filter(|(_, k)| *k == AttemptClass::Unknown)
                .map(|(a, _)| a)
        };
        if unknown().next().is_none() {
            return Vec::new();
        }
        let executed = || {
            self.attempts()
                .filter(|(_, k)| !matches!(k, AttemptClass::Rejected | AttemptClass::Conflict))
                .map(|(a, _)| a)
        };
        let slots = match self.c.idempotency {
            Idempotency::None => executed().count(),
            Idempotency::Replay | Idempotency::Converge => {
                let keys: HashSet<&str> = executed()
                    .filter_map(|a| a.idempotency_key.as_deref())
                    .collect();
                keys.len() + executed().filter(|a| a.idempotency_key.is_none()).count()
            }
        };
        if self.owned_objects().count() < slots {
            return unknown().collect();
        }
        if self.c.idempotency != Idempotency::Converge {
            return Vec::new();
        }
        let answered_before = |a: &Attempt| {
            self.attempts().any(|(b, k)| {
                b.start < a.start
                    && b.idempotency_key.is_some()
                    && b.idempotency_key == a.idempotency_key
                    && matches!(
                        k,
                        AttemptClass::Succeeded | AttemptClass::Failed | AttemptClass::Recorded
                    )
            })
        };
        unknown().filter(|a| answered_before(a)).collect()
    }

    /// Objects attributed to this intent for certain, not provisionally.
    pub fn owned_objects(&self) -> impl Iterator<Item = &Object> {
        self.objects
            .current()
            .into_iter()
            .filter(|o| !self.h.is_provisional(&o.object_id))
    }

    /// `b` repeats a key an earlier send of this intent executed under, where the downstream
    /// keeps keys (`replay`, `converge`), while the key is still kept (first executed send +
    /// `key_retention`; no retention set means kept for good).
    pub fn same_key_retry_inside_retention(&self, b: &Attempt) -> bool {
        if self.c.idempotency == Idempotency::None {
            return false;
        }
        let Some(key) = b.idempotency_key.as_deref() else {
            return false;
        };
        let Some(first) = self.first_executed.map(|i| &self.h.attempts[i]) else {
            return false;
        };
        let repeats = self.attempts().any(|(a, k)| {
            a.start < b.start
                && a.idempotency_key.as_deref() == Some(key)
                && !matches!(k, AttemptClass::Rejected)
        });
        repeats
            && self
                .c
                .key_retention
                .is_none_or(|r| b.start < first.start + r)
    }

    /// The first instant an owned object was seen not terminal.
    pub fn first_pending(&self) -> Option<Timestamp> {
        self.owned_objects()
            .filter_map(|o| o.first_nonterminal())
            .min()
    }

    /// An owned object's amount, currency or target differs from the intent's.
    pub fn params_differ_from_an_object(&self) -> bool {
        self.owned_objects().any(|o| !self.params.matches(o))
    }

    /// Everything the executor itself learnt about its own objects, in time order: its own
    /// attempts' responses, and read-backs that found an object (with the record status at that
    /// time). Objects owned by another intent tell it nothing about its own effect.
    fn executor_knowledge(&self) -> Vec<(Timestamp, &str, String)> {
        let mut known: Vec<(Timestamp, &str, String)> = Vec::new();
        for (a, k) in self.attempts() {
            if let (Some(id), true) = (
                a.object_id.as_ref().filter(|id| !self.h.is_foreign(id)),
                matches!(
                    k,
                    AttemptClass::Succeeded | AttemptClass::Failed | AttemptClass::Recorded
                ),
            ) {
                let status = a
                    .object_status
                    .clone()
                    .unwrap_or_else(|| UNOBSERVED_STATUS.into());
                known.push((a.end, id.as_str(), status));
            }
        }
        for r in &self.h.readbacks {
            for id in r.object_ids.iter().filter(|id| !self.h.is_foreign(id)) {
                let status = self
                    .objects
                    .get(id)
                    .and_then(|o| o.status_at(r.end))
                    .unwrap_or(UNOBSERVED_STATUS);
                known.push((r.end, id.as_str(), status.to_string()));
            }
        }
        known.sort();
        known
    }
}

pub fn all(x: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    duplicate_effect(x, &mut out);
    effect_mismatch(x, &mut out);
    key_reuse_mismatch(x, &mut out);
    new_key_retry(x, &mut out);
    expired_key_retry(x, &mut out);
    no_idempotency_contract(x, &mut out);
    unresolved_unknown(x, &mut out);
    replayed_server_error(x, &mut out);
    misreported_outcome(x, &mut out);
    resend_while_pending_or_after_terminal(x, &mut out);
    inconclusive_readback_acted_on(x, &mut out);
    stuck_pending(x, &mut out);
    retry_budget_exceeded(x, &mut out);
    orphan_record(x, &mut out);
    key_shared_across_intents(x, &mut out);
    out.sort_by(|a, b| (a.at, a.kind, &a.subject).cmp(&(b.at, b.kind, &b.subject)));
    out
}

fn span_subject(a: &Attempt) -> String {
    a.span.span_hex()
}

/// Two or more live objects for one intent: the customer got the effect twice.
fn duplicate_effect(x: &Ctx, out: &mut Vec<Finding>) {
    let live: Vec<_> = x
        .owned_objects()
        .filter(|o| !x.c.is_failure(&o.status))
        .collect();
    if let Some((first, rest)) = live.split_first() {
        for o in rest {
            out.push(Finding::new(
                FindingKind::DuplicateEffect,
                o.first_seen,
                &o.object_id,
                format!(
                    "object {} ({}) is a second effect beside {} ({})",
                    o.object_id, o.status, first.object_id, first.status
                ),
            ));
        }
    }
}

fn effect_mismatch(x: &Ctx, out: &mut Vec<Finding>) {
    for o in x.owned_objects() {
        let diff = x.params.differences(&Params::of_object(o));
        if !diff.is_empty() {
            let show = |p: &Params| {
                format!(
                    "amount={} currency={} target={}",
                    p.amount
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| "?".into()),
                    p.currency.as_deref().unwrap_or("?"),
                    p.target.as_deref().unwrap_or("?")
                )
            };
            out.push(Finding::new(
                FindingKind::EffectMismatch,
                o.first_seen,
                &o.object_id,
                format!(
                    "object {} differs in {}: intended {}, downstream has {}",
                    o.object_id,
                    diff.join(", "),
                    show(x.params),
                    show(&Params::of_object(o))
                ),
            ));
        }
    }
}

/// The same key sent with other parameters, or the downstream said so.
fn key_reuse_mismatch(x: &Ctx, out: &mut Vec<Finding>) {
    // Each key's first attempt, parsed once: a retry storm under one key stays linear.
    let mut first: HashMap<&str, (Params, Option<serde_json::Value>)> = HashMap::new();
    let mut flagged: HashSet<&str> = HashSet::new();
    for (b, class) in x.attempts() {
        let Some(key) = b.idempotency_key.as_deref() else {
            continue;
        };
        if flagged.contains(key) {
            continue;
        }
        let reported = b
            .error_type
            .as_deref()
            .is_some_and(|e| x.c.mismatch_errors.iter().any(|m| m == e));
        let params = Params::of_attempt(b, x.c);
        let changed = match first.get(key) {
            // A rejected send before any executed one left nothing under the key to mismatch:
            // the input fixed and resent under the same key is the correct retry (rule 7). One
            // after an executed send is that key sent again, refused or not.
            None if class == AttemptClass::Rejected => None,
            None => {
                first.insert(key, (params, parsed_arguments(b)));
                None
            }
            Some((first_params, first_args)) => {
                let diff = first_params.differences(&params);
                if !diff.is_empty() {
                    Some(diff.join(", "))
                } else if matches!((first_args, parsed_arguments(b)), (Some(a), Some(b)) if *a != b)
                {
                    Some("arguments".to_string())
                } else {
                    None
                }
            }
        };
        if reported || changed.is_some() {
            flagged.insert(key);
            let detail = match changed {
                Some(what) => format!("key {key} sent again with different {what}"),
                None => format!(
                    "downstream rejected key {key} as reused with other parameters ({})",
                    b.error_type.as_deref().unwrap_or("")
                ),
            };
            out.push(Finding::new(
                FindingKind::KeyReuseMismatch,
                b.start,
                key,
                detail,
            ));
        }
    }
}

/// Arguments compared as the downstream would see them: key order and spacing don't count, and
/// numbers compare by value whether sent as `45`, `45.0` or `"45.00"`.
fn parsed_arguments(a: &Attempt) -> Option<serde_json::Value> {
    if a.arguments_seen() != ArgumentsSeen::Captured {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(a.arguments.as_deref()?).ok()?;
    Some(by_value(v))
}

/// `45`, `45.0` and `45.00` written one way.
fn canonical_decimal(d: Decimal) -> String {
    let text = d.to_string();
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

fn by_value(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) => match Decimal::parse(&n.to_string()) {
            Some(d) => Value::String(canonical_decimal(d)),
            None => Value::Number(n),
        },
        Value::String(s) => match Decimal::parse(&s) {
            Some(d) => Value::String(canonical_decimal(d)),
            None => Value::String(s),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(by_value).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, by_value(v))).collect()),
        other => other,
    }
}

/// Sent under two or more keys, counting a missing key as one: a keyless send is unprotected,
/// so a keyed send and a keyless one can both execute. Rejected sends executed nothing.
fn new_key_retry(x: &Ctx, out: &mut Vec<Finding>) {
    let mut seen: HashSet<Option<&str>> = HashSet::new();
    let mut first_key: Option<Option<&str>> = None;
    let show = |k: Option<&str>| k.map_or("(no key)".to_string(), |k| format!("key {k}"));
    for (a, class) in x.attempts() {
        if class == AttemptClass::Rejected {
            continue;
        }
        let key = a.idempotency_key.as_deref();
        if !seen.insert(key) {
            continue;
        }
        match first_key {
            None => first_key = Some(key),
            Some(first) => out.push(Finding::new(
                FindingKind::NewKeyRetry,
                a.start,
                key.unwrap_or(""),
                format!(
                    "intent resent under {} (first sent under {}): the downstream cannot recognise it as a repeat",
                    show(key),
                    show(first)
                ),
            )),
        }
    }
}

fn expired_key_retry(x: &Ctx, out: &mut Vec<Finding>) {
    let (Some(until), Some(first)) = (x.safe_retry_until, x.first_executed) else {
        return;
    };
    for a in
        x.h.attempts
            .iter()
            .skip(first + 1)
            .filter(|a| a.start >= until)
    {
        out.push(Finding::new(
            FindingKind::ExpiredKeyRetry,
            a.start,
            span_subject(a),
            format!("attempt sent at or after the safe retry window closed ({}): the key may be gone and the send may execute again", crate::codec::rfc3339(until)),
        ));
    }
}

/// Per send whose outcome is unknown, on a tool with no idempotency promise: it may have made
/// an effect of its own, and a later resend that settles does not say it did not (both may
/// have gone out). It holds until a record of the downstream accounts for that send's effect:
/// a record under the send's key, or else one no response of the intent named. With fewer such
/// records than open sends nobody can tell which send made which, so every open send still
/// unaccounted for keeps it. Whatever the state: a completed intent can still have a second
/// wire out.
fn no_idempotency_contract(x: &Ctx, out: &mut Vec<Finding>) {
    if x.contract_known && x.c.idempotency != Idempotency::None {
        return;
    }
    let unknown: Vec<&Attempt> = x
        .attempts()
        .filter(|(_, k)| *k == AttemptClass::Unknown)
        .map(|(a, _)| a)
        .collect();
    if unknown.is_empty() {
        return;
    }
    // Objects the downstream's records show that the intent owns (a lead is no proof).
    let mut recorded: Vec<&RecordObservation> = Vec::new();
    for r in &x.h.records {
        if !x.h.is_provisional(&r.object_id) && !recorded.iter().any(|o| o.object_id == r.object_id)
        {
            recorded.push(r);
        }
    }
    let named: HashSet<&str> =
        x.h.attempts
            .iter()
            .filter_map(|a| a.object_id.as_deref())
            .collect();
    let mut by_key: HashSet<&str> = HashSet::new();
    let unaccounted: Vec<&Attempt> = unknown
        .into_iter()
        .filter(|a| {
            let own = a.idempotency_key.as_deref().and_then(|k| {
                recorded
                    .iter()
                    .find(|r| r.idempotency_key.as_deref() == Some(k))
            });
            match own {
                Some(r) => {
                    by_key.insert(&r.object_id);
                    false
                }
                None => true,
            }
        })
        .collect();
    let free = recorded
        .iter()
        .filter(|r| !named.contains(r.object_id.as_str()) && !by_key.contains(r.object_id.as_str()))
        .count();
    if free >= unaccounted.len() {
        return;
    }
    let why = if x.contract_known {
        "the contract promises no idempotency"
    } else {
        "no contract covers this tool"
    };
    for a in unaccounted {
        out.push(Finding::new(
            FindingKind::NoIdempotencyContract,
            a.end,
            span_subject(a),
            format!("outcome of this send unknown and {why}: no record shows its effect, and no retry is safe"),
        ));
    }
}

fn unresolved_unknown(x: &Ctx, out: &mut Vec<Finding>) {
    if x.state != IntentState::Unknown {
        return;
    }
    if let Some(a) = x.first_unknown() {
        let deadline = a.start + x.c.unknown_deadline;
        if x.now >= deadline {
            out.push(Finding::new(
                FindingKind::UnresolvedUnknown,
                deadline,
                "",
                format!(
                    "outcome still unknown {} after the first unknown attempt",
                    x.c.unknown_deadline
                ),
            ));
        }
    }
}

/// Under replay semantics a same-key retry returns the saved response, so a saved 5xx comes back
/// every time and says nothing about whether anything was written.
fn replayed_server_error(x: &Ctx, out: &mut Vec<Finding>) {
    if x.c.idempotency != Idempotency::Replay || x.state != IntentState::Unknown {
        return;
    }
    // Per key: how many 5xx answers, and the second one (where the replay shows).
    let mut errors: HashMap<&str, (usize, Timestamp)> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for a in x.h.attempts.iter().filter(|a| a.server_error()) {
        let Some(key) = a.idempotency_key.as_deref() else {
            continue;
        };
        let entry = errors.entry(key).or_insert_with(|| {
            order.push(key);
            (0, a.start)
        });
        entry.0 += 1;
        if entry.0 == 2 {
            entry.1 = a.start;
        }
    }
    for key in order {
        let (count, second) = errors[key];
        if count >= 2 {
            out.push(Finding::new(
                FindingKind::ReplayedServerError,
                second,
                key,
                format!("key {key} returned a server error {count} times: the saved response is replayed, the outcome stays open"),
            ));
        }
    }
}

fn misreported_outcome(x: &Ctx, out: &mut Vec<Finding>) {
    use AttemptClass as K;
    use ReportedOutcome as R;
    for (a, k) in x.attempts() {
        let Some(told) = a.reported_outcome else {
            continue;
        };
        // A 2xx that named no object is the downstream saying it took the request: telling
        // the model `succeeded` then is no contradiction (DESIGN.md "Findings").
        let accepted_without_object = k == K::Unknown
            && a.object_id.is_none()
            && a.effective_status()
                .is_some_and(|s| (200..=299).contains(&s));
        let wrong = match told {
            R::Failed => matches!(k, K::Unknown | K::Conflict | K::Recorded | K::Succeeded),
            R::Succeeded if accepted_without_object => false,
            R::Succeeded => matches!(
                k,
                K::Rejected | K::Failed | K::Unknown | K::Conflict | K::Recorded
            ),
            R::Rejected => !matches!(k, K::Rejected),
            R::Pending | R::Unknown => false,
        };
        if wrong {
            out.push(Finding::new(
                FindingKind::MisreportedOutcome,
                a.end,
                span_subject(a),
                format!(
                    "executor reported {} but the evidence says {}",
                    told.as_str(),
                    k.as_str()
                ),
            ));
        }
    }
}

/// A resend the executor made knowing, from its own responses and reads, that an object was
/// already recorded (pending) or settled (terminal).
fn resend_while_pending_or_after_terminal(x: &Ctx, out: &mut Vec<Finding>) {
    // One sweep: attempts are in start order, knowledge in time order; `latest` is what the
    // executor knew of each object, in the order it first learnt of them.
    let known = x.executor_knowledge();
    let mut latest: Vec<(&str, &str)> = Vec::new();
    let mut slot: HashMap<&str, usize> = HashMap::new();
    let mut next = 0;
    for b in x.h.attempts.iter().skip(1) {
        while next < known.len() && known[next].0 <= b.start {
            let (_, id, status) = &known[next];
            match slot.get(id) {
                Some(&i) => latest[i].1 = status,
                None => {
                    slot.insert(id, latest.len());
                    latest.push((id, status));
                }
            }
            next += 1;
        }
        if let Some((id, status)) = latest.iter().find(|(_, s)| x.c.is_terminal(s)) {
            if x.same_key_retry_inside_retention(b) {
                // The downstream keeps the key: it answers with the saved outcome and makes no
                // second effect (the seed's 409 loser retrying its key is this case).
                continue;
            }
            out.push(Finding::new(
                FindingKind::ResendAfterTerminal,
                b.start,
                span_subject(b),
                format!("attempt sent after object {id} was known {status}"),
            ));
        } else if let Some((id, status)) = latest.first() {
            out.push(Finding::new(
                FindingKind::ResendWhilePending,
                b.start,
                span_subject(b),
                format!("attempt sent while object {id} was recorded and {status}"),
            ));
        }
    }
}

/// An empty read-back proves nothing while the original could still commit. A read-back that
/// listed only objects that are not this intent's (another intent's, or there before its first
/// send) found nothing of its own either: acting on it is the same mistake.
fn inconclusive_readback_acted_on(x: &Ctx, out: &mut Vec<Finding>) {
    let found_nothing = |r: &&Readback| r.object_ids.iter().all(|id| x.h.is_foreign(id));
    for r in x.h.readbacks.iter().filter(found_nothing) {
        let Some(original) = x.could_commit_at(r.at) else {
            continue;
        };
        let resend =
            x.h.attempts
                .iter()
                .find(|a| a.start >= r.at && a.span != original.span);
        let failed_report = if r.reported_outcome == Some(ReportedOutcome::Failed) {
            Some(r.end)
        } else {
            x.h.attempts
                .iter()
                .find(|a| a.end >= r.at && a.reported_outcome == Some(ReportedOutcome::Failed))
                .map(|a| a.end)
        };
        let acted = match (resend.map(|a| a.start), failed_report) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = acted {
            let what = if resend.is_some_and(|a| a.start == at) {
                "a resend"
            } else {
                "a `failed` report"
            };
            out.push(Finding::new(
                FindingKind::InconclusiveReadbackActedOn,
                at,
                r.span.span_hex(),
                format!(
                    "read-back at {} found nothing of this intent's while attempt {} could still commit, followed by {what}",
                    crate::codec::rfc3339(r.at),
                    original.span.span_hex()
                ),
            ));
        }
    }
}

fn stuck_pending(x: &Ctx, out: &mut Vec<Finding>) {
    if x.state != IntentState::Pending {
        return;
    }
    if let Some(first) = x.first_pending() {
        let deadline = first + x.c.pending_deadline;
        if x.now >= deadline {
            out.push(Finding::new(
                FindingKind::StuckPending,
                deadline,
                "",
                format!("pending for more than {}", x.c.pending_deadline),
            ));
        }
    }
}

fn retry_budget_exceeded(x: &Ctx, out: &mut Vec<Finding>) {
    let Some(max) = x.c.max_attempts else { return };
    if let Some(a) = x.h.attempts.get(max as usize) {
        out.push(Finding::new(
            FindingKind::RetryBudgetExceeded,
            a.start,
            "",
            format!(
                "{} attempts, more than the contract's max_attempts = {max}",
                x.h.attempts.len()
            ),
        ));
    }
}

/// Records with no intent to link to, once they have waited out the grace period.
fn orphan_record(x: &Ctx, out: &mut Vec<Finding>) {
    if !x.h.attempts.is_empty() {
        return;
    }
    for o in x.objects.current() {
        let due = o.first_seen + x.c.orphan_grace;
        if x.now >= due {
            out.push(Finding::new(
                FindingKind::OrphanRecord,
                due,
                &o.object_id,
                format!(
                    "downstream object {} ({}) links to no known intent",
                    o.object_id, o.status
                ),
            ));
        }
    }
}

/// One key sent by attempts of two or more intents: the downstream sees one request, the
/// executor believes it made two.
fn key_shared_across_intents(x: &Ctx, out: &mut Vec<Finding>) {
    for shared in &x.h.shared_keys {
        let key = &shared.key;
        let detail = if shared.first_intent == x.h.intent_id {
            format!(
                "key {key} was also sent by intent(s) {}: the downstream treats their sends as repeats of this one",
                shared.others.join(", ")
            )
        } else {
            let replay = if x.c.idempotency == Idempotency::Replay {
                ": under replay its responses are that intent's saved ones and prove nothing about this intent's own effect"
            } else {
                ""
            };
            format!(
                "key {key} was first sent by intent {}{replay}",
                shared.first_intent
            )
        };
        out.push(Finding::new(
            FindingKind::KeySharedAcrossIntents,
            shared.shared_at,
            key,
            detail,
        ));
    }
}
