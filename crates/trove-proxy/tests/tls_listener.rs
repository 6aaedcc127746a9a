//! TLS for clients: a listener with certificates, chosen by SNI, renewed on disk, and what
//! bad or hostile clients get. Test CAs and certificates are made at run time.

mod kit;
mod kit_tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kit::{respond, Origin, TempDir, Trove};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use trove_proxy::metrics::names;
use trove_proxy::settings::{CertFiles, ListenerTlsSettings};
use trove_tls::testing::{TestCa, Validity};

fn client_config(ca: &TestCa) -> Arc<ClientConfig> {
    kit_tls::tls_client(ca, &[b"http/1.1"])
}

/// A TLS connection to `addr` as `name` (sent as SNI unless it is an address), verified
/// against `ca`.
async fn connect(
    addr: SocketAddr,
    ca: &TestCa,
    name: &str,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_string()).unwrap();
    TlsConnector::from(client_config(ca))
        .connect(name, tcp)
        .await
}

/// One GET on a kept-alive connection: status, head, body (Content-Length framed).
async fn get<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    host: &str,
    path: &str,
) -> (u16, String, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut tmp = [0u8; 4096];
        let n = s.read(&mut tmp).await.unwrap();
        assert!(n > 0, "connection closed before a response");
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let status: u16 = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    while buf.len() < end + len {
        let mut tmp = [0u8; 4096];
        let n = s.read(&mut tmp).await.unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&tmp[..n]);
    }
    (
        status,
        head,
        String::from_utf8_lossy(&buf[end..end + len]).to_string(),
    )
}

/// Writes a certificate for `names` from `ca` as `dir/NAME.pem` and `.key`.
fn cert_files(dir: &TempDir, ca: &TestCa, name: &str, names: &[&str]) -> CertFiles {
    let (cert, key) = ca.issue(names, Validity::Current).write(&dir.0, name);
    CertFiles { cert, key }
}

async fn tls_trove(
    origin: &Origin,
    tls: ListenerTlsSettings,
    f: impl FnOnce(&mut trove_proxy::Settings),
) -> Trove {
    Trove::reverse(origin, move |s| {
        s.listeners[0].tls = Some(tls);
        f(s);
    })
    .await
}

fn failures(trove: &Trove, reason: &str) -> f64 {
    trove.metric(&format!(
        "{}{{reason=\"{reason}\"}}",
        names::TLS_HANDSHAKE_FAILURES
    ))
}

/// Miss then hit over TLS, on one keep-alive connection; the origin is told the client
/// came over https, and the access log says so.
#[tokio::test]
async fn requests_over_tls_miss_then_hit_and_the_origin_is_told_https() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let site = cert_files(&dir, &ca, "site", &["site.test"]);
    let origin =
        Origin::start(|_, _| respond(200, &[("cache-control", "max-age=60")], b"hello over tls"))
            .await;
    let trove = tls_trove(
        &origin,
        ListenerTlsSettings {
            cert: site.cert,
            key: site.key,
            sni: vec![],
        },
        |_| {},
    )
    .await;
    let mut c = connect(trove.addr, &ca, "site.test").await.unwrap();
    assert_eq!(c.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (status, _, body) = get(&mut c, "site.test", "/page").await;
    assert_eq!((status, body.as_str()), (200, "hello over tls"));
    let (_, _, body) = get(&mut c, "site.test", "/page").await;
    assert_eq!(body, "hello over tls");
    assert_eq!(trove.result(0).await, "TCP_MISS/200");
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");
    let lines = trove.log_lines(2).await;
    assert!(
        lines[0].contains(" https://site.test/page "),
        "{}",
        lines[0]
    );
    let seen = origin.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("x-forwarded-proto"), Some("https"));
    assert_eq!(
        seen[0].header("forwarded"),
        Some("for=127.0.0.1;proto=https")
    );
    assert_eq!(
        trove.metric(&format!("{}{{handshake=\"full\"}}", names::TLS_HANDSHAKES)),
        1.0
    );
}

/// A cleartext listener says `http` to the origin, whatever the client claims.
#[tokio::test]
async fn a_cleartext_client_cannot_claim_https() {
    let origin = Origin::start(|_, _| respond(200, &[], b"x")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[("x-forwarded-proto", "https")]).await;
    assert_eq!(origin.seen()[0].header("x-forwarded-proto"), Some("http"));
}

/// Certificates by SNI: exact and wildcard names from each certificate's own SANs; the
/// default for a client without SNI and for a name no certificate holds.
#[tokio::test]
async fn sni_chooses_the_certificate_and_the_default_covers_the_rest() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let default = cert_files(&dir, &ca, "default", &["default.test", "127.0.0.1"]);
    let site = cert_files(&dir, &ca, "site", &["site.test"]);
    let wild = cert_files(&dir, &ca, "wild", &["*.wild.test"]);
    let origin = Origin::start(|_, _| respond(200, &[], b"ok")).await;
    let tls = ListenerTlsSettings {
        cert: default.cert,
        key: default.key,
        sni: vec![site, wild],
    };
    let trove = tls_trove(&origin, tls, |_| {}).await;
    for name in ["site.test", "a.wild.test", "default.test", "127.0.0.1"] {
        let mut c = connect(trove.addr, &ca, name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(get(&mut c, name, "/").await.0, 200, "{name}");
    }
    // An unknown name gets the default, which does not hold it.
    let e = connect(trove.addr, &ca, "unknown.test").await.unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("not valid for name") && e.contains("default.test"),
        "{e}"
    );
}

/// Garbage, an SSLv3 and a TLS 1.0 ClientHello are refused and counted as protocol
/// errors; a client that never says ClientHello, and one that says it a byte at a time,
/// are closed at the handshake timeout.
#[tokio::test]
async fn hostile_and_ancient_clients_are_closed_and_counted() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let site = cert_files(&dir, &ca, "site", &["site.test"]);
    let origin = Origin::start(|_, _| respond(200, &[], b"ok")).await;
    let trove = tls_trove(
        &origin,
        ListenerTlsSettings {
            cert: site.cert,
            key: site.key,
            sni: vec![],
        },
        |s| {
            s.timeouts.client_head = Duration::from_millis(300);
        },
    )
    .await;
    let closed = |mut s: TcpStream| async move {
        let mut b = [0u8; 512];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match tokio::time::timeout_at(deadline, s.read(&mut b)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue, // an alert
                Err(_) => return false,
            }
        }
    };
    let mut s = TcpStream::connect(trove.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .await
        .unwrap();
    assert!(closed(s).await, "cleartext HTTP on a TLS port");
    for version in [0x0300u16, 0x0301] {
        let mut s = TcpStream::connect(trove.addr).await.unwrap();
        s.write_all(&old_client_hello(version)).await.unwrap();
        assert!(closed(s).await, "version {version:#x}");
    }
    assert!(
        kit::eventually(|| failures(&trove, "tls-protocol-error") == 3.0).await,
        "{}",
        failures(&trove, "tls-protocol-error")
    );

    let silent = TcpStream::connect(trove.addr).await.unwrap();
    assert!(closed(silent).await, "a client that never says ClientHello");
    // A real ClientHello, a byte every 20 ms: not done within the timeout.
    let hello = real_client_hello(&ca);
    let mut s = TcpStream::connect(trove.addr).await.unwrap();
    let mut cut_off = false;
    for b in &hello {
        if s.write_all(&[*b]).await.is_err() {
            cut_off = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        cut_off || closed(s).await,
        "a ClientHello one byte at a time"
    );
    assert!(
        kit::eventually(|| failures(&trove, "tls-timeout") == 2.0).await,
        "{}",
        failures(&trove, "tls-timeout")
    );
    assert_eq!(origin.hits(), 0);
    // Still serving.
    let mut c = connect(trove.addr, &ca, "site.test").await.unwrap();
    assert_eq!(get(&mut c, "site.test", "/").await.0, 200);
}

/// Many handshakes at once all finish (queued for a bounded number of permits), and each
/// connection is served.
#[tokio::test]
async fn many_handshakes_at_once_are_all_served() {
    let dir = TempDir::new();
    let ca = Arc::new(TestCa::new("trove test CA"));
    let site = cert_files(&dir, &ca, "site", &["site.test"]);
    let origin =
        Origin::start(|_, _| respond(200, &[("cache-control", "max-age=60")], b"ok")).await;
    let trove = tls_trove(
        &origin,
        ListenerTlsSettings {
            cert: site.cert,
            key: site.key,
            sni: vec![],
        },
        |_| {},
    )
    .await;
    let config = client_config(&ca);
    let addr = trove.addr;
    let tasks: Vec<_> = (0..300)
        .map(|_| {
            let config = Arc::clone(&config);
            tokio::spawn(async move {
                let tcp = TcpStream::connect(addr).await.unwrap();
                let name = ServerName::try_from("site.test").unwrap();
                let mut c = TlsConnector::from(config).connect(name, tcp).await.unwrap();
                get(&mut c, "site.test", "/").await.0
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let done = trove.metric(&format!("{}{{handshake=\"full\"}}", names::TLS_HANDSHAKES))
        + trove.metric(&format!(
            "{}{{handshake=\"resumed\"}}",
            names::TLS_HANDSHAKES
        ));
    assert_eq!(done, 300.0);
}

/// The issue's rotation test: a renewal written over the files on disk is served to new
/// connections while a keep-alive connection made before it goes on being served; a broken
/// renewal is refused, counted, and the good certificate kept.
#[tokio::test]
async fn certificate_renewal_on_disk_keeps_connections_and_refuses_a_bad_one() {
    let dir = TempDir::new();
    let old_ca = TestCa::new("old CA");
    let new_ca = TestCa::new("new CA");
    let files = cert_files(&dir, &old_ca, "site", &["site.test"]);
    let origin = Origin::start(|_, _| respond(200, &[], b"ok")).await;
    let tls = ListenerTlsSettings {
        cert: files.cert.clone(),
        key: files.key.clone(),
        sni: vec![],
    };
    let trove = tls_trove(&origin, tls, |_| {}).await;
    let mut kept = connect(trove.addr, &old_ca, "site.test").await.unwrap();
    assert_eq!(get(&mut kept, "site.test", "/1").await.0, 200);

    let renewed = new_ca.issue(&["site.test"], Validity::Current);
    std::fs::write(&files.key, &renewed.key_pem).unwrap();
    std::fs::write(&files.cert, &renewed.cert_pem).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if connect(trove.addr, &new_ca, "site.test").await.is_ok() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the renewal was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        get(&mut kept, "site.test", "/2").await.0,
        200,
        "the old connection is kept"
    );
    assert_eq!(origin.connections(), 1);

    // A renewal that is no certificate: refused, counted, the renewed one still served.
    std::fs::write(&files.cert, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
    let refused = format!("{}{{result=\"refused\"}}", names::TLS_CERTIFICATE_RELOADS);
    assert!(kit::eventually(|| trove.metric(&refused) >= 1.0).await);
    let mut c = connect(trove.addr, &new_ca, "site.test").await.unwrap();
    assert_eq!(get(&mut c, "site.test", "/3").await.0, 200);
    assert_eq!(get(&mut kept, "site.test", "/4").await.0, 200);
}

/// `trove reload` (SIGHUP) reads the certificates again; a reload with a bad one is refused
/// with a message naming the file, and the current certificates stay.
#[tokio::test]
async fn reload_reads_certificates_and_refuses_bad_ones() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let files = cert_files(&dir, &ca, "site", &["site.test"]);
    let origin = Origin::start(|_, _| respond(200, &[], b"ok")).await;
    let tls = ListenerTlsSettings {
        cert: files.cert.clone(),
        key: files.key.clone(),
        sni: vec![],
    };
    let mut trove = tls_trove(&origin, tls, |_| {}).await;
    let settings = trove.running.shared.settings.clone();
    let mut kept = connect(trove.addr, &ca, "site.test").await.unwrap();
    // Another certificate's key: the pair does not match.
    let other = ca.issue(&["site.test"], Validity::Current);
    std::fs::write(&files.key, &other.key_pem).unwrap();
    let e = trove.running.reload(settings.clone()).unwrap_err();
    assert!(
        e.contains("listener[0].tls") && e.contains("site.pem"),
        "{e}"
    );
    assert_eq!(get(&mut kept, "site.test", "/").await.0, 200);
    std::fs::write(&files.cert, &other.cert_pem).unwrap();
    trove.running.reload(settings).unwrap();
    let mut c = connect(trove.addr, &ca, "site.test").await.unwrap();
    assert_eq!(get(&mut c, "site.test", "/").await.0, 200);
    let served = c.get_ref().1.peer_certificates().unwrap()[0].clone();
    let want = CertificateDer::pem_slice_iter(other.cert_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(served, want, "the reloaded certificate is served");
    assert_eq!(get(&mut kept, "site.test", "/").await.0, 200);
}

/// A ClientHello offering only `version` (SSLv3 0x0300, TLS 1.0 0x0301) and an old RSA
/// cipher, with no extensions: what a client too old for trove sends.
fn old_client_hello(version: u16) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&version.to_be_bytes());
    body.extend_from_slice(&[7u8; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x00, 0x2f]); // TLS_RSA_WITH_AES_128_CBC_SHA
    body.extend_from_slice(&[1, 0]); // null compression
    let mut hs = vec![1u8]; // client_hello
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16];
    rec.extend_from_slice(&version.to_be_bytes());
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// The bytes a real rustls client opens with.
fn real_client_hello(ca: &TestCa) -> Vec<u8> {
    let mut conn = rustls::ClientConnection::new(
        client_config(ca),
        ServerName::try_from("site.test").unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

/// Two requests in one TLS record are both answered (the second waits decrypted inside
/// rustls, not on the socket), and a connection idle long enough to give its read buffer
/// back still gets its next request read.
#[tokio::test]
async fn pipelined_and_long_idle_requests_over_tls() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let site = cert_files(&dir, &ca, "site", &["site.test"]);
    let origin = Origin::start(|req, _| respond(200, &[], req.path.as_bytes())).await;
    let tls = ListenerTlsSettings {
        cert: site.cert,
        key: site.key,
        sni: vec![],
    };
    let trove = tls_trove(&origin, tls, |_| {}).await;
    let mut c = connect(trove.addr, &ca, "site.test").await.unwrap();
    c.write_all(
        b"GET /a HTTP/1.1\r\nHost: site.test\r\n\r\nGET /b HTTP/1.1\r\nHost: site.test\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !(String::from_utf8_lossy(&got).contains("\r\n\r\n/a")
        && String::from_utf8_lossy(&got).ends_with("\r\n\r\n/b"))
    {
        let mut tmp = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, c.read(&mut tmp))
            .await
            .expect("both pipelined responses in time")
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&tmp[..n]);
    }
    // Past the time an idle connection keeps its buffer.
    tokio::time::sleep(trove_proxy::lifecycle::IDLE_CHECK + Duration::from_millis(300)).await;
    let (status, _, body) = get(&mut c, "site.test", "/c").await;
    assert_eq!((status, body.as_str()), (200, "/c"));
}
