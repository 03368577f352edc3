//! Access (DESIGN.md "Access") through a running reckon: tokens with roles on every listener,
//! sent by the real `opentelemetry-otlp` exporters (gRPC metadata, HTTP headers), the API and
//! the pages (Bearer and Basic), who is recorded as having acted; TLS on every listener with a
//! certificate authority the test makes, spoken to by the real exporters and an HTTPS client.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::SpanExporter as _;
use reckon::auth::{AuthConfig, MetricsAccess, Role, Token};
use serde_json::{json, Value};

use super::support::*;

const INGEST: &str = "agents-ingest-0123456789abcdef";
const READ: &str = "grafana-read-0123456789abcdef";
const OPERATOR: &str = "ana-operator-0123456789abcdef";
/// Looks like a token, is none of them.
const WRONG: &str = "ana-operator-0123456789abcdeX";

fn tokens() -> AuthConfig {
    AuthConfig {
        tokens: vec![
            Token::new("agents", INGEST, Role::Ingest).unwrap(),
            Token::new("grafana", READ, Role::Read).unwrap(),
            Token::new("ana", OPERATOR, Role::Operator).unwrap(),
        ],
        metrics: MetricsAccess::Read,
    }
}

async fn start_with_tokens() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let config = reckon::config::Config {
        auth: tokens(),
        ..test_config(dir.path().join("data"))
    };
    Server::start_with(dir, config).await
}

// ------------------------------------------------------------------ the real exporters

/// The OTLP/gRPC exporter with `authorization` metadata (`None`: none sent).
async fn grpc_export(
    endpoint: &str,
    token: Option<&str>,
    tls: Option<&str>,
    spans: &[&ToolSpan],
) -> opentelemetry_sdk::error::OTelSdkResult {
    let mut metadata = opentelemetry_otlp::tonic_types::metadata::MetadataMap::new();
    if let Some(t) = token {
        metadata.insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(std::time::Duration::from_secs(5))
        .with_metadata(metadata);
    if let Some(ca) = tls {
        use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
        builder = builder.with_tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name("localhost"),
        );
    }
    builder
        .build()
        .unwrap()
        .export(spans.iter().map(|s| s.data()).collect())
        .await
}

/// The OTLP/HTTP (protobuf) exporter with an `authorization` header, through reqwest or, for
/// TLS, the test's HTTPS client.
async fn http_export(
    base: &str,
    token: Option<&str>,
    tls: Option<&Https>,
    spans: &[&ToolSpan],
) -> opentelemetry_sdk::error::OTelSdkResult {
    let mut headers = HashMap::new();
    if let Some(t) = token {
        headers.insert("authorization".to_string(), format!("Bearer {t}"));
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{base}/v1/traces"))
        .with_timeout(std::time::Duration::from_secs(5))
        .with_headers(headers);
    if let Some(client) = tls {
        builder = builder.with_http_client(client.clone());
    }
    builder
        .build()
        .unwrap()
        .export(spans.iter().map(|s| s.data()).collect())
        .await
}

fn refund(intent: &str) -> ToolSpan {
    ToolSpan::new("issue_refund", ago(120.0), 30.0)
        .intent(intent)
        .key(&unique("key"))
        .args(refund_args("45.00"))
        .timeout()
        .told("unknown")
}

// ------------------------------------------------------------------ HTTP with a token

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn basic(user: &str, t: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{t}"));
    format!("Basic {b64}")
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    fn challenges(&self) -> Vec<String> {
        self.headers
            .get_all("www-authenticate")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }
}

async fn call(
    s: &Server,
    method: reqwest::Method,
    path: &str,
    authorization: Option<String>,
    body: Option<Value>,
) -> Answer {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut req = client.request(method, s.api(path));
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    Answer {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.text().await.unwrap(),
    }
}

async fn get(s: &Server, path: &str, authorization: Option<String>) -> Answer {
    call(s, reqwest::Method::GET, path, authorization, None).await
}

async fn post(s: &Server, path: &str, authorization: Option<String>, body: Value) -> Answer {
    call(s, reqwest::Method::POST, path, authorization, Some(body)).await
}

/// Polls the verdict with the read token until it appears.
async fn verdict(s: &Server, intent: &str) -> Value {
    for _ in 0..150 {
        let a = get(s, &format!("/api/v1/intents/{intent}"), Some(bearer(READ))).await;
        if a.status == 200 {
            return a.json();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("intent {intent} never appeared");
}

async fn metric(s: &Server, series: &str) -> Option<f64> {
    let text = get(s, "/metrics", Some(bearer(READ))).await.body;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// An escalation to work: an email with no idempotency contract that timed out, exported with
/// the ingest token. Returns its id.
async fn email_escalation(s: &Server) -> String {
    let email = unique("mail");
    grpc_export(
        &s.r().grpc_url(),
        Some(INGEST),
        None,
        &[&ToolSpan::new("send_email", ago(60.0), 30.0)
            .intent(&email)
            .timeout()
            .told("unknown")],
    )
    .await
    .unwrap();
    for _ in 0..150 {
        let list = get(s, "/api/v1/escalations?status=open", Some(bearer(READ))).await;
        let found = list.json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["intent_id"] == email.as_str())
            .map(|e| e["id"].as_str().unwrap().to_string());
        if let Some(id) = found {
            return id;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the timed-out email {email} never escalated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporters_need_an_ingest_token_and_refused_exports_store_nothing() {
    let s = start_with_tokens().await;
    let grpc = s.r().grpc_url();
    let http = s.r().http_url();

    // Accepted with the ingest token, over both transports.
    let (a, b) = (unique("refund"), unique("refund"));
    grpc_export(&grpc, Some(INGEST), None, &[&refund(&a)])
        .await
        .expect("gRPC export with the ingest token");
    http_export(&http, Some(INGEST), None, &[&refund(&b)])
        .await
        .expect("HTTP export with the ingest token");
    assert_verdict(&verdict(&s, &a).await, "unknown / retry_same_key / -");
    assert_verdict(&verdict(&s, &b).await, "unknown / retry_same_key / -");

    // Refused without a token, with a wrong one, and with a token of another role.
    let mut refused = Vec::new();
    for token in [None, Some(WRONG), Some(OPERATOR), Some(READ)] {
        let (g, h) = (unique("refused"), unique("refused"));
        let e = grpc_export(&grpc, token, None, &[&refund(&g)]).await;
        assert!(e.is_err(), "gRPC export with {token:?} was acknowledged");
        let e = http_export(&http, token, None, &[&refund(&h)]).await;
        assert!(e.is_err(), "HTTP export with {token:?} was acknowledged");
        refused.extend([g, h]);
    }
    // What the exporter's refusal looks like on the wire: 401, the OTLP error body, the challenge.
    let raw = s
        .post_otlp("/v1/traces", "application/json", false, b"{}".to_vec())
        .await;
    assert_eq!(raw.status(), 401);
    assert_eq!(raw.headers()["www-authenticate"], "Bearer realm=\"reckon\"");
    let body: Value = raw.json().await.unwrap();
    assert_eq!(body["code"], 16, "UNAUTHENTICATED: {body}");

    // Nothing refused was stored: no verdict, no spans counted.
    for intent in &refused {
        let a = get(
            &s,
            &format!("/api/v1/intents/{intent}"),
            Some(bearer(OPERATOR)),
        )
        .await;
        assert_eq!(a.status, 404, "{intent}: {}", a.body);
    }
    assert_eq!(
        metric(&s, "reckon_spans_received_total{transport=\"grpc\"}").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&s, "reckon_spans_received_total{transport=\"http\"}").await,
        Some(1.0)
    );
    for (listener, reason, n) in [
        ("otlp_grpc", "unauthenticated", 2.0),
        ("otlp_grpc", "permission_denied", 2.0),
        ("otlp_http", "unauthenticated", 3.0),
        ("otlp_http", "permission_denied", 2.0),
    ] {
        let series =
            format!("reckon_access_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}}");
        assert_eq!(metric(&s, &series).await, Some(n), "{series}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_by_role_and_records_the_operator_as_who_acted() {
    let s = start_with_tokens().await;
    // Health stays open for probes.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(get(&s, path, None).await.status, 200, "{path}");
    }
    // So does the runbook every alert links to (prometheus/rules.yml's runbook_url): a page
    // with a section per alert, at the anchor the alert names.
    let runbook = get(&s, "/runbook", None).await;
    assert_eq!(runbook.status, 200);
    let rules = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/rules.yml"),
    )
    .unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 13, "{alerts:?}");
    for alert in alerts {
        let anchor = format!("id=\"{}\"", alert.to_lowercase());
        assert!(
            runbook.body.contains(&anchor),
            "/runbook has no section for {alert}"
        );
    }

    // One answer for no token, a wrong one, a malformed header: nothing says what exists.
    let no_token = get(&s, "/api/v1/escalations", None).await;
    assert_eq!(no_token.status, 401);
    assert_eq!(no_token.json()["error"]["code"], "unauthenticated");
    assert_eq!(
        no_token.challenges(),
        vec![
            "Bearer realm=\"reckon\"",
            "Basic realm=\"reckon\", charset=\"UTF-8\""
        ]
    );
    for authorization in [
        bearer(WRONG),
        bearer(&OPERATOR[..20]),
        format!("Token {OPERATOR}"),
        basic("ana", WRONG),
        "Bearer".to_string(),
    ] {
        let a = get(&s, "/api/v1/escalations", Some(authorization.clone())).await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (no_token.status, no_token.body.as_str()),
            "{authorization}"
        );
    }
    // A known token of the wrong role: 403, naming the token it holds.
    let a = get(&s, "/api/v1/escalations", Some(bearer(INGEST))).await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(a.json()["error"]["code"], "permission_denied");
    assert!(a.body.contains("agents"), "{}", a.body);
    // Metrics need a read token (the default); the report is a read.
    assert_eq!(get(&s, "/metrics", None).await.status, 401);
    assert_eq!(get(&s, "/metrics", Some(bearer(READ))).await.status, 200);
    assert_eq!(
        get(&s, "/api/v1/report", Some(bearer(READ))).await.status,
        200
    );

    // Records need the ingest token.
    let intent = unique("mail");
    let record = json!({"kind": "email", "object_id": unique("msg"), "intent_id": intent,
        "status": "queued", "observed_at": rfc3339(ago(1.0))});
    assert_eq!(
        post(&s, "/api/v1/records", None, record.clone())
            .await
            .status,
        401
    );
    assert_eq!(
        post(&s, "/api/v1/records", Some(bearer(READ)), record.clone())
            .await
            .status,
        403
    );
    let a = post(&s, "/api/v1/records", Some(bearer(INGEST)), record).await;
    assert_eq!(
        (a.status, &a.json()["accepted"]),
        (200, &json!(1)),
        "{}",
        a.body
    );

    // The Stripe webhook is authenticated by its signature, not a token.
    let stripe_intent = unique("refund");
    s.stripe(&stripe_event(
        "refund.created",
        &stripe_intent,
        &unique("re"),
        "succeeded",
        4500,
        None,
        ago(5.0),
    ))
    .await;
    let (code, _) = s
        .stripe_raw(
            &stripe_event(
                "refund.created",
                &unique("i"),
                &unique("re"),
                "succeeded",
                1,
                None,
                ago(5.0),
            ),
            Some("t=1,v1=00"),
        )
        .await;
    assert_eq!(code, 400, "a bad signature is still refused");

    // An escalation to work.
    let id = email_escalation(&s).await;
    let claim = format!("/api/v1/escalations/{id}/claim");
    let resolve = format!("/api/v1/escalations/{id}/resolve");

    // A read token sees it but cannot claim it; neither can ingest, nor nobody.
    for (authorization, want) in [
        (None, 401),
        (Some(bearer(WRONG)), 401),
        (Some(bearer(INGEST)), 403),
        (Some(bearer(READ)), 403),
    ] {
        let a = post(&s, &claim, authorization.clone(), json!({})).await;
        assert_eq!(a.status, want, "{authorization:?}: {}", a.body);
    }
    // Naming someone else is refused, not recorded under the token's name.
    let a = post(&s, &claim, Some(bearer(OPERATOR)), json!({"by": "bob"})).await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.body.contains("\\\"ana\\\""), "{}", a.body);
    let still = get(&s, &format!("/api/v1/escalations/{id}"), Some(bearer(READ))).await;
    assert_eq!(still.json()["status"], "open", "{}", still.body);

    // The operator claims (no `by`: the token names who) and resolves (its own name is fine).
    let a = post(&s, &claim, Some(bearer(OPERATOR)), json!({})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = post(
        &s,
        &resolve,
        Some(bearer(OPERATOR)),
        json!({"by": "ana", "resolution": "confirmed_single_effect", "note": "one email in the provider's log"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    // The stored escalation says ana did both.
    let stored = get(&s, &format!("/api/v1/escalations/{id}"), Some(bearer(READ))).await;
    let e = &stored.json();
    assert_eq!(e["status"], "resolved", "{}", stored.body);
    assert_eq!(e["claimed_by"], "ana");
    assert_eq!(e["resolved_by"], "ana");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_take_the_token_by_basic_auth_and_keep_refusing_cross_site_posts() {
    let s = start_with_tokens().await;
    let id = email_escalation(&s).await;
    let email = get(&s, &format!("/api/v1/escalations/{id}"), Some(bearer(READ)))
        .await
        .json()["intent_id"]
        .as_str()
        .unwrap()
        .to_string();

    // Without credentials the browser is asked for them; the stylesheet stays open.
    let q = get(&s, "/", None).await;
    assert_eq!(q.status, 401);
    assert_eq!(
        q.challenges(),
        vec!["Basic realm=\"reckon\", charset=\"UTF-8\""]
    );
    assert!(q.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(get(&s, "/ui/favicon.svg", None).await.status, 200);
    assert_eq!(get(&s, "/", Some(basic("x", WRONG))).await.status, 401);
    assert_eq!(get(&s, "/", Some(basic("x", INGEST))).await.status, 403);

    // A read token sees the queue and the evidence, with no forms to act.
    let q = get(&s, "/", Some(basic("grafana", READ))).await;
    assert_eq!(q.status, 200, "{}", q.body);
    assert!(q.body.contains(&email));
    let page = format!("/escalations/{id}");
    let p = get(&s, &page, Some(basic("someone", READ))).await;
    assert_eq!(p.status, 200);
    assert!(p.body.contains("id=\"read-only\""), "{}", p.body);
    assert!(!p.body.contains("id=\"claim-form\""));
    // An operator gets the forms, acting as its token's name (no name field to fill).
    let p = get(&s, &page, Some(basic("whatever", OPERATOR))).await;
    assert!(p.body.contains("id=\"claim-form\""), "{}", p.body);
    assert!(
        p.body.contains("id=\"acting-as\">as <b>ana</b>"),
        "{}",
        p.body
    );
    assert!(!p.body.contains("name=\"by\""));

    let form_post =
        |path: String, authorization: Option<String>, site: &'static str, body: &'static str| {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap();
            let mut req = client
                .post(s.api(&path))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("sec-fetch-site", site)
                .body(body);
            if let Some(a) = authorization {
                req = req.header("authorization", a);
            }
            async move { req.send().await.unwrap().status().as_u16() }
        };
    let claim = format!("/escalations/{id}/claim");
    // A read token cannot claim through the page either.
    assert_eq!(
        form_post(claim.clone(), Some(basic("g", READ)), "same-origin", "").await,
        403
    );
    // The browser sends saved credentials with a form from another site: still refused.
    assert_eq!(
        form_post(claim.clone(), Some(basic("a", OPERATOR)), "cross-site", "").await,
        403
    );
    assert_eq!(
        form_post(claim.clone(), Some(basic("a", OPERATOR)), "same-origin", "").await,
        303
    );
    let resolve = format!("/escalations/{id}/resolve");
    assert_eq!(
        form_post(
            resolve,
            Some(basic("a", OPERATOR)),
            "same-origin",
            "resolution=accepted_as_is&note=checked"
        )
        .await,
        303
    );
    let stored = get(&s, &format!("/api/v1/escalations/{id}"), Some(bearer(READ))).await;
    let e = &stored.json();
    assert_eq!(
        (&e["status"], &e["claimed_by"], &e["resolved_by"]),
        (&json!("resolved"), &json!("ana"), &json!("ana")),
        "{}",
        stored.body
    );
    s.stop().await;
}

// ------------------------------------------------------------------ TLS

/// A certificate authority and a server certificate for `localhost` and 127.0.0.1 it signed,
/// as PEM.
struct TestPki {
    ca: String,
    cert: String,
    key: String,
}

fn make_pki() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "reckon test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    TestPki {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// An HTTPS client trusting only the test's CA (hyper over tokio-rustls, ring): reads the API
/// and carries the OTLP/HTTP exporter's requests.
#[derive(Clone)]
struct Https {
    connector: tokio_rustls::TlsConnector,
}

/// `opentelemetry_http::HttpClient` asks for it.
impl std::fmt::Debug for Https {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Https")
    }
}

impl Https {
    fn new(ca_pem: &str) -> Https {
        use rustls_pki_types::pem::PemObject;
        use tokio_rustls::rustls;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Https {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        }
    }

    async fn send(
        &self,
        request: axum::http::Request<Bytes>,
    ) -> Result<axum::http::Response<Bytes>, Box<dyn std::error::Error + Send + Sync>> {
        use http_body_util::BodyExt;
        let uri = request.uri().clone();
        let port = uri.port_u16().ok_or("no port")?;
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let server = rustls_pki_types::ServerName::try_from("localhost")?;
        let tls = self.connector.connect(server, tcp).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        let (mut parts, body) = request.into_parts();
        parts.uri = uri.path_and_query().map_or("/", |p| p.as_str()).parse()?;
        parts
            .headers
            .insert("host", format!("localhost:{port}").parse()?);
        let response = sender
            .send_request(axum::http::Request::from_parts(
                parts,
                http_body_util::Full::new(body),
            ))
            .await?;
        let (parts, body) = response.into_parts();
        Ok(axum::http::Response::from_parts(
            parts,
            body.collect().await?.to_bytes(),
        ))
    }

    async fn get(&self, url: &str, token: &str) -> (u16, Value) {
        let request = axum::http::Request::get(url)
            .header("authorization", bearer(token))
            .body(Bytes::new())
            .unwrap();
        let response = self.send(request).await.unwrap();
        (
            response.status().as_u16(),
            serde_json::from_slice(response.body()).unwrap_or(Value::Null),
        )
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Https {
    async fn send_bytes(
        &self,
        request: axum::http::Request<Bytes>,
    ) -> Result<axum::http::Response<Bytes>, opentelemetry_http::HttpError> {
        self.send(request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listener_speaks_tls_with_the_configured_certificate() {
    let pki = make_pki();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &pki.cert).unwrap();
    std::fs::write(&key, &pki.key).unwrap();
    let config = reckon::config::Config {
        auth: tokens(),
        tls_cert: Some(cert),
        tls_key: Some(key),
        ..test_config(dir.path().join("data"))
    };
    let s = Server::start_with(dir, config).await;
    assert!(s.r().api_url().starts_with("https://"));
    let https = Https::new(&pki.ca);

    // The real exporters, trusting the test's CA, with the ingest token.
    let (a, b) = (unique("refund"), unique("refund"));
    grpc_export(
        &s.r().grpc_url(),
        Some(INGEST),
        Some(&pki.ca),
        &[&refund(&a)],
    )
    .await
    .expect("gRPC export over TLS");
    http_export(
        &s.r().http_url(),
        Some(INGEST),
        Some(&https),
        &[&refund(&b)],
    )
    .await
    .expect("HTTP export over TLS");

    // The API over HTTPS.
    for intent in [&a, &b] {
        let url = s.api(&format!("/api/v1/intents/{intent}"));
        let mut got = (0, Value::Null);
        for _ in 0..150 {
            got = https.get(&url, READ).await;
            if got.0 == 200 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(got.0, 200, "{intent}: {}", got.1);
        assert_verdict(&got.1, "unknown / retry_same_key / -");
    }
    // Tokens still apply behind TLS.
    let (code, _) = https.get(&s.api("/api/v1/escalations"), WRONG).await;
    assert_eq!(code, 401);

    // Plain HTTP and plaintext gRPC to the TLS listeners get nowhere.
    let plain = |port: u16| format!("http://127.0.0.1:{port}");
    assert!(reqwest::Client::new()
        .get(format!("{}/healthz", plain(s.r().api_addr.port())))
        .send()
        .await
        .is_err());
    let c = unique("plain");
    assert!(http_export(
        &plain(s.r().http_addr.port()),
        Some(INGEST),
        None,
        &[&refund(&c)]
    )
    .await
    .is_err());
    assert!(grpc_export(
        &plain(s.r().grpc_addr.port()),
        Some(INGEST),
        None,
        &[&refund(&c)]
    )
    .await
    .is_err());
    // A client that does not trust the certificate refuses it.
    let stranger = Https::new(&make_pki().ca);
    let request = axum::http::Request::get(s.api("/healthz"))
        .body(Bytes::new())
        .unwrap();
    assert!(stranger.send(request).await.is_err());
    let (code, _) = https
        .get(&s.api(&format!("/api/v1/intents/{c}")), READ)
        .await;
    assert_eq!(code, 404, "nothing sent in clear was stored");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_certificate_fails_the_start_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(&key, make_pki().key).unwrap();
    let config = reckon::config::Config {
        tls_cert: Some(cert.clone()),
        tls_key: Some(key),
        ..test_config(dir.path().join("data"))
    };
    let e = match reckon::app::start(config).await {
        Ok(_) => panic!("started with a broken certificate"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains(&cert.display().to_string()), "{e}");
}

/// What the README tells exporters to set, read by the Python SDK's own OTLP/HTTP exporter:
/// `OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20TOKEN`.
const PYTHON_EXPORT: &str = r#"
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
import sys

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
with provider.get_tracer("reckon-access-test").start_as_current_span("execute_tool issue_refund") as s:
    s.set_attribute("gen_ai.operation.name", "execute_tool")
    s.set_attribute("gen_ai.tool.name", "issue_refund")
    s.set_attribute("reckon.intent.id", sys.argv[1])
    s.set_attribute("reckon.idempotency_key", sys.argv[1] + "-key")
    s.set_attribute("error.type", "timeout")
# Endpoint and headers come from OTEL_EXPORTER_OTLP_* only.
print(OTLPSpanExporter().export(spans.get_finished_spans()).name)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_exporter_otlp_headers_as_the_readme_writes_them() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import opentelemetry.exporter.otlp.proto.http"])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "the Python OpenTelemetry SDK is missing: pip install -r examples/python/requirements.txt (.ci/run does)"
    );
    let s = start_with_tokens().await;
    let run = |intent: String, token: &str| {
        let endpoint = s.r().http_url();
        let headers = format!("authorization=Bearer%20{token}");
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new("python3")
                .args(["-c", PYTHON_EXPORT, &intent])
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
                .env("OTEL_EXPORTER_OTLP_HEADERS", headers)
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
    };
    let (good, bad) = (unique("py"), unique("py"));
    assert_eq!(run(good.clone(), INGEST).await.unwrap(), "SUCCESS");
    assert_eq!(run(bad.clone(), WRONG).await.unwrap(), "FAILURE");
    // Just sent and timed out: the original may still commit.
    let v = verdict(&s, &good).await;
    assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["attempts"][0]["class"], "unknown", "{v}");
    let a = get(&s, &format!("/api/v1/intents/{bad}"), Some(bearer(READ))).await;
    assert_eq!(a.status, 404);
    s.stop().await;
}

/// `reckon escalations claim --override` takes an escalation someone else holds; without it the
/// command fails naming the holder. The take-over is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_escalations_command_takes_over_only_with_override() {
    let s = Server::start().await;
    let id = email_escalation(&s).await;
    let server = s.r().api_url();
    let cli = |args: Vec<&'static str>, id: String| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_reckon"))
                .arg("escalations")
                .arg(args[0])
                .arg(&id)
                .args(&args[1..])
                .args(["--server", &server])
                .env_remove("RECKON_TOKEN")
                .output()
                .unwrap()
        })
    };
    let out = cli(vec!["claim", "--by", "ana"], id.clone()).await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(vec!["claim", "--by", "bo"], id.clone()).await.unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("409") && stderr.contains("ana"), "{stderr}");
    let out = cli(
        vec![
            "resolve",
            "--by",
            "bo",
            "--resolution",
            "refunded_once",
            "--override",
            "--json",
        ],
        id.clone(),
    )
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["status"], "resolved", "{shown}");
    assert_eq!(shown["resolved_by"], "bo", "{shown}");
    assert_eq!(shown["overrides"][0]["by"], "bo", "{shown}");
    assert_eq!(shown["overrides"][0]["held_by"], "ana", "{shown}");
    s.stop().await;
}

/// `reckon escalations` sends `RECKON_TOKEN`; the server records the token's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_escalations_command_sends_its_token() {
    let s = start_with_tokens().await;
    let id = email_escalation(&s).await;
    let server = s.r().api_url();
    let cli = |token: Option<&'static str>, args: Vec<String>| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_reckon"));
            c.arg("escalations").args(args).args(["--server", &server]);
            c.env_remove("RECKON_TOKEN");
            if let Some(t) = token {
                c.env("RECKON_TOKEN", t);
            }
            c.output().unwrap()
        })
    };
    let out = cli(None, vec!["claim".into(), id.clone()]).await.unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    let out = cli(Some(OPERATOR), vec!["claim".into(), id.clone()])
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A line saying what changed, with the token's name as who.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with(&format!("{id} claimed by ana ")), "{said}");
    let out = cli(Some(READ), vec!["list".into()]).await.unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
    s.stop().await;
}

/// `reckon escalations list` reads like the queue page: a header, the most severe waiting work
/// first, filters by tool and severity, `--json` one escalation per line; `reckon intents show`
/// says the verdict in a few lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_lists_like_the_page_and_shows_an_intent() {
    let s = Server::start().await;
    let server = s.r().api_url();
    let (refund, email) = (unique("refund"), unique("mail"));
    let t0 = ago(120.0);
    let paid = |key: &str, object: &str, secs: f64| {
        ToolSpan::new("issue_refund", after(t0, secs), 0.4)
            .intent(&refund)
            .key(key)
            .args(refund_args("45.00"))
            .http(200)
            .object(object, "succeeded")
    };
    // The email first, so "oldest first" alone would list it first.
    export_grpc(
        &s,
        &[&ToolSpan::new("send_email", ago(300.0), 30.0)
            .intent(&email)
            .timeout()
            .told("unknown")],
    )
    .await;
    export_grpc(
        &s,
        &[
            &paid(&unique("k"), &unique("re"), 0.0),
            &paid(&unique("k"), &unique("re"), 5.0),
        ],
    )
    .await;
    let run = |args: Vec<String>| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_reckon"))
                .args(&args)
                .args(["--server", &server])
                .env_remove("RECKON_TOKEN")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        })
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut listed = String::new();
    for _ in 0..150 {
        listed = run(args(&["escalations", "list"])).await.unwrap();
        if listed.contains(&refund) && listed.contains(&email) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("SEVERITY"),
        "{listed}"
    );
    let (r, e) = (
        lines
            .iter()
            .position(|l| l.contains(&refund))
            .expect("the refund is listed"),
        lines
            .iter()
            .position(|l| l.contains(&email))
            .expect("the email is listed"),
    );
    assert!(
        r < e,
        "the critical duplicate comes before the older high finding:\n{listed}"
    );
    assert!(
        lines[r].contains("critical") && lines[r].contains("duplicate_effect"),
        "{listed}"
    );

    let critical = run(args(&[
        "escalations",
        "list",
        "--severity",
        "critical",
        "--json",
    ]))
    .await
    .unwrap();
    let docs: Vec<Value> = critical
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        docs.iter().any(|d| d["intent_id"] == refund.as_str()),
        "{critical}"
    );
    assert!(
        docs.iter().all(|d| d["severity"] == "critical"),
        "{critical}"
    );
    // The tool filter reads the intent's stored verdict, which the persister writes behind the
    // escalation: on a loaded machine it can lag the full list by a moment.
    let mut emails = String::new();
    for _ in 0..250 {
        emails = run(args(&["escalations", "list", "--tool", "send_email"]))
            .await
            .unwrap();
        if emails.contains(&email) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    }
    assert!(
        emails.contains(&email) && !emails.contains(&refund),
        "{emails}"
    );

    let shown = run(args(&["intents", "show", &refund])).await.unwrap();
    let first = shown.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("{refund}  issue_refund  completed -> escalate")),
        "{shown}"
    );
    assert!(
        shown.contains("attempts (2):") && shown.contains("objects (2):"),
        "{shown}"
    );
    assert!(shown.contains("duplicate_effect"), "{shown}");
    let json: Value = serde_json::from_str(
        &run(args(&["intents", "show", &refund, "--json"]))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["intent_id"], refund.as_str());
    s.stop().await;
}
