//! Stable keys from identity fields of an event.
//!
//! `key = prefix:v1:v2:…:suffix` when every value is a string or integer of at most 64
//! characters from `[A-Za-z0-9_.-]` (an integer written as a float, `3.0`, is that integer);
//! otherwise (or when asked) the values are hashed:
//! `prefix:<sha256 hex of the JCS array of the values>:suffix`. So e-mail addresses and free
//! text never appear in a key, and the event's member order and formatting never matter.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::fingerprint::canonical_json;
use crate::ids::Key;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeriveError {
    /// 422 `invalid_field`.
    #[error("{message}")]
    InvalidField { field: String, message: String },
    /// 422 `missing_identity_field`: never "skip the gate".
    #[error("identity field {pointer} is missing or null")]
    MissingField { pointer: String },
}

/// A key part written as is: a string or integer of at most 64 characters from
/// `[A-Za-z0-9_.-]` (an integral float, `3.0`, is its integer); `None` when it must be hashed.
/// Derived keys and action keys both read values through this one rule.
pub fn plain(v: &Value) -> Option<String> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        // `3.0` and `1e2` are the integers 3 and 100 spelled another way (a JSON number has
        // one value however it is written): the same key as `3` and `100`.
        Value::Number(n) => integral(n.as_f64()?)?,
        _ => return None,
    };
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    ok.then_some(s)
}

/// The digits of an integral float within the range of i64/u64 (exact: every such float is
/// an integer the cast represents without rounding); `None` for a fraction or a larger value.
fn integral(f: f64) -> Option<String> {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.fract() != 0.0 || !f.is_finite() {
        return None;
    }
    if (-TWO_63..0.0).contains(&f) {
        Some((f as i64).to_string())
    } else if (0.0..2.0 * TWO_63).contains(&f) {
        Some((f as u64).to_string())
    } else {
        None
    }
}

/// The byte offset of the first `~` not followed by `0` or `1` (RFC 6901 allows only the
/// escapes `~0` and `~1`; serde_json would read `~2` literally, silently looking up another
/// member than the one the caller meant).
fn bad_escape(pointer: &str) -> Option<usize> {
    let b = pointer.as_bytes();
    b.iter()
        .enumerate()
        .find(|&(i, &c)| c == b'~' && !matches!(b.get(i + 1), Some(b'0' | b'1')))
        .map(|(i, _)| i)
}

/// Derives the key for `event` from the JSON pointers in `fields` (in that order).
pub fn derive_key(
    event: &Value,
    fields: &[String],
    prefix: Option<&str>,
    suffix: Option<&str>,
    force_hash: bool,
) -> Result<Key, DeriveError> {
    if fields.is_empty() {
        return Err(DeriveError::InvalidField {
            field: "fields".into(),
            message: "give at least one JSON pointer".into(),
        });
    }
    let mut values = Vec::with_capacity(fields.len());
    for (i, p) in fields.iter().enumerate() {
        if !p.starts_with('/') {
            return Err(DeriveError::InvalidField {
                field: format!("fields[{i}]"),
                message: format!("{p:?} is not a JSON pointer (RFC 6901): it must start with '/'"),
            });
        }
        if let Some(pos) = bad_escape(p) {
            return Err(DeriveError::InvalidField {
                field: format!("fields[{i}]"),
                message: format!(
                    "{p:?} is not a JSON pointer (RFC 6901): '~' at byte {pos} must be followed \
                     by '0' (for '~') or '1' (for '/')"
                ),
            });
        }
    }
    // Every pointer is well-formed before any is looked up: a syntax error is reported as
    // such, never masked by a missing value earlier in the list.
    for p in fields {
        match event.pointer(p) {
            None | Some(Value::Null) => {
                return Err(DeriveError::MissingField { pointer: p.clone() })
            }
            Some(v) => values.push(v.clone()),
        }
    }
    for (name, part) in [("prefix", prefix), ("suffix", suffix)] {
        if let Some(s) = part {
            if s.is_empty() || Key::try_from(s).is_err() {
                return Err(DeriveError::InvalidField {
                    field: name.into(),
                    message: "must be 1 or more visible ASCII characters".into(),
                });
            }
        }
    }
    let plain_parts: Option<Vec<String>> = if force_hash {
        None
    } else {
        values.iter().map(plain).collect()
    };
    let middle = match plain_parts {
        Some(parts) => parts.join(":"),
        None => {
            let canon =
                canonical_json(&Value::Array(values)).map_err(|e| DeriveError::InvalidField {
                    field: "event".into(),
                    message: e.to_string(),
                })?;
            hex::encode(Sha256::digest(canon.as_bytes()))
        }
    };
    let mut out = String::new();
    if let Some(p) = prefix {
        out.push_str(p);
        out.push(':');
    }
    out.push_str(&middle);
    if let Some(s) = suffix {
        out.push(':');
        out.push_str(s);
    }
    Key::try_from(out).map_err(|e| DeriveError::InvalidField {
        field: "prefix".into(),
        message: format!("derived key is not valid: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn provider_event_id_with_suffixes() {
        let ev = json!({"id": "evt_1NQ2", "type": "charge.succeeded"});
        assert_eq!(
            derive_key(&ev, &f(&["/id"]), None, Some("crm"), false)
                .expect("k")
                .as_str(),
            "evt_1NQ2:crm"
        );
        assert_eq!(
            derive_key(&ev, &f(&["/id"]), None, Some("receipt"), false)
                .expect("k")
                .as_str(),
            "evt_1NQ2:receipt"
        );
    }

    #[test]
    fn object_id_plus_version_for_updates() {
        let ev = json!({"object": {"id": "order-847", "version": 3}});
        assert_eq!(
            derive_key(
                &ev,
                &f(&["/object/id", "/object/version"]),
                Some("crm-update"),
                None,
                false
            )
            .expect("k")
            .as_str(),
            "crm-update:order-847:3"
        );
    }

    #[test]
    fn cron_job_partition_date() {
        let ev = json!({"job": "renewal-reminders", "partition": 2, "date": "2026-06-22"});
        assert_eq!(
            derive_key(&ev, &f(&["/job", "/partition", "/date"]), None, None, false)
                .expect("k")
                .as_str(),
            "renewal-reminders:2:2026-06-22"
        );
    }

    #[test]
    fn personal_data_and_long_values_are_hashed_stably() {
        let a = json!({"email": "Ann@example.com", "form": "f1"});
        let b: Value =
            serde_json::from_str(r#"{ "form" : "f1", "email":"Ann@example.com" }"#).expect("json");
        let ka = derive_key(&a, &f(&["/email", "/form"]), Some("signup"), None, false).expect("k");
        let kb = derive_key(&b, &f(&["/email", "/form"]), Some("signup"), None, false).expect("k");
        assert_eq!(ka, kb);
        assert!(!ka.as_str().contains('@'));
        assert_eq!(ka.as_str().len(), "signup:".len() + 64);
        let long = json!({"id": "x".repeat(65)});
        assert_eq!(
            derive_key(&long, &f(&["/id"]), None, None, false)
                .expect("k")
                .as_str()
                .len(),
            64
        );
        // field order matters: it is part of the identity
        let kc = derive_key(&a, &f(&["/form", "/email"]), Some("signup"), None, false).expect("k");
        assert_ne!(ka, kc);
    }

    #[test]
    fn a_hashed_key_is_pinned_whatever_the_member_order() {
        // A derived key is the record's key: the value hashed for an object field must stay
        // what idem has always derived, whatever order the event lists the object's members.
        let fields = f(&["/object", "/email"]);
        let want = "signup:01ec5f09fa8c4b2bbd932869aecad66d7fec8beecd02eb792851bf2639a98ff6";
        for text in [
            r#"{"object": {"a": 1, "b": 2}, "email": "Ann@example.com"}"#,
            r#"{"email": "Ann@example.com", "object": {"b": 2, "a": 1}}"#,
        ] {
            let ev: Value = serde_json::from_str(text).expect("json");
            assert_eq!(
                derive_key(&ev, &fields, Some("signup"), None, false)
                    .expect("k")
                    .as_str(),
                want,
                "{text}"
            );
        }
    }

    #[test]
    fn forced_hash_and_non_plain_types() {
        let ev = json!({"id": "abc", "amount": 1.5, "flag": true});
        let k = derive_key(&ev, &f(&["/id"]), None, None, true).expect("k");
        assert_eq!(k.as_str().len(), 64);
        assert_eq!(
            derive_key(&ev, &f(&["/amount"]), None, None, false)
                .expect("k")
                .as_str()
                .len(),
            64
        );
    }

    #[test]
    fn an_integer_spelled_as_a_float_derives_the_same_key() {
        // Found by the derive fuzz target: `3.0` (as Python's json writes a float) gave a
        // hashed key while `3` gave `order-847:3`, so two producers of one event disagreed.
        let fields = f(&["/object/id", "/object/version"]);
        let want = "crm-update:order-847:3";
        for text in [
            r#"{"object": {"id": "order-847", "version": 3}}"#,
            r#"{"object": {"id": "order-847", "version": 3.0}}"#,
            r#"{"object": {"id": "order-847", "version": 0.3e1}}"#,
        ] {
            let ev: Value = serde_json::from_str(text).expect("json");
            assert_eq!(
                derive_key(&ev, &fields, Some("crm-update"), None, false)
                    .expect("k")
                    .as_str(),
                want,
                "{text}"
            );
        }
        for (text, digits) in [
            ("-0.0", "0"),
            ("-2.0", "-2"),
            ("1e19", "10000000000000000000"),
            ("-9.223372036854775808e18", "-9223372036854775808"),
        ] {
            let ev: Value = serde_json::from_str(&format!(r#"{{"n": {text}}}"#)).expect("json");
            assert_eq!(
                derive_key(&ev, &f(&["/n"]), None, None, false)
                    .expect("k")
                    .as_str(),
                digits,
                "{text}"
            );
        }
        // A fraction, or a float beyond u64, is still hashed.
        for text in ["1.5", "1e20", "-1e19"] {
            let ev: Value = serde_json::from_str(&format!(r#"{{"n": {text}}}"#)).expect("json");
            let k = derive_key(&ev, &f(&["/n"]), None, None, false).expect("k");
            assert_eq!(k.as_str().len(), 64, "{text}");
        }
    }

    #[test]
    fn missing_null_and_bad_pointers() {
        let ev = json!({"id": null, "x": 1});
        assert_eq!(
            derive_key(&ev, &f(&["/id"]), None, None, false),
            Err(DeriveError::MissingField {
                pointer: "/id".into()
            })
        );
        assert_eq!(
            derive_key(&ev, &f(&["/nope"]), None, None, false),
            Err(DeriveError::MissingField {
                pointer: "/nope".into()
            })
        );
        assert!(matches!(
            derive_key(&ev, &f(&[""]), None, None, false),
            Err(DeriveError::InvalidField { .. })
        ));
        assert!(matches!(
            derive_key(&ev, &f(&["x"]), None, None, false),
            Err(DeriveError::InvalidField { .. })
        ));
        assert!(matches!(
            derive_key(&ev, &[], None, None, false),
            Err(DeriveError::InvalidField { .. })
        ));
        // RFC 6901 escapes: only `~0` and `~1`; the error names the field and the pointer.
        for bad in ["/data/~2bad", "/x~", "/~a", "/ok/~01/~"] {
            match derive_key(
                &json!({"data": {"~2bad": 1}}),
                &f(&["/x", bad]),
                None,
                None,
                false,
            ) {
                Err(DeriveError::InvalidField { field, message }) => {
                    assert_eq!(field, "fields[1]", "{bad}");
                    assert!(message.contains(bad), "{message}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        let escaped = json!({"a/b": "s", "m~n": "t"});
        assert_eq!(
            derive_key(&escaped, &f(&["/a~1b", "/m~0n"]), None, None, false).map(|k| k.to_string()),
            Ok("s:t".into())
        );
        assert!(matches!(
            derive_key(&ev, &f(&["/x"]), Some("a b"), None, false),
            Err(DeriveError::InvalidField { .. })
        ));
    }
}
