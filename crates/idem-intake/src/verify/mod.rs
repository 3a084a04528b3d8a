//! Signature verification on the raw request bytes: one file per provider's scheme, each
//! behind the same signature (`check(&VerifyConfig, &Request) -> signed-at or refusal`).
//!
//! Every provider's check has the same shape: read the signature header(s), compute the
//! expected MAC under each configured secret (once per secret, however many candidate
//! signatures the header lists), compare in constant time, and only after a match check the
//! signed timestamp against `now_ms ± tolerance_ms`. A failure is one of two words and
//! nothing else.
//!
//! Header handling (where the providers' documents are silent):
//! - names are case-insensitive (an `http::HeaderMap`);
//! - a signature or timestamp header that appears more than once, is longer than
//!   [`MAX_HEADER_BYTES`], or is not visible ASCII is malformed → `invalid_signature`;
//! - malformed hex or base64 in a candidate makes that candidate fail, never panics;
//! - timestamps are ASCII digits only (no sign, no spaces), at most 15 of them.
//!
//! Per provider, each file's first paragraph says what it reads and signs (the contract's
//! table, plus what the official libraries do). A new scheme is a new file with a `check`
//! and one arm in [`verify`].

mod github;
mod hmac_scheme;
mod hubspot;
mod parts;
mod shopify;
mod slack;
mod standard_webhooks;
mod stripe;
mod twilio;
mod typeform;

pub use hubspot::hubspot_decode_uri;
pub(crate) use parts::mac;
pub use parts::MAX_HEADER_BYTES;
pub use twilio::{twilio_json_url, twilio_params_text, twilio_url_variants};

use crate::provider::{HmacScheme, Provider};

/// Why a request was refused. Nothing else is ever said about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Missing or malformed signature header, no match under any secret, or only unknown
    /// scheme versions (401 `invalid_signature`).
    #[error("invalid_signature")]
    InvalidSignature,
    /// A valid signature over a timestamp outside `tolerance_ms` (401 `stale_signature`).
    #[error("stale_signature")]
    StaleSignature,
}

impl Refusal {
    /// The problem `code` of this refusal.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::InvalidSignature => "invalid_signature",
            Refusal::StaleSignature => "stale_signature",
        }
    }
}

/// What verification needs from a source. `secrets` are the source's 1–4 signing secrets in
/// the form the provider hands them out (Stripe's whole `whsec_…`, Standard Webhooks'
/// `whsec_<base64>`, the others as plain text).
pub struct VerifyConfig<'a> {
    pub provider: Provider,
    pub secrets: &'a [String],
    pub tolerance_ms: i64,
    /// Required when `provider` is `hmac`.
    pub hmac: Option<&'a HmacScheme>,
    /// Required for `hubspot` and `twilio`: the URL the provider signed.
    pub public_url: Option<&'a str>,
}

/// The request as signed: its method, headers and raw body.
pub(crate) struct Request<'r> {
    method: &'r str,
    headers: &'r http::HeaderMap,
    body: &'r [u8],
}

/// Verifies one request. The signature is checked first (a bad signature over a stale
/// timestamp is `InvalidSignature`), then the timestamp against `now_ms ± tolerance_ms`.
pub fn verify(
    cfg: &VerifyConfig<'_>,
    method: &str,
    headers: &http::HeaderMap,
    body: &[u8],
    now_ms: i64,
) -> Result<(), Refusal> {
    if cfg.secrets.is_empty() {
        return Err(Refusal::InvalidSignature);
    }
    let req = Request {
        method,
        headers,
        body,
    };
    let signed_at_ms = match cfg.provider {
        Provider::Stripe => stripe::check(cfg, &req)?,
        Provider::StandardWebhooks => standard_webhooks::check(cfg, &req)?,
        Provider::Github => github::check(cfg, &req)?,
        Provider::Shopify => shopify::check(cfg, &req)?,
        Provider::Typeform => typeform::check(cfg, &req)?,
        Provider::Slack => slack::check(cfg, &req)?,
        Provider::Hubspot => hubspot::check(cfg, &req)?,
        Provider::Twilio => twilio::check(cfg, &req)?,
        Provider::Hmac => hmac_scheme::check(cfg, &req)?,
    };
    match signed_at_ms {
        Some(at) if !within_tolerance(at, now_ms, cfg.tolerance_ms) => Err(Refusal::StaleSignature),
        _ => Ok(()),
    }
}

/// `|now_ms - at_ms| <= tolerance_ms`, without overflow; a negative tolerance accepts nothing.
pub fn within_tolerance(at_ms: i64, now_ms: i64, tolerance_ms: i64) -> bool {
    let skew = (i128::from(now_ms) - i128::from(at_ms)).abs();
    skew <= i128::from(tolerance_ms)
}

/// Whether `secret` can verify anything for `provider` (for refusing a source's secret at
/// write time instead of refusing every delivery later): Standard Webhooks secrets must
/// decode; the others must be non-empty.
pub fn secret_usable(provider: Provider, secret: &str) -> bool {
    match provider {
        Provider::StandardWebhooks => standard_webhooks::sw_secret(secret).is_some(),
        _ => !secret.is_empty(),
    }
}
