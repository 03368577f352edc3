//! Cross-language: the README's Python OpenTelemetry SDK script against a running reckon.

use std::process::Command;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_timed_out_refund_is_unknown_then_completed() {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http",
        ])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "the Python OpenTelemetry SDK is missing: pip install -r examples/python/requirements.txt (.ci/run does)"
    );
    let server = Server::start().await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/python/timed_out_refund.py");
    let otlp = server.r().http_url();
    let api = server.r().api_url();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .args(["--otlp", &otlp, "--api", &api])
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("state=unknown decision=retry_same_key"),
        "{stdout}"
    );
    assert!(stdout.contains("state=completed decision=none"), "{stdout}");
    server.stop().await;
}
