//! The storage contract of idem.
//!
//! A [`Store`] keeps records, events, namespace settings, alert outbox rows and API token
//! hashes. It never decides anything: [`Store::execute`] loads the record and namespace state,
//! calls [`idem_core::apply`] and persists the returned [`idem_core::Transition`] in one atomic
//! step (a transaction whose record write is guarded by a unique constraint on insert and by
//! the record `version` on update; a lost race re-runs the decision on fresh data). Backends
//! map their driver errors to [`StoreError`] themselves.
//!
//! The sequence itself is written once, in [`engine`]; a backend implements
//! [`engine::Backend`] (read, guarded persist) and its SQL.
//!
//! [`Ledger`] is the in-process API on top of a store: it supplies the clock and the random
//! inputs, and turns replies into typed results.

pub mod engine;
mod ledger;
pub mod sql;
mod types;

pub use ledger::{Ledger, LedgerError};
pub use types::*;

use async_trait::async_trait;
use idem_core::{Key, Namespace, Op, Timestamp};

#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Which backend this is (`sqlite`, `postgres`), for logs and metrics.
    fn backend(&self) -> &'static str;

    /// Runs one operation on one record atomically and durably: when this returns `Ok`, the
    /// write and its events are committed (fsync'd).
    async fn execute(
        &self,
        ns: &Namespace,
        key: &Key,
        op: Op,
        ctx: ExecCtx,
    ) -> Result<Executed, StoreError>;

    /// The record and its events (oldest first), if the key is known.
    async fn get(&self, ns: &Namespace, key: &Key) -> Result<Option<RecordWithEvents>, StoreError>;

    /// Records of a namespace, newest `updated_at` first, optionally of one state.
    async fn list(&self, ns: &Namespace, query: &ListQuery) -> Result<Page, StoreError>;

    /// Policy, pause flag and per-state counts; defaults for a never-used namespace.
    async fn namespace(&self, ns: &Namespace) -> Result<NamespaceInfo, StoreError>;

    /// Applies a policy patch or the pause switch atomically and returns the new state.
    async fn update_namespace(
        &self,
        ns: &Namespace,
        change: NamespaceChange,
        now: Timestamp,
    ) -> Result<NamespaceInfo, StoreError>;

    /// One janitor step for leases: applies `Op::Sweep` to at most `batch` `processing` records
    /// whose lease expired or that may be stuck. Safe to run from many instances at once.
    async fn sweep_once(&self, now: Timestamp, batch: usize) -> Result<SweepReport, StoreError>;

    /// One retention step: expires results of at most `batch` final records past
    /// `retention_ms` (keeping a tombstone) and deletes at most `batch` tombstones past
    /// `audit_retention_ms` with their events. Never touches other states.
    async fn retention_once(
        &self,
        now: Timestamp,
        batch: usize,
    ) -> Result<RetentionReport, StoreError>;

    /// Gauges for metrics: records per state, oldest processing age, review depth.
    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError>;

    /// Alerts due for delivery (claimed for `lease_ms` so another instance does not send them too).
    async fn due_alerts(
        &self,
        now: Timestamp,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<PendingAlert>, StoreError>;

    /// Records the result of one delivery attempt (and an `alert_sent` event on success).
    async fn finish_alert(
        &self,
        id: i64,
        outcome: AlertOutcome,
        now: Timestamp,
    ) -> Result<(), StoreError>;

    /// Stores a new API token (only its hash).
    async fn create_token(&self, token: NewApiToken, now: Timestamp) -> Result<(), StoreError>;

    /// Looks a token up by the SHA-256 hex of its secret.
    async fn find_token(&self, secret_hash: &str) -> Result<Option<ApiToken>, StoreError>;

    /// Number of API tokens (0 means auth is off and the server stays on loopback).
    async fn token_count(&self) -> Result<u64, StoreError>;

    /// Cheap round trip to the store (readiness).
    async fn ping(&self) -> Result<(), StoreError>;
}
