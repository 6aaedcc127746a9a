//! Connection caching on one side of the proxy (seed 003 §III "Network Connections"): each
//! owner (a client, or an origin server) has zero or more connections; a request takes an
//! idle one if there is one that has not idled past the timeout, else opens a new one. A
//! connection is busy for the duration of its transfer. Non-persistent connections close
//! when their transfer ends. The pool counts connections opened and the peak open at once
//! (seed 003 §IV.D's tables).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use crate::intern::FastMap;

#[derive(Debug, Clone, Copy)]
struct Conn {
    owner: u64,
    /// Microseconds of virtual time when its current transfer ends; `u64::MAX` while
    /// taken (between [`Pool::take`] and [`Pool::release`]).
    busy_until: u64,
    /// Congestion window it grew to.
    cwnd: u32,
}

/// A connection taken for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    id: u64,
    owner: u64,
    /// Opened for this request (pays connection set-up and starts slow).
    pub new: bool,
    pub cwnd: u32,
}

/// One side's connections.
///
/// Every operation is O(log n) in the connections open: an owner's released connections
/// are ordered by when their transfers end, so the most recently used idle one is the
/// greatest at or before `now` (a CSV trace has one client with thousands of connections
/// open at once; a scan of them per request took two thirds of a replay's time).
#[derive(Debug)]
pub struct Pool {
    persistent: bool,
    idle_us: u64,
    initial_window: u32,
    /// Every open connection, by id.
    conns: FastMap<u64, Conn>,
    /// Each owner's released connections as (busy_until, id); a taken one is absent.
    released: FastMap<u64, BTreeSet<(u64, u64)>>,
    /// (when it may close, id): lazily checked against the connection's state.
    expiry: BinaryHeap<Reverse<(u64, u64)>>,
    next_id: u64,
    open: u64,
    pub peak: u64,
    pub opened: u64,
    pub requests: u64,
}

fn closes_at(persistent: bool, idle_us: u64, c: &Conn) -> u64 {
    if persistent {
        c.busy_until.saturating_add(idle_us)
    } else {
        c.busy_until
    }
}

pub fn micros(t: f64) -> u64 {
    (t * 1e6).max(0.0) as u64
}

impl Pool {
    pub fn new(persistent: bool, idle_timeout: f64, initial_window: u32) -> Self {
        Pool {
            persistent,
            idle_us: micros(idle_timeout),
            initial_window,
            conns: FastMap::default(),
            released: FastMap::default(),
            expiry: BinaryHeap::new(),
            next_id: 0,
            open: 0,
            peak: 0,
            opened: 0,
            requests: 0,
        }
    }

    /// Closes what has idled out (or finished, if not persistent) by `now`.
    fn expire(&mut self, now: u64) {
        while let Some(Reverse((at, id))) = self.expiry.peek().copied() {
            if at > now {
                break;
            }
            self.expiry.pop();
            let Some(c) = self.conns.get(&id).copied() else {
                continue;
            };
            // A connection used again since this entry was pushed has a later one.
            if closes_at(self.persistent, self.idle_us, &c) > now {
                continue;
            }
            self.conns.remove(&id);
            self.open -= 1;
            if let Some(set) = self.released.get_mut(&c.owner) {
                set.remove(&(c.busy_until, id));
                if set.is_empty() {
                    self.released.remove(&c.owner);
                }
            }
        }
    }

    /// A connection for `owner` at `now` (microseconds).
    pub fn take(&mut self, owner: u64, now: u64) -> Taken {
        self.expire(now);
        self.requests += 1;
        if self.persistent {
            // The idle connection used most recently: its window is the widest.
            let idle = self
                .released
                .get(&owner)
                .and_then(|set| set.range(..=(now, u64::MAX)).next_back().copied());
            if let Some((busy_until, id)) = idle {
                if let Some(set) = self.released.get_mut(&owner) {
                    set.remove(&(busy_until, id));
                }
                if let Some(c) = self.conns.get_mut(&id) {
                    c.busy_until = u64::MAX;
                    return Taken {
                        id,
                        owner,
                        new: false,
                        cwnd: c.cwnd,
                    };
                }
            }
        }
        self.next_id += 1;
        self.opened += 1;
        self.open += 1;
        self.peak = self.peak.max(self.open);
        let id = self.next_id;
        self.conns.insert(
            id,
            Conn {
                owner,
                busy_until: u64::MAX,
                cwnd: self.initial_window,
            },
        );
        Taken {
            id,
            owner,
            new: true,
            cwnd: self.initial_window,
        }
    }

    /// The transfer on `t` ends at `end` (microseconds) with window `cwnd`.
    pub fn release(&mut self, t: Taken, end: u64, cwnd: u32) {
        if let Some(c) = self.conns.get_mut(&t.id) {
            c.busy_until = end;
            c.cwnd = cwnd;
            let at = closes_at(self.persistent, self.idle_us, c);
            self.released
                .entry(t.owner)
                .or_default()
                .insert((end, t.id));
            self.expiry.push(Reverse((at, t.id)));
        }
    }

    /// Share of requests that opened a connection.
    pub fn new_share(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.opened as f64 / self.requests as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistent_connections_are_reused_until_they_idle_out() {
        let mut p = Pool::new(true, 10.0, 2);
        let a = p.take(1, 0);
        assert!(a.new);
        p.release(a, micros(1.0), 8);
        // Reused 5 s later, with the window it grew to.
        let b = p.take(1, micros(6.0));
        assert_eq!((b.new, b.cwnd), (false, 8));
        p.release(b, micros(7.0), 8);
        // 10 s idle after 7 s: closed at 17 s, so a request at 18 s opens a new one.
        let c = p.take(1, micros(18.0));
        assert!(c.new);
        assert_eq!((p.opened, p.peak, p.requests), (2, 1, 3));
    }

    #[test]
    fn a_busy_connection_is_not_shared_and_the_peak_counts_both() {
        let mut p = Pool::new(true, 10.0, 2);
        let a = p.take(1, 0);
        let b = p.take(1, micros(0.5));
        assert!(b.new);
        p.release(a, micros(1.0), 2);
        p.release(b, micros(2.0), 2);
        assert_eq!(p.peak, 2);
        // Another owner never takes these.
        assert!(p.take(2, micros(3.0)).new);
        assert_eq!(p.peak, 3);
    }

    #[test]
    fn non_persistent_connections_close_after_their_transfer() {
        let mut p = Pool::new(false, 10.0, 2);
        let a = p.take(1, 0);
        p.release(a, micros(1.0), 8);
        let b = p.take(1, micros(2.0));
        assert_eq!((b.new, b.cwnd), (true, 2));
        p.release(b, micros(3.0), 2);
        assert_eq!((p.opened, p.peak, p.new_share()), (2, 1, 1.0));
    }

    #[test]
    fn the_most_recently_used_idle_connection_is_taken() {
        let mut p = Pool::new(true, 100.0, 2);
        let a = p.take(1, 0);
        let b = p.take(1, 0);
        let c = p.take(1, 0);
        p.release(a, micros(1.0), 4);
        p.release(b, micros(3.0), 16);
        p.release(c, micros(9.0), 8);
        // At 5 s, `c` is still busy; of the idle ones `b` finished last.
        let d = p.take(1, micros(5.0));
        assert_eq!((d.new, d.cwnd), (false, 16));
        let e = p.take(1, micros(5.0));
        assert_eq!((e.new, e.cwnd), (false, 4));
        // Both idle ones are taken and `c` is busy: a fourth opens.
        assert!(p.take(1, micros(5.0)).new);
        assert_eq!((p.opened, p.peak), (4, 4));
    }
}
