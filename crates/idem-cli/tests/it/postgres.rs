//! The same tools on PostgreSQL: drills through a server on a PostgreSQL ledger, and
//! `idem run --db postgres://…`. Skipped (with a note) unless `IDEM_TEST_PG` is set.

use idem_testkit::pg::PgDb;

use crate::helpers::{run, Server};

#[test]
fn drills_pass_and_run_works_on_postgres() {
    let Some(db) = PgDb::create("drills_pass_and_run_works_on_postgres") else {
        return;
    };
    let url = db.url();
    let dir = tempfile::tempdir().expect("tempdir");

    // idem run directly on the PostgreSQL ledger.
    let args = [
        "run", "--db", url, "--ns", "cron", "--key", "pg-job", "--", "echo", "once",
    ];
    let a = run(&args);
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(a.stdout, "once\n");
    let b = run(&args);
    assert_eq!(b.code, 19, "{b:?}");
    assert_eq!(b.stdout, "once\n");
    let c = run(&[
        "run", "--db", url, "--ns", "cron", "--key", "pg-75", "--", "sh", "-c", "exit 75",
    ]);
    assert_eq!(c.code, 75, "{c:?}");

    // All drills through a server on the same database.
    let server = Server::start_url(url, &dir.path().join("serve.log"));
    let out = server.idem(&["drill", "--json"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(out.json()["passed"], true);
    let drills = out.json()["drills"].clone();
    assert!(
        drills.as_array().is_some_and(|d| d
            .iter()
            .any(|r| r["drill"] == "zombie-after-reclaim" && r["pass"] == true)),
        "{drills}"
    );
    drop(server);
}
