//! Group commit: many concurrent writers share transactions, none loses its write or its
//! answer, and the single-writer rule holds across stores opened on one file.

use std::sync::Arc;

use idem_core::{ClaimOutcome, ClaimRequest, Key, Namespace, TestClock};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{Ledger, Store, StoreError};

use crate::helpers::{key, ns, TestLedger, T0};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_claims_are_all_acknowledged_and_survive_reopen() {
    let t = TestLedger::new();
    let n = ns("many");
    let mut tasks = Vec::new();
    for i in 0..200 {
        let ledger = t.ledger.clone();
        let n = n.clone();
        tasks.push(tokio::spawn(async move {
            ledger
                .claim(&n, &key(&format!("k{i}")), ClaimRequest::default())
                .await
        }));
    }
    for task in tasks {
        let reply = task.await.expect("join").expect("claim");
        assert_eq!(reply.outcome, ClaimOutcome::Acquired);
    }
    let t = t.reopen();
    for i in 0..200 {
        let got = t.store.get(&n, &key(&format!("k{i}"))).await.expect("get");
        assert!(got.is_some(), "k{i} lost after reopen");
    }
    let info = t.store.namespace(&n).await.expect("namespace");
    assert_eq!(info.counts.get(idem_core::State::Processing), 200);
}

/// Claims one key 64 times at once (the `i`th through `ledger(i)`) and counts the acquisitions;
/// every other answer must be in flight.
async fn claim_concurrently(n: &Namespace, k: &Key, ledger: impl Fn(usize) -> Ledger) -> usize {
    let mut tasks = Vec::new();
    for i in 0..64 {
        let (ledger, n, k) = (ledger(i), n.clone(), k.clone());
        tasks.push(tokio::spawn(async move {
            ledger.claim(&n, &k, ClaimRequest::default()).await
        }));
    }
    let mut acquired = 0;
    for task in tasks {
        match task.await.expect("join").expect("claim").outcome {
            ClaimOutcome::Acquired => acquired += 1,
            ClaimOutcome::InFlight => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    acquired
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_of_one_key_acquire_exactly_once() {
    let t = TestLedger::new();
    let (n, k) = (ns("one"), key("the-key"));
    let acquired = claim_concurrently(&n, &k, |_| t.ledger.clone()).await;
    assert_eq!(acquired, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_through_several_stores_on_one_file_acquire_exactly_once() {
    let dir = tempfile::tempdir().expect("dir");
    let path = crate::helpers::db_path(dir.path());
    let clock = TestClock::new(T0);
    let ledgers: Vec<Ledger> = (0..4)
        .map(|_| {
            let store = SqliteStore::open(&path).expect("open");
            Ledger::with_clock(Arc::new(store), Arc::new(clock.clone()))
        })
        .collect();
    let (n, k) = (ns("shared"), key("one-key"));
    let acquired = claim_concurrently(&n, &k, |i| ledgers[i % 4].clone()).await;
    assert_eq!(acquired, 1);
    // A duplicate's event is written after its answer, and a store's read waits only for the
    // events that store queued: read through every store first, as each instance's own reader
    // would, so the count below sees all of them.
    for ledger in &ledgers[..3] {
        ledger
            .store()
            .get(&n, &k)
            .await
            .expect("get")
            .expect("known");
    }
    let got = ledgers[3]
        .store()
        .get(&n, &k)
        .await
        .expect("get")
        .expect("known");
    assert_eq!(got.record.attempt, 1);
    // One acquisition, 63 recorded in-flight answers, from whichever store served them.
    assert_eq!(got.events.len(), 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_job_does_not_take_its_batch_down() {
    let t = TestLedger::new();
    let n = ns("mixed");
    t.claim(&n, &key("broken")).await;
    // Damage one row behind the store's back: reading it back must fail (Corrupt) while every
    // other claim in the same batches goes through.
    {
        let conn = rusqlite::Connection::open(t.path()).expect("raw");
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .expect("busy");
        conn.execute(
            "UPDATE records SET state = 'no-such-state' WHERE key = 'broken'",
            [],
        )
        .expect("damage");
    }
    let mut tasks = Vec::new();
    for i in 0..100 {
        let (ledger, n) = (t.ledger.clone(), n.clone());
        let k = if i % 10 == 0 {
            key("broken")
        } else {
            key(&format!("ok{i}"))
        };
        tasks.push(tokio::spawn(async move {
            (
                k.clone(),
                ledger.claim(&n, &k, ClaimRequest::default()).await,
            )
        }));
    }
    for task in tasks {
        let (k, reply) = task.await.expect("join");
        if k.as_str() == "broken" {
            assert!(
                matches!(
                    reply,
                    Err(idem_store::LedgerError::Store(StoreError::Corrupt(_)))
                ),
                "{reply:?}"
            );
        } else {
            assert_eq!(reply.expect("claim").outcome, ClaimOutcome::Acquired);
        }
    }
    for i in (0..100).filter(|i| i % 10 != 0) {
        let got = t.store.get(&n, &key(&format!("ok{i}"))).await.expect("get");
        assert!(got.is_some(), "ok{i} lost");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_transaction_per_write_mode_is_correct_too() {
    let t = TestLedger::with_options(SqliteOptions {
        max_batch: 1,
        ..SqliteOptions::default()
    });
    let n = ns("nobatch");
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (ledger, n) = (t.ledger.clone(), n.clone());
        tasks.push(tokio::spawn(async move {
            ledger
                .claim(&n, &key(&format!("k{}", i % 10)), ClaimRequest::default())
                .await
        }));
    }
    let mut acquired = 0;
    for task in tasks {
        if task.await.expect("join").expect("claim").outcome == ClaimOutcome::Acquired {
            acquired += 1;
        }
    }
    assert_eq!(acquired, 10);
}
