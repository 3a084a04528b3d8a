//! The store contract suite against PostgreSQL, when `IDEM_TEST_PG` names a server (e.g.
//! `postgres://postgres@127.0.0.1:5432/postgres`; CI always sets it). Each test runs in a fresh
//! database `idem_t_<random>`, dropped afterwards. Without the variable every test prints a
//! skip line and passes.

use std::sync::Arc;

use idem_postgres::{PgOptions, PgStore};
use idem_store::Store;
use idem_testkit::contract::Backend;
use idem_testkit::pg::{self, PgDb};
use idem_testkit::{contract_suite, outbox_suite};

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
}

contract_suite!(Pg);
outbox_suite!(Pg);
