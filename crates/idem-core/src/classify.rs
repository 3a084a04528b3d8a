//! Failure classification and retry backoff.
//!
//! [`classify`] turns what a worker reports about a failed side effect into one of three
//! classes: `retryable` (it certainly did not happen; try again later), `permanent` (it will
//! never work by retrying) or `ambiguous` (it may have happened; a person decides). Precedence:
//! explicit `kind` > `http_status` > `error.category`. [`backoff_ms`] is exponential backoff
//! with full jitter, the jitter drawn by the caller so the function stays pure.

use serde::{Deserialize, Serialize};

use crate::policy::MAX_DURATION_MS;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Retryable,
    Permanent,
    Ambiguous,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Retryable => "retryable",
            Class::Permanent => "permanent",
            Class::Ambiguous => "ambiguous",
        }
    }
    pub fn parse(s: &str) -> Option<Class> {
        match s {
            "retryable" => Some(Class::Retryable),
            "permanent" => Some(Class::Permanent),
            "ambiguous" => Some(Class::Ambiguous),
            _ => None,
        }
    }
}

/// Everything a `fail` call can tell about the failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailSignal<'a> {
    pub kind: Option<Class>,
    pub http_status: Option<u16>,
    pub category: Option<&'a str>,
    /// Whether the request may have reached the destination (`Some(false)`: it certainly did not).
    pub sent: Option<bool>,
    pub destination_idempotent: bool,
}

/// Why a signal cannot be classified; the API answers 422 `invalid_field` naming `field`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ClassifyError {
    pub field: &'static str,
    pub message: String,
}

/// The classification table of the contract.
pub fn classify(sig: &FailSignal<'_>) -> Result<Class, ClassifyError> {
    if let Some(kind) = sig.kind {
        return Ok(kind);
    }
    let idem = sig.destination_idempotent;
    if let Some(status) = sig.http_status {
        return match status {
            408 | 425 | 429 | 503 => Ok(Class::Retryable),
            500..=599 => Ok(if idem { Class::Retryable } else { Class::Ambiguous }),
            409 => Ok(if idem { Class::Retryable } else { Class::Permanent }),
            400..=499 => Ok(Class::Permanent),
            _ => Err(ClassifyError {
                field: "http_status",
                message: format!(
                    "http_status {status} is not a failure: give a 4xx/5xx status, a kind, or an error category"
                ),
            }),
        };
    }
    match sig.category {
        Some("timeout") | Some("connection") => {
            if sig.sent == Some(false) || idem {
                Ok(Class::Retryable)
            } else {
                Ok(Class::Ambiguous)
            }
        }
        Some("validation") | Some("auth") | Some("business") => Ok(Class::Permanent),
        Some(other) => Err(ClassifyError {
            field: "error.category",
            message: format!(
                "category {other:?} cannot be classified on its own: give kind, http_status, or one of timeout, connection, validation, auth, business"
            ),
        }),
        None => Err(ClassifyError {
            field: "kind",
            message: "nothing to classify: give kind, http_status or error.category".into(),
        }),
    }
}

/// Backoff before attempt `attempt + 1` after attempt `attempt` failed (attempts counted within
/// the current budget, from 1): a uniformly random delay in `[0, min(max_ms, base_ms * 2^(attempt-1))]`,
/// with `jitter` in `[0, 1)` supplied by the caller.
pub fn backoff_ms(attempt_in_budget: u32, base_ms: i64, max_ms: i64, jitter: f64) -> i64 {
    let exp = attempt_in_budget.saturating_sub(1).min(62);
    let ceiling = base_ms
        .saturating_mul(1i64 << exp.min(40))
        .min(max_ms)
        .max(0);
    let j = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    // `ceiling as f64` rounds above 2^53, and the product could land past the ceiling.
    (((ceiling as f64) * j).floor() as i64).clamp(0, ceiling)
}

/// Parses a `Retry-After` value: delta seconds (integer or numeric string) or an HTTP-date in
/// any of the three forms RFC 9110 requires a recipient to accept (IMF-fixdate
/// `Sun, 06 Nov 1994 08:49:37 GMT`, RFC 850 `Sunday, 06-Nov-94 08:49:37 GMT`, asctime
/// `Sun Nov  6 08:49:37 1994`). Returns milliseconds from `now_ms`, never negative (a date in
/// the past means "now") and never more than [`MAX_DURATION_MS`] (ten years): seconds beyond
/// it are refused, a date beyond it counts as ten years (it still means "not for longer than
/// any retry window").
pub fn parse_retry_after(v: &serde_json::Value, now_ms: i64) -> Result<i64, String> {
    const ERR: &str = "must be seconds (integer or string) or an HTTP-date";
    const MAX_SECONDS: u64 = (MAX_DURATION_MS / 1000) as u64;
    match v {
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(s) if s <= MAX_SECONDS => Ok(s as i64 * 1000),
            _ => Err(ERR.into()),
        },
        serde_json::Value::String(s) => {
            let t = s.trim();
            if let Ok(secs) = t.parse::<u64>() {
                if secs <= MAX_SECONDS {
                    return Ok(secs as i64 * 1000);
                }
                return Err(ERR.into());
            }
            let at = httpdate::parse_http_date(t).map_err(|_| ERR.to_owned())?;
            let at_ms = match at.duration_since(std::time::UNIX_EPOCH) {
                Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
                Err(_) => 0,
            };
            Ok(at_ms.saturating_sub(now_ms).clamp(0, MAX_DURATION_MS))
        }
        _ => Err(ERR.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, idem: bool) -> Result<Class, ClassifyError> {
        classify(&FailSignal {
            http_status: Some(status),
            destination_idempotent: idem,
            ..Default::default()
        })
    }
    fn cat(c: &str, sent: Option<bool>, idem: bool) -> Result<Class, ClassifyError> {
        classify(&FailSignal {
            category: Some(c),
            sent,
            destination_idempotent: idem,
            ..Default::default()
        })
    }
    use Class::*;

    #[test]
    fn http_rows_of_the_table() {
        for s in [408, 425, 429, 503] {
            assert_eq!(http(s, false), Ok(Retryable), "{s}");
            assert_eq!(http(s, true), Ok(Retryable), "{s}");
        }
        for s in [500, 502, 504, 507, 599] {
            assert_eq!(http(s, false), Ok(Ambiguous), "{s}");
            assert_eq!(http(s, true), Ok(Retryable), "{s}");
        }
        assert_eq!(http(409, false), Ok(Permanent));
        assert_eq!(http(409, true), Ok(Retryable));
        for s in [400, 401, 403, 404, 410, 422, 499] {
            assert_eq!(http(s, false), Ok(Permanent), "{s}");
            assert_eq!(http(s, true), Ok(Permanent), "{s}");
        }
        for s in [100, 200, 204, 302, 399, 600, 0] {
            assert_eq!(
                http(s, false).map_err(|e| e.field),
                Err("http_status"),
                "{s}"
            );
        }
    }

    #[test]
    fn category_rows_of_the_table() {
        assert_eq!(cat("timeout", None, false), Ok(Ambiguous));
        assert_eq!(cat("timeout", Some(true), false), Ok(Ambiguous));
        assert_eq!(cat("timeout", Some(false), false), Ok(Retryable));
        assert_eq!(cat("timeout", None, true), Ok(Retryable));
        assert_eq!(cat("connection", Some(false), false), Ok(Retryable));
        assert_eq!(cat("connection", None, false), Ok(Ambiguous));
        assert_eq!(cat("connection", Some(true), false), Ok(Ambiguous));
        assert_eq!(cat("connection", None, true), Ok(Retryable));
        for c in ["validation", "auth", "business"] {
            assert_eq!(cat(c, None, false), Ok(Permanent));
            assert_eq!(cat(c, Some(false), true), Ok(Permanent));
        }
        assert_eq!(
            cat("weird", None, false).map_err(|e| e.field),
            Err("error.category")
        );
        assert_eq!(
            classify(&FailSignal::default()).map_err(|e| e.field),
            Err("kind")
        );
    }

    #[test]
    fn precedence_kind_then_status_then_category() {
        let s = FailSignal {
            kind: Some(Permanent),
            http_status: Some(503),
            category: Some("timeout"),
            ..Default::default()
        };
        assert_eq!(classify(&s), Ok(Permanent));
        let s = FailSignal {
            http_status: Some(401),
            category: Some("timeout"),
            ..Default::default()
        };
        assert_eq!(classify(&s), Ok(Permanent));
        // kind wins even over a non-failure status
        let s = FailSignal {
            kind: Some(Retryable),
            http_status: Some(200),
            ..Default::default()
        };
        assert_eq!(classify(&s), Ok(Retryable));
    }

    #[test]
    fn backoff_is_full_jitter_capped() {
        assert_eq!(backoff_ms(1, 1000, 300_000, 0.0), 0);
        assert_eq!(backoff_ms(1, 1000, 300_000, 0.5), 500);
        assert_eq!(backoff_ms(3, 1000, 300_000, 0.999_999), 3999);
        assert_eq!(backoff_ms(30, 1000, 300_000, 0.5), 150_000);
        assert_eq!(backoff_ms(200, 1000, 300_000, 1.0), 300_000);
        assert_eq!(backoff_ms(2, 1000, 300_000, f64::NAN), 0);
    }

    #[test]
    fn backoff_never_exceeds_its_ceiling() {
        // Found by the classify fuzz target: above 2^53 the float product rounded past the cap.
        let (base, max) = (7_161_677_110_013_551_459, 7_161_677_110_013_551_459);
        assert_eq!(backoff_ms(1, base, max, 1.0), max);
        assert!(backoff_ms(1, base, max, 0.9) <= max);
        assert_eq!(backoff_ms(1, i64::MAX, i64::MAX, 1.0), i64::MAX);
        assert_eq!(backoff_ms(1, -5, 10, 0.5), 0);
    }

    #[test]
    fn retry_after_dates_beyond_ten_years_count_as_ten_years() {
        // Found by the retry_after fuzz target: a date in 4828 gave a delay of 2,858 years
        // while the same delay in seconds is refused.
        use serde_json::json;
        let ten_years = crate::policy::MAX_DURATION_MS;
        assert_eq!(
            parse_retry_after(&json!("Tue, 22 Feb 4828 15:54:22 GMT"), 0),
            Ok(ten_years)
        );
        assert_eq!(
            parse_retry_after(&json!("Fri, 31 Dec 9999 23:59:59 GMT"), i64::MIN),
            Ok(ten_years)
        );
        let secs = ten_years / 1000;
        assert_eq!(parse_retry_after(&json!(secs), 0), Ok(ten_years));
        assert!(parse_retry_after(&json!(secs + 1), 0).is_err());
        // Just inside the bound, a date is the exact delay.
        let now = NOV_6_1994 - (ten_years - 1000);
        assert_eq!(
            parse_retry_after(&json!("Sun, 06 Nov 1994 08:49:37 GMT"), now),
            Ok(ten_years - 1000)
        );
    }

    #[test]
    fn retry_after_seconds() {
        use serde_json::json;
        assert_eq!(parse_retry_after(&json!(30), 0), Ok(30_000));
        assert_eq!(parse_retry_after(&json!(0), 0), Ok(0));
        assert_eq!(parse_retry_after(&json!("120"), 0), Ok(120_000));
        assert_eq!(parse_retry_after(&json!(" 7 "), 0), Ok(7_000));
        assert!(parse_retry_after(&json!(-1), 0).is_err());
        assert!(parse_retry_after(&json!(1.5), 0).is_err());
        assert!(parse_retry_after(&json!(u64::MAX), 0).is_err());
        assert!(parse_retry_after(&json!("99999999999"), 0).is_err());
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT` in milliseconds since the epoch.
    const NOV_6_1994: i64 = 784_111_777_000;

    #[test]
    fn retry_after_imf_fixdate() {
        use serde_json::json;
        let now = NOV_6_1994 - 30_000;
        assert_eq!(
            parse_retry_after(&json!("Sun, 06 Nov 1994 08:49:37 GMT"), now),
            Ok(30_000)
        );
        let now = chrono::DateTime::parse_from_rfc2822("Wed, 21 Oct 2015 07:28:00 GMT")
            .expect("d")
            .timestamp_millis();
        assert_eq!(
            parse_retry_after(&json!("Wed, 21 Oct 2015 07:28:30 GMT"), now),
            Ok(30_000)
        );
    }

    #[test]
    fn retry_after_rfc850_date() {
        use serde_json::json;
        let now = NOV_6_1994 - 90_000;
        assert_eq!(
            parse_retry_after(&json!("Sunday, 06-Nov-94 08:49:37 GMT"), now),
            Ok(90_000)
        );
    }

    #[test]
    fn retry_after_asctime_date() {
        use serde_json::json;
        let now = NOV_6_1994 - 5_000;
        assert_eq!(
            parse_retry_after(&json!("Sun Nov  6 08:49:37 1994"), now),
            Ok(5_000)
        );
    }

    #[test]
    fn retry_after_dates_in_the_past_mean_now() {
        use serde_json::json;
        let now = NOV_6_1994 + 60_000;
        for past in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_retry_after(&json!(past), now), Ok(0), "{past}");
        }
    }

    #[test]
    fn retry_after_garbage_is_an_error() {
        use serde_json::json;
        for bad in [
            json!("soon"),
            json!(""),
            json!("Sun, 06 Nov 1994 08:49:37"),
            json!("Sun, 32 Nov 1994 08:49:37 GMT"),
            json!("1994-11-06T08:49:37Z"),
            json!(true),
            json!(null),
            json!({"seconds": 1}),
        ] {
            assert!(parse_retry_after(&bad, 0).is_err(), "{bad}");
        }
    }
}
