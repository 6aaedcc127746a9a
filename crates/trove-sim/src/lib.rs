//! `trove sim`: replays real traffic through trove's own cache core, in virtual time, to
//! answer "what would a cache do here?" — PROXIM of seed 003 (Feldmann et al., INFOCOM '99)
//! rebuilt on trove's decisions.
//!
//! There is no second cache here. Every request goes through `trove_cache::engine` (the
//! synchronous driver of the same core `trove serve` runs) over a `trove_store::MemoryStore`
//! with the server's shard count and eviction policies (`Lru`, `S3Fifo`), and with `--disk`
//! trove's own disk tier under it (`trove_disk::Tiered`), so a hit in the simulator is a
//! hit in the server; `tests/agreement.rs` holds the two to the same result
//! codes over loopback.
//!
//! Code map:
//! - `trace`: streaming readers, one per format (`squid`, `clf`, `csv`, libCacheSim's binary
//!   `oracle` (`trove sim convert` writes it), `synthetic` from `trove bench`'s workload
//!   model); bad lines counted, never fatal.
//! - `assume`: what a log does not say (dynamic URLs, freshness, cookies), in the open.
//! - `origin`: the replay's origin, answering each record at once.
//! - `exact`: the exact replay of trove's replayable trace (`trace::replayable`): each
//!   request with its recorded fields, answered with the origin's recorded answers.
//! - `disk`: the disk tier a configuration replays with (`--disk`), trove's own, in a
//!   directory of its own, its writer waited for after each request.
//! - `intern`: work done once per distinct URL, client and server.
//! - `replay`: the driver over the engine with a virtual clock; several configurations from
//!   one pass.
//! - `net`: the network model (`tcp` slow start, `pool` connection caching, aborts).
//! - `latency`: latency means and log-binned distributions.
//! - `sweep`: one pass of a trace with a progress bar into a `Report`.
//! - `report`: text table, JSON, self-contained HTML with inline SVG charts.
//! - `model`: `trove sim model`, the DynamicWeb equations of seed 002 §3.2.
//! - `cli`: the command line.
//!
//! Dependencies beyond the workspace's: `indicatif` for the progress bar (the maintained,
//! widely used terminal progress crate; it draws nothing when stderr is not a terminal),
//! `memchr` for the readers' byte searches (SIMD, no allocation), and `itoa` (serde_json's
//! integer formatter) to name binary traces' numeric ids without `fmt`'s machinery.

pub mod assume;
pub mod cli;
pub mod disk;
pub mod exact;
pub mod intern;
pub mod latency;
pub mod model;
pub mod net;
pub mod origin;
pub mod replay;
pub mod report;
pub mod sweep;
pub mod trace;

pub use cli::{SimArgs, SimCommand};

/// Runs `trove sim` with the given arguments.
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    cli::run(args)
}
