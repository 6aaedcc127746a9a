//! Why talking to an origin failed.

use http::StatusCode;
use trove_cache::{OriginFailure, ShedReason};

/// Why talking to an origin failed. [`OriginError::status`] is what the client gets.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("cannot connect to origin: {0}")]
    Connect(std::io::Error),
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
}

impl OriginError {
    /// 504 for timeouts, 502 for everything else.
    pub fn status(&self) -> StatusCode {
        trove_cache::respond::failure_status(self.failure())
    }

    /// The failure as the cache core names it.
    pub fn failure(&self) -> OriginFailure {
        match self {
            OriginError::Connect(_) => OriginFailure::ConnectionRefused,
            OriginError::ConnectTimeout => OriginFailure::ConnectionTimeout,
            OriginError::Shed(why) => OriginFailure::Overloaded(*why),
            OriginError::ResponseTimeout | OriginError::BodyTimeout => OriginFailure::Timeout,
            OriginError::Closed => OriginFailure::ConnectionClosed,
            OriginError::Protocol(_) => OriginFailure::ProtocolError,
        }
    }

    pub(crate) fn from_hyper(e: hyper::Error) -> OriginError {
        if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
            OriginError::Protocol("malformed response head")
        } else {
            OriginError::Closed
        }
    }
}
