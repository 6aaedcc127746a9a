//! The replies the driver words itself: an origin's answer sent on unstored, an origin
//! that failed, a destination the guard refused.

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use trove_cache::{CacheStatus, Outcome, CACHE_STATUS};

use super::{fetch, Ctx};
use crate::destination::Refusal;
use crate::origin::{Failed, OriginResponse};
use crate::reply::{PassBody, Reply, ReplyBody};

/// A generated error for an origin that could not be reached, naming the upstream (in
/// its body and in the log's hierarchy field).
pub(super) fn fail(
    failure: Option<Failed>,
    status: StatusCode,
    outcome: Outcome,
    cache_status: CacheStatus,
) -> Reply {
    let upstream = failure
        .as_ref()
        .and_then(|f| f.upstream.as_ref())
        .map(|u| u.authority());
    let text = match (&upstream, &failure) {
        (Some(u), Some(f)) => format!("upstream {u}: {}", f.error),
        (None, Some(f)) => f.error.to_string(),
        (_, None) => "origin failed".to_string(),
    };
    let mut r = Reply::simple(status, outcome, &text);
    r.peer = upstream;
    r.headers
        .insert(CACHE_STATUS, cache_status.header_value(None));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// The reply to a client whose destination the guard refused: 403, logged `TCP_DENIED`
/// and, like every denial, without `Cache-Status` (the cache took no part).
pub(super) fn destination_refused(why: Refusal) -> Reply {
    tracing::debug!(reason = why.as_str(), "destination refused");
    Reply::simple(
        StatusCode::FORBIDDEN,
        Outcome::Denied,
        &format!("the proxy will not connect there: {}", why.explain()),
    )
}

/// Sends an origin response on without storing it; `headers` are its cleaned fields.
pub(super) fn pass_through(
    cx: &Ctx<'_>,
    resp: OriginResponse,
    mut headers: HeaderMap,
    outcome: Outcome,
    status: CacheStatus,
) -> Reply {
    let upstream = resp.headers.get(CACHE_STATUS).cloned();
    headers.insert(CACHE_STATUS, status.header_value(upstream.as_ref()));
    let peer = Some(resp.upstream.authority());
    let code = resp.status;
    let no_body = cx.req.method == Method::HEAD
        || code.is_informational()
        || code == StatusCode::NO_CONTENT
        || code == StatusCode::NOT_MODIFIED;
    let body = if no_body {
        let content_length = fetch::content_length_header(&resp.headers);
        tokio::spawn(fetch::discard(resp));
        ReplyBody::Empty { content_length }
    } else {
        ReplyBody::Origin(Box::new(PassBody {
            resp,
            abort: cx.shared.settings.cache.abort.policy(),
            metrics: Arc::clone(&cx.shared.metrics),
        }))
    };
    Reply {
        status: code,
        headers,
        wire: None,
        body,
        outcome,
        peer,
        close: false,
    }
}
