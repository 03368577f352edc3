//! The audit over structured event histories: a few intents on the shipped contracts that share
//! keys, objects and read-backs, with timeouts, 5xx, conflicts, records and claims that
//! contradict the evidence. Whatever the history:
//!
//! - nothing panics, and every verdict encodes as the API's JSON document;
//! - an attempt without a returned object is never `failed` (a timeout is unknown), and an
//!   intent is `failed_after_execution` only with a linked object in a failure state;
//! - the same events in another order, with re-sent copies, give the same verdicts;
//! - the decision follows the state, and `next_change` lies ahead of `now`;
//! - the engine, fed one event at a time, holds the verdicts a rebuild from all of them gives.
#![no_main]

use std::collections::HashSet;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use reckon::audit::{self, Ledger};
use reckon::codec::VerdictDoc;
use reckon::engine::core::EngineCore;
use reckon::model::*;
use reckon_fuzz::{CONTRACTS, NOW};

const INTENTS: [&str; 3] = ["int_a", "int_b", "int_c"];
/// Contracted tools of each idempotency kind, a read tool, and one no contract covers.
const TOOLS: [&str; 6] = [
    "issue_refund",
    "issue_refund_v2",
    "create_bill_draft",
    "send_email",
    "list_refunds",
    "unknown_tool",
];
const KINDS: [&str; 3] = ["refund", "draft", "email"];
const STATUSES: [&str; 9] = [
    "succeeded",
    "failed",
    "pending",
    "requires_action",
    "canceled",
    "created",
    "sent",
    "bounced",
    "weird",
];
const HTTP: [u16; 9] = [200, 201, 400, 409, 422, 429, 500, 503, 504];
const ERRORS: [&str; 4] = [
    "timeout",
    "java.net.SocketTimeoutException",
    "500",
    "idempotency_error",
];
const AMOUNTS: [&str; 4] = ["45", "45.00", "\"45.00\"", "40"];

/// Seconds after the base instant; spans up to ~2 days so key retention (24 h) and every
/// deadline are crossed.
fn at(secs: u32) -> Timestamp {
    Timestamp(NOW.0 - 3 * 86_400_000_000_000 + (secs % 200_000) as i64 * 1_000_000_000)
}

fn span(n: u8) -> SpanRef {
    SpanRef {
        trace_id: [n.wrapping_add(1); 16],
        span_id: [n.wrapping_add(1); 8],
    }
}

fn pick<'a>(u: &mut Unstructured<'_>, from: &[&'a str]) -> arbitrary::Result<&'a str> {
    Ok(from[u.choose_index(from.len())?])
}

fn opt<T>(
    u: &mut Unstructured<'_>,
    f: impl FnOnce(&mut Unstructured<'_>) -> arbitrary::Result<T>,
) -> arbitrary::Result<Option<T>> {
    Ok(if u.arbitrary()? { Some(f(u)?) } else { None })
}

fn key(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(format!("k{}", u.choose_index(4)?))
}

fn object(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(format!("obj_{}", u.choose_index(4)?))
}

fn outcome(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<ReportedOutcome>> {
    opt(u, |u| Ok(ReportedOutcome::ALL[u.choose_index(5)?]))
}

fn attempt(u: &mut Unstructured<'_>) -> arbitrary::Result<Attempt> {
    let start: u32 = u.arbitrary()?;
    let secs: u8 = u.arbitrary()?;
    let error_type = opt(u, |u| pick(u, &ERRORS).map(str::to_string))?;
    let amount = opt(u, |u| pick(u, &AMOUNTS))?;
    Ok(Attempt {
        span: span(u.arbitrary()?),
        intent_id: pick(u, &INTENTS)?.into(),
        tool: pick(u, &TOOLS)?.into(),
        start: at(start),
        end: at(start.saturating_add(secs as u32)),
        idempotency_key: opt(u, key)?,
        http_status: opt(u, |u| Ok(HTTP[u.choose_index(HTTP.len())?]))?,
        span_error: error_type.is_some() || u.arbitrary()?,
        error_type,
        object_id: opt(u, object)?,
        object_status: opt(u, |u| pick(u, &STATUSES).map(str::to_string))?,
        reported_outcome: outcome(u)?,
        arguments: amount.map(|a| {
            format!(r#"{{"order_id":"1042","amount":{a},"currency":"usd","invoice":"INV-1"}}"#)
        }),
    })
}

fn readback(u: &mut Unstructured<'_>) -> arbitrary::Result<Readback> {
    let t: u32 = u.arbitrary()?;
    let n = u.choose_index(3)?;
    Ok(Readback {
        span: span(u.arbitrary()?),
        intent_id: pick(u, &INTENTS)?.into(),
        tool: pick(u, &TOOLS)?.into(),
        at: at(t),
        end: at(t.saturating_add(1)),
        object_ids: (0..n).map(|_| object(u)).collect::<Result<_, _>>()?,
        reported_outcome: outcome(u)?,
    })
}

fn record(u: &mut Unstructured<'_>) -> arbitrary::Result<RecordObservation> {
    let t: u32 = u.arbitrary()?;
    let created = opt(u, |u| u.arbitrary::<u32>())?;
    Ok(RecordObservation {
        source: pick(u, &["stripe", "api", "otlp_log"])?.into(),
        kind: opt(u, |u| pick(u, &KINDS).map(str::to_string))?,
        object_id: object(u)?,
        intent_id: opt(u, |u| pick(u, &INTENTS).map(str::to_string))?,
        idempotency_key: opt(u, key)?,
        status: pick(u, &STATUSES)?.into(),
        amount: opt(u, |u| {
            Ok(if u.arbitrary()? {
                Amount::Minor(pick(u, &["4500", "4000"])?.parse().unwrap_or(0))
            } else {
                Amount::Major(Decimal::parse(pick(u, &["45", "45.00", "40"])?).expect("a decimal"))
            })
        })?,
        currency: opt(u, |u| pick(u, &["usd", "USD", "eur"]).map(str::to_string))?,
        target: opt(u, |u| pick(u, &["1042", "1043"]).map(str::to_string))?,
        created_at: created.map(at),
        observed_at: at(t),
    })
}

/// One identity, one content: a store keeps the first copy of an identity, so two events that
/// share one but differ have no order-independent verdict to check (re-sending is tested by
/// copying events below).
fn identity(e: &Event) -> String {
    match e {
        Event::Attempt(a) => format!("span:{:?}", a.span),
        Event::Readback(r) => format!("span:{:?}", r.span),
        Event::Record(r) => format!(
            "record:{}:{}:{}:{}",
            r.source, r.object_id, r.status, r.observed_at.0
        ),
    }
}

struct Case {
    events: Vec<Event>,
    delivered: Vec<Event>,
    now: Timestamp,
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut events = Vec::new();
        let mut seen = HashSet::new();
        let n = u.int_in_range(1..=16)?;
        for _ in 0..n {
            let e = match u.choose_index(8)? {
                0..=3 => Event::Attempt(attempt(u)?),
                4 => Event::Readback(readback(u)?),
                _ => Event::Record(record(u)?),
            };
            if seen.insert(identity(&e)) {
                events.push(e);
            }
        }
        // Another arrival order with re-sent copies.
        let mut delivered = events.clone();
        for i in (1..delivered.len()).rev() {
            let j = u.choose_index(i + 1)?;
            delivered.swap(i, j);
        }
        for _ in 0..u.choose_index(4)? {
            let copy = delivered[u.choose_index(delivered.len())?].clone();
            delivered.push(copy);
        }
        let now: u32 = u.arbitrary()?;
        Ok(Case {
            events,
            delivered,
            now: at(now),
        })
    }
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "now = {:?}", self.now)?;
        for e in &self.events {
            writeln!(f, "{e:?}")?;
        }
        Ok(())
    }
}

fn verdicts(events: &[Event], now: Timestamp) -> Vec<Verdict> {
    let mut out: Vec<Verdict> = histories(events)
        .iter()
        .map(|h| audit::audit(h, Ledger::contract_for(h, &CONTRACTS), now))
        .collect();
    out.sort_by(|a, b| a.intent_id.cmp(&b.intent_id));
    out
}

fn histories(events: &[Event]) -> Vec<audit::History> {
    let mut ledger = Ledger::with_contracts(CONTRACTS.clone());
    for e in events {
        ledger.add(e.clone());
    }
    ledger.histories().collect()
}

/// Per intent, its escalations that are not withdrawn: id, status and finding identities.
fn escalation_summary(
    core: &EngineCore,
) -> Vec<(String, EscalationStatus, Vec<(FindingKind, String)>)> {
    let mut out: Vec<_> = core
        .book()
        .all()
        .filter(|e| e.status != EscalationStatus::Withdrawn)
        .map(|e| {
            let mut ids: Vec<(FindingKind, String)> = e
                .findings
                .iter()
                .map(|f| (f.kind, f.subject.clone()))
                .collect();
            ids.sort();
            (e.id.clone(), e.status, ids)
        })
        .collect();
    out.sort();
    out
}

fn check(v: &Verdict, h: &audit::History, now: Timestamp) {
    serde_json::to_string(&VerdictDoc::from_verdict(v)).expect("a verdict encodes");
    let contract = v
        .contract
        .as_deref()
        .and_then(|n| CONTRACTS.by_name(n))
        .unwrap_or_else(|| audit::fallback_contract());
    for a in &v.attempts {
        if a.object_status.is_none() {
            assert_ne!(
                a.class,
                AttemptClass::Failed,
                "failed without an object: {v:#?}"
            );
        }
    }
    if v.state == IntentState::FailedAfterExecution {
        assert!(
            v.objects.iter().any(|o| contract.is_failure(&o.status)),
            "failed_after_execution without a failed object: {v:#?}"
        );
    }
    let expected = match v.state {
        IntentState::Completed => Some(Decision::None),
        // Unless a send with an open outcome may have made an effect of its own: then wait
        // or reconcile (below).
        IntentState::FailedAfterExecution
            if v.attempts.iter().any(|a| a.class == AttemptClass::Unknown) =>
        {
            None
        }
        IntentState::FailedAfterExecution => Some(Decision::NewIntent),
        IntentState::FailedBeforeExecution => Some(Decision::FixInput),
        IntentState::Pending => Some(Decision::Wait),
        IntentState::Unknown => None,
    };
    match expected {
        Some(d) => assert_eq!(v.decision, d, "{v:#?}"),
        None if v.decision == Decision::Escalate => assert!(
            v.findings
                .iter()
                .any(|f| f.kind == FindingKind::EffectMismatch),
            "an unknown intent escalated without an effect mismatch: {v:#?}"
        ),
        None => assert!(
            matches!(v.decision, Decision::Wait | Decision::Reconcile)
                || v.decision
                    == if v.state == IntentState::FailedAfterExecution {
                        Decision::NewIntent
                    } else {
                        Decision::RetrySameKey
                    },
            "{v:#?}"
        ),
    }
    // Once an object is linked, never a same-key retry; a lead (only a read-back links it)
    // is no link yet (DESIGN.md "Evidence attribution" 3, 8).
    if v.decision == Decision::RetrySameKey {
        assert!(
            v.objects.iter().all(|o| h.is_provisional(&o.object_id)),
            "retry_same_key with a linked object: {v:#?}"
        );
    }
    if let Some(t) = v.next_change {
        assert!(t > now, "next_change {t:?} is not after now {now:?}");
    }
}

fuzz_target!(|case: Case| {
    let Case {
        events,
        delivered,
        now,
    } = case;
    let first = verdicts(&events, now);
    for h in histories(&events) {
        let v = first
            .iter()
            .find(|v| v.intent_id == h.intent_id)
            .expect("a verdict per history");
        check(v, &h, now);
    }
    assert_eq!(
        first,
        verdicts(&delivered, now),
        "order or re-sending changed a verdict"
    );

    // The engine, one event at a time, against a rebuild from everything (as a restart does,
    // from the escalations the live engine stored).
    let mut live = EngineCore::new(CONTRACTS.clone());
    for e in &delivered {
        live.ingest(vec![e.clone()], now);
    }
    let escalations = live.book().all().cloned().collect();
    let (rebuilt, _) = EngineCore::restore(CONTRACTS.clone(), delivered, escalations, now);
    // Where an intent is listed is its first verdict's first_seen, which depends on what
    // arrived first and which a rebuild from the events alone cannot know (a restart reads it
    // from the store): compared less their place.
    let sorted = |c: &EngineCore| {
        let mut v: Vec<Verdict> = c
            .verdicts()
            .map(|v| Verdict {
                listed_at: v.first_seen,
                ..v
            })
            .collect();
        v.sort_by(|a, b| a.intent_id.cmp(&b.intent_id));
        v
    };
    assert_eq!(
        sorted(&live),
        sorted(&rebuilt),
        "incremental verdicts differ from a rebuild"
    );

    // Escalations in event time: the same evidence in one export opens, joins and withdraws
    // exactly what it does one event at a time.
    let mut at_once = EngineCore::new(CONTRACTS.clone());
    at_once.ingest(events, now);
    assert_eq!(
        escalation_summary(&live),
        escalation_summary(&at_once),
        "arrival changed an escalation"
    );
});
