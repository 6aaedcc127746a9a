//! Connection-level header fields on the way to the origin and on the way back
//! (RFC 9110 §7.6): what only a proxy on the network adds (`Via`, `Host`,
//! `X-Forwarded-For`, `X-Forwarded-Proto`, `Forwarded`) around the fields the cache core
//! chose.

use std::net::IpAddr;

use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue};
use trove_cache::Conditionals;
use trove_http::connection::strip_connection_fields;

use crate::client::info::ConnInfo;
use crate::settings::Mode;

/// How the client reached trove: the scheme it spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Http,
    Https,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Http => "http",
            Proto::Https => "https",
        }
    }
}

/// The client as the origin is told about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    pub ip: IpAddr,
    pub proto: Proto,
}

impl Client {
    pub fn of(info: ConnInfo) -> Client {
        Client {
            ip: info.peer.ip(),
            proto: if info.tls { Proto::Https } else { Proto::Http },
        }
    }
}

/// The header fields to send to the origin for a client request. A reverse proxy tells the
/// origin who asked (`X-Forwarded-For`, appended) and over what (`X-Forwarded-Proto`, set:
/// a client's own value says nothing about its hop to trove), and both in RFC 7239's
/// `Forwarded`, appended.
pub fn to_origin(
    via: &HeaderValue,
    client_headers: &HeaderMap,
    host: HeaderValue,
    mode: Mode,
    from: Client,
    conditionals: Conditionals,
    extra: Option<&HeaderMap>,
) -> HeaderMap {
    let mut client = client_headers.clone();
    // First, so a client's `Connection` can't name the cache's own validators away.
    strip_connection_fields(&mut client);
    // A cluster's mark is between its nodes (an owner ask adds this node's own, below).
    client.remove(trove_cluster::PEER_HEADER);
    let mut h = trove_cache::decide::forward_fields(client, conditionals, extra);
    h.remove(header::PROXY_AUTHORIZATION);
    h.remove(header::EXPECT);
    h.insert(header::HOST, host);
    h.append(header::VIA, via.clone());
    if mode == Mode::Reverse {
        if let Ok(v) = HeaderValue::from_str(&from.ip.to_string()) {
            h.append(HeaderName::from_static("x-forwarded-for"), v);
        }
        h.insert(
            HeaderName::from_static("x-forwarded-proto"),
            HeaderValue::from_static(from.proto.as_str()),
        );
        let node = match from.ip {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("\"[{a}]\""),
        };
        if let Ok(v) = HeaderValue::from_str(&format!("for={node};proto={}", from.proto.as_str())) {
            h.append(header::FORWARDED, v);
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
