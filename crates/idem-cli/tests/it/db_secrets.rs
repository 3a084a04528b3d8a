//! Database passwords never reach the terminal or the log: start-up lines and connection
//! errors of `idem serve`, `idem run --db` and `idem token create` show the URL redacted.

use crate::helpers::{free_port, run, token_create};

/// Pieces of the passwords used below; none may appear in any output.
const SECRETS: [&str; 5] = ["Sup3r", "p@ss", "w0rd", "Qu3ry", "12/ss"];

fn assert_hidden(what: &str, out: &crate::helpers::Out) {
    for s in SECRETS {
        assert!(
            !out.stderr.contains(s) && !out.stdout.contains(s),
            "{what} shows {s:?}: {out:?}"
        );
    }
}

/// URLs with nasty passwords pointing at a port where nothing listens (each host part is
/// 127.0.0.1 however the driver splits the URL, so nothing is ever resolved by name).
fn urls(port: u16) -> Vec<String> {
    vec![
        format!("postgres://postgres:Sup3r%40Secret@127.0.0.1:{port}/idem"),
        format!("postgresql://postgres:p@ss:w0rd@127.0.0.1:{port}/idem"),
        format!("postgres://postgres@127.0.0.1:{port}/idem?sslmode=disable&PassWord=Qu3ry"),
        format!("postgres://postgres:12/ss@127.0.0.1:{port}/idem"),
    ]
}

#[test]
fn serve_start_up_and_connection_errors_hide_the_database_password() {
    let port = free_port();
    for url in urls(port) {
        let listen = format!("127.0.0.1:{}", free_port());
        let out = run(&["serve", "--listen", &listen, "--db", &url]);
        assert_ne!(out.code, 0, "{url}: {out:?}");
        assert!(
            out.stderr.contains("cannot open the ledger"),
            "{url}: {out:?}"
        );
        assert_hidden(&url, &out);
    }
    // The start-up line names the database it opens, redacted.
    let url = &urls(port)[0];
    let listen = format!("127.0.0.1:{}", free_port());
    let out = run(&["serve", "--listen", &listen, "--db", url]);
    assert!(
        out.stderr
            .contains(&format!("postgres://postgres:***@127.0.0.1:{port}/idem")),
        "{out:?}"
    );
}

#[test]
fn run_and_token_create_errors_hide_the_database_password() {
    let port = free_port();
    for url in urls(port) {
        let out = run(&[
            "run", "--db", &url, "--ns", "a", "--key", "b", "--", "echo", "no",
        ]);
        assert_eq!(out.code, 1, "{url}: {out:?}");
        assert!(out.stderr.contains("cannot open the ledger"), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert_hidden(&url, &out);
        let out = token_create("*", "admin", &[], &url);
        assert_eq!(out.code, 1, "{url}: {out:?}");
        assert_hidden(&url, &out);
    }
    let out = run(&[
        "run",
        "--db",
        "mysql://root:Sup3r@h/db",
        "--ns",
        "a",
        "--key",
        "b",
        "--",
        "true",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("mysql://root:***@h/db"), "{out:?}");
    assert_hidden("mysql", &out);
}

/// On a real PostgreSQL server (trust auth): a wrong database name fails after the server
/// answered, and the error names the database but not the password.
#[test]
fn a_wrong_database_on_a_real_server_is_reported_without_the_password() {
    let Ok(admin) = std::env::var("IDEM_TEST_PG") else {
        eprintln!("IDEM_TEST_PG not set: skipped");
        return;
    };
    let Some((base, _)) = admin.rsplit_once('/') else {
        panic!("IDEM_TEST_PG is a URL with a path");
    };
    let Some((scheme, rest)) = base.split_once("://") else {
        panic!("IDEM_TEST_PG is a URL");
    };
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let url = format!("{scheme}://postgres:Sup3r%40p%2Fss@{host}/idem_no_such_db?password=Qu3ry");
    let out = run(&[
        "run", "--db", &url, "--ns", "a", "--key", "b", "--", "echo", "no",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("idem_no_such_db"), "{out:?}");
    assert_hidden("run", &out);
    let listen = format!("127.0.0.1:{}", free_port());
    let out = run(&["serve", "--listen", &listen, "--db", &url]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("idem_no_such_db"), "{out:?}");
    assert_hidden("serve", &out);
}
