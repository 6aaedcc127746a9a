//! Server-side request forgery (issue 7): a client the ACL admits gains no reach it didn't
//! have. The SSRF table: every spelling of a loopback, unspecified or link-local address,
//! through an absolute-form GET and through CONNECT, from a client that is not local, is
//! refused with 403 and the origin behind it never sees a connection; a local client still
//! reaches what its host reaches; trove's own listeners, multicast and broadcast are refused
//! to everyone; `[access] allow_destinations` and `deny_private_destinations` do what they
//! say.
//!
//! Every client is on loopback; the settings count only 127.0.0.1 as local
//! (`[access] local_clients`), so a client whose socket is bound to 127.0.0.2 is remote.

mod kit;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kit::{respond, Client, Origin, Trove};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trove_proxy::metrics::names;
use trove_proxy::Settings;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const REMOTE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// Only 127.0.0.1 is local; 127.0.0.2 is remote (both are in the default `[access] allow`).
fn only_127_0_0_1_is_local(s: &mut Settings) {
    s.access.local_clients = vec!["127.0.0.1/32".parse().unwrap()];
}

/// Ways to write a host for this machine's loopback origin at 127.0.0.1: the spelling,
/// whether a connection to it reaches 127.0.0.1 (else it reaches another address of this
/// host, where nothing listens), and the reason a remote client is refused.
const LOOPBACK_SPELLINGS: [(&str, bool, &str); 17] = [
    ("127.0.0.1", true, "loopback"),
    ("127.1", true, "loopback"),
    ("127.0.1", true, "loopback"),
    ("2130706433", true, "loopback"),
    ("0x7f.1", true, "loopback"),
    ("0x7f000001", true, "loopback"),
    ("017700000001", true, "loopback"),
    ("0177.0.0.1", true, "loopback"),
    ("[::ffff:127.0.0.1]", true, "loopback"),
    ("[::ffff:7f00:1]", true, "loopback"),
    ("localhost", true, "loopback"),
    ("0.0.0.0", true, "unspecified"),
    ("[::1]", false, "loopback"),
    ("[::127.0.0.1]", false, "loopback"),
    ("[::]", false, "unspecified"),
    // IPv6 forms that embed an IPv4 address: SIIT (RFC 2765) and 6to4 (RFC 3056).
    ("[::ffff:0:7f00:1]", false, "loopback"),
    ("[2002:7f00:1::]", false, "loopback"),
];

/// Where link-local destinations (the cloud metadata service) are; nothing is connected to.
const LINK_LOCAL_SPELLINGS: [&str; 5] = [
    "169.254.169.254",
    "169.254.43518",
    "0xa9fea9fe",
    "[::ffff:169.254.169.254]",
    "[fe80::1]",
];

/// A TCP server standing in for a TLS server behind CONNECT: echoes, counts connections.
struct Echo {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Echo {
    async fn start() -> Echo {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        Echo { addr, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A listener that only counts connections (a stand-in for the admin listener).
async fn counting_listener() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&n);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    (addr, n)
}

async fn get_from(from: IpAddr, trove: &Trove, url: &str) -> kit::Response {
    let mut c = Client::connect_from(from, trove.addr).await;
    c.get(url, &[]).await
}

/// Sends `CONNECT authority`; the response head, and the client for the tunnel.
async fn connect_from(from: IpAddr, trove: &Trove, authority: &str) -> (kit::Response, Client) {
    let mut c = Client::connect_from(from, trove.addr).await;
    c.send(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await;
    let r = c.read_response(true).await.expect("a response to CONNECT");
    (r, c)
}

/// Sends bytes through an open tunnel and reads them back from the echo server.
async fn echoes(c: &mut Client) -> bool {
    c.stream.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        c.stream.read_exact(&mut buf),
    )
    .await;
    matches!(read, Ok(Ok(_))) && &buf == b"ping"
}

fn refused_count(trove: &Trove, reason: &str) -> f64 {
    trove.metric(&format!(
        "{}{{reason=\"{reason}\"}}",
        names::DESTINATIONS_REFUSED
    ))
}

#[tokio::test]
async fn a_remote_client_reaches_no_loopback_spelling_through_absolute_form() {
    let origin = Origin::start(|_, _| respond(200, &[], b"secret")).await;
    let trove = Trove::forward(only_127_0_0_1_is_local).await;
    let port = origin.addr.port();
    for (i, (host, _, reason)) in LOOPBACK_SPELLINGS.iter().enumerate() {
        let r = get_from(REMOTE, &trove, &format!("http://{host}:{port}/row{i}")).await;
        assert_eq!(r.status, 403, "{host}: {}", r.text());
        assert!(r.text().contains(reason), "{host}: {}", r.text());
        assert!(!r.text().contains("secret"));
        assert!(
            trove.result(i).await.starts_with("TCP_DENIED/403"),
            "{host}"
        );
    }
    assert_eq!(origin.connections(), 0, "the origin was contacted");
    assert_eq!(refused_count(&trove, "loopback"), 15.0);
    assert_eq!(refused_count(&trove, "unspecified"), 2.0);
}

#[tokio::test]
async fn a_remote_client_reaches_no_loopback_spelling_through_connect() {
    let echo = Echo::start().await;
    let port = echo.addr.port();
    let trove = Trove::forward(|s| {
        only_127_0_0_1_is_local(s);
        s.connect.allowed_ports = vec![port];
    })
    .await;
    for (i, (host, _, _)) in LOOPBACK_SPELLINGS.iter().enumerate() {
        let (r, _) = connect_from(REMOTE, &trove, &format!("{host}:{port}")).await;
        assert_eq!(r.status, 403, "{host}");
        assert!(
            trove.result(i).await.starts_with("TCP_DENIED/403"),
            "{host}"
        );
    }
    assert_eq!(
        echo.accepted(),
        0,
        "the server behind the tunnel was contacted"
    );
    assert_eq!(refused_count(&trove, "loopback"), 15.0);
    assert_eq!(refused_count(&trove, "unspecified"), 2.0);
}

/// `localhost` looks like any name; it resolves to loopback and is refused for that.
#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_to_a_remote_client() {
    let origin = Origin::start(|_, _| respond(200, &[], b"secret")).await;
    let trove = Trove::forward(only_127_0_0_1_is_local).await;
    let url = format!("http://localhost:{}/", origin.addr.port());
    let r = get_from(REMOTE, &trove, &url).await;
    assert_eq!(r.status, 403);
    assert!(r.text().contains("loopback"), "{}", r.text());
    assert_eq!(origin.connections(), 0);
    // The same name is fine for a local client.
    assert_eq!(get_from(LOCAL, &trove, &url).await.status, 200);
}

#[tokio::test]
async fn a_remote_client_reaches_no_link_local_address_or_cloud_metadata() {
    let trove = Trove::forward(|s| {
        only_127_0_0_1_is_local(s);
        s.connect.allowed_ports = vec![80, 443];
    })
    .await;
    for host in LINK_LOCAL_SPELLINGS {
        let r = get_from(REMOTE, &trove, &format!("http://{host}/latest/meta-data/")).await;
        assert_eq!(r.status, 403, "{host}: {}", r.text());
        assert!(r.text().contains("link-local"), "{host}: {}", r.text());
        let (r, _) = connect_from(REMOTE, &trove, &format!("{host}:443")).await;
        assert_eq!(r.status, 403, "CONNECT {host}");
    }
    assert_eq!(refused_count(&trove, "link-local"), 10.0);
}

/// The guard keeps remote clients out; local ones (a process on this host) still reach
/// loopback services, by any spelling.
#[tokio::test]
async fn a_local_client_still_reaches_loopback_by_every_spelling() {
    let origin = Origin::start(|_, _| respond(200, &[], b"local service")).await;
    let echo = Echo::start().await;
    let (port, eport) = (origin.addr.port(), echo.addr.port());
    let trove = Trove::forward(|s| {
        only_127_0_0_1_is_local(s);
        s.connect.allowed_ports = vec![eport];
    })
    .await;
    let mut reached = 0;
    for (i, (host, reaches, _)) in LOOPBACK_SPELLINGS.iter().enumerate() {
        let r = get_from(LOCAL, &trove, &format!("http://{host}:{port}/row{i}")).await;
        let (t, mut c) = connect_from(LOCAL, &trove, &format!("{host}:{eport}")).await;
        if *reaches {
            reached += 1;
            assert_eq!(r.status, 200, "{host}: {}", r.text());
            assert_eq!(r.text(), "local service");
            assert_eq!(t.status, 200, "CONNECT {host}");
            assert!(echoes(&mut c).await, "CONNECT {host}");
        } else {
            // Nothing listens there: a failure to connect, not a refusal.
            assert_eq!(r.status, 502, "{host}: {}", r.text());
            assert_eq!(t.status, 502, "CONNECT {host}");
        }
    }
    assert_eq!(origin.hits(), reached);
    assert_eq!(echo.accepted(), reached);
    assert!(trove.metrics().contains(&format!(
        "{}{{reason=\"loopback\"}} 0",
        names::DESTINATIONS_REFUSED
    )));
}

#[tokio::test]
async fn multicast_and_broadcast_are_refused_even_to_a_local_client() {
    let trove = Trove::forward(|s| s.connect.allowed_ports = vec![443]).await;
    for (host, reason) in [
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("[ff02::1]", "multicast"),
        ("255.255.255.255", "broadcast"),
    ] {
        let r = get_from(LOCAL, &trove, &format!("http://{host}/")).await;
        assert_eq!(r.status, 403, "{host}: {}", r.text());
        assert!(r.text().contains(reason), "{host}: {}", r.text());
        let (r, _) = connect_from(LOCAL, &trove, &format!("{host}:443")).await;
        assert_eq!(r.status, 403, "CONNECT {host}");
    }
    assert_eq!(refused_count(&trove, "multicast"), 6.0);
    assert_eq!(refused_count(&trove, "broadcast"), 2.0);
}

/// trove's own proxy port (a loop) and its admin port (which `[admin] allow` guards) are
/// refused to everyone, local clients included, by any address that reaches them.
#[tokio::test]
async fn trove_s_own_listeners_are_refused_even_to_a_local_client() {
    let (admin, admin_connections) = counting_listener().await;
    let trove = Trove::forward(|s| {
        s.other_listeners = vec![admin];
        s.connect.allowed_ports = vec![admin.port()];
    })
    .await;
    let (own, ap) = (trove.addr.port(), admin.port());
    for url in [
        format!("http://127.0.0.1:{own}/"),
        format!("http://127.1:{own}/"),
        format!("http://0.0.0.0:{own}/"),
        format!("http://localhost:{own}/"),
        format!("http://127.0.0.1:{ap}/metrics"),
        format!("http://2130706433:{ap}/metrics"),
        format!("http://[::ffff:127.0.0.1]:{ap}/metrics"),
    ] {
        let r = get_from(LOCAL, &trove, &url).await;
        assert_eq!(r.status, 403, "{url}: {}", r.text());
        assert!(r.text().contains("own listeners"), "{url}: {}", r.text());
    }
    for authority in [format!("127.0.0.1:{ap}"), format!("localhost:{ap}")] {
        let (r, _) = connect_from(LOCAL, &trove, &authority).await;
        assert_eq!(r.status, 403, "CONNECT {authority}");
    }
    assert_eq!(admin_connections.load(Ordering::SeqCst), 0);
    assert_eq!(refused_count(&trove, "own-listener"), 9.0);
    // One connection per client above, none from trove to itself.
    assert_eq!(trove.metric(names::CLIENT_CONNECTIONS), 9.0);
}

/// A wildcard listener is reached through every address of the host, not only loopback.
#[tokio::test]
async fn trove_s_own_wildcard_listener_is_refused_through_a_non_loopback_address() {
    let Some(host_ip) = non_loopback_address() else {
        eprintln!("skipped: this machine has no non-loopback IPv4 address");
        return;
    };
    let dir = kit::TempDir::new();
    let mut s = Settings::default();
    s.listeners[0].addr = "0.0.0.0:0".parse().unwrap();
    s.log.access = dir.0.join("access.log").to_string_lossy().to_string();
    let running = trove_proxy::start(s).await.unwrap();
    let port = running.addrs[0].1.port();
    let mut c = Client::connect(SocketAddr::new(LOCAL, port)).await;
    let r = c.get(&format!("http://{host_ip}:{port}/"), &[]).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("own listeners"), "{}", r.text());
    assert_eq!(
        running
            .shared
            .metrics
            .client_accepted
            .load(Ordering::SeqCst),
        1,
        "trove connected to itself"
    );
}

/// This host's address on its default route, if it has one (no packet is sent).
fn non_loopback_address() -> Option<IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    for probe in ["192.0.2.1:80", "198.51.100.1:80", "10.255.255.1:80"] {
        if s.connect(probe).is_ok() {
            let ip = s.local_addr().ok()?.ip();
            if !ip.is_loopback() && !ip.is_unspecified() {
                return Some(ip);
            }
        }
    }
    None
}

#[tokio::test]
async fn an_exception_lets_a_remote_client_reach_the_listed_destination_only() {
    let origin = Origin::start(|_, _| respond(200, &[], b"listed")).await;
    let echo = Echo::start().await;
    let other = Origin::start(|_, _| respond(200, &[], b"not listed")).await;
    let (port, eport) = (origin.addr.port(), echo.addr.port());
    let trove = Trove::forward(|s| {
        only_127_0_0_1_is_local(s);
        s.access.allow_destinations =
            vec![format!("127.0.0.1:{port}"), format!("127.0.0.0/8:{eport}")];
        s.connect.allowed_ports = vec![eport, other.addr.port()];
    })
    .await;
    for host in ["127.0.0.1", "2130706433", "[::ffff:127.0.0.1]"] {
        let r = get_from(REMOTE, &trove, &format!("http://{host}:{port}/")).await;
        assert_eq!((r.status, r.text().as_str()), (200, "listed"), "{host}");
    }
    let (t, mut c) = connect_from(REMOTE, &trove, &format!("127.1:{eport}")).await;
    assert_eq!(t.status, 200);
    assert!(echoes(&mut c).await);
    // Another port of the same address is not listed.
    let r = get_from(REMOTE, &trove, &other.url("/")).await;
    assert_eq!(r.status, 403);
    let (t, _) = connect_from(REMOTE, &trove, &other.addr.to_string()).await;
    assert_eq!(t.status, 403);
    assert_eq!(other.connections(), 0);
}

#[tokio::test]
async fn private_destinations_are_refused_to_remote_clients_on_request() {
    let trove = Trove::forward(|s| {
        only_127_0_0_1_is_local(s);
        s.access.deny_private_destinations = true;
        s.connect.allowed_ports = vec![443];
    })
    .await;
    for host in [
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "100.64.0.1",
        "[fd00::1]",
        "[::ffff:10.0.0.1]",
        "012.0.0.1",
    ] {
        let r = get_from(REMOTE, &trove, &format!("http://{host}/")).await;
        assert_eq!(r.status, 403, "{host}: {}", r.text());
        assert!(r.text().contains("private"), "{host}: {}", r.text());
        let (r, _) = connect_from(REMOTE, &trove, &format!("{host}:443")).await;
        assert_eq!(r.status, 403, "CONNECT {host}");
    }
    assert_eq!(refused_count(&trove, "private"), 14.0);
}

/// A response a local client fetched from a loopback service is stored like any other; a
/// remote client asking for the same URL is refused before the cache is consulted, so it
/// gets no copy either.
#[tokio::test]
async fn a_stored_response_from_loopback_is_not_served_to_a_remote_client() {
    let origin =
        Origin::start(|_, _| respond(200, &[("cache-control", "max-age=300")], b"secret")).await;
    let trove = Trove::forward(only_127_0_0_1_is_local).await;
    let url = origin.url("/cached");
    assert_eq!(get_from(LOCAL, &trove, &url).await.text(), "secret");
    assert_eq!(get_from(LOCAL, &trove, &url).await.text(), "secret");
    assert!(trove.result(1).await.starts_with("TCP_MEM_HIT/200"));
    let r = get_from(REMOTE, &trove, &url).await;
    assert_eq!(r.status, 403);
    assert!(!r.text().contains("secret"));
    assert!(trove.result(2).await.starts_with("TCP_DENIED/403"));
    assert_eq!(origin.hits(), 1);
}

/// A name that does not resolve is a failure to reach the origin (502), as before the
/// guard, not a refusal.
#[tokio::test]
async fn a_name_that_does_not_resolve_is_a_502_not_a_refusal() {
    let trove = Trove::forward(only_127_0_0_1_is_local).await;
    for from in [REMOTE, LOCAL] {
        let r = get_from(from, &trove, "http://no-such-host.invalid/").await;
        assert_eq!(r.status, 502, "{from}: {}", r.text());
    }
    assert!(trove.result(0).await.ends_with("/502"));
    assert!(!trove.result(0).await.starts_with("TCP_DENIED"));
    assert_eq!(
        trove.metric(&format!(
            "{}{{reason=\"loopback\"}}",
            names::DESTINATIONS_REFUSED
        )),
        0.0
    );
}

/// Routes the operator configured are trusted: a reverse proxy in front of a loopback
/// origin serves remote clients as before.
#[tokio::test]
async fn an_operator_s_loopback_upstream_serves_remote_clients() {
    let origin = Origin::start(|_, _| respond(200, &[], b"site")).await;
    let trove = Trove::reverse(&origin, only_127_0_0_1_is_local).await;
    let mut c = Client::connect_from(REMOTE, trove.addr).await;
    let r = c.get("/page", &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "site"));
}
