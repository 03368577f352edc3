//! `reckon loadgen` against a running reckon: every kind of traffic lands, the latency sampler
//! sees verdicts, and the server's memory is read from its `/metrics`. Functional only: rates are
//! for `BENCHMARKS.md`, never asserted here.

use std::time::Duration;

use reckon::loadgen::{self, Kind, LoadgenArgs, Mix, Phase, Transport};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_drives_both_transports_and_settles_open_intents() {
    let s = Server::start().await;
    let r = s.r();
    let mix = Mix::parse("noise=2,completed=1,open=1,records=1").unwrap();
    let phase = |name: &str, transport| Phase {
        name: name.into(),
        transport,
        mix: mix.clone(),
    };
    let args = LoadgenArgs {
        api: r.api_url(),
        otlp_http: r.http_url(),
        otlp_grpc: r.grpc_url(),
        phases: vec![
            Phase {
                name: "drop".into(),
                transport: Transport::Http,
                mix: Mix::only(Kind::Noise),
            },
            phase("http", Transport::Http),
            phase("grpc", Transport::Grpc),
        ],
        batch: 50,
        concurrency: 2,
        duration: Duration::from_millis(700),
        sample_every: 1,
        json: false,
    };
    let report = loadgen::run(args).await.expect("the run completes");
    assert_eq!(report.phases.len(), 3);
    for p in &report.phases {
        assert!(p.spans_acked > 0, "{}: nothing acknowledged", p.name);
        assert_eq!((p.errors, p.spans_rejected), (0, 0), "{}", p.name);
        assert_eq!(
            p.spans_acked, p.spans_sent,
            "{}: every sent span acknowledged",
            p.name
        );
    }
    for p in &report.phases[1..] {
        assert!(
            p.records_acked > 0,
            "{}: records settle open intents",
            p.name
        );
        assert!(
            !p.latencies.is_empty(),
            "{}: verdicts were followed",
            p.name
        );
    }
    assert!(
        report.rss_at_end.is_some_and(|b| b > 0),
        "RSS from /metrics"
    );
    let table = report.table();
    assert!(
        table.contains("acked/s") && table.contains("grpc"),
        "{table}"
    );
    s.stop().await;
}
