//! The steps the writer thread runs, each inside the batch transaction under its savepoint.
//!
//! Invariants: a step reads and writes through the one write connection only, so what it
//! reads is exactly what the batch wrote before it (no stale decision is possible); a step
//! persists exactly what `idem_core::apply` returned and nothing else; the janitor steps only
//! ever touch the states the contract lets them touch (sweep: `processing`; retention:
//! `completed` and `failed_permanent`).

use std::collections::HashMap;
use std::sync::LazyLock;

use idem_core::{
    AlertDraft, Event, EventDraft, EventType, Key, Namespace, Op, Policy, Record, Reply, Timestamp,
};
use idem_store::engine::{
    self, Backend, Loaded, NsOwned, Persisted, Plan, PlanWrite, Ran, Seqs, TxError,
};
use idem_store::{
    AlertOutcome, AlertSecretWrite, ExecCtx, NamespaceChange, NamespaceInfo, NewApiToken,
    PendingAlert, RetentionReport, StoreError, SweepReport,
};
use rusqlite::{params, Connection};

use crate::error::{corrupt, SqlResult};
use crate::outbox;
use crate::rows::{
    count_states, insert_event, insert_record, load_namespace, load_namespace_with_secret,
    load_record, save_namespace, update_record,
};

/// The engine's storage side on the write connection, inside the batch transaction and the
/// job's savepoint. Every step is synchronous (the futures never wait; the writer drives them
/// with [`engine::run_ready`]), so the group commit stays exactly as it is.
pub(crate) struct WriteTx<'c> {
    conn: &'c Connection,
    /// Row id of the record read by `load`.
    rid: Option<i64>,
}

impl<'c> WriteTx<'c> {
    pub(crate) fn new(conn: &'c Connection) -> Self {
        WriteTx { conn, rid: None }
    }
}

impl Backend for WriteTx<'_> {
    const NAME: &'static str = "sqlite";
    type Ns = NsOwned;

    async fn load(
        &mut self,
        ns: &Namespace,
        key: &Key,
        _day: i64,
    ) -> Result<Loaded<NsOwned>, TxError> {
        let stored = load_record(self.conn, ns, key)?;
        self.rid = stored.as_ref().map(|s| s.rid);
        let (policy, paused) = load_namespace(self.conn, ns.as_str())?;
        Ok(Loaded {
            record: stored.map(|s| s.record),
            ns: NsOwned { policy, paused },
            daily_count: None,
        })
    }

    async fn daily_count(&mut self, ns: &Namespace, day: i64) -> Result<u64, TxError> {
        Ok(daily_count(self.conn, ns.as_str(), day)?)
    }

    async fn persist(
        &mut self,
        ns: &Namespace,
        key: &Key,
        plan: &Plan<'_>,
        basis: Loaded<NsOwned>,
    ) -> Result<Persisted, TxError> {
        let conn = self.conn;
        // A webhook event whose key holds another record's row is not this event's to take:
        // nothing is written (the caller reads the row to tell a collision from a duplicate).
        if let (PlanWrite::Insert(_), Some(r)) = (plan.write, plan.rider) {
            if crate::intake::rider_key_taken(conn, r)? {
                return Ok(Persisted::default());
            }
        }
        // The one writer decides on what it reads, so a guard can only fail on a bug: it is an
        // error, not a race.
        let rid = match plan.write {
            PlanWrite::None => self.rid,
            PlanWrite::Insert(rec) => Some(insert_record(conn, rec)?),
            PlanWrite::Update {
                record,
                expected_version,
            } => {
                let from = basis.record.as_ref().map(|r| r.state).ok_or_else(|| {
                    StoreError::Internal("an update of a record that was not read".into())
                })?;
                update_record(conn, record, expected_version, from)?;
                self.rid
            }
        };
        let mut seqs = Seqs::default();
        for draft in plan.events {
            // The decision table only emits events about a record that exists or is being created.
            let rid =
                rid.ok_or_else(|| StoreError::Internal("an event without a record".into()))?;
            seqs.push(insert_event(conn, rid, ns.as_str(), key.as_str(), draft)?);
        }
        // Every first acquisition is counted by the stats bump below (`acquired_first` of its
        // hour): today's count is the sum of today's hours (schema 13), and the ceiling was
        // checked by the decision on the writer's own data, so no guard is needed.
        debug_assert!(plan
            .acquisition
            .is_none_or(|_| plan.stats.is_some_and(|b| b.acquired_first == 1)));
        if let Some(b) = plan.stats {
            bump_ns_stats(conn, ns.as_str(), &b)?;
        }
        let mut alerts_queued = 0;
        for a in plan.alerts {
            alerts_queued += queue_alert(conn, ns.as_str(), key.as_str(), a, plan.traceparent)?;
        }
        let mut rider_stored = match plan.rider {
            Some(r) => crate::intake::store_rider(conn, r)?,
            None => false,
        };
        if let Some(r) = &plan.report {
            // The update above held (the writer decided on what it read): the attempt and
            // the item's finish go with it. A finish the item's holder no longer owns
            // changes nothing (its new holder finds the record moved on).
            let update = idem_store::IntakeUpdate {
                namespace: ns.as_str().to_owned(),
                key: key.as_str().to_owned(),
                ..r.rider.update.clone()
            };
            crate::intake::intake_update(conn, &update)?;
            crate::outbox::finish(conn, r.rider.item, Some(&r.rider.lease), &r.outcome, r.now)?;
            rider_stored = true;
        }
        Ok(Persisted {
            seqs,
            alerts_queued,
            rider_stored,
        })
    }
}

/// Load → decide → persist for one operation on one record (design: "one atomic step").
pub(crate) fn execute_step(
    conn: &Connection,
    ns: &Namespace,
    key: &Key,
    op: &Op,
    ctx: &ExecCtx,
) -> Result<Ran, StoreError> {
    engine::run_ready(engine::execute(
        &mut WriteTx::new(conn),
        ns,
        key,
        op,
        ctx,
        1,
    ))
}

/// Appends the event of a decision made on a read snapshot (see
/// `read_ops::decide_on_snapshot`).
/// If the record was deleted by retention since the snapshot, its audit trail went with it
/// and the event is not written (a row id must never collect events of a deleted record).
pub(crate) fn append_event_step(
    conn: &Connection,
    rid: i64,
    ns: &Namespace,
    key: &Key,
    draft: &EventDraft,
) -> Result<Vec<Event>, StoreError> {
    let n = conn
        .prepare_cached(
            "INSERT INTO events (rid, namespace, key, at, type, from_state, to_state, attempt, \
             owner, correlation_id, note, actor, cost_tokens, cost_usd_nanos) \
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14 WHERE EXISTS \
             (SELECT 1 FROM records WHERE rowid = ?1 AND namespace = ?2 AND key = ?3)",
        )
        .db()?
        .execute(params![
            rid,
            ns.as_str(),
            key.as_str(),
            draft.at.0,
            draft.kind.as_str(),
            draft.from_state.map(idem_core::State::as_str),
            draft.to_state.map(idem_core::State::as_str),
            i64::from(draft.attempt),
            draft.owner,
            draft.correlation_id,
            draft.note,
            draft.actor,
            draft.cost.map(|c| crate::rows::amount(c.tokens)),
            draft.cost.map(|c| crate::rows::amount(c.usd_nanos)),
        ])
        .db()?;
    Ok(if n == 1 {
        vec![Event::from_draft(conn.last_insert_rowid(), draft.clone())]
    } else {
        vec![]
    })
}

/// Adds a step's counts to its namespace's hourly bucket (in the step's transaction).
fn bump_ns_stats(
    conn: &Connection,
    ns: &str,
    b: &idem_store::engine::StatsBump,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO ns_stats (namespace, hour, acquired_first, acquired_retry, tokens, \
         usd_nanos, retry_tokens, retry_usd_nanos) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (namespace, hour) DO UPDATE SET \
         acquired_first = acquired_first + excluded.acquired_first, \
         acquired_retry = acquired_retry + excluded.acquired_retry, \
         tokens = tokens + excluded.tokens, usd_nanos = usd_nanos + excluded.usd_nanos, \
         retry_tokens = retry_tokens + excluded.retry_tokens, \
         retry_usd_nanos = retry_usd_nanos + excluded.retry_usd_nanos",
    )
    .db()?
    .execute(params![
        ns,
        b.hour,
        b.acquired_first,
        b.acquired_retry,
        b.tokens,
        b.usd_nanos,
        b.retry_tokens,
        b.retry_usd_nanos
    ])
    .db()?;
    Ok(())
}

/// First-time acquisitions in `ns` on UTC day `day`: the sum of the day's 24 hourly stats
/// buckets (every first acquisition bumps `acquired_first` of its hour in its own
/// transaction; retention keeps at least the last 47 hours).
pub(crate) fn daily_count(conn: &Connection, ns: &str, day: i64) -> Result<u64, StoreError> {
    let first_hour = day.saturating_mul(24);
    let n: Option<i64> = conn
        .prepare_cached(
            "SELECT SUM(acquired_first) FROM ns_stats \
             WHERE namespace = ?1 AND hour >= ?2 AND hour < ?3",
        )
        .db()?
        .query_row(
            params![ns, first_hour, first_hour.saturating_add(24)],
            |r| r.get(0),
        )
        .db()?;
    Ok(n.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
}

/// Queues one alert on the outbox; deduplicated per record, reason and attempt. Returns
/// items inserted.
fn queue_alert(
    conn: &Connection,
    ns: &str,
    key: &str,
    a: &AlertDraft,
    traceparent: Option<&str>,
) -> Result<usize, StoreError> {
    let item = idem_store::NewOutboxItem::alert(ns, key, a, traceparent);
    Ok(usize::from(outbox::enqueue(conn, &item, a.at)?.is_some()))
}

/// Applies a policy patch or the pause switch and answers with the new settings.
pub(crate) fn update_namespace_step(
    conn: &Connection,
    ns: &Namespace,
    change: &NamespaceChange,
    now: Timestamp,
) -> Result<NamespaceInfo, StoreError> {
    let (before, paused) = load_namespace_with_secret(conn, ns.as_str())?;
    let (policy, paused) = match change {
        NamespaceChange::Patch(patch) => (before.patch(patch)?, paused),
        NamespaceChange::Pause => (before.clone(), true),
        NamespaceChange::Resume => (before.clone(), false),
    };
    save_namespace(conn, ns.as_str(), &policy, paused, now)?;
    let write =
        AlertSecretWrite::between(before.alert_secret.as_ref(), policy.alert_secret.as_ref());
    crate::secrets::write_alert_secret(conn, ns.as_str(), write, now)?;
    Ok(NamespaceInfo {
        namespace: ns.as_str().to_owned(),
        paused,
        counts: count_states(conn, ns.as_str())?,
        policy,
    })
}

/// `processing` records the sweep would change (see [`sweep_step`]).
static SWEEP_CANDIDATES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT r.namespace, r.key FROM records r \
                 LEFT JOIN namespaces n ON n.namespace = r.namespace \
                 WHERE r.state = {processing} \
                 AND (r.lease_expiry = {review} OR r.stuck_alerted = 0) AND ( \
                   (r.lease_expiry = {review} \
                    AND (r.lease_expires_at IS NULL OR r.lease_expires_at <= ?1)) \
                   OR (r.stuck_alerted = 0 \
                       AND r.active_at <= ?1 - COALESCE(n.stuck_after_ms, ?2))) \
                 ORDER BY r.active_at",
        processing = idem_store::sql::state(idem_core::State::Processing),
        review = idem_store::sql::lease_expiry(idem_core::LeaseExpiry::Review)
    )
});

/// Selects final records past their audit clock into the batch (see [`retention_step`]).
static DUE_TOMBSTONES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO temp.retention_batch (rid, namespace, key) \
         SELECT r.rowid, r.namespace, r.key FROM records r LEFT JOIN namespaces n ON n.namespace = r.namespace \
         WHERE r.state IN ({final_states}) AND r.result_expired IN (0, 1) \
           AND r.final_at <= ?1 - ?2 \
           AND r.final_at <= ?1 - COALESCE(n.audit_retention_ms, ?3)",
        final_states = idem_store::sql::retained_states()
    )
});

/// Deletes the batch, guarded by the state once more.
static DELETE_TOMBSTONES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "DELETE FROM records WHERE rowid IN (SELECT rid FROM temp.retention_batch) \
             AND +state IN ({final_states})",
        final_states = idem_store::sql::retained_states()
    )
});

/// Deletes the delivered intake events of the batch's records that are gone. Driven by the
/// batch through the events' primary key: its cost is the batch's, never the ledger's. An
/// event row stays while one of its deliveries to a named destination is undelivered.
const INTAKE_ROWS_OF_DELETED: &str = "DELETE FROM intake_events WHERE (namespace, key) IN \
     (SELECT b.namespace, b.key FROM temp.retention_batch b \
      WHERE NOT EXISTS (SELECT 1 FROM records r WHERE r.rowid = b.rid)) \
     AND delivered_at IS NOT NULL \
     AND NOT EXISTS (SELECT 1 FROM intake_events d WHERE d.namespace = intake_events.namespace \
                     AND d.event_key = intake_events.key AND d.delivered_at IS NULL)";

/// Drops the stored bodies of the batch's delivered intake events whose record's result was
/// just dropped (an intake record completes when its event is delivered), unless one of the
/// event's deliveries to a named destination still needs it. Driven by the batch (`CROSS
/// JOIN` keeps the batch outermost: unplanned, SQLite scanned `records` instead).
static INTAKE_BODIES_OF_EXPIRED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE intake_events SET body = NULL WHERE (namespace, key) IN \
         (SELECT r.namespace, r.key FROM temp.retention_batch b CROSS JOIN records r \
          ON r.rowid = b.rid \
          WHERE r.state = {completed} AND r.result_expired = 1) \
         AND body IS NOT NULL AND delivered_at IS NOT NULL \
         AND NOT EXISTS (SELECT 1 FROM intake_events d \
                         WHERE d.namespace = intake_events.namespace \
                         AND d.event_key = intake_events.key AND d.delivered_at IS NULL)",
        completed = idem_store::sql::state(idem_core::State::Completed)
    )
});

/// Selects final records past their retention clock into the batch.
static DUE_EXPIRIES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO temp.retention_batch (rid, namespace, key) \
         SELECT r.rowid, r.namespace, r.key FROM records r LEFT JOIN namespaces n ON n.namespace = r.namespace \
         WHERE r.state IN ({final_states}) AND r.result_expired = 0 \
           AND r.final_at <= ?1 - ?2 \
           AND r.final_at <= ?1 - COALESCE(n.retention_ms, ?3)",
        final_states = idem_store::sql::retained_states()
    )
});

/// One `result_expired` event per record of the batch.
static LOG_EXPIRIES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO events (rid, namespace, key, at, type, from_state, to_state, attempt, \
         owner, correlation_id, note, actor) \
         SELECT b.rid, r.namespace, r.key, ?1, {result_expired}, r.state, r.state, r.attempt, r.owner, \
                r.correlation_id, {note}, NULL \
         FROM temp.retention_batch b JOIN records r ON r.rowid = b.rid ORDER BY b.rid",
        result_expired = idem_store::sql::event_type(EventType::ResultExpired),
        note = idem_store::sql::result_expired_note()
    )
});

/// Drops results and payloads of the batch, guarded by the state once more.
static EXPIRE_RESULTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE records SET result = NULL, prepared_payload = NULL, result_expired = 1, \
             version = version + 1 \
             WHERE rowid IN (SELECT rid FROM temp.retention_batch) \
             AND +state IN ({final_states})",
        final_states = idem_store::sql::retained_states()
    )
});

/// One janitor pass over leases: `Op::Sweep` on every `processing` record that the sweep
/// rule would change (expired lease under `lease_expiry=review`, or stuck and not yet
/// alerted). Selecting exactly those keeps records the sweep leaves alone from filling every
/// batch forever.
pub(crate) fn sweep_step(
    conn: &Connection,
    now: Timestamp,
    batch: usize,
) -> Result<SweepReport, StoreError> {
    let default_stuck = Policy::default().stuck_after_ms;
    let candidates: Vec<(String, String)> = {
        let mut stmt = conn
            .prepare_cached(&with_limit(&SWEEP_CANDIDATES, batch))
            .db()?;
        let rows = stmt
            .query_map(params![now.0, default_stuck], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .db()?;
        rows.collect::<Result<_, _>>().db()?
    };
    let mut report = SweepReport::default();
    for (ns, key) in candidates {
        let ns = Namespace::try_from(ns.as_str()).map_err(|e| corrupt("namespace", e))?;
        let key = Key::try_from(key.as_str()).map_err(|e| corrupt("key", e))?;
        report.examined += 1;
        // Each record under its own savepoint: one bad row must not stop the janitor.
        let counted = crate::counts::mark();
        conn.execute_batch("SAVEPOINT sweep_one").db()?;
        match execute_step(conn, &ns, &key, &Op::Sweep, &ExecCtx::at(now)) {
            Ok(ran) => {
                conn.execute_batch("RELEASE sweep_one").db()?;
                if ran
                    .executed
                    .events
                    .iter()
                    .any(|e| e.kind == EventType::MovedToReview)
                {
                    report.moved_to_review += 1;
                }
                report.stuck_alerts += ran.stuck_alerts;
            }
            Err(e) => {
                if conn.is_autocommit() {
                    return Err(e);
                }
                conn.execute_batch("ROLLBACK TO sweep_one; RELEASE sweep_one")
                    .db()?;
                crate::counts::rollback_to(counted);
                tracing::warn!(namespace = %ns, key = %key.masked(), error = %e,
                    "sqlite: sweep skipped a record");
            }
        }
    }
    Ok(report)
}

/// A janitor statement for at most `batch` rows: its limit in its text (see
/// [`crate::rows::limit_clause`]).
fn with_limit(sql: &str, batch: usize) -> String {
    format!("{sql} {}", crate::rows::limit_clause(batch))
}

/// One retention pass, set-based: at most `batch` tombstones past `audit_retention_ms` are
/// deleted with their events, then at most `batch` final records past `retention_ms` lose
/// their result and prepared payload (one `result_expired` event each). The `state IN
/// (<the retained states>)` condition is in every statement that selects rows, so
/// no other state can ever be touched. The selected rowids are kept in a temp table so that
/// every statement works on exactly the same rows and drives its index lookups from the batch
/// (never a scan of the ledger); `+state` keeps the state guard on the final UPDATE/DELETE
/// without letting the planner pick the state index over the rowid lookup.
pub(crate) fn retention_step(
    conn: &Connection,
    now: Timestamp,
    batch: usize,
) -> Result<RetentionReport, StoreError> {
    let defaults = Policy::default();
    // The smallest clock of any namespace bounds the index range scan; the per-namespace
    // clock is then checked row by row inside that range.
    let (min_retention, min_audit): (Option<i64>, Option<i64>) = conn
        .prepare_cached("SELECT MIN(retention_ms), MIN(audit_retention_ms) FROM namespaces")
        .db()?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .db()?;
    let min_retention =
        min_retention.map_or(defaults.retention_ms, |m| m.min(defaults.retention_ms));
    let min_audit = min_audit.map_or(defaults.audit_retention_ms, |m| {
        m.min(defaults.audit_retention_ms)
    });
    // Tombstones first: a record already past its audit clock need not be expired first.
    conn.prepare_cached("DELETE FROM temp.retention_batch")
        .db()?
        .execute([])
        .db()?;
    conn.prepare_cached(&with_limit(&DUE_TOMBSTONES, batch))
        .db()?
        .execute(params![now.0, min_audit, defaults.audit_retention_ms])
        .db()?;
    for sql in [
        "DELETE FROM events WHERE rid IN (SELECT rid FROM temp.retention_batch)",
        "DELETE FROM outbox WHERE (namespace, key) IN \
         (SELECT namespace, key FROM temp.retention_batch)",
    ] {
        conn.prepare_cached(sql).db()?.execute([]).db()?;
    }
    let tombstones_deleted = conn
        .prepare_cached(&DELETE_TOMBSTONES)
        .db()?
        .execute([])
        .db()?;
    // A delivered intake event goes with its record's tombstone (an undelivered one never:
    // its record is not final, so it is not in the batch; `delivered_at` guards it anyway).
    if tombstones_deleted > 0 {
        conn.prepare_cached(INTAKE_ROWS_OF_DELETED)
            .db()?
            .execute([])
            .db()?;
    }
    // Stats buckets older than the window (and a day of slack) are never read again.
    conn.prepare_cached("DELETE FROM ns_stats WHERE hour < ?1")
        .db()?
        .execute(params![
            idem_store::NamespaceStats::first_hour(now) - idem_store::NamespaceStats::HOURS
        ])
        .db()?;

    conn.prepare_cached("DELETE FROM temp.retention_batch")
        .db()?
        .execute([])
        .db()?;
    conn.prepare_cached(&with_limit(&DUE_EXPIRIES, batch))
        .db()?
        .execute(params![now.0, min_retention, defaults.retention_ms])
        .db()?;
    conn.prepare_cached(&LOG_EXPIRIES)
        .db()?
        .execute(params![now.0])
        .db()?;
    // updated_at is left alone on purpose: retention is housekeeping, not a business change,
    // and must not move old records to the top of the newest-first lists.
    let results_expired = conn
        .prepare_cached(&EXPIRE_RESULTS)
        .db()?
        .execute([])
        .db()?;
    // The stored body of a delivered intake event goes with its record's result.
    if results_expired > 0 {
        conn.prepare_cached(&INTAKE_BODIES_OF_EXPIRED)
            .db()?
            .execute([])
            .db()?;
    }
    Ok(RetentionReport {
        results_expired,
        tombstones_deleted,
    })
}

/// Claims due alerts on the outbox for `lease_ms` (other senders skip them meanwhile).
pub(crate) fn due_alerts_step(
    conn: &Connection,
    now: Timestamp,
    max: usize,
    lease_ms: i64,
) -> Result<Vec<PendingAlert>, StoreError> {
    let claim = idem_store::OutboxClaim {
        kind: idem_store::OutboxKind::Alert,
        now,
        limit: max,
        lease_ms,
    };
    let items = outbox::claim(conn, &claim)?;
    // The URL and secret are read now, not when queued: an operator may have fixed them.
    type Target = (Option<String>, Option<idem_core::AlertSecret>);
    let mut urls: HashMap<String, Target> = HashMap::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let (alert_url, alert_secret) = match urls.get(&item.namespace) {
            Some(u) => u.clone(),
            None => {
                let p = load_namespace_with_secret(conn, &item.namespace)?.0;
                let u = (p.alert_url, p.alert_secret);
                urls.insert(item.namespace.clone(), u.clone());
                u
            }
        };
        let mut a = PendingAlert::from_outbox(item)?;
        (a.alert_url, a.alert_secret) = (alert_url, alert_secret);
        out.push(a);
    }
    Ok(out)
}

/// Records one delivery attempt. Only a live alert changes, so a repeated `Sent` writes
/// one `alert_sent` event, not two.
pub(crate) fn finish_alert_step(
    conn: &Connection,
    id: i64,
    outcome: &AlertOutcome,
    now: Timestamp,
) -> Result<(), StoreError> {
    let changed = outbox::finish(conn, id, None, &outcome.into(), now)?;
    if !changed || *outcome != AlertOutcome::Sent {
        return Ok(());
    }
    let Some(item) = outbox::item(conn, id)? else {
        return Ok(());
    };
    let reason = idem_store::AlertPayload::decode(&item.payload)?.reason;
    let (ns, key) = (item.namespace, item.key);
    let (Ok(ns_id), Ok(key_id)) = (
        Namespace::try_from(ns.as_str()),
        Key::try_from(key.as_str()),
    ) else {
        return Err(corrupt(
            "alert",
            format!("bad namespace or key in alert {id}"),
        ));
    };
    // The record may have been deleted by retention since: then there is nothing to annotate.
    if let Some(s) = load_record(conn, &ns_id, &key_id)? {
        insert_event(
            conn,
            s.rid,
            &ns,
            &key,
            &alert_sent_event(&s.record, &reason, now),
        )?;
    }
    Ok(())
}

fn alert_sent_event(rec: &Record, reason: &str, now: Timestamp) -> EventDraft {
    EventDraft {
        cost: None,
        at: now,
        kind: EventType::AlertSent,
        from_state: Some(rec.state),
        to_state: Some(rec.state),
        attempt: rec.attempt,
        owner: rec.owner.clone(),
        correlation_id: rec.correlation_id.clone(),
        note: Some(format!("{}{reason}", idem_store::sql::ALERT_SENT_NOTE)),
        actor: None,
    }
}

pub(crate) fn create_token_step(
    conn: &Connection,
    token: &NewApiToken,
    now: Timestamp,
) -> Result<(), StoreError> {
    let res = conn
        .prepare_cached(
            "INSERT INTO api_tokens (secret_hash, role, scope, label, created_at, expires_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .db()?
        .execute(params![
            token.secret_hash,
            token.role.as_str(),
            token.scope,
            token.label,
            now.0,
            token.expires_at.map(|t| t.0)
        ]);
    match res {
        Ok(_) => Ok(()),
        Err(rusqlite::Error::SqliteFailure(f, _))
            if f.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            Err(StoreError::Internal(
                "a token with this secret already exists".into(),
            ))
        }
        Err(e) => Err(crate::error::map(e)),
    }
}

/// Whether a step's reply says the operation went through (for logs).
pub(crate) fn reply_kind(r: &Result<Reply, idem_core::OpError>) -> &'static str {
    match r {
        Ok(Reply::Claim(c)) => c.outcome.as_str(),
        Ok(Reply::Record(_) | Reply::Written) => "ok",
        Ok(Reply::Fail(_)) => "failed",
        Ok(Reply::Swept { .. }) => "swept",
        Ok(Reply::Intake(_)) => "intake",
        Err(_) => "refused",
    }
}

pub(crate) fn revoke_token_step(
    conn: &Connection,
    id: i64,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached(
            "UPDATE api_tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
        )
        .db()?
        .execute(params![id, now.0])
        .db()?;
    Ok(n > 0)
}

pub(crate) fn touch_token_step(
    conn: &Connection,
    id: i64,
    now: Timestamp,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE api_tokens SET last_used_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
    )
    .db()?
    .execute(params![id, now.0])
    .db()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::open_writer;
    use idem_core::{ClaimRequest, EventType};
    use std::time::Duration;

    fn draft(kind: EventType) -> EventDraft {
        EventDraft {
            cost: None,
            at: Timestamp(1),
            kind,
            from_state: None,
            to_state: None,
            attempt: 1,
            owner: None,
            correlation_id: None,
            note: None,
            actor: None,
        }
    }

    fn event_count(conn: &Connection) -> i64 {
        conn.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
            .expect("count")
    }

    /// A snapshot decision's event is written only while its record still exists under the
    /// same row id: a record deleted since the snapshot (retention) takes no new event.
    #[test]
    fn an_event_for_a_vanished_record_is_not_written() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("a.db"), Duration::from_secs(1)).expect("open");
        let ns = Namespace::try_from("n").expect("ns");
        let key = Key::try_from("k").expect("key");
        let none = append_event_step(&conn, 42, &ns, &key, &draft(EventType::DuplicateHit))
            .expect("append");
        assert!(none.is_empty());
        assert_eq!(event_count(&conn), 0);

        let op = Op::Claim(ClaimRequest::default());
        execute_step(&conn, &ns, &key, &op, &ExecCtx::at(Timestamp(1))).expect("claim");
        let rid = load_record(&conn, &ns, &key)
            .expect("load")
            .expect("record")
            .rid;
        assert_eq!(event_count(&conn), 1);
        // Same row id but another key: not this record.
        let other = Key::try_from("other").expect("key");
        let wrong = append_event_step(&conn, rid, &ns, &other, &draft(EventType::DuplicateHit))
            .expect("append");
        assert!(wrong.is_empty());
        let ok = append_event_step(&conn, rid, &ns, &key, &draft(EventType::DuplicateHit))
            .expect("append");
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].kind, EventType::DuplicateHit);
        assert_eq!(event_count(&conn), 2);
    }

    /// The janitor runs the same statements every pass: SQLite runs them from the cache,
    /// never preparing them again (a bound `LIMIT ?` expired them at every pass).
    #[test]
    fn janitor_passes_run_their_cached_statements_without_preparing_them_again() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("j.db"), Duration::from_secs(1)).expect("open");
        for pass in 0..4 {
            let now = Timestamp(10_000_000 + pass);
            sweep_step(&conn, now, 100).expect("sweep");
            retention_step(&conn, now, 100).expect("retention");
        }
        for sql in [&*SWEEP_CANDIDATES, &*DUE_TOMBSTONES, &*DUE_EXPIRIES] {
            let stmt = conn.prepare_cached(&with_limit(sql, 100)).expect("cached");
            assert_eq!(
                stmt.get_status(rusqlite::StatementStatus::RePrepare),
                0,
                "{sql}"
            );
        }
    }

    /// Every statement of the retention step is driven by an index range or by the batch,
    /// never a scan of a ledger table: a janitor pass costs the same at any ledger size.
    /// (The intake's body and row retention once scanned all of `records` and all of
    /// `intake_events` every pass; the 30-minute soak found it as a growing p99.)
    #[test]
    fn no_retention_statement_scans_a_ledger_table() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("a.db"), Duration::from_secs(1)).expect("open");
        let statements: Vec<&str> = vec![
            DUE_TOMBSTONES.as_str(),
            "DELETE FROM events WHERE rid IN (SELECT rid FROM temp.retention_batch)",
            "DELETE FROM outbox WHERE (namespace, key) IN \
             (SELECT namespace, key FROM temp.retention_batch)",
            DELETE_TOMBSTONES.as_str(),
            INTAKE_ROWS_OF_DELETED,
            DUE_EXPIRIES.as_str(),
            LOG_EXPIRIES.as_str(),
            EXPIRE_RESULTS.as_str(),
            INTAKE_BODIES_OF_EXPIRED.as_str(),
        ];
        for sql in statements {
            let mut stmt = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .expect("explain");
            let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
            let plan: Vec<String> = stmt
                .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
                .expect("plan")
                .collect::<Result<_, _>>()
                .expect("rows");
            let scans: Vec<&String> = plan
                .iter()
                .filter(|l| {
                    l.starts_with("SCAN") && !l.contains("retention_batch") && l != &"SCAN b"
                })
                .collect();
            assert!(scans.is_empty(), "{sql}\nscans: {scans:?}\nplan: {plan:#?}");
        }
    }

    /// Records abandoned under a `reclaim` lease and stuck-alerted once stay `processing` for
    /// good; the sweep's query must not walk past them on every pass (through
    /// `records_processing` it stepped over every one: 100,000 of them took 74-95 ms a pass).
    /// Counted in SQLite's virtual-machine steps, not timed: 2,000 such records beside one
    /// record the sweep must move.
    #[test]
    fn the_sweep_does_not_walk_records_abandoned_under_reclaim() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("a.db"), Duration::from_secs(1)).expect("open");
        let ns = Namespace::try_from("n").expect("ns");
        conn.execute_batch("BEGIN").expect("begin");
        for i in 0..2000 {
            let key = Key::try_from(format!("abandoned-{i}").as_str()).expect("key");
            let op = Op::Claim(ClaimRequest::default());
            execute_step(&conn, &ns, &key, &op, &ExecCtx::at(Timestamp(1))).expect("claim");
        }
        conn.execute_batch("COMMIT").expect("commit");
        // Long abandoned, their stuck alert sent.
        conn.execute(
            "UPDATE records SET stuck_alerted = 1, active_at = 0, lease_expires_at = 1",
            [],
        )
        .expect("abandon");
        let key = Key::try_from("live").expect("key");
        let op = Op::Claim(ClaimRequest::default());
        execute_step(&conn, &ns, &key, &op, &ExecCtx::at(Timestamp(1))).expect("claim");
        let late = Timestamp(1 << 40);
        let mut stmt = conn
            .prepare(&with_limit(&SWEEP_CANDIDATES, 100))
            .expect("prepare");
        let default_stuck = Policy::default().stuck_after_ms;
        let found: Vec<String> = stmt
            .query_map(params![late.0, default_stuck], |r| r.get(1))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(found, ["live"], "only the record the sweep would change");
        let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
        assert!(
            steps < 500,
            "{steps} VM steps for one candidate among 2,000 abandoned"
        );
        drop(stmt);
        let report = sweep_step(&conn, late, 100).expect("sweep");
        assert_eq!((report.examined, report.stuck_alerts), (1, 1), "{report:?}");
    }
}
