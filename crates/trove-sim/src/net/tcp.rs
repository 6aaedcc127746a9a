//! TCP transfer time with slow start (seed 003 §III "Document Transfer": packets scheduled
//! over a link of a given rate and round-trip time, slow start at the start of a connection,
//! no losses). A window of `cwnd` segments goes out, the sender waits for the first
//! acknowledgement one round trip later, the window doubles; once a window takes longer to
//! send than a round trip the link is full and the rest goes at the link's rate. A
//! persistent connection keeps the window it grew to.

/// One direction of a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Bytes per second.
    pub bandwidth: f64,
    /// Round-trip time, seconds.
    pub rtt: f64,
}

/// TCP constants of the model.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Tcp {
    /// Payload bytes per segment (1500-byte packets, as PROXIM sends).
    pub mss: u64,
    /// Initial congestion window, segments (RFC 2001's 1 then, RFC 6928's 10 now).
    pub initial_window: u32,
    /// Largest window, segments (a 64 KB receive window without window scaling).
    pub max_window: u32,
}

impl Default for Tcp {
    fn default() -> Self {
        Tcp {
            mss: 1460,
            initial_window: 2,
            max_window: 44,
        }
    }
}

/// Sends `bytes` over `link` starting with a window of `cwnd` segments. Returns the time from
/// the first segment leaving to the last arriving (less the one-way delay, which the
/// request-response time counts) and the window afterwards.
pub fn transfer(tcp: &Tcp, link: Link, bytes: u64, cwnd: u32) -> (f64, u32) {
    if bytes == 0 {
        return (0.0, cwnd);
    }
    let seg_time = tcp.mss as f64 / link.bandwidth;
    let mut left = bytes.div_ceil(tcp.mss);
    let mut w = u64::from(cwnd.clamp(1, tcp.max_window));
    let mut t = 0.0;
    loop {
        let send = w.min(left);
        let ser = send as f64 * seg_time;
        left -= send;
        if left == 0 {
            t += ser;
            break;
        }
        if ser >= link.rtt {
            // The window fills the pipe: the rest streams at the link's rate.
            t += ser + left as f64 * seg_time;
            break;
        }
        t += link.rtt;
        if w < u64::from(tcp.max_window) {
            w = (w * 2).min(u64::from(tcp.max_window));
        }
    }
    (t, w as u32)
}

/// How many bytes `transfer` has delivered `elapsed` seconds after the first segment left
/// (the inverse, for what a fast side has read when a slow side gives up).
pub fn delivered_by(tcp: &Tcp, link: Link, elapsed: f64, cwnd: u32) -> u64 {
    let seg_time = tcp.mss as f64 / link.bandwidth;
    let mut w = u64::from(cwnd.clamp(1, tcp.max_window));
    let (mut t, mut segs) = (0.0, 0u64);
    loop {
        let ser = w as f64 * seg_time;
        if ser >= link.rtt {
            let more = ((elapsed - t) / seg_time).max(0.0) as u64;
            return (segs + more).saturating_mul(tcp.mss);
        }
        if t + ser >= elapsed {
            let more = ((elapsed - t) / seg_time).max(0.0) as u64;
            return (segs + more.min(w)).saturating_mul(tcp.mss);
        }
        segs += w;
        t += link.rtt;
        if t >= elapsed {
            return segs.saturating_mul(tcp.mss);
        }
        if w < u64::from(tcp.max_window) {
            w = (w * 2).min(u64::from(tcp.max_window));
        }
        if segs > (1 << 40) {
            return u64::MAX;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: Tcp = Tcp {
        mss: 1000,
        initial_window: 1,
        max_window: 64,
    };

    #[test]
    fn one_segment_is_its_serialisation_time() {
        let l = Link {
            bandwidth: 10_000.0,
            rtt: 1.0,
        };
        assert_eq!(transfer(&TCP, l, 500, 1), (0.1, 1));
        assert_eq!(transfer(&TCP, l, 0, 1), (0.0, 1));
    }

    #[test]
    fn slow_start_doubles_each_round_trip() {
        // Fast link, 1 s RTT: 7 segments go as 1, 2, 4: two round trips then 4 segments.
        let l = Link {
            bandwidth: 1_000_000.0,
            rtt: 1.0,
        };
        let (t, w) = transfer(&TCP, l, 7_000, 1);
        assert!((t - (2.0 + 0.004)).abs() < 1e-9, "{t}");
        assert_eq!(w, 4);
        // A persistent connection that grew its window sends the same in one round.
        let (t, _) = transfer(&TCP, l, 7_000, 8);
        assert!((t - 0.007).abs() < 1e-9, "{t}");
    }

    #[test]
    fn a_slow_link_is_bandwidth_bound() {
        // 1 KB/s with 0.1 s RTT: one segment takes 1 s > RTT, so 10 segments take 10 s.
        let l = Link {
            bandwidth: 1_000.0,
            rtt: 0.1,
        };
        let (t, _) = transfer(&TCP, l, 10_000, 1);
        assert!((t - 10.0).abs() < 1e-9, "{t}");
        assert_eq!(delivered_by(&TCP, l, 4.5, 1), 4_000);
    }

    #[test]
    fn delivered_by_inverts_transfer() {
        let l = Link {
            bandwidth: 1_000_000.0,
            rtt: 1.0,
        };
        // After 1.5 s: the first window (1) and the second (2) are out.
        assert_eq!(delivered_by(&TCP, l, 1.5, 1), 3_000);
        assert_eq!(delivered_by(&TCP, l, 0.0005, 1), 0);
    }
}
