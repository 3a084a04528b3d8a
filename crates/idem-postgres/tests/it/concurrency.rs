//! Many stores (separate pools, separate connections) racing on the same keys.

use std::sync::Arc;

use idem_core::OpError;
use idem_core::{ClaimOutcome, ClaimRequest, CompleteRequest, TestClock};
use idem_store::{LedgerError, Store};

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_stores_claiming_one_key_acquire_exactly_once() {
    let Some(db) = PgDb::create("sixty_four_stores_claiming_one_key") else {
        return;
    };
    let _heavy = HEAVY.lock().await;
    let clock = TestClock::new(T0);
    let mut stores = Vec::new();
    for _ in 0..64 {
        stores.push(db.store_with(1).await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let mut tasks = Vec::new();
    for s in &stores {
        let l = ledger(s.clone(), &clock);
        let b = barrier.clone();
        tasks.push(tokio::spawn(async move {
            // Warm the connection so the race is on the claim, not on connecting.
            l.store().ping().await.expect("ping");
            b.wait().await;
            l.claim(&ns("hot"), &key("one-key"), ClaimRequest::default())
                .await
                .expect("claim")
                .outcome
        }));
    }
    let mut acquired = 0;
    for t in tasks {
        match t.await.expect("task") {
            ClaimOutcome::Acquired => acquired += 1,
            ClaimOutcome::InFlight => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(acquired, 1);
    let got = stores[0]
        .get(&ns("hot"), &key("one-key"))
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(got.record.attempt, 1);
    assert_eq!(got.events.len(), 64, "one acquired + 63 in_flight events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_claims_over_twenty_keys_acquire_once_per_key() {
    let Some(db) = PgDb::create("two_hundred_claims_over_twenty_keys") else {
        return;
    };
    let _heavy = HEAVY.lock().await;
    let clock = TestClock::new(T0);
    let mut stores = Vec::new();
    for _ in 0..10 {
        stores.push(db.store_with(3).await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(200));
    let mut tasks = Vec::new();
    for i in 0..200usize {
        let l = ledger(stores[i % stores.len()].clone(), &clock);
        let b = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let k = format!("key-{}", i % 20);
            b.wait().await;
            let c = l
                .claim(&ns("multi"), &key(&k), ClaimRequest::default())
                .await
                .expect("claim");
            (k, c.outcome, c.token.map(|t| t.secret()))
        }));
    }
    let mut winners = std::collections::HashMap::new();
    for t in tasks {
        let (k, outcome, token) = t.await.expect("task");
        match outcome {
            ClaimOutcome::Acquired => {
                assert!(
                    winners.insert(k.clone(), token).is_none(),
                    "{k} acquired twice"
                );
            }
            ClaimOutcome::InFlight => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(winners.len(), 20);
    // Completing through another instance works, and a claim then replays.
    let l = ledger(stores[3].clone(), &clock);
    for (k, token) in winners {
        l.complete(
            &ns("multi"),
            &key(&k),
            CompleteRequest {
                cost: None,
                token: token.expect("token"),
                result: None,
                external_ref: None,
            },
        )
        .await
        .expect("complete");
        let c = ledger(stores[7].clone(), &clock)
            .claim(&ns("multi"), &key(&k), ClaimRequest::default())
            .await
            .expect("claim");
        assert_eq!(c.outcome, ClaimOutcome::Completed);
    }
}

#[tokio::test]
async fn reclaim_on_one_store_fences_stale_token_on_another() {
    let Some(db) = PgDb::create("reclaim_fences_stale_token") else {
        return;
    };
    let clock = TestClock::new(T0);
    let a = ledger(db.store().await, &clock);
    let b = ledger(db.store().await, &clock);
    let (n, k) = (ns("fence"), key("job-1"));
    let first = claim_with_lease(&a, &n, &k, 1000).await;
    let stale = first.token.expect("token").secret();
    clock.advance_ms(1500);
    let second = b
        .claim(&n, &k, ClaimRequest::default())
        .await
        .expect("claim");
    assert_eq!(second.outcome, ClaimOutcome::Acquired);
    assert_eq!(second.resumed, Some(true));
    assert!(second.reclaimed);
    let fresh = second.token.expect("token").secret();

    let refused = a
        .complete(
            &n,
            &k,
            CompleteRequest {
                cost: None,
                token: stale,
                result: None,
                external_ref: None,
            },
        )
        .await;
    assert!(matches!(refused, Err(LedgerError::Op(OpError::LeaseLost))));
    let done = b
        .complete(
            &n,
            &k,
            CompleteRequest {
                cost: None,
                token: fresh,
                result: None,
                external_ref: None,
            },
        )
        .await
        .expect("complete");
    assert_eq!(done.attempt, 2);
}
