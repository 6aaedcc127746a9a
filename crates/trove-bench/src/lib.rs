//! trove bench: a Web-Polygraph-style benchmark for any caching proxy.

/// Command-line arguments of `trove bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

/// Runs `trove bench` with the given arguments.
pub fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("trove bench is not built yet")
}
