//! Wiring: contracts, store, engine, the three listeners, and an orderly shutdown. This is the
//! top of the program, so errors here are `anyhow`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{self, ApiState};
use crate::auth::{Access, Gate, Role};
use crate::config::{Config, StoreConfig};
use crate::contract::{self, Contracts};
use crate::engine::{Engine, EngineTasks};
use crate::ingest::body::BodyLimits;
use crate::ingest::service::IngestService;
use crate::ingest::{grpc, http};
use crate::listen::{self, ConnLimits, Guard, LimitedListener};
use crate::metrics::Metrics;
use crate::model::Dur;
use crate::notify::{self, Notifier};
use crate::store::{AnyStore, ClickHouseConfig, ClickHouseStore, SqliteStore};
use crate::tls::{Tls, TlsListener};

/// A started reckon. The addresses are the bound ones (a `:0` port in the config is resolved).
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub api_addr: SocketAddr,
    pub engine: Arc<Engine>,
    /// Every listener speaks TLS.
    pub tls: bool,
    stop: watch::Sender<bool>,
    servers: Vec<JoinHandle<anyhow::Result<()>>>,
    tasks: EngineTasks,
    /// Sends the outbox to `[[notify]]` targets, when there are any.
    delivery: Option<notify::deliver::Delivery>,
    grace: std::time::Duration,
    /// Where the contracts are reloaded from.
    contracts_dir: std::path::PathBuf,
    /// Reloads the contracts on SIGHUP.
    reloader: Option<JoinHandle<()>>,
}

pub async fn open_store(config: &Config) -> anyhow::Result<AnyStore> {
    match &config.store {
        StoreConfig::Sqlite => {
            let dir = config.data_dir.clone();
            let store = tokio::task::spawn_blocking(move || SqliteStore::open(&dir))
                .await?
                .with_context(|| {
                    format!("opening the SQLite store in {}", config.data_dir.display())
                })?;
            Ok(AnyStore::Sqlite(store))
        }
        StoreConfig::ClickHouse {
            url,
            user,
            password,
            database,
        } => {
            let ch = ClickHouseConfig::new(url, user, password, database)?;
            let what = format!(
                "opening the ClickHouse store {} database {}",
                ch.url, ch.database
            );
            let store = ClickHouseStore::open(ch).await.context(what)?;
            Ok(AnyStore::ClickHouse(store))
        }
    }
}

pub async fn start(config: Config) -> anyhow::Result<Running> {
    // Access and TLS first: a bad token or certificate fails the start before anything else
    // is opened.
    let access = Arc::new(Access::new(&config.auth).context("[[auth.token]]")?);
    let tls = crate::tls::load(config.tls_cert.as_deref(), config.tls_key.as_deref())
        .context("loading the TLS certificate")?;
    let contracts = contract::load_dir(&config.contracts_dir)?;
    if contracts.is_empty() {
        tracing::warn!(dir = %config.contracts_dir.display(), "no contracts loaded: only spans carrying reckon.intent.id will be audited");
    }
    for c in &contracts {
        tracing::info!(contract = %c.name, tools = ?c.tools, idempotency = c.idempotency.as_str(), "contract loaded");
    }
    let contracts = Arc::new(Contracts::new(contracts));
    let store = Arc::new(open_store(&config).await?);
    let metrics = Arc::new(Metrics::new());
    notify::check_unique(&config.notify)?;
    let notifier =
        (!config.notify.is_empty()).then(|| Arc::new(Notifier::new(config.notify.clone())));
    let options = crate::engine::EngineOptions {
        evict_after: config.evict_after,
        retention: config.retention,
        route_filter_max_bytes: config.route_filter_max,
        ..Default::default()
    };
    let (engine, tasks) = Engine::start_notifying(
        contracts.clone(),
        store.clone(),
        metrics.clone(),
        options,
        notifier.clone(),
    )
    .await
    .context("rebuilding state from the store")?;
    let ingest = Arc::new(IngestService::new(
        engine.clone(),
        store.clone(),
        metrics.clone(),
        config.max_concurrent_exports,
        config.stripe_webhook_secret.clone(),
        Dur(config.stripe_tolerance.as_nanos() as i64),
    ));

    // Bind everything before serving anything: a port in use fails the start, not a request.
    let bind = |addr: SocketAddr, what: &'static str| async move {
        TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the {what} listener on {addr}"))
    };
    let grpc_listener = bind(config.grpc_addr, "OTLP gRPC").await?;
    let http_listener = bind(config.http_addr, "OTLP HTTP").await?;
    let api_listener = bind(config.api_addr, "API").await?;
    let (grpc_addr, http_addr, api_addr) = (
        grpc_listener.local_addr()?,
        http_listener.local_addr()?,
        api_listener.local_addr()?,
    );

    let (stop, stopped) = watch::channel(false);
    let until_stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let gate = |listener| Gate::new(access.clone(), metrics.clone(), listener);
    // Each listener's connections, bounded in number and time (`listen`).
    let conn_limits = ConnLimits {
        max_connections: config.max_connections,
        header_read_timeout: config.header_read_timeout,
        idle_timeout: config.idle_timeout,
    };
    check_open_file_limit(config.max_connections);
    let guard = |listener, http1| Guard::new(listener, conn_limits, http1, metrics.clone());
    // Every HTTP request body (OTLP/HTTP, records, webhooks): bounded in size and in time.
    let body = BodyLimits {
        max_bytes: config.max_request_bytes,
        read_timeout: config.body_read_timeout,
    };
    let grpc_routes = grpc::router(ingest.clone(), config.max_request_bytes, gate("otlp_grpc"));
    let grpc_guard = guard("otlp_grpc", false);
    let grpc_tls = tls.as_ref().map(|t| t.grpc.clone());
    let grpc_streams = u32::try_from(config.max_concurrent_streams).unwrap_or(u32::MAX);
    let grpc_keepalive = config.http2_keepalive;
    let grpc_server = tokio::spawn({
        let rx = stopped.clone();
        async move {
            // tonic reads a message before the handler can refuse it, so what one connection
            // may have in flight is bounded by HTTP/2's own SETTINGS_MAX_CONCURRENT_STREAMS:
            // clients queue their further exports instead of being refused. (tonic's
            // `concurrency_limit_per_connection` refused them with RESOURCE_EXHAUSTED and no
            // RetryInfo, which OTLP exporters must not retry: the data was dropped.) Load
            // beyond the process's capacity is refused by the ingest service, retryably.
            let server = tonic::transport::Server::builder()
                // An export is often hundreds of KiB; with HTTP/2's default 64 KiB windows the
                // client stalls for a window update several times per export.
                .initial_stream_window_size(Some(GRPC_STREAM_WINDOW))
                .initial_connection_window_size(Some(GRPC_CONNECTION_WINDOW))
                // Fewer, larger DATA frames per export: less framing work on both ends.
                .max_frame_size(Some(GRPC_MAX_FRAME))
                .max_concurrent_streams(Some(grpc_streams.max(1)))
                // Dead peers (a host gone without a FIN) are found and their places freed.
                .http2_keepalive_interval(Some(grpc_keepalive))
                .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_TIMEOUT))
                .add_routes(grpc_routes);
            match grpc_tls {
                // No Nagle: an export answer is one small frame, and holding it back for the
                // client's delayed ACK cost ~25 ms per 1000-span export (gRPC ran at a tenth
                // of HTTP's rate on the same batches). Both acceptors set it.
                None => {
                    server
                        .serve_with_incoming_shutdown(
                            LimitedListener::new(grpc_listener, grpc_guard).incoming(),
                            until_stopped(rx),
                        )
                        .await
                }
                Some(tls) => {
                    server
                        .serve_with_incoming_shutdown(
                            TlsListener::new(grpc_listener, tls, grpc_guard)?.incoming(),
                            until_stopped(rx),
                        )
                        .await
                }
            }
            .context("OTLP gRPC server")
        }
    });
    let http_router = http::router(ingest.clone(), body, gate("otlp_http"));
    let http_server = tokio::spawn(serve_http(
        http_listener,
        guard("otlp_http", true),
        tls.clone(),
        http_router,
        until_stopped(stopped.clone()),
        "OTLP HTTP server",
    ));
    let delivery = match notifier {
        Some(notifier) => {
            let public_url = config
                .public_url
                .clone()
                .unwrap_or_else(|| default_public_url(api_addr, tls.is_some()));
            Some(notify::deliver::start(
                notifier,
                store.clone(),
                metrics.clone(),
                notify::deliver::Settings::new(public_url),
            )?)
        }
        None => None,
    };
    let api_router = api::router(ApiState {
        engine: engine.clone(),
        ingest,
        store,
        metrics: metrics.clone(),
        body,
        gate: gate("api"),
        instance: crate::cluster::default_instance().into(),
    });
    let api_server = tokio::spawn(serve_http(
        api_listener,
        guard("api", true),
        tls.clone(),
        api_router,
        until_stopped(stopped.clone()),
        "API server",
    ));
    let reloader = reload_on_hangup(
        engine.clone(),
        config.contracts_dir.clone(),
        stopped.clone(),
    )?;
    log_access(&config, &access, tls.is_some());
    tracing::info!(%grpc_addr, %http_addr, %api_addr, tls = tls.is_some(), data_dir = %config.data_dir.display(), "reckon serving");
    Ok(Running {
        grpc_addr,
        http_addr,
        api_addr,
        engine,
        tls: tls.is_some(),
        stop,
        servers: vec![grpc_server, http_server, api_server],
        tasks,
        delivery,
        grace: config.shutdown_grace,
        contracts_dir: config.contracts_dir,
        reloader,
    })
}

/// SIGHUP reloads the contracts (`Engine::reload_contracts`: validated first, a bad edit is
/// logged and changes nothing). Listening from before the service answers `/readyz`, so a
/// SIGHUP sent once it is ready never meets the default action (exit). Stops listening on
/// shutdown; a reload under way stops at its next page (`Engine::stop_reloads`), each page's
/// escalations in the store first.
fn reload_on_hangup(
    engine: Arc<Engine>,
    dir: std::path::PathBuf,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
        Ok(Some(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stopped.wait_for(|s| *s) => return,
                    got = hangup.recv() => if got.is_none() { return },
                }
                tracing::info!(dir = %dir.display(), "SIGHUP: reloading the contracts");
                // Logged and counted inside; the service goes on either way.
                let _ = engine.reload_contracts(&dir).await;
            }
        })))
    }
    #[cfg(not(unix))]
    {
        let _ = (engine, dir, stopped);
        Ok(None)
    }
}

/// Serves an axum router on `tcp` under the listener's connection limits, over TLS when
/// configured, until `stopped`.
async fn serve_http(
    tcp: TcpListener,
    guard: Arc<Guard>,
    tls: Option<Tls>,
    router: axum::Router,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
    what: &'static str,
) -> anyhow::Result<()> {
    // Tells each connection when a request is in flight on it (its idle time is the rest).
    let app = router
        .layer(axum::middleware::from_fn(listen::track))
        .into_make_service_with_connect_info::<listen::Conn>();
    match tls {
        None => {
            axum::serve(LimitedListener::new(tcp, guard), app)
                .with_graceful_shutdown(stopped)
                .await
        }
        Some(tls) => {
            axum::serve(TlsListener::new(tcp, tls.http, guard)?, app)
                .with_graceful_shutdown(stopped)
                .await
        }
    }
    .context(what)
}

/// Raises the open-file limit to what the process may have and warns when it is still below
/// what the listeners may hold at their caps (each connection is a descriptor, a TLS one
/// during its handshake too), plus room for the store's files.
fn check_open_file_limit(max_connections: usize) {
    let need = (3 * max_connections as u64).saturating_add(256);
    match crate::process::raise_open_file_limit() {
        Ok(limit) if limit < need => tracing::warn!(
            limit,
            need,
            "the open-file limit is below 3 x max_connections + 256: at the caps, accepts fail and the store cannot open files (raise `ulimit -n` or lower max_connections)"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("reading the open-file limit: {e}"),
    }
}

/// Says at start-up who may do what, and where tokens or data would cross a network in clear.
/// Never logs a token.
fn log_access(config: &Config, access: &Access, tls: bool) {
    if access.is_open() {
        tracing::warn!("no [[auth.token]] configured: every listener accepts everyone (local development only; see README \"Running on an untrusted network\")");
    } else {
        tracing::info!(
            ingest = access.count(Role::Ingest),
            read = access.count(Role::Read),
            operator = access.count(Role::Operator),
            metrics = if access.metrics_need().is_some() {
                "read"
            } else {
                "open"
            },
            "access: tokens required on every listener (health probes open)"
        );
        if config.stripe_webhook_secret.is_none() {
            tracing::info!(
                "no stripe_webhook_secret: Stripe events need an ingest token like records"
            );
        }
    }
    if !tls {
        let exposed: Vec<String> = [
            ("OTLP gRPC", config.grpc_addr),
            ("OTLP HTTP", config.http_addr),
            ("API", config.api_addr),
        ]
        .iter()
        .filter(|(_, addr)| !addr.ip().is_loopback())
        .map(|(what, addr)| format!("{what} {addr}"))
        .collect();
        if !exposed.is_empty() {
            tracing::warn!(listeners = %exposed.join(", "), "TLS is off on listeners reachable from the network: tokens and evidence cross it in clear (set tls_cert and tls_key)");
        }
    }
}

/// `http(s)://{api_addr}`, with `localhost` for an address that listens everywhere (a link to
/// `0.0.0.0` opens nothing).
fn default_public_url(api_addr: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    if api_addr.ip().is_unspecified() {
        format!("{scheme}://localhost:{}", api_addr.port())
    } else {
        format!("{scheme}://{api_addr}")
    }
}

/// HTTP/2 flow-control windows for OTLP/gRPC: one whole export per stream, several per connection.
const GRPC_STREAM_WINDOW: u32 = 4 << 20;
const GRPC_CONNECTION_WINDOW: u32 = 16 << 20;
const GRPC_MAX_FRAME: u32 = 1 << 20;
/// How long a keep-alive ping may go unanswered before the connection is closed.
const GRPC_KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

impl Running {
    fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }
    pub fn api_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.api_addr)
    }
    pub fn grpc_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.grpc_addr)
    }
    pub fn http_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.http_addr)
    }

    /// Reload the contracts from the configured directory, as SIGHUP does.
    pub async fn reload_contracts(
        &self,
    ) -> Result<crate::engine::Reloaded, crate::engine::ReloadError> {
        self.engine.reload_contracts(&self.contracts_dir).await
    }

    /// Stop accepting, let in-flight requests finish (up to the grace period), then write out
    /// every verdict and escalation concluded so far.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.engine.stop_reloads();
        let mut first_error = None;
        for server in self.servers {
            match tokio::time::timeout(self.grace, server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    first_error.get_or_insert(e);
                }
                Ok(Err(join)) => {
                    first_error.get_or_insert(anyhow::anyhow!("server task failed: {join}"));
                }
                Err(_) => tracing::warn!("a server did not drain within the grace period"),
            }
        }
        if let Some(r) = self.reloader {
            let _ = r.await;
        }
        // Pending notifications stay in the store's outbox for the next start.
        if let Some(d) = self.delivery {
            d.stop().await;
        }
        self.engine.close();
        drop(self.engine);
        self.tasks.finish().await;
        tracing::info!("reckon stopped");
        first_error.map_or(Ok(()), Err)
    }

    /// Serve until SIGINT or SIGTERM, then shut down.
    pub async fn until_signal(self) -> anyhow::Result<()> {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        ctrl_c.await?;
        tracing::info!("signal received; draining");
        self.shutdown().await
    }
}
