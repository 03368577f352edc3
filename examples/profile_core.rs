//! Drive the engine core with fresh timed-out intents, for profiling (`perf record`).
use std::sync::Arc;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use reckon::contract::{Contract, Contracts};
use reckon::engine::core::EngineCore;
use reckon::model::*;

fn main() {
    let contracts = Arc::new(Contracts::new(vec![Contract::example(
        "payments.refund",
        "issue_refund",
    )]));
    let mut core = EngineCore::new(contracts);
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let started = std::time::Instant::now();
    for batch in 0..n / 512 {
        let events: Vec<Event> = (0..512u64)
            .map(|i| {
                let id = batch * 512 + i + 1;
                let mut trace_id = [0u8; 16];
                trace_id[8..].copy_from_slice(&id.to_be_bytes());
                Event::Attempt(Attempt {
                    span: SpanRef {
                        trace_id,
                        span_id: id.to_be_bytes(),
                    },
                    intent_id: format!("intent-{id}"),
                    tool: "issue_refund".into(),
                    start: Timestamp::from_secs(1_780_000_000),
                    end: Timestamp::from_secs(1_780_000_030),
                    idempotency_key: Some(format!("key-{id}")),
                    http_status: None,
                    error_type: Some("timeout".into()),
                    span_error: true,
                    object_id: None,
                    object_status: None,
                    reported_outcome: Some(ReportedOutcome::Unknown),
                    arguments: Some(r#"{"order_id":"1042","amount":45.0,"currency":"usd"}"#.into()),
                })
            })
            .collect();
        core.ingest(events, Timestamp::from_secs(1_780_000_100));
    }
    let secs = started.elapsed().as_secs_f64();
    // Resident memory over the open intents held (each stays: a timeout never settles).
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096);
    eprintln!(
        "{} spans in {:.2}s: {:.0} spans/s, RSS {} MiB ({:.0} bytes per open intent)",
        n,
        secs,
        n as f64 / secs,
        rss >> 20,
        rss as f64 / n as f64
    );
}
