//! The executor: what sits between an agent's tool call and the downstream, emitting one
//! OpenTelemetry tool span per send and per read-back, through the real OTLP exporter.
//!
//! Two policies share one transport ([`Executor::send`], [`Executor::read_back`]):
//! - careful ([`Executor::issue`], [`Executor::reconcile`]): the first note's executor sketch. The
//!   key is minted when the intent is recorded, before the first send, and reused on every
//!   attempt; the outcome is classified from evidence (a timeout is unknown, never failed); an
//!   unknown intent is retried only with its key and only inside the safe window, and read back
//!   otherwise.
//! - careless ([`Careless`]): what model-driven retries do when the model reads "error" and calls
//!   the tool again: a new key after a timeout, a resend after an empty read-back or past the
//!   key's retention, a changed amount under the same key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::{Span, SpanKind, Status, Tracer, TracerProvider as _};
use opentelemetry::{Array, KeyValue, StringValue, Value as OtelValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use serde_json::{json, Value};

use super::proxy::{Fault, FAULT_HEADER};
use super::stub::{to_minor, Knobs};
use crate::model::{Decimal, ReportedOutcome};

/// The first note's SAFE_RETRY_WINDOW for the demo contracts: key_retention 8 s - margin 2 s.
pub const SAFE_RETRY_WINDOW: Duration = Duration::from_secs(6);
/// The caller's timeout on one send (the note's 30 s, scaled).
pub const SEND_TIMEOUT: Duration = Duration::from_millis(1000);

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("cannot build the OTLP span exporter for {endpoint}: {message}")]
    Exporter { endpoint: String, message: String },
    #[error("flushing spans to reckon failed: {0}")]
    Flush(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// The demo's tools, each a downstream endpoint under one contract of `contracts/demo.toml`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// Stripe-v1-like refunds (replay).
    Refund,
    /// Stripe-v2-like refunds (converge).
    RefundV2,
    /// The second note's supplier-bill drafts.
    Draft,
    /// An email provider that accepts no key.
    Email,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Refund => "demo_issue_refund",
            Tool::RefundV2 => "demo_issue_refund_v2",
            Tool::Draft => "demo_create_bill_draft",
            Tool::Email => "demo_send_email",
        }
    }
    pub fn read_name(self) -> &'static str {
        match self {
            Tool::Refund | Tool::RefundV2 => "demo_list_refunds",
            Tool::Draft => "demo_list_bill_drafts",
            Tool::Email => "demo_list_emails",
        }
    }
    fn path(self) -> &'static str {
        match self {
            Tool::Refund => "/v1/refunds",
            Tool::RefundV2 => "/v2/refunds",
            Tool::Draft => "/drafts",
            Tool::Email => "/v1/emails",
        }
    }
    /// Whether the downstream takes an idempotency key at all.
    pub fn takes_key(self) -> bool {
        self != Tool::Email
    }
}

/// What the executor last concluded about an intent (its own durable state in a real system).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalState {
    New,
    Completed,
    FailedAfterExecution,
    FailedBeforeExecution,
    Pending,
    Unknown,
    Escalated,
}

/// One logical action. The key is minted here, once, before anything is sent.
#[derive(Clone, Debug)]
pub struct Intent {
    pub id: String,
    pub tool: Tool,
    pub key: String,
    /// The tool call's arguments, as the model gave them.
    pub args: Value,
    pub first_attempt: Option<Instant>,
    pub state: LocalState,
}

impl Intent {
    pub fn new(id: impl Into<String>, tool: Tool, args: Value) -> Intent {
        Intent {
            id: id.into(),
            tool,
            key: mint_key(),
            args,
            first_attempt: None,
            state: LocalState::New,
        }
    }

    /// Folds one attempt's evidence into the local state (the sketch's `record`).
    pub fn record(&mut self, a: &Attempted) {
        self.first_attempt.get_or_insert(a.started);
        self.state = match a.outcome {
            ReportedOutcome::Succeeded => LocalState::Completed,
            ReportedOutcome::Failed => LocalState::FailedAfterExecution,
            ReportedOutcome::Rejected if self.state == LocalState::New => {
                LocalState::FailedBeforeExecution
            }
            // A rejection after an earlier send (a key mismatch) says nothing of the first send.
            ReportedOutcome::Rejected => LocalState::Escalated,
            ReportedOutcome::Pending => LocalState::Pending,
            ReportedOutcome::Unknown => LocalState::Unknown,
        };
    }
}

/// A fresh idempotency key, unique across runs against one server.
pub fn mint_key() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(1);
    format!(
        "idk_{}_{:04}",
        super::run_tag(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// How one send is made: the demo's switches for the proxy and the stub.
#[derive(Clone, Debug)]
pub struct SendOpts {
    pub fault: Fault,
    pub knobs: Knobs,
    pub timeout: Duration,
    /// Send with this key instead of the intent's (the careless new-key retry).
    pub key: Option<String>,
    /// Send these arguments instead of the intent's (the careless changed amount).
    pub args: Option<Value>,
    /// Tell the model this instead of the classified outcome (a careless report).
    pub told: Option<ReportedOutcome>,
    /// Send the request body as built for another intent (a careless executor's cached request).
    pub body_of: Option<Intent>,
}

impl Default for SendOpts {
    fn default() -> Self {
        SendOpts {
            fault: Fault::None,
            knobs: Knobs::default(),
            timeout: SEND_TIMEOUT,
            key: None,
            args: None,
            told: None,
            body_of: None,
        }
    }
}

/// The evidence one send produced, and what the executor made of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempted {
    pub started: Instant,
    pub key: Option<String>,
    pub http_status: Option<u16>,
    pub error_type: Option<String>,
    pub object_id: Option<String>,
    pub object_status: Option<String>,
    /// What the executor told the model (`reckon.outcome`).
    pub outcome: ReportedOutcome,
}

/// The OTLP pipeline: a batch exporter over gRPC to reckon.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Telemetry {
    /// `endpoint` is reckon's OTLP gRPC address (`http://127.0.0.1:4317`). Must run inside the
    /// Tokio runtime: the gRPC channel lives on it.
    pub fn new(endpoint: &str) -> Result<Telemetry, ExecutorError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ExecutorError::Exporter {
                endpoint: endpoint.to_string(),
                message: e.to_string(),
            })?;
        // Short delay: spans should reach reckon while the demo polls, not five seconds later.
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(Duration::from_millis(100))
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                Resource::builder()
                    .with_service_name("reckon-demo-executor")
                    .build(),
            )
            .build();
        let tracer = provider.tracer("reckon-demo");
        Ok(Telemetry { provider, tracer })
    }

    /// Waits until every ended span has been exported (and so acknowledged as durable).
    pub async fn flush(&self) -> Result<(), ExecutorError> {
        let provider = self.provider.clone();
        // force_flush blocks on the exporter thread; keep it off the async workers.
        tokio::task::spawn_blocking(move || provider.force_flush())
            .await
            .map_err(|e| ExecutorError::Flush(e.to_string()))?
            .map_err(|e| ExecutorError::Flush(e.to_string()))
    }

    pub async fn shutdown(self) -> Result<(), ExecutorError> {
        let provider = self.provider;
        tokio::task::spawn_blocking(move || provider.shutdown())
            .await
            .map_err(|e| ExecutorError::Flush(e.to_string()))?
            .map_err(|e| ExecutorError::Flush(e.to_string()))
    }
}

/// Sends tool calls through the fault proxy and traces each one.
pub struct Executor {
    http: reqwest::Client,
    /// The downstream as the executor reaches it: the fault proxy's URL.
    base: String,
    telemetry: Option<std::sync::Arc<Telemetry>>,
}

impl Executor {
    /// `telemetry` `None` sends without tracing (the transport tests).
    pub fn new(
        base: impl Into<String>,
        telemetry: Option<std::sync::Arc<Telemetry>>,
    ) -> Result<Executor, ExecutorError> {
        let http = reqwest::Client::builder()
            // Every exchange through the proxy is one connection: no pooled socket may carry a
            // fault of one request into the next.
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| ExecutorError::Client(e.to_string()))?;
        Ok(Executor {
            http,
            base: base.into(),
            telemetry,
        })
    }

    /// The request body the downstream wants for these tool arguments.
    fn body(intent: &Intent, args: &Value) -> Value {
        let s = |p: &str| args.pointer(p).map(text).unwrap_or_default();
        match intent.tool {
            Tool::Refund | Tool::RefundV2 => {
                let currency = s("/currency");
                // An amount that does not convert is sent as given: the downstream's validation
                // decides, exactly as it would for a real malformed call.
                let amount = Decimal::parse(&s("/amount"))
                    .and_then(|d| to_minor(d, &currency))
                    .map(Value::from)
                    .unwrap_or_else(|| args.pointer("/amount").cloned().unwrap_or(Value::Null));
                // The demo contracts' record kinds are not Stripe's `refund` (a demo contract must
                // never claim a real refund), so the webhook names its kind in metadata.
                let kind = if intent.tool == Tool::Refund {
                    "demo_refund"
                } else {
                    "demo_refund_v2"
                };
                json!({
                    "amount": amount,
                    "currency": currency,
                    "metadata": {"intent_id": intent.id, "order_id": s("/order_id"), "reckon_kind": kind},
                })
            }
            Tool::Draft => json!({
                "invoice": s("/invoice"),
                "supplier": s("/supplier"),
                "amount": s("/amount"),
                "currency": s("/currency"),
                "metadata": {"intent_id": intent.id},
            }),
            Tool::Email => json!({
                "to": s("/to"),
                "subject": s("/subject"),
                "body": s("/body"),
                "metadata": {"intent_id": intent.id},
            }),
        }
    }

    /// One send, traced. Never fails: every failure is evidence, recorded on the span.
    pub async fn send(&self, intent: &Intent, opts: SendOpts) -> Attempted {
        let args = opts.args.clone().unwrap_or_else(|| intent.args.clone());
        let key = intent
            .tool
            .takes_key()
            .then(|| opts.key.clone().unwrap_or_else(|| intent.key.clone()));
        let start_wall = SystemTime::now();
        let started = Instant::now();
        let mut req = self
            .http
            .post(format!("{}{}", self.base, intent.tool.path()))
            .timeout(opts.timeout)
            .header(FAULT_HEADER, opts.fault.header_value())
            .json(&Self::body(opts.body_of.as_ref().unwrap_or(intent), &args));
        if let Some(k) = &key {
            req = req.header("idempotency-key", k);
        }
        for (name, value) in opts.knobs.headers() {
            req = req.header(name, value);
        }
        let mut a = Attempted {
            started,
            key: key.clone(),
            http_status: None,
            error_type: None,
            object_id: None,
            object_status: None,
            outcome: ReportedOutcome::Unknown,
        };
        let result = match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                resp.json::<Value>()
                    .await
                    .map(|body| (status, body))
                    .map_err(|e| (Some(status), e))
            }
            Err(e) => Err((None, e)),
        };
        match result {
            Ok((status, body)) => {
                a.http_status = Some(status);
                if status < 300 {
                    a.object_id = body.get("id").and_then(Value::as_str).map(str::to_string);
                    a.object_status = body
                        .get("status")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                } else {
                    let err = body.get("error");
                    let field = |f: &str| err.and_then(|e| e.get(f)).and_then(Value::as_str);
                    // The specific code when there is one (idempotency_key_in_use), else the
                    // error family (idempotency_error), else the status as semconv does.
                    a.error_type = Some(
                        field("code")
                            .or(field("type"))
                            .map(str::to_string)
                            .unwrap_or_else(|| status.to_string()),
                    );
                }
            }
            Err((status, e)) => {
                a.http_status = status;
                a.error_type = Some(if e.is_timeout() {
                    "timeout".to_string()
                } else if e.is_connect() {
                    "connection_refused".to_string()
                } else {
                    "connection_reset".to_string()
                });
            }
        }
        a.outcome = opts.told.unwrap_or_else(|| classify(&a));
        let end_wall = SystemTime::now();
        self.trace_attempt(intent, &args, &a, start_wall, end_wall);
        a
    }

    fn trace_attempt(
        &self,
        intent: &Intent,
        args: &Value,
        a: &Attempted,
        start: SystemTime,
        end: SystemTime,
    ) {
        let Some(t) = &self.telemetry else { return };
        let tool = intent.tool.name();
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool),
            KeyValue::new("gen_ai.tool.call.arguments", args.to_string()),
            KeyValue::new("reckon.intent.id", intent.id.clone()),
            KeyValue::new("reckon.action", "write"),
            KeyValue::new("reckon.outcome", a.outcome.as_str()),
        ];
        if let Some(k) = &a.key {
            attrs.push(KeyValue::new("reckon.idempotency_key", k.clone()));
        }
        if let Some(id) = &a.object_id {
            attrs.push(KeyValue::new("reckon.downstream.object_id", id.clone()));
        }
        if let Some(s) = &a.object_status {
            attrs.push(KeyValue::new("reckon.downstream.status", s.clone()));
        }
        if let Some(s) = a.http_status {
            attrs.push(KeyValue::new("http.response.status_code", i64::from(s)));
        }
        if let Some(e) = &a.error_type {
            attrs.push(KeyValue::new("error.type", e.clone()));
        }
        let mut span = t
            .tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes(attrs)
            .start(&t.tracer);
        if let Some(e) = &a.error_type {
            span.set_status(Status::error(e.clone()));
        }
        span.end_with_timestamp(end);
    }

    /// Reads the downstream's objects for the intent, traced as a read-back. `told` is what the
    /// executor concluded from it, if it said anything (a careless `failed`).
    pub async fn read_back(&self, intent: &Intent, told: Option<ReportedOutcome>) -> Vec<String> {
        // Intent ids are the demo's own ([a-z0-9-]): nothing to escape.
        self.read(intent, told, ("intent_id", intent.id.clone()))
            .await
    }

    /// A read of everything on the intent's order ("refunds for order 1042"), as a careless
    /// executor runs it: it lists other intents' refunds too.
    pub async fn read_back_order(
        &self,
        intent: &Intent,
        told: Option<ReportedOutcome>,
    ) -> Vec<String> {
        let order = intent
            .args
            .pointer("/order_id")
            .map(text)
            .unwrap_or_default();
        self.read(intent, told, ("order_id", order)).await
    }

    async fn read(
        &self,
        intent: &Intent,
        told: Option<ReportedOutcome>,
        (field, value): (&str, String),
    ) -> Vec<String> {
        let start = SystemTime::now();
        let url = format!("{}{}?{field}={value}", self.base, intent.tool.path());
        let found: Vec<String> = match self.http.get(url).timeout(SEND_TIMEOUT).send().await {
            Ok(resp) => resp
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v.get("data").and_then(Value::as_array).cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|o| o.get("id").and_then(Value::as_str).map(str::to_string))
                .collect(),
            // A failed read found nothing it can vouch for; the span says so with an error.
            Err(_) => Vec::new(),
        };
        let end = SystemTime::now();
        if let Some(t) = &self.telemetry {
            let tool = intent.tool.read_name();
            let ids: Vec<StringValue> = found.iter().cloned().map(StringValue::from).collect();
            let mut attrs = vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool),
                KeyValue::new(
                    "gen_ai.tool.call.arguments",
                    json!({ field: value }).to_string(),
                ),
                KeyValue::new("reckon.intent.id", intent.id.clone()),
                KeyValue::new("reckon.action", "read"),
                KeyValue::new(
                    "reckon.readback.object_ids",
                    OtelValue::Array(Array::String(ids)),
                ),
            ];
            if let Some(o) = told {
                attrs.push(KeyValue::new("reckon.outcome", o.as_str()));
            }
            let mut span = t
                .tracer
                .span_builder(format!("execute_tool {tool}"))
                .with_kind(SpanKind::Internal)
                .with_start_time(start)
                .with_attributes(attrs)
                .start(&t.tracer);
            span.end_with_timestamp(end);
        }
        found
    }

    /// The careful executor's tool call (the note's sketch): refuse while the intent is
    /// unknown, pending, escalated or done; refuse past the safe window; otherwise send with the
    /// intent's own key and record what the evidence shows. Returns the text the model reads.
    pub async fn issue(&self, intent: &mut Intent, opts: SendOpts) -> String {
        use LocalState::*;
        if matches!(intent.state, Unknown | Pending | Escalated | Completed) {
            return format!("{} is {:?}. Not sent again.", intent.id, intent.state);
        }
        if intent
            .first_attempt
            .is_some_and(|t| t.elapsed() > SAFE_RETRY_WINDOW)
        {
            intent.state = Escalated;
            return format!("{}: past the key's retry window; escalated.", intent.id);
        }
        let opts = SendOpts {
            key: None,
            args: None,
            told: None,
            body_of: None,
            ..opts
        };
        let a = self.send(intent, opts).await;
        intent.record(&a);
        match a.outcome {
            ReportedOutcome::Unknown => {
                format!("{} outcome unknown. Reconciliation is pending.", intent.id)
            }
            o => format!("{}: {}", intent.id, o.as_str()),
        }
    }

    /// The careful reconciler: an unknown intent is retried with its own key inside the safe
    /// window and read back after it (then escalated if the read cannot settle it); a pending
    /// one is only read. Never a new key, never a changed parameter.
    pub async fn reconcile(&self, intent: &mut Intent, opts: SendOpts) -> String {
        match intent.state {
            LocalState::Unknown
                if intent.tool.takes_key()
                    && intent
                        .first_attempt
                        .is_some_and(|t| t.elapsed() < SAFE_RETRY_WINDOW) =>
            {
                let a = self
                    .send(
                        intent,
                        SendOpts {
                            key: None,
                            args: None,
                            told: None,
                            ..opts
                        },
                    )
                    .await;
                intent.record(&a);
                format!("{} retried with its key: {}", intent.id, a.outcome.as_str())
            }
            LocalState::Unknown | LocalState::Pending => {
                let found = self.read_back(intent, None).await;
                if found.is_empty() && intent.state == LocalState::Unknown {
                    intent.state = LocalState::Escalated;
                    format!("{}: nothing found and no safe retry; escalated.", intent.id)
                } else {
                    format!("{}: found {}", intent.id, found.join(", "))
                }
            }
            s => format!("{} is {s:?}; nothing to reconcile.", intent.id),
        }
    }
}

/// The executor's classification from evidence (the sketch's except-branches and status checks).
pub fn classify(a: &Attempted) -> ReportedOutcome {
    match a.http_status {
        // Another request with this key is executing: not a failure, wait for it.
        Some(409) => ReportedOutcome::Pending,
        Some(s) if (400..500).contains(&s) => ReportedOutcome::Rejected,
        Some(s) if (200..300).contains(&s) => match a.object_status.as_deref() {
            Some("succeeded" | "created" | "sent") => ReportedOutcome::Succeeded,
            Some("failed" | "canceled" | "deleted" | "bounced") => ReportedOutcome::Failed,
            Some(_) => ReportedOutcome::Pending,
            None if a.object_id.is_none() => ReportedOutcome::Unknown,
            None => ReportedOutcome::Pending,
        },
        // 5xx, a timeout, a reset: nothing shows what happened.
        _ => ReportedOutcome::Unknown,
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The model-driven retries the notes warn about. Each is one more send the careful executor
/// would have refused.
pub struct Careless<'a>(pub &'a Executor);

impl Careless<'_> {
    /// "The tool failed, call it again": a fresh key, so the downstream sees a new request.
    pub async fn retry_with_new_key(&self, intent: &mut Intent, opts: SendOpts) -> Attempted {
        let key = mint_key();
        let a = self
            .0
            .send(
                intent,
                SendOpts {
                    key: Some(key),
                    ..opts
                },
            )
            .await;
        intent.record(&a);
        a
    }

    /// The same call again, whatever is known: after an empty read-back, while pending, after a
    /// terminal state, past the key's retention.
    pub async fn resend(&self, intent: &mut Intent, opts: SendOpts) -> Attempted {
        let a = self.0.send(intent, opts).await;
        intent.record(&a);
        a
    }

    /// A second intent sent under another intent's key (a key minted per order, or cached
    /// across calls).
    pub async fn send_with_key_of(
        &self,
        intent: &mut Intent,
        key: String,
        opts: SendOpts,
    ) -> Attempted {
        let a = self
            .0
            .send(
                intent,
                SendOpts {
                    key: Some(key),
                    ..opts
                },
            )
            .await;
        intent.record(&a);
        a
    }

    /// The model re-issues the call with one argument changed, under the same key.
    pub async fn resend_changed(
        &self,
        intent: &mut Intent,
        field: &str,
        value: &str,
        opts: SendOpts,
    ) -> Attempted {
        let mut args = intent.args.clone();
        if let Some(obj) = args.as_object_mut() {
            obj.insert(field.to_string(), Value::String(value.to_string()));
        }
        let a = self
            .0
            .send(
                intent,
                SendOpts {
                    args: Some(args),
                    ..opts
                },
            )
            .await;
        intent.record(&a);
        a
    }
}
