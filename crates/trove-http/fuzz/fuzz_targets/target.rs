//! The request-target normaliser (`trove_http::Target`): routing, the cache key and the
//! upstream request all read its output, so besides never panicking it must be a fixed point
//! (normalising a key again changes nothing) and its parts must be slices of one consistent
//! URL. Input: a request target and a `Host` value, split at the first `\n`.
#![no_main]

use http::header::HOST;
use http::{HeaderMap, HeaderValue, Uri, Version};
use libfuzzer_sys::fuzz_target;
use trove_http::target::{normal_path, parse_authority};
use trove_http::Target;

fuzz_target!(|data: &[u8]| {
    let (target, host) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    if let Ok(s) = std::str::from_utf8(host) {
        let _ = parse_authority(s);
    }
    if let Ok(s) = std::str::from_utf8(target) {
        let _ = normal_path(s);
        let _ = Target::parse(s);
    }
    let Ok(uri) = Uri::try_from(target) else {
        return;
    };
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(host) {
        headers.insert(HOST, v);
    }
    for version in [Version::HTTP_11, Version::HTTP_10] {
        let Ok(t) = Target::from_request(&uri, &headers, version) else {
            continue;
        };
        check(&t);
    }
    if let Ok(t) = Target::from_absolute(&uri) {
        check(&t);
    }
});

fn check(t: &Target) {
    let key = t.key();
    assert_eq!(
        key,
        format!("{}://{}{}", t.scheme(), t.authority(), t.path_and_query())
    );
    assert_eq!(t.origin(), format!("{}://{}", t.scheme(), t.authority()));
    assert!(!t.host().is_empty());
    assert!(!t.host().bytes().any(|b| b.is_ascii_uppercase()), "{key}");
    assert!(t.authority().starts_with(t.host()));
    if t.is_asterisk() {
        assert_eq!(t.path(), "*");
        return;
    }
    assert!(t.path().starts_with('/'), "{key}");
    // The path is in normal form: normalising it again is the identity.
    assert_eq!(normal_path(t.path()).as_deref(), Some(t.path()), "{key}");
    // So is the whole key.
    let again = Target::parse(key).unwrap_or_else(|e| panic!("{key}: {e}"));
    assert_eq!(again.key(), key);
    assert_eq!(again.host(), t.host());
    assert_eq!(again.port(), t.port());
}
