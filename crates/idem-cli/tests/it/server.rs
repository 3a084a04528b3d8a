//! Client verbs, `idem run --url` and `idem drill` against a real `idem serve`.

use crate::helpers::{free_port, run, shell, Server};

fn token_of(out: &crate::helpers::Out) -> String {
    out.json()["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token in {out:?}"))
        .to_owned()
}

#[test]
fn claim_complete_replay_conflict_over_http() {
    let s = Server::start();
    let key = "evt/123?charge#1"; // percent-encoded as one path segment
    let a = s.idem(&[
        "claim",
        "payments",
        key,
        "--payload",
        r#"{"amount":10}"#,
        "--json",
    ]);
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(a.json()["outcome"], "acquired");
    let tok = token_of(&a);

    // In flight while the lease is held.
    let b = s.idem(&["claim", "payments", key, "--payload", r#"{"amount":10}"#]);
    assert_eq!(b.code, 10, "{b:?}");
    assert!(b.stdout.contains("in_flight"), "{b:?}");

    let c = s.idem(&[
        "complete",
        "payments",
        key,
        "--lease-token",
        &tok,
        "--result",
        r#"{"charge":"ch_1"}"#,
        "--external-ref",
        "ch_1",
    ]);
    assert_eq!(c.code, 0, "{c:?}");
    assert!(c.stdout.contains("completed"), "{c:?}");

    // Human output never shows the lease token.
    let human = s.idem(&["claim", "payments", key, "--payload", r#"{"amount":10}"#]);
    assert_eq!(human.code, 19, "{human:?}");
    assert!(
        human.stdout.contains("completed") && human.stdout.contains("ch_1"),
        "{human:?}"
    );
    assert!(!human.stdout.contains(&tok));

    let d = s.idem(&[
        "claim",
        "payments",
        key,
        "--payload",
        r#"{"amount":99}"#,
        "--json",
    ]);
    assert_eq!(d.code, 14, "{d:?}");
    assert_eq!(d.json()["outcome"], "conflict");

    let g = s.idem(&["get", "payments", key]);
    assert_eq!(g.code, 0, "{g:?}");
    assert!(
        g.stdout.contains("duplicate_hit") && g.stdout.contains("conflict"),
        "{g:?}"
    );
    let gj = s.idem(&["get", "payments", key, "--json"]);
    assert_eq!(gj.json()["record"]["key"], key);

    let ls = s.idem(&["ls", "payments", "--state", "completed", "--json"]);
    assert_eq!(ls.code, 0, "{ls:?}");
    assert_eq!(ls.json()["items"][0]["key"], key);
    let lsh = s.idem(&["ls", "payments"]);
    assert!(
        lsh.stdout.contains("KEY") && lsh.stdout.contains(key),
        "{lsh:?}"
    );

    // The review queue across namespaces: a doubtful charge waits for a person.
    let c = s.idem(&[
        "claim",
        "refunds",
        "evt_9:refund",
        "--owner",
        "exec-9",
        "--json",
    ]);
    assert_eq!(c.code, 0, "{c:?}");
    let lease = token_of(&c);
    let f = s.idem(&[
        "fail",
        "refunds",
        "evt_9:refund",
        "--lease-token",
        &lease,
        "--kind",
        "ambiguous",
        "--category",
        "timeout",
        "--message",
        "no answer",
    ]);
    assert!(f.stdout.contains("needs_review"), "{f:?}");
    let rv = s.idem(&["review"]);
    assert_eq!(rv.code, 0, "{rv:?}");
    assert!(
        rv.stdout.contains("NAMESPACE")
            && rv.stdout.contains("refunds")
            && rv.stdout.contains("evt_9:refund")
            && rv.stdout.contains("needs_review")
            && !rv.stdout.contains(key),
        "{rv:?}"
    );
    let rj = s.idem(&["review", "--owner", "exec-9", "--json"]);
    assert_eq!(rj.json()["items"][0]["key"], "evt_9:refund", "{rj:?}");
    let none = s.idem(&["review", "--namespace", "payments", "--json"]);
    assert_eq!(none.json()["items"], serde_json::json!([]), "{none:?}");

    // A stale/made-up lease token is fenced.
    let stale = s.idem(&[
        "complete",
        "payments",
        key,
        "--lease-token",
        "1.00000000000000000000000000000000",
        "--result",
        "{}",
    ]);
    assert_eq!(stale.code, 18, "{stale:?}");

    let missing = s.idem(&["get", "payments", "no-such-key"]);
    assert_eq!(missing.code, 20, "{missing:?}");
    assert!(missing.stderr.contains("not_found"), "{missing:?}");
}

/// Exit 0 means `acquired` only: a replayed duplicate exits 19, so `idem claim … && cmd` runs
/// `cmd` once per key, not once per delivery.
#[test]
fn claim_of_a_completed_key_exits_19_and_an_and_chain_skips_the_effect() {
    let s = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let effects = dir.path().join("effects");
    let script = format!(
        "\"$IDEM\" claim shop order-1:charge --url {} > /dev/null && echo charged >> {}",
        s.url,
        effects.display()
    );
    let count = || {
        std::fs::read_to_string(&effects)
            .unwrap_or_default()
            .lines()
            .count()
    };

    let a = s.idem(&["claim", "shop", "order-1:charge", "--json"]);
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(a.json()["outcome"], "acquired");
    let tok = token_of(&a);
    let c = s.idem(&[
        "complete",
        "shop",
        "order-1:charge",
        "--lease-token",
        &tok,
        "--result",
        r#"{"charge":"ch_1"}"#,
    ]);
    assert_eq!(c.code, 0, "{c:?}");

    let dup = s.idem(&["claim", "shop", "order-1:charge", "--json"]);
    assert_eq!(dup.code, 19, "{dup:?}");
    assert_eq!(dup.json()["outcome"], "completed");
    assert_eq!(dup.json()["record"]["result"]["charge"], "ch_1");
    let human = s.idem(&["claim", "shop", "order-1:charge"]);
    assert_eq!(human.code, 19, "{human:?}");
    assert!(human.stdout.contains("completed"), "{human:?}");

    // The duplicate delivery: the chained effect does not run.
    let out = shell(&script, &[]);
    assert_eq!(out.code, 19, "{out:?}");
    assert_eq!(count(), 0, "the effect ran for a duplicate");

    // A fresh key: acquired, 0, the effect runs once.
    let fresh = script.replace("order-1:charge", "order-2:charge");
    let out = shell(&fresh, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(count(), 1);
    let help = run(&["claim", "--help"]);
    assert!(
        help.stdout.contains("19   completed"),
        "the code is documented: {help:?}"
    );
}

#[test]
fn review_backoff_approval_paths_and_their_exit_codes() {
    let s = Server::start();
    // Timeout after sending → needs_review (12) → operator resolves → replay (19).
    let a = s.idem(&["claim", "ops", "k-review", "--json"]);
    let tok = token_of(&a);
    let f = s.idem(&[
        "fail",
        "ops",
        "k-review",
        "--lease-token",
        &tok,
        "--category",
        "timeout",
        "--message",
        "read timed out",
    ]);
    assert_eq!(f.code, 0, "{f:?}");
    assert!(f.stdout.contains("ambiguous"), "{f:?}");
    let r = s.idem(&["claim", "ops", "k-review"]);
    assert_eq!(r.code, 12, "{r:?}");
    let q = s.idem(&["ls", "ops", "--state", "needs_review", "--json"]);
    assert_eq!(q.json()["items"][0]["key"], "k-review");
    let res = s.idem(&[
        "resolve",
        "ops",
        "k-review",
        "--action",
        "completed",
        "--note",
        "checked the provider",
        "--external-ref",
        "ch_9",
    ]);
    assert_eq!(res.code, 0, "{res:?}");
    assert_eq!(s.idem(&["claim", "ops", "k-review"]).code, 19);

    // Retryable with Retry-After → backoff (11).
    let a = s.idem(&["claim", "ops", "k-backoff", "--json"]);
    let tok = token_of(&a);
    let f = s.idem(&[
        "fail",
        "ops",
        "k-backoff",
        "--lease-token",
        &tok,
        "--http-status",
        "429",
        "--retry-after",
        "120",
        "--json",
    ]);
    assert_eq!(f.code, 0, "{f:?}");
    assert_eq!(f.json()["state"], "failed_retryable");
    assert_eq!(s.idem(&["claim", "ops", "k-backoff"]).code, 11);

    // Prepared for approval → awaiting_approval (13) → approve → acquired (resumed).
    let a = s.idem(&["claim", "ops", "k-approve", "--json"]);
    let tok = token_of(&a);
    let p = s.idem(&[
        "prepare",
        "ops",
        "k-approve",
        "--lease-token",
        &tok,
        "--payload",
        r#"{"draft":"Hello"}"#,
        "--approval-required",
    ]);
    assert_eq!(p.code, 0, "{p:?}");
    assert_eq!(s.idem(&["claim", "ops", "k-approve"]).code, 13);
    let ok = s.idem(&["approve", "ops", "k-approve", "--note", "looks good"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    let again = s.idem(&["claim", "ops", "k-approve", "--json"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.json()["resumed"], true);
    assert_eq!(again.json()["record"]["prepared_payload"]["draft"], "Hello");
    let hb = s.idem(&[
        "heartbeat",
        "ops",
        "k-approve",
        "--lease-token",
        &token_of(&again),
    ]);
    assert_eq!(hb.code, 0, "{hb:?}");

    // Rejected → failed_permanent (17).
    let a = s.idem(&["claim", "ops", "k-reject", "--json"]);
    let tok = token_of(&a);
    s.idem(&[
        "prepare",
        "ops",
        "k-reject",
        "--lease-token",
        &tok,
        "--payload",
        "{}",
        "--approval-required",
    ]);
    assert_eq!(s.idem(&["reject", "ops", "k-reject"]).code, 0);
    assert_eq!(s.idem(&["claim", "ops", "k-reject"]).code, 17);
}

#[test]
fn namespace_policy_pause_resume_and_limits() {
    let s = Server::start();
    let g = s.idem(&["ns", "get", "cron", "--json"]);
    assert_eq!(g.code, 0, "{g:?}");
    assert_eq!(g.json()["policy"]["lease_ms"], 30000);
    let set = s.idem(&[
        "ns",
        "set",
        "cron",
        "--json",
        r#"{"retry": {"max_attempts": 3}}"#,
        "--raw",
    ]);
    assert_eq!(set.code, 0, "{set:?}");
    assert_eq!(set.json()["policy"]["retry"]["max_attempts"], 3);
    assert_eq!(set.json()["policy"]["retry"]["base_ms"], 1000);
    let human = s.idem(&["ns", "get", "cron"]);
    assert!(
        human
            .stdout
            .lines()
            .any(|l| l.starts_with("retry.max_attempts") && l.ends_with(" 3")),
        "{human:?}"
    );
    let bad = s.idem(&["ns", "set", "cron", "--json", r#"{"nope": 1}"#]);
    assert_eq!(bad.code, 20, "{bad:?}");
    assert!(bad.stderr.contains("unknown_field"), "{bad:?}");

    // Paused: claims and runs get 15; resume lets them through.
    assert_eq!(s.idem(&["pause", "cron"]).code, 0);
    assert_eq!(s.idem(&["claim", "cron", "k1"]).code, 15);
    let r = s.idem(&["run", "--ns", "cron", "--key", "k1", "--", "echo", "hi"]);
    assert_eq!(r.code, 15, "{r:?}");
    assert!(r.stdout.is_empty());
    assert_eq!(s.idem(&["resume", "cron"]).code, 0);
    let r = s.idem(&["run", "--ns", "cron", "--key", "k1", "--", "echo", "hi"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "hi\n");

    // Limited: no new keys today; replays still answer.
    let set = s.idem(&["ns", "set", "cron", "--json", r#"{"daily_limit": 1}"#]);
    assert_eq!(set.code, 0, "{set:?}");
    let r = s.idem(&["run", "--ns", "cron", "--key", "k2", "--", "echo", "no"]);
    assert_eq!(r.code, 16, "{r:?}");
    let r = s.idem(&["run", "--ns", "cron", "--key", "k1", "--", "echo", "no"]);
    assert_eq!(r.code, 19, "{r:?}");
    assert_eq!(r.stdout, "hi\n", "replayed, not re-run");
}

#[test]
fn run_over_http_runs_once_and_reports_failures() {
    let s = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = dir.path().join("effects");
    let script = format!("echo sent; echo x >> {}", counter.display());
    let args = [
        "run",
        "--ns",
        "mail",
        "--key",
        "welcome:u1",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let a = s.idem(&args);
    assert_eq!(a.code, 0, "{a:?}");
    let b = s.idem(&args);
    assert_eq!(b.code, 19, "{b:?}");
    assert_eq!(b.stdout, "sent\n");
    assert_eq!(
        std::fs::read_to_string(&counter)
            .unwrap_or_default()
            .lines()
            .count(),
        1
    );
    let g = s.idem(&["get", "mail", "welcome:u1", "--json"]);
    assert_eq!(g.json()["record"]["result"]["stdout"], "sent\n");

    let f = s.idem(&[
        "run", "--ns", "mail", "--key", "k75", "--", "sh", "-c", "exit 75",
    ]);
    assert_eq!(f.code, 75, "{f:?}");
    let g = s.idem(&["get", "mail", "k75", "--json"]);
    assert_eq!(g.json()["record"]["state"], "failed_retryable");
}

#[test]
fn unreachable_server_exits_21() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = run(&["claim", "a", "b", "--url", &url]);
    assert_eq!(out.code, 21, "{out:?}");
    let out = run(&[
        "run", "--url", &url, "--ns", "a", "--key", "b", "--", "echo", "no",
    ]);
    assert_eq!(out.code, 21, "{out:?}");
    assert!(out.stdout.is_empty());
}

#[test]
fn all_drills_pass_against_the_real_server() {
    let s = Server::start();
    let out = s.idem(&["drill", "--json"]);
    let report = out.json();
    assert_eq!(
        out.code,
        0,
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
    assert_eq!(report["passed"], true);
    assert_eq!(report["drills"].as_array().map(Vec::len), Some(12));
    // The zombie's fenced completion: one completion kept, both effects seen, alerted.
    let zombie = report["drills"]
        .as_array()
        .and_then(|d| d.iter().find(|r| r["drill"] == "zombie-after-reclaim"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(zombie["pass"], true, "{zombie}");
    assert_eq!(zombie["effects"], 2);
    assert_eq!(zombie["state"], "completed");
    // The human table.
    let human = s.idem(&["drill", "--only", "concurrent"]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stdout.contains("concurrent-duplicates") && human.stdout.contains("PASS"));
}

#[test]
fn complete_and_fail_report_cost_from_the_command_line() {
    let s = Server::start();
    let a = s.idem(&["claim", "ai", "draft-1", "--json"]);
    let tok = token_of(&a);
    let f = s.idem(&[
        "fail",
        "ai",
        "draft-1",
        "--lease-token",
        &tok,
        "--kind",
        "retryable",
        "--cost-tokens",
        "1200",
        "--cost-usd",
        "0.018",
        "--json",
    ]);
    assert_eq!(f.code, 0, "{f:?}");
    assert_eq!(
        f.json()["record"]["cost"],
        serde_json::json!({"tokens": 1200, "usd": 0.018, "retry_tokens": 0, "retry_usd": 0.0})
    );
    std::thread::sleep(std::time::Duration::from_millis(1100)); // past the backoff
    let b = s.idem(&["claim", "ai", "draft-1", "--json"]);
    assert_eq!(b.json()["outcome"], "acquired", "{b:?}");
    let tok = token_of(&b);
    // A negative amount is the server's 422 naming the member; nothing is written.
    let bad = s.idem(&[
        "complete",
        "ai",
        "draft-1",
        "--lease-token",
        &tok,
        "--cost-usd",
        "-1",
    ]);
    assert_ne!(bad.code, 0, "{bad:?}");
    assert!(
        format!("{}{}", bad.stdout, bad.stderr).contains("cost.usd"),
        "{bad:?}"
    );
    let c = s.idem(&[
        "complete",
        "ai",
        "draft-1",
        "--lease-token",
        &tok,
        "--cost-tokens",
        "800",
        "--json",
    ]);
    assert_eq!(c.code, 0, "{c:?}");
    assert_eq!(
        c.json()["record"]["cost"],
        serde_json::json!({"tokens": 2000, "usd": 0.018, "retry_tokens": 800, "retry_usd": 0.0})
    );
}

/// The configuration file an earlier version wrote (`stats_interval = "30s"` among others)
/// starts today's server, which says in its log what it uses instead.
#[test]
fn an_earlier_versions_config_file_starts_the_server_with_a_warning() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../idem-server/tests/fixtures/earlier-default-config.toml"
    );
    let log = dir.path().join("serve.log");
    let addr = format!("127.0.0.1:{}", free_port());
    let db = format!("sqlite://{}", dir.path().join("idem.db").display());
    let mut child = crate::helpers::idem()
        .args(["serve", "--config", config, "--listen", &addr, "--db", &db])
        .env_remove("IDEM_STATS_INTERVAL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let up = loop {
        if crate::helpers::http_status(&addr, "/healthz") == Some(200) {
            break true;
        }
        if child.try_wait().ok().flatten().is_some() || std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        up,
        "idem serve did not start on the earlier config:\n{text}"
    );
    let warning = text
        .lines()
        .find(|l| l.contains("stats_interval"))
        .unwrap_or_else(|| panic!("no upgrade warning in the log:\n{text}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("using 1s"), "{warning}");
}
