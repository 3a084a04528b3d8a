//! Payload fingerprints: SHA-256 (lowercase hex) of the RFC 8785 (JCS) canonical JSON of the
//! operation's payload, so that member order, whitespace and number spelling never matter and
//! "same key, different data" is detected as a conflict.

use std::fmt;

use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FingerprintError {
    #[error("fingerprint must be 64 hex digits (SHA-256)")]
    Malformed,
    #[error("payload cannot be canonicalized: {0}")]
    Canonicalization(String),
}

impl Fingerprint {
    /// Fingerprints a JSON payload.
    pub fn of_payload(payload: &serde_json::Value) -> Result<Self, FingerprintError> {
        let canonical = canonical_json(payload)?;
        Ok(Fingerprint(hex::encode(Sha256::digest(
            canonical.as_bytes(),
        ))))
    }

    /// Accepts a precomputed fingerprint (64 hex digits, either case; stored lowercase).
    pub fn parse(s: &str) -> Result<Self, FingerprintError> {
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Fingerprint(s.to_ascii_lowercase()))
        } else {
            Err(FingerprintError::Malformed)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// RFC 8785 canonical JSON text of a value.
pub fn canonical_json(value: &serde_json::Value) -> Result<String, FingerprintError> {
    crate::jcs::to_string(value).map_err(|e| FingerprintError::Canonicalization(e.to_string()))
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fp(s: &str) -> Fingerprint {
        Fingerprint::of_payload(&serde_json::from_str(s).expect("test json")).expect("fp")
    }

    #[test]
    fn member_order_and_whitespace_do_not_matter() {
        assert_eq!(
            fp(r#"{"a":1,"b":[1,2,{"y":true,"x":null}]}"#),
            fp(r#"{ "b": [1, 2, {"x": null, "y": true}], "a": 1 }"#)
        );
    }

    #[test]
    fn number_spelling_is_canonical() {
        assert_eq!(fp(r#"{"amount":1.0}"#), fp(r#"{"amount":1}"#));
        assert_eq!(fp(r#"{"amount":1e2}"#), fp(r#"{"amount":100}"#));
    }

    #[test]
    fn a_long_double_reads_exactly_whatever_its_spelling() {
        // serde_json's default number parser misreads this one by one unit in the last
        // place (...825e-75); the exact parser (`float_roundtrip`) keeps it, so both
        // spellings are one value, one canonical text and one fingerprint.
        let v: serde_json::Value =
            serde_json::from_str(r#"{"x":1.0715660391465826e-75}"#).expect("json");
        assert_eq!(
            canonical_json(&v).expect("jcs"),
            r#"{"x":1.0715660391465826e-75}"#
        );
        assert_eq!(
            fp(r#"{"x":1.0715660391465826e-75}"#),
            fp(r#"{"x":0.10715660391465826e-74}"#)
        );
        assert_eq!(
            fp(r#"{"x":-1.81996730402717e-179}"#),
            fp(r#"{"x":-181996730402717e-193}"#)
        );
    }

    #[test]
    fn different_data_differs() {
        assert_ne!(fp(r#"{"amount":100}"#), fp(r#"{"amount":101}"#));
        assert_ne!(fp(r#"{"a":"1"}"#), fp(r#"{"a":1}"#));
    }

    #[test]
    fn rfc8785_known_vector() {
        // RFC 8785 §3.2.2 sorting and escaping rules.
        let v = json!({"b": "\u{20ac}", "a": "\n", "c": [null, true, false]});
        assert_eq!(
            canonical_json(&v).expect("jcs"),
            "{\"a\":\"\\n\",\"b\":\"€\",\"c\":[null,true,false]}"
        );
        assert_eq!(
            fp("{}").as_str(),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn fingerprints_are_pinned_whatever_the_member_order() {
        // Fingerprints are stored on records and compared with every later request of the
        // key: these values are what idem has always computed, so a change of the JSON
        // library or of how objects keep their members must leave them as they are.
        let pinned = [
            (
                r#"{"a":1,"b":2}"#,
                r#"{"b":2,"a":1}"#,
                r#"{"a":1,"b":2}"#,
                "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777",
            ),
            (
                r#"{"charge_id":"ch_1","amount_cents":4200,"meta":{"z":[{"y":1,"x":2}],"a":null}}"#,
                r#"{"meta":{"a":null,"z":[{"x":2,"y":1}]},"amount_cents":4200,"charge_id":"ch_1"}"#,
                r#"{"amount_cents":4200,"charge_id":"ch_1","meta":{"a":null,"z":[{"x":2,"y":1}]}}"#,
                "1c3492aaeb0a224542f7e67ccdbd11fc7226746c9a76d25cdc4c34a1c1cf8641",
            ),
            // RFC 8785 sorts by UTF-16 code units: U+1F600 (a surrogate pair, 0xD83D...)
            // comes before U+FF21, the reverse of their UTF-8 byte order.
            (
                "{\"\u{ff21}\":1,\"\u{1f600}\":2,\"\u{e9}\":3}",
                "{\"\u{e9}\":3,\"\u{1f600}\":2,\"\u{ff21}\":1}",
                "{\"\u{e9}\":3,\"\u{1f600}\":2,\"\u{ff21}\":1}",
                "1386942e6e1b61405430be569468440a43105f7fb3b4b2d6ef57b6e42d883259",
            ),
        ];
        for (one, other, canonical, want) in pinned {
            let v: serde_json::Value = serde_json::from_str(one).expect("json");
            assert_eq!(canonical_json(&v).expect("jcs"), canonical, "{one}");
            assert_eq!(fp(one).as_str(), want, "{one}");
            assert_eq!(fp(other).as_str(), want, "{other}");
        }
        // The same members inserted in two orders are one value and one fingerprint.
        let ab = json!({"a": 1, "b": 2});
        let ba = json!({"b": 2, "a": 1});
        assert_eq!(ab, ba);
        assert_eq!(
            Fingerprint::of_payload(&ab).expect("fp"),
            Fingerprint::of_payload(&ba).expect("fp")
        );
    }

    #[test]
    fn precomputed_is_normalized() {
        let upper = "A".repeat(64);
        assert_eq!(
            Fingerprint::parse(&upper).expect("ok").as_str(),
            "a".repeat(64)
        );
        assert!(Fingerprint::parse("abc").is_err());
        assert!(Fingerprint::parse(&"g".repeat(64)).is_err());
    }
}
