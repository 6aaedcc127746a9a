//! One origin server address, as routes and the origin pool name it, and who chose it.

use std::sync::Arc;

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

/// Who chose where a request goes, which decides whether the destination guard
/// (`crate::destination`) checks the connections made for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Chooser {
    /// The operator, in an `[[origin]]` route: trusted configuration, never checked.
    Operator,
    /// The client (a forward-proxy request names its own origin): every address connected
    /// to is checked for the client (`destination::Reach`).
    Client,
}

/// The origin servers a request may go to, in the order to try them: a shared list and the
/// position round robin starts from. Cheap to make per request (no copy of the list), so a
/// hit, which never goes to an origin, costs nothing for it.
#[derive(Debug, Clone)]
pub struct Upstreams {
    list: Arc<[Upstream]>,
    start: usize,
    chooser: Chooser,
}

impl Upstreams {
    /// Tries `list` in order from `start` (wrapping): an operator's route.
    pub fn rotated(list: Arc<[Upstream]>, start: usize) -> Upstreams {
        Upstreams {
            list,
            start,
            chooser: Chooser::Operator,
        }
    }

    /// A single origin that a forward-proxy request names: chosen by the client, so the
    /// destination guard checks every connection made to it.
    pub fn one(u: Upstream) -> Upstreams {
        Upstreams {
            list: Arc::from(vec![u]),
            start: 0,
            chooser: Chooser::Client,
        }
    }

    /// Who chose these upstreams.
    pub fn chooser(&self) -> Chooser {
        self.chooser
    }

    /// The upstreams in the order to try them.
    pub fn iter(&self) -> impl Iterator<Item = &Upstream> {
        let n = self.list.len();
        (0..n).map(move |i| &self.list[(self.start + i) % n])
    }
}
