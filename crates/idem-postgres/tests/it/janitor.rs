//! The janitor run by several instances at once: no double work, no errors.

use std::sync::Arc;

use idem_core::{ClaimRequest, Clock, CompleteRequest, TestClock, Timestamp};
use idem_postgres::PgStore;
use idem_store::{NamespaceChange, Store};
use serde_json::json;

use crate::helpers::*;

const RECORDS: usize = 60;

async fn run_until_idle<F, Fut>(stores: &[Arc<PgStore>], step: F) -> Vec<usize>
where
    F: Fn(Arc<PgStore>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = usize> + Send,
{
    let mut tasks = Vec::new();
    for s in stores {
        let s = s.clone();
        let step = step.clone();
        tasks.push(tokio::spawn(async move {
            let mut total = 0;
            let mut idle = 0;
            // Stop after a few empty rounds: others may still hold rows we skipped.
            while idle < 3 {
                let n = step(s.clone()).await;
                total += n;
                if n == 0 {
                    idle += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                } else {
                    idle = 0;
                }
            }
            total
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_sweep_each_record_exactly_once() {
    let Some(db) = PgDb::create("three_instances_sweep") else {
        return;
    };
    let clock = TestClock::new(T0);
    let stores = vec![db.store().await, db.store().await, db.store().await];
    let n = ns("review-ns");
    stores[0]
        .update_namespace(
            &n,
            NamespaceChange::Patch(json!({"lease_expiry": "review"})),
            T0,
        )
        .await
        .expect("patch");
    let l = ledger(stores[0].clone(), &clock);
    for i in 0..RECORDS {
        l.claim(&n, &key(&format!("k{i}")), ClaimRequest::default())
            .await
            .expect("claim");
    }
    clock.advance_ms(60_000);
    let now = clock.now();
    let moved = run_until_idle(&stores, move |s| async move {
        s.sweep_once(now, 7).await.expect("sweep").moved_to_review
    })
    .await;
    assert_eq!(
        moved.iter().sum::<usize>(),
        RECORDS,
        "per instance: {moved:?}"
    );
    let stats = stores[1].stats(now).await.expect("stats");
    assert_eq!(stats.review_queue_depth, RECORDS as u64);
    // Exactly one moved_to_review event per record.
    for i in [0, RECORDS / 2, RECORDS - 1] {
        let got = stores[2]
            .get(&n, &key(&format!("k{i}")))
            .await
            .expect("get")
            .expect("exists");
        let moves = got
            .events
            .iter()
            .filter(|e| e.kind == idem_core::EventType::MovedToReview)
            .count();
        assert_eq!(moves, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_share_retention_without_double_work() {
    let Some(db) = PgDb::create("three_instances_retention") else {
        return;
    };
    let clock = TestClock::new(T0);
    let stores = vec![db.store().await, db.store().await, db.store().await];
    let n = ns("ret");
    stores[0]
        .update_namespace(
            &n,
            NamespaceChange::Patch(json!({"retention_ms": 1000, "audit_retention_ms": 10_000})),
            T0,
        )
        .await
        .expect("patch");
    let l = ledger(stores[0].clone(), &clock);
    completed(&l, &n, "k", RECORDS).await;
    // Records in a namespace without a row (default 30 days) are not due yet.
    l.claim(&ns("default-ns"), &key("k"), ClaimRequest::default())
        .await
        .expect("claim");

    clock.advance_ms(2_000);
    let now = clock.now();
    let expired = expire_all(&stores, now, 7).await;
    assert_eq!(
        expired.iter().sum::<usize>(),
        RECORDS,
        "per instance: {expired:?}"
    );
    let got = stores[1]
        .get(&n, &key("k0"))
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        got.events
            .iter()
            .filter(|e| e.kind == idem_core::EventType::ResultExpired)
            .count(),
        1
    );

    clock.advance_ms(10_000);
    let now = clock.now();
    let deleted = delete_all(&stores, now, 7).await;
    assert_eq!(
        deleted.iter().sum::<usize>(),
        RECORDS,
        "per instance: {deleted:?}"
    );
    let stats = stores[2].stats(now).await.expect("stats");
    assert_eq!(
        stats.records.0.iter().map(|(_, n)| n).sum::<u64>(),
        1,
        "only the processing record of the default namespace is left"
    );
}

/// Retention steps of `batch` on every instance at once until none expires anything; the
/// results expired by each instance.
async fn expire_all(stores: &[Arc<PgStore>], now: Timestamp, batch: usize) -> Vec<usize> {
    run_until_idle(stores, move |s| async move {
        let r = s.retention_once(now, batch).await.expect("retention");
        r.results_expired
    })
    .await
}

/// As [`expire_all`], counting the tombstones each instance deleted.
async fn delete_all(stores: &[Arc<PgStore>], now: Timestamp, batch: usize) -> Vec<usize> {
    run_until_idle(stores, move |s| async move {
        let r = s.retention_once(now, batch).await.expect("retention");
        r.tombstones_deleted
    })
    .await
}

/// Claims and completes `n` keys `{prefix}{i}` of `ns`.
async fn completed(l: &idem_store::Ledger, ns: &idem_core::Namespace, prefix: &str, n: usize) {
    for i in 0..n {
        let k = key(&format!("{prefix}{i}"));
        let c = l
            .claim(ns, &k, ClaimRequest::default())
            .await
            .expect("claim");
        l.complete(
            ns,
            &k,
            CompleteRequest {
                cost: None,
                token: c.token.expect("token").secret(),
                result: Some(json!({"i": i})),
                external_ref: None,
            },
        )
        .await
        .expect("complete");
    }
}

/// `result_expired` events per key of `ns`, straight from the table.
async fn expiry_events(url: &str, ns: &str) -> Vec<(String, i64)> {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(conn);
    let rows = c
        .query(
            "SELECT key, count(*) FROM events WHERE namespace = $1 AND type = 'result_expired' \
             GROUP BY key ORDER BY key",
            &[&ns],
        )
        .await
        .expect("events");
    drop(c);
    let _ = task.await;
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Two instances with different batch sizes (so different statement texts) drain one backlog
/// at once, a dozen batches each: every due record is expired by exactly one of them with
/// exactly one event, each namespace's own retention is honoured, records in other states are
/// left alone, and the tombstones go later with their events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_drain_one_backlog_with_one_event_per_record() {
    const SHORT: usize = 150;
    const LONG: usize = 20;
    let Some(db) = PgDb::create("two_instances_backlog") else {
        return;
    };
    let clock = TestClock::new(T0);
    let stores = vec![db.store().await, db.store().await];
    let (short, long) = (ns("short"), ns("long"));
    for (n, ms) in [(&short, 1_000), (&long, 5_000)] {
        stores[0]
            .update_namespace(
                n,
                NamespaceChange::Patch(json!({"retention_ms": ms, "audit_retention_ms": 10_000})),
                T0,
            )
            .await
            .expect("patch");
    }
    let l = ledger(stores[0].clone(), &clock);
    completed(&l, &short, "k", SHORT).await;
    completed(&l, &long, "k", LONG).await;
    // Other states in the same namespace: one failed permanently (final, so it expires too),
    // one still processing and one in review (never touched by retention).
    let fail = |kind, http_status| idem_core::FailRequest {
        cost: None,
        token: String::new(),
        kind,
        http_status,
        retry_after_ms: None,
        sent: None,
        error: None,
    };
    for (k, req) in [
        ("failed", fail(Some(idem_core::Class::Permanent), None)),
        ("review", fail(None, Some(502))),
    ] {
        let c = l
            .claim(&short, &key(k), ClaimRequest::default())
            .await
            .expect("claim");
        let req = idem_core::FailRequest {
            cost: None,
            token: c.token.expect("token").secret(),
            ..req
        };
        l.fail(&short, &key(k), req).await.expect("fail");
    }
    l.claim(&short, &key("processing"), ClaimRequest::default())
        .await
        .expect("claim");

    clock.advance_ms(2_000);
    let now = clock.now();
    let first = stores[0].clone();
    let expired = run_until_idle(&stores, move |s| {
        let batch = if Arc::ptr_eq(&s, &first) { 7 } else { 10 };
        async move {
            s.retention_once(now, batch)
                .await
                .expect("retention")
                .results_expired
        }
    })
    .await;
    assert_eq!(
        expired.iter().sum::<usize>(),
        SHORT + 1,
        "per instance: {expired:?}"
    );
    let events = expiry_events(db.url(), "short").await;
    assert_eq!(events.len(), SHORT + 1, "one key per expired record");
    assert!(
        events.iter().all(|(_, n)| *n == 1),
        "a record was logged twice: {events:?}"
    );
    assert!(events.iter().any(|(k, _)| k == "failed"));
    assert!(expiry_events(db.url(), "long").await.is_empty());
    for k in ["processing", "review"] {
        let got = stores[1]
            .get(&short, &key(k))
            .await
            .expect("get")
            .expect("exists");
        assert!(!got.record.result_expired, "{k}");
        assert!(got.record.final_at.is_none(), "{k}");
    }

    // The long namespace's turn: its records only.
    clock.advance_ms(4_000);
    let now = clock.now();
    let expired = expire_all(&stores, now, 3).await;
    assert_eq!(expired.iter().sum::<usize>(), LONG, "{expired:?}");
    let events = expiry_events(db.url(), "long").await;
    assert_eq!(events.len(), LONG);
    assert!(events.iter().all(|(_, n)| *n == 1), "{events:?}");

    // Past the audit retention: every final record goes, with its events, exactly once.
    clock.advance_ms(10_000);
    let now = clock.now();
    let deleted = delete_all(&stores, now, 9).await;
    assert_eq!(
        deleted.iter().sum::<usize>(),
        SHORT + 1 + LONG,
        "{deleted:?}"
    );
    assert!(expiry_events(db.url(), "short").await.is_empty());
    assert!(expiry_events(db.url(), "long").await.is_empty());
    let stats = stores[1].stats(now).await.expect("stats");
    assert_eq!(
        stats.records.0.iter().map(|(_, n)| n).sum::<u64>(),
        2,
        "the processing and review records are left"
    );
}

/// Counter rows of closed connections are folded into slot 0 by the retention step: the
/// rows shrink to one per namespace and state, the sums (a namespace's counts and the
/// ledger-wide gauges) stay exact, and a live connection's slot is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_folds_counter_slots_of_closed_connections() {
    let Some(db) = PgDb::create("retention_folds_counter_slots") else {
        return;
    };
    let clock = TestClock::new(T0);
    let n = ns("fold");
    // Three pools, each writing from its own backends, then closed.
    for round in 0..3 {
        let s = db.store_with(2).await;
        let l = ledger(s.clone(), &clock);
        for i in 0..4 {
            l.claim(&n, &key(&format!("r{round}k{i}")), ClaimRequest::default())
                .await
                .expect("claim");
        }
        completed(&l, &n, &format!("r{round}c"), 3).await;
        drop(l);
        drop(s);
    }
    let (raw, task) = db.raw().await;
    // The closed pools' backends leave pg_stat_activity shortly after their sockets close.
    for _ in 0..100 {
        let others: i64 = raw
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .expect("activity")
            .get(0);
        if others == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let slots = |table: &'static str| {
        let raw = &raw;
        async move {
            let sql = format!("SELECT count(*) FROM {table} WHERE slot <> 0");
            let n: i64 = raw.query_one(&sql, &[]).await.expect("count").get(0);
            n
        }
    };
    assert!(
        slots("namespace_counts").await >= 3,
        "every pool wrote its own slots"
    );

    let live = db.store().await;
    let before = live.namespace(&n).await.expect("ns").counts;
    let stats_before = live.stats(clock.now()).await.expect("stats").records;
    // A live connection writes a slot that must survive the fold.
    ledger(live.clone(), &clock)
        .claim(&n, &key("live"), ClaimRequest::default())
        .await
        .expect("claim");
    live.retention_once(clock.now(), 100)
        .await
        .expect("retention");

    let after = live.namespace(&n).await.expect("ns").counts;
    assert_eq!(
        after.get(idem_core::State::Processing),
        before.get(idem_core::State::Processing) + 1
    );
    assert_eq!(
        after.get(idem_core::State::Completed),
        before.get(idem_core::State::Completed)
    );
    assert_eq!(after.get(idem_core::State::Completed), 9);
    assert_eq!(after.get(idem_core::State::Processing), 13);
    let stats_after = live.stats(clock.now()).await.expect("stats").records;
    assert_eq!(
        stats_after.get(idem_core::State::Completed),
        stats_before.get(idem_core::State::Completed)
    );
    // What is left outside slot 0 belongs to connections that are still open.
    let leftover: i64 = raw
        .query_one(
            "SELECT count(*) FROM namespace_counts c WHERE slot <> 0 AND NOT EXISTS \
             (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.slot)",
            &[],
        )
        .await
        .expect("leftover")
        .get(0);
    assert_eq!(leftover, 0);
    assert!(
        slots("namespace_counts").await <= 2,
        "only the live slots remain"
    );
    drop(raw);
    let _ = task.await;
}

/// Records abandoned under a `reclaim` lease and stuck-alerted once stay `processing` for
/// good; the sweep's candidate query goes through `records_sweep`, which holds none of them,
/// instead of walking past every one of them on each pass through `records_processing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweep_does_not_walk_records_abandoned_under_reclaim() {
    let Some(db) = PgDb::create("sweep_skips_abandoned") else {
        return;
    };
    let clock = TestClock::new(T0);
    let store = db.store().await;
    let n = ns("abandoned");
    let l = ledger(store.clone(), &clock);
    for i in 0..2000 {
        l.claim(&n, &key(&format!("a{i}")), ClaimRequest::default())
            .await
            .expect("claim");
    }
    let (client, _conn) = db.raw().await;
    client
        .batch_execute(
            "UPDATE records SET stuck_alerted = true, active_at = 0, lease_expires_at = 1; \
             ANALYZE records",
        )
        .await
        .expect("abandon");
    l.claim(&n, &key("live"), ClaimRequest::default())
        .await
        .expect("claim");
    client
        .batch_execute(&format!(
            "PREPARE sweep(BIGINT, BIGINT, BIGINT) AS {}",
            idem_postgres::sweep_candidates_sql()
        ))
        .await
        .expect("prepare");
    let late = T0.0 + 10 * 86_400_000;
    let plan = plan_of(
        &client,
        &format!("EXPLAIN EXECUTE sweep({late}, 100, 3600000)"),
    )
    .await;
    assert!(plan.contains("records_sweep"), "{plan}");
    let report = store.sweep_once(Timestamp(late), 100).await.expect("sweep");
    assert_eq!((report.examined, report.stuck_alerts), (1, 1), "{report:?}");
}
