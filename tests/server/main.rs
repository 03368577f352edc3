//! reckon as a running server: real OTLP exporters, real HTTP, a real SQLite file.

mod api;
mod bad_input;
mod otlp_export;
mod otlp_json;
mod python_sdk;
mod restart;
mod seed_matrix;
mod support;
