//! The bus's one error type: what failed, and whether the caller may say "durable".

use std::time::Duration;

/// Why a bus operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The settings are unusable; nothing was attempted.
    #[error("bus settings: {0}")]
    Settings(String),
    /// No NATS server in `servers` accepted a connection.
    #[error("cannot connect to NATS at {servers}: {reason}")]
    Connect { servers: String, reason: String },
    /// The stream could not be created, read or made to match the settings.
    #[error("JetStream stream {stream}: {reason}")]
    Stream { stream: String, reason: String },
    /// JetStream did not acknowledge a publish as persisted within `publish_timeout`: the
    /// message may or may not be stored. The proxy answers 503 `not-durable`.
    #[error("not durable: no JetStream acknowledgement after {attempts} attempt(s) in {waited:?} ({last})")]
    NotDurable {
        attempts: u32,
        waited: Duration,
        last: String,
    },
    /// JetStream refused a publish outright (too large, wrong stream); retrying won't help.
    #[error("JetStream refused the message: {0}")]
    Refused(String),
    /// The node's consumer could not be opened or the applied subject not subscribed.
    #[error("consumer {durable}: {reason}")]
    Consumer { durable: String, reason: String },
    /// A core NATS operation (announcing, subscribing, flushing) failed.
    #[error("NATS: {0}")]
    Nats(String),
}

impl BusError {
    /// True when the bus could not confirm durability: the caller must not acknowledge the
    /// invalidation (HTTP 503 `not-durable`).
    pub fn is_not_durable(&self) -> bool {
        matches!(
            self,
            BusError::NotDurable { .. } | BusError::Connect { .. } | BusError::Nats(_)
        )
    }

    /// True when trying again later may succeed (the server or the network was the cause).
    pub fn is_retryable(&self) -> bool {
        !matches!(self, BusError::Settings(_) | BusError::Refused(_))
    }
}
