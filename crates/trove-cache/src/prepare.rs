//! Work done once when a response is stored, so that each hit is cheap: the header block
//! pre-encoded for the wire, and, when reuse depends on age alone, the instant it goes stale.
//! The slow path (`trove_http::reuse`) stays the authority: the fast path is taken only in
//! the cases where it provably gives the same answer.

use std::time::SystemTime;

use bytes::{BufMut, BytesMut};
use http::header;
use trove_http::freshness::{current_age_dated, date_value, freshness_lifetime_parsed};
use trove_http::policy::{effective_response_directives, EffectiveCacheControl};
use trove_http::{Policy, Vary};
use trove_store::{ObjectHead, Prepared};

/// Fields a hit writes itself, so they are left out of the pre-encoded block.
fn set_per_hit(name: &header::HeaderName) -> bool {
    name == header::AGE
        || name == header::CONTENT_TYPE
        || name == trove_http::TROVE_CACHE_CONTROL
        || name == header::CONTENT_LENGTH
        || name == crate::status::CACHE_STATUS
}

/// Fills `head.prepared`. Called whenever a head is stored or updated.
pub fn prepare(policy: &Policy, head: &mut ObjectHead) {
    prepare_head(policy, head, true)
}

/// [`prepare`], with the wire form left empty unless `wire` (see [`crate::Rules::wire`]).
pub fn prepare_head(policy: &Policy, head: &mut ObjectHead, wire: bool) {
    let directives = effective_response_directives(policy, &head.headers);
    let vary = Vary::from_headers(&head.headers);
    let facts = Facts {
        directives: &directives,
        vary: &vary,
    };
    prepare_judged(policy, head, wire, facts)
}

/// What storing a response has already read of its fields, so that preparing its head
/// reads none of them again.
#[derive(Clone, Copy)]
pub struct Facts<'a> {
    /// The directives that govern it ([`effective_response_directives`] under the policy).
    pub directives: &'a EffectiveCacheControl,
    /// Its `Vary`.
    pub vary: &'a Vary,
}

/// [`prepare_head`] from `facts`, which must be those of `head.headers` under `policy`.
pub fn prepare_judged(policy: &Policy, head: &mut ObjectHead, wire: bool, facts: Facts<'_>) {
    let wire = if wire {
        wire_form(head)
    } else {
        bytes::Bytes::new()
    };
    // `Date` is read once, for the age and the lifetime both.
    let date = date_value(&head.headers);
    let initial_age = current_age_dated(
        &head.headers,
        date,
        head.request_time,
        head.response_time,
        head.response_time,
    );
    let age_only = head.status != http::StatusCode::PARTIAL_CONTENT
        && facts.vary.is_empty()
        && !facts.directives.cc.no_cache.is_present();
    let lifetime = freshness_lifetime_parsed(
        policy,
        head.status,
        &head.headers,
        facts.directives,
        date.unwrap_or(head.response_time),
    )
    .duration;
    let fresh_until =
        (age_only && lifetime > initial_age).then(|| head.response_time + (lifetime - initial_age));
    head.prepared = Prepared {
        wire,
        fresh_until,
        initial_age,
        policy_id: policy_id(policy),
    };
}

/// The header fields as HTTP/1.1 wire lines, without those a hit sets itself.
fn wire_form(head: &ObjectHead) -> bytes::Bytes {
    let mut wire = BytesMut::with_capacity(head.headers.len() * 40);
    for (name, value) in &head.headers {
        if set_per_hit(name) {
            continue;
        }
        wire.put_slice(name.as_str().as_bytes());
        wire.put_slice(b": ");
        wire.put_slice(value.as_bytes());
        wire.put_slice(b"\r\n");
    }
    wire.freeze()
}

/// Fresh by the fast path at `now`, if it applies under `policy`.
pub fn fresh(head: &ObjectHead, policy: &Policy, now: SystemTime) -> bool {
    head.prepared.policy_id == policy_id(policy)
        && head.prepared.fresh_until.is_some_and(|t| now < t)
}

/// Policies differ between listeners only in the targeted fields they obey.
fn policy_id(policy: &Policy) -> u8 {
    if policy.targeted_fields.is_empty() {
        1
    } else {
        2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, Method};
    use std::time::Duration;

    fn head(fields: &[(&str, &str)], received: SystemTime) -> ObjectHead {
        let mut headers = HeaderMap::new();
        for (k, v) in fields {
            headers.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let mut h = ObjectHead {
            status: http::StatusCode::OK,
            headers,
            request_headers: HeaderMap::new(),
            request_time: received,
            response_time: received,
            prepared: Prepared::default(),
            labels: Default::default(),
        };
        prepare(&Policy::default(), &mut h);
        h
    }

    /// The fast path must never call fresh what `trove_http::reuse` would not.
    #[test]
    fn fast_path_agrees_with_the_rules() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let date = trove_http::field::format_http_date(t0);
        let cases: Vec<Vec<(&str, &str)>> = vec![
            vec![("cache-control", "max-age=60")],
            vec![("cache-control", "max-age=60"), ("age", "30")],
            vec![("cache-control", "max-age=60"), ("age", "90")],
            vec![("cache-control", "s-maxage=5, max-age=60")],
            vec![("cache-control", "no-cache, max-age=60")],
            vec![("cache-control", "max-age=60"), ("vary", "accept")],
            vec![("expires", "Thu, 01 Jan 1970 00:00:00 GMT")],
            vec![("last-modified", "Mon, 01 Jan 2001 00:00:00 GMT")],
            vec![("cache-control", "max-age=60, max-age=10")],
            vec![],
        ];
        let policy = Policy::default();
        for fields in cases {
            let mut fields = fields.clone();
            fields.push(("date", &date));
            let h = head(&fields, t0);
            for later in [0u64, 4, 6, 29, 31, 59, 61, 3600] {
                let now = t0 + Duration::from_secs(later);
                let stored = trove_http::StoredResponse {
                    method: &Method::GET,
                    status: h.status,
                    headers: &h.headers,
                    request_headers: &h.request_headers,
                    request_time: h.request_time,
                    response_time: h.response_time,
                };
                let slow =
                    trove_http::reuse(&policy, &stored, &Method::GET, &HeaderMap::new(), now);
                if fresh(&h, &policy, now) {
                    assert!(
                        matches!(slow, trove_http::Reuse::Fresh { .. }),
                        "{fields:?} at +{later}s: fast says fresh, rules say {slow:?}"
                    );
                }
                if matches!(slow, trove_http::Reuse::Fresh { .. })
                    && h.prepared.fresh_until.is_some()
                {
                    assert!(
                        fresh(&h, &policy, now),
                        "{fields:?} at +{later}s: rules say fresh"
                    );
                }
            }
        }
    }
}
