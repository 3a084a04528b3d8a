//! PostgreSQL stops mid-flight: calls fail fast with `Unavailable`, then recover by themselves.
//!
//! Runs a private cluster of the test kit (initdb + pg_ctl in a temp dir, on a free port) so
//! that stopping it never disturbs the shared server. Skipped when no PostgreSQL binaries are
//! installed.

use std::time::{Duration, Instant};

use idem_core::{ClaimOutcome, ClaimRequest, CompleteRequest, TestClock};
use idem_postgres::{PgOptions, PgStore};
use idem_store::{LedgerError, Store, StoreError};
use idem_testkit::cluster::Cluster;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outage_gives_unavailable_fast_and_recovers_without_restart() {
    if std::env::var("IDEM_TEST_PG").is_err() {
        eprintln!("skipping outage test: IDEM_TEST_PG is not set");
        return;
    }
    let Some(cluster) = Cluster::create() else {
        return;
    };
    let opts = PgOptions {
        max_connections: 4,
        connect_timeout: Duration::from_secs(1),
        pool_wait_timeout: Duration::from_secs(1),
        statement_timeout: Duration::from_secs(2),
        op_timeout: Duration::from_secs(3),
        ..PgOptions::default()
    };
    let store = std::sync::Arc::new(
        PgStore::connect_with(&cluster.admin_url(), opts)
            .await
            .expect("connect"),
    );
    let clock = TestClock::new(T0);
    let l = ledger(store.clone(), &clock);
    let n = ns("outage");
    let before = l
        .claim(&n, &key("before"), ClaimRequest::default())
        .await
        .expect("claim while up");
    assert_eq!(before.outcome, ClaimOutcome::Acquired);

    assert!(cluster.stop(), "stop the private cluster");

    for k in ["during-1", "during-2", "during-3"] {
        let started = Instant::now();
        let r = l.claim(&n, &key(k), ClaimRequest::default()).await;
        let took = started.elapsed();
        assert!(
            matches!(r, Err(LedgerError::Store(StoreError::Unavailable(_)))),
            "claim during outage: {r:?}"
        );
        assert!(took < Duration::from_secs(5), "answered in {took:?}");
    }
    let started = Instant::now();
    assert!(matches!(
        store.ping().await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.get(&n, &key("before")).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(started.elapsed() < Duration::from_secs(8));

    assert!(cluster.start(), "start the private cluster again");

    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        match l.claim(&n, &key("after"), ClaimRequest::default()).await {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no recovery within 30 s: {e}"),
        }
    };
    assert_eq!(after.outcome, ClaimOutcome::Acquired);
    // Work acknowledged before the outage is intact: its holder can still complete.
    l.complete(
        &n,
        &key("before"),
        CompleteRequest {
            cost: None,
            token: before.token.expect("token").secret(),
            result: None,
            external_ref: None,
        },
    )
    .await
    .expect("complete after recovery");
    // Nothing was written for the claims refused during the outage.
    assert!(store
        .get(&n, &key("during-1"))
        .await
        .expect("get")
        .is_none());
    store.ping().await.expect("ping after recovery");
}
