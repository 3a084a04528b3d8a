//! idem as a library: an idempotency gate and side-effect ledger for in-process use.
//!
//! Open a ledger by URL — `sqlite://path/to/file.db` (or a bare path) for the embedded
//! default, `postgres://…` for a ledger shared by many instances — then claim before each
//! irreversible side effect and complete after it. A duplicate claim replays the stored result.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idem::{ClaimOutcome, ClaimRequest, CompleteRequest, Key, Namespace};
//!
//! let dir = tempfile::tempdir()?;
//! let ledger = idem::open(&format!("sqlite://{}", dir.path().join("idem.db").display())).await?;
//! let ns = Namespace::try_from("payments")?;
//! let key = Key::try_from("evt_123:charge")?;
//!
//! let first = ledger.claim(&ns, &key, ClaimRequest::default()).await?;
//! assert_eq!(first.outcome, ClaimOutcome::Acquired);
//! let token = first.token.expect("acquired claims carry a token").secret();
//! // ... charge the card here, exactly once ...
//! ledger
//!     .complete(&ns, &key, CompleteRequest {
//!         token,
//!         result: Some(serde_json::json!({"charge": "ch_1"})),
//!         external_ref: Some("ch_1".into()),
//!         cost: None,
//!     })
//!     .await?;
//!
//! let again = ledger.claim(&ns, &key, ClaimRequest::default()).await?;
//! assert_eq!(again.outcome, ClaimOutcome::Completed);
//! assert_eq!(again.record.expect("replay").external_ref.as_deref(), Some("ch_1"));
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::sync::Arc;

// The whole public surface of the rules and of the storage contract, named one by one so that
// a new item there is exported here on purpose.
pub use idem_core::{
    apply, classify, decide, derive, effect, egress, fingerprint, ids, mask_key, policy, record,
    redact, redact_db_url, reports_effect, retention_action, sanitize_message, time, webhook,
    Acquired, AlertDraft, AlertReason, AlertSecret, AllowEntry, AttemptCost, ClaimOutcome,
    ClaimReply, ClaimRequest, Class, Clock, CompleteRequest, Ctx, EffectReportRequest,
    EffectSentRequest, EgressPolicy, Event, EventDraft, EventType, FailErrorInput, FailReply,
    FailRequest, FailSignal, Fingerprint, HeartbeatRequest, Key, LastError, LeaseExpiry, LeaseId,
    Namespace, Op, OpError, Policy, PolicyError, PrepareRequest, PublicRecord, Reconciled, Record,
    Reply, RequestSummary, ResolveAction, ResolveRequest, RetentionAction, RetryDecision,
    RetryPolicy, ReviewReason, State, SystemClock, Tally, TestClock, Timestamp, Token, Transition,
    ValidationError, Verdict, Write,
};
pub use idem_core::{json_len_hint, to_text_sized};
pub use idem_core::{CostError, CostTotals, FENCED_COMPLETION_NOTE, MAX_COST_TOKENS, MAX_COST_USD};
pub use idem_core::{
    DeliveryOf, ForwardOutcome, ForwardReportRequest, ForwardRetry, ForwardStartRequest,
    IntakeReceiveRequest, IntakeReply, COLLISION_MESSAGE, FORWARD_OWNER, PAUSED_RECHECK_MS,
};
pub use idem_postgres::Pooler;
pub use idem_store::intake::{
    destination_owner as intake_destination_owner, forward_finish,
    forward_owner as intake_forward_owner, source_owner as intake_source_owner,
};
pub use idem_store::{action_owner, ActionRow, ActionWrite};
pub use idem_store::{
    generate_secret, hash_secret, AlertOutcome, ApiToken, Cursor, ExecCtx, Executed, Ledger,
    LedgerError, ListQuery, NamespaceChange, NamespaceInfo, NamespaceStats, NewApiToken, Page,
    PendingAlert, RecordWithEvents, RetentionReport, Role, StateCounts, Stats, Store, StoreError,
    SweepReport, ThenPrepare,
};
pub use idem_store::{
    AlertPayload, Jitter, NewOutboxItem, NewSecret, OutboxClaim, OutboxFinish, OutboxItem,
    OutboxKind, OutboxLease, OutboxOutcome, OutboxState, RetrySchedule, Secret, SecretKind,
    SecretOwner, StoredSecret,
};
pub use idem_store::{
    ConsoleSession, NamespaceActivity, NewConsoleSession, ReviewCursor, ReviewPage, ReviewQuery,
    REVIEW_STATES,
};
pub use idem_store::{
    Delivered, IntakeEventRow, IntakeQuery, IntakeUpdate, NewDelivery, NewIntakeEvent, ReportRider,
    Rider, SourceDelete, SourceRow, SourceWrite,
};

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Holds the URL already redacted ([`redact_db_url`]): errors end up in logs.
    #[error(
        "unsupported database URL {0:?}: use sqlite://PATH, a bare file path, or postgres://…"
    )]
    UnsupportedUrl(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where a database URL points. `Debug` shows it redacted.
#[derive(Clone, PartialEq, Eq)]
pub enum DbUrl {
    Sqlite(PathBuf),
    Postgres(String),
}

impl DbUrl {
    /// `sqlite://PATH`, `sqlite:PATH`, a bare path, or `postgres://` / `postgresql://`.
    pub fn parse(url: &str) -> Result<DbUrl, OpenError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(DbUrl::Postgres(url.to_owned()));
        }
        if let Some(p) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if p.is_empty() {
                return Err(OpenError::UnsupportedUrl(redact_db_url(url)));
            }
            return Ok(DbUrl::Sqlite(PathBuf::from(p)));
        }
        if url.is_empty() || url.contains("://") {
            return Err(OpenError::UnsupportedUrl(redact_db_url(url)));
        }
        Ok(DbUrl::Sqlite(PathBuf::from(url)))
    }

    /// The URL for logs ([`redact_db_url`]): passwords are replaced by `***`.
    pub fn redacted(&self) -> String {
        match self {
            DbUrl::Sqlite(p) => format!("sqlite://{}", p.display()),
            DbUrl::Postgres(u) => redact_db_url(u),
        }
    }
}

impl std::fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbUrl::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            DbUrl::Postgres(_) => f.debug_tuple("Postgres").field(&self.redacted()).finish(),
        }
    }
}

/// Settings of [`open_store_with`] that only some backends use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOptions {
    /// PostgreSQL connections per instance (ignored by SQLite).
    pub pg_pool: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            pg_pool: idem_postgres::PgOptions::default().max_connections,
        }
    }
}

/// Opens the store a URL names (running migrations).
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, OpenError> {
    open_store_with(url, &OpenOptions::default()).await
}

/// Opens the store a URL names with `opts` (running migrations).
pub async fn open_store_with(url: &str, opts: &OpenOptions) -> Result<Arc<dyn Store>, OpenError> {
    Ok(match DbUrl::parse(url)? {
        DbUrl::Sqlite(path) => Arc::new(idem_sqlite::SqliteStore::open(&path)?),
        DbUrl::Postgres(u) => {
            let pg = idem_postgres::PgOptions {
                max_connections: opts.pg_pool.max(1),
                ..idem_postgres::PgOptions::default()
            };
            Arc::new(idem_postgres::PgStore::connect_with(&u, pg).await?)
        }
    })
}

/// Opens a ledger on the store a URL names, with the system clock.
pub async fn open(url: &str) -> Result<Ledger, OpenError> {
    Ok(Ledger::new(open_store(url).await?))
}

/// Opens a ledger on the store a URL names with `opts`, with the system clock.
pub async fn open_with(url: &str, opts: &OpenOptions) -> Result<Ledger, OpenError> {
    Ok(Ledger::new(open_store_with(url, opts).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            DbUrl::parse("sqlite://idem.db").ok(),
            Some(DbUrl::Sqlite("idem.db".into()))
        );
        assert_eq!(
            DbUrl::parse("sqlite:///var/lib/idem.db").ok(),
            Some(DbUrl::Sqlite("/var/lib/idem.db".into()))
        );
        assert_eq!(
            DbUrl::parse("/tmp/x.db").ok(),
            Some(DbUrl::Sqlite("/tmp/x.db".into()))
        );
        assert!(matches!(
            DbUrl::parse("postgres://u:p@h/db"),
            Ok(DbUrl::Postgres(_))
        ));
        assert!(DbUrl::parse("mysql://x").is_err());
        assert!(DbUrl::parse("").is_err());
    }

    #[test]
    fn db_urls_never_show_a_password() {
        let pg = DbUrl::parse("postgres://u:p@ss@h:5432/db?password=two").expect("pg");
        assert_eq!(pg.redacted(), "postgres://u:***@h:5432/db?password=***");
        let dbg = format!("{pg:?}");
        assert!(!dbg.contains("p@ss") && !dbg.contains("two"), "{dbg}");
        let err = DbUrl::parse("mysql://root:hunter2@h/db").expect_err("unsupported");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
        assert!(err.to_string().contains("mysql://root:***@h/db"), "{err}");
        assert_eq!(
            DbUrl::parse("sqlite:///var/x.db")
                .expect("sqlite")
                .redacted(),
            "sqlite:///var/x.db"
        );
    }
}
