//! Names are resolved once per answer, not once per request: trove's resolver keeps answers
//! (and failures) in a cache, for forward requests, CONNECT tunnels and the operator's
//! upstreams alike, and the destination guard keeps checking what the cache hands out.
//!
//! Only names this machine answers without a name server are used: `localhost` (from
//! `/etc/hosts`) and `*.invalid` (RFC 6761: never asked of DNS). As in `destinations.rs`,
//! only 127.0.0.1 is local, so a client bound to 127.0.0.2 is remote.

mod kit;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kit::{respond, Action, Client, Origin, Trove};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trove_proxy::metrics::names;
use trove_proxy::Settings;

const REMOTE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn only_127_0_0_1_is_local(s: &mut Settings) {
    s.access.local_clients = vec!["127.0.0.1/32".parse().unwrap()];
}

fn queries(trove: &Trove, result: &str) -> f64 {
    trove.metric(&format!(
        "{}{{result=\"{result}\"}}",
        names::RESOLVER_QUERIES
    ))
}

fn failures(trove: &Trove, reason: &str) -> f64 {
    trove.metric(&format!(
        "{}{{reason=\"{reason}\"}}",
        names::RESOLVER_FAILURES
    ))
}

/// A remote client's forward requests are checked before the cache, hits included; the
/// name is looked up for the first and answered from the resolver's cache after, and the
/// misses connect to the addresses the cache handed out.
#[tokio::test]
async fn a_remote_client_s_requests_for_a_name_look_it_up_once() {
    let origin =
        Origin::start(|_, _| respond(200, &[("cache-control", "max-age=300")], b"page")).await;
    let port = origin.addr.port();
    let trove = Trove::forward(|s| {
        only_127_0_0_1_is_local(s);
        s.access.allow_destinations = vec![format!("127.0.0.1:{port}")];
    })
    .await;
    let mut c = Client::connect_from(REMOTE, trove.addr).await;
    for i in 0..5 {
        let r = c.get(&format!("http://localhost:{port}/page"), &[]).await;
        assert_eq!((r.status, r.text().as_str()), (200, "page"), "request {i}");
    }
    let r = c.get(&format!("http://localhost:{port}/other"), &[]).await;
    assert_eq!(r.status, 200);
    assert!(trove.result(0).await.starts_with("TCP_MISS/200"));
    assert!(trove.result(4).await.starts_with("TCP_MEM_HIT/200"));
    assert!(trove.result(5).await.starts_with("TCP_MISS/200"));
    assert_eq!(origin.hits(), 2);
    assert_eq!(queries(&trove, "miss"), 1.0, "{}", trove.metrics());
    assert_eq!(queries(&trove, "hit"), 5.0);
    assert_eq!(trove.metric(names::RESOLVER_NAMES), 1.0);
    // Another port of the same name is not listed: the cached answer is checked for it
    // and refused, without a lookup.
    let r = c.get("http://localhost:1/", &[]).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(queries(&trove, "miss"), 1.0);
}

/// A name that does not exist is a 502, as it always was, and the failure is kept: the
/// name servers are asked once, not per request.
#[tokio::test]
async fn a_name_that_does_not_exist_is_a_502_and_the_failure_is_kept() {
    let trove = Trove::forward(only_127_0_0_1_is_local).await;
    for i in 0..3 {
        let mut c = Client::connect_from(REMOTE, trove.addr).await;
        let r = c.get("http://no-such-host.invalid/", &[]).await;
        assert_eq!(r.status, 502, "{}", r.text());
        // Its own detail (RFC 9209's dns_error), not a refused connection.
        let cs = r.header("cache-status").unwrap_or("");
        assert!(cs.contains("detail=dns-error"), "{cs}");
        assert!(r.text().contains("no-such-host.invalid"), "{}", r.text());
        let line = trove.result(i).await;
        assert!(
            line.ends_with("/502") && !line.starts_with("TCP_DENIED"),
            "{line}"
        );
    }
    let mut local = trove.client().await;
    assert_eq!(
        local.get("http://no-such-host.invalid/", &[]).await.status,
        502
    );
    assert_eq!(queries(&trove, "miss"), 1.0, "{}", trove.metrics());
    assert_eq!(failures(&trove, "not-found"), 1.0);
    assert!(queries(&trove, "negative-hit") >= 3.0);
    assert_eq!(failures(&trove, "timeout"), 0.0);
}

/// CONNECT tunnels to a name share the cache: the second tunnel is opened to the cached,
/// checked addresses.
#[tokio::test]
async fn connect_tunnels_to_a_name_share_the_cache() {
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let eport = echo.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            n.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let trove = Trove::forward(|s| {
        only_127_0_0_1_is_local(s);
        s.access.allow_destinations = vec![format!("127.0.0.0/8:{eport}")];
        s.connect.allowed_ports = vec![eport];
    })
    .await;
    for _ in 0..2 {
        let mut c = Client::connect_from(REMOTE, trove.addr).await;
        let authority = format!("localhost:{eport}");
        c.send(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
            .await;
        let r = c.read_response(true).await.expect("a response to CONNECT");
        assert_eq!(r.status, 200);
        c.stream.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        c.stream.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    assert_eq!(queries(&trove, "miss"), 1.0, "{}", trove.metrics());
    assert_eq!(queries(&trove, "hit"), 1.0);
}

/// The operator's upstreams are names too: each new origin connection used to resolve the
/// name again; now the cache answers.
#[tokio::test]
async fn an_operator_s_upstream_name_is_looked_up_once_for_many_connections() {
    let origin = Origin::start(|_, _| {
        Action::RawClose(
            b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nsite".to_vec(),
        )
    })
    .await;
    let port = origin.addr.port();
    let trove = Trove::reverse(&origin, |s| {
        only_127_0_0_1_is_local(s);
        s.origins[0].upstreams = vec![format!("http://localhost:{port}")];
    })
    .await;
    let mut c = Client::connect_from(REMOTE, trove.addr).await;
    for i in 0..3 {
        let r = c.get(&format!("/page{i}"), &[]).await;
        assert_eq!((r.status, r.text().as_str()), (200, "site"), "request {i}");
    }
    assert_eq!(origin.connections(), 3, "one origin connection per request");
    assert_eq!(queries(&trove, "miss"), 1.0, "{}", trove.metrics());
    assert_eq!(queries(&trove, "hit"), 2.0);
}

/// A local client's forward requests resolve when a connection is made: once for the name,
/// however many connections.
#[tokio::test]
async fn a_local_client_s_new_origin_connections_share_one_lookup() {
    let origin = Origin::start(|_, _| {
        Action::RawClose(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nlocal".to_vec(),
        )
    })
    .await;
    let port = origin.addr.port();
    let trove = Trove::forward(only_127_0_0_1_is_local).await;
    let mut c = Client::connect(SocketAddr::new(
        Ipv4Addr::LOCALHOST.into(),
        trove.addr.port(),
    ))
    .await;
    for i in 0..3 {
        let r = c.get(&format!("http://localhost:{port}/p{i}"), &[]).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(origin.connections(), 3);
    assert_eq!(queries(&trove, "miss"), 1.0, "{}", trove.metrics());
    assert_eq!(queries(&trove, "hit"), 2.0);
}
