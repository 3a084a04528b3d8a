//! Shared state of one running server.
//!
//! It sits above the configuration, the token cache, the source and action caches and the
//! request readers, and below every handler and the middleware: it holds them, it never
//! imports a handler.

use std::ops::Deref;
use std::sync::Arc;

use idem::Ledger;
use tokio::sync::watch;

use crate::auth::AuthCache;
use crate::config::Config;

/// What every handler can reach. One `Arc`: axum clones the state several times per request
/// (route, middleware, extractor), so a clone is one reference count, not one per member.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The members of [`AppState`] (reached through `Deref`: `state.ledger`).
pub struct Shared {
    pub config: Arc<Config>,
    pub ledger: Ledger,
    pub auth: Arc<AuthCache>,
    /// Flips to `true` at shutdown so long polls (`wait_ms`) answer at once instead of
    /// holding the graceful shutdown up for up to 30 s.
    pub shutdown: watch::Receiver<bool>,
    /// The store gauges of the last scrape and when they were read. Behind an async mutex so
    /// concurrent scrapes wait for one read instead of each querying the store.
    pub gauges: tokio::sync::Mutex<Option<(std::time::Instant, idem::Stats)>>,
    /// The one outbound HTTP client (effects): the egress guard, the shared TLS setup.
    pub egress: idem_egress::Egress,
    /// Sources as the intake and the forwarder read them (reused for up to 1 s).
    pub sources: Arc<crate::intake::SourceCache>,
    /// Actions as calls read them (reused for up to 1 s).
    pub actions: Arc<crate::actions::cache::ActionCache>,
    /// Namespace policies as effect and action calls read them (reused for up to 1 s).
    pub policies: Arc<crate::policies::PolicyCache>,
}

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl crate::input::BodyLimit for AppState {
    fn body_limit(&self) -> usize {
        self.config.body_limit
    }
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}
