//! HTTP service (scaffold: being written).
use std::path::PathBuf;

/// What `idem serve` was given on the command line (each overrides config file and env).
#[derive(Debug, Clone, Default)]
pub struct ServeArgs {
    pub listen: Option<String>,
    pub db: Option<String>,
    pub config: Option<PathBuf>,
    pub janitor_interval: Option<String>,
    pub log_format: Option<String>,
}

/// Runs `idem serve` until SIGTERM/SIGINT.
pub async fn serve(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("server not built yet")
}
