//! Background work shared by many instances: lease sweeps, retention, alert delivery leases
//! (on the outbox, see `outbox.rs`).
//!
//! Every step selects its rows with `FOR UPDATE SKIP LOCKED` and a `LIMIT`, so instances
//! running the janitor at the same moment split the work instead of repeating it or waiting
//! for each other, and a claim never waits longer than one small batch for a row the janitor
//! holds. Record changes still go through [`idem_core::apply`] (sweeps) or the pure
//! retention rule mirrored in SQL, and every changed record gets its event. Retention never
//! touches `processing` or `needs_review` records: its candidate queries only ever select the
//! final states `completed` and `failed_permanent`.

use futures_util::future::try_join_all;
use idem_core::{AlertReason, Key, Namespace, Op, Policy, State, Timestamp};
use idem_store::engine::{self, NsOwned, PlanWrite};
use idem_store::{
    NamespaceStats, OutboxClaim, OutboxKind, PendingAlert, RetentionReport, SecretKind,
    StateCounts, Stats, SweepReport,
};
use std::collections::HashMap;
use std::sync::LazyLock;

use crate::error::PgError;
use crate::rows::{
    as_i64, as_u64, parse_state, policy_from_text, record_from_row, EventParams, RecordParams,
    INSERT_EVENT, R_RECORD_COLS, UPDATE_RECORD,
};
use crate::{corrupt, AlertParams, PgStore, INSERT_ALERT};

/// `processing` records the sweep would change: an expired lease under `lease_expiry =
/// review`, or stuck past the namespace's `stuck_after_ms` without an alert yet. Records with
/// an expired `reclaim` lease are left to the next claim (the sweep would not change them).
pub(crate) static SWEEP_CANDIDATES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT n.policy, n.paused, {} FROM records r \
         LEFT JOIN namespaces n ON n.namespace = r.namespace \
         WHERE r.state = {processing} AND (r.lease_expiry = {review} OR NOT r.stuck_alerted) \
         AND ( \
             (r.lease_expiry = {review} AND (r.lease_expires_at IS NULL OR r.lease_expires_at <= $1)) \
             OR (NOT r.stuck_alerted AND r.active_at <= $1 - COALESCE(n.stuck_after_ms, $3))) \
         ORDER BY r.active_at LIMIT $2 \
         FOR UPDATE OF r SKIP LOCKED",
        *R_RECORD_COLS,
        processing = idem_store::sql::state(State::Processing),
        review = idem_store::sql::lease_expiry(idem_core::LeaseExpiry::Review),
    )
});

pub(crate) async fn sweep_once(
    store: &PgStore,
    now: Timestamp,
    batch: usize,
) -> Result<SweepReport, PgError> {
    let mut client = store.client().await?;
    let select = client.prepare_cached(&SWEEP_CANDIDATES).await?;
    let update = client.prepare_cached(&UPDATE_RECORD).await?;
    let insert_event = client.prepare_cached(&INSERT_EVENT).await?;
    let insert_alert = client.prepare_cached(INSERT_ALERT).await?;
    let default_stuck = Policy::default().stuck_after_ms;
    let tx = client.transaction().await?;
    let rows = tx
        .query(&select, &[&now.0, &as_i64(batch), &default_stuck])
        .await?;
    let mut report = SweepReport {
        examined: rows.len(),
        ..SweepReport::default()
    };
    let mut records = Vec::new();
    let mut events = Vec::new();
    let mut alerts = Vec::new();
    for row in &rows {
        let policy_json: Option<String> = row.try_get(0).map_err(|e| corrupt(&e))?;
        let policy = policy_from_text(policy_json.as_deref())?;
        let paused = row
            .try_get::<_, Option<bool>>(1)
            .map_err(|e| corrupt(&e))?
            .unwrap_or(false);
        let rec = record_from_row(row, 2)?;
        let exec = idem_store::ExecCtx::at(now);
        let settings = NsOwned { policy, paused };
        let (ns, key): (Namespace, Key) = (rec.namespace.clone(), rec.key.clone());
        // A sweep never reads today's count, so this always decides.
        let Some(t) = engine::decide_known(&ns, &key, Some(&rec), &Op::Sweep, &exec, &settings)
        else {
            continue;
        };
        report.stuck_alerts += t
            .alerts
            .iter()
            .filter(|a| a.reason == AlertReason::Stuck)
            .count();
        let plan = engine::plan(&t, &settings.policy, now, None);
        if let PlanWrite::Update {
            record,
            expected_version,
        } = plan.write
        {
            if record.state == State::NeedsReview {
                report.moved_to_review += 1;
            }
            // The row is locked at `rec`'s version: its count moves from `rec`'s state.
            records.push((
                RecordParams::owned(record)?,
                expected_version,
                rec.state.as_str(),
            ));
        }
        events.extend(plan.events.iter().map(|e| EventParams::new(&ns, &key, e)));
        alerts.extend(
            plan.alerts
                .iter()
                .map(|a| AlertParams::new(&ns, &key, a, plan.traceparent)),
        );
    }
    // All writes of the batch go out pipelined; the rows are locked by this transaction, so
    // the version guards hold unless the data changed under us (then the batch is redone).
    let record_writes = try_join_all(records.iter().map(|(p, old, from)| {
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = p.params().to_vec();
        params.push(old);
        params.push(from);
        let tx = &tx;
        let update = &update;
        async move { tx.execute(update, &params).await }
    }));
    let event_writes = try_join_all(events.iter().map(|p| {
        let tx = &tx;
        let insert_event = &insert_event;
        async move { tx.execute(insert_event, &p.params()).await }
    }));
    let alert_writes = try_join_all(alerts.iter().map(|p| {
        let tx = &tx;
        let insert_alert = &insert_alert;
        async move { tx.execute(insert_alert, &p.params()).await }
    }));
    let (written, _, _) = tokio::try_join!(record_writes, event_writes, alert_writes)?;
    if written.iter().any(|n| *n != 1) {
        return Err(PgError::Retry);
    }
    tx.commit().await?;
    Ok(report)
}

/// One retention step's expiry, as one statement: drops result and payloads of at most
/// `{limit}` final records past `retention_ms` (not yet past `audit_retention_ms`: those are
/// deleted instead) with a `result_expired` event each, deletes daily counters older than `$4`,
/// and says whether the oldest final record is past the shortest audit retention (then
/// [`DELETE_TOMBSTONES`] runs too; the first entry of `records_final`, never a scan: an
/// `EXISTS` here got a sequential scan in the generic plan). Namespaces without a row use the
/// default policy.
///
/// The batch size is written into the text (one prepared statement per size) rather than
/// bound: with `LIMIT $n`, batches of up to a few hundred (the default 250 included) got a
/// custom plan at every execution, planned again each time, because a plan for a known small
/// limit looks cheaper than the generic one. With a literal limit the custom and generic plans
/// cost the same and PostgreSQL keeps the generic plan after five executions; an `ANALYZE` of
/// `records` (idem's first analyze of a young table, autovacuum) invalidates it, so it follows
/// the statistics. Together with running the tombstone deletion only when one can be due, this
/// took the server CPU of a call of batch 1 from 1.8–2.0 ms to ~0.5 ms.
///
/// The update cannot be HOT: `result_expired` is in the predicate of `records_unexpired`, so
/// the new row version gets an entry in `records_pkey`, `records_list`, `records_state_list` and
/// `records_final`, and the event two more. See `docs/performance.md` ("Ledger size and the
/// janitor") for why that index stays.
static EXPIRE_RESULTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{head}\
          AND NOT r.result_expired \
          AND r.final_at <= $1 - COALESCE(n.retention_ms, $2) \
          AND r.final_at > $1 - COALESCE(n.audit_retention_ms, $3) \
          AND r.final_at <= $1 - (SELECT LEAST($2, COALESCE(MIN(retention_ms), $2)) FROM namespaces) \
        ORDER BY r.final_at LIMIT {{limit}} \
        FOR UPDATE OF r SKIP LOCKED \
    ), expired AS ( \
        UPDATE records r SET result = NULL, prepared_payload = NULL, result_expired = TRUE, \
            version = r.version + 1 \
        FROM batch WHERE r.namespace = batch.namespace AND r.key = batch.key \
        RETURNING r.namespace, r.key, r.state, r.attempt, r.owner, r.correlation_id \
    ), logged AS ( \
        INSERT INTO events (namespace, key, at, type, from_state, to_state, attempt, owner, \
            correlation_id, note) \
        SELECT namespace, key, $1, {result_expired}, state, state, attempt, owner, \
            correlation_id, {note} \
        FROM expired RETURNING 1 \
    ), bodies AS ( \
        UPDATE intake_events e SET body = NULL FROM expired \
        WHERE e.namespace = expired.namespace AND e.key = expired.key \
          AND expired.state = {completed} AND e.body IS NOT NULL \
          AND e.delivered_at IS NOT NULL \
          AND NOT EXISTS (SELECT 1 FROM intake_events d WHERE d.namespace = e.namespace \
              AND d.event_key = e.key AND d.delivered_at IS NULL) \
    ), old_counts AS ( \
        DELETE FROM daily_counts WHERE day < $4 RETURNING 1 \
    ) \
    SELECT (SELECT count(*) FROM logged), COALESCE(( \
        SELECT r.final_at FROM records r \
        WHERE r.state IN ({final_states}) AND r.final_at IS NOT NULL \
        ORDER BY r.final_at LIMIT 1 \
    ) <= $1 - (SELECT LEAST($3, COALESCE(MIN(audit_retention_ms), $3)) FROM namespaces), FALSE)",
        head = final_batch_head(),
        final_states = idem_store::sql::retained_states(),
        result_expired = idem_store::sql::event_type(idem_core::EventType::ResultExpired),
        note = idem_store::sql::result_expired_note(),
        completed = idem_store::sql::state(idem_core::State::Completed)
    )
});

/// The head of the retention statements' `batch`: final records with a `final_at`, joined to
/// their namespace's settings (`n`); each statement adds its own bounds after it.
fn final_batch_head() -> String {
    format!(
        "WITH batch AS ( \
        SELECT r.namespace, r.key FROM records r \
        LEFT JOIN namespaces n ON n.namespace = r.namespace \
        WHERE r.state IN ({}) AND r.final_at IS NOT NULL ",
        idem_store::sql::retained_states()
    )
}

/// Deletes final records past `audit_retention_ms` with their events and alerts. The extra
/// bound by the smallest retention of any namespace is constant for the statement, so the
/// scan of `records_final` stops where no record can qualify (without it every call walked
/// every final record younger than its namespace's audit retention). Run only when
/// [`EXPIRE_RESULTS`] found a candidate, and planned for each execution (its limit stays a
/// parameter): it deletes through `events` and `alerts`, whose sizes a plan cached while they
/// were small would not follow.
static DELETE_TOMBSTONES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{head}\
          AND r.final_at <= $1 - COALESCE(n.audit_retention_ms, $3) \
          AND r.final_at <= $1 - (SELECT LEAST($3, COALESCE(MIN(audit_retention_ms), $3)) FROM namespaces) \
        ORDER BY r.final_at LIMIT $2 \
        FOR UPDATE OF r SKIP LOCKED \
    ), del AS ( \
        DELETE FROM records r USING batch \
        WHERE r.namespace = batch.namespace AND r.key = batch.key \
        RETURNING r.namespace, r.key \
    ), ev AS ( \
        DELETE FROM events e USING del \
        WHERE e.namespace = del.namespace AND e.key = del.key RETURNING 1 \
    ), al AS ( \
        DELETE FROM outbox a USING del \
        WHERE a.namespace = del.namespace AND a.key = del.key RETURNING 1 \
    ), intake AS ( \
        DELETE FROM intake_events i USING del \
        WHERE i.namespace = del.namespace AND i.key = del.key \
          AND i.delivered_at IS NOT NULL \
          AND NOT EXISTS (SELECT 1 FROM intake_events d WHERE d.namespace = i.namespace \
              AND d.event_key = i.key AND d.delivered_at IS NULL) \
    ) \
    SELECT count(*) FROM del",
        head = final_batch_head()
    )
});

/// [`EXPIRE_RESULTS`] for one batch size.
fn expire_results(batch: usize) -> String {
    EXPIRE_RESULTS.replace("{limit}", &as_i64(batch).to_string())
}

/// Folds the counter rows of backends that no longer exist into slot 0 (`namespace_counts`,
/// which the gauges also sum by state). Each connection writes only its own slot (its backend
/// pid), so without this the rows would pile up with every reconnection and a read would sum
/// ever more of them. A slot whose pid belongs to a live backend is left alone; the DELETE
/// and the INSERT are one statement, so the sums never change, and a writer that reuses a pid
/// mid-fold only waits on the row lock.
const FOLD_NAMESPACE_COUNTS: &str = "WITH gone AS ( \
       DELETE FROM namespace_counts c WHERE c.slot <> 0 \
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.slot) \
       RETURNING namespace, state, n) \
     INSERT INTO namespace_counts (namespace, state, slot, n) \
       SELECT namespace, state, 0, sum(n)::BIGINT FROM gone GROUP BY namespace, state \
     ON CONFLICT (namespace, state, slot) DO UPDATE SET n = namespace_counts.n + EXCLUDED.n";

/// One retention step: one statement when no tombstone can be due (the usual case: the audit
/// retention is long), two otherwise. Each is atomic on its own; several instances share the
/// work through `SKIP LOCKED`, so no record is expired (and logged) or deleted twice.
pub(crate) async fn retention_once(
    store: &PgStore,
    now: Timestamp,
    batch: usize,
) -> Result<RetentionReport, PgError> {
    let client = store.client().await?;
    let d = Policy::default();
    let expire = client.prepare_cached(&expire_results(batch)).await?;
    // Daily acquisition counters are only read for today; keep two days for clock skew.
    let old_day = now.utc_day() - 2;
    let row = client
        .query_one(
            &expire,
            &[&now.0, &d.retention_ms, &d.audit_retention_ms, &old_day],
        )
        .await?;
    let expired: i64 = row.try_get(0).map_err(|e| corrupt(&e))?;
    let tombstones_due: bool = row.try_get(1).map_err(|e| corrupt(&e))?;
    // Stats buckets older than the 24-hour window (and a day of slack) are never read again.
    client
        .execute(
            "DELETE FROM ns_stats WHERE hour < $1",
            &[&(NamespaceStats::first_hour(now) - NamespaceStats::HOURS)],
        )
        .await?;
    client.execute(FOLD_NAMESPACE_COUNTS, &[]).await?;
    let mut deleted = 0i64;
    if tombstones_due {
        let delete = client.prepare_cached(&DELETE_TOMBSTONES).await?;
        deleted = client
            .query_one(&delete, &[&now.0, &as_i64(batch), &d.audit_retention_ms])
            .await?
            .try_get(0)
            .map_err(|e| corrupt(&e))?;
    }
    Ok(RetentionReport {
        results_expired: usize::try_from(expired).unwrap_or(0),
        tombstones_deleted: usize::try_from(deleted).unwrap_or(0),
    })
}

static OLDEST_PROCESSING: LazyLock<String> = LazyLock::new(idem_store::sql::oldest_processing);

static OLDEST_REVIEW: LazyLock<String> = LazyLock::new(idem_store::sql::oldest_review);

pub(crate) async fn stats(store: &PgStore, now: Timestamp) -> Result<Stats, PgError> {
    let client = store.client().await?;
    let by_state = client
        .prepare_cached("SELECT state, sum(n)::BIGINT FROM namespace_counts GROUP BY state")
        .await?;
    let oldest = client.prepare_cached(&OLDEST_PROCESSING).await?;
    let review = client.prepare_cached(&OLDEST_REVIEW).await?;
    let (rows, oldest, review) = tokio::try_join!(
        client.query(&by_state, &[]),
        client.query_one(&oldest, &[]),
        client.query_one(&review, &[])
    )?;
    let mut pairs = Vec::with_capacity(rows.len());
    for r in rows {
        let s: String = r.try_get(0).map_err(|e| corrupt(&e))?;
        let n: i64 = r.try_get(1).map_err(|e| corrupt(&e))?;
        pairs.push((parse_state(&s)?, as_u64(n)));
    }
    let records = StateCounts::from_pairs(pairs);
    let oldest: Option<i64> = oldest.try_get(0).map_err(|e| corrupt(&e))?;
    let review: Option<i64> = review.try_get(0).map_err(|e| corrupt(&e))?;
    let age = |t: i64| (now.0.saturating_sub(t)).max(0) as f64 / 1000.0;
    Ok(Stats {
        review_queue_depth: records.get(State::NeedsReview),
        records,
        oldest_processing_seconds: oldest.map_or(0.0, age),
        review_oldest_seconds: review.map_or(0.0, age),
    })
}

/// A namespace's hourly stats over the 24 hours up to `now` (every slot's rows).
pub(crate) async fn namespace_stats(
    store: &PgStore,
    ns: &Namespace,
    now: Timestamp,
) -> Result<NamespaceStats, PgError> {
    let client = store.client().await?;
    let stmt = client
        .prepare_cached(
            "SELECT sum(acquired_first)::BIGINT, sum(acquired_retry)::BIGINT, \
             sum(tokens)::BIGINT, sum(usd_nanos)::BIGINT, sum(retry_tokens)::BIGINT, \
             sum(retry_usd_nanos)::BIGINT FROM ns_stats WHERE namespace = $1 AND hour >= $2",
        )
        .await?;
    let row = client
        .query_one(&stmt, &[&ns.as_str(), &NamespaceStats::first_hour(now)])
        .await?;
    let mut v = [0i64; 6];
    for (i, slot) in v.iter_mut().enumerate() {
        *slot = row
            .try_get::<_, Option<i64>>(i)
            .map_err(|e| corrupt(&e))?
            .unwrap_or(0);
    }
    let mut out = NamespaceStats::default();
    out.add_row(v);
    Ok(out)
}

/// Leases due alerts on the outbox for `lease_ms` and reads, with them, each namespace's
/// alert URL and secret as they are now.
pub(crate) async fn due_alerts(
    store: &PgStore,
    now: Timestamp,
    limit: usize,
    lease_ms: i64,
) -> Result<Vec<PendingAlert>, PgError> {
    let claim = OutboxClaim {
        kind: OutboxKind::Alert,
        now,
        limit,
        lease_ms,
    };
    let items = crate::outbox::claim(store, &claim).await?;
    let mut out = Vec::with_capacity(items.len());
    let mut namespaces: Vec<String> = Vec::new();
    for item in items {
        if !namespaces.contains(&item.namespace) {
            namespaces.push(item.namespace.clone());
        }
        out.push(PendingAlert::from_outbox(item)?);
    }
    if out.is_empty() {
        return Ok(out);
    }
    // The URL and secret are read at delivery time: a namespace that removed its alert_url
    // stops alerts, and a changed alert_secret signs the next delivery.
    let client = store.client().await?;
    let urls = client
        .query(
            "SELECT n.namespace, n.policy, s.value FROM namespaces n \
             LEFT JOIN LATERAL (SELECT value FROM secrets WHERE kind = $2 \
               AND owner = n.namespace ORDER BY id DESC LIMIT 1) s ON TRUE \
             WHERE n.namespace = ANY($1)",
            &[&namespaces, &SecretKind::Alert.as_str()],
        )
        .await?;
    let mut by_ns: HashMap<String, Policy> = HashMap::new();
    for r in urls {
        let ns: String = r.try_get(0).map_err(|e| corrupt(&e))?;
        let text: String = r.try_get(1).map_err(|e| corrupt(&e))?;
        let secret = r.try_get(2).map_err(|e| corrupt(&e))?;
        let policy = Policy {
            alert_secret: crate::secrets::alert_secret_of(secret)?,
            ..policy_from_text(Some(&text))?
        };
        by_ns.insert(ns, policy);
    }
    for a in &mut out {
        if let Some(p) = by_ns.get(&a.namespace) {
            a.alert_url = p.alert_url.clone();
            a.alert_secret = p.alert_secret.clone();
        }
    }
    Ok(out)
}
