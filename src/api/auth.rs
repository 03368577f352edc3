//! The API port's adapter of [`crate::auth`]: a route layer that lets a request through when
//! its token allows what the route needs, with the [`Principal`] in the request's extensions for
//! the handlers that record who acted; otherwise the refusal, as JSON for the API and as a page
//! (with the `Basic` challenge that makes a browser ask for the token) for the queue's pages.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use super::ApiError;
use crate::auth::{AuthError, Gate, Need, Principal};
use crate::ingest::error::IngestError;

/// How a refusal is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Face {
    /// The API's JSON error body.
    Json,
    /// An HTML page; a browser asks for a user name and password (the token).
    Page,
}

#[derive(Clone)]
struct Require {
    gate: Gate,
    need: Need,
    face: Face,
}

/// `router`'s routes (those added so far) need a token allowing `need`.
pub(crate) fn guard<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    gate: &Gate,
    need: Need,
    face: Face,
) -> Router<S> {
    router.route_layer(axum::middleware::from_fn_with_state(
        Require {
            gate: gate.clone(),
            need,
            face,
        },
        require,
    ))
}

async fn require(State(r): State<Require>, mut request: Request, next: Next) -> Response {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    match r.gate.check(header, r.need) {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(e) => refusal(r.face, e),
    }
}

/// The answer to a refused request: status and code from the one error table
/// (`ingest::error`), and on a 401 the challenges a client can answer. Browsers answer `Basic`
/// (the token as the password), so the JSON links from the pages work too.
pub(crate) fn refusal(face: Face, e: AuthError) -> Response {
    let e = IngestError::from(e);
    let mut response = match face {
        Face::Json => ApiError::Ingest(e).into_response(),
        Face::Page => {
            let status = StatusCode::from_u16(e.wire().http).unwrap_or(StatusCode::FORBIDDEN);
            super::ui::refusal_page(status, &e.to_string())
        }
    };
    if response.status() == StatusCode::UNAUTHORIZED {
        let h = response.headers_mut();
        if face == Face::Json {
            h.append(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"reckon\""),
            );
        }
        h.append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"reckon\", charset=\"UTF-8\""),
        );
    }
    response
}

/// The name a person's action is recorded under ([`Principal::acting_as`]), or the API's
/// refusal.
pub(crate) fn acting_as(principal: &Principal, by: Option<&str>) -> Result<String, ApiError> {
    principal
        .acting_as(by)
        .map_err(|e| ApiError::Ingest(IngestError::from(e)))
}
