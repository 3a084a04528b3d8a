//! The outbox in SQLite: the statements behind the `outbox_*` methods of the store (and the
//! alert wrappers), run as writer steps (or on a reader for plain reads).
//!
//! Exactly one sender per item follows from the single writer: a claim is one
//! `UPDATE … RETURNING` inside the writer's transaction, and SQLite's write lock serialises it
//! with every other claim, also from other processes on the same file; a leased item is
//! claimable again only once its lease ran out (`due_at` is the end of the lease while
//! leased). A finish changes an item only while the finishing lease still holds it. This
//! module must never hand one item to two live leases, and never log a payload.

use idem_core::Timestamp;
use idem_store::{
    NewOutboxItem, OutboxClaim, OutboxItem, OutboxKind, OutboxLease, OutboxOutcome, OutboxState,
    StoreError,
};
use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::error::SqlResult;

const ITEM_COLS: &str = "id, kind, namespace, key, dedupe, payload, created_at, due_at, \
    attempts, state, lease_owner, lease_until, last_error";

/// A text column this build does not know (an outbox kind or state) as a conversion failure
/// (mapped to `Corrupt`).
fn known<T>(i: usize, parsed: Option<T>) -> rusqlite::Result<T> {
    parsed.ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            format!("unknown outbox value in column {i}").into(),
        )
    })
}

fn item_from_row(r: &Row<'_>) -> rusqlite::Result<OutboxItem> {
    let (owner, until): (Option<String>, Option<i64>) = (r.get(10)?, r.get(11)?);
    Ok(OutboxItem {
        id: r.get(0)?,
        kind: known(1, OutboxKind::parse(&r.get::<_, String>(1)?))?,
        namespace: r.get(2)?,
        key: r.get(3)?,
        dedupe: r.get(4)?,
        payload: r.get(5)?,
        created_at: Timestamp(r.get(6)?),
        due_at: Timestamp(r.get(7)?),
        attempts: u32::try_from(r.get::<_, i64>(8)?).unwrap_or(u32::MAX),
        state: known(9, OutboxState::parse(&r.get::<_, String>(9)?))?,
        lease: owner.zip(until).map(|(owner, until)| OutboxLease {
            owner,
            until: Timestamp(until),
        }),
        last_error: r.get(12)?,
    })
}

/// Enqueues one item; `None` when its `(namespace, key, kind, dedupe)` exists already.
pub(crate) fn enqueue(
    conn: &Connection,
    item: &NewOutboxItem,
    now: Timestamp,
) -> Result<Option<i64>, StoreError> {
    let n = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO outbox (kind, namespace, key, dedupe, payload, created_at, \
             due_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .db()?
        .execute(params![
            item.kind.as_str(),
            item.namespace,
            item.key,
            item.dedupe,
            item.payload,
            now.0,
            item.due_at.0,
        ])
        .db()?;
    Ok((n == 1).then(|| conn.last_insert_rowid()))
}

/// Leases due items of `kind` to one fresh holder (see the module doc).
pub(crate) fn claim(conn: &Connection, c: &OutboxClaim) -> Result<Vec<OutboxItem>, StoreError> {
    let OutboxClaim {
        kind, now, limit, ..
    } = *c;
    let lease = c.fresh_lease();
    let mut stmt = conn.prepare_cached(&claim_sql(limit)).db()?;
    let rows = stmt
        .query_map(
            params![kind.as_str(), now.0, lease.until.0, lease.owner],
            item_from_row,
        )
        .db()?;
    let mut out = rows.collect::<Result<Vec<_>, _>>().db()?;
    // RETURNING gives no order; senders work oldest first.
    out.sort_by_key(|i| (i.created_at, i.id));
    Ok(out)
}

/// The claim statement for at most `limit` items (the limit in its text: see
/// [`crate::rows::limit_clause`]).
fn claim_sql(limit: usize) -> String {
    format!(
        "UPDATE outbox SET state = 'leased', lease_owner = ?4, lease_until = ?3, due_at = ?3 \
         WHERE id IN (SELECT id FROM outbox WHERE kind = ?1 AND state IN ('pending', 'leased') \
                      AND due_at <= ?2 ORDER BY due_at, id {}) \
         RETURNING {ITEM_COLS}",
        crate::rows::limit_clause(limit)
    )
}

/// Records an outcome for the holder `lease` (`None`: whoever holds a live item — only the
/// alert wrapper, whose callers predate leases). Returns whether the item changed.
pub(crate) fn finish(
    conn: &Connection,
    id: i64,
    lease: Option<&OutboxLease>,
    outcome: &OutboxOutcome,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let (state, due_at, error, finished_at) = match outcome {
        OutboxOutcome::Done => (OutboxState::Done, None, None, Some(now.0)),
        OutboxOutcome::Retry { at, error } => {
            (OutboxState::Pending, Some(at.0), error.as_deref(), None)
        }
        OutboxOutcome::Dead { error } => (OutboxState::Dead, None, error.as_deref(), Some(now.0)),
    };
    let n = conn
        .prepare_cached(
            "UPDATE outbox SET state = ?3, attempts = attempts + 1, due_at = COALESCE(?4, due_at), \
             last_error = COALESCE(?5, last_error), finished_at = ?6, \
             lease_owner = NULL, lease_until = NULL \
             WHERE id = ?1 AND state IN ('pending', 'leased') \
               AND (?2 IS NULL OR (state = 'leased' AND lease_owner = ?2))",
        )
        .db()?
        .execute(params![
            id,
            lease.map(|l| l.owner.as_str()),
            state.as_str(),
            due_at,
            error,
            finished_at,
        ])
        .db()?;
    Ok(n == 1)
}

/// One item, any state.
pub(crate) fn item(conn: &Connection, id: i64) -> Result<Option<OutboxItem>, StoreError> {
    let sql = format!("SELECT {ITEM_COLS} FROM outbox WHERE id = ?1");
    conn.prepare_cached(&sql)
        .db()?
        .query_row(params![id], item_from_row)
        .optional()
        .db()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rusqlite::StatementStatus;

    use super::*;
    use crate::schema::open_writer;

    /// A background pass claims with the same statement every time: SQLite must run it from
    /// the cache, not prepare it again (a bare `LIMIT ?` bound to an integer is compiled as
    /// that constant, and every new binding expired the statement: ~300 k instructions a
    /// pass, twice every 200 ms, busy or idle).
    #[test]
    fn a_claim_runs_its_cached_statement_without_preparing_it_again() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = open_writer(&dir.path().join("o.db"), Duration::from_secs(1)).expect("open");
        for (i, limit) in [16, 16, 64, 16, 64].into_iter().enumerate() {
            let c = OutboxClaim {
                kind: OutboxKind::Effect,
                now: Timestamp(1_000 + i as i64),
                limit,
                lease_ms: 1_000,
            };
            claim(&conn, &c).expect("claim");
        }
        for limit in [16, 64] {
            let stmt = conn.prepare_cached(&claim_sql(limit)).expect("cached");
            assert_eq!(
                stmt.get_status(StatementStatus::RePrepare),
                0,
                "limit {limit}"
            );
        }
    }
}
