//! The request path over the network: runs the cache core's decisions
//! (`trove_cache`, where the state diagram is drawn) with real sockets. One function per
//! step the core names; what each does is I/O the core can't: wait on a collapsed fetch,
//! send to the origin, fill a stored body in the background, stream the reply.
//!
//! ```text
//! resolve (target, by the connection) ─► handle ─► entry ─► purge | pass | cacheable
//! cacheable ─► lookup ─► after_lookup ─► serve | revalidate | fetch | only-if-cached
//! fetch ─► (collapse) ─► send ─► after_fetch ─► store + spawn_fill ─► deliver stored
//!                                           └─► pass_through ─────► deliver origin
//! revalidate ─► send ─► after_validation ─► freshen (update_meta) | refetch | stale | replace
//! ```
//!
//! Every path ends in a [`Reply`] whose [`Outcome`] the access log and metrics print.

pub mod collapse;
mod deliver;
mod fetch;
pub(crate) mod headers;
mod range;
pub mod target;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use std::time::SystemTime;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, StatusCode, Version};
use tokio::io::AsyncRead;
use trove_cache::decide::{self, BodyState};
use trove_cache::partial::{self, OnCompletion};
use trove_cache::respond::{self, OnFailure, OnResponse, OnValidation};
use trove_cache::resume;
use trove_cache::{
    lookup, Action, CacheStatus, Collapse, Conditionals, Entry, Fetch, Fwd, Memo, Outcome, Request,
    ResponseHead, Rules, Tier, CACHE_STATUS,
};
use trove_store::{FileHit, FileOpen, Labels, Lower, Object, ObjectHead, Probe, Removal, Verdict};

use crate::client::body::{BodyReadError, RequestBody};
use crate::client::head::{Framing, RequestHead};
use crate::client::info::ConnInfo;
use crate::destination::{Addrs, Blocked, ClientClass, Reach, Refusal};
use crate::origin::{
    body_channel, Failed, InterimSlot, OriginError, OriginRequestBody, OriginResponse,
};
use crate::reply::{Detach, DiskReply, PassBody, Reply, ReplyBody, Resume};
use crate::settings::Mode;
use crate::state::Shared;
use crate::upstream::Chooser;
use collapse::{Collapsed, Leader, Role};
use fetch::{Outgoing, Retry};
use headers::Client;
use target::Target;

/// The URL to print in the access log for a request refused before its target was resolved
/// (a normalised target prints its key): the `Host` a reverse request's origin-form target
/// is relative to (empty when the target is absolute) and the raw target. The log sanitises
/// both.
pub fn log_url(req: &RequestHead, mode: Mode) -> (&str, std::borrow::Cow<'_, str>) {
    use std::borrow::Cow;
    let target: Cow<'_, str> = match req.target.path_and_query() {
        Some(pq) if req.target.scheme().is_none() => Cow::Borrowed(pq.as_str()),
        _ => Cow::Owned(req.target.to_string()),
    };
    if req.target.scheme().is_some() || mode == Mode::Forward {
        return ("", target);
    }
    let host = req
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("-");
    (host, target)
}

/// Everything a step needs to know about the request.
struct Ctx<'a> {
    shared: &'a Arc<Shared>,
    req: &'a RequestHead,
    target: &'a Target,
    mode: Mode,
    client: Client,
    /// The client as the destination guard sees it.
    reach: Reach,
    /// Where interim responses to this client's own origin requests go.
    interim: Option<&'a InterimSlot>,
}

impl Ctx<'_> {
    fn core(&self) -> Request<'_> {
        Request::new(&self.req.method, &self.req.headers)
    }

    fn rules(&self) -> Rules<'_> {
        self.shared.rules(self.mode)
    }

    fn key(&self) -> &str {
        self.target.key()
    }

    /// The invalidation sequence number now, to stamp a request about to be sent with: its
    /// response is older than any rule made after this (`trove_store::invalidation`).
    fn born(&self) -> u64 {
        born(self.shared)
    }

    /// A bodyless request for the target to its origin.
    async fn send(
        &self,
        conditionals: Conditionals,
        extra: Option<&HeaderMap>,
    ) -> Result<OriginResponse, Failed> {
        fetch::send(
            self.shared,
            Outgoing {
                req: self.req,
                target: self.target,
                mode: self.mode,
                client: self.client,
                reach: &self.reach,
                conditionals,
                extra,
                body: OriginRequestBody::empty(),
                retry: Retry::Allowed,
                interim: self.interim.map(InterimSlot::queue),
            },
        )
        .await
    }
}

fn born(shared: &Shared) -> u64 {
    shared.invalidations.as_ref().map_or(0, |i| i.current())
}

/// True when a rule made since `obj` was fetched invalidated it hard.
fn is_dead(shared: &Shared, obj: &Object) -> bool {
    lookup::verdict(shared.invalidations.as_deref(), obj) == Verdict::Dead
}

/// The labels of a response about to be stored: the tags its origin gave (the tag fields
/// removed from `headers` when `[tags] strip` says so), its named cache, and `born`.
fn origin_labels(
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

/// Handles one request, whose target was resolved ([`target::resolve`]), and returns the
/// reply to write.
pub async fn handle<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    req: &RequestHead,
    target: &Target,
    info: ConnInfo,
    body: &mut RequestBody<'_, R>,
    interim: Option<&InterimSlot>,
) -> Reply {
    let body_state = if body.is_done() {
        BodyState::Empty
    } else {
        BodyState::Present
    };
    let entry = decide::entry(&req.method, body_state);
    let client = Client::of(info);
    let class = shared.destinations.class(client.ip);
    // Anything that may reach the origin, a stored copy of it included, is checked first.
    // PURGE reaches nothing (its own ACL governs it).
    let checked = match entry {
        Entry::Lookup | Entry::Pass => match check_destination(shared, target, class).await {
            Ok(checked) => checked,
            Err(refused) => return refused,
        },
        Entry::Purge | Entry::RefuseConnect => None,
    };
    let cx = Ctx {
        shared,
        req,
        target,
        mode: info.mode,
        client,
        reach: Reach { class, checked },
        interim,
    };
    match entry {
        Entry::Purge => purge(&cx).await,
        // Tunnels are a forward-proxy service; never pass CONNECT on to an origin.
        Entry::RefuseConnect => Reply::simple(
            StatusCode::METHOD_NOT_ALLOWED,
            Outcome::None,
            "CONNECT is not served here",
        ),
        Entry::Lookup => cacheable(&cx).await,
        Entry::Pass => pass(&cx, body).await,
    }
}

/// The destination guard's first look at a client-chosen origin (a forward-proxy request;
/// an operator's `[[origin]]` route is trusted): notes the client's class, which every
/// connection made for the request is checked for (`origin::Pool`), and for a client that
/// is not local resolves and checks the name now, before the cache is consulted, so a
/// refused client gets no stored copy either (one a local client fetched from a loopback
/// service, say). The addresses checked here are the ones connected to on a miss. The name
/// is resolved through the resolver's cache (`crate::resolver`), so a hit costs a lookup
/// in memory, not one in DNS. A name that does not resolve (or not within the connect
/// timeout) is left to the connection, which fails as it always did (502 or 504), and a
/// stored copy may be served meanwhile.
pub(crate) async fn check_destination(
    shared: &Shared,
    target: &Target,
    class: ClientClass,
) -> Result<Option<Addrs>, Reply> {
    if target.upstreams.chooser() == Chooser::Operator || class == ClientClass::Local {
        return Ok(None);
    }
    let Some(up) = target.upstreams.iter().next() else {
        return Ok(None);
    };
    let policy = &shared.destinations;
    let limit = shared.settings.timeouts.connect;
    let resolve = policy.resolve(&shared.resolver, &up.host, up.port, class);
    match tokio::time::timeout(limit, resolve).await {
        Ok(Ok(addrs)) => Ok(Some(addrs)),
        Ok(Err(Blocked::Refused(why))) => {
            shared.metrics.count_refusal(why);
            Err(destination_refused(why))
        }
        Ok(Err(Blocked::Resolve(_))) | Err(_) => Ok(None),
    }
}

/// The reply to a client whose destination the guard refused: 403, logged `TCP_DENIED`
/// and, like every denial, without `Cache-Status` (the cache took no part).
fn destination_refused(why: Refusal) -> Reply {
    tracing::debug!(reason = why.as_str(), "destination refused");
    Reply::simple(
        StatusCode::FORBIDDEN,
        Outcome::Denied,
        &format!("the proxy will not connect there: {}", why.explain()),
    )
}

/// Lookup, then the step the core's verdict calls for.
async fn cacheable(cx: &Ctx<'_>) -> Reply {
    // Not in memory but maybe on a lower tier (no I/O to tell): open it there first.
    let mut tier = Tier::Memory;
    if let Probe::Lower(lower) = cx.shared.store.probe(cx.key()) {
        match sendfile_hit(cx, lower).await {
            Ok(reply) => return reply,
            Err(Some(lower)) => tier = promote(lower).await,
            // The blocking task opening it panicked, and the handle with it: a miss.
            Err(None) => {}
        }
    }
    let now = fetch::now();
    let store = &*cx.shared.store;
    let policy = cx.rules().policy;
    let found = lookup::lookup_combining(store, cx.key(), cx.core(), policy, now);
    // Only a miss consults the memo: keep its lock off every other path.
    let memo = if found.is_miss() && cx.shared.memo.lock().remembered(cx.key(), now) {
        Memo::Uncacheable
    } else {
        Memo::Unknown
    };
    match decide::after_lookup(cx.core(), found, cx.rules(), memo) {
        Action::Serve {
            obj,
            outcome,
            status,
            revalidate,
        } => {
            if revalidate {
                background_revalidate(cx, &obj);
            }
            // A large object kept on disk (read from its fragments, in the process that
            // stored it as in a later one) is a disk hit wherever the lookup found it.
            let tier = if obj.body.reads_from_disk() {
                Tier::Disk
            } else {
                tier
            };
            let (outcome, status) = by_tier(tier, outcome, status);
            cx.shared.metrics.count_tier_hit(tier);
            hit(cx, &obj, outcome, status, now)
        }
        Action::OnlyIfCached => {
            // RFC 9111 §5.2.1.7: no stored response satisfies the request.
            let mut r = Reply::simple(
                StatusCode::GATEWAY_TIMEOUT,
                Outcome::None,
                "not in cache (only-if-cached)",
            );
            let status =
                CacheStatus::forward(Fwd::Miss).with_detail(trove_cache::Detail::OnlyIfCached);
            r.headers.insert(CACHE_STATUS, status.header_value(None));
            r
        }
        Action::Revalidate {
            obj,
            conditional,
            outcome,
            fwd,
        } => revalidate(cx, obj, &conditional, outcome, fwd).await,
        Action::Fetch(f) => miss(cx, f).await,
    }
}

/// A memory miss a lower tier may hold (`Storage::probe`) is loaded into memory first,
/// verified, on the blocking pool (`Lower::load`; the cache core never does I/O), so the
/// core's lookup finds it like any stored object. A large body is inserted at once and
/// filled from disk behind it, on the blocking pool too, clients following it as it is
/// read. Returns the tier a hit that follows is served from: the disk when this request
/// read the key from it (the object was not in memory).
async fn promote(lower: Box<dyn Lower>) -> Tier {
    let Ok(fills) = tokio::task::spawn_blocking(move || lower.load()).await else {
        return Tier::Memory;
    };
    for f in fills {
        tokio::task::spawn_blocking(move || f.run());
    }
    Tier::Disk
}

/// A memory miss whose object lies on a lower tier with a body of at least `[cache.disk]
/// sendfile_min` bytes, asked for by a plain GET (no `Range`): its head is read and the
/// record verified on the blocking pool (`Lower::open_file`), the core judges it as it
/// would a stored object, and a fresh hit is answered with the body sent from the tier's
/// file by `sendfile` (`trove_store::FileBody`), not promoted into memory. Anything else
/// the core decides (stale, revalidate, …) is left to the ordinary path (`Err`, the handle
/// back), which promotes the object.
async fn sendfile_hit(
    cx: &Ctx<'_>,
    lower: Box<dyn Lower>,
) -> Result<Reply, Option<Box<dyn Lower>>> {
    let Some(min) = cx
        .shared
        .settings
        .cache
        .disk
        .as_ref()
        .map(|d| d.sendfile_min)
    else {
        return Err(Some(lower));
    };
    if cx.req.method != Method::GET || cx.req.headers.contains_key(header::RANGE) {
        return Err(Some(lower));
    }
    // A record verified earlier whose head is in the page cache is opened here, without
    // the hop to the blocking pool; anything else is opened (and verified) there.
    let (lower, found) = match lower.open_file_now(min) {
        FileOpen::Found(found) => (lower, *found),
        FileOpen::No => return Err(Some(lower)),
        FileOpen::WouldBlock => {
            let opened = tokio::task::spawn_blocking(move || {
                let found = lower.open_file(min);
                (lower, found)
            })
            .await;
            match opened {
                Ok((lower, Some(found))) => (lower, found),
                Ok((lower, None)) => return Err(Some(lower)),
                Err(_) => return Err(None),
            }
        }
    };
    let FileHit { head, body } = found;
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
        return Err(Some(lower));
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
        ReplyBody::Origin(_) | ReplyBody::Disk(_) => return Err(Some(lower)),
    }
    cx.shared.metrics.count_tier_hit(Tier::Disk);
    Ok(reply)
}

/// How a hit is logged by the tier it came from: a fresh hit read from disk is Squid's
/// `TCP_HIT` with `detail=disk` in `Cache-Status`, a memory one `TCP_MEM_HIT`; other kinds
/// of hit (stale, 304, negative) keep their codes whatever the tier.
fn by_tier(tier: Tier, outcome: Outcome, status: CacheStatus) -> (Outcome, CacheStatus) {
    match (tier, outcome) {
        (Tier::Disk, Outcome::MemHit) => (
            Outcome::DiskHit,
            status.with_detail(trove_cache::Detail::Disk),
        ),
        _ => (outcome, status),
    }
}

/// Serves a stored response.
fn hit(
    cx: &Ctx<'_>,
    obj: &Arc<Object>,
    outcome: Outcome,
    status: CacheStatus,
    now: SystemTime,
) -> Reply {
    cx.shared.store.touch(obj);
    if let Some(why) = status.stale_served() {
        cx.shared.metrics.count_stale(why);
    }
    deliver::stored(obj, cx.core(), now, outcome, status, None).with_detach(|| detach(cx, obj))
}

/// What to do if this client falls too far behind `obj`'s body after it has left the store
/// (see `trove_store::Body`): go on with a fetch of its own for the rest when the response
/// has a strong validator (`trove_cache::resume`), else cut the client off.
fn detach(cx: &Ctx<'_>, obj: &Object) -> Detach {
    let metrics = Arc::clone(&cx.shared.metrics);
    let Some(validator) = resume::validator(&obj.head.headers) else {
        return Detach {
            metrics,
            resume: None,
        };
    };
    let shared = Arc::clone(cx.shared);
    let target = cx.target.clone();
    let req = bodyless_get(cx.req);
    let (mode, client) = (cx.mode, cx.client);
    let reach = cx.reach.clone();
    let resume: Resume = Box::new(move |from, end| {
        Box::pin(async move {
            let extra = resume::request_fields(&validator, from, end)?;
            let out = Outgoing {
                req: &req,
                target: &target,
                mode,
                client,
                reach: &reach,
                conditionals: Conditionals::Strip,
                extra: Some(&extra),
                body: OriginRequestBody::empty(),
                retry: Retry::Allowed,
                interim: None,
            };
            let resp = fetch::send(&shared, out).await.ok()?;
            // Anything but the rest of this very representation is dropped unread.
            resume::resumes(&validator, from, end, resp.status, &resp.headers).then_some(resp)
        })
    });
    Detach {
        metrics,
        resume: Some(resume),
    }
}

/// A miss: complete a stored partial response with the range it lacks, or join a fetch
/// already under way for this key, or lead one, then fetch.
async fn miss(cx: &Ctx<'_>, f: Fetch) -> Reply {
    if f.fwd == Fwd::VaryMiss {
        // Only pieces of the response are stored (or other variants).
        let stored = cx.shared.store.lookup(cx.key());
        if let Some(c) = partial::completion(&stored, cx.core()) {
            if let Some(reply) = complete(cx, &c).await {
                return reply;
            }
        }
    }
    let mut leader: Option<Leader> = None;
    if f.collapse == Collapse::Allowed {
        match cx.shared.fetches.join(cx.key()) {
            Role::Leader(l) => leader = Some(l),
            Role::Follower(w) => {
                let limit = cx.shared.settings.timeouts.origin_response;
                if let Ok(Collapsed::Stored(obj)) = tokio::time::timeout(limit, w.wait()).await {
                    let now = fetch::now();
                    // The leader's request may predate an invalidation made since.
                    if is_dead(cx.shared, &obj) {
                        return fetch_and_store(cx, f, None).await;
                    }
                    if let Some(Action::Serve {
                        obj,
                        outcome,
                        status,
                        ..
                    }) = decide::after_collapse(cx.core(), obj, cx.rules(), now)
                    {
                        return hit(cx, &obj, outcome, status, now);
                    }
                }
                // The leader's response can't be shared with this request: fetch our own.
            }
        }
    }
    fetch_and_store(cx, f, leader).await
}

/// Asks the origin only for the range a stored partial response lacks (RFC 9111 §3.4),
/// stores that part, combines the two and serves the client from the result. Another
/// answer is handled like any fetch's. `None` when the part turns out unusable after all
/// (not storable, cut short): the request then goes on as an ordinary miss.
async fn complete(cx: &Ctx<'_>, c: &partial::Completion) -> Option<Reply> {
    let born = cx.born();
    let resp = match cx.send(Conditionals::Strip, Some(&c.fields)).await {
        Ok(r) => r,
        Err(e) => return Some(failed(cx, None, Fwd::Partial, Outcome::Miss, &e)),
    };
    match partial::after_completion(c, resp.status, &resp.headers) {
        OnCompletion::Part => {}
        // The representation changed (If-Range did not match), the origin sent something
        // else, or failed: its answer is handled like any fetch's.
        OnCompletion::Other => {
            return Some(from_origin(
                cx,
                resp,
                None,
                Fwd::Partial,
                Outcome::Miss,
                born,
            ))
        }
    }
    let shared = cx.shared;
    let mut headers =
        respond::clean_response_headers(&resp.headers, &shared.via, resp.response_time);
    let (labels, tags) = origin_labels(shared, cx.target, &mut headers, born);
    let head = response_head(&resp, &headers);
    let max = shared.store.max_object();
    let verdict = respond::after_fetch(cx.core(), cx.key(), &head, cx.rules(), Fwd::Partial, max);
    let OnResponse::Store { mut object, .. } = verdict else {
        tokio::spawn(fetch::discard(resp));
        return None;
    };
    object.head.labels = labels;
    crate::manage::remember_tags(shared, &tags);
    let Ok(part) = shared.store.insert(*object) else {
        tokio::spawn(fetch::discard(resp));
        return None;
    };
    // Combining needs the whole part: read it in as it is stored.
    let mut arriving = part.body.reader(0);
    fetch::spawn_fill(shared, resp, Arc::clone(&part));
    while let Some(piece) = arriving.next().await {
        piece.ok()?;
    }
    let policy = cx.rules().policy;
    partial::combine(&*shared.store, policy, cx.key());
    let now = fetch::now();
    match lookup::lookup(&*shared.store, cx.key(), cx.core(), policy, now) {
        lookup::Lookup::Found(obj, r) if !matches!(r, trove_http::Reuse::Unusable { .. }) => Some(
            hit(cx, &obj, Outcome::Miss, partial::completed_status(), now),
        ),
        _ => None,
    }
}

/// Sends `f` to the origin and stores or passes what comes back.
async fn fetch_and_store(cx: &Ctx<'_>, mut f: Fetch, leader: Option<Leader>) -> Reply {
    let born = cx.born();
    let resp = match cx.send(f.conditionals, None).await {
        Ok(r) => r,
        Err(e) => return failed(cx, f.stale.as_ref(), f.fwd, f.outcome, &e),
    };
    let now = fetch::now();
    // A stale copy invalidated meanwhile is no fallback.
    if f.stale.as_ref().is_some_and(|o| is_dead(cx.shared, o)) {
        f.stale = None;
    }
    if let Some((obj, status)) =
        respond::stale_on_server_error(&f, cx.core(), resp.status, cx.rules(), now)
    {
        tokio::spawn(fetch::discard(resp));
        return hit(cx, &obj, Outcome::RefreshFailOld, status, now);
    }
    from_origin(cx, resp, leader, f.fwd, f.outcome, born)
}

fn response_head<'a>(resp: &OriginResponse, headers: &'a HeaderMap) -> ResponseHead<'a> {
    ResponseHead {
        status: resp.status,
        headers,
        content_length: resp.content_length(),
        request_time: resp.request_time,
        response_time: resp.response_time,
    }
}

/// The Store-or-pass step for a response fresh from the origin.
fn from_origin(
    cx: &Ctx<'_>,
    resp: OriginResponse,
    leader: Option<Leader>,
    fwd: Fwd,
    outcome: Outcome,
    born: u64,
) -> Reply {
    let shared = cx.shared;
    let mut headers =
        respond::clean_response_headers(&resp.headers, &shared.via, resp.response_time);
    let (labels, tags) = origin_labels(shared, cx.target, &mut headers, born);
    let head = response_head(&resp, &headers);
    if cx.req.method == Method::HEAD {
        // RFC 9111 §4.3.5: a HEAD response freshens the stored GET responses it selects. Its
        // body is empty; the length it declares is the GET's.
        let declared = ResponseHead {
            content_length: fetch::content_length_header(&resp.headers),
            ..head
        };
        for (obj, h) in respond::head_updates(
            &shared.store.lookup(cx.key()),
            cx.core(),
            &declared,
            cx.rules(),
        ) {
            shared.store.update_meta(&obj, h);
        }
    }
    let max = shared.store.max_object();
    let verdict = respond::after_fetch(cx.core(), cx.key(), &head, cx.rules(), fwd, max);
    carry_out(cx, resp, headers, verdict, leader, outcome, (labels, tags))
}

/// Carries out the core's store-or-pass verdict on an origin response (`headers`, its
/// cleaned fields): insert it, start filling its body and serve it from the store, waking
/// collapsed waiters; or send it straight on.
fn carry_out(
    cx: &Ctx<'_>,
    resp: OriginResponse,
    headers: HeaderMap,
    verdict: OnResponse,
    leader: Option<Leader>,
    outcome: Outcome,
    (labels, tags): (Labels, Vec<String>),
) -> Reply {
    let shared = cx.shared;
    let peer = Some(resp.upstream.authority());
    // A stored answer to a POST (RFC 9110 §9.3.3) is the client's whole response: its own
    // preconditions and range were the origin's to judge.
    let no_fields = HeaderMap::new();
    let for_client = if cx.req.method == Method::POST {
        Request::new(&Method::GET, &no_fields)
    } else {
        cx.core()
    };
    // The memo of uncacheable URLs is about GETs: a POST's answer says nothing of them.
    let remembers = cx.req.method != Method::POST;
    match verdict {
        OnResponse::Store {
            mut object,
            leader_fields,
            status,
        } => match shared.store.insert({
            object.head.labels = labels;
            *object
        }) {
            Ok(obj) => {
                // Invalidated between this request's send and now (the rule was there when
                // it was stored, or is seen here): gone from the store; its own client,
                // whose request came first, is still served.
                if is_dead(shared, &obj) {
                    shared.store.remove_object(&obj, Removal::Purged);
                }
                crate::manage::remember_tags(shared, &tags);
                shared.memo.lock().forget(cx.key());
                // The leader's reader exists before the fill starts, so the fill never runs
                // ahead of it as if nobody were reading.
                let mut reply =
                    deliver::stored(&obj, for_client, fetch::now(), outcome, status, peer)
                        .with_detach(|| detach(cx, &obj));
                fetch::spawn_fill(shared, resp, Arc::clone(&obj));
                if let Some(l) = leader {
                    l.publish(Collapsed::Stored(Arc::clone(&obj)));
                }
                for (name, value) in &leader_fields {
                    reply.headers.append(name, value.clone());
                }
                reply
            }
            Err(why) => {
                if remembers {
                    shared.memo.lock().remember(cx.key(), fetch::now());
                }
                pass_through(cx, resp, headers, outcome, respond::refused(status, why))
            }
        },
        OnResponse::Pass { status, remember } => {
            drop(leader);
            if remember && remembers {
                shared.memo.lock().remember(cx.key(), fetch::now());
            }
            pass_through(cx, resp, headers, outcome, status)
        }
    }
}

/// Sends an origin response on without storing it; `headers` are its cleaned fields.
fn pass_through(
    cx: &Ctx<'_>,
    resp: OriginResponse,
    mut headers: HeaderMap,
    outcome: Outcome,
    status: CacheStatus,
) -> Reply {
    let upstream = resp.headers.get(CACHE_STATUS).cloned();
    headers.insert(CACHE_STATUS, status.header_value(upstream.as_ref()));
    let peer = Some(resp.upstream.authority());
    let code = resp.status;
    let no_body = cx.req.method == Method::HEAD
        || code.is_informational()
        || code == StatusCode::NO_CONTENT
        || code == StatusCode::NOT_MODIFIED;
    let body = if no_body {
        let content_length = fetch::content_length_header(&resp.headers);
        tokio::spawn(fetch::discard(resp));
        ReplyBody::Empty { content_length }
    } else {
        ReplyBody::Origin(Box::new(PassBody {
            resp,
            abort: cx.shared.settings.cache.abort.policy(),
            metrics: Arc::clone(&cx.shared.metrics),
        }))
    };
    Reply {
        status: code,
        headers,
        wire: None,
        body,
        outcome,
        peer,
        close: false,
    }
}

/// The origin could not be reached: stale-if-error, or a generated error that names the
/// upstream (in its body and in the log's hierarchy field).
fn failed(
    cx: &Ctx<'_>,
    stale: Option<&Arc<Object>>,
    fwd: Fwd,
    outcome: Outcome,
    f: &Failed,
) -> Reply {
    let e = &f.error;
    if let OriginError::Refused(why) = e {
        // Refused at connect time (counted there): not an origin failure, so no stale copy
        // and no 502.
        return destination_refused(*why);
    }
    tracing::debug!(error = %e, "origin request failed");
    let now = fetch::now();
    // A stale copy invalidated meanwhile is no fallback (a soft invalidation's is).
    let stale = stale.filter(|o| !is_dead(cx.shared, o));
    match respond::after_failure(stale, cx.core(), cx.rules(), fwd, outcome, e.failure(), now) {
        OnFailure::ServeStale { obj, status } => {
            hit(cx, &obj, Outcome::RefreshFailOld, status, now)
        }
        OnFailure::Error {
            status,
            outcome,
            cache_status,
        } => {
            let upstream = f.upstream.as_ref().map(|u| u.authority());
            let text = match &upstream {
                Some(u) => format!("upstream {u}: {e}"),
                None => e.to_string(),
            };
            let mut r = Reply::simple(status, outcome, &text);
            r.peer = upstream;
            r.headers
                .insert(CACHE_STATUS, cache_status.header_value(None));
            if status == StatusCode::SERVICE_UNAVAILABLE {
                r.headers
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            r
        }
    }
}

/// Revalidate a stored response with a conditional request (RFC 9111 §4.3).
async fn revalidate(
    cx: &Ctx<'_>,
    obj: Arc<Object>,
    conditional: &HeaderMap,
    outcome: Outcome,
    fwd: Fwd,
) -> Reply {
    let born = cx.born();
    let resp = match cx.send(Conditionals::Strip, Some(conditional)).await {
        Ok(r) => r,
        Err(e) => return failed(cx, Some(&obj), fwd, outcome, &e),
    };
    let now = fetch::now();
    let headers =
        respond::clean_response_headers(&resp.headers, &cx.shared.via, resp.response_time);
    let head = response_head(&resp, &headers);
    let verdict = respond::after_validation(&obj, cx.core(), &head, cx.rules(), fwd, now);
    // A 304 to a request sent before an invalidation of this object confirms nothing that
    // may still be served: fetch the whole response instead.
    let verdict = match verdict {
        OnValidation::Freshen { .. } | OnValidation::ServeStale { .. }
            if is_dead(cx.shared, &obj) =>
        {
            OnValidation::Refetch
        }
        v => v,
    };
    match verdict {
        OnValidation::Freshen {
            mut head,
            status,
            leader_fields,
        } => {
            head.labels = obj.head.labels.reborn(born);
            let peer = Some(resp.upstream.authority());
            tokio::spawn(fetch::discard(resp));
            let fresh = freshen(cx.shared, &obj, *head);
            let mut reply = deliver::stored(
                &fresh,
                cx.core(),
                now,
                Outcome::RefreshUnmodified,
                status,
                peer,
            )
            .with_detach(|| detach(cx, &fresh));
            for (name, value) in &leader_fields {
                reply.headers.append(name, value.clone());
            }
            reply
        }
        OnValidation::Refetch => {
            // The 304 does not match what we hold (§4.3.4): fetch the whole response.
            tokio::spawn(fetch::discard(resp));
            let stale = (!is_dead(cx.shared, &obj)).then_some(obj);
            let f = Fetch {
                fwd,
                collapse: Collapse::No,
                conditionals: Conditionals::Strip,
                stale,
                outcome: Outcome::RefreshModified,
            };
            fetch_and_store(cx, f, None).await
        }
        OnValidation::ServeStale { status } => {
            tokio::spawn(fetch::discard(resp));
            hit(cx, &obj, Outcome::RefreshFailOld, status, now)
        }
        OnValidation::Replace => from_origin(cx, resp, None, fwd, outcome, born),
    }
}

/// Stores a 304's merged head in place of `obj`'s (same identity, same body, so a body still
/// arriving keeps being filled and stored); if `obj` has left the store meanwhile, the
/// client is served the new head all the same.
fn freshen(shared: &Shared, obj: &Arc<Object>, head: ObjectHead) -> Arc<Object> {
    shared
        .store
        .update_meta(obj, head.clone())
        .unwrap_or_else(|| {
            Arc::new(Object::new(
                obj.key.clone(),
                obj.variant.clone(),
                head,
                Arc::clone(&obj.body),
            ))
        })
}

/// A bodyless GET with the client's fields, for a request trove makes on a client's behalf
/// after the client's own exchange (a background revalidation, a resumed body).
fn bodyless_get(req: &RequestHead) -> RequestHead {
    RequestHead {
        method: Method::GET,
        target: req.target.clone(),
        version: Version::HTTP_11,
        headers: req.headers.clone(),
        framing: Framing::None,
        keep_alive: true,
        expect_continue: false,
    }
}

/// stale-while-revalidate: the stale response was served; refresh it in the background,
/// once per key at a time.
fn background_revalidate(cx: &Ctx<'_>, obj: &Arc<Object>) {
    let Role::Leader(busy) = cx.shared.revalidations.join(cx.key()) else {
        return; // already being revalidated
    };
    let shared = Arc::clone(cx.shared);
    let obj = Arc::clone(obj);
    let req = bodyless_get(cx.req);
    let mode = cx.mode;
    let client = cx.client;
    let reach = cx.reach.clone();
    let target = cx.target.clone();
    tokio::spawn(async move {
        let _busy = busy;
        let cond = trove_http::validation::conditional_headers(&obj.head.headers);
        let born = born(&shared);
        let sent = fetch::send(
            &shared,
            Outgoing {
                req: &req,
                target: &target,
                mode,
                client,
                reach: &reach,
                conditionals: Conditionals::Strip,
                extra: Some(&cond),
                body: OriginRequestBody::empty(),
                retry: Retry::Allowed,
                interim: None,
            },
        )
        .await;
        let Ok(resp) = sent else { return };
        let rules = shared.rules(mode);
        let mut headers =
            respond::clean_response_headers(&resp.headers, &shared.via, resp.response_time);
        let (labels, tags) = origin_labels(&shared, &target, &mut headers, born);
        let head = response_head(&resp, &headers);
        if resp.status == StatusCode::NOT_MODIFIED {
            // Not if the object was invalidated since the request went out.
            if respond::answers(&obj, &headers) && !is_dead(&shared, &obj) {
                let mut fresh = respond::freshened_head(&obj, &head, rules);
                fresh.labels = obj.head.labels.reborn(born);
                freshen(&shared, &obj, fresh);
            }
            fetch::discard(resp).await;
            return;
        }
        let core = Request::new(&req.method, &req.headers);
        let max = shared.store.max_object();
        match respond::after_fetch(core, target.key(), &head, rules, Fwd::Stale, max) {
            OnResponse::Store { mut object, .. } => match shared.store.insert({
                object.head.labels = labels;
                *object
            }) {
                Ok(obj) => {
                    if is_dead(&shared, &obj) {
                        shared.store.remove_object(&obj, Removal::Purged);
                    }
                    crate::manage::remember_tags(&shared, &tags);
                    fetch::spawn_fill(&shared, resp, obj)
                }
                Err(_) => fetch::discard(resp).await,
            },
            OnResponse::Pass { .. } => fetch::discard(resp).await,
        }
    });
}

/// Requests the cache does not answer (unsafe or uncacheable methods): sent on with their
/// body, and stored responses they may have changed invalidated (RFC 9111 §4.4).
///
/// A body up to `[limits] client_body_buffer` is read whole before an origin connection is
/// taken, so a client trickling it holds nothing but its own connection until it is cut off
/// (`client::body`'s deadline). A larger body streams up as it arrives, which holds an
/// origin connection for as long as the client takes: it needs one of the origin's upload
/// slots first (`[origin_pool] max_uploads_per_origin`), so uploads can never take every
/// connection from the misses. Buffering every body instead (nginx spools them to disk)
/// would need memory or a disk per upload; streaming every body would let slow uploads
/// starve the origin; this bounds both.
async fn pass<R: AsyncRead + Unpin>(cx: &Ctx<'_>, body: &mut RequestBody<'_, R>) -> Reply {
    let cap = cx.shared.settings.limits.client_body_buffer;
    // Read up to `cap` bytes, unless the declared length is already more.
    let mut held: Vec<Bytes> = Vec::new();
    let mut held_len = 0u64;
    let whole = match body.declared_len() {
        Some(n) if n > cap => false,
        _ => loop {
            match body.next().await {
                Ok(Some(b)) => {
                    held_len += b.len() as u64;
                    held.push(b);
                    if held_len > cap {
                        break false;
                    }
                }
                Ok(None) => break true,
                Err(e) => return body_failed(cx, e),
            }
        },
    };
    let mut slot = None;
    let (mut tx, origin_body) = if whole {
        (
            None,
            OriginRequestBody::full(join(std::mem::take(&mut held))),
        )
    } else {
        let first = cx.target.upstreams.iter().next();
        match first {
            Some(up) => match cx.shared.pool.upload_slot(up).await {
                Ok(s) => slot = Some(s),
                // Shed (TCP_SHED, counted when the reply is recorded).
                Err(e) => return failed(cx, None, Fwd::Method, Outcome::Miss, &e.into()).closing(),
            },
            None => {
                return failed(
                    cx,
                    None,
                    Fwd::Method,
                    Outcome::Miss,
                    &OriginError::Protocol("no upstream").into(),
                )
            }
        }
        let len = match cx.req.framing {
            Framing::Length(n) => Some(n),
            _ => None,
        };
        let (tx, b) = body_channel(len);
        (Some(tx), b)
    };
    let idempotent = matches!(
        cx.req.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    );
    let born = cx.born();
    let send = fetch::send(
        cx.shared,
        Outgoing {
            req: cx.req,
            target: cx.target,
            mode: cx.mode,
            client: cx.client,
            reach: &cx.reach,
            conditionals: Conditionals::Keep,
            extra: None,
            body: origin_body,
            retry: if idempotent && held_len == 0 && tx.is_none() {
                Retry::Allowed
            } else {
                Retry::No
            },
            interim: cx.interim.map(InterimSlot::queue),
        },
    );
    // The pump owns its own sender and drops it when the body ends, which ends the body
    // sent to the origin; `tx` stays here to abort that body if the client's fails. It
    // holds the upload slot until the whole body has gone up.
    let pump_tx = tx.clone();
    let pump = async move {
        let _slot = slot;
        let Some(pump_tx) = pump_tx else {
            return Ok(());
        };
        for b in held {
            if pump_tx.send(Ok(b)).await.is_err() {
                return Ok(());
            }
        }
        loop {
            match body.next().await {
                Ok(Some(b)) => {
                    if pump_tx.send(Ok(b)).await.is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => {
                    drop(pump_tx);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    };
    tokio::pin!(send);
    tokio::pin!(pump);
    // The origin may answer (or fail) before the client has sent the whole body: then stop
    // reading the client rather than wait on it.
    let mut pumped = None;
    let resp = loop {
        tokio::select! {
            r = &mut send => break r,
            p = &mut pump, if pumped.is_none() => {
                match p {
                    Err(e) => {
                        if let Some(tx) = &tx {
                            let _ = tx.try_send(Err(std::io::Error::other(e)));
                        }
                    }
                    // The whole body is on its way: let the channel close.
                    Ok(()) => drop(tx.take()),
                }
                pumped = Some(p);
            }
        }
    };
    if let Some(Err(e)) = pumped {
        return body_failed(cx, e);
    }
    let unfinished = pumped.is_none() && tx.is_some();
    if unfinished {
        // Make sure the origin never takes a cut-short body for a complete one.
        if let Some(tx) = &tx {
            let _ = tx.try_send(Err(std::io::Error::other("client body abandoned")));
        }
    }
    let reply = match resp {
        Err(e) => failed(cx, None, Fwd::Method, Outcome::Miss, &e),
        Ok(resp) => {
            for key in respond::invalidations(&cx.req.method, cx.key(), resp.status, &resp.headers)
            {
                cx.shared.store.remove(&key, Removal::Invalidated);
            }
            let mut headers =
                respond::clean_response_headers(&resp.headers, &cx.shared.via, resp.response_time);
            let labels = origin_labels(cx.shared, cx.target, &mut headers, born);
            let head = response_head(&resp, &headers);
            let max = cx.shared.store.max_object();
            let verdict = respond::after_pass(cx.core(), cx.key(), &head, cx.rules(), max);
            carry_out(cx, resp, headers, verdict, None, Outcome::Miss, labels)
        }
    };
    if unfinished {
        reply.closing()
    } else {
        reply
    }
}

/// The pieces of a body as one buffer (no copy for a body that came in one piece).
fn join(mut pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() <= 1 {
        return pieces.pop().unwrap_or_default();
    }
    let mut all = bytes::BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for p in &pieces {
        all.extend_from_slice(p);
    }
    all.freeze()
}

/// The client's request body could not be read: too slow (408) or malformed (400). The
/// connection closes, since the rest of the body can't be told from a next request.
fn body_failed(cx: &Ctx<'_>, e: BodyReadError) -> Reply {
    let status = e.status();
    // A client that went away mid-body sent nothing malformed: its request was a miss the
    // client abandoned (logged `TCP_MISS_ABORTED`, counted with the aborts by the
    // connection, which knows it went away).
    if matches!(e, BodyReadError::Closed | BodyReadError::Io) {
        return Reply::simple(status, Outcome::Miss, &e.to_string()).closing();
    }
    let counter = if status == StatusCode::REQUEST_TIMEOUT {
        &cx.shared.metrics.body_timeouts
    } else {
        &cx.shared.metrics.bad_requests
    };
    counter.fetch_add(1, Ordering::Relaxed);
    Reply::simple(status, Outcome::None, &e.to_string()).closing()
}

/// Request fields of a `PURGE` on the proxy port: tags to invalidate instead of the URL
/// (also Varnish xkey's `xkey-purge` and `xkey-softpurge`), a named cache, the URL as a
/// prefix, and soft instead of hard.
pub mod purge_fields {
    pub const TAG: &str = "trove-purge-tag";
    pub const CACHE: &str = "trove-purge-cache";
    pub const PREFIX: &str = "trove-purge-prefix";
    pub const SOFT: &str = "trove-purge-soft";
    pub const XKEY: &str = "xkey-purge";
    pub const XKEY_SOFT: &str = "xkey-softpurge";
}

/// `PURGE`, for clients the purge ACL allows: removes every stored variant of the URL, or
/// with the [`purge_fields`] invalidates tags, a named cache or a prefix, hard or soft,
/// exactly as the admin API does (`crate::manage`).
async fn purge(cx: &Ctx<'_>) -> Reply {
    use crate::manage;
    use purge_fields as pf;
    if !cx.shared.purge_acl.allows(cx.client.ip) {
        return Reply::simple(
            StatusCode::FORBIDDEN,
            Outcome::Denied,
            "PURGE not allowed from this address",
        );
    }
    let h = &cx.req.headers;
    let flag = |name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"))
    };
    let words = |name: &str| -> Vec<String> {
        h.get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split([' ', ',', '\t']))
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect()
    };
    // A field that names tags (or a cache) but is empty is a mistake, such as an unset
    // variable in a script: falling back to a purge of the URL would do something else.
    for name in [pf::TAG, pf::XKEY, pf::XKEY_SOFT, pf::CACHE] {
        if h.contains_key(name) && words(name).is_empty() {
            return Reply::simple(
                StatusCode::BAD_REQUEST,
                Outcome::Purge,
                &format!("{name} is empty: name at least one"),
            );
        }
    }
    let soft = flag(pf::SOFT) || h.contains_key(pf::XKEY_SOFT);
    let mode = if soft {
        trove_api::Mode::Soft
    } else {
        trove_api::Mode::Hard
    };
    let mut tags = words(pf::TAG);
    tags.extend(words(pf::XKEY));
    tags.extend(words(pf::XKEY_SOFT));
    let cache = h
        .get(pf::CACHE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let calls: Vec<trove_api::Invalidate> = if !tags.is_empty() {
        tags.into_iter()
            .map(|t| trove_api::Invalidate {
                tag: Some(t),
                mode,
                ..Default::default()
            })
            .collect()
    } else if let Some(c) = cache {
        vec![trove_api::Invalidate {
            cache: Some(c),
            mode,
            ..Default::default()
        }]
    } else if flag(pf::PREFIX) {
        vec![trove_api::Invalidate {
            prefix: Some(cx.key().to_string()),
            mode,
            ..Default::default()
        }]
    } else {
        vec![trove_api::Invalidate {
            url: Some(cx.key().to_string()),
            mode,
            ..Default::default()
        }]
    };
    // Checked whole before anything is applied: a bad tag among good ones applies none.
    for c in &calls {
        if let Some(t) = &c.tag {
            if let Err(e) = manage::check_tags(&cx.shared.settings.tags, std::slice::from_ref(t)) {
                return Reply::simple(e.status(), Outcome::Purge, &e.to_string());
            }
        }
    }
    let now = fetch::now();
    let mut last = None;
    for c in &calls {
        match manage::invalidate(cx.shared, c, now) {
            Ok(ack) => last = Some(ack),
            Err(e) => return Reply::simple(e.status(), Outcome::Purge, &e.to_string()),
        }
    }
    let Some(ack) = last else {
        return Reply::simple(StatusCode::BAD_REQUEST, Outcome::Purge, "nothing to purge");
    };
    // The rules are numbered in order: the last one durable means all of them are.
    if let Err(e) = manage::durable(cx.shared, ack.seq).await {
        return Reply::simple(e.status(), Outcome::Purge, &e.to_string());
    }
    match ack.removed {
        // A hard purge of a URL says whether anything was stored, as it always has.
        Some(0) if ack.kind == "url" && mode == trove_api::Mode::Hard => Reply::simple(
            StatusCode::NOT_FOUND,
            Outcome::Purge,
            "nothing stored for this URL",
        ),
        Some(n) if ack.kind == "url" && mode == trove_api::Mode::Hard => Reply::simple(
            StatusCode::OK,
            Outcome::Purge,
            &format!("purged {n} stored response(s)"),
        ),
        _ => Reply::simple(
            StatusCode::OK,
            Outcome::Purge,
            &format!(
                "invalidated ({} {}, {} call(s)), seq {}",
                ack.kind,
                mode_str(mode),
                calls.len(),
                ack.seq
            ),
        ),
    }
}

fn mode_str(m: trove_api::Mode) -> &'static str {
    match m {
        trove_api::Mode::Hard => "hard",
        trove_api::Mode::Soft => "soft",
    }
}
