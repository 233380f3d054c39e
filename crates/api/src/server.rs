//! The listening side: a TCP listener on `host:port`, TLS through OpenSSL unless
//! `disable_ssl`, HTTP/1.1 by hyper with a header deadline and size limit (a slow or
//! endless header cannot hold a connection), `root_prefix` stripped before routing, and a
//! graceful stop.

use crate::app::{Api, Peer};
use crate::config::TlsFiles;
use crate::render::error_page;
use crate::Error;
use axum::extract::Request;
use axum::http::{StatusCode, Uri};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use openssl::ssl::{Ssl, SslAcceptor, SslFiletype, SslMethod};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// A client must send its whole request header within this time.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest request header accepted (bigger: 431).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// A TLS handshake must finish within this time.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long open connections get to finish when the API stops.
const DRAIN: Duration = Duration::from_secs(5);

/// An OpenSSL acceptor for the configured certificate and key.
pub fn tls_acceptor(files: &TlsFiles) -> Result<SslAcceptor, Error> {
    let tls = |what: &str, path: &std::path::Path, e: openssl::error::ErrorStack| Error::Tls {
        message: format!("{what} {}: {e}", path.display()),
    };
    let mut b =
        SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).map_err(|e| Error::Tls {
            message: e.to_string(),
        })?;
    b.set_certificate_chain_file(&files.crt)
        .map_err(|e| tls("ssl_crt", &files.crt, e))?;
    b.set_private_key_file(&files.key, SslFiletype::PEM)
        .map_err(|e| tls("ssl_key", &files.key, e))?;
    if let Some(chain) = &files.chain {
        let pem = std::fs::read(chain).map_err(|e| Error::Tls {
            message: format!("ssl_chain {}: {e}", chain.display()),
        })?;
        for cert in
            openssl::x509::X509::stack_from_pem(&pem).map_err(|e| tls("ssl_chain", chain, e))?
        {
            b.add_extra_chain_cert(cert)
                .map_err(|e| tls("ssl_chain", chain, e))?;
        }
    }
    b.check_private_key()
        .map_err(|e| tls("ssl_key", &files.key, e))?;
    Ok(b.build())
}

/// A bound, ready listener.
pub struct Server {
    listener: TcpListener,
    tls: Option<Arc<SslAcceptor>>,
    api: Arc<Api>,
}

impl Server {
    /// Binds `host:port` and loads the TLS files.
    pub async fn bind(api: Arc<Api>) -> Result<Server, Error> {
        let cfg = api.config();
        let tls = match &cfg.tls {
            Some(files) => Some(Arc::new(tls_acceptor(files)?)),
            None => None,
        };
        let host = cfg.host.trim_start_matches('[').trim_end_matches(']');
        let listener = TcpListener::bind((host, cfg.port))
            .await
            .map_err(|e| Error::Bind {
                addr: format!("{}:{}", cfg.host, cfg.port),
                source: e,
            })?;
        Ok(Server { listener, tls, api })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown`, then lets open requests finish for a few seconds.
    pub async fn serve(self, shutdown: CancellationToken) {
        let router = self.api.router();
        let prefix: Arc<str> = Arc::from(self.api.config().root_prefix.as_str());
        let conns = tokio_util::task::TaskTracker::new();
        loop {
            let (tcp, peer) = tokio::select! {
                r = self.listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = shutdown.cancelled() => break,
            };
            let _ = tcp.set_nodelay(true);
            let (router, prefix, tls, stop) = (
                router.clone(),
                prefix.clone(),
                self.tls.clone(),
                shutdown.clone(),
            );
            conns.spawn(async move {
                match tls {
                    None => connection(TokioIo::new(tcp), peer, router, prefix, stop).await,
                    Some(acceptor) => match handshake(&acceptor, tcp).await {
                        Some(stream) => {
                            connection(TokioIo::new(stream), peer, router, prefix, stop).await
                        }
                        None => tracing::debug!("TLS handshake with {peer} failed"),
                    },
                }
            });
        }
        conns.close();
        if tokio::time::timeout(DRAIN, conns.wait()).await.is_err() {
            tracing::warn!("Some HTTP connections were still open at shutdown");
        }
    }
}

/// The server side of a TLS handshake, within [`HANDSHAKE_TIMEOUT`].
async fn handshake(
    acceptor: &SslAcceptor,
    tcp: TcpStream,
) -> Option<tokio_openssl::SslStream<TcpStream>> {
    let ssl = Ssl::new(acceptor.context()).ok()?;
    let mut stream = tokio_openssl::SslStream::new(ssl, tcp).ok()?;
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, Pin::new(&mut stream).accept()).await {
        Ok(Ok(())) => Some(stream),
        _ => None,
    }
}

/// `uri` without `prefix`, or `None` when the path is not below it.
fn strip_prefix(uri: &Uri, prefix: &str) -> Option<Uri> {
    if prefix.is_empty() {
        return Some(uri.clone());
    }
    let rest = uri.path().strip_prefix(prefix)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let path = if rest.is_empty() { "/" } else { rest };
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    pq.parse().ok()
}

/// Serves one connection.
async fn connection<I>(
    io: TokioIo<I>,
    peer: SocketAddr,
    router: Router,
    prefix: Arc<str>,
    stop: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let router = router.clone();
        let prefix = prefix.clone();
        async move {
            let (mut parts, body) = req.into_parts();
            parts.extensions.insert(Peer(peer));
            let Some(uri) = strip_prefix(&parts.uri, &prefix) else {
                let path = parts.uri.path().to_owned();
                return Ok::<_, std::convert::Infallible>(error_page(
                    StatusCode::NOT_FOUND,
                    &format!("The path '{path}' was not found."),
                    None,
                ));
            };
            parts.uri = uri;
            let req = Request::from_parts(parts, axum::body::Body::new(body));
            router.oneshot(req).await
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES);
    // Upgrades: `/ws` takes the connection over after its 101.
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("HTTP connection from {peer} ended: {e}");
            }
        }
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(DRAIN, conn).await;
        }
    }
}
