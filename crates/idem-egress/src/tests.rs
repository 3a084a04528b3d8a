use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::routing::any;
use axum::Router;
use idem_core::egress::{AddrClass, AllowEntry};

use super::*;

/// A policy opening the `allow` entries (and the private ranges with `private`).
fn policy(allow: &[&str], private: bool) -> EgressPolicy {
    let entries = allow.iter().map(|a| AllowEntry::parse(a).expect("entry"));
    EgressPolicy {
        allow: entries.collect(),
        allow_private: private,
    }
}

fn egress(max: usize) -> Egress {
    Egress::new(&EgressOptions {
        max_response_bytes: max,
        resolve_timeout: Duration::from_secs(3),
        ..Default::default()
    })
    .expect("client")
}

/// A loopback destination: counts requests; `/redirect` answers 302, `/big` 10 KiB,
/// `/hang` never answers.
async fn destination() -> (u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = Router::new()
        .route(
            "/redirect",
            any(|| async { (axum::http::StatusCode::FOUND, [("location", "/ok")], "") }),
        )
        .route("/big", any(|| async { "x".repeat(10 * 1024) }))
        .route(
            "/hang",
            any(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late"
            }),
        )
        .fallback(any(|| async { "ok" }))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let h = h.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    next.run(req).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (port, hits)
}

fn get(timeout_ms: u64) -> Outbound {
    Outbound {
        method: Method::POST,
        headers: HeaderMap::new(),
        body: Some(b"{}".to_vec()),
        timeout: Duration::from_millis(timeout_ms),
    }
}

#[tokio::test]
async fn ip_literals_are_checked_before_anything_is_sent() {
    let e = egress(1024);
    let none = EgressPolicy::default();
    for url in [
        "http://127.0.0.1:9/x",
        "http://[::1]:9/",
        "http://[::ffff:127.0.0.1]:9/",
        "http://[::ffff:7f00:1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://10.0.0.1/",
        "http://192.168.1.1/",
        "http://0.0.0.0:80/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://127.1/",
        "http://[fd00::1]/",
        "http://100.64.1.1/",
    ] {
        let r = e.check(&none, url).await;
        assert!(matches!(r, Err(Forbidden::Refused(_))), "{url}: {r:?}");
    }
    let r = e.check(&none, "http://169.254.169.254/").await;
    assert_eq!(
        r.map(|_| ()),
        Err(Forbidden::Refused(Refusal::Address(AddrClass::LinkLocal)))
    );
    for url in [
        "ftp://example.com/",
        "file:///etc/passwd",
        "nope",
        "http://",
    ] {
        assert!(
            matches!(e.check(&none, url).await, Err(Forbidden::Url(_))),
            "{url}"
        );
    }
    // Listed, the same address passes on that port only.
    let listed = policy(&["127.0.0.1:9"], false);
    assert!(e.check(&listed, "http://127.0.0.1:9/").await.is_ok());
    assert!(e.check(&listed, "http://127.0.0.1:10/").await.is_err());
    assert!(e
        .check(&listed, "http://[::ffff:127.0.0.1]:9/")
        .await
        .is_ok());
    // A public literal passes by default but not past a non-empty allow list.
    assert!(e.check(&none, "http://8.8.8.8/").await.is_ok());
    assert_eq!(
        e.check(&listed, "http://8.8.8.8/").await.map(|_| ()),
        Err(Forbidden::Refused(Refusal::NotListed))
    );
    let private = policy(&[], true);
    assert!(e.check(&private, "http://10.0.0.1/").await.is_ok());
    assert!(e.check(&private, "http://127.0.0.1/").await.is_err());
    assert!(e.check(&private, "http://169.254.169.254/").await.is_err());
}

#[tokio::test]
async fn names_are_matched_before_resolution_and_their_addresses_after() {
    let e = egress(1024);
    // localhost resolves to loopback: refused unless the name or the address is listed.
    let r = e
        .check(&EgressPolicy::default(), "http://localhost:9/")
        .await;
    assert!(
        matches!(
            r,
            Err(Forbidden::Refused(Refusal::Address(AddrClass::Loopback)))
        ),
        "{r:?}"
    );
    let by_name = policy(&["localhost:9"], false);
    let t = e
        .check(&by_name, "http://LOCALHOST:9/")
        .await
        .expect("listed");
    assert!(!t.addrs().is_empty());
    assert!(t.addrs().iter().all(|a| a.ip().is_loopback()));
    // A pattern never opens loopback (where the resolver answers for names below localhost;
    // where it does not, nothing can be sent either).
    let pattern = policy(&["*.localhost"], false);
    match e.check(&pattern, "http://a.localhost:9/").await {
        Err(f) => assert_eq!(f, Forbidden::Refused(Refusal::Address(AddrClass::Loopback))),
        Ok(t) => assert!(t.unresolvable(), "{t:?}"),
    }
    // Not listed: refused before any lookup.
    let other = policy(&["api.example.com"], false);
    assert_eq!(
        e.check(&other, "http://evil.example.org/")
            .await
            .map(|_| ()),
        Err(Forbidden::Refused(Refusal::NotListed))
    );
}

#[tokio::test]
async fn an_unlisted_name_is_refused_even_when_an_address_entry_exists() {
    let e = egress(1024);
    // An address entry lists addresses, not names: an unlisted name is refused by name,
    // before any lookup, whether it would resolve (localhost) or not.
    let by_addr = policy(&["127.0.0.1:9", "10.0.0.0/8"], false);
    for url in [
        "https://api.stripe.com/",
        "http://no-such-host.invalid/",
        "http://localhost:9/",
    ] {
        assert_eq!(
            e.check(&by_addr, url).await.map(|_| ()),
            Err(Forbidden::Refused(Refusal::NotListed)),
            "{url}"
        );
    }
    // A listed pattern whose addresses an address entry lists passes.
    let both = policy(&["127.0.0.1:9", "*.localhost"], false);
    match e.check(&both, "http://a.localhost:9/").await {
        Ok(t) => assert!(t.unresolvable() || t.addrs().iter().all(|a| a.ip().is_loopback())),
        Err(f) => panic!("listed name and address: {f:?}"),
    }
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_not_forbidden_but_nothing_is_sent() {
    let e = egress(1024);
    let t = e
        .check(&EgressPolicy::default(), "http://no-such-host.invalid/x")
        .await
        .expect("not forbidden");
    assert!(t.unresolvable());
    assert_eq!(e.send(&t, get(1000)).await, Outcome::NotSent(NotSent::Dns));
}

#[tokio::test]
async fn sends_to_the_checked_address_never_follows_redirects_and_caps_bodies() {
    let (port, hits) = destination().await;
    let e = egress(1024);
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/redirect")).await;
    match e.send(&t, get(5000)).await {
        Outcome::Answered(a) => {
            assert_eq!(a.status, 302);
            assert!(a
                .headers
                .iter()
                .any(|(n, v)| n == "location" && v == b"/ok"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the redirect was not followed"
    );
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/big")).await;
    match e.send(&t, get(5000)).await {
        Outcome::Answered(a) => {
            assert_eq!(a.body.len(), 1024);
            assert!(a.truncated);
        }
        other => panic!("{other:?}"),
    }
    // A name listed exactly connects to its checked loopback address.
    let by_name = policy(&[&format!("localhost:{port}")], false);
    let t = e
        .check(&by_name, &format!("http://localhost:{port}/ok"))
        .await
        .expect("allowed");
    match e.send(&t, get(5000)).await {
        Outcome::Answered(a) => {
            assert_eq!(
                (a.status, a.body.as_slice(), a.truncated),
                (200, &b"ok"[..], false)
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_hanging_destination_is_a_timeout_after_sending_and_a_closed_port_is_not_sent() {
    let (port, hits) = destination().await;
    let e = egress(1024);
    let p = policy(&["127.0.0.1"], false);
    let t = e
        .check(&p, &format!("http://127.0.0.1:{port}/hang"))
        .await
        .expect("allowed");
    assert_eq!(e.send(&t, get(300)).await, Outcome::Lost(Lost::Timeout));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // A port nobody listens on: refused before anything was written.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let t = e
        .check(&p, &format!("http://127.0.0.1:{closed}/"))
        .await
        .expect("allowed");
    assert_eq!(
        e.send(&t, get(2000)).await,
        Outcome::NotSent(NotSent::Connect)
    );
}

#[tokio::test]
async fn a_connection_that_never_completes_is_nothing_sent_not_a_timeout() {
    // A TLS peer that accepts the TCP connection and never answers the ClientHello: the
    // request never left, so the attempt is retryable, not "sent, no answer".
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = l.accept().await {
            held.push(sock);
        }
    });
    let e = egress(1024);
    let t = allowed(&e, &format!("https://127.0.0.1:{port}/charge")).await;
    assert_eq!(
        e.send(&t, get(600)).await,
        Outcome::NotSent(NotSent::Connect)
    );
    assert!(connect_timeout(Duration::from_millis(600)) < Duration::from_millis(600));
    assert_eq!(
        connect_timeout(Duration::from_secs(30)),
        Duration::from_millis(29_500)
    );
}

/// A raw loopback server that answers the status and part of a 100-byte body, then either
/// stalls (`stall`) or closes the connection.
async fn part_of_a_body(stall: bool) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
                    .await;
                let _ = sock.flush().await;
                if stall {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_body_that_breaks_off_after_the_status_says_why() {
    let e = egress(1024);
    let p = policy(&["127.0.0.1"], false);
    for (stall, why) in [(true, Lost::Timeout), (false, Lost::Broken)] {
        let port = part_of_a_body(stall).await;
        let t = e
            .check(&p, &format!("http://127.0.0.1:{port}/"))
            .await
            .expect("allowed");
        match e.send(&t, get(500)).await {
            Outcome::Answered(a) => {
                assert_eq!(a.status, 200);
                assert_eq!(a.body, b"partial");
                assert!(a.truncated);
                assert_eq!(a.broke_off, Some(why), "stall: {stall}");
            }
            other => panic!("stall {stall}: {other:?}"),
        }
    }
    // A body that ends, and one cut at the cap, did not break off.
    let (port, _) = destination().await;
    for (path, truncated) in [("ok", false), ("big", true)] {
        let t = e
            .check(&p, &format!("http://127.0.0.1:{port}/{path}"))
            .await
            .expect("allowed");
        match e.send(&t, get(5000)).await {
            Outcome::Answered(a) => {
                assert_eq!((a.truncated, a.broke_off), (truncated, None), "{path}")
            }
            other => panic!("{path}: {other:?}"),
        }
    }
}

#[test]
fn a_bad_extra_ca_file_is_refused_naming_it() {
    let dir = std::env::temp_dir().join(format!("idem-egress-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let f = dir.join("empty.pem");
    std::fs::write(&f, "not a certificate").expect("write");
    let e = Egress::new(&EgressOptions {
        extra_ca: Some(f.clone()),
        ..Default::default()
    });
    assert!(
        matches!(&e, Err(EgressError::ExtraCa { path, .. }) if path.contains("empty.pem")),
        "{e:?}"
    );
    let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    std::fs::write(&f, ca.cert.pem()).expect("write");
    assert!(Egress::new(&EgressOptions {
        extra_ca: Some(f),
        ..Default::default()
    })
    .is_ok());
}

#[test]
fn debug_never_shows_a_header_value() {
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::from_static("Bearer sk_live_x1"),
    );
    let o = Outbound {
        method: Method::POST,
        headers,
        body: Some(b"secret body".to_vec()),
        timeout: Duration::from_secs(1),
    };
    let shown = format!("{o:?}");
    assert!(shown.contains("authorization"), "{shown}");
    assert!(
        !shown.contains("sk_live_x1") && !shown.contains("secret body"),
        "{shown}"
    );
}

/// An HTTPS destination on 127.0.0.1 with a certificate for `localhost` from a fresh CA;
/// returns (port, CA file, requests answered).
async fn https_destination() -> (u16, std::path::PathBuf, Arc<AtomicUsize>) {
    let (acceptor, ca_file) = tls_acceptor(&[], "https");
    let (port, n) = https_destination_with(acceptor).await;
    (port, ca_file, n)
}

/// [`https_destination`] behind `acceptor`.
async fn https_destination_with(acceptor: tokio_rustls::TlsAcceptor) -> (u16, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let n = Arc::new(AtomicUsize::new(0));
    let count = n.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => got.extend_from_slice(&buf[..k]),
                    }
                }
                count.fetch_add(1, Ordering::SeqCst);
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, n)
}

/// A self-signed certificate for `localhost` that marks itself a CA (as `openssl req -x509`
/// writes one), served as is; returns the acceptor and the certificate's PEM file.
fn self_signed_ca_acceptor(tag: &str) -> (tokio_rustls::TlsAcceptor, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    let server = server_config(&cert, &key, &[]);
    (server, pem_file(tag, "cert.pem", &cert.pem()))
}

/// A TLS acceptor serving `cert` (signed for `key`) offering `alpn`.
fn server_config(
    cert: &rcgen::Certificate,
    key: &rcgen::KeyPair,
    alpn: &[&[u8]],
) -> tokio_rustls::TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
        )
        .expect("server config");
    server.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsAcceptor::from(Arc::new(server))
}

/// `pem` written to `name` in a directory of this test process named by `tag`.
fn pem_file(tag: &str, name: &str, pem: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("idem-egress-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join(name);
    std::fs::write(&file, pem).expect("write");
    file
}

#[tokio::test]
async fn a_self_signed_certificate_marked_ca_is_trusted_as_pinned_for_its_names_only() {
    let (acceptor, file) = self_signed_ca_acceptor("pinned");
    let (port, n) = https_destination_with(acceptor).await;
    let trusting = trusting_client(file);
    let p = policy(
        &[&format!("localhost:{port}"), &format!("127.0.0.1:{port}")],
        false,
    );
    let t = trusting
        .check(&p, &format!("https://localhost:{port}/charge"))
        .await
        .expect("allowed");
    match trusting.send(&t, get(5000)).await {
        Outcome::Answered(a) => assert_eq!((a.status, a.body.as_slice()), (201, &b"ok"[..])),
        other => panic!("{other:?}"),
    }
    assert_eq!(n.load(Ordering::SeqCst), 1);
    // Another name than the certificate's: refused before a byte of the request leaves.
    let t = trusting
        .check(&p, &format!("https://127.0.0.1:{port}/charge"))
        .await
        .expect("allowed");
    assert_eq!(
        trusting.send(&t, get(5000)).await,
        Outcome::NotSent(NotSent::Connect)
    );
    // Another self-signed certificate than the file's: refused.
    let (other, _) = self_signed_ca_acceptor("pinned-other");
    let (other_port, m) = https_destination_with(other).await;
    let p = policy(&[&format!("localhost:{other_port}")], false);
    let t = trusting
        .check(&p, &format!("https://localhost:{other_port}/charge"))
        .await
        .expect("allowed");
    assert_eq!(
        trusting.send(&t, get(5000)).await,
        Outcome::NotSent(NotSent::Connect)
    );
    assert_eq!((n.load(Ordering::SeqCst), m.load(Ordering::SeqCst)), (1, 0));
}

#[tokio::test]
async fn https_trusts_the_extra_ca_and_a_tls_failure_is_nothing_sent() {
    let (port, ca_file, n) = https_destination().await;
    let p = policy(&[&format!("localhost:{port}")], false);
    let url = format!("https://localhost:{port}/charge");
    let trusting = trusting_client(ca_file);
    let t = trusting.check(&p, &url).await.expect("allowed");
    match trusting.send(&t, get(5000)).await {
        Outcome::Answered(a) => assert_eq!((a.status, a.body.as_slice()), (201, &b"ok"[..])),
        other => panic!("{other:?}"),
    }
    assert_eq!(n.load(Ordering::SeqCst), 1);
    // Without the CA the handshake fails before a byte of the request leaves.
    let plain = egress(1024);
    let t = plain.check(&p, &url).await.expect("allowed");
    assert_eq!(
        plain.send(&t, get(5000)).await,
        Outcome::NotSent(NotSent::Connect)
    );
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

/// What a [`counting`] destination saw: connections accepted, and each request's HTTP
/// version.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    versions: std::sync::Mutex<Vec<axum::http::Version>>,
}

impl Seen {
    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
    fn requests(&self) -> usize {
        self.versions.lock().map(|v| v.len()).unwrap_or(0)
    }
    fn versions(&self) -> Vec<axum::http::Version> {
        self.versions.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// A destination on `listener` that counts the connections it accepts and answers every
/// request `200 ok` on a kept connection: HTTP/1.1, or over TLS with `tls` (HTTP/2 or
/// HTTP/1.1, as ALPN chose).
fn counting(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Arc<Seen> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            s.connections.fetch_add(1, Ordering::SeqCst);
            let (s, tls) = (s.clone(), tls.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                    let s = s.clone();
                    async move {
                        if let Ok(mut v) = s.versions.lock() {
                            v.push(req.version());
                        }
                        let _ = http_body_util::BodyExt::collect(req.into_body()).await;
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                        ))
                    }
                });
                let server = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                match tls {
                    None => {
                        let _ = server.serve_connection(TokioIo::new(tcp), service).await;
                    }
                    Some(acceptor) => {
                        if let Ok(tls) = acceptor.accept(tcp).await {
                            let _ = server.serve_connection(TokioIo::new(tls), service).await;
                        }
                    }
                }
            });
        }
    });
    seen
}

/// A counting destination (over TLS with `tls`) on a fresh port of 127.0.0.1; returns the
/// port and what the destination saw.
async fn counting_on_loopback(tls: Option<tokio_rustls::TlsAcceptor>) -> (u16, Arc<Seen>) {
    let l = loopback("127.0.0.1", 0).await;
    let port = l.local_addr().expect("addr").port();
    (port, counting(l, tls))
}

/// One port on two loopback addresses, 127.0.0.1 (A) and 127.0.0.2 (B), a counting
/// destination on each; returns the port and what A and B saw.
async fn one_port_two_addresses() -> (u16, Arc<Seen>, Arc<Seen>) {
    let a = loopback("127.0.0.1", 0).await;
    let port = a.local_addr().expect("addr").port();
    let b = loopback("127.0.0.2", port).await;
    (port, counting(a, None), counting(b, None))
}

/// `e`'s target for `url`, checked under a policy that opens exactly the URL's host and port.
async fn allowed(e: &Egress, url: &str) -> Target {
    let host_port = url.split('/').nth(2).expect("host and port");
    let p = policy(&[host_port], false);
    e.check(&p, url).await.expect("allowed")
}

async fn loopback(ip: &str, port: u16) -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind((ip, port))
        .await
        .expect("bind")
}

fn answered_ok(o: Outcome) {
    match o {
        Outcome::Answered(a) => assert_eq!((a.status, a.body.as_slice()), (200, &b"ok"[..])),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn sequential_requests_to_one_destination_reuse_one_connection() {
    let (port, seen) = counting_on_loopback(None).await;
    let e = egress(1024);
    let p = policy(&[&format!("127.0.0.1:{port}")], false);
    for i in 0..5 {
        // A fresh check each time, as every effect makes: same destination, same addresses.
        let t = e
            .check(&p, &format!("http://127.0.0.1:{port}/charge/{i}"))
            .await
            .expect("allowed");
        answered_ok(e.send(&t, get(5000)).await);
    }
    assert_eq!(seen.requests(), 5);
    assert_eq!(seen.connections(), 1, "one kept connection for 5 requests");
    // A clone shares the kept connections (the server's effects, forwards and alerts).
    let t = e
        .clone()
        .check(&p, &format!("http://127.0.0.1:{port}/x"))
        .await
        .expect("allowed");
    answered_ok(e.clone().send(&t, get(5000)).await);
    assert_eq!((seen.requests(), seen.connections()), (6, 1));
}

#[tokio::test]
async fn concurrent_requests_keep_their_connections_for_the_next_burst() {
    // 64 requests at once need 64 connections; once answered, all 64 are kept, so the next
    // bursts open none (with 16 kept, each burst reopened 48).
    let (port, seen) = counting_on_loopback(None).await;
    let e = egress(1024);
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/")).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    for burst in 1..=3 {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let (e, t, b) = (e.clone(), t.clone(), barrier.clone());
            tasks.spawn(async move {
                b.wait().await;
                e.send(&t, get(5000)).await
            });
        }
        while let Some(o) = tasks.join_next().await {
            answered_ok(o.expect("task"));
        }
        assert_eq!(seen.requests(), 64 * burst);
        assert!(
            seen.connections() <= 64,
            "burst {burst}: {} connections for {} requests",
            seen.connections(),
            seen.requests()
        );
    }
}

#[tokio::test]
async fn no_idle_connections_kept_means_one_connection_per_request() {
    let (port, seen) = counting_on_loopback(None).await;
    let e = with_options(EgressOptions {
        pool_max_idle_per_host: 0,
        ..Default::default()
    });
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/")).await;
    for _ in 0..3 {
        answered_ok(e.send(&t, get(5000)).await);
    }
    assert_eq!((seen.requests(), seen.connections()), (3, 3));
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let (port, seen) = counting_on_loopback(None).await;
    let e = with_options(EgressOptions {
        pool_idle_timeout: Duration::from_millis(200),
        ..Default::default()
    });
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/")).await;
    answered_ok(e.send(&t, get(5000)).await);
    answered_ok(e.send(&t, get(5000)).await);
    assert_eq!(seen.connections(), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    answered_ok(e.send(&t, get(5000)).await);
    assert_eq!((seen.requests(), seen.connections()), (3, 2));
}

#[tokio::test]
async fn a_name_whose_check_passes_other_addresses_never_uses_the_old_connection() {
    // One port on two loopback addresses: the same URL, two destinations.
    let (port, at_a, at_b) = one_port_two_addresses().await;
    let e = egress(1024);
    let url = format!("http://pinned.test:{port}/charge");
    let (addr_a, addr_b): (SocketAddr, SocketAddr) = (
        format!("127.0.0.1:{port}").parse().expect("a"),
        format!("127.0.0.2:{port}").parse().expect("b"),
    );
    let exact = policy(&[&format!("pinned.test:{port}")], false);
    // The name resolved to A: two requests, one connection to A.
    let to_a = e
        .check_resolved(&exact, &url, vec![addr_a])
        .expect("allowed");
    answered_ok(e.send(&to_a, get(5000)).await);
    answered_ok(e.send(&to_a, get(5000)).await);
    assert_eq!((at_a.connections(), at_a.requests()), (1, 2));
    // The same name now resolves to B (a changed answer): a new connection, to B.
    let to_b = e
        .check_resolved(&exact, &url, vec![addr_b])
        .expect("allowed");
    answered_ok(e.send(&to_b, get(5000)).await);
    assert_eq!((at_b.connections(), at_b.requests()), (1, 1));
    assert_eq!(
        at_a.requests(),
        2,
        "nothing went to A over its kept connection"
    );
    // Back to A: its kept connection again.
    answered_ok(e.send(&to_a, get(5000)).await);
    assert_eq!((at_a.connections(), at_a.requests()), (1, 3));
    assert_eq!(at_b.requests(), 1);
}

#[tokio::test]
async fn an_address_a_policy_refuses_is_never_reached_through_a_kept_connection() {
    let (port, at_a, at_b) = one_port_two_addresses().await;
    let e = egress(1024);
    let url = format!("http://pinned.test:{port}/charge");
    let resolved: Vec<SocketAddr> = vec![
        format!("127.0.0.2:{port}").parse().expect("b"),
        format!("127.0.0.1:{port}").parse().expect("a"),
    ];
    // A policy naming the host passes both addresses: the connection goes to B (first).
    let exact = policy(&[&format!("pinned.test:{port}")], false);
    let both = e
        .check_resolved(&exact, &url, resolved.clone())
        .expect("allowed");
    assert_eq!(both.addrs().len(), 2);
    answered_ok(e.send(&both, get(5000)).await);
    assert_eq!((at_b.connections(), at_b.requests()), (1, 1));
    // A policy that lists only A's address (the name by pattern): B is refused, and the
    // request never rides the kept connection to B.
    let only_a = policy(&["*.test", &format!("127.0.0.1:{port}")], false);
    let to_a = e
        .check_resolved(&only_a, &url, resolved.clone())
        .expect("allowed");
    assert_eq!(to_a.addrs(), &[resolved[1]]);
    answered_ok(e.send(&to_a, get(5000)).await);
    answered_ok(e.send(&to_a, get(5000)).await);
    assert_eq!((at_a.connections(), at_a.requests()), (1, 2));
    assert_eq!(at_b.requests(), 1, "B was refused: nothing more reached it");
    // A policy that refuses both is refused outright, kept connections or not.
    assert_eq!(
        e.check_resolved(&EgressPolicy::default(), &url, resolved)
            .map(|_| ()),
        Err(Forbidden::Refused(Refusal::Address(AddrClass::Loopback)))
    );
    let literal_b = e
        .check(&only_a, &format!("http://127.0.0.2:{port}/"))
        .await
        .map(|_| ());
    assert!(literal_b.is_err(), "{literal_b:?}");
    assert_eq!((at_a.requests(), at_b.requests()), (2, 1));
}

#[tokio::test]
async fn kept_clients_are_bounded_and_the_least_recently_used_is_dropped() {
    let e = with_options(EgressOptions {
        pool_max_clients: 2,
        ..Default::default()
    });
    let mut dests = Vec::new();
    for _ in 0..4 {
        let (port, seen) = counting_on_loopback(None).await;
        let t = allowed(&e, &format!("http://127.0.0.1:{port}/")).await;
        answered_ok(e.send(&t, get(5000)).await);
        assert!(e.pool.len() <= 2, "{}", e.pool.len());
        dests.push((t, seen));
    }
    assert_eq!(e.pool.len(), 2);
    // The last one is kept with its connection; the first was dropped with its own.
    answered_ok(e.send(&dests[3].0, get(5000)).await);
    assert_eq!(dests[3].1.connections(), 1);
    answered_ok(e.send(&dests[0].0, get(5000)).await);
    assert_eq!(dests[0].1.connections(), 2);
    assert_eq!(e.pool.len(), 2);
}

/// A client made with `options`.
fn with_options(options: EgressOptions) -> Egress {
    Egress::new(&options).expect("client")
}

/// A client trusting the extra CA in `ca_file`.
fn trusting_client(ca_file: std::path::PathBuf) -> Egress {
    with_options(EgressOptions {
        extra_ca: Some(ca_file),
        ..Default::default()
    })
}

/// A TLS acceptor for `localhost` from a fresh CA offering `alpn`; returns it and the CA
/// file.
fn tls_acceptor(alpn: &[&[u8]], tag: &str) -> (tokio_rustls::TlsAcceptor, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("CA");
    let key = KeyPair::generate().expect("key");
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("sign");
    (
        server_config(&cert, &key, alpn),
        pem_file(tag, "ca.pem", &ca.pem()),
    )
}

#[tokio::test]
async fn https_uses_http2_when_offered_on_one_kept_connection() {
    let (acceptor, ca_file) = tls_acceptor(&[b"h2", b"http/1.1"], "h2");
    let (port, seen) = counting_on_loopback(Some(acceptor)).await;
    let e = trusting_client(ca_file);
    let p = policy(&[&format!("localhost:{port}")], false);
    for _ in 0..3 {
        let t = e
            .check(&p, &format!("https://localhost:{port}/charge"))
            .await
            .expect("allowed");
        answered_ok(e.send(&t, get(5000)).await);
    }
    assert_eq!(seen.versions(), vec![axum::http::Version::HTTP_2; 3]);
    assert_eq!(seen.connections(), 1, "one handshake for 3 requests");
}

#[tokio::test]
async fn https_keeps_http1_connections_where_h2_is_not_offered() {
    let (acceptor, ca_file) = tls_acceptor(&[b"http/1.1"], "h1");
    let (port, seen) = counting_on_loopback(Some(acceptor)).await;
    let e = trusting_client(ca_file);
    let t = allowed(&e, &format!("https://localhost:{port}/charge")).await;
    for _ in 0..3 {
        answered_ok(e.send(&t, get(5000)).await);
    }
    assert_eq!(seen.versions(), vec![axum::http::Version::HTTP_11; 3]);
    assert_eq!(seen.connections(), 1);
}

/// A destination on a fresh loopback port: `/large` answers 300 KiB of a pattern, anything
/// else the request's `user-agent` and `accept`, one per line. Counts connections.
async fn large_and_echo() -> (u16, Arc<AtomicUsize>) {
    let connections = Arc::new(AtomicUsize::new(0));
    let c = connections.clone();
    let app = Router::new()
        .route("/large", any(|| async { large_body() }))
        .fallback(any(|h: axum::http::HeaderMap| async move {
            let v = |n: &str| {
                h.get(n)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned()
            };
            format!("{}\n{}", v("user-agent"), v("accept"))
        }));
    let listener = loopback("127.0.0.1", 0).await;
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let app = app.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    tower_service::Service::call(&mut app.clone(), req)
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                .await;
            });
        }
    });
    (port, connections)
}

fn large_body() -> Vec<u8> {
    (0..300 * 1024u32).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn a_large_answer_arrives_whole_over_one_kept_connection() {
    let (port, connections) = large_and_echo().await;
    let e = egress(1 << 20);
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/large")).await;
    // Larger than what one read of a kept HTTP/1 connection may take (the read buffer's
    // bound), three times over one connection: each answer arrives byte for byte. What the
    // bound saves is memory, which `idem bench`'s 256 KiB effect row shows.
    assert!(large_body().len() > 4 * crate::client::HTTP1_MAX_BUF);
    for _ in 0..3 {
        match e.send(&t, get(5000)).await {
            Outcome::Answered(a) => {
                assert_eq!((a.status, a.truncated, a.broke_off), (200, false, None));
                assert!(a.body == large_body(), "the body arrived as sent");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_request_names_idem_and_accepts_anything_unless_it_says_otherwise() {
    let (port, _) = large_and_echo().await;
    let e = egress(1024);
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/echo")).await;
    let body = |o: Outcome| match o {
        Outcome::Answered(a) => String::from_utf8(a.body).expect("text"),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        body(e.send(&t, get(5000)).await),
        format!("idem/{}\n*/*", env!("CARGO_PKG_VERSION"))
    );
    let mut own = get(5000);
    own.headers
        .insert("user-agent", HeaderValue::from_static("billing-bot/2"));
    own.headers
        .insert("accept", HeaderValue::from_static("application/json"));
    assert_eq!(
        body(e.send(&t, own).await),
        "billing-bot/2\napplication/json"
    );
}

#[tokio::test]
async fn an_answer_head_longer_than_the_read_buffer_is_a_broken_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = loopback("127.0.0.1", 0).await;
    let port = listener.local_addr().expect("addr").port();
    let head_bytes = |n: usize| {
        let mut head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-padding: ".to_vec();
        head.extend(std::iter::repeat_n(b'p', n));
        head.extend_from_slice(b"\r\n\r\nok");
        head
    };
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                // `/long` answers a head of three times the bound (hyper's own bound would
                // take it), anything else one of half the bound.
                let long = buf[..n].starts_with(b"POST /long ");
                let pad = if long {
                    3 * crate::client::HTTP1_MAX_BUF
                } else {
                    crate::client::HTTP1_MAX_BUF / 2
                };
                let _ = sock.write_all(&head_bytes(pad)).await;
                let _ = sock.flush().await;
            });
        }
    });
    let e = egress(1024);
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/short")).await;
    // (Outcomes are shown by their status only: the heads are long.)
    let shown = |o: Outcome| match o {
        Outcome::Answered(a) => format!("answered {} {:?}", a.status, a.body),
        other => format!("{other:?}"),
    };
    assert_eq!(
        shown(e.send(&t, get(5000)).await),
        "answered 200 [111, 107]"
    );
    // Sent, and no answer idem can read: ambiguous, never "nothing sent".
    let t = allowed(&e, &format!("http://127.0.0.1:{port}/long")).await;
    assert_eq!(shown(e.send(&t, get(5000)).await), "Lost(Broken)");
}
