//! Hashes of cache keys, in two kinds with two jobs.
//!
//! - **Stable** ([`key_hash`], [`fingerprint`]): XXH3-64 (seed 0) over the UTF-8 bytes of the
//!   normalised key, and for a variant XXH3-64 seeded with the key's hash over the variant's
//!   bytes. Specified, the same on every machine, process and Rust version, so anything
//!   persisted (a disk tier's index), compared across runs (the simulator against the server)
//!   or spread across nodes (consistent hashing) can use it. `std`'s `DefaultHasher` promises
//!   none of that.
//! - **Fast** ([`FastMap`]): foldhash, randomly seeded per process, for in-memory maps only.
//!   Measured against SipHash (`DefaultHasher`) and XXH3 on URL-like keys by
//!   `cargo run --release -p trove-store --example hashers` (figures in BENCHMARKS.md).

use std::collections::HashMap;

/// The stable 64-bit hash of a primary cache key (see the module docs).
pub fn key_hash(key: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key.as_bytes())
}

/// The stable 64-bit identity of one stored variant of `key`: what an eviction policy
/// remembers an object by across re-insertions, and what a persisted record is named by.
pub fn fingerprint(key: &str, variant: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(variant.as_bytes(), key_hash(key))
}

/// A map for in-memory use only: fast, seeded per process, never persisted.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A set for in-memory use only (see [`FastMap`]).
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// An empty [`FastMap`].
pub fn fast_map<K, V>() -> FastMap<K, V> {
    HashMap::with_hasher(foldhash::fast::RandomState::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stable hashes are a format: these values must never change.
    #[test]
    fn stable_hashes_are_pinned() {
        assert_eq!(key_hash(""), 0x2d06800538d394c2);
        assert_eq!(
            key_hash("http://example.com/"),
            key_hash("http://example.com/")
        );
        assert_ne!(
            fingerprint("http://example.com/", "gzip"),
            fingerprint("http://example.com/", "br")
        );
        assert_ne!(fingerprint("a", ""), fingerprint("b", ""));
    }
}
