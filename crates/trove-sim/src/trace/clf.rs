//! Common and Combined Log Format (Apache, nginx):
//! `host ident user [10/Oct/2000:13:55:36 -0700] "GET /path HTTP/1.0" status bytes
//! ["referer" "agent"]`. The request line carries an origin-form path; the replay makes it
//! absolute with the `--host` the log was served for. A `-` byte count is 0.

use std::io::BufRead;

use super::{is_blank, num, text, Lines, Record, Skipped, TraceReader};

pub struct ClfReader<R> {
    lines: Lines<R>,
    skipped: Skipped,
    host: String,
    url: String,
}

impl<R: BufRead> ClfReader<R> {
    pub fn new(input: R, host: &str) -> Self {
        ClfReader {
            lines: Lines::new(input),
            skipped: Skipped::default(),
            host: host.trim_end_matches('/').to_string(),
            url: String::new(),
        }
    }
}

/// What a CLF line says, before the URL is made absolute.
#[derive(Debug, PartialEq)]
pub struct Parsed<'a> {
    pub time: f64,
    pub client: &'a str,
    pub method: &'a str,
    pub target: &'a str,
    pub status: u16,
    pub bytes: u64,
}

/// Parses one line; `None` if it is not CLF.
pub fn parse(line: &[u8]) -> Option<Parsed<'_>> {
    let sp = memchr::memchr(b' ', line)?;
    let client = text(&line[..sp])?;
    let open = memchr::memchr(b'[', line)?;
    let close = open + memchr::memchr(b']', &line[open..])?;
    let time = clf_time(text(&line[open + 1..close])?)?;
    let rest = &line[close + 1..];
    let q1 = memchr::memchr(b'"', rest)?;
    let q2 = q1 + 1 + memchr::memchr(b'"', &rest[q1 + 1..])?;
    let request = text(&rest[q1 + 1..q2])?;
    let mut req = request.split(' ').filter(|s| !s.is_empty());
    let method = req.next()?;
    let target = req.next()?;
    let mut after = rest[q2 + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty());
    let status: u16 = num(after.next()?)?;
    let bytes = match after.next()? {
        b"-" => 0,
        b => super::sane_size(num(b)?)?,
    };
    Some(Parsed {
        time,
        client,
        method,
        target,
        status,
        bytes,
    })
}

/// `10/Oct/2000:13:55:36 -0700` → seconds since the epoch (UTC).
pub fn clf_time(s: &str) -> Option<f64> {
    let (dt, zone) = s.split_once(' ').unwrap_or((s, "+0000"));
    let mut p = dt.split(['/', ':']);
    let day: i64 = p.next()?.parse().ok()?;
    let month = match p.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = p.next()?.parse().ok()?;
    let h: i64 = p.next()?.parse().ok()?;
    let m: i64 = p.next()?.parse().ok()?;
    let sec: i64 = p.next()?.parse().ok()?;
    if !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let zone = zone.trim();
    let (sign, hm) = match zone.as_bytes().first()? {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    if hm.len() != 4 {
        return None;
    }
    let off: i64 = sign * (hm[..2].parse::<i64>().ok()? * 3600 + hm[2..].parse::<i64>().ok()? * 60);
    let days = days_from_civil(year, month, day);
    Some((days * 86400 + h * 3600 + m * 60 + sec - off) as f64)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl<R: BufRead> TraceReader for ClfReader<R> {
    fn next_record(&mut self) -> Option<Record<'_>> {
        loop {
            if !self.lines.advance(&mut self.skipped) {
                return None;
            }
            if is_blank(&self.lines.buf) {
                continue;
            }
            if parse(&self.lines.buf).is_some() {
                break;
            }
            self.skipped.bad(self.lines.line_no, &self.lines.buf);
        }
        // Parsed again to hand out a borrow the checker accepts (a line is short).
        let p = parse(&self.lines.buf)?;
        self.url.clear();
        if p.target.starts_with("http://") || p.target.starts_with("https://") {
            self.url.push_str(p.target);
        } else {
            self.url.push_str(&self.host);
            if !p.target.starts_with('/') {
                self.url.push('/');
            }
            self.url.push_str(p.target);
        }
        Some(Record {
            time: p.time,
            client: p.client,
            method: p.method,
            url: &self.url,
            status: p.status,
            result: "",
            bytes: p.bytes,
            object_size: None,
            content_type: "",
            id: None,
        })
    }

    fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    fn position(&self) -> u64 {
        self.lines.position
    }

    fn error(&self) -> Option<&std::io::Error> {
        self.lines.error.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_and_combined_lines() {
        let log = r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326
10.1.1.1 - - [10/Oct/2000:20:55:37 +0000] "GET /a?b=1 HTTP/1.1" 304 - "http://ref/" "Mozilla/5.0 (X11)"
not a log line
10.1.1.1 - - [10/Foo/2000:20:55:37 +0000] "GET / HTTP/1.1" 200 1
10.1.1.1 - - [10/Oct/2000:20:55:37 +0000] "GET / HTTP/1.1" 200 99999999999999999
"#;
        let mut r = ClfReader::new(log.as_bytes(), "http://www.example.com");
        let a = r.next_record().unwrap();
        // 2000-10-10 13:55:36 -0700 is 20:55:36 UTC = 971211336.
        assert_eq!(a.time, 971_211_336.0);
        assert_eq!(a.url, "http://www.example.com/apache_pb.gif");
        assert_eq!((a.status, a.bytes, a.client), (200, 2326, "127.0.0.1"));
        let b = r.next_record().unwrap();
        assert_eq!(b.time, 971_211_337.0);
        assert_eq!(
            (b.url, b.status, b.bytes),
            ("http://www.example.com/a?b=1", 304, 0)
        );
        assert!(r.next_record().is_none());
        assert_eq!(
            r.skipped().bad_lines,
            3,
            "an absurd byte count is a bad line"
        );
    }

    #[test]
    fn dates_before_march_and_leap_years() {
        assert_eq!(clf_time("01/Jan/1970:00:00:00 +0000"), Some(0.0));
        assert_eq!(
            clf_time("29/Feb/2024:00:00:00 +0000"),
            Some(1_709_164_800.0)
        );
        assert_eq!(clf_time("29/Feb/2024:00:00:00 +01"), None);
    }
}
