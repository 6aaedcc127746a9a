//! trove's cache core: every decision a shared cache makes about a request, with no
//! sockets, no tasks and no clock (`now` is passed in). `trove serve` runs these decisions
//! over the network; [`engine`] runs the same ones synchronously in virtual time, which is
//! what the simulator (`trove sim`) replays traces through and what the
//! equivalence test holds against `trove serve`.
//!
//! # The state machine
//!
//! ```text
//!  request ─► entry ─┬─ PURGE ───────────────────────────────────────► purge ─► deliver
//!                    ├─ unsafe / other method ─► pass ─► invalidate ──────────► deliver
//!                    └─ GET / HEAD ─► lookup ─► after_lookup
//!                                                 │
//!        ┌────────────────────┬───────────────────┼─────────────────────┬──────────────┐
//!      Fresh             StaleAllowed        MustValidate            Miss / VaryMiss   only-if-cached
//!        │                    │                   │                   / Unusable        miss: 504
//!      Serve            Serve (+ background   Revalidate ─► after_validation
//!   (MemHit / IMS /      revalidate on SWR)       │   304 ─► Freshen (update_meta) ─► deliver
//!    negative hit)            │                   │   5xx + stale-if-error ─► Serve stale
//!        │                    │                   │   304 not ours ─► Fetch again
//!        │                    │                   │   200 ─► after_fetch
//!        │                    │                 Fetch (lead / join collapsed) ─► after_fetch
//!        │                    │                                         │  Store ─► deliver stored
//!        ▼                    ▼                                         │  Pass ──► deliver origin
//!     deliver ◄───────────────┘               origin failed ─► after_failure: stale-if-error, stale-disconnected or 502/503/504
//! ```
//!
//! Each arrow is a function here ([`decide::entry`], [`lookup::lookup`],
//! [`decide::after_lookup`], [`decide::after_collapse`], [`respond::after_fetch`],
//! [`respond::after_validation`], [`respond::after_failure`], [`respond::invalidations`],
//! [`respond::head_updates`], [`deliver::delivery`]); each verdict is an enum. How a
//! request was served is an [`Outcome`] (Squid's result codes, for the access log and the
//! metrics) and a [`CacheStatus`] (RFC 9211, for the response header), both built from
//! enums with `as_str()`, never from free text.
//!
//! The store is reached only through [`trove_store::Storage`], so a disk tier plugs in
//! beneath without the core changing. The policies the server and the simulator must
//! share live here too: [`cookie`] (what to do with `Set-Cookie` and `Cookie`),
//! [`abort`] (finish or stop a fetch whose clients have gone) and [`resume`] (whether a
//! reader detached from a body that is not stored may go on with a fetch of its own).
//!
//! Dependencies: `trove-http` (the RFC rules), `trove-store` (the storage interface), `http`
//! for the vocabulary types, `bytes` for bodies, `serde` so the policies deserialize
//! straight from the config file, `smallvec` (the widely used inline vector, already in the
//! tree beneath parking_lot) so the engine records a request's steps without
//! allocating.

pub mod abort;
pub mod cookie;
pub mod decide;
pub mod deliver;
pub mod engine;
pub mod lookup;
pub mod memo;
pub mod outcome;
pub mod partial;
pub mod prepare;
pub mod request;
pub mod respond;
pub mod resume;
pub mod status;
mod step;

pub use abort::{AbortPolicy, AfterAbort, Storing};
pub use cookie::{CookiePolicy, RequestCookiePolicy, SetCookiePolicy};
pub use decide::{Action, Collapse, Conditionals, Entry, Fetch, Memo, Rules};
pub use lookup::Lookup;
pub use outcome::{Outcome, Tier};
pub use request::{Request, ResponseHead};
pub use status::{CacheStatus, Detail, Fwd, OriginFailure, ShedReason, StaleServed, CACHE_STATUS};
pub use step::{Step, Steps};

use http::Method;
use trove_http::StoredResponse;
use trove_store::Object;

/// A stored object as the reuse rules see it.
pub fn stored_view(obj: &Object) -> StoredResponse<'_> {
    StoredResponse {
        method: &Method::GET,
        status: obj.head.status,
        headers: &obj.head.headers,
        request_headers: &obj.head.request_headers,
        request_time: obj.head.request_time,
        response_time: obj.head.response_time,
    }
}
