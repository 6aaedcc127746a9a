//! Proxies under test as child processes: started non-daemonised in their own process group
//! with their own temporary directory, probed until ready, stopped by their PID.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// A running proxy (or any server) we started.
pub struct Child {
    /// Name for messages.
    pub name: String,
    child: std::process::Child,
    /// Its directory (configs, logs, cache files).
    pub dir: PathBuf,
    stderr: PathBuf,
}

/// A fresh directory for `name` under the system temp dir, writable by the unprivileged users
/// proxies switch to when started as root.
pub fn temp_dir(name: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    // Unique within the process too: a library user (a test harness) may run two at once.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("trove-bench-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
    Ok(dir)
}

/// A loopback port that was free a moment ago (the proxy binds it next).
///
/// Chosen *below* the kernel's ephemeral range (`ip_local_port_range`): a port the kernel hands
/// out for `bind(0)` is one it may hand out again a moment later as the local port of some
/// outgoing connection — the bench's own clients — and the proxy's `bind` then fails with
/// "address in use" (seen in CI). Below that range only explicit binds take ports. Where the
/// range leaves no room, falls back to an ephemeral port.
pub fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    // Ports 10000 up to the ephemeral range: clear of the well-known and common service ports.
    let (base, span) = (10_000u64, u64::from(low.saturating_sub(10_000)));
    if span >= 1_000 {
        // Spread processes apart (pid, clock) and calls within one apart (a counter).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()));
        let seed = u64::from(std::process::id()).wrapping_mul(7919) ^ nanos;
        for _ in 0..200 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = base + (seed.wrapping_add(n.wrapping_mul(7_919))) % span;
            let port = u16::try_from(port).unwrap_or(u16::MAX);
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Child {
    /// Starts `argv` in `dir`, with stdout and stderr going to files in `dir`.
    pub fn spawn(
        name: &str,
        argv: &[String],
        dir: &Path,
        env: &[(&str, String)],
    ) -> anyhow::Result<Child> {
        Child::spawn_in(name, argv, dir, Some(dir), "", env)
    }

    /// Starts `argv` in `cwd` (default: ours), with stdout and stderr going to
    /// `stdout{tag}.log` and `stderr{tag}.log` in `dir`.
    pub fn spawn_in(
        name: &str,
        argv: &[String],
        dir: &Path,
        cwd: Option<&Path>,
        tag: &str,
        env: &[(&str, String)],
    ) -> anyhow::Result<Child> {
        let (prog, args) = argv.split_first().context("empty command")?;
        let out = std::fs::File::create(dir.join(format!("stdout{tag}.log")))?;
        let stderr = dir.join(format!("stderr{tag}.log"));
        let err = std::fs::File::create(&stderr)?;
        let mut cmd = Command::new(prog);
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own process group, so stopping it stops its workers too.
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {}", argv.join(" ")))?;
        Ok(Child {
            name: name.into(),
            child,
            dir: dir.into(),
            stderr,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The tail of its stderr, for error messages.
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    fn signal_group(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, "--", &format!("-{}", self.pid())])
            .stderr(Stdio::null())
            .status();
    }

    /// SIGTERM to its process group, then SIGKILL if it has not exited within `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if !self.running() {
            return;
        }
        self.signal_group("-TERM");
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
    }

    /// SIGKILL to its process group, as a power cut would (the downtime test).
    pub fn kill9(&mut self) {
        self.signal_group("-KILL");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// What a probe request saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// HTTP status.
    pub status: u16,
    /// The server echoed this probe's nonce: the response came from the server.
    pub from_server: bool,
}

/// One blocking GET of `target` (origin-form path, or an absolute URI for forward proxies)
/// through `addr`, with nonce `nonce`.
pub fn probe(addr: SocketAddr, target: &str, host: &str, nonce: &str) -> anyhow::Result<Probe> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nX-Bench-Req: {nonce}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status line")?;
    let from_server = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("x-bench-echo:") && l[13..].trim() == nonce.to_ascii_lowercase()
    });
    Ok(Probe {
        status,
        from_server,
    })
}

/// Probes until a 200 comes back or `deadline` passes; fails early if the child exits.
pub fn wait_ready(
    child: &mut Child,
    addr: SocketAddr,
    target: &str,
    host: &str,
    within: Duration,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut last = String::new();
    let mut n = 0;
    while start.elapsed() < within {
        if !child.running() {
            anyhow::bail!(
                "{} exited during start-up; its stderr ends:\n{}",
                child.name,
                child.stderr_tail()
            );
        }
        n += 1;
        match probe(addr, target, host, &format!("ready-{n}")) {
            Ok(p) if p.status == 200 => return Ok(start.elapsed()),
            Ok(p) => last = format!("status {}", p.status),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!(
        "{} not ready at {addr} within {within:?} (last probe: {last}); stderr:\n{}",
        child.name,
        child.stderr_tail()
    )
}
