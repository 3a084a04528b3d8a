//! The gate in front of every worker write (prepare, heartbeat, complete, fail): the token must
//! be the newest for the record, and its holder must not have reported yet.
//!
//! A stale or made-up token is refused as `lease_lost` and recorded as an event (the one
//! refusal that writes); this gate must never let an older attempt's token through.
//!
//! A refused report of an effect — a `complete`, or a `fail` whose `sent` is not `false` — is
//! a **fenced completion**: the ledger stays right (the record is not changed), but the
//! outside world may have seen the effect twice. It is never silent: its `lease_lost` event
//! says `fenced_completion` in its note, a `fenced_completion` alert is queued in the same
//! step (one per record and fenced attempt) and the step's tally counts it. A cost the
//! refused report carries was still spent: it is recorded on that event and added to the
//! record's sums (the only change to the record; `updated_at` stays, since nothing the
//! record says about the operation changed).

use super::common::book_cost;
use super::{
    complete, effect, event, heartbeat, invalid, prepare, token_is_current, with_note, Ctx, Op,
    OpError, Tally, Transition, Write,
};
use crate::ids::Token;
use crate::record::{AlertDraft, AlertReason, EventType, Record, State};

/// The note of a fenced completion's `lease_lost` event starts with this.
pub const FENCED_COMPLETION_NOTE: &str = "fenced_completion";

/// Whether `op` tells the ledger that the effect may have happened: a complete, or a fail
/// whose `sent` is not `false` (a fail with `sent: false` certainly never reached anybody).
pub fn reports_effect(op: &Op) -> bool {
    match op {
        Op::Complete(_) => true,
        Op::Fail(f) => f.sent != Some(false),
        Op::EffectReport(r) => r.sent,
        _ => false,
    }
}

fn lease_lost(rec: &Record, token: &str, op: &Op, ctx: &Ctx<'_>) -> Transition {
    let fenced = reports_effect(op);
    let note = if fenced {
        format!(
            "{FENCED_COMPLETION_NOTE}: {} refused: stale or unknown token; the worker reports \
             an effect the ledger did not accept (it may have happened twice)",
            op.name()
        )
    } else {
        format!("{} refused: stale or unknown token", op.name())
    };
    let mut e = with_note(
        event(
            rec,
            EventType::LeaseLost,
            Some(rec.state),
            Some(rec.state),
            ctx.now,
        ),
        note,
    );
    // The attempt the token names, when it is one this record has had (a made-up token
    // names none: its alert dedupes under attempt 0, its cost counts as a retry's).
    let token_attempt = Token::parse(token)
        .map(|t| t.attempt)
        .filter(|a| (1..=rec.attempt).contains(a));
    let alerts = if fenced {
        vec![AlertDraft {
            reason: AlertReason::FencedCompletion,
            state: rec.state,
            error_category: match op {
                Op::Fail(f) => f.error.as_ref().map(|e| e.category.clone()),
                _ => None,
            },
            attempt: token_attempt.unwrap_or(0),
            at: ctx.now,
        }]
    } else {
        vec![]
    };
    let reported = match op {
        Op::Complete(c) => c.cost,
        Op::Fail(f) => f.cost,
        Op::EffectReport(r) => r.cost,
        _ => None,
    };
    let mut write = Write::None;
    let mut cost = None;
    if reported.is_some() {
        let mut next = rec.clone();
        next.version = rec.version + 1;
        cost = book_cost(
            &mut next,
            &mut e,
            reported,
            token_attempt.unwrap_or(u32::MAX),
        );
        write = Write::Update(Box::new(next));
    }
    Transition {
        write,
        events: vec![e],
        alerts,
        tally: Tally {
            cost,
            fenced_completion: fenced,
            ..Tally::default()
        },
        ..Transition::refuse(OpError::LeaseLost)
    }
}

pub(super) fn worker_write(rec: &Record, token: &str, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !token_is_current(rec, token) {
        return lease_lost(rec, token, op, ctx);
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
