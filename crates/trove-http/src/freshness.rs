//! Freshness lifetime (RFC 9111 §4.2.1, §4.2.2) and age (§4.2.3, §5.1).
//!
//! All arithmetic saturates: a `Date` in the future, an `Age` of 2^63 or a
//! clock that went backwards give zero or the largest value, never a panic.

use std::time::{Duration, SystemTime};

use http::{header, HeaderMap, HeaderValue, StatusCode};

use crate::field::{date_field, parse_delta_seconds, split_list, DELTA_SECONDS_MAX};
use crate::policy::{effective_response_directives, EffectiveCacheControl, Policy};

/// How long a response stays fresh, and whether that was guessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshnessLifetime {
    /// The freshness lifetime.
    pub duration: Duration,
    /// True when it came from the heuristic of §4.2.2 rather than from
    /// `s-maxage`, `max-age` or `Expires`.
    pub heuristic: bool,
}

/// Status codes that are heuristically cacheable (RFC 9110 §15.1).
pub fn is_heuristically_cacheable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// The freshness lifetime of a stored response (RFC 9111 §4.2.1), using its
/// `Date` field. Without a `Date` field an `Expires` or heuristic lifetime
/// cannot be computed and is zero; the proxy adds `Date` on receipt (see
/// [`ensure_date`]) or calls [`freshness_lifetime_received`].
pub fn freshness_lifetime(
    policy: &Policy,
    status: StatusCode,
    headers: &HeaderMap,
) -> FreshnessLifetime {
    lifetime(policy, status, headers, date_field(headers, &header::DATE))
}

/// [`freshness_lifetime`], using `response_time` in place of a missing or
/// invalid `Date` ("using the time the message was received if it is not
/// present", §4.2.1).
pub fn freshness_lifetime_received(
    policy: &Policy,
    status: StatusCode,
    headers: &HeaderMap,
    response_time: SystemTime,
) -> FreshnessLifetime {
    let date = date_field(headers, &header::DATE).unwrap_or(response_time);
    lifetime(policy, status, headers, Some(date))
}

/// [`freshness_lifetime_received`] from what a caller has already read of `headers`:
/// `directives` ([`effective_response_directives`] of them under `policy`) and `date`,
/// their `Date` ([`date_value`]) or the time of receipt. Storing a response reads both
/// for other rules too, and parses each once.
pub fn freshness_lifetime_parsed(
    policy: &Policy,
    status: StatusCode,
    headers: &HeaderMap,
    directives: &EffectiveCacheControl,
    date: SystemTime,
) -> FreshnessLifetime {
    lifetime_with(policy, status, headers, directives, Some(date))
}

/// The `Date` field's value: `None` when it is absent, repeated or not an HTTP-date.
pub fn date_value(headers: &HeaderMap) -> Option<SystemTime> {
    date_field(headers, &header::DATE)
}

fn lifetime(
    policy: &Policy,
    status: StatusCode,
    headers: &HeaderMap,
    date: Option<SystemTime>,
) -> FreshnessLifetime {
    let directives = effective_response_directives(policy, headers);
    lifetime_with(policy, status, headers, &directives, date)
}

fn lifetime_with(
    policy: &Policy,
    status: StatusCode,
    headers: &HeaderMap,
    directives: &EffectiveCacheControl,
    date: Option<SystemTime>,
) -> FreshnessLifetime {
    let explicit = |secs: u64| FreshnessLifetime {
        duration: Duration::from_secs(secs),
        heuristic: false,
    };
    let cc = &directives.cc;
    if policy.shared {
        if let Some(s) = cc.s_maxage {
            return explicit(s);
        }
    }
    if let Some(m) = cc.max_age {
        return explicit(m);
    }
    // RFC 9213 §2.1: a targeted field replaces Expires as well.
    if directives.targeted.is_none() && headers.contains_key(header::EXPIRES) {
        // An invalid Expires, such as "0", means "already expired" (§5.3).
        let expires = date_field(headers, &header::EXPIRES);
        let secs = match (expires, date) {
            (Some(e), Some(d)) => e.duration_since(d).map(|d| d.as_secs()).unwrap_or(0),
            _ => 0,
        };
        return explicit(secs.min(DELTA_SECONDS_MAX));
    }
    if !(is_heuristically_cacheable(status) || cc.public) {
        return explicit(0);
    }
    let heuristic = match (date_field(headers, &header::LAST_MODIFIED), date) {
        (Some(lm), Some(d)) => {
            let since = d.duration_since(lm).unwrap_or(Duration::ZERO);
            let fraction = if policy.heuristic_fraction > 0.0 {
                policy.heuristic_fraction
            } else {
                0.0
            };
            Duration::try_from_secs_f64(since.as_secs_f64() * fraction)
                .unwrap_or(policy.heuristic_max)
                .min(policy.heuristic_max)
        }
        _ => Duration::ZERO,
    };
    FreshnessLifetime {
        duration: Duration::from_secs(heuristic.as_secs()),
        heuristic: true,
    }
}

/// The `Age` field value (§5.1): the first member of the first line, or zero
/// when it is absent or not a non-negative integer ("a cache SHOULD ignore
/// the field").
pub fn age_header(headers: &HeaderMap) -> Duration {
    // An origin's answer rarely has one: looked for before it is probed for.
    if !crate::field::has_field(headers, &header::AGE) {
        return Duration::ZERO;
    }
    let Some(first) = headers.get(header::AGE) else {
        return Duration::ZERO;
    };
    let text = String::from_utf8_lossy(first.as_bytes());
    let secs = split_list(&text)
        .first()
        .and_then(|m| parse_delta_seconds(m))
        .unwrap_or(0);
    Duration::from_secs(secs)
}

/// The current age of a stored response (RFC 9111 §4.2.3):
///
/// ```text
/// apparent_age = max(0, response_time - date_value)
/// response_delay = response_time - request_time
/// corrected_age_value = age_value + response_delay
/// corrected_initial_age = max(apparent_age, corrected_age_value)
/// resident_time = now - response_time
/// current_age = corrected_initial_age + resident_time
/// ```
///
/// `request_time` is when the cache sent the request that produced the
/// response, `response_time` when the response arrived. A missing or invalid
/// `Date` counts as `response_time`.
pub fn current_age(
    headers: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
    now: SystemTime,
) -> Duration {
    current_age_dated(
        headers,
        date_value(headers),
        request_time,
        response_time,
        now,
    )
}

/// [`current_age`] with the `Date` field already read (`date`: [`date_value`]).
pub fn current_age_dated(
    headers: &HeaderMap,
    date: Option<SystemTime>,
    request_time: SystemTime,
    response_time: SystemTime,
    now: SystemTime,
) -> Duration {
    let date_value = date.unwrap_or(response_time);
    // Compared before subtracted: the times are often equal (a response dated the second
    // it came, received as it was asked for, prepared as it arrived), and a comparison
    // costs a fraction of a subtraction.
    let since = |later: SystemTime, earlier: SystemTime| {
        if later <= earlier {
            return Duration::ZERO;
        }
        later.duration_since(earlier).unwrap_or(Duration::ZERO)
    };
    let apparent_age = since(response_time, date_value);
    let response_delay = since(response_time, request_time);
    let corrected_age_value = age_header(headers).saturating_add(response_delay);
    let corrected_initial_age = apparent_age.max(corrected_age_value);
    let resident_time = since(now, response_time);
    corrected_initial_age.saturating_add(resident_time)
}

/// The `Age` header value for an age (§5.1): whole seconds, saturating at
/// 2147483648 (§1.2.2).
pub fn age_value(age: Duration) -> HeaderValue {
    HeaderValue::from(age.as_secs().min(DELTA_SECONDS_MAX))
}

/// Appends `Date: response_time` when the response has no `Date` field, as
/// a recipient with a clock must before caching (RFC 9110 §6.6.1).
pub fn ensure_date(headers: &mut HeaderMap, response_time: SystemTime) {
    if !headers.contains_key(header::DATE) {
        if let Ok(v) = HeaderValue::from_str(&crate::field::format_http_date(response_time)) {
            headers.insert(header::DATE, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::format_http_date;
    use crate::policy::CDN_CACHE_CONTROL;
    use http::HeaderName;

    const T0: u64 = 1_700_000_000;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn date(secs: u64) -> String {
        format_http_date(at(secs))
    }

    fn headers(pairs: &[(HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(n, HeaderValue::from_str(v).expect("test header"));
        }
        h
    }

    fn lifetime_secs(policy: &Policy, status: u16, h: &HeaderMap) -> (u64, bool) {
        let status = StatusCode::from_u16(status).expect("status");
        let l = freshness_lifetime(policy, status, h);
        (l.duration.as_secs(), l.heuristic)
    }

    #[test]
    fn s_maxage_overrides_max_age_in_shared_cache_9111_5_2_2_10() {
        let h = headers(&[(header::CACHE_CONTROL, "max-age=100, s-maxage=10")]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (10, false));
        let private = Policy {
            shared: false,
            ..Policy::default()
        };
        assert_eq!(lifetime_secs(&private, 200, &h), (100, false));
    }

    #[test]
    fn max_age_overrides_expires_9111_5_3() {
        let h = headers(&[
            (header::DATE, &date(T0)),
            (header::EXPIRES, &date(T0 + 1000)),
            (header::CACHE_CONTROL, "max-age=5"),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (5, false));
    }

    #[test]
    fn expires_minus_date_is_the_lifetime_9111_4_2_1() {
        let h = headers(&[
            (header::DATE, &date(T0)),
            (header::EXPIRES, &date(T0 + 300)),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (300, false));
        // Expires before Date: already stale, not negative.
        let past = headers(&[
            (header::DATE, &date(T0)),
            (header::EXPIRES, &date(T0 - 300)),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &past), (0, false));
    }

    #[test]
    fn expires_without_date_uses_response_time_9111_4_2_1() {
        let h = headers(&[(header::EXPIRES, &date(T0 + 60))]);
        let l = freshness_lifetime_received(&Policy::default(), StatusCode::OK, &h, at(T0));
        assert_eq!(l.duration, Duration::from_secs(60));
        // Without either, the lifetime cannot be established: zero.
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (0, false));
    }

    #[test]
    fn invalid_expires_means_already_expired_9111_5_3() {
        for bad in ["0", "-1", "garbage", ""] {
            let h = headers(&[
                (header::DATE, &date(T0)),
                (header::EXPIRES, bad),
                (header::LAST_MODIFIED, &date(T0 - 100_000)),
            ]);
            // Explicit (expired), so no heuristic is applied either.
            assert_eq!(
                lifetime_secs(&Policy::default(), 200, &h),
                (0, false),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn two_expires_lines_are_treated_as_stale_9111_4_2_1() {
        let h = headers(&[
            (header::DATE, &date(T0)),
            (header::EXPIRES, &date(T0 + 100)),
            (header::EXPIRES, &date(T0 + 100)),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (0, false));
    }

    #[test]
    fn heuristic_is_fraction_of_date_minus_last_modified_9111_4_2_2() {
        let h = headers(&[
            (header::DATE, &date(T0)),
            (header::LAST_MODIFIED, &date(T0 - 1000)),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (100, true));
        assert_eq!(lifetime_secs(&Policy::default(), 404, &h), (100, true));
    }

    #[test]
    fn heuristic_is_capped_at_heuristic_max_9111_4_2_2() {
        let h = headers(&[
            (header::DATE, &date(T0)),
            (header::LAST_MODIFIED, &date(T0 - 100 * 86_400)),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (86_400, true));
        let odd = Policy {
            heuristic_fraction: f64::NAN,
            ..Policy::default()
        };
        assert_eq!(lifetime_secs(&odd, 200, &h), (0, true));
        let huge = Policy {
            heuristic_fraction: f64::INFINITY,
            ..Policy::default()
        };
        assert_eq!(lifetime_secs(&huge, 200, &h), (86_400, true));
    }

    #[test]
    fn no_heuristic_for_status_not_heuristically_cacheable_9111_4_2_2() {
        let h = headers(&[
            (header::DATE, &date(T0)),
            (header::LAST_MODIFIED, &date(T0 - 1000)),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 302, &h), (0, false));
        assert_eq!(lifetime_secs(&Policy::default(), 500, &h), (0, false));
        // `public` makes any status eligible (§3 "contains public").
        let mut public = h.clone();
        public.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
        assert_eq!(lifetime_secs(&Policy::default(), 302, &public), (100, true));
    }

    #[test]
    fn last_modified_after_date_gives_zero_heuristic() {
        let h = headers(&[
            (header::DATE, &date(T0)),
            (header::LAST_MODIFIED, &date(T0 + 1000)),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (0, true));
        let garbage = headers(&[
            (header::DATE, &date(T0)),
            (header::LAST_MODIFIED, "yesterday"),
        ]);
        assert_eq!(lifetime_secs(&Policy::default(), 200, &garbage), (0, true));
    }

    #[test]
    fn targeted_field_replaces_expires_too_9213_2_1() {
        let h = headers(&[
            (header::DATE, &date(T0)),
            (header::EXPIRES, &date(T0 + 1000)),
            (CDN_CACHE_CONTROL, "public"),
            (header::LAST_MODIFIED, &date(T0 - 50)),
        ]);
        assert_eq!(lifetime_secs(&Policy::reverse_proxy(), 200, &h), (5, true));
        assert_eq!(lifetime_secs(&Policy::default(), 200, &h), (1000, false));
    }

    #[test]
    fn age_uses_corrected_initial_age_9111_4_2_3() {
        // Sent at T0, received at T0+2, Date says T0-10 (clock skew), Age 30.
        let h = headers(&[(header::DATE, &date(T0 - 10)), (header::AGE, "30")]);
        // apparent_age = 12, corrected_age_value = 30 + 2 = 32, resident = 8.
        let age = current_age(&h, at(T0), at(T0 + 2), at(T0 + 10));
        assert_eq!(age, Duration::from_secs(40));
        // When Date is further off than Age, apparent_age wins.
        let h2 = headers(&[(header::DATE, &date(T0 - 100)), (header::AGE, "1")]);
        assert_eq!(
            current_age(&h2, at(T0), at(T0), at(T0)),
            Duration::from_secs(100)
        );
    }

    #[test]
    fn age_with_missing_date_uses_response_time_9111_4_2_3() {
        let h = headers(&[]);
        let age = current_age(&h, at(T0), at(T0 + 3), at(T0 + 10));
        assert_eq!(age, Duration::from_secs(10));
    }

    #[test]
    fn date_in_the_future_gives_zero_apparent_age_9111_4_2_3() {
        let h = headers(&[(header::DATE, &date(T0 + 1000))]);
        assert_eq!(
            current_age(&h, at(T0), at(T0), at(T0 + 5)),
            Duration::from_secs(5)
        );
        // Clocks going backwards never panic.
        assert_eq!(
            current_age(&h, at(T0 + 9), at(T0), at(T0 - 5)),
            Duration::ZERO
        );
    }

    #[test]
    fn invalid_age_is_ignored_9111_5_1() {
        for bad in ["-5", "abc", "1.5", "", " "] {
            let h = headers(&[(header::AGE, bad)]);
            assert_eq!(age_header(&h), Duration::ZERO, "{bad:?}");
        }
    }

    #[test]
    fn list_valued_age_uses_first_member_9111_5_1() {
        let h = headers(&[(header::AGE, "7, 9"), (header::AGE, "100")]);
        assert_eq!(age_header(&h), Duration::from_secs(7));
    }

    #[test]
    fn overflowing_age_saturates_9111_1_2_2() {
        let h = headers(&[(header::AGE, "999999999999999999999999999")]);
        assert_eq!(age_header(&h), Duration::from_secs(DELTA_SECONDS_MAX));
        assert_eq!(
            age_value(Duration::MAX),
            HeaderValue::from_static("2147483648")
        );
        assert_eq!(
            age_value(Duration::from_millis(1999)),
            HeaderValue::from_static("1")
        );
    }

    #[test]
    fn date_is_added_when_missing_9110_6_6_1() {
        let mut h = HeaderMap::new();
        ensure_date(&mut h, at(T0));
        assert_eq!(date_field(&h, &header::DATE), Some(at(T0)));
        ensure_date(&mut h, at(T0 + 5));
        assert_eq!(date_field(&h, &header::DATE), Some(at(T0)));
    }

    #[test]
    fn heuristically_cacheable_statuses_9110_15_1() {
        for s in [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501] {
            assert!(
                is_heuristically_cacheable(StatusCode::from_u16(s).expect("s")),
                "{s}"
            );
        }
        for s in [201, 302, 303, 307, 400, 403, 500, 502, 503] {
            assert!(
                !is_heuristically_cacheable(StatusCode::from_u16(s).expect("s")),
                "{s}"
            );
        }
    }
}
