//! `idem bench`: how fast a durable claim can be, side by side with the bare store.
//!
//! In one run, on one machine, for each backend (SQLite, PostgreSQL) it measures:
//! 1. `bare` — the articles' hand-rolled recipe through the same driver idem uses: one
//!    durable `INSERT … ON CONFLICT DO NOTHING RETURNING` transaction per claim and one
//!    `UPDATE` per complete, one connection per client, no idem;
//! 2. `library` — idem in process (`idem::Ledger`);
//! 3. `http` — idem over HTTP on loopback: a real `idem serve` child process, keep-alive
//!    clients (one lean HTTP/1.1 connection each) whose claim token feeds their
//!    complete. These rows also give the CPU time per operation of the server process and of
//!    the load generator, which share the machine's cores with each other.
//!
//! 4. `direct` — the effect rows' destination called straight, no idem: the floor an effect
//!    through idem is compared with.
//! 5. `aof_always` and `no_persist` of backend `redis` — the "dedupe with Redis" recipe
//!    (`SET NX EX`, `SET XX EX`, `GET`; module `redis_recipe`) against a `redis-server` the bench
//!    starts, with every write fsynced before its answer, and without persistence. Run once
//!    per workload and concurrency whatever the backends; skipped, with the reason in
//!    [`Report::skipped`], when the binary cannot be run.
//!
//! Workloads: `first_time_pair` (claim + complete of a fresh key; latency is the pair),
//! `duplicate` (claims of already completed keys: replays), and `effect` / `effect_256k`
//! (one `POST …/effect` of a fresh key: idem claims, sends a POST to a loopback destination
//! that answers 200 with a 64-byte / 256 KiB JSON body, stores the response and completes;
//! `http` and `direct` modes only), `effect_tls` (the same 64-byte effect to an HTTPS
//! destination on loopback that offers HTTP/2; its `direct` row calls it over one kept TLS
//! connection per client), `intake` / `intake_duplicate` (Stripe-signed 1 KiB events
//! posted to `/in/{source}`: fresh event ids, or redeliveries of accepted ones; the source
//! forwards to a loopback sink meanwhile; `http` only). Every figure is printed with its
//! ratio to the bare row of the same backend, workload and concurrency; effect and intake
//! rows also with their ratio to the HTTP claim row they stand in for (`x claims`: the
//! claim+complete pair, or duplicate claims for duplicate events); claim rows, when the redis
//! rows ran, with their ratio to the Redis AOF row of the same workload and concurrency
//! (`x redis`).

mod backlog;
mod bare;
mod dest;
pub mod history;
mod http;
mod load;
pub mod outbound;
mod redis_recipe;
mod scale;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use idem::{ClaimOutcome, ClaimRequest, CompleteRequest, Key, Ledger, Namespace};
use serde::Serialize;

pub use backlog::{render as render_backlog, BacklogReport};
pub use load::Measurement;
pub use scale::{run_scale, JanitorRow, ScaleOpts, ScaleReport, ScaleRow};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
    /// PostgreSQL through the pooler of [`BenchOpts::pooler_url`] (library and HTTP rows, each
    /// run right after the direct row it is compared with).
    #[serde(rename = "pg_pooled")]
    PostgresPooled,
    /// The store of the redis reference rows (not a ledger backend of idem).
    Redis,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::PostgresPooled => "pg_pooled",
            Backend::Redis => "redis",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Bare,
    Library,
    Http,
    Direct,
    /// The Redis recipe, AOF with `appendfsync always`.
    #[serde(rename = "aof_always")]
    RedisAof,
    /// The Redis recipe, no persistence (neither AOF nor RDB).
    #[serde(rename = "no_persist")]
    RedisNoPersist,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Bare => "bare",
            Mode::Library => "library",
            Mode::Http => "http",
            Mode::Direct => "direct",
            Mode::RedisAof => "aof_always",
            Mode::RedisNoPersist => "no_persist",
        }
    }

    /// Whether the row is one of the Redis recipe's (backend `redis`, run once per workload
    /// and concurrency, not per backend).
    pub fn is_redis(self) -> bool {
        matches!(self, Mode::RedisAof | Mode::RedisNoPersist)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    FirstTimePair,
    Duplicate,
    Effect,
    #[serde(rename = "effect_256k")]
    Effect256k,
    EffectTls,
    Intake,
    /// First-time events of a source with three destinations (three deliveries each).
    #[serde(rename = "intake_fanout3")]
    IntakeFanout3,
    IntakeDuplicate,
}

impl Workload {
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::FirstTimePair => "first_time_pair",
            Workload::Duplicate => "duplicate",
            Workload::Effect => "effect",
            Workload::Effect256k => "effect_256k",
            Workload::EffectTls => "effect_tls",
            Workload::Intake => "intake",
            Workload::IntakeFanout3 => "intake_fanout3",
            Workload::IntakeDuplicate => "intake_duplicate",
        }
    }

    /// The HTTP claim workload a row is compared with (`ratio_to_claims`): the pair for
    /// effects and first-time intake events, duplicate claims for duplicate events.
    pub fn claims_row(self) -> Option<Workload> {
        match self {
            Workload::Effect
            | Workload::Effect256k
            | Workload::EffectTls
            | Workload::Intake
            | Workload::IntakeFanout3 => Some(Workload::FirstTimePair),
            Workload::IntakeDuplicate => Some(Workload::Duplicate),
            Workload::FirstTimePair | Workload::Duplicate => None,
        }
    }

    /// The destination's answer size for effect workloads.
    pub fn response_bytes(self) -> Option<usize> {
        match self {
            Workload::Effect | Workload::EffectTls => Some(64),
            Workload::Effect256k => Some(256 * 1024),
            Workload::FirstTimePair
            | Workload::Duplicate
            | Workload::Intake
            | Workload::IntakeFanout3
            | Workload::IntakeDuplicate => None,
        }
    }

    /// Whether a row of this workload exists in `mode`: effects run through idem over HTTP
    /// and straight to the destination, intake only over HTTP, the ledger workloads in every
    /// mode but `direct` (the Redis recipe's included).
    pub fn runs_in(self, mode: Mode) -> bool {
        match self {
            Workload::Effect | Workload::Effect256k | Workload::EffectTls => {
                matches!(mode, Mode::Http | Mode::Direct)
            }
            Workload::Intake | Workload::IntakeFanout3 | Workload::IntakeDuplicate => {
                mode == Mode::Http
            }
            Workload::FirstTimePair | Workload::Duplicate => mode != Mode::Direct,
        }
    }
}

#[derive(Debug, Clone)]
pub struct BenchOpts {
    pub backends: Vec<Backend>,
    /// PostgreSQL server URL (a fresh database is created on it per run and dropped after).
    pub pg_url: String,
    /// The same server through a pooler (e.g. PgBouncer in transaction mode, with
    /// `pooler=transaction`): each PostgreSQL library and HTTP row is then measured a second
    /// time through it, on a fresh database made through `pg_url`.
    pub pooler_url: Option<String>,
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
    /// The `redis-server` binary the redis rows start (a fresh server per row).
    pub redis_server: PathBuf,
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
    /// Effect and intake rows: ops_per_s divided by that of the HTTP claim row they stand
    /// in for ([`Workload::claims_row`]; same backend and concurrency).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_claims: Option<f64>,
    /// Pooled rows: ops_per_s divided by that of the direct PostgreSQL row of the same mode,
    /// workload and concurrency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_direct: Option<f64>,
    /// Claim rows: ops_per_s divided by that of the Redis AOF row of the same workload and
    /// concurrency (when the redis rows ran; not on the AOF row itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_redis: Option<f64>,
    /// Operations that failed (should be 0; shown so a broken run cannot look fast).
    pub errors: u64,
    /// Peak resident memory of the server process (HTTP and redis rows), MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_peak_rss_mib: Option<f64>,
    /// CPU time of the server process (all threads: HTTP and store; `redis-server` for the
    /// redis rows) per operation, µs (HTTP and redis rows, Linux).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_us_per_op: Option<f64>,
    /// CPU time of the load generator (this process) per operation, µs (HTTP and redis
    /// rows, Linux).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loadgen_cpu_us_per_op: Option<f64>,
    /// The server's CPU time per operation by thread name (e.g. `tokio-rt-worker` for HTTP
    /// and handlers, `idem-sqlite-wri` for the SQLite writer), µs (HTTP rows, Linux).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_threads_cpu_us_per_op: Option<std::collections::BTreeMap<String, f64>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: serde_json::Value,
    pub rows: Vec<Row>,
    /// Rows asked for that did not run, and why (e.g. no `redis-server` to start).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
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

/// The rows a run measures, in order: per backend, workload and concurrency the idem modes;
/// the redis modes (when they can run) once per workload and concurrency, right after the
/// first backend's rows of the same workload and concurrency, so the rows a ratio compares
/// run close together in time.
fn plan(opts: &BenchOpts, redis: bool) -> Vec<(Backend, Mode, Workload, usize)> {
    let mut specs = Vec::new();
    // No idem backend asked for: the redis rows still run.
    let backends: Vec<Option<Backend>> = if opts.backends.is_empty() {
        vec![None]
    } else {
        opts.backends.iter().copied().map(Some).collect()
    };
    for (i, backend) in backends.into_iter().enumerate() {
        for &workload in &opts.workloads {
            for &c in &opts.concurrency {
                for &mode in opts.modes.iter().filter(|&&m| workload.runs_in(m)) {
                    match (mode.is_redis(), backend) {
                        (false, Some(b)) => {
                            specs.push((b, mode, workload, c));
                            if b == Backend::Postgres
                                && opts.pooler_url.is_some()
                                && matches!(mode, Mode::Library | Mode::Http)
                            {
                                specs.push((Backend::PostgresPooled, mode, workload, c));
                            }
                        }
                        (true, _) if redis && i == 0 => {
                            specs.push((Backend::Redis, mode, workload, c))
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    specs
}

/// Runs every requested row and returns the report (ratios filled in).
pub async fn run(opts: &BenchOpts) -> anyhow::Result<Report> {
    let mut skipped = Vec::new();
    let wants_redis = opts.modes.iter().any(|m| m.is_redis());
    let redis = if wants_redis {
        match redis_recipe::unavailable(&opts.redis_server) {
            Some(why) => {
                skipped.push(why);
                false
            }
            None => true,
        }
    } else {
        false
    };
    let specs = plan(opts, redis);
    let mut rows = Vec::with_capacity(specs.len());
    let bar = progress_bar(opts.progress, specs.len() as u64);
    for (backend, mode, workload, c) in specs {
        let name = format!(
            "{} {} {} c={c}",
            backend.as_str(),
            mode.as_str(),
            workload.as_str()
        );
        bar.set_message(name.clone());
        let row = run_row(opts, backend, mode, workload, c)
            .await
            .with_context(|| name)?;
        rows.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
    fill_ratios(&mut rows);
    Ok(Report {
        machine: machine_info(),
        rows,
        skipped,
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

/// `a / b` to three significant figures: a row far slower than its reference (an HTTP row
/// of a loaded machine against the bare store) still reads as a small positive ratio, never
/// as 0.
fn ratio(a: f64, b: f64) -> f64 {
    let x = a / b;
    if !x.is_finite() || x <= 0.0 {
        return x;
    }
    let scale = 10f64.powi(2 - x.log10().floor() as i32);
    (x * scale).round() / scale
}

/// A ratio for the table: two decimals, or three significant figures below 0.1.
fn ratio_cell(x: f64) -> String {
    if x != 0.0 && x.abs() < 0.1 {
        let places = (2 - x.abs().log10().floor() as i32).max(0) as usize;
        format!("{x:.places$}")
    } else {
        format!("{x:.2}")
    }
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
            .map(|(_, _, _, ops)| ratio(r.ops_per_s, *ops));
    }
    let claims: Vec<(Backend, Workload, usize, f64)> = rows
        .iter()
        .filter(|r| r.mode == Mode::Http && r.workload.claims_row().is_none())
        .map(|r| (r.backend, r.workload, r.concurrency, r.ops_per_s))
        .collect();
    for r in rows.iter_mut() {
        let Some(want) = r.workload.claims_row() else {
            continue;
        };
        r.ratio_to_claims = claims
            .iter()
            .find(|(b, w, c, _)| *b == r.backend && *w == want && *c == r.concurrency)
            .filter(|(_, _, _, ops)| *ops > 0.0)
            .map(|(_, _, _, ops)| ratio(r.ops_per_s, *ops));
    }
    let direct: Vec<(Mode, Workload, usize, f64)> = rows
        .iter()
        .filter(|r| r.backend == Backend::Postgres)
        .map(|r| (r.mode, r.workload, r.concurrency, r.ops_per_s))
        .collect();
    for r in rows
        .iter_mut()
        .filter(|r| r.backend == Backend::PostgresPooled)
    {
        r.ratio_to_direct = direct
            .iter()
            .find(|(m, w, c, _)| *m == r.mode && *w == r.workload && *c == r.concurrency)
            .filter(|(_, _, _, ops)| *ops > 0.0)
            .map(|(_, _, _, ops)| ratio(r.ops_per_s, *ops));
    }
    let redis_aof: Vec<(Workload, usize, f64)> = rows
        .iter()
        .filter(|r| r.mode == Mode::RedisAof)
        .map(|r| (r.workload, r.concurrency, r.ops_per_s))
        .collect();
    for r in rows.iter_mut().filter(|r| r.mode != Mode::RedisAof) {
        r.ratio_to_redis = redis_aof
            .iter()
            .find(|(w, c, _)| *w == r.workload && *c == r.concurrency)
            .filter(|(_, _, ops)| *ops > 0.0)
            .map(|(_, _, ops)| ratio(r.ops_per_s, *ops));
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
            Backend::Postgres | Backend::PostgresPooled => {
                let name = format!("idem_bench_{:016x}", rand::random::<u64>());
                bare::pg_admin(&opts.pg_url, &format!("CREATE DATABASE {name}")).await?;
                let via = match (backend, &opts.pooler_url) {
                    (Backend::PostgresPooled, Some(p)) => p,
                    (Backend::PostgresPooled, None) => {
                        anyhow::bail!("pooled rows need a pooler URL")
                    }
                    _ => &opts.pg_url,
                };
                let url = bare::pg_url_with_db(via, &name);
                Ok(Target {
                    backend,
                    url,
                    _dir: None,
                    pg_db: Some(name),
                    pg_admin: opts.pg_url.clone(),
                })
            }
            Backend::Redis => anyhow::bail!("redis is a reference row, not an idem ledger"),
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
    if mode.is_redis() {
        let (m, extra) = run_redis(opts, mode, workload, c).await?;
        return Ok(row_of(Backend::Redis, mode, workload, c, &m, Some(extra)));
    }
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
            .map(|(m, extra)| (m, Some(extra))),
        Mode::Direct => run_direct(workload, c, opts).await.map(|m| (m, None)),
        // Run above, without a ledger.
        Mode::RedisAof | Mode::RedisNoPersist => {
            Err(anyhow::anyhow!("a redis row has no idem ledger"))
        }
    };
    let tb = target.backend;
    target.drop_db().await;
    let (m, extra) = result?;
    Ok(row_of(tb, mode, workload, c, &m, extra))
}

fn row_of(
    backend: Backend,
    mode: Mode,
    workload: Workload,
    c: usize,
    m: &Measurement,
    extra: Option<HttpExtra>,
) -> Row {
    Row {
        backend,
        mode,
        workload,
        concurrency: c,
        ops_per_s: m.ops_per_s(),
        p50_ms: m.quantile_ms(0.50),
        p99_ms: m.quantile_ms(0.99),
        max_ms: m.max_ms(),
        ratio_to_bare: None,
        ratio_to_direct: None,
        ratio_to_claims: None,
        ratio_to_redis: None,
        errors: m.errors,
        server_peak_rss_mib: extra.as_ref().map(|e| e.rss_mib),
        server_cpu_us_per_op: extra.as_ref().and_then(|e| e.server_cpu_us_per_op),
        loadgen_cpu_us_per_op: extra.as_ref().and_then(|e| e.loadgen_cpu_us_per_op),
        server_threads_cpu_us_per_op: extra.and_then(|e| e.server_threads_cpu_us_per_op),
    }
}

/// One redis row: a fresh `redis-server` in the configuration of `mode`, the recipe's
/// clients, the server's CPU and peak RSS as for the HTTP rows.
async fn run_redis(
    opts: &BenchOpts,
    mode: Mode,
    workload: Workload,
    c: usize,
) -> anyhow::Result<(Measurement, HttpExtra)> {
    let server =
        redis_recipe::RedisProcess::start(&opts.redis_server, mode, opts.tmp_dir.as_ref()).await?;
    let stat = format!("/proc/{}/stat", server.pid);
    let result = async {
        let (srv0, gen0) = (cpu_time(&stat), cpu_time("/proc/self/stat"));
        let m = redis_recipe::run(&server, workload, c, opts.duration, opts.duplicate_keys).await?;
        let (srv1, gen1) = (cpu_time(&stat), cpu_time("/proc/self/stat"));
        let extra = HttpExtra {
            rss_mib: peak_rss_mib(server.pid),
            server_cpu_us_per_op: us_per_op(srv0, srv1, m.ops),
            loadgen_cpu_us_per_op: us_per_op(gen0, gen1, m.ops),
            server_threads_cpu_us_per_op: None,
        };
        anyhow::Ok((m, extra))
    }
    .await;
    server.stop().await;
    result
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
                cost: None,
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
        Workload::Effect
        | Workload::Effect256k
        | Workload::EffectTls
        | Workload::Intake
        | Workload::IntakeFanout3
        | Workload::IntakeDuplicate => {
            anyhow::bail!("effect and intake workloads run over HTTP only")
        }
        Workload::Duplicate => {
            let keys = prepopulate(opts.duplicate_keys, run_id, |k| {
                let ledger = ledger.clone();
                let ns = ns.clone();
                async move { ledger_pair(&ledger, &ns, &k).await }
            })
            .await?;
            load::drive_async(c, opts.duration, move |client, seq| {
                let ledger = ledger.clone();
                let ns = ns.clone();
                let k = load::pick(&keys, client, seq).clone();
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
    target: http::Target,
    pid: u32,
}

impl ServerProcess {
    pub async fn start(bin: &std::path::Path, db_url: &str) -> anyhow::Result<ServerProcess> {
        Self::start_with(bin, db_url, &[]).await
    }

    /// [`ServerProcess::start`] with more `idem serve` arguments (e.g. `--extra-ca FILE`).
    pub async fn start_with(
        bin: &std::path::Path,
        db_url: &str,
        extra: &[&std::ffi::OsStr],
    ) -> anyhow::Result<ServerProcess> {
        let port = free_port()?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        // The server logs at its default level (info, one line per operation, as in
        // production); its stderr goes nowhere.
        let mut child = tokio::process::Command::new(bin)
            .args(["serve", "--listen", &addr.to_string(), "--db", db_url])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("server exited at once")?;
        let base = format!("http://{addr}");
        let target = http::Target::new(addr)?;
        for _ in 0..200 {
            if let Ok(status) = http::get_status(&target, "/healthz").await {
                if status.is_success() {
                    return Ok(ServerProcess {
                        child,
                        base,
                        target,
                        pid,
                    });
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                anyhow::bail!("idem serve exited with {status}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("idem serve did not become healthy in 10 s")
    }

    /// CPU time the server has used so far (all its threads).
    pub fn cpu_time(&self) -> Option<Duration> {
        cpu_time(&format!("/proc/{}/stat", self.pid))
    }

    /// CPU time so far of the server's live threads, summed by thread name.
    fn threads_cpu_time(&self) -> Option<std::collections::BTreeMap<String, Duration>> {
        let mut by_name = std::collections::BTreeMap::new();
        for t in std::fs::read_dir(format!("/proc/{}/task", self.pid)).ok()? {
            let path = t.ok()?.path();
            let Some(cpu) = cpu_time(&path.join("stat").to_string_lossy()) else {
                continue;
            };
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            *by_name
                .entry(name.trim().to_owned())
                .or_insert(Duration::ZERO) += cpu;
        }
        Some(by_name)
    }

    /// Peak resident set size of the server so far (VmHWM), MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        peak_rss_mib(self.pid)
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Peak resident set size of process `pid` so far (VmHWM), MiB (0 when unknown).
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
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

pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// CPU time (user + system) of a process from its `/proc/<pid>/stat` (Linux; `None`
/// elsewhere). The kernel reports it in USER_HZ ticks, which are 1/100 s.
fn cpu_time(stat_path: &str) -> Option<Duration> {
    let s = std::fs::read_to_string(stat_path).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// CPU microseconds per operation between two readings.
fn us_per_op(before: Option<Duration>, after: Option<Duration>, ops: u64) -> Option<f64> {
    let (b, a) = (before?, after?);
    (ops > 0).then(|| ((a.saturating_sub(b)).as_secs_f64() * 1e6 / ops as f64).round())
}

/// What the HTTP row measured besides latency.
struct HttpExtra {
    rss_mib: f64,
    server_cpu_us_per_op: Option<f64>,
    loadgen_cpu_us_per_op: Option<f64>,
    server_threads_cpu_us_per_op: Option<std::collections::BTreeMap<String, f64>>,
}

/// First-time pairs over HTTP: each client claims and completes fresh keys.
struct HttpPairs {
    run_id: u64,
}

impl http::ClientOp for HttpPairs {
    fn run(
        &self,
        conn: &mut http::Conn,
        client: usize,
        seq: u64,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send {
        let key = key_for(self.run_id, client, seq);
        async move { http::pair(conn, &key).await }
    }
}

/// Duplicate claims over HTTP of already completed keys (claim paths built once).
struct HttpDuplicates {
    claims: Vec<hyper::Uri>,
}

impl http::ClientOp for HttpDuplicates {
    fn run(
        &self,
        conn: &mut http::Conn,
        client: usize,
        seq: u64,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send {
        let uri = load::pick(&self.claims, client, seq).clone();
        http::duplicate(conn, uri)
    }
}

/// Effects of fresh keys over HTTP, each a POST to the destination through idem.
struct HttpEffects {
    run_id: u64,
    body: bytes::Bytes,
}

impl http::ClientOp for HttpEffects {
    fn run(
        &self,
        conn: &mut http::Conn,
        client: usize,
        seq: u64,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send {
        let key = key_for(self.run_id, client, seq);
        let body = self.body.clone();
        async move { http::effect(conn, &key, body).await }
    }
}

/// The effect's request sent straight to the destination.
struct DirectPosts {
    uri: hyper::Uri,
    body: bytes::Bytes,
}

impl http::ClientOp for DirectPosts {
    fn run(
        &self,
        conn: &mut http::Conn,
        _client: usize,
        _seq: u64,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send {
        http::direct(conn, self.uri.clone(), self.body.clone())
    }
}

/// The intake rows' source: Stripe-signed events, forwarded to a loopback sink.
const INTAKE_SOURCE: &str = "bench-in";
/// The source's signing secret (Stripe keys its HMAC with the whole `whsec_…` text).
const INTAKE_SECRET: &str = "whsec_bench_intake_signing_secret_0123456789";

/// A Stripe-like event of 1 KiB with id `id`.
fn intake_body(id: &str) -> bytes::Bytes {
    const HEAD: &str = "{\"id\":\"";
    const MID: &str = "\",\"object\":\"event\",\"type\":\"charge.succeeded\",\"data\":{\"pad\":\"";
    const TAIL: &str = "\"}}";
    let fixed = HEAD.len() + id.len() + MID.len() + TAIL.len();
    let pad = 1024usize.saturating_sub(fixed);
    let mut s = String::with_capacity(fixed + pad);
    s.push_str(HEAD);
    s.push_str(id);
    s.push_str(MID);
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str(TAIL);
    bytes::Bytes::from(s)
}

/// Stripe's signature headers for `body`, signed now.
fn stripe_headers(body: &[u8]) -> anyhow::Result<Vec<(String, String)>> {
    let at_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    idem_intake::sign::sign(&idem_intake::sign::Delivery {
        provider: idem_intake::Provider::Stripe,
        secret: INTAKE_SECRET,
        body,
        at_ms,
        method: "POST",
        public_url: None,
        content_type: Some("application/json"),
        hmac: None,
        id: "",
    })
    .context("signing a Stripe event")
}

/// First-time events: each client posts fresh event ids.
struct IntakeEvents {
    run_id: u64,
    uri: hyper::Uri,
}

impl http::ClientOp for IntakeEvents {
    fn run(
        &self,
        conn: &mut http::Conn,
        client: usize,
        seq: u64,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send {
        let body = intake_body(&format!("evt_{:x}_{client}_{seq}", self.run_id));
        let uri = self.uri.clone();
        async move {
            let headers = stripe_headers(&body)?;
            http::intake(conn, uri, body, &headers, "accepted").await
        }
    }
}

/// Redeliveries of events already accepted (answered `duplicate`), re-signed each time as a
/// provider's retry is.
struct IntakeDuplicates {
    bodies: Vec<bytes::Bytes>,
    uri: hyper::Uri,
}

impl http::ClientOp for IntakeDuplicates {
    fn run(
        &self,
        conn: &mut http::Conn,
        client: usize,
        seq: u64,
    ) -> impl std::future::Future<Output = anyhow::Result<()>> + Send {
        let body = load::pick(&self.bodies, client, seq).clone();
        let uri = self.uri.clone();
        async move {
            let headers = stripe_headers(&body)?;
            http::intake(conn, uri, body, &headers, "duplicate").await
        }
    }
}

/// Creates the intake source on `server`, forwarding to `sink`: `forward` alone, or with
/// `fanout` two more destinations on the same sink (three deliveries per event).
async fn intake_source(
    server: &ServerProcess,
    sink: &dest::Destination,
    fanout: bool,
) -> anyhow::Result<()> {
    let url = format!("http://{}/webhook", sink.addr);
    let mut source = serde_json::json!({
        "provider": "stripe",
        "secrets": [INTAKE_SECRET],
        "forward": {"url": url},
    });
    if fanout {
        source["forwards"] = serde_json::json!({"crm": {"url": url}, "slack": {"url": url}});
    }
    http::put(
        &server.target,
        &format!("/v1/sources/{INTAKE_SOURCE}"),
        bytes::Bytes::from(serde_json::to_vec(&source)?),
    )
    .await
}

/// The destination's charge path.
const CHARGE_PATH: &str = "/v1/charges";

/// An effect row's destination: every request gets `response_bytes` of JSON (over TLS for
/// `effect_tls`).
async fn destination(workload: Workload) -> anyhow::Result<dest::Destination> {
    let n = workload
        .response_bytes()
        .context("not an effect workload")?;
    if workload == Workload::EffectTls {
        dest::Destination::start_tls(dest::json_of_size(n)).await
    } else {
        dest::Destination::start(dest::json_of_size(n)).await
    }
}

/// The URL an effect row sends to, and the egress entry that opens it: the TLS destination
/// by the name its certificate holds (`localhost`, resolved by idem to loopback), the plain
/// one by its address.
fn effect_url(d: &dest::Destination) -> (String, String) {
    match d.ca_file() {
        Some(_) => {
            let host = format!("localhost:{}", d.addr.port());
            (format!("https://{host}{CHARGE_PATH}"), host)
        }
        None => (
            format!("http://{}{CHARGE_PATH}", d.addr),
            d.addr.to_string(),
        ),
    }
}

/// Every effect answered `performed` must have reached the destination exactly once.
fn check_one_request_each(m: &Measurement, d: &dest::Destination) -> anyhow::Result<()> {
    if m.errors == 0 {
        anyhow::ensure!(
            d.requests() == m.ops,
            "{} effects performed, {} requests at the destination",
            m.ops,
            d.requests()
        );
    }
    Ok(())
}

async fn run_direct(workload: Workload, c: usize, opts: &BenchOpts) -> anyhow::Result<Measurement> {
    let d = destination(workload).await?;
    let target = match d.client_tls() {
        Some(tls) => http::Target::tls(d.addr, tls)?,
        None => http::Target::new(d.addr)?,
    };
    let body = bytes::Bytes::from_static(br#"{"amount":1000,"currency":"eur"}"#);
    let op = DirectPosts {
        uri: hyper::Uri::from_static(CHARGE_PATH),
        body,
    };
    let m = http::drive(c, opts.duration, &target, op).await?;
    check_one_request_each(&m, &d)?;
    Ok(m)
}

/// What one HTTP row's clients do (a destination or sink lives as long as the row).
enum HttpOp {
    Pairs(HttpPairs),
    Duplicates(HttpDuplicates),
    Effects(HttpEffects, dest::Destination),
    Intake(IntakeEvents, dest::Destination),
    IntakeDuplicates(IntakeDuplicates, dest::Destination),
}

async fn run_http(
    url: &str,
    workload: Workload,
    c: usize,
    opts: &BenchOpts,
) -> anyhow::Result<(Measurement, HttpExtra)> {
    // An effect row's destination first: a TLS one gives the server its CA.
    let effect_dest = match workload {
        Workload::Effect | Workload::Effect256k | Workload::EffectTls => {
            Some(destination(workload).await?)
        }
        _ => None,
    };
    let mut extra: Vec<&std::ffi::OsStr> = Vec::new();
    if let Some(ca) = effect_dest.as_ref().and_then(|d| d.ca_file()) {
        extra.push("--extra-ca".as_ref());
        extra.push(ca.as_os_str());
    }
    let server = ServerProcess::start_with(&opts.idem_bin, url, &extra).await?;
    let run_id: u64 = rand::random();
    let result = async {
        let op = match workload {
            Workload::FirstTimePair => HttpOp::Pairs(HttpPairs { run_id }),
            Workload::Duplicate => {
                let keys: Vec<String> = (0..opts.duplicate_keys.max(1))
                    .map(|i| format!("dup-{run_id:x}-{i}"))
                    .collect();
                // 16 at a time: fast with group commit, and independent of the concurrency.
                http::pairs(&server.target, 16, &keys).await?;
                let claims = keys
                    .iter()
                    .map(|k| http::key_uri(k, "claim"))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                HttpOp::Duplicates(HttpDuplicates { claims })
            }
            Workload::Effect | Workload::Effect256k | Workload::EffectTls => {
                let d = effect_dest.context("no destination")?;
                // The destination is on loopback: only an exact host:port entry opens it.
                let (url, entry) = effect_url(&d);
                let allow = serde_json::json!({"egress": {"allow": [entry]}});
                http::patch(
                    &server.target,
                    "/v1/namespaces/bench",
                    bytes::Bytes::from(serde_json::to_vec(&allow)?),
                )
                .await?;
                let body = http::effect_body(&url)?;
                HttpOp::Effects(HttpEffects { run_id, body }, d)
            }
            Workload::Intake | Workload::IntakeFanout3 | Workload::IntakeDuplicate => {
                let sink = dest::Destination::start(dest::json_of_size(24)).await?;
                intake_source(&server, &sink, workload == Workload::IntakeFanout3).await?;
                let uri = hyper::Uri::try_from(format!("/in/{INTAKE_SOURCE}"))?;
                if workload != Workload::IntakeDuplicate {
                    HttpOp::Intake(IntakeEvents { run_id, uri }, sink)
                } else {
                    let bodies: Vec<bytes::Bytes> = (0..opts.duplicate_keys.max(1))
                        .map(|i| intake_body(&format!("evt_dup_{run_id:x}_{i}")))
                        .collect();
                    let (mut conn, driver) = http::connect(&server.target).await?;
                    http::on_conn(driver, async {
                        for b in &bodies {
                            let headers = stripe_headers(b)?;
                            http::intake(&mut conn, uri.clone(), b.clone(), &headers, "accepted")
                                .await?;
                        }
                        anyhow::Ok(())
                    })
                    .await?;
                    HttpOp::IntakeDuplicates(IntakeDuplicates { bodies, uri }, sink)
                }
            }
        };
        let (srv0, gen0) = (server.cpu_time(), cpu_time("/proc/self/stat"));
        let threads0 = server.threads_cpu_time();
        let m = match op {
            HttpOp::Pairs(p) => http::drive(c, opts.duration, &server.target, p).await?,
            HttpOp::Duplicates(d) => http::drive(c, opts.duration, &server.target, d).await?,
            HttpOp::Effects(e, d) => {
                let m = http::drive(c, opts.duration, &server.target, e).await?;
                check_one_request_each(&m, &d)?;
                m
            }
            // The sink keeps receiving forwards during the row: the forwarder shares the
            // server's cores with the intake, as in production.
            HttpOp::Intake(op, _sink) => http::drive(c, opts.duration, &server.target, op).await?,
            HttpOp::IntakeDuplicates(op, _sink) => {
                http::drive(c, opts.duration, &server.target, op).await?
            }
        };
        let (srv1, gen1) = (server.cpu_time(), cpu_time("/proc/self/stat"));
        let threads = server
            .threads_cpu_time()
            .zip(threads0)
            .map(|(after, before)| {
                after
                    .into_iter()
                    .filter_map(|(name, a)| {
                        let b = before.get(&name).copied().unwrap_or(Duration::ZERO);
                        Some((name, us_per_op(Some(b), Some(a), m.ops)?))
                    })
                    .collect()
            });
        let extra = HttpExtra {
            rss_mib: server.peak_rss_mib(),
            server_cpu_us_per_op: us_per_op(srv0, srv1, m.ops),
            loadgen_cpu_us_per_op: us_per_op(gen0, gen1, m.ops),
            server_threads_cpu_us_per_op: threads,
        };
        anyhow::Ok((m, extra))
    }
    .await;
    server.stop().await;
    result
}

/// The side-by-side table.
pub fn render_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<9} {:<10} {:<16} {:>5} {:>12} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>10} {:>10}\n",
        "backend",
        "mode",
        "workload",
        "conc",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "x bare",
        "x claims",
        "x redis",
        "x direct",
        "errors",
        "rss MiB",
        "srv us/op",
        "gen us/op"
    ));
    for r in rows {
        out.push_str(&format!(
            "{:<9} {:<10} {:<16} {:>5} {:>12.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>10} {:>10}\n",
            r.backend.as_str(),
            r.mode.as_str(),
            r.workload.as_str(),
            r.concurrency,
            r.ops_per_s,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.ratio_to_bare.map_or("-".into(), ratio_cell),
            r.ratio_to_claims.map_or("-".into(), ratio_cell),
            r.ratio_to_redis.map_or("-".into(), ratio_cell),
            r.ratio_to_direct.map_or("-".into(), ratio_cell),
            r.errors,
            r.server_peak_rss_mib
                .map_or("-".into(), |x| format!("{x:.1}")),
            r.server_cpu_us_per_op
                .map_or("-".into(), |x| format!("{x:.0}")),
            r.loadgen_cpu_us_per_op
                .map_or("-".into(), |x| format!("{x:.0}")),
        ));
    }
    out
}

/// The `kill -9` fault run with the history checker ([`history::run_kill9`]) on a fresh
/// ledger of `backend`: a SQLite file in a temp dir, or a database created on the
/// PostgreSQL server of `pg_url` and dropped afterwards.
pub async fn run_kill9_on(
    backend: Backend,
    pg_url: &str,
    bin: PathBuf,
    rounds: u32,
    round_time: Duration,
    clients: usize,
) -> anyhow::Result<history::Kill9Report> {
    let ledger = FreshLedger::create(backend, pg_url, "kill9").await?;
    let opts = history::Kill9Opts {
        bin,
        db_url: ledger.url.clone(),
        rounds,
        round_time,
        clients,
    };
    let report = history::run_kill9(&opts).await;
    ledger.drop_db(pg_url).await;
    report
}

/// A ledger for one fault or backlog run: a SQLite file in a temp dir, or a database created
/// on the PostgreSQL server of `pg_url` (dropped by [`FreshLedger::drop_db`]).
struct FreshLedger {
    url: String,
    pg_db: Option<String>,
    _dir: tempfile::TempDir,
}

impl FreshLedger {
    async fn create(backend: Backend, pg_url: &str, what: &str) -> anyhow::Result<FreshLedger> {
        let dir = tempfile::tempdir()?;
        let (url, pg_db) = match backend {
            Backend::Sqlite => (
                format!(
                    "sqlite://{}",
                    dir.path().join(format!("{what}.db")).display()
                ),
                None,
            ),
            Backend::Postgres | Backend::PostgresPooled => {
                let name = format!("idem_{what}_{:016x}", rand::random::<u64>());
                bare::pg_admin(pg_url, &format!("CREATE DATABASE {name}")).await?;
                (bare::pg_url_with_db(pg_url, &name), Some(name))
            }
            Backend::Redis => anyhow::bail!("redis is a reference row, not an idem ledger"),
        };
        Ok(FreshLedger {
            url,
            pg_db,
            _dir: dir,
        })
    }

    async fn drop_db(self, pg_url: &str) {
        if let Some(name) = &self.pg_db {
            let _ = bare::pg_admin(
                pg_url,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )
            .await;
        }
    }
}

/// The backlog run ([`backlog`]) on a fresh ledger of `backend`.
pub async fn run_backlog_on(
    backend: Backend,
    pg_url: &str,
    bin: &std::path::Path,
    events: u64,
    clients: usize,
    destinations: u32,
) -> anyhow::Result<BacklogReport> {
    let ledger = FreshLedger::create(backend, pg_url, "backlog").await?;
    let report = backlog::run(backend, bin, &ledger.url, events, clients, destinations).await;
    ledger.drop_db(pg_url).await;
    report
}

/// [`history::run_soak`] on a fresh SQLite ledger in a temp dir.
pub async fn run_soak_sqlite(
    bin: &std::path::Path,
    duration: Duration,
    window: Duration,
    clients: usize,
    pause: Duration,
) -> anyhow::Result<history::SoakReport> {
    let dir = tempfile::tempdir()?;
    let db = format!("sqlite://{}", dir.path().join("soak.db").display());
    history::run_soak(bin, &db, duration, window, clients, pause).await
}

#[cfg(test)]
mod tests {
    use super::{ratio, ratio_cell};

    #[test]
    fn a_ratio_keeps_three_significant_figures_and_a_slow_row_never_reads_zero() {
        assert_eq!(ratio(1.0, 1.0), 1.0);
        assert_eq!(ratio(2_345.0, 1_000.0), 2.35);
        assert_eq!(ratio(876.0, 1_000.0), 0.876);
        // The CI flake: 7 ops/s HTTP claims against a bare store of ~3,000 ops/s.
        let slow = ratio(7.0, 3_125.0);
        assert!(slow > 0.0, "{slow}");
        assert_eq!(slow, 0.00224);
        assert_eq!(ratio_cell(slow), "0.00224");
        assert_eq!(ratio_cell(0.876), "0.88");
        assert_eq!(ratio_cell(12.3), "12.30");
        assert_eq!(ratio_cell(0.0531), "0.0531");
    }
}
