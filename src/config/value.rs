//! Parsers for single setting values, shared by the three places a setting can come from (flag,
//! `RECKON_*` variable, config file) so that a value means the same thing wherever it is written.

use super::{LogFormat, StoreConfig};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Why one value was refused. Messages never repeat a store URL: it may carry a password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("invalid address {0:?}: expected IP:PORT, e.g. \"0.0.0.0:4317\", \"[::1]:4318\" or \"localhost:8080\"")]
    Address(String),
    #[error("invalid duration {0:?}: expected e.g. \"10s\", \"500ms\", \"5m\" or \"1h30m\"")]
    Duration(String),
    #[error(
        "invalid size {0:?}: expected bytes, e.g. \"16777216\", \"64KiB\", \"16MiB\" or \"1GiB\""
    )]
    Size(String),
    #[error("must be at least 1")]
    Zero,
    #[error("invalid number {0:?}: expected a whole number of at least 1")]
    Count(String),
    #[error("must be longer than zero")]
    ZeroDuration,
    #[error("must not be empty")]
    Empty,
    #[error("invalid log format {0:?}: expected \"text\" or \"json\"")]
    LogFormat(String),
    #[error("invalid log filter {value:?}: {message}")]
    LogFilter { value: String, message: String },
    #[error("invalid store: {0}")]
    Store(#[from] StoreUrlError),
    #[error("invalid URL {0:?}: expected http://HOST[:PORT] or https://HOST[:PORT]")]
    HttpUrl(String),
}

/// Why a `--store` value was refused. No variant carries the URL itself (see `ValueError`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreUrlError {
    #[error("unknown store scheme {0:?}: expected \"sqlite\" or clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]")]
    UnknownScheme(String),
    #[error("expected \"sqlite\" or clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]")]
    NotAUrl,
    #[error("the SQLite store is one file under --data-dir; write just \"sqlite\"")]
    SqlitePath,
    #[error("the ClickHouse URL names no host")]
    MissingHost,
    #[error("invalid ClickHouse host {0:?}")]
    BadHost(String),
    #[error("invalid ClickHouse port {0:?}: expected 1..=65535")]
    BadPort(String),
    #[error("invalid ClickHouse database {0:?}: expected letters, digits and '_', not starting with a digit")]
    BadDatabase(String),
    #[error("the ClickHouse URL has a bad percent-escape in its user or password")]
    BadEscape,
    #[error("the ClickHouse URL may not carry a query string or fragment; settings go in the config file")]
    QueryNotSupported,
}

/// `IP:PORT`, `[IPv6]:PORT`, or `localhost:PORT`. Host names other than `localhost` are refused
/// rather than resolved: a listen address decided by DNS at start-up would be a surprise.
pub fn parse_addr(s: &str) -> Result<SocketAddr, ValueError> {
    let t = s.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(port) = t.strip_prefix("localhost:") {
        if let Ok(port) = port.parse::<u16>() {
            return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
        }
    }
    Err(ValueError::Address(s.to_string()))
}

/// A duration in reckon's one syntax (`crate::contract::parse_duration`), so a config file and a
/// contract file agree on what `"10s"` means. Zero is allowed (e.g. no shutdown grace).
pub fn parse_duration(s: &str) -> Result<Duration, ValueError> {
    match crate::contract::parse_duration(s) {
        Some(d) if d.0 >= 0 => Ok(Duration::from_nanos(d.0 as u64)),
        _ => Err(ValueError::Duration(s.to_string())),
    }
}

/// `evict_after`: a duration, or `never` to keep settled intents in memory.
pub fn parse_evict_after(s: &str) -> Result<Option<Duration>, ValueError> {
    match s.trim() {
        "never" | "off" => Ok(None),
        other => parse_duration(other).map(Some),
    }
}

/// `retention`: a duration, or `forever` (the default: raw events are never expired).
pub fn parse_retention(s: &str) -> Result<Option<Duration>, ValueError> {
    match s.trim() {
        "forever" | "never" | "off" => Ok(None),
        other => parse_positive_duration(other).map(Some),
    }
}

/// A duration that must not be zero (a zero Stripe tolerance would refuse every webhook).
pub fn parse_positive_duration(s: &str) -> Result<Duration, ValueError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(ValueError::ZeroDuration);
    }
    Ok(d)
}

/// A byte count: a plain number, or one with a binary (`KiB`, `MiB`, `GiB`) or decimal (`KB`,
/// `MB`, `GB`) suffix, because nobody should have to type 16777216. Zero is refused.
pub fn parse_size(s: &str) -> Result<usize, ValueError> {
    let t = s.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, unit) = t.split_at(digits);
    let bad = || ValueError::Size(s.to_string());
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(bad()),
    };
    let bytes = n.checked_mul(mult).ok_or_else(bad)?;
    let bytes = usize::try_from(bytes).map_err(|_| bad())?;
    if bytes == 0 {
        return Err(ValueError::Zero);
    }
    Ok(bytes)
}

/// A count of at least one (e.g. concurrent exports: zero would refuse everything).
pub fn parse_count(s: &str) -> Result<usize, ValueError> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err(ValueError::Zero),
        Ok(n) => Ok(n),
        Err(_) => Err(ValueError::Count(s.to_string())),
    }
}

pub fn parse_log_format(s: &str) -> Result<LogFormat, ValueError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(ValueError::LogFormat(s.to_string())),
    }
}

/// Checked now with the same parser `logging::init_logging` uses, so a typo in the filter fails at
/// start-up instead of silently logging nothing.
pub fn parse_log_filter(s: &str) -> Result<String, ValueError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(ValueError::Empty);
    }
    env_filter(t).map_err(|message| ValueError::LogFilter {
        value: s.to_string(),
        message,
    })?;
    Ok(t.to_string())
}

/// The one parse of a `tracing` filter (`log_filter` from any layer, and `RUST_LOG`). Both found
/// by fuzzing the config file:
/// - only ASCII is accepted: tracing-subscriber 0.3 panics on a directive that starts with
///   non-ASCII whitespace before a multi-byte character (it slices the untrimmed text at
///   offsets of the trimmed one), and targets, levels and span names are ASCII;
/// - field values (`[span{field=value}]`) match literally, not as regular expressions: a
///   200-byte filter took tracing-subscriber 87 s to compile into an automaton and refuse.
pub fn env_filter(s: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    if let Some(c) = s.chars().find(|c| !c.is_ascii()) {
        return Err(format!(
            "{c:?} is not ASCII (targets, levels and span names are)"
        ));
    }
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(s)
        .map_err(|e| e.to_string())
}

/// A secret may not be empty: an empty HMAC key is one anyone can sign with. To turn signature
/// checks off, leave the setting out.
pub fn parse_secret(s: &str) -> Result<String, ValueError> {
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    Ok(s.to_string())
}

/// A file or directory: not empty (nor only spaces), taken as written otherwise.
pub fn parse_path(s: &str) -> Result<PathBuf, ValueError> {
    if s.trim().is_empty() {
        return Err(ValueError::Empty);
    }
    Ok(PathBuf::from(s))
}

/// A non-empty, trimmed word (operator names, escalation ids, resolutions).
pub fn parse_non_empty(s: &str) -> Result<String, ValueError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(ValueError::Empty);
    }
    Ok(t.to_string())
}

/// The base URL of a reckon (`--server`, demo `--target`): `http(s)://host[:port][/prefix]`,
/// returned without trailing slashes so callers can append `/api/v1/...`.
pub fn parse_http_url(s: &str) -> Result<String, ValueError> {
    let t = s.trim();
    let rest = t
        .strip_prefix("http://")
        .or_else(|| t.strip_prefix("https://"))
        .ok_or_else(|| ValueError::HttpUrl(s.to_string()))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || host.contains(char::is_whitespace) || rest.contains(['?', '#']) {
        return Err(ValueError::HttpUrl(s.to_string()));
    }
    Ok(t.trim_end_matches('/').to_string())
}

/// [`parse_store`] for the settings table: its error as a [`ValueError`].
pub fn parse_store_setting(s: &str) -> Result<StoreConfig, ValueError> {
    Ok(parse_store(s)?)
}

/// `sqlite`, or a ClickHouse HTTP endpoint:
/// `clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]` (also `clickhouse+http://`, `http://`;
/// `clickhouse+https://`, `https://` for TLS). Defaults: user `default`, empty password, port
/// 8123 (8443 with TLS), database `default`. User and password may be percent-escaped, so a
/// password may contain `@`, `:` or `/`.
///
/// Hand-written rather than `url::Url` (in the tree through the ClickHouse client): `url` takes
/// `clickhouse://` as a non-special scheme with an opaque host (spaces and all), accepts an empty
/// port (`h:/db`) and passes a lone `%` through; each is refused here with the part named, and
/// no message repeats the password.
pub fn parse_store(s: &str) -> Result<StoreConfig, StoreUrlError> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("sqlite") {
        return Ok(StoreConfig::Sqlite);
    }
    let (scheme, rest) = t.split_once("://").ok_or(StoreUrlError::NotAUrl)?;
    let (http, default_port) = match scheme.to_ascii_lowercase().as_str() {
        "clickhouse" | "clickhouse+http" | "http" => ("http", 8123),
        "clickhouse+https" | "https" => ("https", 8443),
        "sqlite" => return Err(StoreUrlError::SqlitePath),
        other => return Err(StoreUrlError::UnknownScheme(other.to_string())),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if tail.contains(['?', '#']) {
        return Err(StoreUrlError::QueryNotSupported);
    }
    // The last '@' separates user info from the host, as in RFC 3986 parsers that tolerate an
    // unescaped '@' in the password.
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        None => (String::new(), String::new()),
        Some(u) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            (percent_decode(user)?, percent_decode(pass)?)
        }
    };
    let (host, port) = split_host_port(hostport)?;
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n != 0 => n,
            _ => return Err(StoreUrlError::BadPort(p.to_string())),
        },
    };
    let database = match tail.trim_start_matches('/') {
        "" => "default".to_string(),
        db => {
            // The name ends up in DDL (`CREATE TABLE db.reckon_...`); restricting it to a plain
            // identifier keeps it from needing quoting or smuggling SQL.
            let ok = db.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(StoreUrlError::BadDatabase(db.to_string()));
            }
            db.to_string()
        }
    };
    Ok(StoreConfig::ClickHouse {
        url: format!("{http}://{host}:{port}"),
        user: if user.is_empty() {
            "default".into()
        } else {
            user
        },
        password,
        database,
    })
}

fn split_host_port(hostport: &str) -> Result<(String, Option<&str>), StoreUrlError> {
    if hostport.is_empty() {
        return Err(StoreUrlError::MissingHost);
    }
    if let Some(v6) = hostport.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| StoreUrlError::BadHost(hostport.to_string()))?;
        if addr.parse::<Ipv6Addr>().is_err() {
            return Err(StoreUrlError::BadHost(hostport.to_string()));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| StoreUrlError::BadHost(hostport.to_string()))?,
            ),
        };
        return Ok((format!("[{addr}]"), port));
    }
    let (host, port) = match hostport.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (hostport, None),
    };
    if host.is_empty() {
        return Err(StoreUrlError::MissingHost);
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(StoreUrlError::BadHost(host.to_string()));
    }
    Ok((host.to_string(), port))
}

fn percent_decode(s: &str) -> Result<String, StoreUrlError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or(StoreUrlError::BadEscape)?;
            let hex = std::str::from_utf8(hex).map_err(|_| StoreUrlError::BadEscape)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| StoreUrlError::BadEscape)?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| StoreUrlError::BadEscape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(url: &str, user: &str, password: &str, database: &str) -> StoreConfig {
        StoreConfig::ClickHouse {
            url: url.into(),
            user: user.into(),
            password: password.into(),
            database: database.into(),
        }
    }

    #[test]
    fn store_urls() {
        assert_eq!(parse_store("sqlite"), Ok(StoreConfig::Sqlite));
        assert_eq!(parse_store(" SQLite "), Ok(StoreConfig::Sqlite));
        let cases = [
            (
                "clickhouse://user:pass@host:8123/db",
                ch("http://host:8123", "user", "pass", "db"),
            ),
            (
                "clickhouse://ch.internal",
                ch("http://ch.internal:8123", "default", "", "default"),
            ),
            (
                "clickhouse://reckon@10.0.0.5:9000/",
                ch("http://10.0.0.5:9000", "reckon", "", "default"),
            ),
            (
                "clickhouse://reckon:@h/audit",
                ch("http://h:8123", "reckon", "", "audit"),
            ),
            (
                "clickhouse://:secret@h",
                ch("http://h:8123", "default", "secret", "default"),
            ),
            (
                "clickhouse://u:p%40ss%3Aw%2Frd@h/db",
                ch("http://h:8123", "u", "p@ss:w/rd", "db"),
            ),
            // An unescaped '@' in the password: the last '@' ends the user info.
            (
                "clickhouse://u:p@ss@h/db",
                ch("http://h:8123", "u", "p@ss", "db"),
            ),
            (
                "clickhouse://[::1]:8124/x_1",
                ch("http://[::1]:8124", "default", "", "x_1"),
            ),
            (
                "clickhouse+https://u:p@ch.example.com/db",
                ch("https://ch.example.com:8443", "u", "p", "db"),
            ),
            (
                "http://u:p@localhost:8123/db",
                ch("http://localhost:8123", "u", "p", "db"),
            ),
            (
                "https://h:443",
                ch("https://h:443", "default", "", "default"),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_store(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn bad_store_urls() {
        use StoreUrlError::*;
        let cases = [
            ("postgres://h/db", UnknownScheme("postgres".into())),
            ("clickhouse", NotAUrl),
            ("", NotAUrl),
            ("sqlite:///var/x.db", SqlitePath),
            ("clickhouse://", MissingHost),
            ("clickhouse://u:p@/db", MissingHost),
            ("clickhouse://:8123/db", MissingHost),
            ("clickhouse://h:0/db", BadPort("0".into())),
            ("clickhouse://h:99999/db", BadPort("99999".into())),
            ("clickhouse://h:/db", BadPort("".into())),
            ("clickhouse://h:x/db", BadPort("x".into())),
            ("clickhouse://h/a/b", BadDatabase("a/b".into())),
            ("clickhouse://h/1db", BadDatabase("1db".into())),
            ("clickhouse://h/db;DROP", BadDatabase("db;DROP".into())),
            ("clickhouse://h/db?secure=1", QueryNotSupported),
            ("clickhouse://h#x", QueryNotSupported),
            ("clickhouse://u:%zz@h", BadEscape),
            ("clickhouse://u:%4@h", BadEscape),
            ("clickhouse://u:%ff@h", BadEscape),
            ("clickhouse://ho st/db", BadHost("ho st".into())),
            ("clickhouse://[::1/db", BadHost("[::1".into())),
            ("clickhouse://[nope]:1/db", BadHost("[nope]:1".into())),
            ("clickhouse://[::1]x/db", BadHost("[::1]x".into())),
        ];
        for (input, want) in cases {
            assert_eq!(parse_store(input), Err(want), "{input}");
        }
        // The password never shows in a message.
        let e = ValueError::from(parse_store("clickhouse://u:hunter2@h/1x").unwrap_err());
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn addresses() {
        assert_eq!(
            parse_addr("0.0.0.0:4317"),
            Ok(SocketAddr::from(([0; 4], 4317)))
        );
        assert_eq!(
            parse_addr("localhost:8080"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 8080)))
        );
        assert_eq!(parse_addr("[::1]:4318").unwrap().port(), 4318);
        for bad in [
            "",
            "4317",
            ":4317",
            "0.0.0.0",
            "example.com:80",
            "1.2.3.4:70000",
        ] {
            assert!(parse_addr(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_counts_durations() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("64 KiB"), Ok(64 << 10));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert_eq!(parse_size("0"), Err(ValueError::Zero));
        for bad in ["", "MiB", "1.5MiB", "-1", "16mib", "99999999999999999999"] {
            assert!(
                matches!(parse_size(bad), Err(ValueError::Size(_))),
                "{bad:?}"
            );
        }
        assert_eq!(parse_count("64"), Ok(64));
        assert_eq!(parse_count("0"), Err(ValueError::Zero));
        assert!(parse_count("-1").is_err());
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("10").is_err());
        assert_eq!(parse_positive_duration("0s"), Err(ValueError::ZeroDuration));
    }

    #[test]
    fn small_values() {
        assert_eq!(parse_log_format("JSON"), Ok(LogFormat::Json));
        assert!(parse_log_format("xml").is_err());
        assert_eq!(
            parse_log_filter("info,reckon=debug").as_deref(),
            Ok("info,reckon=debug")
        );
        assert!(parse_log_filter("reckon=loud").is_err());
        assert!(parse_log_filter(" ").is_err());
        // With field values as regular expressions, tracing-subscriber took 87 s on this one
        // (release build) before refusing it.
        let slow = "not_executed_sta,[contract={]]record_kindt=].orphan_g~r++   +++++++++++++++++++++++++.........2....D..............................................++++:++1A} ,,,,,,,,,,7,,,,o||||]]]e`tt_con,,,,,,filtoolsctdr";
        let began = std::time::Instant::now();
        assert!(parse_log_filter(slow).is_err());
        assert!(
            began.elapsed() < Duration::from_secs(1),
            "{:?}",
            began.elapsed()
        );
        // A field value is matched as written.
        assert!(parse_log_filter("reckon[ingest{tool=issue_refund}]=debug").is_ok());
        // tracing-subscriber panics on this one (the config_toml fuzz target found it).
        assert_eq!(
            parse_log_filter("a,\u{a0}é=info"),
            Err(ValueError::LogFilter {
                value: "a,\u{a0}é=info".into(),
                message: "'\\u{a0}' is not ASCII (targets, levels and span names are)".into()
            })
        );
        assert!(parse_secret("").is_err());
        assert_eq!(
            parse_http_url("http://127.0.0.1:8080/").as_deref(),
            Ok("http://127.0.0.1:8080")
        );
        for bad in ["127.0.0.1:8080", "http://", "ftp://x", "http://h?x=1"] {
            assert!(parse_http_url(bad).is_err(), "{bad:?}");
        }
    }
}
