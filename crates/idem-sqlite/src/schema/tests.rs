use super::checkpoint::{escalation, open_checkpointer, CHECKPOINT_EVERY, WAL_TRUNCATE_FRAMES};
use super::migrations::ALERT_SECRETS_OUT_OF_THE_POLICY;
use super::*;

/// Applied migrations are frozen text and keep their own spelling of state names; this
/// proves it is the domain's, the one every query is built with (the partial indexes are
/// only used by queries whose predicate matches theirs).
#[test]
fn migrations_spell_states_as_the_domain_does() {
    use idem_core::State;
    use idem_store::sql;
    let all = MIGRATIONS.concat();
    let final_index = format!("WHERE state IN ({});", sql::retained_states());
    assert!(all.contains(&final_index), "{final_index}");
    let processing = format!("WHERE state = {};", sql::state(State::Processing));
    assert!(all.contains(&processing), "{processing}");
    let review = format!(
        "WHERE state IN ({});",
        sql::states(&idem_store::REVIEW_STATES)
    );
    assert!(all.contains(&review), "{review}");
    // The counters are seeded with exactly every state.
    for s in State::ALL {
        assert!(all.contains(&format!("SELECT {}", sql::state(s))), "{s:?}");
    }
    assert_eq!(
        all.matches("UNION ALL SELECT '").count(),
        State::ALL.len() - 1
    );
}

/// A version-1 ledger (events keyed by namespace and key) migrates to version 2: every
/// event points at its record's row id and is found through the new index.
#[test]
fn version_1_events_get_their_record_id() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("v1.db");
    {
        let conn = Connection::open(&path).expect("open");
        conn.execute_batch(MIGRATIONS[0]).expect("v1 schema");
        conn.pragma_update(None, "user_version", 1)
            .expect("version");
        for (i, key) in ["a", "b"].iter().enumerate() {
            conn.execute(
                "INSERT INTO records (namespace, key, state, attempt, created_at, updated_at, \
                     lease_expiry, reported, budget_base, window_start, active_at, stuck_alerted, \
                     version) VALUES ('n', ?1, 'completed', 1, 0, 0, 'none', 1, 0, 0, 0, 0, 1)",
                [key],
            )
            .expect("record");
            for at in 0..=i {
                conn.execute(
                    "INSERT INTO events (namespace, key, at, type, attempt) \
                         VALUES ('n', ?1, ?2, 'acquired', 1)",
                    rusqlite::params![key, at as i64],
                )
                .expect("event");
            }
        }
    }
    let conn = open_writer(&path, Duration::from_secs(1)).expect("migrate");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, latest_version());
    // Version 9 counted the existing records into the per-namespace counters (version 3's
    // ledger-wide ones are gone since version 12).
    let counts: Vec<(String, i64)> = conn
        .prepare("SELECT namespace || '/' || state, n FROM namespace_counts WHERE n <> 0")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(counts, [("n/completed".to_owned(), 2)]);
    let gone: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'record%count%'",
            [],
            |r| r.get(0),
        )
        .expect("schema");
    assert_eq!(gone, 0, "version 12 drops record_counts and its triggers");
    let per_record: Vec<(String, i64, i64)> = conn
        .prepare(
            "SELECT r.key, r.rowid, (SELECT COUNT(*) FROM events e WHERE e.rid = r.rowid) \
                 FROM records r ORDER BY r.key",
        )
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(per_record.len(), 2);
    assert_eq!((per_record[0].0.as_str(), per_record[0].2), ("a", 1));
    assert_eq!((per_record[1].0.as_str(), per_record[1].2), ("b", 2));
    assert_ne!(per_record[0].1, per_record[1].1);
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT seq FROM events WHERE rid = 1 ORDER BY seq",
            [],
            |r| r.get(3),
        )
        .expect("plan");
    assert!(plan.contains("events_by_rid"), "{plan}");
}

/// A version-12 ledger's daily counts move into the hourly buckets at version 13: a day
/// its buckets under-count (acquisitions before version 6) gets the difference on its
/// first hour, a day they already count is left alone, the cost counters are untouched,
/// and `daily_counts` is gone; the count the ceiling reads is each day's count before.
#[test]
fn version_12_daily_counts_move_into_the_hourly_buckets() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("v12.db");
    let (d1, d2, d3) = (20_000_i64, 20_001_i64, 20_002_i64);
    {
        let conn = Connection::open(&path).expect("open");
        for sql in &MIGRATIONS[..12] {
            conn.execute_batch(sql).expect("schema");
        }
        conn.pragma_update(None, "user_version", 12)
            .expect("version");
        for (ns, day, count) in [("a", d1, 5), ("a", d2, 3), ("b", d2, 4), ("a", d3, 2)] {
            conn.execute(
                "INSERT INTO daily_counts (namespace, day, count) VALUES (?1, ?2, ?3)",
                rusqlite::params![ns, day, count],
            )
            .expect("daily count");
        }
        // d1: two of five counted by the buckets (hours 3 and 7, one carries a cost);
        // d2: all three of `a` counted; `b` none; d3: first hour already has a bucket.
        for (ns, hour, first, tokens) in [
            ("a", d1 * 24 + 3, 1, 0),
            ("a", d1 * 24 + 7, 1, 40),
            ("a", d2 * 24 + 23, 3, 0),
            ("a", d3 * 24, 1, 9),
        ] {
            conn.execute(
                "INSERT INTO ns_stats (namespace, hour, acquired_first, acquired_retry, \
                     tokens, usd_nanos, retry_tokens, retry_usd_nanos) \
                     VALUES (?1, ?2, ?3, 0, ?4, 0, 0, 0)",
                rusqlite::params![ns, hour, first, tokens],
            )
            .expect("bucket");
        }
    }
    let conn = open_writer(&path, Duration::from_secs(1)).expect("migrate");
    for (ns, day, count) in [
        ("a", d1, 5),
        ("a", d2, 3),
        ("b", d2, 4),
        ("a", d3, 2),
        ("b", d1, 0),
    ] {
        assert_eq!(
            crate::write_ops::daily_count(&conn, ns, day).expect("count"),
            count,
            "{ns} {day}"
        );
    }
    let (tokens, first_of_d1): (i64, i64) = conn
        .query_row(
            "SELECT SUM(tokens), SUM(acquired_first) FILTER (WHERE hour = ?1) FROM ns_stats",
            [d1 * 24],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("buckets");
    assert_eq!((tokens, first_of_d1), (49, 3));
    assert!(!has_table(&conn, "daily_counts"));
}

fn has_table(conn: &Connection, name: &str) -> bool {
    conn.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .expect("schema")
        > 0
}

/// A version-3 ledger's alerts move to the outbox at version 4: ids, states, tries and
/// due times kept, payloads readable by the alert sender, ids never reused; the old
/// table is gone.
#[test]
fn version_3_alerts_move_to_the_outbox() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("v3.db");
    {
        let conn = Connection::open(&path).expect("open");
        for sql in &MIGRATIONS[..3] {
            conn.execute_batch(sql).expect("schema");
        }
        conn.pragma_update(None, "user_version", 3)
            .expect("version");
        for (id, key, status, tries, next_at) in [
            (3, "a", "pending", 2, 9_000),
            (5, "b", "sent", 1, 1_000),
            (6, "c", "gave_up", 6, 1_000),
            (7, "d", "pending", 0, 5_000),
        ] {
            conn.execute(
                "INSERT INTO alerts (id, namespace, key, reason, state, error_category, \
                     attempt, created_at, next_at, tries, status) \
                     VALUES (?1, 'n', ?2, 'needs_review', 'needs_review', 'timeout', 2, 100, \
                     ?3, ?4, ?5)",
                rusqlite::params![id, key, next_at, tries, status],
            )
            .expect("alert");
        }
        // The highest id ever handed out was deleted (retention): it must not come back.
        conn.execute("DELETE FROM alerts WHERE id = 7", [])
            .expect("delete");
    }
    let conn = open_writer(&path, Duration::from_secs(1)).expect("migrate");
    type OutboxRow = (i64, String, String, String, i64, i64, Vec<u8>);
    let rows: Vec<OutboxRow> = conn
        .prepare("SELECT id, kind, key, state, attempts, due_at, payload FROM outbox ORDER BY id")
        .expect("prepare")
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let shape: Vec<(i64, &str, &str, &str, i64, i64)> = rows
        .iter()
        .map(|r| (r.0, r.1.as_str(), r.2.as_str(), r.3.as_str(), r.4, r.5))
        .collect();
    assert_eq!(
        shape,
        [
            (3, "alert", "a", "pending", 2, 9_000),
            (5, "alert", "b", "done", 1, 1_000),
            (6, "alert", "c", "dead", 6, 1_000),
        ]
    );
    let p = idem_store::AlertPayload::decode(&rows[0].6).expect("payload");
    let idem_store::AlertPayload {
        reason,
        state,
        error_category,
        attempt,
        traceparent,
    } = p;
    assert_eq!(
        (reason, state, error_category, attempt, traceparent),
        (
            "needs_review".into(),
            "needs_review".into(),
            Some("timeout".into()),
            2,
            None
        )
    );
    assert!(!has_table(&conn, "alerts"));
    conn.execute(
        "INSERT INTO outbox (kind, namespace, key, dedupe, payload, created_at, due_at) \
             VALUES ('alert', 'n', 'e', 'x', x'', 0, 0)",
        [],
    )
    .expect("new item");
    assert_eq!(
        conn.last_insert_rowid(),
        8,
        "ids continue after the old table's"
    );
}

/// A ledger from before the move keeps its alert secrets in the policy text; at upgrade the
/// secret is in `secrets` (kind `alert`, owned by its namespace), the policy keeps every
/// other field, and a namespace without a secret is left as it was.
#[test]
fn alert_secrets_move_out_of_the_policy_text() {
    const S: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("v5.db");
    // The policy text as version 5 wrote it: the serde form, the secret included.
    let old_text = |patch: serde_json::Value| {
        let p = idem_core::Policy::default().patch(&patch).expect("policy");
        serde_json::to_string(&p).expect("text")
    };
    let signed = old_text(serde_json::json!(
        {"lease_ms": 7000, "alert_url": "http://127.0.0.1:9/h", "alert_secret": S}
    ));
    let plain = old_text(serde_json::json!({"lease_ms": 5000}));
    assert!(signed.contains(S));
    {
        let conn = Connection::open(&path).expect("open");
        let before = MIGRATIONS
            .iter()
            .position(|m| *m == ALERT_SECRETS_OUT_OF_THE_POLICY)
            .expect("listed");
        for sql in &MIGRATIONS[..before] {
            conn.execute_batch(sql).expect("schema");
        }
        conn.pragma_update(None, "user_version", before as i64)
            .expect("version");
        for (ns, policy) in [("signed", signed.as_str()), ("plain", plain.as_str())] {
            conn.execute(
                "INSERT INTO namespaces (namespace, policy, paused, updated_at, \
                     retention_ms, audit_retention_ms, stuck_after_ms) \
                     VALUES (?1, ?2, 0, 1234, 1, 1, 1)",
                rusqlite::params![ns, policy],
            )
            .expect("namespace");
        }
    }
    let conn = open_writer(&path, Duration::from_secs(1)).expect("migrate");
    let policy_of = |ns: &str| -> String {
        conn.query_row(
            "SELECT policy FROM namespaces WHERE namespace = ?1",
            [ns],
            |r| r.get(0),
        )
        .expect("policy")
    };
    let mut expected: serde_json::Value = serde_json::from_str(&signed).expect("json");
    expected
        .as_object_mut()
        .and_then(|m| m.remove("alert_secret"))
        .expect("the old text held the secret");
    let migrated: serde_json::Value = serde_json::from_str(&policy_of("signed")).expect("json");
    assert_eq!(migrated, expected, "every other field is kept");
    assert_eq!(policy_of("plain"), plain);
    let secrets: Vec<(String, String, String, i64, Option<i64>)> = conn
        .prepare("SELECT kind, owner, value, created_at, expires_at FROM secrets")
        .expect("prepare")
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        secrets,
        [("alert".into(), "signed".into(), S.into(), 1234, None)]
    );
    let (policy, _) = crate::rows::load_namespace_with_secret(&conn, "signed").expect("load");
    assert_eq!(policy.lease_ms, 7000);
    assert_eq!(policy.alert_secret.as_ref().map(|s| s.expose()), Some(S));
}

fn wal_len(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

/// Starts a checkpointer on `path` before the ledger is opened (`before` prepares the
/// path), lets it try twice, then creates the ledger, writes 1 MiB and waits (10 s at
/// most) until the database file holds it: the checkpoint happened.
fn checkpointer_started_early_checkpoints(name: &str, before: impl FnOnce(&Path)) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join(name);
    before(&path);
    let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
    let cp_path = path.clone();
    let cp =
        std::thread::spawn(move || run_checkpointer(&cp_path, Duration::from_millis(100), stop_rx));
    // Two passes at least before the ledger exists.
    std::thread::sleep(CHECKPOINT_EVERY * 2);
    let conn = open_writer(&path, Duration::from_secs(1)).expect("create");
    conn.execute_batch("CREATE TABLE blobs (b BLOB)")
        .expect("table");
    conn.execute("INSERT INTO blobs VALUES (zeroblob(?1))", [1i64 << 20])
        .expect("insert");
    let db_len = || std::fs::metadata(&path).map_or(0, |m| m.len());
    assert!(db_len() < 1 << 20, "the blob is still only in the WAL");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db_len() < 1 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "not checkpointed within 10 s: db {} B, WAL {} B",
            db_len(),
            wal_len(&path)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(stop);
    cp.join().expect("checkpointer");
}

/// A checkpointer that could not open the ledger at first (here: the file did not exist
/// yet) keeps trying, and checkpoints once it can: the database file takes the WAL's pages.
#[test]
fn a_checkpointer_that_could_not_open_retries_and_checkpoints() {
    checkpointer_started_early_checkpoints("later.db", |_| {});
}

/// A checkpointer that opened the file while it was still empty (the window between its
/// creation and the switch to WAL) does not keep that connection, which would never see
/// the WAL: it opens again and checkpoints. (Before the fix: db 1 KiB, WAL 1.1 MiB.)
#[test]
fn a_checkpointer_that_opened_an_empty_file_still_checkpoints() {
    checkpointer_started_early_checkpoints("empty.db", |p| {
        std::fs::write(p, b"").expect("empty file");
    });
}

/// A WAL that a long read let grow past [`WAL_SIZE_LIMIT`] is cut back to the limit at the
/// first commit after a complete checkpoint, instead of keeping its size for good.
#[test]
fn a_wal_grown_past_the_limit_is_cut_back_after_it_starts_over() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("grown.db");
    let conn = open_writer(&path, Duration::from_secs(1)).expect("create");
    conn.execute_batch("CREATE TABLE blobs (b BLOB)")
        .expect("table");
    // A read transaction pins the WAL: no checkpoint can let it start over meanwhile.
    let reader = open_reader(&path, Duration::from_secs(1)).expect("reader");
    reader.execute_batch("BEGIN").expect("begin");
    let n: i64 = reader
        .query_row("SELECT count(*) FROM blobs", [], |r| r.get(0))
        .expect("read");
    assert_eq!(n, 0);
    let chunk = 4i64 << 20;
    let chunks = WAL_SIZE_LIMIT / chunk + 4;
    for _ in 0..chunks {
        conn.execute("INSERT INTO blobs VALUES (zeroblob(?1))", [chunk])
            .expect("insert");
    }
    conn.execute("DELETE FROM blobs", []).expect("delete");
    let grown = wal_len(&path);
    assert!(grown > WAL_SIZE_LIMIT as u64, "the WAL grew: {grown} B");
    reader.execute_batch("COMMIT").expect("end the read");
    let cp = open_checkpointer(&path, Duration::from_secs(1)).expect("checkpointer");
    let (busy, log, done): (i64, i64, i64) = cp
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .expect("checkpoint");
    assert_eq!((busy, log), (0, done), "a complete checkpoint");
    // The next commit starts the WAL over, and cuts the file back.
    conn.execute("INSERT INTO blobs VALUES (x'00')", [])
        .expect("insert");
    let after = wal_len(&path);
    assert!(
        after <= WAL_SIZE_LIMIT as u64,
        "the WAL kept {after} B after it started over (was {grown} B)"
    );
}

/// Past the threshold a pass starts the WAL over in place while commits keep coming and
/// cuts it to zero once they stopped; under it, it never escalates.
#[test]
fn a_pass_escalates_past_the_threshold_by_whether_commits_keep_coming() {
    let past = WAL_TRUNCATE_FRAMES + 1;
    assert_eq!(escalation(WAL_TRUNCATE_FRAMES, None), None);
    assert_eq!(
        escalation(WAL_TRUNCATE_FRAMES, Some(WAL_TRUNCATE_FRAMES)),
        None
    );
    assert_eq!(escalation(10, Some(10)), None);
    assert_eq!(escalation(past, None), Some("RESTART"));
    assert_eq!(escalation(past, Some(past - 100)), Some("RESTART"));
    // A WAL that started over and grew past the threshold again since the last pass.
    assert_eq!(escalation(past, Some(past + 5_000)), Some("RESTART"));
    assert_eq!(escalation(past, Some(past)), Some("TRUNCATE"));
}

/// A WAL that a long read let grow past [`WAL_TRUNCATE_FRAMES`] is cut to zero by the
/// checkpointer once the read ends (a PASSIVE checkpoint alone would leave the file at its
/// size, and the next commit would only start writing it over from the beginning).
#[test]
fn the_checkpointer_truncates_a_wal_past_the_threshold() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("burst.db");
    let conn = open_writer(&path, Duration::from_secs(1)).expect("create");
    conn.execute_batch("CREATE TABLE blobs (b BLOB)")
        .expect("table");
    let reader = open_reader(&path, Duration::from_secs(1)).expect("reader");
    reader.execute_batch("BEGIN").expect("begin");
    let _: i64 = reader
        .query_row("SELECT count(*) FROM blobs", [], |r| r.get(0))
        .expect("read");
    let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
    let cp_path = path.clone();
    let cp =
        std::thread::spawn(move || run_checkpointer(&cp_path, Duration::from_secs(1), stop_rx));
    // Past the threshold while the read pins the WAL: the checkpointer cannot cut it.
    let bytes = (WAL_TRUNCATE_FRAMES + 4096) * 1024;
    for _ in 0..bytes / (1 << 20) {
        conn.execute("INSERT INTO blobs VALUES (zeroblob(?1))", [1i64 << 20])
            .expect("insert");
    }
    std::thread::sleep(CHECKPOINT_EVERY * 2);
    let pinned = wal_len(&path);
    assert!(pinned as i64 > WAL_TRUNCATE_FRAMES * 1024, "{pinned} B");
    reader.execute_batch("COMMIT").expect("end the read");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while wal_len(&path) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL still holds {} B 10 s after the read ended (was {pinned} B)",
            wal_len(&path)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Everything is in the database file, and the writer goes on.
    conn.execute("INSERT INTO blobs VALUES (x'00')", [])
        .expect("insert after");
    let n: i64 = conn
        .query_row("SELECT count(*) FROM blobs", [], |r| r.get(0))
        .expect("count");
    assert_eq!(n, bytes / (1 << 20) + 1);
    drop(stop);
    cp.join().expect("checkpointer");
}
