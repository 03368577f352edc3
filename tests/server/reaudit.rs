//! `reckon reaudit` over a store the demo wrote: the real binary, the real store (SQLite file or
//! ClickHouse), a changed contract. The differences it prints must be exactly those the change
//! implies, read independently from the stored verdicts; the unchanged contracts must show none;
//! and nothing in the store may change. Over intents that share keys, objects and records, the
//! page size changes nothing, the baseline side is the live verdict, and the proposed side is
//! what a second server running the changed contracts live concluded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

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
    run_reaudit_paged(data, contracts, format, 7)
}

fn run_reaudit_paged(data: &Path, contracts: &Path, format: &str, page: usize) -> String {
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
        &page.to_string(),
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

    // The demo's intents share orders, keys and objects: the page size changes nothing (but
    // the header's `since`, resolved from each run's clock).
    for page in [1, 1000] {
        let other: Value =
            serde_json::from_str(&run_reaudit_paged(&data, &changed, "json", page)).unwrap();
        assert_eq!(
            other["changes"], doc["changes"],
            "--page {page} and --page 7"
        );
        assert_eq!(other["totals"], doc["totals"], "--page {page} and --page 7");
    }

    // Nothing was written.
    assert_eq!(stored(&data).await, before);
}

// ------------------------------------------------------------------ groups of linked intents

/// `reckon reaudit` of the whole history in `data` under `contracts` against `baseline`, `page`
/// intents at a time: its standard output.
fn reaudit_paged(
    data: &Path,
    baseline: &Path,
    contracts: &Path,
    page: usize,
    format: &str,
) -> String {
    reaudit_with(data, baseline, contracts, page, format, &[])
}

/// [`reaudit_paged`] with more arguments.
fn reaudit_with(
    data: &Path,
    baseline: &Path,
    contracts: &Path,
    page: usize,
    format: &str,
    more: &[&str],
) -> String {
    let (store, page_arg) = (store_arg(data), page.to_string());
    let mut args = vec![
        "reaudit",
        "--contracts",
        contracts.to_str().unwrap(),
        "--baseline",
        baseline.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--store",
        &store,
        "--page",
        &page_arg,
        "--format",
        format,
    ];
    args.extend_from_slice(more);
    let out = reckon(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "reaudit --page {page} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The repository's contracts with each `(file, from, to)` edit made once (each must apply).
fn edited_contracts(dir: &Path, edits: &[(&str, &str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut applied = vec![false; edits.len()];
    for entry in std::fs::read_dir(repo_contracts()).unwrap() {
        let path = entry.unwrap().path();
        let mut text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for (i, (file, from, to)) in edits.iter().enumerate() {
            if name == *file {
                let at = text
                    .find(from)
                    .unwrap_or_else(|| panic!("{from} in {file}"));
                text.replace_range(at..at + from.len(), to);
                applied[i] = true;
            }
        }
        std::fs::write(dir.join(&name), text).unwrap();
    }
    assert!(applied.iter().all(|a| *a), "every edit applies: {edits:?}");
}

/// Stored verdicts by intent id.
async fn stored_by_id(data: &Path) -> BTreeMap<String, Value> {
    stored(data)
        .await
        .into_iter()
        .map(|v| (v["intent_id"].as_str().unwrap().to_string(), v))
        .collect()
}

/// A verdict's findings as `(kind, subject)`.
fn findings_of(v: Option<&Value>) -> BTreeSet<(String, String)> {
    let Some(v) = v else {
        return BTreeSet::new();
    };
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["subject"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn refund_at(intent: &str, key: &str, at: SystemTime) -> ToolSpan {
    ToolSpan::new("issue_refund", at, 0.5)
        .intent(intent)
        .key(key)
        .args(refund_args("45.00"))
}

fn draft_at(intent: &str, key: &str, at: SystemTime) -> ToolSpan {
    ToolSpan::new("create_bill_draft", at, 0.5)
        .intent(intent)
        .key(key)
        .args(draft_args("acme", "120.00"))
}

fn record(
    kind: &str,
    object: &str,
    intent: Option<&str>,
    key: Option<&str>,
    status: &str,
    at: SystemTime,
) -> Value {
    let (amount, currency, target) = match kind {
        "refund" => ("45.00", "usd", "1042"),
        _ => ("120.00", "EUR", "acme"),
    };
    serde_json::json!({"kind": kind, "object_id": object, "intent_id": intent,
        "idempotency_key": key, "status": status, "amount": amount, "currency": currency,
        "target": target, "observed_at": rfc3339(at), "source": "stripe"})
}

/// Intents linked by a key two of them sent (with a record of that key naming neither), by an
/// object one made and another read back, by a record naming one and carrying the key of
/// another, by a draft key and its record; and intents linked to none. `reckon reaudit` pages
/// by connected groups: `--page 1`, `3` and `1000` print the same, byte for byte, and the
/// baseline side of every change is the verdict the live engine stored (paging by intent
/// audited the second sender of a key without the first, and called it `completed` by the
/// record of the key it only shared).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_page_size_changes_nothing_since_linked_intents_are_audited_together() {
    let server = Server::start().await;
    let data = server.dir.path().join("data");
    let changed = server.dir.path().join("contracts-changed");
    // A renamed refund contract puts every refund intent in the output with both sides.
    edited_contracts(
        &changed,
        &[
            (
                "refunds.toml",
                "name = \"payments.refund\"\n",
                "name = \"payments.refund_next\"\n",
            ),
            (
                "refunds.toml",
                "key_retention = \"24h\"",
                "key_retention = \"2h\"",
            ),
            ("drafts.toml", "max_attempts = 4", "max_attempts = 1"),
        ],
    );
    let t0 = ago(5.0 * HOUR);
    let at = |secs: f64| after(t0, secs);
    let id = |n: &str| unique(n);
    let (a, b, c, d, e, f) = (id("a"), id("b"), id("c"), id("d"), id("e"), id("f"));
    let (g, h, j, l) = (id("g"), id("h"), id("j"), id("l"));
    let (k1, k2, k3, k4, k5, k6) = (id("k"), id("k"), id("k"), id("k"), id("k"), id("k"));
    let (k8, k9) = (id("k"), id("k"));
    let (re1, re_c, re_e, dr_h, re_j, re_o) =
        (id("re"), id("re"), id("re"), id("dr"), id("re"), id("re"));
    let spans = [
        // One key, two intents; the record of the key names neither. A and the record lie
        // before the `--since` below, B after it.
        refund_at(&a, &k1, ago(7.0 * HOUR)).timeout(),
        refund_at(&b, &k1, at(60.0)).timeout(),
        // C's refund, which D read back before its own (timed-out) send.
        refund_at(&c, &k2, at(300.0))
            .http(200)
            .object(&re_c, "succeeded"),
        ToolSpan::read(&d, at(400.0), &[re_c.as_str()]),
        refund_at(&d, &k3, at(500.0)).timeout(),
        // A record naming E carries the key F sent.
        refund_at(&e, &k4, at(600.0)).timeout(),
        refund_at(&f, &k5, at(650.0)).timeout(),
        // Two drafts under one key, the second retried.
        draft_at(&g, &k6, at(800.0)).timeout(),
        draft_at(&h, &k6, at(900.0))
            .http(200)
            .object(&dr_h, "created"),
        draft_at(&h, &k6, at(950.0))
            .http(200)
            .object(&dr_h, "created"),
        // Linked to nothing.
        refund_at(&j, &k8, at(1000.0))
            .http(200)
            .object(&re_j, "succeeded"),
        refund_at(&l, &k9, at(1100.0)).timeout(),
    ];
    export_grpc(&server, &spans.iter().collect::<Vec<_>>()).await;
    server
        .records(&Value::Array(vec![
            record(
                "refund",
                &re1,
                None,
                Some(&k1),
                "succeeded",
                after(ago(7.0 * HOUR), 120.0),
            ),
            record("refund", &re_e, Some(&e), Some(&k5), "succeeded", at(700.0)),
            record("draft", &dr_h, None, Some(&k6), "created", at(960.0)),
            record(
                "refund",
                &re_j,
                Some(&j),
                Some(&k8),
                "succeeded",
                at(1010.0),
            ),
            record("refund", &re_o, None, None, "succeeded", at(1200.0)),
        ]))
        .await;
    let _dir = server.stop().await;
    let live = stored_by_id(&data).await;
    assert!(
        findings_of(live.get(&b)).contains(&("key_shared_across_intents".into(), k1.clone())),
        "the live engine saw A and B share k1: {:#}",
        live[&b]
    );

    let (d1, d3, d1000) = {
        let (data, changed) = (data.clone(), changed.clone());
        tokio::task::spawn_blocking(move || {
            (
                reaudit_paged(&data, &repo_contracts(), &changed, 1, "json"),
                reaudit_paged(&data, &repo_contracts(), &changed, 3, "json"),
                reaudit_paged(&data, &repo_contracts(), &changed, 1000, "json"),
            )
        })
        .await
        .unwrap()
    };
    assert_eq!(d1, d1000, "--page 1 and --page 1000 differ");
    assert_eq!(d3, d1000, "--page 3 and --page 1000 differ");
    let doc: Value = serde_json::from_str(&d1).expect("one JSON document");
    assert_eq!(doc["totals"]["intents"], live.len() as u64, "{doc:#}");
    let changes: BTreeMap<String, &Value> = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["intent_id"].as_str().unwrap().to_string(), c))
        .collect();
    for refund in [&a, &b, &c, &d, &e, &f, &j, &l] {
        assert!(changes.contains_key(refund), "{refund} in {doc:#}");
    }
    assert!(
        changes.contains_key(&h),
        "H's two drafts break max_attempts = 1: {doc:#}"
    );
    // The baseline side is what the live engine, holding every linked intent, concluded.
    for (id, c) in &changes {
        let Some(v) = live.get(id) else {
            assert_eq!(c["before"]["state"], Value::Null, "{c}");
            continue;
        };
        assert_eq!(c["before"]["state"], v["state"], "{id}: {c}\nlive: {v:#}");
        assert_eq!(c["before"]["contract"], v["contract"], "{id}: {c}");
        if v["escalation_id"].is_null() {
            assert_eq!(
                c["before"]["decision"], v["decision"],
                "{id}: {c}\nlive: {v:#}"
            );
        }
    }
    assert_eq!(
        changes[&b]["before"]["state"], "unknown",
        "{:#}",
        changes[&b]
    );

    // With `--since` between A's evidence and B's: A is not reported, B is, judged with A.
    let since = rfc3339(ago(6.0 * HOUR));
    let windowed: Vec<String> = [1, 1000]
        .into_iter()
        .map(|page| {
            let (data, changed, since) = (data.clone(), changed.clone(), since.clone());
            std::thread::spawn(move || {
                let more = ["--since", since.as_str()];
                reaudit_with(&data, &repo_contracts(), &changed, page, "json", &more)
            })
            .join()
            .unwrap()
        })
        .collect();
    assert_eq!(
        windowed[0], windowed[1],
        "--since: --page 1 and --page 1000 differ"
    );
    let doc: Value = serde_json::from_str(&windowed[0]).unwrap();
    let in_window = live
        .values()
        .filter(|v| v["last_event"].as_str().unwrap() >= since.as_str())
        .count();
    assert!(in_window < live.len(), "A lies before --since");
    assert_eq!(doc["totals"]["intents"], in_window as u64, "{doc:#}");
    let windowed: BTreeMap<String, &Value> = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["intent_id"].as_str().unwrap().to_string(), c))
        .collect();
    assert!(!windowed.contains_key(&a), "A lies before --since: {doc:#}");
    assert_eq!(windowed[&b]["before"]["state"], "unknown", "{doc:#}");
    assert_eq!(
        windowed[&b], changes[&b],
        "B judged alike with and without --since"
    );

    let (t1, t1000) = {
        let (data, changed) = (data.clone(), changed.clone());
        tokio::task::spawn_blocking(move || {
            (
                reaudit_paged(&data, &repo_contracts(), &changed, 1, "csv"),
                reaudit_paged(&data, &repo_contracts(), &changed, 1000, "csv"),
            )
        })
        .await
        .unwrap()
    };
    assert_eq!(t1, t1000, "CSV: --page 1 and --page 1000 differ");
}

// ------------------------------------------------------------------ re-audit against live

/// xorshift64*: the generator's histories are fixed by its seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Refund,
    Draft,
    Email,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Refund => "issue_refund",
            Tool::Draft => "create_bill_draft",
            Tool::Email => "send_email",
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Tool::Refund => "refund",
            Tool::Draft => "draft",
            Tool::Email => "email",
        }
    }
    /// Success, pending and failure states of its contract.
    fn states(self) -> [&'static str; 3] {
        match self {
            Tool::Refund => ["succeeded", "pending", "failed"],
            Tool::Draft => ["created", "processing", "deleted"],
            Tool::Email => ["sent", "queued", "bounced"],
        }
    }
    fn args(self, target: &str, amount: &str) -> String {
        match self {
            Tool::Refund => {
                format!(r#"{{"order_id":"{target}","amount":{amount},"currency":"usd"}}"#)
            }
            Tool::Draft => draft_args(target, amount),
            Tool::Email => format!(r#"{{"to":"{target}@example.com","subject":"Your refund"}}"#),
        }
    }
}

/// One generated history: refunds, drafts and emails on a few shared orders, keys reused across
/// intents, retries with the same or a new key minutes or more than an hour later, read-backs
/// listing any object made so far, records naming the intent or only the key (or neither: an
/// orphan). Every time lies 3 to 6 hours back, far from every deadline of either contract set,
/// so the live verdicts and the re-audit's (a minute later) are judged at equivalent instants.
fn history(seed: u64, tag: &str, t0: SystemTime) -> (Vec<ToolSpan>, Vec<Value>) {
    let mut rng = Rng::new(seed);
    let (mut spans, mut records) = (Vec::new(), Vec::new());
    let mut keys: Vec<(Tool, String)> = Vec::new();
    let mut objects: Vec<String> = Vec::new();
    let orders = ["1042", "1043", "1044"];
    for i in 0..10 + rng.below(5) {
        let tool = [Tool::Refund, Tool::Refund, Tool::Draft, Tool::Email][rng.below(4)];
        let intent = format!("{tag}-s{seed}-i{i}");
        let target = orders[rng.below(orders.len())];
        let amount = ["45.00", "45", "12.50"][rng.below(3)];
        let shared: Vec<&String> = keys
            .iter()
            .filter(|(t, _)| *t == tool)
            .map(|(_, k)| k)
            .collect();
        let mut key = if tool == Tool::Email && rng.chance(50) {
            None
        } else if !shared.is_empty() && rng.chance(30) {
            Some(shared[rng.below(shared.len())].clone())
        } else {
            Some(format!("{intent}-k0"))
        };
        let object = format!("{tag}-s{seed}-o{i}");
        let mut at = after(t0, (rng.below(30) * 60) as f64);
        let mut made = false;
        for n in 0..1 + rng.below(3) {
            if n > 0 {
                at = after(at, [10.0, 40.0 * MIN, 80.0 * MIN][rng.below(3)]);
                if rng.chance(30) {
                    key = Some(format!("{intent}-k{n}"));
                }
            }
            let mut span = ToolSpan::new(tool.name(), at, 0.5)
                .intent(&intent)
                .args(tool.args(target, amount));
            if let Some(k) = &key {
                span = span.key(k);
                keys.push((tool, k.clone()));
            }
            let [ok, pending, _] = tool.states();
            span = match rng.below(6) {
                0 => span.timeout().told(["unknown", "failed"][rng.below(2)]),
                1 => span.http(500),
                2 => span.http(409),
                3 => span.http(422),
                4 => {
                    made = true;
                    span.http(200).object(&object, pending)
                }
                _ => {
                    made = true;
                    span.http(200).object(&object, ok).told("succeeded")
                }
            };
            spans.push(span);
        }
        if rng.chance(30) {
            let found: Vec<&str> = (0..rng.below(3))
                .filter(|_| !objects.is_empty())
                .map(|_| objects[rng.below(objects.len())].as_str())
                .collect();
            spans.push(ToolSpan::read(&intent, after(at, 30.0), &found));
        }
        if made || rng.chance(40) {
            objects.push(object.clone());
        }
        if objects.last() == Some(&object) && rng.chance(70) {
            let status = tool.states()[rng.below(3)];
            let by_intent = rng.chance(50).then_some(intent.as_str());
            let by_key = key.as_deref().filter(|_| rng.chance(70));
            let observed = after(at, 60.0 + (rng.below(600)) as f64);
            let mut r = record(tool.kind(), &object, by_intent, by_key, status, observed);
            r["amount"] = Value::String(amount.into());
            r["target"] = Value::String(target.into());
            if tool == Tool::Email {
                r["amount"] = Value::Null;
                r["currency"] = Value::Null;
                r["target"] = Value::String(format!("{target}@example.com"));
            }
            records.push(r);
        }
    }
    records.push(record(
        "refund",
        &format!("{tag}-s{seed}-orphan"),
        None,
        None,
        "succeeded",
        after(t0, 15.0 * MIN),
    ));
    (spans, records)
}

/// Generated histories fed to two servers: A under the base contracts, B under changed ones
/// (refund keys kept 90 minutes instead of 24 hours, drafts that converge and allow two attempts,
/// emails that may commit for two hours). `reckon reaudit` with the changed contracts on A's
/// store must conclude, for every intent, what B concluded live: contract, state and findings,
/// and the decision wherever no escalation stands in for it in B's verdict. Its baseline side
/// must be A's live verdict. The base contracts are the repository's with an unknown outcome
/// left open for 30 days instead of minutes: otherwise every timeout of these hours-old
/// histories escalates as `unresolved_unknown`, and the decision (`retry_same_key` or
/// `reconcile`, the one key retention changes) would be hidden behind `escalate` everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reaudit_under_changed_contracts_equals_a_server_that_ran_them_live() {
    let dir_a = tempfile::tempdir().unwrap();
    let (base, changed) = (dir_a.path().join("contracts"), dir_a.path().join("changed"));
    let open_unknowns = [
        (
            "refunds.toml",
            "unknown_deadline = \"15m\"",
            "unknown_deadline = \"30d\"",
        ),
        (
            "drafts.toml",
            "unknown_deadline = \"15m\"",
            "unknown_deadline = \"30d\"",
        ),
        (
            "email.toml",
            "unknown_deadline = \"10m\"",
            "unknown_deadline = \"30d\"",
        ),
    ];
    edited_contracts(&base, &open_unknowns);
    let changes = [
        (
            "refunds.toml",
            "key_retention = \"24h\"",
            "key_retention = \"90m\"",
        ),
        (
            "drafts.toml",
            "idempotency = \"replay\"",
            "idempotency = \"converge\"",
        ),
        ("drafts.toml", "max_attempts = 4", "max_attempts = 2"),
        (
            "email.toml",
            "max_in_flight = \"5m\"",
            "max_in_flight = \"2h\"",
        ),
    ];
    edited_contracts(&changed, &[&open_unknowns[..], &changes[..]].concat());
    let mut config = test_config(dir_a.path().join("data"));
    config.contracts_dir = base.clone();
    let server_a = Server::start_with(dir_a, config).await;
    let dir_b = tempfile::tempdir().unwrap();
    let mut config = test_config(dir_b.path().join("data"));
    config.contracts_dir = changed.clone();
    let server_b = Server::start_with(dir_b, config).await;

    let tag = unique("h");
    let t0 = ago(6.0 * HOUR);
    for seed in 0..8 {
        let (spans, records) = history(seed, &tag, t0);
        let spans: Vec<&ToolSpan> = spans.iter().collect();
        for server in [&server_a, &server_b] {
            export_grpc(server, &spans).await;
            server.records(&Value::Array(records.clone())).await;
        }
    }
    let dir_a = server_a.stop().await;
    let dir_b = server_b.stop().await;
    let (data_a, data_b) = (dir_a.path().join("data"), dir_b.path().join("data"));
    let (a, b) = (stored_by_id(&data_a).await, stored_by_id(&data_b).await);
    assert!(
        a.values().any(|v| findings_of(Some(v))
            .iter()
            .any(|(kind, _)| kind == "key_shared_across_intents")),
        "the histories share keys across intents"
    );

    let (out, whole) = {
        let (data, base, changed) = (data_a.clone(), base.clone(), changed.clone());
        tokio::task::spawn_blocking(move || {
            (
                reaudit_paged(&data, &base, &changed, 1, "json"),
                reaudit_paged(&data, &base, &changed, 1000, "json"),
            )
        })
        .await
        .unwrap()
    };
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert!(doc["totals"]["changed"].as_u64().unwrap() > 0, "{doc:#}");
    let changes: BTreeMap<String, &Value> = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["intent_id"].as_str().unwrap().to_string(), c))
        .collect();
    let ids: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut failures = Vec::new();
    let mut decisions = 0;
    for id in ids {
        let (va, vb) = (a.get(id), b.get(id));
        let field = |v: Option<&Value>, f: &str| v.map_or(Value::Null, |v| v[f].clone());
        let free = |v: Option<&Value>| v.is_none_or(|v| v["escalation_id"].is_null());
        let (contract, state, decision, findings) = match changes.get(id) {
            Some(c) => {
                // The baseline side is A's live verdict.
                if c["before"]["state"] != field(va, "state")
                    || c["before"]["contract"] != field(va, "contract")
                    || (free(va) && c["before"]["decision"] != field(va, "decision"))
                {
                    failures.push(format!("{id}: baseline {c}\nA live: {va:?}"));
                }
                let mut findings = findings_of(va);
                let set = |k: &str| -> BTreeSet<(String, String)> {
                    c[k].as_array()
                        .unwrap()
                        .iter()
                        .map(|f| {
                            (
                                f["kind"].as_str().unwrap().to_string(),
                                f["subject"].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect()
                };
                findings.retain(|f| !set("findings_removed").contains(f));
                findings.extend(set("findings_added"));
                let after = &c["after"];
                (
                    after["contract"].clone(),
                    after["state"].clone(),
                    Some(after["decision"].clone()),
                    findings,
                )
            }
            None => (
                field(va, "contract"),
                field(va, "state"),
                free(va).then(|| field(va, "decision")),
                findings_of(va),
            ),
        };
        let compared = decision.as_ref().filter(|_| free(vb));
        decisions += usize::from(compared.is_some());
        let decision_differs = compared.is_some_and(|d| *d != field(vb, "decision"));
        if contract != field(vb, "contract")
            || state != field(vb, "state")
            || findings != findings_of(vb)
            || decision_differs
        {
            failures.push(format!(
                "{id}: re-audit says {contract} {state} {decision:?} {findings:?}\nB live: {vb:?}\nchange: {:?}",
                changes.get(id)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} intents differ:\n{}",
        failures.len(),
        a.len().max(b.len()),
        failures.join("\n\n")
    );
    assert!(
        decisions * 4 >= a.len(),
        "decisions compared for {decisions} of {} intents",
        a.len()
    );
    assert_eq!(out, whole, "--page 1 and --page 1000 differ");
}
