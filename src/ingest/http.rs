//! OTLP/HTTP adapter (`POST /v1/traces`, `POST /v1/logs`): protobuf or JSON, gzip or not. The
//! response uses the request's content type, as the OTLP spec requires; errors carry a
//! `google.rpc.Status` body and, when retryable, `Retry-After`.

use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use prost::Message;

use super::body::{body_of, discard_later, read_body, BodyLimits};
use super::error::IngestError;
use super::otlp;
use super::service::{IngestService, PartialSuccess, Transport};
use crate::auth::{Gate, Need};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Protobuf,
    Json,
}

#[derive(Clone)]
struct HttpState {
    service: Arc<IngestService>,
    body: BodyLimits,
}

pub fn router(service: Arc<IngestService>, body: BodyLimits, gate: Gate) -> Router {
    let max_bytes = body.max_bytes;
    Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/logs", post(logs))
        // Before admission and before the body is read: a refused export costs nothing.
        .route_layer(axum::middleware::from_fn_with_state(
            (gate, max_bytes),
            authorize,
        ))
        // Bodies are read by `read_body` under the limit, after admission.
        .layer(DefaultBodyLimit::disable())
        .with_state(HttpState { service, body })
}

/// Every export needs an `ingest` token; a refusal answers in the request's format, as every
/// other OTLP/HTTP error does.
async fn authorize(
    State((gate, max_bytes)): State<(Gate, usize)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    match gate.check(header, Need::Ingest) {
        Ok(_) => next.run(request).await,
        Err(e) => {
            let format = format_of(request.headers()).unwrap_or(Format::Protobuf);
            discard_later(request.into_body(), max_bytes);
            let mut response = error_response(format, &IngestError::from(e));
            if response.status() == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"reckon\""),
                );
            }
            response
        }
    }
}

fn format_of(headers: &HeaderMap) -> Result<Format, IngestError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/x-protobuf" | "application/protobuf" => Ok(Format::Protobuf),
        "application/json" => Ok(Format::Json),
        _ => Err(IngestError::UnsupportedMediaType(ct.to_string())),
    }
}

async fn traces(State(s): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    export(s, headers, body, Signal::Traces).await
}

async fn logs(State(s): State<HttpState>, headers: HeaderMap, body: Body) -> Response {
    export(s, headers, body, Signal::Logs).await
}

/// One OTLP/HTTP export: admit, read, decode off the async workers, ingest, answer in kind.
async fn export(s: HttpState, headers: HeaderMap, body: Body, signal: Signal) -> Response {
    let span = tracing::info_span!("otlp.export", transport = "http");
    export_in(s, headers, body, signal).instrument(span).await
}

async fn export_in(s: HttpState, headers: HeaderMap, body: Body, signal: Signal) -> Response {
    let received = Instant::now();
    let format = format_of(&headers).unwrap_or(Format::Protobuf);
    // Refuse before reading: a body costs memory, an overload answer costs nothing (the body is
    // then read to its end and dropped, behind the answer: see `discard_later`).
    let admitted = format_of(&headers).and_then(|_| s.service.admit());
    let admitted = match admitted {
        Ok(a) => a,
        Err(e) => {
            discard_later(body, s.body.max_bytes);
            if !matches!(e, IngestError::Overloaded) {
                s.service.refused(&e);
            }
            return error_response(format, &e);
        }
    };
    let result = async {
        let body = read_body(body, s.body).await?;
        let service = s.service.clone();
        let max = s.body.max_bytes;
        let encoding = headers.clone();
        // Gunzip and decode off the async workers. The permit travels with them: a caller that
        // leaves does not free capacity the (uncancellable) decode is still using.
        let export = tracing::Span::current();
        let (decoded, admitted) = tokio::task::spawn_blocking(move || {
            let _decode = tracing::info_span!(parent: &export, "otlp.decode").entered();
            let decoded = body_of(&encoding, &body, max).and_then(|raw| {
                match (signal, format) {
                    (Signal::Traces, Format::Protobuf) => {
                        otlp::traces_from_protobuf_bytes(&raw, &service.contracts())
                    }
                    (Signal::Traces, Format::Json) => {
                        otlp::traces_from_json(&raw, &service.contracts())
                    }
                    (Signal::Logs, Format::Protobuf) => otlp::logs_from_protobuf_bytes(&raw),
                    (Signal::Logs, Format::Json) => otlp::logs_from_json(&raw),
                }
                .map_err(|e| IngestError::Decode(e.to_string()))
            });
            (decoded, admitted)
        })
        .await
        .map_err(|e| IngestError::Decode(format!("decoder failed: {e}")))?;
        let decoded = decoded?;
        match signal {
            Signal::Traces => {
                s.service
                    .traces(admitted, Transport::Http, decoded, received)
                    .await
            }
            Signal::Logs => {
                s.service
                    .logs(admitted, Transport::Http, decoded, received)
                    .await
            }
        }
    }
    .await;
    match result {
        Ok(reply) => success(format, signal, reply),
        Err(e) => {
            if !matches!(e, IngestError::Overloaded | IngestError::Unavailable(_)) {
                s.service.refused(&e);
            }
            error_response(format, &e)
        }
    }
}

#[derive(Clone, Copy)]
enum Signal {
    Traces,
    Logs,
}

fn success(format: Format, signal: Signal, reply: PartialSuccess) -> Response {
    let partial = reply.rejected > 0 || !reply.message.is_empty();
    match format {
        Format::Protobuf => {
            let bytes = match signal {
                Signal::Traces => ExportTraceServiceResponse {
                    partial_success: partial.then_some(ExportTracePartialSuccess {
                        rejected_spans: reply.rejected as i64,
                        error_message: reply.message,
                    }),
                }
                .encode_to_vec(),
                Signal::Logs => ExportLogsServiceResponse {
                    partial_success: partial.then_some(ExportLogsPartialSuccess {
                        rejected_log_records: reply.rejected as i64,
                        error_message: reply.message,
                    }),
                }
                .encode_to_vec(),
            };
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/x-protobuf")],
                bytes,
            )
                .into_response()
        }
        Format::Json => {
            let field = match signal {
                Signal::Traces => "rejectedSpans",
                Signal::Logs => "rejectedLogRecords",
            };
            // ProtoJSON writes int64 as a string.
            let body = if partial {
                serde_json::json!({ "partialSuccess": { field: reply.rejected.to_string(), "errorMessage": reply.message } })
            } else {
                serde_json::json!({})
            };
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
    }
}

/// `google.rpc.Status`, for OTLP/HTTP error bodies in protobuf.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

pub fn error_response(format: Format, e: &IngestError) -> Response {
    let w = e.wire();
    let status = StatusCode::from_u16(w.http).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = match format {
        Format::Protobuf => {
            let body = RpcStatus {
                code: w.grpc as i32,
                message: e.to_string(),
            }
            .encode_to_vec();
            (
                status,
                [(header::CONTENT_TYPE, "application/x-protobuf")],
                body,
            )
                .into_response()
        }
        Format::Json => {
            let body = serde_json::json!({ "code": w.grpc as i32, "message": e.to_string() });
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
    };
    if let Some(after) = w.retry_after {
        if let Ok(v) = HeaderValue::from_str(&after.as_secs().max(1).to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    response
}
