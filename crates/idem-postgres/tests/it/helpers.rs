//! Fresh databases per test, and small builders.

use std::sync::Arc;

use idem_core::{ClaimRequest, Clock, Key, Namespace, TestClock, Timestamp};
use idem_postgres::{PgOptions, PgStore};
use idem_store::{Ledger, Store};
use tokio_postgres::NoTls;

/// Serialises the tests that open many connections, so that together they stay below the
/// shared server's `max_connections`.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A database created for one test, dropped when this value is dropped.
pub struct TestDb {
    pub url: String,
    base: String,
    name: String,
}

/// `base` with its database name replaced by `db`.
pub fn with_db(base: &str, db: &str) -> String {
    let (main, query) = match base.split_once('?') {
        Some((m, q)) => (m, format!("?{q}")),
        None => (base, String::new()),
    };
    let after_scheme = main.find("://").map_or(0, |i| i + 3);
    let host_end = main[after_scheme..]
        .find('/')
        .map_or(main.len(), |i| after_scheme + i);
    format!("{}/{db}{query}", &main[..host_end])
}

impl TestDb {
    /// `None` (after printing why) when `IDEM_TEST_PG` is not set.
    pub async fn create(test: &str) -> Option<TestDb> {
        let Ok(base) = std::env::var("IDEM_TEST_PG") else {
            eprintln!("skipping {test}: IDEM_TEST_PG is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres)");
            return None;
        };
        let name = format!("idem_t_{:016x}", rand::random::<u64>());
        admin(&base, &format!("CREATE DATABASE {name}")).await;
        Some(TestDb {
            url: with_db(&base, &name),
            base,
            name,
        })
    }

    pub async fn store(&self) -> Arc<PgStore> {
        self.store_with(4).await
    }

    pub async fn store_with(&self, conns: usize) -> Arc<PgStore> {
        let opts = PgOptions {
            max_connections: conns,
            ..PgOptions::default()
        };
        Arc::new(
            PgStore::connect_with(&self.url, opts)
                .await
                .expect("connect to the test database"),
        )
    }
}

async fn admin(base: &str, sql: &str) {
    let (client, conn) = tokio_postgres::connect(base, NoTls)
        .await
        .expect("connect to IDEM_TEST_PG");
    let task = tokio::spawn(conn);
    client.batch_execute(sql).await.expect("admin statement");
    drop(client);
    let _ = task.await;
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let base = self.base.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop runs inside the test's runtime: use a separate thread with its own runtime.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(admin(&base, &sql));
            }
        })
        .join();
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

pub fn claim_req() -> ClaimRequest {
    ClaimRequest::default()
}
