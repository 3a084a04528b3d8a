//! A fresh PostgreSQL database per test on the `IDEM_TEST_PG` server (an admin URL such as
//! `postgres://postgres@127.0.0.1:5432/postgres`; CI always sets it), dropped afterwards.

use tokio_postgres::NoTls;

const ENV: &str = "IDEM_TEST_PG";

pub struct PgDb {
    admin_url: String,
    name: String,
    pub url: String,
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

impl PgDb {
    /// A new empty database, or `None` (with a note) when `IDEM_TEST_PG` is not set.
    pub async fn fresh(test: &str) -> Option<PgDb> {
        let admin_url = match std::env::var(ENV) {
            Ok(v) if !v.is_empty() => v,
            _ => {
                eprintln!("{test}: {ENV} is not set; the PostgreSQL run is skipped");
                return None;
            }
        };
        let name = format!("idem_srv_{:016x}", rand::random::<u64>());
        admin(&admin_url)
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        let mut url = url::Url::parse(&admin_url).expect("IDEM_TEST_PG is a URL");
        url.set_path(&format!("/{name}"));
        Some(PgDb {
            admin_url,
            name,
            url: url.to_string(),
        })
    }

    pub async fn drop_db(self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = admin(&self.admin_url).await.batch_execute(&sql).await {
            eprintln!("warning: could not drop {}: {e}", self.name);
        }
    }
}

/// The ledgers a storage-related test runs on: SQLite (`db: None`) always, PostgreSQL when
/// `IDEM_TEST_PG` is set.
pub async fn ledgers(test: &str) -> Vec<(&'static str, Option<PgDb>)> {
    let mut out = vec![("sqlite", None)];
    if let Some(pg) = PgDb::fresh(test).await {
        out.push(("postgres", Some(pg)));
    }
    out
}
