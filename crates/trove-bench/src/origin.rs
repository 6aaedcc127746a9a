//! Origin servers: serve any object of the model, stamped so clients can tell hits from misses.
//!
//! URLs are `/<world>/<oid>.<ext>`, both in hex. The world is a per-run id, so objects of one run
//! (or of a fill) are never hits in the next. Every reply the server really sends carries
//! `X-Bench-Echo` (the client's `X-Bench-Req` nonce) and `X-Bench-Served` (server name and a
//! serial); a proxy replaying a stored response replays an old echo, which the client sees.
//! Servers think for a normally distributed time before each reply, close a connection after a
//! Zipf-distributed number of replies and after an idle timeout, as PolyMix-2's servers do.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use rand::Rng;
use rand_distr::{Distribution, Normal, Zipf};
use serde::Serialize;
use tokio::net::TcpListener;

use crate::model::{body_block, Model, PATTERN_LEN};
use crate::workload::Workload;

/// Request header carrying the client's per-request nonce.
pub const REQ_HEADER: &str = "x-bench-req";
/// Response header in which the server echoes the nonce of the request it answered.
pub const ECHO_HEADER: &str = "x-bench-echo";
/// Response header naming the server and the serial of the reply.
pub const SERVED_HEADER: &str = "x-bench-served";
/// Largest block a server sends in one frame; large bodies repeat it (it is a multiple of the
/// pattern length, so every block of a body is the same bytes).
const BLOCK: usize = 1024 * PATTERN_LEN;

/// What every origin server of a run shares.
#[derive(Debug)]
pub struct OriginConfig {
    model: Model,
    think: Option<Normal<f64>>,
    replies_zipf: Option<Zipf<f64>>,
    idle: Duration,
    last_modified: HeaderValue,
    expires: HeaderValue,
}

impl OriginConfig {
    /// Servers for workload `w`; `think` overrides the think time's mean (sd scales with it).
    pub fn new(w: &Workload, think_mean_s: Option<f64>) -> anyhow::Result<OriginConfig> {
        let s = &w.servers;
        let mean = think_mean_s.unwrap_or(s.think_mean_s);
        let sd = if s.think_mean_s > 0.0 {
            s.think_sd_s * mean / s.think_mean_s
        } else {
            s.think_sd_s
        };
        let think = (mean > 0.0).then(|| Normal::new(mean, sd)).transpose()?;
        let replies_zipf = (s.conn_replies_zipf >= 1)
            .then(|| Zipf::new(s.conn_replies_zipf, 1.0).expect("n >= 1"));
        let now = SystemTime::now();
        let year = Duration::from_secs(365 * 86400);
        let date = |t| HeaderValue::from_str(&httpdate::fmt_http_date(t)).expect("ascii date");
        Ok(OriginConfig {
            model: w.model(),
            think,
            replies_zipf,
            idle: Duration::from_secs_f64(s.idle_timeout_s),
            last_modified: date(now - year),
            expires: date(now + year),
        })
    }
}

/// Counters of one group of servers.
#[derive(Debug, Default, Serialize)]
pub struct OriginStats {
    /// Connections accepted.
    pub conns: AtomicU64,
    /// Replies sent (including errors).
    pub replies: AtomicU64,
    /// Body bytes sent.
    pub bytes: AtomicU64,
    /// Requests for URLs the model does not know.
    pub bad_requests: AtomicU64,
}

/// A snapshot of [`OriginStats`].
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct OriginCounts {
    /// Connections accepted.
    pub conns: u64,
    /// Replies sent.
    pub replies: u64,
    /// Body bytes sent.
    pub bytes: u64,
    /// Requests for unknown URLs.
    pub bad_requests: u64,
}

impl OriginStats {
    /// The current counts.
    pub fn snapshot(&self) -> OriginCounts {
        OriginCounts {
            conns: self.conns.load(Relaxed),
            replies: self.replies.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            bad_requests: self.bad_requests.load(Relaxed),
        }
    }
}

/// Serves `listener` forever (until the task is dropped).
pub async fn serve(
    listener: TcpListener,
    name: String,
    cfg: Arc<OriginConfig>,
    stats: Arc<OriginStats>,
) {
    let name: Arc<str> = name.into();
    let serial = Arc::new(AtomicU64::new(0));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            // Out of descriptors and the like: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        stats.conns.fetch_add(1, Relaxed);
        tokio::spawn(connection(
            stream,
            name.clone(),
            serial.clone(),
            cfg.clone(),
            stats.clone(),
        ));
    }
}

/// Per-connection state the idle watchdog shares with the request handler.
struct ConnState {
    replies_left: AtomicU32,
    in_flight: AtomicU32,
    idle_since: std::sync::Mutex<tokio::time::Instant>,
}

async fn connection(
    stream: tokio::net::TcpStream,
    name: Arc<str>,
    serial: Arc<AtomicU64>,
    cfg: Arc<OriginConfig>,
    stats: Arc<OriginStats>,
) {
    let limit = cfg
        .replies_zipf
        .map_or(u32::MAX, |z| z.sample(&mut rand::thread_rng()) as u32);
    let state = Arc::new(ConnState {
        replies_left: AtomicU32::new(limit),
        in_flight: AtomicU32::new(0),
        idle_since: std::sync::Mutex::new(tokio::time::Instant::now()),
    });
    let svc = {
        let (state, cfg, stats) = (state.clone(), cfg.clone(), stats.clone());
        hyper::service::service_fn(move |req| {
            let (state, cfg, stats, name) =
                (state.clone(), cfg.clone(), stats.clone(), name.clone());
            let serial = serial.fetch_add(1, Relaxed);
            async move {
                state.in_flight.fetch_add(1, Relaxed);
                let resp = respond(req, &cfg, &stats, &state, &name, serial).await;
                state.in_flight.fetch_sub(1, Relaxed);
                *state.idle_since.lock().expect("not poisoned") = tokio::time::Instant::now();
                Ok::<_, Infallible>(resp)
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        let deadline = *state.idle_since.lock().expect("not poisoned") + cfg.idle;
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tokio::time::sleep_until(deadline), if !closing => {
                let idle_since = *state.idle_since.lock().expect("not poisoned");
                if state.in_flight.load(Relaxed) == 0 && idle_since.elapsed() >= cfg.idle {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

async fn respond(
    req: Request<Incoming>,
    cfg: &OriginConfig,
    stats: &OriginStats,
    state: &ConnState,
    name: &str,
    serial: u64,
) -> Response<GenBody> {
    stats.replies.fetch_add(1, Relaxed);
    let path = req.uri().path();
    if path == "/_bench/stats" {
        let body = serde_json::to_vec(&stats.snapshot()).expect("serialisable");
        let mut r = Response::new(GenBody::full(Bytes::from(body)));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return r;
    }
    let Some(oid) = parse_path(path) else {
        stats.bad_requests.fetch_add(1, Relaxed);
        let mut r = Response::new(GenBody::full(Bytes::from_static(b"unknown object\n")));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return r;
    };
    let think = cfg
        .think
        .map(|d| d.sample(&mut rand::thread_rng()).max(0.0));
    if let Some(t) = think {
        tokio::time::sleep(Duration::from_secs_f64(t)).await;
    }
    let spec = cfg.model.spec(oid);
    let kind = &cfg.model.kinds()[spec.kind];
    let etag = format!("\"{oid:x}\"");
    let not_modified = spec.cachable
        && (req
            .headers()
            .get(header::IF_NONE_MATCH)
            .is_some_and(|v| v.as_bytes() == etag.as_bytes() || v == "*")
            || req.headers().contains_key(header::IF_MODIFIED_SINCE));
    let mut resp = if not_modified {
        let mut r = Response::new(GenBody::full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        stats.bytes.fetch_add(spec.size, Relaxed);
        Response::new(GenBody::object(oid, spec.size))
    };
    let h = resp.headers_mut();
    if !not_modified {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(spec.size));
    }
    if let Ok(v) = HeaderValue::from_str(&kind.mime) {
        h.insert(header::CONTENT_TYPE, v);
    }
    if spec.cachable {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
        h.insert(header::LAST_MODIFIED, cfg.last_modified.clone());
        h.insert(header::EXPIRES, cfg.expires.clone());
        h.insert(header::ETAG, HeaderValue::from_str(&etag).expect("hex"));
    } else {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache"),
        );
        h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    }
    if let Some(nonce) = req.headers().get(REQ_HEADER) {
        h.insert(ECHO_HEADER, nonce.clone());
    }
    let stamp = format!("{name}-{serial}");
    h.insert(SERVED_HEADER, HeaderValue::from_str(&stamp).expect("ascii"));
    if state.replies_left.fetch_sub(1, Relaxed) <= 1 {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// The oid in `/<world>/<oid>.<ext>`.
pub fn parse_path(path: &str) -> Option<u64> {
    let mut parts = path.strip_prefix('/')?.split('/');
    let world = parts.next()?;
    let file = parts.next()?;
    if parts.next().is_some() || world.is_empty() || !world.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let oid = file.split('.').next()?;
    u64::from_str_radix(oid, 16).ok()
}

/// The path of object `oid` in `world`.
pub fn object_path(world: u64, oid: u64, ext: &str) -> String {
    format!("/{world:x}/{oid:016x}.{ext}")
}

/// A response body generated on the fly: small bodies in one frame, large ones as repeats of
/// one 64 KiB block, so a 5 MB download costs one 64 KiB allocation.
pub struct GenBody {
    block: Bytes,
    remaining: u64,
}

impl GenBody {
    fn full(b: Bytes) -> GenBody {
        GenBody {
            remaining: b.len() as u64,
            block: b,
        }
    }
    fn object(oid: u64, size: u64) -> GenBody {
        let len = size.min(BLOCK as u64) as usize;
        GenBody {
            block: Bytes::from(body_block(oid, len)),
            remaining: size,
        }
    }
}

impl Body for GenBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(self.block.len() as u64) as usize;
        self.remaining -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(self.block.slice(..n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// A group of origin servers running on the current tokio runtime.
pub struct Origins {
    /// Listening addresses, one per server.
    pub addrs: Vec<SocketAddr>,
    /// Their shared counters.
    pub stats: Arc<OriginStats>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Origins {
    /// Binds `count` servers on `host` (port 0: the OS picks) and starts serving.
    pub async fn start(host: &str, count: u32, cfg: Arc<OriginConfig>) -> anyhow::Result<Origins> {
        let stats = Arc::new(OriginStats::default());
        let mut addrs = Vec::new();
        let mut tasks = Vec::new();
        for i in 0..count {
            let l = TcpListener::bind((host, 0))
                .await
                .map_err(|e| anyhow::anyhow!("origin server: cannot bind {host}:0: {e}"))?;
            addrs.push(l.local_addr()?);
            let name = format!("s{i}");
            tasks.push(tokio::spawn(serve(l, name, cfg.clone(), stats.clone())));
        }
        Ok(Origins {
            addrs,
            stats,
            tasks,
        })
    }
}

impl Drop for Origins {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Picks a random think time; exposed for tests of the distribution.
pub fn sample_think(cfg: &OriginConfig, rng: &mut impl Rng) -> Option<f64> {
    cfg.think.map(|d| d.sample(rng).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip() {
        let p = object_path(0xabc, 42, "gif");
        assert_eq!(p, "/abc/000000000000002a.gif");
        assert_eq!(parse_path(&p), Some(42));
        assert_eq!(parse_path("/abc/zz.gif"), None);
        assert_eq!(parse_path("/abc/1/2"), None);
        assert_eq!(parse_path("/"), None);
    }

    #[test]
    fn think_time_follows_the_workload() {
        let w = Workload::builtin("polymix-2").unwrap();
        let cfg = OriginConfig::new(&w, None).unwrap();
        let mut rng = crate::model::SplitMix64::new(7);
        let n = 100_000;
        let xs: Vec<f64> = (0..n)
            .map(|_| sample_think(&cfg, &mut rng).unwrap())
            .collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        // normal(2.5, 1) cut at 0 has mean 2.5 + 1 * pdf(2.5)/cdf(2.5) ~= 2.518.
        assert!((mean - 2.518).abs() < 0.02, "{mean}");
        assert!(OriginConfig::new(&w, Some(0.0)).unwrap().think.is_none());
    }
}
