//! libCacheSim's `oracleGeneral` binary trace: 24-byte little-endian records
//! `{u32 clock_time; u64 obj_id; u32 obj_size; i64 next_access_vtime}` (time in seconds,
//! `next_access_vtime` the index of the next request for the same object, -1 for none).
//! It is the format libCacheSim's own tools and its public trace collection use, so the
//! same file replays in both simulators; and it costs no parsing (a CSV line's text is
//! most of what reading one costs).
//!
//! An object id becomes the URL `http://trace.invalid/<id>`, as a CSV trace's id does, so a
//! CSV trace of numeric ids and its conversion give the same keys and the same results.
//! `trove sim convert` writes the format from any trace `trove sim` reads: a URL that is not
//! a numeric CSV id is named by its stable XXH3 hash.

use std::io::{BufRead, Write};

use super::csv::ID_HOST;
use super::{Record, Skipped, TraceReader};
use crate::intern::FastMap;

/// Bytes per record.
pub const RECORD: usize = 24;

pub struct OracleReader<R> {
    input: R,
    url: String,
    position: u64,
    skipped: Skipped,
    error: Option<std::io::Error>,
}

impl<R: BufRead> OracleReader<R> {
    pub fn new(input: R) -> Self {
        OracleReader {
            input,
            url: String::with_capacity(48),
            position: 0,
            skipped: Skipped::default(),
            error: None,
        }
    }

    /// The next 24 bytes; `None` at the end (a short last record is counted as bad).
    fn next_raw(&mut self) -> Option<[u8; RECORD]> {
        let mut rec = [0u8; RECORD];
        // The common case: the whole record is in the buffer.
        match self.input.fill_buf() {
            Ok(buf) if buf.len() >= RECORD => {
                rec.copy_from_slice(&buf[..RECORD]);
                self.input.consume(RECORD);
                self.position += RECORD as u64;
                return Some(rec);
            }
            Ok(_) => {}
            Err(e) => {
                self.error = Some(e);
                return None;
            }
        }
        let mut got = 0;
        while got < RECORD {
            match self.input.read(&mut rec[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.error = Some(e);
                    return None;
                }
            }
        }
        self.position += got as u64;
        if got == RECORD {
            Some(rec)
        } else {
            if got > 0 {
                let n = self.position / RECORD as u64 + 1;
                self.skipped.bad(n, &rec[..got]);
            }
            None
        }
    }
}

/// `(clock_time, obj_id, obj_size, next_access_vtime)` of one record.
pub fn decode(rec: &[u8; RECORD]) -> (u32, u64, u32, i64) {
    let u32_at = |i: usize| u32::from_le_bytes(rec[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(rec[i..i + 8].try_into().expect("8 bytes"));
    (u32_at(0), u64_at(4), u32_at(12), u64_at(16) as i64)
}

/// One record's bytes.
pub fn encode(time: u32, id: u64, size: u32, next: i64) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[0..4].copy_from_slice(&time.to_le_bytes());
    r[4..12].copy_from_slice(&id.to_le_bytes());
    r[12..16].copy_from_slice(&size.to_le_bytes());
    r[16..24].copy_from_slice(&next.to_le_bytes());
    r
}

impl<R: BufRead> TraceReader for OracleReader<R> {
    fn next_record(&mut self) -> Option<Record<'_>> {
        let rec = self.next_raw()?;
        let (time, id, size, _) = decode(&rec);
        self.url.clear();
        self.url.push_str(ID_HOST);
        self.url.push_str(itoa::Buffer::new().format(id));
        Some(Record {
            time: f64::from(time),
            client: "-",
            method: "GET",
            url: &self.url,
            status: 200,
            result: "",
            bytes: u64::from(size),
            object_size: Some(u64::from(size)),
            content_type: "",
            id: Some(id),
        })
    }

    fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    fn position(&self) -> u64 {
        self.position
    }

    fn error(&self) -> Option<&std::io::Error> {
        self.error.as_ref()
    }
}

/// The object id a record converts to: a CSV trace's numeric id as it is, any other URL by
/// its stable hash.
pub fn object_id(url: &str) -> u64 {
    url.strip_prefix(ID_HOST)
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| xxhash_rust::xxh3::xxh3_64(url.as_bytes()))
}

/// What a conversion did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Converted {
    pub records: u64,
    pub distinct: u64,
    /// Times outside `u32` seconds (negative or past 2106), clamped.
    pub clamped_times: u64,
    /// Sizes of 4 GiB or more, clamped to `u32::MAX`.
    pub clamped_sizes: u64,
}

/// Writes every record of `reader` to `out` as `oracleGeneral`. The records are held in
/// memory (16 bytes each, plus 8 per distinct object) so each one's next access can be
/// filled in, as libCacheSim's converter does; oracle policies (Belady) need it.
pub fn convert(reader: &mut dyn TraceReader, out: &mut dyn Write) -> std::io::Result<Converted> {
    let mut c = Converted::default();
    let mut recs: Vec<(u32, u32, u64)> = Vec::new();
    while let Some(r) = reader.next_record() {
        let time = if r.time.is_finite() && (0.0..=f64::from(u32::MAX)).contains(&r.time) {
            r.time as u32
        } else {
            c.clamped_times += 1;
            if r.time > 0.0 {
                u32::MAX
            } else {
                0
            }
        };
        let size = r.object_size.unwrap_or(r.bytes).max(r.bytes);
        let size = u32::try_from(size).unwrap_or_else(|_| {
            c.clamped_sizes += 1;
            u32::MAX
        });
        recs.push((time, size, object_id(r.url)));
    }
    if let Some(e) = reader.error() {
        return Err(std::io::Error::new(e.kind(), e.to_string()));
    }
    c.records = recs.len() as u64;
    // Backwards: each record's next access is where its object was last seen from behind.
    let mut next = vec![-1i64; recs.len()];
    let mut seen: FastMap<u64, i64> = FastMap::default();
    for (i, (_, _, id)) in recs.iter().enumerate().rev() {
        if let Some(n) = seen.insert(*id, i as i64) {
            next[i] = n;
        }
    }
    c.distinct = seen.len() as u64;
    for ((time, size, id), n) in recs.iter().zip(&next) {
        out.write_all(&encode(*time, *id, *size, *n))?;
    }
    out.flush()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::csv::CsvReader;

    #[test]
    fn a_csv_trace_converts_and_reads_back_with_the_same_urls() {
        let csv = "time,id,size\n0,7,100\n1,8,200\n2.5,7,100\n3,page-x,50\n";
        let mut out = Vec::new();
        let c = convert(&mut CsvReader::new(csv.as_bytes()), &mut out).unwrap();
        assert_eq!((c.records, c.distinct), (4, 3));
        assert_eq!(out.len(), 4 * RECORD);
        let first: [u8; RECORD] = out[..RECORD].try_into().unwrap();
        assert_eq!(
            decode(&first),
            (0, 7, 100, 2),
            "next access of 7 is record 2"
        );
        let second: [u8; RECORD] = out[RECORD..2 * RECORD].try_into().unwrap();
        assert_eq!(decode(&second), (1, 8, 200, -1));

        let mut r = OracleReader::new(&out[..]);
        let a = r.next_record().unwrap();
        assert_eq!(
            (a.time, a.url, a.bytes),
            (0.0, "http://trace.invalid/7", 100)
        );
        assert_eq!(a.object_size, Some(100));
        assert_eq!(r.next_record().unwrap().url, "http://trace.invalid/8");
        assert_eq!(r.next_record().unwrap().time, 2.0, "whole seconds");
        let hashed = r.next_record().unwrap().url.to_string();
        let id = xxhash_rust::xxh3::xxh3_64(b"http://trace.invalid/page-x");
        assert_eq!(hashed, format!("http://trace.invalid/{id}"));
        assert!(r.next_record().is_none());
        assert_eq!(r.skipped().bad_lines, 0);
        assert_eq!(r.position(), 4 * RECORD as u64);
    }

    #[test]
    fn a_short_last_record_is_counted_not_fatal() {
        let mut bytes = encode(5, 1, 10, -1).to_vec();
        bytes.extend_from_slice(&[1, 2, 3]);
        let mut r = OracleReader::new(&bytes[..]);
        assert_eq!(r.next_record().unwrap().bytes, 10);
        assert!(r.next_record().is_none());
        assert_eq!(r.skipped().bad_lines, 1);
    }

    #[test]
    fn out_of_range_times_and_sizes_are_clamped_and_counted() {
        // Past u32 seconds, within `trace::MAX_TIME` (past it, a bad line).
        let csv = "-5,1,10\n1e10,2,20\n3,3,5000000000\n";
        let mut out = Vec::new();
        let c = convert(&mut CsvReader::new(csv.as_bytes()), &mut out).unwrap();
        assert_eq!((c.clamped_times, c.clamped_sizes), (2, 1));
        let third: [u8; RECORD] = out[2 * RECORD..].try_into().unwrap();
        assert_eq!(decode(&third).2, u32::MAX);
    }
}
