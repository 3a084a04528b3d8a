//! The fault runs built on the history checker: `kill -9` of the server under load (rounds
//! of load, kill, restart, then the check), a fault injected by a caller between load and
//! check, and the soak run with its per-window figures (latency, janitor lag, memory, open
//! files).
//!
//! They start and kill only the `idem serve` children they spawned themselves, on the address
//! they were given; the verdict is always the checker's, never decided here.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use serde_json::{json, Value};

use super::{check, prepare_namespace, Conn, Entry, Load, Tally, Verdict};

/// Options of the `kill -9` fault run.
#[derive(Debug, Clone)]
pub struct Kill9Opts {
    /// The `idem` binary to serve with.
    pub bin: PathBuf,
    /// The ledger: `sqlite://…` or `postgres://…` (kept across rounds).
    pub db_url: String,
    pub rounds: u32,
    /// Load time before each kill.
    pub round_time: Duration,
    pub clients: usize,
}

/// The figures of a `kill -9` run.
#[derive(Debug, Serialize)]
pub struct Kill9Report {
    pub rounds: u32,
    pub clients: usize,
    /// From the restart to the first healthy answer, per round: slowest and median.
    pub restart_ms_max: u64,
    pub restart_ms_median: u64,
    pub verdict: Verdict,
}

/// An `idem serve` child on a fixed address.
struct Child(tokio::process::Child);

async fn spawn_server(bin: &std::path::Path, addr: &str, db: &str) -> anyhow::Result<Child> {
    let child = tokio::process::Command::new(bin)
        .args([
            "serve",
            "--listen",
            addr,
            "--db",
            db,
            "--janitor-interval",
            "200ms",
        ])
        .env("IDEM_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut child = Child(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = Conn {
        addr: addr.to_owned(),
        s: None,
    };
    loop {
        if let Some((200, _)) = c.send("GET", "/healthz", None).await {
            return Ok(child);
        }
        if let Ok(Some(st)) = child.0.try_wait() {
            anyhow::bail!("idem serve exited with {st}");
        }
        anyhow::ensure!(Instant::now() < deadline, "idem serve not healthy in 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `rounds` times: load for `round_time`, `kill -9` the server, start it again on the same
/// ledger and address; the load runs throughout. Then the history is checked.
pub async fn run_kill9(opts: &Kill9Opts) -> anyhow::Result<Kill9Report> {
    let port = crate::free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let ns = format!("hist-{:08x}", rand::random::<u32>());
    let mut child = spawn_server(&opts.bin, &addr, &opts.db_url).await?;
    prepare_namespace(&addr, &ns).await?;
    let load = Load::start(&addr, &ns, opts.clients);
    let mut restarts = Vec::new();
    for _ in 0..opts.rounds {
        tokio::time::sleep(opts.round_time).await;
        // SIGKILL: no shutdown, no flush, as a crash.
        child.0.start_kill().context("kill -9 the server")?;
        let _ = child.0.wait().await;
        let t = Instant::now();
        child = spawn_server(&opts.bin, &addr, &opts.db_url).await?;
        restarts.push(t.elapsed().as_millis() as u64);
    }
    tokio::time::sleep(opts.round_time).await;
    let history = load.finish().await?;
    let verdict = check(&addr, &history).await?;
    drop(child);
    restarts.sort_unstable();
    Ok(Kill9Report {
        rounds: opts.rounds,
        clients: opts.clients,
        restart_ms_max: restarts.last().copied().unwrap_or(0),
        restart_ms_median: restarts.get(restarts.len() / 2).copied().unwrap_or(0),
        verdict,
    })
}

/// Options of the database fault run: an `idem serve` on a database the caller runs, and a
/// command that breaks it (and mends it: restarts it, or promotes a standby) under load.
#[derive(Debug, Clone)]
pub struct FaultOpts {
    /// The `idem` binary to serve with.
    pub bin: PathBuf,
    /// The ledger URL, used as given (e.g. a multi-host URL with
    /// `target_session_attrs=read-write`, or a pooler's URL).
    pub db_url: String,
    /// Run with `sh -c` after `round_time` of load; the load runs on while it runs.
    pub fault_cmd: String,
    /// Load time before the fault, and again after the command finished.
    pub round_time: Duration,
    pub clients: usize,
}

/// The figures of a database fault run.
#[derive(Debug, Serialize)]
pub struct FaultReport {
    pub clients: usize,
    /// How long the fault command ran.
    pub fault_cmd_ms: u64,
    /// Whether any client saw the fault (a 503 or no answer).
    pub outage_seen: bool,
    /// From the start of the fault command to the last answer that was a 503 or none: the
    /// outage as the clients saw it (0 when none saw it).
    pub recovery_ms: u64,
    /// 503 answers with the code `store_unavailable`.
    pub store_unavailable: u64,
    /// 5xx answers that were not 503 `store_unavailable` (a 500 means a database error was
    /// mistaken for a bug): must be 0.
    pub other_5xx: u64,
    pub verdict: Verdict,
}

impl FaultReport {
    pub fn ok(&self) -> bool {
        self.verdict.ok() && self.other_5xx == 0
    }
}

/// Load for `round_time`, then the fault command while the load goes on, then `round_time`
/// more; the same server process throughout (it must find the database again by itself).
/// Then the history is checked through that server.
pub async fn run_fault(opts: &FaultOpts) -> anyhow::Result<FaultReport> {
    let port = crate::free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let ns = format!("hist-{:08x}", rand::random::<u32>());
    let child = spawn_server(&opts.bin, &addr, &opts.db_url).await?;
    prepare_namespace(&addr, &ns).await?;
    let load = Load::start(&addr, &ns, opts.clients);
    tokio::time::sleep(opts.round_time).await;
    let bad = |t: &Tally| t.unavailable() + t.unknown.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let mut cmd = tokio::process::Command::new("sh")
        .args(["-c", &opts.fault_cmd])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the fault command")?;
    let mut prev_bad = bad(load.tally());
    let mut last_bad: Option<Instant> = None;
    let mut done: Option<Duration> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let b = bad(load.tally());
        if b != prev_bad {
            prev_bad = b;
            last_bad = Some(Instant::now());
        }
        if done.is_none() {
            if let Some(st) = cmd.try_wait()? {
                anyhow::ensure!(st.success(), "the fault command failed: {st}");
                done = Some(t0.elapsed());
            }
        }
        // Served again: the command is done and a second has passed without a failed answer.
        let quiet = last_bad.map_or(t0.elapsed(), |t| t.elapsed());
        if done.is_some() && quiet > Duration::from_secs(1) {
            break;
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(180),
            "no recovery within 180 s of the fault"
        );
    }
    tokio::time::sleep(opts.round_time).await;
    let history = load.finish().await?;
    let verdict = check(&addr, &history).await?;
    drop(child);
    let is_unavailable =
        |e: &&Entry| e.status == Some(503) && e.code.as_deref() == Some("store_unavailable");
    let store_unavailable = history.entries.iter().filter(is_unavailable).count() as u64;
    let other_5xx = history
        .entries
        .iter()
        .filter(|e| e.status.is_some_and(|s| s >= 500) && !is_unavailable(e))
        .count() as u64;
    Ok(FaultReport {
        clients: opts.clients,
        fault_cmd_ms: done.unwrap_or_default().as_millis() as u64,
        outage_seen: last_bad.is_some(),
        recovery_ms: last_bad.map_or(0, |t| t.duration_since(t0).as_millis() as u64),
        store_unavailable,
        other_5xx,
        verdict,
    })
}

/// One window of a soak.
#[derive(Debug, Clone, Serialize)]
pub struct SoakWindow {
    /// Seconds since the start at the end of the window.
    pub at_s: u64,
    pub rss_mib: f64,
    pub open_files: u64,
    /// The probe's claim + complete pairs in the window, and their p99.
    pub pairs: u64,
    pub p99_ms: f64,
    /// Janitor lag: from the expiry of a lease claimed at the window's start (1 s,
    /// `lease_expiry: review`) to the janitor's `moved_to_review` of it; `None` when the
    /// janitor had not moved it by the window's end.
    pub janitor_lag_ms: Option<i64>,
}

/// The lease of a janitor-lag probe: it expires within any window of 2 s or more.
const LAG_LEASE_MS: i64 = 1000;

/// Milliseconds from `lease_expires_at` (of the claim's answer) to the `at` of the
/// `moved_to_review` event in a `GET` record answer.
fn janitor_lag_ms(lease_expires_at: &Value, answer: &Value) -> Option<i64> {
    let time = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str()?)
            .ok()
            .map(|t| t.timestamp_millis())
    };
    let moved = answer["events"]
        .as_array()?
        .iter()
        .find(|e| e["type"] == "moved_to_review")?;
    Some(time(&moved["at"])? - time(lease_expires_at)?)
}

/// The figures of a soak.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub duration_s: u64,
    pub clients: usize,
    pub pause_ms: u64,
    pub windows: Vec<SoakWindow>,
    pub verdict: Verdict,
}

/// The resident memory of process `pid` now (VmRSS), in MiB with one decimal.
pub fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| (kib / 1024.0 * 10.0).round() / 10.0)
}

fn open_files(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// Serves a fresh ledger at `db_url` for `duration` under the paced history load of
/// `clients` workers, plus one probe client doing claim + complete pairs; every `window`
/// it samples the server's RSS, open files and the probe's p99; then checks the history.
pub async fn run_soak(
    bin: &std::path::Path,
    db_url: &str,
    duration: Duration,
    window: Duration,
    clients: usize,
    pause: Duration,
) -> anyhow::Result<SoakReport> {
    let port = crate::free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let ns = format!("soak-{:08x}", rand::random::<u32>());
    let child = spawn_server(bin, &addr, db_url).await?;
    let pid = child.0.id().context("server pid")?;
    prepare_namespace(&addr, &ns).await?;
    let load = Load::start_paced(&addr, &ns, clients, pause);
    let mut probe = Conn {
        addr: addr.clone(),
        s: None,
    };
    let start = Instant::now();
    let mut windows = Vec::new();
    let mut n = 0u64;
    let lag_ns = format!("{ns}-lag");
    while start.elapsed() < duration {
        let end = Instant::now() + window;
        let lag_key = format!("/v1/namespaces/{lag_ns}/keys/w{}", windows.len());
        let lag_claim = json!({"lease_ms": LAG_LEASE_MS, "lease_expiry": "review"}).to_string();
        let Some((201, claimed)) = probe
            .send("POST", &format!("{lag_key}/claim"), Some(&lag_claim))
            .await
        else {
            anyhow::bail!("soak probe: janitor-lag claim not acquired");
        };
        let mut lat = Vec::new();
        while Instant::now() < end {
            n += 1;
            let key = format!("/v1/namespaces/{ns}/keys/probe-{n}");
            let t = Instant::now();
            let Some((201, v)) = probe
                .send("POST", &format!("{key}/claim"), Some("{}"))
                .await
            else {
                anyhow::bail!("soak probe: claim {n} not acquired");
            };
            let token = v["token"].as_str().unwrap_or("").to_owned();
            let body = json!({"token": token, "result": {"n": n}}).to_string();
            let Some((200, _)) = probe
                .send("POST", &format!("{key}/complete"), Some(&body))
                .await
            else {
                anyhow::bail!("soak probe: complete {n} refused");
            };
            lat.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let janitor_lag_ms = match probe.send("GET", &lag_key, None).await {
            Some((200, got)) => janitor_lag_ms(&claimed["record"]["lease_expires_at"], &got),
            _ => None,
        };
        lat.sort_unstable();
        let p99 = lat
            .get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default();
        windows.push(SoakWindow {
            at_s: start.elapsed().as_secs(),
            rss_mib: rss_mib(pid),
            open_files: open_files(pid),
            pairs: lat.len() as u64,
            p99_ms: (p99.as_secs_f64() * 1e5).round() / 100.0,
            janitor_lag_ms,
        });
    }
    let history = load.finish().await?;
    let verdict = check(&addr, &history).await?;
    drop(child);
    Ok(SoakReport {
        duration_s: duration.as_secs(),
        clients,
        pause_ms: pause.as_millis() as u64,
        windows,
        verdict,
    })
}
