//! Where a request goes: the origin for a forward-proxy request is in its absolute URI; a
//! reverse-proxy request is matched against the `[[origin]]` routes by host and path prefix.
//!
//! Routes are matched against the request's normalised target ([`trove_http::Target`]), never
//! the raw request line, and a route's own host and prefix are normalised the same way when the
//! table is built, so `/%61pi/x` is matched as `/api/x` and `Host: Victim.Example.` as
//! `victim.example`: the route always serves the URL the cache key names.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use trove_tls::{OriginConnector, OriginTlsSettings};

use crate::settings::OriginRoute;
use crate::upstream::UpstreamScheme;
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
    /// Builds the table; routes were validated with the settings. Each distinct set of TLS
    /// settings gets one connector (one client configuration, one session cache), shared by
    /// every route that has it; `insecure_skip_verify` is logged here, at every start and
    /// reload.
    pub fn new(routes: &[OriginRoute]) -> Routes {
        let mut connectors: HashMap<OriginTlsSettings, Arc<OriginConnector>> = HashMap::new();
        let mut connector = |tls: &OriginTlsSettings| -> Option<Arc<OriginConnector>> {
            if let Some(c) = connectors.get(tls) {
                return Some(Arc::clone(c));
            }
            let c = match OriginConnector::new(tls) {
                Ok(c) => Arc::new(c),
                Err(e) => {
                    tracing::error!(error = %e, "origin TLS settings unusable");
                    return None;
                }
            };
            connectors.insert(tls.clone(), Arc::clone(&c));
            Some(c)
        };
        let defaults = OriginTlsSettings::default();
        let mut table = Vec::with_capacity(routes.len());
        for r in routes {
            let tls = r.tls.as_ref().unwrap_or(&defaults);
            let mut upstreams = Vec::new();
            for u in &r.upstreams {
                let Ok((mut up, scheme)) = Upstream::parse(u) else {
                    continue;
                };
                if scheme == UpstreamScheme::Https {
                    let Some(c) = connector(tls) else { continue };
                    if c.skips_verification() {
                        tracing::warn!(
                            upstream = %u,
                            "TLS CERTIFICATE VERIFICATION IS OFF for this upstream (tls.insecure_skip_verify): anyone on the network path can read and change its traffic"
                        );
                    }
                    up.tls = Some(c);
                }
                upstreams.push(up);
            }
            table.push(Route {
                host: (r.host != "*").then(|| normal_host(&r.host)),
                prefix: trove_http::target::normal_path(&r.path_prefix)
                    .unwrap_or_else(|| r.path_prefix.clone()),
                upstreams: upstreams.into(),
                next: AtomicUsize::new(0),
            });
        }
        Routes { routes: table }
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
            tls: None,
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
        assert!(Upstream::parse("ftp://a").is_err());
        assert!(Upstream::parse("http://a/path").is_err());
        assert_eq!(Upstream::parse("http://a").unwrap().0.port, 80);
        let (https, scheme) = Upstream::parse("https://a").unwrap();
        assert_eq!((https.port, scheme), (443, UpstreamScheme::Https));
    }

    /// An https upstream gets a connector, and routes with the same TLS settings share it
    /// (one session cache, pooled connections interchangeable).
    #[test]
    fn https_upstreams_get_a_shared_connector() {
        let r = Routes::new(&[
            route(
                "a.example",
                "/",
                &["https://127.0.0.1:1", "http://127.0.0.1:2"],
            ),
            route("b.example", "/", &["https://127.0.0.1:1"]),
        ]);
        let a: Vec<Upstream> = r
            .select("a.example", "/")
            .unwrap()
            .iter()
            .cloned()
            .collect();
        let b = r
            .select("b.example", "/")
            .unwrap()
            .iter()
            .next()
            .unwrap()
            .clone();
        let tls = a.iter().find(|u| u.is_tls()).unwrap();
        assert!(a.iter().any(|u| !u.is_tls()));
        assert!(Arc::ptr_eq(
            tls.tls.as_ref().unwrap(),
            b.tls.as_ref().unwrap()
        ));
        assert_eq!(tls, &b);
        assert_eq!(b.authority(), "127.0.0.1:1");
    }
}
