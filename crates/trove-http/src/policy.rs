//! The knobs of this cache's behaviour, and the choice between
//! `Cache-Control` and targeted cache-control fields (RFC 9213).

use std::time::Duration;

use http::{header, HeaderMap, HeaderName};

use crate::cache_control::CacheControl;

/// `Trove-Cache-Control`: a targeted field (RFC 9213 §2) aimed at trove
/// alone, so an origin behind trove can steer it without affecting other
/// caches.
pub const TROVE_CACHE_CONTROL: HeaderName = HeaderName::from_static("trove-cache-control");

/// `CDN-Cache-Control` (RFC 9213 §3), aimed at every CDN cache, which trove
/// is in reverse mode.
pub const CDN_CACHE_CONTROL: HeaderName = HeaderName::from_static("cdn-cache-control");

/// How this cache applies RFC 9111.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// A shared cache (RFC 9111 §1): obeys `s-maxage`, `proxy-revalidate`
    /// and `private`, and the Authorization rule of §3.5. True for trove.
    pub shared: bool,
    /// Fraction of the time since `Last-Modified` used as a heuristic
    /// freshness lifetime (RFC 9111 §4.2.2 suggests "some fraction"; 10%
    /// is the customary value).
    pub heuristic_fraction: f64,
    /// Upper bound on a heuristic freshness lifetime.
    pub heuristic_max: Duration,
    /// Targeted cache-control fields this cache obeys, highest priority
    /// first (RFC 9213 §2.1). Empty in forward-proxy mode; reverse mode uses
    /// `[TROVE_CACHE_CONTROL, CDN_CACHE_CONTROL]` (see [`Policy::reverse_proxy`]).
    pub targeted_fields: Vec<HeaderName>,
    /// How stale a stored response may be and still be served when the origin
    /// cannot be reached at all (RFC 9111 §4.2.4 lets a disconnected cache
    /// serve stale; Squid's `max_stale` bounds it, one week by default).
    /// Zero turns it off.
    pub max_stale: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            shared: true,
            heuristic_fraction: 0.1,
            heuristic_max: Duration::from_secs(24 * 60 * 60),
            targeted_fields: Vec::new(),
            max_stale: Duration::from_secs(7 * 24 * 60 * 60),
        }
    }
}

impl Policy {
    /// The policy for a reverse proxy (CDN-like deployment): the default
    /// plus the targeted fields `Trove-Cache-Control` then `CDN-Cache-Control`.
    pub fn reverse_proxy() -> Policy {
        Policy {
            targeted_fields: vec![TROVE_CACHE_CONTROL, CDN_CACHE_CONTROL],
            ..Policy::default()
        }
    }
}

/// The response directives this cache must obey and where they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectiveCacheControl {
    /// The directives.
    pub cc: CacheControl,
    /// The targeted field that supplied them, or `None` for `Cache-Control`.
    /// When set, `Expires` must be ignored too (RFC 9213 §2.1).
    pub targeted: Option<HeaderName>,
}

/// The directives that govern storing and reusing this response in this
/// cache: the first targeted field in `policy.targeted_fields` that is present
/// with a valid, non-empty value, otherwise `Cache-Control` (RFC 9213 §2.1).
pub fn effective_response_cc(policy: &Policy, headers: &HeaderMap) -> CacheControl {
    effective_response_directives(policy, headers).cc
}

/// Like [`effective_response_cc`], also saying which field was used.
pub fn effective_response_directives(
    policy: &Policy,
    headers: &HeaderMap,
) -> EffectiveCacheControl {
    for name in &policy.targeted_fields {
        if let Some(cc) = CacheControl::targeted_from_headers(headers, name) {
            return EffectiveCacheControl {
                cc,
                targeted: Some(name.clone()),
            };
        }
    }
    EffectiveCacheControl {
        cc: CacheControl::from_headers(headers, &header::CACHE_CONTROL),
        targeted: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&HeaderName, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn default_is_a_shared_cache_with_ten_percent_heuristic_capped_at_a_day() {
        let p = Policy::default();
        assert!(p.shared);
        assert!((p.heuristic_fraction - 0.1).abs() < f64::EPSILON);
        assert_eq!(p.heuristic_max, Duration::from_secs(86_400));
        assert!(p.targeted_fields.is_empty());
    }

    #[test]
    fn cdn_cache_control_overrides_cache_control_9213_2_1() {
        let h = headers(&[
            (&header::CACHE_CONTROL, "no-store"),
            (&CDN_CACHE_CONTROL, "max-age=600"),
        ]);
        let p = Policy::reverse_proxy();
        let e = effective_response_directives(&p, &h);
        assert_eq!(e.targeted, Some(CDN_CACHE_CONTROL));
        assert!(!e.cc.no_store);
        assert_eq!(e.cc.max_age, Some(600));
        // A forward proxy is not a CDN and ignores the field.
        assert!(effective_response_cc(&Policy::default(), &h).no_store);
    }

    #[test]
    fn first_targeted_field_in_priority_order_wins_9213_2_1() {
        let h = headers(&[
            (&CDN_CACHE_CONTROL, "max-age=600"),
            (&TROVE_CACHE_CONTROL, "max-age=5"),
        ]);
        assert_eq!(
            effective_response_cc(&Policy::reverse_proxy(), &h).max_age,
            Some(5)
        );
    }

    #[test]
    fn invalid_targeted_field_falls_back_to_next_then_cache_control_9213_2_2() {
        let h = headers(&[
            (&TROVE_CACHE_CONTROL, "max-age=\"5"),
            (&CDN_CACHE_CONTROL, ""),
            (&header::CACHE_CONTROL, "max-age=7"),
        ]);
        let e = effective_response_directives(&Policy::reverse_proxy(), &h);
        assert_eq!(e.targeted, None);
        assert_eq!(e.cc.max_age, Some(7));
    }

    #[test]
    fn targeted_field_with_only_unknown_directives_still_overrides_9213_3_1() {
        let h = headers(&[
            (&header::CACHE_CONTROL, "no-store"),
            (&CDN_CACHE_CONTROL, "none"),
        ]);
        assert!(!effective_response_cc(&Policy::reverse_proxy(), &h).no_store);
    }
}
