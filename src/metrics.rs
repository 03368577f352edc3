// TEMPORARY stub for compile checks; replaced by the real registry at merge.
use std::time::Duration;
#[derive(Default)]
pub struct Metrics;
impl Metrics {
    pub fn new() -> Self {
        Metrics
    }
    pub fn spans_received(&self, _t: &str, _n: u64) {}
    pub fn spans_dropped(&self, _r: &str, _n: u64) {}
    pub fn log_records_received(&self, _t: &str, _n: u64) {}
    pub fn record_received(&self, _s: &str) {}
    pub fn tool_attempt(&self, _tool: &str, _class: &str) {}
    pub fn finding(&self, _k: &str, _s: &str) {}
    pub fn duplicate_effect(&self, _tool: &str) {}
    pub fn set_escalations(&self, _o: u64, _c: u64, _r: u64) {}
    pub fn set_intents(&self, _n: u64) {}
    pub fn rejection(&self, _r: &str, _n: u64) {}
    pub fn verdict_latency(&self, _d: Duration) {}
    pub fn store_append(&self, _d: Duration) {}
    pub fn render(&self) -> String {
        String::new()
    }
}
