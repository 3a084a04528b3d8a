//! `kill -9` at random moments loses nothing acknowledged and never damages the file.
//!
//! The child is this test binary re-executed on the ignored test [`crash_child`]: it claims
//! and completes keys as fast as it can and prints `ACK <key>` after each `complete`
//! returned `Ok`. The parent kills it (SIGKILL) after a random 100–600 ms, then checks the
//! file: `PRAGMA integrity_check` is `ok` and every acknowledged key is `completed`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::{ClaimOutcome, ClaimRequest, CompleteRequest, State};
use idem_sqlite::SqliteStore;
use idem_store::{Ledger, Store};
use rand::Rng;

use crate::helpers::{key, ns};

const DB_ENV: &str = "IDEM_CRASH_CHILD_DB";
const ROUND_ENV: &str = "IDEM_CRASH_CHILD_ROUND";

#[tokio::test]
#[ignore = "child process of kill_9_loses_nothing_acknowledged"]
async fn crash_child() {
    let Ok(path) = std::env::var(DB_ENV) else {
        return;
    };
    let round = std::env::var(ROUND_ENV).unwrap_or_default();
    let store = SqliteStore::open(std::path::Path::new(&path)).expect("child open");
    let ledger = Ledger::new(Arc::new(store));
    let n = ns("crash");
    let mut out = std::io::stdout().lock();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0u64;
    while Instant::now() < deadline {
        let k = key(&format!("r{round}-{i}"));
        let c = ledger
            .claim(&n, &k, ClaimRequest::default())
            .await
            .expect("child claim");
        assert_eq!(c.outcome, ClaimOutcome::Acquired);
        ledger
            .complete(
                &n,
                &k,
                CompleteRequest {
                    cost: None,
                    token: c.token.expect("token").secret(),
                    result: Some(serde_json::json!({"i": i})),
                    external_ref: None,
                },
            )
            .await
            .expect("child complete");
        writeln!(out, "ACK {k}").expect("stdout");
        out.flush().expect("flush");
        i += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("dir");
    let path = crate::helpers::db_path(dir.path());
    let exe = std::env::current_exe().expect("test binary");
    let mut acked: Vec<String> = Vec::new();
    let mut rng = rand::rng();
    for round in 0..5 {
        let mut child = Command::new(&exe)
            .args(["--ignored", "--exact", "crash::crash_child", "--nocapture"])
            .env(DB_ENV, &path)
            .env(ROUND_ENV, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("piped stdout");
        // Read concurrently so a fast child never blocks on a full pipe.
        let reader = std::thread::spawn(move || {
            let mut keys = Vec::new();
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                // Only whole lines count: a line cut by the kill was never fully printed.
                if let Some(k) = line.strip_suffix('\n').and_then(|l| l.strip_prefix("ACK ")) {
                    keys.push(k.to_owned());
                }
                line.clear();
            }
            keys
        });
        let wait_ms = rng.random_range(100..=600);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        acked.extend(reader.join().expect("reader"));

        // The file must be sound and hold every acknowledged completion.
        {
            let conn = rusqlite::Connection::open(&path).expect("raw open");
            let check: String = conn
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .expect("integrity_check");
            assert_eq!(check, "ok", "round {round}");
        }
        let store = SqliteStore::open(&path).expect("reopen after kill");
        for k in &acked {
            let got = store
                .get(&ns("crash"), &key(k))
                .await
                .expect("get")
                .unwrap_or_else(|| panic!("acknowledged key {k} lost (round {round})"));
            assert_eq!(got.record.state, State::Completed, "{k}");
        }
    }
    assert!(
        !acked.is_empty(),
        "the child never acknowledged anything: is the re-exec path right?"
    );
    eprintln!(
        "crash test: {} acknowledged keys survived 5 kills",
        acked.len()
    );
}
