//! Effects: the holder of an effect's lease records that its request is about to leave
//! (`sent`), then reports how the attempt ended. The report reuses the rules of complete and
//! fail, so budget, `Retry-After`, the retry window and `needs_review` on exhaustion are
//! exactly those of `fail`; it adds what only an effect has: the response kept as the result
//! of a `failed_permanent`, and the `reconciled` event of a lookup, written in the same step
//! as the outcome it led to.
//!
//! What this family must never do: write `sent` for a record the token does not hold, or turn
//! an ambiguous attempt into anything but review without a lookup that said `not_found`.

use super::{
    complete, event, invalid, with_note, CompleteRequest, Ctx, EffectReportRequest,
    EffectSentRequest, FailErrorInput, FailRequest, Op, Reply, Transition, Write,
};
use crate::classify::Class;
use crate::effect::Verdict;
use crate::record::{EventType, Record, State};

pub(super) fn sent(rec: &Record, r: &EffectSentRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !rec.state.is_leased() {
        return invalid(rec, op, "the record is not held by this token");
    }
    let now = ctx.now;
    let mut next = super::successor(rec, now);
    next.request = Some(r.request.clone());
    let e = event(
        &next,
        EventType::Sent,
        Some(rec.state),
        Some(rec.state),
        now,
    );
    Transition::update_record(next, vec![e])
}

pub(super) fn report(rec: &Record, r: &EffectReportRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
    let class = match r.verdict {
        Verdict::Performed => None,
        Verdict::Permanent => Some(Class::Permanent),
        Verdict::Retryable { .. } => Some(Class::Retryable),
        Verdict::Ambiguous => Some(Class::Ambiguous),
    };
    let mut t = match class {
        None => complete::complete(
            rec,
            &CompleteRequest {
                token: r.token.clone(),
                result: r.response.clone(),
                external_ref: None,
                cost: r.cost,
            },
            op,
            ctx,
        ),
        Some(kind) => {
            let retry_after_ms = match r.verdict {
                Verdict::Retryable { retry_after_ms } => retry_after_ms,
                _ => None,
            };
            complete::fail(
                rec,
                &FailRequest {
                    token: r.token.clone(),
                    kind: Some(kind),
                    http_status: r.http_status,
                    retry_after_ms,
                    sent: Some(r.sent),
                    error: Some(FailErrorInput {
                        category: r.category.clone(),
                        message: r.message.clone(),
                    }),
                    cost: r.cost,
                },
                op,
                ctx,
            )
        }
    };
    if r.verdict == Verdict::Permanent {
        keep_response(&mut t, r.response.clone());
    }
    if rec.request.is_none() {
        if let Some(req) = &r.request {
            show_request(&mut t, req);
        }
    }
    if let (Some(found), Ok(_)) = (r.reconciled, &t.reply) {
        let e = with_note(
            event(
                rec,
                EventType::Reconciled,
                Some(rec.state),
                Some(rec.state),
                ctx.now,
            ),
            found.as_str(),
        );
        t.events.insert(0, e);
    }
    t
}

/// The outcome of an attempt that recorded no `sent` shows the request it tried.
fn show_request(t: &mut Transition, req: &crate::effect::RequestSummary) {
    on_outcome(t, |r| {
        if r.request.is_none() {
            r.request = Some(req.clone());
        }
    });
}

/// A `failed_permanent` effect keeps the destination's answer as its result (replayed to
/// every later call).
fn keep_response(t: &mut Transition, response: Option<serde_json::Value>) {
    on_outcome(t, |r| {
        if r.state == State::FailedPermanent {
            r.result = response.clone();
        }
    });
}

/// `set` applied to the record a report writes and to the one it answers with.
fn on_outcome(t: &mut Transition, set: impl Fn(&mut Record)) {
    if let Write::Update(r) = &mut t.write {
        set(r);
    }
    match &mut t.reply {
        Ok(Reply::Fail(f)) => set(&mut f.record),
        Ok(Reply::Record(r)) => set(r),
        _ => {}
    }
}
