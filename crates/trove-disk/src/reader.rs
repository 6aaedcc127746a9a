//! Reading a record back, verified: the header against the region's current use, the key
//! and variant against what was asked, the checksum against every byte. A small object is
//! read in one `pread` (the index's size hint); a large one's body is streamed in chunks
//! and its checksum checked at the end, so it is never loaded whole and a corrupt one is
//! never finished as complete.
//!
//! An object too large for one region is a head record listing fragment records
//! (docs/storage-format.md, *Large objects*): the head is read and verified whole, then the
//! body streamed a fragment at a time, each fragment verified as a record and as this body's
//! (spool, number, offset), and the whole body's checksum at the last one.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use xxhash_rust::xxh3::Xxh3;

use crate::format::{
    FormatError, FragmentList, FragmentMeta, Kind, Record, RecordHeader, RECORD_HEADER_LEN,
};
use crate::index::Loc;
use crate::shared::Shared;

/// Bytes read per step of a streamed body.
pub const CHUNK: u64 = 256 << 10;

/// Why a read failed (the record is then dropped and counted).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Format(#[from] FormatError),
    #[error("malformed head")]
    Meta,
    #[error("malformed labels")]
    Labels,
    #[error("read error: {0}")]
    Io(#[from] std::io::Error),
}

/// A large body being read from disk (see the module docs).
#[derive(Clone)]
pub struct BodyStream {
    pub(crate) fingerprint: u64,
    pub(crate) loc: Loc,
    seq: u64,
    next: u64,
    remaining: u64,
    hasher: Xxh3,
    checksum: u64,
    len: u64,
    /// A head's fragments (docs/storage-format.md, *Large objects*), and the next to read.
    fragments: Option<Box<FragmentList>>,
    fragment: usize,
    key_hash: u64,
}

impl std::fmt::Debug for BodyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyStream")
            .field("loc", &self.loc)
            .field("remaining", &self.remaining)
            .finish()
    }
}

impl BodyStream {
    /// The body's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A head's fragments, if this is a head's body.
    pub(crate) fn fragment_list(&self) -> Option<&FragmentList> {
        self.fragments.as_deref()
    }

    pub(crate) fn key_hash(&self) -> u64 {
        self.key_hash
    }
}

fn read(shared: &Shared, loc: Loc, at: u64, n: u64) -> std::io::Result<Bytes> {
    Ok(Bytes::from(shared.dir.read_vec(
        loc.region(),
        at,
        n as usize,
    )?))
}

/// Every record on disk has been checked against the rules up to this one (the last
/// complete disk pass; see `Tiered::scan`).
pub(crate) fn checked_floor(shared: &Shared) -> u64 {
    shared.disk_checked.load(Ordering::Acquire)
}

/// Reads the object at `loc`; `Ok(None)` if it is another key's (a tag collision) or the
/// region was reused meanwhile.
///
/// A reclaim copying the object forward reuses its region under the read: retired (a
/// stale generation), punched (zeros), or already holding the new region's records (the
/// copies among them) until the copies are published. All that while the object is in
/// `Shared::moving`, and is read from there; once they are published, it is read from its
/// new place. So a hot object is found all the while it moves, and is never taken for
/// corrupt for it.
pub fn load(
    shared: &Shared,
    fp: u64,
    loc: Loc,
    key: &str,
    whole_limit: u64,
) -> Result<Option<Loaded>, ReadError> {
    let first = load_at(shared, fp, loc, key, whole_limit);
    if matches!(first, Ok(Some(_))) {
        return first;
    }
    if let Some(r) = shared.moving.lock().get(&fp).cloned() {
        if r.key != key {
            return Ok(None);
        }
        return loaded_whole(shared, r).map(Some);
    }
    match shared.index.get(fp) {
        // Published at its new place since `loc` was read.
        Some(now) if !now.same_place(loc) => load_at(shared, fp, now, key, whole_limit),
        _ => match first {
            Err(ReadError::Format(FormatError::StaleGeneration)) => Ok(None),
            other => other,
        },
    }
}

/// An object read whole, from its verified record.
fn loaded_whole(shared: &Shared, r: Record) -> Result<Loaded, ReadError> {
    let mut head = crate::meta::decode(&r.meta).map_err(|_| ReadError::Meta)?;
    head.labels =
        crate::labels::decode(&r.labels, checked_floor(shared)).map_err(|_| ReadError::Labels)?;
    Ok(Loaded {
        key: r.key,
        variant: r.variant,
        head,
        body: LoadedBody::Whole(r.body),
    })
}

fn load_at(
    shared: &Shared,
    fp: u64,
    loc: Loc,
    key: &str,
    whole_limit: u64,
) -> Result<Option<Loaded>, ReadError> {
    let seq = shared.seqs[loc.region() as usize].load(Ordering::Acquire);
    let room = shared.dir.region_size() - loc.offset();
    let first = loc.len_hint().clamp(
        4096,
        room.min(whole_limit.saturating_add(64 << 10)).max(4096),
    );
    let b = read(shared, loc, loc.offset(), first.min(room))?;
    let h = RecordHeader::decode(&b, seq, room)?;
    if h.kind == Kind::Head && h.fingerprint == fp {
        return load_head(shared, fp, loc, key, seq, h, b);
    }
    if h.kind != Kind::Object || h.fingerprint != fp {
        return Ok(None);
    }
    let head_len = RECORD_HEADER_LEN as u64 + h.key_len as u64 + h.variant_len as u64;
    if h.body_len <= whole_limit {
        let whole = h.record_len();
        let b = if (b.len() as u64) < whole {
            read(shared, loc, loc.offset(), whole)?
        } else {
            b
        };
        let r = Record::decode(&b, seq)?;
        if r.key != key {
            return Ok(None);
        }
        return loaded_whole(shared, r).map(Some);
    }
    // Large: the head now, the body as a stream.
    let labels_end = head_len + h.labels_len as u64;
    let meta_end = labels_end + h.meta_len as u64;
    let b = if (b.len() as u64) < meta_end {
        read(shared, loc, loc.offset(), meta_end)?
    } else {
        b
    };
    if (b.len() as u64) < meta_end {
        return Err(FormatError::Bounds.into());
    }
    let k = &b[RECORD_HEADER_LEN..RECORD_HEADER_LEN + h.key_len as usize];
    if k != key.as_bytes() {
        return Ok(None);
    }
    let v = &b[RECORD_HEADER_LEN + h.key_len as usize..head_len as usize];
    let variant = String::from_utf8(v.to_vec()).map_err(|_| FormatError::Checksum)?;
    let meta = b.slice(labels_end as usize..meta_end as usize);
    let mut hasher = h.hasher();
    hasher.update(&b[RECORD_HEADER_LEN..meta_end as usize]);
    let mut head = crate::meta::decode(&meta).map_err(|_| ReadError::Meta)?;
    // Not verified yet (the checksum is checked at the body's end): a torn record fails
    // then, and the object is never completed.
    head.labels = crate::labels::decode(
        &b[head_len as usize..labels_end as usize],
        checked_floor(shared),
    )
    .map_err(|_| ReadError::Labels)?;
    Ok(Some(Loaded {
        key: key.to_string(),
        variant,
        head,
        body: LoadedBody::Stream(Box::new(BodyStream {
            fingerprint: fp,
            loc,
            seq,
            next: loc.offset() + meta_end,
            remaining: h.body_len,
            hasher,
            checksum: h.checksum,
            len: h.body_len,
            fragments: None,
            fragment: 0,
            key_hash: h.key_hash,
        })),
    }))
}

/// A head record: verified whole (it is small: the fragment list), its body to be streamed
/// fragment by fragment. `Ok(None)` (and the index entry gone) when a fragment's region was
/// reused since: the object lost part of its body, which is no corruption.
fn load_head(
    shared: &Shared,
    fp: u64,
    loc: Loc,
    key: &str,
    seq: u64,
    h: RecordHeader,
    b: Bytes,
) -> Result<Option<Loaded>, ReadError> {
    let whole = h.record_len();
    let b = if (b.len() as u64) < whole {
        read(shared, loc, loc.offset(), whole)?
    } else {
        b
    };
    let r = Record::decode(&b, seq)?;
    if r.key != key {
        return Ok(None);
    }
    let list = FragmentList::decode(&r.body)?;
    let gone = list.fragments.iter().any(|f| {
        shared
            .seqs
            .get(f.region as usize)
            .map(|s| s.load(Ordering::Acquire))
            != Some(f.seq)
    });
    if gone {
        shared.index.remove_if_at(fp, loc);
        return Ok(None);
    }
    let mut head = crate::meta::decode(&r.meta).map_err(|_| ReadError::Meta)?;
    head.labels =
        crate::labels::decode(&r.labels, checked_floor(shared)).map_err(|_| ReadError::Labels)?;
    Ok(Some(Loaded {
        key: r.key,
        variant: r.variant,
        head,
        body: LoadedBody::Stream(Box::new(BodyStream {
            fingerprint: fp,
            loc,
            seq,
            next: 0,
            remaining: list.body_len,
            hasher: Xxh3::new(),
            checksum: list.body_sum,
            len: list.body_len,
            fragments: Some(Box::new(list)),
            fragment: 0,
            key_hash: h.key_hash,
        })),
    }))
}

/// The next fragment of a head's body, verified: its record (checksum, `seq`, kind,
/// fingerprint), its place in this body (spool, number, offset), and at the last one the
/// whole body's checksum.
fn next_fragment(shared: &Shared, s: &mut BodyStream) -> std::io::Result<Option<Bytes>> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let Some(list) = s.fragments.as_deref() else {
        return Ok(None);
    };
    let Some(f) = list.fragments.get(s.fragment).copied() else {
        return if s.remaining == 0 {
            Ok(None)
        } else {
            Err(bad("fragments end before the body"))
        };
    };
    let current = shared
        .seqs
        .get(f.region as usize)
        .map(|x| x.load(Ordering::Acquire));
    if current != Some(f.seq) {
        // Reclaimed while being read: the body is gone, which is no corruption.
        return Err(trove_store::tier::reused());
    }
    let b = Bytes::from(shared.dir.read_vec(f.region, f.offset, f.len as usize)?);
    let r = Record::decode(&b, f.seq).map_err(|e| bad(&format!("fragment: {e}")))?;
    let m = FragmentMeta::decode(&r.meta).map_err(|e| bad(&format!("fragment: {e}")))?;
    let start = s.len - s.remaining;
    if r.header.kind != Kind::Fragment
        || r.header.fingerprint != s.fingerprint
        || m.spool != list.spool
        || m.number as usize != s.fragment
        || m.offset != start
        || r.body.is_empty()
        || r.body.len() as u64 > s.remaining
    {
        return Err(bad("not this body's fragment"));
    }
    s.hasher.update(&r.body);
    s.remaining -= r.body.len() as u64;
    s.fragment += 1;
    if s.fragment == list.fragments.len() && (s.remaining != 0 || s.hasher.digest() != s.checksum) {
        return Err(bad("checksum mismatch over the whole body"));
    }
    Ok(Some(r.body))
}

/// The next chunk of a streamed body (see [`crate::DiskStore::stream`]).
pub fn next_chunk(shared: &Shared, s: &mut BodyStream) -> std::io::Result<Option<Bytes>> {
    if s.fragments.is_some() {
        return next_fragment(shared, s);
    }
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    if s.remaining == 0 {
        return Ok(None);
    }
    if shared.seqs[s.loc.region() as usize].load(Ordering::Acquire) != s.seq {
        // Reclaimed while being read: the body is gone, which is no corruption.
        return Err(trove_store::tier::reused());
    }
    let n = s.remaining.min(CHUNK);
    let b = read(shared, s.loc, s.next, n)?;
    if (b.len() as u64) < n {
        return Err(bad("record truncated"));
    }
    s.hasher.update(&b);
    s.next += n;
    s.remaining -= n;
    if s.remaining == 0 && s.hasher.digest() != s.checksum {
        return Err(bad("checksum mismatch"));
    }
    Ok(Some(b))
}

/// An object found on disk, read back whole and verified.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub key: String,
    pub variant: String,
    pub head: trove_store::ObjectHead,
    pub body: LoadedBody,
}

/// The body of a [`Loaded`] object.
#[derive(Debug, Clone)]
pub enum LoadedBody {
    /// Small enough to have been read with the head, and verified.
    Whole(Bytes),
    /// Larger: stream it with [`crate::DiskStore::stream`], which verifies at the end.
    Stream(Box<crate::reader::BodyStream>),
}
