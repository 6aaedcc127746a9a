//! The steps of the state machine, named once (Varnish's `REQ_STEPS`), for traces and for
//! the simulator's per-step counts.

/// The steps one request took, in order. A request takes a handful, kept inline so that
/// recording them costs no allocation (the simulator replays millions of requests a second
/// through the engine).
pub type Steps = smallvec::SmallVec<[Step; 6]>;

/// One step of a request's way through the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Which origin, which cache key (the front end's job).
    Resolve,
    /// What the store holds, judged against the request.
    Lookup,
    /// A fresh stored response is served.
    Hit,
    /// A stale stored response is served (max-stale, stale-while-revalidate, stale-if-error).
    Stale,
    /// A conditional request goes to the origin.
    Revalidate,
    /// Nothing usable: fetch (leading or joining a collapsed fetch).
    Miss,
    /// The origin's response enters the store.
    Store,
    /// A 304 or HEAD updates a stored head in place.
    Freshen,
    /// A request the cache does not answer goes to the origin, and may invalidate.
    Pass,
    /// Stored responses are removed.
    Invalidate,
    /// `PURGE`.
    Purge,
    /// The reply is built.
    Deliver,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Resolve => "resolve",
            Step::Lookup => "lookup",
            Step::Hit => "hit",
            Step::Stale => "stale",
            Step::Revalidate => "revalidate",
            Step::Miss => "miss",
            Step::Store => "store",
            Step::Freshen => "freshen",
            Step::Pass => "pass",
            Step::Invalidate => "invalidate",
            Step::Purge => "purge",
            Step::Deliver => "deliver",
        }
    }
}
