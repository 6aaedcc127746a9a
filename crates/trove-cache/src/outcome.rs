//! How a request was served, named once: the access log prints [`Outcome::as_str`] (Squid's
//! result codes, so existing log tools, and `trove sim`, read trove's logs) and the
//! metrics count by it.

/// The cache outcome of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Fresh stored response served from memory.
    MemHit,
    /// Fresh stored response read from the disk tier (Squid's `TCP_HIT`: a hit that was not
    /// in memory). Later hits on a copy promoted into memory are `TCP_MEM_HIT` again.
    DiskHit,
    /// Served from a fetch another client started (collapsed forwarding).
    CollapsedHit,
    /// The client's conditional request answered 304 from the cache.
    ImsHit,
    /// A stored error response (404, 410 …) served.
    NegativeHit,
    /// Stale response served while it is revalidated in the background.
    StaleHit,
    /// Nothing usable stored; fetched from the origin.
    Miss,
    /// The client asked to bypass the cache (`no-cache`, `max-age=0` forcing a reload).
    ClientRefreshMiss,
    /// Revalidated with the origin: not modified.
    RefreshUnmodified,
    /// Revalidated with the origin: a new response replaced the stored one.
    RefreshModified,
    /// Revalidation failed; the stale response was served (stale-if-error).
    RefreshFailOld,
    /// Revalidation failed and the error was passed on.
    RefreshFailErr,
    /// Refused by the access rules.
    Denied,
    /// A CONNECT tunnel.
    Tunnel,
    /// A PURGE.
    Purge,
    /// Shed under overload: answered 503 at once rather than queued for the origin.
    Shed,
    /// The client's request was malformed, or the proxy answered on its own.
    None,
}

impl Outcome {
    pub const ALL: [Outcome; 17] = [
        Outcome::MemHit,
        Outcome::DiskHit,
        Outcome::CollapsedHit,
        Outcome::ImsHit,
        Outcome::NegativeHit,
        Outcome::StaleHit,
        Outcome::Miss,
        Outcome::ClientRefreshMiss,
        Outcome::RefreshUnmodified,
        Outcome::RefreshModified,
        Outcome::RefreshFailOld,
        Outcome::RefreshFailErr,
        Outcome::Denied,
        Outcome::Tunnel,
        Outcome::Purge,
        Outcome::Shed,
        Outcome::None,
    ];

    /// Squid's result code.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::MemHit => "TCP_MEM_HIT",
            Outcome::DiskHit => "TCP_HIT",
            Outcome::CollapsedHit => "TCP_CF_HIT",
            Outcome::ImsHit => "TCP_IMS_HIT",
            Outcome::NegativeHit => "TCP_NEGATIVE_HIT",
            Outcome::StaleHit => "TCP_STALE_HIT",
            Outcome::Miss => "TCP_MISS",
            Outcome::ClientRefreshMiss => "TCP_CLIENT_REFRESH_MISS",
            Outcome::RefreshUnmodified => "TCP_REFRESH_UNMODIFIED",
            Outcome::RefreshModified => "TCP_REFRESH_MODIFIED",
            Outcome::RefreshFailOld => "TCP_REFRESH_FAIL_OLD",
            Outcome::RefreshFailErr => "TCP_REFRESH_FAIL_ERR",
            Outcome::Denied => "TCP_DENIED",
            Outcome::Tunnel => "TCP_TUNNEL",
            Outcome::Purge => "TCP_PURGE",
            // Not one of Squid's codes (Squid queues or fails; it does not shed): named in
            // its style so log tools that split TAG/status still read it.
            Outcome::Shed => "TCP_SHED",
            Outcome::None => "NONE_NONE",
        }
    }

    /// Whether the body came from the cache without the origin sending it
    /// (what document hit ratio counts).
    pub fn is_hit(self) -> bool {
        matches!(
            self,
            Outcome::MemHit
                | Outcome::DiskHit
                | Outcome::CollapsedHit
                | Outcome::ImsHit
                | Outcome::NegativeHit
                | Outcome::StaleHit
                | Outcome::RefreshUnmodified
                | Outcome::RefreshFailOld
        )
    }

    /// Whether the request was one a cache could answer: a lookup that hit or missed. Not
    /// tunnels, refusals, purges, shed requests or malformed ones (the status page's hit
    /// ratios are over these).
    pub fn is_cacheable_traffic(self) -> bool {
        !matches!(
            self,
            Outcome::Denied | Outcome::Tunnel | Outcome::Purge | Outcome::Shed | Outcome::None
        )
    }

    /// What the code means, in a sentence (the status page's legend).
    pub fn meaning(self) -> &'static str {
        match self {
            Outcome::MemHit => "a fresh stored response, served from memory",
            Outcome::DiskHit => "a fresh stored response, read from the disk tier",
            Outcome::CollapsedHit => "served from a fetch another client had started",
            Outcome::ImsHit => "the client's conditional request answered 304 from the cache",
            Outcome::NegativeHit => "a stored error response (404, 410 …) served",
            Outcome::StaleHit => "a stale response served while it is revalidated behind",
            Outcome::Miss => "nothing usable stored: fetched from the origin",
            Outcome::ClientRefreshMiss => "the client asked to bypass the cache (reload)",
            Outcome::RefreshUnmodified => "revalidated with the origin: not modified",
            Outcome::RefreshModified => "revalidated with the origin: a new response",
            Outcome::RefreshFailOld => "the origin failed; the stale response was served",
            Outcome::RefreshFailErr => "the origin failed during revalidation; error passed on",
            Outcome::Denied => "refused by the access rules",
            Outcome::Tunnel => "a CONNECT tunnel",
            Outcome::Purge => "a PURGE",
            Outcome::Shed => "shed under overload: 503 at once instead of queueing",
            Outcome::None => "malformed request, or answered by the proxy itself",
        }
    }

    /// The position in [`Outcome::ALL`] (metrics index counters by it).
    pub fn index(self) -> usize {
        Outcome::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// Which store tier served a hit (the metrics' `tier` label): the access log tells the two
/// apart by [`Outcome::MemHit`] and [`Outcome::DiskHit`] for fresh hits; the tier counts
/// every stored response served at lookup, 304s, stale hits and ranges included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    Memory,
    Disk,
}

impl Tier {
    pub const ALL: [Tier; 2] = [Tier::Memory, Tier::Disk];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Memory => "memory",
            Tier::Disk => "disk",
        }
    }

    /// The position in [`Tier::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}
