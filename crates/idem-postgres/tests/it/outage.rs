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

/// A database that refuses new connections (`ALLOW_CONNECTIONS false`, an operator's
/// maintenance switch; a dropped database or a role that may not log in fail the same way):
/// the server answers the connection attempt with an error of its own (SQLSTATE 55000 here),
/// which is the store being unavailable — nothing was sent — never an internal error.
#[tokio::test]
async fn a_database_that_refuses_connections_is_unavailable_then_recovers() {
    let Some(db) = idem_testkit::pg::PgDb::create("refuses_connections") else {
        return;
    };
    let admin = idem_testkit::pg::admin_url().expect("admin url");
    let admin = idem_testkit::pg::driver_url(&admin);
    let opts = PgOptions {
        max_connections: 2,
        connect_timeout: Duration::from_secs(2),
        pool_wait_timeout: Duration::from_secs(2),
        ..PgOptions::default()
    };
    let store = std::sync::Arc::new(
        PgStore::connect_with(db.url(), opts)
            .await
            .expect("connect"),
    );
    let clock = TestClock::new(T0);
    let l = ledger(store.clone(), &clock);
    let n = ns("refuses");
    l.claim(&n, &key("before"), ClaimRequest::default())
        .await
        .expect("claim while open");
    let name = db.name();
    idem_testkit::pg::admin(
        &admin,
        &format!(
            "ALTER DATABASE {name} ALLOW_CONNECTIONS false; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ),
    )
    .await
    .expect("close the database");
    let mut seen = vec![];
    for k in ["during-1", "during-2", "during-3"] {
        let r = l.claim(&n, &key(k), ClaimRequest::default()).await;
        match r {
            Err(LedgerError::Store(StoreError::Unavailable(m))) => seen.push(m),
            other => panic!("claim while the database refuses connections: {other:?}"),
        }
    }
    assert!(
        seen.iter().any(|m| m.contains("55000")),
        "the server's refusal is named: {seen:?}"
    );
    assert!(matches!(
        store.ping().await,
        Err(StoreError::Unavailable(_))
    ));
    idem_testkit::pg::admin(
        &admin,
        &format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"),
    )
    .await
    .expect("open the database");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match l.claim(&n, &key("after"), ClaimRequest::default()).await {
            Ok(c) => {
                assert_eq!(c.outcome, ClaimOutcome::Acquired);
                break;
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no recovery within 30 s: {e}"),
        }
    }
    assert!(store
        .get(&n, &key("during-1"))
        .await
        .expect("get")
        .is_none());
}
