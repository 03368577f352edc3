//! The stub's state as plain data: the objects it holds and the idempotency keys it remembers,
//! with the rules that decide what a request under a key gets. No HTTP, no tasks, no clock:
//! every instant is an argument, so the rules are tested without a server or a sleep.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Knobs;
use crate::model::Timestamp;

/// Which endpoint a key was used on: Stripe scopes keys per API, so the same key on `/v1` and
/// `/v2` names two requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Endpoint {
    RefundsV1,
    RefundsV2,
    Drafts,
}

/// A response as the downstream saved it under a key, and the object it created if any.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Saved {
    pub(super) status: u16,
    pub(super) body: Value,
    pub(super) object_id: Option<String>,
}

impl Saved {
    /// The 500 a refund that began executing ends with under `x-demo-fail: 500`.
    pub(super) fn refund_server_error() -> Saved {
        Saved {
            status: 500,
            body: json!({"error": {"type": "api_error", "message": "An unknown error occurred while processing the refund."}}),
            object_id: None,
        }
    }
}

#[derive(Clone, Debug)]
enum Phase {
    Executing,
    Done(Saved),
}

#[derive(Clone, Debug)]
struct KeyEntry {
    saved_at: Instant,
    params: Value,
    knobs: Knobs,
    phase: Phase,
}

/// The time of one step by both clocks: the wall clock dates objects, the monotonic one ages
/// keys. Passed in, so the books read neither.
#[derive(Clone, Copy, Debug)]
pub(super) struct Now {
    pub(super) wall: Timestamp,
    pub(super) mono: Instant,
}

/// What a key says about a request that arrives with it.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum KeyClaim {
    /// The key was free (never used, or pruned): it is now held by this request, executing.
    Claimed,
    /// The key was first used with other parameters (assumption C).
    Mismatch,
    /// The first request with the key is still executing (assumption B).
    InUse,
    /// The first request finished: its saved response, and the knobs it ran under (a converge
    /// finishes failed work the way the first request asked for it).
    Done { saved: Saved, knobs: Knobs },
}

/// What a refund endpoint answers to a repeat of a finished request.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Repeat {
    /// Answer with this, changing nothing.
    Answer(Saved),
    /// The first attempt failed partway: execute again under these knobs and save the result.
    Converge(Knobs),
}

#[derive(Clone, Debug)]
pub(super) struct Refund {
    pub(super) id: String,
    pub(super) amount: i64,
    pub(super) currency: String,
    pub(super) status: String,
    pub(super) metadata: serde_json::Map<String, Value>,
    pub(super) created: i64,
    pub(super) key: Option<String>,
}

impl Refund {
    pub(super) fn json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "refund",
            "amount": self.amount,
            "currency": self.currency,
            "status": self.status,
            "metadata": self.metadata,
            "created": self.created,
            "charge": "ch_demo",
        })
    }
}

/// The validated parameters of a refund request.
pub(super) struct RefundRequest {
    pub(super) amount: i64,
    pub(super) currency: String,
    pub(super) metadata: serde_json::Map<String, Value>,
}

#[derive(Clone, Debug)]
pub(super) struct Draft {
    pub(super) id: String,
    pub(super) intent_id: Option<String>,
    pub(super) key: Option<String>,
    pub(super) invoice: String,
    pub(super) supplier: String,
    pub(super) amount: String,
    pub(super) currency: String,
    pub(super) status: String,
    pub(super) created: Timestamp,
}

impl Draft {
    pub(super) fn json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "bill_draft",
            "invoice": self.invoice,
            "supplier": self.supplier,
            "amount": self.amount,
            "currency": self.currency,
            "status": self.status,
            "intent_id": self.intent_id,
            "created_at": crate::codec::rfc3339(self.created),
        })
    }
}

/// The validated fields of a draft request (the key and intent come from elsewhere).
pub(super) struct DraftRequest {
    pub(super) intent_id: Option<String>,
    pub(super) invoice: String,
    pub(super) supplier: String,
    pub(super) amount: String,
    pub(super) currency: String,
}

#[derive(Clone, Debug)]
pub(super) struct Email {
    pub(super) id: String,
    pub(super) intent_id: Option<String>,
    pub(super) to: String,
}

impl Email {
    pub(super) fn json(&self) -> Value {
        json!({"id": self.id, "object": "email", "to": self.to, "status": "sent"})
    }
}

/// An object the stub holds, as the demo's per-row object count sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubObject {
    pub kind: &'static str,
    pub id: String,
    pub status: String,
}

/// Every object and key of one stub.
pub(super) struct Books {
    /// Distinguishes this stub's object ids from an earlier run's on the same reckon server.
    run: String,
    /// How long a finished key is kept (assumption D).
    retention: Duration,
    keys: HashMap<(Endpoint, String), KeyEntry>,
    pub(super) refunds: BTreeMap<String, Refund>,
    pub(super) drafts: BTreeMap<String, Draft>,
    pub(super) emails: Vec<Email>,
    seq: u64,
}

impl Books {
    pub(super) fn new(run: &str, retention: Duration) -> Books {
        Books {
            run: run.to_string(),
            retention,
            keys: HashMap::new(),
            refunds: BTreeMap::new(),
            drafts: BTreeMap::new(),
            emails: Vec::new(),
            seq: 0,
        }
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.seq += 1;
        format!("{prefix}_{}{:04}", self.run, self.seq)
    }

    /// Assumption D: keys older than the retention are forgotten. Executing entries stay: their
    /// request is still running.
    fn prune(&mut self, now: Instant) {
        let retention = self.retention;
        self.keys.retain(|_, e| {
            matches!(e.phase, Phase::Executing) || now.duration_since(e.saved_at) < retention
        });
    }

    /// Looks `key` up for a request with `params` at `now` (after forgetting expired keys) and,
    /// when it is free, holds it for this request. Parameters are compared before the phase:
    /// a changed request is refused even while the first one runs.
    pub(super) fn claim_key(
        &mut self,
        endpoint: Endpoint,
        key: &str,
        params: &Value,
        knobs: &Knobs,
        now: Instant,
    ) -> KeyClaim {
        self.prune(now);
        match self.keys.get(&(endpoint, key.to_string())) {
            Some(e) if e.params != *params => KeyClaim::Mismatch,
            Some(KeyEntry {
                phase: Phase::Executing,
                ..
            }) => KeyClaim::InUse,
            Some(KeyEntry {
                phase: Phase::Done(saved),
                knobs,
                ..
            }) => KeyClaim::Done {
                saved: saved.clone(),
                knobs: knobs.clone(),
            },
            None => {
                self.keys.insert(
                    (endpoint, key.to_string()),
                    KeyEntry {
                        saved_at: now,
                        params: params.clone(),
                        knobs: knobs.clone(),
                        phase: Phase::Executing,
                    },
                );
                KeyClaim::Claimed
            }
        }
    }

    /// Saves the outcome under the key (assumption A). The retention still counts from when the
    /// key was claimed; `now` only dates an entry that was somehow never claimed.
    pub(super) fn finish_key(
        &mut self,
        endpoint: Endpoint,
        key: &str,
        params: &Value,
        knobs: &Knobs,
        saved: Saved,
        now: Instant,
    ) {
        let entry = self
            .keys
            .entry((endpoint, key.to_string()))
            .or_insert_with(|| KeyEntry {
                saved_at: now,
                params: params.clone(),
                knobs: knobs.clone(),
                phase: Phase::Executing,
            });
        entry.phase = Phase::Done(saved);
    }

    /// A repeat of a finished refund request: v1 replays what was saved, 500s included; v2
    /// answers with the object as it is now, and finishes work whose first attempt failed
    /// (converge), under the first request's settings but without its injected failure.
    pub(super) fn repeat_refund(&self, endpoint: Endpoint, saved: Saved, first: Knobs) -> Repeat {
        if endpoint == Endpoint::RefundsV1 || saved.status < 500 {
            let current = saved
                .object_id
                .as_ref()
                .and_then(|id| self.refunds.get(id))
                .map(Refund::json);
            return Repeat::Answer(match (endpoint, current) {
                (Endpoint::RefundsV2, Some(now)) => Saved {
                    status: 200,
                    body: now,
                    object_id: saved.object_id,
                },
                _ => saved,
            });
        }
        Repeat::Converge(Knobs {
            fail_500: false,
            ..first
        })
    }

    /// Creates a refund in its first status and, under a key, saves the response in the same
    /// step: no request can see the key done without the refund, or the refund without the key.
    pub(super) fn create_refund(
        &mut self,
        endpoint: Endpoint,
        key: Option<&str>,
        req: &RefundRequest,
        params: &Value,
        knobs: &Knobs,
        now: Now,
    ) -> (Refund, Saved) {
        let (first, _) = knobs.settle.statuses();
        let refund = Refund {
            id: self.next_id("re"),
            amount: req.amount,
            currency: req.currency.clone(),
            status: first.to_string(),
            metadata: req.metadata.clone(),
            created: now.wall.0.div_euclid(1_000_000_000),
            key: key.map(str::to_string),
        };
        self.refunds.insert(refund.id.clone(), refund.clone());
        let saved = Saved {
            status: 200,
            body: refund.json(),
            object_id: Some(refund.id.clone()),
        };
        if let Some(key) = key {
            self.finish_key(endpoint, key, params, knobs, saved.clone(), now.mono);
        }
        (refund, saved)
    }

    /// Moves a refund to its terminal status (assumption E); `None` if it is unknown.
    pub(super) fn settle_refund(&mut self, id: &str, status: &str) -> Option<Refund> {
        self.refunds.get_mut(id).map(|r| {
            r.status = status.to_string();
            r.clone()
        })
    }

    /// Creates a draft and, under a key, saves the response in the same step.
    pub(super) fn create_draft(
        &mut self,
        key: Option<&str>,
        req: DraftRequest,
        params: &Value,
        knobs: &Knobs,
        now: Now,
    ) -> (Draft, Saved) {
        let draft = Draft {
            id: self.next_id("dr"),
            intent_id: req.intent_id,
            key: key.map(str::to_string),
            invoice: req.invoice,
            supplier: req.supplier,
            amount: req.amount,
            currency: req.currency,
            status: "created".into(),
            created: now.wall,
        };
        self.drafts.insert(draft.id.clone(), draft.clone());
        let saved = Saved {
            status: 201,
            body: draft.json(),
            object_id: Some(draft.id.clone()),
        };
        if let Some(key) = key {
            self.finish_key(
                Endpoint::Drafts,
                key,
                params,
                knobs,
                saved.clone(),
                now.mono,
            );
        }
        (draft, saved)
    }

    /// The `none` downstream: no key, every send is a new email.
    pub(super) fn send_email(&mut self, intent_id: Option<String>, to: &str) -> Email {
        let email = Email {
            id: self.next_id("em"),
            intent_id,
            to: to.to_string(),
        };
        self.emails.push(email.clone());
        email
    }

    /// Every object linked to `intent_id` (refunds by metadata, drafts and emails by field).
    pub(super) fn objects_for(&self, intent_id: &str) -> Vec<StubObject> {
        let mut out = Vec::new();
        for r in self.refunds.values() {
            if r.metadata.get("intent_id").and_then(Value::as_str) == Some(intent_id) {
                out.push(StubObject {
                    kind: "refund",
                    id: r.id.clone(),
                    status: r.status.clone(),
                });
            }
        }
        for d in self.drafts.values() {
            if d.intent_id.as_deref() == Some(intent_id) {
                out.push(StubObject {
                    kind: "draft",
                    id: d.id.clone(),
                    status: d.status.clone(),
                });
            }
        }
        for e in &self.emails {
            if e.intent_id.as_deref() == Some(intent_id) {
                out.push(StubObject {
                    kind: "email",
                    id: e.id.clone(),
                    status: "sent".into(),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::Settle;
    use super::*;

    const RETENTION: Duration = Duration::from_secs(8);

    fn refund_request(intent: &str) -> (RefundRequest, Value) {
        let params = json!({"amount": 4500, "currency": "usd", "metadata": {"intent_id": intent}});
        let metadata = params["metadata"].as_object().cloned().unwrap_or_default();
        let req = RefundRequest {
            amount: 4500,
            currency: "usd".into(),
            metadata,
        };
        (req, params)
    }

    fn at0(t0: Instant) -> Now {
        Now {
            wall: Timestamp(0),
            mono: t0,
        }
    }

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    #[test]
    fn a_key_is_held_while_executing_and_then_replays() {
        let t0 = Instant::now();
        let mut b = Books::new("t", RETENTION);
        let (req, params) = refund_request("i1");
        let k = Knobs::default();
        let v1 = Endpoint::RefundsV1;
        assert_eq!(b.claim_key(v1, "k", &params, &k, t0), KeyClaim::Claimed);
        assert_eq!(b.claim_key(v1, "k", &params, &k, t0), KeyClaim::InUse);
        // The same key on another endpoint is another request.
        assert_eq!(
            b.claim_key(Endpoint::RefundsV2, "k", &params, &k, t0),
            KeyClaim::Claimed
        );
        let (refund, saved) = b.create_refund(v1, Some("k"), &req, &params, &k, at0(t0));
        assert_eq!(saved.object_id.as_deref(), Some(refund.id.as_str()));
        assert_eq!(
            b.claim_key(v1, "k", &params, &k, at(t0, 1)),
            KeyClaim::Done {
                saved: saved.clone(),
                knobs: k.clone()
            }
        );
        assert_eq!(b.refunds.len(), 1);
        assert_eq!(b.objects_for("i1").len(), 1);
    }

    #[test]
    fn changed_parameters_are_a_mismatch_in_any_phase() {
        let t0 = Instant::now();
        let mut b = Books::new("t", RETENTION);
        let (req, params) = refund_request("i1");
        let (_, other) = refund_request("i2");
        let k = Knobs::default();
        let v1 = Endpoint::RefundsV1;
        assert_eq!(b.claim_key(v1, "k", &params, &k, t0), KeyClaim::Claimed);
        assert_eq!(b.claim_key(v1, "k", &other, &k, t0), KeyClaim::Mismatch);
        b.create_refund(v1, Some("k"), &req, &params, &k, at0(t0));
        assert_eq!(b.claim_key(v1, "k", &other, &k, t0), KeyClaim::Mismatch);
    }

    #[test]
    fn finished_keys_are_pruned_after_the_retention_executing_ones_never() {
        let t0 = Instant::now();
        let mut b = Books::new("t", RETENTION);
        let (req, params) = refund_request("i1");
        let k = Knobs::default();
        let v1 = Endpoint::RefundsV1;
        b.claim_key(v1, "done", &params, &k, t0);
        b.create_refund(v1, Some("done"), &req, &params, &k, at0(t0));
        b.claim_key(v1, "running", &params, &k, t0);
        let late = at(t0, RETENTION.as_secs());
        assert_eq!(
            b.claim_key(v1, "done", &params, &k, late),
            KeyClaim::Claimed
        );
        assert_eq!(
            b.claim_key(v1, "running", &params, &k, late),
            KeyClaim::InUse
        );
    }

    #[test]
    fn v1_replays_a_saved_500_and_v2_converges_it() {
        let t0 = Instant::now();
        let mut b = Books::new("t", RETENTION);
        let (_, params) = refund_request("i1");
        let failing = Knobs {
            fail_500: true,
            settle: Settle::PendingThenSucceeded,
            ..Knobs::default()
        };
        for endpoint in [Endpoint::RefundsV1, Endpoint::RefundsV2] {
            b.claim_key(endpoint, "k", &params, &failing, t0);
            let error = Saved::refund_server_error();
            b.finish_key(endpoint, "k", &params, &failing, error.clone(), t0);
            let KeyClaim::Done { saved, knobs } = b.claim_key(endpoint, "k", &params, &failing, t0)
            else {
                panic!("the key is done")
            };
            let repeat = b.repeat_refund(endpoint, saved, knobs);
            match endpoint {
                Endpoint::RefundsV1 => assert_eq!(repeat, Repeat::Answer(error)),
                _ => assert_eq!(
                    repeat,
                    Repeat::Converge(Knobs {
                        fail_500: false,
                        ..failing.clone()
                    })
                ),
            }
        }
        assert!(b.refunds.is_empty(), "deciding creates nothing");
    }

    #[test]
    fn v2_answers_a_repeat_with_the_object_as_it_is_now() {
        let t0 = Instant::now();
        let mut b = Books::new("t", RETENTION);
        let (req, params) = refund_request("i1");
        let k = Knobs {
            settle: Settle::PendingThenFailed,
            ..Knobs::default()
        };
        for endpoint in [Endpoint::RefundsV1, Endpoint::RefundsV2] {
            b.claim_key(endpoint, "k", &params, &k, t0);
            let (refund, saved) = b.create_refund(endpoint, Some("k"), &req, &params, &k, at0(t0));
            assert_eq!(refund.status, "pending");
            b.settle_refund(&refund.id, "failed");
            let Repeat::Answer(answer) = b.repeat_refund(endpoint, saved.clone(), k.clone()) else {
                panic!("a finished refund is answered")
            };
            let status = answer.body["status"].clone();
            match endpoint {
                Endpoint::RefundsV1 => assert_eq!((answer, status), (saved, json!("pending"))),
                _ => assert_eq!((answer.status, status), (200, json!("failed"))),
            }
        }
    }

    #[test]
    fn ids_carry_the_run_and_a_sequence_shared_by_every_kind() {
        let mut b = Books::new("r7", RETENTION);
        let e = b.send_email(Some("i1".into()), "a@example.com");
        let (req, params) = refund_request("i1");
        let (r, _) = b.create_refund(
            Endpoint::RefundsV1,
            None,
            &req,
            &params,
            &Knobs::default(),
            Now {
                wall: Timestamp(1_700_000_000_500_000_000),
                mono: Instant::now(),
            },
        );
        assert_eq!((e.id.as_str(), r.id.as_str()), ("em_r70001", "re_r70002"));
        assert_eq!(r.created, 1_700_000_000);
        let kinds: Vec<_> = b.objects_for("i1").iter().map(|o| o.kind).collect();
        assert_eq!(kinds, ["refund", "email"]);
    }
}
