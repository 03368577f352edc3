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
    // The listing is read from the store, which the engine writes a few ms behind the verdicts.
    let everything = s
        .poll("/api/v1/intents", |b| {
            b["items"].as_array().unwrap().len() == total
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

    // Cursor pages: 33 intents, 7 at a time, each once, newest first.
    let items = all_pages(&s, "/api/v1/intents?limit=7", 7).await;
    let got: Vec<String> = items
        .iter()
        .map(|v| v["intent_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got.len(), total);
    assert_eq!(set(&got).len(), total, "no intent on two pages");
    assert_eq!(set(&got), set(&ids(&everything)));
    let last_events: Vec<i64> = items
        .iter()
        .map(|v| {
            reckon::codec::parse_rfc3339(v["last_event"].as_str().unwrap())
                .unwrap()
                .0
        })
        .collect();
    assert!(
        last_events.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {last_events:?}"
    );
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
