//! The secrets table in PostgreSQL: versions of the secrets the server reads back (signing
//! secrets of alerts, intake sources and forwards), newest first, each active until its
//! `expires_at`. Values are stored as given so they can be used to sign and verify; this
//! module must never log one or put one in an error (driver errors name no parameter values).

use crate::conn::Tx as Transaction;
use idem_core::{AlertSecret, Timestamp};
use idem_store::{
    alert_owner, alert_secret_from_stored, AlertSecretWrite, NewSecret, Secret, SecretKind,
    SecretOwner, StoredSecret,
};
use tokio_postgres::types::ToSql;

use crate::error::PgError;
use crate::PgStore;
use crate::{column, corrupt};

pub(crate) async fn secret_add(
    store: &PgStore,
    new: &NewSecret,
    now: Timestamp,
) -> Result<i64, PgError> {
    let owner = &new.owner;
    let mut client = store.client().await?;
    let tx = client.transaction().await?;
    if let Some(at) = new.others_expire_at {
        tx.execute(
            "UPDATE secrets SET expires_at = $3 WHERE kind = $1 AND owner = $2 \
             AND (expires_at IS NULL OR expires_at > $3)",
            &[&owner.kind.as_str(), &owner.name, &at.0],
        )
        .await?;
    }
    let row = tx
        .query_one(
            "INSERT INTO secrets (kind, owner, value, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
            &[
                &owner.kind.as_str(),
                &owner.name,
                &new.value.expose(),
                &now.0,
                &new.expires_at.map(|t| t.0),
            ],
        )
        .await?;
    let id = row.try_get(0).map_err(|e| corrupt(&e))?;
    tx.commit().await?;
    Ok(id)
}

pub(crate) async fn secrets(
    store: &PgStore,
    owner: &SecretOwner,
    now: Timestamp,
) -> Result<Vec<StoredSecret>, PgError> {
    let client = store.client().await?;
    let stmt = client
        .prepare_cached(
            "SELECT id, value, created_at, expires_at FROM secrets \
             WHERE kind = $1 AND owner = $2 AND (expires_at IS NULL OR expires_at > $3) \
             ORDER BY id DESC",
        )
        .await?;
    let rows = client
        .query(&stmt, &[&owner.kind.as_str(), &owner.name, &now.0])
        .await?;
    rows.iter()
        .map(|r| {
            Ok(StoredSecret {
                id: r.try_get(0).map_err(|e| corrupt(&e))?,
                value: Secret::new(r.try_get::<_, String>(1).map_err(|e| corrupt(&e))?),
                created_at: Timestamp(r.try_get(2).map_err(|e| corrupt(&e))?),
                expires_at: r
                    .try_get::<_, Option<i64>>(3)
                    .map_err(|e| corrupt(&e))?
                    .map(Timestamp),
            })
        })
        .collect()
}

pub(crate) async fn secrets_remove(store: &PgStore, owner: &SecretOwner) -> Result<usize, PgError> {
    let client = store.client().await?;
    let n = client
        .execute(
            "DELETE FROM secrets WHERE kind = $1 AND owner = $2",
            &[&owner.kind.as_str(), &owner.name],
        )
        .await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Deletes every version of `owner`'s secret, in the caller's transaction.
pub(crate) async fn delete_secrets(
    tx: &Transaction<'_>,
    owner: &SecretOwner,
) -> Result<(), PgError> {
    tx.execute(
        "DELETE FROM secrets WHERE kind = $1 AND owner = $2",
        &[&owner.kind.as_str(), &owner.name],
    )
    .await?;
    Ok(())
}

/// Replaces the versions of `owner`'s secret by `values` (none: removes the secret), in the
/// caller's transaction.
pub(crate) async fn replace_secrets<'v>(
    tx: &Transaction<'_>,
    owner: &SecretOwner,
    values: impl IntoIterator<Item = &'v str>,
    now: Timestamp,
) -> Result<(), PgError> {
    delete_secrets(tx, owner).await?;
    for v in values {
        tx.execute(
            "INSERT INTO secrets (kind, owner, value, created_at) VALUES ($1, $2, $3, $4)",
            &[&owner.kind.as_str(), &owner.name, &v, &now.0],
        )
        .await?;
    }
    Ok(())
}

/// Runs `upsert` (ending in `RETURNING (xmax = 0)`) and replaces each owner's secret by its
/// values, in one transaction: whether the upsert inserted its row (`xmax = 0` only for a
/// freshly inserted row).
pub(crate) async fn upsert_with_secrets(
    store: &PgStore,
    upsert: &str,
    params: &[&(dyn ToSql + Sync)],
    secrets: Vec<(SecretOwner, Vec<String>)>,
    now: Timestamp,
) -> Result<bool, PgError> {
    let mut client = store.client().await?;
    let tx = client.transaction().await?;
    let row = tx.query_one(upsert, params).await?;
    let created: bool = column(&row, 0)?;
    for (owner, values) in &secrets {
        replace_secrets(&tx, owner, values.iter().map(String::as_str), now).await?;
    }
    tx.commit().await?;
    Ok(created)
}

/// The newest version of a namespace's alert secret: what `$2`'s policy shows and signs with.
pub(crate) const ALERT_SECRET: &str =
    "SELECT value FROM secrets WHERE kind = $1 AND owner = $2 ORDER BY id DESC LIMIT 1";

/// The alert secret from the value [`ALERT_SECRET`] (or a join on it) read.
pub(crate) fn alert_secret_of(value: Option<String>) -> Result<Option<AlertSecret>, PgError> {
    Ok(value.as_deref().map(alert_secret_from_stored).transpose()?)
}

/// Applies a policy change to the namespace's alert secret, in the caller's transaction.
pub(crate) async fn write_alert_secret(
    tx: &Transaction<'_>,
    ns: &str,
    write: AlertSecretWrite<'_>,
    now: Timestamp,
) -> Result<(), PgError> {
    let owner = alert_owner(ns);
    let kind = SecretKind::Alert.as_str();
    if write == AlertSecretWrite::Keep {
        return Ok(());
    }
    tx.execute(
        "DELETE FROM secrets WHERE kind = $1 AND owner = $2",
        &[&kind, &owner.name],
    )
    .await?;
    if let AlertSecretWrite::Replace(s) = write {
        tx.execute(
            "INSERT INTO secrets (kind, owner, value, created_at) VALUES ($1, $2, $3, $4)",
            &[&kind, &owner.name, &s.expose(), &now.0],
        )
        .await?;
    }
    Ok(())
}
