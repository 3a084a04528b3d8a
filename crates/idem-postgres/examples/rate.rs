//! Claim+complete pairs per second through `Ledger` on PostgreSQL, next to the bare recipe
//! through the same driver (one `INSERT … ON CONFLICT DO NOTHING RETURNING` transaction per
//! claim, one `UPDATE` per complete, one connection per client), at 1, 16 and 64 concurrent
//! clients. The ratio is the figure that matters: what idem's bookkeeping (decision read,
//! events, version guard) costs over the minimum.
//!
//! ```text
//! IDEM_TEST_PG=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo run --release -p idem-postgres --example rate [-- SECONDS]
//! ```
//!
//! Works in a fresh database `idem_t_<random>` that is dropped at the end. The example needs
//! nothing beyond the store and the driver: the scratch database is made and dropped here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::{ClaimRequest, CompleteRequest, Key, Namespace};
use idem_postgres::{with_database as with_db, PgOptions, PgStore, Pooler};
use idem_store::{Ledger, Store};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs one statement (batch) on its own connection to `url` (without idem's `pooler=…`
/// parameter, which the driver refuses).
async fn admin(url: &str, sql: &str) -> Result<(), BoxError> {
    let (url, _) = Pooler::split_url(url)?;
    let (client, conn) = tokio_postgres::connect(&url, NoTls).await?;
    let task = tokio::spawn(conn);
    let r = client.batch_execute(sql).await;
    drop(client);
    let _ = task.await;
    Ok(r?)
}

/// The stop flag and the count of finished pairs that the client tasks of one cell share.
fn counters() -> (Arc<AtomicBool>, Arc<AtomicU64>) {
    (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    )
}

/// Lets the client `tasks` run for `secs`, stops them and returns the pairs per second they
/// finished.
async fn measure(
    secs: u64,
    stop: &AtomicBool,
    done: &AtomicU64,
    tasks: Vec<JoinHandle<Result<(), BoxError>>>,
) -> Result<f64, BoxError> {
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

async fn ledger_rate(url: &str, clients: usize, secs: u64, run: u32) -> Result<f64, BoxError> {
    let store = PgStore::connect_with(
        url,
        PgOptions {
            max_connections: clients,
            ..PgOptions::default()
        },
    )
    .await?;
    let store: Arc<dyn Store> = Arc::new(store);
    let ledger = Ledger::new(store);
    let ns = Namespace::try_from("bench")?;
    let (stop, done) = counters();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (l, ns, stop, done) = (ledger.clone(), ns.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = Key::try_from(format!("r{run}-c{c}-{i}"))?;
                i += 1;
                let claim = l.claim(&ns, &key, ClaimRequest::default()).await?;
                let token = claim.token.ok_or("claim did not acquire")?.secret();
                l.complete(
                    &ns,
                    &key,
                    CompleteRequest {
                        cost: None,
                        token,
                        result: Some(json!({"id": i})),
                        external_ref: None,
                    },
                )
                .await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), BoxError>(())
        }));
    }
    measure(secs, &stop, &done, tasks).await
}

async fn bare_rate(url: &str, clients: usize, secs: u64, run: u32) -> Result<f64, BoxError> {
    let (stop, done) = counters();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
        tokio::spawn(conn);
        let (stop, done) = (stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = client;
            let insert = client
                .prepare(
                    "INSERT INTO bare (k, state, version) VALUES ($1, 'processing', 1) \
                     ON CONFLICT (k) DO NOTHING RETURNING version",
                )
                .await?;
            let update = client
                .prepare(
                    "UPDATE bare SET state = 'completed', result = $2, version = 2 \
                     WHERE k = $1 AND version = 1",
                )
                .await?;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("r{run}-c{c}-{i}");
                i += 1;
                let tx = client.transaction().await?;
                let rows = tx.query(&insert, &[&key]).await?;
                tx.commit().await?;
                if rows.is_empty() {
                    return Err("bare insert conflicted".into());
                }
                let result = json!({"id": i}).to_string();
                client.execute(&update, &[&key, &result]).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), BoxError>(())
        }));
    }
    measure(secs, &stop, &done, tasks).await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let base = std::env::var("IDEM_TEST_PG")
        .map_err(|_| "set IDEM_TEST_PG, e.g. postgres://postgres@127.0.0.1:5432/postgres")?;
    let secs: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(5);
    let name = format!("idem_t_{:016x}", rand::random::<u64>());
    admin(&base, &format!("CREATE DATABASE {name}")).await?;
    let url = &with_db(&base, &name);
    let result = async {
        admin(
            url,
            "CREATE TABLE bare (k TEXT PRIMARY KEY, state TEXT NOT NULL, result TEXT, \
             version BIGINT NOT NULL)",
        )
        .await?;
        println!("claim+complete pairs/s, {secs} s per cell, database {name}");
        println!(
            "{:>8} {:>14} {:>14} {:>8}",
            "clients", "idem Ledger", "bare SQL", "ratio"
        );
        for (run, clients) in [1usize, 16, 64].into_iter().enumerate() {
            let run = u32::try_from(run)?;
            let bare = bare_rate(url, clients, secs, run).await?;
            let idem = ledger_rate(url, clients, secs, run).await?;
            println!(
                "{clients:>8} {idem:>14.0} {bare:>14.0} {:>8.2}",
                idem / bare.max(f64::MIN_POSITIVE)
            );
        }
        Ok::<(), BoxError>(())
    }
    .await;
    // Dropped (with every connection to it) also when the measurement failed.
    let dropped = admin(
        &base,
        &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    )
    .await;
    if let Err(e) = dropped {
        eprintln!("warning: could not drop database {name}: {e}");
    }
    result
}
