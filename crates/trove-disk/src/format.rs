//! The on-disk format: region headers, records and region summaries, byte for byte.
//!
//! Everything here is pure (bytes in, bytes out) so it can be tested without files, and
//! `docs/storage-format.md` describes the same layout for people. All integers are
//! little-endian. Every structure carries a magic, the format version and an XXH3-64
//! checksum; XXH3 because the crate already names objects with it (`trove_store::hash`) and
//! it runs at memory speed, so verifying every read costs little next to the read itself.

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// The format this build writes and reads. A directory of a newer version is refused; an
/// older one is discarded (version 1 had no labels section in its records).
pub const VERSION: u16 = 2;

/// Every region starts with a [`RegionHeader`] of this many bytes; records follow.
pub const REGION_HEADER_LEN: u64 = 64;
/// A sealed region ends with a [`Footer`] of this many bytes, after its summary.
pub const FOOTER_LEN: u64 = 64;
/// Every record starts with a header of this many bytes.
pub const RECORD_HEADER_LEN: usize = 64;
/// One summary entry.
pub const SUMMARY_ENTRY_LEN: usize = 32;
/// Records start at multiples of this.
pub const ALIGN: u64 = 8;

const REGION_MAGIC: [u8; 4] = *b"TRVg";
const RECORD_MAGIC: [u8; 4] = *b"TRVr";
const FOOTER_MAGIC: [u8; 4] = *b"TRVs";

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A stored response: key, variant, head (see `meta`) and body.
    Object = 1,
    /// A removal (purge, invalidation) of one variant or of every variant of a key: replayed
    /// at recovery so a restart never revives what was removed.
    Tombstone = 2,
    // 3 was version 1's opaque invalidation payload; rules live in the journal now
    // (`journal`), which no region reclamation can take away. Version 1 directories are
    // discarded, so 3 is free again.
    /// A piece of a body too large for one record (docs/storage-format.md, *Large
    /// objects*): never indexed, read only through the [`Kind::Head`] that lists it.
    Fragment = 3,
    /// A stored response whose body is in fragments: key, variant, labels and meta as an
    /// object's, and for a body the [`FragmentList`]. Written after its fragments.
    Head = 4,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Object),
            2 => Some(Kind::Tombstone),
            3 => Some(Kind::Fragment),
            4 => Some(Kind::Head),
            _ => None,
        }
    }
}

/// Record flag: the object has a non-empty variant (its key has a `Vary`).
pub const FLAG_VARIED: u8 = 1;
/// Tombstone flag: every variant of the key is removed, not only the one named.
pub const FLAG_ALL_VARIANTS: u8 = 2;

/// Why bytes were not accepted as a structure of this format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no structure here (magic missing)")]
    NoMagic,
    #[error("written by a newer format version {0}")]
    NewerVersion(u16),
    #[error("written by an older format version {0}")]
    OlderVersion(u16),
    #[error("checksum mismatch")]
    Checksum,
    #[error("lengths out of bounds")]
    Bounds,
    #[error("belongs to an earlier use of the region")]
    StaleGeneration,
    #[error("unknown record kind")]
    Kind,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn check_version(v: u16) -> Result<(), FormatError> {
    match v {
        VERSION => Ok(()),
        v if v > VERSION => Err(FormatError::NewerVersion(v)),
        v => Err(FormatError::OlderVersion(v)),
    }
}

/// Rounds `n` up to [`ALIGN`].
pub fn aligned(n: u64) -> u64 {
    n.div_ceil(ALIGN) * ALIGN
}

/// The first bytes of a region: which use of the region this is (`seq`, increasing across
/// the whole cache, so recovery orders regions by age and ignores leftovers of a region's
/// previous use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionHeader {
    pub seq: u64,
    pub region_size: u64,
}

impl RegionHeader {
    pub fn encode(&self) -> [u8; REGION_HEADER_LEN as usize] {
        let mut b = [0u8; REGION_HEADER_LEN as usize];
        b[0..4].copy_from_slice(&REGION_MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.region_size.to_le_bytes());
        let sum = xxh3_64(&b[..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<RegionHeader, FormatError> {
        if b.len() < REGION_HEADER_LEN as usize || b[0..4] != REGION_MAGIC {
            return Err(FormatError::NoMagic);
        }
        if xxh3_64(&b[..56]) != u64_at(b, 56) {
            return Err(FormatError::Checksum);
        }
        check_version(u16_at(b, 4))?;
        Ok(RegionHeader {
            seq: u64_at(b, 8),
            region_size: u64_at(b, 16),
        })
    }
}

/// The fixed part of a record (see the module docs and docs/storage-format.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: Kind,
    pub flags: u8,
    /// The `seq` of the region use it was written in.
    pub region_seq: u64,
    pub key_len: u32,
    pub variant_len: u32,
    /// The labels section (see `labels`): tags, named cache, invalidation stamps.
    pub labels_len: u32,
    pub meta_len: u32,
    pub body_len: u64,
    /// `trove_store::hash::fingerprint(key, variant)`.
    pub fingerprint: u64,
    /// `trove_store::hash::key_hash(key)`.
    pub key_hash: u64,
    /// XXH3-64 over header bytes 0..56, key, variant, meta and body.
    pub checksum: u64,
}

impl RecordHeader {
    /// Bytes after the header: key, variant, labels, meta, body.
    pub fn payload_len(&self) -> u64 {
        self.key_len as u64
            + self.variant_len as u64
            + self.labels_len as u64
            + self.meta_len as u64
            + self.body_len
    }

    /// The whole record on disk, padding included.
    pub fn record_len(&self) -> u64 {
        aligned(RECORD_HEADER_LEN as u64 + self.payload_len())
    }

    fn encode_prefix(&self) -> [u8; RECORD_HEADER_LEN] {
        let mut b = [0u8; RECORD_HEADER_LEN];
        b[0..4].copy_from_slice(&RECORD_MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6] = self.kind as u8;
        b[7] = self.flags;
        b[8..16].copy_from_slice(&self.region_seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.key_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.variant_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.meta_len.to_le_bytes());
        b[28..32].copy_from_slice(&self.labels_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.body_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.fingerprint.to_le_bytes());
        b[48..56].copy_from_slice(&self.key_hash.to_le_bytes());
        b
    }

    /// Parses and bounds-checks a header (not the checksum, which needs the payload).
    /// `seq` is the region use the caller expects; `room` the bytes left in the region.
    pub fn decode(b: &[u8], seq: u64, room: u64) -> Result<RecordHeader, FormatError> {
        if b.len() < RECORD_HEADER_LEN || b[0..4] != RECORD_MAGIC {
            return Err(FormatError::NoMagic);
        }
        check_version(u16_at(b, 4))?;
        let h = RecordHeader {
            kind: Kind::from_u8(b[6]).ok_or(FormatError::Kind)?,
            flags: b[7],
            region_seq: u64_at(b, 8),
            key_len: u32_at(b, 16),
            variant_len: u32_at(b, 20),
            labels_len: u32_at(b, 28),
            meta_len: u32_at(b, 24),
            body_len: u64_at(b, 32),
            fingerprint: u64_at(b, 40),
            key_hash: u64_at(b, 48),
            checksum: u64_at(b, 56),
        };
        if h.region_seq != seq {
            return Err(FormatError::StaleGeneration);
        }
        if h.body_len > room || RECORD_HEADER_LEN as u64 + h.payload_len() > room {
            return Err(FormatError::Bounds);
        }
        Ok(h)
    }

    /// A hasher primed with the header, to be fed the payload.
    pub fn hasher(&self) -> Xxh3 {
        let mut h = Xxh3::new();
        h.update(&self.encode_prefix()[..56]);
        h
    }
}

/// One record to write.
pub struct NewRecord<'a> {
    pub kind: Kind,
    pub flags: u8,
    pub key: &'a str,
    pub variant: &'a str,
    pub fingerprint: u64,
    pub key_hash: u64,
    /// The labels section (`labels::encode`; empty for tombstones and invalidations).
    pub labels: &'a [u8],
    pub meta: &'a [u8],
    /// The body in pieces, as a `trove_store::Body` holds it.
    pub body: &'a [bytes::Bytes],
}

impl NewRecord<'_> {
    fn header(&self, region_seq: u64) -> RecordHeader {
        RecordHeader {
            kind: self.kind,
            flags: self.flags,
            region_seq,
            key_len: self.key.len() as u32,
            variant_len: self.variant.len() as u32,
            labels_len: self.labels.len() as u32,
            meta_len: self.meta.len() as u32,
            body_len: self.body.iter().map(|b| b.len() as u64).sum(),
            fingerprint: self.fingerprint,
            key_hash: self.key_hash,
            checksum: 0,
        }
    }

    /// Bytes the record takes on disk.
    pub fn record_len(&self) -> u64 {
        self.header(0).record_len()
    }

    /// Appends the record, padded to [`ALIGN`], to `out`; returns its header.
    pub fn encode_into(&self, region_seq: u64, out: &mut Vec<u8>) -> RecordHeader {
        let mut h = self.header(region_seq);
        let mut hasher = h.hasher();
        hasher.update(self.key.as_bytes());
        hasher.update(self.variant.as_bytes());
        hasher.update(self.labels);
        hasher.update(self.meta);
        for b in self.body {
            hasher.update(b);
        }
        h.checksum = hasher.digest();
        let start = out.len();
        let mut prefix = h.encode_prefix();
        prefix[56..64].copy_from_slice(&h.checksum.to_le_bytes());
        out.extend_from_slice(&prefix);
        out.extend_from_slice(self.key.as_bytes());
        out.extend_from_slice(self.variant.as_bytes());
        out.extend_from_slice(self.labels);
        out.extend_from_slice(self.meta);
        for b in self.body {
            out.extend_from_slice(b);
        }
        let end = start as u64 + h.record_len();
        out.resize(end as usize, 0);
        h
    }
}

/// A record read back whole and verified.
#[derive(Debug, Clone)]
pub struct Record {
    pub header: RecordHeader,
    pub key: String,
    pub variant: String,
    pub labels: bytes::Bytes,
    pub meta: bytes::Bytes,
    pub body: bytes::Bytes,
}

impl Record {
    /// Parses a whole record from `b` (which may run past its end) and verifies it.
    pub fn decode(b: &bytes::Bytes, seq: u64) -> Result<Record, FormatError> {
        let h = RecordHeader::decode(b, seq, b.len() as u64)?;
        let mut at = RECORD_HEADER_LEN;
        let mut take = |n: usize| {
            let s = b.slice(at..at + n);
            at += n;
            s
        };
        let key = take(h.key_len as usize);
        let variant = take(h.variant_len as usize);
        let labels = take(h.labels_len as usize);
        let meta = take(h.meta_len as usize);
        let body = take(h.body_len as usize);
        let mut hasher = h.hasher();
        for part in [&key, &variant, &labels, &meta, &body] {
            hasher.update(part);
        }
        if hasher.digest() != h.checksum {
            return Err(FormatError::Checksum);
        }
        Ok(Record {
            header: h,
            key: String::from_utf8(key.to_vec()).map_err(|_| FormatError::Checksum)?,
            variant: String::from_utf8(variant.to_vec()).map_err(|_| FormatError::Checksum)?,
            labels,
            meta,
            body,
        })
    }
}

/// One record as listed in a region's summary: enough to rebuild the index without reading
/// the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryEntry {
    pub fingerprint: u64,
    pub key_hash: u64,
    /// Offset of the record within its region.
    pub offset: u32,
    /// The record's length on disk.
    pub len: u32,
    pub kind: Kind,
    pub flags: u8,
}

impl SummaryEntry {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.fingerprint.to_le_bytes());
        out.extend_from_slice(&self.key_hash.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.push(self.kind as u8);
        out.push(self.flags);
        out.extend_from_slice(&[0u8; 6]);
    }

    fn decode(b: &[u8]) -> Result<SummaryEntry, FormatError> {
        Ok(SummaryEntry {
            fingerprint: u64_at(b, 0),
            key_hash: u64_at(b, 8),
            offset: u32_at(b, 16),
            len: u32_at(b, 20),
            kind: Kind::from_u8(b[24]).ok_or(FormatError::Kind)?,
            flags: b[25],
        })
    }

    /// The entry for a record just written at `offset`.
    pub fn of(h: &RecordHeader, offset: u64) -> SummaryEntry {
        SummaryEntry {
            fingerprint: h.fingerprint,
            key_hash: h.key_hash,
            offset: offset as u32,
            len: h.record_len() as u32,
            kind: h.kind,
            flags: h.flags,
        }
    }
}

/// The last [`FOOTER_LEN`] bytes of a sealed region: where its summary is and its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub seq: u64,
    pub count: u32,
    pub summary_offset: u64,
    pub summary_checksum: u64,
}

impl Footer {
    pub fn encode(&self) -> [u8; FOOTER_LEN as usize] {
        let mut b = [0u8; FOOTER_LEN as usize];
        b[0..4].copy_from_slice(&FOOTER_MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.count.to_le_bytes());
        b[24..32].copy_from_slice(&self.summary_offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.summary_checksum.to_le_bytes());
        let sum = xxh3_64(&b[..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8], seq: u64, region_size: u64) -> Result<Footer, FormatError> {
        if b.len() < FOOTER_LEN as usize || b[0..4] != FOOTER_MAGIC {
            return Err(FormatError::NoMagic);
        }
        if xxh3_64(&b[..56]) != u64_at(b, 56) {
            return Err(FormatError::Checksum);
        }
        check_version(u16_at(b, 4))?;
        let f = Footer {
            seq: u64_at(b, 8),
            count: u32_at(b, 16),
            summary_offset: u64_at(b, 24),
            summary_checksum: u64_at(b, 32),
        };
        if f.seq != seq {
            return Err(FormatError::StaleGeneration);
        }
        let end = f.summary_offset + f.count as u64 * SUMMARY_ENTRY_LEN as u64;
        if f.summary_offset < REGION_HEADER_LEN || end > region_size - FOOTER_LEN {
            return Err(FormatError::Bounds);
        }
        Ok(f)
    }

    /// Parses the summary bytes this footer describes.
    pub fn entries(&self, b: &[u8]) -> Result<Vec<SummaryEntry>, FormatError> {
        if xxh3_64(b) != self.summary_checksum || b.len() != self.count as usize * SUMMARY_ENTRY_LEN
        {
            return Err(FormatError::Checksum);
        }
        b.chunks_exact(SUMMARY_ENTRY_LEN)
            .map(SummaryEntry::decode)
            .collect()
    }
}

/// The summary bytes and footer for `entries`, sealing a region of `region_size` bytes.
pub fn seal(entries: &[SummaryEntry], seq: u64, region_size: u64) -> (u64, Vec<u8>) {
    let mut summary = Vec::with_capacity(entries.len() * SUMMARY_ENTRY_LEN);
    for e in entries {
        e.encode_into(&mut summary);
    }
    let summary_offset = region_size - FOOTER_LEN - summary.len() as u64;
    let footer = Footer {
        seq,
        count: entries.len() as u32,
        summary_offset,
        summary_checksum: xxh3_64(&summary),
    };
    summary.extend_from_slice(&footer.encode());
    (summary_offset, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let body = [Bytes::copy_from_slice(body)];
        NewRecord {
            kind: Kind::Object,
            flags: 0,
            key: "http://a/",
            variant: "",
            fingerprint: 7,
            key_hash: 9,
            labels: b"labels",
            meta: b"meta",
            body: &body,
        }
        .encode_into(3, &mut out);
        out
    }

    #[test]
    fn a_record_round_trips_and_any_flipped_byte_is_caught() {
        let bytes = record(b"hello world");
        assert_eq!(bytes.len() % ALIGN as usize, 0);
        let r = Record::decode(&Bytes::from(bytes.clone()), 3).unwrap();
        assert_eq!(&r.body[..], b"hello world");
        assert_eq!(r.key, "http://a/");
        assert_eq!(&r.labels[..], b"labels");
        let payload_end = RECORD_HEADER_LEN + 9 + 6 + 4 + 11;
        for i in 0..payload_end {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(
                Record::decode(&Bytes::from(bad), 3).is_err(),
                "flip at {i} not caught"
            );
        }
    }

    #[test]
    fn a_truncated_record_is_refused() {
        let bytes = record(b"hello world");
        for n in [10, RECORD_HEADER_LEN, bytes.len() - 12] {
            assert!(Record::decode(&Bytes::copy_from_slice(&bytes[..n]), 3).is_err());
        }
    }

    #[test]
    fn another_generation_and_a_newer_version_are_refused() {
        let bytes = record(b"x");
        assert_eq!(
            Record::decode(&Bytes::from(bytes.clone()), 4).unwrap_err(),
            FormatError::StaleGeneration
        );
        let mut newer = RegionHeader {
            seq: 1,
            region_size: 1 << 20,
        }
        .encode();
        newer[4..6].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let sum = xxh3_64(&newer[..56]);
        newer[56..64].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(
            RegionHeader::decode(&newer).unwrap_err(),
            FormatError::NewerVersion(VERSION + 1)
        );
    }

    #[test]
    fn a_summary_round_trips() {
        let e = SummaryEntry {
            fingerprint: 1,
            key_hash: 2,
            offset: 64,
            len: 128,
            kind: Kind::Tombstone,
            flags: FLAG_ALL_VARIANTS,
        };
        let size = 1 << 16;
        let (at, bytes) = seal(&[e, e], 5, size);
        let footer_at = bytes.len() - FOOTER_LEN as usize;
        let f = Footer::decode(&bytes[footer_at..], 5, size).unwrap();
        assert_eq!(f.summary_offset, at);
        assert_eq!(f.entries(&bytes[..footer_at]).unwrap(), vec![e, e]);
        assert!(Footer::decode(&bytes[footer_at..], 6, size).is_err());
    }
}

/// The largest body piece of one [`Kind::Fragment`] record: the writer's batch size, so a
/// fragment is one `pwrite` at most and one verified `pread` to read back.
pub const FRAGMENT_BODY: u64 = 1 << 20;

/// Bytes of a fragment's meta: spool id (8), fragment number (4), zero (4), offset (8).
pub const FRAGMENT_META_LEN: usize = 24;

/// The body bytes of every fragment record but a body's last, in a directory of regions
/// of `size` bytes: [`FRAGMENT_BODY`], or less where a region is too small for that.
pub(crate) fn fragment_body(size: u64) -> u64 {
    FRAGMENT_BODY
        .min(max_record(size) - RECORD_HEADER_LEN as u64 - FRAGMENT_META_LEN as u64 - ALIGN)
}

/// The largest record a region of `size` bytes takes (its header, one summary entry and
/// its footer besides).
pub(crate) fn max_record(size: u64) -> u64 {
    size - REGION_HEADER_LEN - SUMMARY_ENTRY_LEN as u64 - FOOTER_LEN
}

/// What a fragment says about itself (its meta section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentMeta {
    /// Random per stored body, so a leftover of another write of the same object is never
    /// taken for this one.
    pub spool: u64,
    pub number: u32,
    /// Where its bytes start in the body.
    pub offset: u64,
}

impl FragmentMeta {
    pub fn encode(&self) -> [u8; FRAGMENT_META_LEN] {
        let mut b = [0u8; FRAGMENT_META_LEN];
        b[0..8].copy_from_slice(&self.spool.to_le_bytes());
        b[8..12].copy_from_slice(&self.number.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<FragmentMeta, FormatError> {
        if b.len() != FRAGMENT_META_LEN {
            return Err(FormatError::Bounds);
        }
        Ok(FragmentMeta {
            spool: u64_at(b, 0),
            number: u32_at(b, 8),
            offset: u64_at(b, 16),
        })
    }
}

/// Where one fragment record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentRef {
    pub region: u32,
    /// The record's length on disk.
    pub len: u32,
    /// The `seq` of the region use it was written in.
    pub seq: u64,
    /// The record's offset in its region.
    pub offset: u64,
}

/// A [`Kind::Head`]'s body: the whole body's length and checksum, and its fragments in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragmentList {
    pub body_len: u64,
    /// XXH3-64 of the whole body.
    pub body_sum: u64,
    pub spool: u64,
    pub fragments: Vec<FragmentRef>,
}

impl FragmentList {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + 24 * self.fragments.len());
        b.extend_from_slice(&self.body_len.to_le_bytes());
        b.extend_from_slice(&self.body_sum.to_le_bytes());
        b.extend_from_slice(&self.spool.to_le_bytes());
        b.extend_from_slice(&(self.fragments.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for f in &self.fragments {
            b.extend_from_slice(&f.region.to_le_bytes());
            b.extend_from_slice(&f.len.to_le_bytes());
            b.extend_from_slice(&f.seq.to_le_bytes());
            b.extend_from_slice(&f.offset.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<FragmentList, FormatError> {
        if b.len() < 32 {
            return Err(FormatError::Bounds);
        }
        let n = u32_at(b, 24) as usize;
        if b.len() != 32 + 24 * n {
            return Err(FormatError::Bounds);
        }
        let fragments = (0..n)
            .map(|i| {
                let at = 32 + 24 * i;
                FragmentRef {
                    region: u32_at(b, at),
                    len: u32_at(b, at + 4),
                    seq: u64_at(b, at + 8),
                    offset: u64_at(b, at + 16),
                }
            })
            .collect();
        Ok(FragmentList {
            body_len: u64_at(b, 0),
            body_sum: u64_at(b, 8),
            spool: u64_at(b, 16),
            fragments,
        })
    }
}

#[cfg(test)]
mod fragment_tests {
    use super::*;

    #[test]
    fn a_fragment_list_and_a_fragment_meta_read_back_as_written() {
        let l = FragmentList {
            body_len: 3 << 20,
            body_sum: 7,
            spool: 9,
            fragments: (0..3)
                .map(|i| FragmentRef {
                    region: i,
                    len: 1 << 20,
                    seq: 40 + i as u64,
                    offset: 64 + 8 * i as u64,
                })
                .collect(),
        };
        assert_eq!(FragmentList::decode(&l.encode()), Ok(l.clone()));
        let mut bad = l.encode();
        bad.pop();
        assert_eq!(FragmentList::decode(&bad), Err(FormatError::Bounds));
        let m = FragmentMeta {
            spool: 5,
            number: 2,
            offset: 2 << 20,
        };
        assert_eq!(FragmentMeta::decode(&m.encode()), Ok(m));
    }
}
