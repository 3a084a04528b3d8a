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
            // Making a new connection failed: nothing was sent, whatever the server said (the
            // database refuses connections or was dropped, the role may not log in). The store
            // is unavailable to this instance; the caller retries, the pool connects again.
            PoolError::Backend(e) => match classify(&e) {
                PgError::Store(StoreError::Internal(m)) => PgError::Store(StoreError::Unavailable(
                    format!("postgres: cannot connect: {m}"),
                )),
                other => other,
            },
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
    if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || crate::wrap::is_stale_wrapper(e)
    {
        return PgError::Retry;
    }
    let c = code.code();
    if let Some(what) = unexpected_connection(c) {
        // Not a bad request and not a bug: the server connection is not what idem connected to
        // (a pooler moved the session, a failover left a read-only server, an operator stopped
        // the server). The caller gets 503 and retries; the operator reads this line.
        tracing::warn!(
            sqlstate = c,
            condition = what.condition,
            hint = what.hint,
            "postgres: the connection is not what idem expected"
        );
        return PgError::Store(StoreError::Unavailable(format!(
            "postgres {c} ({}): {}",
            what.condition,
            db.message()
        )));
    }
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

/// An error that says the server connection is not the one idem expects to talk to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unexpected {
    pub condition: &'static str,
    pub hint: &'static str,
}

/// Which SQLSTATEs mean "the connection is not what idem expected", with the operator's hint.
pub(crate) fn unexpected_connection(sqlstate: &str) -> Option<Unexpected> {
    let (condition, hint) = match sqlstate {
        "26000" | "42P05" => (
            if sqlstate == "26000" {
                "invalid_sql_statement_name"
            } else {
                "duplicate_prepared_statement"
            },
            "a prepared statement went missing or belongs to someone else: a transaction \
             pooler is in front of PostgreSQL; add pooler=transaction to the database URL \
             (where it is there and the start line said statements=\"named\", the pooler \
             no longer carries named statements, e.g. PgBouncer's max_prepared_statements \
             was set to 0: restart idem, or add statements=unnamed)",
        ),
        "25006" => (
            "read_only_sql_transaction",
            "the server is read-only (a standby, or a primary after failover was demoted): \
             list every host in the URL with target_session_attrs=read-write",
        ),
        "57P01" => (
            "admin_shutdown",
            "the server is shutting down or was stopped; the pool reconnects",
        ),
        "57P02" => (
            "crash_shutdown",
            "the server crashed; the pool reconnects once it (or a promoted standby) is back",
        ),
        "57P03" => (
            "cannot_connect_now",
            "the server is starting up or in recovery",
        ),
        "08P01" => (
            "protocol_violation",
            "the server or a pooler refused the message (a pooler in statement mode?)",
        ),
        _ => return None,
    };
    Some(Unexpected { condition, hint })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_that_is_not_what_idem_expected_is_named_and_unavailable() {
        for c in [
            "26000", "42P05", "25006", "57P01", "57P02", "57P03", "08P01",
        ] {
            let u = unexpected_connection(c).expect(c);
            assert!(!u.condition.is_empty() && !u.hint.is_empty(), "{c}");
        }
        assert_eq!(
            unexpected_connection("26000").map(|u| u.condition),
            Some("invalid_sql_statement_name")
        );
        for c in ["23505", "42601", "40001", "22P02"] {
            assert_eq!(unexpected_connection(c), None, "{c}");
        }
    }
}
