//! `reckon reaudit` over a store the demo wrote: the real binary, the real store (SQLite file or
//! ClickHouse), a changed contract. The differences it prints must be exactly those the change
//! implies, read independently from the stored verdicts; the unchanged contracts must show none;
//! and nothing in the store may change.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use reckon::store::{Store, VerdictFilter};
use serde_json::Value;

use crate::support::*;

fn reckon(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reckon"))
        .args(args)
        .env_remove("RECKON_CONFIG")
        .env_remove("RECKON_CONTRACTS_DIR")
        .env_remove("RECKON_STORE")
        .env_remove("RECKON_DATA_DIR")
        .env_remove("RECKON_DEMO_ONLY")
        .output()
        .expect("reckon runs")
}

fn run_reaudit(data: &Path, contracts: &Path, format: &str) -> String {
    let store = store_arg(data);
    let out = reckon(&[
        "reaudit",
        "--contracts",
        contracts.to_str().unwrap(),
        "--baseline",
        repo_contracts().to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--store",
        &store,
        "--since",
        "1d",
        "--page",
        "7",
        "--format",
        format,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "reaudit failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Every stored verdict document, read through the store the way the server wrote them.
async fn stored(data: &Path) -> Vec<Value> {
    let config = reckon::config::Config {
        store: store_for(data),
        data_dir: data.to_path_buf(),
        ..Default::default()
    };
    let store = reckon::app::open_store(&config).await.expect("store opens");
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_verdicts(&VerdictFilter {
                limit: 1000,
                cursor,
                ..VerdictFilter::default()
            })
            .await
            .unwrap();
        out.extend(page.items.iter().map(|v| serde_json::to_value(v).unwrap()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

/// The repository's contracts with `demo.refund` allowing one attempt instead of five.
fn one_attempt_contracts(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(repo_contracts()).unwrap() {
        let path = entry.unwrap().path();
        let mut text = std::fs::read_to_string(&path).unwrap();
        if path.file_name().is_some_and(|n| n == "demo.toml") {
            let block = text.find("name = \"demo.refund\"").unwrap();
            let at = block + text[block..].find("max_attempts = 5").unwrap();
            text.replace_range(at..at + "max_attempts = 5".len(), "max_attempts = 1");
        }
        std::fs::write(dir.join(path.file_name().unwrap()), text).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_changed_contract_shows_exactly_the_differences_it_implies() {
    let server = Server::start().await;
    let data = server.dir.path().join("data");
    let changed = server.dir.path().join("contracts-changed");
    one_attempt_contracts(&changed);

    let target = server.r().api_url();
    let otlp = server.r().grpc_url();
    let demo = tokio::task::spawn_blocking(move || {
        reckon(&[
            "demo",
            "--once",
            "--target",
            &target,
            "--otlp",
            &otlp,
            "--stripe-webhook-secret",
            STRIPE_SECRET,
        ])
    })
    .await
    .unwrap();
    assert!(
        demo.status.success(),
        "demo failed:\n{}\n{}",
        String::from_utf8_lossy(&demo.stdout),
        String::from_utf8_lossy(&demo.stderr)
    );

    // While the server runs: the store is read beside it.
    let live = {
        let data = data.clone();
        let changed = changed.clone();
        tokio::task::spawn_blocking(move || run_reaudit(&data, &changed, "json"))
            .await
            .unwrap()
    };
    let live: Value = serde_json::from_str(&live).expect("one JSON document");
    assert!(live["totals"]["intents"].as_u64().unwrap() > 0, "{live}");

    let _dir = server.stop().await;
    let before = stored(&data).await;

    // Read independently: demo.refund intents with two to five attempts break max_attempts = 1
    // and not max_attempts = 5 (more than five already broke it).
    let expected: BTreeSet<String> = before
        .iter()
        .filter(|v| {
            v["contract"] == "demo.refund"
                && (2..=5).contains(&v["attempts"].as_array().unwrap().len())
        })
        .map(|v| v["intent_id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        expected.len() >= 2,
        "the demo retries refunds in several scenarios: {expected:?}"
    );

    let out = run_reaudit(&data, &changed, "json");
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    let changes = doc["changes"].as_array().unwrap();
    let got: BTreeSet<String> = changes
        .iter()
        .map(|c| c["intent_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, expected, "{out}");
    assert_eq!(changes.len(), expected.len(), "each intent once: {out}");
    for c in changes {
        let added: Vec<&str> = c["findings_added"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap())
            .collect();
        assert_eq!(added, ["retry_budget_exceeded"], "{c}");
        assert_eq!(c["findings_removed"], serde_json::json!([]), "{c}");
        assert_eq!(c["before"]["state"], c["after"]["state"], "{c}");
        assert_eq!(c["before"]["contract"], "demo.refund", "{c}");
        assert_eq!(c["after"]["contract"], "demo.refund", "{c}");
        // Only an unknown intent's decision can depend on the retry budget (no same-key retry
        // once it is spent).
        if c["before"]["decision"] != c["after"]["decision"] {
            assert_eq!(c["before"]["state"], "unknown", "{c}");
            assert_eq!(c["after"]["decision"], "reconcile", "{c}");
        }
    }
    let totals = &doc["totals"];
    assert_eq!(totals["changed"], expected.len() as u64);
    assert_eq!(totals["state_changed"], 0);
    assert_eq!(
        totals["findings_added"]["retry_budget_exceeded"],
        expected.len() as u64
    );
    assert_eq!(totals["intents"], before.len() as u64, "{totals}");

    // The unchanged contracts change nothing.
    let same = run_reaudit(&data, &repo_contracts(), "json");
    let same: Value = serde_json::from_str(&same).unwrap();
    assert_eq!(same["changes"], serde_json::json!([]), "{same}");
    assert_eq!(same["totals"]["changed"], 0);

    // Text and CSV say the same.
    let text = run_reaudit(&data, &changed, "text");
    for id in &expected {
        assert!(text.contains(id.as_str()), "{id} in\n{text}");
    }
    assert!(
        text.contains(&format!("{} would change", expected.len())),
        "{text}"
    );
    let csv = run_reaudit(&data, &changed, "csv");
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].starts_with("intent_id,tool,"), "{csv}");
    assert_eq!(
        rows.len(),
        expected.len() + 2,
        "header, changes, totals:\n{csv}"
    );
    assert!(rows.last().unwrap().starts_with("(totals),"), "{csv}");

    // Nothing was written.
    assert_eq!(stored(&data).await, before);
}
