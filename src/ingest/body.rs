//! HTTP request bodies, for every HTTP ingest path (OTLP/HTTP, records, Stripe webhooks): read
//! under a byte limit and a deadline, then gunzipped under the same limit, so neither a long
//! body nor a small gzip bomb costs more memory than the limit, and a body that trickles in
//! does not hold its export slot (taken before the body is read) for longer than the deadline.

use std::io::Read;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};

use super::error::IngestError;

/// What an HTTP request body may be: at most `max_bytes` (settings `max_request_bytes`), in
/// full within `read_timeout` of the handler starting to read it (`body_read_timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub read_timeout: Duration,
}

/// The raw body, at most `limits.max_bytes`: over it is `TooLarge`, a broken-off body is
/// `Decode`, one still arriving at the deadline is `BodyTimeout`.
pub async fn read_body(body: Body, limits: BodyLimits) -> Result<Bytes, IngestError> {
    use http_body_util::BodyExt;
    let limit = limits.max_bytes;
    let read = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout(limits.read_timeout, read).await {
        Err(_) => Err(IngestError::BodyTimeout(limits.read_timeout)),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(IngestError::TooLarge { limit })
        }
        Ok(Err(e)) => Err(IngestError::Decode(format!("reading the body: {e}"))),
    }
}

/// A body refused before it was read (at capacity, not authorized, an unsupported type), read
/// to its end in the background and dropped as it arrives: at most `limit` bytes, for at most
/// [`DISCARD_FOR`]. An HTTP/1.1 server that answers early and closes while the body is still
/// arriving makes the client's kernel see a reset, and the client may then report a transport
/// error instead of the answer (seen as ~0.2 % of refusals under `reckon loadgen`): the 429's
/// `Retry-After` is lost, and an exporter that retries only on status codes drops the batch.
/// Read to its end, the answer arrives and the connection stays usable. Nothing is kept, so it
/// costs no memory.
pub fn discard_later(body: Body, limit: usize) {
    tokio::spawn(async move {
        use http_body_util::BodyExt;
        let mut body = body;
        let mut seen = 0usize;
        let _ = tokio::time::timeout(DISCARD_FOR, async {
            while let Some(Ok(frame)) = body.frame().await {
                seen += frame.data_ref().map_or(0, |d| d.len());
                if seen > limit {
                    break;
                }
            }
        })
        .await;
    });
}

/// How long a refused body is read before its connection is given up.
const DISCARD_FOR: Duration = Duration::from_secs(10);

/// The request body, gunzipped when `Content-Encoding: gzip`, never larger than `limit`.
pub fn body_of(headers: &HeaderMap, body: &[u8], limit: usize) -> Result<Vec<u8>, IngestError> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" => Ok(body.to_vec()),
        "gzip" | "x-gzip" => {
            let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit + 1));
            // Read one byte past the limit to tell "exactly at the limit" from "over it" without
            // inflating a zip bomb into memory.
            flate2::read::MultiGzDecoder::new(body)
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| IngestError::Decode(format!("gzip: {e}")))?;
            if out.len() > limit {
                return Err(IngestError::TooLarge { limit });
            }
            Ok(out)
        }
        other => Err(IngestError::UnsupportedEncoding(other.to_string())),
    }
}
