//! Mapping of SQLite errors to [`StoreError`].
//!
//! The rule: anything that may succeed when retried later (busy, locked, I/O, disk full, cannot
//! open) is `Unavailable` (the API answers 503 and the client retries); anything that says the
//! stored bytes do not mean what we wrote (corrupt file, wrong column type, unparsable value)
//! is `Corrupt`; the rest is `Internal`. Nothing here ever panics.

use idem_store::StoreError;
use rusqlite::ErrorCode;

/// Maps one driver error.
pub(crate) fn map(e: rusqlite::Error) -> StoreError {
    match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::SystemIoFailure
            | ErrorCode::DiskFull
            | ErrorCode::CannotOpen
            | ErrorCode::OutOfMemory
            | ErrorCode::FileLockingProtocolFailed
            | ErrorCode::ReadOnly
            | ErrorCode::PermissionDenied => StoreError::Unavailable(e.to_string()),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                StoreError::Corrupt(e.to_string())
            }
            _ => StoreError::Internal(e.to_string()),
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::Utf8Error(..) => StoreError::Corrupt(e.to_string()),
        _ => StoreError::Internal(e.to_string()),
    }
}

/// `?`-friendly conversion of driver results.
pub(crate) trait SqlResult<T> {
    fn db(self) -> Result<T, StoreError>;
}

impl<T> SqlResult<T> for Result<T, rusqlite::Error> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(map)
    }
}

/// A stored value that does not parse back.
pub(crate) fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}
