//! Several proxies in one run (`--proxy a,b`): robots are dealt out to them round-robin.
//! A test binary of its own, so it does not load the machine while `loopback.rs`'s
//! high-rate runs are timed.

mod support;

use std::sync::atomic::Ordering::Relaxed;

use support::run;

#[test]
fn robots_are_spread_over_several_proxies() {
    let b = support::Behaviour {
        cache: true,
        corrupt_nth: None,
    };
    let (p1, served1) = support::start_counted(b);
    let (p2, served2) = support::start_counted(b);
    // Both ways of naming several: comma-separated and repeated.
    for proxies in [
        format!("--proxy {p1},{p2}"),
        format!("--proxy {p1} --proxy {p2}"),
    ] {
        let before = (served1.load(Relaxed), served2.load(Relaxed));
        let r = run(&format!(
            "run --workload polymix-2 --scale 0.0005 --rate 500 --think 0 --robots 10 \
             --max-requests 1000 --quiet {proxies}"
        ));
        let t = &r.total;
        assert_eq!(t.errors, 0, "{:?}", t.errors_by_kind);
        assert!(t.hits > 0, "each proxy caches what its robots revisit");
        let got = (
            served1.load(Relaxed) - before.0,
            served2.load(Relaxed) - before.1,
        );
        // Every response came through one of the two, and each had its half of the robots.
        assert_eq!(got.0 + got.1, t.requests, "{got:?}");
        assert!(got.0 > t.requests / 4 && got.1 > t.requests / 4, "{got:?}");
        // The report names both.
        for p in [p1, p2] {
            assert!(r.mode.contains(&p.to_string()), "{}", r.mode);
            assert!(r.label.contains(&p.to_string()), "{}", r.label);
        }
    }
}
