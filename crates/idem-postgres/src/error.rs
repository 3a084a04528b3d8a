//! Driver errors mapped to [`StoreError`].
//!
//! The rule that matters: an error never turns into a wrong outcome. Anything that says the
//! database is unreachable, shutting down, overloaded or that the outcome of a commit is
//! unknown becomes [`StoreError::Unavailable`] (503 `store_unavailable`: the caller retries the
//! same request, which is idempotent by construction). Serialization failures and deadlocks
//! roll the transaction back entirely, so they are retried in place. Everything else is a bug
//! or a damaged schema and becomes [`StoreError::Internal`]. Messages never carry parameters
//! (payloads, tokens): only the SQLSTATE and the server's message text.

use deadpool_postgres::PoolError;
use idem_store::StoreError;
use tokio_postgres::error::SqlState;

/// What an attempt inside a retry loop ran into.
#[derive(Debug)]
pub(crate) enum PgError {
    /// Rolled back by the database (serialization failure, deadlock) or a lost optimistic
    /// guard: run the whole attempt again on fresh data.
    Retry,
    /// Give up with this error.
    Store(StoreError),
}

impl From<StoreError> for PgError {
    fn from(e: StoreError) -> Self {
        PgError::Store(e)
    }
}

impl From<PgError> for idem_store::engine::TxError {
    fn from(e: PgError) -> Self {
        match e {
            PgError::Retry => idem_store::engine::TxError::Race,
            PgError::Store(s) => idem_store::engine::TxError::Store(s),
        }
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        classify(&e)
    }
}

impl From<PoolError> for PgError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Backend(e) => classify(&e),
            PoolError::Timeout(t) => PgError::Store(StoreError::Unavailable(format!(
                "postgres: connection pool timeout ({t:?})"
            ))),
            PoolError::Closed => {
                PgError::Store(StoreError::Unavailable("postgres: pool closed".into()))
            }
            PoolError::PostCreateHook(h) => PgError::Store(StoreError::Unavailable(format!(
                "postgres: connection setup failed: {h}"
            ))),
            PoolError::NoRuntimeSpecified => PgError::Store(StoreError::Internal(
                "postgres: pool built without a runtime".into(),
            )),
        }
    }
}

/// Maps one driver error.
pub(crate) fn classify(e: &tokio_postgres::Error) -> PgError {
    let Some(db) = e.as_db_error() else {
        // No SQLSTATE: I/O error, closed connection, timeout, protocol error. The database (or
        // the path to it) is the problem, not the request.
        return PgError::Store(StoreError::Unavailable(format!("postgres: {e}")));
    };
    let code = db.code();
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        return PgError::Retry;
    }
    let c = code.code();
    let unavailable = c.starts_with("08") // connection exception
        || c.starts_with("53") // insufficient resources (too many connections, disk full)
        || c.starts_with("57P") // admin/crash shutdown, cannot connect now
        || c == "57014" // query canceled: statement_timeout
        || c == "40003" // statement completion unknown (CockroachDB ambiguous commit)
        || c == "25006" // read-only transaction: we talk to a replica after a failover
        || c == "55P03" // lock not available (lock_timeout)
        || c.starts_with("58"); // system error (I/O)
    let msg = format!("postgres {c}: {}", db.message());
    if unavailable {
        PgError::Store(StoreError::Unavailable(msg))
    } else {
        PgError::Store(StoreError::Internal(msg))
    }
}

/// Maps a driver error outside a retry loop (a `Retry` there is reported as unavailable: the
/// caller may simply try again).
pub(crate) fn store_err(e: impl Into<PgError>) -> StoreError {
    match e.into() {
        PgError::Store(s) => s,
        PgError::Retry => {
            StoreError::Unavailable("postgres: transaction conflict, try again".into())
        }
    }
}
