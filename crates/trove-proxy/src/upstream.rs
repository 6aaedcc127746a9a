//! One origin server address, as routes and the origin pool name it, and who chose it.

use std::sync::Arc;

use http::Uri;
use trove_tls::OriginConnector;

/// One origin server address, and for an `https` one how TLS is spoken to it. Two upstreams
/// are the same (and share pooled connections) only with the same TLS settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Upstream {
    pub host: String,
    pub port: u16,
    /// `Some` for an `https` upstream.
    pub tls: Option<Arc<OriginConnector>>,
}

/// Whether an upstream URL is `http` or `https`, before its TLS settings are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamScheme {
    Http,
    Https,
}

impl Upstream {
    /// A cleartext upstream.
    pub fn http(host: impl Into<String>, port: u16) -> Upstream {
        Upstream {
            host: host.into(),
            port,
            tls: None,
        }
    }

    /// Parses `http://host[:port][/]` or `https://host[:port][/]`; an `https` one still
    /// needs its connector ([`Upstream::tls`]) before it is used.
    pub fn parse(url: &str) -> Result<(Upstream, UpstreamScheme), String> {
        let uri: Uri = url.parse().map_err(|_| "not a URL".to_string())?;
        let (scheme, default_port) = match uri.scheme_str() {
            Some("http") => (UpstreamScheme::Http, 80),
            Some("https") => (UpstreamScheme::Https, 443),
            _ => return Err("scheme must be http or https".into()),
        };
        let host = uri.host().ok_or("no host")?.to_ascii_lowercase();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .map(str::to_string)
            .unwrap_or(host);
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err("upstream URLs may not carry a path".into());
        }
        Ok((
            Upstream {
                host,
                port: uri.port_u16().unwrap_or(default_port),
                tls: None,
            },
            scheme,
        ))
    }

    /// Whether connections to it speak TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// `host:port` for `Host` headers and logs (port omitted when the scheme's default).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.is_tls() { 443 } else { 80 };
        if self.port == default {
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
