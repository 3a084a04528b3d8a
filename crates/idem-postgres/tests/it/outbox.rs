//! The outbox claim on a backlog: in claim order straight from its index, never a walk of
//! every due item.

use idem_store::{OutboxClaim, OutboxKind, Store};

use crate::helpers::*;

/// The actual rows of the plan line that names `index` (`… rows=N loops=1)`).
fn rows_read(plan: &str, index: &str) -> Option<u64> {
    let line = plan.lines().find(|l| l.contains(index))?;
    let tail = line.split("actual time=").nth(1)?;
    let rows = tail.split("rows=").nth(1)?;
    rows.split_whitespace().next()?.parse().ok()
}

/// 3,000 due items, ten claimed: the claim reads about ten index entries (through
/// `outbox_claim`, no sort of the backlog), before and after the table has statistics, and
/// the items it takes are the oldest by `(due_at, id)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_backlog_reads_only_what_it_takes() {
    let Some(db) = PgDb::create("outbox_claim_plan") else {
        return;
    };
    let store = db.store().await;
    let (client, _conn) = db.raw().await;
    let t0 = T0.0;
    client
        .batch_execute(&format!(
            "INSERT INTO outbox (kind, namespace, key, dedupe, payload, created_at, due_at) \
             SELECT 'forward', 'backlog', 'k' || g, 'd', '\\x00'::bytea, {t0}, {t0} + (g * 7919) % 13 \
             FROM generate_series(1, 3000) g; \
             PREPARE claim(TEXT, BIGINT, BIGINT, TEXT, BIGINT) AS {}",
            idem_postgres::outbox_claim_sql()
        ))
        .await
        .expect("fill");
    for analyzed in [false, true] {
        if analyzed {
            client
                .batch_execute("ANALYZE outbox")
                .await
                .expect("analyze");
        }
        client.batch_execute("BEGIN").await.expect("begin");
        let plan = plan_of(
            &client,
            &format!(
                "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE claim('forward', {}, 10, 'probe', {})",
                t0 + 100,
                t0 + 60_000
            ),
        )
        .await;
        client.batch_execute("ROLLBACK").await.expect("rollback");
        assert!(!plan.contains("Sort"), "analyzed {analyzed}: {plan}");
        let read = rows_read(&plan, "outbox_claim")
            .unwrap_or_else(|| panic!("no scan of outbox_claim: {plan}"));
        assert!(read <= 20, "analyzed {analyzed}: read {read}\n{plan}");
    }
    // The oldest ten, read before the claim moves them.
    let mut want_ids: Vec<i64> = client
        .query("SELECT id FROM outbox ORDER BY due_at, id LIMIT 10", &[])
        .await
        .expect("oldest")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let claim = OutboxClaim {
        kind: OutboxKind::Forward,
        now: idem_core::Timestamp(t0 + 100),
        limit: 10,
        lease_ms: 60_000,
    };
    let mut got_ids: Vec<i64> = store
        .outbox_claim(claim)
        .await
        .expect("claim")
        .iter()
        .map(|i| i.id)
        .collect();
    got_ids.sort_unstable();
    want_ids.sort_unstable();
    assert_eq!(got_ids, want_ids);
}
