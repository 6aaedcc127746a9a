//! What the tests of the `trove` program share: a `trove serve` child process whose stderr
//! is read line by line, a scratch directory, a small origin server, and plain-socket
//! requests. Each test file uses what it needs (`mod common;`), so some items go unused in
//! some files.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a child gets to print that it listens.
const START_LIMIT: Duration = Duration::from_secs(20);

/// A scratch directory, emptied when made and removed when dropped (declare it before the
/// processes using it, so it is dropped after them).
pub struct TempDir(PathBuf);

impl TempDir {
    /// `<tmp>/trove-test-<name>-<pid>`.
    pub fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("trove-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `trove` binary under test.
pub fn trove() -> Command {
    Command::new(env!("CARGO_BIN_EXE_trove"))
}

/// A `trove serve` child. Its stderr is read by a thread as it comes (so trove never blocks
/// on it) and kept line by line. Killed when dropped.
pub struct Trove {
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// The config file it was started with.
    pub config: PathBuf,
}

impl Drop for Trove {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Trove {
    /// Writes `config` to `dir/trove.toml` and starts `trove serve` on it; panics with its
    /// stderr if it does not listen.
    pub fn start(dir: &Path, config: &str) -> Trove {
        Trove::try_start(dir, config).unwrap_or_else(|e| panic!("trove did not start:\n{e}"))
    }

    /// As [`Trove::start`], or the child's stderr if it exited (or hung) before listening.
    pub fn try_start(dir: &Path, config: &str) -> Result<Trove, String> {
        let mut cmd = trove();
        cmd.args(["serve", "--config"]).arg(dir.join("trove.toml"));
        Trove::spawn(dir, config, cmd)
    }

    /// As [`Trove::try_start`], with `env` set in the child's environment.
    pub fn try_start_env(dir: &Path, config: &str, env: &[(&str, &Path)]) -> Result<Trove, String> {
        let mut cmd = trove();
        cmd.args(["serve", "--config"]).arg(dir.join("trove.toml"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        Trove::spawn(dir, config, cmd)
    }

    /// As [`Trove::start`], under `ulimit -n nofile` (soft and hard, so it cannot raise it).
    pub fn start_with_nofile(dir: &Path, config: &str, nofile: u32) -> Trove {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "ulimit -n {nofile} && exec \"$0\" serve --config \"$1\""
            ))
            .arg(env!("CARGO_BIN_EXE_trove"))
            .arg(dir.join("trove.toml"));
        Trove::spawn(dir, config, cmd).unwrap_or_else(|e| panic!("trove did not start:\n{e}"))
    }

    fn spawn(dir: &Path, config: &str, mut cmd: Command) -> Result<Trove, String> {
        let path = dir.join("trove.toml");
        std::fs::write(&path, config).unwrap();
        let mut child = cmd
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let pipe = child.stderr.take().unwrap();
        let l = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                l.lock().unwrap().push(line);
            }
        });
        let mut t = Trove {
            child,
            lines,
            config: path,
        };
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if t.find(|l| l.starts_with("listening ")).is_some() {
                return Ok(t);
            }
            if Instant::now() >= deadline || t.child.try_wait().unwrap().is_some() {
                // Let the reader take the last lines of a child that exited.
                std::thread::sleep(Duration::from_millis(100));
                let _ = t.child.kill();
                let _ = t.child.wait();
                return Err(t.lines().join("\n"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every stderr line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn find(&self, f: impl Fn(&str) -> bool) -> Option<String> {
        self.lines.lock().unwrap().iter().find(|l| f(l)).cloned()
    }

    /// Waits (10 s at most) for a stderr line matching `f`.
    pub fn wait_line(&self, f: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self.find(&f) {
                return Some(l);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The rest of the first stderr line starting with `prefix`.
    pub fn line(&self, prefix: &str) -> Option<String> {
        self.find(|l| l.trim().starts_with(prefix))
            .and_then(|l| l.trim().strip_prefix(prefix).map(str::to_string))
    }

    /// How many stderr lines match `f`.
    pub fn count_lines(&self, f: impl Fn(&str) -> bool) -> usize {
        self.lines.lock().unwrap().iter().filter(|l| f(l)).count()
    }

    /// How many stderr lines contain `needle`.
    pub fn lines_with(&self, needle: &str) -> usize {
        self.count_lines(|l| l.contains(needle))
    }

    /// The address of its first proxy listener (`listening forward|reverse ADDR`).
    pub fn proxy(&self) -> String {
        self.find(|l| l.starts_with("listening "))
            .and_then(|l| l.rsplit(' ').next().map(str::to_string))
            .expect("trove printed a listener")
    }

    /// The admin listener's TCP address (`admin listening ADDR`), waited for.
    pub fn admin(&self) -> String {
        let addr = |l: &str| {
            l.strip_prefix("admin listening ")
                .filter(|a| a.parse::<SocketAddr>().is_ok())
                .map(str::to_string)
        };
        self.wait_line(|l| addr(l).is_some())
            .and_then(|l| addr(&l))
            .unwrap_or_else(|| panic!("trove printed its admin address: {:?}", self.lines()))
    }

    /// Sends SIGKILL and reaps it.
    pub fn kill9(&mut self) {
        let _ = Command::new("kill")
            .args(["-9", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    /// Waits (`limit` at most) for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// An origin on 127.0.0.1: keep-alive, one thread per connection; `respond` turns each
/// request head into the whole response. Returns its address and a count of requests.
pub fn origin_with(
    respond: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let count = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&count);
    let respond = Arc::new(respond);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let (c, respond) = (Arc::clone(&c), Arc::clone(&respond));
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                loop {
                    let end = loop {
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break p;
                        }
                        match s.read(&mut tmp) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end + 4);
                    c.fetch_add(1, Ordering::SeqCst);
                    if s.write_all(&respond(&head)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, count)
}

/// A 200 response with `body`, cacheable for `max_age` seconds.
pub fn cacheable(body: &[u8], max_age: u32, content_type: Option<&str>) -> Vec<u8> {
    let ct = content_type
        .map(|t| format!("content-type: {t}\r\n"))
        .unwrap_or_default();
    let mut r = format!(
        "HTTP/1.1 200 OK\r\ncache-control: max-age={max_age}\r\n{ct}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// The request target of a request head (`GET /p HTTP/1.1` → `/p`).
pub fn target_of(head: &str) -> &str {
    head.split_whitespace().nth(1).unwrap_or("")
}

/// One request on a new connection; the whole response text, or `""` if none came in 5 s.
pub fn request(addr: &str, raw: &str) -> String {
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

/// The whole lines of a file trove appends to (`""` if it is not there yet): a read that
/// overlaps a write that crosses a page can see a part of that write, so a last line
/// without its newline is left for the next read, never taken as a line.
pub fn read_lines(path: &Path) -> String {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
    text
}

/// Polls `f` every 20 ms until it holds or `limit` passes; one last try at the end.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// One request through the proxy at `proxy` on a connection of its own (`Connection:
/// close`): `(head, body)` as text.
pub fn request_text(proxy: &str, method: &str, url: &str) -> (String, String) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let host = url.split('/').nth(2).unwrap_or("x");
    write!(
        s,
        "{method} {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_string(), body.to_string())
}

/// GET `url` through the proxy: `(head, body)`.
pub fn get_text(proxy: &str, url: &str) -> (String, String) {
    request_text(proxy, "GET", url)
}

/// One admin API call over TCP, with a bearer token if given: `(status, body)`.
pub fn api(
    admin: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: admin\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, body.to_string())
}

/// The admin listener's `/metrics` text (`""` if it cannot be reached).
pub fn metrics_text(admin: &str) -> String {
    let Ok(mut s) = TcpStream::connect(admin) else {
        return String::new();
    };
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// One unlabelled metric's value, or -1 if it is not there.
pub fn metric(admin: &str, name: &str) -> f64 {
    metrics_text(admin)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(-1.0)
}

/// True when a response head says trove answered from its cache (`Cache-Status: trove; hit`).
pub fn is_hit(head: &str) -> bool {
    head.to_ascii_lowercase()
        .contains("cache-status: trove; hit")
}

/// A free address on 127.0.0.1 for a trove the test starts (bound and released; below the
/// ephemeral range, so no outgoing connection takes it meanwhile).
pub fn free_port() -> String {
    format!("127.0.0.1:{}", trove_bench::proc::free_port().unwrap())
}

/// A small tmpfs mounted for a test, unmounted when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts one at `at` with mount options `opts` (`size=1m`, `ro`, …); `None` where this
    /// machine can't (not root).
    pub fn mount(at: &std::path::Path, opts: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            .then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}
