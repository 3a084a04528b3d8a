//! `idem bench`: argument handling around the `idem-bench` crate.

use std::time::Duration;

use idem_bench::{Backend, BenchOpts, Mode, ScaleOpts, Workload};

use crate::args::{BenchBackend, BenchCmd};
use crate::exit::{self, CliError};

fn backends(b: BenchBackend) -> Vec<Backend> {
    match b {
        BenchBackend::Sqlite => vec![Backend::Sqlite],
        BenchBackend::Postgres => vec![Backend::Postgres],
        BenchBackend::All => vec![Backend::Sqlite, Backend::Postgres],
    }
}

fn duration(s: &str) -> Result<Duration, CliError> {
    humantime::parse_duration(s).map_err(|e| CliError::input(format!("--duration {s:?}: {e}")))
}

fn parse_modes(v: &[String]) -> Result<Vec<Mode>, CliError> {
    let mut modes = Vec::new();
    for m in v {
        match m.trim() {
            "bare" => modes.push(Mode::Bare),
            "library" => modes.push(Mode::Library),
            "http" => modes.push(Mode::Http),
            "direct" => modes.push(Mode::Direct),
            // Both configurations: the ratio that matters is against the durable one, the
            // other says what the fsync costs Redis itself.
            "redis" => modes.extend([Mode::RedisAof, Mode::RedisNoPersist]),
            other => {
                return Err(CliError::input(format!(
                    "unknown mode {other:?} (bare, library, http, direct, redis)"
                )))
            }
        }
    }
    Ok(modes)
}

fn parse_workloads(v: &[String]) -> Result<Vec<Workload>, CliError> {
    v.iter()
        .map(|w| match w.trim() {
            "first_time_pair" => Ok(Workload::FirstTimePair),
            "duplicate" => Ok(Workload::Duplicate),
            "effect" => Ok(Workload::Effect),
            "effect_256k" => Ok(Workload::Effect256k),
            "effect_tls" => Ok(Workload::EffectTls),
            "intake" => Ok(Workload::Intake),
            "intake_fanout3" => Ok(Workload::IntakeFanout3),
            "intake_duplicate" => Ok(Workload::IntakeDuplicate),
            other => Err(CliError::input(format!(
                "unknown workload {other:?} (first_time_pair, duplicate, effect, effect_256k, \
                 effect_tls, intake, intake_fanout3, intake_duplicate)"
            ))),
        })
        .collect()
}

pub async fn run(c: BenchCmd) -> Result<u8, CliError> {
    let d = duration(&c.duration)?;
    if c.concurrency.iter().any(|&n| n == 0 || n > 4096) {
        return Err(CliError::input("--concurrency values must be 1..=4096"));
    }
    let json = if let Some(soak) = &c.soak {
        let total = humantime::parse_duration(soak)
            .map_err(|e| CliError::input(format!("--soak {soak:?}: {e}")))?;
        let window = humantime::parse_duration(&c.soak_window)
            .map_err(|e| CliError::input(format!("--soak-window {:?}: {e}", c.soak_window)))?;
        let clients = c.concurrency.iter().copied().max().unwrap_or(8);
        let bin = std::env::current_exe().map_err(anyhow::Error::from)?;
        let r = idem_bench::run_soak_sqlite(&bin, total, window, clients, Duration::from_millis(5))
            .await?;
        println!(
            "{:>6} {:>9} {:>10} {:>7} {:>9} {:>15}",
            "at s", "RSS MiB", "open files", "pairs", "p99 ms", "janitor lag ms"
        );
        for w in &r.windows {
            println!(
                "{:>6} {:>9.1} {:>10} {:>7} {:>9.2} {:>15}",
                w.at_s,
                w.rss_mib,
                w.open_files,
                w.pairs,
                w.p99_ms,
                w.janitor_lag_ms.map_or("-".into(), |l| l.to_string())
            );
        }
        let v = &r.verdict;
        println!(
            "soak {}s, {} workers: {} requests, {} acknowledged; lost {}, double acquisitions \
             {}, bad states {}, ambiguous not in review {}",
            r.duration_s,
            r.clients,
            v.requests,
            v.acknowledged,
            v.lost,
            v.double_acquired,
            v.bad_state,
            v.ambiguous_not_in_review
        );
        let json = serde_json::to_string_pretty(&r).map_err(anyhow::Error::from)?;
        if !v.ok() {
            return Err(CliError::from(anyhow::anyhow!(
                "the history check found violations"
            )));
        }
        json
    } else if let Some(events) = c.backlog {
        if events == 0 {
            return Err(CliError::input("--backlog must be at least 1"));
        }
        let clients = c.concurrency.iter().copied().max().unwrap_or(16);
        let bin = std::env::current_exe().map_err(anyhow::Error::from)?;
        if c.destinations.iter().any(|&d| d == 0 || d > 16) {
            return Err(CliError::input(
                "--destinations: each must be 1 to 16 (a source's most)",
            ));
        }
        let mut rows = Vec::new();
        for backend in backends(c.backend) {
            for &d in &c.destinations {
                let r =
                    idem_bench::run_backlog_on(backend, &c.db, &bin, events, clients, d).await?;
                rows.push(r);
            }
        }
        print!("{}", idem_bench::render_backlog(&rows));
        let json = serde_json::to_string_pretty(&rows).map_err(anyhow::Error::from)?;
        if let Some(bad) = rows.iter().find(|r| r.lost > 0 || r.doubled > 0) {
            if let Some(path) = &c.json {
                std::fs::write(path, &json)?;
            }
            return Err(CliError::from(anyhow::anyhow!(
                "backlog run on {}: {} events lost, {} delivered twice",
                bad.backend.as_str(),
                bad.lost,
                bad.doubled
            )));
        }
        json
    } else if let Some(cmd) = &c.fault_cmd {
        let round_time = humantime::parse_duration(&c.round_time)
            .map_err(|e| CliError::input(format!("--round-time {:?}: {e}", c.round_time)))?;
        let opts = idem_bench::history::FaultOpts {
            bin: std::env::current_exe().map_err(anyhow::Error::from)?,
            db_url: c.db.clone(),
            fault_cmd: cmd.clone(),
            round_time,
            clients: c.concurrency.iter().copied().max().unwrap_or(64),
        };
        let r = idem_bench::history::run_fault(&opts).await?;
        let v = &r.verdict;
        println!(
            "fault run: {} clients; {} requests, {} acknowledged, {} without answer, {} answered \
             503 store_unavailable, {} other 5xx; {} keys checked: lost {}, double acquisitions \
             {}, bad states {}, ambiguous not in review {}; fault command {} ms, outage seen by \
             clients {} ms",
            r.clients,
            v.requests,
            v.acknowledged,
            v.unknown,
            r.store_unavailable,
            r.other_5xx,
            v.keys_checked,
            v.lost,
            v.double_acquired,
            v.bad_state,
            v.ambiguous_not_in_review,
            r.fault_cmd_ms,
            r.recovery_ms
        );
        for line in &v.violations {
            println!("  violation: {line}");
        }
        let json = serde_json::to_string_pretty(&r).map_err(anyhow::Error::from)?;
        if !r.ok() {
            if let Some(path) = &c.json {
                std::fs::write(path, &json)?;
            }
            return Err(CliError::from(anyhow::anyhow!(
                "the fault run found violations"
            )));
        }
        json
    } else if c.kill9_rounds > 0 {
        let backend = match c.backend {
            BenchBackend::Sqlite => Backend::Sqlite,
            BenchBackend::Postgres => Backend::Postgres,
            BenchBackend::All => {
                return Err(CliError::input(
                    "--kill9-rounds needs one backend: --backend sqlite or postgres",
                ))
            }
        };
        let round_time = humantime::parse_duration(&c.round_time)
            .map_err(|e| CliError::input(format!("--round-time {:?}: {e}", c.round_time)))?;
        let clients = c.concurrency.iter().copied().max().unwrap_or(64);
        let bin = std::env::current_exe().map_err(anyhow::Error::from)?;
        let r = idem_bench::run_kill9_on(backend, &c.db, bin, c.kill9_rounds, round_time, clients)
            .await?;
        let v = &r.verdict;
        println!(
            "kill -9 on {}: {} rounds, {} clients; {} requests, {} acknowledged, {} without \
             answer; {} keys checked: lost {}, double acquisitions {}, bad states {}, \
             ambiguous not in review {}; restart to healthy median {} ms, max {} ms",
            backend.as_str(),
            r.rounds,
            r.clients,
            v.requests,
            v.acknowledged,
            v.unknown,
            v.keys_checked,
            v.lost,
            v.double_acquired,
            v.bad_state,
            v.ambiguous_not_in_review,
            r.restart_ms_median,
            r.restart_ms_max
        );
        for line in &v.violations {
            println!("  violation: {line}");
        }
        let json = serde_json::to_string_pretty(&r).map_err(anyhow::Error::from)?;
        if !v.ok() {
            if let Some(path) = &c.json {
                std::fs::write(path, &json)?;
            }
            return Err(CliError::from(anyhow::anyhow!(
                "the history check found violations"
            )));
        }
        json
    } else if c.scale {
        let opts = ScaleOpts {
            backends: backends(c.backend),
            pg_url: c.db.clone(),
            sizes: c.sizes.clone(),
            duration: d,
            concurrency: c.concurrency.iter().copied().max().unwrap_or(16).min(64),
            janitor_records: c.janitor_records,
            janitor_batch: c.janitor_batch.max(1),
            tmp_dir: c.tmp_dir.clone(),
            progress: true,
        };
        let report = idem_bench::run_scale(&opts).await?;
        println!(
            "{:<9} {:>10} {:>5} {:>10} {:>9} {:>9} {:>9} {:>13} {:>13}",
            "backend",
            "records",
            "conc",
            "pairs/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "gauges p50 ms",
            "gauges max ms"
        );
        for r in &report.size_rows {
            println!(
                "{:<9} {:>10} {:>5} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>13.3} {:>13.3}",
                r.backend.as_str(),
                r.records,
                r.concurrency,
                r.ops_per_s,
                r.p50_ms,
                r.p99_ms,
                r.max_ms,
                r.stats_p50_ms,
                r.stats_max_ms
            );
        }
        for j in &report.janitor_rows {
            println!(
                "janitor {}: {} of {} expired at {:.0}/s; claim p99 idle {:.3} ms ({:.0} pairs/s), during {:.3} ms ({:.0} pairs/s)",
                j.backend.as_str(),
                j.expired,
                j.records,
                j.expiries_per_s,
                j.claim_p99_idle_ms,
                j.claim_ops_per_s_idle,
                j.claim_p99_during_ms,
                j.claim_ops_per_s_during
            );
        }
        serde_json::to_string_pretty(&report).map_err(anyhow::Error::from)?
    } else {
        let idem_bin = std::env::current_exe().map_err(anyhow::Error::from)?;
        let opts = BenchOpts {
            backends: backends(c.backend),
            pg_url: c.db.clone(),
            pooler_url: c.pooler_url.clone(),
            duration: d,
            concurrency: c.concurrency.clone(),
            modes: parse_modes(&c.modes)?,
            workloads: parse_workloads(&c.workloads)?,
            idem_bin,
            tmp_dir: c.tmp_dir.clone(),
            duplicate_keys: 1000,
            redis_server: c.redis_server.clone(),
            progress: true,
        };
        let report = idem_bench::run(&opts).await?;
        print!("{}", idem_bench::render_table(&report.rows));
        for why in &report.skipped {
            println!("{why}");
        }
        serde_json::to_string_pretty(&report).map_err(anyhow::Error::from)?
    };
    if let Some(path) = &c.json {
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, json)?;
        eprintln!("idem bench: report written to {}", path.display());
    }
    Ok(exit::OK)
}
