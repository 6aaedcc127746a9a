//! The `trove` program: parses the command line, loads the config, starts the pieces and
//! wires them together. Nothing else lives here.
//!
//! clap for the command line, toml + serde for the config file, anyhow for error messages
//! at the top, tracing for diagnostics (the access log is the proxy's own), and mimalloc as
//! the allocator: with tens of thousands of idle connections glibc's malloc spent a sixth of
//! the hit path searching fragmented free lists (measured with perf, see BENCHMARKS.md);
//! mimalloc's per-thread, size-segregated pages do not degrade that way. trove-disk and
//! trove-store because the binary opens the disk tier under the memory tier (`tiers`) and
//! hands the proxy the result as the storage interface.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admin_files;
mod api_cli;
mod config;
mod lifecycle;
mod tiers;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use config::Config;

#[derive(Parser)]
#[command(
    name = "trove",
    version,
    about = "A caching HTTP proxy, its benchmark and its simulator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the caching proxy (forward proxy on 127.0.0.1:3128 with no config).
    Serve(ServeArgs),
    /// Web-Polygraph-style benchmark of any caching proxy.
    Bench(Box<trove_bench::BenchArgs>),
    /// Store an object under a URL through the admin API.
    Put(api_cli::PutArgs),
    /// Print a stored object's body (or with --meta its variants) from the admin API.
    Get(api_cli::GetArgs),
    /// Remove every stored variant of a URL through the admin API.
    Delete(api_cli::UrlArgs),
    /// Invalidate a URL, a tag, a named cache, a prefix or a ban pattern, hard or --soft.
    Purge(api_cli::PurgeArgs),
    /// List the objects carrying a tag or in a named cache, or the named caches.
    List(api_cli::ListArgs),
    /// The store's and the invalidation rules' figures.
    Stats(api_cli::ConnOnly),
    /// Pending bans.
    Bans(api_cli::ConnOnly),
    /// The cluster as a node sees it (`[cluster]`).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Replay a trace through trove's cache core in virtual time (and `sim model`).
    Sim(Box<trove_sim::SimArgs>),
    /// Make a running `trove serve` re-read its config (SIGHUP): routes, ACLs, limits,
    /// timeouts, log and cache budget change; the cache and open connections are kept.
    Reload(SignalArgs),
    /// Make a running `trove serve` reopen its access log (SIGUSR1), after logrotate moved it.
    Rotate(SignalArgs),
    /// Stop a running `trove serve` gracefully (SIGTERM): requests in flight finish within
    /// `[timeouts] shutdown`. Returns once the process has exited.
    Stop(StopArgs),
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Nodes, whether each is up, the share of keys each owns, failures: JSON from the
    /// admin API's `GET /v1/cluster`.
    Status(api_cli::ConnOnly),
    /// The node that owns a URL now (`id addr`): in shard mode, where `trove put` for it
    /// must go.
    Owner(api_cli::OwnerArgs),
}

#[derive(clap::Args)]
struct StopArgs {
    #[command(flatten)]
    which: SignalArgs,
    /// Return once the signal is sent, without waiting for the process to exit.
    #[arg(long)]
    no_wait: bool,
}

/// Which running trove to signal: the process id in the config's `[runtime] pid_file`, or
/// one given.
#[derive(clap::Args)]
struct SignalArgs {
    /// The config file the running trove was started with (its `[runtime] pid_file` names
    /// the process).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The process id, instead of a pid file.
    #[arg(long)]
    pid: Option<i32>,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML config file (see trove.example.toml).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Check the config and exit.
    #[arg(long)]
    check: bool,
    /// Print a commented example config and exit.
    #[arg(long)]
    print_config: bool,
}

fn main() {
    // Colour only for a person at a terminal: not in a file or the journal, and never
    // when NO_COLOR is set (no-color.org).
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TROVE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Bench(args) => trove_bench::run(*args),
        Command::Put(a) => api_cli::put(a),
        Command::Get(a) => api_cli::get(a),
        Command::Delete(a) => api_cli::delete(a),
        Command::Purge(a) => api_cli::purge(a),
        Command::List(a) => api_cli::list(a),
        Command::Stats(a) => api_cli::stats(a),
        Command::Bans(a) => api_cli::bans(a),
        Command::Cluster(ClusterCommand::Status(a)) => api_cli::cluster_status(a),
        Command::Cluster(ClusterCommand::Owner(a)) => api_cli::cluster_owner(a),
        Command::Sim(args) => trove_sim::run(*args),
        Command::Reload(args) => lifecycle::send(&args.config, args.pid, lifecycle::Ask::Reload),
        Command::Rotate(args) => lifecycle::send(&args.config, args.pid, lifecycle::Ask::Rotate),
        Command::Stop(args) => {
            let ask = if args.no_wait {
                lifecycle::Ask::Stop
            } else {
                lifecycle::Ask::StopAndWait
            };
            lifecycle::send(&args.which.config, args.which.pid, ask)
        }
    };
    if let Err(e) = result {
        eprintln!("trove: {e:#}");
        std::process::exit(1);
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    if args.print_config {
        print!("{}", config::EXAMPLE);
        return Ok(());
    }
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::without_file(),
    };
    if args.check {
        let problems = config.check_ports();
        if !problems.is_empty() {
            anyhow::bail!("{}", config::Problems(problems));
        }
        eprintln!("config ok");
        return Ok(());
    }
    let threads = match config.runtime.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let runtime = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    runtime.block_on(run(config, args.config))
}

/// What the admin listener shows: always the proxy's current generation.
struct AdminSource(Arc<trove_proxy::listener::Current>);

impl trove_admin::Source for AdminSource {
    fn metrics(&self) -> String {
        self.0.get().map(|s| s.render_metrics()).unwrap_or_default()
    }

    fn status_page(&self) -> String {
        self.0
            .get()
            .map(|s| trove_proxy::status::page(&s))
            .unwrap_or_default()
    }

    fn degraded(&self) -> Option<String> {
        self.0.get().and_then(|s| s.disk_health())
    }

    fn refused(&self, _peer: std::net::SocketAddr) {
        if let Some(s) = self.0.get() {
            s.metrics
                .admin_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The admin API's token and Unix socket, as configured or by default (see
/// `admin_files`): what a reload may change, and what a clean stop removes.
#[derive(Default)]
struct AdminFiles {
    /// The token made at start when none is configured, kept across reloads.
    generated: Option<String>,
    /// True while the token in use is the generated one.
    using_generated: bool,
    /// The socket's setting, its path and its accept loop.
    socket_setting: String,
    socket: Option<(PathBuf, tokio::task::AbortHandle)>,
    /// Token files written, and the token they hold.
    files: Vec<PathBuf>,
    written: String,
    /// The admin side's connection limit, shared by the TCP listener and the socket.
    gate: Arc<trove_admin::Gate>,
}

impl AdminFiles {
    /// The token to use: `[admin] token` / `token_file`, else a generated one.
    fn token(&mut self, config: &Config) -> anyhow::Result<String> {
        match config.admin_token()? {
            Some(t) => {
                self.using_generated = false;
                Ok(t)
            }
            None => {
                self.using_generated = true;
                if self.generated.is_none() {
                    self.generated = Some(admin_files::generate_token()?);
                }
                Ok(self.generated.clone().unwrap_or_default())
            }
        }
    }

    fn bind_socket(
        &mut self,
        config: &Config,
        admin_port: Option<u16>,
        running: &trove_proxy::listener::Running,
        api: &Arc<trove_admin::api::Api>,
    ) -> anyhow::Result<()> {
        self.socket_setting = config.admin.socket.clone();
        let Some(path) = admin_files::socket_path(&config.admin.socket, admin_port) else {
            return Ok(());
        };
        let auto = config.admin.socket == "auto";
        let bound = if auto {
            let dir = admin_files::runtime_dir();
            admin_files::ensure_private_dir(&dir).and_then(|()| {
                let swept = admin_files::sweep_stale(&dir, admin_files::STALE_AFTER);
                if swept > 0 {
                    eprintln!(
                        "removed {swept} admin socket(s) of stopped trove processes from {}",
                        dir.display()
                    );
                }
                Ok(trove_admin::bind_unix(&path)?)
            })
        } else {
            trove_admin::bind_unix(&path).map_err(anyhow::Error::from)
        };
        let unix = match bound {
            Ok(u) => u,
            // The default place is a convenience: without it the API is on TCP still.
            Err(e) if auto => {
                eprintln!("trove: admin.socket (auto): {e:#}; the API is served on TCP only");
                return Ok(());
            }
            Err(e) => return Err(e).context("admin.socket"),
        };
        let source = Arc::new(AdminSource(running.current()));
        eprintln!("admin socket {}", path.display());
        let handle = unix.serve_gated(source, Some(Arc::clone(api)), Arc::clone(&self.gate));
        self.socket = Some((path, handle));
        Ok(())
    }

    /// Writes the generated token where the CLI looks for it (or removes files of a
    /// generated token no longer in use). Failures are logged: the API still works for
    /// whoever has the token.
    ///
    /// A generated token written nowhere (the runtime directory refused, say, because
    /// another user made it first) is an error: nobody could use the API, yet the TCP
    /// listener would say it serves it (issue 19, defect 10).
    fn write_tokens(
        &mut self,
        admin_addr: Option<std::net::SocketAddr>,
        token: &str,
    ) -> anyhow::Result<()> {
        let before = std::mem::take(&mut self.files);
        let before_token = std::mem::take(&mut self.written);
        for f in &before {
            // Only if it still holds our token: another trove may have written its own.
            admin_files::remove_token(f, &before_token);
        }
        if !self.using_generated {
            return Ok(());
        }
        let mut places = Vec::new();
        let mut problems = Vec::new();
        if let Some(addr) = admin_addr {
            match admin_files::ensure_private_dir(&admin_files::runtime_dir()) {
                Ok(()) => places.push(admin_files::token_for(addr)),
                Err(e) => problems.push(format!("{e:#}")),
            }
        }
        if let Some((socket, _)) = &self.socket {
            places.push(admin_files::token_beside(socket));
        }
        for p in places {
            match admin_files::write_token(&p, token) {
                Ok(()) => {
                    if !before.contains(&p) {
                        eprintln!("admin token in {}", p.display());
                    }
                    self.files.push(p);
                }
                Err(e) => {
                    eprintln!("trove: admin token: {e:#}");
                    problems.push(format!("{e:#}"));
                }
            }
        }
        self.written = token.to_string();
        if self.files.is_empty() && (admin_addr.is_some() || self.socket.is_some()) {
            anyhow::bail!(
                "admin: the generated API token could be written nowhere ({}); set [admin] \
                 token or token_file, or fix the runtime directory",
                problems.join("; ")
            );
        }
        Ok(())
    }

    /// A reload: the token, the largest put and the socket as the new config says.
    fn reload(
        &mut self,
        next: &Config,
        admin_addr: Option<std::net::SocketAddr>,
        running: &trove_proxy::listener::Running,
        api: &Arc<trove_admin::api::Api>,
    ) {
        match self.token(next) {
            Ok(t) => {
                api.set_token(Some(t));
            }
            Err(e) => eprintln!("trove: reload: admin token kept: {e:#}"),
        }
        match next.max_put_body() {
            Ok(n) => api.set_max_body(n),
            Err(e) => eprintln!("trove: reload: admin.max_put_body kept: {e:#}"),
        }
        if next.admin.socket != self.socket_setting {
            let old = self.socket.take();
            let old_setting = self.socket_setting.clone();
            match self.bind_socket(next, admin_addr.map(|a| a.port()), running, api) {
                Ok(()) => {
                    if let Some((path, handle)) = old {
                        handle.abort();
                        let _ = std::fs::remove_file(path);
                    }
                }
                Err(e) => {
                    eprintln!("trove: reload: admin.socket kept: {e:#}");
                    self.socket = old;
                    self.socket_setting = old_setting;
                }
            }
        }
        let token = if self.using_generated {
            self.generated.clone().unwrap_or_default()
        } else {
            String::new()
        };
        if let Err(e) = self.write_tokens(admin_addr, &token) {
            eprintln!("trove: reload: {e:#}");
        }
    }

    /// A clean stop: the socket and the token files go.
    fn remove(&mut self) {
        if let Some((path, handle)) = self.socket.take() {
            handle.abort();
            let _ = std::fs::remove_file(path);
        }
        for f in self.files.drain(..) {
            admin_files::remove_token(&f, &self.written);
        }
    }
}

async fn run(config: Config, path: Option<PathBuf>) -> anyhow::Result<()> {
    let pid_file = config.pid_file();
    if let Some(pid_file) = &pid_file {
        lifecycle::claim_pid_file(pid_file)?;
    }
    let result = serve_until_stopped(config, path).await;
    if let Some(pid_file) = &pid_file {
        let _ = std::fs::remove_file(pid_file);
    }
    result
}

async fn serve_until_stopped(config: Config, path: Option<PathBuf>) -> anyhow::Result<()> {
    // The admin listener is bound before the proxy starts, so the proxy refuses its address
    // as a destination from the first request on.
    let admin = match config.admin_addr()? {
        Some(addr) => Some(trove_admin::bind(addr).await.context("admin.listen")?),
        None => None,
    };
    let admin_addr = admin.as_ref().map(|a| a.local_addr());
    let mut settings = config.proxy_settings();
    settings.other_listeners.extend(admin_addr);
    let mut running = trove_proxy::start_with(settings, &tiers::DiskTier).await?;
    // Signals are taken before anything says trove is up: `listening` is what scripts and
    // supervisors wait for, and a SIGHUP (`trove reload`) or SIGUSR1 (`trove rotate`) sent
    // right after it, before the handlers were installed, took the default action and
    // killed trove. One that comes from here on waits for the loop below.
    let mut signals = lifecycle::Signals::new()?;
    for (mode, addr) in &running.addrs {
        eprintln!("listening {} {addr}", mode.as_str());
    }
    let admin_port = admin_addr.map(|a| a.port());
    let mut admin_files = AdminFiles::default();
    let token = admin_files.token(&config)?;
    let api = Arc::new(trove_admin::api::Api::following(
        running.current(),
        Some(token.clone()),
        config.max_put_body()?,
    ));
    // The socket and the token files first: the TCP address is the last line of start-up
    // (scripts and tests read up to it).
    admin_files.bind_socket(&config, admin_port, &running, &api)?;
    admin_files.write_tokens(admin_addr, &token)?;
    if let Some(admin) = admin {
        let bound = admin.local_addr();
        let allow = trove_admin::Allow::new(config.admin.allow.clone());
        let source = Arc::new(AdminSource(running.current()));
        admin.serve_gated(
            allow,
            source,
            Some(Arc::clone(&api)),
            Arc::clone(&admin_files.gate),
        );
        eprintln!("admin listening {bound}");
    }
    // What trove started with: the restart-only keys in effect (see `lifecycle::describe`).
    let started = config.clone();
    let mut config = config;
    loop {
        match signals.next().await {
            lifecycle::Ask::Reload => {
                let Some(path) = &path else {
                    eprintln!("trove: reload: started without --config, nothing to re-read");
                    continue;
                };
                match Config::load(path) {
                    Err(e) => eprintln!("trove: reload refused, the running config stays: {e:#}"),
                    Ok(next) => {
                        let mut settings = next.proxy_settings();
                        settings.other_listeners.extend(admin_addr);
                        match running.reload(settings) {
                            Err(e) => {
                                eprintln!("trove: reload refused, the running config stays: {e}")
                            }
                            Ok(done) => {
                                admin_files.reload(&next, admin_addr, &running, &api);
                                eprintln!(
                                    "trove: reloaded {}: {}",
                                    path.display(),
                                    lifecycle::describe(&done, &started, &config, &next)
                                );
                                for (mode, addr) in &running.addrs {
                                    if done.listening.contains(addr) {
                                        eprintln!("listening {} {addr}", mode.as_str());
                                    }
                                }
                                config = next;
                            }
                        }
                    }
                }
            }
            lifecycle::Ask::Rotate => {
                running.reopen_log();
                eprintln!("trove: reopening the access log");
            }
            lifecycle::Ask::Stop | lifecycle::Ask::StopAndWait => {
                admin_files.remove();
                let bound = running.shared.settings.timeouts.shutdown;
                eprintln!(
                    "trove: stopping: no new connections, waiting up to {bound:?} for requests in flight (signal again to stop at once)"
                );
                tokio::select! {
                    left = running.stop(bound) => {
                        if left > 0 {
                            eprintln!("trove: stopped with {left} connections still open after {bound:?}");
                        } else {
                            eprintln!("trove: stopped");
                        }
                    }
                    _ = signals.next_stop() => {
                        running.shared.log.close();
                        eprintln!("trove: stopping at once");
                    }
                }
                return Ok(());
            }
        }
    }
}
