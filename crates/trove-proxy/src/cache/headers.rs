//! Header fields on the way to the origin and on the way back (RFC 9110 §7.6).

use std::net::IpAddr;

use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue};
use trove_http::connection::strip_connection_fields;

use crate::settings::Mode;
use crate::state::Shared;

/// Conditional and range fields a client sends; on a cacheable miss they are removed so the
/// full response can be stored, and the client's conditions are then answered from it.
const CLIENT_CONDITIONALS: [HeaderName; 6] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// The header fields to send to the origin for a client request.
pub fn to_origin(
    shared: &Shared,
    client_headers: &HeaderMap,
    host: &HeaderValue,
    mode: Mode,
    client_ip: IpAddr,
    strip_conditionals: bool,
) -> HeaderMap {
    let mut h = client_headers.clone();
    strip_connection_fields(&mut h);
    h.remove(header::PROXY_AUTHORIZATION);
    h.remove(header::EXPECT);
    if strip_conditionals {
        for name in &CLIENT_CONDITIONALS {
            h.remove(name);
        }
    }
    h.insert(header::HOST, host.clone());
    h.append(header::VIA, shared.via.clone());
    if mode == Mode::Reverse {
        if let Ok(v) = HeaderValue::from_str(&client_ip.to_string()) {
            h.append(HeaderName::from_static("x-forwarded-for"), v);
        }
    }
    h
}

/// The header fields of an origin response as stored and sent on: connection-specific
/// fields and framing removed (trove frames the body itself), `Via` added, `Date` ensured.
pub fn from_origin(
    shared: &Shared,
    origin_headers: &HeaderMap,
    response_time: std::time::SystemTime,
) -> HeaderMap {
    let mut h = origin_headers.clone();
    strip_connection_fields(&mut h);
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::PROXY_AUTHENTICATE);
    h.append(header::VIA, shared.via.clone());
    trove_http::freshness::ensure_date(&mut h, response_time);
    h
}

/// True when the request already passed through this proxy (a forwarding loop).
pub fn is_loop(shared: &Shared, client_headers: &HeaderMap) -> bool {
    client_headers
        .get_all(header::VIA)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains(&shared.via_name)))
}

/// The `Cache-Status` field (RFC 9211) for a response.
pub fn cache_status(detail: &str) -> HeaderValue {
    if detail == "hit" {
        return HeaderValue::from_static("trove; hit");
    }
    HeaderValue::from_str(&format!("trove; {detail}"))
        .unwrap_or_else(|_| HeaderValue::from_static("trove"))
}

pub const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// Sets `Cache-Status`, keeping what caches further upstream said after trove's own entry
/// (RFC 9211 §2: each cache prepends its member).
pub fn set_cache_status(headers: &mut HeaderMap, detail: &str, upstream: Option<&HeaderValue>) {
    let ours = cache_status(detail);
    let value = match upstream.and_then(|u| u.to_str().ok()) {
        Some(u) if !u.trim().is_empty() => {
            HeaderValue::from_str(&format!("{}, {u}", ours.to_str().unwrap_or("trove")))
                .unwrap_or(ours)
        }
        _ => ours,
    };
    headers.insert(CACHE_STATUS, value);
}
