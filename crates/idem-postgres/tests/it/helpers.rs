//! Stores on the fresh databases of the test kit, and small builders.

use std::sync::Arc;

use idem_core::{
    ClaimReply, ClaimRequest, Clock, Event, EventType, Key, Namespace, TestClock, Timestamp,
};
use idem_postgres::{PgOptions, PgStore};
use idem_store::{Ledger, Store};
pub use idem_testkit::pg::PgDb;

/// Serialises the tests that open many connections, so that together they stay below the
/// shared server's `max_connections`.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Stores on a test database (the database itself comes from the test kit).
pub trait Stores {
    /// A store with a pool of 4 connections.
    async fn store(&self) -> Arc<PgStore> {
        self.store_with(4).await
    }
    async fn store_with(&self, conns: usize) -> Arc<PgStore>;
    /// A plain connection to the test database, without idem's startup settings (as another
    /// process or a person in `psql` connects), and the task driving it, which ends once the
    /// client is dropped.
    async fn raw(&self) -> (tokio_postgres::Client, tokio::task::JoinHandle<()>);
}

impl Stores for PgDb {
    async fn store_with(&self, conns: usize) -> Arc<PgStore> {
        let opts = PgOptions {
            max_connections: conns,
            ..PgOptions::default()
        };
        Arc::new(
            PgStore::connect_with(self.url(), opts)
                .await
                .expect("connect to the test database"),
        )
    }

    async fn raw(&self) -> (tokio_postgres::Client, tokio::task::JoinHandle<()>) {
        let (client, conn) = tokio_postgres::connect(&self.driver_url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        (client, task)
    }
}

pub fn ns(s: &str) -> Namespace {
    Namespace::try_from(s).expect("namespace")
}

pub fn key(s: &str) -> Key {
    Key::try_from(s).expect("key")
}

pub const T0: Timestamp = Timestamp(1_790_000_000_000);

pub fn ledger(store: Arc<PgStore>, clock: &TestClock) -> Ledger {
    let s: Arc<dyn Store> = store;
    let c: Arc<dyn Clock> = Arc::new(clock.clone());
    Ledger::with_clock(s, c)
}

/// A store on `db` and a ledger on it and `clock`.
pub async fn store_and_ledger(db: &PgDb, clock: &TestClock) -> (Arc<PgStore>, Ledger) {
    let store = db.store().await;
    let l = ledger(store.clone(), clock);
    (store, l)
}

/// A fresh test database for `test`, a store on it, a clock at [`T0`] and a ledger on both;
/// `None` (the test skips) when no server is configured. The database lives as long as the
/// returned value.
pub async fn setup(test: &str) -> Option<(PgDb, Arc<PgStore>, TestClock, Ledger)> {
    let db = PgDb::create(test)?;
    let clock = TestClock::new(T0);
    let (store, l) = store_and_ledger(&db, &clock).await;
    Some((db, store, clock, l))
}

/// Like [`setup`], with two stores on the database (two instances), each with its ledger.
pub async fn setup_two(test: &str) -> Option<(PgDb, TestClock, [(Arc<PgStore>, Ledger); 2])> {
    let db = PgDb::create(test)?;
    let clock = TestClock::new(T0);
    let a = store_and_ledger(&db, &clock).await;
    let b = store_and_ledger(&db, &clock).await;
    Some((db, clock, [a, b]))
}

/// The kinds of `events`, in order.
pub fn kinds(events: &[Event]) -> Vec<EventType> {
    events.iter().map(|e| e.kind).collect()
}

/// A claim of `k` asking for a lease of `lease_ms`.
pub async fn claim_with_lease(l: &Ledger, n: &Namespace, k: &Key, lease_ms: i64) -> ClaimReply {
    l.claim(
        n,
        k,
        ClaimRequest {
            lease_ms: Some(lease_ms),
            ..ClaimRequest::default()
        },
    )
    .await
    .expect("claim")
}

pub fn claim_req() -> ClaimRequest {
    ClaimRequest::default()
}

/// The plan PostgreSQL prints for `explain` (an `EXPLAIN …` statement), one line per node.
pub async fn plan_of(client: &tokio_postgres::Client, explain: &str) -> String {
    client
        .query(explain, &[])
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}
