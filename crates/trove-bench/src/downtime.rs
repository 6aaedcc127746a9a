//! `trove bench downtime`: the cache-off downtime test.

/// `trove bench downtime`.
#[derive(Debug, Clone, clap::Args)]
pub struct DowntimeArgs {}

/// Runs the downtime test.
pub fn run(_a: DowntimeArgs) -> anyhow::Result<()> {
    anyhow::bail!("downtime is not built yet")
}
