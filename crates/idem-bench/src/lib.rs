//! `idem bench`: how fast a durable claim can be, side by side with the bare store.
//!
//! In one run, on one machine, for each backend (SQLite, PostgreSQL) it measures:
//! 1. `bare` — the articles' hand-rolled recipe through the same driver idem uses: one
//!    durable `INSERT … ON CONFLICT DO NOTHING RETURNING` transaction per claim and one
//!    `UPDATE` per complete, one connection per client, no idem;
//! 2. `library` — idem in process (`idem::Ledger`);
//! 3. `http` — idem over HTTP on loopback: a real `idem serve` child process, keep-alive
//!    clients whose claim token feeds their complete.
//!
//! Workloads: `first_time_pair` (claim + complete of a fresh key; latency is the pair) and
//! `duplicate` (claims of already completed keys: replays). Every figure is printed with its
//! ratio to the bare row of the same backend, workload and concurrency.

mod bare;
mod load;
mod scale;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use idem::{ClaimOutcome, ClaimRequest, CompleteRequest, Key, Ledger, Namespace};
use serde::Serialize;

pub use load::Measurement;
pub use scale::{run_scale, JanitorRow, ScaleOpts, ScaleReport, ScaleRow};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Bare,
    Library,
    Http,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Bare => "bare",
            Mode::Library => "library",
            Mode::Http => "http",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    FirstTimePair,
    Duplicate,
}

impl Workload {
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::FirstTimePair => "first_time_pair",
            Workload::Duplicate => "duplicate",
        }
    }
}

#[derive(Debug, Clone)]
pub struct BenchOpts {
    pub backends: Vec<Backend>,
    /// PostgreSQL server URL (a fresh database is created on it per run and dropped after).
    pub pg_url: String,
    pub duration: Duration,
    pub concurrency: Vec<usize>,
    pub modes: Vec<Mode>,
    pub workloads: Vec<Workload>,
    /// The `idem` binary to start for HTTP rows.
    pub idem_bin: PathBuf,
    /// Where temporary SQLite files go (a fresh file per row).
    pub tmp_dir: Option<PathBuf>,
    /// Keys completed before a duplicate run.
    pub duplicate_keys: usize,
    pub progress: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub backend: Backend,
    pub mode: Mode,
    pub workload: Workload,
    pub concurrency: usize,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// ops_per_s divided by the bare row's (same backend, workload, concurrency).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_bare: Option<f64>,
    /// Operations that failed (should be 0; shown so a broken run cannot look fast).
    pub errors: u64,
    /// Peak resident memory of the server process (HTTP rows), MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_peak_rss_mib: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: serde_json::Value,
    pub rows: Vec<Row>,
}

/// What the machine is, for the JSON report.
pub fn machine_info() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("MemTotal")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .unwrap_or(0);
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": cpu,
        "mem_gib": (mem_kib as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        "os": std::env::consts::OS,
        "idem_version": env!("CARGO_PKG_VERSION"),
        "at": chrono::Utc::now().to_rfc3339(),
    })
}

/// Runs every requested row and returns the report (ratios filled in).
pub async fn run(opts: &BenchOpts) -> anyhow::Result<Report> {
    let mut rows = Vec::new();
    let total =
        opts.backends.len() * opts.modes.len() * opts.workloads.len() * opts.concurrency.len();
    let bar = progress_bar(opts.progress, total as u64);
    for &backend in &opts.backends {
        for &workload in &opts.workloads {
            for &c in &opts.concurrency {
                for &mode in &opts.modes {
                    bar.set_message(format!(
                        "{} {} {} c={c}",
                        backend.as_str(),
                        mode.as_str(),
                        workload.as_str()
                    ));
                    let row = run_row(opts, backend, mode, workload, c)
                        .await
                        .with_context(|| {
                            format!(
                                "{} {} {} c={c}",
                                backend.as_str(),
                                mode.as_str(),
                                workload.as_str()
                            )
                        })?;
                    rows.push(row);
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    fill_ratios(&mut rows);
    Ok(Report {
        machine: machine_info(),
        rows,
    })
}

fn progress_bar(show: bool, len: u64) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn fill_ratios(rows: &mut [Row]) {
    let bare: Vec<(Backend, Workload, usize, f64)> = rows
        .iter()
        .filter(|r| r.mode == Mode::Bare)
        .map(|r| (r.backend, r.workload, r.concurrency, r.ops_per_s))
        .collect();
    for r in rows.iter_mut() {
        r.ratio_to_bare = bare
            .iter()
            .find(|(b, w, c, _)| *b == r.backend && *w == r.workload && *c == r.concurrency)
            .filter(|(_, _, _, ops)| *ops > 0.0)
            .map(|(_, _, _, ops)| (r.ops_per_s / ops * 100.0).round() / 100.0);
    }
}

/// A fresh place to put one row's data.
struct Target {
    backend: Backend,
    url: String,
    _dir: Option<tempfile::TempDir>,
    pg_db: Option<String>,
    pg_admin: String,
}

impl Target {
    async fn fresh(opts: &BenchOpts, backend: Backend) -> anyhow::Result<Target> {
        match backend {
            Backend::Sqlite => {
                let dir = match &opts.tmp_dir {
                    Some(d) => tempfile::tempdir_in(d)?,
                    None => tempfile::tempdir()?,
                };
                let url = format!("sqlite://{}", dir.path().join("bench.db").display());
                Ok(Target {
                    backend,
                    url,
                    _dir: Some(dir),
                    pg_db: None,
                    pg_admin: String::new(),
                })
            }
            Backend::Postgres => {
                let name = format!("idem_bench_{:016x}", rand::random::<u64>());
                bare::pg_admin(&opts.pg_url, &format!("CREATE DATABASE {name}")).await?;
                let url = bare::pg_url_with_db(&opts.pg_url, &name);
                Ok(Target {
                    backend,
                    url,
                    _dir: None,
                    pg_db: Some(name),
                    pg_admin: opts.pg_url.clone(),
                })
            }
        }
    }

    async fn drop_db(self) {
        if let Some(db) = &self.pg_db {
            let _ = bare::pg_admin(
                &self.pg_admin,
                &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
            )
            .await;
        }
    }
}

async fn run_row(
    opts: &BenchOpts,
    backend: Backend,
    mode: Mode,
    workload: Workload,
    c: usize,
) -> anyhow::Result<Row> {
    let target = Target::fresh(opts, backend).await?;
    let result = match mode {
        Mode::Bare => bare::run(&target.url, backend, workload, c, opts)
            .await
            .map(|m| (m, None)),
        Mode::Library => run_library(&target.url, workload, c, opts)
            .await
            .map(|m| (m, None)),
        Mode::Http => run_http(&target.url, workload, c, opts)
            .await
            .map(|(m, rss)| (m, Some(rss))),
    };
    let tb = target.backend;
    target.drop_db().await;
    let (m, rss) = result?;
    Ok(Row {
        backend: tb,
        mode,
        workload,
        concurrency: c,
        ops_per_s: m.ops_per_s(),
        p50_ms: m.quantile_ms(0.50),
        p99_ms: m.quantile_ms(0.99),
        max_ms: m.max_ms(),
        ratio_to_bare: None,
        errors: m.errors,
        server_peak_rss_mib: rss,
    })
}

fn bench_ns() -> anyhow::Result<Namespace> {
    Ok(Namespace::try_from("bench")?)
}

fn key_for(run: u64, client: usize, seq: u64) -> String {
    format!("k-{run:x}-{client}-{seq}")
}

async fn ledger_pair(ledger: &Ledger, ns: &Namespace, key: &str) -> anyhow::Result<()> {
    let key = Key::try_from(key)?;
    let c = ledger.claim(ns, &key, ClaimRequest::default()).await?;
    anyhow::ensure!(
        c.outcome == ClaimOutcome::Acquired,
        "claim answered {:?}",
        c.outcome
    );
    let token = c.token.context("acquired without token")?.secret();
    ledger
        .complete(
            ns,
            &key,
            CompleteRequest {
                token,
                result: Some(serde_json::json!({"ok": true})),
                external_ref: None,
            },
        )
        .await?;
    Ok(())
}

async fn run_library(
    url: &str,
    workload: Workload,
    c: usize,
    opts: &BenchOpts,
) -> anyhow::Result<Measurement> {
    let ledger = Arc::new(idem::open(url).await?);
    let ns = bench_ns()?;
    let run_id: u64 = rand::random();
    match workload {
        Workload::FirstTimePair => {
            load::drive_async(c, opts.duration, move |client, seq| {
                let ledger = ledger.clone();
                let ns = ns.clone();
                async move { ledger_pair(&ledger, &ns, &key_for(run_id, client, seq)).await }
            })
            .await
        }
        Workload::Duplicate => {
            let keys = prepopulate(opts.duplicate_keys, run_id, |k| {
                let ledger = ledger.clone();
                let ns = ns.clone();
                async move { ledger_pair(&ledger, &ns, &k).await }
            })
            .await?;
            load::drive_async(c, opts.duration, move |_client, seq| {
                let ledger = ledger.clone();
                let ns = ns.clone();
                let k = keys[(seq as usize).wrapping_mul(7919).wrapping_add(_client) % keys.len()]
                    .clone();
                async move {
                    let key = Key::try_from(k.as_str())?;
                    let r = ledger.claim(&ns, &key, ClaimRequest::default()).await?;
                    anyhow::ensure!(
                        r.outcome == ClaimOutcome::Completed,
                        "duplicate answered {:?}",
                        r.outcome
                    );
                    Ok(())
                }
            })
            .await
        }
    }
}

async fn prepopulate<F, Fut>(n: usize, run_id: u64, f: F) -> anyhow::Result<Arc<Vec<String>>>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let keys: Vec<String> = (0..n.max(1))
        .map(|i| format!("dup-{run_id:x}-{i}"))
        .collect();
    // 16 at a time: fast with group commit, and independent of the run's concurrency.
    for chunk in keys.chunks(16) {
        futures::future::try_join_all(chunk.iter().map(|k| f(k.clone()))).await?;
    }
    Ok(Arc::new(keys))
}

/// An `idem serve` child process on a free loopback port.
pub struct ServerProcess {
    child: tokio::process::Child,
    pub base: String,
    pid: u32,
}

impl ServerProcess {
    pub async fn start(bin: &std::path::Path, db_url: &str) -> anyhow::Result<ServerProcess> {
        let port = free_port()?;
        let mut child = tokio::process::Command::new(bin)
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--db",
                db_url,
            ])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("server exited at once")?;
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        for _ in 0..200 {
            if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
                if r.status().is_success() {
                    return Ok(ServerProcess { child, base, pid });
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                anyhow::bail!("idem serve exited with {status}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("idem serve did not become healthy in 10 s")
    }

    /// Peak resident set size of the server so far (VmHWM), MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .ok()
            .and_then(|s| {
                s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<f64>().ok())
                })
            })
            .map_or(0.0, |kib| (kib / 1024.0 * 10.0).round() / 10.0)
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn http_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(30))
        .build()?)
}

async fn http_pair(client: &reqwest::Client, base: &str, key: &str) -> anyhow::Result<()> {
    let url = format!("{base}/v1/namespaces/bench/keys/{key}");
    let r = client
        .post(format!("{url}/claim"))
        .json(&serde_json::json!({}))
        .send()
        .await?;
    anyhow::ensure!(r.status().as_u16() == 201, "claim answered {}", r.status());
    let v: serde_json::Value = r.json().await?;
    let token = v
        .get("token")
        .and_then(|t| t.as_str())
        .context("no token")?
        .to_owned();
    let r = client
        .post(format!("{url}/complete"))
        .json(&serde_json::json!({"token": token, "result": {"ok": true}}))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "complete answered {}", r.status());
    Ok(())
}

async fn run_http(
    url: &str,
    workload: Workload,
    c: usize,
    opts: &BenchOpts,
) -> anyhow::Result<(Measurement, f64)> {
    let server = ServerProcess::start(&opts.idem_bin, url).await?;
    let base = Arc::new(server.base.clone());
    let client = http_client()?;
    let run_id: u64 = rand::random();
    let m = match workload {
        Workload::FirstTimePair => {
            let (client, base) = (client.clone(), base.clone());
            load::drive_async(c, opts.duration, move |cl, seq| {
                let client = client.clone();
                let base = base.clone();
                async move { http_pair(&client, &base, &key_for(run_id, cl, seq)).await }
            })
            .await
        }
        Workload::Duplicate => {
            let keys = {
                let (client, base) = (client.clone(), base.clone());
                prepopulate(opts.duplicate_keys, run_id, move |k| {
                    let client = client.clone();
                    let base = base.clone();
                    async move { http_pair(&client, &base, &k).await }
                })
                .await?
            };
            let (client, base) = (client.clone(), base.clone());
            load::drive_async(c, opts.duration, move |cl, seq| {
                let client = client.clone();
                let base = base.clone();
                let k =
                    keys[(seq as usize).wrapping_mul(7919).wrapping_add(cl) % keys.len()].clone();
                async move {
                    let r = client
                        .post(format!("{base}/v1/namespaces/bench/keys/{k}/claim"))
                        .json(&serde_json::json!({}))
                        .send()
                        .await?;
                    anyhow::ensure!(
                        r.status().as_u16() == 200,
                        "duplicate answered {}",
                        r.status()
                    );
                    let _ = r.bytes().await?;
                    Ok(())
                }
            })
            .await
        }
    };
    let rss = server.peak_rss_mib();
    server.stop().await;
    Ok((m?, rss))
}

/// The side-by-side table.
pub fn render_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<9} {:<8} {:<16} {:>5} {:>12} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9}\n",
        "backend",
        "mode",
        "workload",
        "conc",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "x bare",
        "errors",
        "rss MiB"
    ));
    for r in rows {
        out.push_str(&format!(
            "{:<9} {:<8} {:<16} {:>5} {:>12.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>7} {:>9}\n",
            r.backend.as_str(),
            r.mode.as_str(),
            r.workload.as_str(),
            r.concurrency,
            r.ops_per_s,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.ratio_to_bare.map_or("-".into(), |x| format!("{x:.2}")),
            r.errors,
            r.server_peak_rss_mib
                .map_or("-".into(), |x| format!("{x:.1}")),
        ));
    }
    out
}
