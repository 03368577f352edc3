//! The end-to-end server suite again, with reckon on ClickHouse (the server named by
//! `RECKON_TEST_CLICKHOUSE`; `.ci/run` starts Debian's 18.16). The same spans and records must
//! give exactly the verdicts, escalations and answers the SQLite-backed reckon gives.

#[path = "server/api.rs"]
mod api;
#[path = "server/audit_truth.rs"]
mod audit_truth;
#[path = "server/bad_input.rs"]
mod bad_input;
#[path = "server/conflicts.rs"]
mod conflicts;
#[path = "server/eviction.rs"]
mod eviction;
#[path = "server/notify.rs"]
mod notify;
#[path = "server/otlp_export.rs"]
mod otlp_export;
#[path = "server/otlp_json.rs"]
mod otlp_json;
#[path = "server/overload.rs"]
mod overload;
#[path = "server/reaudit.rs"]
mod reaudit;
#[path = "server/reload.rs"]
mod reload;
#[path = "server/restart.rs"]
mod restart;
#[path = "server/seed_matrix.rs"]
mod seed_matrix;
#[path = "server/stall.rs"]
mod stall;
#[path = "server/support.rs"]
mod support;

pub const BACKEND: support::Backend = support::Backend::ClickHouse;
