//! A log with junk in it replays what it can, and every report says what was skipped, and
//! whose log it took it for. (Squid's: its hierarchy field names servers by IP address.)

use clap::Parser;
use trove_sim::cli::ReplayArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

const LOG: &str = "\
1700000000.000 10 10.0.0.1 TCP_MISS/200 5000 GET http://a.example/x.gif - HIER_DIRECT/93.184.216.34 image/gif
1700000001.000 10 10.0.0.1 TCP_MISS/200 5000 GET http://a.example/x.gif - HIER_DIRECT/93.184.216.34 image/gif
this line is junk
1700000002.000 10 10.0.0.2 TCP_TUNNEL/200 900 CONNECT a.example:443 - HIER_DIRECT/93.184.216.34 -
\u{ff}\u{fe} binary
1700000003.000 10 10.0.0.2 TCP_MISS/200 700 GET http://a.example/q?x=1 - HIER_DIRECT/93.184.216.34 text/html
1700000004.000 10 10.0.0.2 TCP_MISS/200 700 GET http://a.example/q?x=1 - HIER_DIRECT/93.184.216.34 text/html
1700000005.000 10 10.0.0.1 TCP_MISS/200 5000 GET http://a.example/x.gif - HIER_DIRECT/93.184.216.34 image/gif
";

#[test]
fn bad_lines_are_counted_and_every_report_says_so() {
    let dir = std::env::temp_dir().join(format!("trove-sim-reports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    std::fs::write(&path, LOG).unwrap();
    let cli = Cli::parse_from([
        "sim",
        path.to_str().unwrap(),
        "--sizes",
        "1MiB,unbounded",
        "--network",
        "modem",
        "--quiet",
    ]);
    let r = trove_sim::cli::replay(&cli.replay).unwrap();
    assert_eq!(r.trace.format, "squid");
    assert_eq!(r.trace.skipped.bad_lines, 2);
    assert_eq!(r.trace.skipped.examples[0].0, 3, "line numbers are kept");
    assert_eq!(r.trace.unreplayable, 1, "the CONNECT");
    assert_eq!(r.trace.replayed, 5);
    assert_eq!(r.results.len(), 4);
    for c in &r.results {
        // x.gif: a miss then two hits; the dynamic URL is never cached.
        assert_eq!((c.requests, c.hits), (5, 2), "{c:?}");
        assert!(c.network.is_some());
    }
    let text = trove_sim::report::text::render(&r);
    assert!(text.contains("2 bad lines") && text.contains("bad line 3: this line is junk"));
    assert!(text.contains("latency, seconds"));
    assert!(
        text.contains("log: another cache's or server's, replayed by seed 003's rules"),
        "{text}"
    );
    assert!(text.contains("'?'/cgi-bin URLs uncachable"), "{text}");
    assert!(
        text.contains("a log cannot tell: response headers"),
        "{text}"
    );
    assert!(text.contains(" 2 clients,"), "{text}");
    let json: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["trace"]["skipped"]["bad_lines"], 2);
    let html = trove_sim::report::html::render(&r);
    assert!(
        html.matches("<svg").count() >= 4,
        "hit, byte hit, latency, distribution"
    );
    assert!(
        !html.contains("<script") && !html.contains("src="),
        "self-contained"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
