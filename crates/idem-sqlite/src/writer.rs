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
//!
//! **Pipelined sync** (the default on a WAL ledger): the write connection runs with
//! `synchronous=NORMAL`, so `COMMIT` writes the batch's WAL frames without waiting for the
//! disk. The batch then goes to the syncer thread, which fsyncs the WAL file — once for every
//! batch queued meanwhile — and only then answers its jobs, while the writer already runs the
//! next batch. Every frame of a batch is written before its `COMMIT` returns, and an fsync
//! covers everything written to the file before it, so a job is still never answered before
//! its commit is on disk; the writer just no longer idles during the fsync. Reads wait for the
//! same point ([`crate::durable`]). Without WAL, or with `pipelined_sync` off, the writer
//! commits with `synchronous=FULL` and answers the batch itself.

use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;

use idem_store::StoreError;
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::durable::{Durability, SettleOnPanic};
use crate::error::map;

/// One unit of work for the writer thread.
pub(crate) trait WriteJob: Send {
    /// Runs the job inside the open batch transaction. `false` means it failed and its changes
    /// must be rolled back. May be called again after the transaction was rolled back: the
    /// later run's result replaces the earlier one.
    fn run(&mut self, conn: &Connection) -> bool;
    /// Answers the caller once the batch's fate is known: `commit` is the batch result.
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
    /// The batch will not run again (its transaction committed or was given up): let go of
    /// what only running needed — the operation and its payload — before the batch waits for
    /// its fsync. An effect's 256 KiB answer is then held once (in the result) while it waits,
    /// not twice.
    fn ran(&mut self) {}
    /// The job only appends an audit event: it changes no record, so a batch of such jobs
    /// alone is not waited for by decisions on a snapshot (see [`crate::durable`]).
    fn audit_only(&self) -> bool {
        false
    }
}

/// A closure job whose result is held back until the batch committed.
pub(crate) struct Task<T, F> {
    /// `None` once the batch ran for the last time ([`WriteJob::ran`]).
    work: Option<F>,
    out: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Task<T, F> {
    pub(crate) fn new(work: F, reply: oneshot::Sender<Result<T, StoreError>>) -> Self {
        Task {
            work: Some(work),
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
        let out = match self.work.as_mut() {
            Some(work) => work(conn),
            None => Err(StoreError::Internal(
                "write job ran after it was let go".into(),
            )),
        };
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn ran(&mut self) {
        self.work = None;
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

/// A committed (or failed) batch on its way to the syncer.
pub(crate) struct Settle {
    seq: u64,
    jobs: Vec<BoxJob>,
    commit: Result<(), StoreError>,
}

/// The writer thread's loop; returns when every sender is gone (the store was dropped).
/// With `syncer`, committed batches are answered by the syncer thread after its fsync;
/// without, the commit itself was durable (`synchronous=FULL`) and the batch is answered here.
pub(crate) fn run(
    conn: Connection,
    rx: Receiver<BoxJob>,
    max_batch: usize,
    durability: Arc<Durability>,
    syncer: Option<Sender<Settle>>,
) {
    let _guard = SettleOnPanic(durability.clone());
    let max_batch = max_batch.max(1);
    let mut failures = FailureLog::default();
    while let Ok(first) = rx.recv() {
        let mut batch = Vec::with_capacity(max_batch.min(64));
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let seq = durability.start_batch(batch.iter().all(|j| j.audit_only()));
        // After a failed fsync nothing more is written (see `crate::durable`).
        let changes = conn.total_changes();
        let commit = match durability.check() {
            Ok(()) => commit_and_let_go(&conn, &mut batch),
            Err(e) => Err(e),
        };
        let wrote = conn.total_changes() > changes;
        failures.record(&commit, batch.len(), wrote);
        if commit.is_err() || wrote {
            durability.set_failing(commit.is_err());
        }
        let settle = Settle {
            seq,
            jobs: batch,
            commit,
        };
        match &syncer {
            Some(tx) => {
                if let Err(mpsc_err) = tx.send(settle) {
                    // The syncer is gone: nobody can make this batch durable.
                    let s = mpsc_err.0;
                    finish_all(s.jobs, Err(durability.poison()));
                    durability.settle(s.seq);
                }
            }
            None => {
                durability.settle(seq);
                finish_all(settle.jobs, settle.commit);
            }
        }
    }
    tracing::debug!("sqlite: writer stopped");
}

/// The syncer thread's loop: fsyncs once for every batch queued since the last fsync, then
/// answers their jobs; returns when the writer is gone. `sync` makes the WAL file durable.
pub(crate) fn run_syncer(
    rx: Receiver<Settle>,
    mut sync: impl FnMut() -> std::io::Result<()>,
    durability: Arc<Durability>,
) {
    let _guard = SettleOnPanic(durability.clone());
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while let Ok(s) = rx.try_recv() {
            group.push(s);
        }
        let last = group.iter().map(|s| s.seq).max().unwrap_or(0);
        let synced = if group.iter().any(|s| s.commit.is_ok()) {
            sync().map_err(|e| {
                tracing::error!(error = %e, "sqlite: fsync of the WAL failed; refusing every \
                    later read and write until restart");
                durability.poison()
            })
        } else {
            Ok(())
        };
        // Reads may go on before the jobs hear back: their data is settled either way.
        durability.settle(last);
        for s in group {
            let result = match (s.commit, &synced) {
                (Ok(()), Ok(())) => Ok(()),
                (Ok(()), Err(e)) => Err(e.clone()),
                (Err(e), _) => Err(e),
            };
            finish_all(s.jobs, result);
        }
    }
    tracing::debug!("sqlite: syncer stopped");
}

fn finish_all(jobs: Vec<BoxJob>, result: Result<(), StoreError>) {
    for job in jobs {
        job.finish(result.clone());
    }
}

/// Runs one batch in one transaction and answers every job after its commit (which must be
/// durable by itself: `synchronous=FULL`).
#[cfg(test)]
pub(crate) fn run_batch(conn: &Connection, mut batch: Vec<BoxJob>) {
    let commit = commit_and_let_go(conn, &mut batch);
    finish_all(batch, commit);
}

/// [`commit_batch`], then every job lets go of what only running needed ([`WriteJob::ran`]):
/// the batch may wait for its fsync a while, holding only the jobs' results.
fn commit_and_let_go(conn: &Connection, batch: &mut [BoxJob]) -> Result<(), StoreError> {
    let commit = commit_batch(conn, batch);
    for job in batch.iter_mut() {
        job.ran();
    }
    commit
}

/// Runs one batch in one transaction and commits it; the jobs keep their results for
/// [`WriteJob::finish`].
fn commit_batch(conn: &Connection, batch: &mut [BoxJob]) -> Result<(), StoreError> {
    let commit = match run_jobs(conn, batch, false) {
        Pass::Done => commit(conn),
        Pass::Broken(e) => Err(e),
        // Start over from the same state, each job under its own savepoint.
        Pass::JobFailed => match exec(conn, "ROLLBACK") {
            Err(e) => Err(e),
            Ok(()) => match run_jobs(conn, batch, true) {
                Pass::Done | Pass::JobFailed => commit(conn),
                Pass::Broken(e) => Err(e),
            },
        },
    };
    if commit.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    crate::counts::clear();
    commit
}

/// Writes the batch's record counts (see [`crate::counts`]) and commits.
fn commit(conn: &Connection) -> Result<(), StoreError> {
    crate::counts::flush(conn)?;
    exec(conn, "COMMIT")
}

/// The writer's log of batches that did not commit: one WARN when batches start failing (with
/// the cause), one INFO when one that wrote something commits again (with how many failed
/// meanwhile). Not a line per batch: a full disk made that hundreds of lines a second. A batch
/// that wrote nothing (a janitor pass with nothing to do) commits on a full disk too, so it
/// does not end the run of failures.
#[derive(Default)]
struct FailureLog {
    failed: u64,
}

impl FailureLog {
    fn record(&mut self, commit: &Result<(), StoreError>, jobs: usize, wrote: bool) {
        match commit {
            Err(e) if self.failed == 0 => {
                self.failed = 1;
                tracing::warn!(error = %e, jobs, "sqlite: write batch not committed; \
                    further failed batches are counted until one commits");
            }
            Err(e) => {
                self.failed += 1;
                tracing::debug!(error = %e, jobs, "sqlite: write batch not committed");
            }
            Ok(()) if self.failed > 0 && wrote => {
                tracing::info!(
                    failed_batches = self.failed,
                    "sqlite: write batches commit again"
                );
                self.failed = 0;
            }
            Ok(()) => {}
        }
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
    crate::counts::clear();
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        // Logged with the batch's failure (`FailureLog`), once per run of failures.
        tracing::debug!(error = %e, jobs = batch.len(), "sqlite: cannot begin write batch");
        return Pass::Broken(e);
    }
    for job in batch.iter_mut() {
        let counted = crate::counts::mark();
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
            (true, false) => {
                crate::counts::rollback_to(counted);
                exec(conn, "ROLLBACK TO job").and_then(|()| exec(conn, "RELEASE job"))
            }
        };
        if let Err(e) = closed {
            return Pass::Broken(e);
        }
    }
    Pass::Done
}

/// Runs `sql` (no parameters, no rows) as a cached statement.
pub(crate) fn exec(conn: &Connection, sql: &str) -> Result<(), StoreError> {
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

    /// A committed batch holds only its jobs' results while it waits for the fsync: what the
    /// work itself held (an operation with a large payload) is let go, including a job that
    /// ran twice because another one failed, and the answers are still given.
    #[test]
    fn a_committed_batch_lets_go_of_its_work_before_it_is_answered() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("w.db"), Duration::from_secs(1)).expect("open");
        let payload = std::sync::Arc::new(vec![0u8; 1024]);
        let held = payload.clone();
        let (a, ra) = job(move |c: &Connection| {
            let _ = held.len();
            insert("a")(c)
        });
        let (b, rb) = job(|c: &Connection| {
            insert("b")(c)?;
            Err(StoreError::Internal("step failed".into()))
        });
        let mut batch = vec![a, b];
        let commit = commit_and_let_go(&conn, &mut batch);
        assert!(commit.is_ok());
        assert_eq!(
            std::sync::Arc::strong_count(&payload),
            1,
            "the job's work is dropped before its answer"
        );
        finish_all(batch, commit);
        assert!(answer(ra).is_ok());
        assert!(matches!(answer(rb), Err(StoreError::Internal(_))));
        assert_eq!(labels(&conn), ["a"]);
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

    /// The record counts the writer keeps (`crate::counts`) follow exactly what commits: a job
    /// that wrote records and then failed takes its counts with it (first pass: the whole
    /// batch is rerun; second pass: its savepoint), and a count read inside the batch sees
    /// the batch's own earlier writes.
    #[test]
    fn record_counts_follow_what_commits_through_failing_jobs() {
        use idem_core::{ClaimRequest, CompleteRequest, Key, Namespace, Op, Timestamp};
        use idem_store::ExecCtx;

        fn step(c: &Connection, key: &str, op: &Op) -> Result<Option<String>, StoreError> {
            let ns = Namespace::try_from("n").expect("ns");
            let key = Key::try_from(key).expect("key");
            let ran = crate::write_ops::execute_step(c, &ns, &key, op, &ExecCtx::at(Timestamp(1)))?;
            Ok(match ran.executed.reply {
                Ok(idem_core::Reply::Claim(r)) => r.token.map(|t| t.secret()),
                _ => None,
            })
        }
        fn claim(key: &'static str) -> impl FnMut(&Connection) -> Result<(), StoreError> {
            move |c: &Connection| step(c, key, &Op::Claim(ClaimRequest::default())).map(|_| ())
        }
        fn claim_and_complete(
            key: &'static str,
            fail: bool,
        ) -> impl FnMut(&Connection) -> Result<(), StoreError> {
            move |c: &Connection| {
                let token = step(c, key, &Op::Claim(ClaimRequest::default()))?.expect("token");
                let done = CompleteRequest {
                    token,
                    result: None,
                    external_ref: None,
                    cost: None,
                };
                step(c, key, &Op::Complete(done))?;
                if fail {
                    return Err(StoreError::Internal("step failed".into()));
                }
                Ok(())
            }
        }
        fn pairs(c: &Connection, sql: &str) -> Vec<(String, i64)> {
            let mut s = c.prepare(sql).expect("prepare");
            let rows = s
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .expect("query");
            rows.collect::<Result<_, _>>().expect("rows")
        }
        let counted = |c: &Connection| {
            pairs(
                c,
                "SELECT state, n FROM namespace_counts WHERE n <> 0 ORDER BY state",
            )
        };
        let stored = |c: &Connection| {
            pairs(
                c,
                "SELECT state, COUNT(*) FROM records GROUP BY state ORDER BY state",
            )
        };

        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("w.db"), Duration::from_secs(1)).expect("open");
        let (a, ra) = job(claim("a"));
        let (b, rb) = job(claim_and_complete("b", true));
        let (c, rc) = job(claim_and_complete("c", false));
        // Reads the counts inside the batch, after a, b (rolled back) and c.
        let (tx, rd) = oneshot::channel();
        let d: BoxJob = Box::new(Task::new(
            |c: &Connection| crate::rows::count_states(c, "n"),
            tx,
        ));
        run_batch(&conn, vec![a, b, c, d]);
        assert!(answer(ra).is_ok());
        assert!(answer(rb).is_err());
        assert!(answer(rc).is_ok());
        let seen = rd.blocking_recv().expect("answered").expect("ok");
        assert_eq!(
            (
                seen.get(idem_core::State::Processing),
                seen.get(idem_core::State::Completed)
            ),
            (1, 1)
        );
        let expected = [("completed".to_owned(), 1), ("processing".to_owned(), 1)];
        assert_eq!(stored(&conn), expected);
        assert_eq!(counted(&conn), expected);
        assert!(crate::counts::pending("n").is_empty(), "flushed at commit");

        // A batch that fails as a whole (its commit cannot happen) counts nothing.
        let (e, re) = job(claim("e"));
        let (f, rf) = job(|c: &Connection| {
            claim("f")(c)?;
            c.execute_batch("ROLLBACK").map_err(map)?;
            Err(StoreError::Internal("transaction lost".into()))
        });
        run_batch(&conn, vec![e, f]);
        assert!(answer(re).is_err());
        assert!(answer(rf).is_err());
        assert_eq!(stored(&conn), expected);
        assert_eq!(counted(&conn), expected);
        assert!(crate::counts::pending("n").is_empty());
    }

    fn labels_of(path: &std::path::Path) -> Vec<String> {
        labels(&Connection::open(path).expect("open"))
    }

    /// Pipelined sync: a committed batch is visible in the file but its job hears back only
    /// when the fsync returned; a failed fsync fails the batch and refuses every later write.
    #[test]
    fn pipelined_jobs_wait_for_the_fsync_and_a_failed_fsync_poisons_the_writer() {
        use std::sync::mpsc;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("w.db");
        let conn = open_writer(&path, Duration::from_secs(1)).expect("open");
        let durability = Arc::new(Durability::new());
        let (settle_tx, settle_rx) = mpsc::channel::<Settle>();
        // Each fsync blocks until the test hands it its outcome.
        let (verdict_tx, verdict_rx) = mpsc::channel::<std::io::Result<()>>();
        let fsyncs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let syncer = std::thread::spawn({
            let (d, fsyncs) = (durability.clone(), fsyncs.clone());
            move || {
                run_syncer(
                    settle_rx,
                    move || {
                        fsyncs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        verdict_rx.recv().unwrap_or(Ok(()))
                    },
                    d,
                )
            }
        });
        let (jobs_tx, jobs_rx) = mpsc::channel::<BoxJob>();
        let writer = std::thread::spawn({
            let d = durability.clone();
            move || run(conn, jobs_rx, 16, d, Some(settle_tx))
        });

        let (a, mut ra) = job(insert("a"));
        jobs_tx.send(a).expect("send");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while labels_of(&path).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "batch never committed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            matches!(ra.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
            "answered before its fsync"
        );
        verdict_tx.send(Ok(())).expect("verdict");
        assert!(ra.blocking_recv().expect("answered").is_ok());

        let (b, rb) = job(insert("b"));
        jobs_tx.send(b).expect("send");
        verdict_tx
            .send(Err(std::io::Error::other("EIO")))
            .expect("verdict");
        assert!(matches!(
            rb.blocking_recv().expect("answered"),
            Err(StoreError::Unavailable(_))
        ));
        assert!(durability.check().is_err(), "poisoned");

        let (c, rc) = job(insert("c"));
        jobs_tx.send(c).expect("send");
        assert!(matches!(
            rc.blocking_recv().expect("answered"),
            Err(StoreError::Unavailable(_))
        ));
        drop(jobs_tx);
        writer.join().expect("writer");
        syncer.join().expect("syncer");
        assert_eq!(
            labels_of(&path),
            ["a", "b"],
            "c was refused without running"
        );
        assert_eq!(fsyncs.load(std::sync::atomic::Ordering::SeqCst), 2);
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
