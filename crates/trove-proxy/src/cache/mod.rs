//! The request path over the network: carries out the cache core's request flow
//! ([`trove_cache::flow`], where every verdict is made and the state diagram is drawn) with
//! real sockets. The driver decides nothing; it does what the core can't: look up
//! (opening the disk tier), wait on a collapsed fetch, send to the origin, fill a stored
//! body in the background, stream the reply.
//!
//! ```text
//! resolve (target, by the connection) ─► handle ─► destination guard ─► run(Flow)
//! run: loop { command = flow.next(event); event = carry out command } until an end:
//!      Serve (deliver stored) │ Forward (pass_through) │ Respond │ Fail
//! ```
//!
//! Every path ends in a [`Reply`] whose [`Outcome`] the access log and metrics print.

mod answer;
pub mod collapse;
mod deliver;
mod detach;
mod fetch;
pub(crate) mod headers;
mod labels;
mod owner;
mod purge;
mod range;
pub mod target;
mod tier;
mod upload;

use std::sync::Arc;

use http::header;
use http::{HeaderMap, Method, StatusCode};
use trove_cache::decide::BodyState;
use trove_cache::flow::{Answer, Command, Env, Event, Fields, Flow, Guard};
use trove_cache::{partial, Conditionals, Outcome, Request, Tier, CACHE_STATUS};
use trove_store::{FileBody, Lower, Object, Probe};

use crate::client::body::{ClientBody, NoBody};
use crate::client::head::RequestHead;
use crate::client::info::ConnInfo;
use crate::destination::{Addrs, Blocked, ClientClass, Reach};
use crate::origin::{Failed, InterimSlot, OriginError, OriginRequestBody, OriginResponse};
use crate::reply::{DiskReply, Reply, ReplyBody};
use crate::settings::Mode;
use crate::state::Shared;
use crate::upstream::Chooser;
use answer::{destination_refused, fail, pass_through};
use collapse::{Collapsed, Leader, Role};
use detach::{bodyless_get, detach};
use fetch::{Outgoing, Retry};
use headers::Client;
use labels::OriginLabels;
pub use purge::purge_fields;
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
    /// The key's owner when it is another node of the cluster (shard mode).
    owner: Option<&'a trove_cluster::Node>,
}

impl Ctx<'_> {
    fn core(&self) -> Request<'_> {
        Request::new(&self.req.method, &self.req.headers)
    }

    fn key(&self) -> &str {
        self.target.key()
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
                absolute_form: false,
            },
        )
        .await
    }
}

/// Handles one request, whose target was resolved ([`target::resolve`]), and returns the
/// reply to write.
pub async fn handle<B: ClientBody>(
    shared: &Arc<Shared>,
    req: &RequestHead,
    target: &Target,
    info: ConnInfo,
    body: &mut B,
    interim: Option<&InterimSlot>,
) -> Reply {
    let body_state = if body.is_done() {
        BodyState::Empty
    } else {
        BodyState::Present
    };
    let client = Client::of(info);
    let class = shared.destinations.class(client.ip);
    let mut cx = Ctx {
        shared,
        req,
        target,
        mode: info.mode,
        client,
        // The destination guard fills in what it checked (`Command::Guard`).
        reach: Reach {
            class,
            checked: None,
        },
        interim,
        owner: None,
    };
    let mut flow = Flow::new(
        Request::new(&req.method, &req.headers),
        target.key(),
        body_state,
    );
    // Shard mode: a key another node owns is asked of it, unless the request came from a
    // node already (one hop at most, whatever the two think of each other).
    if let Some(cluster) = &shared.cluster {
        if !req.headers.contains_key(trove_cluster::PEER_HEADER) {
            if let trove_cluster::Owner::Peer(node) = cluster.owner(target.key()) {
                cx.owner = Some(node);
                flow = flow.owned_elsewhere();
            }
        }
    }
    // Not read the cluster's invalidations up to date since the start: nothing here is
    // proven valid yet (`crate::feed`).
    if shared.feed.as_ref().is_some_and(|f| !f.serves_hits()) {
        flow = flow.bypassed();
    }
    run(&mut cx, &mut flow, Some(body)).await
}

/// Carries out `flow`'s commands until it ends, and returns the reply. `body` is the
/// client's request body, sent up with a pass.
///
/// Every request's future holds this one's state, and a connection moves it into a box
/// per request, so it is kept small: the flow is borrowed (an argument taken by value is
/// held twice), the origin's answer is boxed, and the sends to the origin (several KiB of
/// future each, and only a miss waits on one) are boxed where they are awaited.
async fn run<B: ClientBody>(
    cx: &mut Ctx<'_>,
    flow: &mut Flow<'_>,
    mut body: Option<&mut B>,
) -> Reply {
    let shared = cx.shared;
    let store = &*shared.store;
    let labeler = OriginLabels {
        shared,
        target: cx.target,
    };
    let rules = shared.rules(cx.mode);
    let env = |now| Env {
        rules,
        store,
        now,
        via: &shared.via,
        labeler: &labeler,
    };
    let mut now = fetch::now();
    let mut variants = Variants::take();
    // The origin's answer in hand, who gave it, and the last failure to reach it.
    let mut held: Option<Box<OriginResponse>> = None;
    let mut peer: Option<String> = None;
    let mut failure: Option<Failed> = None;
    let mut leader: Option<Leader> = None;
    // A lower tier's handle for the key, and a body opened in its file.
    let mut lower: Option<Box<dyn Lower>> = None;
    let mut file: Option<Box<dyn FileBody>> = None;
    // The client's body was left unfinished: the connection closes after the reply.
    let mut unfinished = false;
    let mut cmd = flow.next(&env(now), Event::Start);
    loop {
        let ev = match cmd {
            // The store-only effects, carried out as for every driver.
            c @ (Command::Remove(..) | Command::Invalidate(_) | Command::Freshen(..)) => {
                let _ = c.on_store(store);
                Event::Done
            }
            // Anything that may reach the origin, a stored copy of it included, is checked
            // first. PURGE reaches nothing; its own ACL governs it. An operator's origin
            // and a local client are not checked (no future built for them).
            Command::Guard(Guard::Origin)
                if !needs_destination_check(cx.target, cx.reach.class) =>
            {
                Event::Allowed
            }
            Command::Guard(Guard::Origin) => {
                match check_destination(shared, cx.target, cx.reach.class).await {
                    Ok(checked) => {
                        if checked.is_some() {
                            // The name was resolved: time passed.
                            now = fetch::now();
                        }
                        cx.reach.checked = checked;
                        Event::Allowed
                    }
                    Err(refused) => return refused,
                }
            }
            Command::Guard(Guard::Purge) => {
                if !shared.purge_acl.allows(cx.client.ip) {
                    return Reply::simple(
                        StatusCode::FORBIDDEN,
                        Outcome::Denied,
                        "PURGE not allowed from this address",
                    );
                }
                Event::Allowed
            }
            Command::Lookup => {
                // Where the lower tier's writer is, for the replayable trace (when on):
                // noted as the probe looks at the tier's index, between two of its
                // writer's steps.
                let probe = if shared.trace.enabled() {
                    crate::trace::note_memory(|| store.stats());
                    store.probe_noting(cx.key(), &mut || {
                        crate::trace::note_lower(|| store.lower_progress())
                    })
                } else {
                    store.probe(cx.key())
                };
                match probe {
                    // Not in memory, but a lower tier may hold it: the flow says what to
                    // open.
                    Probe::Lower(l) => {
                        lower = Some(l);
                        Event::Lower
                    }
                    Probe::Upper => {
                        variants.0.clear();
                        store.lookup_into(cx.key(), &mut variants.0);
                        Event::Found(&variants.0, Tier::Memory)
                    }
                }
            }
            Command::OpenFile => {
                let opened = match lower.take() {
                    Some(l) => tier::open_file(cx, l).await,
                    None => (None, None),
                };
                now = fetch::now();
                crate::trace::note_lower_now(now);
                lower = opened.0;
                match opened.1 {
                    Some((obj, body)) => {
                        file = Some(body);
                        Event::FileFound(Some(obj))
                    }
                    None => Event::FileFound(None),
                }
            }
            Command::Promote => {
                tier::promote(cx, lower.take()).await;
                now = fetch::now();
                crate::trace::note_lower_now(now);
                variants.0.clear();
                store.lookup_into(cx.key(), &mut variants.0);
                Event::Found(&variants.0, Tier::Disk)
            }
            Command::Memo => Event::Memo(shared.memo.lock().remembered(cx.key(), now)),
            Command::Join => match shared.fetches.join(cx.key()) {
                Role::Leader(l) => {
                    leader = Some(l);
                    Event::Leading
                }
                Role::Follower(w) => {
                    let limit = shared.settings.timeouts.origin_response;
                    let joined = tokio::time::timeout(limit, w.wait()).await;
                    now = fetch::now();
                    match joined {
                        Ok(Collapsed::Stored(obj)) => Event::Joined(Some(obj)),
                        _ => Event::Joined(None),
                    }
                }
            },
            Command::Send(s) => {
                // Asked of the key's owner once at most: after it failed, this node's own
                // sends go to the origin.
                let owner = if s.to_owner { cx.owner.take() } else { None };
                let sent = match (s.with_body, body.as_deref_mut()) {
                    (true, Some(b)) => match Box::pin(upload::send(cx, b)).await {
                        Ok((sent, left)) => {
                            unfinished = left;
                            sent
                        }
                        Err(reply) => return reply,
                    },
                    _ => match owner {
                        Some(owner) => Box::pin(cx.ask_owner(owner)).await,
                        None => Box::pin(cx.send(s.conditionals, s.extra.as_ref())).await,
                    },
                };
                now = fetch::now();
                match sent {
                    Ok(resp) => {
                        peer = Some(resp.upstream.authority());
                        let resp = held.insert(Box::new(resp));
                        Event::Answer(Answer {
                            status: resp.status,
                            headers: Fields::Lent(&resp.headers),
                            content_length: resp.content_length(),
                            request_time: resp.request_time,
                            response_time: resp.response_time,
                        })
                    }
                    // Refused at connect time (counted there): not an origin failure, so
                    // no stale copy and no 502.
                    Err(Failed {
                        error: OriginError::Refused(why),
                        ..
                    }) => return closing(destination_refused(why), unfinished),
                    // The owner failed: the flow serves it here; not the request's failure.
                    Err(f) if owner.is_some() => Event::Failed(f.error.failure()),
                    Err(f) => {
                        tracing::debug!(error = %f.error, "origin request failed");
                        let e = f.error.failure();
                        failure = Some(f);
                        Event::Failed(e)
                    }
                }
            }
            Command::Insert(obj, tags) => {
                let inserted = store.insert_shared(obj);
                if inserted.is_ok() {
                    crate::manage::remember_tags(shared, &tags);
                }
                Event::Inserted(inserted)
            }
            Command::Update(obj, head) => Event::Updated(store.update_meta(&obj, *head)),
            Command::FillAndWait(part) => {
                // Combining needs the whole part: read it in as it is stored.
                let mut arriving = part.body.reader(0);
                if let Some(resp) = held.take() {
                    fetch::spawn_fill(shared, *resp, Arc::clone(&part));
                }
                let mut whole = true;
                while let Some(piece) = arriving.next().await {
                    whole &= piece.is_ok();
                }
                now = fetch::now();
                Event::Arrived(whole && matches!(part.body.outcome(), Some(Ok(()))))
            }
            Command::Combine => Event::Combined(partial::combine(store, rules.policy, cx.key())),
            Command::Purge(p) => {
                // Where the lower tier's writer was: a `PURGE` of a URL answers by what
                // its removal found, on disk too, which depends on how far the writer had
                // got (a replay puts its own there).
                if shared.trace.enabled() {
                    crate::trace::note_lower(|| store.lower_progress());
                    crate::trace::note_memory(|| store.stats());
                }
                let done = purge::apply(cx, &p).await;
                now = fetch::now();
                Event::Purged(done)
            }
            Command::Remember => {
                shared.memo.lock().remember(cx.key(), now);
                Event::Done
            }
            Command::Forget => {
                shared.memo.lock().forget(cx.key());
                Event::Done
            }
            Command::Discard => {
                if let Some(resp) = held.take() {
                    tokio::spawn(fetch::discard(*resp));
                }
                Event::Done
            }
            Command::Fill(obj) => {
                if let Some(resp) = held.take() {
                    fetch::spawn_fill(shared, *resp, obj);
                }
                Event::Done
            }
            Command::Revalidate(obj) => {
                background_revalidate(cx, &obj);
                Event::Done
            }
            Command::Serve(s) => {
                if s.touch {
                    store.touch(&s.obj);
                }
                if let Some(tier) = s.tier {
                    shared.metrics.count_tier_hit(tier);
                }
                if let Some(why) = s.status.stale_served() {
                    shared.metrics.count_stale(why);
                }
                let no_fields = HeaderMap::new();
                let view = if s.as_get {
                    Request::new(&Method::GET, &no_fields)
                } else {
                    cx.core()
                };
                let from = if s.from_origin { peer.take() } else { None };
                let obj = s.obj;
                // The client's reader exists before the fill starts, so the fill never runs
                // ahead of it as if nobody were reading.
                let mut reply = deliver::stored(&obj, view, now, s.outcome, s.status, from)
                    .with_detach(|| detach(cx, &obj));
                if let (true, Some(body), ReplyBody::Stored { .. }) =
                    (s.file, file.take(), &reply.body)
                {
                    // The whole body, from the tier's file (a 304 or 412 has none).
                    reply.body = ReplyBody::Disk(Box::new(DiskReply {
                        body,
                        metrics: Arc::clone(&shared.metrics),
                    }));
                }
                if s.fill {
                    if let Some(resp) = held.take() {
                        fetch::spawn_fill(shared, *resp, Arc::clone(&obj));
                    }
                }
                if let (true, Some(l)) = (s.publish, leader.take()) {
                    l.publish(Collapsed::Stored(obj));
                }
                for (name, value) in s.leader_fields.iter().flat_map(|h| h.iter()) {
                    reply.headers.append(name, value.clone());
                }
                return closing(reply, unfinished);
            }
            Command::Forward(f) => {
                let reply = match held.take() {
                    Some(resp) => pass_through(cx, *resp, f.headers, f.outcome, f.status),
                    None => Reply::simple(StatusCode::BAD_GATEWAY, f.outcome, "no answer"),
                };
                return closing(reply, unfinished);
            }
            Command::Respond(r) => {
                let mut reply = Reply::simple(r.status, r.outcome, &r.text);
                if let Some(cs) = r.cache_status {
                    reply.headers.insert(CACHE_STATUS, cs.header_value(None));
                }
                return closing(reply, unfinished);
            }
            Command::Fail {
                status,
                outcome,
                cache_status,
            } => return closing(fail(failure, status, outcome, cache_status), unfinished),
            Command::Finish => return Reply::simple(StatusCode::OK, Outcome::None, ""),
        };
        cmd = flow.next(&env(now), ev);
    }
}

thread_local! {
    /// Lists a lookup copies a key's variants into, kept per thread so a request costs no
    /// allocation for it (as `trove_cache::lookup` does for its own).
    static VARIANTS: std::cell::Cell<Vec<Arc<Object>>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A variants list taken from this thread's spare, given back (cleared) when dropped, on
/// whichever thread the request ends.
struct Variants(Vec<Arc<Object>>);

impl Variants {
    fn take() -> Variants {
        Variants(VARIANTS.with(|c| c.take()))
    }
}

impl Drop for Variants {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.0);
        v.clear();
        VARIANTS.with(|c| c.set(v));
    }
}

fn closing(reply: Reply, unfinished: bool) -> Reply {
    if unfinished {
        reply.closing()
    } else {
        reply
    }
}

/// stale-while-revalidate: the stale response was served; refresh it in the background
/// with a flow of its own, once per key at a time.
fn background_revalidate(cx: &Ctx<'_>, obj: &Arc<Object>) {
    let Role::Leader(busy) = cx.shared.revalidations.join(cx.key()) else {
        return; // already being revalidated
    };
    let shared = Arc::clone(cx.shared);
    let obj = Arc::clone(obj);
    let req = bodyless_get(cx.req);
    let (mode, client, reach) = (cx.mode, cx.client, cx.reach.clone());
    let target = cx.target.clone();
    tokio::spawn(async move {
        let _busy = busy;
        let mut cx = Ctx {
            shared: &shared,
            req: &req,
            target: &target,
            mode,
            client,
            reach,
            interim: None,
            owner: None,
        };
        let mut flow = Flow::background(Request::new(&req.method, &req.headers), target.key(), obj);
        run::<NoBody>(&mut cx, &mut flow, None).await;
    });
}

/// Whether the destination guard has anything to check: not for an operator's origin (an
/// `[[origin]]` route is trusted) nor for a local client.
fn needs_destination_check(target: &Target, class: ClientClass) -> bool {
    target.upstreams.chooser() != Chooser::Operator && class != ClientClass::Local
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
    if !needs_destination_check(target, class) {
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
