//! Complete and fail: the holder reports the outcome of its attempt. A completion is final; a
//! failure is classified (permanent, retryable within the budget and window, or ambiguous,
//! which goes to review) and answered with the retry decision.
//!
//! A report is accepted once per attempt (a repeated identical completion is answered, not
//! written); an ambiguous failure must never become retryable.
//!
//! Cost: a report may carry what its attempt spent ([`AttemptCost`]). It goes on the report's
//! event and into the record's sums (`retry_*` when the attempt was not the first), and into
//! the step's [`Tally`] for the namespace stats and the metrics. A repeated identical
//! completion is an answer, not a new spend: its cost is not counted again.

use super::common::{book_cost, holder_may_report};
use super::Tally;
use super::{
    canon_eq, event, invalid, review_alert, sanitize_message, successor, with_note,
    CompleteRequest, Ctx, FailReply, FailRequest, Op, OpError, Reply, RetryDecision, Transition,
};
use crate::classify::{backoff_ms, classify, Class, FailSignal};
use crate::record::{EventType, LastError, Record, ReviewReason, State};

pub(super) fn repeat_complete(rec: &Record, c: &CompleteRequest) -> Transition {
    let same_ref = rec.external_ref == c.external_ref;
    let same_result = rec.result_expired || canon_eq(&rec.result, &c.result);
    match (same_result, same_ref) {
        (true, true) => Transition::reply(Reply::Record(rec.clone())),
        (false, _) => Transition::refuse(OpError::ResultMismatch { field: "result" }),
        (true, false) => Transition::refuse(OpError::ResultMismatch {
            field: "external_ref",
        }),
    }
}

pub(super) fn complete(rec: &Record, r: &CompleteRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !holder_may_report(rec) {
        return invalid(rec, op, "the record is not held by this token");
    }
    let now = ctx.now;
    let mut next = successor(rec, now);
    next.state = State::Completed;
    next.result = r.result.clone();
    next.external_ref = r.external_ref.clone();
    next.lease_expires_at = None;
    next.not_before = None;
    next.reported = true;
    next.final_at = Some(now);
    next.review_reason = None;
    let mut e = event(
        &next,
        EventType::Completed,
        Some(rec.state),
        Some(State::Completed),
        now,
    );
    if rec.state == State::NeedsReview {
        e.note = Some("late completion by the lease holder resolved the review".into());
    }
    let cost = book_cost(&mut next, &mut e, r.cost, rec.attempt);
    Transition {
        tally: Tally {
            cost,
            ..Tally::default()
        },
        ..Transition::update_record(next, vec![e])
    }
}

pub(super) fn fail(rec: &Record, r: &FailRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !holder_may_report(rec) {
        return invalid(rec, op, "the record is not held by this token");
    }
    let now = ctx.now;
    let policy = ctx.policy;
    let class = match classify(&FailSignal {
        kind: r.kind,
        http_status: r.http_status,
        category: r.error.as_ref().map(|e| e.category.as_str()),
        sent: r.sent,
        destination_idempotent: policy.destination_idempotent,
    }) {
        Ok(c) => c,
        Err(e) => {
            return Transition::refuse(OpError::InvalidField {
                field: e.field.into(),
                message: e.message,
            })
        }
    };
    let last_error = LastError {
        category: r
            .error
            .as_ref()
            .map(|e| e.category.clone())
            .unwrap_or_else(|| {
                if r.http_status.is_some() {
                    "http".into()
                } else {
                    class.as_str().into()
                }
            }),
        message: r
            .error
            .as_ref()
            .map(|e| sanitize_message(&e.message))
            .unwrap_or_default(),
        http_status: r.http_status,
    };
    let max_attempts = rec.budget_base.saturating_add(policy.retry.max_attempts);
    let mut retry = RetryDecision {
        allowed: false,
        attempt: rec.attempt,
        max_attempts,
        not_before: None,
    };
    let (to, reason, note) = match class {
        Class::Permanent => (
            State::FailedPermanent,
            None,
            "permanent failure".to_string(),
        ),
        Class::Ambiguous => (
            State::NeedsReview,
            Some(ReviewReason::Ambiguous),
            "ambiguous failure: the side effect may have happened".to_string(),
        ),
        Class::Retryable => {
            let used = rec.attempt.saturating_sub(rec.budget_base);
            if used >= policy.retry.max_attempts {
                (
                    State::NeedsReview,
                    Some(ReviewReason::BudgetExhausted),
                    "retry budget exhausted: max_attempts reached".to_string(),
                )
            } else {
                let delay = backoff_ms(used, policy.retry.base_ms, policy.retry.max_ms, ctx.jitter)
                    .max(r.retry_after_ms.unwrap_or(0));
                let nb = now.plus_ms(delay);
                if nb.0 > rec.window_start.0.saturating_add(policy.retry.window_ms) {
                    (
                        State::NeedsReview,
                        Some(ReviewReason::BudgetExhausted),
                        "retry window exceeded: the next attempt could not start in time"
                            .to_string(),
                    )
                } else {
                    retry.allowed = true;
                    retry.not_before = Some(nb);
                    (
                        State::FailedRetryable,
                        None,
                        "retryable failure".to_string(),
                    )
                }
            }
        }
    };
    let mut next = successor(rec, now);
    next.state = to;
    next.last_error = Some(last_error);
    next.lease_expires_at = None;
    next.not_before = retry.not_before;
    next.reported = true;
    next.review_reason = reason;
    next.final_at = if to.is_final() { Some(now) } else { None };
    let mut e = with_note(
        event(&next, EventType::Failed, Some(rec.state), Some(to), now),
        format!("{}: {note}", class.as_str()),
    );
    let cost = book_cost(&mut next, &mut e, r.cost, rec.attempt);
    let alerts = if to == State::NeedsReview {
        vec![review_alert(&next, now)]
    } else {
        vec![]
    };
    let reply = Reply::Fail(FailReply {
        record: next.clone(),
        class,
        retry,
        review_reason: reason,
    });
    Transition {
        tally: Tally {
            cost,
            ..Tally::default()
        },
        ..Transition::update(next, vec![e], alerts, reply)
    }
}
