//! The HTTP service of idem: the v1 API of the contract on axum, with bearer-token auth,
//! Prometheus metrics, an OpenAPI document generated from the code, and the janitor and
//! alert loops.
//!
//! [`run`] takes a bound listener and a shutdown future so tests start it on `127.0.0.1:0`
//! and stop it cleanly; [`serve`] is `idem serve`: it layers the configuration, sets up
//! logging, opens the store, binds and runs until SIGTERM/SIGINT. Invariants kept at start:
//! without any API token the server only runs on a loopback address (and says auth is off);
//! the database URL is only ever logged without its password.

pub mod actions;
pub mod api;
pub mod auth;
pub mod background;
pub mod config;
pub mod conn;
pub mod console;
pub mod error;
pub mod fields;
pub mod input;
pub mod intake;
pub mod logging;
pub mod metrics;
pub mod middleware;
pub mod openapi;
pub mod outage;
pub mod outcome;
pub mod percent;
pub mod policies;
pub mod route;
pub mod routes;
pub mod state;
pub mod telemetry;
pub mod tls;

/// The hand-written parsers of untrusted input in this crate, gathered for the fuzz targets
/// of `fuzz/` (docs/fuzzing.md). Not an API: only re-exports, nothing here is used by the
/// server itself.
#[doc(hidden)]
pub mod fuzzing {
    /// `GET /v1/review`'s query string, read for a caller.
    pub use crate::api::v1::review::review_query;
    /// The `next_cursor` of `GET /v1/sources/{source}/events`: written and read back.
    pub use crate::api::v1::sources::{
        cursor_of as events_cursor, parse_cursor as parse_events_cursor,
    };
    /// The `Authorization: Bearer` header of every authenticated request.
    pub use crate::auth::bearer;
    /// The console's session cookie lookup and the sign-in's place to return to.
    pub use crate::console::session::{cookie, safe_next};
    /// What [`bearer`] reads.
    pub use axum::body::Body;
    pub use axum::extract::Request;
}

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::{Config, ConfigError, LogFormat, ServeArgs};
pub use error::ApiError;
pub use logging::init_logging;
pub use routes::{route_table, router};

/// A commented example configuration file (`idem default-config`).
pub fn default_config_toml() -> &'static str {
    config::default_config_toml()
}

/// Runs `idem serve` until SIGTERM/SIGINT.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = Config::load(&args, &|k| std::env::var(k).ok())?;
    // Kept until `idem serve` returns: dropping it writes out the buffered lines.
    let traces = match &config.otlp_endpoint {
        Some(endpoint) => Some(telemetry::tracer_provider(endpoint)?),
        None => None,
    };
    let _log = logging::init_telemetry(config.log_format, &config.log_level, traces);
    for w in &config.upgrade_warnings {
        tracing::warn!("{w}");
    }
    if let Some(endpoint) = &config.otlp_endpoint {
        let shown = idem::redact_db_url(&telemetry::traces_url(endpoint));
        tracing::info!(endpoint = %shown, "exporting traces over OTLP");
    }
    let db = config.db_redacted();
    tracing::info!(db = %db, "opening ledger");
    let opts = idem::OpenOptions {
        pg_pool: config.pg_pool,
    };
    let ledger = idem::open_with(&config.db, &opts).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot open the ledger at {db}: {}",
            redact_err(&e, &config.db)
        )
    })?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    run(config, ledger, listener, shutdown_signal()).await
}

/// An error message with the raw database URL (which may hold a password) redacted.
fn redact_err(e: &dyn std::fmt::Display, url: &str) -> String {
    e.to_string().replace(url, &idem::redact_db_url(url))
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

/// Serves the API on `listener` until `shutdown` resolves, then finishes in-flight requests,
/// stops the background loops and drops the store.
pub async fn run(
    config: Config,
    ledger: idem::Ledger,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.validate()?;
    // Certificate problems stop the start, before anything runs.
    let https = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => {
            let certs = Arc::new(tls::CertStore::load(cert, key)?);
            let server = certs.server_config().context("TLS configuration")?;
            Some((certs, server))
        }
        _ => None,
    };
    metrics::handle();
    metrics::register_all();
    let addr = listener
        .local_addr()
        .context("listener has no local address")?;
    let store = ledger.store().clone();
    let tokens = store
        .token_count()
        .await
        .context("cannot read API tokens from the store")?;
    if tokens == 0 {
        if !addr.ip().is_loopback() {
            anyhow::bail!(
                "refusing to listen on {addr} without API tokens: anyone could use the ledger. \
                 Create one with `idem token create --namespace '*' --role admin`, \
                 or listen on 127.0.0.1"
            );
        }
        tracing::warn!(
            "no API token exists: auth is OFF; serving on loopback only. \
             Create a token with `idem token create` to require auth"
        );
    }
    for (name, patch) in &config.namespaces {
        let ns = idem::Namespace::try_from(name.as_str())
            .map_err(|e| anyhow::anyhow!("config namespaces.{name}: {e}"))?;
        store
            .update_namespace(
                &ns,
                idem::NamespaceChange::Patch(patch.clone()),
                ledger.now(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("config namespaces.{name}: {e}"))?;
        tracing::info!(namespace = %ns, "policy applied from config");
    }

    for (name, doc) in &config.sources.0 {
        let input = idem_intake::source::SourceInput::parse(name, doc)
            .map_err(|e| anyhow::anyhow!("config sources.{name}: {e}"))?;
        let before = crate::intake::load(&store, name, ledger.now())
            .await
            .map_err(|e| anyhow::anyhow!("config sources.{name}: {e}"))?;
        let w = idem::SourceWrite {
            name: name.clone(),
            config: input.source.to_stored().to_string(),
            destination_secrets: crate::api::v1::sources::destination_secret_writes(
                &input,
                before.as_ref().map(|b| &b.source),
                true,
            ),
            secrets: input
                .secrets
                .secrets
                .map(|v| v.into_iter().map(idem::Secret::new).collect()),
            forward_secret: Some(
                input
                    .secrets
                    .forward_secret
                    .flatten()
                    .map(idem::Secret::new),
            ),
        };
        let created = store
            .source_put(w, ledger.now())
            .await
            .map_err(|e| anyhow::anyhow!("config sources.{name}: {e}"))?;
        tracing::info!(source = %name, created, "source applied from config");
    }
    for ((ns, name), doc) in &config.actions.0 {
        let at = format!("config namespaces.{ns}.actions.{name}");
        let ns =
            idem::Namespace::try_from(ns.as_str()).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        api::v1::actions::write(store.as_ref(), ledger.now(), &ns, name, doc)
            .await
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
    }

    let egress = idem_egress::Egress::new(&idem_egress::EgressOptions {
        max_response_bytes: config.max_response_bytes,
        extra_ca: config.extra_ca.clone(),
        ..Default::default()
    })
    .context("cannot build the outbound HTTP client for effects")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let config = Arc::new(config);
    let state = state::AppState::new(state::Shared {
        config: config.clone(),
        ledger: ledger.clone(),
        auth: Arc::new(auth::AuthCache::new(store.clone())),
        shutdown: stop_rx.clone(),
        gauges: tokio::sync::Mutex::new(None),
        egress,
        sources: Arc::new(intake::SourceCache::new(store.clone())),
        actions: Arc::new(actions::ActionCache::default()),
        policies: Arc::new(policies::PolicyCache::default()),
    });

    let janitor = {
        let (store, ledger, batch) = (store.clone(), ledger.clone(), config.janitor_batch_for());
        tokio::spawn(background::run_loop(
            "janitor",
            config.janitor_interval,
            stop_rx.clone(),
            move || {
                let (store, now) = (store.clone(), ledger.now());
                async move {
                    Ok(background::janitor_once(&store, now, batch)
                        .await?
                        .full_batch)
                }
            },
        ))
    };
    let alerts = {
        let client = background::AlertSender::new(state.egress.clone(), config.alert_timeout);
        let (store, ledger, tries) = (store.clone(), ledger.clone(), config.alert_max_tries);
        tokio::spawn(background::run_loop(
            "alerts",
            config.alert_interval,
            stop_rx.clone(),
            move || {
                let (store, client, now) = (store.clone(), client.clone(), ledger.now());
                async move {
                    Ok(background::alerts_once(&store, &client, now, tries)
                        .await?
                        .full_batch)
                }
            },
        ))
    };

    let forwards = {
        let forwarder = intake::forward::Forwarder::new(
            ledger.clone(),
            state.egress.clone(),
            state.sources.clone(),
        );
        tokio::spawn(background::run_loop(
            "forwards",
            config.forward_interval,
            stop_rx.clone(),
            move || {
                let f = forwarder.clone();
                async move { f.step().await }
            },
        ))
    };
    let deliveries = {
        let st = state.clone();
        tokio::spawn(background::run_loop(
            "action_deliveries",
            config.forward_interval,
            stop_rx.clone(),
            move || {
                let st = st.clone();
                async move { actions::delivery::deliveries_once(&st).await }
            },
        ))
    };
    let upkeep = tokio::spawn(background::run_loop(
        "metrics_upkeep",
        metrics::UPKEEP_INTERVAL,
        stop_rx.clone(),
        || async {
            metrics::upkeep();
            Ok(false)
        },
    ));
    let app = routes::router(state);
    let scheme = if https.is_some() { "https" } else { "http" };
    tracing::info!(backend = store.backend(), "listening on {scheme}://{addr}");
    let signal = {
        let stop_tx = stop_tx.clone();
        async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        }
    };
    let (limits, body_limit) = (config.http, config.body_limit);
    let served = match https {
        None => conn::serve(
            listener,
            app,
            None,
            limits,
            body_limit,
            early_refusal,
            signal,
        )
        .await
        .context("server error"),
        Some((certs, server)) => {
            let reload = tokio::spawn(tls::reload_on_sighup(certs));
            let acceptor = tokio_rustls::TlsAcceptor::from(server);
            let served = conn::serve(
                listener,
                app,
                Some(acceptor),
                limits,
                body_limit,
                early_refusal,
                signal,
            )
            .await
            .context("server error");
            reload.abort();
            served
        }
    };
    let _ = stop_tx.send(true);
    let _ = janitor.await;
    let _ = alerts.await;
    let _ = forwards.await;
    let _ = deliveries.await;
    let _ = upkeep.await;
    drop(store);
    drop(ledger);
    tracing::info!("stopped");
    served
}

/// A refusal made before the router ran (a body over the limit, one that timed out or could
/// not be read): the console's error page with its security headers on the console's paths,
/// problem+json everywhere else.
fn early_refusal(path: &str, e: error::ApiError) -> axum::response::Response {
    use axum::response::IntoResponse;
    if console::is_console_path(path) {
        console::early_refusal(e)
    } else {
        e.into_response()
    }
}
