//! Several instances on one ClickHouse cluster (DESIGN.md "Scale-out"). Work in progress
//! (issue 38): the auditor's lease (`lease.rs`) exists and is tested against a real ZooKeeper;
//! nothing in `reckon serve` uses it yet, so every instance is its own auditor, as DESIGN.md
//! says an instance without `[cluster]` is.

pub mod lease;

/// This instance's name: the host name (DESIGN.md's default for `[cluster] instance`), or
/// `reckon` where the system does not say.
pub fn default_instance() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "reckon".to_string())
}
