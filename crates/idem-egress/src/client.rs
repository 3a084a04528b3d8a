//! The pooled HTTP client of one pinned destination: hyper-util's client over a connector
//! that can reach only the addresses the guard passed.
//!
//! The connector stack, innermost first: hyper-util's TCP connector with a resolver that
//! answers the checked addresses for the checked name and refuses every other name (an IP
//! literal is connected as written, without a resolver); hyper-rustls for `https` (the shared
//! rustls configuration, ALPN `h2` then `http/1.1`); and a timeout around both, so a TCP
//! connect or TLS handshake that never completes is a connect error (nothing sent).
//!
//! What this must never do: resolve a name through the system, or connect to an address the
//! resolver was not given.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The connector of one pinned destination.
pub(crate) type Connector = Timed<hyper_rustls::HttpsConnector<HttpConnector<Pinned>>>;

/// The client of one pinned destination.
pub(crate) type HttpClient = Client<Connector, Full<Bytes>>;

/// hyper's bound on an HTTP/1 connection's read buffer: it reserves at most this much ahead
/// and refuses a response head that fills it; the buffer's capacity, which may double past
/// the reservation, stays below twice this. hyper's default (about 400 KiB) is what a kept
/// connection holds for as long as it is kept once one large answer grew it: with 64 kept
/// connections, 26 MiB. Smaller reads cost a few more system calls per large answer and
/// nothing for small ones.
pub(crate) const HTTP1_MAX_BUF: usize = 64 << 10;

/// Settings of one destination's client.
pub(crate) struct Settings {
    pub tls: rustls::ClientConfig,
    /// The checked name and the addresses it may reach (`None` for an IP literal).
    pub pinned: Option<(String, Vec<SocketAddr>)>,
    pub connect_timeout: Duration,
    pub max_idle_per_host: usize,
    pub idle_timeout: Duration,
}

pub(crate) fn build(s: Settings) -> HttpClient {
    let resolver = match s.pinned {
        Some((name, addrs)) => Pinned {
            name: Some(name.into()),
            addrs: Arc::new(addrs),
        },
        None => Pinned {
            name: None,
            addrs: Arc::new(Vec::new()),
        },
    };
    let mut tcp = HttpConnector::new_with_resolver(resolver);
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    // Split evenly among the addresses a name passed with, so one that drops SYNs leaves
    // time to try the next; the timeout around the whole stack bounds TCP and TLS together.
    tcp.set_connect_timeout(Some(s.connect_timeout));
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(s.tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(tcp);
    let connector = Timed {
        inner: tls,
        limit: s.connect_timeout,
    };
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_max_idle_per_host(s.max_idle_per_host)
        .pool_idle_timeout(s.idle_timeout)
        .http1_max_buf_size(HTTP1_MAX_BUF)
        .build(connector)
}

/// The resolver of a pinned destination: the checked addresses for the checked name, an
/// error for any other name.
#[derive(Clone)]
pub(crate) struct Pinned {
    name: Option<Arc<str>>,
    addrs: Arc<Vec<SocketAddr>>,
}

impl Service<Name> for Pinned {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        std::future::ready(match &self.name {
            Some(n) if n.eq_ignore_ascii_case(name.as_str()) => {
                Ok(Vec::clone(&self.addrs).into_iter())
            }
            _ => Err(std::io::Error::other(
                "not the name the egress check passed",
            )),
        })
    }
}

/// A connector whose connections fail as connect errors past `limit`.
#[derive(Clone)]
pub(crate) struct Timed<C> {
    inner: C,
    limit: Duration,
}

impl<C> Service<Uri> for Timed<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(done) => done.map_err(Into::into),
                Err(_) => Err("the connection did not complete in time".into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> Name {
        n.parse().expect("name")
    }

    #[tokio::test]
    async fn the_resolver_answers_only_the_checked_name_with_only_its_addresses() {
        let a: SocketAddr = "127.0.0.2:8080".parse().expect("addr");
        let mut r = Pinned {
            name: Some("hooks.example.com".into()),
            addrs: Arc::new(vec![a]),
        };
        let got: Vec<SocketAddr> = r
            .call(name("hooks.example.com"))
            .await
            .expect("ok")
            .collect();
        assert_eq!(got, vec![a]);
        let got: Vec<SocketAddr> = r
            .call(name("Hooks.Example.COM"))
            .await
            .expect("ok")
            .collect();
        assert_eq!(got, vec![a], "names compare without case");
        assert!(r.call(name("example.com")).await.is_err());
        assert!(r.call(name("localhost")).await.is_err());
        // An IP literal's client resolves no name at all.
        let mut literal = Pinned {
            name: None,
            addrs: Arc::new(Vec::new()),
        };
        assert!(literal.call(name("localhost")).await.is_err());
    }
}
