//! A small test kit: scripted origin servers and a raw HTTP/1.1 client on 127.0.0.1:0, and
//! trove started in-process on port 0. Tests read as short stories over real sockets.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use trove_proxy::settings::{ListenerSettings, OriginRoute};
use trove_proxy::{Mode, Running, Settings};

/// A request as the origin saw it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What a scripted origin does for one request.
pub enum Action {
    /// A normal response; Content-Length is added.
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// These exact bytes, then keep the connection.
    Raw(Vec<u8>),
    /// These exact bytes, then close the connection.
    RawClose(Vec<u8>),
    /// Head, then body pieces with a pause before each.
    Slow {
        head: Vec<u8>,
        pieces: Vec<Vec<u8>>,
        pause: Duration,
    },
    /// Head, then a body of `len` bytes of [`pattern`] from pattern offset `from`, written
    /// as fast as the socket takes it (in chunked coding when `chunked`), counting in `log`
    /// how much was written and whether the connection broke first.
    Stream {
        head: Vec<u8>,
        len: u64,
        from: u64,
        chunked: bool,
        log: Arc<Streamed>,
    },
    /// Never answer.
    Hang,
    /// Close the connection with a TCP reset.
    Reset,
}

pub fn respond(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Action {
    Action::Respond {
        status,
        headers: headers
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
        body: body.to_vec(),
    }
}

/// What an [`Action::Stream`] managed to write.
#[derive(Debug, Default)]
pub struct Streamed {
    /// Body bytes accepted by the socket so far.
    pub written: AtomicU64,
    /// The whole body was written.
    pub complete: AtomicBool,
    /// A write failed before the whole body was written (the peer closed or reset).
    pub broken: AtomicBool,
}

impl Streamed {
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    pub fn complete(&self) -> bool {
        self.complete.load(Ordering::SeqCst)
    }

    pub fn broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }
}

/// The body byte at `offset` of an [`Action::Stream`] body (251 divides no power of two,
/// so a misplaced piece shows).
pub fn pattern(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// Most bytes [`pattern_at`] gives at once.
pub const PATTERN_PIECE: usize = 64 << 10;

/// The `len` (at most [`PATTERN_PIECE`]) body bytes of an [`Action::Stream`] body from
/// `offset` on.
pub fn pattern_at(offset: u64, len: usize) -> &'static [u8] {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let all = BYTES.get_or_init(|| (0..(PATTERN_PIECE + 251) as u64).map(pattern).collect());
    let from = (offset % 251) as usize;
    &all[from..from + len.min(PATTERN_PIECE)]
}

/// Object `i`'s body of `len` bytes (xorshift from `i`, so a misplaced piece shows).
pub fn object_body(i: usize, len: usize) -> Vec<u8> {
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The path [`objects_origin`] serves object `i` of `len` bytes at.
pub fn object_path(i: usize, len: usize) -> String {
    format!("/o/{i}/{len}")
}

/// An origin serving `/o/<i>/<len>` as `object_body(i, len)`, cacheable for an hour, with
/// the strong ETag `"<i>-<len>"`.
pub async fn objects_origin() -> Origin {
    Origin::start(|req, _| {
        let mut parts = req.path.trim_start_matches("/o/").split('/');
        let i: usize = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let len: usize = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        respond(
            200,
            &[
                ("cache-control", "max-age=3600"),
                ("etag", &format!("\"{i}-{len}\"")),
                ("content-type", "application/octet-stream"),
            ],
            &object_body(i, len),
        )
    })
    .await
}

/// A response streaming `len` bytes of [`pattern`], with Content-Length, recorded in `log`.
pub fn stream(status: u16, headers: &[(&str, &str)], len: u64, log: &Arc<Streamed>) -> Action {
    let mut head = format!("HTTP/1.1 {status} X\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("content-length: {len}\r\n\r\n"));
    Action::Stream {
        head: head.into_bytes(),
        len,
        from: 0,
        chunked: false,
        log: Arc::clone(log),
    }
}

/// Like [`stream`], in chunked coding (no Content-Length: the length is unknown until the
/// end).
pub fn stream_chunked(
    status: u16,
    headers: &[(&str, &str)],
    len: u64,
    log: &Arc<Streamed>,
) -> Action {
    let mut head = format!("HTTP/1.1 {status} X\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("transfer-encoding: chunked\r\n\r\n");
    Action::Stream {
        head: head.into_bytes(),
        len,
        from: 0,
        chunked: true,
        log: Arc::clone(log),
    }
}

/// A 206 for bytes `from..` of a [`pattern`] body of `total` bytes (Content-Range and
/// Content-Length set), recorded in `log`.
pub fn stream_range(
    headers: &[(&str, &str)],
    from: u64,
    total: u64,
    log: &Arc<Streamed>,
) -> Action {
    let len = total.saturating_sub(from);
    let mut head = "HTTP/1.1 206 Partial Content\r\n".to_string();
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "content-range: bytes {from}-{}/{total}\r\ncontent-length: {len}\r\n\r\n",
        total - 1
    ));
    Action::Stream {
        head: head.into_bytes(),
        len,
        from,
        chunked: false,
        log: Arc::clone(log),
    }
}

pub type Handler = dyn Fn(&SeenRequest, usize) -> Action + Send + Sync;

/// A scripted origin server.
pub struct Origin {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    pub connections: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
}

impl Origin {
    /// Starts an origin; `handler` gets each request and its 0-based sequence number.
    pub async fn start(
        handler: impl Fn(&SeenRequest, usize) -> Action + Send + Sync + 'static,
    ) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let (h2, c2, s2) = (hits.clone(), connections.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                c2.fetch_add(1, Ordering::SeqCst);
                let (handler, hits, seen) = (handler.clone(), h2.clone(), s2.clone());
                tokio::spawn(async move { origin_conn(stream, handler, hits, seen).await });
            }
        });
        Origin {
            addr,
            hits,
            connections,
            seen,
        }
    }

    /// Requests received so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// What a scripted origin's connection runs over: TCP, or TLS over TCP (`kit/tls.rs`, which
/// only the TLS tests include, so the crates that borrow this kit need no TLS crates).
pub trait OriginIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {
    fn tcp(&self) -> &TcpStream;
}

impl OriginIo for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

pub async fn origin_conn<S: OriginIo>(
    mut stream: S,
    handler: Arc<Handler>,
    hits: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
) {
    let mut buf = Vec::new();
    loop {
        let Some(req) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let n = hits.fetch_add(1, Ordering::SeqCst);
        seen.lock().unwrap().push(req.clone());
        match handler(&req, n) {
            Action::Respond {
                status,
                headers,
                body,
            } => {
                let mut out = format!("HTTP/1.1 {status} X\r\n");
                for (k, v) in &headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                let no_body = req.method == "HEAD" || status == 304 || status == 204;
                if !headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    && status != 304
                    && status != 204
                {
                    out.push_str(&format!("content-length: {}\r\n", body.len()));
                }
                out.push_str("\r\n");
                let mut bytes = out.into_bytes();
                if !no_body {
                    bytes.extend_from_slice(&body);
                }
                if stream.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Action::Raw(b) => {
                if stream.write_all(&b).await.is_err() {
                    return;
                }
            }
            Action::RawClose(b) => {
                let _ = stream.write_all(&b).await;
                return;
            }
            Action::Slow {
                head,
                pieces,
                pause,
            } => {
                if stream.write_all(&head).await.is_err() {
                    return;
                }
                for p in pieces {
                    tokio::time::sleep(pause).await;
                    if stream.write_all(&p).await.is_err() {
                        return;
                    }
                }
            }
            Action::Stream {
                head,
                len,
                from,
                chunked,
                log,
            } => {
                if stream.write_all(&head).await.is_err() {
                    log.broken.store(true, Ordering::SeqCst);
                    return;
                }
                let mut sent = 0u64;
                while sent < len {
                    let n = (len - sent).min(PATTERN_PIECE as u64) as usize;
                    let piece = pattern_at(from + sent, n);
                    let wrote = if chunked {
                        let mut framed = format!("{n:x}\r\n").into_bytes();
                        framed.extend_from_slice(piece);
                        framed.extend_from_slice(b"\r\n");
                        stream.write_all(&framed).await.map(|()| n)
                    } else {
                        stream.write(piece).await
                    };
                    match wrote {
                        Ok(0) | Err(_) => {
                            log.broken.store(true, Ordering::SeqCst);
                            return;
                        }
                        Ok(k) => {
                            sent += k as u64;
                            log.written.fetch_add(k as u64, Ordering::SeqCst);
                        }
                    }
                }
                if chunked && stream.write_all(b"0\r\n\r\n").await.is_err() {
                    log.broken.store(true, Ordering::SeqCst);
                    return;
                }
                log.complete.store(true, Ordering::SeqCst);
            }
            Action::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Action::Reset => {
                // SO_LINGER 0 makes close send RST; blocking on drop is what a test wants.
                #[allow(deprecated)]
                let _ = stream.tcp().set_linger(Some(Duration::ZERO));
                return;
            }
        }
    }
}

async fn read_request<S: OriginIo>(stream: &mut S, buf: &mut Vec<u8>) -> Option<SeenRequest> {
    loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let mut lines = head.split("\r\n");
            let first = lines.next()?;
            let mut parts = first.split(' ');
            let method = parts.next()?.to_string();
            let path = parts.next()?.to_string();
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
                .collect();
            buf.drain(..end + 4);
            let mut req = SeenRequest {
                method,
                path,
                headers,
                body: Vec::new(),
            };
            if let Some(len) = req
                .header("content-length")
                .and_then(|v| v.parse::<usize>().ok())
            {
                while buf.len() < len {
                    let mut tmp = [0u8; 8192];
                    let n = stream.read(&mut tmp).await.ok()?;
                    if n == 0 {
                        return None;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                }
                req.body = buf.drain(..len).collect();
            } else if req
                .header("transfer-encoding")
                .is_some_and(|v| v.contains("chunked"))
            {
                req.body = read_chunked(stream, buf).await?;
            }
            return Some(req);
        }
        let mut tmp = [0u8; 8192];
        let n = stream.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

async fn read_chunked<S: OriginIo>(stream: &mut S, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = find(buf, b"\r\n") {
                break i;
            }
            fill(stream, buf).await?;
        };
        let size_str = String::from_utf8_lossy(&buf[..line_end]).to_string();
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // trailers until empty line
            loop {
                let i = loop {
                    if let Some(i) = find(buf, b"\r\n") {
                        break i;
                    }
                    fill(stream, buf).await?;
                };
                buf.drain(..i + 2);
                if i == 0 {
                    return Some(body);
                }
            }
        }
        while buf.len() < size + 2 {
            fill(stream, buf).await?;
        }
        body.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
    }
}

async fn fill<S: OriginIo>(stream: &mut S, buf: &mut Vec<u8>) -> Option<()> {
    let mut tmp = [0u8; 8192];
    let n = stream.read(&mut tmp).await.ok()?;
    if n == 0 {
        return None;
    }
    buf.extend_from_slice(&tmp[..n]);
    Some(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A running trove for one test.
pub struct Trove {
    pub running: Running,
    pub addr: SocketAddr,
    pub log_path: std::path::PathBuf,
    _dir: TempDir,
}

/// A temporary directory removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "trove-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Trove {
    /// A forward proxy with default settings, adjusted by `f`.
    pub async fn forward(f: impl FnOnce(&mut Settings)) -> Trove {
        Trove::start(Mode::Forward, None, None, f).await
    }

    /// [`Trove::forward`], with `lower` opening the tiers under memory (`[cache.disk]`).
    pub async fn forward_over(
        lower: &dyn trove_proxy::OpenLower,
        f: impl FnOnce(&mut Settings),
    ) -> Trove {
        Trove::start(Mode::Forward, None, Some(lower), f).await
    }

    /// A reverse proxy in front of `origin`, adjusted by `f`.
    pub async fn reverse(origin: &Origin, f: impl FnOnce(&mut Settings)) -> Trove {
        Trove::start(Mode::Reverse, Some(origin.addr), None, f).await
    }

    /// [`Trove::reverse`], with `lower` opening the tiers under memory (`[cache.disk]`), as
    /// the binary's opener does.
    pub async fn reverse_over(
        origin: &Origin,
        lower: &dyn trove_proxy::OpenLower,
        f: impl FnOnce(&mut Settings),
    ) -> Trove {
        Trove::start(Mode::Reverse, Some(origin.addr), Some(lower), f).await
    }

    /// A reverse proxy in front of a server of the test's own at `addr`.
    pub async fn reverse_to(addr: SocketAddr, f: impl FnOnce(&mut Settings)) -> Trove {
        Trove::start(Mode::Reverse, Some(addr), None, f).await
    }

    async fn start(
        mode: Mode,
        origin: Option<SocketAddr>,
        lower: Option<&dyn trove_proxy::OpenLower>,
        f: impl FnOnce(&mut Settings),
    ) -> Trove {
        let dir = TempDir::new();
        let log_path = dir.0.join("access.log");
        let mut s = Settings {
            listeners: vec![ListenerSettings {
                addr: "127.0.0.1:0".parse().unwrap(),
                mode,
                tls: None,
                http2: false,
            }],
            ..Settings::default()
        };
        s.log.access = log_path.to_string_lossy().to_string();
        if let Some(o) = origin {
            s.origins = vec![OriginRoute {
                host: "*".into(),
                path_prefix: "/".into(),
                upstreams: vec![format!("http://{o}")],
                tls: None,
            }];
        }
        f(&mut s);
        let running = match lower {
            Some(lower) => trove_proxy::start_with(s, lower).await,
            None => trove_proxy::start(s).await,
        }
        .expect("trove starts");
        let addr = running.addrs[0].1;
        Trove {
            running,
            addr,
            log_path,
            _dir: dir,
        }
    }

    /// The access log lines written so far (polls until at least `n` lines, 5 s at most).
    pub async fn log_lines(&self, n: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let text = read_complete_lines(&self.log_path);
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.len() >= n || tokio::time::Instant::now() > deadline {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The result code (e.g. `TCP_MEM_HIT/200`) of access log line `i`.
    /// The result codes of the first `n` log lines, sorted: for requests whose lines may be
    /// written in either order (an HTTP/2 stream's line is written after its last frame is
    /// queued, so the client may have sent the next request before it).
    pub async fn results_sorted(&self, n: usize) -> Vec<String> {
        let mut r: Vec<String> = self
            .log_lines(n)
            .await
            .iter()
            .map(|l| l.split_whitespace().nth(3).unwrap_or("<none>").to_string())
            .collect();
        r.sort();
        r
    }

    pub async fn result(&self, i: usize) -> String {
        let lines = self.log_lines(i + 1).await;
        lines
            .get(i)
            .and_then(|l| l.split_whitespace().nth(3))
            .unwrap_or("<none>")
            .to_string()
    }

    pub fn metrics(&self) -> String {
        self.running.shared.render_metrics()
    }

    /// The value of a metric line starting with `prefix`.
    pub fn metric(&self, prefix: &str) -> f64 {
        self.metrics()
            .lines()
            .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0)
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }
}

/// A client with a 4 KiB receive window that sends `GET path` and reads `first` bytes of
/// the response, then stops reading: the server is left with the rest queued or unsent.
pub struct SlowReader {
    pub stream: TcpStream,
    pub got: Vec<u8>,
}

impl SlowReader {
    pub async fn start(addr: SocketAddr, path: &str, first: usize) -> SlowReader {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: test.local\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        while got.len() < first {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        SlowReader { stream, got }
    }

    /// Reads on until `len` body bytes came or the connection ended (10 s without a byte
    /// fails the test); the body bytes read.
    pub async fn body(mut self, len: usize) -> Vec<u8> {
        let head_end = self
            .got
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head")
            + 4;
        let mut buf = vec![0u8; 4096];
        while self.got.len() < head_end + len {
            match tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => self.got.extend_from_slice(&buf[..n]),
                Err(_) => panic!("no end and no close"),
            }
        }
        self.got.split_off(head_end)
    }
}

/// A response as the client saw it.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }
}

/// A raw HTTP/1.1 client on one connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        Client {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    /// Connects from the local address `from` (port chosen by the system), e.g. `127.0.0.2`
    /// for a client that the test's settings count as remote.
    pub async fn connect_from(from: std::net::IpAddr, addr: SocketAddr) -> Client {
        let socket = match from {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .unwrap();
        socket.bind(SocketAddr::new(from, 0)).unwrap();
        Client {
            stream: socket.connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends a GET for `url` (absolute for forward mode) with extra header lines.
    pub async fn get(&mut self, url: &str, extra: &[(&str, &str)]) -> Response {
        self.request("GET", url, extra).await
    }

    pub async fn request(&mut self, method: &str, url: &str, extra: &[(&str, &str)]) -> Response {
        let host = url
            .strip_prefix("http://")
            .and_then(|r| r.split('/').next())
            .unwrap_or("test.local");
        let mut req = format!("{method} {url} HTTP/1.1\r\nHost: {host}\r\n");
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        self.send(req.as_bytes()).await;
        self.read_response(method == "HEAD")
            .await
            .expect("a response")
    }

    /// Reads one response (5 s at most); `None` if the connection closed first.
    pub async fn read_response(&mut self, head_only: bool) -> Option<Response> {
        tokio::time::timeout(Duration::from_secs(5), self.read_inner(head_only))
            .await
            .ok()
            .flatten()
    }

    async fn more(&mut self) -> Option<()> {
        let mut tmp = [0u8; 16384];
        let n = self.stream.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        self.buf.extend_from_slice(&tmp[..n]);
        Some(())
    }

    async fn read_inner(&mut self, head_only: bool) -> Option<Response> {
        let end = loop {
            if let Some(e) = find(&self.buf, b"\r\n\r\n") {
                break e;
            }
            self.more().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).to_string();
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
            .collect();
        let mut resp = Response {
            status,
            headers,
            body: Vec::new(),
        };
        if head_only || status == 304 || status == 204 || (100..200).contains(&status) {
            return Some(resp);
        }
        if let Some(len) = resp
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            while self.buf.len() < len {
                self.more().await?;
            }
            resp.body = self.buf.drain(..len).collect();
        } else if resp
            .header("transfer-encoding")
            .is_some_and(|v| v.contains("chunked"))
        {
            let mut body = Vec::new();
            loop {
                let i = loop {
                    if let Some(i) = find(&self.buf, b"\r\n") {
                        break i;
                    }
                    self.more().await?;
                };
                let size =
                    usize::from_str_radix(String::from_utf8_lossy(&self.buf[..i]).trim(), 16)
                        .ok()?;
                self.buf.drain(..i + 2);
                if size == 0 {
                    while find(&self.buf, b"\r\n").is_none() {
                        self.more().await?;
                    }
                    let j = find(&self.buf, b"\r\n")?;
                    self.buf.drain(..j + 2);
                    break;
                }
                while self.buf.len() < size + 2 {
                    self.more().await?;
                }
                body.extend_from_slice(&self.buf[..size]);
                self.buf.drain(..size + 2);
            }
            resp.body = body;
        } else {
            while self.more().await.is_some() {}
            resp.body = std::mem::take(&mut self.buf);
        }
        Some(resp)
    }

    /// True if the server closed the connection (reads EOF within 5 s).
    pub async fn closed(&mut self) -> bool {
        let mut tmp = [0u8; 1024];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), self.stream.read(&mut tmp)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

/// An address on 127.0.0.1 that refuses connections, for as long as the socket returned
/// is kept: bound and never listening. (A port bound and released is free for any socket
/// to take meanwhile, another test's listener among them.)
pub fn refusing_addr() -> (tokio::net::TcpSocket, SocketAddr) {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = s.local_addr().unwrap();
    (s, addr)
}

/// One GET on a new connection.
pub async fn get(trove: &Trove, url: &str, extra: &[(&str, &str)]) -> Response {
    trove.client().await.get(url, extra).await
}

/// The whole lines of a file a writer appends to (`""` if it is not there yet): a read that
/// overlaps a write that crosses a page can see a part of that write, so a last line
/// without its newline is left for the next read, never taken as a line.
pub fn read_complete_lines(path: &std::path::Path) -> String {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
    text
}

/// Polls `f` until it is true or 5 s pass.
pub async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}
