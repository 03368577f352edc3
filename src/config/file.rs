//! The TOML config file (`reckon serve --config FILE`).
//!
//! Each setting of the table in `settings.rs` is a top-level key, named as its `Config` field (its
//! flag's name in snake_case), its value written as the table's `file:` says; paths are relative
//! to the file. README's "Configuration" has a sample naming every one (a test checks it). The
//! tables come from the file only:
//!
//! ```toml
//! [[notify]]                           # any number of these
//! kind = "alertmanager"                # one alert per unresolved escalation
//! url = "http://alertmanager:9093"
//! resend_interval = "45s"              # optional: re-sent this often; ends 4x this after
//!
//! [[notify]]
//! kind = "webhook"                     # signed JSON events from the durable outbox
//! url = "http://hooks.internal/reckon"
//! secret = "..."                       # Reckon-Signature is HMAC-SHA256 with it
//! name = "pager"                       # optional: names it in delivery ids and logs
//!
//! [auth]                               # optional: who may read /metrics ("read" or "open")
//! metrics = "read"
//!
//! [[auth.token]]                       # any number of these; none: everyone may do everything
//! name = "agents"                      # recorded as who claimed or resolved (operators)
//! token_env = "RECKON_TOKEN_AGENTS"    # or token = "..." (16 bytes at least)
//! role = "ingest"                      # ingest | read | operator
//! ```
//!
//! As with contracts, a typo must not silently become a default: unknown keys are errors, and every
//! error names the file, the line and the key. Parsing keeps each raw value as `toml::Spanned` so
//! the value checks after serde's shape checks can still point at the line.

use super::value::{self, ValueError};
use super::{settings, Config, LogFormat, Setting, StoreConfig, SETTINGS};
use crate::toml_source::{TomlFileError, TomlSource};
use serde::Deserialize;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// A config file that cannot be read or holds a bad setting.
pub type ConfigFileError = TomlFileError;

/// `FileConfig` and the file's keys from the table in `settings.rs`.
macro_rules! file_settings {
    ($(
        $(#[doc = $doc:literal])*
        $(#[arg $arg:tt])*
        $name:ident: $ty:ty = $default:tt { file: $file:ty, $($rest:tt)* }
    )*) => {
        /// What one config file sets: `None` where the file is silent, so the layers below
        /// (defaults) and above (environment, flags) can be told apart.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct FileConfig {
            $(pub $name: Option<$ty>,)*
            /// `[[notify]]` tables; `None` when there are none.
            pub notify: Option<Vec<crate::notify::Target>>,
            /// The `[auth]` table; `None` when there is none.
            pub auth: Option<crate::auth::AuthConfig>,
        }

        impl FileConfig {
            /// Overwrites in `cfg` every setting this file names.
            pub fn apply(&self, cfg: &mut Config) {
                $(
                    if let Some(v) = &self.$name {
                        cfg.$name = v.clone();
                    }
                )*
                if let Some(v) = &self.notify {
                    cfg.notify = v.clone();
                }
                if let Some(v) = &self.auth {
                    cfg.auth = v.clone();
                }
            }
        }

        /// The file as written: each value kept with its span, so the checks after serde's can
        /// still name its line.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct RawFile {
            $($name: Option<Spanned<$file>>,)*
            notify: Option<Vec<Spanned<RawNotify>>>,
            auth: Option<Spanned<RawAuth>>,
        }

        impl Src<'_> {
            /// The scalar settings of `raw`, parsed; the tables are left to their own readers.
            fn settings(&self, raw: &RawFile) -> Result<FileConfig, ConfigFileError> {
                Ok(FileConfig {
                    $($name: self.value(&SETTINGS.$name, &raw.$name)?,)*
                    notify: None,
                    auth: None,
                })
            }
        }
    };
}

settings::with_settings!(file_settings);

/// How a setting is written in the file (its `file:` in the table), and how that becomes its
/// value: through the setting's parser, so a value means what it means on the command line.
trait Written<T> {
    fn read(&self, parse: fn(&str) -> Result<T, ValueError>, dir: &Path) -> Result<T, ValueError>;
}

/// A string.
type Text = String;

impl<T> Written<T> for Text {
    fn read(&self, parse: fn(&str) -> Result<T, ValueError>, _: &Path) -> Result<T, ValueError> {
        parse(self)
    }
}

/// A string naming a file or a directory, made relative to the config file's directory so a file
/// means the same thing whatever directory the service is started from.
#[derive(Deserialize)]
#[serde(transparent)]
struct RelativePath(String);

impl Written<PathBuf> for RelativePath {
    fn read(
        &self,
        parse: fn(&str) -> Result<PathBuf, ValueError>,
        dir: &Path,
    ) -> Result<PathBuf, ValueError> {
        parse(&self.0).map(|p| dir.join(p))
    }
}

impl Written<Option<PathBuf>> for RelativePath {
    fn read(
        &self,
        parse: fn(&str) -> Result<Option<PathBuf>, ValueError>,
        dir: &Path,
    ) -> Result<Option<PathBuf>, ValueError> {
        parse(&self.0).map(|p| p.map(|p| dir.join(p)))
    }
}

/// A whole number of at least 1: an integer in TOML (a string is a type error). i64 rather than
/// usize so zero and negatives get our message, not serde's.
#[derive(Deserialize)]
#[serde(transparent)]
struct Count(i64);

impl<T> Written<T> for Count {
    fn read(&self, parse: fn(&str) -> Result<T, ValueError>, _: &Path) -> Result<T, ValueError> {
        if self.0 <= 0 {
            return Err(ValueError::Zero);
        }
        parse(&self.0.to_string())
    }
}

/// A number of bytes, or a string with a unit (`"16MiB"`).
#[derive(Deserialize)]
#[serde(transparent)]
struct Size(toml::Value);

impl<T> Written<T> for Size {
    fn read(&self, parse: fn(&str) -> Result<T, ValueError>, dir: &Path) -> Result<T, ValueError> {
        match &self.0 {
            toml::Value::Integer(n) => Count(*n).read(parse, dir),
            toml::Value::String(s) => parse(s),
            other => Err(ValueError::Size(other.to_string())),
        }
    }
}

/// The `[auth]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    metrics: Option<Spanned<String>>,
    token: Option<Vec<Spanned<RawToken>>>,
}

/// One `[[auth.token]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: Spanned<String>,
    token: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    role: Spanned<String>,
}

/// One `[[notify]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotify {
    kind: Spanned<String>,
    url: Spanned<String>,
    secret: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    resend_interval: Option<Spanned<String>>,
}

/// The file being parsed, for errors that name file, line and field.
struct Src<'a>(TomlSource<'a>);

impl Src<'_> {
    fn err(&self, span: Range<usize>, field: &str, message: impl ToString) -> ConfigFileError {
        ConfigFileError::Invalid {
            file: self.0.file.to_path_buf(),
            line: self.0.line(span.start),
            field: field.to_string(),
            message: message.to_string(),
        }
    }

    /// Reads one setting as the file writes it, naming the key and its line on failure.
    fn value<T, W: Written<T>>(
        &self,
        setting: &Setting<T>,
        raw: &Option<Spanned<W>>,
    ) -> Result<Option<T>, ConfigFileError> {
        let dir = self.0.file.parent().unwrap_or(Path::new(""));
        raw.as_ref()
            .map(|v| {
                v.get_ref()
                    .read(setting.parse, dir)
                    .map_err(|e| self.err(v.span(), setting.key, e))
            })
            .transpose()
    }

    fn toml_err(&self, e: &toml::de::Error) -> ConfigFileError {
        let p = self.0.locate(e, None);
        ConfigFileError::Invalid {
            file: self.0.file.to_path_buf(),
            line: p.line,
            field: p.field,
            message: p.message,
        }
    }
}

/// Looks up an environment variable (the process environment, or a map in tests).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Parses a config file's text. `file` names it in errors and anchors relative paths;
/// `token_env` entries are read from the process environment.
pub fn parse_file(file: &Path, text: &str) -> Result<FileConfig, ConfigFileError> {
    parse_file_env(file, text, Some(&|name| std::env::var(name).ok()))
}

/// [`parse_file`] with `env` standing in for the process environment. With `None` the `[auth]`
/// table is checked for shape but its tokens are not resolved (`auth` stays `None`): for the
/// commands that read the file but serve nothing.
pub fn parse_file_env(
    file: &Path,
    text: &str,
    env: Option<EnvLookup<'_>>,
) -> Result<FileConfig, ConfigFileError> {
    let src = Src(TomlSource { file, text });
    let raw: RawFile = toml::from_str(text).map_err(|e| src.toml_err(&e))?;
    let mut file = src.settings(&raw)?;
    if let Some(tables) = &raw.notify {
        file.notify = Some(notify_targets(&src, tables)?);
    }
    if let (Some(table), Some(env)) = (&raw.auth, env) {
        file.auth = Some(auth_config(&src, table, env)?);
    }
    Ok(file)
}

/// The `[auth]` table; an error names the line and the field (`auth.token.role`, ...) and never
/// repeats a token.
fn auth_config(
    src: &Src<'_>,
    table: &Spanned<RawAuth>,
    env: EnvLookup<'_>,
) -> Result<crate::auth::AuthConfig, ConfigFileError> {
    use crate::auth::{AuthConfig, MetricsAccess, Role, Token, TokenError};
    let raw = table.get_ref();
    let metrics = match &raw.metrics {
        None => MetricsAccess::default(),
        Some(m) => MetricsAccess::parse(m.get_ref()).ok_or_else(|| {
            src.err(
                m.span(),
                "auth.metrics",
                format!(
                    "invalid value {:?}: expected \"read\" (a read or operator token) or \"open\"",
                    m.get_ref()
                ),
            )
        })?,
    };
    let mut tokens: Vec<Token> = Vec::new();
    for entry in raw.token.iter().flatten() {
        let t = entry.get_ref();
        let role = Role::parse(t.role.get_ref())
            .map_err(|e| src.err(t.role.span(), "auth.token.role", e))?;
        let (secret, span, field) = match (&t.token, &t.token_env) {
            (Some(_), Some(v)) => {
                return Err(src.err(v.span(), "auth.token.token_env", TokenError::Both))
            }
            (None, None) => {
                return Err(src.err(t.name.span(), "auth.token.token", TokenError::Neither))
            }
            (Some(s), None) => (s.get_ref().clone(), s.span(), "auth.token.token"),
            (None, Some(v)) => {
                let var = v.get_ref().trim();
                match env(var).filter(|s| !s.is_empty()) {
                    Some(s) => (s, v.span(), "auth.token.token_env"),
                    None => {
                        return Err(src.err(
                            v.span(),
                            "auth.token.token_env",
                            TokenError::Env(var.to_string()),
                        ))
                    }
                }
            }
        };
        let token = Token::new(t.name.get_ref(), &secret, role).map_err(|e| {
            let (span, field) = match e {
                TokenError::Name(_) => (t.name.span(), "auth.token.name"),
                _ => (span.clone(), field),
            };
            src.err(span, field, e)
        })?;
        tokens.push(token);
        AuthConfig::check_unique(&tokens).map_err(|e| src.err(span.clone(), field, e))?;
    }
    Ok(AuthConfig { tokens, metrics })
}

/// The `[[notify]]` tables as targets; an error names the table's line and its field
/// (`notify.url`, ...).
fn notify_targets(
    src: &Src<'_>,
    tables: &[Spanned<RawNotify>],
) -> Result<Vec<crate::notify::Target>, ConfigFileError> {
    use crate::notify::{Target, TargetError};
    let mut out: Vec<Target> = Vec::with_capacity(tables.len());
    for table in tables {
        let t = table.get_ref();
        let target = Target::new(
            t.kind.get_ref(),
            t.url.get_ref(),
            t.secret.as_ref().map(|s| s.get_ref().as_str()),
            t.name.as_ref().map(|s| s.get_ref().as_str()),
        )
        .and_then(|target| match &t.resend_interval {
            None => Ok(target),
            Some(raw) => match value::parse_positive_duration(raw.get_ref()) {
                Ok(every) => target.with_resend_interval(every),
                Err(_) => Err(TargetError::Resend),
            },
        })
        .map_err(|e| {
            let (span, field) = match &e {
                TargetError::Kind(_) => (t.kind.span(), "notify.kind"),
                TargetError::Url(_) => (t.url.span(), "notify.url"),
                TargetError::Secret | TargetError::UnexpectedSecret => match &t.secret {
                    Some(s) => (s.span(), "notify.secret"),
                    None => (t.kind.span(), "notify.secret"),
                },
                TargetError::Name(_) | TargetError::Duplicate(_) => match &t.name {
                    Some(n) => (n.span(), "notify.name"),
                    None => (t.url.span(), "notify.name"),
                },
                TargetError::Resend | TargetError::UnexpectedResend => match &t.resend_interval {
                    Some(r) => (r.span(), "notify.resend_interval"),
                    None => (t.kind.span(), "notify.resend_interval"),
                },
            };
            src.err(span, field, e)
        })?;
        if out.iter().any(|o| o.name == target.name) {
            let span = t.name.as_ref().map_or(t.url.span(), |n| n.span());
            let e = TargetError::Duplicate(target.name.clone());
            return Err(src.err(span, "notify.name", e));
        }
        out.push(target);
    }
    Ok(out)
}

/// Reads and parses a config file. A missing file is an error naming it: a service started with
/// `--config` that silently ran on defaults would be listening where nobody expects.
pub fn load_file(file: &Path) -> Result<FileConfig, ConfigFileError> {
    load_file_env(file, Some(&|name| std::env::var(name).ok()))
}

/// [`load_file`] with `env` standing in for the process environment (see [`parse_file_env`]).
pub fn load_file_env(
    file: &Path,
    env: Option<EnvLookup<'_>>,
) -> Result<FileConfig, ConfigFileError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConfigFileError::Io {
        file: file.to_path_buf(),
        source,
    })?;
    parse_file_env(file, &text, env)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "etc/reckon.toml";

    fn invalid(text: &str) -> (usize, String, String) {
        match parse_file(Path::new(FILE), text) {
            Err(ConfigFileError::Invalid {
                file,
                line,
                field,
                message,
            }) => {
                assert_eq!(file, Path::new(FILE));
                (line, field, message)
            }
            other => panic!("expected Invalid for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn full_file_parses() {
        let text = r#"
# every key
grpc_addr = "127.0.0.1:14317"
http_addr = "[::1]:14318"
api_addr = "localhost:18080"
data_dir = "data"
contracts_dir = "/srv/contracts"
store = "clickhouse://reckon:pw@ch:8123/audit"
stripe_webhook_secret = "whsec_x"
stripe_tolerance = "2m"
max_request_bytes = "4MiB"
max_concurrent_exports = 8
shutdown_grace = "1m30s"
log_format = "json"
log_filter = "warn,reckon=debug"
"#;
        let f = parse_file(Path::new(FILE), text).unwrap();
        let mut cfg = Config::default();
        f.apply(&mut cfg);
        assert_eq!(cfg.grpc_addr, SocketAddr::from(([127, 0, 0, 1], 14317)));
        assert_eq!(cfg.http_addr.to_string(), "[::1]:14318");
        assert_eq!(cfg.api_addr, SocketAddr::from(([127, 0, 0, 1], 18080)));
        assert_eq!(cfg.data_dir, Path::new("etc/data"));
        assert_eq!(cfg.contracts_dir, Path::new("/srv/contracts"));
        assert_eq!(
            cfg.store,
            StoreConfig::ClickHouse {
                url: "http://ch:8123".into(),
                user: "reckon".into(),
                password: "pw".into(),
                database: "audit".into()
            }
        );
        assert_eq!(cfg.stripe_webhook_secret.as_deref(), Some("whsec_x"));
        assert_eq!(cfg.stripe_tolerance, Duration::from_secs(120));
        assert_eq!(cfg.max_request_bytes, 4 << 20);
        assert_eq!(cfg.max_concurrent_exports, 8);
        assert_eq!(cfg.shutdown_grace, Duration::from_secs(90));
        assert_eq!(cfg.log_format, LogFormat::Json);
        assert_eq!(cfg.log_filter, "warn,reckon=debug");
    }

    #[test]
    fn empty_file_changes_nothing() {
        let f = parse_file(Path::new(FILE), "# nothing yet\n").unwrap();
        assert_eq!(f, FileConfig::default());
        let mut cfg = Config::default();
        f.apply(&mut cfg);
        assert_eq!(cfg, Config::default());
        let f = parse_file(Path::new(FILE), "max_request_bytes = 1024\n").unwrap();
        assert_eq!(f.max_request_bytes, Some(1024));
    }

    #[test]
    fn every_bad_value_names_file_line_and_field() {
        let cases: &[(&str, &str, &str)] = &[
            ("grpc_addr = \"4317\"", "grpc_addr", "invalid address"),
            (
                "http_addr = \"example.com:80\"",
                "http_addr",
                "invalid address",
            ),
            (
                "api_addr = \"0.0.0.0:99999\"",
                "api_addr",
                "invalid address",
            ),
            ("data_dir = \"\"", "data_dir", "empty"),
            ("contracts_dir = \" \"", "contracts_dir", "empty"),
            (
                "store = \"postgres://h/db\"",
                "store",
                "unknown store scheme",
            ),
            ("store = \"clickhouse://h:0/db\"", "store", "port"),
            (
                "stripe_webhook_secret = \"\"",
                "stripe_webhook_secret",
                "empty",
            ),
            (
                "stripe_tolerance = \"0s\"",
                "stripe_tolerance",
                "longer than zero",
            ),
            (
                "stripe_tolerance = \"5 minutes\"",
                "stripe_tolerance",
                "invalid duration",
            ),
            (
                "shutdown_grace = \"10x\"",
                "shutdown_grace",
                "invalid duration",
            ),
            (
                "shutdown_grace = \"10\"",
                "shutdown_grace",
                "invalid duration",
            ),
            (
                "max_request_bytes = \"16 gigs\"",
                "max_request_bytes",
                "invalid size",
            ),
            ("max_request_bytes = 0", "max_request_bytes", "at least 1"),
            ("max_request_bytes = -5", "max_request_bytes", "at least 1"),
            (
                "max_request_bytes = 1.5",
                "max_request_bytes",
                "invalid size",
            ),
            (
                "max_concurrent_exports = 0",
                "max_concurrent_exports",
                "at least 1",
            ),
            (
                "max_concurrent_exports = -1",
                "max_concurrent_exports",
                "at least 1",
            ),
            ("log_format = \"xml\"", "log_format", "invalid log format"),
            (
                "log_filter = \"reckon=loud\"",
                "log_filter",
                "invalid log filter",
            ),
            // tracing-subscriber's parser panics on this one (fuzz/regressions/config_toml).
            (
                "log_filter = \"a,\\u00a0\\u00e9=info\"",
                "log_filter",
                "is not ASCII",
            ),
        ];
        for (line_text, want_field, want_msg) in cases {
            // The bad key sits on line 3, after a comment and a good key.
            let text = format!("# reckon\napi_addr = \"127.0.0.1:8080\"\n{line_text}\n");
            let text = if want_field == &"api_addr" {
                format!("# reckon\n\n{line_text}\n")
            } else {
                text
            };
            let (line, field, msg) = invalid(&text);
            assert_eq!(
                (line, field.as_str()),
                (3, *want_field),
                "{line_text}: {msg}"
            );
            assert!(msg.contains(want_msg), "{line_text}: {msg}");
        }
    }

    #[test]
    fn wrong_types_name_the_field() {
        let cases: &[(&str, &str)] = &[
            ("grpc_addr = 4317", "grpc_addr"),
            ("shutdown_grace = 10", "shutdown_grace"),
            ("max_concurrent_exports = \"64\"", "max_concurrent_exports"),
            ("log_format = [\"json\"]", "log_format"),
            ("store = { url = \"x\" }", "store"),
            ("stripe_webhook_secret = true", "stripe_webhook_secret"),
        ];
        for (line_text, want_field) in cases {
            let (line, field, msg) = invalid(&format!("\n\n{line_text}\n"));
            assert_eq!(
                (line, field.as_str()),
                (3, *want_field),
                "{line_text}: {msg}"
            );
            assert!(
                msg.contains("invalid type") || msg.contains("expected"),
                "{msg}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_errors() {
        let (line, field, msg) = invalid("grpc_addr = \"0.0.0.0:4317\"\n\ngrpc_adr = \"x\"\n");
        assert_eq!((line, field.as_str()), (3, "grpc_adr"), "{msg}");
        assert!(msg.contains("unknown field"), "{msg}");
        // The flag spelling is not the key spelling.
        let (line, field, _) = invalid("\ncontracts = \"c\"\n");
        assert_eq!((line, field.as_str()), (2, "contracts"));
        // Tables are not part of the format either.
        let (line, field, _) = invalid("\n\n[server]\naddr = \"x\"\n");
        assert_eq!((line, field.as_str()), (3, "server"));
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let (line, field, msg) = invalid("grpc_addr = \"0.0.0.0:4317\"\nlog_format = \"json\n");
        assert_eq!((line, field.as_str()), (2, "log_format"), "{msg}");
        let (line, _, _) = invalid("a\n");
        assert_eq!(line, 1);
        // A key written twice is a TOML error, not "last one wins".
        let (line, _, msg) = invalid("log_format = \"json\"\nlog_format = \"text\"\n");
        assert_eq!(line, 2, "{msg}");
    }

    #[test]
    fn display_names_file_line_field() {
        let e = parse_file(Path::new(FILE), "\nshutdown_grace = \"10x\"\n").unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("etc/reckon.toml:2: field `shutdown_grace`: "),
            "{s}"
        );
    }

    #[test]
    fn missing_file_is_named() {
        let e = load_file(Path::new("/nonexistent/reckon.toml")).unwrap_err();
        assert!(matches!(&e, ConfigFileError::Io { .. }));
        assert!(e.to_string().contains("/nonexistent/reckon.toml"));
    }

    #[test]
    fn notify_tables_become_targets() {
        use crate::notify::{Target, TargetKind};
        let text = r#"
public_url = "https://reckon.example/"

[[notify]]
kind = "alertmanager"
url = "http://am:9093"
resend_interval = "10s"

[[notify]]
kind = "webhook"
url = "http://hooks.internal/reckon"
secret = "s3cret"
name = "pager"
"#;
        let f = parse_file(Path::new(FILE), text).unwrap();
        let mut cfg = Config::default();
        f.apply(&mut cfg);
        assert_eq!(cfg.public_url.as_deref(), Some("https://reckon.example"));
        assert_eq!(
            cfg.notify,
            vec![
                Target::new("alertmanager", "http://am:9093", None, None)
                    .unwrap()
                    .with_resend_interval(Duration::from_secs(10))
                    .unwrap(),
                Target {
                    name: "pager".into(),
                    kind: TargetKind::Webhook {
                        url: "http://hooks.internal/reckon".into(),
                        secret: "s3cret".into()
                    }
                }
            ]
        );
        // Without tables, nothing changes.
        let f = parse_file(Path::new(FILE), "log_filter = \"info\"\n").unwrap();
        assert_eq!(f.notify, None);
    }

    #[test]
    fn bad_notify_tables_name_line_and_field() {
        let cases: &[(&str, usize, &str, &str)] = &[
            (
                "[[notify]]\nkind = \"pagerduty\"\nurl = \"http://x\"\n",
                2,
                "notify.kind",
                "unknown kind",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\nurl = \"https://x\"\nsecret = \"s\"\n",
                3,
                "notify.url",
                "TLS is not built in",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\nurl = \"http://x\"\n",
                2,
                "notify.secret",
                "secret",
            ),
            (
                "[[notify]]\nkind = \"alertmanager\"\nurl = \"http://x\"\nsecret = \"s\"\n",
                4,
                "notify.secret",
                "takes no secret",
            ),
            (
                "[[notify]]\nkind = \"alertmanager\"\nurl = \"http://x\"\nname = \"a b\"\n",
                4,
                "notify.name",
                "letters",
            ),
            (
                "[[notify]]\nkind = \"alertmanager\"\nurl = \"http://x\"\n\n[[notify]]\nkind = \"alertmanager\"\nurl = \"http://x/\"\n",
                7,
                "notify.name",
                "two [[notify]] targets",
            ),
            (
                "[[notify]]\nkind = \"alertmanager\"\nurl = \"http://x\"\nsecert = \"s\"\n",
                4,
                "notify.secert",
                "unknown field",
            ),
            (
                "[[notify]]\nkind = \"alertmanager\"\nurl = \"http://x\"\nresend_interval = \"2h\"\n",
                4,
                "notify.resend_interval",
                "between 1s and 1h",
            ),
            (
                "[[notify]]\nkind = \"webhook\"\nurl = \"http://x\"\nsecret = \"s\"\nresend_interval = \"5s\"\n",
                5,
                "notify.resend_interval",
                "only an alertmanager",
            ),
            ("public_url = \"ftp://x\"\n", 1, "public_url", "invalid URL"),
        ];
        for (text, want_line, want_field, want_msg) in cases {
            let (line, field, msg) = invalid(text);
            assert_eq!(
                (line, field.as_str()),
                (*want_line, *want_field),
                "{text}: {msg}"
            );
            assert!(msg.contains(want_msg), "{text}: {msg}");
        }
        // A table without its url: the missing field is named.
        let (_, field, msg) = invalid("[[notify]]\nkind = \"alertmanager\"\n");
        assert!(field.ends_with("url"), "{field}: {msg}");
        // The secret is never echoed.
        let (_, _, msg) = invalid(
            "[[notify]]\nkind = \"alertmanager\"\nurl = \"http://x\"\nsecret = \"hunter2\"\n",
        );
        assert!(!msg.contains("hunter2"), "{msg}");
    }

    fn with_env(text: &str, env: &[(&str, &str)]) -> Result<FileConfig, ConfigFileError> {
        let env: std::collections::HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse_file_env(
            Path::new(FILE),
            text,
            Some(&move |k: &str| env.get(k).cloned()),
        )
    }

    const OP: &str = "op-0123456789abcdef";

    #[test]
    fn auth_tokens_and_tls_files() {
        use crate::auth::{MetricsAccess, Role, Token};
        let text = r#"
tls_cert = "tls/cert.pem"
tls_key = "/etc/reckon/key.pem"

[auth]
metrics = "open"

[[auth.token]]
name = "agents"
token_env = "AGENTS_TOKEN"
role = "ingest"

[[auth.token]]
name = "ana"
token = "op-0123456789abcdef"
role = "operator"
"#;
        let f = with_env(text, &[("AGENTS_TOKEN", "agents-0123456789abcdef")]).unwrap();
        let mut cfg = Config::default();
        f.apply(&mut cfg);
        assert_eq!(cfg.tls_cert.as_deref(), Some(Path::new("etc/tls/cert.pem")));
        assert_eq!(
            cfg.tls_key.as_deref(),
            Some(Path::new("/etc/reckon/key.pem"))
        );
        assert_eq!(cfg.auth.metrics, MetricsAccess::Open);
        assert_eq!(
            cfg.auth.tokens,
            vec![
                Token::new("agents", "agents-0123456789abcdef", Role::Ingest).unwrap(),
                Token::new("ana", OP, Role::Operator).unwrap(),
            ]
        );
        // Without an environment to resolve them (commands that serve nothing), tokens are
        // left alone and no variable is needed.
        let f = parse_file_env(Path::new(FILE), text, None).unwrap();
        assert_eq!(f.auth, None);
        // `[auth]` alone: no tokens, metrics as said.
        let f = with_env("[auth]\nmetrics = \"read\"\n", &[]).unwrap();
        assert_eq!(f.auth.unwrap().tokens, vec![]);
    }

    #[test]
    fn bad_auth_tables_name_line_and_field_and_never_the_token() {
        let t = |name: &str, secret_line: &str, role: &str| {
            format!("[[auth.token]]\nname = \"{name}\"\n{secret_line}\nrole = \"{role}\"\n")
        };
        let ok = format!("token = \"{OP}\"");
        let cases: Vec<(String, usize, &str, &str)> = vec![
            (t("ana", &ok, "admin"), 4, "auth.token.role", "unknown role"),
            (
                t("a b", &ok, "read"),
                2,
                "auth.token.name",
                "invalid token name",
            ),
            (
                t("ana", "token = \"hunter2\"", "read"),
                3,
                "auth.token.token",
                "at least 16 bytes",
            ),
            (
                t("ana", "token = \"hunter2 hunter2 hunter2\"", "read"),
                3,
                "auth.token.token",
                "visible ASCII",
            ),
            (
                t("ana", "token_env = \"UNSET_VAR\"", "read"),
                3,
                "auth.token.token_env",
                "UNSET_VAR is not set",
            ),
            (
                t("ana", "token_env = \"EMPTY_VAR\"", "read"),
                3,
                "auth.token.token_env",
                "EMPTY_VAR is not set",
            ),
            (
                t("ana", "token_env = \"SHORT_VAR\"", "read"),
                3,
                "auth.token.token_env",
                "at least 16 bytes",
            ),
            (
                t(
                    "ana",
                    &format!("token = \"{OP}\"\ntoken_env = \"X\""),
                    "read",
                ),
                4,
                "auth.token.token_env",
                "not both",
            ),
            (
                "[[auth.token]]\nname = \"ana\"\nrole = \"read\"\n".into(),
                2,
                "auth.token.token",
                "inline",
            ),
            (
                format!("{}\n{}", t("ana", &ok, "read"), t("bob", &ok, "operator")),
                8,
                "auth.token.token",
                "configured twice",
            ),
            (
                "[auth]\nmetrics = \"public\"\n".into(),
                2,
                "auth.metrics",
                "invalid value",
            ),
        ];
        let env = [("EMPTY_VAR", ""), ("SHORT_VAR", "hunter2")];
        for (text, want_line, want_field, want_msg) in &cases {
            match with_env(text, &env) {
                Err(ConfigFileError::Invalid {
                    line,
                    field,
                    message,
                    ..
                }) => {
                    assert_eq!(
                        (line, field.as_str()),
                        (*want_line, *want_field),
                        "{text}: {message}"
                    );
                    assert!(message.contains(want_msg), "{text}: {message}");
                    assert!(
                        !message.contains("hunter2") && !message.contains(OP),
                        "{message}"
                    );
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // Unknown keys in a token table are errors too.
        let (line, field, msg) = invalid(&format!(
            "[[auth.token]]\nname = \"ana\"\n{ok}\nrole = \"read\"\nrol = \"x\"\n"
        ));
        assert_eq!((line, field.as_str()), (5, "auth.token.rol"), "{msg}");
        let (_, field, _) = invalid("tls_cert = \"\"\n");
        assert_eq!(field, "tls_cert");
    }

    /// The README's configuration example is a valid file, tokens and TLS included.
    #[test]
    fn the_readme_example_parses() {
        let readme = include_str!("../../README.md");
        let start = readme.find("### Configuration").unwrap();
        let block = &readme[start..];
        let block = &block[block.find("```toml\n").unwrap() + 8..];
        let block = &block[..block.find("```").unwrap()];
        let f = with_env(block, &[("RECKON_TOKEN_AGENTS", "agents-0123456789abcdef")]).unwrap();
        let auth = f.auth.unwrap();
        assert_eq!(auth.tokens.len(), 1);
        assert_eq!(auth.tokens[0].name, "agents");
        assert!(f.tls_cert.is_some() && f.tls_key.is_some());
    }

    /// Adding a setting to the table adds it to the file; README's sample names each one.
    #[test]
    fn the_readme_example_names_every_setting() {
        let readme = include_str!("../../README.md");
        let start = readme.find("### Configuration").unwrap();
        let block = &readme[start..];
        let block = &block[block.find("```toml\n").unwrap() + 8..];
        let block = &block[..block.find("```").unwrap()];
        for (key, _) in SETTINGS.vars() {
            assert!(
                block.lines().any(|l| l.starts_with(&format!("{key} = "))),
                "{key} is not in README's sample"
            );
        }
    }

    #[test]
    fn store_password_is_not_echoed() {
        let (_, _, msg) = invalid("store = \"clickhouse://u:hunter2@h/1x\"\n");
        assert!(!msg.contains("hunter2"), "{msg}");
    }
}
