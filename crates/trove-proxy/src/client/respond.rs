//! Writing a [`Reply`] to the client, streaming its body from wherever it comes.

use bytes::Bytes;
use http::{Method, StatusCode, Version};
use tokio::io::AsyncWrite;
use trove_store::{BodyError, BodyReader};

use crate::client::write::{ClientWriter, DiskSendError, OutFraming, Sink};
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

fn no_body_status(status: StatusCode) -> bool {
    status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
}

/// Writes `reply` for a request with `method` from a client speaking `version`.
pub async fn write_reply<W: Sink>(
    w: &mut ClientWriter<W>,
    reply: Reply,
    method: &Method,
    version: Version,
    keep_alive: bool,
) -> Written {
    write_inner(w, reply, method, version, keep_alive).await
}

async fn write_inner<W: Sink>(
    w: &mut ClientWriter<W>,
    reply: Reply,
    method: &Method,
    version: Version,
    keep_alive: bool,
) -> Written {
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
        let framing = OutFraming::NoBody {
            content_length: if no_body_status(status) { None } else { len },
        };
        let ok = w
            .send_head(status, &headers, wire, framing, keep_alive, version, None)
            .await
            .is_ok();
        return Written {
            complete: ok,
            must_close: !ok,
            sent_status: None,
        };
    }
    let framing = OutFraming::for_body(len, version);
    let chunked = framing == OutFraming::Chunked;
    let must_close = framing == OutFraming::Close;
    match body {
        // Written as head-only above.
        ReplyBody::Empty { .. } => failed,
        ReplyBody::Bytes(b) => {
            let ok = w
                .send_head(
                    status,
                    &headers,
                    wire,
                    framing,
                    keep_alive,
                    version,
                    Some(b),
                )
                .await
                .is_ok();
            Written {
                complete: ok,
                must_close: must_close || !ok,
                sent_status: None,
            }
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
                        let sent = w
                            .send_head(
                                StatusCode::BAD_GATEWAY,
                                &http::HeaderMap::new(),
                                b"",
                                OutFraming::Length(0),
                                false,
                                version,
                                None,
                            )
                            .await
                            .is_ok();
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
            if w.send_head(status, &headers, wire, framing, keep_alive, version, first)
                .await
                .is_err()
            {
                return failed;
            }
            while resumed.is_none() {
                match next(&mut reader, end).await {
                    None => break,
                    Some(Ok(b)) => {
                        if w.send_body(b, chunked).await.is_err() {
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
                            if !b.is_empty() && w.send_body(b, chunked).await.is_err() {
                                return failed;
                            }
                        }
                        Err(_) => return failed,
                    }
                }
            }
            if end.is_some_and(|e| pos < e) {
                // The body ended short of the length we announced: never let the client
                // take what follows on the connection for the rest of this body.
                return failed;
            }
            finish(w, chunked, must_close).await
        }
        ReplyBody::Disk(d) => {
            use std::sync::atomic::Ordering::Relaxed;
            match w
                .send_disk(status, &headers, wire, keep_alive, version, &*d.body)
                .await
            {
                Ok(()) => {
                    d.metrics.sendfile_hits.fetch_add(1, Relaxed);
                    d.metrics.sendfile_bytes.fetch_add(d.body.len(), Relaxed);
                    finish(w, false, must_close).await
                }
                Err(DiskSendError::Reused) => {
                    d.metrics.sendfile_aborted.fetch_add(1, Relaxed);
                    failed
                }
                Err(DiskSendError::Io(_)) => failed,
            }
        }
        ReplyBody::Origin(mut pass) => {
            if w.send_head(status, &headers, wire, framing, keep_alive, version, None)
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
                        if w.send_body(b, chunked).await.is_err() {
                            pass.abandon(delivered, n);
                            return failed;
                        }
                        delivered += n;
                    }
                    Err(_) => return failed,
                }
            }
            finish(w, chunked, must_close).await
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

async fn finish<W: AsyncWrite + Unpin>(
    w: &mut ClientWriter<W>,
    chunked: bool,
    must_close: bool,
) -> Written {
    if chunked && w.finish_chunked().await.is_err() {
        return Written {
            complete: false,
            must_close: true,
            sent_status: None,
        };
    }
    Written {
        complete: true,
        must_close,
        sent_status: None,
    }
}
