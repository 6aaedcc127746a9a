//! The `Cache-Status` response field (RFC 9211), built from enums rather than free text, so
//! the access log, the metrics and the header always say the same thing.

use http::header::HeaderName;
use http::HeaderValue;
use trove_http::{NotStorable, StaleReason};

/// The field's name.
pub const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// This cache's name in `Cache-Status`.
pub const CACHE_NAME: &str = "trove";

/// Why the request went forward (RFC 9211 §2.2 `fwd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fwd {
    /// Configured to skip the cache (a cookie policy, say).
    Bypass,
    /// The method is not one the cache answers.
    Method,
    /// Nothing stored for the URI.
    UriMiss,
    /// Stored responses exist but none for this request's `Vary` fields.
    VaryMiss,
    /// A stored response exists but can't answer this request, or the URL is remembered
    /// as uncacheable.
    Miss,
    /// The client asked for a fresh response (`no-cache`, `max-age=0`).
    Request,
    /// The stored response was stale (or `no-cache`) and had to be validated or refetched.
    Stale,
    /// Only part of the response was stored: the rest was asked for (RFC 9111 §3.4).
    Partial,
    /// A stored response was there, but an invalidation rule made since it was fetched (a
    /// purge, a tag, a prefix, a ban) removed it. RFC 9211 has no `fwd` token for this, so
    /// it is sent as `fwd=miss` with `detail=invalidated` (unless the new response brings
    /// a more specific detail, such as why it could not be stored).
    Invalidated,
}

impl Fwd {
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::Bypass => "bypass",
            Fwd::Method => "method",
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Miss => "miss",
            Fwd::Request => "request",
            Fwd::Stale => "stale",
            Fwd::Partial => "partial",
            Fwd::Invalidated => "miss",
        }
    }

    /// The `detail` this reason implies when nothing more specific is known.
    pub fn detail(self) -> Option<Detail> {
        match self {
            Fwd::Invalidated => Some(Detail::Invalidated),
            _ => None,
        }
    }
}

/// Why a request was shed rather than sent to its origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShedReason {
    /// The origin's queue would take longer than its bound to reach this request
    /// (estimated from the queue's length and the origin's recent service times).
    QueueWait,
    /// It waited the whole bound in the origin's queue without getting a connection.
    QueueTimeout,
    /// The origin's queue has stood (no request found a connection free for a while): only
    /// a short line is admitted, and this request was not expected to get a connection
    /// soon enough.
    Overload,
    /// As many requests as the proxy allows already wait on origins.
    PendingLimit,
    /// Every connection the origin may give to streamed request bodies is taken, and none
    /// came free in time.
    UploadLimit,
}

impl ShedReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::QueueWait => "shed-queue-wait",
            ShedReason::QueueTimeout => "shed-queue-timeout",
            ShedReason::Overload => "shed-overload",
            ShedReason::PendingLimit => "shed-pending-limit",
            ShedReason::UploadLimit => "shed-upload-limit",
        }
    }
}

/// What went wrong talking to the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OriginFailure {
    /// The origin's name did not resolve (RFC 9209 `dns_error`).
    DnsError,
    /// The name servers did not answer in time (RFC 9209 `dns_timeout`).
    DnsTimeout,
    ConnectionRefused,
    ConnectionTimeout,
    /// Not sent: the request was shed (answered 503 at once) to keep the origin's queue
    /// within its bound.
    Overloaded(ShedReason),
    /// No response head, or a body gone silent, within the timeout.
    Timeout,
    /// The connection closed before a whole response.
    ConnectionClosed,
    /// The origin spoke broken HTTP.
    ProtocolError,
    /// The origin's TLS certificate was refused: expired, not yet valid, for another
    /// name, from an unknown issuer (RFC 9209 `tls_certificate_error`). The proxy's error
    /// names which.
    TlsCertificate,
    /// The TLS handshake with the origin failed otherwise: an alert, broken or
    /// unacceptable TLS, the connection dropped mid-handshake (RFC 9209
    /// `tls_protocol_error`).
    TlsProtocol,
}

impl OriginFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OriginFailure::DnsError => "dns-error",
            OriginFailure::DnsTimeout => "dns-timeout",
            OriginFailure::ConnectionRefused => "connection-refused",
            OriginFailure::ConnectionTimeout => "connection-timeout",
            OriginFailure::Overloaded(why) => why.as_str(),
            OriginFailure::Timeout => "timeout",
            OriginFailure::ConnectionClosed => "connection-closed",
            OriginFailure::ProtocolError => "http-protocol-error",
            OriginFailure::TlsCertificate => "tls-certificate-error",
            OriginFailure::TlsProtocol => "tls-protocol-error",
        }
    }

    /// Whether the origin could not be reached at all: its name did not resolve, the
    /// connection was refused, reset or closed, or it was silent past a timeout (RFC 9111
    /// §4.2.4's disconnected cache). A shed request never went out, and an origin speaking
    /// broken HTTP was reached: neither counts.
    pub fn is_disconnected(self) -> bool {
        matches!(
            self,
            OriginFailure::DnsError
                | OriginFailure::DnsTimeout
                | OriginFailure::ConnectionRefused
                | OriginFailure::ConnectionTimeout
                | OriginFailure::Timeout
                | OriginFailure::ConnectionClosed
        )
    }
}

/// The `detail` member: one reason, named once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Detail {
    /// A stale response served, and why that was allowed.
    Stale(StaleReason),
    /// A stale response served because the origin failed (RFC 5861 §4).
    StaleIfError,
    /// A stale response served because the origin could not be reached (RFC 9111
    /// §4.2.4), within `[cache] max_stale`.
    StaleDisconnected,
    /// The origin's response could not be stored, and why.
    NotStorable(NotStorable),
    /// Larger than the store's object size limit.
    TooLarge,
    /// The store's admission policy turned it away.
    NotAdmitted,
    /// The cookie policy kept it out of the store (`no-store-set-cookie`).
    SetCookie,
    /// The cookie policy sent a request carrying `Cookie` past the cache.
    RequestCookie,
    /// The origin could not be reached or failed.
    Origin(OriginFailure),
    /// `only-if-cached` and nothing usable stored.
    OnlyIfCached,
    /// A fresh hit read from the disk tier, not from memory (the access log's `TCP_HIT`).
    Disk,
    /// The stored response was removed by an invalidation rule ([`Fwd::Invalidated`]).
    Invalidated,
    /// Asked of the key's owner, another node of the cluster (shard mode), and not stored
    /// here: the owner's own member says what it did.
    Peer,
}

impl Detail {
    pub fn as_str(self) -> &'static str {
        match self {
            Detail::Stale(r) => r.as_str(),
            Detail::StaleIfError => "stale-if-error",
            Detail::StaleDisconnected => "stale-disconnected",
            Detail::NotStorable(n) => n.as_str(),
            Detail::TooLarge => "too-large",
            Detail::NotAdmitted => "not-admitted",
            Detail::SetCookie => "set-cookie",
            Detail::RequestCookie => "request-cookie",
            Detail::Origin(f) => f.as_str(),
            Detail::OnlyIfCached => "only-if-cached",
            Detail::Disk => "disk",
            Detail::Invalidated => "invalidated",
            Detail::Peer => "peer",
        }
    }
}

/// Why a stale stored response was served, for the metrics (one counter each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StaleServed {
    /// The client allowed it (`max-stale`).
    MaxStale,
    /// Within `stale-while-revalidate`, refreshed behind it.
    StaleWhileRevalidate,
    /// The origin answered with a server error or failed (`stale-if-error`).
    StaleIfError,
    /// The origin could not be reached (RFC 9111 §4.2.4, `[cache] max_stale`).
    Disconnected,
}

impl StaleServed {
    pub const ALL: [StaleServed; 4] = [
        StaleServed::MaxStale,
        StaleServed::StaleWhileRevalidate,
        StaleServed::StaleIfError,
        StaleServed::Disconnected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StaleServed::MaxStale => "max-stale",
            StaleServed::StaleWhileRevalidate => "stale-while-revalidate",
            StaleServed::StaleIfError => "stale-if-error",
            StaleServed::Disconnected => "disconnected",
        }
    }
}

/// One `Cache-Status` member for this cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStatus {
    /// Served from the cache without going forward.
    pub hit: bool,
    pub fwd: Option<Fwd>,
    /// The status the origin answered the forward request with.
    pub fwd_status: Option<u16>,
    /// The response was stored.
    pub stored: bool,
    /// Served from another request's fetch (collapsed forwarding).
    pub collapsed: bool,
    pub detail: Option<Detail>,
}

impl CacheStatus {
    /// A plain fresh hit.
    pub const HIT: CacheStatus = CacheStatus {
        hit: true,
        fwd: None,
        fwd_status: None,
        stored: false,
        collapsed: false,
        detail: None,
    };

    /// Went forward for `fwd`.
    pub fn forward(fwd: Fwd) -> CacheStatus {
        CacheStatus {
            fwd: Some(fwd),
            detail: fwd.detail(),
            ..CacheStatus::default()
        }
    }

    pub fn with_detail(mut self, d: Detail) -> CacheStatus {
        self.detail = Some(d);
        self
    }

    pub fn with_fwd_status(mut self, status: u16) -> CacheStatus {
        self.fwd_status = Some(status);
        self
    }

    /// Whether (and why) this member says a stale response was served.
    pub fn stale_served(&self) -> Option<StaleServed> {
        if !self.hit {
            return None;
        }
        match self.detail? {
            Detail::Stale(StaleReason::MaxStale) => Some(StaleServed::MaxStale),
            Detail::Stale(StaleReason::StaleWhileRevalidate) => {
                Some(StaleServed::StaleWhileRevalidate)
            }
            Detail::StaleIfError => Some(StaleServed::StaleIfError),
            Detail::StaleDisconnected => Some(StaleServed::Disconnected),
            _ => None,
        }
    }

    /// The member as text: `trove; hit`, `trove; fwd=uri-miss; fwd-status=200; stored` …
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::from(CACHE_NAME);
        if self.hit {
            s.push_str("; hit");
        }
        if let Some(f) = self.fwd {
            let _ = write!(s, "; fwd={}", f.as_str());
        }
        if let Some(n) = self.fwd_status {
            let _ = write!(s, "; fwd-status={n}");
        }
        if self.stored {
            s.push_str("; stored");
        }
        if self.collapsed {
            s.push_str("; collapsed");
        }
        if let Some(d) = self.detail {
            let _ = write!(s, "; detail={}", d.as_str());
        }
        s
    }

    /// The field value: the members of caches further upstream kept, ours after them (RFC
    /// 9211 §2: the first member is the cache closest to the origin, the last the one closest
    /// to the user).
    pub fn header_value(&self, upstream: Option<&HeaderValue>) -> HeaderValue {
        let upstream = upstream
            .and_then(|u| u.to_str().ok())
            .filter(|u| !u.trim().is_empty());
        if *self == CacheStatus::HIT && upstream.is_none() {
            return HeaderValue::from_static("trove; hit");
        }
        // RFC 9211 §2: the first member is the cache closest to the origin, the last the
        // one closest to the user: what came from upstream, then this cache's member.
        let own = self.render();
        let s = match upstream {
            Some(u) => format!("{u}, {own}"),
            None => own,
        };
        HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static(CACHE_NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disconnected_means_the_origin_was_never_reached_9111_4_2_4() {
        for f in [
            OriginFailure::DnsError,
            OriginFailure::DnsTimeout,
            OriginFailure::ConnectionRefused,
            OriginFailure::ConnectionTimeout,
            OriginFailure::Timeout,
            OriginFailure::ConnectionClosed,
        ] {
            assert!(f.is_disconnected(), "{}", f.as_str());
        }
        assert!(!OriginFailure::ProtocolError.is_disconnected());
        assert!(!OriginFailure::Overloaded(ShedReason::QueueWait).is_disconnected());
    }

    #[test]
    fn renders_rfc_9211_members() {
        assert_eq!(CacheStatus::HIT.header_value(None), "trove; hit");
        let miss = CacheStatus {
            stored: true,
            ..CacheStatus::forward(Fwd::UriMiss).with_fwd_status(200)
        };
        assert_eq!(miss.render(), "trove; fwd=uri-miss; fwd-status=200; stored");
        let up = HeaderValue::from_static("OriginCache; hit");
        assert_eq!(
            CacheStatus::forward(Fwd::Method)
                .with_detail(Detail::NotStorable(NotStorable::NoStore))
                .header_value(Some(&up)),
            "OriginCache; hit, trove; fwd=method; detail=no-store"
        );
    }
}
