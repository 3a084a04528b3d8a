//! `idem token create`.

use crate::helpers::{run, Server};

#[test]
fn token_create_prints_only_the_secret_and_the_server_requires_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("idem.db");
    let db_url = format!("sqlite://{}", db.display());
    let out = run(&[
        "token",
        "create",
        "--namespace",
        "*",
        "--role",
        "operator",
        "--label",
        "ci",
        "--db",
        &db_url,
    ]);
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
    let out = run(&[
        "token",
        "create",
        "--namespace",
        "a/b",
        "--role",
        "worker",
        "--db",
        &db,
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.is_empty());
    let out = run(&[
        "token",
        "create",
        "--namespace",
        "x",
        "--role",
        "root",
        "--db",
        &db,
    ]);
    assert_eq!(out.code, 2, "{out:?}");
}
