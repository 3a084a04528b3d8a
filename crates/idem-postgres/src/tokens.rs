//! API tokens: only the SHA-256 of a secret is stored and looked up; the secret itself never
//! reaches the database.

use idem_core::Timestamp;
use idem_store::{ApiToken, NewApiToken, Role, StoreError};

use crate::error::store_err;
use crate::rows::as_u64;
use crate::{corrupt, PgStore};

impl PgStore {
    pub(crate) async fn token_create(
        &self,
        token: NewApiToken,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            client
                .execute(
                    "INSERT INTO api_tokens \
                     (secret_hash, role, scope, label, created_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                    &[
                        &token.secret_hash,
                        &token.role.as_str(),
                        &token.scope,
                        &token.label,
                        &now.0,
                        &token.expires_at.map(|t| t.0),
                    ],
                )
                .await
                .map_err(store_err)?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn token_find(
        &self,
        secret_hash: &str,
    ) -> Result<Option<ApiToken>, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {TOKEN_COLUMNS} FROM api_tokens \
                     WHERE secret_hash = $1 AND revoked_at IS NULL"
                ))
                .await
                .map_err(store_err)?;
            let row = client
                .query_opt(&stmt, &[&secret_hash])
                .await
                .map_err(store_err)?;
            row.as_ref().map(token_row).transpose()
        })
        .await
    }

    pub(crate) async fn tokens_list(&self) -> Result<Vec<ApiToken>, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {TOKEN_COLUMNS} FROM api_tokens \
                         WHERE revoked_at IS NULL ORDER BY id"
                    ),
                    &[],
                )
                .await
                .map_err(store_err)?;
            rows.iter().map(token_row).collect()
        })
        .await
    }

    /// Sets `column` (`revoked_at` or `last_used_at`) of a live token; rows changed.
    async fn token_set(&self, column: &str, id: i64, now: Timestamp) -> Result<u64, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            client
                .execute(
                    &format!(
                        "UPDATE api_tokens SET {column} = $2 \
                         WHERE id = $1 AND revoked_at IS NULL"
                    ),
                    &[&id, &now.0],
                )
                .await
                .map_err(store_err)
        })
        .await
    }

    pub(crate) async fn token_revoke(&self, id: i64, now: Timestamp) -> Result<bool, StoreError> {
        Ok(self.token_set("revoked_at", id, now).await? > 0)
    }

    pub(crate) async fn token_touch(&self, id: i64, now: Timestamp) -> Result<(), StoreError> {
        self.token_set("last_used_at", id, now).await.map(|_| ())
    }

    pub(crate) async fn tokens_counted(&self) -> Result<u64, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let row = client
                .query_one("SELECT count(*) FROM api_tokens", &[])
                .await
                .map_err(store_err)?;
            let n: i64 = row.try_get(0).map_err(|e| store_err(corrupt(&e)))?;
            Ok(as_u64(n))
        })
        .await
    }
}

/// The columns [`token_row`] reads, in its order.
const TOKEN_COLUMNS: &str =
    "id, secret_hash, role, scope, label, created_at, expires_at, last_used_at";

fn token_row(row: &tokio_postgres::Row) -> Result<ApiToken, StoreError> {
    let get_err = |e: tokio_postgres::Error| store_err(corrupt(&e));
    let role: String = row.try_get(2).map_err(get_err)?;
    Ok(ApiToken {
        id: row.try_get(0).map_err(get_err)?,
        secret_hash: row.try_get(1).map_err(get_err)?,
        role: Role::parse(&role)
            .ok_or_else(|| StoreError::Corrupt(format!("token role {role:?}")))?,
        scope: row.try_get(3).map_err(get_err)?,
        label: row.try_get(4).map_err(get_err)?,
        created_at: Timestamp(row.try_get(5).map_err(get_err)?),
        expires_at: row
            .try_get::<_, Option<i64>>(6)
            .map_err(get_err)?
            .map(Timestamp),
        last_used_at: row
            .try_get::<_, Option<i64>>(7)
            .map_err(get_err)?
            .map(Timestamp),
    })
}
