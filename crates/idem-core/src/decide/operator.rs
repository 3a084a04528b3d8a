//! Operator actions: resolve (completed, retry with a fresh budget, failed_permanent),
//! approve and reject a prepared payload awaiting approval. Each is recorded with who and why.
//!
//! Every operator decision clears the lease id, so no earlier token can write afterwards.

use super::{
    event, invalid, sanitize_message, successor, Ctx, Op, ResolveAction, ResolveRequest, Transition,
};
use crate::record::{EventDraft, EventType, LastError, Record, State};

fn operator_event(
    next: &Record,
    kind: EventType,
    from: State,
    note: Option<&str>,
    ctx: &Ctx<'_>,
) -> EventDraft {
    let mut e = event(next, kind, Some(from), Some(next.state), ctx.now);
    e.note = note.map(str::to_owned);
    e.actor = ctx.actor.clone();
    e
}

pub(super) fn resolve(rec: &Record, r: &ResolveRequest, ctx: &Ctx<'_>) -> Transition {
    let now = ctx.now;
    let allowed = match rec.state {
        State::NeedsReview | State::FailedRetryable | State::FailedPermanent => true,
        State::Processing | State::Prepared => !rec.lease_valid(now),
        State::Completed | State::AwaitingApproval => false,
    };
    if !allowed {
        return invalid(rec, &Op::Resolve(r.clone()), "resolve works from needs_review, failed_retryable, failed_permanent, or an expired lease");
    }
    let mut next = successor(rec, now);
    next.lease_id = None; // an operator's decision fences out every earlier token
    next.lease_expires_at = None;
    next.review_reason = None;
    next.reported = false;
    match r.action {
        ResolveAction::Completed => {
            next.state = State::Completed;
            if r.result.is_some() {
                next.result = r.result.clone();
            }
            if r.external_ref.is_some() {
                next.external_ref = r.external_ref.clone();
            }
            next.not_before = None;
            next.final_at = Some(now);
        }
        ResolveAction::Retry => {
            next.state = State::FailedRetryable;
            next.not_before = Some(now);
            next.budget_base = rec.attempt;
            next.window_start = now;
            next.final_at = None;
            next.result_expired = false;
            if rec
                .last_error
                .as_ref()
                .is_some_and(|e| e.category == "rejected")
            {
                // A rejected draft must not come back: the retry starts from scratch.
                next.prepared_payload = None;
            }
        }
        ResolveAction::FailedPermanent => {
            next.state = State::FailedPermanent;
            next.not_before = None;
            next.final_at = Some(now);
        }
    }
    let e = operator_event(&next, EventType::Resolved, rec.state, Some(&r.note), ctx);
    Transition::update_record(next, vec![e])
}

pub(super) fn approve(rec: &Record, note: Option<&str>, ctx: &Ctx<'_>) -> Transition {
    if rec.state != State::AwaitingApproval {
        return invalid(
            rec,
            &Op::Approve { note: None },
            "only awaiting_approval can be approved",
        );
    }
    let mut next = successor(rec, ctx.now);
    next.state = State::Prepared;
    next.lease_id = None;
    next.lease_expires_at = None;
    // The delivery a person approved gets the namespace's whole budget from now, as after a
    // `resolve retry`: the attempt before only drafted (nothing was sent), and the time spent
    // waiting for the person is not retry time. Otherwise `max_attempts: 1` — the natural
    // setting for money paths — or an approval later than `window_ms` would send every
    // approved draft to review instead of delivering it.
    next.budget_base = rec.attempt;
    next.window_start = ctx.now;
    let e = operator_event(&next, EventType::Approved, rec.state, note, ctx);
    Transition::update_record(next, vec![e])
}

pub(super) fn reject(rec: &Record, note: Option<&str>, ctx: &Ctx<'_>) -> Transition {
    if rec.state != State::AwaitingApproval {
        return invalid(
            rec,
            &Op::Reject { note: None },
            "only awaiting_approval can be rejected",
        );
    }
    let mut next = successor(rec, ctx.now);
    next.state = State::FailedPermanent;
    next.lease_id = None;
    next.lease_expires_at = None;
    next.final_at = Some(ctx.now);
    next.last_error = Some(LastError {
        category: "rejected".into(),
        message: sanitize_message(note.unwrap_or("rejected by an operator")),
        http_status: None,
    });
    let e = operator_event(&next, EventType::Rejected, rec.state, note, ctx);
    Transition::update_record(next, vec![e])
}
