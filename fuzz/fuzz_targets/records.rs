//! `POST /api/v1/records` bodies: one record, a JSON array of them, or NDJSON.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reckon::ingest::records::parse_records;
use reckon_fuzz::window;

fuzz_target!(|data: &[u8]| {
    let w = window();
    let Ok(batch) = parse_records(data, &w) else {
        return;
    };
    // Untimed positions point into `accepted`, ascending; every kept time is inside the window.
    assert!(batch.untimed.windows(2).all(|p| p[0] < p[1]));
    assert!(batch.untimed.iter().all(|&i| i < batch.accepted.len()));
    for r in &batch.accepted {
        assert!(!r.object_id.is_empty() && !r.status.is_empty(), "{r:?}");
        assert!(w.check(r.observed_at).is_ok(), "{r:?}");
        if let Some(c) = r.created_at {
            assert!(w.check(c).is_ok(), "{r:?}");
        }
    }
    // Rejected items name distinct positions.
    let mut idx: Vec<usize> = batch.rejected.iter().map(|r| r.index).collect();
    idx.dedup();
    assert_eq!(idx.len(), batch.rejected.len());
});
