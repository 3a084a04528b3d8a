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

/// The destination misbehaves while intake posts and effects run: each request it gets is
/// answered at once, answered slowly, left hanging until the caller gives up, reset after it
/// was read, reset before, refused 503 or failed 500 (`idem_bench::outbound::FaultSink`).
/// After `IDEM_SINK_FAULT_SECS` (default 6) the load stops and the sink heals; once every
/// forward settled, the outbound checker reads every event and effect back: nothing
/// acknowledged lost, every event delivered or dead-lettered (after its 3 attempts, never
/// once answered 200), no two forwards of one event
/// in flight, no forward after a delivery, no effect sent twice (a 503 refusal aside), every
/// ambiguous effect in `needs_review`.
#[test]
fn sink_faults_while_intake_and_effects_run_break_no_invariant() {
    use idem_bench::outbound::{self, Recorded};
    let secs: u64 = std::env::var("IDEM_SINK_FAULT_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let server = Server::start();
    let addr = server.url.trim_start_matches("http://").to_owned();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let ns = "fx-faults";
        let sink = outbound::FaultSink::start().await.expect("sink");
        outbound::prepare(&addr, ns, &sink).await.expect("prepare");
        let load = outbound::OutboundLoad::start(&addr, ns, &sink, 2, 6);
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (intake, effects) = load.finish().await.expect("load");
        sink.heal();
        let healed = std::time::Instant::now();
        let settled = outbound::wait_settled(&addr, Duration::from_secs(30))
            .await
            .expect("settle");
        let settle_ms = healed.elapsed().as_millis();
        let rec = Recorded {
            intake,
            effects,
            hits: sink
                .hits(Duration::from_secs(30))
                .await
                .expect("sink quiet"),
        };
        let v = outbound::check(&addr, ns, &rec).await.expect("check");
        eprintln!(
            "sink faults for {secs} s: every forward settled {settle_ms} ms after the sink \
             healed; {} resets before reading; {}",
            sink.resets_at_accept(),
            serde_json::to_string_pretty(&v).unwrap_or_default()
        );
        assert!(
            settled,
            "forwards still pending 30 s after the sink healed: {v:?}"
        );
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.unanswered, 0, "{v:?}");
        // The faults did happen, and so did the work.
        for t in [
            "ok",
            "slow",
            "hang",
            "reset_after_read",
            "refuse503",
            "error500",
        ] {
            assert!(
                v.treatments.get(t).copied().unwrap_or(0) > 0,
                "no {t}: {v:?}"
            );
        }
        assert!(sink.resets_at_accept() > 0, "{v:?}");
        assert!(v.intake_events > 50 && v.delivered > 50, "{v:?}");
        assert!(
            v.dead_lettered > 0,
            "a 3-attempt budget runs out for some: {v:?}"
        );
        assert!(
            v.forwards_at_sink > v.delivered,
            "forwards were retried: {v:?}"
        );
        assert!(v.effects_completed > 10 && v.effects_in_review > 5, "{v:?}");

        // The checker is not vacuous: one acknowledged event the ledger does not have, one
        // effect key sent a second time, and one forward repeated while it was in flight.
        let mut bad = rec.clone();
        bad.intake.push(outbound::IntakeEntry {
            event_id: "evt_never_sent".into(),
            status: Some(200),
            result: Some("accepted".into()),
            code: None,
        });
        let done = rec
            .hits
            .iter()
            .find(|h| !h.forward && h.answered_ok)
            .cloned()
            .expect("an effect answered 200");
        let mut again = done.clone();
        again.start = done.end + Duration::from_millis(1);
        again.end = again.start;
        bad.hits.push(again);
        let fwd = rec
            .hits
            .iter()
            .find(|h| h.forward)
            .cloned()
            .expect("a forward");
        bad.hits.push(fwd);
        let b = outbound::check(&addr, ns, &bad).await.expect("check");
        assert_eq!(b.intake_lost, 1, "{b:?}");
        assert!(b.effect_sent_twice >= 1, "{b:?}");
        assert!(b.forward_overlap >= 1, "{b:?}");
    });
}
