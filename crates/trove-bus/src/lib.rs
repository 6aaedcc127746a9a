//! trove-bus carries invalidations between trove nodes, durably, through a NATS JetStream
//! stream. It knows nothing of trove's rules: a payload is opaque bytes that the proxy
//! serialises and parses itself.
//!
//! # Why NATS JetStream, and why `async-nats`
//!
//! The cluster needs a log that outlives any node: every invalidation in one order, numbered,
//! kept for a bounded time, so that a node that was down replays what it missed. JetStream is
//! such a log in a single small server (Debian's `nats-server`), clusterable when the operator
//! wants replicas, and `async-nats` is its official Rust client: tokio-based like trove,
//! maintained with the server, reconnecting by itself. It is built here with JetStream only and
//! `ring` as its TLS provider (the tree's), and without the features for servers newer than
//! 2.9, the version Debian ships.
//!
//! # What the crate guarantees
//!
//! - [`Bus::publish`] returns a sequence only after JetStream acknowledged the message as
//!   stored in the stream; otherwise it fails within `publish_timeout` with an error for which
//!   [`BusError::is_not_durable`] holds (the proxy's 503 `not-durable`). A message id
//!   (`Nats-Msg-Id`) makes retries, inside a call or by the caller with
//!   [`Bus::publish_with_id`], store the message once.
//! - A node's [`Consumer`] hands over every message after the sequence the node says it
//!   applied, in stream order, each once, with the same sequence on every node; the node acks
//!   after applying, so a crash before that reads it again.
//! - If retention dropped messages the node never applied, the consumer says so with a
//!   [`Gap`] before handing over anything after them; so it does if the stream was created
//!   anew (a NATS server that lost its store numbers from 1 again), noticed by a running
//!   consumer, and by a restarted one that gives the epoch it journaled
//!   ([`Bus::consume_from`], [`Delivery::epoch`]).
//! - With a `signing_key`, a message that is not signed with it (HMAC-SHA256) is never handed
//!   over; foreign and malformed messages never are either. Both are counted ([`Counters`]).
//! - The connection comes back by itself when the server does, and a consumer resumes where
//!   it was.
//!
//! What it does not guarantee: durability across a power loss of the NATS host beyond what the
//! server's own sync policy gives (JetStream writes each message to its file before it
//! acknowledges, so a killed server loses nothing, but it syncs to disk periodically).
//! Applied announcements ([`Bus::announce_applied`]) are core NATS, not stored: a lost one
//! makes [`Bus::publish_and_wait`] name a node as missing, never the other way round.

mod bus;
mod consumer;
mod counters;
mod envelope;
mod error;
mod settings;

pub use bus::{AppliedBoard, Bus, Status, WaitOutcome};
pub use consumer::{Consumer, Delivery, Event, Gap};
pub use counters::Counters;
pub use error::BusError;
pub use settings::{parse_duration, parse_size, Auth, BusSettings};
