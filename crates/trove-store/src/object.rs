//! A stored response: an immutable head and a shared body.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::body::Body;
use crate::labels::Labels;
use crate::marks::TierMarks;

/// The stored response head and what the caching rules need to judge it later.
#[derive(Debug, Clone)]
pub struct ObjectHead {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The request header fields the response varies on, as sent with the request that
    /// produced it (RFC 9111 §4.1 compares new requests against these).
    pub request_headers: HeaderMap,
    /// When the request that produced this response was sent (RFC 9111 §4.2.3 `request_time`).
    pub request_time: SystemTime,
    /// When the response was received (`response_time`).
    pub response_time: SystemTime,
    /// Facts worked out once when the response was stored, so a hit need not re-derive them.
    pub prepared: Prepared,
    /// Its tags, named cache and invalidation stamp (see [`crate::invalidation`]).
    pub labels: Labels,
}

/// What the proxy derives from a stored head once, at store time, for cheap hits.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// The header fields as HTTP/1.1 wire lines (`name: value\r\n`), without the fields a
    /// hit sets itself (see the proxy's `cache::prepare`).
    pub wire: Bytes,
    /// `Some` when reuse depends on age alone (no Vary, no no-cache…): the response is fresh
    /// until this instant for a request without directives of its own.
    pub fresh_until: Option<SystemTime>,
    /// The corrected initial age (RFC 9111 §4.2.3), so `Age` = this + time since receipt.
    pub initial_age: Duration,
    /// Which caching policy `fresh_until` was worked out under (the proxy's listeners may
    /// obey different targeted fields); the fast path applies only under the same one.
    pub policy_id: u8,
}

/// One stored response: the primary key (the normalised URI), the variant key (the
/// normalised values of the fields named by `Vary`), the head and the body.
///
/// Objects are immutable snapshots; freshening a stored response after a 304 replaces the
/// stored snapshot with one of the same identity and body ([`crate::Storage::update_meta`]),
/// so two stored objects never share a body.
#[derive(Debug)]
pub struct Object {
    pub key: String,
    pub variant: String,
    pub head: ObjectHead,
    pub body: Arc<Body>,
    pub(crate) id: u64,
    pub(crate) marks: TierMarks,
}

impl Object {
    /// The store-assigned identity: the same across [`crate::Storage::update_meta`].
    pub fn id(&self) -> u64 {
        self.id
    }

    /// This snapshot's state with respect to lower tiers, which a tiered store keeps (see
    /// [`crate::tier`]).
    pub fn marks(&self) -> &TierMarks {
        &self.marks
    }
}

/// What one stored object costs besides its fields, key and body: the `Object`, its head
/// and `Body` (with their locks and wakers), the `Arc`s, and its entries in the shard map,
/// the eviction order and the policy (measured sizes, rounded up).
pub const OBJECT_OVERHEAD: u64 = 640;

/// What one header field costs besides its name and value: its slot in the `HeaderMap`
/// (the bucket with its name and value handles, and the index).
pub const FIELD_OVERHEAD: usize = 72;

/// What one tag (or the named cache) costs an object: its hash in the labels and its entry
/// in the tag index's map of carriers (id and `Arc`, at the map's load factor).
pub const MEMBERSHIP_COST: u64 = 64;

impl Object {
    /// Builds an object; the store gives it an id on insertion.
    pub fn new(key: String, variant: String, head: ObjectHead, body: Arc<Body>) -> Self {
        Object {
            key,
            variant,
            head,
            body,
            id: 0,
            marks: TierMarks::default(),
        }
    }

    /// A copy of this object to store anew (its own id and tier marks to be given; the
    /// same body): for an object in an `Arc` that is shared, where one alone was expected.
    pub fn unstored_copy(&self) -> Object {
        Object::new(
            self.key.clone(),
            self.variant.clone(),
            self.head.clone(),
            Arc::clone(&self.body),
        )
    }

    /// Bytes this object is charged against the budget: everything it costs, not only its
    /// bytes on the wire (issue 19, defect 4: 3,000 objects of 10 bytes with 64 tags each
    /// took 187 MiB while the store counted 1.6 MB). Its structures and index entries
    /// ([`OBJECT_OVERHEAD`]), each header field with its map entry ([`FIELD_OVERHEAD`]),
    /// each tag and named cache it carries with its membership in the tag index
    /// ([`MEMBERSHIP_COST`]), key, variant and body (the declared length while the body is
    /// still arriving). Tag *names* are shared by every object carrying them and charged
    /// once, by the tag index (`Invalidations::index_bytes`).
    pub fn charge(&self) -> u64 {
        self.head_charge().saturating_add(self.body.charge())
    }

    /// [`Object::charge`] but for the body: what this snapshot costs whatever its body
    /// holds (its head is immutable, so this never changes; a store keeps it to recharge
    /// a growing body without reading the head again).
    pub fn head_charge(&self) -> u64 {
        let head: usize = self
            .head
            .headers
            .iter()
            .chain(self.head.request_headers.iter())
            .map(|(n, v)| n.as_str().len() + v.len() + FIELD_OVERHEAD)
            .sum();
        let labels = &self.head.labels;
        let memberships = labels.tags.len() as u64 + u64::from(labels.cache.is_some());
        // Saturating: a declared length comes from the network.
        (head as u64)
            .saturating_add(OBJECT_OVERHEAD + self.key.len() as u64 + self.variant.len() as u64)
            .saturating_add(memberships * MEMBERSHIP_COST)
    }
}
