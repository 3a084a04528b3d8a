//! Namespace policy: lease length and expiry behaviour, retention clocks, retry budget,
//! daily ceiling, alerting. [`Policy::patch`] merges a JSON object into a policy recursively
//! and strictly: an unknown field or a wrong type/range is an error naming the field, and a
//! refused patch changes nothing.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::egress::{AllowEntry, EgressPolicy, MAX_ALLOW_ENTRIES};
use crate::webhook::AlertSecret;

pub const DAY_MS: i64 = 86_400_000;

/// What happens when a `processing` lease expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseExpiry {
    /// The next claim resumes it (attempt + 1, new token).
    Reclaim,
    /// It moves to `needs_review`: a person decides (right for money paths).
    Review,
}

impl LeaseExpiry {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseExpiry::Reclaim => "reclaim",
            LeaseExpiry::Review => "review",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "reclaim" => Some(LeaseExpiry::Reclaim),
            "review" => Some(LeaseExpiry::Review),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts allowed per budget, the first included.
    pub max_attempts: u32,
    /// Backoff base: attempt n waits up to `base_ms * 2^(n-1)` (full jitter).
    pub base_ms: i64,
    /// Backoff cap.
    pub max_ms: i64,
    /// A retry that cannot start within this long after the budget began is not allowed.
    pub window_ms: i64,
}

/// A namespace policy. Its serde form holds `alert_secret` (the stores keep that one apart, in
/// their secrets table, and put it back on reads); the API shows [`Policy::to_json`], which
/// replaces it with `alert_secret_set`. `Debug` hides the secret ([`AlertSecret`] prints `***`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub lease_ms: i64,
    pub lease_expiry: LeaseExpiry,
    pub retention_ms: i64,
    pub audit_retention_ms: i64,
    pub stuck_after_ms: i64,
    pub retry: RetryPolicy,
    pub daily_limit: Option<u64>,
    pub alert_url: Option<String>,
    /// Signs every alert the Standard Webhooks way. Write-only over the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_secret: Option<AlertSecret>,
    pub destination_idempotent: bool,
    /// Where effects may send requests (the SSRF guard). Stored rows from before the field
    /// existed read as the default.
    #[serde(default)]
    pub egress: EgressPolicy,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            lease_ms: 30_000,
            lease_expiry: LeaseExpiry::Reclaim,
            retention_ms: 30 * DAY_MS,
            audit_retention_ms: 400 * DAY_MS,
            stuck_after_ms: 15 * 60_000,
            retry: RetryPolicy {
                max_attempts: 5,
                base_ms: 1000,
                max_ms: 300_000,
                window_ms: DAY_MS,
            },
            daily_limit: None,
            alert_url: None,
            alert_secret: None,
            destination_idempotent: false,
            egress: EgressPolicy::default(),
        }
    }
}

/// Why a policy patch was refused; `field` is the dotted path (`retry.max_attempts`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown field `{field}`")]
    UnknownField { field: String },
    #[error("invalid value for `{field}`: {message}")]
    InvalidField { field: String, message: String },
}

/// Longest lease or clock accepted anywhere (10 years), so arithmetic never overflows.
pub const MAX_DURATION_MS: i64 = 10 * 366 * DAY_MS;
/// Longest single lease: 7 days.
pub const MAX_LEASE_MS: i64 = 7 * DAY_MS;

fn invalid(field: &str, message: impl Into<String>) -> PolicyError {
    PolicyError::InvalidField {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// A JSON number with no fractional part as an `i64` (`5` and `5.0` are the same JSON
/// number; JSON Schema's `integer` admits both); `None` for anything else or out of range.
pub fn json_integer(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        // i64::MAX as f64 rounds up to 2^63, so the upper bound is exclusive.
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= i64::MIN as f64 && *f < i64::MAX as f64)
            .map(|f| f as i64)
    })
}

fn int_in(v: &Value, field: &str, min: i64, max: i64) -> Result<i64, PolicyError> {
    match json_integer(v) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        Some(_) => Err(invalid(
            field,
            format!("must be an integer from {min} to {max}"),
        )),
        None => Err(invalid(
            field,
            format!("must be an integer from {min} to {max}"),
        )),
    }
}

/// Validates an `alert_url`: absolute http(s) (the scheme in any case), a host and a valid
/// port, no user info (it would be shown to every token that reads the namespace: a secret
/// goes in `alert_secret`), no white space or control characters, at most 2048 characters —
/// the rule of every other URL the API takes.
pub fn validate_alert_url(s: &str) -> Result<(), String> {
    if s.len() > 2048 {
        return Err("must be at most 2048 characters".into());
    }
    let scheme_ok = s
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("http://"))
        || s.get(..8)
            .is_some_and(|p| p.eq_ignore_ascii_case("https://"));
    if !scheme_ok {
        return Err("must be an absolute http:// or https:// URL".into());
    }
    let authority = s.split_once("://").map_or("", |(_, rest)| rest);
    if authority.is_empty()
        || authority.starts_with(['/', '\\'])
        || s.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("must be an absolute http:// or https:// URL with a host".into());
    }
    let u = url::Url::parse(s).map_err(|e| format!("is not an absolute URL ({e})"))?;
    if u.host_str().is_none_or(str::is_empty) {
        return Err("must be an absolute http:// or https:// URL with a host".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(
            "must not carry credentials (user:password@): every token that reads the \
             namespace sees it; sign alerts with alert_secret instead"
                .into(),
        );
    }
    Ok(())
}

impl Policy {
    /// Merges `patch` (a JSON object) into a copy of this policy and validates the result.
    pub fn patch(&self, patch: &Value) -> Result<Policy, PolicyError> {
        let obj = patch
            .as_object()
            .ok_or_else(|| invalid("policy", "must be a JSON object"))?;
        let mut p = self.clone();
        for (k, v) in in_name_order(obj) {
            match k.as_str() {
                "lease_ms" => p.lease_ms = int_in(v, "lease_ms", 1, MAX_LEASE_MS)?,
                "lease_expiry" => {
                    p.lease_expiry = v.as_str().and_then(LeaseExpiry::parse).ok_or_else(|| {
                        invalid("lease_expiry", "must be \"reclaim\" or \"review\"")
                    })?
                }
                "retention_ms" => p.retention_ms = int_in(v, "retention_ms", 0, MAX_DURATION_MS)?,
                "audit_retention_ms" => {
                    p.audit_retention_ms = int_in(v, "audit_retention_ms", 0, MAX_DURATION_MS)?
                }
                "stuck_after_ms" => {
                    p.stuck_after_ms = int_in(v, "stuck_after_ms", 1, MAX_DURATION_MS)?
                }
                "retry" => p.retry = patch_retry(&p.retry, v)?,
                "daily_limit" => {
                    p.daily_limit = match v {
                        Value::Null => None,
                        _ => Some(int_in(v, "daily_limit", 0, i64::MAX)? as u64),
                    }
                }
                "alert_url" => {
                    p.alert_url = match v {
                        Value::Null => None,
                        Value::String(s) => {
                            validate_alert_url(s).map_err(|m| invalid("alert_url", m))?;
                            Some(s.clone())
                        }
                        _ => return Err(invalid("alert_url", "must be a URL string or null")),
                    }
                }
                "alert_secret" => {
                    p.alert_secret = match v {
                        Value::Null => None,
                        Value::String(s) => {
                            Some(AlertSecret::parse(s).map_err(|m| invalid("alert_secret", m))?)
                        }
                        _ => {
                            return Err(invalid(
                                "alert_secret",
                                "must be a whsec_ secret string or null",
                            ))
                        }
                    }
                }
                // Shown on reads, but not a setting: say how to change it instead of calling
                // a field the client just read "unknown".
                "alert_secret_set" => {
                    return Err(invalid(
                        "alert_secret_set",
                        "is read-only: set alert_secret to a secret or to null",
                    ))
                }
                "destination_idempotent" => {
                    p.destination_idempotent = v
                        .as_bool()
                        .ok_or_else(|| invalid("destination_idempotent", "must be true or false"))?
                }
                "egress" => p.egress = patch_egress(&p.egress, v)?,
                other => {
                    return Err(PolicyError::UnknownField {
                        field: other.to_owned(),
                    })
                }
            }
        }
        p.validate()?;
        Ok(p)
    }

    /// Cross-field rules.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.audit_retention_ms < self.retention_ms {
            return Err(invalid(
                "audit_retention_ms",
                "must be at least retention_ms",
            ));
        }
        if self.retry.max_ms < self.retry.base_ms {
            return Err(invalid("retry.max_ms", "must be at least retry.base_ms"));
        }
        Ok(())
    }

    /// The policy as the JSON object the API shows: `alert_secret_set: true|false` in place
    /// of the write-only `alert_secret`.
    pub fn to_json(&self) -> Value {
        let mut v = self.to_stored_json();
        if let Value::Object(m) = &mut v {
            m.shift_remove("alert_secret");
            m.insert(
                "alert_secret_set".into(),
                Value::Bool(self.alert_secret.is_some()),
            );
        }
        v
    }

    /// The policy with every field, the `alert_secret` value included (omitted when unset).
    /// Accepted back by [`Policy::patch`] and by serde. Never for an answer or a log; the
    /// stores keep it without the secret.
    pub fn to_stored_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A patch object's members by name: the answer to a patch with several bad members names
/// the same one (the first by name) however the client ordered them, so a re-serialized
/// request gets the same error.
fn in_name_order(obj: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut members: Vec<(&String, &Value)> = obj.iter().collect();
    members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    members
}

fn patch_retry(current: &RetryPolicy, v: &Value) -> Result<RetryPolicy, PolicyError> {
    let obj: &Map<String, Value> = v
        .as_object()
        .ok_or_else(|| invalid("retry", "must be a JSON object"))?;
    let mut r = current.clone();
    for (k, v) in in_name_order(obj) {
        match k.as_str() {
            "max_attempts" => r.max_attempts = int_in(v, "retry.max_attempts", 1, 1000)? as u32,
            "base_ms" => r.base_ms = int_in(v, "retry.base_ms", 0, MAX_DURATION_MS)?,
            "max_ms" => r.max_ms = int_in(v, "retry.max_ms", 0, MAX_DURATION_MS)?,
            "window_ms" => r.window_ms = int_in(v, "retry.window_ms", 0, MAX_DURATION_MS)?,
            other => {
                return Err(PolicyError::UnknownField {
                    field: format!("retry.{other}"),
                })
            }
        }
    }
    Ok(r)
}

/// Merges the `egress` member: `allow` replaces the list (each entry checked, named by its
/// index), `allow_private` the flag.
fn patch_egress(current: &EgressPolicy, v: &Value) -> Result<EgressPolicy, PolicyError> {
    let obj = v
        .as_object()
        .ok_or_else(|| invalid("egress", "must be a JSON object"))?;
    let mut e = current.clone();
    for (k, v) in in_name_order(obj) {
        match k.as_str() {
            "allow" => {
                let list = v
                    .as_array()
                    .ok_or_else(|| invalid("egress.allow", "must be an array of host patterns"))?;
                if list.len() > MAX_ALLOW_ENTRIES {
                    return Err(invalid(
                        "egress.allow",
                        format!("must have at most {MAX_ALLOW_ENTRIES} entries"),
                    ));
                }
                e.allow = list
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let field = format!("egress.allow[{i}]");
                        let s = item.as_str().ok_or_else(|| {
                            invalid(
                                &field,
                                "must be a string (host, *.suffix, host:port or CIDR)",
                            )
                        })?;
                        AllowEntry::parse(s).map_err(|m| invalid(&field, m.0))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "allow_private" => {
                e.allow_private = v
                    .as_bool()
                    .ok_or_else(|| invalid("egress.allow_private", "must be true or false"))?
            }
            other => {
                return Err(PolicyError::UnknownField {
                    field: format!("egress.{other}"),
                })
            }
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Member order is the client's (JSON objects keep it), but which bad member an error
    /// names must not depend on it: a re-serialized request gets the same answer.
    #[test]
    fn several_bad_members_name_the_same_one_in_any_order() {
        let forward: Value = serde_json::from_str(
            r#"{"retry": {"zz": 1, "base_ms": -1}, "lease_gs": 5000, "lease_ms": 0}"#,
        )
        .expect("json");
        let backward: Value = serde_json::from_str(
            r#"{"lease_ms": 0, "lease_gs": 5000, "retry": {"base_ms": -1, "zz": 1}}"#,
        )
        .expect("json");
        let a = Policy::default().patch(&forward);
        assert_eq!(a, Policy::default().patch(&backward));
        assert_eq!(
            a,
            Err(PolicyError::UnknownField {
                field: "lease_gs".into()
            })
        );
        let a = Policy::default().patch(&json!({"retry": {"zz": 1, "base_ms": -1}}));
        let b = Policy::default().patch(
            &serde_json::from_str::<Value>(r#"{"retry": {"base_ms": -1, "zz": 1}}"#).expect("json"),
        );
        assert_eq!(a, b);
        let e = Policy::default()
            .patch(
                &serde_json::from_str::<Value>(r#"{"egress": {"nope": 1, "allow": 5}}"#)
                    .expect("json"),
            )
            .expect_err("bad");
        assert_eq!(
            e,
            invalid("egress.allow", "must be an array of host patterns")
        );
    }

    #[test]
    fn egress_patches_merge_and_name_the_bad_entry() {
        let p = Policy::default()
            .patch(&json!({"egress": {"allow": ["*.example.com", "127.0.0.1:8080"]}}))
            .expect("ok");
        assert_eq!(p.egress.allow.len(), 2);
        assert!(!p.egress.allow_private);
        let p = p
            .patch(&json!({"egress": {"allow_private": true}}))
            .expect("ok");
        assert_eq!(p.egress.allow.len(), 2, "allow kept");
        assert!(p.egress.allow_private);
        assert_eq!(
            p.to_json()["egress"],
            json!({"allow": ["*.example.com", "127.0.0.1:8080"], "allow_private": true})
        );
        assert_eq!(Policy::default().patch(&p.to_stored_json()), Ok(p.clone()));
        for (patch, field) in [
            (json!({"egress": []}), "egress"),
            (json!({"egress": {"allow": "x"}}), "egress.allow"),
            (
                json!({"egress": {"allow": ["ok.example", 5]}}),
                "egress.allow[1]",
            ),
            (
                json!({"egress": {"allow": ["http://x"]}}),
                "egress.allow[0]",
            ),
            (
                json!({"egress": {"allow": ["10.0.0.0/40"]}}),
                "egress.allow[0]",
            ),
            (
                json!({"egress": {"allow_private": "yes"}}),
                "egress.allow_private",
            ),
        ] {
            match p.patch(&patch) {
                Err(PolicyError::InvalidField { field: f, .. }) => assert_eq!(f, field, "{patch}"),
                other => panic!("{patch}: {other:?}"),
            }
        }
        assert_eq!(
            p.patch(&json!({"egress": {"deny": []}})),
            Err(PolicyError::UnknownField {
                field: "egress.deny".into()
            })
        );
        let many: Vec<String> = (0..=MAX_ALLOW_ENTRIES)
            .map(|i| format!("h{i}.example"))
            .collect();
        assert!(p.patch(&json!({"egress": {"allow": many}})).is_err());
    }

    #[test]
    fn defaults_are_the_specs() {
        let v = Policy::default().to_json();
        assert_eq!(
            v,
            json!({"lease_ms": 30000, "lease_expiry": "reclaim", "retention_ms": 2_592_000_000i64,
                   "audit_retention_ms": 34_560_000_000i64, "stuck_after_ms": 900000,
                   "retry": {"max_attempts": 5, "base_ms": 1000, "max_ms": 300000, "window_ms": 86_400_000},
                   "daily_limit": null, "alert_url": null, "alert_secret_set": false,
                   "destination_idempotent": false,
                   "egress": {"allow": [], "allow_private": false}})
        );
    }

    #[test]
    fn patch_merges_recursively() {
        let p = Policy::default()
            .patch(&json!({"retry": {"max_attempts": 3}, "lease_expiry": "review"}))
            .expect("ok");
        assert_eq!(p.retry.max_attempts, 3);
        assert_eq!(p.retry.base_ms, 1000);
        assert_eq!(p.lease_expiry, LeaseExpiry::Review);
        assert_eq!(p.lease_ms, 30000);
    }

    #[test]
    fn patch_names_unknown_and_invalid_fields() {
        let d = Policy::default();
        assert_eq!(
            d.patch(&json!({"bogus": 1})),
            Err(PolicyError::UnknownField {
                field: "bogus".into()
            })
        );
        assert_eq!(
            d.patch(&json!({"retry": {"nope": 1}})),
            Err(PolicyError::UnknownField {
                field: "retry.nope".into()
            })
        );
        for (patch, field) in [
            (json!({"lease_ms": "x"}), "lease_ms"),
            (json!({"lease_ms": 0}), "lease_ms"),
            (json!({"lease_expiry": "maybe"}), "lease_expiry"),
            (json!({"retry": {"max_attempts": 0}}), "retry.max_attempts"),
            (json!({"retry": 5}), "retry"),
            (json!({"daily_limit": -1}), "daily_limit"),
            (json!({"alert_url": "ftp://x"}), "alert_url"),
            (
                json!({"alert_url": "https://alice:s3cret@hooks.example.com/x"}),
                "alert_url",
            ),
            (
                json!({"alert_url": "https://hooks.example.com@evil.example/x"}),
                "alert_url",
            ),
            (
                json!({"alert_url": "https://hooks.example.com:99999/x"}),
                "alert_url",
            ),
            (json!({"alert_url": "https:///x"}), "alert_url"),
            (json!({"alert_url": "https://a b/x"}), "alert_url"),
            (
                json!({"destination_idempotent": "yes"}),
                "destination_idempotent",
            ),
            (
                json!({"retention_ms": 10, "audit_retention_ms": 5}),
                "audit_retention_ms",
            ),
            (
                json!({"retry": {"base_ms": 10, "max_ms": 5}}),
                "retry.max_ms",
            ),
        ] {
            match d.patch(&patch) {
                Err(PolicyError::InvalidField { field: f, .. }) => assert_eq!(f, field, "{patch}"),
                other => panic!("{patch}: {other:?}"),
            }
        }
        assert!(matches!(
            d.patch(&json!([1])),
            Err(PolicyError::InvalidField { .. })
        ));
    }

    #[test]
    fn integral_floats_are_integers() {
        let p = Policy::default()
            .patch(&json!({"lease_ms": 238.0, "retry": {"max_attempts": 3.0}}))
            .expect("ok");
        assert_eq!((p.lease_ms, p.retry.max_attempts), (238, 3));
        assert!(Policy::default()
            .patch(&json!({"lease_ms": 238.5}))
            .is_err());
        assert_eq!(json_integer(&json!(1e20)), None);
        assert_eq!(json_integer(&json!(-4.0)), Some(-4));
        assert_eq!(json_integer(&json!("4")), None);
    }

    #[test]
    fn nulls_clear_optional_fields() {
        let p = Policy::default()
            .patch(&json!({"daily_limit": 10, "alert_url": "http://127.0.0.1:9/a"}))
            .expect("ok");
        assert_eq!(p.daily_limit, Some(10));
        let p = p
            .patch(&json!({"daily_limit": null, "alert_url": null}))
            .expect("ok");
        assert_eq!(p.daily_limit, None);
        assert_eq!(p.alert_url, None);
    }

    #[test]
    fn an_alert_url_follows_the_rule_of_every_other_url() {
        for ok in [
            "HTTPS://hooks.example.com/x",
            "http://127.0.0.1:9/a?b=c#d",
            "https://[::1]:8443/x",
        ] {
            assert_eq!(validate_alert_url(ok), Ok(()), "{ok}");
        }
        let e = validate_alert_url("https://alice:s3cret@hooks.example.com/x").expect_err("no");
        assert!(!e.contains("s3cret"), "{e}");
    }
}

#[cfg(test)]
mod alert_secret_tests {
    use super::*;
    use serde_json::json;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn alert_secret_is_write_only() {
        let p = Policy::default()
            .patch(&json!({"alert_secret": SECRET}))
            .expect("ok");
        assert_eq!(
            p.alert_secret.as_ref().map(AlertSecret::expose),
            Some(SECRET)
        );
        let shown = p.to_json();
        assert_eq!(shown["alert_secret_set"], true);
        assert!(shown.get("alert_secret").is_none(), "{shown}");
        assert!(!shown.to_string().contains("MfKQ9r8G"), "{shown}");
        assert!(!format!("{p:?}").contains("MfKQ9r8G"));
        let cleared = p.patch(&json!({"alert_secret": null})).expect("ok");
        assert_eq!(cleared.alert_secret, None);
        assert_eq!(cleared.to_json()["alert_secret_set"], false);
    }

    /// The member names of the JSON object `v`, in order.
    fn member_names(v: &serde_json::Value) -> Vec<&str> {
        v.as_object()
            .expect("obj")
            .keys()
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn the_shown_policy_keeps_the_member_order_of_the_stored_one() {
        // Taking `alert_secret` out must not move another member into its place.
        let p = Policy::default()
            .patch(&json!({"alert_secret": SECRET}))
            .expect("ok");
        let stored = p.to_stored_json();
        let mut want = member_names(&stored);
        want.retain(|k| *k != "alert_secret");
        want.push("alert_secret_set");
        assert_eq!(member_names(&p.to_json()), want);
    }

    #[test]
    fn stored_form_round_trips_the_secret_both_ways() {
        let p = Policy::default()
            .patch(&json!({"alert_secret": SECRET, "lease_ms": 5000}))
            .expect("ok");
        let stored = p.to_stored_json();
        assert_eq!(stored["alert_secret"], SECRET);
        assert!(stored.get("alert_secret_set").is_none());
        // serde (SQLite) and patch-over-defaults (PostgreSQL) both read it back.
        let via_serde: Policy = serde_json::from_value(stored.clone()).expect("serde");
        assert_eq!(via_serde, p);
        assert_eq!(Policy::default().patch(&stored).expect("patch"), p);
        // A policy stored before the field existed still reads, without a secret.
        let mut old = Policy::default().to_stored_json();
        old.as_object_mut().expect("obj").remove("alert_secret");
        let old: Policy = serde_json::from_value(old).expect("old row");
        assert_eq!(old.alert_secret, None);
    }

    #[test]
    fn bad_alert_secrets_are_refused_naming_the_field() {
        let with = Policy::default()
            .patch(&json!({"alert_secret": SECRET}))
            .expect("ok");
        for (patch, field) in [
            (
                json!({"alert_secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}),
                "alert_secret",
            ),
            (json!({"alert_secret": "whsec_short"}), "alert_secret"),
            (json!({"alert_secret": 5}), "alert_secret"),
            (json!({"alert_secret": true}), "alert_secret"),
            (json!({"alert_secret_set": false}), "alert_secret_set"),
            (json!({"alert_secret_set": true}), "alert_secret_set"),
        ] {
            match with.patch(&patch) {
                Err(PolicyError::InvalidField { field: f, message }) => {
                    assert_eq!(f, field, "{patch}");
                    assert!(!message.contains("MfKQ9r8G"), "{message}");
                }
                other => panic!("{patch}: {other:?}"),
            }
        }
    }
}
