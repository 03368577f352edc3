//! reckon as a running server: real OTLP exporters, real HTTP, a real SQLite file.

mod access;
mod api;
mod audit_truth;
mod bad_input;
mod conflicts;
mod connections;
mod disk_full;
mod eviction;
mod limits;
mod loadgen;
mod notify;
mod otlp_export;
mod otlp_json;
mod overload;
mod paging;
mod python_sdk;
mod reaudit;
mod reload;
mod restart;
mod seed_matrix;
mod support;

/// The store this binary runs the suite on (`tests/server_clickhouse.rs` runs it on ClickHouse).
pub const BACKEND: support::Backend = support::Backend::Sqlite;
