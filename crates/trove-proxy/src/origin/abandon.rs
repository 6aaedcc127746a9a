//! An origin body whose clients have all gone: the abort policy (`trove_cache::abort`)
//! decides whether it is read to the end, thrown away, so the connection is reused, or
//! dropped now, closing the connection.

use std::sync::atomic::Ordering;

use trove_cache::{AbortPolicy, AfterAbort, Storing};

use crate::metrics::Metrics;
use crate::origin::OriginResponse;

/// Every client of an origin body has gone after `received` bytes: finish reading it (and
/// throw it away, keeping the connection for reuse) or stop now, as the abort policy says.
/// Bytes read that no client received are counted as wasted.
pub async fn abandon(
    resp: &mut OriginResponse,
    policy: AbortPolicy,
    storing: Storing,
    received: u64,
    metrics: &Metrics,
) {
    let expected = resp.content_length();
    if policy.decide(storing, received, expected) == AfterAbort::Stop {
        return;
    }
    while let Ok(Some(b)) = resp.next_chunk().await {
        metrics
            .origin_bytes_wasted
            .fetch_add(b.len() as u64, Ordering::Relaxed);
    }
}
