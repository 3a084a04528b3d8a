//! Quick side-by-side without HTTP rows: `cargo run --release -p idem-bench --example quick`.
use std::time::Duration;

use idem_bench::{Backend, BenchOpts, Mode, Workload};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let backends = match std::env::args().nth(1).as_deref() {
        Some("postgres") => vec![Backend::Postgres],
        Some("all") => vec![Backend::Sqlite, Backend::Postgres],
        _ => vec![Backend::Sqlite],
    };
    let opts = BenchOpts {
        backends,
        pg_url: "postgres://postgres@127.0.0.1:5432/postgres".into(),
        pooler_url: None,
        duration: Duration::from_secs(3),
        concurrency: vec![1, 16, 64],
        modes: vec![Mode::Bare, Mode::Library],
        workloads: vec![Workload::FirstTimePair, Workload::Duplicate],
        idem_bin: "target/release/idem".into(),
        tmp_dir: None,
        duplicate_keys: 1000,
        redis_server: "redis-server".into(),
        progress: true,
    };
    let report = idem_bench::run(&opts).await?;
    print!("{}", idem_bench::render_table(&report.rows));
    Ok(())
}
