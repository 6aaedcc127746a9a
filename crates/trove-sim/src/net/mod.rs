//! The network model of seed 003 §III (PROXIM), run beside the cache for every request.
//!
//! With the proxy, a request from a client:
//! 1. takes a connection to the proxy: an idle persistent one, or a new one that costs a
//!    client round trip to set up (`connect`);
//! 2. is answered from the cache after one client round trip (`request-response`), or, when
//!    the cache core went to the origin (a miss or a revalidation), after the proxy has also
//!    taken a server connection (a new one costs an origin round trip, counted in `connect`)
//!    and waited one origin round trip for the response head;
//! 3. is transferred (`transfer`) over the client link with TCP slow start (`tcp`), and on a
//!    miss no faster than the origin link delivers it to the proxy.
//!
//! Without the proxy (the baseline every run computes beside it) the client talks to the
//! origin directly: both round trips in series, the slower link's bandwidth, connections per
//! (client, server) pair (persistent only with `direct_persistent`).
//!
//! Aborts: a record with fewer bytes than its object is a client that gave up. Without a
//! proxy the origin sent those bytes and at most a window more (in flight). With a proxy,
//! the proxy had read what its faster origin link delivered by then, at most `read_ahead`
//! beyond what the client took if flow control is on; then the abort policy (trove's
//! `trove_cache::AbortPolicy`) finishes the fetch or stops it. A stopped fetch of an object
//! being stored loses it (`finish_stored = false` only).
//!
//! Settable as PROXIM's were: each server's round trip (log-normal around a median, fixed
//! per server, as PROXIM took each server's from its trace), a set-up cost per new
//! connection beyond its round trip, the proxy's own time per hit and per miss, the idle
//! timeouts on each side and of the baseline's persistent connections.
//!
//! What it leaves out, as PROXIM did: packet loss, queueing between clients sharing a link,
//! header bytes, server think time, DNS.

pub mod pool;
pub mod tcp;

use serde::Serialize;
use trove_cache::{AbortPolicy, AfterAbort, Storing};

use crate::latency::Latencies;
use pool::{micros, Pool};
use tcp::{Link, Tcp};

/// The network parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Params {
    /// Client ↔ proxy: bytes/s and round trip, seconds.
    pub client_bandwidth: f64,
    pub client_rtt: f64,
    /// Proxy ↔ origin.
    pub origin_bandwidth: f64,
    /// The median origin round trip; every server's own is this times e^(σz), σ =
    /// `origin_rtt_sigma`, z a standard normal fixed by the server's id (PROXIM measured
    /// each server's round trip from its SYN/SYN-ACK; a log has none). σ = 0: all alike.
    pub origin_rtt: f64,
    pub origin_rtt_sigma: f64,
    pub tcp: Tcp,
    /// Set-up cost of a new TCP connection beyond its round trip (accepting it, a
    /// server's SYN processing), seconds, on every connection opened: client to proxy,
    /// proxy to origin, client to origin without the proxy.
    pub connect_overhead: f64,
    /// Connection caching on each side, and its idle timeouts (PROXIM: 3 min, 30 s).
    pub persistent_clients: bool,
    pub persistent_servers: bool,
    pub client_idle: f64,
    pub server_idle: f64,
    /// The no-proxy baseline keeps client-to-server connections too, idle at most
    /// `direct_idle` seconds (PROXIM's baseline reused connections where its trace had).
    pub direct_persistent: bool,
    pub direct_idle: f64,
    /// Added to every hit's and every miss's service time (PROXIM's overheads), seconds.
    pub hit_overhead: f64,
    pub miss_overhead: f64,
    pub abort: AbortModel,
}

/// What happens to a fetch whose client went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AbortModel {
    #[serde(skip)]
    pub policy: AbortPolicy,
    /// A fetch filling a stored object always finishes (trove's rule).
    pub finish_stored: bool,
    /// Flow control: the origin is read at most this far ahead of the client.
    pub read_ahead: Option<u64>,
    pub name: &'static str,
}

impl AbortModel {
    /// trove's default: `[cache.abort]` defaults, 64 KB read-ahead unless storing.
    pub fn trove() -> Self {
        AbortModel {
            policy: AbortPolicy::default(),
            finish_stored: true,
            read_ahead: Some(64 << 10),
            name: "trove",
        }
    }

    /// Always read the whole object (seed 003: "continued to download upon aborts").
    pub fn finish() -> Self {
        AbortModel {
            policy: AbortPolicy {
                min_left: u64::MAX,
                done_pct: 0,
            },
            finish_stored: true,
            read_ahead: None,
            name: "finish",
        }
    }

    /// Stop at once, reading at full speed until then.
    pub fn stop() -> Self {
        AbortModel {
            policy: AbortPolicy {
                min_left: 0,
                done_pct: 101,
            },
            finish_stored: false,
            read_ahead: None,
            name: "stop",
        }
    }

    /// Stop at once, having read at most 64 KB ahead of the client (seed 003's flow control).
    pub fn stop_64k() -> Self {
        AbortModel {
            read_ahead: Some(64 << 10),
            name: "stop-64k",
            ..AbortModel::stop()
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "trove" => Self::trove(),
            "finish" => Self::finish(),
            "stop" => Self::stop(),
            "stop-64k" => Self::stop_64k(),
            _ => return None,
        })
    }
}

/// Presets from seed 003.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// AT&T WorldNet: 21 kbit/s modems with 250 ms RTT, a 45 Mbit/s (T3) uplink with
    /// 100 ms to origins.
    Modem,
    /// AT&T Labs–Research: 6 Mbit/s LAN with 2.5 ms RTT, a 1.5 Mbit/s (T1) uplink with
    /// 100 ms to origins.
    Lan,
}

impl Preset {
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Modem => "modem",
            Preset::Lan => "lan",
        }
    }

    pub fn params(self) -> Params {
        let (cb, crtt, ob) = match self {
            Preset::Modem => (21e3 / 8.0, 0.250, 45e6 / 8.0),
            Preset::Lan => (6e6 / 8.0, 0.0025, 1.5e6 / 8.0),
        };
        Params {
            client_bandwidth: cb,
            client_rtt: crtt,
            origin_bandwidth: ob,
            // The paper measures it per server from SYN/SYN-ACK; a log has no such times.
            origin_rtt: 0.100,
            origin_rtt_sigma: 0.0,
            tcp: Tcp::default(),
            connect_overhead: 0.0,
            persistent_clients: true,
            persistent_servers: true,
            client_idle: 180.0,
            server_idle: 30.0,
            direct_persistent: false,
            direct_idle: 30.0,
            hit_overhead: 0.0,
            miss_overhead: 0.0,
            abort: AbortModel::trove(),
        }
    }
}

impl Params {
    /// Server `server`'s round trip: the same in every run and on both paths.
    pub fn origin_rtt_of(&self, server: u32) -> f64 {
        if self.origin_rtt_sigma <= 0.0 {
            return self.origin_rtt;
        }
        self.origin_rtt * (self.origin_rtt_sigma * standard_normal(u64::from(server))).exp()
    }
}

/// A standard normal draw fixed by `n` (Box–Muller over two splitmix64 outputs).
pub fn standard_normal(n: u64) -> f64 {
    fn splitmix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let a = splitmix(n.wrapping_mul(2));
    let b = splitmix(n.wrapping_mul(2) + 1);
    // In (0, 1]: never ln 0.
    let u1 = ((a >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// One request as the network model needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exchange {
    pub time: f64,
    pub client: u32,
    pub server: u32,
    /// Bytes the client received (short of `object_size`: it aborted).
    pub delivered: u64,
    pub object_size: u64,
    /// The cache went to the origin (a miss, or a revalidation).
    pub origin_asked: bool,
    /// Body bytes the origin would send in full for this request (0 for a 304).
    pub origin_body: u64,
    /// The response is being stored.
    pub storing: bool,
}

/// What the model decided about one request's fetch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accounted {
    /// Total latency with the proxy, and its parts.
    pub connect: f64,
    pub request_response: f64,
    pub transfer: f64,
    /// Without the proxy.
    pub direct: f64,
    /// Bytes the origin sent through the proxy, and without it.
    pub origin_bytes: u64,
    pub direct_origin_bytes: u64,
    /// The proxy stopped a fetch it was storing: the object must leave the store.
    pub drop_stored: bool,
}

impl Accounted {
    pub fn total(&self) -> f64 {
        self.connect + self.request_response + self.transfer
    }
}

/// The model's state across a replay.
#[derive(Debug)]
pub struct NetModel {
    pub p: Params,
    clients: Pool,
    servers: Pool,
    direct: Pool,
    pub with_proxy: Latencies,
    pub without_proxy: Latencies,
    pub bytes_to_clients: u64,
    pub origin_bytes: u64,
    pub direct_origin_bytes: u64,
    pub aborted: u64,
}

impl NetModel {
    pub fn new(p: Params) -> Self {
        let w = p.tcp.initial_window;
        NetModel {
            clients: Pool::new(p.persistent_clients, p.client_idle, w),
            servers: Pool::new(p.persistent_servers, p.server_idle, w),
            direct: Pool::new(p.direct_persistent, p.direct_idle, w),
            with_proxy: Latencies::default(),
            without_proxy: Latencies::default(),
            bytes_to_clients: 0,
            origin_bytes: 0,
            direct_origin_bytes: 0,
            aborted: 0,
            p,
        }
    }

    fn client_link(&self) -> Link {
        Link {
            bandwidth: self.p.client_bandwidth,
            rtt: self.p.client_rtt,
        }
    }

    fn origin_link(&self, rtt: f64) -> Link {
        Link {
            bandwidth: self.p.origin_bandwidth,
            rtt,
        }
    }

    fn direct_link(&self, origin_rtt: f64) -> Link {
        Link {
            bandwidth: self.p.client_bandwidth.min(self.p.origin_bandwidth),
            rtt: self.p.client_rtt + origin_rtt,
        }
    }

    /// Runs one exchange through the model and records it.
    pub fn exchange(&mut self, x: &Exchange) -> Accounted {
        let p = self.p.clone();
        let tcp = &p.tcp;
        let now = micros(x.time);
        let aborted = x.delivered < x.object_size;
        self.aborted += u64::from(aborted);
        let origin_rtt = p.origin_rtt_of(x.server);
        let setup = |rtt: f64| rtt + p.connect_overhead;

        // With the proxy.
        let c = self.clients.take(u64::from(x.client), now);
        let mut connect = if c.new { setup(p.client_rtt) } else { 0.0 };
        let mut rr = p.client_rtt;
        let (client_t, client_w) = tcp::transfer(tcp, self.client_link(), x.delivered, c.cwnd);
        let mut transfer = client_t;
        let mut origin_bytes = 0;
        let mut drop_stored = false;
        if x.origin_asked {
            let s = self.servers.take(u64::from(x.server), now);
            if s.new {
                connect += setup(origin_rtt);
            }
            rr += origin_rtt + p.miss_overhead;
            let full = x.origin_body;
            // What the proxy has read when the client stops (or everything).
            let read = if aborted && full > 0 {
                let mut r = tcp::delivered_by(tcp, self.origin_link(origin_rtt), client_t, s.cwnd)
                    .clamp(x.delivered, full);
                let flow = p
                    .abort
                    .read_ahead
                    .filter(|_| !x.storing || !p.abort.finish_stored);
                if let Some(ahead) = flow {
                    r = r.min(x.delivered.saturating_add(ahead));
                }
                let storing = if x.storing && p.abort.finish_stored {
                    Storing::Yes
                } else {
                    Storing::No
                };
                match p.abort.policy.decide(storing, r, Some(full)) {
                    AfterAbort::Finish => full,
                    AfterAbort::Stop => {
                        // Stopped short of the end: a stored copy would be torn.
                        drop_stored = x.storing && r < full;
                        r
                    }
                }
            } else {
                full
            };
            origin_bytes = read;
            let (origin_t, origin_w) =
                tcp::transfer(tcp, self.origin_link(origin_rtt), read, s.cwnd);
            if !aborted {
                transfer = transfer.max(origin_t);
            }
            let start = x.time + connect + rr;
            self.servers.release(s, micros(start + origin_t), origin_w);
        } else {
            rr += p.hit_overhead;
        }
        let total = connect + rr + transfer;
        self.clients.release(c, micros(x.time + total), client_w);

        // Without the proxy.
        let d = self.direct.take(pair(x.client, x.server), now);
        let direct_link = self.direct_link(origin_rtt);
        let direct_rtt = direct_link.rtt;
        let (dt, dw) = tcp::transfer(tcp, direct_link, x.delivered, d.cwnd);
        let direct_connect = if d.new { setup(direct_rtt) } else { 0.0 };
        let direct = direct_connect + direct_rtt + dt;
        self.direct.release(d, micros(x.time + direct), dw);
        let in_flight = if aborted {
            (direct_link.bandwidth * direct_rtt) as u64
        } else {
            0
        };
        let direct_origin_bytes = x
            .delivered
            .saturating_add(in_flight)
            .min(x.object_size.max(x.delivered));

        let a = Accounted {
            connect,
            request_response: rr,
            transfer,
            direct,
            origin_bytes,
            direct_origin_bytes,
            drop_stored,
        };
        self.with_proxy.add(a.total(), connect, rr, transfer);
        self.without_proxy
            .add(direct, direct_connect, direct_rtt, dt);
        self.bytes_to_clients += x.delivered;
        self.origin_bytes += origin_bytes;
        self.direct_origin_bytes += direct_origin_bytes;
        a
    }

    /// What a report shows.
    pub fn report(&self) -> NetReport {
        NetReport {
            params: self.p.clone(),
            with_proxy: self.with_proxy.summary(),
            without_proxy: self.without_proxy.summary(),
            bytes_to_clients: self.bytes_to_clients,
            bytes_from_origins: self.origin_bytes,
            bytes_from_origins_without_proxy: self.direct_origin_bytes,
            origin_savings: if self.direct_origin_bytes == 0 {
                0.0
            } else {
                1.0 - self.origin_bytes as f64 / self.direct_origin_bytes as f64
            },
            aborted: self.aborted,
            peak_client_connections: self.clients.peak,
            peak_server_connections: self.servers.peak,
            peak_direct_connections: self.direct.peak,
            new_client_connection_share: self.clients.new_share(),
            new_server_connection_share: self.servers.new_share(),
            new_direct_connection_share: self.direct.new_share(),
            server_requests: self.servers.requests,
            latency_histogram_with_proxy: self.with_proxy.histogram(),
            latency_histogram_without_proxy: self.without_proxy.histogram(),
        }
    }
}

/// The (client, server) pair as one owner id of the direct pool.
fn pair(client: u32, server: u32) -> u64 {
    (u64::from(client) << 32) | u64::from(server)
}

/// The network model's answers for one replay.
#[derive(Debug, Clone, Serialize)]
pub struct NetReport {
    pub params: Params,
    pub with_proxy: crate::latency::Summary,
    pub without_proxy: crate::latency::Summary,
    pub bytes_to_clients: u64,
    pub bytes_from_origins: u64,
    pub bytes_from_origins_without_proxy: u64,
    /// 1 − with/without: negative when the proxy costs origin traffic.
    pub origin_savings: f64,
    pub aborted: u64,
    pub peak_client_connections: u64,
    pub peak_server_connections: u64,
    pub peak_direct_connections: u64,
    pub new_client_connection_share: f64,
    pub new_server_connection_share: f64,
    /// Without the proxy (1 unless `direct_persistent`).
    pub new_direct_connection_share: f64,
    pub server_requests: u64,
    /// (upper bound of the bin in seconds, requests), log-spaced.
    pub latency_histogram_with_proxy: Vec<(f64, u64)>,
    pub latency_histogram_without_proxy: Vec<(f64, u64)>,
}
