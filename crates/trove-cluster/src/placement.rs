//! Rendezvous hashing of cache keys over the cluster's nodes.

use std::net::SocketAddr;
use std::sync::Arc;

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::health::Health;

/// How the nodes share the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterMode {
    /// Each key has one owner that fetches and stores it; the others ask the owner.
    Shard,
    /// Every node caches on its own (an outside balancer spreads the clients); only
    /// invalidations and puts are shared.
    Replicate,
}

impl ClusterMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterMode::Shard => "shard",
            ClusterMode::Replicate => "replicate",
        }
    }
}

/// A node as configured: its id and the address its peers send requests to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSpec {
    pub id: String,
    pub addr: SocketAddr,
}

/// One node of the cluster, as this node sees it.
#[derive(Debug)]
pub struct Node {
    pub id: String,
    pub addr: SocketAddr,
    /// Whether this is the node running this code.
    pub me: bool,
    /// The node's seed for scoring keys (the hash of its id).
    seed: u64,
    pub health: Health,
}

impl Node {
    /// The node's score for a key: the highest healthy score owns it.
    fn score(&self, key_hash: u64) -> u64 {
        // Both halves mixed, so a key's scores on two nodes are independent.
        xxh3_64_with_seed(&key_hash.to_le_bytes(), self.seed)
    }
}

/// Who owns a key.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// This node: look up, fetch and store here.
    Me,
    /// Another node: ask it.
    Peer(&'a Node),
}

/// The cluster as this node sees it: every node (this one included) and their health.
#[derive(Debug)]
pub struct Cluster {
    pub mode: ClusterMode,
    nodes: Vec<Arc<Node>>,
    me: usize,
}

impl Cluster {
    /// The cluster `me` belongs to; `nodes` lists every node, `me` among them (a node not
    /// listed is an error, as are two nodes with one id or one address).
    pub fn new(
        mode: ClusterMode,
        me: &str,
        nodes: &[PeerSpec],
        fail_after: u32,
    ) -> Result<Cluster, String> {
        let mut out: Vec<Arc<Node>> = Vec::with_capacity(nodes.len());
        for n in nodes {
            let token = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
            if n.id.is_empty() || n.id.len() > 64 || !n.id.chars().all(token) {
                return Err(format!(
                    "node id {:?}: 1 to 64 letters, digits, '-', '_' or '.'",
                    n.id
                ));
            }
            if out.iter().any(|o| o.id == n.id) {
                return Err(format!("node id {:?} is listed twice", n.id));
            }
            if out.iter().any(|o| o.addr == n.addr) {
                return Err(format!("address {} is listed for two nodes", n.addr));
            }
            out.push(Arc::new(Node {
                id: n.id.clone(),
                addr: n.addr,
                me: n.id == me,
                seed: xxh3_64(n.id.as_bytes()),
                health: Health::new(fail_after),
            }));
        }
        let Some(me) = out.iter().position(|n| n.me) else {
            return Err(format!(
                "this node ({me:?}) is not among the cluster's nodes"
            ));
        };
        Ok(Cluster {
            mode,
            nodes: out,
            me,
        })
    }

    /// Every node, this one included, in the order configured.
    pub fn nodes(&self) -> &[Arc<Node>] {
        &self.nodes
    }

    /// This node.
    pub fn me(&self) -> &Node {
        &self.nodes[self.me]
    }

    /// The other nodes.
    pub fn peers(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.nodes.iter().filter(|n| !n.me)
    }

    /// The key's owner: the healthy node (this one is always taken as healthy) with the
    /// highest score. In replicate mode every key is this node's.
    pub fn owner(&self, key: &str) -> Owner<'_> {
        if self.mode == ClusterMode::Replicate {
            return Owner::Me;
        }
        let h = key_hash(key);
        let best = self
            .nodes
            .iter()
            .filter(|n| n.me || n.health.is_up())
            .max_by_key(|n| (n.score(h), n.seed));
        match best {
            Some(n) if !n.me => Owner::Peer(n),
            _ => Owner::Me,
        }
    }

    /// The key's owner as an index into [`Cluster::nodes`].
    pub fn owner_index(&self, key: &str) -> usize {
        match self.owner(key) {
            Owner::Me => self.me,
            Owner::Peer(p) => self
                .nodes
                .iter()
                .position(|n| std::ptr::eq(&**n, p))
                .unwrap_or(self.me),
        }
    }
}

/// The hash a key is placed by (xxh3, as trove's store keys objects).
fn key_hash(key: &str) -> u64 {
    xxh3_64(key.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(n: usize) -> Vec<PeerSpec> {
        (0..n)
            .map(|i| PeerSpec {
                id: format!("node-{i}"),
                addr: format!("127.0.0.1:{}", 9000 + i).parse().unwrap(),
            })
            .collect()
    }

    fn owner_id(c: &Cluster, key: &str) -> String {
        match c.owner(key) {
            Owner::Me => c.me().id.clone(),
            Owner::Peer(n) => n.id.clone(),
        }
    }

    #[test]
    fn every_node_names_the_same_owner_and_shares_are_even() {
        let nodes = spec(3);
        let views: Vec<Cluster> = (0..3)
            .map(|i| Cluster::new(ClusterMode::Shard, &format!("node-{i}"), &nodes, 3).unwrap())
            .collect();
        let mut counts = [0usize; 3];
        for k in 0..30_000 {
            let key = format!("http://site.test/object/{k}");
            let o: Vec<String> = views.iter().map(|c| owner_id(c, &key)).collect();
            assert!(o.iter().all(|x| *x == o[0]), "{key}: {o:?}");
            let i: usize = o[0]["node-".len()..].parse().unwrap();
            counts[i] += 1;
        }
        for c in counts {
            // 10,000 each expected; binomial spread is about ±80.
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn adding_a_node_moves_only_its_share() {
        let three = Cluster::new(ClusterMode::Shard, "node-0", &spec(3), 3).unwrap();
        let four = Cluster::new(ClusterMode::Shard, "node-0", &spec(4), 3).unwrap();
        let (mut moved, n) = (0, 20_000);
        for k in 0..n {
            let key = format!("/k/{k}");
            let (a, b) = (owner_id(&three, &key), owner_id(&four, &key));
            if a != b {
                assert_eq!(b, "node-3", "{key} moved between old nodes");
                moved += 1;
            }
        }
        // About a quarter moves, all of it to the new node.
        assert!((4_500..5_500).contains(&moved), "{moved}");
    }

    #[test]
    fn a_down_owner_s_keys_spread_over_the_others() {
        let c = Cluster::new(ClusterMode::Shard, "node-0", &spec(4), 1).unwrap();
        let before: Vec<String> = (0..8_000).map(|k| owner_id(&c, &format!("/{k}"))).collect();
        c.nodes()[2].health.failed();
        assert!(!c.nodes()[2].health.is_up());
        let mut went = std::collections::HashMap::new();
        for (k, was) in before.iter().enumerate() {
            let now = owner_id(&c, &format!("/{k}"));
            if was == "node-2" {
                assert_ne!(now, "node-2");
                *went.entry(now).or_insert(0) += 1;
            } else {
                assert_eq!(&now, was, "a key not node-2's moved");
            }
        }
        assert_eq!(went.len(), 3, "{went:?}");
        c.nodes()[2].health.succeeded();
        assert_eq!(owner_id(&c, "/0"), before[0]);
    }

    #[test]
    fn this_node_owns_its_keys_even_when_marked_down_and_replicate_owns_all() {
        let c = Cluster::new(ClusterMode::Shard, "node-1", &spec(2), 1).unwrap();
        c.nodes()[1].health.failed();
        let mine = (0..100)
            .filter(|k| matches!(c.owner(&format!("/{k}")), Owner::Me))
            .count();
        assert!(mine > 20 && mine < 80, "{mine}");
        let r = Cluster::new(ClusterMode::Replicate, "node-1", &spec(3), 1).unwrap();
        assert!((0..100).all(|k| matches!(r.owner(&format!("/{k}")), Owner::Me)));
    }

    #[test]
    fn bad_lists_are_refused() {
        let mut nodes = spec(2);
        assert!(Cluster::new(ClusterMode::Shard, "node-9", &nodes, 1)
            .unwrap_err()
            .contains("not among"));
        nodes[1].id = "node-0".into();
        assert!(Cluster::new(ClusterMode::Shard, "node-0", &nodes, 1)
            .unwrap_err()
            .contains("twice"));
        let mut nodes = spec(2);
        nodes[1].addr = nodes[0].addr;
        assert!(Cluster::new(ClusterMode::Shard, "node-0", &nodes, 1)
            .unwrap_err()
            .contains("two nodes"));
    }
}
