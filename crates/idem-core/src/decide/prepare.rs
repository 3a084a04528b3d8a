//! Prepare: the holder saves the payload it is about to send, so that every later attempt
//! delivers the same one, optionally stopping at `awaiting_approval` for an operator.
//!
//! A prepared payload is never replaced by a different one.

use super::{canon_eq, event, invalid, successor, Ctx, Op, PrepareRequest, Reply, Transition};
use crate::record::{EventType, Record, State};

pub(super) fn prepare(rec: &Record, r: &PrepareRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
    let now = ctx.now;
    match rec.state {
        State::Processing => {}
        State::Prepared => {
            if canon_eq(&rec.prepared_payload, &Some(r.payload.clone())) && !r.approval_required {
                return Transition::reply(Reply::Record(rec.clone()));
            }
            return invalid(
                rec,
                op,
                "a payload is already prepared; deliver the record's prepared_payload",
            );
        }
        _ => return invalid(rec, op, "only a processing record can be prepared"),
    }
    let to = if r.approval_required {
        State::AwaitingApproval
    } else {
        State::Prepared
    };
    let mut next = successor(rec, now);
    next.state = to;
    next.prepared_payload = Some(r.payload.clone());
    if to == State::AwaitingApproval {
        next.lease_expires_at = None;
    }
    let e = event(&next, EventType::Prepared, Some(rec.state), Some(to), now);
    Transition::update_record(next, vec![e])
}
