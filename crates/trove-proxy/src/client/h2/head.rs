//! An HTTP/2 request's head as the cache path takes it: the same
//! [`RequestHead`](crate::client::head::RequestHead) an HTTP/1 request becomes, so the one
//! target parser (`cache::target::resolve`) reads both and the cache key is the same
//! whichever protocol asked.
//!
//! - `:authority` stands for `Host` (RFC 9113 §8.3.1): put in as `Host` when the request
//!   has none, refused (400) when both are there and differ.
//! - A reverse proxy's target is origin-form (the path and query), as an HTTP/1 client
//!   sends it, so the key comes from `Host` alike; a forward proxy keeps the absolute URL.
//! - `cookie` crumbs are joined with `; ` (RFC 9113 §8.2.3), as HTTP/1 sends one field.
//! - trove's own limits on a head (`[limits] max_head_bytes`, counted as RFC 9113 §6.5.2
//!   does, and `max_headers`) answer 431, logged, as for HTTP/1.

use http::header::{CONTENT_LENGTH, COOKIE, EXPECT, HOST};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, Version};

use crate::client::head::{Framing, HeadLimits, RequestHead};
use crate::settings::Mode;

/// Why a stream's head was refused: the status and a short reason.
pub type Refusal = (StatusCode, &'static str);

/// The head of a stream's request, and whether it was refused. The head is built even
/// when refused, for the log line.
pub fn request_head(
    parts: http::request::Parts,
    end_stream: bool,
    mode: Mode,
    limits: HeadLimits,
) -> (RequestHead, Option<Refusal>) {
    let http::request::Parts {
        method,
        uri,
        mut headers,
        ..
    } = parts;
    let mut refusal = None;
    // RFC 9113 §6.5.2: each field counts its name, its value and 32.
    let size: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 32)
        .sum();
    if size > limits.max_head_bytes || headers.len() > limits.max_headers {
        refusal = Some((
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request head too large",
        ));
    }
    join_cookies(&mut headers);
    if let Some(authority) = uri.authority() {
        match headers.get(HOST) {
            None => {
                if let Ok(v) = HeaderValue::from_str(authority.as_str()) {
                    headers.insert(HOST, v);
                }
            }
            Some(h)
                if !h
                    .as_bytes()
                    .eq_ignore_ascii_case(authority.as_str().as_bytes()) =>
            {
                refusal.get_or_insert((StatusCode::BAD_REQUEST, ":authority and Host differ"));
            }
            Some(_) => {}
        }
    }
    if headers.get_all(HOST).iter().count() > 1 {
        refusal.get_or_insert((
            StatusCode::BAD_REQUEST,
            "exactly one Host field is required",
        ));
    }
    if method == Method::CONNECT {
        refusal.get_or_insert((StatusCode::NOT_IMPLEMENTED, "CONNECT over HTTP/2"));
    }
    let target = match mode {
        Mode::Reverse => uri
            .path_and_query()
            .map(|pq| Uri::from(pq.clone()))
            .unwrap_or_else(|| Uri::from_static("/")),
        Mode::Forward => uri,
    };
    let framing = if end_stream {
        Framing::None
    } else {
        match trove_http::content_length::parse_all(headers.get_all(CONTENT_LENGTH)) {
            Ok(Some(0)) => Framing::None,
            Ok(Some(n)) => {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(n));
                Framing::Length(n)
            }
            // A length is not needed: DATA frames end with END_STREAM.
            Ok(None) => Framing::Chunked,
            Err(_) => {
                refusal.get_or_insert((StatusCode::BAD_REQUEST, "invalid Content-Length"));
                Framing::None
            }
        }
    };
    let expect_continue = !end_stream
        && headers
            .get(EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let head = RequestHead {
        method,
        target,
        version: Version::HTTP_2,
        headers,
        framing,
        keep_alive: true,
        expect_continue,
    };
    (head, refusal)
}

/// One `cookie` field from its crumbs.
fn join_cookies(headers: &mut HeaderMap) {
    let mut crumbs = headers.get_all(COOKIE).iter();
    if crumbs.next().is_none() || crumbs.next().is_none() {
        return;
    }
    let joined: Vec<&[u8]> = headers
        .get_all(COOKIE)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    if let Ok(v) = HeaderValue::from_bytes(&joined.join(&b"; "[..])) {
        headers.insert(COOKIE, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, fields: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().method("GET").uri(uri);
        for (k, v) in fields {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn limits() -> HeadLimits {
        HeadLimits::default()
    }

    #[test]
    fn reverse_targets_are_origin_form_with_host_from_authority() {
        let (h, r) = request_head(
            parts("https://Example.com/a?b", &[]),
            true,
            Mode::Reverse,
            limits(),
        );
        assert!(r.is_none());
        assert_eq!(h.target, "/a?b");
        assert_eq!(h.headers[HOST], "Example.com");
        assert_eq!(h.version, Version::HTTP_2);
        assert_eq!(h.framing, Framing::None);
    }

    #[test]
    fn forward_targets_stay_absolute() {
        let (h, r) = request_head(
            parts("http://origin.example/x", &[]),
            true,
            Mode::Forward,
            limits(),
        );
        assert!(r.is_none());
        assert_eq!(h.target, "http://origin.example/x");
    }

    #[test]
    fn authority_and_host_must_agree_9113_8_3_1() {
        let (_, r) = request_head(
            parts("https://a.example/", &[("host", "b.example")]),
            true,
            Mode::Reverse,
            limits(),
        );
        assert_eq!(r.unwrap().0, StatusCode::BAD_REQUEST);
        let (_, r) = request_head(
            parts("https://a.example/", &[("host", "A.example")]),
            true,
            Mode::Reverse,
            limits(),
        );
        assert!(r.is_none());
    }

    #[test]
    fn cookie_crumbs_are_joined_9113_8_2_3() {
        let (h, _) = request_head(
            parts("https://a/", &[("cookie", "a=1"), ("cookie", "b=2")]),
            true,
            Mode::Reverse,
            limits(),
        );
        assert_eq!(h.headers.get_all(COOKIE).iter().count(), 1);
        assert_eq!(h.headers[COOKIE], "a=1; b=2");
    }

    #[test]
    fn big_heads_and_bad_lengths_are_refused() {
        let big = "x".repeat(70_000);
        let (_, r) = request_head(
            parts("https://a/", &[("x-big", &big)]),
            true,
            Mode::Reverse,
            limits(),
        );
        assert_eq!(r.unwrap().0, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let (_, r) = request_head(
            parts("https://a/", &[("content-length", "1, 2")]),
            false,
            Mode::Reverse,
            limits(),
        );
        assert_eq!(r.unwrap().0, StatusCode::BAD_REQUEST);
        let (h, r) = request_head(
            parts("https://a/", &[("content-length", "5")]),
            false,
            Mode::Reverse,
            limits(),
        );
        assert!(r.is_none());
        assert_eq!(h.framing, Framing::Length(5));
    }
}
