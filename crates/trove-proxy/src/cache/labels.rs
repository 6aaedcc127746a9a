//! The labels a response is stored with: the tags its origin gave, its named cache, and when
//! it was born (what the tag, named-cache and ban invalidations select by).

use std::sync::atomic::Ordering;

use http::HeaderMap;
use trove_cache::flow::Labeler;
use trove_store::Labels;

use super::target::Target;
use crate::state::Shared;

/// The labels of a response about to be stored: the tags its origin gave (the tag fields
/// removed from `headers` when `[tags] strip` says so), its named cache, and `born`.
pub(super) fn origin_labels(
    shared: &Shared,
    target: &Target,
    headers: &mut HeaderMap,
    born: u64,
) -> (Labels, Vec<String>) {
    let tags = crate::manage::origin_tags(&shared.settings.tags, headers);
    if tags.dropped > 0 {
        shared
            .metrics
            .tags_dropped
            .fetch_add(tags.dropped as u64, Ordering::Relaxed);
        tracing::info!(
            url = target.key(),
            dropped = tags.dropped,
            "tags past [tags] max_length or max_per_object dropped"
        );
    }
    let labels = crate::manage::labels(shared, &target.url, &tags.tags, None, born);
    (labels, tags.tags)
}

/// Labels a response about to be stored ([`origin_labels`]).
pub(super) struct OriginLabels<'a> {
    pub(super) shared: &'a Shared,
    pub(super) target: &'a Target,
}

impl Labeler for OriginLabels<'_> {
    fn label(&self, headers: &mut HeaderMap, born: u64) -> (Labels, Vec<String>) {
        origin_labels(self.shared, self.target, headers, born)
    }
}
