//! The disk under the SQLite store fills up, as it does on a host left running for months: a
//! real tmpfs of 16 MiB under the data directory. Exports are refused retryably (503 with a
//! retry hint) instead of acknowledged and lost, reckon stays up, and once there is room again
//! the exporter's re-send is taken without a restart. A restart afterwards on the same file has
//! every acknowledged intent. Needs root (to mount the tmpfs), as `.ci/run` has.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::support::*;

/// A tmpfs mounted for the test and unmounted when it ends, whatever the outcome.
struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    fn mount(at: &Path, size: &str) -> SmallDisk {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a tmpfs and needs root (.ci/run runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk {
            at: at.to_path_buf(),
        }
    }

    /// More room on the same filesystem, its files kept: what freeing space looks like.
    fn grow(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.at)
            .status()
            .unwrap();
        assert!(status.success(), "remount {} failed", self.at.display());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// Status, `Retry-After` and body of one OTLP/HTTP JSON export.
async fn send(http: &reqwest::Client, url: &str, doc: &Value) -> (u16, Option<String>, String) {
    let resp = http
        .post(url)
        .header("content-type", "application/json")
        .body(doc.to_string())
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("an answer");
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry, resp.text().await.unwrap_or_default())
}

/// What one exporter saw while the disk filled: the intents acknowledged, and the first export
/// refused.
struct Exported {
    acknowledged: Vec<String>,
    refused: (Vec<String>, Value),
}

/// Exports 200 new intents at a time until one is refused. Every answer must be an
/// acknowledgement or a retryable refusal that names the full disk.
async fn export_until_refused(http: reqwest::Client, url: String) -> Exported {
    let mut acknowledged = Vec::new();
    for _ in 0..400 {
        let intents: Vec<String> = (0..200).map(|_| unique("int")).collect();
        let doc = completed_refunds_json(&intents);
        match send(&http, &url, &doc).await {
            (200, _, _) => acknowledged.extend(intents),
            (503, retry, body) => {
                assert!(
                    retry.is_some(),
                    "a refusal for a full disk carries a retry hint"
                );
                assert!(
                    body.contains("disk is full"),
                    "refused because the disk is full: {body}"
                );
                return Exported {
                    acknowledged,
                    refused: (intents, doc),
                };
            }
            (status, _, body) => panic!("an export to a filling disk answered {status}: {body}"),
        }
    }
    panic!("16 MiB never filled up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_exports_retryably_and_ingest_resumes_when_there_is_room() {
    // Declared before the server, so dropped after it: unmounted before the directory goes.
    let mount_point = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(mount_point.path(), "16m");
    let data_dir = disk.at.join("data");
    let s = Server::start_with(tempfile::tempdir().unwrap(), test_config(data_dir.clone())).await;
    let url = format!("{}/v1/traces", s.r().http_url());

    // Four exporters at once, so group commits mix exports that fit with ones that do not.
    let exporters: Vec<_> = (0..4)
        .map(|_| tokio::spawn(export_until_refused(s.http.clone(), url.clone())))
        .collect();
    let mut acknowledged: Vec<String> = Vec::new();
    for e in exporters {
        // Each ended on a refusal that named the full disk.
        acknowledged.extend(e.await.unwrap().acknowledged);
    }
    assert!(
        acknowledged.len() >= 1_000,
        "the disk held {} spans before filling",
        acknowledged.len()
    );

    // Still full: refused again (a rolled-back write or a checkpoint may free room for an
    // export or two first, which is then acknowledged), and reckon still answers.
    let again = export_until_refused(s.http.clone(), url.clone()).await;
    acknowledged.extend(again.acknowledged);
    let (refused_intents, refused_doc) = again.refused;
    let (status, _) = s.get("/healthz").await;
    assert_eq!(status, 200, "a full disk does not take reckon down");
    let counted = s
        .metric(r#"reckon_ingest_rejections_total{reason="unavailable"}"#)
        .await
        .unwrap_or(0.0);
    assert!(
        counted >= 5.0,
        "each refusal (five at least) is counted where ReckonStoreUnavailable looks: {counted}"
    );

    // Room again: the exporter's next re-send is acknowledged, with no restart.
    disk.grow("256m");
    let mut resumed = false;
    for _ in 0..60 {
        if send(&s.http, &url, &refused_doc).await.0 == 200 {
            resumed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(resumed, "ingest resumed once the disk had room");
    assert_verdict(
        &s.verdict(&refused_intents[0]).await,
        "completed / none / -",
    );
    acknowledged.extend(refused_intents);

    // Every acknowledged span is in the file, and a restart on it serves their verdicts.
    let dir = s.stop().await;
    let stored: HashSet<String> = {
        let db = rusqlite::Connection::open(data_dir.join("reckon.sqlite")).unwrap();
        let mut q = db.prepare("SELECT intent_id FROM reckon_attempts").unwrap();
        let ids = q.query_map([], |r| r.get(0)).unwrap();
        ids.map(Result::unwrap).collect()
    };
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|i| !stored.contains(*i))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged spans are not in the file, e.g. {:?}",
        lost.len(),
        acknowledged.len(),
        lost.first()
    );
    let s = Server::start_with(dir, test_config(data_dir)).await;
    for intent in acknowledged.iter().step_by(97).chain(acknowledged.last()) {
        assert_verdict(&s.verdict(intent).await, "completed / none / -");
    }
    s.stop().await;
}
