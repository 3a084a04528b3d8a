//! The store contract suite against PostgreSQL, when `IDEM_TEST_PG` names a server (e.g.
//! `postgres://postgres@127.0.0.1:5432/postgres`; CI always sets it). Each test runs in a fresh
//! database `idem_t_<random>`, dropped afterwards. Without the variable every test prints a
//! skip line and passes.

use std::sync::Arc;

use idem_postgres::{PgOptions, PgStore};
use idem_store::Store;
use idem_testkit::contract::{self, Backend};
use idem_testkit::pg::{self, PgDb};
use idem_testkit::{action_suite, contract_suite, outbox_suite};

struct Pg {
    db: PgDb,
}

#[async_trait::async_trait]
impl Backend for Pg {
    fn available() -> Result<(), String> {
        match pg::admin_url() {
            Some(_) => Ok(()),
            None => Err(format!(
                "{} is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres); \
                 PostgreSQL contract tests skipped",
                pg::ENV
            )),
        }
    }

    async fn fresh() -> Self {
        let admin = pg::admin_url().expect("checked by available()");
        Pg {
            db: PgDb::create_on(&admin),
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        // Small pools: a case opens up to 8 handles and two cases may run at once.
        let opts = PgOptions {
            max_connections: 5,
            ..PgOptions::default()
        };
        let store = PgStore::connect_with(self.db.url(), opts)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.db.name()));
        Arc::new(store)
    }

    async fn cleanup(&self) {
        self.db.drop_database();
    }

    async fn counter_drift(&self) -> Vec<String> {
        let (client, conn) = tokio_postgres::connect(&self.db.driver_url(), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.db.name()));
        let task = tokio::spawn(conn);
        // Unnamed (one round trip): this also runs through PgBouncer in transaction mode, where a
        // statement prepared in one round trip may be unknown to the next.
        let rows = client
            .query_typed(contract::COUNTER_DRIFT_SQL, &[])
            .await
            .unwrap_or_else(|e| panic!("counter drift query: {e}"));
        drop(client);
        let _ = task.await;
        rows.iter()
            .map(|r| contract::drift_line(r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    }
}

contract_suite!(Pg);
outbox_suite!(Pg);
action_suite!(Pg);
