//! Field-value plumbing shared by the other modules: combining field lines,
//! splitting comma lists without breaking quoted strings, delta-seconds and
//! HTTP-date parsing.
//!
//! Every function here accepts arbitrary bytes from the network and returns
//! `None` (or skips the member) instead of panicking.

use std::borrow::Cow;
use std::time::SystemTime;

use http::{HeaderMap, HeaderName};

/// The largest delta-seconds value a cache needs to represent (RFC 9111
/// §1.2.2): larger values, and overflowing calculations, become 2^31.
pub const DELTA_SECONDS_MAX: u64 = 2_147_483_648;

/// Messages with at most this many distinct field names are searched by a pass over them.
const SCANNED: usize = 8;

/// Whether `headers` has a field `name`. A message has a handful of fields and most of
/// those a cache asks about are absent: for so few, a pass comparing names costs less than
/// hashing the name for a probe (the probe is what a larger map gets).
#[inline]
pub fn has_field(headers: &HeaderMap, name: &HeaderName) -> bool {
    if headers.keys_len() <= SCANNED {
        headers.keys().any(|k| k == name)
    } else {
        headers.contains_key(name)
    }
}

/// All field lines of `name` joined with ", " (RFC 9110 §5.3), or `None` when
/// the field is absent. Bytes that are not UTF-8 are replaced, which can only
/// make a directive unrecognisable, never invent one. A single line of UTF-8
/// (nearly every field) is borrowed, not copied.
pub(crate) fn combined<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<Cow<'a, str>> {
    // Usually absent (`Vary`, `Pragma`, `Connection`…): looked for before it is probed for.
    if !has_field(headers, name) {
        return None;
    }
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let mut out = String::from_utf8_lossy(first.as_bytes());
    for value in lines {
        let s = out.to_mut();
        s.push_str(", ");
        s.push_str(&String::from_utf8_lossy(value.as_bytes()));
    }
    Some(out)
}

/// Splits a `#list` (RFC 9110 §5.6.1) on commas that are outside quoted
/// strings, trims optional whitespace and drops empty members.
pub(crate) fn split_list(s: &str) -> Vec<&str> {
    list_members(s).collect()
}

/// [`split_list`] as an iterator, allocating nothing.
pub(crate) fn list_members(s: &str) -> ListMembers<'_> {
    ListMembers { rest: Some(s) }
}

/// The members of a `#list`, in order ([`list_members`]).
pub(crate) struct ListMembers<'a> {
    /// What is left to split; `None` once the last member was given.
    rest: Option<&'a str>,
}

impl<'a> Iterator for ListMembers<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            let s = self.rest?;
            let mut in_quotes = false;
            let mut escaped = false;
            let mut end = None;
            for (i, b) in s.bytes().enumerate() {
                if in_quotes {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_quotes = false;
                    }
                } else if b == b'"' {
                    in_quotes = true;
                } else if b == b',' {
                    end = Some(i);
                    break;
                }
            }
            // Commas and quotes are ASCII: `i` is a character boundary.
            let raw = match end {
                Some(i) => {
                    self.rest = Some(&s[i + 1..]);
                    &s[..i]
                }
                None => {
                    self.rest = None;
                    s
                }
            };
            let trimmed = trim_ows(raw);
            if !trimmed.is_empty() {
                return Some(trimmed);
            }
        }
    }
}

/// Trims optional whitespace (SP and HTAB, RFC 9110 §5.6.3).
pub(crate) fn trim_ows(s: &str) -> &str {
    s.trim_matches(|c| c == ' ' || c == '\t')
}

/// Removes one level of quoted-string quoting (RFC 9110 §5.6.4), undoing
/// quoted-pairs. Returns `None` for an unterminated quoted string. A value
/// that is not quoted is borrowed.
pub(crate) fn unquote(s: &str) -> Option<Cow<'_, str>> {
    let Some(inner) = s.strip_prefix('"') else {
        return Some(Cow::Borrowed(s));
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => {
                // Anything after the closing quote makes the value malformed.
                return if chars.as_str().is_empty() {
                    Some(Cow::Owned(out))
                } else {
                    None
                };
            }
            other => out.push(other),
        }
    }
    None
}

/// `tchar` from RFC 9110 §5.6.2.
pub(crate) fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// True when `s` is a non-empty `token` (RFC 9110 §5.6.2).
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_tchar)
}

/// Parses `delta-seconds` (RFC 9111 §1.2.2): one or more ASCII digits, no sign,
/// no whitespace. Values too large saturate at [`DELTA_SECONDS_MAX`].
pub fn parse_delta_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut value: u64 = 0;
    for b in s.bytes() {
        value = value.saturating_mul(10).saturating_add(u64::from(b - b'0'));
        if value >= DELTA_SECONDS_MAX {
            return Some(DELTA_SECONDS_MAX);
        }
    }
    Some(value)
}

/// Parses an HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, and the obsolete
/// RFC 850 and asctime forms recipients must accept), leniently as §5.6.7
/// recommends (see [`crate::date`]). Anything that is not a date gives `None`.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    let s = trim_ows(s);
    // An IMF-fixdate is 29 bytes; other forms and garbage are read each time.
    let Ok(text) = <[u8; IMF_FIXDATE]>::try_from(s.as_bytes()) else {
        return crate::date::parse(s);
    };
    if let Some(read) = last_date(&text) {
        return read;
    }
    let read = crate::date::parse(s);
    LAST_DATE.with(|last| last.set(Some((text, read))));
    read
}

/// What `text` read as, if it is the last IMF-fixdate this thread read.
fn last_date(text: &[u8]) -> Option<Option<SystemTime>> {
    LAST_DATE.with(|last| match last.get() {
        Some((seen, read)) if seen[..] == *text => Some(read),
        _ => None,
    })
}

/// The length of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
const IMF_FIXDATE: usize = 29;

thread_local! {
    /// The last IMF-fixdate this thread read, and what it read as. Responses stored in one
    /// second carry one `Date` (and a hit's checks read the same few again): a comparison
    /// of 29 bytes instead of a parse, for each. The parse is a pure function of the text,
    /// so what it remembers is always what it would read.
    static LAST_DATE: std::cell::Cell<Option<([u8; IMF_FIXDATE], Option<SystemTime>)>> =
        const { std::cell::Cell::new(None) };
}

/// The HTTP-date in the single field line of `name`. Several lines, or a
/// value that is not a date, give `None`: the field is treated as invalid.
pub(crate) fn date_field(headers: &HeaderMap, name: &HeaderName) -> Option<SystemTime> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    // The last date read, byte for byte: it was text, trimmed, so these bytes are too.
    if let Some(read) = last_date(first.as_bytes()) {
        return read;
    }
    parse_http_date(first.to_str().ok()?)
}

/// Formats a time as an IMF-fixdate, clamped to the range HTTP-date can
/// express (1970 to 9999): `httpdate` panics outside it, and a simulator's
/// virtual clock can go anywhere.
pub fn format_http_date(t: SystemTime) -> String {
    let max = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(253_402_300_799);
    httpdate::fmt_http_date(t.clamp(SystemTime::UNIX_EPOCH, max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn list_split_respects_quotes_and_drops_empty_members_9110_5_6_1() {
        assert_eq!(
            split_list(r#" a , ,b="x, y",, c=\"d "#),
            vec!["a", r#"b="x, y""#, r#"c=\"d"#]
        );
        assert!(split_list("").is_empty());
        assert!(split_list(" , ,").is_empty());
    }

    #[test]
    fn unquote_handles_quoted_pairs_and_rejects_unterminated_9110_5_6_4() {
        assert_eq!(unquote(r#""a\"b""#).as_deref(), Some("a\"b"));
        assert_eq!(unquote("plain").as_deref(), Some("plain"));
        assert_eq!(unquote("\"open"), None);
        assert_eq!(unquote("\"a\"b"), None);
        assert_eq!(unquote("\"a\\"), None);
    }

    #[test]
    fn delta_seconds_saturates_at_2_pow_31_9111_1_2_2() {
        assert_eq!(parse_delta_seconds("0"), Some(0));
        assert_eq!(parse_delta_seconds("0042"), Some(42));
        assert_eq!(parse_delta_seconds("2147483647"), Some(2_147_483_647));
        assert_eq!(parse_delta_seconds("2147483648"), Some(DELTA_SECONDS_MAX));
        assert_eq!(
            parse_delta_seconds("99999999999999999999999999999"),
            Some(DELTA_SECONDS_MAX)
        );
        for bad in ["", "-1", "+1", "1.5", " 1", "1 ", "0x10", "１"] {
            assert_eq!(parse_delta_seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn all_three_date_formats_are_accepted_9110_5_6_7() {
        let imf = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
        assert!(imf.is_some());
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), imf);
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), imf);
        for bad in ["", "0", "-1", "yesterday", "Sun, 06 Nov 1994 25:49:37 GMT"] {
            assert_eq!(parse_http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formatting_dates_outside_http_range_does_not_panic() {
        let far = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(u64::MAX / 4);
        assert_eq!(format_http_date(far), "Fri, 31 Dec 9999 23:59:59 GMT");
        let before = SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(10);
        assert_eq!(format_http_date(before), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn date_field_with_several_lines_is_invalid() {
        let mut h = HeaderMap::new();
        let name = http::header::DATE;
        h.append(
            &name,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert!(date_field(&h, &name).is_some());
        h.append(
            &name,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:38 GMT"),
        );
        assert_eq!(date_field(&h, &name), None);
    }

    /// The last date read is remembered by its text: whatever comes in turn (the same date,
    /// another, a 29-byte non-date, padding, a field of several lines), each reads as the
    /// parser reads it.
    #[test]
    fn remembered_dates_read_as_parsed() {
        let texts = [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Mon, 07 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 XYZ",
            " Sun, 06 Nov 1994 08:49:37 GMT ",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 XYZ",
        ];
        for t in texts {
            assert_eq!(parse_http_date(t), crate::date::parse(trim_ows(t)), "{t:?}");
            let mut h = HeaderMap::new();
            h.insert(http::header::DATE, HeaderValue::from_str(t).unwrap());
            assert_eq!(
                date_field(&h, &http::header::DATE),
                parse_http_date(t),
                "{t:?}"
            );
            h.append(http::header::DATE, HeaderValue::from_str(t).unwrap());
            assert_eq!(date_field(&h, &http::header::DATE), None, "{t:?} twice");
        }
    }

    #[test]
    fn has_field_scans_few_and_probes_many() {
        let mut h = HeaderMap::new();
        assert!(!has_field(&h, &http::header::AGE));
        for i in 0..12 {
            let name = HeaderName::from_bytes(format!("x-{i}").as_bytes()).unwrap();
            h.insert(name.clone(), HeaderValue::from_static("1"));
            assert!(has_field(&h, &name));
            assert!(!has_field(&h, &http::header::AGE));
        }
        h.insert(http::header::AGE, HeaderValue::from_static("1"));
        assert!(has_field(&h, &http::header::AGE));
    }

    #[test]
    fn combined_joins_lines_and_survives_non_utf8() {
        let mut h = HeaderMap::new();
        let name = http::header::CACHE_CONTROL;
        assert_eq!(combined(&h, &name), None);
        h.append(&name, HeaderValue::from_static("a"));
        h.append(&name, HeaderValue::from_bytes(b"b\xff").unwrap());
        assert_eq!(combined(&h, &name).as_deref(), Some("a, b\u{fffd}"));
    }
}
