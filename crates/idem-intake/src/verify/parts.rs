//! What every scheme's check is made of: reading a signature header strictly, decoding a
//! candidate leniently, computing an HMAC and comparing in constant time. Nothing here knows
//! a provider.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::Refusal;
use crate::provider::HmacAlgorithm;

/// Longest signature or timestamp header value considered; longer ones are malformed.
pub const MAX_HEADER_BYTES: usize = 8192;
/// Most digits a timestamp may have (unix milliseconds need 13 until the year 2286).
const MAX_TS_DIGITS: usize = 15;

/// The single value of a header: absent, repeated, oversized or non-ASCII → malformed.
pub(super) fn one_header<'h>(headers: &'h http::HeaderMap, name: &str) -> Result<&'h str, Refusal> {
    let mut all = headers.get_all(name).iter();
    let value = all.next().ok_or(Refusal::InvalidSignature)?;
    if all.next().is_some() || value.len() > MAX_HEADER_BYTES {
        return Err(Refusal::InvalidSignature);
    }
    value.to_str().map_err(|_| Refusal::InvalidSignature)
}

/// Like [`one_header`], but `None` when the header is absent (a present malformed one is
/// still an error).
pub(super) fn opt_header<'h>(
    headers: &'h http::HeaderMap,
    name: &str,
) -> Result<Option<&'h str>, Refusal> {
    if headers.contains_key(name) {
        one_header(headers, name).map(Some)
    } else {
        Ok(None)
    }
}

/// A unix timestamp: 1 to 15 ASCII digits.
pub(super) fn parse_ts(ts: &str) -> Result<i64, Refusal> {
    if ts.is_empty() || ts.len() > MAX_TS_DIGITS || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::InvalidSignature);
    }
    ts.parse::<i64>().map_err(|_| Refusal::InvalidSignature)
}

pub(super) fn decode_hex(s: &str) -> Option<Vec<u8>> {
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

pub(super) fn decode_b64(s: &str) -> Option<Vec<u8>> {
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
pub(super) fn any_equal(expected: &[u8], candidates: &[Option<Vec<u8>>]) -> bool {
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
pub(super) fn plain_match(
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
