//! Tests of RFC 9110 §14 range handling and RFC 9111 §3.3-3.4 partial storage.

use super::*;
use http::HeaderName;

fn r(first: u64, last: u64) -> ByteRange {
    ByteRange { first, last }
}

fn h(pairs: &[(&str, &'static str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (n, v) in pairs {
        m.append(
            HeaderName::from_bytes(n.as_bytes()).expect("name"),
            HeaderValue::from_static(v),
        );
    }
    m
}

#[test]
fn single_ranges_of_each_form_9110_14_1_2() {
    assert_eq!(
        parse_range("bytes=0-499", 10_000),
        RangeOutcome::Single(r(0, 499))
    );
    assert_eq!(
        parse_range("bytes=9500-", 10_000),
        RangeOutcome::Single(r(9500, 9999))
    );
    assert_eq!(
        parse_range("bytes=-500", 10_000),
        RangeOutcome::Single(r(9500, 9999))
    );
    assert_eq!(
        parse_range("BYTES = 0-0", 10),
        RangeOutcome::Single(r(0, 0))
    );
}

#[test]
fn last_pos_beyond_length_is_clamped_9110_14_1_2() {
    assert_eq!(
        parse_range("bytes=5-100", 10),
        RangeOutcome::Single(r(5, 9))
    );
    assert_eq!(
        parse_range("bytes=0-99999999999999999999999", 10),
        RangeOutcome::Single(r(0, 9))
    );
}

#[test]
fn suffix_longer_than_representation_selects_all_9110_14_1_2() {
    assert_eq!(
        parse_range("bytes=-500", 100),
        RangeOutcome::Single(r(0, 99))
    );
}

#[test]
fn multiple_ranges_keep_request_order_9110_14_1_2() {
    assert_eq!(
        parse_range("bytes=500-600,0-99", 1000),
        RangeOutcome::Multi(vec![r(500, 600), r(0, 99)])
    );
}

#[test]
fn overlapping_ranges_are_coalesced_9110_14_2() {
    assert_eq!(
        parse_range("bytes=0-10, 5-20, 30-40", 100),
        RangeOutcome::Multi(vec![r(0, 20), r(30, 40)])
    );
    assert_eq!(
        parse_range("bytes=0-10,11-20", 100),
        RangeOutcome::Single(r(0, 20))
    );
    assert_eq!(
        parse_range("bytes=0-,0-,0-", 100),
        RangeOutcome::Single(r(0, 99))
    );
}

#[test]
fn too_many_ranges_are_ignored_9110_14_2() {
    let many: Vec<String> = (0..=MAX_RANGES as u64)
        .map(|i| format!("{}-{}", i * 2, i * 2))
        .collect();
    let value = format!("bytes={}", many.join(","));
    assert_eq!(parse_range(&value, 10_000), RangeOutcome::Full);
}

#[test]
fn unsatisfiable_ranges_give_416_9110_14_1_1() {
    assert_eq!(
        parse_range("bytes=100-200", 100),
        RangeOutcome::Unsatisfiable
    );
    assert_eq!(parse_range("bytes=-0", 100), RangeOutcome::Unsatisfiable);
    assert_eq!(parse_range("bytes=0-", 0), RangeOutcome::Unsatisfiable);
    assert_eq!(parse_range("bytes=-5", 0), RangeOutcome::Unsatisfiable);
    // One satisfiable range is enough.
    assert_eq!(
        parse_range("bytes=200-300, 0-1", 100),
        RangeOutcome::Single(r(0, 1))
    );
}

#[test]
fn invalid_range_header_is_ignored_9110_14_2() {
    for bad in [
        "",
        "bytes",
        "bytes=",
        "bytes=,",
        "bytes=5-1",
        "bytes=a-b",
        "bytes=1",
        "bytes=-",
        "bytes=--5",
        "bytes=1-2-3",
        "bytes=+1-2",
        "bytes=0-1;x",
        "items=0-5",
        "bytes=0 -1",
    ] {
        assert_eq!(parse_range(bad, 100), RangeOutcome::Full, "{bad:?}");
    }
}

#[test]
fn range_only_applies_to_get_9110_14_2() {
    let req = h(&[("range", "bytes=0-1")]);
    assert_eq!(
        range_outcome(&Method::HEAD, &req, &h(&[]), 10),
        RangeOutcome::Full
    );
    assert_eq!(
        range_outcome(&Method::GET, &req, &h(&[]), 10),
        RangeOutcome::Single(r(0, 1))
    );
    assert_eq!(
        range_outcome(&Method::GET, &h(&[]), &h(&[]), 10),
        RangeOutcome::Full
    );
}

#[test]
fn if_range_with_strong_etag_9110_13_1_5() {
    let stored = h(&[
        ("etag", "\"v1\""),
        ("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
    ]);
    let req = |ir: &'static str| h(&[("range", "bytes=0-1"), ("if-range", ir)]);
    let single = RangeOutcome::Single(r(0, 1));
    assert_eq!(
        range_outcome(&Method::GET, &req("\"v1\""), &stored, 10),
        single
    );
    assert_eq!(
        range_outcome(&Method::GET, &req("\"v2\""), &stored, 10),
        RangeOutcome::Full
    );
    // Weak tags never match in If-Range.
    assert_eq!(
        range_outcome(&Method::GET, &req("W/\"v1\""), &stored, 10),
        RangeOutcome::Full
    );
    let weak_stored = h(&[("etag", "W/\"v1\"")]);
    assert_eq!(
        range_outcome(&Method::GET, &req("\"v1\""), &weak_stored, 10),
        RangeOutcome::Full
    );
}

#[test]
fn if_range_with_date_must_equal_last_modified_9110_13_1_5() {
    let stored = h(&[("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT")]);
    assert!(if_range_matches("Sun, 06 Nov 1994 08:49:37 GMT", &stored));
    assert!(!if_range_matches("Sun, 06 Nov 1994 08:49:38 GMT", &stored));
    assert!(!if_range_matches("garbage", &stored));
    assert!(!if_range_matches("Sun, 06 Nov 1994 08:49:37 GMT", &h(&[])));
}

#[test]
fn content_range_formats_9110_14_4() {
    assert_eq!(
        content_range(&r(0, 499), 1234),
        HeaderValue::from_static("bytes 0-499/1234")
    );
    assert_eq!(
        unsatisfied_content_range(1234),
        HeaderValue::from_static("bytes */1234")
    );
}

#[test]
fn content_range_parses_and_rejects_invalid_9110_14_4() {
    assert_eq!(
        parse_content_range("bytes 21010-47021/47022"),
        Some(ContentRange {
            range: Some(r(21010, 47021)),
            complete_length: Some(47022)
        })
    );
    assert_eq!(
        parse_content_range("bytes 0-9/*"),
        Some(ContentRange {
            range: Some(r(0, 9)),
            complete_length: None
        })
    );
    assert_eq!(
        parse_content_range("bytes */100"),
        Some(ContentRange {
            range: None,
            complete_length: Some(100)
        })
    );
    for bad in [
        "",
        "bytes",
        "bytes 5-1/10",
        "bytes 0-10/10",
        "bytes */*",
        "bytes 0-1",
        "items 0-1/2",
        "bytes -1-2/3",
        "bytes a-b/c",
        "bytes 0-1/-5",
    ] {
        assert_eq!(parse_content_range(bad), None, "{bad:?}");
    }
}

#[test]
fn multipart_framing_matches_its_declared_length_9110_14_6() {
    let boundary = multipart_boundary(7);
    assert_ne!(boundary, multipart_boundary(8));
    assert!(boundary.len() <= 70);
    let ct = HeaderValue::from_static("text/plain");
    let body = b"0123456789";
    let ranges = [r(0, 1), r(5, 9)];
    let mut out = Vec::new();
    for range in &ranges {
        out.extend_from_slice(multipart_part_header(&boundary, Some(&ct), range, 10).as_bytes());
        out.extend_from_slice(&body[range.first as usize..=range.last as usize]);
    }
    out.extend_from_slice(multipart_trailer(&boundary).as_bytes());
    assert_eq!(
        out.len() as u64,
        multipart_length(&boundary, Some(&ct), &ranges, 10)
    );
    let text = String::from_utf8(out).expect("ascii");
    assert!(text.contains("Content-Range: bytes 5-9/10\r\n\r\n56789"));
    assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    assert_eq!(
        multipart_content_type(&boundary).to_str().ok(),
        Some(format!("multipart/byteranges; boundary={boundary}").as_str())
    );
}

#[test]
fn partial_content_merges_adjacent_and_overlapping_ranges_9111_3_3() {
    let mut p = PartialContent::new(100);
    assert!(!p.is_complete());
    assert!(p.insert(r(0, 9)));
    assert!(p.insert(r(20, 29)));
    assert!(p.insert(r(10, 14)));
    assert_eq!(p.ranges(), &[r(0, 14), r(20, 29)]);
    assert!(p.covers(&r(3, 14)));
    assert!(!p.covers(&r(10, 20)));
    assert!(p.insert(r(5, 99)));
    assert_eq!(p.ranges(), &[r(0, 99)]);
    assert!(p.is_complete());
}

#[test]
fn partial_content_refuses_ranges_past_the_end() {
    let mut p = PartialContent::new(10);
    assert!(!p.insert(r(5, 10)));
    assert!(!p.insert(r(5, 4)));
    assert!(p.ranges().is_empty());
    assert!(PartialContent::new(0).is_complete());
}

#[test]
fn partial_responses_combine_only_with_same_strong_validator_9111_3_4() {
    let a = h(&[("etag", "\"v1\""), ("content-range", "bytes 0-9/100")]);
    let b = h(&[("etag", "\"v1\""), ("content-range", "bytes 10-19/100")]);
    assert!(combinable(&a, &b));
    let weak = h(&[("etag", "W/\"v1\""), ("content-range", "bytes 10-19/100")]);
    assert!(!combinable(&h(&[("etag", "W/\"v1\"")]), &weak));
    let other = h(&[("etag", "\"v2\"")]);
    assert!(!combinable(&a, &other));
    let other_len = h(&[("etag", "\"v1\""), ("content-range", "bytes 10-19/200")]);
    assert!(!combinable(&a, &other_len));
    assert!(!combinable(&a, &h(&[])));
    assert!(!combinable(&h(&[]), &h(&[])));
}

#[test]
fn last_modified_combines_only_when_strong_9110_8_8_2_2() {
    let lm = "Sun, 06 Nov 1994 08:49:37 GMT";
    let stored = h(&[("last-modified", lm)]);
    let strong = h(&[
        ("last-modified", lm),
        ("date", "Sun, 06 Nov 1994 08:50:37 GMT"),
    ]);
    let weak = h(&[
        ("last-modified", lm),
        ("date", "Sun, 06 Nov 1994 08:50:36 GMT"),
    ]);
    assert!(combinable(&stored, &strong));
    assert!(!combinable(&stored, &weak));
}
