//! Start reckon in-process on free ports and a temporary data directory; build spans for the
//! real `opentelemetry-otlp` exporters; read verdicts over HTTP.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use reckon::app::{self, Running};
use reckon::config::Config;
use serde_json::Value;

#[path = "../../src/test_builders.rs"]
mod builders;
use builders::summary_line;
pub use builders::{draft_args, normalize_expectation, refund_args, HOUR, MIN};

pub struct Server {
    pub running: Option<Running>,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
}

pub fn repo_contracts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("contracts")
}

/// Which store the suite runs reckon on: each test binary that includes this suite says so in
/// its `BACKEND` constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    ClickHouse,
}

/// The store for a server whose state lives under `data_dir`. On ClickHouse the database is
/// named after the directory, so a restart on the same directory finds the same data and
/// parallel tests never share a database.
pub fn store_for(data_dir: &std::path::Path) -> reckon::config::StoreConfig {
    match crate::BACKEND {
        Backend::Sqlite => reckon::config::StoreConfig::Sqlite,
        Backend::ClickHouse => {
            let url = std::env::var("RECKON_TEST_CLICKHOUSE").ok().filter(|u| !u.trim().is_empty()).unwrap_or_else(|| {
                panic!(
                    "this suite runs reckon on ClickHouse: start one and name it, e.g. \
                     `export RECKON_TEST_CLICKHOUSE=$(scripts/clickhouse-test-server start)` (.ci/run does)"
                )
            });
            let tag: String = data_dir
                .parent()
                .and_then(|p| p.file_name())
                .map(|n| {
                    n.to_string_lossy()
                        .chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() {
                                c.to_ascii_lowercase()
                            } else {
                                '_'
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            reckon::config::StoreConfig::ClickHouse {
                url: url.trim_end_matches('/').to_string(),
                user: "default".into(),
                password: String::new(),
                database: format!("reckon_it_{tag}"),
            }
        }
    }
}

/// `--store` for `reckon serve` run as a process, matching [`store_for`].
pub fn store_arg(data_dir: &std::path::Path) -> String {
    match store_for(data_dir) {
        reckon::config::StoreConfig::Sqlite => "sqlite".into(),
        reckon::config::StoreConfig::ClickHouse {
            url,
            user,
            database,
            ..
        } => {
            format!(
                "clickhouse://{user}@{}/{database}",
                url.trim_start_matches("http://")
            )
        }
    }
}

pub fn test_config(data_dir: PathBuf) -> Config {
    Config {
        store: store_for(&data_dir),
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        api_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir,
        contracts_dir: repo_contracts(),
        stripe_webhook_secret: Some(STRIPE_SECRET.into()),
        max_request_bytes: 1024 * 1024,
        ..Config::default()
    }
}

pub const STRIPE_SECRET: &str = "whsec_test_reckon";

impl Server {
    pub async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir).await
    }

    pub async fn start_in(dir: tempfile::TempDir) -> Server {
        let config = test_config(dir.path().join("data"));
        Self::start_with(dir, config).await
    }

    /// With a config of the test's own (built on [`test_config`] for the same directory).
    pub async fn start_with(dir: tempfile::TempDir, config: Config) -> Server {
        let running = app::start(config).await.expect("reckon starts");
        Server {
            running: Some(running),
            dir,
            http: reqwest::Client::new(),
        }
    }

    pub fn r(&self) -> &Running {
        self.running.as_ref().unwrap()
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}{path}", self.r().api_url())
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self.http.get(self.api(path)).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// The verdict of an intent, waiting briefly for it to appear.
    pub async fn verdict(&self, intent_id: &str) -> Value {
        for _ in 0..100 {
            let (status, body) = self.get(&format!("/api/v1/intents/{intent_id}")).await;
            if status == 200 {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("intent {intent_id} never appeared");
    }

    pub async fn stop(mut self) -> tempfile::TempDir {
        self.running.take().unwrap().shutdown().await.unwrap();
        self.dir
    }
}

/// `state / decision / finding, finding` of a verdict document, findings sorted.
pub fn summary(v: &Value) -> String {
    summary_line(
        v["state"].as_str().unwrap(),
        v["decision"].as_str().unwrap(),
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap()),
    )
}

/// A tool span as the OpenTelemetry GenAI conventions shape it, plus reckon's attributes.
pub struct ToolSpan {
    pub name: String,
    pub trace_id: u128,
    pub span_id: u64,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub error: Option<String>,
}

impl ToolSpan {
    pub fn new(tool: &str, start: SystemTime, secs: f64) -> ToolSpan {
        ToolSpan {
            name: format!("execute_tool {tool}"),
            trace_id: rand_u128(),
            span_id: rand_u128() as u64 | 1,
            start,
            end: start + Duration::from_secs_f64(secs),
            attributes: vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool.to_string()),
            ],
            error: None,
        }
    }
    pub fn attr(mut self, k: &'static str, v: impl Into<opentelemetry::Value>) -> Self {
        self.attributes.push(KeyValue::new(k, v));
        self
    }
    pub fn error(mut self, error_type: &str) -> Self {
        self.error = Some(error_type.into());
        self.attributes
            .push(KeyValue::new("error.type", error_type.to_string()));
        self
    }

    /// A read-back of `intent` (`reckon.action = "read"`) that found `found`.
    pub fn read(intent: &str, start: SystemTime, found: &[&str]) -> ToolSpan {
        let ids: Vec<opentelemetry::StringValue> =
            found.iter().map(|s| s.to_string().into()).collect();
        ToolSpan::new("list_refunds", start, 0.2)
            .intent(intent)
            .attr("reckon.action", "read")
            .attr(
                "reckon.readback.object_ids",
                opentelemetry::Value::Array(opentelemetry::Array::String(ids)),
            )
    }
    pub fn intent(self, id: &str) -> Self {
        self.attr("reckon.intent.id", id.to_string())
    }
    pub fn key(self, k: &str) -> Self {
        self.attr("reckon.idempotency_key", k.to_string())
    }
    pub fn args(self, json: String) -> Self {
        self.attr("gen_ai.tool.call.arguments", json)
    }
    /// The downstream's HTTP status; a 4xx/5xx also makes the span an error span.
    pub fn http(mut self, status: u16) -> Self {
        if status >= 400 && self.error.is_none() {
            self.error = Some(format!("HTTP {status}"));
        }
        self.attr("http.response.status_code", status as i64)
    }
    pub fn timeout(self) -> Self {
        self.error("timeout")
    }
    pub fn object(self, id: &str, status: &str) -> Self {
        self.attr("reckon.downstream.object_id", id.to_string())
            .attr("reckon.downstream.status", status.to_string())
    }
    /// `reckon.outcome`: what the executor told the model.
    pub fn told(self, outcome: &str) -> Self {
        self.attr("reckon.outcome", outcome.to_string())
    }
    pub fn data(&self) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(self.trace_id),
                SpanId::from(self.span_id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: self.name.clone().into(),
            start_time: self.start,
            end_time: self.end,
            attributes: self.attributes.clone(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: match &self.error {
                Some(e) => Status::error(e.clone()),
                None => Status::Unset,
            },
            instrumentation_scope: InstrumentationScope::builder("reckon-tests").build(),
        }
    }
}

pub fn rand_u128() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    let a = h.finish() as u128;
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(a as u64);
    (a << 64) | h.finish() as u128
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:x}", rand_u128() as u64)
}

/// Export spans with the real OTLP/gRPC exporter.
pub async fn export_grpc(server: &Server, spans: &[&ToolSpan]) {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(server.r().grpc_url())
        .with_compression(opentelemetry_otlp::Compression::Gzip)
        .build()
        .unwrap();
    exporter
        .export(spans.iter().map(|s| s.data()).collect())
        .await
        .expect("gRPC export acknowledged");
}

/// Export spans with the real OTLP/HTTP (protobuf) exporter.
pub async fn export_http(server: &Server, spans: &[&ToolSpan]) {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{}/v1/traces", server.r().http_url()))
        .build()
        .unwrap();
    exporter
        .export(spans.iter().map(|s| s.data()).collect())
        .await
        .expect("HTTP export acknowledged");
}

/// Export spans with the real OTLP/gRPC exporter, returning the exporter's result.
pub async fn try_export_grpc(
    server: &Server,
    spans: &[&ToolSpan],
) -> opentelemetry_sdk::error::OTelSdkResult {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(server.r().grpc_url())
        .build()
        .unwrap();
    exporter
        .export(spans.iter().map(|s| s.data()).collect())
        .await
}

// ------------------------------------------------------------------ time

/// `secs` seconds before now.
pub fn ago(secs: f64) -> SystemTime {
    SystemTime::now() - Duration::from_secs_f64(secs)
}

/// `secs` seconds after `base`.
pub fn after(base: SystemTime, secs: f64) -> SystemTime {
    base + Duration::from_secs_f64(secs)
}

pub fn unix_secs(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
}

pub fn unix_nanos(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos()
}

/// RFC 3339 as the records API takes it.
pub fn rfc3339(t: SystemTime) -> String {
    reckon::codec::rfc3339(reckon::model::Timestamp(unix_nanos(t) as i64))
}

// ------------------------------------------------------------------ Stripe

/// A Stripe refund event as Stripe sends it (API 2024-10-28): `amount` in minor units, the intent
/// in `data.object.metadata.intent_id`, the key in `request.idempotency_key`. `created` is the
/// observation time.
pub fn stripe_event(
    event_type: &str,
    intent: &str,
    object_id: &str,
    status: &str,
    minor: i64,
    key: Option<&str>,
    created: SystemTime,
) -> String {
    let request = match key {
        Some(k) => serde_json::json!({"id": unique("req"), "idempotency_key": k}),
        None => Value::Null,
    };
    serde_json::json!({
        "id": unique("evt"),
        "object": "event",
        "api_version": "2024-10-28.acacia",
        "created": unix_secs(created),
        "data": {
            "object": {
                "id": object_id,
                "object": "refund",
                "amount": minor,
                "balance_transaction": "txn_3QK8ZbLkdIwHu7ix0iPL3hs1",
                "charge": "ch_3QK8ZbLkdIwHu7ix0Wc8HJ6R",
                "created": unix_secs(created),
                "currency": "usd",
                "metadata": {"intent_id": intent, "order_id": "1042"},
                "payment_intent": "pi_3QK8ZbLkdIwHu7ix0lU8Pm4T",
                "reason": "requested_by_customer",
                "receipt_number": null,
                "status": status,
            },
            "previous_attributes": {"status": "pending"},
        },
        "livemode": false,
        "pending_webhooks": 1,
        "request": request,
        "type": event_type,
    })
    .to_string()
}

// ------------------------------------------------------------------ HTTP helpers

/// One OTLP/JSON export of completed refunds, a new intent per span, as a JS or Python exporter
/// writes it: each with its key, a 200 and the `succeeded` refund object the API returned.
pub fn completed_refunds_json(intents: &[String]) -> Value {
    let t0 = unix_nanos(ago(2.0 * MIN));
    let spans: Vec<Value> = intents
        .iter()
        .map(|intent| {
            serde_json::json!({
                "traceId": format!("{:032x}", rand_u128()),
                "spanId": format!("{:016x}", rand_u128() as u64 | 1),
                "name": "execute_tool issue_refund",
                "startTimeUnixNano": t0.to_string(),
                "endTimeUnixNano": (t0 + 400_000_000).to_string(),
                "attributes": [
                    {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                    {"key": "gen_ai.tool.name", "value": {"stringValue": "issue_refund"}},
                    {"key": "reckon.intent.id", "value": {"stringValue": intent}},
                    {"key": "reckon.idempotency_key", "value": {"stringValue": format!("key-{intent}")}},
                    {"key": "http.response.status_code", "value": {"intValue": "200"}},
                    {"key": "reckon.downstream.object_id", "value": {"stringValue": format!("re-{intent}")}},
                    {"key": "reckon.downstream.status", "value": {"stringValue": "succeeded"}}]
            })
        })
        .collect();
    serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// Asserts a verdict's `state / decision / findings` line, with the verdict in the message.
#[track_caller]
pub fn assert_verdict(v: &Value, expected: &str) {
    assert_eq!(
        summary(v),
        normalize_expectation(expected),
        "verdict of {}:\n{:#}",
        v["intent_id"],
        v
    );
}

impl Server {
    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = self
            .http
            .post(self.api(path))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// `POST /api/v1/records` with a raw body.
    pub async fn post_records_raw(&self, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let resp = self
            .http
            .post(self.api("/api/v1/records"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// `POST /api/v1/records`, asserting every item was accepted.
    pub async fn records(&self, body: &Value) {
        let (status, reply) = self.post_json("/api/v1/records", body).await;
        assert_eq!(status, 200, "{reply}");
        let n = body.as_array().map_or(1, |a| a.len());
        assert_eq!(reply["accepted"], n, "{reply}");
        assert_eq!(reply["rejected"], serde_json::json!([]), "{reply}");
    }

    /// `POST /api/v1/webhooks/stripe` with the given `Stripe-Signature` header (none if `None`).
    pub async fn stripe_raw(&self, body: &str, signature: Option<&str>) -> (u16, Value) {
        let mut req = self
            .http
            .post(self.api("/api/v1/webhooks/stripe"))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(sig) = signature {
            req = req.header("stripe-signature", sig);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// A Stripe webhook signed now with the configured secret, asserting it was recorded.
    pub async fn stripe(&self, body: &str) {
        let sig = reckon::ingest::stripe::sign(
            body.as_bytes(),
            STRIPE_SECRET,
            unix_secs(SystemTime::now()),
        );
        let (status, reply) = self.stripe_raw(body, Some(&sig)).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["recorded"], true, "{reply}");
    }

    /// The open (or claimed) escalation of an intent, from `GET /api/v1/escalations?status=`.
    pub async fn escalation_of(&self, intent_id: &str, status: &str) -> Option<Value> {
        let (code, body) = self
            .get(&format!("/api/v1/escalations?status={status}&limit=1000"))
            .await;
        assert_eq!(code, 200, "{body}");
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["intent_id"] == intent_id)
            .cloned()
    }

    /// Polls `GET path` until `done` holds for the body (the store is written behind the engine).
    pub async fn poll(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        for _ in 0..150 {
            let (status, body) = self.get(path).await;
            if status == 200 && done(&body) {
                return body;
            }
            last = body;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("GET {path} never satisfied the condition; last body: {last:#}");
    }

    /// POST an OTLP/HTTP body to the OTLP HTTP listener.
    pub async fn post_otlp(
        &self,
        path: &str,
        content_type: &str,
        gzipped: bool,
        body: Vec<u8>,
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(format!("{}{path}", self.r().http_url()))
            .header("content-type", content_type);
        if gzipped {
            req = req.header("content-encoding", "gzip");
        }
        req.body(body).send().await.unwrap()
    }
}

// ------------------------------------------------------------------ the real binary

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A loopback address nobody listens on now, for a listener a test starts much later: a port
/// below the kernel's ephemeral range (32768-60999 on Linux). One that bind(0) hands out is in
/// that range, and any outgoing connection may be given it in between.
pub fn addr_for_later() -> SocketAddr {
    let seed = u64::from(std::process::id())
        ^ u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos(),
        );
    (0..12_000u64)
        .map(|i| 20_000 + ((seed + i * 7_919) % 12_000) as u16)
        .find_map(|port| TcpListener::bind(("127.0.0.1", port)).ok())
        .expect("a free loopback port in 20000-32000")
        .local_addr()
        .unwrap()
}

/// How a spawned `reckon serve` came up.
enum Ready {
    Yes,
    /// It exited because a port it was given was taken meanwhile.
    PortTaken,
}

/// `reckon serve` as a child process on free ports.
pub struct Reckon {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub api: SocketAddr,
}

impl Reckon {
    /// With the repository's contracts.
    pub async fn spawn(data_dir: &Path, log: &Path) -> Reckon {
        Self::spawn_with_contracts(data_dir, log, &repo_contracts()).await
    }

    /// With the contracts in `contracts` (a directory the test may edit and reload).
    ///
    /// A port found free can be taken before the child binds it (any test's outgoing
    /// connection may get it as its local port): a child that exits for that is spawned
    /// again on other ports, a few times.
    pub async fn spawn_with_contracts(data_dir: &Path, log: &Path, contracts: &Path) -> Reckon {
        Self::spawn_with(data_dir, log, contracts, &[]).await
    }

    /// With the contracts in `contracts` and these environment variables (settings).
    pub async fn spawn_with(
        data_dir: &Path,
        log: &Path,
        contracts: &Path,
        env: &[(&str, &str)],
    ) -> Reckon {
        for _ in 0..4 {
            let mut r = Self::spawn_once(data_dir, log, contracts, env);
            match r.wait_ready(log).await {
                Ready::Yes => return r,
                Ready::PortTaken => continue,
            }
        }
        panic!(
            "reckon serve found its ports taken four times; stderr:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }

    fn spawn_once(data_dir: &Path, log: &Path, contracts: &Path, env: &[(&str, &str)]) -> Reckon {
        let (grpc, http, api) = (free_addr(), free_addr(), free_addr());
        let child = Command::new(env!("CARGO_BIN_EXE_reckon"))
            .envs(env.iter().copied())
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--store")
            .arg(store_arg(data_dir))
            .arg("--contracts")
            .arg(contracts)
            .arg("--grpc-addr")
            .arg(grpc.to_string())
            .arg("--http-addr")
            .arg(http.to_string())
            .arg("--api-addr")
            .arg(api.to_string())
            .env_remove("RECKON_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("spawn reckon");
        Reckon {
            child,
            grpc,
            http,
            api,
        }
    }

    async fn wait_ready(&mut self, log: &Path) -> Ready {
        let client = reqwest::Client::new();
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(20) {
            if let Some(status) = self.child.try_wait().unwrap() {
                let stderr = std::fs::read_to_string(log).unwrap_or_default();
                if stderr.contains("Address already in use") {
                    return Ready::PortTaken;
                }
                panic!("reckon serve exited ({status}) before it was ready; stderr:\n{stderr}");
            }
            if let Ok(resp) = client
                .get(format!("http://{}/readyz", self.api))
                .send()
                .await
            {
                if resp.status() == 200 {
                    return Ready::Yes;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let _ = self.child.kill();
        panic!(
            "reckon serve not ready after 20 s; stderr:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }

    /// SIGKILL: no shutdown hook, no flush, no drain.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub async fn verdict(&self, intent: &str) -> Value {
        let client = reqwest::Client::new();
        for _ in 0..100 {
            let resp = client
                .get(format!("http://{}/api/v1/intents/{intent}", self.api))
                .send()
                .await
                .unwrap();
            if resp.status() == 200 {
                return resp.json().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("intent {intent} not found");
    }
}

impl Reckon {
    /// Send `signal` (a name `kill -s` takes: HUP, TERM, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, "--"])
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {signal} failed");
    }
}

impl Drop for Reckon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn export_to(grpc: SocketAddr, spans: &[&ToolSpan]) {
    use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
    use opentelemetry_sdk::trace::SpanExporter as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(format!("http://{grpc}"))
        .with_compression(opentelemetry_otlp::Compression::Gzip)
        .build()
        .unwrap();
    exporter
        .export(spans.iter().map(|s| s.data()).collect())
        .await
        .expect("gRPC export acknowledged");
}

pub async fn export_http_to(http: SocketAddr, spans: &[&ToolSpan]) {
    use opentelemetry_otlp::WithExportConfig;
    use opentelemetry_sdk::trace::SpanExporter as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("http://{http}/v1/traces"))
        .build()
        .unwrap();
    exporter
        .export(spans.iter().map(|s| s.data()).collect())
        .await
        .expect("HTTP export acknowledged");
}

/// `GET path` on a running binary's API.
pub async fn api_get(r: &Reckon, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("http://{}{path}", r.api))
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

impl Server {
    /// One series' value from `/metrics` (`name` with its labels as rendered, e.g.
    /// `reckon_escalations{status="open"}`); `None` when absent.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self
            .http
            .get(self.api("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// The sum of every sample of `name` (all its label sets) on `/metrics`; 0 when absent.
    pub async fn metric_sum(&self, name: &str) -> f64 {
        let text = match self.http.get(self.api("/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}
