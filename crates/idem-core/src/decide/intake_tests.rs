//! The intake's record rules, every state × every intake op, with exact expectations.

use super::*;
use crate::decide::{apply, Op};
use crate::ids::{Key, LeaseId, Namespace};
use crate::policy::Policy;
use crate::record::{AlertReason, EventType, State};
use crate::time::Timestamp;

const T0: i64 = 1_782_122_400_000;

const RETRY: ForwardRetry = ForwardRetry {
    max_attempts: 3,
    base_ms: 1000,
    max_ms: 10_000,
    window_ms: 60_000,
};

/// One record driven through `apply` as a store would (writes applied, refusals ignored).
struct H {
    policy: Policy,
    now: i64,
    paused: bool,
    lease: u32,
    rec: Option<Record>,
}

impl H {
    fn new() -> H {
        H {
            policy: Policy::default(),
            now: T0,
            paused: false,
            lease: 0,
            rec: None,
        }
    }
    fn run(&mut self, op: Op) -> Transition {
        self.lease += 1;
        let ctx = Ctx {
            now: Timestamp(self.now),
            policy: &self.policy,
            paused: self.paused,
            daily_count: 0,
            new_lease_id: LeaseId::from_stored(format!("{:032x}", self.lease)),
            jitter: 0.5,
            actor: Some("operator:alice".into()),
        };
        let ns = Namespace::try_from("pay").expect("ns");
        let key = Key::try_from("evt_1").expect("key");
        let mut t = apply(&ns, &key, self.rec.as_ref(), &op, &ctx);
        t.reply = t.reply_resolved();
        match &t.write {
            Write::Insert(r) | Write::Update(r) => self.rec = Some((**r).clone()),
            Write::None => {}
        }
        t
    }
    fn receive(&mut self, id: Option<&str>) -> Transition {
        self.run(Op::IntakeReceive(IntakeReceiveRequest {
            source: "stripe".into(),
            event_id: id.map(str::to_owned),
            delivers: true,
            destination: None,
            collides_with: None,
        }))
    }
    fn start(&mut self) -> Transition {
        self.run(Op::ForwardStart(ForwardStartRequest {
            lease_ms: 15_000,
            expect: None,
        }))
    }
    fn token(&mut self) -> String {
        match self.start().reply {
            Ok(Reply::Intake(IntakeReply::Started { token, .. })) => token,
            other => panic!("not started: {other:?}"),
        }
    }
    fn report(&mut self, token: String, outcome: ForwardOutcome) -> Transition {
        self.run(Op::ForwardReport(ForwardReportRequest {
            token,
            outcome,
            retry: RETRY,
        }))
    }
    fn state(&self) -> State {
        self.rec.as_ref().expect("record").state
    }
}

fn ok() -> ForwardOutcome {
    ForwardOutcome::Delivered {
        status: 204,
        duration_ms: 12,
    }
}

fn failed(status: Option<u16>, retry_after_ms: Option<i64>) -> ForwardOutcome {
    ForwardOutcome::Failed {
        status,
        category: if status.is_some() { "http" } else { "timeout" }.into(),
        message: "the receiver answered\nbadly".into(),
        retry_after_ms,
        duration_ms: 5,
    }
}

fn kinds(t: &Transition) -> Vec<EventType> {
    t.events.iter().map(|e| e.kind).collect()
}

#[test]
fn a_new_event_is_prepared_unleased_and_a_repeat_is_a_duplicate_hit() {
    let mut h = H::new();
    let t = h.receive(Some("evt_1"));
    assert!(matches!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Accepted { .. }))
    ));
    assert!(matches!(t.write, Write::Insert(_)));
    assert_eq!(kinds(&t), [EventType::Prepared]);
    assert!(!t.first_acquisition);
    let r = h.rec.clone().expect("record");
    assert_eq!(
        (r.state, r.attempt, r.lease_expires_at),
        (State::Prepared, 0, None)
    );
    assert_eq!(
        r.prepared_payload,
        Some(json!({"source": "stripe", "event_id": "evt_1"}))
    );
    for state_maker in [0, 1, 2] {
        let mut h = H::new();
        h.receive(Some("evt_1"));
        match state_maker {
            1 => {
                let tok = h.token();
                h.report(tok, ok());
            }
            2 => {
                let tok = h.token();
                h.report(tok, failed(Some(410), None));
            }
            _ => {}
        }
        let before = h.rec.clone();
        let t = h.receive(Some("evt_1"));
        assert!(matches!(
            t.reply,
            Ok(Reply::Intake(IntakeReply::Duplicate { .. }))
        ));
        assert!(
            matches!(t.write, Write::None),
            "a duplicate changes nothing"
        );
        assert_eq!(kinds(&t), [EventType::DuplicateHit]);
        assert_eq!(h.rec, before);
    }
}

#[test]
fn an_event_without_an_id_is_held_in_review_with_its_alert() {
    let mut h = H::new();
    let t = h.receive(None);
    assert!(matches!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Held { .. }))
    ));
    assert_eq!(h.state(), State::NeedsReview);
    assert_eq!(kinds(&t), [EventType::Prepared, EventType::MovedToReview]);
    assert_eq!(t.alerts.len(), 1);
    assert_eq!(t.alerts[0].reason, AlertReason::MissingIdentity);
    assert_eq!(
        t.alerts[0].error_category.as_deref(),
        Some("missing_identity")
    );
    // Not delivered until an operator redelivers it.
    assert!(matches!(
        h.start().reply,
        Ok(Reply::Intake(IntakeReply::Skip { .. }))
    ));
    let t = h.run(Op::Redeliver {
        note: "looked at it".into(),
    });
    assert_eq!(h.state(), State::Prepared);
    assert_eq!(t.events[0].actor.as_deref(), Some("operator:alice"));
    assert_eq!(t.events[0].note.as_deref(), Some("looked at it"));
    assert!(matches!(
        h.start().reply,
        Ok(Reply::Intake(IntakeReply::Started { attempt: 1, .. }))
    ));
}

#[test]
fn a_start_takes_the_lease_and_a_second_start_waits_for_it() {
    let mut h = H::new();
    h.receive(Some("evt_1"));
    let t = h.start();
    assert_eq!(kinds(&t), [EventType::Acquired]);
    let r = h.rec.clone().expect("record");
    assert_eq!(r.attempt, 1);
    assert_eq!(r.lease_expires_at, Some(Timestamp(T0 + 15_000)));
    assert_eq!(r.owner.as_deref(), Some(FORWARD_OWNER));
    // Another instance's (or a stale) item: waits until the lease runs out, writes nothing.
    let t = h.start();
    assert!(matches!(t.write, Write::None));
    assert_eq!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Wait {
            until: Timestamp(T0 + 15_000)
        }))
    );
    // A crash: after the lease a new attempt starts (a resume), the old token is fenced.
    let old = match h.rec.as_ref().and_then(|r| r.lease_id.clone()) {
        Some(l) => crate::ids::Token::new(1, l).secret(),
        None => panic!("leased"),
    };
    h.now += 15_000;
    let t = h.start();
    assert_eq!(kinds(&t), [EventType::Resumed]);
    assert_eq!(h.rec.as_ref().map(|r| r.attempt), Some(2));
    assert_eq!(h.report(old, ok()).reply, Err(OpError::LeaseLost));
}

#[test]
fn a_paused_namespace_holds_the_delivery() {
    let mut h = H::new();
    h.receive(Some("evt_1"));
    h.paused = true;
    let t = h.start();
    assert!(matches!(t.write, Write::None));
    assert_eq!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Wait {
            until: Timestamp(T0 + PAUSED_RECHECK_MS)
        }))
    );
    h.paused = false;
    assert!(matches!(
        h.start().reply,
        Ok(Reply::Intake(IntakeReply::Started { .. }))
    ));
}

#[test]
fn a_2xx_completes_with_the_attempt_result() {
    let mut h = H::new();
    h.receive(Some("evt_1"));
    let tok = h.token();
    let t = h.report(tok.clone(), ok());
    assert_eq!(h.state(), State::Completed);
    assert_eq!(kinds(&t), [EventType::Completed]);
    let r = h.rec.clone().expect("record");
    assert_eq!(
        r.result,
        Some(json!({"status": 204, "attempt": 1, "duration_ms": 12}))
    );
    assert_eq!(r.final_at, Some(Timestamp(T0)));
    assert_eq!(r.lease_expires_at, None);
    // Reporting twice is refused; a start finds nothing to do.
    assert_eq!(h.report(tok, ok()).reply, Err(OpError::LeaseLost));
    assert!(matches!(
        h.start().reply,
        Ok(Reply::Intake(IntakeReply::Skip {
            state: State::Completed
        }))
    ));
}

#[test]
fn a_failure_backs_off_with_jitter_and_retry_after_is_a_floor() {
    let mut h = H::new();
    h.receive(Some("evt_1"));
    let tok = h.token();
    let t = h.report(tok, failed(Some(500), None));
    assert_eq!(h.state(), State::FailedRetryable);
    assert_eq!(kinds(&t), [EventType::Failed]);
    let r = h.rec.clone().expect("record");
    // Attempt 1 of the budget: ceiling 1000 ms, jitter 0.5.
    assert_eq!(r.not_before, Some(Timestamp(T0 + 500)));
    let e = r.last_error.expect("error");
    assert_eq!((e.category.as_str(), e.http_status), ("http", Some(500)));
    assert_eq!(e.message, "the receiver answered badly", "sanitized");
    // Before not_before a start waits; after it the next attempt starts.
    assert_eq!(
        h.start().reply,
        Ok(Reply::Intake(IntakeReply::Wait {
            until: Timestamp(T0 + 500)
        }))
    );
    h.now += 500;
    let tok = h.token();
    h.report(tok, failed(Some(503), Some(30_000)));
    assert_eq!(
        h.rec.as_ref().and_then(|r| r.not_before),
        Some(Timestamp(T0 + 500 + 30_000)),
        "Retry-After beats the 1000 ms backoff"
    );
}

#[test]
fn a_410_goes_to_review_at_once_and_exhaustion_after_the_budget() {
    let mut h = H::new();
    h.receive(Some("evt_1"));
    let tok = h.token();
    let t = h.report(tok, failed(Some(410), None));
    assert_eq!(h.state(), State::NeedsReview);
    assert_eq!(kinds(&t), [EventType::Failed, EventType::MovedToReview]);
    assert_eq!(t.alerts[0].reason, AlertReason::DeliveryGone);

    let mut h = H::new();
    h.receive(Some("evt_1"));
    for n in 1..=3 {
        let tok = h.token();
        let t = h.report(tok, failed(None, None));
        if n < 3 {
            assert_eq!(h.state(), State::FailedRetryable, "attempt {n}");
            h.now += 10_000;
        } else {
            assert_eq!(h.state(), State::NeedsReview);
            assert_eq!(t.alerts[0].reason, AlertReason::DeliveryExhausted);
            assert_eq!(t.alerts[0].error_category.as_deref(), Some("timeout"));
        }
    }
    // A redeliver gives a fresh budget; attempt numbers keep counting.
    h.run(Op::Redeliver {
        note: "fixed".into(),
    });
    let t = h.start();
    assert!(matches!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Started { attempt: 4, .. }))
    ));
    let tok = match t.reply {
        Ok(Reply::Intake(IntakeReply::Started { token, .. })) => token,
        _ => unreachable!(),
    };
    h.report(tok, failed(Some(500), None));
    assert_eq!(
        h.state(),
        State::FailedRetryable,
        "attempt 1 of the new budget"
    );
}

#[test]
fn the_retry_window_ends_the_budget() {
    let mut h = H::new();
    h.receive(Some("evt_1"));
    h.now += 59_900;
    let tok = h.token();
    // Next try would start after window_start + 60 s.
    h.report(tok, failed(Some(500), None));
    assert_eq!(h.state(), State::NeedsReview);
}

#[test]
fn redeliver_is_refused_while_in_flight_and_from_no_record() {
    let mut h = H::new();
    assert_eq!(
        h.run(Op::Redeliver { note: "x".into() }).reply,
        Err(OpError::NotFound)
    );
    assert_eq!(h.start().reply, Err(OpError::NotFound));
    h.receive(Some("evt_1"));
    // Waiting for its first delivery: scheduled already, nothing written.
    let refused = |h: &mut H, why: &str| {
        let t = h.run(Op::Redeliver { note: "x".into() });
        match &t.reply {
            Err(OpError::InvalidTransition { from, message }) => {
                assert_eq!(*from, State::Prepared);
                assert!(message.contains(why), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(t.write, Write::None));
    };
    refused(&mut h, "scheduled and has not started");
    let tok = h.token();
    refused(&mut h, "in flight");
    h.report(tok, ok());
    // From completed: an explicit replay.
    let t = h.run(Op::Redeliver {
        note: "replay".into(),
    });
    assert_eq!(kinds(&t), [EventType::Resolved]);
    assert_eq!(h.state(), State::Prepared);
    assert_eq!(h.rec.as_ref().and_then(|r| r.final_at), None);
    // The replay is scheduled: a second redeliver before it starts is refused.
    refused(&mut h, "scheduled and has not started");
    // A lost lease leaves the delivery scheduled (its item is tried again): refused too.
    let _lost = h.token();
    h.now += 3_600_000;
    refused(&mut h, "scheduled and has not started");
}

#[test]
fn an_event_delivered_only_by_named_destinations_completes_at_once() {
    let mut h = H::new();
    let t = h.run(Op::IntakeReceive(IntakeReceiveRequest {
        source: "stripe".into(),
        event_id: Some("evt_1".into()),
        delivers: false,
        destination: None,
        collides_with: None,
    }));
    assert!(matches!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Accepted { .. }))
    ));
    assert_eq!(h.state(), State::Completed);
    assert_eq!(kinds(&t), [EventType::Prepared, EventType::Completed]);
    let rec = h.rec.clone().expect("record");
    assert_eq!(rec.result, Some(serde_json::json!({"fan_out": true})));
    assert!(rec.final_at.is_some());
    // Nothing to send under its own key: a start skips it.
    assert!(matches!(
        h.start().reply,
        Ok(Reply::Intake(IntakeReply::Skip { .. }))
    ));
    // A held event stays held whatever its destinations.
    let mut h = H::new();
    h.run(Op::IntakeReceive(IntakeReceiveRequest {
        source: "stripe".into(),
        event_id: None,
        delivers: false,
        destination: None,
        collides_with: None,
    }));
    assert_eq!(h.state(), State::NeedsReview);
}

fn receive_as(
    h: &mut H,
    source: &str,
    id: Option<&str>,
    destination: Option<&str>,
    collides_with: Option<&str>,
) -> Transition {
    h.run(Op::IntakeReceive(IntakeReceiveRequest {
        source: source.into(),
        event_id: id.map(str::to_owned),
        delivers: true,
        destination: destination.map(str::to_owned),
        collides_with: collides_with.map(str::to_owned),
    }))
}

#[test]
fn a_key_taken_by_anything_but_this_event_is_a_collision_never_a_duplicate() {
    // The delivery of event `y` to `crm` holds the key `y:crm`; event `y:crm` arrives.
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("y"), Some("crm"), None);
    let before = h.rec.clone();
    let t = receive_as(&mut h, "stripe", Some("y:crm"), None, None);
    assert!(
        matches!(&t.reply, Ok(Reply::Intake(IntakeReply::Collision { record })) if Some(&**record) == before.as_ref()),
        "{:?}",
        t.reply
    );
    assert_eq!(t.write, Write::None);
    assert!(t.events.is_empty() && t.alerts.is_empty());
    // A delivery record made before its payload named the destination is no event either.
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("y"), None, None);
    if let Some(r) = h.rec.as_mut() {
        r.prepared_payload = Some(serde_json::json!({"source": "stripe", "event_id": "y"}));
    }
    assert!(matches!(
        receive_as(&mut h, "stripe", Some("y:crm"), None, None).reply,
        Ok(Reply::Intake(IntakeReply::Collision { .. }))
    ));
    // Another source's event with the same id (two sources sharing a namespace).
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("evt_1"), None, None);
    assert!(matches!(
        receive_as(&mut h, "billing", Some("evt_1"), None, None).reply,
        Ok(Reply::Intake(IntakeReply::Collision { .. }))
    ));
    // The same event again is the duplicate it always was (and so is a held one's).
    let t = receive_as(&mut h, "stripe", Some("evt_1"), None, None);
    assert!(matches!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Duplicate { .. }))
    ));
    assert_eq!(kinds(&t), [EventType::DuplicateHit]);
    let mut h = H::new();
    receive_as(&mut h, "stripe", None, None, None);
    assert!(matches!(
        receive_as(&mut h, "stripe", None, None, None).reply,
        Ok(Reply::Intake(IntakeReply::Duplicate { .. }))
    ));
    // A plain claim's record (no payload) is not an event.
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("z"), None, None);
    if let Some(r) = h.rec.as_mut() {
        r.prepared_payload = None;
    }
    assert!(matches!(
        receive_as(&mut h, "stripe", Some("z"), None, None).reply,
        Ok(Reply::Intake(IntakeReply::Collision { .. }))
    ));
}

#[test]
fn an_event_held_on_a_collision_waits_in_review_with_its_reason() {
    let mut h = H::new();
    let t = receive_as(&mut h, "stripe", Some("y:crm"), None, Some("y:crm"));
    assert!(matches!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Held { .. }))
    ));
    assert_eq!(h.state(), State::NeedsReview);
    assert_eq!(kinds(&t), [EventType::Prepared, EventType::MovedToReview]);
    let rec = h.rec.clone().expect("record");
    let err = rec.last_error.clone().expect("last_error");
    assert_eq!(err.category, "key_collision");
    assert_eq!(
        rec.prepared_payload,
        Some(
            serde_json::json!({"source": "stripe", "event_id": "y:crm", "collides_with": "y:crm"})
        )
    );
    assert_eq!(
        t.alerts.iter().map(|a| a.reason).collect::<Vec<_>>(),
        [AlertReason::KeyCollision]
    );
    // Not delivered until an operator redelivers it.
    assert!(matches!(
        h.start().reply,
        Ok(Reply::Intake(IntakeReply::Skip { .. }))
    ));
    // Its redelivery by the provider is a duplicate of the held record.
    assert!(matches!(
        receive_as(&mut h, "stripe", Some("y:crm"), None, Some("y:crm")).reply,
        Ok(Reply::Intake(IntakeReply::Duplicate { .. }))
    ));
    // The same for a delivery held because its key is taken.
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("x"), Some("crm"), Some("x:crm"));
    assert_eq!(h.state(), State::NeedsReview);
    assert!(matches!(
        receive_as(&mut h, "stripe", Some("x"), Some("crm"), Some("x:crm")).reply,
        Ok(Reply::Intake(IntakeReply::Duplicate { .. }))
    ));
}

#[test]
fn a_start_for_a_delivery_leaves_any_other_record_alone() {
    let expect = |id: &str, dest: &str| {
        Op::ForwardStart(ForwardStartRequest {
            lease_ms: 15_000,
            expect: Some(DeliveryOf {
                source: "stripe".into(),
                event_id: Some(id.into()),
                destination: dest.into(),
            }),
        })
    };
    let started =
        |t: &Transition| matches!(t.reply, Ok(Reply::Intake(IntakeReply::Started { .. })));
    // Event `x:crm` holds the key that event `x`'s delivery to `crm` would use.
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("x:crm"), None, None);
    let t = h.run(expect("x", "crm"));
    assert!(matches!(
        t.reply,
        Ok(Reply::Intake(IntakeReply::Collision { .. }))
    ));
    assert_eq!(t.write, Write::None);
    assert_eq!(h.rec.as_ref().map(|r| r.attempt), Some(0));
    // A completed foreign record never passes for a delivered one either.
    let mut h = H::new();
    h.run(Op::IntakeReceive(IntakeReceiveRequest {
        source: "stripe".into(),
        event_id: Some("x:crm".into()),
        delivers: false,
        destination: None,
        collides_with: None,
    }));
    assert!(matches!(
        h.run(expect("x", "crm")).reply,
        Ok(Reply::Intake(IntakeReply::Collision { .. }))
    ));
    // Another destination's delivery, or one held on a collision, is not this one.
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("x"), Some("email"), None);
    assert!(!started(&h.run(expect("x", "crm"))));
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("x"), Some("crm"), Some("x:crm"));
    assert!(matches!(
        h.run(expect("x", "crm")).reply,
        Ok(Reply::Intake(IntakeReply::Collision { .. }))
    ));
    // The delivery itself starts, and so does one made before payloads named destinations.
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("x"), Some("crm"), None);
    assert!(started(&h.run(expect("x", "crm"))));
    let mut h = H::new();
    receive_as(&mut h, "stripe", Some("x"), None, None);
    assert!(started(&h.run(expect("x", "crm"))));
}
