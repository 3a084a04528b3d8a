//! Secrets the server must read back: signing secrets of intake sources, of forwards and of
//! alerts. (API tokens are not these: the store keeps only their hash.)
//!
//! A [`Secret`] is a string that never shows itself: its `Debug` and `Display` print
//! `[redacted]` and it has no `Serialize`, so it cannot reach a log, an error or an API answer
//! by accident; [`Secret::expose`] is the one way to the value, for signing and verifying.
//! Secrets are versioned per [`SecretOwner`]: adding one may set an expiry on the versions
//! before it, so a rotated secret keeps verifying for a grace period while new messages are
//! signed with the newest. This module owns those types; it must never print a value.
//!
//! A namespace's alert signing secret is one of these ([`SecretKind::Alert`], owned by the
//! namespace name), not a field of the stored policy: both stores keep the policy at rest
//! without it ([`policy_at_rest`]) and put it back into the [`Policy`] that namespace reads,
//! patches and the alert sender see ([`alert_secret_from_stored`]), so the policy text never
//! holds a secret. A policy change writes the secret only when it changed
//! ([`AlertSecretWrite::between`]): one version, replaced on change, removed by `null`.

use idem_core::{AlertSecret, Policy, Timestamp};
use serde_json::Value;

use crate::StoreError;

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
    /// The header values of an action's delivery (`crate::actions`).
    ActionHeaders,
}

impl SecretKind {
    pub const ALL: [SecretKind; 4] = [
        SecretKind::Alert,
        SecretKind::Source,
        SecretKind::Forward,
        SecretKind::ActionHeaders,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SecretKind::Alert => "alert",
            SecretKind::Source => "source",
            SecretKind::Forward => "forward",
            SecretKind::ActionHeaders => "action_headers",
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

/// A new version for [`crate::Store::secret_add`]. With `others_expire_at`, every other
/// version of `owner` still active then expires at that time (rotation: `now + grace`;
/// replacement: `now`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSecret {
    pub owner: SecretOwner,
    pub value: Secret,
    /// This version verifies until then (exclusive); `None`: until replaced.
    pub expires_at: Option<Timestamp>,
    pub others_expire_at: Option<Timestamp>,
}

impl NewSecret {
    /// A version that never expires by itself and leaves the others as they are.
    pub fn new(owner: SecretOwner, value: Secret) -> NewSecret {
        NewSecret {
            owner,
            value,
            expires_at: None,
            others_expire_at: None,
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

/// The owner of a namespace's alert signing secret.
pub fn alert_owner(namespace: &str) -> SecretOwner {
    SecretOwner::new(SecretKind::Alert, namespace)
}

/// The policy text a store keeps: every field but `alert_secret`, which lives in the secrets
/// table (see the module doc). Read back with serde or [`Policy::patch`] over the defaults.
pub fn policy_at_rest(policy: &Policy) -> Result<String, StoreError> {
    let mut v = policy.to_stored_json();
    if let Value::Object(m) = &mut v {
        m.shift_remove("alert_secret");
    }
    serde_json::to_string(&v).map_err(|e| StoreError::Internal(format!("policy encoding: {e}")))
}

/// A stored alert secret as the policy holds it; a value that is not a `whsec_` secret is
/// corrupt data (the message never quotes the value).
pub fn alert_secret_from_stored(value: &str) -> Result<AlertSecret, StoreError> {
    AlertSecret::parse(value)
        .map_err(|_| StoreError::Corrupt("stored alert secret is not a whsec_ secret".into()))
}

/// What a policy change does to the namespace's stored alert secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertSecretWrite<'a> {
    /// Unchanged: nothing to write.
    Keep,
    /// Every version goes and this one is stored.
    Replace(&'a AlertSecret),
    /// Every version goes (`alert_secret: null`).
    Remove,
}

impl<'a> AlertSecretWrite<'a> {
    pub fn between(before: Option<&AlertSecret>, after: Option<&'a AlertSecret>) -> Self {
        match after {
            _ if before == after => AlertSecretWrite::Keep,
            Some(s) => AlertSecretWrite::Replace(s),
            None => AlertSecretWrite::Remove,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const S2: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    /// The member names of the JSON object `v`, in order.
    fn member_names(v: &Value) -> Vec<&str> {
        let obj = v.as_object().expect("obj");
        obj.keys().map(String::as_str).collect()
    }

    #[test]
    fn the_policy_at_rest_keeps_the_member_order_of_the_policy() {
        // Taking `alert_secret` out must not move another member into its place.
        let p = Policy::default()
            .patch(&serde_json::json!({"alert_secret": S1}))
            .expect("patch");
        let stored = p.to_stored_json();
        let mut want = member_names(&stored);
        want.retain(|k| *k != "alert_secret");
        let at_rest: Value =
            serde_json::from_str(&policy_at_rest(&p).expect("text")).expect("json");
        assert_eq!(member_names(&at_rest), want);
    }

    #[test]
    fn the_policy_at_rest_holds_no_alert_secret() {
        let p = Policy::default()
            .patch(&serde_json::json!({"alert_secret": S1, "lease_ms": 5000}))
            .expect("patch");
        let text = policy_at_rest(&p).expect("text");
        assert!(
            !text.contains("alert_secret") && !text.contains("MfKQ"),
            "{text}"
        );
        let back: Policy = serde_json::from_str(&text).expect("serde reads it back");
        assert_eq!(back.lease_ms, 5000);
        assert_eq!(back.alert_secret, None);
        let merged = Policy::default()
            .patch(&serde_json::from_str(&text).expect("json"))
            .expect("patch reads it back");
        assert_eq!(
            Policy {
                alert_secret: p.alert_secret.clone(),
                ..merged
            },
            p
        );
    }

    #[test]
    fn a_secret_is_written_only_when_it_changed() {
        let a = alert_secret_from_stored(S1).expect("s1");
        let b = alert_secret_from_stored(S2).expect("s2");
        assert_eq!(
            AlertSecretWrite::between(None, None),
            AlertSecretWrite::Keep
        );
        assert_eq!(
            AlertSecretWrite::between(Some(&a), Some(&a)),
            AlertSecretWrite::Keep
        );
        assert_eq!(
            AlertSecretWrite::between(Some(&a), Some(&b)),
            AlertSecretWrite::Replace(&b)
        );
        assert_eq!(
            AlertSecretWrite::between(None, Some(&a)),
            AlertSecretWrite::Replace(&a)
        );
        assert_eq!(
            AlertSecretWrite::between(Some(&a), None),
            AlertSecretWrite::Remove
        );
        match alert_secret_from_stored("whsec_short") {
            Err(StoreError::Corrupt(m)) => assert!(!m.contains("short"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

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
