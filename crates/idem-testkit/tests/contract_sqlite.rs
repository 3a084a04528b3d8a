//! The store contract suite against SQLite: a fresh ledger file in its own temp dir per test.

use std::path::PathBuf;
use std::sync::Arc;

use idem_sqlite::SqliteStore;
use idem_store::Store;
use idem_testkit::contract::{self, Backend};
use idem_testkit::{action_suite, contract_suite, outbox_suite};

struct Sqlite {
    // Held so the directory (and the database) lives as long as the case.
    _dir: tempfile::TempDir,
    path: PathBuf,
}

#[async_trait::async_trait]
impl Backend for Sqlite {
    async fn fresh() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("idem.db");
        Sqlite { _dir: dir, path }
    }

    async fn open(&self) -> Arc<dyn Store> {
        let path = self.path.clone();
        let store = tokio::task::spawn_blocking(move || SqliteStore::open(&path))
            .await
            .expect("open task")
            .unwrap_or_else(|e| panic!("open sqlite store: {e}"));
        Arc::new(store)
    }

    async fn cleanup(&self) {}

    async fn counter_drift(&self) -> Vec<String> {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let conn = rusqlite::Connection::open(&path).expect("open the ledger file");
            let mut stmt = conn
                .prepare(contract::COUNTER_DRIFT_SQL)
                .expect("counter drift query");
            stmt.query_map([], |r| {
                Ok(contract::drift_line(
                    &r.get::<_, String>(0)?,
                    &r.get::<_, String>(1)?,
                    r.get(2)?,
                    r.get(3)?,
                ))
            })
            .expect("counter drift rows")
            .collect::<Result<Vec<_>, _>>()
            .expect("counter drift row")
        })
        .await
        .expect("counter drift task")
    }
}

contract_suite!(Sqlite);
outbox_suite!(Sqlite);
action_suite!(Sqlite);
