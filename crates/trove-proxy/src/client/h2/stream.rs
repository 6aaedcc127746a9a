//! One HTTP/2 stream, from its request head to its log line: the HTTP/1 connection loop's
//! per-request part (`client::conn`), over a stream.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{Request, StatusCode};
use trove_cache::Outcome;

use super::body::H2Body;
use super::head::request_head;
use super::respond::H2Sink;
use crate::client::body::{BodyLimits, ClientBody};
use crate::client::exchange::{self, Exchange};
use crate::client::head::{Framing, HeadLimits};
use crate::client::info::ConnInfo;
use crate::client::respond::{forward_interim, write_to};
use crate::metrics::Metrics;
use crate::origin::InterimSlot;
use crate::reply::Reply;
use crate::state::Shared;

/// Counts a stream open for as long as it is served.
struct StreamGuard(Arc<Metrics>);

impl StreamGuard {
    fn new(metrics: &Arc<Metrics>) -> StreamGuard {
        metrics.h2.streams.fetch_add(1, Ordering::Relaxed);
        metrics.h2.streams_open.fetch_add(1, Ordering::Relaxed);
        StreamGuard(Arc::clone(metrics))
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.h2.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one stream to the end.
pub async fn serve(
    req: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    info: ConnInfo,
    shared: Arc<Shared>,
) {
    let start_wall = SystemTime::now();
    let start = Instant::now();
    let _open = StreamGuard::new(&shared.metrics);
    let (parts, recv) = req.into_parts();
    let limits = HeadLimits {
        max_head_bytes: shared.settings.limits.max_head_bytes,
        max_headers: shared.settings.limits.max_headers,
    };
    let (head, refusal) = request_head(parts, recv.is_end_stream(), info.mode, limits);
    let declared = match head.framing {
        Framing::Length(n) => Some(n),
        Framing::None => Some(0),
        Framing::Chunked => None,
    };
    let body_limits = BodyLimits {
        idle: shared.settings.timeouts.client_head,
        deadline: shared.settings.timeouts.client_body,
        min_rate: shared.settings.limits.client_body_min_rate,
    };
    let mut body = H2Body::new(recv, declared, body_limits);
    let mut sink = H2Sink::new(respond, shared.settings.timeouts.client_write);
    let resolved = if !info.allowed {
        Err(Box::new(Reply::simple(
            StatusCode::FORBIDDEN,
            Outcome::Denied,
            "access denied",
        )))
    } else if let Some((status, why)) = refusal {
        shared
            .metrics
            .bad_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(Box::new(Reply::simple(status, Outcome::None, why)))
    } else {
        crate::cache::target::resolve(&shared, &head, info.mode)
    };
    let mut capture = None;
    let (target, reply) = match resolved {
        Err(refused) => (None, *refused),
        Ok(target) => {
            if head.expect_continue && !body.is_done() {
                let _ = sink.informational(StatusCode::CONTINUE, &http::HeaderMap::new());
            }
            capture = shared.trace.capture();
            let interim = InterimSlot::for_client(head.version);
            let handled = Box::pin(crate::trace::scope(capture.clone(), || {
                crate::cache::handle(&shared, &head, &target, info, &mut body, interim.as_ref())
            }));
            let reply = match &interim {
                Some(interim) => Box::pin(forward_interim(handled, interim, &mut sink)).await,
                None => handled.await,
            };
            (Some(target), reply)
        }
    };
    let outcome = reply.outcome;
    let status = reply.status;
    let peer = reply.peer.clone();
    let content_type = reply.headers.get(http::header::CONTENT_TYPE).cloned();
    let written = Box::pin(write_to(&mut sink, reply, &head.method)).await;
    let h2 = &shared.metrics.h2;
    if sink.stalled {
        h2.reset_write_timeout.fetch_add(1, Ordering::Relaxed);
    } else if !written.complete {
        // Never an END_STREAM for a body cut short.
        sink.reset(Reason::INTERNAL_ERROR);
        h2.reset_incomplete.fetch_add(1, Ordering::Relaxed);
    }
    exchange::record(
        &shared,
        Exchange {
            start: start_wall,
            elapsed: start.elapsed(),
            info,
            head: &head,
            target: target.as_ref(),
            outcome,
            status,
            written,
            gone_mid_body: body.client_gone(),
            sent: sink.sent,
            peer: peer.as_deref(),
            content_type: content_type.as_ref(),
            capture,
        },
    );
}
