//! ClickHouse failures, classified so the store knows what to retry.
//!
//! The HTTP interface reports a server exception as text (`Code: 117, e.displayText() = ...` on
//! 18.16, `Code: 117. DB::Exception: ...` on current servers; newer ones also send the
//! `X-ClickHouse-Exception-Code` header, which the client turns into the same `Code: N` text).
//! The code decides: a transient condition (overload, too many parts, a replica away, a timeout)
//! is retried with backoff; bad data (a row the server cannot parse or type) fails at once,
//! because sending the same bytes again can only fail again and would hold up every export
//! queued behind it.

use crate::logging::{Throttle, REPEATED_FAILURE_EVERY};
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// What to do about a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retry after a pause: the network, a timeout, an overloaded or restarting server.
    Transient,
    /// The data was refused as malformed; never retried.
    BadData,
    /// Anything else the server refused (syntax, unknown table, authentication): retrying
    /// cannot help, and it is not the data's fault either.
    Permanent,
}

/// Server error codes meaning "the data sent is bad".
const BAD_DATA: &[u32] = &[
    6,   // CANNOT_PARSE_TEXT
    26,  // CANNOT_PARSE_QUOTED_STRING
    27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    32,  // ATTEMPT_TO_READ_AFTER_EOF
    33,  // CANNOT_READ_ALL_DATA
    38,  // CANNOT_PARSE_DATE
    41,  // CANNOT_PARSE_DATETIME
    53,  // TYPE_MISMATCH
    69,  // ARGUMENT_OUT_OF_BOUND
    70,  // CANNOT_CONVERT_TYPE
    72,  // CANNOT_PARSE_NUMBER
    117, // INCORRECT_DATA
    131, // TOO_LARGE_STRING_SIZE
    36,  // BAD_ARGUMENTS (e.g. an unknown Enum8 value)
];

/// Server error codes for conditions that pass.
const TRANSIENT: &[u32] = &[
    3,   // UNEXPECTED_END_OF_FILE (connection cut)
    159, // TIMEOUT_EXCEEDED
    160, // TOO_SLOW
    164, // READONLY (a replica in read-only mode while ZooKeeper is away)
    202, // TOO_MANY_SIMULTANEOUS_QUERIES
    203, // NO_FREE_CONNECTION
    209, // SOCKET_TIMEOUT
    210, // NETWORK_ERROR
    236, // ABORTED
    241, // MEMORY_LIMIT_EXCEEDED
    242, // TABLE_IS_READ_ONLY
    252, // TOO_MANY_PARTS
    285, // TOO_FEW_LIVE_REPLICAS
    319, // UNKNOWN_STATUS_OF_INSERT
    394, // QUERY_WAS_CANCELLED
    425, // SYSTEM_ERROR
    999, // KEEPER_EXCEPTION
];

/// The server's error code in an exception text (`Code: 117, ...` or `Code: 117. ...`).
pub fn parse_code(text: &str) -> Option<u32> {
    let at = text.find("Code: ")?;
    let digits: String = text[at + 6..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Classify a client error; returns the server code when there is one.
pub fn classify(err: &::clickhouse::error::Error) -> (ErrorClass, Option<u32>) {
    use ::clickhouse::error::Error as E;
    match err {
        E::Network(_) | E::TimedOut => (ErrorClass::Transient, None),
        E::BadResponse(text) => classify_response(text),
        // Rows that do not serialize are our data's fault; rows that do not decode are the
        // stored data's: neither improves by asking again.
        E::Custom(_)
        | E::SequenceMustHaveLength
        | E::InvalidUtf8Encoding(_)
        | E::InvalidTagEncoding(_)
        | E::NotEnoughData
        | E::DataFormat(_) => (ErrorClass::BadData, None),
        _ => (ErrorClass::Permanent, None),
    }
}

/// The text of a failed HTTP response: the server's exception, or (from a proxy, or an empty
/// body) only the status line.
pub fn classify_response(text: &str) -> (ErrorClass, Option<u32>) {
    match parse_code(text) {
        Some(code) if BAD_DATA.contains(&code) => (ErrorClass::BadData, Some(code)),
        Some(code) if TRANSIENT.contains(&code) => (ErrorClass::Transient, Some(code)),
        Some(code) => (ErrorClass::Permanent, Some(code)),
        // No exception code: a bare status. 5xx (a proxy's 502/503, a server going down) passes;
        // a 4xx without an exception is a misconfigured endpoint and will not.
        None if text.trim_start().starts_with('4') => (ErrorClass::Permanent, None),
        None => (ErrorClass::Transient, None),
    }
}

/// A failed ClickHouse operation, after whatever retrying it was entitled to.
#[derive(Debug, thiserror::Error)]
pub struct ClickHouseError {
    /// What was being done (`INSERT INTO reckon_attempts`, `load events`).
    pub op: String,
    pub class: ErrorClass,
    pub code: Option<u32>,
    pub attempts: u32,
    #[source]
    pub source: ::clickhouse::error::Error,
}

impl ClickHouseError {
    /// A failure of an operation tried once (one its caller starts over).
    pub fn once(op: &str, source: ::clickhouse::error::Error) -> Self {
        let (class, code) = classify(&source);
        ClickHouseError {
            op: op.to_string(),
            class,
            code,
            attempts: 1,
            source,
        }
    }

    /// Its code, for [`crate::store::StoreError::kind`].
    pub fn kind(&self) -> String {
        kind_of(self.code)
    }
}

/// `clickhouse:{code}`, or `clickhouse` when the server gave none (a connection refused).
pub(crate) fn kind_of(code: Option<u32>) -> String {
    match code {
        Some(code) => format!("clickhouse:{code}"),
        None => "clickhouse".into(),
    }
}

impl fmt::Display for ClickHouseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let class = match self.class {
            ErrorClass::Transient => "transient",
            ErrorClass::BadData => "bad data",
            ErrorClass::Permanent => "refused",
        };
        write!(f, "{}: {} ({class}", self.op, self.source)?;
        if let Some(c) = self.code {
            write!(f, ", code {c}")?;
        }
        write!(f, ", {} attempt(s))", self.attempts)
    }
}

/// Bounded exponential backoff for transient failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (1 = no retry).
    pub attempts: u32,
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// About 6 s of retrying in all: long enough to ride out a server restart or a burst of
    /// TOO_MANY_PARTS, short enough that the OTLP exporter (which retries too) gets its answer
    /// before its own deadline.
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The pause before try `n + 1` (n >= 1): doubling from `first_delay`, capped, with up to
    /// a quarter of jitter so several reckon instances do not retry in lockstep.
    pub fn delay(&self, n: u32) -> Duration {
        let base = self
            .first_delay
            .saturating_mul(1u32 << n.saturating_sub(1).min(16))
            .min(self.max_delay);
        let nanos = crate::clock::wall_now().0.rem_euclid(1_000_000_000) as u32;
        let quarter = base.as_nanos() as u64 / 4;
        let jitter = if quarter == 0 {
            0
        } else {
            u64::from(nanos) % quarter
        };
        base + Duration::from_nanos(jitter)
    }

    /// Run `f` until it succeeds, fails with anything but a transient error, or the tries run
    /// out. Only safe for idempotent operations: every insert here is (ReplacingMergeTree keyed
    /// on identity and version), and so is every read.
    pub async fn run<T, F, Fut>(
        &self,
        op: impl Fn() -> String,
        mut f: F,
    ) -> Result<T, ClickHouseError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ::clickhouse::error::Error>>,
    {
        let mut tries = 0;
        loop {
            tries += 1;
            match f().await {
                Ok(v) => return Ok(v),
                Err(source) => {
                    let (class, code) = classify(&source);
                    if class != ErrorClass::Transient || tries >= self.attempts.max(1) {
                        return Err(ClickHouseError {
                            op: op(),
                            class,
                            code,
                            attempts: tries,
                            source,
                        });
                    }
                    let pause = self.delay(tries);
                    static LOG: Throttle = Throttle::new(REPEATED_FAILURE_EVERY);
                    if let Some(held_back) = LOG.admit(&kind_of(code)) {
                        tracing::warn!(op = %op(), error = %source, try_ = tries, pause_ms = pause.as_millis() as u64, held_back, "ClickHouse failed transiently; retrying");
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::clickhouse::error::Error as E;

    fn bad(text: &str) -> E {
        E::BadResponse(text.to_string())
    }

    #[test]
    fn codes_are_parsed_from_old_and_new_exception_texts() {
        assert_eq!(
            parse_code("Code: 117, e.displayText() = DB::Exception: Unknown field, e.what() = DB::Exception"),
            Some(117)
        );
        assert_eq!(
            parse_code("Code: 53. DB::Exception: Type mismatch. (TYPE_MISMATCH) (version 23.8.1)"),
            Some(53)
        );
        assert_eq!(parse_code("Code: 252"), Some(252));
        assert_eq!(parse_code("503 Service Unavailable"), None);
        assert_eq!(parse_code("Code: x"), None);
    }

    #[test]
    fn bad_data_is_not_transient() {
        for text in [
            "Code: 117, e.displayText() = DB::Exception: Incorrect data",
            "Code: 53. DB::Exception: Type mismatch",
            "Code: 27, e.displayText() = DB::Exception: Cannot parse input",
            "Code: 6. DB::Exception: Cannot parse text",
        ] {
            assert_eq!(classify(&bad(text)).0, ErrorClass::BadData, "{text}");
        }
    }

    #[test]
    fn overload_and_network_are_transient() {
        for text in [
            "Code: 252, e.displayText() = DB::Exception: Too many parts (300)",
            "Code: 159. DB::Exception: Timeout exceeded",
            "Code: 241. DB::Exception: Memory limit exceeded",
            "Code: 202. DB::Exception: Too many simultaneous queries",
            "503 Service Unavailable",
            "502 Bad Gateway",
            "",
        ] {
            assert_eq!(classify(&bad(text)).0, ErrorClass::Transient, "{text:?}");
        }
        assert_eq!(classify(&E::TimedOut).0, ErrorClass::Transient);
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(classify(&E::Network(Box::new(io))).0, ErrorClass::Transient);
    }

    #[test]
    fn other_refusals_are_permanent() {
        for text in [
            "Code: 60, e.displayText() = DB::Exception: Table x doesn't exist",
            "Code: 62. DB::Exception: Syntax error",
            "Code: 192, e.displayText() = DB::Exception: Unknown user nobody",
            "Code: 516. DB::Exception: default: Authentication failed",
            "404 Not Found",
        ] {
            assert_eq!(classify(&bad(text)).0, ErrorClass::Permanent, "{text}");
        }
        assert_eq!(classify(&bad("Code: 60")).1, Some(60));
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let p = RetryPolicy {
            attempts: 10,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        };
        let within = |d: Duration, base: u64| {
            d >= Duration::from_millis(base) && d <= Duration::from_millis(base + base / 4)
        };
        assert!(within(p.delay(1), 100));
        assert!(within(p.delay(2), 200));
        assert!(within(p.delay(3), 400));
        assert!(within(p.delay(5), 1000));
        assert!(within(p.delay(40), 1000));
    }

    #[tokio::test]
    async fn retries_transient_but_not_bad_data() {
        let p = RetryPolicy {
            attempts: 4,
            first_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        };
        let mut calls = 0;
        let err = p
            .run(
                || "op".into(),
                || {
                    calls += 1;
                    async { Err::<(), _>(bad("Code: 252. Too many parts")) }
                },
            )
            .await
            .unwrap_err();
        assert_eq!(
            (calls, err.attempts, err.class),
            (4, 4, ErrorClass::Transient)
        );

        let mut calls = 0;
        let err = p
            .run(
                || "op".into(),
                || {
                    calls += 1;
                    async { Err::<(), _>(bad("Code: 117. Incorrect data")) }
                },
            )
            .await
            .unwrap_err();
        assert_eq!(
            (calls, err.class, err.code),
            (1, ErrorClass::BadData, Some(117))
        );

        let mut calls = 0;
        let ok = p
            .run(
                || "op".into(),
                || {
                    calls += 1;
                    let n = calls;
                    async move {
                        if n < 3 {
                            Err(bad("503 Service Unavailable"))
                        } else {
                            Ok(n)
                        }
                    }
                },
            )
            .await
            .unwrap();
        assert_eq!(ok, 3);
    }
}
