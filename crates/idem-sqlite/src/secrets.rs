//! The secrets table in SQLite: versions of the secrets the server reads back (signing
//! secrets of alerts, intake sources and forwards), newest first, each active until its
//! `expires_at`. Values are stored as given so they can be used to sign and verify; this
//! module must never log one or put one in an error.

use idem_core::Timestamp;
use idem_store::{Secret, SecretOwner, StoreError, StoredSecret};
use rusqlite::{params, Connection};

use crate::error::SqlResult;

pub(crate) fn secret_add(
    conn: &Connection,
    owner: &SecretOwner,
    value: &Secret,
    expires_at: Option<Timestamp>,
    others_expire_at: Option<Timestamp>,
    now: Timestamp,
) -> Result<i64, StoreError> {
    if let Some(at) = others_expire_at {
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
        value.expose(),
        now.0,
        expires_at.map(|t| t.0),
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
