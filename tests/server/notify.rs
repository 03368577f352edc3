//! Someone gets paged, item 2: signed webhooks from the durable outbox, through a running
//! reckon and a real HTTP receiver (axum on a loopback port) that fails on purpose or is not
//! there at all. Alertmanager, the real one: `tests/paging/`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use reckon::notify::Target;
use serde_json::Value;

use super::support::*;

const R: &str = "issue_refund";
const SECRET: &str = "whsec_reckon_hooks";

/// One POST the receiver got.
#[derive(Clone, Debug)]
struct Got {
    delivery: String,
    event: String,
    signature: String,
    body: String,
    /// What the receiver answered.
    status: u16,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

#[derive(Clone, Default)]
struct Inbox {
    got: Arc<Mutex<Vec<Got>>>,
    /// Answer 500 to this many more deliveries.
    fail: Arc<AtomicUsize>,
}

async fn hook(State(inbox): State<Inbox>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let fail = inbox
        .fail
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let status = if fail {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    inbox.got.lock().unwrap().push(Got {
        delivery: header("reckon-delivery"),
        event: header("reckon-event"),
        signature: header("reckon-signature"),
        body: String::from_utf8_lossy(&body).into_owned(),
        status: status.as_u16(),
    });
    status
}

/// A webhook receiver on a loopback port.
struct Receiver {
    addr: SocketAddr,
    inbox: Inbox,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start_on(addr: SocketAddr, fail_first: usize) -> Receiver {
        let inbox = Inbox::default();
        inbox.fail.store(fail_first, Ordering::SeqCst);
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(inbox.clone());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("binding the receiver on {addr}: {e}"));
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, inbox, task }
    }

    fn got(&self) -> Vec<Got> {
        self.inbox.got.lock().unwrap().clone()
    }

    /// Deliveries answered 200, each id once, in the order they were first accepted.
    fn accepted(&self) -> Vec<Got> {
        let mut out: Vec<Got> = Vec::new();
        for g in self.got().into_iter().filter(|g| g.status == 200) {
            if !out.iter().any(|o| o.delivery == g.delivery) {
                out.push(g);
            }
        }
        out
    }

    /// Until an accepted delivery satisfies `pred` (generous: retries back off).
    async fn wait_for(&self, what: &str, pred: impl Fn(&Got) -> bool) -> Got {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(g) = self.accepted().into_iter().find(|g| pred(g)) {
                return g;
            }
            assert!(
                Instant::now() < deadline,
                "no accepted delivery {what}; got {:#?}",
                self.got()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn hook_url(addr: SocketAddr) -> String {
    format!("http://{addr}/hook")
}

/// reckon on `dir` with one `[[notify]] kind = "webhook"` target named `hook`.
async fn start_notifying(dir: tempfile::TempDir, url: &str) -> Server {
    let mut config = test_config(dir.path().join("data"));
    config.notify = vec![Target::new("webhook", url, Some(SECRET), Some("hook")).unwrap()];
    let running = reckon::app::start(config).await.expect("reckon starts");
    Server {
        running: Some(running),
        dir,
        http: reqwest::Client::new(),
    }
}

/// The seed note's careless resend: a timed-out refund, an empty read-back, a resend under a new
/// key, both refunds recorded. Returns the escalation id.
async fn duplicate_refund(s: &Server, intent: &str) -> String {
    let (k1, k2, re1, re2) = (unique("k"), unique("k"), unique("re"), unique("re"));
    let t0 = ago(5.0 * 60.0);
    let refund = |start, secs, key: &str| {
        ToolSpan::new(R, start, secs)
            .intent(intent)
            .key(key)
            .args(refund_args("45.00"))
    };
    let lost = refund(t0, 30.0, &k1).timeout().told("unknown");
    let read = ToolSpan::read(intent, after(t0, 35.0), &[]);
    let resend = refund(after(t0, 36.0), 0.4, &k2)
        .http(200)
        .object(&re2, "succeeded")
        .told("succeeded");
    export_grpc(s, &[&lost, &read, &resend]).await;
    for (re, key, at) in [(&re2, &k2, 36.3), (&re1, &k1, 50.0)] {
        s.stripe(&stripe_event(
            "refund.created",
            intent,
            re,
            "succeeded",
            4500,
            Some(key),
            after(t0, at),
        ))
        .await;
    }
    let e = s
        .escalation_of(intent, "open")
        .await
        .expect("the duplicate refund opens an escalation");
    e["id"].as_str().unwrap().to_string()
}

async fn act(s: &Server, id: &str, action: &str, body: Value) {
    let (status, reply) = s
        .post_json(&format!("/api/v1/escalations/{id}/{action}"), &body)
        .await;
    assert_eq!(status, 200, "{action}: {reply}");
}

fn now_secs() -> i64 {
    unix_secs(SystemTime::now())
}

/// Every delivery is signed as the README says, carries its id in the header and the body, and
/// is about escalation `id`; the accepted ones announce its versions in order, each once, from
/// 1 to the last, with the types of the changes.
fn check_deliveries(rx: &Receiver, id: &str) -> Vec<Got> {
    for g in rx.got() {
        reckon::notify::sign::verify(SECRET, &g.signature, g.body.as_bytes(), now_secs(), 300)
            .unwrap_or_else(|e| panic!("{}: {e}", g.delivery));
        let body = g.json();
        assert_eq!(body["id"], g.delivery.as_str());
        assert_eq!(body["type"], g.event.as_str());
        assert_eq!(body["escalation"]["id"], id);
        assert!(reckon::codec::parse_rfc3339(body["at"].as_str().unwrap()).is_some());
    }
    // Duplicates (retries) carry the same id and the same bytes.
    for g in rx.got() {
        for h in rx.got().iter().filter(|h| h.delivery == g.delivery) {
            assert_eq!(h.body, g.body, "one id, one body: {}", g.delivery);
        }
    }
    let accepted = rx.accepted();
    for (n, g) in accepted.iter().enumerate() {
        let version = n as u64 + 1;
        assert_eq!(g.delivery, format!("{id}:{version}:hook"), "{accepted:#?}");
        let expect = match (n, n + 1 == accepted.len()) {
            (0, _) => "escalation.opened",
            (_, true) => "escalation.resolved",
            _ => "escalation.updated",
        };
        assert_eq!(g.event, expect, "{accepted:#?}");
    }
    accepted
}

/// A receiver that answers 500 to the first two deliveries: they are retried with backoff under
/// the same `Reckon-Delivery`, every POST verifies with the documented scheme, and the
/// escalation's life arrives in order: opened, updated (a finding joining, the claim), resolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_retried_under_one_id_and_in_order() {
    let rx = Receiver::start_on("127.0.0.1:0".parse().unwrap(), 2).await;
    let s = start_notifying(tempfile::tempdir().unwrap(), &hook_url(rx.addr)).await;
    let intent = unique("int");
    let id = duplicate_refund(&s, &intent).await;

    let opened = rx
        .wait_for("escalation.opened", |g| g.event == "escalation.opened")
        .await;
    let got = rx.got();
    assert_eq!(
        got.iter().map(|g| g.status).take(3).collect::<Vec<_>>(),
        vec![500, 500, 200],
        "{got:#?}"
    );
    assert!(
        got[..3].iter().all(|g| g.delivery == opened.delivery),
        "the same id on every retry: {got:#?}"
    );
    assert_eq!(opened.delivery, format!("{id}:1:hook"));
    let bundle = &opened.json()["escalation"];
    assert_eq!(bundle["status"], "open");
    assert_eq!(bundle["intent_id"], intent.as_str());
    assert_eq!(bundle["verdict"]["intent_id"], intent.as_str());
    assert_eq!(bundle["verdict"]["tool"], R);
    assert_eq!(bundle["contract"]["name"], "payments.refund");

    act(&s, &id, "claim", serde_json::json!({"by": "ana"})).await;
    let claimed = rx
        .wait_for("the claim", |g| {
            g.json()["escalation"]["claimed_by"] == "ana"
                && g.json()["escalation"]["status"] == "claimed"
        })
        .await;
    assert_eq!(claimed.event, "escalation.updated");
    act(
        &s,
        &id,
        "resolve",
        serde_json::json!({"by": "ana", "resolution": "reversed_second_refund", "note": "voided"}),
    )
    .await;
    let resolved = rx
        .wait_for("escalation.resolved", |g| g.event == "escalation.resolved")
        .await;
    assert_eq!(resolved.json()["escalation"]["resolved_by"], "ana");

    let accepted = check_deliveries(&rx, &id);
    assert!(accepted.len() >= 3, "{accepted:#?}");
    assert!(
        s.metric_sum("reckon_notifications_total{kind=\"webhook\",outcome=\"failed\"}")
            .await
            >= 2.0
    );
    assert!(
        s.metric_sum("reckon_notifications_total{kind=\"webhook\",outcome=\"delivered\"}")
            .await
            >= accepted.len() as f64
    );
    // Nothing left to send (the gauge is refreshed by the delivery task's next look).
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.metric_sum("reckon_notify_outbox_pending").await != 0.0 {
        assert!(Instant::now() < deadline, "the outbox never drained");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.stop().await;
}

/// Deliveries pending while the receiver is down survive a restart of reckon: the new process
/// retries them, and once the receiver is up every event arrives, none is lost, and each keeps
/// its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_webhooks_survive_a_restart() {
    // A port nobody listens on yet: connections are refused until the receiver starts there.
    let addr = addr_for_later();
    let s = start_notifying(tempfile::tempdir().unwrap(), &hook_url(addr)).await;
    let intent = unique("int");
    let id = duplicate_refund(&s, &intent).await;
    act(&s, &id, "claim", serde_json::json!({"by": "bo"})).await;
    // Tried and failed, and pending: the opened and the claimed at least.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let failed = s
            .metric_sum("reckon_notifications_total{kind=\"webhook\",outcome=\"failed\"}")
            .await;
        let pending = s.metric_sum("reckon_notify_outbox_pending").await;
        if failed >= 1.0 && pending >= 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no failed attempt with pending items (failed {failed}, pending {pending})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dir = s.stop().await;

    // The new process takes the pending deliveries up (and fails: still nobody there)...
    let s = start_notifying(dir, &hook_url(addr)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while s
        .metric_sum("reckon_notifications_total{kind=\"webhook\",outcome=\"failed\"}")
        .await
        < 1.0
    {
        assert!(
            Instant::now() < deadline,
            "the restarted reckon never retried"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and delivers them once the receiver is up.
    let rx = Receiver::start_on(addr, 0).await;
    let claimed = rx
        .wait_for("the claim, sent after the restart", |g| {
            g.json()["escalation"]["claimed_by"] == "bo"
        })
        .await;
    assert_eq!(claimed.event, "escalation.updated");
    act(
        &s,
        &id,
        "resolve",
        serde_json::json!({"by": "bo", "resolution": "refunded_once"}),
    )
    .await;
    rx.wait_for("escalation.resolved", |g| g.event == "escalation.resolved")
        .await;
    let accepted = check_deliveries(&rx, &id);
    assert!(accepted.len() >= 3, "{accepted:#?}");
    assert_eq!(accepted[0].event, "escalation.opened");
    s.stop().await;
}
