//! A fault proxy between the executor and the stub downstream, on raw TCP so a fault is what the
//! caller's socket really sees: a response that never comes, a connection reset, a late commit.
//!
//! Each request names its own fault in the `x-demo-fault` header (see [`Fault`]), so scenarios
//! that run at the same time never share a switch. The proxy speaks just enough HTTP/1.1 to find
//! the end of a request (head plus `Content-Length` body), forces `Connection: close` on both legs
//! so one connection carries one exchange, and forwards bytes otherwise unchanged.
//!
//! Once a request is forwarded, the forward runs to completion whatever the caller does: the
//! downstream commits even when the caller has already given up, which is the whole point.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub const FAULT_HEADER: &str = "x-demo-fault";

/// The longest a silent connection is kept open: callers time out long before.
const SILENCE_LIMIT: Duration = Duration::from_secs(60);
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 1024 * 1024;

/// What the proxy does to one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Forward and answer.
    #[default]
    None,
    /// `delay:MS`: forward at once, hold the response back for MS (a slow network).
    Delay(Duration),
    /// `drop`: forward (the downstream commits), then never answer: the caller times out.
    Drop,
    /// `reset`: forward (the downstream commits), then reset the connection.
    Reset,
    /// `hold:MS`: keep the request for MS before forwarding it (it commits late, typically after
    /// the caller's timeout), then answer whoever is still listening.
    Hold(Duration),
    /// `blackhole`: never forward, never answer: the request did not arrive.
    Blackhole,
    /// `unavailable`: answer 503 without forwarding, like a load balancer with no backend: the
    /// request failed before anything could commit.
    Unavailable,
}

impl Fault {
    pub fn parse(s: &str) -> Option<Fault> {
        let s = s.trim();
        let ms = |v: &str| v.parse::<u64>().ok().map(Duration::from_millis);
        Some(match s.split_once(':') {
            Some(("delay", v)) => Fault::Delay(ms(v)?),
            Some(("hold", v)) => Fault::Hold(ms(v)?),
            Some(_) => return None,
            None => match s {
                "" | "none" => Fault::None,
                "drop" => Fault::Drop,
                "reset" => Fault::Reset,
                "blackhole" => Fault::Blackhole,
                "unavailable" => Fault::Unavailable,
                _ => return None,
            },
        })
    }

    /// The header value that asks for this fault.
    pub fn header_value(self) -> String {
        match self {
            Fault::None => "none".into(),
            Fault::Delay(d) => format!("delay:{}", d.as_millis()),
            Fault::Drop => "drop".into(),
            Fault::Reset => "reset".into(),
            Fault::Hold(d) => format!("hold:{}", d.as_millis()),
            Fault::Blackhole => "blackhole".into(),
            Fault::Unavailable => "unavailable".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot bind the fault proxy: {0}")]
    Bind(#[source] std::io::Error),
}

#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

/// The running proxy. Dropping it stops accepting; exchanges in progress run to their end.
pub struct Proxy {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Result<Proxy, ProxyError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::Bind)?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    // Out of descriptors or similar: back off rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                tokio::spawn(async move {
                    if let Err(e) = exchange(client, upstream).await {
                        tracing::debug!("fault proxy exchange ended: {e}");
                    }
                });
            }
        });
        Ok(Proxy { addr, task })
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Request {
    /// The head as forwarded: `x-demo-fault` removed, `Connection: close` forced.
    head: Vec<u8>,
    body: Vec<u8>,
    fault: Fault,
}

async fn read_request(client: &mut TcpStream) -> Result<Request, ExchangeError> {
    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(ExchangeError::Malformed("request head too large"));
        }
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(ExchangeError::Malformed(
                "connection closed before the head ended",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| ExchangeError::Malformed("head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut out = format!("{request_line}\r\n");
    let mut content_length = 0usize;
    let mut fault = Fault::None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(ExchangeError::Malformed("header line without a colon"));
        };
        let lower = name.trim().to_ascii_lowercase();
        match lower.as_str() {
            "content-length" => {
                content_length = value
                    .trim()
                    .parse()
                    .map_err(|_| ExchangeError::Malformed("bad content-length"))?;
            }
            "transfer-encoding" => {
                return Err(ExchangeError::Malformed(
                    "chunked requests are not supported",
                ))
            }
            "connection" | "keep-alive" => continue,
            _ if lower == FAULT_HEADER => {
                // An unknown fault forwards normally: the row that asked for it will fail
                // visibly, which beats a proxy error the scenario cannot explain.
                fault = Fault::parse(value).unwrap_or_default();
                continue;
            }
            _ => {}
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("connection: close\r\n\r\n");
    if content_length > MAX_BODY {
        return Err(ExchangeError::Malformed("body too large"));
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < content_length {
        let mut chunk = vec![0u8; (content_length - body.len()).min(64 * 1024)];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(ExchangeError::Malformed(
                "connection closed inside the body",
            ));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(content_length);
    Ok(Request {
        head: out.into_bytes(),
        body,
        fault,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Sends the request upstream and reads the whole response (the upstream closes after it).
async fn forward(upstream: SocketAddr, req: &Request) -> Result<Vec<u8>, ExchangeError> {
    let mut up = TcpStream::connect(upstream).await?;
    up.write_all(&req.head).await?;
    up.write_all(&req.body).await?;
    let mut resp = Vec::new();
    up.read_to_end(&mut resp).await?;
    Ok(resp)
}

/// Keeps the caller's connection open and silent until the caller gives up.
async fn stay_silent(client: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(SILENCE_LIMIT, async {
        loop {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
}

async fn exchange(mut client: TcpStream, upstream: SocketAddr) -> Result<(), ExchangeError> {
    let req = read_request(&mut client).await?;
    match req.fault {
        Fault::Unavailable => {
            let body = br#"{"error":{"type":"api_error","message":"no healthy upstream"}}"#;
            let head = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            client.write_all(head.as_bytes()).await?;
            client.write_all(body).await?;
            client.shutdown().await?;
        }
        Fault::Blackhole => stay_silent(&mut client).await,
        Fault::Hold(d) => {
            tokio::time::sleep(d).await;
            let resp = forward(upstream, &req).await?;
            // The caller has most likely gone; answer anyway in case it has not.
            let _ = client.write_all(&resp).await;
        }
        Fault::None | Fault::Delay(_) => {
            let resp = forward(upstream, &req).await?;
            if let Fault::Delay(d) = req.fault {
                tokio::time::sleep(d).await;
            }
            client.write_all(&resp).await?;
            client.shutdown().await?;
        }
        Fault::Drop => {
            forward(upstream, &req).await?;
            stay_silent(&mut client).await;
        }
        Fault::Reset => {
            forward(upstream, &req).await?;
            // SO_LINGER 0: closing sends RST instead of FIN, as a crashed middlebox would.
            client.set_zero_linger()?;
            drop(client);
        }
    }
    Ok(())
}
