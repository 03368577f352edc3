//! reckon: an OTLP export target that audits AI-agent tool calls against the downstream's
//! idempotency contract. See ARCHITECTURE.md for the code map and the invariants.

pub mod api;
pub mod app;
pub mod audit;
pub mod auth;
pub mod bloom;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod codec;
pub mod config;
pub mod contract;
pub mod demo;
pub mod engine;
pub mod escalation;
pub mod ingest;
pub mod listen;
pub mod loadgen;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod process;
pub mod reaudit;
pub mod report;
pub mod store;
pub mod tls;
mod toml_source;

// The test builders name reckon `reckon::`, so the integration suites can include the same file.
#[cfg(test)]
extern crate self as reckon;
#[cfg(test)]
mod test_builders;
