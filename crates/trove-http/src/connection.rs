//! Connection-specific header fields, which a cache must not store
//! (RFC 9111 §3.1) or copy from a 304 into a stored response (§3.2), and
//! which an intermediary removes before forwarding (RFC 9110 §7.6.1).

use http::{header, HeaderMap, HeaderName};

use crate::field::{combined, list_members, split_list};

/// Fields that are always connection-specific (RFC 9110 §7.6.1), plus
/// `Connection` itself.
pub const ALWAYS_CONNECTION_SPECIFIC: [&str; 6] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// The connection-specific field names of a message: the fixed list plus
/// every field named in its `Connection` header.
pub fn connection_fields(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut names: Vec<HeaderName> = ALWAYS_CONNECTION_SPECIFIC
        .iter()
        .map(|n| HeaderName::from_static(n))
        .collect();
    if let Some(value) = combined(headers, &header::CONNECTION) {
        for option in list_members(&value) {
            if let Ok(name) = HeaderName::from_bytes(option.as_bytes()) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// Removes the connection-specific fields from `headers`.
pub fn strip_connection_fields(headers: &mut HeaderMap) {
    // Nearly every response has none of them: look before allocating the list.
    const ALWAYS: [HeaderName; 6] = [
        HeaderName::from_static(ALWAYS_CONNECTION_SPECIFIC[0]),
        HeaderName::from_static(ALWAYS_CONNECTION_SPECIFIC[1]),
        HeaderName::from_static(ALWAYS_CONNECTION_SPECIFIC[2]),
        HeaderName::from_static(ALWAYS_CONNECTION_SPECIFIC[3]),
        HeaderName::from_static(ALWAYS_CONNECTION_SPECIFIC[4]),
        HeaderName::from_static(ALWAYS_CONNECTION_SPECIFIC[5]),
    ];
    // One pass over the names a message has (a handful) rather than a hashed probe for
    // each of the six.
    if !headers.keys().any(|k| ALWAYS.contains(k)) {
        return;
    }
    for name in connection_fields(headers) {
        headers.remove(&name);
    }
}

/// The protocols a request asks to switch to (RFC 9110 §7.8): its `Upgrade` field, when
/// `Connection` names `upgrade` too (a sender of `Upgrade` must, §7.8; without it the field
/// is a stray one to drop). `h2c` is left out: RFC 9113 §3.1 retired that upgrade, and a
/// proxy that passed it on would hand its client an HTTP/2 connection it never spoke.
/// `None` when nothing is left to ask for.
pub fn upgrade_protocols(headers: &HeaderMap) -> Option<String> {
    let connection = combined(headers, &header::CONNECTION)?;
    if !split_list(&connection)
        .iter()
        .any(|o| o.eq_ignore_ascii_case("upgrade"))
    {
        return None;
    }
    let upgrade = combined(headers, &header::UPGRADE)?;
    let wanted: Vec<&str> = split_list(&upgrade)
        .into_iter()
        .filter(|p| !p.eq_ignore_ascii_case("h2c"))
        .collect();
    (!wanted.is_empty()).then(|| wanted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn upgrade_needs_both_fields_and_skips_h2c_9110_7_8() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(upgrade_protocols(&h), None, "no Connection: upgrade");
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert_eq!(upgrade_protocols(&h).as_deref(), Some("websocket"));
        h.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
        assert_eq!(upgrade_protocols(&h), None);
        h.insert(header::UPGRADE, HeaderValue::from_static("h2c, foo/2"));
        assert_eq!(upgrade_protocols(&h).as_deref(), Some("foo/2"));
        h.remove(header::UPGRADE);
        assert_eq!(upgrade_protocols(&h), None);
    }

    #[test]
    fn connection_options_and_fixed_fields_are_removed_9110_7_6_1() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, X-Hop, bad name"),
        );
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        strip_connection_fields(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::CONTENT_TYPE));
    }
}
