//! The report of a run: its rows, the ratios between them (each row to the row it stands in
//! for: bare, claims, effect, direct, redis), the machine it ran on, and the side-by-side
//! table.
//!
//! It only reads what the rows measured; it must never measure, start anything or change a
//! figure beyond the ratios it derives.

use serde::Serialize;

use crate::{Backend, Mode, Workload};

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
    /// First-time action rows: ops_per_s divided by that of the HTTP effect row
    /// ([`Workload::effect_row`]; same backend and concurrency).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_effect: Option<f64>,
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

/// `a / b` to three significant figures: a row far slower than its reference (an HTTP row
/// of a loaded machine against the bare store) still reads as a small positive ratio, never
/// as 0.
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    let x = a / b;
    if !x.is_finite() || x <= 0.0 {
        return x;
    }
    let scale = 10f64.powi(2 - x.log10().floor() as i32);
    (x * scale).round() / scale
}

/// A ratio for the table: two decimals, or three significant figures below 0.1.
pub(crate) fn ratio_cell(x: f64) -> String {
    if x != 0.0 && x.abs() < 0.1 {
        let places = (2 - x.abs().log10().floor() as i32).max(0) as usize;
        format!("{x:.places$}")
    } else {
        format!("{x:.2}")
    }
}

/// What a ratio compares: a row's coordinates and its rate.
#[derive(Clone, Copy)]
struct Measured {
    backend: Backend,
    mode: Mode,
    workload: Workload,
    concurrency: usize,
    ops_per_s: f64,
}

/// Fills each row's ratios to the rows it stands in for.
pub(crate) fn fill_ratios(rows: &mut [Row]) {
    let all: Vec<Measured> = rows
        .iter()
        .map(|r| Measured {
            backend: r.backend,
            mode: r.mode,
            workload: r.workload,
            concurrency: r.concurrency,
            ops_per_s: r.ops_per_s,
        })
        .collect();
    // `ops_per_s` over that of the first row `is_reference` picks, when it measured anything.
    let to = |ops_per_s: f64, is_reference: &dyn Fn(&Measured) -> bool| {
        all.iter()
            .find(|m| is_reference(m))
            .filter(|m| m.ops_per_s > 0.0)
            .map(|m| ratio(ops_per_s, m.ops_per_s))
    };
    for r in rows.iter_mut() {
        let (b, w, c) = (r.backend, r.workload, r.concurrency);
        r.ratio_to_bare = to(r.ops_per_s, &|m| {
            m.mode == Mode::Bare && m.backend == b && m.workload == w && m.concurrency == c
        });
        // Effect, intake and action rows: the HTTP claim row they stand in for.
        if let Some(want) = w.claims_row() {
            r.ratio_to_claims = to(r.ops_per_s, &|m| {
                m.mode == Mode::Http
                    && m.workload.claims_row().is_none()
                    && m.backend == b
                    && m.workload == want
                    && m.concurrency == c
            });
        }
        // First-time HTTP action rows: the HTTP effect row.
        if let (Mode::Http, Some(want)) = (r.mode, w.effect_row()) {
            r.ratio_to_effect = to(r.ops_per_s, &|m| {
                m.mode == Mode::Http
                    && m.workload.response_bytes().is_some()
                    && m.backend == b
                    && m.workload == want
                    && m.concurrency == c
            });
        }
        // Pooled rows: the direct PostgreSQL row of the same mode.
        if b == Backend::PostgresPooled {
            let mode = r.mode;
            r.ratio_to_direct = to(r.ops_per_s, &|m| {
                m.backend == Backend::Postgres
                    && m.mode == mode
                    && m.workload == w
                    && m.concurrency == c
            });
        }
        // Every row but the AOF row itself: the Redis AOF row.
        if r.mode != Mode::RedisAof {
            r.ratio_to_redis = to(r.ops_per_s, &|m| {
                m.mode == Mode::RedisAof && m.workload == w && m.concurrency == c
            });
        }
    }
}

/// The side-by-side table.
pub fn render_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<9} {:<10} {:<16} {:>5} {:>12} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>10} {:>10}\n",
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
        "x effect",
        "x redis",
        "x direct",
        "errors",
        "rss MiB",
        "srv us/op",
        "gen us/op"
    ));
    for r in rows {
        out.push_str(&format!(
            "{:<9} {:<10} {:<16} {:>5} {:>12.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>10} {:>10}\n",
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
            r.ratio_to_effect.map_or("-".into(), ratio_cell),
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
