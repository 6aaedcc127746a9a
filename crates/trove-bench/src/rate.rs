//! `trove bench rate`: one URL (or a stream of unique ones) offered at a constant rate, open
//! loop, for overload curves (offered rate → served rate, p50, p99) of any HTTP server; and
//! `trove bench slow-origin`, an origin that answers after a fixed delay.
//!
//! Requests are due at evenly spaced instants (`1 / rate` apart) and sent at their instant
//! whatever became of the earlier ones, as wrk2 does; when every allowed connection is busy
//! a request waits for one, and the wait counts in its response time, which is measured
//! from the instant it was due (so a stalled server cannot hide its stall: no coordinated
//! omission). The PolyMix robots (`trove bench run`) are open loop too, but model a
//! population of objects; this measures one path at a time.
//!
//! The generator checks itself as Polygraph does: every request's send lag (from due to
//! written) is recorded, a request still waiting for a connection `--timeout` after it was due
//! is never sent, and the report says whether the schedule was kept and, if not, whether the
//! generator's own core or the target (all connections busy) was the limit, so a generator
//! that cannot offer the load is never reported as a server that cannot serve it.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client::{self, Conn};
use crate::histogram::Histogram;
use crate::selfcheck::{thread_sched_time, Generator};

/// `trove bench rate`.
#[derive(Debug, Clone, clap::Args)]
pub struct RateArgs {
    /// The server, host:port (loopback in every measurement of this project).
    #[arg(long)]
    pub target: SocketAddr,
    /// Request path; `{n}` becomes the request's sequence number (a new URL each: misses).
    #[arg(long, default_value = "/")]
    pub path: String,
    /// The `Host` header.
    #[arg(long, default_value = "localhost")]
    pub host: String,
    /// Requests per second, due at evenly spaced instants.
    #[arg(long)]
    pub rate: f64,
    /// Seconds to send for.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Most connections open at once; a request finding them all busy waits for one.
    #[arg(long, default_value_t = 1000)]
    pub connections: usize,
    /// A new connection for every request (`Connection: close`).
    #[arg(long)]
    pub close: bool,
    /// A request still unsent (waiting for a free connection) this many seconds after it was
    /// due is never sent; one sent and not answered this many seconds after it was sent is a
    /// timeout (the target's: a request the generator sent late is not charged to it).
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
    /// Name in the output line.
    #[arg(long, default_value = "")]
    pub label: String,
    /// Append the result to this file as one JSON line.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// A request written more than this many ms after it was due is late; more than 1% late
    /// (or any never sent) and the report says the generator fell behind its schedule.
    #[arg(long, default_value_t = 10.0)]
    pub late_ms: f64,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RateResult {
    pub label: String,
    pub offered_rate: f64,
    pub duration_s: f64,
    /// Requests due during the run.
    pub sent: u64,
    /// 2xx responses (each within `timeout` of when it was sent), and their number over the
    /// sending time: the rate at which the offered requests were served.
    pub ok: u64,
    pub served_rate: f64,
    /// Seconds from the first due instant to the last 2xx response.
    pub elapsed_s: f64,
    /// 503 responses (shed), and other non-2xx statuses.
    pub status_503: u64,
    pub status_other: u64,
    /// Connect failures, connections closed or reset before a whole response, and timeouts
    /// (no whole response `timeout` after the request was sent).
    pub errors_connect: u64,
    pub errors_closed: u64,
    pub timeouts: u64,
    /// Response times of the 2xx responses, from when each was due, in milliseconds.
    pub ok_p50_ms: f64,
    pub ok_p99_ms: f64,
    pub ok_max_ms: f64,
    /// The same for every response (2xx, 503 and other statuses alike).
    pub all_p50_ms: f64,
    pub all_p99_ms: f64,
    /// The same for the responses that were not 2xx (how quickly a refusal came).
    pub refused_p50_ms: f64,
    pub refused_p99_ms: f64,
    /// Response times of the 2xx responses from when each request was actually written
    /// (the target's own time, without any wait for a connection or for the generator).
    pub ok_from_send_p50_ms: f64,
    pub ok_from_send_p99_ms: f64,
    /// How the generator kept its schedule; see [`Generator`].
    pub generator: Generator,
}

#[derive(Default)]
struct Tally {
    ok: Histogram,
    ok_from_send: Histogram,
    last_ok: Option<Instant>,
    all: Histogram,
    refused: Histogram,
    send_lag: Histogram,
    issued: u64,
    late: u64,
    late_free: u64,
    expired: u64,
    status_503: u64,
    status_other: u64,
    errors_connect: u64,
    errors_closed: u64,
    timeouts: u64,
}

enum Failure {
    Connect,
    Closed,
}

/// Runs `trove bench rate`: prints one line, optionally appends the JSON.
pub fn run(args: RateArgs) -> anyhow::Result<()> {
    let result = measure(&args)?;
    println!(
        "{label} offered {:.0}/s served {:.0}/s ok {} 503 {} other {} connect-err {} closed {} timeouts {} | ok p50 {:.2} ms p99 {:.2} ms max {:.1} ms | all p50 {:.2} ms p99 {:.2} ms | refused p50 {:.2} ms p99 {:.2} ms | sent {:.0}/s late {} never-sent {} busy {}",
        result.offered_rate,
        result.served_rate,
        result.ok,
        result.status_503,
        result.status_other,
        result.errors_connect,
        result.errors_closed,
        result.timeouts,
        result.ok_p50_ms,
        result.ok_p99_ms,
        result.ok_max_ms,
        result.all_p50_ms,
        result.all_p99_ms,
        result.refused_p50_ms,
        result.refused_p99_ms,
        result.generator.issued_rate,
        result.generator.late,
        result.generator.expired,
        result
            .generator
            .busy
            .map_or_else(|| "?".to_string(), |b| format!("{:.0}%", b * 100.0)),
        label = if args.label.is_empty() {
            args.target.to_string()
        } else {
            args.label.clone()
        },
    );
    println!("{}", result.generator.verdict);
    if result.generator.fell_behind {
        eprintln!("bench: {}", result.generator.verdict);
    }
    if let Some(path) = &args.json {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(f, "{}", serde_json::to_string(&result)?)?;
    }
    Ok(())
}

/// Runs the load of `trove bench rate` on this thread and returns what it measured.
pub fn measure(args: &RateArgs) -> anyhow::Result<RateResult> {
    anyhow::ensure!(
        args.rate > 0.0 && args.rate.is_finite(),
        "--rate must be positive"
    );
    anyhow::ensure!(
        args.duration > 0.0 && args.duration <= 3600.0,
        "--duration must be within (0, 3600] seconds"
    );
    anyhow::ensure!(args.connections >= 1, "--connections must be at least 1");
    anyhow::ensure!(
        args.timeout > 0.0 && args.timeout.is_finite(),
        "--timeout must be positive"
    );
    anyhow::ensure!(args.late_ms >= 0.0, "--late-ms must not be negative");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    Ok(local.block_on(&rt, offer(args)))
}

/// The run's shared state. Requests are numbered; request `n` is due at `start + n / rate`.
///
/// Each worker owns one connection (opened when first needed). At most one worker, the
/// leader, waits for the next due instant; when it comes the leader hands the lead to an
/// idle worker (the most recently idle, so few connections stay busy at low rates), or
/// starts a new worker while fewer than `--connections` exist, and sends. With every worker
/// busy nobody leads: the next worker to finish takes the lead and finds the next request
/// overdue, so it waits for a connection and the wait counts in its response time. No task,
/// timer or allocation per request, so the generator spends its core on the exchanges.
struct Engine {
    target: SocketAddr,
    path: String,
    request: Option<Vec<u8>>,
    host: String,
    close: bool,
    start: Instant,
    interval_s: f64,
    total: u64,
    timeout: Duration,
    late: Duration,
    connections: usize,
    next: Cell<u64>,
    leader: Cell<bool>,
    finished: Cell<bool>,
    workers: Cell<usize>,
    idle: RefCell<Vec<Rc<Notify>>>,
    all_done: Notify,
    tally: RefCell<Tally>,
}

impl Engine {
    fn due(&self, n: u64) -> Instant {
        self.start + Duration::from_secs_f64(n as f64 * self.interval_s)
    }

    /// The request head for request `n`, into `buf`.
    fn request<'a>(&'a self, n: u64, buf: &'a mut Vec<u8>) -> &'a [u8] {
        if let Some(r) = &self.request {
            return r;
        }
        buf.clear();
        let path = self.path.replace("{n}", &n.to_string());
        head(buf, &path, &self.host, self.close);
        buf
    }

    fn spawn_worker(self: &Rc<Self>) {
        self.workers.set(self.workers.get() + 1);
        let e = Rc::clone(self);
        tokio::task::spawn_local(async move { e.worker().await });
    }

    /// Hands the lead on after the leader took its request.
    fn pass_lead(self: &Rc<Self>) {
        let next = self.idle.borrow_mut().pop();
        if let Some(w) = next {
            w.notify_one();
        } else if self.workers.get() < self.connections {
            self.spawn_worker();
        } else {
            self.leader.set(false);
        }
    }

    /// Ends the run for every idle worker.
    fn finish(&self) {
        self.finished.set(true);
        self.leader.set(false);
        for w in self.idle.borrow_mut().drain(..) {
            w.notify_one();
        }
    }

    /// One worker: a connection's life. Starts as the leader.
    async fn worker(self: Rc<Self>) {
        let me = Rc::new(Notify::new());
        let mut conn: Option<Conn> = None;
        let mut buf = Vec::with_capacity(256);
        let mut sink = Vec::new();
        let sleep = tokio::time::sleep_until(self.start);
        tokio::pin!(sleep);
        // This worker holds the lead on entry to the loop. `waited`: it took the lead because
        // every connection was busy (its next request, if overdue, waited for a connection).
        let mut waited = false;
        loop {
            if self.finished.get() {
                break;
            }
            // Leader: skip what expired unsent, then wait for the next request's instant.
            let now = Instant::now();
            let mut n = self.next.get();
            if n < self.total && self.due(n) + self.timeout < now {
                let since = now.saturating_duration_since(self.start + self.timeout);
                let first_live =
                    ((since.as_secs_f64() / self.interval_s).ceil() as u64).clamp(n, self.total);
                self.tally.borrow_mut().expired += first_live - n;
                n = first_live;
                self.next.set(n);
            }
            if n >= self.total {
                self.finish();
                break;
            }
            let due = self.due(n);
            if due > now {
                sleep.as_mut().reset(due);
                (&mut sleep).await;
            }
            self.next.set(n + 1);
            self.pass_lead();
            let sent = Instant::now();
            let lag = sent.saturating_duration_since(due);
            {
                let mut t = self.tally.borrow_mut();
                t.issued += 1;
                t.send_lag.record(lag.as_micros() as u64);
                if lag > self.late {
                    t.late += 1;
                    t.late_free += u64::from(!waited);
                }
            }
            let deadline = sent + self.timeout;
            let req = self.request(n, &mut buf);
            let attempt =
                tokio::time::timeout_at(deadline, exchange(self.target, &mut conn, req, &mut sink))
                    .await;
            let end = Instant::now();
            let us = end.saturating_duration_since(due).as_micros() as u64;
            {
                let mut t = self.tally.borrow_mut();
                match attempt {
                    Ok(Ok(status)) => {
                        t.all.record(us);
                        if (200..300).contains(&status) {
                            t.ok.record(us);
                            t.ok_from_send
                                .record(end.saturating_duration_since(sent).as_micros() as u64);
                            t.last_ok = Some(end);
                        } else if status == 503 {
                            t.status_503 += 1;
                            t.refused.record(us);
                        } else {
                            t.status_other += 1;
                            t.refused.record(us);
                        }
                    }
                    Ok(Err(Failure::Connect)) => t.errors_connect += 1,
                    Ok(Err(Failure::Closed)) => t.errors_closed += 1,
                    Err(_) => {
                        t.timeouts += 1;
                        conn = None;
                    }
                }
            }
            if self.close {
                conn = None;
            }
            // Free again: take the lead if nobody has it, else wait to be handed it.
            if self.leader.get() && !self.finished.get() {
                self.idle.borrow_mut().push(Rc::clone(&me));
                me.notified().await;
                waited = false;
            } else {
                self.leader.set(true);
                waited = true;
            }
        }
        self.workers.set(self.workers.get() - 1);
        if self.workers.get() == 0 {
            self.all_done.notify_one();
        }
    }
}

/// Writes a GET request head.
fn head(buf: &mut Vec<u8>, path: &str, host: &str, close: bool) {
    buf.extend_from_slice(b"GET ");
    buf.extend_from_slice(path.as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    buf.extend_from_slice(host.as_bytes());
    if close {
        buf.extend_from_slice(b"\r\nConnection: close");
    }
    buf.extend_from_slice(b"\r\n\r\n");
}

/// One exchange on the worker's connection (opened if it has none): the status.
async fn exchange(
    target: SocketAddr,
    conn: &mut Option<Conn>,
    req: &[u8],
    sink: &mut Vec<u8>,
) -> Result<u16, Failure> {
    for attempt in 0..2 {
        let reused = conn.is_some();
        let c = match conn {
            Some(c) => c,
            None => conn.insert(Conn::connect(target).await.map_err(|_| Failure::Connect)?),
        };
        match c.exchange(req, None, sink, |_| Ok(())).await {
            Ok((head, _)) => {
                if !c.reusable() {
                    *conn = None;
                }
                return Ok(head.status);
            }
            // A kept-alive connection the server closed while idle: once more on a new one
            // (RFC 9112 §9.3.1), as hyper's pool did by checking before use.
            Err(client::Error::ClosedEarly) if reused && attempt == 0 => *conn = None,
            Err(_) => {
                *conn = None;
                return Err(Failure::Closed);
            }
        }
    }
    Err(Failure::Closed)
}

async fn offer(args: &RateArgs) -> RateResult {
    let total = (args.rate * args.duration).round().max(1.0) as u64;
    let host = if args.host.bytes().all(|b| b.is_ascii_graphic()) && !args.host.is_empty() {
        args.host.clone()
    } else {
        "localhost".to_string()
    };
    let request = (!args.path.contains("{n}")).then(|| {
        let mut b = Vec::new();
        head(&mut b, &args.path, &host, args.close);
        b
    });
    let cpu0 = thread_sched_time();
    let start = Instant::now();
    let engine = Rc::new(Engine {
        target: args.target,
        path: args.path.clone(),
        request,
        host,
        close: args.close,
        start,
        interval_s: 1.0 / args.rate,
        total,
        timeout: Duration::from_secs_f64(args.timeout),
        late: Duration::from_secs_f64(args.late_ms / 1000.0),
        connections: args.connections,
        next: Cell::new(0),
        leader: Cell::new(true),
        finished: Cell::new(false),
        workers: Cell::new(0),
        idle: RefCell::default(),
        all_done: Notify::new(),
        tally: RefCell::default(),
    });
    engine.spawn_worker();
    while engine.workers.get() > 0 {
        engine.all_done.notified().await;
    }
    let wall = start.elapsed();
    let busy = match (cpu0, thread_sched_time()) {
        (Some(a), Some(b)) if !wall.is_zero() => {
            Some((b.saturating_sub(a).as_secs_f64() / wall.as_secs_f64()).min(1.0))
        }
        _ => None,
    };
    let t = engine.tally.borrow();
    let ms = |h: &Histogram, q: f64| h.quantile(q).unwrap_or(0.0) / 1000.0;
    let elapsed = t
        .last_ok
        .map_or(0.0, |l| l.saturating_duration_since(start).as_secs_f64())
        .max(args.duration);
    let mut generator = Generator {
        issued: t.issued,
        issued_rate: t.issued as f64 / args.duration,
        late: t.late,
        late_with_free_connection: t.late_free,
        late_ms: args.late_ms,
        expired: t.expired,
        send_lag_p50_ms: ms(&t.send_lag, 0.5),
        send_lag_p99_ms: ms(&t.send_lag, 0.99),
        send_lag_max_ms: t.send_lag.max() as f64 / 1000.0,
        busy,
        ..Generator::default()
    };
    generator.judge(
        &format!("one of the {} connections", args.connections),
        "--connections",
        args.timeout,
    );
    RateResult {
        label: args.label.clone(),
        offered_rate: args.rate,
        duration_s: args.duration,
        sent: total,
        ok: t.ok.count(),
        served_rate: t.ok.count() as f64 / args.duration,
        elapsed_s: elapsed,
        status_503: t.status_503,
        status_other: t.status_other,
        errors_connect: t.errors_connect,
        errors_closed: t.errors_closed,
        timeouts: t.timeouts,
        ok_p50_ms: ms(&t.ok, 0.5),
        ok_p99_ms: ms(&t.ok, 0.99),
        ok_max_ms: t.ok.max() as f64 / 1000.0,
        all_p50_ms: ms(&t.all, 0.5),
        all_p99_ms: ms(&t.all, 0.99),
        refused_p50_ms: ms(&t.refused, 0.5),
        refused_p99_ms: ms(&t.refused, 0.99),
        ok_from_send_p50_ms: ms(&t.ok_from_send, 0.5),
        ok_from_send_p99_ms: ms(&t.ok_from_send, 0.99),
        generator,
    }
}

/// `trove bench slow-origin`.
#[derive(Debug, Clone, clap::Args)]
pub struct SlowOriginArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:18081")]
    pub listen: SocketAddr,
    /// Seconds before each response.
    #[arg(long, default_value_t = 0.5)]
    pub delay: f64,
    /// Body bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Paths starting with this are cacheable (`max-age=3600`); every other is `no-store`.
    #[arg(long, default_value = "/hit")]
    pub cacheable_prefix: String,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 3600.0)]
    pub max_time: f64,
}

/// Runs `trove bench slow-origin`: every request is answered after `delay`, with no limit
/// on how many wait at once (the proxy in front decides how many it sends). Prints the
/// number of requests answered when it stops (after `max_time`, or on SIGTERM / SIGINT).
pub fn slow_origin(args: SlowOriginArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        eprintln!("slow-origin listening {}", listener.local_addr()?);
        let body = Bytes::from(vec![b'x'; args.size]);
        let delay = Duration::from_secs_f64(args.delay);
        let prefix: Rc<str> = args.cacheable_prefix.as_str().into();
        let served = Rc::new(std::cell::Cell::new(0u64));
        let local = tokio::task::LocalSet::new();
        let max_time = Duration::from_secs_f64(args.max_time);
        let stop = async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                _ = tokio::time::sleep(max_time) => {}
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            Ok::<_, std::io::Error>(())
        };
        let count = Rc::clone(&served);
        local
            .run_until(async move {
                tokio::pin!(stop);
                loop {
                    let (stream, _) = tokio::select! {
                        a = listener.accept() => match a {
                            Ok(a) => a,
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                continue;
                            }
                        },
                        _ = &mut stop => break,
                    };
                    let _ = stream.set_nodelay(true);
                    let (body, prefix, count) =
                        (body.clone(), Rc::clone(&prefix), Rc::clone(&count));
                    tokio::task::spawn_local(async move {
                        let svc = hyper::service::service_fn(move |req: Request<_>| {
                            let (body, prefix, count) =
                                (body.clone(), Rc::clone(&prefix), Rc::clone(&count));
                            async move {
                                tokio::time::sleep(delay).await;
                                count.set(count.get() + 1);
                                let cc = if req.uri().path().starts_with(&*prefix) {
                                    "max-age=3600"
                                } else {
                                    "no-store"
                                };
                                let resp = Response::builder()
                                    .header(header::CACHE_CONTROL, cc)
                                    .body(Full::new(body))
                                    .unwrap_or_default();
                                Ok::<_, Infallible>(resp)
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            })
            .await;
        eprintln!("slow-origin answered {}", served.get());
        Ok(())
    })
}
