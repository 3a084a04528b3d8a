//! The retention rule: which records lose their result and which tombstones are deleted, as a
//! pure function of the record's state and age, the namespace policy and the moment.
//!
//! Retention applies only to final states ([`RETAINED_STATES`]), counted from `final_at`, the
//! moment the state was reached. A record past `audit_retention_ms` is deleted with its audit
//! trail; one past `retention_ms` (and not yet past the audit clock) keeps a tombstone whose
//! result and payloads are dropped once. `processing`, `needs_review` and every other state
//! are never touched. Stores run this rule over many rows at once in SQL: the candidate
//! statements select only [`RETAINED_STATES`] and compare `final_at` with the
//! [`Cutoffs`] of each namespace's clocks, which is this function written as a range.

use crate::policy::Policy;
use crate::record::{Record, State};
use crate::time::Timestamp;

/// The only states retention may change or delete: the final ones.
pub const RETAINED_STATES: [State; 2] = [State::Completed, State::FailedPermanent];

/// What retention does to a record at `now` under `policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionAction {
    Keep,
    /// Drop result and payloads, keep the tombstone.
    ExpireResult,
    /// Delete the tombstone and its events.
    Delete,
}

/// The newest `final_at` each retention action applies to at a moment: a record final at or
/// before `expire_at_or_before` loses its result, one final at or before
/// `delete_at_or_before` is deleted. Stores compare `final_at` with these in SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    pub expire_at_or_before: i64,
    pub delete_at_or_before: i64,
}

/// The cutoffs of one pair of clocks at `now` (age ≥ clock ⇔ `final_at` ≤ now − clock).
pub fn cutoffs(retention_ms: i64, audit_retention_ms: i64, now: Timestamp) -> Cutoffs {
    Cutoffs {
        expire_at_or_before: now.0.saturating_sub(retention_ms),
        delete_at_or_before: now.0.saturating_sub(audit_retention_ms),
    }
}

/// The retention rule over the fields it reads (what a store's row holds).
pub fn action_for(
    state: State,
    final_at: Option<Timestamp>,
    result_expired: bool,
    policy: &Policy,
    now: Timestamp,
) -> RetentionAction {
    let Some(final_at) = final_at.filter(|_| RETAINED_STATES.contains(&state)) else {
        return RetentionAction::Keep;
    };
    let c = cutoffs(policy.retention_ms, policy.audit_retention_ms, now);
    if final_at.0 <= c.delete_at_or_before {
        RetentionAction::Delete
    } else if final_at.0 <= c.expire_at_or_before && !result_expired {
        RetentionAction::ExpireResult
    } else {
        RetentionAction::Keep
    }
}

/// What retention does to `rec` at `now` under `policy`.
pub fn retention_action(rec: &Record, policy: &Policy, now: Timestamp) -> RetentionAction {
    action_for(rec.state, rec.final_at, rec.result_expired, policy, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(retention_ms: i64, audit_retention_ms: i64) -> Policy {
        Policy {
            retention_ms,
            audit_retention_ms,
            ..Policy::default()
        }
    }

    #[test]
    fn only_final_states_are_retained() {
        for s in State::ALL {
            assert_eq!(RETAINED_STATES.contains(&s), s.is_final(), "{s:?}");
        }
    }

    /// Every state × expired flag × age around both clocks: the rule acts only on final states,
    /// deletion wins over expiry, and an expired result is never expired again.
    #[test]
    fn the_rule_over_every_state_and_age() {
        let p = policy(100, 1000);
        let final_at = Timestamp(5_000);
        for state in State::ALL {
            for expired in [false, true] {
                for age in [0, 99, 100, 101, 999, 1000, 1001, i64::MAX / 2] {
                    let now = Timestamp(final_at.0 + age);
                    let got = action_for(state, Some(final_at), expired, &p, now);
                    let want = if !state.is_final() {
                        RetentionAction::Keep
                    } else if age >= 1000 {
                        RetentionAction::Delete
                    } else if age >= 100 && !expired {
                        RetentionAction::ExpireResult
                    } else {
                        RetentionAction::Keep
                    };
                    assert_eq!(got, want, "{state:?} expired={expired} age={age}");
                    assert_eq!(
                        action_for(state, None, expired, &p, now),
                        RetentionAction::Keep,
                        "no final_at: nothing to count from"
                    );
                }
            }
        }
    }

    #[test]
    fn cutoffs_are_the_rule_as_a_range() {
        let now = Timestamp(10_000);
        let c = cutoffs(100, 1000, now);
        assert_eq!(c.expire_at_or_before, 9_900);
        assert_eq!(c.delete_at_or_before, 9_000);
        let p = policy(100, 1000);
        for final_at in 8_990..=10_000 {
            let a = action_for(State::Completed, Some(Timestamp(final_at)), false, &p, now);
            assert_eq!(
                a == RetentionAction::Delete,
                final_at <= c.delete_at_or_before
            );
            assert_eq!(
                a == RetentionAction::ExpireResult,
                final_at <= c.expire_at_or_before && final_at > c.delete_at_or_before
            );
        }
        // Far-past clocks do not overflow.
        assert_eq!(
            cutoffs(i64::MAX, i64::MAX, Timestamp(-5)).delete_at_or_before,
            i64::MIN
        );
    }
}
