//! PostgreSQL's side of the engine: [`PgExec`] implements [`idem_store::engine::Backend`] over
//! one pooled connection.
//!
//! It owns the statements of the decision read (record, namespace row and today's count in
//! one statement) and of persisting a plan: one autocommit statement when the plan has at most
//! one event, no daily ceiling to guard and no alert (the common case: half the round trips),
//! else one transaction whose statements go out pipelined in one round trip. Its shortcut runs
//! the one-round-trip paths of `fast.rs` on the caches. It never decides: every decision is
//! the engine's, and every write is guarded so that a lost race is reported, never persisted.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::conn::Conn as Client;
use futures_util::future::try_join_all;
use idem_core::{Key, Namespace, Op, State};
use idem_store::engine::{Backend, Loaded, Persisted, Plan, PlanWrite, Seqs, Shortcut, TxError};
use idem_store::{sql, ExecCtx};

use crate::cache::{Counters, NsSettings, NO_ROW};
use crate::error::PgError;
use crate::fast::{self, Fast, Remember};
use crate::intake::{RiderParams, UpdateParams, INTAKE_UPDATE, STORE_RIDER};
use crate::outbox::{FinishParams, FINISH};
use crate::rows::{
    as_u64, policy_from_text, record_from_row, stats_params, EventParams, RecordParams,
    INSERT_EVENT, INSERT_RECORD, INSERT_RECORD_WITH_EVENT, INSERT_RECORD_WITH_EVENT_STATS,
    R_RECORD_COLS, UPDATE_RECORD, UPDATE_RECORD_WITH_EVENT, UPDATE_RECORD_WITH_EVENT_STATS,
};
use crate::{corrupt, AlertParams, PgStore, INSERT_ALERT};

/// Today's first-time acquisitions in a namespace (`$1`): the sum of the `acquired_first` of
/// the day's 24 hourly stats buckets (`$2` = the day's first hour; every slot's rows). Every
/// first acquisition bumps its hour's bucket in the statement or transaction that inserts
/// its record, with or without a `daily_limit`, so the day's count needs no counter of its
/// own and a write that counts waits on no other writer (schema V7's slots); the janitor
/// keeps at least the last 47 hours. As SQLite counts.
pub(crate) const TODAY_COUNT: &str = "SELECT COALESCE(sum(acquired_first), 0)::BIGINT \
    FROM ns_stats WHERE namespace = $1 AND hour >= $2 AND hour < $2 + 24";

/// Reads the record, the namespace row and — when the decision may depend on it: no record,
/// and a policy whose `daily_limit` is not `null` — today's acquisition count ([`TODAY_COUNT`],
/// `$3` = the day's first hour) in one statement (one snapshot, one round trip, no locks).
/// Exactly one row comes back; its count is NULL when it was not read (the engine then asks
/// [`Backend::daily_count`] if the decision does need it).
static READ_FOR_DECISION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT n.policy, n.paused, n.revision, n.updated_at, \
         CASE WHEN r.key IS NULL AND strpos(n.policy, '\"daily_limit\":null') = 0 THEN \
             (SELECT COALESCE(sum(s.acquired_first), 0)::BIGINT FROM ns_stats s \
              WHERE s.namespace = $1 AND s.hour >= $3 AND s.hour < $3 + 24) END, {} \
         FROM (SELECT 1 AS one) AS x \
         LEFT JOIN namespaces n ON n.namespace = $1 \
         LEFT JOIN records r ON r.namespace = $1 AND r.key = $2",
        *R_RECORD_COLS
    )
});

/// Guards a first-time acquisition under a ceiling against concurrent ones: `daily_counts`
/// holds one row per namespace and day that every writer under a ceiling locks and moves
/// to `max(row, seen) + 1`, where `seen` (`$4`) is the day's count the decision was made on;
/// no row back (the ceiling was reached concurrently) is a lost race. The row never exceeds
/// the day's count (each move counts the acquisition it guards, in the same transaction,
/// and `seen` is a committed count), so acquisitions made while no ceiling was set — which
/// never touch the row — are counted through `seen`, and those of racing writers through
/// the row.
const BUMP_DAILY: &str = "INSERT INTO daily_counts (namespace, day, count) \
    VALUES ($1, $2, $4::BIGINT + 1) \
    ON CONFLICT (namespace, day) DO UPDATE SET count = GREATEST(daily_counts.count, $4) + 1 \
    WHERE GREATEST(daily_counts.count, $4) < $3 RETURNING count";

/// The first hour bucket of UTC day `day` (`StatsBump::hour` of its first millisecond).
pub(crate) fn first_hour(day: i64) -> i64 {
    day.saturating_mul(24)
}

type StepFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Step, tokio_postgres::Error>> + Send + 'a>>;

/// The result of one pipelined statement of a write transaction.
enum Step {
    /// Rows the guarded record write touched (1 = guard held).
    Record(u64),
    /// The sequence number of event `i`.
    Event(usize, i64),
    /// Whether the daily counter accepted the acquisition.
    Daily(bool),
    /// Alerts actually queued (0 when deduplicated).
    Alert(u64),
    /// The namespace's stats bucket was bumped.
    Stats,
    /// Whether the rider's event row was stored.
    Rider(bool),
    /// The report rider's attempt was appended or its item finished.
    Report,
}

/// Tiny jittered pause so that racing writers do not collide in lockstep.
pub(crate) async fn race_pause(n: u32) {
    let cap = 1 + u64::from(n.min(10)) * 500;
    let micros = rand::random::<u64>() % cap;
    tokio::time::sleep(Duration::from_micros(micros)).await;
}

/// One `execute` call on one pooled connection.
pub(crate) struct PgExec<'s> {
    store: &'s PgStore,
    client: Client,
    /// The day's count [`Backend::daily_count`] answered in this attempt (when the decision
    /// read did not include it): what the ceiling's guard is moved from.
    counted: Option<u64>,
}

impl<'s> PgExec<'s> {
    pub(crate) fn new(store: &'s PgStore, client: Client) -> Self {
        PgExec {
            store,
            client,
            counted: None,
        }
    }
}

impl Backend for PgExec<'_> {
    const NAME: &'static str = "postgres";
    type Ns = Arc<NsSettings>;

    async fn shortcut(
        &mut self,
        ns: &Namespace,
        key: &Key,
        op: &Op,
        ctx: &ExecCtx,
    ) -> Result<Shortcut<Arc<NsSettings>>, TxError> {
        let store = self.store;
        self.counted = None;
        let Some(s) = store.ns_cache.get(ns) else {
            return Ok(Shortcut::Read);
        };
        let cached = store.records.get(ns, key);
        let f = fast::FastOp {
            client: &self.client,
            records: &store.records,
            ns,
            key,
            op,
            ctx,
            s: &s,
        };
        let found = match &cached {
            Some(rec) => fast::cached_record(f, rec).await?,
            None => fast::speculative_insert(f).await?,
        };
        Ok(match found {
            Fast::Done(ran, remember) => {
                Counters::bump(if cached.is_some() {
                    &store.counters.cached_writes
                } else {
                    &store.counters.speculative_inserts
                });
                match remember {
                    Remember::Unchanged => {}
                    Remember::Put(r) => store.records.put(*r),
                    Remember::Forget => store.records.remove(ns, key),
                }
                Shortcut::Done(*ran)
            }
            Fast::Existing(rec) => {
                Counters::bump(&store.counters.speculative_existing);
                Shortcut::Decide(Loaded {
                    record: Some(*rec),
                    ns: s,
                    daily_count: None,
                })
            }
            Fast::Miss => {
                Counters::bump(&store.counters.guard_misses);
                store.records.remove(ns, key);
                store.ns_cache.remove(ns);
                Shortcut::Read
            }
            Fast::Skip => Shortcut::Read,
        })
    }

    async fn load(
        &mut self,
        ns: &Namespace,
        key: &Key,
        day: i64,
    ) -> Result<Loaded<Arc<NsSettings>>, TxError> {
        Ok(self.read_for_decision(ns, key, day).await?)
    }

    async fn daily_count(&mut self, ns: &Namespace, day: i64) -> Result<u64, TxError> {
        // `load` reads the count with the record when the policy text says there is a
        // ceiling; this runs only when it did not and the decision needs it.
        let stmt = self
            .client
            .prepare_cached(TODAY_COUNT)
            .await
            .map_err(PgError::from)?;
        let row = self
            .client
            .query_one(&stmt, &[&ns.as_str(), &first_hour(day)])
            .await
            .map_err(PgError::from)?;
        let n = as_u64(row.try_get(0).map_err(|e| corrupt(&e))?);
        self.counted = Some(n);
        Ok(n)
    }

    async fn persist(
        &mut self,
        ns: &Namespace,
        key: &Key,
        plan: &Plan<'_>,
        basis: Loaded<Arc<NsSettings>>,
    ) -> Result<Persisted, TxError> {
        let from = basis.record.as_ref().map(|r| r.state);
        let seen = basis.daily_count.or(self.counted);
        let persisted = persist(&mut self.client, ns, key, plan, from, seen).await?;
        // An insert writes at least one event: none numbered is a rider's key found taken,
        // with nothing written (and nothing to remember).
        let written = plan.rider.is_none()
            || !matches!(plan.write, PlanWrite::Insert(_))
            || persisted.seqs.get(0) != 0;
        if written {
            // The record as now stored, built once the write is done and only when the cache
            // keeps it.
            let records = &self.store.records;
            match plan.write {
                PlanWrite::None => {
                    if let Some(r) = basis.record {
                        records.put(r);
                    }
                }
                PlanWrite::Insert(r) | PlanWrite::Update { record: r, .. } => {
                    if records.admits(r) {
                        records.put(
                            RecordParams::new(r)
                                .and_then(|p| p.stored(r))
                                .map_err(PgError::from)?,
                        );
                    } else {
                        records.remove(ns, key);
                    }
                }
            }
        }
        Ok(persisted)
    }

    fn attempt_failed(&mut self, ns: &Namespace, key: &Key) {
        // Lost a race or failed midway (the outcome may be unknown): forget the record.
        self.store.records.remove(ns, key);
    }

    async fn lost_race(&mut self, attempt: u32) {
        race_pause(attempt).await;
    }
}

impl PgExec<'_> {
    async fn read_for_decision(
        &mut self,
        ns: &Namespace,
        key: &Key,
        day: i64,
    ) -> Result<Loaded<Arc<NsSettings>>, PgError> {
        Counters::bump(&self.store.counters.full_reads);
        let read = self.client.prepare_cached(&READ_FOR_DECISION).await?;
        let row = self
            .client
            .query_one(&read, &[&ns.as_str(), &key.as_str(), &first_hour(day)])
            .await?;
        let policy_json: Option<String> = row.try_get(0).map_err(|e| corrupt(&e))?;
        let settings = Arc::new(NsSettings {
            policy: policy_from_text(policy_json.as_deref())?,
            paused: row
                .try_get::<_, Option<bool>>(1)
                .map_err(|e| corrupt(&e))?
                .unwrap_or(false),
            revision: row
                .try_get::<_, Option<i64>>(2)
                .map_err(|e| corrupt(&e))?
                .unwrap_or(NO_ROW),
            updated_at: row
                .try_get::<_, Option<i64>>(3)
                .map_err(|e| corrupt(&e))?
                .unwrap_or(NO_ROW),
        });
        let daily = row.try_get::<_, Option<i64>>(4).map_err(|e| corrupt(&e))?;
        let record = match row
            .try_get::<_, Option<String>>(5)
            .map_err(|e| corrupt(&e))?
        {
            Some(_) => Some(record_from_row(&row, 5)?),
            None => None,
        };
        self.store.ns_cache.put(ns, settings.clone());
        Ok(Loaded {
            record,
            ns: settings,
            daily_count: daily.map(as_u64),
        })
    }
}

/// Whether one autocommit statement can persist `plan`: at most one event, no ceiling to
/// guard and no alert. Without a ceiling a first acquisition is still counted: by its
/// stats bump (`acquired_first`), which rides on the record's write (see [`TODAY_COUNT`]).
pub(crate) fn fits_one_statement(plan: &Plan<'_>) -> bool {
    plan.events.len() <= 1
        && plan.alerts.is_empty()
        && plan.acquisition.and_then(|a| a.limit).is_none()
        // A stats bump rides along with a record write and its event (the forms `_STATS`).
        && (plan.stats.is_none()
            || (!matches!(plan.write, PlanWrite::None) && plan.events.len() == 1))
}

/// Adds a step's counts to the namespace's hourly bucket of this connection's slot (its
/// backend pid: no two transactions ever bump the same row, see schema V7).
static BUMP_NS_STATS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO ns_stats (namespace, hour, slot, {}) \
         VALUES ($1, $2, pg_backend_pid(), $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (namespace, hour, slot) DO UPDATE SET {}",
        sql::BUMP_NS_STATS_COLUMNS,
        sql::ns_stats_additions()
    )
});

/// Persists a plan: one autocommit statement when it can, else one transaction. `seen` is
/// the day's count the decision was made on (read when the namespace has a ceiling).
async fn persist(
    client: &mut Client,
    ns: &Namespace,
    key: &Key,
    plan: &Plan<'_>,
    from: Option<State>,
    seen: Option<u64>,
) -> Result<Persisted, PgError> {
    let limit = plan.acquisition.and_then(|a| a.limit);
    let day = plan.acquisition.map_or(0, |a| a.day);
    // Today's count is the sum of the stats buckets: a first acquisition counts through its
    // stats bump, with or without a ceiling.
    debug_assert!(plan
        .acquisition
        .is_none_or(|_| plan.stats.is_some_and(|b| b.acquired_first == 1)));
    let queue_alerts = !plan.alerts.is_empty();
    if matches!(plan.write, PlanWrite::None)
        && plan.events.is_empty()
        && limit.is_none()
        && plan.stats.is_none()
    {
        // Nothing to persist (in_flight without event, backoff, refusals): answer from
        // the snapshot without opening a transaction.
        return Ok(Persisted::default());
    }

    if fits_one_statement(plan) && plan.rider.is_none() && plan.report.is_none() {
        // The common case (one record write and/or one event): a single autocommit
        // statement is atomic and durable on its own, which halves the round trips.
        let seq = single_statement(client, ns, key, plan, from).await?;
        return Ok(Persisted {
            seqs: Seqs::one(seq),
            alerts_queued: 0,
            rider_stored: false,
        });
    }

    // Prepare (cached per connection) before the transaction so that the writes below go
    // out in one pipelined round trip.
    let record_stmt = match plan.write {
        PlanWrite::None => None,
        PlanWrite::Insert(_) => Some(client.prepare_cached(&INSERT_RECORD).await?),
        PlanWrite::Update { .. } => Some(client.prepare_cached(&UPDATE_RECORD).await?),
    };
    let event_stmt = if plan.events.is_empty() {
        None
    } else {
        Some(client.prepare_cached(&INSERT_EVENT).await?)
    };
    let daily_stmt = match limit {
        Some(_) => Some(client.prepare_cached(BUMP_DAILY).await?),
        None => None,
    };
    let alert_stmt = if queue_alerts {
        Some(client.prepare_cached(INSERT_ALERT).await?)
    } else {
        None
    };
    let stats_stmt = match plan.stats {
        Some(_) => Some(client.prepare_cached(&BUMP_NS_STATS).await?),
        None => None,
    };
    let stats = plan.stats.unwrap_or_default();
    let rider_stmt = match plan.rider {
        Some(_) => Some(client.prepare_cached(&STORE_RIDER).await?),
        None => None,
    };
    let rider_params = plan.rider.map(RiderParams::new);
    let report_stmts = match plan.report {
        Some(_) => Some((
            client.prepare_cached(&INTAKE_UPDATE).await?,
            client.prepare_cached(&FINISH).await?,
        )),
        None => None,
    };
    let report_params = plan.report.as_ref().map(|r| {
        (
            UpdateParams::new(&r.rider.update),
            FinishParams::new(r.rider.item, Some(&r.rider.lease), &r.outcome, r.now),
        )
    });

    let (record_params, old_version) = record_params(plan)?;
    let from_state = moved_from(plan, from)?;
    let event_params: Vec<EventParams> = plan
        .events
        .iter()
        .map(|e| EventParams::new(ns, key, e))
        .collect();
    let limit_i64: i64 = limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
    let seen_i64: i64 = seen.map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX));
    let alert_params: Vec<AlertParams> = plan
        .alerts
        .iter()
        .map(|a| AlertParams::new(ns, key, a, plan.traceparent))
        .collect();

    let tx = client.transaction().await?;
    let mut steps: Vec<StepFuture<'_>> = Vec::new();
    if let (Some(stmt), Some(p)) = (&record_stmt, &record_params) {
        let is_insert = matches!(plan.write, PlanWrite::Insert(_));
        let tx = &tx;
        let old_version = &old_version;
        let from_state = &from_state;
        steps.push(Box::pin(async move {
            if is_insert {
                Ok(Step::Record(tx.query(stmt, &p.params()).await?.len() as u64))
            } else {
                let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    p.params().to_vec();
                params.push(old_version);
                params.push(from_state);
                Ok(Step::Record(tx.execute(stmt, &params).await?))
            }
        }));
    }
    if let Some(stmt) = &event_stmt {
        for (i, p) in event_params.iter().enumerate() {
            let tx = &tx;
            steps.push(Box::pin(async move {
                let row = tx.query_one(stmt, &p.params()).await?;
                Ok(Step::Event(i, row.try_get(0)?))
            }));
        }
    }
    let ns_str = ns.as_str();
    if let Some(stmt) = &daily_stmt {
        let tx = &tx;
        let day = &day;
        let lim = &limit_i64;
        let seen = &seen_i64;
        steps.push(Box::pin(async move {
            let rows = tx.query(stmt, &[&ns_str, day, lim, seen]).await?;
            Ok(Step::Daily(!rows.is_empty()))
        }));
    }
    if let Some(stmt) = &alert_stmt {
        for p in &alert_params {
            let tx = &tx;
            steps.push(Box::pin(async move {
                Ok(Step::Alert(tx.execute(stmt, &p.params()).await?))
            }));
        }
    }
    if let Some(stmt) = &stats_stmt {
        let tx = &tx;
        let b = &stats;
        steps.push(Box::pin(async move {
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&ns_str];
            params.extend(stats_params(b));
            tx.execute(stmt, &params).await?;
            Ok(Step::Stats)
        }));
    }
    if let (Some(stmt), Some(p)) = (&rider_stmt, &rider_params) {
        let tx = &tx;
        steps.push(Box::pin(async move {
            let row = tx.query_one(stmt, &p.params()).await?;
            Ok(Step::Rider(row.try_get(0)?))
        }));
    }
    if let (Some((update, finish)), Some((up, fp))) = (&report_stmts, &report_params) {
        let tx = &tx;
        let key_str = key.as_str();
        steps.push(Box::pin(async move {
            // The event's row of this record (the rider rides on this record's update).
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                vec![&ns_str, &key_str];
            params.extend(up.params());
            tx.execute(update, &params).await?;
            Ok(Step::Report)
        }));
        steps.push(Box::pin(async move {
            // A finish the holder no longer owns changes nothing (its new holder finds the
            // record moved on): not a lost race of this step.
            tx.execute(finish, &fp.params()).await?;
            Ok(Step::Report)
        }));
    }
    let results = try_join_all(steps).await?;
    let mut seqs = vec![0i64; plan.events.len()];
    let mut alerts_queued = 0usize;
    let mut rider_stored = false;
    for r in results {
        match r {
            // Lost race: another writer inserted or moved the record, or the daily ceiling
            // filled up meanwhile. Dropping `tx` rolls back; decide again on fresh data.
            Step::Record(n) if n != 1 => return Err(PgError::Retry),
            Step::Daily(false) => return Err(PgError::Retry),
            Step::Record(_) | Step::Daily(true) | Step::Stats | Step::Report => {}
            Step::Event(i, seq) => {
                if let Some(s) = seqs.get_mut(i) {
                    *s = seq;
                }
            }
            Step::Alert(n) => alerts_queued += usize::try_from(n).unwrap_or(0),
            Step::Rider(stored) => rider_stored = stored,
        }
    }
    if let (PlanWrite::Insert(_), Some(r), false) = (plan.write, plan.rider, rider_stored) {
        // The rider found its key's row there. A statement of its own sees it even when a
        // concurrent transaction committed it after the rider's snapshot: another record's
        // row means this record is not to be made (see `Rider`): dropping `tx` rolls back
        // everything, and nothing written is answered as `Persisted::default()`.
        let row = tx
            .query_opt(crate::intake::RIDER_KEY_ROW, &[&ns.as_str(), &key.as_str()])
            .await?;
        if crate::intake::rider_key_taken(r, row.as_ref())? {
            return Ok(Persisted::default());
        }
    }
    tx.commit().await?;
    // The record's update held and committed, so its report rider went with it.
    rider_stored |= plan.report.is_some();
    let mut numbered = Seqs::default();
    for seq in seqs {
        numbered.push(seq);
    }
    Ok(Persisted {
        seqs: numbered,
        alerts_queued,
        rider_stored,
    })
}

/// The record write's parameters and the version its guard expects (0 for an insert).
fn record_params<'a>(plan: &Plan<'a>) -> Result<(Option<RecordParams<'a>>, i64), PgError> {
    Ok(match plan.write {
        PlanWrite::None => (None, 0),
        PlanWrite::Insert(r) => (Some(RecordParams::new(r)?), 0),
        PlanWrite::Update {
            record,
            expected_version,
        } => (Some(RecordParams::new(record)?), expected_version),
    })
}

/// The state an update moves the record from (its count moves with it): the state of the
/// record the plan was decided on, whose version the update's guard requires. Empty for an
/// insert (never read).
fn moved_from(plan: &Plan<'_>, from: Option<State>) -> Result<&'static str, PgError> {
    match (&plan.write, from) {
        (PlanWrite::Update { .. }, Some(s)) => Ok(s.as_str()),
        (PlanWrite::Update { .. }, None) => Err(PgError::Store(idem_store::StoreError::Internal(
            "an update planned without the record it was decided on".into(),
        ))),
        _ => Ok(""),
    }
}

/// Persists a plan with at most one event, no ceiling to guard and no alerts in one
/// autocommit statement. Returns the event's sequence number (0 when there is no event).
async fn single_statement(
    client: &Client,
    ns: &Namespace,
    key: &Key,
    plan: &Plan<'_>,
    from: Option<State>,
) -> Result<i64, PgError> {
    use tokio_postgres::types::ToSql;
    let event = plan.events.first().map(|e| EventParams::new(ns, key, e));
    let (record, old_version) = record_params(plan)?;
    let from_state = moved_from(plan, from)?;
    let stats = plan.stats;
    let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(60);
    let is_update = matches!(plan.write, PlanWrite::Update { .. });
    let sql: &str = match (&record, &event) {
        (None, Some(e)) => {
            params.extend(e.params());
            &INSERT_EVENT
        }
        (None, None) => return Ok(0),
        (Some(r), e) if !is_update => {
            params.extend(r.params());
            match (e, &stats) {
                (Some(e), None) => {
                    params.extend(e.tail_params());
                    &INSERT_RECORD_WITH_EVENT
                }
                (Some(e), Some(b)) => {
                    params.extend(e.tail_params());
                    params.extend(stats_params(b));
                    &INSERT_RECORD_WITH_EVENT_STATS
                }
                (None, _) => &INSERT_RECORD,
            }
        }
        (Some(r), e) => {
            params.extend(r.params());
            params.push(&old_version);
            let sql: &str = match (e, &stats) {
                (Some(e), None) => {
                    params.extend(e.tail_params());
                    &UPDATE_RECORD_WITH_EVENT
                }
                (Some(e), Some(b)) => {
                    params.extend(e.tail_params());
                    params.extend(stats_params(b));
                    &UPDATE_RECORD_WITH_EVENT_STATS
                }
                (None, _) => &UPDATE_RECORD,
            };
            params.push(&from_state);
            sql
        }
    };
    let stmt = client.prepare_cached(sql).await?;
    if is_update && event.is_none() {
        // Plain guarded UPDATE: the row count tells whether the guard held.
        let n = client.execute(&stmt, &params).await?;
        return if n == 1 { Ok(0) } else { Err(PgError::Retry) };
    }
    let rows = client.query(&stmt, &params).await?;
    match rows.first() {
        // No row back: the guarded write found the record inserted or moved by someone else
        // (and therefore inserted no event either). Decide again.
        None => Err(PgError::Retry),
        Some(row) if event.is_some() => Ok(row.try_get(0).map_err(|e| corrupt(&e))?),
        Some(_) => Ok(0),
    }
}
