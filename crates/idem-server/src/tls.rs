//! HTTPS for `idem serve`: rustls (ring provider) in front of the same axum router, with the
//! certificate and key re-read on SIGHUP.
//!
//! This module owns the certificate in use ([`CertStore`]) and the SIGHUP reload task
//! ([`reload_on_sighup`]); connections are accepted and served by [`crate::conn`]. A reload replaces the
//! certificate for handshakes that start after it; connections already open keep theirs. A
//! reload that fails (missing file, bad PEM, a key that does not match the certificate)
//! keeps the certificate in use and logs an error: a bad file must never take the service
//! down or leave it without a certificate. It never logs key material, only paths.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

/// A TLS handshake that has not finished by then is dropped (a client that connects and
/// says nothing must not hold a task and a socket forever).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a certificate or key was refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read TLS certificate {path}: {message}")]
    Cert { path: PathBuf, message: String },
    #[error("cannot read TLS key {path}: {message}")]
    Key { path: PathBuf, message: String },
    #[error("TLS key {key} does not fit certificate {cert}: {message}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
}

/// The certificate served to new handshakes, and the files it is (re)loaded from.
#[derive(Debug)]
pub struct CertStore {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertStore {
    /// Loads `cert` (PEM chain, leaf first) and `key` (PEM private key).
    pub fn load(cert: &Path, key: &Path) -> Result<CertStore, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let current = read_pair(&provider, cert, key)?;
        Ok(CertStore {
            cert_path: cert.to_owned(),
            key_path: key.to_owned(),
            provider,
            current: RwLock::new(Arc::new(current)),
        })
    }

    /// Re-reads both files; on any error the certificate in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = read_pair(&self.provider, &self.cert_path, &self.key_path)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        Ok(())
    }

    /// The certificate chain in use, leaf first (tests compare it with what a client saw).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .cert
            .clone()
    }

    /// The rustls server configuration serving this store (HTTP/2 and HTTP/1.1 by ALPN).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, rustls::Error> {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

fn read_pair(provider: &CryptoProvider, cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let cert_err = |message: String| TlsError::Cert {
        path: cert.to_owned(),
        message,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_err("no PEM certificate in the file".into()));
    }
    // The error of a PEM parse can quote the input; for the key only its kind is shown.
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.to_owned(),
        message: pem_error_kind(&e),
    })?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| TlsError::Key {
            path: key.to_owned(),
            message: e.to_string(),
        })?;
    let pair = CertifiedKey::new(chain, signing);
    pair.keys_match().map_err(|e| TlsError::Mismatch {
        cert: cert.to_owned(),
        key: key.to_owned(),
        message: e.to_string(),
    })?;
    Ok(pair)
}

fn pem_error_kind(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::NoItemsFound => "no PEM private key in the file".into(),
        E::Io(io) => io.to_string(),
        _ => "not a valid PEM private key".into(),
    }
}

/// Re-reads the certificate on every SIGHUP until the task is aborted.
pub async fn reload_on_sighup(certs: Arc<CertStore>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGHUP: TLS certificate reload is off");
                return;
            }
        };
        while hup.recv().await.is_some() {
            match certs.reload() {
                Ok(()) => tracing::info!(
                    cert = %certs.cert_path.display(),
                    "TLS certificate reloaded: new connections use it"
                ),
                Err(e) => tracing::error!(
                    error = %e,
                    "TLS certificate reload failed: still serving the previous certificate"
                ),
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = certs;
        std::future::pending::<()>().await;
    }
}
