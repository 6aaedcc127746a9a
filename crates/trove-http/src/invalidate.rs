//! Which stored responses an unsafe request invalidates (RFC 9111 §4.4).
//!
//! Includes the small part of RFC 3986 §5.2 reference resolution needed to
//! read relative `Location` / `Content-Location` values.

use http::{header, HeaderMap, Method, StatusCode, Uri};

use crate::target::Target;

/// True for the safe methods (RFC 9110 §9.2.1). Any other method, including
/// unknown ones, may change state and triggers invalidation.
pub fn is_safe_method(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// The targets whose stored responses must be invalidated after `method` on `target` got
/// `status` with `resp_headers` (§4.4).
///
/// Only an unsafe method with a non-error status (2xx or 3xx) invalidates.
/// Then the target always, and the URIs in `Location` and `Content-Location`
/// (resolved against the target, then normalised like every target) when they have the same
/// origin as the target: a different origin could be a denial-of-service attempt.
/// Duplicates are removed.
pub fn invalidation_targets(
    method: &Method,
    status: StatusCode,
    target: &Target,
    resp_headers: &HeaderMap,
) -> Vec<Target> {
    if is_safe_method(method) || !(status.is_success() || status.is_redirection()) {
        return Vec::new();
    }
    let mut targets = vec![target.clone()];
    let Ok(base) = target.key().parse::<Uri>() else {
        return targets;
    };
    for name in [header::LOCATION, header::CONTENT_LOCATION] {
        let mut values = resp_headers.get_all(&name).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            continue;
        };
        let Some(other) = value
            .to_str()
            .ok()
            .and_then(|v| resolve_reference(&base, v))
            .and_then(|u| Target::from_absolute(&u).ok())
        else {
            continue;
        };
        if other.origin() == target.origin() && !targets.contains(&other) {
            targets.push(other);
        }
    }
    targets
}

/// Resolves a URI reference against an absolute base URI (RFC 3986 §5.2),
/// dropping any fragment. `None` when the base is not absolute or the result
/// is not a valid URI.
pub fn resolve_reference(base: &Uri, reference: &str) -> Option<Uri> {
    let reference = reference.trim();
    let reference = reference.split_once('#').map_or(reference, |(r, _)| r);
    if has_scheme(reference) {
        return reference.parse().ok();
    }
    let scheme = base.scheme_str()?;
    if let Some(rest) = reference.strip_prefix("//") {
        return format!("{scheme}://{rest}").parse().ok();
    }
    let authority = base.authority()?.as_str();
    let (ref_path, ref_query) = match reference.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (reference, None),
    };
    let (path, query) = if ref_path.is_empty() {
        (base.path().to_owned(), ref_query.or(base.query()))
    } else if ref_path.starts_with('/') {
        (remove_dot_segments(ref_path), ref_query)
    } else {
        let base_path = base.path();
        let dir = match base_path.rfind('/') {
            Some(i) => &base_path[..=i],
            None => "/",
        };
        (remove_dot_segments(&format!("{dir}{ref_path}")), ref_query)
    };
    let path = if path.is_empty() {
        "/".to_owned()
    } else {
        path
    };
    let mut s = format!("{scheme}://{authority}{path}");
    if let Some(q) = query {
        s.push('?');
        s.push_str(q);
    }
    s.parse().ok()
}

fn has_scheme(reference: &str) -> bool {
    let Some((scheme, _)) = reference.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// RFC 3986 §5.2.4 `remove_dot_segments`.
fn remove_dot_segments(path: &str) -> String {
    let absolute = path.starts_with('/');
    let segments: Vec<&str> = path.split('/').skip(usize::from(absolute)).collect();
    let last = segments.len().saturating_sub(1);
    let mut out: Vec<&str> = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." | ".." => {
                if *seg == ".." {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    if absolute {
        format!("/{joined}")
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::cache_key;
    use http::{HeaderName, HeaderValue};

    fn uri(s: &str) -> Uri {
        s.parse().expect("uri")
    }

    fn h(pairs: &[(HeaderName, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (n, v) in pairs {
            m.append(n, HeaderValue::from_static(v));
        }
        m
    }

    fn targets(method: Method, status: u16, resp: &HeaderMap) -> Vec<String> {
        let status = StatusCode::from_u16(status).expect("status");
        let target = Target::parse("http://example.com/a/b?x").expect("target");
        invalidation_targets(&method, status, &target, resp)
            .into_iter()
            .map(Target::into_key)
            .collect()
    }

    #[test]
    fn unsafe_method_with_success_invalidates_target_9111_4_4() {
        for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert_eq!(targets(m, 200, &h(&[])), ["http://example.com/a/b?x"]);
        }
        let unknown = Method::from_bytes(b"FROB").expect("method");
        assert_eq!(targets(unknown, 303, &h(&[])).len(), 1);
    }

    #[test]
    fn safe_methods_and_error_statuses_do_not_invalidate_9111_4_4() {
        for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
            assert!(targets(m, 200, &h(&[])).is_empty());
        }
        for s in [400, 404, 500, 503, 100] {
            assert!(targets(Method::POST, s, &h(&[])).is_empty(), "{s}");
        }
    }

    #[test]
    fn location_and_content_location_on_same_origin_are_invalidated_9111_4_4() {
        let resp = h(&[
            (header::LOCATION, "/new"),
            (header::CONTENT_LOCATION, "c?y#frag"),
        ]);
        assert_eq!(
            targets(Method::POST, 201, &resp),
            [
                "http://example.com/a/b?x",
                "http://example.com/new",
                "http://example.com/a/c?y"
            ]
        );
        let absolute = h(&[(header::LOCATION, "HTTP://EXAMPLE.com:80/z")]);
        assert_eq!(
            targets(Method::PUT, 200, &absolute)[1],
            "http://example.com/z"
        );
    }

    #[test]
    fn other_origins_are_never_invalidated_9111_4_4() {
        for other in [
            "http://evil.example/a",
            "https://example.com/a",
            "http://example.com:8080/a",
            "//evil.example/a",
        ] {
            let resp = h(&[(header::LOCATION, other)]);
            assert_eq!(targets(Method::POST, 200, &resp).len(), 1, "{other}");
        }
    }

    #[test]
    fn garbage_locations_are_skipped() {
        for bad in ["", "http://", "a b", "mailto:x@y"] {
            let resp = h(&[(header::LOCATION, bad)]);
            assert_eq!(targets(Method::POST, 200, &resp).len(), 1, "{bad:?}");
        }
        let twice = h(&[(header::LOCATION, "/x"), (header::LOCATION, "/y")]);
        assert_eq!(targets(Method::POST, 200, &twice).len(), 1);
    }

    #[test]
    fn reference_resolution_examples_3986_5_4() {
        let base = uri("http://a/b/c/d;p?q");
        let cases = [
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g/"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("g/../h", "http://a/b/c/h"),
            ("g#s", "http://a/b/c/g"),
        ];
        for (reference, expected) in cases {
            let got = resolve_reference(&base, reference).and_then(|u| cache_key(&u));
            assert_eq!(got.as_deref(), Some(expected), "{reference:?}");
        }
        assert_eq!(resolve_reference(&uri("/relative"), "g"), None);
    }
}
