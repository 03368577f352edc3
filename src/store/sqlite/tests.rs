//! Tests against real SQLite files, each in its own temporary directory (parallel-safe).

use std::collections::HashSet;

use rusqlite::Connection;
use tempfile::TempDir;

use super::{schema, SqliteStore, FILE_NAME};
use crate::codec::VerdictDoc;
use crate::model::*;
use crate::store::{Appended, Page, Store, StoreError, VerdictFilter};
use crate::test_builders::{
    attempt_at, escalation, readback_at, record_at, span, verdict, with_findings, AttemptExt,
};

fn attempt(n: u64) -> Event {
    let a = attempt_at(
        span(n),
        &format!("intent-{}", n % 7),
        "issue_refund",
        Timestamp(1_700_000_000_000_000_000 + n as i64),
        Timestamp(1_700_000_000_500_000_000 + n as i64),
    )
    .key(&format!("key-{n}"))
    .object(&format!("re_{n}"), "succeeded")
    .told("succeeded")
    .args(format!(r#"{{"amount": "45.00", "order_id": "{n}"}}"#));
    Event::Attempt(if n % 2 == 0 { a.http(200) } else { a.timeout() })
}

fn readback(n: u64) -> Event {
    let object = format!("re_{n}");
    let found: &[&str] = if n % 2 == 0 {
        &[]
    } else {
        &[object.as_str(), "re_x"]
    };
    Event::Readback(readback_at(
        span(1_000_000 + n),
        &format!("intent-{n}"),
        "get_refund",
        Timestamp(1_700_000_001_000_000_000 + n as i64),
        Timestamp(1_700_000_001_100_000_000 + n as i64),
        found,
    ))
}

fn record(n: u64) -> Event {
    Event::Record(RecordObservation {
        source: "stripe".into(),
        kind: Some("refund".into()),
        amount: match n % 3 {
            0 => Some(Amount::Major(Decimal::parse("45.00").expect("literal"))),
            1 => Some(Amount::Minor(4500)),
            _ => None,
        },
        currency: Some("usd".into()),
        target: Some("order-1042".into()),
        created_at: if n % 2 == 0 {
            Some(Timestamp(1_700_000_000_000_000_000))
        } else {
            None
        },
        ..record_at(
            Some(&format!("intent-{n}")),
            &format!("re_{n}"),
            if n % 2 == 0 { "pending" } else { "succeeded" },
            Timestamp(1_700_000_002_000_000_000 + n as i64),
        )
    })
}

fn mixed(range: std::ops::Range<u64>) -> Vec<Event> {
    range
        .map(|n| match n % 3 {
            0 => attempt(n),
            1 => readback(n),
            _ => record(n),
        })
        .collect()
}

fn raw(dir: &TempDir) -> Connection {
    Connection::open(dir.path().join(FILE_NAME)).expect("raw open")
}

/// The schema as a binary of version `last` left it: its migrations applied and recorded.
fn migrate_through(conn: &Connection, last: i64) {
    conn.execute_batch(
        "CREATE TABLE reckon_schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);",
    )
    .unwrap();
    for m in schema::MIGRATIONS.iter().filter(|m| m.version <= last) {
        conn.execute_batch(m.sql).unwrap();
        conn.execute(
            "INSERT INTO reckon_schema_migrations VALUES (?1, 0)",
            [m.version],
        )
        .unwrap();
    }
}

#[tokio::test]
async fn append_is_idempotent() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let batch = mixed(0..30);
    assert_eq!(
        store.append(batch.clone()).await.unwrap(),
        vec![Appended::New; 30]
    );
    assert_eq!(
        store.append(batch.clone()).await.unwrap(),
        vec![Appended::Duplicate; 30]
    );
    assert_eq!(
        store.append(batch.clone()).await.unwrap(),
        vec![Appended::Duplicate; 30]
    );
    assert_eq!(
        store.load_events().await.unwrap(),
        batch,
        "each event once, in ingest order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_appenders_all_durable() {
    let dir = TempDir::new().unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(dir.path()).unwrap());
    let mut tasks = Vec::new();
    for t in 0..50u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for b in 0..10u64 {
                let start = t * 1000 + b * 20;
                let batch = mixed(start..start + 20);
                // Re-send half of the previous batch too, as a retrying exporter would.
                let mut with_retry = batch.clone();
                if b > 0 {
                    with_retry.extend(mixed(start - 10..start));
                }
                let news = store.append(with_retry).await.expect("acknowledged");
                assert!(news[..20].iter().all(|n| n.is_new()));
                assert!(news[20..].iter().all(|n| *n == Appended::Duplicate));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let events = store.load_events().await.unwrap();
    assert_eq!(events.len(), 50 * 10 * 20);
    let unique: HashSet<_> = events.iter().collect();
    assert_eq!(unique.len(), events.len());
}

#[tokio::test]
async fn everything_survives_reopen() {
    let dir = TempDir::new().unwrap();
    let events = mixed(0..40);
    let v = with_findings(
        verdict(
            "i-1",
            Some("issue_refund"),
            IntentState::Completed,
            Timestamp(500),
        ),
        &[FindingKind::StuckPending],
    );
    let e = escalation("esc-1", EscalationStatus::Resolved, Timestamp(700), 4);
    {
        let store = SqliteStore::open(dir.path()).unwrap();
        store.append(events.clone()).await.unwrap();
        store.put_verdicts(vec![v.clone()]).await.unwrap();
        store.put_escalations(vec![e.clone()]).await.unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(store.load_events().await.unwrap(), events);
    assert_eq!(
        store.get_verdict("i-1").await.unwrap(),
        Some(VerdictDoc::from_verdict(&v))
    );
    assert_eq!(store.load_escalations().await.unwrap(), vec![e.clone()]);
    assert_eq!(store.get_escalation("esc-1").await.unwrap(), Some(e));
    // The ingest sequence continues after a reopen instead of restarting.
    store.append(vec![attempt(5000)]).await.unwrap();
    assert_eq!(
        store.load_events().await.unwrap().last(),
        Some(&attempt(5000))
    );
}

#[tokio::test]
async fn verdict_filters_and_cursor_pagination() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut all = Vec::new();
    for i in 0..237 {
        let tool = if i % 3 == 0 {
            "send_email"
        } else {
            "issue_refund"
        };
        let state = IntentState::ALL[i % 5];
        // Many ties on last_event, so the intent_id tie-break matters.
        let mut v = verdict(
            &format!("intent-{i:04}"),
            Some(tool),
            state,
            Timestamp((i / 4) as i64),
        );
        if i % 10 == 0 {
            v = with_findings(v, &[FindingKind::DuplicateEffect, FindingKind::NewKeyRetry]);
        }
        all.push(v);
    }
    store.put_verdicts(all.clone()).await.unwrap();

    // Newest first by listing place, then intent id: neither ever changes.
    let expect = |pred: &dyn Fn(&Verdict) -> bool| {
        let mut listed: Vec<&Verdict> = all.iter().filter(|v| pred(v)).collect();
        listed.sort_by(|a, b| (b.listed_at, &b.intent_id).cmp(&(a.listed_at, &a.intent_id)));
        listed
            .into_iter()
            .map(|v| v.intent_id.clone())
            .collect::<Vec<_>>()
    };
    let walk = |mut filter: VerdictFilter| {
        let store = &store;
        async move {
            let mut ids = Vec::new();
            let mut pages = 0;
            let mut total = None;
            loop {
                let page = store.list_verdicts(&filter).await.unwrap();
                assert!(page.items.len() <= filter.effective_limit());
                // Every page says how many matched in all.
                assert!(total.is_none_or(|t| t == page.total));
                total = Some(page.total);
                ids.extend(page.items.into_iter().map(|d| d.intent_id));
                pages += 1;
                assert!(pages < 1000, "pagination does not terminate");
                match page.next_cursor {
                    Some(c) => filter.cursor = Some(c),
                    None => {
                        assert_eq!(
                            total,
                            Some(ids.len() as u64),
                            "the total is what a walk returns"
                        );
                        return ids;
                    }
                }
            }
        }
    };

    let everything = walk(VerdictFilter {
        limit: 7,
        ..Default::default()
    })
    .await;
    assert_eq!(
        everything,
        expect(&|_| true),
        "all pages, no duplicates or gaps, newest first"
    );
    assert_eq!(
        walk(VerdictFilter {
            limit: 1000,
            ..Default::default()
        })
        .await
        .len(),
        237
    );

    let f = VerdictFilter {
        state: Some(IntentState::Pending),
        limit: 5,
        ..Default::default()
    };
    assert_eq!(walk(f).await, expect(&|v| v.state == IntentState::Pending));
    let f = VerdictFilter {
        tool: Some("send_email".into()),
        limit: 9,
        ..Default::default()
    };
    assert_eq!(
        walk(f).await,
        expect(&|v| v.tool.as_deref() == Some("send_email"))
    );
    let f = VerdictFilter {
        finding: Some(FindingKind::NewKeyRetry),
        limit: 4,
        ..Default::default()
    };
    let with_finding = walk(f).await;
    assert_eq!(with_finding.len(), 24);
    assert_eq!(with_finding, expect(&|v| !v.findings.is_empty()));
    let f = VerdictFilter {
        finding: Some(FindingKind::OrphanRecord),
        ..Default::default()
    };
    assert!(walk(f).await.is_empty());
    let f = VerdictFilter {
        since: Some(Timestamp(30)),
        state: Some(IntentState::Completed),
        tool: Some("issue_refund".into()),
        limit: 3,
        ..Default::default()
    };
    assert_eq!(
        walk(f).await,
        expect(&|v| v.last_event.0 >= 30
            && v.state == IntentState::Completed
            && v.tool.as_deref() == Some("issue_refund"))
    );

    // The last page has no cursor; an exact fit does not produce an empty extra page.
    let page = store
        .list_verdicts(&VerdictFilter {
            limit: 237,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((page.items.len(), page.next_cursor), (237, None));

    for bad in ["not base64!", "bm9jb2xvbg", "eHl6OmE"] {
        let f = VerdictFilter {
            cursor: Some(bad.into()),
            ..Default::default()
        };
        assert!(
            matches!(store.list_verdicts(&f).await, Err(StoreError::BadCursor(_))),
            "{bad}"
        );
    }

    assert_eq!(
        store
            .get_verdict("intent-0010")
            .await
            .unwrap()
            .map(|d| d.findings.len()),
        Some(2)
    );
    assert_eq!(store.get_verdict("nope").await.unwrap(), None);
    store
        .delete_verdicts(vec!["intent-0010".into(), "intent-0011".into()])
        .await
        .unwrap();
    assert_eq!(store.get_verdict("intent-0010").await.unwrap(), None);
    assert_eq!(walk(VerdictFilter::default()).await.len(), 235);
    let findings: i64 = raw(&dir)
        .query_row(
            "SELECT count(*) FROM reckon_findings WHERE intent_id = 'intent-0010'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(findings, 0, "deleting a verdict deletes its findings");
}

#[tokio::test]
async fn verdict_upsert_replaces_findings() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let v = verdict(
        "i-1",
        Some("issue_refund"),
        IntentState::Unknown,
        Timestamp(10),
    );
    store
        .put_verdicts(vec![with_findings(
            v.clone(),
            &[FindingKind::DuplicateEffect, FindingKind::NewKeyRetry],
        )])
        .await
        .unwrap();
    let mut later = with_findings(v, &[FindingKind::StuckPending]);
    later.state = IntentState::Pending;
    later.last_event = Timestamp(20);
    store.put_verdicts(vec![later.clone()]).await.unwrap();

    let kinds: Vec<String> = {
        let conn = raw(&dir);
        let mut stmt = conn
            .prepare("SELECT kind FROM reckon_findings WHERE intent_id = 'i-1'")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(kinds, vec!["stuck_pending".to_string()]);
    let (state, finding_kinds, last): (String, String, i64) = raw(&dir)
        .query_row(
            "SELECT state, finding_kinds, last_event FROM reckon_verdicts WHERE intent_id = 'i-1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (state.as_str(), finding_kinds.as_str(), last),
        ("pending", ",stuck_pending,", 20)
    );
    assert_eq!(
        store.get_verdict("i-1").await.unwrap(),
        Some(VerdictDoc::from_verdict(&later))
    );
    let f = VerdictFilter {
        finding: Some(FindingKind::DuplicateEffect),
        ..Default::default()
    };
    assert!(store.list_verdicts(&f).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn escalation_keeps_highest_version() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let v2 = escalation("e1", EscalationStatus::Claimed, Timestamp(100), 2);
    store.put_escalations(vec![v2.clone()]).await.unwrap();
    store
        .put_escalations(vec![escalation(
            "e1",
            EscalationStatus::Open,
            Timestamp(100),
            1,
        )])
        .await
        .unwrap();
    assert_eq!(store.get_escalation("e1").await.unwrap(), Some(v2));
    let v3 = escalation("e1", EscalationStatus::Resolved, Timestamp(100), 3);
    // Older and newer in one call, in either order: the newest wins.
    store
        .put_escalations(vec![
            v3.clone(),
            escalation("e1", EscalationStatus::Open, Timestamp(100), 1),
        ])
        .await
        .unwrap();
    assert_eq!(store.get_escalation("e1").await.unwrap(), Some(v3.clone()));

    store
        .put_escalations(vec![
            escalation("e2", EscalationStatus::Open, Timestamp(300), 1),
            escalation("e3", EscalationStatus::Open, Timestamp(200), 1),
            escalation("e4", EscalationStatus::Claimed, Timestamp(400), 1),
        ])
        .await
        .unwrap();
    let open: Vec<String> = store
        .list_escalations(Some(EscalationStatus::Open), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(open, vec!["e2", "e3"], "newest first");
    assert_eq!(store.list_escalations(None, 2).await.unwrap().len(), 2);
    assert_eq!(store.list_escalations(None, 0).await.unwrap().len(), 4);
    assert_eq!(store.load_escalations().await.unwrap().len(), 4);
    assert_eq!(store.get_escalation("missing").await.unwrap(), None);
}

#[tokio::test]
async fn report_counts() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut a = with_findings(
        verdict(
            "a",
            Some("issue_refund"),
            IntentState::Completed,
            Timestamp(100),
        ),
        &[
            FindingKind::DuplicateEffect,
            FindingKind::DuplicateEffect,
            FindingKind::MisreportedOutcome,
        ],
    );
    a.decision = Decision::Escalate;
    let b = verdict(
        "b",
        Some("issue_refund"),
        IntentState::Unknown,
        Timestamp(200),
    );
    let mut c = with_findings(
        verdict("c", None, IntentState::Unknown, Timestamp(300)),
        &[FindingKind::OrphanRecord],
    );
    c.attempts.clear();
    let old = with_findings(
        verdict(
            "old",
            Some("send_email"),
            IntentState::Pending,
            Timestamp(5),
        ),
        &[FindingKind::StuckPending],
    );
    store.put_verdicts(vec![a, b, c, old]).await.unwrap();
    store
        .put_escalations(vec![
            escalation("e1", EscalationStatus::Open, Timestamp(150), 1),
            escalation("e2", EscalationStatus::Resolved, Timestamp(10), 1),
        ])
        .await
        .unwrap();

    let r = store.report(None, Timestamp(1_000_000_000)).await.unwrap();
    assert_eq!(r.since, None);
    assert_eq!(r.generated_at, "1970-01-01T00:00:01.000000000Z");
    assert_eq!((r.intents, r.attempts, r.findings), (4, 6, 5));
    assert_eq!(r.by_state["unknown"], 2);
    assert_eq!(
        r.by_state["failed_before_execution"], 0,
        "zero counts present"
    );
    assert_eq!(r.by_state.len(), IntentState::ALL.len());
    assert_eq!((r.by_decision["escalate"], r.by_decision["none"]), (1, 3));
    assert_eq!(r.by_decision.len(), Decision::ALL.len());
    assert_eq!(
        (
            r.by_attempt_class["unknown"],
            r.by_attempt_class["succeeded"]
        ),
        (3, 3)
    );
    assert_eq!(r.by_attempt_class.len(), AttemptClass::ALL.len());
    assert_eq!(r.by_finding["duplicate_effect"], 2);
    assert_eq!(r.by_finding.len(), FindingKind::ALL.len());
    assert_eq!(
        (
            r.by_severity["critical"],
            r.by_severity["medium"],
            r.by_severity["high"]
        ),
        (2, 3, 0)
    );
    let refund = &r.by_tool["issue_refund"];
    assert_eq!(
        (
            refund.intents,
            refund.attempts,
            refund.findings,
            refund.duplicate_effects
        ),
        (2, 4, 3, 1)
    );
    assert_eq!(
        (refund.by_state["completed"], refund.by_state["pending"]),
        (1, 0)
    );
    assert_eq!(r.by_tool["(none)"].intents, 1);
    assert_eq!(r.by_tool["send_email"].by_state["pending"], 1);
    assert_eq!(
        (
            r.escalations["open"],
            r.escalations["resolved"],
            r.escalations["claimed"]
        ),
        (1, 1, 0)
    );

    let r = store
        .report(Some(Timestamp(150)), Timestamp(1_000_000_000))
        .await
        .unwrap();
    assert_eq!(r.since.as_deref(), Some("1970-01-01T00:00:00.000000150Z"));
    assert_eq!((r.intents, r.attempts, r.findings), (2, 2, 1));
    assert!(!r.by_tool.contains_key("send_email"));
    assert_eq!(r.by_finding["orphan_record"], 1);
    assert_eq!((r.escalations["open"], r.escalations["resolved"]), (1, 0));
    serde_json::to_string(&r).unwrap();
}

#[tokio::test]
async fn migrates_a_v1_file_keeping_data() {
    let dir = TempDir::new().unwrap();
    let v = with_findings(
        verdict(
            "legacy",
            Some("issue_refund"),
            IntentState::Unknown,
            Timestamp(77),
        ),
        &[
            FindingKind::UnresolvedUnknown,
            FindingKind::NoIdempotencyContract,
        ],
    );
    {
        // What a v1 binary left behind.
        let conn = raw(&dir);
        conn.execute_batch(
            "CREATE TABLE reckon_schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
             INSERT INTO reckon_schema_migrations VALUES (1, 0);",
        )
        .unwrap();
        conn.execute_batch(schema::V1_SQL).unwrap();
        conn.execute(
            "INSERT INTO reckon_verdicts (intent_id, tool, contract, state, decision, first_seen, last_event,
                audited_at, finding_kinds, doc) VALUES ('legacy', 'issue_refund', 'payments.refund', 'unknown',
                'none', 1, 77, 78, '', ?1)",
            [serde_json::to_string(&VerdictDoc::from_verdict(&v)).unwrap()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO reckon_attempts (seq, trace_id, span_id, intent_id, tool, started_at, ended_at, span_error)
             VALUES (1, '0102030405060708090a0b0c0d0e0f10', '0102030405060708', 'legacy', 'issue_refund', 5, 6, 1)",
            [],
        )
        .unwrap();
    }
    assert!(matches!(
        SqliteStore::open_read_only(dir.path()),
        Err(StoreError::SchemaOutdated { found: 1, known }) if known == super::schema_version()
    ));
    let store = SqliteStore::open(dir.path()).unwrap();
    let events = store.load_events().await.unwrap();
    assert_eq!(events.len(), 1);
    let Event::Attempt(a) = &events[0] else {
        panic!("not an attempt")
    };
    assert_eq!(
        (
            a.intent_id.as_str(),
            a.span_error,
            a.idempotency_key.clone()
        ),
        ("legacy", true, None)
    );
    assert_eq!(
        store.get_verdict("legacy").await.unwrap(),
        // Listed where its first_seen column put it (v11).
        Some(VerdictDoc::from_verdict(&v).listed(Timestamp(1)))
    );
    // Backfilled from the v1 documents: findings table and attempt-class counts.
    let f = VerdictFilter {
        finding: Some(FindingKind::UnresolvedUnknown),
        ..Default::default()
    };
    assert_eq!(store.list_verdicts(&f).await.unwrap().items.len(), 1);
    let r = store.report(None, Timestamp(0)).await.unwrap();
    assert_eq!(
        (
            r.attempts,
            r.by_attempt_class["unknown"],
            r.by_severity["high"]
        ),
        (2, 1, 2)
    );
    let versions: Vec<i64> = {
        let conn = raw(&dir);
        let mut stmt = conn
            .prepare("SELECT version FROM reckon_schema_migrations ORDER BY version")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(versions, (1..=12).collect::<Vec<i64>>());
    // Opening again is a no-op.
    drop(store);
    SqliteStore::open(dir.path()).unwrap();
}

/// v6 adds each verdict's contract version: a v5 file keeps its verdicts (their documents do
/// not say a version: empty), and a verdict written after the upgrade has it in the document and
/// the column.
#[tokio::test]
async fn migrates_a_v5_file_to_contract_versions() {
    let dir = TempDir::new().unwrap();
    let mut old = verdict(
        "before",
        Some("issue_refund"),
        IntentState::Unknown,
        Timestamp(5),
    );
    old.contract_version = String::new();
    {
        let conn = raw(&dir);
        migrate_through(&conn, 5);
        // A v5 document: no contract_version member at all.
        let mut doc = serde_json::to_value(VerdictDoc::from_verdict(&old)).unwrap();
        doc.as_object_mut().unwrap().remove("contract_version");
        conn.execute(
            "INSERT INTO reckon_verdicts (intent_id, tool, contract, state, decision, first_seen, last_event,
                audited_at, finding_kinds, doc) VALUES ('before', 'issue_refund', 'payments.refund', 'unknown',
                'none', 1, 5, 6, '', ?1)",
            [doc.to_string()],
        )
        .unwrap();
    }
    assert!(matches!(
        SqliteStore::open_read_only(dir.path()),
        Err(StoreError::SchemaOutdated { found: 5, .. })
    ));
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(
        store.get_verdict("before").await.unwrap(),
        Some(VerdictDoc::from_verdict(&old).listed(Timestamp(1))),
        "an old document reads with an empty version"
    );
    let new = verdict(
        "after",
        Some("issue_refund"),
        IntentState::Unknown,
        Timestamp(7),
    );
    assert_eq!(new.contract_version, "0123456789abcdef");
    store.put_verdicts(vec![new.clone()]).await.unwrap();
    assert_eq!(
        store
            .get_verdict("after")
            .await
            .unwrap()
            .map(|d| d.contract_version),
        Some(new.contract_version.clone())
    );
    let column = |id: &str| -> String {
        raw(&dir)
            .query_row(
                "SELECT contract_version FROM reckon_verdicts WHERE intent_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(column("before"), "");
    assert_eq!(column("after"), "0123456789abcdef");
    // A rewrite of the old row (the engine re-audits it) fills its column.
    store
        .put_verdicts(vec![verdict(
            "before",
            Some("issue_refund"),
            IntentState::Unknown,
            Timestamp(5),
        )])
        .await
        .unwrap();
    assert_eq!(column("before"), "0123456789abcdef");
}

/// v12 gives each escalation its intent's tool, from the verdicts: an orphan record's (no tool)
/// and one with no verdict stay without.
#[tokio::test]
async fn migrates_a_v11_file_to_escalations_with_their_tool() {
    let dir = TempDir::new().unwrap();
    {
        let conn = raw(&dir);
        migrate_through(&conn, 11);
        for (intent, tool) in [("a", Some("issue_refund")), ("orphan:re_9", None)] {
            conn.execute(
                "INSERT INTO reckon_verdicts (intent_id, tool, contract, state, decision, first_seen,
                    last_event, audited_at, finding_kinds, doc) VALUES (?1, ?2, NULL, 'unknown',
                    'escalate', 1, 5, 6, '', '{}')",
                rusqlite::params![intent, tool],
            )
            .unwrap();
        }
        for (id, intent) in [
            ("esc_a_1", "a"),
            ("esc_o_1", "orphan:re_9"),
            ("esc_x_1", "x"),
        ] {
            conn.execute(
                "INSERT INTO reckon_escalations (id, intent_id, status, severity, opened_at,
                    findings, version, listed_at) VALUES (?1, ?2, 'open', 'high', 10, '[]', 1, 10)",
                [id, intent],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut tools = Vec::new();
    for id in ["esc_a_1", "esc_o_1", "esc_x_1"] {
        tools.push(store.get_escalation(id).await.unwrap().expect(id).tool);
    }
    assert_eq!(tools, [Some("issue_refund".to_string()), None, None]);
    let page = store
        .page_escalations(&crate::store::EscalationFilter {
            tool: Some("issue_refund".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((page.total, page.items[0].id.as_str()), (1, "esc_a_1"));
}

#[tokio::test]
async fn refuses_a_newer_schema() {
    let dir = TempDir::new().unwrap();
    drop(SqliteStore::open(dir.path()).unwrap());
    raw(&dir)
        .execute("INSERT INTO reckon_schema_migrations VALUES (99, 0)", [])
        .unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::SchemaTooNew {
                found: 99,
                known
            } if known == super::schema_version()
        ),
        "{err}"
    );
    assert!(err.to_string().contains("newer"));
    assert!(matches!(
        SqliteStore::open_read_only(dir.path()),
        Err(StoreError::SchemaTooNew { .. })
    ));
}

#[tokio::test]
async fn corrupt_rows_are_errors_naming_table_and_column() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    store.append(mixed(0..6)).await.unwrap();
    store
        .put_verdicts(vec![verdict(
            "i-1",
            None,
            IntentState::Unknown,
            Timestamp(1),
        )])
        .await
        .unwrap();
    store
        .put_escalations(vec![escalation(
            "e1",
            EscalationStatus::Open,
            Timestamp(1),
            1,
        )])
        .await
        .unwrap();

    let conn = raw(&dir);
    conn.execute(
        "UPDATE reckon_attempts SET trace_id = 'zz' WHERE seq = 1",
        [],
    )
    .unwrap();
    let err = store.load_events().await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Corrupt {
                table: "reckon_attempts",
                column: "trace_id",
                ..
            }
        ),
        "{err}"
    );
    conn.execute(
        "UPDATE reckon_attempts SET trace_id = '0102030405060708090a0b0c0d0e0f10'",
        [],
    )
    .unwrap();
    conn.execute("UPDATE reckon_records SET amount_unit = 'furlongs'", [])
        .unwrap();
    assert!(matches!(
        store.load_events().await,
        Err(StoreError::Corrupt {
            table: "reckon_records",
            column: "amount_unit",
            ..
        })
    ));
    conn.execute("UPDATE reckon_verdicts SET doc = '{not json'", [])
        .unwrap();
    assert!(matches!(
        store.get_verdict("i-1").await,
        Err(StoreError::Corrupt {
            table: "reckon_verdicts",
            column: "doc",
            ..
        })
    ));
    conn.execute("UPDATE reckon_verdicts SET state = 'sideways'", [])
        .unwrap();
    assert!(matches!(
        store.report(None, Timestamp(0)).await,
        Err(StoreError::Corrupt {
            table: "reckon_verdicts",
            column: "state",
            ..
        })
    ));
    conn.execute("UPDATE reckon_escalations SET status = 42", [])
        .unwrap();
    assert!(matches!(
        store.load_escalations().await,
        Err(StoreError::Corrupt {
            table: "reckon_escalations",
            column: "status",
            ..
        })
    ));
}

#[tokio::test]
async fn read_only_open_of_running_and_stopped_server() {
    let dir = TempDir::new().unwrap();
    assert!(matches!(
        SqliteStore::open_read_only(dir.path()),
        Err(StoreError::Io { .. })
    ));
    let store = SqliteStore::open(dir.path()).unwrap();
    store.append(mixed(0..9)).await.unwrap();
    store
        .put_verdicts(vec![verdict(
            "i-1",
            Some("issue_refund"),
            IntentState::Completed,
            Timestamp(1),
        )])
        .await
        .unwrap();

    let reader = SqliteStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.load_events().await.unwrap().len(), 9);
    // The running server keeps writing; the reader sees committed data.
    store.append(mixed(9..12)).await.unwrap();
    assert_eq!(reader.load_events().await.unwrap().len(), 12);
    assert!(matches!(
        reader.append(mixed(20..21)).await,
        Err(StoreError::ReadOnly)
    ));
    assert!(matches!(
        reader
            .put_verdicts(vec![verdict("x", None, IntentState::Unknown, Timestamp(1))])
            .await,
        Err(StoreError::ReadOnly)
    ));
    drop(reader);
    drop(store);

    let reader = SqliteStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.report(None, Timestamp(0)).await.unwrap().intents, 1);
    assert_eq!(reader.load_events().await.unwrap().len(), 12);
}

/// Start-up asks about every open intent at once: past `SPLIT_READ_AT` ids the question is
/// split across read connections. The answer must be the one question's: every event once
/// (a record found by its intent in one part and by its key in another too), in ingest order;
/// and every route's owner once.
#[tokio::test]
async fn a_question_split_across_connections_answers_as_one() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let n = (super::SPLIT_READ_AT + 1000) as u64;
    let mut events = Vec::new();
    for i in 0..n {
        let intent = format!("intent-{i}");
        events.push(Event::Attempt(
            attempt_at(
                span(i + 1),
                &intent,
                "issue_refund",
                Timestamp(1_700_000_000_000_000_000 + i as i64),
                Timestamp(1_700_000_000_500_000_000 + i as i64),
            )
            .key(&format!("key-{i}")),
        ));
        if i % 97 == 0 {
            let mut r = record_at(
                Some(&intent),
                &format!("re_{i}"),
                "succeeded",
                Timestamp(1_700_000_002_000_000_000 + i as i64),
            );
            r.idempotency_key = Some(format!("key-{i}"));
            events.push(Event::Record(r));
        }
    }
    for chunk in events.chunks(5000) {
        store
            .append_received(chunk.to_vec(), Timestamp(1_700_000_003_000_000_000))
            .await
            .unwrap();
    }
    // Intents asked in reverse, keys in order: a record's intent and key land in different
    // parts of the split question.
    let found = store
        .events_touching(crate::store::EventQuery {
            intents: (0..n).rev().map(|i| format!("intent-{i}")).collect(),
            keys: (0..n).map(|i| format!("key-{i}")).collect(),
            objects: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(found, events, "every event once, in ingest order");

    let owners: Vec<crate::model::Route> = (0..n)
        .map(|i| crate::model::Route {
            route: format!("k:key-{}", i / 2),
            intent_id: format!("intent-{i}"),
        })
        .collect();
    store
        .put_derived(crate::store::Derived {
            routes: owners,
            ..Default::default()
        })
        .await
        .unwrap();
    let asked: Vec<String> = (0..n / 2).map(|i| format!("k:key-{i}")).collect();
    let mut want: Vec<String> = (0..n).map(|i| format!("intent-{i}")).collect();
    want.sort();
    assert_eq!(store.route_owners(asked).await.unwrap(), want);
}

/// `target=`, `object_id=` and `key=` are searches of the lookup table's primary key, never a
/// scan of the verdicts; the plan SQLite makes for the listing's own query says so.
#[tokio::test]
async fn lookup_is_a_search() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut v = verdict(
        "i-1",
        Some("issue_refund"),
        IntentState::Completed,
        Timestamp(10),
    );
    v.target = Some("1042".into());
    store.put_verdicts(vec![v]).await.unwrap();
    let conn = raw(&dir);
    for (kind, value) in [("target", "1042"), ("object", "re_1"), ("key", "k")] {
        let filter = VerdictFilter {
            target: (kind == "target").then(|| value.into()),
            object_id: (kind == "object").then(|| value.into()),
            key: (kind == "key").then(|| value.into()),
            ..Default::default()
        };
        let (conditions, args) = super::verdicts::verdict_conditions(&filter);
        let sql = format!(
            "EXPLAIN QUERY PLAN SELECT intent_id, doc FROM reckon_verdicts v{conditions} ORDER BY v.intent_id LIMIT 101"
        );
        let mut stmt = conn.prepare(&sql).unwrap();
        let plan: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(
            plan.contains("SEARCH reckon_intent_lookup USING PRIMARY KEY (kind=? AND value=?)"),
            "{kind}: {plan}"
        );
        assert!(
            !plan.contains("SCAN reckon_intent_lookup"),
            "{kind}: the lookup table is not scanned: {plan}"
        );
        // The verdicts are read by their primary key, for the ids the lookup found.
        assert!(
            plan.contains("SEARCH v USING INDEX sqlite_autoindex_reckon_verdicts_1 (intent_id=?)")
                || plan.contains(
                    "SEARCH v USING INDEX sqlite_autoindex_reckon_verdicts_1 (intent_id>?)"
                )
                || plan.contains("SEARCH v USING PRIMARY KEY (intent_id=?)"),
            "{kind}: verdicts by their key: {plan}"
        );
        assert_eq!(
            store
                .list_verdicts(&filter)
                .await
                .unwrap()
                .items
                .iter()
                .map(|d| d.intent_id.as_str())
                .collect::<Vec<_>>(),
            vec!["i-1"],
            "{kind}"
        );
    }
}

/// Take a file back to v10, as a build from before v11 left it.
/// As a v10 file holds it: v12 and v11 undone.
fn undo_v11(conn: &Connection) {
    conn.execute_batch(
        "ALTER TABLE reckon_escalations DROP COLUMN tool;
         DELETE FROM reckon_schema_migrations WHERE version = 12;
         DROP INDEX reckon_verdicts_listed;
         DROP INDEX reckon_verdicts_state;
         CREATE INDEX reckon_verdicts_state ON reckon_verdicts (state, last_event DESC, intent_id);
         DROP INDEX reckon_verdicts_tool;
         CREATE INDEX reckon_verdicts_tool ON reckon_verdicts (tool, last_event DESC, intent_id);
         DROP INDEX reckon_verdicts_unsettled;
         CREATE INDEX reckon_verdicts_unsettled ON reckon_verdicts (intent_id, fingerprint) WHERE settled = 0;
         ALTER TABLE reckon_verdicts DROP COLUMN listed_at;
         DROP INDEX reckon_escalations_status;
         DROP INDEX reckon_escalations_recent;
         CREATE INDEX reckon_escalations_status ON reckon_escalations (status, opened_at DESC, id);
         CREATE INDEX reckon_escalations_recent ON reckon_escalations (opened_at DESC, id);
         ALTER TABLE reckon_escalations DROP COLUMN listed_at;
         DELETE FROM reckon_schema_migrations WHERE version = 11;",
    )
    .unwrap();
}

/// v11 gives the verdicts and escalations of a v10 file their listing places from the times
/// they hold, and the listings page by them; a later write keeps the place.
#[tokio::test]
async fn v11_lists_what_a_v10_file_held() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut verdicts = Vec::new();
    for i in 0..5 {
        let mut v = verdict(
            &format!("i-{i}"),
            Some("issue_refund"),
            IntentState::Completed,
            Timestamp(100),
        );
        v.first_seen = Timestamp(10 + i);
        v.listed_at = Timestamp(999);
        verdicts.push(v);
    }
    store.put_verdicts(verdicts.clone()).await.unwrap();
    let mut e = escalation("e-1", EscalationStatus::Open, Timestamp(50), 1);
    e.listed_at = Timestamp(999);
    store.put_escalations(vec![e.clone()]).await.unwrap();
    drop(store);
    undo_v11(&raw(&dir));

    let store = SqliteStore::open(dir.path()).unwrap();
    let page = store
        .list_verdicts(&VerdictFilter {
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.total, 5);
    let ids = |p: &Page<crate::codec::VerdictDoc>| {
        p.items
            .iter()
            .map(|d| d.intent_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&page), ["i-4", "i-3"], "newest first_seen first");
    let listed = store
        .listed_of(vec!["i-0".into(), "i-4".into(), "none".into()])
        .await
        .unwrap();
    assert_eq!(
        listed
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>(),
        [
            ("i-0".to_string(), Timestamp(10)),
            ("i-4".to_string(), Timestamp(14))
        ]
        .into()
    );
    // A rewrite with an earlier first_seen (and whatever place it says) keeps the place.
    let mut moved = verdicts[4].clone();
    moved.first_seen = Timestamp(1);
    moved.listed_at = Timestamp(1);
    store.put_verdicts(vec![moved]).await.unwrap();
    let page = store
        .list_verdicts(&VerdictFilter {
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&page), ["i-4", "i-3"]);
    let next = store
        .list_verdicts(&VerdictFilter {
            limit: 2,
            cursor: page.next_cursor.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&next), ["i-2", "i-1"]);
    let stored = store.load_escalations().await.unwrap();
    assert_eq!(stored[0].listed_at, e.opened_at, "from its opened_at");
}

/// The migration fills the lookup table from the verdicts a store held before it.
#[tokio::test]
async fn v10_backfills_lookups_from_stored_verdicts() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut v = verdict(
        "i-1",
        Some("issue_refund"),
        IntentState::Completed,
        Timestamp(10),
    );
    v.target = Some("1042".into());
    v.attempts[0].object_id = Some("re_0".into());
    store.put_verdicts(vec![v.clone()]).await.unwrap();
    drop(store);
    let conn = raw(&dir);
    let expect = |conn: &Connection| -> Vec<(String, String)> {
        let mut stmt = conn
            .prepare("SELECT kind, value FROM reckon_intent_lookup WHERE intent_id = 'i-1' ORDER BY 1, 2")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let written = expect(&conn);
    assert_eq!(
        written,
        [
            ("key", "k"),
            ("object", "re_0"),
            ("object", "re_1"),
            ("target", "1042")
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
    // As a store from before v10 would hold it: no lookups, no overrides; then the migration.
    undo_v11(&conn);
    conn.execute_batch(
        "DROP TABLE reckon_intent_lookup;
         ALTER TABLE reckon_escalations DROP COLUMN overrides;
         DELETE FROM reckon_schema_migrations WHERE version = 10;",
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(expect(&raw(&dir)), written, "backfilled from the documents");
    let page = store
        .list_verdicts(&VerdictFilter {
            target: Some("1042".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.total, 1);
}

/// Escalations page newest first with a cursor, filtered by status, severity and the tool they
/// carry, with the total that matched; nothing is cut off.
#[tokio::test]
async fn escalation_pages() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let tool_of = |i: usize| {
        if i % 2 == 0 {
            "issue_refund"
        } else {
            "send_email"
        }
    };
    let mut all = Vec::new();
    for i in 0..25i64 {
        let status = [
            EscalationStatus::Open,
            EscalationStatus::Claimed,
            EscalationStatus::Withdrawn,
        ][(i % 3) as usize];
        let mut e = escalation(&format!("e{i:02}"), status, Timestamp(1_000 + i / 2), 1);
        if i % 5 == 0 {
            e.severity = Severity::High;
        }
        e.tool = Some(tool_of(i as usize).into());
        all.push(e);
    }
    store.put_escalations(all.clone()).await.unwrap();
    store
        .put_verdicts(
            all.iter()
                .enumerate()
                .map(|(i, e)| {
                    verdict(
                        &e.intent_id,
                        Some(tool_of(i)),
                        IntentState::Unknown,
                        Timestamp(5),
                    )
                })
                .collect(),
        )
        .await
        .unwrap();
    let walk = |mut f: crate::store::EscalationFilter| {
        let store = &store;
        async move {
            let mut ids = Vec::new();
            loop {
                let page = store.page_escalations(&f).await.unwrap();
                ids.extend(page.items.iter().map(|e| e.id.clone()));
                match page.next_cursor {
                    Some(c) => f.cursor = Some(c),
                    None => return (ids, page.total),
                }
            }
        }
    };
    let expect = |pred: &dyn Fn(usize, &Escalation) -> bool| {
        let mut v: Vec<&Escalation> = all
            .iter()
            .enumerate()
            .filter(|(i, e)| pred(*i, e))
            .map(|(_, e)| e)
            .collect();
        v.sort_by(|a, b| (b.listed_at, &b.id).cmp(&(a.listed_at, &a.id)));
        let ids: Vec<String> = v.iter().map(|e| e.id.clone()).collect();
        let n = ids.len() as u64;
        (ids, n)
    };
    use crate::store::EscalationFilter as F;
    assert_eq!(
        walk(F {
            limit: 4,
            ..Default::default()
        })
        .await,
        expect(&|_, _| true)
    );
    assert_eq!(
        walk(F {
            status: Some(EscalationStatus::Withdrawn),
            limit: 2,
            ..Default::default()
        })
        .await,
        expect(&|_, e| e.status == EscalationStatus::Withdrawn)
    );
    assert_eq!(
        walk(F {
            severity: Some(Severity::High),
            limit: 2,
            ..Default::default()
        })
        .await,
        expect(&|_, e| e.severity == Severity::High)
    );
    assert_eq!(
        walk(F {
            tool: Some("send_email".into()),
            status: Some(EscalationStatus::Open),
            limit: 3,
            ..Default::default()
        })
        .await,
        expect(&|i, e| tool_of(i) == "send_email" && e.status == EscalationStatus::Open)
    );
    let f = F {
        cursor: Some("bm9jb2xvbg".into()),
        ..Default::default()
    };
    assert!(matches!(
        store.page_escalations(&f).await,
        Err(StoreError::BadCursor(_))
    ));
    // A cursor of the intents' listing is not one of this listing.
    let intents = crate::store::IntentCursor {
        listed_at: Timestamp(1),
        intent_id: "x".into(),
    }
    .encode();
    let f = F {
        cursor: Some(intents),
        ..Default::default()
    };
    assert!(matches!(
        store.page_escalations(&f).await,
        Err(StoreError::BadCursor(_))
    ));
}
