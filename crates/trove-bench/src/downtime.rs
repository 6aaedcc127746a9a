//! `trove bench downtime`: the cache-off downtime test (seed 000 §6.4 and §7.5).
//!
//! Under a light constant load (3 req/s by default, as in the cache-off), the bench starts the
//! proxy with the given command, lets the load run for a while, kills the proxy with SIGKILL (its
//! process group, by PID: what a power cut does to a process), waits, restarts it with the same
//! command, and measures on the robots' own timeline:
//!
//! - **time till first miss** (TTFM): from the restart to the first response that the origin
//!   server sent for that very request, through the proxy (users can browse again);
//! - **time till first hit** (TTFH): from the restart to the first response the proxy served
//!   from its cache;
//! - the **outage as clients saw it**: from the kill to the first successful response after the
//!   restart, with the requests that failed in it, by kind.
//!
//! A cache that keeps nothing across a restart (a memory-only cache, like trove before it has a
//! disk tier) can only hit an object it fetched again after the restart, so its TTFH is the time
//! until a robot revisits such an object: it depends on the load and the working set, not only
//! on the proxy. That is the correct measurement of such a cache, and the report says so.
//!
//! Precision: requests arrive as a Poisson stream at the given rate, so a time is known to about
//! one gap between requests (1/rate seconds); the cache-off quoted about 5 s.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::compare::{probe_path, PROBE_WORLD};
use crate::origin::object_path;
use crate::proc::{probe, temp_dir, Child};
use crate::report::{Report, RunInfo};
use crate::robot::{run_load, EventLog, Mode, Plan, TxEvent};
use crate::run::{effective_workload, world_of, LoadArgs, OriginSet, ProxyMode};
use crate::stats::Outcome;
use crate::workload::Phase;

/// `trove bench downtime`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example (trove as a forward proxy on a fixed port):\n  trove bench downtime \
                  --proxy 127.0.0.1:3128 -- trove serve --config trove.toml\n\nThe command \
                  must stay in the foreground (no daemonising) and listen on the same address \
                  after a restart. `{origin}` in an argument is replaced by the origin \
                  server's address (for reverse proxies)."
)]
pub struct DowntimeArgs {
    /// Where the robots send requests: the proxy's listening address (fixed: the restarted
    /// proxy must listen there again).
    #[arg(long)]
    pub proxy: SocketAddr,
    /// How to talk to the proxy.
    #[arg(long, value_enum, default_value = "forward")]
    pub mode: ProxyMode,
    /// Optional TCP address that accepts connections once the proxy is up (its admin port, say):
    /// polled after the restart to report when the proxy was listening. Default: --proxy.
    #[arg(long)]
    pub ready: Option<SocketAddr>,
    /// Constant request rate, req/s (the cache-off used 3).
    #[arg(long, default_value_t = 3.0)]
    pub rate: f64,
    /// Built-in workload name or workload file: its object model, recurrence and popularity.
    #[arg(long, default_value = "polymix-2")]
    pub workload: String,
    /// Number of robots (default: rate / the workload's per-robot rate).
    #[arg(long)]
    pub robots: Option<u32>,
    /// Server think time mean, s. Default 0, so the times measure the proxy and not the
    /// origin's think time; pass 2.5 to replay PolyMix-2's servers.
    #[arg(long, default_value_t = 0.0)]
    pub think: f64,
    /// Every object this many bytes (replaces the size distributions).
    #[arg(long)]
    pub object_size: Option<u64>,
    /// Seconds of load before the kill (the cache-off used 10 minutes).
    #[arg(long, default_value_t = 60.0)]
    pub warm: f64,
    /// Seconds between the kill and the restart (the cache-off's power was off about 5 s).
    #[arg(long, default_value_t = 5.0)]
    pub down: f64,
    /// Give up waiting for the first hit this many seconds after the restart.
    #[arg(long, default_value_t = 120.0)]
    pub max_wait: f64,
    /// Seconds the proxy may take to answer its first request at the initial start.
    #[arg(long, default_value_t = 60.0)]
    pub start_timeout: f64,
    /// A transaction not complete this many seconds after its intended start is an error.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Use an origin server already running (`trove bench origin`) at this address.
    #[arg(long)]
    pub origin: Option<SocketAddr>,
    /// Address the origin server binds (any 127.0.0.0/8 address).
    #[arg(long, default_value = "127.0.0.1")]
    pub origin_host: String,
    /// World id (hex): the URL prefix of this run's objects. Default: random.
    #[arg(long)]
    pub world: Option<String>,
    /// Name of the product in reports (default: the command's program name).
    #[arg(long)]
    pub label: Option<String>,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// The proxy's start command, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What the downtime test measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DowntimeReport {
    /// What was measured.
    pub label: String,
    /// The start command.
    pub command: Vec<String>,
    /// How the robots reached the proxy.
    pub mode: String,
    /// Offered request rate, req/s.
    pub rate: f64,
    /// PID of the proxy that was killed.
    pub killed_pid: u32,
    /// PID of the restarted proxy.
    pub restarted_pid: u32,
    /// Seconds of load before the kill.
    pub warm_s: f64,
    /// Seconds from the kill to the restart, as it happened.
    pub down_s: f64,
    /// Seconds from the restart until the proxy (or --ready) accepted TCP connections.
    pub listening_s: Option<f64>,
    /// Time till first miss: seconds from the restart to the end of the first response the
    /// origin sent through the proxy.
    pub ttfm_s: Option<f64>,
    /// Time till first hit: seconds from the restart to the end of the first response the
    /// proxy served from its cache.
    pub ttfh_s: Option<f64>,
    /// Seconds from the kill to the first successful response after the restart.
    pub outage_s: Option<f64>,
    /// Transactions that ended in the outage (from the kill to the first success after the
    /// restart).
    pub outage_requests: u64,
    /// Of those, failed ones.
    pub outage_errors: u64,
    /// Failed ones by kind.
    pub outage_errors_by_kind: BTreeMap<String, u64>,
    /// Transactions that ended before the kill.
    pub before: Counts,
    /// Transactions that ended after the outage.
    pub after: Counts,
    /// Explanations and warnings.
    pub notes: Vec<String>,
    /// The load's own report (phases `before` and `after`).
    pub run: Report,
}

/// Transactions in one part of the timeline.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Counts {
    /// Transactions that ended in it.
    pub requests: u64,
    /// Hits among them.
    pub hits: u64,
    /// Failures among them.
    pub errors: u64,
}

impl Counts {
    fn add(&mut self, o: Outcome) {
        self.requests += 1;
        self.hits += u64::from(o == Outcome::Hit);
        self.errors += u64::from(matches!(o, Outcome::Error(_)));
    }

    fn hit_pct(&self) -> String {
        let ok = self.requests - self.errors;
        if ok > 0 {
            format!("{:.1}%", 100.0 * self.hits as f64 / ok as f64)
        } else {
            "-".into()
        }
    }
}

/// When the proxy was killed and restarted.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// The SIGKILL.
    pub kill: Instant,
    /// The restart (the new process was spawned).
    pub restart: Instant,
}

/// Reads the transaction log against the kill and restart times.
pub fn analyse(events: &[TxEvent], tl: Timeline) -> DowntimeReport {
    let mut ev: Vec<&TxEvent> = events.iter().collect();
    ev.sort_by_key(|e| e.done);
    let since = |t: Instant, from: Instant| t.saturating_duration_since(from).as_secs_f64();
    let after_restart = |e: &&&TxEvent| e.done >= tl.restart;
    let first = |o: Outcome| ev.iter().filter(after_restart).find(|e| e.outcome == o);
    let first_ok = ev
        .iter()
        .filter(after_restart)
        .find(|e| !matches!(e.outcome, Outcome::Error(_)));
    let recovered = first_ok.map(|e| e.done);
    let mut r = DowntimeReport {
        down_s: since(tl.restart, tl.kill),
        ttfm_s: first(Outcome::Miss).map(|e| since(e.done, tl.restart)),
        ttfh_s: first(Outcome::Hit).map(|e| since(e.done, tl.restart)),
        outage_s: recovered.map(|t| since(t, tl.kill)),
        ..DowntimeReport::default()
    };
    for e in &ev {
        if e.done < tl.kill {
            r.before.add(e.outcome);
        } else if recovered.is_none_or(|t| e.done < t) {
            r.outage_requests += 1;
            if let Outcome::Error(k) = e.outcome {
                r.outage_errors += 1;
                *r.outage_errors_by_kind
                    .entry(k.as_str().to_string())
                    .or_default() += 1;
            }
        } else {
            r.after.add(e.outcome);
        }
    }
    r
}

fn fmt_s(v: Option<f64>) -> String {
    v.map_or("never".into(), |v| format!("{v:.2} s"))
}

impl DowntimeReport {
    /// The report as text.
    pub fn text(&self) -> String {
        let kinds: Vec<String> = self
            .outage_errors_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let mut o = format!(
            "trove bench downtime: {} ({}), {:.1} req/s, {}\n",
            self.label, self.mode, self.rate, self.run.workload
        );
        o += &format!(
            "before the kill    {:>5} requests in {:.0} s, hits {}, errors {}\n",
            self.before.requests,
            self.warm_s,
            self.before.hit_pct(),
            self.before.errors
        );
        o += &format!(
            "killed pid {} with SIGKILL; restarted {:.2} s later as pid {}\n",
            self.killed_pid, self.down_s, self.restarted_pid
        );
        o += &format!(
            "listening after restart        {}\n",
            fmt_s(self.listening_s)
        );
        o += &format!(
            "time till first miss (TTFM)    {}   restart to the first response the origin sent through the proxy\n",
            fmt_s(self.ttfm_s)
        );
        o += &format!(
            "time till first hit  (TTFH)    {}   restart to the first response served from the cache\n",
            fmt_s(self.ttfh_s)
        );
        o += &format!(
            "outage seen by clients         {}   kill to the first success: {} requests, {} failed{}\n",
            fmt_s(self.outage_s),
            self.outage_requests,
            self.outage_errors,
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        );
        o += &format!(
            "after the outage   {:>5} requests, hits {}, errors {}\n",
            self.after.requests,
            self.after.hit_pct(),
            self.after.errors
        );
        for n in &self.notes {
            o += &format!("note: {n}\n");
        }
        o
    }
}

/// Polls a TCP connect to `addr` until it succeeds or `until` passes.
fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Runs the downtime test.
pub fn run(a: DowntimeArgs) -> anyhow::Result<()> {
    let report = execute(&a)?;
    print!("{}", report.text());
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("bench: wrote {}", p.display());
    }
    anyhow::ensure!(
        report.ttfm_s.is_some(),
        "the proxy served no miss within {} s of its restart",
        a.max_wait
    );
    Ok(())
}

/// Runs the downtime test and returns its report without printing (for tests and tools).
pub fn execute(a: &DowntimeArgs) -> anyhow::Result<DowntimeReport> {
    anyhow::ensure!(a.rate > 0.0, "--rate must be positive");
    anyhow::ensure!(
        a.warm >= 0.0 && a.down >= 0.0 && a.max_wait > 0.0,
        "--warm and --down must not be negative, --max-wait must be positive"
    );
    let load = LoadArgs {
        workload: a.workload.clone(),
        scale: 1.0,
        rate: Some(a.rate),
        robots: a.robots,
        think: Some(a.think),
        object_size: a.object_size,
        robot_threads: 1,
        server_threads: 1,
        servers: Some(1),
        origins: a.origin.into_iter().collect(),
        origin_host: a.origin_host.clone(),
        timeout: a.timeout,
        max_requests: None,
        world: a.world.clone(),
        json: None,
        html: None,
        quiet: a.quiet,
        late_ms: 10.0,
    };
    let mut w = effective_workload(&load)?;
    // One constant level: `before` until the kill, `after` from then on (the run stops early,
    // once the first hit after the restart is in).
    w.phases = vec![
        Phase {
            name: "before".into(),
            duration_s: a.warm,
            from: 1.0,
            to: 1.0,
            best_effort: false,
        },
        Phase {
            name: "after".into(),
            duration_s: a.down + a.max_wait + a.timeout,
            from: 1.0,
            to: 1.0,
            best_effort: false,
        },
    ];
    let origins = match a.origin {
        Some(o) => OriginSet::external(vec![o]),
        None => OriginSet::start(&w, &a.origin_host, 1)?,
    };
    let origin = origins.addrs[0];
    let argv: Vec<String> = a
        .command
        .iter()
        .map(|s| s.replace("{origin}", &origin.to_string()))
        .collect();
    let label = a.label.clone().unwrap_or_else(|| {
        std::path::Path::new(&argv[0])
            .file_name()
            .map_or(argv[0].clone(), |n| n.to_string_lossy().into_owned())
    });
    let mode = match a.mode {
        ProxyMode::Forward => Mode::Forward(vec![a.proxy]),
        ProxyMode::Reverse => Mode::Reverse(vec![a.proxy]),
    };
    let ready = a.ready.unwrap_or(a.proxy);
    let dir = temp_dir("downtime")?;
    let say = |m: String| {
        if !a.quiet {
            eprintln!("downtime: {m}");
        }
    };

    // Start, and wait until the proxy answers a request (through it, to our origin).
    let mut child = Child::spawn_in(&label, &argv, &dir, None, "-1", &[])?;
    let path = probe_path(&w.model(), 1).unwrap_or_else(|| object_path(PROBE_WORLD, 1, "bin"));
    let target = match a.mode {
        ProxyMode::Forward => format!("http://{origin}{path}"),
        ProxyMode::Reverse => path,
    };
    let started = Instant::now();
    loop {
        if !child.running() {
            anyhow::bail!(
                "{label} exited during start-up; its stderr ends:\n{}",
                child.stderr_tail()
            );
        }
        match probe(a.proxy, &target, &origin.to_string(), "downtime-ready") {
            Ok(p) if p.status == 200 => break,
            _ if started.elapsed().as_secs_f64() > a.start_timeout => anyhow::bail!(
                "{label} did not answer through {} within {} s; its stderr ends:\n{}",
                a.proxy,
                a.start_timeout,
                child.stderr_tail()
            ),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    say(format!(
        "{label} (pid {}) answers at {} after {:.1} s; {:.1} req/s for {} s, then kill -9",
        child.pid(),
        a.proxy,
        started.elapsed().as_secs_f64(),
        a.rate,
        a.warm
    ));

    // The load, on its own thread, logging every transaction on the wall clock.
    let events: EventLog = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let robots = a
        .robots
        .unwrap_or_else(|| (a.rate / w.robots.rate).ceil().max(1.0) as u32);
    let plan = Plan {
        workload: w.clone(),
        mode: mode.clone(),
        origins: origins.addrs.clone(),
        robots,
        threads: 1,
        world: world_of(&load)?,
        timeout: Duration::from_secs_f64(a.timeout),
        fill_bytes: None,
        max_requests: None,
        progress: false,
        events: Some(events.clone()),
        stop: Some(stop.clone()),
        late: Duration::from_millis(10),
    };
    let load_start = Instant::now();
    let runner = std::thread::Builder::new()
        .name("bench-downtime-load".into())
        .spawn(move || run_load(plan))?;
    // Whatever happens next, the load stops and the thread is joined.
    let result = drive(a, &argv, &dir, &mut child, ready, &events, load_start, &say);
    stop.store(true, Relaxed);
    let out = runner
        .join()
        .map_err(|_| anyhow::anyhow!("the load thread panicked"))??;
    let (kill, restart) = result?;
    child.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);

    let log = events.lock().expect("not poisoned");
    let mut r = analyse(
        &log,
        Timeline {
            kill: kill.at,
            restart: restart.at,
        },
    );
    r.label = label.clone();
    r.command = argv;
    r.mode = mode.describe();
    r.rate = a.rate;
    r.warm_s = a.warm;
    r.killed_pid = kill.pid;
    r.restarted_pid = restart.pid;
    r.listening_s = restart.listening_s;
    let info = RunInfo {
        label,
        mode: mode.describe(),
        scale: 1.0,
        robots,
        think_mean_s: w.servers.think_mean_s,
    };
    r.run = Report::new(info, &w, &out, origins.counts());
    r.notes.push(format!(
        "times are from the robots' timeline at {:.1} req/s (Poisson arrivals): each is known to \
         about one gap between requests, {:.2} s",
        a.rate,
        1.0 / a.rate
    ));
    match (r.ttfm_s, r.ttfh_s) {
        (Some(m), Some(h)) if h > m => r.notes.push(
            "the first hit came after the first miss: a cache that keeps nothing across a restart \
             (memory only) can only hit what it fetched again after the restart, so its TTFH is \
             the time until a robot revisits such an object, and depends on the load and the \
             working set as well as on the proxy"
                .into(),
        ),
        (Some(m), Some(h)) if h <= m => r.notes.push(
            "the first hit came before the first miss: the proxy served objects it had stored \
             before the kill (a disk tier)"
                .into(),
        ),
        (Some(_), None) => r.notes.push(format!(
            "no hit within {} s of the restart (a memory-only cache hits only objects it fetched \
             again after the restart; a longer --max-wait or a higher --rate gives it more revisits)",
            a.max_wait
        )),
        _ => {}
    }
    if r.before.hits == 0 {
        r.notes.push(
            "no hit before the kill: the proxy did not cache (or --warm was too short to revisit)"
                .into(),
        );
    }
    Ok(r)
}

/// The kill: when and which PID.
struct Killed {
    at: Instant,
    pid: u32,
}

/// The restart: when, the new PID, and when it accepted connections.
struct Restarted {
    at: Instant,
    pid: u32,
    listening_s: Option<f64>,
}

/// True once both a hit and a miss ended after `restart`: the test measures both, and a
/// cache that kept its objects (a disk tier) may well serve its first hit before its
/// first miss.
fn seen_both(events: &[TxEvent], restart: Instant) -> bool {
    let after = |o: Outcome| events.iter().any(|e| e.done >= restart && e.outcome == o);
    after(Outcome::Hit) && after(Outcome::Miss)
}

/// Kills the proxy after the warm-up, restarts it, and waits for the first hit and the
/// first miss after the restart (or --max-wait).
#[allow(clippy::too_many_arguments)]
fn drive(
    a: &DowntimeArgs,
    argv: &[String],
    dir: &std::path::Path,
    child: &mut Child,
    ready: SocketAddr,
    events: &EventLog,
    load_start: Instant,
    say: &dyn Fn(String),
) -> anyhow::Result<(Killed, Restarted)> {
    std::thread::sleep(
        (load_start + Duration::from_secs_f64(a.warm)).saturating_duration_since(Instant::now()),
    );
    anyhow::ensure!(
        child.running(),
        "{} exited before the kill; its stderr ends:\n{}",
        child.name,
        child.stderr_tail()
    );
    let pid = child.pid();
    let at = Instant::now();
    child.kill9();
    let killed = Killed { at, pid };
    say(format!(
        "killed pid {pid} with SIGKILL; restarting in {} s",
        a.down
    ));
    std::thread::sleep(Duration::from_secs_f64(a.down));
    let name = child.name.clone();
    *child = Child::spawn_in(&name, argv, dir, None, "-2", &[])?;
    let restart = Instant::now();
    let deadline = restart + Duration::from_secs_f64(a.max_wait);
    let mut listening_s = None;
    let mut exited = false;
    loop {
        if listening_s.is_none() && accepts(ready) {
            listening_s = Some(restart.elapsed().as_secs_f64());
            say(format!(
                "pid {} accepts connections at {ready} {:.2} s after the restart",
                child.pid(),
                restart.elapsed().as_secs_f64()
            ));
        }
        let seen = seen_both(&events.lock().expect("not poisoned"), restart);
        if seen || Instant::now() >= deadline {
            break;
        }
        if !child.running() {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(if listening_s.is_none() {
            10
        } else {
            100
        }));
    }
    anyhow::ensure!(
        !exited,
        "{name} exited after the restart; its stderr ends:\n{}",
        child.stderr_tail()
    );
    Ok((
        killed,
        Restarted {
            at: restart,
            pid: child.pid(),
            listening_s,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ErrorKind;

    #[test]
    fn the_wait_after_the_restart_ends_only_with_a_hit_and_a_miss() {
        let restart = Instant::now();
        let ev = |done: Instant, outcome| TxEvent {
            intended: done,
            done,
            outcome,
        };
        let before = restart - Duration::from_secs(1);
        let after = restart + Duration::from_millis(50);
        // A disk tier's first answer after the restart is a hit: keep waiting for a miss.
        let mut events = vec![ev(before, Outcome::Miss), ev(after, Outcome::Hit)];
        assert!(!seen_both(&events, restart));
        events.push(ev(after + Duration::from_millis(50), Outcome::Miss));
        assert!(seen_both(&events, restart));
        // A memory-only cache: misses first, then a hit of something fetched again.
        let events = vec![ev(before, Outcome::Hit), ev(after, Outcome::Miss)];
        assert!(!seen_both(&events, restart));
    }

    #[test]
    fn the_timeline_is_read_against_kill_and_restart() {
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let ev = |done: f64, outcome| TxEvent {
            intended: at(done - 0.01),
            done: at(done),
            outcome,
        };
        let events = vec![
            ev(1.0, Outcome::Miss),
            ev(2.0, Outcome::Hit),
            // The kill at 3.0, the restart at 8.0.
            ev(3.1, Outcome::Error(ErrorKind::Io)),
            ev(5.0, Outcome::Error(ErrorKind::Connect)),
            ev(8.05, Outcome::Error(ErrorKind::Connect)),
            ev(9.0, Outcome::Miss),
            ev(9.5, Outcome::Miss),
            ev(12.0, Outcome::Hit),
        ];
        let r = analyse(
            &events,
            Timeline {
                kill: at(3.0),
                restart: at(8.0),
            },
        );
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-6;
        assert!(close(r.ttfm_s, 1.0), "{:?}", r.ttfm_s);
        assert!(close(r.ttfh_s, 4.0), "{:?}", r.ttfh_s);
        assert!(close(r.outage_s, 6.0));
        assert!((r.down_s - 5.0).abs() < 1e-6);
        assert_eq!((r.outage_requests, r.outage_errors), (3, 3));
        assert_eq!(r.outage_errors_by_kind.get("connect"), Some(&2));
        assert_eq!(r.outage_errors_by_kind.get("io"), Some(&1));
        let counts = |requests, hits| Counts {
            requests,
            hits,
            errors: 0,
        };
        assert_eq!((r.before, r.after), (counts(2, 1), counts(3, 1)));
        assert!(r.text().contains("TTFM"));
    }

    #[test]
    fn no_recovery_means_no_times() {
        let t0 = Instant::now();
        let tl = Timeline {
            kill: t0,
            restart: t0 + Duration::from_secs(1),
        };
        let events = vec![TxEvent {
            intended: t0,
            done: t0 + Duration::from_secs(2),
            outcome: Outcome::Error(ErrorKind::Connect),
        }];
        let r = analyse(&events, tl);
        assert_eq!((r.ttfm_s, r.ttfh_s, r.outage_s), (None, None, None));
        assert_eq!(r.outage_errors, 1);
        assert!(r.text().contains("never"));
    }
}
