//! Every listener's connections are bounded in number and time (`src/listen.rs`): a flood of
//! idle connections, a slowloris client and idle keep-alive connections cost reckon a bounded
//! number of descriptors for a bounded time, and exporters keep being answered meanwhile.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::support::*;

/// A series of `/metrics` as it says it now (0 when absent).
async fn metric(server: &Server, series: &str) -> i64 {
    let text = server
        .http
        .get(server.api("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// `reckon_connection_limits_total{listener, limit}` now.
async fn limited(server: &Server, listener: &str, limit: &str) -> i64 {
    let series =
        format!("reckon_connection_limits_total{{listener=\"{listener}\",limit=\"{limit}\"}}");
    metric(server, &series).await
}

async fn start(max_connections: usize, header: Duration, idle: Duration) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.max_connections = max_connections;
    config.header_read_timeout = header;
    config.idle_timeout = idle;
    Server::start_with(dir, config).await
}

/// Waits until the server closes `stream` (a read returns end of file or an error); the time
/// that took, or `None` after `most`.
async fn closed_within(stream: &mut TcpStream, most: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        let left = most.checked_sub(t0.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(t0.elapsed()),
            // An answer (a 408, a GOAWAY): keep reading until the close.
            Ok(Ok(_)) => {}
        }
    }
}

fn refund(intent: &str) -> ToolSpan {
    ToolSpan::new("issue_refund", ago(120.0), 30.0)
        .intent(intent)
        .key(&unique("key"))
        .timeout()
}

/// 2,100 idle TCP connections, 700 on each listener, against caps of 64: `/readyz`, an OTLP
/// HTTP export and an OTLP gRPC export from new clients are answered while they are open, and
/// every flood connection is closed by reckon (to make room, or at the header-read timeout).
/// Before the caps, each would have held a descriptor for ever; ~20,000 of them starved the
/// process (issue 36).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_does_not_stop_any_listener() {
    let server = start(64, Duration::from_secs(3), Duration::from_secs(30)).await;
    let r = server.r();
    let mut flood = Vec::new();
    for addr in [r.grpc_addr, r.http_addr, r.api_addr] {
        for _ in 0..700 {
            flood.push(
                TcpStream::connect(addr)
                    .await
                    .expect("the kernel takes the connection"),
            );
        }
    }

    let (status, _) = server.get("/readyz").await;
    assert_eq!(status, 200, "/readyz answers through the flood");
    let (a, b) = (unique("refund"), unique("refund"));
    export_http(&server, &[&refund(&a)]).await;
    export_grpc(&server, &[&refund(&b)]).await;
    for intent in [&a, &b] {
        assert_eq!(
            server.verdict(intent).await["attempts"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
    }

    for listener in ["otlp_grpc", "otlp_http", "api"] {
        let series = format!("reckon_connections_open{{listener=\"{listener}\"}}");
        let open = metric(&server, &series).await;
        assert!(
            (1..=64).contains(&open),
            "{listener}: {open} connections open, against a cap of 64"
        );
    }

    // Each flood connection is closed by reckon: none holds a descriptor beyond the timeout.
    let mut open = 0;
    for stream in &mut flood {
        if closed_within(stream, Duration::from_secs(30))
            .await
            .is_none()
        {
            open += 1;
        }
    }
    assert_eq!(open, 0, "flood connections reckon kept open");
    for listener in ["otlp_grpc", "otlp_http", "api"] {
        assert!(
            limited(&server, listener, "max_connections").await > 0,
            "{listener}: the cap acted"
        );
        assert!(
            limited(&server, listener, "header_read_timeout").await > 0,
            "{listener}: connections that never spoke were closed at the header-read timeout"
        );
    }
    server.stop().await;
}

/// A slowloris client sending one byte of its request header a second is closed at the
/// header-read timeout on the HTTP listeners, well before the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_header_is_closed_at_the_header_read_timeout() {
    let header = Duration::from_secs(2);
    let idle = Duration::from_secs(30);
    let server = start(64, header, idle).await;
    let r = server.r();
    let trickle = |addr| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let t0 = Instant::now();
        let request =
            b"POST /v1/traces HTTP/1.1\r\nhost: reckon\r\ncontent-type: application/x-protobuf\r\n";
        for byte in request.iter().cycle() {
            if s.write_all(&[*byte]).await.is_err() {
                break;
            }
            // Closed already? (A read of a closed connection ends at once.)
            let mut buf = [0u8; 256];
            match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                _ => {}
            }
            if t0.elapsed() > idle {
                break;
            }
        }
        t0.elapsed()
    };
    let (http, api) = tokio::join!(trickle(r.http_addr), trickle(r.api_addr));
    for (what, took) in [("OTLP HTTP", http), ("API", api)] {
        assert!(
            took >= header && took < header + Duration::from_secs(5),
            "{what}: the trickling connection was closed after {took:?} (header-read timeout {header:?})"
        );
    }
    assert!(limited(&server, "otlp_http", "header_read_timeout").await >= 1);
    assert!(limited(&server, "api", "header_read_timeout").await >= 1);
    server.stop().await;
}

/// A keep-alive connection that was served and then says nothing is closed at the idle
/// timeout (not at the shorter header-read timeout: waiting for the next request is not a slow
/// header), on HTTP/1 and HTTP/2 alike; a client whose idle connection was closed reconnects
/// and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout() {
    let header = Duration::from_secs(1);
    let idle = Duration::from_secs(4);
    let server = start(64, header, idle).await;
    let r = server.r();

    let mut s = TcpStream::connect(r.api_addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: reckon\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "served first"
    );
    let took = closed_within(&mut s, idle * 3)
        .await
        .expect("closed when idle");
    assert!(
        took >= idle - Duration::from_millis(200),
        "closed after {took:?}: the idle timeout is {idle:?}"
    );
    assert!(limited(&server, "api", "idle_timeout").await >= 1);

    // gRPC: one client, one export, then idle past the timeout, then another export.
    let mut grpc = opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient::connect(
        r.grpc_url(),
    )
    .await
    .unwrap();
    let request =
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::default();
    grpc.export(request.clone()).await.expect("answered");
    tokio::time::sleep(idle + Duration::from_secs(2)).await;
    assert!(
        limited(&server, "otlp_grpc", "idle_timeout").await >= 1,
        "the idle HTTP/2 connection was closed"
    );
    let mut again = None;
    for _ in 0..3 {
        match grpc.export(request.clone()).await {
            Ok(_) => {
                again = Some(());
                break;
            }
            // The channel learns of the close on its next call, and reconnects.
            Err(e) => assert_eq!(e.code(), tonic::Code::Unavailable, "{e}"),
        }
    }
    assert!(again.is_some(), "the client reconnects and is answered");
    server.stop().await;
}

/// A client that sends its header in time and then trickles its body holds an export slot
/// (taken before the body is read): with one slot, every other export is refused meanwhile.
/// At `body_read_timeout` it is answered 408 and the slot is free again, so the real exporter
/// that was refused gets through on its next try; before the deadline existed, the slot was
/// held for as long as the client kept trickling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_body_is_refused_at_the_body_read_timeout_and_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.max_concurrent_exports = 1;
    config.body_read_timeout = Duration::from_secs(2);
    let server = Server::start_with(dir, config).await;
    let r = server.r();

    let mut s = TcpStream::connect(r.http_addr).await.unwrap();
    s.write_all(
        b"POST /v1/traces HTTP/1.1\r\nhost: reckon\r\ncontent-type: application/x-protobuf\r\ncontent-length: 1000\r\n\r\n",
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    let trickle = async {
        let mut buf = [0u8; 1024];
        let mut answer = Vec::new();
        loop {
            if s.write_all(&[0x0a]).await.is_err() {
                break;
            }
            match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
            if !answer.is_empty() || t0.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
        (t0.elapsed(), String::from_utf8_lossy(&answer).into_owned())
    };
    // While the slot is held, an export is refused, retryably.
    let held = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // An empty export (a valid empty protobuf): refused before its body would be read.
        server
            .http
            .post(format!("{}/v1/traces", r.http_url()))
            .header("content-type", "application/x-protobuf")
            .body(Vec::<u8>::new())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    let ((took, answer), status_while_held) = tokio::join!(trickle, held);
    assert_eq!(
        status_while_held, 429,
        "the trickling body holds the one slot"
    );
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "answered 408 after {took:?}: {answer:?}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "refused at the deadline, not before and not much after: {took:?}"
    );
    let intent = unique("int");
    export_http(&server, &[&refund(&intent)]).await;
    assert!(server.get(&format!("/api/v1/intents/{intent}")).await.0 == 200);
    server.stop().await;
}
