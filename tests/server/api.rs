//! The read side of the API over a few dozen intents: listing with filters and cursor pages,
//! the report, escalation evidence bundles, metrics and health.

use std::collections::HashSet;

use serde_json::Value;

use super::support::*;

/// What [`populate`] made, by kind.
struct Population {
    completed_recent: Vec<String>,
    completed_old: Vec<String>,
    drafts_unknown: Vec<String>,
    emails_unknown: Vec<String>,
}

impl Population {
    fn total(&self) -> usize {
        self.completed_recent.len()
            + self.completed_old.len()
            + self.drafts_unknown.len()
            + self.emails_unknown.len()
    }
}

/// 20 settled refunds from the last minutes, 4 from three days ago, 6 timed-out bill drafts
/// (unknown, safe to retry), 3 timed-out emails (escalated: no idempotency contract).
async fn populate(s: &Server) -> Population {
    let refund = |i: &str, start| {
        ToolSpan::new("issue_refund", start, 0.3)
            .intent(i)
            .key(&unique("k"))
            .args(refund_args("10.00"))
            .http(200)
            .object(&unique("re"), "succeeded")
    };
    let p = Population {
        completed_recent: (0..20).map(|_| unique("ref")).collect(),
        completed_old: (0..4).map(|_| unique("old")).collect(),
        drafts_unknown: (0..6).map(|_| unique("drf")).collect(),
        emails_unknown: (0..3).map(|_| unique("eml")).collect(),
    };
    let recent: Vec<ToolSpan> = p
        .completed_recent
        .iter()
        .enumerate()
        .map(|(n, i)| refund(i, ago(10.0 * MIN - n as f64)))
        .collect();
    let old: Vec<ToolSpan> = p
        .completed_old
        .iter()
        .enumerate()
        .map(|(n, i)| refund(i, ago(72.0 * HOUR - n as f64)))
        .collect();
    let drafts: Vec<ToolSpan> = p
        .drafts_unknown
        .iter()
        .enumerate()
        .map(|(n, i)| {
            ToolSpan::new("create_bill_draft", ago(3.0 * MIN - n as f64), 30.0)
                .intent(i)
                .key(&unique("dk"))
                .args(draft_args("ACME", "120.00"))
                .timeout()
        })
        .collect();
    let emails: Vec<ToolSpan> = p
        .emails_unknown
        .iter()
        .enumerate()
        .map(|(n, i)| {
            ToolSpan::new("send_email", ago(2.0 * MIN - n as f64), 30.0)
                .intent(i)
                .timeout()
                .told("unknown")
        })
        .collect();
    export_grpc(s, &recent.iter().collect::<Vec<_>>()).await;
    export_http(s, &old.iter().chain(&drafts).collect::<Vec<_>>()).await;
    export_grpc(s, &emails.iter().collect::<Vec<_>>()).await;
    p
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["intent_id"].as_str().unwrap().to_string())
        .collect()
}

fn set(v: &[String]) -> HashSet<String> {
    v.iter().cloned().collect()
}

/// Follows `next_cursor` from `path` (which has a `limit`) to the end; every page but the last is full.
async fn all_pages(s: &Server, path: &str, limit: usize) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let url = match &cursor {
            Some(c) => format!("{path}&cursor={c}"),
            None => path.to_string(),
        };
        let (code, page) = s.get(&url).await;
        assert_eq!(code, 200, "{url}: {page}");
        let n = page["items"].as_array().unwrap().len();
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(n, limit, "a page before the last is full");
                cursor = Some(c.to_string());
            }
            None => return items,
        }
    }
    panic!("pagination of {path} did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_intents_with_filters_and_cursor_pages() {
    let s = Server::start().await;
    let p = populate(&s).await;
    let total = p.total();
    // The listing is read from the store, which the engine writes a few ms behind the verdicts
    // (and ClickHouse counts the total in a query of its own, with no snapshot shared with the
    // page's: while verdicts are still being written the two may differ for a moment).
    let everything = s
        .poll("/api/v1/intents", |b| {
            b["items"].as_array().unwrap().len() == total && b["total"] == total
        })
        .await;
    assert_eq!(everything["next_cursor"], Value::Null);

    let listed = |path: &'static str| {
        let s = &s;
        async move {
            let (code, body) = s.get(path).await;
            assert_eq!(code, 200, "{path}: {body}");
            assert_eq!(body["next_cursor"], Value::Null, "{path}");
            set(&ids(&body))
        }
    };
    let all_completed: HashSet<String> = set(&p.completed_recent)
        .union(&set(&p.completed_old))
        .cloned()
        .collect();
    let all_unknown: HashSet<String> = set(&p.drafts_unknown)
        .union(&set(&p.emails_unknown))
        .cloned()
        .collect();
    assert_eq!(
        listed("/api/v1/intents?state=completed").await,
        all_completed
    );
    assert_eq!(listed("/api/v1/intents?state=unknown").await, all_unknown);
    assert_eq!(
        listed("/api/v1/intents?state=pending").await,
        HashSet::new()
    );
    assert_eq!(
        listed("/api/v1/intents?tool=create_bill_draft").await,
        set(&p.drafts_unknown)
    );
    assert_eq!(
        listed("/api/v1/intents?tool=send_email&state=unknown").await,
        set(&p.emails_unknown)
    );
    assert_eq!(
        listed("/api/v1/intents?finding=no_idempotency_contract").await,
        set(&p.emails_unknown)
    );
    assert_eq!(
        listed("/api/v1/intents?finding=duplicate_effect").await,
        HashSet::new()
    );
    let recent: HashSet<String> = set(&p.completed_recent)
        .union(&all_unknown)
        .cloned()
        .collect();
    assert_eq!(listed("/api/v1/intents?since=24h").await, recent);
    assert_eq!(
        listed("/api/v1/intents?state=completed&since=1h").await,
        set(&p.completed_recent)
    );
    let two_days_ago = rfc3339(ago(48.0 * HOUR)).replace('+', "%2B");
    let (_, body) = s
        .get(&format!("/api/v1/intents?since={two_days_ago}"))
        .await;
    assert_eq!(set(&ids(&body)), recent);

    // Cursor pages: 33 intents, 7 at a time, each once, by intent id.
    let items = all_pages(&s, "/api/v1/intents?limit=7", 7).await;
    let got: Vec<String> = items
        .iter()
        .map(|v| v["intent_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got.len(), total);
    assert_eq!(set(&got).len(), total, "no intent on two pages");
    assert_eq!(set(&got), set(&ids(&everything)));
    // Newest first by where each was first listed, then by id: neither ever changes.
    let mut sorted: Vec<(String, String)> = items
        .iter()
        .map(|v| {
            let listed = v["listed_at"].as_str().expect("listed_at").to_string();
            (listed, v["intent_id"].as_str().unwrap().to_string())
        })
        .collect();
    sorted.sort_by(|a, b| b.cmp(a));
    let sorted: Vec<String> = sorted.into_iter().map(|(_, id)| id).collect();
    assert_eq!(
        got, sorted,
        "newest first by listed_at, then id: an order that never changes"
    );
    assert_eq!(everything["total"], total, "the total beside the page");
    // Pages of a filtered listing.
    let items = all_pages(&s, "/api/v1/intents?state=completed&limit=5", 5).await;
    let got: Vec<String> = items
        .iter()
        .map(|v| v["intent_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got.len(), all_completed.len());
    assert_eq!(set(&got), all_completed);
    // A listed verdict is the full document.
    let one = &items[0];
    for field in [
        "intent_id",
        "tool",
        "contract",
        "state",
        "decision",
        "attempts",
        "objects",
        "findings",
    ] {
        assert!(one.get(field).is_some(), "{field} missing from {one:#}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_counts() {
    let s = Server::start().await;
    let p = populate(&s).await;
    let total = p.total() as u64;
    let report = s
        .poll("/api/v1/report", |r| {
            r["intents"] == total && r["escalations"]["open"] == 3
        })
        .await;
    assert_eq!(report["attempts"], total, "{report:#}");
    assert_eq!(report["by_state"]["completed"], 24);
    assert_eq!(report["by_state"]["unknown"], 9);
    assert_eq!(report["by_decision"]["none"], 24);
    assert_eq!(report["by_decision"]["retry_same_key"], 6);
    assert_eq!(report["by_decision"]["escalate"], 3);
    assert_eq!(report["by_attempt_class"]["succeeded"], 24);
    assert_eq!(report["by_attempt_class"]["unknown"], 9);
    assert_eq!(report["by_finding"]["no_idempotency_contract"], 3);
    assert_eq!(report["findings"], 3);
    assert_eq!(report["by_severity"]["high"], 3);
    assert_eq!(report["by_tool"]["issue_refund"]["intents"], 24);
    assert_eq!(report["by_tool"]["create_bill_draft"]["intents"], 6);
    assert_eq!(report["by_tool"]["send_email"]["findings"], 3);
    assert_eq!(report["since"], Value::Null);

    let (code, recent) = s.get("/api/v1/report?since=24h").await;
    assert_eq!(code, 200);
    assert_eq!(recent["intents"], total - 4, "{recent:#}");
    assert_eq!(recent["by_state"]["completed"], 20);
    assert!(recent["since"].is_string());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalation_show_has_the_verdict_and_the_contract() {
    let s = Server::start().await;
    let p = populate(&s).await;
    let (code, list) = s.get("/api/v1/escalations?status=open").await;
    assert_eq!(code, 200);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    let open: HashSet<String> = items
        .iter()
        .map(|e| e["intent_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(open, set(&p.emails_unknown));
    assert_eq!(
        s.get("/api/v1/escalations?status=claimed").await.1["items"],
        serde_json::json!([])
    );

    let id = items[0]["id"].as_str().unwrap();
    let (code, e) = s.get(&format!("/api/v1/escalations/{id}")).await;
    assert_eq!(code, 200, "{e}");
    assert_eq!(e["id"], id);
    assert_eq!(e["status"], "open");
    assert_eq!(e["severity"], "high");
    assert_eq!(e["verdict"]["intent_id"], e["intent_id"]);
    assert_verdict(
        &e["verdict"],
        "unknown / escalate / no_idempotency_contract",
    );
    assert_eq!(e["verdict"]["escalation_id"], id);
    assert_eq!(e["verdict"]["attempts"][0]["error_type"], "timeout");
    let c = &e["contract"];
    assert_eq!(c["name"], "notifications.email");
    assert_eq!(c["idempotency"], "none");
    assert_eq!(c["tools"], serde_json::json!(["send_email"]));
    assert_eq!(c["key_retention"], Value::Null);
    assert_eq!(c["max_attempts"], 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_readiness() {
    let s = Server::start().await;
    let (code, body) = s.get("/healthz").await;
    assert_eq!((code, &body["status"]), (200, &serde_json::json!("ok")));
    let (code, body) = s.get("/readyz").await;
    assert_eq!((code, &body["status"]), (200, &serde_json::json!("ready")));
    assert_eq!(body["intents"], 0);
    let p = populate(&s).await;
    assert_eq!(s.get("/readyz").await.1["intents"], p.total());
    s.stop().await;
}

/// `/metrics` in Prometheus text format, counting what this server saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text() {
    let s = Server::start().await;
    populate(&s).await;
    let resp = s
        .post_otlp(
            "/v1/traces",
            "application/json",
            false,
            b"{not json".to_vec(),
        )
        .await;
    assert_eq!(resp.status(), 400);
    let resp = s.http.get(s.api("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = resp.text().await.unwrap();
    let samples: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert!(!samples.is_empty(), "no samples in /metrics: {text:?}");
    for l in &samples {
        // reckon's own series, and the standard process ones.
        assert!(
            l.starts_with("reckon_") || l.starts_with("process_"),
            "not a reckon_ or process_ metric: {l}"
        );
        let value = l.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "not a sample line: {l}");
    }
    for line in [
        "# TYPE reckon_spans_received_total counter",
        "reckon_spans_received_total{transport=\"grpc\"} 23",
        "reckon_spans_received_total{transport=\"http\"} 10",
        "reckon_tool_attempts_total{tool=\"issue_refund\",class=\"succeeded\"} 24",
        "reckon_tool_attempts_total{tool=\"create_bill_draft\",class=\"unknown\"} 6",
        "reckon_tool_attempts_total{tool=\"send_email\",class=\"unknown\"} 3",
        "reckon_findings_total{kind=\"no_idempotency_contract\",severity=\"high\"} 3",
        "reckon_ingest_rejections_total{reason=\"decode_error\"} 1",
        "reckon_open_escalations 3",
        "reckon_intents 33",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    s.stop().await;
}

/// Every item of a paged listing from `path` (which has a `limit`), following `next_cursor`,
/// with `between` run before each next page (given the items listed so far): what changes while
/// a person walks the pages. Returns the items and the total each page said.
async fn walk_while<F, Fut>(s: &Server, path: &str, mut between: F) -> (Vec<Value>, Vec<u64>)
where
    F: FnMut(&[Value]) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut items = Vec::new();
    let mut totals = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..1000 {
        let url = match &cursor {
            Some(c) => format!("{path}&cursor={c}"),
            None => path.to_string(),
        };
        let (code, body) = s.get(&url).await;
        assert_eq!(code, 200, "{url}: {body}");
        items.extend(body["items"].as_array().unwrap().iter().cloned());
        totals.push(body["total"].as_u64().expect("a total beside every page"));
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return (items, totals),
        }
        let _ = page;
        between(&items).await;
    }
    panic!("pagination of {path} did not end");
}

/// The walk that lost 91-94 of 300 intents when pages followed the last activity: records
/// arrive for intents all over the listing while the pages are read (each changes its intent's
/// state and latest event). Every intent that exists for the whole walk appears exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_over_the_intents_returns_each_once_while_records_arrive() {
    let s = Server::start().await;
    const N: usize = 120;
    let intents: Vec<String> = (0..N).map(|_| unique("walk")).collect();
    let t0 = ago(30.0 * MIN);
    let spans: Vec<ToolSpan> = intents
        .iter()
        .enumerate()
        .map(|(n, i)| {
            ToolSpan::new("issue_refund", after(t0, n as f64), 30.0)
                .intent(i)
                .key(&format!("key-{i}"))
                .args(refund_args("10.00"))
                .timeout()
        })
        .collect();
    export_grpc(&s, &spans.iter().collect::<Vec<_>>()).await;
    s.poll("/api/v1/intents?limit=1", |b| b["total"] == N).await;
    // Each page, records arrive for three intents the walk has not listed yet, newer than
    // everything: an order by latest activity moves them before the cursor, and the walk never
    // sees them (what lost 91-94 of 300); an order that never changes keeps them ahead.
    let sent = std::sync::Mutex::new(Vec::<String>::new());
    let (items, totals) = walk_while(&s, "/api/v1/intents?limit=7", |listed| {
        let listed: HashSet<String> = listed
            .iter()
            .map(|v| v["intent_id"].as_str().unwrap().to_string())
            .collect();
        let done: HashSet<String> = sent.lock().unwrap().iter().cloned().collect();
        let batch: Vec<String> = intents
            .iter()
            .filter(|i| !listed.contains(*i) && !done.contains(*i))
            .take(3)
            .cloned()
            .collect();
        let s = &s;
        let sent = &sent;
        async move {
            if batch.is_empty() {
                return;
            }
            let records: Vec<Value> = batch
                .iter()
                .map(|i| {
                    serde_json::json!({"kind": "refund", "object_id": format!("re-{i}"),
                        "intent_id": i, "idempotency_key": format!("key-{i}"), "status": "succeeded",
                        "amount": "10.00", "currency": "usd", "target": "1042",
                        "observed_at": rfc3339(std::time::SystemTime::now())})
                })
                .collect();
            s.records(&Value::Array(records)).await;
            // Its verdict reaches the store behind the engine: the next page is read after.
            for i in &batch {
                s.poll(&format!("/api/v1/intents?object_id=re-{i}"), |b| {
                    b["items"][0]["state"] == "completed"
                })
                .await;
            }
            sent.lock().unwrap().extend(batch);
        }
    })
    .await;
    let got: Vec<String> = items
        .iter()
        .map(|v| v["intent_id"].as_str().unwrap().to_string())
        .collect();
    let sent = sent.into_inner().unwrap();
    assert!(
        sent.len() >= 30,
        "records arrived during the walk: {}",
        sent.len()
    );
    let mut seen = HashSet::new();
    let twice: Vec<&String> = got.iter().filter(|i| !seen.insert(*i)).collect();
    assert!(twice.is_empty(), "listed twice: {twice:?}");
    let missing: Vec<&String> = intents.iter().filter(|i| !seen.contains(*i)).collect();
    assert!(
        missing.is_empty(),
        "never listed: {} of {N}: {missing:?}",
        missing.len()
    );
    assert_eq!(got.len(), N);
    assert!(totals.iter().all(|t| *t == N as u64), "{totals:?}");
    s.stop().await;
}

/// An unknown query parameter is a 400 with the JSON error body naming it, never a silently
/// unfiltered list; so is an empty lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_parameters_are_refused_by_name() {
    let s = Server::start().await;
    for (path, name) in [
        ("/api/v1/intents?statee=unknown", "statee"),
        ("/api/v1/intents?foo=1", "foo"),
        ("/api/v1/intents?state=unknown&targett=1042", "targett"),
        ("/api/v1/escalations?foo=1", "foo"),
        ("/api/v1/escalations?status=open&sev=high", "sev"),
        ("/api/v1/intents?target=", "target"),
        ("/api/v1/escalations?status=gone", "status"),
        ("/api/v1/escalations?severity=low", "severity"),
        ("/api/v1/intents?cursor=bm9jb2xvbg", "cursor"),
        ("/api/v1/escalations?cursor=!!", "cursor"),
    ] {
        let (code, body) = s.get(path).await;
        assert_eq!(code, 400, "{path}: {body}");
        let want = if name == "cursor" {
            "bad_cursor"
        } else {
            "bad_request"
        };
        assert_eq!(body["error"]["code"], want, "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(name), "{path}: {message}");
    }
    for path in [
        "/api/v1/intents?target=1042",
        "/api/v1/intents?object_id=re_1&key=k&state=unknown&limit=5",
        "/api/v1/escalations?status=withdrawn&tool=send_email&severity=high&limit=5",
    ] {
        let (code, body) = s.get(path).await;
        assert_eq!(code, 200, "{path}: {body}");
        assert_eq!(body["total"], 0, "{path}: {body}");
    }
    s.stop().await;
}

/// "The customer says order 1042 was refunded twice": the intents an order, a downstream
/// object or a key touches, by the intents' parameters and by the downstream's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intents_by_order_object_and_key() {
    let s = Server::start().await;
    let (first, second, other, email) = (
        unique("o1042a"),
        unique("o1042b"),
        unique("o7"),
        unique("eml"),
    );
    let (k1, k2, k3) = (unique("k"), unique("k"), unique("k"));
    let (re1, re2, re3) = (unique("re"), unique("re"), unique("re"));
    let t0 = ago(5.0 * MIN);
    let spans = [
        ToolSpan::new("issue_refund", t0, 0.3)
            .intent(&first)
            .key(&k1)
            .args(refund_args("45.00"))
            .http(200)
            .object(&re1, "succeeded"),
        // Content capture off: no arguments, so its order is known from its record only.
        ToolSpan::new("issue_refund", after(t0, 10.0), 30.0)
            .intent(&second)
            .key(&k2)
            .timeout(),
        ToolSpan::new("issue_refund", after(t0, 20.0), 0.3)
            .intent(&other)
            .key(&k3)
            .args(r#"{"order_id":"7","amount":5,"currency":"usd"}"#.to_string())
            .http(200)
            .object(&re3, "succeeded"),
        ToolSpan::new("send_email", after(t0, 30.0), 30.0)
            .intent(&email)
            .timeout()
            .told("unknown"),
    ];
    export_grpc(&s, &spans.iter().collect::<Vec<_>>()).await;
    s.records(
        &serde_json::json!({"kind": "refund", "object_id": re2, "intent_id": second,
        "idempotency_key": k2, "status": "succeeded", "amount": "45.00", "currency": "usd",
        "target": "1042", "observed_at": rfc3339(after(t0, 40.0))}),
    )
    .await;
    let found = |query: String| {
        let s = &s;
        async move {
            let body = s
                .poll(&format!("/api/v1/intents?{query}"), |b| {
                    b["total"].as_u64().is_some()
                })
                .await;
            let mut ids = ids(&body);
            ids.sort();
            (ids, body["total"].as_u64().unwrap())
        }
    };
    let mut both = vec![first.clone(), second.clone()];
    both.sort();
    s.poll("/api/v1/intents?target=1042", |b| b["total"] == 2)
        .await;
    assert_eq!(found("target=1042".into()).await, (both.clone(), 2));
    assert_eq!(found("target=7".into()).await, (vec![other.clone()], 1));
    assert_eq!(
        found(format!("object_id={re2}")).await,
        (vec![second.clone()], 1)
    );
    assert_eq!(
        found(format!("object_id={re1}")).await,
        (vec![first.clone()], 1)
    );
    assert_eq!(found(format!("key={k3}")).await, (vec![other.clone()], 1));
    assert_eq!(
        found(format!("key={k1}&target=1042")).await,
        (vec![first.clone()], 1)
    );
    assert_eq!(found("target=1042&state=unknown".into()).await, (vec![], 0));
    assert_eq!(found("target=99".into()).await, (vec![], 0));
    assert_eq!(
        found(format!("object_id={k1}")).await,
        (vec![], 0),
        "a key is not an object"
    );
    // Paged like the whole listing, with the total.
    let (code, page) = s.get("/api/v1/intents?target=1042&limit=1").await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(
        (ids(&page).len(), &page["total"]),
        (1, &serde_json::json!(2))
    );
    let c = page["next_cursor"].as_str().expect("a second page");
    let (_, rest) = s
        .get(&format!("/api/v1/intents?target=1042&limit=1&cursor={c}"))
        .await;
    assert_eq!(rest["next_cursor"], Value::Null);
    let mut walked = ids(&page);
    walked.extend(ids(&rest));
    let mut newest_first = Vec::new();
    for id in &both {
        let listed = s.verdict(id).await["listed_at"]
            .as_str()
            .unwrap()
            .to_string();
        newest_first.push((listed, id.clone()));
    }
    newest_first.sort_by(|a, b| b.cmp(a));
    let newest_first: Vec<String> = newest_first.into_iter().map(|(_, id)| id).collect();
    assert_eq!(walked, newest_first);
    // The verdict names its order.
    assert_eq!(s.verdict(&first).await["target"], "1042");
    assert_eq!(s.verdict(&second).await["target"], Value::Null);
    s.stop().await;
}

/// The escalation queue pages like the intents, with the total that matched, and is never cut
/// short in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalations_page_with_the_total() {
    let s = Server::start().await;
    const N: usize = 13;
    let emails: Vec<String> = (0..N).map(|_| unique("eml")).collect();
    let spans: Vec<ToolSpan> = emails
        .iter()
        .enumerate()
        .map(|(n, i)| {
            ToolSpan::new("send_email", ago(10.0 * MIN - 3.0 * n as f64), 30.0)
                .intent(i)
                .timeout()
                .told("unknown")
        })
        .collect();
    export_grpc(&s, &spans.iter().collect::<Vec<_>>()).await;
    s.poll("/api/v1/escalations?status=open&limit=1", |b| {
        b["total"] == N
    })
    .await;
    let (items, totals) =
        walk_while(&s, "/api/v1/escalations?status=open&limit=5", |_| async {}).await;
    assert_eq!(totals, [N as u64; 3]);
    let got: Vec<String> = items
        .iter()
        .map(|e| e["intent_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(set(&got), set(&emails));
    assert_eq!(got.len(), N, "each once");
    let opened: Vec<&str> = items
        .iter()
        .map(|e| e["opened_at"].as_str().unwrap())
        .collect();
    assert!(
        opened.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {opened:?}"
    );
    // The tool is the intent's, from its verdict, which the store gets a few ms behind the
    // escalation.
    s.poll("/api/v1/escalations?tool=send_email&limit=1", |b| {
        b["total"] == N
    })
    .await;
    for (query, total) in [
        ("status=open&severity=high&tool=send_email", N),
        ("tool=send_email", N),
        ("tool=issue_refund", 0),
        ("severity=critical", 0),
        ("status=claimed", 0),
        ("status=withdrawn", 0),
    ] {
        let (code, body) = s.get(&format!("/api/v1/escalations?{query}")).await;
        assert_eq!(code, 200, "{query}: {body}");
        assert_eq!(body["total"], total, "{query}: {body}");
        assert_eq!(body["items"].as_array().unwrap().len(), total, "{query}");
    }
    s.stop().await;
}

/// Claiming or resolving an escalation someone else holds takes `"override": true`; without it
/// the answer is a 409 naming who holds it, and with it the take-over is recorded (who, when,
/// with which action, from whom) and shown with the escalation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_over_a_held_escalation_needs_an_override_and_is_recorded() {
    let s = Server::start().await;
    let intent = unique("eml");
    let span = ToolSpan::new("send_email", ago(MIN), 30.0)
        .intent(&intent)
        .timeout()
        .told("unknown");
    export_grpc(&s, &[&span]).await;
    let e = s
        .poll("/api/v1/escalations?status=open", |b| b["total"] == 1)
        .await;
    let id = e["items"][0]["id"].as_str().unwrap().to_string();
    let claim = format!("/api/v1/escalations/{id}/claim");
    let resolve = format!("/api/v1/escalations/{id}/resolve");
    let (code, body) = s.post_json(&claim, &serde_json::json!({"by": "ana"})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["overrides"], serde_json::json!([]));
    for (path, body) in [
        (&claim, serde_json::json!({"by": "bo"})),
        (&claim, serde_json::json!({"by": "bo", "override": false})),
        (
            &resolve,
            serde_json::json!({"by": "bo", "resolution": "sent"}),
        ),
    ] {
        let (code, reply) = s.post_json(path, &body).await;
        assert_eq!(code, 409, "{path} {body}: {reply}");
        assert_eq!(reply["error"]["code"], "conflict", "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("ana") && message.contains("override"),
            "{message}"
        );
    }
    let (code, taken) = s
        .post_json(&claim, &serde_json::json!({"by": "bo", "override": true}))
        .await;
    assert_eq!(code, 200, "{taken}");
    assert_eq!(taken["status"], "claimed");
    assert_eq!(taken["claimed_by"], "bo");
    assert_eq!(taken["overrides"][0]["by"], "bo");
    assert_eq!(taken["overrides"][0]["action"], "claim");
    assert_eq!(taken["overrides"][0]["held_by"], "ana");
    assert!(taken["overrides"][0]["at"].is_string());
    // The holder needs no override for their own.
    let (code, done) = s
        .post_json(
            &resolve,
            &serde_json::json!({"by": "ana", "resolution": "not_sent", "override": true}),
        )
        .await;
    assert_eq!(code, 200, "{done}");
    let (code, shown) = s.get(&format!("/api/v1/escalations/{id}")).await;
    assert_eq!(code, 200, "{shown}");
    assert_eq!(shown["status"], "resolved");
    assert_eq!(shown["resolved_by"], "ana");
    let overrides: Vec<(String, String, String)> = shown["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["by"].as_str().unwrap().to_string(),
                o["action"].as_str().unwrap().to_string(),
                o["held_by"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        overrides,
        [
            ("bo".into(), "claim".into(), "ana".into()),
            ("ana".into(), "resolve".into(), "bo".into())
        ]
    );
    // An open one anybody may claim: an override asked for is nothing to record.
    s.stop().await;
}

/// A withdrawn escalation (late evidence showed its findings never held) is carried everywhere:
/// the `status=withdrawn` filter, the report, the gauges (not unresolved), and the queue page
/// (not in the open queue, shown as withdrawn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_escalation_is_out_of_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(dir.path().join("data"));
    // The escalation book that withdraws is another part of reckon; its result, as stored.
    {
        use reckon::store::Store as _;
        let store = reckon::app::open_store(&config).await.expect("store");
        let now = reckon::model::Timestamp(unix_nanos(ago(MIN)) as i64);
        let withdrawn = reckon::model::Escalation {
            id: "esc_withdrawn_1".into(),
            intent_id: "intent-w".into(),
            tool: Some("send_email".into()),
            status: reckon::model::EscalationStatus::Withdrawn,
            opened_at: now,
            listed_at: now,
            severity: reckon::model::Severity::High,
            findings: vec![reckon::model::Finding::new(
                reckon::model::FindingKind::NoIdempotencyContract,
                now,
                "intent-w",
                "a timeout on a tool with no idempotency",
            )],
            covered: vec![],
            claimed_by: None,
            claimed_at: None,
            resolved_by: None,
            resolved_at: None,
            resolution: None,
            note: None,
            overrides: vec![],
            version: 2,
        };
        store.put_escalations(vec![withdrawn]).await.expect("put");
    }
    let s = Server::start_with(dir, config).await;
    let (code, body) = s.get("/api/v1/escalations?status=withdrawn").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["total"], 1);
    assert_eq!(body["items"][0]["status"], "withdrawn");
    let (_, open) = s.get("/api/v1/escalations?status=open").await;
    assert_eq!(open["total"], 0);
    let (_, report) = s.get("/api/v1/report").await;
    assert_eq!(report["escalations"]["withdrawn"], 1, "{report}");
    let resp = s.http.get(s.api("/metrics")).send().await.unwrap();
    let text = resp.text().await.unwrap();
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("reckon_escalations_unresolved{") && !l.ends_with(" 0")),
        "a withdrawn escalation is not unresolved:\n{text}"
    );
    // The queue page: not in the open queue; listed, as withdrawn, under its own filter.
    let page = |path: &'static str| {
        let s = &s;
        async move {
            let resp = s.http.get(s.api(path)).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            resp.text().await.unwrap()
        }
    };
    let queue = page("/").await;
    assert!(!queue.contains("esc_withdrawn_1"), "{queue}");
    assert!(queue.contains("id=\"count-withdrawn\">1<"), "{queue}");
    let withdrawn = page("/?status=withdrawn").await;
    assert!(
        withdrawn.contains("data-escalation=\"esc_withdrawn_1\""),
        "{withdrawn}"
    );
    assert!(
        withdrawn.contains("data-status=\"withdrawn\""),
        "{withdrawn}"
    );
    let one = page("/escalations/esc_withdrawn_1").await;
    assert!(one.contains("id=\"withdrawn\""), "{one}");
    assert!(
        !one.contains("id=\"claim-form\""),
        "nothing to claim: {one}"
    );
    // Nobody claims or resolves what was withdrawn.
    let (code, reply) = s
        .post_json(
            "/api/v1/escalations/esc_withdrawn_1/claim",
            &serde_json::json!({"by": "ana"}),
        )
        .await;
    assert_eq!(code, 409, "{reply}");
    s.stop().await;
}

/// The queue page's search box finds the intents an order touches, and narrows the queue to
/// their escalations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_page_searches_by_order_object_and_key() {
    let s = Server::start().await;
    let (a, b) = (unique("srch"), unique("srch"));
    let (ka, kb) = (unique("k"), unique("k"));
    let re_a = unique("re");
    let t0 = ago(5.0 * MIN);
    let spans = [
        // Two keys for one refund of order 1042: new_key_retry, escalated.
        ToolSpan::new("issue_refund", t0, 30.0)
            .intent(&a)
            .key(&ka)
            .args(refund_args("45.00"))
            .timeout(),
        ToolSpan::new("issue_refund", after(t0, 60.0), 0.3)
            .intent(&a)
            .key(&unique("k"))
            .args(refund_args("45.00"))
            .http(200)
            .object(&re_a, "succeeded"),
        ToolSpan::new("issue_refund", after(t0, 90.0), 0.3)
            .intent(&b)
            .key(&kb)
            .args(r#"{"order_id":"7","amount":5,"currency":"usd"}"#.to_string())
            .http(200)
            .object(&unique("re"), "succeeded"),
    ];
    export_grpc(&s, &spans.iter().collect::<Vec<_>>()).await;
    s.poll("/api/v1/intents?target=1042", |v| v["total"] == 1)
        .await;
    s.poll("/api/v1/intents?target=7", |v| v["total"] == 1)
        .await;
    let page = |path: String| {
        let s = &s;
        async move {
            let resp = s.http.get(s.api(&path)).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            resp.text().await.unwrap()
        }
    };
    let found = page("/?by=target&find=1042".into()).await;
    assert!(found.contains("id=\"search\""), "{found}");
    assert!(found.contains("id=\"found-total\">1<"), "{found}");
    assert!(found.contains(&format!("data-intent=\"{a}\"")), "{found}");
    assert!(!found.contains(&format!("data-intent=\"{b}\"")), "{found}");
    let by_key = page(format!("/?by=key&find={kb}")).await;
    assert!(by_key.contains(&format!("data-intent=\"{b}\"")), "{by_key}");
    let by_object = page(format!("/?by=object_id&find={re_a}")).await;
    assert!(
        by_object.contains(&format!("data-intent=\"{a}\"")),
        "{by_object}"
    );
    let none = page("/?by=target&find=99".into()).await;
    assert!(none.contains("id=\"found-empty\""), "{none}");
    let resp = s
        .http
        .get(s.api("/?by=nothing&find=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    s.stop().await;
}

/// `GET /api/v1/cluster` on one instance (no `[cluster]`): it is its own auditor under epoch 0,
/// the only member; both watermarks are the instant before which every export it received was
/// answered (and, one instance auditing what it acknowledges, audited), so they pass an export
/// it acknowledged; `reckon_auditor{instance}` says the same on `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_is_its_own_auditor() {
    let s = Server::start().await;
    let before = std::time::SystemTime::now();
    let span = ToolSpan::new("send_email", ago(5.0), 0.5)
        .intent(&unique("int"))
        .http(200);
    export_grpc(&s, &[&span]).await;
    let (code, c) = s.get("/api/v1/cluster").await;
    assert_eq!(code, 200, "{c}");
    let instance = c["instance"]
        .as_str()
        .expect("an instance name")
        .to_string();
    assert!(!instance.is_empty());
    assert_eq!(c["auditor"], instance.as_str(), "{c}");
    assert_eq!(c["epoch"], 0, "{c}");
    assert_eq!(c["audit_lag_seconds"], 0.0, "{c}");
    let members = c["members"].as_array().expect("members");
    assert_eq!(members.len(), 1, "{c}");
    assert_eq!(members[0]["instance"], instance.as_str());
    let at = |field: &str| {
        chrono::DateTime::parse_from_rfc3339(members[0][field].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{field}: {e}: {c}"))
    };
    let exported: chrono::DateTime<chrono::Utc> = before.into();
    for field in ["acknowledged_watermark", "audited_watermark", "last_seen"] {
        assert!(
            at(field) >= exported,
            "{field} passes the acknowledged export: {c}"
        );
    }
    assert!(at("last_seen") >= at("audited_watermark"), "{c}");
    let series = format!("reckon_auditor{{instance=\"{instance}\"}}");
    assert_eq!(s.metric(&series).await, Some(1.0), "{series}");
}
