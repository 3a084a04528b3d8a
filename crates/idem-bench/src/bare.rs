//! The bare-store baseline: the articles' hand-rolled recipe, no idem. One durable
//! `INSERT … ON CONFLICT DO NOTHING RETURNING` transaction per claim, one `UPDATE` per
//! complete, one connection per client, through the same drivers idem uses (rusqlite,
//! tokio-postgres) with the same durability (SQLite WAL + `synchronous=FULL`; PostgreSQL
//! default `synchronous_commit=on`).

use std::sync::Arc;

use anyhow::Context;
use rusqlite::OptionalExtension;

use crate::load::{drive_async, drive_threads, Measurement};
use crate::{Backend, BenchOpts, Claims, Workload};

const SQLITE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY, state TEXT NOT NULL, token TEXT NOT NULL, result TEXT)";
const PG_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY, state TEXT NOT NULL, token TEXT NOT NULL, result TEXT)";

fn sqlite_conn(path: &str) -> anyhow::Result<rusqlite::Connection> {
    let c = rusqlite::Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(30))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    Ok(c)
}

fn sqlite_pair(c: &mut rusqlite::Connection, key: &str) -> anyhow::Result<()> {
    let token = format!("{:032x}", rand::random::<u128>());
    let got: Option<String> = c
        .query_row(
            "INSERT INTO claims (key, state, token) VALUES (?1, 'processing', ?2)
             ON CONFLICT DO NOTHING RETURNING token",
            rusqlite::params![key, token],
            |r| r.get(0),
        )
        .optional()?;
    anyhow::ensure!(got.is_some(), "fresh key already claimed");
    let n = c.execute(
        "UPDATE claims SET state = 'completed', result = ?1 WHERE key = ?2 AND token = ?3",
        rusqlite::params![r#"{"ok":true}"#, key, token],
    )?;
    anyhow::ensure!(n == 1, "complete updated {n} rows");
    Ok(())
}

fn sqlite_dup(c: &mut rusqlite::Connection, key: &str) -> anyhow::Result<()> {
    let got: Option<String> = c
        .query_row(
            "INSERT INTO claims (key, state, token) VALUES (?1, 'processing', 'x')
             ON CONFLICT DO NOTHING RETURNING token",
            rusqlite::params![key],
            |r| r.get(0),
        )
        .optional()?;
    anyhow::ensure!(got.is_none(), "duplicate key was inserted");
    let (state, _result): (String, Option<String>) = c.query_row(
        "SELECT state, result FROM claims WHERE key = ?1",
        rusqlite::params![key],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    anyhow::ensure!(state == "completed", "state {state}");
    Ok(())
}

pub async fn run(
    url: &str,
    backend: Backend,
    workload: Workload,
    c: usize,
    opts: &BenchOpts,
) -> anyhow::Result<Measurement> {
    match backend {
        Backend::Sqlite => {
            let path = url.strip_prefix("sqlite://").unwrap_or(url).to_owned();
            sqlite_conn(&path)?.execute_batch(SQLITE_SCHEMA)?;
            let run_id: u64 = rand::random();
            let dur = opts.duration;
            let n_dup = opts.duplicate_keys.max(1);
            tokio::task::spawn_blocking(move || match workload.claims() {
                Some(Claims::FirstTimePair) => {
                    let p = path.clone();
                    drive_threads(
                        c,
                        dur,
                        move |_| sqlite_conn(&p),
                        move |conn, client, seq| {
                            sqlite_pair(conn, &crate::key_for(run_id, client, seq))
                        },
                    )
                }
                None => anyhow::bail!("effect, intake and action workloads run over HTTP only"),
                Some(Claims::Duplicate) => {
                    let mut conn = sqlite_conn(&path)?;
                    let keys: Arc<Vec<String>> =
                        Arc::new((0..n_dup).map(|i| format!("dup-{i}")).collect());
                    for k in keys.iter() {
                        sqlite_pair(&mut conn, k)?;
                    }
                    let p = path.clone();
                    drive_threads(
                        c,
                        dur,
                        move |_| sqlite_conn(&p),
                        move |conn, client, seq| {
                            let k = crate::load::pick(&keys, client, seq);
                            sqlite_dup(conn, k)
                        },
                    )
                }
            })
            .await?
        }
        Backend::Postgres => {
            let (setup, _h) = pg_connect(url).await?;
            setup.batch_execute(PG_SCHEMA).await?;
            let run_id: u64 = rand::random();
            let mut conns = Vec::with_capacity(c);
            let mut handles = Vec::new();
            for _ in 0..c.max(1) {
                let (client, h) = pg_connect(url).await?;
                handles.push(h);
                conns.push(Arc::new(client));
            }
            let conns = Arc::new(conns);
            let insert = "INSERT INTO claims (key, state, token) VALUES ($1, 'processing', $2) ON CONFLICT DO NOTHING RETURNING token";
            let update =
                "UPDATE claims SET state = 'completed', result = $1 WHERE key = $2 AND token = $3";
            match workload.claims() {
                Some(Claims::FirstTimePair) => {
                    drive_async(c, opts.duration, move |client, seq| {
                        let conn = conns[client % conns.len()].clone();
                        async move {
                            let key = crate::key_for(run_id, client, seq);
                            let token = format!("{:032x}", rand::random::<u128>());
                            let row = conn.query_opt(insert, &[&key, &token]).await?;
                            anyhow::ensure!(row.is_some(), "fresh key already claimed");
                            let n = conn
                                .execute(update, &[&r#"{"ok":true}"#, &key, &token])
                                .await?;
                            anyhow::ensure!(n == 1, "complete updated {n} rows");
                            Ok(())
                        }
                    })
                    .await
                }
                None => anyhow::bail!("effect, intake and action workloads run over HTTP only"),
                Some(Claims::Duplicate) => {
                    let keys: Arc<Vec<String>> = Arc::new(
                        (0..opts.duplicate_keys.max(1))
                            .map(|i| format!("dup-{i}"))
                            .collect(),
                    );
                    for k in keys.iter() {
                        setup.execute(insert, &[k, &"t"]).await?;
                        setup.execute(update, &[&r#"{"ok":true}"#, k, &"t"]).await?;
                    }
                    drive_async(c, opts.duration, move |client, seq| {
                        let conn = conns[client % conns.len()].clone();
                        let k = crate::load::pick(&keys, client, seq).clone();
                        async move {
                            let row = conn.query_opt(insert, &[&k, &"x"]).await?;
                            anyhow::ensure!(row.is_none(), "duplicate key was inserted");
                            let row = conn
                                .query_one("SELECT state, result FROM claims WHERE key = $1", &[&k])
                                .await?;
                            let state: String = row.get(0);
                            anyhow::ensure!(state == "completed", "state {state}");
                            Ok(())
                        }
                    })
                    .await
                }
            }
        }
        Backend::PostgresPooled => anyhow::bail!("no bare rows through a pooler"),
        Backend::Redis => anyhow::bail!("the redis rows have their own recipe"),
    }
}

async fn pg_connect(
    url: &str,
) -> anyhow::Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>)> {
    // The driver refuses idem's own `pooler=…` parameter; the statements here need none.
    let (plain, _) = idem::Pooler::split_url(url).map_err(anyhow::Error::msg)?;
    let (client, conn) = tokio_postgres::connect(&plain, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to {}", idem::redact_db_url(url)))?;
    let h = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((client, h))
}

/// What `pg_stat_database` has counted for the database of `url` so far.
#[derive(Debug, Clone, Copy)]
pub struct PgWrites {
    /// Committed transactions.
    pub commits: u64,
    /// Rows inserted, updated and deleted.
    pub rows: u64,
}

/// Reads [`PgWrites`] of the database `url` names (a backend publishes its counts when its
/// transaction ends, at most once a second, and when it goes idle).
pub async fn pg_writes(url: &str) -> anyhow::Result<PgWrites> {
    let (client, _h) = pg_connect(url).await?;
    let row = client
        .query_one(
            "SELECT xact_commit::bigint, (tup_inserted + tup_updated + tup_deleted)::bigint \
             FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await?;
    let n = |i: usize| row.get::<_, i64>(i).max(0) as u64;
    Ok(PgWrites {
        commits: n(0),
        rows: n(1),
    })
}

/// Runs one statement on the server's admin database (CREATE/DROP DATABASE).
pub async fn pg_admin(url: &str, sql: &str) -> anyhow::Result<()> {
    let (client, _h) = pg_connect(url).await?;
    client.batch_execute(sql).await?;
    Ok(())
}

/// The same server URL pointing at database `db`.
pub fn pg_url_with_db(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..].find('/').map(|i| i + scheme_end);
    let host_part = match path_start {
        Some(i) => &base[..i],
        None => base,
    };
    match query {
        Some(q) => format!("{host_part}/{db}?{q}"),
        None => format!("{host_part}/{db}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn db_swap() {
        assert_eq!(
            super::pg_url_with_db("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            super::pg_url_with_db("postgres://u@h", "x"),
            "postgres://u@h/x"
        );
        assert_eq!(
            super::pg_url_with_db("postgres://u@h/a?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}
