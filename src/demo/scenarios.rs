//! The scenarios, as data: every row of the first note's matrix, every test of the second
//! note, and the careless variants. Each names what the notes expect, the verdicts reckon must
//! reach (`state / decision / findings`, the audit tests' conclusions), the objects the stub
//! must hold at the end (the notes check the downstream's records, not what the tool returned),
//! and the steps that produce it.
//!
//! Times are the scaled windows of `contracts/demo.toml`: t = first attempt; the original may
//! commit until t+3s, same-key retries are safe until t+6s, unknown escalates at t+7s, the stub
//! prunes the key at t+8s.

use std::time::Duration;

use serde_json::{json, Value};

use super::executor::{SendOpts, Tool};
use super::proxy::Fault;
use super::stub::{Knobs, Settle};
use crate::model::ReportedOutcome;

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    /// Where it comes from: a matrix row, a test number, or "careless".
    pub source: &'static str,
    /// What the notes expect, in their words.
    pub notes: &'static str,
    /// The intents, by index: tool and the model's arguments.
    pub intents: Vec<(Tool, Value)>,
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug)]
pub enum Step {
    /// The careful executor's tool call (the note's sketch).
    Issue(usize, SendOpts),
    /// The careful reconciler's pass: same-key retry inside the window, read-back outside.
    Reconcile(usize, SendOpts),
    /// A read-back, optionally followed by telling the model something.
    ReadBack(usize, Option<ReportedOutcome>),
    /// Careless: a read-back of everything on the intent's order, other intents' refunds too.
    ReadOrder(usize),
    /// Careless: send intent `.0` under the key of intent `.1`.
    SharedKey(usize, usize, SendOpts),
    /// Careless: send intent `.0` as intent `.1`'s cached request, key and body alike.
    SharedKeyCachedRequest(usize, usize),
    /// Careless: the model calls again under a fresh key.
    NewKey(usize, SendOpts),
    /// Careless (or deliberate): the same call again, whatever is known.
    Resend(usize, SendOpts),
    /// Careless: the same key with one argument changed.
    ResendChanged(usize, &'static str, &'static str, SendOpts),
    /// Several workers (or retry layers) send the intent at once, each start offset by its delay.
    Workers(usize, Vec<(Duration, SendOpts)>),
    /// Sleep until this long after the scenario started.
    At(Duration),
    /// Poll reckon until the intent's verdict reads so, for at most `within`. The last
    /// expectation of each intent in a scenario is its final one: it must also hold, unchanged,
    /// for a while after it first matches (see `demo::STABLE_FOR`).
    Expect(usize, &'static str, Duration),
    /// The stub holds this many objects for the intent.
    Objects(usize, usize),
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn opts() -> SendOpts {
    SendOpts::default()
}

fn fault(f: Fault) -> SendOpts {
    SendOpts {
        fault: f,
        ..SendOpts::default()
    }
}

fn knobs(k: Knobs) -> SendOpts {
    SendOpts {
        knobs: k,
        ..SendOpts::default()
    }
}

/// The downstream does not report for a while: "no record yet".
fn unreported() -> Knobs {
    Knobs {
        report_delay: Duration::from_secs(30),
        ..Knobs::default()
    }
}

fn settle(s: Settle) -> Knobs {
    Knobs {
        settle: s,
        settle_after: ms(2000),
        ..Knobs::default()
    }
}

fn expect(i: usize, verdict: &'static str) -> Step {
    Step::Expect(i, verdict, Duration::from_secs(8))
}

pub fn refund(amount: &str) -> Value {
    json!({"order_id": "1042", "amount": amount, "currency": "usd"})
}

pub fn draft(supplier: &str, amount: &str) -> Value {
    json!({"invoice": "INV-204", "supplier": supplier, "amount": amount, "currency": "EUR"})
}

pub fn email() -> Value {
    json!({"to": "customer@example.com", "subject": "Your refund", "body": "We refunded order 1042."})
}

/// A request held past the caller's 1 s timeout that commits at 2.5 s: inside max_in_flight.
const HOLD: Fault = Fault::Hold(Duration::from_millis(2500));

pub fn all() -> Vec<Scenario> {
    use Step::*;
    let r = |a: &str| (Tool::Refund, refund(a));
    let d = |s: &str, a: &str| (Tool::Draft, draft(s, a));
    vec![
        // ---- The first note's matrix (refunds, Stripe-v1-like: assumptions A-E) ----
        Scenario {
            name: "rejected before execution (invalid amount)",
            source: "note 1, matrix",
            notes: "known failure before execution: fix the input; no refund object",
            intents: vec![r("-5")],
            steps: vec![
                Issue(0, opts()),
                expect(0, "failed_before_execution / fix_input / -"),
                Objects(0, 0),
            ],
        },
        Scenario {
            name: "response lost after commit, retried with the same key",
            source: "note 1, matrix",
            notes: "unknown; retry with the same key inside retention; the saved response, one object",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, fault(Fault::Drop)),
                Reconcile(0, opts()),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "response lost after commit, not yet retried, no record yet",
            source: "note 1, matrix",
            notes: "unknown, never failed: wait while it may commit, then retry with the same key",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(
                    0,
                    SendOpts {
                        fault: Fault::Drop,
                        knobs: unreported(),
                        ..opts()
                    },
                ),
                expect(0, "unknown / wait / -"),
                expect(0, "unknown / retry_same_key / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "refund pending, later failed",
            source: "note 1, matrix",
            notes: "recorded, not terminal: no resend; on failed, a new refund is a new intent",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, knobs(settle(Settle::PendingThenFailed))),
                expect(0, "pending / wait / -"),
                expect(0, "failed_after_execution / new_intent / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "original still running: empty read-back at T, object after T",
            source: "note 1, matrix",
            notes: "an empty read-back must not mark failure; one object at the end",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, fault(HOLD)),
                ReadBack(0, None),
                expect(0, "unknown / wait / -"),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "original still running, resent with the same key after the empty read-back",
            source: "careless",
            notes: "acting on an inconclusive read-back; the key keeps it to one object",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, fault(HOLD)),
                ReadBack(0, None),
                Resend(0, opts()),
                expect(0, "completed / none / inconclusive_readback_acted_on"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "original still running, resent under a new key after the empty read-back",
            source: "careless",
            notes: "the resend the notes warn about: two refunds",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, fault(HOLD)),
                ReadBack(0, None),
                NewKey(0, opts()),
                expect(
                    0,
                    "completed / escalate / inconclusive_readback_acted_on, new_key_retry, duplicate_effect",
                ),
                Objects(0, 2),
            ],
        },
        Scenario {
            name: "concurrent duplicates, same key, one 409",
            source: "note 1, matrix",
            notes: "one executes, the other gets a conflict (B): not a failure; one object",
            intents: vec![r("45.00")],
            steps: vec![
                Workers(
                    0,
                    vec![
                        (
                            ms(0),
                            knobs(Knobs {
                                exec: ms(600),
                                ..Knobs::default()
                            }),
                        ),
                        (ms(150), opts()),
                    ],
                ),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "same key, changed parameters",
            source: "note 1, matrix (careless)",
            notes: "parameter-mismatch error (C): stop, escalate with both requests",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(
                    0,
                    SendOpts {
                        fault: Fault::Drop,
                        knobs: unreported(),
                        ..opts()
                    },
                ),
                ResendChanged(0, "amount", "40.00", opts()),
                expect(0, "unknown / escalate / key_reuse_mismatch"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "retry after key expiry",
            source: "note 1, matrix (careless)",
            notes: "past retention the key is pruned (D): a resend executes again",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, fault(Fault::Drop)),
                expect(0, "completed / none / -"),
                At(ms(8700)),
                Resend(0, opts()),
                expect(0, "completed / escalate / expired_key_retry, duplicate_effect"),
                Objects(0, 2),
            ],
        },
        Scenario {
            name: "timeout past the retry window: reconcile, never resend",
            source: "note 1, matrix",
            notes: "your code refuses the retry past its window and reconciles instead",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, fault(Fault::Drop)),
                At(ms(6300)),
                Reconcile(0, opts()),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "two intended actions, equal parameters, two keys",
            source: "note 1, matrix",
            notes: "two objects; dedupe must not merge them",
            intents: vec![r("22.50"), r("22.50")],
            steps: vec![
                Issue(0, opts()),
                Issue(1, opts()),
                expect(0, "completed / none / -"),
                expect(1, "completed / none / -"),
                Objects(0, 1),
                Objects(1, 1),
            ],
        },
        Scenario {
            name: "two refunds on one order; one never arrives, a read of the order lists the other",
            source: "careless",
            notes: "a read-back answers a query, not \"my refund\": the other intent's refund is not this one's",
            // An order of their own: every other scenario refunds order 1042, and a read of it
            // would (rightly) find refunds nobody owns yet.
            intents: vec![
                (Tool::Refund, json!({"order_id": "2042", "amount": "22.50", "currency": "usd"})),
                (Tool::Refund, json!({"order_id": "2042", "amount": "22.50", "currency": "usd"})),
            ],
            steps: vec![
                Issue(1, opts()),
                Issue(0, fault(Fault::Blackhole)),
                ReadOrder(0),
                expect(1, "completed / none / -"),
                At(ms(7_500)),
                expect(0, "unknown / escalate / unresolved_unknown"),
                Objects(0, 0),
                Objects(1, 1),
            ],
        },
        Scenario {
            name: "two refunds sent under one key, the second with its own metadata",
            source: "careless",
            notes: "the downstream refuses a reused key with other parameters: the second refund never happened",
            intents: vec![r("45.00"), r("45.00")],
            steps: vec![
                Issue(0, opts()),
                SharedKey(1, 0, opts()),
                expect(0, "completed / escalate / key_shared_across_intents"),
                expect(
                    1,
                    "failed_before_execution / escalate / key_reuse_mismatch, key_shared_across_intents",
                ),
                Objects(0, 1),
                Objects(1, 0),
            ],
        },
        Scenario {
            name: "two refunds sent under one key with the same request",
            source: "careless",
            notes: "the downstream replays the first refund's saved response: the second intent has no refund of its own",
            intents: vec![r("45.00"), r("45.00")],
            steps: vec![
                Issue(0, opts()),
                SharedKeyCachedRequest(1, 0),
                expect(0, "completed / escalate / key_shared_across_intents"),
                expect(1, "unknown / escalate / key_shared_across_intents"),
                Objects(0, 1),
                Objects(1, 0),
            ],
        },
        Scenario {
            name: "no idempotency contract, timeout",
            source: "note 1, matrix",
            notes: "record unknown, block automatic retry, escalate",
            intents: vec![(Tool::Email, email())],
            steps: vec![
                Issue(0, fault(Fault::Drop)),
                expect(0, "unknown / escalate / no_idempotency_contract"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "no idempotency contract, resent after the timeout",
            source: "careless",
            notes: "a repeat is a second action: two emails nobody can take back",
            intents: vec![(Tool::Email, email())],
            steps: vec![
                Issue(0, fault(Fault::Drop)),
                Resend(0, fault(Fault::Drop)),
                expect(
                    0,
                    "unknown / escalate / no_idempotency_contract, retry_budget_exceeded",
                ),
                Objects(0, 2),
            ],
        },
        // ---- The second note's seven tests (supplier-bill drafts) ----
        Scenario {
            name: "drafts 1: same key and parameters twice",
            source: "note 2, test 1",
            notes: "one draft; both responses identify it",
            intents: vec![d("ACME", "120.00")],
            steps: vec![
                Issue(0, opts()),
                Resend(0, opts()),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "drafts 2: committed, response dropped, retried",
            source: "note 2, test 2",
            notes: "one draft; the retry reports the original outcome",
            intents: vec![d("ACME", "120.00")],
            steps: vec![
                Issue(0, fault(Fault::Reset)),
                Reconcile(0, opts()),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "drafts 3: failed before commit, retried",
            source: "note 2, test 3",
            notes: "the operation completes once",
            intents: vec![d("ACME", "120.00")],
            steps: vec![
                Issue(0, fault(Fault::Unavailable)),
                Reconcile(0, opts()),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "drafts 4: completed key reused with another supplier",
            source: "note 2, test 4",
            notes: "a mismatch response and no second draft",
            intents: vec![d("ACME", "120.00")],
            steps: vec![
                Issue(0, opts()),
                ResendChanged(0, "supplier", "Globex", opts()),
                expect(
                    0,
                    "completed / escalate / key_reuse_mismatch",
                ),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "drafts 5: two workers, same key, at once",
            source: "note 2, test 5",
            notes: "one mutation wins, the other observes its result",
            intents: vec![d("ACME", "120.00")],
            steps: vec![
                Workers(
                    0,
                    vec![
                        (
                            ms(0),
                            knobs(Knobs {
                                exec: ms(500),
                                ..Knobs::default()
                            }),
                        ),
                        (ms(100), opts()),
                    ],
                ),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "drafts 6: identical fields, two confirmed actions",
            source: "note 2, test 6",
            notes: "both drafts exist: equal payloads are not equal intent",
            intents: vec![d("ACME", "120.00"), d("ACME", "120.00")],
            steps: vec![
                Issue(0, opts()),
                Issue(1, opts()),
                expect(0, "completed / none / -"),
                expect(1, "completed / none / -"),
                Objects(0, 1),
                Objects(1, 1),
            ],
        },
        Scenario {
            name: "drafts 7: timeout beyond key retention",
            source: "note 2, test 7",
            notes: "the runner stops resubmitting and reconciles; a person decides",
            intents: vec![d("ACME", "120.00")],
            steps: vec![
                Issue(0, fault(Fault::Blackhole)),
                At(ms(6300)),
                Reconcile(0, opts()),
                expect(0, "unknown / escalate / unresolved_unknown"),
                Objects(0, 0),
            ],
        },
        Scenario {
            name: "drafts 7, resubmitted past retention anyway",
            source: "note 2, test 7 (careless)",
            notes: "resubmission past the window is the breach, whatever it returns",
            intents: vec![d("ACME", "120.00")],
            steps: vec![
                Issue(0, fault(Fault::Blackhole)),
                At(ms(6200)),
                Resend(0, opts()),
                expect(0, "completed / escalate / expired_key_retry"),
                Objects(0, 1),
            ],
        },
        // ---- Replay versus converge: what a same-key retry after a 500 returns ----
        Scenario {
            name: "saved 500 replayed under the same key (Stripe v1)",
            source: "note 1, key contract",
            notes: "a v1 retry replays the 500: indeterminate, hand it to a person",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(
                    0,
                    knobs(Knobs {
                        fail_500: true,
                        ..Knobs::default()
                    }),
                ),
                Reconcile(0, opts()),
                Reconcile(0, opts()),
                expect(0, "unknown / escalate / replayed_server_error"),
                Objects(0, 0),
            ],
        },
        Scenario {
            name: "failed operation converges on a same-key retry (Stripe v2)",
            source: "note 1, key contract",
            notes: "v2 retries failed work to completion and returns the updated response",
            intents: vec![(Tool::RefundV2, refund("45.00"))],
            steps: vec![
                Issue(
                    0,
                    knobs(Knobs {
                        fail_500: true,
                        ..Knobs::default()
                    }),
                ),
                Reconcile(0, opts()),
                expect(0, "completed / none / -"),
                Objects(0, 1),
            ],
        },
        // ---- Careless, model-driven retries ----
        Scenario {
            name: "new key after a timeout",
            source: "careless",
            notes: "a new key can start a second operation",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, fault(Fault::Drop)),
                NewKey(0, opts()),
                expect(0, "completed / escalate / new_key_retry, duplicate_effect"),
                Objects(0, 1 + 1),
            ],
        },
        Scenario {
            name: "timeout told to the model as failed",
            source: "careless",
            notes: "a timeout is unknown, not failed",
            intents: vec![r("45.00")],
            steps: vec![
                Resend(
                    0,
                    SendOpts {
                        fault: Fault::Blackhole,
                        told: Some(ReportedOutcome::Failed),
                        ..opts()
                    },
                ),
                expect(0, "unknown / retry_same_key / misreported_outcome"),
                Objects(0, 0),
            ],
        },
        Scenario {
            name: "resent while pending",
            source: "careless",
            notes: "recorded, not terminal: do not send again",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, knobs(settle(Settle::Pending))),
                Resend(0, opts()),
                expect(0, "pending / wait / resend_while_pending"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "resent after the refund failed",
            source: "careless",
            notes: "known failure after execution: a new refund is a new intent with a new key",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, knobs(settle(Settle::Failed))),
                Resend(0, opts()),
                // The same key under replay, inside its retention: the saved `failed` comes
                // back and nothing is made twice (DESIGN.md "Findings": no
                // resend_after_terminal).
                expect(0, "failed_after_execution / new_intent / -"),
                Objects(0, 1),
            ],
        },
        Scenario {
            name: "retry layers multiply attempts",
            source: "careless",
            notes: "retry logic in one layer with a budget; past it, reconcile",
            intents: vec![r("45.00")],
            steps: vec![
                Workers(
                    0,
                    (0..6)
                        .map(|i| {
                            (
                                ms(60 * i),
                                SendOpts {
                                    fault: Fault::Blackhole,
                                    timeout: ms(300),
                                    ..opts()
                                },
                            )
                        })
                        .collect(),
                ),
                expect(0, "unknown / reconcile / retry_budget_exceeded"),
                Objects(0, 0),
            ],
        },
        Scenario {
            name: "empty read-back told to the model as failed",
            source: "careless",
            notes: "an empty read-back must not mark failure while the original can commit",
            intents: vec![r("45.00")],
            steps: vec![
                Issue(0, fault(HOLD)),
                ReadBack(0, Some(ReportedOutcome::Failed)),
                expect(0, "completed / none / inconclusive_readback_acted_on"),
                Objects(0, 1),
            ],
        },
    ]
}

/// An expectation in canonical form: findings sorted, deduplicated, `-` for none.
pub fn normalize(expected: &str) -> String {
    let parts: Vec<&str> = expected.split('/').map(str::trim).collect();
    let (state, decision, findings) = match parts.as_slice() {
        [s, d, f] => (*s, *d, *f),
        _ => return expected.trim().to_string(),
    };
    let kinds: Vec<&str> = findings
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty() && *k != "-")
        .collect();
    summary(state, decision, kinds)
}

/// `state / decision / findings` with the findings sorted and deduplicated.
pub fn summary<'a>(
    state: &str,
    decision: &str,
    kinds: impl IntoIterator<Item = &'a str>,
) -> String {
    let mut kinds: Vec<&str> = kinds.into_iter().collect();
    kinds.sort_unstable();
    kinds.dedup();
    let findings = if kinds.is_empty() {
        "-".to_string()
    } else {
        kinds.join(", ")
    };
    format!("{state} / {decision} / {findings}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Decision, FindingKind, IntentState};

    #[test]
    fn at_least_twenty_scenarios_with_unique_names() {
        let all = all();
        assert!(all.len() >= 20, "{}", all.len());
        let mut names: Vec<&str> = all.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }

    #[test]
    fn every_expectation_uses_the_model_vocabulary() {
        for s in all() {
            let mut checks = 0;
            for step in &s.steps {
                if let Step::Expect(i, e, _) = step {
                    checks += 1;
                    assert!(*i < s.intents.len(), "{}", s.name);
                    let n = normalize(e);
                    let parts: Vec<&str> = n.split(" / ").collect();
                    assert_eq!(parts.len(), 3, "{}: {e}", s.name);
                    assert!(IntentState::parse(parts[0]).is_some(), "{}: {e}", s.name);
                    assert!(Decision::parse(parts[1]).is_some(), "{}: {e}", s.name);
                    for k in parts[2].split(", ").filter(|k| *k != "-") {
                        assert!(FindingKind::parse(k).is_some(), "{}: {k}", s.name);
                    }
                }
            }
            assert!(checks > 0, "{} checks nothing", s.name);
        }
    }

    #[test]
    fn normalize_sorts_findings() {
        assert_eq!(
            normalize("completed / escalate / new_key_retry, duplicate_effect"),
            "completed / escalate / duplicate_effect, new_key_retry"
        );
        assert_eq!(normalize("unknown / wait / -"), "unknown / wait / -");
    }
}
