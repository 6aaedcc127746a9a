//! HTTP-date (RFC 9110 §5.6.7), read as leniently as the RFC recommends.
//!
//! A recipient must accept all three forms: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
//! the obsolete RFC 850 form (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6
//! 08:49:37 1994`), and §5.6.7 asks it to be lenient beyond that, since dates come from
//! every kind of server. So: names in any case, a weekday that does not match the date (or
//! none) ignored, a day of one or two digits however it is padded, full month names, a
//! two-digit year, and `GMT`, `UT`, `UTC`, `Z` or a numeric offset as the zone (none at all
//! counts as GMT). What is still refused: anything that is not a calendar date and time of
//! day (31 February, 25:00), and years outside 1 to 9999.
//!
//! Written here rather than taken from `httpdate`, which reads the three forms strictly:
//! a weekday that does not match, a lowercase month or a single-space asctime day make it
//! refuse the date, and an `Expires` it refuses makes the response stale at once.

use std::time::{Duration, SystemTime};

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
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Longest input considered: the longest well-formed date is 37 bytes.
const MAX_LEN: usize = 64;

/// Whether `tok` names `full` (a day or month): its first three letters or more, any case.
fn names(tok: &str, full: &str) -> bool {
    tok.len() >= 3 && tok.len() <= full.len() && full[..tok.len()].eq_ignore_ascii_case(tok)
}

fn month(tok: &str) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| names(tok, m))
        .map(|i| i as u32 + 1)
}

fn number(tok: &str, max_digits: usize) -> Option<u32> {
    if tok.is_empty() || tok.len() > max_digits || !tok.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tok.parse().ok()
}

/// A year of four digits, or of two read as RFC 9110 §5.6.7 asks: the most recent year
/// with those digits not more than 50 years ahead. Without a clock (these rules take none)
/// "ahead" is measured from 2020, so 00–69 are 2000–2069 and 70–99 1970–1999, the pivot
/// RFC 6265 and most servers use.
fn year(tok: &str) -> Option<i64> {
    match tok.len() {
        2 => {
            let y = i64::from(number(tok, 2)?);
            Some(if y < 70 { 2000 + y } else { 1900 + y })
        }
        4 => Some(i64::from(number(tok, 4)?)).filter(|y| *y >= 1),
        _ => None,
    }
}

/// `hh:mm:ss`, one or two digits each; a leap second (60) is accepted.
fn time_of_day(tok: &str) -> Option<i64> {
    let mut parts = tok.split(':');
    let h = number(parts.next()?, 2)?;
    let m = number(parts.next()?, 2)?;
    let s = number(parts.next()?, 2)?;
    if parts.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(i64::from(h) * 3600 + i64::from(m) * 60 + i64::from(s))
}

/// The zone's offset east of GMT, in seconds.
fn zone(tok: &str) -> Option<i64> {
    if ["gmt", "ut", "utc", "z"]
        .iter()
        .any(|z| tok.eq_ignore_ascii_case(z))
    {
        return Some(0);
    }
    let (sign, digits) = match tok.as_bytes().first()? {
        b'+' => (1, &tok[1..]),
        b'-' => (-1, &tok[1..]),
        _ => return None,
    };
    if digits.len() != 4 {
        return None;
    }
    let hh = i64::from(number(&digits[..2], 2)?);
    let mm = i64::from(number(&digits[2..], 2)?);
    (hh < 24 && mm < 60).then_some(sign * (hh * 3600 + mm * 60))
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

/// Parses an HTTP-date in any of its forms, leniently (see the module docs). `None` for
/// anything else; never panics.
pub fn parse(s: &str) -> Option<SystemTime> {
    // The form nearly every server sends, IMF-fixdate, read without allocating: a stored
    // response's dates are read on every hit that carries a condition. `httpdate` reads it
    // strictly and is only trusted when it accepts; anything else takes the lenient path.
    if s.len() == 29 && s.ends_with(" GMT") {
        if let Ok(t) = httpdate::parse_http_date(s) {
            return Some(t);
        }
    }
    parse_lenient(s)
}

fn parse_lenient(s: &str) -> Option<SystemTime> {
    if s.len() > MAX_LEN || !s.is_ascii() {
        return None;
    }
    let mut toks: Vec<&str> = s
        .split([' ', '\t', ','])
        .filter(|t| !t.is_empty())
        .collect();
    if toks
        .first()
        .is_some_and(|t| WEEKDAYS.iter().any(|w| names(t, w)))
    {
        toks.remove(0);
    }
    // RFC 850's date is one token, `06-Nov-94`.
    if let Some(first) = toks.first().copied() {
        let parts: Vec<&str> = first.split('-').collect();
        if parts.len() == 3 {
            toks.splice(0..1, parts);
        }
    }
    let (y, mo, d, secs, rest) = match toks.as_slice() {
        // asctime: month day time year
        [mon, day, time, yr, rest @ ..] if month(mon).is_some() => (
            year(yr)?,
            month(mon)?,
            number(day, 2)?,
            time_of_day(time)?,
            rest,
        ),
        // IMF-fixdate and RFC 850: day month year time zone
        [day, mon, yr, time, rest @ ..] => (
            year(yr)?,
            month(mon)?,
            number(day, 2)?,
            time_of_day(time)?,
            rest,
        ),
        _ => return None,
    };
    let offset = match rest {
        [] => 0,
        [z] => zone(z)?,
        _ => return None,
    };
    if d == 0 || d > days_in_month(y, mo) {
        return None;
    }
    let t = days_from_civil(y, mo, d) * 86_400 + secs - offset;
    let from_epoch = Duration::from_secs(t.unsigned_abs());
    if t >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(from_epoch)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(from_epoch)
    }
}

#[cfg(test)]
mod tests {

    /// The allocation-free path for IMF-fixdate agrees with the lenient reader on every
    /// date it accepts (one a day or so over 1970–2400, at varied times of day).
    #[test]
    fn the_fast_path_agrees_with_the_lenient_reader() {
        let mut t = 0u64;
        while t < 13_569_465_600 {
            let when = SystemTime::UNIX_EPOCH + Duration::from_secs(t);
            let text = httpdate::fmt_http_date(when);
            assert_eq!(parse(&text), Some(when), "{text}");
            assert_eq!(parse_lenient(&text), Some(when), "{text}");
            t += 86_400 + 3_607;
        }
        // A weekday that does not match: the strict reader refuses, the lenient one reads.
        assert_eq!(
            parse("Mon, 06 Nov 1994 08:49:37 GMT"),
            parse_lenient("Sun, 06 Nov 1994 08:49:37 GMT")
        );
    }

    use super::*;

    /// Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example.
    fn example() -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777))
    }

    #[test]
    fn the_three_forms_9110_5_6_7() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), example());
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT"), example());
        assert_eq!(parse("Sun Nov  6 08:49:37 1994"), example());
    }

    #[test]
    fn leniently_as_9110_5_6_7_recommends() {
        for s in [
            "sun, 06 nov 1994 08:49:37 gmt",
            "SUN, 06 NOV 1994 08:49:37 GMT",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Fri, 6 Nov 1994 08:49:37 GMT",
            "06 Nov 1994 08:49:37 GMT",
            "Sun, 06 November 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 09:49:37 +0100",
            "Sun,  06  Nov 1994\t08:49:37 GMT",
            "monday, 06-nov-94 08:49:37 gmt",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994",
            "Thu Nov 06 08:49:37 1994",
            "sun nov  6 08:49:37 1994",
            "Sun Nov  6 08:49:37 1994 GMT",
            "Nov 6 08:49:37 1994",
            "  Sun, 06 Nov 1994 08:49:37 GMT  ",
        ] {
            assert_eq!(parse(s), example(), "{s:?}");
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
            "Sun, 06 Nov 1994 08:49:37 +2400",
            "Sun, 06 Nov 1994 08:49:37 GMT\u{e9}",
            "Su, 06 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse(s), None, "{s:?}");
        }
        assert_eq!(parse(&"Sun, 06 Nov 1994 08:49:37 GMT ".repeat(10)), None);
    }
}
