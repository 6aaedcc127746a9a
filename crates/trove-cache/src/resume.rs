//! Resuming a reader detached from a shared body (see `trove_store::Body`: a body that is
//! not stored keeps only a bounded buffer, and a reader that falls further behind loses the
//! bytes it still needs). Such a reader may go on with a fetch of its own for the rest of
//! the *same* representation: `Range` from where it is, `If-Range` the response's strong
//! entity tag (RFC 9110 §13.1.5, §14.2), accepted only as a 206 with that tag and exactly
//! the range asked for. Anything else would splice two representations, so the reader is
//! cut off instead, which its client sees as an incomplete response.

use http::header::{self, HeaderValue};
use http::{HeaderMap, StatusCode};
use trove_http::etag::EntityTag;
use trove_http::range::response_content_range;

/// What became of a detached reader; counted by the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detached {
    /// It goes on with a fetch of its own for the rest.
    Resumed,
    /// It could not be resumed: its client's connection is closed before the body's end.
    CutOff,
}

impl Detached {
    pub const ALL: [Detached; 2] = [Detached::Resumed, Detached::CutOff];

    pub fn as_str(self) -> &'static str {
        match self {
            Detached::Resumed => "resumed",
            Detached::CutOff => "cut-off",
        }
    }
}

/// The stored response's strong entity tag, if it has one: only that can make a resumed
/// fetch safe to splice (a weak tag or a date can't be used with If-Range for this).
pub fn validator(stored: &HeaderMap) -> Option<HeaderValue> {
    let mut tags = stored.get_all(header::ETAG).iter();
    let v = tags.next()?;
    if tags.next().is_some() {
        return None;
    }
    let tag = EntityTag::parse(v.to_str().ok()?)?;
    (!tag.weak).then(|| v.clone())
}

/// The fields asking for bytes `from..end` (to the end of the body when `end` is `None`)
/// of the representation `validator` names.
pub fn request_fields(validator: &HeaderValue, from: u64, end: Option<u64>) -> Option<HeaderMap> {
    let range = match end {
        Some(e) if e > from => format!("bytes={from}-{}", e - 1),
        Some(_) => return None,
        None => format!("bytes={from}-"),
    };
    let mut h = HeaderMap::new();
    h.insert(header::RANGE, HeaderValue::from_str(&range).ok()?);
    h.insert(header::IF_RANGE, validator.clone());
    Some(h)
}

/// True when a response to [`request_fields`] is the rest of the same representation.
pub fn resumes(
    validator: &HeaderValue,
    from: u64,
    end: Option<u64>,
    status: StatusCode,
    headers: &HeaderMap,
) -> bool {
    if status != StatusCode::PARTIAL_CONTENT {
        return false;
    }
    let (Some(ours), Some(theirs)) = (
        validator.to_str().ok().and_then(EntityTag::parse),
        headers
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .and_then(EntityTag::parse),
    ) else {
        return false;
    };
    if !ours.strong_eq(&theirs) {
        return false;
    }
    let Some(range) = response_content_range(headers)
        .and_then(|c| c.range.map(|r| (r, c.complete_length.unwrap_or(u64::MAX))))
    else {
        return false;
    };
    let (r, total) = range;
    let want_end = end.unwrap_or(total);
    r.first == from && r.last.checked_add(1) == Some(want_end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_a_single_strong_etag_is_a_validator() {
        assert!(validator(&headers(&[("etag", "\"a\"")])).is_some());
        assert!(validator(&headers(&[("etag", "W/\"a\"")])).is_none());
        assert!(validator(&headers(&[(
            "last-modified",
            "Sat, 01 Jan 2000 00:00:00 GMT"
        )]))
        .is_none());
        assert!(validator(&headers(&[("etag", "\"a\""), ("etag", "\"b\"")])).is_none());
    }

    #[test]
    fn range_to_the_end_or_to_a_limit() {
        let v = HeaderValue::from_static("\"a\"");
        let h = request_fields(&v, 100, None).unwrap();
        assert_eq!(h[header::RANGE], "bytes=100-");
        assert_eq!(h[header::IF_RANGE], "\"a\"");
        let h = request_fields(&v, 100, Some(200)).unwrap();
        assert_eq!(h[header::RANGE], "bytes=100-199");
        assert!(request_fields(&v, 100, Some(100)).is_none());
    }

    /// RFC 9110 §14.2: a 200 means the validator did not match (a new representation);
    /// only a 206 of the same tag and exactly the asked range continues the old one.
    #[test]
    fn only_the_rest_of_the_same_representation_resumes() {
        let v = HeaderValue::from_static("\"a\"");
        let ok = headers(&[("etag", "\"a\""), ("content-range", "bytes 100-999/1000")]);
        assert!(resumes(&v, 100, None, StatusCode::PARTIAL_CONTENT, &ok));
        assert!(!resumes(&v, 100, None, StatusCode::OK, &ok));
        assert!(!resumes(&v, 101, None, StatusCode::PARTIAL_CONTENT, &ok));
        assert!(resumes(
            &v,
            100,
            Some(1000),
            StatusCode::PARTIAL_CONTENT,
            &ok
        ));
        assert!(!resumes(
            &v,
            100,
            Some(500),
            StatusCode::PARTIAL_CONTENT,
            &ok
        ));
        let other = headers(&[("etag", "\"b\""), ("content-range", "bytes 100-999/1000")]);
        assert!(!resumes(&v, 100, None, StatusCode::PARTIAL_CONTENT, &other));
        let weak = headers(&[("etag", "W/\"a\""), ("content-range", "bytes 100-999/1000")]);
        assert!(!resumes(&v, 100, None, StatusCode::PARTIAL_CONTENT, &weak));
        let short = headers(&[("etag", "\"a\""), ("content-range", "bytes 100-500/1000")]);
        assert!(!resumes(&v, 100, None, StatusCode::PARTIAL_CONTENT, &short));
        let unknown = headers(&[("etag", "\"a\""), ("content-range", "bytes 100-999/*")]);
        assert!(!resumes(
            &v,
            100,
            None,
            StatusCode::PARTIAL_CONTENT,
            &unknown
        ));
        assert!(resumes(
            &v,
            100,
            Some(1000),
            StatusCode::PARTIAL_CONTENT,
            &unknown
        ));
    }
}
