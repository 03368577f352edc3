//! The ClickHouse store (`--store clickhouse://user:pass@host:8123/db`).

pub mod schema;
