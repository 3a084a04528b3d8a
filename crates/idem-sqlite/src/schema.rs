//! Connection set-up and the embedded schema migrations.
//!
//! Invariants: every connection runs with `foreign_keys=ON` and a `busy_timeout` (several
//! instances may open one file: the write lock is then shared by waiting, never by failing
//! fast); the write connection also runs `journal_mode=WAL` (readers never block the writer)
//! and `synchronous=FULL` (a commit returns only after the WAL is fsync'd, so an acknowledged
//! write survives `kill -9` and power loss) — or, with pipelined sync ([`pipeline_wal`]),
//! `synchronous=NORMAL` plus an fsync of the WAL by the syncer thread before any write of the
//! batch is acknowledged. Migrations are applied in order inside one
//! `BEGIN IMMEDIATE` transaction and the schema version is `PRAGMA user_version`, so two
//! processes opening a fresh file at once cannot both migrate it. Migrations are append-only:
//! never edit a released one, add the next.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_store::StoreError;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::error::SqlResult;

/// Schema versions; `MIGRATIONS[i]` moves `user_version` from `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: the ledger.
    r#"
CREATE TABLE records (
    namespace         TEXT    NOT NULL,
    key               TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    attempt           INTEGER NOT NULL,
    fingerprint       TEXT,
    owner             TEXT,
    correlation_id    TEXT,
    lease_expires_at  INTEGER,
    not_before        INTEGER,
    prepared_payload  TEXT,            -- JSON text; SQL NULL = absent
    result            TEXT,            -- JSON text; SQL NULL = absent
    result_expired    INTEGER NOT NULL DEFAULT 0,
    external_ref      TEXT,
    error_category    TEXT,            -- last_error, NULL when there is none
    error_message     TEXT,
    error_http_status INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    lease_id          TEXT,
    lease_expiry      TEXT    NOT NULL,
    reported          INTEGER NOT NULL,
    budget_base       INTEGER NOT NULL,
    window_start      INTEGER NOT NULL,
    final_at          INTEGER,
    active_at         INTEGER NOT NULL,
    review_reason     TEXT,
    stuck_alerted     INTEGER NOT NULL,
    version           INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
);
-- list, newest first, with and without a state filter
CREATE INDEX records_by_updated ON records (namespace, updated_at DESC, key DESC);
CREATE INDEX records_by_state_updated
    ON records (namespace, state, updated_at DESC, key DESC);
-- janitor: expired leases and stuck processing; stats: oldest processing. Partial, so a
-- record costs this index nothing once it left `processing` (the hot path writes fewer pages).
CREATE INDEX records_processing ON records (active_at) WHERE state = 'processing';
-- retention: final records by age, unexpired ones first (partial for the same reason)
CREATE INDEX records_final ON records (result_expired, final_at)
    WHERE state IN ('completed', 'failed_permanent');

-- `seq` is the rowid (no AUTOINCREMENT: that would write the sqlite_sequence page on every
-- event); it increases with time because retention only ever deletes the oldest events.
CREATE TABLE events (
    seq            INTEGER PRIMARY KEY,
    namespace      TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    at             INTEGER NOT NULL,
    type           TEXT    NOT NULL,
    from_state     TEXT,
    to_state       TEXT,
    attempt        INTEGER NOT NULL,
    owner          TEXT,
    correlation_id TEXT,
    note           TEXT,
    actor          TEXT
);
CREATE INDEX events_by_record ON events (namespace, key, seq);

-- Namespace settings. The retention and stuck clocks are copied out of the policy JSON so
-- that the janitor can select work with set-based SQL; update_namespace keeps them in step.
CREATE TABLE namespaces (
    namespace          TEXT    PRIMARY KEY,
    policy             TEXT    NOT NULL,
    paused             INTEGER NOT NULL DEFAULT 0,
    updated_at         INTEGER NOT NULL,
    retention_ms       INTEGER NOT NULL,
    audit_retention_ms INTEGER NOT NULL,
    stuck_after_ms     INTEGER NOT NULL
);

CREATE TABLE daily_counts (
    namespace TEXT    NOT NULL,
    day       INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    PRIMARY KEY (namespace, day)
);

CREATE TABLE alerts (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace      TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    reason         TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    error_category TEXT,
    attempt        INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    next_at        INTEGER NOT NULL,
    tries          INTEGER NOT NULL DEFAULT 0,
    status         TEXT    NOT NULL DEFAULT 'pending',  -- pending | sent | gave_up
    UNIQUE (namespace, key, reason, attempt)
);
CREATE INDEX alerts_due ON alerts (status, next_at);

CREATE TABLE api_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    secret_hash TEXT    NOT NULL UNIQUE,
    role        TEXT    NOT NULL,
    scope       TEXT    NOT NULL,
    label       TEXT,
    created_at  INTEGER NOT NULL
);
"#,
    // 2: events point at their record's row id. Record ids grow with time, so the events of
    // recent records (nearly all writes) land on the right edge of `events_by_rid` instead of
    // on a random leaf of an index keyed by (namespace, key): a write batch dirties, and
    // copies into the WAL, far fewer pages. A record's events are deleted with it (retention
    // deletes both in one transaction), so a row id reused after a delete has no events.
    r#"
ALTER TABLE events ADD COLUMN rid INTEGER;
UPDATE events SET rid =
    (SELECT r.rowid FROM records r WHERE r.namespace = events.namespace AND r.key = events.key);
CREATE INDEX events_by_rid ON events (rid, seq);
DROP INDEX events_by_record;
"#,
    // 3: records per state, kept exact by triggers in the transaction of every write (the
    // writer is single, so one row per state costs no contention). `/metrics` reads these
    // seven rows instead of counting the ledger, so the gauges are exact at every scrape and
    // cost the same at 10M records as at ten. Every write path — the engine, snapshot
    // decisions, retention's deletes, out-of-band fills — goes through the table and so
    // through the triggers. The review queue is counted for its own gauge by this table too.
    r#"
CREATE TABLE record_counts (
    state TEXT PRIMARY KEY,
    n     INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO record_counts (state, n)
    SELECT s.state, (SELECT COUNT(*) FROM records r WHERE r.state = s.state)
    FROM (SELECT 'processing' AS state UNION ALL SELECT 'prepared'
          UNION ALL SELECT 'awaiting_approval' UNION ALL SELECT 'completed'
          UNION ALL SELECT 'failed_retryable' UNION ALL SELECT 'failed_permanent'
          UNION ALL SELECT 'needs_review') s;
CREATE TRIGGER records_count_insert AFTER INSERT ON records BEGIN
    UPDATE record_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER records_count_update AFTER UPDATE OF state ON records
    WHEN OLD.state IS NOT NEW.state BEGIN
    UPDATE record_counts SET n = n - 1 WHERE state = OLD.state;
    UPDATE record_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER records_count_delete AFTER DELETE ON records BEGIN
    UPDATE record_counts SET n = n - 1 WHERE state = OLD.state;
END;
"#,
    // 4: one outbox for every kind of outbound work (alerts now; forwards and effects next),
    // and the secrets the server reads back. Every `alerts` row moves over with its id (the
    // `webhook-id` of an alert is derived from it and must not change between retries) and
    // its state, so the dedupe of finished alerts survives too; then `alerts` is dropped:
    // nothing reads it any more, and two outboxes would mean two dedupe rules and two
    // retention deletes to keep in step. A leased alert (next_at in the future) becomes
    // pending at that time, which is when its old lease would have run out. The two tables
    // are spelled once for both stores (`idem_store::outbox_and_secrets_tables!`); the schema
    // it makes is column for column the one this migration was released with.
    idem_store::outbox_and_secrets_tables!(
        id: "INTEGER PRIMARY KEY AUTOINCREMENT",
        name: "TEXT NOT NULL",
        bytes: "BLOB",
        int: "INTEGER",
        between: r#"
INSERT INTO outbox (id, kind, namespace, key, dedupe, payload, created_at, due_at, attempts,
                    state)
    SELECT id, 'alert', namespace, key, reason || ':' || attempt,
           CAST(json_object('reason', reason, 'state', state,
                            'error_category', error_category, 'attempt', attempt) AS BLOB),
           created_at, next_at, tries,
           CASE status WHEN 'sent' THEN 'done' WHEN 'gave_up' THEN 'dead' ELSE 'pending' END
    FROM alerts;
-- Ids continue after the old table's, so no alert id is handed out twice.
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'outbox', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'outbox');
UPDATE sqlite_sequence SET seq = MAX(seq,
    COALESCE((SELECT s.seq FROM sqlite_sequence s WHERE s.name = 'alerts'), 0))
    WHERE name = 'outbox';
DROP TABLE alerts;
"#
    ),
    // 5: tokens for people: an expiry, a revocation instant (the row stays, so the token
    // count that switches auth on never drops back to 0) and the last use.
    r#"
ALTER TABLE api_tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE api_tokens ADD COLUMN revoked_at INTEGER;
ALTER TABLE api_tokens ADD COLUMN last_used_at INTEGER;
"#,
    // 6: cost and recovery. Each record sums what its attempts reported spending (retry_* =
    // attempts after the first; dollars in nano-dollars so sums are exact) and remembers
    // when it entered needs_review (review-queue age, time to recovery); records already in
    // review count from their last change. An event keeps the cost its report carried
    // (both NULL: none). `ns_stats` holds per-namespace hourly counters, bumped in the
    // transaction of each step that counts, so the namespace's 24-hour stats are a sum of at
    // most 24 rows.
    idem_store::cost_and_recovery_columns!(
        int: "INTEGER",
        key_columns: "    namespace       TEXT    NOT NULL,
    hour            INTEGER NOT NULL,   -- ms since the epoch / 3600000",
        table_end: "    PRIMARY KEY (namespace, hour)
    ) WITHOUT ROWID;"
    ),
    // 7 (effects): what an effect sent, shown on the record (method, URL without query,
    // idempotency header name) as JSON text; NULL for keys driven by claim/complete.
    r#"
ALTER TABLE records ADD COLUMN request TEXT;
"#,
    // 8: a namespace's alert signing secret moves out of the policy text into `secrets`.
    ALERT_SECRETS_OUT_OF_THE_POLICY,
    // 9: the operator console. Sessions are kept here so that every instance on one ledger
    // knows them; only hashes are stored (of the cookie, and of the API token that signed
    // in). The review queue reads `needs_review` and `awaiting_approval` oldest first across
    // namespaces through a partial index: records in other states (the hot path) cost it
    // nothing.
    idem_store::console_sessions_table!(
        int: "INTEGER",
        then: r#"-- Records per namespace and state, kept exact by triggers in the transaction of every write
-- like `record_counts` (the writer is single: no contention), so a namespace's counts are a
-- handful of rows to read instead of one index entry per record.
CREATE TABLE namespace_counts (
    namespace TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (namespace, state)
) WITHOUT ROWID;
INSERT INTO namespace_counts (namespace, state, n)
    SELECT namespace, state, COUNT(*) FROM records GROUP BY namespace, state;
CREATE TRIGGER namespace_count_insert AFTER INSERT ON records BEGIN
    INSERT INTO namespace_counts (namespace, state, n) VALUES (NEW.namespace, NEW.state, 1)
        ON CONFLICT (namespace, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER namespace_count_update AFTER UPDATE OF state ON records
    WHEN OLD.state IS NOT NEW.state BEGIN
    UPDATE namespace_counts SET n = n - 1
        WHERE namespace = OLD.namespace AND state = OLD.state;
    INSERT INTO namespace_counts (namespace, state, n) VALUES (NEW.namespace, NEW.state, 1)
        ON CONFLICT (namespace, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER namespace_count_delete AFTER DELETE ON records BEGIN
    UPDATE namespace_counts SET n = n - 1
        WHERE namespace = OLD.namespace AND state = OLD.state;
END;
"#
    ),
    // 10: the webhook intake: sources (configuration without secrets: those are rows of
    // `secrets`, kinds `source` and `forward`) and one row per inbound event beside its
    // record (body, content type, forwarded headers, attempts, delivery time).
    idem_store::intake_tables!(int: "INTEGER", bytes: "BLOB"),
    // 11: the sweep's own index: `processing` records it may still change (a `review` lease,
    // or not stuck-alerted yet). Records abandoned under a `reclaim` lease and alerted once
    // stay `processing` for good; through `records_processing` every pass walked past all of
    // them (100,000 of them: 74-95 ms a pass, on the writer).
    r#"
CREATE INDEX records_sweep ON records (active_at)
    WHERE state = 'processing' AND (lease_expiry = 'review' OR stuck_alerted = 0);
"#,
    // 12: the ledger-wide per-state counters of version 3 go: `namespace_counts` (version 9)
    // counts the same records by namespace and state, so the gauges and the backup's record
    // count sum it instead, and every insert and every change of state pays one counter
    // trigger set instead of two (PostgreSQL did the same in its schema 14).
    r#"
DROP TRIGGER records_count_insert;
DROP TRIGGER records_count_update;
DROP TRIGGER records_count_delete;
DROP TABLE record_counts;
"#,
    // 13: a namespace's first-time acquisitions of a UTC day are the sum of that day's 24
    // hourly `ns_stats` buckets (`acquired_first`, bumped in the transaction of every first
    // acquisition since version 6), so a claim pays one counter upsert instead of two and
    // `daily_counts` goes. A day counted before version 6 existed (or before its buckets were
    // kept) gets the difference added to its first hour, so every ceiling holds across the
    // upgrade; retention drops those buckets with the others.
    r#"
INSERT INTO ns_stats (namespace, hour, acquired_first, acquired_retry, tokens, usd_nanos,
                      retry_tokens, retry_usd_nanos)
    SELECT d.namespace, d.day * 24, d.count - COALESCE(s.n, 0), 0, 0, 0, 0, 0
    FROM daily_counts d LEFT JOIN (
        SELECT namespace, hour / 24 AS day, SUM(acquired_first) AS n
        FROM ns_stats GROUP BY namespace, hour / 24
    ) s ON s.namespace = d.namespace AND s.day = d.day
    WHERE d.count > COALESCE(s.n, 0)
    ON CONFLICT (namespace, hour) DO UPDATE SET
        acquired_first = acquired_first + excluded.acquired_first;
DROP TABLE daily_counts;
"#,
    // 14: the writer keeps `namespace_counts` itself (`crate::counts`): what a write batch
    // inserted or moved to another state is summed in memory and written with one upsert per
    // namespace and state just before the batch's `COMMIT`, in the same transaction, instead
    // of two or three counter statements per record write run by these triggers. Retention's
    // set-based deletes keep theirs.
    r#"
DROP TRIGGER namespace_count_insert;
DROP TRIGGER namespace_count_update;
"#,
    // 15: fan-out: an event's delivery to a named destination is a row of its own (no body;
    // `event_key` names the event's row, `destination` the destination), and an event's row
    // lists its destinations (`NULL`: `default` alone, as every row written before).
    // `destination_pace` holds, per destination with a `rate`, the earliest time of its next
    // delivery (shared by every process on the file).
    r#"
ALTER TABLE intake_events ADD COLUMN event_key TEXT;
ALTER TABLE intake_events ADD COLUMN destination TEXT;
ALTER TABLE intake_events ADD COLUMN destinations TEXT;
CREATE INDEX intake_events_deliveries ON intake_events (namespace, event_key)
    WHERE event_key IS NOT NULL;
CREATE TABLE destination_pace (
    source      TEXT   NOT NULL,
    destination TEXT   NOT NULL,
    next_at     BIGINT NOT NULL,
    PRIMARY KEY (source, destination)
);
"#,
    // 16: actions: a namespace's tools served over MCP, the document as JSON text without header
    // values (those are rows of `secrets`, kind `action_headers`).
    r#"
CREATE TABLE actions (
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    config     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;
"#,
];

/// A namespace's alert signing secret moves out of the policy text into `secrets` (kind
/// `alert`, owned by the namespace), so no secret is kept in a settings column that backups,
/// dumps and support queries read as plain configuration.
const ALERT_SECRETS_OUT_OF_THE_POLICY: &str = r#"
INSERT INTO secrets (kind, owner, value, created_at)
    SELECT 'alert', namespace, json_extract(policy, '$.alert_secret'), updated_at
    FROM namespaces WHERE json_type(policy, '$.alert_secret') = 'text';
UPDATE namespaces SET policy = json_remove(policy, '$.alert_secret')
    WHERE json_type(policy, '$.alert_secret') IS NOT NULL;
"#;

/// The schema version this build writes.
pub fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Page cache of the write connection, KiB (see `open_writer`).
const WRITER_CACHE_KIB: i64 = 2048;

/// The size a WAL is cut back to once it starts over, bytes (see `open_writer`): 64 MiB,
/// several times what the writer appends between two checkpoints at full speed.
pub(crate) const WAL_SIZE_LIMIT: i64 = 64 << 20;

/// Opens the connection that owns all writes, sets it up and migrates the schema.
pub(crate) fn open_writer(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .db()?;
    conn.busy_timeout(busy_timeout).db()?;
    // Only takes effect on a new file (before WAL and the first table).
    conn.pragma_update(None, "page_size", 1024).db()?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .db()?;
    if !mode.eq_ignore_ascii_case("wal") {
        // In-memory and some exotic file systems cannot do WAL; durability still holds with
        // synchronous=FULL, only readers then wait for the writer.
        tracing::warn!(journal_mode = %mode, "sqlite: WAL not available");
    }
    conn.pragma_update(None, "synchronous", "FULL").db()?;
    conn.pragma_update(None, "foreign_keys", "ON").db()?;
    // Savepoint journals (one per job of a batch) stay in memory instead of a temp file.
    conn.pragma_update(None, "temp_store", "MEMORY").db()?;
    // 2 MiB of page cache (2,048 pages of 1 KiB). Not more, measured: while the ledger is
    // under 1 GiB, B-tree rebalancing renumbers pages through the page after SQLite's lock
    // byte (1 GiB), and the next commit then scans the whole page-cache hash to drop pages
    // past the end of the file; with 16 MiB that scan took ~18 % of the writer's CPU. With
    // 2 MiB, claim p99 at 10M records (past 1 GiB) measured 3.6 ms against 4.2 ms at 0
    // records: the OS page cache serves the rest. docs/performance.md has the figures.
    conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)
        .db()?;
    // Checkpoints run on their own thread (see `checkpointer`), off the writer's path.
    conn.pragma_update(None, "wal_autocheckpoint", 0).db()?;
    // A WAL that grew past this (a long read pinned it through a burst of writes) is cut back
    // to it at the first commit after a complete checkpoint lets the WAL start over, so a
    // burst does not keep its disk space for the life of the file; below it SQLite reuses the
    // file in place, which is faster than growing it again.
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
        .db()?;
    conn.set_prepared_statement_cache_capacity(64);
    migrate(&mut conn)?;
    // Scratch space of the retention step: one connection's private table, never on disk in
    // the ledger file, so it costs nothing to the durability of the batch.
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS retention_batch \
         (rid INTEGER PRIMARY KEY, namespace TEXT NOT NULL, key TEXT NOT NULL);",
    )
    .db()?;
    Ok(conn)
}

/// Switches the write connection to pipelined sync when the ledger is in WAL mode: its
/// commits stop fsyncing (`synchronous=NORMAL`) and the returned handle of the WAL file is
/// what the syncer thread fsyncs before any job of a batch is answered (see
/// [`crate::writer`]). `None` (and `synchronous=FULL` kept) when the ledger is not in WAL
/// mode or its WAL file cannot be opened.
pub(crate) fn pipeline_wal(
    conn: &Connection,
    path: &Path,
) -> Result<Option<std::fs::File>, StoreError> {
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .db()?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Ok(None);
    }
    // SQLite names the WAL after the database file as it opened it.
    let db_file = conn
        .path()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| path.to_owned());
    let mut wal_name = db_file.into_os_string();
    wal_name.push("-wal");
    // Migrations wrote through the WAL, so it exists; open it without creating anything.
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&wal_name)
    {
        Ok(file) => {
            conn.pragma_update(None, "synchronous", "NORMAL").db()?;
            Ok(Some(file))
        }
        Err(e) => {
            tracing::warn!(error = %e, "sqlite: cannot open the WAL file; every commit fsyncs itself");
            Ok(None)
        }
    }
}

/// Opens one read connection (WAL lets it read beside the writer; `query_only` makes sure a
/// read path can never write behind the writer's back).
pub(crate) fn open_reader(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .db()?;
    conn.busy_timeout(busy_timeout).db()?;
    conn.pragma_update(None, "foreign_keys", "ON").db()?;
    conn.pragma_update(None, "query_only", "ON").db()?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .db()?;
    let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0)).db()?;
    if current > latest_version() {
        return Err(StoreError::Internal(format!(
            "the ledger file has schema version {current}, newer than this build knows ({}): \
             upgrade idem",
            latest_version()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current.max(0) as usize) {
        tx.execute_batch(sql).db()?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)
            .db()?;
        tracing::info!(version = i + 1, "sqlite: schema migrated");
    }
    tx.commit().db()
}

/// Copies the WAL back into the database file from its own connection, so the writer never
/// stalls on a checkpoint. PASSIVE never blocks the writer or readers; the WAL restarts from
/// its beginning at the next write after a complete checkpoint. Runs until `stop` is dropped.
///
/// The connection is opened on the first pass and again after any pass that could not open
/// it: a ledger whose checkpointer failed to open once (a full disk at start, a file briefly
/// unreadable) must not be left with a WAL that grows for the rest of the process. One WARN
/// when opening starts failing, one INFO when it opens again.
pub(crate) fn run_checkpointer(
    path: &Path,
    busy_timeout: Duration,
    stop: std::sync::mpsc::Receiver<()>,
) {
    let mut conn: Option<Connection> = None;
    let mut failing = false;
    let mut frames = None;
    loop {
        if conn.is_none() {
            match open_checkpointer(path, busy_timeout) {
                Ok(c) => {
                    if failing {
                        tracing::info!("sqlite: checkpointer open again");
                        failing = false;
                    }
                    conn = Some(c);
                }
                Err(e) if !failing => {
                    tracing::warn!(error = %e, "sqlite: checkpointer cannot open; retrying every \
                        pass, the WAL grows meanwhile");
                    failing = true;
                }
                Err(e) => tracing::debug!(error = %e, "sqlite: checkpointer cannot open"),
            }
        }
        if let Some(c) = &conn {
            frames = checkpoint(c, frames);
        }
        match stop.recv_timeout(CHECKPOINT_EVERY) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            // Stopped: a last pass so a cleanly closed ledger leaves a small WAL.
            _ => break,
        }
    }
    if let Some(c) = &conn {
        let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    }
}

/// How often the checkpointer copies the WAL back (and retries opening).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// WAL frames (1 KiB pages) past which a checkpoint makes the WAL start over and gives its
/// disk space back: 16,384, 16 MiB.
const WAL_TRUNCATE_FRAMES: i64 = 16_384;

/// How long an escalated checkpoint waits for the writer and the readers before it gives up
/// until the next pass (the writer waits behind it meanwhile).
const TRUNCATE_WAIT: Duration = Duration::from_millis(50);

/// One pass: PASSIVE, which never waits for anyone. Under steady load a reader is nearly
/// always inside the WAL and the writer appends while the checkpoint copies, so the WAL may
/// never start over and grows by every commit; once it holds more than
/// [`WAL_TRUNCATE_FRAMES`], the pass escalates (see [`escalation`]) and waits (at most
/// [`TRUNCATE_WAIT`]) for the readers to leave. Without it a burst could grow the WAL until the
/// disk was full, and then nothing idem does frees space: the checkpoint needs room to grow
/// the database file, and the WAL keeps all the room (seen under a full test suite on an
/// 8 MiB filesystem: a 7.4 MiB WAL beside a 540 KiB ledger). Returns the WAL's frames, for
/// the next pass.
fn checkpoint(c: &Connection, before: Option<i64>) -> Option<i64> {
    let frames = |mode: &str| {
        c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        })
    };
    match frames("PASSIVE") {
        Ok((_, log)) => {
            if let Some(mode) = escalation(log, before) {
                match frames(mode) {
                    Ok((0, _)) => tracing::debug!(frames = log, mode, "sqlite: WAL started over"),
                    Ok(_) => tracing::debug!(frames = log, mode, "sqlite: WAL busy; next pass"),
                    Err(e) => tracing::debug!(error = %e, mode, "sqlite: WAL escalation skipped"),
                }
            }
            Some(log)
        }
        Err(e) => {
            tracing::debug!(error = %e, "sqlite: checkpoint skipped");
            None
        }
    }
}

/// The checkpoint a pass escalates to when the WAL holds `log` frames and the previous pass
/// found `before`. Past [`WAL_TRUNCATE_FRAMES`] while commits keep coming: `RESTART`, so the
/// next commit writes the WAL over from its beginning, in place, and cuts the file back to
/// [`WAL_SIZE_LIMIT`] (`journal_size_limit`); a `TRUNCATE` there made every commit after it
/// grow the file again, a cost on every fsync (the SQLite in-process rows at 64 callers ran
/// 6 % slower with it; `docs/performance.md`). Past it with no commit since the previous pass:
/// `TRUNCATE`, which cuts the file to zero, since no commit will come to cut it back.
fn escalation(log: i64, before: Option<i64>) -> Option<&'static str> {
    if log <= WAL_TRUNCATE_FRAMES {
        None
    } else if before == Some(log) {
        Some("TRUNCATE")
    } else {
        Some("RESTART")
    }
}

/// The checkpointer's connection. synchronous=FULL, stated rather than left to the build's
/// default: a checkpoint must sync the WAL before it copies frames into the database file,
/// because with pipelined sync the writer's own commits do not (see `crate::writer`).
///
/// The connection is only kept once it has seen the ledger in WAL mode. A connection learns
/// the journal mode at its first read and `wal_checkpoint` never reads again, so one opened on
/// a file that was still empty (created, not yet switched to WAL: the window inside
/// `open_writer`) would stay in rollback mode and make every later pass a silent no-op while
/// the WAL grew; refusing it here makes the next pass open a fresh one.
fn open_checkpointer(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    let c = open_reader(path, busy_timeout.min(TRUNCATE_WAIT))?;
    c.pragma_update(None, "query_only", "OFF").db()?;
    c.pragma_update(None, "synchronous", "FULL").db()?;
    c.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .db()?;
    let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).db()?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Unavailable(format!(
            "the ledger is not in WAL mode yet (journal mode {mode})"
        )));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
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
            .prepare(
                "SELECT id, kind, key, state, attempts, due_at, payload FROM outbox ORDER BY id",
            )
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
        let cp = std::thread::spawn(move || {
            run_checkpointer(&cp_path, Duration::from_millis(100), stop_rx)
        });
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
}
