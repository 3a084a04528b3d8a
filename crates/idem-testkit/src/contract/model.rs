//! A proptest model of one record, written from the contract (API.md) and independent of
//! `idem_core::decide`: random sequences of claims (several workers, with and without
//! fingerprints, short and long leases), prepare, heartbeat, complete, fail of every class,
//! operator resolve/approve/reject, clock jumps and janitor sweeps are applied both to a real
//! store and to [`Model`]; after every step the answer (outcome or refusal) and the stored
//! state, attempt, lease expiry, `not_before` and prepared payload must agree.
//!
//! The model deliberately restates the rules in the plainest form (one `match` per operation)
//! so that a disagreement points at either the store or the decision table.
//!
//! Cost: completes and fails carry a random `cost`; the model sums it like the contract says
//! (first attempt vs retries, refused `lease_lost` reports included, repeated or refused
//! ones otherwise not), and after every step the record's `cost` must equal the model's and
//! the sum of the costs on its events (the property `record.cost.tokens` = Σ event costs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idem_core::{
    AttemptCost, ClaimOutcome, ClaimRequest, Class, CompleteRequest, FailErrorInput, FailRequest,
    Fingerprint, HeartbeatRequest, LeaseId, Namespace, Op, OpError, PrepareRequest, Reply,
    ResolveAction, ResolveRequest, State, Timestamp,
};
use idem_store::{ExecCtx, NamespaceChange, Store};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};

use super::{key, ns, DAY_MS, T0};

const LEASE_MS: i64 = 10_000;
const LONG_LEASE_MS: i64 = 60_000;
const STUCK_MS: i64 = 45_000;
const MAX_ATTEMPTS: u32 = 3;
const BASE_MS: i64 = 1_000;
const MAX_MS: i64 = 4_000;
const WINDOW_MS: i64 = 600_000;
/// The jitter every step passes: backoff is half its ceiling.
const JITTER: f64 = 0.5;
/// Workers 0..3 claim; worker 3 never does and writes with a made-up token.
const WORKERS: usize = 4;

#[derive(Debug, Clone)]
pub enum MOp {
    Claim {
        worker: usize,
        fp: Option<u8>,
        long_lease: bool,
    },
    Prepare {
        worker: usize,
        payload: u8,
        approval: bool,
    },
    Heartbeat {
        worker: usize,
    },
    Complete {
        worker: usize,
        result: u8,
        cost: Option<u8>,
    },
    Fail {
        worker: usize,
        class: Class,
        retry_after_ms: Option<i64>,
        cost: Option<u8>,
    },
    Resolve(ResolveAction),
    Approve,
    Reject,
    Advance(i64),
    Sweep,
}

fn op_strategy() -> impl Strategy<Value = MOp> {
    let class = prop_oneof![
        Just(Class::Retryable),
        Just(Class::Permanent),
        Just(Class::Ambiguous)
    ];
    let action = prop_oneof![
        Just(ResolveAction::Retry),
        Just(ResolveAction::Completed),
        Just(ResolveAction::FailedPermanent)
    ];
    prop_oneof![
        5 => (0..3usize, prop::option::of(0..2u8), prop::bool::weighted(0.3))
            .prop_map(|(worker, fp, long_lease)| MOp::Claim { worker, fp, long_lease }),
        1 => (0..WORKERS, 0..2u8, prop::bool::weighted(0.3))
            .prop_map(|(worker, payload, approval)| MOp::Prepare { worker, payload, approval }),
        1 => (0..WORKERS).prop_map(|worker| MOp::Heartbeat { worker }),
        2 => (0..WORKERS, 0..2u8, prop::option::of(0..3u8))
            .prop_map(|(worker, result, cost)| MOp::Complete { worker, result, cost }),
        2 => (
            0..WORKERS,
            class,
            prop::option::of(prop_oneof![Just(2_000i64), Just(700_000)]),
            prop::option::of(0..3u8),
        )
            .prop_map(|(worker, class, retry_after_ms, cost)| MOp::Fail {
                worker,
                class,
                retry_after_ms,
                cost,
            }),
        1 => action.prop_map(MOp::Resolve),
        1 => Just(MOp::Approve),
        1 => Just(MOp::Reject),
        3 => prop_oneof![
            Just(500i64), Just(3_000), Just(10_000), Just(30_000), Just(46_000), Just(120_000),
            Just(700_000)
        ].prop_map(MOp::Advance),
        2 => Just(MOp::Sweep),
    ]
}

/// What the model expects an operation to answer.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Claim {
        outcome: ClaimOutcome,
        retry_after_ms: Option<i64>,
        resumed: Option<bool>,
    },
    Ok,
    Refused(Refusal),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    NotFound,
    LeaseLost,
    InvalidTransition,
    ResultMismatch,
}

fn refusal(e: &OpError) -> Result<Refusal, String> {
    Ok(match e {
        OpError::NotFound => Refusal::NotFound,
        OpError::LeaseLost => Refusal::LeaseLost,
        OpError::InvalidTransition { .. } => Refusal::InvalidTransition,
        OpError::ResultMismatch { .. } => Refusal::ResultMismatch,
        OpError::InvalidField { field, message } => {
            return Err(format!("unexpected invalid_field {field}: {message}"))
        }
    })
}

#[derive(Debug, Clone)]
struct MRec {
    state: State,
    attempt: u32,
    fp: Option<u8>,
    lease_until: Option<i64>,
    /// The newest token, while it may still write (an operator decision fences it out).
    token: Option<String>,
    /// The newest token's holder has reported (complete or fail).
    reported: bool,
    not_before: Option<i64>,
    budget_base: u32,
    window_start: i64,
    prepared: Option<u8>,
    result: Option<u8>,
    active_at: i64,
    stuck_alerted: bool,
    /// Its draft was rejected by an operator (a later `retry` starts without it).
    rejected: bool,
    /// (tokens, usd_nanos, retry_tokens, retry_usd_nanos) reported so far.
    cost: (u64, u64, u64, u64),
}

/// The cost a model step reports: `c` → (7c + 1 tokens, c cents).
fn cost_of(c: u8) -> AttemptCost {
    AttemptCost::new(Some(u64::from(c) * 7 + 1), Some(f64::from(c) * 0.01)).expect("valid cost")
}

impl MRec {
    fn add_cost(&mut self, c: Option<u8>, attempt: u32) {
        if let Some(c) = c.map(cost_of) {
            self.cost.0 += c.tokens;
            self.cost.1 += c.usd_nanos;
            if attempt > 1 {
                self.cost.2 += c.tokens;
                self.cost.3 += c.usd_nanos;
            }
        }
    }
}

/// The attempt a token names (`<attempt>.<lease>`) when the record has had it; anything else
/// counts as a later attempt.
fn token_attempt(token: &str, rec_attempt: u32) -> u32 {
    token
        .split_once('.')
        .and_then(|(a, _)| a.parse::<u32>().ok())
        .filter(|a| (1..=rec_attempt).contains(a))
        .unwrap_or(u32::MAX)
}

/// The contract's rules for one record, restated.
#[derive(Debug)]
struct Model {
    review: bool,
    rec: Option<MRec>,
}

impl Model {
    fn lease_valid(r: &MRec, now: i64) -> bool {
        matches!(r.state, State::Processing | State::Prepared)
            && r.lease_until.is_some_and(|t| t > now)
    }

    fn to_review(r: &mut MRec) {
        r.state = State::NeedsReview;
        r.lease_until = None;
    }

    /// A claim; `token` is what the store handed out when it acquired (the model cannot
    /// know the random lease id, only that a token must come with exactly the acquisitions).
    fn claim(&mut self, now: i64, fp: Option<u8>, lease_ms: i64, token: Option<&str>) -> Answer {
        let answer = |outcome, retry_after_ms, resumed| Answer::Claim {
            outcome,
            retry_after_ms,
            resumed,
        };
        let Some(r) = self.rec.as_mut() else {
            self.rec = Some(MRec {
                state: State::Processing,
                attempt: 1,
                fp,
                lease_until: Some(now + lease_ms),
                token: token.map(str::to_owned),
                reported: false,
                not_before: None,
                budget_base: 0,
                window_start: now,
                prepared: None,
                result: None,
                active_at: now,
                stuck_alerted: false,
                rejected: false,
                cost: (0, 0, 0, 0),
            });
            return answer(ClaimOutcome::Acquired, None, Some(false));
        };
        if let (Some(a), Some(b)) = (fp, r.fp) {
            if a != b {
                return answer(ClaimOutcome::Conflict, None, None);
            }
        }
        let resume = |r: &mut MRec| {
            if r.attempt + 1 - r.budget_base > MAX_ATTEMPTS || now > r.window_start + WINDOW_MS {
                Self::to_review(r);
                return answer(ClaimOutcome::NeedsReview, None, None);
            }
            r.attempt += 1;
            // A saved payload is reused by every later attempt.
            r.state = if r.prepared.is_some() {
                State::Prepared
            } else {
                State::Processing
            };
            r.lease_until = Some(now + lease_ms);
            r.token = token.map(str::to_owned);
            r.reported = false;
            r.not_before = None;
            r.active_at = now;
            r.stuck_alerted = false;
            answer(ClaimOutcome::Acquired, None, Some(true))
        };
        match r.state {
            State::Completed => answer(ClaimOutcome::Completed, None, None),
            State::FailedPermanent => answer(ClaimOutcome::FailedPermanent, None, None),
            State::NeedsReview => answer(ClaimOutcome::NeedsReview, None, None),
            State::AwaitingApproval => answer(ClaimOutcome::AwaitingApproval, None, None),
            State::FailedRetryable => match r.not_before {
                Some(nb) if nb > now => answer(ClaimOutcome::Backoff, Some(nb - now), None),
                _ => resume(r),
            },
            State::Processing | State::Prepared => {
                if Self::lease_valid(r, now) {
                    let left = r.lease_until.map(|t| t - now);
                    answer(ClaimOutcome::InFlight, left, None)
                } else if r.state == State::Processing && self.review {
                    Self::to_review(r);
                    answer(ClaimOutcome::NeedsReview, None, None)
                } else {
                    // an expired lease (reclaim, or a prepared payload) or an approved draft
                    resume(r)
                }
            }
        }
    }

    /// Common gate of worker writes: the record exists and `token` is its newest token.
    fn holder<'a>(&'a mut self, token: Option<&str>) -> Result<&'a mut MRec, Refusal> {
        let r = self.rec.as_mut().ok_or(Refusal::NotFound)?;
        match (&r.token, token) {
            (Some(a), Some(b)) if a == b => Ok(r),
            _ => Err(Refusal::LeaseLost),
        }
    }

    fn worker(&mut self, now: i64, token: Option<&str>, op: &MOp) -> Answer {
        let r = match self.holder(token) {
            Ok(r) => r,
            Err(e) => {
                // A refused report's cost was still spent: it is booked (lease_lost only).
                if let (Refusal::LeaseLost, Some(r)) = (e, self.rec.as_mut()) {
                    if let MOp::Complete { cost, .. } | MOp::Fail { cost, .. } = op {
                        let attempt = token_attempt(token.unwrap_or(""), r.attempt);
                        r.add_cost(*cost, attempt);
                    }
                }
                return Answer::Refused(e);
            }
        };
        if let MOp::Complete { result, .. } = op {
            if r.state == State::Completed {
                return if r.result == Some(*result) {
                    Answer::Ok
                } else {
                    Answer::Refused(Refusal::ResultMismatch)
                };
            }
        }
        if r.reported {
            return Answer::Refused(Refusal::InvalidTransition);
        }
        let leased = matches!(r.state, State::Processing | State::Prepared);
        // the holder may still report from needs_review it did not cause itself
        let may_report = leased || r.state == State::NeedsReview;
        match *op {
            MOp::Prepare {
                payload, approval, ..
            } => match r.state {
                State::Processing => {
                    r.prepared = Some(payload);
                    if approval {
                        r.state = State::AwaitingApproval;
                        r.lease_until = None;
                    } else {
                        r.state = State::Prepared;
                    }
                    Answer::Ok
                }
                State::Prepared if r.prepared == Some(payload) && !approval => Answer::Ok,
                _ => Answer::Refused(Refusal::InvalidTransition),
            },
            MOp::Heartbeat { .. } if leased => {
                r.lease_until = Some(now + LEASE_MS);
                r.active_at = now;
                r.stuck_alerted = false;
                Answer::Ok
            }
            MOp::Complete { result, cost, .. } if may_report => {
                let attempt = r.attempt;
                r.add_cost(cost, attempt);
                r.state = State::Completed;
                r.result = Some(result);
                r.lease_until = None;
                r.not_before = None;
                r.reported = true;
                Answer::Ok
            }
            MOp::Fail {
                class,
                retry_after_ms,
                cost,
                ..
            } if may_report => {
                let attempt = r.attempt;
                r.add_cost(cost, attempt);
                r.lease_until = None;
                r.reported = true;
                r.not_before = None;
                r.rejected = false;
                match class {
                    Class::Permanent => r.state = State::FailedPermanent,
                    Class::Ambiguous => r.state = State::NeedsReview,
                    Class::Retryable => {
                        let used = r.attempt - r.budget_base;
                        // full-jitter exponential backoff, never sooner than Retry-After
                        let ceiling = (BASE_MS << (used.max(1) - 1).min(20)).min(MAX_MS);
                        let delay = ((ceiling as f64 * JITTER).floor() as i64)
                            .max(retry_after_ms.unwrap_or(0));
                        if used >= MAX_ATTEMPTS || now + delay > r.window_start + WINDOW_MS {
                            r.state = State::NeedsReview;
                        } else {
                            r.state = State::FailedRetryable;
                            r.not_before = Some(now + delay);
                        }
                    }
                }
                Answer::Ok
            }
            _ => Answer::Refused(Refusal::InvalidTransition),
        }
    }

    fn operator(&mut self, now: i64, op: &MOp) -> Answer {
        let Some(r) = self.rec.as_mut() else {
            return Answer::Refused(Refusal::NotFound);
        };
        let lease_valid = Self::lease_valid(r, now);
        match op {
            MOp::Resolve(action) => {
                let allowed = match r.state {
                    State::NeedsReview | State::FailedRetryable | State::FailedPermanent => true,
                    State::Processing | State::Prepared => !lease_valid,
                    State::Completed | State::AwaitingApproval => false,
                };
                if !allowed {
                    return Answer::Refused(Refusal::InvalidTransition);
                }
                r.token = None;
                r.lease_until = None;
                r.reported = false;
                r.not_before = None;
                match action {
                    ResolveAction::Completed => r.state = State::Completed,
                    ResolveAction::FailedPermanent => r.state = State::FailedPermanent,
                    ResolveAction::Retry => {
                        r.state = State::FailedRetryable;
                        r.not_before = Some(now);
                        r.budget_base = r.attempt;
                        r.window_start = now;
                        if r.rejected {
                            r.prepared = None;
                        }
                    }
                }
                Answer::Ok
            }
            MOp::Approve | MOp::Reject if r.state == State::AwaitingApproval => {
                r.token = None;
                r.lease_until = None;
                r.state = if matches!(op, MOp::Approve) {
                    // The approved delivery gets a fresh budget and window, as after a
                    // `resolve retry`.
                    r.budget_base = r.attempt;
                    r.window_start = now;
                    State::Prepared
                } else {
                    r.rejected = true;
                    State::FailedPermanent
                };
                Answer::Ok
            }
            _ => Answer::Refused(Refusal::InvalidTransition),
        }
    }

    fn sweep(&mut self, now: i64) {
        let review = self.review;
        let Some(r) = self.rec.as_mut() else { return };
        if r.state != State::Processing {
            return;
        }
        if !Self::lease_valid(r, now) && review {
            Self::to_review(r);
        } else if now - r.active_at >= STUCK_MS && !r.stuck_alerted {
            r.stuck_alerted = true;
            if review {
                Self::to_review(r);
            }
        }
    }
}

fn fingerprint(i: u8) -> Fingerprint {
    Fingerprint::of_payload(&json!({"fp": i})).expect("fingerprint")
}

fn payload(i: u8) -> Value {
    json!({"draft": i})
}

fn result_of(i: u8) -> Value {
    json!({"result": i})
}

/// One random sequence against key `m<n>` of the store, starting at `start`.
async fn one_case(
    store: &Arc<dyn Store>,
    namespace: &Namespace,
    review: bool,
    n: u64,
    start: i64,
    ops: &[MOp],
) -> Result<(), String> {
    let k = key(&format!("m{n}"));
    let mut model = Model { review, rec: None };
    let mut tokens: Vec<Option<String>> = vec![None; WORKERS];
    let made_up = format!("1.{}", "a".repeat(32));
    let mut now = start;
    let mut trace = String::new();
    for (step, op) in ops.iter().enumerate() {
        trace.push_str(&format!("\n  {step}: t+{} {op:?}", now - start));
        let ctx = ExecCtx {
            now: Timestamp(now),
            lease_id: LeaseId::random(),
            jitter: JITTER,
            actor: Some("model".into()),
            traceparent: None,
            rider: None,
            report: None,
            then_sent: None,
            then_prepare: None,
        };
        let token_of = |w: usize| tokens[w].clone().unwrap_or_else(|| made_up.clone());
        let store_op = match op {
            MOp::Advance(ms) => {
                now += ms;
                continue;
            }
            MOp::Sweep => {
                store
                    .sweep_once(Timestamp(now), 10_000)
                    .await
                    .map_err(|e| format!("sweep_once: {e}{trace}"))?;
                model.sweep(now);
                check_record(store, namespace, &k, &model, now)
                    .await
                    .map_err(|e| format!("{e}{trace}"))?;
                continue;
            }
            MOp::Claim {
                worker,
                fp,
                long_lease,
            } => Op::Claim(ClaimRequest {
                fingerprint: fp.map(fingerprint),
                owner: Some(format!("w{worker}")),
                lease_ms: long_lease.then_some(LONG_LEASE_MS),
                correlation_id: None,
                lease_expiry: None,
            }),
            MOp::Prepare {
                worker,
                payload: p,
                approval,
            } => Op::Prepare(PrepareRequest {
                token: token_of(*worker),
                payload: payload(*p),
                approval_required: *approval,
            }),
            MOp::Heartbeat { worker } => Op::Heartbeat(HeartbeatRequest {
                token: token_of(*worker),
                lease_ms: None,
            }),
            MOp::Complete {
                worker,
                result,
                cost,
            } => Op::Complete(CompleteRequest {
                cost: cost.map(cost_of),
                token: token_of(*worker),
                result: Some(result_of(*result)),
                external_ref: None,
            }),
            MOp::Fail {
                worker,
                class,
                retry_after_ms,
                cost,
            } => Op::Fail(FailRequest {
                cost: cost.map(cost_of),
                token: token_of(*worker),
                kind: Some(*class),
                http_status: None,
                retry_after_ms: *retry_after_ms,
                sent: None,
                error: Some(FailErrorInput {
                    category: "model".into(),
                    message: "model failure".into(),
                }),
            }),
            MOp::Resolve(action) => Op::Resolve(ResolveRequest {
                action: *action,
                external_ref: None,
                result: None,
                note: "model".into(),
            }),
            MOp::Approve => Op::Approve { note: None },
            MOp::Reject => Op::Reject { note: None },
        };
        let executed = store
            .execute(namespace, &k, store_op, ctx)
            .await
            .map_err(|e| format!("store error at step {step}: {e}{trace}"))?;
        let got = match &executed.reply {
            Ok(Reply::Claim(c)) => Answer::Claim {
                outcome: c.outcome,
                retry_after_ms: match c.outcome {
                    ClaimOutcome::InFlight | ClaimOutcome::Backoff => c.retry_after_ms,
                    _ => None,
                },
                resumed: c.resumed,
            },
            Ok(_) => Answer::Ok,
            Err(e) => Answer::Refused(refusal(e).map_err(|m| format!("{m}{trace}"))?),
        };
        let want = match op {
            MOp::Claim {
                worker,
                fp,
                long_lease,
            } => {
                let token = match &executed.reply {
                    Ok(Reply::Claim(c)) => c.token.as_ref().map(|t| t.secret()),
                    _ => None,
                };
                let lease = if *long_lease { LONG_LEASE_MS } else { LEASE_MS };
                let want = model.claim(now, *fp, lease, token.as_deref());
                let acquired = matches!(
                    want,
                    Answer::Claim {
                        outcome: ClaimOutcome::Acquired,
                        ..
                    }
                );
                if acquired != token.is_some() {
                    return Err(format!(
                        "step {step}: token present = {}, acquired expected = {acquired}{trace}",
                        token.is_some()
                    ));
                }
                if let (true, Some(t)) = (acquired, &token) {
                    let attempt = model.rec.as_ref().map_or(0, |r| r.attempt);
                    if !t.starts_with(&format!("{attempt}.")) {
                        return Err(format!(
                            "step {step}: token does not fence attempt {attempt}{trace}"
                        ));
                    }
                    tokens[*worker] = token;
                }
                want
            }
            MOp::Prepare { worker, .. }
            | MOp::Heartbeat { worker }
            | MOp::Complete { worker, .. }
            | MOp::Fail { worker, .. } => {
                let t = tokens[*worker].clone();
                model.worker(now, Some(t.as_deref().unwrap_or(&made_up)), op)
            }
            MOp::Resolve(_) | MOp::Approve | MOp::Reject => model.operator(now, op),
            MOp::Advance(_) | MOp::Sweep => unreachable!("handled above"),
        };
        if got != want {
            return Err(format!(
                "step {step}: store answered {got:?}, the rules say {want:?}{trace}"
            ));
        }
        check_record(store, namespace, &k, &model, now)
            .await
            .map_err(|e| format!("after step {step}: {e}{trace}"))?;
    }
    Ok(())
}

async fn check_record(
    store: &Arc<dyn Store>,
    namespace: &Namespace,
    k: &idem_core::Key,
    model: &Model,
    now: i64,
) -> Result<(), String> {
    let stored = store
        .get(namespace, k)
        .await
        .map_err(|e| format!("get: {e}"))?;
    match (&model.rec, stored) {
        (None, None) => Ok(()),
        (None, Some(s)) => Err(format!(
            "store has a record the model does not: {:?}",
            s.record
        )),
        (Some(_), None) => Err("the store lost the record".into()),
        (Some(m), Some(s)) => {
            let r = &s.record;
            let want = (
                m.state,
                m.attempt,
                m.lease_until.map(Timestamp),
                m.not_before.map(Timestamp),
                m.prepared.map(payload),
                Model::lease_valid(m, now),
            );
            let lease_valid = matches!(r.state, State::Processing | State::Prepared)
                && r.lease_expires_at.is_some_and(|t| t.0 > now);
            let got = (
                r.state,
                r.attempt,
                r.lease_expires_at,
                r.not_before,
                r.prepared_payload.clone(),
                lease_valid,
            );
            if got != want {
                return Err(format!(
                    "record (state, attempt, lease_expires_at, not_before, prepared_payload, \
                     lease valid) is {got:?}, the rules say {want:?}"
                ));
            }
            let c = r.cost;
            let stored = (c.tokens, c.usd_nanos, c.retry_tokens, c.retry_usd_nanos);
            if stored != m.cost {
                return Err(format!(
                    "record cost (tokens, usd_nanos, retry_tokens, retry_usd_nanos) is \
                     {stored:?}, the rules say {:?}",
                    m.cost
                ));
            }
            // The property: a record's cost is the sum of the costs on its events.
            let on_events = s
                .events
                .iter()
                .filter_map(|e| e.cost)
                .fold((0, 0), |a, c| (a.0 + c.tokens, a.1 + c.usd_nanos));
            if on_events != (c.tokens, c.usd_nanos) {
                return Err(format!(
                    "record cost ({}, {}) is not the sum of its events' costs {on_events:?}",
                    c.tokens, c.usd_nanos
                ));
            }
            Ok(())
        }
    }
}

/// Runs the model test against `store`: `cases` random sequences of up to 40 steps.
pub async fn run_model(store: Arc<dyn Store>) {
    let policy = |mode: &str| {
        json!({
            "lease_ms": LEASE_MS,
            "lease_expiry": mode,
            "stuck_after_ms": STUCK_MS,
            "retry": {
                "max_attempts": MAX_ATTEMPTS,
                "base_ms": BASE_MS,
                "max_ms": MAX_MS,
                "window_ms": WINDOW_MS
            }
        })
    };
    let reclaim_ns = ns("model-reclaim");
    let review_ns = ns("model-review");
    for (n, mode) in [(&reclaim_ns, "reclaim"), (&review_ns, "review")] {
        store
            .update_namespace(n, NamespaceChange::Patch(policy(mode)), Timestamp(T0))
            .await
            .expect("model policy");
    }
    let counter = AtomicU64::new(0);
    let rt = tokio::runtime::Handle::current();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        max_shrink_iters: 400,
        ..Config::default()
    });
    let strategy = (any::<bool>(), prop::collection::vec(op_strategy(), 1..40));
    let result = tokio::task::block_in_place(|| {
        runner.run(&strategy, |(review, ops)| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            // every case gets its own key and its own stretch of time
            let start = T0 + (n as i64) * 30 * DAY_MS;
            let namespace = if review { &review_ns } else { &reclaim_ns };
            rt.block_on(one_case(&store, namespace, review, n, start, &ops))
                .map_err(TestCaseError::fail)
        })
    });
    if let Err(e) = result {
        panic!("model and store disagree: {e}");
    }
    // The per-state counters the store keeps on every write (read by `/metrics`) agree with
    // a count of the records the random sequences left behind, whatever path wrote them.
    let stats = store.stats(Timestamp(T0)).await.expect("stats");
    let mut counted = std::collections::BTreeMap::new();
    for n in [&reclaim_ns, &review_ns] {
        let info = store.namespace(n).await.expect("namespace");
        for (state, c) in &info.counts.0 {
            *counted.entry(state.as_str()).or_insert(0u64) += c;
        }
    }
    for (state, c) in &stats.records.0 {
        assert_eq!(
            counted.get(state.as_str()).copied().unwrap_or(0),
            *c,
            "records in {state:?}: counters {c}, counted {counted:?}"
        );
    }
    assert_eq!(
        stats.review_queue_depth,
        stats.records.get(State::NeedsReview)
    );
}
