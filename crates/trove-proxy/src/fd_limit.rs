//! File descriptors: the process limit checked (and raised) at start-up, and the errors that
//! mean it was reached.
//!
//! Every client connection costs a descriptor, and so does every origin connection. With
//! the common defaults (a soft `RLIMIT_NOFILE` of 1024, a hard one far higher) a proxy
//! configured for 50,000 connections would run out near 1,000, so trove does what nginx's
//! `worker_rlimit_nofile` and Go's runtime do: it raises the soft limit as far as the hard
//! limit allows (no further than it needs), and warns when that is still short. rustix gives
//! `getrlimit`/`setrlimit` and the errno values without `unsafe`.

use std::io;

use parking_lot::{Condvar, Mutex};
use rustix::io::Errno;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use crate::settings::Settings;

/// Connections the admin listener and its Unix socket may hold at once, together: their
/// own share of descriptors, inside [`RESERVE`], so no number of admin connections can take
/// the proxy's (issue 19, defect 5).
pub const ADMIN_SHARE: usize = 32;

/// Descriptors kept for everything that is not a client connection beyond the origin pool:
/// listeners, the admin listener's connections ([`ADMIN_SHARE`]), the access log, the
/// runtime's epoll and event fds.
const RESERVE: u64 = 64 + ADMIN_SHARE as u64;

/// What the start-up check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdBudget {
    /// Descriptors the settings may use at once: client connections, one origin's pool and
    /// [`RESERVE`].
    pub needed: u64,
    /// The soft limit after the check (`None`: unlimited).
    pub soft: Option<u64>,
    /// The hard limit (`None`: unlimited).
    pub hard: Option<u64>,
    /// Whether the soft limit was raised.
    pub raised: bool,
}

impl FdBudget {
    /// True when the limit is lower than the settings may need.
    pub fn short(&self) -> bool {
        self.soft.is_some_and(|s| s < self.needed)
    }
}

/// Raises the soft `RLIMIT_NOFILE` towards what `settings` need (up to the hard limit),
/// and warns if it is still short. Called once by [`crate::listener::start`].
pub fn prepare(settings: &Settings) -> FdBudget {
    let needed = (settings.limits.max_client_connections as u64)
        .saturating_add(settings.origin_pool.max_per_origin as u64)
        .saturating_add(RESERVE);
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let mut budget = FdBudget {
        needed,
        soft: current,
        hard: maximum,
        raised: false,
    };
    if budget.short() {
        let target = maximum.map_or(needed, |h| h.min(needed));
        if current.is_some_and(|c| c < target)
            && setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(target),
                    maximum,
                },
            )
            .is_ok()
        {
            budget.soft = Some(target);
            budget.raised = true;
            tracing::info!(from = ?current, to = target, "raised the open files limit");
        }
    }
    if let (true, Some(soft)) = (budget.short(), budget.soft) {
        tracing::warn!(
            "limits.max_client_connections = {} may need {} open files, but this process \
             may open only {soft} (RLIMIT_NOFILE; hard limit {}): once they are used up, \
             accepting pauses until connections close. Raise the limit (ulimit -n, systemd \
             LimitNOFILE=) or lower limits.max_client_connections",
            settings.limits.max_client_connections,
            budget.needed,
            budget
                .hard
                .map_or("unlimited".to_string(), |h| h.to_string()),
        );
    }
    budget
}

/// The default `limits.max_client_connections` (`default`) fitted to this process's hard
/// `RLIMIT_NOFILE`: a host whose hard limit is 20,000 gets a default that fits in it, with
/// room for one origin's pool and the reserve, rather than a warning at every start (the
/// soft limit is raised to the hard one at start, [`prepare`]). Never below 256. A value
/// the operator sets is theirs, and [`prepare`] warns if it does not fit.
pub fn fit_connections(default: usize, max_per_origin: usize) -> usize {
    let Rlimit { maximum, .. } = getrlimit(Resource::Nofile);
    fit(default, max_per_origin, maximum)
}

fn fit(default: usize, max_per_origin: usize, hard: Option<u64>) -> usize {
    let Some(hard) = hard else {
        return default;
    };
    let room = hard.saturating_sub(max_per_origin as u64 + RESERVE);
    (default as u64).min(room).max(256) as usize
}

/// True for the errors that mean no descriptor was left for a new connection: the
/// process's limit (EMFILE), the system's (ENFILE), or kernel memory for sockets.
pub fn is_exhaustion(e: &io::Error) -> bool {
    matches!(
        Errno::from_io_error(e),
        Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)
    )
}

/// Signalled whenever a client connection has closed (its descriptor is free again), so an
/// acceptor paused for lack of descriptors resumes at once rather than at its next retry.
#[derive(Debug, Default)]
pub struct Freed {
    lock: Mutex<()>,
    cv: Condvar,
}

impl Freed {
    /// A descriptor was given back. Costs an atomic load when nobody waits.
    pub fn notify(&self) {
        self.cv.notify_all();
    }

    /// Blocks the calling (acceptor) thread until [`Freed::notify`] or `timeout`.
    pub fn wait(&self, timeout: std::time::Duration) {
        let mut g = self.lock.lock();
        let _ = self.cv.wait_for(&mut g, timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_exhaustion_is_told_apart() {
        assert!(is_exhaustion(&io::Error::from_raw_os_error(
            Errno::MFILE.raw_os_error()
        )));
        assert!(is_exhaustion(&io::Error::from_raw_os_error(
            Errno::NFILE.raw_os_error()
        )));
        assert!(!is_exhaustion(&io::Error::from_raw_os_error(
            Errno::CONNABORTED.raw_os_error()
        )));
        assert!(!is_exhaustion(&io::Error::other("x")));
    }

    /// Issue 20: the default of 50,000 warned at every start under a hard limit of 20,000.
    #[test]
    fn the_default_connection_limit_fits_the_hard_limit() {
        assert_eq!(
            fit(50_000, 256, Some(20_000)),
            20_000 - 256 - RESERVE as usize
        );
        let fitted = fit(50_000, 256, Some(20_000));
        let b = FdBudget {
            needed: fitted as u64 + 256 + RESERVE,
            soft: Some(20_000),
            hard: Some(20_000),
            raised: true,
        };
        assert!(!b.short(), "no warning once fitted");
        assert_eq!(fit(50_000, 256, Some(1 << 20)), 50_000);
        assert_eq!(fit(50_000, 256, None), 50_000);
        assert_eq!(fit(50_000, 256, Some(300)), 256);
    }

    #[test]
    fn a_budget_is_short_only_under_a_finite_limit() {
        let b = FdBudget {
            needed: 100,
            soft: Some(99),
            hard: None,
            raised: false,
        };
        assert!(b.short());
        assert!(!FdBudget { soft: None, ..b }.short());
        assert!(!FdBudget {
            soft: Some(100),
            ..b
        }
        .short());
    }
}
