//! A planner workaround for a young ledger: give `records` statistics once, early.
//!
//! Best effort and off the hot path (a spawned task); it never changes data.

use crate::error::{store_err, PgError};
use crate::PgStore;

/// Operations after which an instance makes sure `records` has planner statistics.
const FIRST_ANALYZE_AFTER: u64 = 1000;

impl PgStore {
    /// Counts an operation; the [`FIRST_ANALYZE_AFTER`]-th one starts [`Self::first_analyze`].
    pub(crate) fn count_op(&self) {
        if self
            .counters
            .ops
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
            == FIRST_ANALYZE_AFTER
        {
            let store = self.clone();
            tokio::spawn(async move { store.first_analyze().await });
        }
    }

    /// Gives a young `records` table planner statistics.
    ///
    /// Without statistics PostgreSQL costs a lookup by `(namespace, key)` the same through the
    /// primary key and through `records_state_list (namespace, state, updated_at, key)`, picks
    /// the latter, and every statement then walks all index entries of the namespace — until
    /// autovacuum first analyzes the table, a minute or more later (measured on a fresh
    /// database: 870 pairs/s and 1.4 ms of PostgreSQL CPU per pair, against 2,200 pairs/s and
    /// 0.4 ms once analyzed). So an instance that has run [`FIRST_ANALYZE_AFTER`] operations
    /// analyzes the table once if it is still small by the planner's estimate. Best effort: a
    /// failure (no privilege, an engine without `ANALYZE`) is only logged.
    async fn first_analyze(&self) {
        let run = async {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "SELECT reltuples::BIGINT FROM pg_class WHERE oid = 'records'::regclass",
                    &[],
                )
                .await?;
            let estimated: i64 = row.try_get(0)?;
            if estimated < FIRST_ANALYZE_AFTER as i64 * 10 {
                client.batch_execute("ANALYZE records").await?;
                return Ok::<bool, PgError>(true);
            }
            Ok(false)
        };
        match self.bounded(async { run.await.map_err(store_err) }).await {
            Ok(true) => tracing::info!(url = %self.url, "analyzed the young records table"),
            Ok(false) => {}
            Err(e) => tracing::debug!(url = %self.url, error = %e, "first analyze skipped"),
        }
    }
}
