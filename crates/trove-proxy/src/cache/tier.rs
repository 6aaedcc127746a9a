//! The disk tier as the driver reaches it today: a memory miss the disk may hold is
//! promoted into memory before the lookup is judged, and a large fresh object is sent from
//! the data file by `sendfile` without entering memory.

use std::sync::Arc;

use http::{header, Method};
use trove_cache::decide::{self, Action, Memo};
use trove_cache::flow::by_tier;
use trove_cache::{lookup, Outcome, Tier};
use trove_store::Object;

use super::{deliver, fetch, Ctx};
use crate::reply::{DiskReply, Reply, ReplyBody};

/// The disk tier's part of the Lookup step: `Err` with a reply already made (a sendfile
/// hit), else the tier the variants about to be looked up come from.
pub(super) async fn open(cx: &Ctx<'_>) -> Result<Tier, Reply> {
    // Not in memory but maybe on disk (no I/O to tell).
    let on_disk = cx
        .shared
        .disk
        .as_ref()
        .is_some_and(|t| t.should_promote(cx.key()));
    if !on_disk {
        return Ok(Tier::Memory);
    }
    if let Some(reply) = sendfile_hit(cx).await {
        return Err(reply);
    }
    Ok(promote(cx).await)
}

/// A memory miss the disk tier may hold (`Tiered::should_promote`) is loaded into memory
/// first, verified, on the blocking pool (the cache core never does I/O), so the core's
/// lookup finds it like any stored object. A large body is inserted at once and filled from disk behind it, clients
/// following it as it is read. Returns the tier a hit that follows is served from: the
/// disk when this request read the key from it (the object was not in memory).
pub(super) async fn promote(cx: &Ctx<'_>) -> Tier {
    let Some(tiered) = &cx.shared.disk else {
        return Tier::Memory;
    };
    let t = Arc::clone(tiered);
    let key = cx.key().to_string();
    let Ok(fills) = tokio::task::spawn_blocking(move || t.promote(&key)).await else {
        return Tier::Memory;
    };
    for f in fills {
        let t = Arc::clone(tiered);
        tokio::task::spawn_blocking(move || t.fill(f));
    }
    Tier::Disk
}

/// A memory miss whose object lies on disk with a body of at least `[cache.disk]
/// sendfile_min` bytes, asked for by a plain GET (no `Range`): its head is read and the
/// record verified on the blocking pool (`trove_disk::zero_copy`), the core judges it as it
/// would a stored object, and a fresh hit is answered with the body sent from the data
/// file by `sendfile`, not promoted into memory. Anything else the core decides (stale,
/// revalidate, …) is left to the ordinary path (`None`), which promotes the object.
async fn sendfile_hit(cx: &Ctx<'_>) -> Option<Reply> {
    let tiered = cx.shared.disk.as_ref()?;
    let min = cx.shared.settings.cache.disk.as_ref()?.sendfile_min;
    if cx.req.method != Method::GET || cx.req.headers.contains_key(header::RANGE) {
        return None;
    }
    // A record verified earlier whose head is in the page cache is opened here, without
    // the hop to the blocking pool; anything else is opened (and verified) there.
    let found = match tiered.disk().open_body_cached(cx.key(), min) {
        trove_disk::Cached::Found(found) => *found,
        trove_disk::Cached::No => return None,
        trove_disk::Cached::WouldBlock => {
            let t = Arc::clone(tiered);
            let key = cx.key().to_string();
            tokio::task::spawn_blocking(move || t.disk().open_body(&key, min))
                .await
                .ok()??
        }
    };
    let trove_disk::OnDisk { head, body } = found;
    let stored = Arc::new(Object::new(
        cx.key().to_string(),
        String::new(),
        head,
        trove_store::Body::new(Some(body.len())),
    ));
    let now = fetch::now();
    let store = &*cx.shared.store;
    let judged = lookup::judge(store, &[stored], cx.core(), cx.rules().policy, now);
    let Action::Serve {
        obj,
        outcome: Outcome::MemHit,
        status,
        revalidate: false,
    } = decide::after_lookup(cx.core(), judged, cx.rules(), Memo::Unknown)
    else {
        return None;
    };
    let (outcome, status) = by_tier(Tier::Disk, Outcome::MemHit, status);
    let mut reply = deliver::stored(&obj, cx.core(), now, outcome, status, None);
    match reply.body {
        // The whole body, as the object's (empty) body would have been read.
        ReplyBody::Stored { .. } => {
            reply.body = ReplyBody::Disk(Box::new(DiskReply {
                body,
                metrics: Arc::clone(&cx.shared.metrics),
            }))
        }
        // 304 or 412: no body.
        ReplyBody::Empty { .. } | ReplyBody::Bytes(_) => {}
        ReplyBody::Origin(_) | ReplyBody::Disk(_) => return None,
    }
    cx.shared.metrics.count_tier_hit(Tier::Disk);
    Some(reply)
}
