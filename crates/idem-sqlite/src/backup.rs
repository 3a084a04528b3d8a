//! Online backup of a ledger file with SQLite's backup API, safe while `idem serve` (or any
//! other idem process) keeps writing to it.
//!
//! Owns: copying one consistent snapshot of a ledger into a new self-contained file (no
//! `-wal` beside it), checking the copy, and putting it under the target name atomically
//! (written to a temporary file in the same directory, fsync'd, renamed, directory fsync'd).
//! Must never: write to the source ledger (no migration, no pragma that changes it, no
//! checkpoint), create a source file that does not exist, or leave a partial copy under the
//! target name.
//!
//! Why one step: the whole copy runs as one `sqlite3_backup_step(-1)`, that is inside one
//! read transaction of the source. In WAL mode that transaction never blocks the writer, and
//! writes committed meanwhile cannot restart the copy (a copy made in small steps restarts
//! whenever another connection writes, so under steady load it might never finish).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::schema::latest_version;

/// How long a busy or locked source (e.g. a WAL recovery in another process) is retried.
const BUSY_RETRY_FOR: Duration = Duration::from_secs(30);
const BUSY_PAUSE: Duration = Duration::from_millis(50);

/// What a finished backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// Schema version (`PRAGMA user_version`) of the copy.
    pub schema_version: i64,
    /// Records in the copy (from the per-state counters).
    pub records: u64,
    /// Size of the copy in bytes.
    pub bytes: u64,
    /// Whether `PRAGMA integrity_check` ran on the copy (it answered `ok`, or the backup
    /// failed).
    pub checked: bool,
}

/// Why a backup did not produce a file. Paths are local file names, never a credential.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("cannot open the ledger {path}: {message}")]
    Source { path: PathBuf, message: String },
    #[error("{path} is not an idem ledger (schema version 0)")]
    NotALedger { path: PathBuf },
    #[error(
        "the ledger has schema version {found}, newer than this build knows ({known}): \
         back it up with a newer idem"
    )]
    NewerSchema { found: i64, known: i64 },
    #[error("the backup file {path} is the ledger itself")]
    SameFile { path: PathBuf },
    #[error("cannot write the backup {path}: {message}")]
    Target { path: PathBuf, message: String },
    #[error("copying the ledger failed: {0}")]
    Copy(String),
    #[error("the ledger stayed busy for {0:?}; try again")]
    Busy(Duration),
    #[error("the copy failed its integrity check: {0}")]
    Check(String),
}

/// Copies the ledger at `source` into `out` (replaced atomically if it exists) and, with
/// `check`, runs `PRAGMA integrity_check` on the copy before it gets its name.
pub fn backup(source: &Path, out: &Path, check: bool) -> Result<BackupReport, BackupError> {
    let src_err = |e: rusqlite::Error| BackupError::Source {
        path: source.to_owned(),
        message: e.to_string(),
    };
    // Read-write (WAL readers need the shared-memory file) but never CREATE: a typo in the
    // path must not make an empty "ledger" and back that up.
    let src = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(src_err)?;
    src.busy_timeout(BUSY_RETRY_FOR).map_err(src_err)?;
    // Nothing of the source is changed through this connection.
    src.pragma_update(None, "query_only", "ON")
        .map_err(src_err)?;
    let version: i64 = src
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(src_err)?;
    if version <= 0 {
        return Err(BackupError::NotALedger {
            path: source.to_owned(),
        });
    }
    if version > latest_version() {
        return Err(BackupError::NewerSchema {
            found: version,
            known: latest_version(),
        });
    }
    if same_file(source, out) {
        return Err(BackupError::SameFile {
            path: out.to_owned(),
        });
    }

    let tmp = temp_name(out);
    let result = copy_into(&src, &tmp, check).and_then(|report| {
        publish(&tmp, out)?;
        Ok(report)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn copy_into(src: &Connection, tmp: &Path, check: bool) -> Result<BackupReport, BackupError> {
    let target_err = |e: &dyn std::fmt::Display| BackupError::Target {
        path: tmp.to_owned(),
        message: e.to_string(),
    };
    match std::fs::remove_file(tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(target_err(&e)),
    }
    let mut dst = Connection::open(tmp).map_err(|e| target_err(&e))?;
    {
        let copy = Backup::new(src, &mut dst).map_err(|e| BackupError::Copy(e.to_string()))?;
        let started = Instant::now();
        loop {
            match copy
                .step(-1)
                .map_err(|e| BackupError::Copy(e.to_string()))?
            {
                StepResult::Done => break,
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked => {
                    if started.elapsed() > BUSY_RETRY_FOR {
                        return Err(BackupError::Busy(BUSY_RETRY_FOR));
                    }
                    std::thread::sleep(BUSY_PAUSE);
                }
                // The enum is non-exhaustive; any other answer is a failure, not a retry.
                other => return Err(BackupError::Copy(format!("backup step: {other:?}"))),
            }
        }
    }
    // The copy inherits the source's WAL mode; a backup is one file to move around.
    dst.pragma_update_and_check(None, "journal_mode", "DELETE", |_| Ok(()))
        .map_err(|e| target_err(&e))?;
    if check {
        let answer: String = dst
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| BackupError::Check(e.to_string()))?;
        if answer != "ok" {
            return Err(BackupError::Check(answer));
        }
    }
    let schema_version: i64 = dst
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| target_err(&e))?;
    // Counted by the store's triggers: per namespace since schema 9 (the ledger-wide counters
    // of schema 3 are gone since 12); older copies are counted row by row.
    let records: i64 = if schema_version >= 9 {
        dst.query_row(
            "SELECT COALESCE(SUM(n), 0) FROM namespace_counts",
            [],
            |r| r.get(0),
        )
    } else if schema_version >= 3 {
        dst.query_row("SELECT COALESCE(SUM(n), 0) FROM record_counts", [], |r| {
            r.get(0)
        })
    } else {
        dst.query_row("SELECT COUNT(*) FROM records", [], |r| r.get(0))
    }
    .map_err(|e| target_err(&e))?;
    dst.close().map_err(|(_, e)| target_err(&e))?;
    let file = std::fs::File::open(tmp).map_err(|e| target_err(&e))?;
    file.sync_all().map_err(|e| target_err(&e))?;
    let bytes = file.metadata().map_err(|e| target_err(&e))?.len();
    Ok(BackupReport {
        schema_version,
        records: u64::try_from(records).unwrap_or(0),
        bytes,
        checked: check,
    })
}

/// Renames the finished copy into place and makes the rename durable.
fn publish(tmp: &Path, out: &Path) -> Result<(), BackupError> {
    let err = |e: std::io::Error| BackupError::Target {
        path: out.to_owned(),
        message: e.to_string(),
    };
    std::fs::rename(tmp, out).map_err(err)?;
    let dir = parent_dir(out);
    // A directory cannot be fsync'd on every platform; the file itself already is.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn parent_dir(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// `.NAME.partial` beside `out`: same directory, so the final rename is atomic.
fn temp_name(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "idem-backup".to_owned());
    parent_dir(out).join(format!(".{name}.partial"))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_missing_file_without_creating_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.db");
        let err = backup(&missing, &dir.path().join("b.db"), true).expect_err("missing");
        assert!(matches!(err, BackupError::Source { .. }), "{err}");
        assert!(!missing.exists());
        assert!(!dir.path().join("b.db").exists());
    }

    #[test]
    fn refuses_a_file_that_is_not_a_ledger() {
        let dir = tempfile::tempdir().expect("tempdir");
        let other = dir.path().join("other.db");
        Connection::open(&other)
            .and_then(|c| c.execute_batch("CREATE TABLE t (x)"))
            .expect("other db");
        let err = backup(&other, &dir.path().join("b.db"), true).expect_err("not idem");
        assert!(matches!(err, BackupError::NotALedger { .. }), "{err}");
    }

    #[test]
    fn copies_a_ledger_into_one_file_and_never_onto_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("idem.db");
        drop(crate::SqliteStore::open(&db).expect("open"));
        let out = dir.path().join("copy.db");
        let report = backup(&db, &out, true).expect("backup");
        assert_eq!(report.schema_version, latest_version());
        assert_eq!(report.records, 0);
        assert!(report.checked);
        assert_eq!(
            report.bytes,
            std::fs::metadata(&out).expect("copy exists").len()
        );
        assert!(!temp_name(&out).exists(), "the partial file is renamed");
        let mode: String = Connection::open(&out)
            .and_then(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
            .expect("mode");
        assert_eq!(mode, "delete", "a backup is one self-contained file");
        let unchecked = backup(&db, &dir.path().join("fast.db"), false).expect("--no-check");
        assert!(!unchecked.checked);
        let err = backup(&db, &db, true).expect_err("same file");
        assert!(matches!(err, BackupError::SameFile { .. }), "{err}");
        let version: i64 = Connection::open(&db)
            .and_then(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))
            .expect("source still readable");
        assert_eq!(version, latest_version());
    }
}
