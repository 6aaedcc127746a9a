//! Cache poisoning across routes: the route a request takes and the key its response is stored
//! under must always name the same URL (issue: "the route and the cache key disagree").
//!
//! The set-up is the one the attack was found with: two reverse routes for one host
//! (`victim.example /` → origin A, `victim.example /api` → origin B) and `*` → B. Each origin
//! answers with its name and the path it saw, cacheable for a minute. For every request shape
//! the test checks three things agree: the origin that answered is the one the routing table
//! gives for the normalised URL, that origin saw exactly the normalised path, and a clean
//! request for the normalised URL afterwards is a hit with the same body. Shapes that are not
//! valid targets must be refused with a 400 before any origin is contacted.

mod kit;

use kit::{respond, Origin, Trove};
use trove_proxy::settings::OriginRoute;

struct Setup {
    a: Origin,
    b: Origin,
    trove: Trove,
}

async fn origin(name: &'static str) -> Origin {
    Origin::start(move |req, _| {
        let body = format!("{name} {}", req.path);
        respond(200, &[("cache-control", "max-age=60")], body.as_bytes())
    })
    .await
}

async fn setup() -> Setup {
    let a = origin("A").await;
    let b = origin("B").await;
    let (aa, ba) = (a.addr, b.addr);
    let trove = Trove::reverse(&a, move |s| {
        s.origins = vec![
            OriginRoute {
                host: "victim.example".into(),
                path_prefix: "/".into(),
                upstreams: vec![format!("http://{aa}")],
                tls: None,
            },
            OriginRoute {
                host: "victim.example".into(),
                path_prefix: "/api".into(),
                upstreams: vec![format!("http://{ba}")],
                tls: None,
            },
            OriginRoute {
                host: "*".into(),
                path_prefix: "/".into(),
                upstreams: vec![format!("http://{ba}")],
                tls: None,
            },
        ];
    })
    .await;
    Setup { a, b, trove }
}

/// Which origin the table gives for a normalised host and path.
fn owner(host: &str, path: &str) -> &'static str {
    if host == "victim.example" && !path.starts_with("/api") {
        "A"
    } else {
        "B"
    }
}

/// Sends `target` with the `Host` field `host` (raw bytes, no other fields) on a new
/// connection and returns the status and body.
async fn raw(s: &Setup, target: &str, host: &str) -> (u16, String) {
    let mut c = s.trove.client().await;
    c.send(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await;
    match c.read_response(false).await {
        Some(r) => (r.status, r.text()),
        None => (0, String::new()),
    }
}

fn hits(s: &Setup) -> usize {
    s.a.hits() + s.b.hits()
}

/// Shapes that are valid targets: (request target, Host, normalised host, normalised path).
const SERVED: &[(&str, &str, &str, &str)] = &[
    (
        "/%61pi/cache/p2",
        "victim.example",
        "victim.example",
        "/api/cache/p2",
    ),
    ("/%61%70%69/x", "victim.example", "victim.example", "/api/x"),
    ("/API/x2", "victim.example", "victim.example", "/API/x2"),
    (
        "/static/../api/x3",
        "victim.example",
        "victim.example",
        "/api/x3",
    ),
    (
        "/static/%2e%2E/api/x4",
        "victim.example",
        "victim.example",
        "/api/x4",
    ),
    (
        "/%2fapi/x5",
        "victim.example",
        "victim.example",
        "/%2Fapi/x5",
    ),
    ("/./api/x6", "victim.example", "victim.example", "/api/x6"),
    ("/api/../x7", "victim.example", "victim.example", "/x7"),
    ("/api/%2e%2e/x8", "victim.example", "victim.example", "/x8"),
    (
        "/../../api/x9",
        "victim.example",
        "victim.example",
        "/api/x9",
    ),
    (
        "/%7Eapi/x10",
        "victim.example",
        "victim.example",
        "/~api/x10",
    ),
    ("//api/x11", "victim.example", "victim.example", "//api/x11"),
    ("/api/x12", "VICTIM.Example", "victim.example", "/api/x12"),
    ("/x13", "victim.example.", "victim.example", "/x13"),
    ("/x14", "victim.example:80", "victim.example", "/x14"),
    ("/x15", "victim.example:", "victim.example", "/x15"),
    ("/api/x16", "[::1]", "[::1]", "/api/x16"),
    ("/x17", "[0:0:0:0:0:0:0:1]", "[::1]", "/x17"),
    ("/x18", "127.1", "127.0.0.1", "/x18"),
    ("/x19", "2130706433", "127.0.0.1", "/x19"),
    // Absolute-form wins over Host (RFC 9112 §3.2.2), for routing and the key alike.
    (
        "http://victim.example/api/x20",
        "other.example",
        "victim.example",
        "/api/x20",
    ),
    (
        "http://other.example/x21",
        "victim.example",
        "other.example",
        "/x21",
    ),
    (
        "http://VICTIM.example.:80/%61pi/x22",
        "victim.example",
        "victim.example",
        "/api/x22",
    ),
];

#[tokio::test]
async fn route_key_and_upstream_request_agree_for_every_shape() {
    let s = setup().await;
    for &(target, host, norm_host, norm_path) in SERVED {
        let want = owner(norm_host, norm_path);
        let (status, body) = raw(&s, target, host).await;
        assert_eq!(status, 200, "{target} Host: {host}");
        assert_eq!(
            body,
            format!("{want} {norm_path}"),
            "{target} Host: {host}: served by the wrong origin, or it saw another path"
        );
        // The clean request for the normalised URL is a hit on the same response: the key
        // is the URL that was routed.
        let before = hits(&s);
        let (status, clean) = raw(&s, norm_path, norm_host).await;
        assert_eq!((status, &clean), (200, &body), "{norm_host}{norm_path}");
        assert_eq!(hits(&s), before, "{norm_host}{norm_path} was not a hit");
    }
}

/// The exact attacks of the report, each followed by the victim's normal request.
#[tokio::test]
async fn the_reported_poisonings_fail() {
    let s = setup().await;
    // Userinfo in Host: routed by the raw authority to `*` (B), stored as victim's URL.
    assert_eq!(raw(&s, "/cache/h1", "evil@victim.example").await.0, 400);
    assert_eq!(
        raw(&s, "/cache/h1", "victim.example").await.1,
        "A /cache/h1"
    );
    // A path in Host: went to B, stored as /cache/cache/h4.
    assert_eq!(raw(&s, "/cache/h4", "victim.example/cache").await.0, 400);
    assert_eq!(
        raw(&s, "/cache/cache/h4", "victim.example").await.1,
        "A /cache/cache/h4"
    );
    // A query in Host.
    assert_eq!(raw(&s, "/", "victim.example?a=").await.0, 400);
    assert_eq!(raw(&s, "/?a=", "victim.example").await.1, "A /?a=");
    // An encoded path: matched `/` (A) on the raw path but keyed as /api/cache/p2.
    assert_eq!(
        raw(&s, "/%61pi/cache/p3", "victim.example").await.1,
        "B /api/cache/p3"
    );
    assert_eq!(
        raw(&s, "/api/cache/p3", "victim.example").await.1,
        "B /api/cache/p3"
    );
}

#[tokio::test]
async fn invalid_hosts_and_targets_are_refused_before_any_origin() {
    let s = setup().await;
    for (target, host) in [
        ("/x", "evil@victim.example"),
        ("/x", "victim.example/cache"),
        ("/x", "victim.example?a="),
        ("/x", "local host"),
        ("/x", "localhost#x"),
        ("/x", "+ localhost"),
        ("/x", "localhost:80x"),
        ("/x", "victim.example:0"),
        ("/x", "victim.example:65536"),
        ("/x", "[::1"),
        ("/x", "[fe80::1%25lo]"),
        ("/x", "a..b"),
        ("/x", "256.0.0.1"),
        ("/x", "victim.example\\x"),
        ("/x%zz", "victim.example"),
        ("/x%4", "victim.example"),
        ("http://evil@victim.example/x", "victim.example"),
        ("http://victim.example/x", "a b"),
    ] {
        let (status, body) = raw(&s, target, host).await;
        assert_eq!(status, 400, "{target} Host: {host}: {body}");
    }
    assert_eq!(hits(&s), 0, "an invalid request reached an origin");
}

#[tokio::test]
async fn purge_and_the_log_use_the_normalised_url() {
    let s = setup().await;
    assert_eq!(raw(&s, "/api/p", "victim.example").await.1, "B /api/p");
    // PURGE by another spelling of the same URL removes it.
    let mut c = s.trove.client().await;
    c.send(b"PURGE /%61pi/./p HTTP/1.1\r\nHost: Victim.Example.\r\n\r\n")
        .await;
    assert_eq!(c.read_response(false).await.unwrap().status, 200);
    let before = hits(&s);
    raw(&s, "/api/p", "victim.example").await;
    assert_eq!(hits(&s), before + 1, "PURGE missed the stored response");
    let lines = s.trove.log_lines(3).await;
    for line in &lines {
        let url = line.split_whitespace().nth(6).unwrap_or("");
        assert_eq!(url, "http://victim.example/api/p", "{line}");
    }
}

#[tokio::test]
async fn options_asterisk_is_forwarded_as_asterisk() {
    let s = setup().await;
    let mut c = s.trove.client().await;
    c.send(b"OPTIONS * HTTP/1.1\r\nHost: victim.example\r\n\r\n")
        .await;
    assert_eq!(c.read_response(false).await.unwrap().status, 200);
    let seen = s.a.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("OPTIONS", "*")
    );
    assert_eq!(seen[0].header("host"), Some("victim.example"));
}
