//! One error table for every transport: each ingest failure maps to one gRPC code, one HTTP
//! status, one stable API code, and whether (and when) the client should retry. OTLP exporters
//! retry exactly the codes the OTLP spec names as retryable, so the mapping decides whether data
//! is re-sent or dropped by the client.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The body could not be decoded at all (truncated protobuf, invalid JSON).
    #[error("cannot decode request: {0}")]
    Decode(String),
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// The body was still arriving at the deadline (`body_read_timeout`): a client too slow,
    /// or one holding an export slot on purpose. Not retryable by OTLP's rules: a client that
    /// slow would time out again.
    #[error("request body did not arrive within {0:?}")]
    BodyTimeout(Duration),
    #[error("unsupported content type {0:?}: send application/x-protobuf or application/json")]
    UnsupportedMediaType(String),
    #[error("unsupported content encoding {0:?}: send gzip or none")]
    UnsupportedEncoding(String),
    /// Too many exports in flight, or too many verdicts waiting to be written: refused before
    /// any work, so the client's retry is safe.
    #[error("reckon is at capacity; retry later")]
    Overloaded,
    /// The store could not make the events durable: nothing was acknowledged.
    #[error("the store did not confirm the write: {0}")]
    Unavailable(String),
    #[error("webhook signature rejected: {0}")]
    BadSignature(String),
    #[error("{0}")]
    BadRequest(String),
    /// The item's identity is stored with other content (a Stripe event whose refund,
    /// status and time are stored from another event): the first copy stays, this one is not
    /// stored. Not retryable: the same body meets the same first copy.
    #[error("{0}")]
    Conflict(String),
    /// No token, or one reckon does not know: one answer for both (`auth`).
    #[error("{}", crate::auth::AuthError::Unauthenticated)]
    Unauthenticated,
    /// A known token whose role does not allow this.
    #[error("{0}")]
    PermissionDenied(String),
}

impl From<crate::auth::AuthError> for IngestError {
    fn from(e: crate::auth::AuthError) -> Self {
        match e {
            crate::auth::AuthError::Unauthenticated => IngestError::Unauthenticated,
            other => IngestError::PermissionDenied(other.to_string()),
        }
    }
}

/// How an [`IngestError`] appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireError {
    pub grpc: tonic::Code,
    pub http: u16,
    /// The `error.code` of the JSON error body.
    pub code: &'static str,
    /// Sent as `Retry-After` (HTTP) and `RetryInfo` (gRPC) for retryable refusals.
    pub retry_after: Option<Duration>,
}

impl IngestError {
    pub fn wire(&self) -> WireError {
        use tonic::Code;
        let (grpc, http, code, retry_after) = match self {
            IngestError::Decode(_) => (Code::InvalidArgument, 400, "decode_error", None),
            IngestError::TooLarge { .. } => (Code::InvalidArgument, 413, "body_too_large", None),
            IngestError::BodyTimeout(_) => (Code::DeadlineExceeded, 408, "body_timeout", None),
            IngestError::UnsupportedMediaType(_) => {
                (Code::InvalidArgument, 415, "unsupported_media_type", None)
            }
            IngestError::UnsupportedEncoding(_) => {
                (Code::InvalidArgument, 415, "unsupported_encoding", None)
            }
            IngestError::Overloaded => (
                Code::ResourceExhausted,
                429,
                "overloaded",
                Some(Duration::from_secs(1)),
            ),
            IngestError::Unavailable(_) => (
                Code::Unavailable,
                503,
                "unavailable",
                Some(Duration::from_secs(2)),
            ),
            IngestError::BadSignature(_) => (Code::Unauthenticated, 400, "bad_signature", None),
            IngestError::BadRequest(_) => (Code::InvalidArgument, 400, "bad_request", None),
            IngestError::Conflict(_) => (Code::AlreadyExists, 409, "conflict", None),
            // Not retryable: OTLP exporters drop the batch and log, which is what a wrong
            // token deserves (retrying cannot fix it).
            IngestError::Unauthenticated => (Code::Unauthenticated, 401, "unauthenticated", None),
            IngestError::PermissionDenied(_) => {
                (Code::PermissionDenied, 403, "permission_denied", None)
            }
        };
        WireError {
            grpc,
            http,
            code,
            retry_after,
        }
    }

    /// The reason label for `reckon_ingest_rejections_total`.
    pub fn reason(&self) -> &'static str {
        self.wire().code
    }

    pub fn to_status(&self) -> tonic::Status {
        use tonic_types::{ErrorDetails, StatusExt};
        let w = self.wire();
        match w.retry_after {
            Some(after) => tonic::Status::with_error_details(
                w.grpc,
                self.to_string(),
                ErrorDetails::with_retry_info(Some(after)),
            ),
            None => tonic::Status::new(w.grpc, self.to_string()),
        }
    }
}
