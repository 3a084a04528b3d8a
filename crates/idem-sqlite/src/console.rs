//! What the operator console reads and writes: namespace names and activity, the review
//! queue across namespaces, and sign-in sessions (stored by hashes only).
//!
//! Invariants: the review queue is keyset-paged through the `records_review_queue` partial index
//! (and `records_processing` for stuck work), never a scan of the ledger; reads run on the
//! read connections, session writes on the writer like every other write.

use std::sync::LazyLock;

use idem_core::{Namespace, Record, Timestamp};
use idem_store::console::{
    oldest_processing_of, ReviewPlan, SqlArg, Statement, NAMESPACE_NAMES, SMALLEST_STUCK_AFTER,
};
use idem_store::{
    ConsoleSession, NamespaceActivity, NewConsoleSession, ReviewPage, ReviewQuery, StoreError,
};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use crate::error::SqlResult;
use crate::rows::{record_from_row, RECORD_SELECT};

pub(crate) fn namespace_names(conn: &mut Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached(NAMESPACE_NAMES).db()?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0)).db()?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r.db()?);
    }
    Ok(out)
}

static OLDEST_PROCESSING_OF: LazyLock<String> = LazyLock::new(|| oldest_processing_of('?'));

pub(crate) fn namespace_activity(
    conn: &mut Connection,
    ns: &Namespace,
    now: Timestamp,
) -> Result<NamespaceActivity, StoreError> {
    let tx = crate::read_ops::Snapshot::begin(conn)?;
    let today = crate::write_ops::daily_count(&tx, ns.as_str(), now.utc_day())?;
    let oldest: Option<i64> = tx
        .prepare_cached(&OLDEST_PROCESSING_OF)
        .db()?
        .query_row(params![ns.as_str()], |r| r.get(0))
        .db()?;
    Ok(NamespaceActivity {
        acquired_today: today,
        oldest_processing_at: oldest.map(Timestamp),
    })
}

pub(crate) fn review_queue(
    conn: &mut Connection,
    q: &ReviewQuery,
    now: Timestamp,
) -> Result<ReviewPage, StoreError> {
    let plan = ReviewPlan::new(q, '?', &RECORD_SELECT)?;
    let tx = crate::read_ops::Snapshot::begin(conn)?;
    let mut items = Vec::new();
    if let Some(waiting) = plan.waiting() {
        fetch_records(&tx, &waiting, &mut items)?;
    }
    if plan.wants_stuck() {
        let smallest: Option<i64> = tx
            .prepare_cached(SMALLEST_STUCK_AFTER)
            .db()?
            .query_row([], |r| r.get(0))
            .db()?;
        fetch_records(&tx, &plan.stuck(smallest, now), &mut items)?;
    }
    Ok(plan.page(items))
}

/// Runs one statement of the review queue and appends the records it returns.
fn fetch_records(
    tx: &Connection,
    half: &Statement,
    items: &mut Vec<Record>,
) -> Result<(), StoreError> {
    let vals = half.args.iter().map(|a| match a {
        SqlArg::Int(i) => Value::Integer(*i),
        SqlArg::Text(t) => Value::Text(t.clone()),
    });
    let mut stmt = tx.prepare_cached(&half.sql).db()?;
    let mut rows = stmt.query(params_from_iter(vals)).db()?;
    while let Some(row) = rows.next().db()? {
        items.push(record_from_row(row)?);
    }
    Ok(())
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
