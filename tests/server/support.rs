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

pub struct Server {
    pub running: Option<Running>,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
}

pub fn repo_contracts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("contracts")
}

pub fn test_config(data_dir: PathBuf) -> Config {
    Config {
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
        let running = app::start(test_config(dir.path().join("data")))
            .await
            .expect("reckon starts");
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
    let mut kinds: Vec<String> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    kinds.dedup();
    let findings = if kinds.is_empty() {
        "-".into()
    } else {
        kinds.join(", ")
    };
    format!(
        "{} / {} / {}",
        v["state"].as_str().unwrap(),
        v["decision"].as_str().unwrap(),
        findings
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
