//! The `trove` program with a TLS listener, as curl sees it: a certificate for `site.test`
//! from a CA made here, and `curl --cacert … --resolve site.test:PORT:127.0.0.1`.

mod common;

use std::process::Command;
use std::sync::atomic::Ordering;

use common::{cacheable, is_hit, origin_with, TempDir, Trove};
use trove_tls::testing::{TestCa, Validity};

fn curl(ca: &std::path::Path, port: &str, path: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-D", "-", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("site.test:{port}:127.0.0.1")])
        .arg(format!("https://site.test:{port}{path}"))
        .output()
        .expect("curl runs (Debian package curl; .ci/run installs it)");
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn curl_through_a_tls_listener_misses_then_hits() {
    let dir = TempDir::new("tls-curl");
    let ca = TestCa::new("trove test CA");
    let ca_file = ca.write(dir.path(), "test-ca.pem");
    let (cert, key) = ca
        .issue(&["site.test"], Validity::Current)
        .write(dir.path(), "site");
    let (origin, hits) = origin_with(|_| cacheable(b"hello over https\n", 300, Some("text/plain")));
    let log = dir.path().join("access.log");
    let trove = Trove::start(
        dir.path(),
        &format!(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"reverse\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n\
             [[origin]]\nhost = \"*\"\nupstreams = [\"http://{origin}\"]\n\
             [admin]\nlisten = \"\"\n[log]\naccess = \"{}\"\n",
            cert.display(),
            key.display(),
            log.display()
        ),
    );
    let port = trove.proxy().rsplit(':').next().unwrap().to_string();
    let first = curl(&ca_file, &port, "/page");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.ends_with("hello over https\n"), "{first}");
    assert!(!is_hit(&first), "{first}");
    let second = curl(&ca_file, &port, "/page");
    assert!(is_hit(&second), "{second}");
    assert!(second.ends_with("hello over https\n"));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert!(common::wait_for(std::time::Duration::from_secs(5), || {
        common::read_lines(&log).lines().count() >= 2
    }));
    let text = common::read_lines(&log);
    assert!(
        text.lines().nth(1).unwrap().contains(" TCP_MEM_HIT/200 "),
        "{text}"
    );
    assert!(
        text.contains(&format!("https://site.test:{port}/page")),
        "{text}"
    );
}
