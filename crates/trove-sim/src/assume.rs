//! What a log does not say, assumed in the open (seed 003 §IV.A). A Squid or CLF log has no
//! response headers, so the replay's origin answers from these documented, switchable rules:
//!
//! - URLs with `?` or `cgi-bin` are dynamic and uncachable (`--cache-dynamic` turns that
//!   off), unless the log is trove's own (below);
//! - every other response is fresh for `freshness` (default one hour) and carries a
//!   validator, so a stale object is revalidated; the validator changes with the object's
//!   size where the trace gives it (CSV, synthetic), and never for a log;
//! - `cookie_fraction` of (client, URL) pairs send a `Cookie` (the paper's modem trace: 30%),
//!   so the cookie policy has something to decide.
//!
//! **Whose log** ([`Assume`], `--assume`). Replaying trove's own log should give back what
//! trove did, so for it the replay follows trove rather than seed 003: `?` URLs are cachable
//! as trove caches them (when the origin allows, which a log cannot say; trove's own log of
//! a reverse proxy whose pages all have query strings replayed at a 0.02% hit ratio under
//! the paper's rule), and the response head taken off each byte count is the one trove
//! sends with the logged result. `auto`, the default, recognises trove's log by its
//! hierarchy field and result codes (`trace::squid::writer`).
//!
//! **The response head** ([`Head`]). A Squid log's byte count is what the client received,
//! head included; a CLF log's (`%b`) is the body alone. Charging the head as body made every
//! replayed object a few hundred bytes larger than the one stored, and under eviction
//! pressure the replay of trove's own log disagreed with trove on 7-8% of requests. The
//! replay takes off what the cache added to the head: for trove, exactly what trove sends
//! with the logged result code (status line, `Age`, `Cache-Status`, `Accept-Ranges`,
//! `Content-Length`), for Squid an estimate of its own fields; and the header fields the
//! replay's origin sends, which the store charges as trove's store charged the origin's.
//! So a stored object is charged what trove charged for it, whatever the origin's real
//! headers were (they are in the byte count, and the charge is the byte count less what
//! the cache added).
//!
//! An object's size is the record's when the format knows it (CSV, synthetic); for a log it
//! is the largest body seen so far for the URL, and a record with fewer bytes than that
//! is a transfer the client aborted (seed 003 §IV.B infers aborts the same way, from
//! `Content-Length` against bytes received).

use std::time::Duration;

use serde::Serialize;

/// Whose log is replayed (`--assume`): what is assumed of what it does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Assume {
    /// trove's own when the log looks like trove's, else another's.
    #[default]
    Auto,
    /// trove's own access log: follow what trove did (`?` URLs cachable, trove's head taken
    /// off each byte count).
    Trove,
    /// Another cache's or server's log: seed 003's rules (`?` and `cgi-bin` uncachable).
    Other,
}

/// What a record's byte count holds besides the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Head {
    /// Nothing: the body alone (CLF's `%b`; CSV, binary and synthetic traces' sizes).
    None,
    /// The head trove sends with the logged result code.
    Trove,
    /// A Squid response head: the origin's fields (charged, as trove stores them) and
    /// about [`SQUID_FIELDS`] bytes of Squid's own.
    Squid,
}

/// What Squid adds to a response head besides the status line and `Content-Length`, by
/// estimate: `Via: 1.1 host (squid/6.x)`, `X-Cache: MISS from host`, `X-Cache-Lookup: …`,
/// `Connection: keep-alive`, with a host name of about 20 characters.
pub const SQUID_FIELDS: u64 = 150;

/// The assumptions (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assumptions {
    /// Whose log this is, as decided (never `Auto`).
    pub log: Assume,
    /// Why: what `--assume` said, or what `auto` recognised.
    pub log_reason: String,
    /// What byte counts hold besides bodies.
    pub head: Head,
    /// `?` and `cgi-bin` URLs are uncachable.
    pub dynamic_uncachable: bool,
    /// Freshness lifetime given to cachable responses.
    #[serde(serialize_with = "secs")]
    pub freshness: Duration,
    /// Fraction of (client, URL) pairs whose requests carry a cookie.
    pub cookie_fraction: f64,
    /// URLs replayed as uncachable whatever else is assumed: with `--never-hit-uncachable`,
    /// those trove's own log shows fetched from the origin every time, twice or more.
    #[serde(serialize_with = "count")]
    pub uncachable: std::sync::Arc<std::collections::HashSet<Box<str>>>,
}

fn count<S: serde::Serializer>(
    set: &std::sync::Arc<std::collections::HashSet<Box<str>>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_u64(set.len() as u64)
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for Assumptions {
    fn default() -> Self {
        Assumptions {
            log: Assume::Other,
            log_reason: String::new(),
            head: Head::None,
            dynamic_uncachable: true,
            freshness: Duration::from_secs(3600),
            cookie_fraction: 0.0,
            uncachable: Default::default(),
        }
    }
}

impl Assumptions {
    /// Whether a URL looks dynamic (seed 003: "usually identified by the presence of
    /// `cgi-bin` or `?` in the URL").
    pub fn is_dynamic(url: &str) -> bool {
        memchr::memchr(b'?', url.as_bytes()).is_some()
            || memchr::memmem::find(url.as_bytes(), b"cgi-bin").is_some()
    }

    /// Whether this client's requests for this URL carry a cookie: a stable hash of the pair
    /// against the fraction, so the same pair always does or never does.
    pub fn has_cookie(&self, client: &str, url: &str) -> bool {
        if self.cookie_fraction <= 0.0 {
            return false;
        }
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(
            url.as_bytes(),
            trove_store::hash::key_hash(client),
        );
        (h >> 11) as f64 / (1u64 << 53) as f64 <= self.cookie_fraction
    }
}

/// What a log cannot tell, for the report.
pub const UNKNOWABLE: &str = "response headers (Vary, no-store, private, max-age, Expires, \
validators, cookies), so cachability and freshness are assumed; the exact size of each \
response head (taken off each byte count by estimate); whether an origin's object changed \
between two requests; keep-alive and connection reuse; requests answered from another's \
fetch (collapsed)";

impl Head {
    /// The header fields the logging cache added to a response with `status` and result
    /// code `result`, besides the status line and `Content-Length` (bytes on the wire).
    pub fn added(self, result: &str, status: u16) -> u64 {
        match self {
            Head::None => 0,
            Head::Trove => trove_fields(result, status),
            Head::Squid => SQUID_FIELDS,
        }
    }

    /// The body in `bytes` a record logged, for a response with `status` to which the
    /// cache added `added` bytes of fields ([`Head::added`]) and whose stored header fields
    /// (as the replay's store charges them: name, value and 4 bytes each) come to
    /// `stored_fields`. Never more than `bytes`; 0 for a head alone (a `HEAD`, a 304).
    pub fn body(self, bytes: u64, status: u16, added: u64, stored_fields: u64) -> u64 {
        if self == Head::None {
            return bytes;
        }
        // The status line and the blank line that ends the head.
        let fixed = status_line(status) + 2 + stored_fields + added;
        without_length_field(bytes.saturating_sub(fixed))
    }
}

/// `HTTP/1.1 200 OK\r\n`.
fn status_line(status: u16) -> u64 {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Unknown");
    13 + reason.len() as u64 + 2
}

/// `rest` less its `content-length: n\r\n`, where `n` is what is left.
fn without_length_field(rest: u64) -> u64 {
    for digits in 1..=20u64 {
        let Some(body) = rest.checked_sub(18 + digits) else {
            return 0;
        };
        if decimal_digits(body) == digits {
            return body;
        }
    }
    0
}

fn decimal_digits(mut n: u64) -> u64 {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// The fields trove sends on a stored response besides the stored ones: `age`,
/// `cache-status` (as trove renders it for the result), `accept-ranges` on a 200
/// (trove-proxy's `cache::deliver`). A hit's `Age` is taken as one digit: its byte count
/// may then be a digit or three short of the object's, which the replay forgives (see
/// `Replay::feed`); a miss's is `0`.
pub fn trove_fields(result: &str, status: u16) -> u64 {
    use trove_cache::{CacheStatus, Fwd};
    let base = result
        .strip_suffix("_ABORTED")
        .or_else(|| result.strip_suffix("_TIMEDOUT"))
        .unwrap_or(result);
    let cache_status = match base {
        "TCP_MEM_HIT" | "TCP_HIT" | "TCP_CF_HIT" | "TCP_STALE_HIT" | "TCP_IMS_HIT"
        | "TCP_NEGATIVE_HIT" => CacheStatus::HIT,
        "TCP_REFRESH_UNMODIFIED" => CacheStatus::forward(Fwd::Stale).with_fwd_status(304),
        "TCP_REFRESH_MODIFIED" => CacheStatus {
            stored: true,
            ..CacheStatus::forward(Fwd::Stale).with_fwd_status(status)
        },
        "TCP_CLIENT_REFRESH_MISS" => CacheStatus {
            stored: true,
            ..CacheStatus::forward(Fwd::Request).with_fwd_status(status)
        },
        _ => CacheStatus {
            stored: true,
            ..CacheStatus::forward(Fwd::UriMiss).with_fwd_status(status)
        },
    };
    let field = |name: &str, value: usize| (name.len() + value + 4) as u64;
    let accept_ranges = if status == 200 {
        field("accept-ranges", "bytes".len())
    } else {
        0
    };
    field("age", 1) + field("cache-status", cache_status.header_value(None).len()) + accept_ranges
}

/// Whether a result code is a hit, whose byte count says less of the object's size than a
/// miss's (see [`trove_fields`]).
pub fn is_hit_result(result: &str) -> bool {
    result.contains("_HIT") || result.starts_with("TCP_REFRESH_UNMODIFIED")
}

/// A content type for a URL's extension, for logs that record none (the cookie policy may
/// treat images differently).
pub fn guess_type(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    if ext.len() > 5 {
        return "";
    }
    match ext.to_ascii_lowercase().as_str() {
        "gif" => "image/gif",
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "svg" => "image/svg+xml",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "js" => "text/javascript",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_urls_and_types() {
        assert!(Assumptions::is_dynamic("http://a/b?c=1"));
        assert!(Assumptions::is_dynamic("http://a/cgi-bin/x"));
        assert!(!Assumptions::is_dynamic("http://a/b.gif"));
        assert_eq!(guess_type("http://a/b.GIF"), "image/gif");
        assert_eq!(guess_type("http://a/b"), "");
    }

    /// What trove sent for a stored miss and a hit of a 1000-byte `image/gif` (read off
    /// the wire from `trove serve`: 253 and 220 bytes of head), less the stored fields the
    /// replay's origin gives it (content-type, cache-control, etag, via, date: 123 bytes).
    #[test]
    fn trove_s_head_comes_off_its_byte_count() {
        let body = |h: Head, bytes, result| h.body(bytes, 200, h.added(result, 200), 123);
        assert_eq!(body(Head::Trove, 1253, "TCP_MISS"), 1000);
        assert_eq!(body(Head::Trove, 1220, "TCP_MEM_HIT"), 1000);
        // Across a change in the length's digits: 9999 and 10000 bytes.
        assert_eq!(body(Head::Trove, 253 + 9999, "TCP_MISS"), 9999);
        assert_eq!(body(Head::Trove, 254 + 10000, "TCP_MISS"), 10000);
        assert_eq!(body(Head::Trove, 100, "TCP_MISS"), 0, "a head alone");
        assert_eq!(body(Head::None, 1253, "TCP_MISS"), 1253);
        let squid = body(Head::Squid, 1253, "TCP_MISS");
        assert!(squid < 1000, "{squid}");
        assert!(is_hit_result("TCP_MEM_HIT") && is_hit_result("TCP_REFRESH_UNMODIFIED"));
        assert!(!is_hit_result("TCP_MISS") && !is_hit_result("TCP_REFRESH_MODIFIED"));
    }

    #[test]
    fn cookie_fraction_is_about_right_and_stable() {
        let a = Assumptions {
            cookie_fraction: 0.3,
            ..Default::default()
        };
        let n = 20_000;
        let with = (0..n)
            .filter(|i| a.has_cookie("c", &format!("http://x/{i}")))
            .count();
        let f = with as f64 / n as f64;
        assert!((f - 0.3).abs() < 0.02, "{f}");
        assert_eq!(
            a.has_cookie("c", "http://x/1"),
            a.has_cookie("c", "http://x/1")
        );
        assert!(!Assumptions::default().has_cookie("c", "http://x/1"));
    }
}
