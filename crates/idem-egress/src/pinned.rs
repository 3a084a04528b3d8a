//! The server certificate check of HTTPS requests: the web roots and the certificates of
//! `--extra-ca` as trust anchors (rustls's own check), plus one case that check refuses: a
//! certificate of that file presented by the server as its own certificate, when it marks
//! itself a CA (`basicConstraints CA:TRUE`, which `openssl req -x509` writes by default for a
//! self-signed certificate). The operator listed that very certificate, so it is trusted as
//! pinned: byte for byte, while it is valid, for the names it lists.
//!
//! What this must never do: accept a certificate the file does not hold byte for byte, one
//! outside its validity period, or one for another name; or relax anything for the web roots.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

/// rustls's check, and the pinned certificates of `--extra-ca`.
#[derive(Debug)]
pub(crate) struct Verifier {
    pub(crate) webpki: Arc<WebPkiServerVerifier>,
    pub(crate) pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let refused = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        // webpki checks the validity period before the CA mark: a certificate refused for
        // the mark alone is within its period.
        if !ca_as_end_entity(&refused) || !self.pinned.iter().any(|c| c == end_entity) {
            return Err(refused);
        }
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| refused.clone())?;
        cert.verify_is_valid_for_subject_name(server_name)
            .map_err(|_| Error::InvalidCertificate(CertificateError::NotValidForName))?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Whether rustls refused a certificate only because it marks itself a CA.
fn ca_as_end_entity(e: &Error) -> bool {
    match e {
        Error::InvalidCertificate(CertificateError::Other(o)) => matches!(
            o.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::CaUsedAsEndEntity)
        ),
        _ => false,
    }
}
