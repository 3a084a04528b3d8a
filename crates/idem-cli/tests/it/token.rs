//! `idem token create`, `list` and `revoke`.

use crate::helpers::{run, run_with, token_create, Server};

#[test]
fn token_create_prints_only_the_secret_and_the_server_requires_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
    let db_url = format!("sqlite://{}", db.display());
    let out = token_create("*", "operator", &["--label", "ci"], &db_url);
    assert_eq!(out.code, 0, "{out:?}");
    let secret = out.stdout.strip_suffix('\n').expect("one line");
    assert!(!secret.contains('\n'), "{out:?}");
    assert!(secret.starts_with("idem_"), "{out:?}");
    assert_eq!(secret.len(), "idem_".len() + 48);
    assert!(!out.stderr.contains(secret), "secret leaked on stderr");

    // The server now requires it.
    let server = Server::start_on(&db);
    let anon = server.idem(&["ns", "get", "payments"]);
    assert_eq!(anon.code, 20, "{anon:?}");
    assert!(anon.stderr.contains("unauthorized"), "{anon:?}");
    let authed = server.idem(&["ns", "get", "payments", "--token", secret]);
    assert_eq!(authed.code, 0, "{authed:?}");
    assert!(!authed.stdout.contains(secret) && !authed.stderr.contains(secret));

    // Drills work with an operator token of scope `*`, and fail without one.
    let drill = server.idem(&["drill", "--only", "paused", "--token", secret]);
    assert_eq!(drill.code, 0, "{drill:?}");
    assert!(!drill.stdout.contains(secret) && !drill.stderr.contains(secret));
    let drill = server.idem(&["drill", "--only", "paused"]);
    assert_eq!(drill.code, 1, "{drill:?}");
    assert!(drill.stdout.contains("FAIL"), "{drill:?}");
}

#[test]
fn token_create_rejects_a_bad_namespace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = format!("sqlite://{}", dir.path().join("idem.db").display());
    let out = token_create("a/b", "worker", &[], &db);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.is_empty());
    let out = token_create("x", "root", &[], &db);
    assert_eq!(out.code, 2, "{out:?}");
}

/// `idem run` gives the command its lease token as IDEM_LEASE_TOKEN only: IDEM_TOKEN stays the
/// operator's API token, so a command that calls `idem` itself is authorized.
#[test]
fn run_passes_the_api_token_through_and_the_lease_as_idem_lease_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
    let db_url = format!("sqlite://{}", db.display());
    let created = token_create("*", "operator", &[], &db_url);
    assert_eq!(created.code, 0, "{created:?}");
    let secret = created.stdout.trim().to_owned();
    let server = Server::start_on(&db);
    let seen = dir.path().join("seen.json");
    // The child reads the record and heartbeats its own lease with the inherited variables.
    let script = format!(
        "test \"$IDEM_TOKEN\" = \"$API\" || exit 7; \
         test -n \"$IDEM_LEASE_TOKEN\" || exit 8; \
         \"$IDEM\" get cron nightly --json > {seen} || exit 9; \
         \"$IDEM\" heartbeat cron nightly > /dev/null || exit 10; \
         echo child-ok",
        seen = seen.display()
    );
    let out = run_with(
        &[
            "run", "--ns", "cron", "--key", "nightly", "--", "sh", "-c", &script,
        ],
        "",
        &[
            ("IDEM_URL", server.url.as_str()),
            ("IDEM_TOKEN", secret.as_str()),
            ("API", secret.as_str()),
            ("IDEM", env!("CARGO_BIN_EXE_idem")),
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "child-ok\n");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&seen).expect("the child wrote"))
            .expect("json");
    assert_eq!(rec["record"]["state"], "processing", "{rec}");
    let after = server.idem(&["get", "cron", "nightly", "--json", "--token", &secret]);
    assert_eq!(after.json()["record"]["state"], "completed", "{after:?}");
    assert!(!out.stderr.contains(&secret), "{out:?}");
}

#[test]
fn token_list_and_revoke_manage_tokens_for_people() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
    let db_url = format!("sqlite://{}", db.display());
    let create = |role: &str, extra: &[&str]| {
        let out = token_create("*", role, extra, &db_url);
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout.trim().to_owned()
    };
    let admin = create("admin", &[]);
    let worker = create("worker", &["--expires", "90d", "--label", "alice"]);
    let bad = token_create("*", "worker", &["--expires", "soon"], &db_url);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("--expires"), "{bad:?}");

    let list = run(&["token", "list", "--db", &db_url]);
    assert_eq!(list.code, 0, "{list:?}");
    assert!(list.stdout.contains("EXPIRES"), "{list:?}");
    assert!(list.stdout.contains("alice"), "{list:?}");
    assert!(!list.stdout.contains(&admin) && !list.stdout.contains(&worker));
    let worker_line = list
        .stdout
        .lines()
        .find(|l| l.contains("alice"))
        .expect("the worker is listed");
    let id = worker_line
        .split_whitespace()
        .next()
        .expect("an id column")
        .to_owned();

    let server = Server::start_on(&db);
    assert_eq!(
        server
            .idem(&["ns", "get", "payments", "--token", &admin])
            .code,
        0
    );
    let refused = run(&["token", "revoke", &id, "--db", &db_url]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("--yes"), "{refused:?}");
    let ok = run(&["token", "revoke", &id, "--yes", "--db", &db_url]);
    assert_eq!(ok.code, 0, "{ok:?}");
    let again = run(&["token", "revoke", &id, "--yes", "--db", &db_url]);
    assert_eq!(again.code, 1, "{again:?}");
    let list = run(&["token", "list", "--db", &db_url]);
    assert!(!list.stdout.contains("alice"), "{list:?}");
    // The running server refuses the revoked token on its next call.
    let whoami = server.idem(&["ns", "get", "payments", "--token", &worker]);
    assert_eq!(whoami.code, 20, "{whoami:?}");
    assert!(whoami.stderr.contains("unauthorized"), "{whoami:?}");
}
