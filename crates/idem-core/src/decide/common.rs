//! What the worker-write families share about the holder of a lease: whether it may still
//! report on a record, and how the cost a report carries is booked.
//!
//! This module sits below `worker`, `complete` and `effect` and imports none of them; it
//! decides nothing on its own and must never write a record or an event beyond the cost it is
//! handed.

use crate::record::{AttemptCost, EventDraft, Record, ReviewReason, State};

/// A record the current token holder may still write to: leased states, and `needs_review`
/// reached while the holder had not reported yet (a late report resolves the doubt). That is
/// lease expiry or stuck detection, and also a claim that found the lease expired but could
/// not resume it because the budget was spent: nobody acquired since, so the holder's token is
/// still the newest. (`worker_write` refuses once the holder reported; operator decisions
/// clear the lease id, so no token reaches here after them.)
pub(super) fn holder_may_report(rec: &Record) -> bool {
    match rec.state {
        State::Processing | State::Prepared => true,
        State::NeedsReview => matches!(
            rec.review_reason,
            Some(ReviewReason::LeaseExpired | ReviewReason::Stuck | ReviewReason::BudgetExhausted)
        ),
        _ => false,
    }
}

/// Books `cost` (if any) of the attempt `attempt` on `next`'s sums and on `event`, and
/// returns the tally entry.
pub(super) fn book_cost(
    next: &mut Record,
    event: &mut EventDraft,
    cost: Option<AttemptCost>,
    attempt: u32,
) -> Option<(AttemptCost, bool)> {
    let c = cost?;
    let retry = attempt > 1;
    next.cost.add(c, retry);
    event.cost = Some(c);
    Some((c, retry))
}
