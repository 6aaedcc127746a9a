//! An object's invalidation labels (`trove_store::Labels`) as the labels section of a
//! record, and back: so tag and named-cache rules reach objects read back from disk, and
//! an object's stamps (`born`, `checked`, its soft mark) survive demotion and restarts.
//!
//! Kept in the record, not the index: the index stays at 12 B per object.
//!
//! | size | field |
//! |---|---|
//! | 8 | `born`: the invalidation sequence number when its request was sent |
//! | 8 | `checked`: the newest rule it had been checked against when written |
//! | 8 | `soft`: the newest soft rule that matched it (0: none) |
//! | 8 | `soft_at`: that rule's time, ms since the epoch |
//! | 8 | named cache hash (`trove_store::invalidation::cache_hash`) |
//! | 1 | flags: bit 0, it has a named cache |
//! | 3 | zero |
//! | 4 | number of tags |
//! | 8 × n | tag hashes (`trove_store::invalidation::tag_hash`) |
//! | 8 | XXH3-64 of the bytes above |
//!
//! The section has a checksum of its own (besides the record's): a large body is
//! streamed before the record's checksum can be checked, and its labels decide whether it
//! may be served at all.

use trove_store::Labels;

const FIXED: usize = 48;

/// The labels section for `l`.
pub fn encode(l: &Labels) -> Vec<u8> {
    let mut out = Vec::with_capacity(FIXED + 8 * l.tags.len());
    let (soft, soft_at) = l.soft_mark();
    for v in [l.born, l.checked(), soft, soft_at, l.cache.unwrap_or(0)] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.push(l.cache.is_some() as u8);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&(l.tags.len() as u32).to_le_bytes());
    for t in l.tags.iter() {
        out.extend_from_slice(&t.to_le_bytes());
    }
    let sum = xxhash_rust::xxh3::xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Malformed labels bytes (the record's checksum passed, so a bug or a format change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed labels section")]
pub struct BadLabels;

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The labels in `b`; `checked_floor` raises `checked` (every record on disk has been
/// checked through it by a disk pass; see `Tiered::scan`).
pub fn decode(b: &[u8], checked_floor: u64) -> Result<Labels, BadLabels> {
    if b.len() < FIXED + 8 {
        return Err(BadLabels);
    }
    let n = u32::from_le_bytes(b[44..48].try_into().expect("4 bytes")) as usize;
    let end = n
        .checked_mul(8)
        .and_then(|t| t.checked_add(FIXED))
        .ok_or(BadLabels)?;
    if b.len() != end + 8 || xxhash_rust::xxh3::xxh3_64(&b[..end]) != u64_at(b, end) {
        return Err(BadLabels);
    }
    let tags = (0..n).map(|i| u64_at(b, FIXED + 8 * i)).collect();
    let cache = (b[40] & 1 != 0).then(|| u64_at(b, 32));
    Ok(Labels::restored(
        tags,
        cache,
        u64_at(b, 0),
        u64_at(b, 8).max(checked_floor),
        u64_at(b, 16),
        u64_at(b, 24),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_a_short_section_is_refused() {
        let l = Labels::restored(vec![1, 2, 3], Some(9), 5, 7, 6, 1234);
        let b = encode(&l);
        let back = decode(&b, 0).unwrap();
        assert_eq!(&back.tags[..], &[1, 2, 3]);
        assert_eq!(back.cache, Some(9));
        assert_eq!((back.born, back.checked()), (5, 7));
        assert_eq!(back.soft_mark(), (6, 1234));
        assert_eq!(decode(&b, 11).unwrap().checked(), 11);
        let none = encode(&Labels::default());
        assert_eq!(decode(&none, 0).unwrap().cache, None);
        for n in 0..b.len() {
            assert!(decode(&b[..n], 0).is_err(), "{n}");
            let mut flipped = b.clone();
            flipped[n] ^= 1;
            assert!(decode(&flipped, 0).is_err(), "flip at {n}");
        }
    }
}
