//! Worker writes after the fact: stale and made-up tokens are `lease_lost` and recorded, a
//! late completion by the newest holder is accepted, and refused bad input writes nothing.
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::sync::Arc;

use idem_core::{
    ClaimOutcome, ClaimRequest, Class, EventType, FailRequest, Op, OpError, ResolveAction, State,
};
use serde_json::json;

use super::{
    complete, count, fail, heartbeat, into_state, is_invalid, kinds, ok, prepare, refused, resolve,
    result_v, sweep_all,
};
use crate::contract::{key, Backend, H};

// ================================================================ tokens and late writes

pub async fn stale_token_writes_after_reclaim_are_lease_lost_and_recorded<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let old = h.acquire(&k).await;
    h.advance(30_000);
    let new = h.acquire(&k).await;
    let before = h.get(&k).await;
    for op in [
        prepare(&old, json!(1), false),
        heartbeat(&old, None),
        complete(&old, Some(json!("x")), None),
        fail(&old, Class::Retryable),
    ] {
        let name = op.name();
        let e = h.exec(&k, op, None).await;
        assert_eq!(e.reply.as_ref().err(), Some(&OpError::LeaseLost), "{name}");
        assert_eq!(e.events.len(), 1, "{name}: lease_lost is recorded");
        assert_eq!(e.events[0].kind, EventType::LeaseLost);
    }
    let after = h.get(&k).await;
    assert_eq!(after.record, before.record, "stale writes change nothing");
    assert_eq!(
        kinds(&after.events[before.events.len()..]),
        [EventType::LeaseLost; 4]
    );
    assert_eq!(after.events.last().map(|e| e.attempt), Some(2));
    // the newest holder is unaffected
    ok(&h, &k, complete(&new, Some(json!("y")), None)).await;
}

pub async fn made_up_tokens_are_lease_lost<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    h.acquire(&k).await;
    let before = h.rec(&k).await;
    for tok in [
        "nope".to_string(),
        format!("1.{}", "f".repeat(32)),
        format!("2.{}", "0".repeat(32)),
    ] {
        assert_eq!(
            refused(&h, &k, complete(&tok, None, None)).await,
            OpError::LeaseLost,
            "{tok}"
        );
    }
    assert_eq!(h.rec(&k).await, before);
    assert_eq!(count(&h.get(&k).await.events, EventType::LeaseLost), 3);
    // on an unknown key: not found, nothing created
    let unknown = key("unknown");
    assert_eq!(
        refused(&h, &unknown, complete("nope", None, None)).await,
        OpError::NotFound
    );
    assert!(h.store.get(&h.ns, &unknown).await.expect("get").is_none());
}

pub async fn late_completion_by_the_newest_holder_is_accepted<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("reclaim-ns");
    let tok = h.acquire(&k).await;
    h.advance(10 * 60_000);
    let rec = ok(&h, &k, complete(&tok, Some(json!("late")), None)).await;
    assert_eq!(rec.state, State::Completed);
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::Completed);

    // moved to needs_review by lease expiry (eagerly by the janitor, lazily by a claim)
    let r = H::on(h.store.clone(), "review-ns", h.clock.clone());
    r.patch(json!({"lease_expiry": "review"})).await;
    let eager = key("eager");
    let lazy = key("lazy");
    let tok_eager = r.acquire(&eager).await;
    let tok_lazy = r.acquire(&lazy).await;
    r.advance(30_000);
    sweep_all(&r.store, r.now()).await;
    assert_eq!(r.rec(&eager).await.state, State::NeedsReview);
    assert_eq!(r.rec(&lazy).await.state, State::NeedsReview);
    assert_eq!(r.claim(&lazy).await.outcome, ClaimOutcome::NeedsReview);
    r.advance(5_000);
    for (k, tok) in [(&eager, &tok_eager), (&lazy, &tok_lazy)] {
        let rec = ok(&r, k, complete(tok, Some(json!("done")), Some("ref-1"))).await;
        assert_eq!(rec.state, State::Completed);
        let events = r.get(k).await.events;
        let last = events.last().expect("event");
        assert_eq!(last.kind, EventType::Completed);
        assert_eq!(
            (last.from_state, last.to_state),
            (Some(State::NeedsReview), Some(State::Completed)),
            "recorded as a late completion out of review"
        );
        assert!(last.note.is_some(), "the late completion is noted");
    }
}

pub async fn writes_after_the_fact_follow_the_rules<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("done");
    let tok = h.acquire(&k).await;
    let done = ok(&h, &k, complete(&tok, Some(result_v()), Some("ch_1"))).await;
    let n = h.get(&k).await.events.len();
    // the same complete again (member order does not matter): 200, nothing written
    let again = ok(
        &h,
        &k,
        complete(
            &tok,
            Some(json!({"amount": 100, "charge": "ch_1"})),
            Some("ch_1"),
        ),
    )
    .await;
    assert_eq!(again, done);
    assert_eq!(h.get(&k).await.events.len(), n);
    assert_eq!(
        refused(
            &h,
            &k,
            complete(&tok, Some(json!({"charge": "ch_2"})), Some("ch_1"))
        )
        .await,
        OpError::ResultMismatch { field: "result" }
    );
    assert_eq!(
        refused(&h, &k, complete(&tok, Some(result_v()), Some("ch_2"))).await,
        OpError::ResultMismatch {
            field: "external_ref"
        }
    );
    assert!(is_invalid(
        &refused(&h, &k, fail(&tok, Class::Retryable)).await
    ));
    assert_eq!(h.rec(&k).await, done);

    // after the holder's fail, its further writes are invalid transitions
    let k = key("failed");
    let tok = h.acquire(&k).await;
    let failed = ok(&h, &k, fail(&tok, Class::Retryable)).await;
    for op in [
        complete(&tok, None, None),
        fail(&tok, Class::Permanent),
        heartbeat(&tok, None),
        prepare(&tok, json!(1), false),
    ] {
        let name = op.name();
        assert!(is_invalid(&refused(&h, &k, op).await), "{name}");
    }
    assert_eq!(h.rec(&k).await, failed);
    // resolve outside its states is an invalid transition too
    let k = key("running");
    h.acquire(&k).await;
    assert!(is_invalid(
        &refused(&h, &k, resolve(ResolveAction::Completed, "n")).await
    ));
    assert!(is_invalid(
        &refused(&h, &k, Op::Approve { note: None }).await
    ));
}

pub async fn refused_bad_input_writes_nothing<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    let tok = h.acquire(&k).await;
    let before = h.get(&k).await;
    let e = h
        .exec(
            &k,
            Op::Fail(FailRequest {
                cost: None,
                token: tok.clone(),
                kind: None,
                http_status: Some(302),
                retry_after_ms: None,
                sent: None,
                error: None,
            }),
            None,
        )
        .await;
    assert!(
        matches!(&e.reply, Err(OpError::InvalidField { field, .. }) if field == "http_status"),
        "{:?}",
        e.reply
    );
    assert!(e.events.is_empty());
    assert_eq!(e.alerts_queued, 0);
    let after = h.get(&k).await;
    assert_eq!(after.record, before.record);
    assert_eq!(after.events, before.events);
    // nothing was lost either: the holder can still report
    ok(&h, &k, complete(&tok, None, None)).await;
    // retention works in bounded batches
    h.patch(json!({"retention_ms": 0, "audit_retention_ms": 10_000}))
        .await;
    for i in 0..3 {
        into_state(
            &h,
            &key(&format!("d{i}")),
            State::Completed,
            ClaimRequest::default(),
        )
        .await;
    }
    let mut expired = 0;
    for _ in 0..10 {
        let r = h.store.retention_once(h.now(), 1).await.expect("retention");
        assert!(r.results_expired <= 1 && r.tombstones_deleted <= 1, "{r:?}");
        expired += r.results_expired;
    }
    assert_eq!(expired, 4, "k and d0..d2");
}
