//! What the operator console reads and writes: namespace names and activity, the review
//! queue across namespaces, and sign-in sessions (stored by hashes only).
//!
//! Invariants: the review queue is keyset-paged through the `records_review_queue` partial index
//! (and `records_processing` for stuck work), never a scan of the ledger; reads run on the
//! read connections, session writes on the writer like every other write.

use std::sync::LazyLock;

use idem_core::{Namespace, Policy, State, Timestamp};
use idem_store::{
    sql, ConsoleSession, NamespaceActivity, NewConsoleSession, ReviewCursor, ReviewPage,
    ReviewQuery, StoreError, REVIEW_STATES,
};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use crate::error::SqlResult;
use crate::rows::{record_from_row, RECORD_SELECT};

/// Distinct namespaces of the ledger by a loose index scan (one index seek per namespace,
/// not one row per record), plus those with only a stored policy.
const NAMES: &str = "WITH RECURSIVE n(ns) AS ( \
       SELECT (SELECT MIN(namespace) FROM records) \
       UNION ALL \
       SELECT (SELECT MIN(namespace) FROM records WHERE namespace > n.ns) FROM n \
       WHERE n.ns IS NOT NULL) \
     SELECT ns FROM n WHERE ns IS NOT NULL \
     UNION SELECT namespace FROM namespaces ORDER BY 1";

pub(crate) fn namespace_names(conn: &mut Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(NAMES).db()?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0)).db()?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r.db()?);
    }
    Ok(out)
}

static OLDEST_PROCESSING_OF: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT MIN(active_at) FROM records WHERE namespace = ?1 AND state = {}",
        sql::state(State::Processing)
    )
});

pub(crate) fn namespace_activity(
    conn: &mut Connection,
    ns: &Namespace,
    now: Timestamp,
) -> Result<NamespaceActivity, StoreError> {
    let tx = conn.transaction().db()?;
    let today: Option<i64> = tx
        .prepare_cached("SELECT count FROM daily_counts WHERE namespace = ?1 AND day = ?2")
        .db()?
        .query_row(params![ns.as_str(), now.utc_day()], |r| r.get(0))
        .optional()
        .db()?;
    let oldest: Option<i64> = tx
        .prepare_cached(&OLDEST_PROCESSING_OF)
        .db()?
        .query_row(params![ns.as_str()], |r| r.get(0))
        .db()?;
    Ok(NamespaceActivity {
        acquired_today: today.map_or(0, |n| u64::try_from(n).unwrap_or(0)),
        oldest_processing_at: oldest.map(Timestamp),
    })
}

/// The filters both halves of the review queue share: appended to `sql`, their values to
/// `vals` (numbered after the values already there).
fn review_filters(
    q: &ReviewQuery,
    cursor: Option<&ReviewCursor>,
    sql: &mut String,
    vals: &mut Vec<Value>,
) {
    let mut push = |sql: &mut String, column: &str, v: &str| {
        vals.push(Value::Text(v.to_owned()));
        sql.push_str(&format!(" AND {column} = ?{}", vals.len()));
    };
    if let Some(ns) = &q.namespace {
        push(sql, "namespace", ns.as_str());
    }
    if let Some(o) = &q.owner {
        push(sql, "owner", o);
    }
    if let Some(c) = &q.correlation_id {
        push(sql, "correlation_id", c);
    }
    if let Some(c) = cursor {
        vals.push(Value::Integer(c.updated_at));
        vals.push(Value::Text(c.namespace.clone()));
        vals.push(Value::Text(c.key.clone()));
        let n = vals.len();
        sql.push_str(&format!(
            " AND (updated_at, namespace, key) > (?{}, ?{}, ?{n})",
            n - 2,
            n - 1
        ));
    }
}

pub(crate) fn review_queue(
    conn: &mut Connection,
    q: &ReviewQuery,
    now: Timestamp,
) -> Result<ReviewPage, StoreError> {
    let limit = q.limit.clamp(1, 1000);
    let cursor = match &q.cursor {
        None => None,
        Some(c) => Some(ReviewCursor::decode(c).ok_or(StoreError::InvalidCursor)?),
    };
    let fetch = (limit + 1) as i64;
    let tx = conn.transaction().db()?;
    let mut items = Vec::new();
    let waiting: Vec<State> = match q.state {
        None => REVIEW_STATES.to_vec(),
        Some(s) if REVIEW_STATES.contains(&s) => vec![s],
        Some(_) => vec![],
    };
    if !waiting.is_empty() {
        // The predicate spells the partial index's exactly, so the planner may use it.
        let mut sql = format!(
            "SELECT {} FROM records WHERE state IN ({})",
            *RECORD_SELECT,
            sql::states(&REVIEW_STATES)
        );
        if waiting.len() == 1 {
            sql.push_str(&format!(" AND state = {}", sql::state(waiting[0])));
        }
        let mut vals = Vec::new();
        review_filters(q, cursor.as_ref(), &mut sql, &mut vals);
        vals.push(Value::Integer(fetch));
        sql.push_str(&format!(
            " ORDER BY updated_at, namespace, key LIMIT ?{}",
            vals.len()
        ));
        let mut stmt = tx.prepare_cached(&sql).db()?;
        let mut rows = stmt.query(params_from_iter(vals)).db()?;
        while let Some(row) = rows.next().db()? {
            items.push(record_from_row(row)?);
        }
    }
    if matches!(q.state, None | Some(State::Processing)) {
        // Stuck work: `processing` whose last activity is older than its namespace's
        // `stuck_after_ms`. The range on `active_at` (the `records_processing` index) uses
        // the smallest threshold of any namespace; each row is then held to its own.
        let default_stuck = Policy::default().stuck_after_ms;
        let smallest: Option<i64> = tx
            .prepare_cached("SELECT MIN(stuck_after_ms) FROM namespaces")
            .db()?
            .query_row([], |r| r.get(0))
            .db()?;
        let bound = now.0 - smallest.map_or(default_stuck, |s| s.min(default_stuck));
        let mut sql = format!(
            "SELECT {} FROM records WHERE state = {} AND active_at <= ?1 \
             AND active_at <= ?2 - COALESCE((SELECT n.stuck_after_ms FROM namespaces n \
             WHERE n.namespace = records.namespace), ?3)",
            *RECORD_SELECT,
            sql::state(State::Processing)
        );
        let mut vals = vec![
            Value::Integer(bound),
            Value::Integer(now.0),
            Value::Integer(default_stuck),
        ];
        review_filters(q, cursor.as_ref(), &mut sql, &mut vals);
        vals.push(Value::Integer(fetch));
        sql.push_str(&format!(
            " ORDER BY updated_at, namespace, key LIMIT ?{}",
            vals.len()
        ));
        let mut stmt = tx.prepare_cached(&sql).db()?;
        let mut rows = stmt.query(params_from_iter(vals)).db()?;
        while let Some(row) = rows.next().db()? {
            items.push(record_from_row(row)?);
        }
    }
    Ok(ReviewPage::from_candidates(items, limit))
}

pub(crate) fn session_create_step(
    conn: &Connection,
    s: &NewConsoleSession,
) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM console_sessions WHERE expires_at <= ?1")
        .db()?
        .execute(params![s.created_at.0])
        .db()?;
    conn.prepare_cached(
        "INSERT INTO console_sessions (id_hash, token_hash, csrf, created_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .db()?
    .execute(params![
        s.id_hash,
        s.token_hash,
        s.csrf,
        s.created_at.0,
        s.expires_at.0
    ])
    .db()?;
    Ok(())
}

pub(crate) fn session_delete_step(conn: &Connection, id_hash: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM console_sessions WHERE id_hash = ?1")
        .db()?
        .execute(params![id_hash])
        .db()?;
    Ok(())
}

pub(crate) fn session_find(
    conn: &mut Connection,
    id_hash: &str,
    now: Timestamp,
) -> Result<Option<ConsoleSession>, StoreError> {
    conn.prepare_cached(
        "SELECT id_hash, token_hash, csrf, created_at, expires_at FROM console_sessions \
         WHERE id_hash = ?1 AND expires_at > ?2",
    )
    .db()?
    .query_row(params![id_hash, now.0], |r| {
        Ok(ConsoleSession {
            id_hash: r.get(0)?,
            token_hash: r.get(1)?,
            csrf: r.get(2)?,
            created_at: Timestamp(r.get(3)?),
            expires_at: Timestamp(r.get(4)?),
        })
    })
    .optional()
    .db()
}
