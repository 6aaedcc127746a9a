//! A minimal raw HTTP/2 client for the attack tests (`tests/http2_attacks.rs`): the preface
//! and SETTINGS, frames written as 9-byte headers and payloads, frames read back, and a tiny
//! HPACK encoder (static-table indexes, literals without Huffman, literals with incremental
//! indexing). It decodes no more of a response than the tests need: the `:status` of a
//! HEADERS frame whose block starts with it.
//!
//! Frames are read on a task of their own, so a flood's writes never wait on the test
//! reading; a test looks at what came back through [`Raw::next`].

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const PRIORITY: u8 = 2;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

pub const NO_ERROR: u32 = 0;
pub const PROTOCOL_ERROR: u32 = 1;
pub const CANCEL: u32 = 8;
pub const REFUSED_STREAM: u32 = 7;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// SETTINGS_INITIAL_WINDOW_SIZE.
pub const INITIAL_WINDOW_SIZE: u16 = 4;

/// One frame as read.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    pub fn code(&self) -> Option<u32> {
        let at = match self.kind {
            RST_STREAM => 0,
            GOAWAY => 4,
            _ => return None,
        };
        self.payload
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A HEADERS frame's `:status`, when its block starts with it (h2 puts it first).
    pub fn status(&self) -> Option<u16> {
        if self.kind != HEADERS {
            return None;
        }
        let block = &self.payload[..];
        let first = *block.first()?;
        // Indexed field from the static table (RFC 7541 Appendix A, 8-14).
        let statik = [200, 204, 206, 304, 400, 404, 500];
        if first & 0x80 != 0 {
            let i = (first & 0x7f) as usize;
            return (8..=14).contains(&i).then(|| statik[i - 8]);
        }
        // Literal with name index 8 (`:status`), with or without indexing.
        if first != 0x08 && first != 0x48 && first != 0x18 {
            return None;
        }
        let len_byte = *block.get(1)?;
        let len = (len_byte & 0x7f) as usize;
        let value = block.get(2..2 + len)?;
        let digits = if len_byte & 0x80 != 0 {
            huffman_digits(value)?
        } else {
            value.to_vec()
        };
        std::str::from_utf8(&digits).ok()?.parse().ok()
    }
}

/// Decodes a Huffman-coded string of ASCII digits (RFC 7541 Appendix B: '0'-'2' are 5 bits,
/// 00000-00010; '3'-'9' are 6 bits, 011001-011111).
fn huffman_digits(src: &[u8]) -> Option<Vec<u8>> {
    let bits: Vec<u8> = src
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    let take = |at: usize, n: usize| -> Option<u8> {
        bits.get(at..at + n)
            .map(|s| s.iter().fold(0u8, |a, b| a << 1 | b))
    };
    let mut out = Vec::new();
    let mut at = 0;
    while bits.len() - at >= 5 {
        let five = take(at, 5)?;
        if five <= 2 {
            out.push(b'0' + five);
            at += 5;
        } else if let Some(six @ 0x19..=0x1f) = take(at, 6) {
            out.push(b'3' + (six - 0x19));
            at += 6;
        } else {
            break; // padding (all ones)
        }
    }
    Some(out)
}

/// How a connection ended, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    GoAway {
        last: u32,
        code: u32,
    },
    /// Closed (or reset) without a GOAWAY.
    Closed,
    TimedOut,
}

/// A raw HTTP/2 connection.
pub struct Raw {
    w: OwnedWriteHalf,
    frames: mpsc::UnboundedReceiver<Frame>,
    /// The write side failed (the server closed).
    pub broken: bool,
    /// Frames [`Raw::until_goaway`] read past, by type (types over 9 in the last slot).
    pub seen: [usize; 11],
}

impl Raw {
    /// Connects, sends the preface and `settings` (id, value), ACKs the server's SETTINGS
    /// (so the limits it announced are in force: h2 applies them on our ACK).
    pub async fn connect(addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (mut r, w) = tcp.into_split();
        let (tx, frames) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut head = [0u8; 9];
            loop {
                if r.read_exact(&mut head).await.is_err() {
                    return;
                }
                let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                let mut payload = vec![0u8; len];
                if r.read_exact(&mut payload).await.is_err() {
                    return;
                }
                let f = Frame {
                    kind: head[3],
                    flags: head[4],
                    stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
                    payload,
                };
                if tx.send(f).is_err() {
                    return;
                }
            }
        });
        let mut raw = Raw {
            w,
            frames,
            broken: false,
            seen: [0; 11],
        };
        let mut out = PREFACE.to_vec();
        out.extend(frame(SETTINGS, 0, 0, &settings_payload(settings)));
        raw.send(&out).await;
        loop {
            let f = raw
                .next(Duration::from_secs(5))
                .await
                .expect("the server's SETTINGS");
            if f.kind == SETTINGS && f.flags & ACK == 0 {
                break;
            }
        }
        raw.send(&frame(SETTINGS, ACK, 0, &[])).await;
        raw
    }

    /// Writes `bytes`; false (and `broken`) once the server has closed.
    pub async fn send(&mut self, bytes: &[u8]) -> bool {
        if self.broken {
            return false;
        }
        let ok = tokio::time::timeout(Duration::from_secs(5), self.w.write_all(bytes))
            .await
            .is_ok_and(|r| r.is_ok());
        self.broken = !ok;
        ok
    }

    /// The next frame read, or None once closed or after `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Frame> {
        tokio::time::timeout(wait, self.frames.recv())
            .await
            .ok()
            .flatten()
    }

    /// Frames already read, without waiting.
    pub fn drain(&mut self) -> Vec<Frame> {
        let mut v = Vec::new();
        while let Ok(f) = self.frames.try_recv() {
            v.push(f);
        }
        v
    }

    /// Reads until GOAWAY, the end of the connection, or `wait`.
    pub async fn until_goaway(&mut self, wait: Duration) -> End {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.frames.recv()).await {
                Err(_) => return End::TimedOut,
                Ok(None) => return End::Closed,
                Ok(Some(f)) if f.kind == GOAWAY && f.payload.len() >= 8 => {
                    self.seen[GOAWAY as usize] += 1;
                    let p = &f.payload;
                    return End::GoAway {
                        last: u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff,
                        code: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
                    };
                }
                Ok(Some(f)) => self.seen[usize::from(f.kind.min(10))] += 1,
            }
        }
    }

    /// Reads until a frame on `stream` that `done` accepts (collecting the stream's frames),
    /// or `wait`.
    pub async fn until_stream(
        &mut self,
        stream: u32,
        wait: Duration,
        mut done: impl FnMut(&Frame) -> bool,
    ) -> Vec<Frame> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut got = Vec::new();
        while let Ok(Some(f)) = tokio::time::timeout_at(deadline, self.frames.recv()).await {
            if f.stream == stream {
                let end = done(&f);
                got.push(f);
                if end {
                    break;
                }
            }
        }
        got
    }
}

/// One frame: the 9-byte header and `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

pub fn settings_payload(settings: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in settings {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    p
}

pub fn rst_stream(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

pub fn window_update(stream: u32, n: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &n.to_be_bytes())
}

pub fn ping(data: u64) -> Vec<u8> {
    frame(PING, 0, 0, &data.to_be_bytes())
}

/// A header block in HEADERS then CONTINUATION frames of at most 16 KiB each.
pub fn headers(stream: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let pieces: Vec<&[u8]> = if block.is_empty() {
        vec![block]
    } else {
        block.chunks(16 << 10).collect()
    };
    for (i, piece) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        let mut flags = if last { END_HEADERS } else { 0 };
        let kind = if i == 0 {
            if end_stream {
                flags |= END_STREAM;
            }
            HEADERS
        } else {
            CONTINUATION
        };
        out.extend(frame(kind, flags, stream, piece));
    }
    out
}

/// HPACK integer with an `n`-bit prefix whose high bits are `mask` (RFC 7541 §5.1).
fn int(out: &mut Vec<u8>, mask: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(mask | v as u8);
        return;
    }
    out.push(mask | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A string literal without Huffman coding.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A tiny HPACK encoder.
#[derive(Default)]
pub struct Block(pub Vec<u8>);

impl Block {
    /// `:method`, `:scheme http`, `:path`, `:authority`.
    pub fn request(method: &str, path: &str, authority: &str) -> Block {
        let mut b = Block::default();
        match method {
            "GET" => b.indexed(2),
            "POST" => b.indexed(3),
            m => b.literal_name_index(2, m.as_bytes()),
        };
        b.indexed(6);
        b.literal_name_index(4, path.as_bytes());
        b.literal_name_index(1, authority.as_bytes());
        b
    }

    /// An indexed field (static 1-61, dynamic from 62).
    pub fn indexed(&mut self, i: usize) -> &mut Block {
        int(&mut self.0, 0x80, 7, i);
        self
    }

    /// A literal without indexing whose name is static-table index `i`.
    pub fn literal_name_index(&mut self, i: usize, value: &[u8]) -> &mut Block {
        int(&mut self.0, 0x00, 4, i);
        string(&mut self.0, value);
        self
    }

    /// A literal without indexing, new name.
    pub fn literal(&mut self, name: &[u8], value: &[u8]) -> &mut Block {
        self.0.push(0x00);
        string(&mut self.0, name);
        string(&mut self.0, value);
        self
    }

    /// The start of a literal without indexing, new name, whose value is said to be `len`
    /// bytes long (the value is left to follow).
    pub fn literal_open(&mut self, name: &[u8], len: usize) -> &mut Block {
        self.0.push(0x00);
        string(&mut self.0, name);
        int(&mut self.0, 0, 7, len);
        self
    }

    /// A literal with incremental indexing, new name: it enters the dynamic table.
    pub fn literal_indexed(&mut self, name: &[u8], value: &[u8]) -> &mut Block {
        self.0.push(0x40);
        string(&mut self.0, name);
        string(&mut self.0, value);
        self
    }
}

/// The process's resident set in bytes (`/proc/self/statm`, second field, in pages).
pub fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Samples [`rss`] every millisecond on a thread of its own until stopped: the peak growth
/// over what it was at the start.
pub struct RssPeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<(u64, u64)>>,
}

impl RssPeak {
    pub fn start() -> RssPeak {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let handle = std::thread::spawn(move || {
            let base = rss();
            let mut peak = base;
            while !s2.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(rss());
                std::thread::sleep(Duration::from_millis(1));
            }
            (base, peak.max(rss()))
        });
        RssPeak {
            stop,
            handle: Some(handle),
        }
    }

    /// (resident bytes at the start, peak resident bytes).
    pub fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.handle.take().unwrap().join().unwrap()
    }
}
