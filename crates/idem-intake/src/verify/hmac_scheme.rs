//! `hmac` (a scheme the source describes): `prefix` must match exactly; hex digits of either
//! case; when a `timestamp_header` is configured it is required and checked against the
//! tolerance (signed into the MAC only with `signed: "timestamp.body"`, which requires it).

use super::parts::{decode_b64, decode_hex, one_header, parse_ts, plain_match};
use super::{Refusal, Request, VerifyConfig};
use crate::provider::{HmacEncoding, HmacSigned};

pub(super) fn check(cfg: &VerifyConfig<'_>, req: &Request<'_>) -> Result<Option<i64>, Refusal> {
    let scheme = cfg.hmac.ok_or(Refusal::InvalidSignature)?;
    let (secrets, headers, body) = (cfg.secrets, req.headers, req.body);
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
