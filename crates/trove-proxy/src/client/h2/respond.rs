//! Writing a reply to an HTTP/2 stream ([`H2Sink`], a
//! [`ReplySink`](crate::client::respond::ReplySink)): HEADERS, then DATA only as flow
//! control grants capacity.
//!
//! Bounded memory per stream: a piece of body goes to h2 only once h2 granted room for it,
//! which is at most the stream's window and `max_send_buffer_size`; the next piece is taken
//! from the body (a shared stored body, an origin's pass-through, a disk record) only after
//! the last was handed over. A stream whose client never opens its window waits for
//! capacity at most `[timeouts] client_write` and is then reset; the connection's other
//! streams never wait on it. A body that fails midway is a reset stream, never an
//! END_STREAM: a torn body is never taken for a whole one.

use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, SendStream};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::client::respond::{no_body_status, InterimSink, ReplySink};
use crate::client::write::{disk_error, DiskSendError};

/// Most bytes read from a disk record at a time for a stream (no `sendfile` past framing).
const DISK_PIECE: u64 = 256 << 10;

pub struct H2Sink {
    respond: SendResponse<Bytes>,
    stream: Option<SendStream<Bytes>>,
    /// Longest wait for flow-control capacity.
    stall: Duration,
    /// Bytes sent: the head counted as its HTTP/1 length, so logs and byte hit ratios agree
    /// across protocols, and the body.
    pub sent: u64,
    /// END_STREAM was sent.
    pub ended: bool,
    /// The stream was reset for want of flow-control capacity.
    pub stalled: bool,
}

fn broken(e: h2::Error) -> std::io::Error {
    std::io::Error::other(e)
}

impl H2Sink {
    pub fn new(respond: SendResponse<Bytes>, stall: Duration) -> H2Sink {
        H2Sink {
            respond,
            stream: None,
            stall,
            sent: 0,
            ended: false,
            stalled: false,
        }
    }

    /// Sends a 1xx (100 Continue before a request body is read, 103 Early Hints from the
    /// origin).
    pub fn informational(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> std::io::Result<()> {
        let mut r = Response::new(());
        *r.status_mut() = status;
        *r.headers_mut() = headers.clone();
        trove_http::connection::strip_connection_fields(r.headers_mut());
        self.respond.send_informational(r).map_err(broken)
    }

    /// Ends the stream with `reason` (a reply that failed midway, or was never sent).
    pub fn reset(&mut self, reason: Reason) {
        match &mut self.stream {
            Some(s) => s.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
    }

    fn send_head(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        len: Option<u64>,
        end: bool,
    ) -> std::io::Result<()> {
        let mut r = Response::new(());
        *r.status_mut() = status;
        let h = r.headers_mut();
        h.reserve(headers.len() + wire.len() / 24 + 1);
        for (name, value) in headers {
            h.append(name.clone(), value.clone());
        }
        append_wire(h, wire);
        if let Some(n) = len.filter(|_| !no_body_status(status)) {
            h.insert(CONTENT_LENGTH, HeaderValue::from(n));
        }
        // h2 refuses a response carrying any of them (none should be left).
        trove_http::connection::strip_connection_fields(h);
        self.sent += http1_length(status, h);
        let stream = self.respond.send_response(r, end).map_err(broken)?;
        self.stream = Some(stream);
        self.ended = end;
        Ok(())
    }
}

/// Stored fields, pre-encoded as HTTP/1 lines (`name: value\r\n`, made by trove when the
/// response was stored), back into the map.
fn append_wire(h: &mut HeaderMap, wire: &[u8]) {
    for line in wire.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let value = &line[colon + 1..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(value),
        ) {
            h.append(n, v);
        }
    }
}

/// What the head would take as HTTP/1: the status line and each field line.
fn http1_length(status: StatusCode, h: &HeaderMap) -> u64 {
    let fields: usize = h.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    (fields + "HTTP/1.1 200 ".len() + status.canonical_reason().unwrap_or("").len() + 4) as u64
}

impl InterimSink for H2Sink {
    async fn send_interim(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> std::io::Result<()> {
        self.informational(status, headers)
    }
}

impl ReplySink for H2Sink {
    async fn head(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        len: Option<u64>,
        head_only: bool,
        first: Option<Bytes>,
    ) -> std::io::Result<()> {
        self.send_head(status, headers, wire, len, head_only)?;
        match first {
            Some(b) => self.data(b).await,
            None => Ok(()),
        }
    }

    async fn data(&mut self, mut b: Bytes) -> std::io::Result<()> {
        let stall = self.stall;
        let Some(s) = &mut self.stream else {
            return Err(std::io::Error::other("no stream"));
        };
        while !b.is_empty() {
            s.reserve_capacity(b.len());
            let mut n = s.capacity();
            if n == 0 {
                n = match tokio::time::timeout(
                    stall,
                    std::future::poll_fn(|cx| s.poll_capacity(cx)),
                )
                .await
                {
                    Ok(Some(Ok(n))) => n,
                    Ok(Some(Err(e))) => return Err(broken(e)),
                    Ok(None) => return Err(std::io::Error::other("stream closed")),
                    Err(_) => {
                        s.send_reset(Reason::CANCEL);
                        self.stalled = true;
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "client did not open its window in time",
                        ));
                    }
                };
                if n == 0 {
                    continue;
                }
            }
            let piece = b.split_to(n.min(b.len()));
            self.sent += piece.len() as u64;
            s.send_data(piece, false).map_err(broken)?;
        }
        Ok(())
    }

    async fn disk(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        body: &dyn trove_store::FileBody,
    ) -> Result<(), DiskSendError> {
        let len = body.len();
        self.send_head(status, headers, wire, Some(len), false)
            .map_err(DiskSendError::Io)?;
        // Read in pieces (as for TLS: no sendfile past framing); a record reused meanwhile
        // reads as an error, and the stream is reset by the caller.
        let mut at = 0;
        while at < len {
            let to = (at + DISK_PIECE).min(len);
            let piece = body.read(at, to).map_err(disk_error)?;
            self.data(piece).await.map_err(DiskSendError::Io)?;
            at = to;
        }
        Ok(())
    }

    async fn refuse(&mut self, status: StatusCode) -> std::io::Result<()> {
        self.send_head(status, &HeaderMap::new(), b"", Some(0), true)
    }

    async fn finish(&mut self) -> std::io::Result<()> {
        if self.ended {
            return Ok(());
        }
        let Some(s) = &mut self.stream else {
            return Err(std::io::Error::other("no stream"));
        };
        s.send_data(Bytes::new(), true).map_err(broken)?;
        self.ended = true;
        Ok(())
    }

    fn must_close(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_lines_come_back_as_fields() {
        let mut h = HeaderMap::new();
        append_wire(
            &mut h,
            b"server: nginx\r\netag: \"a:b\"\r\nx-empty: \r\nset-cookie: a=1\r\nset-cookie: b=2\r\n",
        );
        assert_eq!(h["server"], "nginx");
        assert_eq!(h["etag"], "\"a:b\"");
        assert_eq!(h["x-empty"], "");
        assert_eq!(h.get_all("set-cookie").iter().count(), 2);
    }
}
