//! Connecting to PostgreSQL: the pool, its timeouts and keepalives, and the migrations run
//! before the store is handed out.
//!
//! Every connection gets server-side statement and idle-in-transaction timeouts and TCP
//! keepalives, so no call can hang on a dead peer. Nothing here runs a ledger statement.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, ManagerConfig, Pool, RecyclingMethod, Runtime};
use idem_store::StoreError;

use crate::cache::{Counters, NsCache, RecordCache};
use crate::error::store_err;
use crate::{schema, PgStore};

/// Connection and timeout settings.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections per idem instance. Every in-flight call holds one for a few round trips;
    /// see `docs/deployment.md` for sizing against `max_connections`.
    pub max_connections: usize,
    /// TCP + startup handshake limit for a new connection.
    pub connect_timeout: Duration,
    /// How long a call waits for a free pooled connection before answering `Unavailable`.
    pub pool_wait_timeout: Duration,
    /// Server-side `statement_timeout` for every statement.
    pub statement_timeout: Duration,
    /// Upper bound on a whole store call (all retries included).
    pub op_timeout: Duration,
    /// Attempts of one `execute` when it keeps losing races.
    pub max_attempts: u32,
    /// Records this instance remembers (the last version it wrote or read) so that the next
    /// operation on the same key is decided without a read; 0 turns the cache off. Every write
    /// decided on a remembered record is guarded by its version, so a stale entry costs a
    /// round trip, never a wrong answer.
    pub record_cache: usize,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            max_connections: 16,
            connect_timeout: Duration::from_secs(3),
            pool_wait_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(5),
            op_timeout: Duration::from_secs(10),
            max_attempts: 64,
            record_cache: 4096,
        }
    }
}

impl PgStore {
    /// Connects a pool to `url` with default [`PgOptions`] and runs migrations.
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// Connects a pool to `url` and runs migrations.
    pub async fn connect_with(url: &str, opts: PgOptions) -> Result<PgStore, StoreError> {
        let redacted = idem_core::redact_db_url(url);
        let (url, tls) = crate::tls::PgTls::split_url(url)
            .map_err(|e| StoreError::Internal(format!("postgres url {redacted}: {e}")))?;
        let mut cfg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Internal(format!("invalid postgres url {redacted}: {e}")))?;
        cfg.connect_timeout(opts.connect_timeout);
        // Dead peers are noticed even when no statement is running (keepalive) and when one is
        // (tcp_user_timeout bounds unacknowledged writes).
        cfg.keepalives(true);
        cfg.keepalives_idle(Duration::from_secs(10));
        cfg.keepalives_interval(Duration::from_secs(2));
        cfg.keepalives_retries(3);
        cfg.tcp_user_timeout(opts.statement_timeout + Duration::from_secs(1));
        if cfg.get_application_name().is_none() {
            cfg.application_name("idem");
        }
        let stmt_ms = opts.statement_timeout.as_millis();
        // `idem.self_count`: this connection's statements count the records they write, so
        // the counting triggers skip them (schema V16).
        let options = format!(
            "{} -c statement_timeout={stmt_ms} -c idle_in_transaction_session_timeout={} \
             -c {}=on",
            cfg.get_options().unwrap_or(""),
            stmt_ms * 2,
            crate::rows::SELF_COUNT_SETTING,
        );
        cfg.options(options.trim());
        cfg.ssl_mode(tls.ssl_mode());
        let mgr = tls
            .manager(
                cfg,
                ManagerConfig {
                    // A closed connection is detected without a round trip; a broken one fails
                    // its next statement, is reported as Unavailable and is then dropped.
                    recycling_method: RecyclingMethod::Fast,
                },
            )
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let pool = Pool::builder(mgr)
            .post_create(self_count_hook())
            .max_size(opts.max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(opts.pool_wait_timeout))
            .create_timeout(Some(opts.connect_timeout))
            .recycle_timeout(Some(opts.connect_timeout))
            .build()
            .map_err(|e| StoreError::Internal(format!("postgres pool: {e}")))?;
        let store = PgStore {
            pool,
            url: Arc::from(redacted.as_str()),
            ns_cache: Arc::new(NsCache::default()),
            records: Arc::new(RecordCache::new(opts.record_cache)),
            counters: Arc::new(Counters::default()),
            opts: Arc::new(opts),
        };
        let mut client = store.client().await.map_err(store_err)?;
        let now = idem_core::Clock::now(&idem_core::SystemClock).0;
        let ran = schema::migrate(&mut client, now).await?;
        if !ran.is_empty() {
            tracing::info!(url = %store.url, versions = ?ran, "postgres schema migrated");
        }
        tracing::info!(url = %store.url, "postgres store ready");
        Ok(store)
    }
}

fn self_count_hook() -> Hook {
    Hook::async_fn(|client, _| Box::pin(async move { counts_itself(client).await }))
}

/// Refuses a connection on which the startup setting `idem.self_count` did not arrive (a
/// pooler in front of PostgreSQL that drops the startup `options`): its statements would
/// count their records and the triggers would count them again. Checked once per new
/// connection; the store answers `Unavailable` with this message, and refuses to start.
async fn counts_itself(client: &mut deadpool_postgres::ClientWrapper) -> Result<(), HookError> {
    let row = client
        .query_one(
            "SELECT current_setting($1, true)",
            &[&crate::rows::SELF_COUNT_SETTING],
        )
        .await
        .map_err(HookError::Backend)?;
    let value: Option<String> = row.try_get(0).map_err(HookError::Backend)?;
    if value.as_deref() == Some("on") {
        Ok(())
    } else {
        Err(HookError::Message(
            "the startup option idem.self_count=on did not reach PostgreSQL (does a pooler \
             in front of it drop the startup `options`?); idem needs it to keep its record \
             counters exact"
                .into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deadpool_postgres::{Manager, PoolError};

    async fn get(options: Option<&str>) -> Result<(), PoolError> {
        let url = std::env::var("IDEM_TEST_PG").expect("checked by the caller");
        let mut cfg: tokio_postgres::Config = url.parse().expect("IDEM_TEST_PG");
        if let Some(o) = options {
            cfg.options(o);
        }
        let pool = Pool::builder(Manager::new(cfg, tokio_postgres::NoTls))
            .post_create(self_count_hook())
            .max_size(1)
            .runtime(Runtime::Tokio1)
            .build()
            .expect("pool");
        pool.get().await.map(drop)
    }

    /// A connection without the startup setting (as through a pooler that drops `options`)
    /// is refused with a message that says why; one with it is handed out. Needs
    /// `IDEM_TEST_PG`.
    #[tokio::test]
    async fn a_connection_that_lost_the_startup_setting_is_refused() {
        if std::env::var("IDEM_TEST_PG").is_err() {
            eprintln!("SKIPPED a_connection_that_lost_the_startup_setting_is_refused");
            return;
        }
        get(Some("-c idem.self_count=on"))
            .await
            .expect("with the setting");
        for options in [None, Some("-c idem.self_count=off")] {
            match get(options).await {
                Err(PoolError::PostCreateHook(e)) => {
                    assert!(e.to_string().contains("idem.self_count=on"), "{e}")
                }
                other => panic!("{options:?}: {other:?}"),
            }
        }
    }
}
