//! A node's durable consumer: the stream's messages in order, from the one after the last this
//! node applied, with a gap reported before anything the node can no longer prove.
//!
//! The node's own record of the last sequence it applied (journaled with its cache) decides
//! where reading starts, not the server's consumer state: the consumer is recreated at
//! `after_seq + 1` each time it is opened or reopened, so a node that crashed before applying
//! (and so before journaling and acking) reads the message again, and one whose acks were lost
//! reads nothing twice. Within one consumer, messages are handed over once each, in stream
//! order: JetStream's redeliveries of a message not yet acked are dropped by sequence.

use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::message::Acker;
use async_nats::jetstream::stream::ConsumerErrorKind;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::{self, consumer::pull::MessagesErrorKind};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::time::timeout;

use crate::bus::{ensure_stream, Inner};
use crate::counters::Live;
use crate::envelope::Kind;
use crate::error::BusError;

/// One invalidation for the caller to apply, then [`Delivery::ack`].
pub struct Delivery {
    /// The message's stream sequence: the same on every node.
    pub seq: u64,
    /// The node that published it.
    pub from_node: String,
    /// The publisher's bytes, untouched.
    pub payload: Bytes,
    /// The stream's identity: its creation time in nanoseconds since 1970. Sequences restart
    /// when a stream is created anew, so a node journals `(epoch, seq)` and opens its consumer
    /// with both ([`crate::Bus::consume_from`]).
    pub epoch: u64,
    // Boxed: a JetStream context is large, and a delivery travels in an `Event`.
    acker: Box<Acker>,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("seq", &self.seq)
            .field("from_node", &self.from_node)
            .field("payload", &self.payload.len())
            .finish()
    }
}

impl Delivery {
    /// Says the message was applied (and, for a node with a journal, journaled). Until then
    /// JetStream keeps it pending for this node.
    pub async fn ack(&self) -> Result<(), BusError> {
        Live::raise(&self.inner.live.last_applied, self.seq);
        self.acker
            .ack()
            .await
            .map_err(|e| BusError::Nats(format!("ack of {}: {e}", self.seq)))
    }
}

/// Messages this node never applied were dropped by the stream's retention: the node can't
/// prove its cache valid and should drop it (or the affected part) before serving a hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The first sequence the node missed.
    pub missed_from: u64,
    /// The first sequence the stream still holds (or will hold next); reading goes on there.
    pub first_available: u64,
}

/// What a consumer yields.
#[derive(Debug)]
pub enum Event {
    Deliver(Delivery),
    Gap(Gap),
}

/// A node's durable pull consumer; see the module docs.
pub struct Consumer {
    inner: Arc<Inner>,
    durable: String,
    messages: Option<pull::Stream>,
    /// The sequence the next delivered message should carry.
    next: u64,
    /// A gap found when (re)opening, reported before any message.
    pending_gap: Option<Gap>,
    /// A message that arrived after a jump in sequences, handed over after the gap.
    held: Option<jetstream::Message>,
    /// The stream's epoch (see [`Delivery::epoch`]) at the last open, or as the node gave it.
    epoch: Option<u64>,
    /// Heartbeats missed in a row on an open consumer.
    missed: u32,
}

impl Consumer {
    pub(crate) async fn open(
        inner: Arc<Inner>,
        epoch: Option<u64>,
        after_seq: u64,
    ) -> Result<Consumer, BusError> {
        let durable = format!("trove-{}", inner.settings.node);
        let mut consumer = Consumer {
            inner,
            durable,
            messages: None,
            next: after_seq.saturating_add(1),
            pending_gap: None,
            held: None,
            epoch,
            missed: 0,
        };
        consumer.reopen().await?;
        Ok(consumer)
    }

    /// The next message or gap. Waits while the server is away and resumes where it was when
    /// it is back (retrying with a backoff of at most a second, logging why); the caller that
    /// must not wait for ever bounds the call with a timeout and reads [`crate::Bus::status`].
    ///
    /// Each node runs one consumer at a time: opening one recreates the node's durable
    /// consumer, which ends the reading of another open for the same node id.
    pub async fn next(&mut self) -> Result<Event, BusError> {
        loop {
            if let Some(gap) = self.pending_gap.take() {
                return Ok(Event::Gap(gap));
            }
            if let Some(message) = self.held.take() {
                if let Some(delivery) = self.judge(message).await {
                    return Ok(Event::Deliver(delivery));
                }
                continue;
            }
            let Some(messages) = self.messages.as_mut() else {
                self.reopen_when_connected().await?;
                continue;
            };
            match messages.next().await {
                Some(Ok(message)) => {
                    self.missed = 0;
                    let Ok(info) = message.info() else {
                        tracing::warn!("bus: a message without JetStream metadata; reopening");
                        self.messages = None;
                        continue;
                    };
                    let seq = info.stream_sequence;
                    Live::raise(
                        &self.inner.live.last_stream_seq,
                        seq.saturating_add(info.pending),
                    );
                    if seq < self.next {
                        // A redelivery of a message already handed over.
                        continue;
                    }
                    if seq > self.next {
                        let gap = Gap {
                            missed_from: self.next,
                            first_available: seq,
                        };
                        self.next = seq;
                        self.held = Some(message);
                        Live::add(&self.inner.live.gaps);
                        return Ok(Event::Gap(gap));
                    }
                    if let Some(delivery) = self.judge(message).await {
                        return Ok(Event::Deliver(delivery));
                    }
                }
                Some(Err(e)) if e.kind() == MessagesErrorKind::MissingHeartbeat => {
                    self.missed += 1;
                    // The client reconnects by itself and the pull stream re-asks; a consumer
                    // that stays silent while connected has lost its server state.
                    if self.missed >= 2 && self.inner.client.connection_state() == State::Connected
                    {
                        tracing::info!(durable = %self.durable, "bus: consumer silent; reopening");
                        self.messages = None;
                    }
                }
                Some(Err(e)) => {
                    tracing::info!(durable = %self.durable, error = %e, "bus: consumer error; reopening");
                    self.messages = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                None => self.messages = None,
            }
        }
    }

    /// Checks the message at `self.next` and moves past it; `None` if it was rejected.
    async fn judge(&mut self, message: jetstream::Message) -> Option<Delivery> {
        let seq = self.next;
        self.next = seq.saturating_add(1);
        let (message, acker) = message.split();
        match self.inner.signer.open(
            Kind::Invalidation,
            message.headers.as_ref(),
            &message.payload,
        ) {
            Ok(from_node) => {
                Live::add(&self.inner.live.delivered);
                Some(Delivery {
                    seq,
                    from_node,
                    payload: message.payload,
                    epoch: self.epoch.unwrap_or(0),
                    acker: Box::new(acker),
                    inner: self.inner.clone(),
                })
            }
            Err(rejection) => {
                self.inner.count_rejection(rejection, "invalidation");
                // Settled, so JetStream doesn't offer it again; nothing to apply.
                if let Err(e) = acker.ack().await {
                    tracing::debug!(seq, error = %e, "bus: ack of a rejected message failed");
                }
                None
            }
        }
    }

    async fn reopen_when_connected(&mut self) -> Result<(), BusError> {
        let mut pause = Duration::from_millis(50);
        loop {
            if self.inner.client.connection_state() == State::Connected {
                match self.reopen().await {
                    Ok(()) => {
                        Live::add(&self.inner.live.reopened);
                        return Ok(());
                    }
                    Err(e) => tracing::info!(error = %e, "bus: consumer not reopened yet"),
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Recreates the durable consumer at `self.next`, reporting first a gap if the stream no
    /// longer holds it.
    async fn reopen(&mut self) -> Result<(), BusError> {
        let inner = self.inner.clone();
        let s = &inner.settings;
        let fail = |reason: String| BusError::Consumer {
            durable: self.durable.clone(),
            reason,
        };
        let bounded = |what: &'static str| move |_| fail(format!("{what}: timed out"));
        // Recreated if the server lost it; the sequences then restart and a gap is reported.
        timeout(s.request_timeout, ensure_stream(&inner.js, s))
            .await
            .map_err(bounded("looking up the stream"))??;
        let mut stream = timeout(s.request_timeout, inner.js.get_stream(&s.stream))
            .await
            .map_err(bounded("looking up the stream"))?
            .map_err(|e| fail(format!("looking up the stream: {e}")))?;
        let info = timeout(s.request_timeout, stream.info())
            .await
            .map_err(bounded("reading the stream's state"))?
            .map_err(|e| fail(format!("reading the stream's state: {e}")))?;
        let state = info.state.clone();
        // A stream created anew since this consumer last opened (the server lost its store)
        // numbers from 1 again: nothing this node applied says anything about it.
        let epoch = epoch_of(&info.created);
        let recreated = matches!(self.epoch, Some(e) if e != epoch);
        self.epoch = Some(epoch);
        Live::raise(&inner.live.last_stream_seq, state.last_sequence);
        // An empty stream says first = last + 1; a fresh one says 0 for both.
        let first = state.first_sequence.max(1);
        let reset = recreated || self.next > state.last_sequence.saturating_add(1);
        if first > self.next || reset {
            if reset {
                tracing::warn!(
                    next = self.next,
                    last = state.last_sequence,
                    recreated,
                    "bus: the stream was recreated or is behind this node's applied sequence"
                );
            }
            self.pending_gap = Some(Gap {
                missed_from: self.next,
                first_available: first,
            });
            Live::add(&inner.live.gaps);
            self.next = first;
        }
        // The node's applied sequence, not the server's memory, says where to start.
        match timeout(s.request_timeout, stream.delete_consumer(&self.durable)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e))
                if matches!(e.kind(), ConsumerErrorKind::JetStream(ref j)
                    if j.error_code() == ErrorCode::CONSUMER_NOT_FOUND) => {}
            Ok(Err(e)) => return Err(fail(format!("removing the old consumer: {e}"))),
            Err(_) => return Err(fail("removing the old consumer: timed out".into())),
        }
        let config = pull::Config {
            durable_name: Some(self.durable.clone()),
            description: Some("trove-bus: this node's invalidations".into()),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: self.next,
            },
            ack_policy: AckPolicy::Explicit,
            ack_wait: s.ack_wait,
            filter_subject: s.subject.clone(),
            ..Default::default()
        };
        let consumer = timeout(s.request_timeout, stream.create_consumer(config))
            .await
            .map_err(bounded("creating the consumer"))?
            .map_err(|e| fail(format!("creating the consumer: {e}")))?;
        let expires = (s.heartbeat * 10).max(Duration::from_secs(5));
        let messages = timeout(
            s.request_timeout,
            consumer
                .stream()
                .heartbeat(s.heartbeat)
                .expires(expires)
                .messages(),
        )
        .await
        .map_err(bounded("starting to pull"))?
        .map_err(|e| fail(format!("starting to pull: {e}")))?;
        self.messages = Some(messages);
        self.missed = 0;
        Ok(())
    }

    /// The epoch of the stream this consumer reads (see [`Delivery::epoch`]).
    pub fn epoch(&self) -> u64 {
        self.epoch.unwrap_or(0)
    }

    /// The sequence the next delivered message will carry.
    pub fn next_seq(&self) -> u64 {
        self.next
    }
}

/// A stream's creation time as nanoseconds since 1970 (0 if out of range).
fn epoch_of(created: &async_nats::datetime::DateTime) -> u64 {
    u64::try_from(created.unix_timestamp_nanos()).unwrap_or(0)
}
