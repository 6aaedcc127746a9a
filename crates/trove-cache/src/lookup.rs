//! The Lookup step: which stored variant, if any, can answer this request, and how.

use std::sync::Arc;
use std::time::SystemTime;

use std::time::Duration;

use trove_http::{
    effective_response_cc, reuse, CacheControl, Policy, Reuse, StaleReason, StoredResponse,
    ValidateReason,
};
use trove_store::{Invalidations, Object, Removal, Verdict};

use crate::request::Request;
use crate::{partial, prepare};

/// What the store holds for a request.
#[derive(Debug)]
pub enum Lookup {
    /// Nothing stored for this URI.
    Miss,
    /// Stored responses exist but none matches this request's `Vary` selecting fields.
    VaryMiss,
    /// Stored responses existed but an invalidation rule made since they were fetched (a
    /// purge, a tag, a prefix, a ban) removed them on the way, and nothing else can answer.
    Invalidated,
    /// A stored response and what the rules say about reusing it.
    Found(Arc<Object>, Reuse),
}

fn rank(r: &Reuse) -> u8 {
    match r {
        Reuse::Fresh { .. } => 3,
        Reuse::StaleAllowed { .. } => 2,
        Reuse::MustValidate { .. } => 1,
        Reuse::Unusable { .. } => 0,
    }
}

impl Lookup {
    /// Nothing stored can answer: the request will go forward as a miss, so (and only then)
    /// the memo of uncacheable URLs matters.
    pub fn is_miss(&self) -> bool {
        matches!(
            self,
            Lookup::Miss
                | Lookup::VaryMiss
                | Lookup::Invalidated
                | Lookup::Found(_, Reuse::Unusable { .. })
        )
    }
}

/// Judges the variants the store returned for one key, without touching the store: a
/// variant whose body failed, or that a rule made
/// since its fetch invalidated, is handed to `remove` (the flow turns each into a
/// [`crate::flow::Command::Remove`]) and judged no further.
pub fn judge_variants(
    inv: Option<&Invalidations>,
    variants: &[Arc<Object>],
    req: Request<'_>,
    policy: &Policy,
    now: SystemTime,
    remove: &mut dyn FnMut(&Arc<Object>, Removal),
) -> Lookup {
    if variants.is_empty() {
        return Lookup::Miss;
    }
    if let Some(obj) = plain_fresh(inv, variants, req, policy, now) {
        let resident = now
            .duration_since(obj.head.response_time)
            .unwrap_or_default();
        let age = obj.head.prepared.initial_age.saturating_add(resident);
        return Lookup::Found(Arc::clone(obj), Reuse::Fresh { age });
    }
    let mut best: Option<(Arc<Object>, Reuse)> = None;
    let mut invalidated = false;
    for obj in variants {
        if matches!(obj.body.outcome(), Some(Err(_))) {
            remove(obj, Removal::Failed);
            continue;
        }
        let judged = verdict(inv, obj);
        if judged == Verdict::Dead {
            // Invalidated by a rule made since it was fetched (a purge, a tag, a ban…).
            remove(obj, Removal::Purged);
            invalidated = true;
            continue;
        }
        if obj.head.status == http::StatusCode::PARTIAL_CONTENT && !partial::covers(obj, req) {
            continue;
        }
        let stored = StoredResponse {
            method: &http::Method::GET,
            status: obj.head.status,
            headers: &obj.head.headers,
            request_headers: &obj.head.request_headers,
            request_time: obj.head.request_time,
            response_time: obj.head.response_time,
        };
        let mut r = reuse(policy, &stored, req.method, req.headers, now);
        if let Verdict::Stale { since } = judged {
            r = soft_stale(r, policy, obj, req, since, now);
        }
        if rank(&r) == 0 {
            continue;
        }
        let better = match &best {
            None => true,
            Some((b, br)) => {
                // Most usable first; then a complete response over a partial; then newest.
                let complete = |o: &Object| o.head.status != http::StatusCode::PARTIAL_CONTENT;
                (rank(&r), complete(obj), obj.head.response_time)
                    > (rank(br), complete(b), b.head.response_time)
            }
        };
        if better {
            best = Some((Arc::clone(obj), r));
        }
    }
    match best {
        Some((obj, r)) => Lookup::Found(obj, r),
        None if invalidated => Lookup::Invalidated,
        None => Lookup::VaryMiss,
    }
}

/// The common hit: one variant whose reuse depends on age alone, fresh, for a plain
/// request; [`judge_variants`] finds it [`Reuse::Fresh`]. `None`: judge them all.
#[inline]
pub fn plain_fresh<'v>(
    inv: Option<&Invalidations>,
    variants: &'v [Arc<Object>],
    req: Request<'_>,
    policy: &Policy,
    now: SystemTime,
) -> Option<&'v Arc<Object>> {
    match variants {
        [obj]
            if req.is_plain()
                && prepare::fresh(&obj.head, policy, now)
                && !matches!(obj.body.outcome(), Some(Err(_)))
                && verdict(inv, obj) == Verdict::Alive =>
        {
            Some(obj)
        }
        _ => None,
    }
}

/// `obj`'s standing against the store's invalidation rules (alive when it keeps none).
pub fn verdict(inv: Option<&Invalidations>, obj: &Object) -> Verdict {
    inv.map_or(Verdict::Alive, |i| i.verdict(obj))
}

/// A soft invalidation at `since` makes a fresh response stale from then on: it may still
/// be served where a stale response may (the client's `max-stale`, the response's
/// `stale-while-revalidate`, counted from `since`), else it must be revalidated.
pub fn soft_stale(
    r: Reuse,
    policy: &Policy,
    obj: &Object,
    req: Request<'_>,
    since: SystemTime,
    now: SystemTime,
) -> Reuse {
    let Reuse::Fresh { age } = r else {
        return r;
    };
    let staleness = now.duration_since(since).unwrap_or_default();
    let req_cc = CacheControl::from_request(req.headers);
    let resp_cc = effective_response_cc(policy, &obj.head.headers);
    let within = |limit: u64| staleness <= Duration::from_secs(limit);
    // As for any stale response in a shared cache (RFC 9111 §5.2.2.2, §5.2.2.8, §5.2.2.10).
    let no_stale =
        resp_cc.must_revalidate || resp_cc.proxy_revalidate || resp_cc.s_maxage.is_some();
    let reason = match req_cc.max_stale {
        _ if no_stale => None,
        Some(None) => Some(StaleReason::MaxStale),
        Some(Some(limit)) if within(limit) => Some(StaleReason::MaxStale),
        _ => resp_cc
            .stale_while_revalidate
            .filter(|w| within(*w))
            .map(|_| StaleReason::StaleWhileRevalidate),
    };
    match reason {
        Some(reason) => Reuse::StaleAllowed {
            age,
            staleness,
            reason,
        },
        None => Reuse::MustValidate {
            reason: ValidateReason::Stale,
        },
    }
}
