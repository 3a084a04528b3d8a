//! SQL spellings of the domain's names, built from `idem_core` so that no statement of any
//! backend spells a state, a lease-expiry mode or an event type by hand.
//!
//! Backends format their statements with these once (a `LazyLock`), so the names in SQL can
//! never drift from [`State::as_str`] and friends. Only names from the closed enums pass
//! through here (lowercase ASCII and `_`), never user data: quoting them is exact.

use idem_core::{EventType, LeaseExpiry, State, RETAINED_STATES};

/// `'name'`: an SQL string literal of a domain name.
fn quote(name: &str) -> String {
    debug_assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
    format!("'{name}'")
}

/// `'processing'`.
pub fn state(s: State) -> String {
    quote(s.as_str())
}

/// `'completed', 'failed_permanent'`: a list for `state IN (…)`.
pub fn states(list: &[State]) -> String {
    list.iter()
        .map(|s| state(*s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The states retention may touch ([`RETAINED_STATES`]), for `state IN (…)`.
pub fn retained_states() -> String {
    states(&RETAINED_STATES)
}

/// `'review'`.
pub fn lease_expiry(l: LeaseExpiry) -> String {
    quote(l.as_str())
}

/// `'result_expired'`.
pub fn event_type(e: EventType) -> String {
    quote(e.as_str())
}

/// The columns of a stored record, in the order every backend binds and reads them.
pub const RECORD_COLUMNS: [&str; 34] = [
    "namespace",
    "key",
    "state",
    "attempt",
    "fingerprint",
    "owner",
    "correlation_id",
    "lease_expires_at",
    "not_before",
    "prepared_payload",
    "result",
    "result_expired",
    "external_ref",
    "error_category",
    "error_message",
    "error_http_status",
    "created_at",
    "updated_at",
    "lease_id",
    "lease_expiry",
    "reported",
    "budget_base",
    "window_start",
    "final_at",
    "active_at",
    "review_reason",
    "stuck_alerted",
    "version",
    // cost and recovery
    "cost_tokens",
    "cost_usd_nanos",
    "retry_tokens",
    "retry_usd_nanos",
    "review_since",
    // effects
    "request",
];

/// The hourly stats bucket upsert, the same text on both stores (`$n` placeholders work in
/// SQLite too): namespace, hour, then the six counters.
pub const BUMP_NS_STATS_COLUMNS: &str =
    "acquired_first, acquired_retry, tokens, usd_nanos, retry_tokens, retry_usd_nanos";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_as_the_domain_spells_them() {
        assert_eq!(state(State::Processing), "'processing'");
        assert_eq!(retained_states(), "'completed', 'failed_permanent'");
        assert_eq!(
            states(&State::ALL),
            "'processing', 'prepared', 'awaiting_approval', 'completed', 'failed_retryable', \
             'failed_permanent', 'needs_review'"
        );
        assert_eq!(lease_expiry(LeaseExpiry::Review), "'review'");
        assert_eq!(event_type(EventType::ResultExpired), "'result_expired'");
    }
}
