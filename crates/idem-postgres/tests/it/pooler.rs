//! Behind a transaction pooler: with `pooler=transaction` idem leaves nothing on a server
//! connection that the next transaction (another client's, another instance's) could find,
//! and its repeated statements keep their plans in server-side functions all the same.
//! Through a real PgBouncer the contract suite and the server's tests run in `.ci/pgbouncer.sh`;
//! these tests check the mechanism on a direct connection, where it can be observed. A pooler
//! that carries named statements itself (PgBouncer >= 1.21) is found at start and then gets
//! named statements; `.ci/pgbouncer.sh` runs the suites through such a PgBouncer too.

use idem_core::{CompleteRequest, TestClock, Timestamp};
use idem_postgres::{PgOptions, PgStore};
use idem_store::Store as _;

use crate::helpers::*;

async fn one_connection(url: &str) -> std::sync::Arc<PgStore> {
    connections(url, 1).await
}

async fn connections(url: &str, n: usize) -> std::sync::Arc<PgStore> {
    let opts = PgOptions {
        max_connections: n,
        ..PgOptions::default()
    };
    std::sync::Arc::new(PgStore::connect_with(url, opts).await.expect("connect"))
}

fn pooled_url(db: &PgDb) -> String {
    let sep = if db.url().contains('?') { '&' } else { '?' };
    format!("{}{sep}pooler=transaction", db.url())
}

/// `n` first-time pairs and their replays under `prefix`, each replay checked against the
/// result its completion stored.
async fn pairs(store: std::sync::Arc<PgStore>, namespace: &str, prefix: &str, n: usize) {
    let clock = TestClock::new(T0);
    let l = ledger(store, &clock);
    let ns_ = ns(namespace);
    for i in 0..n {
        let k = key(&format!("{prefix}-{i}"));
        let c = l.claim(&ns_, &k, claim_req()).await.expect("claim");
        let token = c.token.expect("a first claim acquires").secret();
        l.complete(
            &ns_,
            &k,
            CompleteRequest {
                cost: None,
                token,
                result: Some(serde_json::json!({"i": i})),
                external_ref: None,
            },
        )
        .await
        .expect("complete");
        let again = l.claim(&ns_, &k, claim_req()).await.expect("replay");
        assert!(again.token.is_none(), "a duplicate acquires nothing");
        assert_eq!(
            again.record.and_then(|r| r.result),
            Some(serde_json::json!({"i": i})),
            "the replay answers the stored result"
        );
    }
}

/// Polls until `store` sends at least `n` statements as function calls.
async fn wrapped_at_least(store: &PgStore, n: usize) -> usize {
    for _ in 0..100 {
        let got = store.wrapped_statements();
        if got >= n {
            return got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    store.wrapped_statements()
}

/// One number read by the simple protocol (nothing prepared: this also runs through PgBouncer
/// in transaction mode, `.ci/pgbouncer.sh`).
async fn number(client: &tokio_postgres::Client, sql: &str) -> i64 {
    let rows = client.simple_query(sql).await.expect("query");
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse().ok()),
            _ => None,
        })
        .expect("one number")
}

/// Polls until no function is being made: the store's wrapped statements equal the functions
/// in the database, unchanged over three polls. Returns that number.
async fn settled(store: &PgStore, admin: &tokio_postgres::Client) -> usize {
    let mut last = (usize::MAX, -1_i64);
    let mut same = 0;
    for _ in 0..200 {
        let now = (store.wrapped_statements(), wrapper_functions(admin).await);
        if now == last && now.0 as i64 == now.1 {
            same += 1;
            if same == 3 {
                return now.0;
            }
        } else {
            same = 0;
        }
        last = now;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the statement functions did not settle: {last:?}");
}

async fn wrapper_functions(client: &tokio_postgres::Client) -> i64 {
    number(
        client,
        "SELECT count(*) FROM pg_proc WHERE proname LIKE 'idem\\_q\\_%'",
    )
    .await
}

/// Whether the test database is reached through a pooler (`IDEM_TEST_PG` with `pooler=…`).
fn through_a_pooler(db: &PgDb) -> bool {
    db.url().contains("pooler=")
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
    // The check at start found nothing carrying named statements (its own statement was
    // deallocated again: the count below includes it).
    assert!(!pooled.statements_named());
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

/// Whether the test database is reached through a pooler that carries named statements.
fn named_through_a_pooler(db: &PgDb) -> bool {
    through_a_pooler(db) && db.url().contains("statements=named")
}

#[tokio::test]
async fn a_pooler_that_carries_named_statements_gets_them_asked_or_not() {
    let Some(db) = PgDb::create("pooler_statements_named") else {
        return;
    };
    if !named_through_a_pooler(&db) {
        // Only a pooler that carries named statements can show it (`.ci/pgbouncer.sh` runs
        // this test through PgBouncer 1.24); elsewhere the next test shows the refusal.
        return;
    }
    let asked = db.url().to_owned();
    let found = asked.replace("&statements=named", "");
    assert!(!found.contains("statements="), "{found}");
    // Two instances of several connections each, at once: their transactions interleave on
    // shared server connections, where a pooler that did not carry named statements would
    // answer "prepared statement … does not exist" (a 503), and one that mixed them up would
    // run one instance's statement for the other (a wrong replay, which `pairs` checks).
    let a = connections(&asked, 4).await;
    let b = connections(&found, 4).await;
    assert!(a.statements_named() && b.statements_named());
    let prefixes: Vec<(std::sync::Arc<PgStore>, String)> = (0..4)
        .flat_map(|i| [(a.clone(), format!("a{i}")), (b.clone(), format!("b{i}"))])
        .collect();
    futures_util::future::join_all(
        prefixes
            .iter()
            .map(|(store, prefix)| pairs(store.clone(), "n", prefix, 8)),
    )
    .await;
    exercise(a.clone(), "ea").await;
    exercise(b.clone(), "eb").await;
    // Nothing was wrapped in a function: the statements were named.
    assert_eq!(a.wrapped_statements() + b.wrapped_statements(), 0);
    let (admin, _task) = db.raw().await;
    assert_eq!(wrapper_functions(&admin).await, 0);
}

#[tokio::test]
async fn statements_named_is_refused_at_start_where_names_pass_through() {
    let Some(db) = PgDb::create("pooler_statements_named_refused") else {
        return;
    };
    if named_through_a_pooler(&db) {
        return;
    }
    // Directly connected, or through a pooler that passes names through (PgBouncer 1.18 in
    // `.ci/pgbouncer.sh`), the server knows the statement by the driver's own name.
    let url = format!("{}&statements=named", pooled_url(&db));
    let err = PgStore::connect(&url).await.expect_err("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("statements=named") && msg.contains("max_prepared_statements"),
        "{msg}"
    );
    // Without it the check finds the same and the statements go out unnamed.
    let served = connections(&pooled_url(&db), 1).await;
    assert!(!served.statements_named());
    // Told `unnamed`, the check is not even made.
    let told = connections(&format!("{}&statements=unnamed", pooled_url(&db)), 1).await;
    assert!(!told.statements_named());
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

#[tokio::test]
async fn behind_a_transaction_pooler_repeated_statements_keep_their_plans_in_functions() {
    let Some(db) = PgDb::create("pooler_statements_keep_their_plans") else {
        return;
    };
    // Function call counts, for this database only (PL/pgSQL functions).
    let (admin, _task) = db.raw().await;
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET track_functions = 'pl'",
            db.name()
        ))
        .await
        .expect("track_functions");
    let pooled = connections(&pooled_url(&db), 2).await;
    pairs(pooled.clone(), "pooled", "learn", 4).await;
    // The fresh claim, the completion and the duplicate's read are among them.
    assert!(wrapped_at_least(&pooled, 2).await >= 2);
    let wrapped = settled(&pooled, &admin).await;
    assert!(wrapped >= 2, "wrapped {wrapped}");
    // Each takes its statement's parameters as one row of a type of its own, and answers
    // rows of a type of its own.
    let packed = number(
        &admin,
        "SELECT count(*) FROM pg_proc p JOIN pg_type a ON a.oid = p.proargtypes[0] \
         JOIN pg_type r ON r.oid = p.prorettype \
         WHERE p.proname LIKE 'idem\\_q\\_%' AND p.pronargs = 1 AND p.proretset \
         AND a.typname LIKE 'idem\\_p\\_%' AND a.typtype = 'c' \
         AND r.typname LIKE 'idem\\_r\\_%' AND r.typtype = 'c'",
    )
    .await;
    assert!(packed >= 2, "functions with a packed argument: {packed}");
    pairs(pooled.clone(), "pooled", "wrapped", 10).await;
    // The calls went through the functions: PostgreSQL counted them (on a direct connection,
    // where every server connection of the database was opened after the setting).
    if !through_a_pooler(&db) {
        let mut calls = 0_i64;
        for _ in 0..100 {
            calls = number(
                &admin,
                "SELECT COALESCE(sum(calls), 0) FROM pg_stat_user_functions \
                 WHERE funcname LIKE 'idem\\_q\\_%'",
            )
            .await;
            if calls >= 20 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(calls >= 20, "function calls counted: {calls}");
    }
    // Still nothing named is left on a server connection.
    assert_eq!(
        pooled
            .named_statements_on_a_connection()
            .await
            .expect("count"),
        0
    );
    // A direct connection never makes one.
    if through_a_pooler(&db) {
        return;
    }
    let direct = connections(&idem_testkit::pg::driver_url(db.url()), 2).await;
    pairs(direct.clone(), "direct", "d", 6).await;
    assert_eq!(direct.wrapped_statements(), 0);
}

#[tokio::test]
async fn two_instances_behind_one_pooler_share_a_statement_s_function() {
    let Some(db) = PgDb::create("pooler_two_instances_share_functions") else {
        return;
    };
    let a = connections(&pooled_url(&db), 2).await;
    let b = connections(&pooled_url(&db), 2).await;
    // Both learn at once: one creates each function, the other finds it made.
    tokio::join!(pairs(a.clone(), "n", "a", 6), pairs(b.clone(), "n", "b", 6));
    assert!(wrapped_at_least(&a, 2).await >= 2);
    let (admin, _task) = db.raw().await;
    let wa = settled(&a, &admin).await;
    let wb = settled(&b, &admin).await;
    assert!(wa >= 2 && wa == wb, "wrapped {wa} and {wb}");
    tokio::join!(
        pairs(a.clone(), "n", "a2", 4),
        pairs(b.clone(), "n", "b2", 4)
    );
}

#[tokio::test]
async fn a_dropped_function_costs_a_retry_not_an_error() {
    let Some(db) = PgDb::create("pooler_dropped_function") else {
        return;
    };
    let pooled = connections(&pooled_url(&db), 2).await;
    pairs(pooled.clone(), "n", "learn", 4).await;
    assert!(wrapped_at_least(&pooled, 2).await >= 2);
    let (admin, _task) = db.raw().await;
    // Every statement the pairs use has its function (none still being made).
    let before = settled(&pooled, &admin).await;
    admin
        .batch_execute(
            "DO $$ DECLARE f regprocedure; BEGIN \
               FOR f IN SELECT oid::regprocedure FROM pg_proc WHERE proname LIKE 'idem\\_q\\_%' \
               LOOP EXECUTE 'DROP FUNCTION ' || f; END LOOP; END $$",
        )
        .await
        .expect("drop the functions");
    assert_eq!(wrapper_functions(&admin).await, 0);
    // Every call still answers, and right; the statements it used go out as text again.
    pairs(pooled.clone(), "n", "after", 6).await;
    let after = pooled.wrapped_statements();
    assert!(after < before, "wrapped {before} before, {after} after");
}

#[tokio::test]
async fn without_the_right_to_create_functions_statements_go_out_as_text() {
    let Some(db) = PgDb::create("pooler_no_plpgsql") else {
        return;
    };
    // A host that forbids PL/pgSQL to its users: the schema is migrated by its owner, and the
    // instance's role may use it (and create in it) but make no function in that language.
    drop(connections(&idem_testkit::pg::driver_url(db.url()), 1).await);
    let (admin, _task) = db.raw().await;
    let role = format!("{}_app", db.name());
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS \"{role}\"; CREATE ROLE \"{role}\" LOGIN; \
             GRANT USAGE, CREATE ON SCHEMA public TO \"{role}\"; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \"{role}\"; \
             GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO \"{role}\"; \
             REVOKE USAGE ON LANGUAGE plpgsql FROM PUBLIC;"
        ))
        .await
        .expect("role");
    let url = pooled_url(&db).replacen("postgres@", &format!("{role}@"), 1);
    assert!(url.contains(&role), "{url}");
    let app = connections(&url, 2).await;
    pairs(app.clone(), "n", "k", 8).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    pairs(app.clone(), "n", "k2", 2).await;
    assert_eq!(app.wrapped_statements(), 0);
    assert_eq!(wrapper_functions(&admin).await, 0);
    drop(app);
    admin
        .batch_execute(&format!(
            "DROP OWNED BY \"{role}\" CASCADE; DROP ROLE \"{role}\""
        ))
        .await
        .expect("drop role");
}
