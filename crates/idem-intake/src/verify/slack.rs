//! `slack`: `X-Slack-Signature: v0=<hex>` over `v0:{timestamp}:{body}`, the timestamp in
//! `X-Slack-Request-Timestamp` (unix seconds).

use super::parts::{decode_hex, one_header, parse_ts, plain_match};
use super::{Refusal, Request, VerifyConfig};
use crate::provider::HmacAlgorithm;

pub(super) fn check(cfg: &VerifyConfig<'_>, req: &Request<'_>) -> Result<Option<i64>, Refusal> {
    let (headers, body) = (req.headers, req.body);
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
    Ok(Some(ts_val.saturating_mul(1000)))
}
