//! The live status page served by the admin listener: the figures an operator looks at
//! first, refreshed by the browser every two seconds.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::state::Shared;
use trove_cache::Outcome;

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "–".into()
    } else {
        format!("{:.1}%", n as f64 * 100.0 / d as f64)
    }
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
}

/// The page's HTML.
pub fn page(shared: &Shared) -> String {
    let m = &shared.metrics;
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let total: u64 = Outcome::ALL.iter().map(|o| m.count(*o)).sum();
    let hits: u64 = Outcome::ALL
        .iter()
        .filter(|o| o.is_hit())
        .map(|o| m.count(*o))
        .sum();
    let sent = g(&m.bytes_to_clients);
    let from_cache = g(&m.bytes_from_cache);
    let store = shared.store.stats();
    let mut rows = String::new();
    for o in Outcome::ALL {
        let n = m.count(o);
        if n > 0 {
            let _ = write!(rows, "<tr><td>{}</td><td>{n}</td></tr>", o.as_str());
        }
    }
    let listeners: Vec<String> = shared
        .settings
        .listeners
        .iter()
        .map(|l| format!("{} {}", l.mode.as_str(), l.addr))
        .collect();
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>trove status</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left}}h1{{font-size:1.4em}}.big{{font-size:1.6em;font-weight:600}}</style>
</head><body>
<h1>trove</h1>
<p>Listening: {listeners}. Eviction: {eviction}. Metrics for Prometheus at <a href="/metrics">/metrics</a>.</p>
<table>
<tr><th>Requests</th><td class="big">{total}</td></tr>
<tr><th>Document hit ratio</th><td class="big">{hit_ratio}</td></tr>
<tr><th>Byte hit ratio</th><td class="big">{byte_ratio}</td></tr>
<tr><th>Client connections open</th><td>{copen} (accepted {cacc}, requests on reused connections {creuse})</td></tr>
<tr><th>Origin connections open</th><td>{oopen} (opened {oopened}, reused {oreused}, idle in pool {oidle})</td></tr>
<tr><th>Store</th><td>{sbytes} of {scap} ({sfill}), {sobj} objects, {sev} evictions</td></tr>
<tr><th>Origin errors / bad requests / shed</th><td>{oerr} / {bad} / {shed}</td></tr>
</table>
<h2>By result</h2><table><tr><th>Result</th><th>Requests</th></tr>{rows}</table>
</body></html>
"#,
        listeners = listeners.join(", "),
        eviction = shared.settings.cache.eviction.as_str(),
        hit_ratio = pct(hits, total),
        byte_ratio = pct(from_cache, sent),
        copen = m.client_open.load(Ordering::Relaxed),
        cacc = g(&m.client_accepted),
        creuse = g(&m.client_reused),
        oopen = m.origin_open.load(Ordering::Relaxed),
        oopened = g(&m.origin_opened),
        oreused = g(&m.origin_reused),
        oidle = shared.pool.idle_count(),
        sbytes = mib(store.bytes),
        scap = mib(store.capacity),
        sfill = pct(store.bytes, store.capacity),
        sobj = store.objects,
        sev = store.evictions,
        oerr = g(&m.origin_errors),
        bad = g(&m.bad_requests),
        shed = g(&m.shed),
    )
}
