//! A request body carried by DATA frames, read under the same deadline as an HTTP/1 body
//! (`client::body`): flow-control capacity is given back only as bytes are handed on, so
//! a stream holds at most its receive window however slowly its body is sent up.

use bytes::Bytes;
use h2::RecvStream;
use tokio::time::Instant;

use crate::client::body::{BodyLimits, BodyReadError, ClientBody};

pub struct H2Body {
    recv: RecvStream,
    /// The length `content-length` declared (h2 holds the stream to it).
    declared: Option<u64>,
    limits: BodyLimits,
    start: Option<Instant>,
    received: u64,
    done: bool,
    gone: bool,
}

impl H2Body {
    pub fn new(recv: RecvStream, declared: Option<u64>, limits: BodyLimits) -> H2Body {
        let done = recv.is_end_stream();
        H2Body {
            recv,
            declared: if done { Some(0) } else { declared },
            limits,
            start: None,
            received: 0,
            done,
            gone: false,
        }
    }

    /// The client reset the stream (or the connection failed) before the whole body came.
    pub fn client_gone(&self) -> bool {
        self.gone
    }
}

impl ClientBody for H2Body {
    fn declared_len(&self) -> Option<u64> {
        if self.received == 0 {
            self.declared
        } else {
            None
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    async fn next(&mut self) -> Result<Option<Bytes>, BodyReadError> {
        loop {
            if self.done {
                return Ok(None);
            }
            let start = *self.start.get_or_insert_with(Instant::now);
            let (wait, deadline) = self.limits.next_wait(start, self.received);
            match tokio::time::timeout(wait, self.recv.data()).await {
                Err(_) if Instant::now() >= deadline => return Err(BodyReadError::TooSlow),
                Err(_) => return Err(BodyReadError::TimedOut),
                Ok(None) => {
                    self.done = true;
                    return Ok(None);
                }
                Ok(Some(Err(_))) => {
                    self.gone = true;
                    return Err(BodyReadError::Closed);
                }
                Ok(Some(Ok(b))) => {
                    let _ = self.recv.flow_control().release_capacity(b.len());
                    self.received += b.len() as u64;
                    self.done = self.recv.is_end_stream();
                    if !b.is_empty() {
                        return Ok(Some(b));
                    }
                }
            }
        }
    }
}
