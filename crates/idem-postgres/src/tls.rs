//! TLS to PostgreSQL: the `sslmode` and `sslrootcert` parameters of the database URL, with
//! libpq's meaning, over rustls (ring provider).
//!
//! | `sslmode`        | encrypted             | certificate checked                        |
//! |------------------|-----------------------|--------------------------------------------|
//! | `disable`        | never                 | –                                          |
//! | `prefer` (unset) | if the server can     | no                                         |
//! | `require`        | always                | no; with `sslrootcert`, as `verify-ca`     |
//! | `verify-ca`      | always                | chain to a trusted CA                      |
//! | `verify-full`    | always                | chain, and the host name of the URL        |
//!
//! `sslrootcert=PATH` names a PEM file of CA certificates to trust (instead of the public
//! roots); `sslrootcert=system` (or none) trusts the Mozilla root set bundled with the binary.
//! This module owns reading those two parameters and building the connector; it must never
//! weaken a mode (a `verify-*` connection is never made without checking the chain) and
//! never put the URL (it may hold a password) into an error: errors name the parameter.

use std::path::PathBuf;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::SslMode;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

/// `sslmode` of the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgSslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl PgSslMode {
    fn parse(v: &str) -> Result<PgSslMode, TlsError> {
        Ok(match v {
            "disable" => PgSslMode::Disable,
            "prefer" => PgSslMode::Prefer,
            "require" => PgSslMode::Require,
            "verify-ca" => PgSslMode::VerifyCa,
            "verify-full" => PgSslMode::VerifyFull,
            // libpq's `allow` (plain first, TLS if refused) buys nothing over `prefer`.
            other => return Err(TlsError::Mode(other.to_owned())),
        })
    }
}

/// Where trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// The Mozilla root set bundled with the binary (`sslrootcert=system` or unset).
    System,
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
}

/// The TLS settings of one database URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTls {
    pub mode: PgSslMode,
    /// Set only when the URL named `sslrootcert`.
    pub root_cert: Option<RootCert>,
}

/// Why the TLS settings of a URL were refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(
        "sslmode={0:?} is not supported: use disable, prefer, require, verify-ca or verify-full"
    )]
    Mode(String),
    #[error("{0} (client certificates) is not supported; authenticate with a password")]
    ClientCert(&'static str),
    #[error("sslrootcert {path}: {message}")]
    RootCert { path: String, message: String },
    #[error("postgres TLS setup: {0}")]
    Rustls(String),
}

impl PgTls {
    /// Takes `sslmode` and `sslrootcert` out of the query of a `postgres://` URL: the rest is
    /// what tokio-postgres parses (it knows neither `verify-*` nor `sslrootcert`).
    pub fn split_url(url: &str) -> Result<(String, PgTls), TlsError> {
        let mut tls = PgTls {
            mode: PgSslMode::Prefer,
            root_cert: None,
        };
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), tls));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sslmode" => tls.mode = PgSslMode::parse(&percent_decode(v))?,
                "sslrootcert" => {
                    let v = percent_decode(v);
                    tls.root_cert = Some(if v == "system" {
                        RootCert::System
                    } else {
                        RootCert::File(PathBuf::from(v))
                    });
                }
                "sslcert" => return Err(TlsError::ClientCert("sslcert")),
                "sslkey" => return Err(TlsError::ClientCert("sslkey")),
                _ => kept.push(pair),
            }
        }
        let url = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok((url, tls))
    }

    /// What tokio-postgres is told: whether TLS is off, tried, or required.
    pub fn ssl_mode(&self) -> SslMode {
        match self.mode {
            PgSslMode::Disable => SslMode::Disable,
            PgSslMode::Prefer => SslMode::Prefer,
            PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull => SslMode::Require,
        }
    }

    /// How the server certificate is checked, libpq's way: `require` with a root certificate
    /// behaves as `verify-ca`.
    fn check(&self) -> Check {
        match (self.mode, &self.root_cert) {
            (PgSslMode::Disable, _) => Check::Plain,
            (PgSslMode::Prefer, _) | (PgSslMode::Require, None) => Check::EncryptOnly,
            (PgSslMode::Require, Some(_)) | (PgSslMode::VerifyCa, _) => Check::Chain,
            (PgSslMode::VerifyFull, _) => Check::ChainAndName,
        }
    }

    /// The pool manager for `cfg` (whose `ssl_mode` must come from [`PgTls::ssl_mode`]).
    pub fn manager(
        &self,
        cfg: tokio_postgres::Config,
        mc: ManagerConfig,
    ) -> Result<Manager, TlsError> {
        let check = self.check();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        let webpki = match check {
            Check::Plain => return Ok(Manager::from_config(cfg, NoTls, mc)),
            Check::EncryptOnly => None,
            Check::Chain | Check::ChainAndName => Some(
                WebPkiServerVerifier::builder_with_provider(
                    Arc::new(self.roots()?),
                    provider.clone(),
                )
                .build()
                .map_err(|e| TlsError::Rustls(e.to_string()))?,
            ),
        };
        let verifier = Arc::new(Verifier {
            check,
            webpki,
            provider,
        });
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Manager::from_config(
            cfg,
            MakeRustlsConnect::new(config),
            mc,
        ))
    }

    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut store = RootCertStore::empty();
        match &self.root_cert {
            None | Some(RootCert::System) => {
                store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            Some(RootCert::File(path)) => {
                let err = |message: String| TlsError::RootCert {
                    path: path.display().to_string(),
                    message,
                };
                let certs = CertificateDer::pem_file_iter(path)
                    .map_err(|e| err(e.to_string()))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| err(e.to_string()))?;
                let (added, _ignored) = store.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(err("holds no usable PEM certificate".into()));
                }
            }
        }
        Ok(store)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Plain,
    EncryptOnly,
    Chain,
    ChainAndName,
}

type Dss = DigitallySignedStruct;
type SigResult = Result<HandshakeSignatureValid, rustls::Error>;

/// Checks the server certificate as `check` says. The handshake signature is always
/// verified, so the peer holds the key of the certificate it sent, whatever the mode.
#[derive(Debug)]
struct Verifier {
    check: Check,
    /// The full webpki check (chain, validity, usage, name); `None` for [`Check::EncryptOnly`].
    webpki: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            // `prefer`/`require` without a CA: encrypted, the certificate not checked
            // (libpq's meaning).
            return Ok(ServerCertVerified::assertion());
        };
        let verified =
            webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match verified {
            // `verify-ca`: webpki checks the name only after the chain, validity and usage
            // checks succeeded, so a name error means everything else held.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.check == Check::Chain => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &Dss) -> SigResult {
        verify_tls12_signature(m, c, d, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &Dss) -> SigResult {
        verify_tls13_signature(m, c, d, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `%XX` escapes of a URL query value (a path may hold `%2F`, `%20`…); invalid escapes are
/// kept as written.
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_parameters_are_taken_out_and_the_rest_kept() {
        let (url, tls) = PgTls::split_url(
            "postgres://u:p@db:5432/idem?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20dir%2Froot.pem",
        )
        .expect("ok");
        assert_eq!(url, "postgres://u:p@db:5432/idem?application_name=x");
        assert_eq!(tls.mode, PgSslMode::VerifyFull);
        assert_eq!(
            tls.root_cert,
            Some(RootCert::File(PathBuf::from("/etc/ca dir/root.pem")))
        );
        assert_eq!(tls.ssl_mode(), SslMode::Require);
        assert_eq!(tls.check(), Check::ChainAndName);

        let (url, tls) = PgTls::split_url("postgres://u@db/idem").expect("ok");
        assert_eq!(url, "postgres://u@db/idem");
        assert_eq!(
            (tls.mode, tls.check()),
            (PgSslMode::Prefer, Check::EncryptOnly)
        );

        let (url, tls) = PgTls::split_url("postgres://u@db/idem?sslmode=disable").expect("ok");
        assert_eq!(url, "postgres://u@db/idem");
        assert_eq!(tls.check(), Check::Plain);
    }

    #[test]
    fn require_with_a_ca_checks_the_chain_like_libpq() {
        let (_, tls) = PgTls::split_url("postgres://u@db/idem?sslmode=require&sslrootcert=/ca.pem")
            .expect("ok");
        assert_eq!(tls.check(), Check::Chain);
        let (_, tls) =
            PgTls::split_url("postgres://u@db/idem?sslmode=verify-ca&sslrootcert=system")
                .expect("ok");
        assert_eq!(tls.root_cert, Some(RootCert::System));
        assert_eq!(tls.check(), Check::Chain);
    }

    #[test]
    fn unknown_modes_and_client_certificates_are_refused_without_the_url() {
        let e = PgTls::split_url("postgres://u:hunter2@db/idem?sslmode=allow").expect_err("no");
        assert!(
            e.to_string().contains("allow") && !e.to_string().contains("hunter2"),
            "{e}"
        );
        let e = PgTls::split_url("postgres://u:hunter2@db/idem?sslcert=/c.pem").expect_err("no");
        assert!(e.to_string().contains("sslcert"), "{e}");
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let (_, tls) = PgTls::split_url(
            "postgres://u@db/idem?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        )
        .expect("ok");
        let cfg = tokio_postgres::Config::new();
        let mc = ManagerConfig::default();
        let e = tls.manager(cfg, mc).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("/nonexistent/ca.pem")),
            "{e:?}"
        );
    }

    #[test]
    fn percent_escapes_decode() {
        assert_eq!(percent_decode("a%20b%2Fc"), "a b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
