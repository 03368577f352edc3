//! The plain runtime configuration. `cli.rs` and the config file loader produce it; nothing else
//! knows where a setting came from.

pub mod file;
pub mod value;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreConfig {
    /// One SQLite file in the data directory (the embedded default).
    Sqlite,
    /// `clickhouse://user:pass@host:8123/db`, through the official client over HTTP.
    ClickHouse {
        url: String,
        user: String,
        password: String,
        database: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// OTLP gRPC (default 0.0.0.0:4317).
    pub grpc_addr: SocketAddr,
    /// OTLP HTTP (default 0.0.0.0:4318).
    pub http_addr: SocketAddr,
    /// API, metrics, health (default 0.0.0.0:8080).
    pub api_addr: SocketAddr,
    /// Default ./reckon-data.
    pub data_dir: PathBuf,
    /// Default ./contracts.
    pub contracts_dir: PathBuf,
    pub store: StoreConfig,
    /// When set, Stripe webhooks must carry a valid `Stripe-Signature`.
    pub stripe_webhook_secret: Option<String>,
    /// How old a signed Stripe webhook may be (default 5 minutes).
    pub stripe_tolerance: Duration,
    /// Largest request body or gRPC message accepted, after decompression (default 16 MiB).
    pub max_request_bytes: usize,
    /// Exports being made durable at once before new ones are refused as retryable (default 64).
    pub max_concurrent_exports: usize,
    /// How long shutdown waits for in-flight requests (default 10 s).
    pub shutdown_grace: Duration,
    /// How long a settled intent stays in memory before it leaves for the store (default 60 s;
    /// `None`: never). It comes back when an event touches it.
    pub evict_after: Option<Duration>,
    /// How long raw events of settled intents are kept (default `None`: for ever). Verdicts,
    /// findings and escalations are kept whatever this says.
    pub retention: Option<Duration>,
    pub log_format: LogFormat,
    /// A `tracing` env-filter directive (default `info`).
    pub log_filter: String,
    /// Where people open reckon: links in notifications (`{public_url}/escalations/{id}`).
    /// Default `http://{api_addr}` (the bound address; `localhost` for an unspecified IP).
    pub public_url: Option<String>,
    /// `[[notify]]` targets (config file only): Alertmanager and signed webhooks.
    pub notify: Vec<crate::notify::Target>,
    /// `[auth]` and its `[[auth.token]]` entries (config file only). No tokens: open access.
    pub auth: crate::auth::AuthConfig,
    /// PEM certificate chain for TLS on every listener (with `tls_key`; neither: plain TCP).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            grpc_addr: SocketAddr::from(([0, 0, 0, 0], 4317)),
            http_addr: SocketAddr::from(([0, 0, 0, 0], 4318)),
            api_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            data_dir: PathBuf::from("./reckon-data"),
            contracts_dir: PathBuf::from("./contracts"),
            store: StoreConfig::Sqlite,
            stripe_webhook_secret: None,
            stripe_tolerance: Duration::from_secs(300),
            max_request_bytes: 16 * 1024 * 1024,
            max_concurrent_exports: 64,
            shutdown_grace: Duration::from_secs(10),
            evict_after: Some(Duration::from_secs(60)),
            retention: None,
            log_format: LogFormat::Text,
            log_filter: "info".into(),
            public_url: None,
            notify: Vec::new(),
            auth: crate::auth::AuthConfig::default(),
            tls_cert: None,
            tls_key: None,
        }
    }
}
