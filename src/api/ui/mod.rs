//! The escalation queue as web pages on the API port, for the person who works it (DESIGN.md
//! "HTTP API", `GET /`): the queue with filters, one escalation with its evidence on a time axis
//! and the contract, claim and resolve.
//!
//! Plain server-rendered HTML and one embedded stylesheet: no script, no CDN, nothing fetched
//! from elsewhere, so it works with no internet. Claim and resolve are HTML form posts to page
//! routes that call the same engine methods as the JSON API, then redirect back (post, redirect,
//! get). Everything that comes from outside is escaped ([`html::E`], [`html::U`]).

mod html;
mod runbook;
mod timeline;

use std::collections::BTreeSet;
use std::fmt::Write as _;

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use self::html::{error_page, human_duration, page, respond, short_time, when, E, U};
use self::timeline::{Item, Lane, Shape, Timeline};
use super::auth::{guard, Face};
use super::{ApiError, ApiState};
use crate::auth::{Gate, Need, Principal};
use crate::clock::wall_now;
use crate::codec::{parse_rfc3339, ContractDoc, VerdictDoc};
use crate::model::*;
use crate::store::Store;

/// The stylesheet, embedded in the binary.
const CSS: &str = include_str!("reckon.css");

/// The stylesheet's address, versioned by its content so a browser never keeps an old one.
pub(crate) fn css_href() -> String {
    format!("/ui/reckon.css?v={:016x}", fnv1a(CSS.as_bytes()))
}

const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// Rows the queue shows at most; the filters narrow it down.
const QUEUE_ROWS: usize = 500;

/// The pages are API reads and person's actions (`crate::auth`); a browser sends the token as
/// the password of HTTP Basic. The stylesheet and icon are open: they say nothing.
pub fn routes(gate: &Gate) -> Router<ApiState> {
    let reads = Router::new()
        .route("/", get(queue))
        .route("/escalations/{id}", get(escalation_page));
    let actions = Router::new()
        .route("/escalations/{id}/claim", post(claim))
        .route("/escalations/{id}/resolve", post(resolve));
    Router::new()
        .merge(guard(reads, gate, Need::Read, Face::Page))
        .merge(guard(actions, gate, Need::Act, Face::Page))
        .route("/ui/reckon.css", get(css))
        // Operators' documentation, public like the stylesheet: alerts link here.
        .route("/runbook", get(runbook_page))
        .route("/ui/favicon.svg", get(favicon))
}

async fn runbook_page() -> Response {
    html::respond(StatusCode::OK, html::page("Runbook", &runbook::BODY))
}

/// A refused request to a page, as a page.
pub(super) fn refusal_page(status: StatusCode, message: &str) -> Response {
    error_page(status, message)
}

/// A mark for the browser tab: the queue's red "open" badge.
const FAVICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
    <rect width=\"16\" height=\"16\" rx=\"4\" fill=\"#1d2330\"/>\
    <circle cx=\"8\" cy=\"8\" r=\"4\" fill=\"#e53935\"/></svg>";

async fn favicon() -> Response {
    let mut r = FAVICON.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("image/svg+xml"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=86400"),
    );
    r
}

async fn css() -> Response {
    let mut r = CSS.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=86400"),
    );
    r
}

// ------------------------------------------------------------------------------------ queue

#[derive(Debug, Deserialize)]
struct QueueQuery {
    status: Option<String>,
    severity: Option<String>,
    tool: Option<String>,
    /// The search box: what to look for (`find`) and by what (`by`: target, object_id or key),
    /// as `GET /api/v1/intents?target=` and its siblings look it up.
    by: Option<String>,
    find: Option<String>,
}

/// What the search box looks up by: (the query's `by`, its label).
const SEARCH_BY: [(&str, &str); 3] = [
    ("target", "order / target"),
    ("object_id", "downstream object"),
    ("key", "idempotency key"),
];

/// How many intents a search lists at most (one page of the API's).
const SEARCH_ROWS: usize = crate::store::VerdictFilter::MAX_LIMIT;

#[derive(Clone, Copy, PartialEq, Eq)]
enum StatusFilter {
    /// Open and claimed: what still waits for a person (the default).
    Unresolved,
    Only(EscalationStatus),
    All,
}

impl StatusFilter {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "" | "unresolved" => Self::Unresolved,
            "all" => Self::All,
            s => Self::Only(EscalationStatus::parse(s)?),
        })
    }
    fn as_str(self) -> &'static str {
        match self {
            Self::Unresolved => "unresolved",
            Self::Only(s) => s.as_str(),
            Self::All => "all",
        }
    }
    fn admits(self, s: EscalationStatus) -> bool {
        match self {
            Self::Unresolved => s.unresolved(),
            Self::Only(x) => x == s,
            Self::All => true,
        }
    }
}

/// An escalation and what the queue shows of its intent's verdict: its tool, state and
/// decision, when a verdict is at hand.
struct Row {
    e: Escalation,
    tool: Option<String>,
    judged: Option<(String, String)>,
}

impl Row {
    fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }
}

/// Every unresolved escalation, however old, and the newest resolved ones, newest first: the
/// newest of any status would push an old open escalation off the page behind a day of
/// resolved ones.
async fn unresolved_and_latest(s: &ApiState) -> Result<Vec<Escalation>, crate::store::StoreError> {
    let mut all = crate::store::unresolved_escalations(&*s.store, true).await?;
    all.sort_by(|a, b| b.opened_at.cmp(&a.opened_at).then_with(|| a.id.cmp(&b.id)));
    Ok(all)
}

async fn queue(
    State(s): State<ApiState>,
    q: Result<Query<QueueQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(r) => return error_page(StatusCode::BAD_REQUEST, &r.body_text()),
    };
    let Some(status) = StatusFilter::parse(q.status.as_deref().unwrap_or("")) else {
        return error_page(
            StatusCode::BAD_REQUEST,
            "status: expected unresolved, open, claimed, resolved, withdrawn or all",
        );
    };
    let severity = match q.severity.as_deref().filter(|x| !x.is_empty()) {
        None => None,
        Some(x) => match Severity::parse(x) {
            Some(sev) => Some(sev),
            None => {
                return error_page(
                    StatusCode::BAD_REQUEST,
                    "severity: expected critical, high or medium",
                )
            }
        },
    };
    let tool = q.tool.filter(|t| !t.is_empty());
    let find = q
        .find
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_string);
    let by =
        q.by.as_deref()
            .filter(|b| !b.is_empty())
            .unwrap_or("target");
    if !SEARCH_BY.iter().any(|(name, _)| *name == by) {
        return error_page(
            StatusCode::BAD_REQUEST,
            "by: expected target, object_id or key",
        );
    }
    // The search: the intents the order, object or key touches (a lookup in the store), and
    // the queue narrowed to their escalations.
    let found = match &find {
        None => None,
        Some(f) => {
            let mut filter = crate::store::VerdictFilter {
                limit: SEARCH_ROWS,
                ..Default::default()
            };
            match by {
                "object_id" => filter.object_id = Some(f.clone()),
                "key" => filter.key = Some(f.clone()),
                _ => filter.target = Some(f.clone()),
            }
            match s.store.list_verdicts(&filter).await {
                Ok(page) => Some(page),
                Err(e) => {
                    return error_page(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!("the store did not answer: {e}"),
                    )
                }
            }
        }
    };
    let found_ids: Option<BTreeSet<&str>> = found
        .as_ref()
        .map(|p| p.items.iter().map(|v| v.intent_id.as_str()).collect());

    // From the store, like the JSON queue: what is listed is durable.
    let escalations = match unresolved_and_latest(&s).await {
        Ok(e) => e,
        Err(e) => {
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("the store did not answer: {e}"),
            )
        }
    };
    let mut rows: Vec<Row> = Vec::with_capacity(escalations.len());
    for e in escalations {
        let (tool, judged) = match s.engine.verdict(&e.intent_id).await {
            Some(v) => (
                v.tool.clone(),
                Some((
                    v.state.as_str().to_string(),
                    v.decision.as_str().to_string(),
                )),
            ),
            // An unresolved escalation keeps its intent in memory, except for the seconds a
            // start that served first takes to read it back: meanwhile the row shows the
            // stored verdict (its tool, state and decision as of the stop), as the
            // unresolved gauge's label does. Resolved ones of intents that left memory stay
            // without: reading each back would make the page cost a store read per row.
            None if e.status.unresolved() => {
                match s.store.get_verdict(&e.intent_id).await.ok().flatten() {
                    Some(doc) => (doc.tool, Some((doc.state, doc.decision))),
                    None => (None, None),
                }
            }
            None => (None, None),
        };
        rows.push(Row { e, tool, judged });
    }
    let count = |st| rows.iter().filter(|r| r.e.status == st).count();
    let (open, claimed, resolved, withdrawn) = (
        count(EscalationStatus::Open),
        count(EscalationStatus::Claimed),
        count(EscalationStatus::Resolved),
        count(EscalationStatus::Withdrawn),
    );
    let tools: BTreeSet<&str> = rows.iter().filter_map(Row::tool).collect();
    let mut shown: Vec<&Row> = rows
        .iter()
        .filter(|r| status.admits(r.e.status))
        .filter(|r| severity.is_none_or(|sev| r.e.severity == sev))
        .filter(|r| tool.as_deref().is_none_or(|t| r.tool() == Some(t)))
        .filter(|r| {
            found_ids
                .as_ref()
                .is_none_or(|ids| ids.contains(r.e.intent_id.as_str()))
        })
        .collect();
    // Waiting work: the most severe first, then the oldest. History: the newest first.
    if matches!(
        status,
        StatusFilter::Only(EscalationStatus::Resolved | EscalationStatus::Withdrawn)
            | StatusFilter::All
    ) {
        shown.sort_by(|a, b| (b.e.opened_at, &b.e.id).cmp(&(a.e.opened_at, &a.e.id)));
    } else {
        shown.sort_by(|a, b| {
            (b.e.severity, a.e.opened_at, &a.e.id).cmp(&(a.e.severity, b.e.opened_at, &b.e.id))
        });
    }
    let total = shown.len();
    shown.truncate(QUEUE_ROWS);

    let mut b = String::with_capacity(16 * 1024);
    let _ = write!(
        b,
        "<h1>Escalations</h1><p class=\"counts\">\
         <a class=\"count\" href=\"/?status=open\"><b id=\"count-open\">{open}</b> open</a>\
         <a class=\"count\" href=\"/?status=claimed\"><b id=\"count-claimed\">{claimed}</b> claimed</a>\
         <a class=\"count\" href=\"/?status=resolved\"><b id=\"count-resolved\">{resolved}</b> resolved</a>\
         <a class=\"count\" href=\"/?status=withdrawn\"><b id=\"count-withdrawn\">{withdrawn}</b> withdrawn</a></p>"
    );
    // The search box: "the customer says order 1042 was refunded twice".
    b.push_str("<form class=\"filters search\" method=\"get\" action=\"/\" id=\"search-form\">");
    select(&mut b, "by", "Find intents by", by, &SEARCH_BY);
    let _ = write!(
        b,
        "<label>Value <input type=\"search\" name=\"find\" id=\"search\" maxlength=\"500\" \
         value=\"{}\" placeholder=\"order 1042, re_123, a key\"></label> \
         <button type=\"submit\">Search</button></form>",
        E(find.as_deref().unwrap_or(""))
    );
    if let (Some(f), Some(page)) = (&find, &found) {
        found_section(&mut b, by, f, page);
    }
    // Filters: a plain GET form, so every view has a URL to share.
    b.push_str("<form class=\"filters\" method=\"get\" action=\"/\">");
    select(
        &mut b,
        "status",
        "Status",
        status.as_str(),
        &[
            ("unresolved", "open or claimed"),
            ("open", "open"),
            ("claimed", "claimed"),
            ("resolved", "resolved"),
            ("withdrawn", "withdrawn"),
            ("all", "all"),
        ],
    );
    select(
        &mut b,
        "severity",
        "Severity",
        severity.map_or("", Severity::as_str),
        &[("", "any"), ("critical", "critical"), ("high", "high")],
    );
    let mut tool_opts = vec![("", "any")];
    tool_opts.extend(tools.iter().map(|t| (*t, *t)));
    if let Some(t) = tool.as_deref().filter(|t| !tools.contains(t)) {
        tool_opts.push((t, t));
    }
    select(
        &mut b,
        "tool",
        "Tool",
        tool.as_deref().unwrap_or(""),
        &tool_opts,
    );
    if let Some(f) = &find {
        // The filters keep the search they narrow.
        let _ = write!(
            b,
            "<input type=\"hidden\" name=\"by\" value=\"{}\"><input type=\"hidden\" name=\"find\" value=\"{}\">",
            E(by),
            E(f)
        );
    }
    b.push_str("<button type=\"submit\">Filter</button> <a href=\"/\">reset</a></form>");

    if shown.is_empty() {
        let _ = write!(
            b,
            "<p class=\"empty\" id=\"queue-empty\">{}</p>",
            if status == StatusFilter::Unresolved
                && severity.is_none()
                && tool.is_none()
                && find.is_none()
            {
                "Nothing waits for a person."
            } else {
                "No escalation matches these filters."
            }
        );
    } else {
        let now = wall_now();
        b.push_str(
            "<table class=\"queue\" id=\"queue\"><thead><tr><th>Severity</th><th>Escalation</th>\
             <th>Intent</th><th>Tool</th><th>Findings</th><th>Verdict</th><th>Status</th>\
             <th>Opened</th></tr></thead><tbody>",
        );
        for r in &shown {
            let e = &r.e;
            let href = format!("/escalations/{}", U(&e.id));
            let _ = write!(
                b,
                "<tr class=\"row-{status}\" data-escalation=\"{id}\"><td>{sev}</td>\
                 <td><a class=\"esc-link\" href=\"{href}\">{id}</a></td>\
                 <td class=\"mono\">{intent}</td><td>{tool}</td><td>",
                status = e.status.as_str(),
                id = E(&e.id),
                sev = severity_badge(e.severity),
                href = E(&href),
                intent = E(&e.intent_id),
                tool = E(r.tool().unwrap_or("—")),
            );
            let kinds: BTreeSet<(std::cmp::Reverse<Severity>, &str)> = e
                .findings
                .iter()
                .map(|f| (std::cmp::Reverse(f.severity), f.kind.as_str()))
                .collect();
            for (sev, kind) in kinds {
                let _ = write!(
                    b,
                    "<span class=\"chip sev-{}\">{}</span> ",
                    sev.0.as_str(),
                    E(kind)
                );
            }
            b.push_str("</td><td>");
            match &r.judged {
                Some((state, decision)) => {
                    let _ = write!(b, "{} / {}", E(state), E(decision));
                }
                None => b.push('—'),
            }
            let _ = write!(b, "</td><td>{}", status_badge(e.status));
            if let Some(by) = e
                .claimed_by
                .as_deref()
                .filter(|_| e.status == EscalationStatus::Claimed)
            {
                let _ = write!(b, " <span class=\"who\">by {}</span>", E(by));
            }
            if let Some(by) = e.resolved_by.as_deref() {
                let _ = write!(b, " <span class=\"who\">by {}</span>", E(by));
            }
            let _ = write!(
                b,
                "</td><td>{} <span class=\"age\">{} ago</span></td></tr>",
                when(e.opened_at),
                human_duration(now.0 - e.opened_at.0)
            );
        }
        b.push_str("</tbody></table>");
        if total > shown.len() {
            let _ = write!(
                b,
                "<p class=\"more\">Showing {} of {total}; narrow the filters to see the rest.</p>",
                shown.len()
            );
        }
    }
    respond(StatusCode::OK, page("Escalations", &b))
}

/// The intents a search found, with their verdicts and escalations.
fn found_section(b: &mut String, by: &str, find: &str, page: &crate::store::Page<VerdictDoc>) {
    let label = SEARCH_BY
        .iter()
        .find(|(name, _)| *name == by)
        .map_or(by, |(_, label)| label);
    let _ = write!(
        b,
        "<section class=\"card found\" id=\"found\"><h2>Intents touching {} <span class=\"mono\">{}</span>: \
         <b id=\"found-total\">{}</b></h2>",
        E(label),
        E(find),
        page.total
    );
    if page.items.is_empty() {
        b.push_str("<p class=\"empty\" id=\"found-empty\">No intent touches it.</p></section>");
        return;
    }
    b.push_str(
        "<table class=\"queue\"><thead><tr><th>Intent</th><th>Tool</th><th>Verdict</th>\
         <th>Objects</th><th>Findings</th><th>Escalation</th></tr></thead><tbody>",
    );
    for v in &page.items {
        let objects: Vec<String> = v
            .objects
            .iter()
            .map(|o| format!("{} ({})", o.object_id, o.status))
            .collect();
        let findings: BTreeSet<&str> = v.findings.iter().map(|f| f.kind.as_str()).collect();
        let _ = write!(
            b,
            "<tr data-intent=\"{id}\"><td class=\"mono\"><a href=\"/api/v1/intents/{href}\">{id}</a></td>\
             <td>{tool}</td><td>{state} / {decision}</td><td class=\"mono\">{objects}</td><td>",
            id = E(&v.intent_id),
            href = E(&U(&v.intent_id).to_string()),
            tool = E(v.tool.as_deref().unwrap_or("—")),
            state = E(&v.state),
            decision = E(&v.decision),
            objects = E(&objects.join(", ")),
        );
        for f in findings {
            let _ = write!(b, "<span class=\"chip\">{}</span> ", E(f));
        }
        b.push_str("</td><td>");
        match &v.escalation_id {
            Some(id) => {
                let _ = write!(
                    b,
                    "<a class=\"esc-link\" href=\"/escalations/{}\">{}</a>",
                    E(&U(id).to_string()),
                    E(id)
                );
            }
            None => b.push('—'),
        }
        b.push_str("</td></tr>");
    }
    b.push_str("</tbody></table>");
    if page.next_cursor.is_some() {
        let _ = write!(
            b,
            "<p class=\"more\">Showing {} of {}; the API pages through the rest \
             (<span class=\"mono\">GET /api/v1/intents?{}=…</span>).</p>",
            page.items.len(),
            page.total,
            E(by)
        );
    }
    b.push_str("</section>");
}

fn select(b: &mut String, name: &str, label: &str, current: &str, options: &[(&str, &str)]) {
    let _ = write!(b, "<label>{} <select name=\"{}\">", E(label), E(name));
    for (value, text) in options {
        let _ = write!(
            b,
            "<option value=\"{}\"{}>{}</option>",
            E(value),
            if *value == current { " selected" } else { "" },
            E(text)
        );
    }
    b.push_str("</select></label> ");
}

fn severity_badge(s: Severity) -> String {
    format!("<span class=\"sev sev-{0}\">{0}</span>", s.as_str())
}

fn status_badge(s: EscalationStatus) -> String {
    format!(
        "<span class=\"status status-{0}\" data-status=\"{0}\">{0}</span>",
        s.as_str()
    )
}

// ------------------------------------------------------------------------------- escalation

#[derive(Debug, Deserialize)]
struct PageQuery {
    done: Option<String>,
}

async fn escalation_page(
    State(s): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    // Only known words are shown back; nothing from the query string is echoed.
    let notice = match q.ok().and_then(|Query(q)| q.done).as_deref() {
        Some("claimed") => Some("Claimed. The escalation is yours; resolve it when the evidence is settled."),
        Some("resolved") => Some("Resolved. It has left the queue; new evidence with a high or critical finding opens a new escalation."),
        _ => None,
    };
    escalation_view(&s, &principal, &id, notice, None).await
}

/// `by` is absent when a token names who acts (the form then has no name field). `override`
/// is the box that takes over an escalation someone else holds (present when ticked).
#[derive(Debug, Deserialize)]
struct ClaimForm {
    #[serde(default)]
    by: String,
    #[serde(default, rename = "override")]
    take_over: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ResolveForm {
    #[serde(default)]
    by: String,
    resolution: String,
    #[serde(default)]
    note: String,
    #[serde(default, rename = "override")]
    take_over: Option<String>,
}

/// A browser's form post from another site is refused: with no tokens configured anyone may
/// claim and resolve, and with tokens the browser sends its saved Basic credentials to this
/// origin whoever made the form, so a page elsewhere must not act in a visitor's name either
/// way. Clients that are not browsers (no `Origin`, no `Sec-Fetch-Site`) are let through, as the
/// JSON API lets them.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return matches!(site.to_str(), Ok("same-origin" | "none"));
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (origin.to_str().ok(), host) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host)),
        _ => false,
    }
}

fn see_other(location: String) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn api_status(e: &ApiError) -> StatusCode {
    match e {
        ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
        ApiError::Conflict(_) => StatusCode::CONFLICT,
        ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ApiError::Ingest(e) => {
            StatusCode::from_u16(e.wire().http).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
        }
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn claim(
    State(s): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<ClaimForm>, FormRejection>,
) -> Response {
    if !same_origin(&headers) {
        return error_page(
            StatusCode::FORBIDDEN,
            "form posts from other sites are refused",
        );
    }
    let f = match form {
        Ok(Form(f)) => f,
        Err(r) => return error_page(StatusCode::BAD_REQUEST, &r.body_text()),
    };
    let by = match super::auth::acting_as(&principal, Some(&f.by)) {
        Ok(by) => by,
        Err(e) => return error_page(api_status(&e), &e.to_string()),
    };
    match s.engine.claim(&id, &by, f.take_over.is_some()).await {
        Ok(_) => see_other(format!("/escalations/{}?done=claimed", U(&id))),
        Err(e) => {
            let e = ApiError::from(e);
            let problem = Some((api_status(&e), e.to_string()));
            escalation_view(&s, &principal, &id, None, problem).await
        }
    }
}

async fn resolve(
    State(s): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<ResolveForm>, FormRejection>,
) -> Response {
    if !same_origin(&headers) {
        return error_page(
            StatusCode::FORBIDDEN,
            "form posts from other sites are refused",
        );
    }
    let f = match form {
        Ok(Form(f)) => f,
        Err(r) => return error_page(StatusCode::BAD_REQUEST, &r.body_text()),
    };
    let by = match super::auth::acting_as(&principal, Some(&f.by)) {
        Ok(by) => by,
        Err(e) => return error_page(api_status(&e), &e.to_string()),
    };
    let note = Some(f.note.trim()).filter(|n| !n.is_empty());
    match s
        .engine
        .resolve(&id, &by, f.resolution.trim(), note, f.take_over.is_some())
        .await
    {
        Ok(_) => see_other(format!("/escalations/{}?done=resolved", U(&id))),
        Err(e) => {
            let e = ApiError::from(e);
            let problem = Some((api_status(&e), e.to_string()));
            escalation_view(&s, &principal, &id, None, problem).await
        }
    }
}

/// Suggested resolutions (free text is accepted too).
const RESOLUTIONS: [&str; 5] = [
    "reversed_extra_effect",
    "confirmed_single_effect",
    "reconciled_with_downstream",
    "accepted_as_is",
    "false_positive",
];

async fn escalation_view(
    s: &ApiState,
    principal: &Principal,
    id: &str,
    notice: Option<&str>,
    problem: Option<(StatusCode, String)>,
) -> Response {
    let e = match s.store.get_escalation(id).await {
        Ok(Some(e)) => e,
        Ok(None) => return error_page(StatusCode::NOT_FOUND, &format!("no escalation {id}")),
        Err(e) => {
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("the store did not answer: {e}"),
            )
        }
    };
    let verdict: Option<VerdictDoc> = super::verdict_doc(s, &e.intent_id).await;
    let contract: Option<ContractDoc> = verdict
        .as_ref()
        .and_then(|v| v.contract.as_deref())
        .and_then(|name| {
            s.engine
                .contracts()
                .by_name(name)
                .map(ContractDoc::from_contract)
        });
    let records: Vec<RecordObservation> = s
        .engine
        .history(&e.intent_id)
        .map(|h| h.records)
        .unwrap_or_default();

    let mut b = String::with_capacity(32 * 1024);
    let _ = write!(
        b,
        "<p class=\"crumbs\"><a href=\"/\">← Queue</a></p>\
         <h1>{} <span class=\"mono\" id=\"escalation-id\">{}</span> {}</h1>",
        severity_badge(e.severity),
        E(&e.id),
        status_badge(e.status)
    );
    if let Some(n) = notice {
        let _ = write!(b, "<p class=\"notice\" id=\"notice\">{}</p>", E(n));
    }
    if let Some((status, msg)) = &problem {
        let _ = write!(
            b,
            "<p class=\"error\" id=\"problem\">{}: {}</p>",
            status.as_u16(),
            E(msg)
        );
    }

    // Summary and actions side by side.
    b.push_str(
        "<div class=\"top-grid\"><section class=\"card\"><h2>Intent</h2><dl class=\"facts\">",
    );
    fact(
        &mut b,
        "intent",
        &format!(
            "<span class=\"mono\">{}</span> <a class=\"json\" href=\"/api/v1/intents/{}\">JSON</a>",
            E(&e.intent_id),
            E(&U(&e.intent_id).to_string())
        ),
    );
    if let Some(v) = &verdict {
        fact(
            &mut b,
            "tool",
            &E(v.tool.as_deref().unwrap_or("—")).to_string(),
        );
        fact(
            &mut b,
            "state",
            &format!(
                "<span class=\"state\">{}</span> → decision <b>{}</b>",
                E(&v.state),
                E(&v.decision)
            ),
        );
        let keys: Vec<String> = v
            .idempotency_keys
            .iter()
            .map(|k| format!("<span class=\"mono\">{}</span>", E(k)))
            .collect();
        fact(
            &mut b,
            "keys",
            &if keys.is_empty() {
                "none sent".into()
            } else {
                keys.join(", ")
            },
        );
        if let Some(t) = v.safe_retry_until.as_deref() {
            fact(&mut b, "safe retry until", &E(&short_time(t)).to_string());
        }
    } else {
        fact(
            &mut b,
            "verdict",
            "not available (the intent is neither in memory nor in the store)",
        );
    }
    fact(&mut b, "opened", &when(e.opened_at));
    if let (Some(by), Some(at)) = (&e.claimed_by, e.claimed_at) {
        fact(
            &mut b,
            "claimed",
            &format!("by <b>{}</b> at {}", E(by), when(at)),
        );
    }
    if let (Some(by), Some(at)) = (&e.resolved_by, e.resolved_at) {
        fact(
            &mut b,
            "resolved",
            &format!("by <b>{}</b> at {}", E(by), when(at)),
        );
        fact(
            &mut b,
            "resolution",
            &format!("<b>{}</b>", E(e.resolution.as_deref().unwrap_or(""))),
        );
        if let Some(note) = &e.note {
            fact(
                &mut b,
                "note",
                &format!("<span class=\"note\">{}</span>", E(note)),
            );
        }
    }
    for o in &e.overrides {
        fact(
            &mut b,
            "override",
            &format!(
                "<span class=\"override\">{} by <b>{}</b> at {}, taken over from {}</span>",
                E(o.action.as_str()),
                E(&o.by),
                when(o.at),
                E(&o.held_by)
            ),
        );
    }
    if e.status == EscalationStatus::Withdrawn {
        fact(
            &mut b,
            "withdrawn",
            "late evidence showed that the findings behind it never held",
        );
    }
    let _ = write!(
        b,
        "</dl><p class=\"json\"><a href=\"/api/v1/escalations/{}\">Evidence bundle as JSON</a></p></section>",
        E(&U(&e.id).to_string())
    );
    actions(&mut b, &e, principal);
    b.push_str("</div>");

    // The time axis.
    b.push_str("<section class=\"card\"><h2>Evidence on a time axis</h2>");
    let tl = build_timeline(&e, verdict.as_ref(), contract.as_ref(), &records);
    match tl.render() {
        Some(svg) => {
            b.push_str("<div class=\"timeline-wrap\" id=\"timeline\">");
            b.push_str(&svg);
            b.push_str("</div>");
            b.push_str(
                "<p class=\"legend\"><span class=\"sw t-ok\"></span>succeeded \
                 <span class=\"sw t-unknown\"></span>unknown <span class=\"sw t-wait\"></span>pending / recorded \
                 <span class=\"sw t-bad\"></span>failed <span class=\"sw t-muted\"></span>rejected \
                 <span class=\"sw t-conflict\"></span>conflict · bars: attempts (sent → answered); \
                 ◆ read-backs; ● the downstream's records of an object, ○ an object seen only in a response; \
                 ▲ findings; dashed: the escalation opened, claimed, resolved. Hover for details; \
                 times are offsets from the first event.</p>",
            );
        }
        None => b.push_str("<p class=\"empty\">No evidence to place on a time axis.</p>"),
    }
    b.push_str("</section>");

    findings_section(&mut b, &e, verdict.as_ref());
    if let Some(v) = &verdict {
        attempts_section(&mut b, v);
        readbacks_section(&mut b, v);
        objects_section(&mut b, v, contract.as_ref(), &records);
    }
    contract_section(
        &mut b,
        contract.as_ref(),
        verdict.as_ref().map(|v| v.contract_version.as_str()),
    );

    let status = problem.map_or(StatusCode::OK, |(s, _)| s);
    respond(status, page(&format!("Escalation {}", e.id), &b))
}

fn fact(b: &mut String, name: &str, value_html: &str) {
    let _ = write!(b, "<dt>{}</dt><dd>{}</dd>", E(name), value_html);
}

/// The claim and resolve forms. With a token the person is the token's name, shown instead of
/// a name field; a token that may only read gets no forms.
fn actions(b: &mut String, e: &Escalation, principal: &Principal) {
    let action = |what: &str| format!("/escalations/{}/{what}", U(&e.id));
    b.push_str("<section class=\"card actions\"><h2>Work it</h2>");
    let by_field = |value: &str| {
        match principal.name() {
        Some(name) => format!("<p class=\"who\" id=\"acting-as\">as <b>{}</b></p>", E(name)),
        None => format!(
            "<label>By <input name=\"by\" required maxlength=\"200\" autocomplete=\"username\" value=\"{}\" placeholder=\"your name\"></label>",
            E(value)
        ),
    }
    };
    match e.status {
        EscalationStatus::Resolved => {
            b.push_str("<p>Resolved: nothing left to do here. New evidence with a high or critical finding opens a new escalation.</p>");
        }
        EscalationStatus::Withdrawn => {
            b.push_str("<p id=\"withdrawn\">Withdrawn: late evidence showed that its findings never held, before anyone claimed it. Nothing left to do here.</p>");
        }
        _ if !principal.may(Need::Act) => {
            b.push_str("<p id=\"read-only\">Your token may read the queue; claiming and resolving needs an operator token.</p>");
        }
        status => {
            // Someone holds it: acting on it takes over from them, and says so.
            let holder = e
                .claimed_by
                .as_deref()
                .filter(|_| status == EscalationStatus::Claimed)
                .filter(|h| principal.name() != Some(*h));
            let take_over = |what: &str| {
                match holder {
                Some(h) => format!(
                    "<label class=\"override\"><input type=\"checkbox\" name=\"override\" value=\"true\"> \
                     {what} although {} holds it (recorded as an override)</label>",
                    E(h)
                ),
                None => String::new(),
            }
            };
            if status == EscalationStatus::Open {
                let _ = write!(
                    b,
                    "<form method=\"post\" action=\"{}\" id=\"claim-form\"><h3>Claim</h3>{}\
                     <button type=\"submit\" id=\"claim\">Claim</button></form>",
                    E(&action("claim")),
                    by_field("")
                );
            } else if holder.is_some() {
                // Claimed by someone else: taking it over is a claim with the override.
                let _ = write!(
                    b,
                    "<form method=\"post\" action=\"{}\" id=\"take-over-form\"><h3>Take over</h3>{}{}\
                     <button type=\"submit\" id=\"take-over\">Take over</button></form>",
                    E(&action("claim")),
                    by_field(""),
                    take_over("take it over")
                );
            }
            let _ = write!(
                b,
                "<form method=\"post\" action=\"{}\" id=\"resolve-form\"><h3>Resolve</h3>{}\
                 <label>Resolution <input name=\"resolution\" required maxlength=\"200\" list=\"resolutions\" placeholder=\"what was done\"></label>\
                 <datalist id=\"resolutions\">",
                E(&action("resolve")),
                by_field(e.claimed_by.as_deref().unwrap_or(""))
            );
            for r in RESOLUTIONS {
                let _ = write!(b, "<option value=\"{r}\">");
            }
            b.push_str(
                "</datalist><label>Note <textarea name=\"note\" rows=\"3\" maxlength=\"4000\" \
                 placeholder=\"what you checked, what you changed\"></textarea></label>",
            );
            b.push_str(&take_over("resolve it"));
            b.push_str("<button type=\"submit\" id=\"resolve\">Resolve</button></form>");
        }
    }
    b.push_str("</section>");
}

fn attempt_tone(class: &str) -> &'static str {
    match class {
        "succeeded" => "ok",
        "failed" => "bad",
        "unknown" => "unknown",
        "recorded" => "wait",
        "conflict" => "conflict",
        _ => "muted",
    }
}

fn status_tone(status: &str, contract: Option<&ContractDoc>) -> &'static str {
    let has = |list: &[String]| list.iter().any(|x| x == status);
    match contract {
        Some(c) if has(&c.success_states) => "ok",
        Some(c) if has(&c.failure_states) => "bad",
        Some(c) if has(&c.pending_states) => "wait",
        Some(_) => "muted",
        None => match status {
            "succeeded" | "completed" | "confirmed" => "ok",
            "failed" | "canceled" | "cancelled" => "bad",
            "pending" | "requires_action" | "processing" => "wait",
            _ => "muted",
        },
    }
}

fn ts(s: &str) -> Option<Timestamp> {
    parse_rfc3339(s)
}

fn build_timeline(
    e: &Escalation,
    v: Option<&VerdictDoc>,
    contract: Option<&ContractDoc>,
    records: &[RecordObservation],
) -> Timeline {
    let mut tl = Timeline::default();
    if let Some(v) = v {
        for (n, a) in v.attempts.iter().enumerate() {
            let (Some(start), Some(end)) = (ts(&a.start), ts(&a.end)) else {
                continue;
            };
            let answer = match (a.http_status, &a.error_type) {
                (Some(h), _) => format!(" · {h}"),
                (None, Some(err)) => format!(" · {err}"),
                (None, None) => String::new(),
            };
            let mut tip = format!(
                "attempt {}: {}{answer}\nsent {}, answered after {}\nkey: {}",
                n + 1,
                a.class,
                short_time(&a.start),
                human_duration(end.0 - start.0),
                a.idempotency_key.as_deref().unwrap_or("none"),
            );
            if let Some(o) = &a.object_id {
                let _ = write!(
                    tip,
                    "\nresponse: object {o} ({})",
                    a.object_status.as_deref().unwrap_or("no status")
                );
            }
            if let Some(r) = &a.reported_outcome {
                let _ = write!(tip, "\ntold the model: {r}");
            }
            tl.lanes.push(Lane {
                name: format!("attempt {}", n + 1),
                tip: format!("key {}", a.idempotency_key.as_deref().unwrap_or("none")),
                items: vec![Item {
                    at: start,
                    shape: Shape::Bar(end),
                    tone: attempt_tone(&a.class),
                    label: format!("{}{answer}", a.class),
                    tip,
                }],
                life: false,
            });
        }
        if !v.readbacks.is_empty() {
            let items = v
                .readbacks
                .iter()
                .filter_map(|r| {
                    let at = ts(&r.at)?;
                    let found = if r.object_ids.is_empty() {
                        "found nothing".to_string()
                    } else {
                        format!("found {}", r.object_ids.len())
                    };
                    Some(Item {
                        at,
                        shape: Shape::Diamond,
                        tone: if r.object_ids.is_empty() {
                            "unknown"
                        } else {
                            "muted"
                        },
                        tip: format!(
                            "read-back at {}: {}",
                            short_time(&r.at),
                            if r.object_ids.is_empty() {
                                "no object found".to_string()
                            } else {
                                r.object_ids.join(", ")
                            }
                        ),
                        label: found,
                    })
                })
                .collect();
            tl.lanes.push(Lane {
                name: "read-backs".into(),
                tip: "observations of the downstream's state by the executor".into(),
                items,
                life: false,
            });
        }
        for o in &v.objects {
            let mut items: Vec<Item> = records
                .iter()
                .filter(|r| r.object_id == o.object_id)
                .map(|r| Item {
                    at: r.observed_at,
                    shape: Shape::Dot,
                    tone: status_tone(&r.status, contract),
                    label: r.status.clone(),
                    tip: format!(
                        "{} {}: {} (from {})",
                        o.object_id,
                        short_time(&crate::codec::rfc3339(r.observed_at)),
                        r.status,
                        r.source
                    ),
                })
                .collect();
            // Responses that named the object: what the executor was told.
            for (n, a) in v.attempts.iter().enumerate() {
                if a.object_id.as_deref() == Some(o.object_id.as_str()) {
                    if let Some(end) = ts(&a.end) {
                        let status = a.object_status.clone().unwrap_or_default();
                        items.push(Item {
                            at: end,
                            shape: Shape::HollowDot,
                            tone: status_tone(&status, contract),
                            label: if items.is_empty() {
                                status.clone()
                            } else {
                                String::new()
                            },
                            tip: format!("response to attempt {}: {} {status}", n + 1, o.object_id),
                        });
                    }
                }
            }
            if items.is_empty() {
                if let Some(at) = ts(&o.first_seen) {
                    items.push(Item {
                        at,
                        shape: Shape::Dot,
                        tone: status_tone(&o.status, contract),
                        label: o.status.clone(),
                        tip: format!(
                            "{} first seen {}: {}",
                            o.object_id,
                            short_time(&o.first_seen),
                            o.status
                        ),
                    });
                }
            }
            tl.lanes.push(Lane {
                name: o.object_id.clone(),
                tip: format!(
                    "object {}: {}{}",
                    o.object_id,
                    o.status,
                    match (&o.amount, &o.currency) {
                        (Some(a), Some(c)) => format!(", {a} {c}"),
                        (Some(a), None) => format!(", {a}"),
                        _ => String::new(),
                    }
                ),
                items,
                life: true,
            });
        }
    }
    // Findings: those the escalation keeps and those of the verdict now, each once.
    let mut seen = BTreeSet::new();
    let mut items = Vec::new();
    for f in &e.findings {
        seen.insert((f.kind.as_str().to_string(), f.subject.clone()));
        items.push(Item {
            at: f.at,
            shape: Shape::Triangle,
            tone: f.severity.as_str(),
            label: f.kind.as_str().to_string(),
            tip: format!(
                "{} ({}): {}",
                f.kind.as_str(),
                f.severity.as_str(),
                f.detail
            ),
        });
    }
    if let Some(v) = v {
        for f in &v.findings {
            if seen.insert((f.kind.clone(), f.subject.clone())) {
                if let Some(at) = ts(&f.at) {
                    items.push(Item {
                        at,
                        shape: Shape::Triangle,
                        tone: match f.severity.as_str() {
                            "critical" => "critical",
                            "high" => "high",
                            _ => "medium",
                        },
                        label: f.kind.clone(),
                        tip: format!("{} ({}): {}", f.kind, f.severity, f.detail),
                    });
                }
            }
        }
    }
    if !items.is_empty() {
        tl.lanes.push(Lane {
            name: "findings".into(),
            tip: "breaches and risks the audit found".into(),
            items,
            life: false,
        });
    }
    tl.moments.push((e.opened_at, "escalation opened".into()));
    if let (Some(at), Some(by)) = (e.claimed_at, &e.claimed_by) {
        tl.moments.push((at, format!("claimed by {by}")));
    }
    if let (Some(at), Some(by)) = (e.resolved_at, &e.resolved_by) {
        tl.moments.push((at, format!("resolved by {by}")));
    }
    tl
}

fn findings_section(b: &mut String, e: &Escalation, v: Option<&VerdictDoc>) {
    let in_verdict = |kind: &str, subject: &str| {
        v.is_some_and(|v| {
            v.findings
                .iter()
                .any(|f| f.kind == kind && f.subject == subject)
        })
    };
    b.push_str(
        "<section class=\"card\"><h2>Findings</h2>\
         <h3>Why this escalation was opened</h3>\
         <p class=\"hint\">The findings that opened or joined it, as they read then. They stay here \
         even when later evidence removes them from the verdict.</p>\
         <table id=\"escalation-findings\"><thead><tr><th>Severity</th><th>Finding</th><th>At</th>\
         <th>About</th><th>Detail</th><th>In the verdict now</th></tr></thead><tbody>",
    );
    for f in &e.findings {
        let now = in_verdict(f.kind.as_str(), &f.subject);
        let _ = write!(
            b,
            "<tr><td>{}</td><td><b>{}</b></td><td>{}</td><td class=\"mono\">{}</td><td>{}</td><td>{}</td></tr>",
            severity_badge(f.severity),
            E(f.kind.as_str()),
            when(f.at),
            E(&f.subject),
            E(&f.detail),
            if now {
                "<span class=\"yes\">yes</span>"
            } else {
                "<span class=\"no\">no longer</span>"
            }
        );
    }
    b.push_str("</tbody></table>");
    match v {
        Some(v) => {
            b.push_str(
                "<h3>The verdict's findings now</h3><table id=\"verdict-findings\"><thead><tr><th>Severity</th>\
                 <th>Finding</th><th>At</th><th>About</th><th>Detail</th><th>On this escalation</th></tr></thead><tbody>",
            );
            if v.findings.is_empty() {
                b.push_str("<tr><td colspan=\"6\" class=\"empty\">none</td></tr>");
            }
            for f in &v.findings {
                let on = e
                    .findings
                    .iter()
                    .any(|x| x.kind.as_str() == f.kind && x.subject == f.subject);
                let _ = write!(
                    b,
                    "<tr><td><span class=\"sev sev-{sev}\">{sev}</span></td><td><b>{}</b></td><td>{}</td>\
                     <td class=\"mono\">{}</td><td>{}</td><td>{}</td></tr>",
                    E(&f.kind),
                    ts(&f.at).map_or_else(|| E(&f.at).to_string(), when),
                    E(&f.subject),
                    E(&f.detail),
                    if on {
                        "yes"
                    } else if f.severity == "medium" {
                        "no (medium findings do not escalate)"
                    } else {
                        "no (joined after, or a later escalation)"
                    },
                    sev = E(&f.severity),
                );
            }
            b.push_str("</tbody></table>");
        }
        None => b.push_str("<p class=\"empty\">The verdict is not available.</p>"),
    }
    b.push_str("</section>");
}

fn attempts_section(b: &mut String, v: &VerdictDoc) {
    let _ = write!(
        b,
        "<section class=\"card\"><h2>Attempts ({})</h2>",
        v.attempts.len()
    );
    if v.attempts.is_empty() {
        b.push_str("<p class=\"empty\">No attempt seen.</p></section>");
        return;
    }
    b.push_str(
        "<table id=\"attempts\"><thead><tr><th>#</th><th>Sent</th><th>Took</th><th>Key</th><th>Class</th>\
         <th>HTTP</th><th>Error</th><th>Object in the response</th><th>Told the model</th><th>Span</th></tr></thead><tbody>",
    );
    for (n, a) in v.attempts.iter().enumerate() {
        let took = match (ts(&a.start), ts(&a.end)) {
            (Some(s), Some(e)) => human_duration(e.0 - s.0),
            _ => "—".into(),
        };
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"nowrap\">{}</td><td class=\"nowrap\">{}</td><td class=\"mono\">{}</td>\
             <td><span class=\"cls t-{}\">{}</span></td><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td>{}</td>\
             <td class=\"mono small\">{}/{}</td></tr>",
            n + 1,
            E(&short_time(&a.start)),
            took,
            E(a.idempotency_key.as_deref().unwrap_or("—")),
            attempt_tone(&a.class),
            E(&a.class),
            a.http_status.map_or("—".into(), |h| h.to_string()),
            E(a.error_type.as_deref().unwrap_or("—")),
            E(&match (&a.object_id, &a.object_status) {
                (Some(o), Some(st)) => format!("{o} ({st})"),
                (Some(o), None) => o.clone(),
                _ => "—".into(),
            }),
            E(a.reported_outcome.as_deref().unwrap_or("—")),
            E(&a.trace_id),
            E(&a.span_id),
        );
    }
    b.push_str("</tbody></table></section>");
}

fn readbacks_section(b: &mut String, v: &VerdictDoc) {
    if v.readbacks.is_empty() {
        return;
    }
    let _ = write!(
        b,
        "<section class=\"card\"><h2>Read-backs ({})</h2><table id=\"readbacks\"><thead><tr><th>At</th>\
         <th>Objects found</th><th>Span</th></tr></thead><tbody>",
        v.readbacks.len()
    );
    for r in &v.readbacks {
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"mono\">{}</td><td class=\"mono small\">{}/{}</td></tr>",
            E(&short_time(&r.at)),
            if r.object_ids.is_empty() {
                "none".to_string()
            } else {
                E(&r.object_ids.join(", ")).to_string()
            },
            E(&r.trace_id),
            E(&r.span_id)
        );
    }
    b.push_str("</tbody></table></section>");
}

fn objects_section(
    b: &mut String,
    v: &VerdictDoc,
    contract: Option<&ContractDoc>,
    records: &[RecordObservation],
) {
    let _ = write!(
        b,
        "<section class=\"card\"><h2>Downstream objects ({})</h2>",
        v.objects.len()
    );
    if v.objects.is_empty() {
        b.push_str("<p class=\"empty\">No object linked to this intent.</p></section>");
        return;
    }
    b.push_str(
        "<table id=\"objects\"><thead><tr><th>Object</th><th>Status</th><th>Amount</th><th>Target</th>\
         <th>First seen</th><th>Last seen</th><th>Status history (the downstream's records)</th></tr></thead><tbody>",
    );
    for o in &v.objects {
        let mut obs: Vec<&RecordObservation> = records
            .iter()
            .filter(|r| r.object_id == o.object_id)
            .collect();
        obs.sort_by_key(|r| r.observed_at);
        let history = if obs.is_empty() {
            "<span class=\"hint\">no record yet: known from a response</span>".to_string()
        } else {
            let mut h = String::from("<ol class=\"history\">");
            for r in obs {
                let _ = write!(
                    h,
                    "<li>{} <span class=\"cls t-{}\">{}</span> <span class=\"hint\">from {}</span></li>",
                    when(r.observed_at),
                    status_tone(&r.status, contract),
                    E(&r.status),
                    E(&r.source)
                );
            }
            h.push_str("</ol>");
            h
        };
        let _ = write!(
            b,
            "<tr><td class=\"mono\">{}</td><td><span class=\"cls t-{}\">{}</span></td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{history}</td></tr>",
            E(&o.object_id),
            status_tone(&o.status, contract),
            E(&o.status),
            E(&match (&o.amount, &o.currency) {
                (Some(a), Some(c)) => format!("{a} {c}"),
                (Some(a), None) => a.clone(),
                _ => "—".into(),
            }),
            E(o.target.as_deref().unwrap_or("—")),
            E(&short_time(&o.first_seen)),
            E(&short_time(&o.last_seen)),
        );
    }
    b.push_str("</tbody></table></section>");
}

/// The contract in force, and whether the verdict shown was computed under this version of it
/// (`judged_under`: the verdict's `contract_version`).
fn contract_section(b: &mut String, c: Option<&ContractDoc>, judged_under: Option<&str>) {
    b.push_str("<section class=\"card\"><h2>The contract</h2>");
    let Some(c) = c else {
        b.push_str("<p class=\"empty\">No contract matched this intent's tool: it was judged as having no idempotency contract.</p></section>");
        return;
    };
    match judged_under {
        // Written before versions were kept: nothing to compare.
        Some("") | None => {}
        Some(v) if v == c.version => {}
        Some(v) => {
            let _ = write!(
                b,
                "<p class=\"notice\" id=\"contract-changed\">The verdict was computed under version \
                 <span class=\"mono\">{}</span> of this contract; version <span class=\"mono\">{}</span> \
                 (below) is in force now and applies from the intent's next event.</p>",
                E(v),
                E(&c.version)
            );
        }
    }
    let list = |xs: &[String]| {
        if xs.is_empty() {
            "—".to_string()
        } else {
            xs.join(", ")
        }
    };
    let nums = |xs: &[u16]| xs.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
    let _ = write!(b, "<dl class=\"facts contract\" id=\"contract\">");
    for (k, v) in [
        ("name", c.name.clone()),
        ("version", c.version.clone()),
        ("tools", list(&c.tools)),
        (
            "record kind",
            c.record_kind.clone().unwrap_or_else(|| "—".into()),
        ),
        ("idempotency", c.idempotency.clone()),
        (
            "key retention",
            c.key_retention.clone().unwrap_or_else(|| "none".into()),
        ),
        ("retry margin", c.retry_margin.clone()),
        (
            "max in flight",
            c.max_in_flight
                .clone()
                .unwrap_or_else(|| "unbounded".into()),
        ),
        ("unknown deadline", c.unknown_deadline.clone()),
        ("pending deadline", c.pending_deadline.clone()),
        (
            "max attempts",
            c.max_attempts.map_or("unlimited".into(), |n| n.to_string()),
        ),
        ("success states", list(&c.success_states)),
        ("failure states", list(&c.failure_states)),
        ("pending states", list(&c.pending_states)),
        ("not executed on HTTP", nums(&c.not_executed_status)),
        ("conflict on HTTP", nums(&c.conflict_status)),
    ] {
        let _ = write!(b, "<dt>{}</dt><dd>{}</dd>", E(k), E(&v));
    }
    b.push_str("</dl></section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn cross_site_form_posts_are_refused() {
        assert!(
            same_origin(&headers(&[])),
            "curl and scripts send no Origin"
        );
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "same-site")])));
        assert!(same_origin(&headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[("origin", "null"), ("host", "a")])));
    }

    #[test]
    fn status_filter_words() {
        assert!(StatusFilter::parse("")
            .unwrap()
            .admits(EscalationStatus::Claimed));
        assert!(!StatusFilter::parse("unresolved")
            .unwrap()
            .admits(EscalationStatus::Resolved));
        assert!(StatusFilter::parse("all")
            .unwrap()
            .admits(EscalationStatus::Resolved));
        assert!(StatusFilter::parse("resolved")
            .unwrap()
            .admits(EscalationStatus::Resolved));
        assert!(StatusFilter::parse("bogus").is_none());
    }

    #[test]
    fn tones_follow_the_contract() {
        let c = ContractDoc {
            name: "c".into(),
            version: "0123456789abcdef".into(),
            tools: vec![],
            record_kind: None,
            idempotency: "replay".into(),
            key_retention: None,
            retry_margin: "1h".into(),
            max_in_flight: None,
            unknown_deadline: "15m".into(),
            pending_deadline: "2h".into(),
            max_attempts: None,
            success_states: vec!["paid".into()],
            failure_states: vec!["void".into()],
            pending_states: vec!["draft".into()],
            not_executed_status: vec![],
            conflict_status: vec![],
        };
        assert_eq!(status_tone("paid", Some(&c)), "ok");
        assert_eq!(status_tone("void", Some(&c)), "bad");
        assert_eq!(status_tone("draft", Some(&c)), "wait");
        assert_eq!(status_tone("succeeded", Some(&c)), "muted");
        assert_eq!(status_tone("succeeded", None), "ok");
    }

    /// The contract section names the version in force, and says so when the verdict shown
    /// was computed under another one (a reload since).
    #[test]
    fn the_contract_section_shows_its_version() {
        let c = ContractDoc::from_contract(&crate::contract::Contract::example("c", "t"));
        let page = |judged: Option<&str>| {
            let mut b = String::new();
            contract_section(&mut b, Some(&c), judged);
            b
        };
        let now = page(Some(&c.version));
        assert!(
            now.contains(&format!("<dt>version</dt><dd>{}</dd>", c.version)),
            "{now}"
        );
        assert!(!now.contains("contract-changed"));
        assert!(!page(Some("")).contains("contract-changed"));
        let older = page(Some("<old>"));
        assert!(older.contains("id=\"contract-changed\""), "{older}");
        assert!(older.contains("&lt;old&gt;"), "escaped: {older}");
    }
}
