//! Queries served by the read connections.
//!
//! Invariants: every read that looks at more than one statement runs in one read transaction
//! (one WAL snapshot), so a record is never shown with events from a later write; reads never
//! write (the connections are `query_only`).

use std::sync::LazyLock;

use idem_core::{EventDraft, Key, Namespace, Op, OpError, Reply, State, Timestamp};
use idem_store::engine::{self, NsOwned};
use idem_store::{
    ApiToken, Cursor, ExecCtx, ListQuery, NamespaceInfo, NamespaceStats, Page, RecordWithEvents,
    Role, Stats, StoreError,
};
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{corrupt, SqlResult};

/// A read transaction (one WAL snapshot) on a read connection.
///
/// rusqlite's `Transaction` sends `BEGIN` and its end through `execute_batch`, which parses
/// the text again every time; these are the writer's cached statements (1.7 k instructions
/// less a read, of the 46 k a duplicate claim's snapshot read costs). Dropped without [`Snapshot::finish`] (an error
/// on the way), it rolls back, as `Transaction` does.
pub(crate) struct Snapshot<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Snapshot<'c> {
    pub(crate) fn begin(conn: &'c mut Connection) -> Result<Snapshot<'c>, StoreError> {
        crate::writer::exec(conn, "BEGIN")?;
        Ok(Snapshot { conn, open: true })
    }

    /// Ends the read (`COMMIT`; it wrote nothing).
    pub(crate) fn finish(mut self) -> Result<(), StoreError> {
        self.open = false;
        crate::writer::exec(self.conn, "COMMIT")
    }
}

impl std::ops::Deref for Snapshot<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        if self.open {
            // The transaction ends with the connection's next use at the latest: a failed
            // rollback leaves it open, and `BEGIN` on it then fails, answered as an error.
            let _ = crate::writer::exec(self.conn, "ROLLBACK");
        }
    }
}

use crate::rows::{
    collect_counts, count_states, load_events, load_namespace, load_namespace_with_secret,
    load_record, record_from_row, RECORD_SELECT,
};

pub(crate) fn get(
    conn: &mut Connection,
    ns: &Namespace,
    key: &Key,
) -> Result<Option<RecordWithEvents>, StoreError> {
    let tx = Snapshot::begin(conn)?;
    let Some(stored) = load_record(&tx, ns, key)? else {
        return Ok(None);
    };
    let events = load_events(&tx, stored.rid)?;
    Ok(Some(RecordWithEvents {
        record: stored.record,
        events,
    }))
}

// Four spellings so that each one can use its index ((namespace, [state,] updated_at DESC,
// key DESC)); a generic `?x IS NULL OR …` filter would defeat the planner.
static LIST_SQL: LazyLock<[String; 4]> = LazyLock::new(|| {
    let base = format!(
        "SELECT {} FROM records WHERE namespace = ?1",
        *RECORD_SELECT
    );
    let order = "ORDER BY updated_at DESC, key DESC LIMIT ?2";
    [
        format!("{base} {order}"),
        format!("{base} AND state = ?3 {order}"),
        format!("{base} AND (updated_at, key) < (?4, ?5) {order}"),
        format!("{base} AND state = ?3 AND (updated_at, key) < (?4, ?5) {order}"),
    ]
});

pub(crate) fn list(
    conn: &mut Connection,
    ns: &Namespace,
    q: &ListQuery,
) -> Result<Page, StoreError> {
    let limit = q.limit.clamp(1, 1000);
    let cursor = match &q.cursor {
        None => None,
        Some(c) => Some(Cursor::decode(c).ok_or(StoreError::InvalidCursor)?),
    };
    let fetch = (limit + 1) as i64; // one more than asked tells whether a next page exists
    if q.owner.is_some() || q.correlation_id.is_some() {
        return list_filtered(conn, ns, q, cursor, fetch, limit);
    }
    let state = q.state.map(State::as_str);
    let sql = &LIST_SQL[usize::from(q.state.is_some()) + 2 * usize::from(cursor.is_some())];
    let mut stmt = conn.prepare_cached(sql).db()?;
    let mut rows = match (&cursor, state) {
        (None, None) => stmt.query(params![ns.as_str(), fetch]),
        (None, Some(s)) => stmt.query(params![ns.as_str(), fetch, s]),
        (Some(c), None) => stmt.query(params![
            ns.as_str(),
            fetch,
            rusqlite::types::Null,
            c.updated_at,
            c.key
        ]),
        (Some(c), Some(s)) => stmt.query(params![ns.as_str(), fetch, s, c.updated_at, c.key]),
    }
    .db()?;
    let mut items = Vec::with_capacity(limit.min(128));
    while let Some(row) = rows.next().db()? {
        items.push(record_from_row(row)?);
    }
    Ok(Page::from_fetched(items, limit))
}

/// A page filtered by owner and/or correlation id as well: the same order and index
/// (namespace[, state], updated_at DESC, key DESC), the extra conditions checked on the rows
/// it walks.
fn list_filtered(
    conn: &mut Connection,
    ns: &Namespace,
    q: &ListQuery,
    cursor: Option<Cursor>,
    fetch: i64,
    limit: usize,
) -> Result<Page, StoreError> {
    use rusqlite::types::Value;
    let mut sql = format!(
        "SELECT {} FROM records WHERE namespace = ?1",
        *RECORD_SELECT
    );
    let mut vals = vec![Value::Text(ns.as_str().to_owned())];
    let mut text = |sql: &mut String, column: &str, v: &str| {
        vals.push(Value::Text(v.to_owned()));
        sql.push_str(&format!(" AND {column} = ?{}", vals.len()));
    };
    if let Some(s) = q.state {
        text(&mut sql, "state", s.as_str());
    }
    if let Some(o) = &q.owner {
        text(&mut sql, "owner", o);
    }
    if let Some(c) = &q.correlation_id {
        text(&mut sql, "correlation_id", c);
    }
    if let Some(c) = cursor {
        vals.push(Value::Integer(c.updated_at));
        vals.push(Value::Text(c.key));
        let n = vals.len();
        sql.push_str(&format!(" AND (updated_at, key) < (?{}, ?{n})", n - 1));
    }
    vals.push(Value::Integer(fetch));
    sql.push_str(&format!(
        " ORDER BY updated_at DESC, key DESC LIMIT ?{}",
        vals.len()
    ));
    let mut stmt = conn.prepare_cached(&sql).db()?;
    let mut rows = stmt.query(rusqlite::params_from_iter(vals)).db()?;
    let mut items = Vec::new();
    while let Some(row) = rows.next().db()? {
        items.push(record_from_row(row)?);
    }
    Ok(Page::from_fetched(items, limit))
}

pub(crate) fn namespace(
    conn: &mut Connection,
    ns: &Namespace,
) -> Result<NamespaceInfo, StoreError> {
    let tx = Snapshot::begin(conn)?;
    let (policy, paused) = load_namespace_with_secret(&tx, ns.as_str())?;
    Ok(NamespaceInfo {
        namespace: ns.as_str().to_owned(),
        paused,
        policy,
        counts: count_states(&tx, ns.as_str())?,
    })
}

/// A namespace's hourly stats buckets from hour `?2` on (at most 24 rows by the key).
pub(crate) fn namespace_stats(
    conn: &mut Connection,
    ns: &Namespace,
    now: Timestamp,
) -> Result<NamespaceStats, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT acquired_first, acquired_retry, tokens, usd_nanos, retry_tokens, \
             retry_usd_nanos FROM ns_stats WHERE namespace = ?1 AND hour >= ?2",
        )
        .db()?;
    let mut rows = stmt
        .query(params![ns.as_str(), NamespaceStats::first_hour(now)])
        .db()?;
    let mut out = NamespaceStats::default();
    while let Some(r) = rows.next().db()? {
        out.add_row([
            r.get(0).db()?,
            r.get(1).db()?,
            r.get(2).db()?,
            r.get(3).db()?,
            r.get(4).db()?,
            r.get(5).db()?,
        ]);
    }
    Ok(out)
}

static OLDEST_REVIEW: LazyLock<String> = LazyLock::new(idem_store::sql::oldest_review);

static OLDEST_PROCESSING: LazyLock<String> = LazyLock::new(idem_store::sql::oldest_processing);

pub(crate) fn stats(conn: &mut Connection, now: Timestamp) -> Result<Stats, StoreError> {
    let tx = Snapshot::begin(conn)?;
    let records = {
        let mut stmt = tx
            .prepare_cached("SELECT state, SUM(n) FROM namespace_counts GROUP BY state")
            .db()?;
        let rows = stmt.query([]).db()?;
        collect_counts(rows)?
    };
    let oldest: Option<i64> = tx
        .prepare_cached(&OLDEST_PROCESSING)
        .db()?
        .query_row([], |r| r.get(0))
        .db()?;
    let review: Option<i64> = tx
        .prepare_cached(&OLDEST_REVIEW)
        .db()?
        .query_row([], |r| r.get(0))
        .db()?;
    let age = |t: i64| (now.0.saturating_sub(t)).max(0) as f64 / 1000.0;
    Ok(Stats {
        oldest_processing_seconds: oldest.map_or(0.0, age),
        review_oldest_seconds: review.map_or(0.0, age),
        review_queue_depth: records.get(State::NeedsReview),
        records,
    })
}

/// The columns [`token_row`] reads, in its order.
const TOKEN_COLUMNS: &str =
    "id, secret_hash, role, scope, label, created_at, expires_at, last_used_at";

fn token_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<ApiToken, StoreError>> {
    let role: String = r.get(2)?;
    let Some(role) = Role::parse(&role) else {
        return Ok(Err(corrupt("token role", &role)));
    };
    Ok(Ok(ApiToken {
        id: r.get(0)?,
        secret_hash: r.get(1)?,
        role,
        scope: r.get(3)?,
        label: r.get(4)?,
        created_at: Timestamp(r.get(5)?),
        expires_at: r.get::<_, Option<i64>>(6)?.map(Timestamp),
        last_used_at: r.get::<_, Option<i64>>(7)?.map(Timestamp),
    }))
}

pub(crate) fn find_token(
    conn: &mut Connection,
    secret_hash: &str,
) -> Result<Option<ApiToken>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE secret_hash = ?1 AND revoked_at IS NULL"
    ))
    .db()?
    .query_row(params![secret_hash], token_row)
    .optional()
    .db()?
    .transpose()
}

pub(crate) fn list_tokens(conn: &mut Connection) -> Result<Vec<ApiToken>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE revoked_at IS NULL ORDER BY id"
        ))
        .db()?;
    let rows = stmt.query_map([], token_row).db()?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row.db()??);
    }
    Ok(out)
}

pub(crate) fn token_count(conn: &mut Connection) -> Result<u64, StoreError> {
    let n: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM api_tokens")
        .db()?
        .query_row([], |r| r.get(0))
        .db()?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(crate) fn ping(conn: &mut Connection) -> Result<(), StoreError> {
    conn.prepare_cached("SELECT 1")
        .db()?
        .query_row([], |r| r.get::<_, i64>(0))
        .db()?;
    Ok(())
}

/// A decision made on a read snapshot that changes nothing but the audit trail (at most one
/// event).
pub(crate) struct SnapshotDecision {
    /// Row id of the record the events belong to.
    pub(crate) rid: i64,
    pub(crate) from_state: State,
    pub(crate) events: Vec<EventDraft>,
    pub(crate) reply: Result<Reply, OpError>,
}

/// Decides `op` on one read snapshot (record + namespace settings) and returns the decision
/// only when it writes nothing but events — a duplicate hit, `in_flight`, a fingerprint
/// conflict, a refusal. `None` means the operation changes the record (or there is no record
/// yet) and must go through the writer, which decides again on its own, newest data.
///
/// Why deciding on a snapshot is exact for these: the snapshot is the latest committed state
/// when the read began, and the decision is `idem_core::apply` itself. A write still queued in
/// the writer is not acknowledged to anybody yet, so this operation is ordered before it.
pub(crate) fn decide_on_snapshot(
    conn: &mut Connection,
    ns: &Namespace,
    key: &Key,
    op: &Op,
    ctx: &ExecCtx,
) -> Result<Option<SnapshotDecision>, StoreError> {
    let tx = Snapshot::begin(conn)?;
    let Some(stored) = load_record(&tx, ns, key)? else {
        return Ok(None);
    };
    let (policy, paused) = load_namespace(&tx, ns.as_str())?;
    tx.finish()?;
    let settings = NsOwned { policy, paused };
    let from_state = stored.record.state;
    let Some(t) = engine::decide_known_owned(ns, key, stored.record, op, ctx, &settings) else {
        return Ok(None);
    };
    if !engine::plan(&t, &settings.policy, ctx.now, ctx.traceparent.as_deref()).only_audit() {
        return Ok(None);
    }
    Ok(Some(SnapshotDecision {
        rid: stored.rid,
        from_state,
        events: t.events,
        reply: t.reply,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal_file() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("snap.db");
        let c = Connection::open(&path).expect("open");
        c.execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);",
        )
        .expect("setup");
        (dir, path)
    }

    fn count(c: &Connection) -> i64 {
        c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count")
    }

    #[test]
    fn a_snapshot_sees_one_state_and_ends_on_finish_or_drop() {
        let (_dir, path) = wal_file();
        let mut reader = Connection::open(&path).expect("reader");
        let writer = Connection::open(&path).expect("writer");

        let snap = Snapshot::begin(&mut reader).expect("begin");
        assert_eq!(count(&snap), 1);
        writer
            .execute("INSERT INTO t VALUES (2)", [])
            .expect("write");
        // Still the state the read began on: one snapshot for every statement.
        assert_eq!(count(&snap), 1);
        assert!(!snap.is_autocommit());
        snap.finish().expect("finish");
        assert!(reader.is_autocommit());
        assert_eq!(count(&reader), 2);

        // Dropped on the way (an error): rolled back, the connection usable again.
        {
            let snap = Snapshot::begin(&mut reader).expect("begin");
            assert_eq!(count(&snap), 2);
            writer
                .execute("INSERT INTO t VALUES (3)", [])
                .expect("write");
            assert_eq!(count(&snap), 2);
        }
        assert!(reader.is_autocommit());
        assert_eq!(count(&reader), 3);
        let again = Snapshot::begin(&mut reader).expect("a new snapshot after a drop");
        assert_eq!(count(&again), 3);
    }
}
