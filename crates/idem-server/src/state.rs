//! Shared state of one running server.

use std::sync::Arc;

use idem::Ledger;
use tokio::sync::watch;

use crate::auth::AuthCache;
use crate::config::Config;

/// What every handler can reach. Cheap to clone (all shared).
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub ledger: Ledger,
    pub auth: Arc<AuthCache>,
    /// Flips to `true` at shutdown so long polls (`wait_ms`) answer at once instead of
    /// holding the graceful shutdown up for up to 30 s.
    pub shutdown: watch::Receiver<bool>,
}
