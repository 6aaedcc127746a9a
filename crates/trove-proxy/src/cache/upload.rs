//! A request body sent up to the origin (a pass): held whole when small, streamed within
//! the origin's upload slots when large.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{Method, StatusCode};
use trove_cache::{Conditionals, Outcome};

use super::fetch::{self, Outgoing, Retry};
use super::Ctx;
use crate::client::body::{BodyReadError, ClientBody};
use crate::origin::{
    body_channel, Failed, InterimSlot, OriginError, OriginRequestBody, OriginResponse,
};
use crate::reply::Reply;

/// Sends a request the cache does not answer (unsafe or uncacheable methods) on with its
/// body: the flow's `Send` with a body. Returns the origin's answer and whether the client's
/// body was left unfinished (the connection must then close), or a reply made already (the
/// client's body failed, or the upload was shed).
///
/// A body up to `[limits] client_body_buffer` is read whole before an origin connection is
/// taken, so a client trickling it holds nothing but its own connection until it is cut off
/// (`client::body`'s deadline). A larger body streams up as it arrives, which holds an
/// origin connection for as long as the client takes: it needs one of the origin's upload
/// slots first (`[origin_pool] max_uploads_per_origin`), so uploads can never take every
/// connection from the misses. Buffering every body instead (nginx spools them to disk)
/// would need memory or a disk per upload; streaming every body would let slow uploads
/// starve the origin; this bounds both.
pub(super) async fn send<B: ClientBody>(
    cx: &Ctx<'_>,
    body: &mut B,
) -> Result<(Result<OriginResponse, Failed>, bool), Reply> {
    let cap = cx.shared.settings.limits.client_body_buffer;
    // Read up to `cap` bytes, unless the declared length is already more.
    let mut held: Vec<Bytes> = Vec::new();
    let mut held_len = 0u64;
    let declared = body.declared_len();
    let whole = match declared {
        Some(n) if n > cap => false,
        _ => loop {
            match body.next().await {
                Ok(Some(b)) => {
                    held_len += b.len() as u64;
                    held.push(b);
                    if held_len > cap {
                        break false;
                    }
                }
                Ok(None) => break true,
                Err(e) => return Err(body_failed(cx, e)),
            }
        },
    };
    let mut slot = None;
    let (mut tx, origin_body) = if whole {
        (
            None,
            OriginRequestBody::full(join(std::mem::take(&mut held))),
        )
    } else {
        let first = cx.target.upstreams.iter().next();
        match first {
            Some(up) => match cx.shared.pool.upload_slot(up).await {
                Ok(s) => slot = Some(s),
                // Shed (TCP_SHED, counted when the reply is recorded).
                Err(e) => return Ok((Err(e.into()), true)),
            },
            None => return Ok((Err(OriginError::Protocol("no upstream").into()), false)),
        }
        let (tx, b) = body_channel(declared);
        (Some(tx), b)
    };
    let idempotent = matches!(
        cx.req.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    );
    let send = fetch::send(
        cx.shared,
        Outgoing {
            req: cx.req,
            target: cx.target,
            mode: cx.mode,
            client: cx.client,
            reach: &cx.reach,
            conditionals: Conditionals::Keep,
            extra: None,
            body: origin_body,
            retry: if idempotent && held_len == 0 && tx.is_none() {
                Retry::Allowed
            } else {
                Retry::No
            },
            interim: cx.interim.map(InterimSlot::queue),
            absolute_form: false,
        },
    );
    // The pump owns its own sender and drops it when the body ends, which ends the body
    // sent to the origin; `tx` stays here to abort that body if the client's fails. It
    // holds the upload slot until the whole body has gone up.
    let pump_tx = tx.clone();
    let pump = async move {
        let _slot = slot;
        let Some(pump_tx) = pump_tx else {
            return Ok(());
        };
        for b in held {
            if pump_tx.send(Ok(b)).await.is_err() {
                return Ok(());
            }
        }
        loop {
            match body.next().await {
                Ok(Some(b)) => {
                    if pump_tx.send(Ok(b)).await.is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => {
                    drop(pump_tx);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    };
    tokio::pin!(send);
    tokio::pin!(pump);
    // The origin may answer (or fail) before the client has sent the whole body: then stop
    // reading the client rather than wait on it.
    let mut pumped = None;
    let resp = loop {
        tokio::select! {
            r = &mut send => break r,
            p = &mut pump, if pumped.is_none() => {
                match p {
                    Err(e) => {
                        if let Some(tx) = &tx {
                            let _ = tx.try_send(Err(std::io::Error::other(e)));
                        }
                    }
                    // The whole body is on its way: let the channel close.
                    Ok(()) => drop(tx.take()),
                }
                pumped = Some(p);
            }
        }
    };
    if let Some(Err(e)) = pumped {
        return Err(body_failed(cx, e));
    }
    let unfinished = pumped.is_none() && tx.is_some();
    if unfinished {
        // Make sure the origin never takes a cut-short body for a complete one.
        if let Some(tx) = &tx {
            let _ = tx.try_send(Err(std::io::Error::other("client body abandoned")));
        }
    }
    Ok((resp, unfinished))
}

/// The pieces of a body as one buffer (no copy for a body that came in one piece).
fn join(mut pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() <= 1 {
        return pieces.pop().unwrap_or_default();
    }
    let mut all = bytes::BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for p in &pieces {
        all.extend_from_slice(p);
    }
    all.freeze()
}

/// The client's request body could not be read: too slow (408) or malformed (400). The
/// connection closes, since the rest of the body can't be told from a next request.
fn body_failed(cx: &Ctx<'_>, e: BodyReadError) -> Reply {
    let status = e.status();
    // A client that went away mid-body sent nothing malformed: its request was a miss the
    // client abandoned (logged `TCP_MISS_ABORTED`, counted with the aborts by the
    // connection, which knows it went away).
    if matches!(e, BodyReadError::Closed | BodyReadError::Io) {
        return Reply::simple(status, Outcome::Miss, &e.to_string()).closing();
    }
    let counter = if status == StatusCode::REQUEST_TIMEOUT {
        &cx.shared.metrics.body_timeouts
    } else {
        &cx.shared.metrics.bad_requests
    };
    counter.fetch_add(1, Ordering::Relaxed);
    Reply::simple(status, Outcome::None, &e.to_string()).closing()
}
