//! What a node needs to know to join the bus: where NATS is, which stream, who it is, how long
//! the stream keeps messages, how it authenticates and signs, and how long it waits.
//!
//! Sizes and durations are strings with a unit ("256MiB", "24h"), as in the rest of trove's
//! configuration; a bare number is refused so that "24" never silently means 24 seconds.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::error::BusError;

/// How this node authenticates to NATS.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Auth {
    /// No authentication (a NATS server on a private network or loopback).
    #[default]
    None,
    /// A shared token (`nats-server --auth TOKEN`).
    Token(String),
    /// A NATS credentials file (JWT and NKey seed), as `nsc` writes it.
    Credentials(PathBuf),
}

/// The bus's settings: the `[cluster.bus]` table of trove's configuration.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusSettings {
    /// NATS servers to connect to (`nats://host:port`); any one reachable is enough.
    pub servers: Vec<String>,
    /// The JetStream stream that keeps the invalidations.
    pub stream: String,
    /// The subject messages are published on; announcements of applied sequences go to
    /// `<subject>.applied`, which the stream does not capture.
    pub subject: String,
    /// This node's id: letters, digits, `-` and `_` (it names the node's durable consumer).
    pub node: String,
    /// Messages older than this are dropped by the stream.
    #[serde(deserialize_with = "de_duration")]
    pub max_age: Duration,
    /// The stream drops its oldest messages past this many bytes.
    #[serde(deserialize_with = "de_size")]
    pub max_bytes: u64,
    /// The stream drops its oldest messages past this many messages (none: no count limit).
    pub max_msgs: Option<u64>,
    /// How long the stream remembers message ids, so a retried publish is stored once.
    #[serde(deserialize_with = "de_duration")]
    pub duplicate_window: Duration,
    /// Stream replicas (1 for a single NATS server; 3 for a NATS cluster).
    pub replicas: usize,
    /// Authentication to NATS.
    pub auth: Auth,
    /// A key shared by every node: messages are signed with HMAC-SHA256 and, when it is set,
    /// unsigned or wrongly signed messages are rejected.
    pub signing_key: Option<String>,
    /// The longest wait for a TCP connection to a NATS server.
    #[serde(deserialize_with = "de_duration")]
    pub connect_timeout: Duration,
    /// The longest wait for a JetStream API answer (stream and consumer management, status).
    #[serde(deserialize_with = "de_duration")]
    pub request_timeout: Duration,
    /// The longest a publish waits for JetStream to acknowledge it, retries included; past it
    /// the publish fails as not durable.
    #[serde(deserialize_with = "de_duration")]
    pub publish_timeout: Duration,
    /// How long JetStream waits for a delivered message's ack before it delivers it again.
    #[serde(deserialize_with = "de_duration")]
    pub ack_wait: Duration,
    /// How often an idle consumer hears from the server; two missed beats reopen it.
    #[serde(deserialize_with = "de_duration")]
    pub heartbeat: Duration,
}

impl Default for BusSettings {
    fn default() -> Self {
        BusSettings {
            servers: vec!["nats://127.0.0.1:4222".to_string()],
            stream: "TROVE_INVALIDATIONS".to_string(),
            subject: "trove.invalidations".to_string(),
            node: String::new(),
            max_age: Duration::from_secs(24 * 3600),
            max_bytes: 256 << 20,
            max_msgs: None,
            duplicate_window: Duration::from_secs(120),
            replicas: 1,
            auth: Auth::None,
            signing_key: None,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
            publish_timeout: Duration::from_secs(2),
            ack_wait: Duration::from_secs(30),
            heartbeat: Duration::from_secs(1),
        }
    }
}

impl BusSettings {
    /// Default settings for node `node`.
    pub fn for_node(node: &str) -> Self {
        BusSettings {
            node: node.to_string(),
            ..BusSettings::default()
        }
    }

    /// The subject on which nodes announce the last sequence they applied.
    pub fn applied_subject(&self) -> String {
        format!("{}.applied", self.subject)
    }

    /// Checks what NATS would refuse later with a less helpful message.
    pub fn validate(&self) -> Result<(), BusError> {
        let bad = |what: String| Err(BusError::Settings(what));
        if self.servers.is_empty() {
            return bad("no NATS servers given (servers = [\"nats://host:4222\"])".into());
        }
        if !is_token(&self.node) {
            return bad(format!(
                "node id {:?} must be 1 to 64 letters, digits, '-' or '_'",
                self.node
            ));
        }
        if !is_token(&self.stream) {
            return bad(format!(
                "stream name {:?} must be 1 to 64 letters, digits, '-' or '_'",
                self.stream
            ));
        }
        let subject_ok = !self.subject.is_empty()
            && self.subject.split('.').all(|t| {
                !t.is_empty()
                    && t.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if !subject_ok {
            return bad(format!(
                "subject {:?} must be dot-separated tokens without wildcards",
                self.subject
            ));
        }
        if self.max_age.is_zero() || self.max_bytes == 0 || self.max_msgs == Some(0) {
            return bad("the stream's retention must be bounded and non-zero (max_age, max_bytes, max_msgs)".into());
        }
        if self.duplicate_window.is_zero() || self.duplicate_window > self.max_age {
            return bad("duplicate_window must be non-zero and no longer than max_age".into());
        }
        if self.replicas == 0 {
            return bad("replicas must be at least 1".into());
        }
        if self.publish_timeout.is_zero() || self.request_timeout.is_zero() {
            return bad("publish_timeout and request_timeout must be non-zero".into());
        }
        if self.heartbeat.is_zero() {
            return bad("heartbeat must be non-zero".into());
        }
        if matches!(&self.signing_key, Some(k) if k.len() < 16) {
            return bad("signing_key must be at least 16 characters".into());
        }
        Ok(())
    }
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Splits "24h" into ("24", "h").
fn number_and_unit(s: &str) -> (&str, &str) {
    let s = s.trim();
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..at], s[at..].trim())
}

/// A duration with its unit: ms, s, m, h or d.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = number_and_unit(s);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (a number and a unit: ms, s, m, h, d)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        _ => return Err(format!("duration {s:?} needs a unit: ms, s, m, h, d")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration {s:?}"))
}

/// A size with its unit: B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, unit) = number_and_unit(s);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?} (a whole number and a unit)"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "b" => 1,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "size {s:?} needs a unit: B, KB, MB, GB, KiB, MiB, GiB"
            ))
        }
    };
    n.checked_mul(mult)
        .filter(|v| *v <= i64::MAX as u64)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d).map_err(|_| {
        serde::de::Error::custom("give a duration as a string with its unit, e.g. \"30s\"")
    })?;
    parse_duration(&s).map_err(serde::de::Error::custom)
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d).map_err(|_| {
        serde::de::Error::custom("give a size as a string with its unit, e.g. \"256MiB\"")
    })?;
    parse_size(&s).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, parse_size, Auth, BusSettings};
    use std::time::Duration;

    #[test]
    fn defaults_are_bounded_and_named() {
        let s = BusSettings::for_node("n1");
        assert_eq!(s.stream, "TROVE_INVALIDATIONS");
        assert_eq!(s.subject, "trove.invalidations");
        assert_eq!(s.max_age, Duration::from_secs(86_400));
        assert_eq!(s.max_bytes, 256 << 20);
        assert_eq!(s.applied_subject(), "trove.invalidations.applied");
        s.validate().unwrap();
    }

    #[test]
    fn reads_toml_with_units() {
        let s: BusSettings = toml::from_str(
            r#"
            servers = ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"]
            node = "edge-1"
            max_age = "2h"
            max_bytes = "64MiB"
            auth = { token = "s3cret" }
            signing_key = "0123456789abcdef"
            publish_timeout = "500ms"
            "#,
        )
        .unwrap();
        assert_eq!(s.servers.len(), 2);
        assert_eq!(s.max_age, Duration::from_secs(7200));
        assert_eq!(s.max_bytes, 64 << 20);
        assert_eq!(s.auth, Auth::Token("s3cret".into()));
        assert_eq!(s.publish_timeout, Duration::from_millis(500));
        s.validate().unwrap();
    }

    #[test]
    fn refuses_what_nats_would_refuse() {
        let bad_node = BusSettings::for_node("edge.1");
        assert!(bad_node
            .validate()
            .unwrap_err()
            .to_string()
            .contains("node id"));
        let mut wild = BusSettings::for_node("n");
        wild.subject = "trove.*".into();
        assert!(wild.validate().is_err());
        assert!(toml::from_str::<BusSettings>("max_age = 3600").is_err());
        assert!(parse_duration("24").is_err());
        assert!(parse_size("12").is_err());
        assert_eq!(parse_size("1KB").unwrap(), 1000);
    }
}
