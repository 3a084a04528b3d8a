//! Scale runs: claim+complete rate and p99 with 0, 1M and 10M records already in the ledger,
//! and the janitor's expiry rate with claim p99 while it runs (against claim p99 idle).
//!
//! Filling a ledger with 10M records through the API would take longer than the measurement
//! is worth, so the fill seeds a few thousand real records through idem and then doubles them
//! with one set-based `INSERT … SELECT` per round (the key gets a round suffix). The copies are
//! moved back in time by the span of what they copy and written in `final_at` order, so records
//! that finished together sit together on disk, as in a ledger that grew by completions.
//! (Before, every copy kept its seed's times and the layout followed the plan: on PostgreSQL a
//! retention batch, the copies of a few seeds, took one row from each copy block across the
//! whole table; SQLite read the source in key order.) The column list is read from the
//! database, so the copy follows whatever the schema is; only `namespace`, `key` and the
//! record's times are named. Events are not copied (claims never read them).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use idem::{Ledger, Store};
use serde::Serialize;

use crate::load::Measurement;
use crate::{bare, Backend, Target};

#[derive(Debug, Clone)]
pub struct ScaleOpts {
    pub backends: Vec<Backend>,
    pub pg_url: String,
    pub sizes: Vec<u64>,
    pub duration: Duration,
    pub concurrency: usize,
    /// Records expired by the janitor run.
    pub janitor_records: u64,
    pub janitor_batch: usize,
    pub tmp_dir: Option<std::path::PathBuf>,
    pub progress: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    pub backend: Backend,
    pub records: u64,
    pub concurrency: usize,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// What one read of the `/metrics` store gauges (`Store::stats`) costs at this size:
    /// median and max of [`STATS_READS`] reads, ms.
    pub stats_p50_ms: f64,
    pub stats_max_ms: f64,
}

/// Reads of the store gauges timed per size.
pub const STATS_READS: usize = 21;

/// Times `STATS_READS` reads of the store gauges; (median, max) in ms.
async fn time_stats(store: &Arc<dyn Store>) -> anyhow::Result<(f64, f64)> {
    let mut ms = Vec::with_capacity(STATS_READS);
    for _ in 0..STATS_READS {
        let t = Instant::now();
        store
            .stats(idem::Timestamp(chrono::Utc::now().timestamp_millis()))
            .await
            .context("reading the store gauges")?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    Ok((ms[ms.len() / 2], ms[ms.len() - 1]))
}

#[derive(Debug, Clone, Serialize)]
pub struct JanitorRow {
    pub backend: Backend,
    pub records: u64,
    pub expired: u64,
    pub expiries_per_s: f64,
    pub claim_p99_idle_ms: f64,
    pub claim_p99_during_ms: f64,
    pub claim_ops_per_s_idle: f64,
    pub claim_ops_per_s_during: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    pub machine: serde_json::Value,
    pub size_rows: Vec<ScaleRow>,
    pub janitor_rows: Vec<JanitorRow>,
}

fn say(opts: &ScaleOpts, msg: &str) {
    if opts.progress {
        eprintln!("[scale] {msg}");
    }
}

pub async fn run_scale(opts: &ScaleOpts) -> anyhow::Result<ScaleReport> {
    let bench_opts = crate::BenchOpts {
        backends: opts.backends.clone(),
        pg_url: opts.pg_url.clone(),
        pooler_url: None,
        duration: opts.duration,
        concurrency: vec![opts.concurrency],
        modes: vec![],
        workloads: vec![],
        idem_bin: std::path::PathBuf::new(),
        tmp_dir: opts.tmp_dir.clone(),
        duplicate_keys: 0,
        redis_server: std::path::PathBuf::new(),
        progress: false,
    };
    let mut size_rows = Vec::new();
    let mut janitor_rows = Vec::new();
    for &backend in &opts.backends {
        for &n in &opts.sizes {
            say(opts, &format!("{}: filling {n} records", backend.as_str()));
            let target = Target::fresh(&bench_opts, backend).await?;
            let r = async {
                fill(&target.url, backend, n, 0).await?;
                say(
                    opts,
                    &format!(
                        "{}: measuring claim+complete at {n} records",
                        backend.as_str()
                    ),
                );
                let ledger = Arc::new(idem::open(&target.url).await?);
                let (stats_p50_ms, stats_max_ms) = time_stats(ledger.store()).await?;
                let m = pairs(ledger, opts.concurrency, opts.duration).await?;
                Ok::<_, anyhow::Error>(ScaleRow {
                    stats_p50_ms,
                    stats_max_ms,
                    backend,
                    records: n,
                    concurrency: opts.concurrency,
                    ops_per_s: m.ops_per_s(),
                    p50_ms: m.quantile_ms(0.5),
                    p99_ms: m.quantile_ms(0.99),
                    max_ms: m.max_ms(),
                })
            }
            .await;
            target.drop_db().await;
            let row = r?;
            // Printed as soon as measured, so a later failure does not lose it.
            say(
                opts,
                &format!(
                    "{}: {n} records: {:.0} pairs/s, p50 {:.3} ms, p99 {:.3} ms; \
                     gauge read p50 {:.3} ms, max {:.3} ms",
                    backend.as_str(),
                    row.ops_per_s,
                    row.p50_ms,
                    row.p99_ms,
                    row.stats_p50_ms,
                    row.stats_max_ms
                ),
            );
            size_rows.push(row);
        }
        if opts.janitor_records > 0 {
            say(
                opts,
                &format!(
                    "{}: janitor run over {} records",
                    backend.as_str(),
                    opts.janitor_records
                ),
            );
            let target = Target::fresh(&bench_opts, backend).await?;
            let r = janitor_run(&target.url, backend, opts).await;
            target.drop_db().await;
            janitor_rows.push(r?);
        }
    }
    Ok(ScaleReport {
        machine: crate::machine_info(),
        size_rows,
        janitor_rows,
    })
}

async fn pairs(ledger: Arc<Ledger>, c: usize, d: Duration) -> anyhow::Result<Measurement> {
    let ns = crate::bench_ns()?;
    let run_id: u64 = rand::random();
    crate::load::drive_async(c, d, move |client, seq| {
        let ledger = ledger.clone();
        let ns = ns.clone();
        async move { crate::ledger_pair(&ledger, &ns, &crate::key_for(run_id, client, seq)).await }
    })
    .await
}

/// Puts `n` completed records into namespace `bench`, finished `age_ms` ago.
///
/// The seed records are aged before the doubling, so the copies are written once, already
/// old: aging millions of rows afterwards would leave as many dead row versions (and index
/// entries) behind for the measurement to trip over, which a real ledger whose records grew
/// old one by one does not have. On PostgreSQL the fill ends with `VACUUM (ANALYZE)`: a real
/// ledger of that size has been vacuumed and analyzed by autovacuum (idem's first analyze of a
/// young table does not fire on a table this big), so the planner sees the data as it is.
async fn fill(url: &str, backend: Backend, n: u64, age_ms: i64) -> anyhow::Result<()> {
    if n == 0 {
        // Migrations only.
        let _ = idem::open(url).await?;
        return Ok(());
    }
    let seed = n.min(4096);
    {
        let ledger = Arc::new(idem::open(url).await?);
        let ns = crate::bench_ns()?;
        let keys: Vec<String> = (0..seed).map(|i| format!("seed-{i}")).collect();
        for chunk in keys.chunks(64) {
            futures::future::try_join_all(
                chunk.iter().map(|k| crate::ledger_pair(&ledger, &ns, k)),
            )
            .await?;
        }
    }
    if age_ms != 0 {
        age_records(url, backend, age_ms).await?;
    }
    match backend {
        Backend::Sqlite => {
            let path = url.strip_prefix("sqlite://").unwrap_or(url).to_owned();
            tokio::task::spawn_blocking(move || sqlite_double(&path, n)).await?
        }
        Backend::Postgres => pg_double(url, n).await,
        Backend::PostgresPooled | Backend::Redis => {
            anyhow::bail!("redis is a reference row, not an idem ledger")
        }
    }
}

/// A record's times, shifted together when a record is copied.
const TIME_COLS: [&str; 4] = ["created_at", "updated_at", "final_at", "active_at"];

/// The `INSERT` of doubling round `round`: copies of up to `limit` of `bench`'s records.
fn double_sql(cols: &[String], round: u32, limit: u64) -> String {
    let quoted: Vec<String> = cols.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "INSERT INTO records ({}) SELECT {} FROM records WHERE namespace = 'bench' \
         ORDER BY final_at LIMIT {limit}",
        quoted.join(", "),
        select_list(cols, round),
    )
}

/// The copy of every column for doubling round `round`: a new key, and times moved back by the
/// span of final times already in the ledger, so each round's copies are older than everything
/// before them (one scalar subquery, evaluated once per statement on both engines).
fn select_list(cols: &[String], round: u32) -> String {
    cols.iter()
        .map(|c| {
            if c == "key" {
                format!("\"key\" || '~{round}'")
            } else if TIME_COLS.contains(&c.as_str()) {
                format!(
                    "\"{c}\" - (SELECT max(final_at) - min(final_at) + 1 FROM records \
                     WHERE namespace = 'bench')"
                )
            } else {
                format!("\"{c}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn sqlite_double(path: &str, n: u64) -> anyhow::Result<()> {
    let c = rusqlite::Connection::open(path)?;
    c.busy_timeout(Duration::from_secs(60))?;
    let cols: Vec<String> = {
        let mut st = c.prepare("SELECT name FROM pragma_table_info('records')")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let mut round = 0;
    loop {
        let have: u64 = c.query_row(
            "SELECT count(*) FROM records WHERE namespace = 'bench'",
            [],
            |r| r.get(0),
        )?;
        if have >= n {
            return Ok(());
        }
        round += 1;
        let sql = double_sql(&cols, round, n - have);
        // Written past the writer, so the namespace's counts are set here, in the same
        // transaction (idem's writer keeps them for its own writes).
        c.execute_batch(&format!("BEGIN; {sql}; {SQLITE_RECOUNT}; COMMIT;"))?;
    }
}

/// Sets `bench`'s per-state counts to what its records hold.
const SQLITE_RECOUNT: &str = "INSERT INTO namespace_counts (namespace, state, n) \
     SELECT namespace, state, COUNT(*) FROM records WHERE namespace = 'bench' \
     GROUP BY namespace, state \
     ON CONFLICT (namespace, state) DO UPDATE SET n = excluded.n";

async fn pg_double(url: &str, n: u64) -> anyhow::Result<()> {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let cols: Vec<String> = c
        .query(
            "SELECT column_name::text FROM information_schema.columns WHERE table_name = 'records' ORDER BY ordinal_position",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    anyhow::ensure!(!cols.is_empty(), "no records table");
    let mut round = 0;
    loop {
        let have: i64 = c
            .query_one(
                "SELECT count(*) FROM records WHERE namespace = 'bench'",
                &[],
            )
            .await?
            .get(0);
        if have as u64 >= n {
            c.batch_execute("VACUUM (ANALYZE) records").await?;
            return Ok(());
        }
        round += 1;
        let sql = double_sql(&cols, round, n - have as u64);
        c.batch_execute(&sql).await?;
    }
}

/// Moves the times of every record in `bench` back by `by_ms`. Out of band, so it bumps
/// `version` like every write must: idem-postgres remembers records per instance and trusts a
/// remembered record only while its version is unchanged.
async fn age_records(url: &str, backend: Backend, by_ms: i64) -> anyhow::Result<()> {
    let times: Vec<String> = TIME_COLS
        .iter()
        .map(|c| format!("{c} = {c} - {by_ms}"))
        .collect();
    let sql = format!(
        "UPDATE records SET {}, version = version + 1 WHERE namespace = 'bench'",
        times.join(", ")
    );
    match backend {
        Backend::Sqlite => {
            let path = url.strip_prefix("sqlite://").unwrap_or(url).to_owned();
            tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                let c = rusqlite::Connection::open(&path)?;
                c.busy_timeout(Duration::from_secs(60))?;
                c.execute_batch(&sql)?;
                Ok(())
            })
            .await?
        }
        Backend::Postgres => bare::pg_admin(url, &sql).await,
        Backend::PostgresPooled | Backend::Redis => {
            anyhow::bail!("redis is a reference row, not an idem ledger")
        }
    }
}

async fn janitor_run(url: &str, backend: Backend, opts: &ScaleOpts) -> anyhow::Result<JanitorRow> {
    // Past the default 30-day retention, within the 400-day audit retention.
    fill(url, backend, opts.janitor_records, 40 * 86_400_000).await?;
    let ledger = Arc::new(idem::open(url).await?);
    let idle = pairs(ledger.clone(), opts.concurrency, opts.duration).await?;

    let store: Arc<dyn Store> = ledger.store().clone();
    let batch = opts.janitor_batch;
    let janitor = tokio::spawn(async move {
        let start = Instant::now();
        let mut expired = 0u64;
        loop {
            let r = store
                .retention_once(idem::Clock::now(&idem::SystemClock), batch)
                .await
                .context("retention_once")?;
            expired += r.results_expired as u64;
            if r.results_expired == 0 {
                break;
            }
        }
        Ok::<_, anyhow::Error>((expired, start.elapsed()))
    });
    // Claims run while the janitor works; stop measuring when it is done (or at 10 × duration).
    let during = {
        let ledger = ledger.clone();
        let ns = crate::bench_ns()?;
        let run_id: u64 = rand::random();
        let c = opts.concurrency;
        let max_during = opts.duration * 10;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done2 = done.clone();
        let measure = tokio::spawn(async move {
            crate::load::drive_until(c, max_during, done2, move |client, seq| {
                let ledger = ledger.clone();
                let ns = ns.clone();
                async move {
                    crate::ledger_pair(&ledger, &ns, &crate::key_for(run_id, client, seq)).await
                }
            })
            .await
        });
        let (expired, took) = janitor.await??;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (measure.await??, expired, took)
    };
    let (m, expired, took) = during;
    Ok(JanitorRow {
        backend,
        records: opts.janitor_records,
        expired,
        expiries_per_s: (expired as f64 / took.as_secs_f64().max(1e-9)).round(),
        claim_p99_idle_ms: idle.quantile_ms(0.99),
        claim_p99_during_ms: m.quantile_ms(0.99),
        claim_ops_per_s_idle: idle.ops_per_s(),
        claim_ops_per_s_during: m.ops_per_s(),
    })
}
