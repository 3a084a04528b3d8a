//! `idem serve --tls-cert --tls-key`: HTTPS with a certificate from a CA the test makes,
//! checked by a real TLS client (reqwest, rustls, only that CA trusted), and SIGHUP reload:
//! a new certificate is served to new connections, a broken one is refused and the previous
//! one kept.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::helpers::{free_port, http_status, idem};

/// The test CA, able to issue server certificates for 127.0.0.1.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA"),
        }
    }

    /// A fresh key and a certificate for it, as PEM (certificate, key) and the DER served.
    fn issue(&self) -> (String, String, Vec<u8>) {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("params")
            .signed_by(&key, &self.issuer)
            .expect("sign");
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }
}

/// Writes `text` to `path` the way a certificate manager does (whole file, then rename).
fn put(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

struct HttpsServer {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl HttpsServer {
    fn start(dir: tempfile::TempDir, cert: &Path, key: &Path, ca: &Ca) -> HttpsServer {
        let port = free_port();
        let log = dir.path().join("serve.log");
        let db = format!("sqlite://{}", dir.path().join("idem.db").display());
        let child = idem()
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--db",
                &db,
            ])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("spawn idem serve");
        let mut s = HttpsServer {
            child,
            url: format!("https://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while s.served(ca).is_none() {
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("idem serve exited with {st}:\n{}", s.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "no HTTPS answer:\n{}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    /// The leaf certificate a new connection is served (None: no TLS answer). A client of
    /// its own each time: a client would resume its TLS session, and a resumed session keeps
    /// the certificate of the handshake that opened it.
    fn served(&self, ca: &Ca) -> Option<Vec<u8>> {
        let resp = client_trusting(ca)
            .get(format!("{}/healthz", self.url))
            .send()
            .ok()?;
        assert_eq!(resp.status(), 200);
        let info = resp.extensions().get::<reqwest::tls::TlsInfo>()?;
        info.peer_certificate().map(<[u8]>::to_vec)
    }

    fn hup(&self) {
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -HUP");
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log has `needle` `n` times.
    fn wait_log(&self, needle: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.log_text().matches(needle).count() < n {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client that trusts only `ca` and exposes the peer certificate.
fn client_trusting(ca: &Ca) -> reqwest::blocking::Client {
    let root = reqwest::Certificate::from_pem(ca.issuer.pem().as_bytes()).expect("ca pem");
    reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(root)
        .tls_info(true)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

#[test]
fn https_serves_the_certificate_and_sighup_swaps_it_keeping_the_old_one_on_bad_files() {
    let ca = Ca::new("idem https test CA");
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let (cert_a, key_a, der_a) = ca.issue();
    put(&cert, &cert_a);
    put(&key, &key_a);
    let server = HttpsServer::start(dir, &cert, &key, &ca);
    assert_eq!(server.served(&ca), Some(der_a.clone()));
    assert!(
        server.log_text().contains("listening on https://"),
        "{}",
        server.log_text()
    );

    // Only TLS is spoken, and a client that does not trust the CA is refused.
    let addr = server.url.trim_start_matches("https://").to_owned();
    assert_ne!(http_status(&addr, "/healthz"), Some(200));
    let stranger = client_trusting(&Ca::new("another CA"));
    assert!(stranger
        .get(format!("{}/healthz", server.url))
        .send()
        .is_err());

    // A new certificate: new handshakes get it after SIGHUP.
    let (cert_b, key_b, der_b) = ca.issue();
    put(&cert, &cert_b);
    put(&key, &key_b);
    assert_eq!(
        server.served(&ca),
        Some(der_a.clone()),
        "no reload before SIGHUP"
    );
    server.hup();
    server.wait_log("TLS certificate reloaded", 1);
    assert_eq!(server.served(&ca), Some(der_b.clone()));

    // Broken files are refused and the current certificate stays: a certificate that is not
    // PEM, then a key that belongs to another certificate.
    put(&cert, "not a certificate\n");
    server.hup();
    server.wait_log("TLS certificate reload failed", 1);
    assert_eq!(server.served(&ca), Some(der_b.clone()));
    put(&cert, &cert_a);
    server.hup();
    server.wait_log("TLS certificate reload failed", 2);
    assert_eq!(server.served(&ca), Some(der_b.clone()));
    let log = server.log_text();
    assert!(log.contains("does not fit certificate"), "{log}");
    assert!(
        !log.contains("PRIVATE KEY"),
        "key material in the log:\n{log}"
    );

    // Fixed files are picked up by the next SIGHUP.
    put(&key, &key_a);
    server.hup();
    server.wait_log("TLS certificate reloaded", 2);
    assert_eq!(server.served(&ca), Some(der_a));
}

#[test]
fn a_missing_key_or_an_unreadable_certificate_stops_the_start() {
    let out = crate::helpers::run(&["serve", "--tls-cert", "/nonexistent/cert.pem"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("tls_key"), "{}", out.stderr);

    let dir = tempfile::tempdir().expect("tmp");
    let db = format!("sqlite://{}", dir.path().join("idem.db").display());
    let key = dir.path().join("key.pem");
    let (_, key_pem, _) = Ca::new("ca").issue();
    put(&key, &key_pem);
    let key_arg = key.display().to_string();
    let out = crate::helpers::run(&[
        "serve",
        "--listen",
        &format!("127.0.0.1:{}", free_port()),
        "--db",
        &db,
        "--tls-cert",
        "/nonexistent/cert.pem",
        "--tls-key",
        &key_arg,
    ]);
    assert_ne!(out.code, 0, "{out:?}");
    out.assert_stderr_has("/nonexistent/cert.pem");
}
