//! What every fuzz target shares: the repository's own contracts, one fixed receive time, and
//! the invariants an OTLP decode must keep whatever the bytes were.

use std::path::Path;
use std::sync::{Arc, LazyLock};

use reckon::contract::{parse_contracts, Contracts};
use reckon::ingest::bounds::TimeWindow;
use reckon::ingest::otlp::Decoded;
use reckon::model::Timestamp;

/// The receive time of every fuzzed request (2026-01-01T00:00:00Z): fixed, so a crash replays.
pub const NOW: Timestamp = Timestamp(1_767_225_600_000_000_000);

/// The contracts shipped in `contracts/`, so tool names in the corpus reach the audited path.
pub static CONTRACTS: LazyLock<Arc<Contracts>> = LazyLock::new(|| {
    let files = [
        ("demo.toml", include_str!("../../contracts/demo.toml")),
        ("drafts.toml", include_str!("../../contracts/drafts.toml")),
        ("email.toml", include_str!("../../contracts/email.toml")),
        ("refunds.toml", include_str!("../../contracts/refunds.toml")),
    ];
    let mut all = Vec::new();
    for (name, text) in files {
        all.extend(parse_contracts(Path::new(name), text).expect("the shipped contracts parse"));
    }
    Arc::new(Contracts::new(all))
});

pub fn window() -> TimeWindow {
    TimeWindow::default_at(NOW)
}

/// Every span or log record is accounted for exactly once, the partial-success message says
/// something exactly when something was refused, and the time policy leaves no event outside
/// the window.
pub fn check_decoded(mut d: Decoded) {
    let accounted = |d: &Decoded| d.events.len() as u64 + d.dropped + d.rejected;
    assert_eq!(accounted(&d), d.seen, "{d:?}");
    assert!(d.dropped_no_intent <= d.dropped);
    assert!(d.reasons.len() as u64 <= d.rejected);
    assert!(d.reasons.len() <= reckon::ingest::otlp::MAX_REASONS);
    let w = window();
    let refused = d.check_times(&w);
    assert!(refused <= d.rejected);
    assert_eq!(accounted(&d), d.seen, "after the time check: {d:?}");
    assert_eq!(d.error_message().is_empty(), d.rejected == 0);
    for e in &d.events {
        assert!(
            w.check_event(e).is_ok(),
            "kept an event outside the window: {e:?}"
        );
    }
}
