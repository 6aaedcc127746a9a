//! trove's admin listener: `/metrics` (Prometheus text format), `/healthz`, and a status
//! page for a browser at `/`. Separate from the proxy port so operators can firewall it apart;
//! loopback by default.
//!
//! It has its own ACL (`[admin] allow`, loopback only by default), checked as each
//! connection is accepted: the proxy's `[access] allow` says who may use the cache, not who
//! may read its figures. A peer outside it gets one `403 Forbidden` naming the setting and
//! the connection is closed — rather than a silent close or reset — so an operator whose
//! scraper is refused sees why at once. Its request head is read first (at most
//! [`REFUSED_HEAD_TIMEOUT`]) so the 403 answers a request and isn't taken for a stray
//! response by HTTP clients; nothing it asks for is looked at.
//!
//! It is built on hyper's server: this listener is not on the request hot path, and hyper
//! gives a correct HTTP/1.1 server for it with no code of our own to maintain.
//!
//! It also serves the admin API under `/v1/` ([`api`]: application-managed caching, with a
//! bearer token), on the TCP listener and on a Unix socket ([`bind_unix`]), whose
//! filesystem permissions replace the address ACL. Connections are kept alive (HTTP/1.1),
//! the fast path for a program making many calls (seed 002, Figure 5).
//!
//! **Limits** (issue 19, defect 5: 19,985 silent connections once took every descriptor
//! trove had, and proxy requests failed while they were held). The TCP listener and the
//! Unix socket share one [`Gate`]: at most [`MAX_CONNECTIONS`] connections at once (the
//! share of descriptors `trove_proxy::fd_limit` keeps for the admin side), a connection
//! past it is closed at once with a 503; a request head must arrive whole within
//! [`HEADER_TIMEOUT`] and fit [`MAX_HEAD`] bytes; a connection on which nothing moves for
//! [`IDLE_TIMEOUT`] (no request, or a reader that stopped reading) is closed.

pub mod api;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use ipnet::IpNet;
use tokio::net::TcpListener;

/// How long a refused peer has to send its request head before the connection is closed.
pub const REFUSED_HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a refused peer's connection is kept at all.
const REFUSED_CONNECTION_LIMIT: Duration = Duration::from_secs(10);

/// Connections the admin listener and socket serve at once, together: the admin side's
/// share of descriptors.
pub const MAX_CONNECTIONS: usize = trove_proxy::fd_limit::ADMIN_SHARE;
/// How long a request head may take to arrive, from the first byte or from the previous
/// response on a kept-alive connection.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection on which no byte moves either way for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head (hyper's read buffer; a put's URL with 64 tags fits).
pub const MAX_HEAD: usize = 64 << 10;

/// The admin side's connection limit, shared by its TCP listener and its Unix socket.
#[derive(Debug)]
pub struct Gate {
    permits: Arc<tokio::sync::Semaphore>,
    refused: std::sync::atomic::AtomicU64,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new(MAX_CONNECTIONS)
    }
}

impl Gate {
    /// At most `max` connections at once.
    pub fn new(max: usize) -> Gate {
        Gate {
            permits: Arc::new(tokio::sync::Semaphore::new(max.max(1))),
            refused: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Connections closed at once because the limit was reached.
    pub fn refused(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A place for one connection, or `None` (counted, and logged once in a while).
    fn admit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let p = Arc::clone(&self.permits).try_acquire_owned().ok();
        if p.is_none() {
            let n = self
                .refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_power_of_two() || n == 0 {
                tracing::warn!(
                    refused = n + 1,
                    "admin connection limit ({MAX_CONNECTIONS}) reached; connection closed"
                );
            }
        }
        p
    }
}

/// The answer to a connection past the limit, written without waiting.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
connection: close\r\ncontent-length: 31\r\n\r\nadmin connection limit reached\n";

/// What the admin listener shows; provided by the binary, which owns the proxy.
pub trait Source: Send + Sync + 'static {
    /// Prometheus text exposition.
    fn metrics(&self) -> String;
    /// A small HTML status page.
    fn status_page(&self) -> String;
    /// A connection from `peer` was refused by the ACL (for a counter).
    fn refused(&self, _peer: SocketAddr) {}
    /// `None` when all is well; else what is degraded (a disk tier that failed), which
    /// `/healthz` reports.
    fn degraded(&self) -> Option<String> {
        None
    }
}

/// Client networks allowed to use the admin listener.
#[derive(Debug, Clone)]
pub struct Allow {
    nets: Vec<IpNet>,
}

impl Default for Allow {
    /// Loopback only.
    fn default() -> Self {
        Allow::new(vec![
            "127.0.0.0/8".parse().expect("static"),
            "::1/128".parse().expect("static"),
        ])
    }
}

impl Allow {
    pub fn new(nets: Vec<IpNet>) -> Allow {
        Allow { nets }
    }

    /// True when `ip` is in one of the networks; an IPv4-mapped IPv6 address (a dual-stack
    /// listener's view of an IPv4 peer) is checked as IPv4.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.nets.iter().any(|n| n.contains(&ip))
    }
}

/// A bound admin listener, not yet serving: bound first so its address is known (the
/// proxy refuses it as a destination) before anything is served.
pub struct Listener {
    inner: TcpListener,
    addr: SocketAddr,
}

/// Binds `addr`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<Listener> {
    let inner = TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let addr = inner.local_addr()?;
    Ok(Listener { inner, addr })
}

impl Listener {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until the runtime stops: peers `allow` admits get the pages, others a 403.
    pub fn serve(self, allow: Allow, source: Arc<dyn Source>) {
        self.serve_with_api(allow, source, None)
    }

    /// Like [`Listener::serve`], with the admin API under `/v1/`.
    pub fn serve_with_api(self, allow: Allow, source: Arc<dyn Source>, api: Option<Arc<api::Api>>) {
        self.serve_gated(allow, source, api, Arc::new(Gate::default()))
    }

    /// Like [`Listener::serve_with_api`], within `gate`'s connection limit (shared with
    /// the Unix socket).
    pub fn serve_gated(
        self,
        allow: Allow,
        source: Arc<dyn Source>,
        api: Option<Arc<api::Api>>,
        gate: Arc<Gate>,
    ) {
        let listener = self.inner;
        tokio::spawn(async move {
            // Out of file descriptors and the like: back off (doubling, up to a second) rather
            // than spin, and say so once per episode rather than at every retry.
            let mut backoff: Option<Duration> = None;
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(s) => s,
                    Err(e) => {
                        let wait = match backoff {
                            None => {
                                tracing::warn!(error = %e, "admin accept failed; retrying");
                                Duration::from_millis(10)
                            }
                            Some(w) => (w * 2).min(Duration::from_secs(1)),
                        };
                        backoff = Some(wait);
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                };
                if backoff.take().is_some() {
                    tracing::warn!("admin listener accepting again");
                }
                let source = Arc::clone(&source);
                let Some(permit) = gate.admit() else {
                    let _ = stream.try_write(BUSY);
                    continue;
                };
                if !allow.allows(peer.ip()) {
                    source.refused(peer);
                    tracing::info!(client = %peer, "admin connection refused ([admin] allow)");
                    tokio::spawn(async move {
                        refuse(stream).await;
                        drop(permit);
                    });
                    continue;
                }
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_connection(stream, source, api.clone(), permit));
            }
        });
    }
}

/// Serves one accepted connection (keep-alive) until the peer closes it, a head is late
/// ([`HEADER_TIMEOUT`]) or nothing moves for [`IDLE_TIMEOUT`]; holds its place in the gate
/// (`_permit`) until then.
async fn serve_connection<S>(
    stream: S,
    source: Arc<dyn Source>,
    api: Option<Arc<api::Api>>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: Request<Incoming>| {
        let source = Arc::clone(&source);
        let api = api.clone();
        async move {
            let path = req.uri().path();
            if let Some(api) = api.filter(|_| path == "/v1" || path.starts_with("/v1/")) {
                return Ok::<_, Infallible>(api::handle(&api, req).await);
            }
            Ok::<_, Infallible>(route(&*source, req).map(api::ApiBody::Whole))
        }
    });
    let started = tokio::time::Instant::now();
    let moved = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let heard = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let io = Watched {
        inner: stream,
        started,
        moved: Arc::clone(&moved),
        heard: Arc::clone(&heard),
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    loop {
        tokio::select! {
            _ = &mut conn => return,
            () = tokio::time::sleep(HEADER_TIMEOUT / 4) => {
                use std::sync::atomic::Ordering::Relaxed;
                let last = Duration::from_millis(moved.load(Relaxed));
                let silent = !heard.load(Relaxed) && started.elapsed() >= HEADER_TIMEOUT;
                if silent || started.elapsed().saturating_sub(last) >= IDLE_TIMEOUT {
                    // Dropping the connection closes it.
                    return;
                }
            }
        }
    }
}

/// A connection's stream noting when a byte last moved (ms after `started`), and whether
/// the peer ever sent one (a connection silent from the start gets [`HEADER_TIMEOUT`]).
struct Watched<S> {
    inner: S,
    started: tokio::time::Instant,
    moved: Arc<std::sync::atomic::AtomicU64>,
    heard: Arc<std::sync::atomic::AtomicBool>,
}

impl<S> Watched<S> {
    fn note(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.moved.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.note();
            self.heard.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.note();
        }
        r
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.note();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A bound Unix socket for the admin listener and API, not yet serving.
pub struct UnixListener {
    inner: tokio::net::UnixListener,
    path: std::path::PathBuf,
}

/// Binds a Unix socket at `path` (a stale socket left by a previous run is replaced; one
/// a running process still answers on, or anything else there, is an error), readable and
/// writable by trove's user only.
pub fn bind_unix(path: &std::path::Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() && std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by another process", path.display()),
            ));
        }
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)?;
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
    }
    let inner = tokio::net::UnixListener::bind(path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {}: {e}", path.display()),
        )
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(UnixListener {
        inner,
        path: path.to_path_buf(),
    })
}

impl UnixListener {
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Serves the pages and the API until the runtime stops or the returned handle is
    /// aborted (a reload that moves the socket); connections already accepted go on.
    pub fn serve(
        self,
        source: Arc<dyn Source>,
        api: Option<Arc<api::Api>>,
    ) -> tokio::task::AbortHandle {
        self.serve_gated(source, api, Arc::new(Gate::default()))
    }

    /// Like [`UnixListener::serve`], within `gate`'s connection limit (shared with the TCP
    /// listener).
    pub fn serve_gated(
        self,
        source: Arc<dyn Source>,
        api: Option<Arc<api::Api>>,
        gate: Arc<Gate>,
    ) -> tokio::task::AbortHandle {
        let listener = self.inner;
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let Some(permit) = gate.admit() else {
                            let _ = stream.try_write(BUSY);
                            continue;
                        };
                        tokio::spawn(serve_connection(
                            stream,
                            Arc::clone(&source),
                            api.clone(),
                            permit,
                        ));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "admin socket accept failed; retrying");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        task.abort_handle()
    }
}

/// Answers one request with 403 and closes, within bounded time.
async fn refuse(stream: tokio::net::TcpStream) {
    let svc = service_fn(|_req| async {
        Ok::<_, Infallible>(text(
            StatusCode::FORBIDDEN,
            "text/plain",
            "403 Forbidden\nthis address may not use the admin listener ([admin] allow)\n".into(),
        ))
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(REFUSED_HEAD_TIMEOUT)
        .serve_connection(TokioIo::new(stream), svc);
    let _ = tokio::time::timeout(REFUSED_CONNECTION_LIMIT, conn).await;
}

fn route(source: &dyn Source, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            source.metrics(),
        ),
        // Degraded is still serving: 200, so a load balancer keeps the node, with the
        // reason in the body for whoever looks (and `trove_disk_failed` for alerts).
        "/healthz" => match source.degraded() {
            None => text(StatusCode::OK, "text/plain", "ok\n".into()),
            Some(why) => text(StatusCode::OK, "text/plain", format!("degraded: {why}\n")),
        },
        "/" | "/status" => text(
            StatusCode::OK,
            "text/html; charset=utf-8",
            source.status_page(),
        ),
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

fn text(status: StatusCode, ctype: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}
