//! The PostgreSQL store of idem: one ledger shared by many idem instances.
//!
//! [`PgStore`] implements [`idem_store::Store`] over a deadpool pool of tokio-postgres
//! connections. It keeps these invariants:
//!
//! - **No read-then-write without a guard.** [`Store::execute`] reads the record, the
//!   namespace row and today's acquisition count in one statement, lets
//!   [`idem_core::apply`] decide, and persists the decision in one transaction whose record
//!   write is guarded: a fresh record by `INSERT … ON CONFLICT (namespace, key) DO NOTHING
//!   RETURNING`, an existing one by `UPDATE … WHERE version = <version read>`, the daily
//!   ceiling by a conditional upsert. A guard that finds nothing rolls the transaction back and
//!   the decision is re-run on fresh data (bounded; then `Unavailable`). Exactly one of any
//!   number of concurrent claims of a key, from any number of instances, acquires it.
//! - **One round trip on the hot paths, decided by the same rules.** Each instance remembers
//!   namespace settings and the records it last wrote or read. A fresh claim is decided as if
//!   no record existed and persisted by one `INSERT … ON CONFLICT DO NOTHING` statement that
//!   also appends its event and checks the namespace's `revision`; an operation on a
//!   remembered record is decided on it and persisted by one statement guarded by the
//!   record's `version` and `created_at` and the namespace's `revision`. [`idem_core::apply`]
//!   still makes every decision; a guard that fails (another instance, an operator or the
//!   janitor changed the row) drops the entry and the operation runs the read path above.
//!   See `fast.rs`.
//! - **Reads take no row locks.** Decisions that only append an event (duplicate hits,
//!   `in_flight`, conflicts) never lock the record row, so a hot key replays concurrently.
//! - **Durable before acknowledged.** A reply is returned only after `COMMIT` succeeded. Any
//!   error on the way — including a lost connection during `COMMIT`, whose outcome is then
//!   unknown — is reported as an error (`Unavailable`), never as success; retrying the same
//!   request is safe because every operation is idempotent by construction.
//! - **Never hang.** Connect, pool wait, statement and whole-call timeouts bound every call;
//!   broken connections are dropped by the pool and replaced when the database is back.
//! - **Portable SQL.** Only statements PostgreSQL-wire distributed engines also run (see
//!   `docs/deployment.md`): no advisory locks outside migrations, no LISTEN/NOTIFY, no stored
//!   procedures. The janitor works in small `FOR UPDATE SKIP LOCKED` batches, so many
//!   instances share it without double work and without making claims wait long.
//!
//! TLS follows the `sslmode` / `sslrootcert` parameters of the URL, as libpq does (`tls.rs`).

mod cache;
mod error;
mod fast;
mod janitor;
mod outbox;
mod rows;
mod schema;
mod secrets;
pub mod tls;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cache::{Counters, NsCache, NsSettings, RecordCache, NO_ROW};
use deadpool_postgres::{Client, ManagerConfig, Pool, RecyclingMethod, Runtime};
use fast::Fast;
use futures_util::future::try_join_all;
use idem_core::{Event, Key, Namespace, Op, Policy, Record, Timestamp, Write};
use idem_store::{
    ApiToken, Cursor, ExecCtx, Executed, ListQuery, NamespaceChange, NamespaceInfo, NewApiToken,
    Page, RecordWithEvents, Role, StateCounts, Store, StoreError,
};

use error::{store_err, PgError};
use rows::{
    as_i64, as_u64, event_from_row, parse_state, policy_from_text, policy_text, record_from_row,
    EventParams, RecordParams, EVENT_COLS, INSERT_EVENT, INSERT_RECORD, INSERT_RECORD_WITH_EVENT,
    RECORD_COLS, R_RECORD_COLS, UPDATE_RECORD, UPDATE_RECORD_WITH_EVENT,
};

/// Connection and timeout settings.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections per idem instance. Every in-flight call holds one for a few round trips;
    /// see `docs/deployment.md` for sizing against `max_connections`.
    pub max_connections: usize,
    /// TCP + startup handshake limit for a new connection.
    pub connect_timeout: Duration,
    /// How long a call waits for a free pooled connection before answering `Unavailable`.
    pub pool_wait_timeout: Duration,
    /// Server-side `statement_timeout` for every statement.
    pub statement_timeout: Duration,
    /// Upper bound on a whole store call (all retries included).
    pub op_timeout: Duration,
    /// Attempts of one `execute` when it keeps losing races.
    pub max_attempts: u32,
    /// Records this instance remembers (the last version it wrote or read) so that the next
    /// operation on the same key is decided without a read; 0 turns the cache off. Every write
    /// decided on a remembered record is guarded by its version, so a stale entry costs a
    /// round trip, never a wrong answer.
    pub record_cache: usize,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            max_connections: 16,
            connect_timeout: Duration::from_secs(3),
            pool_wait_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(5),
            op_timeout: Duration::from_secs(10),
            max_attempts: 64,
            record_cache: 4096,
        }
    }
}

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    opts: Arc<PgOptions>,
    /// For logs and `Debug`: the URL without its password.
    url: Arc<str>,
    /// Namespace settings as last read (guarded by `revision` on every use).
    ns_cache: Arc<NsCache>,
    /// Records as last written or read by this instance (guarded by `version` on every use).
    records: Arc<RecordCache>,
    counters: Arc<Counters>,
}

/// How often [`PgStore::execute`] took each path since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FastPathStats {
    /// Fresh claims persisted by one speculative insert (one round trip).
    pub speculative_inserts: u64,
    /// Speculative inserts that found the key taken and decided on the record they returned.
    pub speculative_existing: u64,
    /// Operations decided on a remembered record and persisted by one guarded statement.
    pub cached_writes: u64,
    /// Writes whose namespace or record guard failed (stale cache): decided again on a read.
    pub guard_misses: u64,
    /// Operations decided after a read of record, namespace and daily count.
    pub full_reads: u64,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.url)
            .field("max_connections", &self.opts.max_connections)
            .finish()
    }
}

/// Reads the record, the namespace row and today's acquisition count in one statement (one
/// snapshot, one round trip, no locks). Exactly one row comes back.
static READ_FOR_DECISION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT n.policy, n.paused, n.revision, n.updated_at, d.count, {} \
         FROM (SELECT 1 AS one) AS x \
         LEFT JOIN namespaces n ON n.namespace = $1 \
         LEFT JOIN daily_counts d ON d.namespace = $1 AND d.day = $3 \
         LEFT JOIN records r ON r.namespace = $1 AND r.key = $2",
        *R_RECORD_COLS
    )
});

/// Counts a first-time acquisition unless the ceiling was reached concurrently (no row back).
const BUMP_DAILY: &str = "INSERT INTO daily_counts (namespace, day, count) VALUES ($1, $2, 1) \
    ON CONFLICT (namespace, day) DO UPDATE SET count = daily_counts.count + 1 \
    WHERE daily_counts.count < $3 RETURNING count";

/// Queues an alert on the outbox; the unique key deduplicates per record, reason and attempt.
const INSERT_ALERT: &str = "INSERT INTO outbox \
    (kind, namespace, key, dedupe, payload, created_at, due_at) \
    VALUES ('alert', $1, $2, $3, $4, $5, $5) \
    ON CONFLICT (namespace, key, kind, dedupe) DO NOTHING";

/// Operations after which an instance makes sure `records` has planner statistics.
const FIRST_ANALYZE_AFTER: u64 = 1000;

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
}

impl PgStore {
    /// Connects a pool to `url` with default [`PgOptions`] and runs migrations.
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// Connects a pool to `url` and runs migrations.
    pub async fn connect_with(url: &str, opts: PgOptions) -> Result<PgStore, StoreError> {
        let redacted = idem_core::redact_db_url(url);
        let (url, tls) = tls::PgTls::split_url(url)
            .map_err(|e| StoreError::Internal(format!("postgres url {redacted}: {e}")))?;
        let mut cfg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Internal(format!("invalid postgres url {redacted}: {e}")))?;
        cfg.connect_timeout(opts.connect_timeout);
        // Dead peers are noticed even when no statement is running (keepalive) and when one is
        // (tcp_user_timeout bounds unacknowledged writes).
        cfg.keepalives(true);
        cfg.keepalives_idle(Duration::from_secs(10));
        cfg.keepalives_interval(Duration::from_secs(2));
        cfg.keepalives_retries(3);
        cfg.tcp_user_timeout(opts.statement_timeout + Duration::from_secs(1));
        if cfg.get_application_name().is_none() {
            cfg.application_name("idem");
        }
        let stmt_ms = opts.statement_timeout.as_millis();
        let options = format!(
            "{} -c statement_timeout={stmt_ms} -c idle_in_transaction_session_timeout={}",
            cfg.get_options().unwrap_or(""),
            stmt_ms * 2
        );
        cfg.options(options.trim());
        cfg.ssl_mode(tls.ssl_mode());
        let mgr = tls
            .manager(
                cfg,
                ManagerConfig {
                    // A closed connection is detected without a round trip; a broken one fails
                    // its next statement, is reported as Unavailable and is then dropped.
                    recycling_method: RecyclingMethod::Fast,
                },
            )
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let pool = Pool::builder(mgr)
            .max_size(opts.max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(opts.pool_wait_timeout))
            .create_timeout(Some(opts.connect_timeout))
            .recycle_timeout(Some(opts.connect_timeout))
            .build()
            .map_err(|e| StoreError::Internal(format!("postgres pool: {e}")))?;
        let store = PgStore {
            pool,
            url: Arc::from(redacted.as_str()),
            ns_cache: Arc::new(NsCache::default()),
            records: Arc::new(RecordCache::new(opts.record_cache)),
            counters: Arc::new(Counters::default()),
            opts: Arc::new(opts),
        };
        let mut client = store.client().await.map_err(store_err)?;
        let now = idem_core::Clock::now(&idem_core::SystemClock).0;
        let ran = schema::migrate(&mut client, now).await?;
        if !ran.is_empty() {
            tracing::info!(url = %store.url, versions = ?ran, "postgres schema migrated");
        }
        tracing::info!(url = %store.url, "postgres store ready");
        Ok(store)
    }

    /// How often each path of [`Store::execute`] was taken (diagnostics and tests).
    pub fn fast_path_stats(&self) -> FastPathStats {
        self.counters.snapshot()
    }

    async fn client(&self) -> Result<Client, PgError> {
        Ok(self.pool.get().await?)
    }

    /// Counts an operation; the [`FIRST_ANALYZE_AFTER`]-th one starts [`Self::first_analyze`].
    fn count_op(&self) {
        if self
            .counters
            .ops
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
            == FIRST_ANALYZE_AFTER
        {
            let store = self.clone();
            tokio::spawn(async move { store.first_analyze().await });
        }
    }

    /// Gives a young `records` table planner statistics.
    ///
    /// Without statistics PostgreSQL costs a lookup by `(namespace, key)` the same through the
    /// primary key and through `records_state_list (namespace, state, updated_at, key)`, picks
    /// the latter, and every statement then walks all index entries of the namespace — until
    /// autovacuum first analyzes the table, a minute or more later (measured on a fresh
    /// database: 870 pairs/s and 1.4 ms of PostgreSQL CPU per pair, against 2,200 pairs/s and
    /// 0.4 ms once analyzed). So an instance that has run [`FIRST_ANALYZE_AFTER`] operations
    /// analyzes the table once if it is still small by the planner's estimate. Best effort: a
    /// failure (no privilege, an engine without `ANALYZE`) is only logged.
    async fn first_analyze(&self) {
        let run = async {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "SELECT reltuples::BIGINT FROM pg_class WHERE oid = 'records'::regclass",
                    &[],
                )
                .await?;
            let estimated: i64 = row.try_get(0)?;
            if estimated < FIRST_ANALYZE_AFTER as i64 * 10 {
                client.batch_execute("ANALYZE records").await?;
                return Ok::<bool, PgError>(true);
            }
            Ok(false)
        };
        match self.bounded(async { run.await.map_err(store_err) }).await {
            Ok(true) => tracing::info!(url = %self.url, "analyzed the young records table"),
            Ok(false) => {}
            Err(e) => tracing::debug!(url = %self.url, error = %e, "first analyze skipped"),
        }
    }

    /// Bounds a whole call: a database that stops answering yields `Unavailable`, not a hang.
    async fn bounded<T>(
        &self,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.opts.op_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "postgres: no answer within {:?}",
                self.opts.op_timeout
            ))),
        }
    }

    /// Runs `attempt` until it neither loses a race nor hits a serialization failure.
    async fn with_retries<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, PgError>>,
    {
        for n in 0..self.opts.max_attempts {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(PgError::Store(e)) => return Err(e),
                Err(PgError::Retry) => {
                    // Tiny jittered pause so that racing writers do not collide in lockstep.
                    let cap = 1 + u64::from(n.min(10)) * 500;
                    let micros = rand::random::<u64>() % cap;
                    tokio::time::sleep(Duration::from_micros(micros)).await;
                }
            }
        }
        tracing::warn!(
            op = what,
            "postgres: gave up after repeated write conflicts"
        );
        Err(StoreError::Unavailable(format!(
            "postgres: {what} kept conflicting with concurrent writers; try again"
        )))
    }

    async fn execute_once(
        &self,
        ns: &Namespace,
        key: &Key,
        op: &Op,
        ctx: &ExecCtx,
    ) -> Result<Executed, PgError> {
        let mut client = self.client().await?;
        let result = self.execute_on(&mut client, ns, key, op, ctx).await;
        if result.is_err() {
            // Lost a race or failed midway (the outcome may be unknown): forget the record.
            self.records.remove(ns, key);
        }
        result
    }

    async fn execute_on(
        &self,
        client: &mut Client,
        ns: &Namespace,
        key: &Key,
        op: &Op,
        ctx: &ExecCtx,
    ) -> Result<Executed, PgError> {
        if let Some(s) = self.ns_cache.get(ns) {
            let cached = self.records.get(ns, key);
            let fast = match &cached {
                Some(rec) => fast::cached_record(client, ns, key, op, ctx, &s, rec).await?,
                None => fast::speculative_claim(client, ns, key, op, ctx, &s).await?,
            };
            match fast {
                Fast::Done(executed, stored) => {
                    Counters::bump(if cached.is_some() {
                        &self.counters.cached_writes
                    } else {
                        &self.counters.speculative_inserts
                    });
                    if let Some(r) = stored {
                        self.records.put(*r);
                    }
                    return Ok(*executed);
                }
                Fast::Existing(rec) => {
                    Counters::bump(&self.counters.speculative_existing);
                    return self
                        .decide_and_persist(client, ns, key, op, ctx, &s, 0, Some(*rec))
                        .await;
                }
                Fast::Miss => {
                    Counters::bump(&self.counters.guard_misses);
                    self.records.remove(ns, key);
                    self.ns_cache.remove(ns);
                }
                Fast::Skip => {}
            }
        }
        Counters::bump(&self.counters.full_reads);
        let read = client.prepare_cached(&READ_FOR_DECISION).await?;
        let day = ctx.now.utc_day();
        let row = client
            .query_one(&read, &[&ns.as_str(), &key.as_str(), &day])
            .await?;
        let policy_json: Option<String> = row.try_get(0).map_err(|e| corrupt(&e))?;
        let settings = NsSettings {
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
        };
        let daily = row.try_get::<_, Option<i64>>(4).map_err(|e| corrupt(&e))?;
        let existing = match row
            .try_get::<_, Option<String>>(5)
            .map_err(|e| corrupt(&e))?
        {
            Some(_) => Some(record_from_row(&row, 5)?),
            None => None,
        };
        self.ns_cache.put(ns, settings.clone());
        self.decide_and_persist(
            client,
            ns,
            key,
            op,
            ctx,
            &settings,
            as_u64(daily.unwrap_or(0)),
            existing,
        )
        .await
    }

    /// Decides on `existing` (as read, in the same snapshot as `settings`) and persists the
    /// decision with the guards of the normal path; remembers the record as now stored.
    #[allow(clippy::too_many_arguments)]
    async fn decide_and_persist(
        &self,
        client: &mut Client,
        ns: &Namespace,
        key: &Key,
        op: &Op,
        ctx: &ExecCtx,
        settings: &NsSettings,
        daily_count: u64,
        existing: Option<Record>,
    ) -> Result<Executed, PgError> {
        let policy = &settings.policy;
        let core_ctx = ctx.decision(policy, settings.paused, daily_count);
        let t = idem_core::apply(ns, key, existing.as_ref(), op, &core_ctx);
        let from_state = existing.as_ref().map(|r| r.state);
        let stored = match &t.write {
            Write::None => existing,
            Write::Insert(r) | Write::Update(r) => {
                if self.records.enabled() {
                    Some(RecordParams::new(r)?.stored(r)?)
                } else {
                    None
                }
            }
        };
        let executed = self
            .persist(client, ns, key, t, policy, from_state, ctx.now.utc_day())
            .await?;
        if let Some(r) = stored {
            self.records.put(r);
        }
        Ok(executed)
    }

    /// Persists a transition: one autocommit statement when it can, else one transaction.
    #[allow(clippy::too_many_arguments)]
    async fn persist(
        &self,
        client: &mut Client,
        ns: &Namespace,
        key: &Key,
        t: idem_core::Transition,
        policy: &Policy,
        from_state: Option<idem_core::State>,
        day: i64,
    ) -> Result<Executed, PgError> {
        let limit = if t.first_acquisition {
            policy.daily_limit
        } else {
            None
        };
        let queue_alerts = policy.alert_url.is_some() && !t.alerts.is_empty();
        if matches!(t.write, Write::None) && t.events.is_empty() && limit.is_none() {
            // Nothing to persist (in_flight without event, backoff, refusals): answer from
            // the snapshot without opening a transaction.
            return Ok(Executed {
                reply: t.reply,
                events: vec![],
                from_state,
                alerts_queued: 0,
            });
        }

        if limit.is_none() && !queue_alerts && t.events.len() <= 1 {
            // The common case (one record write and/or one event): a single autocommit
            // statement is atomic and durable on its own, which halves the round trips.
            let (seq, alerts_queued) = single_statement(client, ns, key, &t).await?;
            let events = t
                .events
                .into_iter()
                .map(|d| Event::from_draft(seq, d))
                .collect();
            return Ok(Executed {
                reply: t.reply,
                events,
                from_state,
                alerts_queued,
            });
        }

        // Prepare (cached per connection) before the transaction so that the writes below go
        // out in one pipelined round trip.
        let record_stmt = match &t.write {
            Write::None => None,
            Write::Insert(_) => Some(client.prepare_cached(&INSERT_RECORD).await?),
            Write::Update(_) => Some(client.prepare_cached(&UPDATE_RECORD).await?),
        };
        let event_stmt = if t.events.is_empty() {
            None
        } else {
            Some(client.prepare_cached(INSERT_EVENT).await?)
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

        let record_params = match &t.write {
            Write::None => None,
            Write::Insert(r) | Write::Update(r) => Some(RecordParams::new(r)?),
        };
        let old_version: i64 = record_params.as_ref().map_or(0, |p| p.version - 1);
        let event_params: Vec<EventParams> = t
            .events
            .iter()
            .map(|e| EventParams::new(ns, key, e))
            .collect();
        let limit_i64: i64 = limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let alert_params: Vec<AlertParams> = if queue_alerts {
            t.alerts
                .iter()
                .map(|a| AlertParams::new(ns, key, a))
                .collect()
        } else {
            vec![]
        };

        let tx = client.transaction().await?;
        let mut steps: Vec<StepFuture<'_>> = Vec::new();
        if let (Some(stmt), Some(p)) = (&record_stmt, &record_params) {
            let is_insert = matches!(t.write, Write::Insert(_));
            let tx = &tx;
            steps.push(Box::pin(async move {
                if is_insert {
                    Ok(Step::Record(tx.query(stmt, &p.params()).await?.len() as u64))
                } else {
                    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                        p.params().to_vec();
                    params.push(&old_version);
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
            steps.push(Box::pin(async move {
                let rows = tx.query(stmt, &[&ns_str, day, lim]).await?;
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
        let results = try_join_all(steps).await?;
        let mut seqs = vec![0i64; t.events.len()];
        let mut alerts_queued = 0usize;
        for r in results {
            match r {
                // Lost race: another writer inserted or moved the record, or the daily ceiling
                // filled up meanwhile. Dropping `tx` rolls back; decide again on fresh data.
                Step::Record(n) if n != 1 => return Err(PgError::Retry),
                Step::Daily(false) => return Err(PgError::Retry),
                Step::Record(_) | Step::Daily(true) => {}
                Step::Event(i, seq) => {
                    if let Some(s) = seqs.get_mut(i) {
                        *s = seq;
                    }
                }
                Step::Alert(n) => alerts_queued += usize::try_from(n).unwrap_or(0),
            }
        }
        tx.commit().await?;
        let events: Vec<Event> = t
            .events
            .into_iter()
            .zip(seqs)
            .map(|(d, seq)| Event::from_draft(seq, d))
            .collect();
        Ok(Executed {
            reply: t.reply,
            events,
            from_state,
            alerts_queued,
        })
    }

    async fn namespace_info(
        &self,
        client: &Client,
        ns: &Namespace,
    ) -> Result<NamespaceInfo, PgError> {
        let ns_stmt = client
            .prepare_cached("SELECT policy, paused FROM namespaces WHERE namespace = $1")
            .await?;
        let counts_stmt = client
            .prepare_cached(
                "SELECT state, count(*) FROM records WHERE namespace = $1 GROUP BY state",
            )
            .await?;
        let ns_str = ns.as_str();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&ns_str];
        let (ns_row, count_rows) = tokio::try_join!(
            client.query_opt(&ns_stmt, &params),
            client.query(&counts_stmt, &params)
        )?;
        let (policy, paused) = match ns_row {
            Some(r) => {
                let text: String = r.try_get(0).map_err(|e| corrupt(&e))?;
                (
                    policy_from_text(Some(&text))?,
                    r.try_get(1).map_err(|e| corrupt(&e))?,
                )
            }
            None => (Policy::default(), false),
        };
        let mut pairs = Vec::with_capacity(count_rows.len());
        for r in count_rows {
            let s: String = r.try_get(0).map_err(|e| corrupt(&e))?;
            let n: i64 = r.try_get(1).map_err(|e| corrupt(&e))?;
            pairs.push((parse_state(&s)?, as_u64(n)));
        }
        Ok(NamespaceInfo {
            namespace: ns.as_str().to_owned(),
            paused,
            policy,
            counts: StateCounts::from_pairs(pairs),
        })
    }

    async fn update_namespace_once(
        &self,
        ns: &Namespace,
        change: &NamespaceChange,
        now: Timestamp,
    ) -> Result<(), PgError> {
        let mut client = self.client().await?;
        let default_text = policy_text(&Policy::default())?;
        let d = Policy::default();
        let tx = client.transaction().await?;
        // Make sure the row exists, then lock it: concurrent patches merge one after the other.
        tx.execute(
            "INSERT INTO namespaces \
             (namespace, policy, paused, retention_ms, audit_retention_ms, stuck_after_ms, \
              updated_at) VALUES ($1, $2, FALSE, $3, $4, $5, $6) \
             ON CONFLICT (namespace) DO NOTHING",
            &[
                &ns.as_str(),
                &default_text,
                &d.retention_ms,
                &d.audit_retention_ms,
                &d.stuck_after_ms,
                &now.0,
            ],
        )
        .await?;
        let row = tx
            .query_one(
                "SELECT policy, paused FROM namespaces WHERE namespace = $1 FOR UPDATE",
                &[&ns.as_str()],
            )
            .await?;
        let text: String = row.try_get(0).map_err(|e| corrupt(&e))?;
        let mut policy = policy_from_text(Some(&text))?;
        let mut paused: bool = row.try_get(1).map_err(|e| corrupt(&e))?;
        match change {
            NamespaceChange::Patch(p) => policy = policy.patch(p).map_err(StoreError::from)?,
            NamespaceChange::Pause => paused = true,
            NamespaceChange::Resume => paused = false,
        }
        tx.execute(
            "UPDATE namespaces SET policy = $2, paused = $3, retention_ms = $4, \
             audit_retention_ms = $5, stuck_after_ms = $6, updated_at = $7, \
             revision = revision + 1 WHERE namespace = $1",
            &[
                &ns.as_str(),
                &policy_text(&policy)?,
                &paused,
                &policy.retention_ms,
                &policy.audit_retention_ms,
                &policy.stuck_after_ms,
                &now.0,
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Persists a transition with at most one event, no daily counter and no alerts in one
/// autocommit statement. Returns the event's sequence number (0 when there is no event).
async fn single_statement(
    client: &Client,
    ns: &Namespace,
    key: &Key,
    t: &idem_core::Transition,
) -> Result<(i64, usize), PgError> {
    use tokio_postgres::types::ToSql;
    let event = t.events.first().map(|e| EventParams::new(ns, key, e));
    let record = match &t.write {
        Write::None => None,
        Write::Insert(r) | Write::Update(r) => Some(RecordParams::new(r)?),
    };
    let old_version = record.as_ref().map_or(0, |p| p.version - 1);
    let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(40);
    let sql: &str = match (&t.write, &record, &event) {
        (Write::None, _, Some(e)) => {
            params.extend(e.params());
            INSERT_EVENT
        }
        (Write::None, _, None) => return Ok((0, 0)),
        (Write::Insert(_), Some(r), e) => {
            params.extend(r.params());
            match e {
                Some(e) => {
                    params.extend(e.tail_params());
                    &INSERT_RECORD_WITH_EVENT
                }
                None => &INSERT_RECORD,
            }
        }
        (Write::Update(_), Some(r), e) => {
            params.extend(r.params());
            params.push(&old_version);
            match e {
                Some(e) => {
                    params.extend(e.tail_params());
                    &UPDATE_RECORD_WITH_EVENT
                }
                None => &UPDATE_RECORD,
            }
        }
        (_, None, _) => return Err(PgError::Store(StoreError::Internal("no record".into()))),
    };
    let stmt = client.prepare_cached(sql).await?;
    if matches!(t.write, Write::Update(_)) && event.is_none() {
        // Plain guarded UPDATE: the row count tells whether the guard held.
        let n = client.execute(&stmt, &params).await?;
        return if n == 1 {
            Ok((0, 0))
        } else {
            Err(PgError::Retry)
        };
    }
    let rows = client.query(&stmt, &params).await?;
    match rows.first() {
        // No row back: the guarded write found the record inserted or moved by someone else
        // (and therefore inserted no event either). Decide again.
        None => Err(PgError::Retry),
        Some(row) if event.is_some() => Ok((row.try_get(0).map_err(|e| corrupt(&e))?, 0)),
        Some(_) => Ok((0, 0)),
    }
}

fn corrupt(e: &tokio_postgres::Error) -> PgError {
    PgError::Store(StoreError::Corrupt(format!("postgres row: {e}")))
}

/// An alert draft as owned SQL parameters for [`INSERT_ALERT`] (its outbox item).
struct AlertParams(idem_store::NewOutboxItem);

impl AlertParams {
    fn new(ns: &Namespace, key: &Key, a: &idem_core::AlertDraft) -> Self {
        AlertParams(idem_store::NewOutboxItem::alert(
            ns.as_str(),
            key.as_str(),
            a,
        ))
    }
    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 5] {
        let i = &self.0;
        [&i.namespace, &i.key, &i.dedupe, &i.payload, &i.due_at.0]
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn execute(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        ctx: ExecCtx,
    ) -> Result<Executed, StoreError> {
        let name = op.name();
        let executed = self
            .bounded(self.with_retries(name, || self.execute_once(ns, key, &op, &ctx)))
            .await;
        self.count_op();
        executed
    }

    async fn get(&self, ns: &Namespace, key: &Key) -> Result<Option<RecordWithEvents>, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let rec_stmt = client
                .prepare_cached(&format!(
                    "SELECT {} FROM records WHERE namespace = $1 AND key = $2",
                    *RECORD_COLS
                ))
                .await
                .map_err(store_err)?;
            let ev_stmt = client
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLS} FROM events WHERE namespace = $1 AND key = $2 \
                     ORDER BY seq"
                ))
                .await
                .map_err(store_err)?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                [&ns.as_str(), &key.as_str()];
            // One round trip for both; a record written between the two reads only adds
            // events, which is harmless for a display.
            let (rec, evs) = tokio::try_join!(
                client.query_opt(&rec_stmt, &params),
                client.query(&ev_stmt, &params)
            )
            .map_err(store_err)?;
            let Some(rec) = rec else { return Ok(None) };
            let record = record_from_row(&rec, 0)?;
            let events = evs
                .iter()
                .map(event_from_row)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(RecordWithEvents { record, events }))
        })
        .await
    }

    async fn list(&self, ns: &Namespace, query: &ListQuery) -> Result<Page, StoreError> {
        let cursor = match &query.cursor {
            Some(c) => Some(Cursor::decode(c).ok_or(StoreError::InvalidCursor)?),
            None => None,
        };
        let limit = query.limit.clamp(1, 1000);
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let mut sql = format!("SELECT {} FROM records WHERE namespace = $1", *RECORD_COLS);
            let state = query.state.map(|s| s.as_str());
            let (c_at, c_key) = match &cursor {
                Some(c) => (c.updated_at, c.key.clone()),
                None => (0, String::new()),
            };
            let fetch = as_i64(limit + 1);
            let ns_str = ns.as_str();
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&ns_str];
            if let Some(s) = &state {
                params.push(s);
                sql.push_str(&format!(" AND state = ${}", params.len()));
            }
            if cursor.is_some() {
                params.push(&c_at);
                params.push(&c_key);
                sql.push_str(&format!(
                    " AND (updated_at, key) < (${}, ${})",
                    params.len() - 1,
                    params.len()
                ));
            }
            params.push(&fetch);
            sql.push_str(&format!(
                " ORDER BY updated_at DESC, key DESC LIMIT ${}",
                params.len()
            ));
            let stmt = client.prepare_cached(&sql).await.map_err(store_err)?;
            let rows = client.query(&stmt, &params).await.map_err(store_err)?;
            let mut items = rows
                .iter()
                .map(|r| record_from_row(r, 0))
                .collect::<Result<Vec<_>, _>>()?;
            let next_cursor = if items.len() > limit {
                items.truncate(limit);
                items.last().map(|r| {
                    Cursor {
                        updated_at: r.updated_at.0,
                        key: r.key.as_str().to_owned(),
                    }
                    .encode()
                })
            } else {
                None
            };
            Ok(Page { items, next_cursor })
        })
        .await
    }

    async fn namespace(&self, ns: &Namespace) -> Result<NamespaceInfo, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            self.namespace_info(&client, ns).await.map_err(store_err)
        })
        .await
    }

    async fn update_namespace(
        &self,
        ns: &Namespace,
        change: NamespaceChange,
        now: Timestamp,
    ) -> Result<NamespaceInfo, StoreError> {
        self.bounded(async {
            let changed = self
                .with_retries("update_namespace", || {
                    self.update_namespace_once(ns, &change, now)
                })
                .await;
            // Other instances learn of the change from their guards; this one at once.
            self.ns_cache.remove(ns);
            changed?;
            let client = self.client().await.map_err(store_err)?;
            self.namespace_info(&client, ns).await.map_err(store_err)
        })
        .await
    }

    async fn sweep_once(
        &self,
        now: Timestamp,
        batch: usize,
    ) -> Result<idem_store::SweepReport, StoreError> {
        self.bounded(self.with_retries("sweep", || janitor::sweep_once(self, now, batch)))
            .await
    }

    async fn retention_once(
        &self,
        now: Timestamp,
        batch: usize,
    ) -> Result<idem_store::RetentionReport, StoreError> {
        self.bounded(self.with_retries("retention", || janitor::retention_once(self, now, batch)))
            .await
    }

    async fn stats(&self, now: Timestamp) -> Result<idem_store::Stats, StoreError> {
        self.bounded(async { janitor::stats(self, now).await.map_err(store_err) })
            .await
    }

    async fn due_alerts(
        &self,
        now: Timestamp,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<idem_store::PendingAlert>, StoreError> {
        self.bounded(self.with_retries("due_alerts", || {
            janitor::due_alerts(self, now, limit, lease_ms)
        }))
        .await
    }

    async fn finish_alert(
        &self,
        id: i64,
        outcome: idem_store::AlertOutcome,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.bounded(self.with_retries("finish_alert", || {
            janitor::finish_alert(self, id, &outcome, now)
        }))
        .await
    }

    async fn create_token(&self, token: NewApiToken, now: Timestamp) -> Result<(), StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            client
                .execute(
                    "INSERT INTO api_tokens (secret_hash, role, scope, label, created_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[
                        &token.secret_hash,
                        &token.role.as_str(),
                        &token.scope,
                        &token.label,
                        &now.0,
                    ],
                )
                .await
                .map_err(store_err)?;
            Ok(())
        })
        .await
    }

    async fn find_token(&self, secret_hash: &str) -> Result<Option<ApiToken>, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let stmt = client
                .prepare_cached(
                    "SELECT id, secret_hash, role, scope, label FROM api_tokens \
                     WHERE secret_hash = $1",
                )
                .await
                .map_err(store_err)?;
            let Some(row) = client
                .query_opt(&stmt, &[&secret_hash])
                .await
                .map_err(store_err)?
            else {
                return Ok(None);
            };
            let role: String = row.try_get(2).map_err(|e| store_err(corrupt(&e)))?;
            Ok(Some(ApiToken {
                id: row.try_get(0).map_err(|e| store_err(corrupt(&e)))?,
                secret_hash: row.try_get(1).map_err(|e| store_err(corrupt(&e)))?,
                role: Role::parse(&role)
                    .ok_or_else(|| StoreError::Corrupt(format!("token role {role:?}")))?,
                scope: row.try_get(3).map_err(|e| store_err(corrupt(&e)))?,
                label: row.try_get(4).map_err(|e| store_err(corrupt(&e)))?,
            }))
        })
        .await
    }

    async fn token_count(&self) -> Result<u64, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let row = client
                .query_one("SELECT count(*) FROM api_tokens", &[])
                .await
                .map_err(store_err)?;
            let n: i64 = row.try_get(0).map_err(|e| store_err(corrupt(&e)))?;
            Ok(as_u64(n))
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            client.simple_query("SELECT 1").await.map_err(store_err)?;
            Ok(())
        })
        .await
    }

    // ------------------------------------------------------------ outbox and secrets

    async fn outbox_enqueue(
        &self,
        item: idem_store::NewOutboxItem,
        now: Timestamp,
    ) -> Result<Option<i64>, StoreError> {
        self.bounded(self.with_retries("outbox_enqueue", || outbox::enqueue(self, &item, now)))
            .await
    }

    async fn outbox_claim(
        &self,
        kind: idem_store::OutboxKind,
        now: Timestamp,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<idem_store::OutboxItem>, StoreError> {
        self.bounded(self.with_retries("outbox_claim", || {
            outbox::claim(self, kind, now, limit, lease_ms)
        }))
        .await
    }

    async fn outbox_finish(
        &self,
        id: i64,
        lease: &idem_store::OutboxLease,
        outcome: idem_store::OutboxOutcome,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.bounded(self.with_retries("outbox_finish", || {
            outbox::finish(self, id, lease, &outcome, now)
        }))
        .await
    }

    async fn outbox_item(&self, id: i64) -> Result<Option<idem_store::OutboxItem>, StoreError> {
        self.bounded(self.with_retries("outbox_item", || outbox::item(self, id)))
            .await
    }

    async fn secret_add(
        &self,
        owner: &idem_store::SecretOwner,
        value: idem_store::Secret,
        expires_at: Option<Timestamp>,
        others_expire_at: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<i64, StoreError> {
        self.bounded(self.with_retries("secret_add", || {
            secrets::secret_add(self, owner, &value, expires_at, others_expire_at, now)
        }))
        .await
    }

    async fn secrets(
        &self,
        owner: &idem_store::SecretOwner,
        now: Timestamp,
    ) -> Result<Vec<idem_store::StoredSecret>, StoreError> {
        self.bounded(self.with_retries("secrets", || secrets::secrets(self, owner, now)))
            .await
    }

    async fn secrets_remove(&self, owner: &idem_store::SecretOwner) -> Result<usize, StoreError> {
        self.bounded(self.with_retries("secrets_remove", || secrets::secrets_remove(self, owner)))
            .await
    }
}
