//! Line charts as inline SVG, drawn on the server: the status page needs no script and
//! no file besides itself.

use std::fmt::Write;

/// One line: its name, its colour, and `(x, y)` points.
pub struct Series<'a> {
    pub name: &'a str,
    pub colour: &'a str,
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 640.0;
const H: f64 = 140.0;
const LEFT: f64 = 84.0;
const BOTTOM: f64 = 20.0;

/// A chart of `series` over `x_span` seconds ending at `x_end`; `unit` formats y values.
pub fn lines(
    title: &str,
    series: &[Series<'_>],
    x_end: f64,
    x_span: f64,
    unit: fn(f64) -> String,
) -> String {
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y_top = nice_ceiling(y_max);
    let x0 = x_end - x_span;
    let px = |x: f64| LEFT + (x - x0) / x_span * (W - LEFT - 8.0);
    let py = |y: f64| 8.0 + (1.0 - y / y_top) * (H - BOTTOM - 8.0);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<figure><figcaption>{title}</figcaption><svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{title}">"##
    );
    for frac in [0.0, 0.5, 1.0] {
        let y = py(y_top * frac);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
            W - 8.0,
            LEFT - 6.0,
            y + 4.0,
            unit(y_top * frac)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{LEFT}" y="{}" font-size="11">−{} min</text><text x="{}" y="{}" font-size="11" text-anchor="end">now</text>"##,
        H - 4.0,
        (x_span / 60.0).round(),
        W - 8.0,
        H - 4.0
    );
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.0 >= x0)
            .map(|p| format!("{:.1},{:.1}", px(p.0), py(p.1)))
            .collect();
        if pts.len() > 1 {
            let _ = write!(
                svg,
                r##"<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"/>"##,
                s.colour,
                pts.join(" ")
            );
        }
        let _ = write!(
            svg,
            r##"<rect x="{}" y="2" width="10" height="10" fill="{}"/><text x="{}" y="11" font-size="11">{}</text>"##,
            LEFT + 8.0 + i as f64 * 150.0,
            s.colour,
            LEFT + 22.0 + i as f64 * 150.0,
            s.name
        );
    }
    svg.push_str("</svg></figure>");
    svg
}

/// 1, 2 or 5 times a power of ten, at least `v` (and at least 1).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.3), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(4800.0), 5000.0);
    }

    #[test]
    fn draws_one_polyline_per_series_with_points() {
        let s = lines(
            "t",
            &[
                Series {
                    name: "a",
                    colour: "#000",
                    points: vec![(0.0, 1.0), (5.0, 2.0), (10.0, 3.0)],
                },
                Series {
                    name: "b",
                    colour: "#f00",
                    points: vec![(10.0, 1.0)],
                },
            ],
            10.0,
            900.0,
            |v| format!("{v}"),
        );
        assert_eq!(s.matches("<polyline").count(), 1);
        assert!(s.starts_with("<figure>") && s.ends_with("</figure>"));
    }
}
