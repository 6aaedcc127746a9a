//! `trove bench rate` over real loopback sockets: it serves what it is offered, and it says
//! when it could not offer the load, and whose limit that was (its own, or the target's).
//! No timing is asserted: only what the generator's report concludes.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use trove_bench::rate::{measure, RateArgs};

/// A canned HTTP/1.1 server on loopback: a thread per connection answers every request head
/// with 1 KiB after `delay`.
fn server(delay: Duration) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let mut resp = b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n".to_vec();
    resp.extend_from_slice(&[b'x'; 1024]);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let resp = resp.clone();
            std::thread::spawn(move || answer(s, &resp, delay));
        }
    });
    addr
}

fn answer(mut s: TcpStream, resp: &[u8], delay: Duration) {
    let _ = s.set_nodelay(true);
    let mut buf = [0u8; 4096];
    let mut pending = Vec::new();
    loop {
        let Ok(n) = s.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..i + 4);
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            if s.write_all(resp).is_err() {
                return;
            }
        }
    }
}

fn args(target: SocketAddr, rate: f64, duration: f64, connections: usize) -> RateArgs {
    RateArgs {
        target,
        path: "/hit".into(),
        host: "localhost".into(),
        rate,
        duration,
        connections,
        close: false,
        timeout: 0.5,
        label: String::new(),
        json: None,
        late_ms: 100.0,
    }
}

#[test]
fn a_modest_rate_is_served_and_the_generator_keeps_its_schedule() {
    let target = server(Duration::ZERO);
    let r = measure(&args(target, 100.0, 1.0, 8)).unwrap();
    assert_eq!(r.sent, 100);
    assert_eq!(r.ok, 100, "{r:?}");
    let g = &r.generator;
    assert_eq!((g.issued, g.expired), (100, 0), "{g:?}");
    assert!(!g.fell_behind, "{g:?}");
    assert_eq!(g.limit, "none");
    assert!(g.verdict.contains("kept its schedule"), "{}", g.verdict);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["generator"]["fell_behind"], false);
}

#[test]
fn a_rate_beyond_the_generator_says_the_generator_fell_behind() {
    // Two million a second is beyond any build of the generator on one thread (a debug
    // build manages a few tens of thousands), and the canned server answers faster than
    // the generator asks: the generator is the limit, and must say so.
    let target = server(Duration::ZERO);
    let r = measure(&args(target, 2_000_000.0, 1.0, 16)).unwrap();
    let g = &r.generator;
    assert!(g.fell_behind, "{g:?}");
    assert!(g.issued < r.sent && g.expired > 0, "{g:?}");
    assert_eq!(g.issued + g.expired, r.sent, "{g:?}");
    assert_eq!(g.limit, "generator", "{g:?}");
    assert!(
        g.verdict.starts_with("GENERATOR FELL BEHIND"),
        "{}",
        g.verdict
    );
    // What it did send was answered (but the few sent so late that their time ran out on
    // the way): the collapse is not reported as the target's errors.
    assert_eq!(r.errors_closed + r.errors_connect, 0, "{r:?}");
    assert!(r.ok > g.issued / 2, "{r:?}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["generator"]["limit"], "generator");
}

#[test]
fn a_slow_target_is_not_reported_as_the_generator_falling_behind() {
    // 100 ms per answer on 2 connections serves 20/s; 100/s are offered. Requests wait for a
    // connection (late, and some expire), but the generator itself is idle: the target's limit.
    let target = server(Duration::from_millis(100));
    let r = measure(&args(target, 100.0, 1.0, 2)).unwrap();
    let g = &r.generator;
    assert!(g.fell_behind, "{g:?}");
    assert_eq!(g.limit, "target", "{g:?}");
    assert!(g.late_with_free_connection * 2 <= g.late, "{g:?}");
    assert!(!g.verdict.contains("GENERATOR"), "{}", g.verdict);
}
