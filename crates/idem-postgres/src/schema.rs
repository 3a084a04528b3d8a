//! Embedded schema migrations.
//!
//! Migrations run at connect, in one transaction that first takes a transaction-scoped
//! advisory lock, so several instances starting at once apply each version exactly once (the
//! others wait, then find nothing to do). Applied versions are kept in
//! `idem_schema_migrations`. A migration is never edited once released: add a new version.
//!
//! Conventions the store relies on: times are BIGINT milliseconds since the epoch; JSON values
//! (payloads, results, policies) are TEXT holding serde_json's output, so what is read back is
//! exactly what was written (no JSONB number or key-order normalisation); `namespace` and
//! `key` use the "C" collation so list order is byte order on every engine.

use crate::conn::Conn as Client;
use idem_store::StoreError;

use crate::error::store_err;

/// Arbitrary constant identifying idem's migration lock (`'idem'` as ASCII).
const MIGRATION_LOCK: i64 = 0x6964_656d;

pub(crate) const MIGRATIONS: &[(i32, &str)] = &[
    (1, V1),
    (2, V2),
    (3, V3),
    (4, V4),
    (5, V5),
    (6, V6),
    (7, V7),
    (8, V8),
    (9, V9),
    (10, V10),
    (11, V11),
    (12, V12),
    (13, V13),
    (14, V14),
    (15, V15),
    (16, V16),
    (17, V17),
    (18, V18),
    (19, ACTIONS),
];

/// Actions: a namespace's tools served over MCP, the document as JSON text without header
/// values (those are rows of `secrets`, kind `action_headers`).
const ACTIONS: &str = r#"
CREATE TABLE actions (
    namespace  TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    config     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, name)
);
"#;

/// Cost and recovery. Each record sums what its attempts reported spending (`retry_*` =
/// attempts after the first; dollars in nano-dollars so sums are exact) and remembers when it
/// entered `needs_review` (review-queue age, time to recovery); records already in review count
/// from their last change. An event keeps the cost its report carried (both NULL: none).
/// `ns_stats` holds per-namespace hourly counters bumped in the transaction of each step that
/// counts; like `record_counts`, each connection writes only the rows of its own `slot` (its
/// backend pid), so bumping a namespace's bucket never waits on another transaction. The
/// 24-hour stats are the sum of the rows of 24 hours.
const V7: &str = idem_store::cost_and_recovery_columns!(
    int: "BIGINT",
    key_columns: "    namespace       TEXT COLLATE \"C\" NOT NULL,
    hour            BIGINT NOT NULL,
    slot            INTEGER NOT NULL,",
    table_end: "    PRIMARY KEY (namespace, hour, slot)
);"
);

/// Effects: what an effect sent, shown on the record (method, URL without query, idempotency
/// header name) as JSON text; NULL for keys driven by claim/complete.
const V8: &str = r#"
ALTER TABLE records ADD COLUMN request TEXT;
"#;

/// A namespace's alert signing secret moves out of the policy text into `secrets` (kind
/// `alert`, owned by the namespace), so no secret is kept in a settings column that backups,
/// dumps and support queries read as plain configuration. The policy text is rewritten through
/// `jsonb` (key order and spacing change; the store merges it over the defaults on read, so
/// nothing depends on either), and `revision` moves so no instance keeps a cached copy.
const V9: &str = r#"
INSERT INTO secrets (kind, owner, value, created_at)
    SELECT 'alert', namespace, policy::jsonb ->> 'alert_secret', updated_at
    FROM namespaces WHERE jsonb_typeof(policy::jsonb -> 'alert_secret') = 'string';
UPDATE namespaces SET policy = (policy::jsonb - 'alert_secret')::text, revision = revision + 1
    WHERE policy::jsonb -> 'alert_secret' IS NOT NULL;
"#;

/// The webhook intake: sources (configuration without secrets: those are rows of
/// `secrets`, kinds `source` and `forward`) and one row per inbound event beside its record
/// (body, content type, forwarded headers, attempts, delivery time).
const V11: &str = idem_store::intake_tables!(int: "BIGINT", bytes: "BYTEA");

/// The sweep's own index: `processing` records it may still change (a `review` lease, or not
/// stuck-alerted yet). Records abandoned under a `reclaim` lease and alerted once stay
/// `processing` for good, and through `records_processing` every pass walked past all of them.
const V12: &str = r#"
CREATE INDEX records_sweep ON records (active_at)
    WHERE state = 'processing' AND (lease_expiry = 'review' OR NOT stuck_alerted);
"#;

/// The outbox claim's own index. A claim takes the due items oldest first (`ORDER BY due_at,
/// id LIMIT n`); through `outbox_due (kind, due_at)` PostgreSQL read every due item and
/// sorted them for the top n, so with a backlog each claim walked the whole backlog (20,000
/// events: 12,442 index entries and 27 ms a claim, the hottest path of the drain). With `id`
/// in the index the scan is in claim order and stops after n. (SQLite's index already ends
/// in the rowid, which is `id` there.)
const V13: &str = r#"
CREATE INDEX outbox_claim ON outbox (kind, due_at, id) WHERE state IN ('pending', 'leased');
DROP INDEX outbox_due;
"#;

/// The ledger-wide per-state counters of V4 go: `namespace_counts` (V10) counts the same
/// records by namespace and state, kept by the same kind of statement triggers, so the
/// gauges sum it by state instead. Every write to `records` ran both trigger sets, each a
/// PL/pgSQL function whose statement over the transition tables is planned anew on every
/// run; one set fewer is about a tenth less PostgreSQL CPU per write (measured on the
/// backlog drain and the claim rows, bench/results/README.md). The sums are equal at the
/// moment of the drop: both sets moved in the transaction of every write since V10.
const V14: &str = r#"
DROP TRIGGER records_count_insert ON records;
DROP TRIGGER records_count_update ON records;
DROP TRIGGER records_count_delete ON records;
DROP FUNCTION idem_count_inserted();
DROP FUNCTION idem_count_updated();
DROP FUNCTION idem_count_deleted();
DROP TABLE record_counts;
"#;

/// The per-namespace counters (V10) are kept by row triggers on insert and update instead of
/// statement triggers. A statement trigger ran for every `INSERT` and `UPDATE` of `records`:
/// it collected the statement's old and new rows into transition tables, called PL/pgSQL,
/// and grouped them in a statement planned anew on every run, whether or not any state
/// moved. The row triggers do one small upsert per counter a row moves, with a plan the
/// function keeps; the update trigger runs only when `state` (or `namespace`) changes, a
/// condition PostgreSQL checks without calling the function, so heartbeats, result expiry
/// and other updates in place cost nothing (the claim+complete pair fires both; figures in
/// bench/results/README.md). Deletes keep their
/// statement trigger: retention deletes a batch of records per statement, and per-row
/// upserts of one counter row in one transaction would walk an ever longer chain of its
/// versions. No statement of idem writes many records with a state change in one
/// statement (the sweep updates one record per statement). The counters are exact across
/// the switch: the migration holds `records` locked from the first `DROP TRIGGER` to the
/// commit, so no write falls between the two trigger sets.
const V15: &str = r#"
DROP TRIGGER records_ns_count_insert ON records;
DROP TRIGGER records_ns_count_update ON records;
DROP FUNCTION idem_ns_count_inserted();
DROP FUNCTION idem_ns_count_updated();
CREATE FUNCTION idem_ns_count_row_inserted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO namespace_counts (namespace, state, slot, n)
        VALUES (NEW.namespace, NEW.state, pg_backend_pid(), 1)
        ON CONFLICT (namespace, state, slot) DO UPDATE SET n = namespace_counts.n + 1;
    RETURN NULL;
END
$fn$;
CREATE FUNCTION idem_ns_count_row_moved() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO namespace_counts (namespace, state, slot, n)
        VALUES (OLD.namespace, OLD.state, pg_backend_pid(), -1),
               (NEW.namespace, NEW.state, pg_backend_pid(), 1)
        ON CONFLICT (namespace, state, slot) DO UPDATE SET n = namespace_counts.n + EXCLUDED.n;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER records_ns_count_row_insert AFTER INSERT ON records
    FOR EACH ROW EXECUTE FUNCTION idem_ns_count_row_inserted();
CREATE TRIGGER records_ns_count_row_update AFTER UPDATE ON records
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.namespace IS DISTINCT FROM NEW.namespace)
    EXECUTE FUNCTION idem_ns_count_row_moved();
"#;

/// idem's own statements count the records they write: each statement that inserts a record
/// or moves its state carries the counter upsert as a data-modifying CTE beside the write
/// (`rows::counted_insert`, `rows::counted_move`), so a write pays no trigger call (PL/pgSQL
/// entry, after-trigger queue) for it. The row triggers stay for every other writer and are
/// skipped, by a condition PostgreSQL checks without calling the function, on connections
/// that set `idem.self_count = on` at startup, as every connection of this version does. So a
/// process of the previous version still running during a rolling upgrade (which does not set
/// it) keeps counting its writes through the triggers, and so does a person's `INSERT` in
/// `psql`. The swap of the triggers holds `records` locked to the commit: no write falls
/// between the two sets. Deletes keep their statement trigger.
const V16: &str = r#"
DROP TRIGGER records_ns_count_row_insert ON records;
DROP TRIGGER records_ns_count_row_update ON records;
CREATE TRIGGER records_ns_count_row_insert AFTER INSERT ON records
    FOR EACH ROW
    WHEN (current_setting('idem.self_count', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION idem_ns_count_row_inserted();
CREATE TRIGGER records_ns_count_row_update AFTER UPDATE ON records
    FOR EACH ROW
    WHEN ((OLD.state IS DISTINCT FROM NEW.state OR OLD.namespace IS DISTINCT FROM NEW.namespace)
          AND current_setting('idem.self_count', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION idem_ns_count_row_moved();
"#;

/// The row triggers of V16 skip a write when its statement says it counts itself, no longer
/// when its connection does. V16 asked each connection for the session setting
/// `idem.self_count`, sent as a startup option; a pooler in front of PostgreSQL drops startup
/// options (or moves the next transaction to another server connection, where a session
/// setting made by `SET` would not be either), and the triggers would then count every write
/// a second time. Now each statement that counts its records carries the comment
/// `/* idem:counts-itself */` (`rows::COUNTS_ITSELF`), and the trigger condition looks for it
/// in `current_query()`, the text of the statement being run, which needs no session state.
/// Connections that still set `idem.self_count` (the previous version, during a rolling
/// upgrade) are skipped as before, so the counters stay exact while both versions write; a
/// statement with neither mark (an older idem, a person in `psql`) is counted by the triggers.
const V17: &str = r#"
DROP TRIGGER records_ns_count_row_insert ON records;
DROP TRIGGER records_ns_count_row_update ON records;
CREATE TRIGGER records_ns_count_row_insert AFTER INSERT ON records
    FOR EACH ROW
    WHEN (current_setting('idem.self_count', true) IS DISTINCT FROM 'on'
          AND strpos(COALESCE(current_query(), ''), '/* idem:counts-itself */') = 0)
    EXECUTE FUNCTION idem_ns_count_row_inserted();
CREATE TRIGGER records_ns_count_row_update AFTER UPDATE ON records
    FOR EACH ROW
    WHEN ((OLD.state IS DISTINCT FROM NEW.state OR OLD.namespace IS DISTINCT FROM NEW.namespace)
          AND current_setting('idem.self_count', true) IS DISTINCT FROM 'on'
          AND strpos(COALESCE(current_query(), ''), '/* idem:counts-itself */') = 0)
    EXECUTE FUNCTION idem_ns_count_row_moved();
"#;

/// Fan-out: an event's delivery to a named destination is a row of its own (no body;
/// `event_key` names the event's row, `destination` the destination), and an event's row lists
/// its destinations (`NULL`: `default` alone, as every row written before).
/// `destination_pace` holds, per destination with a `rate`, the earliest time of its next
/// delivery: the state every instance on the database paces that destination by.
const V18: &str = idem_store::sql::FAN_OUT_TABLES;

/// The operator console. Sessions live here so that every instance on one database knows
/// them; only hashes are stored (of the cookie, and of the API token that signed in). The
/// review queue reads `needs_review` and `awaiting_approval` oldest first across namespaces
/// through a partial index: records in other states (the hot path) cost it nothing.
const V10: &str = idem_store::console_sessions_table!(
    int: "BIGINT",
    then: r#"
-- Records per namespace and state, kept like record_counts (V4): statement triggers, one row
-- per (namespace, state, backend) so concurrent writers of one namespace never queue on one
-- counter row; a read sums a namespace's few rows instead of counting its records.
CREATE TABLE namespace_counts (
    namespace TEXT COLLATE "C" NOT NULL,
    state     TEXT NOT NULL,
    slot      INTEGER NOT NULL,
    n         BIGINT NOT NULL,
    PRIMARY KEY (namespace, state, slot)
);
CREATE FUNCTION idem_ns_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO namespace_counts (namespace, state, slot, n)
        SELECT namespace, state, pg_backend_pid(), count(*) FROM new_rows
        GROUP BY namespace, state
        ON CONFLICT (namespace, state, slot) DO UPDATE SET n = namespace_counts.n + EXCLUDED.n;
    RETURN NULL;
END
$fn$;
CREATE FUNCTION idem_ns_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO namespace_counts (namespace, state, slot, n)
        SELECT namespace, state, pg_backend_pid(), -count(*) FROM old_rows
        GROUP BY namespace, state
        ON CONFLICT (namespace, state, slot) DO UPDATE SET n = namespace_counts.n + EXCLUDED.n;
    RETURN NULL;
END
$fn$;
CREATE FUNCTION idem_ns_count_updated() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO namespace_counts (namespace, state, slot, n)
        SELECT namespace, state, pg_backend_pid(), sum(d) FROM (
            SELECT namespace, state, -1 AS d FROM old_rows
            UNION ALL
            SELECT namespace, state, 1 AS d FROM new_rows
        ) moved GROUP BY namespace, state HAVING sum(d) <> 0
        ON CONFLICT (namespace, state, slot) DO UPDATE SET n = namespace_counts.n + EXCLUDED.n;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER records_ns_count_insert AFTER INSERT ON records
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_ns_count_inserted();
CREATE TRIGGER records_ns_count_update AFTER UPDATE ON records
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_ns_count_updated();
CREATE TRIGGER records_ns_count_delete AFTER DELETE ON records
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_ns_count_deleted();
INSERT INTO namespace_counts (namespace, state, slot, n)
    SELECT namespace, state, 0, count(*) FROM records GROUP BY namespace, state;
"#
);

/// Tokens for people: an expiry, a revocation instant (the row stays, so the token count that
/// switches auth on never drops back to 0) and the last use.
const V6: &str = r#"
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE api_tokens ADD COLUMN revoked_at BIGINT;
ALTER TABLE api_tokens ADD COLUMN last_used_at BIGINT;
"#;

/// One outbox for every kind of outbound work (alerts now; forwards and effects next), and
/// the secrets the server reads back. Every `alerts` row moves over with its id (an alert's
/// `webhook-id` is derived from it and must not change between retries) and its state, so the
/// dedupe of finished alerts survives too; the id sequence continues after the old one, so no
/// id is handed out twice. Then `alerts` is dropped: nothing reads it any more, and two
/// outboxes would mean two dedupe rules and two retention deletes to keep in step. An alert
/// leased at upgrade time (next_at in the future) becomes pending at that time, which is when
/// its old lease would have run out. `due_at` is the end of the lease while an item is leased,
/// so one partial index serves both "due" and "lease ran out".
const V5: &str = idem_store::outbox_and_secrets_tables!(
    id: "BIGSERIAL PRIMARY KEY",
    name: "TEXT COLLATE \"C\" NOT NULL",
    bytes: "BYTEA",
    int: "BIGINT",
    between: r#"
INSERT INTO outbox (id, kind, namespace, key, dedupe, payload, created_at, due_at, attempts,
                    state, finished_at)
    SELECT id, 'alert', namespace, key, reason || ':' || attempt,
           convert_to(json_build_object('reason', reason, 'state', state,
                                        'error_category', error_category,
                                        'attempt', attempt)::text, 'UTF8'),
           created_at, next_at, tries,
           CASE status WHEN 'sent' THEN 'done' WHEN 'gave_up' THEN 'dead' ELSE 'pending' END,
           finished_at
    FROM alerts;
SELECT setval(pg_get_serial_sequence('outbox', 'id'), n + 1, false) FROM (
    SELECT GREATEST(
        COALESCE((SELECT max(id) FROM outbox), 0),
        (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM alerts_id_seq)) AS n
) AS next_id;
DROP TABLE alerts;
"#
);

/// Records per state, kept exact by triggers in the transaction of every write, so
/// `/metrics` sums a few small rows instead of counting the ledger (the same cost at 10M
/// records as at ten). Each server connection (backend) writes only the rows of its own
/// `slot` (its process id): two transactions never update the same counter row, so the
/// counters add no lock contention between instances and cannot deadlock. Rows of backends
/// that have gone are kept (a handful per connection ever opened); the sum stays exact.
///
/// The triggers are per statement, over the statement's transition tables: one counter
/// update per state a statement touched, however many rows it wrote. (Per-row triggers
/// updated one counter row once per record, and a batch of N records in one transaction made
/// a chain of N versions of that row, each walked by the next update: quadratic.) The
/// update trigger cannot name the `state` column (PostgreSQL refuses column lists with
/// transition tables), so it runs for every `UPDATE` and writes only when a state changed.
///
/// The triggers are created before the backfill: `CREATE TRIGGER` locks out writers until
/// this transaction commits, so no write falls between the count and the first trigger.
const V4: &str = r#"
CREATE TABLE record_counts (
    state TEXT NOT NULL,
    slot  INTEGER NOT NULL,
    n     BIGINT NOT NULL,
    PRIMARY KEY (state, slot)
);
CREATE FUNCTION idem_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO record_counts (state, slot, n)
        SELECT state, pg_backend_pid(), count(*) FROM new_rows GROUP BY state
        ON CONFLICT (state, slot) DO UPDATE SET n = record_counts.n + EXCLUDED.n;
    RETURN NULL;
END
$fn$;
CREATE FUNCTION idem_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO record_counts (state, slot, n)
        SELECT state, pg_backend_pid(), -count(*) FROM old_rows GROUP BY state
        ON CONFLICT (state, slot) DO UPDATE SET n = record_counts.n + EXCLUDED.n;
    RETURN NULL;
END
$fn$;
CREATE FUNCTION idem_count_updated() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO record_counts (state, slot, n)
        SELECT state, pg_backend_pid(), sum(d) FROM (
            SELECT state, -1 AS d FROM old_rows
            UNION ALL
            SELECT state, 1 AS d FROM new_rows
        ) moved GROUP BY state HAVING sum(d) <> 0
        ON CONFLICT (state, slot) DO UPDATE SET n = record_counts.n + EXCLUDED.n;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER records_count_insert AFTER INSERT ON records
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_count_inserted();
CREATE TRIGGER records_count_update AFTER UPDATE ON records
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_count_updated();
CREATE TRIGGER records_count_delete AFTER DELETE ON records
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_count_deleted();
INSERT INTO record_counts (state, slot, n)
    SELECT state, 0, count(*) FROM records GROUP BY state;
"#;

/// A namespace's settings revision, bumped by every settings change. Instances cache policy
/// and `paused` per namespace and guard every write decided on the cache by this revision
/// (and `updated_at`, which instances without this column still move): a settings change made
/// through any instance is honoured by every other one on its next operation.
const V3: &str = r#"
ALTER TABLE namespaces ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
"#;

/// Retention walks final records by age that still hold a result. With only `records_final`
/// the already expired ones stay at the front of that index and every batch stepped over all
/// of them (quadratic: ~700 expiries/s at 200k records); this index holds only the work left.
const V2: &str = r#"
CREATE INDEX records_unexpired ON records (final_at)
    WHERE state IN ('completed', 'failed_permanent') AND NOT result_expired;
"#;

const V1: &str = r#"
CREATE TABLE records (
    namespace         TEXT COLLATE "C" NOT NULL,
    key               TEXT COLLATE "C" NOT NULL,
    state             TEXT NOT NULL,
    attempt           BIGINT NOT NULL,
    fingerprint       TEXT,
    owner             TEXT,
    correlation_id    TEXT,
    lease_expires_at  BIGINT,
    not_before        BIGINT,
    prepared_payload  TEXT,
    result            TEXT,
    result_expired    BOOLEAN NOT NULL DEFAULT FALSE,
    external_ref      TEXT,
    error_category    TEXT,
    error_message     TEXT,
    error_http_status INTEGER,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    lease_id          TEXT,
    lease_expiry      TEXT NOT NULL,
    reported          BOOLEAN NOT NULL,
    budget_base       BIGINT NOT NULL,
    window_start      BIGINT NOT NULL,
    final_at          BIGINT,
    active_at         BIGINT NOT NULL,
    review_reason     TEXT,
    stuck_alerted     BOOLEAN NOT NULL,
    version           BIGINT NOT NULL,
    PRIMARY KEY (namespace, key)
);
-- list (newest updated first, key as tie-break), with and without a state filter
CREATE INDEX records_list ON records (namespace, updated_at DESC, key DESC);
CREATE INDEX records_state_list ON records (namespace, state, updated_at DESC, key DESC);
-- janitor: sweep candidates, retention candidates, gauges
CREATE INDEX records_processing ON records (active_at) WHERE state = 'processing';
CREATE INDEX records_final ON records (final_at) WHERE state IN ('completed', 'failed_permanent');

CREATE TABLE events (
    seq            BIGSERIAL PRIMARY KEY,
    namespace      TEXT COLLATE "C" NOT NULL,
    key            TEXT COLLATE "C" NOT NULL,
    at             BIGINT NOT NULL,
    type           TEXT NOT NULL,
    from_state     TEXT,
    to_state       TEXT,
    attempt        BIGINT NOT NULL,
    owner          TEXT,
    correlation_id TEXT,
    note           TEXT,
    actor          TEXT
);
CREATE INDEX events_record ON events (namespace, key, seq);

CREATE TABLE namespaces (
    namespace          TEXT COLLATE "C" PRIMARY KEY,
    policy             TEXT NOT NULL,
    paused             BOOLEAN NOT NULL DEFAULT FALSE,
    -- copies of policy fields the janitor filters on in SQL
    retention_ms       BIGINT NOT NULL,
    audit_retention_ms BIGINT NOT NULL,
    stuck_after_ms     BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);

CREATE TABLE daily_counts (
    namespace TEXT COLLATE "C" NOT NULL,
    day       BIGINT NOT NULL,
    count     BIGINT NOT NULL,
    PRIMARY KEY (namespace, day)
);

CREATE TABLE alerts (
    id             BIGSERIAL PRIMARY KEY,
    namespace      TEXT COLLATE "C" NOT NULL,
    key            TEXT COLLATE "C" NOT NULL,
    reason         TEXT NOT NULL,
    state          TEXT NOT NULL,
    error_category TEXT,
    attempt        BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    next_at        BIGINT NOT NULL,
    tries          BIGINT NOT NULL DEFAULT 0,
    status         TEXT NOT NULL DEFAULT 'pending',
    finished_at    BIGINT,
    UNIQUE (namespace, key, reason, attempt)
);
CREATE INDEX alerts_due ON alerts (next_at) WHERE status = 'pending';

CREATE TABLE api_tokens (
    id          BIGSERIAL PRIMARY KEY,
    secret_hash TEXT NOT NULL UNIQUE,
    role        TEXT NOT NULL,
    scope       TEXT NOT NULL,
    label       TEXT,
    created_at  BIGINT NOT NULL
);
"#;

/// Applies every migration not applied yet. Safe to call from many instances at once.
pub(crate) async fn migrate(client: &mut Client, now_ms: i64) -> Result<Vec<i32>, StoreError> {
    let tx = client.transaction().await.map_err(store_err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(store_err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS idem_schema_migrations (
             version    INTEGER PRIMARY KEY,
             applied_at BIGINT NOT NULL
         )",
    )
    .await
    .map_err(store_err)?;
    let rows = tx
        .query("SELECT version FROM idem_schema_migrations", &[])
        .await
        .map_err(store_err)?;
    let mut applied = Vec::with_capacity(rows.len());
    for row in rows {
        applied.push(row.try_get::<_, i32>(0).map_err(store_err)?);
    }
    if let Some(newest) = applied.iter().max() {
        if *newest > MIGRATIONS.iter().map(|m| m.0).max().unwrap_or(0) {
            return Err(StoreError::Internal(format!(
                "database schema version {newest} is newer than this idem understands; \
                 upgrade idem"
            )));
        }
    }
    let mut ran = Vec::new();
    for (version, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(sql).await.map_err(store_err)?;
        tx.execute(
            "INSERT INTO idem_schema_migrations (version, applied_at) VALUES ($1, $2)",
            &[version, &now_ms],
        )
        .await
        .map_err(store_err)?;
        ran.push(*version);
    }
    tx.commit().await.map_err(store_err)?;
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_postgres::NoTls;

    async fn connect(cfg: &tokio_postgres::Config) -> tokio_postgres::Client {
        let (client, conn) = cfg.connect(NoTls).await.expect("connect");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }

    /// A version-4 ledger's alerts move to the outbox at version 5: ids, states, tries and
    /// due times kept, payloads readable by the alert sender, the id sequence continuing
    /// after the old one; the old table is gone. Needs `IDEM_TEST_PG`.
    #[tokio::test]
    async fn version_4_alerts_move_to_the_outbox() {
        let Ok(base) = std::env::var("IDEM_TEST_PG") else {
            eprintln!("SKIPPED version_4_alerts_move_to_the_outbox: IDEM_TEST_PG is not set");
            return;
        };
        let admin_cfg: tokio_postgres::Config = base.parse().expect("IDEM_TEST_PG");
        let db = format!("idem_m_{:016x}", rand::random::<u64>());
        let admin = connect(&admin_cfg).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .expect("create database");
        let mut cfg = admin_cfg.clone();
        cfg.dbname(&db);
        let pool =
            deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(cfg.clone(), NoTls))
                .max_size(1)
                .build()
                .expect("pool");
        {
            let old = connect(&cfg).await;
            old.batch_execute(
                "CREATE TABLE idem_schema_migrations (version INTEGER PRIMARY KEY, \
                 applied_at BIGINT NOT NULL)",
            )
            .await
            .expect("versions");
            for (v, sql) in &MIGRATIONS[..4] {
                old.batch_execute(sql).await.expect("old schema");
                old.execute("INSERT INTO idem_schema_migrations VALUES ($1, 0)", &[v])
                    .await
                    .expect("version");
            }
            for (key, status, tries, next_at) in [
                ("a", "pending", 2i64, 9_000i64),
                ("b", "sent", 1, 1_000),
                ("c", "gave_up", 6, 1_000),
                ("d", "pending", 0, 5_000),
            ] {
                old.execute(
                    "INSERT INTO alerts (namespace, key, reason, state, error_category, attempt, \
                     created_at, next_at, tries, status) \
                     VALUES ('n', $1, 'needs_review', 'needs_review', 'timeout', 2, 100, $2, $3, $4)",
                    &[&key, &next_at, &tries, &status],
                )
                .await
                .expect("alert");
            }
            // The highest id ever handed out was deleted (retention): it must not come back.
            old.execute("DELETE FROM alerts WHERE key = 'd'", &[])
                .await
                .expect("delete");
        }
        let mut client = crate::conn::Conn::new(
            pool.get().await.expect("client"),
            crate::conn::Mode::Prepared,
            None,
        );
        assert_eq!(
            migrate(&mut client, 0).await.expect("migrate"),
            (5..=MIGRATIONS.len() as i32).collect::<Vec<_>>()
        );
        let rows = client
            .query(
                "SELECT id, kind, key, state, attempts, due_at, payload FROM outbox ORDER BY id",
                &[],
            )
            .await
            .expect("outbox");
        let shape: Vec<(i64, String, String, String, i64, i64)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
            .collect();
        let expect = [
            (1, "a", "pending", 2, 9_000),
            (2, "b", "done", 1, 1_000),
            (3, "c", "dead", 6, 1_000),
        ];
        assert_eq!(shape.len(), expect.len(), "{shape:?}");
        for (got, want) in shape.iter().zip(expect) {
            assert_eq!(
                (
                    got.0,
                    got.1.as_str(),
                    got.2.as_str(),
                    got.3.as_str(),
                    got.4,
                    got.5
                ),
                (want.0, "alert", want.1, want.2, want.3, want.4)
            );
        }
        let payload: Vec<u8> = rows[0].get(6);
        let p = idem_store::AlertPayload::decode(&payload).expect("payload");
        assert_eq!(
            p,
            idem_store::AlertPayload {
                reason: "needs_review".into(),
                state: "needs_review".into(),
                error_category: Some("timeout".into()),
                attempt: 2,
                traceparent: None,
            }
        );
        let gone = client
            .query_one("SELECT to_regclass('alerts') IS NULL", &[])
            .await
            .expect("regclass");
        assert!(gone.get::<_, bool>(0));
        let next = client
            .query_one(
                "INSERT INTO outbox (kind, namespace, key, dedupe, payload, created_at, due_at) \
                 VALUES ('alert', 'n', 'e', 'x', ''::bytea, 0, 0) RETURNING id",
                &[],
            )
            .await
            .expect("new item");
        assert_eq!(
            next.get::<_, i64>(0),
            5,
            "ids continue after the old table's"
        );
        drop(client);
        drop(pool);
        let _ = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
            .await;
    }

    /// The triggers look for the very mark the counting statements carry.
    #[test]
    fn the_trigger_condition_looks_for_the_mark_the_statements_carry() {
        let mark = crate::rows::COUNTS_ITSELF;
        assert_eq!(V17.matches(&format!("'{mark}'")).count(), 2);
        assert!(crate::rows::counted_insert("ins").contains(mark));
        assert!(crate::rows::counted_move("upd").contains(mark));
    }

    /// Applied migrations are frozen text and keep their own spelling of state names; this
    /// proves it is the domain's, the one every query is built with (the partial indexes are
    /// only used by queries whose predicate matches theirs).
    #[test]
    fn migrations_spell_states_as_the_domain_does() {
        use idem_core::State;
        use idem_store::sql;
        let all: String = MIGRATIONS.iter().map(|(_, m)| *m).collect();
        for fragment in [
            format!(
                "WHERE state IN ({}) AND NOT result_expired;",
                sql::retained_states()
            ),
            format!("WHERE state IN ({});", sql::retained_states()),
            format!("WHERE state = {};", sql::state(State::Processing)),
            format!(
                "WHERE state IN ({});",
                sql::states(&idem_store::REVIEW_STATES)
            ),
        ] {
            assert!(all.contains(&fragment), "{fragment}");
        }
    }
}
