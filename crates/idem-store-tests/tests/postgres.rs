//! The store contract suite against PostgreSQL, when `IDEM_TEST_PG` names a server (e.g.
//! `postgres://postgres@127.0.0.1:5432/postgres`; CI always sets it). Each test runs in a fresh
//! database `idem_t_<random>`, dropped afterwards. Without the variable every test prints a
//! skip line and passes.

use std::sync::Arc;

use idem_postgres::{PgOptions, PgStore};
use idem_store::Store;
use idem_store_tests::{contract_suite, outbox_suite, Backend};
use tokio_postgres::NoTls;

const ENV: &str = "IDEM_TEST_PG";

struct Pg {
    admin_url: String,
    db: String,
    url: String,
}

async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {ENV}: {e}"));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

#[async_trait::async_trait]
impl Backend for Pg {
    fn available() -> Result<(), String> {
        match std::env::var(ENV) {
            Ok(v) if !v.is_empty() => Ok(()),
            _ => Err(format!(
                "{ENV} is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres); \
                 PostgreSQL contract tests skipped"
            )),
        }
    }

    async fn fresh() -> Self {
        let admin_url = std::env::var(ENV).expect("checked by available()");
        let db = format!("idem_t_{:016x}", rand::random::<u64>());
        admin(&admin_url)
            .await
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .unwrap_or_else(|e| panic!("create database {db}: {e}"));
        let mut url = url::Url::parse(&admin_url).expect("IDEM_TEST_PG is a URL");
        url.set_path(&format!("/{db}"));
        Pg {
            admin_url,
            db,
            url: url.to_string(),
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        // Small pools: a case opens up to 8 handles and two cases may run at once.
        let opts = PgOptions {
            max_connections: 5,
            ..PgOptions::default()
        };
        let store = PgStore::connect_with(&self.url, opts)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.db));
        Arc::new(store)
    }

    async fn cleanup(&self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.db);
        if let Err(e) = admin(&self.admin_url).await.batch_execute(&sql).await {
            eprintln!("warning: could not drop {}: {e}", self.db);
        }
    }
}

contract_suite!(Pg);
outbox_suite!(Pg);
