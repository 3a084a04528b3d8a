//! Scale runs (ledger size, janitor under load): filled in once the stores land.

/// Options of the scale runs.
#[derive(Debug, Clone)]
pub struct ScaleOpts {}

/// Runs the scale measurements.
pub async fn run_scale(_opts: &ScaleOpts) -> anyhow::Result<()> {
    anyhow::bail!("scale runs are not implemented yet")
}
