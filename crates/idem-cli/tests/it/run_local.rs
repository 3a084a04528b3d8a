//! `idem run --db FILE`: the exactly-once runner on a local ledger, one test per exit code.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::helpers::{idem, shell, LocalDb};

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

#[test]
fn acquired_runs_once_and_duplicate_replays_stdout_without_running() {
    let db = LocalDb::new();
    let counter = db.file("effects");
    let script = format!(
        "echo \"hello from $IDEM_KEY attempt $IDEM_ATTEMPT ${{IDEM_LEASE_TOKEN:+with-token}}\"; echo x >> {}",
        counter.display()
    );
    let first = db.run("renewal:2026-06-22", &[], &["sh", "-c", &script]);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(
        first.stdout,
        "hello from renewal:2026-06-22 attempt 1 with-token\n"
    );
    assert_eq!(lines(&counter), 1);
    assert_eq!(db.state("renewal:2026-06-22"), "completed");

    let second = db.run("renewal:2026-06-22", &[], &["sh", "-c", &script]);
    assert_eq!(
        second.code, 19,
        "a replay is not a fresh success: {second:?}"
    );
    assert!(second.stderr.contains("already completed"), "{second:?}");
    assert_eq!(second.stdout, first.stdout, "the stored stdout is replayed");
    assert_eq!(lines(&counter), 1, "the command did not run again");
}

/// A replay is not a fresh success: `idem run … && next` must not repeat `next`.
#[test]
fn replay_exits_19_so_an_and_chain_stops() {
    let db = LocalDb::new();
    let next = db.file("next");
    let script = format!(
        "\"$IDEM\" run --db {} --ns cron --key report -- echo built && echo sent >> {}",
        db.path(),
        next.display()
    );
    let first = shell(&script, &[]);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.stdout, "built\n");
    assert_eq!(lines(&next), 1);
    let again = shell(&script, &[]);
    assert_eq!(again.code, 19, "{again:?}");
    assert_eq!(again.stdout, "built\n", "the stored stdout is replayed");
    assert!(
        again.stderr.contains("cron/report already completed"),
        "{again:?}"
    );
    assert_eq!(lines(&next), 1, "the chained command ran for a replay");
}

#[test]
fn stored_stdout_is_bounded_but_passed_through_whole() {
    let db = LocalDb::new();
    let cmd = ["sh", "-c", "head -c 100000 /dev/zero | tr '\\000' a"];
    let first = db.run("big", &[], &cmd);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.stdout.len(), 100_000);
    let replay = db.run("big", &[], &cmd);
    assert_eq!(replay.code, 19, "{replay:?}");
    assert_eq!(replay.stdout.len(), 64 * 1024);
}

#[test]
fn exit_75_is_retryable_and_exits_75() {
    let db = LocalDb::new();
    let out = db.run("k75", &[], &["sh", "-c", "exit 75"]);
    assert_eq!(out.code, 75, "{out:?}");
    assert_eq!(db.state("k75"), "failed_retryable");
}

#[test]
fn other_exit_is_permanent_and_replays_as_failed_permanent() {
    let db = LocalDb::new();
    let out = db.run("k3", &[], &["sh", "-c", "echo partial; exit 3"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(db.state("k3"), "failed_permanent");
    let again = db.run("k3", &[], &["sh", "-c", "echo must-not-run"]);
    assert_eq!(again.code, 17, "{again:?}");
    assert!(!again.stdout.contains("must-not-run"));
}

#[test]
fn killed_by_signal_is_ambiguous_needs_review() {
    let db = LocalDb::new();
    let out = db.run("ksig", &[], &["sh", "-c", "kill -9 $$"]);
    assert_eq!(out.code, 128 + 9, "{out:?}");
    assert_eq!(db.state("ksig"), "needs_review");
    let again = db.run("ksig", &[], &["true"]);
    assert_eq!(again.code, 12, "{again:?}");
}

#[test]
fn command_that_cannot_start_exits_127_and_fails_permanently() {
    let db = LocalDb::new();
    let out = db.run("nocmd", &[], &["/nonexistent/idem-test-command"]);
    assert_eq!(out.code, 127, "{out:?}");
    assert_eq!(db.state("nocmd"), "failed_permanent");
}

#[test]
fn in_flight_while_another_run_holds_the_lease() {
    let db = LocalDb::new();
    let marker = db.file("started");
    let path = db.path();
    let script = format!("touch {}; sleep 2; echo done", marker.display());
    let holder = idem()
        .args([
            "run", "--db", &path, "--ns", "cron", "--key", "nightly", "--lease", "1s",
        ])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "holder never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The lease is 1s and the command runs 2s: heartbeats keep it held past its first expiry.
    std::thread::sleep(Duration::from_millis(1300));
    let dup = db.run("nightly", &[], &["sh", "-c", "echo must-not-run"]);
    assert_eq!(dup.code, 10, "{dup:?}");
    assert!(dup.stdout.is_empty(), "{dup:?}");
    let out = holder.wait_with_output().expect("holder");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(db.state("nightly"), "completed");
}

#[test]
fn different_payload_is_a_conflict() {
    let db = LocalDb::new();
    let first = db.run(
        "invoice-7",
        &["--payload", r#"{"amount": 10}"#],
        &["echo", "sent"],
    );
    assert_eq!(first.code, 0, "{first:?}");
    let file = db.file("payload.json");
    std::fs::write(&file, r#"{ "amount" : 10 }"#).expect("write payload");
    let file = file.display().to_string();
    let same = db.run("invoice-7", &["--payload-file", &file], &["echo", "again"]);
    assert_eq!(same.code, 19, "{same:?}");
    assert_eq!(
        same.stdout, "sent\n",
        "same payload (other formatting) replays"
    );
    let other = db.run(
        "invoice-7",
        &["--payload", r#"{"amount": 99}"#],
        &["echo", "x"],
    );
    assert_eq!(other.code, 14, "{other:?}");
    assert!(other.stdout.is_empty());
}

#[test]
fn run_needs_a_target_and_a_command() {
    let out = crate::helpers::run(&["run", "--ns", "a", "--key", "b", "--", "true"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("--url") && out.stderr.contains("--db"),
        "{out:?}"
    );
    let out = crate::helpers::run(&["run", "--ns", "a", "--key", "b", "--db", "x.db"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = crate::helpers::run(&[
        "run",
        "--ns",
        "a",
        "--key",
        "bad key",
        "--db",
        "/nonexistent/dir/x.db",
        "--",
        "true",
    ]);
    assert_ne!(out.code, 0, "{out:?}");
}

#[test]
fn sigterm_to_idem_run_stops_the_command_and_records_it_for_review() {
    let db = LocalDb::new();
    let marker = db.file("started");
    let path = db.path();
    let script = format!("touch {}; exec sleep 30", marker.display());
    let runner = idem()
        .args(["run", "--db", &path, "--ns", "cron", "--key", "stopped"])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn runner");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &runner.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let out = runner.wait_with_output().expect("runner");
    assert_eq!(out.status.code(), Some(128 + 9), "{out:?}");
    assert_eq!(db.state("stopped"), "needs_review");
}
