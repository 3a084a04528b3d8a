//! Shared set-up: a fresh ledger file per test, a clock tests move by hand.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use idem_core::{
    ClaimOutcome, ClaimReply, ClaimRequest, CompleteRequest, Event, EventType, Key, Namespace,
    Record, State, TestClock, Timestamp,
};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{Ledger, LedgerError, ListQuery, Page, StoreError};
use serde_json::json;

/// 2026-06-22T00:00:00Z: far from any day boundary issue in the tests.
pub const T0: Timestamp = Timestamp(1_782_086_400_000);
pub const DAY: i64 = 86_400_000;

pub struct TestLedger {
    pub dir: tempfile::TempDir,
    pub store: Arc<SqliteStore>,
    pub ledger: Ledger,
    pub clock: TestClock,
}

impl TestLedger {
    pub fn new() -> Self {
        Self::with_options(SqliteOptions::default())
    }

    pub fn with_options(options: SqliteOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            Arc::new(SqliteStore::open_with(&db_path(dir.path()), options).expect("open store"));
        Self::assemble(dir, store, TestClock::new(T0))
    }

    /// A ledger over `store` (a file in `dir`) on `clock`.
    fn assemble(dir: tempfile::TempDir, store: Arc<SqliteStore>, clock: TestClock) -> Self {
        let ledger = Ledger::with_clock(store.clone(), Arc::new(clock.clone()));
        TestLedger {
            dir,
            store,
            ledger,
            clock,
        }
    }

    pub fn path(&self) -> PathBuf {
        db_path(self.dir.path())
    }

    /// Drops the store (joining its writer) and opens the file again, same clock.
    pub fn reopen(self) -> Self {
        let TestLedger {
            dir,
            store,
            ledger,
            clock,
        } = self;
        drop(ledger);
        drop(store);
        let store = Arc::new(SqliteStore::open(&db_path(dir.path())).expect("reopen"));
        Self::assemble(dir, store, clock)
    }

    pub fn now(&self) -> Timestamp {
        self.ledger.now()
    }

    /// The namespace's first-time acquisitions of the current UTC day, as the console reads
    /// them.
    pub async fn acquired_today(&self, ns: &Namespace) -> u64 {
        use idem_store::Store;
        self.store
            .namespace_activity(ns, self.now())
            .await
            .expect("activity")
            .acquired_today
    }

    pub async fn claim(&self, ns: &Namespace, key: &Key) -> ClaimReply {
        self.ledger
            .claim(ns, key, ClaimRequest::default())
            .await
            .expect("claim")
    }

    /// A claim with the follow-ups of an effect's or an action's claim.
    pub async fn claim_then(
        &self,
        ns: &Namespace,
        key: &Key,
        prepare: Option<idem_store::ThenPrepare>,
        sent: Option<idem_core::RequestSummary>,
    ) -> idem_store::Executed {
        let claim = idem_core::Op::Claim(ClaimRequest::default());
        self.ledger
            .execute_then(ns, key, claim, None, None, prepare, sent)
            .await
            .expect("claim")
    }

    /// A claim asking for a lease of `lease_ms`.
    pub async fn claim_leased(&self, ns: &Namespace, key: &Key, lease_ms: i64) -> ClaimReply {
        let req = ClaimRequest {
            lease_ms: Some(lease_ms),
            ..ClaimRequest::default()
        };
        self.ledger.claim(ns, key, req).await.expect("claim")
    }

    /// Completes with `token`, `result` and `external_ref` (no cost).
    pub async fn complete(
        &self,
        ns: &Namespace,
        key: &Key,
        token: String,
        result: Option<serde_json::Value>,
        external_ref: Option<String>,
    ) -> Result<Record, LedgerError> {
        let req = CompleteRequest {
            cost: None,
            token,
            result,
            external_ref,
        };
        self.ledger.complete(ns, key, req).await
    }

    /// Claims (must acquire) and completes with `{"n": key}`.
    pub async fn claim_complete(&self, ns: &Namespace, key: &Key) {
        let c = self.claim(ns, key).await;
        assert_eq!(c.outcome, ClaimOutcome::Acquired, "{key}");
        let token = c.token.expect("token").secret();
        let result = Some(json!({"n": key.as_str()}));
        self.complete(ns, key, token, result, Some(format!("ref-{key}")))
            .await
            .expect("complete");
    }

    /// A page of `ns`'s records: of `state` (all when `None`), at most `limit`, after `cursor`.
    pub async fn list(
        &self,
        ns: &Namespace,
        state: Option<State>,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<Page, StoreError> {
        use idem_store::Store;
        let query = ListQuery {
            state,
            limit,
            cursor,
            ..Default::default()
        };
        self.store.list(ns, &query).await
    }
}

pub fn db_path(dir: &Path) -> PathBuf {
    dir.join("idem.db")
}

pub fn ns(s: &str) -> Namespace {
    Namespace::try_from(s).expect("namespace")
}

pub fn key(s: &str) -> Key {
    Key::try_from(s).expect("key")
}

/// The kinds of `events`, in order.
pub fn kinds(events: &[Event]) -> Vec<EventType> {
    events.iter().map(|e| e.kind).collect()
}
