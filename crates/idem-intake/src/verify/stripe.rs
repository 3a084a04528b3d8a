//! `stripe`: `t=…,v1=…[,v1=…]`, items split on `,`, each `key=value` (surrounding spaces
//! ignored); exactly one `t`; other schemes (`v0`, …) are ignored, so a header with no `v1`
//! is `invalid_signature`. The signed text uses `t`'s decimal value (as the official libraries).

use super::parts::{decode_hex, one_header, parse_ts, plain_match};
use super::{Refusal, Request, VerifyConfig};
use crate::provider::HmacAlgorithm;

pub(super) fn check(cfg: &VerifyConfig<'_>, req: &Request<'_>) -> Result<Option<i64>, Refusal> {
    let (secrets, headers, body) = (cfg.secrets, req.headers, req.body);
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
