//! The cookie policy (`[cache.cookies]`) and the abort policy (`[cache.abort]`) through real
//! sockets: what a shared cache does with `Set-Cookie` and `Cookie`, and whether a fetch
//! whose client has gone is finished or stopped.

mod kit;

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trove_cache::{RequestCookiePolicy, SetCookiePolicy};
use trove_proxy::metrics::names;

use kit::{respond, Origin, Streamed, Trove};

// ---------------------------------------------------------------------------------------
// Cookie policy
// ---------------------------------------------------------------------------------------

/// Every `Set-Cookie` value of a response, in order.
fn set_cookies(r: &kit::Response) -> Vec<String> {
    r.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.clone())
        .collect()
}

fn cache_status(r: &kit::Response) -> String {
    r.header("cache-status").unwrap_or("").to_string()
}

/// A storable response that hands each request its own session: `session=<n>` for the
/// origin's n-th request (plus a second cookie, to see that all of them are handled).
async fn cookie_origin() -> Origin {
    Origin::start(|_, n| {
        let session = format!("session={n}");
        let mut a = respond(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("content-type", "text/html"),
            ],
            format!("page {n}").as_bytes(),
        );
        if let kit::Action::Respond { headers, .. } = &mut a {
            headers.push(("set-cookie".into(), session));
            headers.push(("set-cookie".into(), "theme=dark".into()));
        }
        a
    })
    .await
}

#[tokio::test]
async fn strip_gives_set_cookie_to_the_fetching_client_only() {
    let origin = cookie_origin().await;
    let trove = Trove::reverse(&origin, |_| {}).await; // strip is the default
    let a = kit::get(&trove, "/p", &[]).await;
    let b = kit::get(&trove, "/p", &[]).await;

    assert_eq!(a.text(), "page 0");
    assert_eq!(set_cookies(&a), ["session=0", "theme=dark"], "the miss");
    assert!(cache_status(&a).contains("stored"), "{}", cache_status(&a));

    assert_eq!(b.text(), "page 0", "the stored response");
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");
    assert!(cache_status(&b).contains("hit"), "{}", cache_status(&b));
    assert_eq!(
        set_cookies(&b),
        Vec::<String>::new(),
        "another client's session"
    );
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn no_store_keeps_responses_with_set_cookie_out_of_the_cache() {
    let origin = cookie_origin().await;
    let trove = Trove::reverse(&origin, |s| {
        s.cache.cookies.set_cookie = SetCookiePolicy::NoStore;
    })
    .await;
    let a = kit::get(&trove, "/p", &[]).await;
    let b = kit::get(&trove, "/p", &[]).await;

    assert_eq!(origin.hits(), 2);
    assert_eq!((a.text(), b.text()), ("page 0".into(), "page 1".into()));
    assert_eq!(set_cookies(&a), ["session=0", "theme=dark"]);
    assert_eq!(set_cookies(&b), ["session=1", "theme=dark"]);
    for (i, r) in [&a, &b].into_iter().enumerate() {
        assert!(
            cache_status(r).contains("detail=set-cookie"),
            "{}",
            cache_status(r)
        );
        assert!(!cache_status(r).contains("stored"), "{}", cache_status(r));
        assert_eq!(trove.result(i).await, "TCP_MISS/200");
    }
}

/// RFC 9111 alone lets a shared cache store a response with `Set-Cookie` and serve it,
/// cookie and all, to anyone (§3.1 only asks that the field be stored; §3.5 and §5.2.2.7
/// leave keeping personal responses out to the origin's `private`). That is the unsafe
/// setting: the first client's session, here `session=0`, goes to every later client. It is
/// only for origins that never forget `private` on personal responses.
#[tokio::test]
async fn rfc_serves_the_stored_set_cookie_to_everyone() {
    let origin = cookie_origin().await;
    let trove = Trove::reverse(&origin, |s| {
        s.cache.cookies.set_cookie = SetCookiePolicy::Rfc;
    })
    .await;
    let a = kit::get(&trove, "/p", &[]).await;
    let b = kit::get(&trove, "/p", &[]).await;

    assert_eq!(set_cookies(&a), ["session=0", "theme=dark"]);
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");
    assert_eq!(origin.hits(), 1);
    assert_eq!(
        set_cookies(&b),
        ["session=0", "theme=dark"],
        "the first client's session, handed to the second"
    );
}

#[tokio::test]
async fn bypass_sends_requests_with_cookie_past_the_cache_except_for_images() {
    let origin = Origin::start(|req, n| {
        let ct = if req.path.ends_with(".png") {
            "image/png"
        } else {
            "text/html"
        };
        respond(
            200,
            &[("cache-control", "max-age=60"), ("content-type", ct)],
            format!("body {n}").as_bytes(),
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |s| {
        s.cache.cookies.request_cookie = RequestCookiePolicy::Bypass;
        s.cache.cookies.ignore_for = vec!["image/".into()];
    })
    .await;
    let cookie = [("cookie", "s=alice")];

    // text/html with Cookie: fetched, not stored.
    let a = kit::get(&trove, "/page", &cookie).await;
    assert_eq!(a.text(), "body 0");
    assert!(
        cache_status(&a).contains("fwd=bypass") && cache_status(&a).contains("request-cookie"),
        "{}",
        cache_status(&a)
    );
    assert!(!cache_status(&a).contains("stored"), "{}", cache_status(&a));
    // Not stored: a request without Cookie is a miss, and that one is stored …
    let b = kit::get(&trove, "/page", &[]).await;
    assert_eq!(b.text(), "body 1");
    assert_eq!(trove.result(1).await, "TCP_MISS/200");
    assert!(cache_status(&b).contains("stored"), "{}", cache_status(&b));
    // … but a request with Cookie is still not served from it.
    let c = kit::get(&trove, "/page", &cookie).await;
    assert_eq!(c.text(), "body 2");
    assert!(!cache_status(&c).contains("hit"), "{}", cache_status(&c));
    assert_eq!(origin.hits(), 3);

    // image/png with Cookie: stored, and served from the cache to a request with Cookie.
    let d = kit::get(&trove, "/logo.png", &cookie).await;
    assert_eq!(d.text(), "body 3");
    assert!(cache_status(&d).contains("stored"), "{}", cache_status(&d));
    let e = kit::get(&trove, "/logo.png", &[("cookie", "s=bob")]).await;
    assert_eq!(e.text(), "body 3");
    assert_eq!(trove.result(4).await, "TCP_MEM_HIT/200");
    assert_eq!(origin.hits(), 4);
}

/// A 304 may carry `Set-Cookie` (it is one client's answer); under `strip` the cookie never
/// reaches the stored head, so no other client sees it. The revalidating client itself gets
/// it (`leader_fields` in `cache/mod.rs`): it was set for that client.
#[tokio::test]
async fn set_cookie_on_a_304_is_not_stored_under_strip() {
    let origin = Origin::start(|req, n| {
        if n == 0 {
            return respond(
                200,
                &[
                    ("cache-control", "no-cache"),
                    ("etag", "\"v1\""),
                    ("set-cookie", "first=0"),
                ],
                b"stored body",
            );
        }
        assert_eq!(req.header("if-none-match"), Some("\"v1\""));
        // Fresh for a minute from now on: the next request is a plain hit on the stored head.
        respond(
            304,
            &[
                ("cache-control", "max-age=60"),
                ("etag", "\"v1\""),
                ("set-cookie", format!("new={n}").as_str()),
            ],
            b"",
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;

    let a = kit::get(&trove, "/r", &[]).await;
    assert_eq!(set_cookies(&a), ["first=0"]);

    // Revalidation: the origin's 304 sets `new=1` for this client.
    let b = kit::get(&trove, "/r", &[]).await;
    assert_eq!(origin.hits(), 2);
    assert_eq!(b.text(), "stored body");
    assert!(
        cache_status(&b).contains("fwd-status=304"),
        "{}",
        cache_status(&b)
    );
    assert_eq!(
        set_cookies(&b),
        ["new=1"],
        "only the cookie set for this client"
    );

    // A hit on the freshened head, for another client: no cookie at all.
    let c = kit::get(&trove, "/r", &[]).await;
    assert_eq!(origin.hits(), 2);
    assert_eq!(trove.result(2).await, "TCP_MEM_HIT/200");
    assert_eq!(c.text(), "stored body");
    assert_eq!(set_cookies(&c), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------------
// Abort policy
// ---------------------------------------------------------------------------------------

/// Large enough that socket buffers can't hide whether trove stopped reading: loopback
/// buffers here held about 10 MiB between origin and client (autotuning allows more on the
/// origin side, which is why a stopped fetch is only asserted to end before half of this).
const BIG: u64 = 128 << 20;

/// A client that asks for `path`, reads the head and at least `want` body bytes (checking
/// them), and goes away: it closes with unread data, so the kernel resets the connection.
/// Its receive buffer is small, so that what trove has sent is close to what it has read.
/// Returns how many body bytes it read.
async fn read_part_and_vanish(trove: &Trove, path: &str, want: u64) -> u64 {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(64 << 10).unwrap();
    let mut s = sock.connect(trove.addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test.local\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let read = async {
        let mut buf = vec![0u8; 64 << 10];
        let mut head = Vec::new();
        let body_start = loop {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the head");
            head.extend_from_slice(&buf[..n]);
            if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let text = String::from_utf8_lossy(&head[..body_start]).to_string();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        let mut body = 0u64;
        check_pattern(&head[body_start..], &mut body);
        while body < want {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {body} body bytes");
            check_pattern(&buf[..n], &mut body);
        }
        body
    };
    let got = tokio::time::timeout(std::time::Duration::from_secs(20), read)
        .await
        .expect("the body arrives");
    drop(s);
    got
}

/// Checks that `chunk` is the streamed body from `*at` on, and moves `*at` past it.
fn check_pattern(chunk: &[u8], at: &mut u64) {
    for piece in chunk.chunks(kit::PATTERN_PIECE) {
        assert!(
            piece == kit::pattern_at(*at, piece.len()),
            "body bytes from {at}"
        );
        *at += piece.len() as u64;
    }
}

/// An origin whose first response is `BIG` bytes with `cache_control`, streamed into `log`;
/// later requests get a small response.
async fn big_origin(cache_control: &'static str, log: &Arc<Streamed>) -> Origin {
    let log = Arc::clone(log);
    Origin::start(move |_, n| {
        if n == 0 {
            kit::stream(200, &[("cache-control", cache_control)], BIG, &log)
        } else {
            respond(200, &[("cache-control", "no-store")], b"small")
        }
    })
    .await
}

fn metric(trove: &Trove, name: &str) -> u64 {
    let v = trove.metric(name);
    assert!(v >= 0.0, "metric {name} missing");
    v as u64
}

/// Squid's quick abort: the client goes after 10 %, far from the end, so trove stops
/// reading and drops the origin connection rather than fetch 90 % for nobody.
#[tokio::test]
async fn client_gone_early_stops_a_fetch_that_is_not_stored() {
    let log = Arc::new(Streamed::default());
    let origin = big_origin("no-store", &log).await;
    let trove = Trove::reverse(&origin, |_| {}).await; // min_left 16 KiB, done_pct 95
    let got = read_part_and_vanish(&trove, "/big", BIG / 10).await;

    assert!(
        kit::eventually(|| log.broken() || log.complete()).await,
        "the origin neither finished nor was cut off"
    );
    assert!(
        log.broken(),
        "trove read the whole body for nobody ({} bytes written)",
        log.written()
    );
    assert!(
        log.written() < BIG / 2,
        "cut off only after {} of {BIG} bytes (the client read {got})",
        log.written()
    );
    assert!(metric(&trove, names::BYTES_FROM_ORIGINS) < BIG / 2);
    assert_eq!(trove.running.shared.pool.idle_count(), 0);
    trove.log_lines(1).await;

    // That connection is gone: the next request needs a new one.
    let r = kit::get(&trove, "/next", &[]).await;
    assert_eq!(r.text(), "small");
    assert_eq!(origin.connections(), 2);
    assert_eq!(metric(&trove, names::ORIGIN_CONNECTIONS_REUSED), 0);
}

/// Half way is still far from the end: with the default policy (finish only past 95 % or
/// with at most 16 KiB left) a client gone at 60 % must stop the fetch like one gone at 10 %.
///
/// Regression: `origin::abandon` once took the total from hyper's `size_hint`, which shrinks
/// as the body is read, so past about half way every fetch finished, whatever `done_pct` and
/// `min_left` said. `OriginResponse` now keeps the length declared with the head.
#[tokio::test]
async fn client_gone_midway_stops_a_fetch_that_is_not_stored() {
    let log = Arc::new(Streamed::default());
    let origin = big_origin("no-store", &log).await;
    let trove = Trove::reverse(&origin, |_| {}).await; // min_left 16 KiB, done_pct 95
    let got = read_part_and_vanish(&trove, "/big", BIG * 60 / 100).await;

    assert!(
        kit::eventually(|| log.broken() || log.complete()).await,
        "the origin neither finished nor was cut off"
    );
    assert!(
        log.broken(),
        "trove read the last {} bytes for nobody (the client read {got})",
        BIG - got
    );
    assert!(metric(&trove, names::BYTES_FROM_ORIGINS) < BIG);
    assert_eq!(trove.running.shared.pool.idle_count(), 0);
}

/// The client goes at 95 %: finishing costs little and keeps the origin connection, so trove
/// reads the rest, throws it away (counted as wasted) and pools the connection.
///
/// That the origin wrote the whole body is asserted but does not tell finishing from
/// stopping here: the last 5 % fit in the socket buffers either way. What does is that
/// trove read all of it and the next request reuses the connection. (Run with the client
/// gone at 10 % instead, these assertions fail; `done_pct = 101, min_left = 0` should make
/// them fail too, but does not while the bug of the test above stands.)
#[tokio::test]
async fn client_gone_near_the_end_lets_the_fetch_finish() {
    let log = Arc::new(Streamed::default());
    let origin = big_origin("no-store", &log).await;
    let trove = Trove::reverse(&origin, |_| {}).await; // min_left 16 KiB, done_pct 95
    let wasted_before = metric(&trove, names::ORIGIN_BYTES_WASTED);
    let got = read_part_and_vanish(&trove, "/big", BIG * 95 / 100 + 1).await;

    assert!(
        kit::eventually(|| trove.running.shared.pool.idle_count() == 1).await,
        "the origin connection never came back to the pool"
    );
    assert!(log.complete() && !log.broken(), "the origin was cut off");
    assert_eq!(log.written(), BIG);
    assert_eq!(metric(&trove, names::BYTES_FROM_ORIGINS), BIG);
    let wasted = metric(&trove, names::ORIGIN_BYTES_WASTED) - wasted_before;
    assert!(
        wasted > 0 && wasted <= BIG - got,
        "wasted {wasted}, the client left {} unread",
        BIG - got
    );
    trove.log_lines(1).await;

    let r = kit::get(&trove, "/next", &[]).await;
    assert_eq!(r.text(), "small");
    assert_eq!(origin.connections(), 1);
    assert_eq!(metric(&trove, names::ORIGIN_CONNECTIONS_REUSED), 1);
}

/// A response being stored is filled to the end whoever is reading it: the client going at
/// 10 % changes nothing, and the next client gets the whole body from the cache.
#[tokio::test]
async fn client_gone_early_does_not_stop_a_fill() {
    const STORED: u64 = 32 << 20; // fits max_object (64 MiB) and the memory tier
    let log = Arc::new(Streamed::default());
    let l2 = Arc::clone(&log);
    let origin = Origin::start(move |_, _| {
        kit::stream(200, &[("cache-control", "max-age=60")], STORED, &l2)
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    read_part_and_vanish(&trove, "/stored", STORED / 10).await;

    assert!(
        kit::eventually(|| log.broken() || log.complete()).await,
        "the origin neither finished nor was cut off"
    );
    assert!(
        log.complete() && !log.broken(),
        "the fill stopped after {} of {STORED} bytes",
        log.written()
    );
    trove.log_lines(1).await;

    let r = kit::get(&trove, "/stored", &[]).await;
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");
    assert_eq!(origin.hits(), 1);
    assert_eq!(r.body.len() as u64, STORED);
    check_pattern(&r.body, &mut 0);
}
