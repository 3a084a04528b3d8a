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

use serde_json::Value;

use crate::classify::{backoff_ms, classify, Class, FailSignal};
use crate::fingerprint::{canonical_json, Fingerprint};
use crate::ids::{Key, Namespace};
use crate::ids::{LeaseId, Token};
use crate::policy::{LeaseExpiry, Policy};
use crate::record::{
    AlertDraft, AlertReason, EventDraft, EventType, LastError, Record, ReviewReason, State,
};
use crate::time::Timestamp;

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailErrorInput {
    pub category: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailRequest {
    pub token: String,
    pub kind: Option<Class>,
    pub http_status: Option<u16>,
    /// `Retry-After` already converted to milliseconds from now.
    pub retry_after_ms: Option<i64>,
    pub sent: Option<bool>,
    pub error: Option<FailErrorInput>,
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

/// Every operation on one record.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Claim(ClaimRequest),
    Prepare(PrepareRequest),
    Heartbeat(HeartbeatRequest),
    Complete(CompleteRequest),
    Fail(FailRequest),
    Resolve(ResolveRequest),
    Approve {
        note: Option<String>,
    },
    Reject {
        note: Option<String>,
    },
    /// The janitor's look at one record: eager lease expiry and stuck detection.
    Sweep,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Claim(_) => "claim",
            Op::Prepare(_) => "prepare",
            Op::Heartbeat(_) => "heartbeat",
            Op::Complete(_) => "complete",
            Op::Fail(_) => "fail",
            Op::Resolve(_) => "resolve",
            Op::Approve { .. } => "approve",
            Op::Reject { .. } => "reject",
            Op::Sweep => "sweep",
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
    Fail(FailReply),
    /// Sweep: whether the record changed.
    Swept {
        changed: bool,
    },
}

/// Why an operation was refused. Refusals other than `LeaseLost` write nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("no record for this key")]
    NotFound,
    #[error("the lease was lost: this token is not the newest for this key")]
    LeaseLost,
    #[error("{message}")]
    InvalidTransition { from: State, message: String },
    #[error("the key was already completed with a different result or external_ref")]
    ResultMismatch,
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

#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub write: Write,
    pub events: Vec<EventDraft>,
    /// A first-time acquisition: counts against the namespace `daily_limit`.
    pub first_acquisition: bool,
    pub alerts: Vec<AlertDraft>,
    pub reply: Result<Reply, OpError>,
}

impl Transition {
    fn reply(reply: Reply) -> Self {
        Transition {
            write: Write::None,
            events: vec![],
            first_acquisition: false,
            alerts: vec![],
            reply: Ok(reply),
        }
    }
    fn refuse(err: OpError) -> Self {
        Transition {
            write: Write::None,
            events: vec![],
            first_acquisition: false,
            alerts: vec![],
            reply: Err(err),
        }
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

/// Applies `op` to the record (if any) for `(ns, key)`.
pub fn apply(
    ns: &Namespace,
    key: &Key,
    existing: Option<&Record>,
    op: &Op,
    ctx: &Ctx<'_>,
) -> Transition {
    match op {
        Op::Claim(req) => claim(ns, key, existing, req, ctx),
        Op::Sweep => match existing {
            Some(rec) => sweep(rec, ctx),
            None => Transition::reply(Reply::Swept { changed: false }),
        },
        _ => {
            let Some(rec) = existing else {
                return Transition::refuse(OpError::NotFound);
            };
            match op {
                Op::Prepare(r) => worker_write(rec, &r.token, op, ctx),
                Op::Heartbeat(r) => worker_write(rec, &r.token, op, ctx),
                Op::Complete(r) => worker_write(rec, &r.token, op, ctx),
                Op::Fail(r) => worker_write(rec, &r.token, op, ctx),
                Op::Resolve(r) => resolve(rec, r, ctx),
                Op::Approve { note } => approve(rec, note.as_deref(), ctx),
                Op::Reject { note } => reject(rec, note.as_deref(), ctx),
                Op::Claim(_) | Op::Sweep => Transition::refuse(OpError::NotFound),
            }
        }
    }
}

// ---------------------------------------------------------------- claim

fn claim_reply(outcome: ClaimOutcome, record: Option<Record>) -> ClaimReply {
    ClaimReply {
        outcome,
        record,
        token: None,
        resumed: None,
        retry_after_ms: None,
        reclaimed: false,
    }
}

fn claim(
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
            let mut e = event(
                rec,
                EventType::Conflict,
                Some(rec.state),
                Some(rec.state),
                now,
            );
            e.owner = req.owner.clone();
            e.correlation_id = req.correlation_id.clone();
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
        let mut e = event(
            rec,
            EventType::DuplicateHit,
            Some(rec.state),
            Some(rec.state),
            now,
        );
        e.owner = req.owner.clone();
        e.correlation_id = req.correlation_id.clone();
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
                let mut e = event(
                    rec,
                    EventType::InFlight,
                    Some(rec.state),
                    Some(rec.state),
                    now,
                );
                e.owner = req.owner.clone();
                e.correlation_id = req.correlation_id.clone();
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
            if rec.state == State::Processing && rec.lease_expiry == LeaseExpiry::Review {
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
        lease_id: Some(ctx.new_lease_id.clone()),
        lease_expiry: req.lease_expiry.unwrap_or(ctx.policy.lease_expiry),
        reported: false,
        budget_base: 0,
        window_start: now,
        final_at: None,
        active_at: now,
        review_reason: None,
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
    let mut next = rec.clone();
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
    next.updated_at = now;
    next.version = rec.version + 1;
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
    Transition {
        write: Write::Update(Box::new(next.clone())),
        events: vec![e],
        first_acquisition: false,
        alerts: vec![],
        reply: Ok(Reply::Claim(ClaimReply {
            outcome: ClaimOutcome::Acquired,
            record: Some(next),
            token: Some(token),
            resumed: Some(true),
            retry_after_ms: None,
            reclaimed,
        })),
    }
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
    let mut next = rec.clone();
    next.state = State::NeedsReview;
    next.review_reason = Some(reason);
    next.lease_expires_at = None;
    next.updated_at = now;
    next.version = rec.version + 1;
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
    let alerts = vec![AlertDraft {
        reason: AlertReason::NeedsReview,
        state: State::NeedsReview,
        error_category: rec.last_error.as_ref().map(|e| e.category.clone()),
        attempt: rec.attempt,
        at: now,
    }];
    let reply = if claim_path {
        Reply::Claim(claim_reply(ClaimOutcome::NeedsReview, Some(next.clone())))
    } else {
        Reply::Swept { changed: true }
    };
    Transition {
        write: Write::Update(Box::new(next)),
        events: vec![e],
        first_acquisition: false,
        alerts,
        reply: Ok(reply),
    }
}

// ---------------------------------------------------------------- worker writes

fn lease_lost(rec: &Record, op: &Op, ctx: &Ctx<'_>) -> Transition {
    let e = with_note(
        event(
            rec,
            EventType::LeaseLost,
            Some(rec.state),
            Some(rec.state),
            ctx.now,
        ),
        format!("{} refused: stale or unknown token", op.name()),
    );
    Transition {
        events: vec![e],
        ..Transition::refuse(OpError::LeaseLost)
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

/// A record the current token holder may still write to: leased states, and `needs_review`
/// reached while the holder had not reported yet (a late report resolves the doubt). That is
/// lease expiry or stuck detection, and also a claim that found the lease expired but could
/// not resume it because the budget was spent: nobody acquired since, so the holder's token is
/// still the newest. (`worker_write` refuses once the holder reported; operator decisions
/// clear the lease id, so no token reaches here after them.)
fn holder_may_report(rec: &Record) -> bool {
    match rec.state {
        State::Processing | State::Prepared => true,
        State::NeedsReview => matches!(
            rec.review_reason,
            Some(ReviewReason::LeaseExpired | ReviewReason::Stuck | ReviewReason::BudgetExhausted)
        ),
        _ => false,
    }
}

fn worker_write(rec: &Record, token: &str, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !token_is_current(rec, token) {
        return lease_lost(rec, op, ctx);
    }
    if let Op::Complete(c) = op {
        if rec.state == State::Completed {
            return repeat_complete(rec, c);
        }
    }
    if rec.reported {
        return invalid(rec, op, "this token's holder already reported its outcome");
    }
    match op {
        Op::Prepare(r) => prepare(rec, r, op, ctx),
        Op::Heartbeat(r) => heartbeat(rec, r, op, ctx),
        Op::Complete(r) => complete(rec, r, op, ctx),
        Op::Fail(r) => fail(rec, r, op, ctx),
        _ => invalid(rec, op, "not a worker write"),
    }
}

fn repeat_complete(rec: &Record, c: &CompleteRequest) -> Transition {
    let same_ref = rec.external_ref == c.external_ref;
    let same_result = rec.result_expired || canon_eq(&rec.result, &c.result);
    if same_ref && same_result {
        Transition::reply(Reply::Record(rec.clone()))
    } else {
        Transition::refuse(OpError::ResultMismatch)
    }
}

fn prepare(rec: &Record, r: &PrepareRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
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
    let mut next = rec.clone();
    next.state = to;
    next.prepared_payload = Some(r.payload.clone());
    if to == State::AwaitingApproval {
        next.lease_expires_at = None;
    }
    next.updated_at = now;
    next.version = rec.version + 1;
    let e = event(&next, EventType::Prepared, Some(rec.state), Some(to), now);
    Transition {
        write: Write::Update(Box::new(next.clone())),
        events: vec![e],
        first_acquisition: false,
        alerts: vec![],
        reply: Ok(Reply::Record(next)),
    }
}

fn heartbeat(rec: &Record, r: &HeartbeatRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !rec.state.is_leased() {
        return invalid(rec, op, "no lease to extend");
    }
    let mut next = rec.clone();
    next.lease_expires_at = Some(ctx.now.plus_ms(r.lease_ms.unwrap_or(ctx.policy.lease_ms)));
    next.active_at = ctx.now;
    next.stuck_alerted = false;
    next.updated_at = ctx.now;
    next.version = rec.version + 1;
    Transition {
        write: Write::Update(Box::new(next.clone())),
        events: vec![],
        first_acquisition: false,
        alerts: vec![],
        reply: Ok(Reply::Record(next)),
    }
}

fn complete(rec: &Record, r: &CompleteRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
    if !holder_may_report(rec) {
        return invalid(rec, op, "the record is not held by this token");
    }
    let now = ctx.now;
    let mut next = rec.clone();
    next.state = State::Completed;
    next.result = r.result.clone();
    next.external_ref = r.external_ref.clone();
    next.lease_expires_at = None;
    next.not_before = None;
    next.reported = true;
    next.final_at = Some(now);
    next.review_reason = None;
    next.updated_at = now;
    next.version = rec.version + 1;
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
    Transition {
        write: Write::Update(Box::new(next.clone())),
        events: vec![e],
        first_acquisition: false,
        alerts: vec![],
        reply: Ok(Reply::Record(next)),
    }
}

fn fail(rec: &Record, r: &FailRequest, op: &Op, ctx: &Ctx<'_>) -> Transition {
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
    let mut next = rec.clone();
    next.state = to;
    next.last_error = Some(last_error);
    next.lease_expires_at = None;
    next.not_before = retry.not_before;
    next.reported = true;
    next.review_reason = reason;
    next.final_at = if to.is_final() { Some(now) } else { None };
    next.updated_at = now;
    next.version = rec.version + 1;
    let e = with_note(
        event(&next, EventType::Failed, Some(rec.state), Some(to), now),
        format!("{}: {note}", class.as_str()),
    );
    let alerts = if to == State::NeedsReview {
        vec![AlertDraft {
            reason: AlertReason::NeedsReview,
            state: to,
            error_category: next.last_error.as_ref().map(|e| e.category.clone()),
            attempt: next.attempt,
            at: now,
        }]
    } else {
        vec![]
    };
    Transition {
        write: Write::Update(Box::new(next.clone())),
        events: vec![e],
        first_acquisition: false,
        alerts,
        reply: Ok(Reply::Fail(FailReply {
            record: next,
            class,
            retry,
            review_reason: reason,
        })),
    }
}

// ---------------------------------------------------------------- operator actions

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

fn resolve(rec: &Record, r: &ResolveRequest, ctx: &Ctx<'_>) -> Transition {
    let now = ctx.now;
    let allowed = match rec.state {
        State::NeedsReview | State::FailedRetryable | State::FailedPermanent => true,
        State::Processing | State::Prepared => !rec.lease_valid(now),
        State::Completed | State::AwaitingApproval => false,
    };
    if !allowed {
        return invalid(rec, &Op::Resolve(r.clone()), "resolve works from needs_review, failed_retryable, failed_permanent, or an expired lease");
    }
    let mut next = rec.clone();
    next.lease_id = None; // an operator's decision fences out every earlier token
    next.lease_expires_at = None;
    next.review_reason = None;
    next.reported = false;
    next.updated_at = now;
    next.version = rec.version + 1;
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
    Transition {
        write: Write::Update(Box::new(next.clone())),
        events: vec![e],
        first_acquisition: false,
        alerts: vec![],
        reply: Ok(Reply::Record(next)),
    }
}

fn approve(rec: &Record, note: Option<&str>, ctx: &Ctx<'_>) -> Transition {
    if rec.state != State::AwaitingApproval {
        return invalid(
            rec,
            &Op::Approve { note: None },
            "only awaiting_approval can be approved",
        );
    }
    let mut next = rec.clone();
    next.state = State::Prepared;
    next.lease_id = None;
    next.lease_expires_at = None;
    next.updated_at = ctx.now;
    next.version = rec.version + 1;
    let e = operator_event(&next, EventType::Approved, rec.state, note, ctx);
    Transition {
        write: Write::Update(Box::new(next.clone())),
        events: vec![e],
        first_acquisition: false,
        alerts: vec![],
        reply: Ok(Reply::Record(next)),
    }
}

fn reject(rec: &Record, note: Option<&str>, ctx: &Ctx<'_>) -> Transition {
    if rec.state != State::AwaitingApproval {
        return invalid(
            rec,
            &Op::Reject { note: None },
            "only awaiting_approval can be rejected",
        );
    }
    let mut next = rec.clone();
    next.state = State::FailedPermanent;
    next.lease_id = None;
    next.lease_expires_at = None;
    next.final_at = Some(ctx.now);
    next.last_error = Some(LastError {
        category: "rejected".into(),
        message: sanitize_message(note.unwrap_or("rejected by an operator")),
        http_status: None,
    });
    next.updated_at = ctx.now;
    next.version = rec.version + 1;
    let e = operator_event(&next, EventType::Rejected, rec.state, note, ctx);
    Transition {
        write: Write::Update(Box::new(next.clone())),
        events: vec![e],
        first_acquisition: false,
        alerts: vec![],
        reply: Ok(Reply::Record(next)),
    }
}

// ---------------------------------------------------------------- janitor

fn sweep(rec: &Record, ctx: &Ctx<'_>) -> Transition {
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
            t.alerts.insert(
                0,
                AlertDraft {
                    reason: AlertReason::Stuck,
                    state: State::Processing,
                    error_category: None,
                    attempt: rec.attempt,
                    at: now,
                },
            );
            return t;
        }
        let mut next = rec.clone();
        next.stuck_alerted = true;
        next.version = rec.version + 1;
        return Transition {
            write: Write::Update(Box::new(next)),
            events: vec![],
            first_acquisition: false,
            alerts: vec![AlertDraft {
                reason: AlertReason::Stuck,
                state: State::Processing,
                error_category: None,
                attempt: rec.attempt,
                at: now,
            }],
            reply: Ok(Reply::Swept { changed: true }),
        };
    }
    Transition::reply(Reply::Swept { changed: false })
}

/// What retention does to a record at `now` under `policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionAction {
    Keep,
    /// Drop result and payloads, keep the tombstone.
    ExpireResult,
    /// Delete the tombstone and its events.
    Delete,
}

/// Retention applies only to final states, counted from the moment they were reached.
/// `processing` and `needs_review` are never touched.
pub fn retention_action(rec: &Record, policy: &Policy, now: Timestamp) -> RetentionAction {
    let Some(final_at) = rec.final_at.filter(|_| rec.state.is_final()) else {
        return RetentionAction::Keep;
    };
    let age = now.0.saturating_sub(final_at.0);
    if age >= policy.audit_retention_ms {
        RetentionAction::Delete
    } else if age >= policy.retention_ms && !rec.result_expired {
        RetentionAction::ExpireResult
    } else {
        RetentionAction::Keep
    }
}

#[cfg(test)]
mod tests;
