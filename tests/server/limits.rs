//! The limits an attacker probes first (README "Limits"), over the real transports: a gzip bomb
//! of gigabytes on OTLP/HTTP, OTLP/gRPC and the records API is refused with bounded memory; a
//! span with too many or too large attributes is refused alone, saying which limit; an export
//! naming too many intents keeps the first ones; tool names from the wire never grow the
//! metrics without bound.

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use reckon::ingest::limits::{MAX_INTENTS_PER_EXPORT, MAX_SPAN_ATTRIBUTES, MAX_VALUE_BYTES};
use reckon::metrics::{MAX_LABEL_BYTES, MAX_SERIES};
use serde_json::Value;

use super::support::*;

/// A gzip member that inflates to `mib` MiB of zeros while costing about 1 KiB per MiB on the
/// wire: one MiB of zeros deflated once, ending in a full flush (byte-aligned, referring to
/// nothing before it), repeated. Its trailer's CRC is left zero: a receiver that honours its
/// limit stops long before it reads the trailer.
fn gzip_bomb(mib: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let zeros = vec![0u8; 1 << 20];
    let mut deflate = Compress::new(Compression::best(), false);
    let mut chunk = Vec::with_capacity(64 * 1024);
    deflate
        .compress_vec(&zeros, &mut chunk, FlushCompress::Full)
        .unwrap();
    assert_eq!(deflate.total_in(), 1 << 20, "one MiB in one call");
    let mut last = Vec::with_capacity(64);
    deflate
        .compress_vec(&[], &mut last, FlushCompress::Finish)
        .unwrap();
    // Magic, deflate, no flags, no mtime, no extra flags, unknown OS.
    let mut bomb = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    for _ in 0..mib {
        bomb.extend_from_slice(&chunk);
    }
    bomb.extend_from_slice(&last);
    bomb.extend_from_slice(&[0; 8]);
    bomb
}

/// The process's peak resident memory so far (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    kib * 1024
}

/// One gRPC request written by hand, through a real tonic channel: `frame` is the message as it
/// goes on the wire, compressed flag and length prefix included. A tonic client compresses
/// what it is given, so a bomb (a few MiB that inflate to GiBs) cannot be sent through one
/// without first holding the GiBs. Returns the status code and message.
async fn grpc_raw(server: &Server, path: &str, frame: Vec<u8>) -> (tonic::Code, String) {
    use http_body_util::BodyExt;
    use tonic::client::GrpcService;
    let url = server.r().grpc_url();
    let mut channel = tonic::transport::Channel::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let request = axum::http::Request::builder()
        .method("POST")
        .uri(format!("{url}{path}"))
        .header("content-type", "application/grpc")
        .header("grpc-encoding", "gzip")
        .header("te", "trailers")
        .body(tonic::body::Body::new(http_body_util::Full::new(
            bytes::Bytes::from(frame),
        )))
        .unwrap();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .unwrap();
    let response = channel.call(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let trailers = body.collect().await.unwrap().trailers().cloned();
    // A refusal before any message is a "trailers-only" response: the status is in the headers.
    let status = trailers
        .as_ref()
        .and_then(tonic::Status::from_header_map)
        .or_else(|| tonic::Status::from_header_map(&parts.headers))
        .expect("a grpc-status");
    (status.code(), status.message().to_string())
}

const MIB: usize = 1024 * 1024;

/// 4 GiB of zeros in ~4 MiB of gzip, against an 8 MiB limit, on each ingest path: every one is
/// refused as too large in well under the time inflating it would take, and the process's peak
/// memory grows by far less than the bomb's size (it would grow by 4 GiB if it were inflated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bombs_of_gigabytes_are_refused_with_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.max_request_bytes = 8 * MIB;
    let server = Server::start_with(dir, config).await;
    let bomb = gzip_bomb(4096);
    assert!(
        bomb.len() < 8 * MIB,
        "the bomb itself is within the body limit"
    );
    let before = peak_rss();

    let began = Instant::now();
    let resp = server
        .post_otlp("/v1/traces", "application/x-protobuf", true, bomb.clone())
        .await;
    assert_eq!(resp.status(), 413, "OTLP/HTTP gzip bomb");
    let status = reckon::ingest::http::RpcStatus::decode(resp.bytes().await.unwrap()).unwrap();
    assert_eq!(
        status.message,
        format!("request body is larger than the limit of {} bytes", 8 * MIB)
    );

    let resp = server
        .http
        .post(server.api("/api/v1/records"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(bomb.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413, "records API gzip bomb");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "body_too_large", "{body}");

    // gRPC: flag 1 (compressed), then the length, then the bomb.
    let mut frame = vec![1];
    frame.extend_from_slice(&(bomb.len() as u32).to_be_bytes());
    frame.extend_from_slice(&bomb);
    let (code, message) = grpc_raw(
        &server,
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        frame,
    )
    .await;
    // tonic refuses while inflating, before reckon sees the request: RESOURCE_EXHAUSTED without
    // a RetryInfo, which OTLP exporters do not retry.
    assert_eq!(code, tonic::Code::ResourceExhausted, "{message}");
    assert!(
        message.contains(&format!("size limit, of {} bytes, exceeded", 8 * MIB)),
        "{message:?}"
    );
    let took = began.elapsed();
    let grew = peak_rss().saturating_sub(before);
    assert!(
        grew < 512 * MIB as u64,
        "peak memory grew by {} MiB over three bombs",
        grew / MIB as u64
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");

    // Still serving.
    let i = unique("int");
    export_grpc(
        &server,
        &[&ToolSpan::new("issue_refund", ago(MIN), 0.3)
            .intent(&i)
            .key(&unique("k"))
            .timeout()],
    )
    .await;
    assert_verdict(&server.verdict(&i).await, "unknown / retry_same_key / -");
    server.stop().await;
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.into())
}

/// A timed-out `issue_refund` attempt of `intent`, with `extra` attributes.
fn tool_span(tool: &str, intent: &str, extra: Vec<KeyValue>) -> Span {
    let t0 = unix_nanos(ago(2.0 * MIN)) as u64;
    let mut attributes = vec![
        kv("gen_ai.tool.name", s(tool)),
        kv("reckon.intent.id", s(intent)),
        kv("reckon.idempotency_key", s(&format!("key-{intent}"))),
        kv("error.type", s("timeout")),
    ];
    attributes.extend(extra);
    Span {
        trace_id: rand_u128().to_be_bytes().to_vec(),
        span_id: (rand_u128() as u64 | 1).to_be_bytes().to_vec(),
        name: format!("execute_tool {tool}"),
        start_time_unix_nano: t0,
        end_time_unix_nano: t0 + 30_000_000_000,
        attributes,
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A span with one attribute too many, and one with a value past 64 KiB, are each refused alone
/// with the limit named in the partial success; the span beside them is audited. Over gRPC (a
/// real tonic client) and OTLP/HTTP protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_over_the_attribute_limits_are_refused_alone() {
    let server = Server::start().await;
    let mut grpc = TraceServiceClient::connect(server.r().grpc_url())
        .await
        .unwrap();
    for transport in ["grpc", "http"] {
        let (ok, many, big) = (unique("int"), unique("int"), unique("int"));
        // Four attributes of the executor's, plus padding to one past the limit.
        let padding = (0..MAX_SPAN_ATTRIBUTES - 3)
            .map(|i| kv(&format!("pad.{i}"), any_value::Value::IntValue(i as i64)))
            .collect();
        let args = format!(
            r#"{{"order_id":"1042","note":"{}"}}"#,
            "x".repeat(MAX_VALUE_BYTES)
        );
        let req = request(vec![
            tool_span("issue_refund", &ok, vec![]),
            tool_span("issue_refund", &many, padding),
            tool_span(
                "issue_refund",
                &big,
                vec![kv("gen_ai.tool.call.arguments", s(&args))],
            ),
        ]);
        let (rejected, message) = match transport {
            "grpc" => {
                let reply = grpc.export(req).await.unwrap().into_inner();
                let p = reply.partial_success.expect("a partial success");
                (p.rejected_spans, p.error_message)
            }
            _ => {
                let resp = server
                    .post_otlp(
                        "/v1/traces",
                        "application/x-protobuf",
                        false,
                        req.encode_to_vec(),
                    )
                    .await;
                assert_eq!(resp.status(), 200);
                let reply = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::decode(
                    resp.bytes().await.unwrap(),
                )
                .unwrap();
                let p = reply.partial_success.expect("a partial success");
                (p.rejected_spans, p.error_message)
            }
        };
        assert_eq!(rejected, 2, "{transport}: {message}");
        assert!(
            message.contains(&format!(
                "{} attributes, over the limit of {MAX_SPAN_ATTRIBUTES}",
                MAX_SPAN_ATTRIBUTES + 1
            )),
            "{transport}: {message}"
        );
        assert!(
            message.contains(&format!(
                "attribute 'gen_ai.tool.call.arguments' is {} bytes, over the limit of {MAX_VALUE_BYTES}",
                args.len() + 4
            )),
            "{transport}: {message}"
        );
        assert_verdict(&server.verdict(&ok).await, "unknown / retry_same_key / -");
        for refused in [&many, &big] {
            assert_eq!(
                server.get(&format!("/api/v1/intents/{refused}")).await.0,
                404,
                "{transport}"
            );
        }
    }
    server.stop().await;
}

/// One export naming more intents than the limit: the first `MAX_INTENTS_PER_EXPORT` are
/// audited, the spans of the rest refused with the reason (OTLP/JSON, as a JS exporter would
/// send it; the limit is the decoder's, shared by every transport).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_naming_too_many_intents_keeps_the_first_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.max_request_bytes = 16 * MIB;
    let server = Server::start_with(dir, config).await;
    let run = unique("many");
    let intents: Vec<String> = (0..MAX_INTENTS_PER_EXPORT + 3)
        .map(|i| format!("{run}-{i}"))
        .collect();
    let req = request(
        intents
            .iter()
            .map(|i| tool_span("issue_refund", i, vec![]))
            .collect(),
    );
    let resp = server
        .post_otlp(
            "/v1/traces",
            "application/x-protobuf",
            true,
            gzip(&req.encode_to_vec()),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let reply =
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::decode(
            resp.bytes().await.unwrap(),
        )
        .unwrap();
    let p = reply.partial_success.expect("a partial success");
    assert_eq!(p.rejected_spans, 3);
    assert!(
        p.error_message.contains(&format!(
            "the export names more than {MAX_INTENTS_PER_EXPORT} distinct intents"
        )),
        "{}",
        p.error_message
    );
    assert_verdict(
        &server.verdict(&intents[0]).await,
        "unknown / retry_same_key / -",
    );
    assert_verdict(
        &server.verdict(&intents[MAX_INTENTS_PER_EXPORT - 1]).await,
        "unknown / retry_same_key / -",
    );
    assert_eq!(
        server
            .get(&format!(
                "/api/v1/intents/{}",
                intents[MAX_INTENTS_PER_EXPORT]
            ))
            .await
            .0,
        404
    );
    server.stop().await;
}

/// Tool names are the wire's: more distinct ones than `MAX_SERIES`, each longer than a label
/// may be, leave `reckon_tool_attempts_total` with at most `MAX_SERIES` series plus
/// `_overflow`, every label cut to `MAX_LABEL_BYTES`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_names_from_the_wire_cannot_grow_the_metrics() {
    let server = Server::start().await;
    let mut grpc = TraceServiceClient::connect(server.r().grpc_url())
        .await
        .unwrap()
        .max_decoding_message_size(64 * MIB);
    let run = unique("t");
    let long = "n".repeat(4 * MAX_LABEL_BYTES);
    // In exports of 500 (under the test server's 1 MiB body limit), 2100 tool names.
    let tools: Vec<String> = (0..MAX_SERIES + 100)
        .map(|i| format!("{run}-{i:05}-{long}"))
        .collect();
    for chunk in tools.chunks(500) {
        let req = request(
            chunk
                .iter()
                .map(|t| {
                    // Settled (no escalation to write): the response returned a refund.
                    let settled = vec![
                        kv("http.response.status_code", any_value::Value::IntValue(201)),
                        kv("reckon.downstream.object_id", s(&format!("{t:.40}-re"))),
                        kv("reckon.downstream.status", s("succeeded")),
                    ];
                    tool_span(t, &format!("{t:.40}-intent"), settled)
                })
                .collect(),
        );
        let reply = grpc.export(req).await.unwrap().into_inner();
        assert!(reply.partial_success.is_none(), "{reply:?}");
    }
    let text = server
        .http
        .get(server.api("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("reckon_tool_attempts_total{"))
        .collect();
    assert!(series.len() <= MAX_SERIES + 1, "{} series", series.len());
    assert!(
        series
            .iter()
            .any(|l| l
                .starts_with("reckon_tool_attempts_total{tool=\"_overflow\",class=\"_overflow\"}")),
        "no _overflow series"
    );
    for l in &series {
        assert!(l.len() < 2 * MAX_LABEL_BYTES + 80, "{l}");
    }
    server.stop().await;
}

/// A records post is answered item by item, so one of more items than the limit (here a
/// 400,000 one-byte items, 800 KB) is refused whole with a 400 naming the limit; one naming more
/// intents than an export may is kept up to the limit, the rest refused by index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_posts_are_bounded_in_items_and_intents() {
    use reckon::ingest::limits::MAX_RECORDS_PER_POST;
    let server = Server::start().await;
    let (code, body) = server
        .post_records_raw(format!("[{}0]", "0,".repeat(400_000)))
        .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_request", "{body}");
    assert_eq!(
        body["error"]["message"],
        format!("body holds more than {MAX_RECORDS_PER_POST} records: send them in several posts"),
    );

    let run = unique("rec");
    let items: Vec<Value> = (0..MAX_INTENTS_PER_EXPORT + 2)
        .map(|i| {
            serde_json::json!({"object_id": format!("{run}-re{i}"), "status": "pending",
                               "intent_id": format!("{run}-int{i}")})
        })
        .collect();
    let (code, body) = server
        .post_json("/api/v1/records", &Value::Array(items))
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["accepted"], MAX_INTENTS_PER_EXPORT);
    let rejected = body["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 2);
    assert_eq!(rejected[0]["index"], MAX_INTENTS_PER_EXPORT);
    assert!(
        rejected[0]["error"].as_str().unwrap().starts_with(&format!(
            "the export names more than {MAX_INTENTS_PER_EXPORT} distinct intents"
        )),
        "{body}"
    );
    server.stop().await;
}
