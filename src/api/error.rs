//! API errors: `{"error": {"code", "message"}}` with the HTTP status the code implies.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::engine::EngineError;
use crate::escalation::EscalationError;
use crate::ingest::error::IngestError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Conflict(String),
    #[error("method not allowed on this endpoint")]
    MethodNotAllowed,
    #[error(transparent)]
    Ingest(#[from] IngestError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<EscalationError> for ApiError {
    fn from(e: EscalationError) -> Self {
        match e {
            EscalationError::NotFound(_) => ApiError::NotFound(e.to_string()),
            EscalationError::AlreadyClaimed { .. }
            | EscalationError::AlreadyResolved(_)
            | EscalationError::Withdrawn(_) => ApiError::Conflict(e.to_string()),
            EscalationError::Missing(_) => ApiError::BadRequest(e.to_string()),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Store(s) => ApiError::Store(s),
            EngineError::Escalation(x) => x.into(),
            EngineError::Conflict(m) => ApiError::Conflict(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, retry_after) = match &self {
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", None),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request", None),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict", None),
            ApiError::MethodNotAllowed => {
                (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", None)
            }
            ApiError::Ingest(e) => {
                let w = e.wire();
                (
                    StatusCode::from_u16(w.http).unwrap_or(StatusCode::BAD_REQUEST),
                    w.code,
                    w.retry_after,
                )
            }
            ApiError::Store(StoreError::BadCursor(_)) => {
                (StatusCode::BAD_REQUEST, "bad_cursor", None)
            }
            ApiError::Store(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                Some(std::time::Duration::from_secs(2)),
            ),
        };
        let body = serde_json::json!({ "error": { "code": code, "message": self.to_string() } });
        let mut response = (status, Json(body)).into_response();
        if let Some(after) = retry_after {
            if let Ok(v) = HeaderValue::from_str(&after.as_secs().max(1).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}
