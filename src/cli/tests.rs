use super::*;
use clap::CommandFactory;
use std::collections::HashMap;
use std::path::Path;

fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Command, CliError> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let argv = std::iter::once("reckon").chain(args.iter().copied());
    parse_with_env(argv, move |k| env.get(k).cloned())
}

fn serve(args: &[&str], env: &[(&str, &str)]) -> Config {
    match run(args, env) {
        Ok(Command::Serve(c)) => c,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn ch(host: &str) -> StoreConfig {
    StoreConfig::ClickHouse {
        url: format!("http://{host}:8123"),
        user: "default".into(),
        password: String::new(),
        database: "default".into(),
    }
}

/// The config file's `[[notify]]` table (file only: no flag or variable overrides it).
fn am() -> crate::notify::Target {
    crate::notify::Target::new("alertmanager", "http://am:9093", None, None).unwrap()
}

/// Every setting, in the three layers, with a different value in each.
struct Layers {
    _dir: tempfile::TempDir,
    file: PathBuf,
    dir: PathBuf,
}

impl Layers {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("reckon.toml");
        std::fs::write(
            &file,
            r#"
grpc_addr = "127.0.0.1:1001"
http_addr = "127.0.0.1:1002"
api_addr = "127.0.0.1:1003"
data_dir = "/file/data"
contracts_dir = "/file/contracts"
store = "clickhouse://file"
stripe_webhook_secret = "file-secret"
stripe_tolerance = "1m"
max_request_bytes = 1001
max_concurrent_exports = 1
max_connections = 11
header_read_timeout = "11s"
body_read_timeout = "12s"
idle_timeout = "111s"
http2_keepalive = "1h"
max_concurrent_streams = 1
shutdown_grace = "1s"
evict_after = "never"
retention = "30d"
route_filter_max = "1GiB"
log_format = "json"
log_filter = "warn"
self_traces = "http://file-otlp.example:4317"
self_traces_one_in = 10
public_url = "http://file.example"
tls_cert = "/file/cert.pem"
tls_key = "/file/key.pem"

[[notify]]
kind = "alertmanager"
url = "http://am:9093"

[[auth.token]]
name = "ana"
token_env = "RECKON_TEST_TOKEN_ANA"
role = "operator"
"#,
        )
        .unwrap();
        Layers {
            dir: dir.path().to_path_buf(),
            _dir: dir,
            file,
        }
    }
}

const ENV: &[(&str, &str)] = &[
    ("RECKON_GRPC_ADDR", "127.0.0.1:2001"),
    ("RECKON_HTTP_ADDR", "127.0.0.1:2002"),
    ("RECKON_API_ADDR", "127.0.0.1:2003"),
    ("RECKON_DATA_DIR", "/env/data"),
    ("RECKON_CONTRACTS_DIR", "/env/contracts"),
    ("RECKON_STORE", "clickhouse://env"),
    ("RECKON_STRIPE_WEBHOOK_SECRET", "env-secret"),
    ("RECKON_STRIPE_TOLERANCE", "2m"),
    ("RECKON_MAX_REQUEST_BYTES", "2002"),
    ("RECKON_MAX_CONCURRENT_EXPORTS", "2"),
    ("RECKON_MAX_CONNECTIONS", "22"),
    ("RECKON_HEADER_READ_TIMEOUT", "22s"),
    ("RECKON_BODY_READ_TIMEOUT", "23s"),
    ("RECKON_IDLE_TIMEOUT", "222s"),
    ("RECKON_HTTP2_KEEPALIVE", "2h"),
    ("RECKON_MAX_CONCURRENT_STREAMS", "2"),
    ("RECKON_SHUTDOWN_GRACE", "2s"),
    ("RECKON_EVICT_AFTER", "2m"),
    ("RECKON_RETENTION", "60d"),
    ("RECKON_ROUTE_FILTER_MAX", "2GiB"),
    ("RECKON_LOG_FORMAT", "text"),
    ("RECKON_LOG_FILTER", "error"),
    ("RECKON_SELF_TRACES", "http://env-otlp.example:4317"),
    ("RECKON_SELF_TRACES_ONE_IN", "20"),
    ("RECKON_PUBLIC_URL", "http://env.example"),
    ("RECKON_TLS_CERT", "/env/cert.pem"),
    ("RECKON_TLS_KEY", "/env/key.pem"),
];

/// What `token_env` names in the file: read through the same lookup as every variable.
const TOKEN_ENV: (&str, &str) = ("RECKON_TEST_TOKEN_ANA", "ana-0123456789abcdef");

/// The file's `[[auth.token]]` (file only, like `[[notify]]`).
fn file_auth() -> crate::auth::AuthConfig {
    crate::auth::AuthConfig {
        tokens: vec![
            crate::auth::Token::new("ana", TOKEN_ENV.1, crate::auth::Role::Operator).unwrap(),
        ],
        metrics: crate::auth::MetricsAccess::Read,
    }
}

fn with_token(env: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    env.iter().copied().chain([TOKEN_ENV]).collect()
}

const FLAGS: &[&str] = &[
    "--grpc-addr=127.0.0.1:3001",
    "--http-addr=127.0.0.1:3002",
    "--api-addr=127.0.0.1:3003",
    "--data-dir=/flag/data",
    "--contracts=/flag/contracts",
    "--store=clickhouse://flag",
    "--stripe-webhook-secret=flag-secret",
    "--stripe-tolerance=3m",
    "--max-request-bytes=3KiB",
    "--max-concurrent-exports=3",
    "--max-connections=33",
    "--header-read-timeout=33s",
    "--body-read-timeout=34s",
    "--idle-timeout=333s",
    "--http2-keepalive=3h",
    "--max-concurrent-streams=3",
    "--shutdown-grace=3s",
    "--evict-after=3m",
    "--retention=90d",
    "--route-filter-max=3GiB",
    "--log-format=json",
    "--log-filter=debug",
    "--self-traces=http://flag-otlp.example:4317",
    "--self-traces-one-in=30",
    "--public-url=https://flag.example/reckon/",
    "--tls-cert=/flag/cert.pem",
    "--tls-key=/flag/key.pem",
];

#[test]
fn defaults_without_anything() {
    let c = serve(&["serve"], &[]);
    assert_eq!(c, Config::default());
    // DESIGN.md's defaults, spelled out so a wrong `Default` cannot pass by agreeing with itself.
    assert_eq!(c.grpc_addr.to_string(), "0.0.0.0:4317");
    assert_eq!(c.http_addr.to_string(), "0.0.0.0:4318");
    assert_eq!(c.api_addr.to_string(), "0.0.0.0:8080");
    assert_eq!(c.data_dir, std::path::PathBuf::from("./reckon-data"));
    assert_eq!(c.contracts_dir, std::path::PathBuf::from("./contracts"));
    assert_eq!(c.store, StoreConfig::Sqlite);
    assert_eq!(c.stripe_tolerance, std::time::Duration::from_secs(300));
    assert_eq!(c.stripe_webhook_secret, None);
    assert_eq!(c.evict_after, Some(std::time::Duration::from_secs(60)));
    assert_eq!(
        c.retention, None,
        "raw events are kept for ever unless told"
    );
}

#[test]
fn flag_beats_env_beats_file_beats_default() {
    let l = Layers::new();
    let config = format!("--config={}", l.file.display());

    let file_only = serve(&["serve", &config], &with_token(&[]));
    assert_eq!(
        file_only,
        Config {
            grpc_addr: addr("127.0.0.1:1001"),
            http_addr: addr("127.0.0.1:1002"),
            api_addr: addr("127.0.0.1:1003"),
            data_dir: "/file/data".into(),
            contracts_dir: "/file/contracts".into(),
            store: ch("file"),
            stripe_webhook_secret: Some("file-secret".into()),
            stripe_tolerance: Duration::from_secs(60),
            max_request_bytes: 1001,
            max_concurrent_exports: 1,
            max_connections: 11,
            header_read_timeout: Duration::from_secs(11),
            body_read_timeout: Duration::from_secs(12),
            idle_timeout: Duration::from_secs(111),
            http2_keepalive: Duration::from_secs(3600),
            max_concurrent_streams: 1,
            shutdown_grace: Duration::from_secs(1),
            evict_after: None,
            retention: Some(Duration::from_secs(30 * 86_400)),
            route_filter_max: 1 << 30,
            log_format: LogFormat::Json,
            log_filter: "warn".into(),
            self_traces: Some("http://file-otlp.example:4317".into()),
            self_traces_one_in: 10,
            public_url: Some("http://file.example".into()),
            notify: vec![am()],
            auth: file_auth(),
            tls_cert: Some("/file/cert.pem".into()),
            tls_key: Some("/file/key.pem".into()),
        }
    );

    let env_over_file = serve(&["serve", &config], &with_token(ENV));
    assert_eq!(
        env_over_file,
        Config {
            grpc_addr: addr("127.0.0.1:2001"),
            http_addr: addr("127.0.0.1:2002"),
            api_addr: addr("127.0.0.1:2003"),
            data_dir: "/env/data".into(),
            contracts_dir: "/env/contracts".into(),
            store: ch("env"),
            stripe_webhook_secret: Some("env-secret".into()),
            stripe_tolerance: Duration::from_secs(120),
            max_request_bytes: 2002,
            max_concurrent_exports: 2,
            max_connections: 22,
            header_read_timeout: Duration::from_secs(22),
            body_read_timeout: Duration::from_secs(23),
            idle_timeout: Duration::from_secs(222),
            http2_keepalive: Duration::from_secs(7200),
            max_concurrent_streams: 2,
            shutdown_grace: Duration::from_secs(2),
            evict_after: Some(Duration::from_secs(120)),
            retention: Some(Duration::from_secs(60 * 86_400)),
            route_filter_max: 2 << 30,
            log_format: LogFormat::Text,
            log_filter: "error".into(),
            self_traces: Some("http://env-otlp.example:4317".into()),
            self_traces_one_in: 20,
            public_url: Some("http://env.example".into()),
            notify: vec![am()],
            auth: file_auth(),
            tls_cert: Some("/env/cert.pem".into()),
            tls_key: Some("/env/key.pem".into()),
        }
    );

    let mut args = vec!["serve", config.as_str()];
    args.extend_from_slice(FLAGS);
    let flags_over_all = serve(&args, &with_token(ENV));
    assert_eq!(
        flags_over_all,
        Config {
            grpc_addr: addr("127.0.0.1:3001"),
            http_addr: addr("127.0.0.1:3002"),
            api_addr: addr("127.0.0.1:3003"),
            data_dir: "/flag/data".into(),
            contracts_dir: "/flag/contracts".into(),
            store: ch("flag"),
            stripe_webhook_secret: Some("flag-secret".into()),
            stripe_tolerance: Duration::from_secs(180),
            max_request_bytes: 3 << 10,
            max_concurrent_exports: 3,
            max_connections: 33,
            header_read_timeout: Duration::from_secs(33),
            body_read_timeout: Duration::from_secs(34),
            idle_timeout: Duration::from_secs(333),
            http2_keepalive: Duration::from_secs(10800),
            max_concurrent_streams: 3,
            shutdown_grace: Duration::from_secs(3),
            evict_after: Some(Duration::from_secs(180)),
            retention: Some(Duration::from_secs(90 * 86_400)),
            route_filter_max: 3 << 30,
            log_format: LogFormat::Json,
            log_filter: "debug".into(),
            self_traces: Some("http://flag-otlp.example:4317".into()),
            self_traces_one_in: 30,
            public_url: Some("https://flag.example/reckon".into()),
            notify: vec![am()],
            auth: file_auth(),
            tls_cert: Some("/flag/cert.pem".into()),
            tls_key: Some("/flag/key.pem".into()),
        }
    );

    // Flags over the environment alone, without a file (and so without its [[notify]]).
    let mut args = vec!["serve"];
    args.extend_from_slice(FLAGS);
    assert_eq!(
        serve(&args, ENV),
        Config {
            notify: Vec::new(),
            auth: Default::default(),
            ..flags_over_all
        }
    );
}

#[test]
fn layers_mix_per_setting() {
    let l = Layers::new();
    let c = serve(
        &["serve", "--api-addr", "127.0.0.1:3003"],
        &[
            ("RECKON_CONFIG", l.file.to_str().unwrap()),
            ("RECKON_HTTP_ADDR", "127.0.0.1:2002"),
            TOKEN_ENV,
        ],
    );
    assert_eq!(c.api_addr, addr("127.0.0.1:3003"));
    assert_eq!(c.http_addr, addr("127.0.0.1:2002"));
    assert_eq!(c.grpc_addr, addr("127.0.0.1:1001"));

    // A file with one key leaves the rest at their defaults.
    let one = l.dir.join("one.toml");
    std::fs::write(&one, "max_concurrent_exports = 7\n").unwrap();
    let c = serve(&["serve", "--config", one.to_str().unwrap()], &[]);
    assert_eq!(
        c,
        Config {
            max_concurrent_exports: 7,
            ..Config::default()
        }
    );
}

#[test]
fn only_serve_resolves_tokens() {
    let l = Layers::new();
    let file = l.file.to_str().unwrap();
    // The variable `token_env` names is not set: serve refuses, naming file, line and field.
    match run(&["serve", "--config", file], &[]) {
        Err(CliError::ConfigFile(ConfigFileError::Invalid {
            line,
            field,
            message,
            ..
        })) => {
            let text = std::fs::read_to_string(&l.file).unwrap();
            let want = text
                .lines()
                .position(|l| l.starts_with("token_env"))
                .unwrap()
                + 1;
            assert_eq!((line, field.as_str()), (want, "auth.token.token_env"));
            assert!(message.contains("RECKON_TEST_TOKEN_ANA"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // `report` reads the same file where the server's secrets are not set.
    assert!(matches!(
        run(&["report", "--config", file], &[]),
        Ok(Command::Report(_))
    ));
}

#[test]
fn config_flag_beats_config_env() {
    let l = Layers::new();
    let other = l.dir.join("other.toml");
    std::fs::write(&other, "log_filter = \"trace\"\n").unwrap();
    let c = serve(
        &["serve", "--config", other.to_str().unwrap()],
        &[("RECKON_CONFIG", l.file.to_str().unwrap())],
    );
    assert_eq!(c.log_filter, "trace");
    assert_eq!(c.grpc_addr, Config::default().grpc_addr);
}

#[test]
fn empty_env_counts_as_unset() {
    let l = Layers::new();
    let c = serve(
        &["serve", "--config", l.file.to_str().unwrap()],
        &[
            ("RECKON_GRPC_ADDR", ""),
            ("RECKON_STRIPE_WEBHOOK_SECRET", ""),
            TOKEN_ENV,
        ],
    );
    assert_eq!(c.grpc_addr, addr("127.0.0.1:1001"));
    assert_eq!(c.stripe_webhook_secret.as_deref(), Some("file-secret"));
}

#[test]
fn bad_env_names_the_variable() {
    for (var, val) in [
        ("RECKON_GRPC_ADDR", "nope"),
        ("RECKON_STORE", "mysql://x"),
        ("RECKON_SHUTDOWN_GRACE", "10x"),
        ("RECKON_MAX_CONCURRENT_EXPORTS", "0"),
        ("RECKON_LOG_FORMAT", "xml"),
    ] {
        match run(&["serve"], &[(var, val)]) {
            Err(e @ CliError::Env { var: v, .. }) => {
                assert_eq!(v, var);
                assert!(e.to_string().contains(var), "{e}");
                assert_eq!(e.exit_code(), 2);
            }
            other => panic!("{var}: {other:?}"),
        }
    }
    // A flag wins without the shadowed variable being looked at.
    let c = serve(
        &["serve", "--grpc-addr", "127.0.0.1:1"],
        &[("RECKON_GRPC_ADDR", "nope")],
    );
    assert_eq!(c.grpc_addr, addr("127.0.0.1:1"));
}

#[test]
fn bad_config_file_names_file_line_field() {
    let l = Layers::new();
    let bad = l.dir.join("bad.toml");
    std::fs::write(&bad, "# ok\nshutdown_grace = \"10x\"\n").unwrap();
    match run(&["serve", "--config", bad.to_str().unwrap()], &[]) {
        Err(CliError::ConfigFile(ConfigFileError::Invalid {
            file, line, field, ..
        })) => {
            assert_eq!(file, bad);
            assert_eq!((line, field.as_str()), (2, "shutdown_grace"));
        }
        other => panic!("{other:?}"),
    }
    // A file named but missing is an error, not silently the defaults.
    let missing = l.dir.join("missing.toml");
    match run(&["serve"], &[("RECKON_CONFIG", missing.to_str().unwrap())]) {
        Err(CliError::ConfigFile(ConfigFileError::Io { file, .. })) => assert_eq!(file, missing),
        other => panic!("{other:?}"),
    }
    // Relative paths in the file are relative to the file.
    let rel = l.dir.join("rel.toml");
    std::fs::write(&rel, "data_dir = \"d\"\n").unwrap();
    let c = serve(&["serve", "--config", rel.to_str().unwrap()], &[]);
    assert_eq!(c.data_dir, l.dir.join("d"));
}

#[test]
fn bad_flags_are_usage_errors() {
    for args in [
        &["serve", "--grpc-addr", "4317"][..],
        &["serve", "--store", "postgres://x"],
        &["serve", "--shutdown-grace", "10x"],
        &["serve", "--max-request-bytes", "0"],
        &["serve", "--log-format", "xml"],
        &["serve", "--log-filter", "x=loud"],
        &["serve", "--stripe-webhook-secret", ""],
        &["serve", "--no-such-flag"],
        &["report", "--since", "yesterday"],
        &["report", "--format", "xml"],
        &["escalations", "list", "--status", "closed"],
        &["escalations", "claim", "e1", "--by", " "],
        &["escalations", "list", "--token", ""],
        &["escalations", "claim", " ", "--by", "ann"],
        &["escalations", "--server", "127.0.0.1:8080", "list"],
        &["demo", "--target", "ftp://x"],
        &[],
    ] {
        match run(args, &[]) {
            Err(e @ CliError::Usage(_)) => assert_ne!(e.exit_code(), 0, "{args:?}"),
            other => panic!("{args:?}: {other:?}"),
        }
    }
}

#[test]
fn help_and_version_exit_zero() {
    for args in [&["--help"][..], &["serve", "--help"], &["--version"]] {
        match run(args, &[]) {
            Err(e @ CliError::Usage(_)) => assert_eq!(e.exit_code(), 0, "{args:?}"),
            other => panic!("{args:?}: {other:?}"),
        }
    }
}

#[test]
fn serve_help_names_every_variable() {
    let mut cmd = Cli::command();
    let help = cmd
        .find_subcommand_mut("serve")
        .unwrap()
        .render_long_help()
        .to_string();
    let vars: Vec<&str> = ENV.iter().map(|(v, _)| *v).chain([ENV_CONFIG]).collect();
    for var in &vars {
        assert!(
            help.contains(&format!("[env: {var}]")),
            "{var} missing:\n{help}"
        );
    }
    // One variable per serve flag: nothing documented that is not read, nothing read undocumented.
    let serve = cmd.find_subcommand("serve").unwrap();
    let flags = serve
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| l != "help"))
        .count();
    assert_eq!(flags, vars.len());
    assert_eq!(help.matches("[env: ").count(), vars.len());
}

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn report() {
    let r = match run(&["report"], &[]) {
        Ok(Command::Report(r)) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        r,
        ReportArgs {
            data_dir: "./reckon-data".into(),
            store: StoreConfig::Sqlite,
            since: Since::Ago(Dur::hours(24)),
            format: ReportFormat::Text,
        }
    );
    let r = match run(
        &[
            "report",
            "--since",
            "2025-01-31T10:00:00Z",
            "--format",
            "csv",
            "--data-dir",
            "/d",
        ],
        &[
            ("RECKON_STORE", "clickhouse://env"),
            ("RECKON_DATA_DIR", "/e"),
        ],
    ) {
        Ok(Command::Report(r)) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(r.since, Since::At(Timestamp::from_secs(1_738_317_600)));
    assert_eq!(r.format, ReportFormat::Csv);
    assert_eq!(r.data_dir, Path::new("/d"));
    assert_eq!(r.store, ch("env"));

    // The config file supplies the store and data dir a report reads.
    let l = Layers::new();
    let r = match run(
        &[
            "report",
            "--config",
            l.file.to_str().unwrap(),
            "--format=json",
        ],
        &[],
    ) {
        Ok(Command::Report(r)) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (r.data_dir.as_path(), &r.store),
        (Path::new("/file/data"), &ch("file"))
    );
    assert_eq!(r.format, ReportFormat::Json);
}

#[test]
fn since() {
    assert_eq!(parse_since("24h"), Ok(Since::Ago(Dur::hours(24))));
    assert_eq!(parse_since("7d"), Ok(Since::Ago(Dur::hours(168))));
    assert_eq!(
        parse_since("1970-01-01T00:00:01.5+00:00"),
        Ok(Since::At(Timestamp(1_500_000_000)))
    );
    assert!(parse_since("24").is_err());
    assert!(parse_since("2025-13-01T00:00:00Z").is_err());
    let now = Timestamp::from_secs(100_000);
    assert_eq!(
        Since::Ago(Dur::hours(1)).resolve(now),
        Timestamp::from_secs(96_400)
    );
    assert_eq!(Since::At(Timestamp(5)).resolve(now), Timestamp(5));
}

fn esc(args: &[&str], env: &[(&str, &str)]) -> EscalationsCmd {
    let mut argv = vec!["escalations"];
    argv.extend_from_slice(args);
    match run(&argv, env) {
        Ok(Command::Escalations(e)) => e,
        other => panic!("{args:?}: {other:?}"),
    }
}

#[test]
fn escalations() {
    assert_eq!(
        esc(&["list"], &[]),
        EscalationsCmd {
            server: DEFAULT_SERVER.into(),
            token: None,
            action: EscalationAction::List {
                status: None,
                tool: None,
                severity: None,
            },
            json: false,
        }
    );
    assert_eq!(
        esc(&["list", "--status", "claimed"], &[]).action,
        EscalationAction::List {
            status: Some(EscalationStatus::Claimed),
            tool: None,
            severity: None,
        }
    );
    let filtered = esc(
        &[
            "list",
            "--tool",
            "issue_refund",
            "--severity",
            "critical",
            "--json",
        ],
        &[],
    );
    assert_eq!(
        filtered.action,
        EscalationAction::List {
            status: None,
            tool: Some("issue_refund".into()),
            severity: Some(crate::model::Severity::Critical),
        }
    );
    assert!(filtered.json);
    match run(&["escalations", "list", "--severity", "huge"], &[]) {
        Err(e) => assert!(e.to_string().contains("invalid severity"), "{e}"),
        other => panic!("{other:?}"),
    }
    match run(&["intents", "show", "refund-1", "--json"], &[]) {
        Ok(Command::Intents(i)) => {
            assert_eq!(
                i,
                crate::cli::IntentsCmd {
                    server: DEFAULT_SERVER.into(),
                    token: None,
                    id: "refund-1".into(),
                    json: true,
                }
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        esc(&["show", "esc-1"], &[]).action,
        EscalationAction::Show { id: "esc-1".into() }
    );
    assert_eq!(
        esc(&["claim", "esc-1", "--by", "ann"], &[]).action,
        EscalationAction::Claim {
            id: "esc-1".into(),
            by: Some("ann".into()),
            take_over: false,
        }
    );
    assert_eq!(
        esc(
            &[
                "resolve",
                "esc-1",
                "--by",
                "ann",
                "--resolution",
                "reversed_duplicate",
                "--note",
                "called the bank"
            ],
            &[]
        )
        .action,
        EscalationAction::Resolve {
            id: "esc-1".into(),
            by: Some("ann".into()),
            resolution: "reversed_duplicate".into(),
            note: Some("called the bank".into()),
            take_over: false,
        }
    );
    assert_eq!(
        esc(
            &[
                "resolve",
                "e",
                "--by",
                "a",
                "--resolution",
                "r",
                "--note",
                ""
            ],
            &[]
        )
        .action,
        EscalationAction::Resolve {
            id: "e".into(),
            by: Some("a".into()),
            resolution: "r".into(),
            note: None,
            take_over: false,
        }
    );
    // --server before or after the action; flag over RECKON_SERVER over the default.
    let env = &[("RECKON_SERVER", "http://env:8080/")];
    assert_eq!(esc(&["list"], env).server, "http://env:8080");
    assert_eq!(
        esc(&["--server", "https://flag", "list"], env).server,
        "https://flag"
    );
    assert_eq!(
        esc(&["show", "x", "--server", "http://after:1"], env).server,
        "http://after:1"
    );
    // The token: flag over RECKON_TOKEN; with one, `--by` may be left out (the server records
    // the token's name).
    let token = &[("RECKON_TOKEN", "env-token-0123456789")];
    assert_eq!(
        esc(&["list"], token).token.as_deref(),
        Some("env-token-0123456789")
    );
    assert_eq!(
        esc(&["list", "--token", "flag-token-0123456789"], token)
            .token
            .as_deref(),
        Some("flag-token-0123456789")
    );
    assert_eq!(
        esc(&["claim", "esc-1"], token).action,
        EscalationAction::Claim {
            id: "esc-1".into(),
            by: None,
            take_over: false,
        }
    );
    // Taking over someone else's: the API's `"override": true`.
    assert_eq!(
        esc(&["claim", "esc-1", "--by", "bo", "--override"], &[]).action,
        EscalationAction::Claim {
            id: "esc-1".into(),
            by: Some("bo".into()),
            take_over: true,
        }
    );
    assert!(matches!(
        run(&["escalations", "list"], &[("RECKON_SERVER", "nope")]),
        Err(CliError::Env {
            var: "RECKON_SERVER",
            ..
        })
    ));
}

#[test]
fn demo_and_check_contracts() {
    assert_eq!(
        run(&["demo"], &[]).unwrap(),
        Command::Demo(DemoArgs {
            target: None,
            once: false,
            contracts_dir: None,
            otlp: None,
            stripe_webhook_secret: None,
            only: None,
            alertmanager: None,
        })
    );
    // The demo's target settings come from flags or their variables, flags first.
    assert_eq!(
        run(
            &[
                "demo",
                "--target",
                "http://10.0.0.5:8080",
                "--only",
                "expiry"
            ],
            &[
                ("RECKON_DEMO_OTLP", "http://10.0.0.5:14317"),
                ("RECKON_STRIPE_WEBHOOK_SECRET", "whsec_x"),
                ("RECKON_DEMO_ONLY", "pending")
            ]
        )
        .unwrap(),
        Command::Demo(DemoArgs {
            target: Some("http://10.0.0.5:8080".into()),
            once: false,
            contracts_dir: None,
            otlp: Some("http://10.0.0.5:14317".into()),
            stripe_webhook_secret: Some("whsec_x".into()),
            only: Some("expiry".into()),
            alertmanager: None,
        })
    );
    assert_eq!(
        run(
            &[
                "demo",
                "--target",
                "http://127.0.0.1:8080/",
                "--once",
                "--contracts-dir",
                "c"
            ],
            &[]
        )
        .unwrap(),
        Command::Demo(DemoArgs {
            target: Some("http://127.0.0.1:8080".into()),
            once: true,
            contracts_dir: Some("c".into()),
            otlp: None,
            stripe_webhook_secret: None,
            only: None,
            alertmanager: None,
        })
    );
    // The in-process reckon can page a local Alertmanager; not with --target (its own config).
    match run(&["demo", "--alertmanager", "http://127.0.0.1:9093/"], &[]).unwrap() {
        Command::Demo(d) => assert_eq!(d.alertmanager.as_deref(), Some("http://127.0.0.1:9093")),
        other => panic!("{other:?}"),
    }
    match run(&["demo"], &[("RECKON_DEMO_ALERTMANAGER", "http://am:9093")]).unwrap() {
        Command::Demo(d) => assert_eq!(d.alertmanager.as_deref(), Some("http://am:9093")),
        other => panic!("{other:?}"),
    }
    assert!(run(
        &[
            "demo",
            "--target",
            "http://h:8080",
            "--alertmanager",
            "http://am:9093"
        ],
        &[]
    )
    .is_err());
    assert_eq!(
        run(&["check-contracts"], &[]).unwrap(),
        Command::CheckContracts {
            dir: "./contracts".into()
        }
    );
    assert_eq!(
        run(&["check-contracts"], &[("RECKON_CONTRACTS_DIR", "/e")]).unwrap(),
        Command::CheckContracts { dir: "/e".into() }
    );
    assert_eq!(
        run(
            &["check-contracts", "--contracts", "/f"],
            &[("RECKON_CONTRACTS_DIR", "/e")]
        )
        .unwrap(),
        Command::CheckContracts { dir: "/f".into() }
    );
    let l = Layers::new();
    assert_eq!(
        run(
            &["check-contracts", "--config", l.file.to_str().unwrap()],
            &[]
        )
        .unwrap(),
        Command::CheckContracts {
            dir: "/file/contracts".into()
        }
    );
}
