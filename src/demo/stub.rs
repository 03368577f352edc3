//! A stub downstream that keeps real state: the first note's payment service (refunds, Stripe
//! v1 replay and v2 converge), the second note's bookkeeping service (bill drafts) and an email
//! provider that accepts no key.
//!
//! The refund contract is the note's assumptions A to E, enforced here and nowhere else:
//! - A: once execution begins, a same-key repeat with the same parameters gets the saved response,
//!   500s included (`/v1/refunds`). Under `/v2/refunds` (converge) a repeat instead drives failed
//!   work to completion and returns the object as it is now.
//! - B: a same-key request arriving while the first executes gets 409 and is not saved.
//! - C: a reused key with other parameters is refused (400 `idempotency_error`).
//! - D: keys are kept for `key_retention`, then pruned: a late repeat executes again.
//! - E: refunds settle asynchronously (pending, then succeeded or failed), reported by webhook.
//!
//! Drafts differ where the second note says so: a same-key request arriving while the first runs
//! waits for it and observes its result (test 5), and a changed payload is 422
//! `idempotency_key_mismatch` (test 4).
//!
//! Like a real integration, the stub reports its objects to reckon itself: Stripe-shaped, signed
//! webhooks for refunds and the records API for drafts. Emails are not reported: the point of
//! the `none` downstream is that nothing but the caller's own timeout is known.
//!
//! Scenarios steer one request at a time with `x-demo-*` headers (see [`Knobs`]), so concurrent
//! scenarios never share a switch.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::model::{currency_exponent, Decimal, Timestamp};

/// How long the stub keeps an idempotency key: `key_retention` in `contracts/demo.toml`.
pub const KEY_RETENTION: Duration = Duration::from_secs(8);

/// Per-request switches a scenario sets as headers; the proxy passes them through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// `x-demo-exec-ms`: how long execution takes (the window in which a same key conflicts).
    pub exec: Duration,
    /// `x-demo-settle`: how a refund settles (default `succeeded` at once).
    pub settle: Settle,
    /// `x-demo-settle-ms`: when a `pending-then-*` refund reaches its terminal state.
    pub settle_after: Duration,
    /// `x-demo-fail: 500`: execution begins, then fails with a server error.
    pub fail_500: bool,
    /// `x-demo-report-delay-ms`: how long before the downstream reports the object to reckon.
    pub report_delay: Duration,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Settle {
    #[default]
    Succeeded,
    Failed,
    Pending,
    PendingThenFailed,
    PendingThenSucceeded,
}

impl Settle {
    fn parse(s: &str) -> Option<Settle> {
        Some(match s {
            "succeeded" => Settle::Succeeded,
            "failed" => Settle::Failed,
            "pending" => Settle::Pending,
            "pending-then-failed" => Settle::PendingThenFailed,
            "pending-then-succeeded" => Settle::PendingThenSucceeded,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Settle::Succeeded => "succeeded",
            Settle::Failed => "failed",
            Settle::Pending => "pending",
            Settle::PendingThenFailed => "pending-then-failed",
            Settle::PendingThenSucceeded => "pending-then-succeeded",
        }
    }
    /// The status a new refund is created with, and the one it later moves to.
    fn statuses(self) -> (&'static str, Option<&'static str>) {
        match self {
            Settle::Succeeded => ("succeeded", None),
            Settle::Failed => ("failed", None),
            Settle::Pending => ("pending", None),
            Settle::PendingThenFailed => ("pending", Some("failed")),
            Settle::PendingThenSucceeded => ("pending", Some("succeeded")),
        }
    }
}

impl Knobs {
    pub const EXEC_MS: &'static str = "x-demo-exec-ms";
    pub const SETTLE: &'static str = "x-demo-settle";
    pub const SETTLE_MS: &'static str = "x-demo-settle-ms";
    pub const FAIL: &'static str = "x-demo-fail";
    pub const REPORT_DELAY_MS: &'static str = "x-demo-report-delay-ms";

    /// Unknown or malformed values fall back to the default: a knob is a test aid, and a typo
    /// shows up as a failing row rather than a refused request the row did not expect.
    pub fn from_headers(h: &HeaderMap) -> Knobs {
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
        let ms = |name: &str| {
            text(name)
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        Knobs {
            exec: ms(Self::EXEC_MS).unwrap_or(Duration::from_millis(20)),
            settle: text(Self::SETTLE)
                .and_then(Settle::parse)
                .unwrap_or_default(),
            settle_after: ms(Self::SETTLE_MS).unwrap_or(Duration::from_secs(2)),
            fail_500: text(Self::FAIL) == Some("500"),
            report_delay: ms(Self::REPORT_DELAY_MS).unwrap_or_default(),
        }
    }

    /// The headers that carry these knobs (defaults left out).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let d = Knobs::default();
        let mut out = vec![(Self::EXEC_MS, self.exec.as_millis().to_string())];
        if self.settle != d.settle {
            out.push((Self::SETTLE, self.settle.as_str().to_string()));
            out.push((Self::SETTLE_MS, self.settle_after.as_millis().to_string()));
        }
        if self.fail_500 {
            out.push((Self::FAIL, "500".to_string()));
        }
        if self.report_delay > Duration::ZERO {
            out.push((
                Self::REPORT_DELAY_MS,
                self.report_delay.as_millis().to_string(),
            ));
        }
        out
    }
}

/// Where and how the stub reports its objects. `None` in tests that only look at the stub.
#[derive(Clone, Debug)]
pub struct Reporter {
    /// reckon's API base, e.g. `http://127.0.0.1:8080`.
    pub api_base: String,
    /// Signs webhooks as Stripe does when set.
    pub stripe_secret: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum StubError {
    #[error("cannot bind the stub downstream: {0}")]
    Bind(#[source] std::io::Error),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Endpoint {
    RefundsV1,
    RefundsV2,
    Drafts,
}

#[derive(Clone, Debug)]
struct Saved {
    status: u16,
    body: Value,
    object_id: Option<String>,
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

#[derive(Clone, Debug)]
struct Refund {
    id: String,
    amount: i64,
    currency: String,
    status: String,
    metadata: serde_json::Map<String, Value>,
    created: i64,
    key: Option<String>,
}

impl Refund {
    fn json(&self) -> Value {
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

#[derive(Clone, Debug)]
struct Draft {
    id: String,
    intent_id: Option<String>,
    key: Option<String>,
    invoice: String,
    supplier: String,
    amount: String,
    currency: String,
    status: String,
    created: Timestamp,
}

impl Draft {
    fn json(&self) -> Value {
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

#[derive(Clone, Debug)]
struct Email {
    id: String,
    intent_id: Option<String>,
    to: String,
}

#[derive(Default)]
struct Books {
    /// Distinguishes this stub's object ids from an earlier run's on the same reckon server.
    run: String,
    keys: HashMap<(Endpoint, String), KeyEntry>,
    refunds: BTreeMap<String, Refund>,
    drafts: BTreeMap<String, Draft>,
    emails: Vec<Email>,
    seq: u64,
    /// Report deliveries reckon refused or that could not be sent, for the demo's diagnosis.
    report_failures: Vec<String>,
}

impl Books {
    fn next_id(&mut self, prefix: &str) -> String {
        self.seq += 1;
        format!("{prefix}_{}{:04}", self.run, self.seq)
    }
}

struct Shared {
    state: Mutex<Books>,
    retention: Duration,
    reporter: Option<Reporter>,
    http: reqwest::Client,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Books> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters to a demo; keep serving rather than poisoning every later request.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Assumption D: keys older than the retention are forgotten. Executing entries stay: their
    /// request is still running.
    fn prune(&self, st: &mut Books) {
        let retention = self.retention;
        st.keys
            .retain(|_, e| matches!(e.phase, Phase::Executing) || e.saved_at.elapsed() < retention);
    }
}

/// The running stub: its address and the objects it holds.
pub struct Stub {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// An object the stub holds, as the demo's per-row object count sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubObject {
    pub kind: &'static str,
    pub id: String,
    pub status: String,
}

impl Stub {
    /// Binds 127.0.0.1:0 and serves until dropped.
    pub async fn start(retention: Duration, reporter: Option<Reporter>) -> Result<Stub, StubError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(StubError::Bind)?;
        let addr = listener.local_addr().map_err(StubError::Bind)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(Books {
                run: super::run_tag().to_string(),
                ..Books::default()
            }),
            retention,
            reporter,
            http: reqwest::Client::new(),
        });
        let app = router(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("stub downstream stopped: {e}");
            }
        });
        Ok(Stub { addr, shared, task })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every object linked to `intent_id` (refunds by metadata, drafts and emails by field).
    pub fn objects_for(&self, intent_id: &str) -> Vec<StubObject> {
        let st = self.shared.lock();
        let mut out = Vec::new();
        for r in st.refunds.values() {
            if r.metadata.get("intent_id").and_then(Value::as_str) == Some(intent_id) {
                out.push(StubObject {
                    kind: "refund",
                    id: r.id.clone(),
                    status: r.status.clone(),
                });
            }
        }
        for d in st.drafts.values() {
            if d.intent_id.as_deref() == Some(intent_id) {
                out.push(StubObject {
                    kind: "draft",
                    id: d.id.clone(),
                    status: d.status.clone(),
                });
            }
        }
        for e in &st.emails {
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

    /// Reports reckon refused or that never arrived.
    pub fn report_failures(&self) -> Vec<String> {
        self.shared.lock().report_failures.clone()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/v1/refunds",
            post(|s: State<Arc<Shared>>, h: HeaderMap, b: Bytes| async move {
                create_refund(s.0, Endpoint::RefundsV1, h, b).await
            })
            .get(list_refunds),
        )
        .route(
            "/v2/refunds",
            post(|s: State<Arc<Shared>>, h: HeaderMap, b: Bytes| async move {
                create_refund(s.0, Endpoint::RefundsV2, h, b).await
            })
            .get(list_refunds),
        )
        .route("/drafts", post(create_draft).get(list_drafts))
        .route("/v1/emails", post(send_email).get(list_emails))
        .with_state(shared)
}

fn stripe_error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"type": kind, "code": code, "message": message}})),
    )
        .into_response()
}

fn respond(saved: &Saved) -> Response {
    let status = StatusCode::from_u16(saved.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(saved.body.clone())).into_response()
}

fn idempotency_key(h: &HeaderMap) -> Option<String> {
    h.get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
}

fn unix_now() -> Timestamp {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp(d.as_nanos() as i64)
}

/// The validated parameters of a refund request.
struct RefundRequest {
    amount: i64,
    currency: String,
    metadata: serde_json::Map<String, Value>,
}

// The error is the HTTP response to send as is: one per request, never stored or passed on.
#[allow(clippy::result_large_err)]
fn parse_refund(body: &[u8]) -> Result<(RefundRequest, Value), Response> {
    let bad = |param: &str, message: &str| {
        stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("parameter_invalid"),
            &format!("{param}: {message}"),
        )
    };
    let v: Value = serde_json::from_slice(body).map_err(|e| bad("body", &e.to_string()))?;
    let amount = v
        .get("amount")
        .and_then(Value::as_i64)
        .ok_or_else(|| bad("amount", "must be an integer in the currency's minor unit"))?;
    if amount <= 0 {
        return Err(stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("amount_too_small"),
            "amount must be positive",
        ));
    }
    let currency = v
        .get("currency")
        .and_then(Value::as_str)
        .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()))
        .ok_or_else(|| bad("currency", "must be a three-letter ISO code"))?
        .to_ascii_lowercase();
    let metadata = match v.get("metadata") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(bad("metadata", "must be an object")),
    };
    Ok((
        RefundRequest {
            amount,
            currency,
            metadata,
        },
        v,
    ))
}

async fn create_refund(
    shared: Arc<Shared>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let knobs = Knobs::from_headers(&headers);
    // Validation comes first and is never saved: nothing began executing (Stripe does the same).
    let (req, params) = match parse_refund(&body) {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let key = idempotency_key(&headers);
    if let Some(key) = &key {
        let mut st = shared.lock();
        shared.prune(&mut st);
        match st.keys.get(&(endpoint, key.clone())).cloned() {
            Some(e) if e.params != params => {
                return stripe_error(
                    StatusCode::BAD_REQUEST,
                    "idempotency_error",
                    None,
                    "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                )
            }
            Some(KeyEntry {
                phase: Phase::Executing,
                ..
            }) => {
                return stripe_error(
                    StatusCode::CONFLICT,
                    "idempotency_error",
                    Some("idempotency_key_in_use"),
                    "There is currently another in-progress request using this Idempotent Key.",
                )
            }
            Some(KeyEntry {
                phase: Phase::Done(saved),
                knobs: first_knobs,
                ..
            }) => {
                if endpoint == Endpoint::RefundsV1 || saved.status < 500 {
                    // v1 replays what was saved. v2 answers with the object as it is now.
                    let current = saved
                        .object_id
                        .as_ref()
                        .and_then(|id| st.refunds.get(id))
                        .map(Refund::json);
                    return match (endpoint, current) {
                        (Endpoint::RefundsV2, Some(now)) => (StatusCode::OK, Json(now)).into_response(),
                        _ => respond(&saved),
                    };
                }
                // v2 converge: the saved attempt failed partway; finish the work now, under the
                // first request's settings, and save the completed result.
                let mut knobs = first_knobs;
                knobs.fail_500 = false;
                let saved = execute_refund(&shared, &mut st, endpoint, Some(key), &req, &params, knobs);
                return respond(&saved);
            }
            None => {
                st.keys.insert(
                    (endpoint, key.clone()),
                    KeyEntry {
                        saved_at: Instant::now(),
                        params: params.clone(),
                        knobs: knobs.clone(),
                        phase: Phase::Executing,
                    },
                );
            }
        }
    }
    // Execution has begun: from here on the outcome is saved under the key (assumption A).
    tokio::time::sleep(knobs.exec).await;
    let mut st = shared.lock();
    if knobs.fail_500 {
        let saved = Saved {
            status: 500,
            body: json!({"error": {"type": "api_error", "message": "An unknown error occurred while processing the refund."}}),
            object_id: None,
        };
        if let Some(key) = &key {
            finish_key(&mut st, endpoint, key, &params, &knobs, saved.clone());
        }
        return respond(&saved);
    }
    let saved = execute_refund(
        &shared,
        &mut st,
        endpoint,
        key.as_deref(),
        &req,
        &params,
        knobs,
    );
    respond(&saved)
}

fn finish_key(
    st: &mut Books,
    endpoint: Endpoint,
    key: &str,
    params: &Value,
    knobs: &Knobs,
    saved: Saved,
) {
    let entry = st
        .keys
        .entry((endpoint, key.to_string()))
        .or_insert_with(|| KeyEntry {
            saved_at: Instant::now(),
            params: params.clone(),
            knobs: knobs.clone(),
            phase: Phase::Executing,
        });
    entry.phase = Phase::Done(saved);
}

/// Creates the refund (atomically with saving the key: both happen under one lock), reports it
/// and schedules its settlement.
fn execute_refund(
    shared: &Arc<Shared>,
    st: &mut Books,
    endpoint: Endpoint,
    key: Option<&str>,
    req: &RefundRequest,
    params: &Value,
    knobs: Knobs,
) -> Saved {
    let (first, later) = knobs.settle.statuses();
    let refund = Refund {
        id: st.next_id("re"),
        amount: req.amount,
        currency: req.currency.clone(),
        status: first.to_string(),
        metadata: req.metadata.clone(),
        created: unix_now().0.div_euclid(1_000_000_000),
        key: key.map(str::to_string),
    };
    st.refunds.insert(refund.id.clone(), refund.clone());
    let saved = Saved {
        status: 200,
        body: refund.json(),
        object_id: Some(refund.id.clone()),
    };
    if let Some(key) = key {
        finish_key(st, endpoint, key, params, &knobs, saved.clone());
    }
    let event_type = if first == "failed" {
        "refund.failed"
    } else {
        "refund.created"
    };
    report_refund(shared, &refund, event_type, knobs.report_delay);
    if let Some(to) = later {
        let shared = shared.clone();
        let id = refund.id.clone();
        let delay = knobs.settle_after;
        let report_delay = knobs.report_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let updated = {
                let mut st = shared.lock();
                st.refunds.get_mut(&id).map(|r| {
                    r.status = to.to_string();
                    r.clone()
                })
            };
            if let Some(r) = updated {
                let t = if to == "failed" {
                    "refund.failed"
                } else {
                    "refund.updated"
                };
                report_refund(&shared, &r, t, report_delay);
            }
        });
    }
    saved
}

/// A Stripe event for the refund, signed when a secret is configured.
pub fn refund_event(event_id: &str, event_type: &str, refund: &Value, key: Option<&str>) -> Value {
    json!({
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": unix_now().0.div_euclid(1_000_000_000),
        "type": event_type,
        "livemode": false,
        "pending_webhooks": 1,
        "data": {"object": refund},
        // Only the creating request carries the key; later changes are Stripe's own (null).
        "request": key.map(|k| json!({"id": format!("req_{event_id}"), "idempotency_key": k})),
    })
}

fn report_refund(shared: &Arc<Shared>, refund: &Refund, event_type: &str, delay: Duration) {
    let Some(reporter) = shared.reporter.clone() else {
        return;
    };
    let event_id = event_id();
    let key = if event_type == "refund.created" {
        refund.key.as_deref()
    } else {
        None
    };
    let body = refund_event(&event_id, event_type, &refund.json(), key).to_string();
    let url = format!("{}/api/v1/webhooks/stripe", reporter.api_base);
    let signature = reporter
        .stripe_secret
        .as_deref()
        .map(|s| stripe_signature(body.as_bytes(), s, unix_now().0 / 1_000_000_000));
    deliver(shared.clone(), url, body, signature, delay, "webhook");
}

fn report_draft(shared: &Arc<Shared>, d: &Draft, delay: Duration) {
    let Some(reporter) = shared.reporter.clone() else {
        return;
    };
    let body = json!({
        "kind": "demo_draft",
        "source": "demo-bookkeeping",
        "object_id": d.id,
        "intent_id": d.intent_id,
        "idempotency_key": d.key,
        "status": d.status,
        "amount": d.amount,
        "currency": d.currency,
        "target": d.supplier,
        "created_at": crate::codec::rfc3339(d.created),
        "observed_at": crate::codec::rfc3339(d.created),
    })
    .to_string();
    let url = format!("{}/api/v1/records", reporter.api_base);
    deliver(shared.clone(), url, body, None, delay, "record");
}

/// Event ids come from their own counter: `report_refund` runs while the state lock is held
/// (execution saves the key and reports in one step), so it must not take that lock again.
fn event_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(1);
    format!(
        "evt_{}{:08}",
        super::run_tag(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Sends one report in the background, retrying like Stripe does (briefly: this is a demo).
fn deliver(
    shared: Arc<Shared>,
    url: String,
    body: String,
    signature: Option<String>,
    delay: Duration,
    what: &'static str,
) {
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let mut last = String::new();
        for attempt in 0..5u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
            let mut req = shared
                .http
                .post(&url)
                .header("content-type", "application/json")
                .timeout(Duration::from_secs(5))
                .body(body.clone());
            if let Some(sig) = &signature {
                req = req.header("stripe-signature", sig);
            }
            match req.send().await {
                Ok(resp) if resp.status().is_success() => return,
                // A 4xx will not change on retry: reckon refused the report.
                Ok(resp) if resp.status().is_client_error() => {
                    let status = resp.status();
                    let text = resp.text().await.unwrap_or_default();
                    last = format!("{what} to {url}: {status} {text}");
                    break;
                }
                Ok(resp) => last = format!("{what} to {url}: {}", resp.status()),
                Err(e) => last = format!("{what} to {url}: {e}"),
            }
        }
        tracing::warn!("stub downstream could not report: {last}");
        shared.lock().report_failures.push(last);
    });
}

#[derive(Deserialize)]
struct ByIntent {
    intent_id: Option<String>,
    order_id: Option<String>,
}

async fn list_refunds(State(shared): State<Arc<Shared>>, Query(q): Query<ByIntent>) -> Response {
    let st = shared.lock();
    let data: Vec<Value> = st
        .refunds
        .values()
        .filter(|r| {
            let field = |k: &str| r.metadata.get(k).and_then(Value::as_str);
            (q.intent_id.is_none() || field("intent_id") == q.intent_id.as_deref())
                && (q.order_id.is_none() || field("order_id") == q.order_id.as_deref())
        })
        .map(Refund::json)
        .collect();
    Json(json!({"object": "list", "data": data, "has_more": false})).into_response()
}

fn draft_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

async fn create_draft(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let knobs = Knobs::from_headers(&headers);
    let params: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return draft_error(StatusCode::BAD_REQUEST, "invalid_json", &e.to_string()),
    };
    let field = |name: &str| {
        params
            .get(name)
            .and_then(|v| match v {
                Value::String(s) => Some(s.trim().to_string()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|s| !s.is_empty())
    };
    let (Some(supplier), Some(amount), Some(currency)) =
        (field("supplier"), field("amount"), field("currency"))
    else {
        return draft_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            "supplier, amount and currency are required",
        );
    };
    if Decimal::parse(&amount).is_none_or(|d| d <= Decimal::parse("0").unwrap_or(d)) {
        return draft_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            "amount must be a positive decimal",
        );
    }
    let key = idempotency_key(&headers);
    if let Some(key) = &key {
        // Test 5: a same-key request that arrives while the first runs waits for its result.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The guard must not live across the sleep (the handler future must be Send).
            let waiting = {
                let mut st = shared.lock();
                shared.prune(&mut st);
                match st.keys.get(&(Endpoint::Drafts, key.clone())).cloned() {
                    Some(e) if e.params != params => {
                        return draft_error(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "idempotency_key_mismatch",
                            "this key was used with a different draft",
                        )
                    }
                    Some(KeyEntry {
                        phase: Phase::Done(saved),
                        ..
                    }) => return respond(&saved),
                    Some(_) => true,
                    None => {
                        st.keys.insert(
                            (Endpoint::Drafts, key.clone()),
                            KeyEntry {
                                saved_at: Instant::now(),
                                params: params.clone(),
                                knobs: knobs.clone(),
                                phase: Phase::Executing,
                            },
                        );
                        false
                    }
                }
            };
            if !waiting {
                break;
            }
            if Instant::now() >= deadline {
                return draft_error(
                    StatusCode::CONFLICT,
                    "idempotency_key_in_use",
                    "the first request with this key is still running",
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(knobs.exec).await;
    let mut st = shared.lock();
    let draft = Draft {
        id: st.next_id("dr"),
        intent_id: params
            .pointer("/metadata/intent_id")
            .and_then(Value::as_str)
            .map(str::to_string),
        key: key.clone(),
        invoice: field("invoice").unwrap_or_default(),
        supplier,
        amount,
        currency,
        status: "created".into(),
        created: unix_now(),
    };
    st.drafts.insert(draft.id.clone(), draft.clone());
    let saved = Saved {
        status: 201,
        body: draft.json(),
        object_id: Some(draft.id.clone()),
    };
    if let Some(key) = &key {
        finish_key(
            &mut st,
            Endpoint::Drafts,
            key,
            &params,
            &knobs,
            saved.clone(),
        );
    }
    drop(st);
    report_draft(&shared, &draft, knobs.report_delay);
    respond(&saved)
}

async fn list_drafts(State(shared): State<Arc<Shared>>, Query(q): Query<ByIntent>) -> Response {
    let st = shared.lock();
    let data: Vec<Value> = st
        .drafts
        .values()
        .filter(|d| q.intent_id.is_none() || d.intent_id == q.intent_id)
        .map(Draft::json)
        .collect();
    Json(json!({"data": data})).into_response()
}

/// The `none` downstream: any `Idempotency-Key` header is ignored, every send is a new email.
async fn send_email(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let knobs = Knobs::from_headers(&headers);
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return draft_error(StatusCode::BAD_REQUEST, "invalid_json", &e.to_string()),
    };
    let Some(to) = v
        .get("to")
        .and_then(Value::as_str)
        .filter(|t| t.contains('@'))
    else {
        return draft_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_recipient",
            "`to` must be an address",
        );
    };
    tokio::time::sleep(knobs.exec).await;
    let mut st = shared.lock();
    let email = Email {
        id: st.next_id("em"),
        intent_id: v
            .pointer("/metadata/intent_id")
            .and_then(Value::as_str)
            .map(str::to_string),
        to: to.to_string(),
    };
    st.emails.push(email.clone());
    (
        StatusCode::OK,
        Json(json!({"id": email.id, "object": "email", "to": email.to, "status": "sent"})),
    )
        .into_response()
}

async fn list_emails(State(shared): State<Arc<Shared>>, Query(q): Query<ByIntent>) -> Response {
    let st = shared.lock();
    let data: Vec<Value> = st
        .emails
        .iter()
        .filter(|e| q.intent_id.is_none() || e.intent_id == q.intent_id)
        .map(|e| json!({"id": e.id, "object": "email", "to": e.to, "status": "sent"}))
        .collect();
    Json(json!({"data": data})).into_response()
}

/// Minor units for a major-unit amount in `currency`, as Stripe wants them: `45.00 usd` -> 4500.
/// `None` when the amount has more decimals than the currency or does not fit.
pub fn to_minor(amount: Decimal, currency: &str) -> Option<i64> {
    let exp = currency_exponent(currency);
    if amount.scale > exp {
        // 45.000 is fine, 45.001 is not: compare after dropping trailing zeros.
        let factor = 10i128.checked_pow(amount.scale - exp)?;
        if amount.mantissa % factor != 0 {
            return None;
        }
        return i64::try_from(amount.mantissa / factor).ok();
    }
    let factor = 10i128.checked_pow(exp - amount.scale)?;
    i64::try_from(amount.mantissa.checked_mul(factor)?).ok()
}

/// `Stripe-Signature` as Stripe computes it (HMAC-SHA256 of `"{t}.{body}"`). Written here, on
/// the sender's side, rather than borrowed from reckon's verifier: a stub that shared the
/// verifier's code would agree with any mistake in it.
fn stripe_signature(body: &[u8], secret: &str, t: i64) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}
