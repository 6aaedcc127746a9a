//! Interim responses (RFC 9110 §15.2): which 1xx responses from an origin a proxy forwards
//! to its client, and with which fields.
//!
//! A proxy must forward 1xx responses unless it asked for them itself (§15.2), and must not
//! send one to an HTTP/1.0 client, which would take it for the final response. An interim
//! response is never a cache's business: it is not stored, and its fields are not the final
//! response's.

use http::header;
use http::{HeaderMap, StatusCode, Version};

use crate::connection::strip_connection_fields;

/// Whether an origin's interim response `status` is forwarded to a client speaking
/// `client_version`.
///
/// Not `100 Continue`: the proxy answers a client's `Expect: 100-continue` itself and does
/// not send `Expect` on, so an origin's 100 answers nothing the client asked (§10.1.1). Not
/// `101 Switching Protocols`: an upgrade belongs to the connection it was asked on, and the
/// proxy does not pass `Upgrade` on. Every other 1xx (`102 Processing`, `103 Early Hints`,
/// ones not yet defined) is forwarded to HTTP/1.1 clients.
pub fn forwards(status: StatusCode, client_version: Version) -> bool {
    status.is_informational()
        && status != StatusCode::CONTINUE
        && status != StatusCode::SWITCHING_PROTOCOLS
        && to_client(client_version)
}

/// Whether a client speaking `version` may be sent interim responses at all (§15.2: not
/// HTTP/1.0 or older).
pub fn to_client(version: Version) -> bool {
    version >= Version::HTTP_11
}

/// The fields of an interim response as forwarded: the connection-specific ones removed
/// (§7.6.1), and framing, which a 1xx never has (§15.2).
pub fn forwarded_fields(origin: &HeaderMap) -> HeaderMap {
    let mut h = origin.clone();
    strip_connection_fields(&mut h);
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::TRANSFER_ENCODING);
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn forwarded_to_http_1_1_clients_only_9110_15_2() {
        let early = StatusCode::from_u16(103).expect("103");
        let processing = StatusCode::from_u16(102).expect("102");
        let unknown = StatusCode::from_u16(199).expect("199");
        for s in [early, processing, unknown] {
            assert!(forwards(s, Version::HTTP_11), "{s}");
            assert!(!forwards(s, Version::HTTP_10), "{s}");
            assert!(!forwards(s, Version::HTTP_09), "{s}");
        }
        assert!(!forwards(StatusCode::CONTINUE, Version::HTTP_11));
        assert!(!forwards(StatusCode::SWITCHING_PROTOCOLS, Version::HTTP_11));
        assert!(!forwards(StatusCode::OK, Version::HTTP_11));
    }

    #[test]
    fn connection_fields_are_not_forwarded_9110_7_6_1() {
        let mut h = HeaderMap::new();
        h.insert(
            header::LINK,
            HeaderValue::from_static("</a.css>; rel=preload"),
        );
        h.insert(header::CONNECTION, HeaderValue::from_static("x-hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        let f = forwarded_fields(&h);
        assert!(f.contains_key(header::LINK));
        assert_eq!(f.len(), 1);
    }
}
