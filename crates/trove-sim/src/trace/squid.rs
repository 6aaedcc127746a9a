//! Squid's native access log: `time elapsed client code/status bytes method URL user
//! hierarchy/peer type` (trove writes exactly this, see trove-proxy's `access_log`).
//! `bytes` is what the client received; the result code (`TCP_MISS`…) says what the logging
//! cache did, which the replay ignores: it decides for itself.

use std::io::BufRead;

use super::{fields, is_blank, num, sane_size, text, Lines, Record, Skipped, TraceReader};

pub struct SquidReader<R> {
    lines: Lines<R>,
    skipped: Skipped,
}

impl<R: BufRead> SquidReader<R> {
    pub fn new(input: R) -> Self {
        SquidReader {
            lines: Lines::new(input),
            skipped: Skipped::default(),
        }
    }
}

/// Parses one line; `None` if it is not a Squid native log line.
pub fn parse(line: &[u8]) -> Option<Record<'_>> {
    let mut f = fields(line);
    let time: f64 = num(f.next()?)?;
    let _elapsed = f.next()?;
    let client = text(f.next()?)?;
    let code = f.next()?;
    let slash = memchr::memchr(b'/', code)?;
    let status: u16 = num(&code[slash + 1..])?;
    let bytes: u64 = sane_size(num(f.next()?)?)?;
    let method = text(f.next()?)?;
    let url = text(f.next()?)?;
    let _user = f.next()?;
    let _hier = f.next()?;
    let content_type = match f.next() {
        Some(b"-") | None => "",
        Some(t) => text(t)?,
    };
    if !time.is_finite() || time < 0.0 {
        return None;
    }
    Some(Record {
        time,
        client,
        method,
        url,
        status,
        bytes,
        object_size: None,
        content_type,
        id: None,
    })
}

impl<R: BufRead> TraceReader for SquidReader<R> {
    fn next_record(&mut self) -> Option<Record<'_>> {
        loop {
            if !self.lines.advance() {
                return None;
            }
            if is_blank(&self.lines.buf) {
                continue;
            }
            if parse(&self.lines.buf).is_none() {
                self.skipped.bad(self.lines.line_no, &self.lines.buf);
                continue;
            }
            // Parsed twice on the good path: once to decide, once to hand out a borrow the
            // checker accepts. A line is ~120 bytes; the second parse is cheap.
            return parse(&self.lines.buf);
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
    fn reads_trove_and_squid_lines_and_counts_bad_ones() {
        let log = "\
1700000000.123      3 127.0.0.1 TCP_MISS/200 5123 GET http://a.example/logo.png - HIER_DIRECT/a.example image/png
# a comment

1700000001.000      0 10.0.0.2 TCP_MEM_HIT/200 5123 GET http://a.example/logo.png - HIER_NONE/- image/png
garbage line
1700000002.5 1 10.0.0.2 TCP_MISS/404 12 GET http://a.example/x - HIER_DIRECT/a.example -
1700000003 1 10.0.0.2 TCP_MISS/2x0 12 GET http://a.example/x - HIER_DIRECT/a.example -
1700000003 1 10.0.0.2 TCP_MISS/200 99999999999999999 GET http://a.example/x - HIER_DIRECT/a.example -
";
        let mut r = SquidReader::new(log.as_bytes());
        let a = r.next_record().unwrap();
        assert_eq!(a.time, 1700000000.123);
        assert_eq!(a.client, "127.0.0.1");
        assert_eq!(a.status, 200);
        assert_eq!(a.bytes, 5123);
        assert_eq!(a.url, "http://a.example/logo.png");
        assert_eq!(a.content_type, "image/png");
        assert_eq!(r.next_record().unwrap().client, "10.0.0.2");
        let c = r.next_record().unwrap();
        assert_eq!((c.status, c.content_type), (404, ""));
        assert!(r.next_record().is_none());
        assert_eq!(r.skipped().bad_lines, 3, "an absurd byte count too");
        assert_eq!(r.skipped().examples[0].0, 5);
        assert_eq!(r.position(), log.len() as u64);
    }
}
