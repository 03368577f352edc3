//! Issue 12, "Reload": a running `reckon serve` (the real binary) takes edited contracts on
//! SIGHUP. Exports keep arriving through the real OTLP exporter while the file is edited and
//! the signal sent: every acknowledged span is there afterwards, the verdicts the edit concerns
//! change and name the new contract version (in memory and in the store), the others keep
//! theirs. A bad edit is refused by file, line and field, counted, and changes nothing: not the
//! verdicts, not their versions, not how new evidence is judged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::*;

/// `payments.refund` with `max_attempts`, then `extra` (an operator's line, good or bad).
/// Line 6 is `max_attempts`, line 7 `extra`.
fn refunds_toml(max_attempts: u32, extra: &str) -> String {
    format!(
        "[[contract]]\n\
         name = \"payments.refund\"\n\
         tools = [\"issue_refund\"]\n\
         record_kind = \"refund\"\n\
         key_retention = \"24h\"\n\
         max_attempts = {max_attempts}\n\
         {extra}\n\
         [contract.params]\n\
         amount = \"/amount\"\n\
         currency = \"/currency\"\n\
         target = \"/order_id\"\n"
    )
}

/// A contracts directory of the test's own: refunds (editable) and the shipped email contract.
fn contracts_dir(root: &Path) -> PathBuf {
    let dir = root.join("contracts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("refunds.toml"), refunds_toml(5, "")).unwrap();
    std::fs::copy(repo_contracts().join("email.toml"), dir.join("email.toml")).unwrap();
    dir
}

/// The version of contract `name` as the loader computes it (the same code, in this process:
/// the server must agree).
fn version_of(dir: &Path, name: &str) -> String {
    reckon::contract::Contracts::new(reckon::contract::load_dir(dir).unwrap())
        .by_name(name)
        .unwrap()
        .version
        .clone()
}

/// The value of one series on the process's `/metrics`.
async fn series(r: &Reckon, line_start: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://{}/metrics", r.api))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
}

async fn reloads(r: &Reckon, result: &str) -> u64 {
    series(
        r,
        &format!("reckon_contract_reloads_total{{result=\"{result}\"}} "),
    )
    .await
    .unwrap_or_else(|| panic!("reckon_contract_reloads_total{{result={result:?}}} is exposed"))
        as u64
}

/// Until `reckon_contract_reloads_total{result}` reaches `n`.
async fn until_reloads(r: &Reckon, result: &str, n: u64) {
    let began = Instant::now();
    while reloads(r, result).await < n {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no {result} reload counted"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Every verdict the store holds (`GET /api/v1/intents`, page by page), by intent.
async fn stored(r: &Reckon) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/intents?limit=1000&cursor={c}"),
            None => "/api/v1/intents?limit=1000".to_string(),
        };
        let (code, page) = api_get(r, &path).await;
        assert_eq!(code, 200, "{page}");
        for v in page["items"].as_array().unwrap() {
            out.insert(v["intent_id"].as_str().unwrap().to_string(), v.clone());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

/// A verdict without the instant it was computed for.
fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    v.as_object_mut().unwrap().remove("audited_at");
    v
}

/// What one intent of the load is, and how many attempts were acknowledged for it.
#[derive(Clone, Debug)]
struct Sent {
    intent: String,
    kind: Kind,
    attempts: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A timed-out refund retried under its key, which succeeded: two attempts.
    Retried,
    /// A refund that succeeded at once.
    Once,
    /// An email that was sent (under the untouched contract).
    Email,
}

/// One export of three intents, one of each kind.
fn batch() -> (Vec<ToolSpan>, Vec<Sent>) {
    let t0 = ago(5.0 * MIN);
    let (r, o, e) = (unique("retried"), unique("once"), unique("email"));
    let key = unique("k");
    let spans = vec![
        ToolSpan::new("issue_refund", t0, 30.0)
            .intent(&r)
            .key(&key)
            .args(refund_args("45.00"))
            .timeout()
            .told("unknown"),
        ToolSpan::new("issue_refund", after(t0, 40.0), 0.3)
            .intent(&r)
            .key(&key)
            .args(refund_args("45.00"))
            .http(200)
            .object(&unique("re"), "succeeded")
            .told("succeeded"),
        ToolSpan::new("issue_refund", t0, 0.3)
            .intent(&o)
            .key(&unique("k"))
            .args(refund_args("12.00"))
            .http(200)
            .object(&unique("re"), "succeeded")
            .told("succeeded"),
        ToolSpan::new("send_email", t0, 0.3)
            .intent(&e)
            .args(r#"{"to":"ana@example.com"}"#.into())
            .http(200)
            .object(&unique("msg"), "sent")
            .told("succeeded"),
    ];
    let sent = vec![
        Sent {
            intent: r,
            kind: Kind::Retried,
            attempts: 2,
        },
        Sent {
            intent: o,
            kind: Kind::Once,
            attempts: 1,
        },
        Sent {
            intent: e,
            kind: Kind::Email,
            attempts: 1,
        },
    ];
    (spans, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_ingest_loses_nothing_and_changes_what_it_should() {
    let root = tempfile::tempdir().unwrap();
    let contracts = contracts_dir(root.path());
    let log = root.path().join("reckon.log");
    let r =
        Arc::new(Reckon::spawn_with_contracts(&root.path().join("data"), &log, &contracts).await);
    let (refund_v1, email_v) = (
        version_of(&contracts, "payments.refund"),
        version_of(&contracts, "notifications.email"),
    );

    // Exports, back to back over two connections (gRPC and HTTP), until told to stop; only
    // acknowledged ones are listed (an export that is not acknowledged fails the test).
    let acked: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let exporters: Vec<_> = [true, false]
        .into_iter()
        .map(|grpc| {
            let (r, acked, stop) = (r.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let (spans, sent) = batch();
                    let refs: Vec<&ToolSpan> = spans.iter().collect();
                    if grpc {
                        export_to(r.grpc, &refs).await;
                    } else {
                        export_http_to(r.http, &refs).await;
                    }
                    acked.lock().unwrap().extend(sent);
                }
            })
        })
        .collect();
    let acked_now = || acked.lock().unwrap().clone();
    while acked_now().len() < 60 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Before the edit: judged under the first version, no finding for the retry.
    let early = acked_now()
        .into_iter()
        .find(|s| s.kind == Kind::Retried)
        .unwrap();
    let v = r.verdict(&early.intent).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["contract_version"], refund_v1.as_str());

    // The edit: a retry is now one attempt too many. Written whole (as editors save), then the
    // signal, while the exporters keep going.
    let staged = contracts.join("refunds.toml.new");
    std::fs::write(&staged, refunds_toml(1, "")).unwrap();
    std::fs::rename(&staged, contracts.join("refunds.toml")).unwrap();
    let refund_v2 = version_of(&contracts, "payments.refund");
    assert_ne!(refund_v1, refund_v2);
    let before_signal = acked_now().len();
    r.signal("HUP");
    until_reloads(&r, "ok", 1).await;
    // Some more exports after the reload, then stop.
    let reloaded_at = acked_now().len();
    while acked_now().len() < reloaded_at + 60 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for e in exporters {
        e.await.expect("every export acknowledged");
    }
    let sent = acked_now();
    assert!(
        before_signal >= 60 && sent.len() >= before_signal + 60,
        "exports before and after the signal"
    );
    assert_eq!(reloads(&r, "error").await, 0);
    assert_eq!(
        series(
            &r,
            &format!(
                "reckon_contract_info{{contract=\"payments.refund\",version=\"{refund_v2}\"}} "
            )
        )
        .await,
        Some(1.0)
    );

    // Every acknowledged span is there, and every verdict is the new contract's doing: the
    // retries gained `retry_budget_exceeded` and name the new version, wherever their export
    // fell (before, during or after the reload); the single refunds name it too with nothing
    // else changed; the emails kept their contract's version.
    let expect = |s: &Sent| match s.kind {
        Kind::Retried => (
            "completed / none / retry_budget_exceeded",
            refund_v2.as_str(),
        ),
        Kind::Once => ("completed / none / -", refund_v2.as_str()),
        Kind::Email => ("completed / none / -", email_v.as_str()),
    };
    for s in &sent {
        let v = r.verdict(&s.intent).await;
        assert_eq!(
            v["attempts"].as_array().map(Vec::len),
            Some(s.attempts),
            "{s:?}: {v:#}"
        );
        let (want, version) = expect(s);
        assert_verdict(&v, want);
        assert_eq!(v["contract_version"], version, "{s:?}: {v:#}");
    }
    // The store says the same (the persister writes behind: wait for it), with the attempts
    // counted once each.
    let began = Instant::now();
    loop {
        let rows = stored(&r).await;
        let wrong: Vec<&Sent> = sent
            .iter()
            .filter(|s| {
                let (want, version) = expect(s);
                rows.get(&s.intent).is_none_or(|v| {
                    v["contract_version"] != version
                        || summary(v) != normalize_expectation(want)
                        || v["attempts"].as_array().map(Vec::len) != Some(s.attempts)
                })
            })
            .collect();
        if wrong.is_empty() {
            assert_eq!(rows.len(), sent.len(), "no other intent");
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "stored verdicts never caught up, e.g. {:?}: {:#}",
            wrong[0],
            rows.get(&wrong[0].intent).unwrap_or(&Value::Null)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, report) = api_get(&r, "/api/v1/report").await;
    assert_eq!(
        report["attempts"],
        sent.iter().map(|s| s.attempts).sum::<usize>(),
        "{report:#}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("contracts reloaded") && text.contains("payments.refund"),
        "the reload is logged with what changed:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_reload_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let contracts = contracts_dir(root.path());
    let log = root.path().join("reckon.log");
    let r = Reckon::spawn_with_contracts(&root.path().join("data"), &log, &contracts).await;
    let refund_v1 = version_of(&contracts, "payments.refund");
    let (spans, sent) = batch();
    export_to(r.grpc, &spans.iter().collect::<Vec<_>>()).await;
    let mut before = BTreeMap::new();
    for s in &sent {
        before.insert(s.intent.clone(), r.verdict(&s.intent).await);
    }
    assert_verdict(&before[&sent[0].intent], "completed / none / -");
    assert_eq!(
        before[&sent[0].intent]["contract_version"],
        refund_v1.as_str()
    );
    // Once the store has them, nothing may rewrite them.
    let began = Instant::now();
    let stored_before = loop {
        let rows = stored(&r).await;
        if rows.len() == sent.len() {
            break rows;
        }
        assert!(began.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // Two bad edits, each also lowering max_attempts (which must not slip in): a syntax error,
    // then a value that does not validate.
    let refunds = contracts.join("refunds.toml");
    let edits = [
        ("retry_margin = \"1h", 7, "retry_margin"),
        ("key_retention_days = 1", 7, "key_retention_days"),
    ];
    for (n, (extra, line, field)) in edits.iter().enumerate() {
        std::fs::write(&refunds, refunds_toml(1, extra)).unwrap();
        r.signal("HUP");
        until_reloads(&r, "error", n as u64 + 1).await;
        let text = std::fs::read_to_string(&log).unwrap();
        let named = format!("{}:{line}: field `{field}`", refunds.display());
        assert!(
            text.lines()
                .any(|l| l.contains("ERROR") && l.contains(&named)),
            "the error names file, line and field ({named}):\n{text}"
        );
    }
    assert_eq!(reloads(&r, "ok").await, 0);
    assert_eq!(
        series(
            &r,
            &format!(
                "reckon_contract_info{{contract=\"payments.refund\",version=\"{refund_v1}\"}} "
            )
        )
        .await,
        Some(1.0),
        "the contract in force is the first one"
    );
    for s in &sent {
        assert_eq!(
            comparable(&r.verdict(&s.intent).await),
            comparable(&before[&s.intent]),
            "{s:?}"
        );
    }
    // Give a (wrong) rewrite the persister's time to land, then compare the store's rows
    // whole: not one was written again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stored(&r).await, stored_before);

    // New evidence is judged by the contract in force: a retry is still within its budget.
    let (spans, more) = batch();
    export_http_to(r.http, &spans.iter().collect::<Vec<_>>()).await;
    let v = r.verdict(&more[0].intent).await;
    assert_verdict(&v, "completed / none / -");
    assert_eq!(v["contract_version"], refund_v1.as_str());

    // Fixed, the same signal takes it: the service was not left unable to reload.
    std::fs::write(&refunds, refunds_toml(1, "")).unwrap();
    r.signal("HUP");
    until_reloads(&r, "ok", 1).await;
    for id in [&sent[0].intent, &more[0].intent] {
        let v = r.verdict(id).await;
        assert_verdict(&v, "completed / none / retry_budget_exceeded");
        assert_eq!(
            v["contract_version"],
            version_of(&contracts, "payments.refund").as_str()
        );
    }
}
