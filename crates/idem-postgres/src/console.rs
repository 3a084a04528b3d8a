//! What the operator console reads and writes: namespace names and activity, the review
//! queue across namespaces, and sign-in sessions (stored by hashes only, shared by every
//! instance on the database).
//!
//! Invariants: the review queue is keyset-paged through the `records_review_queue` partial index
//! (and `records_processing` for stuck work), never a scan of the ledger; reads take no
//! locks.

use std::sync::LazyLock;

use idem_core::{Namespace, Policy, State, Timestamp};
use idem_store::{
    sql, ConsoleSession, NamespaceActivity, NewConsoleSession, ReviewCursor, ReviewPage,
    ReviewQuery, StoreError, REVIEW_STATES,
};
use tokio_postgres::types::ToSql;

use crate::error::store_err;
use crate::rows::{as_i64, as_u64, record_from_row, RECORD_COLS};
use crate::{corrupt, PgStore};

/// Distinct namespaces by a loose index scan (one index probe per namespace), plus those
/// with only a stored policy.
const NAMES: &str = "WITH RECURSIVE n(ns) AS ( \
       SELECT (SELECT MIN(namespace) FROM records) \
       UNION ALL \
       SELECT (SELECT MIN(namespace) FROM records WHERE namespace > n.ns) FROM n \
       WHERE n.ns IS NOT NULL) \
     SELECT ns FROM n WHERE ns IS NOT NULL \
     UNION SELECT namespace FROM namespaces ORDER BY 1";

static OLDEST_PROCESSING_OF: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT MIN(active_at) FROM records WHERE namespace = $1 AND state = {}",
        sql::state(State::Processing)
    )
});

/// The filters both halves of the review queue share: appended to `sql`, their values to
/// `vals` (numbered after the values already there).
fn review_filters<'a>(
    q: &'a ReviewQuery,
    ns: &'a Option<String>,
    cursor: &'a Option<ReviewCursor>,
    sql: &mut String,
    vals: &mut Vec<&'a (dyn ToSql + Sync)>,
) {
    if let Some(ns) = ns {
        vals.push(ns);
        sql.push_str(&format!(" AND namespace = ${}", vals.len()));
    }
    if let Some(o) = &q.owner {
        vals.push(o);
        sql.push_str(&format!(" AND owner = ${}", vals.len()));
    }
    if let Some(c) = &q.correlation_id {
        vals.push(c);
        sql.push_str(&format!(" AND correlation_id = ${}", vals.len()));
    }
    if let Some(c) = cursor {
        vals.push(&c.updated_at);
        vals.push(&c.namespace);
        vals.push(&c.key);
        let n = vals.len();
        sql.push_str(&format!(
            " AND (updated_at, namespace, key) > (${}, ${}, ${n})",
            n - 2,
            n - 1
        ));
    }
}

impl PgStore {
    pub(crate) async fn console_namespace_names(&self) -> Result<Vec<String>, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let rows = client.query(NAMES, &[]).await.map_err(store_err)?;
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
            let today = client
                .query_opt(
                    "SELECT count FROM daily_counts WHERE namespace = $1 AND day = $2",
                    &[&ns.as_str(), &now.utc_day()],
                )
                .await
                .map_err(store_err)?;
            let today: Option<i64> = match today {
                Some(r) => r.try_get(0).map_err(|e| store_err(corrupt(&e)))?,
                None => None,
            };
            let oldest = client
                .query_one(OLDEST_PROCESSING_OF.as_str(), &[&ns.as_str()])
                .await
                .map_err(store_err)?;
            let oldest: Option<i64> = oldest.try_get(0).map_err(|e| store_err(corrupt(&e)))?;
            Ok(NamespaceActivity {
                acquired_today: today.map_or(0, as_u64),
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
        let limit = q.limit.clamp(1, 1000);
        let cursor = match &q.cursor {
            None => None,
            Some(c) => Some(ReviewCursor::decode(c).ok_or(StoreError::InvalidCursor)?),
        };
        let ns = q.namespace.as_ref().map(|n| n.as_str().to_owned());
        let fetch = as_i64(limit + 1);
        let waiting: Vec<State> = match q.state {
            None => REVIEW_STATES.to_vec(),
            Some(s) if REVIEW_STATES.contains(&s) => vec![s],
            Some(_) => vec![],
        };
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let mut items = Vec::new();
            if !waiting.is_empty() {
                // The predicate spells the partial index's exactly.
                let mut sql = format!(
                    "SELECT {} FROM records WHERE state IN ({})",
                    *RECORD_COLS,
                    sql::states(&REVIEW_STATES)
                );
                if waiting.len() == 1 {
                    sql.push_str(&format!(" AND state = {}", sql::state(waiting[0])));
                }
                let mut vals: Vec<&(dyn ToSql + Sync)> = Vec::new();
                review_filters(q, &ns, &cursor, &mut sql, &mut vals);
                vals.push(&fetch);
                sql.push_str(&format!(
                    " ORDER BY updated_at, namespace, key LIMIT ${}",
                    vals.len()
                ));
                let stmt = client.prepare_cached(&sql).await.map_err(store_err)?;
                for row in client.query(&stmt, &vals).await.map_err(store_err)? {
                    items.push(record_from_row(&row, 0)?);
                }
            }
            if matches!(q.state, None | Some(State::Processing)) {
                // Stuck work: the range on `active_at` (the `records_processing` index) uses
                // the smallest threshold of any namespace; each row is held to its own.
                let default_stuck = Policy::default().stuck_after_ms;
                let smallest: Option<i64> = client
                    .query_one("SELECT MIN(stuck_after_ms) FROM namespaces", &[])
                    .await
                    .map_err(store_err)?
                    .try_get(0)
                    .map_err(|e| store_err(corrupt(&e)))?;
                let bound = now.0 - smallest.map_or(default_stuck, |s| s.min(default_stuck));
                let mut sql = format!(
                    "SELECT {} FROM records WHERE state = {} AND active_at <= $1 \
                     AND active_at <= $2 - COALESCE((SELECT n.stuck_after_ms FROM namespaces n \
                     WHERE n.namespace = records.namespace), $3)",
                    *RECORD_COLS,
                    sql::state(State::Processing)
                );
                let mut vals: Vec<&(dyn ToSql + Sync)> = vec![&bound, &now.0, &default_stuck];
                review_filters(q, &ns, &cursor, &mut sql, &mut vals);
                vals.push(&fetch);
                sql.push_str(&format!(
                    " ORDER BY updated_at, namespace, key LIMIT ${}",
                    vals.len()
                ));
                let stmt = client.prepare_cached(&sql).await.map_err(store_err)?;
                for row in client.query(&stmt, &vals).await.map_err(store_err)? {
                    items.push(record_from_row(&row, 0)?);
                }
            }
            Ok(ReviewPage::from_candidates(items, limit))
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
