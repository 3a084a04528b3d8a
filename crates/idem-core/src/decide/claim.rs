//! Claims: the first acquisition of a key, the answers that leave a record as it is
//! (conflict, replay, in flight, backoff, review, approval, pause, daily limit), and resuming
//! a record for a new attempt (after a failure, an expired lease or an approval).
//!
//! Only this family acquires: it alone draws a new lease (from [`Ctx::new_lease_id`]) and
//! increments `attempt`; it must never write to a record whose lease is still valid.

use super::{
    event, successor, to_review, with_note, ClaimOutcome, ClaimReply, ClaimRequest, Ctx, Reply,
    Transition, Write,
};
use crate::ids::{Key, Namespace, Token};
use crate::policy::LeaseExpiry;
use crate::record::{CostTotals, EventDraft, EventType, Record, ReviewReason, State};
use crate::time::Timestamp;

pub(super) fn claim_reply(outcome: ClaimOutcome, record: Option<Record>) -> ClaimReply {
    ClaimReply {
        outcome,
        record,
        token: None,
        resumed: None,
        retry_after_ms: None,
        reclaimed: false,
    }
}

/// An event of a claim that leaves the record as it is (conflict, duplicate, in flight): it
/// names the claimant, not the holder.
fn claim_event(rec: &Record, kind: EventType, req: &ClaimRequest, now: Timestamp) -> EventDraft {
    let mut e = event(rec, kind, Some(rec.state), Some(rec.state), now);
    e.owner = req.owner.clone();
    e.correlation_id = req.correlation_id.clone();
    e
}

pub(super) fn claim(
    ns: &Namespace,
    key: &Key,
    existing: Option<&Record>,
    req: &ClaimRequest,
    ctx: &Ctx<'_>,
) -> Transition {
    let now = ctx.now;
    if ctx.paused {
        return Transition::reply(Reply::Claim(claim_reply(ClaimOutcome::Paused, None)));
    }
    let Some(rec) = existing else {
        if let Some(limit) = ctx.policy.daily_limit {
            if ctx.daily_count >= limit {
                let mut r = claim_reply(ClaimOutcome::Limited, None);
                r.retry_after_ms = Some(now.ms_to_next_utc_midnight());
                return Transition::reply(Reply::Claim(r));
            }
        }
        return fresh(ns, key, req, ctx);
    };

    if let (Some(want), Some(have)) = (&req.fingerprint, &rec.fingerprint) {
        if want != have {
            let e = claim_event(rec, EventType::Conflict, req, now);
            return Transition {
                events: vec![with_note(e, "same key, different fingerprint")],
                ..Transition::reply(Reply::Claim(claim_reply(
                    ClaimOutcome::Conflict,
                    Some(rec.clone()),
                )))
            };
        }
    }

    let duplicate = |outcome: ClaimOutcome| {
        let e = claim_event(rec, EventType::DuplicateHit, req, now);
        Transition {
            events: vec![e],
            ..Transition::reply(Reply::Claim(claim_reply(outcome, Some(rec.clone()))))
        }
    };

    match rec.state {
        State::Completed => duplicate(ClaimOutcome::Completed),
        State::FailedPermanent => duplicate(ClaimOutcome::FailedPermanent),
        State::NeedsReview => Transition::reply(Reply::Claim(claim_reply(
            ClaimOutcome::NeedsReview,
            Some(rec.clone()),
        ))),
        State::AwaitingApproval => Transition::reply(Reply::Claim(claim_reply(
            ClaimOutcome::AwaitingApproval,
            Some(rec.clone()),
        ))),
        State::FailedRetryable => match rec.not_before {
            Some(nb) if nb > now => {
                let mut r = claim_reply(ClaimOutcome::Backoff, Some(rec.clone()));
                r.retry_after_ms = Some(nb.0 - now.0);
                Transition::reply(Reply::Claim(r))
            }
            _ => resume(rec, req, ctx, false),
        },
        State::Processing | State::Prepared => {
            if rec.lease_valid(now) {
                let e = claim_event(rec, EventType::InFlight, req, now);
                let mut r = claim_reply(ClaimOutcome::InFlight, Some(rec.clone()));
                r.retry_after_ms = Some(rec.lease_remaining_ms(now));
                return Transition {
                    events: vec![e],
                    ..Transition::reply(Reply::Claim(r))
                };
            }
            if rec.state == State::Prepared && rec.lease_expires_at.is_none() {
                // Approved and waiting for the delivering claim.
                return resume(rec, req, ctx, false);
            }
            // An effect's request may have left under the lost lease (its `sent` is on the
            // record): a prepared record is then no safer to resend than a processing one.
            let may_have_sent = rec.state == State::Processing || rec.request.is_some();
            if may_have_sent && rec.lease_expiry == LeaseExpiry::Review {
                return to_review(
                    rec,
                    ReviewReason::LeaseExpired,
                    "lease expired under lease_expiry=review",
                    ctx,
                    true,
                );
            }
            resume(rec, req, ctx, true)
        }
    }
}

fn fresh(ns: &Namespace, key: &Key, req: &ClaimRequest, ctx: &Ctx<'_>) -> Transition {
    let now = ctx.now;
    let lease_ms = req.lease_ms.unwrap_or(ctx.policy.lease_ms);
    let rec = Record {
        namespace: ns.clone(),
        key: key.clone(),
        state: State::Processing,
        attempt: 1,
        fingerprint: req.fingerprint.clone(),
        owner: req.owner.clone(),
        correlation_id: req.correlation_id.clone(),
        lease_expires_at: Some(now.plus_ms(lease_ms)),
        not_before: None,
        prepared_payload: None,
        result: None,
        result_expired: false,
        external_ref: None,
        last_error: None,
        created_at: now,
        updated_at: now,
        cost: CostTotals::default(),
        request: None,
        lease_id: Some(ctx.new_lease_id.clone()),
        lease_expiry: req.lease_expiry.unwrap_or(ctx.policy.lease_expiry),
        reported: false,
        budget_base: 0,
        window_start: now,
        final_at: None,
        active_at: now,
        review_reason: None,
        review_since: None,
        stuck_alerted: false,
        version: 1,
    };
    let token = Token::new(1, ctx.new_lease_id.clone());
    let e = event(
        &rec,
        EventType::Acquired,
        None,
        Some(State::Processing),
        now,
    );
    Transition {
        write: Write::Insert(Box::new(rec.clone())),
        events: vec![e],
        first_acquisition: true,
        alerts: vec![],
        reply: Ok(Reply::Claim(ClaimReply {
            outcome: ClaimOutcome::Acquired,
            record: Some(rec),
            token: Some(token),
            resumed: Some(false),
            retry_after_ms: None,
            reclaimed: false,
        })),
        tally: Default::default(),
    }
}

fn resume(rec: &Record, req: &ClaimRequest, ctx: &Ctx<'_>, reclaimed: bool) -> Transition {
    let now = ctx.now;
    let retry = &ctx.policy.retry;
    let next_attempt = rec.attempt.saturating_add(1);
    if next_attempt.saturating_sub(rec.budget_base) > retry.max_attempts {
        return to_review(
            rec,
            ReviewReason::BudgetExhausted,
            "retry budget exhausted: max_attempts reached",
            ctx,
            true,
        );
    }
    if now.0 > rec.window_start.0.saturating_add(retry.window_ms) {
        return to_review(
            rec,
            ReviewReason::BudgetExhausted,
            "retry window exceeded",
            ctx,
            true,
        );
    }
    let lease_ms = req.lease_ms.unwrap_or(ctx.policy.lease_ms);
    // A saved payload must be reused by every later attempt, also after a retryable failure
    // or an operator's `retry`: the record resumes as `prepared` and hands the payload back.
    let state = if rec.prepared_payload.is_some() {
        State::Prepared
    } else {
        State::Processing
    };
    let mut next = successor(rec, now);
    next.state = state;
    next.attempt = next_attempt;
    next.owner = req.owner.clone().or_else(|| rec.owner.clone());
    next.correlation_id = req.correlation_id.clone();
    next.lease_id = Some(ctx.new_lease_id.clone());
    next.lease_expires_at = Some(now.plus_ms(lease_ms));
    next.lease_expiry = req.lease_expiry.unwrap_or(ctx.policy.lease_expiry);
    next.not_before = None;
    next.reported = false;
    next.active_at = now;
    next.stuck_alerted = false;
    next.review_reason = None;
    let note = if reclaimed {
        "lease expired; reclaimed"
    } else if state == State::Prepared {
        "resumed with the prepared payload"
    } else {
        "retry after failure"
    };
    let e = with_note(
        event(&next, EventType::Resumed, Some(rec.state), Some(state), now),
        note,
    );
    let token = Token::new(next_attempt, ctx.new_lease_id.clone());
    let reply = Reply::Claim(ClaimReply {
        outcome: ClaimOutcome::Acquired,
        record: Some(next.clone()),
        token: Some(token),
        resumed: Some(true),
        retry_after_ms: None,
        reclaimed,
    });
    Transition::update(next, vec![e], vec![], reply)
}
