//! Builders of reckon's plain data for tests: events (attempts, read-backs, downstream
//! records), verdicts, escalations, the contracts scenarios run under, tool arguments, and the
//! one-line summary verdicts are compared by. One definition each, shared by the crate's unit
//! tests (`lib.rs` declares this module under `cfg(test)`) and, through `#[path]`, by the
//! integration suites in `tests/` (`audit`, `server`, `server_clickhouse`,
//! `store_conformance`). So it names only reckon's public API, as `reckon::` (under `cfg(test)`
//! `lib.rs` gives the crate that name for itself), and the library ships none of it.
//!
//! Times are seconds after [`T0`] ([`at`]) unless a builder takes a [`Timestamp`]: some tests
//! need instants near the epoch.

// Each suite uses its own part.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use reckon::contract::{Contract, Contracts, Idempotency, ParamPointers};
use reckon::model::*;

// ------------------------------------------------------------------------------------ time

/// The instant every scenario starts at, in seconds since the epoch.
pub const T0: i64 = 1_780_000_000;

pub const MIN: f64 = 60.0;
pub const HOUR: f64 = 3600.0;

/// Seconds, whole (`i64`) or not (`f64`).
pub trait Secs {
    fn nanos(self) -> i64;
}

impl Secs for i64 {
    fn nanos(self) -> i64 {
        self * 1_000_000_000
    }
}

impl Secs for f64 {
    fn nanos(self) -> i64 {
        (self * 1e9).round() as i64
    }
}

/// `secs` seconds after [`T0`].
pub fn at(secs: impl Secs) -> Timestamp {
    Timestamp(T0 * 1_000_000_000 + secs.nanos())
}

// ------------------------------------------------------------------------------------ spans

/// The span numbered `n`: `n` in the first half of the trace id and as the span id.
pub fn span(n: u64) -> SpanRef {
    let mut trace_id = [0u8; 16];
    trace_id[..8].copy_from_slice(&n.to_be_bytes());
    SpanRef {
        trace_id,
        span_id: n.to_be_bytes(),
    }
}

static SPAN_SEQ: AtomicU64 = AtomicU64::new(1);

/// A span no other call returns, nor [`span`] (its number is in the trace id's second half).
pub fn fresh_span() -> SpanRef {
    let n = SPAN_SEQ.fetch_add(1, Ordering::Relaxed);
    let mut trace_id = [0u8; 16];
    trace_id[8..].copy_from_slice(&n.to_be_bytes());
    SpanRef {
        trace_id,
        span_id: n.to_be_bytes(),
    }
}

// ------------------------------------------------------------------------------------ contracts

/// The first note's refund contract (Stripe-v1-like, assumptions A-E).
pub fn refunds() -> Contract {
    let mut c = Contract::example("payments.refund", "issue_refund");
    c.record_kind = Some("refund".into());
    c.params = ParamPointers {
        amount: Some("/amount".into()),
        currency: Some("/currency".into()),
        target: Some("/order_id".into()),
    };
    c
}

/// The second note's invoice-draft tool.
pub fn drafts() -> Contract {
    let mut c = Contract::example("bookkeeping.bill_draft", "create_bill_draft");
    c.record_kind = Some("draft".into());
    c.max_in_flight = Some(Dur::secs(30));
    c.unknown_deadline = Dur::minutes(30);
    c.success_states = vec!["created".into()];
    c.failure_states = vec!["deleted".into()];
    c.pending_states = vec![];
    c.params = ParamPointers {
        amount: Some("/amount".into()),
        currency: Some("/currency".into()),
        target: Some("/supplier".into()),
    };
    c
}

/// A downstream that accepts no idempotency key.
pub fn email() -> Contract {
    let mut c = Contract::example("notifications.email", "send_email");
    c.idempotency = Idempotency::None;
    c.key_retention = None;
    c.max_in_flight = None;
    c
}

/// [`refunds`], [`drafts`] and [`email`].
pub fn contracts() -> Contracts {
    Contracts::new(vec![refunds(), drafts(), email()])
}

// ------------------------------------------------------------------------------------ tool arguments

/// `issue_refund` arguments as the executor sends them (order 1042, USD, major units).
pub fn refund_args(amount: &str) -> String {
    format!(r#"{{"order_id":"1042","amount":{amount},"currency":"usd"}}"#)
}

/// `create_bill_draft` arguments (invoice INV-204, EUR).
pub fn draft_args(supplier: &str, amount: &str) -> String {
    format!(r#"{{"invoice":"INV-204","supplier":"{supplier}","amount":{amount},"currency":"EUR"}}"#)
}

// ------------------------------------------------------------------------------------ events

/// An attempt of `intent` with `tool` on `span` from `start` to `end`, and nothing else: no key,
/// no answer, no arguments (set them with [`AttemptExt`]).
pub fn attempt_at(
    span: SpanRef,
    intent: &str,
    tool: &str,
    start: Timestamp,
    end: Timestamp,
) -> Attempt {
    Attempt {
        span,
        intent_id: intent.into(),
        tool: tool.into(),
        start,
        end,
        idempotency_key: None,
        http_status: None,
        error_type: None,
        span_error: false,
        object_id: None,
        object_status: None,
        reported_outcome: None,
        arguments: None,
    }
}

/// An attempt of `intent` with `tool` on a fresh span, sent at `start` seconds, lasting `secs`.
pub fn attempt(intent: &str, tool: &str, start: f64, secs: f64) -> Attempt {
    attempt_at(fresh_span(), intent, tool, at(start), at(start + secs))
}

/// What an attempt carried and what came back, set one at a time.
pub trait AttemptExt {
    fn key(self, k: &str) -> Self;
    fn args(self, json: String) -> Self;
    /// The downstream's HTTP status; a 4xx/5xx also makes the span an error span.
    fn http(self, status: u16) -> Self;
    fn timeout(self) -> Self;
    fn error(self, t: &str) -> Self;
    fn object(self, id: &str, status: &str) -> Self;
    /// `reckon.outcome`: what the executor told the model.
    fn told(self, o: &str) -> Self;
}

impl AttemptExt for Attempt {
    fn key(mut self, k: &str) -> Self {
        self.idempotency_key = Some(k.into());
        self
    }
    fn args(mut self, json: String) -> Self {
        self.arguments = Some(json);
        self
    }
    fn http(mut self, status: u16) -> Self {
        self.http_status = Some(status);
        if status >= 400 {
            self.span_error = true;
        }
        self
    }
    fn timeout(mut self) -> Self {
        self.error_type = Some("timeout".into());
        self.span_error = true;
        self
    }
    fn error(mut self, t: &str) -> Self {
        self.error_type = Some(t.into());
        self.span_error = true;
        self
    }
    fn object(mut self, id: &str, status: &str) -> Self {
        self.object_id = Some(id.into());
        self.object_status = Some(status.into());
        self
    }
    fn told(mut self, o: &str) -> Self {
        self.reported_outcome = Some(ReportedOutcome::parse(o).expect("a reckon.outcome value"));
        self
    }
}

/// A read-back of `intent` with `tool` on `span` from `start` to `end` that found `found`; no
/// reported outcome.
pub fn readback_at(
    span: SpanRef,
    intent: &str,
    tool: &str,
    start: Timestamp,
    end: Timestamp,
    found: &[&str],
) -> Readback {
    Readback {
        span,
        intent_id: intent.into(),
        tool: tool.into(),
        at: start,
        end,
        object_ids: found.iter().map(|s| s.to_string()).collect(),
        reported_outcome: None,
    }
}

/// A read-back of `intent` on a fresh span at `at_secs`, lasting 0.2 s, that found `found`.
pub fn readback(intent: &str, tool: &str, at_secs: f64, found: &[&str]) -> Readback {
    readback_at(
        fresh_span(),
        intent,
        tool,
        at(at_secs),
        at(at_secs + 0.2),
        found,
    )
}

/// A downstream record observation from the records API (`source = "api"`), observed at
/// `observed`, linked by intent id when there is one; no kind, amount or key.
pub fn record_at(
    intent: Option<&str>,
    object: &str,
    status: &str,
    observed: Timestamp,
) -> RecordObservation {
    RecordObservation {
        source: "api".into(),
        kind: None,
        object_id: object.into(),
        intent_id: intent.map(str::to_string),
        idempotency_key: None,
        status: status.into(),
        amount: None,
        currency: None,
        target: None,
        created_at: None,
        observed_at: observed,
    }
}

/// [`record_at`], observed at `observed` seconds.
pub fn record(
    intent: Option<&str>,
    object: &str,
    status: &str,
    observed: f64,
) -> RecordObservation {
    record_at(intent, object, status, at(observed))
}

/// A refund on order 1042 as Stripe reports it: minor units, lower-case currency.
pub fn stripe_refund(
    intent: Option<&str>,
    object: &str,
    status: &str,
    observed: f64,
    minor: i128,
    currency: &str,
) -> RecordObservation {
    RecordObservation {
        source: "stripe".into(),
        kind: Some("refund".into()),
        amount: Some(Amount::Minor(minor)),
        currency: Some(currency.into()),
        target: Some("1042".into()),
        ..record(intent, object, status, observed)
    }
}

/// `r` with an amount in major units, its currency and target.
pub fn major(
    r: RecordObservation,
    amount: &str,
    currency: &str,
    target: &str,
) -> RecordObservation {
    RecordObservation {
        amount: Some(Amount::Major(Decimal::parse(amount).unwrap())),
        currency: Some(currency.into()),
        target: Some(target.into()),
        ..r
    }
}

/// `r` carrying the idempotency key `key`.
pub fn with_key(mut r: RecordObservation, key: &str) -> RecordObservation {
    r.idempotency_key = Some(key.into());
    r
}

/// Any event, as an [`Event`].
pub fn ev<T: Into<E>>(x: T) -> Event {
    x.into().0
}

pub struct E(Event);
impl From<Attempt> for E {
    fn from(a: Attempt) -> E {
        E(Event::Attempt(a))
    }
}
impl From<Readback> for E {
    fn from(r: Readback) -> E {
        E(Event::Readback(r))
    }
}
impl From<RecordObservation> for E {
    fn from(r: RecordObservation) -> E {
        E(Event::Record(r))
    }
}

// ------------------------------------------------------------------------------------ verdicts

fn attempt_view(n: u64, class: AttemptClass) -> AttemptView {
    AttemptView {
        span: span(n),
        start: at(10 + n as i64),
        end: at(20 + n as i64),
        idempotency_key: Some("k".into()),
        class,
        http_status: None,
        error_type: Some("timeout".into()),
        object_id: None,
        object_status: None,
        reported_outcome: Some(ReportedOutcome::Unknown),
        arguments: ArgumentsSeen::Absent,
    }
}

/// A verdict on `id` in `state` whose latest event was at `last_event`, audited a second
/// later: under `payments.refund` when it has a `tool` (else a pseudo-intent with no contract),
/// two attempts under key `k` (one unknown, one succeeded), a read-back and the refund `re_1`
/// it found; no decision, no findings. Its other times are fixed, after [`T0`].
pub fn verdict(id: &str, tool: Option<&str>, state: IntentState, last_event: Timestamp) -> Verdict {
    Verdict {
        intent_id: id.into(),
        tool: tool.map(Into::into),
        contract: tool.map(|_| "payments.refund".into()),
        contract_version: tool.map(|_| "0123456789abcdef".into()).unwrap_or_default(),
        idempotency_keys: vec!["k".into()],
        target: None,
        state,
        settled_at: matches!(
            state,
            IntentState::Completed
                | IntentState::FailedAfterExecution
                | IntentState::FailedBeforeExecution
        )
        .then(|| at(40)),
        decision: Decision::None,
        safe_retry_until: Some(at(99)),
        escalation_id: None,
        attempts: vec![
            attempt_view(1, AttemptClass::Unknown),
            attempt_view(2, AttemptClass::Succeeded),
        ],
        readbacks: vec![ReadbackView {
            span: span(3),
            at: at(30),
            object_ids: vec!["re_1".into()],
        }],
        objects: vec![ObjectView {
            object_id: "re_1".into(),
            status: "succeeded".into(),
            amount: Decimal::parse("45.00"),
            currency: Some("usd".into()),
            target: Some("1042".into()),
            first_seen: at(40),
            last_seen: at(50),
        }],
        findings: vec![],
        held_before: vec![],
        next_change: None,
        audited_at: last_event + Dur::secs(1),
        first_seen: at(1),
        last_event,
        listed_at: at(1),
    }
}

/// `v` with one finding of each of `kinds`, in order (replacing its findings).
pub fn with_findings(mut v: Verdict, kinds: &[FindingKind]) -> Verdict {
    v.findings = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| Finding::new(*k, at(1_000 + i as i64), format!("subject-{i}"), "detail"))
        .collect();
    v
}

// ------------------------------------------------------------------------------------ escalations

/// Escalation `id` of intent `intent-of-{id}`, opened at `opened_at` on a duplicate effect and a
/// new-key retry (critical), at `version`: claimed by alice 5 s after opening unless `Open` or
/// `Withdrawn`;
/// when `Resolved`, resolved by bob 9 s after opening, covering the evidence, with a resolution
/// and a note.
pub fn escalation(
    id: &str,
    status: EscalationStatus,
    opened_at: Timestamp,
    version: u64,
) -> Escalation {
    let after = |secs| opened_at + Dur::secs(secs);
    let resolved = status == EscalationStatus::Resolved;
    // A withdrawn escalation was never claimed (DESIGN.md "Findings").
    let claimed = matches!(
        status,
        EscalationStatus::Claimed | EscalationStatus::Resolved
    );
    Escalation {
        id: id.into(),
        intent_id: format!("intent-of-{id}"),
        tool: Some("refund".into()),
        status,
        opened_at,
        listed_at: opened_at,
        severity: Severity::Critical,
        findings: vec![
            Finding::new(
                FindingKind::DuplicateEffect,
                after(1),
                "re_1",
                "object re_1 is a second effect beside re_0",
            ),
            Finding::new(
                FindingKind::NewKeyRetry,
                after(1),
                "k2",
                "resent under key k2",
            ),
        ],
        covered: if resolved {
            vec!["a:00:01".into(), "o:re_1".into(), "s:re_1=succeeded".into()]
        } else {
            vec![]
        },
        claimed_by: claimed.then(|| "alice".into()),
        claimed_at: claimed.then(|| after(5)),
        resolved_by: resolved.then(|| "bob".into()),
        resolved_at: resolved.then(|| after(9)),
        resolution: resolved.then(|| "reversed one".into()),
        note: resolved.then(|| "with the customer's consent".into()),
        overrides: Vec::new(),
        version,
    }
}

// ------------------------------------------------------------------------------------ summaries

/// What a verdict shows, as one line: `state / decision / finding, finding` (findings sorted,
/// each once; `-`: none).
pub fn summary_line<'a>(
    state: &str,
    decision: &str,
    kinds: impl IntoIterator<Item = &'a str>,
) -> String {
    let mut kinds: Vec<&str> = kinds.into_iter().collect();
    kinds.sort();
    kinds.dedup();
    let findings = if kinds.is_empty() {
        "-".to_string()
    } else {
        kinds.join(", ")
    };
    format!("{state} / {decision} / {findings}")
}

/// An expectation written `state / decision / a, b` as [`summary_line`] writes it; every
/// finding must be one of the catalogue's.
pub fn normalize_expectation(s: &str) -> String {
    let parts: Vec<&str> = s.split('/').map(str::trim).collect();
    assert_eq!(
        parts.len(),
        3,
        "expectation must read `state / decision / findings`: {s}"
    );
    let kinds: Vec<&str> = parts[2]
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty() && *k != "-")
        .collect();
    for k in &kinds {
        assert!(
            FindingKind::parse(k).is_some(),
            "unknown finding kind in expectation: {k}"
        );
    }
    summary_line(parts[0], parts[1], kinds)
}
