//! Ingest: decode what transports carry into `model` events, and the one ingest service every
//! transport feeds.
//!
//! `otlp`, `records` and `stripe` are pure decoders (no I/O, no clock: `now` is passed in).
//! `bounds` is the one policy on times from other clocks, applied by every decoder against the
//! receive time; `limits` the one on what a span, a log record or an export may carry.
//! `service` makes decoded events durable and hands them to the engine; `grpc` and `http` are
//! thin adapters that only decode and map errors through `error`'s one table.

pub mod bounds;
pub mod limits;
pub mod otlp;
pub mod records;
pub mod stripe;

pub mod body;
pub mod error;
pub mod grpc;
pub mod http;
pub mod service;
