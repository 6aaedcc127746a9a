//! One HTTP/2 connection: the handshake, then streams accepted and each served on a task of
//! its own ([`super::stream`]) while this task drives the connection.
//!
//! - At most [`MAX_STREAMS`] streams are open and served at once. While that many are in
//!   flight the connection is still driven but no stream is taken, so streams a client
//!   opens and resets in a loop (the rapid-reset attack, CVE-2023-44487) pile up in h2's
//!   pending-accept queue, whose bound closes the connection.
//! - Header lists are bounded at twice `[limits] max_head_bytes` by h2 (trove answers 431
//!   from `max_head_bytes` itself, logged), the HPACK table at 4 KiB, receive windows at
//!   [`STREAM_WINDOW`] per stream and [`CONNECTION_WINDOW`] in all, and what h2 buffers to
//!   send at [`SEND_BUFFER`] per stream.
//! - Control frames (PING, SETTINGS, WINDOW_UPDATE, RST_STREAM, PRIORITY, unknown types)
//!   spend a budget that useful work earns back ([`super::meter`]); a connection that
//!   spends it is closed with GOAWAY ENHANCE_YOUR_CALM (h2 bounds the memory of those
//!   floods but never ends them).
//! - A graceful stop sends GOAWAY (h2 sends the last stream id after a PING round trip);
//!   streams in flight finish. A connection without streams for `[timeouts] client_idle`
//!   is closed the same way. A connection closing with no stream left (or closed for a
//!   flood) is dropped if it has not closed within `[timeouts] client_write`: a client
//!   that reads nothing would otherwise hold it for ever, its GOAWAY never written. A reload applies to each stream as it is accepted, as it does
//!   to each HTTP/1 request.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tokio::task::JoinSet;

use super::meter::{Budget, Metered};
use crate::client::conn::OpenGuard;
use crate::client::info::ConnInfo;
use crate::client::transport::ClientStream;
use crate::state::Shared;

/// Streams served at once per connection (SETTINGS_MAX_CONCURRENT_STREAMS).
pub const MAX_STREAMS: usize = 128;
/// Receive window per stream: the most of a request body a stream holds unread.
pub const STREAM_WINDOW: u32 = 64 << 10;
/// Receive window for the whole connection.
pub const CONNECTION_WINDOW: u32 = 1 << 20;
/// Most response bytes h2 holds queued per stream.
pub const SEND_BUFFER: usize = 32 << 10;

/// Serves a connection on which ALPN chose `h2`, counted as a client connection.
pub async fn serve(stream: ClientStream, info: ConnInfo, shared: Arc<Shared>) {
    shared
        .metrics
        .client_accepted
        .fetch_add(1, Ordering::Relaxed);
    shared.metrics.h2.alpn.fetch_add(1, Ordering::Relaxed);
    // As `ClientStream::split` does for HTTP/1 (an h2c connection was split, so has it).
    stream.set_nodelay();
    let _open = OpenGuard::new(Arc::clone(&shared.metrics));
    drive(stream, Bytes::new(), info, shared).await;
}

/// Serves an HTTP/2 connection whose first bytes, `read`, were already read (the h2c
/// preface, read by the HTTP/1 side, which counts the connection).
pub async fn serve_prefixed(
    stream: ClientStream,
    read: Bytes,
    info: ConnInfo,
    shared: Arc<Shared>,
) {
    shared
        .metrics
        .h2
        .prior_knowledge
        .fetch_add(1, Ordering::Relaxed);
    drive(stream, read, info, shared).await;
}

/// A stream h2 handed over: its request and where its response goes.
type Incoming = (
    http::Request<h2::RecvStream>,
    h2::server::SendResponse<Bytes>,
);

/// What woke the driver.
enum Woke {
    Accepted(Option<Result<Box<Incoming>, h2::Error>>),
    StreamDone,
    Stop,
    Idle,
    Flood,
    CloseTimedOut,
}

/// Serves `io` as an HTTP/2 connection, `read` being bytes already read from it.
async fn drive(io: ClientStream, read: Bytes, mut info: ConnInfo, mut shared: Arc<Shared>) {
    let head_limit = shared.settings.limits.max_head_bytes;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS as u32)
        .max_header_list_size(u32::try_from(head_limit.saturating_mul(2)).unwrap_or(u32::MAX))
        .header_table_size(4096)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .max_concurrent_reset_streams(50)
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(Some(1024));
    let budget = Arc::new(Budget::new());
    let io = Metered::new(io, read, Arc::clone(&budget));
    let handshake = builder.handshake::<Metered<ClientStream>, Bytes>(io);
    let mut conn = match tokio::time::timeout(shared.settings.timeouts.client_head, handshake).await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(client = %info.peer, error = %e, "HTTP/2 handshake failed");
            return;
        }
        Err(_) => return,
    };
    let mut streams: JoinSet<()> = JoinSet::new();
    let mut draining = false;
    let mut calmed = false;
    let mut close_by: Option<tokio::time::Instant> = None;
    loop {
        if calmed || (draining && streams.is_empty()) {
            let client_write = shared.settings.timeouts.client_write;
            close_by.get_or_insert_with(|| tokio::time::Instant::now() + client_write);
        } else {
            close_by = None;
        }
        let full = streams.len() >= MAX_STREAMS;
        let idle = streams.is_empty() && !draining;
        let client_idle = shared.settings.timeouts.client_idle;
        let woke = tokio::select! {
            r = async {
                if full {
                    // Driven, but no stream taken (see the module docs).
                    match std::future::poll_fn(|cx| conn.poll_closed(cx)).await {
                        Ok(()) => None,
                        Err(e) => Some(Err(e)),
                    }
                } else {
                    conn.accept().await.map(|r| r.map(Box::new))
                }
            } => Woke::Accepted(r),
            Some(_) = streams.join_next(), if !streams.is_empty() => Woke::StreamDone,
            () = shared.lifecycle.stopped(), if !draining => Woke::Stop,
            () = tokio::time::sleep(client_idle), if idle => Woke::Idle,
            () = budget.spent(), if !calmed => Woke::Flood,
            () = tokio::time::sleep_until(close_by.unwrap_or_else(tokio::time::Instant::now)),
                if close_by.is_some() => Woke::CloseTimedOut,
        };
        match woke {
            Woke::Accepted(Some(Ok(incoming))) => {
                let (req, respond) = *incoming;
                budget.earn(1);
                // A reload happened: this stream is served under the new settings, and the
                // client judged again by the new ACL.
                if let Some(newest) = shared.newest() {
                    shared = newest;
                    info.allowed = shared.acl.allows(info.peer.ip());
                }
                streams.spawn(super::stream::serve(
                    req,
                    respond,
                    info,
                    Arc::clone(&shared),
                ));
            }
            Woke::Accepted(Some(Err(e))) => {
                tracing::debug!(client = %info.peer, error = %e, "HTTP/2 connection failed");
                break;
            }
            Woke::Accepted(None) => break,
            Woke::CloseTimedOut => {
                tracing::debug!(client = %info.peer, "HTTP/2 connection not closed in time: dropped");
                break;
            }
            Woke::StreamDone => {}
            Woke::Flood => {
                tracing::info!(
                    client = %info.peer,
                    frame = budget.spent_on(),
                    "HTTP/2 control-frame flood: GOAWAY ENHANCE_YOUR_CALM"
                );
                shared
                    .metrics
                    .h2
                    .goaway_flood
                    .fetch_add(1, Ordering::Relaxed);
                conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                calmed = true;
            }
            Woke::Stop | Woke::Idle => {
                let h2 = &shared.metrics.h2;
                let c = if matches!(woke, Woke::Stop) {
                    &h2.goaway_stop
                } else {
                    &h2.goaway_idle
                };
                c.fetch_add(1, Ordering::Relaxed);
                conn.graceful_shutdown();
                draining = true;
            }
        }
    }
    // The connection is gone (dropped here, so streams still writing fail at once); let
    // them finish and log.
    drop(conn);
    while streams.join_next().await.is_some() {}
}
