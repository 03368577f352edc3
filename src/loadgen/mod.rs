//! `reckon loadgen`: real OTLP over gRPC or HTTP, and records over the API, against any running
//! reckon. It measures what an operator sees from outside: acknowledged spans per second,
//! refusals, verdict latency (an export sent to its verdict visible on the API) and the server's
//! resident memory (from its `/metrics`).
//!
//! With `--compare` it runs phases back to back and reports each as a ratio against the first
//! (non-tool spans over HTTP: the drop path), so figures from a shared, noisy machine still say
//! something: the durable, audited path against the drop path, gRPC against HTTP.
//!
//! Spans are built directly as OTLP protobuf messages: an SDK in the loop would measure the SDK.

mod mix;
mod report;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;

pub use mix::{Kind, Mix};
pub use report::{PhaseResult, Report};

/// OTLP transport for spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Http,
    Grpc,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Grpc => "grpc",
        }
    }
}

/// One run of the generator: a transport and a mix for a duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    pub name: String,
    pub transport: Transport,
    pub mix: Mix,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadgenArgs {
    /// reckon's API base URL (records, verdicts, `/metrics`).
    pub api: String,
    /// OTLP/HTTP base URL (`/v1/traces` is appended).
    pub otlp_http: String,
    /// OTLP/gRPC endpoint.
    pub otlp_grpc: String,
    pub phases: Vec<Phase>,
    /// Spans per export.
    pub batch: usize,
    /// Exports in flight at once.
    pub concurrency: usize,
    pub duration: Duration,
    /// One tool intent in this many is followed to its verdict for the latency figures.
    pub sample_every: u64,
    /// Print JSON instead of the table.
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("cannot reach {what} at {url}: {error}")]
    Unreachable {
        what: &'static str,
        url: String,
        error: String,
    },
}

/// Counters shared by a phase's workers.
#[derive(Default)]
struct Tally {
    spans_sent: AtomicU64,
    spans_acked: AtomicU64,
    spans_rejected: AtomicU64,
    records_acked: AtomicU64,
    refusals: AtomicU64,
    errors: AtomicU64,
    /// What the first error was (a count alone tells nobody what to fix).
    first_error: Mutex<Option<String>>,
}

impl Tally {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(what);
    }
}

/// Intents whose spans left them open, waiting for the record that settles them.
type OpenIntents = Mutex<VecDeque<String>>;

/// A tool intent followed to its verdict.
struct Sample {
    intent_id: String,
    sent: Instant,
    state: &'static str,
}

pub async fn run(args: LoadgenArgs) -> Result<Report, LoadgenError> {
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(args.concurrency.max(1) * 2)
        .build()
        .map_err(|e| LoadgenError::Unreachable {
            what: "an HTTP client",
            url: String::new(),
            error: e.to_string(),
        })?;
    let rss_at_start = server_rss(&http, &args.api).await?;
    let run_tag = format!(
        "lg{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    );
    let mut phases = Vec::new();
    for (n, phase) in args.phases.iter().enumerate() {
        let result = run_phase(&args, &http, phase, &format!("{run_tag}-{n}")).await?;
        phases.push(result);
    }
    // A server that died during the run (a crash test kills it on purpose) still gets its report.
    let rss_at_end = server_rss(&http, &args.api).await.ok().flatten();
    Ok(Report {
        batch: args.batch,
        concurrency: args.concurrency,
        duration: args.duration,
        rss_at_start,
        rss_at_end,
        phases,
    })
}

async fn run_phase(
    args: &LoadgenArgs,
    http: &reqwest::Client,
    phase: &Phase,
    tag: &str,
) -> Result<PhaseResult, LoadgenError> {
    let tally = Arc::new(Tally::default());
    let open: Arc<OpenIntents> = Arc::new(Mutex::new(VecDeque::new()));
    let seq = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (samples_tx, samples_rx) = tokio::sync::mpsc::channel::<Sample>(64);

    let grpc = match phase.transport {
        Transport::Grpc => {
            let unreachable = |e: &dyn std::fmt::Display| LoadgenError::Unreachable {
                what: "OTLP gRPC",
                url: args.otlp_grpc.clone(),
                error: e.to_string(),
            };
            let channel = tonic::transport::Endpoint::from_shared(args.otlp_grpc.clone())
                .map_err(|e| unreachable(&e))?
                .connect()
                .await
                .map_err(|e| unreachable(&e))?;
            Some(tonic::client::Grpc::new(channel))
        }
        Transport::Http => None,
    };

    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency.max(1) {
        let w = Worker {
            http: http.clone(),
            grpc: grpc.clone(),
            traces_url: format!("{}/v1/traces", args.otlp_http),
            records_url: format!("{}/api/v1/records", args.api),
            mix: phase.mix.clone(),
            batch: args.batch.max(1),
            tag: tag.to_string(),
            seq: seq.clone(),
            tally: tally.clone(),
            open: open.clone(),
            stop: stop.clone(),
            samples: samples_tx.clone(),
            sample_every: args.sample_every.max(1),
        };
        workers.spawn(w.run());
    }
    drop(samples_tx);
    let sampler = tokio::spawn(follow_samples(
        http.clone(),
        args.api.clone(),
        samples_rx,
        stop.clone(),
    ));
    tokio::time::sleep(args.duration).await;
    stop.store(true, Relaxed);
    while workers.join_next().await.is_some() {}
    let elapsed = started.elapsed();
    let latencies = sampler.await.unwrap_or_default();
    let rss = server_rss(http, &args.api).await.ok().flatten();
    Ok(PhaseResult::new(phase, &tally, elapsed, latencies, rss))
}

struct Worker {
    http: reqwest::Client,
    grpc: Option<tonic::client::Grpc<tonic::transport::Channel>>,
    traces_url: String,
    records_url: String,
    mix: Mix,
    batch: usize,
    tag: String,
    seq: Arc<AtomicU64>,
    tally: Arc<Tally>,
    open: Arc<OpenIntents>,
    stop: Arc<AtomicBool>,
    samples: tokio::sync::mpsc::Sender<Sample>,
    sample_every: u64,
}

/// Pause after a refusal, as an exporter honouring the retry hint would (shortened: the point is
/// to keep the server at its limit, not to idle).
const REFUSAL_PAUSE: Duration = Duration::from_millis(20);

impl Worker {
    async fn run(mut self) {
        while !self.stop.load(Relaxed) {
            let plan = self.mix.plan(self.batch);
            let first = self.seq.fetch_add(self.batch as u64, Relaxed);
            let (request, followed, opened) = mix::build(&self.tag, first, &plan);
            let records = if plan.records > 0 {
                let ids: Vec<String> = {
                    let mut q = self.open.lock().unwrap_or_else(|e| e.into_inner());
                    let n = plan.records.min(q.len());
                    q.drain(..n).collect()
                };
                mix::records_ndjson(&ids)
            } else {
                None
            };
            let n = mix::span_count(&request);
            let sent_at = Instant::now();
            let ok = if n > 0 {
                self.export(request, n).await
            } else {
                true
            };
            if ok {
                if let Some(s) = followed.filter(|_| first % self.sample_every < self.batch as u64)
                {
                    let _ = self.samples.try_send(Sample {
                        intent_id: s.0,
                        sent: sent_at,
                        state: s.1,
                    });
                }
                if !opened.is_empty() {
                    let mut q = self.open.lock().unwrap_or_else(|e| e.into_inner());
                    q.extend(opened);
                    // Bounded: an open intent nobody settles stays open on the server anyway.
                    while q.len() > 100_000 {
                        q.pop_front();
                    }
                }
            }
            if let Some((body, count)) = records {
                self.post_records(body, count).await;
            }
        }
    }

    /// Send one export until it is acknowledged or the phase ends; true when acknowledged.
    async fn export(&mut self, request: ExportTraceServiceRequest, n: u64) -> bool {
        self.tally.spans_sent.fetch_add(n, Relaxed);
        // Encoded once, sent as is over either transport (and again on a retry).
        let body = bytes::Bytes::from(request.encode_to_vec());
        drop(request);
        loop {
            let answer = match &mut self.grpc {
                Some(client) => match export_grpc(client, body.clone()).await {
                    Ok(resp) => Answer::Ok(resp),
                    Err(s)
                        if matches!(
                            s.code(),
                            tonic::Code::ResourceExhausted | tonic::Code::Unavailable
                        ) =>
                    {
                        Answer::Refused
                    }
                    Err(s) => Answer::Failed(format!("gRPC {:?}: {}", s.code(), s.message())),
                },
                None => self.export_http(body.clone()).await,
            };
            match answer {
                Answer::Ok(resp) => {
                    let rejected = resp
                        .partial_success
                        .map_or(0, |p| u64::try_from(p.rejected_spans).unwrap_or(0));
                    self.tally.spans_rejected.fetch_add(rejected, Relaxed);
                    self.tally
                        .spans_acked
                        .fetch_add(n.saturating_sub(rejected), Relaxed);
                    return true;
                }
                Answer::Refused => {
                    self.tally.refusals.fetch_add(1, Relaxed);
                    if self.stop.load(Relaxed) {
                        return false;
                    }
                    tokio::time::sleep(REFUSAL_PAUSE).await;
                }
                Answer::Failed(what) => {
                    self.tally.error(what);
                    // Not a busy loop against a server that is gone.
                    tokio::time::sleep(REFUSAL_PAUSE).await;
                    return false;
                }
            }
        }
    }

    async fn export_http(&self, body: bytes::Bytes) -> Answer {
        let resp = self
            .http
            .post(&self.traces_url)
            .header("content-type", "application/x-protobuf")
            .body(body)
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => match r.bytes().await {
                Ok(b) => ExportTraceServiceResponse::decode(b)
                    .map(Answer::Ok)
                    .unwrap_or_else(|e| Answer::Failed(format!("HTTP 200 with a bad body: {e}"))),
                Err(e) => Answer::Failed(format!("HTTP 200, body not read: {e}")),
            },
            Ok(r) if matches!(r.status().as_u16(), 429 | 502 | 503 | 504) => Answer::Refused,
            Ok(r) => Answer::Failed(format!("HTTP {}", r.status())),
            Err(e) => Answer::Failed(format!("HTTP: {e}")),
        }
    }

    async fn post_records(&self, body: String, count: u64) {
        loop {
            let resp = self
                .http
                .post(&self.records_url)
                .header("content-type", "application/x-ndjson")
                .body(body.clone())
                .send()
                .await;
            match resp {
                Ok(r) if r.status().is_success() => {
                    let accepted = r
                        .json::<serde_json::Value>()
                        .await
                        .ok()
                        .and_then(|v| v.get("accepted").and_then(serde_json::Value::as_u64))
                        .unwrap_or(0);
                    self.tally
                        .records_acked
                        .fetch_add(accepted.min(count), Relaxed);
                    return;
                }
                Ok(r) if matches!(r.status().as_u16(), 429 | 503) => {
                    self.tally.refusals.fetch_add(1, Relaxed);
                    if self.stop.load(Relaxed) {
                        return;
                    }
                    tokio::time::sleep(REFUSAL_PAUSE).await;
                }
                Ok(r) => {
                    self.tally
                        .error(format!("records API: HTTP {}", r.status()));
                    return;
                }
                Err(e) => {
                    self.tally.error(format!("records API: {e}"));
                    return;
                }
            }
        }
    }
}

enum Answer {
    Ok(ExportTraceServiceResponse),
    Refused,
    /// Neither acknowledged nor refused as retryable: what happened.
    Failed(String),
}

/// Follow sampled intents one at a time until their verdict shows the expected state; returns
/// the latencies. A sample that waited in the queue is skipped (its clock already ran).
async fn follow_samples(
    http: reqwest::Client,
    api: String,
    mut rx: tokio::sync::mpsc::Receiver<Sample>,
    stop: Arc<AtomicBool>,
) -> Vec<Duration> {
    let mut out = Vec::new();
    while let Some(s) = rx.recv().await {
        if s.sent.elapsed() > Duration::from_millis(200) && !stop.load(Relaxed) {
            continue;
        }
        let url = format!("{api}/api/v1/intents/{}", s.intent_id);
        let give_up = s.sent + Duration::from_secs(10);
        while Instant::now() < give_up {
            let seen = match http.get(&url).send().await {
                Ok(r) if r.status().is_success() => r
                    .json::<serde_json::Value>()
                    .await
                    .ok()
                    .and_then(|v| v.get("state").and_then(|x| x.as_str()).map(str::to_string))
                    .is_some_and(|state| state == s.state),
                _ => false,
            };
            if seen {
                out.push(s.sent.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    out
}

/// The server's resident memory, from the `process_resident_memory_bytes` it exports.
async fn server_rss(http: &reqwest::Client, api: &str) -> Result<Option<u64>, LoadgenError> {
    let url = format!("{api}/metrics");
    let text = http
        .get(&url)
        .send()
        .await
        .map_err(|e| LoadgenError::Unreachable {
            what: "reckon's API",
            url: url.clone(),
            error: e.to_string(),
        })?
        .text()
        .await
        .map_err(|e| LoadgenError::Unreachable {
            what: "reckon's API",
            url: url.clone(),
            error: e.to_string(),
        })?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64))
}

/// `TraceService/Export` with an export already encoded: the HTTP phase posts the same bytes,
/// so the comparison measures the server's transports, not the generator's encoding. (Also
/// how a test sends bytes no exporter would.)
pub async fn export_grpc(
    client: &mut tonic::client::Grpc<tonic::transport::Channel>,
    body: bytes::Bytes,
) -> Result<ExportTraceServiceResponse, tonic::Status> {
    client
        .ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    );
    client
        .unary(tonic::Request::new(body), path, RawExport)
        .await
        .map(tonic::Response::into_inner)
}

/// The codec of [`export_grpc`]: bytes out as they are, the response decoded.
#[derive(Clone, Copy, Default)]
struct RawExport;

impl tonic::codec::Codec for RawExport {
    type Encode = bytes::Bytes;
    type Decode = ExportTraceServiceResponse;
    type Encoder = RawExport;
    type Decoder = RawExport;

    fn encoder(&mut self) -> Self::Encoder {
        RawExport
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawExport
    }
}

impl tonic::codec::Encoder for RawExport {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: bytes::Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put(item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawExport {
    type Item = ExportTraceServiceResponse;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<ExportTraceServiceResponse>, tonic::Status> {
        ExportTraceServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}
