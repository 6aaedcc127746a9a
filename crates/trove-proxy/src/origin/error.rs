//! Why talking to an origin failed.

use http::StatusCode;
use trove_cache::{OriginFailure, ShedReason};

use crate::destination::Refusal;

/// Why talking to an origin failed. [`OriginError::status`] is what the client gets.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("cannot connect to origin: {0}")]
    Connect(std::io::Error),
    /// The origin's name did not resolve (DNS): a failure to reach it, like `Connect`.
    #[error("cannot resolve the origin's name: {0}")]
    Resolve(std::io::Error),
    /// The name servers did not answer in time.
    #[error("the origin's name servers did not answer in time")]
    ResolveTimeout,
    /// The destination guard refused the destination: the client is answered 403, not as
    /// an origin failure (no stale-if-error, no failover).
    #[error("{}", .0.explain())]
    Refused(Refusal),
    #[error("origin did not accept the connection in time")]
    ConnectTimeout,
    #[error("overloaded: request shed ({})", .0.as_str())]
    Shed(ShedReason),
    #[error("origin did not answer in time")]
    ResponseTimeout,
    #[error("origin went silent mid-body")]
    BodyTimeout,
    #[error("origin closed or reset the connection")]
    Closed,
    #[error("origin sent an invalid response: {0}")]
    Protocol(&'static str),
    /// The TLS handshake with an `https` origin failed; the reason is counted on its own.
    #[error("{0}")]
    Tls(trove_tls::HandshakeError),
}

impl OriginError {
    /// 403 for a refused destination, 504 for timeouts, 502 for everything else.
    pub fn status(&self) -> StatusCode {
        match self {
            OriginError::Refused(_) => StatusCode::FORBIDDEN,
            _ => trove_cache::respond::failure_status(self.failure()),
        }
    }

    /// The failure as the cache core names it. A refusal is no origin failure and never
    /// reaches the core (the driver answers it itself); it maps to `ConnectionRefused` only
    /// so this stays total.
    pub fn failure(&self) -> OriginFailure {
        match self {
            OriginError::Connect(_) | OriginError::Refused(_) => OriginFailure::ConnectionRefused,
            OriginError::Resolve(_) => OriginFailure::DnsError,
            OriginError::ResolveTimeout => OriginFailure::DnsTimeout,
            OriginError::ConnectTimeout => OriginFailure::ConnectionTimeout,
            OriginError::Shed(why) => OriginFailure::Overloaded(*why),
            OriginError::ResponseTimeout | OriginError::BodyTimeout => OriginFailure::Timeout,
            OriginError::Closed => OriginFailure::ConnectionClosed,
            OriginError::Protocol(_) => OriginFailure::ProtocolError,
            OriginError::Tls(h) if h.reason.is_certificate() => OriginFailure::TlsCertificate,
            OriginError::Tls(_) => OriginFailure::TlsProtocol,
        }
    }

    pub(crate) fn from_hyper(e: hyper::Error) -> OriginError {
        if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
            OriginError::Protocol("malformed response head")
        } else if let Some(tls) = tls_cause(&e) {
            // TLS 1.3 finishes the client's handshake before the server has judged the
            // client's certificate: its refusal arrives as the first read's error.
            OriginError::Tls(tls)
        } else {
            OriginError::Closed
        }
    }
}

/// The TLS error under a hyper error, if the connection failed for one.
fn tls_cause(e: &hyper::Error) -> Option<trove_tls::HandshakeError> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io
                .get_ref()
                .is_some_and(|i| i.downcast_ref::<rustls::Error>().is_some())
            {
                return Some(trove_tls::HandshakeError::from_io(io));
            }
        }
        cause = c.source();
    }
    None
}

/// An origin error and the upstream it came from (`None` when no upstream was tried: the
/// request was shed, or could not be built).
#[derive(Debug)]
pub struct Failed {
    pub error: OriginError,
    pub upstream: Option<crate::upstream::Upstream>,
}

impl From<OriginError> for Failed {
    fn from(error: OriginError) -> Failed {
        Failed {
            error,
            upstream: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name that does not resolve is no refused connection: its own detail, and RFC
    /// 9209's status (502, 504 when the name servers did not answer).
    #[test]
    fn dns_failures_have_their_own_detail_and_status() {
        let nx = OriginError::Resolve(std::io::Error::other("no such name"));
        assert_eq!(nx.failure(), OriginFailure::DnsError);
        assert_eq!(nx.failure().as_str(), "dns-error");
        assert_eq!(nx.status(), StatusCode::BAD_GATEWAY);
        let slow = OriginError::ResolveTimeout;
        assert_eq!(slow.failure().as_str(), "dns-timeout");
        assert_eq!(slow.status(), StatusCode::GATEWAY_TIMEOUT);
        let refused = OriginError::Connect(std::io::Error::other("refused"));
        assert_eq!(refused.failure().as_str(), "connection-refused");
    }
}
