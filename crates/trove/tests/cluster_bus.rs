//! Issue 24's invalidation bus, end to end: a `nats-server` with JetStream and three
//! `trove serve` child processes on loopback, `[cluster]` in replicate mode with
//! `[cluster.bus]`. A tag purge on one node is a miss on all three; a node killed while
//! purges happen serves none of the purged objects when it is back (it reads what it missed
//! before it serves a hit), and drops its cache when the stream no longer holds what it
//! missed; NATS killed and restarted under a stream of invalidations loses none that was
//! acknowledged and applies none twice; while NATS can't be reached invalidations are
//! refused with 503 `not-durable` and a node that never reached it serves misses only; a put
//! on one node is served by all three, in replicate and in shard mode.

mod common;
#[path = "../../trove-bus/tests/kit/mod.rs"]
mod nats;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    free_port, get_text as get, is_hit, metric, origin_with, request_text as request, target_of,
    wait_for, TempDir, Trove,
};
use nats::Nats;

const TOKEN: &str = "t0ken";

/// An origin answering every path with a body naming it and how many requests it had
/// answered (a refetch is told from a stored copy); `/t/red…` is tagged `red`, `/t/blue…`
/// `blue`.
fn origin() -> (String, Arc<AtomicUsize>) {
    let answered = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&answered);
    let (addr, _) = origin_with(move |head| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        let target = target_of(head);
        let path = target
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or(target);
        let body = format!("{path} answer #{n}");
        let tag = if path.starts_with("/t/red") {
            "surrogate-key: red\r\n"
        } else if path.starts_with("/t/blue") {
            "surrogate-key: blue\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 200 OK\r\ncache-control: max-age=3600\r\n{tag}content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    (addr, answered)
}

/// One admin API call: `(status, body)`.
fn api(admin: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    common::api(admin, Some(TOKEN), method, path, body)
}

/// Node `i`'s configuration: a forward proxy on `ports[i]`, replicate mode over the three,
/// the bus on `nats_url`; a disk tier in `disk` if given; `extra` appended to `[cluster.bus]`.
fn config(i: usize, ports: &[String], nats_url: &str, disk: Option<&Path>, extra: &str) -> String {
    let nodes: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(j, p)| format!("{{ id = \"n{j}\", addr = \"{p}\" }}"))
        .collect();
    let disk = disk
        .map(|d| {
            format!(
                "[cache.disk]\npath = \"{}\"\nsize = \"8MiB\"\nregion_size = \"256KiB\"\nsync_interval = \"50ms\"\n",
                d.display()
            )
        })
        .unwrap_or_default();
    format!(
        "[[listener]]\naddr = \"{}\"\nmode = \"forward\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n\
         [cache]\nmemory = \"4MiB\"\nmax_object = \"256KiB\"\n{disk}\
         [cluster]\nnode = \"n{i}\"\nmode = \"replicate\"\nprobe_interval = \"200ms\"\nnodes = [{}]\n\
         [cluster.bus]\nservers = [\"{nats_url}\"]\nsigning_key = \"a secret the nodes share\"\n\
         publish_timeout = \"1s\"\nconnect_timeout = \"500ms\"\nrequest_timeout = \"1s\"\n{extra}",
        ports[i],
        nodes.join(", ")
    )
}

struct Node {
    trove: Trove,
    proxy: String,
    admin: String,
}

fn start_node(dir: &Path, config: &str) -> Node {
    std::fs::create_dir_all(dir).unwrap();
    let trove = Trove::start(dir, config);
    let (proxy, admin) = (trove.proxy(), trove.admin());
    Node {
        trove,
        proxy,
        admin,
    }
}

/// Waits until `node` has read the bus up to date (it serves hits from then on).
fn current(node: &Node) {
    assert!(
        wait_for(Duration::from_secs(20), || metric(
            &node.admin,
            "trove_cluster_bus_current"
        ) == 1.0),
        "node {} read the bus up to date: {:?}",
        node.proxy,
        api(&node.admin, "GET", "/v1/cluster", "").1
    );
}

/// GETs `url` until it is a hit (the first is a miss, stored); returns the body.
fn cached(node: &Node, url: &str) -> String {
    let (head, first) = get(&node.proxy, url);
    assert!(head.starts_with("HTTP/1.1 200"), "{url}: {head}");
    let (head, body) = get(&node.proxy, url);
    assert!(is_hit(&head), "{url} is stored on {}: {head}", node.proxy);
    assert_eq!(body, first);
    body
}

fn three(dir: &Path, nats: &Nats, disks: [bool; 3], extra: &str) -> (Vec<String>, Vec<Node>) {
    let ports: Vec<String> = (0..3).map(|_| free_port()).collect();
    let nodes: Vec<Node> = (0..3)
        .map(|i| {
            let d = dir.join(format!("n{i}"));
            let disk = d.join("cache");
            let c = config(i, &ports, &nats.url(), disks[i].then_some(&*disk), extra);
            start_node(&d, &c)
        })
        .collect();
    for n in &nodes {
        current(n);
    }
    (ports, nodes)
}

/// The done-when's first point: a tag purge acknowledged by node 1's API (waiting for the
/// others) is a miss on all three at once, and only the tagged objects are; a `PURGE` sent
/// to another node's proxy port reaches the others too.
#[test]
fn a_tag_purge_on_one_node_is_a_miss_on_all_three() {
    let dir = TempDir::new("bus-tag");
    let nats = Nats::start();
    let (origin, count) = origin();
    let url = |p: &str| format!("http://{origin}{p}");
    let (_, nodes) = three(&dir, &nats, [false; 3], "");
    let paths = ["/t/red-1", "/t/red-2", "/t/blue-1", "/u/one"];
    let mut bodies = Vec::new();
    for n in &nodes {
        bodies.push(paths.map(|p| cached(n, &url(p))));
    }
    let fetched = count.load(Ordering::SeqCst);
    assert_eq!(fetched, 12, "each node fetched each object once");

    let (status, body) = api(
        &nodes[0].admin,
        "POST",
        "/v1/invalidate?wait_ms=5000",
        r#"{"tag": "red"}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"bus_seq\":"), "{body}");
    assert!(
        body.contains("\"not_applied_by\":[]"),
        "every node applied it: {body}"
    );
    for (i, n) in nodes.iter().enumerate() {
        for (j, p) in paths.iter().enumerate() {
            let (head, b) = get(&n.proxy, &url(p));
            if p.starts_with("/t/red") {
                assert!(!is_hit(&head), "{p} on n{i} after the tag purge: {head}");
                assert_ne!(b, bodies[i][j], "{p} on n{i}: the purged copy");
            } else {
                assert!(is_hit(&head), "{p} on n{i} is not tagged red: {head}");
            }
        }
    }
    assert_eq!(
        count.load(Ordering::SeqCst) - fetched,
        6,
        "two objects × three nodes"
    );

    // PURGE on the proxy port of node 2: the others apply it within moments.
    let (head, _) = request(&nodes[2].proxy, "PURGE", &url("/u/one"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    for (i, n) in nodes.iter().enumerate() {
        assert!(
            wait_for(Duration::from_secs(5), || !is_hit(
                &get(&n.proxy, &url("/u/one")).0
            )),
            "/u/one on n{i} after a PURGE on n2"
        );
    }
    for n in &nodes {
        assert!(metric(&n.admin, "trove_cluster_bus_lag") <= 0.0);
        assert_eq!(metric(&n.admin, "trove_cluster_bus_rejected_total"), 0.0);
    }
    assert_eq!(
        metric(&nodes[0].admin, "trove_cluster_bus_published_total"),
        1.0
    );
    assert_eq!(
        metric(&nodes[1].admin, "trove_cluster_bus_applied_total"),
        2.0
    );
}

/// Node 3 (with a disk tier) is killed; purges happen on node 1; node 3 comes back on the
/// same directory. It serves no purged object, not even before it has read the bus (it
/// serves misses until then), and once current the objects no purge covered are hits from
/// its disk again (so its cache did survive, and only the feed kept the purged ones out).
#[test]
fn a_node_down_during_purges_serves_no_stale_hit_when_back() {
    let dir = TempDir::new("bus-down");
    let nats = Nats::start();
    let (origin, _) = origin();
    let url = |p: &str| format!("http://{origin}{p}");
    let (ports, mut nodes) = three(&dir, &nats, [false, false, true], "");
    let purged = ["/t/red-1", "/t/red-2", "/u/gone"];
    let kept = ["/t/blue-1", "/u/kept"];
    let mut old = Vec::new();
    for p in purged.iter().chain(&kept) {
        old.push(cached(&nodes[2], &url(p)));
    }
    assert!(
        wait_for(Duration::from_secs(20), || metric(
            &nodes[2].admin,
            "trove_disk_objects"
        ) >= 5.0),
        "the objects reached node 3's disk"
    );
    nodes[2].trove.kill9();

    for call in [
        r#"{"tag": "red"}"#.to_string(),
        format!(r#"{{"url": "{}"}}"#, url("/u/gone")),
    ] {
        let (status, body) = api(&nodes[0].admin, "POST", "/v1/invalidate", &call);
        assert_eq!(status, 200, "{call}: {body}");
    }

    let d = dir.join("n2");
    let c = config(2, &ports, &nats.url(), Some(&d.join("cache")), "");
    let back = start_node(&d, &c);
    let mut stale = 0;
    let mut before_current = 0;
    while metric(&back.admin, "trove_cluster_bus_current") != 1.0 {
        for (i, p) in purged.iter().enumerate() {
            let (head, body) = get(&back.proxy, &url(p));
            if is_hit(&head) || body == old[i] {
                stale += 1;
            }
            before_current += 1;
        }
        if before_current > 3000 {
            break;
        }
    }
    current(&back);
    for (i, p) in purged.iter().enumerate() {
        let (head, body) = get(&back.proxy, &url(p));
        if body == old[i] {
            stale += 1;
        }
        assert!(!head.is_empty());
    }
    assert_eq!(stale, 0, "purged objects served by the node that was down");
    for (i, p) in kept.iter().enumerate() {
        let (head, body) = get(&back.proxy, &url(p));
        assert!(is_hit(&head), "{p} came back from disk: {head}");
        assert_eq!(body, old[purged.len() + i]);
    }
    assert_eq!(metric(&back.admin, "trove_cluster_bus_gaps_total"), 0.0);
    drop(nodes);
}

/// The stream keeps 3 messages; 6 invalidations happen while node 3 is down, so what it
/// missed is gone from the stream: it drops its whole cache instead of serving what it
/// can't prove valid — even the objects no invalidation named are fetched anew.
#[test]
fn a_node_that_missed_more_than_the_stream_keeps_drops_its_cache() {
    let dir = TempDir::new("bus-gap");
    let nats = Nats::start();
    let (origin, _) = origin();
    let url = |p: &str| format!("http://{origin}{p}");
    let (ports, mut nodes) = three(&dir, &nats, [false, false, true], "max_msgs = 3\n");
    let kept = ["/u/a", "/u/b"];
    let old: Vec<String> = kept.iter().map(|p| cached(&nodes[2], &url(p))).collect();
    assert!(
        wait_for(Duration::from_secs(20), || metric(
            &nodes[2].admin,
            "trove_disk_objects"
        ) >= 2.0),
        "the objects reached node 3's disk"
    );
    nodes[2].trove.kill9();
    for k in 0..6 {
        let call = format!(r#"{{"url": "{}"}}"#, url(&format!("/other/{k}")));
        let (status, body) = api(&nodes[0].admin, "POST", "/v1/invalidate", &call);
        assert_eq!(status, 200, "{body}");
    }
    let d = dir.join("n2");
    let c = config(
        2,
        &ports,
        &nats.url(),
        Some(&d.join("cache")),
        "max_msgs = 3\n",
    );
    let back = start_node(&d, &c);
    current(&back);
    assert_eq!(metric(&back.admin, "trove_cluster_bus_gaps_total"), 1.0);
    for (i, p) in kept.iter().enumerate() {
        let (head, body) = get(&back.proxy, &url(p));
        assert!(!is_hit(&head), "{p} after the gap: {head}");
        assert_ne!(body, old[i], "{p}: the old copy after a gap");
    }
}

/// NATS is killed (SIGKILL) and restarted on its store while node 1 takes a stream of URL
/// invalidations: every invalidation acknowledged (200) is applied by the other two nodes
/// (their copies are misses), each at most once (their applied counters never exceed the
/// messages sent); those refused while NATS was away got 503 `not-durable`.
#[test]
fn nats_restarted_under_invalidations_loses_none_acknowledged() {
    let dir = TempDir::new("bus-restart");
    let mut nats = Nats::start();
    let (origin, _) = origin();
    let url = |p: &str| format!("http://{origin}{p}");
    let (_, nodes) = three(&dir, &nats, [false; 3], "");
    let n = 60;
    for node in &nodes[1..] {
        for k in 0..n {
            cached(node, &url(&format!("/n/{k}")));
        }
    }
    let mut acked = Vec::new();
    let mut refused = 0;
    for k in 0..n {
        if k == 20 {
            nats.kill();
        }
        if k == 30 {
            nats.restart();
        }
        if k >= 30 {
            // Under a steady stream, not a burst: the connection comes back within a second.
            std::thread::sleep(Duration::from_millis(60));
        }
        let call = format!(r#"{{"url": "{}"}}"#, url(&format!("/n/{k}")));
        let (status, body) = api(&nodes[0].admin, "POST", "/v1/invalidate", &call);
        match status {
            200 => acked.push(k),
            503 => {
                assert!(body.contains("not-durable"), "{body}");
                refused += 1;
            }
            s => panic!("invalidation {k}: {s} {body}"),
        }
    }
    assert!(
        refused >= 1,
        "some invalidations were refused while NATS was down"
    );
    assert!(
        acked.len() >= 30 && acked.iter().any(|k| *k >= 30),
        "acknowledged before the kill and after the restart: {acked:?}"
    );
    for (i, node) in nodes.iter().enumerate().skip(1) {
        assert!(
            wait_for(Duration::from_secs(20), || metric(
                &node.admin,
                "trove_cluster_bus_applied_total"
            ) >= acked.len() as f64),
            "n{i} applied every acknowledged invalidation: {}",
            metric(&node.admin, "trove_cluster_bus_applied_total")
        );
        // Each at most once. One refused may still arrive: when NATS dies between storing
        // a message and acknowledging it, the caller got 503 (not known durable) and the
        // stream, restarted on its store, still delivers it (an extra invalidation, never a
        // lost one); seen once in a loaded run, 44 applied for 43 acknowledged.
        let applied = metric(&node.admin, "trove_cluster_bus_applied_total");
        assert!(
            applied <= (acked.len() + refused) as f64,
            "n{i} applied each at most once: {applied} for {} sent",
            acked.len() + refused
        );
        for k in &acked {
            let (head, _) = get(&node.proxy, &url(&format!("/n/{k}")));
            assert!(
                !is_hit(&head),
                "/n/{k} on n{i} after its acknowledged purge: {head}"
            );
        }
    }
}

/// A node whose NATS is away at start-up serves misses only (`fwd=bypass`), refuses
/// invalidations with 503 `not-durable`, says so in `/v1/cluster`; once NATS is there it
/// catches up and serves hits.
#[test]
fn without_nats_invalidations_are_refused_and_only_misses_are_served() {
    let dir = TempDir::new("bus-away");
    let mut nats = Nats::start();
    let url_nats = nats.url();
    nats.kill();
    let (origin, count) = origin();
    let url = |p: &str| format!("http://{origin}{p}");
    let ports = vec![free_port()];
    let c = config(0, &ports, &url_nats, None, "");
    let node = start_node(&dir.join("n0"), &c);
    for _ in 0..3 {
        let (head, _) = get(&node.proxy, &url("/u/x"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("fwd=bypass"),
            "served without the cache: {head}"
        );
    }
    assert_eq!(
        count.load(Ordering::SeqCst),
        3,
        "every request went to the origin"
    );
    let (status, body) = api(
        &node.admin,
        "POST",
        "/v1/invalidate",
        &format!(r#"{{"url": "{}"}}"#, url("/u/x")),
    );
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not-durable"), "{body}");
    let (_, cluster) = api(&node.admin, "GET", "/v1/cluster", "");
    assert!(cluster.contains("\"connected\":false"), "{cluster}");
    assert!(cluster.contains("\"serving_hits\":false"), "{cluster}");
    assert_eq!(metric(&node.admin, "trove_cluster_bus_current"), 0.0);

    nats.restart();
    current(&node);
    cached(&node, &url("/u/x"));
    let (status, body) = api(
        &node.admin,
        "POST",
        "/v1/invalidate",
        &format!(r#"{{"url": "{}"}}"#, url("/u/x")),
    );
    assert_eq!(status, 200, "{body}");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The benchmark behind BENCHMARKS.md's propagation figures (ignored: run it with
/// `cargo test --release -p trove --test cluster_bus -- --ignored --nocapture`). Three
/// memory-only nodes and one `nats-server` on loopback. For each of 500 URLs cached on nodes
/// 2 and 3: a URL invalidation on node 1's API, timed to its acknowledgement, then nodes 2
/// and 3 are polled with GETs until neither serves the URL from its cache: propagation is
/// the time from the acknowledgement to the last of them missing. Then 16 clients send
/// invalidations to the three nodes for 5 s: invalidations per second acknowledged, and the
/// time until every node applied all of them.
#[test]
#[ignore]
fn propagation_and_rate_over_three_nodes() {
    let dir = TempDir::new("bus-bench");
    let nats = Nats::start();
    let (origin, _) = origin();
    let url = |p: &str| format!("http://{origin}{p}");
    let (_, nodes) = three(&dir, &nats, [false; 3], "");
    let n = 500;
    let mut acks = Vec::new();
    let mut props = Vec::new();
    for k in 0..n {
        let u = url(&format!("/p/{k}"));
        for node in &nodes[1..] {
            cached(node, &u);
        }
        let call = format!(r#"{{"url": "{u}"}}"#);
        let t0 = std::time::Instant::now();
        let (status, body) = api(&nodes[0].admin, "POST", "/v1/invalidate", &call);
        let acked = std::time::Instant::now();
        assert_eq!(status, 200, "{body}");
        for node in &nodes[1..] {
            let mut polls = 0;
            while is_hit(&get(&node.proxy, &u).0) {
                polls += 1;
                assert!(polls < 100_000, "{u} still served by {}", node.proxy);
            }
        }
        acks.push(acked - t0);
        props.push(acked.elapsed());
    }
    acks.sort();
    props.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "acknowledged (applied, journaled, stored in the stream): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {n}",
        ms(percentile(&acks, 0.5)),
        ms(percentile(&acks, 0.99)),
        ms(acks[n - 1])
    );
    println!(
        "acknowledged -> served by no node: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {n}",
        ms(percentile(&props, 0.5)),
        ms(percentile(&props, 0.99)),
        ms(props[n - 1])
    );

    let count_all =
        |name: &str| -> Vec<f64> { nodes.iter().map(|n| metric(&n.admin, name)).collect() };
    let applied_before = count_all("trove_cluster_bus_applied_total");
    let published_before = count_all("trove_cluster_bus_published_total");
    let admins: Vec<String> = nodes.iter().map(|n| n.admin.clone()).collect();
    let acked = Arc::new(AtomicUsize::new(0));
    let start = std::time::Instant::now();
    let run = Duration::from_secs(5);
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let admin = admins[w % 3].clone();
            let acked = Arc::clone(&acked);
            let origin = origin.clone();
            std::thread::spawn(move || {
                let mut k = 0;
                while start.elapsed() < run {
                    let call = format!(r#"{{"url": "http://{origin}/r/{w}/{k}"}}"#);
                    let (status, body) = api(&admin, "POST", "/v1/invalidate", &call);
                    assert_eq!(status, 200, "{body}");
                    acked.fetch_add(1, Ordering::Relaxed);
                    k += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let sent = start.elapsed();
    let total = acked.load(Ordering::Relaxed) as f64;
    // Each node applies the others' (its own were applied when accepted).
    let published: Vec<f64> = count_all("trove_cluster_bus_published_total")
        .iter()
        .zip(&published_before)
        .map(|(after, before)| after - before)
        .collect();
    let all_published: f64 = published.iter().sum();
    for (i, node) in nodes.iter().enumerate() {
        let want = applied_before[i] + all_published - published[i];
        assert!(
            wait_for(Duration::from_secs(60), || metric(
                &node.admin,
                "trove_cluster_bus_applied_total"
            ) >= want),
            "n{i} applied every other node's invalidations"
        );
    }
    let applied = start.elapsed();
    println!(
        "16 clients over 3 nodes for {:.1} s: {total} invalidations acknowledged, {:.0}/s; every node had applied all of them {:.2} s after the start ({:.0}/s cluster-wide)",
        sent.as_secs_f64(),
        total / sent.as_secs_f64(),
        applied.as_secs_f64(),
        total / applied.as_secs_f64()
    );
}

/// A put on one node reaches the nodes that may serve it through the bus: in replicate mode
/// every node serves it as a hit, in shard mode every node serves it (asking its owner, which
/// stored it); no origin request either way. In shard mode, objects asked of all three nodes
/// are fetched from the origin once each.
#[test]
fn a_put_on_one_node_is_served_by_all_three() {
    for mode in ["replicate", "shard"] {
        let dir = TempDir::new(&format!("bus-put-{mode}"));
        let nats = Nats::start();
        let (origin, count) = origin();
        let ports: Vec<String> = (0..3).map(|_| free_port()).collect();
        let nodes: Vec<Node> = (0..3)
            .map(|i| {
                let d = dir.join(format!("n{i}"));
                let c = config(i, &ports, &nats.url(), None, "")
                    .replace("mode = \"replicate\"", &format!("mode = \"{mode}\""));
                start_node(&d, &c)
            })
            .collect();
        for n in &nodes {
            current(n);
        }
        for k in 0..6 {
            let u = format!("http://{origin}/put/{k}");
            let body = format!("put body {k} in {mode}");
            let (status, ack) = api(
                &nodes[k % 3].admin,
                "PUT",
                &format!("/v1/object?url={u}&ttl=600"),
                &body,
            );
            assert_eq!(status, 201, "{ack}");
            let seq: f64 = ack
                .split("\"bus_seq\":")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a bus sequence in {ack}"));
            // Applied everywhere before anyone asks (a GET racing the put fetches from the
            // origin, and whichever is stored last stays).
            for n in &nodes {
                assert!(wait_for(Duration::from_secs(5), || metric(
                    &n.admin,
                    "trove_cluster_bus_applied_seq"
                ) >= seq));
            }
            for (i, n) in nodes.iter().enumerate() {
                let (head, b) = get(&n.proxy, &u);
                assert!(
                    is_hit(&head),
                    "{mode}: /put/{k} put on n{} served by n{i}: {head}",
                    k % 3
                );
                assert_eq!(b, body, "{mode}: /put/{k} on n{i}");
            }
        }
        assert_eq!(count.load(Ordering::SeqCst), 0, "{mode}: no origin request");
        if mode == "shard" {
            // And what no one put: each object fetched from the origin once across the three.
            for k in 0..10 {
                for n in &nodes {
                    let (head, _) = get(&n.proxy, &format!("http://{origin}/s/{k}"));
                    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                }
            }
            assert_eq!(
                count.load(Ordering::SeqCst),
                10,
                "one origin request per object"
            );
        }
    }
}
