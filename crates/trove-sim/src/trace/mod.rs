//! Trace readers: one module per format, each streaming records out of a `BufRead` one line at
//! a time into a reused buffer (a trace is never loaded whole, and a line costs no
//! allocation). A line that does not parse is counted and skipped, never fatal: real logs
//! carry truncated last lines, binary junk and comments, and one bad line must not cost an
//! operator a night's replay.
//!
//! A size is a count, never an allocation (the replay's bodies are size-only), but a size
//! past [`MAX_OBJECT_SIZE`] is no object a log could record: such a line is counted bad.

pub mod clf;
pub mod csv;
pub mod oracle;
pub mod replayable;
pub mod squid;
pub mod synthetic;

use std::io::BufRead;

/// The largest object, or transfer, a trace may give: 1 TiB. Real logs record transfers
/// of tens of gigabytes at most (disk images, backups); a larger count is corruption (a
/// torn line, a counter written as garbage), and `1000000000000000000` bytes would be a
/// million terabytes. Lines past it are counted bad.
pub const MAX_OBJECT_SIZE: u64 = 1 << 40;

/// `n` if it is a size a trace may give (see [`MAX_OBJECT_SIZE`]).
pub fn sane_size(n: u64) -> Option<u64> {
    (n <= MAX_OBJECT_SIZE).then_some(n)
}

/// The latest time a trace may give, in seconds: 10^11 (the year 5138). A time past it is
/// corruption (`1e300`, a counter written as a time), and would overflow the virtual
/// clock's `SystemTime`: such a line is counted bad (issue 19, defect 12).
pub const MAX_TIME: f64 = 1e11;

/// `t` if it is a time a trace may give: finite, and within [`MAX_TIME`] either way of
/// its origin.
pub fn sane_time(t: f64) -> Option<f64> {
    (t.is_finite() && t.abs() <= MAX_TIME).then_some(t)
}

/// The longest line a text trace may have: 256 KiB (a URL of Squid's own limit, 64 KiB,
/// with room). A longer line is counted bad and skipped without being held: one 512 MiB
/// line once cost the replay 1.59 GB of memory (issue 19, defect 12).
pub const MAX_LINE: usize = 256 << 10;

/// One request of a trace, borrowed from the reader's line buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record<'a> {
    /// When the request started, seconds since the Unix epoch (or since the trace's own
    /// origin of time). A Squid log records completion; its reader gives the start.
    pub time: f64,
    /// Who asked: a client address or id (the network model keeps connections per client).
    pub client: &'a str,
    pub method: &'a str,
    /// An absolute URL (`http://host/path`), or for a CSV trace the object id.
    pub url: &'a str,
    /// The status the log recorded.
    pub status: u16,
    /// What the logging cache did, as its log says (`TCP_MISS`, `TCP_MEM_HIT` …), or empty
    /// when the format has no such field. The replay decides for itself; this only says
    /// what the byte count holds (a hit's response head differs from a miss's).
    pub result: &'a str,
    /// Bytes the client received: the body (short of the object's size: an aborted
    /// transfer), and in a Squid log the response head too.
    pub bytes: u64,
    /// The object's full size when the format knows it (CSV, synthetic traces).
    pub object_size: Option<u64>,
    /// `Content-Type` as logged, or empty.
    pub content_type: &'a str,
    /// The object's number when the trace names objects by number (CSV, `oracleGeneral`)
    /// and `url` is [`csv::id_url`] of it: the replay then finds what it knows of the URL by
    /// the number, without hashing and comparing the text.
    pub id: Option<u64>,
}

/// What a reader skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// Lines that did not parse.
    pub bad_lines: u64,
    /// The first few of them, with their line numbers, for the report.
    pub examples: Vec<(u64, String)>,
}

impl Skipped {
    const EXAMPLES: usize = 5;

    pub(crate) fn bad(&mut self, line_no: u64, line: &[u8]) {
        self.bad_lines += 1;
        if self.examples.len() < Self::EXAMPLES {
            // At most 200 bytes of it: cut as bytes (a character cut in two shows as
            // U+FFFD), never as a `String`, which panics off a character boundary.
            let s = String::from_utf8_lossy(&line[..line.len().min(200)]);
            self.examples.push((line_no, s.trim_end().to_string()));
        }
    }
}

/// A streaming source of records.
pub trait TraceReader {
    /// The next record, or `None` at the end. I/O errors end the trace and are kept for
    /// [`TraceReader::error`].
    fn next_record(&mut self) -> Option<Record<'_>>;
    /// Lines skipped so far.
    fn skipped(&self) -> &Skipped;
    /// Bytes of input consumed so far (for the progress bar).
    fn position(&self) -> u64;
    /// The I/O error that ended the trace early, if any.
    fn error(&self) -> Option<&std::io::Error> {
        None
    }
}

/// Trace formats, by name on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Squid's native access.log (trove's own log is one).
    Squid,
    /// Common or Combined Log Format (Apache, nginx).
    Clf,
    /// `time id size` lines, comma- or space-separated (public CDN traces).
    Csv,
    /// libCacheSim's binary `oracleGeneral` records (`trove sim convert` writes them).
    OracleGeneral,
    /// trove's replayable trace (`[log] trace` of `trove serve`): JSON lines with each
    /// request's fields and the origin's answers, replayed exactly.
    Trace,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Squid => "squid",
            Format::Clf => "clf",
            Format::Csv => "csv",
            Format::OracleGeneral => "oracle-general",
            Format::Trace => "trace",
        }
    }

    /// A format a file's name declares (binary traces have no first line to look at):
    /// libCacheSim names its binary traces `*.oracleGeneral` or `*.oracleGeneral.bin`.
    pub fn from_path(path: &str) -> Option<Format> {
        let lower = path.to_ascii_lowercase();
        (lower.ends_with(".oraclegeneral") || lower.ends_with(".oraclegeneral.bin"))
            .then_some(Format::OracleGeneral)
    }

    /// Guesses the format from the first line that is not blank or a comment.
    pub fn detect(first: &[u8]) -> Option<Format> {
        let line = std::str::from_utf8(first).ok()?.trim();
        if line.starts_with('{') && line.contains("\"v\":") {
            return Some(Format::Trace);
        }
        if line.contains(" [") && line.contains("] \"") {
            return Some(Format::Clf);
        }
        let fields: Vec<&str> = line
            .split(|c: char| c == ',' || c.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .collect();
        if fields.len() >= 7 && fields[3].contains('/') {
            return Some(Format::Squid);
        }
        if (2..=4).contains(&fields.len()) {
            return Some(Format::Csv);
        }
        None
    }

    /// A reader of this format over `input`; `host` makes CLF's origin-form paths absolute.
    pub fn reader<'r, R: BufRead + 'r>(self, input: R, host: &str) -> Box<dyn TraceReader + 'r> {
        match self {
            Format::Squid => Box::new(squid::SquidReader::new(input)),
            Format::Clf => Box::new(clf::ClfReader::new(input, host)),
            Format::Csv => Box::new(csv::CsvReader::new(input)),
            Format::OracleGeneral => Box::new(oracle::OracleReader::new(input)),
            Format::Trace => Box::new(replayable::ReplayableReader::new(input)),
        }
    }
}

/// Reads lines into a reused buffer, counting bytes and line numbers; shared by the readers.
#[derive(Debug)]
pub(crate) struct Lines<R> {
    input: R,
    pub(crate) buf: Vec<u8>,
    pub(crate) line_no: u64,
    pub(crate) position: u64,
    pub(crate) error: Option<std::io::Error>,
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(input: R) -> Self {
        Lines {
            input,
            buf: Vec::with_capacity(512),
            line_no: 0,
            position: 0,
            error: None,
        }
    }

    /// Reads the next line (without its line ending) into `buf`; false at the end. A line
    /// longer than [`MAX_LINE`] is counted bad in `skipped` and passed over, holding at most
    /// `MAX_LINE` bytes of it.
    pub(crate) fn advance(&mut self, skipped: &mut Skipped) -> bool {
        loop {
            self.buf.clear();
            match self.read_line() {
                Ok(None) => return false,
                Ok(Some(false)) => {}
                Ok(Some(true)) => {
                    skipped.bad(self.line_no, &self.buf);
                    continue;
                }
                Err(e) => {
                    self.error = Some(e);
                    return false;
                }
            }
            while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
                self.buf.pop();
            }
            return true;
        }
    }

    /// One line into `buf`, at most [`MAX_LINE`] bytes of it: `None` at the end,
    /// `Some(true)` if it was longer (the rest is consumed, not kept).
    fn read_line(&mut self) -> std::io::Result<Option<bool>> {
        let mut any = false;
        let mut overlong = false;
        loop {
            let chunk = match self.input.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                break;
            }
            any = true;
            let (take, done) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            let room = MAX_LINE.saturating_sub(self.buf.len());
            if take > room {
                overlong = true;
            }
            self.buf.extend_from_slice(&chunk[..take.min(room)]);
            self.input.consume(take);
            self.position += take as u64;
            if done {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.line_no += 1;
        Ok(Some(overlong))
    }
}

/// Whether a line carries nothing (blank or a `#` comment): skipped, not counted as bad.
pub(crate) fn is_blank(line: &[u8]) -> bool {
    let t = line.trim_ascii();
    t.is_empty() || t[0] == b'#'
}

/// Splits at runs of ASCII blanks, without allocating.
pub(crate) fn fields(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|b| *b == b' ' || *b == b'\t')
        .filter(|f| !f.is_empty())
}

pub(crate) fn num<T: std::str::FromStr>(b: &[u8]) -> Option<T> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

pub(crate) fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_detected_from_the_first_line() {
        let squid = b"1700000000.123    12 127.0.0.1 TCP_MISS/200 5123 GET http://a.example/x - HIER_DIRECT/a.example text/html";
        assert_eq!(Format::detect(squid), Some(Format::Squid));
        let clf = b"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /a.gif HTTP/1.0\" 200 2326";
        assert_eq!(Format::detect(clf), Some(Format::Clf));
        assert_eq!(Format::detect(b"1,42,1000"), Some(Format::Csv));
        assert_eq!(Format::detect(b"1 42 1000"), Some(Format::Csv));
        assert_eq!(Format::detect(b"what is this"), Some(Format::Csv));
        assert_eq!(Format::detect(b"\xff\xfe"), None);
        let trace = br#"{"v":1,"kind":"request","at_us":1700000000000000,"url":"http://a/x"}"#;
        assert_eq!(Format::detect(trace), Some(Format::Trace));
    }
}
