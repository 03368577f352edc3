//! Cross-language: the README's Python OpenTelemetry SDK scripts against a running reckon.

use std::process::Command;

use super::support::*;

/// How a script is told where reckon's OTLP endpoint is.
#[derive(Clone, Copy)]
enum Endpoint {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, as the README tells users to set it for every exporter.
    Environment,
    /// `--otlp URL`.
    Flag,
}

/// Runs `examples/python/{script}` against a fresh `reckon serve`; its stdout, once it exited 0.
async fn run_example(script: &str, endpoint: Endpoint) -> String {
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
        .join("examples/python")
        .join(script);
    let otlp = server.r().http_url();
    let api = server.r().api_url();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new("python3");
        cmd.arg(script).args(["--api", &api]);
        match endpoint {
            Endpoint::Environment => cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp),
            Endpoint::Flag => cmd
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .args(["--otlp", &otlp]),
        };
        cmd.output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.stop().await;
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_timed_out_refund_is_unknown_then_completed() {
    let stdout = run_example("timed_out_refund.py", Endpoint::Environment).await;
    assert!(
        stdout.contains("state=unknown decision=retry_same_key"),
        "{stdout}"
    );
    assert!(stdout.contains("state=completed decision=none"), "{stdout}");
}

/// DESIGN.md "Evidence attribution" 3: a refund the agent's read found before it sent its own
/// is not its effect, so the timed-out send stays unknown instead of `completed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_refund_listed_before_the_send_is_not_its_effect() {
    let stdout = run_example("check_then_act.py", Endpoint::Flag).await;
    assert!(
        stdout.contains("state=unknown decision=retry_same_key objects=[]"),
        "{stdout}"
    );
}
