//! The scalar settings of `reckon serve`, each declared once, in the table of `with_settings!`
//! below.
//!
//! From its one entry, a setting gets everything it has:
//!
//! - a field of [`Config`](super::Config), which `Config::default()` sets from its default;
//! - a descriptor in [`SETTINGS`](super::SETTINGS) (`SETTINGS.data_dir.env`, `.parse`, `.help()`,
//!   ...), for `report`, `reaudit` and the others that read a few of the settings;
//! - a key of the config file (`config/file.rs`), named after the field;
//! - a `RECKON_*` variable and a `--flag` of `reckon serve` (`cli.rs`), whose `--help` is the
//!   first paragraph of the entry's doc comment followed by `[default: ...]` and `[env: ...]`,
//!   made from the entry.
//!
//! Precedence, for every one of them: flag > variable > file > default. One parser reads a value
//! wherever it is written, and the default is written as a user would write it and read by that
//! same parser, so `--help` shows what the default really is.
//!
//! `[auth]` and `[[notify]]` are tables, from the file only: they are declared in `config.rs`
//! (fields of `Config`) and `config/file.rs` (how the file is read).

use super::value::ValueError;

/// What reckon knows about one setting, apart from where its value lives (`Config`).
pub struct Setting<T: 'static> {
    /// The `Config` field and the config file's key.
    pub key: &'static str,
    /// The environment variable.
    pub env: &'static str,
    /// The flag's value in `--help` (`--grpc-addr <ADDR>`).
    pub value_name: &'static str,
    /// As a user would write it; `None`: unset unless given.
    pub default: Option<&'static str>,
    /// The entry's doc comment: what it is for, then (after a blank line) more for readers of
    /// the code.
    pub about: &'static str,
    /// From a flag, a variable or a file's string.
    pub parse: fn(&str) -> Result<T, ValueError>,
}

impl<T> Setting<T> {
    /// The flag's `--help`: what it is for (the doc comment's first paragraph, on one line), its
    /// default, its variable.
    pub fn help(&self) -> String {
        let mut help = self
            .about
            .lines()
            .map(str::trim)
            .take_while(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(default) = self.default {
            help += &format!(" [default: {default}]");
        }
        help + &format!(" [env: {}]", self.env)
    }
}

/// Hands the table to `$callback`, a `macro_rules!` in scope where this is invoked, which makes
/// one item per setting: `Config` and `SETTINGS` (`config.rs`), the file's keys and `FileConfig`
/// (`config/file.rs`), the flags of `reckon serve` (`cli.rs`).
///
/// # Adding a setting
///
/// Add one entry below, in the place its flag should take in `reckon serve --help`:
///
/// ```text
/// /// Its help, clap style (no final period); also the doc of its `Config` field
/// ///
/// /// Optional: more for the `Config` field's doc, not shown in --help.
/// #[arg(...)]                  // optional: more clap attributes for its flag (an alias, ...)
/// name: Type = "default" {     // the default as a user writes it, read by `parse`; or `unset`
///                              // (then `Type` is an `Option`, `None` unless given)
///     file: Text,              // how the file writes it: `Text` (a string), `RelativePath` (a
///                              // string, relative to the file), `Count` (an integer), `Size`
///                              // (an integer or a string with a unit); see config/file.rs
///     env: "RECKON_NAME",      // its variable: RECKON_ and the name in capitals
///     value_name: "VALUE",     // its flag's placeholder in --help
///     parse: value::parse_x,   // &str -> Result<Type, ValueError>, from config/value.rs (with
///                              // `unset`: the type inside the Option)
/// }
/// ```
///
/// Its flag is `--name` in kebab-case, its file key `name`. Then document it in README's
/// "Configuration" sample file. Types and parsers are named as `config.rs`, `config/file.rs`
/// and `cli.rs` import them.
macro_rules! with_settings {
    ($callback:ident) => {
        $callback! {
            /// OTLP gRPC listen address
            grpc_addr: SocketAddr = "0.0.0.0:4317" {
                file: Text,
                env: "RECKON_GRPC_ADDR",
                value_name: "ADDR",
                parse: value::parse_addr,
            }
            /// OTLP HTTP listen address
            http_addr: SocketAddr = "0.0.0.0:4318" {
                file: Text,
                env: "RECKON_HTTP_ADDR",
                value_name: "ADDR",
                parse: value::parse_addr,
            }
            /// API, metrics and health listen address
            api_addr: SocketAddr = "0.0.0.0:8080" {
                file: Text,
                env: "RECKON_API_ADDR",
                value_name: "ADDR",
                parse: value::parse_addr,
            }
            /// Data directory (the SQLite store)
            data_dir: PathBuf = "./reckon-data" {
                file: RelativePath,
                env: "RECKON_DATA_DIR",
                value_name: "DIR",
                parse: value::parse_path,
            }
            /// Contracts directory
            #[arg(long = "contracts", visible_alias = "contracts-dir")]
            contracts_dir: PathBuf = "./contracts" {
                file: RelativePath,
                env: "RECKON_CONTRACTS_DIR",
                value_name: "DIR",
                parse: value::parse_path,
            }
            /// `sqlite` or clickhouse://USER:PASS@HOST:8123/DB
            store: StoreConfig = "sqlite" {
                file: Text,
                env: "RECKON_STORE",
                value_name: "URL",
                parse: value::parse_store_setting,
            }
            /// Verify the Stripe-Signature of webhooks with this secret; prefer the variable,
            /// arguments are visible to other users
            stripe_webhook_secret: Option<String> = unset {
                file: Text,
                env: "RECKON_STRIPE_WEBHOOK_SECRET",
                value_name: "SECRET",
                parse: value::parse_secret,
            }
            /// How old a signed Stripe webhook may be
            stripe_tolerance: Duration = "5m" {
                file: Text,
                env: "RECKON_STRIPE_TOLERANCE",
                value_name: "DURATION",
                parse: value::parse_positive_duration,
            }
            /// Largest request body or gRPC message, after decompression
            max_request_bytes: usize = "16MiB" {
                file: Size,
                env: "RECKON_MAX_REQUEST_BYTES",
                value_name: "N",
                parse: value::parse_size,
            }
            /// Exports made durable at once before new ones are refused as retryable
            max_concurrent_exports: usize = "64" {
                file: Count,
                env: "RECKON_MAX_CONCURRENT_EXPORTS",
                value_name: "N",
                parse: value::parse_count,
            }
            /// Open connections per listener; at the cap the idlest is closed, or new ones
            /// wait in the accept backlog
            ///
            /// Each of the three listeners has its own cap (`crate::listen`); a connection with
            /// a request in flight is never closed for room.
            max_connections: usize = "1024" {
                file: Count,
                env: "RECKON_MAX_CONNECTIONS",
                value_name: "N",
                parse: value::parse_count,
            }
            /// How long a new connection may take to send its first request (HTTP/2: its
            /// first bytes), and an HTTP/1 request its whole header
            header_read_timeout: Duration = "10s" {
                file: Text,
                env: "RECKON_HEADER_READ_TIMEOUT",
                value_name: "DURATION",
                parse: value::parse_positive_duration,
            }
            /// How long an HTTP request body (OTLP/HTTP, records, webhooks) may take to arrive
            /// in full; past it the request is refused with 408
            ///
            /// The export slot (`max_concurrent_exports`) is taken before the body is read, so
            /// without it a client trickling a body holds a slot for ever.
            body_read_timeout: Duration = "30s" {
                file: Text,
                env: "RECKON_BODY_READ_TIMEOUT",
                value_name: "DURATION",
                parse: value::parse_positive_duration,
            }
            /// How long a connection with no request in flight stays open
            idle_timeout: Duration = "60s" {
                file: Text,
                env: "RECKON_IDLE_TIMEOUT",
                value_name: "DURATION",
                parse: value::parse_positive_duration,
            }
            /// How often gRPC connections are pinged (HTTP/2 keep-alive); one that does not
            /// answer within 20 s is closed
            http2_keepalive: Duration = "30s" {
                file: Text,
                env: "RECKON_HTTP2_KEEPALIVE",
                value_name: "DURATION",
                parse: value::parse_positive_duration,
            }
            /// gRPC streams in flight per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS);
            /// clients queue the rest
            max_concurrent_streams: usize = "64" {
                file: Count,
                env: "RECKON_MAX_CONCURRENT_STREAMS",
                value_name: "N",
                parse: value::parse_count,
            }
            /// How long shutdown waits for in-flight requests
            shutdown_grace: Duration = "10s" {
                file: Text,
                env: "RECKON_SHUTDOWN_GRACE",
                value_name: "DURATION",
                parse: value::parse_duration,
            }
            /// How long an intent at rest (no deadline, no open escalation) stays in memory
            /// before it leaves for the store (`never`: keep it)
            ///
            /// It comes back when an event touches it.
            evict_after: Option<Duration> = "60s" {
                file: Text,
                env: "RECKON_EVICT_AFTER",
                value_name: "DURATION",
                parse: value::parse_evict_after,
            }
            /// How long raw events of settled intents are kept; verdicts, findings and
            /// escalations stay (`forever`: keep everything)
            ///
            /// `None`: for ever.
            retention: Option<Duration> = "forever" {
                file: Text,
                env: "RECKON_RETENTION",
                value_name: "DURATION",
                parse: value::parse_retention,
            }
            /// The most memory the filter that finds intents out of memory may grow to
            ///
            /// It starts at 32 MiB and doubles a stage at a time as history grows (~3-5 bytes
            /// per intent at rest); past this, more events ask the store instead.
            route_filter_max: usize = "512MiB" {
                file: Size,
                env: "RECKON_ROUTE_FILTER_MAX",
                value_name: "N",
                parse: value::parse_size,
            }
            /// `text` or `json`
            log_format: LogFormat = "text" {
                file: Text,
                env: "RECKON_LOG_FORMAT",
                value_name: "FORMAT",
                parse: value::parse_log_format,
            }
            /// tracing filter directive; RUST_LOG overrides it
            ///
            /// Checked with the parser `logging` uses (`value::env_filter`).
            log_filter: String = "info" {
                file: Text,
                env: "RECKON_LOG_FILTER",
                value_name: "FILTER",
                parse: value::parse_log_filter,
            }
            /// Export reckon's own spans by OTLP/gRPC to this endpoint (http://HOST:4317): its
            /// exports, audit steps, store writes and notifications [default: off]
            ///
            /// Off unless set. The spans are reckon's own, never audited: sent to a reckon they
            /// are non-tool spans, dropped unread.
            self_traces: Option<String> = unset {
                file: Text,
                env: "RECKON_SELF_TRACES",
                value_name: "URL",
                parse: value::parse_http_url,
            }
            /// Of reckon's own traces, keep one in N (decided where each trace starts)
            self_traces_one_in: usize = "100" {
                file: Count,
                env: "RECKON_SELF_TRACES_ONE_IN",
                value_name: "N",
                parse: value::parse_count,
            }
            /// Where people open reckon, for links in notifications [default: http://API_ADDR]
            ///
            /// Links are `{public_url}/escalations/{id}`. Unset: `http://{api_addr}`, the bound
            /// address (`localhost` for an unspecified IP).
            public_url: Option<String> = unset {
                file: Text,
                env: "RECKON_PUBLIC_URL",
                value_name: "URL",
                parse: value::parse_http_url,
            }
            /// PEM certificate chain: TLS on every listener, with --tls-key
            ///
            /// With `tls_key`; neither: plain TCP.
            tls_cert: Option<PathBuf> = unset {
                file: RelativePath,
                env: "RECKON_TLS_CERT",
                value_name: "FILE",
                parse: value::parse_path,
            }
            /// PEM private key of --tls-cert
            tls_key: Option<PathBuf> = unset {
                file: RelativePath,
                env: "RECKON_TLS_KEY",
                value_name: "FILE",
                parse: value::parse_path,
            }
        }
    };
}
pub(crate) use with_settings;

/// An entry's default for [`Setting::default`].
macro_rules! default_text {
    (unset) => {
        None
    };
    ($default:literal) => {
        Some($default)
    };
}
pub(crate) use default_text;

/// An entry's parser for [`Setting::parse`]: with `unset`, its value is wrapped in `Some`.
macro_rules! parser {
    (unset, $parse:expr) => {
        |s: &str| ($parse)(s).map(Some)
    };
    ($default:literal, $parse:expr) => {
        $parse
    };
}
pub(crate) use parser;

/// An entry's value in `Config::default()`: its default, parsed.
macro_rules! initial {
    ($setting:expr, unset) => {
        None
    };
    ($setting:expr, $default:literal) => {
        ($setting.parse)($default)
            .unwrap_or_else(|e| panic!("the default of {} ({:?}): {e}", $setting.key, $default))
    };
}
pub(crate) use initial;

#[cfg(test)]
mod tests {
    use crate::config::{Config, SETTINGS};

    #[test]
    fn each_variable_is_reckon_and_the_key() {
        let vars = SETTINGS.vars();
        assert_eq!(vars.len(), 27);
        for (key, env) in vars {
            assert_eq!(env, format!("RECKON_{}", key.to_ascii_uppercase()));
        }
    }

    #[test]
    fn help_shows_the_default_as_written() {
        assert_eq!(
            SETTINGS.max_request_bytes.help(),
            "Largest request body or gRPC message, after decompression [default: 16MiB] \
             [env: RECKON_MAX_REQUEST_BYTES]"
        );
        // A doc comment's first paragraph, over several lines, is one line of help.
        assert_eq!(
            SETTINGS.evict_after.help(),
            "How long an intent at rest (no deadline, no open escalation) stays in memory \
             before it leaves for the store (`never`: keep it) [default: 60s] \
             [env: RECKON_EVICT_AFTER]"
        );
        // Unset unless given: no default shown.
        assert_eq!(
            SETTINGS.tls_key.help(),
            "PEM private key of --tls-cert [env: RECKON_TLS_KEY]"
        );
        // The shown default is the one in force.
        assert_eq!(
            (SETTINGS.retention.parse)(SETTINGS.retention.default.unwrap()),
            Ok(Config::default().retention)
        );
    }
}
