//! The webhook intake's record rules (`INTAKE.md`): an inbound event becomes a record, each
//! forward attempt holds the record's lease, its outcome moves the record on, and an operator
//! redelivers.
//!
//! - `intake_receive`: unseen key → a new record in `prepared` (unleased: waiting for its
//!   first delivery), or in `needs_review` with a `missing_identity` alert when the event had
//!   no id (`held`), or — when nothing is delivered under the event's own key (fan-out to
//!   named destinations only, or no destination's filter passed) — `completed` at once with
//!   the result `{"fan_out": true}` (each named destination's delivery has its own record); a
//!   seen key whose record stands for this very event (or delivery), in any state →
//!   `duplicate`, recorded as a `duplicate_hit` event, the record otherwise untouched. A key
//!   taken by any other record (a delivery of another event, another source's event, a plain
//!   claim) → `collision`, nothing written: the caller holds the event for review under
//!   another key, which it receives again with `collides_with` set (`needs_review`, alert
//!   `key_collision`). What a record stands for is its prepared payload, written here once:
//!   `{source, event_id}` for an event, plus `destination` for the delivery to a named
//!   destination (delivery records made before that member existed carry the event's
//!   `{source, event_id}` alone), plus `collides_with` for a record held on a collision.
//! - `forward_start`: the delivery worker takes the record's lease for one attempt
//!   (`attempt` + 1, a fresh lease id) — only from `prepared` or `failed_retryable` past its
//!   `not_before`, only when no lease is held and the namespace is not paused. Anything else
//!   answers without writing (`Wait` until the lease, the retry or the pause may be over;
//!   `Skip` when nothing is left to deliver), so a stale or duplicated outbox item can never
//!   start a second delivery: the record lease is what keeps one delivery in flight. A start
//!   that names the delivery it expects (an item queued for a named destination) and finds a
//!   record standing for anything else answers `collision` without writing.
//! - `forward_report`: the holder reports how the attempt ended: 2xx → `completed` (result
//!   `{status, attempt, duration_ms}`); 410 → `needs_review` at once (`delivery_gone`); any
//!   other failure → `failed_retryable` after a full-jitter backoff from the source's
//!   `forward.retry`, never before `Retry-After`, or `needs_review` (`delivery_exhausted`)
//!   when the attempts or the window of the budget are spent.
//! - `redeliver`: an operator schedules the event again now with a fresh budget, from
//!   `needs_review`, `failed_retryable` or `completed` (or `prepared` whose lease is not
//!   held); refused while a delivery holds the lease. Attempt numbers keep counting.
//!
//! No rule here reads a clock or draws randomness: both arrive in [`Ctx`].

use serde_json::json;

use super::{
    event, sanitize_message, successor, with_note, Ctx, IntakeReply, OpError, Reply, Transition,
    Write,
};
use crate::classify::backoff_ms;
use crate::ids::{Key, LeaseId, Namespace, Token};
use crate::record::{
    AlertDraft, AlertReason, CostTotals, EventType, LastError, Record, ReviewReason, State,
};

/// A verified inbound event arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntakeReceiveRequest {
    /// The source it came in through.
    pub source: String,
    /// The provider's id (`None`: held, kept under its body hash).
    pub event_id: Option<String>,
    /// Whether the event is delivered under its own key (the destination `default`);
    /// `false`: its record completes at once (a held event is held all the same).
    pub delivers: bool,
    /// `Some(NAME)`: this is the record of the event's delivery to the named destination
    /// NAME (made by the delivery worker), not the event's own.
    pub destination: Option<String>,
    /// `Some(key)`: the event's (or the delivery's) own key `key` is taken by a record that
    /// is not it; it is kept under this other key in `needs_review` (alert `key_collision`)
    /// and not delivered until an operator redelivers it.
    pub collides_with: Option<String>,
}

impl IntakeReceiveRequest {
    /// Whether `rec` is the record this request makes: its prepared payload names this
    /// source, this event id and this destination (a record without a payload, or with
    /// another one, is something else: a delivery of another event, another source's event,
    /// a plain claim).
    pub fn stands_for(&self, rec: &Record) -> bool {
        let Some(p) = &rec.prepared_payload else {
            return false;
        };
        let text = |m: &str| p.get(m).and_then(|v| v.as_str());
        text("source") == Some(self.source.as_str())
            && text("event_id") == self.event_id.as_deref()
            && text("destination") == self.destination.as_deref()
    }
}

/// The delivery an item of the delivery worker is for: the event's source and id and the
/// named destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryOf {
    pub source: String,
    pub event_id: Option<String>,
    pub destination: String,
}

impl DeliveryOf {
    /// Whether `rec` is this delivery's record: its payload names this source, event id and
    /// destination, or (a delivery record made before the payload named its destination)
    /// this source and event id and no destination. An event's own record never passes: a
    /// delivery's key is its event's key plus `:NAME`, so an event stored under it has
    /// another id.
    pub fn stands_for(&self, rec: &Record) -> bool {
        let Some(p) = &rec.prepared_payload else {
            return false;
        };
        let text = |m: &str| p.get(m).and_then(|v| v.as_str());
        text("source") == Some(self.source.as_str())
            && text("event_id") == self.event_id.as_deref()
            && p.get("collides_with").is_none()
            && match p.get("destination") {
                None => true,
                Some(d) => d.as_str() == Some(self.destination.as_str()),
            }
    }
}

/// The delivery worker starts an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardStartRequest {
    /// The attempt's lease: the forward timeout plus a margin.
    pub lease_ms: i64,
    /// The delivery the item was queued for, when it names one: a record standing for
    /// anything else answers `collision` and is left alone.
    pub expect: Option<DeliveryOf>,
}

/// A source's `forward.retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardRetry {
    pub max_attempts: u32,
    pub base_ms: i64,
    pub max_ms: i64,
    pub window_ms: i64,
}

/// How one forward attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardOutcome {
    /// A 2xx answer.
    Delivered { status: u16, duration_ms: i64 },
    /// Anything else: a non-2xx status (410 included), a timeout, a connection error.
    Failed {
        status: Option<u16>,
        /// `http`, `timeout` or `connection`.
        category: String,
        message: String,
        /// The answer's `Retry-After`, in milliseconds from now.
        retry_after_ms: Option<i64>,
        duration_ms: i64,
    },
}

/// The holder of a forward attempt reports its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardReportRequest {
    pub token: String,
    pub outcome: ForwardOutcome,
    pub retry: ForwardRetry,
}

/// Owner recorded on the events of the delivery worker.
pub const FORWARD_OWNER: &str = "idem-forward";

pub(super) fn receive(
    ns: &Namespace,
    key: &Key,
    existing: Option<&Record>,
    r: &IntakeReceiveRequest,
    ctx: &Ctx<'_>,
) -> Transition {
    let now = ctx.now;
    if let Some(rec) = existing.filter(|rec| !r.stands_for(rec)) {
        // Not this event: never a duplicate (that would drop it), never written to.
        return Transition::reply(Reply::Intake(IntakeReply::Collision {
            record: Box::new(rec.clone()),
        }));
    }
    if let Some(rec) = existing {
        let e = event(
            rec,
            EventType::DuplicateHit,
            Some(rec.state),
            Some(rec.state),
            now,
        );
        return Transition {
            write: Write::None,
            events: vec![e],
            first_acquisition: false,
            alerts: vec![],
            reply: Ok(Reply::Intake(IntakeReply::Duplicate {
                record: Box::new(rec.clone()),
            })),
            tally: Default::default(),
        };
    }
    let collided = r.collides_with.is_some();
    let held = r.event_id.is_none() || collided;
    let fan_out = !held && !r.delivers;
    let state = if held {
        State::NeedsReview
    } else if fan_out {
        State::Completed
    } else {
        State::Prepared
    };
    let rec = Record {
        namespace: ns.clone(),
        key: key.clone(),
        state,
        attempt: 0,
        fingerprint: None,
        owner: None,
        correlation_id: None,
        lease_expires_at: None,
        not_before: None,
        prepared_payload: Some(payload(r)),
        result: fan_out.then(|| json!({"fan_out": true})),
        result_expired: false,
        external_ref: None,
        last_error: held.then(|| match r.collides_with {
            Some(_) => LastError {
                category: "key_collision".into(),
                message: COLLISION_MESSAGE.into(),
                http_status: None,
            },
            None => LastError {
                category: "missing_identity".into(),
                message: "the signed event carries no event id".into(),
                http_status: None,
            },
        }),
        created_at: now,
        updated_at: now,
        cost: CostTotals::default(),
        request: None,
        lease_id: None,
        lease_expiry: ctx.policy.lease_expiry,
        reported: false,
        budget_base: 0,
        window_start: now,
        final_at: fan_out.then_some(now),
        active_at: now,
        review_reason: None,
        review_since: None,
        stuck_alerted: false,
        version: 1,
    };
    let mut events = vec![event(
        &rec,
        EventType::Prepared,
        None,
        Some(State::Prepared),
        now,
    )];
    let mut alerts = vec![];
    if fan_out {
        events.push(with_note(
            event(
                &rec,
                EventType::Completed,
                Some(State::Prepared),
                Some(State::Completed),
                now,
            ),
            "fanned out: each destination delivers under its own key",
        ));
    }
    if held {
        let (note, reason) = if collided {
            (
                "held: its own key is taken by a record that is not it (key_collision)",
                AlertReason::KeyCollision,
            )
        } else {
            (
                "held: the signed event carries no event id (missing_identity)",
                AlertReason::MissingIdentity,
            )
        };
        events.push(with_note(
            event(
                &rec,
                EventType::MovedToReview,
                Some(State::Prepared),
                Some(State::NeedsReview),
                now,
            ),
            note,
        ));
        alerts.push(alert(&rec, reason, now));
    }
    let reply = if held {
        IntakeReply::Held {
            record: Box::new(rec.clone()),
        }
    } else {
        IntakeReply::Accepted {
            record: Box::new(rec.clone()),
        }
    };
    Transition {
        write: Write::Insert(Box::new(rec)),
        events,
        first_acquisition: false,
        alerts,
        reply: Ok(Reply::Intake(reply)),
        tally: Default::default(),
    }
}

/// The `last_error` message of a record held on a key collision.
pub const COLLISION_MESSAGE: &str =
    "its own key is taken by another record (a delivery of another event, another source's \
     event or a claim): held for review, not delivered";

/// The prepared payload of a received record: what it stands for (see
/// [`IntakeReceiveRequest::stands_for`]).
fn payload(r: &IntakeReceiveRequest) -> serde_json::Value {
    let mut p = json!({"source": r.source, "event_id": r.event_id});
    if let Some(d) = &r.destination {
        p["destination"] = json!(d);
    }
    if let Some(k) = &r.collides_with {
        p["collides_with"] = json!(k);
    }
    p
}

fn alert(rec: &Record, reason: AlertReason, now: crate::time::Timestamp) -> AlertDraft {
    AlertDraft {
        reason,
        state: State::NeedsReview,
        error_category: rec.last_error.as_ref().map(|e| e.category.clone()),
        attempt: rec.attempt,
        at: now,
    }
}

pub(super) fn start(rec: &Record, r: &ForwardStartRequest, ctx: &Ctx<'_>) -> Transition {
    let now = ctx.now;
    let wait = |until| Transition::reply(Reply::Intake(IntakeReply::Wait { until }));
    let skip = || Transition::reply(Reply::Intake(IntakeReply::Skip { state: rec.state }));
    if r.expect.as_ref().is_some_and(|d| !d.stands_for(rec)) {
        // The key is another record's: never delivered as, nor read as, this delivery.
        return Transition::reply(Reply::Intake(IntakeReply::Collision {
            record: Box::new(rec.clone()),
        }));
    }
    match rec.state {
        State::Prepared | State::FailedRetryable => {}
        _ => return skip(),
    }
    if rec.lease_valid(now) {
        // Another attempt holds it. Look again when its lease runs out: if that attempt
        // reports, there is nothing more to do; if it died, this item carries the event on.
        if let Some(until) = rec.lease_expires_at {
            return wait(until);
        }
    }
    if let Some(nb) = rec.not_before.filter(|t| *t > now) {
        return wait(nb);
    }
    if ctx.paused {
        return wait(now.plus_ms(PAUSED_RECHECK_MS));
    }
    let mut next = successor(rec, now);
    next.state = State::Prepared;
    next.attempt = rec.attempt + 1;
    next.lease_id = Some(ctx.new_lease_id.clone());
    next.lease_expires_at = Some(now.plus_ms(r.lease_ms.max(1)));
    next.owner = Some(FORWARD_OWNER.into());
    next.reported = false;
    next.active_at = now;
    next.not_before = None;
    let kind = if rec.attempt == 0 {
        EventType::Acquired
    } else {
        EventType::Resumed
    };
    let e = event(&next, kind, Some(rec.state), Some(State::Prepared), now);
    let token = Token::new(next.attempt, ctx.new_lease_id.clone());
    let reply = IntakeReply::Started {
        token: token.secret(),
        attempt: next.attempt,
        record: Box::new(next.clone()),
    };
    Transition::update(next, vec![e], vec![], Reply::Intake(reply))
}

/// How long a paused namespace's delivery waits before it looks again (so a resume is
/// followed within this time; each waiting event costs one outbox write per period).
pub const PAUSED_RECHECK_MS: i64 = 5000;

pub(super) fn report(rec: &Record, r: &ForwardReportRequest, ctx: &Ctx<'_>) -> Transition {
    let now = ctx.now;
    let current = match (Token::parse(&r.token), &rec.lease_id) {
        (Some(t), Some(lease)) => t.attempt == rec.attempt && &t.lease_id == lease,
        _ => false,
    };
    if !current || rec.reported || rec.state != State::Prepared {
        return Transition::refuse(OpError::LeaseLost);
    }
    let mut next = successor(rec, now);
    next.lease_expires_at = None;
    next.reported = true;
    match &r.outcome {
        ForwardOutcome::Delivered {
            status,
            duration_ms,
        } => {
            next.state = State::Completed;
            next.result = Some(json!({
                "status": status,
                "attempt": rec.attempt,
                "duration_ms": duration_ms,
            }));
            next.last_error = None;
            next.final_at = Some(now);
            next.result_expired = false;
            let e = event(
                &next,
                EventType::Completed,
                Some(rec.state),
                Some(State::Completed),
                now,
            );
            Transition::update_record(next, vec![e])
        }
        ForwardOutcome::Failed {
            status,
            category,
            message,
            retry_after_ms,
            ..
        } => {
            next.last_error = Some(LastError {
                category: category.clone(),
                message: sanitize_message(message),
                http_status: *status,
            });
            let failed = |next: &Record, to| {
                with_note(
                    event(next, EventType::Failed, Some(rec.state), Some(to), now),
                    sanitize_message(message),
                )
            };
            let gone = *status == Some(410);
            let in_budget = rec.attempt.saturating_sub(rec.budget_base);
            let delay = backoff_ms(in_budget, r.retry.base_ms, r.retry.max_ms, ctx.jitter)
                .max(retry_after_ms.unwrap_or(0).max(0));
            let retry_at = now.plus_ms(delay);
            let exhausted = in_budget >= r.retry.max_attempts
                || retry_at.0 > rec.window_start.0.saturating_add(r.retry.window_ms);
            if gone || exhausted {
                next.state = State::NeedsReview;
                next.review_reason = Some(ReviewReason::BudgetExhausted);
                let (reason, note) = if gone {
                    (
                        AlertReason::DeliveryGone,
                        "the receiver answered 410 Gone: not retried (delivery_gone)",
                    )
                } else {
                    (
                        AlertReason::DeliveryExhausted,
                        "forward retries exhausted (delivery_exhausted)",
                    )
                };
                let events = vec![
                    failed(&next, State::NeedsReview),
                    with_note(
                        event(
                            &next,
                            EventType::MovedToReview,
                            Some(rec.state),
                            Some(State::NeedsReview),
                            now,
                        ),
                        note,
                    ),
                ];
                let alerts = vec![alert(&next, reason, now)];
                Transition::update(next, events, alerts, Reply::Written)
            } else {
                next.state = State::FailedRetryable;
                next.not_before = Some(retry_at);
                let e = failed(&next, State::FailedRetryable);
                Transition::update_record(next, vec![e])
            }
        }
    }
}

pub(super) fn redeliver(rec: &Record, note: &str, ctx: &Ctx<'_>) -> Transition {
    let now = ctx.now;
    // A `prepared` delivery is in flight (a valid lease) or scheduled already (its first
    // delivery, a retry after a lost lease, or a redeliver that has not started): another
    // redeliver would only write a second `resolved` event. A held event waits in
    // `needs_review`.
    let allowed = matches!(
        rec.state,
        State::NeedsReview | State::FailedRetryable | State::Completed
    );
    if !allowed || rec.lease_valid(now) {
        let why = if rec.lease_valid(now) {
            "a delivery is in flight"
        } else if rec.state == State::Prepared {
            "its delivery is scheduled and has not started yet"
        } else {
            "redeliver works from needs_review, failed_retryable or completed"
        };
        return Transition::refuse(OpError::InvalidTransition {
            from: rec.state,
            message: format!(
                "cannot redeliver an event in state {}: {why}",
                rec.state.as_str()
            ),
        });
    }
    let mut next = successor(rec, now);
    next.state = State::Prepared;
    next.lease_id = None::<LeaseId>;
    next.lease_expires_at = None;
    next.not_before = None;
    next.review_reason = None;
    next.reported = false;
    next.budget_base = rec.attempt;
    next.window_start = now;
    next.final_at = None;
    let mut e = event(
        &next,
        EventType::Resolved,
        Some(rec.state),
        Some(State::Prepared),
        now,
    );
    e.note = Some(note.to_owned());
    e.actor = ctx.actor.clone();
    Transition::update_record(next, vec![e])
}

#[cfg(test)]
#[path = "intake_tests.rs"]
mod tests;
