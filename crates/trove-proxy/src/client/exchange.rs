//! What is recorded when a request is over, whichever protocol carried it: the access-log
//! line, the replayable trace's record and the metrics. One place, so an HTTP/1 request and
//! an HTTP/2 stream are logged and counted alike.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use http::{HeaderValue, StatusCode};
use trove_cache::Outcome;

use crate::access_log::LogRecord;
use crate::cache::target::Target;
use crate::client::head::RequestHead;
use crate::client::info::ConnInfo;
use crate::client::respond::Written;
use crate::state::Shared;

/// One finished request.
pub struct Exchange<'a> {
    pub start: SystemTime,
    pub elapsed: Duration,
    pub info: ConnInfo,
    pub head: &'a RequestHead,
    /// The resolved target (`None` when the request was refused before it had one).
    pub target: Option<&'a Target>,
    pub outcome: Outcome,
    /// The reply's status.
    pub status: StatusCode,
    /// How writing it went.
    pub written: Written,
    /// The client went away before its request body was whole.
    pub gone_mid_body: bool,
    /// Bytes sent to the client.
    pub sent: u64,
    pub peer: Option<&'a str>,
    pub content_type: Option<&'a HeaderValue>,
    /// What the replayable trace noted while the cache handled it.
    pub capture: Option<crate::trace::Slot>,
}

/// Logs, traces and counts `x`.
pub fn record(shared: &Shared, x: Exchange<'_>) {
    // Squid's `…_ABORTED`: the client went away mid-body or mid-response. One gone mid-body
    // never got the reply: its status is logged as Squid does, 000.
    let aborted = x.gone_mid_body || !x.written.complete;
    let status = if x.gone_mid_body {
        0
    } else {
        x.written.sent_status.unwrap_or(x.status).as_u16()
    };
    let (url_host, url) = match x.target {
        Some(t) => ("", logged_url(x.info, Cow::Borrowed(t.key()))),
        None => {
            let (h, u) = crate::cache::log_url(x.head, x.info.mode);
            (h, logged_url(x.info, u))
        }
    };
    shared.log.log(&LogRecord {
        start: x.start,
        elapsed: x.elapsed,
        client: x.info.peer.ip(),
        outcome: x.outcome,
        status,
        bytes: x.sent,
        method: x.head.method.as_str(),
        url_host,
        url: &url,
        peer: x.peer,
        content_type: x.content_type.and_then(|v| v.to_str().ok()).unwrap_or("-"),
        aborted,
        protocol: crate::access_log::protocol(x.head.version),
    });
    if let (Some(c), Some(t)) = (x.capture, x.target) {
        let c = std::mem::take(&mut *c.lock());
        shared.trace.request(
            &crate::trace::Exchange {
                start: x.start,
                done: x.start.checked_add(x.elapsed).unwrap_or(x.start),
                client: x.info.peer.ip(),
                method: x.head.method.as_str(),
                url: t.key(),
                headers: &x.head.headers,
                status,
                outcome: x.outcome,
                aborted,
                bytes: x.sent,
            },
            c,
        );
    }
    shared.metrics.record(x.outcome, x.elapsed, x.sent);
    if aborted {
        shared.metrics.client_aborts.fetch_add(1, Ordering::Relaxed);
    }
}

/// The URL as the access log shows it: with the scheme the client used, so a request that
/// came over TLS is logged `https://…` (as Squid logs its `https_port`), while the cache key
/// stays the one both schemes of a reverse-proxied site share.
pub fn logged_url(info: ConnInfo, url: Cow<'_, str>) -> Cow<'_, str> {
    match url.strip_prefix("http://") {
        Some(rest) if info.tls => Cow::Owned(format!("https://{rest}")),
        _ => url,
    }
}
