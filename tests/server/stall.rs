//! A store that stalls or dies (DESIGN.md "Architecture" 3, issue "Safe to expose" 2): an export
//! is refused retryably within a few seconds, never held until the exporter gives up, and
//! ingest resumes by itself once the store answers again. Against a ClickHouse server of the
//! test's own, stopped with SIGSTOP (a hung server or a partition looks like this), and killed
//! with SIGKILL and restarted on its data while the load generator keeps exporting.
//! Run in the ClickHouse suite only: it needs Debian's clickhouse-server.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::support::*;

struct OwnClickHouse {
    dir: tempfile::TempDir,
    url: String,
}

impl OwnClickHouse {
    fn start_in(dir: &Path) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/clickhouse-test-server");
        let out = Command::new(script)
            .arg("start")
            .arg(dir)
            // Away from the shared test server's ports; the script moves on when one is taken.
            .env("RECKON_CH_HTTP_PORT", "18723")
            .env("RECKON_CH_TCP_PORT", "19723")
            .output()
            .expect("run scripts/clickhouse-test-server");
        assert!(
            out.status.success(),
            "clickhouse did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn start() -> OwnClickHouse {
        let dir = tempfile::tempdir().unwrap();
        let url = Self::start_in(dir.path());
        OwnClickHouse { dir, url }
    }

    /// Start it again on its data and ports, as an init system does after a crash.
    fn restart(&self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/clickhouse-test-server");
        let out = Command::new(script)
            .arg("restart")
            .arg(self.dir.path())
            .output()
            .expect("run scripts/clickhouse-test-server");
        assert!(
            out.status.success(),
            "clickhouse did not restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), self.url);
    }

    /// Whether the server answers `/ping` within 300 ms.
    async fn answers(&self, http: &reqwest::Client) -> bool {
        http.get(format!("{}/ping", self.url))
            .timeout(Duration::from_millis(300))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// Stop it (SIGSTOP) and wait until it no longer answers: a stalled store is the
    /// precondition of what follows, so it is checked, not assumed.
    async fn stall(&self, http: &reqwest::Client) {
        self.signal("STOP");
        for _ in 0..50 {
            if !self.answers(http).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("ClickHouse still answers after SIGSTOP");
    }

    /// One number from a query, straight from the server.
    async fn count(&self, http: &reqwest::Client, sql: &str) -> u64 {
        let text = http
            .post(&self.url)
            .body(sql.to_string())
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .text()
            .await
            .unwrap();
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{sql}: {text}"))
    }

    fn signal(&self, sig: &str) {
        let pid = std::fs::read_to_string(self.dir.path().join("pid")).unwrap();
        // The script starts the server in its own session: signal the whole group.
        // `kill -STOP -PID` is silently misread by procps' kill: name the signal and end the
        // options before the (negative) process group.
        let status = Command::new("kill")
            .args(["-s", sig, "--"])
            .arg(format!("-{}", pid.trim()))
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} failed");
    }
}

impl Drop for OwnClickHouse {
    fn drop(&mut self) {
        let _ = std::fs::read_to_string(self.dir.path().join("pid")).map(|pid| {
            Command::new("kill")
                .args(["-s", "CONT", "--"])
                .arg(format!("-{}", pid.trim()))
                .status()
        });
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/clickhouse-test-server");
        let _ = Command::new(script)
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

fn clickhouse_store(ch: &OwnClickHouse, database: &str) -> reckon::config::StoreConfig {
    reckon::config::StoreConfig::ClickHouse {
        url: ch.url.clone(),
        user: "default".into(),
        password: String::new(),
        database: database.into(),
    }
}

fn export_json(intent: &str) -> serde_json::Value {
    completed_refunds_json(&[intent.to_string()])
}

/// The status, the `Retry-After` hint, how long the answer took, and its body (for the message of
/// an assertion that fails).
async fn send(s: &Server, doc: &serde_json::Value) -> (u16, Option<String>, Duration, String) {
    let began = Instant::now();
    let resp = s
        .http
        .post(format!("{}/v1/traces", s.r().http_url()))
        .header("content-type", "application/json")
        .body(doc.to_string())
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("an answer, not a hang");
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let status = resp.status().as_u16();
    let took = began.elapsed();
    (status, retry, took, resp.text().await.unwrap_or_default())
}

/// Sends until acknowledged, as an exporter retrying on 503 does.
async fn send_until_acknowledged(s: &Server, doc: &serde_json::Value) {
    for _ in 0..60 {
        if send(s, doc).await.0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("ingest did not resume");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_dead_store_is_refused_quickly_and_ingest_resumes() {
    let ch = OwnClickHouse::start();
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.store = clickhouse_store(&ch, "reckon_stall");
    let s = Server::start_with(dir, config).await;
    let (a, b) = (unique("int"), unique("int"));
    assert_eq!(send(&s, &export_json(&a)).await.0, 200);

    // Hung: the process is there, answers nothing.
    ch.stall(&s.http).await;
    let stalled = export_json(&b);
    let (status, retry, took, body) = send(&s, &stalled).await;
    assert_eq!(
        status, 503,
        "a stalled store is a retryable refusal: {body}"
    );
    assert!(retry.is_some(), "with a retry hint");
    assert!(
        took < Duration::from_secs(15),
        "refused within a few seconds, before exporters (10-30 s) give up: {took:?}"
    );
    ch.signal("CONT");
    send_until_acknowledged(&s, &stalled).await;
    assert_verdict(&s.verdict(&b).await, "completed / none / -");

    assert_verdict(&s.verdict(&a).await, "completed / none / -");
    s.stop().await;
}

/// ClickHouse killed (SIGKILL) and restarted on its data while the load generator exports
/// completed refunds over OTLP/HTTP, retrying refusals as exporters do: every acknowledged span
/// is in the store afterwards, no export failed other than by a retryable refusal, and ingest
/// resumed by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_store_loses_nothing_acknowledged_under_load() {
    use reckon::loadgen::{self, Kind, LoadgenArgs, Mix, Phase, Transport};

    let ch = OwnClickHouse::start();
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path().join("data"));
    config.store = clickhouse_store(&ch, "reckon_killed");
    let s = Server::start_with(dir, config).await;
    let r = s.r();
    let phase = |name: &str| Phase {
        name: name.into(),
        transport: Transport::Http,
        mix: Mix::only(Kind::Completed),
    };
    let args = LoadgenArgs {
        api: r.api_url(),
        otlp_http: r.http_url(),
        otlp_grpc: r.grpc_url(),
        phases: vec![phase("through the crash"), phase("after")],
        batch: 20,
        concurrency: 2,
        // Killed at 2 s, restarted at 9 s: the phase after starts at 16 s.
        duration: Duration::from_secs(16),
        sample_every: 1_000_000,
        json: false,
    };
    let load = tokio::spawn(loadgen::run(args));
    tokio::time::sleep(Duration::from_secs(2)).await;
    ch.signal("KILL");
    // Down for longer than the append deadline: exports are refused, not held.
    tokio::time::sleep(Duration::from_secs(7)).await;
    ch.restart();
    let report = load.await.unwrap().expect("the run completes");
    let (crash, after) = (&report.phases[0], &report.phases[1]);
    eprintln!("{}", report.table());
    assert!(crash.refusals > 0, "the outage was refused, retryably");
    for p in [crash, after] {
        assert_eq!(p.errors, 0, "{}: only retryable refusals", p.name);
        assert_eq!(p.spans_rejected, 0, "{}", p.name);
    }
    // Resumed by itself. Not necessarily at once: a ClickHouse 18.16 restarted after a SIGKILL
    // can answer "Too many parts" (retryable) for a while, and the run then sees a few
    // refusals after the restart too (seen under load).
    assert!(after.spans_acked > 0, "ingest resumed by itself");
    let acked = crash.spans_acked + after.spans_acked;
    let stored = ch
        .count(&s.http, "SELECT count() FROM reckon_killed.reckon_attempts")
        .await;
    // A refused export may still have landed (the store answered after the deadline); its
    // retry is then a duplicate. Never fewer.
    assert!(
        stored >= acked,
        "{acked} spans acknowledged, only {stored} in the store"
    );
    s.stop().await;
}
