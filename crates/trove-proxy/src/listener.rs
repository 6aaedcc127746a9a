//! Listening sockets: accept, check the ACL and the connection limit, hand the connection
//! to [`crate::client::conn::serve`].
//!
//! Each listening socket has a thread of its own that does nothing but accept (the acceptor
//! threads of Tomcat and Netty's boss group). An accept loop that is one task among the
//! connections it serves waits its turn behind all of them, and while thousands of
//! connections are busy the kernel's accept queue fills: SYNs are dropped or answered with
//! cookies, and the clients behind them retry after one second, then three. A thread is
//! scheduled by the kernel whatever the runtime is doing, sleeps in `poll` when there is
//! nothing to do, and takes everything queued at each wake-up (up to [`ACCEPT_BATCH`] at a
//! time), handing each batch to the runtime as one task. rustix gives `poll` without
//! `unsafe`.
//!
//! The socket is made with socket2 because neither std nor tokio lets the listen backlog
//! be chosen (both listen with 128); see `limits.listen_backlog`.
//!
//! When descriptors run out (EMFILE, ENFILE) accepting pauses: one warning and one count in
//! `trove_accept_fd_exhausted_total` per pause, then a retry as soon as a client connection
//! closes, or after a back-off (10 ms doubling to 1 s) for descriptors freed elsewhere.
//! Connections keep waiting in the kernel's queue meanwhile; one more line is logged when
//! accepting resumes.
//!
//! A listener with `tls` runs the TLS handshake first (`crate::handshake`, bounded in time
//! and in how many run at once) and serves the decrypted stream like any other. Its
//! certificates (`trove_tls::ServerTls`) are watched for changes on disk and read again at
//! a reload; a new set is used from the next handshake on, and nothing already connected is
//! touched.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use socket2::{Domain, Protocol, Socket, Type};

use crate::client::conn::{self, ConnInfo};
use crate::client::transport::ClientStream;
use crate::fd_limit;
use crate::settings::{Mode, Settings};
use crate::state::{OpenLower, Shared};
use trove_tls::ServerTls;

/// Most connections taken from the kernel's queue at one wake-up.
const ACCEPT_BATCH: usize = 64;
/// How often an idle acceptor wakes to see whether its proxy has stopped.
const ACCEPT_WAKE: Duration = Duration::from_millis(250);
/// The first and the longest wait before accepting again after running out of descriptors.
const PAUSE_FIRST: Duration = Duration::from_millis(10);
const PAUSE_MAX: Duration = Duration::from_secs(1);
/// How often a TLS listener's certificate files are looked at for a renewal.
pub const CERT_WATCH_EVERY: Duration = Duration::from_secs(1);

/// A TLS listener's certificates, swapped by a reload that changes its `tls` settings.
type TlsSlot = Arc<parking_lot::Mutex<Option<Arc<ServerTls>>>>;

/// The server side for a listener's `tls` settings, watched for renewals.
fn server_tls(
    i: usize,
    l: &crate::settings::ListenerSettings,
    counters: &Arc<trove_tls::TlsCounters>,
) -> Result<Option<Arc<ServerTls>>, String> {
    let Some(settings) = &l.tls else {
        return Ok(None);
    };
    let tls = ServerTls::new(settings, alpn(l.http2), Arc::clone(counters))
        .map_err(|e| format!("listener[{i}].tls: {e}"))?;
    tls.watch(CERT_WATCH_EVERY);
    Ok(Some(tls))
}

/// What a TLS listener offers by ALPN: HTTP/2 first where it is on.
fn alpn(http2: bool) -> &'static [&'static [u8]] {
    if http2 {
        &[b"h2", b"http/1.1"]
    } else {
        &[b"http/1.1"]
    }
}

pub use crate::state::Current;

/// One listening socket's acceptor, as [`Running`] controls it.
struct AcceptorHandle {
    /// The address as configured (a reload compares these).
    configured: SocketAddr,
    bound: SocketAddr,
    mode: Arc<AtomicU8>,
    /// `http2` (a reload may change it).
    http2: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tls: TlsSlot,
}

/// A started proxy: its bound addresses and shared state.
pub struct Running {
    /// The current generation (a reload replaces it).
    pub shared: Arc<Shared>,
    pub addrs: Vec<(Mode, SocketAddr)>,
    current: Arc<Current>,
    acceptors: Vec<AcceptorHandle>,
    runtime: tokio::runtime::Handle,
    /// TLS handshakes under way, for every TLS listener (`crate::handshake`).
    handshakes: Arc<tokio::sync::Semaphore>,
}

/// What a reload did.
#[derive(Debug, Default)]
pub struct Reloaded {
    /// Config sections whose values changed.
    pub changed: Vec<&'static str>,
    /// Listeners started and stopped.
    pub listening: Vec<SocketAddr>,
    pub closed: Vec<SocketAddr>,
}

/// Binds every listener and starts accepting. Must be called inside a tokio runtime; the
/// acceptor threads stop once the returned [`Running`] and every connection are gone.
/// The store is the memory tier alone: `[cache.disk]` needs [`start_with`].
pub async fn start(settings: Settings) -> io::Result<Running> {
    start_inner(settings, None).await
}

/// [`start`], with `lower` opening the tiers under memory (the binary's opens the disk
/// tier): the proxy holds the store only as the storage interface.
pub async fn start_with(settings: Settings, lower: &dyn OpenLower) -> io::Result<Running> {
    start_inner(settings, Some(lower)).await
}

async fn start_inner(settings: Settings, lower: Option<&dyn OpenLower>) -> io::Result<Running> {
    settings
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    fd_limit::prepare(&settings);
    let backlog = effective_backlog(settings.limits.listen_backlog);
    // Bind every listener first: the destination guard must know their addresses (port 0
    // is only known once bound) before the first request is accepted.
    let mut bound = Vec::new();
    for (i, l) in settings.listeners.iter().enumerate() {
        bound.push((bind_named(i, l.addr, backlog)?, i));
    }
    let own: Vec<SocketAddr> = bound
        .iter()
        .map(|(l, _)| l.local_addr())
        .collect::<io::Result<_>>()?;
    let shared = Arc::new(match lower {
        Some(lower) => Shared::with_lower(settings, &own, lower)?,
        None => Shared::new(settings, &own)?,
    });
    let mut tls = Vec::new();
    for (i, l) in shared.settings.listeners.iter().enumerate() {
        tls.push(
            server_tls(i, l, &shared.metrics.tls)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        );
    }
    let current = Arc::new(Current::default());
    current.set(&shared);
    crate::manage::spawn_sweeper(Arc::clone(&current), std::time::Duration::from_secs(1));
    crate::feed::spawn(Arc::clone(&current));
    let mut running = Running {
        shared,
        addrs: Vec::new(),
        current,
        acceptors: Vec::new(),
        runtime: tokio::runtime::Handle::current(),
        handshakes: crate::handshake::permits(),
    };
    let listeners = running.shared.settings.listeners.clone();
    for (listener, i) in bound {
        running.spawn_acceptor(listener, &listeners[i], tls[i].take())?;
    }
    Ok(running)
}

/// Binds listener `i`, an error naming its config key and address.
fn bind_named(i: usize, addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    bind(addr, backlog).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("listener[{i}].listen: cannot listen on {addr}: {e}"),
        )
    })
}

impl Running {
    /// Who to ask for the current generation after reloads (the admin listener keeps one).
    pub fn current(&self) -> Arc<Current> {
        Arc::clone(&self.current)
    }

    fn spawn_acceptor(
        &mut self,
        listener: std::net::TcpListener,
        l: &crate::settings::ListenerSettings,
        tls: Option<Arc<ServerTls>>,
    ) -> io::Result<()> {
        let bound = listener.local_addr()?;
        let configured = l.addr;
        let handle = AcceptorHandle {
            configured,
            bound,
            mode: Arc::new(AtomicU8::new(mode_code(l.mode))),
            http2: Arc::new(AtomicBool::new(l.http2)),
            stop: Arc::new(AtomicBool::new(false)),
            tls: Arc::new(parking_lot::Mutex::new(tls)),
        };
        let acceptor = Acceptor {
            listener,
            mode: Arc::clone(&handle.mode),
            http2: Arc::clone(&handle.http2),
            stop: Arc::clone(&handle.stop),
            tls: Arc::clone(&handle.tls),
            handshakes: Arc::clone(&self.handshakes),
            current: Arc::clone(&self.current),
            runtime: self.runtime.clone(),
        };
        std::thread::Builder::new()
            .name(format!("trove-accept-{}", bound.port()))
            .spawn(move || acceptor.run())?;
        self.acceptors.push(handle);
        self.refresh_addrs();
        Ok(())
    }

    fn refresh_addrs(&mut self) {
        self.addrs = self
            .acceptors
            .iter()
            .map(|a| (mode_of(a.mode.load(Ordering::Relaxed)), a.bound))
            .collect();
    }

    /// Applies `settings` while running (see [`crate::lifecycle`]): the store, its objects
    /// and every open connection are kept. New listeners are bound before anything else
    /// changes, and listeners no longer configured stop accepting. On an error nothing has
    /// changed: the old settings go on running.
    pub fn reload(&mut self, settings: Settings) -> Result<Reloaded, String> {
        settings.validate()?;
        let old = &self.shared.settings;
        let backlog = effective_backlog(settings.limits.listen_backlog);
        let mut fresh = Vec::new();
        // Each listener's certificates: those in use read again when its `tls` settings
        // are unchanged, new ones made when they changed. All before anything switches.
        let mut tls: Vec<Option<Arc<ServerTls>>> = Vec::new();
        for (i, l) in settings.listeners.iter().enumerate() {
            let current = self
                .acceptors
                .iter()
                .find(|a| a.configured == l.addr)
                .and_then(|a| a.tls.lock().clone());
            tls.push(match (&l.tls, current) {
                (Some(wanted), Some(cur))
                    if cur.settings() == wanted && cur.alpn().iter().eq(alpn(l.http2)) =>
                {
                    cur.reload()
                        .map_err(|e| format!("listener[{i}].tls: {e}"))?;
                    Some(cur)
                }
                _ => server_tls(i, l, &self.shared.metrics.tls)?,
            });
            if !self.acceptors.iter().any(|a| a.configured == l.addr) {
                let listener = bind_named(i, l.addr, backlog).map_err(|e| e.to_string())?;
                fresh.push((listener, i));
            }
        }
        let mut own: Vec<SocketAddr> = self
            .acceptors
            .iter()
            .filter(|a| settings.listeners.iter().any(|l| l.addr == a.configured))
            .map(|a| a.bound)
            .collect();
        for (l, _) in &fresh {
            own.push(l.local_addr().map_err(|e| e.to_string())?);
        }
        let mut report = Reloaded::default();
        for (name, changed) in [
            ("listener", old.listeners != settings.listeners),
            ("access", old.access != settings.access),
            // `eviction` takes a restart (the store is built once): not a change a reload made.
            (
                "cache",
                old.cache
                    != crate::settings::CacheSettings {
                        eviction: old.cache.eviction,
                        ..settings.cache.clone()
                    },
            ),
            ("limits", old.limits != settings.limits),
            ("timeouts", old.timeouts != settings.timeouts),
            ("origin_pool", old.origin_pool != settings.origin_pool),
            ("connect", old.connect != settings.connect),
            ("resolver", old.resolver != settings.resolver),
            ("origin", old.origins != settings.origins),
            ("log", old.log != settings.log),
        ] {
            if changed {
                report.changed.push(name);
            }
        }
        let next =
            Arc::new(Shared::after(&self.shared, settings, &own).map_err(|e| e.to_string())?);
        // From here on nothing fails: switch over.
        self.shared.successor.set(Arc::clone(&next));
        self.current.set(&next);
        self.shared = next;
        let wanted = self.shared.settings.listeners.clone();
        self.acceptors.retain(
            |a| match wanted.iter().position(|l| l.addr == a.configured) {
                Some(i) => {
                    a.mode.store(mode_code(wanted[i].mode), Ordering::Relaxed);
                    a.http2.store(wanted[i].http2, Ordering::Relaxed);
                    *a.tls.lock() = tls[i].clone();
                    true
                }
                None => {
                    a.stop.store(true, Ordering::Release);
                    report.closed.push(a.bound);
                    false
                }
            },
        );
        for (listener, i) in fresh {
            if let Ok(addr) = listener.local_addr() {
                report.listening.push(addr);
            }
            let l = self.shared.settings.listeners[i].clone();
            self.spawn_acceptor(listener, &l, tls[i].take())
                .map_err(|e| e.to_string())?;
        }
        self.refresh_addrs();
        Ok(report)
    }

    /// Stops gracefully (see [`crate::lifecycle`]): stops accepting, closes idle
    /// connections, lets requests in flight finish for at most `bound`, then writes out the
    /// access log. Returns how many connections were still open at the end.
    pub async fn stop(&self, bound: Duration) -> u64 {
        self.shared.lifecycle.begin_stop();
        for a in &self.acceptors {
            a.stop.store(true, Ordering::Release);
        }
        let deadline = tokio::time::Instant::now() + bound;
        let open = || {
            self.shared
                .metrics
                .client_open
                .load(Ordering::Relaxed)
                .max(0) as u64
        };
        while open() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = open();
        self.shared.log.close();
        self.shared.trace.close();
        left
    }

    /// Reopens the access log and the trace (log rotation).
    pub fn reopen_log(&self) {
        self.shared.log.reopen();
        self.shared.trace.reopen();
    }
}

fn mode_code(mode: Mode) -> u8 {
    match mode {
        Mode::Forward => 0,
        Mode::Reverse => 1,
    }
}

fn mode_of(code: u8) -> Mode {
    if code == 1 {
        Mode::Reverse
    } else {
        Mode::Forward
    }
}

/// The kernel silently caps a listen backlog at `net.core.somaxconn`: say so when it will.
fn effective_backlog(wanted: u32) -> u32 {
    let Some(max) = somaxconn() else {
        return wanted;
    };
    if wanted > max {
        tracing::warn!(
            "limits.listen_backlog = {wanted} but the kernel allows {max} \
             (sysctl net.core.somaxconn): the listen queue will hold {max}"
        );
        return max;
    }
    wanted
}

fn somaxconn() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A non-blocking listening socket with `backlog`.
fn bind(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // As std and tokio do: a restarted proxy binds again while old connections linger.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// One listening socket's thread.
struct Acceptor {
    listener: std::net::TcpListener,
    /// A reload may change it ([`mode_code`]).
    mode: Arc<AtomicU8>,
    /// The listener's `http2` (a reload may change it).
    http2: Arc<AtomicBool>,
    /// The certificates of a TLS listener (a reload may change them).
    tls: TlsSlot,
    handshakes: Arc<tokio::sync::Semaphore>,
    /// Set when a reload removed this listener or the proxy is stopping: the thread ends and
    /// the socket closes.
    stop: Arc<AtomicBool>,
    current: Arc<Current>,
    runtime: tokio::runtime::Handle,
}

/// Accepting stopped for lack of descriptors.
struct Pause {
    since: Instant,
    retries: u64,
    next_wait: Duration,
}

type Accepted = (std::net::TcpStream, SocketAddr);

impl Acceptor {
    fn run(self) {
        let mut pause: Option<Pause> = None;
        let mut batch: Vec<Accepted> = Vec::with_capacity(ACCEPT_BATCH);
        loop {
            match self.listener.accept() {
                Ok(c) => {
                    if let Some(p) = pause.take() {
                        tracing::warn!(
                            paused_ms = p.since.elapsed().as_millis() as u64,
                            retries = p.retries,
                            "accepting connections again"
                        );
                    }
                    batch.push(c);
                    if batch.len() < ACCEPT_BATCH {
                        continue;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if batch.is_empty() {
                        if !self.wait_readable() {
                            return;
                        }
                        continue;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if fd_limit::is_exhaustion(&e) => {
                    let Some(shared) = self.current.get() else {
                        return;
                    };
                    if !batch.is_empty() {
                        self.hand_off(std::mem::take(&mut batch), Arc::clone(&shared));
                    }
                    let p = pause.get_or_insert_with(|| {
                        shared
                            .metrics
                            .accept_fd_exhausted
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            listener = ?self.listener.local_addr().ok(),
                            error = %e,
                            "out of file descriptors: accepting paused until connections close"
                        );
                        Pause {
                            since: Instant::now(),
                            retries: 0,
                            next_wait: PAUSE_FIRST,
                        }
                    });
                    p.retries += 1;
                    shared.freed.wait(p.next_wait);
                    p.next_wait = (p.next_wait * 2).min(PAUSE_MAX);
                    continue;
                }
                Err(e) => {
                    // Mostly one connection's error (aborted before it was accepted, refused
                    // by a firewall rule) that the next does not share; the pause only keeps
                    // an error that does repeat from spinning the thread.
                    tracing::debug!(error = %e, "accept failed");
                    std::thread::sleep(PAUSE_FIRST);
                    if batch.is_empty() {
                        continue;
                    }
                }
            }
            if self.stop.load(Ordering::Acquire) {
                return; // the batch is dropped: those connections close
            }
            let Some(shared) = self.current.get() else {
                return;
            };
            self.hand_off(std::mem::take(&mut batch), shared);
        }
    }

    /// Sleeps until a connection is waiting or [`ACCEPT_WAKE`] has passed; false once the
    /// proxy is gone.
    fn wait_readable(&self) -> bool {
        let mut fds = [PollFd::new(&self.listener, PollFlags::IN)];
        let wake = Timespec {
            tv_sec: 0,
            tv_nsec: ACCEPT_WAKE.as_nanos() as _,
        };
        let _ = poll(&mut fds, Some(&wake));
        !self.stop.load(Ordering::Acquire) && self.current.get().is_some()
    }

    /// Checks the connection limit and starts serving `batch` on the runtime.
    fn hand_off(&self, batch: Vec<Accepted>, shared: Arc<Shared>) {
        let max = shared.settings.limits.max_client_connections as i64;
        let mut open = shared.metrics.client_open.load(Ordering::Relaxed);
        let mut admitted = Vec::with_capacity(batch.len());
        for (stream, peer) in batch {
            if open >= max {
                shared
                    .metrics
                    .client_refused
                    .fetch_add(1, Ordering::Relaxed);
                continue; // dropped: closed at once
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            open += 1;
            admitted.push((stream, peer));
        }
        if admitted.is_empty() {
            return;
        }
        let mode = mode_of(self.mode.load(Ordering::Relaxed));
        let http2 = self.http2.load(Ordering::Relaxed);
        let tls = self.tls.lock().clone();
        let handshakes = Arc::clone(&self.handshakes);
        // On a runtime that has shut down the task is dropped unpolled, closing them.
        self.runtime.spawn(async move {
            for (stream, peer) in admitted {
                let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
                    continue;
                };
                let info = ConnInfo {
                    peer,
                    mode,
                    allowed: shared.acl.allows(peer.ip()),
                    tls: tls.is_some(),
                    http2,
                };
                let shared = Arc::clone(&shared);
                let Some(tls) = tls.clone() else {
                    // Plain HTTP/1: the connection's task is `conn::serve` itself, nothing
                    // around it, since an idle keep-alive connection costs what its task
                    // holds (`conn::serve` keeps a request's state in a box of its own, and
                    // tells the acceptor when its descriptor is freed).
                    tokio::spawn(conn::serve(ClientStream::Plain(stream), info, shared));
                    continue;
                };
                let handshakes = Arc::clone(&handshakes);
                tokio::spawn(async move {
                    let stream = {
                        // Counted open while it shakes hands, so the limit holds.
                        let _open = conn::OpenGuard::new(Arc::clone(&shared.metrics));
                        let timeout = shared.settings.timeouts.client_head;
                        Box::pin(crate::handshake::accept(&tls, stream, &handshakes, timeout)).await
                    };
                    // The handshake and HTTP/2 boxed: what the handshake held is freed when
                    // it ends rather than sizing the task for the connection's life (an idle
                    // connection costs what it holds).
                    match stream {
                        // ALPN chose HTTP/2.
                        Some(stream) if stream.negotiated_h2() => {
                            Box::pin(crate::client::h2::serve(stream, info, Arc::clone(&shared)))
                                .await;
                            shared.freed.notify();
                        }
                        // Not boxed, as for plain connections; notifies `freed` itself.
                        Some(stream) => conn::serve(stream, info, shared).await,
                        None => shared.freed.notify(),
                    }
                });
            }
        });
    }
}
