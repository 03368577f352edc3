//! Process-wide logging: `tracing` events to stderr as text or JSON lines.
//!
//! Logs go to stderr so that commands printing results (`reckon report --format csv`) keep stdout
//! clean for pipes.

use crate::config::value::env_filter;
use crate::config::LogFormat;
use std::sync::Mutex;

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

#[cfg(test)]
mod tests {
    use super::*;

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
