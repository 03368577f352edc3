//! At capacity, exports are refused with the retryable codes the OTLP spec names, before their
//! bodies are read, and nothing refused is half-kept: the client's retry is what lands.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tokio::io::AsyncWriteExt;
use tonic_types::StatusExt;

use super::support::*;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn export_of(intent: &str) -> ExportTraceServiceRequest {
    let start = unix_nanos(ago(120.0)) as u64;
    let span = Span {
        trace_id: rand_u128().to_be_bytes().to_vec(),
        span_id: (rand_u128() as u64 | 1).to_be_bytes().to_vec(),
        name: "execute_tool issue_refund".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 30_000_000_000,
        attributes: vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "issue_refund"),
            kv("reckon.intent.id", intent),
            kv("reckon.idempotency_key", &unique("key")),
            kv("error.type", "timeout"),
        ],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![span],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// reckon with room for one export at a time.
async fn with_one_permit(dir: &tempfile::TempDir) -> reckon::app::Running {
    let mut config = test_config(dir.path().join("data"));
    config.max_concurrent_exports = 1;
    reckon::app::start(config).await.expect("reckon starts")
}

/// Hold the only permit with an export whose body never finishes arriving (until dropped);
/// returns once another export is refused. reckon sheds rather than queues: a probe that has
/// the permit when the held export asks for it gets the held export refused instead (it then
/// has an answer waiting), and it is sent again. (Probing alone, a loaded machine once lost
/// that race and the probes went on landing for the 10 s they were given.)
async fn hold_the_only_permit(running: &reckon::app::Running) -> tokio::net::TcpStream {
    let http = reqwest::Client::new();
    let probe = export_of(&unique("probe")).encode_to_vec();
    for _ in 0..50 {
        let mut held = tokio::net::TcpStream::connect(running.http_addr)
            .await
            .unwrap();
        held.write_all(b"POST /v1/traces HTTP/1.1\r\nhost: reckon\r\ncontent-type: application/x-protobuf\r\ncontent-length: 4096\r\n\r\n")
            .await
            .unwrap();
        held.write_all(&[0u8; 16]).await.unwrap();
        for _ in 0..250 {
            let resp = http
                .post(format!("{}/v1/traces", running.http_url()))
                .header("content-type", "application/x-protobuf")
                .body(probe.clone())
                .send()
                .await
                .unwrap();
            if resp.status() == 429 {
                return held;
            }
            let mut byte = [0u8; 1];
            if tokio::time::timeout(Duration::from_millis(20), held.peek(&mut byte))
                .await
                .is_ok()
            {
                break; // answered (refused) or closed: hold again
            }
        }
    }
    panic!("no export ever held the only permit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_capacity_exports_get_retryable_refusals_and_the_retry_lands() {
    let dir = tempfile::tempdir().unwrap();
    let running = with_one_permit(&dir).await;
    let http = reqwest::Client::new();
    let intent = unique("refund");
    let body = export_of(&intent).encode_to_vec();

    let held = hold_the_only_permit(&running).await;

    let post = || {
        http.post(format!("{}/v1/traces", running.http_url()))
            .header("content-type", "application/x-protobuf")
            .body(body.clone())
            .send()
    };
    // At capacity (`hold_the_only_permit` returns then): this intent's export is refused.
    let resp = post().await.unwrap();
    assert_eq!(resp.status(), 429, "a second export at capacity is refused");
    let retry_after: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    let status = reckon::ingest::http::RpcStatus::decode(resp.bytes().await.unwrap())
        .expect("a google.rpc.Status body");
    assert_eq!(status.code, tonic::Code::ResourceExhausted as i32);

    let mut grpc = TraceServiceClient::connect(running.grpc_url())
        .await
        .unwrap();
    let err = grpc
        .export(export_of(&intent))
        .await
        .expect_err("gRPC at capacity is refused too");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(
        err.get_details_retry_info()
            .and_then(|r| r.retry_delay)
            .is_some(),
        "RetryInfo tells the exporter when to retry"
    );

    let status = http
        .get(format!("{}/api/v1/intents/{intent}", running.api_url()))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404, "nothing refused was kept");

    // The held export gives up; the exporter's retry lands.
    drop(held);
    let mut landed = false;
    for _ in 0..100 {
        if post().await.unwrap().status() == 200 {
            landed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(landed, "the retry is accepted once capacity is back");
    let v: serde_json::Value = http
        .get(format!("{}/api/v1/intents/{intent}", running.api_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1));
    running.shutdown().await.unwrap();
}

/// Read one HTTP/1.1 response from `stream` (headers, then `content-length` bytes); its status,
/// or `None` when the server closed the connection instead of answering.
async fn read_response(stream: &mut tokio::net::TcpStream) -> Option<u16> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an answer within 10 s")
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap_or(0));
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(status)
}

/// A refusal before the body is read (at capacity, or a content type reckon does not take)
/// still reads the body to its end behind the answer, so the client's connection stays usable:
/// closing it with the body arriving makes the client's kernel see a reset, and the client a
/// transport error instead of the 429 and its `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_body_is_read_so_the_connection_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let running = with_one_permit(&dir).await;
    // Returns once the held export has the only permit: another client is refused.
    let held = hold_the_only_permit(&running).await;

    // One client connection, three requests on it, each with a body the size of a real export.
    let body = vec![0u8; 256 << 10];
    let mut client = tokio::net::TcpStream::connect(running.http_addr)
        .await
        .unwrap();
    let mut statuses = Vec::new();
    for content_type in [
        "application/x-protobuf",
        "text/plain",
        "application/x-protobuf",
    ] {
        let head = format!(
            "POST /v1/traces HTTP/1.1\r\nhost: reckon\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        // The answer may come before the body is sent: the body still goes, as a client's would.
        // A write that fails is the server having closed the connection.
        let sent = match client.write_all(head.as_bytes()).await {
            Ok(()) => client.write_all(&body).await,
            Err(e) => Err(e),
        };
        if sent.is_err() {
            statuses.push(None);
            break;
        }
        statuses.push(read_response(&mut client).await);
    }
    assert_eq!(
        statuses,
        [Some(429), Some(415), Some(429)],
        "every refusal answered on the same connection"
    );
    drop(held);
    running.shutdown().await.unwrap();
}

// ------------------------------------------------------------ shedding that exporters retry

fn refund_span(intent: &str) -> ToolSpan {
    ToolSpan::new("issue_refund", ago(120.0), 30.0)
        .intent(intent)
        .key(&unique("key"))
        .timeout()
}

/// `reckon_ingest_rejections_total{reason="overloaded"}` now.
async fn overloaded(api: &str) -> u64 {
    let text = reqwest::get(format!("{api}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("reckon_ingest_rejections_total{reason=\"overloaded\"} "))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Every intent has its one attempt stored.
async fn all_stored(api: &str, intents: &[String]) {
    for intent in intents {
        let mut found = None;
        for _ in 0..100 {
            let resp = reqwest::get(format!("{api}/api/v1/intents/{intent}"))
                .await
                .unwrap();
            if resp.status() == 200 {
                found = Some(resp.json::<serde_json::Value>().await.unwrap());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let v = found.unwrap_or_else(|| panic!("{intent} was never stored"));
        assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "{intent}");
    }
}

/// More exports at once on one gRPC connection than its `max_concurrent_streams`, through the
/// official exporter sharing one channel: the client queues the rest (HTTP/2's own setting),
/// none is refused, every span is stored. Before, tonic's per-connection concurrency limit
/// answered `RESOURCE_EXHAUSTED` without `RetryInfo`, which OTLP exporters must not retry: the
/// spans were dropped (issue 36).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_exports_than_streams_on_one_connection_all_land() {
    use opentelemetry_otlp::WithTonicConfig;
    use opentelemetry_sdk::trace::SpanExporter as _;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.max_concurrent_streams = 2;
    let running = reckon::app::start(config).await.expect("reckon starts");
    let channel = tonic::transport::Channel::from_shared(running.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let exporter = || {
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_channel(channel.clone())
            .build()
            .unwrap()
    };
    // The client has the server's SETTINGS before the burst.
    let warm = unique("refund");
    exporter()
        .export(vec![refund_span(&warm).data()])
        .await
        .expect("the first export is answered");

    let mut intents = vec![warm];
    let mut exports = tokio::task::JoinSet::new();
    for _ in 0..24 {
        let batch: Vec<String> = (0..40).map(|_| unique("refund")).collect();
        intents.extend(batch.iter().cloned());
        let spans = batch.iter().map(|i| refund_span(i).data()).collect();
        let exporter = exporter();
        exports.spawn(async move { exporter.export(spans).await });
    }
    while let Some(done) = exports.join_next().await {
        done.unwrap()
            .expect("every export on the shared connection is acknowledged");
    }
    all_stored(&running.api_url(), &intents).await;
    running.shutdown().await.unwrap();
}

/// At the process's capacity, the official exporters over gRPC (`RESOURCE_EXHAUSTED` with
/// `RetryInfo`) and HTTP (429 with `Retry-After`) are refused, retry as the OTLP rules say, and
/// every span lands once capacity is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporters_refused_at_capacity_retry_until_every_span_is_stored() {
    use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
    use opentelemetry_sdk::trace::SpanExporter as _;
    let dir = tempfile::tempdir().unwrap();
    let running = with_one_permit(&dir).await;
    let held = hold_the_only_permit(&running).await;
    let before = overloaded(&running.api_url()).await;

    let grpc_intents: Vec<String> = (0..20).map(|_| unique("refund")).collect();
    let http_intents: Vec<String> = (0..20).map(|_| unique("refund")).collect();
    let grpc = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(running.grpc_url())
        .with_compression(opentelemetry_otlp::Compression::Gzip)
        .build()
        .unwrap();
    let http = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{}/v1/traces", running.http_url()))
        .build()
        .unwrap();
    let spans =
        |intents: &[String]| -> Vec<_> { intents.iter().map(|i| refund_span(i).data()).collect() };
    let (grpc_spans, http_spans) = (spans(&grpc_intents), spans(&http_intents));
    let grpc_export = tokio::spawn(async move { grpc.export(grpc_spans).await });
    let http_export = tokio::spawn(async move { http.export(http_spans).await });

    // Both are refused at least once before the capacity comes back.
    let mut refused = 0;
    for _ in 0..200 {
        refused = overloaded(&running.api_url()).await - before;
        if refused >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused >= 2, "both exporters were refused ({refused})");
    drop(held);

    grpc_export
        .await
        .unwrap()
        .expect("the gRPC exporter retried until acknowledged");
    http_export
        .await
        .unwrap()
        .expect("the HTTP exporter retried until acknowledged");
    let mut all = grpc_intents;
    all.extend(http_intents);
    all_stored(&running.api_url(), &all).await;
    running.shutdown().await.unwrap();
}

/// The Python SDK's OTLP/HTTP exporter, refused at capacity, honours `Retry-After` and lands
/// every span once capacity is back. (The Python gRPC exporter is not installed here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_exporter_refused_at_capacity_retries_until_every_span_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let running = with_one_permit(&dir).await;
    let held = hold_the_only_permit(&running).await;
    let before = overloaded(&running.api_url()).await;

    let intents: Vec<String> = (0..20).map(|_| unique("refund")).collect();
    let script = r#"
import sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

endpoint, *intents = sys.argv[1:]
tracer = TracerProvider().get_tracer("shedding")
now = time.time_ns()
spans = []
for i, intent in enumerate(intents):
    span = tracer.start_span(
        "execute_tool issue_refund",
        start_time=now - 120_000_000_000,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "issue_refund",
            "reckon.intent.id": intent,
            "reckon.idempotency_key": "key-" + intent,
            "error.type": "timeout",
        },
    )
    span.end(end_time=now - 90_000_000_000)
    spans.append(span)
result = OTLPSpanExporter(endpoint=endpoint, timeout=30).export(spans)
print(result)
sys.exit(0 if result == SpanExportResult.SUCCESS else 1)
"#;
    let mut args = vec![
        "-c".to_string(),
        script.to_string(),
        format!("{}/v1/traces", running.http_url()),
    ];
    args.extend(intents.iter().cloned());
    let python = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3").args(&args).output()
    });

    let mut refused = 0;
    for _ in 0..500 {
        refused = overloaded(&running.api_url()).await - before;
        if refused >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused >= 1, "the Python exporter was refused");
    drop(held);

    let out = python.await.unwrap().expect("python3 runs");
    assert!(
        out.status.success(),
        "the Python exporter gave up:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    all_stored(&running.api_url(), &intents).await;
    running.shutdown().await.unwrap();
}
