//! `trove bench` as a standalone program, for use before (or without) the `trove` binary:
//! `cargo run --release -p trove-bench --example bench -- run --help`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "bench")]
struct Cli {
    #[command(flatten)]
    bench: trove_bench::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    trove_bench::run(Cli::parse().bench)
}
