//! trove's cache core: every decision a shared cache makes about a request, with no
//! sockets, no tasks and no clock (`now` is passed in). The request flow is written once,
//! here, as a state machine ([`flow::Flow`]): it takes events (the lookup answered, the
//! origin's head arrived, the store took the object, an invalidation raced…) and emits
//! commands (look up, join the fetch, send, insert, update, serve, forward…). `trove serve`
//! carries the commands out over the network; [`engine`] carries them out synchronously in
//! virtual time, which is what the simulator (`trove sim`) replays traces through. Neither
//! decides anything, so they cannot disagree.
//!
//! # The state machine
//!
//! ```text
//!  request ─► entry ─┬─ PURGE ───────────────────────────────────────► purge ─► respond
//!                    ├─ unsafe / other method ─► pass ─► invalidate ──────────► forward / serve
//!                    └─ GET / HEAD ─► lookup ─► after_lookup
//!                                                 │
//!        ┌────────────────────┬───────────────────┼─────────────────────┬──────────────┐
//!      Fresh             StaleAllowed        MustValidate            Miss / VaryMiss   only-if-cached
//!        │                    │                   │                   / Unusable        miss: 504
//!      Serve            Serve (+ background   Revalidate ─► after_validation
//!   (MemHit / IMS /      revalidate on SWR)       │   304 ─► Freshen (update_meta) ─► serve
//!    negative hit)            │                   │   5xx + stale-if-error ─► Serve stale
//!        │                    │                   │   304 not ours, or invalidated ─► Fetch again
//!        │                    │                   │   200 ─► after_fetch
//!        │                    │                 Fetch (lead / join collapsed) ─► after_fetch
//!        │                    │                                         │  Store ─► serve stored
//!        ▼                    ▼                                         │  Pass ──► forward
//!      serve ◄────────────────┘               origin failed ─► after_failure: stale-if-error, stale-disconnected or 502/503/504
//! ```
//!
//! [`flow`] runs the steps; each verdict is a function here returning an enum
//! ([`decide::entry`], [`lookup::judge_variants`], [`decide::after_lookup`],
//! [`decide::after_collapse`], [`respond::after_fetch`], [`respond::after_validation`],
//! [`respond::after_failure`], [`respond::invalidations`], [`respond::head_updates`],
//! [`purge::parse`], [`deliver::delivery`]), and only [`flow`] matches on them. How a
//! request was served is an [`Outcome`] (Squid's result codes, for the access log and the
//! metrics) and a [`CacheStatus`] (RFC 9211, for the response header), both built from
//! enums with `as_str()`, never from free text. `tests/flow_table/transitions.table` holds
//! the machine's transitions as data, `tests/verdict_table/cases.table` its verdicts on
//! whole requests, run through the engine here and through `trove serve` in trove-proxy.
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
//! tree beneath parking_lot) so a flow records its steps and queues its commands without
//! allocating.

pub mod abort;
pub mod cookie;
pub mod decide;
pub mod deliver;
pub mod engine;
pub mod flow;
pub mod lookup;
pub mod memo;
pub mod outcome;
pub mod partial;
pub mod prepare;
pub mod purge;
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
