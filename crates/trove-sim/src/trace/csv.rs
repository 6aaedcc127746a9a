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

/// `(time, id, size)` of one line.
pub fn parse(line: &[u8]) -> Option<(f64, &str, u64)> {
    let mut f = line
        .split(|b| *b == b',' || *b == b' ' || *b == b'\t')
        .filter(|f| !f.is_empty());
    let time: f64 = num(f.next()?)?;
    let id = text(f.next()?)?;
    let size: u64 = num(f.next()?)?;
    if !time.is_finite() || id.is_empty() {
        return None;
    }
    Some((time, id, size))
}

impl<R: BufRead> TraceReader for CsvReader<R> {
    fn next_record(&mut self) -> Option<Record<'_>> {
        loop {
            if !self.lines.advance() {
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
                time,
                client: "-",
                method: "GET",
                url: &self.url,
                status: 200,
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
        assert_eq!(r.next_record().unwrap().url, "http://trace.invalid/2");
        assert_eq!(r.next_record().unwrap().time, 2.0);
        assert!(r.next_record().is_none());
        assert_eq!(r.skipped().bad_lines, 2, "{:?}", r.skipped());
    }
}
