//! Persistent origin connections, shared by all clients.
//!
//! A connection is made here for every origin request, so this is also where the
//! destination guard (`crate::destination`) stands for a client-chosen origin (a
//! forward-proxy request): the name is resolved once (or the addresses the request was
//! already checked with are taken), every address is checked for the client's class, and
//! the connection goes to exactly those addresses. Names, the operator's upstreams'
//! included, are resolved through trove's caching resolver (`crate::resolver`), not per
//! connection.
//!
//! Idle connections are kept per origin *and per who chose it* ([`PoolKey`]): one opened
//! for an operator's route, one for a local client and one for a remote client are never
//! handed to one another. A pooled connection goes to an address that passed the checks
//! for its class when it was opened, and the policy doesn't change while trove runs, so
//! reusing it within its class needs no new check, whatever the name resolves to by then;
//! reusing it across classes would let a remote client ride a connection only a local
//! client could open. The per-origin connection limit stays shared: it protects the
//! origin, whoever asks.
//!
//! Per origin there is a connection limit and, inside it, a smaller one for requests that
//! stream their body up as the client sends it ([`Pool::upload_slot`]): such a request holds
//! its connection for as long as its client takes, so without a limit of their own a few
//! hundred slow uploads would hold every connection and every other miss would wait. Small
//! bodies never need a slot: they are read whole before a connection is taken
//! (`[limits] client_body_buffer`).
//!
//! Past the per-origin limit, requests wait in a queue bounded in time, and one that cannot
//! be served within the bound is shed at once (see [`OriginQueue`]).
//!
//! An `https` upstream's connections are made the same way, then a TLS handshake (bounded by
//! the connect timeout too) runs before hyper takes the connection: everything above, the
//! limits, the queue, the guard and reuse, applies unchanged. The upstream's TLS settings
//! are part of its identity ([`Upstream`]), so a connection is reused only under the
//! settings it was verified with; TLS sessions are resumed through the connector's cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use trove_cache::ShedReason;

use crate::destination::{self, Blocked, ClientClass, DestinationPolicy, Reach};
use crate::metrics::Metrics;
use crate::origin::error::OriginError;
use crate::origin::request_body::OriginRequestBody;
use crate::origin::stream::OriginStream;
use crate::resolver::Resolver;
use crate::upstream::{Chooser, Upstream};
use trove_tls::origin::Handshake;

/// Who a pooled connection was opened for: connections are reused only within one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Scope {
    Operator,
    Client(ClientClass),
}

/// What idle connections are kept under: the origin and who chose it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    upstream: Upstream,
    scope: Scope,
}

impl PoolKey {
    fn new(upstream: &Upstream, chooser: Chooser, reach: &Reach) -> PoolKey {
        PoolKey {
            upstream: upstream.clone(),
            scope: match chooser {
                Chooser::Operator => Scope::Operator,
                Chooser::Client => Scope::Client(reach.class),
            },
        }
    }
}

struct Idle {
    sender: SendRequest<OriginRequestBody>,
    permit: OwnedSemaphorePermit,
    since: Instant,
}

/// A connection checked out of the pool. Give it back with [`Pool::checkin`] once its
/// response body has been read to the end; dropping it closes the connection.
pub struct PooledConn {
    pub sender: SendRequest<OriginRequestBody>,
    pub reused: bool,
    permit: OwnedSemaphorePermit,
    key: PoolKey,
    /// Times the exchange for the origin's service-time estimate, however it ends.
    _held: Held,
}

/// How often idle connections are reaped, at most: the idle timeout, if shorter.
const REAP_EVERY: Duration = Duration::from_secs(1);
/// ... and at least (a tiny idle timeout must not make the reaper spin).
const REAP_EVERY_MIN: Duration = Duration::from_millis(10);

/// The reaper's period. Never zero (`tokio::time::interval` panics on zero), even for a
/// zero idle timeout, which the config refuses but a hand-built `Settings` may hold.
fn reap_period(idle_timeout: Duration) -> Duration {
    if idle_timeout.is_zero() {
        // Nothing is kept idle (see `checkin`); only forgotten limits are left to reap.
        REAP_EVERY
    } else {
        idle_timeout.clamp(REAP_EVERY_MIN, REAP_EVERY)
    }
}

/// One origin's connection limit and the queue of requests waiting at it.
///
/// Requests past the limit wait for a connection in turn (tokio's semaphore is fair). The
/// queue is bounded in time, not length: a request is turned away at once when the queue
/// ahead of it would take longer than `max_queue_wait` to drain, and turned away when it has
/// waited that long all the same. The drain rate is estimated from how long connections are
/// held per exchange (an exponentially weighted mean), so a slow origin gets a short queue
/// and a fast one a long queue, with no length to tune.
///
/// That bound is for bursts. A queue that *stands* — no request has found a connection free
/// for `overload.after` — is overload, not a burst, and a long line then only makes every
/// admitted request wait its length (the fixed bound gave admitted misses a ~1.5 s median
/// under steady 2× load). So, as CoDel tells a standing queue from a good one by how long it
/// has been since the queue last drained, a request arriving at a standing queue joins it
/// only when it is expected to get a connection within `overload.queue_wait`, or is next in
/// line; the rest are shed at once. The line left is short but never empty, so connections
/// never come free with nobody to take them, and the first request to find one free ends
/// the overload.
struct OriginQueue {
    slots: Arc<Semaphore>,
    /// Signalled when a connection comes back idle.
    returned: Notify,
    /// Requests waiting for a connection right now.
    waiting: AtomicUsize,
    /// Mean time a connection is held per exchange, in microseconds; 0 until measured.
    held_us: AtomicU64,
    /// When a request last found a connection free (idle, or a slot for a new one) without
    /// waiting, in microseconds since `epoch`.
    last_free_us: AtomicU64,
    epoch: Instant,
}

impl OriginQueue {
    fn new(limit: usize) -> OriginQueue {
        OriginQueue {
            slots: Arc::new(Semaphore::new(limit)),
            returned: Notify::new(),
            waiting: AtomicUsize::new(0),
            held_us: AtomicU64::new(0),
            last_free_us: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// A request found a connection without waiting: whatever stood in line, it drained.
    fn found_free(&self) {
        self.last_free_us
            .store(self.micros(Instant::now()), Ordering::Relaxed);
    }

    /// Whether the queue has stood for longer than `after`: no request has found a
    /// connection free for that long.
    fn standing(&self, after: Duration) -> bool {
        let since = self
            .micros(Instant::now())
            .saturating_sub(self.last_free_us.load(Ordering::Relaxed));
        since > after.as_micros() as u64
    }

    /// Folds one exchange's holding time into the mean (weight 1/8: a few dozen exchanges
    /// follow a change of pace, one odd exchange moves it little).
    fn observe_hold(&self, d: Duration) {
        let sample = (d.as_micros() as u64).max(1);
        let _ = self
            .held_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == 0 {
                    sample
                } else {
                    old - old / 8 + sample / 8
                })
            });
    }
}

/// The expected wait of a request that finds `ahead` requests already queued for an origin
/// with `limit` connections held `held` each on average: connections come free at
/// `limit / held` a second, and it needs the `ahead + 1`-th. `None` before any exchange has
/// been timed.
fn expected_wait(ahead: usize, limit: usize, held: Duration) -> Option<Duration> {
    if held.is_zero() || limit == 0 {
        return None;
    }
    let n = (ahead as u32).saturating_add(1);
    Some(held.saturating_mul(n) / limit.min(u32::MAX as usize) as u32)
}

/// Times one exchange on a checked-out connection; reports on drop.
struct Held {
    since: Instant,
    queue: Arc<OriginQueue>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.queue.observe_hold(self.since.elapsed());
    }
}

/// How a wait in an origin's queue ended well.
enum Queued {
    /// A slot for a new connection.
    Permit(OwnedSemaphorePermit),
    /// A connection that came back idle.
    Idle(PooledConn),
}

/// Counts a request in its origin's queue while it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// See the module docs.
pub struct Pool {
    idle: Mutex<HashMap<PoolKey, Vec<Idle>>>,
    /// Per origin: the connection limit and the queue at it.
    queues: Mutex<HashMap<Upstream, Arc<OriginQueue>>>,
    max_per_origin: usize,
    /// Per origin: how many requests may be streaming their body up at once.
    uploads: Mutex<HashMap<Upstream, Arc<Semaphore>>>,
    max_uploads: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
    max_queue_wait: Duration,
    overload: Overload,
    metrics: Arc<Metrics>,
    destinations: Arc<DestinationPolicy>,
    resolver: Resolver,
}

/// Where the pool's connections may go and how names are resolved.
pub struct Reachability {
    pub destinations: Arc<DestinationPolicy>,
    pub resolver: Resolver,
}

/// Held while a request streams its body to an origin (see [`Pool::upload_slot`]).
#[derive(Debug)]
pub struct UploadSlot {
    _permit: OwnedSemaphorePermit,
}

/// What a [`Pool`] is built with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolLimits {
    /// Connections to one origin (idle and busy) at most.
    pub max_per_origin: usize,
    /// Of those, connections carrying streamed request bodies at once (at least 1).
    pub max_uploads: usize,
    /// Idle connections are closed after this long; zero keeps none idle.
    pub idle_timeout: Duration,
    /// TCP connect to an origin.
    pub connect_timeout: Duration,
    /// Longest a request may wait for a connection when the origin has all it may have;
    /// past it (or expected past it), the request is shed.
    pub max_queue_wait: Duration,
    /// How a standing queue is told from a burst, and how short it is kept.
    pub overload: Overload,
}

/// The origin queue's overload rule (see [`OriginQueue`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overload {
    /// A queue no request has found a free connection in for this long is standing.
    pub after: Duration,
    /// At a standing queue, a request joins only if it is expected to get a connection
    /// within this (or is next in line).
    pub queue_wait: Duration,
}

impl Default for Overload {
    fn default() -> Self {
        Overload {
            after: Duration::from_millis(100),
            queue_wait: Duration::from_millis(20),
        }
    }
}

/// One origin as the status page shows it.
#[derive(Debug, Clone)]
pub struct OriginView {
    /// `host:port`.
    pub upstream: String,
    /// Connections open to it, busy and idle.
    pub open: usize,
    /// Requests waiting for a connection to it.
    pub waiting: usize,
    /// Mean time a connection is held per exchange; zero until measured.
    pub mean_exchange: Duration,
    /// Whether requests are waiting at a queue that has stood past `overload.after` (so
    /// only a short line is admitted).
    pub overloaded: bool,
}

impl Pool {
    /// Every origin the pool has a queue for (those used lately), by name.
    pub fn origins(&self) -> Vec<OriginView> {
        let mut out: Vec<OriginView> = self
            .queues
            .lock()
            .iter()
            .map(|(u, q)| OriginView {
                upstream: u.authority(),
                open: self
                    .max_per_origin
                    .saturating_sub(q.slots.available_permits()),
                waiting: q.waiting.load(Ordering::Relaxed),
                mean_exchange: Duration::from_micros(q.held_us.load(Ordering::Relaxed)),
                overloaded: q.waiting.load(Ordering::Relaxed) > 0
                    && q.standing(self.overload.after),
            })
            .collect();
        out.sort_by(|a, b| a.upstream.cmp(&b.upstream));
        out
    }

    /// What this pool was built with.
    pub fn limits(&self) -> PoolLimits {
        PoolLimits {
            max_per_origin: self.max_per_origin,
            max_uploads: self.max_uploads,
            idle_timeout: self.idle_timeout,
            connect_timeout: self.connect_timeout,
            max_queue_wait: self.max_queue_wait,
            overload: self.overload,
        }
    }

    /// Must be called inside a tokio runtime (it starts the reaper).
    pub fn new(limits: PoolLimits, metrics: Arc<Metrics>, reach: Reachability) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            idle: Mutex::new(HashMap::new()),
            queues: Mutex::new(HashMap::new()),
            max_per_origin: limits.max_per_origin,
            uploads: Mutex::new(HashMap::new()),
            max_uploads: limits.max_uploads.max(1),
            idle_timeout: limits.idle_timeout,
            connect_timeout: limits.connect_timeout,
            max_queue_wait: limits.max_queue_wait,
            overload: limits.overload,
            metrics,
            destinations: reach.destinations,
            resolver: reach.resolver,
        });
        // Close idle connections that outlived the timeout even when nobody asks for them.
        let weak = Arc::downgrade(&pool);
        let mut tick = tokio::time::interval(reap_period(limits.idle_timeout));
        tokio::spawn(async move {
            loop {
                tick.tick().await;
                let Some(pool) = weak.upgrade() else { break };
                pool.reap();
            }
        });
        pool
    }

    fn reap(&self) {
        let now = Instant::now();
        let mut idle = self.idle.lock();
        for conns in idle.values_mut() {
            conns.retain(|c| {
                now.duration_since(c.since) < self.idle_timeout && !c.sender.is_closed()
            });
        }
        idle.retain(|_, v| !v.is_empty());
        // Forget queues of origins with nothing open or waiting, so a forward proxy that has
        // talked to many hosts does not keep an entry for each.
        self.queues.lock().retain(|origin, q| {
            q.slots.available_permits() < self.max_per_origin
                || q.waiting.load(Ordering::Relaxed) > 0
                || idle.keys().any(|k| k.upstream == *origin)
        });
        self.uploads
            .lock()
            .retain(|_, sem| sem.available_permits() < self.max_uploads);
    }

    /// A slot for a request about to stream its body to `key` as its client sends it; held
    /// until the whole body has gone up. Waits up to the connect timeout; then the request
    /// is shed.
    pub async fn upload_slot(&self, key: &Upstream) -> Result<UploadSlot, OriginError> {
        let sem = Arc::clone(
            self.uploads
                .lock()
                .entry(key.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(self.max_uploads))),
        );
        match tokio::time::timeout(self.connect_timeout, sem.acquire_owned()).await {
            Ok(Ok(p)) => Ok(UploadSlot { _permit: p }),
            _ => Err(OriginError::Shed(ShedReason::UploadLimit)),
        }
    }

    fn queue(&self, key: &Upstream) -> Arc<OriginQueue> {
        Arc::clone(
            self.queues
                .lock()
                .entry(key.clone())
                .or_insert_with(|| Arc::new(OriginQueue::new(self.max_per_origin))),
        )
    }

    /// A usable idle connection to `key`, if any.
    async fn take_idle(&self, key: &PoolKey, queue: &Arc<OriginQueue>) -> Option<PooledConn> {
        loop {
            let mut c = {
                let mut idle = self.idle.lock();
                idle.get_mut(key).and_then(|v| v.pop())
            }?;
            if c.since.elapsed() >= self.idle_timeout || c.sender.is_closed() {
                continue;
            }
            // A pooled connection the origin closed meanwhile fails here, not mid-request.
            if c.sender.ready().await.is_ok() {
                self.metrics.origin_reused.fetch_add(1, Ordering::Relaxed);
                if key.upstream.is_tls() {
                    self.metrics
                        .origin_tls_reused
                        .fetch_add(1, Ordering::Relaxed);
                }
                return Some(PooledConn {
                    sender: c.sender,
                    reused: true,
                    permit: c.permit,
                    key: key.clone(),
                    _held: Held {
                        since: Instant::now(),
                        queue: Arc::clone(queue),
                    },
                });
            }
        }
    }

    /// An idle connection to `upstream` opened for the same chooser (and, for a client's
    /// choice, the same class of client: `reach`) if one is usable, else a new one, checked
    /// by the destination guard when the client chose it. At the per-origin limit the
    /// request queues for whichever comes first, a connection coming back idle or a slot
    /// freed by one closing, for `max_queue_wait` at most; and it is shed at once
    /// ([`OriginError::Shed`]) if the queue ahead of it is not expected to drain in time.
    pub async fn checkout(
        &self,
        upstream: &Upstream,
        chooser: Chooser,
        reach: &Reach,
    ) -> Result<PooledConn, OriginError> {
        let key = &PoolKey::new(upstream, chooser, reach);
        let queue = self.queue(upstream);
        if let Some(c) = self.take_idle(key, &queue).await {
            queue.found_free();
            return Ok(c);
        }
        let permit = match Arc::clone(&queue.slots).try_acquire_owned() {
            Ok(p) => {
                queue.found_free();
                p
            }
            Err(_) => match self.wait_in_queue(key, &queue).await? {
                Queued::Permit(p) => p,
                Queued::Idle(c) => return Ok(c),
            },
        };
        let held = Held {
            since: Instant::now(),
            queue: Arc::clone(&queue),
        };
        let stream = self.open(upstream, chooser, reach).await?;
        let (sender, conn) = http1::Builder::new()
            .allow_obsolete_multiline_headers_in_responses(true)
            .max_buf_size(256 * 1024)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|_| OriginError::Protocol("handshake failed"))?;
        let metrics = Arc::clone(&self.metrics);
        metrics.origin_opened.fetch_add(1, Ordering::Relaxed);
        metrics.origin_open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _ = conn.await;
            metrics.origin_open.fetch_sub(1, Ordering::Relaxed);
        });
        Ok(PooledConn {
            sender,
            reused: false,
            permit,
            key: key.clone(),
            _held: held,
        })
    }

    /// A new connection to `upstream`, checked like any other but neither pooled nor held
    /// against the origin's limit: for a connection that switches protocols
    /// (`crate::upgrade`), which it keeps for as long as the two ends talk.
    pub(crate) async fn open_unpooled(
        &self,
        upstream: &Upstream,
        chooser: Chooser,
        reach: &Reach,
    ) -> Result<OriginStream, OriginError> {
        let stream = self.open(upstream, chooser, reach).await?;
        self.metrics.origin_opened.fetch_add(1, Ordering::Relaxed);
        Ok(stream)
    }

    /// A new connection to `upstream`, TCP within the connect timeout, then for an `https`
    /// upstream the TLS handshake within the connect timeout again.
    async fn open(
        &self,
        upstream: &Upstream,
        chooser: Chooser,
        reach: &Reach,
    ) -> Result<OriginStream, OriginError> {
        let tcp =
            tokio::time::timeout(self.connect_timeout, self.connect(upstream, chooser, reach))
                .await
                .map_err(|_| OriginError::ConnectTimeout)??;
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &upstream.tls else {
            return Ok(OriginStream::Plain(tcp));
        };
        let handshake =
            tokio::time::timeout(self.connect_timeout, tls.connect(&upstream.host, tcp))
                .await
                .map_err(|_| OriginError::Tls(trove_tls::HandshakeError::timeout()))?;
        match handshake {
            Ok((stream, kind)) => {
                let counter = match kind {
                    Handshake::Full => &self.metrics.origin_tls_full,
                    Handshake::Resumed => &self.metrics.origin_tls_resumed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(OriginStream::Tls(Box::new(stream)))
            }
            Err(e) => Err(OriginError::Tls(e)),
        }
    }

    /// Waits at `key`'s limit; see [`Pool::checkout`].
    async fn wait_in_queue(
        &self,
        key: &PoolKey,
        queue: &Arc<OriginQueue>,
    ) -> Result<Queued, OriginError> {
        let ahead = queue.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&queue.waiting);
        let held = Duration::from_micros(queue.held_us.load(Ordering::Relaxed));
        if let Some(expected) = expected_wait(ahead, self.max_per_origin, held) {
            if expected > self.max_queue_wait {
                return Err(OriginError::Shed(ShedReason::QueueWait));
            }
            if ahead > 0
                && expected > self.overload.queue_wait
                && queue.standing(self.overload.after)
            {
                return Err(OriginError::Shed(ShedReason::Overload));
            }
        }
        let deadline = tokio::time::Instant::now() + self.max_queue_wait;
        loop {
            let notified = queue.returned.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(c) = self.take_idle(key, queue).await {
                return Ok(Queued::Idle(c));
            }
            if let Ok(p) = Arc::clone(&queue.slots).try_acquire_owned() {
                return Ok(Queued::Permit(p));
            }
            tokio::select! {
                p = Arc::clone(&queue.slots).acquire_owned() => match p {
                    Ok(p) => return Ok(Queued::Permit(p)),
                    Err(_) => return Err(OriginError::Shed(ShedReason::QueueTimeout)),
                },
                _ = &mut notified => continue,
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(OriginError::Shed(ShedReason::QueueTimeout))
                }
            }
        }
    }

    /// A new TCP connection to `upstream`: to the configured name's addresses for an
    /// operator's route; for a client's choice, to addresses the destination guard checked.
    async fn connect(
        &self,
        upstream: &Upstream,
        chooser: Chooser,
        reach: &Reach,
    ) -> Result<TcpStream, OriginError> {
        let (host, port) = (upstream.host.as_str(), upstream.port);
        let class = reach.class;
        let addrs = match (chooser, &reach.checked) {
            (Chooser::Operator, _) => destination::candidates(&self.resolver, host, port)
                .await
                .map_err(unresolved)?,
            // Checked when the request arrived; checked again here, where the connection is
            // made, so no path to a socket skips the guard.
            (Chooser::Client, Some(addrs)) => {
                if let Err(r) = self.destinations.check_all(addrs, class) {
                    return Err(self.refused(r));
                }
                addrs.clone()
            }
            (Chooser::Client, None) => {
                match self
                    .destinations
                    .resolve(&self.resolver, host, port, class)
                    .await
                {
                    Ok(addrs) => addrs,
                    Err(Blocked::Refused(r)) => return Err(self.refused(r)),
                    Err(Blocked::Resolve(e)) => return Err(unresolved(e)),
                }
            }
        };
        destination::connect(&addrs)
            .await
            .map_err(OriginError::Connect)
    }

    fn refused(&self, r: destination::Refusal) -> OriginError {
        self.metrics.count_refusal(r);
        OriginError::Refused(r)
    }

    /// Returns a connection whose exchange is complete, for reuse.
    pub fn checkin(&self, conn: PooledConn) {
        // With a zero idle timeout it would be stale at once: close it (dropping it frees
        // its slot for whoever waits on the limit).
        if self.idle_timeout.is_zero() || conn.sender.is_closed() {
            return;
        }
        let queue = self.queue(&conn.key.upstream);
        self.idle.lock().entry(conn.key).or_default().push(Idle {
            sender: conn.sender,
            permit: conn.permit,
            since: Instant::now(),
        });
        queue.returned.notify_one();
    }

    /// Idle connections held, for tests and the status page.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().values().map(Vec::len).sum()
    }
}

/// A name that did not resolve: a 502 (`Resolve`), or a 504 when the name servers did not
/// answer in time (`ResolveTimeout`).
fn unresolved(e: std::io::Error) -> OriginError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        OriginError::ResolveTimeout
    } else {
        OriginError::Resolve(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool with `limits`, the default guard and the system resolver.
    /// The limits the tests start from: four connections, one upload, 30 s idle, 5 s to
    /// connect, a 5 s queue bound and the default overload rule.
    fn limits() -> PoolLimits {
        PoolLimits {
            max_per_origin: 4,
            max_uploads: 1,
            idle_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_queue_wait: Duration::from_secs(5),
            overload: Overload::default(),
        }
    }

    fn pool_with(limits: PoolLimits) -> Arc<Pool> {
        Pool::new(
            limits,
            Arc::new(Metrics::default()),
            Reachability {
                destinations: Arc::new(DestinationPolicy::default()),
                resolver: Resolver::system(&Default::default(), Duration::from_secs(5)),
            },
        )
    }

    /// A pool for one local origin that accepts connections and never answers.
    async fn pool_and_origin(
        idle_timeout: Duration,
    ) -> (Arc<Pool>, Upstream, tokio::net::TcpListener) {
        let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let key = Upstream::http("127.0.0.1", origin.local_addr().unwrap().port());
        let pool = pool_with(PoolLimits {
            idle_timeout,
            ..limits()
        });
        (pool, key, origin)
    }

    /// A zero idle timeout (Settings built by hand, not through the config check) must
    /// not panic the reaper, and means no connection is kept idle at all.
    #[tokio::test]
    async fn zero_idle_timeout_keeps_nothing_idle_and_does_not_panic() {
        let (pool, key, _origin) = pool_and_origin(Duration::ZERO).await;
        let conn = pool
            .checkout(&key, Chooser::Operator, &anyone())
            .await
            .unwrap();
        assert!(!conn.reused);
        pool.checkin(conn);
        assert_eq!(
            pool.idle_count(),
            0,
            "nothing is pooled with a zero idle timeout"
        );
        let again = pool
            .checkout(&key, Chooser::Operator, &anyone())
            .await
            .unwrap();
        assert!(!again.reused);
        // Let the reaper task start (its interval used to panic on a zero period).
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        pool.checkin(again);
        assert_eq!(pool.idle_count(), 0);
    }

    #[test]
    fn expected_wait_is_the_queue_over_the_drain_rate() {
        let ms = Duration::from_millis;
        assert_eq!(
            expected_wait(0, 4, Duration::ZERO),
            None,
            "not yet measured"
        );
        // 4 connections held 400 ms each free one every 100 ms: the first in line waits
        // 100 ms, the tenth a second.
        assert_eq!(expected_wait(0, 4, ms(400)), Some(ms(100)));
        assert_eq!(expected_wait(9, 4, ms(400)), Some(ms(1000)));
        assert!(expected_wait(usize::MAX, 1, ms(400)).is_some(), "saturates");
    }

    #[test]
    fn hold_time_is_a_weighted_mean() {
        let q = OriginQueue::new(1);
        q.observe_hold(Duration::from_millis(800));
        assert_eq!(
            q.held_us.load(Ordering::Relaxed),
            800_000,
            "first sample taken as is"
        );
        q.observe_hold(Duration::ZERO);
        assert_eq!(q.held_us.load(Ordering::Relaxed), 700_000);
    }

    /// At the limit, a request waits `max_queue_wait` at most and is then shed; once the
    /// origin's holding time is known, requests that could not be reached in time are shed
    /// at once, without waiting.
    #[tokio::test]
    async fn a_full_origin_sheds_by_timeout_then_by_estimate() {
        let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let key = Upstream::http("127.0.0.1", origin.local_addr().unwrap().port());
        let pool = pool_with(PoolLimits {
            max_per_origin: 1,
            max_queue_wait: Duration::from_millis(20),
            ..limits()
        });
        let busy = pool
            .checkout(&key, Chooser::Operator, &anyone())
            .await
            .unwrap();
        match pool.checkout(&key, Chooser::Operator, &anyone()).await {
            Err(OriginError::Shed(ShedReason::QueueTimeout)) => {}
            other => panic!("expected a queue timeout, got {:?}", other.err()),
        }
        // An exchange held far longer than the bound: nobody can be served in time.
        pool.queue(&key).observe_hold(Duration::from_secs(60));
        match pool.checkout(&key, Chooser::Operator, &anyone()).await {
            Err(OriginError::Shed(ShedReason::QueueWait)) => {}
            other => panic!("expected an immediate shed, got {:?}", other.err()),
        }
        assert_eq!(pool.queue(&key).waiting.load(Ordering::Relaxed), 0);
        drop(busy);
        assert!(
            pool.checkout(&key, Chooser::Operator, &anyone())
                .await
                .is_ok(),
            "a free slot is taken"
        );
    }

    /// A queue that has stood past `overload.after` admits only a short line: the request
    /// next in line, or one expected to get a connection within `overload.queue_wait`;
    /// the others are shed at once. Before it stands, and again once a request finds a
    /// connection free, the burst bound (`max_queue_wait`) is the only one.
    #[tokio::test]
    async fn a_standing_queue_admits_only_a_short_line() {
        let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let key = Upstream::http("127.0.0.1", origin.local_addr().unwrap().port());
        let pool = pool_with(PoolLimits {
            max_per_origin: 1,
            max_queue_wait: Duration::from_secs(30),
            overload: Overload {
                after: Duration::from_millis(50),
                queue_wait: Duration::from_millis(20),
            },
            ..limits()
        });
        let queue = pool.queue(&key);
        // Exchanges take 100 ms: the one connection comes free ten times a second.
        queue.observe_hold(Duration::from_millis(100));
        let busy = pool
            .checkout(&key, Chooser::Operator, &anyone())
            .await
            .unwrap();
        let waiter = |pool: &Arc<Pool>| {
            let (pool, key) = (Arc::clone(pool), key.clone());
            tokio::spawn(async move {
                pool.checkout(&key, Chooser::Operator, &anyone())
                    .await
                    .map(|_| ())
            })
        };
        let in_line = |n: usize| {
            let q = Arc::clone(&queue);
            async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                while q.waiting.load(Ordering::Relaxed) != n {
                    assert!(Instant::now() < deadline, "{n} never waited");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        // A burst: the connection was just found free, so a line of three (expected to
        // wait up to 300 ms) is admitted.
        let burst: Vec<_> = (0..3).map(|_| waiter(&pool)).collect();
        in_line(3).await;
        assert!(!pool.origins()[0].overloaded);
        // The line stands: nobody has found the connection free for longer than 50 ms.
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(
            pool.origins()[0].overloaded,
            "{:?}",
            pool.origins()[0].waiting
        );
        let t = Instant::now();
        match pool.checkout(&key, Chooser::Operator, &anyone()).await {
            Err(OriginError::Shed(ShedReason::Overload)) => {}
            other => panic!("expected shed-overload, got {:?}", other.err()),
        }
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "shed at once, not after a wait"
        );
        assert_eq!(queue.waiting.load(Ordering::Relaxed), 3);
        // The line drains (the connections are given up, so each waiter gets a slot in
        // turn); then the first request in line at a standing queue is still admitted.
        drop(busy);
        for w in burst {
            assert!(w.await.unwrap().is_ok(), "the admitted burst is served");
        }
        let busy = pool
            .checkout(&key, Chooser::Operator, &anyone())
            .await
            .unwrap();
        queue.last_free_us.store(0, Ordering::Relaxed);
        assert!(queue.standing(Duration::from_millis(50)));
        let next = waiter(&pool);
        in_line(1).await;
        match pool.checkout(&key, Chooser::Operator, &anyone()).await {
            Err(OriginError::Shed(ShedReason::Overload)) => {}
            other => panic!("expected shed-overload, got {:?}", other.err()),
        }
        // A request that finds the connection free ends the overload.
        drop(busy);
        assert!(next.await.unwrap().is_ok());
        let free = pool.checkout(&key, Chooser::Operator, &anyone()).await;
        assert!(free.is_ok());
        assert!(!queue.standing(Duration::from_millis(50)));
    }

    #[test]
    fn reap_period_is_never_zero() {
        assert_eq!(reap_period(Duration::ZERO), REAP_EVERY);
        assert_eq!(reap_period(Duration::from_nanos(1)), REAP_EVERY_MIN);
        assert_eq!(
            reap_period(Duration::from_millis(200)),
            Duration::from_millis(200)
        );
        assert_eq!(reap_period(Duration::from_secs(3600)), REAP_EVERY);
    }

    /// Uploads have their own, smaller limit: while it is taken, another upload waits (and
    /// gives up at the connect timeout), but ordinary connections are still there.
    #[tokio::test]
    async fn uploads_have_a_limit_of_their_own() {
        let (_, key, _origin) = pool_and_origin(Duration::from_secs(30)).await;
        let pool = pool_with(PoolLimits {
            connect_timeout: Duration::from_millis(100),
            ..limits()
        });
        let slot = pool.upload_slot(&key).await.unwrap();
        assert!(matches!(
            pool.upload_slot(&key).await,
            Err(OriginError::Shed(ShedReason::UploadLimit))
        ));
        let conn = pool
            .checkout(&key, Chooser::Operator, &anyone())
            .await
            .unwrap();
        drop(slot);
        pool.upload_slot(&key).await.unwrap();
        drop(conn);
    }

    #[tokio::test]
    async fn nonzero_idle_timeout_still_pools() {
        let (pool, key, _origin) = pool_and_origin(Duration::from_secs(30)).await;
        let conn = pool
            .checkout(&key, Chooser::Operator, &anyone())
            .await
            .unwrap();
        pool.checkin(conn);
        assert_eq!(pool.idle_count(), 1);
        assert!(
            pool.checkout(&key, Chooser::Operator, &anyone())
                .await
                .unwrap()
                .reused
        );
    }

    /// An operator's route ignores who the client is.
    fn anyone() -> Reach {
        Reach {
            class: ClientClass::Remote,
            checked: None,
        }
    }

    fn client(class: ClientClass) -> Reach {
        Reach {
            class,
            checked: None,
        }
    }

    /// A connection to a loopback origin opened for a local client (or for an operator's
    /// route) is not handed to a remote client: the remote client's checkout makes its own
    /// connection, which the guard refuses.
    #[tokio::test]
    async fn idle_connections_are_not_shared_across_client_classes() {
        let (pool, key, _origin) = pool_and_origin(Duration::from_secs(30)).await;
        let local = pool
            .checkout(&key, Chooser::Client, &client(ClientClass::Local))
            .await
            .unwrap();
        pool.checkin(local);
        let operator = pool
            .checkout(&key, Chooser::Operator, &anyone())
            .await
            .unwrap();
        assert!(
            !operator.reused,
            "an operator's route never rides a client's connection"
        );
        pool.checkin(operator);
        assert_eq!(pool.idle_count(), 2);
        match pool
            .checkout(&key, Chooser::Client, &client(ClientClass::Remote))
            .await
        {
            Err(OriginError::Refused(destination::Refusal::Loopback)) => {}
            Err(e) => panic!("expected a loopback refusal, got {e}"),
            Ok(c) => panic!("a remote client got a connection (reused: {})", c.reused),
        }
        assert_eq!(pool.idle_count(), 2);
        assert!(
            pool.checkout(&key, Chooser::Client, &client(ClientClass::Local))
                .await
                .unwrap()
                .reused
        );
    }
}
