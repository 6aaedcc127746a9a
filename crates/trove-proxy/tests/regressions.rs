//! Regression tests for defects found in review; each fails on the code before its fix.

mod kit;

use std::time::Duration;

use kit::{respond, Action, Origin, Trove};
use tokio::io::AsyncReadExt;
use trove_proxy::metrics::names;

/// A 206 whose body is shorter than its Content-Range (10 bytes of a claimed 1000).
fn short_206(range: &str) -> Action {
    Action::RawClose(
        format!(
            "HTTP/1.1 206 X\r\ncache-control: max-age=600\r\netag: \"p\"\r\ncontent-range: bytes {range}\r\nconnection: close\r\n\r\n0123456789"
        )
        .into_bytes(),
    )
}

#[tokio::test]
async fn short_partial_body_is_not_stored_and_nothing_panics() {
    let origin = Origin::start(|_, _| short_206("0-999/5000")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"GET /p HTTP/1.1\r\nHost: test.local\r\n\r\n").await;
    assert!(
        c.read_response(false).await.is_none(),
        "a torn body ends the connection"
    );
    let mut c = trove.client().await;
    c.send(b"GET /p HTTP/1.1\r\nHost: test.local\r\nRange: bytes=500-599\r\n\r\n")
        .await;
    let _ = c.read_response(false).await;
    assert_eq!(origin.hits(), 2, "the short part was not kept");
    // The proxy is still healthy.
    let ok = Origin::start(|_, _| respond(200, &[], b"fine")).await;
    let t2 = Trove::reverse(&ok, |_| {}).await;
    assert_eq!(kit::get(&t2, "/", &[]).await.text(), "fine");
    assert!(kit::eventually(|| trove.metric(names::CLIENT_CONNECTIONS_OPEN) == 0.0).await);
}

#[tokio::test]
async fn short_stored_body_never_desyncs_a_keep_alive_connection() {
    let origin = Origin::start(|_, n| {
        if n == 0 {
            short_206("0-999/5000")
        } else {
            respond(200, &[], b"second")
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"GET /d HTTP/1.1\r\nHost: test.local\r\nRange: bytes=5-120\r\n\r\nGET /e HTTP/1.1\r\nHost: test.local\r\n\r\n")
        .await;
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = c.stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    let text = String::from_utf8_lossy(&all);
    // Either the connection was closed after the torn body, or the second response came
    // as its own response — never inside the first one's body.
    assert!(!text.contains("0123456789HTTP/1.1"), "{text}");
}

#[tokio::test]
async fn slow_but_steady_response_is_not_cut_by_client_write() {
    let origin = Origin::start(|_, _| Action::Slow {
        head: b"HTTP/1.1 200 X\r\ncache-control: no-store\r\ncontent-length: 6\r\n\r\n".to_vec(),
        pieces: vec![b"ab".to_vec(), b"cd".to_vec(), b"ef".to_vec()],
        pause: Duration::from_millis(500),
    })
    .await;
    let trove = Trove::reverse(&origin, |s| {
        s.timeouts.client_write = Duration::from_secs(1)
    })
    .await;
    let r = kit::get(&trove, "/slow", &[]).await;
    assert_eq!(r.text(), "abcdef");
}

#[tokio::test]
async fn stalled_request_body_times_out() {
    let origin = Origin::start(|_, _| respond(200, &[], b"ok")).await;
    let trove = Trove::reverse(&origin, |s| {
        s.timeouts.client_head = Duration::from_millis(300);
    })
    .await;
    let mut c = trove.client().await;
    c.send(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        .await;
    // The proxy answers (400 or an origin error) and closes, instead of waiting forever.
    let r = c.read_response(false).await;
    assert!(r.is_none() || r.unwrap().status >= 400);
    assert!(c.closed().await);
}

#[tokio::test]
async fn revalidation_while_the_body_arrives_does_not_break_later_hits() {
    let origin = Origin::start(|req, _| {
        if req.header("if-none-match").is_some() {
            respond(304, &[("etag", "\"v\"")], b"")
        } else {
            let mut head = b"HTTP/1.1 200 OK\r\netag: \"v\"\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            head.extend_from_slice(b"3e8\r\n");
            head.extend_from_slice(&[b'a'; 1000]);
            head.extend_from_slice(b"\r\n");
            Action::Slow {
                head,
                pieces: vec![
                    [&b"7d0\r\n"[..], &[b'b'; 2000][..], &b"\r\n0\r\n\r\n"[..]].concat(),
                ],
                pause: Duration::from_millis(300),
            }
        }
    })
    .await;
    let trove = std::sync::Arc::new(Trove::reverse(&origin, |s| s.cache.max_object = 1000).await);
    let t = trove.clone();
    let a = tokio::spawn(async move { kit::get(&t, "/big", &[]).await.body.len() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = kit::get(&trove, "/big", &[]).await;
    assert_eq!(a.await.unwrap(), 3000);
    assert!(
        b.status == 200 && b.body.len() == 3000,
        "{} {}",
        b.status,
        b.body.len()
    );
    let c = kit::get(&trove, "/big", &[]).await;
    assert_eq!((c.status, c.body.len()), (200, 3000));
}

#[tokio::test]
async fn connect_on_a_reverse_listener_is_refused() {
    let origin = Origin::start(|_, _| respond(200, &[], b"x")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n")
        .await;
    assert_eq!(c.read_response(false).await.unwrap().status, 405);
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn forward_requests_to_unsafe_ports_are_refused() {
    let trove = Trove::forward(|_| {}).await;
    let r = kit::get(&trove, "http://127.0.0.1:25/", &[]).await;
    assert_eq!(r.status, 403);
    assert!(trove.result(0).await.starts_with("TCP_DENIED"));
}

#[tokio::test]
async fn upstream_cache_status_is_kept_before_ours_9211_2() {
    let origin = Origin::start(|_, _| {
        respond(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("cache-status", "OriginCache; hit"),
            ],
            b"x",
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[]).await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!(
        r.header("cache-status"),
        Some("OriginCache; hit, trove; hit")
    );
}

#[tokio::test]
async fn must_revalidate_with_the_origin_unreachable_gives_504_9111_5_2_2_2() {
    let origin = Origin::start(|_, n| {
        if n == 0 {
            respond(
                200,
                &[
                    ("cache-control", "max-age=1, must-revalidate"),
                    ("age", "5"),
                ],
                b"old",
            )
        } else {
            Action::Reset
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[]).await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!(r.status, 504);
}

#[tokio::test]
async fn known_uncacheable_urls_forward_the_clients_range_and_validators() {
    let origin = Origin::start(|req, _| {
        if req.header("if-none-match") == Some("\"e\"") {
            respond(304, &[("etag", "\"e\"")], b"")
        } else if req.header("range") == Some("bytes=2-3") {
            respond(
                206,
                &[
                    ("cache-control", "private"),
                    ("content-range", "bytes 2-3/10"),
                ],
                b"23",
            )
        } else {
            respond(
                200,
                &[("cache-control", "private"), ("etag", "\"e\"")],
                b"0123456789",
            )
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    assert_eq!(kit::get(&trove, "/r", &[]).await.status, 200);
    let r = kit::get(&trove, "/r", &[("range", "bytes=2-3")]).await;
    assert_eq!((r.status, r.text().as_str()), (206, "23"));
    let r = kit::get(&trove, "/r", &[("if-none-match", "\"e\"")]).await;
    assert_eq!(r.status, 304);
    assert_eq!(origin.seen()[2].header("if-none-match"), Some("\"e\""));
}

#[tokio::test]
async fn resuming_a_download_too_big_to_cache_fetches_only_the_rest() {
    let big = vec![b'z'; 200_000];
    let body = big.clone();
    let origin = Origin::start(move |req, _| match req.header("range") {
        Some("bytes=150000-") => respond(
            206,
            &[
                ("cache-control", "max-age=60"),
                ("content-range", "bytes 150000-199999/200000"),
            ],
            &body[150_000..],
        ),
        _ => respond(200, &[("cache-control", "max-age=60")], &body),
    })
    .await;
    let trove = Trove::reverse(&origin, |s| s.cache.max_object = 100_000).await;
    assert_eq!(kit::get(&trove, "/iso", &[]).await.body.len(), 200_000);
    let r = kit::get(&trove, "/iso", &[("range", "bytes=150000-")]).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body.len(), 50_000);
}

#[tokio::test]
async fn error_response_survives_unread_client_bytes() {
    let trove = Trove::forward(|_| {}).await;
    let c = trove.client().await;
    let (mut rd, mut wr) = c.stream.into_split();
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = wr.write_all(b"BAD REQUEST LINE\r\n\r\n").await;
        let junk = vec![b'x'; 64 * 1024];
        for _ in 0..8 {
            if wr.write_all(&junk).await.is_err() {
                break;
            }
        }
    });
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = rd.read(&mut buf).await {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    writer.abort();
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 400"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

/// Issue: a 304 for an object whose body was still arriving stored a second object sharing
/// that body; the fill then saw the first one gone, switched the shared body to bounded mode
/// and released its bytes, so later hits on the freshened object failed mid-body. Two
/// chunks never reached the fill's store check (every MiB): this body is 6 MiB.
#[tokio::test]
async fn revalidation_during_a_multi_megabyte_fill_keeps_the_whole_body() {
    const FIRST: usize = 1 << 20;
    const PIECE: usize = 256 << 10;
    const PIECES: usize = 20;
    const TOTAL: usize = FIRST + PIECE * PIECES;
    let byte_at = |i: usize| (i % 251) as u8;
    let body: Vec<u8> = (0..TOTAL).map(byte_at).collect();
    let served = body.clone();
    let origin = Origin::start(move |req, _| {
        if req.header("if-none-match").is_some() {
            return respond(304, &[("etag", "\"v\"")], b"");
        }
        let mut head = format!(
            "HTTP/1.1 200 OK\r\netag: \"v\"\r\ncache-control: no-cache\r\ncontent-length: {TOTAL}\r\n\r\n"
        )
        .into_bytes();
        head.extend_from_slice(&served[..FIRST]);
        Action::Slow {
            head,
            pieces: served[FIRST..].chunks(PIECE).map(<[u8]>::to_vec).collect(),
            pause: Duration::from_millis(15),
        }
    })
    .await;
    let trove = std::sync::Arc::new(Trove::reverse(&origin, |_| {}).await);
    let t = trove.clone();
    let first = tokio::spawn(async move { kit::get(&t, "/big", &[]).await });
    // Once the object is in the store (its body still arriving), revalidate it.
    assert!(kit::eventually(|| trove.metric("trove_store_objects") >= 1.0).await);
    let during = kit::get(&trove, "/big", &[]).await;
    assert_eq!(origin.hits(), 2, "the second request was a revalidation");
    let first = first.await.unwrap();
    assert_eq!(first.body.len(), TOTAL);
    assert!(
        during.status == 200 && during.body == body,
        "{} {}",
        during.status,
        during.body.len()
    );
    // The fill kept storing it: a later client gets every byte.
    let later = kit::get(&trove, "/big", &[]).await;
    assert_eq!((later.status, later.body.len()), (200, TOTAL));
    assert!(later.body == body, "the stored body is intact");
}

/// The time field of access log line `line`, as seconds since the epoch.
fn log_time(line: &str) -> f64 {
    line.split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .expect("a time field")
}

/// Issue 20: the time field was the request's start; Squid's native format records its
/// completion (and lines are written in completion order).
#[tokio::test]
async fn issue_20_the_log_time_is_when_the_exchange_completed() {
    let origin = Origin::start(|_, _| Action::Slow {
        head: b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n".to_vec(),
        pieces: vec![b"ok".to_vec()],
        pause: Duration::from_millis(400),
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let sent = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert_eq!(kit::get(&trove, "/slow", &[]).await.text(), "ok");
    let line = &trove.log_lines(1).await[0];
    // The body could not have been complete before the origin's pause was over.
    assert!(
        log_time(line) >= sent + 0.4 - 0.002,
        "{line} (sent at {sent:.3})"
    );
}

/// Issue 20: a client gone mid-upload was logged `NONE_NONE/400` and counted as a
/// malformed request; Squid logs it `…_ABORTED`, and it is an abort.
#[tokio::test]
async fn issue_20_an_aborted_post_is_logged_aborted_and_counted_as_an_abort() {
    let origin = Origin::start(|_, _| respond(200, &[], b"stored")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    {
        let mut c = trove.client().await;
        c.send(
            b"POST /up HTTP/1.1\r\nHost: test.local\r\nContent-Length: 100000\r\n\r\npart of it",
        )
        .await;
    }
    let line = &trove.log_lines(1).await[0];
    assert!(line.contains(" TCP_MISS_ABORTED/000 "), "{line}");
    assert!(line.contains(" POST "), "{line}");
    assert_eq!(trove.metric(names::BAD_REQUESTS), 0.0);
    assert_eq!(trove.metric(names::CLIENT_ABORTS), 1.0);
}

/// Issue 20: the hierarchy field carried the port (`HIER_DIRECT/127.0.0.1:23080`); Squid
/// writes the host.
#[tokio::test]
async fn issue_20_the_hierarchy_field_names_the_host_without_its_port() {
    let origin = Origin::start(|_, _| respond(200, &[], b"x")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[]).await;
    let line = &trove.log_lines(1).await[0];
    assert!(line.contains(" HIER_DIRECT/127.0.0.1 "), "{line}");
}
