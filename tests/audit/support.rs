//! Builders for events, and `check`: run the ledger, the audit and the escalation book over a
//! scenario and compare with an expectation written as text.

use reckon::audit::{self, Ledger};
use reckon::contract::{Contract, Contracts, Idempotency, ParamPointers};
use reckon::escalation::EscalationBook;
use reckon::model::*;

/// The instant every scenario starts at.
pub const T0: i64 = 1_780_000_000;

pub fn at(secs: f64) -> Timestamp {
    Timestamp(T0 * 1_000_000_000 + (secs * 1e9).round() as i64)
}

pub const MIN: f64 = 60.0;
pub const HOUR: f64 = 3600.0;

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

pub fn contracts() -> Contracts {
    Contracts::new(vec![refunds(), drafts(), email()])
}

pub fn refund_args(amount: &str) -> String {
    format!(r#"{{"order_id":"1042","amount":{amount},"currency":"usd"}}"#)
}

pub fn draft_args(supplier: &str, amount: &str) -> String {
    format!(r#"{{"invoice":"INV-204","supplier":"{supplier}","amount":{amount},"currency":"EUR"}}"#)
}

static SPAN_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn fresh_span() -> SpanRef {
    let n = SPAN_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut trace_id = [0u8; 16];
    trace_id[8..].copy_from_slice(&n.to_be_bytes());
    SpanRef {
        trace_id,
        span_id: n.to_be_bytes(),
    }
}

/// An attempt of `intent` with `tool`, sent at `start` seconds, lasting `secs`.
pub fn attempt(intent: &str, tool: &str, start: f64, secs: f64) -> Attempt {
    Attempt {
        span: fresh_span(),
        intent_id: intent.into(),
        tool: tool.into(),
        start: at(start),
        end: at(start + secs),
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

pub trait AttemptExt {
    fn key(self, k: &str) -> Self;
    fn args(self, json: String) -> Self;
    fn http(self, status: u16) -> Self;
    fn timeout(self) -> Self;
    fn error(self, t: &str) -> Self;
    fn object(self, id: &str, status: &str) -> Self;
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

pub fn readback(intent: &str, tool: &str, at_secs: f64, found: &[&str]) -> Readback {
    Readback {
        span: fresh_span(),
        intent_id: intent.into(),
        tool: tool.into(),
        at: at(at_secs),
        end: at(at_secs + 0.2),
        object_ids: found.iter().map(|s| s.to_string()).collect(),
        reported_outcome: None,
    }
}

/// A downstream record observation in major units, linked by intent id.
pub fn record(
    intent: Option<&str>,
    object: &str,
    status: &str,
    observed: f64,
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
        observed_at: at(observed),
    }
}

/// A refund as Stripe reports it: minor units, lower-case currency.
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

pub fn with_key(mut r: RecordObservation, key: &str) -> RecordObservation {
    r.idempotency_key = Some(key.into());
    r
}

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

/// Run every event through a ledger, audit `intent` at `now`, and pass the verdict through an
/// escalation book, as the engine does.
pub fn verdict_of(events: &[Event], intent: &str, now: Timestamp) -> (Verdict, EscalationBook) {
    let contracts = std::sync::Arc::new(contracts());
    let mut ledger = Ledger::with_contracts(contracts.clone());
    for e in events {
        ledger.add(e.clone());
    }
    let h = ledger
        .history(intent)
        .unwrap_or_else(|| panic!("no events link to intent {intent}"));
    let mut v = audit::audit(&h, Ledger::contract_for(&h, &contracts), now);
    let mut book = EscalationBook::new();
    book.observe(&v);
    book.apply(&mut v);
    (v, book)
}

/// What a verdict shows, as one line: `state / decision / finding, finding` (`-`: none).
pub fn summary(v: &Verdict) -> String {
    let mut kinds: Vec<&str> = v.findings.iter().map(|f| f.kind.as_str()).collect();
    kinds.sort();
    kinds.dedup();
    let findings = if kinds.is_empty() {
        "-".to_string()
    } else {
        kinds.join(", ")
    };
    format!(
        "{} / {} / {}",
        v.state.as_str(),
        v.decision.as_str(),
        findings
    )
}

fn normalize_expectation(s: &str) -> String {
    let parts: Vec<&str> = s.split('/').map(str::trim).collect();
    assert_eq!(
        parts.len(),
        3,
        "expectation must read `state / decision / findings`: {s}"
    );
    let mut kinds: Vec<&str> = parts[2]
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
    kinds.sort();
    kinds.dedup();
    let findings = if kinds.is_empty() {
        "-".to_string()
    } else {
        kinds.join(", ")
    };
    format!("{} / {} / {}", parts[0], parts[1], findings)
}

/// The one assertion every scenario makes. It also checks that the verdict does not depend on
/// the order events arrived in, nor on re-sent copies of them.
pub fn check(
    name: &str,
    events: &[Event],
    intent: &str,
    now: Timestamp,
    expected: &str,
) -> Verdict {
    let (v, _) = verdict_of(events, intent, now);
    assert_eq!(
        summary(&v),
        normalize_expectation(expected),
        "scenario `{name}`, intent {intent}:\n{v:#?}"
    );

    let mut reordered: Vec<Event> = events.iter().rev().cloned().collect();
    reordered.extend(events.iter().cloned());
    let (again, _) = verdict_of(&reordered, intent, now);
    assert_eq!(
        again, v,
        "scenario `{name}`: reversed and duplicated events gave another verdict"
    );
    v
}
