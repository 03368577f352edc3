//! Per-request switches: how a scenario steers one request (execution time, settlement, a
//! failure, a late report) without touching state another scenario might share.

use std::time::Duration;

use axum::http::HeaderMap;

/// Per-request switches a scenario sets as headers; the proxy passes them through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// `x-demo-exec-ms`: how long execution takes (the window in which a same key conflicts).
    pub exec: Duration,
    /// `x-demo-settle`: how a refund settles (default `succeeded` at once).
    pub settle: Settle,
    /// `x-demo-settle-ms`: when a `pending-then-*` refund reaches its terminal state.
    pub settle_after: Duration,
    /// `x-demo-fail: 500`: execution begins, then fails with a server error.
    pub fail_500: bool,
    /// `x-demo-report-delay-ms`: how long before the downstream reports the object to reckon.
    pub report_delay: Duration,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Settle {
    #[default]
    Succeeded,
    Failed,
    Pending,
    PendingThenFailed,
    PendingThenSucceeded,
}

impl Settle {
    fn parse(s: &str) -> Option<Settle> {
        Some(match s {
            "succeeded" => Settle::Succeeded,
            "failed" => Settle::Failed,
            "pending" => Settle::Pending,
            "pending-then-failed" => Settle::PendingThenFailed,
            "pending-then-succeeded" => Settle::PendingThenSucceeded,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Settle::Succeeded => "succeeded",
            Settle::Failed => "failed",
            Settle::Pending => "pending",
            Settle::PendingThenFailed => "pending-then-failed",
            Settle::PendingThenSucceeded => "pending-then-succeeded",
        }
    }
    /// The status a new refund is created with, and the one it later moves to.
    pub(super) fn statuses(self) -> (&'static str, Option<&'static str>) {
        match self {
            Settle::Succeeded => ("succeeded", None),
            Settle::Failed => ("failed", None),
            Settle::Pending => ("pending", None),
            Settle::PendingThenFailed => ("pending", Some("failed")),
            Settle::PendingThenSucceeded => ("pending", Some("succeeded")),
        }
    }
}

impl Knobs {
    pub const EXEC_MS: &'static str = "x-demo-exec-ms";
    pub const SETTLE: &'static str = "x-demo-settle";
    pub const SETTLE_MS: &'static str = "x-demo-settle-ms";
    pub const FAIL: &'static str = "x-demo-fail";
    pub const REPORT_DELAY_MS: &'static str = "x-demo-report-delay-ms";

    /// Unknown or malformed values fall back to the default: a knob is a test aid, and a typo
    /// shows up as a failing row rather than a refused request the row did not expect.
    pub fn from_headers(h: &HeaderMap) -> Knobs {
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
        let ms = |name: &str| {
            text(name)
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        Knobs {
            exec: ms(Self::EXEC_MS).unwrap_or(Duration::from_millis(20)),
            settle: text(Self::SETTLE)
                .and_then(Settle::parse)
                .unwrap_or_default(),
            settle_after: ms(Self::SETTLE_MS).unwrap_or(Duration::from_secs(2)),
            fail_500: text(Self::FAIL) == Some("500"),
            report_delay: ms(Self::REPORT_DELAY_MS).unwrap_or_default(),
        }
    }

    /// The headers that carry these knobs (defaults left out).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let d = Knobs::default();
        let mut out = vec![(Self::EXEC_MS, self.exec.as_millis().to_string())];
        if self.settle != d.settle {
            out.push((Self::SETTLE, self.settle.as_str().to_string()));
            out.push((Self::SETTLE_MS, self.settle_after.as_millis().to_string()));
        }
        if self.fail_500 {
            out.push((Self::FAIL, "500".to_string()));
        }
        if self.report_delay > Duration::ZERO {
            out.push((
                Self::REPORT_DELAY_MS,
                self.report_delay.as_millis().to_string(),
            ));
        }
        out
    }
}
