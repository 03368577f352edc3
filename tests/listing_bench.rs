//! The listings' page time on ClickHouse against SQLite (issue 36, item 4): not a timed test,
//! a measurement, ignored by default. Run it with
//!
//! ```sh
//! export RECKON_TEST_CLICKHOUSE=$(scripts/clickhouse-test-server start /tmp/ch-bench)
//! cargo test --release --test listing_bench -- --ignored --nocapture
//! # RECKON_BENCH_INTENTS=100000 (default) verdicts, half as many escalations
//! # RECKON_BENCH_KEEP=1: keep the ClickHouse database (named in the output) to query by hand
//! ```
//!
//! Each store gets the same verdicts (a fifth of them written twice, as the engine rewrites a
//! verdict that changes, so ClickHouse holds unmerged versions) and escalations; then pages of
//! 1,000 are walked by cursor, unfiltered and filtered, and the median page time printed per
//! store with the ratio. Figures: BENCHMARKS.md, "Listings".

use std::sync::Arc;
use std::time::{Duration, Instant};

use reckon::model::*;
use reckon::store::{
    ClickHouseConfig, ClickHouseStore, Derived, EscalationFilter, SqliteStore, Store, VerdictFilter,
};

#[path = "../src/test_builders.rs"]
mod builders;
use builders::{at, escalation, verdict};

const PAGE: usize = 1000;
const PAGES: usize = 10;

fn intents() -> usize {
    std::env::var("RECKON_BENCH_INTENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn id(i: usize) -> String {
    // Not in write order: the listing's order (intent_id) is not the arrival order.
    format!(
        "int_{:016x}",
        (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

async fn fill<S: Store>(store: &S, n: usize) {
    let states = [
        IntentState::Completed,
        IntentState::Unknown,
        IntentState::Pending,
    ];
    // Listed over the last 30 days, as a month of history is: a page of 1,000 spans ~7 hours.
    let now = reckon::clock::wall_now();
    let listed = |i: usize, spacing: i64| Timestamp(now.0 - (i as i64 * spacing) * 1_000_000_000);
    let v = |i: usize, round: i64| {
        let mut v = verdict(
            &id(i),
            Some("issue_refund"),
            states[i % states.len()],
            at(100 + round + (i % 5000) as i64),
        );
        v.listed_at = listed(i, 26);
        Arc::new(v)
    };
    for chunk in (0..n).collect::<Vec<_>>().chunks(8192) {
        store
            .put_derived(Derived {
                verdicts: chunk.iter().map(|&i| v(i, 0)).collect(),
                ..Derived::default()
            })
            .await
            .expect("write verdicts");
    }
    // A fifth written again: ClickHouse holds two versions of those until it merges.
    for chunk in (0..n).step_by(5).collect::<Vec<_>>().chunks(8192) {
        store
            .put_derived(Derived {
                verdicts: chunk.iter().map(|&i| v(i, 1)).collect(),
                ..Derived::default()
            })
            .await
            .expect("rewrite verdicts");
    }
    let statuses = [
        EscalationStatus::Open,
        EscalationStatus::Claimed,
        EscalationStatus::Resolved,
    ];
    for chunk in (0..n / 2).collect::<Vec<_>>().chunks(8192) {
        store
            .put_escalations(
                chunk
                    .iter()
                    .map(|&i| {
                        let mut e = escalation(
                            &format!("esc_{}", id(i)),
                            statuses[i % statuses.len()],
                            at(1_000 + (i % 20_000) as i64),
                            1,
                        );
                        e.listed_at = listed(i, 52);
                        e
                    })
                    .collect(),
            )
            .await
            .expect("write escalations");
    }
}

fn median(mut t: Vec<Duration>) -> Duration {
    t.sort();
    t[t.len() / 2]
}

/// Median page time over `PAGES` pages walked by cursor, and the total the first page said.
async fn walk_intents<S: Store>(store: &S, state: Option<IntentState>) -> (Duration, u64) {
    let mut cursor = None;
    let mut times = Vec::new();
    let mut total = 0;
    for _ in 0..PAGES {
        let began = Instant::now();
        let page = store
            .list_verdicts(&VerdictFilter {
                state,
                limit: PAGE,
                cursor: cursor.take(),
                ..VerdictFilter::default()
            })
            .await
            .expect("list verdicts");
        times.push(began.elapsed());
        assert_eq!(page.items.len(), PAGE);
        total = page.total;
        cursor = page.next_cursor;
    }
    (median(times), total)
}

async fn walk_escalations<S: Store>(
    store: &S,
    status: Option<EscalationStatus>,
) -> (Duration, u64) {
    let mut cursor = None;
    let mut times = Vec::new();
    let mut total = 0;
    for _ in 0..PAGES {
        let began = Instant::now();
        let page = store
            .page_escalations(&EscalationFilter {
                status,
                limit: PAGE,
                cursor: cursor.take(),
                ..EscalationFilter::default()
            })
            .await
            .expect("page escalations");
        times.push(began.elapsed());
        assert_eq!(page.items.len(), PAGE);
        total = page.total;
        cursor = page.next_cursor;
    }
    (median(times), total)
}

type Figures = Vec<(&'static str, Duration, u64)>;

async fn measure<S: Store>(store: &S) -> Figures {
    // One walk to warm caches, then the measured ones.
    walk_intents(store, None).await;
    let mut out = Vec::new();
    let (t, n) = walk_intents(store, None).await;
    out.push(("intents", t, n));
    let (t, n) = walk_intents(store, Some(IntentState::Unknown)).await;
    out.push(("intents?state=unknown", t, n));
    walk_escalations(store, None).await;
    let (t, n) = walk_escalations(store, None).await;
    out.push(("escalations", t, n));
    let (t, n) = walk_escalations(store, Some(EscalationStatus::Open)).await;
    out.push(("escalations?status=open", t, n));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by the command in this file's doc"]
async fn listing_pages_clickhouse_against_sqlite() {
    let n = intents();
    let url = std::env::var("RECKON_TEST_CLICKHOUSE")
        .expect("RECKON_TEST_CLICKHOUSE: scripts/clickhouse-test-server start");
    let dir = tempfile::TempDir::new().unwrap();
    let sqlite = SqliteStore::open(dir.path()).expect("open SQLite");
    let began = Instant::now();
    fill(&sqlite, n).await;
    eprintln!("SQLite filled in {:?}", began.elapsed());

    let database = format!("reckon_bench_{}", std::process::id());
    let config = match reckon::config::value::parse_store(url.trim()).expect("a store URL") {
        reckon::config::StoreConfig::ClickHouse {
            url,
            user,
            password,
            ..
        } => ClickHouseConfig::new(&url, &user, &password, &database).unwrap(),
        reckon::config::StoreConfig::Sqlite => panic!("not a ClickHouse URL"),
    };
    let ch = ClickHouseStore::open(config.clone())
        .await
        .expect("open ClickHouse");
    let began = Instant::now();
    fill(&ch, n).await;
    eprintln!("ClickHouse filled in {:?}", began.elapsed());
    // As a running store is: its background task has counted the listing's hours.
    let began = Instant::now();
    while ch.recount().await.expect("recount") > 0 {}
    eprintln!("ClickHouse counted in {:?}", began.elapsed());

    let s = measure(&sqlite).await;
    let c = measure(&ch).await;
    println!(
        "{n} verdicts, {} escalations, pages of {PAGE}, median of {PAGES} pages",
        n / 2
    );
    println!("| listing | SQLite ms | ClickHouse ms | ratio |");
    println!("|---|---:|---:|---:|");
    for ((what, ts, ns), (_, tc, nc)) in s.iter().zip(&c) {
        assert_eq!(ns, nc, "{what}: both stores count the same total");
        println!(
            "| {what} (total {ns}) | {:.1} | {:.1} | {:.2} |",
            ts.as_secs_f64() * 1e3,
            tc.as_secs_f64() * 1e3,
            tc.as_secs_f64() / ts.as_secs_f64()
        );
    }
    if std::env::var("RECKON_BENCH_KEEP").is_ok_and(|v| v == "1") {
        println!("kept ClickHouse database {database}");
        return;
    }
    ::clickhouse::Client::default()
        .with_url(&config.url)
        .with_user(&config.user)
        .query(&format!("DROP DATABASE IF EXISTS `{database}`"))
        .execute()
        .await
        .ok();
}
