//! What a load run measured, as a table or JSON, with every phase's rate as a ratio against the
//! first phase of the same run.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde_json::json;

use super::{Phase, Tally};

#[derive(Clone, Debug)]
pub struct PhaseResult {
    pub name: String,
    pub transport: &'static str,
    pub mix: String,
    pub elapsed: Duration,
    pub spans_sent: u64,
    pub spans_acked: u64,
    pub spans_rejected: u64,
    pub records_acked: u64,
    pub refusals: u64,
    pub errors: u64,
    /// The first error, as the client saw it.
    pub first_error: Option<String>,
    /// Sorted.
    pub latencies: Vec<Duration>,
    pub rss_after: Option<u64>,
}

impl PhaseResult {
    pub(super) fn new(
        phase: &Phase,
        tally: &Tally,
        elapsed: Duration,
        mut latencies: Vec<Duration>,
        rss_after: Option<u64>,
    ) -> Self {
        latencies.sort();
        PhaseResult {
            name: phase.name.clone(),
            transport: phase.transport.as_str(),
            mix: phase.mix.to_string(),
            elapsed,
            spans_sent: tally.spans_sent.load(Relaxed),
            spans_acked: tally.spans_acked.load(Relaxed),
            spans_rejected: tally.spans_rejected.load(Relaxed),
            records_acked: tally.records_acked.load(Relaxed),
            refusals: tally.refusals.load(Relaxed),
            errors: tally.errors.load(Relaxed),
            first_error: tally
                .first_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            latencies,
            rss_after,
        }
    }

    /// Acknowledged items (spans and records) per second.
    pub fn rate(&self) -> f64 {
        (self.spans_acked + self.records_acked) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn percentile(&self, p: f64) -> Option<Duration> {
        if self.latencies.is_empty() {
            return None;
        }
        let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies.get(i).copied()
    }
}

#[derive(Clone, Debug)]
pub struct Report {
    pub batch: usize,
    pub concurrency: usize,
    pub duration: Duration,
    pub rss_at_start: Option<u64>,
    pub rss_at_end: Option<u64>,
    pub phases: Vec<PhaseResult>,
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

fn mib(b: Option<u64>) -> String {
    b.map_or("-".into(), |b| {
        format!("{:.0}", b as f64 / (1 << 20) as f64)
    })
}

impl Report {
    pub fn baseline(&self) -> f64 {
        self.phases.first().map_or(0.0, PhaseResult::rate)
    }

    pub fn table(&self) -> String {
        let base = self.baseline();
        let mut out = format!(
            "{} phase(s), {:?} each, {} spans per export, {} exports in flight; server RSS {} MiB at start\n",
            self.phases.len(),
            self.duration,
            self.batch,
            self.concurrency,
            mib(self.rss_at_start)
        );
        out.push_str(&format!(
            "{:<14} {:<5} {:<40} {:>11} {:>7} {:>9} {:>7} {:>8} {:>8} {:>8} {:>9}\n",
            "phase",
            "otlp",
            "mix",
            "acked/s",
            "ratio",
            "refusals",
            "errors",
            "rejected",
            "p50 ms",
            "p99 ms",
            "RSS MiB"
        ));
        for p in &self.phases {
            out.push_str(&format!(
                "{:<14} {:<5} {:<40} {:>11.0} {:>7.2} {:>9} {:>7} {:>8} {:>8} {:>8} {:>9}\n",
                p.name,
                p.transport,
                p.mix,
                p.rate(),
                if base > 0.0 { p.rate() / base } else { 0.0 },
                p.refusals,
                p.errors,
                p.spans_rejected,
                ms(p.percentile(0.5)),
                ms(p.percentile(0.99)),
                mib(p.rss_after),
            ));
        }
        for p in self.phases.iter().filter(|p| p.errors > 0) {
            if let Some(e) = &p.first_error {
                out.push_str(&format!(
                    "{} {}: {} error(s), the first: {e}\n",
                    p.name, p.transport, p.errors
                ));
            }
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        let base = self.baseline();
        json!({
            "batch": self.batch,
            "concurrency": self.concurrency,
            "duration_secs": self.duration.as_secs_f64(),
            "rss_at_start_bytes": self.rss_at_start,
            "rss_at_end_bytes": self.rss_at_end,
            "phases": self.phases.iter().map(|p| json!({
                "name": p.name,
                "transport": p.transport,
                "mix": p.mix,
                "elapsed_secs": p.elapsed.as_secs_f64(),
                "spans_sent": p.spans_sent,
                "spans_acked": p.spans_acked,
                "spans_rejected": p.spans_rejected,
                "records_acked": p.records_acked,
                "refusals": p.refusals,
                "errors": p.errors,
                "first_error": p.first_error,
                "acked_per_sec": p.rate(),
                "ratio_to_first": if base > 0.0 { p.rate() / base } else { 0.0 },
                "latency_samples": p.latencies.len(),
                "latency_p50_ms": p.percentile(0.5).map(|d| d.as_secs_f64() * 1e3),
                "latency_p99_ms": p.percentile(0.99).map(|d| d.as_secs_f64() * 1e3),
                "rss_after_bytes": p.rss_after,
            })).collect::<Vec<_>>(),
        })
    }
}
