//! Ingest throughput, as ratios against baselines measured in the same run (the machines are
//! shared and noisy; absolute numbers travel badly, ratios less so).
//!
//!     cargo bench --bench ingest
//!
//! | measurement | baseline | what the ratio says |
//! |---|---|---|
//! | decode + recognise non-tool spans | prost decode of the same bytes | the cost of recognition on the drop path |
//! | decode + recognise tool spans | prost decode of the same bytes | the cost of building events |
//! | engine ingest (durable + audited) | store append alone (durable) | the cost of the audit on the hot path |
//! | retry storm (10,240 attempts, one intent) | as many fresh intents | whether an intent's cost stays linear in its attempts |
//! | 2,000 readers of one order's unowned refunds | the same readers, an order each | the cost of contested evidence (DESIGN.md "Evidence attribution" 3) |
//!
//! Each line also prints spans/s on this machine, for comparison with DESIGN.md's targets.

use std::sync::Arc;

#[path = "../src/test_builders.rs"]
mod test_builders;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use reckon::contract::{Contract, Contracts};
use reckon::engine::Engine;
use reckon::ingest::otlp;
use reckon::metrics::Metrics;
use reckon::model::Event;
use reckon::store::{AnyStore, SqliteStore, Store};

const SPANS_PER_EXPORT: usize = 512;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn span(n: u64, tool: bool, run: u64) -> Span {
    let mut trace_id = vec![0u8; 16];
    trace_id[..8].copy_from_slice(&(run + 1).to_be_bytes());
    trace_id[8..].copy_from_slice(&n.to_be_bytes());
    let start = 1_780_000_000_000_000_000u64 + n * 1_000_000;
    let attributes = if tool {
        vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "issue_refund"),
            kv("reckon.intent.id", &format!("bench-{run}-{n}")),
            kv("reckon.idempotency_key", &format!("key-{run}-{n}")),
            kv("reckon.outcome", "unknown"),
            kv("error.type", "timeout"),
        ]
    } else {
        vec![
            kv("gen_ai.operation.name", "chat"),
            kv("gen_ai.request.model", "gpt-4o"),
            kv("gen_ai.system", "openai"),
            kv("server.address", "api.openai.com"),
        ]
    };
    Span {
        trace_id,
        span_id: (n + 1).to_be_bytes().to_vec(),
        name: if tool {
            "execute_tool issue_refund".into()
        } else {
            "chat gpt-4o".into()
        },
        kind: 3,
        start_time_unix_nano: start,
        end_time_unix_nano: start + 30_000_000_000,
        attributes,
        status: tool.then(|| Status {
            code: status::StatusCode::Error as i32,
            message: "timeout".into(),
        }),
        ..Default::default()
    }
}

fn export(tool: bool, run: u64, first: u64) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "support-agent")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "agent".into(),
                    ..Default::default()
                }),
                spans: (first..first + SPANS_PER_EXPORT as u64)
                    .map(|n| span(n, tool, run))
                    .collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// Run `f` (which handles `SPANS_PER_EXPORT` spans per call) for about `budget`; spans per second.
fn rate(budget: Duration, mut f: impl FnMut()) -> f64 {
    let began = Instant::now();
    let mut calls = 0u64;
    while began.elapsed() < budget {
        f();
        calls += 1;
    }
    (calls * SPANS_PER_EXPORT as u64) as f64 / began.elapsed().as_secs_f64()
}

fn line(what: &str, spans_per_s: f64, baseline: f64) {
    println!(
        "{what:<48} {:>12.0} spans/s   {:>6.2}x baseline",
        spans_per_s,
        spans_per_s / baseline
    );
}

fn main() {
    // As `reckon` itself runs (src/main.rs).
    reckon::process::disable_transparent_huge_pages().expect("turning transparent huge pages off");
    let contracts = Contracts::new(vec![Contract::example("payments.refund", "issue_refund")]);
    let budget = Duration::from_secs(2);
    println!("single core, {SPANS_PER_EXPORT} spans per export\n");

    let plain = export(false, 0, 0).encode_to_vec();
    let baseline = rate(budget, || {
        std::hint::black_box(ExportTraceServiceRequest::decode(plain.as_slice()).unwrap());
    });
    line("baseline: prost decode, non-tool spans", baseline, baseline);
    let dropped = rate(budget, || {
        let d = otlp::traces_from_protobuf_bytes(&plain, &contracts).unwrap();
        assert_eq!(d.dropped, SPANS_PER_EXPORT as u64);
    });
    line(
        "decode + recognise, non-tool spans dropped",
        dropped,
        baseline,
    );

    let tools = export(true, 0, 0).encode_to_vec();
    let tool_baseline = rate(budget, || {
        std::hint::black_box(ExportTraceServiceRequest::decode(tools.as_slice()).unwrap());
    });
    line(
        "baseline: prost decode, tool spans",
        tool_baseline,
        tool_baseline,
    );
    let recognised = rate(budget, || {
        let d = otlp::traces_from_protobuf_bytes(&tools, &contracts).unwrap();
        assert_eq!(d.events.len(), SPANS_PER_EXPORT);
    });
    line(
        "decode + recognise, tool spans to events",
        recognised,
        tool_baseline,
    );

    // The deterministic core alone: link, audit, escalate; no store, no clock reads. The
    // exports are encoded beforehand so only decode + audit is timed.
    // One pass, every span a new intent (a cycled pass would time deduplication instead).
    let encoded: Vec<Vec<u8>> = (0..800u64)
        .map(|run| export(true, 100 + run, 0).encode_to_vec())
        .collect();
    let mut core = reckon::engine::core::EngineCore::new(Arc::new(contracts.clone()));
    let began = Instant::now();
    for bytes in &encoded {
        let events = otlp::traces_from_protobuf_bytes(bytes, &contracts)
            .unwrap()
            .events;
        core.ingest(events, reckon::model::Timestamp::from_secs(1_780_000_100));
    }
    let audited = (encoded.len() * SPANS_PER_EXPORT) as f64 / began.elapsed().as_secs_f64();
    line(
        "decode + engine core (audit), no store",
        audited,
        tool_baseline,
    );

    // A retry storm: one intent re-sent 10,240 times under one key, against the same number of
    // fresh intents. The audit of a stormed intent must stay linear in its attempts.
    let storm: Vec<Vec<u8>> = (0..20u64)
        .map(|b| {
            let mut req = export(true, 5000, b * SPANS_PER_EXPORT as u64);
            for span in &mut req.resource_spans[0].scope_spans[0].spans {
                for kv in &mut span.attributes {
                    if kv.key == "reckon.intent.id" || kv.key == "reckon.idempotency_key" {
                        kv.value = Some(AnyValue {
                            value: Some(any_value::Value::StringValue(format!("storm-{}", kv.key))),
                        });
                    }
                }
            }
            req.encode_to_vec()
        })
        .collect();
    let fresh: Vec<Vec<u8>> = (0..20u64)
        .map(|b| export(true, 6000, b * SPANS_PER_EXPORT as u64).encode_to_vec())
        .collect();
    let timed = |batches: &[Vec<u8>]| {
        let mut core = reckon::engine::core::EngineCore::new(Arc::new(contracts.clone()));
        let began = Instant::now();
        for bytes in batches {
            let events = otlp::traces_from_protobuf_bytes(bytes, &contracts)
                .unwrap()
                .events;
            core.ingest(events, reckon::model::Timestamp::from_secs(1_780_000_100));
        }
        (batches.len() * SPANS_PER_EXPORT) as f64 / began.elapsed().as_secs_f64()
    };
    let fresh_rate = timed(&fresh);
    line(
        "baseline: 10,240 attempts on fresh intents",
        fresh_rate,
        fresh_rate,
    );
    line(
        "retry storm: 10,240 attempts on one intent",
        timed(&storm),
        fresh_rate,
    );

    // An order every agent reads: 2,000 intents each time out on a refund and then list the
    // order's 20 refunds, none of which names an intent or carries a key (made by hand, or by
    // a downstream that echoes neither), all made after every send: each reader may have made
    // each, so all are contested (DESIGN.md "Evidence attribution" 3). Against the same
    // intents each listing 20 refunds of an order of its own. A read-back re-audits another
    // reader only where its own candidacy changes that reader's link, so the shared order
    // must stay near the baseline rather than fall with the number of readers.
    let order_readers = |shared: bool| -> Vec<Vec<Event>> {
        use test_builders::{attempt, ev, readback, record, AttemptExt};
        let intents = 2_000u64;
        let order_of = |i: u64| if shared { 0 } else { i };
        let refunds =
            |order: u64| -> Vec<String> { (0..20).map(|r| format!("re-{order}-{r}")).collect() };
        let orders: Vec<u64> = if shared {
            vec![0]
        } else {
            (0..intents).collect()
        };
        let mut batches = vec![orders
            .iter()
            .flat_map(|&o| refunds(o))
            .map(|id| ev(record(None, &id, "succeeded", 10_000.0)))
            .collect::<Vec<Event>>()];
        for chunk in (0..intents)
            .collect::<Vec<_>>()
            .chunks(SPANS_PER_EXPORT / 2)
        {
            let mut events = Vec::new();
            for &i in chunk {
                let intent = format!("reader-{i}");
                events.push(ev(attempt(&intent, "issue_refund", i as f64, 30.0)
                    .key(&format!("reader-key-{i}"))
                    .timeout()));
                let listed = refunds(order_of(i));
                let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
                events.push(ev(readback(
                    &intent,
                    "list_refunds",
                    20_000.0 + i as f64,
                    &listed,
                )));
            }
            batches.push(events);
        }
        batches
    };
    let timed_events = |batches: Vec<Vec<Event>>| {
        let events: usize = batches.iter().map(Vec::len).sum();
        let mut core = reckon::engine::core::EngineCore::new(Arc::new(contracts.clone()));
        let began = Instant::now();
        for events in batches {
            core.ingest(events, reckon::model::Timestamp::from_secs(1_780_030_000));
        }
        events as f64 / began.elapsed().as_secs_f64()
    };
    let own_orders = timed_events(order_readers(false));
    line(
        "baseline: 2,000 readers, an order each",
        own_orders,
        own_orders,
    );
    line(
        "2,000 readers of one order's 20 refunds",
        timed_events(order_readers(true)),
        own_orders,
    );

    // Durable paths: 8 concurrent exporters, fresh intents every batch, a real SQLite file.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let batches = |run: u64, count: u64| -> Vec<Vec<Event>> {
            (0..count)
                .map(|b| {
                    otlp::traces_from_protobuf_bytes(
                        &export(true, run, b * SPANS_PER_EXPORT as u64).encode_to_vec(),
                        &contracts,
                    )
                    .unwrap()
                    .events
                })
                .collect()
        };
        let measure = |label: &'static str,
                       baseline: Option<f64>,
                       work: Vec<Vec<Event>>,
                       sink: Arc<
            dyn Fn(Vec<Event>) -> tokio::task::JoinHandle<()> + Send + Sync,
        >| async move {
            let n = work.len();
            let began = Instant::now();
            let mut chunks: Vec<Vec<Vec<Event>>> = (0..8).map(|_| Vec::new()).collect();
            for (i, b) in work.into_iter().enumerate() {
                chunks[i % 8].push(b);
            }
            let mut tasks = Vec::new();
            for chunk in chunks {
                let sink = sink.clone();
                tasks.push(tokio::spawn(async move {
                    for b in chunk {
                        sink(b).await.unwrap();
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            let r = (n * SPANS_PER_EXPORT) as f64 / began.elapsed().as_secs_f64();
            line(label, r, baseline.unwrap_or(r));
            r
        };

        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(AnyStore::Sqlite(
            SqliteStore::open(&dir.path().join("append")).unwrap(),
        ));
        let s = store.clone();
        let append_rate = measure(
            "baseline: SQLite append (durable), 8 exporters",
            None,
            batches(1, 200),
            Arc::new(move |b| {
                let s = s.clone();
                tokio::spawn(async move {
                    s.append(b).await.unwrap();
                })
            }),
        )
        .await;

        let store = Arc::new(AnyStore::Sqlite(
            SqliteStore::open(&dir.path().join("engine")).unwrap(),
        ));
        let (engine, _tasks) =
            Engine::start(Arc::new(contracts.clone()), store, Arc::new(Metrics::new()))
                .await
                .unwrap();
        let e = engine.clone();
        measure(
            "engine ingest (durable + audited), 8 exporters",
            Some(append_rate),
            batches(2, 200),
            Arc::new(move |b| {
                let e = e.clone();
                tokio::spawn(async move {
                    e.ingest(b, Instant::now(), ()).await.unwrap();
                })
            }),
        )
        .await;
        println!("\nopen intents held by the engine: {}", engine.intents());
    });
}
