//! Unit tests of the decision table, held to the product contract (API.md): every row of the
//! claim table, every state × every operation, fencing tokens and late writes, the retry
//! budget, the janitor's sweep and retention.
//!
//! [`H`] is a tiny in-memory "store": it applies each [`Transition`] exactly as a backend
//! would (insert/update guarded by version, events appended, refusals write nothing) with a
//! fixed lease id per step and a fixed jitter, so every expectation is exact.

// Tests start from the default policy and change the one field they are about.
#![allow(clippy::field_reassign_with_default)]

use serde_json::{json, Value};

use super::*;
use crate::classify::Class;
use crate::ids::{Key, LeaseId, Namespace};
use crate::policy::{LeaseExpiry, Policy, DAY_MS};
use crate::record::{AlertReason, EventType, ReviewReason, State};
use crate::retention::{retention_action, RetentionAction};
use crate::time::Timestamp;

/// 2026-06-22T10:00:00.000Z
const T0: i64 = 1_782_122_400_000;

fn ns() -> Namespace {
    Namespace::try_from("payments").expect("valid namespace")
}

fn key() -> Key {
    Key::try_from("evt_123:charge").expect("valid key")
}

fn lease_id(n: u32) -> LeaseId {
    LeaseId::from_stored(format!("{n:032x}"))
}

fn fp(v: Value) -> Fingerprint {
    Fingerprint::of_payload(&v).expect("fingerprint")
}

/// A `Ctx` at `now` with a fixed lease id and jitter (0.5: backoff is half its ceiling).
fn ctx_at(policy: &Policy, now: i64, lease: u32) -> Ctx<'_> {
    Ctx {
        now: Timestamp(now),
        policy,
        paused: false,
        daily_count: 0,
        new_lease_id: lease_id(lease),
        jitter: 0.5,
        actor: Some("operator:alice".into()),
    }
}

/// A [`Reply::Written`] is only ever answered by a transition that writes a record, and a
/// [`Reply::Record`] the write also holds should have been one.
fn written_is_the_write(t: &Transition) {
    let written = match &t.write {
        Write::Insert(r) | Write::Update(r) => Some(&**r),
        Write::None => None,
    };
    match &t.reply {
        Ok(Reply::Written) => assert!(written.is_some(), "Written without a write: {t:?}"),
        Ok(Reply::Record(r)) => assert!(
            written != Some(r),
            "an answer that copies the written record: {t:?}"
        ),
        _ => {}
    }
}

#[test]
fn written_answers_with_the_record_the_write_holds() {
    let mut h = H::new();
    let tok = h.acquire();
    let t = apply(
        &ns(),
        &key(),
        h.rec.as_ref(),
        &Op::Complete(CompleteRequest {
            token: tok,
            result: Some(json!({"id": "ch_1"})),
            external_ref: None,
            cost: None,
        }),
        &h.ctx(),
    );
    assert_eq!(t.reply, Ok(Reply::Written));
    let Write::Update(written) = t.write.clone() else {
        panic!("complete writes: {t:?}");
    };
    assert_eq!(t.reply_resolved(), Ok(Reply::Record((*written).clone())));
    assert_eq!(written_reply(t.write, t.reply), Ok(Reply::Record(*written)));
    // Nothing to write: the reply stays what it is, for the caller's own error.
    assert_eq!(
        written_reply(Write::None, Ok(Reply::Written)),
        Ok(Reply::Written)
    );
    assert_eq!(
        written_reply(Write::None, Err(OpError::LeaseLost)),
        Err(OpError::LeaseLost)
    );
}

/// One record, driven through `apply` the way a store would drive it.
struct H {
    policy: Policy,
    now: i64,
    paused: bool,
    daily_count: u64,
    jitter: f64,
    next_lease: u32,
    rec: Option<Record>,
    events: Vec<EventDraft>,
    alerts: Vec<AlertDraft>,
}

impl H {
    fn new() -> Self {
        Self::with_policy(Policy::default())
    }

    fn with_policy(policy: Policy) -> Self {
        H {
            policy,
            now: T0,
            paused: false,
            daily_count: 0,
            jitter: 0.5,
            next_lease: 1,
            rec: None,
            events: vec![],
            alerts: vec![],
        }
    }

    fn review() -> Self {
        let mut p = Policy::default();
        p.lease_expiry = LeaseExpiry::Review;
        Self::with_policy(p)
    }

    fn ctx(&self) -> Ctx<'_> {
        let mut c = ctx_at(&self.policy, self.now, self.next_lease);
        c.paused = self.paused;
        c.daily_count = self.daily_count;
        c.jitter = self.jitter;
        c
    }

    /// Applies `op` and persists the transition like a store; checks the invariants every
    /// transition keeps.
    fn run(&mut self, op: Op) -> Transition {
        let mut t = apply(&ns(), &key(), self.rec.as_ref(), &op, &self.ctx());
        written_is_the_write(&t);
        t.reply = t.reply_resolved();
        self.next_lease += 1;
        if let Err(e) = &t.reply {
            assert!(!t.first_acquisition);
            if *e == OpError::LeaseLost {
                // The one refusal that writes: its event; a fenced report's alert; and a
                // reported cost, which changes nothing but the record's cost sums.
                assert_eq!(t.events.len(), 1);
                assert_eq!(!t.alerts.is_empty(), t.tally.fenced_completion);
                match &t.write {
                    Write::None => assert!(t.tally.cost.is_none()),
                    Write::Update(r) => {
                        let old = self.rec.as_ref().expect("a record");
                        let mut same = (**r).clone();
                        same.cost = old.cost;
                        same.version = old.version;
                        assert_eq!(&same, old, "a fenced report only adds cost");
                        assert!(t.tally.cost.is_some());
                    }
                    Write::Insert(_) => panic!("lease_lost inserted a record"),
                }
            } else {
                assert_eq!(t.write, Write::None, "a refusal never writes the record");
                assert!(t.alerts.is_empty());
                assert!(t.events.is_empty(), "refusal {e:?} wrote events");
            }
        }
        match &t.write {
            Write::None => {}
            Write::Insert(r) => {
                assert!(self.rec.is_none(), "insert over an existing record");
                assert_eq!(r.version, 1);
                self.rec = Some((**r).clone());
            }
            Write::Update(r) => {
                let old = self.rec.as_ref().expect("update of a missing record");
                assert_eq!(r.version, old.version + 1, "version guard");
                assert_eq!((&r.namespace, &r.key), (&old.namespace, &old.key));
                self.rec = Some((**r).clone());
            }
        }
        if t.first_acquisition {
            self.daily_count += 1;
        }
        self.events.extend(t.events.iter().cloned());
        self.alerts.extend(t.alerts.iter().cloned());
        t
    }

    fn claim_with(&mut self, req: ClaimRequest) -> ClaimReply {
        match self.run(Op::Claim(req)).reply {
            Ok(Reply::Claim(c)) => c,
            other => panic!("claim answered {other:?}"),
        }
    }

    fn claim(&mut self) -> ClaimReply {
        self.claim_with(ClaimRequest::default())
    }

    /// Claims and expects `acquired`; returns the token.
    fn acquire(&mut self) -> String {
        let c = self.claim();
        assert_eq!(c.outcome, ClaimOutcome::Acquired, "{c:?}");
        c.token.expect("acquired carries a token").secret()
    }

    fn record_reply(t: Transition) -> Result<Record, OpError> {
        match t.reply {
            Ok(Reply::Record(r)) => Ok(r),
            Ok(other) => panic!("unexpected reply {other:?}"),
            Err(e) => Err(e),
        }
    }

    fn prepare(&mut self, token: &str, payload: Value, approval: bool) -> Result<Record, OpError> {
        let t = self.run(Op::Prepare(PrepareRequest {
            token: token.into(),
            payload,
            approval_required: approval,
        }));
        Self::record_reply(t)
    }

    fn heartbeat(&mut self, token: &str, lease_ms: Option<i64>) -> Result<Record, OpError> {
        let t = self.run(Op::Heartbeat(HeartbeatRequest {
            token: token.into(),
            lease_ms,
        }));
        Self::record_reply(t)
    }

    fn complete(
        &mut self,
        token: &str,
        result: Option<Value>,
        external_ref: Option<&str>,
    ) -> Result<Record, OpError> {
        let t = self.run(Op::Complete(CompleteRequest {
            cost: None,
            token: token.into(),
            result,
            external_ref: external_ref.map(str::to_owned),
        }));
        Self::record_reply(t)
    }

    fn fail_with(&mut self, req: FailRequest) -> Result<FailReply, OpError> {
        match self.run(Op::Fail(req)).reply {
            Ok(Reply::Fail(f)) => Ok(f),
            Ok(other) => panic!("unexpected reply {other:?}"),
            Err(e) => Err(e),
        }
    }

    fn fail(&mut self, token: &str, kind: Class) -> Result<FailReply, OpError> {
        self.fail_with(fail_req(token, kind))
    }

    fn resolve(&mut self, action: ResolveAction) -> Result<Record, OpError> {
        let t = self.run(Op::Resolve(ResolveRequest {
            action,
            external_ref: None,
            result: None,
            note: "checked with the PSP".into(),
        }));
        Self::record_reply(t)
    }

    fn approve(&mut self) -> Result<Record, OpError> {
        let t = self.run(Op::Approve {
            note: Some("looks good".into()),
        });
        Self::record_reply(t)
    }

    fn reject(&mut self) -> Result<Record, OpError> {
        let t = self.run(Op::Reject {
            note: Some("wrong tone".into()),
        });
        Self::record_reply(t)
    }

    fn sweep(&mut self) -> bool {
        match self.run(Op::Sweep).reply {
            Ok(Reply::Swept { changed }) => changed,
            other => panic!("sweep answered {other:?}"),
        }
    }

    fn advance(&mut self, ms: i64) {
        self.now += ms;
    }

    fn rec(&self) -> &Record {
        self.rec.as_ref().expect("a record")
    }

    fn state(&self) -> State {
        self.rec().state
    }

    fn last_event(&self) -> &EventDraft {
        self.events.last().expect("an event")
    }

    /// The newest event, asserted to be a `kind` that moved the record from `from` to `to`.
    fn moved(&self, kind: EventType, from: State, to: State) -> &EventDraft {
        let e = self.last_event();
        assert_eq!(e.kind, kind);
        assert_eq!((e.from_state, e.to_state), (Some(from), Some(to)));
        e
    }

    /// A record in `state`, reached the ordinary way; returns the holder's (newest) token.
    fn in_state(state: State) -> (H, String) {
        let mut h = H::new();
        let tok = h.acquire();
        h.move_to(&tok, state);
        (h, tok)
    }

    /// Moves the record, held with `tok`, to `state` the ordinary way.
    fn move_to(&mut self, tok: &str, state: State) {
        match state {
            State::Processing => {}
            State::Prepared => {
                self.prepare(tok, json!({"draft": "hello"}), false)
                    .expect("prepare");
            }
            State::AwaitingApproval => {
                self.prepare(tok, json!({"draft": "hello"}), true)
                    .expect("prepare");
            }
            State::Completed => {
                self.complete(tok, Some(result()), Some("ch_1"))
                    .expect("complete");
            }
            State::FailedRetryable => {
                self.fail(tok, Class::Retryable).expect("fail");
            }
            State::FailedPermanent => {
                self.fail(tok, Class::Permanent).expect("fail");
            }
            State::NeedsReview => {
                self.fail(tok, Class::Ambiguous).expect("fail");
            }
        }
        assert_eq!(self.state(), state);
    }
}

fn result() -> Value {
    json!({"charge": "ch_1", "amount": 100})
}

fn fail_req(token: &str, kind: Class) -> FailRequest {
    FailRequest {
        cost: None,
        token: token.into(),
        kind: Some(kind),
        http_status: None,
        retry_after_ms: None,
        sent: None,
        error: Some(FailErrorInput {
            category: "http".into(),
            message: "upstream said no".into(),
        }),
    }
}

fn invalid_from(state: State) -> impl Fn(&OpError) -> bool {
    move |e| matches!(e, OpError::InvalidTransition { from, .. } if *from == state)
}

// ================================================================ the claim table

#[test]
fn first_claim_of_unseen_key_acquires_with_attempt_one() {
    let mut h = H::new();
    let c = h.claim_with(ClaimRequest {
        owner: Some("exec-1".into()),
        correlation_id: Some("corr-1".into()),
        ..Default::default()
    });
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert!(!c.outcome.is_replay());
    assert_eq!(c.resumed, Some(false));
    assert!(!c.reclaimed);
    assert_eq!(c.retry_after_ms, None);
    let token = c.token.expect("token");
    assert_eq!(token.attempt, 1);
    assert_eq!(token.lease_id, lease_id(1));
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::Processing);
    assert_eq!(rec.attempt, 1);
    assert_eq!(rec.owner.as_deref(), Some("exec-1"));
    assert_eq!(rec.correlation_id.as_deref(), Some("corr-1"));
    assert_eq!(rec.lease_expires_at, Some(Timestamp(T0 + 30_000)));
    assert_eq!(rec.fingerprint, None);
    assert_eq!(
        (rec.created_at, rec.updated_at),
        (Timestamp(T0), Timestamp(T0))
    );
    assert_eq!(&rec, h.rec());
    assert_eq!(
        h.daily_count, 1,
        "a fresh acquisition counts against daily_limit"
    );
    let e = h.last_event();
    assert_eq!(e.kind, EventType::Acquired);
    assert_eq!((e.from_state, e.to_state), (None, Some(State::Processing)));
    assert_eq!(e.attempt, 1);
    assert_eq!(e.owner.as_deref(), Some("exec-1"));
    assert_eq!(e.correlation_id.as_deref(), Some("corr-1"));
}

#[test]
fn fresh_claim_is_an_insert_and_a_first_acquisition() {
    let policy = Policy::default();
    let t = apply(
        &ns(),
        &key(),
        None,
        &Op::Claim(ClaimRequest::default()),
        &ctx_at(&policy, T0, 7),
    );
    assert!(matches!(t.write, Write::Insert(_)));
    assert!(t.first_acquisition);
    assert!(t.alerts.is_empty());
}

#[test]
fn claim_uses_the_requested_lease_ms() {
    let mut h = H::new();
    let c = h.claim_with(ClaimRequest {
        lease_ms: Some(5_000),
        ..Default::default()
    });
    assert_eq!(
        c.record.expect("record").lease_expires_at,
        Some(Timestamp(T0 + 5_000))
    );
}

#[test]
fn claim_of_failed_retryable_after_not_before_resumes() {
    let (mut h, _) = H::in_state(State::FailedRetryable);
    let nb = h.rec().not_before.expect("not_before");
    assert_eq!(nb, Timestamp(T0 + 500), "attempt 1: base 1000 × jitter 0.5");
    h.now = nb.0;
    let c = h.claim_with(ClaimRequest {
        owner: Some("exec-2".into()),
        ..Default::default()
    });
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(true));
    assert!(!c.reclaimed, "a retry after failure is not a reclaim");
    assert_eq!(c.token.expect("token").attempt, 2);
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::Processing);
    assert_eq!(rec.attempt, 2);
    assert_eq!(rec.not_before, None);
    assert_eq!(rec.owner.as_deref(), Some("exec-2"));
    assert_eq!(h.daily_count, 1, "a resume is not a first-time acquisition");
    let e = h.moved(
        EventType::Resumed,
        State::FailedRetryable,
        State::Processing,
    );
    assert_eq!(e.attempt, 2);
}

#[test]
fn claim_of_failed_retryable_before_not_before_backs_off() {
    let (mut h, _) = H::in_state(State::FailedRetryable);
    h.advance(200);
    let before = h.rec().clone();
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Backoff);
    assert_eq!(c.retry_after_ms, Some(300));
    assert_eq!(c.token, None);
    assert_eq!(c.resumed, None);
    assert_eq!(h.rec(), &before, "backoff writes nothing");
}

#[test]
fn claim_after_lease_expiry_reclaims_with_a_new_token() {
    let mut h = H::new();
    let old = h.acquire();
    h.advance(30_000); // exactly at expiry: the lease is no longer valid
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(true));
    assert!(c.reclaimed);
    let token = c.token.expect("token").secret();
    assert_ne!(token, old);
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::Processing);
    assert_eq!(rec.attempt, 2);
    assert_eq!(rec.lease_expires_at, Some(Timestamp(h.now + 30_000)));
    assert_eq!(h.last_event().kind, EventType::Resumed);
    assert_eq!(h.daily_count, 1);
}

#[test]
fn claim_after_lease_expiry_under_review_policy_moves_to_needs_review() {
    let mut h = H::review();
    h.acquire();
    h.advance(30_001);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::NeedsReview);
    assert_eq!(c.token, None);
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::NeedsReview);
    assert_eq!(rec.review_reason, Some(ReviewReason::LeaseExpired));
    assert_eq!(rec.attempt, 1, "nobody acquired");
    assert_eq!(rec.lease_expires_at, None);
    assert_eq!(h.state(), State::NeedsReview);
    h.moved(
        EventType::MovedToReview,
        State::Processing,
        State::NeedsReview,
    );
    assert_eq!(h.alerts.len(), 1);
    assert_eq!(h.alerts[0].reason, AlertReason::NeedsReview);
    assert_eq!(h.alerts[0].attempt, 1);
    // and it stays there for every later claim
    assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
    assert_eq!(h.alerts.len(), 1);
}

#[test]
fn per_claim_review_override_applies_to_its_own_lease() {
    let mut h = H::new(); // namespace: reclaim
    let c = h.claim_with(ClaimRequest {
        lease_expiry: Some(LeaseExpiry::Review),
        ..Default::default()
    });
    assert_eq!(c.record.expect("record").lease_expiry, LeaseExpiry::Review);
    h.advance(31_000);
    assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
    assert_eq!(h.rec().review_reason, Some(ReviewReason::LeaseExpired));
}

#[test]
fn per_claim_reclaim_override_beats_a_review_namespace() {
    let mut h = H::review();
    h.claim_with(ClaimRequest {
        lease_expiry: Some(LeaseExpiry::Reclaim),
        ..Default::default()
    });
    h.advance(31_000);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert!(c.reclaimed);
    // the resuming claim did not override: the namespace policy applies to the new lease
    assert_eq!(h.rec().lease_expiry, LeaseExpiry::Review);
    h.advance(31_000);
    assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
}

#[test]
fn claim_of_expired_prepared_resumes_with_the_saved_payload() {
    // even under lease_expiry=review: a prepared payload is safe to deliver again
    for mut h in [H::new(), H::review()] {
        let tok = h.acquire();
        h.prepare(&tok, json!({"draft": "Dear Ann"}), false)
            .expect("prepare");
        h.advance(30_000);
        let c = h.claim();
        assert_eq!(c.outcome, ClaimOutcome::Acquired);
        assert_eq!(c.resumed, Some(true));
        assert!(c.reclaimed);
        assert_eq!(c.token.expect("token").attempt, 2);
        let rec = c.record.expect("record");
        assert_eq!(
            rec.state,
            State::Prepared,
            "a resumed prepared record stays prepared"
        );
        assert_eq!(rec.prepared_payload, Some(json!({"draft": "Dear Ann"})));
        assert_eq!(rec.lease_expires_at, Some(Timestamp(h.now + 30_000)));
        h.moved(EventType::Resumed, State::Prepared, State::Prepared);
    }
}

#[test]
fn claim_of_approved_prepared_resumes_and_increments_attempt() {
    let (mut h, _) = H::in_state(State::AwaitingApproval);
    let approved = h.approve().expect("approve");
    assert_eq!(approved.state, State::Prepared);
    assert_eq!(approved.attempt, 1, "approve leaves attempt unchanged");
    assert_eq!(approved.lease_expires_at, None);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(true));
    assert!(!c.reclaimed);
    assert_eq!(c.token.expect("token").attempt, 2);
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::Prepared);
    assert_eq!(rec.attempt, 2);
    assert_eq!(rec.prepared_payload, Some(json!({"draft": "hello"})));
    // the approved and resumed record is leased: a second claim is in flight
    assert_eq!(h.claim().outcome, ClaimOutcome::InFlight);
}

#[test]
fn second_claim_of_completed_key_replays_result() {
    let mut h = H::new();
    let payload_fp = fp(json!({"amount": 100}));
    let tok = h
        .claim_with(ClaimRequest {
            fingerprint: Some(payload_fp.clone()),
            ..Default::default()
        })
        .token
        .expect("token")
        .secret();
    h.complete(&tok, Some(result()), Some("ch_1"))
        .expect("complete");
    let before = h.rec().clone();
    let n_events = h.events.len();
    let t = h.run(Op::Claim(ClaimRequest {
        fingerprint: Some(payload_fp),
        owner: Some("exec-retry".into()),
        correlation_id: Some("corr-2".into()),
        ..Default::default()
    }));
    assert_eq!(t.write, Write::None, "a replay writes no record");
    let Ok(Reply::Claim(c)) = t.reply else {
        panic!("claim reply")
    };
    assert_eq!(c.outcome, ClaimOutcome::Completed);
    assert!(c.outcome.is_replay());
    assert_eq!(c.token, None);
    assert_eq!(c.resumed, None);
    let rec = c.record.expect("record");
    assert_eq!(rec.result, Some(result()));
    assert_eq!(rec.external_ref.as_deref(), Some("ch_1"));
    assert_eq!(h.rec(), &before);
    assert_eq!(h.events.len(), n_events + 1);
    let e = h.moved(EventType::DuplicateHit, State::Completed, State::Completed);
    assert_eq!(e.owner.as_deref(), Some("exec-retry"));
    assert_eq!(e.correlation_id.as_deref(), Some("corr-2"));
}

#[test]
fn claim_of_failed_permanent_replays_the_stored_error() {
    let (mut h, _) = H::in_state(State::FailedPermanent);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::FailedPermanent);
    assert!(c.outcome.is_replay());
    let err = c.record.expect("record").last_error.expect("last_error");
    assert_eq!(err.message, "upstream said no");
    assert_eq!(h.last_event().kind, EventType::DuplicateHit);
}

#[test]
fn different_fingerprint_conflicts_in_every_state() {
    let stored = fp(json!({"amount": 100}));
    let other = fp(json!({"amount": 101}));
    for state in State::ALL {
        let mut h = H::new();
        let tok = h
            .claim_with(ClaimRequest {
                fingerprint: Some(stored.clone()),
                ..Default::default()
            })
            .token
            .expect("token")
            .secret();
        h.move_to(&tok, state);
        // a lease that expired and a backoff that passed do not change the answer
        for advance in [0, 10 * 60_000] {
            h.advance(advance);
            let before = h.rec().clone();
            let c = h.claim_with(ClaimRequest {
                fingerprint: Some(other.clone()),
                owner: Some("intruder".into()),
                ..Default::default()
            });
            assert_eq!(c.outcome, ClaimOutcome::Conflict, "{state:?}");
            assert_eq!(c.token, None);
            assert_eq!(c.resumed, None);
            assert_eq!(h.rec(), &before, "{state:?}: a conflict writes no record");
            let e = h.last_event();
            assert_eq!(e.kind, EventType::Conflict, "{state:?}");
            assert_eq!((e.from_state, e.to_state), (Some(state), Some(state)));
            assert_eq!(e.owner.as_deref(), Some("intruder"));
        }
    }
}

#[test]
fn same_fingerprint_passes_the_check() {
    let f = fp(json!({"b": 2, "a": 1}));
    let mut h = H::new();
    h.claim_with(ClaimRequest {
        fingerprint: Some(f.clone()),
        ..Default::default()
    });
    assert_eq!(h.rec().fingerprint.as_ref(), Some(&f));
    let c = h.claim_with(ClaimRequest {
        fingerprint: Some(fp(json!({"a": 1, "b": 2}))),
        ..Default::default()
    });
    assert_eq!(c.outcome, ClaimOutcome::InFlight);
}

#[test]
fn claim_without_fingerprint_skips_the_check() {
    let mut h = H::new();
    let tok = h
        .claim_with(ClaimRequest {
            fingerprint: Some(fp(json!(1))),
            ..Default::default()
        })
        .token
        .expect("token")
        .secret();
    h.complete(&tok, Some(result()), None).expect("complete");
    assert_eq!(h.claim().outcome, ClaimOutcome::Completed);
}

#[test]
fn record_stored_without_fingerprint_never_conflicts() {
    let (mut h, _) = H::in_state(State::Completed);
    assert_eq!(h.rec().fingerprint, None, "stored as null");
    let c = h.claim_with(ClaimRequest {
        fingerprint: Some(fp(json!({"anything": true}))),
        ..Default::default()
    });
    assert_eq!(c.outcome, ClaimOutcome::Completed);
}

#[test]
fn claim_during_a_valid_lease_is_in_flight_with_lease_remaining() {
    let mut h = H::new();
    h.claim_with(ClaimRequest {
        owner: Some("exec-1".into()),
        ..Default::default()
    });
    h.advance(12_345);
    let before = h.rec().clone();
    // the owner is informational: the same owner is in flight too
    let c = h.claim_with(ClaimRequest {
        owner: Some("exec-1".into()),
        ..Default::default()
    });
    assert_eq!(c.outcome, ClaimOutcome::InFlight);
    assert_eq!(c.retry_after_ms, Some(30_000 - 12_345));
    assert_eq!(c.token, None);
    assert_eq!(c.resumed, None);
    assert_eq!(h.rec(), &before);
    assert_eq!(h.last_event().kind, EventType::InFlight);
    h.advance(17_654);
    assert_eq!(h.claim().retry_after_ms, Some(1));
}

#[test]
fn claim_of_prepared_with_a_valid_lease_is_in_flight() {
    let (mut h, _) = H::in_state(State::Prepared);
    h.advance(1_000);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::InFlight);
    assert_eq!(c.retry_after_ms, Some(29_000));
}

#[test]
fn claim_of_needs_review_answers_needs_review_forever() {
    let (mut h, _) = H::in_state(State::NeedsReview);
    for _ in 0..3 {
        h.advance(DAY_MS);
        let before = h.rec().clone();
        let c = h.claim();
        assert_eq!(c.outcome, ClaimOutcome::NeedsReview);
        assert_eq!(c.token, None);
        assert_eq!(h.rec(), &before);
    }
}

#[test]
fn claim_of_awaiting_approval_answers_awaiting_approval() {
    let (mut h, _) = H::in_state(State::AwaitingApproval);
    h.advance(DAY_MS);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::AwaitingApproval);
    assert_eq!(c.token, None);
    assert_eq!(c.record.expect("record").state, State::AwaitingApproval);
}

#[test]
fn paused_namespace_refuses_every_claim_including_replays() {
    let mut fresh = H::new();
    fresh.paused = true;
    let mut hs = vec![fresh];
    for state in State::ALL {
        let (mut h, _) = H::in_state(state);
        h.paused = true;
        h.advance(DAY_MS); // whatever the lease or backoff would say
        hs.push(h);
    }
    for mut h in hs {
        let before = h.rec.clone();
        let n_events = h.events.len();
        let t = h.run(Op::Claim(ClaimRequest {
            fingerprint: Some(fp(json!("conflicting"))),
            ..Default::default()
        }));
        assert_eq!(t.write, Write::None);
        assert!(t.events.is_empty());
        let Ok(Reply::Claim(c)) = t.reply else {
            panic!("claim reply")
        };
        assert_eq!(c.outcome, ClaimOutcome::Paused);
        assert_eq!(c.record, None, "paused answers carry record: null");
        assert_eq!((c.token, c.resumed), (None, None));
        assert_eq!(h.rec, before);
        assert_eq!(h.events.len(), n_events);
    }
}

#[test]
fn paused_namespace_still_lets_in_flight_work_land() {
    let mut h = H::new();
    let tok = h.acquire();
    h.paused = true;
    h.heartbeat(&tok, None).expect("heartbeat while paused");
    h.complete(&tok, Some(result()), None)
        .expect("complete while paused");
    let mut h = H::new();
    let tok = h.acquire();
    h.paused = true;
    h.fail(&tok, Class::Retryable).expect("fail while paused");
}

#[test]
fn daily_limit_limits_only_first_time_acquisitions() {
    let mut p = Policy::default();
    p.daily_limit = Some(2);
    let mut h = H::with_policy(p.clone());
    let tok = h.acquire();
    h.complete(&tok, Some(result()), None).expect("complete");
    h.daily_count = 2; // the namespace's ceiling is reached
                       // existing records answer as always: replay, in flight, resume
    assert_eq!(h.claim().outcome, ClaimOutcome::Completed);
    let mut r = H::with_policy(p.clone());
    r.acquire();
    r.daily_count = 2;
    assert_eq!(r.claim().outcome, ClaimOutcome::InFlight);
    r.advance(30_000);
    assert_eq!(
        r.claim().outcome,
        ClaimOutcome::Acquired,
        "a reclaim is not limited"
    );
    // a first-time acquisition is limited
    let mut f = H::with_policy(p);
    f.daily_count = 2;
    let t = f.run(Op::Claim(ClaimRequest::default()));
    assert_eq!(t.write, Write::None);
    assert!(!t.first_acquisition);
    assert!(t.events.is_empty());
    let Ok(Reply::Claim(c)) = t.reply else {
        panic!("claim reply")
    };
    assert_eq!(c.outcome, ClaimOutcome::Limited);
    assert_eq!(c.record, None);
    assert_eq!(c.token, None);
    // T0 is 10:00 UTC: Retry-After runs to the next UTC midnight
    assert_eq!(c.retry_after_ms, Some(14 * 3_600_000));
    // below the ceiling it acquires
    f.daily_count = 1;
    assert_eq!(f.claim().outcome, ClaimOutcome::Acquired);
}

#[test]
fn daily_limit_zero_limits_every_first_acquisition() {
    let mut p = Policy::default();
    p.daily_limit = Some(0);
    let mut h = H::with_policy(p);
    h.now = T0 - 10 * 3_600_000 + 1; // one ms after midnight
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Limited);
    assert_eq!(c.retry_after_ms, Some(DAY_MS - 1));
}

#[test]
fn paused_beats_limited() {
    let mut p = Policy::default();
    p.daily_limit = Some(0);
    let mut h = H::with_policy(p);
    h.paused = true;
    assert_eq!(h.claim().outcome, ClaimOutcome::Paused);
}

// ================================================================ every state × every operation

#[derive(Debug, Clone, Copy, PartialEq)]
enum Exp {
    /// Accepted; the record is written and ends in this state.
    To(State),
    /// Accepted without a write (no-op).
    Same,
    /// 409 invalid_transition.
    Invalid,
}

fn worker_ops(token: &str) -> Vec<Op> {
    vec![
        Op::Prepare(PrepareRequest {
            token: token.into(),
            payload: json!({"draft": "other"}),
            approval_required: false,
        }),
        Op::Heartbeat(HeartbeatRequest {
            token: token.into(),
            lease_ms: None,
        }),
        Op::Complete(CompleteRequest {
            cost: None,
            token: token.into(),
            result: Some(result()),
            external_ref: Some("ch_1".into()),
        }),
        Op::Fail(fail_req(token, Class::Retryable)),
    ]
}

fn operator_ops() -> Vec<Op> {
    let resolve = |action| {
        Op::Resolve(ResolveRequest {
            action,
            external_ref: None,
            result: None,
            note: "n".into(),
        })
    };
    vec![
        resolve(ResolveAction::Retry),
        resolve(ResolveAction::Completed),
        resolve(ResolveAction::FailedPermanent),
        Op::Approve { note: None },
        Op::Reject { note: None },
        Op::Sweep,
    ]
}

#[test]
fn every_state_times_every_operation() {
    use Exp::*;
    use State::*;
    // columns: prepare, heartbeat, complete, fail(retryable),
    //          resolve retry, resolve completed, resolve failed_permanent, approve, reject, sweep
    #[rustfmt::skip]
    let table: [(State, [Exp; 10]); 7] = [
        (Processing,       [To(Prepared), To(Processing), To(Completed), To(FailedRetryable),
                            Invalid, Invalid, Invalid, Invalid, Invalid, Same]),
        // Prepared refuses a different payload: deliver the prepared one.
        (Prepared,         [Invalid, To(Prepared), To(Completed), To(FailedRetryable),
                            Invalid, Invalid, Invalid, Invalid, Invalid, Same]),
        (AwaitingApproval, [Invalid, Invalid, Invalid, Invalid,
                            Invalid, Invalid, Invalid, To(Prepared), To(FailedPermanent), Same]),
        // Completed: the same complete again is a 200 no-op.
        (Completed,        [Invalid, Invalid, Same, Invalid,
                            Invalid, Invalid, Invalid, Invalid, Invalid, Same]),
        (FailedRetryable,  [Invalid, Invalid, Invalid, Invalid,
                            To(FailedRetryable), To(Completed), To(FailedPermanent), Invalid, Invalid, Same]),
        (FailedPermanent,  [Invalid, Invalid, Invalid, Invalid,
                            To(FailedRetryable), To(Completed), To(FailedPermanent), Invalid, Invalid, Same]),
        (NeedsReview,      [Invalid, Invalid, Invalid, Invalid,
                            To(FailedRetryable), To(Completed), To(FailedPermanent), Invalid, Invalid, Same]),
    ];
    for (state, row) in table {
        let (probe, tok) = H::in_state(state);
        let ops: Vec<Op> = worker_ops(&tok).into_iter().chain(operator_ops()).collect();
        for (op, exp) in ops.into_iter().zip(row) {
            let mut h = H::in_state(state).0;
            assert_eq!(h.rec(), probe.rec(), "deterministic setup");
            let before = h.rec().clone();
            let name = op.name();
            let t = h.run(op);
            match exp {
                To(to) => {
                    assert!(t.reply.is_ok(), "{state:?} {name}: {:?}", t.reply);
                    assert!(matches!(t.write, Write::Update(_)), "{state:?} {name}");
                    assert_eq!(h.state(), to, "{state:?} {name}");
                }
                Same => {
                    assert!(t.reply.is_ok(), "{state:?} {name}: {:?}", t.reply);
                    assert_eq!(t.write, Write::None, "{state:?} {name}");
                    assert_eq!(h.rec(), &before);
                }
                Invalid => {
                    let err = t
                        .reply
                        .expect_err(&format!("{state:?} {name} must be refused"));
                    assert!(invalid_from(state)(&err), "{state:?} {name}: {err:?}");
                    assert_eq!(h.rec(), &before);
                }
            }
        }
    }
}

#[test]
fn claim_in_every_state_with_a_valid_lease_or_backoff() {
    use ClaimOutcome as O;
    for (state, outcome) in [
        (State::Processing, O::InFlight),
        (State::Prepared, O::InFlight),
        (State::AwaitingApproval, O::AwaitingApproval),
        (State::Completed, O::Completed),
        (State::FailedRetryable, O::Backoff),
        (State::FailedPermanent, O::FailedPermanent),
        (State::NeedsReview, O::NeedsReview),
    ] {
        let (mut h, _) = H::in_state(state);
        assert_eq!(h.claim().outcome, outcome, "{state:?}");
    }
}

#[test]
fn worker_writes_with_a_made_up_token_are_lease_lost_in_every_state() {
    let made_up = [
        "".to_string(),
        "nope".to_string(),
        "1.xyz".to_string(),
        format!("1.{}", "f".repeat(32)),
        format!("2.{}", lease_id(1).as_str()), // right lease id, wrong attempt
    ];
    for state in State::ALL {
        for tok in &made_up {
            for op in worker_ops(tok) {
                let (mut h, _) = H::in_state(state);
                let before = h.rec().clone();
                let name = op.name();
                let t = h.run(op);
                assert_eq!(t.reply, Err(OpError::LeaseLost), "{state:?} {name} {tok:?}");
                assert_eq!(t.write, Write::None);
                assert_eq!(t.events.len(), 1, "lease_lost is recorded");
                let e = &t.events[0];
                assert_eq!(e.kind, EventType::LeaseLost);
                assert_eq!((e.from_state, e.to_state), (Some(state), Some(state)));
                assert_eq!(h.rec(), &before);
            }
        }
    }
}

#[test]
fn every_operation_on_an_unknown_key_is_not_found_except_claim_and_sweep() {
    for op in worker_ops("1.00000000000000000000000000000001")
        .into_iter()
        .chain(operator_ops())
    {
        let mut h = H::new();
        let name = op.name();
        let t = h.run(op);
        if name == "sweep" {
            assert_eq!(t.reply, Ok(Reply::Swept { changed: false }));
        } else {
            assert_eq!(t.reply, Err(OpError::NotFound), "{name}");
        }
        assert!(t.events.is_empty());
        assert!(h.rec.is_none());
    }
}

// ================================================================ tokens and late writes

#[test]
fn stale_token_after_reclaim_is_lease_lost_and_recorded() {
    for op_index in 0..4 {
        let mut h = H::new();
        let old = h.acquire();
        h.advance(30_000);
        let new = h.acquire();
        assert_ne!(old, new);
        let op = worker_ops(&old).remove(op_index);
        let name = op.name();
        let before = h.rec().clone();
        let t = h.run(op);
        assert_eq!(t.reply, Err(OpError::LeaseLost), "{name}");
        assert_eq!(h.rec(), &before);
        let e = h.last_event();
        assert_eq!(e.kind, EventType::LeaseLost);
        assert_eq!(e.attempt, 2);
        assert!(e.note.as_deref().unwrap_or("").contains(name), "{e:?}");
        // the new holder is unaffected
        h.complete(&new, Some(result()), None)
            .expect("the newest token completes");
    }
}

#[test]
fn stale_token_after_a_retry_resume_is_lease_lost() {
    let mut h = H::new();
    let old = h.acquire();
    h.fail(&old, Class::Retryable).expect("fail");
    h.advance(1_000);
    h.acquire();
    assert_eq!(
        h.complete(&old, Some(result()), None),
        Err(OpError::LeaseLost)
    );
}

#[test]
fn newest_holder_may_complete_after_lease_expiry_when_nobody_acquired() {
    let mut h = H::new();
    let tok = h.acquire();
    h.advance(10 * 60_000);
    let rec = h
        .complete(&tok, Some(result()), Some("ch_1"))
        .expect("late complete");
    assert_eq!(rec.state, State::Completed);
    assert_eq!(rec.lease_expires_at, None);
    // and a claim now replays it instead of reclaiming
    assert_eq!(h.claim().outcome, ClaimOutcome::Completed);
}

#[test]
fn newest_holder_may_fail_after_lease_expiry_when_nobody_acquired() {
    let mut h = H::new();
    let tok = h.acquire();
    h.advance(10 * 60_000);
    let f = h.fail(&tok, Class::Retryable).expect("late fail");
    assert_eq!(f.record.state, State::FailedRetryable);
}

#[test]
fn late_completion_from_needs_review_reached_by_lease_expiry_resolves_it() {
    // lazily (by a claim) and eagerly (by the janitor)
    for eager in [false, true] {
        let mut h = H::review();
        let tok = h.acquire();
        h.advance(30_000);
        if eager {
            assert!(h.sweep());
        } else {
            assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
        }
        assert_eq!(h.rec().review_reason, Some(ReviewReason::LeaseExpired));
        h.advance(5_000);
        let rec = h
            .complete(&tok, Some(result()), Some("ch_1"))
            .expect("late completion");
        assert_eq!(rec.state, State::Completed);
        assert_eq!(rec.review_reason, None);
        let e = h.moved(EventType::Completed, State::NeedsReview, State::Completed);
        assert!(
            e.note.as_deref().is_some_and(|n| n.contains("late")),
            "recorded as a late completion: {e:?}"
        );
        // repeating it is the ordinary no-op
        h.complete(&tok, Some(result()), Some("ch_1"))
            .expect("repeat");
    }
}

#[test]
fn late_fail_from_needs_review_reached_by_lease_expiry_is_accepted() {
    let mut h = H::review();
    let tok = h.acquire();
    h.advance(30_000);
    assert!(h.sweep());
    let f = h.fail(&tok, Class::Permanent).expect("late fail");
    assert_eq!(f.record.state, State::FailedPermanent);
}

#[test]
fn late_completion_after_a_refused_reclaim_beyond_the_budget_resolves_the_review() {
    // The lease expired and the claim that found it could not resume (budget spent): the record
    // moved to needs_review because of the lease expiry and nobody acquired since, so the
    // holder of the newest token may still report.
    let mut p = Policy::default();
    p.retry.max_attempts = 1;
    let mut h = H::with_policy(p);
    let tok = h.acquire();
    h.advance(30_000);
    assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
    assert_eq!(h.rec().review_reason, Some(ReviewReason::BudgetExhausted));
    let rec = h
        .complete(&tok, Some(result()), None)
        .expect("late completion");
    assert_eq!(rec.state, State::Completed);
}

#[test]
fn late_completion_after_stuck_review_resolves_it() {
    let mut p = Policy::default();
    p.lease_expiry = LeaseExpiry::Review;
    p.stuck_after_ms = 60_000;
    let mut h = H::with_policy(p);
    let c = h.claim_with(ClaimRequest {
        lease_ms: Some(10 * 60_000),
        ..Default::default()
    });
    let tok = c.token.expect("token").secret();
    h.advance(60_000);
    assert!(h.sweep());
    assert_eq!(h.rec().review_reason, Some(ReviewReason::Stuck));
    h.complete(&tok, Some(result()), None)
        .expect("late completion");
}

#[test]
fn writes_after_the_holders_fail_are_invalid_transition() {
    for kind in [Class::Retryable, Class::Permanent, Class::Ambiguous] {
        let mut h = H::new();
        let tok = h.acquire();
        let f = h.fail(&tok, kind).expect("fail");
        let state = f.record.state;
        for op in worker_ops(&tok) {
            let name = op.name();
            let before = h.rec().clone();
            let t = h.run(op);
            let err = t.reply.expect_err(name);
            assert!(invalid_from(state)(&err), "{kind:?} {name}: {err:?}");
            assert!(t.events.is_empty());
            assert_eq!(h.rec(), &before);
        }
    }
}

#[test]
fn writes_after_the_holders_complete_other_than_the_same_complete_are_refused() {
    let (mut h, tok) = H::in_state(State::Completed);
    for op in worker_ops(&tok) {
        let name = op.name();
        let t = h.run(op);
        if name == "complete" {
            assert!(t.reply.is_ok());
        } else {
            assert!(invalid_from(State::Completed)(&t.reply.expect_err(name)));
        }
    }
}

#[test]
fn repeating_the_same_complete_is_a_no_op() {
    let (mut h, tok) = H::in_state(State::Completed);
    let before = h.rec().clone();
    h.advance(1_000);
    // the same result in another member order is the same result
    let t = h.run(Op::Complete(CompleteRequest {
        cost: None,
        token: tok,
        result: Some(json!({"amount": 100, "charge": "ch_1"})),
        external_ref: Some("ch_1".into()),
    }));
    assert_eq!(t.write, Write::None);
    assert!(t.events.is_empty());
    assert_eq!(t.reply, Ok(Reply::Record(before.clone())));
    assert_eq!(h.rec(), &before);
}

#[test]
fn complete_with_a_different_result_after_completion_is_result_mismatch() {
    for (result_v, ext, field) in [
        (
            Some(json!({"charge": "ch_2", "amount": 100})),
            Some("ch_1"),
            "result",
        ),
        (Some(result()), Some("ch_2"), "external_ref"),
        (Some(result()), None, "external_ref"),
        (None, Some("ch_1"), "result"),
        (None, Some("ch_2"), "result"),
    ] {
        let (mut h, tok) = H::in_state(State::Completed);
        let before = h.rec().clone();
        assert_eq!(
            h.complete(&tok, result_v, ext),
            Err(OpError::ResultMismatch { field })
        );
        assert_eq!(h.rec(), &before);
        assert_eq!(h.last_event().kind, EventType::Completed, "no event");
    }
}

#[test]
fn repeat_complete_after_the_result_expired_compares_the_external_ref() {
    let (mut h, tok) = H::in_state(State::Completed);
    let mut r = h.rec().clone();
    r.result = None;
    r.result_expired = true;
    h.rec = Some(r);
    assert!(h
        .complete(&tok, Some(json!("anything")), Some("ch_1"))
        .is_ok());
    assert_eq!(
        h.complete(&tok, Some(result()), Some("ch_9")),
        Err(OpError::ResultMismatch {
            field: "external_ref"
        })
    );
}

#[test]
fn an_operator_decision_fences_out_every_earlier_token() {
    let mut h = H::new();
    let tok = h.acquire();
    h.advance(30_000);
    h.resolve(ResolveAction::FailedPermanent)
        .expect("resolve an expired lease");
    assert_eq!(
        h.complete(&tok, Some(result()), None),
        Err(OpError::LeaseLost)
    );
}

#[test]
fn resolve_of_processing_or_prepared_needs_an_expired_lease() {
    for state in [State::Processing, State::Prepared] {
        let (mut h, _) = H::in_state(state);
        assert!(invalid_from(state)(
            &h.resolve(ResolveAction::Completed)
                .expect_err("valid lease")
        ));
        h.advance(30_000);
        let rec = h.resolve(ResolveAction::Completed).expect("expired lease");
        assert_eq!(rec.state, State::Completed);
        assert_eq!(rec.lease_expires_at, None);
    }
}

#[test]
fn resolve_is_recorded_with_who_and_why() {
    let (mut h, _) = H::in_state(State::NeedsReview);
    let t = h.run(Op::Resolve(ResolveRequest {
        action: ResolveAction::Completed,
        external_ref: Some("ch_9".into()),
        result: Some(json!({"ok": true})),
        note: "found it in the PSP dashboard".into(),
    }));
    let Ok(Reply::Record(rec)) = t.reply else {
        panic!("record reply")
    };
    assert_eq!(rec.state, State::Completed);
    assert_eq!(rec.external_ref.as_deref(), Some("ch_9"));
    assert_eq!(rec.result, Some(json!({"ok": true})));
    assert_eq!(rec.final_at, Some(Timestamp(h.now)));
    let e = h.moved(EventType::Resolved, State::NeedsReview, State::Completed);
    assert_eq!(e.note.as_deref(), Some("found it in the PSP dashboard"));
    assert_eq!(e.actor.as_deref(), Some("operator:alice"));
}

#[test]
fn approve_and_reject_are_recorded() {
    let (mut h, _) = H::in_state(State::AwaitingApproval);
    h.approve().expect("approve");
    let e = h.moved(
        EventType::Approved,
        State::AwaitingApproval,
        State::Prepared,
    );
    assert_eq!(e.actor.as_deref(), Some("operator:alice"));
    assert_eq!(e.note.as_deref(), Some("looks good"));

    let (mut h, tok) = H::in_state(State::AwaitingApproval);
    let rec = h.reject().expect("reject");
    assert_eq!(rec.state, State::FailedPermanent);
    assert_eq!(rec.final_at, Some(Timestamp(h.now)));
    assert_eq!(rec.last_error.expect("last_error").category, "rejected");
    assert_eq!(h.last_event().kind, EventType::Rejected);
    assert_eq!(h.claim().outcome, ClaimOutcome::FailedPermanent);
    assert_eq!(
        h.complete(&tok, None, None),
        Err(OpError::LeaseLost),
        "rejection fences the preparer"
    );
}

#[test]
fn prepare_with_approval_waits_unleased_and_fences_the_preparer() {
    let mut h = H::new();
    let tok = h.acquire();
    let rec = h
        .prepare(&tok, json!({"draft": "x"}), true)
        .expect("prepare");
    assert_eq!(rec.state, State::AwaitingApproval);
    assert_eq!(rec.lease_expires_at, None);
    assert_eq!(rec.prepared_payload, Some(json!({"draft": "x"})));
    h.moved(
        EventType::Prepared,
        State::Processing,
        State::AwaitingApproval,
    );
    assert!(invalid_from(State::AwaitingApproval)(
        &h.complete(&tok, None, None).expect_err("awaiting approval")
    ));
}

#[test]
fn repeating_the_same_prepare_is_a_no_op() {
    let (mut h, tok) = H::in_state(State::Prepared);
    let before = h.rec().clone();
    let rec = h
        .prepare(&tok, json!({"draft": "hello"}), false)
        .expect("same prepare");
    assert_eq!(rec, before);
    assert_eq!(h.rec(), &before);
}

#[test]
fn heartbeat_extends_the_lease_and_restarts_the_stuck_clock() {
    let mut h = H::new();
    let tok = h.acquire();
    h.advance(20_000);
    let rec = h.heartbeat(&tok, None).expect("heartbeat");
    assert_eq!(rec.lease_expires_at, Some(Timestamp(h.now + 30_000)));
    assert_eq!(rec.active_at, Timestamp(h.now));
    let rec = h.heartbeat(&tok, Some(90_000)).expect("heartbeat");
    assert_eq!(rec.lease_expires_at, Some(Timestamp(h.now + 90_000)));
    h.advance(60_000);
    assert_eq!(h.claim().outcome, ClaimOutcome::InFlight);
}

// ================================================================ attempts and budget

#[test]
fn max_attempts_counts_attempts_the_first_included() {
    let mut p = Policy::default();
    p.retry.max_attempts = 3;
    let mut h = H::with_policy(p);
    for attempt in 1..=3u32 {
        let c = h.claim();
        assert_eq!(c.outcome, ClaimOutcome::Acquired);
        let tok = c.token.expect("token");
        assert_eq!(tok.attempt, attempt);
        let f = h.fail(&tok.secret(), Class::Retryable).expect("fail");
        assert_eq!(f.retry.attempt, attempt);
        assert_eq!(f.retry.max_attempts, 3);
        if attempt < 3 {
            assert!(f.retry.allowed);
            assert_eq!(f.record.state, State::FailedRetryable);
            h.now = f.retry.not_before.expect("not_before").0;
        } else {
            // the last attempt's retryable fail goes to a person, never dropped
            assert!(!f.retry.allowed);
            assert_eq!(f.retry.not_before, None);
            assert_eq!(f.record.state, State::NeedsReview);
            assert_eq!(f.review_reason, Some(ReviewReason::BudgetExhausted));
        }
    }
    assert_eq!(h.alerts.len(), 1);
    assert_eq!(h.alerts[0].reason, AlertReason::NeedsReview);
    assert_eq!(h.alerts[0].attempt, 3);
    assert_eq!(h.alerts[0].error_category.as_deref(), Some("http"));
    assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
}

#[test]
fn retryable_fail_backs_off_exponentially_with_full_jitter() {
    let mut h = H::new();
    let mut expected = 500; // base 1000 × 2^(n-1) × jitter 0.5
    for _ in 0..3 {
        let tok = h.acquire();
        let f = h.fail(&tok, Class::Retryable).expect("fail");
        let nb = f.retry.not_before.expect("not_before");
        assert_eq!(nb, Timestamp(h.now + expected));
        assert_eq!(f.record.not_before, Some(nb));
        assert_eq!(f.record.lease_expires_at, None);
        h.now = nb.0;
        expected *= 2;
    }
    let mut h = H::new();
    h.jitter = 0.0;
    let tok = h.acquire();
    let f = h.fail(&tok, Class::Retryable).expect("fail");
    assert_eq!(f.retry.not_before, Some(Timestamp(h.now)));
}

#[test]
fn retry_after_is_a_floor_on_not_before() {
    let mut h = H::new();
    let tok = h.acquire();
    let mut req = fail_req(&tok, Class::Retryable);
    req.retry_after_ms = Some(120_000);
    let f = h.fail_with(req).expect("fail");
    assert_eq!(f.retry.not_before, Some(Timestamp(T0 + 120_000)));
    // a smaller Retry-After does not shorten the backoff
    let mut h = H::new();
    let tok = h.acquire();
    let mut req = fail_req(&tok, Class::Retryable);
    req.retry_after_ms = Some(100);
    let f = h.fail_with(req).expect("fail");
    assert_eq!(f.retry.not_before, Some(Timestamp(T0 + 500)));
}

#[test]
fn a_retry_that_cannot_start_inside_the_window_goes_to_review() {
    let mut h = H::new();
    let tok = h.acquire();
    let mut req = fail_req(&tok, Class::Retryable);
    req.retry_after_ms = Some(DAY_MS + 1);
    let f = h.fail_with(req).expect("fail");
    assert!(!f.retry.allowed);
    assert_eq!(f.record.state, State::NeedsReview);
    assert_eq!(f.review_reason, Some(ReviewReason::BudgetExhausted));
    // exactly at the window's end is still inside it
    let mut h = H::new();
    let tok = h.acquire();
    let mut req = fail_req(&tok, Class::Retryable);
    req.retry_after_ms = Some(DAY_MS);
    assert!(h.fail_with(req).expect("fail").retry.allowed);
}

#[test]
fn a_resume_after_the_window_goes_to_review() {
    let mut h = H::new();
    let tok = h.acquire();
    h.fail(&tok, Class::Retryable).expect("fail");
    h.advance(DAY_MS + 1);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::NeedsReview);
    assert_eq!(h.rec().review_reason, Some(ReviewReason::BudgetExhausted));
}

#[test]
fn a_reclaim_after_lease_expiry_uses_an_attempt() {
    let mut p = Policy::default();
    p.retry.max_attempts = 3;
    let mut h = H::with_policy(p);
    h.acquire();
    h.advance(30_000);
    assert_eq!(h.claim().token.expect("token").attempt, 2);
    h.advance(30_000);
    assert_eq!(h.claim().token.expect("token").attempt, 3);
    // a resume beyond max_attempts moves the record to review instead
    h.advance(30_000);
    let before_attempt = h.rec().attempt;
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::NeedsReview);
    assert_eq!(c.token, None);
    let rec = c.record.expect("record");
    assert_eq!(rec.state, State::NeedsReview);
    assert_eq!(rec.attempt, before_attempt);
    assert_eq!(rec.review_reason, Some(ReviewReason::BudgetExhausted));
    assert_eq!(h.last_event().kind, EventType::MovedToReview);
    assert_eq!(h.alerts.len(), 1);
}

#[test]
fn an_expired_prepared_beyond_the_budget_goes_to_review() {
    let mut p = Policy::default();
    p.retry.max_attempts = 1;
    let mut h = H::with_policy(p);
    let tok = h.acquire();
    h.prepare(&tok, json!(1), false).expect("prepare");
    h.advance(30_000);
    assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
    assert_eq!(
        h.rec().prepared_payload,
        Some(json!(1)),
        "the payload is kept"
    );
}

#[test]
fn resolve_retry_gives_a_fresh_budget() {
    let mut p = Policy::default();
    p.retry.max_attempts = 2;
    let mut h = H::with_policy(p);
    let tok = h.acquire();
    h.fail(&tok, Class::Retryable).expect("fail");
    h.advance(1_000);
    let tok = h.acquire();
    assert_eq!(
        h.fail(&tok, Class::Retryable).expect("fail").record.state,
        State::NeedsReview
    );
    h.advance(DAY_MS * 2); // the old window is long gone too
    let rec = h.resolve(ResolveAction::Retry).expect("resolve retry");
    assert_eq!(rec.state, State::FailedRetryable);
    assert_eq!(
        rec.not_before,
        Some(Timestamp(h.now)),
        "claimable right away"
    );
    assert_eq!(rec.review_reason, None);
    assert_eq!(rec.attempt, 2, "resolve does not acquire");
    // two more attempts: 3 and 4
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(true));
    let tok = c.token.expect("token");
    assert_eq!(tok.attempt, 3);
    let f = h.fail(&tok.secret(), Class::Retryable).expect("fail");
    assert!(f.retry.allowed);
    assert_eq!(f.retry.max_attempts, 4);
    h.now = f.retry.not_before.expect("nb").0;
    let tok = h.acquire();
    let f = h.fail(&tok, Class::Retryable).expect("fail");
    assert!(!f.retry.allowed);
    assert_eq!(f.record.state, State::NeedsReview);
}

#[test]
fn approve_leaves_attempt_unchanged_and_the_resuming_claim_increments_it() {
    let (mut h, _) = H::in_state(State::AwaitingApproval);
    h.advance(DAY_MS / 2);
    assert_eq!(h.approve().expect("approve").attempt, 1);
    assert_eq!(h.last_event().attempt, 1);
    let c = h.claim();
    assert_eq!(c.token.expect("token").attempt, 2);
    assert_eq!(h.last_event().attempt, 2);
}

#[test]
fn an_approved_draft_gets_the_whole_budget_from_its_approval() {
    let mut p = Policy::default();
    p.retry.max_attempts = 1;
    let mut h = H::with_policy(p);
    let tok = h.acquire();
    h.move_to(&tok, State::AwaitingApproval);
    // The person approves after the retry window has passed.
    let window = h.policy.retry.window_ms;
    h.advance(window + 1);
    let approved = h.approve().expect("approve");
    assert_eq!((approved.attempt, approved.budget_base), (1, 1));
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Acquired, "{c:?}");
    assert_eq!(c.resumed, Some(true));
    let tok = c.token.expect("token");
    assert_eq!(tok.attempt, 2);
    // The budget itself still holds: one attempt after the approval, not two.
    let f = h.fail(&tok.secret(), Class::Retryable).expect("fail");
    assert!(!f.retry.allowed, "{f:?}");
    assert_eq!(f.record.state, State::NeedsReview);
}

#[test]
fn permanent_and_ambiguous_fails_are_never_retried() {
    let (h, _) = H::in_state(State::FailedPermanent);
    let rec = h.rec();
    assert_eq!(rec.final_at, Some(Timestamp(T0)));
    assert_eq!(rec.not_before, None);
    let (mut h, _) = H::in_state(State::NeedsReview);
    assert_eq!(h.rec().review_reason, Some(ReviewReason::Ambiguous));
    assert_eq!(h.rec().final_at, None);
    assert_eq!(h.alerts.len(), 1);
    assert_eq!(h.alerts[0].reason, AlertReason::NeedsReview);
    h.advance(DAY_MS);
    assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
}

#[test]
fn fail_classifies_by_status_and_category_with_the_namespace_policy() {
    type Case = (Option<u16>, Option<&'static str>, Option<bool>, bool, State);
    let cases: [Case; 7] = [
        (Some(503), None, None, false, State::FailedRetryable),
        (Some(502), None, None, false, State::NeedsReview),
        (Some(502), None, None, true, State::FailedRetryable),
        (Some(401), None, None, true, State::FailedPermanent),
        (
            None,
            Some("timeout"),
            Some(false),
            false,
            State::FailedRetryable,
        ),
        (None, Some("timeout"), None, false, State::NeedsReview),
        (
            None,
            Some("validation"),
            None,
            false,
            State::FailedPermanent,
        ),
    ];
    for (status, category, sent, idem, state) in cases {
        let mut p = Policy::default();
        p.destination_idempotent = idem;
        let mut h = H::with_policy(p);
        let tok = h.acquire();
        let f = h
            .fail_with(FailRequest {
                cost: None,
                token: tok,
                kind: None,
                http_status: status,
                retry_after_ms: None,
                sent,
                error: category.map(|c| FailErrorInput {
                    category: c.into(),
                    message: "m".into(),
                }),
            })
            .expect("fail");
        assert_eq!(
            f.record.state, state,
            "{status:?} {category:?} {sent:?} {idem}"
        );
        let err = f.record.last_error.expect("last_error");
        assert_eq!(err.http_status, status);
        if let Some(c) = category {
            assert_eq!(err.category, c);
        }
    }
}

#[test]
fn unclassifiable_fail_is_invalid_field_and_writes_nothing() {
    for (status, category, field) in [
        (Some(200), None, "http_status"),
        (None, Some("weird"), "error.category"),
        (None, None, "kind"),
    ] {
        let mut h = H::new();
        let tok = h.acquire();
        let before = h.rec().clone();
        let r = h.fail_with(FailRequest {
            cost: None,
            token: tok.clone(),
            kind: None,
            http_status: status,
            retry_after_ms: None,
            sent: None,
            error: category.map(|c| FailErrorInput {
                category: c.into(),
                message: "m".into(),
            }),
        });
        match r {
            Err(OpError::InvalidField { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{other:?}"),
        }
        assert_eq!(h.rec(), &before);
        // nothing happened: the holder may still report
        h.complete(&tok, None, None).expect("complete");
    }
}

#[test]
fn fail_stores_a_sanitized_error_message() {
    let mut h = H::new();
    let tok = h.acquire();
    let mut req = fail_req(&tok, Class::Permanent);
    req.error = Some(FailErrorInput {
        category: "business".into(),
        message: format!("line1\nline2\t{}", "x".repeat(2_000)),
    });
    let f = h.fail_with(req).expect("fail");
    let msg = f.record.last_error.expect("last_error").message;
    assert!(msg.starts_with("line1 line2 x"));
    assert_eq!(msg.chars().count(), MAX_ERROR_MESSAGE);
    let e = h.last_event();
    assert_eq!(e.kind, EventType::Failed);
    assert!(e
        .note
        .as_deref()
        .is_some_and(|n| n.starts_with("permanent")));
}

// ================================================================ the janitor's sweep

#[test]
fn sweep_moves_expired_processing_to_review_under_review_policy_with_an_alert() {
    let mut h = H::review();
    h.claim_with(ClaimRequest {
        owner: Some("exec-1".into()),
        correlation_id: Some("c1".into()),
        ..Default::default()
    });
    h.advance(29_999);
    assert!(!h.sweep(), "the lease is still valid");
    h.advance(1);
    assert!(h.sweep());
    let rec = h.rec();
    assert_eq!(rec.state, State::NeedsReview);
    assert_eq!(rec.review_reason, Some(ReviewReason::LeaseExpired));
    let e = h.last_event();
    assert_eq!(e.kind, EventType::MovedToReview);
    assert_eq!(e.owner.as_deref(), Some("exec-1"));
    assert_eq!(e.correlation_id.as_deref(), Some("c1"));
    assert_eq!(e.attempt, 1);
    assert_eq!(h.alerts.len(), 1);
    assert_eq!(h.alerts[0].reason, AlertReason::NeedsReview);
    assert_eq!(h.alerts[0].state, State::NeedsReview);
    // a second sweep changes nothing
    assert!(!h.sweep());
    assert_eq!(h.alerts.len(), 1);
}

#[test]
fn sweep_uses_the_records_own_lease_expiry() {
    let mut h = H::new();
    h.claim_with(ClaimRequest {
        lease_expiry: Some(LeaseExpiry::Review),
        ..Default::default()
    });
    h.advance(30_000);
    assert!(h.sweep());
    assert_eq!(h.state(), State::NeedsReview);
}

#[test]
fn sweep_leaves_expired_processing_alone_under_reclaim() {
    let mut h = H::new();
    h.acquire();
    h.advance(60_000);
    assert!(!h.sweep());
    assert_eq!(h.state(), State::Processing);
    assert!(h.alerts.is_empty());
}

#[test]
fn sweep_ignores_every_state_but_processing() {
    for state in State::ALL {
        if state == State::Processing {
            continue;
        }
        let (mut h, _) = H::in_state(state);
        h.policy.lease_expiry = LeaseExpiry::Review;
        h.advance(DAY_MS);
        let before = h.rec().clone();
        assert!(!h.sweep(), "{state:?}");
        assert_eq!(h.rec(), &before);
    }
}

#[test]
fn stuck_processing_raises_one_alert_under_reclaim() {
    let mut p = Policy::default();
    p.stuck_after_ms = 60_000;
    let mut h = H::with_policy(p);
    let c = h.claim_with(ClaimRequest {
        lease_ms: Some(3_600_000),
        ..Default::default()
    });
    let tok = c.token.expect("token").secret();
    h.advance(59_999);
    assert!(!h.sweep());
    h.advance(1);
    assert!(h.sweep());
    assert_eq!(h.state(), State::Processing, "reclaim: stays processing");
    assert!(h.rec().stuck_alerted);
    assert_eq!(h.alerts.len(), 1);
    assert_eq!(h.alerts[0].reason, AlertReason::Stuck);
    assert_eq!(h.alerts[0].state, State::Processing);
    h.advance(60_000);
    assert!(!h.sweep(), "alert once");
    assert_eq!(h.alerts.len(), 1);
    // a heartbeat restarts the stuck clock, after which it may alert again
    h.heartbeat(&tok, None).expect("heartbeat");
    assert!(!h.rec().stuck_alerted);
    h.advance(30_000);
    assert!(!h.sweep());
    h.heartbeat(&tok, Some(3_600_000)).expect("heartbeat");
    h.advance(60_000);
    assert!(h.sweep());
    assert_eq!(h.alerts.len(), 2);
}

#[test]
fn a_heartbeating_worker_is_never_stuck() {
    let mut p = Policy::default();
    p.stuck_after_ms = 60_000;
    let mut h = H::with_policy(p);
    let tok = h.acquire();
    for _ in 0..10 {
        h.advance(20_000);
        h.heartbeat(&tok, None).expect("heartbeat");
        assert!(!h.sweep());
    }
    assert!(h.alerts.is_empty());
}

#[test]
fn stuck_processing_moves_to_review_under_review_policy() {
    let mut p = Policy::default();
    p.lease_expiry = LeaseExpiry::Review;
    p.stuck_after_ms = 60_000;
    let mut h = H::with_policy(p);
    h.claim_with(ClaimRequest {
        lease_ms: Some(3_600_000),
        ..Default::default()
    });
    h.advance(60_000);
    assert!(h.sweep());
    let rec = h.rec();
    assert_eq!(rec.state, State::NeedsReview);
    assert_eq!(rec.review_reason, Some(ReviewReason::Stuck));
    assert_eq!(h.last_event().kind, EventType::MovedToReview);
    let reasons: Vec<AlertReason> = h.alerts.iter().map(|a| a.reason).collect();
    assert_eq!(reasons, [AlertReason::Stuck, AlertReason::NeedsReview]);
    assert!(!h.sweep());
    assert_eq!(h.claim().outcome, ClaimOutcome::NeedsReview);
}

// ================================================================ retention

#[test]
fn retention_expires_results_then_deletes_tombstones_of_final_records() {
    let p = Policy::default();
    for state in [State::Completed, State::FailedPermanent] {
        let (h, _) = H::in_state(state);
        let mut rec = h.rec().clone();
        assert_eq!(rec.final_at, Some(Timestamp(T0)));
        let at = |ms: i64| Timestamp(T0 + ms);
        assert_eq!(retention_action(&rec, &p, at(0)), RetentionAction::Keep);
        assert_eq!(
            retention_action(&rec, &p, at(p.retention_ms - 1)),
            RetentionAction::Keep
        );
        assert_eq!(
            retention_action(&rec, &p, at(p.retention_ms)),
            RetentionAction::ExpireResult
        );
        rec.result_expired = true;
        assert_eq!(
            retention_action(&rec, &p, at(p.retention_ms)),
            RetentionAction::Keep,
            "a tombstone is not expired twice"
        );
        assert_eq!(
            retention_action(&rec, &p, at(p.audit_retention_ms - 1)),
            RetentionAction::Keep
        );
        assert_eq!(
            retention_action(&rec, &p, at(p.audit_retention_ms)),
            RetentionAction::Delete
        );
        rec.result_expired = false;
        assert_eq!(
            retention_action(&rec, &p, at(p.audit_retention_ms)),
            RetentionAction::Delete
        );
    }
}

#[test]
fn retention_counts_from_the_final_state_not_creation() {
    let p = Policy::default();
    let mut h = H::new();
    let tok = h.acquire();
    h.advance(20 * DAY_MS);
    h.complete(&tok, Some(result()), None)
        .expect("late complete");
    let rec = h.rec();
    assert_eq!(
        retention_action(rec, &p, Timestamp(T0 + 31 * DAY_MS)),
        RetentionAction::Keep
    );
    assert_eq!(
        retention_action(rec, &p, Timestamp(T0 + 50 * DAY_MS)),
        RetentionAction::ExpireResult
    );
}

#[test]
fn retention_never_touches_non_final_states() {
    let p = Policy::default();
    for state in [
        State::Processing,
        State::Prepared,
        State::AwaitingApproval,
        State::FailedRetryable,
        State::NeedsReview,
    ] {
        let (h, _) = H::in_state(state);
        assert_eq!(
            retention_action(h.rec(), &p, Timestamp(T0 + 10_000 * DAY_MS)),
            RetentionAction::Keep,
            "{state:?}"
        );
    }
    // a final_at left over from an earlier final state does not count
    let (mut h, _) = H::in_state(State::FailedPermanent);
    h.resolve(ResolveAction::Retry).expect("resolve retry");
    assert_eq!(
        retention_action(h.rec(), &p, Timestamp(T0 + 10_000 * DAY_MS)),
        RetentionAction::Keep
    );
}

#[test]
fn zero_retention_expires_immediately() {
    let mut p = Policy::default();
    p.retention_ms = 0;
    p.audit_retention_ms = 0;
    let (h, _) = H::in_state(State::Completed);
    assert_eq!(
        retention_action(h.rec(), &p, Timestamp(T0)),
        RetentionAction::Delete
    );
}

#[test]
fn prepared_payload_survives_a_retryable_failure_and_the_resume_is_prepared() {
    let mut h = H::new();
    let tok = h.acquire();
    h.prepare(&tok, json!({"draft": "hello"}), false)
        .expect("prepare");
    h.fail(&tok, Class::Retryable).expect("fail");
    assert_eq!(h.state(), State::FailedRetryable);
    h.advance(DAY_MS / 2);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.resumed, Some(true));
    let r = c.record.expect("record");
    assert_eq!(
        r.state,
        State::Prepared,
        "a later attempt must reuse the saved payload"
    );
    assert_eq!(r.prepared_payload, Some(json!({"draft": "hello"})));
    assert_eq!(r.attempt, 2);
}

#[test]
fn an_expired_prepared_record_whose_request_was_sent_goes_to_review_never_resends() {
    let mut h = H::new();
    h.policy.lease_expiry = LeaseExpiry::Review;
    let tok = h.acquire();
    h.prepare(&tok, json!({"draft": "hello"}), false)
        .expect("prepare");
    h.sent(&tok).expect("sent");
    h.advance(DAY_MS / 4);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::NeedsReview, "never a blind resend");
    assert_eq!(h.state(), State::NeedsReview);

    // Without a `sent`, an expired prepared record still resumes with its payload.
    let mut h = H::new();
    h.policy.lease_expiry = LeaseExpiry::Review;
    let tok = h.acquire();
    h.prepare(&tok, json!({"draft": "hello"}), false)
        .expect("prepare");
    h.advance(DAY_MS / 4);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.record.expect("record").state, State::Prepared);
}

#[test]
fn resolve_retry_of_a_rejected_draft_starts_from_scratch() {
    let (mut h, _) = H::in_state(State::AwaitingApproval);
    h.reject().expect("reject");
    h.resolve(ResolveAction::Retry).expect("resolve retry");
    assert_eq!(h.rec().prepared_payload, None);
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert_eq!(c.record.expect("record").state, State::Processing);
}

#[test]
fn resolve_retry_after_review_keeps_the_prepared_payload() {
    let mut h = H::new();
    let tok = h.acquire();
    h.prepare(&tok, json!({"draft": "v1"}), false)
        .expect("prepare");
    h.fail(&tok, Class::Ambiguous).expect("fail");
    h.resolve(ResolveAction::Retry).expect("resolve retry");
    let c = h.claim();
    let r = c.record.expect("record");
    assert_eq!(r.state, State::Prepared);
    assert_eq!(r.prepared_payload, Some(json!({"draft": "v1"})));
}

// ------------------------------------------------------------------ cost and recovery

fn cost(tokens: u64, usd: f64) -> Option<crate::record::AttemptCost> {
    Some(crate::record::AttemptCost::new(Some(tokens), Some(usd)).expect("valid cost"))
}

/// A record in `state` whose first lease was reclaimed: returns the harness, the fenced
/// (attempt 1) token and the newest (attempt 2) token.
fn reclaimed_in_state(state: State) -> (H, String, String) {
    let mut h = H::new();
    let stale = h.acquire();
    h.advance(h.policy.lease_ms + 1);
    let c = h.claim();
    assert_eq!((c.outcome, c.resumed), (ClaimOutcome::Acquired, Some(true)));
    let tok = c.token.expect("token").secret();
    h.move_to(&tok, state);
    (h, stale, tok)
}

/// Every worker write a token can carry, with and without a cost.
fn reports_and_writes(token: &str) -> Vec<Op> {
    let mut ops = vec![
        Op::Prepare(PrepareRequest {
            token: token.into(),
            payload: json!({"draft": "x"}),
            approval_required: false,
        }),
        Op::Heartbeat(HeartbeatRequest {
            token: token.into(),
            lease_ms: None,
        }),
    ];
    for c in [None, cost(10, 0.5)] {
        ops.push(Op::Complete(CompleteRequest {
            token: token.into(),
            result: Some(result()),
            external_ref: Some("ch_1".into()),
            cost: c,
        }));
        for sent in [None, Some(true), Some(false)] {
            for kind in [Class::Retryable, Class::Permanent, Class::Ambiguous] {
                let mut f = fail_req(token, kind);
                f.sent = sent;
                f.cost = c;
                ops.push(Op::Fail(f));
            }
        }
    }
    ops
}

/// The decision table's fenced completions, exhaustively: every state × a fenced token, a
/// made-up token (malformed or well-formed with the wrong lease) and the newest token ×
/// every worker write. A fenced completion is exactly a `lease_lost` refusal of a report of
/// an effect; it always carries its event note and its alert, and nothing else does.
#[test]
fn fenced_completions_are_exactly_refused_reports_of_an_effect() {
    let mut fenced_seen = 0;
    for state in State::ALL {
        let (h, stale, newest) = reclaimed_in_state(state);
        let wrong_lease = Token::new(2, lease_id(999)).secret();
        for (which, token) in [
            ("stale", stale.as_str()),
            ("made-up", "not-a-token"),
            ("wrong-lease", wrong_lease.as_str()),
            ("newest", newest.as_str()),
        ] {
            for op in reports_and_writes(token) {
                let t = apply(&ns(), &key(), h.rec.as_ref(), &op, &h.ctx());
                let lease_lost = t.reply == Err(OpError::LeaseLost);
                let want = lease_lost && reports_effect(&op);
                let ctx = format!("{state:?} {which} {op:?}");
                assert_eq!(t.tally.fenced_completion, want, "{ctx}");
                if which != "newest" {
                    assert!(lease_lost, "{ctx}: a foreign token is always lease_lost");
                }
                let fenced_alerts: Vec<_> = t
                    .alerts
                    .iter()
                    .filter(|a| a.reason == AlertReason::FencedCompletion)
                    .collect();
                let noted = t.events.iter().any(|e| {
                    e.kind == EventType::LeaseLost
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.starts_with(FENCED_COMPLETION_NOTE))
                });
                assert_eq!(noted, want, "{ctx}");
                if want {
                    fenced_seen += 1;
                    assert_eq!(fenced_alerts.len(), 1, "{ctx}");
                    let a = fenced_alerts[0];
                    assert_eq!(a.state, state, "{ctx}");
                    // One alert per fenced attempt: the attempt the token names when this
                    // record had it, else 0.
                    let want_attempt = match which {
                        "stale" => 1,
                        "wrong-lease" => 2,
                        _ => 0,
                    };
                    assert_eq!(a.attempt, want_attempt, "{ctx}");
                    // The record is not changed beyond the cost sums.
                    match &t.write {
                        Write::None => assert!(t.tally.cost.is_none(), "{ctx}"),
                        Write::Update(r) => {
                            assert_eq!(r.state, state, "{ctx}");
                            assert_eq!(r.updated_at, h.rec().updated_at, "{ctx}");
                            assert!(t.tally.cost.is_some(), "{ctx}");
                        }
                        Write::Insert(_) => panic!("{ctx}: insert"),
                    }
                } else {
                    assert!(fenced_alerts.is_empty(), "{ctx}");
                }
            }
        }
    }
    // 7 states × 3 foreign tokens × (2 completes + 12 fails with sent not false)
    assert_eq!(fenced_seen, 7 * 3 * 14);
}

#[test]
fn a_fenced_completion_is_recorded_and_alerted_and_the_ledger_keeps_one_completion() {
    let (mut h, stale, newest) = reclaimed_in_state(State::Processing);
    h.complete(&newest, Some(result()), Some("ch_2"))
        .expect("the newest holder completes");
    let before = h.rec().clone();
    let t = h.run(Op::Complete(CompleteRequest {
        token: stale.clone(),
        result: Some(result()),
        external_ref: Some("ch_1".into()),
        cost: cost(120, 0.02),
    }));
    assert_eq!(t.reply, Err(OpError::LeaseLost));
    assert!(t.tally.fenced_completion);
    let rec = h.rec().clone();
    assert_eq!(
        rec.external_ref.as_deref(),
        Some("ch_2"),
        "one completion kept"
    );
    assert_eq!(rec.state, State::Completed);
    assert_eq!(rec.updated_at, before.updated_at);
    // The zombie was attempt 1: its spend is first-attempt spend.
    assert_eq!((rec.cost.tokens, rec.cost.retry_tokens), (120, 0));
    let e = h.last_event();
    assert_eq!(e.kind, EventType::LeaseLost);
    assert_eq!(e.cost, cost(120, 0.02));
    assert_eq!(
        h.alerts.last().map(|a| (a.reason, a.attempt)),
        Some((AlertReason::FencedCompletion, 1))
    );
    // A fail that certainly never left is not a fenced completion.
    let mut f = fail_req(&stale, Class::Retryable);
    f.sent = Some(false);
    let t = h.run(Op::Fail(f));
    assert_eq!(t.reply, Err(OpError::LeaseLost));
    assert!(!t.tally.fenced_completion);
    assert!(t.alerts.is_empty());
}

#[test]
fn cost_is_recorded_on_the_attempts_event_and_summed_first_and_retry() {
    let mut h = H::new();
    let t1 = h.acquire();
    let mut f = fail_req(&t1, Class::Retryable);
    f.cost = cost(100, 0.1);
    let t = h.run(Op::Fail(f));
    assert_eq!(t.tally.cost, Some((cost(100, 0.1).expect("c"), false)));
    assert_eq!(h.last_event().cost, cost(100, 0.1));
    h.advance(DAY_MS / 24);
    let t2 = h.acquire();
    let t = h.run(Op::Complete(CompleteRequest {
        token: t2.clone(),
        result: Some(result()),
        external_ref: None,
        cost: cost(40, 0.2),
    }));
    assert_eq!(t.tally.cost, Some((cost(40, 0.2).expect("c"), true)));
    let c = h.rec().cost;
    assert_eq!((c.tokens, c.retry_tokens), (140, 40));
    assert_eq!((c.usd_nanos, c.retry_usd_nanos), (300_000_000, 200_000_000));
    // A repeated identical complete is an answer, not a new spend.
    let t = h.run(Op::Complete(CompleteRequest {
        token: t2,
        result: Some(result()),
        external_ref: None,
        cost: cost(40, 0.2),
    }));
    assert!(t.reply.is_ok());
    assert_eq!(t.tally.cost, None);
    assert_eq!(h.rec().cost.tokens, 140);
    // The record's sum is the sum of its events' costs.
    let sum: u64 = h
        .events
        .iter()
        .filter_map(|e| e.cost)
        .map(|c| c.tokens)
        .sum();
    assert_eq!(sum, h.rec().cost.tokens);
    // No cost reported: zeros, and no cost member on the event.
    let (h0, _) = H::in_state(State::Completed);
    assert_eq!(h0.rec().cost, crate::record::CostTotals::default());
    assert!(h0.events.iter().all(|e| e.cost.is_none()));
}

#[test]
fn acquisitions_are_tallied_first_or_retry() {
    let mut h = H::new();
    let t = h.run(Op::Claim(ClaimRequest::default()));
    assert_eq!(t.tally.acquired, Some(Acquired::First));
    let t = h.run(Op::Claim(ClaimRequest::default()));
    assert_eq!(t.tally.acquired, None, "in_flight acquires nothing");
    h.advance(h.policy.lease_ms + 1);
    let t = h.run(Op::Claim(ClaimRequest::default()));
    assert_eq!(t.tally.acquired, Some(Acquired::Retry));
}

#[test]
fn review_clock_starts_on_entering_review_and_recovery_is_measured_at_resolve() {
    let (mut h, _) = H::in_state(State::NeedsReview);
    let entered = h.now;
    assert_eq!(h.rec().review_since, Some(Timestamp(entered)));
    // Staying in review (a refused claim, a sweep) keeps the clock.
    h.advance(60_000);
    h.claim();
    h.sweep();
    assert_eq!(h.rec().review_since, Some(Timestamp(entered)));
    h.advance(240_000);
    let t = h.run(Op::Resolve(ResolveRequest {
        action: ResolveAction::Retry,
        external_ref: None,
        result: None,
        note: "checked".into(),
    }));
    assert_eq!(t.tally.recovery_ms, Some(300_000));
    assert_eq!(h.rec().review_since, None);
    // A resolve from elsewhere measures nothing.
    let (mut h, _) = H::in_state(State::FailedPermanent);
    let t = h.run(Op::Resolve(ResolveRequest {
        action: ResolveAction::Completed,
        external_ref: None,
        result: None,
        note: "done by hand".into(),
    }));
    assert!(t.reply.is_ok());
    assert_eq!(t.tally.recovery_ms, None);
    // Lease expiry under review stamps it too (sweep path).
    let mut h = H::review();
    h.acquire();
    h.advance(h.policy.lease_ms + 1);
    assert!(h.sweep());
    assert_eq!(h.rec().review_since, Some(Timestamp(h.now)));
}

mod cost_property {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        Claim {
            worker: usize,
        },
        Complete {
            worker: usize,
            cost: Option<(u64, u32)>,
        },
        Fail {
            worker: usize,
            kind: Class,
            sent: Option<bool>,
            cost: Option<(u64, u32)>,
        },
        Resolve,
        Advance(i64),
    }

    fn step() -> impl Strategy<Value = Step> {
        let cost = prop::option::of((0..5_000u64, 0..1_000u32));
        let kind = prop_oneof![
            Just(Class::Retryable),
            Just(Class::Permanent),
            Just(Class::Ambiguous)
        ];
        prop_oneof![
            3 => (0..3usize).prop_map(|worker| Step::Claim { worker }),
            2 => (0..3usize, cost.clone()).prop_map(|(worker, cost)| Step::Complete { worker, cost }),
            2 => (0..3usize, kind, prop::option::of(any::<bool>()), cost)
                .prop_map(|(worker, kind, sent, cost)| Step::Fail { worker, kind, sent, cost }),
            1 => Just(Step::Resolve),
            2 => prop_oneof![Just(1_000i64), Just(31_000), Just(3_600_000)].prop_map(Step::Advance),
        ]
    }

    fn to_cost(c: Option<(u64, u32)>) -> Option<crate::record::AttemptCost> {
        c.map(|(t, cents)| {
            crate::record::AttemptCost::new(Some(t), Some(f64::from(cents) / 100.0))
                .expect("valid cost")
        })
    }

    proptest! {
        /// Whatever happens to a record — refused reports, fenced zombies, retries, repeats —
        /// `record.cost` is the sum of the costs on its events, and the retry part never
        /// exceeds the whole.
        #[test]
        fn record_cost_is_the_sum_of_its_events_costs(steps in prop::collection::vec(step(), 1..40)) {
            let mut h = H::new();
            let mut tokens: Vec<String> = vec!["1.nope".into(); 3];
            for s in steps {
                match s {
                    Step::Claim { worker } => {
                        let c = h.claim();
                        if let Some(t) = c.token {
                            tokens[worker] = t.secret();
                        }
                    }
                    Step::Complete { worker, cost } => {
                        if h.rec.is_some() {
                            h.run(Op::Complete(CompleteRequest {
                                token: tokens[worker].clone(),
                                result: Some(result()),
                                external_ref: None,
                                cost: to_cost(cost),
                            }));
                        }
                    }
                    Step::Fail { worker, kind, sent, cost } => {
                        if h.rec.is_some() {
                            let mut f = fail_req(&tokens[worker], kind);
                            f.sent = sent;
                            f.cost = to_cost(cost);
                            h.run(Op::Fail(f));
                        }
                    }
                    Step::Resolve => {
                        if h.rec.is_some() {
                            let _ = h.resolve(ResolveAction::Retry);
                        }
                    }
                    Step::Advance(ms) => h.advance(ms),
                }
                if let Some(rec) = h.rec.as_ref() {
                    let on_events = h.events.iter().filter_map(|e| e.cost).fold(
                        (0u64, 0u64),
                        |a, c| (a.0 + c.tokens, a.1 + c.usd_nanos),
                    );
                    prop_assert_eq!(on_events, (rec.cost.tokens, rec.cost.usd_nanos));
                    prop_assert!(rec.cost.retry_tokens <= rec.cost.tokens);
                    prop_assert!(rec.cost.retry_usd_nanos <= rec.cost.usd_nanos);
                }
            }
        }
    }
}

// ------------------------------------------------------------------ effects

fn summary() -> crate::effect::RequestSummary {
    crate::effect::RequestSummary {
        method: "POST".into(),
        url: "https://api.example.com/v1/charges".into(),
        idempotency_header: Some("Idempotency-Key".into()),
    }
}

impl H {
    fn sent(&mut self, token: &str) -> Result<Record, OpError> {
        let t = self.run(Op::EffectSent(EffectSentRequest {
            token: token.into(),
            request: summary(),
        }));
        Self::record_reply(t)
    }

    fn report(
        &mut self,
        token: &str,
        verdict: crate::effect::Verdict,
        reconciled: Option<crate::effect::Reconciled>,
    ) -> Transition {
        self.run(Op::EffectReport(EffectReportRequest {
            token: token.into(),
            verdict,
            response: Some(json!({"status": 402, "body": {"e": 1}})),
            category: "http".into(),
            message: "the destination answered HTTP 402".into(),
            http_status: Some(402),
            sent: true,
            reconciled,
            cost: None,
            request: None,
        }))
    }

    fn kinds(&self) -> Vec<EventType> {
        self.events.iter().map(|e| e.kind).collect()
    }
}

fn reply_record(t: &Transition) -> Record {
    match &t.reply {
        Ok(Reply::Record(r)) => r.clone(),
        Ok(Reply::Fail(f)) => f.record.clone(),
        other => panic!("unexpected reply {other:?}"),
    }
}

#[test]
fn sent_records_the_request_under_the_lease_and_only_for_the_holder() {
    let mut h = H::new();
    let tok = h.acquire();
    let r = h.sent(&tok).expect("sent");
    assert_eq!(r.state, State::Processing);
    assert_eq!(r.request, Some(summary()));
    assert_eq!(h.kinds(), [EventType::Acquired, EventType::Sent]);
    // A made-up token is a lost lease; a reported holder may not send again.
    assert_eq!(h.sent("1.ffff"), Err(OpError::LeaseLost));
    h.report(&tok, crate::effect::Verdict::Performed, None)
        .reply
        .expect("report");
    assert!(matches!(
        h.sent(&tok),
        Err(OpError::InvalidTransition { .. })
    ));
    // The public record shows it.
    let shown = serde_json::to_value(h.rec().public()).expect("json");
    assert_eq!(
        shown["request"]["url"],
        "https://api.example.com/v1/charges"
    );
}

#[test]
fn each_verdict_lands_in_its_state() {
    use crate::effect::Verdict::*;
    for (verdict, state) in [
        (Performed, State::Completed),
        (Permanent, State::FailedPermanent),
        (
            Retryable {
                retry_after_ms: None,
            },
            State::FailedRetryable,
        ),
        (Ambiguous, State::NeedsReview),
    ] {
        let mut h = H::new();
        let tok = h.acquire();
        h.sent(&tok).expect("sent");
        let t = h.report(&tok, verdict, None);
        let r = reply_record(&t);
        assert_eq!(r.state, state, "{verdict:?}");
        // The response is the result of completed and failed_permanent only.
        let kept = matches!(state, State::Completed | State::FailedPermanent);
        assert_eq!(r.result.is_some(), kept, "{verdict:?}");
        assert_eq!(h.rec().result, r.result, "stored as answered");
        if state != State::Completed {
            assert_eq!(r.last_error.as_ref().and_then(|e| e.http_status), Some(402));
        }
        assert_eq!(t.alerts.len(), usize::from(state == State::NeedsReview));
    }
}

#[test]
fn retry_after_and_the_budget_are_those_of_fail() {
    let mut p = Policy::default();
    p.retry.max_attempts = 2;
    let mut h = H::with_policy(p);
    let tok = h.acquire();
    let t = h.report(
        &tok,
        crate::effect::Verdict::Retryable {
            retry_after_ms: Some(60_000),
        },
        None,
    );
    let r = reply_record(&t);
    assert_eq!(r.state, State::FailedRetryable);
    assert_eq!(
        r.not_before,
        Some(Timestamp(T0 + 60_000)),
        "never sooner than Retry-After"
    );
    h.now += 60_000;
    let tok = h.acquire();
    let t = h.report(
        &tok,
        crate::effect::Verdict::Retryable {
            retry_after_ms: None,
        },
        None,
    );
    assert_eq!(reply_record(&t).state, State::NeedsReview, "budget spent");
    assert_eq!(h.rec().review_reason, Some(ReviewReason::BudgetExhausted));
}

#[test]
fn a_lookup_is_recorded_in_the_same_step_as_the_outcome_it_led_to() {
    use crate::effect::{Reconciled, Verdict};
    for (verdict, found, state) in [
        (Verdict::Performed, Reconciled::Found, State::Completed),
        (
            Verdict::Retryable {
                retry_after_ms: None,
            },
            Reconciled::NotFound,
            State::FailedRetryable,
        ),
        (Verdict::Ambiguous, Reconciled::Unknown, State::NeedsReview),
    ] {
        let mut h = H::new();
        let tok = h.acquire();
        h.sent(&tok).expect("sent");
        let t = h.report(&tok, verdict, Some(found));
        assert_eq!(reply_record(&t).state, state);
        assert_eq!(t.events.len(), 2);
        assert_eq!(t.events[0].kind, EventType::Reconciled);
        assert_eq!(t.events[0].note.as_deref(), Some(found.as_str()));
        assert_eq!(
            h.kinds().last().copied(),
            Some(if state == State::Completed {
                EventType::Completed
            } else {
                EventType::Failed
            })
        );
    }
}

#[test]
fn an_effect_lease_that_expires_under_review_goes_to_a_person() {
    let mut h = H::new();
    let c = h.claim_with(ClaimRequest {
        lease_ms: Some(35_000),
        lease_expiry: Some(LeaseExpiry::Review),
        ..Default::default()
    });
    let tok = c.token.expect("token").secret();
    h.sent(&tok).expect("sent");
    h.now += 35_001;
    let c = h.claim();
    assert_eq!(c.outcome, ClaimOutcome::NeedsReview, "never a blind resend");
    assert_eq!(
        h.kinds(),
        [
            EventType::Acquired,
            EventType::Sent,
            EventType::MovedToReview
        ]
    );
}
