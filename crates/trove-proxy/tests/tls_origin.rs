//! HTTPS origins: trove as a TLS client. A test CA and its certificates are made here at
//! run time (`trove_tls::testing`); origins are the kit's scripted servers behind rustls.

mod kit;
#[path = "kit/tls.rs"]
mod kit_tls;

use std::sync::Arc;

use kit::{respond, Action, TempDir, Trove};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trove_proxy::metrics::names;
use trove_proxy::settings::OriginRoute;
use trove_proxy::Settings;
use trove_tls::testing::{self, Issued, TestCa, Validity};
use trove_tls::OriginTlsSettings;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn chain(i: &Issued) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let certs = CertificateDer::pem_slice_iter(i.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(i.key_pem.as_bytes()).unwrap();
    (certs, key)
}

/// A TLS origin's configuration presenting `cert`.
fn server(cert: &Issued) -> Arc<ServerConfig> {
    let (certs, key) = chain(cert);
    Arc::new(
        ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    )
}

/// ... that also demands a client certificate from `client_ca`.
fn server_requiring_client_cert(cert: &Issued, client_ca: &TestCa) -> Arc<ServerConfig> {
    let (certs, key) = chain(cert);
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(client_ca.pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .unwrap();
    Arc::new(
        ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .unwrap(),
    )
}

/// Points trove's one route at `https://{addr}` with `tls`.
fn https_route(addr: std::net::SocketAddr, tls: OriginTlsSettings) -> impl FnOnce(&mut Settings) {
    move |s: &mut Settings| {
        s.origins = vec![OriginRoute {
            host: "*".into(),
            path_prefix: "/".into(),
            upstreams: vec![format!("https://{addr}")],
            tls: Some(tls),
        }];
    }
}

fn trusting(ca: &std::path::Path) -> OriginTlsSettings {
    OriginTlsSettings {
        ca_file: Some(ca.to_path_buf()),
        ..Default::default()
    }
}

/// The issue's "done when": an HTTPS origin under a test CA, trove with that CA in
/// `ca_file`: a miss, a hit, a 304 revalidation and stale-if-error all over TLS, on one
/// pooled connection.
#[tokio::test]
async fn https_origin_miss_hit_revalidation_and_stale_if_error() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let ca_file = ca.write(&dir.0, "ca.pem");
    let cert = ca.issue(&["127.0.0.1", "localhost"], Validity::Current);
    let origin = kit_tls::start_tls(server(&cert), |req, _| match req.path.as_str() {
        "/fresh" => respond(200, &[("cache-control", "max-age=3600")], b"fresh body"),
        _ if req.header("if-none-match") == Some("\"v1\"") => {
            // The second revalidation finds the origin failing: stale-if-error stands in.
            if req.header("x-fail").is_some() {
                respond(500, &[], b"origin broke")
            } else {
                respond(
                    304,
                    &[
                        ("etag", "\"v1\""),
                        ("cache-control", "max-age=0, stale-if-error=3600"),
                    ],
                    b"",
                )
            }
        }
        _ => respond(
            200,
            &[
                ("etag", "\"v1\""),
                ("cache-control", "max-age=0, stale-if-error=3600"),
            ],
            b"validated body",
        ),
    })
    .await;
    let trove = Trove::reverse_to(origin.addr, https_route(origin.addr, trusting(&ca_file))).await;

    let r = kit::get(&trove, "/fresh", &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "fresh body"));
    assert_eq!(trove.result(0).await, "TCP_MISS/200");
    let r = kit::get(&trove, "/fresh", &[]).await;
    assert_eq!(r.text(), "fresh body");
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");

    let r = kit::get(&trove, "/v", &[]).await;
    assert_eq!(r.text(), "validated body");
    let r = kit::get(&trove, "/v", &[]).await;
    assert_eq!(r.text(), "validated body");
    assert_eq!(trove.result(3).await, "TCP_REFRESH_UNMODIFIED/200");
    let r = kit::get(&trove, "/v", &[("x-fail", "1")]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "validated body"));
    assert_eq!(trove.result(4).await, "TCP_REFRESH_FAIL_OLD/200");

    assert_eq!(origin.hits(), 4, "one miss, one miss, two revalidations");
    assert_eq!(origin.connections(), 1, "one TLS connection, pooled");
    assert_eq!(
        trove.metric(&format!(
            "{}{{handshake=\"full\"}}",
            names::ORIGIN_TLS_CONNECTIONS
        )),
        1.0
    );
    assert_eq!(trove.metric(names::ORIGIN_TLS_REUSED), 3.0);
    assert_eq!(trove.metric(names::ORIGIN_CONNECTIONS_REUSED), 3.0);
}

/// With the CA absent (the system's store does not know it) the request fails with a 502
/// that names the reason, and the failure is counted under it.
#[tokio::test]
async fn without_the_ca_the_origin_is_refused_with_a_502_naming_the_reason() {
    let ca = TestCa::new("unknown CA");
    let cert = ca.issue(&["127.0.0.1"], Validity::Current);
    let origin = kit_tls::start_tls(server(&cert), |_, _| respond(200, &[], b"secret")).await;
    let trove = Trove::reverse_to(origin.addr, https_route(origin.addr, Default::default())).await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!(r.status, 502);
    assert!(r.text().contains("tls-unknown-issuer"), "{}", r.text());
    assert!(
        r.header("cache-status")
            .unwrap_or("")
            .contains("tls-certificate-error"),
        "{:?}",
        r.header("cache-status")
    );
    assert_eq!(origin.hits(), 0);
    let m = trove.metrics();
    assert!(
        m.contains("reason=\"tls-unknown-issuer\"} 1"),
        "failures are counted by reason:\n{}",
        m.lines()
            .filter(|l| l.contains("origin_failures"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Every bad origin certificate is refused by default, each for its own reason.
#[tokio::test]
async fn bad_origin_certificates_are_refused_each_with_its_reason() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let ca_file = ca.write(&dir.0, "ca.pem");
    let cases = [
        (
            "expired",
            ca.issue(&["127.0.0.1"], Validity::Expired),
            "tls-expired",
        ),
        (
            "not yet valid",
            ca.issue(&["127.0.0.1"], Validity::NotYetValid),
            "tls-not-yet-valid",
        ),
        (
            "wrong host",
            ca.issue(&["other.example"], Validity::Current),
            "tls-name-mismatch",
        ),
        (
            "self-signed",
            testing::self_signed(&["127.0.0.1"]),
            "tls-unknown-issuer",
        ),
    ];
    for (what, cert, reason) in cases {
        let origin = kit_tls::start_tls(server(&cert), |_, _| respond(200, &[], b"x")).await;
        let trove =
            Trove::reverse_to(origin.addr, https_route(origin.addr, trusting(&ca_file))).await;
        let r = kit::get(&trove, "/", &[]).await;
        assert_eq!(r.status, 502, "{what}");
        assert!(r.text().contains(reason), "{what}: {}", r.text());
        assert!(
            trove
                .metrics()
                .contains(&format!("reason=\"{reason}\"}} 1")),
            "{what}"
        );
        assert_eq!(origin.hits(), 0, "{what}: nothing was sent");
    }
}

/// Origins that are no TLS servers: one drops the connection mid-handshake, one answers
/// the ClientHello with cleartext HTTP.
#[tokio::test]
async fn origins_that_break_the_handshake_are_named() {
    for (what, reply, reason) in [
        ("drops", &b""[..], "tls-closed"),
        (
            "garbage",
            &b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi"[..],
            "tls-protocol-error",
        ),
    ] {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut hello = [0u8; 64];
                let _ = s.read(&mut hello).await;
                let _ = s.write_all(reply).await;
            }
        });
        let trove = Trove::reverse_to(addr, https_route(addr, Default::default())).await;
        let r = kit::get(&trove, "/", &[]).await;
        assert_eq!(r.status, 502, "{what}");
        assert!(r.text().contains(reason), "{what}: {}", r.text());
    }
}

/// mTLS: an origin that demands a client certificate gets trove's; without one configured,
/// the origin's refusal is the reason given.
#[tokio::test]
async fn client_certificates_are_presented_to_origins_that_ask() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let ca_file = ca.write(&dir.0, "ca.pem");
    let client_ca = TestCa::new("clients CA");
    let (client_cert, client_key) = client_ca
        .issue(&["trove.client"], Validity::Current)
        .write(&dir.0, "client");
    let cert = ca.issue(&["127.0.0.1"], Validity::Current);
    let origin = kit_tls::start_tls(server_requiring_client_cert(&cert, &client_ca), |_, _| {
        respond(200, &[], b"mutual")
    })
    .await;
    let with = OriginTlsSettings {
        client_cert: Some(client_cert),
        client_key: Some(client_key),
        ..trusting(&ca_file)
    };
    let trove = Trove::reverse_to(origin.addr, https_route(origin.addr, with)).await;
    assert_eq!(kit::get(&trove, "/", &[]).await.text(), "mutual");

    let trove = Trove::reverse_to(origin.addr, https_route(origin.addr, trusting(&ca_file))).await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!(r.status, 502);
    assert!(r.text().contains("tls-alert-received"), "{}", r.text());
}

/// An upstream written as an address is checked against `server_name` (also sent as SNI).
#[tokio::test]
async fn server_name_is_checked_where_the_upstream_is_an_address() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let ca_file = ca.write(&dir.0, "ca.pem");
    let cert = ca.issue(&["origin.test"], Validity::Current);
    let origin = kit_tls::start_tls(server(&cert), |_, _| respond(200, &[], b"named")).await;
    let named = OriginTlsSettings {
        server_name: Some("origin.test".into()),
        ..trusting(&ca_file)
    };
    let trove = Trove::reverse_to(origin.addr, https_route(origin.addr, named)).await;
    assert_eq!(kit::get(&trove, "/", &[]).await.text(), "named");
}

/// `insecure_skip_verify` takes a self-signed certificate (and says so in the log).
#[tokio::test]
async fn verification_can_be_turned_off_by_name() {
    let cert = testing::self_signed(&["127.0.0.1"]);
    let origin = kit_tls::start_tls(server(&cert), |_, _| respond(200, &[], b"unverified")).await;
    let off = OriginTlsSettings {
        insecure_skip_verify: true,
        ..Default::default()
    };
    let trove = Trove::reverse_to(origin.addr, https_route(origin.addr, off)).await;
    assert_eq!(kit::get(&trove, "/", &[]).await.text(), "unverified");
}

/// An origin that closes every connection makes trove open a new one per request, and the
/// second resumes the first's TLS session.
#[tokio::test]
async fn new_connections_resume_the_tls_session() {
    let dir = TempDir::new();
    let ca = TestCa::new("trove test CA");
    let ca_file = ca.write(&dir.0, "ca.pem");
    let cert = ca.issue(&["127.0.0.1"], Validity::Current);
    let origin = kit_tls::start_tls(server(&cert), |_, _| {
        Action::RawClose(
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\nconnection: close\r\n\r\nx".to_vec(),
        )
    })
    .await;
    let trove = Trove::reverse_to(origin.addr, https_route(origin.addr, trusting(&ca_file))).await;
    kit::get(&trove, "/1", &[]).await;
    kit::get(&trove, "/2", &[]).await;
    assert_eq!(origin.connections(), 2);
    let m = |k: &str| {
        trove.metric(&format!(
            "{}{{handshake=\"{k}\"}}",
            names::ORIGIN_TLS_CONNECTIONS
        ))
    };
    assert_eq!((m("full"), m("resumed")), (1.0, 1.0));
}

/// A forward proxy fetches an absolute `https://` URL over TLS itself, verified against the
/// system's trust store (which does not know the test CA: refused, by name).
#[tokio::test]
async fn forward_proxy_fetches_https_urls_over_verified_tls() {
    let ca = TestCa::new("unknown CA");
    let cert = ca.issue(&["localhost"], Validity::Current);
    let origin = kit_tls::start_tls(server(&cert), |_, _| respond(200, &[], b"x")).await;
    let trove = Trove::forward(|_| {}).await;
    let url = format!("https://localhost:{}/x", origin.addr.port());
    let r = kit::get(&trove, &url, &[]).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("tls-unknown-issuer"), "{}", r.text());
}
