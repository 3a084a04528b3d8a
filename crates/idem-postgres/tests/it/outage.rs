//! PostgreSQL stops mid-flight: calls fail fast with `Unavailable`, then recover by themselves.
//!
//! Runs a private cluster (initdb + pg_ctl in a temp dir, on a free port) so that stopping it
//! never disturbs the shared server. Skipped when the PostgreSQL 15 binaries are missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use idem_core::{ClaimOutcome, ClaimRequest, CompleteRequest, TestClock};
use idem_postgres::{PgOptions, PgStore};
use idem_store::{LedgerError, Store, StoreError};

use crate::helpers::*;

const BIN: &str = "/usr/lib/postgresql/15/bin";

struct Cluster {
    dir: PathBuf,
    port: u16,
    as_root: bool,
}

fn run_pg(as_root: bool, tool: &str, args: &[&str]) -> bool {
    let path = format!("{BIN}/{tool}");
    let mut cmd = if as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &path]);
        c
    } else {
        Command::new(&path)
    };
    match cmd.args(args).output() {
        Ok(out) => {
            if !out.status.success() {
                eprintln!(
                    "{tool} failed: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            out.status.success()
        }
        Err(e) => {
            eprintln!("{tool}: {e}");
            false
        }
    }
}

impl Cluster {
    fn create() -> Option<Cluster> {
        if !Path::new(BIN).join("pg_ctl").exists() {
            eprintln!("skipping outage test: no PostgreSQL binaries under {BIN}");
            return None;
        }
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
        let dir =
            std::env::temp_dir().join(format!("idem-pg-outage-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        if as_root {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "chown the temp dir to postgres");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let c = Cluster { dir, port, as_root };
        let data = c.data();
        assert!(
            run_pg(
                as_root,
                "initdb",
                &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"]
            ),
            "initdb"
        );
        assert!(c.start(), "first start");
        Some(c)
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    fn start(&self) -> bool {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.to_string_lossy()
        );
        let log = self.dir.join("log").to_string_lossy().into_owned();
        run_pg(
            self.as_root,
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &opts,
                "-l",
                &log,
                "-w",
                "-t",
                "30",
                "start",
            ],
        )
    }

    fn stop(&self) -> bool {
        run_pg(
            self.as_root,
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        )
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_outage_gives_unavailable_fast_and_recovers_without_restart() {
    if std::env::var("IDEM_TEST_PG").is_err() {
        eprintln!("skipping outage test: IDEM_TEST_PG is not set");
        return;
    }
    let Some(cluster) = Cluster::create() else {
        return;
    };
    let opts = PgOptions {
        max_connections: 4,
        connect_timeout: Duration::from_secs(1),
        pool_wait_timeout: Duration::from_secs(1),
        statement_timeout: Duration::from_secs(2),
        op_timeout: Duration::from_secs(3),
        ..PgOptions::default()
    };
    let store = std::sync::Arc::new(
        PgStore::connect_with(&cluster.url(), opts)
            .await
            .expect("connect"),
    );
    let clock = TestClock::new(T0);
    let l = ledger(store.clone(), &clock);
    let n = ns("outage");
    let before = l
        .claim(&n, &key("before"), ClaimRequest::default())
        .await
        .expect("claim while up");
    assert_eq!(before.outcome, ClaimOutcome::Acquired);

    assert!(cluster.stop(), "stop the private cluster");

    for k in ["during-1", "during-2", "during-3"] {
        let started = Instant::now();
        let r = l.claim(&n, &key(k), ClaimRequest::default()).await;
        let took = started.elapsed();
        assert!(
            matches!(r, Err(LedgerError::Store(StoreError::Unavailable(_)))),
            "claim during outage: {r:?}"
        );
        assert!(took < Duration::from_secs(5), "answered in {took:?}");
    }
    let started = Instant::now();
    assert!(matches!(
        store.ping().await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.get(&n, &key("before")).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(started.elapsed() < Duration::from_secs(8));

    assert!(cluster.start(), "start the private cluster again");

    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        match l.claim(&n, &key("after"), ClaimRequest::default()).await {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no recovery within 30 s: {e}"),
        }
    };
    assert_eq!(after.outcome, ClaimOutcome::Acquired);
    // Work acknowledged before the outage is intact: its holder can still complete.
    l.complete(
        &n,
        &key("before"),
        CompleteRequest {
            token: before.token.expect("token").secret(),
            result: None,
            external_ref: None,
        },
    )
    .await
    .expect("complete after recovery");
    // Nothing was written for the claims refused during the outage.
    assert!(store
        .get(&n, &key("during-1"))
        .await
        .expect("get")
        .is_none());
    store.ping().await.expect("ping after recovery");
}
