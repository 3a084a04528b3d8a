//! In-process rate of the SQLite store through `Ledger`, on a fresh temp file per figure.
//!
//! Measures first-time claim+complete pairs/s and duplicate claims/s (claims of completed
//! keys, which still append a `duplicate_hit` event, so they are durable writes too), on 1 and
//! 8 tasks, with group commit on (the default) and off (`max_batch = 1`: one transaction and
//! one fsync per write). Then the retention step's throughput on a prepared backlog.
//!
//! `cargo run --release -p idem-sqlite --example rate` (`IDEM_RATE_SECS` = seconds per figure,
//! default 2; `IDEM_RATE_DIR` = where to put the temp files, default the system temp dir;
//! `IDEM_RATE_TASKS` = task counts, comma-separated, default `1,8`; `IDEM_RATE_ONLY_GROUP=1`
//! skips the one-transaction-per-write rows and the retention figure — handy under `perf`).

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::{ClaimOutcome, ClaimRequest, CompleteRequest, Key, Namespace, Timestamp};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{Ledger, Store};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn temp_dir() -> Res<tempfile::TempDir> {
    Ok(match std::env::var_os("IDEM_RATE_DIR") {
        Some(d) => tempfile::tempdir_in(PathBuf::from(d))?,
        None => tempfile::tempdir()?,
    })
}

/// CPU time (ns) the store's writer thread has used so far (Linux: /proc schedstat).
fn writer_cpu_ns() -> Option<u64> {
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "idem-sqlite-wri" {
            let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            return s.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

/// Each task claims and completes its own fresh keys until `dur` is over.
async fn pairs(ledger: &Ledger, tasks: usize, dur: Duration) -> Res<(f64, Vec<Vec<Key>>)> {
    let ns = Namespace::try_from("rate")?;
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (ledger, ns) = (ledger.clone(), ns.clone());
        handles.push(tokio::spawn(async move {
            let mut keys = Vec::new();
            while start.elapsed() < dur {
                let key = Key::try_from(format!("t{t}-{}", keys.len()))?;
                let c = ledger.claim(&ns, &key, ClaimRequest::default()).await?;
                let token = c.token.ok_or("no token on a first claim")?.secret();
                let done = CompleteRequest {
                    cost: None,
                    token,
                    result: Some(serde_json::json!({"ok": true})),
                    external_ref: None,
                };
                ledger.complete(&ns, &key, done).await?;
                keys.push(key);
            }
            Res::Ok(keys)
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.push(h.await??);
    }
    let n: usize = all.iter().map(Vec::len).sum();
    Ok((n as f64 / start.elapsed().as_secs_f64(), all))
}

/// Each task claims its completed keys again, round robin, until `dur` is over.
async fn duplicates(ledger: &Ledger, keys: Vec<Vec<Key>>, dur: Duration) -> Res<f64> {
    let ns = Namespace::try_from("rate")?;
    let start = Instant::now();
    let mut handles = Vec::new();
    for keys in keys.into_iter().filter(|k| !k.is_empty()) {
        let (ledger, ns) = (ledger.clone(), ns.clone());
        handles.push(tokio::spawn(async move {
            let mut n = 0usize;
            while start.elapsed() < dur {
                let key = &keys[n % keys.len()];
                let c = ledger.claim(&ns, key, ClaimRequest::default()).await?;
                if c.outcome != ClaimOutcome::Completed {
                    return Err(format!("duplicate claim answered {:?}", c.outcome).into());
                }
                n += 1;
            }
            Res::Ok(n)
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Retention throughput: a backlog of old completed records (3 events each, made with SQL
/// for speed), expired then deleted by `retention_once` in batches.
async fn retention(records: i64, batch: usize) -> Res<(f64, f64)> {
    let dir = temp_dir()?;
    let path = dir.path().join("retention.db");
    let store = SqliteStore::open(&path)?;
    let now = Timestamp(1_800_000_000_000);
    let old = now.0 - 31 * 86_400_000;
    {
        let conn = rusqlite::Connection::open(&path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.execute(
            "INSERT INTO records (namespace, key, state, attempt, result, result_expired, \
             external_ref, created_at, updated_at, lease_id, lease_expiry, reported, \
             budget_base, window_start, final_at, active_at, stuck_alerted, version) \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
             SELECT 'ret', 'key-' || i, 'completed', 1, '{\"ok\":true,\"n\":' || i || '}', 0, \
             'ref-' || i, ?2, ?2, 'lease', 'reclaim', 1, 0, ?2, ?2, ?2, 0, 2 FROM n",
            rusqlite::params![records, old],
        )?;
        // Written past the store's writer: counted here, as the writer counts its own writes.
        conn.execute(
            "INSERT INTO namespace_counts (namespace, state, n) VALUES ('ret', 'completed', ?1) \
             ON CONFLICT (namespace, state) DO UPDATE SET n = n + excluded.n",
            [records],
        )?;
        for kind in ["acquired", "completed"] {
            conn.execute(
                "INSERT INTO events (namespace, key, at, type, from_state, to_state, attempt) \
                 SELECT namespace, key, ?1, ?2, 'processing', 'completed', 1 FROM records",
                rusqlite::params![old, kind],
            )?;
        }
    }
    let start = Instant::now();
    let mut expired = 0;
    loop {
        let r = store.retention_once(now, batch).await?;
        if r.results_expired == 0 {
            break;
        }
        expired += r.results_expired;
    }
    let expire_rate = expired as f64 / start.elapsed().as_secs_f64();
    let later = now.plus_ms(400 * 86_400_000);
    let start = Instant::now();
    let mut deleted = 0;
    loop {
        let r = store.retention_once(later, batch).await?;
        if r.tombstones_deleted == 0 {
            break;
        }
        deleted += r.tombstones_deleted;
    }
    let delete_rate = deleted as f64 / start.elapsed().as_secs_f64();
    if expired as i64 != records || deleted as i64 != records {
        return Err(format!("retention saw {expired} / {deleted} of {records}").into());
    }
    Ok((expire_rate, delete_rate))
}

#[tokio::main]
async fn main() -> Res<()> {
    let secs: f64 = std::env::var("IDEM_RATE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let dur = Duration::from_secs_f64(secs);
    println!(
        "idem-sqlite in-process rate via Ledger, fresh temp file per row, {secs} s per figure"
    );
    println!("synchronous=FULL, WAL; a claim or complete returns only after its fsync'd commit");
    println!();
    println!(
        "{:<40} {:>5} {:>22} {:>20}",
        "mode", "tasks", "claim+complete pairs/s", "duplicate claims/s"
    );
    let task_counts: Vec<usize> = std::env::var("IDEM_RATE_TASKS")
        .ok()
        .map(|s| s.split(',').filter_map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8]);
    let only_group = std::env::var("IDEM_RATE_ONLY_GROUP").is_ok_and(|v| v == "1");
    let modes: &[(&str, usize)] = if only_group {
        &[("group commit (max_batch 512, default)", 512)]
    } else {
        &[
            ("group commit (max_batch 512, default)", 512),
            ("one transaction per write (max_batch 1)", 1),
        ]
    };
    for &(mode, max_batch) in modes {
        for &tasks in &task_counts {
            let dir = temp_dir()?;
            let store = SqliteStore::open_with(
                &dir.path().join("rate.db"),
                SqliteOptions {
                    max_batch,
                    ..SqliteOptions::default()
                },
            )?;
            let ledger = Ledger::new(Arc::new(store));
            let cpu0 = writer_cpu_ns();
            let (pair_rate, keys) = pairs(&ledger, tasks, dur).await?;
            let n_pairs: usize = keys.iter().map(Vec::len).sum();
            let cpu1 = writer_cpu_ns();
            let start = Instant::now();
            let dup_rate = duplicates(&ledger, keys, dur).await?;
            let n_dups = dup_rate * start.elapsed().as_secs_f64();
            let cpu2 = writer_cpu_ns();
            println!("{mode:<40} {tasks:>5} {pair_rate:>22.0} {dup_rate:>20.0}");
            if let (Some(a), Some(b), Some(c)) = (cpu0, cpu1, cpu2) {
                println!(
                    "    writer thread CPU: {:.1} us per pair, {:.1} us per duplicate",
                    (b - a) as f64 / 1000.0 / n_pairs.max(1) as f64,
                    (c - b) as f64 / 1000.0 / n_dups.max(1.0)
                );
            }
        }
    }
    println!();
    if only_group {
        return Ok(());
    }
    let (records, batch) = (200_000, 10_000);
    let (expire, delete) = retention(records, batch).await?;
    println!(
        "retention_once on {records} completed records (batch {batch}): \
         {expire:.0} results expired/s, {delete:.0} tombstones deleted/s (with 3 events each)"
    );
    Ok(())
}
