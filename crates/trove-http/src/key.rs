//! The primary cache key (RFC 9111 §2: the target URI) and the effective
//! request URI it is built from (RFC 9110 §7.1).
//!
//! Normalisation is the syntax-based kind of RFC 3986 §6.2.2 plus the
//! scheme-based kind of RFC 9110 §4.2.3, so a forward-proxy request
//! (`GET http://Example.COM:80/a`) and a reverse-proxy request (`GET /a`,
//! `Host: example.com`) for the same resource share one key.

use http::uri::{Authority, Scheme};
use http::{HeaderValue, Uri};

/// The default port of a scheme, if it is one this cache knows.
pub(crate) fn default_port(scheme: &str) -> Option<u16> {
    if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    }
}

/// The origin of an absolute URI (RFC 9110 §4.3.1): lowercase scheme,
/// lowercase host and port with the scheme's default filled in.
pub fn origin(uri: &Uri) -> Option<(String, String, Option<u16>)> {
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri.port_u16().or_else(|| default_port(&scheme));
    Some((scheme, host, port))
}

/// The cache key of a target URI: `scheme://host[:port]/path[?query]` with
/// scheme and host lowercased, a default port (80 for http, 443 for https)
/// and any userinfo dropped, an empty path made `/`, percent-encodings in
/// the path normalised (hex uppercased, unreserved characters decoded), the
/// query kept byte for byte and no fragment. A URI without scheme or
/// authority (origin-form) gives only its normalised path and query: call
/// [`effective_uri`] first.
pub fn cache_key(uri: &Uri) -> String {
    let mut key = String::new();
    if let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) {
        let scheme = scheme.to_ascii_lowercase();
        key.push_str(&scheme);
        key.push_str("://");
        key.push_str(&host.to_ascii_lowercase());
        if let Some(port) = uri.port() {
            // A port that is not a number is kept verbatim rather than lost.
            if port.as_str().parse::<u16>().ok() != default_port(&scheme) {
                key.push(':');
                key.push_str(port.as_str());
            }
        }
    }
    let path = uri.path();
    if path.is_empty() {
        key.push('/');
    } else {
        normalise_percent_encoding(path, &mut key);
    }
    if let Some(q) = uri.query() {
        key.push('?');
        key.push_str(q);
    }
    key
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

fn normalise_percent_encoding(path: &str, out: &mut String) {
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                let decoded = h * 16 + l;
                if is_unreserved(decoded) {
                    out.push(char::from(decoded));
                } else {
                    out.push('%');
                    out.push(char::from(bytes[i + 1].to_ascii_uppercase()));
                    out.push(char::from(bytes[i + 2].to_ascii_uppercase()));
                }
                i += 3;
                continue;
            }
        }
        out.push(char::from(b));
        i += 1;
    }
}

/// The effective request URI (RFC 9110 §7.1): an absolute-form target as
/// is, otherwise `scheme` plus the `Host` field plus the origin-form path
/// and query (asterisk-form gives path `/`). `None` when the authority
/// is missing or is not a plain `host[:port]` (userinfo is refused).
pub fn effective_uri(scheme: &str, host_header: Option<&HeaderValue>, uri: &Uri) -> Option<Uri> {
    if uri.scheme().is_some() && uri.authority().is_some() {
        return Some(uri.clone());
    }
    let host = host_header?.to_str().ok()?.trim();
    if host.is_empty() || host.contains('@') {
        return None;
    }
    let authority: Authority = host.parse().ok()?;
    // Authority's parser accepts `host:port` with a non-numeric port; the
    // Host grammar (RFC 9110 §7.2) does not.
    let after_ip_literal = host.rsplit(']').next().unwrap_or(host);
    if let Some((_, port)) = after_ip_literal.rsplit_once(':') {
        if !port.is_empty() && port.parse::<u16>().is_err() {
            return None;
        }
    }
    let scheme: Scheme = scheme.parse().ok()?;
    let path_and_query = match uri.path_and_query().map(|p| p.as_str()) {
        Some(p) if p.starts_with('/') => p.to_owned(),
        Some(p) if p.starts_with('?') => format!("/{p}"),
        _ => "/".to_owned(),
    };
    Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(path_and_query)
        .build()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> String {
        cache_key(&s.parse::<Uri>().expect("uri"))
    }

    #[test]
    fn scheme_and_host_are_case_insensitive_3986_6_2_2_1() {
        assert_eq!(key("HTTP://Example.COM/Path"), "http://example.com/Path");
    }

    #[test]
    fn default_ports_are_dropped_9110_4_2_3() {
        assert_eq!(key("http://example.com:80/a"), "http://example.com/a");
        assert_eq!(key("https://example.com:443/a"), "https://example.com/a");
        assert_eq!(key("http://example.com:443/a"), "http://example.com:443/a");
        assert_eq!(
            key("https://example.com:8443/a"),
            "https://example.com:8443/a"
        );
    }

    #[test]
    fn empty_path_is_slash_9110_4_2_3() {
        assert_eq!(key("http://example.com"), "http://example.com/");
        assert_eq!(key("http://example.com?q=1"), "http://example.com/?q=1");
    }

    #[test]
    fn query_is_kept_as_is_and_userinfo_dropped() {
        assert_eq!(
            key("http://example.com/a?B=%7e&a=1"),
            "http://example.com/a?B=%7e&a=1"
        );
        assert_eq!(key("http://user:pw@example.com/a"), "http://example.com/a");
        assert_eq!(key("http://[::1]:8080/"), "http://[::1]:8080/");
    }

    #[test]
    fn percent_encoding_is_normalised_in_the_path_3986_6_2_2_2() {
        assert_eq!(key("http://a/%7euser/%2f%41"), "http://a/~user/%2FA");
        assert_eq!(key("http://a/100%25"), "http://a/100%25");
        // Truncated or invalid escapes stay as they are.
        assert_eq!(key("http://a/x%4"), "http://a/x%4");
        assert_eq!(key("http://a/x%zz"), "http://a/x%zz");
    }

    #[test]
    fn forward_and_reverse_requests_share_a_key_9110_7_1() {
        let host = HeaderValue::from_static("Example.com");
        let origin_form: Uri = "/a?x=1".parse().expect("uri");
        let built = effective_uri("http", Some(&host), &origin_form).expect("effective");
        assert_eq!(cache_key(&built), key("http://example.com:80/a?x=1"));
    }

    #[test]
    fn absolute_form_ignores_host_9110_7_2() {
        let host = HeaderValue::from_static("other.example");
        let abs: Uri = "http://example.com/a".parse().expect("uri");
        assert_eq!(effective_uri("http", Some(&host), &abs), Some(abs.clone()));
    }

    #[test]
    fn missing_or_bad_host_gives_no_effective_uri_9110_7_2() {
        let path: Uri = "/a".parse().expect("uri");
        assert_eq!(effective_uri("http", None, &path), None);
        for bad in ["", "user@host", "a b", "host:port"] {
            let v = HeaderValue::from_static(bad);
            assert_eq!(effective_uri("http", Some(&v), &path), None, "{bad:?}");
        }
        let star: Uri = "*".parse().expect("uri");
        let host = HeaderValue::from_static("example.com:8080");
        let built = effective_uri("https", Some(&host), &star).expect("effective");
        assert_eq!(cache_key(&built), "https://example.com:8080/");
    }

    #[test]
    fn origin_fills_in_default_port_9110_4_3_1() {
        let a: Uri = "HTTP://A.example".parse().expect("uri");
        assert_eq!(
            origin(&a),
            Some(("http".into(), "a.example".into(), Some(80)))
        );
        let rel: Uri = "/x".parse().expect("uri");
        assert_eq!(origin(&rel), None);
    }
}
