//! The durable engine path (SQLite append + audit + verdict persistence) under 8 concurrent
//! exporters, for profiling with `perf record`.
use std::sync::Arc;
use std::time::Instant;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use reckon::contract::{Contract, Contracts};
use reckon::engine::Engine;
use reckon::metrics::Metrics;
use reckon::model::*;
use reckon::store::{AnyStore, SqliteStore};

fn batch(b: u64) -> Vec<Event> {
    (0..512u64)
        .map(|i| {
            let id = b * 512 + i + 1;
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
                arguments: None,
            })
        })
        .collect()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let contracts = Arc::new(Contracts::new(vec![Contract::example(
            "payments.refund",
            "issue_refund",
        )]));
        let store = Arc::new(AnyStore::Sqlite(SqliteStore::open(dir.path()).unwrap()));
        let (engine, tasks) = Engine::start(contracts, store, Arc::new(Metrics::new()))
            .await
            .unwrap();
        let batches: Vec<Vec<Event>> = (0..400).map(batch).collect();
        let began = Instant::now();
        let mut lanes: Vec<Vec<Vec<Event>>> = (0..8).map(|_| Vec::new()).collect();
        for (i, b) in batches.into_iter().enumerate() {
            lanes[i % 8].push(b);
        }
        let mut handles = Vec::new();
        for lane in lanes {
            let e = engine.clone();
            handles.push(tokio::spawn(async move {
                for b in lane {
                    e.ingest(b, Instant::now(), ()).await.unwrap();
                }
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        let secs = began.elapsed().as_secs_f64();
        eprintln!(
            "{} spans durable + audited in {secs:.2}s: {:.0} spans/s",
            400 * 512,
            (400 * 512) as f64 / secs
        );
        engine.close();
        drop(engine);
        let t = Instant::now();
        tasks.finish().await;
        eprintln!("persister drained in {:.2}s", t.elapsed().as_secs_f64());

        // A restart on the same data: load every event, rebuild every verdict.
        let store = Arc::new(AnyStore::Sqlite(SqliteStore::open(dir.path()).unwrap()));
        let contracts = Arc::new(Contracts::new(vec![Contract::example(
            "payments.refund",
            "issue_refund",
        )]));
        let t = Instant::now();
        let (engine, tasks) = Engine::start(contracts, store, Arc::new(Metrics::new()))
            .await
            .unwrap();
        eprintln!(
            "restart with {} open intents ready in {:.2}s",
            engine.intents(),
            t.elapsed().as_secs_f64()
        );
        engine.close();
        drop(engine);
        tasks.finish().await;
    });
}
