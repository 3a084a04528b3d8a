//! Secrets the server must read back: signing secrets of intake sources, of forwards and of
//! alerts. (API tokens are not these: the store keeps only their hash.)
//!
//! A [`Secret`] is a string that never shows itself: its `Debug` and `Display` print
//! `[redacted]` and it has no `Serialize`, so it cannot reach a log, an error or an API answer
//! by accident; [`Secret::expose`] is the one way to the value, for signing and verifying.
//! Secrets are versioned per [`SecretOwner`]: adding one may set an expiry on the versions
//! before it, so a rotated secret keeps verifying for a grace period while new messages are
//! signed with the newest. This module owns those types; it must never print a value.

use idem_core::Timestamp;

/// A secret value. Compare with [`Secret::expose`] only where the value is needed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself: for signing, verifying and storing only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The last 4 characters (what reads show as a hint); all of it is never shown, and a
    /// secret of 8 characters or fewer shows nothing.
    pub fn hint(&self) -> String {
        let n = self.0.chars().count();
        if n <= 8 {
            return String::new();
        }
        self.0.chars().skip(n - 4).collect()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// What a secret belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretKind {
    /// Signs a namespace's alerts.
    Alert,
    /// Verifies an intake source's inbound signatures.
    Source,
    /// Signs an intake source's forwards.
    Forward,
}

impl SecretKind {
    pub const ALL: [SecretKind; 3] = [SecretKind::Alert, SecretKind::Source, SecretKind::Forward];

    pub fn as_str(self) -> &'static str {
        match self {
            SecretKind::Alert => "alert",
            SecretKind::Source => "source",
            SecretKind::Forward => "forward",
        }
    }

    pub fn parse(s: &str) -> Option<SecretKind> {
        SecretKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The owner of a set of secret versions: a kind and a name (namespace or source).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SecretOwner {
    pub kind: SecretKind,
    pub name: String,
}

impl SecretOwner {
    pub fn new(kind: SecretKind, name: impl Into<String>) -> SecretOwner {
        SecretOwner {
            kind,
            name: name.into(),
        }
    }
}

/// One stored version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSecret {
    pub id: i64,
    pub value: Secret,
    pub created_at: Timestamp,
    /// Verifies until then (exclusive); `None`: until replaced.
    pub expires_at: Option<Timestamp>,
}

impl StoredSecret {
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.expires_at.is_none_or(|t| now < t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_itself() {
        let s = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let stored = StoredSecret {
            id: 1,
            value: s.clone(),
            created_at: Timestamp(0),
            expires_at: None,
        };
        for shown in [format!("{s:?}"), format!("{s}"), format!("{stored:?}")] {
            assert!(!shown.contains("MfKQ"), "{shown}");
            assert!(shown.contains("[redacted]"), "{shown}");
        }
        assert_eq!(s.hint(), "LaSw");
        assert_eq!(Secret::new("short").hint(), "");
        assert_eq!(s.expose(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    }

    #[test]
    fn expiry_is_exclusive() {
        let s = StoredSecret {
            id: 1,
            value: Secret::new("x"),
            created_at: Timestamp(0),
            expires_at: Some(Timestamp(10)),
        };
        assert!(s.is_active(Timestamp(9)));
        assert!(!s.is_active(Timestamp(10)));
    }
}
