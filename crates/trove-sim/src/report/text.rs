//! The text table.

use std::fmt::Write as _;

use super::{bytes, size};
use crate::assume::{Assume, Head, UNKNOWABLE};
use crate::sweep::Report;

pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let t = &r.trace;
    let _ = writeln!(
        o,
        "trace {} ({}): {} records, {} replayed, {} bad lines, {} unreplayable URLs; {} URLs, {} servers, {} clients, {:.0} s of traffic",
        t.source, t.format, t.records, t.replayed, t.skipped.bad_lines, t.unreplayable,
        t.distinct_urls, t.servers, t.clients, t.span_s
    );
    for (line, text) in &t.skipped.examples {
        let _ = writeln!(o, "  bad line {line}: {text}");
    }
    if let Some(e) = &t.read_error {
        let _ = writeln!(o, "  the trace ended early: {e}");
    }
    let a = &r.assumptions;
    let log = t.format == "squid" || t.format == "clf";
    if log {
        let _ = writeln!(
            o,
            "log: {} ({})",
            match a.log {
                Assume::Trove => "trove's own, replayed to follow what trove did",
                _ => "another cache's or server's, replayed by seed 003's rules",
            },
            a.log_reason
        );
    }
    let _ = writeln!(
        o,
        "assumptions: freshness {} s, '?'/cgi-bin URLs {}, cookies on {:.0}% of (client, URL) pairs{}",
        a.freshness.as_secs(),
        if a.dynamic_uncachable { "uncachable" } else { "cachable" },
        a.cookie_fraction * 100.0,
        match a.head {
            Head::None => "",
            Head::Trove => "; byte counts less the response head trove sends with each result code",
            Head::Squid => "; byte counts less an estimated Squid response head",
        }
    );
    if !a.uncachable.is_empty() {
        let _ = writeln!(
            o,
            "--never-hit-uncachable: {} URLs the log shows fetched every time (twice or more) replayed as uncachable",
            a.uncachable.len()
        );
    }
    if log {
        let _ = writeln!(o, "a log cannot tell: {UNKNOWABLE}");
    }
    let _ = write!(
        o,
        "replayed in {:.2} s ({:.0} records/s through {} configurations",
        r.elapsed_s,
        r.records_per_s,
        r.results.len()
    );
    if r.threads > 1 {
        let _ = write!(o, " on {} threads", r.threads);
    }
    if let Some(cpu) = r.cpu_s.filter(|c| *c > 0.0) {
        let per_core = t.records as f64 * r.results.len() as f64 / cpu;
        let _ = write!(
            o,
            "; {cpu:.2} CPU s, {per_core:.0} record-configurations per CPU second"
        );
    }
    let _ = writeln!(o, ")\n");
    if let Some(c) = &r.cluster {
        let _ = writeln!(
            o,
            "a cluster of {} nodes, {} mode: each cache size below is each node's, the figures \
             the cluster's (requests per node: {:?})\n",
            c.nodes, c.mode, c.requests_per_node
        );
    }
    let _ = writeln!(
        o,
        "{:>10} {:>8} {:>8} {:>10} {:>10} {:>12} {:>10}",
        "cache", "policy", "hit %", "byte hit %", "origin req", "origin bytes", "evictions"
    );
    for c in &r.results {
        let _ = writeln!(
            o,
            "{:>10} {:>8} {:>8.2} {:>10.2} {:>10} {:>12} {:>10}",
            size(c.cache_size),
            c.policy,
            c.hit_ratio * 100.0,
            c.byte_hit_ratio * 100.0,
            c.origin_requests,
            bytes(c.origin_body_bytes),
            c.evictions
        );
    }
    if r.results.iter().any(|c| c.network.is_some()) {
        let _ = writeln!(
            o,
            "\nlatency, seconds (mean = connect + request-response + transfer, with the proxy and without), origin bytes and connections"
        );
        let _ = writeln!(
            o,
            "{:>10} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7} {:>7} | {:>10} {:>10} {:>8} | {:>6} {:>6} {:>6} {:>6}",
            "cache", "policy", "mean", "median", "conn", "req-rsp", "xfer", "direct", "median", "conn", "req-rsp", "xfer",
            "origin", "direct", "savings", "peak c", "peak s", "new c%", "new s%"
        );
        for c in &r.results {
            let Some(n) = &c.network else { continue };
            let (w, d) = (&n.with_proxy, &n.without_proxy);
            let _ = writeln!(
                o,
                "{:>10} {:>8} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} | {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} | {:>10} {:>10} {:>7.1}% | {:>6} {:>6} {:>6.1} {:>6.1}",
                size(c.cache_size),
                c.policy,
                w.mean,
                w.median,
                w.mean_connect,
                w.mean_request_response,
                w.mean_transfer,
                d.mean,
                d.median,
                d.mean_connect,
                d.mean_request_response,
                d.mean_transfer,
                bytes(n.bytes_from_origins),
                bytes(n.bytes_from_origins_without_proxy),
                n.origin_savings * 100.0,
                n.peak_client_connections,
                n.peak_server_connections,
                n.new_client_connection_share * 100.0,
                n.new_server_connection_share * 100.0
            );
        }
    }
    o
}
