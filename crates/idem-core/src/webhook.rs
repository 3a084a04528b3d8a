//! Alert signing the Standard Webhooks way.
//!
//! A namespace with an [`AlertSecret`] signs every alert: the sender adds `webhook-id`
//! (stable across retries of one alert), `webhook-timestamp` (unix seconds at send time) and
//! `webhook-signature` (`v1,` + base64 of HMAC-SHA256 over `"{id}.{timestamp}.{body}"`, keyed
//! with the secret's decoded bytes). A receiver recomputes it over the exact body bytes it got.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The prefix of a Standard Webhooks secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// Fewest random bytes a secret may carry (the Standard Webhooks minimum).
pub const SECRET_MIN_BYTES: usize = 24;
/// Most random bytes a secret may carry (the Standard Webhooks maximum).
pub const SECRET_MAX_BYTES: usize = 64;

/// The exact set of accepted secrets as a regular expression (for the OpenAPI schema):
/// `whsec_`, 8 to 21 four-character groups of the standard base64 alphabet, and a last
/// partial group of 2 or 3 characters with optional padding, 24 to 64 bytes in all.
pub const SECRET_PATTERN: &str = "^whsec_(?:(?:[A-Za-z0-9+/]{4}){8,20}(?:[A-Za-z0-9+/]{2}={0,2}|[A-Za-z0-9+/]{3}=?)?|(?:[A-Za-z0-9+/]{4}){21}(?:[A-Za-z0-9+/]{2}={0,2})?)$";

/// Standard base64 alphabet without padding, any trailing bits (as the official libraries,
/// which decode with Python's or the platform's lenient decoder).
const UNPADDED: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes standard base64 whose padding may be absent or short (`xx`, `xx=`, `xx==`).
fn decode_lenient(b64: &str) -> Option<Vec<u8>> {
    let data = b64.trim_end_matches('=');
    let pad = b64.len() - data.len();
    let max_pad = match data.len() % 4 {
        0 => 0,
        2 => 2,
        3 => 1,
        _ => return None,
    };
    if pad > max_pad {
        return None;
    }
    UNPADDED.decode(data).ok()
}

/// A namespace's alert signing secret: `whsec_` followed by the standard base64 (padding
/// optional) of 24 to 64 bytes. Its `Debug` never shows the value; it is serialized only into
/// the store, never into an API answer (see [`crate::Policy::to_json`]).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AlertSecret {
    text: String,
    key: Vec<u8>,
}

impl AlertSecret {
    /// Parses and validates a secret; the error says what is wrong, never the value.
    pub fn parse(s: &str) -> Result<AlertSecret, String> {
        let what = format!(
            "must be \"{SECRET_PREFIX}\" followed by the base64 of \
             {SECRET_MIN_BYTES} to {SECRET_MAX_BYTES} random bytes"
        );
        let b64 = s.strip_prefix(SECRET_PREFIX).ok_or_else(|| what.clone())?;
        // Longest valid text: 88 base64 characters for 64 bytes; refuse more before decoding.
        if b64.len() > 88 {
            return Err(what);
        }
        let key = decode_lenient(b64).ok_or_else(|| what.clone())?;
        if !(SECRET_MIN_BYTES..=SECRET_MAX_BYTES).contains(&key.len()) {
            return Err(what);
        }
        Ok(AlertSecret {
            text: s.to_owned(),
            key,
        })
    }

    /// The secret as configured (`whsec_…`): only for storing it.
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// The HMAC key (the decoded bytes after `whsec_`).
    fn key(&self) -> &[u8] {
        &self.key
    }

    fn mac(&self, msg_id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
        // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
        let mut mac = match HmacSha256::new_from_slice(self.key()) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts keys of every length"),
        };
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The `webhook-signature` header value for one message: `v1,<base64 HMAC-SHA256>`.
    pub fn sign(&self, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
        let tag = self.mac(msg_id, timestamp, body).finalize().into_bytes();
        format!("v1,{}", STANDARD.encode(tag))
    }

    /// Whether `signature_header` (space-separated `version,signature` pairs) holds a `v1`
    /// signature of this message, compared in constant time. The timestamp's age is the
    /// receiver's business (Standard Webhooks suggests a 5-minute tolerance).
    pub fn verify(
        &self,
        msg_id: &str,
        timestamp: i64,
        body: &[u8],
        signature_header: &str,
    ) -> bool {
        signature_header.split(' ').any(|pair| {
            let Some(sig) = pair.strip_prefix("v1,") else {
                return false;
            };
            let Some(sig) = decode_lenient(sig) else {
                return false;
            };
            self.mac(msg_id, timestamp, body).verify_slice(&sig).is_ok()
        })
    }
}

impl std::fmt::Debug for AlertSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AlertSecret(***)")
    }
}

impl TryFrom<String> for AlertSecret {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        AlertSecret::parse(&s)
    }
}

impl From<AlertSecret> for String {
    fn from(s: AlertSecret) -> String {
        s.text
    }
}

/// The `webhook-id` of an alert: the same for every delivery attempt of one alert, different
/// for every alert (its outbox id plus its creation time, so a rebuilt database that reuses
/// ids does not collide with earlier messages).
pub fn alert_message_id(alert_id: i64, created_at_ms: i64) -> String {
    format!("msg_{alert_id}_{created_at_ms}")
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks specification.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn signs_the_specification_example() {
        let s = AlertSecret::parse(SECRET).expect("valid");
        assert_eq!(s.sign(ID, TS, BODY), SIG);
    }

    #[test]
    fn verifies_only_the_exact_message() {
        let s = AlertSecret::parse(SECRET).expect("valid");
        assert!(s.verify(ID, TS, BODY, SIG));
        // Among several signatures (key rotation), any v1 match counts.
        assert!(s.verify(ID, TS, BODY, &format!("v1,AAAA v2,xyz {SIG}")));
        assert!(!s.verify(ID, TS, br#"{"test": 2432232315}"#, SIG));
        assert!(!s.verify(ID, TS + 1, BODY, SIG));
        assert!(!s.verify("msg_other", TS, BODY, SIG));
        assert!(!s.verify(ID, TS, BODY, &SIG.replacen("v1,", "v2,", 1)));
        assert!(!s.verify(ID, TS, BODY, "v1,not base64!"));
        let other = AlertSecret::parse("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").expect("valid");
        assert!(!other.verify(ID, TS, BODY, SIG));
    }

    #[test]
    fn secrets_are_whsec_base64_of_24_to_64_bytes() {
        let b64 = |n: usize| STANDARD.encode(vec![7u8; n]);
        for n in [24, 32, 64] {
            let s = format!("whsec_{}", b64(n));
            assert!(AlertSecret::parse(&s).is_ok(), "{n} bytes");
            let unpadded = s.trim_end_matches('=').to_owned();
            assert!(AlertSecret::parse(&unpadded).is_ok(), "{n} bytes unpadded");
        }
        for bad in [
            String::new(),
            "whsec_".into(),
            b64(32),                       // no prefix
            format!("WHSEC_{}", b64(32)),  // wrong prefix
            format!("whsec_{}", b64(23)),  // too short
            format!("whsec_{}", b64(65)),  // too long
            format!("whsec_{}!", b64(32)), // not base64
            format!("whsec_ {}", b64(32)), // space
            format!("whsec_{}", "A".repeat(10_000)),
        ] {
            assert!(AlertSecret::parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn padding_may_be_short_or_absent_but_never_extra() {
        let full = format!("whsec_{}", STANDARD.encode([9u8; 25])); // 25 bytes: "xx==" tail
        assert!(full.ends_with("=="));
        let data = full.trim_end_matches('=');
        for ok in [full.clone(), format!("{data}="), data.to_owned()] {
            assert!(AlertSecret::parse(&ok).is_ok(), "{ok}");
        }
        for bad in [
            format!("{data}==="),
            format!("whsec_{}=", STANDARD.encode([9u8; 24])), // no partial group: no padding
            format!("whsec_{}A", STANDARD.encode([9u8; 24])), // one stray character
        ] {
            assert!(AlertSecret::parse(&bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        /// Everything the published pattern matches is a valid secret (so a client generated
        /// from the OpenAPI document never sends a value the server refuses).
        #[test]
        fn every_string_the_pattern_matches_is_accepted(
            s in proptest::string::string_regex(SECRET_PATTERN.trim_start_matches('^').trim_end_matches('$'))
                .expect("pattern")
        ) {
            proptest::prop_assert!(AlertSecret::parse(&s).is_ok(), "{}", s);
        }

        /// Everything accepted decodes to 24-64 bytes (the reverse direction, by length: the
        /// pattern admits exactly these lengths of well-formed base64).
        #[test]
        fn accepted_secrets_hold_24_to_64_bytes(n in 0usize..80, pad in proptest::bool::ANY) {
            let mut s = format!("whsec_{}", STANDARD.encode(vec![0xa5u8; n]));
            if !pad {
                s = s.trim_end_matches('=').to_owned();
            }
            proptest::prop_assert_eq!(AlertSecret::parse(&s).is_ok(), (24..=64).contains(&n));
        }
    }

    #[test]
    fn debug_and_errors_never_show_the_secret() {
        let s = AlertSecret::parse(SECRET).expect("valid");
        let shown = format!("{s:?} {:?}", Some(s.clone()));
        assert!(!shown.contains("MfKQ9r8G"), "{shown}");
        let e = AlertSecret::parse("whsec_MfKQ9r8GKYqrTwjU").expect_err("short");
        assert!(!e.contains("MfKQ9r8G"), "{e}");
    }

    #[test]
    fn serializes_as_the_configured_text_for_the_store() {
        let s = AlertSecret::parse(SECRET).expect("valid");
        let v = serde_json::to_value(&s).expect("ser");
        assert_eq!(v, serde_json::json!(SECRET));
        let back: AlertSecret = serde_json::from_value(v).expect("de");
        assert_eq!(back, s);
        assert!(serde_json::from_value::<AlertSecret>(serde_json::json!("whsec_x")).is_err());
    }

    #[test]
    fn message_ids_are_stable_per_alert_and_distinct_across_alerts() {
        assert_eq!(alert_message_id(7, 1000), alert_message_id(7, 1000));
        assert_ne!(alert_message_id(7, 1000), alert_message_id(8, 1000));
        assert_ne!(alert_message_id(7, 1000), alert_message_id(7, 1001));
    }
}
