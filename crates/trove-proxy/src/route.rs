//! Where a request goes: the origin for a forward-proxy request is in its absolute URI; a
//! reverse-proxy request is matched against the `[[origin]]` routes by Host and path prefix.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::settings::OriginRoute;
pub use crate::upstream::{Upstream, Upstreams};

#[derive(Debug)]
struct Route {
    host: Option<String>,
    prefix: String,
    upstreams: std::sync::Arc<[Upstream]>,
    next: AtomicUsize,
}

/// The reverse-proxy routing table.
#[derive(Debug, Default)]
pub struct Routes {
    routes: Vec<Route>,
}

impl Routes {
    /// Builds the table; routes were validated with the settings.
    pub fn new(routes: &[OriginRoute]) -> Routes {
        Routes {
            routes: routes
                .iter()
                .map(|r| Route {
                    host: (r.host != "*").then(|| r.host.to_ascii_lowercase()),
                    prefix: r.path_prefix.clone(),
                    upstreams: r
                        .upstreams
                        .iter()
                        .filter_map(|u| Upstream::parse(u).ok())
                        .collect(),
                    next: AtomicUsize::new(0),
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The upstreams for `host` and `path`, in the order to try them: the longest matching
    /// prefix wins, an exact host beats `*`, and the start rotates for round robin.
    pub fn select(&self, host: &str, path: &str) -> Option<Upstreams> {
        let host = strip_port(host);
        let best = self
            .routes
            .iter()
            .filter(|r| {
                r.host
                    .as_deref()
                    .is_none_or(|h| h.eq_ignore_ascii_case(host))
            })
            .filter(|r| path.starts_with(&r.prefix))
            .max_by_key(|r| (r.prefix.len(), r.host.is_some()))?;
        let n = best.upstreams.len();
        if n == 0 {
            return None;
        }
        let start = best.next.fetch_add(1, Ordering::Relaxed) % n;
        Some(Upstreams::rotated(
            std::sync::Arc::clone(&best.upstreams),
            start,
        ))
    }
}

fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(host: &str, prefix: &str, up: &[&str]) -> OriginRoute {
        OriginRoute {
            host: host.into(),
            path_prefix: prefix.into(),
            upstreams: up.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn longest_prefix_and_exact_host_win() {
        let r = Routes::new(&[
            route("*", "/", &["http://127.0.0.1:1"]),
            route("*", "/api/", &["http://127.0.0.1:2"]),
            route("example.com", "/", &["http://127.0.0.1:3"]),
        ]);
        assert_eq!(
            r.select("other", "/x").unwrap().iter().next().unwrap().port,
            1
        );
        assert_eq!(
            r.select("other", "/api/v1")
                .unwrap()
                .iter()
                .next()
                .unwrap()
                .port,
            2
        );
        assert_eq!(
            r.select("Example.COM:8080", "/x")
                .unwrap()
                .iter()
                .next()
                .unwrap()
                .port,
            3
        );
    }

    #[test]
    fn upstreams_rotate() {
        let r = Routes::new(&[route("*", "/", &["http://a:1", "http://b:2"])]);
        let first = r.select("h", "/").unwrap().iter().next().unwrap().port;
        let second = r.select("h", "/").unwrap().iter().next().unwrap().port;
        assert_ne!(first, second);
    }

    #[test]
    fn bad_upstreams_are_refused() {
        assert!(Upstream::parse("https://a").is_err());
        assert!(Upstream::parse("ftp://a").is_err());
        assert!(Upstream::parse("http://a/path").is_err());
        assert_eq!(Upstream::parse("http://a").unwrap().port, 80);
    }
}
