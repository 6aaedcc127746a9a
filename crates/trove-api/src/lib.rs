//! The admin API's wire types: what goes over the socket as JSON, shared by the server
//! (`trove-admin`, with `trove-proxy` doing the work) and the client (`trove-client`), so
//! the two can't drift apart. serde only; no I/O.
//!
//! Every call is under `/v1/` on the admin listener (TCP or Unix socket) and needs
//! `Authorization: Bearer <token>`; see docs/api.md.

use serde::{Deserialize, Serialize};

/// Where the API lives on the admin listener.
pub const PREFIX: &str = "/v1";

/// Request fields of a put that set the stored response (everything else about a put is
/// in its query string): each `Trove-Set: Name: value` line becomes one stored field.
pub const SET_FIELD: &str = "trove-set";
/// On a get: the tags of the object served.
pub const TAGS_FIELD: &str = "trove-tags";
/// On a get: the named cache of the object served.
pub const CACHE_FIELD: &str = "trove-cache";

/// Hard (gone at once) or soft (stale: stale-while-revalidate and stale-if-error apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Hard,
    Soft,
}

/// A ban pattern: `subject` is `url` or `header:NAME`, `op` is `==`, `^=` (prefix) or `~`
/// (regular expression).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BanPattern {
    pub subject: String,
    pub op: String,
    pub value: String,
}

/// `POST /v1/invalidate`: exactly one selector, and a mode.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invalidate {
    /// One URL, every variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Every object carrying this tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Every object in this named cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// Every URL starting with this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Every object this pattern matches, judged when it is next looked up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ban: Option<BanPattern>,
    #[serde(default)]
    pub mode: Mode,
}

/// The answer to an invalidation, a put or a delete: once received, no client is served
/// what it invalidated or replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// The invalidation's sequence number (rules are applied in this order).
    pub seq: u64,
    /// `url`, `tag`, `cache`, `prefix`, `ban`, `put` or `delete`.
    pub kind: String,
    pub mode: Mode,
    /// Objects removed at once (a URL's variants); others go as they are looked up or swept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<u64>,
    /// The normalised URL (the cache key) or prefix the call applied to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// In a cluster with a bus: the invalidation's sequence in the cluster's stream (it was
    /// stored there before this answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_seq: Option<u64>,
    /// With `wait`: the live nodes that had not applied it when the wait ended (empty:
    /// every one had).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applied_by: Option<Vec<String>>,
}

/// One stored variant, as `GET /v1/meta` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Body bytes stored so far, and whether it is complete.
    pub size: u64,
    pub complete: bool,
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// Seconds since it was received.
    pub age: u64,
    /// `alive`, `stale` (soft-invalidated) or `dead`.
    pub state: String,
}

/// `GET /v1/meta?url=…`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub key: String,
    pub variants: Vec<Variant>,
}

/// `GET /v1/tags/NAME` and `GET /v1/caches/NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub name: String,
    pub count: u64,
    /// At most `limit` of the URLs (query parameter, default 100).
    pub urls: Vec<String>,
}

/// One configured named cache, in `GET /v1/caches`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedCache {
    pub name: String,
    pub count: u64,
}

/// `GET /v1/stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// The memory tier's objects, bytes, budget and evictions, as before tiers were listed
    /// (`tiers` has every tier, the disk tier too).
    pub objects: u64,
    pub bytes: u64,
    pub capacity: u64,
    pub evictions: u64,
    pub purged: u64,
    /// Every tier, memory first. Empty from a trove that predates this field.
    #[serde(default)]
    pub tiers: Vec<TierStats>,
    /// The newest invalidation's sequence number.
    pub seq: u64,
    /// Invalidation rules not yet retired by the background sweep, and of those bans.
    pub pending_rules: u64,
    pub pending_bans: u64,
    /// Distinct tags and named caches with objects, and (object, tag) pairs.
    pub tags: u64,
    pub memberships: u64,
}

/// `GET /v1/cluster`: the cluster as this node sees it (404 when none is configured).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// This node's id.
    pub node: String,
    /// `shard` or `replicate`.
    pub mode: String,
    pub nodes: Vec<ClusterNode>,
    /// With `?url=`: the id of the node that owns that URL now (shard mode; in replicate
    /// mode, the node answering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The invalidation bus (`[cluster.bus]`), if configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<BusStatus>,
}

/// The cluster's invalidation bus as one node sees it, in [`ClusterStatus`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BusStatus {
    /// Connected to a NATS server now.
    pub connected: bool,
    /// Read up to date since the start: hits are served (else only misses, unless the node
    /// was told to serve hits meanwhile).
    pub current: bool,
    /// Serving hits now.
    pub serving_hits: bool,
    /// The stream's last sequence, as last read.
    pub last_seq: u64,
    /// The last sequence this node applied.
    pub applied: u64,
    /// `last_seq - applied`.
    pub lag: u64,
    /// Invalidations this node published; publishes that failed (answered 503).
    pub published: u64,
    pub publish_failures: u64,
    /// Other nodes' invalidations applied here.
    pub applied_from_others: u64,
    /// Times the node dropped its cache because the stream had lost messages it never read.
    pub gaps: u64,
    /// Messages refused (unsigned, wrongly signed, malformed).
    pub rejected: u64,
    /// Each node's last announced applied sequence (as heard since this node connected) and
    /// its lag behind `last_seq`.
    pub nodes: Vec<BusNode>,
    /// The last error met (connecting, reading, publishing), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One node's position on the bus, in [`BusStatus`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusNode {
    pub id: String,
    pub applied: u64,
    pub lag: u64,
}

/// One node in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterNode {
    pub id: String,
    pub addr: String,
    /// The node answering.
    pub me: bool,
    /// Taken as up by the node answering (always, for itself).
    pub up: bool,
    /// The share of keys it owns now, 0 to 1 (from this node's view of who is up; in
    /// replicate mode 1 for this node).
    pub share: f64,
    /// Failed probes and requests, and times it was taken as down, since this node began
    /// watching it.
    pub failures: u64,
    pub downs: u64,
}

/// One storage tier in [`Stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierStats {
    /// `memory` or `disk`.
    pub tier: String,
    pub objects: u64,
    pub bytes: u64,
    pub capacity: u64,
    /// Objects pushed out to make room (for the disk tier, regions reclaimed).
    pub evictions: u64,
    /// Writes to the tier turned away because it could not take them in time (disk: the
    /// write queue past its crash bound) or at all (dropped, which includes the shed).
    pub writes_shed: u64,
    pub writes_dropped: u64,
    /// The tier is back after a start (the disk index recovered).
    pub ready: bool,
    /// The tier failed and trove serves without it.
    pub failed: bool,
}

/// One pending ban, in `GET /v1/bans`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ban {
    pub seq: u64,
    pub pattern: String,
    pub mode: Mode,
    /// Seconds since the epoch.
    pub at: u64,
}

/// Every refusal: a 4xx (or 5xx) status and this body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    /// A stable name: `unauthorized`, `bad-url`, `unknown-cache`, `bad-pattern`,
    /// `too-large`, `bad-tag`, `bad-request`, `not-found`, `method`, `disabled`.
    pub code: String,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidate_reads_one_selector_and_refuses_unknown_fields() {
        let i: Invalidate = serde_json::from_str(r#"{"tag":"p1","mode":"soft"}"#).unwrap();
        assert_eq!(i.tag.as_deref(), Some("p1"));
        assert_eq!(i.mode, Mode::Soft);
        assert!(serde_json::from_str::<Invalidate>(r#"{"tags":"p1"}"#).is_err());
    }
}
