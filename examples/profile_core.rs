//! Drive the engine core with fresh timed-out intents, for profiling (`perf record`) and for
//! memory per open intent (BENCHMARKS.md "Memory"): prints the process's RSS and the live heap
//! (bytes asked of the allocator and not given back; its bins round each up), each per intent.
//! RSS also holds what the allocator keeps of freed memory, such as a hash table's old copy
//! after it grew, so it moves with where the count falls against the tables' growth steps.
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// mimalloc, counting the bytes live as asked for.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;
use reckon::contract::{Contract, Contracts};
use reckon::engine::core::EngineCore;
use reckon::model::*;

fn main() {
    // As `reckon` itself runs (src/main.rs): otherwise a third of a profile is the kernel zeroing
    // huge pages (BENCHMARKS.md "Transparent huge pages").
    reckon::process::disable_transparent_huge_pages().expect("turning transparent huge pages off");
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
    let live = LIVE.load(Ordering::Relaxed);
    eprintln!(
        "{} spans in {:.2}s: {:.0} spans/s, RSS {} MiB ({:.0} bytes per open intent), live heap {} MiB ({:.0} bytes per open intent)",
        n,
        secs,
        n as f64 / secs,
        rss >> 20,
        rss as f64 / n as f64,
        live >> 20,
        live as f64 / n as f64,
    );
}
