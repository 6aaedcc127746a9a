//! `trove bench compare`: one workload against several proxies in turn.

/// `trove bench compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub load: crate::cli::LoadArgs,
}

/// Runs the comparison.
pub fn run(_a: CompareArgs) -> anyhow::Result<()> {
    anyhow::bail!("compare is not built yet")
}
