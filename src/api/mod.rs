//! The HTTP API on :8080 (DESIGN.md "HTTP API"): records and webhooks in, verdicts, escalations
//! and reports out, plus metrics and health. JSON everywhere; errors are
//! `{"error": {"code", "message"}}`.

mod auth;
mod error;
mod ui;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

pub use error::ApiError;

use self::auth::{guard, Face};
use crate::auth::{Gate, Need, Principal};
use crate::clock::wall_now;
use crate::codec::{rfc3339, EscalationDoc, VerdictDoc};
use crate::engine::Engine;
use crate::ingest::body::{body_of, discard_later, read_body, BodyLimits};
use crate::ingest::error::IngestError;
use crate::ingest::service::Admission;
use crate::ingest::service::IngestService;
use crate::metrics::Metrics;
use crate::model::*;
use crate::store::{AnyStore, EscalationFilter, Page, Store, VerdictFilter};

#[derive(Clone)]
pub struct ApiState {
    pub engine: Arc<Engine>,
    pub ingest: Arc<IngestService>,
    pub store: Arc<AnyStore>,
    pub metrics: Arc<Metrics>,
    pub body: BodyLimits,
    /// Who may do what on this port (`crate::auth`).
    pub gate: Gate,
    /// This instance's name (`GET /api/v1/cluster`, `reckon_auditor`).
    pub instance: Arc<str>,
}

/// Each group of routes says what it needs (`crate::auth`'s roles); the health probes and the
/// pages' stylesheet and icon are open.
pub fn router(state: ApiState) -> Router {
    let max = state.body.max_bytes;
    let gate = state.gate.clone();
    let evidence = Router::new().route("/api/v1/records", post(post_records));
    // A Stripe event is authenticated by its signature; without a webhook secret to check it
    // against, it is evidence like any record and needs an ingest token.
    let stripe = Router::new().route("/api/v1/webhooks/stripe", post(post_stripe));
    let stripe = if state.ingest.verifies_stripe() {
        stripe
    } else {
        guard(stripe, &gate, Need::Ingest, Face::Json)
    };
    let reads = Router::new()
        .route("/api/v1/intents", get(list_intents))
        .route("/api/v1/intents/{intent_id}", get(get_intent))
        .route("/api/v1/escalations", get(list_escalations))
        .route("/api/v1/escalations/{id}", get(get_escalation))
        .route("/api/v1/report", get(report))
        .route("/api/v1/cluster", get(cluster));
    let actions = Router::new()
        .route("/api/v1/escalations/{id}/claim", post(claim))
        .route("/api/v1/escalations/{id}/resolve", post(resolve));
    let metrics_route = Router::new().route("/metrics", get(metrics));
    let metrics_route = match gate.access().metrics_need() {
        Some(need) => guard(metrics_route, &gate, need, Face::Json),
        None => metrics_route,
    };
    Router::new()
        .merge(guard(evidence, &gate, Need::Ingest, Face::Json))
        .merge(stripe)
        .merge(guard(reads, &gate, Need::Read, Face::Json))
        .merge(guard(actions, &gate, Need::Act, Face::Json))
        .merge(metrics_route)
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route("/readyz", get(ready))
        .merge(ui::routes(&gate))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(max))
        .with_state(state)
}

/// Admitted before the body is read, like every ingest path; a refused body is read to its end
/// behind the answer and dropped ([`discard_later`]).
fn admit(s: &ApiState, body: Body) -> Result<(Admission, Body), ApiError> {
    match s.ingest.admit() {
        Ok(admitted) => Ok((admitted, body)),
        Err(e) => {
            discard_later(body, s.body.max_bytes);
            Err(e.into())
        }
    }
}

async fn post_records(
    State(s): State<ApiState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (admitted, body) = admit(&s, body)?;
    let body = read_body(body, s.body).await?;
    let raw = body_of(&headers, &body, s.body.max_bytes)?;
    let reply = s.ingest.records(admitted, &raw).await?;
    Ok(Json(reply).into_response())
}

async fn post_stripe(
    State(s): State<ApiState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (admitted, body) = admit(&s, body)?;
    let body = read_body(body, s.body).await?;
    let signature = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok());
    let reply = s.ingest.stripe(admitted, signature, &body).await?;
    Ok(Json(reply).into_response())
}

async fn get_intent(
    State(s): State<ApiState>,
    Path(intent_id): Path<String>,
) -> Result<Response, ApiError> {
    if let Some(v) = s.engine.verdict(&intent_id).await {
        return Ok(Json(VerdictDoc::from_verdict(&v)).into_response());
    }
    match s.store.get_verdict(&intent_id).await? {
        Some(doc) => Ok(Json(doc).into_response()),
        None => Err(ApiError::NotFound(format!("no intent {intent_id}"))),
    }
}

/// An unknown parameter is a 400 naming it, never a silently unfiltered list.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IntentQuery {
    state: Option<String>,
    finding: Option<String>,
    tool: Option<String>,
    since: Option<String>,
    target: Option<String>,
    object_id: Option<String>,
    key: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// A lookup's value: an empty one is refused rather than matching nothing in silence.
fn lookup_value(name: &str, v: Option<String>) -> Result<Option<String>, ApiError> {
    match v {
        Some(v) if v.is_empty() => Err(ApiError::BadRequest(format!("{name}: must not be empty"))),
        v => Ok(v),
    }
}

/// `since` as RFC 3339 or as a duration back from now (`24h`).
fn parse_since(s: Option<&str>) -> Result<Option<Timestamp>, ApiError> {
    let Some(s) = s.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if let Some(t) = crate::codec::parse_rfc3339(s) {
        return Ok(Some(t));
    }
    match crate::contract::parse_duration(s) {
        Some(d) => Ok(Some(wall_now() - d)),
        None => Err(ApiError::BadRequest(format!(
            "since: expected RFC 3339 or a duration like 24h, got {s:?}"
        ))),
    }
}

async fn list_intents(
    State(s): State<ApiState>,
    q: Result<Query<IntentQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let state = match q.state.as_deref() {
        Some(x) => Some(
            IntentState::parse(x)
                .ok_or_else(|| ApiError::BadRequest(format!("state: unknown state {x:?}")))?,
        ),
        None => None,
    };
    let finding =
        match q.finding.as_deref() {
            Some(x) => Some(FindingKind::parse(x).ok_or_else(|| {
                ApiError::BadRequest(format!("finding: unknown finding kind {x:?}"))
            })?),
            None => None,
        };
    let filter = VerdictFilter {
        state,
        finding,
        tool: q.tool,
        since: parse_since(q.since.as_deref())?,
        target: lookup_value("target", q.target)?,
        object_id: lookup_value("object_id", q.object_id)?,
        key: lookup_value("key", q.key)?,
        limit: q.limit.unwrap_or(0),
        cursor: q.cursor,
    };
    let page = s.store.list_verdicts(&filter).await?;
    Ok(Json(page).into_response())
}

/// An unknown parameter is a 400 naming it, as for the intents.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EscalationQuery {
    status: Option<String>,
    tool: Option<String>,
    severity: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

async fn list_escalations(
    State(s): State<ApiState>,
    q: Result<Query<EscalationQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let status = match q.status.as_deref() {
        Some(x) => Some(EscalationStatus::parse(x).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "status: expected one of {}, got {x:?}",
                EscalationStatus::ALL
                    .map(EscalationStatus::as_str)
                    .join(", ")
            ))
        })?),
        None => None,
    };
    let severity = match q.severity.as_deref() {
        Some(x) => Some(Severity::parse(x).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "severity: expected one of {}, got {x:?}",
                Severity::ALL.map(Severity::as_str).join(", ")
            ))
        })?),
        None => None,
    };
    // From the store, the system of record: what is listed is durable, and every instance
    // sharing the store lists the same queue. Paged, with the total that matched: never cut
    // short in silence.
    let page = s
        .store
        .page_escalations(&EscalationFilter {
            status,
            tool: q.tool,
            severity,
            limit: q.limit.unwrap_or(0),
            cursor: q.cursor,
        })
        .await?;
    Ok(Json(Page {
        items: page
            .items
            .iter()
            .map(EscalationDoc::from_escalation)
            .collect::<Vec<_>>(),
        next_cursor: page.next_cursor,
        total: page.total,
    })
    .into_response())
}

/// The escalation with its evidence bundle: the intent's verdict and the contract it was judged by.
async fn get_escalation(
    State(s): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let e = s
        .store
        .get_escalation(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no escalation {id}")))?;
    Ok(Json(bundle(&s, &e).await).into_response())
}

async fn bundle(s: &ApiState, e: &Escalation) -> serde_json::Value {
    let verdict = verdict_doc(s, &e.intent_id).await;
    let contracts = s.engine.contracts();
    let contract = verdict
        .as_ref()
        .and_then(|v| v.contract.as_deref())
        .and_then(|name| contracts.by_name(name));
    crate::codec::escalation_bundle(e, verdict, contract)
}

/// An intent's verdict as the engine holds it, else (settled, out of memory) as the store
/// kept it.
pub(crate) async fn verdict_doc(s: &ApiState, intent_id: &str) -> Option<VerdictDoc> {
    match s.engine.verdict(intent_id).await {
        Some(v) => Some(VerdictDoc::from_verdict(&v)),
        None => s.store.get_verdict(intent_id).await.ok().flatten(),
    }
}

/// `by` may be left out when a token names who acts (`crate::auth::Principal::acting_as`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimBody {
    #[serde(default)]
    by: Option<String>,
    /// Take over an escalation someone else holds (recorded on it).
    #[serde(default, rename = "override")]
    take_over: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    #[serde(default)]
    by: Option<String>,
    resolution: String,
    note: Option<String>,
    /// Resolve an escalation someone else holds (recorded on it).
    #[serde(default, rename = "override")]
    take_over: bool,
}

/// The request body, or the API's JSON error when it could not be read (413 over the limit).
fn body_within_limit(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::Ingest(IngestError::TooLarge { limit })
        } else {
            ApiError::BadRequest(format!("body: {}", r.body_text()))
        }
    })
}

/// Query parameters, or a JSON 400 naming what did not parse.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|r| ApiError::BadRequest(r.body_text()))
}

fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("body: {e}")))
}

async fn claim(
    State(s): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b: ClaimBody = json_body(&body_within_limit(body, s.body.max_bytes)?)?;
    let by = auth::acting_as(&principal, b.by.as_deref())?;
    let e = s.engine.claim(&id, &by, b.take_over).await?;
    Ok(Json(bundle(&s, &e).await).into_response())
}

async fn resolve(
    State(s): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b: ResolveBody = json_body(&body_within_limit(body, s.body.max_bytes)?)?;
    let by = auth::acting_as(&principal, b.by.as_deref())?;
    let e = s
        .engine
        .resolve(&id, &by, &b.resolution, b.note.as_deref(), b.take_over)
        .await?;
    Ok(Json(bundle(&s, &e).await).into_response())
}

#[derive(Debug, Deserialize)]
struct ReportQuery {
    since: Option<String>,
}

async fn report(
    State(s): State<ApiState>,
    q: Result<Query<ReportQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let report = s
        .store
        .report(parse_since(q.since.as_deref())?, wall_now())
        .await?;
    Ok(Json(report).into_response())
}

async fn metrics(State(s): State<ApiState>) -> Response {
    // The gauges that describe the engine's and the store's state are read at scrape time, so
    // they are always what the queue and the store say now.
    // From the store, like the queue: an escalation counts once it is durable, and every
    // instance sharing the store reports the same. A store that cannot answer leaves the last
    // values (and `reckon_store_up` says why).
    if let Ok(counts) = unresolved_by_finding(&s).await {
        s.metrics.set_escalations_unresolved(counts);
    }
    let overdue = s
        .engine
        .next_deadline()
        .map_or(0, |at| (wall_now().0 - at.0).max(0));
    s.metrics
        .set_deadline_overdue(std::time::Duration::from_nanos(overdue as u64));
    s.metrics.set_store_up(store_probe(&s).await.is_ok());
    s.metrics.set_auditor(&s.instance, true);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        s.metrics.render(),
    )
        .into_response()
}

/// `GET /api/v1/cluster` (DESIGN.md "Scale-out"): who audits, and how far each member's
/// acknowledged and audited exports reach. One instance (no `[cluster]`: the only form there is
/// yet) is its own auditor under epoch 0; every export it answered is audited, so both
/// watermarks are the instant before which every export received has been answered, and the
/// lag is zero.
async fn cluster(State(s): State<ApiState>) -> Response {
    // In this order: with nothing in flight the watermark is the clock, and a member is
    // never seen before its own watermark.
    let answered = rfc3339(s.engine.answered_before());
    let now = wall_now();
    Json(serde_json::json!({
        "instance": &*s.instance,
        "auditor": &*s.instance,
        "epoch": 0,
        "members": [{
            "instance": &*s.instance,
            "last_seen": rfc3339(now),
            "acknowledged_watermark": answered,
            "audited_watermark": answered,
        }],
        "audit_lag_seconds": 0.0,
    }))
    .into_response()
}

/// `reckon_escalations_unresolved{tool, finding, severity}`: for every open or claimed
/// escalation, each finding kind it carries (the findings that opened or joined it, also when the
/// verdict no longer shows them) counts its intent once. An intent has at most one unresolved
/// escalation, so this counts intents.
async fn unresolved_by_finding(
    s: &ApiState,
) -> Result<Vec<([String; 3], u64)>, crate::store::StoreError> {
    let mut counts: std::collections::BTreeMap<[String; 3], u64> = Default::default();
    for e in crate::store::unresolved_escalations(&*s.store, false).await? {
        // The tool the escalation carries, as Alertmanager's labels: the same across a restart
        // (so alert rules on the series do not flap), and no verdict read per escalation.
        let tool = e.tool.clone().unwrap_or_else(|| "(none)".to_string());
        let kinds: std::collections::BTreeSet<(&str, &str)> = e
            .findings
            .iter()
            .map(|f| (f.kind.as_str(), f.severity.as_str()))
            .collect();
        for (kind, severity) in kinds {
            *counts
                .entry([tool.clone(), kind.to_string(), severity.to_string()])
                .or_default() += 1;
        }
    }
    Ok(counts.into_iter().collect())
}

/// The store answers a read within 2 s (what `/readyz` and `reckon_store_up` report).
async fn store_probe(s: &ApiState) -> Result<(), crate::store::StoreError> {
    match tokio::time::timeout(std::time::Duration::from_secs(2), s.store.get_verdict("")).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(crate::store::StoreError::Task(
            "the store did not answer within 2 s".into(),
        )),
    }
}

async fn ready(State(s): State<ApiState>) -> Response {
    // The engine exists only once its state was rebuilt from the store; the store must also
    // answer a read now, or a load balancer should send exports elsewhere.
    match store_probe(&s).await {
        Ok(()) => Json(serde_json::json!({ "status": "ready", "intents": s.engine.intents(), "at": rfc3339(wall_now()) })).into_response(),
        Err(e) => ApiError::Store(e).into_response(),
    }
}
