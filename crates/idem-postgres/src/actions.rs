//! The `actions` table in PostgreSQL: a namespace's tools (the action document as JSON text)
//! with their header values in `secrets`, each write one transaction. This module must never
//! log a header value (driver errors name no parameter values).

use idem_core::Timestamp;
use idem_store::{action_owner, ActionRow, ActionWrite};
use tokio_postgres::Row;

use crate::column;
use crate::error::PgError;
use crate::secrets::{delete_secrets, upsert_with_secrets};
use crate::PgStore;

pub(crate) async fn action_put(
    store: &PgStore,
    w: &ActionWrite,
    now: Timestamp,
) -> Result<bool, PgError> {
    let headers = w.headers.iter().map(|h| h.expose().to_owned()).collect();
    upsert_with_secrets(
        store,
        "INSERT INTO actions (namespace, name, config, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $4) ON CONFLICT (namespace, name) DO UPDATE SET \
         config = excluded.config, updated_at = excluded.updated_at RETURNING (xmax = 0)",
        &[&w.namespace, &w.name, &w.config, &now.0],
        vec![(action_owner(&w.namespace, &w.name), headers)],
        now,
    )
    .await
}

fn action_row(r: &Row) -> Result<ActionRow, PgError> {
    Ok(ActionRow {
        namespace: column(r, 0)?,
        name: column(r, 1)?,
        config: column(r, 2)?,
        created_at: Timestamp(column(r, 3)?),
        updated_at: Timestamp(column(r, 4)?),
    })
}

pub(crate) async fn action_get(
    store: &PgStore,
    ns: &str,
    name: &str,
) -> Result<Option<ActionRow>, PgError> {
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT namespace, name, config, created_at, updated_at FROM actions \
             WHERE namespace = $1 AND name = $2",
            &[&ns, &name],
        )
        .await?;
    rows.first().map(action_row).transpose()
}

pub(crate) async fn action_list(store: &PgStore, ns: &str) -> Result<Vec<ActionRow>, PgError> {
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT namespace, name, config, created_at, updated_at FROM actions \
             WHERE namespace = $1 ORDER BY name",
            &[&ns],
        )
        .await?;
    rows.iter().map(action_row).collect()
}

pub(crate) async fn action_delete(store: &PgStore, ns: &str, name: &str) -> Result<bool, PgError> {
    let mut client = store.client().await?;
    let tx = client.transaction().await?;
    let n = tx
        .execute(
            "DELETE FROM actions WHERE namespace = $1 AND name = $2",
            &[&ns, &name],
        )
        .await?;
    delete_secrets(&tx, &action_owner(ns, name)).await?;
    tx.commit().await?;
    Ok(n > 0)
}
