//! Stored partial responses (RFC 9111 §3.3–§3.4). A 206 from the origin is stored as a
//! partial object (one per stored range) when it names a single range of a known total
//! length. A later range request inside a stored range is served from it. Partials with the
//! same strong validator are combined: adjacent or overlapping ones into one larger partial,
//! and a set covering the whole representation into a complete 200 response.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Method, StatusCode};
use trove_http::range::{self, ByteRange, RangeOutcome};
use trove_http::Policy;
use trove_store::{Body, Object, Removal, Storage};

use crate::prepare;
use crate::request::Request;

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
