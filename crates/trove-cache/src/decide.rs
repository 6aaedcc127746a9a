//! The request side of the state machine: where a request enters, and, given what the store
//! holds for its key, what to do next. Pure: the store's answer and `now` are passed in.

use std::sync::Arc;
use std::time::SystemTime;

use http::header::{self, HeaderName};
use http::{HeaderMap, Method};
use trove_http::{CacheControl, Policy, Reuse, StaleReason, ValidateReason};
use trove_store::Object;

use crate::cookie::CookiePolicy;
use crate::lookup::Lookup;
use crate::outcome::Outcome;
use crate::request::Request;
use crate::status::{CacheStatus, Detail, Fwd};

/// The rules a request is judged by: the HTTP caching policy of its listener and the cookie
/// policy.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub policy: &'a Policy,
    pub cookies: &'a CookiePolicy,
    /// Whether the driver puts heads on a wire: sends them on (`trove serve`) or writes
    /// them to a lower tier. One that never does (`trove sim` over memory alone) saves, on
    /// every store, encoding the head's wire form ([`trove_store::Prepared::wire`], left
    /// empty) and copying the origin's fields (moved into the object; a forwarded answer
    /// then carries none). Nothing decided depends on it: an object is charged by its
    /// fields, never by its wire form.
    pub wire: bool,
}

/// Where a request enters the state machine, decided from its method alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `PURGE`: answered from the cache alone, for clients the purge ACL allows.
    Purge,
    /// `CONNECT` on a listener that does not tunnel: refused.
    RefuseConnect,
    /// GET or HEAD without a body: look in the store.
    Lookup,
    /// Anything else goes to the origin, and may invalidate (RFC 9111 §4.4).
    Pass,
    /// GET or HEAD for a key another node of the cluster owns (shard mode): asked of that
    /// node, whose answer is passed on and not stored here ([`crate::flow::Flow::owned_elsewhere`]).
    Owner,
}

/// Whether the request body (if any) has been wholly read: a GET with a body is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyState {
    Empty,
    Present,
}

pub fn entry(method: &Method, body: BodyState) -> Entry {
    if method.as_str() == "PURGE" {
        Entry::Purge
    } else if *method == Method::CONNECT {
        Entry::RefuseConnect
    } else if (*method == Method::GET || *method == Method::HEAD) && body == BodyState::Empty {
        Entry::Lookup
    } else {
        Entry::Pass
    }
}

/// Whether a forward request may join (or lead) a collapsed fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collapse {
    Allowed,
    No,
}

/// Whether the client's own conditional and range fields go to the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conditionals {
    /// Removed, so the whole response comes back to be stored; the client's conditions
    /// are then answered from it.
    Strip,
    /// Sent on: nothing will be stored (a URL known to be uncacheable, a bypass).
    Keep,
}

/// Conditional and range fields a client sends.
pub const CLIENT_CONDITIONALS: [HeaderName; 6] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// A request to send forward.
#[derive(Debug, Clone)]
pub struct Fetch {
    pub fwd: Fwd,
    pub collapse: Collapse,
    pub conditionals: Conditionals,
    /// The stale response this fetch replaces, if any (for stale-if-error).
    pub stale: Option<Arc<Object>>,
    /// How the request is logged if the fetch succeeds.
    pub outcome: Outcome,
}

/// What to do after the lookup.
#[derive(Debug, Clone)]
pub enum Action {
    /// Serve the stored response; with `revalidate`, refresh it in the background
    /// (stale-while-revalidate).
    Serve {
        obj: Arc<Object>,
        outcome: Outcome,
        status: CacheStatus,
        revalidate: bool,
    },
    /// Validate it with the origin first, sending `conditional`.
    Revalidate {
        obj: Arc<Object>,
        conditional: HeaderMap,
        /// How a new (200) response is logged.
        outcome: Outcome,
        fwd: Fwd,
    },
    /// Go to the origin.
    Fetch(Fetch),
    /// `only-if-cached` and nothing usable: 504 (RFC 9111 §5.2.1.7).
    OnlyIfCached,
}

impl Action {
    /// The step this action takes, for traces.
    pub fn step(&self) -> crate::Step {
        match self {
            Action::Serve {
                revalidate: true, ..
            } => crate::Step::Stale,
            Action::Serve { .. } => crate::Step::Hit,
            Action::Revalidate { .. } => crate::Step::Revalidate,
            Action::Fetch(_) => crate::Step::Miss,
            Action::OnlyIfCached => crate::Step::Deliver,
        }
    }
}

/// Whether the URL is remembered as uncacheable (see [`crate::memo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memo {
    Uncacheable,
    Unknown,
}

/// The stored response would have done (it is fresh) but the request's own directives
/// refuse it: RFC 9211 §2.2's `fwd=request`, as against `fwd=stale`.
fn client_forced(reason: ValidateReason) -> bool {
    matches!(
        reason,
        ValidateReason::RequestNoCache | ValidateReason::RequestMaxAge | ValidateReason::MinFresh
    )
}

/// The Lookup step's verdict: what to do with what the store holds.
pub fn after_lookup(req: Request<'_>, found: Lookup, rules: Rules<'_>, memo: Memo) -> Action {
    // Only `Cache-Control` can say it (`Pragma` says `no-cache` alone): a request without
    // one is not parsed.
    let only_if_cached = || {
        req.headers.contains_key(header::CACHE_CONTROL)
            && CacheControl::from_request(req.headers).only_if_cached
    };
    if rules.cookies.request_cookie == crate::RequestCookiePolicy::Bypass {
        let stored_type = match &found {
            Lookup::Found(obj, _) => Some(
                obj.head
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(""),
            ),
            _ => None,
        };
        if rules.cookies.bypasses(req.headers, stored_type) {
            if only_if_cached() {
                // RFC 9111 §5.2.1.7 comes before any policy that would go forward.
                return Action::OnlyIfCached;
            }
            return Action::Fetch(Fetch {
                fwd: Fwd::Bypass,
                collapse: Collapse::No,
                conditionals: Conditionals::Keep,
                stale: None,
                outcome: Outcome::Miss,
            });
        }
    }
    match found {
        Lookup::Found(obj, Reuse::Fresh { .. }) => Action::Serve {
            obj,
            outcome: Outcome::MemHit,
            status: CacheStatus::HIT,
            revalidate: false,
        },
        Lookup::Found(obj, Reuse::StaleAllowed { reason, .. }) => Action::Serve {
            obj,
            outcome: Outcome::StaleHit,
            status: CacheStatus {
                fwd: Some(Fwd::Stale),
                ..CacheStatus::HIT
            }
            .with_detail(Detail::Stale(reason)),
            revalidate: reason == StaleReason::StaleWhileRevalidate,
        },
        Lookup::Found(obj, Reuse::MustValidate { reason }) => {
            if only_if_cached() {
                return Action::OnlyIfCached;
            }
            let forced = client_forced(reason);
            let (fwd, outcome) = if forced {
                (Fwd::Request, Outcome::ClientRefreshMiss)
            } else {
                (Fwd::Stale, Outcome::RefreshModified)
            };
            let conditional = trove_http::validation::conditional_headers(&obj.head.headers);
            if conditional.is_empty() {
                // Nothing to validate with: fetch anew. Not a refresh: a miss.
                return Action::Fetch(Fetch {
                    fwd,
                    collapse: Collapse::No,
                    conditionals: Conditionals::Strip,
                    stale: Some(obj),
                    outcome: if forced {
                        Outcome::ClientRefreshMiss
                    } else {
                        Outcome::Miss
                    },
                });
            }
            Action::Revalidate {
                obj,
                conditional,
                outcome,
                fwd,
            }
        }
        Lookup::Found(_, Reuse::Unusable { .. })
        | Lookup::Miss
        | Lookup::VaryMiss
        | Lookup::Invalidated => {
            if only_if_cached() {
                return Action::OnlyIfCached;
            }
            let fwd = match found {
                Lookup::Miss => Fwd::UriMiss,
                Lookup::VaryMiss => Fwd::VaryMiss,
                Lookup::Invalidated => Fwd::Invalidated,
                _ => Fwd::Miss,
            };
            let (fwd, collapse, conditionals) = match memo {
                Memo::Uncacheable => (Fwd::Miss, Collapse::No, Conditionals::Keep),
                // Only GETs collapse: a HEAD's response is never stored, so it can't feed
                // waiters.
                Memo::Unknown if *req.method == Method::GET => {
                    (fwd, Collapse::Allowed, Conditionals::Strip)
                }
                Memo::Unknown => (fwd, Collapse::No, Conditionals::Strip),
            };
            Action::Fetch(Fetch {
                fwd,
                collapse,
                conditionals,
                stale: None,
                outcome: Outcome::Miss,
            })
        }
    }
}

/// A collapsed follower woke with the leader's stored object: serve it if it is fresh for
/// this request, else (`None`) fetch for itself.
pub fn after_collapse(
    req: Request<'_>,
    obj: Arc<Object>,
    rules: Rules<'_>,
    now: SystemTime,
) -> Option<Action> {
    let r = trove_http::reuse(
        rules.policy,
        &crate::stored_view(&obj),
        req.method,
        req.headers,
        now,
    );
    matches!(r, Reuse::Fresh { .. }).then_some(Action::Serve {
        obj,
        outcome: Outcome::CollapsedHit,
        status: CacheStatus {
            collapsed: true,
            ..CacheStatus::HIT
        },
        revalidate: false,
    })
}

/// The header fields of a forward request, from the client's (already stripped of
/// connection-level fields by the front end, so a client can't name the cache's own
/// validators in `Connection`): with [`Conditionals::Strip`] the client's conditional and
/// range fields removed, then `extra` (a cache validation) added.
pub fn forward_fields(
    client: HeaderMap,
    conditionals: Conditionals,
    extra: Option<&HeaderMap>,
) -> HeaderMap {
    let mut h = client;
    // A client's request usually has no fields to strip (the simulator's has none at all).
    if conditionals == Conditionals::Strip && !h.is_empty() {
        for name in &CLIENT_CONDITIONALS {
            h.remove(name);
        }
    }
    if let Some(extra) = extra {
        for (k, v) in extra {
            h.insert(k.clone(), v.clone());
        }
    }
    h
}
