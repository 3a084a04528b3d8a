//! Signature verification on the raw request bytes, one function for every provider.
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
//! Per provider (the contract's table, plus what the official libraries do):
//! - `stripe`: `t=…,v1=…[,v1=…]`, items split on `,`, each `key=value` (surrounding spaces
//!   ignored); exactly one `t`; other schemes (`v0`, …) are ignored, so a header with no `v1`
//!   is `invalid_signature`. The signed text uses `t`'s decimal value (as the official libraries).
//! - `standard_webhooks`: each of `webhook-id`, `webhook-timestamp`, `webhook-signature` is
//!   read from its `webhook-` name, else from its `svix-` name. The secret may carry the
//!   `whsec_` prefix or not; it is decoded as idem's own Standard Webhooks secrets are
//!   ([`idem_core::webhook::AlertSecret`]: standard base64, 24–64 bytes), and a secret that
//!   does not decode matches nothing. The timestamp is signed as its decimal value (the
//!   official libraries parse it and sign the integer).
//! - `hubspot`: the official clients sign `public_url` as given; HubSpot's documented
//!   algorithm first decodes `%3A %2F %3F %40 %21 %24 %27 %28 %29 %2A %2C %3B` in the URI.
//!   Both forms are accepted (they differ only when `public_url` holds such escapes).
//!   The method is upper-cased.
//! - `twilio`: a form body (`application/x-www-form-urlencoded`, or no content type) is
//!   signed as `public_url` + the parameters sorted by name, each distinct value of a name
//!   sorted, `name+value` appended (the official Python library's order); any other body is
//!   signed as Twilio signs JSON bodies: the URL with `bodySHA256=<hex sha256 of the body>`
//!   appended to its query, and no parameters. Like the official libraries, the URL is tried
//!   as configured, without its port, and with the scheme's default port. A form body is
//!   signed over its *decoded* parameters, so encodings of the same parameters (`%2b` and
//!   `%2B`, another order) verify alike, by Twilio's design.
//! - `hmac`: `prefix` must match exactly; hex digits of either case; when a
//!   `timestamp_header` is configured it is required and checked against the tolerance
//!   (signed into the MAC only with `signed: "timestamp.body"`, which requires it).

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, Mac};
use idem_core::webhook::AlertSecret;
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::provider::{HmacAlgorithm, HmacEncoding, HmacScheme, HmacSigned, Provider};

/// Longest signature or timestamp header value considered; longer ones are malformed.
pub const MAX_HEADER_BYTES: usize = 8192;
/// Most digits a timestamp may have (unix milliseconds need 13 until the year 2286).
const MAX_TS_DIGITS: usize = 15;

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
    let signed_at_ms = match cfg.provider {
        Provider::Stripe => stripe(cfg.secrets, headers, body)?,
        Provider::StandardWebhooks => standard_webhooks(cfg.secrets, headers, body)?,
        Provider::Github => {
            let sig = one_header(headers, "x-hub-signature-256")?;
            let sig = sig
                .strip_prefix("sha256=")
                .ok_or(Refusal::InvalidSignature)?;
            let cand = decode_hex(sig);
            plain_match(cfg.secrets, HmacAlgorithm::Sha256, &[body], &[cand])?;
            None
        }
        Provider::Shopify => {
            let sig = one_header(headers, "x-shopify-hmac-sha256")?;
            let cand = decode_b64(sig);
            plain_match(cfg.secrets, HmacAlgorithm::Sha256, &[body], &[cand])?;
            None
        }
        Provider::Typeform => {
            let sig = one_header(headers, "typeform-signature")?;
            let sig = sig
                .strip_prefix("sha256=")
                .ok_or(Refusal::InvalidSignature)?;
            let cand = decode_b64(sig);
            plain_match(cfg.secrets, HmacAlgorithm::Sha256, &[body], &[cand])?;
            None
        }
        Provider::Slack => {
            let sig = one_header(headers, "x-slack-signature")?;
            let ts = one_header(headers, "x-slack-request-timestamp")?;
            let ts_val = parse_ts(ts)?;
            let sig = sig.strip_prefix("v0=").ok_or(Refusal::InvalidSignature)?;
            let cand = decode_hex(sig);
            plain_match(
                cfg.secrets,
                HmacAlgorithm::Sha256,
                &[b"v0:", ts.as_bytes(), b":", body],
                &[cand],
            )?;
            Some(ts_val.saturating_mul(1000))
        }
        Provider::Hubspot => {
            let url = cfg.public_url.ok_or(Refusal::InvalidSignature)?;
            let sig = one_header(headers, "x-hubspot-signature-v3")?;
            let ts = one_header(headers, "x-hubspot-request-timestamp")?;
            let ts_val = parse_ts(ts)?;
            let cand = decode_b64(sig);
            let method = method.to_ascii_uppercase();
            let decoded = hubspot_decode_uri(url);
            let mut urls = vec![url.to_owned()];
            if decoded != url {
                urls.push(decoded);
            }
            let ok = urls.iter().any(|u| {
                plain_match(
                    cfg.secrets,
                    HmacAlgorithm::Sha256,
                    &[method.as_bytes(), u.as_bytes(), body, ts.as_bytes()],
                    std::slice::from_ref(&cand),
                )
                .is_ok()
            });
            if !ok {
                return Err(Refusal::InvalidSignature);
            }
            Some(ts_val)
        }
        Provider::Twilio => {
            let url = cfg.public_url.ok_or(Refusal::InvalidSignature)?;
            let sig = one_header(headers, "x-twilio-signature")?;
            let cand = decode_b64(sig);
            twilio(cfg.secrets, url, headers, body, cand)?;
            None
        }
        Provider::Hmac => {
            let scheme = cfg.hmac.ok_or(Refusal::InvalidSignature)?;
            hmac_scheme(cfg.secrets, scheme, headers, body)?
        }
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

/// The single value of a header: absent, repeated, oversized or non-ASCII → malformed.
fn one_header<'h>(headers: &'h http::HeaderMap, name: &str) -> Result<&'h str, Refusal> {
    let mut all = headers.get_all(name).iter();
    let value = all.next().ok_or(Refusal::InvalidSignature)?;
    if all.next().is_some() || value.len() > MAX_HEADER_BYTES {
        return Err(Refusal::InvalidSignature);
    }
    value.to_str().map_err(|_| Refusal::InvalidSignature)
}

/// Like [`one_header`], but `None` when the header is absent (a present malformed one is
/// still an error).
fn opt_header<'h>(headers: &'h http::HeaderMap, name: &str) -> Result<Option<&'h str>, Refusal> {
    if headers.contains_key(name) {
        one_header(headers, name).map(Some)
    } else {
        Ok(None)
    }
}

/// A unix timestamp: 1 to 15 ASCII digits.
fn parse_ts(ts: &str) -> Result<i64, Refusal> {
    if ts.is_empty() || ts.len() > MAX_TS_DIGITS || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::InvalidSignature);
    }
    ts.parse::<i64>().map_err(|_| Refusal::InvalidSignature)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s.trim()).ok()
}

/// Standard base64 without padding requirements, trailing bits allowed (as the lenient
/// decoders of the official libraries).
const B64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

fn decode_b64(s: &str) -> Option<Vec<u8>> {
    B64_LENIENT.decode(s.trim()).ok()
}

/// HMAC of the concatenated `parts` under `key`.
pub(crate) fn mac(alg: HmacAlgorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    macro_rules! run {
        ($d:ty) => {{
            // HMAC accepts keys of every length: `new_from_slice` cannot fail.
            match <Hmac<$d> as Mac>::new_from_slice(key) {
                Ok(mut m) => {
                    for p in parts {
                        m.update(p);
                    }
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        }};
    }
    match alg {
        HmacAlgorithm::Sha1 => run!(sha1::Sha1),
        HmacAlgorithm::Sha256 => run!(Sha256),
        HmacAlgorithm::Sha512 => run!(Sha512),
    }
}

/// Whether any candidate equals `expected`, in constant time per comparison.
fn any_equal(expected: &[u8], candidates: &[Option<Vec<u8>>]) -> bool {
    if expected.is_empty() {
        return false;
    }
    let mut found = subtle::Choice::from(0);
    for c in candidates.iter().flatten() {
        found |= expected.ct_eq(c);
    }
    bool::from(found)
}

/// Secrets used as their UTF-8 bytes (every provider but Standard Webhooks).
fn plain_match(
    secrets: &[String],
    alg: HmacAlgorithm,
    parts: &[&[u8]],
    candidates: &[Option<Vec<u8>>],
) -> Result<(), Refusal> {
    if candidates.iter().all(Option::is_none) {
        return Err(Refusal::InvalidSignature);
    }
    let mut ok = false;
    for s in secrets {
        ok |= any_equal(&mac(alg, s.as_bytes(), parts), candidates);
    }
    if ok {
        Ok(())
    } else {
        Err(Refusal::InvalidSignature)
    }
}

fn stripe(
    secrets: &[String],
    headers: &http::HeaderMap,
    body: &[u8],
) -> Result<Option<i64>, Refusal> {
    let header = one_header(headers, "stripe-signature")?;
    let mut t: Option<&str> = None;
    let mut v1 = Vec::new();
    for item in header.split(',') {
        let Some((k, v)) = item.split_once('=') else {
            continue;
        };
        let k = k.trim();
        if k == "t" && t.replace(v.trim()).is_some() {
            // Two timestamps: which one was signed is ambiguous.
            return Err(Refusal::InvalidSignature);
        } else if k == "v1" {
            v1.push(decode_hex(v));
        }
    }
    let t = t.ok_or(Refusal::InvalidSignature)?;
    let t_val = parse_ts(t)?;
    if v1.is_empty() {
        return Err(Refusal::InvalidSignature);
    }
    // Stripe's libraries parse `t` and sign its decimal value.
    let t_text = t_val.to_string();
    plain_match(
        secrets,
        HmacAlgorithm::Sha256,
        &[t_text.as_bytes(), b".", body],
        &v1,
    )?;
    Ok(Some(t_val.saturating_mul(1000)))
}

/// The `webhook-{name}` header, else `svix-{name}` (Svix's spelling of the same scheme).
pub(crate) fn sw_header<'h>(
    headers: &'h http::HeaderMap,
    name: &str,
) -> Result<Option<&'h str>, Refusal> {
    match opt_header(headers, &format!("webhook-{name}"))? {
        Some(v) => Ok(Some(v)),
        None => opt_header(headers, &format!("svix-{name}")),
    }
}

/// A Standard Webhooks secret, `whsec_` prefix optional.
fn sw_secret(secret: &str) -> Option<AlertSecret> {
    match AlertSecret::parse(secret) {
        Ok(s) => Some(s),
        Err(_) if !secret.starts_with(idem_core::webhook::SECRET_PREFIX) => {
            AlertSecret::parse(&format!("{}{secret}", idem_core::webhook::SECRET_PREFIX)).ok()
        }
        Err(_) => None,
    }
}

/// Whether `secret` can verify anything for `provider` (for refusing a source's secret at
/// write time instead of refusing every delivery later): Standard Webhooks secrets must
/// decode; the others must be non-empty.
pub fn secret_usable(provider: Provider, secret: &str) -> bool {
    match provider {
        Provider::StandardWebhooks => sw_secret(secret).is_some(),
        _ => !secret.is_empty(),
    }
}

fn standard_webhooks(
    secrets: &[String],
    headers: &http::HeaderMap,
    body: &[u8],
) -> Result<Option<i64>, Refusal> {
    let id = sw_header(headers, "id")?.ok_or(Refusal::InvalidSignature)?;
    let ts = sw_header(headers, "timestamp")?.ok_or(Refusal::InvalidSignature)?;
    let sigs = sw_header(headers, "signature")?.ok_or(Refusal::InvalidSignature)?;
    let ts_val = parse_ts(ts)?;
    let candidates: Vec<Option<Vec<u8>>> = sigs
        .split(' ')
        .filter_map(|pair| pair.strip_prefix("v1,"))
        .map(decode_b64)
        .collect();
    if candidates.iter().all(Option::is_none) {
        return Err(Refusal::InvalidSignature);
    }
    let mut ok = false;
    for secret in secrets {
        let Some(s) = sw_secret(secret) else {
            continue;
        };
        // The library's own signer gives `v1,<base64>`; its tag is the expected MAC.
        let signed = s.sign(id, ts_val, body);
        let Some(expected) = signed.strip_prefix("v1,").and_then(decode_b64) else {
            continue;
        };
        ok |= any_equal(&expected, &candidates);
    }
    if !ok {
        return Err(Refusal::InvalidSignature);
    }
    Ok(Some(ts_val.saturating_mul(1000)))
}

/// HubSpot's documented URI decoding before signing (v3).
pub fn hubspot_decode_uri(uri: &str) -> String {
    const MAP: [(&str, char); 12] = [
        ("3A", ':'),
        ("2F", '/'),
        ("3F", '?'),
        ("40", '@'),
        ("21", '!'),
        ("24", '$'),
        ("27", '\''),
        ("28", '('),
        ("29", ')'),
        ("2A", '*'),
        ("2C", ','),
        ("3B", ';'),
    ];
    let mut out = String::with_capacity(uri.len());
    let mut rest = uri;
    while let Some(pos) = rest.find('%') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let code = after.get(..2).map(str::to_ascii_uppercase);
        match code.and_then(|c| MAP.iter().find(|(k, _)| *k == c)) {
            Some((_, ch)) => {
                out.push(*ch);
                rest = &after[2..];
            }
            None => {
                out.push('%');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The URL variants Twilio's libraries try: as given, without the port, with the default port.
pub fn twilio_url_variants(url: &str) -> Vec<String> {
    let mut out = vec![url.to_owned()];
    let Some(scheme_end) = url.find("://") else {
        return out;
    };
    let scheme = &url[..scheme_end];
    let auth_start = scheme_end + 3;
    let auth_end = url[auth_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| auth_start + i);
    let authority = &url[auth_start..auth_end];
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    let hostport = &authority[host_start..];
    // The port is after the last ':' that follows any IPv6 literal's ']'.
    let port_colon = match hostport.rfind(']') {
        Some(b) => hostport[b..].rfind(':').map(|i| b + i),
        None => hostport.rfind(':'),
    };
    let prefix = &url[..auth_start + host_start];
    let suffix = &url[auth_end..];
    let variant = match port_colon {
        Some(c) => format!("{prefix}{}{suffix}", &hostport[..c]),
        None => {
            let port = if scheme.eq_ignore_ascii_case("https") {
                443
            } else {
                80
            };
            format!("{prefix}{hostport}:{port}{suffix}")
        }
    };
    if variant != url {
        out.push(variant);
    }
    out
}

/// Whether a Twilio request's body is signed as form parameters.
fn is_form(headers: &http::HeaderMap) -> bool {
    match headers.get(http::header::CONTENT_TYPE) {
        None => true,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.split(';').next())
            .is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            }),
    }
}

/// The text Twilio signs for a form body after the URL: sorted names, each name's distinct
/// values sorted, `name+value` each.
pub fn twilio_params_text(body: &[u8]) -> String {
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    pairs.sort();
    pairs.dedup();
    let mut s = String::new();
    for (k, v) in pairs {
        s.push_str(&k);
        s.push_str(&v);
    }
    s
}

/// The URL Twilio signs for a JSON (non-form) body: `bodySHA256` appended to the query.
pub fn twilio_json_url(url: &str, body: &[u8]) -> String {
    let hash = hex::encode(Sha256::digest(body));
    let (base, frag) = match url.find('#') {
        Some(i) => (&url[..i], &url[i..]),
        None => (url, ""),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}bodySHA256={hash}{frag}")
}

fn twilio(
    secrets: &[String],
    url: &str,
    headers: &http::HeaderMap,
    body: &[u8],
    cand: Option<Vec<u8>>,
) -> Result<(), Refusal> {
    let cands = [cand];
    let ok = if is_form(headers) {
        let params = twilio_params_text(body);
        twilio_url_variants(url).iter().any(|u| {
            plain_match(
                secrets,
                HmacAlgorithm::Sha1,
                &[u.as_bytes(), params.as_bytes()],
                &cands,
            )
            .is_ok()
        })
    } else {
        twilio_url_variants(url).iter().any(|u| {
            let signed = twilio_json_url(u, body);
            plain_match(secrets, HmacAlgorithm::Sha1, &[signed.as_bytes()], &cands).is_ok()
        })
    };
    if ok {
        Ok(())
    } else {
        Err(Refusal::InvalidSignature)
    }
}

fn hmac_scheme(
    secrets: &[String],
    scheme: &HmacScheme,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Result<Option<i64>, Refusal> {
    let name = http::HeaderName::from_bytes(scheme.header.as_bytes())
        .map_err(|_| Refusal::InvalidSignature)?;
    let sig = one_header(headers, name.as_str())?;
    let sig = match scheme.prefix.as_deref() {
        Some(p) if !p.is_empty() => sig.strip_prefix(p).ok_or(Refusal::InvalidSignature)?,
        _ => sig,
    };
    let cand = match scheme.encoding {
        HmacEncoding::Hex => decode_hex(sig),
        HmacEncoding::Base64 => decode_b64(sig),
    };
    let ts = match scheme.timestamp_header.as_deref() {
        Some(h) => {
            let name = http::HeaderName::from_bytes(h.as_bytes())
                .map_err(|_| Refusal::InvalidSignature)?;
            let ts = one_header(headers, name.as_str())?;
            Some((ts, parse_ts(ts)?))
        }
        None => None,
    };
    match scheme.signed {
        HmacSigned::Body => plain_match(secrets, scheme.algorithm, &[body], &[cand])?,
        HmacSigned::TimestampBody => {
            let (text, _) = ts.ok_or(Refusal::InvalidSignature)?;
            plain_match(
                secrets,
                scheme.algorithm,
                &[text.as_bytes(), b".", body],
                &[cand],
            )?
        }
    }
    Ok(ts.map(|(_, v)| v.saturating_mul(1000)))
}
