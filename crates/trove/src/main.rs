//! The `trove` program: parses the command line, loads the config, starts the pieces and
//! wires them together. Nothing else lives here.
//!
//! clap for the command line, toml + serde for the config file, anyhow for error messages
//! at the top, tracing for diagnostics (the access log is the proxy's own), and mimalloc as
//! the allocator: with tens of thousands of idle connections glibc's malloc spent a sixth of
//! the hit path searching fragmented free lists (measured with perf, see BENCHMARKS.md);
//! mimalloc's per-thread, size-segregated pages do not degrade that way.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod config;

use std::path::PathBuf;
use std::sync::Arc;

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
    /// Replay a trace through trove's cache core in virtual time (and `sim model`).
    Sim(Box<trove_sim::SimArgs>),
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TROVE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Bench(args) => trove_bench::run(*args),
        Command::Sim(args) => trove_sim::run(*args),
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
        None => Config::default(),
    };
    if args.check {
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
    runtime.block_on(run(config))
}

struct AdminSource(Arc<trove_proxy::Shared>);

impl trove_admin::Source for AdminSource {
    fn metrics(&self) -> String {
        self.0.render_metrics()
    }

    fn status_page(&self) -> String {
        trove_proxy::status::page(&self.0)
    }

    fn refused(&self, _peer: std::net::SocketAddr) {
        self.0
            .metrics
            .admin_refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    // The admin listener is bound before the proxy starts, so the proxy refuses its address
    // as a destination from the first request on.
    let admin = match config.admin_addr()? {
        Some(addr) => Some(trove_admin::bind(addr).await?),
        None => None,
    };
    let mut settings = config.proxy_settings();
    settings
        .other_listeners
        .extend(admin.as_ref().map(|a| a.local_addr()));
    let running = trove_proxy::start(settings).await?;
    for (mode, addr) in &running.addrs {
        eprintln!("listening {} {addr}", mode.as_str());
    }
    if let Some(admin) = admin {
        let bound = admin.local_addr();
        let allow = trove_admin::Allow::new(config.admin.allow.clone());
        admin.serve(allow, Arc::new(AdminSource(Arc::clone(&running.shared))));
        eprintln!("admin listening {bound}");
    }
    shutdown_signal().await;
    eprintln!("trove: shutting down");
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
