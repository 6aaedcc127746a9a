//! The Deliver step's decisions for a stored response: its `Age`, whether the client's own
//! preconditions turn it into a 304 or 412, and how the outcome is logged. Building the
//! bytes (ranges, multipart) is the front end's job.

use std::time::{Duration, SystemTime};

use http::StatusCode;
use trove_http::preconditions::{self, Precondition};
use trove_http::range::{self, RangeOutcome};
use trove_store::Object;

use crate::outcome::Outcome;
use crate::request::Request;

/// What the client gets from a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Its conditional request matched: 304 (RFC 9110 §13.2.2).
    NotModified,
    /// A precondition failed: 412.
    PreconditionFailed,
    /// The response (or the requested ranges of it).
    Response,
}

/// The client's preconditions, judged against the stored response.
pub fn delivery(obj: &Object, req: Request<'_>) -> Delivery {
    if req.is_unconditional() {
        return Delivery::Response;
    }
    match preconditions::evaluate(req.method, req.headers, obj.head.status, &obj.head.headers) {
        Precondition::NotModified => Delivery::NotModified,
        Precondition::Failed => Delivery::PreconditionFailed,
        Precondition::Proceed => Delivery::Response,
    }
}

/// The stored response's current age (RFC 9111 §4.2.3), for `Age`.
pub fn age(obj: &Object, now: SystemTime) -> Duration {
    let resident = now
        .duration_since(obj.head.response_time)
        .unwrap_or_default();
    obj.head.prepared.initial_age.saturating_add(resident)
}

/// How a delivery is logged: a plain hit (from memory or disk) answered with a 304 is an IMS
/// hit, one on a stored error response a negative hit (as Squid logs them, whatever the
/// tier); other outcomes keep their name.
pub fn outcome(base: Outcome, d: Delivery, stored_status: StatusCode) -> Outcome {
    if !matches!(base, Outcome::MemHit | Outcome::DiskHit) {
        return base;
    }
    match d {
        Delivery::NotModified => Outcome::ImsHit,
        Delivery::PreconditionFailed => base,
        Delivery::Response if stored_status.as_u16() >= 400 => Outcome::NegativeHit,
        Delivery::Response => base,
    }
}

/// The status line the client gets: 304, 412, or for a stored 200 the answer to the
/// client's `Range` (206 or 416, RFC 9110 §14), as the proxy serves it: against the body's
/// length (what arrived if it is complete, else what the origin declared), a single range
/// even while the body arrives, several only from a complete one (else the whole response,
/// which §14.2 permits).
pub fn status(d: Delivery, obj: &Object, req: Request<'_>) -> StatusCode {
    match d {
        Delivery::NotModified => StatusCode::NOT_MODIFIED,
        Delivery::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
        Delivery::Response => {
            let complete = matches!(obj.body.outcome(), Some(Ok(())));
            let total = if complete {
                Some(obj.body.len())
            } else {
                obj.body.expected_len()
            };
            let Some(total) = total else {
                return obj.head.status;
            };
            if obj.head.status != StatusCode::OK
                || *req.method != http::Method::GET
                // An empty map still hashes the name it is asked for.
                || req.headers.is_empty()
                || !req.headers.contains_key(http::header::RANGE)
            {
                return obj.head.status;
            }
            match range::range_outcome(req.method, req.headers, &obj.head.headers, total) {
                RangeOutcome::Full => obj.head.status,
                RangeOutcome::Unsatisfiable => StatusCode::RANGE_NOT_SATISFIABLE,
                RangeOutcome::Single(_) => StatusCode::PARTIAL_CONTENT,
                RangeOutcome::Multi(_) if complete => StatusCode::PARTIAL_CONTENT,
                RangeOutcome::Multi(_) => obj.head.status,
            }
        }
    }
}
