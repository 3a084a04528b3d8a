//! The embedded SQLite store of idem: one file, WAL, fsync before acknowledge, group commit.
//!
//! Layout: one OS thread owns the only write connection ([`writer`]); every write
//! ([`Store::execute`], namespace changes, janitor steps, alert bookkeeping, tokens) is a job
//! on its channel. The thread runs queued jobs in one `BEGIN IMMEDIATE` transaction and
//! commits once; a syncer thread fsyncs the WAL (once for every batch committed meanwhile)
//! and only then answers the batch's jobs, while the writer already runs the next batch —
//! many concurrent requests share one fsync, none is acknowledged before it.
//! Reads run on a small pool of read connections beside the writer (WAL), and answer only
//! once what they saw is durable ([`durable`]).
//!
//! Invariants kept here:
//! - **Durable before acknowledged**: a write's `Ok` is sent only after the fsync that covers
//!   the `COMMIT` of its batch returned; if that commit or fsync fails, every job in the batch
//!   gets an error (and after a failed fsync, every later call: see [`durable`]).
//! - **One decision per record at a time**: decisions are made by `idem_core::apply` on data
//!   read through the write connection inside the write transaction; SQLite's write lock
//!   (`BEGIN IMMEDIATE`) serialises writers, also across processes and across several
//!   `SqliteStore`s on one file, so two claims can never both see "no record".
//! - **Persist exactly the transition**: insert guarded by the primary key, update guarded by
//!   `version`, its events, the daily counter, the alerts (only with an `alert_url`).
//! - The janitor touches only `processing` (sweep) and final states (retention).

mod actions;
pub mod backup;
mod console;
mod counts;
mod durable;
mod error;
mod intake;
mod outbox;
mod read_ops;
mod readers;
mod rows;
mod schema;

pub use schema::latest_version as schema_version;
mod secrets;
mod write_ops;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::{Event, Key, Namespace, Op, Timestamp};
use idem_store::{
    AlertOutcome, ApiToken, ExecCtx, Executed, ListQuery, NamespaceChange, NamespaceInfo,
    NewApiToken, NewSecret, OutboxClaim, OutboxFinish, OutboxItem, Page, PendingAlert,
    RecordWithEvents, RetentionReport, Stats, Store, StoreError, SweepReport,
};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::durable::Durability;
use crate::readers::Readers;
use crate::writer::{BoxJob, Settle, Task};

/// Tuning of a [`SqliteStore`]. The defaults suit a server; tests and benchmarks change them.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Most writes committed by one transaction (one fsync). `1` disables group commit.
    pub max_batch: usize,
    /// Read connections (reads running at once).
    pub readers: usize,
    /// How long a connection waits for another process's lock before answering
    /// `Unavailable`.
    pub busy_timeout: Duration,
    /// Commit without waiting for the disk and let a syncer thread fsync the WAL before the
    /// batch is answered, so the writer runs the next batch during the fsync (see
    /// [`writer`]). Off: every commit fsyncs itself (`synchronous=FULL`). Either way nothing
    /// is acknowledged before it is on disk.
    pub pipelined_sync: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            max_batch: 512,
            readers: 4,
            busy_timeout: Duration::from_secs(5),
            pipelined_sync: true,
        }
    }
}

/// The SQLite store. Cheap to share behind an `Arc`; dropping the last handle stops the
/// writer thread after it finished its current batch.
pub struct SqliteStore {
    path: PathBuf,
    writer: WriterHandle,
    readers: Readers,
    durability: Arc<Durability>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The channel to the writer thread and the thread itself (joined on drop, so that a file
/// reopened right after the store was dropped sees every committed write and no open
/// connection of the old store).
struct WriterHandle {
    tx: Option<mpsc::Sender<BoxJob>>,
    thread: Option<JoinHandle<()>>,
    /// Ends after the writer (which holds its channel).
    syncer: Option<JoinHandle<()>>,
    /// Dropping it stops the checkpointer thread.
    checkpoint_stop: Option<mpsc::Sender<()>>,
    checkpointer: Option<JoinHandle<()>>,
}

impl Drop for WriterHandle {
    fn drop(&mut self) {
        // Closing the channel ends the writer loop once the queue is drained.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
        self.checkpoint_stop.take();
        if let Some(t) = self.checkpointer.take() {
            let _ = t.join();
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the ledger file at `path` and runs migrations.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// [`SqliteStore::open`] with explicit tuning.
    pub fn open_with(path: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        // Opened and migrated here so that a bad path or a newer schema fails the open call.
        let conn = schema::open_writer(path, options.busy_timeout)?;
        let durability = Arc::new(Durability::new());
        let wal = if options.pipelined_sync {
            schema::pipeline_wal(&conn, path)?
        } else {
            None
        };
        let (settle_tx, syncer) = match wal {
            None => (None, None),
            Some(file) => {
                let (tx, rx) = mpsc::channel::<Settle>();
                let d = durability.clone();
                let t = std::thread::Builder::new()
                    .name("idem-sqlite-sync".into())
                    .spawn(move || writer::run_syncer(rx, move || file.sync_data(), d))
                    .map_err(|e| {
                        StoreError::Unavailable(format!("cannot start the syncer thread: {e}"))
                    })?;
                (Some(tx), Some(t))
            }
        };
        let (tx, rx) = mpsc::channel::<BoxJob>();
        let max_batch = options.max_batch;
        let d = durability.clone();
        let thread = std::thread::Builder::new()
            .name("idem-sqlite-writer".into())
            .spawn(move || writer::run(conn, rx, max_batch, d, settle_tx))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the writer thread: {e}")))?;
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (cp_path, cp_timeout) = (path.to_owned(), options.busy_timeout);
        let checkpointer = std::thread::Builder::new()
            .name("idem-sqlite-ckpt".into())
            .spawn(move || schema::run_checkpointer(&cp_path, cp_timeout, stop_rx))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the checkpointer: {e}")))?;
        tracing::debug!(path = %path.display(), "sqlite: store open");
        Ok(SqliteStore {
            path: path.to_owned(),
            writer: WriterHandle {
                tx: Some(tx),
                thread: Some(thread),
                syncer,
                checkpoint_stop: Some(stop_tx),
                checkpointer: Some(checkpointer),
            },
            readers: Readers::new(path.to_owned(), options.readers, options.busy_timeout),
            durability,
        })
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` in the writer thread inside a group-commit batch and answers after commit.
    async fn write<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: BoxJob = Box::new(Task::new(work, reply));
        self.send(job)?;
        answer.await.map_err(|_| stopped())?
    }
}

impl SqliteStore {
    /// Runs `f` on a read connection and answers once everything it could have seen is
    /// durable (see [`durable`]).
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.durability.check()?;
        self.durability.wait_for_deferred().await;
        let out = self.readers.read(f).await?;
        self.durability.wait_for_reads().await?;
        Ok(out)
    }

    /// Persists the event of a snapshot decision and answers.
    ///
    /// The event (a `duplicate_hit`, `in_flight`, `conflict`) changes no record: it is audit
    /// trail. It is queued to the writer and the answer waits only until every record the
    /// snapshot could have seen is durable, not for the event's own fsync; reads wait for
    /// queued events ([`durable`]), so the caller who then reads the history sees it. What a
    /// crash can take back is the audit event of an answer given in the last milliseconds,
    /// never a record's state or its stored result. Once [`MAX_DEFERRED`] events are queued
    /// and not yet written (backpressure), or while writes fail (a full disk: the answer is
    /// then 503 as for any write), a decision waits for its own event.
    async fn finish_snapshot_decision(
        &self,
        ns: &Namespace,
        key: &Key,
        d: read_ops::SnapshotDecision,
    ) -> Result<Executed, StoreError> {
        let events = match d.events.into_iter().next() {
            // Nothing to append: the answer still waits until what the snapshot saw is durable.
            None => {
                self.durability.wait_for_decisions().await?;
                Vec::new()
            }
            Some(draft) if !self.durability.failing() && self.durability.defer() < MAX_DEFERRED => {
                let event = Event::from_draft(0, draft.clone());
                let job = DeferredEvent {
                    rid: d.rid,
                    ns: ns.clone(),
                    key: key.clone(),
                    draft,
                    out: None,
                    durability: self.durability.clone(),
                };
                // A job that is not sent is dropped, which counts it done.
                self.send(Box::new(job))?;
                self.durability.wait_for_decisions().await?;
                vec![event]
            }
            Some(draft) => {
                // Not queued after all: counted done at once, then written as before.
                self.durability.deferred_done();
                let (ns, key, rid) = (ns.clone(), key.clone(), d.rid);
                let (reply, answer) = oneshot::channel();
                let job: BoxJob = Box::new(Task::new(
                    move |c: &Connection| write_ops::append_event_step(c, rid, &ns, &key, &draft),
                    reply,
                ));
                self.send(job)?;
                answer.await.map_err(|_| stopped())??
            }
        };
        tracing::trace!(namespace = %ns, key = %key.masked(), "sqlite: decided on a snapshot");
        Ok(Executed {
            reply: d.reply,
            events,
            from_state: Some(d.from_state),
            alerts_queued: 0,
            // Snapshot decisions only append an event: they count nothing.
            tally: Default::default(),
            rider_stored: false,
        })
    }

    fn send(&self, job: BoxJob) -> Result<(), StoreError> {
        self.writer
            .tx
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())
    }
}

/// Audit events of snapshot decisions queued and not yet written, beyond which a decision
/// waits for its own event.
const MAX_DEFERRED: u64 = 4096;

/// The audit event of a snapshot decision, written by the writer after the answer went out
/// (see [`SqliteStore::finish_snapshot_decision`]). Counted done when dropped: after its
/// batch settled, or unsent, or discarded by a writer that stopped.
struct DeferredEvent {
    rid: i64,
    ns: Namespace,
    key: Key,
    draft: idem_core::EventDraft,
    out: Option<StoreError>,
    durability: Arc<Durability>,
}

impl writer::WriteJob for DeferredEvent {
    fn run(&mut self, conn: &Connection) -> bool {
        match write_ops::append_event_step(conn, self.rid, &self.ns, &self.key, &self.draft) {
            Ok(_) => {
                self.out = None;
                true
            }
            Err(e) => {
                self.out = Some(e);
                false
            }
        }
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        if let Some(e) = self.out.clone().or(commit.err()) {
            // Never silent, but once per run of failing writes (a full disk would otherwise
            // log every one); the answer, a replay of what is stored, was right either way,
            // and from the failure on decisions wait for their own event (answered 503).
            if self.durability.first_dropped() {
                tracing::warn!(namespace = %self.ns, key = %self.key.masked(),
                    event = self.draft.kind.as_str(), error = %e,
                    "sqlite: the audit event of an answered decision was not recorded;                      later ones are logged at debug until writes commit again");
            } else {
                tracing::debug!(namespace = %self.ns, key = %self.key.masked(),
                    event = self.draft.kind.as_str(), error = %e,
                    "sqlite: the audit event of an answered decision was not recorded");
            }
        }
    }

    fn audit_only(&self) -> bool {
        true
    }
}

impl Drop for DeferredEvent {
    fn drop(&mut self) {
        self.durability.deferred_done();
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the sqlite writer has stopped".into())
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn execute(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        ctx: ExecCtx,
    ) -> Result<Executed, StoreError> {
        // A claim of a known key (a replay) or a duplicate webhook delivery usually changes
        // nothing but the audit trail: decide it on a read snapshot, so the writer only
        // appends its event.
        if matches!(op, Op::Claim(_) | Op::IntakeReceive(_)) {
            match self
                .readers
                .read_inline(|c| read_ops::decide_on_snapshot(c, ns, key, &op, &ctx))
            {
                Ok(Some(d)) => return self.finish_snapshot_decision(ns, key, d).await,
                Ok(None) => {}
                // The writer decides on its own data; a failed snapshot read only costs time.
                Err(e) => tracing::debug!(error = %e, "sqlite: snapshot read failed"),
            }
        }
        let (ns, key) = (ns.clone(), key.clone());
        self.write(move |conn| {
            let ran = write_ops::execute_step(conn, &ns, &key, &op, &ctx)?;
            tracing::trace!(namespace = %ns, key = %key.masked(), op = op.name(),
                reply = write_ops::reply_kind(&ran.executed.reply), "sqlite: executed");
            Ok(ran.executed)
        })
        .await
    }

    async fn get(&self, ns: &Namespace, key: &Key) -> Result<Option<RecordWithEvents>, StoreError> {
        let (ns, key) = (ns.clone(), key.clone());
        self.read(move |c| read_ops::get(c, &ns, &key)).await
    }

    async fn list(&self, ns: &Namespace, query: &ListQuery) -> Result<Page, StoreError> {
        let (ns, query) = (ns.clone(), query.clone());
        self.read(move |c| read_ops::list(c, &ns, &query)).await
    }

    async fn namespace(&self, ns: &Namespace) -> Result<NamespaceInfo, StoreError> {
        let ns = ns.clone();
        self.read(move |c| read_ops::namespace(c, &ns)).await
    }

    async fn namespace_stats(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> Result<idem_store::NamespaceStats, StoreError> {
        let ns = ns.clone();
        self.read(move |c| read_ops::namespace_stats(c, &ns, now))
            .await
    }

    async fn update_namespace(
        &self,
        ns: &Namespace,
        change: NamespaceChange,
        now: Timestamp,
    ) -> Result<NamespaceInfo, StoreError> {
        let ns = ns.clone();
        self.write(move |c| write_ops::update_namespace_step(c, &ns, &change, now))
            .await
    }

    async fn sweep_once(&self, now: Timestamp, batch: usize) -> Result<SweepReport, StoreError> {
        self.write(move |c| write_ops::sweep_step(c, now, batch))
            .await
    }

    async fn retention_once(
        &self,
        now: Timestamp,
        batch: usize,
    ) -> Result<RetentionReport, StoreError> {
        self.write(move |c| write_ops::retention_step(c, now, batch))
            .await
    }

    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError> {
        self.read(move |c| read_ops::stats(c, now)).await
    }

    async fn due_alerts(
        &self,
        now: Timestamp,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<PendingAlert>, StoreError> {
        // A write: claiming the rows moves their next_at so other senders skip them.
        self.write(move |c| write_ops::due_alerts_step(c, now, limit, lease_ms))
            .await
    }

    async fn finish_alert(
        &self,
        id: i64,
        outcome: AlertOutcome,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.write(move |c| write_ops::finish_alert_step(c, id, &outcome, now))
            .await
    }

    async fn create_token(&self, token: NewApiToken, now: Timestamp) -> Result<(), StoreError> {
        self.write(move |c| write_ops::create_token_step(c, &token, now))
            .await
    }

    async fn find_token(&self, secret_hash: &str) -> Result<Option<ApiToken>, StoreError> {
        let h = secret_hash.to_owned();
        self.read(move |c| read_ops::find_token(c, &h)).await
    }

    async fn token_count(&self) -> Result<u64, StoreError> {
        self.read(read_ops::token_count).await
    }

    async fn list_tokens(&self) -> Result<Vec<ApiToken>, StoreError> {
        self.read(read_ops::list_tokens).await
    }

    async fn revoke_token(&self, id: i64, now: Timestamp) -> Result<bool, StoreError> {
        self.write(move |c| write_ops::revoke_token_step(c, id, now))
            .await
    }

    async fn touch_token(&self, id: i64, now: Timestamp) -> Result<(), StoreError> {
        self.write(move |c| write_ops::touch_token_step(c, id, now))
            .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.read(read_ops::ping).await
    }

    // ------------------------------------------------------------ outbox and secrets

    async fn outbox_enqueue(
        &self,
        item: idem_store::NewOutboxItem,
        now: Timestamp,
    ) -> Result<Option<i64>, StoreError> {
        self.write(move |c| outbox::enqueue(c, &item, now)).await
    }

    async fn outbox_claim(&self, claim: OutboxClaim) -> Result<Vec<OutboxItem>, StoreError> {
        self.write(move |c| outbox::claim(c, &claim)).await
    }

    async fn outbox_finish(&self, f: OutboxFinish) -> Result<bool, StoreError> {
        self.write(move |c| outbox::finish(c, f.id, Some(&f.lease), &f.outcome, f.now))
            .await
    }

    async fn outbox_item(&self, id: i64) -> Result<Option<idem_store::OutboxItem>, StoreError> {
        self.read(move |c| outbox::item(c, id)).await
    }

    async fn secret_add(&self, new: NewSecret, now: Timestamp) -> Result<i64, StoreError> {
        self.write(move |c| secrets::secret_add(c, &new, now)).await
    }

    async fn secrets(
        &self,
        owner: &idem_store::SecretOwner,
        now: Timestamp,
    ) -> Result<Vec<idem_store::StoredSecret>, StoreError> {
        let owner = owner.clone();
        self.read(move |c| secrets::secrets(c, &owner, now)).await
    }

    async fn secrets_remove(&self, owner: &idem_store::SecretOwner) -> Result<usize, StoreError> {
        let owner = owner.clone();
        self.write(move |c| secrets::secrets_remove(c, &owner))
            .await
    }

    // ------------------------------------------------------------ the console

    async fn namespace_names(&self) -> Result<Vec<String>, StoreError> {
        self.read(console::namespace_names).await
    }

    async fn namespace_activity(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> Result<idem_store::NamespaceActivity, StoreError> {
        let ns = ns.clone();
        self.read(move |c| console::namespace_activity(c, &ns, now))
            .await
    }

    async fn review_queue(
        &self,
        q: &idem_store::ReviewQuery,
        now: Timestamp,
    ) -> Result<idem_store::ReviewPage, StoreError> {
        let q = q.clone();
        self.read(move |c| console::review_queue(c, &q, now)).await
    }

    async fn session_create(&self, s: idem_store::NewConsoleSession) -> Result<(), StoreError> {
        self.write(move |c| console::session_create_step(c, &s))
            .await
    }

    async fn session_find(
        &self,
        id_hash: &str,
        now: Timestamp,
    ) -> Result<Option<idem_store::ConsoleSession>, StoreError> {
        let h = id_hash.to_owned();
        self.read(move |c| console::session_find(c, &h, now)).await
    }

    async fn session_delete(&self, id_hash: &str) -> Result<(), StoreError> {
        let h = id_hash.to_owned();
        self.write(move |c| console::session_delete_step(c, &h))
            .await
    }
    // ------------------------------------------------------------ actions

    async fn action_put(
        &self,
        w: idem_store::ActionWrite,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.write(move |c| actions::action_put(c, &w, now)).await
    }

    async fn action_get(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<idem_store::ActionRow>, StoreError> {
        let (ns, name) = (ns.to_owned(), name.to_owned());
        self.read(move |c| actions::action_get(c, &ns, &name)).await
    }

    async fn action_list(&self, ns: &str) -> Result<Vec<idem_store::ActionRow>, StoreError> {
        let ns = ns.to_owned();
        self.read(move |c| actions::action_list(c, &ns)).await
    }

    async fn action_delete(&self, ns: &str, name: &str) -> Result<bool, StoreError> {
        let (ns, name) = (ns.to_owned(), name.to_owned());
        self.write(move |c| actions::action_delete(c, &ns, &name))
            .await
    }
    // ------------------------------------------------------------ the intake

    async fn source_put(
        &self,
        w: idem_store::SourceWrite,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.write(move |c| intake::source_put(c, &w, now)).await
    }

    async fn source_get(&self, name: &str) -> Result<Option<idem_store::SourceRow>, StoreError> {
        let name = name.to_owned();
        self.read(move |c| intake::source_get(c, &name)).await
    }

    async fn source_list(&self) -> Result<Vec<idem_store::SourceRow>, StoreError> {
        self.read(|c| intake::source_list(c)).await
    }

    async fn source_delete(
        &self,
        name: &str,
        force: bool,
    ) -> Result<idem_store::SourceDelete, StoreError> {
        let name = name.to_owned();
        self.write(move |c| intake::source_delete(c, &name, force))
            .await
    }

    async fn intake_event(
        &self,
        ns: &str,
        key: &str,
    ) -> Result<Option<idem_store::IntakeEventRow>, StoreError> {
        let (ns, key) = (ns.to_owned(), key.to_owned());
        self.read(move |c| intake::intake_event(c, &ns, &key)).await
    }

    async fn intake_list(
        &self,
        q: &idem_store::IntakeQuery,
    ) -> Result<Vec<idem_store::IntakeEventRow>, StoreError> {
        let q = q.clone();
        self.read(move |c| intake::intake_list(c, &q)).await
    }

    async fn intake_update(&self, u: idem_store::IntakeUpdate) -> Result<(), StoreError> {
        self.write(move |c| intake::intake_update(c, &u)).await
    }

    async fn pace_take(
        &self,
        source: &str,
        destination: &str,
        interval_ms: i64,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, StoreError> {
        let (s, d) = (source.to_owned(), destination.to_owned());
        self.write(move |c| intake::pace_take(c, &s, &d, interval_ms, now))
            .await
    }

    async fn intake_backlog(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        self.read(|c| intake::intake_backlog(c)).await
    }

    async fn intake_dead_letters(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|c| intake::intake_dead_letters(c)).await
    }
}
