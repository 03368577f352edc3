//! The command line. The clap types stay in this file: they are parsed once, layered with the
//! `RECKON_*` environment and the config file, and handed out as the plain `Command`.
//!
//! Precedence for every setting: flag > environment variable > config file > default.
//!
//! The environment is read through a lookup function rather than clap's `env` so that the same
//! code path runs in production (`parse`) and in tests (`parse_with_env`, with a map), without
//! tests racing on the process environment. `reckon serve`'s flags, their variables and their
//! help (defaults included) are made from the table of settings (`config/settings.rs`); the other
//! commands' flags that are settings (`--data-dir`, `--store`, ...) take theirs from `SETTINGS`.

use crate::config::file::{self, ConfigFileError};
use crate::config::value::{self, ValueError};
use crate::config::{settings, Config, LogFormat, Setting, StoreConfig, SETTINGS};
use crate::model::{Dur, EscalationStatus, Severity, Timestamp};
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Plain results
// ---------------------------------------------------------------------------------------------

/// What the user asked for, with every setting resolved.
// Made once per process: boxing the large `Config` buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Serve(Config),
    Report(ReportArgs),
    Escalations(EscalationsCmd),
    Intents(IntentsCmd),
    Demo(DemoArgs),
    Loadgen(crate::loadgen::LoadgenArgs),
    /// Validate the contracts in `dir` and list them.
    CheckContracts {
        dir: PathBuf,
    },
    Reaudit(ReauditArgs),
}

/// `reckon reaudit`: stored history audited under `contracts`, compared with `baseline`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReauditArgs {
    pub data_dir: PathBuf,
    pub store: StoreConfig,
    /// The proposed contracts.
    pub contracts: PathBuf,
    /// The contracts the history is compared under now (the configured contracts directory).
    pub baseline: PathBuf,
    /// `None`: the whole history.
    pub since: Option<Since>,
    pub format: crate::reaudit::Format,
    /// Intents per page.
    pub page: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportArgs {
    pub data_dir: PathBuf,
    pub store: StoreConfig,
    pub since: Since,
    pub format: ReportFormat,
}

/// The start of a report window. `Ago` is kept relative so the caller resolves it against its own
/// clock (`Since::resolve`), keeping parsing free of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    Ago(Dur),
    At(Timestamp),
}

impl Since {
    pub fn resolve(self, now: Timestamp) -> Timestamp {
        match self {
            Since::Ago(d) => now - d,
            Since::At(t) => t,
        }
    }
}

impl Default for Since {
    fn default() -> Self {
        Since::Ago(Dur::hours(24))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportFormat {
    #[default]
    Text,
    Json,
    Csv,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EscalationsCmd {
    /// Base URL of the reckon API, without a trailing slash (default `http://127.0.0.1:8080`).
    pub server: String,
    /// Sent as `Authorization: Bearer` when the server has `[[auth.token]]`s.
    pub token: Option<String>,
    pub action: EscalationAction,
    /// The server's JSON instead of lines for a person (a list: one escalation per line).
    pub json: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EscalationAction {
    List {
        status: Option<EscalationStatus>,
        tool: Option<String>,
        severity: Option<Severity>,
    },
    Show {
        id: String,
    },
    /// `by`: `None` with a token (the server records the token's name). `take_over`: act on
    /// an escalation someone else holds (the API's `"override": true`, recorded).
    Claim {
        id: String,
        by: Option<String>,
        take_over: bool,
    },
    Resolve {
        id: String,
        by: Option<String>,
        resolution: String,
        note: Option<String>,
        take_over: bool,
    },
}

/// `reckon intents`: one intent's verdict, from a running reckon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentsCmd {
    pub server: String,
    pub token: Option<String>,
    /// The intent whose verdict to show.
    pub id: String,
    pub json: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoArgs {
    /// Base URL of the reckon to drive; `None`: the demo's own default.
    pub target: Option<String>,
    /// Run the scenarios once and exit instead of looping.
    pub once: bool,
    /// Contracts for the stub downstream; `None`: the demo's built-in ones.
    pub contracts_dir: Option<PathBuf>,
    /// The target's OTLP gRPC endpoint; `None`: the target's host on port 4317.
    pub otlp: Option<String>,
    /// The secret the target verifies Stripe webhooks with, if it has one.
    pub stripe_webhook_secret: Option<String>,
    /// Run only the scenarios whose name contains this text.
    pub only: Option<String>,
    /// Without `--target`: an Alertmanager base URL the in-process reckon pushes its
    /// escalations to (a `[[notify]] kind = "alertmanager"` target).
    pub alertmanager: Option<String>,
}

pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage, or `--help` / `--version`: print it (`clap::Error::print`) and exit with
    /// `exit_code()` (0 for help and version).
    #[error("{0}")]
    Usage(#[from] clap::Error),
    #[error("environment variable {var}: {error}")]
    Env {
        var: &'static str,
        error: ValueError,
    },
    #[error(transparent)]
    ConfigFile(#[from] ConfigFileError),
}

impl CliError {
    /// The process exit code for this error: clap's for usage, 2 (usage error) otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(e) => e.exit_code(),
            _ => 2,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

/// Parses the process arguments and environment.
pub fn parse() -> Result<Command, CliError> {
    parse_from(std::env::args_os())
}

/// Parses `args` (the first is the program name) against the process environment.
pub fn parse_from<I, T>(args: I) -> Result<Command, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    parse_with_env(args, |name| {
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    })
}

/// Parses `args` with `env` standing in for the process environment.
pub fn parse_with_env<I, T>(
    args: I,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Command, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args)?;
    let env = Env(&env);
    Ok(match cli.command {
        Sub::Serve(a) => Command::Serve(a.resolve(&env)?),
        Sub::Report(a) => Command::Report(a.resolve(&env)?),
        Sub::Escalations(a) => Command::Escalations(a.resolve(&env)?),
        Sub::Intents(a) => Command::Intents(a.resolve(&env)?),
        Sub::Demo(a) => Command::Demo(a.resolve(&env)?),
        Sub::Loadgen(a) => Command::Loadgen(a.resolve()),
        Sub::CheckContracts(a) => Command::CheckContracts {
            dir: a.resolve(&env)?,
        },
        Sub::Reaudit(a) => Command::Reaudit(a.resolve(&env)?),
    })
}

// ---------------------------------------------------------------------------------------------
// Layering
// ---------------------------------------------------------------------------------------------

const ENV_CONFIG: &str = "RECKON_CONFIG";
const ENV_TOKEN: &str = "RECKON_TOKEN";
const ENV_SERVER: &str = "RECKON_SERVER";
const ENV_DEMO_OTLP: &str = "RECKON_DEMO_OTLP";
const ENV_DEMO_ONLY: &str = "RECKON_DEMO_ONLY";
const ENV_DEMO_ALERTMANAGER: &str = "RECKON_DEMO_ALERTMANAGER";

struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Env<'_> {
    /// The variable's value, parsed. An empty variable counts as unset: `FOO=` is how compose
    /// files and shells blank a setting, and it should fall through to the file or default.
    fn get<T>(
        &self,
        var: &'static str,
        parse: impl Fn(&str) -> Result<T, ValueError>,
    ) -> Result<Option<T>, CliError> {
        match (self.0)(var) {
            Some(v) if !v.is_empty() => parse(&v)
                .map(Some)
                .map_err(|error| CliError::Env { var, error }),
            _ => Ok(None),
        }
    }

    /// The flag if given, else the variable. The variable is not even parsed when the flag wins,
    /// as with clap's own `env`.
    fn or<T>(
        &self,
        flag: Option<T>,
        var: &'static str,
        parse: impl Fn(&str) -> Result<T, ValueError>,
    ) -> Result<Option<T>, CliError> {
        match flag {
            Some(v) => Ok(Some(v)),
            None => self.get(var, parse),
        }
    }

    /// A setting of the table (`config/settings.rs`): the flag if given, else its variable.
    fn setting<T>(&self, flag: Option<T>, setting: &Setting<T>) -> Result<Option<T>, CliError> {
        self.or(flag, setting.env, setting.parse)
    }

    /// `Config::default()` with the config file (from `--config` or `RECKON_CONFIG`) applied.
    /// Only `serve` resolves the file's tokens (`token_env`): `report` and the other readers of
    /// the file must work where the server's secrets are not set.
    fn base(&self, config: Option<PathBuf>, tokens: bool) -> Result<Config, CliError> {
        let mut cfg = Config::default();
        if let Some(path) = self.or(config, ENV_CONFIG, path)? {
            let env = tokens.then_some(self.0);
            file::load_file_env(&path, env)?.apply(&mut cfg);
        }
        Ok(cfg)
    }
}

fn path(s: &str) -> Result<PathBuf, ValueError> {
    Ok(PathBuf::from(s))
}

/// A setting's value as clap holds it. The newtype keeps clap from reading `Option<Option<_>>`
/// (a setting that can be turned off, like `--evict-after never`) as a flag with an optional
/// value.
#[derive(Clone, Debug)]
struct Flag<T>(T);

/// A setting's parser as a flag's value parser.
fn flag<T: Clone + Send + Sync + 'static>(
    parse: fn(&str) -> Result<T, ValueError>,
) -> impl Fn(&str) -> Result<Flag<T>, ValueError> + Clone + Send + Sync + 'static {
    move |s| parse(s).map(Flag)
}

// ---------------------------------------------------------------------------------------------
// clap types
// ---------------------------------------------------------------------------------------------

#[derive(Parser, Debug)]
#[command(
    name = "reckon",
    version,
    about = "OTLP export target that audits AI-agent tool calls against downstream idempotency contracts",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Sub,
}

// Parsed once per process and immediately turned into `Command`: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Sub {
    /// Run the service: OTLP receivers, records and webhooks, audit engine, API and metrics.
    Serve(ServeCli),
    /// Print the audit report from the store.
    Report(ReportCli),
    /// Work the escalation queue of a running reckon.
    Escalations(EscalationsCli),
    /// Look at intents of a running reckon.
    Intents(IntentsCli),
    /// Run the demo scenarios against a reckon.
    Demo(DemoCli),
    /// Drive a running reckon with OTLP load and report throughput, refusals, verdict latency
    /// and its memory.
    Loadgen(LoadgenCli),
    /// Validate the contract files and list them.
    CheckContracts(CheckContractsCli),
    /// Audit the stored history under other contracts and print what would change (changes
    /// nothing).
    Reaudit(ReauditCli),
}

/// `reckon serve`'s flags from the table in `config/settings.rs`: one per setting, in the
/// table's order, after `--config`.
macro_rules! serve_cli {
    ($(
        $(#[doc = $doc:literal])*
        $(#[arg $arg:tt])*
        $name:ident: $ty:ty = $default:tt { $($rest:tt)* }
    )*) => {
        #[derive(Args, Debug)]
        struct ServeCli {
            /// TOML config file; flags and environment variables override it [env: RECKON_CONFIG]
            #[arg(long, value_name = "FILE", value_parser = value::parse_path)]
            config: Option<PathBuf>,
            $(
                #[arg(
                    long,
                    value_name = SETTINGS.$name.value_name,
                    value_parser = flag(SETTINGS.$name.parse),
                    help = SETTINGS.$name.help(),
                )]
                $(#[arg $arg])*
                $name: Option<Flag<$ty>>,
            )*
        }

        impl ServeCli {
            fn resolve(self, env: &Env) -> Result<Config, CliError> {
                let mut c = env.base(self.config, true)?;
                $(
                    if let Some(v) = env.setting(self.$name.map(|f| f.0), &SETTINGS.$name)? {
                        c.$name = v;
                    }
                )*
                Ok(c)
            }
        }
    };
}

settings::with_settings!(serve_cli);

#[derive(Args, Debug)]
struct ReportCli {
    /// TOML config file (for data_dir and store) [env: RECKON_CONFIG]
    #[arg(long, value_name = "FILE", value_parser = value::parse_path)]
    config: Option<PathBuf>,
    #[arg(
        long,
        value_name = SETTINGS.data_dir.value_name,
        value_parser = SETTINGS.data_dir.parse,
        help = SETTINGS.data_dir.help(),
    )]
    data_dir: Option<PathBuf>,
    #[arg(
        long,
        value_name = SETTINGS.store.value_name,
        value_parser = SETTINGS.store.parse,
        help = SETTINGS.store.help(),
    )]
    store: Option<StoreConfig>,
    /// Window start: a duration back from now (`24h`, `7d`) or an RFC 3339 time [default: 24h]
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    since: Option<Since>,
    /// `text`, `json` or `csv` [default: text]
    #[arg(long, value_name = "FORMAT", value_parser = parse_report_format)]
    format: Option<ReportFormat>,
}

impl ReportCli {
    fn resolve(self, env: &Env) -> Result<ReportArgs, CliError> {
        let base = env.base(self.config, false)?;
        Ok(ReportArgs {
            data_dir: env
                .setting(self.data_dir, &SETTINGS.data_dir)?
                .unwrap_or(base.data_dir),
            store: env
                .setting(self.store, &SETTINGS.store)?
                .unwrap_or(base.store),
            since: self.since.unwrap_or_default(),
            format: self.format.unwrap_or_default(),
        })
    }
}

/// `24h` (back from now) or an RFC 3339 instant.
pub fn parse_since(s: &str) -> Result<Since, String> {
    let t = s.trim();
    if let Some(d) = crate::contract::parse_duration(t) {
        return Ok(Since::Ago(d));
    }
    if let Some(ts) = crate::codec::parse_rfc3339(t) {
        return Ok(Since::At(ts));
    }
    Err(format!(
        "invalid time {s:?}: expected a duration back from now (\"24h\", \"7d\", \"90m\") or RFC 3339 (\"2025-01-31T00:00:00Z\")"
    ))
}

fn parse_report_format(s: &str) -> Result<ReportFormat, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(ReportFormat::Text),
        "json" => Ok(ReportFormat::Json),
        "csv" => Ok(ReportFormat::Csv),
        _ => Err(format!(
            "invalid format {s:?}: expected \"text\", \"json\" or \"csv\""
        )),
    }
}

fn parse_severity(s: &str) -> Result<Severity, String> {
    Severity::parse(s.trim()).ok_or_else(|| {
        format!("invalid severity {s:?}: expected \"medium\", \"high\" or \"critical\"")
    })
}

fn parse_status(s: &str) -> Result<EscalationStatus, String> {
    EscalationStatus::parse(s.trim()).ok_or_else(|| {
        format!(
            "invalid status {s:?}: expected \"open\", \"claimed\", \"resolved\" or \"withdrawn\""
        )
    })
}

#[derive(Args, Debug)]
struct EscalationsCli {
    #[arg(
        long,
        global = true,
        value_name = "URL",
        value_parser = value::parse_http_url,
        help = format!("Base URL of the reckon API [default: {DEFAULT_SERVER}] [env: {ENV_SERVER}]"),
    )]
    server: Option<String>,
    /// The server's token (read, or operator to claim and resolve); prefer the variable,
    /// arguments are visible to other users [env: RECKON_TOKEN]
    #[arg(long, global = true, value_name = "TOKEN", value_parser = value::parse_secret)]
    token: Option<String>,
    /// Print the server's JSON (a list: one escalation per line) instead of lines for a person
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: EscalationsSub,
}

#[derive(Args, Debug)]
struct IntentsCli {
    #[arg(
        long,
        global = true,
        value_name = "URL",
        value_parser = value::parse_http_url,
        help = format!("Base URL of the reckon API [default: {DEFAULT_SERVER}] [env: {ENV_SERVER}]"),
    )]
    server: Option<String>,
    /// The server's token (read); prefer the variable, arguments are visible to other users
    /// [env: RECKON_TOKEN]
    #[arg(long, global = true, value_name = "TOKEN", value_parser = value::parse_secret)]
    token: Option<String>,
    /// Print the verdict as the server's JSON
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: IntentsSub,
}

#[derive(Subcommand, Debug)]
enum IntentsSub {
    /// Show one intent's verdict: state, decision, attempts, objects, findings.
    Show {
        #[arg(value_parser = value::parse_non_empty)]
        id: String,
    },
}

impl IntentsCli {
    fn resolve(self, env: &Env) -> Result<IntentsCmd, CliError> {
        let server = env
            .or(self.server, ENV_SERVER, value::parse_http_url)?
            .unwrap_or_else(|| DEFAULT_SERVER.to_string());
        let token = env.or(self.token, ENV_TOKEN, value::parse_secret)?;
        let IntentsSub::Show { id } = self.action;
        Ok(IntentsCmd {
            server,
            token,
            id,
            json: self.json,
        })
    }
}

#[derive(Subcommand, Debug)]
enum EscalationsSub {
    /// List escalations in the queue page's order: waiting work most severe first, then
    /// oldest; resolved and withdrawn ones newest first.
    List {
        /// Only this status: `open`, `claimed`, `resolved` or `withdrawn`
        #[arg(long, value_parser = parse_status)]
        status: Option<EscalationStatus>,
        /// Only this tool's
        #[arg(long, value_parser = value::parse_non_empty)]
        tool: Option<String>,
        /// Only this severity: `medium`, `high` or `critical`
        #[arg(long, value_parser = parse_severity)]
        severity: Option<Severity>,
    },
    /// Show one escalation with its evidence.
    Show {
        #[arg(value_parser = value::parse_non_empty)]
        id: String,
    },
    /// Take an open escalation.
    Claim {
        #[arg(value_parser = value::parse_non_empty)]
        id: String,
        /// Who takes it (with --token: the token's name, which is what the server records)
        #[arg(long, value_parser = value::parse_non_empty)]
        by: Option<String>,
        /// Take it from whoever holds it (recorded on the escalation as an override)
        #[arg(long = "override")]
        take_over: bool,
    },
    /// Close an escalation with what was done.
    Resolve {
        #[arg(value_parser = value::parse_non_empty)]
        id: String,
        /// Who resolves it (with --token: the token's name, which is what the server records)
        #[arg(long, value_parser = value::parse_non_empty)]
        by: Option<String>,
        /// What was decided (e.g. `refunded_once`, `reversed_duplicate`)
        #[arg(long, value_parser = value::parse_non_empty)]
        resolution: String,
        /// Free text for the audit trail
        #[arg(long)]
        note: Option<String>,
        /// Resolve it though someone else holds it (recorded on the escalation as an override)
        #[arg(long = "override")]
        take_over: bool,
    },
}

impl EscalationsCli {
    fn resolve(self, env: &Env) -> Result<EscalationsCmd, CliError> {
        let server = env
            .or(self.server, ENV_SERVER, value::parse_http_url)?
            .unwrap_or_else(|| DEFAULT_SERVER.to_string());
        let token = env.or(self.token, ENV_TOKEN, value::parse_secret)?;
        let action = match self.action {
            EscalationsSub::List {
                status,
                tool,
                severity,
            } => EscalationAction::List {
                status,
                tool,
                severity,
            },
            EscalationsSub::Show { id } => EscalationAction::Show { id },
            EscalationsSub::Claim { id, by, take_over } => {
                EscalationAction::Claim { id, by, take_over }
            }
            EscalationsSub::Resolve {
                id,
                by,
                resolution,
                note,
                take_over,
            } => EscalationAction::Resolve {
                id,
                by,
                resolution,
                // An empty note is no note.
                note: note.filter(|n| !n.trim().is_empty()),
                take_over,
            },
        };
        Ok(EscalationsCmd {
            server,
            token,
            action,
            json: self.json,
        })
    }
}

#[derive(Args, Debug)]
struct DemoCli {
    /// Base URL of the reckon to drive
    #[arg(long, value_name = "URL", value_parser = value::parse_http_url)]
    target: Option<String>,
    /// Run the scenarios once and exit
    #[arg(long)]
    once: bool,
    /// Contracts for the stub downstream [env: RECKON_CONTRACTS_DIR]
    #[arg(long, visible_alias = "contracts", value_name = "DIR", value_parser = value::parse_path)]
    contracts_dir: Option<PathBuf>,
    /// With --target: the target's OTLP gRPC endpoint [default: the target's host, port 4317] [env: RECKON_DEMO_OTLP]
    #[arg(long, value_name = "URL", value_parser = value::parse_http_url)]
    otlp: Option<String>,
    /// With --target: the secret it verifies Stripe webhooks with [env: RECKON_STRIPE_WEBHOOK_SECRET]
    #[arg(long, value_name = "SECRET", value_parser = value::parse_secret)]
    stripe_webhook_secret: Option<String>,
    /// Run only the scenarios whose name contains TEXT [env: RECKON_DEMO_ONLY]
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
    /// Without --target: push the in-process reckon's escalations to this Alertmanager
    /// (http://HOST:9093) [env: RECKON_DEMO_ALERTMANAGER]
    #[arg(long, value_name = "URL", value_parser = value::parse_http_url, conflicts_with = "target")]
    alertmanager: Option<String>,
}

impl DemoCli {
    fn resolve(self, env: &Env) -> Result<DemoArgs, CliError> {
        Ok(DemoArgs {
            target: self.target,
            once: self.once,
            contracts_dir: env.setting(self.contracts_dir, &SETTINGS.contracts_dir)?,
            otlp: env.or(self.otlp, ENV_DEMO_OTLP, value::parse_http_url)?,
            stripe_webhook_secret: env.or(
                self.stripe_webhook_secret,
                SETTINGS.stripe_webhook_secret.env,
                value::parse_secret,
            )?,
            only: env.or(self.only, ENV_DEMO_ONLY, |s| Ok(s.to_string()))?,
            alertmanager: env.or(
                self.alertmanager,
                ENV_DEMO_ALERTMANAGER,
                value::parse_http_url,
            )?,
        })
    }
}

#[derive(Args, Debug)]
struct LoadgenCli {
    /// reckon's API base URL (records, verdicts, /metrics)
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080", value_parser = value::parse_http_url)]
    api: String,
    /// OTLP/HTTP base URL
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:4318", value_parser = value::parse_http_url)]
    otlp_http: String,
    /// OTLP/gRPC endpoint
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:4317", value_parser = value::parse_http_url)]
    otlp_grpc: String,
    /// Transport for spans (without --compare)
    #[arg(long, value_enum, default_value_t = TransportArg::Grpc)]
    transport: TransportArg,
    /// Shares of each kind: noise (non-tool spans), completed, open (timed-out refunds), records
    /// (that settle open refunds)
    #[arg(long, value_name = "KIND=WEIGHT,...", default_value = "noise=50,completed=20,open=20,records=10", value_parser = crate::loadgen::Mix::parse)]
    mix: crate::loadgen::Mix,
    /// Run four phases (non-tool spans over HTTP, then over gRPC, then the mix over each) and
    /// report every rate as a ratio against the first
    #[arg(long)]
    compare: bool,
    /// How long each phase runs
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = value::parse_positive_duration)]
    duration: std::time::Duration,
    /// Spans per export
    #[arg(long, value_name = "N", default_value = "1000", value_parser = value::parse_count)]
    batch: usize,
    /// Exports in flight at once
    #[arg(long, value_name = "N", default_value = "8", value_parser = value::parse_count)]
    concurrency: usize,
    /// Follow one tool intent in N to its verdict for the latency figures
    #[arg(long, value_name = "N", default_value = "64", value_parser = value::parse_count)]
    sample_every: usize,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum TransportArg {
    Http,
    Grpc,
}

impl LoadgenCli {
    fn resolve(self) -> crate::loadgen::LoadgenArgs {
        use crate::loadgen::{Kind, Mix, Phase, Transport};
        let transport = match self.transport {
            TransportArg::Http => Transport::Http,
            TransportArg::Grpc => Transport::Grpc,
        };
        let phase = |name: &str, transport, mix: &Mix| Phase {
            name: name.to_string(),
            transport,
            mix: mix.clone(),
        };
        let phases = if self.compare {
            let drop = Mix::only(Kind::Noise);
            vec![
                phase("drop", Transport::Http, &drop),
                phase("drop", Transport::Grpc, &drop),
                phase("mix", Transport::Http, &self.mix),
                phase("mix", Transport::Grpc, &self.mix),
            ]
        } else {
            vec![phase("mix", transport, &self.mix)]
        };
        crate::loadgen::LoadgenArgs {
            api: self.api,
            otlp_http: self.otlp_http,
            otlp_grpc: self.otlp_grpc,
            phases,
            batch: self.batch,
            concurrency: self.concurrency,
            duration: self.duration,
            sample_every: self.sample_every as u64,
            json: self.json,
        }
    }
}

#[derive(Args, Debug)]
struct CheckContractsCli {
    /// TOML config file (for contracts_dir) [env: RECKON_CONFIG]
    #[arg(long, value_name = "FILE", value_parser = value::parse_path)]
    config: Option<PathBuf>,
    #[arg(
        long = "contracts",
        visible_alias = "contracts-dir",
        value_name = SETTINGS.contracts_dir.value_name,
        value_parser = SETTINGS.contracts_dir.parse,
        help = SETTINGS.contracts_dir.help(),
    )]
    contracts_dir: Option<PathBuf>,
}

impl CheckContractsCli {
    fn resolve(self, env: &Env) -> Result<PathBuf, CliError> {
        let base = env.base(self.config, false)?;
        Ok(env
            .setting(self.contracts_dir, &SETTINGS.contracts_dir)?
            .unwrap_or(base.contracts_dir))
    }
}

#[derive(Args, Debug)]
struct ReauditCli {
    /// The proposed contracts directory
    #[arg(long = "contracts", value_name = "DIR", value_parser = value::parse_path)]
    contracts: PathBuf,
    #[arg(long, value_name = "DIR", value_parser = value::parse_path, help = baseline_help())]
    baseline: Option<PathBuf>,
    /// TOML config file (for data_dir, store and contracts_dir) [env: RECKON_CONFIG]
    #[arg(long, value_name = "FILE", value_parser = value::parse_path)]
    config: Option<PathBuf>,
    #[arg(
        long,
        value_name = SETTINGS.data_dir.value_name,
        value_parser = SETTINGS.data_dir.parse,
        help = SETTINGS.data_dir.help(),
    )]
    data_dir: Option<PathBuf>,
    #[arg(
        long,
        value_name = SETTINGS.store.value_name,
        value_parser = SETTINGS.store.parse,
        help = SETTINGS.store.help(),
    )]
    store: Option<StoreConfig>,
    /// Only intents active since: a duration back from now (`30d`) or an RFC 3339 time
    /// [default: the whole history]
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    since: Option<Since>,
    /// `text`, `json` or `csv` [default: text]
    #[arg(long, value_name = "FORMAT", value_parser = parse_reaudit_format)]
    format: Option<crate::reaudit::Format>,
    /// Intents listed at once (1 to 1000), audited with every intent linked to them [default: 500]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1000))]
    page: Option<u16>,
}

impl ReauditCli {
    fn resolve(self, env: &Env) -> Result<ReauditArgs, CliError> {
        let base = env.base(self.config, false)?;
        Ok(ReauditArgs {
            data_dir: env
                .setting(self.data_dir, &SETTINGS.data_dir)?
                .unwrap_or(base.data_dir),
            store: env
                .setting(self.store, &SETTINGS.store)?
                .unwrap_or(base.store),
            contracts: self.contracts,
            baseline: match self.baseline {
                Some(b) => b,
                None => env
                    .setting(None, &SETTINGS.contracts_dir)?
                    .unwrap_or(base.contracts_dir),
            },
            since: self.since,
            format: self.format.unwrap_or_default(),
            page: self.page.map(usize::from).unwrap_or(500),
        })
    }
}

fn baseline_help() -> String {
    let contracts = &SETTINGS.contracts_dir;
    format!(
        "The contracts to compare with [default: the configured contracts directory, {}] [env: {}]",
        contracts.default.unwrap_or_default(),
        contracts.env
    )
}

fn parse_reaudit_format(s: &str) -> Result<crate::reaudit::Format, String> {
    match s {
        "text" => Ok(crate::reaudit::Format::Text),
        "json" => Ok(crate::reaudit::Format::Json),
        "csv" => Ok(crate::reaudit::Format::Csv),
        other => Err(format!(
            "unknown format {other:?}: expected text, json or csv"
        )),
    }
}

#[cfg(test)]
mod tests;
