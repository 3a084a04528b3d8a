//! The embedded schema migrations, in order: `MIGRATIONS[i]` moves `PRAGMA user_version`
//! from `i` to `i + 1`, and the latest version is their count.
//!
//! Append-only: a released migration must never be edited or reordered, only followed by the
//! next one. Applying them is `migrate` in the parent module (one `BEGIN IMMEDIATE`
//! transaction).

/// Schema versions; `MIGRATIONS[i]` moves `user_version` from `i` to `i + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
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
    idem_store::sql::FAN_OUT_TABLES,
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
pub(super) const ALERT_SECRETS_OUT_OF_THE_POLICY: &str = r#"
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
