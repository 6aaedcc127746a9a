//! `PURGE` on the proxy port, carried out: the core read the request
//! ([`trove_cache::purge`]); the rules are made exactly as the admin API makes them
//! ([`crate::manage`]) and acknowledged once durable.

use trove_cache::purge::{Purge, PurgeRefused, Purged, What};

use super::{fetch, Ctx};
use crate::manage;

/// Request fields of a `PURGE` (tags, a named cache, a prefix, soft).
pub use trove_cache::purge::fields as purge_fields;

/// Applies `p` to the request's URL, durably.
pub(super) async fn apply(cx: &Ctx<'_>, p: &Purge) -> Result<Purged, PurgeRefused> {
    let mode = if p.soft {
        trove_api::Mode::Soft
    } else {
        trove_api::Mode::Hard
    };
    let key = cx.key().to_string();
    let calls: Vec<trove_api::Invalidate> = match &p.what {
        What::Tags(tags) => tags
            .iter()
            .map(|t| trove_api::Invalidate {
                tag: Some(t.clone()),
                mode,
                ..Default::default()
            })
            .collect(),
        What::Cache(c) => vec![trove_api::Invalidate {
            cache: Some(c.clone()),
            mode,
            ..Default::default()
        }],
        What::Prefix => vec![trove_api::Invalidate {
            prefix: Some(key),
            mode,
            ..Default::default()
        }],
        What::Url => vec![trove_api::Invalidate {
            url: Some(key),
            mode,
            ..Default::default()
        }],
    };
    let refused = |e: manage::ManageError| PurgeRefused {
        status: e.status(),
        text: e.to_string(),
    };
    // Checked whole before anything is applied: a bad tag among good ones applies none.
    if let What::Tags(tags) = &p.what {
        for t in tags {
            manage::check_tags(&cx.shared.settings.tags, std::slice::from_ref(t))
                .map_err(refused)?;
        }
    }
    let now = fetch::now();
    let mut last = None;
    for c in &calls {
        last = Some(manage::invalidate(cx.shared, c, now).map_err(refused)?);
    }
    let Some(ack) = last else {
        return Err(PurgeRefused {
            status: http::StatusCode::BAD_REQUEST,
            text: "nothing to purge".into(),
        });
    };
    // The rules are numbered in order: the last one durable means all of them are.
    manage::durable(cx.shared, ack.seq).await.map_err(refused)?;
    // Then to the cluster's other nodes, before the answer (`crate::feed`). Boxed: a
    // publish's future is large, and every request's future would carry it.
    if cx.shared.feed.is_some() {
        for c in &calls {
            let mut shared_ack = ack.clone();
            Box::pin(crate::feed::share(cx.shared, c, None, &mut shared_ack))
                .await
                .map_err(refused)?;
        }
    }
    Ok(Purged {
        seq: ack.seq,
        removed: ack.removed,
        rules: calls.len(),
    })
}
