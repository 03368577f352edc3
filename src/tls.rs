//! TLS for every listener (DESIGN.md "Access": `tls_cert`, `tls_key`): rustls with the ring
//! provider, the certificate chain and key read once from PEM files at start-up.
//!
//! One acceptor serves the three listeners. Handshakes run in tasks of their own, bounded in
//! number and time, off the path that hands connections to the servers: a client that opens a
//! connection and never finishes its handshake (or speaks plain HTTP to a TLS port) costs one
//! small task for at most [`HANDSHAKE_TIMEOUT`], and holds up nobody else.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::listen::{Guard, Limited};

/// How long a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once per listener; connections beyond are closed at once.
const MAX_HANDSHAKES: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls_cert is set but tls_key is not: TLS needs both PEM files")]
    KeyMissing,
    #[error("tls_key is set but tls_cert is not: TLS needs both PEM files")]
    CertMissing,
    #[error("{file}: {source}")]
    Read { file: PathBuf, source: io::Error },
    #[error("{file}: not a PEM certificate chain: {message}")]
    Cert { file: PathBuf, message: String },
    #[error("{file}: no certificate in it (expected -----BEGIN CERTIFICATE-----)")]
    NoCert { file: PathBuf },
    #[error("{file}: no PEM private key in it (expected -----BEGIN PRIVATE KEY----- or an RSA or EC key): {message}")]
    Key { file: PathBuf, message: String },
    #[error("{cert} with {key}: {message}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
}

/// The server configurations of one certificate: gRPC speaks HTTP/2 (ALPN `h2`, which gRPC
/// clients require), the HTTP listeners HTTP/1.1 (what they serve).
#[derive(Clone)]
pub struct Tls {
    pub grpc: Arc<ServerConfig>,
    pub http: Arc<ServerConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// TLS from the configured files: `None` when neither is set, an error naming the file when
/// one is missing, unreadable or not what it should be.
pub fn load(cert: Option<&Path>, key: Option<&Path>) -> Result<Option<Tls>, TlsError> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(_), None) => return Err(TlsError::KeyMissing),
        (None, Some(_)) => return Err(TlsError::CertMissing),
        (Some(c), Some(k)) => (c, k),
    };
    let read = |file: &Path| {
        std::fs::read(file).map_err(|source| TlsError::Read {
            file: file.to_path_buf(),
            source,
        })
    };
    let cert_pem = read(cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Cert {
            file: cert.to_path_buf(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCert {
            file: cert.to_path_buf(),
        });
    }
    let key_pem = read(key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Key {
        file: key.to_path_buf(),
        message: e.to_string(),
    })?;
    let pair = |message: String| TlsError::Pair {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        message,
    };
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = |alpn: &[u8]| -> Result<Arc<ServerConfig>, TlsError> {
        let mut c = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| pair(e.to_string()))?
            .with_no_client_auth()
            // Also checks that the key belongs to the certificate.
            .with_single_cert(chain.clone(), private.clone_key())
            .map_err(|e| pair(e.to_string()))?;
        c.alpn_protocols = vec![alpn.to_vec()];
        Ok(Arc::new(c))
    };
    Ok(Some(Tls {
        grpc: config(b"h2")?,
        http: config(b"http/1.1")?,
    }))
}

/// A listener whose connections come out with their TLS handshake done, under the listener's
/// connection limits ([`crate::listen`]: a connection holds its place from its accept, so
/// handshakes count too). Serves axum (as a [`axum::serve::Listener`]) and tonic
/// ([`TlsListener::incoming`]).
pub struct TlsListener {
    ready: mpsc::Receiver<(Limited<TlsStream<TcpStream>>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `tcp`. The acceptor task ends when this listener is dropped (the
    /// server stopped).
    pub fn new(
        tcp: TcpListener,
        config: Arc<ServerConfig>,
        guard: Arc<Guard>,
    ) -> io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(accept_loop(tcp, TlsAcceptor::from(config), guard, tx));
        Ok(TlsListener { ready, local })
    }

    async fn next(&mut self) -> (Limited<TlsStream<TcpStream>>, SocketAddr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor ended only because the listener socket failed for good; stay quiet
            // until the server shuts down.
            None => std::future::pending().await,
        }
    }

    /// The connections as the stream tonic serves.
    pub fn incoming(
        self,
    ) -> impl tokio_stream::Stream<Item = io::Result<Limited<TlsStream<TcpStream>>>> + Send {
        use tokio_stream::StreamExt as _;
        tokio_stream::wrappers::ReceiverStream::new(self.ready).map(|(stream, _)| Ok(stream))
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = Limited<TlsStream<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.next().await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    guard: Arc<Guard>,
    ready: mpsc::Sender<(Limited<TlsStream<TcpStream>>, SocketAddr)>,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        // Accepted with its place among the listener's connections (TCP_NODELAY set).
        let (stream, peer, place) = tokio::select! {
            _ = ready.closed() => return,
            accepted = guard.accept(&tcp) => accepted,
        };
        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "too many TLS handshakes in progress; connection closed");
            continue;
        };
        let acceptor = acceptor.clone();
        let ready = ready.clone();
        let guard = guard.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((guard.wrap(tls, place), peer)).await;
                }
                // Plain HTTP to a TLS port, scanners, expired client trust: the client's
                // problem, seen in its own error.
                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        assert!(load(None, None).unwrap().is_none());
        assert!(matches!(load(Some(&cert), None), Err(TlsError::KeyMissing)));
        assert!(matches!(load(None, Some(&key)), Err(TlsError::CertMissing)));
        let e = load(Some(&cert), Some(&key)).unwrap_err();
        assert!(e.to_string().contains("cert.pem"), "{e}");
        std::fs::write(&cert, "not a certificate\n").unwrap();
        let e = load(Some(&cert), Some(&key)).unwrap_err();
        assert!(matches!(e, TlsError::NoCert { .. }), "{e}");
        assert!(e.to_string().contains("cert.pem"), "{e}");
        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = load(Some(&cert), Some(&key)).unwrap_err();
        assert!(matches!(e, TlsError::Cert { .. }), "{e}");
        assert!(e.to_string().contains("cert.pem"), "{e}");
    }

    #[test]
    fn a_certificate_and_its_key_load_and_a_stranger_key_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, "no key here\n").unwrap();
        let e = load(Some(&cert), Some(&key)).unwrap_err();
        assert!(matches!(e, TlsError::Key { .. }), "{e}");
        assert!(e.to_string().contains("key.pem"), "{e}");
        std::fs::write(&key, other.signing_key.serialize_pem()).unwrap();
        let e = load(Some(&cert), Some(&key)).unwrap_err();
        assert!(matches!(e, TlsError::Pair { .. }), "{e}");
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        let tls = load(Some(&cert), Some(&key)).unwrap().unwrap();
        assert_eq!(tls.grpc.alpn_protocols, vec![b"h2".to_vec()]);
        assert_eq!(tls.http.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
