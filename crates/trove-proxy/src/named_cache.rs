//! Named caches (partitions) of the config, matched to a request's target like `[[origin]]`
//! routes: the admin API invalidates and lists by their names.

use trove_http::Target;

use crate::settings::NamedCacheRoute;

/// The named caches of the config, matched like `[[origin]]` routes.
#[derive(Debug, Default)]
pub struct NamedCaches {
    routes: Vec<(Option<String>, String, String)>,
}

impl NamedCaches {
    pub fn new(routes: &[NamedCacheRoute]) -> NamedCaches {
        NamedCaches {
            routes: routes
                .iter()
                .map(|r| {
                    let host = (r.host != "*").then(|| r.host.to_ascii_lowercase());
                    let prefix = trove_http::target::normal_path(&r.path_prefix)
                        .unwrap_or_else(|| r.path_prefix.clone());
                    (host, prefix, r.name.clone())
                })
                .collect(),
        }
    }

    /// The named cache of a URL: the longest matching prefix, an exact host before `*`.
    pub fn select(&self, url: &Target) -> Option<&str> {
        self.routes
            .iter()
            .filter(|(h, _, _)| h.as_deref().is_none_or(|h| h == url.host()))
            .filter(|(_, p, _)| url.route_path().starts_with(p.as_str()))
            .max_by_key(|(h, p, _)| (p.len(), h.is_some()))
            .map(|(_, _, n)| n.as_str())
    }

    /// True when `name` is configured.
    pub fn knows(&self, name: &str) -> bool {
        self.routes.iter().any(|(_, _, n)| n == name)
    }

    /// Every configured name, once.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.routes.iter().map(|(_, _, n)| n.as_str()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}
