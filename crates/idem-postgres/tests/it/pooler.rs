//! Behind a transaction pooler: with `pooler=transaction` idem leaves nothing on a server
//! connection that the next transaction (another client's, another instance's) could find.
//! Through a real PgBouncer the contract suite and the server's tests run in `.ci/pgbouncer.sh`;
//! these tests check the mechanism on a direct connection, where it can be observed.

use idem_core::{CompleteRequest, TestClock, Timestamp};
use idem_postgres::{PgOptions, PgStore};
use idem_store::Store as _;

use crate::helpers::*;

async fn one_connection(url: &str) -> std::sync::Arc<PgStore> {
    let opts = PgOptions {
        max_connections: 1,
        ..PgOptions::default()
    };
    std::sync::Arc::new(PgStore::connect_with(url, opts).await.expect("connect"))
}

/// Every kind of call, on the one connection of `store`.
async fn exercise(store: std::sync::Arc<PgStore>, namespace: &str) {
    let clock = TestClock::new(T0);
    let l = ledger(store.clone(), &clock);
    let n = ns(namespace);
    for k in ["a", "b", "c"] {
        let c = l.claim(&n, &key(k), claim_req()).await.expect("claim");
        let token = c.token.expect("token").secret();
        l.complete(
            &n,
            &key(k),
            CompleteRequest {
                cost: None,
                token,
                result: Some(serde_json::json!({"k": k})),
                external_ref: None,
            },
        )
        .await
        .expect("complete");
        l.claim(&n, &key(k), claim_req()).await.expect("replay");
    }
    let _ = store.get(&n, &key("a")).await.expect("get");
    let _ = store.namespace(&n).await.expect("namespace");
    let later = Timestamp(T0.0 + 86_400_000);
    store.sweep_once(later, 10).await.expect("sweep");
    store.retention_once(later, 10).await.expect("retention");
    store.stats(later).await.expect("stats");
}

#[tokio::test]
async fn pooler_transaction_leaves_no_named_statement_on_the_server_connection() {
    let Some(db) = PgDb::create("pooler_transaction_leaves_no_named_statement") else {
        return;
    };
    let sep = if db.url().contains('?') { '&' } else { '?' };
    let pooled = one_connection(&format!("{}{sep}pooler=transaction", db.url())).await;
    exercise(pooled.clone(), "pooled").await;
    assert_eq!(
        pooled
            .named_statements_on_a_connection()
            .await
            .expect("count"),
        0
    );
    // The same calls connected directly do leave named statements (the check can fail).
    let direct = one_connection(&idem_testkit::pg::driver_url(db.url())).await;
    exercise(direct.clone(), "direct").await;
    assert!(
        direct
            .named_statements_on_a_connection()
            .await
            .expect("count")
            > 5
    );
}

#[tokio::test]
async fn an_unknown_pooler_mode_is_refused_at_start_with_the_choices() {
    let Some(db) = PgDb::create("an_unknown_pooler_mode_is_refused") else {
        return;
    };
    let url = format!(
        "{}?pooler=statement",
        idem_testkit::pg::driver_url(db.url())
    );
    let err = PgStore::connect(&url).await.expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("none, session, transaction"), "{msg}");
    assert!(!msg.contains("password"), "{msg}");
}
