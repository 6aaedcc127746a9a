//! The replayable trace's reader (issue 21): what `trove serve` writes reads back whole;
//! records are replayed in the order the cache looked them up, not the order they were
//! written; and every bad line — not JSON, another version, a time or size no trace can
//! give, a method or field HTTP refuses, binary junk, a torn or an endless line — is
//! counted and skipped, never fatal.

mod common;

use std::time::{Duration, UNIX_EPOCH};

use clap::Parser;
use common::Dir;
use http::{HeaderMap, HeaderValue};
use trove_cache::Outcome;
use trove_proxy::trace::{self, Capture, Exchange, OriginRecord};
use trove_sim::cli::ReplayArgs;
use trove_sim::trace::replayable::{self, Event};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

const T0: u64 = 1_700_000_000_000_000;

/// A request record as `trove serve` writes it: looked up at `T0 + at` µs, completed at
/// `T0 + done` µs; a miss when `answer` (a cachable 200 of 1000 bytes), else a hit.
fn record(url: &str, at: u64, done: u64, answer: bool, result: Outcome) -> String {
    let t = |us: u64| UNIX_EPOCH + Duration::from_micros(T0 + us);
    let mut headers = HeaderMap::new();
    headers.insert("accept-encoding", HeaderValue::from_static("gzip"));
    headers.insert("cookie", HeaderValue::from_static("a=b"));
    let origin = if answer {
        vec![OriginRecord {
            status: 200,
            sent_us: T0 + at + 10,
            received_us: T0 + at + 20,
            fields: vec![
                ("cache-control".into(), "max-age=600".into()),
                ("date".into(), trove_http::field::format_http_date(t(at))),
            ],
            length: Some(1000),
            failed: None,
            truncated: false,
            rules_seq: None,
        }]
    } else {
        Vec::new()
    };
    let capture = Capture {
        looked_up: Some(t(at)),
        origin,
        ..Capture::default()
    };
    let x = Exchange {
        start: t(at.saturating_sub(5)),
        done: t(done),
        client: "127.0.0.1".parse().unwrap(),
        method: "GET",
        url,
        headers: &headers,
        status: 200,
        outcome: result,
        aborted: false,
        bytes: 1200,
    };
    trace::to_line(&trace::request_record(&x, capture))
}

fn replay(path: &std::path::Path) -> (trove_sim::exact::ExactReport, Vec<String>) {
    let outcomes = path.with_extension("outcomes");
    let argv = [
        "sim",
        path.to_str().unwrap(),
        "--sizes",
        "1MiB",
        "--policies",
        "lru",
        "--outcomes",
        outcomes.to_str().unwrap(),
        "--quiet",
    ];
    let cli = Cli::parse_from(argv);
    assert!(trove_sim::cli::is_replayable(&cli.replay).unwrap());
    let report = trove_sim::cli::replay_exact(&cli.replay).expect("the replay runs");
    let codes = std::fs::read_to_string(&outcomes)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (report, codes)
}

#[test]
fn what_trove_serve_writes_reads_back_whole() {
    let line = record("http://a.example/x", 100, 900, true, Outcome::Miss);
    let Some(Event::Request(r)) = replayable::parse(line.as_bytes()) else {
        panic!("{line}");
    };
    assert_eq!(r.at, UNIX_EPOCH + Duration::from_micros(T0 + 100));
    assert_eq!(r.done, UNIX_EPOCH + Duration::from_micros(T0 + 900));
    assert_eq!(r.method, http::Method::GET);
    assert_eq!(r.url, "http://a.example/x");
    assert_eq!(r.headers["accept-encoding"], "gzip");
    // Masked, as long as it was.
    assert_eq!(r.headers["cookie"].len(), 3);
    assert_ne!(r.headers["cookie"], "a=b");
    assert_eq!(r.code(), "TCP_MISS/200");
    assert_eq!(r.answers.len(), 1);
    assert_eq!(r.answers[0].status, Ok(http::StatusCode::OK));
    assert_eq!(r.answers[0].length, Some(1000));
    assert_eq!(r.answers[0].headers["cache-control"], "max-age=600");
}

/// Written when each exchange completed, replayed when each was looked up: the long
/// miss of `/a` completes after the hit that came behind it, and the hit must still find
/// what the miss stored.
#[test]
fn records_are_replayed_in_the_order_the_cache_looked_them_up() {
    let dir = Dir::new("trace-order");
    let hit = record("http://a.example/a", 2_000, 3_000, false, Outcome::MemHit);
    let miss = record("http://a.example/a", 1_000, 500_000, true, Outcome::Miss);
    let path = dir.file("t.jsonl", format!("{hit}\n{miss}\n").as_bytes());
    let (report, codes) = replay(&path);
    assert_eq!(codes, ["TCP_MISS/200", "TCP_MEM_HIT/200"]);
    assert_eq!(report.results[0].differing, 0);
}

/// With a disk tier, a body's end that gave trove's disk writer jobs is replayed before
/// the first request looked up after its first job was queued, and after every request
/// looked up before, whatever its time says (a time is read a moment before or after the
/// queueing it stands for); one that queued nothing keeps its time.
#[test]
fn bodies_ends_are_placed_by_the_disk_jobs_they_queued_not_by_their_times() {
    let request = |name: &str, at: u64, queued: u64| {
        format!(
            "{{\"v\":1,\"kind\":\"request\",\"at_us\":{},\"done_us\":{},\"method\":\"GET\",\
             \"url\":\"http://a.example/{name}\",\"status\":200,\"result\":\"TCP_MEM_HIT\",\
             \"lower_jobs\":{queued},\"lower_queued\":{queued}}}",
            T0 + at,
            T0 + at + 10
        )
    };
    let filled = |name: &str, at: u64, before: u64, after: u64| {
        format!(
            "{{\"v\":1,\"kind\":\"filled\",\"at_us\":{},\"url\":\"http://a.example/{name}\",\
             \"ok\":true,\"lower_queued\":{before},\"lower_queued_after\":{after}}}",
            T0 + at
        )
    };
    let lines = [
        request("a", 0, 5),
        // Timed after `b`, but its job was queued before `b` was looked up (`b` saw 6).
        filled("f1", 300, 5, 6),
        request("b", 200, 6),
        // Timed before `b`, but its job was queued after `b` was looked up.
        filled("f2", 150, 6, 7),
        // Queued nothing: its time places it (before `b`), and it moves no held one.
        filled("f3", 160, 7, 7),
        request("c", 500, 7),
    ];
    let text = lines.join("\n") + "\n";
    let mut reader = replayable::ReplayableReader::new(text.as_bytes());
    let name = |e: &Event| match e {
        Event::Request(r) => r.url.clone(),
        Event::Filled { url, .. } => format!("filled {url}"),
        other => format!("{other:?}"),
    };
    // As the replay takes them (`trove_sim::exact::run`).
    let mut order = Vec::new();
    while let Some(e) = reader.next_event() {
        if let Event::Request(r) = &e {
            if let Some(q) = r.lower_queued {
                order.extend(reader.take_queued_before(q).iter().map(name));
            }
        }
        order.push(name(&e));
    }
    assert_eq!(reader.skipped().bad_lines, 0);
    assert_eq!(
        order,
        [
            "http://a.example/a",
            "filled http://a.example/f3",
            "filled http://a.example/f1",
            "http://a.example/b",
            "filled http://a.example/f2",
            "http://a.example/c",
        ]
    );
}

#[test]
fn bad_lines_are_counted_and_skipped() {
    let dir = Dir::new("trace-bad");
    let good1 = record("http://a.example/a", 1_000, 2_000, true, Outcome::Miss);
    let good2 = record("http://a.example/a", 3_000, 4_000, false, Outcome::MemHit);
    let bad: Vec<String> = vec![
        "not json at all".into(),
        good1.replacen("\"v\":1", "\"v\":2", 1),
        good1.replacen("\"method\":\"GET\"", "\"method\":\"G E T\"", 1),
        good1.replacen(&format!("\"at_us\":{}", T0 + 1_000), "\"at_us\":1000000000000000000", 1),
        good1.replacen("\"accept-encoding\"", "\"accept encoding\"", 1),
        good1.replacen("\"length\":1000", "\"length\":10000000000000000", 1),
        good1.replacen("\"status\":200", "\"status\":70000", 1),
        good1.replacen("\"kind\":\"request\"", "\"kind\":\"mystery\"", 1),
        good1[..good1.len() / 2].to_string(),
        "{\"v\":1,\"kind\":\"invalidation\",\"at_us\":1,\"selects\":\"everything\",\"value\":\"x\"}"
            .into(),
        "{\"v\":1,\"kind\":\"request\",\"at_us\":5,\"url\":\"\",\"method\":\"GET\",\"result\":\"TCP_MISS\"}".into(),
        format!("{{\"v\":1,\"pad\":\"{}\"}}", "x".repeat(300 << 10)),
    ];
    let mut text = format!("{good1}\n");
    for b in &bad {
        text.push_str(b);
        text.push('\n');
    }
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(b"\xff\xfe\x00\x01 binary\n");
    bytes.extend_from_slice(format!("# a comment\n\n{good2}\n").as_bytes());
    let path = dir.file("t.jsonl", &bytes);
    let (report, codes) = replay(&path);
    assert_eq!(
        report.skipped.bad_lines,
        bad.len() as u64 + 1,
        "{:?}",
        report.skipped
    );
    assert_eq!(report.requests, 2);
    assert_eq!(codes, ["TCP_MISS/200", "TCP_MEM_HIT/200"]);
    assert!(report.skipped.examples.iter().all(|(_, s)| s.len() <= 203));
}

/// A standalone invalidation record is applied at its time: the request after it misses.
#[test]
fn an_invalidation_is_applied_where_it_happened() {
    let dir = Dir::new("trace-invalidation");
    let miss = record("http://a.example/a", 1_000, 2_000, true, Outcome::Miss);
    let again = record("http://a.example/a", 5_000, 6_000, true, Outcome::Miss);
    let inv = format!(
        "{{\"v\":1,\"kind\":\"invalidation\",\"at_us\":{},\"selects\":\"url\",\"value\":\"http://a.example/a\",\"soft\":false,\"seq\":7}}",
        T0 + 3_000
    );
    let path = dir.file("t.jsonl", format!("{miss}\n{inv}\n{again}\n").as_bytes());
    let (report, codes) = replay(&path);
    assert_eq!(codes, ["TCP_MISS/200", "TCP_MISS/200"]);
    assert_eq!((report.invalidations, report.results[0].differing), (1, 0));
    // Without it, the second is a hit: the trace says otherwise.
    let path = dir.file("u.jsonl", format!("{miss}\n{again}\n").as_bytes());
    let (report, codes) = replay(&path);
    assert_eq!(codes, ["TCP_MISS/200", "TCP_MEM_HIT/200"]);
    assert_eq!(report.results[0].differing, 1);
}

/// An invalidation made after an answer's head arrived but before trove judged the answer
/// (its `rules_seq`) raced the request: the reader hands it over with those that landed
/// before the head, and keeps a later one for its own time.
#[test]
fn a_rule_the_answer_was_judged_after_races_the_request() {
    let answer = format!(
        "{{\"v\":1,\"kind\":\"request\",\"at_us\":{},\"done_us\":{},\"method\":\"GET\",\
         \"url\":\"http://a.example/a\",\"status\":200,\"result\":\"TCP_MISS\",\
         \"origin\":[{{\"status\":200,\"sent_us\":{},\"received_us\":{},\"fields\":[],\
         \"length\":10,\"rules_seq\":7}}]}}",
        T0 + 1_000,
        T0 + 2_000,
        T0 + 1_010,
        T0 + 1_020
    );
    let inv = |at: u64, seq: u64| {
        format!(
            "{{\"v\":1,\"kind\":\"invalidation\",\"at_us\":{},\"selects\":\"prefix\",\
             \"value\":\"http://a.example/\",\"soft\":false,\"seq\":{seq}}}",
            T0 + at
        )
    };
    let text = format!("{answer}\n{}\n{}\n", inv(1_500, 7), inv(1_600, 8));
    let mut reader = replayable::ReplayableReader::new(text.as_bytes());
    let Some(Event::Request(r)) = reader.next_event() else {
        panic!("the request first");
    };
    assert_eq!(r.answers[0].rules_seq, Some(7));
    let until = r.answers[0].received;
    let racing = reader.take_racing(until, r.answers[0].rules_seq);
    let seqs: Vec<u64> = racing.iter().map(|(_, i)| i.seq).collect();
    assert_eq!(seqs, [7], "made after the head, seen by the judgment");
    assert!(matches!(reader.next_event(), Some(Event::Invalidation(_, i)) if i.seq == 8));
}

/// Each clock trove read after opening or promoting the disk's copy reads back, in order
/// (the copy's freshness is judged at the last, not the first), with where its disk
/// writer was at each read.
#[test]
fn the_clocks_and_writer_places_of_each_disk_read_read_back() {
    let line = format!(
        "{{\"v\":1,\"kind\":\"request\",\"at_us\":{},\"done_us\":{},\"method\":\"GET\",\
         \"url\":\"http://a.example/a\",\"status\":200,\"result\":\"TCP_HIT\",\
         \"lower_jobs\":4,\"lower_reclaims\":1,\"lower_at_us\":{},\
         \"lower_ats_us\":[{},{}],\"lower_reads\":[[4,1],[6,2]]}}",
        T0 + 1_000,
        T0 + 2_000,
        T0 + 1_100,
        T0 + 1_100,
        T0 + 1_900
    );
    let Some(Event::Request(r)) = replayable::parse(line.as_bytes()) else {
        panic!("{line}");
    };
    let t = |us: u64| UNIX_EPOCH + Duration::from_micros(T0 + us);
    assert_eq!(r.lower_at, Some(t(1_100)));
    assert_eq!(r.lower_ats, [t(1_100), t(1_900)]);
    assert_eq!(r.lower_reads, [(4, 1), (6, 2)]);
}
