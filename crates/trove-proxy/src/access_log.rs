//! The access log: one line per request in Squid's native format,
//! `time elapsed client code/status bytes method URL user hierarchy/peer type`, and an
//! eleventh field, the protocol the client spoke (`HTTP/1.1`, `HTTP/2`, `HTTP/1.0`; `-` for
//! a head too malformed to say), so Squid's log tools and `trove sim`, which read the ten
//! fields they know and ignore what follows, read it as they read Squid's. As in Squid, `time`
//! is when the exchange completed (lines are written in that order), `elapsed` how long it
//! took, so `time - elapsed` is when the request arrived; a client that went away before
//! the exchange completed gets `_ABORTED` after the result code (`TCP_MISS_ABORTED/200`);
//! and the hierarchy field names the origin's host, without its port.
//!
//! Lines are appended to an in-memory buffer that a writer thread swaps out and writes every
//! [`FLUSH_EVERY`], so a request costs no system call and no thread wake-up; a slow disk never
//! stalls a request. If the buffer grows past [`MAX_BUFFER`] lines are dropped and counted.
//! `kill -9` loses at most the last interval of lines.
//!
//! Rotation: [`AccessLog::reopen`] (what `SIGUSR1` and `trove rotate` call) has the writer
//! write out what it holds to the file it has open, then open the path again, so after
//! `logrotate` renames the file the next lines go to a new one, as with nginx and Squid. If
//! the path can't be opened the old file is kept and the failure is logged and counted.
//! [`AccessLog::close`] writes out everything buffered and stops the writer (a graceful stop).

use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use trove_cache::Outcome;

/// What one log line says.
#[derive(Debug)]
pub struct LogRecord<'a> {
    /// When the request arrived; the line's time is `start + elapsed`, its completion.
    pub start: SystemTime,
    pub elapsed: Duration,
    pub client: IpAddr,
    pub outcome: Outcome,
    pub status: u16,
    pub bytes: u64,
    pub method: &'a str,
    /// For a reverse request, the `Host` its origin-form `url` is relative to: the line says
    /// `http://{url_host}{url}`, built without an intermediate string. Empty otherwise.
    pub url_host: &'a str,
    pub url: &'a str,
    /// The origin contacted (`host` or `host:port`), if any: `HIER_DIRECT/host`, else
    /// `HIER_NONE/-`.
    pub peer: Option<&'a str>,
    pub content_type: &'a str,
    /// The client went away before the exchange completed (mid-body or mid-response).
    pub aborted: bool,
    /// The protocol the client spoke (`HTTP/2`), or `-`.
    pub protocol: &'a str,
}

/// How the log names a request's protocol.
pub fn protocol(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "-",
    }
}

/// How often buffered lines are written out.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Most bytes buffered between writes.
pub const MAX_BUFFER: usize = 16 << 20;

/// Formats one line (without the newline).
pub fn format_line(r: &LogRecord<'_>) -> String {
    let mut out = String::with_capacity(160);
    write_line(&mut out, r);
    out
}

fn write_line(out: &mut String, r: &LogRecord<'_>) {
    // Written field by field with `itoa` rather than `write!`: this runs once per request.
    let done = r.start.checked_add(r.elapsed).unwrap_or(r.start);
    let since = done.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (hier, peer) = match r.peer {
        Some(p) => ("HIER_DIRECT/", host_of(p)),
        None => ("HIER_NONE/", "-"),
    };
    let ct = if r.content_type.is_empty() {
        "-"
    } else {
        r.content_type
    };
    let mut n = itoa::Buffer::new();
    out.push_str(n.format(since.as_secs()));
    out.push('.');
    let ms = since.subsec_millis();
    if ms < 100 {
        out.push('0');
    }
    if ms < 10 {
        out.push('0');
    }
    out.push_str(n.format(ms));
    out.push(' ');
    let elapsed = n.format(r.elapsed.as_millis());
    for _ in elapsed.len()..6 {
        out.push(' ');
    }
    out.push_str(elapsed);
    out.push(' ');
    let mut ip = itoa::Buffer::new();
    push_ip(out, r.client, &mut ip);
    out.push(' ');
    out.push_str(r.outcome.as_str());
    if r.aborted {
        out.push_str("_ABORTED");
    }
    out.push('/');
    let status = n.format(r.status);
    for _ in status.len()..3 {
        out.push('0');
    }
    out.push_str(status);
    out.push(' ');
    out.push_str(n.format(r.bytes));
    out.push(' ');
    out.push_str(r.method);
    out.push(' ');
    // URLs and types come from the network: never let them break the line format.
    if !r.url_host.is_empty() {
        out.push_str("http://");
        out.push_str(&sanitize(r.url_host));
    }
    out.push_str(&sanitize(r.url));
    out.push_str(" - ");
    out.push_str(hier);
    out.push_str(peer);
    out.push(' ');
    out.push_str(&sanitize(ct));
    out.push(' ');
    out.push_str(r.protocol);
}

/// `host` of `host:port` or `[v6]:port` (Squid's hierarchy field names the host alone).
fn host_of(peer: &str) -> &str {
    if let Some(rest) = peer.strip_prefix('[') {
        return rest.split_once(']').map_or(peer, |(h, _)| h);
    }
    match peer.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => peer,
    }
}

fn push_ip(out: &mut String, ip: IpAddr, buf: &mut itoa::Buffer) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                out.push_str(buf.format(*octet));
            }
        }
        IpAddr::V6(v6) => {
            use std::fmt::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
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

struct Inner {
    buf: Mutex<String>,
    stop: AtomicBool,
    /// Set by [`AccessLog::reopen`], taken by the writer.
    reopen: AtomicBool,
    reopen_failed: AtomicU64,
}

/// Where log lines go.
pub struct AccessLog {
    inner: Option<Arc<Inner>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    dropped: AtomicU64,
    /// What [`AccessLog::open`] was given.
    target: String,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog")
            .field("enabled", &self.inner.is_some())
            .finish()
    }
}

impl AccessLog {
    /// `"-"`: standard output; `""`: nowhere; otherwise a file opened for appending.
    pub fn open(target: &str) -> std::io::Result<AccessLog> {
        AccessLog::open_as(target, "log.access")
    }

    /// Like [`AccessLog::open`], for the log configured as `key` (which errors name, and
    /// which names the writer thread): the replayable trace shares this writer.
    pub fn open_as(target: &str, key: &'static str) -> std::io::Result<AccessLog> {
        let mut out: Box<dyn Write + Send> = match target {
            "" => {
                return Ok(AccessLog {
                    inner: None,
                    writer: Mutex::new(None),
                    dropped: AtomicU64::new(0),
                    target: String::new(),
                })
            }
            "-" => Box::new(std::io::stdout()),
            path => Box::new(append_to(path)?),
        };
        let inner = Arc::new(Inner {
            buf: Mutex::new(String::with_capacity(64 * 1024)),
            stop: AtomicBool::new(false),
            reopen: AtomicBool::new(false),
            reopen_failed: AtomicU64::new(0),
        });
        let writer = Arc::clone(&inner);
        let path = (target != "-").then(|| target.to_string());
        let handle = std::thread::Builder::new()
            .name(format!("trove-{}", key.replace('.', "-")))
            .spawn(move || {
                let mut spare = String::with_capacity(64 * 1024);
                loop {
                    let stopping = writer.stop.load(Ordering::Acquire);
                    let reopening = writer.reopen.swap(false, Ordering::AcqRel);
                    std::mem::swap(&mut *writer.buf.lock(), &mut spare);
                    if !spare.is_empty() {
                        let _ = out.write_all(spare.as_bytes());
                        let _ = out.flush();
                        spare.clear();
                    }
                    if reopening {
                        if let Some(path) = &path {
                            match append_to(path) {
                                Ok(f) => out = Box::new(f),
                                Err(e) => {
                                    writer.reopen_failed.fetch_add(1, Ordering::Relaxed);
                                    tracing::error!(
                                        "{key}: cannot reopen {path:?}: {e}; still writing to the file open before"
                                    );
                                }
                            }
                        }
                    }
                    if stopping {
                        return;
                    }
                    std::thread::park_timeout(FLUSH_EVERY);
                }
            })?;
        Ok(AccessLog {
            inner: Some(inner),
            writer: Mutex::new(Some(handle)),
            dropped: AtomicU64::new(0),
            target: target.to_string(),
        })
    }

    /// What the log was opened on (`"-"`, `""` or a path).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Writes out what is buffered, then opens the path again (log rotation). Returns at
    /// once; the writer does it within moments.
    pub fn reopen(&self) {
        let Some(inner) = &self.inner else { return };
        inner.reopen.store(true, Ordering::Release);
        if let Some(w) = &*self.writer.lock() {
            w.thread().unpark();
        }
    }

    /// Times the path could not be opened again.
    pub fn reopen_failures(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |i| i.reopen_failed.load(Ordering::Relaxed))
    }

    /// Writes out every buffered line and stops the writer; lines logged after this are
    /// dropped. For a graceful stop (the process may exit without dropping the log).
    pub fn close(&self) {
        if let Some(inner) = &self.inner {
            inner.stop.store(true, Ordering::Release);
        }
        if let Some(w) = self.writer.lock().take() {
            w.thread().unpark();
            let _ = w.join();
        }
    }

    /// Appends one line.
    pub fn log(&self, r: &LogRecord<'_>) {
        self.append(|buf| write_line(buf, r));
    }

    /// Whether lines go anywhere (`""` sends them nowhere).
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Appends one line that `write` writes (without its newline) into the buffer the
    /// writer thread takes: the same writer, rotation and bound serve another line format
    /// (the replayable trace, `crate::trace`).
    pub fn append(&self, write: impl FnOnce(&mut String)) {
        let Some(inner) = &self.inner else { return };
        let mut buf = inner.buf.lock();
        if buf.len() > MAX_BUFFER {
            drop(buf);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        write(&mut buf);
        buf.push('\n');
    }

    /// Lines dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        // Write what is buffered before going away.
        self.close();
    }
}

fn append_to(path: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
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
            url_host: "",
            url: "http://example.com/a b",
            peer: Some("example.com"),
            content_type: "text/html",
            aborted: false,
            protocol: "HTTP/1.1",
        });
        assert_eq!(
            line,
            "1066036250.232     11 127.0.0.1 TCP_MISS/200 1543 GET http://example.com/a_b - HIER_DIRECT/example.com text/html HTTP/1.1"
        );
    }

    /// Squid's meaning: the time a line carries is the exchange's completion, the result
    /// code says when the client went away first, and the hierarchy names the host alone.
    #[test]
    fn completion_time_aborted_and_the_host_without_its_port_like_squid() {
        let record = |peer, aborted| LogRecord {
            start: UNIX_EPOCH + Duration::from_millis(1_066_036_250_221),
            elapsed: Duration::from_millis(1_500),
            client: "127.0.0.1".parse().unwrap(),
            outcome: Outcome::Miss,
            status: 200,
            bytes: 10,
            method: "POST",
            url_host: "",
            url: "http://example.com/up",
            peer: Some(peer),
            content_type: "-",
            aborted,
            protocol: "HTTP/2",
        };
        assert_eq!(
            format_line(&record("127.0.0.1:23080", true)),
            "1066036251.721   1500 127.0.0.1 TCP_MISS_ABORTED/200 10 POST http://example.com/up - HIER_DIRECT/127.0.0.1 - HTTP/2"
        );
        for (peer, host) in [
            ("example.com:8080", "example.com"),
            ("example.com", "example.com"),
            ("[::1]:8080", "::1"),
            ("[::1]", "::1"),
            ("::1", "::1"),
        ] {
            assert_eq!(host_of(peer), host, "{peer}");
        }
    }

    #[test]
    fn fields_are_padded_like_squid() {
        let line = format_line(&LogRecord {
            start: UNIX_EPOCH + Duration::from_millis(1_000_000_007),
            elapsed: Duration::from_millis(1_234_567),
            client: "::1".parse().unwrap(),
            outcome: Outcome::MemHit,
            status: 4,
            bytes: 0,
            method: "HEAD",
            url_host: "h",
            url: "/p?q",
            peer: None,
            content_type: "",
            aborted: false,
            protocol: "-",
        });
        assert_eq!(
            line,
            "1001234.574 1234567 ::1 TCP_MEM_HIT/004 0 HEAD http://h/p?q - HIER_NONE/- - -"
        );
    }
}
