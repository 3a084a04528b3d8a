//! Accepting and serving connections, plain HTTP and HTTPS, with the limits that keep one
//! client from starving the others.
//!
//! It owns the accept loop, the per-connection hyper settings and the reading of request
//! bodies. The limits ([`HttpLimits`], `[http]` in the configuration):
//!
//! - **header read timeout**: a request head (request line and headers) must arrive in full
//!   within it, and a keep-alive connection idle for that long is closed (hyper starts the
//!   same timer when it waits for the next head), so a slow-header client is cut off;
//! - **body read timeout**: a request body must arrive in full within it after its head,
//!   else 408 `request_timeout` and the connection is closed: a slow-body client is cut off;
//! - **max header bytes**: a head larger than this is refused with 431 and the connection
//!   closed;
//! - **max connections**: at most this many connections are served at once; further ones
//!   wait in the listen backlog until one ends (file descriptors are the bound, see
//!   `docs/reliability.md`).
//!
//! Every request body is read here, in full and under the body limit, before any handler or
//! middleware runs. An answer given before its request's body was read (a refusal by auth, a
//! bad key in the path, a store outage found by the token check) would otherwise make hyper
//! close a keep-alive connection that the client expects to reuse, and a client cannot tell
//! that close from a crash. With the body read first every answer leaves the connection
//! usable, except the refusals of this module, which say `connection: close`.
//!
//! It must never decide anything about a request beyond its size and timing, and it never
//! logs a request's content.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request};
use axum::response::Response;
use axum::Router;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::error::ApiError;
use crate::tls::HANDSHAKE_TIMEOUT;

/// How a refusal made here, before the router ran, is answered for a request path (the
/// server's choice: the console answers its own pages); this module only adds
/// `connection: close`. A plain function, so this module depends on no part of the app.
pub type Refuse = fn(path: &str, e: ApiError) -> Response;

/// The connection limits (see the module docs). `Debug` shows every value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_read_timeout: Duration::from_secs(20),
            body_read_timeout: Duration::from_secs(30),
            max_header_bytes: 64 * 1024,
            max_connections: 10_000,
        }
    }
}

impl HttpLimits {
    /// The ranges each limit must be in (the configuration's check).
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        let secs = Duration::from_millis(100)..=Duration::from_secs(3600);
        if !secs.contains(&self.header_read_timeout) {
            return Err(("http.header_read_timeout", "must be from 100ms to 1h"));
        }
        if !secs.contains(&self.body_read_timeout) {
            return Err(("http.body_read_timeout", "must be from 100ms to 1h"));
        }
        // hyper's read buffer cannot be smaller than 8 KiB.
        if !(8 * 1024..=1024 * 1024).contains(&self.max_header_bytes) {
            return Err(("http.max_header_bytes", "must be from 8KiB to 1MiB"));
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            return Err(("http.max_connections", "must be from 1 to 1000000"));
        }
        Ok(())
    }
}

/// The hyper connection builders with the limits applied: HTTP/1.1 (plain connections, and
/// TLS ones that did not negotiate `h2`) and HTTP/2 (TLS with ALPN `h2`). The protocol is
/// decided before a byte is read: sniffing a preface would wait without any timeout for a
/// client that says nothing.
struct Builders {
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
}

fn builders(limits: &HttpLimits) -> Builders {
    let mut h1 = http1::Builder::new();
    h1.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    Builders { h1, h2 }
}

/// Serves one connection until it ends or the graceful shutdown has closed it.
async fn serve_one<I, S>(
    io: I,
    service: S,
    builders: &Builders,
    h2: bool,
    watcher: hyper_util::server::graceful::Watcher,
) -> Result<(), hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = Body> + Send + 'static,
    S::Future: Send + 'static,
{
    if h2 {
        watcher
            .watch(builders.h2.serve_connection(io, service))
            .await
    } else {
        watcher
            .watch(builders.h1.serve_connection(io, service))
            .await
    }
}

/// Reads the whole body of `req` (at most `body_limit` bytes, within the body read timeout),
/// then hands the request to `app`. A refusal here closes the connection.
async fn handle(
    app: Router,
    req: Request<Incoming>,
    limits: HttpLimits,
    body_limit: usize,
    refuse: Refuse,
) -> Response {
    let (parts, body) = req.into_parts();
    // The intake's sources set their own body limit (up to the largest a source may have),
    // checked by the intake after the source is found: an unknown source is a 404 and a
    // wrong method a 405 before any size is judged.
    let body_limit = if parts.uri.path().starts_with("/in/") {
        body_limit.max(idem_intake::source::MAX_MAX_BODY_BYTES)
    } else {
        body_limit
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let body = if hyper::body::Body::is_end_stream(&body) {
        Body::empty()
    } else if declared.is_some_and(|n| n > body_limit as u64) {
        return closing(refuse, &parts, ApiError::BodyTooLarge { limit: body_limit });
    } else {
        let read = Limited::new(body, body_limit).collect();
        match tokio::time::timeout(limits.body_read_timeout, read).await {
            Ok(Ok(collected)) => Body::from(collected.to_bytes()),
            Ok(Err(e)) => {
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    return closing(refuse, &parts, ApiError::BodyTooLarge { limit: body_limit });
                }
                // The client went away or sent a broken body: nobody reads an answer.
                return closing(
                    refuse,
                    &parts,
                    ApiError::InvalidJson("the request body could not be read".into()),
                );
            }
            Err(_) => {
                return closing(
                    refuse,
                    &parts,
                    ApiError::RequestTimeout(limits.body_read_timeout),
                )
            }
        }
    };
    match app.oneshot(Request::from_parts(parts, body)).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// A refusal of this module with `connection: close`, answered as `refuse` says for the path.
fn closing(refuse: Refuse, parts: &axum::http::request::Parts, e: ApiError) -> Response {
    let mut resp = refuse(parts.uri.path(), e);
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` resolves, then
/// lets open connections finish their requests.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    limits: HttpLimits,
    body_limit: usize,
    refuse: Refuse,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let builders = Arc::new(builders(&limits));
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let (app, builders, tls) = (app.clone(), builders.clone(), tls.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(handle(app, req, limits, body_limit, refuse).await) }
            });
            let served = match tls {
                None => serve_one(TokioIo::new(tcp), service, &builders, false, watcher).await,
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                    serve_one(TokioIo::new(stream), service, &builders, h2, watcher).await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
