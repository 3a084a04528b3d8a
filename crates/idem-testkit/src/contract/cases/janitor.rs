//! The janitor: expired leases under review and reclaim policies, stuck processing, and
//! retention (tombstones, deletion after the audit retention, what is never deleted).
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::sync::Arc;

use idem_core::{ClaimOutcome, ClaimRequest, EventType, State};
use serde_json::json;

use super::{
    complete, count, fp, heartbeat, into_state, kinds, ok, owned, prepare, result_v, retention_all,
    sweep_all, with_fp,
};
use crate::contract::{key, Backend, DAY_MS, H};

// ================================================================ lease expiry by the janitor

pub async fn sweep_moves_expired_processing_to_review_under_review_policy<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "money").await;
    h.patch(json!({"lease_expiry": "review", "alert_url": "http://127.0.0.1:9/hook"}))
        .await;
    let keys: Vec<_> = (0..3).map(|i| key(&format!("k{i}"))).collect();
    for k in &keys {
        h.claim_with(k, owned("exec", "corr")).await;
    }
    h.advance(29_999);
    let r = sweep_all(&h.store, h.now()).await;
    assert_eq!(r.moved_to_review, 0, "leases still valid");
    h.advance(1);
    // in batches: at most `batch` per step
    let mut moved = 0;
    for _ in 0..10 {
        let r = h.store.sweep_once(h.now(), 2).await.expect("sweep");
        assert!(r.moved_to_review <= 2, "{r:?}");
        moved += r.moved_to_review;
        if moved == 3 {
            break;
        }
    }
    assert_eq!(moved, 3);
    for k in &keys {
        let got = h.get(k).await;
        assert_eq!(got.record.state, State::NeedsReview);
        let last = got.events.last().expect("event");
        assert_eq!(last.kind, EventType::MovedToReview);
        assert_eq!(last.owner.as_deref(), Some("exec"));
        assert_eq!(last.correlation_id.as_deref(), Some("corr"));
        assert_eq!(last.attempt, 1);
    }
    let alerts = h
        .store
        .due_alerts(h.now(), 100, 60_000)
        .await
        .expect("due_alerts");
    assert_eq!(alerts.len(), 3);
    assert_eq!(sweep_all(&h.store, h.now()).await.moved_to_review, 0);
    // a claim answers needs_review without another move
    assert_eq!(h.claim(&keys[0]).await.outcome, ClaimOutcome::NeedsReview);
    assert_eq!(
        count(&h.get(&keys[0]).await.events, EventType::MovedToReview),
        1
    );
}

pub async fn sweep_leaves_reclaim_leases_for_the_next_claim<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    let k = key("k");
    h.acquire(&k).await;
    h.advance(60_000);
    let before = h.rec(&k).await;
    let r = sweep_all(&h.store, h.now()).await;
    assert_eq!(r.moved_to_review, 0);
    assert_eq!(h.rec(&k).await.state, State::Processing);
    assert_eq!(h.rec(&k).await.attempt, before.attempt);
    let c = h.claim(&k).await;
    assert_eq!(c.outcome, ClaimOutcome::Acquired);
    assert!(c.reclaimed);
}

pub async fn stuck_processing_alerts_once_and_moves_under_review<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "reclaim").await;
    h.patch(json!({"stuck_after_ms": 60_000, "alert_url": "http://127.0.0.1:9/a"}))
        .await;
    let long = ClaimRequest {
        lease_ms: Some(3_600_000),
        ..Default::default()
    };
    let k = key("slow");
    let tok = h
        .claim_with(&k, long.clone())
        .await
        .token
        .expect("token")
        .secret();
    let beating = key("beating");
    let tok_b = h
        .claim_with(&beating, long.clone())
        .await
        .token
        .expect("token")
        .secret();
    h.advance(30_000);
    ok(&h, &beating, heartbeat(&tok_b, Some(3_600_000))).await;
    h.advance(30_000);
    let r = sweep_all(&h.store, h.now()).await;
    assert_eq!(r.stuck_alerts, 1, "{r:?}");
    assert_eq!(r.moved_to_review, 0);
    assert_eq!(h.rec(&k).await.state, State::Processing);
    h.advance(10_000);
    assert_eq!(
        sweep_all(&h.store, h.now()).await.stuck_alerts,
        0,
        "alert once"
    );
    let alerts = h.store.due_alerts(h.now(), 100, 60_000).await.expect("due");
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].reason, "stuck");
    assert_eq!(alerts[0].key, "slow");
    assert_eq!(alerts[0].state, State::Processing);
    ok(&h, &k, complete(&tok, None, None)).await;

    let r2 = H::on(h.store.clone(), "review", h.clock.clone());
    r2.patch(json!({"stuck_after_ms": 60_000, "lease_expiry": "review"}))
        .await;
    let k2 = key("slow");
    r2.claim_with(&k2, long).await;
    r2.advance(60_000);
    let r = sweep_all(&r2.store, r2.now()).await;
    assert_eq!(r.moved_to_review, 1, "{r:?}");
    assert_eq!(r2.rec(&k2).await.state, State::NeedsReview);
    assert_eq!(h.rec(&beating).await.state, State::Processing);
}

// ================================================================ retention

pub async fn tombstone_answers_completed_with_result_expired<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"retention_ms": 60_000, "audit_retention_ms": 120_000}))
        .await;
    let payload = json!({"amount": 100});
    let done = key("done");
    let tok = h
        .claim_with(&done, with_fp(&payload))
        .await
        .token
        .expect("token")
        .secret();
    ok(
        &h,
        &done,
        prepare(&tok, json!({"body": "secret draft"}), false),
    )
    .await;
    ok(&h, &done, complete(&tok, Some(result_v()), Some("ch_1"))).await;
    let perm = key("perm");
    into_state(&h, &perm, State::FailedPermanent, ClaimRequest::default()).await;
    h.advance(59_999);
    assert_eq!(retention_all(&h.store, h.now()).await.results_expired, 0);
    assert!(!h.rec(&done).await.result_expired);
    h.advance(1);
    let r = retention_all(&h.store, h.now()).await;
    assert_eq!(r.results_expired, 2, "{r:?}");
    assert_eq!(r.tombstones_deleted, 0);
    let got = h.get(&done).await;
    let rec = &got.record;
    assert_eq!(rec.state, State::Completed);
    assert!(rec.result_expired);
    assert_eq!(rec.result, None);
    assert_eq!(rec.prepared_payload, None);
    assert_eq!(
        rec.external_ref.as_deref(),
        Some("ch_1"),
        "the tombstone keeps it"
    );
    assert_eq!(rec.fingerprint, Some(fp(&payload)));
    assert_eq!(
        count(&got.events, EventType::ResultExpired),
        1,
        "dropping the result is an event"
    );
    // The same words on every store.
    assert!(got
        .events
        .iter()
        .filter(|e| e.kind == EventType::ResultExpired)
        .all(|e| e.note.as_deref() == Some(idem_store::sql::RESULT_EXPIRED_NOTE)));
    assert!(h.rec(&perm).await.result_expired);
    // the tombstone answers completed and never lets the operation run again
    for _ in 0..2 {
        let c = h.claim_with(&done, with_fp(&payload)).await;
        assert_eq!(c.outcome, ClaimOutcome::Completed);
        let rec = c.record.expect("record");
        assert!(rec.result_expired);
        assert_eq!(rec.result, None);
    }
    assert_eq!(h.claim(&done).await.outcome, ClaimOutcome::Completed);
    assert_eq!(
        h.claim_with(&done, with_fp(&json!({"amount": 5})))
            .await
            .outcome,
        ClaimOutcome::Conflict
    );
    assert_eq!(h.claim(&perm).await.outcome, ClaimOutcome::FailedPermanent);
    // a second pass expires nothing new
    assert_eq!(retention_all(&h.store, h.now()).await.results_expired, 0);
}

pub async fn tombstone_and_events_are_deleted_after_audit_retention<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"retention_ms": 60_000, "audit_retention_ms": 120_000}))
        .await;
    let k = key("k");
    into_state(&h, &k, State::Completed, ClaimRequest::default()).await;
    let k2 = key("k2");
    into_state(&h, &k2, State::FailedPermanent, ClaimRequest::default()).await;
    h.advance(60_000);
    retention_all(&h.store, h.now()).await;
    h.advance(59_999);
    assert_eq!(retention_all(&h.store, h.now()).await.tombstones_deleted, 0);
    h.advance(1);
    let r = retention_all(&h.store, h.now()).await;
    assert_eq!(r.tombstones_deleted, 2, "{r:?}");
    assert!(h.store.get(&h.ns, &k).await.expect("get").is_none());
    assert!(h.store.get(&h.ns, &k2).await.expect("get").is_none());
    // the per-state counters of the gauges follow retention's deletes
    let s = h.store.stats(h.now()).await.expect("stats");
    assert_eq!(s.records.get(State::Completed), 0, "{s:?}");
    assert_eq!(s.records.get(State::FailedPermanent), 0, "{s:?}");
    // the key is forgotten: its old events do not come back with a new record
    assert_eq!(h.claim(&k).await.outcome, ClaimOutcome::Acquired);
    assert_eq!(kinds(&h.get(&k).await.events), [EventType::Acquired]);
}

pub async fn retention_never_deletes_processing_or_needs_review<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    h.patch(json!({"retention_ms": 0, "audit_retention_ms": 0}))
        .await;
    let mut kept = Vec::new();
    // Every state that is not final: processing, prepared, awaiting_approval,
    // failed_retryable and needs_review.
    for state in State::ALL.into_iter().filter(|s| !s.is_final()) {
        let k = key(&format!("k-{}", state.as_str()));
        into_state(&h, &k, state, ClaimRequest::default()).await;
        kept.push((k.clone(), h.get(&k).await));
    }
    let gone = key("completed");
    into_state(&h, &gone, State::Completed, ClaimRequest::default()).await;
    h.advance(1000 * DAY_MS);
    for _ in 0..3 {
        retention_all(&h.store, h.now()).await;
    }
    assert!(h.store.get(&h.ns, &gone).await.expect("get").is_none());
    for (k, before) in kept {
        let after = h.get(&k).await;
        assert_eq!(after.record, before.record, "{k}");
        assert_eq!(after.events, before.events, "{k}");
    }
}
