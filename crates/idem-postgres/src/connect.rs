//! Connecting to PostgreSQL: the pool, its timeouts and keepalives, and the migrations run
//! before the store is handed out.
//!
//! Every connection gets TCP keepalives and, when connected directly, server-side statement and
//! idle-in-transaction timeouts, so no call can hang on a dead peer. Behind a pooler
//! (`pooler=session|transaction` in the URL, see `conn.rs`) nothing depends on startup
//! parameters or on session state, and a pooler in statement mode is refused at start.
//! Nothing here runs a ledger statement.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, RecyclingMethod, Runtime};
use idem_store::StoreError;

use crate::cache::{Counters, NsCache, RecordCache};
use crate::conn::{Conn, Mode, Pooler, Statements};
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
        let (url, pooler) = Pooler::split_url(&url)
            .map_err(|e| StoreError::Internal(format!("postgres url {redacted}: {e}")))?;
        let mut cfg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Internal(format!("invalid postgres url {redacted}: {e}")))?;
        if cfg.get_hosts().len() > 1
            && cfg.get_target_session_attrs()
                != tokio_postgres::config::TargetSessionAttrs::ReadWrite
        {
            // Without it a connection may land on a standby: every write there fails (503,
            // nothing written) until the pool happens to reconnect to the primary.
            tracing::warn!(
                url = %redacted,
                "postgres url lists several hosts without target_session_attrs=read-write"
            );
        }
        let url_ports = cfg.get_ports().to_vec();
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
        if pooler.sends_options() {
            // Server-side timeouts for every statement of this connection. Behind a pooler
            // startup `options` are dropped or refused (PgBouncer answers "unsupported startup
            // parameter: options" unless told to ignore it), so none are sent there: the role's
            // own settings apply (`docs/deployment.md`), and the whole-call timeout bounds
            // every call either way.
            let stmt_ms = opts.statement_timeout.as_millis();
            let options = format!(
                "{} -c statement_timeout={stmt_ms} -c idle_in_transaction_session_timeout={}",
                cfg.get_options().unwrap_or(""),
                stmt_ms * 2,
            );
            cfg.options(options.trim());
        }
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
            .max_size(opts.max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(opts.pool_wait_timeout))
            .create_timeout(Some(opts.connect_timeout))
            .recycle_timeout(Some(opts.connect_timeout))
            .build()
            .map_err(|e| StoreError::Internal(format!("postgres pool: {e}")))?;
        let mut store = PgStore {
            pool,
            mode: pooler.mode(),
            wrap: None,
            url: Arc::from(redacted.as_str()),
            ns_cache: Arc::new(NsCache::default()),
            records: Arc::new(RecordCache::new(opts.record_cache)),
            counters: Arc::new(Counters::default()),
            opts: Arc::new(opts),
        };
        let mut client = store.client().await.map_err(store_err)?;
        one_server_connection_per_transaction(&mut client).await?;
        drop(client);
        if let Pooler::Transaction { statements } = pooler {
            if statements != Statements::Unnamed {
                // On a connection in the named mode the check is about.
                let conn = store.pool.get().await.map_err(store_err)?;
                let carried =
                    pooler_carries_named_statements(&mut Conn::new(conn, Mode::Prepared, None))
                        .await?;
                store.mode = statement_mode(statements, carried)?;
            }
        }
        if store.mode == Mode::Unnamed {
            store.wrap = Some(crate::wrap::Wrappers::new(store.pool.clone()));
        }
        let mut client = store.client().await.map_err(store_err)?;
        if pooler == Pooler::None {
            if let [port] = url_ports[..] {
                warn_if_proxied(&client, port, &store.url).await;
            }
        }
        let now = idem_core::Clock::now(&idem_core::SystemClock).0;
        let ran = schema::migrate(&mut client, now).await?;
        if !ran.is_empty() {
            tracing::info!(url = %store.url, versions = ?ran, "postgres schema migrated");
        }
        let statements = match store.mode {
            Mode::Prepared => "named",
            Mode::Unnamed => "unnamed",
        };
        tracing::info!(url = %store.url, pooler = ?pooler, statements, "postgres store ready");
        Ok(store)
    }
}

/// A hint for a URL without `pooler=…` whose server says it listens on another port than the
/// one idem connected to: most likely a pooler (PgBouncer listens on 6432, the hosted poolers
/// on 6543), and a transaction pooler needs `pooler=transaction`. Only a warning: a NAT, a
/// container's port mapping or a tunnel changes the port as well.
async fn warn_if_proxied(client: &Conn, url_port: u16, url: &str) {
    let Ok(row) = client.query_one("SELECT inet_server_port()", &[]).await else {
        return;
    };
    if let Ok(Some(server_port)) = row.try_get::<_, Option<i32>>(0) {
        if i64::from(server_port) != i64::from(url_port) {
            tracing::warn!(
                url = %url,
                server_port,
                "postgres answers on port {url_port} but says it listens on {server_port}: if a \
                 transaction pooler is in between, add pooler=transaction to the URL \
                 (docs/deployment.md)"
            );
        }
    }
}

/// Whether the transaction pooler in front carries named statements. A pooler that does
/// (PgBouncer >= 1.21 with `max_prepared_statements`) prepares each named statement of a client
/// on a server connection under a name of its own (`PGBOUNCER_12`), and again on any other
/// server connection a later transaction of that client gets. One that passes them through
/// leaves the driver's own name (`s12`) on one server connection, where the next transaction
/// may not find it and another client using the same name would. The check prepares a
/// statement in a transaction and reads, in the same one, the names the server knows it by; a
/// name of the driver's is deallocated again before the transaction ends, so the check leaves
/// nothing behind where names pass through.
async fn pooler_carries_named_statements(probe: &mut Conn) -> Result<bool, StoreError> {
    const PROBE: &str = "SELECT 1 AS idem_named_statement_probe";
    // Prepared by name as well, so it reads its own name too, to be deallocated with the probe.
    const NAMES: &str = "SELECT name, statement = $1 FROM pg_prepared_statements \
                         WHERE statement IN ($1, $2)";
    let check = async {
        let tx = probe.transaction().await?;
        tx.query_one(PROBE, &[]).await?;
        let rows = tx.query(NAMES, &[&PROBE, &NAMES]).await?;
        let mut probe_names = 0;
        let mut drivers = Vec::new();
        for row in rows {
            let (name, is_probe): (String, bool) = (row.try_get(0)?, row.try_get(1)?);
            if is_probe {
                probe_names += 1;
            }
            if is_driver_statement_name(&name) {
                drivers.push(name);
            }
        }
        for name in &drivers {
            // `name` is `s` and digits (checked): nothing to quote.
            tx.batch_execute(&format!("DEALLOCATE {name}")).await?;
        }
        tx.commit().await?;
        Ok::<_, tokio_postgres::Error>(probe_names > 0 && drivers.is_empty())
    };
    check.await.map_err(store_err)
}

/// The statement mode behind a transaction pooler, from `statements=…` and the check of
/// [`pooler_carries_named_statements`]: named where the pooler carries them (and `unnamed`
/// was not asked for), unnamed where it does not; `named` asked of a pooler that does not
/// carry them stops the start.
fn statement_mode(statements: Statements, carried: bool) -> Result<Mode, StoreError> {
    match (statements, carried) {
        (Statements::Unnamed, _) | (Statements::Auto, false) => Ok(Mode::Unnamed),
        (Statements::Named | Statements::Auto, true) => Ok(Mode::Prepared),
        (Statements::Named, false) => Err(StoreError::Internal(
            "statements=named, but PostgreSQL knows idem's statement by the driver's own name: \
             nothing between idem and PostgreSQL carries named statements from one server \
             connection to the next (PgBouncer before 1.21, max_prepared_statements = 0, or no \
             pooler at all); remove statements=named, or set max_prepared_statements on \
             PgBouncer >= 1.21"
                .into(),
        )),
    }
}

/// Whether `name` is how tokio-postgres names a statement it prepares (`s` and a number).
fn is_driver_statement_name(name: &str) -> bool {
    name.strip_prefix('s')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Refuses a pooler in statement mode (PgBouncer `pool_mode = statement`), where each
/// statement may run on another server connection: a claim's guarded write and its event,
/// written in one transaction, would not be atomic. Such a pooler refuses `BEGIN` outright
/// ("transaction blocks not allowed in statement pooling mode"); one that accepted it but moved
/// the statements between server connections is caught by comparing the backend each
/// statement of one transaction ran on.
async fn one_server_connection_per_transaction(client: &mut Conn) -> Result<(), StoreError> {
    const WHY: &str = "idem needs every transaction on one server connection (a pooler in \
                       statement mode cannot give that): use transaction or session pooling, \
                       or connect directly";
    let probe = async {
        let tx = client.transaction().await?;
        let a: i32 = tx
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .try_get(0)?;
        let b: i32 = tx
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .try_get(0)?;
        tx.commit().await?;
        Ok::<_, tokio_postgres::Error>(a == b)
    };
    match probe.await {
        Ok(true) => Ok(()),
        Ok(false) => Err(StoreError::Internal(format!(
            "the statements of one transaction ran on different server connections; {WHY}"
        ))),
        Err(e)
            if e.as_db_error()
                .is_some_and(|d| d.message().contains("statement pooling")) =>
        {
            let said = e.as_db_error().map(|d| d.message()).unwrap_or_default();
            Err(StoreError::Internal(format!(
                "the database refused a transaction (\"{said}\"): a pooler in statement mode; \
                 {WHY}"
            )))
        }
        Err(e) => Err(store_err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_mode_behind_a_transaction_pooler_follows_the_check_unless_told() {
        let named_refused = statement_mode(Statements::Named, false).expect_err("refused");
        assert!(
            named_refused
                .to_string()
                .contains("max_prepared_statements"),
            "{named_refused}"
        );
        for (statements, carried, mode) in [
            (Statements::Auto, true, Mode::Prepared),
            (Statements::Auto, false, Mode::Unnamed),
            (Statements::Named, true, Mode::Prepared),
            (Statements::Unnamed, true, Mode::Unnamed),
            (Statements::Unnamed, false, Mode::Unnamed),
        ] {
            assert_eq!(
                statement_mode(statements, carried).expect("a mode"),
                mode,
                "{statements:?} {carried}"
            );
        }
    }

    #[test]
    fn the_driver_s_statement_names_are_told_from_a_pooler_s() {
        for name in ["s0", "s12", "s4096"] {
            assert!(is_driver_statement_name(name), "{name}");
        }
        for name in ["PGBOUNCER_12", "s", "s1a", "stmt", "", "S1", "odyssey_s1"] {
            assert!(!is_driver_statement_name(name), "{name}");
        }
    }
}
