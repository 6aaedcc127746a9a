//! The cluster's feed of invalidations (issue 24): what makes a purge on one node a purge on
//! every node.
//!
//! With `[cluster.bus]`, every invalidation this node accepts — `PURGE`, the admin API's
//! URL, tag, named-cache, prefix and ban invalidations, hard or soft, deletes — is applied
//! here and made durable here as before (`crate::manage`), then published to the cluster's
//! NATS JetStream stream (`trove_bus`) before the caller is answered: the acknowledgement
//! means the stream stored it. A call that can't be published is answered 503
//! `not-durable`: it applies on this node, not on the others, and the caller retries it.
//! With `wait`, the answer also waits (bounded) for every live node to say it applied it,
//! and names those that didn't.
//!
//! A task ([`spawn`]) reads the stream from this node's durable consumer and applies every
//! other node's invalidations through the same call (`manage::invalidate`), makes them
//! durable, keeps its position in the stream (`Invalidations::keep_feed_position`, beside
//! the disk tier's journal) and only then acknowledges and announces it.
//!
//! **After a start** the node serves no hits until it has read the stream up to date
//! (`until_current = "misses"`, the default; `"hits"` serves the cache as it is), because
//! another node may have purged objects it still holds: requests go to the origin with
//! `Cache-Status: fwd=bypass` ([`trove_cache::Flow::bypassed`]). A node with a disk tier
//! reads on from its kept position; one without (its cache starts empty, and it stores
//! nothing before it is current) from the stream's end. A node that can't reach NATS at
//! start-up stays so until it can, and says so (`GET /v1/cluster`, the status page,
//! `trove_cluster_bus_current`).
//!
//! **When the stream lost messages** the node never read (retention: `max_age`,
//! `max_bytes`), or was created anew (a NATS server that lost its store), the node drops
//! its whole cache (one rule matching every key, constant time) rather than serve what it
//! can't prove valid. The same happens when an invalidation from another node can't be
//! recorded here (a ban refused at this node's ban bound) or can't be read.
//!
//! **At run time** a lost connection changes nothing for serving (hits go on); invalidation
//! calls answer 503 until it is back; the consumer then resumes where it was, and the lag
//! is a metric (`trove_cluster_bus_lag`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use trove_api as api;
use trove_bus::{AppliedBoard, Bus, BusSettings, Delivery, Event};
use trove_store::invalidation::{FeedPosition, Mode, Selector};

use crate::manage::{self, ManageError};
use crate::state::{Current, Shared};

/// What travels on the stream: this as JSON (the envelope, signature and version are the
/// bus's), and for a put a newline and the body's bytes after it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Message {
    /// An invalidation or a delete, as the admin API takes it.
    Invalidate(api::Invalidate),
    /// A put (its body follows the JSON).
    Put(PutHead),
}

/// A put's all but its body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PutHead {
    url: String,
    status: u16,
    headers: Vec<(String, String)>,
    ttl_ms: Option<u64>,
    cache: Option<String>,
    tags: Vec<String>,
}

/// The largest put the bus carries: NATS's default `max_payload` (1 MiB) less room for the
/// envelope and the head.
pub const MAX_SHARED_PUT: usize = (1 << 20) - (64 << 10);

fn encode_put(put: &manage::Put) -> Result<Vec<u8>, String> {
    let head = PutHead {
        url: put.url.clone(),
        status: put.status,
        headers: put
            .headers
            .iter()
            .map(|(k, v)| {
                v.to_str()
                    .map(|v| (k.as_str().to_string(), v.to_string()))
                    .map_err(|_| format!("field {k} is not text"))
            })
            .collect::<Result<_, _>>()?,
        ttl_ms: put.ttl.map(|t| t.as_millis() as u64),
        cache: put.cache.clone(),
        tags: put.tags.clone(),
    };
    let mut out = serde_json::to_vec(&Message::Put(head)).map_err(|e| e.to_string())?;
    out.push(b'\n');
    out.extend_from_slice(&put.body);
    Ok(out)
}

/// A message's JSON and, for a put, its body.
fn decode(payload: &bytes::Bytes) -> Result<(Message, bytes::Bytes), String> {
    let end = payload
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(payload.len());
    let msg = serde_json::from_slice(&payload[..end]).map_err(|e| e.to_string())?;
    Ok((msg, payload.slice((end + 1).min(payload.len())..)))
}

fn put_of(head: PutHead, body: bytes::Bytes) -> Result<manage::Put, String> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in head.headers {
        let k = http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?;
        let v = http::HeaderValue::from_str(&v).map_err(|e| e.to_string())?;
        headers.append(k, v);
    }
    Ok(manage::Put {
        url: head.url,
        status: head.status,
        headers,
        body,
        ttl: head.ttl_ms.map(Duration::from_millis),
        cache: head.cache,
        tags: head.tags,
    })
}

/// This node's end of the feed; one for the life of the process (a reload keeps it; a
/// changed `[cluster.bus]` takes effect at the next start).
pub struct Feed {
    settings: BusSettings,
    hits_before_current: bool,
    bus: OnceLock<Bus>,
    board: OnceLock<Arc<AppliedBoard>>,
    /// Read up to date since the start.
    current: AtomicBool,
    /// The stream's epoch and the last sequence applied here.
    epoch: AtomicU64,
    applied: AtomicU64,
    published: AtomicU64,
    publish_failures: AtomicU64,
    applied_from_others: AtomicU64,
    gaps: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("node", &self.settings.node)
            .field("current", &self.current.load(Ordering::Relaxed))
            .field("applied", &self.applied.load(Ordering::Relaxed))
            .finish()
    }
}

impl Feed {
    pub fn new(settings: BusSettings, hits_before_current: bool) -> Feed {
        Feed {
            settings,
            hits_before_current,
            bus: OnceLock::new(),
            board: OnceLock::new(),
            current: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            published: AtomicU64::new(0),
            publish_failures: AtomicU64::new(0),
            applied_from_others: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    pub fn settings(&self) -> &BusSettings {
        &self.settings
    }

    /// Whether hits may be served now (see the module docs).
    pub fn serves_hits(&self) -> bool {
        self.hits_before_current || self.current.load(Ordering::Acquire)
    }

    /// Logs `what` (once while it repeats: a NATS server away is retried every 2 s) and
    /// keeps it for the status.
    fn note_error(&self, what: String) {
        let mut last = self.last_error.lock();
        if last.as_deref() != Some(what.as_str()) {
            tracing::warn!(node = %self.settings.node, "cluster bus: {what}");
            *last = Some(what);
        }
    }

    /// Publishes an invalidation this node accepted (and applied, and made durable), and
    /// returns its sequence in the stream, with the nodes of `wait_for` that had not applied
    /// it within `wait`. Fails as not durable when the stream did not store it.
    pub async fn publish(
        &self,
        call: &api::Invalidate,
        wait: Option<(Duration, Vec<String>)>,
    ) -> Result<(u64, Option<Vec<String>>), ManageError> {
        let fail = |why: String| {
            self.publish_failures.fetch_add(1, Ordering::Relaxed);
            ManageError::NotDurable(format!(
                "applied on this node, but the cluster's bus did not store it ({why}); the other nodes don't have it"
            ))
        };
        let payload = serde_json::to_vec(&Message::Invalidate(call.clone()))
            .map_err(|e| fail(e.to_string()))?;
        self.send(payload, wait, fail).await
    }

    /// Publishes `payload` (and waits, with `wait`); `fail` words a refusal.
    async fn send(
        &self,
        payload: Vec<u8>,
        wait: Option<(Duration, Vec<String>)>,
        fail: impl Fn(String) -> ManageError,
    ) -> Result<(u64, Option<Vec<String>>), ManageError> {
        let Some(bus) = self.bus.get() else {
            return Err(fail("not connected to NATS since the start".into()));
        };
        // Refused at once while the connection is down: a message handed to the client now
        // would wait in its buffer and could be stored after this call answered 503.
        if !bus.is_connected() {
            return Err(fail("not connected to NATS now".into()));
        }
        let r = match wait {
            None => bus.publish(payload).await.map(|seq| (seq, None)),
            Some((wait, nodes)) => bus
                .publish_and_wait(payload, &nodes, wait)
                .await
                .map(|o| (o.seq, Some(o.missing))),
        };
        match r {
            Ok(r) => {
                self.published.fetch_add(1, Ordering::Relaxed);
                Ok(r)
            }
            Err(e) => {
                let e = fail(e.to_string());
                self.note_error(e.to_string());
                Err(e)
            }
        }
    }

    /// Publishes a put this node accepted (and stored), for the nodes that may serve it:
    /// in replicate mode every node stores it, in shard mode its owner.
    pub async fn publish_put(&self, put: &manage::Put) -> Result<u64, ManageError> {
        let fail = |why: String| {
            self.publish_failures.fetch_add(1, Ordering::Relaxed);
            ManageError::NotDurable(format!(
                "stored on this node, but the cluster's bus did not store the put ({why}); the other nodes don't have it"
            ))
        };
        if put.body.len() > MAX_SHARED_PUT {
            return Err(ManageError::TooLarge(MAX_SHARED_PUT as u64));
        }
        let payload = encode_put(put).map_err(&fail)?;
        self.send(payload, None, fail).await.map(|(seq, _)| seq)
    }

    /// The feed as this node sees it (a round trip to NATS for the stream's last sequence,
    /// bounded by `request_timeout`).
    pub async fn status(&self) -> api::BusStatus {
        if let Some(bus) = self.bus.get() {
            // Raises the last sequence known, which the snapshot reads.
            bus.status().await;
        }
        self.snapshot()
    }

    /// The feed as last known (no round trip): for the status page.
    pub fn snapshot(&self) -> api::BusStatus {
        let applied = self.applied.load(Ordering::Acquire);
        let (connected, last_seq, rejected) = match self.bus.get() {
            Some(bus) => {
                let c = bus.counters();
                (bus.is_connected(), c.last_stream_seq, c.rejected())
            }
            None => (false, applied, 0),
        };
        let last_seq = last_seq.max(applied);
        let mut nodes: Vec<api::BusNode> = self
            .board
            .get()
            .map(|b| b.snapshot())
            .unwrap_or_default()
            .into_iter()
            .map(|(id, a)| api::BusNode {
                id,
                applied: a,
                lag: last_seq.saturating_sub(a),
            })
            .collect();
        if !nodes.iter().any(|n| n.id == self.settings.node) {
            nodes.push(api::BusNode {
                id: self.settings.node.clone(),
                applied,
                lag: last_seq.saturating_sub(applied),
            });
            nodes.sort_by(|a, b| a.id.cmp(&b.id));
        }
        api::BusStatus {
            connected,
            current: self.current.load(Ordering::Acquire),
            serving_hits: self.serves_hits(),
            last_seq,
            applied,
            lag: last_seq.saturating_sub(applied),
            published: self.published.load(Ordering::Relaxed),
            publish_failures: self.publish_failures.load(Ordering::Relaxed),
            applied_from_others: self.applied_from_others.load(Ordering::Relaxed),
            gaps: self.gaps.load(Ordering::Relaxed),
            rejected,
            nodes,
            last_error: self.last_error.lock().clone(),
        }
    }

    /// Prometheus lines (no round trip: the last sequences known).
    pub fn metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let applied = self.applied.load(Ordering::Acquire);
        let (connected, last, rejected) = match self.bus.get() {
            Some(bus) => {
                let c = bus.counters();
                (
                    bus.is_connected(),
                    c.last_stream_seq.max(applied),
                    c.rejected(),
                )
            }
            None => (false, applied, 0),
        };
        let gauge = |out: &mut String, n: &str, help: &str, v: u64| {
            let _ = write!(out, "# HELP {n} {help}\n# TYPE {n} gauge\n{n} {v}\n");
        };
        let counter = |out: &mut String, n: &str, help: &str, v: u64| {
            let _ = write!(out, "# HELP {n} {help}\n# TYPE {n} counter\n{n} {v}\n");
        };
        gauge(
            out,
            "trove_cluster_bus_connected",
            "Connected to a NATS server now.",
            connected as u64,
        );
        gauge(
            out,
            "trove_cluster_bus_current",
            "Read the invalidation stream up to date since the start (hits are served).",
            self.current.load(Ordering::Acquire) as u64,
        );
        gauge(
            out,
            "trove_cluster_bus_applied_seq",
            "The last stream sequence applied here.",
            applied,
        );
        gauge(
            out,
            "trove_cluster_bus_lag",
            "Messages in the invalidation stream not applied here yet (as last known).",
            last.saturating_sub(applied),
        );
        counter(
            out,
            "trove_cluster_bus_published_total",
            "Invalidations this node published to the stream.",
            self.published.load(Ordering::Relaxed),
        );
        counter(
            out,
            "trove_cluster_bus_publish_failures_total",
            "Invalidations the stream did not store (answered 503 not-durable).",
            self.publish_failures.load(Ordering::Relaxed),
        );
        counter(
            out,
            "trove_cluster_bus_applied_total",
            "Other nodes' invalidations applied here.",
            self.applied_from_others.load(Ordering::Relaxed),
        );
        counter(
            out,
            "trove_cluster_bus_gaps_total",
            "Times the cache was dropped because the stream lost messages never read here.",
            self.gaps.load(Ordering::Relaxed),
        );
        counter(
            out,
            "trove_cluster_bus_rejected_total",
            "Messages refused: unsigned, wrongly signed or malformed.",
            rejected,
        );
    }
}

/// Publishes `call` when the node has a feed: the ack gets the stream's sequence (and, with
/// `wait`, the live nodes that had not applied it). The caller applied it and made it
/// durable here first.
pub async fn share(
    shared: &Shared,
    call: &api::Invalidate,
    wait: Option<Duration>,
    ack: &mut api::Ack,
) -> Result<(), ManageError> {
    let Some(feed) = &shared.feed else {
        return Ok(());
    };
    let wait = wait.map(|w| {
        let nodes = shared.cluster.as_ref().map_or_else(Vec::new, |c| {
            c.status()
                .into_iter()
                .filter(|n| n.up && !n.me)
                .map(|n| n.id)
                .collect()
        });
        (w, nodes)
    });
    let (seq, missing) = feed.publish(call, wait).await?;
    ack.bus_seq = Some(seq);
    ack.not_applied_by = missing;
    Ok(())
}

/// Publishes a put when the node has a feed (the caller stored it here first); the ack gets
/// the stream's sequence. A put larger than the bus carries is refused (413) before it is
/// stored anywhere.
pub async fn share_put(
    shared: &Shared,
    put: &manage::Put,
    ack: &mut api::Ack,
) -> Result<(), ManageError> {
    let Some(feed) = &shared.feed else {
        return Ok(());
    };
    ack.bus_seq = Some(feed.publish_put(put).await?);
    Ok(())
}

/// Refuses, before anything is stored, a put the bus could not carry to the other nodes.
pub fn check_put_size(shared: &Shared, len: usize) -> Result<(), ManageError> {
    if shared.feed.is_some() && len > MAX_SHARED_PUT {
        return Err(ManageError::TooLarge(MAX_SHARED_PUT as u64));
    }
    Ok(())
}

/// Reads the feed for as long as trove runs: connects (retrying), then applies what the
/// stream holds past this node's position, and everything after. See the module docs.
pub fn spawn(current: Arc<Current>) {
    let Some(feed) = current.get().and_then(|s| s.feed.clone()) else {
        return;
    };
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        let bus = loop {
            match Bus::connect(feed.settings.clone()).await {
                Ok(bus) => break bus,
                Err(e) => {
                    feed.note_error(format!("connecting: {e} (hits wait until it is reached)"));
                    if current.get().is_none() {
                        return;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        };
        tracing::info!(node = %feed.settings.node, "cluster bus: connected");
        if let Ok(board) = bus.follow_applied().await {
            let _ = feed.board.set(board);
        }
        let _ = feed.bus.set(bus.clone());
        read(&current, &feed, &bus).await;
    });
}

/// Where to read from at the start: the kept position (a disk tier), the stream's start
/// (a disk tier without one: whatever it holds may be covered), or its end (memory only:
/// nothing is cached yet).
async fn start_position(current: &Current, bus: &Bus) -> Option<(Option<u64>, u64)> {
    let shared = current.get()?;
    let inv = Arc::clone(manage::invalidations(&shared));
    drop(shared);
    Some(match inv.feed_position() {
        Some(p) => (Some(p.epoch), p.seq),
        None if inv.journaled() => (None, 0),
        None => (None, bus.status().await.last_stream_seq),
    })
}

async fn read(current: &Current, feed: &Feed, bus: &Bus) {
    let Some((mut epoch, mut after)) = start_position(current, bus).await else {
        return;
    };
    feed.applied.store(after, Ordering::Release);
    loop {
        let opened = match epoch {
            Some(e) => bus.consume_from(e, after).await,
            None => bus.consume(after).await,
        };
        let mut consumer = match opened {
            Ok(c) => c,
            Err(e) => {
                feed.note_error(format!("opening the consumer: {e}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // Current once everything the stream held at the open is applied.
        let target = bus.status().await.last_stream_seq;
        if after >= target {
            become_current(feed);
        }
        loop {
            let event = match consumer.next().await {
                Ok(e) => e,
                Err(e) => {
                    feed.note_error(format!("reading: {e}"));
                    break;
                }
            };
            let Some(shared) = current.get() else { return };
            match event {
                Event::Gap(g) => {
                    feed.gaps.fetch_add(1, Ordering::Relaxed);
                    drop_everything(
                        &shared,
                        &format!(
                            "the stream no longer holds messages {}..{} this node never applied",
                            g.missed_from, g.first_available
                        ),
                    )
                    .await;
                    epoch = Some(consumer.epoch());
                    after = g.first_available.saturating_sub(1);
                    keep_position(&shared, consumer.epoch(), after).await;
                    feed.applied.store(after, Ordering::Release);
                }
                Event::Deliver(d) => {
                    apply(&shared, feed, &d).await;
                    keep_position(&shared, d.epoch, d.seq).await;
                    if let Err(e) = d.ack().await {
                        feed.note_error(e.to_string());
                    }
                    let _ = bus.announce_applied(d.seq).await;
                    epoch = Some(d.epoch);
                    after = d.seq;
                    feed.epoch.store(d.epoch, Ordering::Relaxed);
                    feed.applied.store(d.seq, Ordering::Release);
                    if d.seq >= target {
                        become_current(feed);
                    }
                }
            }
        }
    }
}

fn become_current(feed: &Feed) {
    if !feed.current.swap(true, Ordering::AcqRel) {
        tracing::info!(node = %feed.settings.node, "cluster bus: read up to date; serving hits");
    }
}

/// Applies one message from another node (this node's own were applied when accepted).
async fn apply(shared: &Shared, feed: &Feed, d: &Delivery) {
    if d.from_node == feed.settings.node {
        return;
    }
    let call = match decode(&d.payload) {
        Ok((Message::Invalidate(call), _)) => call,
        Ok((Message::Put(head), body)) => return apply_put(shared, feed, d, head, body),
        Err(e) => {
            // Signed by a node of the cluster but unreadable here (a newer trove?): what it
            // invalidates is unknown, so nothing cached can be trusted.
            let why = format!("message {} from {} can't be read ({e})", d.seq, d.from_node);
            drop_everything(shared, &why).await;
            return;
        }
    };
    match manage::invalidate(shared, &call, SystemTime::now()) {
        Ok(ack) => {
            feed.applied_from_others.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = manage::durable(shared, ack.seq).await {
                feed.note_error(format!("message {}: {e}", d.seq));
            }
        }
        // Nothing of a named cache this node doesn't have is stored here.
        Err(ManageError::UnknownCache(_)) => {
            feed.applied_from_others.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            let why = format!(
                "message {} from {} can't be applied ({e})",
                d.seq, d.from_node
            );
            drop_everything(shared, &why).await;
        }
    }
}

/// Stores another node's put here if this node may serve it: every node in replicate
/// mode, the URL's owner in shard mode (a copy elsewhere would never be read).
fn apply_put(shared: &Shared, feed: &Feed, d: &Delivery, head: PutHead, body: bytes::Bytes) {
    if let Some(c) = &shared.cluster {
        if c.mode == trove_cluster::ClusterMode::Shard {
            let mine = manage::key_of(&head.url)
                .map(|k| matches!(c.owner(&k), trove_cluster::Owner::Me))
                .unwrap_or(false);
            if !mine {
                return;
            }
        }
    }
    let stored = put_of(head, body)
        .map_err(|e| e.to_string())
        .and_then(|put| manage::put(shared, put, SystemTime::now()).map_err(|e| e.to_string()));
    match stored {
        Ok(_) => {
            feed.applied_from_others.fetch_add(1, Ordering::Relaxed);
        }
        // A put not stored is a miss here, never a wrong answer: logged, not fatal.
        Err(e) => feed.note_error(format!("put {} from {}: {e}", d.seq, d.from_node)),
    }
}

/// One hard rule matching every key: nothing stored before it is served again.
async fn drop_everything(shared: &Shared, why: &str) {
    tracing::error!("cluster bus: {why}; the whole cache is dropped rather than served unproven");
    let inv = manage::invalidations(shared);
    let seq = inv.add(
        Selector::Prefix(String::new()),
        Mode::Hard,
        SystemTime::now(),
    );
    if let Err(e) = manage::durable(shared, seq).await {
        tracing::error!("cluster bus: dropping the cache: {e}");
    }
}

/// Makes the position durable (a disk tier; nothing to keep without one).
async fn keep_position(shared: &Shared, epoch: u64, seq: u64) {
    let inv = Arc::clone(manage::invalidations(shared));
    if !inv.journaled() {
        return;
    }
    let p = FeedPosition { epoch, seq };
    match tokio::task::spawn_blocking(move || inv.keep_feed_position(p)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("cluster bus: keeping the position {seq}: {e}"),
        Err(e) => tracing::warn!("cluster bus: keeping the position {seq}: {e}"),
    }
}
