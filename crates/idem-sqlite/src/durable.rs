//! The durability watermark of a pipelined store.
//!
//! With pipelined sync (see [`crate::writer`]) a batch's `COMMIT` returns before its WAL
//! frames are fsync'd: the writer goes on with the next batch while the syncer thread makes
//! the previous ones durable and only then answers their jobs. Between the two moments the
//! batch is visible to readers but not yet on disk. Reads must not hand out such data either:
//! a caller could act on a record that a power loss then takes back. So every batch gets a
//! sequence number when it starts, and a read answers only once every batch that had started
//! when the read finished is settled (durable, or failed and rolled back).
//!
//! Invariants:
//! - `started` is bumped before a batch opens its transaction, so any commit a snapshot can
//!   see has a number at most `started` read after the snapshot;
//! - `settled` only grows and moves past a batch only after its fsync returned (or its commit
//!   failed, which leaves nothing to make durable);
//! - after a failed fsync the store is poisoned: the kernel may have dropped the dirty pages,
//!   so nothing written since can be trusted to be on disk. Every later write and read answers
//!   `Unavailable` until the process restarts (and SQLite recovers the WAL from what is on
//!   disk), as PostgreSQL does after a failed fsync;
//! - if the writer or the syncer thread dies by a panic, the store is poisoned the same way
//!   and every batch settled, so no read waits forever ([`SettleOnPanic`]).
//!
//! **Decisions on a snapshot** (a replay, a duplicate delivery) read only records, so they
//! wait only for the batches that could have changed one: `mutating` is the number of the
//! last batch holding a job that is not an audit-only event append, raised before that batch
//! opens its transaction. A stream of duplicates, whose own batches only append their
//! `duplicate_hit` events, therefore answers without waiting for each other's fsyncs.
//!
//! **Deferred audit events**: the event of such a decision is queued to the writer and the
//! answer does not wait for it (see `SqliteStore::finish_snapshot_decision`). `deferred_sent`
//! counts the queued ones, `deferred_done` the ones whose batch settled (committed and
//! durable, or failed). A read waits until every event queued before it started is done, so
//! whoever got an answer and then reads the record's history sees its event.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use idem_store::StoreError;
use tokio::sync::watch;

fn poisoned_error() -> StoreError {
    StoreError::Unavailable(
        "the ledger's WAL could not be made durable (a failed fsync, or the writer or syncer \
         thread died): writes since cannot be trusted to be on disk; restart idem (SQLite \
         recovers the ledger from what is on disk)"
            .into(),
    )
}

#[derive(Debug)]
pub(crate) struct Durability {
    started: AtomicU64,
    /// The number of the last batch that may change a record (see the module doc).
    mutating: AtomicU64,
    settled: watch::Sender<u64>,
    poisoned: AtomicBool,
    deferred_sent: AtomicU64,
    deferred_done: watch::Sender<u64>,
    /// The last batch that wrote something did not commit (a full disk, an I/O error):
    /// decisions then wait for their own event again, so a write that cannot be made is
    /// answered 503 as before instead of being dropped after the answer.
    failing: AtomicBool,
    /// A deferred event was lost since writes last committed (it was logged once).
    dropped_logged: AtomicBool,
}

impl Durability {
    pub(crate) fn new() -> Durability {
        Durability {
            started: AtomicU64::new(0),
            mutating: AtomicU64::new(0),
            settled: watch::Sender::new(0),
            poisoned: AtomicBool::new(false),
            deferred_sent: AtomicU64::new(0),
            deferred_done: watch::Sender::new(0),
            failing: AtomicBool::new(false),
            dropped_logged: AtomicBool::new(false),
        }
    }

    /// Numbers a batch that is about to open its transaction; `audit_only` when every job of
    /// it only appends an event (it cannot change what a snapshot decision reads).
    pub(crate) fn start_batch(&self, audit_only: bool) -> u64 {
        let seq = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        if !audit_only {
            self.mutating.fetch_max(seq, Ordering::SeqCst);
        }
        seq
    }

    /// Counts a deferred event about to be queued; answers how many were queued and not yet
    /// done before it.
    pub(crate) fn defer(&self) -> u64 {
        let before = self.deferred_sent.fetch_add(1, Ordering::SeqCst);
        before.saturating_sub(*self.deferred_done.borrow())
    }

    /// What the writer learnt of a batch that wrote something: it committed or not.
    pub(crate) fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
        if !failing {
            self.dropped_logged.store(false, Ordering::SeqCst);
        }
    }

    /// Whether writes are failing now (see `failing`).
    pub(crate) fn failing(&self) -> bool {
        self.failing.load(Ordering::SeqCst)
    }

    /// A deferred event was not recorded: true for the first since writes last committed
    /// (the one to log as a warning; the others go to debug).
    pub(crate) fn first_dropped(&self) -> bool {
        !self.dropped_logged.swap(true, Ordering::SeqCst)
    }

    /// A deferred event's batch settled (or the event was never queued).
    pub(crate) fn deferred_done(&self) {
        self.deferred_done.send_modify(|d| *d += 1);
    }

    /// Every batch up to `seq` is durable or failed.
    pub(crate) fn settle(&self, seq: u64) {
        self.settled.send_if_modified(|s| {
            let moved = seq > *s;
            if moved {
                *s = seq;
            }
            moved
        });
    }

    /// Refuses every later call; returns the error they answer.
    pub(crate) fn poison(&self) -> StoreError {
        self.poisoned.store(true, Ordering::SeqCst);
        poisoned_error()
    }

    /// `Err` once the store is poisoned.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(poisoned_error());
        }
        Ok(())
    }

    /// Waits until every record a snapshot decision that just finished could have seen is
    /// durable (batches that only appended audit events are not waited for).
    pub(crate) async fn wait_for_decisions(&self) -> Result<(), StoreError> {
        self.wait_settled(self.mutating.load(Ordering::SeqCst))
            .await
    }

    /// Waits until every deferred event queued so far is written (or failed).
    pub(crate) async fn wait_for_deferred(&self) {
        let need = self.deferred_sent.load(Ordering::SeqCst);
        if *self.deferred_done.borrow() < need {
            let mut rx = self.deferred_done.subscribe();
            let _ = rx.wait_for(|d| *d >= need).await;
        }
    }

    async fn wait_settled(&self, need: u64) -> Result<(), StoreError> {
        if *self.settled.borrow() < need {
            let mut rx = self.settled.subscribe();
            // The sender lives as long as `self`, so this cannot fail while we hold `self`.
            let _ = rx.wait_for(|s| *s >= need).await;
        }
        self.check()
    }

    /// Waits until whatever a read that just finished could have seen is durable.
    pub(crate) async fn wait_for_reads(&self) -> Result<(), StoreError> {
        self.wait_settled(self.started.load(Ordering::SeqCst)).await
    }
}

/// Held by the writer and the syncer thread: if either dies by a panic, batches it held
/// would never settle and reads would wait forever, so the store is poisoned and every batch
/// settled (every later call then answers `Unavailable`).
pub(crate) struct SettleOnPanic(pub(crate) std::sync::Arc<Durability>);

impl Drop for SettleOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.poison();
            self.0.settle(u64::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_read_waits_for_every_batch_started_before_it_finished() {
        let d = Arc::new(Durability::new());
        d.wait_for_reads().await.expect("nothing started: no wait");
        let one = d.start_batch(false);
        let two = d.start_batch(false);
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.wait_for_reads().await }
        });
        d.settle(one);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "batch two is not settled yet");
        d.settle(two);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("answered once settled")
            .expect("task")
            .expect("ok");
        // Settling never goes back.
        d.settle(one);
        assert_eq!(*d.settled.borrow(), two);
    }

    #[tokio::test]
    async fn a_snapshot_decision_waits_for_record_changes_but_not_for_audit_appends() {
        let d = Arc::new(Durability::new());
        let change = d.start_batch(false);
        let audit = d.start_batch(true);
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.wait_for_decisions().await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            !waiter.is_finished(),
            "a batch that may change a record is not settled"
        );
        d.settle(change);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("answered once the change is settled")
            .expect("task")
            .expect("ok");
        // Only the audit batch is open: decisions go on, general reads still wait for it.
        tokio::time::timeout(Duration::from_millis(50), d.wait_for_decisions())
            .await
            .expect("an audit-only batch is not waited for")
            .expect("ok");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), d.wait_for_reads())
                .await
                .is_err(),
            "a read waits for every started batch"
        );
        d.settle(audit);
        d.wait_for_reads().await.expect("settled");
    }

    #[tokio::test]
    async fn a_read_waits_for_every_deferred_event_queued_before_it() {
        let d = Arc::new(Durability::new());
        d.wait_for_deferred().await;
        assert_eq!(d.defer(), 0, "nothing was pending before the first");
        assert_eq!(d.defer(), 1, "the first is pending");
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.wait_for_deferred().await }
        });
        d.deferred_done();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            !waiter.is_finished(),
            "one of the two queued events is not written"
        );
        // Queued after the read started: not waited for.
        assert_eq!(d.defer(), 1);
        d.deferred_done();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("answered once both are written")
            .expect("task");
        d.deferred_done();
        d.wait_for_deferred().await;
    }

    #[test]
    fn failing_writes_are_remembered_until_one_commits_and_a_lost_event_is_warned_once() {
        let d = Durability::new();
        assert!(!d.failing());
        d.set_failing(true);
        assert!(d.failing());
        assert!(
            d.first_dropped(),
            "the first lost event is the one warned about"
        );
        assert!(!d.first_dropped(), "the rest of the run of failures is not");
        d.set_failing(false);
        assert!(!d.failing());
        assert!(d.first_dropped(), "a new run of failures warns again");
    }

    #[tokio::test]
    async fn a_thread_dying_by_panic_releases_waiting_reads_with_an_error() {
        let d = Arc::new(Durability::new());
        d.start_batch(false);
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.wait_for_reads().await }
        });
        let held = d.clone();
        let died = std::thread::spawn(move || {
            let _guard = SettleOnPanic(held);
            panic!("a bug in a write job");
        })
        .join();
        assert!(died.is_err());
        let answer = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("released")
            .expect("task");
        assert!(matches!(answer, Err(StoreError::Unavailable(_))));
    }

    #[tokio::test]
    async fn a_failed_fsync_poisons_reads() {
        let d = Durability::new();
        let s = d.start_batch(false);
        let _ = d.poison();
        d.settle(s);
        assert!(matches!(
            d.wait_for_reads().await,
            Err(StoreError::Unavailable(_))
        ));
    }
}
