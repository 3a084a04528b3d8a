//! `idem backup` against a serving ledger, `idem healthcheck`, and `idem --version`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use rusqlite::Connection;
use serde_json::{json, Value};

use crate::helpers::*;

/// One claim + complete of `key` over HTTP; `true` when both were acknowledged.
async fn pair(http: &reqwest::Client, base: &str, key: &str) -> bool {
    let url = format!("{base}/v1/namespaces/bk/keys/{key}");
    let Ok(claim) = http
        .post(format!("{url}/claim"))
        .json(&json!({"payload": {"key": key}}))
        .send()
        .await
    else {
        return false;
    };
    if claim.status() != 201 {
        return false;
    }
    let Ok(body) = claim.json::<Value>().await else {
        return false;
    };
    let done = http
        .post(format!("{url}/complete"))
        .json(&json!({"token": body["token"], "result": {"done": key}}))
        .send()
        .await;
    done.is_ok_and(|r| r.status() == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_while_the_server_writes_is_a_complete_consistent_ledger() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
    let server = Server::start_on(&db);
    let http = reqwest::Client::new();
    for i in 0..200 {
        assert!(pair(&http, &server.url, &format!("before-{i}")).await);
    }

    // A writer that keeps claiming and completing while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, acked, failed) = (stop.clone(), acked.clone(), failed.clone());
        let (http, base) = (http.clone(), server.url.clone());
        tokio::spawn(async move {
            let mut i = 0usize;
            while !stop.load(Ordering::SeqCst) {
                if pair(&http, &base, &format!("during-{i}")).await {
                    acked.store(i + 1, Ordering::SeqCst);
                } else {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
                i += 1;
            }
        })
    };
    while acked.load(Ordering::SeqCst) < 20 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let out = dir.path().join("backup.db");
    let acked_at_start = acked.load(Ordering::SeqCst);
    let (db_arg, out_arg) = (
        format!("sqlite://{}", db.display()),
        out.display().to_string(),
    );
    let result =
        tokio::task::spawn_blocking(move || run(&["backup", "--db", &db_arg, "--out", &out_arg]))
            .await
            .expect("backup thread");
    let acked_at_end = acked.load(Ordering::SeqCst);
    // Keep writing a little after the copy: none of it may show up in it.
    while acked.load(Ordering::SeqCst) < acked_at_end + 20 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::SeqCst);
    writer.await.expect("writer");
    assert_eq!(result.code, 0, "{result:?}");
    assert!(result.stdout.is_empty(), "{result:?}");
    assert!(result.stderr.contains("integrity ok"), "{result:?}");
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "the server kept answering every write during the backup"
    );
    assert!(!dir.path().join(".backup.db.partial").exists());

    let copy = Connection::open(&out).expect("open the backup");
    let check: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok");
    let state_of = |key: &str| -> Option<(String, Option<String>)> {
        copy.query_row(
            "SELECT state, result FROM records WHERE namespace = 'bk' AND key = ?1",
            [key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .ok()
    };
    for i in 0..200 {
        let key = format!("before-{i}");
        let (state, result) = state_of(&key).unwrap_or_else(|| panic!("{key} missing"));
        assert_eq!(state, "completed", "{key}");
        let result: Value = serde_json::from_str(result.as_deref().unwrap_or("null"))
            .expect("stored result is JSON");
        assert_eq!(result, json!({"done": key}));
    }
    // Every pair acknowledged before the backup started is in it, completed.
    for i in 0..acked_at_start {
        let key = format!("during-{i}");
        assert_eq!(
            state_of(&key).map(|s| s.0).as_deref(),
            Some("completed"),
            "{key}"
        );
    }
    // Nothing written after the copy finished: the pair in flight at its end at most.
    let during: i64 = copy
        .query_row(
            "SELECT COUNT(*) FROM records WHERE namespace = 'bk' AND key LIKE 'during-%'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    let during = usize::try_from(during).expect("count");
    assert!(
        (acked_at_start..=acked_at_end + 1).contains(&during),
        "{acked_at_start} ≤ {during} ≤ {acked_at_end} + 1"
    );
    // One snapshot: the per-state counters agree with the rows they count.
    let (rows, counted): (i64, i64) = copy
        .query_row(
            "SELECT (SELECT COUNT(*) FROM records), (SELECT SUM(n) FROM namespace_counts)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("counts");
    assert_eq!(rows, counted);
    let mode: String = copy
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal mode");
    assert_eq!(mode, "delete", "the backup is one file, no -wal beside it");
    drop(copy);

    // The copy is a ledger idem serves: a duplicate replays the stored result.
    drop(server);
    let restored = Server::start_on(&out);
    let replay = restored.idem(&[
        "claim",
        "bk",
        "before-7",
        "--payload",
        r#"{"key":"before-7"}"#,
        "--json",
    ]);
    assert_eq!(replay.code, 19, "completed duplicate: {replay:?}");
    assert_eq!(
        replay.json()["record"]["result"],
        json!({"done": "before-7"})
    );
}

#[test]
fn backup_refuses_postgres_and_a_missing_ledger() {
    let pg = run(&[
        "backup",
        "--db",
        "postgres://idem:hunter2@db/idem",
        "--out",
        "x.db",
    ]);
    assert_eq!(pg.code, 1, "{pg:?}");
    assert!(pg.stderr.contains("pg_dump"), "{pg:?}");
    assert!(!pg.stderr.contains("hunter2"), "{pg:?}");
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope.db");
    let out = dir.path().join("b.db");
    let r = run(&[
        "backup",
        "--db",
        &missing.display().to_string(),
        "--out",
        &out.display().to_string(),
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("cannot open the ledger"), "{r:?}");
    assert!(!missing.exists() && !out.exists());
}

#[test]
fn healthcheck_exits_0_on_a_live_server_and_1_otherwise() {
    let server = Server::start();
    for extra in [&[][..], &["--ready"][..]] {
        let mut args = vec!["healthcheck", "--url", server.url.as_str()];
        args.extend_from_slice(extra);
        let r = run(&args);
        assert_eq!(r.code, 0, "{extra:?}: {r:?}");
        assert!(r.stdout.is_empty(), "{r:?}");
    }
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let r = run(&["healthcheck", "--url", &nobody, "--timeout", "2s"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("/healthz"), "{r:?}");
    let r = run(&["healthcheck", "--url", &format!("{}/nowhere/", server.url)]);
    assert_eq!(r.code, 1, "a 404 is not healthy: {r:?}");
}

#[test]
fn version_names_the_package_version_and_the_commit() {
    let r = run(&["--version"]);
    assert_eq!(r.code, 0, "{r:?}");
    let expected = format!(
        "idem {} (commit {})\n",
        env!("CARGO_PKG_VERSION"),
        env!("IDEM_GIT_COMMIT")
    );
    assert_eq!(r.stdout, expected);
    let commit = env!("IDEM_GIT_COMMIT");
    // In a git checkout it is this checkout's commit (unless overridden for the build).
    if std::env::var_os("IDEM_GIT_COMMIT").is_none() {
        if let Ok(out) = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
        {
            if out.status.success() {
                assert_eq!(commit, String::from_utf8_lossy(&out.stdout).trim());
            }
        }
    }
}
