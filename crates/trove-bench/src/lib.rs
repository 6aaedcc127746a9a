//! trove bench: a Web-Polygraph-style benchmark for any caching proxy.
//!
//! The benchmark plays both ends of a cache-off (seed 000 §4–§7): origin servers that serve an
//! object model in which every object id fixes size, content type and cachability, and client
//! robots that offer a PolyMix-2 or DataComm-1 load through the proxy under test and judge every
//! response. It shares nothing with trove's own crates, so it measures Squid, Varnish, nginx,
//! Traffic Server and trove by the same rules.
//!
//! Code map:
//! - `model`: object ids to object specs and body bytes (pure).
//! - `workload`: workload files, the built-in PolyMix-2 and DataComm-1, phases (pure).
//! - `origin`: the origin servers.
//! - `client`: the HTTP/1.1 client side of every exchange (parsing with `httparse`).
//! - `robot`: the robots, their connections, the arrival process, response checking.
//! - `selfcheck`: whether the generator kept its schedule, and whose limit it was if not.
//! - `stats`, `histogram`: what robots record. `report`, `html`: what users read.
//! - `proc`, `peers`, `compare`, `downtime`: running proxies as child processes.
//! - `rate`: one path at a constant rate (overload curves), and a fixed-delay origin.
//! - `cli`: the `trove bench` subcommands.
//!
//! Dependencies are the workspace's: tokio and hyper 1 (client and server connections, used at
//! the connection level so the robots decide when connections open and close), `rand_distr` for
//! the exponential, lognormal, normal and Zipf draws, serde/toml/serde_json for workload files
//! and JSON reports, clap for the CLI, and `httpdate` (already in the workspace, tiny and
//! dependency-free) for Last-Modified and Expires.

mod cli;
pub mod client;
pub mod compare;
pub mod downtime;
pub mod histogram;
pub mod html;
pub mod model;
pub mod origin;
pub mod peers;
pub mod proc;
pub mod rate;
pub mod report;
pub mod robot;
pub mod run;
pub mod selfcheck;
pub mod stats;
pub mod workload;

pub use cli::{BenchArgs, Command};
pub use run::{LoadArgs, ProxyMode, RunArgs};

/// Runs `trove bench` with the given arguments.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    cli::dispatch(args)
}

/// Runs one `trove bench run` and returns its report without printing (for tests and tools).
pub fn cli_execute(args: &run::RunArgs) -> anyhow::Result<report::Report> {
    run::execute(args, None)
}
