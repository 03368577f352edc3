//! `reckon demo [--target URL] [--once]`: runs every scenario of the seed notes end to end and
//! prints what the notes expect beside what reckon concluded.
//!
//! The parts are real programs, not canned results: a stub downstream that keeps state
//! ([`stub`]), a fault proxy on raw TCP ([`proxy`]), an executor that exports its tool spans
//! through the OTLP exporter ([`executor`]), and the scenarios as data ([`scenarios`]). The stub
//! reports its objects to reckon itself, as signed Stripe webhooks and through the records API.
//!
//! With no `--target`, reckon starts in-process on a temporary SQLite store with
//! `contracts/demo.toml` (embedded in the binary) and stays up after the table until Ctrl-C,
//! unless `--once`. With `--target URL`, the demo runs against that server, which must have
//! loaded `contracts/demo.toml` (servers load `./contracts`) and, when it verifies Stripe
//! signatures, share the secret given with `--stripe-secret`.

pub mod executor;
pub mod proxy;
pub mod scenarios;
pub mod stub;
pub mod table;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{json, Value};

use executor::{Careless, Executor, Intent, SendOpts, Telemetry};
use scenarios::{Scenario, Step};
use table::{Check, ObjectCheck, Row};

/// The scaled demo contracts, written into the in-process server's contracts directory.
pub const DEMO_CONTRACTS: &str = include_str!("../../contracts/demo.toml");

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("--target {0:?} is not an http:// URL")]
    BadTarget(String),
    #[error("no scenario matches {0:?}")]
    NoScenario(String),
}

/// Where reckon listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// API base URL, no trailing slash.
    pub api: String,
    /// OTLP gRPC endpoint URL.
    pub otlp: String,
    pub stripe_secret: Option<String>,
}

impl Target {
    /// `--target` with the OTLP endpoint defaulting to the same host on 4317.
    pub fn from_args(
        target: &str,
        otlp: Option<&str>,
        secret: Option<String>,
    ) -> Result<Target, DemoError> {
        let api = target.trim().trim_end_matches('/').to_string();
        let rest = api
            .strip_prefix("http://")
            .ok_or_else(|| DemoError::BadTarget(target.to_string()))?;
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() {
            return Err(DemoError::BadTarget(target.to_string()));
        }
        // Strip a port, minding IPv6 literals ([::1]:8080).
        let host = match authority.rfind(':') {
            Some(i) if !authority[i..].contains(']') => &authority[..i],
            _ => authority,
        };
        let otlp = otlp
            .map(|o| o.trim_end_matches('/').to_string())
            .unwrap_or_else(|| format!("http://{host}:4317"));
        Ok(Target {
            api,
            otlp,
            stripe_secret: secret,
        })
    }
}

/// A tag unique to this process, in every intent id, key and object id, so that repeated runs
/// against one server never collide.
pub fn run_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        // Base 36 of the milliseconds and the pid: short, and distinct across quick re-runs.
        let mut n = ms ^ (u128::from(std::process::id()) << 48);
        let mut s = String::new();
        while n > 0 {
            let d = (n % 36) as u32;
            s.push(char::from_digit(d, 36).unwrap_or('0'));
            n /= 36;
        }
        s.chars().rev().collect()
    })
}

/// The in-process server's configuration: loopback ports chosen by the OS, the store and the
/// demo contracts under `dir`, webhooks verified with `secret`.
pub fn in_process_config(dir: &Path, secret: &str) -> crate::config::Config {
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    crate::config::Config {
        grpc_addr: loopback,
        http_addr: loopback,
        api_addr: loopback,
        data_dir: dir.join("data"),
        contracts_dir: dir.join("contracts"),
        stripe_webhook_secret: Some(secret.to_string()),
        log_filter: "warn".into(),
        ..crate::config::Config::default()
    }
}

/// Writes the in-process server's contracts into `dir`: the operator's `contracts_dir` if
/// given (so a changed demo contract can be tried), plus the embedded `demo.toml` unless that
/// directory brings its own.
fn write_contracts(dir: &Path, from: Option<&Path>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut has_demo = false;
    if let Some(from) = from {
        let entries =
            std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
                let name = path.file_name().unwrap_or_default();
                has_demo |= name == "demo.toml";
                std::fs::copy(&path, dir.join(name))
                    .with_context(|| format!("copying {}", path.display()))?;
            }
        }
    }
    if !has_demo {
        std::fs::write(dir.join("demo.toml"), DEMO_CONTRACTS)
            .context("writing the demo contracts")?;
    }
    Ok(())
}

/// Starts reckon in-process on `dir`: the one place that knows `app::start`.
async fn start_reckon(
    dir: &Path,
    contracts_from: Option<&Path>,
    alertmanager: Option<&str>,
) -> anyhow::Result<(Target, crate::app::Running)> {
    write_contracts(&dir.join("contracts"), contracts_from)?;
    let secret = format!("whsec_demo_{}", run_tag());
    let mut config = in_process_config(dir, &secret);
    if let Some(url) = alertmanager {
        config.notify.push(
            crate::notify::Target::new("alertmanager", url, None, Some("alertmanager"))
                .with_context(|| format!("--alertmanager {url}"))?,
        );
    }
    let running = crate::app::start(config)
        .await
        .context("starting reckon in-process")?;
    let target = Target {
        api: running.api_url(),
        otlp: running.grpc_url(),
        stripe_secret: Some(secret),
    };
    Ok((target, running))
}

/// Runs the demo; the process exit code is non-zero when any row fails.
///
/// `--target` selects a running server; `--otlp` and `--stripe-webhook-secret` describe it,
/// `--only` picks scenarios. `contracts_dir` feeds the in-process server (see [`write_contracts`]).
pub async fn run(args: crate::cli::DemoArgs) -> anyhow::Result<std::process::ExitCode> {
    let all = scenarios::all();
    let only = args.only.clone();
    let selected: Vec<Scenario> = match &only {
        Some(text) => all
            .into_iter()
            .filter(|s| s.name.contains(text.as_str()))
            .collect(),
        None => all,
    };
    if selected.is_empty() {
        return Err(DemoError::NoScenario(only.unwrap_or_default()).into());
    }

    let tmp;
    let (target, server) = match &args.target {
        Some(t) => (
            Target::from_args(t, args.otlp.as_deref(), args.stripe_webhook_secret.clone())?,
            None,
        ),
        None => {
            tmp = tempfile::tempdir().context("creating the demo's temporary directory")?;
            let (t, s) = start_reckon(
                tmp.path(),
                args.contracts_dir.as_deref(),
                args.alertmanager.as_deref(),
            )
            .await?;
            (t, Some(s))
        }
    };
    println!(
        "reckon demo: {} scenarios against {} (OTLP {})\n",
        selected.len(),
        target.api,
        target.otlp
    );
    let started = Instant::now();
    let rows = run_scenarios(&target, selected).await?;
    print!("{}", table::render(&rows));
    println!("finished in {:.1}s", started.elapsed().as_secs_f64());
    let ok = rows.iter().all(Row::pass);

    if let Some(server) = server {
        if !args.once {
            println!(
                "\nreckon is still serving: the escalation queue is {}/ (try {}/api/v1/escalations?status=open or {}/api/v1/intents?since=1h)",
                target.api, target.api, target.api
            );
            if let Some(am) = &args.alertmanager {
                println!(
                    "unresolved escalations are alerts in Alertmanager at {am} (alertname=\"ReckonEscalation\"); resolving one in the queue ends its alert"
                );
            }
            println!("Ctrl-C to stop.");
            tokio::signal::ctrl_c()
                .await
                .context("waiting for Ctrl-C")?;
        }
        server.shutdown().await?;
    }
    Ok(if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// Everything the scenarios share.
struct Harness {
    stub: stub::Stub,
    // Kept alive for the executor's requests.
    _proxy: proxy::Proxy,
    exec: Executor,
    telemetry: Arc<Telemetry>,
    api: ApiClient,
}

/// Starts the stub, the proxy and the exporter, runs every scenario concurrently and returns
/// their rows in definition order.
pub async fn run_scenarios(target: &Target, selected: Vec<Scenario>) -> anyhow::Result<Vec<Row>> {
    let reporter = stub::Reporter {
        api_base: target.api.clone(),
        stripe_secret: target.stripe_secret.clone(),
    };
    let stub = stub::Stub::start(stub::KEY_RETENTION, Some(reporter)).await?;
    let proxy = proxy::Proxy::start(stub.addr).await?;
    let telemetry = Arc::new(Telemetry::new(&target.otlp)?);
    let exec = Executor::new(proxy.base_url(), Some(telemetry.clone()))?;
    let h = Arc::new(Harness {
        stub,
        _proxy: proxy,
        exec,
        telemetry: telemetry.clone(),
        api: ApiClient::new(&target.api)?,
    });
    let mut set = tokio::task::JoinSet::new();
    for (n, sc) in selected.into_iter().enumerate() {
        let h = h.clone();
        set.spawn(async move { (n, run_scenario(&h, n, sc).await) });
    }
    let mut rows: Vec<(usize, Row)> = Vec::new();
    while let Some(done) = set.join_next().await {
        rows.push(done.context("a scenario task panicked")?);
    }
    rows.sort_by_key(|(n, _)| *n);
    let failures = h.stub.report_failures();
    let mut rows: Vec<Row> = rows.into_iter().map(|(_, r)| r).collect();
    if !failures.is_empty() {
        // Which row a refused report belonged to is in the message (its intent id).
        for r in rows.iter_mut().filter(|r| !r.pass()) {
            r.problems.extend(failures.iter().take(3).cloned());
        }
    }
    if let Err(e) = telemetry.flush().await {
        tracing::warn!("{e}");
    }
    Ok(rows)
}

/// Per-intent counts of what the executor sent, so a verdict is only judged once reckon has
/// seen all of it.
#[derive(Clone, Copy, Debug, Default)]
struct Sent {
    attempts: usize,
    reads: usize,
}

async fn run_scenario(h: &Harness, n: usize, sc: Scenario) -> Row {
    let t0 = Instant::now();
    let mut intents: Vec<Intent> = sc
        .intents
        .iter()
        .enumerate()
        .map(|(i, (tool, args))| {
            Intent::new(
                format!("demo-{}-{:02}-{}", run_tag(), n + 1, i + 1),
                *tool,
                args.clone(),
            )
        })
        .collect();
    let mut sent: HashMap<usize, Sent> = HashMap::new();
    let mut row = Row {
        name: sc.name.to_string(),
        source: sc.source.to_string(),
        notes: sc.notes.to_string(),
        checks: Vec::new(),
        objects: Vec::new(),
        problems: Vec::new(),
        secs: 0.0,
    };
    let careless = Careless(&h.exec);
    // The last expectation of each intent is its final verdict, which must hold.
    let mut last_expect: HashMap<usize, usize> = HashMap::new();
    for (n, step) in sc.steps.iter().enumerate() {
        if let Step::Expect(i, ..) = step {
            last_expect.insert(*i, n);
        }
    }
    for (n, step) in sc.steps.into_iter().enumerate() {
        match step {
            Step::Issue(i, opts) => {
                h.exec.issue(&mut intents[i], opts).await;
                sent.entry(i).or_default().attempts += 1;
            }
            Step::Reconcile(i, opts) => {
                let before = intents[i].state;
                let msg = h.exec.reconcile(&mut intents[i], opts).await;
                // The reconciler either retried (an attempt) or read back (a read).
                let s = sent.entry(i).or_default();
                if msg.contains("retried") {
                    s.attempts += 1;
                } else if matches!(
                    before,
                    executor::LocalState::Unknown | executor::LocalState::Pending
                ) {
                    s.reads += 1;
                }
            }
            Step::ReadBack(i, told) => {
                h.exec.read_back(&intents[i], told).await;
                sent.entry(i).or_default().reads += 1;
            }
            Step::ReadOrder(i) => {
                h.exec.read_back_order(&intents[i], None).await;
                sent.entry(i).or_default().reads += 1;
            }
            Step::SharedKeyCachedRequest(i, of) => {
                let opts = SendOpts {
                    body_of: Some(intents[of].clone()),
                    ..SendOpts::default()
                };
                let key = intents[of].key.clone();
                careless.send_with_key_of(&mut intents[i], key, opts).await;
                sent.entry(i).or_default().attempts += 1;
            }
            Step::SharedKey(i, of, opts) => {
                let key = intents[of].key.clone();
                careless.send_with_key_of(&mut intents[i], key, opts).await;
                sent.entry(i).or_default().attempts += 1;
            }
            Step::NewKey(i, opts) => {
                careless.retry_with_new_key(&mut intents[i], opts).await;
                sent.entry(i).or_default().attempts += 1;
            }
            Step::Resend(i, opts) => {
                careless.resend(&mut intents[i], opts).await;
                sent.entry(i).or_default().attempts += 1;
            }
            Step::ResendChanged(i, field, value, opts) => {
                careless
                    .resend_changed(&mut intents[i], field, value, opts)
                    .await;
                sent.entry(i).or_default().attempts += 1;
            }
            Step::Workers(i, sends) => {
                let count = sends.len();
                workers(h, &mut intents[i], sends).await;
                sent.entry(i).or_default().attempts += count;
            }
            Step::At(d) => {
                tokio::time::sleep_until((t0 + d).into()).await;
            }
            Step::Expect(i, expected, within) => {
                if let Err(e) = h.telemetry.flush().await {
                    row.problems.push(e.to_string());
                }
                let check = h
                    .api
                    .await_verdict(
                        &intents[i].id,
                        expected,
                        sent.get(&i).copied().unwrap_or_default(),
                        within,
                        last_expect.get(&i) == Some(&n),
                    )
                    .await;
                if let Some(p) = check.1 {
                    if !row.problems.contains(&p) {
                        row.problems.push(p);
                    }
                }
                row.checks.push(Check {
                    intent: i,
                    ..check.0
                });
            }
            Step::Objects(i, expected) => row.objects.push(ObjectCheck {
                intent: i,
                expected,
                actual: h.stub.objects_for(&intents[i].id).len(),
            }),
        }
    }
    row.secs = t0.elapsed().as_secs_f64();
    row
}

/// Several workers send one intent with its key at once, each after its own offset. They share
/// the intent's key and arguments; what each saw is folded into the intent afterwards.
async fn workers(h: &Harness, intent: &mut Intent, sends: Vec<(Duration, SendOpts)>) {
    let snapshot = intent.clone();
    let mut pending = Vec::new();
    for (delay, opts) in sends {
        let intent = snapshot.clone();
        pending.push(async move {
            tokio::time::sleep(delay).await;
            h.exec.send(&intent, opts).await
        });
    }
    let done = join_all(pending).await;
    for a in &done {
        intent.record(a);
    }
}

/// Runs futures concurrently and keeps their order (no `futures` dependency for one helper).
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all_done = true;
        for (f, slot) in futures.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => all_done = false,
                }
            }
        }
        if all_done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// reckon's HTTP API, as the demo reads it.
struct ApiClient {
    http: reqwest::Client,
    base: String,
}

impl ApiClient {
    fn new(base: &str) -> anyhow::Result<ApiClient> {
        Ok(ApiClient {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
            base: base.trim_end_matches('/').to_string(),
        })
    }

    async fn verdict(&self, intent_id: &str) -> Result<Option<Value>, String> {
        let url = format!("{}/api/v1/intents/{intent_id}", self.base);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match resp.status().as_u16() {
            404 => Ok(None),
            200 => resp.json().await.map(Some).map_err(|e| e.to_string()),
            s => Err(format!("GET {url}: HTTP {s}")),
        }
    }

    /// Polls until the verdict reads `expected` (once reckon has seen every span sent for the
    /// intent) or `within` passes. A `final_check` must also keep reading so, with no new
    /// evidence, for [`STABLE_FOR`]: the first poll that happens to match is not the verdict an
    /// operator is left with. Returns the check and, when it failed, a hint.
    async fn await_verdict(
        &self,
        intent_id: &str,
        expected: &str,
        sent: Sent,
        within: Duration,
        final_check: bool,
    ) -> (Check, Option<String>) {
        let want = scenarios::normalize(expected);
        let mut deadline = Instant::now() + within;
        // When the match was first seen, and the evidence it was seen on.
        let mut matched: Option<(Instant, Value)> = None;
        let mut concluded = "no verdict (404)".to_string();
        let mut hint = None;
        loop {
            match self.verdict(intent_id).await {
                Ok(Some(v)) => {
                    let count = |k: &str| v.get(k).and_then(Value::as_array).map_or(0, Vec::len);
                    let seen_all =
                        count("attempts") >= sent.attempts && count("readbacks") >= sent.reads;
                    concluded = verdict_summary(&v);
                    if !seen_all {
                        concluded = format!(
                            "{concluded} (reckon has {} of {} attempts, {} of {} reads)",
                            count("attempts"),
                            sent.attempts,
                            count("readbacks"),
                            sent.reads
                        );
                    }
                    hint = match v.get("contract") {
                        Some(Value::Null) | None => Some(
                            "reckon applied no contract: does the server load contracts/demo.toml?"
                                .to_string(),
                        ),
                        _ => None,
                    };
                    let evidence = json!([v.get("attempts"), v.get("readbacks"), v.get("objects")]);
                    let stable = match &matched {
                        _ if !(seen_all && concluded == want) => {
                            matched = None;
                            false
                        }
                        _ if !final_check => true,
                        Some((since, seen)) if *seen == evidence => since.elapsed() >= STABLE_FOR,
                        _ => {
                            let now = Instant::now();
                            matched = Some((now, evidence));
                            deadline = deadline.max(now + STABLE_FOR + Duration::from_millis(200));
                            false
                        }
                    };
                    if stable {
                        return (
                            Check {
                                intent: 0,
                                expected: want,
                                concluded,
                                pass: true,
                            },
                            None,
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => concluded = format!("API error: {e}"),
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (
            Check {
                intent: 0,
                expected: want,
                concluded,
                pass: false,
            },
            hint,
        )
    }
}

/// How long a scenario's final verdict must hold, with no new evidence, to count.
pub const STABLE_FOR: Duration = Duration::from_millis(1500);

/// `state / decision / findings` of a verdict document.
pub fn verdict_summary(v: &Value) -> String {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?");
    let kinds: Vec<&str> = v
        .get("findings")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(|x| x.get("kind").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    scenarios::summary(s("state"), s("decision"), kinds)
}

#[cfg(test)]
mod tests;
