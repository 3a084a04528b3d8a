//! The `outcome` of an effect (and of an action's delivery): the answer's `outcome` member and
//! the `outcome` label of `idem_effects_total`, one enum so that the contract's list, the
//! metric's label set and the handler cannot drift apart.
//!
//! A leaf: it imports nothing of this crate. What it must never do: hold a rule (which state
//! maps to which outcome is the effect handler's, the claim outcomes are `idem-core`'s).

/// Every `outcome` an effect answers with, in the order the contract lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectOutcome {
    Performed,
    Completed,
    FailedPermanent,
    Backoff,
    NeedsReview,
    InFlight,
    AwaitingApproval,
    Conflict,
    Paused,
    Limited,
}

impl EffectOutcome {
    /// All outcomes, in the contract's order (the OpenAPI enum, the metric's label set).
    pub const ALL: [EffectOutcome; 10] = [
        EffectOutcome::Performed,
        EffectOutcome::Completed,
        EffectOutcome::FailedPermanent,
        EffectOutcome::Backoff,
        EffectOutcome::NeedsReview,
        EffectOutcome::InFlight,
        EffectOutcome::AwaitingApproval,
        EffectOutcome::Conflict,
        EffectOutcome::Paused,
        EffectOutcome::Limited,
    ];

    /// The wire name (`performed`, `in_flight`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            EffectOutcome::Performed => "performed",
            EffectOutcome::Completed => "completed",
            EffectOutcome::FailedPermanent => "failed_permanent",
            EffectOutcome::Backoff => "backoff",
            EffectOutcome::NeedsReview => "needs_review",
            EffectOutcome::InFlight => "in_flight",
            EffectOutcome::AwaitingApproval => "awaiting_approval",
            EffectOutcome::Conflict => "conflict",
            EffectOutcome::Paused => "paused",
            EffectOutcome::Limited => "limited",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_claim_outcome_but_acquired_is_an_effect_outcome() {
        let names: Vec<&str> = EffectOutcome::ALL.iter().map(|o| o.as_str()).collect();
        for o in idem::ClaimOutcome::ALL {
            if o != idem::ClaimOutcome::Acquired {
                assert!(names.contains(&o.as_str()), "{}", o.as_str());
            }
        }
    }
}
