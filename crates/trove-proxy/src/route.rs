//! Where a request goes: the origin for a forward-proxy request is in its absolute URI; a
//! reverse-proxy request is matched against the `[[origin]]` routes by host and path prefix.
//!
//! Routes are matched against the request's normalised target ([`trove_http::Target`]), never
//! the raw request line, and a route's own host and prefix are normalised the same way when the
//! table is built, so `/%61pi/x` is matched as `/api/x` and `Host: Victim.Example.` as
//! `victim.example`: the route always serves the URL the cache key names.

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
                    host: (r.host != "*").then(|| normal_host(&r.host)),
                    prefix: trove_http::target::normal_path(&r.path_prefix)
                        .unwrap_or_else(|| r.path_prefix.clone()),
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

    /// The upstreams for a normalised `host` (without port) and `path`, in the order to try
    /// them: the longest matching prefix wins, an exact host beats `*`, and the start rotates
    /// for round robin.
    pub fn select(&self, host: &str, path: &str) -> Option<Upstreams> {
        let best = self
            .routes
            .iter()
            .filter(|r| r.host.as_deref().is_none_or(|h| h == host))
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

/// A route's host in the form request targets have (lowercase, no trailing dot, canonical
/// IP literals); settings validation refused any that does not parse.
fn normal_host(host: &str) -> String {
    trove_http::target::parse_authority(host)
        .map(|a| a.host)
        .unwrap_or_else(|_| host.to_ascii_lowercase())
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
            r.select("example.com", "/x")
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
