//! Going to the origin: building the request, and on the way back filling a stored body
//! while clients read it (read-while-write), or reading a passed-through body no further
//! than the abort policy allows once its client has gone.
//!
//! Memory per fetch: a stored body is the store's (charged to its budget as it grows); a
//! body that is not, or no longer, stored holds at most `[cache] stream_buffer` bytes plus
//! one origin read (hyper's buffer, at most 256 KiB), counted in `trove_body_buffered_bytes`.
//! A passed-through body (refused by the store from its head) is streamed chunk by chunk to
//! its one client and holds only hyper's buffer. How readers of one body that read at
//! different speeds are kept within that bound (the fill follows the fastest; a reader that
//! falls behind the buffer is resumed on a fetch of its own or cut off) is told in
//! `trove_store::Body`'s docs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use http::header;
use http::{HeaderMap, HeaderValue, Request, Version};
use parking_lot::Mutex;
use trove_cache::memo::PassMemo;
use trove_cache::{AbortPolicy, Conditionals, ShedReason, Storing};
use trove_store::{Body, BodyError, Object, Removal, Storage, StreamLimits};

use crate::cache::headers;
use crate::cache::target::Target;
use crate::client::head::RequestHead;
use crate::destination::Reach;
use crate::metrics::Metrics;
use crate::origin::{
    self, abandon, Failed, Interim, OriginError, OriginRequest, OriginRequestBody, OriginResponse,
};
use crate::settings::Mode;
use crate::state::Shared;

/// Every this many bytes the store re-reads a growing object's size.
const RECHARGE_EVERY: u64 = 1 << 20;

/// Whether a request may be sent again on a fresh connection if a pooled one was dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Idempotent and without a streamed body.
    Allowed,
    No,
}

/// What to send to the origin for a request.
pub struct Outgoing<'a> {
    pub req: &'a RequestHead,
    pub target: &'a Target,
    pub mode: Mode,
    pub client: super::headers::Client,
    /// Whom the origin connection is for (the destination guard's view of the client).
    pub reach: &'a Reach,
    pub conditionals: Conditionals,
    /// Fields the cache adds (a validation's conditional fields).
    pub extra: Option<&'a HeaderMap>,
    pub body: OriginRequestBody,
    pub retry: Retry,
    /// Where the origin's interim responses go: the client's, for a request made for it.
    pub interim: Option<&'a Arc<Interim>>,
    /// The target sent whole (`http://host/path`), not in origin form: to a cluster peer,
    /// so that it keys the object as this node did whatever its listener (TLS or not).
    pub absolute_form: bool,
}

/// Sends a request to its target's origin, or sheds it at once when too many wait already.
pub async fn send(shared: &Shared, out: Outgoing<'_>) -> Result<OriginResponse, Failed> {
    let host = HeaderValue::from_str(out.target.url.authority())
        .map_err(|_| OriginError::Protocol("cannot build request"))?;
    let h = headers::to_origin(
        shared.request_via(out.req.version),
        &out.req.headers,
        host,
        out.mode,
        out.client,
        out.conditionals,
        out.extra,
    );
    let mut builder = Request::builder()
        .method(out.req.method.clone())
        .uri(if out.absolute_form {
            out.target.url.key()
        } else {
            out.target.url.path_and_query()
        })
        .version(Version::HTTP_11);
    if let Some(hm) = builder.headers_mut() {
        *hm = h;
    }
    let (head, _) = builder
        .body(())
        .map_err(|_| OriginError::Protocol("cannot build request"))?
        .into_parts();
    let Ok(_slot) = Arc::clone(&shared.origin_slots).try_acquire_owned() else {
        return Err(OriginError::Shed(ShedReason::PendingLimit).into());
    };
    let t = &shared.settings.timeouts;
    let result = origin::send(
        &shared.pool,
        &shared.metrics,
        &out.target.upstreams,
        out.reach,
        OriginRequest {
            head,
            body: out.body,
            retryable: out.retry == Retry::Allowed,
            interim: out.interim.cloned(),
        },
        t.origin_response,
        t.origin_body,
    )
    .await;
    // A shed request never reached the origin (it is counted as shed), and a refused
    // destination has its own counter: neither is an origin error.
    if let Err(f) = &result {
        if !matches!(f.error, OriginError::Shed(_) | OriginError::Refused(_)) {
            shared.metrics.origin_errors.fetch_add(1, Ordering::Relaxed);
            if let Some(up) = &f.upstream {
                shared.metrics.origin_failures.record(up, &f.error);
            }
        }
    }
    if let Ok(resp) = &result {
        shared.metrics.origin_failures.record_ok(&resp.upstream);
    }
    // The last rule made when the answer is handed to the flow, which judges it against
    // the rules at once (a replay applies those up to it before handing the answer over).
    let rules = || shared.store.invalidations().map(|i| i.current());
    crate::trace::note_origin(result.as_ref().map_err(|f| f.error.failure()), rules);
    result
}

/// Starts filling the stored `obj` from `resp` in a background task, so any number of
/// clients can read it while it arrives.
pub fn spawn_fill(shared: &Shared, resp: OriginResponse, obj: Arc<Object>) {
    let store = Arc::clone(&shared.store);
    let c = &shared.settings.cache;
    let limits = StreamLimits {
        read_ahead: c.read_ahead,
        buffer: c.stream_buffer,
    };
    let abort = c.abort.policy();
    let metrics = Arc::clone(&shared.metrics);
    let memo = Arc::clone(&shared.memo);
    let trace = Arc::clone(&shared.trace);
    tokio::spawn(async move {
        let mut resp = resp;
        let fill = Fill {
            store: &*store,
            obj: &obj,
            limits,
            abort,
            metrics: &metrics,
            memo: &memo,
            traced: trace.enabled(),
        };
        // The replay stores the body when trove did (a client answered `304` or `HEAD`
        // may have asked again before it ended).
        if let Some(end) = fill.run(&mut resp).await {
            if let Some((at, lower)) = end.noted {
                trace.filled(&obj.key, end.ok, at, lower);
            }
        }
    });
}

struct Fill<'a> {
    store: &'a dyn Storage,
    obj: &'a Arc<Object>,
    limits: StreamLimits,
    abort: AbortPolicy,
    metrics: &'a Metrics,
    memo: &'a Mutex<PassMemo>,
    /// Whether the trace is on: then [`Fill::end`] notes when the body ended.
    traced: bool,
}

/// How a stored body ended.
struct Ended {
    /// Whole in the store, or failed and removed.
    ok: bool,
    /// When tracing: the time, and how many jobs the lower tier's writer had been given
    /// just before the end gave it its own, and just after.
    noted: Option<(SystemTime, Option<(u64, u64)>)>,
}

impl Fill<'_> {
    /// Ends the body `ok` or not, the moment noted for the trace first.
    fn end(&self, ok: bool) -> Ended {
        let queued = || self.store.lower_progress().map(|l| l.queued);
        let before = self.traced.then(|| (now(), queued()));
        if ok {
            self.store.recharge(self.obj);
        } else {
            self.store.remove_object(self.obj, Removal::Failed);
        }
        let noted = before.map(|(at, b)| (at, b.zip(queued())));
        Ended { ok, noted }
    }

    /// Copies the origin body into the stored body. Runs to the end even if the client that
    /// asked has gone, because the object is being stored; a body of unknown length is read
    /// no further than `stream_buffer` ahead of its fastest reader while anyone reads it, as
    /// it may yet outgrow the store. If it does (or is purged, evicted or replaced
    /// meanwhile) it leaves the store and keeps only `stream_buffer` bytes from then on,
    /// read `read_ahead` ahead of its fastest reader (see `trove_store::Body`); when no
    /// reader is left the abort policy decides whether to finish or stop.
    ///
    /// How the body ended in the store, or `None` if it was no longer the store's.
    async fn run(&self, resp: &mut OriginResponse) -> Option<Ended> {
        let body: &Arc<Body> = &self.obj.body;
        if body.expected_len().is_none() {
            body.set_paced(self.limits.buffer);
        }
        let max = self.store.max_object();
        let spool_above = self.store.spool_above();
        let mut since_recharge = 0u64;
        loop {
            match resp.next_chunk().await {
                Ok(Some(b)) => {
                    let n = b.len() as u64;
                    let grown = body.len() + n;
                    if grown > spool_above
                        && !body.is_unstored()
                        && !body.is_spooled()
                        && !self.store.spool(self.obj)
                    {
                        // Too large for memory, and no lower tier writes it as it arrives.
                        self.too_large(body);
                    }
                    if !body.is_unstored() && grown > max {
                        self.too_large(body);
                    }
                    if body.append(b).await.is_err() {
                        body.finish(Err(BodyError::NoReaders));
                        let received = body.len();
                        abandon(resp, self.abort, Storing::No, received, self.metrics).await;
                        return None;
                    }
                    since_recharge += n;
                    if since_recharge >= RECHARGE_EVERY && !body.is_unstored() {
                        since_recharge = 0;
                        if self.store.wants(self.obj) {
                            self.store.recharge(self.obj);
                        } else {
                            // Purged, evicted or replaced mid-transfer (and no lower tier
                            // takes it when complete): nobody new can find it, so read no
                            // faster than the clients still reading it.
                            self.unstore(body);
                        }
                    }
                }
                Ok(None) => {
                    if body.expected_len().is_some_and(|n| n != body.len()) {
                        // Shorter than promised: never keep it as complete.
                        body.finish(Err(BodyError::Incomplete));
                        return Some(self.end(false));
                    }
                    body.finish(Ok(()));
                    if body.is_unstored() {
                        return None;
                    }
                    return Some(self.end(true));
                }
                Err(_) => {
                    body.finish(Err(BodyError::Incomplete));
                    return Some(self.end(false));
                }
            }
        }
    }

    /// The body outgrew what the store takes: it leaves the store, bounded from now on.
    fn too_large(&self, body: &Body) {
        self.store.remove_object(self.obj, Removal::TooLarge);
        self.unstore(body);
        // Like a declared length over the limit: later misses for it pass the client's
        // Range and validators on.
        self.memo.lock().remember(&self.obj.key, now());
    }

    /// The body is no longer the store's: bound what it holds, and count it.
    fn unstore(&self, body: &Body) {
        body.set_unstored(self.limits, Some(Arc::clone(&self.metrics.body_buffered)));
    }
}

/// Reads a short origin body to its end and drops it (a 304's, say), so the connection can
/// be reused.
pub async fn discard(mut resp: OriginResponse) {
    let mut n = 0;
    while let Ok(Some(b)) = resp.next_chunk().await {
        n += b.len();
        if n > 64 * 1024 {
            break;
        }
    }
}

/// The time now, the one place the request path reads the wall clock for caching rules.
/// The first reading for a request is the time its lookup judged freshness at, which the
/// replayable trace records (`crate::trace`).
pub fn now() -> SystemTime {
    let t = SystemTime::now();
    crate::trace::note_now(t);
    t
}

/// The `Content-Length` an origin declared in `h`, if valid (`origin::send` has already
/// refused an invalid one).
pub fn content_length_header(h: &HeaderMap) -> Option<u64> {
    trove_http::content_length::parse_all(h.get_all(header::CONTENT_LENGTH))
        .ok()
        .flatten()
}
