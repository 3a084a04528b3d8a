//! The storage contract of idem.
//!
//! A [`Store`] keeps records, events, namespace settings, the durable [`outbox`] of outbound
//! work (alerts, forwards, effects), readable [`secrets`] and API token hashes. It never decides anything: [`Store::execute`] loads the record and namespace state,
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

pub mod actions;
pub mod console;
pub mod engine;
pub mod intake;
mod ledger;
pub mod outbox;
pub mod secrets;
pub mod sql;
mod types;

pub use actions::{action_owner, ActionRow, ActionWrite};
pub use console::{
    ConsoleSession, NamespaceActivity, NewConsoleSession, ReviewCursor, ReviewPage, ReviewQuery,
    REVIEW_STATES,
};
pub use intake::{
    Delivered, IntakeEventRow, IntakeQuery, IntakeUpdate, NewDelivery, NewIntakeEvent,
    SourceDelete, SourceRow, SourceWrite,
};
pub use ledger::{Ledger, LedgerError};
pub use outbox::{
    AlertPayload, Jitter, NewOutboxItem, OutboxClaim, OutboxFinish, OutboxItem, OutboxKind,
    OutboxLease, OutboxOutcome, OutboxState, RetrySchedule,
};
pub use secrets::{
    alert_owner, alert_secret_from_stored, policy_at_rest, AlertSecretWrite, NewSecret, Secret,
    SecretKind, SecretOwner, StoredSecret,
};
pub use types::{
    generate_secret, hash_secret, AlertOutcome, ApiToken, Cursor, ExecCtx, Executed, ListQuery,
    NamespaceChange, NamespaceInfo, NamespaceStats, NewApiToken, Page, PendingAlert,
    RecordWithEvents, ReportRider, RetentionReport, Rider, Role, StateCounts, Stats, StoreError,
    SweepReport, ThenPrepare,
};

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

    /// Acquisitions and cost of `ns` over the 24 hours up to `now` ([`NamespaceStats`]):
    /// a sum of at most 24 hourly counter rows, never a scan of records.
    async fn namespace_stats(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> Result<NamespaceStats, StoreError>;

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
    /// `audit_retention_ms` with their events. Never touches other states. The intake follows
    /// in the same transaction: the stored body of a delivered event goes with its record's
    /// result, the event's row with its record's tombstone; an undelivered event is never
    /// touched. Its cost is the batch's, never the ledger's (no scan of records or events).
    async fn retention_once(
        &self,
        now: Timestamp,
        batch: usize,
    ) -> Result<RetentionReport, StoreError>;

    /// Gauges for metrics: records per state, oldest processing age, review depth.
    async fn stats(&self, now: Timestamp) -> Result<Stats, StoreError>;

    /// Alerts due for delivery: the [`OutboxKind::Alert`] items [`Store::outbox_claim`] hands
    /// out (claimed for `lease_ms` so another instance does not send them too), with the
    /// namespace's alert URL and secret as they are now.
    async fn due_alerts(
        &self,
        now: Timestamp,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<PendingAlert>, StoreError>;

    /// Records the result of one delivery attempt of a live alert item (and, in the same
    /// transaction, an `alert_sent` event on success); a finished alert is left alone.
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

    /// Number of API tokens ever created, revoked and expired ones included (0 means auth is
    /// off and the server stays on loopback): revoking every token never switches auth off.
    async fn token_count(&self) -> Result<u64, StoreError>;

    /// Live (not revoked) tokens, expired ones included, oldest first.
    async fn list_tokens(&self) -> Result<Vec<ApiToken>, StoreError>;

    /// Revokes a token at `now`: [`Store::find_token`] and [`Store::list_tokens`] no longer
    /// return it. `false` when no live token has this id.
    async fn revoke_token(&self, id: i64, now: Timestamp) -> Result<bool, StoreError>;

    /// Records `now` as the token's last use (the caller decides how often).
    async fn touch_token(&self, id: i64, now: Timestamp) -> Result<(), StoreError>;

    /// Cheap round trip to the store (readiness).
    async fn ping(&self) -> Result<(), StoreError>;

    // ------------------------------------------------------------ the outbox (see [`outbox`])

    /// Enqueues one item on its own (items caused by a record write are enqueued by that
    /// write's transaction). `None` when an item with the same
    /// `(namespace, key, kind, dedupe)` exists already.
    async fn outbox_enqueue(
        &self,
        item: NewOutboxItem,
        now: Timestamp,
    ) -> Result<Option<i64>, StoreError>;

    /// Leases at most `limit` items of `kind` that are due (pending with `due_at <= now`, or
    /// leased with a lease run out) to one fresh holder for `lease_ms`, oldest due first.
    /// While the lease runs no other claim, on any handle or instance, returns them.
    async fn outbox_claim(&self, claim: OutboxClaim) -> Result<Vec<OutboxItem>, StoreError>;

    /// Records how an attempt ended, only if `finish.lease` still holds the item (nobody
    /// reclaimed it since): `Ok(false)` otherwise, and nothing changes. Counts the attempt.
    async fn outbox_finish(&self, finish: OutboxFinish) -> Result<bool, StoreError>;

    /// One item as stored, any state.
    async fn outbox_item(&self, id: i64) -> Result<Option<OutboxItem>, StoreError>;

    // ------------------------------------------------------------ secrets (see [`secrets`])

    /// Adds a new version (see [`NewSecret`] for what happens to the others).
    async fn secret_add(&self, new: NewSecret, now: Timestamp) -> Result<i64, StoreError>;

    /// The versions of `owner` active at `now`, newest first.
    async fn secrets(
        &self,
        owner: &SecretOwner,
        now: Timestamp,
    ) -> Result<Vec<StoredSecret>, StoreError>;

    /// Deletes every version of `owner`; returns how many there were.
    async fn secrets_remove(&self, owner: &SecretOwner) -> Result<usize, StoreError>;

    // ------------------------------------------------------------ the console (see [`console`])

    /// Every namespace that has records or a stored policy, in name order.
    async fn namespace_names(&self) -> Result<Vec<String>, StoreError>;

    /// Today's first-time acquisitions and the oldest `processing` record of `ns`.
    async fn namespace_activity(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> Result<NamespaceActivity, StoreError>;

    /// The review queue across namespaces: `needs_review`, `awaiting_approval` and
    /// `processing` past its namespace's `stuck_after_ms` at `now`, oldest `updated_at` first.
    async fn review_queue(&self, q: &ReviewQuery, now: Timestamp)
        -> Result<ReviewPage, StoreError>;

    /// Stores a console session; expired sessions are deleted on the way.
    async fn session_create(&self, s: NewConsoleSession) -> Result<(), StoreError>;

    /// The session whose cookie hashes to `id_hash`, if it is live at `now`.
    async fn session_find(
        &self,
        id_hash: &str,
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>, StoreError>;

    /// Ends a session (sign-out); no error when it is gone already.
    async fn session_delete(&self, id_hash: &str) -> Result<(), StoreError>;

    // ------------------------------------------------------------ the intake (see [`intake`])

    /// Creates or replaces a source and its secrets in one transaction; `true` when created.
    async fn source_put(&self, w: SourceWrite, now: Timestamp) -> Result<bool, StoreError>;

    async fn source_get(&self, name: &str) -> Result<Option<SourceRow>, StoreError>;

    /// Every source, in name order.
    async fn source_list(&self) -> Result<Vec<SourceRow>, StoreError>;

    /// Deletes a source and its secrets, refused while some of its events are not
    /// `completed` unless `force` (their records and rows stay).
    async fn source_delete(&self, name: &str, force: bool) -> Result<SourceDelete, StoreError>;

    async fn intake_event(&self, ns: &str, key: &str)
        -> Result<Option<IntakeEventRow>, StoreError>;

    /// A source's events in the order of [`IntakeQuery`].
    async fn intake_list(&self, q: &IntakeQuery) -> Result<Vec<IntakeEventRow>, StoreError>;

    /// Appends an attempt and/or changes `delivered_at`; nothing when the row is gone.
    async fn intake_update(&self, u: IntakeUpdate) -> Result<(), StoreError>;

    /// Takes the delivery slot of a paced destination: when its next slot is due at `now`,
    /// moves it to `now + interval_ms` and answers `None` (deliver now); else answers the
    /// time the slot comes due (and changes nothing). Atomic across every handle on the
    /// ledger, so instances sharing it pace the destination together.
    async fn pace_take(
        &self,
        source: &str,
        destination: &str,
        interval_ms: i64,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, StoreError>;

    /// Deliveries not yet made, per source and destination (`default` for an event's own
    /// key; pairs with none are left out).
    async fn intake_backlog(&self) -> Result<Vec<(String, String, u64)>, StoreError>;

    /// Dead letters per source: undelivered events whose record is in `needs_review` (held
    /// events, exhausted or gone deliveries). Read through the undelivered events only, so it
    /// costs what the backlog costs, never a scan of every event. Sources with none are left
    /// out.
    async fn intake_dead_letters(&self) -> Result<Vec<(String, u64)>, StoreError>;

    // ------------------------------------------------------------ actions (see [`actions`])

    /// Creates or replaces an action and its header values in one transaction; `true` when
    /// created.
    async fn action_put(&self, w: ActionWrite, now: Timestamp) -> Result<bool, StoreError>;

    async fn action_get(&self, ns: &str, name: &str) -> Result<Option<ActionRow>, StoreError>;

    /// The actions of a namespace, in name order.
    async fn action_list(&self, ns: &str) -> Result<Vec<ActionRow>, StoreError>;

    /// Deletes an action and its header values; `false` when there was none. The records of
    /// its calls stay (they are the namespace's).
    async fn action_delete(&self, ns: &str, name: &str) -> Result<bool, StoreError>;
}
