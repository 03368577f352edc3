//! Limits on the connections of every listener (OTLP gRPC, OTLP HTTP, the API), plain or TLS:
//! how many may be open at once, how long one may take to say what it wants, how long it may
//! sit idle. Without them an idle or trickling client holds a file descriptor for ever, and
//! enough of them starve the process of descriptors: every listener stops answering.
//!
//! - **`max_connections` per listener.** Each accepted connection holds a permit of its
//!   listener's semaphore until it closes. At the cap, the connection idle the longest (no
//!   request in flight) is closed to make room, as nginx reuses idle keep-alive connections; if
//!   none is idle, accepting pauses and new connections wait in the kernel's accept backlog
//!   until one closes. A connection with a request in flight is never closed for room, so an
//!   exporter that is sending keeps working whatever floods the port.
//! - **`header_read_timeout`.** A new connection must send its first request within it (on
//!   HTTP/2, its first bytes, the preface), and on HTTP/1 a request's header must be complete
//!   within it of the request's first byte: a slowloris client sending a byte a second is closed.
//! - **`idle_timeout`.** A connection with no request in flight for this long is closed.
//!
//! hyper has its own `header_read_timeout`, but in hyper 1.x it runs from the moment an HTTP/1
//! connection waits for its next request, so it bounds keep-alive idleness too, HTTP/2 has none,
//! and axum's `serve` exposes neither. So both live in [`Limited`], the one wrapper of every
//! accepted connection's I/O: a read that is waiting past the deadline fails, and the server
//! (hyper under axum and tonic) closes the connection. Whether a request is in flight is told by
//! the servers' services ([`Conn::begin`]: the gRPC export service and an axum middleware), which
//! find the connection's [`Conn`] in the request's extensions (tonic's `connect_info`, axum's
//! `ConnectInfo`).
//!
//! Each limit that acts is counted in `reckon_connection_limits_total{listener, limit}` and
//! logged at most once a minute per listener and limit.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::logging::Throttle;
use crate::metrics::Metrics;

/// The limits of one listener's connections (settings `max_connections`,
/// `header_read_timeout`, `idle_timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

/// How often each limit of a listener is logged, at most.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The limit names, as the metric's `limit` label says them.
pub const MAX_CONNECTIONS: &str = "max_connections";
pub const HEADER_READ_TIMEOUT: &str = "header_read_timeout";
pub const IDLE_TIMEOUT: &str = "idle_timeout";

/// One listener's connections: the permits, the open connections (to find the idlest), the
/// counters.
pub struct Guard {
    listener: &'static str,
    limits: ConnLimits,
    /// HTTP/1: a request's header is timed from its first byte. (On HTTP/2, frames such as
    /// pings and window updates arrive between requests, so only the time with no request in
    /// flight counts.)
    http1: bool,
    permits: Arc<Semaphore>,
    open: Mutex<Vec<Weak<ConnState>>>,
    metrics: Arc<Metrics>,
    log: Throttle,
}

impl Guard {
    pub fn new(
        listener: &'static str,
        limits: ConnLimits,
        http1: bool,
        metrics: Arc<Metrics>,
    ) -> Arc<Guard> {
        Arc::new(Guard {
            listener,
            limits,
            http1,
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            open: Mutex::new(Vec::new()),
            metrics,
            log: Throttle::new(LOG_EVERY),
        })
    }

    /// A limit acted: counted, and logged at most once a minute.
    fn limited(&self, limit: &'static str) {
        self.metrics.connection_limited(self.listener, limit);
        if let Some(held_back) = self.log.admit(limit) {
            let what = match limit {
                MAX_CONNECTIONS => "open connections at max_connections: the idlest is closed, or new ones wait",
                HEADER_READ_TIMEOUT => "a connection did not send its request header within header_read_timeout; closed",
                _ => "a connection idle for idle_timeout closed",
            };
            tracing::warn!(listener = self.listener, limit, held_back, "{what}");
        }
    }

    /// A place for a connection just accepted: at once below the cap; at the cap, after the
    /// connection idle the longest is closed, or (none idle) after one closes by itself.
    pub async fn admit(&self) -> OwnedSemaphorePermit {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return p;
        }
        self.limited(MAX_CONNECTIONS);
        loop {
            self.close_idlest();
            // Again after a while: the one closed may have begun a request meanwhile (then it
            // is spared), or another may have gone idle.
            match tokio::time::timeout(
                Duration::from_millis(250),
                self.permits.clone().acquire_owned(),
            )
            .await
            {
                Ok(Ok(p)) => return p,
                // The semaphore is never closed.
                Ok(Err(_)) => std::future::pending::<()>().await,
                Err(_) => {}
            }
        }
    }

    fn close_idlest(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|w| w.strong_count() > 0);
        let idlest = open
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|c| {
                let since = c.phase().idle_since()?;
                (!c.evicted.load(Ordering::Relaxed)).then_some((since, c))
            })
            .min_by_key(|(since, _)| *since);
        if let Some((_, c)) = idlest {
            c.evicted.store(true, Ordering::Relaxed);
            c.wake();
        }
    }

    /// `io` with its place, under this listener's timeouts.
    pub fn wrap<T>(self: &Arc<Self>, io: T, permit: OwnedSemaphorePermit) -> Limited<T> {
        let state = Arc::new(ConnState {
            phase: Mutex::new(Phase {
                in_flight: 0,
                idle_since: Instant::now(),
                served: false,
                first_byte: None,
                any_byte: false,
            }),
            evicted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            // Swept of closed connections now and then, so the list stays about the open ones.
            if open.len() >= 2 * self.limits.max_connections.max(16) {
                open.retain(|w| w.strong_count() > 0);
            }
            open.push(Arc::downgrade(&state));
        }
        self.metrics.connections_open(self.listener, 1);
        Limited {
            io,
            conn: Conn(state),
            guard: self.clone(),
            _permit: permit,
            sleep: None,
            armed: None,
        }
    }

    /// Accepts on `tcp` until a place is free for the connection (see [`Guard::admit`]).
    /// Accept errors (out of descriptors and the like) back off as axum's own loop does.
    pub async fn accept(&self, tcp: &TcpListener) -> (TcpStream, SocketAddr, OwnedSemaphorePermit) {
        loop {
            match tcp.accept().await {
                Ok((stream, peer)) => {
                    // Answers go out at once (see `app`).
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!("TCP_NODELAY: {e}");
                    }
                    let permit = self.admit().await;
                    return (stream, peer, permit);
                }
                Err(e) => {
                    tracing::warn!(listener = self.listener, "accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

struct Phase {
    /// Requests whose answer is not made yet.
    in_flight: usize,
    /// When the last request was answered (or the connection opened).
    idle_since: Instant,
    /// Whether a request was ever answered on it.
    served: bool,
    /// HTTP/1: when the first byte of the next request came.
    first_byte: Option<Instant>,
    /// Whether any byte ever came (an HTTP/2 client's preface).
    any_byte: bool,
}

impl Phase {
    fn idle_since(&self) -> Option<Instant> {
        (self.in_flight == 0).then_some(self.idle_since)
    }
}

struct ConnState {
    phase: Mutex<Phase>,
    /// Closed to make room for a new connection.
    evicted: AtomicBool,
    /// The reader to wake when the deadline changes or the connection is to close.
    waker: Mutex<Option<Waker>>,
}

impl ConnState {
    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        if let Some(w) = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w.wake();
        }
    }
}

/// One connection, as the requests on it see it (in their extensions).
#[derive(Clone)]
pub struct Conn(Arc<ConnState>);

impl Conn {
    /// A request began; the connection is not idle until the returned guard is dropped (its
    /// answer made).
    pub fn begin(&self) -> Busy {
        {
            let mut p = self.0.phase();
            p.in_flight += 1;
            p.first_byte = None;
        }
        Busy(self.0.clone())
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Conn")
    }
}

/// A request in flight on a connection (see [`Conn::begin`]).
pub struct Busy(Arc<ConnState>);

impl Drop for Busy {
    fn drop(&mut self) {
        let idle = {
            let mut p = self.0.phase();
            p.in_flight = p.in_flight.saturating_sub(1);
            if p.in_flight == 0 {
                p.idle_since = Instant::now();
                p.served = true;
                p.first_byte = None;
            }
            p.in_flight == 0
        };
        if idle {
            // The reader re-arms its deadline.
            self.0.wake();
        }
    }
}

/// An accepted connection's I/O under its listener's limits; holds its place until dropped.
pub struct Limited<T> {
    io: T,
    conn: Conn,
    guard: Arc<Guard>,
    _permit: OwnedSemaphorePermit,
    sleep: Option<Pin<Box<Sleep>>>,
    /// The deadline `sleep` is set to.
    armed: Option<Instant>,
}

impl<T> Limited<T> {
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// When the connection is closed unless a request begins, and which limit that is.
    fn deadline(&self) -> Option<(Instant, &'static str)> {
        let limits = &self.guard.limits;
        let p = self.conn.0.phase();
        if p.in_flight > 0 {
            return None;
        }
        if let Some(first) = p.first_byte {
            return Some((first + limits.header_read_timeout, HEADER_READ_TIMEOUT));
        }
        if p.served || (!self.guard.http1 && p.any_byte) {
            Some((p.idle_since + limits.idle_timeout, IDLE_TIMEOUT))
        } else {
            Some((
                p.idle_since + limits.header_read_timeout,
                HEADER_READ_TIMEOUT,
            ))
        }
    }

    fn closed(&self, limit: &'static str) -> io::Error {
        self.guard.limited(limit);
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connection closed by reckon's {limit}"),
        )
    }
}

impl<T> Drop for Limited<T> {
    fn drop(&mut self) {
        self.guard.metrics.connections_open(self.guard.listener, -1);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Limited<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.conn.0.evicted.load(Ordering::Relaxed) {
            if this.conn.0.phase().in_flight == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "idle connection closed to make room (max_connections)",
                )));
            }
            // A request began since it was chosen: spared.
            this.conn.0.evicted.store(false, Ordering::Relaxed);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let mut p = this.conn.0.phase();
                    p.any_byte = true;
                    if this.guard.http1 && p.in_flight == 0 && p.first_byte.is_none() {
                        p.first_byte = Some(Instant::now());
                    }
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        // Waiting for bytes: wake when the deadline passes, a request ends or room is needed.
        {
            let mut w = this.conn.0.waker.lock().unwrap_or_else(|e| e.into_inner());
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        let Some((deadline, limit)) = this.deadline() else {
            this.armed = None;
            return Poll::Pending;
        };
        if this.armed != Some(deadline) {
            match &mut this.sleep {
                Some(s) => s.as_mut().reset(deadline),
                None => this.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            this.armed = Some(deadline);
        }
        if let Some(s) = &mut this.sleep {
            if s.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(this.closed(limit)));
            }
        }
        Poll::Pending
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Limited<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A plain TCP listener under a [`Guard`], as axum serves it.
pub struct LimitedListener {
    tcp: TcpListener,
    guard: Arc<Guard>,
}

impl LimitedListener {
    pub fn new(tcp: TcpListener, guard: Arc<Guard>) -> LimitedListener {
        LimitedListener { tcp, guard }
    }

    /// The connections as the stream tonic serves (accepted by a task of their own, which ends
    /// when the stream is dropped).
    pub fn incoming(
        self,
    ) -> impl tokio_stream::Stream<Item = io::Result<Limited<TcpStream>>> + Send {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let (stream, _, permit) = tokio::select! {
                    _ = tx.closed() => return,
                    accepted = self.guard.accept(&self.tcp) => accepted,
                };
                if tx.send(Ok(self.guard.wrap(stream, permit))).await.is_err() {
                    return;
                }
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

impl axum::serve::Listener for LimitedListener {
    type Io = Limited<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, peer, permit) = self.guard.accept(&self.tcp).await;
        (self.guard.wrap(stream, permit), peer)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// axum finds the connection in each request's extensions as its `ConnectInfo`.
impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, LimitedListener>>
    for Conn
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, LimitedListener>) -> Conn {
        stream.io().conn().clone()
    }
}

impl
    axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, crate::tls::TlsListener>>
    for Conn
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, crate::tls::TlsListener>) -> Conn {
        stream.io().conn().clone()
    }
}

/// tonic finds the connection in each request's extensions as its connect info.
impl<T> tonic::transport::server::Connected for Limited<T> {
    type ConnectInfo = Conn;

    fn connect_info(&self) -> Conn {
        self.conn.clone()
    }
}

/// The axum middleware that tells a connection when a request is in flight on it: until its
/// answer is made and its body dropped (a body refused before it was read is read to its end
/// behind the answer, `ingest::body::discard_later`: that is not a slow next header).
pub async fn track(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use http_body_util::BodyExt as _;
    let Some(conn) = req
        .extensions()
        .get::<axum::extract::ConnectInfo<Conn>>()
        .map(|c| c.0.clone())
    else {
        return next.run(req).await;
    };
    let answering = conn.begin();
    let reading = conn.begin();
    let req = req.map(|body| {
        axum::body::Body::new(body.map_frame(move |frame| {
            let _held = &reading;
            frame
        }))
    });
    let response = next.run(req).await;
    drop(answering);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn limits(max_connections: usize) -> ConnLimits {
        ConnLimits {
            max_connections,
            header_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
        }
    }

    /// A loopback connection: the server's end, wrapped by `guard`, and the client's.
    async fn connect(tcp: &TcpListener, guard: &Arc<Guard>) -> (Limited<TcpStream>, TcpStream) {
        let client = TcpStream::connect(tcp.local_addr().unwrap()).await.unwrap();
        let (server, _, place) = guard.accept(tcp).await;
        (guard.wrap(server, place), client)
    }

    /// Reads the server's end until it fails (closed by a limit) or the client hangs up.
    fn serve(mut conn: Limited<TcpStream>) -> tokio::task::JoinHandle<io::Result<()>> {
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            loop {
                if conn.read(&mut buf).await? == 0 {
                    return Ok(());
                }
            }
        })
    }

    /// At the cap, a connection with a request in flight is never closed for room: the new
    /// connection waits; once the request is answered, the now idle connection makes room.
    #[tokio::test]
    async fn at_the_cap_the_idle_make_room_and_the_busy_are_spared() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let guard = Guard::new("test", limits(1), true, Arc::new(Metrics::new()));
        let (busy_conn, _busy_client) = connect(&tcp, &guard).await;
        let request = busy_conn.conn().begin();
        let busy_reader = serve(busy_conn);

        let _waiting = TcpStream::connect(tcp.local_addr().unwrap()).await.unwrap();
        let admitting = {
            let guard = guard.clone();
            tokio::spawn(async move {
                let (stream, _, place) = guard.accept(&tcp).await;
                guard.wrap(stream, place)
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !admitting.is_finished(),
            "no room taken from a busy connection"
        );
        assert!(!busy_reader.is_finished(), "the busy connection is kept");

        drop(request);
        let closed = tokio::time::timeout(Duration::from_secs(5), busy_reader)
            .await
            .expect("the idle connection is closed for room")
            .unwrap();
        assert_eq!(
            closed.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionAborted)
        );
        tokio::time::timeout(Duration::from_secs(5), admitting)
            .await
            .expect("the new connection gets its place")
            .unwrap();
    }

    /// HTTP/1: a request's header is timed from its first byte; waiting for the next request
    /// after an answer is idle time, not header time.
    #[tokio::test]
    async fn a_served_connection_waits_the_idle_timeout_and_a_started_header_the_header_timeout() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let limits = ConnLimits {
            max_connections: 4,
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(30),
        };
        let guard = Guard::new("test", limits, true, Arc::new(Metrics::new()));
        let (conn, mut client) = connect(&tcp, &guard).await;
        drop(conn.conn().begin());
        let reader = serve(conn);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!reader.is_finished(), "idle, not a slow header");
        tokio::io::AsyncWriteExt::write_all(&mut client, b"G")
            .await
            .unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("closed at the header timeout")
            .unwrap();
        assert_eq!(closed.map_err(|e| e.kind()), Err(io::ErrorKind::TimedOut));
    }
}
