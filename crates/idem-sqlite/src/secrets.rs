//! The secrets table in SQLite: versions of the secrets the server reads back (signing
//! secrets of alerts, intake sources and forwards), newest first, each active until its
//! `expires_at`. Values are stored as given so they can be used to sign and verify; this
//! module must never log one or put one in an error.

use idem_core::{AlertSecret, Timestamp};
use idem_store::{
    alert_owner, alert_secret_from_stored, AlertSecretWrite, NewSecret, Secret, SecretKind,
    SecretOwner, StoreError, StoredSecret,
};
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::SqlResult;

pub(crate) fn secret_add(
    conn: &Connection,
    new: &NewSecret,
    now: Timestamp,
) -> Result<i64, StoreError> {
    let owner = &new.owner;
    if let Some(at) = new.others_expire_at {
        conn.prepare_cached(
            "UPDATE secrets SET expires_at = ?3 WHERE kind = ?1 AND owner = ?2 \
             AND (expires_at IS NULL OR expires_at > ?3)",
        )
        .db()?
        .execute(params![owner.kind.as_str(), owner.name, at.0])
        .db()?;
    }
    conn.prepare_cached(
        "INSERT INTO secrets (kind, owner, value, created_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .db()?
    .execute(params![
        owner.kind.as_str(),
        owner.name,
        new.value.expose(),
        now.0,
        new.expires_at.map(|t| t.0),
    ])
    .db()?;
    Ok(conn.last_insert_rowid())
}

pub(crate) fn secrets(
    conn: &Connection,
    owner: &SecretOwner,
    now: Timestamp,
) -> Result<Vec<StoredSecret>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, value, created_at, expires_at FROM secrets \
             WHERE kind = ?1 AND owner = ?2 AND (expires_at IS NULL OR expires_at > ?3) \
             ORDER BY id DESC",
        )
        .db()?;
    let rows = stmt
        .query_map(params![owner.kind.as_str(), owner.name, now.0], |r| {
            Ok(StoredSecret {
                id: r.get(0)?,
                value: Secret::new(r.get::<_, String>(1)?),
                created_at: Timestamp(r.get(2)?),
                expires_at: r.get::<_, Option<i64>>(3)?.map(Timestamp),
            })
        })
        .db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(crate) fn secrets_remove(conn: &Connection, owner: &SecretOwner) -> Result<usize, StoreError> {
    conn.prepare_cached("DELETE FROM secrets WHERE kind = ?1 AND owner = ?2")
        .db()?
        .execute(params![owner.kind.as_str(), owner.name])
        .db()
}

/// A namespace's alert signing secret: its newest version (a policy change keeps one).
pub(crate) fn alert_secret(conn: &Connection, ns: &str) -> Result<Option<AlertSecret>, StoreError> {
    let value: Option<String> = conn
        .prepare_cached(
            "SELECT value FROM secrets WHERE kind = ?1 AND owner = ?2 ORDER BY id DESC LIMIT 1",
        )
        .db()?
        .query_row(params![SecretKind::Alert.as_str(), ns], |r| r.get(0))
        .optional()
        .db()?;
    value.as_deref().map(alert_secret_from_stored).transpose()
}

/// Applies a policy change to the namespace's alert secret, in the caller's transaction.
pub(crate) fn write_alert_secret(
    conn: &Connection,
    ns: &str,
    write: AlertSecretWrite<'_>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let owner = alert_owner(ns);
    match write {
        AlertSecretWrite::Keep => {}
        AlertSecretWrite::Remove => {
            secrets_remove(conn, &owner)?;
        }
        AlertSecretWrite::Replace(s) => {
            secrets_remove(conn, &owner)?;
            secret_add(conn, &NewSecret::new(owner, Secret::new(s.expose())), now)?;
        }
    }
    Ok(())
}
