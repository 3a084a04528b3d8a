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
                    "INSERT INTO api_tokens (secret_hash, role, scope, label, created_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[
                        &token.secret_hash,
                        &token.role.as_str(),
                        &token.scope,
                        &token.label,
                        &now.0,
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
                .prepare_cached(
                    "SELECT id, secret_hash, role, scope, label FROM api_tokens \
                     WHERE secret_hash = $1",
                )
                .await
                .map_err(store_err)?;
            let Some(row) = client
                .query_opt(&stmt, &[&secret_hash])
                .await
                .map_err(store_err)?
            else {
                return Ok(None);
            };
            let role: String = row.try_get(2).map_err(|e| store_err(corrupt(&e)))?;
            Ok(Some(ApiToken {
                id: row.try_get(0).map_err(|e| store_err(corrupt(&e)))?,
                secret_hash: row.try_get(1).map_err(|e| store_err(corrupt(&e)))?,
                role: Role::parse(&role)
                    .ok_or_else(|| StoreError::Corrupt(format!("token role {role:?}")))?,
                scope: row.try_get(3).map_err(|e| store_err(corrupt(&e)))?,
                label: row.try_get(4).map_err(|e| store_err(corrupt(&e)))?,
            }))
        })
        .await
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
