//! The one outbound HTTP client of idem, behind the egress guard.
//!
//! [`Egress::check`] takes a URL and the namespace's [`EgressPolicy`] and returns a
//! [`Target`] or a [`Forbidden`]: scheme, the allow list (a name is matched before it is
//! resolved), IP literals (IPv4-mapped and other IPv6 forms included) and then every address
//! the name resolves to — resolved once, here, with the system resolver — are checked by the
//! pure rules of [`idem_core::egress`]. [`Egress::send`] then connects to exactly the addresses
//! that passed, through a client whose resolver is pinned to those addresses
//! (`resolve_to_addrs`), built from one shared rustls configuration (web roots plus
//! `--extra-ca`; ALPN offers HTTP/2 and HTTP/1.1), with no proxy from the environment, no
//! redirects, a connect and a whole-attempt timeout, and a cap on the response body.
//!
//! The client is hyper's (hyper-util's pooled client over hyper-rustls), not a higher-level
//! one: it lets the read buffer of a kept HTTP/1 connection be bounded (`client.rs`), and
//! its resolver answers only the checked addresses.
//!
//! Connections are kept: a client, with its pool of keep-alive connections (one multiplexed
//! HTTP/2 connection where the destination offers `h2` over TLS), is kept per pinned
//! destination — scheme, host, port, the sorted set of addresses the check passed — and
//! timeout. A request reuses a connection only when its own check passed exactly that set for
//! that name, so a kept connection only ever goes to an address that passed the guard for the
//! request that uses it: a check that resolves to another set (a changed DNS answer, or a
//! policy that refuses one of the addresses) gets another client, and its connections go to
//! addresses that passed. No system resolver runs when connecting (no second answer: no DNS
//! rebinding): the client's resolver answers the checked name with the checked addresses and
//! refuses any other name. The clients are bounded ([`EgressOptions::pool_max_clients`]:
//! clients idle past the idle timeout are dropped first, then the least recently used), and
//! so are the idle connections of each ([`EgressOptions::pool_max_idle_per_host`],
//! [`EgressOptions::pool_idle_timeout`]). The idle timeout is shorter than the keep-alive
//! timeout of common servers (5 s for Node.js and Apache): a request written onto a connection
//! the server is closing at that moment is a reset after sending — ambiguous, an effect in
//! review — so idem closes an idle connection before such a server does. A kept connection
//! found closed before the request was written is replaced by a new one (nothing was sent).
//!
//! What this crate must never do: connect anywhere the guard did not pass, follow a redirect,
//! read a proxy from the environment, log or return a request header, or read more of a
//! response body than the cap.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_core::effect::{Lost, NotSent};
use idem_core::egress::{check_addr, name_listing, name_may_pass, EgressPolicy, NameListing};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

pub use hyper::header::{HeaderMap, HeaderName, HeaderValue};
pub use hyper::Method;
pub use idem_core::egress::Refusal;

/// Reads `url` as [`Egress::check`] does (its error is the one `check` answers).
pub fn parse(url: &str) -> Result<url::Url, Forbidden> {
    url::Url::parse(url).map_err(|e| Forbidden::Url(format!("is not an absolute URL ({e})")))
}

/// Settings of the client.
#[derive(Debug, Clone)]
pub struct EgressOptions {
    /// Most bytes of a response body kept; the rest is not read.
    pub max_response_bytes: usize,
    /// PEM file of extra CA certificates to trust besides the web roots (tests, private CAs).
    pub extra_ca: Option<std::path::PathBuf>,
    /// Longest wait for the name resolution of [`Egress::check`].
    pub resolve_timeout: Duration,
    /// Most clients kept (one per pinned destination and timeout); beyond it the least
    /// recently used one is dropped, with its connections.
    pub pool_max_clients: usize,
    /// Most idle keep-alive connections kept per client (0: none, a connection per request).
    pub pool_max_idle_per_host: usize,
    /// How long an idle connection is kept.
    pub pool_idle_timeout: Duration,
}

/// Default [`EgressOptions::pool_max_idle_per_host`]: the number of effects one instance runs
/// at once to one destination when its CPU is the bound (64 clients in `idem bench`). With
/// fewer kept than are in flight, every burst closes the connections beyond the bound as they
/// come back and opens them again for the next requests: at 64 clients and 16 kept, two
/// requests in five paid a new TCP connection (and over TLS without HTTP/2, a handshake). An
/// idle HTTP/1 connection keeps the read buffer its largest answer grew, below 128 KiB
/// (`client::HTTP1_MAX_BUF`; hyper's own bound is about 400 KiB), so 64 kept connections hold
/// at most 8 MiB of read buffers per destination. Idle connections still close after
/// [`DEFAULT_POOL_IDLE_TIMEOUT`].
pub const DEFAULT_POOL_MAX_IDLE_PER_HOST: usize = 64;

/// Default [`EgressOptions::pool_idle_timeout`]: under the 5 s keep-alive timeout of Node.js
/// and Apache, so idem closes an idle connection before such a server does.
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

impl Default for EgressOptions {
    fn default() -> Self {
        EgressOptions {
            max_response_bytes: idem_core::effect::DEFAULT_MAX_RESPONSE_BYTES,
            extra_ca: None,
            resolve_timeout: Duration::from_secs(5),
            pool_max_clients: 256,
            pool_max_idle_per_host: DEFAULT_POOL_MAX_IDLE_PER_HOST,
            pool_idle_timeout: DEFAULT_POOL_IDLE_TIMEOUT,
        }
    }
}

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("extra CA file {path}: {message}")]
    ExtraCa { path: String, message: String },
    #[error("TLS configuration: {0}")]
    Tls(String),
}

/// Why a destination is refused (the API answers 422 `destination_forbidden`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Forbidden {
    #[error("{0}")]
    Url(String),
    #[error("{0}")]
    Refused(#[from] Refusal),
}

/// How the host of a checked URL is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reach {
    /// An IP literal that passed.
    Literal,
    /// A name and the addresses it resolved to that passed (never empty).
    Name(Vec<SocketAddr>),
    /// The name did not resolve: nothing can be sent (retryable, not forbidden).
    Unresolvable,
}

/// A URL that passed the guard, with where it may connect.
#[derive(Debug, Clone)]
pub struct Target {
    url: url::Url,
    host: String,
    reach: Reach,
}

impl Target {
    pub fn url(&self) -> &url::Url {
        &self.url
    }
    /// The name did not resolve.
    pub fn unresolvable(&self) -> bool {
        self.reach == Reach::Unresolvable
    }
    /// The addresses a connection may go to (empty for an IP literal: the URL's own).
    pub fn addrs(&self) -> &[SocketAddr] {
        match &self.reach {
            Reach::Name(a) => a,
            _ => &[],
        }
    }
}

/// One outbound request. Its `Debug` shows header names only: values may be credentials.
pub struct Outbound {
    pub method: Method,
    /// Sent, never kept or shown.
    pub headers: HeaderMap,
    pub body: Option<Vec<u8>>,
    /// Connect + send + response, all of it.
    pub timeout: Duration,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("method", &self.method)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("body_bytes", &self.body.as_ref().map(Vec::len))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Every response header (name lowercase, raw value); the caller keeps what it keeps.
    pub headers: Vec<(String, Vec<u8>)>,
    /// At most `max_response_bytes`.
    pub body: Vec<u8>,
    /// The body was longer than the cap, or broke off while it was read.
    pub truncated: bool,
    /// Why the body broke off while it was read (the whole-attempt timeout ran out, or the
    /// connection broke); `None` when it ended or was cut at the cap. A caller for whom the
    /// status alone is not the answer (an MCP server's JSON-RPC response is in the body)
    /// reads this as the request being lost after it left.
    pub broke_off: Option<Lost>,
}

/// How far a request got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Answered(Answer),
    NotSent(NotSent),
    Lost(Lost),
}

/// What a kept client may be reused for: one pinned destination and one timeout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    scheme: String,
    /// The URL's host (a name, or an IP literal as the URL writes it).
    host: String,
    port: u16,
    /// The addresses the check passed, sorted (empty for an IP literal: the URL's own).
    addrs: Vec<SocketAddr>,
    /// The connect timeout belongs to the client: clients differ by it.
    timeout: Duration,
}

impl PoolKey {
    fn of(target: &Target, timeout: Duration) -> PoolKey {
        let mut addrs = target.addrs().to_vec();
        addrs.sort_unstable();
        PoolKey {
            scheme: target.url.scheme().to_owned(),
            host: target.url.host_str().unwrap_or_default().to_owned(),
            port: target.url.port_or_known_default().unwrap_or(0),
            addrs,
            timeout,
        }
    }
}

struct Kept {
    client: client::HttpClient,
    last_used: Instant,
}

/// The kept clients, shared by every clone of one [`Egress`].
struct Pool {
    clients: Mutex<HashMap<PoolKey, Kept>>,
    max_clients: usize,
    max_idle_per_host: usize,
    idle_timeout: Duration,
}

impl Pool {
    fn get(&self, key: &PoolKey) -> Option<client::HttpClient> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let kept = clients.get_mut(key)?;
        kept.last_used = Instant::now();
        Some(kept.client.clone())
    }

    /// Keeps `client` for `key` (or returns the one a concurrent request kept first), after
    /// dropping clients idle past the idle timeout and, at the cap, the least recently used.
    fn keep(&self, key: PoolKey, client: client::HttpClient) -> client::HttpClient {
        let now = Instant::now();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = clients.get_mut(&key) {
            kept.last_used = now;
            return kept.client.clone();
        }
        if self.max_clients == 0 {
            return client;
        }
        clients.retain(|_, k| now.duration_since(k.last_used) <= self.idle_timeout);
        while clients.len() >= self.max_clients {
            let Some(oldest) = clients
                .iter()
                .min_by_key(|(_, k)| k.last_used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            clients.remove(&oldest);
        }
        clients.insert(
            key,
            Kept {
                client: client.clone(),
                last_used: now,
            },
        );
        client
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The client (cheap to clone: the TLS configuration and the kept clients are shared).
#[derive(Clone)]
pub struct Egress {
    tls: Arc<rustls::ClientConfig>,
    max_response_bytes: usize,
    resolve_timeout: Duration,
    /// Kept connections per pinned destination (see the module doc).
    pool: Arc<Pool>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("max_response_bytes", &self.max_response_bytes)
            .field("pool_max_clients", &self.pool.max_clients)
            .finish_non_exhaustive()
    }
}

fn load_extra_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, EgressError> {
    let err = |message: String| EgressError::ExtraCa {
        path: path.display().to_string(),
        message,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("holds no PEM certificate".into()));
    }
    Ok(certs)
}

impl Egress {
    pub fn new(opts: &EgressOptions) -> Result<Egress, EgressError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let mut pinned = Vec::new();
        if let Some(path) = &opts.extra_ca {
            for cert in load_extra_ca(path)? {
                roots.add(cert.clone()).map_err(|e| EgressError::ExtraCa {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
                pinned.push(cert);
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| EgressError::Tls(e.to_string()))?;
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| EgressError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(pinned::Verifier { webpki, pinned }))
            .with_no_client_auth();
        // ALPN (`h2`, then `http/1.1`) is set by the connector of each client.
        tls.alpn_protocols = Vec::new();
        Ok(Egress {
            tls: Arc::new(tls),
            max_response_bytes: opts.max_response_bytes,
            resolve_timeout: opts.resolve_timeout,
            pool: Arc::new(Pool {
                clients: Mutex::new(HashMap::new()),
                max_clients: opts.pool_max_clients,
                max_idle_per_host: opts.pool_max_idle_per_host,
                idle_timeout: opts.pool_idle_timeout,
            }),
        })
    }

    pub fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    /// Checks `url` against `policy`: resolves a name once and keeps the addresses that
    /// passed. A name that does not resolve is not forbidden: the target says
    /// [`Target::unresolvable`] and sending it is "nothing sent".
    pub async fn check(&self, policy: &EgressPolicy, url: &str) -> Result<Target, Forbidden> {
        self.check_url(policy, parse(url)?).await
    }

    /// [`Egress::check`] of a URL already read with [`parse`] (a caller that checks one URL
    /// many times reads it once).
    pub async fn check_url(&self, policy: &EgressPolicy, u: url::Url) -> Result<Target, Forbidden> {
        if !matches!(u.scheme(), "http" | "https") {
            return Err(Forbidden::Url("must be an http:// or https:// URL".into()));
        }
        let port = u
            .port_or_known_default()
            .ok_or_else(|| Forbidden::Url("has no port".into()))?;
        let host = match u.host() {
            None => return Err(Forbidden::Url("has no host".into())),
            Some(url::Host::Ipv4(ip)) => {
                check_addr(policy, IpAddr::V4(ip), port, NameListing::No)?;
                return Ok(Target {
                    url: u,
                    host: String::new(),
                    reach: Reach::Literal,
                });
            }
            Some(url::Host::Ipv6(ip)) => {
                check_addr(policy, IpAddr::V6(ip), port, NameListing::No)?;
                return Ok(Target {
                    url: u,
                    host: String::new(),
                    reach: Reach::Literal,
                });
            }
            Some(url::Host::Domain(d)) => d.to_ascii_lowercase(),
        };
        if !name_may_pass(policy, &host, port) {
            return Err(Forbidden::Refused(Refusal::NotListed));
        }
        let lookup = tokio::net::lookup_host((host.clone(), port));
        let resolved = tokio::time::timeout(self.resolve_timeout, lookup).await;
        let addrs: Vec<SocketAddr> = match resolved {
            Ok(Ok(a)) => a.collect(),
            _ => Vec::new(),
        };
        admit(policy, u, host, port, addrs)
    }

    /// [`Egress::check`] of a name as if it had resolved to `addrs` (tests: the system
    /// resolver's answers cannot be chosen).
    #[cfg(test)]
    fn check_resolved(
        &self,
        policy: &EgressPolicy,
        url: &str,
        addrs: Vec<SocketAddr>,
    ) -> Result<Target, Forbidden> {
        let u = url::Url::parse(url).map_err(|e| Forbidden::Url(e.to_string()))?;
        let port = u
            .port_or_known_default()
            .ok_or_else(|| Forbidden::Url("has no port".into()))?;
        let Some(url::Host::Domain(d)) = u.host() else {
            return Err(Forbidden::Url("not a name".into()));
        };
        let host = d.to_ascii_lowercase();
        if !name_may_pass(policy, &host, port) {
            return Err(Forbidden::Refused(Refusal::NotListed));
        }
        admit(policy, u, host, port, addrs)
    }

    /// The kept client of `target`'s pinned destination, built on first use.
    fn client(&self, target: &Target, timeout: Duration) -> client::HttpClient {
        let key = PoolKey::of(target, timeout);
        if let Some(c) = self.pool.get(&key) {
            return c;
        }
        let built = client::build(client::Settings {
            tls: (*self.tls).clone(),
            pinned: match &target.reach {
                Reach::Name(addrs) => Some((target.host.clone(), addrs.clone())),
                Reach::Literal | Reach::Unresolvable => None,
            },
            connect_timeout: connect_timeout(timeout),
            max_idle_per_host: self.pool.max_idle_per_host,
            idle_timeout: self.pool.idle_timeout,
        });
        self.pool.keep(key, built)
    }

    /// Sends `req` to `target` (exactly the addresses the check passed) and reads at most
    /// `max_response_bytes` of the answer, all within `req.timeout`.
    pub async fn send(&self, target: &Target, req: Outbound) -> Outcome {
        use http_body_util::BodyExt as _;
        use hyper::body::Body as _;
        if target.unresolvable() {
            return Outcome::NotSent(NotSent::Dns);
        }
        let timeout = req.timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let Some(request) = request_of(target, req) else {
            // A checked URL is always a valid request target; if one were not, nothing was sent.
            return Outcome::NotSent(NotSent::Connect);
        };
        let client = self.client(target, timeout);
        let resp = match tokio::time::timeout_at(deadline, client.request(request)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) if e.is_connect() => return Outcome::NotSent(NotSent::Connect),
            Ok(Err(_)) => return Outcome::Lost(Lost::Broken),
            Err(_) => return Outcome::Lost(Lost::Timeout),
        };
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        let mut incoming = resp.into_body();
        // Room for the announced length up front (never more than the cap): the body is not
        // copied from one doubling to the next as it arrives.
        let announced = incoming.size_hint().exact().unwrap_or(0);
        let mut body = Vec::with_capacity(
            usize::try_from(announced)
                .map_or(self.max_response_bytes, |n| n.min(self.max_response_bytes)),
        );
        let mut truncated = false;
        let mut broke_off = None;
        loop {
            match tokio::time::timeout_at(deadline, incoming.frame()).await {
                Ok(Some(Ok(frame))) => {
                    // Trailers are not part of the answer.
                    let Ok(chunk) = frame.into_data() else {
                        continue;
                    };
                    let room = self.max_response_bytes.saturating_sub(body.len());
                    if chunk.len() > room {
                        body.extend_from_slice(&chunk[..room]);
                        truncated = true;
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                // The status came back: the answer stands, its body is incomplete.
                Ok(Some(Err(_))) => {
                    truncated = true;
                    broke_off = Some(Lost::Broken);
                    break;
                }
                Err(_) => {
                    truncated = true;
                    broke_off = Some(Lost::Timeout);
                    break;
                }
            }
        }
        Outcome::Answered(Answer {
            status,
            headers,
            body,
            truncated,
            broke_off,
        })
    }
}

/// The request of `req` to `target`: the URL without userinfo or fragment (the server refuses
/// URLs with userinfo before they get here), idem's `user-agent` and `accept: */*` unless the
/// request sets its own.
fn request_of(
    target: &Target,
    req: Outbound,
) -> Option<hyper::Request<http_body_util::Full<bytes::Bytes>>> {
    use hyper::header::{ACCEPT, USER_AGENT};
    let u = &target.url;
    // `host_str` writes an IPv6 literal in its brackets.
    let mut text = format!("{}://{}", u.scheme(), u.host_str()?);
    if let Some(port) = u.port() {
        text.push_str(&format!(":{port}"));
    }
    text.push_str(&u[url::Position::BeforePath..url::Position::AfterQuery]);
    let uri: hyper::Uri = text.parse().ok()?;
    let mut request = hyper::Request::new(http_body_util::Full::new(bytes::Bytes::from(
        req.body.unwrap_or_default(),
    )));
    *request.method_mut() = req.method;
    *request.uri_mut() = uri;
    let mut headers = req.headers;
    headers
        .entry(USER_AGENT)
        .or_insert(HeaderValue::from_static(concat!(
            "idem/",
            env!("CARGO_PKG_VERSION")
        )));
    headers
        .entry(ACCEPT)
        .or_insert(HeaderValue::from_static("*/*"));
    *request.headers_mut() = headers;
    Some(request)
}

/// The target of the name `host` (one that may pass `policy`) given the addresses it resolved
/// to: the addresses that pass, or the refusal of the first that did not when none does.
fn admit(
    policy: &EgressPolicy,
    u: url::Url,
    host: String,
    port: u16,
    addrs: Vec<SocketAddr>,
) -> Result<Target, Forbidden> {
    if addrs.is_empty() {
        return Ok(Target {
            url: u,
            host,
            reach: Reach::Unresolvable,
        });
    }
    let listing = name_listing(policy, &host, port);
    let mut passed = Vec::new();
    let mut first_refusal = None;
    for a in addrs {
        match check_addr(policy, a.ip(), port, listing) {
            Ok(()) => {
                if !passed.contains(&a) {
                    passed.push(a);
                }
            }
            Err(r) => {
                first_refusal.get_or_insert(r);
            }
        }
    }
    match (passed.is_empty(), first_refusal) {
        (true, Some(r)) => Err(Forbidden::Refused(r)),
        (true, None) => Err(Forbidden::Refused(Refusal::NotListed)),
        (false, _) => Ok(Target {
            url: u,
            host,
            reach: Reach::Name(passed),
        }),
    }
}

/// How long a new connection (TCP, then TLS) may take: a little less than the whole request's
/// `timeout`, so a connection that never completes — a destination that drops SYNs, a TLS
/// peer that never answers the ClientHello — fails as a connect error (nothing was sent:
/// retryable) before the request's own timeout, which means "sent, no answer" (ambiguous),
/// could claim it.
fn connect_timeout(timeout: Duration) -> Duration {
    timeout.saturating_sub((timeout / 10).min(Duration::from_millis(500)))
}

mod client;
mod pinned;

#[cfg(test)]
mod tests;
