//! `shopify`: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA256 of the body.

use super::parts::{decode_b64, one_header, plain_match};
use super::{Refusal, Request, VerifyConfig};
use crate::provider::HmacAlgorithm;

pub(super) fn check(cfg: &VerifyConfig<'_>, req: &Request<'_>) -> Result<Option<i64>, Refusal> {
    let (headers, body) = (req.headers, req.body);
    let sig = one_header(headers, "x-shopify-hmac-sha256")?;
    let cand = decode_b64(sig);
    plain_match(cfg.secrets, HmacAlgorithm::Sha256, &[body], &[cand])?;
    Ok(None)
}
