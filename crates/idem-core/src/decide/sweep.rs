//! The janitor's look at one `processing` record: eager lease expiry under
//! `lease_expiry=review`, and stuck detection (one alert per quiet spell; under review policy
//! the record also moves to `needs_review`).
//!
//! A sweep never acquires and never touches a record in any other state.

use super::{stuck_alert, to_review, Ctx, Reply, Transition, Write};
use crate::policy::LeaseExpiry;
use crate::record::{Record, ReviewReason, State};

pub(super) fn sweep(rec: &Record, ctx: &Ctx<'_>) -> Transition {
    let now = ctx.now;
    if rec.state != State::Processing {
        return Transition::reply(Reply::Swept { changed: false });
    }
    let expired = !rec.lease_valid(now);
    if expired && rec.lease_expiry == LeaseExpiry::Review {
        return to_review(
            rec,
            ReviewReason::LeaseExpired,
            "lease expired under lease_expiry=review (janitor)",
            ctx,
            false,
        );
    }
    let stuck = now.0.saturating_sub(rec.active_at.0) >= ctx.policy.stuck_after_ms;
    if stuck && !rec.stuck_alerted {
        if rec.lease_expiry == LeaseExpiry::Review {
            let mut t = to_review(
                rec,
                ReviewReason::Stuck,
                "stuck: no heartbeat within stuck_after_ms",
                ctx,
                false,
            );
            if let Write::Update(next) = &mut t.write {
                next.stuck_alerted = true;
            }
            t.alerts.insert(0, stuck_alert(rec, now));
            return t;
        }
        // Only the flag changes (no state, no event): `updated_at` is left as it was.
        let mut next = rec.clone();
        next.stuck_alerted = true;
        next.version = rec.version + 1;
        return Transition::update(
            next,
            vec![],
            vec![stuck_alert(rec, now)],
            Reply::Swept { changed: true },
        );
    }
    Transition::reply(Reply::Swept { changed: false })
}
