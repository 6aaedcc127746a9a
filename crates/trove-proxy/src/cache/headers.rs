//! Connection-level header fields on the way to the origin and on the way back
//! (RFC 9110 §7.6): what only a proxy on the network adds (`Via`, `Host`,
//! `X-Forwarded-For`) around the fields the cache core chose.

use std::net::IpAddr;

use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue};
use trove_cache::Conditionals;
use trove_http::connection::strip_connection_fields;

use crate::settings::Mode;

/// The header fields to send to the origin for a client request.
pub fn to_origin(
    via: &HeaderValue,
    client_headers: &HeaderMap,
    host: HeaderValue,
    mode: Mode,
    client_ip: IpAddr,
    conditionals: Conditionals,
    extra: Option<&HeaderMap>,
) -> HeaderMap {
    let mut client = client_headers.clone();
    // First, so a client's `Connection` can't name the cache's own validators away.
    strip_connection_fields(&mut client);
    let mut h = trove_cache::decide::forward_fields(client, conditionals, extra);
    h.remove(header::PROXY_AUTHORIZATION);
    h.remove(header::EXPECT);
    h.insert(header::HOST, host);
    h.append(header::VIA, via.clone());
    if mode == Mode::Reverse {
        if let Ok(v) = HeaderValue::from_str(&client_ip.to_string()) {
            h.append(HeaderName::from_static("x-forwarded-for"), v);
        }
    }
    h
}

/// True when the request already passed through this proxy (a forwarding loop).
pub fn is_loop(via_name: &str, client_headers: &HeaderMap) -> bool {
    client_headers
        .get_all(header::VIA)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains(via_name)))
}
