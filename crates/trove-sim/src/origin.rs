//! The replay's origin: answers each request at once, in virtual time, with the response the
//! trace record implies under the [`Assumptions`]. The agreement test serves the same
//! answers from a real origin over loopback, so `trove serve` and the replay see one origin.

use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{CACHE_CONTROL, CONTENT_TYPE, DATE, ETAG, IF_NONE_MATCH};
use http::{HeaderMap, HeaderValue, StatusCode};
use trove_cache::engine::{AnswerBody, Forward, Origin, OriginAnswer};
use trove_cache::OriginFailure;

use crate::assume::{Assumptions, Head};
use crate::intern::FastMap;

/// What the origin holds for the URL being replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// The status the record logged (304 and 206 are answered as the whole object).
    pub status: u16,
    /// The object's full size.
    pub size: u64,
    /// Changes when the object does: its validator is built from it. The size, when the
    /// trace says what the object's size is (CSV, synthetic); 0 for a log, whose byte
    /// counts include header bytes that differ between a hit and a miss of one object.
    pub version: u64,
    pub cachable: bool,
    pub content_type: &'a str,
}

/// What answering needs that can be made once instead of per miss: header values
/// (`max-age`, content types, the `Date` of the current virtual second), and what a log's
/// byte counts hold besides bodies. A `HeaderValue` clone is a reference count, its
/// construction an allocation and a copy (and for a date, formatting).
#[derive(Debug, Default)]
pub struct Scratch {
    max_age: Option<(u64, HeaderValue)>,
    types: FastMap<Box<str>, Option<HeaderValue>>,
    date: Option<(u64, HeaderValue)>,
    /// [`Scratch::stored_fields`] by content type, uncachable and cachable.
    stored: [FastMap<Box<str>, u64>; 2],
    /// [`Head::added`] by result code and status (a log has a handful).
    added: Vec<(Box<str>, u16, u64)>,
}

impl Scratch {
    /// [`Head::added`], worked out once for each result code and status.
    pub fn head_added(&mut self, head: Head, result: &str, status: u16) -> u64 {
        if let Some(&(_, _, n)) = self
            .added
            .iter()
            .find(|(r, s, _)| *s == status && **r == *result)
        {
            return n;
        }
        let n = head.added(result, status);
        // A hostile log's distinct codes are bounded by its lines; a real one has a few.
        if self.added.len() < 256 {
            self.added.push((result.into(), status, n));
        }
        n
    }

    /// What the header fields of the answer to `w` come to once stored, as the store
    /// charges them (name, value and 4 bytes each): the origin's fields with its `Date`,
    /// cleaned as the engine cleans them (adding the cache's `via`). Depends on whether the
    /// answer is cachable and its content type only (a `Date` is always 29 bytes), so it is
    /// worked out once for each.
    pub fn stored_fields(&mut self, a: &Assumptions, w: &Wanted<'_>, via: &HeaderValue) -> u64 {
        let i = usize::from(w.cachable);
        if let Some(&n) = self.stored[i].get(w.content_type) {
            return n;
        }
        let mut h = answer(a, w, None, self).headers;
        h.insert(DATE, self.date(UNIX_EPOCH));
        trove_cache::respond::clean_response_headers_in_place(&mut h, via, UNIX_EPOCH);
        let n = h
            .iter()
            .map(|(k, v)| (k.as_str().len() + v.len() + 4) as u64)
            .sum();
        self.stored[i].insert(w.content_type.into(), n);
        n
    }

    fn max_age(&mut self, secs: u64) -> HeaderValue {
        match &self.max_age {
            Some((s, v)) if *s == secs => v.clone(),
            _ => {
                let v = max_age(secs);
                self.max_age = Some((secs, v.clone()));
                v
            }
        }
    }

    fn content_type(&mut self, t: &str) -> Option<HeaderValue> {
        if let Some(v) = self.types.get(t) {
            return v.clone();
        }
        let v = HeaderValue::from_str(t).ok();
        // Logs name few types; a hostile log naming millions is bounded by its distinct
        // lines, like the interned URLs.
        self.types.insert(t.into(), v.clone());
        v
    }

    /// `Date` for `now` (whole seconds, as HTTP dates are).
    pub fn date(&mut self, now: SystemTime) -> HeaderValue {
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        match &self.date {
            Some((s, v)) if *s == secs => v.clone(),
            _ => {
                let v = HeaderValue::from_str(&trove_http::field::format_http_date(now))
                    .expect("an HTTP date is visible ASCII");
                self.date = Some((secs, v.clone()));
                v
            }
        }
    }
}

/// The origin's answer to a request (`if_none_match`: the request's validator, if any).
pub fn answer(
    a: &Assumptions,
    w: &Wanted<'_>,
    if_none_match: Option<&[u8]>,
    scratch: &mut Scratch,
) -> OriginAnswer {
    let mut headers = HeaderMap::with_capacity(4);
    let etag = etag(w.version);
    let status = match w.status {
        200 | 206 | 304 => StatusCode::OK,
        s => StatusCode::from_u16(s).unwrap_or(StatusCode::OK),
    };
    let not_modified =
        w.cachable && status == StatusCode::OK && if_none_match == Some(etag.as_bytes());
    if w.cachable {
        headers.insert(CACHE_CONTROL, scratch.max_age(a.freshness.as_secs()));
        // Moved, not cloned: a clone of a value just built shares it, which allocates.
        headers.insert(ETAG, etag);
    } else {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("private, no-cache"));
    }
    if !w.content_type.is_empty() {
        if let Some(v) = scratch.content_type(w.content_type) {
            headers.insert(CONTENT_TYPE, v);
        }
    }
    if not_modified {
        return OriginAnswer {
            status: StatusCode::NOT_MODIFIED,
            headers,
            body: AnswerBody::Sized(0),
        };
    }
    OriginAnswer {
        status,
        headers,
        // Size-only: the store charges and counts it and nobody reads it, so an object of
        // any size costs the replay no memory.
        body: AnswerBody::Sized(w.size),
    }
}

/// A validator that changes with the object's version.
fn etag(mut version: u64) -> HeaderValue {
    // `"` + up to 16 hex digits + `"`, written backwards into a buffer on the stack.
    let mut b = [b'"'; 18];
    let mut at = 17;
    loop {
        at -= 1;
        b[at] = b"0123456789abcdef"[(version & 15) as usize];
        version >>= 4;
        if version == 0 {
            break;
        }
    }
    HeaderValue::from_bytes(&b[at - 1..]).expect("hex digits and quotes")
}

fn max_age(secs: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("max-age={secs}")).expect("ascii")
}

/// What the origin did during one replayed request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    /// Requests the origin answered.
    pub requests: u32,
    /// Body bytes it sent.
    pub body_bytes: u64,
}

/// The origin for one record at a time.
pub struct TraceOrigin<'a> {
    pub assumptions: &'a Assumptions,
    pub wanted: Wanted<'a>,
    pub scratch: &'a mut Scratch,
    /// The virtual time it answers at: it sends a `Date` (as an origin over a network
    /// does, and as the cache would add if it did not).
    pub now: SystemTime,
    pub asked: Asked,
}

impl Origin for TraceOrigin<'_> {
    fn fetch(&mut self, req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure> {
        let inm = req.headers.get(IF_NONE_MATCH).map(HeaderValue::as_bytes);
        let mut ans = answer(self.assumptions, &self.wanted, inm, self.scratch);
        ans.headers.insert(DATE, self.scratch.date(self.now));
        self.asked.requests += 1;
        self.asked.body_bytes += ans.body.len();
        Ok(ans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_quoted_hex() {
        for (v, want) in [
            (0, "\"0\""),
            (300, "\"12c\""),
            (u64::MAX, "\"ffffffffffffffff\""),
        ] {
            assert_eq!(etag(v), want);
        }
    }

    #[test]
    fn cachable_uncachable_and_not_modified() {
        let a = Assumptions::default();
        let mut z = Scratch::default();
        let w = Wanted {
            status: 200,
            size: 300,
            version: 300,
            cachable: true,
            content_type: "image/gif",
        };
        let ans = answer(&a, &w, None, &mut z);
        assert_eq!(ans.status, 200);
        assert_eq!(ans.body.len(), 300);
        assert_eq!(ans.headers[CACHE_CONTROL], "max-age=3600");
        assert_eq!(ans.headers[ETAG], "\"12c\"");
        let again = answer(&a, &w, Some(b"\"12c\""), &mut z);
        assert_eq!(
            (again.status, again.body.len()),
            (StatusCode::NOT_MODIFIED, 0)
        );
        let changed = answer(&a, &Wanted { version: 301, ..w }, Some(b"\"12c\""), &mut z);
        assert_eq!(changed.status, 200);
        let dynamic = answer(
            &a,
            &Wanted {
                cachable: false,
                ..w
            },
            None,
            &mut z,
        );
        assert_eq!(dynamic.headers[CACHE_CONTROL], "private, no-cache");
        assert!(dynamic.headers.get(ETAG).is_none());
    }
}
