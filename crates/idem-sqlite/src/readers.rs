//! A small pool of read connections, used from async code through `spawn_blocking`.
//!
//! Invariants: at most `size` reads run at once (a semaphore), so a burst of reads cannot
//! open unbounded connections or starve the blocking thread pool; connections are opened
//! lazily and put back after use, and one that failed is dropped rather than reused (it may
//! be in a bad state after an I/O error).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_store::StoreError;
use rusqlite::Connection;
use tokio::sync::Semaphore;

use crate::schema::open_reader;

#[derive(Debug)]
pub(crate) struct Readers {
    inner: Arc<Inner>,
    permits: Semaphore,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    busy_timeout: Duration,
    /// Idle connections; the lock is held only to push or pop, never across a query.
    idle: Mutex<Vec<Connection>>,
    /// Idle connections of [`Readers::read_inline`] (short busy timeout).
    inline_idle: Mutex<Vec<Connection>>,
}

/// How long an inline read waits for a lock before its caller takes the slow path instead.
/// WAL readers are only ever blocked briefly (WAL recovery, a restarting WAL), so this is a
/// guard against stalling an async worker thread, not a limit normal traffic meets.
const INLINE_BUSY_TIMEOUT: Duration = Duration::from_millis(20);

impl Inner {
    fn take(&self) -> Result<Connection, StoreError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        match idle {
            Some(c) => Ok(c),
            None => open_reader(&self.path, self.busy_timeout),
        }
    }
    fn put(&self, c: Connection) {
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(c);
    }
}

impl Readers {
    pub(crate) fn new(path: PathBuf, size: usize, busy_timeout: Duration) -> Self {
        Readers {
            inner: Arc::new(Inner {
                path,
                busy_timeout,
                idle: Mutex::new(Vec::new()),
                inline_idle: Mutex::new(Vec::new()),
            }),
            permits: Semaphore::new(size.max(1)),
        }
    }

    /// Runs `f` on a read connection off the async threads.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("sqlite readers closed".into()))?;
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut conn = inner.take()?;
            let out = f(&mut conn);
            if !matches!(
                out,
                Err(StoreError::Unavailable(_) | StoreError::Corrupt(_))
            ) {
                inner.put(conn);
            }
            out
        })
        .await
        .map_err(|e| StoreError::Internal(format!("sqlite read task failed: {e}")))?
    }

    /// Runs `f` right here, on the calling (async) thread: for point reads by primary key on
    /// the request path, which take microseconds from the page cache — cheaper than handing
    /// them to the blocking pool and back. At most one connection per thread calling at once;
    /// a connection is opened with a short busy timeout, so a locked file makes `f` fail fast
    /// and the caller falls back to its slow path.
    pub(crate) fn read_inline<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let inner = &self.inner;
        let idle = inner
            .inline_idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        let mut conn = match idle {
            Some(c) => c,
            None => open_reader(&inner.path, INLINE_BUSY_TIMEOUT)?,
        };
        let out = f(&mut conn);
        if !matches!(
            out,
            Err(StoreError::Unavailable(_) | StoreError::Corrupt(_))
        ) {
            inner
                .inline_idle
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(conn);
        }
        out
    }
}
