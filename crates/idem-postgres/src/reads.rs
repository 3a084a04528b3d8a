//! Reads served outside the engine: a record with its audit trail, and pages of a
//! namespace's records (newest `updated_at` first, keyset-paged, optionally of one state,
//! owner or correlation id).
//!
//! Reads take no locks and never write; a page is one statement (one snapshot).

use idem_core::{Key, Namespace};
use idem_store::{Cursor, ListQuery, Page, RecordWithEvents, StoreError};

use crate::error::store_err;
use crate::rows::{as_i64, event_from_row, record_from_row, EVENT_COLS, RECORD_COLS};
use crate::PgStore;

impl PgStore {
    pub(crate) async fn read_record(
        &self,
        ns: &Namespace,
        key: &Key,
    ) -> Result<Option<RecordWithEvents>, StoreError> {
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let rec_stmt = client
                .prepare_cached(&format!(
                    "SELECT {} FROM records WHERE namespace = $1 AND key = $2",
                    *RECORD_COLS
                ))
                .await
                .map_err(store_err)?;
            let ev_stmt = client
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLS} FROM events WHERE namespace = $1 AND key = $2 \
                     ORDER BY seq"
                ))
                .await
                .map_err(store_err)?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
                [&ns.as_str(), &key.as_str()];
            // One round trip for both; a record written between the two reads only adds
            // events, which is harmless for a display.
            let (rec, evs) = tokio::try_join!(
                client.query_opt(&rec_stmt, &params),
                client.query(&ev_stmt, &params)
            )
            .map_err(store_err)?;
            let Some(rec) = rec else { return Ok(None) };
            let record = record_from_row(&rec, 0)?;
            let events = evs
                .iter()
                .map(event_from_row)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(RecordWithEvents { record, events }))
        })
        .await
    }

    pub(crate) async fn read_page(
        &self,
        ns: &Namespace,
        query: &ListQuery,
    ) -> Result<Page, StoreError> {
        let cursor = match &query.cursor {
            Some(c) => Some(Cursor::decode(c).ok_or(StoreError::InvalidCursor)?),
            None => None,
        };
        let limit = query.limit.clamp(1, 1000);
        self.bounded(async {
            let client = self.client().await.map_err(store_err)?;
            let mut sql = format!("SELECT {} FROM records WHERE namespace = $1", *RECORD_COLS);
            let state = query.state.map(|s| s.as_str());
            let (c_at, c_key) = match &cursor {
                Some(c) => (c.updated_at, c.key.clone()),
                None => (0, String::new()),
            };
            let fetch = as_i64(limit + 1);
            let ns_str = ns.as_str();
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&ns_str];
            if let Some(s) = &state {
                params.push(s);
                sql.push_str(&format!(" AND state = ${}", params.len()));
            }
            if let Some(o) = &query.owner {
                params.push(o);
                sql.push_str(&format!(" AND owner = ${}", params.len()));
            }
            if let Some(c) = &query.correlation_id {
                params.push(c);
                sql.push_str(&format!(" AND correlation_id = ${}", params.len()));
            }
            if cursor.is_some() {
                params.push(&c_at);
                params.push(&c_key);
                sql.push_str(&format!(
                    " AND (updated_at, key) < (${}, ${})",
                    params.len() - 1,
                    params.len()
                ));
            }
            params.push(&fetch);
            sql.push_str(&format!(
                " ORDER BY updated_at DESC, key DESC LIMIT ${}",
                params.len()
            ));
            let stmt = client.prepare_cached(&sql).await.map_err(store_err)?;
            let rows = client.query(&stmt, &params).await.map_err(store_err)?;
            let items = rows
                .iter()
                .map(|r| record_from_row(r, 0))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Page::from_fetched(items, limit))
        })
        .await
    }
}
