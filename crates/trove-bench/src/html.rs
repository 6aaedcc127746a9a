//! The HTML report: one self-contained file (inline CSS and SVG, no scripts, no network), so it
//! opens from disk, survives being mailed around and renders the same in ten years.

use std::fmt::Write as _;

use crate::report::{summary_table, PhaseReport, Point, Report, Rt};

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn f(v: Option<f64>, prec: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.prec$}"))
}

fn pct(v: Option<f64>) -> String {
    f(v.map(|v| v * 100.0), 1)
}

/// One line of a chart.
struct Series<'a> {
    name: String,
    color: &'a str,
    dashed: bool,
    points: Vec<(f64, Option<f64>)>,
}

/// A "nice" step for about `n` ticks over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(1e-9);
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

fn chart(title: &str, unit: &str, series: &[Series], phases: &[(f64, String)]) -> String {
    let (w, h, l, r, t, b) = (960.0, 240.0, 64.0, 16.0, 28.0, 36.0);
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let xmax = xs.fold(5.0f64, f64::max) + 5.0;
    let ymax_data = series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| p.1))
        .fold(0.0f64, f64::max);
    let ystep = nice_step(if ymax_data > 0.0 { ymax_data } else { 1.0 }, 4.0);
    let ymax = (ymax_data / ystep).ceil().max(1.0) * ystep;
    let px = |x: f64| l + (w - l - r) * x / xmax;
    let py = |y: f64| t + (h - t - b) * (1.0 - y / ymax);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img"><title>{}</title>"#,
        esc(title)
    );
    let _ = write!(
        o,
        r#"<text x="{l}" y="18" class="ct">{} <tspan class="u">({})</tspan></text>"#,
        esc(title),
        esc(unit)
    );
    let mut y = 0.0;
    while y <= ymax + 1e-9 {
        let _ = write!(
            o,
            r##"<line x1="{l}" x2="{}" y1="{py}" y2="{py}" stroke="#ddd"/><text x="{}" y="{}" class="ax" text-anchor="end">{}</text>"##,
            w - r,
            l - 6.0,
            py(y) + 4.0,
            trim(y),
            py = py(y)
        );
        y += ystep;
    }
    let xstep = nice_step(xmax, 10.0);
    let mut x = 0.0;
    while x <= xmax {
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" class="ax" text-anchor="middle">{}</text>"#,
            px(x),
            h - b + 16.0,
            trim(x)
        );
        x += xstep;
    }
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" class="ax" text-anchor="end">seconds</text>"#,
        w - r,
        h - 4.0
    );
    for (start, name) in phases {
        let _ = write!(
            o,
            r##"<line x1="{x}" x2="{x}" y1="{t}" y2="{}" stroke="#999" stroke-dasharray="3,3"/><text x="{}" y="{}" class="ph">{}</text>"##,
            h - b,
            px(*start) + 3.0,
            t + 10.0,
            esc(name),
            x = px(*start)
        );
    }
    let _ = write!(
        o,
        r##"<rect x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="#888"/>"##,
        w - l - r,
        h - t - b
    );
    for s in series {
        let mut d = String::new();
        let mut pen = false;
        for &(x, y) in &s.points {
            match y {
                Some(y) => {
                    let _ = write!(
                        d,
                        "{}{:.1},{:.1} ",
                        if pen { "L" } else { "M" },
                        px(x + 2.5),
                        py(y)
                    );
                    pen = true;
                }
                None => pen = false,
            }
        }
        let dash = if s.dashed {
            r#" stroke-dasharray="6,4""#
        } else {
            ""
        };
        let _ = write!(
            o,
            r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.6"{dash}/>"#,
            s.color
        );
    }
    // Legend, top right.
    let mut lx = w - r - 8.0;
    for s in series.iter().rev() {
        let tw = 7.0 * s.name.len() as f64 + 28.0;
        lx -= tw;
        let dash = if s.dashed {
            r#" stroke-dasharray="6,4""#
        } else {
            ""
        };
        let _ = write!(
            o,
            r#"<line x1="{lx}" x2="{}" y1="14" y2="14" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="18" class="lg">{}</text>"#,
            lx + 18.0,
            s.color,
            lx + 22.0,
            esc(&s.name)
        );
    }
    o.push_str("</svg>");
    o
}

fn trim(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.2}")
    }
}

fn series<'a>(
    name: &str,
    color: &'a str,
    dashed: bool,
    pts: &[Point],
    get: impl Fn(&Point) -> Option<f64>,
) -> Series<'a> {
    Series {
        name: name.into(),
        color,
        dashed,
        points: pts.iter().map(|p| (p.t, get(p))).collect(),
    }
}

fn rt_cell(r: &Rt) -> String {
    format!("{} / {}", f(r.mean_ms, 1), f(r.median_ms, 1))
}

fn phase_row(o: &mut String, p: &PhaseReport) {
    let errs: Vec<String> = p
        .errors_by_kind
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = write!(
        o,
        "<tr><td>{}</td><td>{:.0}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{} <span class=u>({})</span></td><td>{} <span class=u>({})</span></td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}% {}</td></tr>",
        esc(&p.name),
        p.duration_s,
        p.requests,
        p.offered_rate,
        p.achieved_rate,
        pct(p.dhr),
        pct(p.offered_dhr),
        pct(p.bhr),
        pct(p.offered_bhr),
        rt_cell(&p.rt_hit),
        rt_cell(&p.rt_miss),
        rt_cell(&p.rt_all),
        p.error_ratio * 100.0,
        esc(&errs.join(", "))
    );
}

fn section(o: &mut String, r: &Report) {
    let _ = write!(
        o,
        "<h2>{}</h2><p class=meta>{} · {} · scale {} · peak {:.1} req/s · {} robots · think time {:.2} s · {:.0} s wall · {}</p>",
        esc(&r.label),
        esc(&r.workload),
        esc(&r.mode),
        r.scale,
        r.peak_rate,
        r.robots,
        r.think_mean_s,
        r.elapsed_s,
        esc(&r.date)
    );
    for n in &r.notes {
        let _ = write!(o, "<p class=note>{}</p>", esc(n));
    }
    o.push_str("<table><tr><th>phase</th><th>s</th><th>requests</th><th>offered req/s</th><th>achieved req/s</th><th>DHR % (offered)</th><th>BHR % (offered)</th><th>hit ms mean / median</th><th>miss ms</th><th>all ms</th><th>errors</th></tr>");
    for p in &r.phases {
        phase_row(o, p);
    }
    phase_row(o, &r.total);
    o.push_str("</table>");
    let _ = write!(
        o,
        "<p class=meta>connections per request: client {}{} · retries on closed idle connections {} · offered hit ratio from the workload's parameters {:.2}%</p>",
        f(r.client_conns_per_request, 3),
        r.server
            .as_ref()
            .map_or(String::new(), |s| format!(", server {}", f(s.conns_per_request, 3))),
        r.retries,
        r.configured_offered_dhr * 100.0
    );
    let phases: Vec<(f64, String)> = r
        .phase_starts
        .iter()
        .zip(&r.phases)
        .map(|(s, p)| (*s, p.name.clone()))
        .collect();
    let s = &r.series;
    o.push_str(&chart(
        "Request rate",
        "req/s, 5 s bins",
        &[
            series("offered", COLORS[0], true, s, |p| Some(p.offered_rate)),
            series("achieved", COLORS[0], false, s, |p| Some(p.rate)),
            series("errors", COLORS[1], false, s, |p| Some(p.error_rate)),
        ],
        &phases,
    ));
    o.push_str(&chart(
        "Hit ratio",
        "%, 5 s bins",
        &[
            series("offered DHR", COLORS[2], true, s, |p| {
                p.offered_dhr.map(|v| v * 100.0)
            }),
            series("DHR", COLORS[2], false, s, |p| p.dhr.map(|v| v * 100.0)),
            series("BHR", COLORS[3], false, s, |p| p.bhr.map(|v| v * 100.0)),
        ],
        &phases,
    ));
    o.push_str(&chart(
        "Mean response time",
        "ms, 5 s bins",
        &[
            series("hit", COLORS[2], false, s, |p| p.rt_hit_ms),
            series("miss", COLORS[1], false, s, |p| p.rt_miss_ms),
            series("all", COLORS[0], false, s, |p| p.rt_all_ms),
        ],
        &phases,
    ));
}

/// Renders one or several runs (several: a comparison, with the summary table first).
pub fn render(reports: &[Report]) -> String {
    let mut o = String::new();
    let title = match reports {
        [one] => format!("trove bench: {} against {}", one.workload, one.label),
        _ => format!(
            "trove bench compare: {}",
            reports.first().map_or("", |r| r.workload.as_str())
        ),
    };
    let _ = write!(
        o,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{}</title><style>
body{{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}}
h1{{font-size:20px}}h2{{font-size:17px;margin-top:32px;border-bottom:1px solid #ccc}}
table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}
th{{background:#f3f3f3}}td:first-child{{text-align:left}}.u{{color:#777;font-size:12px}}
.meta{{color:#555}}.note{{color:#b00;font-weight:600}}svg{{display:block;margin:10px 0}}
.ct{{font-size:14px;font-weight:600}}.ax{{font-size:11px;fill:#555}}.ph{{font-size:10px;fill:#777}}.lg{{font-size:12px}}
pre{{background:#f6f6f6;padding:8px}}</style></head><body><h1>{}</h1>"#,
        esc(&title),
        esc(&title)
    );
    if reports.len() > 1 {
        o.push_str("<h2>Executive summary</h2><p class=meta>Measured in each product's summary phase (top2 as in the cache-off, else the last top phase). Response times in ms, mean.</p>");
        let _ = write!(o, "<pre>{}</pre>", esc(&summary_table(reports)));
        let all: Vec<Series> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| {
                series(&r.label, COLORS[i % COLORS.len()], false, &r.series, |p| {
                    p.dhr.map(|v| v * 100.0)
                })
            })
            .collect();
        o.push_str(&chart("Document hit ratio, side by side", "%", &all, &[]));
        let all: Vec<Series> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| {
                series(&r.label, COLORS[i % COLORS.len()], false, &r.series, |p| {
                    p.rt_all_ms
                })
            })
            .collect();
        o.push_str(&chart("Mean response time, side by side", "ms", &all, &[]));
    }
    for r in reports {
        section(&mut o, r);
    }
    o.push_str("<p class=meta>DHR/BHR: document/byte hit ratio, told by the robots from the servers' stamps; offered: what an ideal cache would have hit on the same requests. Response times run from each request's intended start (open loop), so queueing in the robots counts.</p></body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_is_self_contained_and_escaped() {
        let mut r = Report {
            label: "<squid>".into(),
            ..Report::default()
        };
        r.series = (0..10)
            .map(|i| Point {
                t: i as f64 * 5.0,
                rate: 10.0,
                dhr: (i % 3 != 0).then_some(0.5),
                ..Point::default()
            })
            .collect();
        let html = render(&[r.clone(), r]);
        assert!(html.contains("&lt;squid&gt;"));
        assert!(!html.contains("<squid>"));
        assert!(!html.contains("<script"));
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert_eq!(html.matches("<svg").count(), 2 + 2 * 3);
    }
}
