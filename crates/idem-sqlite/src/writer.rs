//! The single writer and its group commit.
//!
//! One OS thread owns the only write connection of a [`crate::SqliteStore`]. Every write is a
//! [`WriteJob`] sent over a channel. The thread takes one job, drains whatever else is queued
//! (up to `max_batch`), opens `BEGIN IMMEDIATE`, runs the jobs, then issues ONE `COMMIT` —
//! one fsync for the whole batch — and only after it succeeded answers every job.
//!
//! Jobs first run back to back without savepoints (a savepoint per job costs ~9 % of the
//! writer's CPU: its statements and the journal copy of every page it touches). Jobs almost
//! never fail; when one does, the whole transaction is rolled back and the batch runs again
//! from the same starting state, now each job under its own `SAVEPOINT`: the failing job is
//! rolled back to its savepoint and answered with its error, the others proceed. Jobs are
//! therefore re-runnable (`FnMut`) and must depend only on the database and their inputs.
//! Invariants:
//! - no job is answered `Ok` before the commit that contains its write returned;
//! - if the commit (or the transaction itself) fails, every job of the batch gets an error;
//! - jobs of one batch run in arrival order, each seeing the writes of those before it, so a
//!   batch is equivalent to running its jobs one by one.
//!
//! With `max_batch = 1` this degrades to one transaction (one fsync) per write.

use std::sync::mpsc::{Receiver, TryRecvError};

use idem_store::StoreError;
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::map;

/// One unit of work for the writer thread.
pub(crate) trait WriteJob: Send {
    /// Runs the job inside the open batch transaction. `false` means it failed and its changes
    /// must be rolled back. May be called again after the transaction was rolled back: the
    /// later run's result replaces the earlier one.
    fn run(&mut self, conn: &Connection) -> bool;
    /// Answers the caller once the batch's fate is known: `commit` is the batch result.
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
}

/// A closure job whose result is held back until the batch committed.
pub(crate) struct Task<T, F> {
    work: F,
    out: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Task<T, F> {
    pub(crate) fn new(work: F, reply: oneshot::Sender<Result<T, StoreError>>) -> Self {
        Task {
            work,
            out: None,
            reply,
        }
    }
}

impl<T, F> WriteJob for Task<T, F>
where
    T: Send,
    F: FnMut(&Connection) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let out = (self.work)(conn);
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let answer = match commit {
            Err(e) => Err(e),
            Ok(()) => self
                .out
                .unwrap_or_else(|| Err(StoreError::Internal("write job never ran".into()))),
        };
        // The caller may have given up waiting (request cancelled): nothing to do then.
        let _ = self.reply.send(answer);
    }
}

pub(crate) type BoxJob = Box<dyn WriteJob>;

/// The writer thread's loop; returns when every sender is gone (the store was dropped).
pub(crate) fn run(conn: Connection, rx: Receiver<BoxJob>, max_batch: usize) {
    let max_batch = max_batch.max(1);
    while let Ok(first) = rx.recv() {
        let mut batch = Vec::with_capacity(max_batch.min(64));
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        run_batch(&conn, batch);
    }
    tracing::debug!("sqlite: writer stopped");
}

/// Runs one batch in one transaction and answers every job after its commit.
pub(crate) fn run_batch(conn: &Connection, mut batch: Vec<BoxJob>) {
    let commit = match run_jobs(conn, &mut batch, false) {
        Pass::Done => exec(conn, "COMMIT"),
        Pass::Broken(e) => Err(e),
        // Start over from the same state, each job under its own savepoint.
        Pass::JobFailed => match exec(conn, "ROLLBACK") {
            Err(e) => Err(e),
            Ok(()) => match run_jobs(conn, &mut batch, true) {
                Pass::Done | Pass::JobFailed => exec(conn, "COMMIT"),
                Pass::Broken(e) => Err(e),
            },
        },
    };
    if commit.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    if let Err(e) = &commit {
        tracing::warn!(error = %e, jobs = batch.len(), "sqlite: write batch not committed");
    }
    for job in batch {
        job.finish(commit.clone());
    }
}

/// How a pass over the batch ended (the transaction is open unless `Broken`… or rolled back
/// by SQLite itself, which `Broken` also covers).
enum Pass {
    /// Every job succeeded (with savepoints: every failing job was rolled back alone).
    Done,
    /// Without savepoints: a job failed; its partial writes are in the open transaction.
    JobFailed,
    /// The transaction as a whole is lost: every job fails, done or not.
    Broken(StoreError),
}

/// Opens the batch transaction and runs every job in it, in order.
fn run_jobs(conn: &Connection, batch: &mut [BoxJob], savepoints: bool) -> Pass {
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        tracing::warn!(error = %e, jobs = batch.len(), "sqlite: cannot begin write batch");
        return Pass::Broken(e);
    }
    for job in batch.iter_mut() {
        if savepoints {
            if let Err(e) = exec(conn, "SAVEPOINT job") {
                return Pass::Broken(e);
            }
        }
        let ok = job.run(conn);
        // Some errors (I/O, full disk) make SQLite roll the whole transaction back: the
        // earlier jobs' writes are gone too, so none of them may be acknowledged.
        if !ok && conn.is_autocommit() {
            return Pass::Broken(StoreError::Unavailable(
                "the write transaction was aborted by a failing step".into(),
            ));
        }
        let closed = match (savepoints, ok) {
            (false, true) => Ok(()),
            (false, false) => return Pass::JobFailed,
            (true, true) => exec(conn, "RELEASE job"),
            (true, false) => exec(conn, "ROLLBACK TO job").and_then(|()| exec(conn, "RELEASE job")),
        };
        if let Err(e) = closed {
            return Pass::Broken(e);
        }
    }
    Pass::Done
}

fn exec(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(|_| ())
        .map_err(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::open_writer;
    use std::time::Duration;

    type Reply = oneshot::Receiver<Result<(), StoreError>>;

    fn job<F>(work: F) -> (BoxJob, Reply)
    where
        F: FnMut(&Connection) -> Result<(), StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        (Box::new(Task::new(work, tx)), rx)
    }

    fn insert(label: &'static str) -> impl FnMut(&Connection) -> Result<(), StoreError> {
        move |c: &Connection| {
            c.execute(
                "INSERT INTO api_tokens (secret_hash, role, scope, label, created_at) \
                 VALUES (?1, 'worker', '*', ?1, 0)",
                [label],
            )
            .map_err(map)?;
            Ok(())
        }
    }

    fn labels(conn: &Connection) -> Vec<String> {
        let mut s = conn
            .prepare("SELECT label FROM api_tokens ORDER BY id")
            .expect("prepare");
        let rows = s.query_map([], |r| r.get(0)).expect("query");
        rows.collect::<Result<_, _>>().expect("rows")
    }

    fn answer(mut rx: Reply) -> Result<(), StoreError> {
        rx.try_recv().expect("answered by the end of the batch")
    }

    #[test]
    fn a_failing_job_is_rolled_back_alone_and_the_others_commit() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("w.db"), Duration::from_secs(1)).expect("open");
        let (a, ra) = job(insert("a"));
        // Writes, then fails: its write must vanish with its savepoint.
        let (b, rb) = job(|c: &Connection| {
            insert("b")(c)?;
            Err(StoreError::Internal("step failed".into()))
        });
        let (c, rc) = job(insert("c"));
        run_batch(&conn, vec![a, b, c]);
        assert!(answer(ra).is_ok());
        assert!(matches!(answer(rb), Err(StoreError::Internal(_))));
        assert!(answer(rc).is_ok());
        assert_eq!(labels(&conn), ["a", "c"]);
        assert!(conn.is_autocommit(), "the batch transaction is closed");
    }

    /// Jobs run again after a failure see exactly the state they saw the first time: a job
    /// that counts the rows before it writes gets the same count in both runs, and the failing
    /// job's own write is gone.
    #[test]
    fn a_rerun_batch_starts_from_the_same_state() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("w.db"), Duration::from_secs(1)).expect("open");
        let (a, ra) = job(insert("a"));
        let (tx, rb) = oneshot::channel();
        let b: BoxJob = Box::new(Task::new(
            |c: &Connection| -> Result<i64, StoreError> {
                insert("b")(c)?;
                c.query_row("SELECT COUNT(*) FROM api_tokens", [], |r| r.get(0))
                    .map_err(map)
            },
            tx,
        ));
        // Fails after writing: forces the second pass.
        let (c, rc) = job(|c: &Connection| {
            insert("c")(c)?;
            Err(StoreError::Internal("step failed".into()))
        });
        let (d, rd) = job(insert("d"));
        run_batch(&conn, vec![a, b, c, d]);
        assert!(answer(ra).is_ok());
        assert_eq!(rb.blocking_recv().expect("answered").expect("ok"), 2);
        assert!(answer(rc).is_err());
        assert!(answer(rd).is_ok());
        assert_eq!(labels(&conn), ["a", "b", "d"]);
    }

    #[test]
    fn a_lost_transaction_fails_every_job_of_the_batch() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("w.db"), Duration::from_secs(1)).expect("open");
        let (a, ra) = job(insert("a"));
        // Stands in for an I/O error that makes SQLite roll the whole transaction back.
        let (b, rb) = job(|c: &Connection| {
            c.execute_batch("ROLLBACK").map_err(map)?;
            Err(StoreError::Unavailable("disk gone".into()))
        });
        let (c, rc) = job(insert("c"));
        run_batch(&conn, vec![a, b, c]);
        for r in [ra, rb, rc] {
            assert!(matches!(answer(r), Err(StoreError::Unavailable(_))));
        }
        assert!(labels(&conn).is_empty());
        // The writer goes on with the next batch.
        let (d, rd) = job(insert("d"));
        run_batch(&conn, vec![d]);
        assert!(answer(rd).is_ok());
        assert_eq!(labels(&conn), ["d"]);
    }
}
