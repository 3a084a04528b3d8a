//! The PostgreSQL store of idem: one ledger shared by many idem instances.
//!
//! [`PgStore`] implements [`idem_store::Store`] over a deadpool pool of tokio-postgres
//! connections. It keeps these invariants:
//!
//! - **One engine.** [`Store::execute`] is `idem_store::engine::execute` over
//!   `execute::PgExec`, the PostgreSQL side of the engine's narrow backend trait: the
//!   sequence (read, decide, plan, persist, retry on a lost race) is the engine's, the
//!   statements are this crate's.
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
//!
//! Modules: `connect` (pool, timeouts, migrations at start), `execute` (the engine's backend:
//! decision read, guarded persist), `fast` and `cache` (the one-round-trip shortcut),
//! `reads` (record with events, pages), `namespaces`, `tokens`, `outbox`, `secrets`, `tls`, `janitor` (sweep, retention,
//! stats, alert delivery leases), `analyze` (a young table's first statistics).

mod actions;
mod analyze;
mod cache;
mod conn;
mod connect;
mod console;
mod error;
mod execute;
mod fast;
mod intake;
mod janitor;
mod namespaces;
mod outbox;
mod reads;
mod rows;
mod schema;
mod secrets;
pub mod tls;
mod tokens;
mod wrap;

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use cache::{Counters, NsCache, RecordCache};
use conn::Conn as Client;
use deadpool_postgres::Pool;
use futures_util::FutureExt;
use idem_core::{Key, Namespace, Op, Timestamp};
use idem_store::engine;
use idem_store::{
    ApiToken, ExecCtx, Executed, ListQuery, NamespaceChange, NamespaceInfo, NewApiToken, NewSecret,
    OutboxClaim, OutboxFinish, OutboxItem, Page, RecordWithEvents, Store, StoreError,
};

pub use conn::{with_database, Pooler, Statements};
pub use connect::PgOptions;

impl PgStore {
    /// How many named prepared statements one pooled connection holds on its server
    /// connection (`pg_prepared_statements`), for the test that shows `pooler=transaction`
    /// leaves none behind.
    #[doc(hidden)]
    pub async fn named_statements_on_a_connection(&self) -> Result<i64, StoreError> {
        let client = self.client().await.map_err(store_err)?;
        let row = client
            .query_one("SELECT count(*) FROM pg_prepared_statements", &[])
            .await
            .map_err(store_err)?;
        row.try_get(0).map_err(store_err)
    }

    /// Whether statements go out named (directly, behind a session pooler, or behind a
    /// transaction pooler that carries them), for the tests of the check at start.
    #[doc(hidden)]
    pub fn statements_named(&self) -> bool {
        self.mode == conn::Mode::Prepared
    }

    /// How many statements go out as calls of their server-side function (`pooler=transaction`
    /// only), for the tests that show the plans are kept behind a pooler.
    #[doc(hidden)]
    pub fn wrapped_statements(&self) -> usize {
        self.wrap.as_ref().map_or(0, |w| w.ready_count())
    }
}

/// The text of the sweep's candidate query (`$1` now, `$2` batch, `$3` the default
/// `stuck_after_ms`), for the test that checks its plan.
#[doc(hidden)]
pub fn sweep_candidates_sql() -> &'static str {
    janitor::SWEEP_CANDIDATES.as_str()
}
/// The text of the outbox claim (`$1` kind, `$2` now, `$3` limit, `$4` lease owner, `$5`
/// lease until), for the test that checks its plan.
#[doc(hidden)]
pub fn outbox_claim_sql() -> &'static str {
    outbox::CLAIM.as_str()
}
use error::{store_err, PgError};

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    /// Named prepared statements, or unnamed ones behind a transaction pooler (`conn.rs`).
    mode: conn::Mode,
    /// Behind a transaction pooler: the functions that keep the plans (`wrap.rs`).
    wrap: Option<Arc<wrap::Wrappers>>,
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

/// Queues an alert on the outbox; the unique key deduplicates per record, reason and attempt.
const INSERT_ALERT: &str = "INSERT INTO outbox \
    (kind, namespace, key, dedupe, payload, created_at, due_at) \
    VALUES ('alert', $1, $2, $3, $4, $5, $5) \
    ON CONFLICT (namespace, key, kind, dedupe) DO NOTHING";

impl PgStore {
    /// How often each path of [`Store::execute`] was taken (diagnostics and tests).
    pub fn fast_path_stats(&self) -> FastPathStats {
        self.counters.snapshot()
    }

    async fn client(&self) -> Result<Client, PgError> {
        Ok(Client::new(
            self.pool.get().await?,
            self.mode,
            self.wrap.clone(),
        ))
    }

    /// Bounds a whole call: a database that stops answering yields `Unavailable`, not a hang.
    ///
    /// A combinator, not an `async fn` or block: those keep `fut` in their state twice (as
    /// the argument, and as the value awaited), doubling every call's future, which is
    /// copied whole when it is boxed (17.4 KB for `execute`'s).
    fn bounded<T>(
        &self,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> impl Future<Output = Result<T, StoreError>> {
        let limit = self.opts.op_timeout;
        tokio::time::timeout(limit, fut).map(move |r| match r {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "postgres: no answer within {limit:?}"
            ))),
        })
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
                Err(PgError::Retry) => execute::race_pause(n).await,
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
}

fn corrupt(e: &tokio_postgres::Error) -> PgError {
    PgError::Store(StoreError::Corrupt(format!("postgres row: {e}")))
}

/// Column `i` of `r`; a value that does not read as `T` is a damaged row ([`corrupt`]).
fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    r: &'a tokio_postgres::Row,
    i: usize,
) -> Result<T, PgError> {
    r.try_get(i).map_err(|e| corrupt(&e))
}

/// An alert draft as owned SQL parameters for [`INSERT_ALERT`] (its outbox item).
struct AlertParams(idem_store::NewOutboxItem);

impl AlertParams {
    fn new(
        ns: &Namespace,
        key: &Key,
        a: &idem_core::AlertDraft,
        traceparent: Option<&str>,
    ) -> Self {
        AlertParams(idem_store::NewOutboxItem::alert(
            ns.as_str(),
            key.as_str(),
            a,
            traceparent,
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
        let executed = self
            .bounded(async {
                let client = self.client().await.map_err(store_err)?;
                let mut exec = execute::PgExec::new(self, client);
                let ran =
                    engine::execute(&mut exec, ns, key, &op, &ctx, self.opts.max_attempts).await?;
                Ok(ran.executed)
            })
            .await;
        self.count_op();
        executed
    }

    async fn get(&self, ns: &Namespace, key: &Key) -> Result<Option<RecordWithEvents>, StoreError> {
        self.read_record(ns, key).await
    }

    async fn list(&self, ns: &Namespace, query: &ListQuery) -> Result<Page, StoreError> {
        self.read_page(ns, query).await
    }

    async fn namespace(&self, ns: &Namespace) -> Result<NamespaceInfo, StoreError> {
        self.namespace_read(ns).await
    }

    async fn namespace_stats(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> Result<idem_store::NamespaceStats, StoreError> {
        self.bounded(async {
            janitor::namespace_stats(self, ns, now)
                .await
                .map_err(store_err)
        })
        .await
    }

    async fn update_namespace(
        &self,
        ns: &Namespace,
        change: NamespaceChange,
        now: Timestamp,
    ) -> Result<NamespaceInfo, StoreError> {
        self.namespace_update(ns, change, now).await
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
        let outcome = (&outcome).into();
        self.bounded(self.with_retries("finish_alert", || {
            outbox::finish_alert(self, id, &outcome, now)
        }))
        .await
    }

    async fn create_token(&self, token: NewApiToken, now: Timestamp) -> Result<(), StoreError> {
        self.token_create(token, now).await
    }

    async fn find_token(&self, secret_hash: &str) -> Result<Option<ApiToken>, StoreError> {
        self.token_find(secret_hash).await
    }

    async fn token_count(&self) -> Result<u64, StoreError> {
        self.tokens_counted().await
    }

    async fn list_tokens(&self) -> Result<Vec<ApiToken>, StoreError> {
        self.tokens_list().await
    }

    async fn revoke_token(&self, id: i64, now: Timestamp) -> Result<bool, StoreError> {
        self.token_revoke(id, now).await
    }

    async fn touch_token(&self, id: i64, now: Timestamp) -> Result<(), StoreError> {
        self.token_touch(id, now).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            client.batch_execute("SELECT 1").await.map_err(store_err)?;
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

    async fn outbox_claim(&self, claim: OutboxClaim) -> Result<Vec<OutboxItem>, StoreError> {
        self.bounded(self.with_retries("outbox_claim", || outbox::claim(self, &claim)))
            .await
    }

    async fn outbox_finish(&self, f: OutboxFinish) -> Result<bool, StoreError> {
        let finish = || outbox::finish(self, f.id, &f.lease, &f.outcome, f.now);
        self.bounded(self.with_retries("outbox_finish", finish))
            .await
    }

    async fn outbox_item(&self, id: i64) -> Result<Option<idem_store::OutboxItem>, StoreError> {
        self.bounded(self.with_retries("outbox_item", || outbox::item(self, id)))
            .await
    }

    async fn secret_add(&self, new: NewSecret, now: Timestamp) -> Result<i64, StoreError> {
        self.bounded(self.with_retries("secret_add", || secrets::secret_add(self, &new, now)))
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

    // ------------------------------------------------------------ the console

    async fn namespace_names(&self) -> Result<Vec<String>, StoreError> {
        self.console_namespace_names().await
    }

    async fn namespace_activity(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> Result<idem_store::NamespaceActivity, StoreError> {
        self.console_namespace_activity(ns, now).await
    }

    async fn review_queue(
        &self,
        q: &idem_store::ReviewQuery,
        now: Timestamp,
    ) -> Result<idem_store::ReviewPage, StoreError> {
        self.console_review_queue(q, now).await
    }

    async fn session_create(&self, s: idem_store::NewConsoleSession) -> Result<(), StoreError> {
        self.console_session_create(&s).await
    }

    async fn session_find(
        &self,
        id_hash: &str,
        now: Timestamp,
    ) -> Result<Option<idem_store::ConsoleSession>, StoreError> {
        self.console_session_find(id_hash, now).await
    }

    async fn session_delete(&self, id_hash: &str) -> Result<(), StoreError> {
        self.console_session_delete(id_hash).await
    }
    // ------------------------------------------------------------ actions

    async fn action_put(
        &self,
        w: idem_store::ActionWrite,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.bounded(self.with_retries("action_put", || actions::action_put(self, &w, now)))
            .await
    }

    async fn action_get(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<idem_store::ActionRow>, StoreError> {
        self.bounded(self.with_retries("action_get", || actions::action_get(self, ns, name)))
            .await
    }

    async fn action_list(&self, ns: &str) -> Result<Vec<idem_store::ActionRow>, StoreError> {
        self.bounded(self.with_retries("action_list", || actions::action_list(self, ns)))
            .await
    }

    async fn action_delete(&self, ns: &str, name: &str) -> Result<bool, StoreError> {
        self.bounded(self.with_retries("action_delete", || actions::action_delete(self, ns, name)))
            .await
    }
    // ------------------------------------------------------------ the intake

    async fn source_put(
        &self,
        w: idem_store::SourceWrite,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.bounded(self.with_retries("source_put", || intake::source_put(self, &w, now)))
            .await
    }

    async fn source_get(&self, name: &str) -> Result<Option<idem_store::SourceRow>, StoreError> {
        self.bounded(self.with_retries("source_get", || intake::source_get(self, name)))
            .await
    }

    async fn source_list(&self) -> Result<Vec<idem_store::SourceRow>, StoreError> {
        self.bounded(self.with_retries("source_list", || intake::source_list(self)))
            .await
    }

    async fn source_delete(
        &self,
        name: &str,
        force: bool,
    ) -> Result<idem_store::SourceDelete, StoreError> {
        self.bounded(
            self.with_retries("source_delete", || intake::source_delete(self, name, force)),
        )
        .await
    }

    async fn intake_event(
        &self,
        ns: &str,
        key: &str,
    ) -> Result<Option<idem_store::IntakeEventRow>, StoreError> {
        self.bounded(self.with_retries("intake_event", || intake::intake_event(self, ns, key)))
            .await
    }

    async fn intake_list(
        &self,
        q: &idem_store::IntakeQuery,
    ) -> Result<Vec<idem_store::IntakeEventRow>, StoreError> {
        self.bounded(self.with_retries("intake_list", || intake::intake_list(self, q)))
            .await
    }

    async fn intake_update(&self, u: idem_store::IntakeUpdate) -> Result<(), StoreError> {
        self.bounded(self.with_retries("intake_update", || intake::intake_update(self, &u)))
            .await
    }

    async fn pace_take(
        &self,
        source: &str,
        destination: &str,
        interval_ms: i64,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, StoreError> {
        self.bounded(self.with_retries("pace_take", || {
            intake::pace_take(self, source, destination, interval_ms, now)
        }))
        .await
    }

    async fn intake_backlog(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        self.bounded(self.with_retries("intake_backlog", || intake::intake_backlog(self)))
            .await
    }

    async fn intake_dead_letters(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.bounded(self.with_retries("intake_dead_letters", || intake::intake_dead_letters(self)))
            .await
    }
}
