//! Process-wide logging: `tracing` events to stderr as text or JSON lines, and, when asked
//! (`self_traces`), reckon's own `info` spans exported by OTLP.
//!
//! Logs go to stderr so that commands printing results (`reckon report --format csv`) keep stdout
//! clean for pipes.

use crate::config::value::env_filter;
use crate::config::LogFormat;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("invalid log filter {filter:?}: {message}")]
    BadFilter { filter: String, message: String },
    #[error("RUST_LOG: invalid log filter {filter:?}: {message}")]
    BadRustLog { filter: String, message: String },
    #[error("self_traces: cannot export to {endpoint}: {message}")]
    SelfTraces { endpoint: String, message: String },
}

/// Whether `init_logging` already ran in this process (successfully or with someone else's
/// subscriber in place). A mutex rather than a flag so two racing first calls don't both install.
static INITIALIZED: Mutex<bool> = Mutex::new(false);

/// Installs the global subscriber. `filter` is a `tracing` env-filter directive (`info`,
/// `warn,reckon=debug`); a set, non-empty `RUST_LOG` replaces it, the usual escape hatch when
/// debugging a deployment without editing its config. Calling it again is a no-op, so tests and
/// embedders can call it freely; if another subscriber was installed first, that one stays.
pub fn init_logging(format: LogFormat, filter: &str) -> Result<(), LoggingError> {
    init(format, filter, None).map(drop)
}

/// Where and how much of reckon's own work to export as spans (settings `self_traces`,
/// `self_traces_one_in`).
#[derive(Clone, Debug)]
pub struct SelfTracesTo {
    /// OTLP/gRPC endpoint, `http://HOST:4317`.
    pub endpoint: String,
    /// Keep one trace in this many (decided at each trace's root).
    pub one_in: usize,
}

/// reckon's own spans on their way out; [`SelfTraces::shutdown`] sends what is left.
pub struct SelfTraces {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
}

impl SelfTraces {
    /// Exports the spans still queued. Blocks (the exporter has its own thread): call it off
    /// the async workers.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("reckon: exporting its own last spans failed: {e}");
        }
    }
}

/// [`init_logging`], and with `self_traces` reckon's own spans (the `info` spans of its code:
/// exports, audit steps, store writes, notification deliveries) exported by OTLP/gRPC. Must
/// run inside the Tokio runtime that serves: the exporter's channel lives on it.
pub fn init_serving(
    format: LogFormat,
    filter: &str,
    self_traces: Option<SelfTracesTo>,
) -> Result<Option<SelfTraces>, LoggingError> {
    init(format, filter, self_traces)
}

fn init(
    format: LogFormat,
    filter: &str,
    self_traces: Option<SelfTracesTo>,
) -> Result<Option<SelfTraces>, LoggingError> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let mut done = INITIALIZED.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return Ok(None);
    }
    let filter = match std::env::var("RUST_LOG") {
        Ok(rust_log) if !rust_log.trim().is_empty() => {
            env_filter(&rust_log).map_err(|message| LoggingError::BadRustLog {
                filter: rust_log.clone(),
                message,
            })?
        }
        _ => env_filter(filter).map_err(|message| LoggingError::BadFilter {
            filter: filter.to_string(),
            message,
        })?,
    };
    // Colours only for a person at a terminal: escape codes in a log file or a journal are
    // noise, and NO_COLOR (no-color.org) turns them off anywhere.
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    }
    .with_filter(filter);
    let exported = match self_traces {
        Some(to) => {
            Some(
                self_traces_provider(&to).map_err(|message| LoggingError::SelfTraces {
                    endpoint: to.endpoint.clone(),
                    message,
                })?,
            )
        }
        None => None,
    };
    let spans = exported.as_ref().map(|p| {
        use opentelemetry::trace::TracerProvider;
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("reckon"))
            // reckon's own spans only, not its dependencies'.
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("reckon", tracing::Level::INFO),
            )
    });
    // `try_init` fails only when a global subscriber already exists (installed by a test harness
    // or an embedding program); keeping theirs is the no-op this function promises.
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(spans)
        .try_init();
    *done = true;
    Ok(exported.map(|provider| SelfTraces { provider }))
}

fn self_traces_provider(
    to: &SelfTracesTo,
) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, String> {
    use opentelemetry_otlp::WithExportConfig;
    use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracerProvider};
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(&to.endpoint)
        .with_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    let ratio = 1.0 / to.one_in.max(1) as f64;
    Ok(SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        ))))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("reckon")
                .build(),
        )
        .build())
}

/// Lets a log line that can repeat once per request through at most once per period for each
/// kind of failure, counting what it held back. A full disk or a dead store refuses every
/// export: a line per refusal would flood the log, often onto the very disk that is full.
/// Metrics still count every one. Kinds are apart so a rare failure (a damaged page) is not
/// held back behind a storm of a common one (the full disk).
pub struct Throttle {
    every: Duration,
    /// Per kind: when a line last went through, and how many were held back since.
    kinds: Mutex<Vec<(String, Instant, u64)>>,
}

/// Failures that repeat per request are logged at most this often, each site and kind on its
/// own.
pub const REPEATED_FAILURE_EVERY: Duration = Duration::from_secs(5);

/// Kinds one throttle tells apart; a new one past this replaces the one heard from longest ago.
const MAX_KINDS: usize = 16;

impl Throttle {
    pub const fn new(every: Duration) -> Self {
        Throttle {
            every,
            kinds: Mutex::new(Vec::new()),
        }
    }

    /// `Some(held_back)`: log this one, saying how many of its `kind` (a short, stable label:
    /// [`crate::store::StoreError::kind`]) were held back before it; `None`: hold it back.
    pub fn admit(&self, kind: &str) -> Option<u64> {
        self.admit_at(kind, Instant::now())
    }

    fn admit_at(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, last, held_back)) = kinds.iter_mut().find(|(k, ..)| k == kind) {
            if now.saturating_duration_since(*last) < self.every {
                *held_back += 1;
                return None;
            }
            *last = now;
            return Some(std::mem::take(held_back));
        }
        if kinds.len() >= MAX_KINDS {
            if let Some(oldest) = (0..kinds.len()).min_by_key(|&i| kinds[i].1) {
                kinds.swap_remove(oldest);
            }
        }
        kinds.push((kind.to_string(), now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_line_through_per_period_and_counts_the_rest() {
        let t = Throttle::new(Duration::from_secs(5));
        let t0 = Instant::now();
        let full = "sqlite:DiskFull";
        assert_eq!(t.admit_at(full, t0), Some(0), "the first goes through");
        assert_eq!(t.admit_at(full, t0 + Duration::from_secs(1)), None);
        assert_eq!(t.admit_at(full, t0 + Duration::from_millis(4_999)), None);
        assert_eq!(
            t.admit_at(full, t0 + Duration::from_secs(5)),
            Some(2),
            "the next says how many it held back"
        );
        assert_eq!(t.admit_at(full, t0 + Duration::from_secs(6)), None);
        assert_eq!(t.admit_at(full, t0 + Duration::from_secs(11)), Some(1));
        assert_eq!(t.admit_at(full, t0 + Duration::from_secs(30)), Some(0));
    }

    /// A rare failure in the middle of a storm of another is logged at once, and counted on
    /// its own; past the kinds it tells apart, the one heard from longest ago makes room.
    #[test]
    fn each_kind_of_failure_has_its_own_period() {
        let t = Throttle::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(t.admit_at("sqlite:DiskFull", t0), Some(0));
        assert_eq!(
            t.admit_at("sqlite:DiskFull", t0 + Duration::from_secs(1)),
            None
        );
        assert_eq!(
            t.admit_at("sqlite:DatabaseCorrupt", t0 + Duration::from_secs(2)),
            Some(0),
            "not held back behind the full disk"
        );
        assert_eq!(
            t.admit_at("sqlite:DatabaseCorrupt", t0 + Duration::from_secs(3)),
            None
        );
        assert_eq!(
            t.admit_at("sqlite:DiskFull", t0 + Duration::from_secs(5)),
            Some(1)
        );
        for i in 0..MAX_KINDS {
            t.admit_at(&format!("clickhouse:{i}"), t0 + Duration::from_secs(6));
        }
        assert_eq!(
            t.admit_at("sqlite:DiskFull", t0 + Duration::from_secs(7)),
            Some(0),
            "forgotten to make room, so heard afresh"
        );
    }

    #[test]
    fn bad_filter_is_an_error_and_second_call_is_a_no_op() {
        // Only meaningful without RUST_LOG overriding the argument.
        if std::env::var("RUST_LOG").map_or(true, |v| v.trim().is_empty()) {
            assert!(matches!(
                init_logging(LogFormat::Text, "reckon=loud"),
                Err(LoggingError::BadFilter { .. })
            ));
        }
        init_logging(LogFormat::Json, "info").unwrap();
        init_logging(LogFormat::Text, "debug").unwrap();
        // Even a bad filter is not looked at once logging is set up.
        init_logging(LogFormat::Text, "reckon=loud").unwrap();
        tracing::info!("logging works");
    }
}
