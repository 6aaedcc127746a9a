//! The live status page served by the admin listener: what an operator keeps open. Version
//! and uptime; request, hit and byte rates over the last minutes as charts ([`history`]
//! samples the counters, [`chart`] draws them); hit and miss latency percentiles, over the
//! last minute and since start; document and byte hit ratios of cacheable traffic (tunnels,
//! refusals, purges, shed and malformed requests apart); the store's fill per tier; each
//! origin with its health, connections and failures; what each result code means. One HTML
//! document without scripts, reloaded by the browser every five seconds.

pub mod chart;
pub mod history;

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use trove_cache::Outcome;

use crate::metrics::quantile;
use crate::state::Shared;
use chart::Series;
use history::Sample;

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "–".into()
    } else {
        format!("{:.1}%", n as f64 * 100.0 / d as f64)
    }
}

fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn per_second(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k/s", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}/s")
    } else {
        format!("{v:.1}/s")
    }
}

fn bytes_per_second(v: f64) -> String {
    format!("{}/s", bytes(v))
}

fn millis(seconds: Option<f64>) -> String {
    match seconds {
        None => "–".into(),
        Some(s) if s < 0.001 => format!("{:.0} µs", s * 1e6),
        Some(s) if s < 1.0 => format!("{:.1} ms", s * 1e3),
        Some(s) => format!("{s:.2} s"),
    }
}

fn ago(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s ago"),
        60..=3599 => format!("{} min ago", s / 60),
        _ => format!("{} h ago", s / 3600),
    }
}

fn uptime(d: Duration) -> String {
    let s = d.as_secs();
    let (days, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    if days > 0 {
        format!("{days} d {h} h {m} min")
    } else if h > 0 {
        format!("{h} h {m} min")
    } else {
        format!("{m} min {} s", s % 60)
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Latencies between two samples (or since start, with `from` all zeros).
fn percentiles(from: &Sample, to: &Sample, hit: bool) -> [Option<f64>; 3] {
    let (a, b) = if hit {
        (&from.hit_times, &to.hit_times)
    } else {
        (&from.miss_times, &to.miss_times)
    };
    let mut d = *b;
    for (x, y) in d.iter_mut().zip(a) {
        *x = x.saturating_sub(*y);
    }
    [0.5, 0.9, 0.99].map(|q| quantile(&d, q))
}

/// The page's HTML.
pub fn page(shared: &Shared) -> String {
    let m = &shared.metrics;
    let h = &shared.history;
    let up = h.started.elapsed();
    let now = Sample::take(m, up.as_secs_f64());
    let minute_ago = h.back(Duration::from_secs(60)).unwrap_or_default();
    let window = (now.at - minute_ago.at).max(1e-3);
    let recent = |a: u64, b: u64| b.saturating_sub(a);
    let rate_now = recent(minute_ago.requests, now.requests) as f64 / window;
    let store = shared.store.stats();
    let zero = Sample::default();

    let mut out = String::with_capacity(32 * 1024);
    let listeners: Vec<String> = shared
        .settings
        .listeners
        .iter()
        .map(|l| format!("{} {}", l.mode.as_str(), l.addr))
        .collect();
    let started = httpdate::fmt_http_date(h.started_wall);
    let _ = write!(
        out,
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<meta name="viewport" content="width=device-width">
<title>trove status</title>
<style>
body{{font:14px system-ui,sans-serif;margin:1.5em 2em;color:#222;max-width:1400px}}
h1{{font-size:1.4em;margin:0}} h2{{font-size:1.1em;margin:1.4em 0 .4em}}
.sub{{color:#666;margin:.2em 0 1em}}
.cards{{display:flex;flex-wrap:wrap;gap:.8em}} .card{{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;min-width:10em}}
.card b{{display:block;font-size:1.6em}} .card span{{color:#666;font-size:.9em}}
.charts{{display:flex;flex-wrap:wrap;gap:1em}} figure{{margin:0}} figcaption{{font-weight:600;margin:.3em 0}}
table{{border-collapse:collapse}} td,th{{padding:.25em .8em;border-bottom:1px solid #e4e4e4;text-align:left}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}} .bad{{color:#b00;font-weight:600}} .ok{{color:#070}}
.muted{{color:#777}}
</style></head><body>
<h1>trove {version}</h1>
<p class="sub">Up {uptime} (since {started}) · listening {listeners} · eviction {eviction} · <a href="/metrics">/metrics</a> for Prometheus · this page reloads every 5 s</p>
{degraded}"#,
        degraded = shared.disk_health().map_or(String::new(), |why| format!(
            "<p class=\"degraded\" style=\"background:#fdd;padding:.5em\"><b>Degraded:</b> {}</p>\n",
            escape(&why)
        )),
        version = env!("CARGO_PKG_VERSION"),
        uptime = uptime(up),
        listeners = escape(&listeners.join(", ")),
        eviction = shared.settings.cache.eviction.as_str(),
    );

    // The figures at a glance.
    let cards: [(String, String); 6] = [
        (per_second(rate_now), "requests, last minute".into()),
        (
            pct(
                recent(minute_ago.hits, now.hits),
                recent(minute_ago.cacheable, now.cacheable),
            ),
            format!(
                "hit ratio, last minute ({} since start)",
                pct(now.hits, now.cacheable)
            ),
        ),
        (
            pct(
                recent(minute_ago.bytes_from_cache, now.bytes_from_cache),
                recent(minute_ago.bytes_cacheable, now.bytes_cacheable),
            ),
            format!(
                "byte hit ratio, last minute ({} since start)",
                pct(now.bytes_from_cache, now.bytes_cacheable)
            ),
        ),
        (
            m.client_open.load(Ordering::Relaxed).to_string(),
            "client connections open".into(),
        ),
        (
            m.origin_open.load(Ordering::Relaxed).to_string(),
            "origin connections open".into(),
        ),
        (
            pct(store.bytes, store.capacity),
            format!("store fill ({} objects)", store.objects),
        ),
    ];
    out.push_str(r#"<div class="cards">"#);
    for (big, what) in cards {
        let _ = write!(
            out,
            r#"<div class="card"><b>{big}</b><span>{what}</span></div>"#
        );
    }
    out.push_str("</div>\n");

    // The last minutes.
    let rates = h.rates();
    let span = (history::KEEP as f64 - 1.0) * history::EVERY.as_secs_f64();
    let pts = |f: fn(&history::Rates) -> f64| rates.iter().map(|r| (r.at, f(r))).collect();
    let _ = write!(
        out,
        r#"<h2>The last {} minutes</h2><div class="charts">{}{}{}</div>"#,
        (span / 60.0).round(),
        chart::lines(
            "Requests per second",
            &[
                Series {
                    name: "all",
                    colour: "#2364aa",
                    points: pts(|r| r.requests)
                },
                Series {
                    name: "hits",
                    colour: "#3da35d",
                    points: pts(|r| r.hits)
                },
            ],
            now.at,
            span,
            per_second,
        ),
        chart::lines(
            "Bytes per second",
            &[
                Series {
                    name: "to clients",
                    colour: "#2364aa",
                    points: pts(|r| r.bytes_sent)
                },
                Series {
                    name: "from origins",
                    colour: "#e07a1f",
                    points: pts(|r| r.bytes_from_origins)
                },
            ],
            now.at,
            span,
            bytes_per_second,
        ),
        chart::lines(
            "Origin errors per second",
            &[Series {
                name: "errors",
                colour: "#c0392b",
                points: pts(|r| r.origin_errors)
            }],
            now.at,
            span,
            per_second,
        ),
    );
    if rates.is_empty() {
        out.push_str(
            r#"<p class="muted">The charts fill in as the counters are sampled (every 5 s).</p>"#,
        );
    }

    // Latency.
    out.push_str("<h2>Response time</h2><table><tr><th></th><th>p50</th><th>p90</th><th>p99</th><th>p50</th><th>p90</th><th>p99</th></tr>");
    out.push_str(
        r#"<tr><th></th><th colspan="3">last minute</th><th colspan="3">since start</th></tr>"#,
    );
    for (name, hit) in [("hits", true), ("misses", false)] {
        let last = percentiles(&minute_ago, &now, hit);
        let all = percentiles(&zero, &now, hit);
        let _ = write!(out, "<tr><th>{name}</th>");
        for v in last.iter().chain(&all) {
            let _ = write!(out, r#"<td class="n">{}</td>"#, millis(*v));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table><p class=\"muted\">First byte in to last byte out, from trove's histograms (interpolated inside their buckets).</p>\n");

    // The store, per tier.
    out.push_str(
        r#"<h2>Store</h2><table><tr><th>tier</th><th>state</th><th>held</th><th>budget</th><th>fill</th><th>objects</th><th>evicted</th><th>removed otherwise</th><th>writes shed</th><th>writes dropped</th></tr>"#,
    );
    let removed_otherwise = store
        .removed
        .iter()
        .sum::<u64>()
        .saturating_sub(store.evictions);
    for t in crate::manage::tiers(shared) {
        let state = if t.failed {
            r#"<span class="bad">failed</span>"#
        } else if !t.ready {
            r#"<span class="muted">recovering</span>"#
        } else {
            r#"<span class="ok">ok</span>"#
        };
        let (removed, shed, dropped) = if t.tier == "memory" {
            (removed_otherwise.to_string(), "–".into(), "–".into())
        } else {
            (
                "–".into(),
                t.writes_shed.to_string(),
                t.writes_dropped.to_string(),
            )
        };
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td>{state}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{removed}</td><td class="n">{shed}</td><td class="n">{dropped}</td></tr>"#,
            t.tier,
            bytes(t.bytes as f64),
            bytes(t.capacity as f64),
            pct(t.bytes, t.capacity),
            t.objects,
            t.evictions,
        );
    }
    out.push_str("</table>");

    // Origins.
    let health = m.origin_failures.health();
    let pool = shared.pool.origins();
    let mut names: Vec<&str> = health
        .iter()
        .map(|x| x.upstream.as_str())
        .chain(pool.iter().map(|p| p.upstream.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    if let Some(c) = crate::manage::cluster(shared) {
        let _ = write!(
            out,
            r#"<h2>Cluster</h2><p class="sub">node {} · {} mode</p><table><tr><th>node</th><th>address</th><th>state</th><th>share of keys</th><th>failures</th><th>times down</th></tr>"#,
            escape(&c.node),
            c.mode
        );
        for n in &c.nodes {
            let state = match (n.me, n.up) {
                (true, _) => r#"<span class="ok">this node</span>"#,
                (false, true) => r#"<span class="ok">up</span>"#,
                (false, false) => r#"<span class="bad">down</span>"#,
            };
            let _ = write!(
                out,
                r#"<tr><td>{}</td><td>{}</td><td>{state}</td><td class="n">{:.1} %</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
                escape(&n.id),
                escape(&n.addr),
                n.share * 100.0,
                n.failures,
                n.downs
            );
        }
        out.push_str("</table>");
    }
    if let Some(f) = &shared.feed {
        let b = f.snapshot();
        let state = match (b.connected, b.current, b.serving_hits) {
            (true, true, _) => r#"<span class="ok">connected, up to date</span>"#,
            (true, false, _) => r#"<span class="bad">connected, catching up: misses only</span>"#,
            (false, true, _) => {
                r#"<span class="bad">unreachable: invalidations are refused (503)</span>"#
            }
            (false, false, true) => {
                r#"<span class="bad">never reached: serving hits unproven</span>"#
            }
            (false, false, false) => r#"<span class="bad">never reached: misses only</span>"#,
        };
        let _ = write!(
            out,
            r#"<h2>Invalidation bus</h2><p class="sub">{state} · stream at {} · applied here {} · published {} ({} failed) · from others {} · gaps {} · rejected {}</p>"#,
            b.last_seq,
            b.applied,
            b.published,
            b.publish_failures,
            b.applied_from_others,
            b.gaps,
            b.rejected
        );
        if let Some(e) = &b.last_error {
            let _ = write!(out, r#"<p class="muted">last error: {}</p>"#, escape(e));
        }
        out.push_str("<table><tr><th>node</th><th>applied</th><th>lag</th></tr>");
        for n in &b.nodes {
            let _ = write!(
                out,
                r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
                escape(&n.id),
                n.applied,
                n.lag
            );
        }
        out.push_str("</table>");
    }
    out.push_str("<h2>Origins</h2>");
    if names.is_empty() {
        out.push_str(r#"<p class="muted">No origin contacted yet.</p>"#);
    } else {
        out.push_str("<table><tr><th>upstream</th><th>health</th><th>connections open</th><th>waiting</th><th>mean exchange</th><th>failures</th><th>last failure</th><th>last answer</th></tr>");
        for name in names.iter().take(200) {
            let hl = health.iter().find(|x| x.upstream == *name);
            let p = pool.iter().find(|x| x.upstream == *name);
            let state = match hl {
                Some(x) if x.failing() => r#"<span class="bad">failing</span>"#,
                Some(x) if x.last_ok.is_some() => r#"<span class="ok">ok</span>"#,
                _ => r#"<span class="muted">–</span>"#,
            };
            let _ = write!(
                out,
                r#"<tr><td>{}</td><td>{state}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td><td>{}</td></tr>"#,
                escape(name),
                p.map_or(0, |p| p.open),
                p.map_or(String::from("0"), |p| if p.overloaded {
                    format!(r#"{} <span class="bad">standing</span>"#, p.waiting)
                } else {
                    p.waiting.to_string()
                }),
                p.map_or("–".into(), |p| if p.mean_exchange.is_zero() {
                    "–".into()
                } else {
                    millis(Some(p.mean_exchange.as_secs_f64()))
                }),
                hl.map_or(0, |x| x.failures),
                hl.and_then(|x| x.last_failure)
                    .map_or("–".into(), |(d, why)| format!("{why}, {}", ago(d))),
                hl.and_then(|x| x.last_ok).map_or("–".into(), ago),
            );
        }
        out.push_str("</table>");
    }

    // Results.
    out.push_str("<h2>Requests by result</h2><table><tr><th>code</th><th>requests</th><th>share</th><th>meaning</th></tr>");
    for o in Outcome::ALL {
        let n = m.count(o);
        let _ = write!(
            out,
            r#"<tr{}><td>{}</td><td class="n">{n}</td><td class="n">{}</td><td>{}</td></tr>"#,
            if n == 0 { r#" class="muted""# } else { "" },
            o.as_str(),
            pct(n, now.requests),
            o.meaning(),
        );
    }
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    if shared.store.lower_stats().is_some() {
        let _ = write!(
            out,
            r#"</table><p>Hits by tier: memory {}, disk {} (of those sent with sendfile {}, cut off by a reclaimed region {}).</p><table>"#,
            g(&m.tier_hits[trove_cache::Tier::Memory.index()]),
            g(&m.tier_hits[trove_cache::Tier::Disk.index()]),
            g(&m.sendfile_hits),
            g(&m.sendfile_aborted),
        );
    }
    let t = &m.tls;
    let tls_failed: u64 = t.failures.iter().map(g).sum();
    let worst = trove_tls::TlsFailure::ALL
        .iter()
        .max_by_key(|f| g(&t.failures[f.index()]))
        .filter(|f| g(&t.failures[f.index()]) > 0)
        .map_or("-", |f| f.as_str());
    // Per second over the last minute of samples (none yet: 0).
    let recent: Vec<history::Rates> = h.rates().into_iter().rev().take(12).collect();
    let per_second = |f: fn(&history::Rates) -> f64| {
        recent.iter().map(f).sum::<f64>() / recent.len().max(1) as f64
    };
    let _ = write!(
        out,
        r#"</table><p>TLS: client handshakes {} (resumed {}; {:.1}/s over the last minute), failed {tls_failed} ({:.1}/s; most often {worst}); certificates reloaded {} (refused {}); origin TLS connections {} (resumed {}, requests on pooled ones {}).</p><table>"#,
        g(&t.handshakes),
        g(&t.resumed),
        per_second(|r| r.tls_handshakes),
        per_second(|r| r.tls_failures),
        g(&t.reloads),
        g(&t.reload_failures),
        g(&m.origin_tls_full) + g(&m.origin_tls_resumed),
        g(&m.origin_tls_resumed),
        g(&m.origin_tls_reused),
    );
    let _ = write!(
        out,
        r#"</table><p class="muted">Hit ratios count cacheable traffic only: every result but TCP_TUNNEL, TCP_DENIED, TCP_PURGE, TCP_SHED and NONE_NONE. Malformed requests {}, shed {}, client connections accepted {} (requests on reused ones {}), origin connections opened {} (reused {}, idle in pool {}).</p>
</body></html>
"#,
        g(&m.bad_requests),
        g(&m.shed),
        g(&m.client_accepted),
        g(&m.client_reused),
        g(&m.origin_opened),
        g(&m.origin_reused),
        shared.pool.idle_count(),
    );
    out
}
