//! Byte ranges: answering `Range` / `If-Range` from a stored representation
//! (RFC 9110 §14, §13.1.5), producing `Content-Range` and
//! `multipart/byteranges` framing (§14.4, §14.6), and keeping track of the
//! parts of an object stored from 206 responses (RFC 9111 §3.3, §3.4).

use std::time::Duration;

use http::{header, HeaderMap, HeaderValue, Method};

use crate::etag::{response_etag, EntityTag};
use crate::field::{combined, date_field, parse_http_date, split_list, trim_ows};

/// At most this many ranges in one request are honoured; more look like a
/// denial-of-service attempt (§14.2) and the full representation is sent.
pub const MAX_RANGES: usize = 32;

/// An inclusive byte range `first..=last`; `first <= last` always holds for
/// values produced by this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ByteRange {
    /// Offset of the first byte.
    pub first: u64,
    /// Offset of the last byte (inclusive).
    pub last: u64,
}

impl ByteRange {
    /// Number of bytes in the range.
    pub fn len(&self) -> u64 {
        self.last.saturating_sub(self.first).saturating_add(1)
    }

    /// Never true: a range holds at least one byte. Present for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// How to answer a request's `Range`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Send the whole representation (200): no `Range`, an invalid or
    /// ignored one, or `If-Range` did not match.
    Full,
    /// Send one part (206 with `Content-Range`).
    Single(ByteRange),
    /// Send several parts as `multipart/byteranges` (206).
    Multi(Vec<ByteRange>),
    /// 416 Range Not Satisfiable, with [`unsatisfied_content_range`].
    Unsatisfiable,
}

/// Parses a `Range` value against a representation of `total` bytes (§14.1.2,
/// §14.2). Other units, syntax errors, `last < first` and more than
/// [`MAX_RANGES`] ranges give `Full`; overlapping or adjacent ranges are
/// coalesced.
pub fn parse_range(value: &str, total: u64) -> RangeOutcome {
    let Some((unit, set)) = value.split_once('=') else {
        return RangeOutcome::Full;
    };
    if !trim_ows(unit).eq_ignore_ascii_case("bytes") {
        return RangeOutcome::Full;
    }
    let specs = split_list(set);
    if specs.is_empty() || specs.len() > MAX_RANGES {
        return RangeOutcome::Full;
    }
    let mut ranges = Vec::new();
    for spec in specs {
        let Some((a, b)) = spec.split_once('-') else {
            return RangeOutcome::Full;
        };
        if a.is_empty() {
            let Some(suffix) = digits(b) else {
                return RangeOutcome::Full;
            };
            if suffix > 0 && total > 0 {
                ranges.push(ByteRange {
                    first: total - suffix.min(total),
                    last: total - 1,
                });
            }
            continue;
        }
        let Some(first) = digits(a) else {
            return RangeOutcome::Full;
        };
        let last = if b.is_empty() {
            u64::MAX
        } else {
            match digits(b) {
                Some(last) if last >= first => last,
                _ => return RangeOutcome::Full,
            }
        };
        if first < total {
            ranges.push(ByteRange {
                first,
                last: last.min(total - 1),
            });
        }
    }
    match ranges.len() {
        0 => RangeOutcome::Unsatisfiable,
        1 => RangeOutcome::Single(ranges[0]),
        _ => {
            let mut sorted = ranges.clone();
            sorted.sort_by_key(|r| r.first);
            let overlapping = sorted
                .windows(2)
                .any(|w| w[1].first <= w[0].last.saturating_add(1));
            if !overlapping {
                return RangeOutcome::Multi(ranges);
            }
            let merged = merge_sorted(sorted);
            if merged.len() == 1 {
                RangeOutcome::Single(merged[0])
            } else {
                RangeOutcome::Multi(merged)
            }
        }
    }
}

/// Merges overlapping or adjacent ranges of a list sorted by `first`.
fn merge_sorted(sorted: Vec<ByteRange>) -> Vec<ByteRange> {
    let mut out: Vec<ByteRange> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match out.last_mut() {
            Some(prev) if r.first <= prev.last.saturating_add(1) => {
                prev.last = prev.last.max(r.last)
            }
            _ => out.push(r),
        }
    }
    out
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // A position beyond u64 is beyond any representation: saturate.
    Some(s.parse().unwrap_or(u64::MAX))
}

/// Does `If-Range` allow the range to be sent? (RFC 9110 §13.1.5.) An entity
/// tag must match the stored `ETag` by strong comparison; a date must equal
/// the stored `Last-Modified` exactly. Anything else, including a weak tag
/// or garbage, is false (send the full representation).
pub fn if_range_matches(if_range: &str, stored_headers: &HeaderMap) -> bool {
    let value = trim_ows(if_range);
    if value.starts_with('"') || value.starts_with("W/") {
        return match (EntityTag::parse(value), response_etag(stored_headers)) {
            (Some(tag), Some(etag)) => tag.strong_eq(&etag),
            _ => false,
        };
    }
    match (
        parse_http_date(value),
        date_field(stored_headers, &header::LAST_MODIFIED),
    ) {
        (Some(date), Some(lm)) => date == lm,
        _ => false,
    }
}

/// The range answer for a request against a stored 200 response of `total`
/// bytes: `Range` is only honoured for GET (§14.2), and `If-Range` is
/// evaluated when present. Call it after the other preconditions.
pub fn range_outcome(
    method: &Method,
    req_headers: &HeaderMap,
    stored_headers: &HeaderMap,
    total: u64,
) -> RangeOutcome {
    if *method != Method::GET {
        return RangeOutcome::Full;
    }
    let Some(range) = combined(req_headers, &header::RANGE) else {
        return RangeOutcome::Full;
    };
    if let Some(if_range) = combined(req_headers, &header::IF_RANGE) {
        if !if_range_matches(&if_range, stored_headers) {
            return RangeOutcome::Full;
        }
    }
    parse_range(&range, total)
}

/// `Content-Range: bytes first-last/total` for a 206 part (§14.4).
pub fn content_range(range: &ByteRange, total: u64) -> HeaderValue {
    ascii_value(format_content_range(range, total), "bytes */0")
}

fn format_content_range(range: &ByteRange, total: u64) -> String {
    format!("bytes {}-{}/{}", range.first, range.last, total)
}

/// `Content-Range: bytes */total` for a 416 (§14.4, §15.5.17).
pub fn unsatisfied_content_range(total: u64) -> HeaderValue {
    ascii_value(format!("bytes */{total}"), "bytes */0")
}

/// Formatted values here are ASCII digits and tokens, so conversion cannot
/// fail; the fallback only keeps the function total.
fn ascii_value(s: String, fallback: &'static str) -> HeaderValue {
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(fallback))
}

/// A `multipart/byteranges` boundary derived from `seed` (pass something
/// unpredictable per response, such as a counter mixed with the object's
/// hash, so the boundary does not occur in the content).
pub fn multipart_boundary(seed: u64) -> String {
    // SplitMix64 finaliser: spreads consecutive seeds over the whole range.
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    format!("trove-byteranges-{z:016x}")
}

/// The `Content-Type` of a multipart range response (§14.6).
pub fn multipart_content_type(boundary: &str) -> HeaderValue {
    ascii_value(
        format!("multipart/byteranges; boundary={boundary}"),
        "multipart/byteranges",
    )
}

/// The bytes that precede one part's content: delimiter, the part's
/// `Content-Type` (when the representation has one) and `Content-Range`.
pub fn multipart_part_header(
    boundary: &str,
    content_type: Option<&HeaderValue>,
    range: &ByteRange,
    total: u64,
) -> String {
    let mut s = format!("\r\n--{boundary}\r\n");
    if let Some(ct) = content_type.and_then(|v| v.to_str().ok()) {
        s.push_str("Content-Type: ");
        s.push_str(ct);
        s.push_str("\r\n");
    }
    s.push_str("Content-Range: ");
    s.push_str(&format_content_range(range, total));
    s.push_str("\r\n\r\n");
    s
}

/// The closing delimiter of a multipart range response.
pub fn multipart_trailer(boundary: &str) -> String {
    format!("\r\n--{boundary}--\r\n")
}

/// The exact `Content-Length` of a multipart range response built from the
/// functions above.
pub fn multipart_length(
    boundary: &str,
    content_type: Option<&HeaderValue>,
    ranges: &[ByteRange],
    total: u64,
) -> u64 {
    let parts = ranges.iter().fold(0u64, |acc, r| {
        acc.saturating_add(multipart_part_header(boundary, content_type, r, total).len() as u64)
            .saturating_add(r.len())
    });
    parts.saturating_add(multipart_trailer(boundary).len() as u64)
}

/// A parsed `Content-Range` of a response (§14.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentRange {
    /// The enclosed range; `None` for `bytes */len` (a 416).
    pub range: Option<ByteRange>,
    /// The complete length; `None` when the sender wrote `*`.
    pub complete_length: Option<u64>,
}

/// Parses `bytes first-last/len`, `bytes first-last/*` or `bytes */len`,
/// rejecting other units, `last < first` and `last >= len`.
pub fn parse_content_range(value: &str) -> Option<ContentRange> {
    let value = trim_ows(value);
    let (unit, rest) = value.split_once(' ')?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return None;
    }
    let (range, len) = trim_ows(rest).split_once('/')?;
    let complete_length = if len == "*" { None } else { Some(digits(len)?) };
    if range == "*" {
        return complete_length.map(|l| ContentRange {
            range: None,
            complete_length: Some(l),
        });
    }
    let (a, b) = range.split_once('-')?;
    let (first, last) = (digits(a)?, digits(b)?);
    if last < first || complete_length.is_some_and(|l| last >= l) {
        return None;
    }
    Some(ContentRange {
        range: Some(ByteRange { first, last }),
        complete_length,
    })
}

/// The `Content-Range` of a 206 response with one part, if valid.
pub fn response_content_range(headers: &HeaderMap) -> Option<ContentRange> {
    let mut values = headers.get_all(header::CONTENT_RANGE).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    parse_content_range(first.to_str().ok()?)
}

/// The byte ranges stored so far for one object of known total length
/// (RFC 9111 §3.3), kept sorted and merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialContent {
    total: u64,
    ranges: Vec<ByteRange>,
}

impl PartialContent {
    /// An object of `total` bytes with nothing stored yet.
    pub fn new(total: u64) -> PartialContent {
        PartialContent {
            total,
            ranges: Vec::new(),
        }
    }

    /// The complete length.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The stored ranges, sorted, with no two overlapping or adjacent.
    pub fn ranges(&self) -> &[ByteRange] {
        &self.ranges
    }

    /// Records a stored range, merging it with overlapping or adjacent ones.
    /// A range that extends past the end is refused (returns false): it
    /// cannot belong to this object.
    pub fn insert(&mut self, range: ByteRange) -> bool {
        if range.last < range.first || range.last >= self.total {
            return false;
        }
        self.ranges.push(range);
        self.ranges.sort_by_key(|r| r.first);
        self.ranges = merge_sorted(std::mem::take(&mut self.ranges));
        true
    }

    /// True when every byte of `range` is stored.
    pub fn covers(&self, range: &ByteRange) -> bool {
        self.ranges
            .iter()
            .any(|r| r.first <= range.first && range.last <= r.last)
    }

    /// True when the whole object is stored (an empty object always is).
    pub fn is_complete(&self) -> bool {
        self.total == 0
            || self.covers(&ByteRange {
                first: 0,
                last: self.total - 1,
            })
    }
}

/// May a new 206 be combined with stored parts of the same object? Only
/// when both carry the same strong validator (RFC 9111 §3.4): equal strong
/// `ETag`s, or, when neither has an `ETag`, equal `Last-Modified` dates that
/// are strong because the new response's `Date` is at least 60 seconds
/// later (RFC 9110 §8.8.2.2). Differing complete lengths never combine.
pub fn combinable(stored_headers: &HeaderMap, new_headers: &HeaderMap) -> bool {
    let lengths = (
        response_content_range(stored_headers).and_then(|c| c.complete_length),
        response_content_range(new_headers).and_then(|c| c.complete_length),
    );
    if let (Some(a), Some(b)) = lengths {
        if a != b {
            return false;
        }
    }
    let has_etag =
        stored_headers.contains_key(header::ETAG) || new_headers.contains_key(header::ETAG);
    if has_etag {
        return match (response_etag(stored_headers), response_etag(new_headers)) {
            (Some(a), Some(b)) => a.strong_eq(&b),
            _ => false,
        };
    }
    let lm = date_field(stored_headers, &header::LAST_MODIFIED);
    let strong = match (lm, date_field(new_headers, &header::DATE)) {
        (Some(lm), Some(date)) => date
            .duration_since(lm)
            .is_ok_and(|d| d >= Duration::from_secs(60)),
        _ => false,
    };
    strong && lm == date_field(new_headers, &header::LAST_MODIFIED)
}

#[cfg(test)]
mod tests;
