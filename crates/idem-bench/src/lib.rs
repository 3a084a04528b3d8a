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
//! forwards to a loopback sink meanwhile; `http` only), `action` / `action_duplicate` (an
//! agent's MCP `tools/call` of an action, stateless revision, on `POST /mcp/{ns}`: a fresh
//! identity each call, delivered by HTTP to the effect rows' loopback destination, or a
//! repeated identity whose call already completed, replayed; `http` only). Every figure is
//! printed with its ratio to the bare row of the same backend, workload and concurrency;
//! effect, intake and action rows also with their ratio to the HTTP claim row they stand in
//! for (`x claims`: the claim+complete pair, or duplicate claims for duplicate events and
//! duplicate calls); first-time action rows also with their ratio to the HTTP effect row
//! (`x effect`: the same delivery through `POST …/effect`); claim rows, when the redis
//! rows ran, with their ratio to the Redis AOF row of the same workload and concurrency
//! (`x redis`).

mod backlog;
mod bare;
mod dest;
pub mod history;
mod http;
mod http_rows;
mod load;
pub mod outbound;
mod redis_recipe;
mod report;
mod scale;
mod server;
mod signed;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use idem::{ClaimOutcome, ClaimRequest, CompleteRequest, Key, Ledger, Namespace};
use serde::Serialize;

use http_rows::{run_direct, run_http};
use report::fill_ratios;
use server::{cpu_time, peak_rss_mib, us_per_op};

pub use backlog::{render as render_backlog, BacklogReport};
pub use load::Measurement;
pub use report::{machine_info, render_table, Report, Row};
pub use scale::{run_scale, JanitorRow, ScaleOpts, ScaleReport, ScaleRow};
pub use server::{free_port, ServerProcess};

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
    /// An MCP `tools/call` of an action with a fresh identity (delivered by HTTP).
    Action,
    /// An MCP `tools/call` of an action whose identity was already delivered (replayed).
    ActionDuplicate,
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
            Workload::Action => "action",
            Workload::ActionDuplicate => "action_duplicate",
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
            | Workload::IntakeFanout3
            | Workload::Action => Some(Workload::FirstTimePair),
            Workload::IntakeDuplicate | Workload::ActionDuplicate => Some(Workload::Duplicate),
            Workload::FirstTimePair | Workload::Duplicate => None,
        }
    }

    /// The HTTP effect workload a row is compared with (`ratio_to_effect`): a first-time
    /// action call delivers what one `POST …/effect` delivers.
    pub fn effect_row(self) -> Option<Workload> {
        (self == Workload::Action).then_some(Workload::Effect)
    }

    /// The destination's answer size for effect workloads.
    pub fn response_bytes(self) -> Option<usize> {
        match self {
            Workload::Effect
            | Workload::EffectTls
            | Workload::Action
            | Workload::ActionDuplicate => Some(64),
            Workload::Effect256k => Some(256 * 1024),
            Workload::FirstTimePair
            | Workload::Duplicate
            | Workload::Intake
            | Workload::IntakeFanout3
            | Workload::IntakeDuplicate => None,
        }
    }

    /// The claim workload this is, if any: the library, bare and Redis rows run only those.
    pub(crate) fn claims(self) -> Option<Claims> {
        match self {
            Workload::FirstTimePair => Some(Claims::FirstTimePair),
            Workload::Duplicate => Some(Claims::Duplicate),
            Workload::Effect
            | Workload::Effect256k
            | Workload::EffectTls
            | Workload::Intake
            | Workload::IntakeFanout3
            | Workload::IntakeDuplicate
            | Workload::Action
            | Workload::ActionDuplicate => None,
        }
    }

    /// Whether a row of this workload exists in `mode`: effects run through idem over HTTP
    /// and straight to the destination, intake and action calls only over HTTP, the ledger
    /// workloads in every mode but `direct` (the Redis recipe's included).
    pub fn runs_in(self, mode: Mode) -> bool {
        match self {
            Workload::Effect | Workload::Effect256k | Workload::EffectTls => {
                matches!(mode, Mode::Http | Mode::Direct)
            }
            Workload::Intake
            | Workload::IntakeFanout3
            | Workload::IntakeDuplicate
            | Workload::Action
            | Workload::ActionDuplicate => mode == Mode::Http,
            Workload::FirstTimePair | Workload::Duplicate => mode != Mode::Direct,
        }
    }
}

/// The two claim workloads (see [`Workload::claims`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claims {
    FirstTimePair,
    Duplicate,
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
        ratio_to_effect: None,
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
    let done = CompleteRequest {
        token: c.token.context("acquired without token")?.secret(),
        result: Some(serde_json::json!({"ok": true})),
        external_ref: None,
        cost: None,
    };
    ledger.complete(ns, &key, done).await?;
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
    match workload.claims() {
        Some(Claims::FirstTimePair) => {
            load::drive_async(c, opts.duration, move |client, seq| {
                let ledger = ledger.clone();
                let ns = ns.clone();
                async move { ledger_pair(&ledger, &ns, &key_for(run_id, client, seq)).await }
            })
            .await
        }
        None => anyhow::bail!("effect, intake and action workloads run over HTTP only"),
        Some(Claims::Duplicate) => {
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

/// What the HTTP row measured besides latency.
struct HttpExtra {
    rss_mib: f64,
    server_cpu_us_per_op: Option<f64>,
    loadgen_cpu_us_per_op: Option<f64>,
    server_threads_cpu_us_per_op: Option<std::collections::BTreeMap<String, f64>>,
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
mod tests;
