//! One store conformance suite, written once and run against every backend: SQLite always,
//! ClickHouse against a real server named by `RECKON_TEST_CLICKHOUSE` (`.ci/run` starts one with
//! `scripts/clickhouse-test-server`). Without that variable the ClickHouse tests FAIL, saying how
//! to start a server, unless `RECKON_SKIP_CLICKHOUSE=1` asks explicitly to skip them: a suite
//! that silently did not run is worse than a red one.
//!
//! Each test gets its own store (a temporary directory, or a database with a unique name that is
//! dropped at the end), so the tests run in parallel.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reckon::codec::VerdictDoc;
use reckon::contract::Contracts;
use reckon::engine::core::{EngineCore, Outcome};
use reckon::engine::{Engine, EngineOptions, EngineTasks};
use reckon::metrics::Metrics;
use reckon::model::*;
use reckon::notify::outbox::{after_attempt, Attempt as Tried, Policy};
use reckon::notify::{Notifier, Target};
use reckon::store::clickhouse::{migrate_to, schema, ErrorClass, RetryPolicy};
use reckon::store::{
    AnyStore, Appended, ClickHouseConfig, ClickHouseStore, Derived, EscalationFilter, OutboxItem,
    OutboxPage, OutboxState, Page, RecordKey, Report, Route, SqliteStore, Store, StoreError, Swap,
    Unsettled, VerdictFilter,
};

#[path = "../src/test_builders.rs"]
mod builders;
use builders::{
    at, attempt_at, email, escalation, ev, readback_at, refund_args, refunds, span, stripe_refund,
    verdict, with_findings, AttemptExt,
};

// ---------------------------------------------------------------------------------------------
// Backends.

/// What the suite needs from a backend: a fresh store, the same store reopened, and cleanup.
trait Harness: Sized {
    type S: Store;
    fn open(&self) -> impl Future<Output = Self::S>;
    /// The same store as the app runs it (what [`Engine`] takes).
    fn open_any(&self) -> impl Future<Output = AnyStore>;
    fn finish(self) -> impl Future<Output = ()>;
}

struct Sqlite {
    dir: tempfile::TempDir,
}

impl Sqlite {
    async fn new() -> Option<Sqlite> {
        Some(Sqlite {
            dir: tempfile::TempDir::new().expect("temp dir"),
        })
    }
}

impl Harness for Sqlite {
    type S = SqliteStore;
    async fn open(&self) -> SqliteStore {
        SqliteStore::open(self.dir.path()).expect("open SQLite store")
    }
    async fn open_any(&self) -> AnyStore {
        AnyStore::Sqlite(self.open().await)
    }
    async fn finish(self) {}
}

struct ClickHouse {
    config: ClickHouseConfig,
}

/// The server URL, or `None` when skipping was asked for explicitly; otherwise a failure that
/// says how to get a server.
fn clickhouse_url() -> Option<String> {
    match std::env::var("RECKON_TEST_CLICKHOUSE") {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_string()),
        _ if std::env::var("RECKON_SKIP_CLICKHOUSE").as_deref() == Ok("1") => {
            eprintln!("RECKON_SKIP_CLICKHOUSE=1: ClickHouse conformance tests skipped");
            None
        }
        _ => panic!(
            "the ClickHouse conformance tests need a server: run \
             `export RECKON_TEST_CLICKHOUSE=$(scripts/clickhouse-test-server start)` \
             (apt-get install clickhouse-server first if it is missing; \
             `scripts/clickhouse-test-server stop` afterwards), or set RECKON_SKIP_CLICKHOUSE=1 \
             to skip them on purpose"
        ),
    }
}

static DB_SEQ: AtomicU64 = AtomicU64::new(0);

/// A ClickHouse store's settings from a URL, through the one parser `--store` uses.
fn clickhouse_config(url: &str) -> ClickHouseConfig {
    match reckon::config::value::parse_store(url).expect("a store URL") {
        reckon::config::StoreConfig::ClickHouse {
            url,
            user,
            password,
            database,
        } => ClickHouseConfig::new(&url, &user, &password, &database).expect("ClickHouse settings"),
        reckon::config::StoreConfig::Sqlite => panic!("{url}: not a ClickHouse URL"),
    }
}

fn unique_database() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "reckon_test_{}_{}_{}",
        std::process::id(),
        DB_SEQ.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

impl ClickHouse {
    async fn new() -> Option<ClickHouse> {
        let url = clickhouse_url()?;
        let mut config = clickhouse_config(&url);
        config.database = unique_database();
        // Longer than any read-to-insert gap of a loaded test machine, so the concurrent
        // compare-and-set race is decided by the store, not by timing (see swap_escalation).
        config.swap_settle = Duration::from_secs(1);
        Some(ClickHouse { config })
    }

    fn client(&self) -> ::clickhouse::Client {
        ::clickhouse::Client::default()
            .with_url(&self.config.url)
            .with_user(&self.config.user)
            .with_database(&self.config.database)
            .with_validation(false)
    }
}

impl Harness for ClickHouse {
    type S = ClickHouseStore;
    async fn open(&self) -> ClickHouseStore {
        ClickHouseStore::open(self.config.clone())
            .await
            .expect("open ClickHouse store")
    }
    async fn open_any(&self) -> AnyStore {
        AnyStore::ClickHouse(self.open().await)
    }
    async fn finish(self) {
        let sql = format!("DROP DATABASE IF EXISTS `{}`", self.config.database);
        self.client()
            .with_database("default")
            .query(&sql)
            .execute()
            .await
            .expect("drop test database");
    }
}

/// Instantiate every generic test for a backend.
macro_rules! conformance {
    ($module:ident, $harness:ty) => {
        mod $module {
            use super::*;

            async fn run<F, Fut>(test: F)
            where
                F: FnOnce(Arc<$harness>) -> Fut,
                Fut: Future<Output = ()>,
            {
                let Some(h) = <$harness>::new().await else {
                    return;
                };
                let h = Arc::new(h);
                test(h.clone()).await;
                match Arc::try_unwrap(h) {
                    Ok(h) => h.finish().await,
                    Err(_) => panic!("harness still shared at the end of the test"),
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn engine_outcomes_round_trip() {
                run(|h| async move { super::engine_outcomes_round_trip(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redelivery_is_harmless() {
                run(|h| async move { super::redelivery_is_harmless(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn restart_keeps_everything() {
                run(|h| async move { super::restart_keeps_everything(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn verdict_upsert_filters_and_pages() {
                run(|h| async move { super::verdict_upsert_filters_and_pages(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn escalation_highest_version_wins() {
                run(|h| async move { super::escalation_highest_version_wins(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn every_unresolved_escalation_can_be_read() {
                run(|h| async move { super::every_unresolved_escalation_can_be_read(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn escalations_by_intent_and_counted_by_status() {
                run(|h| async move {
                    super::escalations_by_intent_and_counted_by_status(&*h).await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn report_counts() {
                run(|h| async move { super::report_counts(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_appends_all_durable() {
                run(|h| async move { super::concurrent_appends_all_durable(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn unholdable_times_are_refused_alone() {
                run(|h| async move { super::unholdable_times_are_refused_alone(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn events_touching_intents_keys_and_objects() {
                run(|h| async move { super::events_touching_intents_keys_and_objects(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn known_observations_come_from_the_store() {
                run(|h| async move { super::known_observations_come_from_the_store(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn first_copy_wins() {
                run(|h| async move { super::first_copy_wins(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_resend_under_another_intent_is_a_conflict() {
                run(|h| async move { super::a_resend_under_another_intent_is_a_conflict(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn restart_reconciles_orphan_verdicts() {
                run(|h| async move { super::restart_reconciles_orphan_verdicts(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn escalations_are_durable_before_visible() {
                run(|h| async move { super::escalations_are_durable_before_visible(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn unwritten_verdicts_are_bounded() {
                run(|h| async move { super::unwritten_verdicts_are_bounded(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn escalation_compare_and_set() {
                run(|h| async move { super::escalation_compare_and_set(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn two_instances_agree_on_person_actions() {
                run(|h| async move { super::two_instances_agree_on_person_actions(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn counters_count_what_happened() {
                run(|h| async move { super::counters_count_what_happened(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn outbox_keeps_each_items_furthest_state() {
                run(|h| async move { super::outbox_keeps_each_items_furthest_state(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn notifications_are_written_with_their_change() {
                run(|h| async move {
                                    super::notifications_are_written_with_their_change(&*h).await
                                })
                                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn startup_reads_what_is_open() {
                run(|h| async move { super::startup_reads_what_is_open(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn what_arrived_after_the_checkpoint_is_read_back() {
                run(|h| async move {
                    super::what_arrived_after_the_checkpoint_is_read_back(&*h).await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn retention_strips_the_arguments_of_settled_intents() {
                run(|h| async move {
                    super::retention_strips_the_arguments_of_settled_intents(&*h).await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_claimed_orphan_reaches_nothing() {
                run(|h| async move { super::a_claimed_orphan_reaches_nothing(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_late_event_after_retention_is_judged_against_the_kept_verdict() {
                run(|h| async move {
                    super::a_late_event_after_retention_is_judged_against_the_kept_verdict(&*h)
                        .await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn retention_expires_old_outbox_items() {
                run(|h| async move { super::retention_expires_old_outbox_items(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn restart_loads_only_what_is_open() {
                run(|h| async move { super::restart_loads_only_what_is_open(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn open_intents_left_in_the_store_come_back_when_reached() {
                run(|h| async move {
                    super::open_intents_left_in_the_store_come_back_when_reached(&*h).await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_settled_intent_named_by_an_open_ones_evidence_comes_back_whole() {
                run(|h| async move {
                    super::a_settled_intent_named_by_an_open_ones_evidence_comes_back_whole(&*h)
                        .await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn escalations_leave_memory_with_their_intent() {
                run(|h| async move { super::escalations_leave_memory_with_their_intent(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn deadlines_passed_while_down_are_concluded_after_the_start() {
                run(|h| async move {
                    super::deadlines_passed_while_down_are_concluded_after_the_start(&*h).await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn contracts_reload_through_the_engine() {
                run(|h| async move { super::contracts_reload_through_the_engine(&*h).await })
                    .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_reload_cut_short_by_shutdown_is_finished_by_the_next_start() {
                run(|h| async move {
                    super::a_reload_cut_short_by_shutdown_is_finished_by_the_next_start(&*h).await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn intents_are_found_by_target_object_and_key() {
                run(|h| async move {
                    super::intents_are_found_by_target_object_and_key(&*h).await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn escalations_page_with_totals() {
                run(|h| async move { super::escalations_page_with_totals(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn overrides_are_stored() {
                run(|h| async move { super::overrides_are_stored(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn person_actions_override_a_holder() {
                run(|h| async move { super::person_actions_override_a_holder(&*h).await }).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn listing_places_hold_through_late_evidence_and_restarts() {
                run(|h| async move {
                    super::listing_places_hold_through_late_evidence_and_restarts(&*h).await
                })
                .await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn engine_announces_every_escalation_change() {
                run(|h| async move { super::engine_announces_every_escalation_change(&*h).await })
                    .await
            }
        }
    };
}

conformance!(sqlite, Sqlite);
conformance!(clickhouse, ClickHouse);

// ---------------------------------------------------------------------------------------------
// Builders.

fn contracts() -> Arc<Contracts> {
    Arc::new(Contracts::new(vec![refunds(), email()]))
}

/// Attempt `n` (its span) of `intent` with `tool`, sent `secs` in and over a second later, with
/// the 45.00 refund's arguments and no key.
fn sent(n: u64, intent: &str, tool: &str, secs: i64) -> Attempt {
    attempt_at(span(n), intent, tool, at(secs), at(secs + 1)).args(refund_args("45.00"))
}

/// [`sent`] with `issue_refund`, under the key `k-default`.
fn refund(n: u64, intent: &str, secs: i64) -> Attempt {
    sent(n, intent, "issue_refund", secs).key("k-default")
}

/// Stripe's record of the 45.00 refund `object`, observed `secs` in, created a second before.
fn record(object: &str, intent: Option<&str>, key: Option<&str>, status: &str, secs: i64) -> Event {
    ev(RecordObservation {
        idempotency_key: key.map(Into::into),
        created_at: Some(at(secs - 1)),
        ..stripe_refund(intent, object, status, secs as f64, 4500, "usd")
    })
}

/// Read-back `n` (its span) of `intent` with `get_refund` at `secs`, over a second later, that
/// found `found` and told the model the refund is pending.
fn readback(n: u64, intent: &str, secs: i64, found: &[&str]) -> Event {
    ev(Readback {
        reported_outcome: Some(ReportedOutcome::Pending),
        ..readback_at(span(n), intent, "get_refund", at(secs), at(secs + 1), found)
    })
}

/// A scenario in steps, covering every path the engine writes: completed after a timeout,
/// rejected, duplicate effect under two keys (escalates), no idempotency contract (escalates),
/// a read-back, an orphan record later claimed by an intent (a verdict deletion).
fn scenario() -> Vec<Vec<Event>> {
    vec![
        vec![
            ev(refund(1, "intent-a", 0)
                .key("k-a")
                .timeout()
                .told("unknown")),
            ev(refund(2, "intent-b", 1)
                .key("k-b")
                .http(422)
                .told("rejected")),
            // An object nobody has claimed yet: an orphan pseudo-intent.
            record("re_orphan", None, None, "succeeded", 2),
        ],
        vec![
            readback(3, "intent-a", 30, &[]),
            record("re_a", Some("intent-a"), Some("k-a"), "succeeded", 40),
            ev(refund(4, "intent-c", 50)
                .key("k-c1")
                .http(200)
                .object("re_c1", "succeeded")
                .told("succeeded")),
            ev(refund(5, "intent-c", 80)
                .key("k-c2")
                .http(200)
                .object("re_c2", "succeeded")
                .told("succeeded")),
            record("re_c1", Some("intent-c"), Some("k-c1"), "succeeded", 81),
            record("re_c2", Some("intent-c"), Some("k-c2"), "succeeded", 82),
        ],
        vec![
            ev(sent(6, "intent-d", "send_email", 100)
                .timeout()
                .told("unknown")),
            // The orphan's intent shows up: its pseudo-intent verdict is deleted.
            ev(refund(7, "intent-e", 110)
                .key("k-e")
                .http(200)
                .object("re_orphan", "succeeded")),
        ],
    ]
}

/// Store what one engine step concluded, the way the engine's persister does.
async fn persist<S: Store>(store: &S, out: Outcome) {
    store
        .put_derived(Derived {
            escalations: out.escalations,
            removed: out.removed,
            verdicts: out.verdicts.clone(),
            ..Derived::default()
        })
        .await
        .expect("put_derived");
}

/// Run the scenario through the engine into `store`; returns the engine for comparisons.
/// `fresh`: the store holds none of the events yet, so each must be reported new.
async fn feed<S: Store>(store: &S, fresh: bool) -> EngineCore {
    let mut core = EngineCore::new(contracts());
    for (i, step) in scenario().into_iter().enumerate() {
        let flags = store.append(step.clone()).await.expect("append");
        if fresh {
            assert!(flags.iter().all(|f| f.is_new()), "fresh events are new");
        }
        let out = core.ingest(step, at(200 + i as i64));
        persist(store, out).await;
    }
    // A person claims the first escalation: a second version of it.
    let first = core
        .book()
        .all()
        .min_by_key(|e| (e.opened_at, e.id.clone()))
        .map(|e| e.id.clone())
        .expect("the scenario escalates");
    let claimed = core
        .book()
        .claimed(&first, "alice", at(300), false)
        .expect("claim");
    let out = core.commit_person_action(claimed, at(300));
    persist(store, out).await;
    core
}

fn sorted_events(mut v: Vec<Event>) -> Vec<Event> {
    v.sort();
    v
}

fn all_events() -> Vec<Event> {
    sorted_events(scenario().into_iter().flatten().collect())
}

fn book(core: &EngineCore) -> Vec<Escalation> {
    let mut v: Vec<Escalation> = core.book().all().cloned().collect();
    v.sort_by(|a, b| (a.opened_at, &a.id).cmp(&(b.opened_at, &b.id)));
    v
}

/// Every page of a listing, in order; each page's total is the number the walk returns.
async fn every_page<S: Store>(store: &S, mut filter: VerdictFilter) -> Vec<VerdictDoc> {
    let mut out = Vec::new();
    loop {
        let page = store.list_verdicts(&filter).await.expect("list_verdicts");
        let total = page.total;
        out.extend(page.items);
        match page.next_cursor {
            Some(c) => filter.cursor = Some(c),
            None => {
                assert_eq!(
                    total,
                    out.len() as u64,
                    "the total matches the walk: {filter:?}"
                );
                return out;
            }
        }
    }
}

/// What the store must show for the engine's state.
async fn assert_matches_engine<S: Store>(store: &S, core: &EngineCore) {
    let mut expected: Vec<Verdict> = core.verdicts().collect();
    // Listed newest first by place, then intent id.
    expected.sort_by(|a, b| (b.listed_at, &b.intent_id).cmp(&(a.listed_at, &a.intent_id)));
    // Verdicts are written when something material changed: a later re-audit that changed
    // nothing leaves the stored row with the instant it was last computed for.
    let when_aside = |mut d: VerdictDoc| {
        d.audited_at = String::new();
        d
    };
    for v in &expected {
        let got = store.get_verdict(&v.intent_id).await.expect("get_verdict");
        assert_eq!(
            got.map(when_aside),
            Some(when_aside(VerdictDoc::from_verdict(v))),
            "{}",
            v.intent_id
        );
    }
    let listed: Vec<VerdictDoc> = every_page(
        store,
        VerdictFilter {
            limit: 2,
            ..VerdictFilter::default()
        },
    )
    .await
    .into_iter()
    .map(when_aside)
    .collect();
    let want: Vec<VerdictDoc> = expected
        .iter()
        .map(|v| when_aside(VerdictDoc::from_verdict(v)))
        .collect();
    assert_eq!(
        listed, want,
        "listing = the engine's verdicts, newest first"
    );
    let escalations = store.load_escalations().await.expect("load_escalations");
    assert_eq!(escalations, book(core));
}

// ---------------------------------------------------------------------------------------------
// The suite.

async fn engine_outcomes_round_trip<H: Harness>(h: &H) {
    let store = h.open().await;
    let core = feed(&store, true).await;
    assert_matches_engine(&store, &core).await;
    // The orphan's pseudo-intent was deleted once intent-e claimed its object.
    assert!(core.verdicts().all(|v| !v.intent_id.contains("re_orphan")));
    let orphan_ids: Vec<String> = every_page(&store, VerdictFilter::default())
        .await
        .into_iter()
        .map(|d| d.intent_id)
        .filter(|id| id.contains("re_orphan"))
        .collect();
    assert!(
        orphan_ids.is_empty(),
        "deleted verdicts stay deleted: {orphan_ids:?}"
    );
    assert_eq!(
        sorted_events(store.load_events().await.expect("load_events")),
        all_events()
    );
    // Decisions the scenario must reach, whatever the store.
    let state = |id: &str| core.verdict(id).map(|v| (v.state, v.decision));
    assert_eq!(
        state("intent-b"),
        Some((IntentState::FailedBeforeExecution, Decision::FixInput))
    );
    assert_eq!(state("intent-a").map(|s| s.0), Some(IntentState::Completed));
    assert_eq!(state("intent-c").map(|s| s.1), Some(Decision::Escalate));
    assert_eq!(state("intent-d").map(|s| s.1), Some(Decision::Escalate));
}

async fn redelivery_is_harmless<H: Harness>(h: &H) {
    let store = h.open().await;
    let batch: Vec<Event> = scenario().into_iter().flatten().collect();
    for _ in 0..3 {
        store.append(batch.clone()).await.expect("append");
    }
    // Duplicates inside one call: only the first copy is new.
    let mut doubled = batch.clone();
    doubled.extend(batch.clone());
    let flags = store.append(doubled).await.expect("append");
    assert!(
        flags[batch.len()..]
            .iter()
            .all(|f| *f == Appended::Duplicate),
        "{flags:?}"
    );
    assert_eq!(
        sorted_events(store.load_events().await.expect("load_events")),
        all_events(),
        "each event once"
    );
    // Re-delivery through the engine changes no verdict.
    let core = feed(&store, false).await;
    let mut again = EngineCore::restore(
        contracts(),
        store.load_events().await.unwrap(),
        store.load_escalations().await.unwrap(),
        at(400),
    )
    .0;
    let out = again.ingest(batch, at(400));
    assert!(out.verdicts.is_empty(), "a re-sent export changes nothing");
    assert_matches_engine(&store, &core).await;
}

async fn restart_keeps_everything<H: Harness>(h: &H) {
    let mut core = {
        let store = h.open().await;
        feed(&store, true).await
    };
    // A new process: everything comes back from the store.
    let store = h.open().await;
    assert_eq!(
        sorted_events(store.load_events().await.expect("load_events")),
        all_events()
    );
    assert_eq!(store.load_escalations().await.unwrap(), book(&core));
    assert_matches_engine(&store, &core).await;
    // The rebuilt engine reaches the same verdicts the running one had.
    let now = at(300);
    let (rebuilt, _) = EngineCore::restore(
        contracts(),
        store.load_events().await.unwrap(),
        store.load_escalations().await.unwrap(),
        now,
    );
    let mut original = EngineCore::restore(
        contracts(),
        all_events(),
        store.load_escalations().await.unwrap(),
        now,
    )
    .0;
    let _ = original.tick(now);
    let docs = |c: &EngineCore| {
        let mut v: Vec<VerdictDoc> = c.verdicts().map(|v| VerdictDoc::from_verdict(&v)).collect();
        v.sort_by(|a, b| a.intent_id.cmp(&b.intent_id));
        v
    };
    assert_eq!(docs(&rebuilt), docs(&original));
    // And the running engine, brought to the same instant, holds exactly those verdicts: only
    // the instant each was computed for may differ.
    let _ = core.tick(now);
    let conclusions = |c: &EngineCore| {
        docs(c)
            .into_iter()
            .map(|mut d| {
                d.audited_at = String::new();
                d
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(conclusions(&rebuilt), conclusions(&core));
}

async fn verdict_upsert_filters_and_pages<H: Harness>(h: &H) {
    let store = h.open().await;
    let states = IntentState::ALL;
    let mut all = Vec::new();
    for i in 0..23 {
        let tool = if i % 3 == 0 {
            None
        } else {
            Some(["issue_refund", "send_email"][i % 2])
        };
        // Ties in last_event: the intent id breaks them.
        let mut v = verdict(
            &format!("i-{i:02}"),
            tool,
            states[i % 5],
            at(10 + (i as i64 / 2)),
        );
        if i % 4 == 0 {
            v = with_findings(v, &[FindingKind::DuplicateEffect, FindingKind::NewKeyRetry]);
        }
        all.push(v);
    }
    store.put_verdicts(all.clone()).await.unwrap();
    // Listed newest first by place, then intent id: neither ever changes.
    let mut want = all.clone();
    want.sort_by(|a, b| (b.listed_at, &b.intent_id).cmp(&(a.listed_at, &a.intent_id)));
    let ids = |v: &[VerdictDoc]| v.iter().map(|d| d.intent_id.clone()).collect::<Vec<_>>();
    let want_ids = |f: &dyn Fn(&Verdict) -> bool| {
        want.iter()
            .filter(|v| f(v))
            .map(|v| v.intent_id.clone())
            .collect::<Vec<_>>()
    };
    for limit in [1, 4, 7, 23, 100] {
        let got = every_page(
            &store,
            VerdictFilter {
                limit,
                ..Default::default()
            },
        )
        .await;
        assert_eq!(ids(&got), want_ids(&|_| true), "limit {limit}");
    }
    let f = VerdictFilter {
        state: Some(IntentState::Pending),
        limit: 2,
        ..Default::default()
    };
    assert_eq!(
        ids(&every_page(&store, f).await),
        want_ids(&|v| v.state == IntentState::Pending)
    );
    let f = VerdictFilter {
        tool: Some("send_email".into()),
        ..Default::default()
    };
    assert_eq!(
        ids(&every_page(&store, f).await),
        want_ids(&|v| v.tool.as_deref() == Some("send_email"))
    );
    let f = VerdictFilter {
        since: Some(at(18)),
        ..Default::default()
    };
    assert_eq!(
        ids(&every_page(&store, f).await),
        want_ids(&|v| v.last_event >= at(18))
    );
    let f = VerdictFilter {
        finding: Some(FindingKind::NewKeyRetry),
        limit: 3,
        ..Default::default()
    };
    assert_eq!(
        ids(&every_page(&store, f).await),
        want_ids(&|v| !v.findings.is_empty())
    );

    // Upsert: the latest write wins, and filters see only it.
    let mut moved = all[3].clone();
    assert_eq!(moved.state, IntentState::FailedBeforeExecution);
    moved.state = IntentState::Completed;
    moved = with_findings(moved, &[FindingKind::StuckPending]);
    store.put_verdicts(vec![moved.clone()]).await.unwrap();
    assert_eq!(
        store.get_verdict(&moved.intent_id).await.unwrap(),
        Some(VerdictDoc::from_verdict(&moved))
    );
    let f = VerdictFilter {
        state: Some(IntentState::FailedBeforeExecution),
        ..Default::default()
    };
    assert!(!ids(&every_page(&store, f).await).contains(&moved.intent_id));
    // Of two verdicts of one intent in one write, the later wins, wherever the intent sorts.
    let mut first = all[9].clone();
    first.state = IntentState::Pending;
    let mut second = first.clone();
    second.state = IntentState::Unknown;
    second.audited_at = Timestamp(first.audited_at.0 + 1);
    let (low, high) = (all[1].clone(), all[20].clone());
    store
        .put_derived(Derived {
            verdicts: [high, first, low, second.clone()]
                .into_iter()
                .map(Arc::new)
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        store.get_verdict(&second.intent_id).await.unwrap(),
        Some(VerdictDoc::from_verdict(&second))
    );
    // Findings are replaced, not accumulated.
    let mut cleared = all[0].clone();
    cleared.findings.clear();
    store.put_verdicts(vec![cleared.clone()]).await.unwrap();
    let f = VerdictFilter {
        finding: Some(FindingKind::DuplicateEffect),
        ..Default::default()
    };
    assert!(!ids(&every_page(&store, f).await).contains(&cleared.intent_id));
    let rep = store.report(None, at(10_000)).await.unwrap();
    let dup_intents = all.iter().filter(|v| !v.findings.is_empty()).count() as u64 - 1;
    assert_eq!(rep.by_finding["duplicate_effect"], dup_intents);
    assert_eq!(rep.by_finding["stuck_pending"], 1);

    // Delete, then a cursor from before the delete still pages.
    store
        .delete_verdicts(vec!["i-00".into(), "i-01".into()])
        .await
        .unwrap();
    assert_eq!(store.get_verdict("i-00").await.unwrap(), None);
    // Asked by id, past a chunk of the question: deleted and unknown ids are not stored.
    let mut asked: Vec<String> = (0..1_500).map(|i| format!("never-{i}")).collect();
    asked.extend(all.iter().map(|v| v.intent_id.clone()));
    let mut stored = store.stored_verdicts(asked).await.unwrap();
    stored.sort();
    assert_eq!(
        stored,
        (2..23).map(|i| format!("i-{i:02}")).collect::<Vec<_>>()
    );
    let rest = every_page(
        &store,
        VerdictFilter {
            limit: 5,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(rest.len(), 21);
    assert!(matches!(
        store
            .list_verdicts(&VerdictFilter {
                cursor: Some("!!not a cursor".into()),
                ..Default::default()
            })
            .await,
        Err(StoreError::BadCursor(_))
    ));
}

/// What an engine reads of escalations: those of the intents it holds (the latest version of
/// each, resolved ones included), and how many of each status the store holds in all.
async fn escalations_by_intent_and_counted_by_status<H: Harness>(h: &H) {
    let store = h.open().await;
    let of = |intent: &str, n: u64, status, version| Escalation {
        intent_id: intent.to_string(),
        ..escalation(
            &format!("esc-{intent}-{n}"),
            status,
            at(10 + n as i64),
            version,
        )
    };
    let first = of("a", 1, EscalationStatus::Resolved, 3);
    let second = of("a", 2, EscalationStatus::Open, 1);
    store
        .put_escalations(vec![
            of("a", 1, EscalationStatus::Open, 1),
            first.clone(),
            second.clone(),
            of("b", 1, EscalationStatus::Claimed, 2),
            of("c", 1, EscalationStatus::Resolved, 3),
        ])
        .await
        .unwrap();
    // Few ids next to the table, as many, and many more: a store may probe by id or read the
    // table and keep what was asked for; the answer is the same.
    let many: Vec<String> = (0..2500).map(|i| format!("nobody-{i}")).collect();
    for asked in [
        vec!["a".to_string()],
        vec!["a".to_string(), "nobody".to_string()],
        std::iter::once("a".to_string()).chain(many).collect(),
    ] {
        let n = asked.len();
        let mut found = store.escalations_of(asked).await.unwrap();
        found.sort_by(|x, y| x.id.cmp(&y.id));
        assert_eq!(found, vec![first.clone(), second.clone()], "{n} ids asked");
    }
    assert!(store.escalations_of(Vec::new()).await.unwrap().is_empty());
    let mut counts = store.escalation_counts().await.unwrap();
    counts.sort_by_key(|(status, _)| status.as_str());
    assert_eq!(
        counts,
        [
            (EscalationStatus::Claimed, 1),
            (EscalationStatus::Open, 1),
            (EscalationStatus::Resolved, 2)
        ]
    );
}

/// An incident opens more escalations than one API page holds: the readers of every unresolved
/// one (Alertmanager's re-send, the unresolved gauge, the queue page) get them all, the API's
/// page its 1,000 newest.
async fn every_unresolved_escalation_can_be_read<H: Harness>(h: &H) {
    use reckon::store::{VerdictFilter, UNRESOLVED_READ_LIMIT};
    let store = h.open().await;
    let open: Vec<Escalation> = (0..1_100)
        .map(|i| {
            escalation(
                &format!("esc-{i:04}"),
                EscalationStatus::Open,
                at(i as f64),
                1,
            )
        })
        .collect();
    store.put_escalations(open).await.unwrap();
    let all = store
        .list_escalations(Some(EscalationStatus::Open), UNRESOLVED_READ_LIMIT)
        .await
        .unwrap();
    assert_eq!(all.len(), 1_100);
    assert_eq!(all.last().unwrap().id, "esc-0000", "the oldest too");
    assert_eq!(
        reckon::store::unresolved_escalations(&store, true)
            .await
            .unwrap(),
        all,
        "what the re-send, the gauge and the queue page read"
    );
    let page = store
        .list_escalations(Some(EscalationStatus::Open), VerdictFilter::MAX_LIMIT)
        .await
        .unwrap();
    assert_eq!(page.len(), 1_000);
    assert_eq!(page[0].id, "esc-1099", "newest first");
}

async fn escalation_highest_version_wins<H: Harness>(h: &H) {
    let store = h.open().await;
    let e1 = escalation("esc-1", EscalationStatus::Open, at(10), 1);
    let e2 = escalation("esc-1", EscalationStatus::Claimed, at(10), 2);
    let e3 = escalation("esc-1", EscalationStatus::Resolved, at(10), 3);
    store.put_escalations(vec![e1.clone()]).await.unwrap();
    store.put_escalations(vec![e3.clone()]).await.unwrap();
    // A late, older write never overwrites a newer one.
    store.put_escalations(vec![e2.clone()]).await.unwrap();
    assert_eq!(
        store.get_escalation("esc-1").await.unwrap(),
        Some(e3.clone())
    );
    let others: Vec<Escalation> = (2..8)
        .map(|i| escalation(&format!("esc-{i}"), EscalationStatus::Open, at(10 + i), 1))
        .collect();
    store.put_escalations(others.clone()).await.unwrap();
    let open = store
        .list_escalations(Some(EscalationStatus::Open), 0)
        .await
        .unwrap();
    let mut want = others.clone();
    want.reverse();
    assert_eq!(open, want, "newest first, only open");
    assert_eq!(
        store.list_escalations(None, 3).await.unwrap(),
        want[..3].to_vec()
    );
    assert_eq!(
        store
            .list_escalations(Some(EscalationStatus::Resolved), 0)
            .await
            .unwrap(),
        vec![e3.clone()]
    );
    assert_eq!(store.get_escalation("nope").await.unwrap(), None);
    let mut all = vec![e3];
    all.extend(others);
    assert_eq!(store.load_escalations().await.unwrap(), all);
}

async fn report_counts<H: Harness>(h: &H) {
    let store = h.open().await;
    let core = feed(&store, true).await;
    let rep = store.report(None, at(500)).await.unwrap();
    let verdicts: Vec<Verdict> = core.verdicts().collect();
    assert_eq!(rep.intents, verdicts.len() as u64);
    assert_eq!(
        rep.attempts,
        verdicts
            .iter()
            .map(|v| v.attempts.len() as u64)
            .sum::<u64>()
    );
    assert_eq!(
        rep.findings,
        verdicts
            .iter()
            .map(|v| v.findings.len() as u64)
            .sum::<u64>()
    );
    for s in IntentState::ALL {
        let n = verdicts.iter().filter(|v| v.state == s).count() as u64;
        assert_eq!(rep.by_state[s.as_str()], n, "{}", s.as_str());
    }
    for c in AttemptClass::ALL {
        let n = verdicts
            .iter()
            .flat_map(|v| &v.attempts)
            .filter(|a| a.class == c)
            .count() as u64;
        assert_eq!(rep.by_attempt_class[c.as_str()], n, "{}", c.as_str());
    }
    for k in FindingKind::ALL {
        let n = verdicts
            .iter()
            .flat_map(|v| &v.findings)
            .filter(|f| f.kind == k)
            .count() as u64;
        assert_eq!(rep.by_finding[k.as_str()], n, "{}", k.as_str());
    }
    let mut by_tool: BTreeMap<String, u64> = BTreeMap::new();
    for v in &verdicts {
        *by_tool
            .entry(v.tool.clone().unwrap_or_else(|| Report::NO_TOOL.into()))
            .or_default() += 1;
    }
    let got: BTreeMap<String, u64> = rep
        .by_tool
        .iter()
        .map(|(k, t)| (k.clone(), t.intents))
        .collect();
    assert_eq!(got, by_tool);
    assert_eq!(rep.by_tool["issue_refund"].duplicate_effects, 1);
    for s in EscalationStatus::ALL {
        assert_eq!(
            rep.escalations[s.as_str()],
            core.book().count(s) as u64,
            "{}",
            s.as_str()
        );
    }
    // `since` after every event: nothing but the shape.
    let later = store.report(Some(at(100_000)), at(100_001)).await.unwrap();
    assert_eq!(later.intents, 0);
    assert_eq!(later.by_state.len(), IntentState::ALL.len());
}

async fn concurrent_appends_all_durable<H: Harness>(h: &H)
where
    H::S: 'static,
{
    let store = Arc::new(h.open().await);
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for j in 0..5u64 {
                let n = 10_000 + t * 100 + j;
                let e = ev(refund(n, "intent-many", n as i64));
                store.append(vec![e]).await.expect("append");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(store.load_events().await.unwrap().len(), 80);
}

/// A time a store cannot hold (ClickHouse: before 1970, or past 2106 in a `DateTime`) refuses
/// its event alone, identically on every backend: the rest of the batch is stored, so a client
/// retrying the batch is not blocked forever by one poison item.
async fn unholdable_times_are_refused_alone<H: Harness>(h: &H) {
    use Appended::{New, Refused};
    let store = h.open().await;
    let with = |e: Event, f: &dyn Fn(&mut Event)| {
        let mut e = e;
        f(&mut e);
        e
    };
    let good_attempt = ev(refund(1, "intent-ok", 0));
    let good_record = record("re_ok", Some("intent-ok"), None, "succeeded", 5);
    let pre_1970 = with(record("re_old", None, None, "succeeded", 6), &|e| {
        if let Event::Record(r) = e {
            r.observed_at = Timestamp(-1_000_000_000);
        }
    });
    let created_pre_1970 = with(record("re_created", None, None, "succeeded", 7), &|e| {
        if let Event::Record(r) = e {
            r.created_at = Some(Timestamp(-86_400_000_000_000));
        }
    });
    let after_2106 = with(ev(refund(2, "intent-late", 0)), &|e| {
        if let Event::Attempt(a) = e {
            a.start = reckon::store::LATEST_HOLDABLE + Dur(1);
            a.end = a.start;
        }
    });
    let batch = vec![
        good_attempt.clone(),
        pre_1970,
        created_pre_1970,
        after_2106,
        good_record.clone(),
    ];
    let flags = store
        .append(batch.clone())
        .await
        .expect("the batch is not failed");
    assert_eq!(flags, [New, Refused, Refused, Refused, New]);
    assert_eq!(
        sorted_events(store.load_events().await.unwrap()),
        sorted_events(vec![good_attempt.clone(), good_record.clone()])
    );
    // Re-sent: the bad ones still refused, nothing fails. (Whether the good ones are reported
    // new again is each store's business: ClickHouse cannot cheaply tell.)
    let flags = store.append(batch).await.expect("re-send");
    assert_eq!(flags[1..4], [Refused; 3]);
    // A batch of only unholdable events is refused item by item too.
    let only_bad = with(record("re_bad", None, None, "failed", 8), &|e| {
        if let Event::Record(r) = e {
            r.observed_at = Timestamp(i64::MIN);
        }
    });
    assert_eq!(store.append(vec![only_bad]).await.unwrap(), [Refused]);
    // The edges themselves are holdable.
    let edges = with(record("re_edge", None, None, "succeeded", 9), &|e| {
        if let Event::Record(r) = e {
            r.observed_at = reckon::store::LATEST_HOLDABLE;
            r.created_at = Some(reckon::store::EARLIEST_HOLDABLE);
        }
    });
    assert_eq!(store.append(vec![edges.clone()]).await.unwrap(), [New]);
    assert_eq!(
        sorted_events(store.load_events().await.unwrap()),
        sorted_events(vec![good_attempt, good_record, edges])
    );
}

/// `events_touching` brings back what an intent that left memory needs: its attempts and
/// read-backs, and the records naming it, carrying a key or observing an object, first copies
/// only, each once, and nothing else.
async fn events_touching_intents_keys_and_objects<H: Harness>(h: &H) {
    use reckon::store::EventQuery;
    let store = h.open().await;
    let mine = vec![
        ev(refund(1, "intent-a", 0)
            .key("k-a")
            .object("re_a", "pending")),
        readback(2, "intent-a", 5, &["re_a"]),
        record("re_a", None, Some("k-a"), "succeeded", 6),
        record("re_x", Some("intent-a"), None, "failed", 7),
        // Found by object only, and by key only.
        record("re_a", None, None, "requires_action", 4),
        record("re_k", None, Some("k-a"), "pending", 8),
    ];
    let others = vec![
        ev(refund(3, "intent-b", 0).key("k-b")),
        readback(4, "intent-b", 5, &["re_a"]),
        record("re_b", Some("intent-b"), Some("k-b"), "succeeded", 9),
    ];
    let mut all = mine.clone();
    all.extend(others);
    store.append(all).await.unwrap();
    let got = store
        .events_touching(EventQuery {
            intents: vec!["intent-a".into()],
            keys: vec!["k-a".into()],
            objects: vec!["re_a".into()],
        })
        .await
        .unwrap();
    assert_eq!(sorted_events(got), sorted_events(mine));
    assert!(store
        .events_touching(EventQuery::default())
        .await
        .unwrap()
        .is_empty());
    let by_intent = store
        .events_touching(EventQuery {
            intents: vec!["intent-b".into(), "nobody".into()],
            ..EventQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(by_intent.len(), 3, "{by_intent:?}");
}

/// `known_observations` answers "has this (source, object_id, status) ever been observed?" from
/// the store, so it holds across a restart.
async fn known_observations_come_from_the_store<H: Harness>(h: &H) {
    let key = |source: &str, object: &str, status: &str| RecordKey {
        source: source.into(),
        object_id: object.into(),
        status: status.into(),
    };
    {
        let store = h.open().await;
        assert!(store
            .known_observations(vec![key("stripe", "re_1", "pending")])
            .await
            .unwrap()
            .is_empty());
        assert!(store
            .known_observations(Vec::new())
            .await
            .unwrap()
            .is_empty());
        store
            .append(vec![
                record("re_1", Some("intent-1"), None, "pending", 1),
                record("re_1", Some("intent-1"), None, "succeeded", 2),
                // Two observations of one state: one key.
                record("re_2", None, None, "failed", 3),
                record("re_2", None, None, "failed", 4),
            ])
            .await
            .unwrap();
    }
    let store = h.open().await;
    let asked = vec![
        key("stripe", "re_1", "pending"),
        key("stripe", "re_1", "succeeded"),
        key("stripe", "re_1", "failed"),
        key("api", "re_1", "succeeded"),
        key("stripe", "re_2", "failed"),
        key("stripe", "re_3", "failed"),
        // Quotes and backslashes travel as data, not SQL.
        key("stripe", "re_'1\\", "succeeded"),
    ];
    let known = store.known_observations(asked).await.unwrap();
    let mut known: Vec<RecordKey> = known.into_iter().collect();
    known.sort();
    assert_eq!(
        known,
        vec![
            key("stripe", "re_1", "pending"),
            key("stripe", "re_1", "succeeded"),
            key("stripe", "re_2", "failed"),
        ]
    );
    // Many keys at once (more than one query's worth on ClickHouse).
    let many: Vec<RecordKey> = (0..1200)
        .map(|i| key("stripe", &format!("re_{i}"), "failed"))
        .collect();
    let known = store.known_observations(many).await.unwrap();
    assert_eq!(known.len(), 1);
    assert!(known.contains(&key("stripe", "re_2", "failed")));
}

/// `Store::append`'s statuses, in order.
async fn appended<S: Store>(store: &S, events: Vec<Event>) -> Vec<Appended> {
    store.append(events).await.expect("append")
}

fn with_amount(e: Event, amount: Amount) -> Event {
    match e {
        Event::Record(mut r) => {
            r.amount = Some(amount);
            Event::Record(r)
        }
        other => other,
    }
}

/// A refund that timed out, and the same span re-sent as a 200 that returned an object: one
/// identity, two contents.
fn timeout_then_answered() -> (Event, Event) {
    let timeout = ev(refund(1, "intent-1", 0)
        .key("k-1")
        .timeout()
        .told("unknown"));
    let answered = ev(refund(1, "intent-1", 0)
        .key("k-1")
        .http(200)
        .object("re_1", "succeeded")
        .told("succeeded"));
    (timeout, answered)
}

/// Item 4 of "Store truth": the same identity re-sent with different content keeps its first
/// copy on every store, live and after a restart, and the engine follows the store.
async fn first_copy_wins<H: Harness>(h: &H) {
    use Appended::{Conflict, Duplicate, New};
    let store = h.open().await;
    let (timeout, answered) = timeout_then_answered();
    // A refund of 45.00 recorded as 4500 cents, then the same observation with another amount:
    // kept, it would be an effect_mismatch escalation.
    let paid = ev(refund(2, "intent-2", 0)
        .key("k-2")
        .http(200)
        .object("re_2", "succeeded"));
    let refund = record("re_2", Some("intent-2"), Some("k-2"), "succeeded", 5);
    let wrong = with_amount(refund.clone(), Amount::Minor(9900));
    // Major-unit amounts compare by value: 45.0 re-sent as 45.00 is the same observation.
    let major = |s: &str| {
        let mut r = record("re_3", None, Some("k-3"), "succeeded", 7);
        if let Event::Record(x) = &mut r {
            x.source = "api".into();
        }
        with_amount(r, Amount::Major(Decimal::parse(s).unwrap()))
    };
    let read = readback(3, "intent-1", 10, &["re_1"]);
    let read_changed = readback(3, "intent-1", 10, &[]);

    let first = vec![
        timeout.clone(),
        paid.clone(),
        refund.clone(),
        major("45.0"),
        read.clone(),
    ];
    assert_eq!(appended(&store, first.clone()).await, vec![New; 5]);
    assert_eq!(
        appended(
            &store,
            vec![
                answered.clone(),
                wrong.clone(),
                major("45.00"),
                read_changed.clone(),
                timeout.clone()
            ]
        )
        .await,
        vec![Conflict, Conflict, Duplicate, Conflict, Duplicate]
    );
    // Within one call, the earlier copy is the stored one.
    let (fresh, fresh_changed) = (
        readback(4, "intent-2", 20, &["re_2"]),
        readback(4, "intent-2", 20, &[]),
    );
    assert_eq!(
        appended(&store, vec![fresh.clone(), fresh_changed, fresh.clone()]).await,
        vec![New, Conflict, Duplicate]
    );
    let mut kept = first.clone();
    kept.push(fresh.clone());
    assert_eq!(
        sorted_events(store.load_events().await.expect("load_events")),
        sorted_events(kept.clone()),
        "only first copies are stored"
    );

    // The engine, fed what the store kept, and a restart from the store agree: no object for
    // intent-1's timed-out attempt, no mismatch (so no escalation) for intent-2.
    let now = at(100);
    let mut live = EngineCore::new(contracts());
    live.ingest(kept, now);
    drop(store);
    let store = h.open().await;
    let (restored, _) = EngineCore::restore(
        contracts(),
        store.load_events().await.unwrap(),
        store.load_escalations().await.unwrap(),
        now,
    );
    for id in ["intent-1", "intent-2", "orphan:re_3"] {
        assert_eq!(restored.verdict(id), live.verdict(id), "{id}");
    }
    let v = restored.verdict("intent-1").expect("intent-1");
    assert_eq!(
        v.attempts[0].class,
        AttemptClass::Unknown,
        "the first copy was a timeout"
    );
    let v = restored.verdict("intent-2").expect("intent-2");
    assert!(v.findings.is_empty(), "{:?}", v.findings);
    assert_eq!(restored.book().all().count(), 0, "no escalation");
}

/// A span's identity is (trace_id, span_id) whatever intent it names: a re-send that changed
/// only its intent id is a conflict, found on every store (ClickHouse sorts attempts by intent
/// first), also by a store opened afresh on the same data, and so is a record observation that
/// changed only its kind. The first copy wins; nothing acknowledged is stored twice.
async fn a_resend_under_another_intent_is_a_conflict<H: Harness>(h: &H) {
    use Appended::{Conflict, Duplicate, New};
    let store = h.open().await;
    let (timeout, answered) = timeout_then_answered();
    let moved = ev(refund(1, "intent-9", 0)
        .key("k-1")
        .timeout()
        .told("unknown"));
    let read = readback(2, "intent-1", 10, &["re_1"]);
    let read_moved = readback(2, "intent-9", 10, &["re_1"]);
    let first = vec![timeout.clone(), read.clone()];
    assert_eq!(store.append(first).await.unwrap(), [New, New]);
    let again = vec![
        answered,
        timeout.clone(),
        moved.clone(),
        read.clone(),
        read_moved.clone(),
    ];
    assert_eq!(
        store.append(again).await.unwrap(),
        [Conflict, Duplicate, Conflict, Duplicate, Conflict]
    );
    // Within one call: the first copy counts as stored.
    let other = ev(refund(3, "intent-2", 0).key("k-2").timeout());
    let other_moved = ev(refund(3, "intent-3", 0).key("k-2").timeout());
    assert_eq!(
        store
            .append(vec![other.clone(), other_moved.clone(), other.clone()])
            .await
            .unwrap(),
        [New, Conflict, Duplicate]
    );
    // Records, by their whole identity: another amount, or another kind, is another content.
    let seen = record("re_9", Some("intent-2"), Some("k-2"), "succeeded", 5);
    let other_amount = with_amount(seen.clone(), Amount::Minor(1));
    let other_kind = match seen.clone() {
        Event::Record(mut r) => {
            r.kind = Some("draft".into());
            Event::Record(r)
        }
        _ => unreachable!(),
    };
    assert_eq!(store.append(vec![seen.clone()]).await.unwrap(), [New]);
    assert_eq!(
        store
            .append(vec![seen.clone(), other_amount.clone(), other_kind.clone()])
            .await
            .unwrap(),
        [Duplicate, Conflict, Conflict]
    );
    // A store opened afresh knows what is stored (on ClickHouse: its filter of stored
    // identities starts cold and is filled from the tables).
    drop(store);
    let store = h.open().await;
    let later = vec![moved, read_moved, other_moved, other_kind, timeout.clone()];
    assert_eq!(
        store.append(later).await.unwrap(),
        [Conflict, Conflict, Conflict, Conflict, Duplicate]
    );
    assert_eq!(
        sorted_events(store.load_events().await.unwrap()),
        sorted_events(vec![timeout, read, other, seen]),
        "only first copies are stored"
    );
}

/// Start the real engine on a store, as the app does.
async fn engine_on(store: AnyStore) -> (Arc<Engine>, EngineTasks, Arc<Metrics>) {
    engine_with(store, EngineOptions::default()).await
}

/// [`engine_on`] with its background work tuned.
async fn engine_with(
    store: AnyStore,
    options: EngineOptions,
) -> (Arc<Engine>, EngineTasks, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let (engine, tasks) =
        Engine::start_with(contracts(), Arc::new(store), metrics.clone(), options)
            .await
            .expect("engine starts");
    (engine, tasks, metrics)
}

/// Wait until the engine has audited again everything it loaded at start (its timer does, a
/// page at a time, behind serving): what a restart changes is then concluded.
async fn audited_again(engine: &Engine) {
    for _ in 0..1000 {
        if engine.unaudited() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} intents still unaudited after 10 s", engine.unaudited());
}

/// Stop the engine in order: everything concluded is written out.
async fn stop(engine: Arc<Engine>, tasks: EngineTasks) {
    engine.close();
    drop(engine);
    tasks.finish().await;
}

/// The sum of every sample of `name` (all label sets) in the metrics text.
fn metric(m: &Metrics, name: &str) -> u64 {
    m.render()
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn ingest(engine: &Arc<Engine>, events: Vec<Event>) -> usize {
    engine
        .ingest(events, std::time::Instant::now(), ())
        .await
        .expect("ingest")
        .new
}

/// Item 5 of "Store truth": counters count what happened, on both stores: three identical sends
/// of nine attempts are nine attempts, a re-posted record is one record, and a re-send with other
/// content is counted as a conflict.
async fn counters_count_what_happened<H: Harness>(h: &H) {
    let (engine, tasks, metrics) = engine_on(h.open_any().await).await;
    let attempts: Vec<Event> = (0..9)
        .map(|i| ev(refund(100 + i, "intent-9", i as i64)))
        .collect();
    let records = vec![
        record("re_9", Some("intent-9"), Some("k-default"), "pending", 20),
        record("re_9", Some("intent-9"), Some("k-default"), "succeeded", 30),
    ];
    for round in 0..3 {
        let new = ingest(&engine, attempts.clone()).await;
        assert_eq!(new, if round == 0 { 9 } else { 0 });
        ingest(&engine, records.clone()).await;
    }
    assert_eq!(metric(&metrics, "reckon_tool_attempts_total"), 9);
    assert_eq!(metric(&metrics, "reckon_records_received_total"), 2);
    assert_eq!(metric(&metrics, "reckon_conflicting_resends_total"), 0);
    let changed = with_amount(records[1].clone(), Amount::Minor(1));
    let timeout = ev(refund(100, "intent-9", 0).timeout());
    assert_eq!(ingest(&engine, vec![changed, timeout]).await, 0);
    assert_eq!(metric(&metrics, "reckon_tool_attempts_total"), 9);
    assert_eq!(metric(&metrics, "reckon_records_received_total"), 2);
    let text = metrics.render();
    for line in [
        "reckon_conflicting_resends_total{kind=\"attempt\"} 1",
        "reckon_conflicting_resends_total{kind=\"record\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // The engine kept the first copies, as the store did.
    let v = engine.verdict("intent-9").await.expect("verdict");
    assert_eq!(v.attempts.len(), 9);
    assert!(v.attempts.iter().all(|a| a.error_type.is_none()));
    stop(engine, tasks).await;
}

/// Item 2 of "Store truth": a crash after the span that claims an orphan record was acknowledged
/// but before the persister removed the orphan's pseudo-intent verdict leaves a stale row (the
/// report counts the refund twice, once under `(none)`). The next start removes it: the store's
/// derived rows converge to what the engine computes from the events.
async fn restart_reconciles_orphan_verdicts<H: Harness>(h: &H) {
    let store = h.open().await;
    // The first process stored two orphan records and their pseudo-intents' verdicts...
    let claimed = record("re_x", None, Some("k-x"), "succeeded", 5);
    let orphan = record("re_y", None, None, "succeeded", 6);
    let mut core = EngineCore::new(contracts());
    appended(&store, vec![claimed.clone(), orphan.clone()]).await;
    persist(&store, core.ingest(vec![claimed, orphan], at(10))).await;
    // ...then the span that sent re_x's key was made durable, and the process was killed before
    // its persister wrote anything more.
    let span = ev(refund(1, "intent-x", 0)
        .key("k-x")
        .http(200)
        .object("re_x", "succeeded"));
    appended(&store, vec![span]).await;
    assert!(store.get_verdict("orphan:re_x").await.unwrap().is_some());
    assert_eq!(
        store.report(None, at(100)).await.unwrap().by_tool[Report::NO_TOOL].intents,
        2
    );
    drop(store);

    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    assert!(engine.verdict("orphan:re_x").await.is_none());
    assert!(engine.verdict("intent-x").await.is_some());
    audited_again(&engine).await;
    stop(engine, tasks).await;

    let store = h.open().await;
    assert_eq!(store.get_verdict("orphan:re_x").await.unwrap(), None);
    assert_eq!(
        store
            .stored_verdicts(vec!["orphan:re_x".into(), "orphan:re_y".into()])
            .await
            .unwrap(),
        vec!["orphan:re_y".to_string()],
        "an orphan nobody claimed stays"
    );
    let rep = store.report(None, at(100)).await.unwrap();
    assert_eq!(rep.intents, 2, "{rep:#?}");
    assert_eq!(rep.by_tool[Report::NO_TOOL].intents, 1);
    assert_eq!(rep.by_tool["issue_refund"].intents, 1);
    let v = store
        .get_verdict("intent-x")
        .await
        .unwrap()
        .expect("intent-x");
    assert_eq!(
        v.objects.len(),
        1,
        "the object counts once, under its intent"
    );
}

/// Item 3 of "Store truth": a second refund recorded `pending` opens a critical
/// `duplicate_effect`; the same object recorded `failed` right after takes the finding out of
/// the verdict. The escalation was shown, so it is in the store before anyone saw it, and a
/// crash before the persister wrote anything (its linger here is an hour) keeps it, with the
/// finding that opened it.
async fn escalations_are_durable_before_visible<H: Harness>(h: &H) {
    let (engine, tasks, metrics) = engine_with(
        h.open_any().await,
        EngineOptions {
            persist_linger: Duration::from_secs(3600),
            ..EngineOptions::default()
        },
    )
    .await;
    let reader = h.open().await;
    let paid = ev(refund(1, "intent-d", 0)
        .key("k-d")
        .http(200)
        .object("re_d1", "succeeded")
        .told("succeeded"));
    ingest(&engine, vec![paid]).await;
    ingest(
        &engine,
        vec![record("re_d2", Some("intent-d"), None, "pending", 60)],
    )
    .await;
    // Visible: the verdict names it, the gauge counts it. And already in the store.
    let v = engine.verdict("intent-d").await.expect("verdict");
    assert_eq!(v.decision, Decision::Escalate);
    let id = v.escalation_id.clone().expect("escalated");
    assert_eq!(metric(&metrics, "reckon_open_escalations"), 1);
    let stored = reader
        .get_escalation(&id)
        .await
        .unwrap()
        .expect("durable before it was visible");
    assert_eq!(stored.status, EscalationStatus::Open);
    assert_eq!(stored.severity, Severity::Critical);
    assert!(stored
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::DuplicateEffect));
    // The second refund fails: the finding leaves the verdict, the escalation stays.
    ingest(
        &engine,
        vec![record("re_d2", Some("intent-d"), None, "failed", 61)],
    )
    .await;
    let v = engine.verdict("intent-d").await.expect("verdict");
    assert!(v.findings.is_empty(), "{:?}", v.findings);
    assert_eq!(v.decision, Decision::Escalate, "still open for a person");
    // Crash: nothing the persister held is written.
    tasks.abort().await;
    drop(engine);
    drop(reader);

    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    let v = engine.verdict("intent-d").await.expect("verdict");
    assert_eq!(v.escalation_id.as_deref(), Some(id.as_str()));
    assert_eq!(v.decision, Decision::Escalate);
    stop(engine, tasks).await;
    let store = h.open().await;
    let after = store.get_escalation(&id).await.unwrap().expect("survived");
    assert_eq!(after, stored, "the escalation as it was shown");
}

/// "Memory and history": what waits to be written is bounded. Past `max_unwritten_verdicts`
/// the engine says it is behind (ingest then refuses new exports, retryably), and once the
/// persister's batch lands it no longer is, with every verdict in the store.
async fn unwritten_verdicts_are_bounded<H: Harness>(h: &H) {
    let (engine, tasks, _) = engine_with(
        h.open_any().await,
        EngineOptions {
            // Long enough that the batch is still gathering when the engine is asked, even
            // with appends slowed by a loaded machine.
            persist_linger: Duration::from_secs(5),
            max_unwritten_verdicts: 3,
            ..EngineOptions::default()
        },
    )
    .await;
    let timeouts = |from: u64, to: u64| -> Vec<Event> {
        (from..to)
            .map(|i| ev(refund(i, &format!("intent-b{i}"), 0).key(&format!("k-b{i}"))))
            .collect()
    };
    ingest(&engine, timeouts(1, 4)).await;
    assert_eq!(engine.unwritten_verdicts(), 3);
    assert!(!engine.behind(), "at the bound, not past it");
    ingest(&engine, timeouts(4, 5)).await;
    assert_eq!(engine.unwritten_verdicts(), 4);
    assert!(engine.behind(), "one past the bound");
    let started = std::time::Instant::now();
    while engine.behind() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the persister never caught up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(engine.unwritten_verdicts(), 0);
    let store = h.open().await;
    let asked = (0..=5).map(|i| format!("intent-b{i}")).collect();
    let mut ids = store.stored_verdicts(asked).await.unwrap();
    ids.sort();
    assert_eq!(
        ids,
        ["intent-b1", "intent-b2", "intent-b3", "intent-b4"],
        "everything counted was written"
    );
    stop(engine, tasks).await;
}

fn claimed_by(e: &Escalation, by: &str, secs: i64) -> Escalation {
    let mut c = e.clone();
    c.status = EscalationStatus::Claimed;
    c.claimed_by = Some(by.into());
    c.claimed_at = Some(at(secs));
    c.version += 1;
    c
}

/// Item 8 of "Store truth", at the store: a claim is a conditional write on the stored version,
/// so of two writers (two handles: two processes) acting on one version exactly one wins,
/// sequentially and concurrently.
async fn escalation_compare_and_set<H: Harness>(h: &H)
where
    H::S: 'static,
{
    let (a, b) = (Arc::new(h.open().await), Arc::new(h.open().await));
    let open = escalation("esc-cas", EscalationStatus::Open, at(10), 1);
    a.put_escalations(vec![open.clone()]).await.unwrap();
    let ana = claimed_by(&open, "ana", 20);
    let bo = claimed_by(&open, "bo", 21);
    assert_eq!(
        a.swap_escalation(open.clone(), ana.clone()).await.unwrap(),
        Swap::Written
    );
    assert_eq!(
        b.swap_escalation(open.clone(), bo.clone()).await.unwrap(),
        Swap::Conflict(Some(Box::new(ana.clone()))),
        "the second claim of version 1 loses, and learns who won"
    );
    for s in [&a, &b] {
        assert_eq!(
            s.get_escalation("esc-cas").await.unwrap(),
            Some(ana.clone())
        );
    }
    // A resolution computed from the claimed version goes through; a stale one does not.
    let mut resolved = ana.clone();
    resolved.status = EscalationStatus::Resolved;
    resolved.resolved_by = Some("ana".into());
    resolved.resolved_at = Some(at(30));
    resolved.resolution = Some("reversed".into());
    resolved.version = 3;
    assert_eq!(
        b.swap_escalation(ana.clone(), resolved.clone())
            .await
            .unwrap(),
        Swap::Written
    );
    let mut stale = bo.clone();
    stale.version = 3;
    assert_eq!(
        a.swap_escalation(bo.clone(), stale).await.unwrap(),
        Swap::Conflict(Some(Box::new(resolved.clone())))
    );
    // Same version, other content (what an engine write of an equal version leaves): no swap.
    let mut other = resolved.clone();
    other.status = EscalationStatus::Claimed;
    other.resolved_by = None;
    let mut over = resolved.clone();
    over.version = 4;
    assert_eq!(
        a.swap_escalation(other, over).await.unwrap(),
        Swap::Conflict(Some(Box::new(resolved.clone())))
    );
    let none = escalation("esc-none", EscalationStatus::Open, at(1), 1);
    assert_eq!(
        a.swap_escalation(none.clone(), claimed_by(&none, "x", 2))
            .await
            .unwrap(),
        Swap::Conflict(None),
        "nothing stored, nothing to swap"
    );

    // Six people claim one version at once through two handles: one wins, the store shows it.
    let race = escalation("esc-race", EscalationStatus::Open, at(40), 1);
    a.put_escalations(vec![race.clone()]).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let (race, claim) = (
            race.clone(),
            claimed_by(&race, &format!("person-{i}"), 50 + i),
        );
        tasks.push(tokio::spawn(async move {
            let r = store.swap_escalation(race, claim.clone()).await.unwrap();
            (claim, r)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (claim, r) = t.await.unwrap();
        if r == Swap::Written {
            winners.push(claim);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim wins: {winners:?}");
    assert_eq!(
        b.get_escalation("esc-race").await.unwrap().as_ref(),
        winners.first()
    );
}

/// Item 8 of "Store truth", through the engine: two reckon instances on one store (the
/// scale-out shape) are asked to claim one escalation by different people. The second claim is
/// a conflict naming the first claimant, and both instances agree afterwards; the second
/// instance takes the claim in, so the claimant can resolve through it. (Simultaneous claims are
/// raced at the store, in `escalation_compare_and_set`.)
async fn two_instances_agree_on_person_actions<H: Harness>(h: &H) {
    // The escalation exists before both instances start: each rebuilds its book from the store.
    {
        let (engine, tasks, _) = engine_on(h.open_any().await).await;
        let email = ev(sent(1, "intent-e", "send_email", 0)
            .timeout()
            .told("unknown"));
        ingest(&engine, vec![email]).await;
        stop(engine, tasks).await;
    }
    let (a, a_tasks, _) = engine_on(h.open_any().await).await;
    let (b, b_tasks, _) = engine_on(h.open_any().await).await;
    let id = a
        .verdict("intent-e")
        .await
        .and_then(|v| v.escalation_id.clone())
        .expect("escalated");
    // B may serve before it has read its open intents back (a start with their routes in the
    // store does): wait until it holds intent-e (a loaded machine took more than the instant
    // this used to allow).
    let mut seen_by_b = None;
    for _ in 0..500 {
        seen_by_b = b
            .verdict("intent-e")
            .await
            .and_then(|v| v.escalation_id.clone());
        if seen_by_b.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen_by_b, Some(id.clone()));
    // Ana claims through one instance; Bo, a moment later, through the other, whose memory
    // still says open: the store says otherwise.
    let (winner, loser) = (a.clone(), b.clone());
    let by = winner.claim(&id, "ana", false).await.expect("first claim");
    let lost = loser
        .claim(&id, "bo", false)
        .await
        .expect_err("second claim");
    let person = by.claimed_by.clone().expect("claimed");
    assert!(
        matches!(lost, reckon::engine::EngineError::Escalation(_))
            && lost.to_string().contains(&person),
        "the loser learns who holds it: {lost}"
    );
    // The loser's instance holds the winner's claim now: the same person claiming again through
    // it is no conflict, and resolving through it works.
    assert_eq!(
        loser.claim(&id, &person, false).await.expect("same person"),
        by
    );
    let resolved = loser
        .resolve(
            &id,
            &person,
            "not_sent",
            Some("provider log shows no message"),
            false,
        )
        .await
        .expect("resolve through the other instance");
    assert_eq!(resolved.version, by.version + 1);
    // The winner's instance has not seen the resolution; the store has, so a second one fails.
    let again = winner.resolve(&id, "someone", "sent", None, false).await;
    assert!(
        again
            .as_ref()
            .is_err_and(|e| e.to_string().contains("already resolved")),
        "{again:?}"
    );
    assert_eq!(
        winner.verdict("intent-e").await.map(|v| v.decision),
        loser.verdict("intent-e").await.map(|v| v.decision),
        "both instances decide the same"
    );
    stop(a, a_tasks).await;
    stop(b, b_tasks).await;
    let store = h.open().await;
    assert_eq!(store.get_escalation(&id).await.unwrap(), Some(resolved));
}

// ---------------------------------------------------------------------------------------------
// Across backends, and what only ClickHouse has.

/// The same events through the same engine give the same documents and report on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_and_clickhouse_agree() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    let sq = Sqlite::new().await.expect("sqlite");
    let (a, b) = (sq.open().await, ch.open().await);
    feed(&a, true).await;
    feed(&b, true).await;
    let all = VerdictFilter::default();
    assert_eq!(every_page(&a, all.clone()).await, every_page(&b, all).await);
    assert_eq!(
        a.load_escalations().await.unwrap(),
        b.load_escalations().await.unwrap()
    );
    assert_eq!(
        a.report(Some(at(0)), at(999)).await.unwrap(),
        b.report(Some(at(0)), at(999)).await.unwrap()
    );
    assert_eq!(
        sorted_events(a.load_events().await.unwrap()),
        sorted_events(b.load_events().await.unwrap())
    );
    drop(b);
    ch.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_an_older_schema_keeping_data() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 1).await.expect("v1 schema");
    let client = ch.client();
    let version = |client: ::clickhouse::Client| async move {
        client
            .query("SELECT max(version) FROM reckon_schema_migrations")
            .fetch_one::<u32>()
            .await
            .expect("version")
    };
    assert_eq!(version(client.clone()).await, 1);
    // Data an older reckon wrote: one attempt, in v1's columns.
    client
        .query(
            "INSERT INTO reckon_attempts (trace_id, span_id, intent_id, tool, started_at, started_ns,
             ended_ns, idempotency_key, http_status, error_type, span_error, object_id, object_status,
             reported_outcome, arguments, ingested_ns)
             VALUES ('0102030405060708090a0b0c0d0e0f10', '1112131415161718', 'intent-old', 'issue_refund',
             toDateTime(1780000000), 1780000000000000000, 1780000001000000000, 'k-old', 502, '502', 1,
             NULL, NULL, 'unknown', NULL, 1)",
        )
        .execute()
        .await
        .expect("raw v1 insert");
    let store = ch.open().await;
    assert_eq!(version(client.clone()).await, schema::latest());
    let events = store.load_events().await.unwrap();
    assert_eq!(events.len(), 1);
    let Event::Attempt(a) = &events[0] else {
        panic!("not an attempt: {events:?}")
    };
    assert_eq!(
        (
            a.intent_id.as_str(),
            a.http_status,
            a.reported_outcome,
            a.span_error
        ),
        (
            "intent-old",
            Some(502),
            Some(ReportedOutcome::Unknown),
            true
        )
    );
    // The upgraded schema works: v2's findings feed the report.
    let v = with_findings(
        verdict(
            "intent-old",
            Some("issue_refund"),
            IntentState::Unknown,
            at(5),
        ),
        &[FindingKind::ExpiredKeyRetry],
    );
    store.put_verdicts(vec![v]).await.unwrap();
    assert_eq!(
        store.report(None, at(10)).await.unwrap().by_finding["expired_key_retry"],
        1
    );
    // Opening again is a no-op; a schema from the future is refused by name.
    drop(store);
    let store = ch.open().await;
    drop(store);
    client
        .query("INSERT INTO reckon_schema_migrations (version, name, applied_at) VALUES (99, 'future', now())")
        .execute()
        .await
        .unwrap();
    match ClickHouseStore::open(ch.config.clone()).await {
        Err(StoreError::ClickHouseSchemaTooNew { found: 99, .. }) => {}
        other => panic!("expected ClickHouseSchemaTooNew, got {other:?}"),
    }
    ch.finish().await;
}

/// v9 extends the escalation status with `withdrawn`, adds overrides, and fills the intent
/// lookups from the verdicts an older reckon wrote (their keys, and from their documents their
/// objects and the objects' targets): on 18.16 as on current servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_lookups_overrides_and_withdrawn() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 8).await.expect("v8 schema");
    let client = ch.client();
    let mut old = verdict(
        "before",
        Some("issue_refund"),
        IntentState::Completed,
        at(5),
    );
    old.attempts[0].object_id = Some("re_0".into());
    let doc = serde_json::to_value(VerdictDoc::from_verdict(&old)).unwrap();
    client
        .query(
            "INSERT INTO reckon_verdicts (intent_id, tool, contract, state, decision, idempotency_keys, doc, deleted, version)
             VALUES ('before', 'issue_refund', 'payments.refund', 'completed', 'none', ['k'], ?, 0, 1)",
        )
        .bind(doc.to_string())
        .execute()
        .await
        .expect("raw v8 verdict");
    client
        .query(
            "INSERT INTO reckon_escalations (id, intent_id, status, severity, opened_at, opened_ns, version)
             VALUES ('esc-old', 'before', 'claimed', 'high', toDateTime(5), 5000000000, 2)",
        )
        .execute()
        .await
        .expect("raw v8 escalation");
    let store = ch.open().await;
    let found = |target: Option<&str>, object: Option<&str>, key: Option<&str>| {
        let store = &store;
        let f = VerdictFilter {
            target: target.map(Into::into),
            object_id: object.map(Into::into),
            key: key.map(Into::into),
            ..Default::default()
        };
        async move {
            store
                .list_verdicts(&f)
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|d| d.intent_id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(found(Some("1042"), None, None).await, ["before"]);
    assert_eq!(found(None, Some("re_1"), None).await, ["before"]);
    assert_eq!(found(None, Some("re_0"), None).await, ["before"]);
    assert_eq!(found(None, None, Some("k")).await, ["before"]);
    assert!(found(None, None, Some("nope")).await.is_empty());
    let e = store
        .get_escalation("esc-old")
        .await
        .unwrap()
        .expect("kept");
    assert_eq!(
        (e.status, e.overrides.len()),
        (EscalationStatus::Claimed, 0)
    );
    let mut w = e.clone();
    w.status = EscalationStatus::Withdrawn;
    w.claimed_by = None;
    w.version = 3;
    store.put_escalations(vec![w.clone()]).await.unwrap();
    assert_eq!(store.get_escalation("esc-old").await.unwrap(), Some(w));
    drop(store);
    ch.finish().await;
}

/// v10 adds `reckon_span_owners`, filled from the spans an older reckon stored: a span of that
/// history re-sent under another intent id is a conflict after the upgrade, not a second copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_span_owners() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 9).await.expect("v9 schema");
    let stored = refund(1, "intent-1", 0).key("k-1").timeout();
    let (trace, span) = (stored.span.trace_hex(), stored.span.span_hex());
    ch.client()
        .query(
            "INSERT INTO reckon_attempts (trace_id, span_id, intent_id, tool, started_at, started_ns, ended_ns, span_error, ingested_ns)
             VALUES (?, ?, 'intent-1', 'issue_refund', toDateTime(1), 1000000000, 2000000000, 0, 1)",
        )
        .bind(trace.as_str())
        .bind(span.as_str())
        .execute()
        .await
        .expect("a span a v9 reckon stored");
    let store = ch.open().await;
    let moved = ev(refund(1, "intent-9", 0).key("k-1").timeout());
    assert_eq!(
        store.append(vec![moved]).await.unwrap(),
        [Appended::Conflict]
    );
    let fresh = ev(refund(2, "intent-9", 0).key("k-9").timeout());
    assert_eq!(store.append(vec![fresh]).await.unwrap(), [Appended::New]);
    let owners: Vec<String> = ch
        .client()
        .query("SELECT intent_id FROM reckon_span_owners WHERE span_id = ?")
        .bind(span.as_str())
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(owners, ["intent-1"]);
    drop(store);
    ch.finish().await;
}

/// Every total of a set of filters against the count of `all` that match.
async fn check_totals(store: &ClickHouseStore, all: &[Verdict], when: &str) {
    let states = [
        IntentState::Completed,
        IntentState::Unknown,
        IntentState::Pending,
    ];
    let mut filters = vec![VerdictFilter::default()];
    for s in states {
        filters.push(VerdictFilter {
            state: Some(s),
            ..Default::default()
        });
    }
    filters.push(VerdictFilter {
        tool: Some("send_email".into()),
        state: Some(IntentState::Unknown),
        ..Default::default()
    });
    filters.push(VerdictFilter {
        finding: Some(FindingKind::NewKeyRetry),
        tool: Some("issue_refund".into()),
        ..Default::default()
    });
    filters.push(VerdictFilter {
        finding: Some(FindingKind::StuckPending),
        ..Default::default()
    });
    for f in filters {
        let want = all
            .iter()
            .filter(|v| f.state.is_none_or(|s| v.state == s))
            .filter(|v| f.tool.is_none() || v.tool == f.tool)
            .filter(|v| {
                f.finding
                    .is_none_or(|k| v.findings.iter().any(|x| x.kind == k))
            })
            .count() as u64;
        let page = store.list_verdicts(&f).await.unwrap();
        assert_eq!(page.total, want, "{when}: {f:?}");
        // And the pages, walked 7 at a time, are the matching intents newest first.
        let mut expect: Vec<&Verdict> = all
            .iter()
            .filter(|v| f.state.is_none_or(|s| v.state == s))
            .filter(|v| f.tool.is_none() || v.tool == f.tool)
            .filter(|v| {
                f.finding
                    .is_none_or(|k| v.findings.iter().any(|x| x.kind == k))
            })
            .collect();
        expect.sort_by(|a, b| (b.listed_at, &b.intent_id).cmp(&(a.listed_at, &a.intent_id)));
        let expect: Vec<VerdictDoc> = expect.into_iter().map(VerdictDoc::from_verdict).collect();
        let walked = every_page(
            store,
            VerdictFilter {
                limit: 7,
                ..f.clone()
            },
        )
        .await;
        assert_eq!(walked, expect, "{when}: {f:?}");
    }
}

/// The intents listing's total on ClickHouse comes from counts per hour of listing places,
/// recounted in the background, plus the listing's own rows of the hours written since: exact
/// before a recount, after it, and after rewrites, deletes and new findings that leave the
/// counts behind; and, once counted, read from the counts (with `since`, only the hours after
/// `since`'s: those before it are read from the listing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_totals_come_from_recounted_hours() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    let store = ch.open().await;
    let states = [
        IntentState::Completed,
        IntentState::Unknown,
        IntentState::Pending,
    ];
    let mut all: Vec<Verdict> = (0..40)
        .map(|i| {
            let tool = ["issue_refund", "send_email"][i % 2];
            let tool = if i % 7 == 0 { None } else { Some(tool) };
            let mut v = verdict(&format!("t-{i:02}"), tool, states[i % 3], at(50_000));
            // Over five hours, several intents an hour.
            v.listed_at = at(i as i64 * 450);
            if i % 4 == 0 {
                v = with_findings(v, &[FindingKind::DuplicateEffect, FindingKind::NewKeyRetry]);
            }
            v
        })
        .collect();
    store.put_verdicts(all.clone()).await.unwrap();
    check_totals(&store, &all, "before any recount").await;
    // (The store's own task recounts every few seconds too: whichever gets there first.)
    while store.recount().await.unwrap() > 0 {}
    assert_eq!(store.recount().await.unwrap(), 0, "nothing written since");
    check_totals(&store, &all, "counted").await;
    // Rewrites the counts have not seen: a state change, a new finding, one removed.
    all[1].state = IntentState::Completed;
    all[2] = with_findings(all[2].clone(), &[FindingKind::StuckPending]);
    store
        .put_verdicts(vec![all[1].clone(), all[2].clone()])
        .await
        .unwrap();
    store
        .delete_verdicts(vec![all[39].intent_id.clone()])
        .await
        .unwrap();
    all.remove(39);
    check_totals(&store, &all, "rewritten, not recounted").await;
    while store.recount().await.unwrap() > 0 {}
    check_totals(&store, &all, "recounted").await;

    // 200,000 more intents in other hours, counted: a bounded store still gets every total.
    ch.client()
        .query(
            "INSERT INTO reckon_intent_list (listed_at, listed_ns, intent_id, state, doc, deleted, version)
             SELECT toDateTime(100000 + number), (100000 + number) * 1000000000,
                 concat('bulk-', toString(number)), 'completed', '{}', 0, 1
             FROM system.numbers LIMIT 200000",
        )
        .execute()
        .await
        .expect("bulk rows");
    while store.recount().await.unwrap() > 0 {}
    let completed = all
        .iter()
        .filter(|v| v.state == IntentState::Completed)
        .count() as u64;
    async fn total(store: &ClickHouseStore, since: Option<Timestamp>) -> u64 {
        let f = VerdictFilter {
            state: Some(IntentState::Completed),
            since,
            limit: 1,
            ..Default::default()
        };
        store.list_verdicts(&f).await.unwrap().total
    }
    assert_eq!(total(&store, None).await, 200_000 + completed);
    // The counts are what a total reads: one changed behind reckon's back shows in it (the
    // hour from 97,200 s holds the 800 bulk intents listed at 100,000..100,799 s), and not in
    // a total with `since` after it, which reads that hour from the listing.
    ch.client()
        .query(
            "INSERT INTO reckon_listing_counts (listing, hour, dim1, dim2, finding, n, counted)
             VALUES ('intents', toDateTime(97200), 'completed', '', 0, 7, toDateTime(4000000000))",
        )
        .execute()
        .await
        .unwrap();
    assert_eq!(total(&store, None).await, 200_000 + completed - 793);
    assert_eq!(total(&store, Some(at(0))).await, completed);
    drop(store);
    ch.finish().await;
}

/// Escalation totals and pages on ClickHouse come from the same hourly counts (status and
/// severity): right before a recount, after it, and after changes the counts have not seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_escalation_totals_come_from_recounted_hours() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    let store = ch.open().await;
    let statuses = [
        EscalationStatus::Open,
        EscalationStatus::Claimed,
        EscalationStatus::Resolved,
    ];
    let mut all: Vec<Escalation> = (0..30)
        .map(|i| {
            let mut e = escalation(&format!("e-{i:02}"), statuses[i % 3], at(i as i64 * 600), 1);
            e.severity = if i % 4 == 0 {
                Severity::High
            } else {
                Severity::Critical
            };
            e
        })
        .collect();
    store.put_escalations(all.clone()).await.unwrap();
    async fn check(store: &ClickHouseStore, all: &[Escalation], when: &str) {
        let filters = [
            EscalationFilter::default(),
            EscalationFilter {
                status: Some(EscalationStatus::Open),
                ..Default::default()
            },
            EscalationFilter {
                severity: Some(Severity::High),
                status: Some(EscalationStatus::Resolved),
                ..Default::default()
            },
        ];
        for f in filters {
            let mut want: Vec<&Escalation> = all
                .iter()
                .filter(|e| f.status.is_none_or(|s| e.status == s))
                .filter(|e| f.severity.is_none_or(|s| e.severity == s))
                .collect();
            want.sort_by(|a, b| (b.listed_at, &b.id).cmp(&(a.listed_at, &a.id)));
            let want: Vec<String> = want.iter().map(|e| e.id.clone()).collect();
            let mut got = Vec::new();
            let mut filter = EscalationFilter {
                limit: 4,
                ..f.clone()
            };
            loop {
                let page = store.page_escalations(&filter).await.unwrap();
                assert_eq!(page.total, want.len() as u64, "{when}: {f:?}");
                got.extend(page.items.into_iter().map(|e| e.id));
                match page.next_cursor {
                    Some(c) => filter.cursor = Some(c),
                    None => break,
                }
            }
            assert_eq!(got, want, "{when}: {f:?}");
        }
        // The newest of a status (the queue, the gauges), from the hours the counts say
        // hold some: every limit, from fewer than there are to more.
        for status in [
            None,
            Some(EscalationStatus::Open),
            Some(EscalationStatus::Resolved),
        ] {
            let mut want: Vec<&Escalation> = all
                .iter()
                .filter(|e| status.is_none_or(|s| e.status == s))
                .collect();
            want.sort_by(|a, b| (b.listed_at, &b.id).cmp(&(a.listed_at, &a.id)));
            for limit in [1, 3, 8, 100] {
                let want: Vec<String> = want.iter().take(limit).map(|e| e.id.clone()).collect();
                let got: Vec<String> = store
                    .list_escalations(status, limit)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|e| e.id)
                    .collect();
                assert_eq!(got, want, "{when}: newest {limit} of {status:?}");
            }
        }
    }
    check(&store, &all, "before any recount").await;
    while store.recount().await.unwrap() > 0 {}
    check(&store, &all, "counted").await;
    all[0].status = EscalationStatus::Claimed;
    all[0].claimed_by = Some("ana".into());
    all[0].version = 2;
    all[7].status = EscalationStatus::Resolved;
    all[7].version = 2;
    store
        .put_escalations(vec![all[0].clone(), all[7].clone()])
        .await
        .unwrap();
    check(&store, &all, "changed, not recounted").await;
    while store.recount().await.unwrap() > 0 {}
    check(&store, &all, "recounted").await;
    // A new escalation (version 1) in the hour of one at version 2: escalation versions are
    // per escalation, so only the server's clock says the hour was written since.
    let newcomer = escalation("e-new", EscalationStatus::Open, at(1), 1);
    store.put_escalations(vec![newcomer.clone()]).await.unwrap();
    all.push(newcomer);
    check(&store, &all, "a newcomer, not recounted").await;
    while store.recount().await.unwrap() > 0 {}
    check(&store, &all, "the newcomer recounted").await;
    drop(store);
    ch.finish().await;
}

/// The report on ClickHouse comes from counts per hour of listing places plus the rows those
/// cannot answer for (the hour of `since`, hours written since they were counted, intents listed
/// before `since` and active after it): the same report as SQLite's for every `since`, before
/// a recount, after it, after rewrites the counts have not seen (late activity in a later hour,
/// a state change, a finding, a delete), and after those are counted; and, once counted, read
/// from the counts. The intents listing's `since` is answered the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_report_comes_from_recounted_hours() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    let sq = Sqlite::new().await.expect("sqlite");
    let (a, b) = (sq.open().await, ch.open().await);
    let states = [
        IntentState::Completed,
        IntentState::Unknown,
        IntentState::Pending,
        IntentState::FailedBeforeExecution,
    ];
    let decisions = [Decision::None, Decision::Escalate, Decision::Wait];
    // Over six hours, listed every 7 minutes; some active minutes later, some hours later.
    let mut all: Vec<Verdict> = (0..50)
        .map(|i| {
            let tool = ["issue_refund", "send_email"][i % 2];
            let tool = if i % 9 == 0 { None } else { Some(tool) };
            let listed = at(i as i64 * 420);
            let later = [0, 300, 4_000, 15_000][i % 4];
            let mut v = verdict(
                &format!("r-{i:02}"),
                tool,
                states[i % 4],
                listed + Dur::secs(later),
            );
            v.listed_at = listed;
            v.first_seen = listed;
            v.decision = decisions[i % 3];
            if i % 5 == 0 {
                v = with_findings(v, &[FindingKind::DuplicateEffect, FindingKind::NewKeyRetry]);
            }
            if i % 6 == 0 {
                v.findings.push(Finding::new(
                    FindingKind::DuplicateEffect,
                    at(2_000),
                    "again",
                    "detail",
                ));
            }
            v
        })
        .collect();
    let escalations: Vec<Escalation> = (0..20)
        .map(|i| {
            let status = [EscalationStatus::Open, EscalationStatus::Resolved][i % 2];
            let mut e = escalation(&format!("re-{i:02}"), status, at(i as i64 * 1_000), 1);
            // Its findings moved it (opened_at follows them); the report keeps its place.
            e.opened_at = at(i as i64 * 1_000 + 5_000);
            e
        })
        .collect();
    a.put_verdicts(all.clone()).await.unwrap();
    b.put_verdicts(all.clone()).await.unwrap();
    a.put_escalations(escalations.clone()).await.unwrap();
    b.put_escalations(escalations.clone()).await.unwrap();

    // Every hour boundary, points inside hours, each intent's own last event (and 1 ns after).
    let mut since: Vec<Option<Timestamp>> = vec![None, Some(Timestamp(0))];
    for s in (-4_000..45_000).step_by(1_700) {
        since.push(Some(at(s)));
    }
    for v in &all {
        since.push(Some(v.last_event));
        since.push(Some(v.last_event + Dur(1)));
    }
    // The report, and (for every fourth) the intents listing with the same `since` (walked
    // whole, its total checked against the walk).
    async fn check(a: &SqliteStore, b: &ClickHouseStore, since: &[Option<Timestamp>], when: &str) {
        let ids = |docs: Vec<VerdictDoc>| docs.into_iter().map(|d| d.intent_id).collect::<Vec<_>>();
        for (i, s) in since.iter().enumerate() {
            let want = a.report(*s, at(99_999)).await.unwrap();
            let got = b.report(*s, at(99_999)).await.unwrap();
            assert_eq!(got, want, "{when}: since {s:?}");
            if i % 4 != 0 {
                continue;
            }
            let f = VerdictFilter {
                since: *s,
                limit: 9,
                ..Default::default()
            };
            assert_eq!(
                ids(every_page(b, f.clone()).await),
                ids(every_page(a, f).await),
                "{when}: intents since {s:?}"
            );
        }
    }
    check(&a, &b, &since, "before any recount").await;
    while b.recount().await.unwrap() > 0 {}
    check(&a, &b, &since, "counted").await;

    // Late activity hours later, a state change, a new finding, a delete: not yet counted.
    all[3].last_event = all[3].last_event + Dur::secs(30_000);
    all[10].state = IntentState::Completed;
    all[10].decision = Decision::Reconcile;
    all[21] = with_findings(all[21].clone(), &[FindingKind::StuckPending]);
    let changed = vec![all[3].clone(), all[10].clone(), all[21].clone()];
    a.put_verdicts(changed.clone()).await.unwrap();
    b.put_verdicts(changed).await.unwrap();
    let gone = all.remove(30).intent_id;
    a.delete_verdicts(vec![gone.clone()]).await.unwrap();
    b.delete_verdicts(vec![gone]).await.unwrap();
    check(&a, &b, &since, "rewritten, not recounted").await;
    while b.recount().await.unwrap() > 0 {}
    check(&a, &b, &since, "recounted").await;

    // The counts are what the report reads: a count changed behind reckon's back shows in
    // every report whose `since` lies before its hour, and not in one after it.
    let hour = (at(10_000).0 / 3_600_000_000_000) * 3_600;
    ch.client()
        .query(
            "INSERT INTO reckon_report_counts (hour, tool, state, decision, intents, attempts, counted)
             VALUES (toDateTime(?), 'tampered', 'completed', 'none', 1000, 0, toDateTime(4000000000))",
        )
        .bind(hour)
        .execute()
        .await
        .unwrap();
    let before = b.report(None, at(99_999)).await.unwrap();
    assert_eq!(before.by_tool["tampered"].intents, 1_000);
    assert_eq!(
        before.intents,
        a.report(None, at(99_999)).await.unwrap().intents + 1_000
    );
    let after = b.report(Some(at(15_000)), at(99_999)).await.unwrap();
    assert!(!after.by_tool.contains_key("tampered"), "{after:?}");
    drop(b);
    ch.finish().await;
}

/// v11 lists what a v10 reckon stored: verdicts at their first_seen (two versions of one, so
/// the current version's counts), escalations at their opened time, and writes after the
/// upgrade keep those places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_listings() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 10).await.expect("v10 schema");
    let client = ch.client();
    for (id, first_seen, version) in [("a", 30, 1), ("b", 20, 2), ("a", 10, 3)] {
        let mut v = verdict(id, Some("issue_refund"), IntentState::Unknown, at(40));
        v.first_seen = at(first_seen);
        client
            .query(
                "INSERT INTO reckon_verdicts (intent_id, tool, state, decision, first_seen, first_seen_ns,
                     last_event_ns, doc, deleted, version)
                 VALUES (?, 'issue_refund', 'unknown', 'none', toDateTime(?), ?, ?, ?, 0, ?)",
            )
            .bind(id)
            .bind(v.first_seen.0 / 1_000_000_000)
            .bind(v.first_seen.0 as u64)
            .bind(v.last_event.0 as u64)
            .bind(serde_json::to_string(&VerdictDoc::from_verdict(&v)).unwrap())
            .bind(version)
            .execute()
            .await
            .expect("a verdict a v10 reckon wrote");
    }
    let e = escalation("e-1", EscalationStatus::Open, at(7), 1);
    client
        .query(
            "INSERT INTO reckon_escalations (id, intent_id, status, severity, opened_at, opened_ns, version)
             VALUES ('e-1', ?, 'open', 'critical', toDateTime(?), ?, 1)",
        )
        .bind(e.intent_id.as_str())
        .bind(e.opened_at.0 / 1_000_000_000)
        .bind(e.opened_at.0 as u64)
        .execute()
        .await
        .expect("an escalation a v10 reckon wrote");
    let store = ch.open().await;
    let ids = |p: Page<VerdictDoc>| p.items.into_iter().map(|d| d.intent_id).collect::<Vec<_>>();
    let page = store
        .list_verdicts(&VerdictFilter::default())
        .await
        .unwrap();
    assert_eq!(page.total, 2);
    assert_eq!(
        ids(page),
        ["b", "a"],
        "b at 20, a at 10 (its current version)"
    );
    let listed: std::collections::BTreeMap<String, Timestamp> = store
        .listed_of(vec!["a".into(), "b".into()])
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(
        listed,
        [("a".to_string(), at(10)), ("b".to_string(), at(20))].into()
    );
    let escalations = store
        .page_escalations(&EscalationFilter::default())
        .await
        .unwrap();
    assert_eq!(escalations.total, 1);
    assert_eq!(escalations.items[0].listed_at, at(7));
    // Written after the upgrade, at the place the engine keeps: still one row per intent.
    let mut a = verdict("a", Some("issue_refund"), IntentState::Completed, at(50));
    a.first_seen = at(5);
    a.listed_at = at(10);
    store.put_verdicts(vec![a]).await.unwrap();
    let page = store
        .list_verdicts(&VerdictFilter::default())
        .await
        .unwrap();
    assert_eq!(
        (page.total, ids(page)),
        (2, vec!["b".to_string(), "a".to_string()])
    );
    drop(store);
    ch.finish().await;
}

/// v13 counts the report by hour of listing places: a store a v12 reckon wrote reports the
/// same after the upgrade, from its current verdicts and their current findings only (a finding
/// of a superseded version and a deleted intent count nothing), with an intent listed before
/// `since` and active after it found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_the_counted_report() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 12).await.expect("v12 schema");
    let client = ch.client();
    // (id, tool, state, listed, last event, deleted, version)
    let rows = [
        ("a", "issue_refund", "unknown", 0, 100, 0, 1),
        ("a", "issue_refund", "completed", 0, 200, 0, 2),
        ("b", "send_email", "completed", 0, 7_200, 0, 1),
        ("c", "issue_refund", "pending", 50, 60, 0, 1),
        ("c", "issue_refund", "unknown", 50, 0, 1, 2),
    ];
    for (id, tool, state, listed, last, deleted, version) in rows {
        client
            .query(
                "INSERT INTO reckon_verdicts (intent_id, tool, state, decision, first_seen_ns,
                     last_event_ns, attempts, attempts_unknown, doc, deleted, version, listed_ns)
                 VALUES (?, ?, ?, 'none', ?, ?, 1, 1, '', ?, ?, ?)",
            )
            .bind(id)
            .bind(tool)
            .bind(state)
            .bind(at(listed).0 as u64)
            .bind(at(last).0 as u64)
            .bind(deleted)
            .bind(version)
            .bind(at(listed).0 as u64)
            .execute()
            .await
            .expect("a verdict a v12 reckon wrote");
    }
    for (id, kind, severity, version) in [
        ("a", "duplicate_effect", "critical", 1),
        ("a", "new_key_retry", "high", 2),
        ("c", "stuck_pending", "medium", 1),
    ] {
        client
            .query(
                "INSERT INTO reckon_findings (intent_id, kind, severity, subject, tool, verdict_version)
                 VALUES (?, ?, ?, 's', 'issue_refund', ?)",
            )
            .bind(id)
            .bind(kind)
            .bind(severity)
            .bind(version)
            .execute()
            .await
            .expect("a finding a v12 reckon wrote");
    }
    let store = ch.open().await;
    let all = store.report(None, at(9_999)).await.unwrap();
    assert_eq!(
        (all.intents, all.attempts, all.findings),
        (2, 2, 1),
        "{all:?}"
    );
    assert_eq!(all.by_state["completed"], 2);
    assert_eq!(all.by_finding["new_key_retry"], 1);
    assert_eq!(all.by_finding["duplicate_effect"], 0);
    assert_eq!(all.by_tool["issue_refund"].findings, 1);
    let late = store.report(Some(at(5_000)), at(9_999)).await.unwrap();
    assert_eq!(
        late.intents, 1,
        "b, listed at 0 and active at 7,200: {late:?}"
    );
    assert_eq!(late.by_tool["send_email"].intents, 1);
    // Counted, the same.
    while store.recount().await.unwrap() > 0 {}
    assert_eq!(store.report(None, at(9_999)).await.unwrap(), all);
    assert_eq!(
        store.report(Some(at(5_000)), at(9_999)).await.unwrap(),
        late
    );
    drop(store);
    ch.finish().await;
}

/// v14 gives each escalation its intent's tool: the escalations a v13 reckon wrote (one claimed
/// after it opened: two versions; one of an orphan record, whose intent has no tool; one whose
/// verdict was deleted) carry their verdict's tool after the upgrade, in both tables, and the
/// listing filters by it; a claim after the upgrade keeps it.
#[tokio::test]
async fn clickhouse_upgrades_to_escalations_with_their_tool() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 13).await.expect("v13 schema");
    let client = ch.client();
    // (intent, tool, deleted, version)
    for (id, tool, deleted, version) in [
        ("a", Some("issue_refund"), 0u8, 1u64),
        ("b", Some("send_email"), 0, 1),
        ("orphan:re_9", None, 0, 1),
        ("gone", Some("issue_refund"), 0, 1),
        ("gone", Some("issue_refund"), 1, 2),
    ] {
        client
            .query(
                "INSERT INTO reckon_verdicts (intent_id, tool, state, decision, first_seen_ns,
                     last_event_ns, attempts, doc, deleted, version, listed_ns)
                 VALUES (?, ?, 'unknown', 'escalate', ?, ?, 1, '', ?, ?, ?)",
            )
            .bind(id)
            .bind(tool)
            .bind(at(0).0 as u64)
            .bind(at(0).0 as u64)
            .bind(deleted)
            .bind(version)
            .bind(at(0).0 as u64)
            .execute()
            .await
            .expect("a verdict a v13 reckon wrote");
    }
    // (id, intent, status, claimed by, version)
    for (id, intent, status, claimed_by, version) in [
        ("esc_a_1", "a", "open", None, 1u64),
        ("esc_a_1", "a", "claimed", Some("ana"), 2),
        ("esc_b_1", "b", "open", None, 1),
        ("esc_o_1", "orphan:re_9", "open", None, 1),
        ("esc_g_1", "gone", "resolved", None, 3),
    ] {
        for table in ["reckon_escalations", "reckon_escalation_list"] {
            client
                .query(&format!(
                    "INSERT INTO {table} (id, intent_id, status, severity, opened_at, opened_ns,
                         claimed_by, version, listed_at, listed_ns)
                     VALUES (?, ?, ?, 'high', ?, ?, ?, ?, ?, ?)"
                ))
                .bind(id)
                .bind(intent)
                .bind(status)
                .bind(at(10).0 as u64 / 1_000_000_000)
                .bind(at(10).0 as u64)
                .bind(claimed_by)
                .bind(version)
                .bind(at(10).0 as u64 / 1_000_000_000)
                .bind(at(10).0 as u64)
                .execute()
                .await
                .expect("an escalation a v13 reckon wrote");
        }
    }
    let store = ch.open().await;
    let tools = |es: Vec<Escalation>| {
        let mut t: Vec<(String, String, Option<String>, u64)> = es
            .into_iter()
            .map(|e| (e.id, e.status.as_str().to_string(), e.tool, e.version))
            .collect();
        t.sort();
        t
    };
    let expected = vec![
        (
            "esc_a_1".to_string(),
            "claimed".to_string(),
            Some("issue_refund".to_string()),
            2,
        ),
        (
            "esc_b_1".into(),
            "open".into(),
            Some("send_email".into()),
            1,
        ),
        ("esc_g_1".into(), "resolved".into(), None, 3),
        ("esc_o_1".into(), "open".into(), None, 1),
    ];
    let mut listed = Vec::new();
    for status in EscalationStatus::ALL {
        listed.extend(store.list_escalations(Some(status), 100).await.unwrap());
    }
    assert_eq!(tools(listed), expected, "the listing");
    let mut each = Vec::new();
    for id in ["esc_a_1", "esc_b_1", "esc_g_1", "esc_o_1"] {
        each.push(store.get_escalation(id).await.unwrap().expect(id));
    }
    assert_eq!(tools(each), expected, "by id");
    let by_tool = |tool: &str| EscalationFilter {
        tool: Some(tool.into()),
        ..EscalationFilter::default()
    };
    let page = store
        .page_escalations(&by_tool("issue_refund"))
        .await
        .unwrap();
    assert_eq!(
        (
            page.total,
            page.items.iter().map(|e| e.id.as_str()).collect::<Vec<_>>()
        ),
        (1, vec!["esc_a_1"])
    );
    let page = store
        .page_escalations(&by_tool("send_email"))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].id, "esc_b_1");
    // A claim after the upgrade writes the tool it read.
    let current = store.get_escalation("esc_b_1").await.unwrap().unwrap();
    let mut claimed = current.clone();
    claimed.status = EscalationStatus::Claimed;
    claimed.claimed_by = Some("bo".into());
    claimed.claimed_at = Some(at(20));
    claimed.version += 1;
    store.swap_escalation(current, claimed).await.unwrap();
    let after = store.get_escalation("esc_b_1").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.tool.as_deref()),
        (EscalationStatus::Claimed, Some("send_email"))
    );
    drop(store);
    ch.finish().await;
}

/// v15 adds what time to settle, the contracts panel and the findings' questions read to the
/// tally: the current tally rows a v14 reckon wrote are written again at their versions with
/// what their verdict documents (in `reckon_intent_list`, the same key) say: contract,
/// escalation, first attempt, and the settling instant where the document has it (a rejected
/// intent's last attempt's end; a completed or failed one's latest event, an upper bound).
/// The fill runs one day of listing places at a time (here three days). Older versions and
/// tombstones stay as they were; a verdict written after it carries the audit's `settled_at`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_the_tally_of_settling() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 14).await.expect("v14 schema");
    let client = ch.client();
    let exec = |sql: String| {
        let client = client.clone();
        async move { client.query(&sql).execute().await.expect(&sql) }
    };
    const DAY: i64 = 86_400;
    // (intent, state, deleted, version, listed, latest event)
    let written = [
        ("done", IntentState::Unknown, 0u8, 1u64, 0, 40),
        ("done", IntentState::Completed, 0, 2, 0, 70),
        (
            "failed",
            IntentState::FailedAfterExecution,
            0,
            1,
            DAY,
            DAY + 30,
        ),
        (
            "rejected",
            IntentState::FailedBeforeExecution,
            0,
            1,
            2 * DAY,
            2 * DAY + 6,
        ),
        ("open", IntentState::Unknown, 0, 1, 2 * DAY, 2 * DAY + 32),
        ("gone", IntentState::Completed, 0, 1, DAY, DAY + 9),
        ("gone", IntentState::Unknown, 1, 2, DAY, DAY + 9),
    ];
    let mut current = BTreeMap::new();
    for (id, state, deleted, version, listed, last) in written {
        let mut v = verdict(id, Some("issue_refund"), state, at(last));
        v.listed_at = at(listed);
        v.first_seen = at(listed);
        for (i, a) in v.attempts.iter_mut().enumerate() {
            a.start = at(listed + 10 * i as i64);
            a.end = at(listed + 10 * i as i64 + 3);
        }
        if id == "done" {
            v.escalation_id = Some("esc_done_1".into());
        }
        if id == "open" {
            v.contract = None;
        }
        // A v14 document has no settled_at.
        v.settled_at = None;
        let doc = serde_json::to_string(&VerdictDoc::from_verdict(&v)).unwrap();
        let (l, e) = (v.listed_at.0 as u64, v.last_event.0 as u64);
        let state = state.as_str();
        for sql in [
            format!(
                "INSERT INTO reckon_intent_tally (listed_at, listed_ns, intent_id, tool, state, decision,
                     last_event_ns, attempts, deleted, version)
                 VALUES ({s}, {l}, '{id}', 'issue_refund', '{state}', 'none', {e}, 2, {deleted}, {version})",
                s = l / 1_000_000_000,
            ),
            format!(
                "INSERT INTO reckon_intent_list (listed_at, listed_ns, intent_id, tool, state, last_event_ns, doc, deleted, version)
                 VALUES ({s}, {l}, '{id}', 'issue_refund', '{state}', {e}, '{doc}', {deleted}, {version})",
                s = l / 1_000_000_000,
            ),
        ] {
            exec(sql).await;
        }
        current.insert(id, v);
    }
    reckon::store::clickhouse::migrate_sliced(&ch.config, 15, DAY as u64 * 1_000_000_000)
        .await
        .expect("v15, its fill a day at a time");
    let store = ch.open().await;
    #[derive(Debug, PartialEq)]
    struct Tally {
        intent_id: String,
        contract: Option<String>,
        first_attempt_ns: u64,
        settled_ns: u64,
        escalation_id: Option<String>,
        deleted: u8,
        version: u64,
    }
    let tally = || async {
        client
            .query(
                "SELECT intent_id, contract, first_attempt_ns, settled_ns, escalation_id, deleted, version
                 FROM reckon_intent_tally FINAL ORDER BY intent_id",
            )
            .fetch_all::<(String, Option<String>, u64, u64, Option<String>, u8, u64)>()
            .await
            .expect("the tally")
            .into_iter()
            .map(
                |(intent_id, contract, first_attempt_ns, settled_ns, escalation_id, deleted, version)| Tally {
                    intent_id,
                    contract,
                    first_attempt_ns,
                    settled_ns,
                    escalation_id,
                    deleted,
                    version,
                },
            )
            .collect::<Vec<_>>()
    };
    let row = |id: &str, settled: u64, version: u64| {
        let v = &current[id];
        Tally {
            intent_id: id.into(),
            contract: v.contract.clone(),
            first_attempt_ns: v.attempts.iter().map(|a| a.start.0 as u64).min().unwrap(),
            settled_ns: settled,
            escalation_id: v.escalation_id.clone(),
            deleted: 0,
            version,
        }
    };
    let last = |id: &str| current[id].last_event.0 as u64;
    let last_end = |id: &str| {
        current[id]
            .attempts
            .iter()
            .map(|a| a.end.0 as u64)
            .max()
            .unwrap()
    };
    let gone = Tally {
        intent_id: "gone".into(),
        contract: None,
        first_attempt_ns: 0,
        settled_ns: 0,
        escalation_id: None,
        deleted: 1,
        version: 2,
    };
    assert_eq!(
        tally().await,
        vec![
            row("done", last("done"), 2),
            row("failed", last("failed"), 1),
            gone,
            row("open", 0, 1),
            row("rejected", last_end("rejected"), 1),
        ]
    );
    assert_eq!(
        current["open"].contract, None,
        "a verdict with no contract keeps none"
    );
    // A verdict written after the upgrade carries the audit's instant.
    let mut v = verdict(
        "later",
        Some("issue_refund"),
        IntentState::Completed,
        at(60),
    );
    v.settled_at = Some(at(45));
    store.put_verdicts(vec![v.clone()]).await.unwrap();
    let later = tally().await.into_iter().find(|t| t.intent_id == "later");
    assert_eq!(
        later.map(|t| (t.contract, t.first_attempt_ns, t.settled_ns)),
        Some((
            v.contract.clone(),
            v.attempts.iter().map(|a| a.start.0 as u64).min().unwrap(),
            at(45).0 as u64
        ))
    );
    drop(store);
    ch.finish().await;
}

/// v16 gives each finding row its intent's listing place (even when a first try of the step
/// stopped after adding the column): after the upgrade the findings a v15 reckon wrote carry
/// their verdict's, so reading the current findings through the tally at
/// those keys (what the dashboards, queries and alert rule do) gives what
/// `reckon_current_findings` gives: superseded and deleted intents' findings left out. A
/// finding written after it carries its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_findings_with_their_place() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 15).await.expect("v15 schema");
    let client = ch.client();
    let exec = |sql: String| {
        let client = client.clone();
        async move { client.query(&sql).execute().await.expect(&sql) }
    };
    let listed = |id: &str| at(if id == "b" { 7_200 } else { 60 }).0 as u64;
    // (intent, deleted, version)
    for (id, deleted, version) in [
        ("a", 0u8, 1u64),
        ("a", 0, 2),
        ("b", 0, 1),
        ("gone", 0, 1),
        ("gone", 1, 2),
    ] {
        let l = listed(id);
        for sql in [
            format!(
                "INSERT INTO reckon_verdicts (intent_id, tool, state, decision, first_seen_ns, last_event_ns, doc, deleted, version, listed_ns)
                 VALUES ('{id}', 'issue_refund', 'unknown', 'none', {l}, {l}, '', {deleted}, {version}, {l})"
            ),
            format!(
                "INSERT INTO reckon_intent_tally (listed_at, listed_ns, intent_id, tool, state, decision, last_event_ns, deleted, version)
                 VALUES ({s}, {l}, '{id}', 'issue_refund', 'unknown', 'none', {l}, {deleted}, {version})",
                s = l / 1_000_000_000
            ),
        ] {
            exec(sql).await;
        }
    }
    // (intent, kind, subject, version): a's new_key_retry was dropped by its second verdict.
    for (id, kind, subject, version) in [
        ("a", "duplicate_effect", "re_1", 1),
        ("a", "new_key_retry", "k2", 1),
        ("a", "duplicate_effect", "re_1", 2),
        ("b", "expired_key_retry", "span-9", 1),
        ("gone", "duplicate_effect", "re_7", 1),
    ] {
        exec(format!(
            "INSERT INTO reckon_findings (intent_id, kind, severity, at, at_ns, subject, tool, verdict_version)
             VALUES ('{id}', '{kind}', 'high', {s}, {n}, '{subject}', 'issue_refund', {version})",
            s = at(100).0 as u64 / 1_000_000_000,
            n = at(100).0 as u64,
        ))
        .await;
    }
    // A v16 step interrupted after its ALTER: the upgrade runs it again over the column.
    exec(schema::V16_FINDING_PLACE.to_string()).await;
    let store = ch.open().await;
    let rows = |sql: &str| {
        let client = client.clone();
        let sql = sql.to_string();
        async move {
            let mut r = client
                .query(&sql)
                .fetch_all::<(String, String, String)>()
                .await
                .expect(&sql);
            r.sort();
            r
        }
    };
    let places = client
        .query(
            "SELECT intent_id, listed_ns FROM reckon_findings FINAL ORDER BY intent_id, listed_ns",
        )
        .fetch_all::<(String, u64)>()
        .await
        .unwrap();
    assert!(
        places.iter().all(|(id, l)| *l == listed(id)),
        "every finding's latest row has its verdict's place: {places:?}"
    );
    let through_the_tally = "
        SELECT intent_id, toString(kind), subject
        FROM reckon_findings
        WHERE at >= toDateTime(0)
          AND (listed_ns, intent_id, verdict_version) IN
              (SELECT listed_ns, intent_id, version
               FROM (SELECT listed_ns, intent_id, version, deleted FROM reckon_intent_tally FINAL
                     WHERE (listed_ns, intent_id) IN (SELECT listed_ns, intent_id FROM reckon_findings WHERE at >= toDateTime(0)))
               WHERE deleted = 0)
        LIMIT 1 BY intent_id, kind, subject";
    let expected = vec![
        (
            "a".to_string(),
            "duplicate_effect".to_string(),
            "re_1".to_string(),
        ),
        ("b".into(), "expired_key_retry".into(), "span-9".into()),
    ];
    assert_eq!(rows(through_the_tally).await, expected);
    assert_eq!(
        rows("SELECT intent_id, toString(kind), subject FROM reckon_current_findings").await,
        expected
    );
    // Written after the upgrade: with the verdict's place.
    let v = with_findings(
        verdict("later", Some("issue_refund"), IntentState::Unknown, at(60)),
        &[FindingKind::DuplicateEffect],
    );
    store.put_verdicts(vec![v.clone()]).await.unwrap();
    let later = client
        .query("SELECT listed_ns FROM reckon_findings WHERE intent_id = 'later'")
        .fetch_all::<u64>()
        .await
        .unwrap();
    assert_eq!(later, vec![v.listed_at.0 as u64]);
    drop(store);
    ch.finish().await;
}

/// v17 finds records by intent, key and object through `reckon_record_lookup`: the records a
/// v16 reckon wrote are found after the upgrade (the lookup filled from them), and one written
/// after it (the view fills it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_records_found_by_what_links_them() {
    use reckon::store::EventQuery;
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 16).await.expect("v16 schema");
    let client = ch.client();
    // (object, intent, key, status, at)
    for (object, intent, key, status, secs) in [
        ("re_1", Some("i-1"), None, "pending", 1),
        ("re_1", Some("i-1"), None, "succeeded", 2),
        ("re_2", None, Some("k-2"), "succeeded", 3),
        ("re_3", None, None, "failed", 4),
    ] {
        client
            .query(
                "INSERT INTO reckon_records (source, object_id, intent_id, idempotency_key, status, observed_at, observed_ns)
                 VALUES ('stripe', ?, ?, ?, ?, ?, ?)",
            )
            .bind(object)
            .bind(intent)
            .bind(key)
            .bind(status)
            .bind(at(secs).0 as u64 / 1_000_000_000)
            .bind(at(secs).0 as u64)
            .execute()
            .await
            .expect("a record a v16 reckon wrote");
    }
    let store = ch.open().await;
    let found = |q: EventQuery| {
        let store = &store;
        async move {
            let mut got: Vec<(String, String)> = store
                .events_touching(q)
                .await
                .unwrap()
                .into_iter()
                .filter_map(|e| match e {
                    Event::Record(r) => Some((r.object_id, r.status)),
                    _ => None,
                })
                .collect();
            got.sort();
            got
        }
    };
    let pair = |o: &str, s: &str| (o.to_string(), s.to_string());
    assert_eq!(
        found(EventQuery {
            intents: vec!["i-1".into()],
            ..EventQuery::default()
        })
        .await,
        vec![pair("re_1", "pending"), pair("re_1", "succeeded")]
    );
    assert_eq!(
        found(EventQuery {
            keys: vec!["k-2".into()],
            ..EventQuery::default()
        })
        .await,
        vec![pair("re_2", "succeeded")]
    );
    assert_eq!(
        found(EventQuery {
            objects: vec!["re_3".into(), "re_9".into()],
            ..EventQuery::default()
        })
        .await,
        vec![pair("re_3", "failed")]
    );
    // Written after the upgrade: found by its object through the view's rows.
    store
        .append(vec![record("re_3", None, None, "succeeded", 5)])
        .await
        .unwrap();
    assert_eq!(
        found(EventQuery {
            objects: vec!["re_3".into()],
            ..EventQuery::default()
        })
        .await,
        vec![pair("re_3", "failed"), pair("re_3", "succeeded")]
    );
    drop(store);
    ch.finish().await;
}

/// v18 reads the findings of a kind and a window from `reckon_finding_times` (sorted by kind and
/// time): the findings a v17 reckon wrote are there after the upgrade (filled from them), and one
/// written after it (the view fills it), each row as `reckon_findings` holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_findings_by_kind_and_time() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 17).await.expect("v17 schema");
    let client = ch.client();
    // (intent, kind, subject, seconds, version)
    for (id, kind, subject, secs, version) in [
        ("a", "duplicate_effect", "re_1", 100, 1u64),
        ("a", "duplicate_effect", "re_1", 100, 2),
        ("b", "expired_key_retry", "span-9", 50, 1),
        ("c", "duplicate_effect", "re_7", 40 * 86_400, 1),
    ] {
        client
            .query(&format!(
                "INSERT INTO reckon_findings (intent_id, kind, severity, at, at_ns, subject, detail, tool, verdict_version, listed_ns)
                 VALUES ('{id}', '{kind}', 'critical', {s}, {n}, '{subject}', 'why', 'issue_refund', {version}, {l})",
                s = at(secs).0 as u64 / 1_000_000_000,
                n = at(secs).0 as u64,
                l = at(1).0 as u64,
            ))
            .execute()
            .await
            .expect("a finding a v17 reckon wrote");
    }
    let store = ch.open().await;
    let by_time = |kind: &'static str| {
        let client = client.clone();
        async move {
            client
                .query(
                    "SELECT intent_id, subject, verdict_version FROM reckon_finding_times
                     WHERE kind = ? AND at >= toDateTime(?) ORDER BY at, intent_id, verdict_version",
                )
                .bind(kind)
                .bind(at(0).0 as u64 / 1_000_000_000)
                .fetch_all::<(String, String, u64)>()
                .await
                .expect("read the findings by kind and time")
        }
    };
    let row =
        |id: &str, subject: &str, version: u64| (id.to_string(), subject.to_string(), version);
    assert_eq!(
        by_time("duplicate_effect").await,
        vec![
            row("a", "re_1", 1),
            row("a", "re_1", 2),
            row("c", "re_7", 1)
        ]
    );
    assert_eq!(
        by_time("expired_key_retry").await,
        vec![row("b", "span-9", 1)]
    );
    // Written after the upgrade: the view copies it, with its place and version.
    let v = with_findings(
        verdict("later", Some("issue_refund"), IntentState::Unknown, at(60)),
        &[FindingKind::DuplicateEffect],
    );
    store.put_verdicts(vec![v.clone()]).await.unwrap();
    let copied = client
        .query(
            "SELECT count() FROM reckon_finding_times AS t
             WHERE intent_id = 'later' AND kind = 'duplicate_effect' AND listed_ns = ?
               AND (intent_id, subject, verdict_version, at_ns) IN
                   (SELECT intent_id, subject, verdict_version, at_ns FROM reckon_findings WHERE intent_id = 'later')",
        )
        .bind(v.listed_at.0 as u64)
        .fetch_one::<u64>()
        .await
        .unwrap();
    assert_eq!(
        copied, 1,
        "the finding written after the upgrade is in reckon_finding_times"
    );
    drop(store);
    ch.finish().await;
}

/// v5 adds each verdict's contract version: a verdict a v4 reckon wrote reads with an empty
/// version, a verdict written after the upgrade has it in the document, the column and the
/// recreated `reckon_current_verdicts` view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_upgrades_to_contract_versions() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    migrate_to(&ch.config, 4).await.expect("v4 schema");
    let client = ch.client();
    let mut old = verdict("before", Some("issue_refund"), IntentState::Unknown, at(5));
    old.contract_version = String::new();
    // A v4 document: no contract_version member at all; the columns not named take defaults.
    let mut doc = serde_json::to_value(VerdictDoc::from_verdict(&old)).unwrap();
    doc.as_object_mut().unwrap().remove("contract_version");
    client
        .query(
            "INSERT INTO reckon_verdicts (intent_id, tool, contract, state, decision, doc, deleted, version)
             VALUES ('before', 'issue_refund', 'payments.refund', 'unknown', 'none', ?, 0, 1)",
        )
        .bind(doc.to_string())
        .execute()
        .await
        .expect("raw v4 insert");
    let store = ch.open().await;
    assert_eq!(
        store.get_verdict("before").await.unwrap(),
        // Listed where its first_seen_ns column (not written: 0) puts it (v11).
        Some(VerdictDoc::from_verdict(&old).listed(Timestamp(0)))
    );
    let new = verdict("after", Some("issue_refund"), IntentState::Unknown, at(7));
    store.put_verdicts(vec![new.clone()]).await.unwrap();
    assert_eq!(
        store
            .get_verdict("after")
            .await
            .unwrap()
            .map(|d| d.contract_version),
        Some(new.contract_version.clone())
    );
    for table in ["reckon_verdicts FINAL", "reckon_current_verdicts"] {
        let rows = client
            .query(&format!(
                "SELECT intent_id, contract_version FROM {table} ORDER BY intent_id"
            ))
            .fetch_all::<(String, String)>()
            .await
            .unwrap_or_else(|e| panic!("{table}: {e}"));
        assert_eq!(
            rows,
            [
                ("after".to_string(), new.contract_version.clone()),
                ("before".to_string(), String::new())
            ],
            "{table}"
        );
    }
    drop(store);
    ch.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_bad_data_is_not_retried() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    let store = ch.open().await;
    let client = ch.client();
    let policy = RetryPolicy {
        attempts: 5,
        first_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(20),
    };
    // A value of the wrong type, as a bad row from a buggy writer would arrive.
    let mut calls = 0;
    let err = policy
        .run(
            || "raw insert".into(),
            || {
                calls += 1;
                client
                    .query(
                        "INSERT INTO reckon_escalations (id, version) VALUES ('x', 'not a number')",
                    )
                    .execute()
            },
        )
        .await
        .expect_err("type mismatch");
    assert_eq!(calls, 1, "bad data is tried once: {err}");
    assert_eq!(err.class, ErrorClass::BadData, "{err}");
    assert!(err.code.is_some(), "{err}");
    // An unknown table is refused, not retried either.
    let mut calls = 0;
    let err = policy
        .run(
            || "raw select".into(),
            || {
                calls += 1;
                client.query("SELECT 1 FROM reckon_no_such_table").execute()
            },
        )
        .await
        .expect_err("unknown table");
    assert_eq!(
        (calls, err.class, err.code),
        (1, ErrorClass::Permanent, Some(60))
    );
    drop(store);
    ch.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_unreachable_is_retried_then_fails() {
    // Runs whatever the environment: it needs no server, only a port nobody listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut config = clickhouse_config(&format!("clickhouse://127.0.0.1:{port}/reckon_x"));
    config.retry = RetryPolicy {
        attempts: 3,
        first_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(100),
    };
    match ClickHouseStore::open(config).await {
        Err(StoreError::ClickHouse(e)) => {
            assert_eq!((e.class, e.attempts), (ErrorClass::Transient, 3), "{e}");
        }
        other => panic!("expected a ClickHouse error, got {other:?}"),
    }
}

/// `--store clickhouse://...` as the app opens it: the database is created and migrated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_opens_the_clickhouse_store() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    let config = reckon::config::Config {
        store: reckon::config::StoreConfig::ClickHouse {
            url: ch.config.url.clone(),
            user: ch.config.user.clone(),
            password: ch.config.password.clone(),
            database: ch.config.database.clone(),
        },
        ..Default::default()
    };
    let store = reckon::app::open_store(&config).await.expect("open_store");
    assert!(matches!(store, reckon::store::AnyStore::ClickHouse(_)));
    store
        .append(vec![ev(refund(1, "intent-app", 0))])
        .await
        .unwrap();
    assert_eq!(store.load_events().await.unwrap().len(), 1);
    drop(store);
    ch.finish().await;
}

/// The one place ClickHouse's identity check is weaker than SQLite's (ARCHITECTURE.md,
/// invariant 5): it finds a span by its table's sorting key, `(intent_id, trace_id, span_id)`,
/// so a re-send that changed the span's intent id is written again. Loading still returns only
/// the first copy, so the engine's view is SQLite's. The same holds for any identity stored
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_identities_stored_twice_keep_their_first_copy() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    let store = ch.open().await;
    let first = ev(refund(1, "intent-first", 0));
    let moved = ev(refund(1, "intent-moved", 0));
    assert_eq!(
        appended(&store, vec![first.clone()]).await,
        vec![Appended::New]
    );
    appended(&store, vec![moved]).await;
    assert_eq!(store.load_events().await.unwrap(), vec![first.clone()]);

    // An identity stored twice under one key (by two processes at once, or an older reckon):
    // its first copy is the one appends compare with and loads return.
    let refund = record("re_twice", None, None, "succeeded", 5);
    assert_eq!(
        appended(&store, vec![refund.clone()]).await,
        vec![Appended::New]
    );
    ch.client()
        .query(
            "INSERT INTO reckon_records SELECT source, kind, object_id, intent_id, idempotency_key,
             status, '9900', amount_unit, amount_major, currency, target, created_ns, observed_at,
             observed_ns, ingested_ns + 1000 FROM reckon_records WHERE object_id = 're_twice'",
        )
        .execute()
        .await
        .expect("a second copy, written later");
    let later = with_amount(refund.clone(), Amount::Minor(9900));
    assert_eq!(
        appended(&store, vec![refund.clone(), later]).await,
        vec![Appended::Duplicate, Appended::Conflict]
    );
    assert_eq!(
        sorted_events(store.load_events().await.unwrap()),
        sorted_events(vec![first, refund])
    );
    drop(store);
    ch.finish().await;
}

// ---------------------------------------------------------------------------------------------
// The notification outbox.

fn outbox_item(esc: &str, version: u64, target: &str, created: i64) -> OutboxItem {
    OutboxItem::new(
        target,
        esc,
        version,
        "escalation.opened",
        format!("{{\"version\":{version}}}"),
        at(created),
    )
}

/// Retention of the outbox: items enqueued before the instant go, every version of each (a
/// delivered one does not come back as pending from its earlier rows), and later ones stay.
async fn retention_expires_old_outbox_items<H: Harness>(h: &H) {
    let store = h.open().await;
    let p = Policy::default();
    let old = outbox_item("esc-old", 1, "hook", 1);
    let delivered = after_attempt(&old, Tried::Delivered, at(3), &p);
    let stale = outbox_item("esc-stale", 1, "hook", 2);
    let recent = outbox_item("esc-new", 1, "hook", 100);
    store
        .outbox_put(vec![old.clone(), stale, recent.clone()])
        .await
        .unwrap();
    store.outbox_put(vec![delivered]).await.unwrap();
    assert_eq!(
        store
            .outbox_pending("hook", at(0), 100)
            .await
            .unwrap()
            .total,
        2,
        "the stale one and the recent one are pending"
    );
    let n = store.expire_outbox(at(50)).await.unwrap();
    assert!(n >= 2, "{n}");
    once_mutated(|| async {
        let page = store.outbox_pending("hook", at(0), 100).await.unwrap();
        (page.items != [recent.clone()]).then(|| format!("still pending: {:?}", ids(&page)))
    })
    .await;
    // Nothing left to delete, once every part is rewritten: no rewrite of the table is asked.
    once_mutated(|| async {
        let n = store.expire_outbox(at(50)).await.unwrap();
        (n > 0).then(|| format!("{n} rows still to delete"))
    })
    .await;
}

/// ClickHouse deletes and updates by mutation, in the background: wait (up to 10 s) until
/// `left` says nothing is left to apply, or fail with what it last said was.
async fn once_mutated<F, Fut>(mut left: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<String>>,
{
    let mut last = None;
    for _ in 0..40 {
        last = left().await;
        if last.is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{}", last.unwrap_or_default());
}

fn ids(p: &OutboxPage) -> Vec<String> {
    p.items.iter().map(|i| i.id.clone()).collect()
}

/// Someone gets paged, item 2, at the store: pending items of a target come oldest first with
/// every field as written; an attempt's outcome replaces the item; writing the same change
/// again, or a late write of an older attempt, never brings back what was delivered or given
/// up; and it all survives a reopen.
async fn outbox_keeps_each_items_furthest_state<H: Harness>(h: &H) {
    let store = h.open().await;
    let a = outbox_item("esc-a", 1, "hook", 10);
    let b = outbox_item("esc-a", 2, "hook", 11);
    let c = outbox_item("esc-b", 1, "hook", 12);
    let other = outbox_item("esc-a", 1, "pager", 10);
    let old = outbox_item("esc-old", 1, "hook", 1);
    store
        .outbox_put(vec![
            c.clone(),
            a.clone(),
            b.clone(),
            other.clone(),
            old.clone(),
        ])
        .await
        .unwrap();
    let page = store.outbox_pending("hook", at(5), 100).await.unwrap();
    assert_eq!(page.items, vec![a.clone(), b.clone(), c.clone()]);
    assert_eq!(page.total, 3);
    assert_eq!(
        store
            .outbox_pending("hook", at(0), 100)
            .await
            .unwrap()
            .total,
        4,
        "`since` bounds the window"
    );
    assert_eq!(
        store
            .outbox_pending("pager", at(5), 100)
            .await
            .unwrap()
            .items,
        vec![other.clone()]
    );
    let first = store.outbox_pending("hook", at(5), 1).await.unwrap();
    assert_eq!((ids(&first), first.total), (vec![a.id.clone()], 3));

    // An attempt's outcome replaces the item; the same change written again does not undo it.
    let p = Policy::default();
    let failed = after_attempt(&a, Tried::Failed("HTTP 500".into()), at(20), &p);
    store.outbox_put(vec![failed.clone()]).await.unwrap();
    store.outbox_put(vec![a.clone()]).await.unwrap();
    assert_eq!(
        store
            .outbox_pending("hook", at(5), 100)
            .await
            .unwrap()
            .items[0],
        failed
    );
    // Delivered: no longer pending, whatever late writes of older states follow.
    let delivered = after_attempt(&failed, Tried::Delivered, at(21), &p);
    store.outbox_put(vec![delivered]).await.unwrap();
    let mut late = failed.clone();
    late.attempts = 7;
    store.outbox_put(vec![late, a.clone()]).await.unwrap();
    let page = store.outbox_pending("hook", at(5), 100).await.unwrap();
    assert_eq!(
        (ids(&page), page.total),
        (vec![b.id.clone(), c.id.clone()], 2)
    );
    // Given up: no longer pending either.
    let mut expired = c.clone();
    expired.state = OutboxState::Expired;
    expired.attempts = 90;
    store.outbox_put(vec![expired]).await.unwrap();
    store.outbox_put(vec![c.clone()]).await.unwrap();
    assert_eq!(
        ids(&store.outbox_pending("hook", at(5), 100).await.unwrap()),
        vec![b.id.clone()]
    );
    // Durable: another handle (a restarted process) reads the same.
    drop(store);
    let again = h.open().await;
    assert_eq!(
        again
            .outbox_pending("hook", at(5), 100)
            .await
            .unwrap()
            .items,
        vec![b]
    );
}

/// Someone gets paged, item 2: a notification is written in the same write as the change it
/// announces: with the escalations of `put_derived`, and with a person's compare-and-set only
/// when it wins.
async fn notifications_are_written_with_their_change<H: Harness>(h: &H) {
    let store = h.open().await;
    let open = escalation("esc-n", EscalationStatus::Open, at(10), 1);
    let opened = outbox_item("esc-n", 1, "hook", 10);
    store
        .put_derived(Derived {
            escalations: vec![open.clone()],
            outbox: vec![opened.clone()],
            ..Derived::default()
        })
        .await
        .unwrap();
    assert_eq!(
        store.get_escalation("esc-n").await.unwrap(),
        Some(open.clone())
    );
    assert_eq!(
        store
            .outbox_pending("hook", at(0), 100)
            .await
            .unwrap()
            .items,
        vec![opened.clone()]
    );
    let ana = claimed_by(&open, "ana", 20);
    let claimed = outbox_item("esc-n", 2, "hook", 20);
    assert_eq!(
        store
            .swap_escalation_notify(open.clone(), ana.clone(), vec![claimed.clone()])
            .await
            .unwrap(),
        Swap::Written
    );
    let bo = claimed_by(&open, "bo", 21);
    let lost = outbox_item("esc-n", 2, "other", 21);
    assert!(matches!(
        store
            .swap_escalation_notify(open.clone(), bo, vec![lost])
            .await
            .unwrap(),
        Swap::Conflict(_)
    ));
    assert_eq!(
        ids(&store.outbox_pending("hook", at(0), 100).await.unwrap()),
        vec![opened.id.clone(), claimed.id.clone()]
    );
    assert!(
        store
            .outbox_pending("other", at(0), 100)
            .await
            .unwrap()
            .items
            .is_empty(),
        "a lost compare-and-set announces nothing"
    );
}

/// Someone gets paged, items 1-2, through the engine: a duplicate refund opens an escalation, a
/// person claims and resolves it, and each change is in the outbox, with the evidence bundle, as
/// soon as it is visible: a crash before the persister wrote anything loses none, and a restart
/// enqueues none twice.
async fn engine_announces_every_escalation_change<H: Harness>(h: &H) {
    let hook = Target::new(
        "webhook",
        "http://127.0.0.1:9/hook",
        Some("s3cret"),
        Some("hook"),
    )
    .expect("target");
    let start = |store: AnyStore| {
        let notifier = Arc::new(Notifier::new(vec![hook.clone()]));
        async move {
            Engine::start_notifying(
                contracts(),
                Arc::new(store),
                Arc::new(Metrics::new()),
                EngineOptions {
                    persist_linger: Duration::from_secs(3600),
                    ..EngineOptions::default()
                },
                Some(notifier),
            )
            .await
            .expect("engine starts")
        }
    };
    let (engine, tasks) = start(h.open_any().await).await;
    let paid = ev(refund(1, "intent-n", 0)
        .key("k-n")
        .http(200)
        .object("re_n1", "succeeded")
        .told("succeeded"));
    ingest(&engine, vec![paid]).await;
    ingest(
        &engine,
        vec![record("re_n2", Some("intent-n"), None, "succeeded", 60)],
    )
    .await;
    let id = engine
        .verdict("intent-n")
        .await
        .and_then(|v| v.escalation_id.clone())
        .expect("escalated");
    engine.claim(&id, "ana", false).await.expect("claim");
    engine
        .resolve(
            &id,
            "ana",
            "reversed_second_refund",
            Some("voided re_n2"),
            false,
        )
        .await
        .expect("resolve");
    // Crash: nothing the persister held is written.
    tasks.abort().await;
    drop(engine);

    let store = h.open().await;
    let mut items = store
        .outbox_pending("hook", Timestamp(0), 100)
        .await
        .unwrap()
        .items;
    items.sort_by_key(|i| i.escalation_version);
    let events: Vec<(u64, &str)> = items
        .iter()
        .map(|i| (i.escalation_version, i.event.as_str()))
        .collect();
    assert_eq!(
        events,
        vec![
            (1, "escalation.opened"),
            (2, "escalation.updated"),
            (3, "escalation.resolved")
        ]
    );
    let statuses = ["open", "claimed", "resolved"];
    for (it, status) in items.iter().zip(statuses) {
        assert_eq!(it.id, format!("{id}:{}:hook", it.escalation_version));
        let body: serde_json::Value = serde_json::from_str(&it.body).expect("JSON body");
        assert_eq!(body["id"], it.id.as_str());
        assert_eq!(body["type"], it.event.as_str());
        let e = &body["escalation"];
        assert_eq!(e["id"], id.as_str());
        assert_eq!(e["status"], status);
        assert_eq!(e["findings"][0]["kind"], "duplicate_effect");
        assert_eq!(e["verdict"]["intent_id"], "intent-n");
        assert_eq!(e["contract"]["name"], "payments.refund");
    }
    let resolved: serde_json::Value = serde_json::from_str(&items[2].body).unwrap();
    assert_eq!(resolved["escalation"]["resolved_by"], "ana");
    assert_eq!(resolved["escalation"]["note"], "voided re_n2");

    // A restart rebuilds the same escalations and announces nothing again.
    let (engine, tasks) = start(h.open_any().await).await;
    stop(engine, tasks).await;
    let after = store
        .outbox_pending("hook", Timestamp(0), 100)
        .await
        .unwrap();
    assert_eq!(after.total, 3);
    let mut again = after.items;
    again.sort_by_key(|i| i.escalation_version);
    assert_eq!(again, items);
}

// ---------------------------------------------------------------------------------------------
// Memory and history.

fn route(route: &str, intent: &str) -> Route {
    Route {
        route: route.into(),
        intent_id: intent.into(),
    }
}

/// DESIGN.md "Memory and history", the store's part: the checkpoint keeps the furthest instant
/// written; only verdicts that are not settled are listed for start-up; events come back by when
/// they were received; routes name the settled intents they reach, and page in order.
async fn startup_reads_what_is_open<H: Harness>(h: &H) {
    let store = h.open().await;
    assert_eq!(store.checkpoint().await.unwrap(), None, "a new store");
    let done = verdict("done", Some("issue_refund"), IntentState::Completed, at(5));
    let open = Verdict {
        next_change: Some(at(60)),
        decision: Decision::RetrySameKey,
        ..verdict("open", Some("issue_refund"), IntentState::Unknown, at(6))
    };
    // Unknown for good, with nothing booked and nobody asked: out of memory, not loaded.
    let quiet = Verdict {
        decision: Decision::Reconcile,
        ..verdict("quiet", Some("issue_refund"), IntentState::Unknown, at(8))
    };
    let escalated = Verdict {
        decision: Decision::Escalate,
        ..verdict(
            "escalated",
            Some("issue_refund"),
            IntentState::Completed,
            at(7),
        )
    };
    assert!(done.is_settled() && !open.is_settled() && !escalated.is_settled());
    assert_eq!(quiet.rest(), reckon::model::Rest::Quiet);
    let fingerprints = [escalated.fingerprint(), open.fingerprint()];
    store
        .put_derived(Derived {
            verdicts: vec![
                Arc::new(done),
                Arc::new(open),
                Arc::new(escalated),
                Arc::new(quiet),
            ],
            routes: vec![route("i:done", "done"), route("k:k1", "done")],
            checkpoint: Some(at(100)),
            ..Derived::default()
        })
        .await
        .unwrap();
    store
        .put_derived(Derived {
            routes: vec![route("k:k1", "other"), route("k:k1", "done")],
            checkpoint: Some(at(50)),
            ..Derived::default()
        })
        .await
        .unwrap();
    assert_eq!(
        store.checkpoint().await.unwrap(),
        Some(at(100)),
        "an older checkpoint never moves it back"
    );
    let mut unsettled = store.unsettled_intents().await.unwrap();
    unsettled.sort();
    assert_eq!(
        unsettled,
        [
            Unsettled {
                intent_id: "escalated".into(),
                fingerprint: fingerprints[0],
                listed_at: at(1),
            },
            Unsettled {
                intent_id: "open".into(),
                fingerprint: fingerprints[1],
                listed_at: at(1),
            },
        ],
        "each with what its stored verdict said"
    );
    let owners = store
        .route_owners(vec!["k:k1".into(), "k:nobody".into(), "i:done".into()])
        .await
        .unwrap();
    assert_eq!(owners, ["done", "other"]);
    // Every route, in chunks of at most the size asked, whatever their order and repeats; a
    // `false` stops the scan after that chunk.
    for size in [1, 2, 10] {
        let mut chunks: Vec<Vec<String>> = Vec::new();
        let handed = store
            .scan_routes(size, |c| {
                chunks.push(c);
                true
            })
            .await
            .unwrap();
        assert!(
            chunks.iter().all(|c| !c.is_empty() && c.len() <= size),
            "{chunks:?}"
        );
        assert_eq!(handed, chunks.iter().map(|c| c.len() as u64).sum::<u64>());
        let seen: std::collections::BTreeSet<String> = chunks.into_iter().flatten().collect();
        assert_eq!(seen, ["i:done".to_string(), "k:k1".to_string()].into());
    }
    let mut calls = 0;
    let handed = store
        .scan_routes(1, |_| {
            calls += 1;
            false
        })
        .await
        .unwrap();
    assert_eq!((calls, handed), (1, 1), "stopped after the first chunk");

    let first = ev(refund(1, "intent-1", 0));
    let second = ev(refund(2, "intent-2", 0));
    store
        .append_received(vec![first.clone()], reckon::clock::wall_now())
        .await
        .unwrap();
    let between = reckon::clock::wall_now();
    tokio::time::sleep(Duration::from_millis(2)).await;
    store
        .append_received(vec![second.clone()], reckon::clock::wall_now())
        .await
        .unwrap();
    assert_eq!(
        store.events_received_since(between).await.unwrap(),
        [second]
    );
    assert_eq!(
        sorted_events(store.events_received_since(Timestamp(0)).await.unwrap()),
        sorted_events(vec![first, ev(refund(2, "intent-2", 0))])
    );
}

/// A restart loads what is open, not the history behind it: a settled refund stays in the store
/// (its verdict is served from there) while the open one is in memory. A later attempt that
/// sends the settled refund's key brings it back through the store's routes, and the finding
/// lands on both, as if it had never left.
async fn restart_loads_only_what_is_open<H: Harness>(h: &H) {
    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    let done = ev(refund(1, "done", 0)
        .key("k-done")
        .http(200)
        .object("re_done", "succeeded"));
    let open = ev(refund(2, "open", 0).key("k-open").timeout());
    ingest(&engine, vec![done, open]).await;
    assert_eq!(engine.intents(), 2);
    // Past the margin start-up reads back before the checkpoint.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    stop(engine, tasks).await;
    let open_before = h.open().await.get_verdict("open").await.unwrap();
    assert!(open_before.is_some(), "the open intent's verdict is stored");

    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    // Read back behind serving (its routes are in the store): wait for it.
    audited_again(&engine).await;
    assert_eq!(engine.intents(), 1, "only the open intent is loaded");
    assert!(engine.verdict("done").await.is_none(), "not in memory");
    let stored = h.open().await.get_verdict("done").await.unwrap();
    assert_eq!(stored.expect("in the store").state, "completed");
    let again = ev(refund(3, "again", 10)
        .key("k-done")
        .http(200)
        .object("re_done", "succeeded"));
    ingest(&engine, vec![again]).await;
    assert_eq!(engine.intents(), 3, "the settled intent came back");
    for id in ["done", "again"] {
        let v = engine.verdict(id).await.expect(id);
        assert!(
            v.findings
                .iter()
                .any(|f| f.kind == FindingKind::KeySharedAcrossIntents),
            "{id}: {:?}",
            v.findings
        );
    }
    stop(engine, tasks).await;
    // The start audited the open intent again, later, and found it unchanged: its stored row
    // is the one the first process wrote (same `audited_at`), not a rewrite.
    let open_after = h.open().await.get_verdict("open").await.unwrap();
    assert_eq!(
        open_after, open_before,
        "a restart does not rewrite a verdict it recomputes unchanged"
    );
}

/// A start with every open intent's routes in the store serves before reading them back. Here
/// the read-back behind serving is off, so only what reaches an open intent brings it back: a
/// record that names neither intent nor attempt, only the key (so the store's routes must
/// know the open intent's key), and a person's claim of the other's escalation. Each comes
/// back with its escalation, judged as a process that never stopped judges it; a later start
/// with the read-back on has both in memory again.
async fn open_intents_left_in_the_store_come_back_when_reached<H: Harness>(h: &H) {
    let timeouts = vec![
        ev(refund(1, "open-1", 0).key("k-1").timeout()),
        ev(refund(2, "open-2", 0).key("k-2").timeout()),
        ev(refund(3, "open-3", 0).key("k-3").timeout()),
    ];
    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    ingest(&engine, timeouts.clone()).await;
    for id in ["open-1", "open-2", "open-3"] {
        let v = engine.verdict(id).await.expect(id);
        assert_eq!(
            v.decision,
            Decision::Escalate,
            "{id}: long past its deadline"
        );
    }
    // Past the margin start-up reads back before the checkpoint.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // A new store says at once that every open intent's routes are in it.
    open_routes_written(h).await;
    stop(engine, tasks).await;

    let only_when_reached = EngineOptions {
        read_back_open: false,
        ..EngineOptions::default()
    };
    let (engine, tasks, metrics) = engine_with(h.open_any().await, only_when_reached).await;
    assert_eq!(engine.intents(), 0, "nothing read before serving");
    assert_eq!(engine.unaudited(), 3, "all three left in the store");
    assert_eq!(metric(&metrics, "reckon_intents_pending"), 3);
    // What alert rules read keeps its labels while the intents are still in the store.
    let unresolved = unresolved_series(&engine, h.open_any().await, &metrics).await;
    assert!(
        unresolved.contains("tool=\"issue_refund\"") && !unresolved.contains("(none)"),
        "{unresolved}"
    );
    // So does the queue a person works: each row names its tool (the stored verdict's).
    let queue = api_get(&engine, h.open_any().await, &metrics, "/").await;
    assert!(
        queue.contains("<td>issue_refund</td>") && !queue.contains("<td>—</td>"),
        "{queue}"
    );
    assert!(engine.verdict("open-1").await.is_none());
    let late = record("re_1", None, Some("k-1"), "succeeded", 30);
    ingest(&engine, vec![late.clone()]).await;
    assert_eq!(
        engine.intents(),
        1,
        "the key brought open-1 back, and only it"
    );
    let back = engine.verdict("open-1").await.expect("back in memory");
    let mut never_stopped = EngineCore::new(contracts());
    never_stopped.ingest(timeouts, back.audited_at);
    never_stopped.ingest(vec![late], back.audited_at);
    let reference = never_stopped.verdict("open-1").expect("open-1");
    assert_eq!(back.state, reference.state, "{back:?}");
    assert_eq!(back.decision, reference.decision);
    assert_eq!(kinds(&back), kinds(&reference));
    assert_eq!(back.objects, reference.objects, "the record is open-1's");
    // Its escalation came back with it, and the record (30 s after the timeout in event time,
    // long before the unknown deadline) shows `unresolved_unknown` never held: nobody had
    // claimed it, so it is withdrawn (DESIGN.md "Findings"), as in the process that never
    // stopped.
    let first = reckon::escalation::escalation_id("open-1", 1);
    assert_eq!(back.escalation_id, reference.escalation_id, "{back:?}");
    assert_eq!(back.escalation_id, None, "{back:?}");
    let withdrawn = h
        .open_any()
        .await
        .get_escalation(&first)
        .await
        .unwrap()
        .expect("the escalation is kept");
    assert_eq!(
        withdrawn.status,
        EscalationStatus::Withdrawn,
        "{withdrawn:?}"
    );

    // A person claims open-2's escalation while open-2 is still in the store.
    let other = reckon::escalation::escalation_id("open-2", 1);
    let claimed = engine.claim(&other, "ana", false).await.expect("claim");
    assert_eq!(claimed.status, EscalationStatus::Claimed);
    assert_eq!(engine.intents(), 2, "the claim brought open-2 back");
    let v = engine.verdict("open-2").await.expect("open-2");
    assert_eq!(v.escalation_id.as_deref(), Some(other.as_str()), "{v:?}");

    // The agent retries open-3 under its key: the attempt names it, and it is judged with the
    // first attempt it had before the stop.
    ingest(
        &engine,
        vec![ev(refund(4, "open-3", 40)
            .key("k-3")
            .http(200)
            .object("re_3", "succeeded"))],
    )
    .await;
    let v = engine.verdict("open-3").await.expect("open-3");
    assert_eq!(v.attempts.len(), 2, "{v:?}");
    assert_eq!(engine.unaudited(), 0, "nothing left in the store");
    stop(engine, tasks).await;
    let escalations = h.open().await.load_escalations().await.unwrap();
    assert_eq!(
        escalations.len(),
        3,
        "no escalation numbered twice: {escalations:?}"
    );

    let (engine, tasks, metrics) = engine_on(h.open_any().await).await;
    audited_again(&engine).await;
    // open-1 and open-3 completed and their escalations were withdrawn: at rest, a start need
    // not read them (it may, when they arrived after the checkpoint). open-2 is claimed: open,
    // read back behind serving.
    let v = engine.verdict("open-2").await.expect("open-2 read back");
    assert_eq!(v.escalation_id.as_deref(), Some(other.as_str()), "{v:?}");
    assert!(engine.intents() >= 1);
    // The gauge follows at the timer's next step.
    for _ in 0..1000 {
        if metric(&metrics, "reckon_intents_pending") == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metric(&metrics, "reckon_intents_pending"), 0);
    stop(engine, tasks).await;
}

/// A settled refund (`paid`: its attempt under `k-shared`, the record of its object naming it)
/// and an open one that sent the same key (`stuck`): the open one's evidence holds the record,
/// which names `paid`. A start must read `paid` back whole, its attempt too, not take it as
/// known because an event named it; both on a store from before open intents' routes were
/// written (everything open read before serving) and on the next start (read back behind it).
async fn a_settled_intent_named_by_an_open_ones_evidence_comes_back_whole<H: Harness>(h: &H) {
    let store = h.open().await;
    let events = vec![
        ev(refund(1, "paid", 0)
            .key("k-shared")
            .http(200)
            .object("re_paid", "succeeded")),
        record("re_paid", Some("paid"), Some("k-shared"), "succeeded", 5),
        ev(refund(2, "stuck", 10).key("k-shared").timeout()),
    ];
    store
        .append_received(events.clone(), reckon::clock::wall_now())
        .await
        .unwrap();
    let now = reckon::clock::wall_now();
    let mut core = EngineCore::new(contracts());
    core.ingest(events, now);
    // The shared key escalated `paid` too; a person resolved that, so it settled.
    let before = core.verdict("paid").expect("paid");
    let escalation = before.escalation_id.clone().expect("escalated");
    let resolved = core
        .book()
        .resolved(
            &escalation,
            "ana",
            "not_a_duplicate",
            None,
            now,
            Some(&before),
            false,
        )
        .expect("resolved");
    let out = core.commit_person_action(resolved, now);
    let paid = core.verdict("paid").expect("paid");
    assert!(paid.is_settled(), "{paid:?}");
    assert!(!core.verdict("stuck").expect("stuck").is_settled());
    // Past the margin start-up reads back before the checkpoint. What the process wrote, as
    // one from before open intents' routes: the settled intent's routes only.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let settled_routes: Vec<Route> = out
        .routes
        .iter()
        .filter(|r| r.intent_id == "paid")
        .cloned()
        .collect();
    assert!(!settled_routes.is_empty());
    store
        .put_derived(Derived {
            verdicts: core.verdicts().map(Arc::new).collect(),
            escalations: core.book().all().cloned().collect(),
            routes: settled_routes,
            checkpoint: Some(reckon::clock::wall_now()),
            ..Derived::default()
        })
        .await
        .unwrap();
    assert!(!store.routes_of_open_intents().await.unwrap());
    drop(store);

    for start in [
        "reading everything open first",
        "reading open intents back behind",
    ] {
        let (engine, tasks, _) = engine_on(h.open_any().await).await;
        audited_again(&engine).await;
        let back = engine
            .verdict("paid")
            .await
            .expect("reached through the record");
        assert_eq!(back.attempts.len(), 1, "{start}: {back:?}");
        assert_eq!(back.state, paid.state, "{start}");
        assert_eq!(kinds(&back), kinds(&paid), "{start}");
        assert!(engine.verdict("stuck").await.is_some(), "{start}");
        open_routes_written(h).await;
        stop(engine, tasks).await;
    }
}

/// The `reckon_escalations_unresolved` lines of `/metrics`, through the API as `reckon serve`
/// builds it on `engine` and `store`.
async fn unresolved_series(
    engine: &Arc<Engine>,
    store: AnyStore,
    metrics: &Arc<Metrics>,
) -> String {
    api_get(engine, store, metrics, "/metrics")
        .await
        .lines()
        .filter(|l| l.starts_with("reckon_escalations_unresolved{"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The body of `GET path` from the API and pages as `reckon serve` builds them on `engine`
/// and `store`.
async fn api_get(
    engine: &Arc<Engine>,
    store: AnyStore,
    metrics: &Arc<Metrics>,
    path: &str,
) -> String {
    let store = Arc::new(store);
    let access = Arc::new(reckon::auth::Access::open());
    let ingest = Arc::new(reckon::ingest::service::IngestService::new(
        engine.clone(),
        store.clone(),
        metrics.clone(),
        8,
        None,
        Dur::secs(300),
    ));
    let router = reckon::api::router(reckon::api::ApiState {
        engine: engine.clone(),
        ingest,
        store,
        metrics: metrics.clone(),
        body: reckon::ingest::body::BodyLimits {
            max_bytes: 1 << 20,
            read_timeout: std::time::Duration::from_secs(30),
        },
        gate: reckon::auth::Gate::new(access, metrics.clone(), "api"),
        instance: "conformance".into(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let text = reqwest::get(format!("http://{addr}{path}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    server.abort();
    text
}

/// Wait until the store says every open intent's routes are in it (a start of a store from
/// before writes them behind serving).
async fn open_routes_written<H: Harness>(h: &H) {
    let store = h.open().await;
    for _ in 0..1000 {
        if store.routes_of_open_intents().await.unwrap() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the open intents' routes were not written within 10 s");
}

/// A resolved escalation leaves memory with its settled intent and is not loaded by a start,
/// yet stays counted; when the intent comes back (an event on its key), its escalations come
/// with it, so the new one is its second, not a rewrite of the first.
async fn escalations_leave_memory_with_their_intent<H: Harness>(h: &H) {
    let evicting = EngineOptions {
        evict_after: Some(Duration::ZERO),
        ..EngineOptions::default()
    };
    let (engine, tasks, metrics) = engine_with(h.open_any().await, evicting).await;
    let paid = ev(refund(1, "intent-n", 0)
        .key("k-n")
        .http(200)
        .object("re_n1", "succeeded"));
    ingest(&engine, vec![paid]).await;
    ingest(
        &engine,
        vec![record("re_n2", Some("intent-n"), None, "succeeded", 60)],
    )
    .await;
    let first = engine
        .verdict("intent-n")
        .await
        .and_then(|v| v.escalation_id.clone())
        .expect("escalated");
    engine
        .resolve(&first, "ana", "reversed_second_refund", None, false)
        .await
        .expect("resolve");
    for _ in 0..1000 {
        if engine.intents() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(engine.intents(), 0, "settled, evicted");
    assert_eq!(metric(&metrics, "reckon_escalations"), 1, "still counted");
    // Past the margin start-up reads back before the checkpoint.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    stop(engine, tasks).await;

    let (engine, tasks, metrics) = engine_with(h.open_any().await, evicting).await;
    assert_eq!(engine.intents(), 0, "nothing open to load");
    assert_eq!(
        metric(&metrics, "reckon_escalations"),
        1,
        "counted from the store"
    );
    // Another intent sends the same key: intent-n comes back, with its escalation.
    ingest(
        &engine,
        vec![ev(refund(2, "intent-m", 100)
            .key("k-n")
            .http(200)
            .object("re_n1", "succeeded"))],
    )
    .await;
    let v = engine.verdict("intent-n").await.expect("back in memory");
    let second = reckon::escalation::escalation_id("intent-n", 2);
    assert_eq!(v.escalation_id.as_deref(), Some(second.as_str()), "{v:?}");
    stop(engine, tasks).await;
    let store = h.open().await;
    let kept = store.get_escalation(&first).await.unwrap().expect("first");
    assert_eq!(kept.status, EscalationStatus::Resolved, "not overwritten");
    assert_eq!(
        store
            .get_escalation(&second)
            .await
            .unwrap()
            .map(|e| e.status),
        Some(EscalationStatus::Open)
    );
}

/// A process stopped with timed-out refunds in flight and stayed down past their deadlines: the
/// next start serves before auditing them, then its timer concludes what changed, more intents
/// than one of its pages, and writes each changed verdict and the escalation it opened.
async fn deadlines_passed_while_down_are_concluded_after_the_start<H: Harness>(h: &H) {
    const INTENTS: u64 = 5000;
    let store = h.open().await;
    let events: Vec<Event> = (1..=INTENTS)
        .map(|n| {
            ev(refund(n, &format!("intent-{n}"), 0)
                .key(&format!("k-{n}"))
                .timeout())
        })
        .collect();
    store
        .append_received(events.clone(), reckon::clock::wall_now())
        .await
        .unwrap();
    // What the previous process wrote: each verdict as it stood, in flight.
    let out = EngineCore::new(contracts()).ingest(events, at(35));
    assert_eq!(out.verdicts.len(), INTENTS as usize);
    assert!(out.verdicts.iter().all(|v| v.decision == Decision::Wait));
    assert!(out.escalations.is_empty());
    store
        .put_derived(Derived {
            verdicts: out.verdicts.clone(),
            checkpoint: Some(reckon::clock::wall_now()),
            ..Derived::default()
        })
        .await
        .unwrap();
    drop(store);

    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    assert_eq!(engine.intents(), INTENTS as usize);
    audited_again(&engine).await;
    let v = engine.verdict("intent-1").await.expect("in memory");
    assert_eq!(v.decision, Decision::Escalate, "{v:?}");
    stop(engine, tasks).await;

    let store = h.open().await;
    for n in [1, INTENTS / 2, INTENTS] {
        let id = format!("intent-{n}");
        let v = store.get_verdict(&id).await.unwrap().expect(&id);
        assert_eq!(v.decision, "escalate", "{id} rewritten");
    }
    let escalations = store.load_escalations().await.unwrap();
    assert_eq!(
        escalations.len(),
        INTENTS as usize,
        "one per intent, stored"
    );
    assert!(escalations
        .iter()
        .all(|e| e.status == EscalationStatus::Open));
}

/// A crash between an acknowledged export and its verdict's write: the previous process wrote
/// a settled refund (verdict, routes, checkpoint), then acknowledged a second refund object
/// under the same intent and died before writing anything more. The next start reads back what
/// was received since the checkpoint, brings the settled intent back with it, and the
/// duplicate is found and written.
async fn what_arrived_after_the_checkpoint_is_read_back<H: Harness>(h: &H) {
    let store = h.open().await;
    let first = vec![ev(refund(1, "intent-a", 0)
        .key("k-a")
        .http(200)
        .object("re_a", "succeeded"))];
    store
        .append_received(first.clone(), reckon::clock::wall_now())
        .await
        .unwrap();
    let out = EngineCore::new(contracts()).ingest(first, at(10));
    assert!(out.verdicts[0].is_settled());
    // Past the margin start-up reads back before the checkpoint.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    store
        .put_derived(Derived {
            verdicts: out.verdicts.clone(),
            routes: out.routes,
            checkpoint: Some(reckon::clock::wall_now()),
            ..Derived::default()
        })
        .await
        .unwrap();
    let second = record("re_a2", Some("intent-a"), Some("k-a"), "succeeded", 20);
    store
        .append_received(vec![second], reckon::clock::wall_now())
        .await
        .unwrap();
    drop(store);

    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    let v = engine.verdict("intent-a").await.expect("read back");
    assert!(
        v.findings
            .iter()
            .any(|f| f.kind == FindingKind::DuplicateEffect),
        "{:?}",
        v.findings
    );
    audited_again(&engine).await;
    stop(engine, tasks).await;
    let stored = h
        .open()
        .await
        .get_verdict("intent-a")
        .await
        .unwrap()
        .unwrap();
    assert!(
        stored.findings.iter().any(|f| f.kind == "duplicate_effect"),
        "and written: {:?}",
        stored.findings
    );
}

// ---------------------------------------------------------------------------------------------
// Reloading contracts.

/// `payments.refund` as a file, with `max_attempts` and one line of the operator's own.
fn refunds_toml(max_attempts: u32, extra: &str) -> String {
    format!(
        "[[contract]]\nname = \"payments.refund\"\ntools = [\"issue_refund\"]\nrecord_kind = \"refund\"\n\
         key_retention = \"24h\"\nmax_attempts = {max_attempts}\n{extra}\n\
         [contract.params]\namount = \"/amount\"\ncurrency = \"/currency\"\ntarget = \"/order_id\"\n"
    )
}

const EMAIL_TOML: &str = "[[contract]]\nname = \"notifications.email\"\ntools = [\"send_email\"]\nidempotency = \"none\"\n";

/// A contracts directory the reload tests edit: `refunds.toml` ([`refunds_toml`] with five
/// attempts) and `email.toml`.
struct ContractsDir(tempfile::TempDir);

impl ContractsDir {
    fn new() -> Self {
        let dir = ContractsDir(tempfile::tempdir().unwrap());
        std::fs::write(dir.refunds(), refunds_toml(5, "")).unwrap();
        std::fs::write(dir.path().join("email.toml"), EMAIL_TOML).unwrap();
        dir
    }
    fn path(&self) -> &std::path::Path {
        self.0.path()
    }
    fn refunds(&self) -> std::path::PathBuf {
        self.path().join("refunds.toml")
    }
    /// The set as the directory says now.
    fn load(&self) -> Arc<Contracts> {
        Arc::new(Contracts::new(
            reckon::contract::load_dir(self.path()).unwrap(),
        ))
    }
}

/// The stored verdict document of `id`, once the persister wrote one `done` accepts.
async fn stored_verdict<S: Store>(
    store: &S,
    id: &str,
    done: impl Fn(&VerdictDoc) -> bool,
) -> VerdictDoc {
    let mut last = None;
    for _ in 0..200 {
        last = store.get_verdict(id).await.unwrap();
        if last.as_ref().is_some_and(&done) {
            return last.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{id}: the stored verdict never got there: {last:#?}");
}

fn kinds(v: &Verdict) -> Vec<FindingKind> {
    v.findings.iter().map(|f| f.kind).collect()
}

/// A shutdown does not wait for a reload's re-audit (a million intents take minutes when the
/// store is busy): the reload stops between pages with the new contracts in force, and the next
/// start, which loads every open intent and judges it under the contracts of its directory,
/// finishes what it left. Here the stop comes before the first page, so nothing is judged again
/// by the reload itself.
async fn a_reload_cut_short_by_shutdown_is_finished_by_the_next_start<H: Harness>(h: &H) {
    let dir = ContractsDir::new();
    let (refunds, load) = (dir.refunds(), || dir.load());
    let first = load();
    let version = |set: &Contracts| set.by_name("payments.refund").unwrap().version.clone();
    let store = Arc::new(h.open_any().await);
    let (engine, tasks) = Engine::start(first.clone(), store.clone(), Arc::new(Metrics::new()))
        .await
        .unwrap();
    // Two timed-out sends under one key: open, and one too many under the edit below.
    ingest(
        &engine,
        vec![
            ev(refund(1, "intent-o", 0).key("k-o").timeout()),
            ev(refund(2, "intent-o", 40).key("k-o").timeout()),
        ],
    )
    .await;
    stored_verdict(&*store, "intent-o", |d| {
        d.contract_version == version(&first)
    })
    .await;

    engine.stop_reloads();
    std::fs::write(&refunds, refunds_toml(1, "")).unwrap();
    let second = load();
    let reloaded = engine.reload_contracts(dir.path()).await.expect("reloaded");
    assert_eq!(reloaded.changed, ["payments.refund"]);
    assert_eq!((reloaded.reaudited, reloaded.verdicts), (0, 0));
    assert_eq!(reloaded.left, 1, "the refund left for the next start");
    assert_eq!(version(&engine.contracts()), version(&second), "in force");
    stop(engine, tasks).await;
    assert_eq!(
        store
            .get_verdict("intent-o")
            .await
            .unwrap()
            .map(|d| d.contract_version),
        Some(version(&first)),
        "not judged again by the reload"
    );
    drop(store);

    let store = Arc::new(h.open_any().await);
    let (engine, tasks) = Engine::start(load(), store.clone(), Arc::new(Metrics::new()))
        .await
        .unwrap();
    audited_again(&engine).await;
    let doc = stored_verdict(&*store, "intent-o", |d| {
        d.contract_version == version(&second)
    })
    .await;
    assert!(
        doc.findings
            .iter()
            .any(|f| f.kind == "retry_budget_exceeded"),
        "{doc:#?}"
    );
    stop(engine, tasks).await;
}

/// A reload through the real engine on each store: a bad edit is refused by file, line and
/// field and changes nothing (not even the part of the edit that was valid); a good one is in
/// force at once, re-audits the intents in memory it concerns, and its verdicts, with their new
/// `contract_version` and findings, reach the store through the persister; intents under an
/// untouched contract keep theirs; what is ingested after is judged under the new set, also by
/// a restarted engine.
async fn contracts_reload_through_the_engine<H: Harness>(h: &H) {
    let dir = ContractsDir::new();
    let (refunds, load) = (dir.refunds(), || dir.load());
    let first = load();
    let version = |set: &Contracts, name: &str| set.by_name(name).unwrap().version.clone();
    let metrics = Arc::new(Metrics::new());
    let store = Arc::new(h.open_any().await);
    let (engine, tasks) = Engine::start(first.clone(), store.clone(), metrics.clone())
        .await
        .unwrap();
    // A timed-out refund retried under its key, which succeeded; a sent email; a tool no
    // contract covers.
    ingest(
        &engine,
        vec![
            ev(refund(1, "intent-r", 0).key("k-r").timeout()),
            ev(refund(2, "intent-r", 40)
                .key("k-r")
                .http(200)
                .object("re_r", "succeeded")),
            ev(sent(3, "intent-e", "send_email", 0)
                .http(200)
                .object("m_1", "sent")),
            ev(sent(4, "intent-x", "post_tweet", 0).http(200)),
        ],
    )
    .await;
    let r = engine.verdict("intent-r").await.unwrap();
    assert_eq!((r.state, kinds(&r)), (IntentState::Completed, vec![]));
    assert_eq!(r.contract_version, version(&first, "payments.refund"));
    let e_before = engine.verdict("intent-e").await.unwrap();
    assert_eq!(
        e_before.contract_version,
        version(&first, "notifications.email")
    );
    assert_eq!(
        engine.verdict("intent-x").await.unwrap().contract_version,
        ""
    );
    stored_verdict(&*store, "intent-r", |d| {
        d.contract_version == r.contract_version
    })
    .await;
    let e_stored = stored_verdict(&*store, "intent-e", |_| true).await;

    // A bad edit: the valid half (max_attempts = 1) must not slip in either.
    std::fs::write(&refunds, refunds_toml(1, "max_attempt = 1")).unwrap();
    match engine.reload_contracts(dir.path()).await {
        Err(reckon::engine::ReloadError::Invalid(reckon::contract::ContractError::Invalid {
            file,
            line,
            field,
            ..
        })) => assert_eq!(
            (file, line, field.as_str()),
            (refunds.clone(), 7, "max_attempt")
        ),
        other => panic!("expected the bad field named, got {other:?}"),
    }
    assert_eq!(metric(&metrics, "reckon_contract_reloads_total"), 1);
    assert!(metrics
        .render()
        .contains("reckon_contract_reloads_total{result=\"error\"} 1\n"));
    assert_eq!(
        version(&engine.contracts(), "payments.refund"),
        version(&first, "payments.refund")
    );
    assert_eq!(
        *engine.verdict("intent-r").await.unwrap(),
        *r,
        "nothing re-audited"
    );

    // The good edit: one retry too many now.
    std::fs::write(&refunds, refunds_toml(1, "")).unwrap();
    let second = load();
    let reloaded = engine.reload_contracts(dir.path()).await.expect("reloaded");
    assert_eq!(reloaded.changed, ["payments.refund"]);
    assert_eq!(reloaded.reaudited, 3);
    assert!(metrics
        .render()
        .contains("reckon_contract_reloads_total{result=\"ok\"} 1\n"));
    assert!(metrics.render().contains(&format!(
        "reckon_contract_info{{contract=\"payments.refund\",version=\"{}\"}} 1\n",
        version(&second, "payments.refund")
    )));
    let r2 = engine.verdict("intent-r").await.unwrap();
    assert_eq!(r2.contract_version, version(&second, "payments.refund"));
    assert_ne!(r2.contract_version, r.contract_version);
    assert_eq!(
        (r2.state, kinds(&r2)),
        (
            IntentState::Completed,
            vec![FindingKind::RetryBudgetExceeded]
        )
    );
    let e_after = engine.verdict("intent-e").await.unwrap();
    assert_eq!(e_after.contract_version, e_before.contract_version);

    // Persisted: the document, and the findings the report and filters read.
    let doc = stored_verdict(&*store, "intent-r", |d| {
        d.contract_version == r2.contract_version
    })
    .await;
    assert_eq!(doc.findings[0].kind, "retry_budget_exceeded");
    let page = store
        .list_verdicts(&VerdictFilter {
            finding: Some(FindingKind::RetryBudgetExceeded),
            ..VerdictFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        page.items
            .iter()
            .map(|d| d.intent_id.as_str())
            .collect::<Vec<_>>(),
        ["intent-r"]
    );
    assert_eq!(
        store.get_verdict("intent-e").await.unwrap(),
        Some(e_stored),
        "the email's verdict, under an untouched contract, was not rewritten"
    );

    // Judged under the new set from now on, and by a restarted engine.
    ingest(
        &engine,
        vec![
            ev(refund(5, "intent-s", 50).key("k-s").timeout()),
            ev(refund(6, "intent-s", 60).key("k-s").timeout()),
        ],
    )
    .await;
    let s2 = engine.verdict("intent-s").await.unwrap();
    assert!(
        kinds(&s2).contains(&FindingKind::RetryBudgetExceeded),
        "{s2:?}"
    );
    // Past the margin start-up reads back before the checkpoint: the settled refund stays in
    // the store, the open one is loaded.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    stop(engine, tasks).await;
    drop(store);
    let store = Arc::new(h.open_any().await);
    let (engine, tasks) = Engine::start(load(), store.clone(), Arc::new(Metrics::new()))
        .await
        .unwrap();
    // The open one is read back behind serving.
    audited_again(&engine).await;
    let names =
        |v: &Verdict| -> Vec<String> { kinds(v).iter().map(|k| k.as_str().to_string()).collect() };
    assert!(
        engine.verdict("intent-r").await.is_none(),
        "settled: not loaded"
    );
    let stored = store
        .get_verdict("intent-r")
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        (
            stored.contract_version,
            stored
                .findings
                .iter()
                .map(|f| f.kind.clone())
                .collect::<Vec<_>>()
        ),
        (r2.contract_version.clone(), names(&r2)),
        "intent-r after a restart, as stored"
    );
    let after = engine.verdict("intent-s").await.expect("open: loaded");
    assert_eq!(
        (&after.contract_version, names(&after)),
        (&s2.contract_version, names(&s2)),
        "intent-s after a restart, judged under the new set"
    );
    stop(engine, tasks).await;
}

/// The webhook before the span, as it usually goes: the record is an orphan first (its routes
/// are written with the step that reached it), then the span claims it by key and the
/// pseudo-intent is removed. Its routes must go with it: a later event on the object reaches
/// only the intent.
async fn a_claimed_orphan_reaches_nothing<H: Harness>(h: &H) {
    let store = h.open().await;
    let rec = record("re_old", None, Some("k-old"), "succeeded", 5);
    let span = ev(refund(1, "old", 0)
        .key("k-old")
        .http(200)
        .object("re_old", "succeeded"));
    appended(&store, vec![rec.clone(), span.clone()]).await;
    let mut core = EngineCore::new(contracts());
    let first = core.ingest(vec![rec], at(6));
    assert!(
        first.routes.iter().any(|r| r.intent_id == "orphan:re_old"),
        "an orphan's routes are written while it is in its grace"
    );
    let second = core.ingest(vec![span], at(7));
    assert_eq!(second.removed, ["orphan:re_old"]);
    for out in [first, second] {
        store
            .put_derived(Derived {
                verdicts: out.verdicts,
                routes: out.routes,
                removed: out.removed,
                ..Derived::default()
            })
            .await
            .unwrap();
    }
    assert_eq!(
        store
            .route_owners(vec!["o:re_old".into(), "k:k-old".into()])
            .await
            .unwrap(),
        ["old"]
    );
}

/// Retention: the raw events of a settled intent whose latest event is older than the cut lose
/// their content (the tool-call arguments become the redaction marker) and keep what a later
/// event is judged against; its verdict and routes stay. An open intent as old, and a settled
/// one newer than the cut, keep their arguments. A second pass finds nothing more. (ClickHouse
/// updates by mutation, in the background: polled.)
async fn retention_strips_the_arguments_of_settled_intents<H: Harness>(h: &H) {
    let store = h.open().await;
    let old = [
        ev(refund(1, "old", 0)
            .key("k-old")
            .http(200)
            .object("re_old", "succeeded")),
        record("re_old", None, Some("k-old"), "succeeded", 5),
    ];
    let new = ev(refund(2, "new", 1000)
        .key("k-new")
        .http(200)
        .object("re_new", "succeeded"));
    let open = ev(refund(3, "open", 0).key("k-open").timeout());
    let all: Vec<Event> = old
        .iter()
        .cloned()
        .chain([new.clone(), open.clone()])
        .collect();
    appended(&store, all.clone()).await;
    let out = EngineCore::new(contracts()).ingest(all, at(1100));
    // The timeout as it ends up once its key expired and a person resolved its escalation:
    // unknown for good, out of memory, and its raw events kept, since a late record is what
    // it waits for.
    let verdicts = out.verdicts.iter().map(|v| match v.intent_id.as_str() {
        "open" => Arc::new(Verdict {
            next_change: None,
            decision: Decision::Reconcile,
            ..(**v).clone()
        }),
        _ => v.clone(),
    });
    let verdicts: Vec<Arc<Verdict>> = verdicts.collect();
    let quiet = verdicts.iter().find(|v| v.intent_id == "open").unwrap();
    assert_eq!(quiet.rest(), reckon::model::Rest::Quiet);
    assert!(
        quiet.last_event < at(500),
        "old enough to expire if it were settled"
    );
    store
        .put_derived(Derived {
            verdicts,
            routes: out.routes,
            ..Derived::default()
        })
        .await
        .unwrap();

    assert_eq!(store.expire_events(at(500), 10).await.unwrap(), 1);
    let stripped = expired(old.to_vec(), at(500));
    assert!(
        stripped != old.to_vec(),
        "the arguments were there to strip"
    );
    once_expired(&store, &["old"], &["k-old"], &["re_old"], &stripped).await;
    assert_eq!(
        store.route_owners(vec!["i:old".into()]).await.unwrap(),
        ["old"],
        "its routes stay, so a late event finds the intent"
    );
    let kept = store
        .events_touching(reckon::store::EventQuery {
            intents: vec!["new".into(), "open".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(sorted_events(kept), sorted_events(vec![new, open]));
    let v = store
        .get_verdict("old")
        .await
        .unwrap()
        .expect("the verdict stays");
    assert_eq!(v.state, "completed");
    assert_eq!(
        store.expire_events(at(500), 10).await.unwrap(),
        0,
        "nothing more"
    );
}

/// What retention keeps is enough to judge what comes late (DESIGN.md "Memory and history":
/// verdicts are kept). Three refunds settle and their raw events expire; then the downstream
/// reports one failed, and an executor replays the other two intents under new keys and refunds
/// again (one refund was its own by the key its record carried, then read back). The first is
/// `failed_after_execution` with its attempt still in its verdict (not an intent of one record,
/// its own object an `orphan_record`); the others are a `duplicate_effect`, escalated. When
/// retention deleted the raw events, a late event was judged alone and the second refund went
/// unseen; a summary of the verdict in their place lost the ownership by key (found by review).
async fn a_late_event_after_retention_is_judged_against_the_kept_verdict<H: Harness>(h: &H) {
    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    let refunded = |n: u64, intent: &str, object: &str| {
        ev(sent(n, intent, "issue_refund", 0)
            .key(&format!("k-{intent}"))
            .http(200)
            .object(object, "succeeded"))
    };
    let history = vec![
        refunded(1, "fails-late", "re_a"),
        record(
            "re_a",
            Some("fails-late"),
            Some("k-fails-late"),
            "succeeded",
            5,
        ),
        refunded(2, "replayed", "re_b"),
        ev(sent(4, "read-back", "issue_refund", 0)
            .key("k-rb")
            .timeout()),
        record("re_r", None, Some("k-rb"), "succeeded", 5),
        readback(5, "read-back", 40, &["re_r"]),
    ];
    ingest(&engine, history.clone()).await;
    for id in ["fails-late", "replayed", "read-back"] {
        let v = engine.verdict(id).await.expect("judged");
        assert_eq!(v.state, IntentState::Completed, "{v:#?}");
    }
    stop(engine, tasks).await;

    let store = h.open().await;
    assert_eq!(store.expire_events(at(500), 10).await.unwrap(), 3);
    once_expired(
        &store,
        &["fails-late", "replayed", "read-back"],
        &["k-fails-late", "k-replayed", "k-rb"],
        &["re_a", "re_b", "re_r"],
        &expired(history, at(500)),
    )
    .await;
    drop(store);

    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    let again = |n: u64, intent: &str, object: &str| {
        ev(sent(n, intent, "issue_refund", 900)
            .key(&format!("k-{intent}-again"))
            .http(200)
            .object(object, "succeeded"))
    };
    ingest(
        &engine,
        vec![
            record(
                "re_a",
                Some("fails-late"),
                Some("k-fails-late"),
                "failed",
                900,
            ),
            again(3, "replayed", "re_b2"),
            again(6, "read-back", "re_r2"),
        ],
    )
    .await;
    let failed = engine.verdict("fails-late").await.expect("brought back");
    let kinds = |v: &Verdict| v.findings.iter().map(|f| f.kind).collect::<Vec<_>>();
    assert_eq!(
        (failed.state, failed.attempts.len(), kinds(&failed)),
        (IntentState::FailedAfterExecution, 1, vec![]),
        "{failed:#?}"
    );
    for id in ["replayed", "read-back"] {
        let v = engine.verdict(id).await.expect("brought back");
        assert!(kinds(&v).contains(&FindingKind::DuplicateEffect), "{v:#?}");
        assert_eq!(v.decision, Decision::Escalate);
    }
    stop(engine, tasks).await;

    let store = h.open().await;
    let stored = store
        .get_verdict("replayed")
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        stored.attempts.len(),
        2,
        "the kept verdict keeps the old attempt"
    );
    assert!(store.get_verdict("orphan:re_a").await.unwrap().is_none());
}

/// `events` as retention leaves them at `cut`: the arguments of attempts sent before it are
/// the redaction marker.
fn expired(events: Vec<Event>, cut: Timestamp) -> Vec<Event> {
    events
        .into_iter()
        .map(|e| match e {
            Event::Attempt(a) if a.start < cut && a.arguments.is_some() => {
                Event::Attempt(Attempt {
                    arguments: Some(REDACTED_ARGUMENTS_JSON.into()),
                    ..a
                })
            }
            e => e,
        })
        .collect()
}

/// Wait until the store's events touching these intents, keys and objects are `want` (ClickHouse
/// applies retention's mutation in the background).
async fn once_expired<S: Store>(
    store: &S,
    intents: &[&str],
    keys: &[&str],
    objects: &[&str],
    want: &[Event],
) {
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let want = sorted_events(want.to_vec());
    once_mutated(|| async {
        let left = store
            .events_touching(reckon::store::EventQuery {
                intents: owned(intents),
                keys: owned(keys),
                objects: owned(objects),
            })
            .await
            .unwrap();
        let left = sorted_events(left);
        (left != want).then(|| format!("not yet as retention leaves them: {left:?}"))
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Lookups, escalation pages, overrides, withdrawn (DESIGN.md "HTTP API").

/// `target`, `object_id` and `key` find the intents an order, an object or a key touches: the
/// intent's parameter target and its objects' targets, its objects and those its responses
/// named, the keys it sent. What a verdict is found by is what its latest write says; a removed
/// pseudo-intent is found by nothing; lookups combine with the other filters and page.
async fn intents_are_found_by_target_object_and_key<H: Harness>(h: &H) {
    let store = h.open().await;
    let ids = |v: &[VerdictDoc]| v.iter().map(|d| d.intent_id.clone()).collect::<Vec<_>>();
    let find = |target: Option<&str>, object: Option<&str>, key: Option<&str>| VerdictFilter {
        target: target.map(Into::into),
        object_id: object.map(Into::into),
        key: key.map(Into::into),
        limit: 2,
        ..Default::default()
    };
    // Two refunds of order 1042 (one by its parameters, one by its object's target), one of
    // order 7, and an orphan record of order 1042.
    let mut a = verdict("a", Some("issue_refund"), IntentState::Completed, at(10));
    a.target = Some("1042".into());
    a.objects[0].object_id = "re_a".into();
    a.objects[0].target = None;
    a.idempotency_keys = vec!["ka".into()];
    for x in &mut a.attempts {
        x.idempotency_key = Some("ka".into());
    }
    a.attempts[1].object_id = Some("re_a".into());
    let mut b = verdict("b", Some("issue_refund"), IntentState::Unknown, at(11));
    b.objects[0].object_id = "re_b".into();
    b.objects[0].target = Some("1042".into());
    b.idempotency_keys = vec!["kb".into()];
    for x in &mut b.attempts {
        x.idempotency_key = Some("kb".into());
    }
    // Its first attempt's response named a's refund (a replayed response, say).
    b.attempts[0].object_id = Some("re_a".into());
    let mut c = verdict("c", Some("issue_refund"), IntentState::Completed, at(12));
    c.target = Some("7".into());
    c.objects[0].object_id = "re_c".into();
    c.objects[0].target = Some("7".into());
    c.idempotency_keys = vec!["kc".into()];
    for x in &mut c.attempts {
        x.idempotency_key = Some("kc".into());
    }
    let mut orphan = verdict("orphan:re_z", None, IntentState::Completed, at(13));
    // Listed in this order, newest first.
    for (v, t) in [(&mut a, 4), (&mut b, 3), (&mut c, 2), (&mut orphan, 1)] {
        v.listed_at = at(t);
    }
    orphan.attempts.clear();
    orphan.idempotency_keys.clear();
    orphan.objects[0].object_id = "re_z".into();
    orphan.objects[0].target = Some("1042".into());
    store
        .put_derived(Derived {
            verdicts: [&a, &b, &c, &orphan]
                .into_iter()
                .map(|v| Arc::new(v.clone()))
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap();
    let got = every_page(&store, find(Some("1042"), None, None)).await;
    assert_eq!(ids(&got), ["a", "b", "orphan:re_z"]);
    assert_eq!(got[0], VerdictDoc::from_verdict(&a), "the full document");
    assert_eq!(got[0].target.as_deref(), Some("1042"));
    assert_eq!(
        ids(&every_page(&store, find(None, Some("re_a"), None)).await),
        ["a", "b"],
        "its owner, and the intent whose response named it"
    );
    assert_eq!(
        ids(&every_page(&store, find(None, None, Some("kb"))).await),
        ["b"]
    );
    assert_eq!(
        ids(&every_page(&store, find(Some("7"), None, None)).await),
        ["c"]
    );
    assert!(every_page(&store, find(Some("99"), None, None))
        .await
        .is_empty());
    assert!(
        every_page(&store, find(Some("re_a"), None, None))
            .await
            .is_empty(),
        "an object id is not a target"
    );
    // Combined: with each other and with the other filters.
    assert_eq!(
        ids(&every_page(&store, find(Some("1042"), Some("re_a"), None)).await),
        ["a", "b"]
    );
    assert_eq!(
        ids(&every_page(&store, find(Some("1042"), None, Some("ka"))).await),
        ["a"]
    );
    let mut unknown = find(Some("1042"), None, None);
    unknown.state = Some(IntentState::Unknown);
    assert_eq!(ids(&every_page(&store, unknown).await), ["b"]);
    let page = store
        .list_verdicts(&find(Some("1042"), None, None))
        .await
        .unwrap();
    assert_eq!(
        (page.items.len(), page.total),
        (2, 3),
        "a page and the total"
    );
    assert!(page.next_cursor.is_some());

    // A later verdict replaces what the intent is found by: b's response no longer names
    // re_a, its object moved to order 1043.
    let mut b2 = b.clone();
    b2.attempts[0].object_id = None;
    b2.objects[0].target = Some("1043".into());
    b2.audited_at = Timestamp(b.audited_at.0 + 1);
    store.put_verdicts(vec![b2.clone()]).await.unwrap();
    assert_eq!(
        ids(&every_page(&store, find(None, Some("re_a"), None)).await),
        ["a"]
    );
    assert_eq!(
        ids(&every_page(&store, find(Some("1042"), None, None)).await),
        ["a", "orphan:re_z"]
    );
    assert_eq!(
        ids(&every_page(&store, find(Some("1043"), None, None)).await),
        ["b"]
    );
    // A removed pseudo-intent is found by nothing.
    store
        .put_derived(Derived {
            removed: vec!["orphan:re_z".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        ids(&every_page(&store, find(Some("1042"), None, None)).await),
        ["a"]
    );
    assert!(every_page(&store, find(None, Some("re_z"), None))
        .await
        .is_empty());
}

/// Escalations page newest first by a cursor, filtered by status (withdrawn too), severity and
/// the tool they carry (their intent's), with the total that matched; nothing is cut off however
/// many there are.
async fn escalations_page_with_totals<H: Harness>(h: &H) {
    let store = h.open().await;
    let statuses = EscalationStatus::ALL;
    let tool_of = |i: usize| ["issue_refund", "send_email"][i % 2];
    let mut all = Vec::new();
    for i in 0..1_100usize {
        let mut e = escalation(
            &format!("esc-{i:04}"),
            statuses[i % 4],
            at(100 + (i as i64 / 3)),
            1,
        );
        e.tool = Some(tool_of(i).into());
        if i % 7 == 0 {
            e.severity = Severity::High;
        }
        all.push(e);
    }
    store.put_escalations(all.clone()).await.unwrap();
    store
        .put_verdicts(
            all.iter()
                .enumerate()
                .map(|(i, e)| verdict(&e.intent_id, Some(tool_of(i)), IntentState::Unknown, at(5)))
                .collect(),
        )
        .await
        .unwrap();
    let walk = |mut f: EscalationFilter| {
        let store = &store;
        async move {
            let mut ids = Vec::new();
            loop {
                let page = store.page_escalations(&f).await.unwrap();
                assert!(page.items.len() <= f.effective_limit());
                ids.extend(page.items.iter().map(|e| e.id.clone()));
                match page.next_cursor {
                    Some(c) => f.cursor = Some(c),
                    None => {
                        assert_eq!(page.total, ids.len() as u64, "{f:?}");
                        return ids;
                    }
                }
            }
        }
    };
    let want = |pred: &dyn Fn(usize, &Escalation) -> bool| {
        let mut v: Vec<&Escalation> = all
            .iter()
            .enumerate()
            .filter(|(i, e)| pred(*i, e))
            .map(|(_, e)| e)
            .collect();
        v.sort_by(|a, b| (b.listed_at, &b.id).cmp(&(a.listed_at, &a.id)));
        v.into_iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    };
    let got = walk(EscalationFilter {
        limit: 1000,
        ..Default::default()
    })
    .await;
    assert_eq!(got.len(), 1_100, "never cut off");
    assert_eq!(got, want(&|_, _| true));
    let first = store
        .page_escalations(&EscalationFilter {
            status: Some(EscalationStatus::Open),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((first.items.len(), first.total), (100, 275));
    for status in statuses {
        assert_eq!(
            walk(EscalationFilter {
                status: Some(status),
                limit: 97,
                ..Default::default()
            })
            .await,
            want(&|_, e| e.status == status),
            "{status:?}"
        );
    }
    assert_eq!(
        walk(EscalationFilter {
            severity: Some(Severity::High),
            tool: Some("send_email".into()),
            status: Some(EscalationStatus::Withdrawn),
            limit: 3,
            ..Default::default()
        })
        .await,
        want(&|i, e| e.severity == Severity::High
            && tool_of(i) == "send_email"
            && e.status == EscalationStatus::Withdrawn)
    );
    let counts: BTreeMap<EscalationStatus, u64> = store
        .escalation_counts()
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(counts.get(&EscalationStatus::Withdrawn), Some(&275));
    // The unresolved readers leave withdrawn ones out.
    let unresolved = reckon::store::unresolved_escalations(&store, false)
        .await
        .unwrap();
    assert_eq!(unresolved.len(), 550);
    assert!(unresolved.iter().all(|e| e.status.unresolved()));
    assert!(matches!(
        store
            .page_escalations(&EscalationFilter {
                cursor: Some("!!".into()),
                ..Default::default()
            })
            .await,
        Err(StoreError::BadCursor(_))
    ));
}

/// An escalation's overrides (who took it over, when, with which action, from whom) are stored
/// and read back, by the engine's writes and by a person's compare-and-set.
async fn overrides_are_stored<H: Harness>(h: &H) {
    let store = h.open().await;
    let claimed = escalation("esc-o", EscalationStatus::Claimed, at(100), 2);
    store.put_escalations(vec![claimed.clone()]).await.unwrap();
    assert_eq!(
        store.get_escalation("esc-o").await.unwrap(),
        Some(claimed.clone())
    );
    let mut taken = claimed.clone();
    taken.claimed_by = Some("bo".into());
    taken.overrides.push(Override {
        by: "bo".into(),
        at: at(200),
        action: OverrideAction::Claim,
        held_by: "alice".into(),
    });
    taken.version = 3;
    assert_eq!(
        store
            .swap_escalation(claimed.clone(), taken.clone())
            .await
            .unwrap(),
        Swap::Written
    );
    assert_eq!(
        store.get_escalation("esc-o").await.unwrap(),
        Some(taken.clone())
    );
    let mut resolved = taken.clone();
    resolved.status = EscalationStatus::Resolved;
    resolved.resolved_by = Some("cy".into());
    resolved.resolved_at = Some(at(300));
    resolved.resolution = Some("reversed".into());
    resolved.overrides.push(Override {
        by: "cy".into(),
        at: at(300),
        action: OverrideAction::Resolve,
        held_by: "bo".into(),
    });
    resolved.version = 4;
    store.put_escalations(vec![resolved.clone()]).await.unwrap();
    assert_eq!(
        store.get_escalation("esc-o").await.unwrap(),
        Some(resolved.clone())
    );
    assert_eq!(
        store.load_escalations().await.unwrap(),
        vec![resolved.clone()]
    );
    let withdrawn = escalation("esc-w", EscalationStatus::Withdrawn, at(50), 2);
    store
        .put_escalations(vec![withdrawn.clone()])
        .await
        .unwrap();
    assert_eq!(
        store.get_escalation("esc-w").await.unwrap(),
        Some(withdrawn)
    );
}

/// Through the engine: claiming or resolving an escalation someone else holds is refused
/// naming who holds it, and with the override it is done and recorded, durable in the store.
async fn person_actions_override_a_holder<H: Harness>(h: &H) {
    let store = h.open().await;
    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    let email = ev(sent(1, "intent-o", "send_email", 0)
        .timeout()
        .told("unknown"));
    ingest(&engine, vec![email]).await;
    let id = engine
        .verdict("intent-o")
        .await
        .and_then(|v| v.escalation_id.clone())
        .expect("escalated");
    engine.claim(&id, "ana", false).await.expect("claim");
    let refused = engine.claim(&id, "bo", false).await.expect_err("held");
    assert!(refused.to_string().contains("ana"), "{refused}");
    let refused = engine
        .resolve(&id, "bo", "reversed", None, false)
        .await
        .expect_err("held");
    assert!(refused.to_string().contains("claimed by ana"), "{refused}");
    let taken = engine.claim(&id, "bo", true).await.expect("override");
    assert_eq!(taken.claimed_by.as_deref(), Some("bo"));
    assert_eq!(
        taken
            .overrides
            .iter()
            .map(|o| (o.by.as_str(), o.action, o.held_by.as_str()))
            .collect::<Vec<_>>(),
        [("bo", OverrideAction::Claim, "ana")]
    );
    // The holder resolving their own needs no override; ana's is not hers any more.
    let done = engine
        .resolve(&id, "ana", "reversed_second_refund", None, true)
        .await
        .expect("resolve with override");
    assert_eq!(done.status, EscalationStatus::Resolved);
    assert_eq!(done.overrides.len(), 2);
    assert_eq!(done.overrides[1].held_by, "bo");
    assert_eq!(done.overrides[1].action, OverrideAction::Resolve);
    assert_eq!(store.get_escalation(&id).await.unwrap(), Some(done));
    stop(engine, tasks).await;
}

/// On ClickHouse a lookup reads ranges of two primary indexes (the lookup table's by kind and
/// value, the verdicts' by intent id), never a whole table: with 200,000 other intents and
/// their lookups stored, a store whose queries may read at most 100,000 rows (the server
/// refuses a query past that) still finds and counts order 1042's intent, while the listing
/// without a lookup, which must read every verdict, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_lookups_read_an_index_not_the_table() {
    let Some(ch) = ClickHouse::new().await else {
        return;
    };
    let store = ch.open().await;
    let mut v = verdict(
        "zz-order",
        Some("issue_refund"),
        IntentState::Completed,
        at(5),
    );
    v.target = Some("1042-x".into());
    store.put_verdicts(vec![v.clone()]).await.unwrap();
    drop(store);
    // Opened before the bulk arrives (opening reads the verdicts' highest version).
    let mut bounded = ch.config.clone();
    bounded.query_settings = vec![
        ("max_rows_to_read".into(), "100000".into()),
        ("read_overflow_mode".into(), "throw".into()),
    ];
    let store = ClickHouseStore::open(bounded).await.expect("open bounded");
    let client = ch.client();
    for sql in [
        "INSERT INTO reckon_verdicts (intent_id, state, decision, doc, deleted, version)
         SELECT concat('bulk-', toString(number)), 'completed', 'none', '{}', 0, 1
         FROM system.numbers LIMIT 200000",
        "INSERT INTO reckon_intent_list (listed_at, listed_ns, intent_id, state, doc, deleted, version)
         SELECT toDateTime(number), number * 1000000000, concat('bulk-', toString(number)),
             'completed', '{}', 0, 1
         FROM system.numbers LIMIT 200000",
        "INSERT INTO reckon_intent_lookup (kind, value, intent_id, verdict_version)
         SELECT 'key', concat('k-', toString(number)), concat('bulk-', toString(number)), 1
         FROM system.numbers LIMIT 200000",
        "INSERT INTO reckon_intent_lookup (kind, value, intent_id, verdict_version)
         SELECT 'target', toString(number % 5000), concat('bulk-', toString(number)), 1
         FROM system.numbers LIMIT 200000",
    ] {
        client.query(sql).execute().await.expect("bulk rows");
    }
    for filter in [
        VerdictFilter {
            target: Some("1042-x".into()),
            ..Default::default()
        },
        VerdictFilter {
            object_id: Some("re_1".into()),
            ..Default::default()
        },
        VerdictFilter {
            key: Some("k".into()),
            state: Some(IntentState::Completed),
            ..Default::default()
        },
    ] {
        let page = store.list_verdicts(&filter).await.expect("a lookup");
        assert_eq!(
            (page.items.len(), page.total),
            (1, 1),
            "{filter:?}: {:?}",
            page.items
        );
        assert_eq!(page.items[0], VerdictDoc::from_verdict(&v));
    }
    let everything = store.list_verdicts(&VerdictFilter::default()).await;
    assert!(
        everything.is_err(),
        "the bound is real: a listing of every verdict reads past it"
    );
    drop(store);
    ch.finish().await;
}

/// DESIGN.md "HTTP API": pages follow a stable order, so an intent that exists for the whole walk
/// appears exactly once however much changes meanwhile. An intent is listed where its first
/// verdict's first event put it: an earlier attempt arriving late moves its first_seen, not
/// its place, in the engine, in the store, after a restart and after more evidence.
async fn listing_places_hold_through_late_evidence_and_restarts<H: Harness>(h: &H) {
    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    ingest(&engine, vec![ev(refund(1, "late", 100).timeout())]).await;
    ingest(&engine, vec![ev(refund(2, "middle", 75).timeout())]).await;
    ingest(&engine, vec![ev(refund(3, "late", 50).timeout())]).await;
    let v = engine.verdict("late").await.expect("late");
    assert_eq!((v.first_seen, v.listed_at), (at(50), at(100)));
    stop(engine, tasks).await;

    let walk = |store: AnyStore| async move {
        let mut order = Vec::new();
        let mut filter = VerdictFilter {
            limit: 1,
            ..Default::default()
        };
        loop {
            let page = store.list_verdicts(&filter).await.expect("a page");
            order.extend(page.items.into_iter().map(|d| d.intent_id));
            match page.next_cursor {
                Some(c) => filter.cursor = Some(c),
                None => return order,
            }
        }
    };
    assert_eq!(walk(h.open_any().await).await, ["late", "middle"]);
    let store = h.open_any().await;
    let listed: std::collections::BTreeMap<String, Timestamp> = store
        .listed_of(vec!["late".into(), "middle".into(), "nobody".into()])
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(
        listed,
        [
            ("late".to_string(), at(100)),
            ("middle".to_string(), at(75))
        ]
        .into()
    );

    // A restart recomputes first_seen from the events; the place comes from the store.
    let (engine, tasks, _) = engine_on(h.open_any().await).await;
    audited_again(&engine).await;
    let v = engine
        .verdict("late")
        .await
        .expect("late after the restart");
    assert_eq!((v.first_seen, v.listed_at), (at(50), at(100)));
    // A walk that began before more evidence and a new intent arrived meets each intent once.
    let store = h.open_any().await;
    let first = store
        .list_verdicts(&VerdictFilter {
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(first.items[0].intent_id, "late");
    ingest(
        &engine,
        vec![
            ev(refund(4, "late", 10).timeout()),
            ev(refund(5, "newer", 200).timeout()),
        ],
    )
    .await;
    stop(engine, tasks).await;
    let rest = store
        .list_verdicts(&VerdictFilter {
            limit: 10,
            cursor: first.next_cursor,
            ..Default::default()
        })
        .await
        .unwrap();
    let rest: Vec<String> = rest.items.into_iter().map(|d| d.intent_id).collect();
    assert_eq!(rest, ["middle"], "late stays where the walk met it");
    assert_eq!(walk(h.open_any().await).await, ["newer", "late", "middle"]);
}
