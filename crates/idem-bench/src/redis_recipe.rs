//! The Redis reference rows: the common "dedupe with Redis" recipe, no idem, against a
//! `redis-server` this bench starts itself on a free loopback port (a fresh one per row, its
//! files in a temp dir), in two configurations: AOF with `appendfsync always` (a write is
//! fsynced before it is answered, the durability idem's answer has) and no persistence.
//!
//! The recipe, one multiplexed connection per client (the `redis` crate's async client):
//! - first-time pair: `SET key <token> NX EX ttl` answers `OK` (acquired), then
//!   `SET key <result> XX EX ttl` stores the result — two writes, as idem's claim + complete,
//!   and the write a duplicate needs to find a result at all;
//! - duplicate: `SET key <token> NX EX ttl` answers nil (taken), then `GET key` reads the
//!   stored result — the caller does not know beforehand that it is a duplicate, as with
//!   idem's claim and the bare recipe's `INSERT … ON CONFLICT DO NOTHING` + `SELECT`.
//!
//! Every operation checks its answers, and a first-time row checks afterwards that the server
//! holds exactly one key per acquired pair, so a broken run cannot look fast.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::load::{drive_async, Measurement};
use crate::{Claims, Mode, Workload};

/// How long the recipe's keys live (a day: the dedupe window).
const TTL_S: u64 = 86_400;
/// The stored result, the same as idem's and the bare recipe's.
const RESULT: &str = r#"{"ok":true}"#;

/// Why the redis rows cannot run with `bin`, or `None` when they can.
pub fn unavailable(bin: &Path) -> Option<String> {
    match std::process::Command::new(bin)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!(
            "redis rows skipped: `{} --version` exited with {s}",
            bin.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "redis rows skipped: `{}` not found (install Redis, or name the binary with \
             --redis-server)",
            bin.display()
        )),
        Err(e) => Some(format!(
            "redis rows skipped: cannot run `{}`: {e}",
            bin.display()
        )),
    }
}

/// A `redis-server` child on a free loopback port, its files in a temp dir of its own.
pub struct RedisProcess {
    child: tokio::process::Child,
    pub pid: u32,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl RedisProcess {
    /// Starts `bin` in the configuration of `mode` ([`Mode::RedisAof`] or
    /// [`Mode::RedisNoPersist`]) and waits until it answers `PING`.
    pub async fn start(
        bin: &Path,
        mode: Mode,
        tmp_dir: Option<&PathBuf>,
    ) -> anyhow::Result<RedisProcess> {
        let dir = match tmp_dir {
            Some(d) => tempfile::tempdir_in(d)?,
            None => tempfile::tempdir()?,
        };
        let port = crate::free_port()?.to_string();
        let dir_arg = dir.path().to_string_lossy().into_owned();
        // No RDB snapshots in either configuration: they fork and write in the background,
        // which neither durability nor the comparison needs.
        let mut args = vec![
            "--bind",
            "127.0.0.1",
            "--port",
            &port,
            "--dir",
            &dir_arg,
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            "",
        ];
        match mode {
            Mode::RedisAof => args.extend(["--appendonly", "yes", "--appendfsync", "always"]),
            Mode::RedisNoPersist => args.extend(["--appendonly", "no"]),
            Mode::Bare | Mode::Library | Mode::Http | Mode::Direct => {
                anyhow::bail!("{} is not a redis mode", mode.as_str())
            }
        }
        let mut child = tokio::process::Command::new(bin)
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("redis-server exited at once")?;
        let url = format!("redis://127.0.0.1:{port}/");
        let client = redis::Client::open(url.as_str())?;
        for _ in 0..200 {
            if let Ok(mut conn) = connect(&client).await {
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut conn).await;
                if pong.is_ok() {
                    return Ok(RedisProcess {
                        child,
                        pid,
                        url,
                        _dir: dir,
                    });
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                anyhow::bail!("redis-server exited with {status}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("redis-server did not answer PING in 10 s")
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// One client's connection. No response timeout: a slow answer under load is a measurement,
/// not an error (the crate's default would fail requests after 500 ms).
async fn connect(client: &redis::Client) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(Some(Duration::from_secs(5)));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// `SET key value NX EX ttl`: true when the key was set (acquired).
async fn set_nx(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    value: &str,
) -> anyhow::Result<bool> {
    let got: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("EX")
        .arg(TTL_S)
        .query_async(conn)
        .await?;
    Ok(got.is_some())
}

/// The recipe's first-time pair on a fresh key.
async fn pair(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> anyhow::Result<()> {
    let token = format!("{:032x}", rand::random::<u128>());
    anyhow::ensure!(
        set_nx(conn, key, &token).await?,
        "fresh key already claimed"
    );
    let done: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(RESULT)
        .arg("XX")
        .arg("EX")
        .arg(TTL_S)
        .query_async(conn)
        .await?;
    anyhow::ensure!(done.is_some(), "complete found no key");
    Ok(())
}

/// The recipe's duplicate of a completed key.
async fn duplicate(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !set_nx(conn, key, "x").await?,
        "duplicate key was set again"
    );
    let stored: Option<String> = redis::cmd("GET").arg(key).query_async(conn).await?;
    anyhow::ensure!(
        stored.as_deref() == Some(RESULT),
        "duplicate read {stored:?}"
    );
    Ok(())
}

/// Keys in the server's database.
async fn dbsize(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    Ok(redis::cmd("DBSIZE").query_async(conn).await?)
}

/// Runs one row of the recipe against `server` with `c` clients.
pub async fn run(
    server: &RedisProcess,
    workload: Workload,
    c: usize,
    duration: Duration,
    duplicate_keys: usize,
) -> anyhow::Result<Measurement> {
    let client = redis::Client::open(server.url.as_str())?;
    let mut setup = connect(&client).await?;
    let mut conns = Vec::with_capacity(c.max(1));
    for _ in 0..c.max(1) {
        conns.push(connect(&client).await?);
    }
    let conns = std::sync::Arc::new(conns);
    let run_id: u64 = rand::random();
    match workload.claims() {
        Some(Claims::FirstTimePair) => {
            let m = drive_async(c, duration, move |client, seq| {
                // A multiplexed connection is a cheap handle on the client's one socket.
                let mut conn = conns[client % conns.len()].clone();
                async move { pair(&mut conn, &crate::key_for(run_id, client, seq)).await }
            })
            .await?;
            // Every acquired pair is one key, and no key was acquired twice.
            if m.errors == 0 {
                let keys = dbsize(&mut setup).await?;
                anyhow::ensure!(
                    keys == m.ops,
                    "{} pairs acquired, {keys} keys in redis",
                    m.ops
                );
            }
            Ok(m)
        }
        Some(Claims::Duplicate) => {
            let keys: std::sync::Arc<Vec<String>> = std::sync::Arc::new(
                (0..duplicate_keys.max(1))
                    .map(|i| format!("dup-{run_id:x}-{i}"))
                    .collect(),
            );
            for k in keys.iter() {
                pair(&mut setup, k).await?;
            }
            drive_async(c, duration, move |client, seq| {
                let mut conn = conns[client % conns.len()].clone();
                let k = crate::load::pick(&keys, client, seq).clone();
                async move { duplicate(&mut conn, &k).await }
            })
            .await
        }
        None => anyhow::bail!("the redis rows run the claim workloads only"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::{connect, dbsize, duplicate, pair, unavailable, RedisProcess};
    use crate::{Backend, BenchOpts, Mode, Workload};

    /// The binary the tests start: `IDEM_BENCH_REDIS_SERVER` when set (then it must run),
    /// else `redis-server` from PATH, or `None` (the test says so and passes) when there is
    /// none on this machine.
    fn redis_server() -> Option<PathBuf> {
        if let Some(bin) = std::env::var_os("IDEM_BENCH_REDIS_SERVER") {
            return Some(PathBuf::from(bin));
        }
        let bin = PathBuf::from("redis-server");
        match unavailable(&bin) {
            None => Some(bin),
            Some(why) => {
                eprintln!("{why}; set IDEM_BENCH_REDIS_SERVER to run this test");
                None
            }
        }
    }

    fn opts(redis_server: PathBuf) -> BenchOpts {
        BenchOpts {
            backends: vec![],
            pg_url: String::new(),
            pooler_url: None,
            duration: Duration::from_millis(300),
            concurrency: vec![1, 2],
            modes: vec![Mode::RedisAof, Mode::RedisNoPersist],
            workloads: vec![Workload::FirstTimePair, Workload::Duplicate],
            idem_bin: PathBuf::new(),
            tmp_dir: None,
            duplicate_keys: 50,
            redis_server,
            progress: false,
        }
    }

    #[tokio::test]
    async fn redis_rows_acquire_each_key_once_and_every_duplicate_finds_the_result() {
        let Some(bin) = redis_server() else { return };
        for mode in [Mode::RedisAof, Mode::RedisNoPersist] {
            for c in [1, 2] {
                // Pairs: every acquired pair left exactly one key behind.
                let server = RedisProcess::start(&bin, mode, None).await.unwrap();
                let m = super::run(
                    &server,
                    Workload::FirstTimePair,
                    c,
                    Duration::from_millis(300),
                    0,
                )
                .await
                .unwrap();
                let client = redis::Client::open(server.url.as_str()).unwrap();
                let mut conn = connect(&client).await.unwrap();
                assert_eq!(m.errors, 0, "{mode:?} c={c}: {:?}", m.first_error);
                assert!(m.ops > 0, "{mode:?} c={c}: no pair completed");
                assert_eq!(dbsize(&mut conn).await.unwrap(), m.ops, "{mode:?} c={c}");
                server.stop().await;

                // Duplicates: every one found the stored result, none created a key.
                let server = RedisProcess::start(&bin, mode, None).await.unwrap();
                let m = super::run(
                    &server,
                    Workload::Duplicate,
                    c,
                    Duration::from_millis(300),
                    50,
                )
                .await
                .unwrap();
                let client = redis::Client::open(server.url.as_str()).unwrap();
                let mut conn = connect(&client).await.unwrap();
                assert_eq!(m.errors, 0, "{mode:?} c={c}: {:?}", m.first_error);
                assert!(m.ops > 0, "{mode:?} c={c}: no duplicate answered");
                assert_eq!(dbsize(&mut conn).await.unwrap(), 50, "{mode:?} c={c}");
                server.stop().await;
            }
        }
    }

    #[tokio::test]
    async fn the_recipe_refuses_a_second_claim_and_a_duplicate_without_result() {
        let Some(bin) = redis_server() else { return };
        let server = RedisProcess::start(&bin, Mode::RedisNoPersist, None)
            .await
            .unwrap();
        let client = redis::Client::open(server.url.as_str()).unwrap();
        let mut conn = connect(&client).await.unwrap();
        pair(&mut conn, "k1").await.unwrap();
        duplicate(&mut conn, "k1").await.unwrap();
        let again = pair(&mut conn, "k1").await.unwrap_err();
        assert!(again.to_string().contains("already claimed"), "{again:#}");
        // Claimed but never completed: the duplicate reads the claim's token, not a result.
        assert!(super::set_nx(&mut conn, "k2", "token").await.unwrap());
        let early = duplicate(&mut conn, "k2").await.unwrap_err();
        assert!(early.to_string().contains("duplicate read"), "{early:#}");
        server.stop().await;
    }

    #[tokio::test]
    async fn bench_runs_redis_rows_once_with_ratios_to_the_aof_rows() {
        let Some(bin) = redis_server() else { return };
        let report = crate::run(&opts(bin)).await.unwrap();
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        assert_eq!(report.rows.len(), 8);
        for r in &report.rows {
            assert_eq!(r.backend, Backend::Redis);
            assert_eq!(r.errors, 0, "{r:?}");
            assert!(r.ops_per_s > 0.0, "{r:?}");
            assert!(r.server_cpu_us_per_op.is_some(), "{r:?}");
            // Only the AOF rows are the reference; the others carry a ratio to them.
            assert_eq!(r.ratio_to_redis.is_some(), r.mode == Mode::RedisNoPersist);
        }
    }

    #[tokio::test]
    async fn missing_redis_server_skips_the_redis_rows_with_the_reason() {
        let missing = PathBuf::from("/nonexistent/redis-server-for-idem-bench");
        let why = unavailable(&missing).unwrap();
        assert!(why.contains("not found"), "{why}");
        let report = crate::run(&opts(missing)).await.unwrap();
        assert!(report.rows.is_empty(), "{:?}", report.rows);
        assert_eq!(report.skipped, vec![why]);
    }

    #[test]
    fn modes_are_named_alike_in_the_table_and_the_json() {
        for m in [Mode::RedisAof, Mode::RedisNoPersist, Mode::Bare, Mode::Http] {
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
    }

    #[test]
    fn redis_rows_are_planned_once_next_to_the_first_backend() {
        let mut o = opts(PathBuf::from("redis-server"));
        o.backends = vec![Backend::Sqlite, Backend::Postgres];
        o.modes = vec![Mode::Http, Mode::RedisAof];
        o.workloads = vec![Workload::FirstTimePair, Workload::Effect];
        o.concurrency = vec![16];
        let rows: Vec<_> = crate::plan(&o, true)
            .into_iter()
            .map(|(b, m, w, _)| (b, m, w))
            .collect();
        assert_eq!(
            rows,
            vec![
                (Backend::Sqlite, Mode::Http, Workload::FirstTimePair),
                (Backend::Redis, Mode::RedisAof, Workload::FirstTimePair),
                (Backend::Sqlite, Mode::Http, Workload::Effect),
                (Backend::Postgres, Mode::Http, Workload::FirstTimePair),
                (Backend::Postgres, Mode::Http, Workload::Effect),
            ]
        );
        // Skipped: the idem rows alone.
        assert_eq!(crate::plan(&o, false).len(), 4);
    }
}
