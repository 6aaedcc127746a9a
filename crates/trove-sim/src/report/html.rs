//! The HTML report: one self-contained file (inline CSS and SVG, no scripts, no network),
//! like `trove bench`'s. trove-bench's chart is a private time-series plot with phase bands
//! on a linear axis; the sim needs log-scaled x axes (cache sizes, latencies), so it has this
//! small line chart of its own, used by the sweep report and `trove sim model` alike.

use std::fmt::Write as _;

use super::{bytes, size, text};
use crate::sweep::Report;

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// Index into the palette; `None`: by position.
    pub color: Option<usize>,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

/// Axis scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

fn nice_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(1e-12);
    let mag = 10f64.powf(raw.log10().floor());
    let r = raw / mag;
    mag * if r < 1.5 {
        1.0
    } else if r < 3.5 {
        2.0
    } else if r < 7.5 {
        5.0
    } else {
        10.0
    }
}

fn tick_label(v: f64, fmt: &dyn Fn(f64) -> String) -> String {
    esc(&fmt(v))
}

/// A line chart as an inline SVG. `xfmt` labels x ticks.
pub fn line_chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[Series],
    xscale: Scale,
    xfmt: &dyn Fn(f64) -> String,
) -> String {
    line_chart_ticks(title, xlabel, ylabel, series, xscale, xfmt, None)
}

/// [`line_chart`] with the x ticks given (the swept cache sizes, say).
pub fn line_chart_ticks(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[Series],
    xscale: Scale,
    xfmt: &dyn Fn(f64) -> String,
    ticks: Option<&[f64]>,
) -> String {
    let (w, h, l, r, t, b) = (720.0, 300.0, 64.0, 170.0, 28.0, 44.0);
    let pts = series.iter().flat_map(|s| s.points.iter().copied());
    let (mut xmin, mut xmax, mut ymax) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
    for (x, y) in pts {
        if xscale == Scale::Log && x <= 0.0 {
            continue;
        }
        xmin = xmin.min(x);
        xmax = xmax.max(x);
        ymax = ymax.max(y);
    }
    if !xmin.is_finite() {
        (xmin, xmax) = (1.0, 10.0);
    }
    let tx = |x: f64| match xscale {
        Scale::Linear => x,
        Scale::Log => x.max(1e-300).log10(),
    };
    let (x0, mut x1) = (tx(xmin), tx(xmax));
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let ystep = nice_step(if ymax > 0.0 { ymax } else { 1.0 }, 4.0);
    let ymax = (ymax / ystep).ceil().max(1.0) * ystep;
    let px = |x: f64| l + (w - l - r) * (tx(x) - x0) / (x1 - x0);
    let py = |y: f64| t + (h - t - b) * (1.0 - y / ymax);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img"><title>{0}</title><text x="{l}" y="18" class="ct">{0}</text>"#,
        esc(title)
    );
    let mut y = 0.0;
    while y <= ymax + 1e-9 {
        let (x2, tx_, yy, ty) = (w - r, l - 4.0, py(y), py(y) + 4.0);
        let label = tick_label(y, &|v| format!("{v}"));
        let _ = write!(
            o,
            r##"<line x1="{l}" x2="{x2}" y1="{yy}" y2="{yy}" stroke="#ddd"/><text x="{tx_}" y="{ty}" class="ax" text-anchor="end">{label}</text>"##
        );
        y += ystep;
    }
    // x ticks: decades on a log axis, nice steps on a linear one.
    let mut xt = Vec::new();
    match xscale {
        _ if ticks.is_some() => xt = ticks.unwrap_or_default().to_vec(),
        Scale::Log => {
            let mut d = x0.floor();
            while d <= x1 + 1e-9 {
                if d >= x0 - 1e-9 {
                    xt.push(10f64.powf(d));
                }
                d += 1.0;
            }
            if xt.len() < 2 {
                xt = vec![xmin, xmax];
            }
        }
        Scale::Linear => {
            let st = nice_step(xmax - xmin, 6.0);
            let mut v = (xmin / st).ceil() * st;
            while v <= xmax + 1e-9 {
                xt.push(v);
                v += st;
            }
        }
    }
    for v in xt {
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" class="ax" text-anchor="middle">{}</text>"#,
            px(v),
            h - b + 16.0,
            tick_label(v, xfmt)
        );
    }
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" class="ax" text-anchor="middle">{}</text><text x="14" y="{}" class="ax" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"#,
        l + (w - l - r) / 2.0,
        h - 8.0,
        esc(xlabel),
        t + (h - t - b) / 2.0,
        t + (h - t - b) / 2.0,
        esc(ylabel)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[s.color.unwrap_or(i) % COLORS.len()];
        let d: Vec<String> = s
            .points
            .iter()
            .filter(|(x, _)| xscale == Scale::Linear || *x > 0.0)
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let dash = if s.dashed {
            r#" stroke-dasharray="5 3""#
        } else {
            ""
        };
        let _ = write!(
            o,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
            d.join(" ")
        );
        for p in &d {
            let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(o, r#"<circle cx="{cx}" cy="{cy}" r="2.5" fill="{color}"/>"#);
        }
        let ly = t + 14.0 + 16.0 * i as f64;
        let _ = write!(
            o,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}" class="lg">{}</text>"#,
            w - r + 8.0,
            w - r + 28.0,
            w - r + 32.0,
            ly + 4.0,
            esc(&s.name)
        );
    }
    o.push_str("</svg>");
    o
}

/// A whole page around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>{}</title><style>
body{{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}}
h1{{font-size:20px}} h2{{font-size:16px;margin-top:28px}}
pre{{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}}
.ct{{font-weight:600;font-size:13px}} .ax{{font-size:11px;fill:#555}} .lg{{font-size:11px}}
svg{{display:block;margin:8px 0}}
</style></head><body>{}</body></html>
"#,
        esc(title),
        body
    )
}

/// The sweep report as a page.
pub fn render(r: &Report) -> String {
    let mut b = String::new();
    let _ = write!(b, "<h1>trove sim: {}</h1>", esc(&r.trace.source));
    let mut policies: Vec<&str> = r.results.iter().map(|c| c.policy).collect();
    policies.dedup();
    policies.sort();
    policies.dedup();
    // An unbounded cache is drawn at twice the largest bounded size.
    let largest = r
        .results
        .iter()
        .filter_map(|c| c.cache_size)
        .max()
        .unwrap_or(1 << 30);
    let x_of = |c: Option<u64>| c.map_or(largest as f64 * 2.0, |n| n as f64);
    let per_policy = |f: &dyn Fn(&crate::replay::ConfigReport) -> f64| -> Vec<Series> {
        policies
            .iter()
            .map(|p| Series {
                name: p.to_string(),
                color: None,
                dashed: false,
                points: r
                    .results
                    .iter()
                    .filter(|c| c.policy == *p && c.cache_size != Some(0))
                    .map(|c| (x_of(c.cache_size), f(c)))
                    .collect(),
            })
            .collect()
    };
    let mut size_ticks: Vec<f64> = r
        .results
        .iter()
        .filter(|c| c.cache_size != Some(0))
        .map(|c| x_of(c.cache_size))
        .collect();
    size_ticks.sort_by(f64::total_cmp);
    size_ticks.dedup();
    let fmt_size = |v: f64| {
        if v > largest as f64 * 1.5 {
            "unbounded".to_string()
        } else {
            size(Some(v as u64))
        }
    };
    b.push_str(&line_chart_ticks(
        "Document hit ratio against cache size",
        "cache size",
        "hit %",
        &per_policy(&|c| c.hit_ratio * 100.0),
        Scale::Log,
        &fmt_size,
        Some(&size_ticks),
    ));
    b.push_str(&line_chart_ticks(
        "Byte hit ratio against cache size",
        "cache size",
        "byte hit %",
        &per_policy(&|c| c.byte_hit_ratio * 100.0),
        Scale::Log,
        &fmt_size,
        Some(&size_ticks),
    ));
    let with_net: Vec<_> = r.results.iter().filter(|c| c.network.is_some()).collect();
    if let (Some(first), Some(last)) = (with_net.first(), with_net.last()) {
        b.push_str(&line_chart_ticks(
            "Mean latency against cache size (with the proxy)",
            "cache size",
            "seconds",
            &per_policy(&|c| c.network.as_ref().map_or(0.0, |n| n.with_proxy.mean)),
            Scale::Log,
            &fmt_size,
            Some(&size_ticks),
        ));
        let mut series = Vec::new();
        // Ten bins per decade: the fine bins of the summary are too spiky to read.
        let density = |h: &[(f64, u64)]| -> Vec<(f64, f64)> {
            let n: u64 = h.iter().map(|x| x.1).sum::<u64>().max(1);
            let mut bins: std::collections::BTreeMap<i64, u64> = Default::default();
            for (x, c) in h {
                *bins.entry((x.log10() * 10.0).ceil() as i64).or_default() += c;
            }
            bins.into_iter()
                .map(|(k, c)| (10f64.powf(k as f64 / 10.0), c as f64 * 100.0 / n as f64))
                .collect()
        };
        for c in [first, last] {
            let n = c.network.as_ref().expect("filtered");
            series.push(Series {
                name: format!("proxy, {} {}", size(c.cache_size), c.policy),
                color: None,
                dashed: false,
                points: density(&n.latency_histogram_with_proxy),
            });
            if std::ptr::eq(*c, *last) {
                series.push(Series {
                    name: "no proxy".into(),
                    color: None,
                    dashed: true,
                    points: density(&n.latency_histogram_without_proxy),
                });
            }
        }
        b.push_str(&line_chart(
            "Latency distribution (share of requests per bin)",
            "total latency, seconds",
            "% of requests",
            &series,
            Scale::Log,
            &|v| format!("{v}"),
        ));
    }
    let _ = write!(
        b,
        "<h2>Table</h2><pre>{}</pre><p>Bytes to clients: {}.</p>",
        esc(&text::render(r)),
        r.results
            .first()
            .map_or("-".into(), |c| bytes(c.bytes_to_clients))
    );
    page(&format!("trove sim: {}", r.trace.source), &b)
}
