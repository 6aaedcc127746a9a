//! What a sweep prints: a text table ([`text`]), JSON (the [`crate::sweep::Report`] as serde
//! writes it) and a self-contained HTML page with charts ([`html`]).

pub mod html;
pub mod text;

/// `1.5 GiB`, `64 MiB`, `unbounded`.
pub fn size(n: Option<u64>) -> String {
    match n {
        None => "unbounded".into(),
        Some(0) => "none".into(),
        Some(n) => bytes(n),
    }
}

pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_well() {
        assert_eq!(super::size(None), "unbounded");
        assert_eq!(super::size(Some(64 << 20)), "64 MiB");
        assert_eq!(super::bytes(1536), "1.5 KiB");
        assert_eq!(super::bytes(10), "10 B");
    }
}
