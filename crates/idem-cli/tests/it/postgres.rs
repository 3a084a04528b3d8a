//! The same tools on PostgreSQL: drills through a server on a PostgreSQL ledger, and
//! `idem run --db postgres://…`. Skipped (with a note) unless `IDEM_TEST_PG` is set.

use crate::helpers::{run, Server};

/// A fresh database on the `IDEM_TEST_PG` server, dropped on drop.
struct PgDb {
    admin_url: String,
    name: String,
    url: String,
    rt: tokio::runtime::Runtime,
}

async fn admin(url: &str, sql: &str) -> Result<(), tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(conn);
    let r = client.batch_execute(sql).await;
    drop(client);
    let _ = task.await;
    r
}

impl PgDb {
    fn create() -> Option<PgDb> {
        let Ok(admin_url) = std::env::var("IDEM_TEST_PG") else {
            eprintln!("IDEM_TEST_PG not set: PostgreSQL CLI tests skipped");
            return None;
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let name = format!("idem_cli_{:016x}", rand_u64());
        rt.block_on(admin(&admin_url, &format!("CREATE DATABASE {name}")))
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        let (base, _) = admin_url
            .rsplit_once('/')
            .expect("IDEM_TEST_PG is a URL with a path");
        let url = format!("{base}/{name}");
        Some(PgDb {
            admin_url,
            name,
            url,
            rt,
        })
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = self.rt.block_on(admin(&self.admin_url, &sql));
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[test]
fn drills_pass_and_run_works_on_postgres() {
    let Some(db) = PgDb::create() else { return };
    let dir = tempfile::tempdir().expect("tempdir");

    // idem run directly on the PostgreSQL ledger.
    let args = [
        "run", "--db", &db.url, "--ns", "cron", "--key", "pg-job", "--", "echo", "once",
    ];
    let a = run(&args);
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(a.stdout, "once\n");
    let b = run(&args);
    assert_eq!(b.code, 19, "{b:?}");
    assert_eq!(b.stdout, "once\n");
    let c = run(&[
        "run", "--db", &db.url, "--ns", "cron", "--key", "pg-75", "--", "sh", "-c", "exit 75",
    ]);
    assert_eq!(c.code, 75, "{c:?}");

    // All drills through a server on the same database.
    let server = Server::start_url(&db.url, &dir.path().join("serve.log"));
    let out = server.idem(&["drill", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(out.json()["passed"], true);
    drop(server);
}
