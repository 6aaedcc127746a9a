//! HTTP-date (RFC 9110 §5.6.7), read as strictly as RFC 9111 §5.3 needs.
//!
//! A recipient must accept the three forms §5.6.7 defines, and only those:
//!
//! - IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`: two-digit day, four-digit year,
//!   two-digit hour, minute and second, single spaces, `GMT`;
//! - the obsolete RFC 850 form, `Sunday, 06-Nov-94 08:49:37 GMT`: full weekday name,
//!   two-digit year;
//! - asctime, `Sun Nov  6 08:49:37 1994`: the day padded with a space to two characters.
//!
//! Leniency stays *within* these forms: names and `GMT` in any case, and a weekday that
//! does not match the date (it is ignored; the date is what counts). Anything beyond them
//! (a missing comma, doubled spaces, a one-digit hour, `UTC`, a two-digit year in the
//! IMF form, a four-digit one in the RFC 850 form) is not an HTTP-date. That matters
//! because RFC 9111 §5.3 makes a cache treat an invalid `Expires` as a time in the past:
//! reading `Thu, 18 Aug 50 02:01:18 GMT` as 2050 would keep for decades what its origin
//! meant to be stale at once. The fields that carry dates say what an invalid one means
//! ([`crate::field::date_field`] returns `None` and each caller follows its field's rule).
//!
//! Written here rather than taken from `httpdate`: that crate refuses a weekday that does
//! not match and a lowercase month, which §5.6.7 does not ask of a recipient. It is still
//! the fast path for the form nearly every server sends.

use std::time::{Duration, SystemTime};

/// Weekday names, Monday first, as RFC 850 spells them; IMF-fixdate and asctime use
/// their first three letters.
const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// A three-letter weekday name (`day-name`), any case.
fn short_weekday(b: &[u8]) -> Option<()> {
    (b.len() == 3
        && WEEKDAYS
            .iter()
            .any(|w| w.as_bytes()[..3].eq_ignore_ascii_case(b)))
    .then_some(())
}

/// A full weekday name (`day-name-l`, RFC 850), any case.
fn long_weekday(b: &[u8]) -> Option<()> {
    WEEKDAYS
        .iter()
        .any(|w| w.as_bytes().eq_ignore_ascii_case(b))
        .then_some(())
}

/// A three-letter month name, any case: 1 to 12.
fn month(b: &[u8]) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| m.as_bytes().eq_ignore_ascii_case(b))
        .map(|i| i as u32 + 1)
}

/// Exactly `b.len()` ASCII digits.
fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || b.len() > 4 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
}

/// A four-digit year, 0001 to 9999.
fn year4(b: &[u8]) -> Option<i64> {
    (b.len() == 4)
        .then(|| digits(b))
        .flatten()
        .map(i64::from)
        .filter(|y| *y >= 1)
}

/// RFC 850's two-digit year, read as RFC 9110 §5.6.7 asks: the most recent year with
/// those digits not more than 50 years ahead. Without a clock (these rules take none)
/// "ahead" is measured from 2020, so 00–69 are 2000–2069 and 70–99 1970–1999, the pivot
/// RFC 6265 and most servers use.
fn year2(b: &[u8]) -> Option<i64> {
    let y = i64::from((b.len() == 2).then(|| digits(b)).flatten()?);
    Some(if y < 70 { 2000 + y } else { 1900 + y })
}

/// `time-of-day`: `hh:mm:ss`, two digits each; a leap second (60) is accepted.
fn time_of_day(b: &[u8]) -> Option<i64> {
    if b.len() != 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, s) = (digits(&b[0..2])?, digits(&b[3..5])?, digits(&b[6..8])?);
    if h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(i64::from(h) * 3600 + i64::from(m) * 60 + i64::from(s))
}

fn gmt(b: &[u8]) -> Option<()> {
    b.eq_ignore_ascii_case(b"GMT").then_some(())
}

/// `b` is `lit` at `at`.
fn at(b: &[u8], at: usize, lit: &[u8]) -> Option<()> {
    (b.get(at..at + lit.len())? == lit).then_some(())
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The instant of a calendar date and time of day (GMT); `None` for a day the month
/// does not have.
fn instant(y: i64, mo: u32, d: u32, secs: i64) -> Option<SystemTime> {
    if d == 0 || d > days_in_month(y, mo) {
        return None;
    }
    let t = days_from_civil(y, mo, d) * 86_400 + secs;
    let from_epoch = Duration::from_secs(t.unsigned_abs());
    if t >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(from_epoch)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(from_epoch)
    }
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`
fn imf_fixdate(b: &[u8]) -> Option<SystemTime> {
    if b.len() != 29 {
        return None;
    }
    short_weekday(&b[0..3])?;
    at(b, 3, b", ")?;
    at(b, 7, b" ")?;
    at(b, 11, b" ")?;
    at(b, 16, b" ")?;
    at(b, 25, b" ")?;
    gmt(&b[26..29])?;
    let d = digits(&b[5..7])?;
    instant(
        year4(&b[12..16])?,
        month(&b[8..11])?,
        d,
        time_of_day(&b[17..25])?,
    )
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`
fn rfc850_date(b: &[u8]) -> Option<SystemTime> {
    let comma = b.iter().position(|c| *c == b',')?;
    long_weekday(&b[..comma])?;
    let r = &b[comma..];
    if r.len() != 24 {
        return None;
    }
    at(r, 0, b", ")?;
    at(r, 4, b"-")?;
    at(r, 8, b"-")?;
    at(r, 11, b" ")?;
    at(r, 20, b" ")?;
    gmt(&r[21..24])?;
    let d = digits(&r[2..4])?;
    instant(
        year2(&r[9..11])?,
        month(&r[5..8])?,
        d,
        time_of_day(&r[12..20])?,
    )
}

/// `Sun Nov  6 08:49:37 1994`
fn asctime_date(b: &[u8]) -> Option<SystemTime> {
    if b.len() != 24 {
        return None;
    }
    short_weekday(&b[0..3])?;
    at(b, 3, b" ")?;
    at(b, 7, b" ")?;
    at(b, 10, b" ")?;
    at(b, 19, b" ")?;
    let d = match b[8] {
        b' ' => digits(&b[9..10])?,
        _ => digits(&b[8..10])?,
    };
    instant(
        year4(&b[20..24])?,
        month(&b[4..7])?,
        d,
        time_of_day(&b[11..19])?,
    )
}

/// Parses an HTTP-date in one of its three forms (see the module docs). `None` for
/// anything else; never panics.
pub fn parse(s: &str) -> Option<SystemTime> {
    // A stored response's `Date` is read several times while it is judged, and responses
    // of one second share it: the last date read on this thread is kept with its result
    // (which depends on the text alone, compared in full).
    thread_local! {
        static LAST: std::cell::Cell<([u8; 29], Option<SystemTime>)> =
            const { std::cell::Cell::new(([0; 29], None)) };
    }
    let Ok(key) = <[u8; 29]>::try_from(s.as_bytes()) else {
        return parse_uncached(s);
    };
    LAST.with(|last| {
        let (text, at) = last.get();
        if text == key && at.is_some() {
            return at;
        }
        let at = parse_uncached(s);
        last.set((key, at));
        at
    })
}

fn parse_uncached(s: &str) -> Option<SystemTime> {
    // The form nearly every server sends, IMF-fixdate with a matching weekday, read by
    // `httpdate` without allocating: a stored response's dates are read on every hit that
    // carries a condition. It reads that form exactly as `parse_forms` does.
    if s.len() == 29 && s.ends_with(" GMT") {
        if let Ok(t) = httpdate::parse_http_date(s) {
            return Some(t);
        }
    }
    parse_forms(s)
}

fn parse_forms(s: &str) -> Option<SystemTime> {
    let b = s.trim_matches([' ', '\t']).as_bytes();
    imf_fixdate(b)
        .or_else(|| rfc850_date(b))
        .or_else(|| asctime_date(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The remembered last date never answers for another text.
    #[test]
    fn remembered_date_answers_only_for_its_own_text() {
        let a = "Sun, 06 Nov 1994 08:49:37 GMT";
        let b = "Sun, 06 Nov 1994 08:49:38 GMT";
        let bad = "Sun, 06 Nov 1994 08:49:3x GMT";
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        for (text, want) in [
            (a, Some(t)),
            (b, Some(t + Duration::from_secs(1))),
            (bad, None),
            (a, Some(t)),
            (a, Some(t)),
            (bad, None),
        ] {
            assert_eq!(parse(text), want, "{text}");
        }
    }

    /// The allocation-free path for IMF-fixdate agrees with the three-form reader on every
    /// date it accepts (one a day or so over 1970–2400, at varied times of day).
    #[test]
    fn the_fast_path_agrees_with_the_three_form_reader() {
        let mut t = 0u64;
        while t < 13_569_465_600 {
            let when = SystemTime::UNIX_EPOCH + Duration::from_secs(t);
            let text = httpdate::fmt_http_date(when);
            assert_eq!(parse(&text), Some(when), "{text}");
            assert_eq!(parse_forms(&text), Some(when), "{text}");
            t += 86_400 + 3_607;
        }
        // A weekday that does not match: `httpdate` refuses, the three-form reader reads.
        assert_eq!(
            parse("Mon, 06 Nov 1994 08:49:37 GMT"),
            parse_forms("Sun, 06 Nov 1994 08:49:37 GMT")
        );
    }

    /// Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example.
    fn example() -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777))
    }

    #[test]
    fn the_three_forms_9110_5_6_7() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), example());
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT"), example());
        assert_eq!(parse("Sun Nov  6 08:49:37 1994"), example());
        assert_eq!(parse("Sun Nov 06 08:49:37 1994"), example());
    }

    /// Case and a weekday that does not match the date are the only leniency.
    #[test]
    fn lenient_within_the_forms_9110_5_6_7() {
        for s in [
            "sun, 06 nov 1994 08:49:37 gmt",
            "SUN, 06 NOV 1994 08:49:37 GMT",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Thu, 06 Nov 1994 08:49:37 GMT",
            "monday, 06-nov-94 08:49:37 gmt",
            "SUNDAY, 06-NOV-94 08:49:37 GMT",
            "sun nov  6 08:49:37 1994",
            "Fri Nov  6 08:49:37 1994",
            "  Sun, 06 Nov 1994 08:49:37 GMT  ",
        ] {
            assert_eq!(parse(s), example(), "{s:?}");
        }
    }

    /// What RFC 9111 §5.3 calls an invalid date, to be read as a time in the past when it
    /// is an `Expires`: close to an HTTP-date but not one of the three forms.
    #[test]
    fn beyond_the_forms_is_not_a_date_9111_5_3() {
        for s in [
            "Thu, 18 Aug 2050 02:01:18 UTC",
            "Thu, 18 Aug 50 02:01:18 GMT",
            "Thu 18 Aug 2050 02:01:18 GMT",
            "Thu, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 2:01:18 GMT",
            "Thu, 18  Aug 2050 02:01:18 GMT",
            "Thu,  18 Aug 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050  02:01:18 GMT",
            "Thu, 8 Aug 2050 02:01:18 GMT",
            "Thu, 18 August 2050 02:01:18 GMT",
            "18 Aug 2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18",
            "Thu, 18 Aug 2050 02:01:18 +0000",
            "Thu, 18 Aug 2050 02:01:18 Z",
            "Thu,\t18 Aug 2050 02:01:18 GMT",
            "Thursday, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18-Aug-50 02:01:18 GMT",
            "Thursday, 18 Aug 2050 02:01:18 GMT",
            "Thursday, 18-Aug-50 02:01:18 UTC",
            "Thursday,18-Aug-50 02:01:18 GMT",
            "Thu Aug 18 02:01:18 50",
            "Thu Aug 8 02:01:18 2050",
            "Thu Aug  8 02:01:18 2050 GMT",
            "Aug 18 02:01:18 2050",
        ] {
            assert_eq!(parse(s), None, "{s:?}");
        }
    }

    #[test]
    fn two_digit_years_and_the_epoch() {
        let y2k = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800);
        assert_eq!(parse("Saturday, 01-Jan-00 00:00:00 GMT"), Some(y2k));
        assert_eq!(
            parse("Thursday, 01-Jan-70 00:00:00 GMT"),
            Some(SystemTime::UNIX_EPOCH)
        );
        assert_eq!(
            parse("Wed, 31 Dec 1969 23:59:59 GMT"),
            SystemTime::UNIX_EPOCH.checked_sub(Duration::from_secs(1))
        );
        assert!(parse("Fri, 31 Dec 9999 23:59:59 GMT").is_some());
        assert_eq!(
            parse("Thu, 29 Feb 2024 00:00:00 GMT"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_709_164_800))
        );
    }

    #[test]
    fn what_is_not_a_date_is_refused() {
        for s in [
            "",
            "0",
            "-1",
            "yesterday",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 1994 08:60:37 GMT",
            "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sun, 29 Feb 1993 08:49:37 GMT",
            "Sun, 00 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 06 Nov 1994 08:49:37 GMT extra",
            "Sun, 06 Nov 994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 8:49:37:1 GMT",
            "Sun, 006 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 0000 08:49:37 GMT",
            "Sun, +6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT\u{e9}",
            "Su, 06 Nov 1994 08:49:37 GMT",
            "Sun Nov +6 08:49:37 1994",
            ",",
            "Sunday,",
        ] {
            assert_eq!(parse(s), None, "{s:?}");
        }
        assert_eq!(parse(&"Sun, 06 Nov 1994 08:49:37 GMT ".repeat(10)), None);
    }
}
