//! `standard_webhooks`: each of `webhook-id`, `webhook-timestamp`, `webhook-signature` is
//! read from its `webhook-` name, else from its `svix-` name. The secret may carry the
//! `whsec_` prefix or not; it is decoded as idem's own Standard Webhooks secrets are
//! ([`idem_core::webhook::AlertSecret`]: standard base64, 24–64 bytes), and a secret that
//! does not decode matches nothing. The timestamp is signed as its decimal value (the
//! official libraries parse it and sign the integer).

use idem_core::webhook::AlertSecret;

use super::parts::{any_equal, decode_b64, opt_header, parse_ts};
use super::{Refusal, Request, VerifyConfig};

/// The `webhook-{name}` header, else `svix-{name}` (Svix's spelling of the same scheme).
fn sw_header<'h>(headers: &'h http::HeaderMap, name: &str) -> Result<Option<&'h str>, Refusal> {
    match opt_header(headers, &format!("webhook-{name}"))? {
        Some(v) => Ok(Some(v)),
        None => opt_header(headers, &format!("svix-{name}")),
    }
}

/// A Standard Webhooks secret, `whsec_` prefix optional.
pub(super) fn sw_secret(secret: &str) -> Option<AlertSecret> {
    match AlertSecret::parse(secret) {
        Ok(s) => Some(s),
        Err(_) if !secret.starts_with(idem_core::webhook::SECRET_PREFIX) => {
            AlertSecret::parse(&format!("{}{secret}", idem_core::webhook::SECRET_PREFIX)).ok()
        }
        Err(_) => None,
    }
}

pub(super) fn check(cfg: &VerifyConfig<'_>, req: &Request<'_>) -> Result<Option<i64>, Refusal> {
    let (secrets, headers, body) = (cfg.secrets, req.headers, req.body);
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
