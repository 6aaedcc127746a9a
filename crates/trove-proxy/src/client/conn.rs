//! One client connection: read a request head, hand it to the request state machine, write
//! the reply, log it, and loop while the connection may persist. Pipelined requests are
//! answered in order because the next head is only parsed once the previous reply is out.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Instant, SystemTime};

use http::{Method, StatusCode, Version};

use crate::access_log::LogRecord;
use crate::client::body::{BodyLimits, ReadSide, RequestBody};
use crate::client::exchange::{self, logged_url, Exchange};
use crate::client::head::{self, HeadError, HeadLimits, RequestHead};
pub use crate::client::info::ConnInfo;
use crate::client::respond::{forward_interim, write_reply};
use crate::client::transport::{ClientRead, ClientStream, ClientWrite};
use crate::client::write::ClientWriter;
use crate::fd_limit::Freed;
use crate::origin::InterimSlot;
use crate::reply::Reply;
use crate::settings::Mode;
use crate::state::Shared;
use crate::tunnel;
use crate::upgrade;
use trove_cache::Outcome;

/// Request body bytes read and thrown away after a reply so the connection can be reused;
/// beyond this the connection is closed instead.
const DRAIN_LIMIT: u64 = 256 * 1024;

/// How long a connection that just became idle waits without looking at a graceful stop
/// (registering for the stop's notice on every request would cost a lock each).
const FIRST_IDLE_WAIT: std::time::Duration = crate::lifecycle::IDLE_CHECK;

enum HeadRead {
    Head(Box<RequestHead>),
    Closed,
    Bad(HeadError),
    /// The HTTP/2 preface (the listener takes `h2c`): the bytes read are in the buffer.
    Http2,
}

/// A client connection between requests: all that an idle keep-alive connection holds (its
/// task is this, the wait for readiness and the two guards; a request's own state lives in a
/// box made for that request, see [`exchange`]).
struct Conn {
    rs: ReadSide<ClientRead>,
    w: ClientWriter<ClientWrite>,
    info: ConnInfo,
    shared: Arc<Shared>,
    /// Requests served on it so far.
    served: u32,
}

pin_project_lite::pin_project! {
    /// Waits, with no buffer, for an idle connection's next bytes: false if it closed, failed,
    /// stayed silent for `client_idle`, or the proxy is stopping. A graceful stop is noticed
    /// at the end of the [`FIRST_IDLE_WAIT`] (no cost per request) and at once after it.
    ///
    /// Written by hand, one timer for both waits, so that the task of an idle connection is
    /// this and the connection itself: `select!` and `timeout` over tokio's own futures made
    /// the wait a third larger, and a task past 512 bytes costs the next allocation size.
    struct IdleWait<'a> {
        conn: &'a Conn,
        #[pin]
        sleep: tokio::time::Sleep,
        // Set once the first wait is over.
        #[pin]
        stop: Option<tokio::sync::futures::Notified<'a>>,
    }
}

impl<'a> IdleWait<'a> {
    fn new(conn: &'a Conn) -> Self {
        let idle = conn.shared.settings.timeouts.client_idle;
        IdleWait {
            conn,
            sleep: tokio::time::sleep(FIRST_IDLE_WAIT.min(idle)),
            stop: None,
        }
    }
}

impl std::future::Future for IdleWait<'_> {
    type Output = bool;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<bool> {
        let mut this = self.project();
        if let Poll::Ready(r) = this.conn.rs.io.poll_readable(cx) {
            return Poll::Ready(r.is_ok());
        }
        if let Some(stop) = this.stop.as_mut().as_pin_mut() {
            if stop.poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            return this.sleep.poll(cx).map(|()| false);
        }
        if this.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        // The first wait is over: from now on a stop ends the wait at once.
        let shared = &this.conn.shared;
        let lifecycle = &shared.lifecycle;
        this.stop.set(Some(lifecycle.stop_notified()));
        let Some(mut stop) = this.stop.as_mut().as_pin_mut() else {
            return Poll::Ready(false);
        };
        stop.as_mut().enable();
        if lifecycle.stopping() {
            return Poll::Ready(false);
        }
        let idle = shared.settings.timeouts.client_idle;
        let rest = idle.saturating_sub(FIRST_IDLE_WAIT.min(idle));
        this.sleep
            .as_mut()
            .reset(tokio::time::Instant::now() + rest);
        if stop.poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        this.sleep.poll(cx).map(|()| false)
    }
}

/// Reads the next request head; the connection has bytes to read (see [`IdleWait`]).
async fn read_head(conn: &mut Conn, h2c: bool) -> HeadRead {
    let Conn { rs, shared, .. } = conn;
    let limits = HeadLimits {
        max_head_bytes: shared.settings.limits.max_head_bytes,
        max_headers: shared.settings.limits.max_headers,
    };
    let t = &shared.settings.timeouts;
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        // On a listener with `http2`, a connection may open with the HTTP/2 preface (h2c
        // with prior knowledge) instead of a request.
        let preface = h2c && crate::client::h2::may_be_preface(&rs.buf);
        if preface && rs.buf.len() >= crate::client::h2::PREFACE.len() {
            return HeadRead::Http2;
        }
        if !preface {
            match head::parse(&mut rs.buf, limits) {
                Ok(Some(h)) => return HeadRead::Head(Box::new(h)),
                Ok(None) => {}
                Err(e) => return HeadRead::Bad(e),
            }
        }
        // An idle connection may wait `client_idle` for its next request; once a head has
        // begun it must be complete within `client_head` (slowloris).
        let wait = if rs.buf.iter().all(|b| *b == b'\r' || *b == b'\n') {
            t.client_idle
        } else {
            let d = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + t.client_head);
            d.saturating_duration_since(tokio::time::Instant::now())
        };
        match tokio::time::timeout(wait, rs.fill()).await {
            Ok(Ok(0)) | Ok(Err(_)) => return HeadRead::Closed,
            Ok(Ok(_)) => {}
            Err(_) => {
                if rs.buf.iter().all(|b| *b == b'\r' || *b == b'\n') {
                    return HeadRead::Closed;
                }
                return HeadRead::Bad(HeadError::Malformed("request head timed out"));
            }
        }
    }
}

/// Serves one connection to the end.
///
/// When it ends, the connection is no longer counted open and the acceptor, which may be
/// waiting for a descriptor to be freed, is told.
pub fn serve(
    stream: ClientStream,
    info: ConnInfo,
    shared: Arc<Shared>,
) -> impl std::future::Future<Output = ()> + Send {
    // The same metrics in every generation (see `crate::lifecycle`).
    shared
        .metrics
        .client_accepted
        .fetch_add(1, Ordering::Relaxed);
    let open = OpenGuard::new(Arc::clone(&shared.metrics)).freeing(Arc::clone(&shared.freed));
    let (rd, wr) = stream.split();
    let mut conn = Conn {
        rs: ReadSide::new(rd),
        w: ClientWriter::new(wr, shared.settings.timeouts.client_write),
        info,
        shared,
        served: 0,
    };
    // A block that uses what it captures in place, not an `async fn`: an async function's
    // arguments are moved into locals and keep both places in its future for the whole
    // connection, and this future is all an idle connection's task holds.
    async move {
        // Held, not used: the guard ends with the connection's task.
        let _ = &open;
        loop {
            if conn.rs.buf.is_empty() {
                // Between requests the connection holds no buffer (they go back to the
                // thread's pool, `crate::client::buffers`, and are taken again when bytes
                // arrive), so tens of thousands of idle keep-alive connections cost little
                // memory.
                if conn.shared.lifecycle.stopping() {
                    return;
                }
                conn.rs.release_if_empty();
                conn.w.release_buffer();
                if !IdleWait::new(&conn).await {
                    return;
                }
            }
            let h2c = conn.info.http2 && conn.served == 0;
            // Boxed: its timer would otherwise be part of every idle connection's task.
            let head = Box::pin(read_head(&mut conn, h2c)).await;
            // A reload happened: this request is served under the new settings, and the client
            // is judged again by the new ACL.
            if let Some(newest) = conn.shared.newest() {
                conn.shared = newest;
                conn.info.allowed = conn.shared.acl.allows(conn.info.peer.ip());
            }
            match head {
                // Boxed, built for this request and freed after it: an idle connection's task
                // does not carry the space a request needs.
                HeadRead::Head(head) => match Box::pin(exchange(conn, head)).await {
                    Some(kept) => conn = kept,
                    None => return,
                },
                HeadRead::Closed => return,
                HeadRead::Http2 => {
                    let Conn {
                        rs,
                        w,
                        info,
                        shared,
                        ..
                    } = conn;
                    let ClientWriter { io: wr, .. } = w;
                    let ReadSide { io: rd, buf } = rs;
                    if let Some(stream) = rd.reunite(wr) {
                        // Boxed: an HTTP/1 connection's task should not carry its space.
                        Box::pin(crate::client::h2::serve_prefixed(
                            stream,
                            buf.freeze(),
                            info,
                            shared,
                        ))
                        .await;
                    }
                    return;
                }
                HeadRead::Bad(e) => {
                    Box::pin(refuse_malformed(&mut conn, e)).await;
                    return;
                }
            }
        }
    }
}

/// Answers a request head that could not be parsed, logs it, and closes.
async fn refuse_malformed(conn: &mut Conn, e: HeadError) {
    let Conn {
        rs,
        w,
        info,
        shared,
        ..
    } = conn;
    let metrics = &shared.metrics;
    metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
    tracing::info!(client = %info.peer, error = %e, "refused malformed request");
    let start = SystemTime::now();
    let reply = Reply::simple(e.status(), Outcome::None, &e.to_string());
    let before = w.sent;
    write_reply(w, reply, &Method::GET, Version::HTTP_11, false).await;
    shared.log.log(&LogRecord {
        start,
        elapsed: start.elapsed().unwrap_or_default(),
        client: info.peer.ip(),
        outcome: Outcome::None,
        status: e.status().as_u16(),
        bytes: w.sent - before,
        method: "-",
        url_host: "",
        url: "error:invalid-request",
        peer: None,
        content_type: "text/plain",
        aborted: false,
        protocol: "-",
    });
    metrics.record(
        Outcome::None,
        start.elapsed().unwrap_or_default(),
        w.sent - before,
    );
    lingering_close(rs, w).await;
}

/// One request on the connection, from its parsed head to its reply's log line. Gives the
/// connection back if it may carry another request; `None` once it is closed or became
/// something else (a tunnel, an upgraded protocol).
async fn exchange(conn: Conn, head: Box<RequestHead>) -> Option<Conn> {
    let Conn {
        mut rs,
        mut w,
        info,
        shared,
        mut served,
    } = conn;
    let metrics = &shared.metrics;
    if served > 0 {
        metrics.client_reused.fetch_add(1, Ordering::Relaxed);
    }
    served = served.saturating_add(1);
    let start_wall = SystemTime::now();
    let start = Instant::now();

    if head.method == Method::CONNECT && info.allowed && info.mode == Mode::Forward {
        let host = head.target.host().unwrap_or("").to_string();
        let port = head.target.port_u16().unwrap_or(443);
        let url = format!("{host}:{port}");
        let ClientWriter { io: wr, .. } = w;
        let class = shared.destinations.class(info.peer.ip());
        let rules = tunnel::TunnelRules {
            allowed_ports: &shared.settings.connect.allowed_ports,
            destinations: &shared.destinations,
            resolver: &shared.resolver,
            connect_timeout: shared.settings.timeouts.connect,
            idle_timeout: shared.settings.timeouts.client_idle,
        };
        let result = Box::pin(tunnel::run(rs, wr, &host, port, class, rules)).await;
        if let Some(why) = result.refused {
            metrics.count_refusal(why);
            tracing::info!(client = %info.peer, destination = %url, reason = why.as_str(), "refused a CONNECT destination");
        }
        let outcome = if result.status == StatusCode::FORBIDDEN {
            Outcome::Denied
        } else {
            Outcome::Tunnel
        };
        shared.log.log(&LogRecord {
            start: start_wall,
            elapsed: start.elapsed(),
            client: info.peer.ip(),
            outcome,
            status: result.status.as_u16(),
            bytes: result.bytes_to_client,
            method: "CONNECT",
            url_host: "",
            url: &url,
            peer: (result.status == StatusCode::OK).then_some(url.as_str()),
            content_type: "-",
            aborted: false,
            protocol: crate::access_log::protocol(head.version),
        });
        metrics.record(outcome, start.elapsed(), result.bytes_to_client);
        return None;
    }

    // The target is parsed and normalised once, here; the route, the key, the upstream
    // request and the log line below all read this one value.
    let resolved = if info.allowed {
        crate::cache::target::resolve(&shared, &head, info.mode)
    } else {
        Err(Box::new(
            Reply::simple(StatusCode::FORBIDDEN, Outcome::Denied, "access denied").closing(),
        ))
    };
    // An upgrade (WebSocket): once the origin switches, this connection is a tunnel.
    let mut declined: Option<Box<Reply>> = None;
    // (The target alone is borrowed across the await: a refusal's reply is not `Sync`.)
    let upgrade_target = resolved.as_ref().ok();
    if let (Some(target), Some(protocols)) = (upgrade_target, upgrade::requested(&head)) {
        let started = Box::pin(upgrade::start(&shared, &head, target, info, &protocols));
        match started.await {
            upgrade::Started::Switched(sw) => {
                let at = Began {
                    wall: start_wall,
                    instant: start,
                };
                Box::pin(upgraded(*sw, rs, w, &shared, info, &head, target, at)).await;
                return None;
            }
            upgrade::Started::Reply(reply) => declined = Some(reply),
        }
    }
    let limits = BodyLimits {
        idle: shared.settings.timeouts.client_head,
        deadline: shared.settings.timeouts.client_body,
        min_rate: shared.settings.limits.client_body_min_rate,
    };
    let mut body = RequestBody::new(&mut rs, head.framing, limits);
    // What the replayable trace notes while the cache handles the request (`crate::trace`).
    let mut capture = None;
    let (target, reply) = match (resolved, declined) {
        (Err(refusal), _) => (None, *refusal),
        (Ok(target), Some(reply)) => (Some(target), *reply),
        (Ok(target), None) => {
            if head.expect_continue && !body.is_done() && w.send_continue().await.is_err() {
                return None;
            }
            // Boxed: the state machine's future is large, and an idle connection's task
            // should not carry its space between requests.
            let interim = InterimSlot::for_client(head.version);
            capture = shared.trace.capture();
            // The state machine's future is built straight into its box and only the box
            // is moved: moving the future itself (several KiB) cost a memmove per request.
            let handled = Box::pin(crate::trace::scope(capture.clone(), || {
                crate::cache::handle(&shared, &head, &target, info, &mut body, interim.as_ref())
            }));
            let reply = match &interim {
                Some(interim) => Box::pin(forward_interim(handled, interim, &mut w)).await,
                None => handled.await,
            };
            (Some(target), reply)
        }
    };
    let body_clean = body.is_done() || (!reply.close && body.drain(DRAIN_LIMIT).await);
    let gone_mid_body = body.client_gone();
    // Stopping: this reply is the connection's last (`Connection: close`).
    let keep_alive = head.keep_alive && !reply.close && body_clean && !shared.lifecycle.stopping();
    let outcome = reply.outcome;
    let status = reply.status;
    let peer = reply.peer.clone();
    // A cheap clone (shared bytes), not a new string.
    let content_type = reply.headers.get(http::header::CONTENT_TYPE).cloned();
    let before = w.sent;
    // Boxed like the state machine: an idle connection's task need not hold its space.
    let written = Box::pin(write_reply(
        &mut w,
        reply,
        &head.method,
        head.version,
        keep_alive,
    ))
    .await;
    let sent = w.sent - before;
    let elapsed = start.elapsed();
    exchange::record(
        &shared,
        Exchange {
            start: start_wall,
            elapsed,
            info,
            head: &head,
            target: target.as_ref(),
            outcome,
            status,
            written,
            gone_mid_body,
            sent,
            peer: peer.as_deref(),
            content_type: content_type.as_ref(),
            capture,
        },
    );
    if !keep_alive || !written.complete || written.must_close {
        if !body_clean && written.complete {
            // The client may still be sending the body we gave up on (a 408): closing
            // with its bytes unread would reset the connection and could destroy the
            // reply before it is read.
            lingering_close(&mut rs, &mut w).await;
        }
        return None;
    }
    Some(Conn {
        rs,
        w,
        info,
        shared,
        served,
    })
}

/// When a request began, for its log line.
struct Began {
    wall: SystemTime,
    instant: Instant,
}

/// An upgraded connection (`crate::upgrade`): the origin's 101 to the client, then bytes
/// both ways until either side closes or both are silent for `client_idle`; one log line.
#[allow(clippy::too_many_arguments)]
async fn upgraded(
    sw: upgrade::Switched,
    rs: ReadSide<ClientRead>,
    mut w: ClientWriter<ClientWrite>,
    shared: &Shared,
    info: ConnInfo,
    head: &RequestHead,
    target: &crate::cache::target::Target,
    began: Began,
) {
    use tokio::io::AsyncWriteExt;
    let upgrade::Switched { headers, io, peer } = sw;
    if w.send_interim(StatusCode::SWITCHING_PROTOCOLS, &headers)
        .await
        .is_err()
    {
        return;
    }
    let head_bytes = w.sent;
    let ClientWriter { io: wr, .. } = w;
    let ReadSide { io: rd, buf } = rs;
    let Some(client) = rd.reunite(wr) else { return };
    let mut origin = io;
    // Bytes the client sent after its request head belong to the new protocol.
    if !buf.is_empty() && origin.write_all(&buf).await.is_err() {
        return;
    }
    let relayed = tunnel::relay(client, origin, shared.settings.timeouts.client_idle).await;
    let bytes = head_bytes + relayed;
    let elapsed = began.instant.elapsed();
    shared.log.log(&LogRecord {
        start: began.wall,
        elapsed,
        client: info.peer.ip(),
        outcome: Outcome::Tunnel,
        status: 101,
        bytes,
        method: head.method.as_str(),
        url_host: "",
        url: &logged_url(info, std::borrow::Cow::Borrowed(target.key())),
        peer: Some(&peer),
        content_type: "-",
        aborted: false,
        protocol: crate::access_log::protocol(head.version),
    });
    shared.metrics.record(Outcome::Tunnel, elapsed, bytes);
}

/// Closes after an error response without losing it: a close with unread bytes in the
/// socket sends a reset, which can destroy the response before the client reads it. So stop
/// sending, then read and discard what the client still sends, briefly and boundedly.
async fn lingering_close(rs: &mut ReadSide<ClientRead>, w: &mut ClientWriter<ClientWrite>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = w.io.shutdown().await;
    let mut sink = vec![0u8; 4096];
    let mut left = 256 * 1024usize;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while left > 0 {
        match tokio::time::timeout_at(deadline, rs.io.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            _ => break,
        }
    }
}

/// Counts a connection open for exactly as long as its task lives, however it ends (even by
/// a panic), so the connection limit can't leak; and, given [`Freed`], tells the acceptor
/// when it ends.
pub(crate) struct OpenGuard(Arc<crate::metrics::Metrics>, Option<Arc<Freed>>);

impl OpenGuard {
    pub(crate) fn new(metrics: Arc<crate::metrics::Metrics>) -> OpenGuard {
        metrics.client_open.fetch_add(1, Ordering::Relaxed);
        OpenGuard(metrics, None)
    }

    /// Also notifies `freed` when the connection ends.
    pub(crate) fn freeing(mut self, freed: Arc<Freed>) -> OpenGuard {
        self.1 = Some(freed);
        self
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.client_open.fetch_sub(1, Ordering::Relaxed);
        if let Some(freed) = &self.1 {
            freed.notify();
        }
    }
}

#[cfg(test)]
mod tests {
    /// A forward proxy's shared state (no access log) and a plain connection's info from
    /// `a`.
    fn forward_proxy(
        a: std::net::SocketAddr,
    ) -> (std::sync::Arc<crate::state::Shared>, super::ConnInfo) {
        let settings = crate::settings::Settings {
            log: crate::settings::LogSettings {
                access: String::new(),
                ..Default::default()
            },
            ..Default::default()
        };
        let shared = std::sync::Arc::new(crate::state::Shared::new(settings, &[a]).unwrap());
        let info = super::ConnInfo {
            peer: a,
            mode: crate::settings::Mode::Forward,
            allowed: true,
            tls: false,
            http2: false,
        };
        (shared, info)
    }

    /// What an idle keep-alive connection costs is mostly this future (it is the task's
    /// whole state): a request's own state and the head reader are boxed per request, the
    /// wait for the next one is polled by hand. 400 bytes in a release build with rustc
    /// 1.95, so tokio's task (this plus ~100 bytes, in 128-byte steps) is 512; the bound is
    /// for debug builds and other compilers, and catches a request's state coming back.
    #[tokio::test]
    async fn idle_connection_task_stays_small() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        let s = tokio::net::TcpStream::connect(a).await.unwrap();
        let (shared, info) = forward_proxy(a);
        let f = super::serve(super::ClientStream::Plain(s), info, shared);
        assert!(
            std::mem::size_of_val(&f) <= 640,
            "{} bytes",
            std::mem::size_of_val(&f)
        );
    }

    /// Every request's future is built and moved into a box, a copy of its whole size per
    /// request (a cached hit once copied 15 KiB so): the state machine's rare, large awaits
    /// (the sends to the origin) are boxed, and the trace's scope holds the future once. The
    /// bound is loose (compilers differ); it catches either coming back.
    #[tokio::test]
    async fn request_future_stays_small() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        let s = tokio::net::TcpStream::connect(a).await.unwrap();
        let (shared, info) = forward_proxy(a);
        let mut raw = bytes::BytesMut::from(
            &b"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n"[..],
        );
        let head = super::head::parse(&mut raw, super::HeadLimits::default())
            .unwrap()
            .unwrap();
        let target = crate::cache::target::resolve(&shared, &head, info.mode).unwrap();
        let (rd, _wr) = super::ClientStream::Plain(s).split();
        let mut rs = super::ReadSide::new(rd);
        let limits = super::BodyLimits {
            idle: std::time::Duration::from_secs(1),
            deadline: std::time::Duration::from_secs(1),
            min_rate: 1,
        };
        let mut body = super::RequestBody::new(&mut rs, head.framing, limits);
        let f = crate::trace::scope(None, || {
            crate::cache::handle(&shared, &head, &target, info, &mut body, None)
        });
        let size = std::mem::size_of_val(&f);
        assert!(size <= 3072, "{size} bytes");
    }
}
