//! What a log does not say, assumed in the open (seed 003 §IV.A). A Squid or CLF log has no
//! response headers, so the replay's origin answers from these documented, switchable rules:
//!
//! - URLs with `?` or `cgi-bin` are dynamic and uncachable (`--cache-dynamic` turns that off);
//! - every other response is fresh for `freshness` (default one hour) and carries a
//!   validator, so a stale object is revalidated; the validator changes with the object's
//!   size where the trace gives it (CSV, synthetic), and never for a log (whose byte counts
//!   include header bytes that differ between a hit and a miss of the same object);
//! - `cookie_fraction` of (client, URL) pairs send a `Cookie` (the paper's modem trace: 30%),
//!   so the cookie policy has something to decide.
//!
//! An object's size is the record's when the format knows it (CSV, synthetic); for a log it
//! is the largest byte count seen so far for the URL, and a record with fewer bytes than that
//! is a transfer the client aborted (seed 003 §IV.B infers aborts the same way, from
//! `Content-Length` against bytes received).

use std::time::Duration;

use serde::Serialize;

/// The assumptions (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assumptions {
    /// `?` and `cgi-bin` URLs are uncachable.
    pub dynamic_uncachable: bool,
    /// Freshness lifetime given to cachable responses.
    #[serde(serialize_with = "secs")]
    pub freshness: Duration,
    /// Fraction of (client, URL) pairs whose requests carry a cookie.
    pub cookie_fraction: f64,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for Assumptions {
    fn default() -> Self {
        Assumptions {
            dynamic_uncachable: true,
            freshness: Duration::from_secs(3600),
            cookie_fraction: 0.0,
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
