//! The HTTP load generator: a lean keep-alive client, so the load rows measure idem and not
//! the client.
//!
//! Each simulated client owns one HTTP/1.1 connection (hyper's connection-level client over a
//! `TcpStream` with `TCP_NODELAY`) and drives it from its own task: the connection future is
//! polled next to the client's work, so a request costs no hop to a connection task and no
//! pool checkout. Request paths and bodies are built once where they can be (the duplicate
//! paths, the claim body), and only what the row checks is read from an answer: the status,
//! and the token of a claim (borrowed from the body, not parsed into a JSON tree).
//!
//! A TLS target (the `direct` row of `effect_tls`) is the same client over one TLS connection
//! (HTTP/1.1) per simulated client: the handshake is paid once per connection, as a kept
//! connection to a payment API would.
//!
//! Semantics kept from the general-purpose client this replaces: every claim's token feeds
//! its complete; a first claim must answer 201, its complete 2xx, a duplicate 200; anything
//! else (and any transport error) is counted as an error. A broken connection is replaced.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures::future::{select, Either};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use crate::load::Measurement;

/// The path prefix of every key route in the bench namespace.
const KEYS: &str = "/v1/namespaces/bench/keys/";
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const CLAIM_BODY: &[u8] = b"{}";

/// Where the server listens.
#[derive(Clone)]
pub struct Target {
    addr: SocketAddr,
    host: HeaderValue,
    /// TLS to `localhost` with this configuration, or plain TCP.
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Target {
    pub fn new(addr: SocketAddr) -> anyhow::Result<Target> {
        Ok(Target {
            addr,
            host: HeaderValue::from_str(&addr.to_string())?,
            tls: None,
        })
    }

    /// `addr` over TLS, the certificate checked for the name `localhost`.
    pub fn tls(
        addr: SocketAddr,
        config: std::sync::Arc<rustls::ClientConfig>,
    ) -> anyhow::Result<Target> {
        Ok(Target {
            addr,
            host: HeaderValue::from_str(&format!("localhost:{}", addr.port()))?,
            tls: Some(tokio_rustls::TlsConnector::from(config)),
        })
    }
}

/// A connection's byte stream: plain TCP or TLS over it.
pub enum Stream {
    Tcp(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => std::pin::Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

type Body = Full<Bytes>;
type Driver = Connection<TokioIo<Stream>, Body>;

/// The sending half of one keep-alive connection. Its [`Driver`] must be polled alongside
/// (see [`on_conn`]) for anything to move.
pub struct Conn {
    sender: SendRequest<Body>,
    host: HeaderValue,
}

/// Opens one connection.
pub async fn connect(target: &Target) -> anyhow::Result<(Conn, Driver)> {
    let tcp = tokio::net::TcpStream::connect(target.addr)
        .await
        .with_context(|| format!("connecting to {}", target.addr))?;
    tcp.set_nodelay(true)?;
    let stream = match &target.tls {
        None => Stream::Tcp(tcp),
        Some(tls) => {
            let name = rustls::pki_types::ServerName::try_from("localhost")?;
            Stream::Tls(Box::new(tls.connect(name, tcp).await?))
        }
    };
    let (sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    Ok((
        Conn {
            sender,
            host: target.host.clone(),
        },
        driver,
    ))
}

/// Runs `work` while polling the connection in the same task. If the connection ends first
/// (the server closed it), `work` still runs to its end: its pending request then fails.
pub async fn on_conn<F: Future>(driver: Driver, work: F) -> F::Output {
    let work = std::pin::pin!(work);
    match select(work, driver).await {
        Either::Left((out, _driver)) => out,
        Either::Right((_closed, work)) => work.await,
    }
}

impl Conn {
    async fn send(
        &mut self,
        method: Method,
        uri: Uri,
        body: Bytes,
    ) -> anyhow::Result<Response<Incoming>> {
        self.sender.ready().await?;
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        let h = req.headers_mut();
        h.insert(HOST, self.host.clone());
        h.insert(CONTENT_TYPE, JSON);
        Ok(self.sender.send_request(req).await?)
    }

    /// POST with a JSON body.
    pub async fn post(&mut self, uri: Uri, body: Bytes) -> anyhow::Result<Response<Incoming>> {
        self.send(Method::POST, uri, body).await
    }

    /// The connection can take no more requests.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}

/// Reads a whole body.
async fn body_bytes(resp: Response<Incoming>) -> anyhow::Result<Bytes> {
    Ok(resp.into_body().collect().await?.to_bytes())
}

/// Reads and drops a body (the connection is reusable only once the body is read).
async fn drain(resp: Response<Incoming>) -> anyhow::Result<()> {
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(())
}

/// The path of a key's route, e.g. `/v1/namespaces/bench/keys/k-1/claim`.
pub fn key_uri(key: &str, verb: &str) -> anyhow::Result<Uri> {
    let mut p = String::with_capacity(KEYS.len() + key.len() + 1 + verb.len());
    p.push_str(KEYS);
    p.push_str(key);
    p.push('/');
    p.push_str(verb);
    Ok(Uri::try_from(p)?)
}

/// The only member of a claim answer the load generator needs.
#[derive(Deserialize)]
struct Claimed<'a> {
    #[serde(borrow)]
    token: Option<Cow<'a, str>>,
}

/// The body of a complete: `{"token": …, "result": {"ok": true}}`.
fn complete_body(token: &str) -> anyhow::Result<Bytes> {
    const HEAD: &[u8] = b"{\"token\":";
    const TAIL: &[u8] = b",\"result\":{\"ok\":true}}";
    let mut b = Vec::with_capacity(HEAD.len() + token.len() + 2 + TAIL.len());
    b.extend_from_slice(HEAD);
    serde_json::to_writer(&mut b, token)?;
    b.extend_from_slice(TAIL);
    Ok(Bytes::from(b))
}

/// Claim (must be acquired: 201) then complete (2xx) of a fresh key, the claim's token
/// feeding the complete.
pub async fn pair(conn: &mut Conn, key: &str) -> anyhow::Result<()> {
    let r = conn
        .post(key_uri(key, "claim")?, Bytes::from_static(CLAIM_BODY))
        .await?;
    let status = r.status();
    let body = body_bytes(r).await?;
    anyhow::ensure!(status == StatusCode::CREATED, "claim answered {status}");
    let claimed: Claimed = serde_json::from_slice(&body).context("claim answer")?;
    let token = claimed.token.context("acquired without token")?;
    let r = conn
        .post(key_uri(key, "complete")?, complete_body(&token)?)
        .await?;
    let status = r.status();
    drain(r).await?;
    anyhow::ensure!(status.is_success(), "complete answered {status}");
    Ok(())
}

/// The body of an effect call: a POST of a small JSON charge to `url`.
pub fn effect_body(url: &str) -> anyhow::Result<Bytes> {
    let v = serde_json::json!({
        "request": {"method": "POST", "url": url, "body": {"amount": 1000, "currency": "eur"}}
    });
    Ok(Bytes::from(serde_json::to_vec(&v)?))
}

/// An effect of a fresh key: must answer 200 with outcome `performed` (the whole answer,
/// stored response included, is read).
pub async fn effect(conn: &mut Conn, key: &str, body: Bytes) -> anyhow::Result<()> {
    const PERFORMED: &[u8] = b"\"outcome\":\"performed\"";
    let r = conn.post(key_uri(key, "effect")?, body).await?;
    let status = r.status();
    let answer = body_bytes(r).await?;
    anyhow::ensure!(status == StatusCode::OK, "effect answered {status}");
    anyhow::ensure!(
        answer.windows(PERFORMED.len()).any(|w| w == PERFORMED),
        "effect not performed"
    );
    Ok(())
}

/// The MCP endpoint of the bench namespace.
pub const MCP_PATH: &str = "/mcp/bench";

/// The bench's action (`PUT /v1/namespaces/bench/actions/bench_charge`): the effect rows'
/// charge as a tool, keyed and identified by `order_id`, delivered by HTTP to `url`.
pub const ACTION: &str = "bench_charge";

/// The action document of [`ACTION`], delivering to `url`.
pub fn action_doc(url: &str) -> serde_json::Value {
    serde_json::json!({
        "title": "Charge an order",
        "description": "Charges an order once (idem bench).",
        "input_schema": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "maxLength": 128},
                "amount": {"type": "integer"}
            },
            "required": ["order_id", "amount"]
        },
        "key": "{order_id}:charge",
        "identity": ["order_id"],
        "deliver": {"http": {
            "method": "POST",
            "url": url,
            "body": {"amount": "{{amount}}", "currency": "eur"}
        }}
    })
}

/// A `tools/call` of [`ACTION`] for `order_id` in MCP's stateless revision (the revision in
/// the request's `_meta`, no session): one JSON-RPC request, as an agent's client sends it.
pub fn action_call_body(order_id: &str) -> anyhow::Result<Bytes> {
    let v = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": ACTION,
            "arguments": {"order_id": order_id, "amount": 1000},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
        }
    });
    Ok(Bytes::from(serde_json::to_vec(&v)?))
}

/// One `tools/call` on the MCP endpoint: must answer HTTP 200 with a tool result (not an
/// error) whose outcome is `want` (`performed` for a first call, `completed` for a repeated
/// identity); the whole answer is read.
pub async fn action_call(conn: &mut Conn, body: Bytes, want: &str) -> anyhow::Result<()> {
    let r = conn.post(Uri::from_static(MCP_PATH), body).await?;
    let status = r.status();
    let answer = body_bytes(r).await?;
    anyhow::ensure!(status == StatusCode::OK, "tools/call answered {status}");
    let outcome = format!("\"outcome\":\"{want}\"");
    anyhow::ensure!(
        answer
            .windows(outcome.len())
            .any(|w| w == outcome.as_bytes()),
        "tools/call did not answer {want}: {}",
        String::from_utf8_lossy(&answer[..answer.len().min(300)])
    );
    Ok(())
}

/// A direct POST to the destination (no idem): must answer 2xx; the body is read.
pub async fn direct(conn: &mut Conn, uri: Uri, body: Bytes) -> anyhow::Result<()> {
    let r = conn.post(uri, body).await?;
    let status = r.status();
    drain(r).await?;
    anyhow::ensure!(status.is_success(), "destination answered {status}");
    Ok(())
}

/// `PATCH path` with a JSON body on a fresh connection; must answer 2xx.
pub async fn patch(target: &Target, path: &str, body: Bytes) -> anyhow::Result<()> {
    once(target, Method::PATCH, path, body).await
}

/// `POST path` with a JSON body on a fresh connection; must answer 2xx.
pub async fn post_path(target: &Target, path: &str, body: Bytes) -> anyhow::Result<()> {
    once(target, Method::POST, path, body).await
}

/// `PUT path` with a JSON body on a fresh connection; must answer 2xx.
pub async fn put(target: &Target, path: &str, body: Bytes) -> anyhow::Result<()> {
    once(target, Method::PUT, path, body).await
}

async fn once(target: &Target, method: Method, path: &str, body: Bytes) -> anyhow::Result<()> {
    let (mut conn, driver) = connect(target).await?;
    let uri = Uri::try_from(path)?;
    on_conn(driver, async {
        let r = conn.send(method.clone(), uri, body).await?;
        let status = r.status();
        drain(r).await?;
        anyhow::ensure!(status.is_success(), "{method} {path} answered {status}");
        Ok(())
    })
    .await
}

/// One webhook delivery to the intake: `POST uri` with the provider's signature headers;
/// must answer 200 with the event's `status` equal to `want` (`accepted`, `duplicate`).
pub async fn intake(
    conn: &mut Conn,
    uri: Uri,
    body: Bytes,
    headers: &[(String, String)],
    want: &str,
) -> anyhow::Result<()> {
    conn.sender.ready().await?;
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = uri;
    let h = req.headers_mut();
    h.insert(HOST, conn.host.clone());
    h.insert(CONTENT_TYPE, JSON);
    for (name, value) in headers {
        h.insert(
            hyper::header::HeaderName::from_bytes(name.as_bytes())?,
            HeaderValue::from_str(value)?,
        );
    }
    let r = conn.sender.send_request(req).await?;
    let status = r.status();
    let answer = body_bytes(r).await?;
    anyhow::ensure!(status == StatusCode::OK, "intake answered {status}");
    let mut pattern = b"\"status\":\"".to_vec();
    pattern.extend_from_slice(want.as_bytes());
    pattern.push(b'"');
    anyhow::ensure!(
        answer
            .windows(pattern.len())
            .any(|w| w == pattern.as_slice()),
        "intake event not {want}: {}",
        // The answer names the event and its status; nothing secret.
        String::from_utf8_lossy(&answer[..answer.len().min(400)])
    );
    Ok(())
}

/// A claim of an already completed key (must be replayed: 200).
pub async fn duplicate(conn: &mut Conn, claim_uri: Uri) -> anyhow::Result<()> {
    let r = conn.post(claim_uri, Bytes::from_static(CLAIM_BODY)).await?;
    let status = r.status();
    drain(r).await?;
    anyhow::ensure!(status == StatusCode::OK, "duplicate answered {status}");
    Ok(())
}

/// `GET path` on a fresh connection; the status (for the readiness probe; gives up after
/// two seconds).
pub async fn get_status(target: &Target, path: &'static str) -> anyhow::Result<StatusCode> {
    tokio::time::timeout(Duration::from_secs(2), get_status_inner(target, path))
        .await
        .context("no answer")?
}

async fn get_status_inner(target: &Target, path: &'static str) -> anyhow::Result<StatusCode> {
    let tcp = tokio::net::TcpStream::connect(target.addr).await?;
    let (mut sender, driver) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(tcp)).await?;
    let work = async {
        let mut req = Request::new(Empty::new());
        *req.uri_mut() = Uri::from_static(path);
        req.headers_mut().insert(HOST, target.host.clone());
        let r = sender.send_request(req).await?;
        let status = r.status();
        let _ = r.into_body().collect().await?;
        anyhow::Ok(status)
    };
    let work = std::pin::pin!(work);
    match select(work, driver).await {
        Either::Left((out, _)) => out,
        Either::Right((_, work)) => work.await,
    }
}

/// How long after the end of a run an operation may still be waiting for its answer.
const GRACE: Duration = Duration::from_secs(30);

/// One simulated client: a connection (replaced when it breaks) on which `op` runs one
/// operation after another until `deadline`, every latency recorded in `m`.
async fn client_loop<Op>(
    target: &Target,
    client: usize,
    deadline: Instant,
    op: &Op,
    m: &mut Measurement,
) where
    Op: ClientOp,
{
    let mut seq = 0u64;
    while Instant::now() < deadline && m.errors <= 1000 {
        let (mut conn, driver) = match connect(target).await {
            Ok(c) => c,
            Err(e) => {
                m.record(Instant::now(), Err(e));
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        on_conn(driver, async {
            while Instant::now() < deadline && m.errors <= 1000 {
                let t = Instant::now();
                let r = op.run(&mut conn, client, seq).await;
                seq += 1;
                let broken = r.is_err() && conn.is_closed();
                m.record(t, r);
                if broken {
                    break;
                }
            }
        })
        .await;
    }
}

/// [`client_loop`] with one timer for the whole run (none per request): an operation still
/// unanswered [`GRACE`] after the deadline counts as an error.
async fn client<Op: ClientOp>(
    target: &Target,
    client: usize,
    deadline: Instant,
    op: &Op,
) -> Measurement {
    let mut m = Measurement::new();
    let run = client_loop(target, client, deadline, op, &mut m);
    let timed_out = tokio::time::timeout_at((deadline + GRACE).into(), run)
        .await
        .is_err();
    if timed_out {
        m.record(
            Instant::now(),
            Err(anyhow::anyhow!(
                "no answer {GRACE:?} after the end of the run"
            )),
        );
    }
    m
}

/// What a client does, once per iteration.
pub trait ClientOp: Send + Sync + 'static {
    fn run(
        &self,
        conn: &mut Conn,
        client: usize,
        seq: u64,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// C clients running `op` for `duration`, as tasks of the runtime this is called from (the
/// `idem` binary's multi-thread runtime: one worker per core). A current-thread runtime per
/// core, or a single one, measured no cheaper per operation on 2 cores.
pub async fn drive<Op: ClientOp>(
    c: usize,
    duration: Duration,
    target: &Target,
    op: Op,
) -> anyhow::Result<Measurement> {
    let op = std::sync::Arc::new(op);
    let target = std::sync::Arc::new(target.clone());
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::with_capacity(c);
    for client in 0..c.max(1) {
        let (op, target) = (op.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            self::client(&target, client, deadline, &*op).await
        }));
    }
    let mut total = Measurement::new();
    for t in tasks {
        total.merge(t.await?);
    }
    total.elapsed = start.elapsed();
    Ok(total)
}

/// Claim + complete of every key, on `conns` connections (each takes every `conns`-th key).
pub async fn pairs(target: &Target, conns: usize, keys: &[String]) -> anyhow::Result<()> {
    let conns = conns.max(1);
    let all = futures::future::try_join_all((0..conns).map(|i| async move {
        let (mut conn, driver) = connect(target).await?;
        on_conn(driver, async {
            for key in keys.iter().skip(i).step_by(conns) {
                pair(&mut conn, key).await?;
            }
            anyhow::Ok(())
        })
        .await
    }));
    tokio::time::timeout(GRACE + Duration::from_millis(10 * keys.len() as u64), all)
        .await
        .context("preparing the keys took too long")??;
    Ok(())
}
