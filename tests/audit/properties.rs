//! Properties over generated histories, beyond the hand-written cases: the verdict does not
//! depend on arrival order or re-sent copies, intents never bleed into each other, a verdict
//! holds until the instant it says it may change, and evidence outranks claims.

use proptest::prelude::*;
use reckon::audit::{self, classify, History, Ledger};
use reckon::model::*;

use super::support::*;

/// Histories per property per run.
pub const CASES: u32 = 512;

const STATUSES: [&str; 6] = [
    "succeeded",
    "failed",
    "pending",
    "requires_action",
    "canceled",
    "weird",
];

fn arb_attempt(ns: &'static str) -> impl Strategy<Value = Attempt> {
    (
        any::<u64>(),
        0u32..3000,
        0u32..40,
        prop::option::of(0usize..3),
        prop::option::of(prop::sample::select(vec![
            200u16, 201, 400, 409, 422, 500, 503,
        ])),
        prop::option::of(prop::sample::select(vec![
            "timeout",
            "idempotency_error",
            "500",
        ])),
        prop::option::of((0usize..3, 0usize..STATUSES.len())),
        prop::option::of(prop::sample::select(ReportedOutcome::ALL.to_vec())),
        prop::option::of(prop::sample::select(vec!["45.00", "40.00"])),
    )
        .prop_map(
            move |(id, start, secs, key, http, err, obj, told, amount)| Attempt {
                span: span(id),
                intent_id: format!("{ns}-intent"),
                tool: "issue_refund".into(),
                start: at(start as f64),
                end: at(start as f64 + secs as f64),
                idempotency_key: key.map(|k| format!("{ns}-k{k}")),
                http_status: http,
                error_type: err.map(str::to_string),
                span_error: err.is_some(),
                object_id: obj.map(|(o, _)| format!("{ns}-re{o}")),
                object_status: obj.map(|(_, s)| STATUSES[s].to_string()),
                reported_outcome: told,
                arguments: amount.map(refund_args),
            },
        )
}

fn arb_readback(ns: &'static str) -> impl Strategy<Value = Readback> {
    (
        any::<u64>(),
        0u32..3000,
        prop::collection::vec(0usize..3, 0..3),
        prop::option::of(Just(ReportedOutcome::Failed)),
    )
        .prop_map(move |(id, t, found, told)| Readback {
            span: span(id),
            intent_id: format!("{ns}-intent"),
            tool: "list_refunds".into(),
            at: at(t as f64),
            end: at(t as f64 + 0.2),
            object_ids: found.into_iter().map(|o| format!("{ns}-re{o}")).collect(),
            reported_outcome: told,
        })
}

fn arb_record(ns: &'static str) -> impl Strategy<Value = RecordObservation> {
    (
        0usize..3,
        0usize..STATUSES.len(),
        0u32..3000,
        any::<bool>(),
        prop::option::of(0usize..3),
        prop::sample::select(vec![4500i128, 4000]),
    )
        .prop_map(move |(o, s, t, by_intent, key, minor)| RecordObservation {
            source: "stripe".into(),
            kind: Some("refund".into()),
            object_id: format!("{ns}-re{o}"),
            intent_id: by_intent.then(|| format!("{ns}-intent")),
            idempotency_key: key.map(|k| format!("{ns}-k{k}")),
            status: STATUSES[s].into(),
            amount: Some(Amount::Minor(minor)),
            currency: Some("usd".into()),
            target: Some("1042".into()),
            created_at: None,
            observed_at: at(t as f64),
        })
}

fn arb_events(ns: &'static str) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(
        prop_oneof![
            4 => arb_attempt(ns).prop_map(Event::Attempt),
            1 => arb_readback(ns).prop_map(Event::Readback),
            3 => arb_record(ns).prop_map(Event::Record),
        ],
        1..14,
    )
    .prop_map(one_content_per_identity)
}

/// A re-sent event is the same event: the generator never makes two events that share an
/// identity but differ in content (the store keeps the first of those, so no order of arrival
/// can be "right" for them). Re-sending is exercised by duplicating events, below.
fn one_content_per_identity(events: Vec<Event>) -> Vec<Event> {
    let identity = |e: &Event| match e {
        Event::Attempt(a) => format!("span:{:?}", a.span),
        Event::Readback(r) => format!("span:{:?}", r.span),
        Event::Record(r) => format!(
            "record:{}:{}:{}:{}",
            r.source, r.object_id, r.status, r.observed_at.0
        ),
    };
    let mut seen = std::collections::HashSet::new();
    events
        .into_iter()
        .filter(|e| seen.insert(identity(e)))
        .collect()
}

fn verdicts(events: &[Event], now: Timestamp) -> Vec<Verdict> {
    let contracts = std::sync::Arc::new(contracts());
    let mut ledger = Ledger::with_contracts(contracts.clone());
    for e in events {
        ledger.add(e.clone());
    }
    let mut out: Vec<Verdict> = ledger
        .histories()
        .map(|h| audit::audit(&h, Ledger::contract_for(&h, &contracts), now))
        .collect();
    out.sort_by(|a, b| a.intent_id.cmp(&b.intent_id));
    out
}

/// Histories of two intents, `s-intent` and `t-intent`, that share everything a messy world
/// shares: the order (every refund is on order 1042), the key pool, the object ids, read-backs
/// that list whatever the order holds, and records naming either intent or none.
///
/// Some sends go through other tools, as the fuzzer's do: a converging refund tool, another
/// downstream's tool (its own record kind, numbering from the same ids) and a tool no contract
/// covers (a wrapper span carrying the executor's attributes, key included).
fn arb_shared_events() -> impl Strategy<Value = Vec<Event>> {
    // Other tools than the refund: an uncontracted one, another downstream's (its own record
    // kind, numbering from the same ids), a second refund endpoint, and email with no
    // idempotency promise.
    const TOOLS: [&str; 4] = [
        "unknown_tool",
        "create_bill_draft",
        "issue_refund_v2",
        "send_email",
    ];
    (
        arb_events("s"),
        prop::collection::vec(0u8..3, 14),
        prop::collection::vec(0usize..9, 14),
    )
        .prop_map(|(events, owners, tools)| {
            events
                .into_iter()
                .zip(owners.into_iter().cycle())
                .zip(tools.into_iter().cycle())
                .map(|((e, o), tool)| {
                    let who = if o == 1 { "t-intent" } else { "s-intent" };
                    match e {
                        Event::Attempt(mut a) => {
                            a.intent_id = who.into();
                            if let Some(other) = TOOLS.get(tool) {
                                a.tool = other.to_string();
                            }
                            Event::Attempt(a)
                        }
                        Event::Readback(mut r) => {
                            r.intent_id = who.into();
                            Event::Readback(r)
                        }
                        Event::Record(mut r) => {
                            r.intent_id = match o {
                                0 => r.intent_id,
                                1 => Some("t-intent".into()),
                                _ => None,
                            };
                            Event::Record(r)
                        }
                    }
                })
                .collect()
        })
}

type FindingIds = Vec<(FindingKind, String)>;

/// Per intent: state, decision and finding identities; and its escalations that are not
/// withdrawn, with their status and finding identities.
#[allow(clippy::type_complexity)]
fn delivery_summary(
    core: &reckon::engine::core::EngineCore,
) -> std::collections::BTreeMap<
    String,
    (
        IntentState,
        Decision,
        FindingIds,
        Vec<(String, EscalationStatus, FindingIds)>,
    ),
> {
    let ids = |fs: &[Finding]| -> FindingIds {
        let mut v: FindingIds = fs.iter().map(|f| (f.kind, f.subject.clone())).collect();
        v.sort();
        v
    };
    let mut out = std::collections::BTreeMap::new();
    for v in core.verdicts() {
        let mut escalations: Vec<(String, EscalationStatus, FindingIds)> = core
            .book()
            .all()
            .filter(|e| e.intent_id == v.intent_id && e.status != EscalationStatus::Withdrawn)
            .map(|e| (e.id.clone(), e.status, ids(&e.findings)))
            .collect();
        escalations.sort();
        out.insert(
            v.intent_id.clone(),
            (v.state, v.decision, ids(&v.findings), escalations),
        );
    }
    out
}

/// A's namespace untouched, plus intent B's own events and read-backs of the shared order that
/// list A's objects too.
fn arb_unrelated() -> impl Strategy<Value = (Vec<Event>, Vec<Event>)> {
    (
        arb_events("a"),
        arb_events("b"),
        prop::collection::vec((0u32..3000, prop::collection::vec(0usize..3, 0..3)), 0..3),
    )
        .prop_map(|(a, b, reads)| {
            let mut b: Vec<Event> = b
                .into_iter()
                .map(|e| match e {
                    // B's records say they are B's: an unrelated intent's effects are attributed.
                    Event::Record(mut r) => {
                        r.intent_id = Some("b-intent".into());
                        Event::Record(r)
                    }
                    other => other,
                })
                .collect();
            for (i, (t, found)) in reads.into_iter().enumerate() {
                b.push(Event::Readback(Readback {
                    span: span(u64::MAX - i as u64),
                    intent_id: "b-intent".into(),
                    tool: "list_refunds".into(),
                    at: at(t as f64),
                    end: at(t as f64 + 0.2),
                    object_ids: found.into_iter().map(|o| format!("a-re{o}")).collect(),
                    reported_outcome: None,
                }));
            }
            (a, b)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn an_owned_object_never_appears_in_another_intents_verdict(events in arb_shared_events(), now in 0u32..200_000) {
        let now = at(now as f64);
        let contracts = contracts();
        for v in verdicts(&events, now) {
            // Object identity is (kind, id): a draft numbered like a refund is another object.
            let kind = v
                .contract
                .as_deref()
                .and_then(|name| contracts.by_name(name))
                .and_then(|c| c.record_kind.as_deref());
            for o in &v.objects {
                // Rule 1: the earliest record that names an intent names the owner.
                let named = events
                    .iter()
                    .filter_map(|e| match e {
                        Event::Record(r)
                            if r.object_id == o.object_id
                                && r.intent_id.is_some()
                                && (kind.is_none() || r.kind.as_deref() == kind) =>
                        {
                            Some(r)
                        }
                        _ => None,
                    })
                    .min_by(|a, b| audit::record_order(a).cmp(&audit::record_order(b)));
                if let Some(r) = named {
                    prop_assert_eq!(
                        r.intent_id.as_deref(), Some(v.intent_id.as_str()),
                        "object {} is {:?}'s, yet in {}'s verdict", o.object_id, r.intent_id, v.intent_id
                    );
                }
            }
        }
        // And the shared histories stay order-independent.
        let mut reversed = events.clone();
        reversed.reverse();
        prop_assert_eq!(verdicts(&events, now), verdicts(&reversed, now));
    }

    #[test]
    fn an_unrelated_intent_on_the_same_order_never_changes_a_verdict((a, b) in arb_unrelated(), now in 0u32..200_000) {
        let now = at(now as f64);
        // Real intents only: an unowned record (`orphan:...`) legitimately links to whoever
        // reads it next, the unrelated intent included (DESIGN.md attribution rule 3).
        let real = |vs: Vec<Verdict>| -> Vec<Verdict> {
            vs.into_iter().filter(|v| !v.intent_id.starts_with(audit::ORPHAN_PREFIX)).collect()
        };
        let alone = real(verdicts(&a, now));
        let mut both = a.clone();
        both.extend(b.iter().cloned());
        let together: Vec<Verdict> = real(verdicts(&both, now))
            .into_iter()
            .filter(|v| alone.iter().any(|x| x.intent_id == v.intent_id))
            .collect();
        // Except that an object A holds only because its own read-back listed it, and that B
        // listed too after a send of its own, is no longer A's either (it may as well be B's:
        // rule 3 with two candidates). B's reading never gives A anything.
        let mut ledger = Ledger::with_contracts(std::sync::Arc::new(contracts()));
        for e in &a {
            ledger.add(e.clone());
        }
        let provisional: Vec<String> = ledger.histories().flat_map(|h| h.provisional).collect();
        let contested = b.iter().any(|e| match e {
            Event::Readback(r) => r.object_ids.iter().any(|o| provisional.contains(o)),
            _ => false,
        });
        if contested {
            for (x, y) in alone.iter().zip(&together) {
                for o in &y.objects {
                    prop_assert!(
                        x.objects.iter().any(|p| p.object_id == o.object_id),
                        "{} got {} from an unrelated intent", y.intent_id, o.object_id
                    );
                }
            }
        } else {
            prop_assert_eq!(alone, together);
        }
    }

    #[test]
    fn order_and_resending_do_not_change_verdicts(
        (events, shuffled) in arb_events("a").prop_flat_map(|e| (Just(e.clone()), Just(e).prop_shuffle())),
        resend in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        now in 0u32..200_000,
    ) {
        let now = at(now as f64);
        let mut delivered = shuffled;
        for i in resend {
            let copy = delivered[i.index(delivered.len())].clone();
            delivered.push(copy);
        }
        prop_assert_eq!(verdicts(&events, now), verdicts(&delivered, now));
    }

    /// DESIGN.md "Findings": whether a finding opened an escalation is a function of the
    /// evidence, never of its arrival. The same evidence one event at a time, in one export, in
    /// random batches and orders with re-sends and an unrelated intent's traffic between them,
    /// gives the same verdicts and the same escalations (status and findings; a withdrawn one
    /// counting as none).
    #[test]
    fn delivery_changes_no_verdict_and_no_escalation(
        (events, shuffled) in arb_shared_events().prop_flat_map(|e| (Just(e.clone()), Just(e).prop_shuffle())),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        resend in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        unrelated in arb_events("u"),
        between in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        now in 0u32..200_000,
    ) {
        use reckon::engine::core::EngineCore;
        let now = at(now as f64);
        let contracts = std::sync::Arc::new(contracts());

        let mut one_at_a_time = EngineCore::new(contracts.clone());
        for e in &events {
            one_at_a_time.ingest(vec![e.clone()], now);
        }
        let mut one_export = EngineCore::new(contracts.clone());
        one_export.ingest(events.clone(), now);

        let mut delivered = shuffled;
        for i in resend {
            let copy = delivered[i.index(delivered.len())].clone();
            delivered.push(copy);
        }
        for (e, at) in unrelated.into_iter().zip(between) {
            let at = at.index(delivered.len() + 1);
            delivered.insert(at, e);
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(delivered.len() + 1)).collect();
        cuts.push(0);
        cuts.push(delivered.len());
        cuts.sort_unstable();
        cuts.dedup();
        let mut batched = EngineCore::new(contracts);
        for w in cuts.windows(2) {
            batched.ingest(delivered[w[0]..w[1]].to_vec(), now);
        }

        let expected = delivery_summary(&one_export);
        prop_assert_eq!(&delivery_summary(&one_at_a_time), &expected, "one event at a time");
        let mut mixed = delivery_summary(&batched);
        mixed.retain(|id, _| !id.contains("u-"));
        prop_assert_eq!(&mixed, &expected, "shuffled batches with re-sends and other traffic");
    }

    #[test]
    fn intents_with_their_own_keys_never_bleed(a in arb_events("a"), b in arb_events("b"), now in 0u32..200_000) {
        let now = at(now as f64);
        let alone = verdicts(&a, now);
        let mut both = a.clone();
        both.extend(b);
        let together: Vec<Verdict> = verdicts(&both, now).into_iter().filter(|v| alone.iter().any(|x| x.intent_id == v.intent_id)).collect();
        prop_assert_eq!(alone, together);
    }

    #[test]
    fn a_verdict_holds_until_its_next_change(events in arb_events("a"), now in 0u32..200_000, frac in 0.0f64..1.0) {
        let now = at(now as f64);
        for v in verdicts(&events, now) {
            let later = match v.next_change {
                Some(t) => {
                    prop_assert!(t > now, "next_change must lie ahead");
                    Timestamp(now.0 + (((t.0 - now.0 - 1) as f64) * frac) as i64)
                }
                None => Timestamp(now.0 + (1e9 * 3600.0 * 1000.0 * frac) as i64),
            };
            let again = verdicts(&events, later).into_iter().find(|x| x.intent_id == v.intent_id).unwrap();
            prop_assert_eq!((v.state, v.decision, &v.findings), (again.state, again.decision, &again.findings));
        }
    }

    #[test]
    fn evidence_outranks_claims(a in arb_attempt("a")) {
        let class = classify(&a, &refunds());
        if a.object_status.is_none() && a.http_status.is_none_or(|s| s >= 500 || s == 200 || s == 201) {
            prop_assert_eq!(class, AttemptClass::Unknown, "no response evidence: unknown, whatever was reported");
        }
        if class == AttemptClass::Failed {
            prop_assert!(a.object_status.as_deref().is_some_and(|s| s == "failed" || s == "canceled"));
        }
        // Rewriting the executor's claim never changes the class.
        let mut told_otherwise = a.clone();
        told_otherwise.reported_outcome = Some(ReportedOutcome::Failed);
        told_otherwise.span_error = !a.span_error;
        prop_assert_eq!(classify(&told_otherwise, &refunds()), class);
    }

    #[test]
    fn decision_follows_state(events in arb_events("a"), now in 0u32..200_000) {
        let contracts = std::sync::Arc::new(contracts());
        let mut ledger = Ledger::with_contracts(contracts.clone());
        for e in &events {
            ledger.add(e.clone());
        }
        for h in ledger.histories() {
            let v = audit::audit(&h, Ledger::contract_for(&h, &contracts), at(now as f64));
            let expected = match v.state {
                IntentState::Completed => Some(Decision::None),
                // Unless a send with an open outcome may have made an effect of its own.
                IntentState::FailedAfterExecution
                    if v.attempts.iter().any(|a| a.class == AttemptClass::Unknown) => None,
                IntentState::FailedAfterExecution => Some(Decision::NewIntent),
                IntentState::FailedBeforeExecution => Some(Decision::FixInput),
                IntentState::Pending => Some(Decision::Wait),
                IntentState::Unknown => None,
            };
            if let Some(d) = expected {
                prop_assert_eq!(v.decision, d);
            } else if v.decision == Decision::Escalate {
                // Only a person decides when a linked effect differs from the intent.
                prop_assert!(v.findings.iter().any(|f| f.kind == FindingKind::EffectMismatch), "{:#?}", v);
            } else {
                let failed = v.state == IntentState::FailedAfterExecution;
                prop_assert!(
                    matches!(v.decision, Decision::Wait | Decision::Reconcile)
                        || v.decision == if failed { Decision::NewIntent } else { Decision::RetrySameKey },
                    "{:#?}", v
                );
            }
            // Once an object is linked, never a same-key retry (rule 8); a lead (an object
            // only a read-back links) is no link yet (rule 3).
            if v.decision == Decision::RetrySameKey {
                prop_assert!(
                    v.objects.iter().all(|o| h.is_provisional(&o.object_id)),
                    "retry_same_key with a linked object: {:#?}", v
                );
            }
        }
    }
}

#[test]
fn normalization_is_idempotent() {
    let mut h = History::new("x");
    h.attempts.push(attempt("x", "issue_refund", 5.0, 1.0));
    h.attempts.push(attempt("x", "issue_refund", 1.0, 1.0));
    let n = h.normalized();
    assert_eq!(n.normalized(), n);
    assert!(n.attempts[0].start < n.attempts[1].start);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// The engine re-audits only the intents an event touches. Whatever the arrival order, the
    /// verdicts it holds after ingesting one event at a time must equal those of a fresh audit
    /// of everything, even when intents share orders, keys, objects and read-backs (a missed
    /// re-audit would leave a stale verdict that only a restart corrects).
    #[test]
    fn incremental_verdicts_equal_a_full_rebuild(
        events in arb_shared_events().prop_flat_map(|e| Just(e).prop_shuffle()),
        now in 0u32..200_000,
    ) {
        let now = at(now as f64);
        let contracts = std::sync::Arc::new(contracts());
        let mut live = reckon::engine::core::EngineCore::new(contracts.clone());
        for e in &events {
            live.ingest(vec![e.clone()], now);
        }
        // Escalations remember findings later evidence removed: the rebuild starts from the
        // stored ones, as a restart does.
        let escalations = live.book().all().cloned().collect();
        let (rebuilt, _) =
            reckon::engine::core::EngineCore::restore(contracts, events.clone(), escalations, now);
        let mut a: Vec<Verdict> = live.verdicts().collect();
        let mut b: Vec<Verdict> = rebuilt.verdicts().collect();
        a.sort_by(|x, y| x.intent_id.cmp(&y.intent_id));
        b.sort_by(|x, y| x.intent_id.cmp(&y.intent_id));
        // Where an intent is listed is its first verdict's first_seen, which depends on what
        // arrived first and which a rebuild from the events alone cannot know (a restart reads
        // it from the store). Later evidence moves first_seen either way (an earlier span, or
        // a record that turned out to be another intent's), never the place.
        for v in &mut a {
            v.listed_at = v.first_seen;
        }
        prop_assert_eq!(a, b);
    }

    /// The core keeps a fingerprint of each verdict, not the verdict: the one it answers with
    /// is recomputed from the history at the instant it was last audited for. Events arrive
    /// over time (deadlines pass, keys expire, escalations open); after every step the
    /// verdicts that step handed out must equal the recomputed ones field for field, and every
    /// other intent's recomputed verdict must say what it last handed out.
    #[test]
    fn a_recomputed_verdict_equals_the_one_handed_out(
        events in arb_shared_events().prop_flat_map(|e| Just(e).prop_shuffle()),
        start in 0u32..200_000,
        gap in 0u32..3_000,
    ) {
        let contracts = std::sync::Arc::new(contracts());
        let mut live = reckon::engine::core::EngineCore::new(contracts);
        let mut handed: std::collections::BTreeMap<String, Verdict> = Default::default();
        for (i, e) in events.iter().enumerate() {
            let now = at(start as f64 + (i as u32 * gap) as f64);
            for step in 0..2 {
                let out = if step == 0 {
                    live.tick(now)
                } else {
                    live.ingest(vec![e.clone()], now)
                };
                for id in &out.removed {
                    handed.remove(id);
                }
                for v in out.verdicts {
                    let recomputed = live.verdict(&v.intent_id);
                    prop_assert_eq!(recomputed.as_ref(), Some(&*v));
                    handed.insert(v.intent_id.clone(), (*v).clone());
                }
            }
            for (id, v) in &handed {
                let now_held = live.verdict(id).map(|h| h.fingerprint());
                prop_assert_eq!(now_held, Some(v.fingerprint()), "intent {}", id);
            }
        }
    }
}

/// What `Store::events_touching` answers, over the events stored so far.
fn touching(
    stored: &[Event],
    intents: &[String],
    keys: &[String],
    objects: &[String],
) -> Vec<Event> {
    let has = |set: &[String], v: Option<&String>| v.is_some_and(|v| set.contains(v));
    stored
        .iter()
        .filter(|e| match e {
            Event::Attempt(a) => intents.contains(&a.intent_id),
            Event::Readback(r) => intents.contains(&r.intent_id),
            Event::Record(r) => {
                has(intents, r.intent_id.as_ref())
                    || has(keys, r.idempotency_key.as_ref())
                    || objects.contains(&r.object_id)
            }
        })
        .cloned()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// DESIGN.md "Memory and history": settled intents leave memory as soon as they may, and
    /// come back from the store when an event touches them. The verdicts must be those of an
    /// engine that never let anything go: the ones it holds, and the last ones it wrote for
    /// the intents that left.
    #[test]
    fn evicting_settled_intents_changes_no_verdict(
        events in arb_shared_events().prop_flat_map(|e| Just(e).prop_shuffle()),
        now in 0u32..200_000,
    ) {
        use reckon::engine::core::EngineCore;
        let now = at(now as f64);
        let contracts = std::sync::Arc::new(contracts());
        let mut reference = EngineCore::new(contracts.clone());
        let mut evicting =
            EngineCore::new(contracts.clone()).with_eviction(Some(Dur(0)));
        let mut stored: Vec<Event> = Vec::new();
        let mut written: std::collections::HashMap<String, Verdict> = Default::default();
        // The store's escalations, by id (the latest version of each).
        let mut escalations: std::collections::HashMap<String, reckon::model::Escalation> =
            Default::default();
        // The store's routes table: route -> the settled intents it reaches.
        let mut routes: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            Default::default();
        let mut evictions = 0;
        for e in &events {
            reference.ingest(vec![e.clone()], now);
            stored.push(e.clone());
            // Bring back whatever the event may concern, and whatever that brings back.
            let mut probe = vec![e.clone()];
            for _ in 0..8 {
                let owners: Vec<String> = evicting
                    .routes_to_check(&probe)
                    .iter()
                    .flat_map(|r| routes.get(r).into_iter().flatten().cloned())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let hits = evicting.absent(owners);
                if hits.is_empty() {
                    break;
                }
                // Records found by a key observe objects whose other records are needed too:
                // load until nothing new comes back, as the engine does. An orphan record's
                // pseudo-intent is its object's records.
                let (intents, objects) = split_orphans(hits.clone());
                let mut loaded = touching(&stored, &intents, &[], &objects);
                let (mut asked_keys, mut asked_objects) = (Vec::new(), Vec::new());
                loop {
                    let (keys, objects) = audit::keys_and_objects(&loaded);
                    let keys: Vec<String> =
                        keys.into_iter().filter(|k| !asked_keys.contains(k)).collect();
                    let objects: Vec<String> =
                        objects.into_iter().filter(|o| !asked_objects.contains(o)).collect();
                    if keys.is_empty() && objects.is_empty() {
                        break;
                    }
                    for e in touching(&stored, &[], &keys, &objects) {
                        if !loaded.contains(&e) {
                            loaded.push(e);
                        }
                    }
                    asked_keys.extend(keys);
                    asked_objects.extend(objects);
                }
                let back = escalations
                    .values()
                    .filter(|x| hits.contains(&x.intent_id))
                    .cloned()
                    .collect();
                let listed = hits
                    .iter()
                    .filter_map(|id| written.get(id).map(|v| (id.clone(), v.listed_at)))
                    .collect();
                evicting.rehydrate(
                    &hits,
                    loaded.clone(),
                    back,
                    &listed,
                    std::slice::from_ref(e),
                    now,
                );
                probe = loaded;
                probe.push(e.clone());
            }
            let out = evicting.ingest(vec![e.clone()], now);
            for v in out.verdicts {
                written.insert(v.intent_id.clone(), (*v).clone());
            }
            for x in out.escalations {
                escalations.insert(x.id.clone(), x);
            }
            for r in out.routes {
                routes.entry(r.route).or_default().insert(r.intent_id);
            }
            // Written at once: what it settled may leave.
            evicting.mark_durable(out.seq);
            evictions += evicting.evict_idle(now);
            // Whatever stays in memory agrees with the reference at every step.
            for v in reference.verdicts() {
                if let Some(held) = evicting.verdict(&v.intent_id) {
                    prop_assert_eq!(held, v, "after event {:?}", e);
                }
            }
        }
        // (Over 512 generated histories this evicts a few hundred intents: see the engine
        // core's own test for one that must leave and come back.)
        let _ = evictions;
        for v in reference.verdicts() {
            let seen = match evicting.verdict(&v.intent_id) {
                Some(held) => held.clone(),
                None => written
                    .get(&v.intent_id)
                    .cloned()
                    .unwrap_or_else(|| panic!("no verdict for {}", v.intent_id)),
            };
            prop_assert_eq!(&seen, &v, "intent {}", v.intent_id);
        }
    }

    /// A contract reload taken a page at a time, with events taken in between its pages (the
    /// service releases its lock between them), ends where a reload taken at once would: the
    /// same evidence and the same audit of it, whatever the pages and wherever the events fall.
    /// Both kinds of edit: one that leaves every record kind (the ledger keeps its links) and
    /// one that changes the refunds' (every event is linked again).
    ///
    /// Escalations are the one thing that may differ, and only one way. The book remembers
    /// what it saw (a person must look at what once needed one), and the two reloads see
    /// different moments: at once judges every intent under the new contracts before the later
    /// events, while an intent whose page comes after an event is first judged with it. So an
    /// intent the at-once reload saw in a state that escalates (an unknown outcome, say, that
    /// the next read-back explains) may have no escalation in pages; never the reverse, because
    /// every state the paged reload judges, the at-once reload judged too. Where both books
    /// agree on an intent, the verdicts are equal whole.
    #[test]
    fn a_reload_in_pages_changes_no_verdict(
        events in arb_shared_events().prop_flat_map(|e| Just(e).prop_shuffle()),
        split in 0usize..14,
        page in 1usize..4,
        relink in any::<bool>(),
        now in 0u32..200_000,
    ) {
        use reckon::engine::core::{in_order, EngineCore};
        let now = at(now as f64);
        let before = std::sync::Arc::new(contracts());
        let mut edited = refunds();
        edited.max_attempts = Some(1);
        if relink {
            edited.record_kind = Some("refund_v2".into());
        }
        let after = std::sync::Arc::new(reckon::contract::Contracts::new(vec![
            edited,
            drafts(),
            email(),
        ]));
        let split = split.min(events.len());
        let (first, later) = events.split_at(split);

        // What each would have written: the last verdict it handed out per intent.
        type Written = std::collections::BTreeMap<String, Verdict>;
        let write = |written: &mut Written, out: reckon::engine::core::Outcome| {
            for id in out.removed {
                written.remove(&id);
            }
            for v in out.verdicts {
                written.insert(v.intent_id.clone(), Verdict::clone(&v));
            }
        };
        let (mut at_once_written, mut paged_written) = (Written::new(), Written::new());

        let mut at_once = EngineCore::new(before.clone());
        let mut paged = EngineCore::new(before);
        for e in first {
            write(&mut at_once_written, at_once.ingest(vec![e.clone()], now));
            write(&mut paged_written, paged.ingest(vec![e.clone()], now));
        }
        write(&mut at_once_written, at_once.reload(after.clone(), now));
        for e in later {
            write(&mut at_once_written, at_once.ingest(vec![e.clone()], now));
        }

        let (out, ids) = paged.swap_contracts(after);
        write(&mut paged_written, out);
        let mut later = later.iter();
        for chunk in ids.chunks(page) {
            write(&mut paged_written, paged.reaudit_with(chunk, now, in_order));
            if let Some(e) = later.next() {
                write(&mut paged_written, paged.ingest(vec![e.clone()], now));
            }
        }
        for e in later {
            write(&mut paged_written, paged.ingest(vec![e.clone()], now));
        }

        let verdicts = |c: &EngineCore| {
            let mut v: Vec<Verdict> = c.verdicts().collect();
            v.sort_by(|a, b| a.intent_id.cmp(&b.intent_id));
            v
        };
        // Every verdict the reload changed was handed out to be written, in pages too.
        for (c, written) in [(&at_once, &at_once_written), (&paged, &paged_written)] {
            prop_assert_eq!(written.values().cloned().collect::<Vec<_>>(), verdicts(c));
        }
        // The audit of the evidence, before the book adds what it remembers.
        let audited = |c: &EngineCore, v: &Verdict| {
            let history = c.history(&v.intent_id).expect("a verdict in memory has a history");
            audit::audit(&history, Ledger::contract_for(&history, c.contracts()), v.audited_at)
        };
        let (paged_verdicts, at_once_verdicts) = (verdicts(&paged), verdicts(&at_once));
        let ids = |vs: &[Verdict]| vs.iter().map(|v| v.intent_id.clone()).collect::<Vec<_>>();
        prop_assert_eq!(ids(&paged_verdicts), ids(&at_once_verdicts));
        for (p, a) in paged_verdicts.iter().zip(&at_once_verdicts) {
            prop_assert_eq!(paged.history(&p.intent_id), at_once.history(&a.intent_id));
            prop_assert_eq!(audited(&paged, p), audited(&at_once, a));
            let escalated = |c: &EngineCore| c.book().latest_for(&p.intent_id).is_some();
            prop_assert!(
                !escalated(&paged) || escalated(&at_once),
                "intent {} escalated in pages only",
                p.intent_id
            );
            if escalated(&paged) == escalated(&at_once) {
                // Where an intent is listed is where its first verdict put it: an orphan record's
                // pseudo-intent that a relink removed and brought back in one order and not the
                // other is listed anew, which is the store's view too (its row was deleted).
                let unlisted = |v: &Verdict| Verdict {
                    listed_at: v.first_seen,
                    ..v.clone()
                };
                prop_assert_eq!(unlisted(p), unlisted(a));
            }
        }
    }
}

/// Intent ids, and the objects of the orphan records' pseudo-intents among `ids` (as
/// `store::reached_from` asks for them).
fn split_orphans(ids: Vec<String>) -> (Vec<String>, Vec<String>) {
    let (orphans, intents): (Vec<String>, Vec<String>) = ids
        .into_iter()
        .partition(|id| id.starts_with(audit::ORPHAN_PREFIX));
    let objects = orphans
        .iter()
        .filter_map(|id| id.strip_prefix(audit::ORPHAN_PREFIX))
        .map(str::to_string)
        .collect();
    (intents, objects)
}

/// A store as the lazy-start property sees it: events, the routes table, the escalations.
#[derive(Default)]
struct ModelStore {
    events: Vec<Event>,
    /// route -> the intents it reaches.
    routes: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// The latest version of each escalation, by id.
    escalations: std::collections::HashMap<String, Escalation>,
    /// The last verdict written for each intent.
    written: std::collections::HashMap<String, Verdict>,
}

impl ModelStore {
    fn take(&mut self, out: reckon::engine::core::Outcome) {
        for id in &out.removed {
            self.written.remove(id);
        }
        for v in out.verdicts {
            self.written.insert(v.intent_id.clone(), (*v).clone());
        }
        for x in out.escalations {
            self.escalations.insert(x.id.clone(), x);
        }
        for r in out.routes {
            self.routes.entry(r.route).or_default().insert(r.intent_id);
        }
    }

    /// Everything the audit of `ids` (and of the orphan records of `objects`) reads, as
    /// `store::evidence` loads it: their events, then the records of every key and object
    /// those name, until nothing new appears.
    fn evidence(&self, ids: &[String], objects: &[String]) -> Vec<Event> {
        let mut loaded = touching(&self.events, ids, &[], objects);
        let (mut asked_keys, mut asked_objects) = (Vec::new(), Vec::new());
        loop {
            let (keys, objects) = audit::keys_and_objects(&loaded);
            let keys: Vec<String> = keys
                .into_iter()
                .filter(|k| !asked_keys.contains(k))
                .collect();
            let objects: Vec<String> = objects
                .into_iter()
                .filter(|o| !asked_objects.contains(o))
                .collect();
            if keys.is_empty() && objects.is_empty() {
                return loaded;
            }
            for e in touching(&self.events, &[], &keys, &objects) {
                if !loaded.contains(&e) {
                    loaded.push(e);
                }
            }
            asked_keys.extend(keys);
            asked_objects.extend(objects);
        }
    }

    /// As `store::reached_from`: `seeds` not `here`, and the owners of the routes of `probe`
    /// (an intent's own id left out once it is loaded) not `here`, with their evidence, and
    /// transitively what that evidence's routes reach.
    fn reached(
        &self,
        seeds: &[String],
        probe: Vec<Event>,
        here: impl Fn(&str) -> bool,
    ) -> (Vec<String>, Vec<Event>) {
        let mut ids: std::collections::BTreeSet<String> = Default::default();
        let mut loaded: Vec<Event> = Vec::new();
        let mut fresh: Vec<String> = seeds.iter().filter(|id| !here(id)).cloned().collect();
        let mut probe = probe;
        for _ in 0..16 {
            if fresh.is_empty() {
                fresh = probe
                    .iter()
                    .flat_map(Event::routes)
                    .filter(|r| r.strip_prefix("i:").is_none_or(|id| !ids.contains(id)))
                    .flat_map(|r| self.routes.get(&r).into_iter().flatten().cloned())
                    .filter(|id| !here(id) && !ids.contains(id))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                if fresh.is_empty() {
                    break;
                }
            }
            ids.extend(fresh.iter().cloned());
            probe = Vec::new();
            let (intents, objects) = split_orphans(std::mem::take(&mut fresh));
            for e in self.evidence(&intents, &objects) {
                if !loaded.contains(&e) {
                    probe.push(e.clone());
                    loaded.push(e);
                }
            }
        }
        (ids.into_iter().collect(), loaded)
    }

    /// As `Engine::read_back`: what [`ModelStore::reached`] finds out of memory comes back by
    /// `rehydrate` (with `pending`, the event about to be ingested), and so do `seeds`.
    fn read_back(
        &self,
        core: &mut reckon::engine::core::EngineCore,
        seeds: Vec<String>,
        probe: Vec<Event>,
        pending: &[Event],
        now: Timestamp,
    ) {
        let (mut all, loaded) = self.reached(&seeds, probe, |id| core.holds(id));
        all.extend(seeds);
        let back = self
            .escalations
            .values()
            .filter(|x| all.contains(&x.intent_id))
            .cloned()
            .collect();
        let listed = all
            .iter()
            .filter_map(|id| self.written.get(id).map(|v| (id.clone(), v.listed_at)))
            .collect();
        core.rehydrate(&all, loaded, back, &listed, pending, now);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// DESIGN.md "Memory and history", start-up: a process stops after some of the events; the
    /// next start serves before reading its open intents back, and reads them back a page at a
    /// time between the later events, or when an event reaches one first. Every verdict then
    /// is the one a process that never stopped holds.
    #[test]
    fn a_start_that_reads_open_intents_back_later_changes_no_verdict(
        events in arb_shared_events().prop_flat_map(|e| Just(e).prop_shuffle()),
        split in 0.0f64..=1.0,
        pages in proptest::collection::vec(0usize..3, 64),
        now in 0u32..200_000,
    ) {
        use reckon::engine::core::{EngineCore, Restore};
        let now = at(now as f64);
        let contracts = std::sync::Arc::new(contracts());
        let mut never_stopped = EngineCore::new(contracts.clone());
        for e in &events {
            never_stopped.ingest(vec![e.clone()], now);
        }

        let k = ((events.len() as f64) * split) as usize;

        let mut store = ModelStore::default();
        let mut before = EngineCore::new(contracts.clone());
        for e in &events[..k] {
            store.events.push(e.clone());
            let out = before.ingest(vec![e.clone()], now);
            store.take(out);
        }
        // The start: the ids not at rest with their stored fingerprints; orphans'
        // pseudo-intents (no routes of their own) read now, with what their evidence reaches.
        let stored: reckon::engine::core::StoredMap = store
            .written
            .values()
            .filter(|v| !v.rest().may_leave_memory())
            .map(|v| (v.intent_id.clone(), reckon::engine::core::Stored::of(v)))
            .collect();
        let orphans: Vec<String> = stored
            .keys()
            .filter(|id| id.starts_with(audit::ORPHAN_PREFIX))
            .cloned()
            .collect();
        let objects: Vec<String> = orphans
            .iter()
            .filter_map(|id| id.strip_prefix(audit::ORPHAN_PREFIX))
            .map(str::to_string)
            .collect();
        let first = store.evidence(&orphans, &objects);
        let mut lazy = EngineCore::restore_from(
            contracts.clone(),
            Restore { events: first.clone(), escalations: Vec::new(), stored },
            now,
        );
        lazy.routes_in_store();
        // What the loaded events reach, asked about every intent but those asked for by id
        // (one a loaded record names is in the ledger, not yet with its own evidence).
        let (_, reached) = store.reached(&[], first, |id| orphans.iter().any(|o| o == id));
        lazy.restore_more(reached, now);
        // As the service does: the places of what was loaded without its stored verdict.
        let listed = lazy
            .unplaced()
            .into_iter()
            .filter_map(|id| store.written.get(&id).map(|v| (id, v.listed_at)))
            .collect();
        lazy.place(&listed);
        let held: Vec<Escalation> = store
            .escalations
            .values()
            .filter(|x| lazy.holds(&x.intent_id))
            .cloned()
            .collect();
        lazy.restore_escalations(held, Vec::new());
        let out = lazy.tick(now);
        store.take(out);
        for (i, e) in events[k..].iter().enumerate() {
            let page = lazy.pending_page(pages[i % pages.len()]);
            if !page.is_empty() {
                store.read_back(&mut lazy, page, Vec::new(), &[], now);
                let out = lazy.tick(now);
                store.take(out);
            }
            store.events.push(e.clone());
            store.read_back(&mut lazy, Vec::new(), vec![e.clone()], std::slice::from_ref(e), now);
            let out = lazy.ingest(vec![e.clone()], now);
            store.take(out);
            let out = lazy.tick(now);
            store.take(out);
        }
        while lazy.pending() > 0 {
            let page = lazy.pending_page(2);
            store.read_back(&mut lazy, page, Vec::new(), &[], now);
        }
        let out = lazy.tick(now);
        store.take(out);

        for v in never_stopped.verdicts() {
            let seen = match lazy.verdict(&v.intent_id) {
                Some(held) => held,
                None => store
                    .written
                    .get(&v.intent_id)
                    .cloned()
                    .unwrap_or_else(|| panic!("no verdict for {}", v.intent_id)),
            };
            prop_assert_eq!(&seen, &v, "intent {} (stopped after {} of {})", v.intent_id, k, events.len());
        }
    }
}
