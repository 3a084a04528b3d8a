//! What a decision reads beyond the record and the namespace settings.
//!
//! [`crate::apply`] takes today's first-time acquisition count in its context, but only one
//! kind of decision looks at it. Stores read the counter only when [`needs_daily_count`] says
//! so, and fast paths that decide on cached data (without the counter) ask it before trusting
//! their answer: a `false` here guarantees that the decision is the same for every count, so
//! no caller has to know which branch of the decision table reads what.

use crate::decide::Op;
use crate::policy::Policy;
use crate::record::Record;

/// Whether `apply(…, existing, op, ctx)` may depend on `ctx.daily_count`: a claim of a key
/// without a record, in a namespace that is not paused and has a daily ceiling.
pub fn needs_daily_count(
    op: &Op,
    existing: Option<&Record>,
    policy: &Policy,
    paused: bool,
) -> bool {
    matches!(op, Op::Claim(_)) && existing.is_none() && !paused && policy.daily_limit.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{
        apply, ClaimRequest, CompleteRequest, Ctx, FailRequest, HeartbeatRequest, PrepareRequest,
        ResolveAction, ResolveRequest,
    };
    use crate::ids::{Key, LeaseId, Namespace};
    use crate::record::State;
    use crate::time::Timestamp;
    use crate::Class;

    fn ops(token: &str) -> Vec<Op> {
        let token = token.to_owned();
        vec![
            Op::Claim(ClaimRequest::default()),
            Op::Prepare(PrepareRequest {
                token: token.clone(),
                payload: serde_json::json!({"a": 1}),
                approval_required: false,
            }),
            Op::Heartbeat(HeartbeatRequest {
                token: token.clone(),
                lease_ms: None,
            }),
            Op::Complete(CompleteRequest {
                cost: None,
                token: token.clone(),
                result: None,
                external_ref: None,
            }),
            Op::Fail(FailRequest {
                cost: None,
                token,
                kind: Some(Class::Retryable),
                http_status: None,
                retry_after_ms: None,
                sent: None,
                error: None,
            }),
            Op::Resolve(ResolveRequest {
                action: ResolveAction::Retry,
                external_ref: None,
                result: None,
                note: "n".into(),
            }),
            Op::Approve { note: None },
            Op::Reject { note: None },
            Op::Sweep,
        ]
    }

    /// Every operation × no record or a record in each state (lease valid or expired) × no,
    /// a zero or a positive ceiling × paused or not: where the count is not needed, the
    /// decision is identical for a count of 0 and a count past any ceiling.
    #[test]
    fn a_decision_that_does_not_need_the_count_ignores_it() {
        let ns = Namespace::try_from("n").expect("ns");
        let key = Key::try_from("k").expect("key");
        let now = Timestamp(1_000_000);
        let base_policy = Policy::default();
        let lease = LeaseId::random();
        fn ctx<'a>(
            policy: &'a Policy,
            paused: bool,
            n: u64,
            now: Timestamp,
            lease: &LeaseId,
        ) -> Ctx<'a> {
            Ctx {
                now,
                policy,
                paused,
                daily_count: n,
                new_lease_id: lease.clone(),
                jitter: 0.5,
                actor: None,
            }
        }
        // A real record, made by a fresh claim, then put in every state.
        let first = apply(
            &ns,
            &key,
            None,
            &Op::Claim(ClaimRequest::default()),
            &ctx(&base_policy, false, 0, now, &lease),
        );
        let crate::Write::Insert(made) = first.write else {
            panic!("a fresh claim inserts");
        };
        let token = match &first.reply {
            Ok(crate::Reply::Claim(c)) => c.token.as_ref().map(|t| t.secret()),
            _ => None,
        }
        .expect("token");
        let mut records = vec![None];
        for state in State::ALL {
            for lease_valid in [true, false] {
                let mut r = (*made).clone();
                r.state = state;
                r.lease_expires_at = Some(if lease_valid {
                    now.plus_ms(1000)
                } else {
                    Timestamp(now.0 - 1)
                });
                records.push(Some(r));
            }
        }
        let mut needed = 0;
        for limit in [None, Some(0), Some(5)] {
            let policy = Policy {
                daily_limit: limit,
                ..Policy::default()
            };
            for paused in [false, true] {
                for existing in &records {
                    for op in ops(&token) {
                        let low = apply(
                            &ns,
                            &key,
                            existing.as_ref(),
                            &op,
                            &ctx(&policy, paused, 0, now, &lease),
                        );
                        let high = apply(
                            &ns,
                            &key,
                            existing.as_ref(),
                            &op,
                            &ctx(&policy, paused, u64::MAX, now, &lease),
                        );
                        if needs_daily_count(&op, existing.as_ref(), &policy, paused) {
                            needed += 1;
                            // (A ceiling of 0 refuses every count alike.)
                            if limit != Some(0) {
                                assert_ne!(low, high, "a needed count matters: {op:?}");
                            }
                        } else {
                            assert_eq!(low, high, "{op:?} on {existing:?} limit={limit:?}");
                        }
                    }
                }
            }
        }
        // Exactly the unpaused fresh claims under a ceiling (two ceilings).
        assert_eq!(needed, 2);
    }
}
