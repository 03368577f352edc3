//! Process-wide logging: `tracing` events to stderr as text or JSON lines.
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
}

/// Whether `init_logging` already ran in this process (successfully or with someone else's
/// subscriber in place). A mutex rather than a flag so two racing first calls don't both install.
static INITIALIZED: Mutex<bool> = Mutex::new(false);

/// Installs the global subscriber. `filter` is a `tracing` env-filter directive (`info`,
/// `warn,reckon=debug`); a set, non-empty `RUST_LOG` replaces it, the usual escape hatch when
/// debugging a deployment without editing its config. Calling it again is a no-op, so tests and
/// embedders can call it freely; if another subscriber was installed first, that one stays.
pub fn init_logging(format: LogFormat, filter: &str) -> Result<(), LoggingError> {
    let mut done = INITIALIZED.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return Ok(());
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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `try_init` fails only when a global subscriber already exists (installed by a test harness
    // or an embedding program); keeping theirs is the no-op this function promises.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    *done = true;
    Ok(())
}

/// Lets a log line that can repeat once per request through at most once per period, counting
/// what it held back. A full disk or a dead store refuses every export: a line per refusal would
/// flood the log, often onto the very disk that is full. Metrics still count every one.
pub struct Throttle {
    every: Duration,
    /// When a line last went through, and how many were held back since.
    state: Mutex<(Option<Instant>, u64)>,
}

/// Failures that repeat per request are logged at most this often, each site on its own.
pub const REPEATED_FAILURE_EVERY: Duration = Duration::from_secs(5);

impl Throttle {
    pub const fn new(every: Duration) -> Self {
        Throttle {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(held_back)`: log this one, saying how many were held back before it; `None`: hold
    /// it back.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last, held_back) = &mut *state;
        match last {
            Some(at) if now.saturating_duration_since(*at) < self.every => {
                *held_back += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(held_back))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_line_through_per_period_and_counts_the_rest() {
        let t = Throttle::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(t.admit_at(t0), Some(0), "the first goes through");
        assert_eq!(t.admit_at(t0 + Duration::from_secs(1)), None);
        assert_eq!(t.admit_at(t0 + Duration::from_millis(4_999)), None);
        assert_eq!(
            t.admit_at(t0 + Duration::from_secs(5)),
            Some(2),
            "the next says how many it held back"
        );
        assert_eq!(t.admit_at(t0 + Duration::from_secs(6)), None);
        assert_eq!(t.admit_at(t0 + Duration::from_secs(11)), Some(1));
        assert_eq!(t.admit_at(t0 + Duration::from_secs(30)), Some(0));
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
