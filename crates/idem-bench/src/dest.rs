//! The effect rows' destination: a loopback HTTP/1.1 server in the bench process that answers
//! every request `200` with a JSON body of a fixed size, like a payment API acknowledging a
//! charge. [`Destination::start_tls`] serves the same over TLS for `localhost` with a
//! certificate from a CA made for the run, offering HTTP/2 and HTTP/1.1 (ALPN) as a payment
//! API does. It counts the requests it received, so a row can check that every performed
//! effect reached it exactly once; a recording one also keeps each request's `Idem-Key`
//! (the intake's forwards carry one per event), so a run can tell lost events from doubled
//! ones. It must only ever bind 127.0.0.1.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// A running destination; dropping it stops accepting connections.
pub struct Destination {
    pub addr: SocketAddr,
    requests: Arc<AtomicU64>,
    /// Connections accepted (TCP, before any TLS handshake).
    connections: Arc<AtomicU64>,
    /// The distinct `Idem-Key` values received, when recording.
    keys: Option<Arc<Mutex<HashSet<String>>>>,
    accept: tokio::task::JoinHandle<()>,
    /// TLS destinations: what a client needs to trust the certificate.
    tls: Option<Tls>,
}

/// The trust side of a TLS destination.
struct Tls {
    /// The CA's PEM in a file (for `idem serve --extra-ca`).
    ca_file: std::path::PathBuf,
    /// A client configuration trusting the CA only, offering HTTP/1.1 (the lean load client).
    client: Arc<rustls::ClientConfig>,
    _dir: tempfile::TempDir,
}

/// A JSON object of exactly `n` bytes (at least the 24 of its smallest form).
pub fn json_of_size(n: usize) -> Bytes {
    const HEAD: &str = "{\"id\":\"ch_1\",\"pad\":\"";
    const TAIL: &str = "\"}";
    let pad = n.saturating_sub(HEAD.len() + TAIL.len());
    let mut s = String::with_capacity(HEAD.len() + pad + TAIL.len());
    s.push_str(HEAD);
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str(TAIL);
    Bytes::from(s)
}

impl Destination {
    /// Starts on a free loopback port; every answer carries `body`.
    pub async fn start(body: Bytes) -> anyhow::Result<Destination> {
        Self::start_with(body, None, None).await
    }

    /// [`Destination::start`], also keeping every request's `Idem-Key`.
    pub async fn start_recording(body: Bytes) -> anyhow::Result<Destination> {
        Self::start_with(body, Some(Arc::default()), None).await
    }

    /// [`Destination::start`] over TLS: a certificate for `localhost` from a fresh CA, ALPN
    /// `h2` and `http/1.1`.
    pub async fn start_tls(body: Bytes) -> anyhow::Result<Destination> {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let key = KeyPair::generate()?;
        let cert = CertificateParams::new(vec!["localhost".to_owned()])?.signed_by(&key, &ca)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
                    .map_err(|e| anyhow::anyhow!("key: {e}"))?,
            )?;
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone())?;
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let dir = tempfile::tempdir()?;
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem())?;
        let tls = Tls {
            ca_file,
            client: Arc::new(client),
            _dir: dir,
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        Self::start_with(body, None, Some((acceptor, tls))).await
    }

    async fn start_with(
        body: Bytes,
        keys: Option<Arc<Mutex<HashSet<String>>>>,
        tls: Option<(tokio_rustls::TlsAcceptor, Tls)>,
    ) -> anyhow::Result<Destination> {
        let (acceptor, tls) = match tls {
            Some((a, t)) => (Some(a), Some(t)),
            None => (None, None),
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let connections = Arc::new(AtomicU64::new(0));
        let count = requests.clone();
        let accepted = connections.clone();
        let seen = keys.clone();
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::Relaxed);
                let _ = tcp.set_nodelay(true);
                let (body, count, seen) = (body.clone(), count.clone(), seen.clone());
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (body, count, seen) = (body.clone(), count.clone(), seen.clone());
                        async move {
                            if let Some(seen) = &seen {
                                let key = req
                                    .headers()
                                    .get("idem-key")
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or_default()
                                    .to_owned();
                                if let Ok(mut set) = seen.lock() {
                                    set.insert(key);
                                }
                            }
                            // Read the whole request, as a real API would, before answering.
                            let _ = req.into_body().collect().await;
                            count.fetch_add(1, Ordering::Relaxed);
                            let mut resp = Response::new(Full::new(body));
                            resp.headers_mut()
                                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    match acceptor {
                        None => {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .keep_alive(true)
                                .serve_connection(TokioIo::new(tcp), service)
                                .await;
                        }
                        // HTTP/2 or HTTP/1.1, whichever the client speaks.
                        Some(acceptor) => {
                            let Ok(tls) = acceptor.accept(tcp).await else {
                                return;
                            };
                            let _ = hyper_util::server::conn::auto::Builder::new(
                                hyper_util::rt::TokioExecutor::new(),
                            )
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                        }
                    }
                });
            }
        });
        Ok(Destination {
            addr,
            requests,
            connections,
            keys,
            accept,
            tls,
        })
    }

    /// A TLS destination's CA file (for `idem serve --extra-ca`).
    pub fn ca_file(&self) -> Option<&std::path::Path> {
        self.tls.as_ref().map(|t| t.ca_file.as_path())
    }

    /// A TLS destination's client configuration (trusts its CA, offers HTTP/1.1).
    pub fn client_tls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.tls.as_ref().map(|t| t.client.clone())
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Distinct `Idem-Key` values received so far (0 unless recording).
    pub fn distinct(&self) -> u64 {
        self.keys
            .as_ref()
            .and_then(|k| k.lock().ok().map(|set| set.len() as u64))
            .unwrap_or(0)
    }
}

impl Drop for Destination {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_of_size_is_exact_and_valid() {
        for n in [24, 64, 1000, 256 * 1024] {
            let b = json_of_size(n);
            assert_eq!(b.len(), n);
            let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
            assert_eq!(v["id"], "ch_1");
        }
    }

    #[tokio::test]
    async fn the_tls_destination_answers_over_tls_and_offers_h2() {
        let d = Destination::start_tls(json_of_size(64))
            .await
            .expect("start");
        let client = d.client_tls().expect("tls");
        // The lean load client (HTTP/1.1 over TLS) gets its answer, twice on one connection.
        let target = crate::http::Target::tls(d.addr, client.clone()).expect("target");
        let (mut conn, driver) = crate::http::connect(&target).await.expect("connect");
        crate::http::on_conn(driver, async {
            for _ in 0..2 {
                let uri = hyper::Uri::from_static("/v1/charges");
                crate::http::direct(&mut conn, uri, Bytes::from_static(b"{}"))
                    .await
                    .expect("answered");
            }
        })
        .await;
        assert_eq!(d.requests(), 2);
        // A client that offers h2 gets it.
        let mut h2 = (*client).clone();
        h2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(d.addr).await.expect("tcp");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(h2))
            .connect(name, tcp)
            .await
            .expect("handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        assert!(d.ca_file().is_some_and(|p| p.exists()));
    }
}
