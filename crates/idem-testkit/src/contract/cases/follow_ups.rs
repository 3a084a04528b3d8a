//! The follow-ups of an effect's or an action's claim (`ExecCtx::then_prepare`,
//! `ExecCtx::then_sent`): a claim that acquires saves the draft and records the request as
//! about to leave in its own atomic step, and its answer's events say exactly what was done,
//! so the caller sends what is left. Held on every path a store decides a claim by: a key the
//! handle has never seen, one it has, a later attempt (a record updated, not inserted), and
//! many handles racing for one key.
//!
//! Its cases only read and write the fresh database they are given.

use std::sync::Arc;

use idem_core::{
    ClaimOutcome, ClaimRequest, Class, EventType, Key, LeaseId, Op, Record, Reply, RequestSummary,
    State,
};
use idem_store::{ExecCtx, Executed, ThenPrepare};
use serde_json::{json, Value};

use super::{complete, fail, kinds, ok};
use crate::contract::{key, Backend, H};

fn request() -> RequestSummary {
    RequestSummary {
        method: "POST".into(),
        url: "https://api.example.com/v1/emails".into(),
        idempotency_header: Some("Idempotency-Key".into()),
    }
}

fn draft(text: &str, approval_required: bool) -> ThenPrepare {
    ThenPrepare {
        payload: json!({"to": "a@example.com", "text": text}),
        approval_required,
    }
}

/// A claim of `k` through `h`'s store with the given follow-ups.
async fn claim_then(
    h: &H,
    k: &Key,
    prepare: Option<ThenPrepare>,
    sent: Option<RequestSummary>,
) -> Executed {
    let ctx = ExecCtx {
        then_prepare: prepare,
        then_sent: sent,
        lease_id: LeaseId::random(),
        jitter: 0.5,
        ..ExecCtx::at(h.now())
    };
    h.store
        .execute(&h.ns, k, Op::Claim(ClaimRequest::default()), ctx)
        .await
        .unwrap_or_else(|e| panic!("claim of {k}: {e}"))
}

/// The claim answer's outcome, token and record.
fn answer(ex: &Executed) -> (ClaimOutcome, Option<String>, Record) {
    match &ex.reply {
        Ok(Reply::Claim(c)) => (
            c.outcome,
            c.token.as_ref().map(|t| t.secret()),
            c.record.clone().expect("a claim answers with its record"),
        ),
        other => panic!("a claim reply: {other:?}"),
    }
}

/// The answer and the store agree: the record answered is the record stored, and the
/// answer's events are the last ones of its history, with their sequence numbers.
async fn stored_as_answered(h: &H, k: &Key, ex: &Executed) -> Record {
    let (_, _, rec) = answer(ex);
    let got = h.get(k).await;
    assert_eq!(got.record, rec, "the record answered is the record stored");
    let tail = &got.events[got.events.len() - ex.events.len()..];
    assert_eq!(tail, ex.events.as_slice(), "the answer's events as stored");
    rec
}

pub async fn an_acquiring_claim_saves_its_draft_and_records_sent_in_its_step<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "agents").await;
    // The first claim meets a handle that knows nothing of the namespace, the second one a
    // handle that does (a store may take another path for each).
    for (i, name) in ["ord_1:send", "ord_2:send"].into_iter().enumerate() {
        let k = key(name);
        let ex = claim_then(&h, &k, Some(draft("hello", false)), Some(request())).await;
        assert_eq!(
            kinds(&ex.events),
            [EventType::Acquired, EventType::Prepared, EventType::Sent],
            "claim {i}"
        );
        let (outcome, token, rec) = answer(&ex);
        assert_eq!(outcome, ClaimOutcome::Acquired);
        assert_eq!(rec.state, State::Prepared);
        assert_eq!(rec.prepared_payload, Some(draft("hello", false).payload));
        assert_eq!(rec.request, Some(request()));
        assert_eq!(rec.version, 3, "one version per step");
        stored_as_answered(&h, &k, &ex).await;
        // The token still holds the record: the delivery's outcome lands under it.
        let token = token.expect("token");
        let done = ok(&h, &k, complete(&token, Some(json!({"id": i})), None)).await;
        assert_eq!(done.state, State::Completed);
        assert_eq!(
            kinds(&h.get(&k).await.events),
            [
                EventType::Acquired,
                EventType::Prepared,
                EventType::Sent,
                EventType::Completed
            ]
        );
        // A replay gets no follow-up: nothing but its duplicate hit.
        let again = claim_then(&h, &k, Some(draft("regenerated", false)), Some(request())).await;
        assert_eq!(kinds(&again.events), [EventType::DuplicateHit]);
        assert_eq!(
            answer(&again).2.prepared_payload,
            Some(draft("hello", false).payload)
        );
    }
    // An effect's claim: only `sent`.
    let k = key("evt_9:charge");
    let ex = claim_then(&h, &k, None, Some(request())).await;
    assert_eq!(kinds(&ex.events), [EventType::Acquired, EventType::Sent]);
    let rec = stored_as_answered(&h, &k, &ex).await;
    assert_eq!((rec.state, rec.version), (State::Processing, 2));
}

pub async fn a_draft_that_waits_for_approval_is_saved_and_nothing_is_recorded_as_sent<
    B: Backend,
>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "agents").await;
    h.acquire(&key("warm")).await;
    let k = key("ord_3:send");
    let ex = claim_then(&h, &k, Some(draft("hello", true)), Some(request())).await;
    assert_eq!(
        kinds(&ex.events),
        [EventType::Acquired, EventType::Prepared]
    );
    let rec = stored_as_answered(&h, &k, &ex).await;
    assert_eq!(rec.state, State::AwaitingApproval);
    assert_eq!(
        rec.request, None,
        "nothing is recorded as sent before approval"
    );
    // Approved: the delivering claim resumes the saved draft; a record that holds a draft gets
    // no follow-up (the caller delivers what was approved, never a regenerated draft).
    ok(&h, &k, Op::Approve { note: None }).await;
    let resumed = claim_then(&h, &k, Some(draft("regenerated", false)), Some(request())).await;
    assert_eq!(kinds(&resumed.events), [EventType::Resumed]);
    let rec = stored_as_answered(&h, &k, &resumed).await;
    assert_eq!(rec.prepared_payload, Some(draft("hello", true).payload));
    assert_eq!(rec.request, None);
}

pub async fn a_later_attempt_records_sent_in_its_step_or_leaves_it_to_the_caller<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "pay").await;
    let k = key("evt_7:charge");
    let first = claim_then(&h, &k, None, Some(request())).await;
    let token = answer(&first).1.expect("token");
    let failed = ok(&h, &k, fail(&token, Class::Retryable)).await;
    h.advance(60_000);
    // Through the handle that wrote the record, and through one that never saw it: either
    // may record `sent` with the acquisition or leave it to the caller, and says which.
    let other = H::on(b.open().await, "pay", h.clock.clone());
    let second = claim_then(&other, &k, None, Some(request())).await;
    let (outcome, token, rec) = answer(&second);
    assert_eq!(outcome, ClaimOutcome::Acquired);
    assert_eq!(rec.attempt, 2);
    let sent = kinds(&second.events);
    assert!(
        sent == [EventType::Resumed, EventType::Sent] || sent == [EventType::Resumed],
        "{sent:?}"
    );
    assert_eq!(rec.version, failed.version + sent.len() as i64);
    stored_as_answered(&other, &k, &second).await;
    let token = token.expect("token");
    if sent.len() == 1 {
        let step = ok(
            &other,
            &k,
            Op::EffectSent(idem_core::EffectSentRequest {
                token: token.clone(),
                request: request(),
            }),
        )
        .await;
        assert_eq!(step.request, Some(request()));
    }
    // The guard of the next write is the version stored: the report lands.
    let done = ok(&h, &k, complete(&token, None, None)).await;
    assert_eq!((done.state, done.attempt), (State::Completed, 2));
}

pub async fn racing_claims_with_follow_ups_save_one_draft_and_record_one_send<B: Backend>(
    b: Arc<B>,
) {
    let h = H::new(&*b, "agents").await;
    let k = key("ord_4:send");
    let mut tasks = Vec::new();
    for i in 0..20 {
        // Half on handles of their own (no cache), half on one shared handle.
        let hh = if i % 2 == 0 {
            H::on(b.open().await, "agents", h.clock.clone())
        } else {
            h.clone()
        };
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            let text = format!("draft {i}");
            claim_then(&hh, &k, Some(draft(&text, false)), Some(request())).await
        }));
    }
    let mut winners: Vec<Value> = Vec::new();
    for t in tasks {
        let ex = t.await.expect("task");
        let (outcome, _, rec) = answer(&ex);
        if outcome == ClaimOutcome::Acquired {
            assert_eq!(
                kinds(&ex.events),
                [EventType::Acquired, EventType::Prepared, EventType::Sent]
            );
            winners.push(rec.prepared_payload.expect("draft"));
        } else {
            assert_eq!(outcome, ClaimOutcome::InFlight);
            assert!(!kinds(&ex.events).contains(&EventType::Sent));
        }
    }
    assert_eq!(winners.len(), 1, "exactly one acquisition");
    let got = h.get(&k).await;
    assert_eq!(got.record.prepared_payload.as_ref(), winners.first());
    let order: Vec<EventType> = kinds(&got.events)
        .into_iter()
        .filter(|e| *e != EventType::InFlight)
        .collect();
    assert_eq!(
        order,
        [EventType::Acquired, EventType::Prepared, EventType::Sent],
        "one draft, one send, in the order they happened"
    );
}
