//! HTTP/2 to clients: prior-knowledge h2c on a cleartext listener, `h2` by ALPN on a TLS
//! one, on the same cache path as HTTP/1 (miss then hit, collapsed fetches, bodies larger
//! than every window, request bodies passed on), and what a listener without `http2` and a
//! graceful stop do.

mod kit;
mod kit_tls;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use kit::{pattern, respond, Origin, TempDir, Trove};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trove_proxy::settings::ListenerTlsSettings;
use trove_tls::testing::{TestCa, Validity};

/// `len` bytes of the kit's pattern (a misplaced piece shows).
fn body_of(len: usize) -> Vec<u8> {
    (0..len as u64).map(pattern).collect()
}

/// An h2c connection with prior knowledge.
async fn h2c(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A response's status, head and whole body.
struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// One request on `client`, its body read whole (capacity given back as it is read).
async fn send(
    client: &SendRequest<Bytes>,
    method: &str,
    url: &str,
    body: Option<Bytes>,
) -> Result<Got, h2::Error> {
    let mut client = client.clone().ready().await?;
    let req = http::Request::builder()
        .method(method)
        .uri(url)
        .body(())
        .unwrap();
    let (resp, mut up) = client.send_request(req, body.is_none())?;
    if let Some(b) = body {
        up.send_data(b, true)?;
    }
    let resp = resp.await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut recv = resp.into_body();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    Ok(Got {
        status,
        headers,
        body,
    })
}

async fn h2c_trove(origin: &Origin) -> Trove {
    Trove::reverse(origin, |s| s.listeners[0].http2 = true).await
}

/// Miss, then hit, over h2c; `Cache-Status` says so, the log says so, the origin is asked
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_miss_then_hit() {
    let origin =
        Origin::start(|_, _| respond(200, &[("cache-control", "max-age=60")], b"hello h2")).await;
    let trove = h2c_trove(&origin).await;
    let client = h2c(trove.addr).await;
    let url = "http://site.test/page";
    let first = send(&client, "GET", url, None).await.unwrap();
    assert_eq!((first.status, &first.body[..]), (200, &b"hello h2"[..]));
    assert!(
        first.header("cache-status").contains("fwd=uri-miss"),
        "{}",
        first.header("cache-status")
    );
    assert_eq!(first.header("content-length"), "8");
    let second = send(&client, "GET", url, None).await.unwrap();
    assert_eq!(&second.body[..], b"hello h2");
    assert!(
        second.header("cache-status").contains("hit"),
        "{}",
        second.header("cache-status")
    );
    assert_eq!(origin.hits(), 1);
    assert_eq!(
        trove.results_sorted(2).await,
        ["TCP_MEM_HIT/200", "TCP_MISS/200"]
    );
    // The same key as HTTP/1's: an HTTP/1 request for it is a hit.
    let h1 = kit::get(&trove, "http://site.test/page", &[]).await;
    assert_eq!(h1.status, 200);
    assert_eq!(trove.result(2).await, "TCP_MEM_HIT/200");
    assert_eq!(origin.hits(), 1);
}

/// A HEAD, a 404 with a body, and a conditional request answered 304, over h2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_and_not_modified_over_h2() {
    let origin = Origin::start(|req, _| {
        if req.path == "/missing" {
            return respond(404, &[], b"no such page");
        }
        respond(
            200,
            &[("cache-control", "max-age=60"), ("etag", "\"v1\"")],
            b"body",
        )
    })
    .await;
    let trove = h2c_trove(&origin).await;
    let client = h2c(trove.addr).await;
    let head = send(&client, "HEAD", "http://site.test/a", None)
        .await
        .unwrap();
    assert_eq!((head.status, head.body.len()), (200, 0));
    let full = send(&client, "GET", "http://site.test/a", None)
        .await
        .unwrap();
    assert_eq!(&full.body[..], b"body");
    let mut c = client.clone().ready().await.unwrap();
    let req = http::Request::get("http://site.test/a")
        .header("if-none-match", "\"v1\"")
        .body(())
        .unwrap();
    let (resp, _) = c.send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 304);
    let missing = send(&client, "GET", "http://site.test/missing", None)
        .await
        .unwrap();
    assert_eq!(
        (missing.status, &missing.body[..]),
        (404, &b"no such page"[..])
    );
}

/// 100 streams on one connection for one uncached URL make one origin request, and every
/// stream gets the whole body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_streams_one_origin_request() {
    let origin = Origin::start(|_, _| {
        std::thread::sleep(Duration::from_millis(300));
        respond(200, &[("cache-control", "max-age=60")], &body_of(20_000))
    })
    .await;
    let trove = h2c_trove(&origin).await;
    let client = h2c(trove.addr).await;
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            send(&c, "GET", "http://site.test/one", None).await
        }));
    }
    for t in tasks {
        let got = t.await.unwrap().unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.body, body_of(20_000));
    }
    assert_eq!(origin.hits(), 1);
    let lines = trove.log_lines(100).await;
    assert_eq!(lines.len(), 100);
}

/// A body of 4 MiB, past every window (64 KiB per stream, 1 MiB per connection), comes
/// whole on the miss and on the hit, beside a small request on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_larger_than_every_window_arrive_whole() {
    const LEN: usize = 4 << 20;
    let origin = Origin::start(|req, _| {
        if req.path == "/small" {
            return respond(200, &[("cache-control", "max-age=60")], b"small");
        }
        respond(200, &[("cache-control", "max-age=60")], &body_of(LEN))
    })
    .await;
    let trove = h2c_trove(&origin).await;
    let client = h2c(trove.addr).await;
    for _ in 0..2 {
        let (big, small) = tokio::join!(
            send(&client, "GET", "http://site.test/big", None),
            send(&client, "GET", "http://site.test/small", None)
        );
        let big = big.unwrap();
        assert_eq!(big.body.len(), LEN);
        assert!(big.body == body_of(LEN), "the body differs");
        assert_eq!(&small.unwrap().body[..], b"small");
    }
    assert_eq!(origin.hits(), 2);
}

/// A POST's body goes up to the origin through the same pass as HTTP/1's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_are_passed_on() {
    let origin = Origin::start(|req, _| {
        let n = req.body.len().to_string();
        respond(200, &[("x-got", &n)], b"ok")
    })
    .await;
    let trove = h2c_trove(&origin).await;
    let client = h2c(trove.addr).await;
    let body = Bytes::from(body_of(300_000));
    let got = send(&client, "POST", "http://site.test/up", Some(body))
        .await
        .unwrap();
    assert_eq!((got.status, got.header("x-got")), (200, "300000"));
    assert_eq!(origin.seen()[0].body, body_of(300_000));
}

/// An origin's 103 Early Hints reaches an HTTP/2 client as an informational response, its
/// connection fields dropped, before the final response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_hints_are_forwarded_as_informational_responses() {
    let origin = Origin::start(|_, _| {
        kit::Action::Raw(
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\npage"
                .to_vec(),
        )
    })
    .await;
    let trove = h2c_trove(&origin).await;
    let client = h2c(trove.addr).await;
    let mut c = client.ready().await.unwrap();
    let req = http::Request::get("http://site.test/hints")
        .body(())
        .unwrap();
    let (mut resp, _) = c.send_request(req, true).unwrap();
    let hint = std::future::poll_fn(|cx| resp.poll_informational(cx))
        .await
        .expect("an informational response")
        .unwrap();
    assert_eq!(hint.status(), 103);
    assert_eq!(hint.headers()["link"], "</style.css>; rel=preload");
    assert!(hint.headers().get("x-hop").is_none());
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let got = body.data().await.unwrap().unwrap();
    assert_eq!(&got[..], b"page");
}

/// HTTP/2 is counted: connections by protocol, streams, and the access log's eleventh
/// field says which protocol each request came by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_protocols_are_counted_and_logged() {
    let origin = Origin::start(|_, _| respond(200, &[("cache-control", "max-age=60")], b"x")).await;
    let trove = h2c_trove(&origin).await;
    let client = h2c(trove.addr).await;
    for _ in 0..3 {
        send(&client, "GET", "http://site.test/c", None)
            .await
            .unwrap();
    }
    kit::get(&trove, "http://site.test/c", &[]).await;
    let lines = trove.log_lines(4).await;
    assert!(lines[0].ends_with(" HTTP/2"), "{}", lines[0]);
    assert!(lines[3].ends_with(" HTTP/1.1"), "{}", lines[3]);
    use trove_proxy::metrics::names;
    assert_eq!(trove.metric(names::H2_STREAMS), 3.0);
    assert_eq!(
        trove.metric(&format!(
            "{}{{protocol=\"h2c\"}}",
            names::CLIENT_CONNECTIONS_BY_PROTOCOL
        )),
        1.0
    );
    assert_eq!(
        trove.metric(&format!(
            "{}{{protocol=\"http/1.1\"}}",
            names::CLIENT_CONNECTIONS_BY_PROTOCOL
        )),
        1.0
    );
    assert_eq!(trove.metric(names::H2_STREAMS_OPEN), 0.0);
}

/// A listener without `http2` answers the preface as today: 505.
#[tokio::test]
async fn a_preface_without_http2_is_505() {
    let origin = Origin::start(|_, _| respond(200, &[], b"x")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut tcp = TcpStream::connect(trove.addr).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 64];
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 505"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}

/// HTTP/1.1 still works on a listener with `http2`.
#[tokio::test]
async fn http1_still_works_beside_h2c() {
    let origin = Origin::start(|_, _| respond(200, &[], b"one")).await;
    let trove = h2c_trove(&origin).await;
    let r = kit::get(&trove, "/x", &[]).await;
    assert_eq!(r.status, 200);
}

/// A graceful stop sends GOAWAY: the connection ends, and a stream in flight finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_sends_goaway_and_lets_streams_finish() {
    let origin = Origin::start(|_, _| {
        std::thread::sleep(Duration::from_millis(300));
        respond(200, &[], b"finished")
    })
    .await;
    let trove = h2c_trove(&origin).await;
    let tcp = TcpStream::connect(trove.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let ended = tokio::spawn(conn);
    let c = client.clone();
    let in_flight = tokio::spawn(async move { send(&c, "GET", "http://site.test/s", None).await });
    // The stream is in flight once its request reached the origin (a fixed pause could end
    // before trove took the stream, and the stop then refused it: no stream to finish).
    assert!(
        kit::eventually(|| origin.hits() == 1).await,
        "the request reached the origin"
    );
    let open = trove.running.stop(Duration::from_secs(5)).await;
    assert_eq!(open, 0);
    let got = in_flight.await.unwrap().unwrap();
    assert_eq!(&got.body[..], b"finished");
    let end = tokio::time::timeout(Duration::from_secs(2), ended)
        .await
        .expect("the connection ends");
    assert!(end.unwrap().is_ok(), "GOAWAY(NO_ERROR), not an error");
    assert_eq!(
        trove.metric(&format!(
            "{}{{reason=\"stop\"}}",
            trove_proxy::metrics::names::H2_GOAWAYS_SENT
        )),
        1.0
    );
}

/// Over TLS, ALPN offers h2 first: a client offering both gets h2 (miss then hit); one
/// offering only http/1.1 gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_h2_miss_then_hit() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let (cert, key) = ca
        .issue(&["site.test"], Validity::Current)
        .write(&dir.0, "site");
    let origin =
        Origin::start(|_, _| respond(200, &[("cache-control", "max-age=60")], b"over tls")).await;
    let trove = Trove::reverse(&origin, move |s| {
        s.listeners[0].tls = Some(ListenerTlsSettings {
            cert,
            key,
            sni: vec![],
        });
        s.listeners[0].http2 = true;
    })
    .await;
    let name = ServerName::try_from("site.test".to_string()).unwrap();
    let tcp = TcpStream::connect(trove.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(kit_tls::tls_client(&ca, &[b"h2", b"http/1.1"]))
        .connect(name.clone(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let first = send(&client, "GET", "https://site.test/p", None)
        .await
        .unwrap();
    assert_eq!(&first.body[..], b"over tls");
    let second = send(&client, "GET", "https://site.test/p", None)
        .await
        .unwrap();
    assert!(second.header("cache-status").contains("hit"));
    assert_eq!(
        trove.results_sorted(2).await,
        ["TCP_MEM_HIT/200", "TCP_MISS/200"]
    );
    let lines = trove.log_lines(2).await;
    assert!(lines[0].contains(" https://site.test/p "), "{}", lines[0]);
    // HTTP/1.1 only: still served.
    let tcp = TcpStream::connect(trove.addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(kit_tls::tls_client(&ca, &[b"http/1.1"]))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    tls.write_all(b"GET /p HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tls.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    assert_eq!(origin.hits(), 1);
}

/// `Via` names the protocol each hop received (RFC 9110, 7.6.3): a request that came over
/// HTTP/2 reaches the origin with `2 trove-…`, one over HTTP/1.1 with `1.1 trove-…`; the
/// response an HTTP/2 client gets says `1.1`, the protocol trove received it with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn via_names_the_protocol_each_hop_received() {
    let origin = Origin::start(|req, _| {
        let via = req.header("via").unwrap_or("none").to_string();
        respond(200, &[("x-seen-via", &via)], b"via")
    })
    .await;
    let trove = h2c_trove(&origin).await;
    let client = h2c(trove.addr).await;
    let got = send(&client, "GET", "http://site.test/over-h2", None)
        .await
        .unwrap();
    let seen = got.header("x-seen-via");
    assert!(seen.starts_with("2 trove-"), "{seen}");
    assert!(
        got.header("via").starts_with("1.1 trove-"),
        "{:?}",
        got.headers
    );
    let h1 = kit::get(&trove, "http://site.test/over-h1", &[]).await;
    let seen = h1.header("x-seen-via").unwrap_or("");
    assert!(seen.starts_with("1.1 trove-"), "{seen}");
}

/// A reload reaches HTTP/2 connections already open, stream by stream, as it reaches
/// HTTP/1 connections request by request: the next stream on the same connection takes the
/// new route (and the cache is kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_new_streams_to_the_new_settings() {
    let a = Origin::start(|req, _| {
        let body = format!("A {}", req.path);
        respond(200, &[("cache-control", "max-age=60")], body.as_bytes())
    })
    .await;
    let b = Origin::start(|req, _| {
        let body = format!("B {}", req.path);
        respond(200, &[("cache-control", "max-age=60")], body.as_bytes())
    })
    .await;
    let mut trove = h2c_trove(&a).await;
    let client = h2c(trove.addr).await;
    let got = send(&client, "GET", "http://site.test/x", None)
        .await
        .unwrap();
    assert_eq!(&got.body[..], b"A /x");

    let mut settings = trove.running.shared.settings.clone();
    settings.origins[0].upstreams = vec![format!("http://{}", b.addr)];
    trove.running.reload(settings).unwrap();

    // The same connection: the next stream goes to B; what A gave is still a hit.
    let got = send(&client, "GET", "http://site.test/y", None)
        .await
        .unwrap();
    assert_eq!(&got.body[..], b"B /y");
    let got = send(&client, "GET", "http://site.test/x", None)
        .await
        .unwrap();
    assert_eq!(&got.body[..], b"A /x");
    assert!(got.header("cache-status").contains("hit"));
    assert_eq!((a.hits(), b.hits()), (1, 1));
}
