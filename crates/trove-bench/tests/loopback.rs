//! The instrument tested against itself over loopback: no proxy, a toy caching proxy, and a toy
//! proxy that corrupts one body byte.

mod support;

use support::run;
use trove_bench::report::Report;

#[test]
fn no_proxy_run_offers_the_configured_hit_ratio_and_sees_no_hits() {
    let r = run(
        "run --workload datacomm-1 --scale 0.002 --rate 6000 --think 0 --robots 40 \
                 --max-requests 30000 --world 5eed --quiet",
    );
    let t = &r.total;
    assert_eq!(t.errors, 0, "{:?}", t.errors_by_kind);
    assert!(t.requests >= 29_000, "only {} requests", t.requests);
    assert_eq!(
        t.hits, 0,
        "straight to the servers, every response is a miss"
    );
    let offered = t.offered_dhr.unwrap();
    assert!(
        (offered - r.configured_offered_dhr).abs() < 0.01,
        "offered {offered} configured {}",
        r.configured_offered_dhr
    );
    let server = r.server.as_ref().expect("in-process servers are counted");
    assert_eq!(server.replies, t.misses);
}

#[test]
fn a_caching_proxy_gets_close_to_the_offered_hit_ratio() {
    let proxy = support::start(support::Behaviour {
        cache: true,
        corrupt_nth: None,
    });
    let r = run(&format!(
        "run --workload polymix-2 --scale 0.0005 --rate 3000 --think 0 --robots 30 \
         --max-requests 8000 --quiet --proxy {proxy}"
    ));
    let t = &r.total;
    assert_eq!(t.errors, 0, "{:?}", t.errors_by_kind);
    assert_eq!(t.uncachable_hits, 0);
    let (dhr, offered) = (t.dhr.unwrap(), t.offered_dhr.unwrap());
    assert!(dhr > 0.4, "hits must be seen: {dhr}");
    assert!(
        (dhr - offered).abs() < 0.02,
        "measured {dhr} offered {offered}"
    );
    assert!(!r.failed);
    // The JSON report carries the same numbers back.
    let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back.total.hits, t.hits);
}

#[test]
fn a_proxy_that_corrupts_one_body_is_caught() {
    let proxy = support::start(support::Behaviour {
        cache: false,
        corrupt_nth: Some(40),
    });
    let r = run(&format!(
        "run --workload datacomm-1 --scale 0.001 --rate 500 --think 0 --robots 5 \
         --max-requests 200 --quiet --proxy {proxy}"
    ));
    let t = &r.total;
    assert_eq!(
        t.errors_by_kind.get("content"),
        Some(&1),
        "{:?}",
        t.errors_by_kind
    );
    assert_eq!(t.errors, 1);
    assert_eq!(t.hits, 0, "a proxy that does not cache has no hits");
    assert!(r.notes.iter().any(|n| n.contains("wrong bodies")));
}

#[test]
fn a_modest_rate_is_offered_on_schedule_and_the_report_says_so() {
    let r = run(
        "run --workload datacomm-1 --scale 0.002 --rate 200 --think 0 --robots 4 \
                 --max-requests 400 --late-ms 100 --world 5eed --quiet",
    );
    let g = &r.generator;
    assert_eq!(r.total.errors, 0, "{:?}", r.total.errors_by_kind);
    assert_eq!((g.issued, g.expired), (r.total.requests, 0), "{g:?}");
    assert!(!g.fell_behind, "{g:?}");
    assert_eq!(g.limit, "none");
    assert!(r
        .text()
        .contains("generator: the generator kept its schedule"));
}

#[test]
fn robots_offered_more_than_they_can_send_say_they_fell_behind() {
    // A million a second from one robot thread (a debug build sends a few tens of thousands):
    // requests queue in the robots and expire unsent, and the report says the schedule was not
    // kept, in the notes of the text and in the JSON, rather than only counting timeouts.
    let r = run(
        "run --workload datacomm-1 --scale 0.002 --rate 1000000 --think 0 --robots 20 \
                 --max-requests 20000 --timeout 1 --world 5eed --quiet",
    );
    let g = &r.generator;
    assert!(g.fell_behind, "{g:?}");
    assert!(g.expired > 0 && g.late > 0, "{g:?}");
    assert_eq!(g.issued + g.expired, r.total.requests, "{g:?}");
    assert!(r.notes.contains(&g.verdict), "{:?}", r.notes);
    assert!(r.text().contains(&g.verdict));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["generator"]["fell_behind"], true);
}
