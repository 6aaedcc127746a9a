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

use std::cell::RefCell;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::histogram::Histogram;

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
    /// A request not complete this many seconds after it was due is a timeout.
    #[arg(long, default_value_t = 5.0)]
    pub timeout: f64,
    /// Name in the output line.
    #[arg(long, default_value = "")]
    pub label: String,
    /// Append the result to this file as one JSON line.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RateResult {
    pub label: String,
    pub offered_rate: f64,
    pub duration_s: f64,
    /// Requests due during the run.
    pub sent: u64,
    /// 2xx responses (each within `timeout` of when it was due), and their number over the
    /// sending time: the rate at which the offered requests were served.
    pub ok: u64,
    pub served_rate: f64,
    /// Seconds from the first due instant to the last 2xx response.
    pub elapsed_s: f64,
    /// 503 responses (shed), and other non-2xx statuses.
    pub status_503: u64,
    pub status_other: u64,
    /// Connect failures, connections closed or reset before a whole response, and timeouts.
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
}

#[derive(Default)]
struct Tally {
    ok: Histogram,
    last_ok: Option<Instant>,
    all: Histogram,
    refused: Histogram,
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
    anyhow::ensure!(
        args.rate > 0.0 && args.rate.is_finite(),
        "--rate must be positive"
    );
    anyhow::ensure!(
        args.duration > 0.0 && args.duration <= 3600.0,
        "--duration must be within (0, 3600] seconds"
    );
    anyhow::ensure!(args.connections >= 1, "--connections must be at least 1");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let result = local.block_on(&rt, offer(&args));
    println!(
        "{label} offered {:.0}/s served {:.0}/s ok {} 503 {} other {} connect-err {} closed {} timeouts {} | ok p50 {:.2} ms p99 {:.2} ms max {:.1} ms | all p50 {:.2} ms p99 {:.2} ms | refused p50 {:.2} ms p99 {:.2} ms",
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
        label = if args.label.is_empty() {
            args.target.to_string()
        } else {
            args.label.clone()
        },
    );
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

async fn offer(args: &RateArgs) -> RateResult {
    let tally = Rc::new(RefCell::new(Tally::default()));
    let idle: Rc<RefCell<Vec<SendRequest<Empty<Bytes>>>>> = Rc::default();
    let slots = Rc::new(Semaphore::new(args.connections));
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let total = (args.rate * args.duration).round().max(1.0) as u64;
    let timeout = Duration::from_secs_f64(args.timeout);
    let host = HeaderValue::from_str(&args.host).unwrap_or(HeaderValue::from_static("localhost"));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total.min(1 << 20) as usize);
    let mut n = 0u64;
    while n < total {
        let due = start + interval.mul_f64(n as f64);
        let now = Instant::now();
        if due > now {
            tokio::time::sleep_until(due).await;
        }
        // Everything due by now goes out (the timer's granularity is a millisecond).
        let now = Instant::now();
        while n < total && start + interval.mul_f64(n as f64) <= now {
            let due = start + interval.mul_f64(n as f64);
            let path = args.path.replace("{n}", &n.to_string());
            let one = One {
                target: args.target,
                path,
                host: host.clone(),
                close: args.close,
                due,
                deadline: due + timeout,
            };
            let (tally, idle, slots) = (Rc::clone(&tally), Rc::clone(&idle), Rc::clone(&slots));
            tasks.push(tokio::task::spawn_local(async move {
                one.run(&tally, &idle, &slots).await;
            }));
            n += 1;
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let t = tally.borrow();
    let ms = |h: &Histogram, q: f64| h.quantile(q).unwrap_or(0.0) / 1000.0;
    let elapsed = t
        .last_ok
        .map_or(0.0, |l| l.saturating_duration_since(start).as_secs_f64())
        .max(args.duration);
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
    }
}

/// One request.
struct One {
    target: SocketAddr,
    path: String,
    host: HeaderValue,
    close: bool,
    due: Instant,
    deadline: Instant,
}

impl One {
    async fn run(
        self,
        tally: &RefCell<Tally>,
        idle: &RefCell<Vec<SendRequest<Empty<Bytes>>>>,
        slots: &Semaphore,
    ) {
        let attempt = tokio::time::timeout_at(self.deadline, async {
            let Ok(_slot) = slots.acquire().await else {
                return Err(Failure::Closed);
            };
            // Bound first: a borrow held across the connect would clash with other requests.
            let mut pooled = idle.borrow_mut().pop();
            // One the server closed while idle is replaced, not counted as a failure.
            if let Some(s) = pooled.as_mut() {
                if s.ready().await.is_err() {
                    pooled = None;
                }
            }
            let mut sender = match pooled {
                Some(s) => s,
                None => connect(self.target).await.ok_or(Failure::Connect)?,
            };
            let mut req = Request::builder()
                .uri(self.path.as_str())
                .header(header::HOST, self.host.clone());
            if self.close {
                req = req.header(header::CONNECTION, "close");
            }
            let req = req.body(Empty::new()).map_err(|_| Failure::Closed)?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(|_| Failure::Closed)?;
            let status = resp.status();
            resp.into_body()
                .collect()
                .await
                .map_err(|_| Failure::Closed)?;
            if !self.close && !sender.is_closed() {
                idle.borrow_mut().push(sender);
            }
            Ok(status)
        })
        .await;
        let took = Instant::now().saturating_duration_since(self.due);
        let us = took.as_micros() as u64;
        let mut t = tally.borrow_mut();
        match attempt {
            Ok(Ok(status)) => {
                t.all.record(us);
                if status.is_success() {
                    t.ok.record(us);
                    t.last_ok = Some(Instant::now());
                } else if status == StatusCode::SERVICE_UNAVAILABLE {
                    t.status_503 += 1;
                    t.refused.record(us);
                } else {
                    t.status_other += 1;
                    t.refused.record(us);
                }
            }
            Ok(Err(Failure::Connect)) => t.errors_connect += 1,
            Ok(Err(Failure::Closed)) => t.errors_closed += 1,
            Err(_) => t.timeouts += 1,
        }
    }
}

async fn connect(addr: SocketAddr) -> Option<SendRequest<Empty<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    Some(sender)
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
