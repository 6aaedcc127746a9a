//! Stored partial responses (RFC 9111 §3.3–§3.4). A 206 from the origin is stored as a
//! partial object (one per stored range) when it names a single range of a known total
//! length. A later range request inside a stored range is served from it. Partials with the
//! same strong validator are combined: adjacent or overlapping ones into one larger partial,
//! and a set covering the whole representation into a complete 200 response.
//!
//! A request a stored partial does not cover is not sent for the whole response when one
//! range would do: [`completion`] names the bytes missing next to the stored ones, asked
//! for with `Range` and `If-Range` the stored strong entity tag (§3.4 allows combining only
//! under one); [`after_completion`] accepts the answer only as exactly that 206, which is
//! then stored and combined with the part already held.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Method, StatusCode};
use trove_http::range::{self, ByteRange, RangeOutcome};
use trove_http::Policy;
use trove_store::{Body, Object, Removal, Storage};

use crate::prepare;
use crate::request::Request;
use crate::resume;

/// The stored range of a partial object: `(range, total length)`.
pub fn span(obj: &Object) -> Option<(ByteRange, u64)> {
    if obj.head.status != StatusCode::PARTIAL_CONTENT {
        return None;
    }
    let cr = range::response_content_range(&obj.head.headers)?;
    Some((cr.range?, cr.complete_length?))
}

/// The range a 206's `Content-Range` names.
pub fn stored_range(headers: &HeaderMap) -> Option<ByteRange> {
    range::response_content_range(headers).and_then(|c| c.range)
}

/// Whether a 206 response names one range of a known total length (the only kind stored).
pub fn storable_206(headers: &HeaderMap, content_length: Option<u64>) -> bool {
    let Some(cr) = range::response_content_range(headers) else {
        return false;
    };
    match (cr.range, cr.complete_length) {
        (Some(r), Some(_)) => content_length.is_none_or(|n| n == r.len()),
        _ => false,
    }
}

/// The variant key suffix that keeps each stored range apart.
pub fn variant_suffix(headers: &HeaderMap) -> String {
    match range::response_content_range(headers).and_then(|c| c.range) {
        Some(r) => format!("\u{0}partial {}-{}", r.first, r.last),
        None => String::new(),
    }
}

/// The one byte range a request asks for against a representation of `total` bytes.
pub fn wanted(req: Request<'_>, stored: &HeaderMap, total: u64) -> Option<ByteRange> {
    match range::range_outcome(req.method, req.headers, stored, total) {
        RangeOutcome::Single(r) => Some(r),
        _ => None,
    }
}

/// Whether partial `obj` can answer `req` (a GET whose single range lies inside it).
pub fn covers(obj: &Object, req: Request<'_>) -> bool {
    let Some((have, total)) = span(obj) else {
        return false;
    };
    if *req.method != Method::GET || matches!(obj.body.outcome(), Some(Err(_))) {
        return false;
    }
    wanted(req, &obj.head.headers, total)
        .is_some_and(|r| have.first <= r.first && r.last <= have.last)
}

/// A stored partial response and the one range that, fetched and combined with it, answers
/// a request it does not cover.
#[derive(Debug, Clone)]
pub struct Completion {
    pub part: Arc<Object>,
    /// The bytes to ask the origin for, next to the stored ones.
    pub missing: ByteRange,
    /// `Range` for `missing` and `If-Range` the stored strong entity tag.
    pub fields: HeaderMap,
}

/// The range of a representation of `total` bytes a request needs: the one range it asks
/// for, or all of it; `None` for several ranges or none that can be satisfied.
fn needed(req: Request<'_>, stored: &HeaderMap, total: u64) -> Option<ByteRange> {
    if total == 0 {
        return None;
    }
    match range::range_outcome(req.method, req.headers, stored, total) {
        RangeOutcome::Single(r) => Some(r),
        RangeOutcome::Full => Some(ByteRange {
            first: 0,
            last: total - 1,
        }),
        _ => None,
    }
}

/// The one range that, added to `have`, covers `need`, if `have` touches or overlaps it on
/// one side (two gaps, or one between them, would take a second request or the whole).
fn missing_next_to(have: ByteRange, need: ByteRange) -> Option<ByteRange> {
    let touches =
        need.first <= have.last.saturating_add(1) && have.first <= need.last.saturating_add(1);
    let extends_right = need.last > have.last && need.first >= have.first;
    let extends_left = need.first < have.first && need.last <= have.last;
    if extends_right && touches {
        return Some(ByteRange {
            first: have.last + 1,
            last: need.last,
        });
    }
    if extends_left && touches {
        return Some(ByteRange {
            first: need.first,
            last: have.first - 1,
        });
    }
    // Beyond the stored part with a gap: fetch the gap too, so the two join.
    if need.first > have.last {
        return Some(ByteRange {
            first: have.last + 1,
            last: need.last,
        });
    }
    if need.last < have.first {
        return Some(ByteRange {
            first: need.first,
            last: have.first - 1,
        });
    }
    None
}

/// Which stored partial of `variants` (newest first) a GET it does not cover can complete
/// by asking the origin for one range only (RFC 9111 §3.4). The part must be whole, carry
/// a single strong entity tag, and match the request's `Vary` fields.
pub fn completion(variants: &[Arc<Object>], req: Request<'_>) -> Option<Completion> {
    if *req.method != Method::GET {
        return None;
    }
    let mut parts: Vec<&Arc<Object>> = variants
        .iter()
        .filter(|o| matches!(o.body.outcome(), Some(Ok(()))))
        .filter(|o| span(o).is_some())
        .collect();
    parts.sort_by_key(|o| std::cmp::Reverse(o.head.response_time));
    parts.into_iter().find_map(|part| {
        let (have, total) = span(part)?;
        let validator = resume::validator(&part.head.headers)?;
        let vary = trove_http::Vary::from_headers(&part.head.headers);
        if !trove_http::vary_matches(&vary, &part.head.request_headers, req.headers) {
            return None;
        }
        let need = needed(req, &part.head.headers, total)?;
        if have.first <= need.first && need.last <= have.last {
            return None; // covered: served as it is
        }
        let missing = missing_next_to(have, need)?;
        let fields = resume::request_fields(&validator, missing.first, Some(missing.last + 1))?;
        Some(Completion {
            part: Arc::clone(part),
            missing,
            fields,
        })
    })
}

/// What the origin's answer to a [`Completion`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCompletion {
    /// A 206 of the same representation holding (at least) the missing range: store it and
    /// combine.
    Part,
    /// Anything else — a 200 because `If-Range` did not match (a new representation), a
    /// 206 of another representation or range, an error: handled like the answer to any
    /// fetch.
    Other,
}

/// Whether the answer to `c` completes its part: a 206 with the part's strong entity tag,
/// the same complete length, and one range that holds the missing one.
pub fn after_completion(c: &Completion, status: StatusCode, headers: &HeaderMap) -> OnCompletion {
    let same = || -> Option<bool> {
        let (_, total) = span(&c.part)?;
        let ours = trove_http::etag::response_etag(&c.part.head.headers)?;
        let theirs = trove_http::etag::response_etag(headers)?;
        let cr = range::response_content_range(headers)?;
        let got = cr.range?;
        Some(
            !ours.weak
                && ours.strong_eq(&theirs)
                && cr.complete_length == Some(total)
                && got.first <= c.missing.first
                && c.missing.last <= got.last,
        )
    };
    if status == StatusCode::PARTIAL_CONTENT && same() == Some(true) {
        OnCompletion::Part
    } else {
        OnCompletion::Other
    }
}

/// How a request answered from a completed partial is said in `Cache-Status`: it went
/// forward for the part that was missing, and that part was stored.
pub fn completed_status() -> crate::CacheStatus {
    crate::CacheStatus {
        stored: true,
        ..crate::CacheStatus::forward(crate::Fwd::Partial).with_fwd_status(206)
    }
}

/// Combines the complete partials stored under `key` that share a strong validator. Returns
/// true if anything new was stored (a larger partial or the complete response).
pub fn combine(store: &dyn Storage, policy: &Policy, key: &str) -> bool {
    let mut parts: Vec<(ByteRange, u64, Arc<Object>)> = store
        .lookup(key)
        .into_iter()
        .filter(|o| matches!(o.body.outcome(), Some(Ok(()))))
        .filter_map(|o| span(&o).map(|(r, t)| (r, t, o)))
        .collect();
    if parts.len() < 2 {
        return false;
    }
    // Newest first: its header fields win (§3.4), and it anchors the validator.
    parts.sort_by_key(|(_, _, o)| std::cmp::Reverse(o.head.response_time));
    let anchor = Arc::clone(&parts[0].2);
    let total = parts[0].1;
    parts.retain(|(_, t, o)| {
        *t == total && range::combinable(&anchor.head.headers, &o.head.headers)
    });
    parts.sort_by_key(|(r, _, _)| r.first);
    let mut added = false;
    let mut run: Option<(ByteRange, BytesMut, usize)> = None;
    let mut finish = |run: Option<(ByteRange, BytesMut, usize)>| {
        let Some((r, bytes, count)) = run else { return };
        if count < 2 {
            return;
        }
        store_combined(store, policy, &anchor, r, total, bytes.freeze());
        added = true;
    };
    for (r, _, obj) in &parts {
        let Some(body) = obj.body.complete_bytes() else {
            continue;
        };
        if body.len() as u64 != r.len() {
            continue; // never trust a part whose bytes don't match its range
        }
        match run.as_mut() {
            Some((cur, bytes, count)) if r.first <= cur.last + 1 => {
                if r.last > cur.last {
                    let skip = (cur.last + 1 - r.first) as usize;
                    bytes.extend_from_slice(&body[skip..]);
                    cur.last = r.last;
                }
                *count += 1;
            }
            _ => {
                finish(run.take());
                run = Some((*r, BytesMut::from(&body[..]), 1));
            }
        }
    }
    finish(run);
    added
}

fn store_combined(
    store: &dyn Storage,
    policy: &Policy,
    anchor: &Object,
    r: ByteRange,
    total: u64,
    bytes: Bytes,
) {
    let mut head = anchor.head.clone();
    let complete = r.first == 0 && r.last + 1 == total;
    let base_variant = anchor
        .variant
        .split('\u{0}')
        .next()
        .unwrap_or_default()
        .to_string();
    let variant = if complete {
        head.status = StatusCode::OK;
        head.headers.remove(header::CONTENT_RANGE);
        base_variant
    } else {
        head.headers
            .insert(header::CONTENT_RANGE, range::content_range(&r, total));
        format!("{base_variant}\u{0}partial {}-{}", r.first, r.last)
    };
    prepare::prepare(policy, &mut head);
    if store
        .insert(Object::new(
            anchor.key.clone(),
            variant,
            head,
            Body::complete(bytes),
        ))
        .is_err()
    {
        return;
    }
    if complete {
        // The pieces are no longer needed.
        for o in store.lookup(&anchor.key) {
            if o.head.status == StatusCode::PARTIAL_CONTENT
                && range::combinable(&anchor.head.headers, &o.head.headers)
            {
                store.remove_object(&o, Removal::Replaced);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: u64, last: u64) -> ByteRange {
        ByteRange { first, last }
    }

    #[test]
    fn one_range_next_to_the_stored_part_9111_3_4() {
        // Stored 0-4 of 10.
        assert_eq!(missing_next_to(r(0, 4), r(0, 9)), Some(r(5, 9)));
        assert_eq!(missing_next_to(r(0, 4), r(3, 7)), Some(r(5, 7)));
        assert_eq!(missing_next_to(r(0, 4), r(5, 6)), Some(r(5, 6)));
        assert_eq!(
            missing_next_to(r(0, 4), r(8, 9)),
            Some(r(5, 9)),
            "the gap too"
        );
        // Stored 5-9.
        assert_eq!(missing_next_to(r(5, 9), r(0, 9)), Some(r(0, 4)));
        assert_eq!(missing_next_to(r(5, 9), r(2, 6)), Some(r(2, 4)));
        assert_eq!(missing_next_to(r(5, 9), r(0, 1)), Some(r(0, 4)));
        // Stored 3-5: the whole needs two ranges.
        assert_eq!(missing_next_to(r(3, 5), r(0, 9)), None);
    }

    fn head(status: u16, fields: &[(&'static str, &'static str)]) -> trove_store::ObjectHead {
        let mut headers = HeaderMap::new();
        for (k, v) in fields {
            headers.append(*k, http::HeaderValue::from_static(v));
        }
        trove_store::ObjectHead {
            status: StatusCode::from_u16(status).expect("status"),
            headers,
            request_headers: HeaderMap::new(),
            request_time: std::time::SystemTime::UNIX_EPOCH,
            response_time: std::time::SystemTime::UNIX_EPOCH,
            prepared: Default::default(),
        }
    }

    fn part(etag: &'static str) -> Arc<Object> {
        let h = head(206, &[("etag", etag), ("content-range", "bytes 0-4/10")]);
        let o = Object::new(
            "k".into(),
            "".into(),
            h,
            Body::complete(Bytes::from_static(b"01234")),
        );
        Arc::new(o)
    }

    #[test]
    fn completion_asks_for_the_rest_under_the_strong_tag_9111_3_4() {
        let get = Method::GET;
        let none = HeaderMap::new();
        let c = completion(&[part("\"p\"")], Request::new(&get, &none)).expect("completes");
        assert_eq!(c.missing, r(5, 9));
        assert_eq!(c.fields[header::RANGE], "bytes=5-9");
        assert_eq!(c.fields[header::IF_RANGE], "\"p\"");
        // A weak tag can't combine (§3.4): no completion.
        assert!(completion(&[part("W/\"p\"")], Request::new(&get, &none)).is_none());
        let head_req = Method::HEAD;
        assert!(completion(&[part("\"p\"")], Request::new(&head_req, &none)).is_none());

        let answer = |status: u16, fields: &[(&'static str, &'static str)]| {
            let h = head(status, fields);
            after_completion(&c, h.status, &h.headers)
        };
        let ok = [("etag", "\"p\""), ("content-range", "bytes 5-9/10")];
        assert_eq!(answer(206, &ok), OnCompletion::Part);
        let more = [("etag", "\"p\""), ("content-range", "bytes 3-9/10")];
        assert_eq!(answer(206, &more), OnCompletion::Part);
        assert_eq!(answer(200, &ok), OnCompletion::Other);
        let other = [("etag", "\"q\""), ("content-range", "bytes 5-9/10")];
        assert_eq!(answer(206, &other), OnCompletion::Other);
        let short = [("etag", "\"p\""), ("content-range", "bytes 5-8/10")];
        assert_eq!(answer(206, &short), OnCompletion::Other);
        let longer = [("etag", "\"p\""), ("content-range", "bytes 5-9/11")];
        assert_eq!(answer(206, &longer), OnCompletion::Other);
    }
}
