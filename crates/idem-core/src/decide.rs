//! The decision table: one pure function, [`apply`], from (existing record or none, operation,
//! namespace context, now) to a [`Transition`]: the record to write, the events to append, the
//! alerts to queue and the answer to give.
//!
//! Stores run `apply` inside one atomic step (a transaction whose write is guarded by the
//! record's `version` or a unique constraint) and persist exactly what it returns, so the rules
//! of the product are readable here and testable without a database. Invariants kept:
//! - at most one valid lease per record; every acquisition increments `attempt` and draws a
//!   new lease id, which fences every older token;
//! - conflict (same key, different fingerprint) beats every state;
//! - nothing ambiguous is ever retried automatically: it goes to `needs_review`;
//! - a final state (`completed`, `failed_permanent`) is left only by an operator.
//!
//! This file holds the types, the dispatch and the transition scaffold every rule builds on
//! (the next version of a record, events, alerts, refusals); the rules themselves live one
//! operation family per file: `claim` (claim, first acquisition, resume), `worker` (the
//! token gate in front of every worker write), `prepare`, `heartbeat`, `complete`
//! (complete and fail: the holder reports its outcome), `operator` (resolve, approve,
//! reject) and `sweep` (the janitor). No rule may read a clock or draw randomness: both
//! arrive in [`Ctx`].

use serde_json::Value;

use crate::classify::Class;
use crate::fingerprint::{canonical_json, Fingerprint};
use crate::ids::{Key, Namespace};
use crate::ids::{LeaseId, Token};
use crate::policy::{LeaseExpiry, Policy};
use crate::record::{
    AlertDraft, AlertReason, AttemptCost, EventDraft, EventType, Record, ReviewReason, State,
};
use crate::time::Timestamp;

mod claim;
mod common;
mod complete;
mod effect;
mod heartbeat;
mod intake;
mod operator;
mod prepare;
mod sweep;
mod worker;

pub use intake::{
    DeliveryOf, ForwardOutcome, ForwardReportRequest, ForwardRetry, ForwardStartRequest,
    IntakeReceiveRequest, COLLISION_MESSAGE, FORWARD_OWNER, PAUSED_RECHECK_MS,
};
pub use worker::{reports_effect, FENCED_COMPLETION_NOTE};

/// What the namespace and the moment contribute to a decision. Random inputs (the next lease
/// id, the jitter draw) are passed in so that `apply` stays deterministic.
#[derive(Debug, Clone)]
pub struct Ctx<'a> {
    pub now: Timestamp,
    pub policy: &'a Policy,
    pub paused: bool,
    /// First-time acquisitions in this namespace so far today (UTC).
    pub daily_count: u64,
    pub new_lease_id: LeaseId,
    /// Uniform draw in `[0, 1)` for backoff jitter.
    pub jitter: f64,
    /// Who performs an operator action (recorded on its event).
    pub actor: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimRequest {
    pub fingerprint: Option<Fingerprint>,
    pub owner: Option<String>,
    pub lease_ms: Option<i64>,
    pub correlation_id: Option<String>,
    pub lease_expiry: Option<LeaseExpiry>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PrepareRequest {
    pub token: String,
    pub payload: Value,
    pub approval_required: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatRequest {
    pub token: String,
    pub lease_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompleteRequest {
    pub token: String,
    pub result: Option<Value>,
    pub external_ref: Option<String>,
    /// What this attempt spent (recorded on its event, summed on the record).
    pub cost: Option<AttemptCost>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailErrorInput {
    pub category: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailRequest {
    pub token: String,
    pub kind: Option<Class>,
    pub http_status: Option<u16>,
    /// `Retry-After` already converted to milliseconds from now.
    pub retry_after_ms: Option<i64>,
    pub sent: Option<bool>,
    pub error: Option<FailErrorInput>,
    /// What this attempt spent (recorded on its event, summed on the record).
    pub cost: Option<AttemptCost>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveAction {
    Completed,
    Retry,
    FailedPermanent,
}

impl ResolveAction {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "completed" => Some(Self::Completed),
            "retry" => Some(Self::Retry),
            "failed_permanent" => Some(Self::FailedPermanent),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResolveRequest {
    pub action: ResolveAction,
    pub external_ref: Option<String>,
    pub result: Option<Value>,
    pub note: String,
}

/// An effect's holder is about to send its request: record it (and the `sent` event) before
/// the first byte leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectSentRequest {
    pub token: String,
    pub request: crate::effect::RequestSummary,
}

/// How an effect's attempt ended, as the effect rules read it: a completion or a failure of
/// the given class, with the response to keep and, when a lookup ran, what it said.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectReportRequest {
    pub token: String,
    pub verdict: crate::effect::Verdict,
    /// The response of this attempt (or of the lookup, after `found`), as
    /// [`crate::effect::Captured::to_json`] writes it. Stored as the result in `completed`
    /// and `failed_permanent` only.
    pub response: Option<Value>,
    /// `last_error` of a failure: category, message (sanitized here), HTTP status.
    pub category: String,
    pub message: String,
    pub http_status: Option<u16>,
    /// The request may have reached the destination.
    pub sent: bool,
    pub reconciled: Option<crate::effect::Reconciled>,
    /// What the caller reports this attempt cost (as on complete and fail).
    pub cost: Option<crate::record::AttemptCost>,
    /// What the attempt was to send. Kept by a record that shows no request yet: an attempt
    /// that ended before anything could leave (no `sent`: the name did not resolve, the
    /// upstream's handshake failed) still shows a person what it tried.
    pub request: Option<crate::effect::RequestSummary>,
}

/// Every operation on one record.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Claim(ClaimRequest),
    Prepare(PrepareRequest),
    Heartbeat(HeartbeatRequest),
    Complete(CompleteRequest),
    Fail(FailRequest),
    /// An effect's request is about to leave.
    EffectSent(EffectSentRequest),
    /// An effect's attempt ended.
    EffectReport(EffectReportRequest),
    Resolve(ResolveRequest),
    Approve {
        note: Option<String>,
    },
    Reject {
        note: Option<String>,
    },
    /// The janitor's look at one record: eager lease expiry and stuck detection.
    Sweep,
    /// A verified inbound webhook event arrives (`intake`).
    IntakeReceive(IntakeReceiveRequest),
    /// The delivery worker starts a forward attempt (takes the record's lease).
    ForwardStart(ForwardStartRequest),
    /// The forward attempt's holder reports how it ended.
    ForwardReport(ForwardReportRequest),
    /// An operator schedules an inbound event's delivery again, with a fresh budget.
    Redeliver {
        note: String,
    },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Claim(_) => "claim",
            Op::Prepare(_) => "prepare",
            Op::Heartbeat(_) => "heartbeat",
            Op::Complete(_) => "complete",
            Op::Fail(_) => "fail",
            Op::EffectSent(_) => "effect_sent",
            Op::EffectReport(_) => "effect",
            Op::Resolve(_) => "resolve",
            Op::Approve { .. } => "approve",
            Op::Reject { .. } => "reject",
            Op::Sweep => "sweep",
            Op::IntakeReceive(_) => "intake",
            Op::ForwardStart(_) => "forward_start",
            Op::ForwardReport(_) => "forward_report",
            Op::Redeliver { .. } => "redeliver",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimOutcome {
    Acquired,
    Completed,
    FailedPermanent,
    Conflict,
    InFlight,
    Backoff,
    NeedsReview,
    AwaitingApproval,
    Paused,
    Limited,
}

impl ClaimOutcome {
    pub const ALL: [ClaimOutcome; 10] = [
        Self::Acquired,
        Self::Completed,
        Self::FailedPermanent,
        Self::Conflict,
        Self::InFlight,
        Self::Backoff,
        Self::NeedsReview,
        Self::AwaitingApproval,
        Self::Paused,
        Self::Limited,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquired => "acquired",
            Self::Completed => "completed",
            Self::FailedPermanent => "failed_permanent",
            Self::Conflict => "conflict",
            Self::InFlight => "in_flight",
            Self::Backoff => "backoff",
            Self::NeedsReview => "needs_review",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Paused => "paused",
            Self::Limited => "limited",
        }
    }
    /// Answers that replay a stored outcome (`Idempotent-Replayed: true`).
    pub fn is_replay(self) -> bool {
        matches!(self, Self::Completed | Self::FailedPermanent)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClaimReply {
    pub outcome: ClaimOutcome,
    pub record: Option<Record>,
    pub token: Option<Token>,
    /// Present on every `acquired`.
    pub resumed: Option<bool>,
    pub retry_after_ms: Option<i64>,
    /// The acquisition took over an expired lease (metric `idem_reclaims_total`).
    pub reclaimed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryDecision {
    pub allowed: bool,
    pub attempt: u32,
    /// The attempt number the current budget ends at (first attempt of the budget included).
    pub max_attempts: u32,
    pub not_before: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FailReply {
    pub record: Record,
    pub class: Class,
    pub retry: RetryDecision,
    /// Why it went to review, when it did.
    pub review_reason: Option<ReviewReason>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Claim(ClaimReply),
    /// prepare, heartbeat, complete, resolve, approve, reject: the record after the operation.
    Record(Record),
    /// The record the transition's write leaves, which is the answer: a decision holds it
    /// once, in [`Transition::write`], and [`written_reply`] moves it into a
    /// [`Reply::Record`] once it is written (`engine::finish`). Only a store's decision carries it; what a store
    /// answers never does.
    Written,
    Fail(FailReply),
    /// Sweep: whether the record changed.
    Swept {
        changed: bool,
    },
    /// The intake's receive and forward-start answers.
    Intake(IntakeReply),
}

/// What the intake's record rules answer (see `intake`).
#[derive(Debug, Clone, PartialEq)]
pub enum IntakeReply {
    /// A new event, waiting for its first delivery.
    Accepted { record: Box<Record> },
    /// The key was seen before (any state).
    Duplicate { record: Box<Record> },
    /// A new event without an id, kept in `needs_review`.
    Held { record: Box<Record> },
    /// The key is taken by a record that is not this event (or this delivery): nothing was
    /// written. The caller holds the event (or the delivery) for review under another key.
    Collision { record: Box<Record> },
    /// A forward attempt holds the lease with this token.
    Started {
        token: String,
        attempt: u32,
        record: Box<Record>,
    },
    /// Not yet: look again at `until` (backoff, or a paused namespace).
    Wait { until: Timestamp },
    /// Nothing to deliver now (delivered, in review, or another attempt holds the lease).
    Skip { state: State },
}

/// Why an operation was refused. Refusals other than `LeaseLost` write nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("no record for this key")]
    NotFound,
    #[error("the lease was lost: this token no longer holds the key (a later claim acquired it, or an operator decided it)")]
    LeaseLost,
    #[error("{message}")]
    InvalidTransition { from: State, message: String },
    /// `field` names what differs: `result`, else `external_ref`.
    #[error("the key was already completed with a different {field}")]
    ResultMismatch { field: &'static str },
    #[error("{message}")]
    InvalidField { field: String, message: String },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    None,
    Insert(Box<Record>),
    /// The new row; its `version` is the old one + 1 (stores guard on the old version).
    Update(Box<Record>),
}

/// An acquisition, as the namespace stats count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// A fresh acquisition (attempt 1).
    First,
    /// A resume: a later attempt of the same operation.
    Retry,
}

/// What one step counts, beyond the record: the namespace's hourly stats (acquisitions and
/// cost, persisted with the step) and the process metrics (cost, fenced completions, time to
/// recovery). Filled in by the rules; stores persist the stats part, servers count the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    pub acquired: Option<Acquired>,
    /// A reported cost and whether it was spent by an attempt after the first.
    pub cost: Option<(AttemptCost, bool)>,
    /// A report of an effect refused as `lease_lost` (see `worker`).
    pub fenced_completion: bool,
    /// A resolve that took the record out of `needs_review`: ms since it entered review.
    pub recovery_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub write: Write,
    pub events: Vec<EventDraft>,
    /// A first-time acquisition: counts against the namespace `daily_limit`.
    pub first_acquisition: bool,
    pub alerts: Vec<AlertDraft>,
    pub reply: Result<Reply, OpError>,
    pub tally: Tally,
}

impl Transition {
    fn reply(reply: Reply) -> Self {
        Transition {
            write: Write::None,
            events: vec![],
            first_acquisition: false,
            alerts: vec![],
            reply: Ok(reply),
            tally: Tally::default(),
        }
    }
    fn refuse(err: OpError) -> Self {
        Transition {
            write: Write::None,
            events: vec![],
            first_acquisition: false,
            alerts: vec![],
            reply: Err(err),
            tally: Tally::default(),
        }
    }
    /// `next` replaces the stored record (stores guard on its version − 1) and `reply` is the
    /// answer; never a first acquisition.
    fn update(
        next: Record,
        events: Vec<EventDraft>,
        alerts: Vec<AlertDraft>,
        reply: Reply,
    ) -> Self {
        Transition {
            write: Write::Update(Box::new(next)),
            events,
            first_acquisition: false,
            alerts,
            reply: Ok(reply),
            tally: Tally::default(),
        }
    }
    /// The common shape of a write: `next` replaces the stored record and is the answer
    /// ([`Reply::Written`]: one record, not a copy for the answer).
    fn update_record(next: Record, events: Vec<EventDraft>) -> Self {
        Self::update(next, events, vec![], Reply::Written)
    }

    /// [`written_reply`] on a copy, the transition left as it is: for tests and models that go
    /// on reading the write.
    pub fn reply_resolved(&self) -> Result<Reply, OpError> {
        match &self.reply {
            Ok(Reply::Written) => written_reply(self.write.clone(), Ok(Reply::Written)),
            other => other.clone(),
        }
    }
}

/// The answer of a transition whose parts were taken apart: [`Reply::Written`] becomes the
/// record `write` holds. A `Written` without a record to write (no rule makes one) stays as it
/// is, for the caller's "unexpected reply" error rather than a guess.
pub fn written_reply(write: Write, reply: Result<Reply, OpError>) -> Result<Reply, OpError> {
    match (reply, write) {
        (Ok(Reply::Written), Write::Insert(r) | Write::Update(r)) => Ok(Reply::Record(*r)),
        (reply, _) => reply,
    }
}

/// Longest stored error message; longer ones are cut.
pub const MAX_ERROR_MESSAGE: usize = 1000;

/// Error messages are stored for operators: control characters become spaces and the text is
/// cut to [`MAX_ERROR_MESSAGE`] characters.
pub fn sanitize_message(msg: &str) -> String {
    msg.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_ERROR_MESSAGE)
        .collect()
}

fn canon_eq(a: &Option<Value>, b: &Option<Value>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => match (canonical_json(x), canonical_json(y)) {
            (Ok(x), Ok(y)) => x == y,
            _ => x == y,
        },
        _ => false,
    }
}

fn event(
    rec: &Record,
    kind: EventType,
    from: Option<State>,
    to: Option<State>,
    now: Timestamp,
) -> EventDraft {
    EventDraft {
        at: now,
        kind,
        from_state: from,
        to_state: to,
        attempt: rec.attempt,
        owner: rec.owner.clone(),
        correlation_id: rec.correlation_id.clone(),
        note: None,
        actor: None,
        cost: None,
    }
}

fn with_note(mut e: EventDraft, note: impl Into<String>) -> EventDraft {
    e.note = Some(note.into());
    e
}

fn token_is_current(rec: &Record, token: &str) -> bool {
    match (Token::parse(token), &rec.lease_id) {
        (Some(t), Some(lease)) => t.attempt == rec.attempt && &t.lease_id == lease,
        _ => false,
    }
}

/// The next version of `rec`: a copy whose `version` is one higher (the write is guarded on
/// the old one) and whose `updated_at` is `now`. Each rule then sets what it changes.
fn successor(rec: &Record, now: Timestamp) -> Record {
    let mut next = rec.clone();
    next.updated_at = now;
    next.version = rec.version + 1;
    next
}

/// The alert queued when `rec` enters `needs_review` (its last error and attempt).
fn review_alert(rec: &Record, now: Timestamp) -> AlertDraft {
    AlertDraft {
        reason: AlertReason::NeedsReview,
        state: State::NeedsReview,
        error_category: rec.last_error.as_ref().map(|e| e.category.clone()),
        attempt: rec.attempt,
        at: now,
    }
}

/// The alert queued when a `processing` record shows no sign of life for `stuck_after_ms`.
fn stuck_alert(rec: &Record, now: Timestamp) -> AlertDraft {
    AlertDraft {
        reason: AlertReason::Stuck,
        state: State::Processing,
        error_category: None,
        attempt: rec.attempt,
        at: now,
    }
}

fn invalid(rec: &Record, op: &Op, why: &str) -> Transition {
    Transition::refuse(OpError::InvalidTransition {
        from: rec.state,
        message: format!(
            "cannot {} a record in state {}: {why}",
            op.name(),
            rec.state.as_str()
        ),
    })
}

/// Moves a record to `needs_review` (claim path answers `needs_review`, sweep path `Swept`).
fn to_review(
    rec: &Record,
    reason: ReviewReason,
    note: &str,
    ctx: &Ctx<'_>,
    claim_path: bool,
) -> Transition {
    let now = ctx.now;
    let mut next = successor(rec, now);
    next.state = State::NeedsReview;
    next.review_reason = Some(reason);
    next.lease_expires_at = None;
    let e = with_note(
        event(
            &next,
            EventType::MovedToReview,
            Some(rec.state),
            Some(State::NeedsReview),
            now,
        ),
        note,
    );
    let alerts = vec![review_alert(rec, now)];
    let reply = if claim_path {
        Reply::Claim(claim::claim_reply(
            ClaimOutcome::NeedsReview,
            Some(next.clone()),
        ))
    } else {
        Reply::Swept { changed: true }
    };
    Transition::update(next, vec![e], alerts, reply)
}

/// Applies `op` to the record (if any) for `(ns, key)`.
pub fn apply(
    ns: &Namespace,
    key: &Key,
    existing: Option<&Record>,
    op: &Op,
    ctx: &Ctx<'_>,
) -> Transition {
    let mut t = dispatch(ns, key, existing, op, ctx);
    review_clock(&mut t, existing, op, ctx.now);
    if let Ok(Reply::Claim(c)) = &t.reply {
        if c.outcome == ClaimOutcome::Acquired {
            t.tally.acquired = Some(if c.resumed == Some(true) {
                Acquired::Retry
            } else {
                Acquired::First
            });
        }
    }
    t
}

/// Keeps `review_since` on every record a transition writes or answers with: stamped `now`
/// when the record enters `needs_review`, kept while it stays, cleared when it leaves. A
/// resolve that leaves `needs_review` reports the time it waited (`idem_recovery_seconds`).
fn review_clock(t: &mut Transition, existing: Option<&Record>, op: &Op, now: Timestamp) {
    let before = existing.map(|r| r.state);
    let since = existing.and_then(|r| r.review_since);
    let stamp = |r: &mut Record| {
        r.review_since = match (before, r.state) {
            (_, s) if s != State::NeedsReview => None,
            (Some(State::NeedsReview), _) => since.or(Some(now)),
            _ => Some(now),
        };
    };
    match &mut t.write {
        Write::Insert(r) | Write::Update(r) => stamp(r),
        Write::None => {}
    }
    match &mut t.reply {
        Ok(Reply::Record(r)) => stamp(r),
        Ok(Reply::Fail(f)) => stamp(&mut f.record),
        Ok(Reply::Claim(c)) => {
            if let Some(r) = c.record.as_mut() {
                stamp(r);
            }
        }
        _ => {}
    }
    if let (Op::Resolve(_), Some(rec), Ok(_)) = (op, existing, &t.reply) {
        if rec.state == State::NeedsReview {
            // Records that entered review before the clock was kept count from their last
            // change (the migration stamps them with it).
            let entered = rec.review_since.unwrap_or(rec.updated_at);
            t.tally.recovery_ms = Some((now.0 - entered.0).max(0));
        }
    }
}

fn dispatch(
    ns: &Namespace,
    key: &Key,
    existing: Option<&Record>,
    op: &Op,
    ctx: &Ctx<'_>,
) -> Transition {
    match op {
        Op::Claim(req) => claim::claim(ns, key, existing, req, ctx),
        Op::IntakeReceive(r) => intake::receive(ns, key, existing, r, ctx),
        Op::Sweep => match existing {
            Some(rec) => sweep::sweep(rec, ctx),
            None => Transition::reply(Reply::Swept { changed: false }),
        },
        _ => {
            let Some(rec) = existing else {
                return Transition::refuse(OpError::NotFound);
            };
            match op {
                Op::Prepare(r) => worker::worker_write(rec, &r.token, op, ctx),
                Op::Heartbeat(r) => worker::worker_write(rec, &r.token, op, ctx),
                Op::Complete(r) => worker::worker_write(rec, &r.token, op, ctx),
                Op::Fail(r) => worker::worker_write(rec, &r.token, op, ctx),
                Op::EffectSent(r) => worker::worker_write(rec, &r.token, op, ctx),
                Op::EffectReport(r) => worker::worker_write(rec, &r.token, op, ctx),
                Op::Resolve(r) => operator::resolve(rec, r, ctx),
                Op::Approve { note } => operator::approve(rec, note.as_deref(), ctx),
                Op::Reject { note } => operator::reject(rec, note.as_deref(), ctx),
                Op::ForwardStart(r) => intake::start(rec, r, ctx),
                Op::ForwardReport(r) => intake::report(rec, r, ctx),
                Op::Redeliver { note } => intake::redeliver(rec, note, ctx),
                Op::Claim(_) | Op::Sweep | Op::IntakeReceive(_) => {
                    Transition::refuse(OpError::NotFound)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
