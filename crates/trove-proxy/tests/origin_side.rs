//! The origin side: pooled persistent connections, limits, timeouts, and origins that
//! refuse, hang, reset or lie.

mod kit;

use std::time::Duration;

use kit::{respond, Action, Origin, Trove};
use trove_proxy::metrics::names;

#[tokio::test]
async fn origin_connections_are_reused_across_clients() {
    let origin = Origin::start(|_, _| respond(200, &[], b"uncached")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    for i in 0..5 {
        // A new client connection each time: the origin connection is still reused.
        let r = kit::get(&trove, &format!("/{i}"), &[]).await;
        assert_eq!(r.text(), "uncached");
    }
    assert_eq!(origin.connections(), 1);
    assert_eq!(trove.metric(names::ORIGIN_CONNECTIONS_OPENED), 1.0);
    assert_eq!(trove.metric(names::ORIGIN_CONNECTIONS_REUSED), 4.0);
}

#[tokio::test]
async fn idle_origin_connections_are_closed_after_the_idle_timeout() {
    let origin = Origin::start(|_, _| respond(200, &[], b"x")).await;
    let trove = Trove::reverse(&origin, |s| {
        s.origin_pool.idle_timeout = Duration::from_millis(200)
    })
    .await;
    kit::get(&trove, "/1", &[]).await;
    assert!(kit::eventually(|| trove.running.shared.pool.idle_count() == 0).await);
    kit::get(&trove, "/2", &[]).await;
    assert_eq!(
        origin.connections(),
        2,
        "the idle connection was not reused after its timeout"
    );
    assert_eq!(trove.metric(names::ORIGIN_CONNECTIONS_REUSED), 0.0);
}

#[tokio::test]
async fn origin_that_closes_each_connection_still_works() {
    let origin = Origin::start(|_, _| {
        Action::RawClose(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok".to_vec(),
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    for i in 0..3 {
        assert_eq!(kit::get(&trove, &format!("/{i}"), &[]).await.text(), "ok");
    }
    assert_eq!(origin.connections(), 3);
}

#[tokio::test]
async fn per_origin_connection_limit_is_kept() {
    let origin = Origin::start(|_, _| Action::Slow {
        head: b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n".to_vec(),
        pieces: vec![b"x".to_vec()],
        pause: Duration::from_millis(100),
    })
    .await;
    let trove =
        std::sync::Arc::new(Trove::reverse(&origin, |s| s.origin_pool.max_per_origin = 2).await);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let t = trove.clone();
        tasks.push(tokio::spawn(async move {
            kit::get(&t, &format!("/{i}"), &[]).await.status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert!(
        origin.connections() <= 2,
        "{} connections",
        origin.connections()
    );
}

#[tokio::test]
async fn refused_connection_gives_502() {
    let (_held, refusing) = kit::refusing_addr();
    let port = refusing.port();
    let trove = Trove::forward(|_| {}).await;
    let r = kit::get(&trove, &format!("http://127.0.0.1:{port}/"), &[]).await;
    assert_eq!(r.status, 502);
    assert!(r.text().contains("cannot connect"));
    assert_eq!(trove.metric(names::ORIGIN_ERRORS), 1.0);
}

#[tokio::test]
async fn hanging_origin_gives_504_after_the_response_timeout() {
    let origin = Origin::start(|_, _| Action::Hang).await;
    let trove = Trove::reverse(&origin, |s| {
        s.timeouts.origin_response = Duration::from_millis(300)
    })
    .await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!(r.status, 504);
}

#[tokio::test]
async fn reset_before_response_gives_502() {
    let origin = Origin::start(|_, _| Action::Reset).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    assert_eq!(kit::get(&trove, "/", &[]).await.status, 502);
}

#[tokio::test]
async fn malformed_response_gives_502() {
    let origin = Origin::start(|_, _| Action::RawClose(b"NOT HTTP AT ALL\r\n\r\n".to_vec())).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    assert_eq!(kit::get(&trove, "/", &[]).await.status, 502);
}

#[tokio::test]
async fn origin_sending_less_than_content_length_is_not_stored_and_client_sees_truncation() {
    let origin = Origin::start(|_, _| {
        Action::RawClose(
            b"HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: 100\r\n\r\nonly-this"
                .to_vec(),
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"GET /short HTTP/1.1\r\nHost: x\r\n\r\n").await;
    // The client must not get a complete 100-byte body: the connection is closed instead.
    assert!(c.read_response(false).await.is_none());
    // And nothing torn was stored: the next request goes to the origin again.
    let mut c = trove.client().await;
    c.send(b"GET /short HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(c.read_response(false).await.is_none());
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn origin_sending_more_than_content_length_does_not_leak_into_the_next_response() {
    let origin = Origin::start(|_, n| {
        if n == 0 {
            Action::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA-GARBAGE".to_vec())
        } else {
            respond(200, &[], b"second")
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    assert_eq!(kit::get(&trove, "/1", &[]).await.text(), "ok");
    let r = kit::get(&trove, "/2", &[]).await;
    assert!(r.status == 200 || r.status == 502, "status {}", r.status);
    assert!(!r.text().contains("EXTRA"));
}

#[tokio::test]
async fn silent_origin_mid_body_is_cut_off_after_the_body_timeout() {
    let origin = Origin::start(|_, _| Action::Slow {
        head: b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc".to_vec(),
        pieces: vec![b"defghij".to_vec()],
        pause: Duration::from_secs(30),
    })
    .await;
    let trove = Trove::reverse(&origin, |s| {
        s.timeouts.origin_body = Duration::from_millis(200)
    })
    .await;
    let mut c = trove.client().await;
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        c.read_response(false).await.is_none(),
        "truncated body ends the connection"
    );
}

#[tokio::test]
async fn upstreams_fail_over_on_connect_errors() {
    let (_held, dead) = kit::refusing_addr();
    let origin = Origin::start(|_, _| respond(200, &[], b"alive")).await;
    let trove = Trove::reverse(&origin, |s| {
        s.origins[0].upstreams = vec![format!("http://{dead}"), format!("http://{}", origin.addr)];
    })
    .await;
    for _ in 0..3 {
        assert_eq!(kit::get(&trove, "/", &[]).await.text(), "alive");
    }
}

#[tokio::test]
async fn obs_fold_in_a_response_is_unfolded_9112_5_2() {
    let origin = Origin::start(|_, _| {
        Action::Raw(b"HTTP/1.1 200 OK\r\nx-folded: a\r\n b\r\ncontent-length: 2\r\n\r\nok".to_vec())
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!(r.status, 200);
    assert!(!r.header("x-folded").unwrap_or("").contains('\n'));
}

#[tokio::test]
async fn request_headers_reach_the_origin_with_host_and_via() {
    let origin = Origin::start(|_, _| respond(200, &[], b"")).await;
    let trove = Trove::forward(|_| {}).await;
    kit::get(&trove, &origin.url("/h?q=1"), &[("x-custom", "yes")]).await;
    let seen = &origin.seen()[0];
    assert_eq!(seen.path, "/h?q=1", "origin-form to the origin");
    assert_eq!(seen.header("host"), Some(origin.addr.to_string().as_str()));
    assert_eq!(seen.header("x-custom"), Some("yes"));
    assert!(seen.header("via").unwrap().contains("trove"));
}

/// A request for trove's own address is refused before any connection is made (the
/// destination guard: 403); a loop through another proxy comes back carrying trove's own
/// `Via` name and is answered 508.
#[tokio::test]
async fn forwarding_loop_is_detected() {
    let trove = Trove::forward(|_| {}).await;
    let self_url = format!("http://{}/loop", trove.addr);
    let r = kit::get(&trove, &self_url, &[]).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(
        trove.metric(names::CLIENT_CONNECTIONS),
        1.0,
        "no connection to itself"
    );
    let origin = Origin::start(|_, _| respond(200, &[], b"")).await;
    let via = format!("1.1 other-proxy, 1.1 {}", trove.running.shared.via_name);
    let r = kit::get(&trove, &origin.url("/loop"), &[("via", &via)]).await;
    assert_eq!(r.status, 508);
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn overload_is_shed_with_a_quick_503() {
    let origin = Origin::start(|_, _| Action::Hang).await;
    let trove = std::sync::Arc::new(
        Trove::reverse(&origin, |s| {
            s.limits.max_pending_origin_requests = 1;
            s.timeouts.origin_response = Duration::from_secs(30);
        })
        .await,
    );
    let t = trove.clone();
    let waiting = tokio::spawn(async move { kit::get(&t, "/slow", &[]).await });
    assert!(kit::eventually(|| origin.hits() == 1).await);
    let r = kit::get(&trove, "/other", &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(trove.metric(names::SHED), 1.0);
    waiting.abort();
}

/// An origin's response framing is held to the same rule as a client's request (RFC 9110
/// §8.6, RFC 9112 §6.3): identical or zero-padded lengths are the one length, sent on once;
/// a length past 2^63 − 1 (hyper reads up to 2^64 − 3) or a differing list is a 502, and
/// nothing of that response reaches the client.
#[tokio::test]
async fn origin_content_length_is_normalised_or_a_502_9112_6_3() {
    let origin = Origin::start(|req, _| {
        let cl = match req.path.as_str() {
            "/list" => "3, 3",
            "/padded" => "000003",
            "/huge" => "9223372036854775808",
            _ => "3, 4",
        };
        Action::Raw(format!("HTTP/1.1 200 OK\r\ncontent-length: {cl}\r\n\r\nabc").into_bytes())
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    for path in ["/list", "/padded"] {
        let mut c = trove.client().await;
        c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await;
        let r = c.read_response(false).await.expect("a response");
        assert_eq!(r.status, 200, "{path}");
        let lengths: Vec<&str> = r
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(lengths, ["3"], "{path}");
        assert_eq!(r.body, b"abc", "{path}");
        // HEAD declares the GET's length, read by the same rule.
        let r = c.request("HEAD", path, &[]).await;
        assert_eq!(r.header("content-length"), Some("3"), "HEAD {path}");
    }
    for path in ["/huge", "/differing"] {
        let r = kit::get(&trove, path, &[]).await;
        assert_eq!(r.status, 502, "{path}");
        assert!(r.body.len() < 200 && !r.body.ends_with(b"abc"), "{path}");
    }
}
