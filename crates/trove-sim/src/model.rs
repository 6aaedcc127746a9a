//! `trove sim model`: the DynamicWeb performance model of seed 002 §3.2 (Iyengar and
//! Challenger, USENIX '97), equations 1–6, and its Figures 7–14 redrawn for any parameters.
//!
//! A processor serves static files at `f_tp` per second, generates dynamic pages at `s_tp`
//! per second, and serves a cached dynamic page at `c_tp` per second, of which the cache
//! manager's own share runs at `c''_tp` and the server program's at `c'_tp`; `p_dyn` of the
//! requests are dynamic and `h` of those hit the cache. The "optimal" curves are a cache that
//! costs no CPU at all (`c_tp = c'_tp`).

use serde::Serialize;

/// The model's parameters (defaults: the paper's measured system).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Params {
    /// Cache hits per second through the whole path (paper: 175).
    pub c_tp: f64,
    /// Static files per second (paper: 270).
    pub f_tp: f64,
    /// Server-program invocations per second talking to the cache (`1/c'`; paper: about 20
    /// through CGI, 300 through ICAPI).
    pub c1_tp: f64,
    /// Requests per second the cache manager alone satisfies (`1/c''`; paper: about 500).
    pub c2_tp: f64,
    /// Dynamic pages generated per second.
    pub s_tp: f64,
    pub p_dyn: f64,
    pub h: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            c_tp: 175.0,
            f_tp: 270.0,
            c1_tp: 300.0,
            c2_tp: 500.0,
            s_tp: 10.0,
            p_dyn: 1.0,
            h: 0.5,
        }
    }
}

impl Params {
    /// Equation 1: the mean CPU time per request, seconds.
    pub fn t(&self) -> f64 {
        (self.h / self.c_tp + (1.0 - self.h) / self.s_tp) * self.p_dyn
            + (1.0 - self.p_dyn) / self.f_tp
    }

    /// Equation 2: throughput, requests per second.
    pub fn throughput(&self) -> f64 {
        1.0 / self.t()
    }

    /// The same system with a cache that costs no CPU (the paper's "opt" curves).
    pub fn optimal(&self) -> Params {
        Params {
            c_tp: self.c1_tp,
            ..*self
        }
    }

    /// Equation 3: throughput with the cache over throughput without it.
    pub fn speedup(&self) -> f64 {
        let without = self.p_dyn / self.s_tp + (1.0 - self.p_dyn) / self.f_tp;
        without / self.t()
    }

    /// Equation 4: throughput of one Web server node using a remote cache manager.
    pub fn remote_throughput(&self) -> f64 {
        Params {
            c_tp: self.c1_tp,
            ..*self
        }
        .throughput()
    }

    /// Equation 5: cache hits per second one such node asks of the cache manager.
    pub fn hits_per_node(&self) -> f64 {
        self.remote_throughput() * self.p_dyn * self.h
    }

    /// Equation 6: Web server nodes one cache manager node serves before it is the
    /// bottleneck.
    pub fn nodes(&self) -> f64 {
        self.c2_tp / self.hits_per_node()
    }
}

/// One figure: a title, axes and curves of (x, y).
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub number: u8,
    pub title: String,
    pub x: &'static str,
    pub y: &'static str,
    pub curves: Vec<Curve>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Curve {
    pub name: String,
    pub hit_rate: f64,
    pub optimal: bool,
    pub points: Vec<(f64, f64)>,
}

/// The hit rates the figures draw.
pub const HIT_RATES: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

fn s_values(max: f64) -> Vec<f64> {
    // 1 to `max`, log-spaced, 40 points.
    (0..40)
        .map(|i| 10f64.powf(max.log10() * i as f64 / 39.0))
        .collect()
}

/// Figures 7–14 for base parameters `base` (only `c_tp`, `f_tp`, `c1_tp`, `c2_tp` are
/// taken from it; each figure sets `p_dyn`, `h` and sweeps `s_tp`).
pub fn figures(base: &Params) -> Vec<Figure> {
    let mut out = Vec::new();
    let curves = |p_dyn: f64, f: &dyn Fn(&Params) -> f64, opt: bool, smax: f64, c1: f64| {
        let mut v = Vec::new();
        for &h in &HIT_RATES {
            for optimal in [false, true] {
                if optimal && (!opt || h == 0.0) {
                    continue;
                }
                let points = s_values(smax)
                    .into_iter()
                    .map(|s| {
                        let p = Params {
                            s_tp: s,
                            p_dyn,
                            h,
                            c1_tp: c1,
                            ..*base
                        };
                        let p = if optimal { p.optimal() } else { p };
                        (s, f(&p))
                    })
                    .collect();
                v.push(Curve {
                    hit_rate: h,
                    name: format!("h={h}{}", if optimal { " opt" } else { "" }),
                    optimal,
                    points,
                });
            }
        }
        v
    };
    for (n, p_dyn) in [(7u8, 1.0), (8, 0.5), (9, 0.2)] {
        out.push(Figure {
            number: n,
            title: format!("Figure {n}: throughput, p_dyn = {p_dyn}"),
            x: "s_tp (dynamic pages generated per second)",
            y: "T_tp (requests per second)",
            curves: curves(p_dyn, &Params::throughput, true, 300.0, base.c1_tp),
        });
    }
    for (n, p_dyn) in [(10u8, 1.0), (11, 0.5), (12, 0.2)] {
        out.push(Figure {
            number: n,
            title: format!("Figure {n}: speedup, p_dyn = {p_dyn}"),
            x: "s_tp (dynamic pages generated per second)",
            y: "S (speedup)",
            curves: curves(p_dyn, &Params::speedup, true, 300.0, base.c1_tp),
        });
    }
    for (n, c1, smax, how) in [(13u8, 20.0, 20.0, "CGI"), (14, 300.0, 300.0, "ICAP")] {
        let mut cs = curves(0.2, &Params::nodes, false, smax, c1);
        cs.retain(|c| !c.name.starts_with("h=0 ") && c.name != "h=0");
        out.push(Figure {
            number: n,
            title: format!(
                "Figure {n}: Web server nodes one cache node serves ({how}, p_dyn = 0.2)"
            ),
            x: "s_tp (dynamic pages generated per second)",
            y: "N (nodes)",
            curves: cs,
        });
    }
    out
}

/// The equations at one point, as text.
pub fn text(p: &Params) -> String {
    format!(
        "DynamicWeb model (seed 002 §3.2) at c_tp={} f_tp={} c'_tp={} c''_tp={} s_tp={} p_dyn={} h={}\n\
         (1) T    = {:.6} s of CPU per request\n\
         (2) T_tp = {:.2} requests/s (optimal cache: {:.2}, {:.1}% of it)\n\
         (3) S    = {:.3} (optimal cache: {:.3}; no cache can beat 1/(1-h) = {})\n\
         (4) T'_tp = {:.2} requests/s per Web server node with a remote cache\n\
         (5) H_n  = {:.2} cache hits/s per node\n\
         (6) N    = {:.2} Web server nodes per cache node\n",
        p.c_tp,
        p.f_tp,
        p.c1_tp,
        p.c2_tp,
        p.s_tp,
        p.p_dyn,
        p.h,
        p.t(),
        p.throughput(),
        p.optimal().throughput(),
        100.0 * p.throughput() / p.optimal().throughput(),
        p.speedup(),
        p.optimal().speedup(),
        if p.h < 1.0 {
            format!("{:.3}", 1.0 / (1.0 - p.h))
        } else {
            "unbounded".into()
        },
        p.remote_throughput(),
        p.hits_per_node(),
        p.nodes()
    )
}

/// Figures 7–14 as an HTML page.
pub fn html(base: &Params) -> String {
    use crate::report::html::{line_chart, page, Scale, Series};
    let mut b = String::from("<h1>DynamicWeb performance model (seed 002 §3.2, Figures 7–14)</h1>");
    b.push_str(&format!(
        "<pre>{}</pre>",
        crate::report::html::esc(&text(base))
    ));
    for f in figures(base) {
        let series: Vec<Series> = f
            .curves
            .iter()
            .map(|c| Series {
                name: c.name.clone(),
                // A hit rate and its optimal curve share a colour.
                color: HIT_RATES.iter().position(|h| c.hit_rate == *h),
                dashed: c.optimal,
                points: c.points.clone(),
            })
            .collect();
        b.push_str(&line_chart(&f.title, f.x, f.y, &series, Scale::Log, &|v| {
            format!("{v}")
        }));
    }
    page("trove sim model", &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// §3.2: "In the worst case, DynamicWeb still manages to achieve 58% of the optimal
    /// system throughput" — all requests dynamic and all hits, c_tp = 175 against the
    /// optimal c'_tp = 300 (ICAPI), whatever s_tp is.
    #[test]
    fn worst_case_is_58_percent_of_optimal() {
        let mut worst: f64 = 1.0;
        for p_dyn in [0.2, 0.5, 1.0] {
            for h in [0.0, 0.25, 0.5, 0.75, 1.0] {
                for s in s_values(300.0) {
                    let p = Params {
                        s_tp: s,
                        p_dyn,
                        h,
                        ..Params::default()
                    };
                    worst = worst.min(p.throughput() / p.optimal().throughput());
                }
            }
        }
        assert!(close(worst, 0.58, 0.005), "{worst}");
    }

    /// "For any hit rate below 1, there is a maximum speedup which can be achieved
    /// regardless of how low s_tp is" (Amdahl: 1/(1-h)), "independent of p_dyn"; and for
    /// the same s_tp a higher p_dyn gives a higher speedup.
    #[test]
    fn speedup_is_bounded_by_amdahl_and_grows_with_p_dyn() {
        for h in [0.25, 0.5, 0.75] {
            for p_dyn in [0.2, 0.5, 1.0] {
                let p = Params {
                    s_tp: 1e-6,
                    p_dyn,
                    h,
                    ..Params::default()
                };
                assert!(close(p.speedup(), 1.0 / (1.0 - h), 1e-3), "h={h} p={p_dyn}");
            }
            let s = |p_dyn| {
                Params {
                    s_tp: 10.0,
                    p_dyn,
                    h,
                    ..Params::default()
                }
                .speedup()
            };
            assert!(s(1.0) > s(0.5) && s(0.5) > s(0.2));
        }
    }

    /// "Near optimal when the cost for generating dynamic pages is high (s_tp low)".
    #[test]
    fn near_optimal_when_pages_are_expensive() {
        let p = Params {
            s_tp: 1.0,
            p_dyn: 1.0,
            h: 0.75,
            ..Params::default()
        };
        assert!(p.throughput() / p.optimal().throughput() > 0.99);
    }

    /// §3.1's arithmetic the model rests on: a cache at 190 requests/s (a new connection per
    /// request) and a server program at 290/s combine to "about 120 requests/second"; with
    /// long-lived connections (430/s) to 175/s.
    #[test]
    fn section_3_1_combined_rates() {
        let combine = |a: f64, b: f64| 1.0 / (1.0 / a + 1.0 / b);
        assert!(close(combine(190.0, 290.0), 115.0, 5.0));
        assert!(close(combine(430.0, 290.0), 175.0, 2.0));
        // And equation 2 with every request a dynamic hit is c_tp itself.
        let p = Params {
            h: 1.0,
            p_dyn: 1.0,
            ..Params::default()
        };
        assert!(close(p.throughput(), 175.0, 1e-9));
    }

    /// Figures 13 and 14: "Since ICAP is much more efficient than CGI … the cache node can
    /// support fewer Web server nodes".
    #[test]
    fn icap_nodes_fewer_than_cgi() {
        for h in [0.25, 0.5, 1.0] {
            for s in [1.0, 5.0, 20.0] {
                let n = |c1_tp| {
                    Params {
                        c1_tp,
                        s_tp: s,
                        p_dyn: 0.2,
                        h,
                        ..Params::default()
                    }
                    .nodes()
                };
                assert!(n(300.0) < n(20.0), "h={h} s={s}");
            }
        }
        let figs = figures(&Params::default());
        assert_eq!(
            figs.iter().map(|f| f.number).collect::<Vec<_>>(),
            [7, 8, 9, 10, 11, 12, 13, 14]
        );
    }
}
