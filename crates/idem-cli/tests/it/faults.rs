//! Faults under load with the history checker (`idem_bench::history`): `kill -9` of the
//! server in rounds on both stores, and the checker's own proof that it finds a lost write
//! and a double acquisition when there is one.
//!
//! Rounds: `IDEM_KILL9_ROUNDS` (default 10 on SQLite, half that on PostgreSQL); the full
//! run of docs/reliability.md is `idem bench --backend sqlite --kill9-rounds 100`.

use std::time::Duration;

use idem_bench::history::{self, Verb};
use serde_json::Value;

use crate::helpers::*;

fn rounds(default: u32) -> u32 {
    std::env::var("IDEM_KILL9_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn kill9(backend: &str, db: Option<&str>, rounds: u32) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("kill9.json");
    let rounds_s = rounds.to_string();
    let mut args = vec![
        "bench",
        "--backend",
        backend,
        "--kill9-rounds",
        &rounds_s,
        "--round-time",
        "700ms",
        "--concurrency",
        "64",
        "--json",
        json.to_str().expect("utf-8 path"),
    ];
    if let Some(db) = db {
        args.extend_from_slice(&["--db", db]);
    }
    let out = run_with(&args, "", &[]);
    eprintln!("{}", out.stdout);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report")).expect("JSON");
    let v = &report["verdict"];
    assert_eq!(report["rounds"], rounds, "{report}");
    for k in [
        "lost",
        "double_acquired",
        "bad_state",
        "ambiguous_not_in_review",
    ] {
        assert_eq!(v[k], 0, "{k}: {report}");
    }
    assert!(
        v["acknowledged"].as_u64().unwrap_or(0) > 100,
        "too little load to judge: {report}"
    );
    assert!(v["keys_checked"].as_u64().unwrap_or(0) > 50, "{report}");
    report
}

#[test]
fn kill9_rounds_under_load_lose_nothing_on_sqlite() {
    kill9("sqlite", None, rounds(10));
}

#[test]
fn kill9_rounds_under_load_lose_nothing_on_postgres() {
    let Some(admin) = idem_testkit::pg::admin_url_or_skip("kill9 on postgres") else {
        return;
    };
    kill9("postgres", Some(&admin), rounds(10).div_ceil(2));
}

/// The checker is not vacuous: on a real history it passes, and the same history with one
/// acknowledged complete's result changed (a write the ledger does not have) or one 201
/// claim repeated (a second `acquired` of the same attempt) fails it.
#[test]
fn the_history_checker_finds_a_lost_write_and_a_double_acquisition() {
    let server = Server::start();
    let addr = server.url.trim_start_matches("http://").to_owned();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let ns = "histcheck";
        history::prepare_namespace(&addr, ns).await.expect("policy");
        let load = history::Load::start(&addr, ns, 8);
        tokio::time::sleep(Duration::from_millis(800)).await;
        let h = load.finish().await.expect("history");
        let ok = history::check(&addr, &h).await.expect("check");
        assert!(ok.ok(), "{ok:?}");
        assert_eq!(ok.unknown, 0, "no fault, every request answered: {ok:?}");

        let mut lost = history::History {
            namespace: h.namespace.clone(),
            entries: h.entries.clone(),
        };
        let done = lost
            .entries
            .iter_mut()
            .find(|e| e.verb == Verb::Complete && e.status == Some(200))
            .expect("an acknowledged complete");
        done.result = Some("never-written".into());
        let v = history::check(&addr, &lost).await.expect("check");
        assert!(v.lost >= 1, "{v:?}");

        let mut double = history::History {
            namespace: h.namespace.clone(),
            entries: h.entries.clone(),
        };
        let acquired = double
            .entries
            .iter()
            .find(|e| e.verb == Verb::Claim && e.status == Some(201))
            .cloned()
            .expect("an acquired claim");
        double.entries.push(acquired);
        let v = history::check(&addr, &double).await.expect("check");
        assert_eq!(v.double_acquired, 1, "{v:?}");
    });
}

/// `idem bench --soak`: windows with the server's RSS, open files and the probe's p99, and a
/// clean history check (the CI step runs 60 s and compares the windows, `.ci/soak.sh`).
#[test]
fn a_short_soak_reports_its_windows_and_a_clean_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("soak.json");
    let out = run_with(
        &[
            "bench",
            "--soak",
            "3s",
            "--soak-window",
            "1s",
            "--concurrency",
            "4",
            "--json",
            json.to_str().expect("utf-8 path"),
        ],
        "",
        &[],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report")).expect("JSON");
    let windows = r["windows"].as_array().expect("windows");
    assert!(windows.len() >= 3, "{r}");
    for w in windows {
        assert!(w["rss_mib"].as_f64().is_some_and(|m| m > 1.0), "{w}");
        assert!(w["open_files"].as_u64().is_some_and(|n| n > 3), "{w}");
        assert!(w["pairs"].as_u64().is_some_and(|n| n > 0), "{w}");
        assert!(w["p99_ms"].as_f64().is_some_and(|p| p > 0.0), "{w}");
    }
    let v = &r["verdict"];
    assert!(v["acknowledged"].as_u64().unwrap_or(0) > 50, "{r}");
    for k in [
        "lost",
        "double_acquired",
        "bad_state",
        "ambiguous_not_in_review",
    ] {
        assert_eq!(v[k], 0, "{k}: {r}");
    }
}
