//! Validating a stored response with the origin: building the conditional
//! request (RFC 9111 §4.3.1), choosing which stored response a 304 refers to
//! (§4.3.4) and merging the 304's header fields into it (§3.2, §4.3.4,
//! HEAD: §4.3.5).
//!
//! After freshening, the proxy also replaces the stored `request_time` and
//! `response_time` with those of the validation exchange: the 304's `Date`
//! and `Age` (now in the stored headers) then give the new age (§4.2.3).

use http::{header, HeaderMap, HeaderName, HeaderValue};

use crate::connection::connection_fields;
use crate::etag::response_etag;
use crate::field::date_field;

/// The conditional header fields for validating one stored response
/// (§4.3.1): `If-None-Match` with its entity tag, and `If-Modified-Since`
/// with its `Last-Modified` when that is a valid date. Both are sent when
/// both exist, for intermediaries that only understand dates. `Date` is
/// never used in place of `Last-Modified`.
pub fn conditional_headers(stored_resp: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(tag) = response_etag(stored_resp) {
        if let Ok(v) = HeaderValue::from_str(&tag.to_string()) {
            out.insert(header::IF_NONE_MATCH, v);
        }
    }
    if date_field(stored_resp, &header::LAST_MODIFIED).is_some() {
        if let Some(lm) = stored_resp.get(header::LAST_MODIFIED) {
            out.insert(header::IF_MODIFIED_SINCE, lm.clone());
        }
    }
    out
}

/// Does the 304 (or HEAD response) `not_modified` identify `stored` for
/// update? (§4.3.4.)
///
/// * a strong `ETag` in it selects only a stored response with the same
///   strong `ETag`;
/// * a weak `ETag` selects a stored response whose tag matches weakly (when
///   several do, the caller updates the most recent one);
/// * with no `ETag`, a `Last-Modified` selects a stored response with the
///   same `Last-Modified`;
/// * with no validator at all, it selects a stored response that has none
///   either; the caller must also check that this is its only stored
///   response for the URL.
pub fn selects(stored_resp: &HeaderMap, not_modified: &HeaderMap) -> bool {
    let new_has_etag = not_modified.contains_key(header::ETAG);
    if new_has_etag {
        return match (response_etag(not_modified), response_etag(stored_resp)) {
            (Some(new), Some(old)) if !new.weak => new.strong_eq(&old),
            (Some(new), Some(old)) => new.weak_eq(&old),
            _ => false,
        };
    }
    if not_modified.contains_key(header::LAST_MODIFIED) {
        let new = date_field(not_modified, &header::LAST_MODIFIED);
        let old = date_field(stored_resp, &header::LAST_MODIFIED);
        return new.is_some() && new == old;
    }
    !stored_resp.contains_key(header::ETAG) && !stored_resp.contains_key(header::LAST_MODIFIED)
}

/// Header fields never copied from a 304 into the stored response, besides
/// the connection-specific ones: `Content-Length` (§3.2: the 304 has no
/// content, its length would be wrong) and `Content-Range`, which describes
/// the stored bytes and which §3.2 lets a cache leave alone.
const NOT_UPDATED: [HeaderName; 2] = [header::CONTENT_LENGTH, header::CONTENT_RANGE];

/// The stored response's header fields updated with a 304 (§3.2, §4.3.4):
/// every field in the 304 replaces all lines of the same field in the stored
/// response, except connection-specific fields (including those named in
/// the 304's `Connection`), `Content-Length` and `Content-Range`. Fields the
/// 304 lacks are kept. trove stores responses as received, so
/// `Content-Type` and `Content-Encoding` are updated like any other field.
pub fn freshen_headers(stored: &HeaderMap, not_modified: &HeaderMap) -> HeaderMap {
    let mut out = stored.clone();
    let skip = connection_fields(not_modified);
    for name in not_modified.keys() {
        if skip.contains(name) || NOT_UPDATED.contains(name) {
            continue;
        }
        out.remove(name);
        for value in not_modified.get_all(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    const LM: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const LM2: &str = "Mon, 07 Nov 1994 08:49:37 GMT";

    #[test]
    fn sends_etag_and_last_modified_when_both_exist_9111_4_3_1() {
        let c = conditional_headers(&h(&[("etag", "W/\"v1\""), ("last-modified", LM)]));
        assert_eq!(
            c.get(header::IF_NONE_MATCH).map(|v| v.as_bytes()),
            Some(&b"W/\"v1\""[..])
        );
        assert_eq!(
            c.get(header::IF_MODIFIED_SINCE).map(|v| v.as_bytes()),
            Some(LM.as_bytes())
        );
    }

    #[test]
    fn never_uses_date_as_if_modified_since_9111_4_3_1() {
        let c = conditional_headers(&h(&[("date", LM)]));
        assert!(c.is_empty());
        let garbage = conditional_headers(&h(&[("etag", "unquoted"), ("last-modified", "0")]));
        assert!(garbage.is_empty());
    }

    #[test]
    fn strong_etag_selects_only_same_strong_etag_9111_4_3_4() {
        let stored = h(&[("etag", "\"v1\"")]);
        assert!(selects(&stored, &h(&[("etag", "\"v1\"")])));
        assert!(!selects(&stored, &h(&[("etag", "\"v2\"")])));
        assert!(!selects(
            &h(&[("etag", "W/\"v1\"")]),
            &h(&[("etag", "\"v1\"")])
        ));
        assert!(!selects(&h(&[]), &h(&[("etag", "\"v1\"")])));
    }

    #[test]
    fn weak_etag_selects_by_weak_comparison_9111_4_3_4() {
        assert!(selects(
            &h(&[("etag", "\"v1\"")]),
            &h(&[("etag", "W/\"v1\"")])
        ));
        assert!(selects(
            &h(&[("etag", "W/\"v1\"")]),
            &h(&[("etag", "W/\"v1\"")])
        ));
        assert!(!selects(
            &h(&[("etag", "W/\"v1\"")]),
            &h(&[("etag", "W/\"v2\"")])
        ));
    }

    #[test]
    fn last_modified_selects_when_no_etag_9111_4_3_4() {
        let stored = h(&[("last-modified", LM)]);
        assert!(selects(&stored, &h(&[("last-modified", LM)])));
        assert!(!selects(&stored, &h(&[("last-modified", LM2)])));
        assert!(!selects(&stored, &h(&[("last-modified", "garbage")])));
    }

    #[test]
    fn no_validators_select_only_a_response_without_validators_9111_4_3_4() {
        assert!(selects(&h(&[]), &h(&[("date", LM)])));
        assert!(!selects(&h(&[("etag", "\"a\"")]), &h(&[])));
        assert!(!selects(&h(&[("last-modified", LM)]), &h(&[])));
    }

    #[test]
    fn freshening_replaces_fields_except_content_length_9111_3_2() {
        let stored = h(&[
            ("content-length", "100"),
            ("content-type", "text/html"),
            ("cache-control", "max-age=10"),
            ("x-old", "1"),
            ("x-old", "2"),
            ("etag", "\"a\""),
        ]);
        let not_modified = h(&[
            ("content-length", "0"),
            ("cache-control", "max-age=60"),
            ("x-old", "3"),
            ("date", LM2),
        ]);
        let merged = freshen_headers(&stored, &not_modified);
        assert_eq!(
            merged.get("content-length").map(|v| v.as_bytes()),
            Some(&b"100"[..])
        );
        assert_eq!(
            merged.get("cache-control").map(|v| v.as_bytes()),
            Some(&b"max-age=60"[..])
        );
        let olds: Vec<&[u8]> = merged
            .get_all("x-old")
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(olds, vec![&b"3"[..]]);
        assert_eq!(
            merged.get("date").map(|v| v.as_bytes()),
            Some(LM2.as_bytes())
        );
        assert_eq!(
            merged.get("content-type").map(|v| v.as_bytes()),
            Some(&b"text/html"[..])
        );
        assert_eq!(
            merged.get("etag").map(|v| v.as_bytes()),
            Some(&b"\"a\""[..])
        );
    }

    #[test]
    fn freshening_skips_connection_specific_fields_9111_3_1() {
        let stored = h(&[("x-hop", "stored")]);
        let not_modified = h(&[
            ("connection", "x-hop"),
            ("x-hop", "new"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("content-range", "bytes 0-1/2"),
        ]);
        let merged = freshen_headers(&stored, &not_modified);
        assert_eq!(merged.len(), 1);
        assert_eq!(
            merged.get("x-hop").map(|v| v.as_bytes()),
            Some(&b"stored"[..])
        );
    }
}
