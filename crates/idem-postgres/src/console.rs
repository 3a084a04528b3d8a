//! What the operator console reads and writes: namespace names and activity, the review
//! queue across namespaces, and sign-in sessions (stored by hashes only, shared by every
//! instance on the database).
//!
//! Invariants: the review queue is keyset-paged through the `records_review_queue` partial index
//! (and `records_processing` for stuck work), never a scan of the ledger; reads take no
//! locks.

use std::sync::LazyLock;

use idem_core::{Namespace, Timestamp};
use idem_store::console::{
    oldest_processing_of, ReviewPlan, SqlArg, Statement, NAMESPACE_NAMES, SMALLEST_STUCK_AFTER,
};
use idem_store::StoreError;
use idem_store::{ConsoleSession, NamespaceActivity, NewConsoleSession, ReviewPage, ReviewQuery};
use tokio_postgres::types::ToSql;

use crate::error::store_err;
use crate::rows::{as_u64, record_from_row, RECORD_COLS};
use crate::{corrupt, PgStore};

static OLDEST_PROCESSING_OF: LazyLock<String> = LazyLock::new(|| oldest_processing_of('$'));

/// Runs one statement of the review queue and appends the records it returns.
async fn fetch_records(
    client: &crate::conn::Conn,
    half: &Statement,
    items: &mut Vec<idem_core::Record>,
) -> Result<(), StoreError> {
    let vals: Vec<&(dyn ToSql + Sync)> = half
        .args
        .iter()
        .map(|a| match a {
            SqlArg::Int(i) => i as &(dyn ToSql + Sync),
            SqlArg::Text(t) => t,
        })
        .collect();
    let stmt = client.prepare_cached(&half.sql).await.map_err(store_err)?;
    for row in client.query(&stmt, &vals).await.map_err(store_err)? {
        items.push(record_from_row(&row, 0)?);
    }
    Ok(())
}

impl PgStore {
    pub(crate) async fn console_namespace_names(&self) -> Result<Vec<String>, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let rows = client
                .query(NAMESPACE_NAMES, &[])
                .await
                .map_err(store_err)?;
            rows.iter()
                .map(|r| r.try_get(0).map_err(|e| store_err(corrupt(&e))))
                .collect()
        })
        .await
    }

    pub(crate) async fn console_namespace_activity(
        &self,
        ns: &Namespace,
        now: Timestamp,
    ) -> Result<NamespaceActivity, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            // The count the ceiling is checked against (with or without a ceiling set).
            let today = client
                .query_one(
                    crate::execute::TODAY_COUNT,
                    &[&ns.as_str(), &crate::execute::first_hour(now.utc_day())],
                )
                .await
                .map_err(store_err)?;
            let today: i64 = today.try_get(0).map_err(|e| store_err(corrupt(&e)))?;
            let oldest = client
                .query_one(OLDEST_PROCESSING_OF.as_str(), &[&ns.as_str()])
                .await
                .map_err(store_err)?;
            let oldest: Option<i64> = oldest.try_get(0).map_err(|e| store_err(corrupt(&e)))?;
            Ok(NamespaceActivity {
                acquired_today: as_u64(today),
                oldest_processing_at: oldest.map(Timestamp),
            })
        })
        .await
    }

    pub(crate) async fn console_review_queue(
        &self,
        q: &ReviewQuery,
        now: Timestamp,
    ) -> Result<ReviewPage, StoreError> {
        let plan = ReviewPlan::new(q, '$', &RECORD_COLS)?;
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let mut items = Vec::new();
            if let Some(waiting) = plan.waiting() {
                fetch_records(&client, &waiting, &mut items).await?;
            }
            if plan.wants_stuck() {
                let smallest: Option<i64> = client
                    .query_one(SMALLEST_STUCK_AFTER, &[])
                    .await
                    .map_err(store_err)?
                    .try_get(0)
                    .map_err(|e| store_err(corrupt(&e)))?;
                fetch_records(&client, &plan.stuck(smallest, now), &mut items).await?;
            }
            Ok(plan.page(items))
        })
        .await
    }

    pub(crate) async fn console_session_create(
        &self,
        s: &NewConsoleSession,
    ) -> Result<(), StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            client
                .execute(
                    "DELETE FROM console_sessions WHERE expires_at <= $1",
                    &[&s.created_at.0],
                )
                .await
                .map_err(store_err)?;
            client
                .execute(
                    "INSERT INTO console_sessions \
                     (id_hash, token_hash, csrf, created_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[
                        &s.id_hash,
                        &s.token_hash,
                        &s.csrf,
                        &s.created_at.0,
                        &s.expires_at.0,
                    ],
                )
                .await
                .map_err(store_err)?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn console_session_find(
        &self,
        id_hash: &str,
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let row = client
                .query_opt(
                    "SELECT id_hash, token_hash, csrf, created_at, expires_at \
                     FROM console_sessions WHERE id_hash = $1 AND expires_at > $2",
                    &[&id_hash, &now.0],
                )
                .await
                .map_err(store_err)?;
            let Some(r) = row else { return Ok(None) };
            let get_err = |e: tokio_postgres::Error| store_err(corrupt(&e));
            Ok(Some(ConsoleSession {
                id_hash: r.try_get(0).map_err(get_err)?,
                token_hash: r.try_get(1).map_err(get_err)?,
                csrf: r.try_get(2).map_err(get_err)?,
                created_at: Timestamp(r.try_get(3).map_err(get_err)?),
                expires_at: Timestamp(r.try_get(4).map_err(get_err)?),
            }))
        })
        .await
    }

    pub(crate) async fn console_session_delete(&self, id_hash: &str) -> Result<(), StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            client
                .execute(
                    "DELETE FROM console_sessions WHERE id_hash = $1",
                    &[&id_hash],
                )
                .await
                .map_err(store_err)?;
            Ok(())
        })
        .await
    }
}
