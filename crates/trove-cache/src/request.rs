//! The neutral request and response heads the core decides on. They borrow `http` types,
//! not any front end's parser types, so the HTTP/1 proxy, a later HTTP/2 front end and the
//! simulator all drive the same core.

use std::time::SystemTime;

use http::header;
use http::{HeaderMap, Method, StatusCode};

/// A client request as the core sees it: method and header fields. The cache key is
/// resolved by the front end (routing is its business) and passed beside it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
}

impl<'a> Request<'a> {
    pub fn new(method: &'a Method, headers: &'a HeaderMap) -> Self {
        Request { method, headers }
    }

    /// GET or HEAD with no Cache-Control or Pragma of its own: only the stored response's
    /// age can change whether it is reused.
    pub fn is_plain(&self) -> bool {
        (*self.method == Method::GET || *self.method == Method::HEAD)
            && !self
                .headers
                .keys()
                .any(|k| k == header::CACHE_CONTROL || k == header::PRAGMA)
    }

    /// No conditional or range fields for the deliver step to answer.
    pub fn is_unconditional(&self) -> bool {
        // One pass over a request's few names (each compared as an enum) rather than five
        // lookups, each hashing its name.
        !self.headers.keys().any(|k| {
            k == header::IF_NONE_MATCH
                || k == header::IF_MODIFIED_SINCE
                || k == header::IF_MATCH
                || k == header::IF_UNMODIFIED_SINCE
                || k == header::RANGE
        })
    }
}

/// An origin's response head as the core sees it. `headers` are already cleaned for storing
/// and sending on (see [`crate::respond::clean_response_headers`]).
#[derive(Debug, Clone, Copy)]
pub struct ResponseHead<'a> {
    pub status: StatusCode,
    pub headers: &'a HeaderMap,
    /// The length the origin declared, if any.
    pub content_length: Option<u64>,
    /// When the request that produced it was sent, and when the head arrived.
    pub request_time: SystemTime,
    pub response_time: SystemTime,
}
