//! HTTP caching rules for trove: RFC 9111 as a shared cache, the parts of
//! RFC 9110 a cache needs (validators, preconditions, ranges), the
//! `stale-while-revalidate` / `stale-if-error` extensions (RFC 5861) and
//! targeted cache-control fields such as `CDN-Cache-Control` (RFC 9213).
//!
//! # Why this crate is pure
//!
//! Nothing here does I/O or reads the clock: every function that depends on
//! time takes `now: SystemTime` (and the stored request and response times)
//! as arguments. That lets `trove-sim` replay millions of requests in virtual
//! time through exactly the rules `trove serve` uses, and lets the tests
//! state each RFC requirement as a plain function call. Values from the
//! network are never trusted: no input makes these functions panic, numbers
//! saturate (RFC 9111 §1.2.2), and malformed fields are read in the
//! direction that caches less.
//!
//! # Why `http` and `httpdate`
//!
//! `http` supplies the vocabulary types (`Method`, `StatusCode`, `HeaderMap`,
//! `HeaderName`, `HeaderValue`, `Uri`) that hyper and the proxy already use,
//! so the proxy passes its own values in without conversion. `httpdate`
//! formats HTTP-dates with no further dependencies; reading them is done here
//! ([`date`]), since the RFC asks for more leniency than `httpdate` gives. Everything else (Cache-Control and
//! Structured Field parsing, entity tags, ranges, URI keys) is small enough
//! to write here against the RFC text.
//!
//! # Where to start
//!
//! On a miss: [`storable::storability`]. On a hit: [`reuse::reuse`], then
//! [`validation`] to build the conditional request and merge a 304, and
//! [`preconditions`] / [`range`] to answer the client. After an unsafe
//! method: [`invalidate::invalidation_targets`]. Request targets:
//! [`target::Target`], the one parsed, normalised form for routing, keys and the upstream
//! request. Keys: [`key::cache_key`] and [`vary::variant_key`].

pub mod cache_control;
pub mod connection;
pub mod content_length;
pub mod date;
pub mod etag;
pub mod field;
pub mod freshness;
pub mod interim;
pub mod invalidate;
pub mod key;
pub mod policy;
pub mod preconditions;
pub mod range;
pub mod reuse;
mod sf;
pub mod storable;
pub mod target;
pub mod validation;
pub mod vary;

pub use cache_control::{CacheControl, FieldList};
pub use freshness::{age_value, current_age, freshness_lifetime, FreshnessLifetime};
pub use invalidate::invalidation_targets;
pub use key::cache_key;
pub use policy::{effective_response_cc, Policy, CDN_CACHE_CONTROL, TROVE_CACHE_CONTROL};
pub use preconditions::{not_modified_headers, Precondition};
pub use range::{content_range, ByteRange, PartialContent, RangeOutcome};
pub use reuse::{
    disconnected_allows, reuse, stale_if_error_allows, Reuse, StaleReason, StoredResponse,
    ValidateReason,
};
pub use storable::{post_reusable_for_get, storability, storability_parsed, NotStorable};
pub use target::{Target, TargetError};
pub use validation::{conditional_headers, freshen_headers, selects};
pub use vary::{variant_key, vary_matches, Vary};
