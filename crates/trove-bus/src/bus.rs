//! The connection to NATS and the stream: connect, publish, announce, wait, status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, context::PublishErrorKind, stream};
use async_nats::ConnectOptions;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::time::{timeout, timeout_at, Instant};

use crate::consumer::Consumer;
use crate::counters::{Counters, Live};
use crate::envelope::{Kind, Rejection, Signer};
use crate::error::BusError;
use crate::settings::{Auth, BusSettings};

/// A node's handle on the invalidation bus. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct Bus {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub settings: BusSettings,
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub signer: Signer,
    pub live: Live,
}

/// What `publish_and_wait` learned: the message's sequence and the nodes that had not
/// announced applying it when the wait ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitOutcome {
    pub seq: u64,
    pub missing: Vec<String>,
}

/// The highest sequence each node announced as applied, as heard since
/// [`Bus::follow_applied`] began (a node that announced nothing since is absent).
#[derive(Debug, Default)]
pub struct AppliedBoard {
    nodes: parking_lot::Mutex<BTreeMap<String, u64>>,
}

impl AppliedBoard {
    /// Node id → the highest sequence it announced.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.nodes.lock().clone()
    }
}

/// The bus as this node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Whether the NATS connection is up now.
    pub connected: bool,
    /// The last sequence in the stream (read from the server when connected, else the
    /// highest this node has seen).
    pub last_stream_seq: u64,
    /// The highest sequence this node acknowledged as applied.
    pub last_applied: u64,
    /// `last_stream_seq - last_applied`: messages in the stream this node has not applied.
    pub lag: u64,
    pub counters: Counters,
}

impl Bus {
    /// Connects to one of `settings.servers`, then creates the stream or checks that the
    /// existing one is usable (its subjects and storage), updating its limits to the settings'.
    pub async fn connect(settings: BusSettings) -> Result<Bus, BusError> {
        settings.validate()?;
        let servers = settings.servers.join(",");
        let connect_err = |reason: String| BusError::Connect {
            servers: servers.clone(),
            reason,
        };
        let mut options = ConnectOptions::new()
            .name(format!("trove-{}", settings.node))
            .connection_timeout(settings.connect_timeout)
            .request_timeout(Some(settings.request_timeout))
            .max_reconnects(None)
            // Back to the server soon after it returns: invalidations wait on it.
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis(50u64.saturating_mul(1 << attempts.min(5) as u64))
                    .min(Duration::from_secs(1))
            });
        options = match &settings.auth {
            Auth::None => options,
            Auth::Token(token) => options.token(token.clone()),
            Auth::Credentials(path) => options
                .credentials_file(path)
                .await
                .map_err(|e| connect_err(format!("credentials file {}: {e}", path.display())))?,
        };
        let addrs = settings
            .servers
            .iter()
            .map(|s| s.parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BusError::Settings(format!("servers: {e}")))?;
        let client = options
            .connect(addrs)
            .await
            .map_err(|e| connect_err(e.to_string()))?;
        let js = jetstream::ContextBuilder::new()
            .timeout(settings.request_timeout)
            .build(client.clone());
        ensure_stream(&js, &settings).await?;
        let signer = Signer::new(settings.signing_key.as_deref());
        Ok(Bus {
            inner: Arc::new(Inner {
                settings,
                client,
                js,
                signer,
                live: Live::default(),
            }),
        })
    }

    /// This node's settings.
    pub fn settings(&self) -> &BusSettings {
        &self.inner.settings
    }

    /// Publishes `payload` and returns its stream sequence once JetStream acknowledged it as
    /// stored. The message gets a fresh id; see [`Bus::publish_with_id`].
    pub async fn publish(&self, payload: impl Into<Bytes>) -> Result<u64, BusError> {
        let id = format!(
            "{}-{:032x}",
            self.inner.settings.node,
            rand::random::<u128>()
        );
        self.publish_with_id(&id, payload).await
    }

    /// Publishes with the caller's message id (unique per message, e.g. the node id and the
    /// rule's own sequence number). Attempts are retried with the same id until
    /// `publish_timeout`, and a caller that retries a failed call with the same id within the
    /// stream's `duplicate_window` gets the first copy's sequence: the message is stored once.
    pub async fn publish_with_id(
        &self,
        id: &str,
        payload: impl Into<Bytes>,
    ) -> Result<u64, BusError> {
        let inner = &self.inner;
        let s = &inner.settings;
        let payload: Bytes = payload.into();
        let headers = inner.signer.seal(Kind::Invalidation, &s.node, id, &payload);
        let started = Instant::now();
        let deadline = started + s.publish_timeout;
        // Several attempts fit in the budget: one lost on a dying connection is not the end.
        let per_attempt = (s.publish_timeout / 3).max(Duration::from_millis(200));
        let mut attempts = 0u32;
        let mut last = String::from("no attempt made");
        let mut pause = Duration::from_millis(20);
        while Instant::now() < deadline {
            attempts += 1;
            let message = jetstream::message::PublishMessage::build()
                .payload(payload.clone())
                .headers(headers.clone())
                .expected_stream(&s.stream);
            let attempt = async {
                inner
                    .js
                    .send_publish(s.subject.clone(), message)
                    .await?
                    .await
            };
            let until = (Instant::now() + per_attempt).min(deadline);
            match timeout_at(until, attempt).await {
                Ok(Ok(ack)) => {
                    if ack.duplicate {
                        Live::add(&inner.live.duplicates);
                    } else {
                        Live::add(&inner.live.published);
                    }
                    Live::raise(&inner.live.last_stream_seq, ack.sequence);
                    return Ok(ack.sequence);
                }
                Ok(Err(e)) => match e.kind() {
                    PublishErrorKind::MaxPayloadExceeded
                    | PublishErrorKind::WrongLastMessageId
                    | PublishErrorKind::WrongLastSequence => {
                        return Err(BusError::Refused(e.to_string()))
                    }
                    PublishErrorKind::StreamNotFound => {
                        // Also what a server still starting says; a server that lost its store
                        // gets the stream back (and every consumer then reports a gap).
                        last = e.to_string();
                        let _ = timeout_at(until, ensure_stream(&inner.js, s)).await;
                    }
                    _ => last = e.to_string(),
                },
                Err(_) => last = format!("no acknowledgement within {per_attempt:?}"),
            }
            let rest = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(pause.min(rest)).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
        Err(BusError::NotDurable {
            attempts,
            waited: started.elapsed(),
            last,
        })
    }

    /// Opens this node's durable consumer at `after_seq + 1`: `after_seq` is the last sequence
    /// this node applied (0 for none). See [`Consumer`].
    pub async fn consume(&self, after_seq: u64) -> Result<Consumer, BusError> {
        Consumer::open(self.inner.clone(), None, after_seq).await
    }

    /// Like [`Bus::consume`], for a node that journaled the stream's epoch with its sequence
    /// ([`crate::Delivery::epoch`]): if the stream has been created anew since (the NATS
    /// server lost its store), the consumer reports a [`crate::Gap`] first and reads the new
    /// stream from its start.
    pub async fn consume_from(&self, epoch: u64, after_seq: u64) -> Result<Consumer, BusError> {
        Consumer::open(self.inner.clone(), Some(epoch), after_seq).await
    }

    /// Tells the nodes waiting in [`Bus::publish_and_wait`] that this node applied everything
    /// up to `seq` (core NATS, not stored: a missed announcement only makes a wait report
    /// this node as missing).
    pub async fn announce_applied(&self, seq: u64) -> Result<(), BusError> {
        let inner = &self.inner;
        let s = &inner.settings;
        Live::raise(&inner.live.last_applied, seq);
        let payload = seq.to_string();
        let headers = inner
            .signer
            .seal(Kind::Applied, &s.node, "", payload.as_bytes());
        inner
            .client
            .publish_with_headers(s.applied_subject(), headers, payload.into())
            .await
            .map_err(|e| BusError::Nats(format!("announcing applied {seq}: {e}")))
    }

    /// Publishes `payload`, then waits up to `wait` for every node in `nodes` to announce it
    /// applied it. Fails only if the publish fails; nodes that did not answer are `missing`.
    pub async fn publish_and_wait(
        &self,
        payload: impl Into<Bytes>,
        nodes: &[String],
        wait: Duration,
    ) -> Result<WaitOutcome, BusError> {
        let inner = &self.inner;
        // Subscribed (and the subscription known to the server) before the message exists, so
        // no announcement of it can be missed.
        let mut announcements = inner.subscribe_applied().await?;
        timeout(inner.settings.request_timeout, inner.client.flush())
            .await
            .map_err(|_| BusError::Nats("flush timed out".into()))?
            .map_err(|e| BusError::Nats(format!("flush: {e}")))?;
        let seq = self.publish(payload).await?;
        let mut missing: BTreeSet<&str> = nodes.iter().map(String::as_str).collect();
        let deadline = Instant::now() + wait;
        while !missing.is_empty() {
            let Ok(Some(m)) = timeout_at(deadline, announcements.next()).await else {
                break;
            };
            if let Some((node, applied)) = inner.announcement(&m) {
                if applied >= seq {
                    missing.remove(node.as_str());
                }
            }
        }
        // Unsubscribing is best effort; the subscription dies with the value anyway.
        let _ = announcements.unsubscribe().await;
        Ok(WaitOutcome {
            seq,
            missing: missing.into_iter().map(str::to_string).collect(),
        })
    }

    /// Follows every node's announcements of what it applied ([`Bus::announce_applied`])
    /// from now on, into a board a status page reads: the highest sequence each node
    /// announced. A task of its own, ended when the board is dropped; the subscription comes
    /// back with the connection.
    pub async fn follow_applied(&self) -> Result<Arc<AppliedBoard>, BusError> {
        let inner = Arc::clone(&self.inner);
        let mut announcements = inner.subscribe_applied().await?;
        let board = Arc::new(AppliedBoard::default());
        let weak = Arc::downgrade(&board);
        tokio::spawn(async move {
            while let Some(m) = announcements.next().await {
                let Some(board) = weak.upgrade() else { return };
                if let Some((node, seq)) = inner.announcement(&m) {
                    let mut nodes = board.nodes.lock();
                    let e = nodes.entry(node).or_insert(0);
                    *e = (*e).max(seq);
                }
            }
        });
        Ok(board)
    }

    /// Connection state, sequences and counters. Reads the stream's last sequence from the
    /// server when connected (bounded by `request_timeout`).
    pub async fn status(&self) -> Status {
        let inner = &self.inner;
        let connected = inner.client.connection_state() == State::Connected;
        if connected {
            let info = async {
                let stream = inner
                    .js
                    .get_stream_no_info(&inner.settings.stream)
                    .await
                    .ok()?;
                stream.get_info().await.ok()
            };
            if let Ok(Some(info)) = timeout(inner.settings.request_timeout, info).await {
                Live::raise(&inner.live.last_stream_seq, info.state.last_sequence);
            }
        }
        let last_stream_seq = inner.live.last_stream_seq.load(Ordering::Relaxed);
        let last_applied = inner.live.last_applied.load(Ordering::Relaxed);
        Status {
            connected,
            last_stream_seq,
            last_applied,
            lag: last_stream_seq.saturating_sub(last_applied),
            counters: inner.live.snapshot(),
        }
    }

    /// Whether the NATS connection is up now (no round trip).
    pub fn is_connected(&self) -> bool {
        self.inner.client.connection_state() == State::Connected
    }

    /// The counters alone (no server round trip).
    pub fn counters(&self) -> Counters {
        self.inner.live.snapshot()
    }
}

impl Inner {
    /// A subscription to every node's announcements of what it applied.
    async fn subscribe_applied(&self) -> Result<async_nats::Subscriber, BusError> {
        self.client
            .subscribe(self.settings.applied_subject())
            .await
            .map_err(|e| BusError::Nats(format!("subscribing to applied announcements: {e}")))
    }

    /// One announcement: the node and the sequence it applied through, or `None` (counted)
    /// when it is unsigned, wrongly signed or malformed.
    fn announcement(&self, m: &async_nats::Message) -> Option<(String, u64)> {
        let node = match self
            .signer
            .open(Kind::Applied, m.headers.as_ref(), &m.payload)
        {
            Ok(node) => node,
            Err(rejection) => {
                self.count_rejection(rejection, "applied announcement");
                return None;
            }
        };
        let applied = std::str::from_utf8(&m.payload)
            .ok()
            .and_then(|p| p.parse::<u64>().ok());
        if applied.is_none() {
            self.count_rejection(Rejection::Malformed("bad sequence"), "applied announcement");
        }
        Some((node, applied?))
    }

    pub(crate) fn count_rejection(&self, rejection: Rejection, what: &str) {
        match rejection {
            Rejection::Malformed(why) => {
                Live::add(&self.live.rejected_malformed);
                tracing::warn!(what, why, "bus: malformed message rejected");
            }
            Rejection::Forged(why) => {
                Live::add(&self.live.rejected_forged);
                tracing::warn!(what, why, "bus: forged message rejected");
            }
        }
    }
}

/// The stream the settings describe.
fn wanted_stream(s: &BusSettings) -> stream::Config {
    stream::Config {
        name: s.stream.clone(),
        subjects: vec![s.subject.clone()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        discard: stream::DiscardPolicy::Old,
        max_age: s.max_age,
        max_bytes: s.max_bytes as i64,
        max_messages: s.max_msgs.map_or(-1, |n| n.min(i64::MAX as u64) as i64),
        duplicate_window: s.duplicate_window,
        num_replicas: s.replicas,
        description: Some("trove cluster invalidations (trove-bus)".into()),
        ..Default::default()
    }
}

/// Creates the stream, or checks the existing one and brings its limits to the settings'.
pub(crate) async fn ensure_stream(
    js: &jetstream::Context,
    s: &BusSettings,
) -> Result<(), BusError> {
    let fail = |reason: String| BusError::Stream {
        stream: s.stream.clone(),
        reason,
    };
    let wanted = wanted_stream(s);
    let mut stream = js
        .get_or_create_stream(wanted.clone())
        .await
        .map_err(|e| fail(format!("create or look up: {e}")))?;
    let have = stream
        .info()
        .await
        .map_err(|e| fail(format!("read its configuration: {e}")))?
        .config
        .clone();
    if !have.subjects.iter().any(|subject| subject == &s.subject) {
        return Err(fail(format!(
            "exists but captures {:?}, not {:?}",
            have.subjects, s.subject
        )));
    }
    if have.storage != stream::StorageType::File {
        return Err(fail(
            "exists with memory storage; the bus needs file storage".into(),
        ));
    }
    if have.retention != stream::RetentionPolicy::Limits {
        return Err(fail(
            "exists with a retention policy other than limits".into(),
        ));
    }
    let limits = |c: &stream::Config| (c.max_age, c.max_bytes, c.max_messages, c.duplicate_window);
    if limits(&have) != limits(&wanted) {
        tracing::warn!(
            stream = %s.stream,
            have = ?limits(&have),
            want = ?limits(&wanted),
            "bus: stream limits differ from the settings; updating them"
        );
        let updated = stream::Config {
            subjects: have.subjects.clone(),
            ..wanted
        };
        js.update_stream(updated)
            .await
            .map_err(|e| fail(format!("update its limits: {e}")))?;
    }
    Ok(())
}
