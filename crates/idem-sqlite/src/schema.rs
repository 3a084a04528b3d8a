//! Connection set-up and the embedded schema migrations.
//!
//! Invariants: every connection runs with `foreign_keys=ON` and a `busy_timeout` (several
//! instances may open one file: the write lock is then shared by waiting, never by failing
//! fast); the write connection also runs `journal_mode=WAL` (readers never block the writer)
//! and `synchronous=FULL` (a commit returns only after the WAL is fsync'd, so an acknowledged
//! write survives `kill -9` and power loss) — or, with pipelined sync ([`pipeline_wal`]),
//! `synchronous=NORMAL` plus an fsync of the WAL by the syncer thread before any write of the
//! batch is acknowledged. Migrations are applied in order inside one
//! `BEGIN IMMEDIATE` transaction and the schema version is `PRAGMA user_version`, so two
//! processes opening a fresh file at once cannot both migrate it. Migrations are append-only:
//! never edit a released one, add the next.
//!
//! The migrations themselves and the checkpointer have a module each.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_store::StoreError;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

mod checkpoint;
mod migrations;

pub(crate) use checkpoint::run_checkpointer;
pub use migrations::latest_version;
use migrations::MIGRATIONS;

use crate::error::SqlResult;

/// Page cache of the write connection, KiB (see `open_writer`).
const WRITER_CACHE_KIB: i64 = 2048;

/// The size a WAL is cut back to once it starts over, bytes (see `open_writer`): 64 MiB,
/// several times what the writer appends between two checkpoints at full speed.
pub(crate) const WAL_SIZE_LIMIT: i64 = 64 << 20;

/// Opens the connection that owns all writes, sets it up and migrates the schema.
pub(crate) fn open_writer(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .db()?;
    conn.busy_timeout(busy_timeout).db()?;
    // Only takes effect on a new file (before WAL and the first table).
    conn.pragma_update(None, "page_size", 1024).db()?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .db()?;
    if !mode.eq_ignore_ascii_case("wal") {
        // In-memory and some exotic file systems cannot do WAL; durability still holds with
        // synchronous=FULL, only readers then wait for the writer.
        tracing::warn!(journal_mode = %mode, "sqlite: WAL not available");
    }
    conn.pragma_update(None, "synchronous", "FULL").db()?;
    conn.pragma_update(None, "foreign_keys", "ON").db()?;
    // Savepoint journals (one per job of a batch) stay in memory instead of a temp file.
    conn.pragma_update(None, "temp_store", "MEMORY").db()?;
    // 2 MiB of page cache (2,048 pages of 1 KiB). Not more, measured: while the ledger is
    // under 1 GiB, B-tree rebalancing renumbers pages through the page after SQLite's lock
    // byte (1 GiB), and the next commit then scans the whole page-cache hash to drop pages
    // past the end of the file; with 16 MiB that scan took ~18 % of the writer's CPU. With
    // 2 MiB, claim p99 at 10M records (past 1 GiB) measured 3.6 ms against 4.2 ms at 0
    // records: the OS page cache serves the rest. docs/performance.md has the figures.
    conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)
        .db()?;
    // Checkpoints run on their own thread (see `checkpointer`), off the writer's path.
    conn.pragma_update(None, "wal_autocheckpoint", 0).db()?;
    // A WAL that grew past this (a long read pinned it through a burst of writes) is cut back
    // to it at the first commit after a complete checkpoint lets the WAL start over, so a
    // burst does not keep its disk space for the life of the file; below it SQLite reuses the
    // file in place, which is faster than growing it again.
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
        .db()?;
    conn.set_prepared_statement_cache_capacity(64);
    migrate(&mut conn)?;
    // Scratch space of the retention step: one connection's private table, never on disk in
    // the ledger file, so it costs nothing to the durability of the batch.
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS retention_batch \
         (rid INTEGER PRIMARY KEY, namespace TEXT NOT NULL, key TEXT NOT NULL);",
    )
    .db()?;
    Ok(conn)
}

/// Switches the write connection to pipelined sync when the ledger is in WAL mode: its
/// commits stop fsyncing (`synchronous=NORMAL`) and the returned handle of the WAL file is
/// what the syncer thread fsyncs before any job of a batch is answered (see
/// [`crate::writer`]). `None` (and `synchronous=FULL` kept) when the ledger is not in WAL
/// mode or its WAL file cannot be opened.
pub(crate) fn pipeline_wal(
    conn: &Connection,
    path: &Path,
) -> Result<Option<std::fs::File>, StoreError> {
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .db()?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Ok(None);
    }
    // SQLite names the WAL after the database file as it opened it.
    let db_file = conn
        .path()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| path.to_owned());
    let mut wal_name = db_file.into_os_string();
    wal_name.push("-wal");
    // Migrations wrote through the WAL, so it exists; open it without creating anything.
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&wal_name)
    {
        Ok(file) => {
            conn.pragma_update(None, "synchronous", "NORMAL").db()?;
            Ok(Some(file))
        }
        Err(e) => {
            tracing::warn!(error = %e, "sqlite: cannot open the WAL file; every commit fsyncs itself");
            Ok(None)
        }
    }
}

/// Opens one read connection (WAL lets it read beside the writer; `query_only` makes sure a
/// read path can never write behind the writer's back).
pub(crate) fn open_reader(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .db()?;
    conn.busy_timeout(busy_timeout).db()?;
    conn.pragma_update(None, "foreign_keys", "ON").db()?;
    conn.pragma_update(None, "query_only", "ON").db()?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .db()?;
    let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).db()?;
    if current > latest_version() {
        return Err(StoreError::Internal(format!(
            "the ledger file has schema version {current}, newer than this build knows ({}): \
             upgrade idem",
            latest_version()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current.max(0) as usize) {
        tx.execute_batch(sql).db()?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)
            .db()?;
        tracing::info!(version = i + 1, "sqlite: schema migrated");
    }
    tx.commit().db()
}

#[cfg(test)]
mod tests;
