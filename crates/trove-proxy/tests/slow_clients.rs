//! Memory and fairness under slow clients (issue 7): a body trove streams holds a bounded
//! amount of memory outside the store however slowly it is read, one slow reader does not
//! throttle the others, and trickled request bodies can't hold the origin connections.

mod kit;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kit::{Origin, Streamed, Trove};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trove_proxy::metrics::names;

const MIB: u64 = 1 << 20;

fn metric(trove: &Trove, name: &str) -> u64 {
    let v = trove.metric(name);
    assert!(v >= 0.0, "metric {name} missing");
    v as u64
}

/// A client reading one response on its own socket, as slowly as the test wants. Its
/// receive buffer is small, so what trove has written is close to what it has read. The
/// body (chunked or by length) is checked against [`kit::pattern`] as it arrives.
struct Reader {
    s: TcpStream,
    buf: Vec<u8>,
    status: u16,
    head: String,
    chunked: bool,
    /// Body bytes of the current chunk still to come (chunked), or of the body (length).
    left: u64,
    /// Body bytes read so far.
    body: u64,
    /// The body ended cleanly (last chunk, or the whole length).
    done: bool,
}

impl Reader {
    async fn get(trove: &Trove, path: &str) -> Reader {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(64 << 10).unwrap();
        let mut s = sock.connect(trove.addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test.local\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut r = Reader {
            s,
            buf: Vec::new(),
            status: 0,
            head: String::new(),
            chunked: false,
            left: 0,
            body: 0,
            done: false,
        };
        let end = loop {
            if let Some(i) = r.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            assert!(r.more().await, "closed before the head");
        };
        r.head = String::from_utf8_lossy(&r.buf[..end]).to_string();
        r.buf.drain(..end + 4);
        r.status = r.head.split(' ').nth(1).unwrap().parse().unwrap();
        let lower = r.head.to_ascii_lowercase();
        r.chunked = lower.contains("transfer-encoding: chunked");
        if !r.chunked {
            r.left = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("a length or chunked coding");
        }
        r
    }

    /// Reads more bytes from the socket; false at EOF or on an error.
    async fn more(&mut self) -> bool {
        let mut tmp = vec![0u8; 64 << 10];
        match self.s.read(&mut tmp).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
        }
    }

    /// Takes body bytes out of the buffer, checking them.
    fn take(&mut self, n: usize) {
        let piece: Vec<u8> = self.buf.drain(..n).collect();
        for part in piece.chunks(kit::PATTERN_PIECE) {
            assert!(
                part == kit::pattern_at(self.body, part.len()),
                "wrong body bytes at {}",
                self.body
            );
            self.body += part.len() as u64;
        }
        self.left -= n as u64;
    }

    /// Reads until at least `want` body bytes have arrived or the body ends; false if the
    /// connection ended first (a cut-off body).
    async fn read_to(&mut self, want: u64) -> bool {
        while self.body < want && !self.done {
            if self.left > 0 {
                if self.buf.is_empty() && !self.more().await {
                    return false;
                }
                let n = (self.buf.len() as u64).min(self.left) as usize;
                self.take(n);
                continue;
            }
            if !self.chunked {
                self.done = true;
                break;
            }
            // Between chunks: the CRLF ending the last one (if any), then a size line.
            let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") else {
                if !self.more().await {
                    return false;
                }
                continue;
            };
            let line = String::from_utf8_lossy(&self.buf[..i]).to_string();
            self.buf.drain(..i + 2);
            if line.is_empty() {
                continue; // the CRLF after chunk data
            }
            let size = u64::from_str_radix(line.trim(), 16).expect("a chunk size");
            if size == 0 {
                self.done = true;
            }
            self.left = size;
        }
        true
    }

    /// Reads to the end; true if the body ended cleanly, false if the connection was cut.
    async fn read_all(&mut self) -> bool {
        self.read_to(u64::MAX).await && self.done
    }
}

/// Issue 7: chunked (unknown-length) cacheable responses larger than `max_object`, each read
/// slowly by its own client. The fill ran ahead freely while the object was being stored;
/// once it outgrew `max_object` it left the store, and everything its reader had not yet
/// read (up to `max_object`) stayed in memory until that reader got there: 16 slow clients
/// took trove from 26 MB to 1.05 GB while the store held 145 KB.
///
/// Now every body holds at most `stream_buffer` (plus one origin read) outside the store:
/// the gauge of such bytes, sampled while 16 clients read 12 MiB each at about 3 MiB/s,
/// stays within 16 times that bound. (Before the fix it rose to 16 × (8 MiB − what the
/// kernel buffers on the way to the client).)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_readers_of_big_chunked_responses_hold_bounded_memory() {
    const READERS: usize = 16;
    const OBJECT: u64 = 256 * MIB;
    const READ: u64 = 12 * MIB;
    let logs: Arc<Vec<Arc<Streamed>>> = Arc::new((0..READERS).map(|_| Arc::default()).collect());
    let l2 = Arc::clone(&logs);
    let origin = Origin::start(move |req, _| {
        let i: usize = req.path.trim_start_matches("/big/").parse().unwrap();
        kit::stream_chunked(200, &[("cache-control", "max-age=60")], OBJECT, &l2[i])
    })
    .await;
    let trove = Trove::reverse(&origin, |s| {
        s.cache.max_object = 8 * MIB;
    })
    .await;
    // stream_buffer (1 MiB by default) plus one origin read (at most 256 KiB), with room.
    let per_fetch = trove.running.shared.settings.cache.stream_buffer + 512 * 1024;

    // Sample the gauge while the readers read.
    let peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let shared = Arc::clone(&trove.running.shared);
        let (peak, sampling) = (Arc::clone(&peak), Arc::clone(&sampling));
        tokio::spawn(async move {
            while sampling.load(Ordering::SeqCst) {
                let now = shared.metrics.body_buffered.load(Ordering::Relaxed);
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    let mut tasks = Vec::new();
    for i in 0..READERS {
        let mut r = Reader::get(&trove, &format!("/big/{i}")).await;
        assert_eq!(r.status, 200);
        assert!(r.chunked, "{}", r.head);
        tasks.push(tokio::spawn(async move {
            // About 3 MiB/s: far slower than loopback.
            while r.body < READ {
                let next = r.body + (64 << 10);
                assert!(r.read_to(next).await, "cut off at {}", r.body);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r.body
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap() >= READ);
    }
    sampling.store(false, Ordering::SeqCst);
    sampler.await.unwrap();

    let peak = peak.load(Ordering::SeqCst);
    eprintln!("peak body bytes held outside the store: {peak}");
    // Every body outgrew max_object while being read: the bound held for unstored bodies.
    assert_eq!(
        trove.metric(&format!(
            "{}{{reason=\"too-large\"}}",
            names::STORE_REMOVALS
        )),
        READERS as f64
    );
    assert!(
        peak <= READERS as u64 * per_fetch,
        "{peak} body bytes held outside the store for {READERS} slow readers \
         (bound {per_fetch} each)"
    );
    // The bodies outgrew max_object and left the store; the store stayed within budget.
    assert!(metric(&trove, names::STORE_BYTES) <= metric(&trove, names::STORE_CAPACITY));
    // The readers are gone: the fetches stop and their memory is given back.
    assert!(
        kit::eventually(|| logs.iter().all(|l| l.broken() || l.complete())).await,
        "a fetch went on for nobody"
    );
    assert!(
        kit::eventually(|| trove
            .running
            .shared
            .metrics
            .body_buffered
            .load(Ordering::SeqCst)
            == 0)
        .await,
        "body bytes still held after every reader left"
    );
}

/// The origin of [`fast_reader_is_not_held_back_by_a_slow_one`]: a chunked cacheable body
/// of `total` bytes; with `etag`, it also answers `Range: bytes=N-` (with a matching
/// If-Range) with a 206 for the rest.
async fn big_origin(total: u64, etag: Option<&'static str>, log: &Arc<Streamed>) -> Origin {
    let log = Arc::clone(log);
    Origin::start(move |req, _| {
        let mut headers = vec![("cache-control", "max-age=60")];
        if let Some(e) = etag {
            headers.push(("etag", e));
        }
        let from = req
            .header("range")
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<u64>().ok());
        match (from, etag) {
            (Some(from), Some(e)) if req.header("if-range") == Some(e) => {
                kit::stream_range(&headers, from, total, &Arc::new(Streamed::default()))
            }
            _ => kit::stream_chunked(200, &headers, total, &log),
        }
    })
    .await
}

/// A slow client leads the fetch of a large chunked object and stops reading; a fast one
/// asks for the same URL (a hit on the object still arriving). Before the fix the fast
/// client got `max_object` plus the read-ahead, then stalled until the slow one hung up.
///
/// Now it reads the whole body while the slow client still dawdles. The slow client, which
/// fell further behind than trove holds, is cut off (the response has no validator to resume
/// it with): its connection closes before the body's end, so it can tell.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fast_reader_is_not_held_back_by_a_slow_one() {
    // max_object well above what the kernel may buffer between trove and a stalled client
    // (4 MiB of send buffer here), so the stalled one is far behind when the body leaves
    // the store.
    const OBJECT: u64 = 96 * MIB;
    let log = Arc::new(Streamed::default());
    let origin = big_origin(OBJECT, None, &log).await;
    let trove = Trove::reverse(&origin, |s| s.cache.max_object = 24 * MIB).await;

    let mut slow = Reader::get(&trove, "/big").await;
    assert!(slow.read_to(64 << 10).await);
    let mut fast = Reader::get(&trove, "/big").await;
    assert_eq!(fast.status, 200);
    let done = tokio::time::timeout(Duration::from_secs(60), fast.read_all())
        .await
        .expect("the fast client got stuck behind the slow one");
    assert!(done, "the fast client was cut off at {}", fast.body);
    assert_eq!(fast.body, OBJECT);
    assert_eq!(origin.hits(), 1, "one fetch for both");

    // The slow client goes on reading: it gets a correct prefix, then the connection ends.
    let whole = tokio::time::timeout(Duration::from_secs(60), slow.read_all())
        .await
        .expect("the slow client's connection neither ended nor went on");
    assert!(!whole, "the slow client got the whole body from memory");
    assert!(slow.body < OBJECT);
    assert_eq!(detached(&trove, "cut-off"), 1.0);
    assert_eq!(detached(&trove, "resumed"), 0.0);
}

fn detached(trove: &Trove, how: &str) -> f64 {
    trove.metric(&format!("{}{{outcome=\"{how}\"}}", names::READERS_DETACHED))
}

/// As above, but the response has a strong validator and the origin serves ranges: the slow
/// client, once too far behind, goes on with a fetch of its own (`Range` from where it is,
/// `If-Range` the stored ETag), and gets the whole body, correct, without trove holding
/// what it had not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_reader_too_far_behind_resumes_on_its_own_fetch() {
    // max_object well above what the kernel may buffer between trove and a stalled client
    // (4 MiB of send buffer here), so the stalled one is far behind when the body leaves
    // the store.
    const OBJECT: u64 = 96 * MIB;
    let log = Arc::new(Streamed::default());
    let origin = big_origin(OBJECT, Some("\"v1\""), &log).await;
    let trove = Trove::reverse(&origin, |s| s.cache.max_object = 24 * MIB).await;

    let mut slow = Reader::get(&trove, "/big").await;
    assert!(slow.read_to(64 << 10).await);
    let mut fast = Reader::get(&trove, "/big").await;
    let done = tokio::time::timeout(Duration::from_secs(60), fast.read_all())
        .await
        .expect("the fast client got stuck behind the slow one");
    assert!(done && fast.body == OBJECT, "fast client: {}", fast.body);

    let whole = tokio::time::timeout(Duration::from_secs(60), slow.read_all())
        .await
        .expect("the slow client's body neither ended nor went on");
    assert!(whole, "the slow client was cut off at {}", slow.body);
    assert_eq!(slow.body, OBJECT);
    let seen = origin.seen();
    assert_eq!(seen.len(), 2, "one fetch, one resumption");
    let range = seen[1].header("range").unwrap_or_default().to_string();
    assert!(range.starts_with("bytes="), "{range}");
    assert_eq!(seen[1].header("if-range"), Some("\"v1\""));
    assert_eq!(detached(&trove, "resumed"), 1.0);
    assert_eq!(detached(&trove, "cut-off"), 0.0);
}

/// A client that sends a POST head declaring `len` body bytes, then one byte every
/// `every` until its connection breaks. Returns the status of the response it got, or
/// `None` if the connection ended without one.
async fn trickle_post(addr: std::net::SocketAddr, len: u64, every: Duration) -> Option<u16> {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let head = format!("POST /up HTTP/1.1\r\nHost: test.local\r\nContent-Length: {len}\r\n\r\n");
    wr.write_all(head.as_bytes()).await.unwrap();
    let writer = tokio::spawn(async move {
        for _ in 0..len {
            if wr.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let status = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_string();
            break head.split(' ').nth(1).and_then(|c| c.parse().ok());
        }
        match rd.read(&mut tmp).await {
            Ok(0) | Err(_) => break None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    writer.abort();
    status
}

/// Issue 7: 300 clients each sending a `Content-Length: 100000` POST body a byte every 5 s
/// held all 256 connections to the origin, and every other miss got a 503 after 5 s for as
/// long as they trickled.
///
/// Here, at a smaller scale (4 connections to the origin; 12 clients trickling bodies of
/// 1,000 and 100,000 bytes a byte every 100 ms): a GET miss meanwhile is served at once;
/// small bodies never take an origin connection (they are read whole first), large ones take
/// at most the one upload slot; every trickler ends with 408 at about `client_body` (or 503
/// when no upload slot freed in time) and nothing incomplete reaches the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trickled_request_bodies_time_out_and_leave_the_origin_connections_free() {
    let origin = Origin::start(|req, _| {
        kit::respond(200, &[("cache-control", "no-store")], req.method.as_bytes())
    })
    .await;
    let trove = Trove::reverse(&origin, |s| {
        s.origin_pool.max_per_origin = 4;
        s.timeouts.client_body = Duration::from_millis(1500);
        s.timeouts.connect = Duration::from_secs(2);
    })
    .await;
    assert_eq!(
        trove
            .running
            .shared
            .settings
            .origin_pool
            .uploads_per_origin(),
        1
    );

    let mut tricklers = Vec::new();
    for i in 0..12 {
        let len = if i % 2 == 0 { 1_000 } else { 100_000 };
        tricklers.push(tokio::spawn(trickle_post(
            trove.addr,
            len,
            Duration::from_millis(100),
        )));
    }
    // Let every trickler's head arrive before the miss (their first bytes are on the way).
    assert!(
        kit::eventually(|| metric(&trove, names::CLIENT_CONNECTIONS_OPEN) >= 12).await,
        "the trickling clients did not all connect"
    );
    let r = kit::get(&trove, "/page", &[]).await;
    assert_eq!(r.status, 200, "a miss while uploads trickle: {}", r.text());
    assert_eq!(r.text(), "GET");
    assert!(
        metric(&trove, names::ORIGIN_CONNECTIONS_OPEN) <= 2,
        "uploads hold {} origin connections",
        metric(&trove, names::ORIGIN_CONNECTIONS_OPEN)
    );

    let mut statuses = Vec::new();
    for t in tricklers {
        let status = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a trickling client was never cut off")
            .unwrap();
        statuses.push(status);
    }
    for (i, s) in statuses.iter().enumerate() {
        let small = i % 2 == 0;
        match s {
            Some(408) => {}
            Some(503) if !small => {} // no upload slot within the connect timeout
            other => panic!("trickler {i} (small: {small}) got {other:?}"),
        }
    }
    assert!(metric(&trove, names::BODY_TIMEOUTS) >= 6);
    assert!(
        origin.seen().iter().all(|r| r.method == "GET"),
        "an incomplete body reached the origin"
    );
}
