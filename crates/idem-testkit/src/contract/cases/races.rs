//! Races: concurrent claims, reclaims, first acquisitions under a daily limit, late
//! completions against reclaims, sweeps and alert senders; each must have exactly one winner.
//!
//! Its cases only read and write the fresh database they are given; they must never share
//! state with another case or depend on the order cases run in.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use idem_core::{ClaimOutcome, ClaimRequest, EventType, OpError, State, TestClock, Timestamp};
use serde_json::json;
use tokio::sync::Barrier;

use super::{complete, count, into_state};
use crate::contract::{key, Backend, H, T0};

// ================================================================ concurrency

async fn race(handles: &[H], k: &idem_core::Key, n: usize) -> BTreeMap<&'static str, usize> {
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let h = handles[i % handles.len()].clone();
        let k = k.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            h.ledger
                .claim(
                    &h.ns,
                    &k,
                    ClaimRequest {
                        owner: Some(format!("worker-{i}")),
                        ..Default::default()
                    },
                )
                .await
        }));
    }
    let mut outcomes = BTreeMap::new();
    for t in tasks {
        let reply = t
            .await
            .expect("task")
            .unwrap_or_else(|e| panic!("concurrent claim failed: {e}"));
        *outcomes.entry(reply.outcome.as_str()).or_insert(0) += 1;
    }
    outcomes
}

pub async fn concurrent_claims_from_tasks_yield_exactly_one_acquired<B: Backend>(b: Arc<B>) {
    let h = H::new(&*b, "ns").await;
    for round in 0..3 {
        let k = key(&format!("race-{round}"));
        let outcomes = race(std::slice::from_ref(&h), &k, 64).await;
        assert_eq!(
            outcomes,
            BTreeMap::from([("acquired", 1), ("in_flight", 63)]),
            "round {round}"
        );
        let got = h.get(&k).await;
        assert_eq!(got.record.attempt, 1);
        assert_eq!(count(&got.events, EventType::Acquired), 1);
        assert_eq!(count(&got.events, EventType::InFlight), 63);
    }
}

pub async fn concurrent_claims_from_separate_handles_yield_exactly_one_acquired<B: Backend>(
    b: Arc<B>,
) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..8 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    for round in 0..3 {
        let k = key(&format!("race-{round}"));
        let outcomes = race(&handles, &k, 64).await;
        assert_eq!(
            outcomes,
            BTreeMap::from([("acquired", 1), ("in_flight", 63)]),
            "round {round}"
        );
        let got = handles[round % 8].get(&k).await;
        assert_eq!(count(&got.events, EventType::Acquired), 1);
    }
}

pub async fn concurrent_reclaims_of_an_expired_lease_yield_one_acquisition<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    let k = key("k");
    handles[0].acquire(&k).await;
    clock.advance_ms(30_000);
    let outcomes = race(&handles, &k, 32).await;
    assert_eq!(
        outcomes,
        BTreeMap::from([("acquired", 1), ("in_flight", 31)])
    );
    let got = handles[1].get(&k).await;
    assert_eq!(got.record.attempt, 2);
    assert_eq!(count(&got.events, EventType::Resumed), 1);
}

pub async fn concurrent_first_acquisitions_never_exceed_the_daily_limit<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    handles[0].patch(json!({"daily_limit": 5})).await;
    let barrier = Arc::new(Barrier::new(32));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let h = handles[i % 4].clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            h.ledger
                .claim(&h.ns, &key(&format!("k{i}")), ClaimRequest::default())
                .await
        }));
    }
    let mut outcomes = BTreeMap::new();
    for t in tasks {
        let c = t.await.expect("task").expect("claim");
        *outcomes.entry(c.outcome.as_str()).or_insert(0) += 1;
    }
    assert_eq!(outcomes, BTreeMap::from([("acquired", 5), ("limited", 27)]));
    let info = handles[2]
        .store
        .namespace(&handles[2].ns)
        .await
        .expect("ns");
    assert_eq!(info.counts.get(State::Processing), 5);
}

/// Acquisitions made while no `daily_limit` was set count against one set later, also for
/// first-time claims racing from several handles: with 3 acquired and a ceiling of 5, exactly
/// 2 more of 32 racing claims acquire.
pub async fn racing_first_acquisitions_count_those_made_without_a_limit<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    for (i, h) in handles.iter().take(3).enumerate() {
        h.acquire(&key(&format!("early{i}"))).await;
    }
    handles[3].patch(json!({"daily_limit": 5})).await;
    let barrier = Arc::new(Barrier::new(32));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let h = handles[i % 4].clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            h.ledger
                .claim(&h.ns, &key(&format!("k{i}")), ClaimRequest::default())
                .await
        }));
    }
    let mut outcomes = BTreeMap::new();
    for t in tasks {
        let c = t.await.expect("task").expect("claim");
        *outcomes.entry(c.outcome.as_str()).or_insert(0) += 1;
    }
    assert_eq!(outcomes, BTreeMap::from([("acquired", 2), ("limited", 30)]));
    let h = &handles[1];
    let activity = h
        .store
        .namespace_activity(&h.ns, h.now())
        .await
        .expect("activity");
    assert_eq!(activity.acquired_today, 5);
    let info = h.store.namespace(&h.ns).await.expect("ns");
    assert_eq!(info.counts.get(State::Processing), 5);
}

// ================================================================ more races and refusals

pub async fn racing_late_completion_and_reclaim_never_both_win<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let a = H::on(b.open().await, "ns", clock.clone());
    let c = H::on(b.open().await, "ns", clock.clone());
    let mut wins = BTreeMap::new();
    for i in 0..20 {
        let k = key(&format!("k{i}"));
        let old = a.acquire(&k).await;
        clock.advance_ms(30_000);
        let barrier = Arc::new(Barrier::new(2));
        let (ka, kc, ba, bc) = (k.clone(), k.clone(), barrier.clone(), barrier);
        let (a2, c2) = (a.clone(), c.clone());
        let completer = tokio::spawn(async move {
            ba.wait().await;
            a2.exec(&ka, complete(&old, Some(json!(i)), None), None)
                .await
                .reply
        });
        let claimer = tokio::spawn(async move {
            bc.wait().await;
            c2.claim(&kc).await
        });
        let done = completer.await.expect("task");
        let claim = claimer.await.expect("task");
        let rec = a.rec(&k).await;
        match (&done, claim.outcome) {
            (Ok(_), ClaimOutcome::Completed) => {
                assert_eq!(rec.state, State::Completed);
                assert_eq!(rec.attempt, 1);
                *wins.entry("complete").or_insert(0) += 1;
            }
            (Err(OpError::LeaseLost), ClaimOutcome::Acquired) => {
                assert_eq!(rec.state, State::Processing);
                assert_eq!(rec.attempt, 2);
                *wins.entry("reclaim").or_insert(0) += 1;
            }
            other => panic!("{k}: both or neither won: {other:?}"),
        }
    }
    eprintln!("late completion vs reclaim: {wins:?}");
}

pub async fn concurrent_sweeps_move_each_record_once<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(H::on(b.open().await, "ns", clock.clone()));
    }
    handles[0]
        .patch(json!({"lease_expiry": "review", "alert_url": "http://127.0.0.1:9/a"}))
        .await;
    let keys: Vec<_> = (0..20).map(|i| key(&format!("k{i}"))).collect();
    for k in &keys {
        handles[0].acquire(k).await;
    }
    clock.advance_ms(30_000);
    let now = clock_now(&clock);
    let mut tasks = Vec::new();
    for h in &handles {
        let store = h.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut moved = 0;
            for _ in 0..20 {
                moved += store
                    .sweep_once(now, 3)
                    .await
                    .expect("sweep")
                    .moved_to_review;
            }
            moved
        }));
    }
    let mut moved = 0;
    for t in tasks {
        moved += t.await.expect("task");
    }
    assert_eq!(moved, 20, "every record moved exactly once");
    for k in &keys {
        let got = handles[1].get(k).await;
        assert_eq!(got.record.state, State::NeedsReview);
        assert_eq!(count(&got.events, EventType::MovedToReview), 1, "{k}");
    }
    let alerts = handles[2]
        .store
        .due_alerts(now, 100, 60_000)
        .await
        .expect("due");
    assert_eq!(alerts.len(), 20);
}

fn clock_now(clock: &TestClock) -> Timestamp {
    use idem_core::Clock;
    clock.now()
}

pub async fn concurrent_alert_senders_never_get_the_same_alert<B: Backend>(b: Arc<B>) {
    let clock = TestClock::new(Timestamp(T0));
    let h = H::on(b.open().await, "ns", clock.clone());
    h.patch(json!({"alert_url": "http://127.0.0.1:9/a"})).await;
    for i in 0..12 {
        into_state(
            &h,
            &key(&format!("k{i}")),
            State::NeedsReview,
            ClaimRequest::default(),
        )
        .await;
    }
    let now = h.now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let store = b.open().await;
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..6 {
                ids.extend(
                    store
                        .due_alerts(now, 2, 60_000)
                        .await
                        .expect("due")
                        .into_iter()
                        .map(|a| a.id),
                );
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let unique: HashSet<_> = all.iter().copied().collect();
    assert_eq!(
        unique.len(),
        all.len(),
        "an alert was handed out twice: {all:?}"
    );
    assert_eq!(unique.len(), 12);
}
