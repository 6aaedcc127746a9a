//! One origin server address, as routes and the origin pool name it.

use http::Uri;

/// One origin server address (`http` only for now).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Upstream {
    pub host: String,
    pub port: u16,
}

impl Upstream {
    /// Parses `http://host[:port][/]`.
    pub fn parse(url: &str) -> Result<Upstream, String> {
        let uri: Uri = url.parse().map_err(|_| "not a URL".to_string())?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err("https upstreams are not supported yet".into()),
            _ => return Err("scheme must be http".into()),
        }
        let host = uri.host().ok_or("no host")?.to_ascii_lowercase();
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err("upstream URLs may not carry a path".into());
        }
        Ok(Upstream {
            host,
            port: uri.port_u16().unwrap_or(80),
        })
    }

    /// `host:port` for `Host` headers and logs (port omitted when 80).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// The origin servers a request may go to, in the order to try them: a shared list and the
/// position round robin starts from. Cheap to make per request (no copy of the list), so a
/// hit, which never goes to an origin, costs nothing for it.
#[derive(Debug, Clone)]
pub struct Upstreams {
    list: std::sync::Arc<[Upstream]>,
    start: usize,
}

impl Upstreams {
    /// Tries `list` in order from `start` (wrapping).
    pub fn rotated(list: std::sync::Arc<[Upstream]>, start: usize) -> Upstreams {
        Upstreams { list, start }
    }

    /// A single origin (a forward-proxy request names its own).
    pub fn one(u: Upstream) -> Upstreams {
        Upstreams {
            list: std::sync::Arc::from(vec![u]),
            start: 0,
        }
    }

    /// The upstreams in the order to try them.
    pub fn iter(&self) -> impl Iterator<Item = &Upstream> {
        let n = self.list.len();
        (0..n).map(move |i| &self.list[(self.start + i) % n])
    }
}
