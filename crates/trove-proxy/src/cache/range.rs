//! Byte ranges served from a stored complete response (RFC 9110 §14).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http::header;
use http::{HeaderMap, StatusCode};
use trove_http::range::{self, RangeOutcome};
use trove_store::Object;

use crate::reply::{Reply, ReplyBody};
use trove_cache::{Outcome, Request};

/// A 206 or 416 reply when the request asks for ranges that apply, else `None` (serve the
/// whole response). `headers` are the stored response's, already with Age and Cache-Status.
pub fn answer(
    obj: &Arc<Object>,
    req: Request<'_>,
    headers: &mut HeaderMap,
    total: u64,
) -> Option<Reply> {
    if !req.headers.contains_key(header::RANGE) {
        return None;
    }
    match range::range_outcome(req.method, req.headers, &obj.head.headers, total) {
        RangeOutcome::Full => None,
        RangeOutcome::Unsatisfiable => {
            let mut h = headers.clone();
            h.insert(
                header::CONTENT_RANGE,
                range::unsatisfied_content_range(total),
            );
            h.remove(header::CONTENT_TYPE);
            Some(reply(
                StatusCode::RANGE_NOT_SATISFIABLE,
                h,
                ReplyBody::Bytes(Bytes::new()),
            ))
        }
        RangeOutcome::Single(r) => {
            let mut h = headers.clone();
            h.insert(header::CONTENT_RANGE, range::content_range(&r, total));
            let end = r.last + 1;
            let body = match obj.body.complete_bytes() {
                Some(b) => ReplyBody::Bytes(
                    b.get(r.first as usize..end as usize)
                        .map(|s| b.slice_ref(s))?,
                ),
                None => ReplyBody::Stored {
                    reader: obj.body.reader(r.first),
                    end: Some(end),
                    detach: None,
                },
            };
            Some(reply(StatusCode::PARTIAL_CONTENT, h, body))
        }
        RangeOutcome::Multi(ranges) => {
            // Several ranges need the bytes in hand; while the body is still arriving the
            // whole response is served instead, which RFC 9110 §14.2 permits.
            let all = obj.body.complete_bytes()?;
            let boundary = range::multipart_boundary(obj_boundary_seed(obj));
            let ctype = headers.get(header::CONTENT_TYPE).cloned();
            let mut out = BytesMut::with_capacity(range::multipart_length(
                &boundary,
                ctype.as_ref(),
                &ranges,
                total,
            ) as usize);
            for r in &ranges {
                out.put_slice(
                    range::multipart_part_header(&boundary, ctype.as_ref(), r, total).as_bytes(),
                );
                out.put_slice(all.get(r.first as usize..=r.last as usize)?);
            }
            out.put_slice(range::multipart_trailer(&boundary).as_bytes());
            let mut h = headers.clone();
            h.insert(
                header::CONTENT_TYPE,
                range::multipart_content_type(&boundary),
            );
            Some(reply(
                StatusCode::PARTIAL_CONTENT,
                h,
                ReplyBody::Bytes(out.freeze()),
            ))
        }
    }
}

fn obj_boundary_seed(obj: &Object) -> u64 {
    // Varies per response (RFC 2046 asks only that it not occur in the parts, which the
    // multipart writer's length accounting relies on too).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    trove_store::hash::fingerprint(&obj.key, &obj.variant) ^ nanos.rotate_left(17)
}

fn reply(status: StatusCode, headers: HeaderMap, body: ReplyBody) -> Reply {
    Reply {
        status,
        headers,
        wire: None,
        body,
        outcome: Outcome::MemHit,
        peer: None,
        close: false,
    }
}
