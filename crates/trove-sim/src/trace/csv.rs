//! The plain `time id size` trace that public CDN and cache traces are shared in
//! (comma- or blank-separated, an optional header line, an optional fourth column ignored).
//! The id names the object; the size is the object's, so the record is a whole transfer.
//! Ids become URLs `http://trace.invalid/<id>` so they pass through the same key rules.

use std::io::BufRead;

use super::{num, text, Lines, Record, Skipped, TraceReader};

/// Where CSV ids live as URLs (`.invalid` is reserved: it can name no real origin).
pub const ID_HOST: &str = "http://trace.invalid/";

pub struct CsvReader<R> {
    lines: Lines<R>,
    skipped: Skipped,
    url: String,
}

impl<R: BufRead> CsvReader<R> {
    pub fn new(input: R) -> Self {
        CsvReader {
            lines: Lines::new(input),
            skipped: Skipped::default(),
            url: String::with_capacity(64),
        }
    }
}

/// `(time, id, size)` of one line. Plain integers (most traces' times and all sizes) are
/// read straight from the bytes; anything else goes through `str::parse` as before, so the
/// fast path changes no result, only the cost (the text parse was a quarter of a replayed
/// hit's time).
pub fn parse(line: &[u8]) -> Option<(f64, &str, u64)> {
    let mut f = Fields(line);
    let t = f.next()?;
    let time: f64 = match integer(t) {
        Some(n) => n as f64,
        None => num(t)?,
    };
    let id = text(f.next()?)?;
    let s = f.next()?;
    let size: u64 = match integer(s) {
        Some(n) => n,
        None => num(s)?,
    };
    if id.is_empty() {
        return None;
    }
    let time = super::sane_time(time)?;
    Some((time, id, super::sane_size(size)?))
}

/// The URL a numeric id stands for.
pub fn id_url(id: u64) -> String {
    format!("{ID_HOST}{id}")
}

/// `id` as a number if it is written the one way [`id_url`] writes it (no sign, no leading
/// zero), so the number and the text name the same URL.
fn canonical_number(id: &str) -> Option<u64> {
    if id.len() > 1 && id.starts_with('0') {
        return None;
    }
    integer(id.as_bytes())
}

/// The non-empty fields of a line separated by commas, blanks or tabs.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let sep = |b: &u8| matches!(*b, b',' | b' ' | b'\t');
        let start = self.0.iter().position(|b| !sep(b))?;
        let rest = &self.0[start..];
        let end = rest.iter().position(sep).unwrap_or(rest.len());
        self.0 = &rest[end..];
        Some(&rest[..end])
    }
}

/// A run of ASCII digits as a `u64`; `None` for anything else (signs, points, exponents,
/// overflow), which the caller then parses the slow way.
fn integer(b: &[u8]) -> Option<u64> {
    if b.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(n)
}

impl<R: BufRead> TraceReader for CsvReader<R> {
    fn next_record(&mut self) -> Option<Record<'_>> {
        loop {
            if !self.lines.advance(&mut self.skipped) {
                return None;
            }
            if super::is_blank(&self.lines.buf) {
                continue;
            }
            let Some((time, id, size)) = parse(&self.lines.buf) else {
                // A header line is not an error.
                let first = self.lines.line_no == 1
                    && self
                        .lines
                        .buf
                        .first()
                        .is_some_and(|b| b.is_ascii_alphabetic());
                if !first {
                    self.skipped.bad(self.lines.line_no, &self.lines.buf);
                }
                continue;
            };
            self.url.clear();
            self.url.push_str(ID_HOST);
            self.url.push_str(id);
            return Some(Record {
                id: canonical_number(id),
                time,
                client: "-",
                method: "GET",
                url: &self.url,
                status: 200,
                result: "",
                bytes: size,
                object_size: Some(size),
                content_type: "",
            });
        }
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
    fn comma_and_blank_separated_with_a_header() {
        let t = "time,id,size\n0,1,100\n1 2 200\n2\t1\t100\n3,x\n4,1,-5\n";
        let mut r = CsvReader::new(t.as_bytes());
        let a = r.next_record().unwrap();
        assert_eq!(
            (a.time, a.url, a.bytes),
            (0.0, "http://trace.invalid/1", 100)
        );
        assert_eq!(a.object_size, Some(100));
        assert_eq!(a.id, Some(1));
        assert_eq!(r.next_record().unwrap().url, "http://trace.invalid/2");
        assert_eq!(r.next_record().unwrap().time, 2.0);
        assert!(r.next_record().is_none());
        assert_eq!(r.skipped().bad_lines, 2, "{:?}", r.skipped());
    }

    #[test]
    fn only_canonical_numbers_are_ids() {
        let mut r = CsvReader::new("1,007,5\n2,0,5\n3,x7,5\n4,70,5\n".as_bytes());
        let ids: Vec<(String, Option<u64>)> =
            std::iter::from_fn(|| r.next_record().map(|x| (x.url.to_string(), x.id))).collect();
        assert_eq!(ids[0].1, None, "leading zero: not the URL of 7");
        assert_eq!(ids[1].1, Some(0));
        assert_eq!(ids[2].1, None);
        assert_eq!(ids[3], (id_url(70), Some(70)));
    }

    /// The integer fast path gives what `str::parse` gives, and hands it everything else.
    #[test]
    fn numbers_parse_as_str_parse_does() {
        assert_eq!(parse(b"12,a,34"), Some((12.0, "a", 34)));
        assert_eq!(parse(b"1.5,a,34"), Some((1.5, "a", 34)));
        assert_eq!(parse(b"1e3 a +7"), Some((1000.0, "a", 7)));
        assert_eq!(parse(b"-2,a,7"), Some((-2.0, "a", 7)));
        assert_eq!(parse(b" 3 ,\tb,, 9 ,x"), Some((3.0, "b", 9)));
        assert_eq!(
            parse(b"18446744073709551616,a,1"),
            None,
            "past u64: the slow path, and past `MAX_TIME`: a bad line (issue 19)"
        );
        assert_eq!(parse(b"1,a,18446744073709551616"), None, "a size past u64");
        assert_eq!(parse(b"1,a,-5"), None);
        assert_eq!(parse(b"1,a,1099511627776"), Some((1.0, "a", 1 << 40)));
        assert_eq!(parse(b"1,a,1099511627777"), None, "past MAX_OBJECT_SIZE");
        assert_eq!(parse(b"1,2,1000000000000000000"), None);
        assert_eq!(parse(b"1,a"), None);
        assert_eq!(parse(b"inf,a,1"), None);
        assert_eq!(parse(b"1,\xff,1"), None, "ids are text");
    }
}
