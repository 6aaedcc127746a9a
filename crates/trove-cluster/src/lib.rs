//! A trove cluster's membership and placement: which node owns a cache key, and which
//! nodes are healthy enough to ask.
//!
//! - **Placement** is rendezvous (highest-random-weight) hashing: every node scores a key
//!   with a hash of the key and the node's id, and the healthy node with the highest score
//!   owns it. Every node computes the same owner from the same list without talking to the
//!   others; adding or removing one node moves only the keys it wins or held (about 1/n),
//!   and an unhealthy owner's keys go to the next node in its own order, spread over all
//!   the others rather than dumped on one neighbour ([`Cluster::owner`]).
//! - **Health** comes from two sources ([`health`]): a probe (a TCP connect to each peer's
//!   address every `probe_interval`) and the outcome of real requests to the peer (the
//!   proxy reports failures and successes). A peer is down after `fail_after` failures in
//!   a row, and up again after one success.
//! - **Loops** are impossible by construction, not by detection: a request a node
//!   forwards to an owner carries [`PEER_HEADER`], and a node never forwards a request
//!   that carries it (it serves it itself, even if its own view names another owner). So
//!   a request makes at most one hop between nodes, whatever two nodes think of each
//!   other's health.
//!
//! Hand-written because it is small and the product's core (a consistent-hashing crate
//! would bring a ring with virtual nodes, which rendezvous hashing needs none of); xxh3 is
//! the hash the rest of trove keys objects with. The probe loop is the crate's only I/O.

mod health;
mod placement;

pub use health::{probe_loop, Health, NodeStatus};
pub use placement::{Cluster, ClusterMode, Node, Owner, PeerSpec};

/// The request header a node adds when it asks a key's owner: its own node id. A request
/// carrying it is never forwarded again. Removed before anything goes to an origin.
pub const PEER_HEADER: &str = "trove-peer";
