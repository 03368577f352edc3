//! Times from other clocks: which instants reckon accepts in an event.
//!
//! Every time reckon ingests was read from someone else's clock: the agent's host stamps spans,
//! the downstream stamps its records, a collector may stamp log records. A wrong one is not
//! harmless. A span at time 0 is "sent 56 years ago" and escalates at once (every key expired);
//! a record from year 2200 sorts first in every listing and falls into every `since` window
//! forever; a time before 1970 (or after 2106) cannot even be held by the ClickHouse store.
//! So every transport applies one policy, [`TimeBounds`], against the receive time `now`:
//!
//! - not before [`TimeBounds::min`] (2000-01-01T00:00:00Z): catches 0, anything before 1970,
//!   and unit mistakes (seconds or milliseconds read as nanoseconds) while leaving every real
//!   history, however old, acceptable for a backfill;
//! - not more than [`TimeBounds::max_skew`] (1 h) after `now`: an exporter batches for seconds
//!   and a healthy clock is off by milliseconds, so a time an hour ahead is a broken clock (or
//!   `u64::MAX`), not news from the future. There is no lower skew limit: old events are
//!   legitimate (retries, late webhooks, a reconciler catching up);
//! - a span's end does not precede its start. Both times feed the audit (the start: key
//!   retention and expiry; the end: when the response was seen and how long the original may
//!   still commit), and reckon cannot tell which of the two is wrong, so it refuses the span
//!   rather than invent either.
//!
//! An item outside the bounds is refused alone, with a reason naming the field (OTLP partial
//! success, or the records API's `rejected` by index); the rest of its batch is kept. The window
//! never reaches beyond what every store can hold ([`crate::store::holdable`]), so nothing
//! accepted here can fail a store write.
//!
//! Pure: `now` is passed in by the ingest service, which reads the clock.

use std::fmt;

use crate::codec::rfc3339;
use crate::model::{Dur, Event, Timestamp};
use crate::store::{event_times, EARLIEST_HOLDABLE, LATEST_HOLDABLE};

/// The time policy: how early and how far ahead of the receive time an event's times may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeBounds {
    /// The earliest accepted instant.
    pub min: Timestamp,
    /// How far ahead of the receive time a time may be (the clock skew tolerated).
    pub max_skew: Dur,
}

impl TimeBounds {
    /// 2000-01-01T00:00:00Z.
    pub const MIN: Timestamp = Timestamp::from_secs(946_684_800);
    pub const MAX_SKEW: Dur = Dur::hours(1);
    pub const DEFAULT: TimeBounds = TimeBounds {
        min: Self::MIN,
        max_skew: Self::MAX_SKEW,
    };

    /// The accepted window for an item received at `now`.
    pub fn around(self, now: Timestamp) -> TimeWindow {
        TimeWindow {
            now,
            earliest: self.min.max(EARLIEST_HOLDABLE),
            latest: now.saturating_add(self.max_skew).min(LATEST_HOLDABLE),
            max_skew: self.max_skew,
        }
    }
}

impl Default for TimeBounds {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// [`TimeBounds`] applied at one receive time: `earliest..=latest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeWindow {
    /// The receive time (also the default time of a record posted without `observed_at`).
    pub now: Timestamp,
    pub earliest: Timestamp,
    pub latest: Timestamp,
    pub max_skew: Dur,
}

/// Why a time was refused. The caller prefixes the field it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("{} is before {}, the earliest time reckon accepts", rfc3339(*at), rfc3339(*earliest))]
    TooEarly { at: Timestamp, earliest: Timestamp },
    #[error(
        "{} is after {}, the latest time reckon accepts (its clock, {}, plus {} of skew): a clock that far ahead is wrong",
        rfc3339(*at),
        rfc3339(*latest),
        rfc3339(*now),
        max_skew
    )]
    TooLate {
        at: Timestamp,
        latest: Timestamp,
        now: Timestamp,
        max_skew: Dur,
    },
    #[error("{} precedes the start time {}", rfc3339(*end), rfc3339(*start))]
    EndBeforeStart { start: Timestamp, end: Timestamp },
}

/// A refused time in an event: the model's field name (`start`, `end`, `at`, `observed_at`,
/// `created_at`) and why. Decoders rename the field to what their wire format calls it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTimeError {
    pub field: &'static str,
    pub error: TimeError,
}

impl fmt::Display for EventTimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.error)
    }
}

impl TimeWindow {
    /// The window for an item received at `now` under the default bounds.
    pub fn default_at(now: Timestamp) -> TimeWindow {
        TimeBounds::DEFAULT.around(now)
    }

    /// The one check every time from another clock goes through.
    pub fn check(&self, at: Timestamp) -> Result<(), TimeError> {
        if at < self.earliest {
            Err(TimeError::TooEarly {
                at,
                earliest: self.earliest,
            })
        } else if at > self.latest {
            Err(TimeError::TooLate {
                at,
                latest: self.latest,
                now: self.now,
                max_skew: self.max_skew,
            })
        } else {
            Ok(())
        }
    }

    /// A span's start and end: each within the window, the end not before the start.
    pub fn check_span(&self, start: Timestamp, end: Timestamp) -> Result<(), EventTimeError> {
        let at = |field: &'static str| move |error| EventTimeError { field, error };
        self.check(start).map_err(at("start"))?;
        self.check(end).map_err(at("end"))?;
        if end < start {
            return Err(EventTimeError {
                field: "end",
                error: TimeError::EndBeforeStart { start, end },
            });
        }
        Ok(())
    }

    /// Every time an event carries.
    pub fn check_event(&self, e: &Event) -> Result<(), EventTimeError> {
        match e {
            Event::Attempt(a) => self.check_span(a.start, a.end),
            Event::Readback(r) => self.check_span(r.at, r.end).map_err(|mut err| {
                if err.field == "start" {
                    err.field = "at";
                }
                err
            }),
            Event::Record(_) => {
                for (field, at) in event_times(e) {
                    if let Some(at) = at {
                        self.check(at)
                            .map_err(|error| EventTimeError { field, error })?;
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RecordObservation, SpanRef};
    use crate::test_builders::{attempt_at, record_at};

    /// 2026-10-29T12:00:00Z.
    const NOW: Timestamp = Timestamp::from_secs(1_793_275_200);

    fn w() -> TimeWindow {
        TimeWindow::default_at(NOW)
    }

    #[test]
    fn default_window() {
        let w = w();
        assert_eq!(rfc3339(w.earliest), "2000-01-01T00:00:00.000000000Z");
        assert_eq!(w.latest, NOW + Dur::hours(1));
        assert_eq!(w.check(TimeBounds::MIN), Ok(()));
        assert_eq!(w.check(NOW), Ok(()));
        assert_eq!(w.check(NOW + Dur::hours(1)), Ok(()));
        assert_eq!(
            w.check(Timestamp::from_secs(1_000_000_000)),
            Ok(()),
            "2001 is history, not an error"
        );
    }

    #[test]
    fn too_early_covers_zero_pre_1970_and_unit_mistakes() {
        let w = w();
        for at in [
            Timestamp(0),
            Timestamp(-1),
            Timestamp(i64::MIN),
            Timestamp::from_secs(-86_400),
            // Unix seconds read as nanoseconds: January 1970.
            Timestamp(1_761_739_200),
            Timestamp(TimeBounds::MIN.0 - 1),
        ] {
            assert!(
                matches!(w.check(at), Err(TimeError::TooEarly { .. })),
                "{at:?}"
            );
        }
        let msg = w.check(Timestamp(0)).unwrap_err().to_string();
        assert_eq!(
            msg,
            "1970-01-01T00:00:00.000000000Z is before 2000-01-01T00:00:00.000000000Z, the earliest time reckon accepts"
        );
    }

    #[test]
    fn too_late_is_more_than_the_skew_ahead() {
        let w = w();
        for at in [
            NOW + Dur::hours(1) + Dur(1),
            // Year 2200, and u64::MAX as the decoders saturate it.
            Timestamp::from_secs(7_258_118_400),
            Timestamp(i64::MAX),
        ] {
            assert!(
                matches!(w.check(at), Err(TimeError::TooLate { .. })),
                "{at:?}"
            );
        }
        let msg = w
            .check(Timestamp::from_secs(7_258_118_400))
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("2200-01-01T00:00:00.000000000Z is after 2026-10-29T13:00:00.000000000Z, the latest time reckon accepts (its clock, 2026-10-29T12:00:00.000000000Z, plus 1h of skew)"), "{msg}");
    }

    #[test]
    fn never_beyond_what_a_store_can_hold() {
        let bounds = TimeBounds {
            min: Timestamp(i64::MIN),
            max_skew: Dur(i64::MAX),
        };
        let w = bounds.around(NOW);
        assert_eq!((w.earliest, w.latest), (EARLIEST_HOLDABLE, LATEST_HOLDABLE));
        // A server clock past 2106 still cannot accept what no store holds.
        let w = TimeBounds::DEFAULT.around(Timestamp(i64::MAX));
        assert_eq!(w.latest, LATEST_HOLDABLE);
    }

    fn attempt(start: Timestamp, end: Timestamp) -> Event {
        let span = SpanRef {
            trace_id: [1; 16],
            span_id: [2; 8],
        };
        Event::Attempt(attempt_at(span, "i", "issue_refund", start, end))
    }

    #[test]
    fn spans_and_records() {
        let w = w();
        let t = NOW - Dur::minutes(5);
        assert_eq!(w.check_event(&attempt(t, t + Dur::secs(1))), Ok(()));
        assert_eq!(
            w.check_event(&attempt(t, t)),
            Ok(()),
            "a zero-length span is fine"
        );
        let e = w.check_event(&attempt(t, t - Dur(1))).unwrap_err();
        assert_eq!(e.field, "end");
        assert!(matches!(e.error, TimeError::EndBeforeStart { .. }));
        assert!(e.to_string().starts_with("end: "), "{e}");
        assert!(e.to_string().contains("precedes the start time"), "{e}");
        let e = w.check_event(&attempt(Timestamp(0), t)).unwrap_err();
        assert_eq!(e.field, "start");
        // An unended span (end 0) is refused for its end.
        let e = w.check_event(&attempt(t, Timestamp(0))).unwrap_err();
        assert_eq!(e.field, "end");
        assert!(matches!(e.error, TimeError::TooEarly { .. }));

        let record = |observed_at, created_at| {
            Event::Record(RecordObservation {
                created_at,
                ..record_at(None, "re_1", "succeeded", observed_at)
            })
        };
        assert_eq!(w.check_event(&record(t, None)), Ok(()));
        assert_eq!(w.check_event(&record(t, Some(t))), Ok(()));
        let e = w
            .check_event(&record(t, Some(Timestamp::from_secs(-1))))
            .unwrap_err();
        assert_eq!(e.field, "created_at");
        let e = w
            .check_event(&record(Timestamp::from_secs(7_258_118_400), None))
            .unwrap_err();
        assert_eq!(e.field, "observed_at");
    }
}
