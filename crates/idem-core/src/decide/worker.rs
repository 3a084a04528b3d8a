//! The gate in front of every worker write (prepare, heartbeat, complete, fail): the token must
//! be the newest for the record, and its holder must not have reported yet.
//!
//! A stale or made-up token is refused as `lease_lost` and recorded as an event (the one
//! refusal that writes); this gate must never let an older attempt's token through.

use super::{
    complete, effect, event, heartbeat, invalid, prepare, token_is_current, with_note, Ctx, Op,
    OpError, Transition,
};
use crate::record::{EventType, Record, ReviewReason, State};

fn lease_lost(rec: &Record, op: &Op, ctx: &Ctx<'_>) -> Transition {
    let e = with_note(
        event(
            rec,
            EventType::LeaseLost,
            Some(rec.state),
            Some(rec.state),
            ctx.now,
        ),
        format!("{} refused: stale or unknown token", op.name()),
    );
    Transition {
        events: vec![e],
        ..Transition::refuse(OpError::LeaseLost)
    }
}

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

pub(super) fn worker_write(rec: &Record, token: &str, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !token_is_current(rec, token) {
        return lease_lost(rec, op, ctx);
    }
    if let Op::Complete(c) = op {
        if rec.state == State::Completed {
            return complete::repeat_complete(rec, c);
        }
    }
    if rec.reported {
        return invalid(rec, op, "this token's holder already reported its outcome");
    }
    match op {
        Op::Prepare(r) => prepare::prepare(rec, r, op, ctx),
        Op::Heartbeat(r) => heartbeat::heartbeat(rec, r, op, ctx),
        Op::Complete(r) => complete::complete(rec, r, op, ctx),
        Op::Fail(r) => complete::fail(rec, r, op, ctx),
        Op::EffectSent(r) => effect::sent(rec, r, op, ctx),
        Op::EffectReport(r) => effect::report(rec, r, op, ctx),
        _ => invalid(rec, op, "not a worker write"),
    }
}
