//! The `actions` table in SQLite: a namespace's tools (the action document as JSON text) with
//! their header values in `secrets`, written in one writer transaction. This module must
//! never log a header value or put one in an error.

use idem_core::Timestamp;
use idem_store::{action_owner, ActionRow, ActionWrite, NewSecret, StoreError};
use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::error::SqlResult;
use crate::secrets;

pub(crate) fn action_put(
    conn: &Connection,
    w: &ActionWrite,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let existed = action_get(conn, &w.namespace, &w.name)?.is_some();
    conn.prepare_cached(
        "INSERT INTO actions (namespace, name, config, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (namespace, name) DO UPDATE SET \
         config = excluded.config, updated_at = excluded.updated_at",
    )
    .db()?
    .execute(params![w.namespace, w.name, w.config, now.0])
    .db()?;
    let owner = action_owner(&w.namespace, &w.name);
    secrets::secrets_remove(conn, &owner)?;
    if let Some(h) = &w.headers {
        secrets::secret_add(conn, &NewSecret::new(owner, h.clone()), now)?;
    }
    Ok(!existed)
}

fn action_row(r: &Row<'_>) -> rusqlite::Result<ActionRow> {
    Ok(ActionRow {
        namespace: r.get(0)?,
        name: r.get(1)?,
        config: r.get(2)?,
        created_at: Timestamp(r.get(3)?),
        updated_at: Timestamp(r.get(4)?),
    })
}

pub(crate) fn action_get(
    conn: &Connection,
    ns: &str,
    name: &str,
) -> Result<Option<ActionRow>, StoreError> {
    conn.prepare_cached(
        "SELECT namespace, name, config, created_at, updated_at FROM actions \
         WHERE namespace = ?1 AND name = ?2",
    )
    .db()?
    .query_row(params![ns, name], action_row)
    .optional()
    .db()
}

pub(crate) fn action_list(conn: &Connection, ns: &str) -> Result<Vec<ActionRow>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT namespace, name, config, created_at, updated_at FROM actions \
             WHERE namespace = ?1 ORDER BY name",
        )
        .db()?;
    let rows = stmt.query_map(params![ns], action_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(crate) fn action_delete(conn: &Connection, ns: &str, name: &str) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached("DELETE FROM actions WHERE namespace = ?1 AND name = ?2")
        .db()?
        .execute(params![ns, name])
        .db()?;
    secrets::secrets_remove(conn, &action_owner(ns, name))?;
    Ok(n > 0)
}
