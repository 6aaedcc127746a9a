//! Step 1 of the request path: where is this request going, and what is its cache key?
//!
//! The request line and `Host` are parsed once into a [`trove_http::Target`] (validated and
//! normalised; see that module for the rules), and everything after reads only that: the
//! route is chosen by its host and path, the cache key is its key, the upstream request goes
//! to its path with its authority as `Host`, invalidation and PURGE use its key, and the
//! access log prints it. No raw form of the target is read again, so the route and the key
//! cannot disagree.

use http::StatusCode;

use crate::client::head::RequestHead;
use crate::reply::Reply;
use crate::route::{Upstream, Upstreams};
use crate::settings::Mode;
use crate::state::Shared;
use trove_cache::Outcome;
use trove_http::{Target as Url, TargetError};

/// The resolved target of a request.
#[derive(Debug, Clone)]
pub struct Target {
    /// The normalised target URI: the cache key, the upstream request's path and `Host`.
    pub url: Url,
    /// Origin servers to try, in order.
    pub upstreams: Upstreams,
}

impl Target {
    /// The primary cache key.
    pub fn key(&self) -> &str {
        self.url.key()
    }
}

/// Resolves the request's target, or the reply refusing it.
pub fn resolve(shared: &Shared, req: &RequestHead, mode: Mode) -> Result<Target, Box<Reply>> {
    // First: a request that already passed through this cache goes nowhere.
    if super::headers::is_loop(&shared.via_name, &req.headers) {
        return Err(refuse(
            StatusCode::LOOP_DETECTED,
            Outcome::None,
            "forwarding loop detected",
        ));
    }
    if req.method == http::Method::CONNECT {
        // Authority-form names no resource; tunnels are the forward listener's service (the
        // connection handles them before this), never passed on to an origin.
        return Err(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            Outcome::None,
            "CONNECT is not served here",
        ));
    }
    let absolute = req.target.scheme().is_some();
    if mode == Mode::Forward && !absolute && shared.routes.is_empty() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            Outcome::None,
            "this is a forward proxy: send an absolute URI (http://host/path)",
        ));
    }
    let url = Url::from_request(&req.target, &req.headers, req.version).map_err(refused)?;
    if mode == Mode::Forward && absolute {
        if !shared.safe_ports.contains(url.port()) {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                Outcome::Denied,
                "this port may not be reached through the proxy ([access] safe_ports)",
            ));
        }
        let tls = if url.is_https() {
            match shared.forward_tls() {
                Some(c) => Some(c),
                None => {
                    return Err(refuse(
                        StatusCode::BAD_GATEWAY,
                        Outcome::None,
                        "TLS to origins is unavailable on this proxy (see its log)",
                    ))
                }
            }
        } else {
            None
        };
        let upstream = Upstream {
            host: url.connect_host().to_string(),
            port: url.port(),
            tls,
        };
        return Ok(Target {
            url,
            upstreams: Upstreams::one(upstream),
        });
    }
    // A reverse proxy accepts absolute-form too (RFC 9112 §3.2.2) and routes it like any
    // other request: by the target's host and path.
    let Some(upstreams) = shared.routes.select(url.host(), url.route_path()) else {
        return Err(refuse(
            StatusCode::MISDIRECTED_REQUEST,
            Outcome::None,
            "no origin is configured for this host and path",
        ));
    };
    Ok(Target { url, upstreams })
}

fn refused(e: TargetError) -> Box<Reply> {
    let status = match e {
        TargetError::Scheme => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::BAD_REQUEST,
    };
    refuse(status, Outcome::None, e.as_str())
}

fn refuse(status: StatusCode, outcome: Outcome, why: &'static str) -> Box<Reply> {
    Box::new(Reply::simple(status, outcome, why))
}
