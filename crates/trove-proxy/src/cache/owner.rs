//! Shard mode's one step outside the node: a miss for a key another node owns is asked of
//! that node (the flow's `Command::AskOwner`), marked so the owner never forwards it again;
//! its answer or failure also tells the owner's health.

use std::sync::atomic::Ordering;

use http::HeaderMap;
use trove_cache::Conditionals;

use super::fetch::{self, Outgoing, Retry};
use super::target::Target;
use super::Ctx;
use crate::origin::{Failed, InterimSlot, OriginRequestBody, OriginResponse};

impl Ctx<'_> {
    /// The request asked of the key's owner, marked with this node's id so that the owner
    /// never forwards it again ([`trove_cluster::PEER_HEADER`]).
    pub(super) async fn ask_owner(
        &self,
        owner: &trove_cluster::Node,
    ) -> Result<OriginResponse, Failed> {
        let metrics = &self.shared.metrics;
        metrics
            .cluster_owner_requests
            .fetch_add(1, Ordering::Relaxed);
        let me = self
            .shared
            .cluster
            .as_ref()
            .map_or("", |c| c.me().id.as_str());
        let target = Target {
            url: self.target.url.clone(),
            upstreams: crate::upstream::Upstreams::one(crate::upstream::Upstream {
                host: owner.addr.ip().to_string(),
                port: owner.addr.port(),
                tls: None,
            }),
        };
        let mut mark = HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(me) {
            mark.insert(trove_cluster::PEER_HEADER, v);
        }
        let asked = fetch::send(
            self.shared,
            Outgoing {
                req: self.req,
                target: &target,
                mode: self.mode,
                client: self.client,
                reach: &self.reach,
                conditionals: Conditionals::Keep,
                extra: Some(&mark),
                body: OriginRequestBody::empty(),
                retry: Retry::Allowed,
                interim: self.interim.map(InterimSlot::queue),
                absolute_form: true,
            },
        )
        .await;
        match &asked {
            Ok(_) => owner.health.succeeded(),
            Err(f) => {
                owner.health.failed();
                metrics
                    .cluster_owner_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(owner = %owner.id, error = %f.error, "cluster owner failed: served here");
            }
        }
        asked
    }
}
