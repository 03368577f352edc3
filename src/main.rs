//! The `reckon` binary: parse the command line once into plain data, then run it. `anyhow` lives
//! here and in `app`; everything below returns typed errors.

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Context;
use reckon::cli::{self, CliError, Command, EscalationAction, ReportFormat};
use reckon::codec::EscalationDoc;
use reckon::config::{LogFormat, StoreConfig};
use reckon::store::{AnyStore, SqliteStore, Store};

fn main() -> ExitCode {
    // Before the runtime's threads and the engine's memory: see the function.
    if let Err(e) = reckon::process::disable_transparent_huge_pages() {
        eprintln!("reckon: transparent huge pages stay on: {e}");
    }
    let command = match cli::parse() {
        Ok(c) => c,
        Err(CliError::Usage(e)) => e.exit(),
        Err(e) => {
            eprintln!("reckon: {e}");
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    match run(command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("reckon: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(config) => {
            runtime()?.block_on(async {
                // Inside the runtime: the exporter of reckon's own spans lives on it.
                let self_traces =
                    config
                        .self_traces
                        .clone()
                        .map(|endpoint| reckon::logging::SelfTracesTo {
                            endpoint,
                            one_in: config.self_traces_one_in,
                        });
                let exported = reckon::logging::init_serving(
                    config.log_format,
                    &config.log_filter,
                    self_traces,
                )?;
                let running = reckon::app::start(config).await?;
                let stopped = running.until_signal().await;
                if let Some(exported) = exported {
                    let _ = tokio::task::spawn_blocking(move || exported.shutdown()).await;
                }
                stopped
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Report(args) => {
            let rt = runtime()?;
            let report = rt.block_on(async {
                let store = match &args.store {
                    StoreConfig::Sqlite => {
                        AnyStore::Sqlite(SqliteStore::open_read_only(&args.data_dir).with_context(
                            || format!("opening the data directory {}", args.data_dir.display()),
                        )?)
                    }
                    other => {
                        let config = reckon::config::Config {
                            store: other.clone(),
                            data_dir: args.data_dir.clone(),
                            ..Default::default()
                        };
                        reckon::app::open_store(&config).await?
                    }
                };
                let now = reckon::clock::wall_now();
                anyhow::Ok(store.report(Some(args.since.resolve(now)), now).await?)
            })?;
            let out = match args.format {
                ReportFormat::Text => reckon::report::text(&report),
                ReportFormat::Csv => reckon::report::csv(&report),
                ReportFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
            };
            print!("{out}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Escalations(cmd) => runtime()?.block_on(escalations(cmd)),
        Command::Intents(cmd) => runtime()?.block_on(intents(cmd)),
        Command::Reaudit(args) => runtime()?.block_on(reaudit(args)),
        Command::Demo(args) => {
            reckon::logging::init_logging(LogFormat::Text, "error")?;
            runtime()?.block_on(reckon::demo::run(args))
        }
        Command::Loadgen(args) => {
            reckon::logging::init_logging(LogFormat::Text, "error")?;
            let json = args.json;
            let report = runtime()?.block_on(reckon::loadgen::run(args))?;
            if json {
                println!("{:#}", report.json());
            } else {
                print!("{}", report.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckContracts { dir } => {
            let contracts = reckon::contract::load_dir(&dir)?;
            for c in &contracts {
                println!(
                    "{:<28} tools={:<40} idempotency={:<8} key_retention={}",
                    c.name,
                    c.tools.join(","),
                    c.idempotency.as_str(),
                    c.key_retention
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "-".into())
                );
            }
            println!(
                "{} contract(s) in {} are valid",
                contracts.len(),
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens the store a command reads: SQLite read-only (a running server keeps writing), another
/// store as the server opens it.
async fn open_for_reading(
    data_dir: &std::path::Path,
    store: &StoreConfig,
) -> anyhow::Result<AnyStore> {
    Ok(match store {
        StoreConfig::Sqlite => AnyStore::Sqlite(
            SqliteStore::open_read_only(data_dir)
                .with_context(|| format!("opening the data directory {}", data_dir.display()))?,
        ),
        other => {
            let config = reckon::config::Config {
                store: other.clone(),
                data_dir: data_dir.to_path_buf(),
                ..Default::default()
            };
            reckon::app::open_store(&config).await?
        }
    })
}

/// `reckon reaudit`: the stored history under other contracts, streamed to stdout.
async fn reaudit(args: cli::ReauditArgs) -> anyhow::Result<ExitCode> {
    use std::sync::Arc;
    let load = |dir: &std::path::Path| -> anyhow::Result<Arc<reckon::contract::Contracts>> {
        let contracts = reckon::contract::load_dir(dir)
            .with_context(|| format!("loading the contracts in {}", dir.display()))?;
        Ok(Arc::new(reckon::contract::Contracts::new(contracts)))
    };
    let proposed = load(&args.contracts)?;
    let baseline = load(&args.baseline)?;
    let store = open_for_reading(&args.data_dir, &args.store).await?;
    let now = reckon::clock::wall_now();
    let since = args.since.map(|s| s.resolve(now));
    let options = reckon::reaudit::Options {
        since,
        now,
        page: args.page,
    };
    let stdout = std::io::stdout();
    let mut printer =
        reckon::reaudit::Printer::new(std::io::BufWriter::new(stdout.lock()), args.format);
    printer.begin(
        &args.baseline.display().to_string(),
        &args.contracts.display().to_string(),
        since.map(reckon::codec::rfc3339).as_deref(),
    )?;
    let totals =
        reckon::reaudit::run(&store, baseline, proposed, &options, |c| printer.change(c)).await?;
    printer.end(&totals)?;
    Ok(ExitCode::SUCCESS)
}

/// The escalation queue, worked from a terminal against a running server.
async fn escalations(cmd: cli::EscalationsCmd) -> anyhow::Result<ExitCode> {
    let http = reqwest::Client::new();
    let base = format!("{}/api/v1/escalations", cmd.server);
    let request = match &cmd.action {
        EscalationAction::List { .. } => return list_escalations(&http, &cmd, &base).await,
        EscalationAction::Show { id } => http.get(format!("{base}/{id}")),
        EscalationAction::Claim { id, by, take_over } => http
            .post(format!("{base}/{id}/claim"))
            .json(&serde_json::json!({ "by": by, "override": take_over })),
        EscalationAction::Resolve {
            id,
            by,
            resolution,
            note,
            take_over,
        } => http
            .post(format!("{base}/{id}/resolve"))
            .json(&serde_json::json!({
                "by": by,
                "resolution": resolution,
                "note": note,
                "override": take_over,
            })),
    };
    let body = match answer(request, &cmd.server, cmd.token.as_deref()).await? {
        Ok(body) => body,
        Err(failed) => return Ok(failed),
    };
    match (&cmd.action, cmd.json) {
        // What changed, in a line; the whole answer (the evidence bundle) with --json or show.
        (EscalationAction::Claim { .. } | EscalationAction::Resolve { .. }, false) => {
            let e: EscalationDoc =
                serde_json::from_value(body).context("decoding the escalation")?;
            let who = match e.status.as_str() {
                "claimed" => format!(" by {}", e.claimed_by.as_deref().unwrap_or("?")),
                "resolved" => format!(
                    " by {}: {}",
                    e.resolved_by.as_deref().unwrap_or("?"),
                    e.resolution.as_deref().unwrap_or("")
                ),
                _ => String::new(),
            };
            println!("{} {}{who} (intent {})", e.id, e.status, e.intent_id);
        }
        _ => println!("{}", serde_json::to_string_pretty(&body)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// Sends one request of `reckon escalations` or `reckon intents` with its token: the answer's
/// JSON body, or, when the server refused, the refusal printed and the exit code to leave with.
async fn answer(
    request: reqwest::RequestBuilder,
    server: &str,
    token: Option<&str>,
) -> anyhow::Result<Result<serde_json::Value, ExitCode>> {
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    let response = request
        .send()
        .await
        .with_context(|| format!("reaching reckon at {server}"))?;
    let status = response.status();
    let body: serde_json::Value = response
        .json()
        .await
        .context("reading the server's answer")?;
    if !status.is_success() {
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("unexpected answer");
        eprintln!("reckon: {status}: {message}");
        return Ok(Err(ExitCode::FAILURE));
    }
    Ok(Ok(body))
}

/// Every page of the queue (of the filters), following the cursor so the list is never cut
/// short, then in the queue page's order: waiting work (open, claimed, or no status asked) the
/// most severe first, then the oldest; history (resolved, withdrawn) the newest first.
async fn list_escalations(
    http: &reqwest::Client,
    cmd: &cli::EscalationsCmd,
    base: &str,
) -> anyhow::Result<ExitCode> {
    use reckon::model::{EscalationStatus, Severity};
    let EscalationAction::List {
        status,
        tool,
        severity,
    } = &cmd.action
    else {
        unreachable!("only a list is listed");
    };
    let mut query: Vec<(&str, String)> = vec![("limit", "1000".into())];
    if let Some(s) = status {
        query.push(("status", s.as_str().into()));
    }
    if let Some(t) = tool {
        query.push(("tool", t.clone()));
    }
    if let Some(s) = severity {
        query.push(("severity", s.as_str().into()));
    }
    let mut all: Vec<EscalationDoc> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut page = query.clone();
        if let Some(c) = &cursor {
            page.push(("cursor", c.clone()));
        }
        let url = reqwest::Url::parse_with_params(base, &page).context("the server URL")?;
        let body = match answer(http.get(url), &cmd.server, cmd.token.as_deref()).await? {
            Ok(body) => body,
            Err(failed) => return Ok(failed),
        };
        let items: Vec<EscalationDoc> = serde_json::from_value(body["items"].clone())
            .context("decoding the escalation list")?;
        let more = !items.is_empty();
        all.extend(items);
        match body["next_cursor"].as_str() {
            Some(c) if more => cursor = Some(c.to_string()),
            _ => break,
        }
    }
    let opened = |e: &EscalationDoc| reckon::codec::parse_rfc3339(&e.opened_at);
    let rank = |e: &EscalationDoc| Severity::parse(&e.severity);
    if matches!(
        status,
        Some(EscalationStatus::Resolved | EscalationStatus::Withdrawn)
    ) {
        all.sort_by(|a, b| (opened(b), &b.id).cmp(&(opened(a), &a.id)));
    } else {
        all.sort_by(|a, b| (rank(b), opened(a), &a.id).cmp(&(rank(a), opened(b), &b.id)));
    }
    if cmd.json {
        for e in &all {
            println!("{}", serde_json::to_string(e)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        println!("no escalations");
        return Ok(ExitCode::SUCCESS);
    }
    let width = all.iter().map(|e| e.id.len()).max().unwrap_or(2).max(2);
    let intent_width = all
        .iter()
        .map(|e| e.intent_id.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:<width$}  {:<9}  {:<8}  {:<intent_width$}  {:<30}  FINDINGS",
        "ID", "STATUS", "SEVERITY", "INTENT", "OPENED"
    );
    for e in &all {
        let kinds: Vec<&str> = e.findings.iter().map(|f| f.kind.as_str()).collect();
        println!(
            "{:<width$}  {:<9}  {:<8}  {:<intent_width$}  {:<30}  {}",
            e.id,
            e.status,
            e.severity,
            e.intent_id,
            e.opened_at,
            kinds.join(",")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `reckon intents show ID`: the verdict, as a person reads it (or the server's JSON).
async fn intents(cmd: cli::IntentsCmd) -> anyhow::Result<ExitCode> {
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/intents/{}", cmd.server, cmd.id);
    let body = match answer(http.get(url), &cmd.server, cmd.token.as_deref()).await? {
        Ok(body) => body,
        Err(failed) => return Ok(failed),
    };
    if cmd.json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(ExitCode::SUCCESS);
    }
    let s = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    println!(
        "{}  {}  {} -> {}",
        s(&body["intent_id"]),
        s(&body["tool"]),
        s(&body["state"]),
        s(&body["decision"])
    );
    if !body["escalation_id"].is_null() {
        println!("escalated: {}", s(&body["escalation_id"]));
    } else if !body["safe_retry_until"].is_null() {
        println!(
            "a same-key retry is safe until {}",
            s(&body["safe_retry_until"])
        );
    }
    let list = |key: &str| body[key].as_array().cloned().unwrap_or_default();
    let attempts = list("attempts");
    println!("attempts ({}):", attempts.len());
    for a in &attempts {
        println!(
            "  {}  {:<9}  key {}  http {}  {}  object {} {}",
            s(&a["start"]),
            s(&a["class"]),
            s(&a["idempotency_key"]),
            s(&a["http_status"]),
            s(&a["error_type"]),
            s(&a["object_id"]),
            s(&a["object_status"])
        );
    }
    let objects = list("objects");
    if !objects.is_empty() {
        println!("objects ({}):", objects.len());
        for o in &objects {
            println!(
                "  {}  {}  {} {}  target {}",
                s(&o["object_id"]),
                s(&o["status"]),
                s(&o["amount"]),
                s(&o["currency"]),
                s(&o["target"])
            );
        }
    }
    let findings = list("findings");
    if !findings.is_empty() {
        println!("findings ({}):", findings.len());
        for f in &findings {
            println!(
                "  {:<8}  {}  {}",
                s(&f["severity"]),
                s(&f["kind"]),
                s(&f["detail"])
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
