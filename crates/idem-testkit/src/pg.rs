//! A fresh PostgreSQL database per test on the server named by `IDEM_TEST_PG`, dropped
//! (`WITH (FORCE)`) when the handle is dropped, also when the test failed.
//!
//! It only creates and drops databases named `idem_t_<random>`; it must never touch any other
//! database on that server. Admin statements run on a thread of their own with their own
//! runtime, so the helpers work from synchronous tests, from inside a runtime and from `Drop`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The variable naming the admin URL of the shared test server
/// (e.g. `postgres://postgres@127.0.0.1:5432/postgres`; CI always sets it).
pub const ENV: &str = "IDEM_TEST_PG";

/// How long one admin statement may take before it counts as hung.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The admin URL from [`ENV`], or `None` when it is unset or empty.
pub fn admin_url() -> Option<String> {
    std::env::var(ENV).ok().filter(|u| !u.is_empty())
}

/// [`admin_url`], printing a skip line naming `test` when there is none.
pub fn admin_url_or_skip(test: &str) -> Option<String> {
    let url = admin_url();
    if url.is_none() {
        eprintln!(
            "skipping {test}: {ENV} is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres)"
        );
    }
    url
}

/// `base` with its database name replaced by `db` (the query string, if any, is kept).
pub fn with_db(base: &str, db: &str) -> String {
    idem_postgres::with_database(base, db)
}

/// `url` without idem's own `pooler=…` parameter, for a plain driver connection (the driver
/// refuses parameters it does not know). `IDEM_TEST_PG` may carry it: the stores of the tests
/// then run in that pooler mode (CI runs the PostgreSQL suites once more through PgBouncer in
/// transaction mode, `.ci/pgbouncer.sh`). A `pooler` value idem refuses is left in.
pub fn driver_url(url: &str) -> String {
    idem_postgres::Pooler::split_url(url).map_or_else(|_| url.to_owned(), |(u, _)| u)
}

/// Runs one admin statement (batch) against `url`, bounded by a timeout.
pub async fn admin(url: &str, sql: &str) -> Result<(), String> {
    let url = &driver_url(url);
    let work = async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let task = tokio::spawn(conn);
        let r = client.batch_execute(sql).await.map_err(|e| e.to_string());
        drop(client);
        let _ = task.await;
        r
    };
    tokio::time::timeout(ADMIN_TIMEOUT, work)
        .await
        .map_err(|_| format!("no answer within {ADMIN_TIMEOUT:?} to {sql}"))?
}

/// [`admin`] on a thread of its own with its own runtime: callable from anywhere.
pub fn admin_blocking(url: &str, sql: &str) -> Result<(), String> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        rt.block_on(admin(&url, &sql))
    })
    .join()
    .map_err(|_| "admin thread panicked".to_owned())?
}

/// A database `idem_t_<random>` created for one test, dropped when this value is dropped.
#[derive(Debug)]
pub struct PgDb {
    admin: String,
    name: String,
    url: String,
    dropped: AtomicBool,
}

impl PgDb {
    /// A fresh database on the [`ENV`] server; `None` (after printing a skip line naming
    /// `test`) when the variable is not set.
    pub fn create(test: &str) -> Option<PgDb> {
        admin_url_or_skip(test).map(|admin| PgDb::create_on(&admin))
    }

    /// A fresh database on the server of `admin` (e.g. a private [`crate::cluster::Cluster`]).
    /// Panics when it cannot be created: the test cannot run.
    pub fn create_on(admin: &str) -> PgDb {
        let name = format!("idem_t_{:016x}", rand::random::<u64>());
        admin_blocking(admin, &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        PgDb {
            admin: admin.to_owned(),
            url: with_db(admin, &name),
            name,
            dropped: AtomicBool::new(false),
        }
    }

    /// The URL of this database (with the `pooler` parameter of the admin URL, if any).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// [`PgDb::url`] for a plain driver connection ([`driver_url`]).
    pub fn driver_url(&self) -> String {
        driver_url(&self.url)
    }

    /// The name of this database.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database now (closing its connections), before this value goes: for a
    /// handle that may be shared with a task that outlives the test. Later calls do nothing.
    pub fn drop_database(&self) {
        if self.dropped.swap(true, Ordering::SeqCst) {
            return;
        }
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = admin_blocking(&self.admin, &sql) {
            eprintln!("warning: could not drop test database {}: {e}", self.name);
        }
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        self.drop_database();
    }
}

#[cfg(test)]
mod tests {
    use super::with_db;

    #[test]
    fn with_db_replaces_only_the_database_name() {
        assert_eq!(
            with_db("postgres://postgres@127.0.0.1:5432/postgres", "idem_t_1"),
            "postgres://postgres@127.0.0.1:5432/idem_t_1"
        );
        assert_eq!(
            with_db("postgres://u:p@h/db?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(with_db("postgres://h:5432", "x"), "postgres://h:5432/x");
    }

    #[test]
    fn driver_url_drops_only_the_pooler_parameter() {
        use super::driver_url;
        assert_eq!(
            driver_url("postgres://u@h:6432/x?pooler=transaction"),
            "postgres://u@h:6432/x"
        );
        assert_eq!(
            driver_url("postgres://u@h/x?sslmode=disable&pooler=session&application_name=a"),
            "postgres://u@h/x?sslmode=disable&application_name=a"
        );
        assert_eq!(driver_url("postgres://u@h/x"), "postgres://u@h/x");
    }
}
