//! A NATS server of the test's own: `nats-server -js` on a free loopback port with its store
//! in a temporary directory, killed by its PID and the directory removed when the test ends.
//!
//! `nats-server` must be installed (Debian package `nats-server`; `.ci/run` installs it). A
//! missing server fails the test with a message saying so, never skips it. Set
//! `TROVE_NATS_SERVER` to use another binary.

#![allow(dead_code)]

use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use trove_bus::{Bus, BusSettings, Consumer, Delivery, Event};

pub struct Nats {
    child: Option<Child>,
    /// Arguments added to the command line (e.g. `--auth TOKEN`).
    extra: Vec<String>,
    pub port: u16,
    pub dir: PathBuf,
}

fn binary() -> String {
    if let Ok(b) = std::env::var("TROVE_NATS_SERVER") {
        return b;
    }
    for candidate in ["/usr/sbin/nats-server", "/usr/bin/nats-server"] {
        if std::path::Path::new(candidate).exists() {
            return candidate.to_string();
        }
    }
    "nats-server".to_string()
}

/// A port for the NATS server, below the ephemeral range (see `trove_bench::proc::free_port`).
fn free_port() -> u16 {
    trove_bench::proc::free_port().expect("a free port")
}

impl Nats {
    /// A fresh server with an empty store.
    pub fn start() -> Nats {
        Nats::start_with(&[])
    }

    /// A fresh server with `extra` arguments.
    pub fn start_with(extra: &[&str]) -> Nats {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "trove-bus-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // The port is free when chosen; another process may take it before the server binds,
        // so a server that doesn't come up is tried again on another port.
        for _ in 0..3 {
            let mut nats = Nats {
                child: None,
                extra: extra.iter().map(|a| a.to_string()).collect(),
                port: free_port(),
                dir: dir.clone(),
            };
            if nats.spawn() {
                return nats;
            }
        }
        panic!("nats-server did not start on a free loopback port three times");
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Settings for node `node` on this server.
    pub fn settings(&self, node: &str) -> BusSettings {
        let mut s = BusSettings::for_node(node);
        s.servers = vec![self.url()];
        s.publish_timeout = Duration::from_secs(2);
        s
    }

    /// SIGKILL, as a crash: nothing is flushed or closed cleanly.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and store.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.spawn() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not restart on port {}",
                self.port
            );
        }
    }

    /// SIGKILL, the store lost (a new disk, a wiped volume), and the server started again on
    /// the same port.
    pub fn restart_without_store(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).unwrap();
        self.restart();
    }

    /// Starts the server and waits for its JetStream-enabled INFO line; false if it exited.
    fn spawn(&mut self) -> bool {
        let bin = binary();
        let child = Command::new(&bin)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.dir)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "nats-server not found ({bin}): the trove-bus tests need it; install the Debian \
                 package `nats-server` (.ci/run does) or set TROVE_NATS_SERVER"
            ),
            Err(e) => panic!("cannot run {bin}: {e}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            if self.says_jetstream() {
                self.child = Some(child);
                return true;
            }
            assert!(Instant::now() < deadline, "nats-server not ready in 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn says_jetstream(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        while !got.contains(&b'\n') {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let line = String::from_utf8_lossy(&got);
        line.starts_with("INFO ") && line.contains("\"jetstream\":true")
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Connects node `node` with settings adjusted by `f`.
pub async fn bus(nats: &Nats, node: &str, f: impl FnOnce(&mut BusSettings)) -> Bus {
    let mut s = nats.settings(node);
    f(&mut s);
    Bus::connect(s)
        .await
        .expect("connect to the test's nats-server")
}

/// The next event, within `wait`.
pub async fn next_within(c: &mut Consumer, wait: Duration) -> Option<Event> {
    tokio::time::timeout(wait, c.next())
        .await
        .ok()
        .map(|e| e.expect("consumer error"))
}

/// The next event, which must be a delivery, within ten seconds; acked.
pub async fn delivery(c: &mut Consumer) -> Delivery {
    match next_within(c, Duration::from_secs(10)).await {
        Some(Event::Deliver(d)) => {
            d.ack().await.unwrap();
            d
        }
        other => panic!("expected a delivery, got {other:?}"),
    }
}

/// Polls `f` every few milliseconds until it holds; fails the test after thirty seconds.
pub async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
