//! The network model on small traces worked out by hand, one effect each: round trips and
//! connection set-up, bandwidth, slow start and a persistent connection's grown window,
//! idle timeouts and peak connections, aborts under each abort policy, cookie policies.
//!
//! Round numbers throughout: 1000-byte segments, an initial window of 1, and links chosen so
//! each figure is a sum a reader can check.

use std::time::Duration;

use trove_cache::{CookiePolicy, RequestCookiePolicy};
use trove_http::Policy;
use trove_sim::assume::Assumptions;
use trove_sim::net::tcp::Tcp;
use trove_sim::net::{AbortModel, NetReport, Params, Preset};
use trove_sim::replay::{Config, ConfigReport, Replay};
use trove_sim::trace::Record;
use trove_store::EvictionKind;

fn params(client_bw: f64, client_rtt: f64, origin_bw: f64, origin_rtt: f64) -> Params {
    Params {
        client_bandwidth: client_bw,
        client_rtt,
        origin_bandwidth: origin_bw,
        origin_rtt,
        tcp: Tcp {
            mss: 1000,
            initial_window: 1,
            max_window: 64,
        },
        ..Preset::Modem.params()
    }
}

fn config(net: Option<Params>, cookies: CookiePolicy) -> Config {
    Config {
        cache_size: Some(64 << 20),
        policy: EvictionKind::Lru,
        max_object: 8 << 20,
        cookies,
        heuristic: Policy::default(),
        net,
        disk: None,
    }
}

/// (time, client, url, bytes received, object size)
type Rec = (f64, &'static str, &'static str, u64, u64);

fn run(assume: Assumptions, cfg: Config, recs: &[Rec]) -> ConfigReport {
    let mut r = Replay::new(assume, vec![cfg]).unwrap();
    for &(time, client, url, bytes, size) in recs {
        r.feed(&Record {
            time,
            client,
            method: "GET",
            url,
            status: 200,
            result: "",
            bytes,
            object_size: Some(size),
            content_type: "",
            id: None,
        })
        .unwrap();
    }
    r.results().remove(0)
}

fn net(p: Params, recs: &[Rec]) -> (ConfigReport, NetReport) {
    let c = run(
        Assumptions::default(),
        config(Some(p), CookiePolicy::default()),
        recs,
    );
    let n = c.network.clone().expect("network model on");
    (c, n)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// A miss on new connections: client and origin set-up (0.1 + 0.2), request-response over
/// both (0.1 + 0.2), one 1000-byte segment at 10 kB/s (0.1) = 0.7 s; without the proxy the
/// same sums over the direct path. The hit 10 s later reuses the client connection: one
/// client round trip and the segment, 0.2 s; without a proxy (no persistent connections)
/// it costs 0.7 s again.
#[test]
fn round_trips_connection_setup_and_bandwidth() {
    let p = params(10_000.0, 0.1, 1e6, 0.2);
    let (c, n) = net(
        p,
        &[
            (0.0, "c", "http://o/a", 500, 500),
            (10.0, "c", "http://o/a", 500, 500),
        ],
    );
    assert_eq!(c.hits, 1);
    let w = n.with_proxy;
    assert!(close(w.mean, (0.7 + 0.2) / 2.0), "{w:?}");
    assert!(close(w.mean_connect, 0.3 / 2.0), "{w:?}");
    assert!(close(w.mean_request_response, (0.3 + 0.1) / 2.0), "{w:?}");
    assert!(close(w.mean_transfer, 0.1), "{w:?}");
    let d = n.without_proxy;
    assert!(close(d.mean, 0.7), "{d:?}");
    assert!(
        close(d.mean_connect, 0.3) && close(d.mean_request_response, 0.3),
        "{d:?}"
    );
    assert!(close(d.mean_transfer, 0.1), "{d:?}");
}

/// Slow start on a 1 MB/s client link with a 1 s round trip: 7 segments go as 1, 2 and 4,
/// two round trips and 4 ms. The second transfer on the same (persistent) connection starts
/// with the window of 4 it grew to: 4 segments, a round trip, 3 more: 1.003 s. With no
/// persistent connections it pays the set-up and the slow start again.
#[test]
fn slow_start_and_a_persistent_connection_s_window() {
    let recs = [
        (0.0, "c", "http://o/a", 7_000, 7_000),
        (100.0, "c", "http://o/b", 7_000, 7_000),
    ];
    let p = params(1e6, 1.0, 1e9, 0.0);
    let (_, n) = net(p.clone(), &recs);
    let first = 1.0 + 1.0 + 2.004;
    let second = 1.0 + 1.003;
    assert!(
        close(n.with_proxy.mean, (first + second) / 2.0),
        "{:?}",
        n.with_proxy
    );
    let (_, n) = net(
        Params {
            persistent_clients: false,
            ..p
        },
        &recs,
    );
    assert!(close(n.with_proxy.mean, first), "{:?}", n.with_proxy);
}

/// PROXIM's idle timeouts: a client connection idle up to 180 s is reused, one idle longer
/// is gone; server connections idle out after 30 s. Two clients at once need two
/// connections each side (a busy connection is not shared).
#[test]
fn idle_timeouts_peaks_and_new_connection_shares() {
    let p = params(1e6, 0.01, 1e6, 0.01);
    let (_, n) = net(
        p.clone(),
        &[
            (0.0, "c", "http://o/1", 100, 100),
            (100.0, "c", "http://o/2", 100, 100),
            (400.0, "c", "http://o/3", 100, 100),
            (420.0, "c", "http://o/4", 100, 100),
        ],
    );
    // Client: new at 0, reused at 100, new at 400 (idle 300 s), reused at 420.
    assert!(close(n.new_client_connection_share, 0.5), "{n:?}");
    // Server: new at 0, 100 and 400 (idle > 30 s each time), reused at 420.
    assert!(close(n.new_server_connection_share, 0.75), "{n:?}");
    assert_eq!(
        (n.peak_client_connections, n.peak_server_connections),
        (1, 1)
    );
    let (_, n) = net(
        p,
        &[
            (0.0, "a", "http://o/1", 100_000, 100_000),
            (0.0, "b", "http://o/2", 100_000, 100_000),
        ],
    );
    assert_eq!(
        (n.peak_client_connections, n.peak_server_connections),
        (2, 2)
    );
}

/// A client takes 10 kB of a 100 kB object over a 10 kB/s link (1 s), while the proxy's
/// 1 MB/s origin link has delivered all of it by then. Finishing reads 100 kB; stopping at
/// once without flow control has read 100 kB too (the paper's point: the mismatch makes the
/// proxy waste what it read ahead); with 64 KiB read-ahead it read 10,000 + 65,536 bytes.
/// trove's policy finishes a response it is storing and, for one it is not, stops with
/// 64 KiB read ahead. Without the proxy the origin sent what the client took.
#[test]
fn aborts_under_each_policy() {
    let p = params(10_000.0, 0.0, 1e6, 0.0);
    let cachable = [
        (0.0, "c", "http://o/big", 10_000, 100_000),
        (5.0, "c", "http://o/big", 100_000, 100_000),
    ];
    let dynamic = [(0.0, "c", "http://o/big?x", 10_000, 100_000)];
    let first_origin_bytes = |abort: AbortModel, recs: &[Rec]| {
        let (c, n) = net(Params { abort, ..p.clone() }, &recs[..1]);
        assert_eq!(n.aborted, 1);
        assert_eq!(n.bytes_from_origins_without_proxy, 10_000);
        let _ = c;
        n.bytes_from_origins
    };
    assert_eq!(first_origin_bytes(AbortModel::finish(), &cachable), 100_000);
    assert_eq!(first_origin_bytes(AbortModel::stop(), &cachable), 100_000);
    assert_eq!(
        first_origin_bytes(AbortModel::stop_64k(), &cachable),
        75_536
    );
    assert_eq!(first_origin_bytes(AbortModel::trove(), &cachable), 100_000);
    assert_eq!(first_origin_bytes(AbortModel::trove(), &dynamic), 75_536);
    // A finished fetch is stored and the next request hits; a stopped one left nothing.
    let hits = |abort: AbortModel| net(Params { abort, ..p.clone() }, &cachable).0.hits;
    assert_eq!(hits(AbortModel::finish()), 1);
    assert_eq!(hits(AbortModel::trove()), 1);
    assert_eq!(hits(AbortModel::stop_64k()), 0);
    // Stopping after the proxy already had all of it leaves a whole object: kept.
    assert_eq!(hits(AbortModel::stop()), 1);
    // Savings are negative when the proxy reads more than the clients took.
    let (_, n) = net(
        Params {
            abort: AbortModel::finish(),
            ..p
        },
        &cachable[..1],
    );
    assert!(close(n.origin_savings, 1.0 - 100_000.0 / 10_000.0), "{n:?}");
}

/// Every (client, URL) pair carries a cookie: RFC 9111 (trove's default) ignores it and the
/// revisit hits; the bypass policy sends both past the cache; bypass-except-images spares the
/// image.
#[test]
fn cookie_policies() {
    let assume = Assumptions {
        cookie_fraction: 1.0,
        freshness: Duration::from_secs(3600),
        ..Assumptions::default()
    };
    let recs: [Rec; 4] = [
        (0.0, "c", "http://o/page.html", 100, 100),
        (1.0, "c", "http://o/page.html", 100, 100),
        (2.0, "c", "http://o/logo.gif", 100, 100),
        (3.0, "c", "http://o/logo.gif", 100, 100),
    ];
    let hits = |cookies| run(assume.clone(), config(None, cookies), &recs).hits;
    assert_eq!(hits(CookiePolicy::default()), 2);
    let bypass = CookiePolicy {
        request_cookie: RequestCookiePolicy::Bypass,
        ..CookiePolicy::default()
    };
    assert_eq!(hits(bypass.clone()), 0);
    assert_eq!(
        hits(CookiePolicy {
            ignore_for: vec!["image/".into()],
            ..bypass
        }),
        1
    );
}

/// PROXIM's configurable proxy overheads and a per-connection set-up cost. One miss and one
/// hit as in `round_trips_connection_setup_and_bandwidth` (0.7 s and 0.2 s without them), no
/// persistent connections anywhere: a 50 ms set-up cost is paid on the client and on the
/// server connection with the proxy (twice) and once without it; the 30 ms miss overhead
/// on the miss, the 10 ms hit overhead on the hit.
#[test]
fn proxy_overheads_and_connection_setup_cost() {
    let p = Params {
        persistent_clients: false,
        persistent_servers: false,
        connect_overhead: 0.05,
        hit_overhead: 0.01,
        miss_overhead: 0.03,
        ..params(10_000.0, 0.1, 1e6, 0.2)
    };
    let (c, n) = net(
        p,
        &[
            (0.0, "c", "http://o/a", 500, 500),
            (10.0, "c", "http://o/a", 500, 500),
        ],
    );
    assert_eq!(c.hits, 1);
    let miss = 0.7 + 2.0 * 0.05 + 0.03;
    let hit = 0.1 + 0.05 + 0.2 + 0.01;
    let w = n.with_proxy;
    assert!(close(w.mean, (miss + hit) / 2.0), "{w:?}");
    assert!(
        close(w.mean_connect, (0.3 + 0.1 + 0.1 + 0.05) / 2.0),
        "{w:?}"
    );
    let d = n.without_proxy;
    assert!(close(d.mean, 0.7 + 0.05), "{d:?}");
    assert!(close(d.mean_connect, 0.35), "{d:?}");
}

/// Each server has its own round trip, log-normal around the median, fixed by its id: the
/// same on both paths and in every run, so a proxy that caches nothing and keeps no
/// connections costs exactly what no proxy does; the spread's median is the given one and
/// its mean e^(σ²/2) times that.
#[test]
fn origin_round_trips_spread_per_server() {
    let p = Params {
        origin_rtt_sigma: 1.0,
        persistent_clients: false,
        persistent_servers: false,
        ..params(1e6, 0.0, 1e9, 0.1)
    };
    let mut rtts: Vec<f64> = (0..20_000).map(|s| p.origin_rtt_of(s)).collect();
    assert_eq!(p.origin_rtt_of(7), p.origin_rtt_of(7));
    assert!(rtts.iter().all(|r| *r > 0.0));
    let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
    rtts.sort_by(f64::total_cmp);
    let median = rtts[rtts.len() / 2];
    assert!((median / 0.1 - 1.0).abs() < 0.05, "{median}");
    assert!((mean / (0.1 * 0.5f64.exp()) - 1.0).abs() < 0.05, "{mean}");
    assert_eq!(
        Params {
            origin_rtt_sigma: 0.0,
            ..p.clone()
        }
        .origin_rtt_of(7),
        0.1
    );
    // Two servers, uncachable URLs: with and without the proxy alike, and the two differ.
    let recs = [
        (0.0, "c", "http://a/x?1", 500, 500),
        (1.0, "c", "http://b/x?1", 500, 500),
    ];
    let (_, n) = net(p.clone(), &recs);
    assert!(
        close(n.with_proxy.mean, n.without_proxy.mean),
        "{:?} {:?}",
        n.with_proxy,
        n.without_proxy
    );
    // Servers are numbered in order of appearance: one server twice is not two servers.
    let same = [
        (0.0, "c", "http://a/x?1", 500, 500),
        (1.0, "c", "http://a/y?1", 500, 500),
    ];
    assert!(!close(n.with_proxy.mean, net(p, &same).1.with_proxy.mean));
}

/// The no-proxy baseline's persistent connections idle out after `direct_idle`, apart from
/// the proxy's server-side timeout: requests to one server at 0, 10 and 40 s reuse the
/// connection at 10 s only with a 20 s timeout, at 10 and 40 s with a 60 s one.
#[test]
fn the_baseline_s_persistent_connections_have_their_own_idle_timeout() {
    let recs = [
        (0.0, "c", "http://o/1", 100, 100),
        (10.0, "c", "http://o/2", 100, 100),
        (40.0, "c", "http://o/3", 100, 100),
    ];
    let share = |direct_idle: f64| {
        let p = Params {
            direct_persistent: true,
            direct_idle,
            server_idle: 1.0,
            ..params(1e6, 0.01, 1e6, 0.01)
        };
        let (_, n) = net(p, &recs);
        (n.new_direct_connection_share, n.new_server_connection_share)
    };
    let (d, s) = share(20.0);
    assert!(close(d, 2.0 / 3.0) && close(s, 1.0), "{d} {s}");
    let (d, _) = share(60.0);
    assert!(close(d, 1.0 / 3.0), "{d}");
    // Off: every request opens one.
    let (_, n) = net(params(1e6, 0.01, 1e6, 0.01), &recs);
    assert!(close(n.new_direct_connection_share, 1.0));
}
