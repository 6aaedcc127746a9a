//! Peer health: from probes and from real requests.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Weak;
use std::time::Duration;

use crate::placement::Cluster;

/// One node's health as this node sees it. Up until `fail_after` failures in a row (a
/// failed probe or a failed request to it), up again after one success.
#[derive(Debug)]
pub struct Health {
    up: AtomicBool,
    failures_in_a_row: AtomicU32,
    fail_after: u32,
    /// Failures and successes counted since start (for `/metrics` and the status).
    failures: AtomicU64,
    downs: AtomicU64,
}

impl Health {
    pub fn new(fail_after: u32) -> Health {
        Health {
            up: AtomicBool::new(true),
            failures_in_a_row: AtomicU32::new(0),
            fail_after: fail_after.max(1),
            failures: AtomicU64::new(0),
            downs: AtomicU64::new(0),
        }
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// A probe or a request to the node failed (it could not be reached, or it answered
    /// nothing usable).
    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let n = self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.fail_after && self.up.swap(false, Ordering::Relaxed) {
            self.downs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A probe or a request to the node succeeded.
    pub fn succeeded(&self) {
        self.failures_in_a_row.store(0, Ordering::Relaxed);
        self.up.store(true, Ordering::Relaxed);
    }

    /// Failures seen, and times the node was marked down, since start.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.failures.load(Ordering::Relaxed),
            self.downs.load(Ordering::Relaxed),
        )
    }
}

/// A node's standing, for the status page and `trove cluster status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub id: String,
    pub addr: String,
    pub me: bool,
    pub up: bool,
    pub failures: u64,
    pub downs: u64,
}

impl Cluster {
    /// The share of keys each node owns now (in [`Cluster::nodes`]' order), estimated over
    /// `samples` keys: what an operator checks after adding a node or losing one.
    pub fn shares(&self, samples: u32) -> Vec<f64> {
        let mut owned = vec![0u32; self.nodes().len()];
        for k in 0..samples {
            owned[self.owner_index(&format!("share-sample-{k}"))] += 1;
        }
        owned
            .into_iter()
            .map(|n| f64::from(n) / f64::from(samples.max(1)))
            .collect()
    }

    /// Every node's standing.
    pub fn status(&self) -> Vec<NodeStatus> {
        self.nodes()
            .iter()
            .map(|n| {
                let (failures, downs) = n.health.counts();
                NodeStatus {
                    id: n.id.clone(),
                    addr: n.addr.to_string(),
                    me: n.me,
                    up: n.me || n.health.is_up(),
                    failures,
                    downs,
                }
            })
            .collect()
    }
}

/// Probes every peer every `interval` (a TCP connect within `timeout`), reporting each
/// result to the peer's [`Health`], until the cluster is dropped (a reload that changed it
/// made another, with a loop of its own).
pub async fn probe_loop(cluster: Weak<Cluster>, interval: Duration, timeout: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        {
            for peer in cluster.peers() {
                let reached =
                    tokio::time::timeout(timeout, tokio::net::TcpStream::connect(peer.addr)).await;
                match reached {
                    Ok(Ok(stream)) => {
                        if !peer.health.is_up() {
                            tracing::info!(peer = %peer.id, addr = %peer.addr, "cluster peer is up");
                        }
                        peer.health.succeeded();
                        // Closed once the success is recorded: a peer (or a test) that sees
                        // the probe's connection end knows it counted.
                        drop(stream);
                    }
                    _ => {
                        let was = peer.health.is_up();
                        peer.health.failed();
                        if was && !peer.health.is_up() {
                            tracing::warn!(peer = %peer.id, addr = %peer.addr, "cluster peer is down (probe)");
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterMode, PeerSpec};
    use std::sync::Arc;

    #[test]
    fn down_after_n_failures_in_a_row_up_after_one_success() {
        let h = Health::new(3);
        h.failed();
        h.failed();
        h.succeeded();
        h.failed();
        h.failed();
        assert!(h.is_up());
        h.failed();
        assert!(!h.is_up());
        h.failed();
        assert_eq!(h.counts(), (6, 1));
        h.succeeded();
        assert!(h.is_up());
    }

    #[tokio::test]
    async fn probes_mark_a_closed_port_down_and_an_open_one_up() {
        let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        // Bound, never listening, and held: connections are refused, and no other socket
        // can take the port meanwhile (as one could a port bound and released).
        let held = tokio::net::TcpSocket::new_v4().unwrap();
        held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let closed = held.local_addr().unwrap();
        let nodes = vec![
            PeerSpec {
                id: "me".into(),
                addr: "127.0.0.1:1".parse().unwrap(),
            },
            PeerSpec {
                id: "open".into(),
                addr: open.local_addr().unwrap(),
            },
            PeerSpec {
                id: "closed".into(),
                addr: closed,
            },
        ];
        let c = Arc::new(Cluster::new(ClusterMode::Shard, "me", &nodes, 2).unwrap());
        let probing = tokio::spawn(probe_loop(
            Arc::downgrade(&c),
            Duration::from_millis(10),
            Duration::from_millis(500),
        ));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while c.nodes()[2].health.is_up() {
            assert!(tokio::time::Instant::now() < deadline, "never marked down");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(c.nodes()[1].health.is_up());
        let st = c.status();
        assert_eq!(
            st.iter().map(|s| (s.id.as_str(), s.up)).collect::<Vec<_>>(),
            [("me", true), ("open", true), ("closed", false)]
        );
        // Dropped: the loop ends.
        drop(c);
        tokio::time::timeout(Duration::from_secs(5), probing)
            .await
            .expect("the loop ends with its cluster")
            .unwrap();
    }
}
