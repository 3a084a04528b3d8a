//! The checkpointer: its own connection copies the WAL back into the database file with
//! PASSIVE checkpoints (TRUNCATE once the WAL has grown large and the writer is idle), reopening
//! after a failed open, so the writer never stalls on a checkpoint.
//!
//! It never writes a row and must never block the writer or a reader; a failure is logged once
//! when it starts and once when it clears.

use std::path::Path;
use std::time::Duration;

use idem_store::StoreError;
use rusqlite::Connection;

use super::open_reader;
use crate::error::SqlResult;

/// Copies the WAL back into the database file from its own connection, so the writer never
/// stalls on a checkpoint. PASSIVE never blocks the writer or readers; the WAL restarts from
/// its beginning at the next write after a complete checkpoint. Runs until `stop` is dropped.
///
/// The connection is opened on the first pass and again after any pass that could not open
/// it: a ledger whose checkpointer failed to open once (a full disk at start, a file briefly
/// unreadable) must not be left with a WAL that grows for the rest of the process. One WARN
/// when opening starts failing, one INFO when it opens again.
pub(crate) fn run_checkpointer(
    path: &Path,
    busy_timeout: Duration,
    stop: std::sync::mpsc::Receiver<()>,
) {
    let mut conn: Option<Connection> = None;
    let mut failing = false;
    let mut frames = None;
    loop {
        if conn.is_none() {
            match open_checkpointer(path, busy_timeout) {
                Ok(c) => {
                    if failing {
                        tracing::info!("sqlite: checkpointer open again");
                        failing = false;
                    }
                    conn = Some(c);
                }
                Err(e) if !failing => {
                    tracing::warn!(error = %e, "sqlite: checkpointer cannot open; retrying every \
                        pass, the WAL grows meanwhile");
                    failing = true;
                }
                Err(e) => tracing::debug!(error = %e, "sqlite: checkpointer cannot open"),
            }
        }
        if let Some(c) = &conn {
            frames = checkpoint(c, frames);
        }
        match stop.recv_timeout(CHECKPOINT_EVERY) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            // Stopped: a last pass so a cleanly closed ledger leaves a small WAL.
            _ => break,
        }
    }
    if let Some(c) = &conn {
        let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    }
}

/// How often the checkpointer copies the WAL back (and retries opening).
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// WAL frames (1 KiB pages) past which a checkpoint makes the WAL start over and gives its
/// disk space back: 16,384, 16 MiB.
pub(super) const WAL_TRUNCATE_FRAMES: i64 = 16_384;

/// How long an escalated checkpoint waits for the writer and the readers before it gives up
/// until the next pass (the writer waits behind it meanwhile).
const TRUNCATE_WAIT: Duration = Duration::from_millis(50);

/// One pass: PASSIVE, which never waits for anyone. Under steady load a reader is nearly
/// always inside the WAL and the writer appends while the checkpoint copies, so the WAL may
/// never start over and grows by every commit; once it holds more than
/// [`WAL_TRUNCATE_FRAMES`], the pass escalates (see [`escalation`]) and waits (at most
/// [`TRUNCATE_WAIT`]) for the readers to leave. Without it a burst could grow the WAL until the
/// disk was full, and then nothing idem does frees space: the checkpoint needs room to grow
/// the database file, and the WAL keeps all the room (seen under a full test suite on an
/// 8 MiB filesystem: a 7.4 MiB WAL beside a 540 KiB ledger). Returns the WAL's frames, for
/// the next pass.
fn checkpoint(c: &Connection, before: Option<i64>) -> Option<i64> {
    let frames = |mode: &str| {
        c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        })
    };
    match frames("PASSIVE") {
        Ok((_, log)) => {
            if let Some(mode) = escalation(log, before) {
                match frames(mode) {
                    Ok((0, _)) => tracing::debug!(frames = log, mode, "sqlite: WAL started over"),
                    Ok(_) => tracing::debug!(frames = log, mode, "sqlite: WAL busy; next pass"),
                    Err(e) => tracing::debug!(error = %e, mode, "sqlite: WAL escalation skipped"),
                }
            }
            Some(log)
        }
        Err(e) => {
            tracing::debug!(error = %e, "sqlite: checkpoint skipped");
            None
        }
    }
}

/// The checkpoint a pass escalates to when the WAL holds `log` frames and the previous pass
/// found `before`. Past [`WAL_TRUNCATE_FRAMES`] while commits keep coming: `RESTART`, so the
/// next commit writes the WAL over from its beginning, in place, and cuts the file back to
/// [`WAL_SIZE_LIMIT`] (`journal_size_limit`); a `TRUNCATE` there made every commit after it
/// grow the file again, a cost on every fsync (the SQLite in-process rows at 64 callers ran
/// 6 % slower with it; `docs/performance.md`). Past it with no commit since the previous pass:
/// `TRUNCATE`, which cuts the file to zero, since no commit will come to cut it back.
pub(super) fn escalation(log: i64, before: Option<i64>) -> Option<&'static str> {
    if log <= WAL_TRUNCATE_FRAMES {
        None
    } else if before == Some(log) {
        Some("TRUNCATE")
    } else {
        Some("RESTART")
    }
}

/// The checkpointer's connection. synchronous=FULL, stated rather than left to the build's
/// default: a checkpoint must sync the WAL before it copies frames into the database file,
/// because with pipelined sync the writer's own commits do not (see `crate::writer`).
///
/// The connection is only kept once it has seen the ledger in WAL mode. A connection learns
/// the journal mode at its first read and `wal_checkpoint` never reads again, so one opened on
/// a file that was still empty (created, not yet switched to WAL: the window inside
/// `open_writer`) would stay in rollback mode and make every later pass a silent no-op while
/// the WAL grew; refusing it here makes the next pass open a fresh one.
pub(super) fn open_checkpointer(
    path: &Path,
    busy_timeout: Duration,
) -> Result<Connection, StoreError> {
    let c = open_reader(path, busy_timeout.min(TRUNCATE_WAIT))?;
    c.pragma_update(None, "query_only", "OFF").db()?;
    c.pragma_update(None, "synchronous", "FULL").db()?;
    c.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .db()?;
    let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).db()?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Unavailable(format!(
            "the ledger is not in WAL mode yet (journal mode {mode})"
        )));
    }
    Ok(c)
}
