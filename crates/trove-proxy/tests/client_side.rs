//! The client side: persistent connections, HTTP/1.0 keep-alive, pipelining, ACLs,
//! CONNECT, and malformed or smuggling requests refused with 400 and a log line.

mod kit;

use kit::{respond, Origin, Trove};
use trove_proxy::metrics::names;

async fn hello_origin() -> Origin {
    Origin::start(|req, _| {
        respond(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("content-type", "text/plain"),
            ],
            format!("hello {}", req.path).as_bytes(),
        )
    })
    .await
}

#[tokio::test]
async fn second_request_through_forward_proxy_is_a_hit() {
    let origin = hello_origin().await;
    let trove = Trove::forward(|_| {}).await;
    let a = kit::get(&trove, &origin.url("/a"), &[]).await;
    let b = kit::get(&trove, &origin.url("/a"), &[]).await;
    assert_eq!(a.text(), "hello /a");
    assert_eq!(b.text(), "hello /a");
    assert_eq!(origin.hits(), 1);
    assert_eq!(trove.result(0).await, "TCP_MISS/200");
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");
    assert!(b.header("cache-status").unwrap().contains("hit"));
    assert!(b.header("age").is_some());
}

#[tokio::test]
async fn persistent_connection_serves_many_requests_9112_9_3() {
    let origin = hello_origin().await;
    let trove = Trove::forward(|_| {}).await;
    let mut c = trove.client().await;
    for i in 0..5 {
        let r = c.get(&origin.url(&format!("/{i}")), &[]).await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(trove.metric(names::CLIENT_CONNECTIONS), 1.0);
    assert_eq!(trove.metric(names::CLIENT_CONNECTIONS_REUSED), 4.0);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_9112_9_3_2() {
    let origin = hello_origin().await;
    let trove = Trove::forward(|_| {}).await;
    let mut c = trove.client().await;
    let mut batch = String::new();
    for i in 0..4 {
        batch.push_str(&format!(
            "GET {} HTTP/1.1\r\nHost: x\r\n\r\n",
            origin.url(&format!("/p{i}"))
        ));
    }
    c.send(batch.as_bytes()).await;
    for i in 0..4 {
        let r = c.read_response(false).await.unwrap();
        assert_eq!(r.text(), format!("hello /p{i}"));
    }
}

#[tokio::test]
async fn http10_keep_alive_honours_proxy_connection() {
    let origin = hello_origin().await;
    let trove = Trove::forward(|_| {}).await;
    let mut c = trove.client().await;
    let req = format!(
        "GET {} HTTP/1.0\r\nProxy-Connection: keep-alive\r\n\r\n",
        origin.url("/k")
    );
    c.send(req.as_bytes()).await;
    let r = c.read_response(false).await.unwrap();
    assert_eq!(r.header("connection"), Some("keep-alive"));
    c.send(req.as_bytes()).await;
    assert_eq!(c.read_response(false).await.unwrap().text(), "hello /k");
    // Without keep-alive an HTTP/1.0 connection closes after the response.
    let mut c = trove.client().await;
    c.send(format!("GET {} HTTP/1.0\r\n\r\n", origin.url("/k")).as_bytes())
        .await;
    assert_eq!(c.read_response(false).await.unwrap().status, 200);
    assert!(c.closed().await);
}

#[tokio::test]
async fn clients_outside_the_acl_get_403() {
    let origin = hello_origin().await;
    let trove = Trove::forward(|s| s.access.allow = vec!["10.0.0.0/8".parse().unwrap()]).await;
    let r = kit::get(&trove, &origin.url("/a"), &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(origin.hits(), 0);
    assert_eq!(trove.result(0).await, "TCP_DENIED/403");
}

#[tokio::test]
async fn origin_form_on_a_forward_proxy_is_refused() {
    let trove = Trove::forward(|_| {}).await;
    let r = kit::get(&trove, "/relative", &[]).await;
    assert_eq!(r.status, 400);
}

async fn refused(raw: &str, status: u16) {
    let origin = hello_origin().await;
    let trove = Trove::forward(|_| {}).await;
    let mut c = trove.client().await;
    c.send(raw.replace("ORIGIN", &origin.addr.to_string()).as_bytes())
        .await;
    let r = c.read_response(false).await.expect("an error response");
    assert_eq!(r.status, status, "for {raw:?}");
    assert!(c.closed().await, "connection closed after {raw:?}");
    assert_eq!(origin.hits(), 0, "nothing forwarded for {raw:?}");
    let line = trove.log_lines(1).await;
    assert!(line[0].contains(&format!("NONE_NONE/{status}")), "{line:?}");
    assert_eq!(trove.metric(names::BAD_REQUESTS), 1.0);
}

#[tokio::test]
async fn content_length_with_transfer_encoding_is_refused_9112_6_3() {
    refused(
        "POST http://ORIGIN/ HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    )
    .await;
}

#[tokio::test]
async fn differing_content_lengths_are_refused_9112_6_3() {
    refused(
        "POST http://ORIGIN/ HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
        400,
    )
    .await;
}

#[tokio::test]
async fn content_length_past_2_63_is_refused_9112_6_3() {
    refused(
        "POST http://ORIGIN/ HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775808\r\n\r\nabc",
        400,
    )
    .await;
}

/// RFC 9110 §8.6: a list of identical lengths, repeated fields and leading zeros are read as
/// the one length, and the origin gets that length once, in its plain form: never the field
/// as the client sent it (an origin reading `3, 3` or `000003` its own way would frame the
/// body differently).
#[tokio::test]
async fn duplicate_and_zero_padded_content_lengths_reach_the_origin_as_one_9110_8_6() {
    let origin = Origin::start(|_, _| respond(200, &[], b"ok")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let shapes = [
        "Content-Length: 3, 3",
        "Content-Length: 000003",
        "Content-Length: 3\r\nContent-Length: 3",
        "Content-Length: 003, 3",
    ];
    for (i, cl) in shapes.iter().enumerate() {
        let mut c = trove.client().await;
        c.send(format!("POST /u HTTP/1.1\r\nHost: x\r\n{cl}\r\n\r\nabc").as_bytes())
            .await;
        let r = c.read_response(false).await.expect("a response");
        assert_eq!(r.status, 200, "{cl}");
        let seen = &origin.seen()[i];
        let lengths: Vec<&str> = seen
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(lengths, ["3"], "{cl}");
        assert_eq!(seen.body, b"abc", "{cl}");
    }
}

#[tokio::test]
async fn obs_fold_is_refused_9112_5_2() {
    refused(
        "GET http://ORIGIN/ HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  folded\r\n\r\n",
        400,
    )
    .await;
}

#[tokio::test]
async fn transfer_encoding_not_ending_in_chunked_is_refused_9112_6_3() {
    refused(
        "POST http://ORIGIN/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
        400,
    )
    .await;
}

#[tokio::test]
async fn missing_host_is_refused_9112_3_2() {
    refused("GET http://ORIGIN/ HTTP/1.1\r\n\r\n", 400).await;
}

#[tokio::test]
async fn garbage_request_line_is_refused() {
    refused("HELLO THERE\r\n\r\n", 400).await;
}

#[tokio::test]
async fn oversized_head_is_refused_with_431() {
    let big = format!(
        "GET http://ORIGIN/ HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70_000)
    );
    refused(&big, 431).await;
}

#[tokio::test]
async fn too_many_header_fields_are_refused_with_431() {
    let mut req = String::from("GET http://ORIGIN/ HTTP/1.1\r\nHost: x\r\n");
    for i in 0..150 {
        req.push_str(&format!("X-H{i}: v\r\n"));
    }
    req.push_str("\r\n");
    refused(&req, 431).await;
}

#[tokio::test]
async fn bad_chunking_is_refused_and_the_connection_closed() {
    let origin = Origin::start(|_, _| respond(200, &[], b"ok")).await;
    let trove = Trove::forward(|_| {}).await;
    let mut c = trove.client().await;
    c.send(
        format!(
            "POST {} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
            origin.url("/p")
        )
        .as_bytes(),
    )
    .await;
    let r = c.read_response(false).await.unwrap();
    assert_eq!(r.status, 400);
    assert!(c.closed().await);
}

#[tokio::test]
async fn chunked_request_body_is_forwarded() {
    let origin = Origin::start(|req, _| respond(200, &[], &req.body)).await;
    let trove = Trove::forward(|_| {}).await;
    let mut c = trove.client().await;
    c.send(
        format!(
            "POST {} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            origin.url("/echo")
        )
        .as_bytes(),
    )
    .await;
    let r = c.read_response(false).await.unwrap();
    assert_eq!(r.text(), "hello world");
}

#[tokio::test]
async fn expect_100_continue_gets_an_interim_response() {
    let origin = Origin::start(|req, _| respond(200, &[], &req.body)).await;
    let trove = Trove::forward(|_| {}).await;
    let mut c = trove.client().await;
    c.send(
        format!(
            "PUT {} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n",
            origin.url("/u")
        )
        .as_bytes(),
    )
    .await;
    let interim = c.read_response(true).await.unwrap();
    assert_eq!(interim.status, 100);
    c.send(b"abc").await;
    assert_eq!(c.read_response(false).await.unwrap().text(), "abc");
}

#[tokio::test]
async fn idle_client_connections_are_closed_after_the_timeout() {
    let trove =
        Trove::forward(|s| s.timeouts.client_idle = std::time::Duration::from_millis(200)).await;
    let mut c = trove.client().await;
    assert!(c.closed().await);
}

/// An idle connection's wait has two parts (`client::conn::IdleWait`: the first 2 s, then
/// the rest of `client_idle` with a graceful stop noticed at once), on one timer: a
/// connection idle past the first part is still served, and one idle for all of
/// `client_idle` is closed.
#[tokio::test]
async fn an_idle_connection_past_its_first_wait_is_served_then_closed_at_the_timeout() {
    let origin = hello_origin().await;
    let trove =
        Trove::forward(|s| s.timeouts.client_idle = std::time::Duration::from_millis(3000)).await;
    let mut c = trove.client().await;
    assert_eq!(c.get(&origin.url("/ok"), &[]).await.status, 200);
    // Into the second part of the wait, then a request on the same connection.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(c.get(&origin.url("/ok"), &[]).await.status, 200);
    // Idle again for longer than client_idle: closed (within `closed`'s 5 s).
    assert!(c.closed().await, "closed after client_idle");
}

#[tokio::test]
async fn vanished_client_mid_head_does_not_disturb_others() {
    let origin = hello_origin().await;
    let trove = Trove::forward(|_| {}).await;
    {
        let mut c = trove.client().await;
        c.send(b"GET http://127.0.0.1/ HTTP/1.1\r\nHo").await;
    }
    let r = kit::get(&trove, &origin.url("/ok"), &[]).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn connect_tunnel_reaches_allowed_ports_only() {
    // A plain TCP echo server stands in for a TLS server.
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = echo.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = echo.accept().await.unwrap();
        let (mut r, mut w) = s.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    let trove = Trove::forward(|s| s.connect.allowed_ports = vec![port]).await;
    let mut c = trove.client().await;
    c.send(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
    .await;
    let r = c.read_response(true).await.unwrap();
    assert_eq!(r.status, 200);
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    c.stream.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    c.stream.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
    drop(c);
    assert!(trove.log_lines(1).await[0].contains("TCP_TUNNEL/200"));

    let trove = Trove::forward(|_| {}).await; // default: 443 only
    let mut c = trove.client().await;
    c.send(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await;
    let r = c.read_response(false).await.unwrap();
    assert_eq!(r.status, 403);
    // The refusal names the setting, as the destination guard's do.
    assert!(
        r.text().contains(&format!("port {port}")) && r.text().contains("[connect] allowed_ports"),
        "{}",
        r.text()
    );
    // Logged with the bytes it sent, head and body, as any response is.
    let line = trove.log_lines(1).await[0].clone();
    let bytes: usize = line.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert!(line.contains("TCP_DENIED/403"), "{line}");
    assert!(bytes > r.text().len(), "{line}");
}

#[tokio::test]
async fn http10_client_gets_a_close_delimited_body_when_length_is_unknown() {
    let origin = Origin::start(|_, _| {
        kit::Action::Raw(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n".to_vec())
    })
    .await;
    let trove = Trove::forward(|_| {}).await;
    let mut c = trove.client().await;
    c.send(
        format!(
            "GET {} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            origin.url("/u")
        )
        .as_bytes(),
    )
    .await;
    let r = c.read_response(false).await.unwrap();
    assert!(
        r.header("transfer-encoding").is_none(),
        "no chunked coding to an HTTP/1.0 client"
    );
    assert_eq!(r.text(), "abcde");
}
