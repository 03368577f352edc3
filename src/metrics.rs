//! The `/metrics` registry: Prometheus text exposition format 0.0.4, no metrics crate.
//!
//! Updates come from every ingest thread, so they are atomics. Labeled counters are looked up
//! under a read lock by a hash of the borrowed label values: a hit allocates nothing, only the
//! first sight of a label combination takes the write lock. Label values partly come from the
//! wire (tool names), so each family holds at most `MAX_SERIES` series; further combinations are
//! counted under the label value `_overflow` instead of growing memory and scrape size without
//! bound.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The `Content-Type` of `render`'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Series per labeled family before new label combinations fold into `_overflow`.
pub const MAX_SERIES: usize = 2000;

/// The label value that stands for every combination past `MAX_SERIES`.
pub const OVERFLOW: &str = "_overflow";

/// Bytes of a label value; longer ones (a tool name is whatever a span says) are cut to this, so
/// `MAX_SERIES` series stay small in memory and in every scrape.
pub const MAX_LABEL_BYTES: usize = 128;

/// `v` cut to at most `MAX_LABEL_BYTES`, at a character boundary.
fn clip_label(v: &str) -> &str {
    if v.len() <= MAX_LABEL_BYTES {
        return v;
    }
    let mut end = MAX_LABEL_BYTES;
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    &v[..end]
}

/// Latency buckets in seconds, from 0.5 ms (a verdict on a warm intent) to 5 s (a stuck store).
const LATENCY_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Series by a hash of their label values; colliding series share a bucket, compared exactly.
type Series = HashMap<u64, Vec<(Box<[String]>, Arc<AtomicU64>)>>;

/// A counter family with a fixed set of label names.
struct Family {
    labels: &'static [&'static str],
    series: RwLock<Series>,
    len: AtomicU64,
}

impl Family {
    fn new(labels: &'static [&'static str]) -> Self {
        Family {
            labels,
            series: RwLock::new(HashMap::new()),
            len: AtomicU64::new(0),
        }
    }

    fn hash(values: &[&str]) -> u64 {
        let mut h = DefaultHasher::new();
        for v in values {
            v.hash(&mut h);
        }
        h.finish()
    }

    fn find(map: &Series, h: u64, values: &[&str]) -> Option<Arc<AtomicU64>> {
        map.get(&h)?
            .iter()
            .find(|(k, _)| k.iter().map(String::as_str).eq(values.iter().copied()))
            .map(|(_, c)| c.clone())
    }

    fn add(&self, values: &[&str], n: u64) {
        debug_assert_eq!(values.len(), self.labels.len());
        // Values past `MAX_LABEL_BYTES` are cut (rare path: may allocate).
        let clipped: Vec<&str>;
        let values = if values.iter().all(|v| v.len() <= MAX_LABEL_BYTES) {
            values
        } else {
            clipped = values.iter().map(|v| clip_label(v)).collect();
            &clipped[..]
        };
        let h = Self::hash(values);
        // A poisoned lock only means another thread panicked mid-update of a counter map; the
        // map itself is still usable, and metrics must never take the service down.
        if let Some(c) = Self::find(
            &self.series.read().unwrap_or_else(|e| e.into_inner()),
            h,
            values,
        ) {
            c.fetch_add(n, Relaxed);
            return;
        }
        let mut map = self.series.write().unwrap_or_else(|e| e.into_inner());
        // Decided under the write lock, so first sights racing each other cannot pass the cap
        // together.
        if let Some(c) = Self::find(&map, h, values) {
            c.fetch_add(n, Relaxed);
            return;
        }
        // Past the cap, this combination is counted as all-`_overflow` (rare path: may allocate).
        let overflow: Vec<&str>;
        let (values, h) = if self.len.load(Relaxed) as usize >= MAX_SERIES {
            overflow = vec![OVERFLOW; values.len()];
            (&overflow[..], Self::hash(&overflow))
        } else {
            (values, h)
        };
        let c = match Self::find(&map, h, values) {
            Some(c) => c,
            None => {
                let c = Arc::new(AtomicU64::new(0));
                let key = values.iter().map(|v| v.to_string()).collect();
                map.entry(h).or_default().push((key, c.clone()));
                self.len.fetch_add(1, Relaxed);
                c
            }
        };
        c.fetch_add(n, Relaxed);
    }

    /// Every series, sorted by label values so the output is stable between scrapes.
    fn snapshot(&self) -> BTreeMap<Box<[String]>, u64> {
        let map = self.series.read().unwrap_or_else(|e| e.into_inner());
        map.values()
            .flatten()
            .map(|(k, c)| (k.clone(), c.load(Relaxed)))
            .collect()
    }

    fn render(&self, out: &mut String, name: &str, help: &str, kind: &str) {
        header(out, name, help, kind);
        for (values, n) in self.snapshot() {
            out.push_str(name);
            push_labels(
                out,
                self.labels
                    .iter()
                    .copied()
                    .zip(values.iter().map(String::as_str)),
            );
            let _ = writeln!(out, " {n}");
        }
    }
}

/// A histogram with fixed buckets. Observations are counted in their own bucket only; `render`
/// accumulates, so `+Inf` always equals `_count` (both are the same sum).
struct Histogram {
    bounds_ns: Vec<u64>,
    bounds: &'static [f64],
    // One per bound plus one for `+Inf`.
    counts: Vec<AtomicU64>,
    sum_ns: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds_ns: bounds.iter().map(|b| (b * 1e9).round() as u64).collect(),
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = self
            .bounds_ns
            .iter()
            .position(|&b| ns <= b)
            .unwrap_or(self.bounds_ns.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "histogram");
        let mut cumulative = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Relaxed);
            let le = match self.bounds.get(i) {
                Some(b) => format_float(*b),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_ns.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {}", format_float(sum));
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

/// Every metric reckon exposes. Share it as `Arc<Metrics>`; all methods take `&self`.
pub struct Metrics {
    spans_received: Family,
    spans_dropped: Family,
    log_records_received: Family,
    tool_attempts: Family,
    findings: Family,
    duplicate_effects: Family,
    ingest_rejections: Family,
    records_received: Family,
    conflicting_resends: Family,
    notifications: Family,
    webhooks: Family,
    contract_reloads: Family,
    /// 1 while the latest reload was refused: the directory holds contracts that are not in force.
    contract_reload_refused: AtomicU8,
    /// (contract name, version) of every contract in force; replaced whole on each load.
    contracts: Mutex<Vec<(String, String)>>,
    access_refused: Family,
    connection_limits: Family,
    /// Open connections per listener (its name is one of the program's, never from the wire).
    connections_open: Mutex<BTreeMap<&'static str, i64>>,
    outbox_pending: AtomicU64,
    escalations: [AtomicU64; 4],
    escalations_unresolved: Mutex<BTreeMap<[String; 3], u64>>,
    /// 1: the store answered the last probe, 0: it did not, 2: never probed.
    store_up: AtomicU8,
    /// `reckon_auditor{instance}`: this instance's name and whether it audits (DESIGN.md
    /// "Scale-out"); unset until the service says.
    auditor: std::sync::Mutex<Option<(String, bool)>>,
    deadline_overdue_ns: AtomicU64,
    intents: AtomicI64,
    intents_evicted: AtomicI64,
    intents_pending: AtomicI64,
    route_filter_bytes: AtomicI64,
    /// An `f64`'s bits.
    route_filter_false_positives: AtomicU64,
    intents_expired: AtomicU64,
    verdicts_unwritten: AtomicU64,
    verdict_latency: Histogram,
    store_append: Histogram,
    version: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics {
            spans_received: Family::new(&["transport"]),
            spans_dropped: Family::new(&["reason"]),
            log_records_received: Family::new(&["transport"]),
            tool_attempts: Family::new(&["tool", "class"]),
            findings: Family::new(&["kind", "severity"]),
            duplicate_effects: Family::new(&["tool"]),
            ingest_rejections: Family::new(&["reason"]),
            records_received: Family::new(&["source"]),
            conflicting_resends: Family::new(&["kind"]),
            notifications: Family::new(&["kind", "outcome"]),
            webhooks: Family::new(&["source", "type", "outcome"]),
            contract_reloads: {
                // Both series from the start, so `increase(...{result="error"}[..])` sees the
                // first failure as an increase from zero.
                let f = Family::new(&["result"]);
                f.add(&["ok"], 0);
                f.add(&["error"], 0);
                f
            },
            contract_reload_refused: AtomicU8::new(0),
            contracts: Mutex::new(Vec::new()),
            access_refused: Family::new(&["listener", "reason"]),
            connection_limits: Family::new(&["listener", "limit"]),
            connections_open: Mutex::new(BTreeMap::new()),
            outbox_pending: AtomicU64::new(0),
            escalations: Default::default(),
            escalations_unresolved: Mutex::new(BTreeMap::new()),
            store_up: AtomicU8::new(2),
            auditor: std::sync::Mutex::new(None),
            deadline_overdue_ns: AtomicU64::new(0),
            intents: AtomicI64::new(0),
            intents_evicted: AtomicI64::new(0),
            intents_pending: AtomicI64::new(0),
            route_filter_bytes: AtomicI64::new(0),
            route_filter_false_positives: AtomicU64::new(0),
            verdicts_unwritten: AtomicU64::new(0),
            intents_expired: AtomicU64::new(0),
            verdict_latency: Histogram::new(&LATENCY_BUCKETS),
            store_append: Histogram::new(&LATENCY_BUCKETS),
            version: env!("CARGO_PKG_VERSION"),
        }
    }

    /// `n` spans arrived over `transport` (`grpc` or `http`), tool spans or not.
    pub fn spans_received(&self, transport: &str, n: u64) {
        self.spans_received.add(&[transport], n);
    }

    /// `n` spans were let go without auditing, e.g. `not_a_tool_span`.
    pub fn spans_dropped(&self, reason: &str, n: u64) {
        self.spans_dropped.add(&[reason], n);
    }

    pub fn log_records_received(&self, transport: &str, n: u64) {
        self.log_records_received.add(&[transport], n);
    }

    /// One tool attempt classified (`class` as `AttemptClass::as_str`).
    pub fn tool_attempt(&self, tool: &str, class: &str) {
        self.tool_attempts.add(&[tool, class], 1);
    }

    /// One new finding (`kind` as `FindingKind::as_str`, `severity` as `Severity::as_str`).
    pub fn finding(&self, kind: &str, severity: &str) {
        self.findings.add(&[kind, severity], 1);
    }

    /// One more object than the intent should have made.
    pub fn duplicate_effect(&self, tool: &str) {
        self.duplicate_effects.add(&[tool], 1);
    }

    /// The escalation queue as it stands now.
    pub fn set_escalations(&self, open: u64, claimed: u64, resolved: u64, withdrawn: u64) {
        for (g, v) in self
            .escalations
            .iter()
            .zip([open, claimed, resolved, withdrawn])
        {
            g.store(v, Relaxed);
        }
    }

    /// `reckon_escalations_unresolved{tool, finding, severity}`: per combination, the intents whose
    /// open or claimed escalation carries that finding. Replaces the previous counts; a
    /// combination seen before and absent now reads 0 (the series falls to zero when a person
    /// resolves, rather than vanishing). At most `MAX_SERIES` combinations are kept; later new
    /// ones are counted under `_overflow`.
    pub fn set_escalations_unresolved(&self, counts: impl IntoIterator<Item = ([String; 3], u64)>) {
        let mut series = self
            .escalations_unresolved
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for n in series.values_mut() {
            *n = 0;
        }
        for (labels, n) in counts {
            let labels = labels.map(|l| match clip_label(&l).len() {
                len if len < l.len() => l[..len].to_string(),
                _ => l,
            });
            let labels = if series.contains_key(&labels) || series.len() < MAX_SERIES {
                labels
            } else {
                [OVERFLOW, OVERFLOW, OVERFLOW].map(String::from)
            };
            *series.entry(labels).or_default() += n;
        }
    }

    /// Whether the store answered a read just now (the `/readyz` probe).
    pub fn set_store_up(&self, up: bool) {
        self.store_up.store(u8::from(up), Relaxed);
    }

    /// This instance's name and whether it is the cluster's auditor (one instance alone is its
    /// own).
    pub fn set_auditor(&self, instance: &str, is_auditor: bool) {
        *self.auditor.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((instance.to_string(), is_auditor));
    }

    /// How long ago the earliest booked deadline (a re-audit the engine owes) fell due; zero
    /// when none is due. Above zero for more than a moment, the deadline timer is stuck.
    pub fn set_deadline_overdue(&self, d: Duration) {
        self.deadline_overdue_ns
            .store(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    /// `n` items refused at ingest, e.g. `malformed_span`, `decode_error`, `body_too_large`,
    /// `overloaded`, `bad_signature`, `bad_record`.
    pub fn rejection(&self, reason: &str, n: u64) {
        self.ingest_rejections.add(&[reason], n);
    }

    /// A request refused by access control on `listener` (`otlp_grpc`, `otlp_http`, `api`),
    /// `reason` `unauthenticated` or `permission_denied`. Apart from ingest rejections: on an
    /// open network scanners fill it, and it must not page like refused evidence does.
    /// A connection limit of `listener` acted (`crate::listen`): `max_connections` (a new
    /// connection found the listener full), `header_read_timeout` or `idle_timeout` (a
    /// connection closed).
    pub fn connection_limited(&self, listener: &str, limit: &str) {
        self.connection_limits.add(&[listener, limit], 1);
    }

    /// A connection of `listener` was accepted (`by` 1) or closed (`by` -1).
    pub fn connections_open(&self, listener: &'static str, by: i64) {
        *self
            .connections_open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(listener)
            .or_insert(0) += by;
    }

    pub fn access_refused(&self, listener: &str, reason: &str) {
        self.access_refused.add(&[listener, reason], 1);
    }

    /// `n` downstream record observations from `source` (`api`, `stripe`, `otlp_log`) stored for
    /// the first time (exact re-posts are not counted).
    pub fn records_received(&self, source: &str, n: u64) {
        self.records_received.add(&[source], n);
    }

    /// An event re-sent with its identity already stored under different content (`kind`:
    /// `attempt`, `readback`, `record`). The first copy was kept; this one was dropped.
    pub fn conflicting_resend(&self, kind: &str) {
        self.conflicting_resends.add(&[kind], 1);
    }

    /// One notification POST to a `[[notify]]` target (`kind`: `alertmanager` or `webhook`):
    /// `delivered` (2xx), `failed` (anything else; retried), `expired` (failed for the last
    /// time, given up).
    pub fn notification(&self, kind: &str, outcome: &str) {
        self.notifications.add(&[kind, outcome], 1);
    }

    /// One webhook by its event type and what became of it: `recorded` (evidence), `ignored`
    /// (a type reckon does not audit: acknowledged so the sender stops), `conflict`, or
    /// `refused` (a bad signature or body; type `-`, as an unverified body is not read).
    pub fn webhook(&self, source: &str, event_type: &str, outcome: &str) {
        self.webhooks.add(&[source, event_type, outcome], 1);
    }

    /// One reload of the contracts directory (SIGHUP): `ok` (validated and in force) or
    /// `error` (refused; the contracts in force stay).
    pub fn contract_reload(&self, ok: bool) {
        self.contract_reloads
            .add(&[if ok { "ok" } else { "error" }], 1);
        self.contract_reload_refused.store(u8::from(!ok), Relaxed);
    }

    /// The contracts in force, as (name, version): `reckon_contract_info`.
    pub fn set_contracts(&self, contracts: impl IntoIterator<Item = (String, String)>) {
        let mut all: Vec<(String, String)> = contracts.into_iter().collect();
        all.sort();
        *self.contracts.lock().unwrap_or_else(|e| e.into_inner()) = all;
    }

    /// Notifications in the outbox not yet delivered (nor given up), over every target.
    pub fn set_outbox_pending(&self, n: u64) {
        self.outbox_pending.store(n, Relaxed);
    }

    /// From a deciding event's arrival to its verdict (and escalation) being visible.
    pub fn verdict_latency(&self, d: Duration) {
        self.verdict_latency.observe(d);
    }

    /// One group commit to the store.
    pub fn store_append(&self, d: Duration) {
        self.store_append.observe(d);
    }

    /// Open intents a start left in the store, not read back yet (process-local).
    pub fn set_intents_pending(&self, n: u64) {
        self.intents_pending
            .store(i64::try_from(n).unwrap_or(i64::MAX), Relaxed);
    }

    /// Settled intents out of memory, waiting in the store (process-local).
    pub fn set_intents_evicted(&self, n: u64) {
        self.intents_evicted
            .store(i64::try_from(n).unwrap_or(i64::MAX), Relaxed);
    }

    /// Settled intents whose raw events retention deleted.
    pub fn intents_expired(&self, n: u64) {
        self.intents_expired.fetch_add(n, Relaxed);
    }

    /// Verdicts concluded and not yet written to the store.
    pub fn set_verdicts_unwritten(&self, n: u64) {
        self.verdicts_unwritten.store(n, Relaxed);
    }

    /// The route filter's size and its estimated false-positive rate.
    pub fn set_route_filter(&self, bytes: u64, false_positives: f64) {
        self.route_filter_bytes
            .store(i64::try_from(bytes).unwrap_or(i64::MAX), Relaxed);
        self.route_filter_false_positives
            .store(false_positives.to_bits(), Relaxed);
    }

    /// Intents the engine currently holds.
    pub fn set_intents(&self, n: u64) {
        self.intents
            .store(i64::try_from(n).unwrap_or(i64::MAX), Relaxed);
    }

    /// The whole registry in text format 0.0.4.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        self.spans_received.render(
            &mut out,
            "reckon_spans_received_total",
            "Spans received, by OTLP transport.",
            "counter",
        );
        self.spans_dropped.render(
            &mut out,
            "reckon_spans_dropped_total",
            "Spans received but not audited, by reason.",
            "counter",
        );
        self.log_records_received.render(
            &mut out,
            "reckon_log_records_received_total",
            "OTLP log records received, by transport.",
            "counter",
        );
        self.tool_attempts.render(
            &mut out,
            "reckon_tool_attempts_total",
            "Tool attempts stored (first copies only), by tool and evidence class.",
            "counter",
        );
        self.findings.render(
            &mut out,
            "reckon_findings_total",
            "Findings raised, by kind and severity.",
            "counter",
        );
        self.duplicate_effects.render(
            &mut out,
            "reckon_duplicate_effects_total",
            "Downstream objects beyond the one an intent should make, by tool.",
            "counter",
        );
        let [open, claimed, resolved, withdrawn] =
            self.escalations.each_ref().map(|g| g.load(Relaxed));
        header(
            &mut out,
            "reckon_open_escalations",
            "Escalations waiting for a person.",
            "gauge",
        );
        let _ = writeln!(out, "reckon_open_escalations {open}");
        header(
            &mut out,
            "reckon_escalations",
            "Escalations, by status.",
            "gauge",
        );
        for (status, n) in [
            ("claimed", claimed),
            ("open", open),
            ("resolved", resolved),
            ("withdrawn", withdrawn),
        ] {
            let _ = writeln!(out, "reckon_escalations{{status=\"{status}\"}} {n}");
        }
        header(
            &mut out,
            "reckon_escalations_unresolved",
            "Intents whose open or claimed escalation carries the finding, by tool, finding and severity; falls to zero when a person resolves them.",
            "gauge",
        );
        for (labels, n) in self
            .escalations_unresolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            out.push_str("reckon_escalations_unresolved");
            push_labels(
                &mut out,
                ["tool", "finding", "severity"]
                    .into_iter()
                    .zip(labels.iter().map(String::as_str)),
            );
            let _ = writeln!(out, " {n}");
        }
        self.ingest_rejections.render(
            &mut out,
            "reckon_ingest_rejections_total",
            "Items refused at ingest, by reason.",
            "counter",
        );
        self.access_refused.render(
            &mut out,
            "reckon_access_refused_total",
            "Requests refused for a missing or unknown token, or a role that does not allow them.",
            "counter",
        );
        self.connection_limits.render(
            &mut out,
            "reckon_connection_limits_total",
            "Connection limits that acted, by listener and limit: max_connections (a new connection found the listener full; the idlest was closed or it waited), header_read_timeout and idle_timeout (a connection closed).",
            "counter",
        );
        header(
            &mut out,
            "reckon_connections_open",
            "Open connections per listener (each listener holds at most max_connections).",
            "gauge",
        );
        for (listener, n) in self
            .connections_open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            out.push_str("reckon_connections_open");
            push_labels(&mut out, [("listener", *listener)]);
            let _ = writeln!(out, " {n}");
        }
        self.records_received.render(
            &mut out,
            "reckon_records_received_total",
            "Downstream record observations stored (first copies only), by source.",
            "counter",
        );
        self.conflicting_resends.render(
            &mut out,
            "reckon_conflicting_resends_total",
            "Re-sent events whose identity was stored with different content (the first copy is kept), by kind.",
            "counter",
        );
        self.webhooks.render(
            &mut out,
            "reckon_webhooks_total",
            "Webhooks received, by source, event type and outcome (recorded, ignored: a type reckon does not audit, conflict, refused).",
            "counter",
        );
        self.notifications.render(
            &mut out,
            "reckon_notifications_total",
            "Notification POSTs to [[notify]] targets, by kind (alertmanager, webhook) and outcome (delivered, failed, expired).",
            "counter",
        );
        self.contract_reloads.render(
            &mut out,
            "reckon_contract_reloads_total",
            "Reloads of the contracts directory (SIGHUP), by result: ok (in force) or error (refused, the contracts in force stay).",
            "counter",
        );
        header(
            &mut out,
            "reckon_contract_reload_refused",
            "1 while the latest reload of the contracts directory was refused (the files on disk are not the contracts in force), else 0.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "reckon_contract_reload_refused {}",
            self.contract_reload_refused.load(Relaxed)
        );
        header(
            &mut out,
            "reckon_contract_info",
            "Always 1 per contract in force; the labels carry its name and version (the contract_version verdicts name).",
            "gauge",
        );
        for (name, version) in self
            .contracts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            out.push_str("reckon_contract_info");
            push_labels(
                &mut out,
                [("contract", name.as_str()), ("version", version.as_str())],
            );
            out.push_str(" 1\n");
        }
        header(
            &mut out,
            "reckon_notify_outbox_pending",
            "Notifications in the outbox not yet delivered (nor given up), over every target.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "reckon_notify_outbox_pending {}",
            self.outbox_pending.load(Relaxed)
        );
        self.verdict_latency.render(
            &mut out,
            "reckon_verdict_latency_seconds",
            "Time from a deciding event's arrival to its verdict being visible.",
        );
        self.store_append.render(
            &mut out,
            "reckon_store_append_seconds",
            "Time to make one batch durable in the store.",
        );
        header(
            &mut out,
            "reckon_intents",
            "Intents held by the audit engine.",
            "gauge",
        );
        let _ = writeln!(out, "reckon_intents {}", self.intents.load(Relaxed));
        header(
            &mut out,
            "reckon_intents_evicted",
            "Intents at rest (settled; or quiet: unknown or pending with nothing booked and no open escalation, or an orphan record past its grace) that left memory for the store; an event on one brings it back.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "reckon_intents_evicted {}",
            self.intents_evicted.load(Relaxed)
        );
        header(
            &mut out,
            "reckon_intents_pending",
            "Open intents a start left in the store to read back behind serving, not back in memory yet.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "reckon_intents_pending {}",
            self.intents_pending.load(Relaxed)
        );
        header(
            &mut out,
            "reckon_route_filter_bytes",
            "Memory of the filter that finds intents out of memory; it grows in doubling stages up to route_filter_max.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "reckon_route_filter_bytes {}",
            self.route_filter_bytes.load(Relaxed)
        );
        header(
            &mut out,
            "reckon_route_filter_false_positive_ratio",
            "Estimated share of new routes the route filter answers 'maybe' to, each a store lookup; it rises once the filter is at route_filter_max.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "reckon_route_filter_false_positive_ratio {}",
            f64::from_bits(self.route_filter_false_positives.load(Relaxed))
        );
        header(
            &mut out,
            "reckon_verdicts_unwritten",
            "Verdicts concluded and not yet written to the store; past 65536, new exports are refused (retryably) until the writer catches up.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "reckon_verdicts_unwritten {}",
            self.verdicts_unwritten.load(Relaxed)
        );
        header(
            &mut out,
            "reckon_intents_expired_total",
            "Settled intents whose raw events lost their content (tool-call arguments) to `retention`; what a late event is judged against, and verdicts, findings and escalations, stay.",
            "counter",
        );
        let _ = writeln!(
            out,
            "reckon_intents_expired_total {}",
            self.intents_expired.load(Relaxed)
        );
        if let up @ (0 | 1) = self.store_up.load(Relaxed) {
            header(
                &mut out,
                "reckon_store_up",
                "1 when the store answered a read during this scrape (the /readyz probe), else 0.",
                "gauge",
            );
            let _ = writeln!(out, "reckon_store_up {up}");
        }
        if let Some((instance, is)) = self
            .auditor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            header(
                &mut out,
                "reckon_auditor",
                "1 on the instance that audits (holds the cluster's lease; one instance alone is its own auditor), else 0.",
                "gauge",
            );
            out.push_str("reckon_auditor{instance=\"");
            escape_label_into(&mut out, &instance);
            let _ = writeln!(out, "\"}} {}", u8::from(is));
        }
        header(
            &mut out,
            "reckon_deadline_overdue_seconds",
            "How long ago the earliest re-audit the engine has booked fell due; 0 when none is due. Stays above 0 only when the deadline timer is stuck.",
            "gauge",
        );
        let overdue = self.deadline_overdue_ns.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "reckon_deadline_overdue_seconds {}",
            format_float(overdue)
        );
        header(
            &mut out,
            "reckon_build_info",
            "Always 1; the labels carry the build.",
            "gauge",
        );
        out.push_str("reckon_build_info");
        push_labels(&mut out, [("version", self.version)]);
        out.push_str(" 1\n");
        if let Some(rss) = resident_memory_bytes() {
            header(
                &mut out,
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                "gauge",
            );
            let _ = writeln!(out, "process_resident_memory_bytes {rss}");
        }
        out
    }
}

/// The process's resident set, as the kernel reports it (Linux; elsewhere the series is absent).
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn push_labels<'a>(out: &mut String, labels: impl IntoIterator<Item = (&'a str, &'a str)>) {
    out.push('{');
    for (i, (k, v)) in labels.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        escape_label_into(out, v);
        out.push('"');
    }
    out.push('}');
}

/// Label values escape `\`, `"` and newline (the format's only three).
fn escape_label_into(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// HELP text escapes `\` and newline (quotes are literal there).
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Prometheus floats: `1` rather than `1.0` is fine, and Rust's shortest round-trip form never
/// uses an exponent for the values we print.
fn format_float(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    format!("{v}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses text format 0.0.4 back into (series line without value, value), checking that every
    /// sample belongs to a family announced with HELP and TYPE just before.
    fn parse(text: &str) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        let mut typed: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                assert!(rest.split_once(' ').is_some(), "{line}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                typed = Some(name.to_string());
                continue;
            }
            assert!(!line.starts_with('#'), "{line}");
            let fam = typed.as_deref().expect("sample before TYPE");
            assert!(line.starts_with(fam), "{line} outside {fam}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("{line}")),
            };
            out.push((series.to_string(), value));
        }
        out
    }

    fn value(samples: &[(String, f64)], series: &str) -> Option<f64> {
        samples.iter().find(|(s, _)| s == series).map(|(_, v)| *v)
    }

    #[test]
    fn counters_render_exact_lines() {
        let m = Metrics::new();
        m.spans_received("grpc", 10);
        m.spans_received("http", 2);
        m.spans_received("grpc", 5);
        m.spans_dropped("not_a_tool_span", 12);
        m.log_records_received("http", 3);
        m.tool_attempt("issue_refund", "unknown");
        m.tool_attempt("issue_refund", "unknown");
        m.tool_attempt("issue_refund", "completed");
        m.finding("duplicate_effect", "critical");
        m.duplicate_effect("issue_refund");
        m.rejection("body_too_large", 1);
        m.rejection("decode_error", 4);
        m.records_received("stripe", 7);
        m.set_escalations(3, 1, 9, 2);
        m.set_intents(42);
        let text = m.render();
        for line in [
            "# HELP reckon_spans_received_total Spans received, by OTLP transport.",
            "# TYPE reckon_spans_received_total counter",
            "reckon_spans_received_total{transport=\"grpc\"} 15",
            "reckon_spans_received_total{transport=\"http\"} 2",
            "reckon_spans_dropped_total{reason=\"not_a_tool_span\"} 12",
            "reckon_log_records_received_total{transport=\"http\"} 3",
            "reckon_tool_attempts_total{tool=\"issue_refund\",class=\"completed\"} 1",
            "reckon_tool_attempts_total{tool=\"issue_refund\",class=\"unknown\"} 2",
            "reckon_findings_total{kind=\"duplicate_effect\",severity=\"critical\"} 1",
            "reckon_duplicate_effects_total{tool=\"issue_refund\"} 1",
            "reckon_ingest_rejections_total{reason=\"body_too_large\"} 1",
            "reckon_ingest_rejections_total{reason=\"decode_error\"} 4",
            "reckon_records_received_total{source=\"stripe\"} 7",
            "# TYPE reckon_open_escalations gauge",
            "reckon_open_escalations 3",
            "reckon_escalations{status=\"claimed\"} 1",
            "reckon_escalations{status=\"open\"} 3",
            "reckon_escalations{status=\"resolved\"} 9",
            "reckon_escalations{status=\"withdrawn\"} 2",
            "reckon_intents 42",
            "# TYPE reckon_build_info gauge",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(text.contains(&format!(
            "reckon_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
        // Sorted series: completed before unknown, grpc before http.
        let g = text.find("transport=\"grpc\"").unwrap();
        let h = text.find("transport=\"http\"} 2").unwrap();
        assert!(g < h);
        assert!(text.ends_with('\n'));
        parse(&text);
    }

    #[test]
    fn contract_reloads_and_the_contracts_in_force() {
        let m = Metrics::new();
        let samples = parse(&m.render());
        for result in ["ok", "error"] {
            assert_eq!(
                value(
                    &samples,
                    &format!("reckon_contract_reloads_total{{result=\"{result}\"}}")
                ),
                Some(0.0),
                "both series from the start"
            );
        }
        assert_eq!(value(&samples, "reckon_contract_reload_refused"), Some(0.0));
        m.contract_reload(false);
        m.contract_reload(false);
        assert_eq!(
            value(&parse(&m.render()), "reckon_contract_reload_refused"),
            Some(1.0),
            "until a reload succeeds"
        );
        m.contract_reload(true);
        m.set_contracts([("b".into(), "22".into()), ("a".into(), "11".into())]);
        m.set_contracts([
            ("payments.refund".into(), "1221e338fd7b41cd".into()),
            ("notifications.email".into(), "0f".into()),
        ]);
        let text = m.render();
        let samples = parse(&text);
        assert_eq!(
            value(&samples, "reckon_contract_reloads_total{result=\"error\"}"),
            Some(2.0)
        );
        assert_eq!(
            value(&samples, "reckon_contract_reloads_total{result=\"ok\"}"),
            Some(1.0)
        );
        assert_eq!(value(&samples, "reckon_contract_reload_refused"), Some(0.0));
        let info: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("reckon_contract_info{"))
            .collect();
        assert_eq!(
            info,
            [
                "reckon_contract_info{contract=\"notifications.email\",version=\"0f\"} 1",
                "reckon_contract_info{contract=\"payments.refund\",version=\"1221e338fd7b41cd\"} 1",
            ],
            "replaced whole, sorted"
        );
        assert!(text.contains("# TYPE reckon_contract_info gauge\n"));
    }

    #[test]
    fn untouched_families_still_announce_themselves() {
        let text = Metrics::new().render();
        for name in [
            "reckon_spans_received_total",
            "reckon_tool_attempts_total",
            "reckon_findings_total",
            "reckon_verdict_latency_seconds",
            "reckon_store_append_seconds",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        }
        let samples = parse(&text);
        assert_eq!(
            value(&samples, "reckon_verdict_latency_seconds_count"),
            Some(0.0)
        );
        assert_eq!(
            value(
                &samples,
                "reckon_verdict_latency_seconds_bucket{le=\"+Inf\"}"
            ),
            Some(0.0)
        );
    }

    #[test]
    fn histogram_is_cumulative_and_inf_equals_count() {
        let m = Metrics::new();
        for ms in [0.1, 0.5, 0.7, 3.0, 3.0, 40.0, 900.0, 7000.0] {
            m.verdict_latency(Duration::from_secs_f64(ms / 1000.0));
        }
        m.store_append(Duration::from_millis(2));
        let samples = parse(&m.render());
        let buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|(s, v)| {
                let le = s
                    .strip_prefix("reckon_verdict_latency_seconds_bucket{le=\"")?
                    .strip_suffix("\"}")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                Some((le, *v))
            })
            .collect();
        assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1);
        assert_eq!(buckets[0], (0.0005, 2.0)); // 0.1 ms and exactly 0.5 ms: `le` is inclusive
        assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
        for w in buckets.windows(2) {
            assert!(w[0].0 < w[1].0, "bounds ascend");
            assert!(w[0].1 <= w[1].1, "counts accumulate");
        }
        let want = |le: f64| buckets.iter().find(|b| b.0 == le).unwrap().1;
        assert_eq!(want(0.001), 3.0);
        assert_eq!(want(0.005), 5.0);
        assert_eq!(want(0.05), 6.0);
        assert_eq!(want(1.0), 7.0);
        assert_eq!(want(5.0), 7.0);
        let count = value(&samples, "reckon_verdict_latency_seconds_count").unwrap();
        assert_eq!(want(f64::INFINITY), count);
        assert_eq!(count, 8.0);
        let sum = value(&samples, "reckon_verdict_latency_seconds_sum").unwrap();
        assert!((sum - 7.9473).abs() < 1e-6, "{sum}");
        assert_eq!(
            value(&samples, "reckon_store_append_seconds_count"),
            Some(1.0)
        );
        assert_eq!(
            value(
                &samples,
                "reckon_store_append_seconds_bucket{le=\"0.0025\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&samples, "reckon_store_append_seconds_bucket{le=\"0.001\"}"),
            Some(0.0)
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::new();
        m.tool_attempt("say \"hi\"\\now\nthen", "unknown");
        let text = m.render();
        assert!(
            text.contains(
                "reckon_tool_attempts_total{tool=\"say \\\"hi\\\"\\\\now\\nthen\",class=\"unknown\"} 1\n"
            ),
            "{text}"
        );
        // Still one sample per line.
        parse(&text);
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    fn labels(tool: &str, finding: &str, severity: &str) -> [String; 3] {
        [tool, finding, severity].map(String::from)
    }

    #[test]
    fn unresolved_escalations_fall_to_zero_instead_of_vanishing() {
        let m = Metrics::new();
        let text = m.render();
        assert!(text.contains("# TYPE reckon_escalations_unresolved gauge\n"));
        assert!(!text.contains("reckon_escalations_unresolved{"));
        m.set_escalations_unresolved([
            (labels("issue_refund", "duplicate_effect", "critical"), 2),
            (labels("issue_refund", "new_key_retry", "high"), 1),
        ]);
        let samples = parse(&m.render());
        let dup = "reckon_escalations_unresolved{tool=\"issue_refund\",finding=\"duplicate_effect\",severity=\"critical\"}";
        let nkr = "reckon_escalations_unresolved{tool=\"issue_refund\",finding=\"new_key_retry\",severity=\"high\"}";
        assert_eq!(value(&samples, dup), Some(2.0));
        assert_eq!(value(&samples, nkr), Some(1.0));
        // A person resolved both duplicate effects; the key retry is still open elsewhere.
        m.set_escalations_unresolved([(labels("issue_refund", "new_key_retry", "high"), 1)]);
        let samples = parse(&m.render());
        assert_eq!(value(&samples, dup), Some(0.0));
        assert_eq!(value(&samples, nkr), Some(1.0));
        m.set_escalations_unresolved([]);
        let samples = parse(&m.render());
        assert_eq!(value(&samples, dup), Some(0.0));
        assert_eq!(value(&samples, nkr), Some(0.0));
    }

    #[test]
    fn unresolved_escalation_series_are_capped() {
        let m = Metrics::new();
        let many = (0..MAX_SERIES + 5)
            .map(|i| (labels(&format!("t{i}"), "duplicate_effect", "critical"), 1));
        m.set_escalations_unresolved(many);
        let samples = parse(&m.render());
        let series = samples
            .iter()
            .filter(|(s, _)| s.starts_with("reckon_escalations_unresolved{"))
            .count();
        assert_eq!(series, MAX_SERIES + 1);
        assert_eq!(
            value(&samples, "reckon_escalations_unresolved{tool=\"_overflow\",finding=\"_overflow\",severity=\"_overflow\"}"),
            Some(5.0)
        );
    }

    #[test]
    fn store_probe_and_deadline_gauges() {
        let m = Metrics::new();
        // Not probed yet: no sample claims the store is up or down.
        assert!(!m.render().contains("reckon_store_up"));
        assert_eq!(
            value(&parse(&m.render()), "reckon_deadline_overdue_seconds"),
            Some(0.0)
        );
        m.set_store_up(false);
        m.set_deadline_overdue(Duration::from_millis(1500));
        let samples = parse(&m.render());
        assert_eq!(value(&samples, "reckon_store_up"), Some(0.0));
        assert_eq!(
            value(&samples, "reckon_deadline_overdue_seconds"),
            Some(1.5)
        );
        m.set_store_up(true);
        assert_eq!(value(&parse(&m.render()), "reckon_store_up"), Some(1.0));
    }

    #[test]
    fn the_auditor_gauge_names_its_instance() {
        let m = Metrics::new();
        assert!(!m.render().contains("reckon_auditor"), "unset: no sample");
        m.set_auditor("host-\"a\"", true);
        assert!(
            m.render()
                .contains("reckon_auditor{instance=\"host-\\\"a\\\"\"} 1\n"),
            "{}",
            m.render()
        );
        m.set_auditor("b", false);
        assert!(m.render().contains("reckon_auditor{instance=\"b\"} 0\n"));
    }

    #[test]
    fn series_are_capped() {
        let f = Family::new(&["tool"]);
        for i in 0..MAX_SERIES + 10 {
            f.add(&[&format!("t{i}")], 1);
        }
        f.add(&["t0"], 1);
        let snap = f.snapshot();
        assert_eq!(snap.len(), MAX_SERIES + 1);
        assert_eq!(snap[&["t0".to_string()][..]], 2);
        assert_eq!(snap[&[OVERFLOW.to_string()][..]], 10);
    }

    #[test]
    fn long_label_values_are_cut_at_a_character_boundary() {
        let f = Family::new(&["tool"]);
        let long = format!(
            "{}é{}",
            "a".repeat(MAX_LABEL_BYTES - 1),
            "b".repeat(1 << 20)
        );
        f.add(&[&long], 1);
        f.add(&[&format!("{}zzz", &long[..MAX_LABEL_BYTES + 1])], 1);
        let snap = f.snapshot();
        // Both start with the same 127 bytes and a two-byte 'é' that does not fit: one series.
        assert_eq!(snap.len(), 1);
        let (key, n) = snap.iter().next().unwrap();
        assert_eq!(key[0], "a".repeat(MAX_LABEL_BYTES - 1));
        assert_eq!(*n, 2);

        let m = Metrics::new();
        m.set_escalations_unresolved([(labels(&long, "duplicate_effect", "critical"), 1)]);
        let text = m.render();
        let line = text
            .lines()
            .find(|l| l.starts_with("reckon_escalations_unresolved{"))
            .unwrap();
        assert!(line.len() < 2 * MAX_LABEL_BYTES, "{line}");
    }

    #[test]
    fn racing_first_sights_never_pass_the_cap() {
        let f = Arc::new(Family::new(&["tool"]));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for i in 0..MAX_SERIES {
                        f.add(&[&format!("t{t}-{i}")], 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let snap = f.snapshot();
        assert_eq!(snap.len(), MAX_SERIES + 1);
        assert_eq!(snap.values().sum::<u64>(), 4 * MAX_SERIES as u64);
        assert_eq!(snap[&[OVERFLOW.to_string()][..]], 3 * MAX_SERIES as u64);
    }

    #[test]
    fn concurrent_updates_are_all_counted() {
        let m = Arc::new(Metrics::new());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        m.tool_attempt(&format!("tool{}", i % 3), "completed");
                        m.spans_received(if t % 2 == 0 { "grpc" } else { "http" }, 2);
                        m.verdict_latency(Duration::from_micros(i));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let samples = parse(&m.render());
        let total: f64 = samples
            .iter()
            .filter(|(s, _)| s.starts_with("reckon_tool_attempts_total{"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(total, 4000.0);
        assert_eq!(
            value(&samples, "reckon_spans_received_total{transport=\"grpc\"}"),
            Some(4000.0)
        );
        assert_eq!(
            value(&samples, "reckon_verdict_latency_seconds_count"),
            Some(4000.0)
        );
    }
}
