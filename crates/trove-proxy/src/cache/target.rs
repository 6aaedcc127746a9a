//! Step 1 of the request path: where is this request going, and what is its cache key?

use http::header::HOST;
use http::{HeaderValue, StatusCode};

use crate::client::head::RequestHead;
use crate::reply::Reply;
use crate::route::{Upstream, Upstreams};
use crate::settings::Mode;
use crate::state::Shared;
use trove_cache::Outcome;

/// The resolved target of a request.
#[derive(Debug, Clone)]
pub struct Target {
    /// The normalised absolute URI: the primary cache key.
    pub key: String,
    /// Origin servers to try, in order.
    pub upstreams: Upstreams,
    /// `Host` to send to the origin.
    pub host: HeaderValue,
    /// The origin-form request target (path and query).
    pub path: String,
}

fn authority_key(host: &str, port: Option<u16>) -> String {
    let host = host.to_ascii_lowercase();
    match port {
        Some(p) if p != 80 => format!("{host}:{p}"),
        _ => host,
    }
}

fn split_host(h: &str) -> (String, Option<u16>) {
    if let Some(rest) = h.strip_prefix('[') {
        if let Some((inner, after)) = rest.split_once(']') {
            let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
            return (format!("[{inner}]"), port);
        }
    }
    match h.rsplit_once(':') {
        Some((host, p)) if !host.contains(':') => (host.to_string(), p.parse().ok()),
        _ => (h.to_string(), None),
    }
}

/// Resolves the request's target, or the reply refusing it.
pub fn resolve(shared: &Shared, req: &RequestHead, mode: Mode) -> Result<Target, Box<Reply>> {
    let path = req
        .target
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    let path = if path.starts_with('/') { path } else { "/" };
    if let Some(scheme) = req.target.scheme_str() {
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(Box::new(Reply::simple(
                StatusCode::NOT_IMPLEMENTED,
                Outcome::None,
                "only http:// URLs can be proxied; use CONNECT for https",
            )));
        }
        let host = req.target.host().unwrap_or("");
        if host.is_empty() {
            return Err(Box::new(Reply::simple(
                StatusCode::BAD_REQUEST,
                Outcome::None,
                "no host in URL",
            )));
        }
        let port = req.target.port_u16();
        let authority = authority_key(host, port);
        let key = key_of(&authority, path);
        if mode == Mode::Forward {
            if !shared.safe_ports.contains(port.unwrap_or(80)) {
                return Err(Box::new(Reply::simple(
                    StatusCode::FORBIDDEN,
                    Outcome::Denied,
                    "this port may not be reached through the proxy ([access] safe_ports)",
                )));
            }
            let upstream = Upstream {
                host: host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_ascii_lowercase(),
                port: port.unwrap_or(80),
            };
            return Ok(Target {
                key,
                upstreams: Upstreams::one(upstream),
                host: HeaderValue::from_str(&authority).map_err(|_| Box::new(bad_host()))?,
                path: path.to_string(),
            });
        }
        // A reverse proxy must accept absolute-form too (RFC 9112 §3.2.2) but routes it
        // like any other request: by host.
        return route(shared, &authority, path, key);
    }
    let host = req
        .headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .trim();
    if mode == Mode::Forward && shared.routes.is_empty() {
        return Err(Box::new(Reply::simple(
            StatusCode::BAD_REQUEST,
            Outcome::None,
            "this is a forward proxy: send an absolute URI (http://host/path)",
        )));
    }
    if host.is_empty() {
        return Err(Box::new(bad_host()));
    }
    let (h, port) = split_host(host);
    let authority = authority_key(&h, port);
    let key = key_of(&authority, path);
    route(shared, &authority, path, key)
}

fn route(shared: &Shared, authority: &str, path: &str, key: String) -> Result<Target, Box<Reply>> {
    let Some(upstreams) = shared.routes.select(authority, path) else {
        return Err(Box::new(Reply::simple(
            StatusCode::MISDIRECTED_REQUEST,
            Outcome::None,
            "no origin is configured for this host and path",
        )));
    };
    Ok(Target {
        key,
        upstreams,
        host: HeaderValue::from_str(authority).map_err(|_| Box::new(bad_host()))?,
        path: path.to_string(),
    })
}

/// The cache key: the normalised absolute URI (RFC 9111 §2), the same whether the request
/// came in forward (absolute-form) or reverse (Host + path).
fn key_of(authority: &str, path: &str) -> String {
    let raw = format!("http://{authority}{path}");
    match raw.parse::<http::Uri>() {
        Ok(uri) => trove_http::key::cache_key(&uri),
        Err(_) => raw,
    }
}

fn bad_host() -> Reply {
    Reply::simple(StatusCode::BAD_REQUEST, Outcome::None, "invalid Host")
}
