//! Signals in (`SIGHUP` reload, `SIGUSR1` reopen the log, `SIGTERM`/`SIGINT` stop) and out
//! (`trove reload`, `trove rotate`, `trove stop` signal the process named by the pid file), the
//! way nginx's `-s reload` and Squid's `-k reconfigure` work. tokio's signal streams; rustix
//! to send a signal without `unsafe`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::config::Config;

/// What a signal asks of a running trove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    Reload,
    Rotate,
    Stop,
    /// `trove stop`: [`Ask::Stop`], then wait for the process to exit.
    StopAndWait,
}

impl Ask {
    fn signal(self) -> rustix::process::Signal {
        match self {
            Ask::Reload => rustix::process::Signal::HUP,
            Ask::Rotate => rustix::process::Signal::USR1,
            Ask::Stop | Ask::StopAndWait => rustix::process::Signal::TERM,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Ask::Reload => "SIGHUP (reload)",
            Ask::Rotate => "SIGUSR1 (reopen the access log)",
            Ask::Stop | Ask::StopAndWait => "SIGTERM (graceful stop)",
        }
    }
}

/// The signals `trove serve` listens for.
pub struct Signals {
    hup: Signal,
    usr1: Signal,
    term: Signal,
    int: Signal,
}

impl Signals {
    pub fn new() -> anyhow::Result<Signals> {
        let on = |kind| signal(kind).context("cannot listen for signals");
        Ok(Signals {
            hup: on(SignalKind::hangup())?,
            usr1: on(SignalKind::user_defined1())?,
            term: on(SignalKind::terminate())?,
            int: on(SignalKind::interrupt())?,
        })
    }

    /// The next request by signal.
    pub async fn next(&mut self) -> Ask {
        tokio::select! {
            _ = self.hup.recv() => Ask::Reload,
            _ = self.usr1.recv() => Ask::Rotate,
            _ = self.term.recv() => Ask::Stop,
            _ = self.int.recv() => Ask::Stop,
        }
    }

    /// The next `SIGTERM` or `SIGINT` (a second one while stopping: stop at once).
    pub async fn next_stop(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// `trove reload|rotate|stop`: signals the trove named by `--pid` or by the config's
/// `[runtime] pid_file`.
pub fn send(config: &Option<PathBuf>, pid: Option<i32>, ask: Ask) -> anyhow::Result<()> {
    let loaded = config.as_ref().map(|p| Config::load(p)).transpose()?;
    // How long a graceful stop may take: the running trove's `[timeouts] shutdown`, and
    // a little more for the access log and the disk's last writes.
    let shutdown = loaded.as_ref().map_or_else(
        || trove_proxy::Settings::default().timeouts.shutdown,
        |c| c.timeouts.shutdown,
    );
    let (pid, from) = match (pid, config) {
        (Some(pid), _) => (pid, "--pid".to_string()),
        (None, Some(path)) => {
            let Some(config) = &loaded else {
                anyhow::bail!("cannot read {}", path.display());
            };
            let Some(pid_file) = config.pid_file() else {
                anyhow::bail!(
                    "{} sets no [runtime] pid_file: give the process id with --pid",
                    path.display()
                );
            };
            (read_pid(&pid_file)?, pid_file.display().to_string())
        }
        (None, None) => {
            anyhow::bail!("which trove? give --config (with a [runtime] pid_file) or --pid")
        }
    };
    let target = rustix::process::Pid::from_raw(pid)
        .with_context(|| format!("{pid} (from {from}) is not a process id"))?;
    rustix::process::kill_process(target, ask.signal())
        .map_err(std::io::Error::from)
        .with_context(|| format!("cannot signal process {pid} (from {from})"))?;
    eprintln!("sent {} to trove, process {pid}", ask.name());
    if ask == Ask::StopAndWait {
        // Like `systemctl stop`: return once the process is gone, so a script can start
        // another on the same ports and directories right after.
        let limit = shutdown + std::time::Duration::from_secs(10);
        if !wait_for_exit(pid, limit) {
            anyhow::bail!(
                "trove (process {pid}) is still running {}s after SIGTERM",
                limit.as_secs()
            );
        }
        eprintln!("trove (process {pid}) has exited");
    }
    Ok(())
}

/// Waits until process `pid` has exited (gone, or a zombie its parent has not reaped), up
/// to `limit`; false if it is still there.
fn wait_for_exit(pid: i32, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // `pid (comm) S …`: the state follows the last `)`.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if matches!(state, None | Some("Z") | Some("X")) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn read_pid(path: &Path) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read the pid file {} (is trove serve running?)",
            path.display()
        )
    })?;
    text.trim()
        .parse()
        .with_context(|| format!("the pid file {} holds no process id", path.display()))
}

/// Writes this process's id to `path`, refusing if it names a trove that is still running.
pub fn claim_pid_file(path: &Path) -> anyhow::Result<()> {
    if let Ok(pid) = read_pid(path) {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if pid != std::process::id() as i32 && comm.trim() == "trove" {
            anyhow::bail!(
                "runtime.pid_file: {} says trove is already running as process {pid}; stop it first (trove stop) or use another pid_file",
                path.display()
            );
        }
    }
    std::fs::write(path, format!("{}\n", std::process::id()))
        .with_context(|| format!("runtime.pid_file: cannot write {}", path.display()))
}

/// One line on what a reload changed, and what needs a restart to change. `running` is
/// the config trove started with, whose restart-only keys (eviction, disk, the admin
/// listener, `[runtime]`) are still the ones in effect: a key changed and then changed back
/// needs nothing. `old` is the config of the last reload, for what a reload does change.
pub fn describe(
    done: &trove_proxy::listener::Reloaded,
    running: &Config,
    old: &Config,
    new: &Config,
) -> String {
    let mut parts = Vec::new();
    if done.changed.is_empty() {
        parts.push("nothing changed".to_string());
    } else {
        parts.push(format!("changed [{}]", done.changed.join(", ")));
    }
    if running.cache.eviction != new.cache.eviction {
        parts.push("cache.eviction needs a restart to change".into());
    }
    if running.cache.disk != new.cache.disk {
        parts.push("[cache.disk] needs a restart to change".into());
    }
    if running.admin.listen != new.admin.listen || running.admin.allow != new.admin.allow {
        parts.push("[admin] listen and allow need a restart to change".into());
    }
    let a = (&old.admin, &new.admin);
    for (key, changed) in [
        ("admin.token", a.0.token != a.1.token),
        ("admin.token_file", a.0.token_file != a.1.token_file),
        ("admin.socket", a.0.socket != a.1.socket),
        ("admin.max_put_body", a.0.max_put_body != a.1.max_put_body),
    ] {
        if changed {
            parts.push(format!("{key} reloaded"));
        }
    }
    if running.runtime.threads != new.runtime.threads
        || running.runtime.pid_file != new.runtime.pid_file
    {
        parts.push("[runtime] needs a restart to change".into());
    }
    for a in &done.closed {
        parts.push(format!("stopped listening on {a}"));
    }
    parts.join("; ")
}
