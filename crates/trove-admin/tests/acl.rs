//! The admin listener's own ACL (`[admin] allow`), over real sockets: a peer outside it gets
//! one 403 and a closed connection, and never the figures; a peer inside it is served.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Figures {
    refused: AtomicUsize,
}

impl trove_admin::Source for Figures {
    fn metrics(&self) -> String {
        "trove_secret_figure 42\n".into()
    }

    fn status_page(&self) -> String {
        "<p>status</p>".into()
    }

    fn refused(&self, _peer: SocketAddr) {
        self.refused.fetch_add(1, Ordering::SeqCst);
    }
}

async fn admin(allow: trove_admin::Allow) -> (SocketAddr, Arc<Figures>) {
    let l = trove_admin::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = l.local_addr();
    let figures = Arc::new(Figures {
        refused: AtomicUsize::new(0),
    });
    l.serve(allow, figures.clone());
    (addr, figures)
}

/// Sends one request from the local address `from`; the whole response, read to the close.
async fn request_from(from: IpAddr, to: SocketAddr, path: &str) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    let mut s = socket.connect(to).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("the admin listener closes the connection")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

const ONE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const TWO: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

#[tokio::test]
async fn a_peer_outside_admin_allow_gets_403_and_no_figures() {
    let (addr, figures) = admin(trove_admin::Allow::new(vec!["127.0.0.1/32"
        .parse()
        .unwrap()]))
    .await;
    let ok = request_from(ONE, addr, "/metrics").await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains("trove_secret_figure 42"));
    for path in ["/metrics", "/", "/healthz"] {
        let refused = request_from(TWO, addr, path).await;
        assert!(refused.starts_with("HTTP/1.1 403"), "{path}: {refused}");
        assert!(refused.contains("[admin] allow"), "{refused}");
        assert!(!refused.contains("trove_secret_figure"));
        assert!(!refused.contains("status"));
    }
    assert_eq!(figures.refused.load(Ordering::SeqCst), 3);
}

/// A refused peer that sends nothing is not kept: the connection closes within the
/// header timeout.
#[tokio::test]
async fn a_silent_refused_peer_is_closed() {
    let (addr, _) = admin(trove_admin::Allow::new(Vec::new())).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let mut out = Vec::new();
    let limit = trove_admin::REFUSED_HEAD_TIMEOUT + Duration::from_secs(5);
    let read = tokio::time::timeout(limit, s.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the connection was held open");
}

#[tokio::test]
async fn the_default_admits_loopback_only() {
    let allow = trove_admin::Allow::default();
    for ip in ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"] {
        assert!(allow.allows(ip.parse().unwrap()), "{ip}");
    }
    for ip in ["10.0.0.1", "192.0.2.2", "::2", "fe80::1"] {
        assert!(!allow.allows(ip.parse().unwrap()), "{ip}");
    }
    let (addr, _) = admin(allow).await;
    assert!(request_from(TWO, addr, "/healthz")
        .await
        .starts_with("HTTP/1.1 200"));
}
