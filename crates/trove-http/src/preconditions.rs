//! Answering a client's own conditional request from a stored response
//! (RFC 9110 §13.2.2, RFC 9111 §4.3.2), and the header fields of the 304 the
//! cache then sends (RFC 9110 §15.4.5). `If-Range` belongs to
//! [`crate::range`].

use http::{header, HeaderMap, Method, StatusCode};

use crate::etag::{response_etag, EntityTagList};
use crate::field::date_field;

/// The outcome of evaluating the preconditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precondition {
    /// No precondition stops the request: serve the stored response (or
    /// range).
    Proceed,
    /// Answer 304 Not Modified, with [`not_modified_headers`].
    NotModified,
    /// Answer 412 Precondition Failed.
    Failed,
}

impl Precondition {
    /// A short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Precondition::Proceed => "proceed",
            Precondition::NotModified => "not-modified",
            Precondition::Failed => "failed",
        }
    }
}

/// Evaluates `If-Match`, `If-Unmodified-Since`, `If-None-Match` and
/// `If-Modified-Since` in the order of RFC 9110 §13.2.2 against the stored
/// response the cache would otherwise send.
///
/// * Preconditions are ignored when the stored status is not 2xx (§13.2.1).
/// * `If-Match` uses strong comparison, `If-None-Match` weak (§13.1.1-2).
/// * Date conditions are ignored when not a single valid HTTP-date.
/// * `If-Modified-Since` applies only to GET and HEAD, only without
///   `If-None-Match`, and compares against `Last-Modified` or, as RFC 9111
///   §4.3.2 asks of a cache, the stored `Date` when there is none.
pub fn evaluate(
    method: &Method,
    req_headers: &HeaderMap,
    stored_status: StatusCode,
    stored_headers: &HeaderMap,
) -> Precondition {
    if !stored_status.is_success() {
        return Precondition::Proceed;
    }
    let etag = response_etag(stored_headers);
    // Parsed only when a date condition asks (most requests carry none: a hit should not
    // pay for parsing the stored `Last-Modified`).
    let last_modified = || date_field(stored_headers, &header::LAST_MODIFIED);
    let get_or_head = *method == Method::GET || *method == Method::HEAD;

    if let Some(list) = EntityTagList::from_headers(req_headers, &header::IF_MATCH) {
        let matched = match list {
            EntityTagList::Any => true,
            EntityTagList::Tags(tags) => etag
                .as_ref()
                .is_some_and(|e| tags.iter().any(|t| t.strong_eq(e))),
        };
        if !matched {
            return Precondition::Failed;
        }
    } else if let Some(since) = date_field(req_headers, &header::IF_UNMODIFIED_SINCE) {
        if last_modified().is_some_and(|lm| lm > since) {
            return Precondition::Failed;
        }
    }

    if let Some(list) = EntityTagList::from_headers(req_headers, &header::IF_NONE_MATCH) {
        let matched = match list {
            EntityTagList::Any => true,
            EntityTagList::Tags(tags) => etag
                .as_ref()
                .is_some_and(|e| tags.iter().any(|t| t.weak_eq(e))),
        };
        return match (matched, get_or_head) {
            (false, _) => Precondition::Proceed,
            (true, true) => Precondition::NotModified,
            (true, false) => Precondition::Failed,
        };
    }

    if get_or_head {
        if let Some(since) = date_field(req_headers, &header::IF_MODIFIED_SINCE) {
            let modified = last_modified().or_else(|| date_field(stored_headers, &header::DATE));
            if modified.is_some_and(|m| m <= since) {
                return Precondition::NotModified;
            }
        }
    }
    Precondition::Proceed
}

/// Fields a 304 must carry when the 200 would have had them (RFC 9110
/// §15.4.5): `Cache-Control`, `Content-Location`, `Date`, `ETag`,
/// `Expires`, `Vary`, plus `Last-Modified` when there is no `ETag` (it then
/// guides the client's cache update). The proxy adds `Age`.
pub fn not_modified_headers(stored_resp: &HeaderMap) -> HeaderMap {
    let mut names = vec![
        header::CACHE_CONTROL,
        header::CONTENT_LOCATION,
        header::DATE,
        header::ETAG,
        header::EXPIRES,
        header::VARY,
    ];
    if !stored_resp.contains_key(header::ETAG) {
        names.push(header::LAST_MODIFIED);
    }
    let mut out = HeaderMap::new();
    for name in names {
        for value in stored_resp.get_all(&name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    const OLD: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const LM: &str = "Mon, 07 Nov 1994 08:49:37 GMT";
    const NEW: &str = "Tue, 08 Nov 1994 08:49:37 GMT";

    fn h(pairs: &[(&str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (n, v) in pairs {
            m.append(
                HeaderName::from_bytes(n.as_bytes()).expect("name"),
                HeaderValue::from_static(v),
            );
        }
        m
    }

    fn stored() -> HeaderMap {
        h(&[("etag", "\"v1\""), ("last-modified", LM), ("date", NEW)])
    }

    fn eval(method: Method, req: &[(&str, &'static str)]) -> Precondition {
        evaluate(&method, &h(req), StatusCode::OK, &stored())
    }

    #[test]
    fn if_none_match_uses_weak_comparison_9110_13_1_2() {
        assert_eq!(
            eval(Method::GET, &[("if-none-match", "W/\"v1\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(Method::GET, &[("if-none-match", "\"x\", \"v1\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(Method::HEAD, &[("if-none-match", "*")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(Method::GET, &[("if-none-match", "\"v2\"")]),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_none_match_on_other_methods_fails_9110_13_2_2() {
        assert_eq!(
            eval(Method::DELETE, &[("if-none-match", "\"v1\"")]),
            Precondition::Failed
        );
    }

    #[test]
    fn if_none_match_takes_precedence_over_if_modified_since_9110_13_1_3() {
        // The ETag differs, so IMS (which would say 304) is not evaluated.
        assert_eq!(
            eval(
                Method::GET,
                &[("if-none-match", "\"v2\""), ("if-modified-since", NEW)]
            ),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_modified_since_compares_last_modified_9110_13_1_3() {
        assert_eq!(
            eval(Method::GET, &[("if-modified-since", LM)]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(Method::GET, &[("if-modified-since", NEW)]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(Method::GET, &[("if-modified-since", OLD)]),
            Precondition::Proceed
        );
        // Only for GET and HEAD.
        assert_eq!(
            eval(Method::POST, &[("if-modified-since", NEW)]),
            Precondition::Proceed
        );
    }

    #[test]
    fn invalid_if_modified_since_is_ignored_9110_13_1_3() {
        for bad in [
            "garbage",
            "0",
            "Mon, 07 Nov 1994 08:49:37 GMT, Mon, 07 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(
                eval(Method::GET, &[("if-modified-since", bad)]),
                Precondition::Proceed,
                "{bad}"
            );
        }
    }

    #[test]
    fn cache_uses_date_when_no_last_modified_9111_4_3_2() {
        let s = h(&[("date", LM)]);
        let req = h(&[("if-modified-since", NEW)]);
        assert_eq!(
            evaluate(&Method::GET, &req, StatusCode::OK, &s),
            Precondition::NotModified
        );
        assert_eq!(
            evaluate(&Method::GET, &req, StatusCode::OK, &h(&[])),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_match_uses_strong_comparison_9110_13_1_1() {
        assert_eq!(
            eval(Method::GET, &[("if-match", "\"v1\"")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval(Method::GET, &[("if-match", "*")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval(Method::GET, &[("if-match", "W/\"v1\"")]),
            Precondition::Failed
        );
        assert_eq!(
            eval(Method::GET, &[("if-match", "\"v2\"")]),
            Precondition::Failed
        );
        let weak_stored = h(&[("etag", "W/\"v1\"")]);
        let req = h(&[("if-match", "\"v1\"")]);
        assert_eq!(
            evaluate(&Method::GET, &req, StatusCode::OK, &weak_stored),
            Precondition::Failed
        );
    }

    #[test]
    fn if_unmodified_since_fails_when_modified_later_9110_13_1_4() {
        assert_eq!(
            eval(Method::GET, &[("if-unmodified-since", OLD)]),
            Precondition::Failed
        );
        assert_eq!(
            eval(Method::GET, &[("if-unmodified-since", LM)]),
            Precondition::Proceed
        );
        // Ignored with If-Match, or when invalid.
        assert_eq!(
            eval(
                Method::GET,
                &[("if-match", "\"v1\""), ("if-unmodified-since", OLD)]
            ),
            Precondition::Proceed
        );
        assert_eq!(
            eval(Method::GET, &[("if-unmodified-since", "nope")]),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_match_is_evaluated_before_if_none_match_9110_13_2_2() {
        assert_eq!(
            eval(
                Method::GET,
                &[("if-match", "\"v2\""), ("if-none-match", "\"v1\"")]
            ),
            Precondition::Failed
        );
    }

    #[test]
    fn preconditions_ignored_for_non_2xx_stored_response_9110_13_2_1() {
        let req = h(&[("if-none-match", "\"v1\"")]);
        assert_eq!(
            evaluate(&Method::GET, &req, StatusCode::NOT_FOUND, &stored()),
            Precondition::Proceed
        );
    }

    #[test]
    fn not_modified_carries_validators_and_cache_fields_9110_15_4_5() {
        let s = h(&[
            ("etag", "\"v1\""),
            ("last-modified", LM),
            ("cache-control", "max-age=60"),
            ("vary", "accept-encoding"),
            ("date", NEW),
            ("content-type", "text/html"),
            ("content-length", "42"),
            ("content-location", "/a"),
            ("expires", NEW),
        ]);
        let out = not_modified_headers(&s);
        let mut names: Vec<&str> = out.keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "cache-control",
                "content-location",
                "date",
                "etag",
                "expires",
                "vary"
            ]
        );
        let no_etag = not_modified_headers(&h(&[("last-modified", LM)]));
        assert!(no_etag.contains_key(header::LAST_MODIFIED));
    }
}
