//! Heartbeat: the holder extends its lease and shows it is alive (which clears stuck
//! detection). It writes no event: heartbeats are frequent and change no state.

use super::{invalid, successor, Ctx, HeartbeatRequest, Op, Transition};
use crate::record::Record;

pub(super) fn heartbeat(rec: &Record, r: &HeartbeatRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !rec.state.is_leased() {
        return invalid(rec, op, "no lease to extend");
    }
    let mut next = successor(rec, ctx.now);
    next.lease_expires_at = Some(ctx.now.plus_ms(r.lease_ms.unwrap_or(ctx.policy.lease_ms)));
    next.active_at = ctx.now;
    next.stuck_alerted = false;
    Transition::update_record(next, vec![])
}
