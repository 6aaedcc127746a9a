//! The access log: one line per request in Squid's native format,
//! `time elapsed client code/status bytes method URL user hierarchy/peer type`,
//! so Squid's log tools and `trove sim` read it as they read Squid's.
//!
//! Lines are handed to a writer thread through a bounded channel, so a slow disk never
//! stalls a request; if the channel is full the line is dropped and counted.

use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::outcome::Outcome;

/// What one log line says.
#[derive(Debug)]
pub struct LogRecord<'a> {
    pub start: SystemTime,
    pub elapsed: Duration,
    pub client: IpAddr,
    pub outcome: Outcome,
    pub status: u16,
    pub bytes: u64,
    pub method: &'a str,
    pub url: &'a str,
    /// The origin contacted, if any (`HIER_DIRECT/host`), else `HIER_NONE/-`.
    pub peer: Option<&'a str>,
    pub content_type: &'a str,
}

/// Formats one line (without the newline).
pub fn format_line(r: &LogRecord<'_>) -> String {
    let ts = r
        .start
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let (hier, peer) = match r.peer {
        Some(p) => ("HIER_DIRECT", p),
        None => ("HIER_NONE", "-"),
    };
    let ct = if r.content_type.is_empty() {
        "-"
    } else {
        r.content_type
    };
    // URLs and types come from the network: never let them break the line format.
    let url = sanitize(r.url);
    let ct = sanitize(ct);
    format!(
        "{ts:.3} {:>6} {} {}/{:03} {} {} {} - {hier}/{peer} {ct}",
        r.elapsed.as_millis(),
        r.client,
        r.outcome.as_str(),
        r.status,
        r.bytes,
        r.method,
        url,
    )
}

fn sanitize(s: &str) -> std::borrow::Cow<'_, str> {
    if s.bytes().any(|b| b <= b' ' || b == 0x7f) {
        s.chars()
            .map(|c| if c.is_control() || c == ' ' { '_' } else { c })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// Where log lines go.
#[derive(Debug)]
pub struct AccessLog {
    tx: Option<SyncSender<String>>,
    dropped: AtomicU64,
}

impl AccessLog {
    /// `"-"`: standard output; `""`: nowhere; otherwise a file opened for appending.
    pub fn open(target: &str) -> std::io::Result<AccessLog> {
        let out: Box<dyn Write + Send> = match target {
            "" => {
                return Ok(AccessLog {
                    tx: None,
                    dropped: AtomicU64::new(0),
                })
            }
            "-" => Box::new(std::io::stdout()),
            path => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
        };
        let (tx, rx) = sync_channel::<String>(65_536);
        std::thread::Builder::new()
            .name("trove-access-log".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
                while let Ok(line) = rx.recv() {
                    let _ = out.write_all(line.as_bytes());
                    // Drain what is queued, then flush: lines reach the file within one
                    // batch without a write per request under load.
                    while let Ok(line) = rx.try_recv() {
                        let _ = out.write_all(line.as_bytes());
                    }
                    let _ = out.flush();
                }
            })?;
        Ok(AccessLog {
            tx: Some(tx),
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues one line.
    pub fn log(&self, r: &LogRecord<'_>) {
        let Some(tx) = &self.tx else { return };
        let mut line = format_line(r);
        line.push('\n');
        if let Err(TrySendError::Full(_)) = tx.try_send(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lines dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_matches_squid_native_format() {
        let line = format_line(&LogRecord {
            start: UNIX_EPOCH + Duration::from_millis(1_066_036_250_221),
            elapsed: Duration::from_millis(11),
            client: "127.0.0.1".parse().unwrap(),
            outcome: Outcome::Miss,
            status: 200,
            bytes: 1543,
            method: "GET",
            url: "http://example.com/a b",
            peer: Some("example.com"),
            content_type: "text/html",
        });
        assert_eq!(
            line,
            "1066036250.221     11 127.0.0.1 TCP_MISS/200 1543 GET http://example.com/a_b - HIER_DIRECT/example.com text/html"
        );
    }
}
