//! The Deliver step for stored responses: Age, Cache-Status, HEAD, the client's own
//! conditional request (304 / 412) and byte ranges, all answered from the stored object.

use std::sync::Arc;
use std::time::SystemTime;

use http::header::{self, HeaderValue};
use http::{Method, StatusCode};
use trove_cache::deliver::{self as core, Delivery};
use trove_cache::{partial, CacheStatus, Outcome, Request, CACHE_STATUS};
use trove_store::Object;

use crate::cache::range;
use crate::reply::{Reply, ReplyBody};

/// Builds the reply serving `obj` to `req`: the stored head with `Age` and `Cache-Status`,
/// answering the client's own conditionals and ranges from the stored response.
pub fn stored(
    obj: &Arc<Object>,
    req: Request<'_>,
    now: SystemTime,
    outcome: Outcome,
    status: CacheStatus,
    peer: Option<String>,
) -> Reply {
    let head = &obj.head;
    let age = core::age(obj, now);
    let cache_status = status.header_value(head.headers.get(CACHE_STATUS));
    if req.is_unconditional() {
        let outcome = core::outcome(outcome, Delivery::Response, head.status);
        return plain(obj, req, age, outcome, cache_status, peer);
    }
    let d = core::delivery(obj, req);
    let outcome = core::outcome(outcome, d, head.status);
    let mut headers = head.headers.clone();
    headers.insert(header::AGE, trove_http::age_value(age));
    headers.insert(CACHE_STATUS, cache_status.clone());
    headers.remove(trove_http::TROVE_CACHE_CONTROL);

    match d {
        Delivery::NotModified => {
            let mut h = trove_http::preconditions::not_modified_headers(&headers);
            h.insert(header::AGE, trove_http::age_value(age));
            h.insert(CACHE_STATUS, cache_status);
            return Reply {
                status: StatusCode::NOT_MODIFIED,
                headers: h,
                wire: None,
                body: ReplyBody::Empty {
                    content_length: None,
                },
                outcome,
                peer,
                close: false,
            };
        }
        Delivery::PreconditionFailed => {
            let mut r = Reply::simple(
                StatusCode::PRECONDITION_FAILED,
                outcome,
                "precondition failed",
            );
            // Answered from the stored response, as a 304 is: it says so.
            r.headers.insert(CACHE_STATUS, cache_status);
            r.peer = peer;
            return r;
        }
        Delivery::Response => {}
    }

    let total = known_length(obj);

    if *req.method == Method::HEAD {
        return Reply {
            status: head.status,
            headers,
            wire: None,
            body: ReplyBody::Empty {
                content_length: total,
            },
            outcome,
            peer,
            close: false,
        };
    }

    if head.status == StatusCode::PARTIAL_CONTENT {
        if let Some(reply) = from_partial(obj, req, &headers) {
            return Reply {
                outcome,
                peer,
                ..reply
            };
        }
    }
    if head.status == StatusCode::OK {
        if let Some(total) = total {
            if let Some(reply) = range::answer(obj, req, &mut headers, total) {
                return Reply {
                    outcome,
                    peer,
                    ..reply
                };
            }
        }
        if !headers.contains_key(header::ACCEPT_RANGES) {
            headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        }
    }

    Reply {
        status: head.status,
        headers,
        wire: None,
        body: whole_body(obj, total),
        outcome,
        peer,
        close: false,
    }
}

/// The common case: no conditionals or ranges to answer, so the stored header block goes out
/// as pre-encoded, with only Content-Type, Age and Cache-Status set per hit.
fn plain(
    obj: &Arc<Object>,
    req: Request<'_>,
    age: std::time::Duration,
    outcome: Outcome,
    cache_status: HeaderValue,
    peer: Option<String>,
) -> Reply {
    let head = &obj.head;
    let mut headers = http::HeaderMap::with_capacity(4);
    if let Some(ct) = head.headers.get(header::CONTENT_TYPE) {
        headers.insert(header::CONTENT_TYPE, ct.clone());
    }
    headers.insert(header::AGE, trove_http::age_value(age));
    headers.insert(CACHE_STATUS, cache_status);
    if head.status == StatusCode::OK && !head.headers.contains_key(header::ACCEPT_RANGES) {
        headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    }
    let total = known_length(obj);
    let body = if *req.method == Method::HEAD {
        ReplyBody::Empty {
            content_length: total,
        }
    } else {
        whole_body(obj, total)
    };
    Reply {
        status: head.status,
        headers,
        wire: Some(head.prepared.wire.clone()),
        body,
        outcome,
        peer,
        close: false,
    }
}

/// A range answered from a stored partial response that covers it.
fn from_partial(obj: &Arc<Object>, req: Request<'_>, headers: &http::HeaderMap) -> Option<Reply> {
    let (have, total) = partial::span(obj)?;
    let want = partial::wanted(req, &obj.head.headers, total)?;
    if want.first < have.first || want.last > have.last {
        return None;
    }
    let mut h = headers.clone();
    h.insert(
        header::CONTENT_RANGE,
        trove_http::range::content_range(&want, total),
    );
    let start = want.first - have.first;
    let end = want.last - have.first + 1;
    let body = match obj.body.complete_bytes() {
        Some(b) => ReplyBody::Bytes(
            b.get(start as usize..end as usize)
                .map(|s| b.slice_ref(s))?,
        ),
        None => ReplyBody::Stored {
            reader: obj.body.reader(start),
            end: Some(end),
            detach: None,
        },
    };
    Some(Reply {
        status: StatusCode::PARTIAL_CONTENT,
        headers: h,
        wire: None,
        body,
        outcome: Outcome::MemHit,
        peer: None,
        close: false,
    })
}

/// The body's length: what arrived if complete, else what the origin declared.
fn known_length(obj: &Object) -> Option<u64> {
    match obj.body.outcome() {
        Some(Ok(())) => Some(obj.body.len()),
        _ => obj.body.expected_len(),
    }
}

/// The whole stored body: one buffer when complete, else read as it arrives.
fn whole_body(obj: &Arc<Object>, total: Option<u64>) -> ReplyBody {
    match obj.body.complete_bytes() {
        Some(b) => ReplyBody::Bytes(b),
        None => ReplyBody::Stored {
            reader: obj.body.reader(0),
            end: total,
            detach: None,
        },
    }
}
