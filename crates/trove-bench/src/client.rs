//! The load generator's HTTP/1.1 client: one persistent connection, one request at a time.
//!
//! A load generator spends its core on the client side of every exchange, so this side has to
//! cost less than the servers it measures. hyper's client connection (used here before) runs
//! each connection as a task of its own behind a channel, builds a `HeaderMap` for every
//! request and every response, and hands bodies over frame by frame: about five times the
//! instructions per request that wrk spends. This client does what wrk does instead: the
//! caller writes the request head into a reused buffer, one `write` sends it, responses are
//! read into a reused per-connection buffer, and the head is parsed in place with `httparse`
//! (hyper's own parser), keeping only what the robots judge by: the status, the framing
//! (Content-Length, chunked, close-delimited), `Connection: close`, and one header's value
//! copied out on request (the server's stamp). Bodies are passed to a callback slice by
//! slice, straight from the read buffer, so the robots verify every byte without a copy.
//!
//! It sends only GET, so every response has a body but 1xx, 204 and 304 ones (RFC 9112 §6.3).

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read buffer size: a 1 KiB response and its head arrive in one read; larger bodies stream.
const BUF: usize = 16 * 1024;
/// The largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Response header fields parsed at most.
const MAX_HEADERS: usize = 64;

/// Why an exchange failed.
#[derive(Debug)]
pub enum Error {
    /// The connection ended (EOF or reset) before the first byte of the response: on a reused
    /// connection, the server had closed it while idle, and the request may be retried.
    ClosedEarly,
    /// The connection failed, or ended mid-response.
    Io,
    /// The response was not HTTP/1.x as RFC 9112 frames it.
    Parse,
    /// The body callback rejected a piece of the body.
    Rejected,
}

/// What the caller learns of a response's head.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Status code (the final one: 1xx interim responses are skipped).
    pub status: u16,
    /// Content-Length, if the response had one.
    pub content_length: Option<u64>,
    /// The server will close the connection after this response (`Connection: close`, an
    /// HTTP/1.0 response without keep-alive, or a close-delimited body).
    pub close: bool,
}

enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

/// One client connection.
pub struct Conn {
    stream: TcpStream,
    buf: Box<[u8]>,
    /// Unparsed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// The connection may not be used again.
    done: bool,
}

impl Conn {
    /// Connects (TCP_NODELAY, as every HTTP client sets it).
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: vec![0; BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            done: false,
        })
    }

    /// Whether the connection can carry another request.
    pub fn reusable(&self) -> bool {
        !self.done
    }

    /// Sends `request` (a complete GET request head) and reads one response. Body bytes are
    /// handed to `body` in order; when `capture` names a header (lower case), its value is
    /// copied into `captured` (left empty if the response has none).
    pub async fn exchange(
        &mut self,
        request: &[u8],
        capture: Option<&str>,
        captured: &mut Vec<u8>,
        mut body: impl FnMut(&[u8]) -> Result<(), ()>,
    ) -> Result<(Head, u64), Error> {
        if self.done {
            return Err(Error::ClosedEarly);
        }
        // Whatever happens below but a clean end leaves the connection unusable.
        self.done = true;
        if self.stream.write_all(request).await.is_err() {
            return Err(Error::ClosedEarly);
        }
        captured.clear();
        let mut first = true;
        let (head, framing) = loop {
            let parsed = self.parse_head(capture, captured)?;
            match parsed {
                Some((head, _)) if (100..200).contains(&head.status) && head.status != 101 => {
                    first = false;
                    continue;
                }
                Some(v) => break v,
                None => {
                    // An end or a reset before the response's first byte: closed early.
                    let read = self.fill().await;
                    if matches!(read, Ok(0) | Err(Error::Io)) {
                        return Err(if first && self.start == self.end {
                            Error::ClosedEarly
                        } else {
                            Error::Io
                        });
                    }
                    read?;
                    first = false;
                }
            }
        };
        let mut got = 0u64;
        let mut close = head.close;
        match framing {
            Framing::Length(mut left) => {
                while left > 0 {
                    if self.start == self.end && self.fill().await? == 0 {
                        return Err(Error::Io);
                    }
                    let n =
                        (self.end - self.start).min(usize::try_from(left).unwrap_or(usize::MAX));
                    body(&self.buf[self.start..self.start + n]).map_err(|()| Error::Rejected)?;
                    self.start += n;
                    left -= n as u64;
                    got += n as u64;
                }
            }
            Framing::Chunked => got = self.chunked(&mut body).await?,
            Framing::UntilClose => {
                close = true;
                loop {
                    if self.start < self.end {
                        body(&self.buf[self.start..self.end]).map_err(|()| Error::Rejected)?;
                        got += (self.end - self.start) as u64;
                        self.start = self.end;
                    }
                    if self.fill().await? == 0 {
                        break;
                    }
                }
            }
        }
        self.done = close;
        Ok((Head { close, ..head }, got))
    }

    /// Reads more into the buffer (compacting or growing it first); 0 at EOF.
    async fn fill(&mut self) -> Result<usize, Error> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < MAX_HEAD {
                let mut bigger = vec![0; self.buf.len() * 2].into_boxed_slice();
                bigger[..self.end].copy_from_slice(&self.buf[..self.end]);
                self.buf = bigger;
            } else {
                return Err(Error::Parse);
            }
        }
        match self.stream.read(&mut self.buf[self.end..]).await {
            Ok(n) => {
                self.end += n;
                Ok(n)
            }
            Err(_) => Err(Error::Io),
        }
    }

    /// Parses a response head at `start`, if a whole one is buffered, and consumes it.
    fn parse_head(
        &mut self,
        capture: Option<&str>,
        captured: &mut Vec<u8>,
    ) -> Result<Option<(Head, Framing)>, Error> {
        if self.start == self.end {
            return Ok(None);
        }
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut fields);
        let len = match resp.parse(&self.buf[self.start..self.end]) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(Error::Parse),
        };
        let status = resp.code.ok_or(Error::Parse)?;
        let mut content_length = None;
        let mut chunked = false;
        // HTTP/1.0 closes unless asked to keep alive; HTTP/1.1 keeps alive unless told.
        let mut close = resp.version != Some(1);
        for f in resp.headers.iter() {
            let v = f.value;
            if f.name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or(Error::Parse)?;
                if content_length.is_some_and(|c| c != n) {
                    return Err(Error::Parse);
                }
                content_length = Some(n);
            } else if f.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = last_token(v).eq_ignore_ascii_case(b"chunked");
            } else if f.name.eq_ignore_ascii_case("connection") {
                for token in v.split(|&b| b == b',') {
                    let t = token.trim_ascii();
                    if t.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") {
                        close = false;
                    }
                }
            } else if capture.is_some_and(|c| f.name.eq_ignore_ascii_case(c)) {
                captured.clear();
                captured.extend_from_slice(v);
            }
        }
        self.start += len;
        let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
            Framing::Length(0)
        } else if chunked {
            Framing::Chunked
        } else if let Some(n) = content_length {
            Framing::Length(n)
        } else {
            Framing::UntilClose
        };
        let head = Head {
            status,
            content_length,
            close,
        };
        Ok(Some((head, framing)))
    }

    /// Reads a chunked body (RFC 9112 §7.1), trailers included; returns the body length.
    async fn chunked(
        &mut self,
        body: &mut impl FnMut(&[u8]) -> Result<(), ()>,
    ) -> Result<u64, Error> {
        let mut got = 0u64;
        loop {
            let size = loop {
                match httparse::parse_chunk_size(&self.buf[self.start..self.end]) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        self.start += used;
                        break size;
                    }
                    Ok(httparse::Status::Partial) => {
                        if self.fill().await? == 0 {
                            return Err(Error::Io);
                        }
                    }
                    Err(_) => return Err(Error::Parse),
                }
            };
            if size == 0 {
                // Trailer fields, then the empty line.
                loop {
                    let line = self.buf[self.start..self.end]
                        .windows(2)
                        .position(|w| w == b"\r\n");
                    match line {
                        Some(0) => {
                            self.start += 2;
                            return Ok(got);
                        }
                        Some(i) => self.start += i + 2,
                        None => {
                            if self.fill().await? == 0 {
                                return Err(Error::Io);
                            }
                        }
                    }
                }
            }
            let mut left = size;
            while left > 0 {
                if self.start == self.end && self.fill().await? == 0 {
                    return Err(Error::Io);
                }
                let n = (self.end - self.start).min(usize::try_from(left).unwrap_or(usize::MAX));
                body(&self.buf[self.start..self.start + n]).map_err(|()| Error::Rejected)?;
                self.start += n;
                left -= n as u64;
                got += n as u64;
            }
            while self.end - self.start < 2 {
                if self.fill().await? == 0 {
                    return Err(Error::Io);
                }
            }
            if &self.buf[self.start..self.start + 2] != b"\r\n" {
                return Err(Error::Parse);
            }
            self.start += 2;
        }
    }
}

fn last_token(v: &[u8]) -> &[u8] {
    v.rsplit(|&b| b == b',').next().unwrap_or(v).trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Serves `responses` in turn on one connection (each after reading one request head),
    /// written in pieces of `piece` bytes, then closes.
    async fn server(responses: Vec<&'static [u8]>, piece: usize) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            for r in responses {
                let mut seen = Vec::new();
                let mut b = [0u8; 1024];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut b).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&b[..n]);
                }
                for p in r.chunks(piece) {
                    s.write_all(p).await.unwrap();
                    s.flush().await.unwrap();
                    tokio::task::yield_now().await;
                }
            }
        });
        addr
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    async fn one(c: &mut Conn) -> Result<(Head, Vec<u8>, Vec<u8>), Error> {
        let mut body = Vec::new();
        let mut cap = Vec::new();
        let (h, n) = c
            .exchange(GET, Some("x-stamp"), &mut cap, |d| {
                body.extend_from_slice(d);
                Ok(())
            })
            .await?;
        assert_eq!(n as usize, body.len());
        Ok((h, body, cap))
    }

    #[tokio::test]
    async fn frames_length_chunked_interim_and_close_delimited_bodies() {
        for piece in [1, 7, 4096] {
            let addr = server(
                vec![
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Stamp: a-1\r\n\r\nhello",
                    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: v\r\n\r\n",
                    b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
                    b"HTTP/1.1 404 Not Found\r\nConnection: keep-alive, close\r\n\r\nrest",
                ],
                piece,
            )
            .await;
            let mut c = Conn::connect(addr).await.unwrap();
            let (h, body, cap) = one(&mut c).await.unwrap();
            assert_eq!((h.status, h.content_length, h.close), (200, Some(5), false));
            assert_eq!((&body[..], &cap[..]), (&b"hello"[..], &b"a-1"[..]));
            let (h, body, cap) = one(&mut c).await.unwrap();
            assert_eq!((h.status, &body[..], cap.len()), (200, &b"abcde"[..], 0));
            let (h, body, _) = one(&mut c).await.unwrap();
            assert_eq!((h.status, body.len()), (304, 0));
            assert!(c.reusable());
            let (h, body, _) = one(&mut c).await.unwrap();
            assert_eq!((h.status, &body[..], h.close), (404, &b"rest"[..], true));
            assert!(!c.reusable());
        }
    }

    #[tokio::test]
    async fn a_connection_closed_before_any_answer_is_told_from_a_cut_one() {
        let addr = server(vec![], 1).await;
        let mut c = Conn::connect(addr).await.unwrap();
        assert!(matches!(one(&mut c).await, Err(Error::ClosedEarly)));
        let addr = server(
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"],
            3,
        )
        .await;
        let mut c = Conn::connect(addr).await.unwrap();
        assert!(matches!(one(&mut c).await, Err(Error::Io)));
        let addr = server(vec![b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"], 64).await;
        let mut c = Conn::connect(addr).await.unwrap();
        assert!(matches!(one(&mut c).await, Err(Error::Parse)));
    }
}
