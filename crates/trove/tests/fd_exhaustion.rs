//! Running out of file descriptors (issue 7): `trove serve` started under a low
//! `RLIMIT_NOFILE` warns at start-up that `max_client_connections` cannot be reached, pauses
//! accepting when the descriptors are used up (one warning, one count, no log flood), and
//! serves again once connections close.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Open files allowed to the child: about a dozen are in use once it listens.
const NOFILE: u32 = 40;

struct Running {
    child: Child,
    proxy: String,
    admin: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn lines_with(&self, needle: &str) -> usize {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }
}

fn wait_for(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// `trove serve` under `ulimit -n NOFILE` (soft and hard, so it cannot raise it), its
/// stderr collected line by line by a thread (read continuously, so a flood of log lines
/// could never block it).
fn start(config: &str) -> Running {
    let dir = std::env::temp_dir().join(format!("trove-fd-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trove.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {NOFILE} && exec \"$0\" serve --config \"$1\""
        ))
        .arg(env!("CARGO_BIN_EXE_trove"))
        .arg(&path)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let lines = Arc::clone(&stderr);
    let pipe = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            lines.lock().unwrap().push(line);
        }
    });
    let find = |prefix: &str| {
        stderr
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::to_string))
    };
    assert!(
        wait_for(|| find("listening forward ").is_some() && find("admin listening ").is_some()),
        "trove printed its addresses: {:?}",
        stderr.lock().unwrap()
    );
    let proxy = find("listening forward ").unwrap();
    let admin = find("admin listening ").unwrap();
    Running {
        child,
        proxy,
        admin,
        stderr,
    }
}

/// An origin answering every request with a cacheable body.
fn origin() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut tmp) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
                let body = "from the origin\n";
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncache-control: max-age=300\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    addr
}

/// One request on a new connection; the whole response, or "" if none came in 5 s.
fn request(addr: &str, raw: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if s.write_all(raw.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn out_of_descriptors_warns_pauses_accepting_and_recovers() {
    let origin = origin();
    let trove = start(
        "[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n[log]\naccess = \"\"\n\
         [limits]\nmax_client_connections = 1000\n",
    );
    // At start-up: the limit cannot hold max_client_connections.
    assert!(
        wait_for(|| trove.lines_with("RLIMIT_NOFILE") == 1),
        "a start-up warning names the limit: {:?}",
        trove.stderr.lock().unwrap()
    );
    assert_eq!(trove.lines_with("max_client_connections = 1000"), 1);

    let get =
        format!("GET http://{origin}/x HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n");
    assert!(request(&trove.proxy, &get).starts_with("HTTP/1.1 200"));

    // Twice as many idle connections as there are descriptors: those trove cannot accept
    // wait in the kernel's queue.
    let held: Vec<TcpStream> = (0..2 * NOFILE)
        .map(|_| TcpStream::connect(&trove.proxy).unwrap())
        .collect();
    let paused = "accepting paused";
    assert!(
        wait_for(|| trove.lines_with(paused) > 0),
        "{:?}",
        trove.stderr.lock().unwrap()
    );
    // One warning per pause, not one per retry. A pause may end and begin again once while
    // the descriptors of the first request's connection are released, so allow a few.
    assert!(
        trove.lines_with(paused) <= 3,
        "a warning per pause, not per retry: {:?}",
        trove.stderr.lock().unwrap()
    );

    // Connections close: trove accepts and serves again (the stored response: no origin
    // connection needed).
    drop(held);
    assert!(wait_for(
        || trove.lines_with("accepting connections again") > 0
    ));
    let again = request(&trove.proxy, &get);
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    assert!(again.ends_with("from the origin\n"), "{again}");

    let metrics = request(
        &trove.admin,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let pauses: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("trove_accept_fd_exhausted_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("the pause is counted: {metrics}"));
    assert!(pauses >= 1.0);
    assert_eq!(
        trove.lines_with(paused) as f64,
        pauses,
        "one warning per pause, however long it lasted"
    );
}
