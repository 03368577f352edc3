//! The stub's HTTP API: validation, the answers each downstream gives (Stripe's error shapes
//! for refunds, the bookkeeping service's for drafts and emails), and the timing a real request
//! has (execution takes `x-demo-exec-ms`, a refund settles later). What a key decides is asked
//! of the books; this file only turns it into responses and effects.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::books::{
    Books, Draft, DraftRequest, Endpoint, KeyClaim, Refund, RefundRequest, Repeat, Saved,
};
use super::{now, Knobs, Shared};
use crate::model::{currency_exponent, Decimal};

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/v1/refunds",
            post(|s: State<Arc<Shared>>, h: HeaderMap, b: Bytes| async move {
                create_refund(s.0, Endpoint::RefundsV1, h, b).await
            })
            .get(list_refunds),
        )
        .route(
            "/v2/refunds",
            post(|s: State<Arc<Shared>>, h: HeaderMap, b: Bytes| async move {
                create_refund(s.0, Endpoint::RefundsV2, h, b).await
            })
            .get(list_refunds),
        )
        .route("/drafts", post(create_draft).get(list_drafts))
        .route("/v1/emails", post(send_email).get(list_emails))
        .with_state(shared)
}

fn stripe_error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"type": kind, "code": code, "message": message}})),
    )
        .into_response()
}

fn respond(saved: &Saved) -> Response {
    let status = StatusCode::from_u16(saved.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(saved.body.clone())).into_response()
}

fn idempotency_key(h: &HeaderMap) -> Option<String> {
    h.get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
}

// The error is the HTTP response to send as is: one per request, never stored or passed on.
#[allow(clippy::result_large_err)]
fn parse_refund(body: &[u8]) -> Result<(RefundRequest, Value), Response> {
    let bad = |param: &str, message: &str| {
        stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("parameter_invalid"),
            &format!("{param}: {message}"),
        )
    };
    let v: Value = serde_json::from_slice(body).map_err(|e| bad("body", &e.to_string()))?;
    let amount = v
        .get("amount")
        .and_then(Value::as_i64)
        .ok_or_else(|| bad("amount", "must be an integer in the currency's minor unit"))?;
    if amount <= 0 {
        return Err(stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("amount_too_small"),
            "amount must be positive",
        ));
    }
    let currency = v
        .get("currency")
        .and_then(Value::as_str)
        .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()))
        .ok_or_else(|| bad("currency", "must be a three-letter ISO code"))?
        .to_ascii_lowercase();
    let metadata = match v.get("metadata") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(bad("metadata", "must be an object")),
    };
    Ok((
        RefundRequest {
            amount,
            currency,
            metadata,
        },
        v,
    ))
}

async fn create_refund(
    shared: Arc<Shared>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let knobs = Knobs::from_headers(&headers);
    // Validation comes first and is never saved: nothing began executing (Stripe does the same).
    let (req, params) = match parse_refund(&body) {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let key = idempotency_key(&headers);
    if let Some(key) = &key {
        let mut st = shared.lock();
        match st.claim_key(endpoint, key, &params, &knobs, Instant::now()) {
            KeyClaim::Mismatch => {
                return stripe_error(
                    StatusCode::BAD_REQUEST,
                    "idempotency_error",
                    None,
                    "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                )
            }
            KeyClaim::InUse => {
                return stripe_error(
                    StatusCode::CONFLICT,
                    "idempotency_error",
                    Some("idempotency_key_in_use"),
                    "There is currently another in-progress request using this Idempotent Key.",
                )
            }
            KeyClaim::Done { saved, knobs: first } => {
                return match st.repeat_refund(endpoint, saved, first) {
                    Repeat::Answer(saved) => respond(&saved),
                    Repeat::Converge(knobs) => {
                        let saved = execute_refund(
                            &shared,
                            &mut st,
                            endpoint,
                            Some(key),
                            &req,
                            &params,
                            knobs,
                        );
                        respond(&saved)
                    }
                };
            }
            KeyClaim::Claimed => {}
        }
    }
    // Execution has begun: from here on the outcome is saved under the key (assumption A).
    tokio::time::sleep(knobs.exec).await;
    let mut st = shared.lock();
    if knobs.fail_500 {
        let saved = Saved::refund_server_error();
        if let Some(key) = &key {
            st.finish_key(
                endpoint,
                key,
                &params,
                &knobs,
                saved.clone(),
                Instant::now(),
            );
        }
        return respond(&saved);
    }
    let saved = execute_refund(
        &shared,
        &mut st,
        endpoint,
        key.as_deref(),
        &req,
        &params,
        knobs,
    );
    respond(&saved)
}

/// Creates the refund (atomically with saving the key: both happen under the caller's lock),
/// reports it and schedules its settlement.
fn execute_refund(
    shared: &Arc<Shared>,
    st: &mut Books,
    endpoint: Endpoint,
    key: Option<&str>,
    req: &RefundRequest,
    params: &Value,
    knobs: Knobs,
) -> Saved {
    let (refund, saved) = st.create_refund(endpoint, key, req, params, &knobs, now());
    let event_type = if refund.status == "failed" {
        "refund.failed"
    } else {
        "refund.created"
    };
    shared
        .reports
        .refund(&refund, event_type, knobs.report_delay);
    if let (_, Some(to)) = knobs.settle.statuses() {
        let shared = shared.clone();
        let id = refund.id.clone();
        let delay = knobs.settle_after;
        let report_delay = knobs.report_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let updated = shared.lock().settle_refund(&id, to);
            if let Some(r) = updated {
                let t = if to == "failed" {
                    "refund.failed"
                } else {
                    "refund.updated"
                };
                shared.reports.refund(&r, t, report_delay);
            }
        });
    }
    saved
}

#[derive(Deserialize)]
struct ByIntent {
    intent_id: Option<String>,
    order_id: Option<String>,
}

async fn list_refunds(State(shared): State<Arc<Shared>>, Query(q): Query<ByIntent>) -> Response {
    let st = shared.lock();
    let data: Vec<Value> = st
        .refunds
        .values()
        .filter(|r| {
            let field = |k: &str| r.metadata.get(k).and_then(Value::as_str);
            (q.intent_id.is_none() || field("intent_id") == q.intent_id.as_deref())
                && (q.order_id.is_none() || field("order_id") == q.order_id.as_deref())
        })
        .map(Refund::json)
        .collect();
    Json(json!({"object": "list", "data": data, "has_more": false})).into_response()
}

fn draft_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

/// The intent a draft or email names in its `metadata`, if any.
fn metadata_intent(params: &Value) -> Option<String> {
    params
        .pointer("/metadata/intent_id")
        .and_then(Value::as_str)
        .map(str::to_string)
}

async fn create_draft(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let knobs = Knobs::from_headers(&headers);
    let params: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return draft_error(StatusCode::BAD_REQUEST, "invalid_json", &e.to_string()),
    };
    let field = |name: &str| {
        params
            .get(name)
            .and_then(|v| match v {
                Value::String(s) => Some(s.trim().to_string()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|s| !s.is_empty())
    };
    let (Some(supplier), Some(amount), Some(currency)) =
        (field("supplier"), field("amount"), field("currency"))
    else {
        return draft_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            "supplier, amount and currency are required",
        );
    };
    if Decimal::parse(&amount).is_none_or(|d| d <= Decimal::parse("0").unwrap_or(d)) {
        return draft_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            "amount must be a positive decimal",
        );
    }
    let req = DraftRequest {
        intent_id: metadata_intent(&params),
        invoice: field("invoice").unwrap_or_default(),
        supplier,
        amount,
        currency,
    };
    let key = idempotency_key(&headers);
    if let Some(key) = &key {
        // Test 5: a same-key request that arrives while the first runs waits for its result.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The guard must not live across the sleep (the handler future must be Send).
            let claim =
                shared
                    .lock()
                    .claim_key(Endpoint::Drafts, key, &params, &knobs, Instant::now());
            match claim {
                KeyClaim::Mismatch => {
                    return draft_error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "idempotency_key_mismatch",
                        "this key was used with a different draft",
                    )
                }
                KeyClaim::Done { saved, .. } => return respond(&saved),
                KeyClaim::Claimed => break,
                KeyClaim::InUse => {}
            }
            if Instant::now() >= deadline {
                return draft_error(
                    StatusCode::CONFLICT,
                    "idempotency_key_in_use",
                    "the first request with this key is still running",
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(knobs.exec).await;
    let (draft, saved) = shared
        .lock()
        .create_draft(key.as_deref(), req, &params, &knobs, now());
    shared.reports.draft(&draft, knobs.report_delay);
    respond(&saved)
}

async fn list_drafts(State(shared): State<Arc<Shared>>, Query(q): Query<ByIntent>) -> Response {
    let st = shared.lock();
    let data: Vec<Value> = st
        .drafts
        .values()
        .filter(|d| q.intent_id.is_none() || d.intent_id == q.intent_id)
        .map(Draft::json)
        .collect();
    Json(json!({"data": data})).into_response()
}

/// The `none` downstream: any `Idempotency-Key` header is ignored, every send is a new email.
async fn send_email(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let knobs = Knobs::from_headers(&headers);
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return draft_error(StatusCode::BAD_REQUEST, "invalid_json", &e.to_string()),
    };
    let Some(to) = v
        .get("to")
        .and_then(Value::as_str)
        .filter(|t| t.contains('@'))
    else {
        return draft_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_recipient",
            "`to` must be an address",
        );
    };
    tokio::time::sleep(knobs.exec).await;
    let email = shared.lock().send_email(metadata_intent(&v), to);
    (StatusCode::OK, Json(email.json())).into_response()
}

async fn list_emails(State(shared): State<Arc<Shared>>, Query(q): Query<ByIntent>) -> Response {
    let st = shared.lock();
    let data: Vec<Value> = st
        .emails
        .iter()
        .filter(|e| q.intent_id.is_none() || e.intent_id == q.intent_id)
        .map(|e| e.json())
        .collect();
    Json(json!({"data": data})).into_response()
}

/// Minor units for a major-unit amount in `currency`, as the refund endpoints take them
/// (Stripe's convention): `45.00 usd` -> 4500. `None` when the amount has more decimals than
/// the currency or does not fit.
pub fn to_minor(amount: Decimal, currency: &str) -> Option<i64> {
    let exp = currency_exponent(currency);
    if amount.scale > exp {
        // 45.000 is fine, 45.001 is not: compare after dropping trailing zeros.
        let factor = 10i128.checked_pow(amount.scale - exp)?;
        if amount.mantissa % factor != 0 {
            return None;
        }
        return i64::try_from(amount.mantissa / factor).ok();
    }
    let factor = 10i128.checked_pow(exp - amount.scale)?;
    i64::try_from(amount.mantissa.checked_mul(factor)?).ok()
}
