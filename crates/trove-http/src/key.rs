//! The primary cache key (RFC 9111 §2): the target URI in the one normal form of
//! [`crate::target::Target`], so a forward-proxy request (`GET http://Example.COM:80/a`) and a
//! reverse-proxy request (`GET /a`, `Host: example.com`) for the same resource share one key,
//! and the key is always the URL that was routed and sent upstream.

use http::Uri;

use crate::target::Target;

/// The cache key of an absolute `http` or `https` URI: `scheme://host[:port]/path[?query]`
/// normalised as [`Target`] says (lowercase scheme and host, default port dropped, empty path
/// made `/`, percent-encodings normalised and dot segments removed in the path, the query
/// byte for byte). `None` for a URI that is not a valid target (no host, userinfo, another
/// scheme, a malformed escape): such a URI names nothing this cache could hold.
pub fn cache_key(uri: &Uri) -> Option<String> {
    Target::from_absolute(uri).ok().map(Target::into_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> String {
        cache_key(&s.parse::<Uri>().expect("uri")).expect("key")
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
    fn query_is_kept_as_is() {
        assert_eq!(
            key("http://example.com/a?B=%7e&a=1"),
            "http://example.com/a?B=%7e&a=1"
        );
        assert_eq!(key("http://[::1]:8080/"), "http://[::1]:8080/");
    }

    #[test]
    fn percent_encoding_is_normalised_in_the_path_3986_6_2_2_2() {
        assert_eq!(key("http://a/%7euser/%2f%41"), "http://a/~user/%2FA");
        assert_eq!(key("http://a/100%25"), "http://a/100%25");
    }

    #[test]
    fn what_is_not_a_target_has_no_key() {
        for bad in [
            "http://user:pw@example.com/a",
            "http://a/x%4",
            "http://a/x%zz",
            "ftp://a/x",
            "/relative",
        ] {
            assert_eq!(cache_key(&bad.parse().expect("uri")), None, "{bad}");
        }
    }
}
