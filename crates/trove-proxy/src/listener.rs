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

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use socket2::{Domain, Protocol, Socket, Type};

use crate::client::conn::{self, ConnInfo};
use crate::fd_limit;
use crate::settings::{Mode, Settings};
use crate::state::Shared;

/// Most connections taken from the kernel's queue at one wake-up.
const ACCEPT_BATCH: usize = 64;
/// How often an idle acceptor wakes to see whether its proxy has stopped.
const ACCEPT_WAKE: Duration = Duration::from_millis(250);
/// The first and the longest wait before accepting again after running out of descriptors.
const PAUSE_FIRST: Duration = Duration::from_millis(10);
const PAUSE_MAX: Duration = Duration::from_secs(1);

/// A started proxy: its bound addresses and shared state.
pub struct Running {
    pub shared: Arc<Shared>,
    pub addrs: Vec<(Mode, SocketAddr)>,
}

/// Binds every listener and starts accepting. Must be called inside a tokio runtime; the
/// acceptor threads stop once the returned [`Running`] and every connection are gone.
pub async fn start(settings: Settings) -> io::Result<Running> {
    settings
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    fd_limit::prepare(&settings);
    let backlog = effective_backlog(settings.limits.listen_backlog);
    // Bind every listener first: the destination guard must know their addresses (port 0
    // is only known once bound) before the first request is accepted.
    let mut bound = Vec::new();
    for l in &settings.listeners {
        let listener = bind(l.addr, backlog)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {}: {e}", l.addr)))?;
        let addr = listener.local_addr()?;
        bound.push((listener, l.mode, addr));
    }
    let own: Vec<SocketAddr> = bound.iter().map(|(_, _, a)| *a).collect();
    let shared = Arc::new(Shared::new(settings, &own)?);
    crate::manage::spawn_sweeper(&shared, std::time::Duration::from_secs(1));
    let runtime = tokio::runtime::Handle::current();
    let mut addrs = Vec::new();
    for (listener, mode, addr) in bound {
        addrs.push((mode, addr));
        let acceptor = Acceptor {
            listener,
            mode,
            shared: Arc::downgrade(&shared),
            runtime: runtime.clone(),
        };
        std::thread::Builder::new()
            .name(format!("trove-accept-{}", addr.port()))
            .spawn(move || acceptor.run())?;
    }
    Ok(Running { shared, addrs })
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
    mode: Mode,
    shared: Weak<Shared>,
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
                    let Some(shared) = self.shared.upgrade() else {
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
            let Some(shared) = self.shared.upgrade() else {
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
        self.shared.strong_count() > 0
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
        let mode = self.mode;
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
                };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    conn::serve(stream, info, Arc::clone(&shared)).await;
                    shared.freed.notify();
                });
            }
        });
    }
}
