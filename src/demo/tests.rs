//! Real HTTP against the stub downstream, through the fault proxy, with the executor's own
//! transport (untraced). Each test starts its own stub and proxy on loopback ports, so they run
//! in parallel; times are scaled to a few hundred milliseconds.

use std::time::Duration;

use super::executor::{Executor, Intent, SendOpts, Tool, SAFE_RETRY_WINDOW};
use super::proxy::{Fault, Proxy};
use super::scenarios::{draft, email, refund};
use super::stub::{Knobs, Settle, Stub, KEY_RETENTION};
use super::*;
use crate::model::ReportedOutcome;

struct Rig {
    stub: Stub,
    _proxy: Proxy,
    exec: Executor,
}

async fn rig(retention: Duration) -> Rig {
    let stub = Stub::start(retention, None).await.unwrap();
    let proxy = Proxy::start(stub.addr).await.unwrap();
    let exec = Executor::new(proxy.base_url(), None).unwrap();
    Rig {
        stub,
        _proxy: proxy,
        exec,
    }
}

fn with(fault: Fault, knobs: Knobs) -> SendOpts {
    SendOpts {
        fault,
        knobs,
        ..SendOpts::default()
    }
}

fn intent(name: &str, tool: Tool) -> Intent {
    let args = match tool {
        Tool::Refund | Tool::RefundV2 => refund("45.00"),
        Tool::Draft => draft("ACME", "120.00"),
        Tool::Email => email(),
    };
    Intent::new(format!("t-{}-{name}", run_tag()), tool, args)
}

#[tokio::test]
async fn replay_returns_the_saved_500_and_writes_nothing() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("saved500", Tool::Refund);
    let fail = Knobs {
        fail_500: true,
        ..Knobs::default()
    };
    let first = r.exec.send(&i, with(Fault::None, fail)).await;
    // The retry asks for nothing special: the 500 comes back because it was saved (A).
    let again = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(first.http_status, Some(500));
    assert_eq!(again.http_status, Some(500));
    assert_eq!(
        again.outcome,
        ReportedOutcome::Unknown,
        "a 5xx is never failed"
    );
    assert!(r.stub.objects_for(&i.id).is_empty());
}

#[tokio::test]
async fn same_key_while_executing_is_409_and_not_saved() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("conflict", Tool::Refund);
    let slow = Knobs {
        exec: Duration::from_millis(400),
        ..Knobs::default()
    };
    let (first, second) = tokio::join!(r.exec.send(&i, with(Fault::None, slow)), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        r.exec.send(&i, SendOpts::default()).await
    });
    assert_eq!(first.http_status, Some(200));
    assert_eq!(second.http_status, Some(409));
    assert_eq!(second.error_type.as_deref(), Some("idempotency_key_in_use"));
    assert_eq!(
        second.outcome,
        ReportedOutcome::Pending,
        "a conflict is not a failure"
    );
    // The conflict was not saved: the next same-key send gets the first one's saved response.
    let third = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(third.object_id, first.object_id);
    assert_eq!(r.stub.objects_for(&i.id).len(), 1);
}

#[tokio::test]
async fn changed_parameters_under_one_key_are_refused() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("mismatch", Tool::Refund);
    let first = r.exec.send(&i, SendOpts::default()).await;
    let changed = SendOpts {
        args: Some(refund("40.00")),
        ..SendOpts::default()
    };
    let second = r.exec.send(&i, changed).await;
    assert_eq!(first.http_status, Some(200));
    assert_eq!(second.http_status, Some(400));
    assert_eq!(second.error_type.as_deref(), Some("idempotency_error"));

    let d = intent("mismatch-draft", Tool::Draft);
    r.exec.send(&d, SendOpts::default()).await;
    let other = SendOpts {
        args: Some(draft("Globex", "120.00")),
        ..SendOpts::default()
    };
    let second = r.exec.send(&d, other).await;
    assert_eq!(second.http_status, Some(422));
    assert_eq!(
        second.error_type.as_deref(),
        Some("idempotency_key_mismatch")
    );
    assert_eq!(r.stub.objects_for(&i.id).len(), 1);
    assert_eq!(r.stub.objects_for(&d.id).len(), 1);
}

#[tokio::test]
async fn a_pruned_key_executes_again() {
    let r = rig(Duration::from_millis(300)).await;
    let i = intent("pruned", Tool::Refund);
    let first = r.exec.send(&i, SendOpts::default()).await;
    let replay = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(
        replay.object_id, first.object_id,
        "inside retention: replayed"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let late = r.exec.send(&i, SendOpts::default()).await;
    assert_ne!(
        late.object_id, first.object_id,
        "past retention: a second refund"
    );
    assert_eq!(r.stub.objects_for(&i.id).len(), 2);
}

#[tokio::test]
async fn refunds_settle_asynchronously() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("settle", Tool::Refund);
    let knobs = Knobs {
        settle: Settle::PendingThenSucceeded,
        settle_after: Duration::from_millis(200),
        ..Knobs::default()
    };
    let a = r.exec.send(&i, with(Fault::None, knobs)).await;
    assert_eq!(a.object_status.as_deref(), Some("pending"));
    assert_eq!(a.outcome, ReportedOutcome::Pending);
    assert_eq!(r.stub.objects_for(&i.id)[0].status, "pending");
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(r.stub.objects_for(&i.id)[0].status, "succeeded");
    // v1 replays the saved response (pending), not the object as it is now.
    let replay = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(replay.object_status.as_deref(), Some("pending"));
}

#[tokio::test]
async fn converge_completes_a_failed_operation() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("converge", Tool::RefundV2);
    let fail = Knobs {
        fail_500: true,
        ..Knobs::default()
    };
    let first = r.exec.send(&i, with(Fault::None, fail)).await;
    assert_eq!(first.http_status, Some(500));
    assert!(r.stub.objects_for(&i.id).is_empty());
    let retry = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(retry.http_status, Some(200));
    assert_eq!(retry.object_status.as_deref(), Some("succeeded"));
    let again = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(again.object_id, retry.object_id);
    assert_eq!(r.stub.objects_for(&i.id).len(), 1);
}

#[tokio::test]
async fn none_mode_ignores_keys() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("none", Tool::Email);
    let a = r.exec.send(&i, SendOpts::default()).await;
    let b = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(
        a.key, None,
        "no key is sent to a downstream that takes none"
    );
    assert_ne!(a.object_id, b.object_id);
    assert_eq!(r.stub.objects_for(&i.id).len(), 2);
}

#[tokio::test]
async fn drop_after_commit_leaves_the_object_and_a_timeout() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("drop", Tool::Refund);
    let opts = SendOpts {
        fault: Fault::Drop,
        timeout: Duration::from_millis(300),
        ..SendOpts::default()
    };
    let a = r.exec.send(&i, opts).await;
    assert_eq!(a.error_type.as_deref(), Some("timeout"));
    assert_eq!(a.http_status, None);
    assert_eq!(a.outcome, ReportedOutcome::Unknown);
    assert_eq!(
        r.stub.objects_for(&i.id).len(),
        1,
        "it committed all the same"
    );
}

#[tokio::test]
async fn reset_after_commit_leaves_the_object_and_a_reset() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("reset", Tool::Draft);
    let a = r.exec.send(&i, with(Fault::Reset, Knobs::default())).await;
    assert_eq!(a.error_type.as_deref(), Some("connection_reset"));
    assert_eq!(a.outcome, ReportedOutcome::Unknown);
    assert_eq!(r.stub.objects_for(&i.id).len(), 1);
}

#[tokio::test]
async fn hold_commits_after_the_caller_gave_up() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("hold", Tool::Refund);
    let opts = SendOpts {
        fault: Fault::Hold(Duration::from_millis(400)),
        timeout: Duration::from_millis(150),
        ..SendOpts::default()
    };
    let a = r.exec.send(&i, opts).await;
    assert_eq!(a.error_type.as_deref(), Some("timeout"));
    assert!(
        r.stub.objects_for(&i.id).is_empty(),
        "an empty read now proves nothing"
    );
    assert!(r.exec.read_back(&i, None).await.is_empty());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        r.stub.objects_for(&i.id).len(),
        1,
        "the held request committed late"
    );
}

#[tokio::test]
async fn blackhole_and_unavailable_never_reach_the_stub() {
    let r = rig(KEY_RETENTION).await;
    let i = intent("blackhole", Tool::Refund);
    let opts = SendOpts {
        fault: Fault::Blackhole,
        timeout: Duration::from_millis(150),
        ..SendOpts::default()
    };
    let a = r.exec.send(&i, opts).await;
    assert_eq!(a.error_type.as_deref(), Some("timeout"));
    let b = r
        .exec
        .send(&i, with(Fault::Unavailable, Knobs::default()))
        .await;
    assert_eq!(b.http_status, Some(503));
    assert_eq!(
        b.outcome,
        ReportedOutcome::Unknown,
        "a 503 is not a known failure"
    );
    assert!(r.stub.objects_for(&i.id).is_empty());
}

#[tokio::test]
async fn invalid_amount_is_rejected_before_execution() {
    let r = rig(KEY_RETENTION).await;
    let mut i = intent("invalid", Tool::Refund);
    i.args = refund("-5");
    let a = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(a.http_status, Some(400));
    assert_eq!(a.outcome, ReportedOutcome::Rejected);
    // Not saved: a corrected call with the same key executes.
    i.args = refund("5");
    let b = r.exec.send(&i, SendOpts::default()).await;
    assert_eq!(b.http_status, Some(200));
}

#[tokio::test]
async fn the_careful_executor_refuses_what_the_sketch_refuses() {
    let r = rig(KEY_RETENTION).await;
    let mut i = intent("careful", Tool::Refund);
    let opts = SendOpts {
        fault: Fault::Drop,
        timeout: Duration::from_millis(200),
        ..SendOpts::default()
    };
    r.exec.issue(&mut i, opts).await;
    let key = i.key.clone();
    let msg = r.exec.issue(&mut i, SendOpts::default()).await;
    assert!(msg.contains("Not sent again"), "{msg}");
    // The reconciler retries with the intent's own key and gets the saved response.
    r.exec.reconcile(&mut i, SendOpts::default()).await;
    assert_eq!(i.key, key);
    assert_eq!(i.state, executor::LocalState::Completed);
    assert_eq!(r.stub.objects_for(&i.id).len(), 1);
}

#[test]
fn demo_contracts_parse_and_agree_with_the_stub_and_executor() {
    let contracts =
        crate::contract::parse_contracts(Path::new("contracts/demo.toml"), DEMO_CONTRACTS).unwrap();
    let tools: Vec<&str> = contracts
        .iter()
        .flat_map(|c| c.tools.iter().map(String::as_str))
        .collect();
    for t in [Tool::Refund, Tool::RefundV2, Tool::Draft, Tool::Email] {
        assert!(tools.contains(&t.name()), "{} has no contract", t.name());
    }
    for c in contracts.iter().filter(|c| c.key_retention.is_some()) {
        let retention = c.key_retention.unwrap();
        assert_eq!(retention.0 as u128, KEY_RETENTION.as_nanos(), "{}", c.name);
        assert_eq!(
            (retention.0 - c.retry_margin.0) as u128,
            SAFE_RETRY_WINDOW.as_nanos(),
            "{}",
            c.name
        );
    }
}

#[test]
fn target_defaults_otlp_to_the_same_host() {
    let t = Target::from_args("http://10.0.0.5:8080/", None, None).unwrap();
    assert_eq!(t.api, "http://10.0.0.5:8080");
    assert_eq!(t.otlp, "http://10.0.0.5:4317");
    let t = Target::from_args("http://[::1]:8080", None, None).unwrap();
    assert_eq!(t.otlp, "http://[::1]:4317");
    let t = Target::from_args("http://h:1", Some("http://h:9/"), Some("s".into())).unwrap();
    assert_eq!(
        (t.otlp.as_str(), t.stripe_secret.as_deref()),
        ("http://h:9", Some("s"))
    );
    assert!(Target::from_args("https://h", None, None).is_err());
    assert!(Target::from_args("http://", None, None).is_err());
}

#[test]
fn write_contracts_keeps_an_operator_demo_file() {
    let from = tempfile::tempdir().unwrap();
    std::fs::write(from.path().join("other.toml"), "# parked\n").unwrap();
    let to = tempfile::tempdir().unwrap();
    write_contracts(to.path(), Some(from.path())).unwrap();
    assert!(to.path().join("other.toml").exists());
    assert_eq!(
        std::fs::read_to_string(to.path().join("demo.toml")).unwrap(),
        DEMO_CONTRACTS
    );
    std::fs::write(from.path().join("demo.toml"), "# mine\n").unwrap();
    let to = tempfile::tempdir().unwrap();
    write_contracts(to.path(), Some(from.path())).unwrap();
    assert_eq!(
        std::fs::read_to_string(to.path().join("demo.toml")).unwrap(),
        "# mine\n"
    );
}

#[test]
fn proxy_faults_round_trip_through_their_header() {
    for f in [
        Fault::None,
        Fault::Delay(Duration::from_millis(5)),
        Fault::Drop,
        Fault::Reset,
        Fault::Hold(Duration::from_millis(7)),
        Fault::Blackhole,
        Fault::Unavailable,
    ] {
        assert_eq!(Fault::parse(&f.header_value()), Some(f));
    }
    assert_eq!(Fault::parse("delay:x"), None);
    assert_eq!(Fault::parse("explode"), None);
}

#[test]
fn run_tags_make_ids_unique() {
    assert_eq!(run_tag(), run_tag());
    assert!(run_tag().chars().all(|c| c.is_ascii_alphanumeric()));
    assert_ne!(executor::mint_key(), executor::mint_key());
}

/// End to end on an in-process reckon: the fast scenarios (no waiting out a window), through
/// real OTLP export, signed webhooks and the records API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_scenarios_pass_against_an_in_process_reckon() {
    let dir = tempfile::tempdir().unwrap();
    let (target, running) = start_reckon(dir.path(), None, None).await.unwrap();
    let fast: Vec<Scenario> = scenarios::all()
        .into_iter()
        .filter(|s| {
            s.name.starts_with("drafts ") && !s.name.starts_with("drafts 7")
                || s.name.starts_with("rejected")
                || s.name.starts_with("concurrent")
                || s.name.starts_with("two intended")
        })
        .collect();
    assert!(fast.len() >= 8);
    let rows = run_scenarios(&target, fast).await.unwrap();
    let text = table::render(&rows);
    assert!(rows.iter().all(Row::pass), "{text}");
    running.shutdown().await.unwrap();
}
