//! Validated identifiers. An invalid value cannot be constructed, so nothing downstream
//! re-checks: a [`Key`] is always 1–255 bytes of visible ASCII, a [`Namespace`] always a safe
//! path segment, a [`Token`] always parses into the attempt it fences and its lease id.

use std::fmt;

use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Why an identifier was refused. The message is shown to the caller as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("key must be 1 to 255 bytes, got {0}")]
    KeyLength(usize),
    #[error(
        "key may only contain visible ASCII (0x21-0x7E); byte {byte:#04x} at position {pos} is not"
    )]
    KeyByte { byte: u8, pos: usize },
    #[error("namespace must be 1 to 128 characters, got {0}")]
    NamespaceLength(usize),
    #[error("namespace may only contain A-Z a-z 0-9 . _ - : ; {0:?} is not allowed")]
    NamespaceChar(char),
}

/// The identity of one business operation (never of an attempt): 1–255 bytes, 0x21–0x7E.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The key as it may appear in logs, alerts and metrics exemplars: its first 6
    /// characters, `…`, and the first 8 hex digits of its SHA-256.
    pub fn masked(&self) -> String {
        mask_key(&self.0)
    }
    /// Full SHA-256 hex of the key (alerts carry it so an operator can match it).
    pub fn sha256_hex(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }
}

/// Masks any key-like text for logs: first 6 characters, `…`, first 8 hex of its SHA-256.
pub fn mask_key(key: &str) -> String {
    let head = key.char_indices().nth(6).map_or(key.len(), |(at, _)| at);
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(head + '…'.len_utf8() + 8);
    out.push_str(&key[..head]);
    out.push('…');
    out.push_str(&hex::encode(&digest[..4]));
    out
}

impl TryFrom<&str> for Key {
    type Error = ValidationError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        let bytes = s.as_bytes();
        if bytes.is_empty() || bytes.len() > 255 {
            return Err(ValidationError::KeyLength(bytes.len()));
        }
        if let Some((pos, &byte)) = bytes
            .iter()
            .enumerate()
            .find(|(_, b)| !(0x21..=0x7e).contains(*b))
        {
            return Err(ValidationError::KeyByte { byte, pos });
        }
        Ok(Key(s.to_owned()))
    }
}

impl TryFrom<String> for Key {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Key::try_from(s.as_str())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Key {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// A tenant / workflow scope: 1–128 characters of `A-Z a-z 0-9 . _ - :`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(String);

impl Namespace {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Namespace {
    type Error = ValidationError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        let n = s.chars().count();
        if n == 0 || n > 128 {
            return Err(ValidationError::NamespaceLength(n));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
        {
            return Err(ValidationError::NamespaceChar(c));
        }
        Ok(Namespace(s.to_owned()))
    }
}

impl TryFrom<String> for Namespace {
    type Error = ValidationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Namespace::try_from(s.as_str())
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Namespace {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// The random half of a fencing token: 32 lowercase hex digits (128 bits).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseId(String);

impl LeaseId {
    /// A fresh random lease id.
    pub fn random() -> Self {
        let bytes: [u8; 16] = rand::random();
        LeaseId(hex::encode(bytes))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// Rebuilds a lease id read back from storage (already validated when written).
    pub fn from_stored(s: String) -> Self {
        LeaseId(s)
    }
}

impl fmt::Debug for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A lease id is half a bearer credential: never print it.
        f.write_str("LeaseId(…)")
    }
}

/// The fencing token handed to the holder of a lease: `<attempt>.<lease id>`. Every worker
/// write carries it; it is valid only while the record's attempt and lease id match.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub attempt: u32,
    pub lease_id: LeaseId,
}

impl Token {
    pub fn new(attempt: u32, lease_id: LeaseId) -> Self {
        Token { attempt, lease_id }
    }
    /// Parses a token string; `None` for anything that is not one (made-up tokens are then
    /// treated as lost leases by the rules, not as bad input).
    pub fn parse(s: &str) -> Option<Token> {
        let (a, l) = s.split_once('.')?;
        let attempt: u32 = a.parse().ok()?;
        if l.len() != 32 || !l.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        Some(Token {
            attempt,
            lease_id: LeaseId(l.to_owned()),
        })
    }
    /// The opaque string form given to the client.
    pub fn secret(&self) -> String {
        format!("{}.{}", self.attempt, self.lease_id.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(attempt {}, …)", self.attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_accepts_visible_ascii_only() {
        assert!(Key::try_from("evt_123:charge").is_ok());
        assert!(Key::try_from("!~").is_ok());
        assert_eq!(Key::try_from(""), Err(ValidationError::KeyLength(0)));
        assert!(matches!(
            Key::try_from("a b"),
            Err(ValidationError::KeyByte { byte: 0x20, pos: 1 })
        ));
        assert!(matches!(
            Key::try_from("é"),
            Err(ValidationError::KeyByte { .. })
        ));
        assert!(matches!(
            Key::try_from("a\x7f"),
            Err(ValidationError::KeyByte { .. })
        ));
        assert!(Key::try_from("k".repeat(255).as_str()).is_ok());
        assert_eq!(
            Key::try_from("k".repeat(256).as_str()),
            Err(ValidationError::KeyLength(256))
        );
    }

    #[test]
    fn namespace_is_a_safe_segment() {
        assert!(Namespace::try_from("payments.stripe-prod_1:eu").is_ok());
        assert!(Namespace::try_from("").is_err());
        assert!(Namespace::try_from("a/b").is_err());
        assert!(Namespace::try_from("n".repeat(129)).is_err());
    }

    #[test]
    fn masked_key_is_six_characters_and_eight_hex_digits_of_the_hash() {
        let by_format = |key: &str| {
            let head: String = key.chars().take(6).collect();
            let digest = hex::encode(Sha256::digest(key.as_bytes()));
            format!("{head}…{}", &digest[..8])
        };
        for key in [
            "",
            "a",
            "abcdef",
            "abcdefg",
            "évènement",
            "😀😀😀😀😀😀😀",
            "ab😀cdefg",
            "stripe:evt_1",
        ] {
            assert_eq!(mask_key(key), by_format(key), "{key:?}");
        }
    }

    #[test]
    fn masked_key_shape() {
        let m = mask_key("evt_123456:charge");
        assert!(m.starts_with("evt_12…"));
        assert_eq!(m.chars().count(), 6 + 1 + 8);
        assert_eq!(
            mask_key("ab"),
            format!("ab…{}", &hex::encode(Sha256::digest(b"ab"))[..8])
        );
    }

    #[test]
    fn token_round_trips_and_rejects_garbage() {
        let t = Token::new(3, LeaseId::random());
        let parsed = Token::parse(&t.secret()).expect("own token parses");
        assert_eq!(parsed, t);
        assert!(Token::parse("nope").is_none());
        assert!(Token::parse("1.xyz").is_none());
        assert!(Token::parse("x.00000000000000000000000000000000").is_none());
        assert!(!format!("{t:?}").contains(t.lease_id.as_str()));
    }
}
