//! `hubspot`: the official clients sign `public_url` as given; HubSpot's documented
//! algorithm first decodes `%3A %2F %3F %40 %21 %24 %27 %28 %29 %2A %2C %3B` in the URI.
//! Both forms are accepted (they differ only when `public_url` holds such escapes).
//! The method is upper-cased.

use super::parts::{decode_b64, one_header, parse_ts, plain_match};
use super::{Refusal, Request, VerifyConfig};
use crate::provider::HmacAlgorithm;

pub(super) fn check(cfg: &VerifyConfig<'_>, req: &Request<'_>) -> Result<Option<i64>, Refusal> {
    let (method, headers, body) = (req.method, req.headers, req.body);
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
    Ok(Some(ts_val))
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
