//! Writing a [`Reply`] to the client, streaming its body from wherever it comes.

use std::future::Future;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Version};
use trove_store::{BodyError, BodyReader};

use crate::client::write::{ClientWriter, DiskSendError, OutFraming, Sink};
use crate::origin::{Forwarded, InterimSlot};
use crate::reply::{Reply, ReplyBody};

/// How writing went.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// The whole response reached the socket.
    pub complete: bool,
    /// The connection must close (framing by close, or a body that failed midway).
    pub must_close: bool,
    /// The status actually sent when it is not the reply's: a stored body that could not
    /// be read before its first byte is answered 502, and logged so (issue 19, defect 1).
    pub sent_status: Option<StatusCode>,
}

/// A status whose response never has a body.
pub fn no_body_status(status: StatusCode) -> bool {
    status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
}

/// Where interim (1xx) responses are written: an HTTP/1 connection (a status line and
/// fields), or an HTTP/2 stream (an informational HEADERS frame).
pub trait InterimSink: Send {
    fn send_interim(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> impl Future<Output = std::io::Result<()>> + Send;
}

impl<W: Sink + Send> InterimSink for ClientWriter<W> {
    fn send_interim(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> impl Future<Output = std::io::Result<()>> + Send {
        ClientWriter::send_interim(self, status, headers)
    }
}

/// Waits for `reply`, writing the origin's interim (1xx) responses to the client meanwhile,
/// in the order they came and all before the final response (hyper reports each one before
/// it hands over the final head). Once a write fails the rest are dropped; the reply's own
/// write then finds out what became of the client.
pub async fn forward_interim<S: InterimSink>(
    reply: impl Future<Output = Reply>,
    interim: &InterimSlot,
    w: &mut S,
) -> Reply {
    let mut reply = std::pin::pin!(reply);
    let mut open = true;
    loop {
        let (heads, done) = match interim.next(&mut reply).await {
            Forwarded::Heads(h) => (h, None),
            Forwarded::Done(r, h) => (h, Some(r)),
        };
        for h in heads {
            if !open {
                break;
            }
            open = w.send_interim(h.status, &h.headers).await.is_ok();
        }
        if let Some(r) = done {
            return r;
        }
    }
}

/// Where a reply is written: an HTTP/1 connection ([`Http1`]) or an HTTP/2 stream
/// (`client::h2::respond`). [`write_to`] streams every kind of body (stored, still
/// arriving, resumed, passed through, on disk) the same way to either; a sink only frames.
pub trait ReplySink: Send {
    /// Sends the head. `len` is the body's length when known; `head_only` means no body
    /// follows (HEAD, 204, 304, an empty reply), its length still advertised when known.
    /// `first` is the body's first bytes (or all of them), sent with the head.
    fn head(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        len: Option<u64>,
        head_only: bool,
        first: Option<Bytes>,
    ) -> impl Future<Output = std::io::Result<()>> + Send;
    /// More body bytes.
    fn data(&mut self, b: Bytes) -> impl Future<Output = std::io::Result<()>> + Send;
    /// The whole body from a lower tier's file, head included.
    fn disk(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        body: &dyn trove_store::FileBody,
    ) -> impl Future<Output = Result<(), DiskSendError>> + Send;
    /// A reply that could not be read before its first byte: `status` with no body, and
    /// the exchange ends there.
    fn refuse(&mut self, status: StatusCode) -> impl Future<Output = std::io::Result<()>> + Send;
    /// The body is complete.
    fn finish(&mut self) -> impl Future<Output = std::io::Result<()>> + Send;
    /// The connection must close after this reply, whole as it was (HTTP/1 framing by
    /// close).
    fn must_close(&self) -> bool;
}

/// An HTTP/1 client connection as a [`ReplySink`]: the framing is chosen at the head.
pub struct Http1<'a, W> {
    w: &'a mut ClientWriter<W>,
    version: Version,
    keep_alive: bool,
    framing: OutFraming,
}

impl<W: Sink + Send> ReplySink for Http1<'_, W> {
    async fn head(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        len: Option<u64>,
        head_only: bool,
        first: Option<Bytes>,
    ) -> std::io::Result<()> {
        self.framing = if head_only {
            OutFraming::NoBody {
                content_length: if no_body_status(status) { None } else { len },
            }
        } else {
            OutFraming::for_body(len, self.version)
        };
        self.w
            .send_head(
                status,
                headers,
                wire,
                self.framing,
                self.keep_alive,
                self.version,
                first,
            )
            .await
    }

    async fn data(&mut self, b: Bytes) -> std::io::Result<()> {
        self.w
            .send_body(b, self.framing == OutFraming::Chunked)
            .await
    }

    async fn disk(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        body: &dyn trove_store::FileBody,
    ) -> Result<(), DiskSendError> {
        self.framing = OutFraming::Length(body.len());
        self.w
            .send_disk(status, headers, wire, self.keep_alive, self.version, body)
            .await
    }

    async fn refuse(&mut self, status: StatusCode) -> std::io::Result<()> {
        self.w
            .send_head(
                status,
                &HeaderMap::new(),
                b"",
                OutFraming::Length(0),
                false,
                self.version,
                None,
            )
            .await
    }

    async fn finish(&mut self) -> std::io::Result<()> {
        if self.framing == OutFraming::Chunked {
            self.w.finish_chunked().await?;
        }
        Ok(())
    }

    fn must_close(&self) -> bool {
        self.framing == OutFraming::Close
    }
}

/// Writes `reply` for a request with `method` from an HTTP/1 client speaking `version`.
pub async fn write_reply<W: Sink + Send>(
    w: &mut ClientWriter<W>,
    reply: Reply,
    method: &Method,
    version: Version,
    keep_alive: bool,
) -> Written {
    let mut sink = Http1 {
        w,
        version,
        keep_alive,
        framing: OutFraming::Close,
    };
    write_to(&mut sink, reply, method).await
}

/// Writes `reply`, for a request with `method`, to `sink`.
pub async fn write_to<S: ReplySink>(sink: &mut S, reply: Reply, method: &Method) -> Written {
    let failed = Written {
        complete: false,
        must_close: true,
        sent_status: None,
    };
    let Reply {
        status,
        headers,
        wire,
        body,
        ..
    } = reply;
    let wire: &[u8] = wire.as_deref().unwrap_or(b"");
    // An empty reply is written like a HEAD answer: a head, its length advertised, no body.
    let head_only = *method == Method::HEAD
        || no_body_status(status)
        || matches!(body, ReplyBody::Empty { .. });
    let len = match &body {
        ReplyBody::Empty { content_length } => *content_length,
        ReplyBody::Bytes(b) => Some(b.len() as u64),
        ReplyBody::Stored { reader, end, .. } => end.map(|e| e.saturating_sub(reader.position())),
        ReplyBody::Origin(pass) => pass.resp.content_length(),
        ReplyBody::Disk(d) => Some(d.body.len()),
    };
    if head_only {
        let ok = sink
            .head(status, &headers, wire, len, true, None)
            .await
            .is_ok();
        return Written {
            complete: ok,
            must_close: !ok,
            sent_status: None,
        };
    }
    match body {
        // Written as head-only above.
        ReplyBody::Empty { .. } => failed,
        ReplyBody::Bytes(b) => {
            if sink
                .head(status, &headers, wire, len, false, Some(b))
                .await
                .is_err()
            {
                return failed;
            }
            finish(sink).await
        }
        ReplyBody::Stored {
            mut reader,
            end,
            mut detach,
        } => {
            // The first bytes go out with the head in one write.
            let mut resumed = None;
            let first = match next(&mut reader, end).await {
                Some(Ok(b)) => Some(b),
                None => None,
                Some(Err(e)) => {
                    // A reader detached before its first byte (the body left the store and
                    // moved on meanwhile) may still be resumed; else nothing was sent yet:
                    // answer 502.
                    let resp = match (e, detach.take()) {
                        (BodyError::Released, Some(d)) => d.resume(reader.position(), end).await,
                        _ => None,
                    };
                    if resp.is_none() {
                        let sent = sink.refuse(StatusCode::BAD_GATEWAY).await.is_ok();
                        return Written {
                            complete: sent,
                            must_close: true,
                            sent_status: Some(StatusCode::BAD_GATEWAY),
                        };
                    }
                    resumed = resp;
                    None
                }
            };
            if sink
                .head(status, &headers, wire, len, false, first)
                .await
                .is_err()
            {
                return failed;
            }
            while resumed.is_none() {
                match next(&mut reader, end).await {
                    None => break,
                    Some(Ok(b)) => {
                        if sink.data(b).await.is_err() {
                            return failed;
                        }
                    }
                    // Too far behind a body that left the store: on with a fetch of our
                    // own for the rest, or cut off (the client sees a short body).
                    Some(Err(BodyError::Released)) => match detach.take() {
                        Some(d) => match d.resume(reader.position(), end).await {
                            Some(resp) => resumed = Some(resp),
                            None => return failed,
                        },
                        None => return failed,
                    },
                    Some(Err(_)) => return failed,
                }
            }
            let mut pos = reader.position();
            if let Some(mut resp) = resumed {
                // The shared body must not wait for a reader that left it.
                drop(reader);
                loop {
                    match resp.next_chunk().await {
                        Ok(None) => break,
                        Ok(Some(mut b)) => {
                            if let Some(e) = end {
                                b.truncate(e.saturating_sub(pos) as usize);
                            }
                            pos += b.len() as u64;
                            if !b.is_empty() && sink.data(b).await.is_err() {
                                return failed;
                            }
                        }
                        Err(_) => return failed,
                    }
                }
            }
            if end.is_some_and(|e| pos < e) {
                // The body ended short of the length we announced: never let the client
                // take what follows for the rest of this body.
                return failed;
            }
            finish(sink).await
        }
        ReplyBody::Disk(d) => {
            use std::sync::atomic::Ordering::Relaxed;
            match sink.disk(status, &headers, wire, &*d.body).await {
                Ok(()) => {
                    d.metrics.sendfile_hits.fetch_add(1, Relaxed);
                    d.metrics.sendfile_bytes.fetch_add(d.body.len(), Relaxed);
                    finish(sink).await
                }
                Err(DiskSendError::Reused) => {
                    d.metrics.sendfile_aborted.fetch_add(1, Relaxed);
                    failed
                }
                Err(DiskSendError::Io(_)) => failed,
            }
        }
        ReplyBody::Origin(mut pass) => {
            if sink
                .head(status, &headers, wire, len, false, None)
                .await
                .is_err()
            {
                pass.abandon(0, 0);
                return failed;
            }
            let mut delivered = 0u64;
            loop {
                match pass.resp.next_chunk().await {
                    Ok(None) => break,
                    Ok(Some(b)) => {
                        let n = b.len() as u64;
                        if sink.data(b).await.is_err() {
                            pass.abandon(delivered, n);
                            return failed;
                        }
                        delivered += n;
                    }
                    Err(_) => return failed,
                }
            }
            finish(sink).await
        }
    }
}

/// The next bytes of a stored body, up to `end` if given.
async fn next(reader: &mut BodyReader, end: Option<u64>) -> Option<Result<Bytes, BodyError>> {
    match end {
        Some(e) => reader.next_until(e).await,
        None => reader.next().await,
    }
}

async fn finish<S: ReplySink>(sink: &mut S) -> Written {
    if sink.finish().await.is_err() {
        return Written {
            complete: false,
            must_close: true,
            sent_status: None,
        };
    }
    Written {
        complete: true,
        must_close: sink.must_close(),
        sent_status: None,
    }
}
