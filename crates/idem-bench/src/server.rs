//! An `idem serve` child process on a free loopback port for the HTTP rows and the fault
//! runs, and the `/proc` readings taken of it (CPU time, per-thread CPU time, peak RSS).
//!
//! It starts only the binary it is given, with the database it is given, and kills it when
//! stopped or dropped; it must never reuse a port it did not just find free.

use std::time::Duration;

use anyhow::Context;

use crate::http;

/// An `idem serve` child process on a free loopback port.
pub struct ServerProcess {
    child: tokio::process::Child,
    pub base: String,
    pub(crate) target: http::Target,
    pub(crate) pid: u32,
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
    pub(crate) fn threads_cpu_time(&self) -> Option<std::collections::BTreeMap<String, Duration>> {
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
pub(crate) fn peak_rss_mib(pid: u32) -> f64 {
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
pub(crate) fn cpu_time(stat_path: &str) -> Option<Duration> {
    let s = std::fs::read_to_string(stat_path).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// CPU microseconds per operation between two readings.
pub(crate) fn us_per_op(
    before: Option<Duration>,
    after: Option<Duration>,
    ops: u64,
) -> Option<f64> {
    let (b, a) = (before?, after?);
    (ops > 0).then(|| ((a.saturating_sub(b)).as_secs_f64() * 1e6 / ops as f64).round())
}
