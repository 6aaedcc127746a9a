//! A client for trove's admin API (docs/api.md), over TCP or a Unix socket, so a program or
//! an operator's script needs no curl gymnastics: `put`, `get`, `delete`, `invalidate`
//! (and the shorthands `purge_url`, `purge_tag`, …), listings, stats and bans.
//!
//! One [`Client`] keeps one HTTP/1.1 connection alive and sends its calls over it in turn
//! (reconnecting when the server closed it): connection set-up dominated the cost of
//! DynamicWeb's API (seed 002, Figure 5), and it dominates here too (BENCHMARKS.md).
//! [`Reuse::NewConnectionPerCall`] exists to measure that.
//!
//! Built on hyper's low-level client connection (`hyper::client::conn::http1`) over a
//! tokio `TcpStream` or `UnixStream`: the same HTTP stack as the server, no pool to
//! configure, and Unix sockets without another crate. JSON with serde, using the wire
//! types of `trove-api` that the server uses too.
//!
//! Storing an object with a tag and purging the tag (docs/api.md shows the same code):
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use bytes::Bytes;
//! use trove_client::wire::Mode;
//! use trove_client::{Client, Endpoint, PutOptions};
//!
//! async fn publish(token: &str, body: Bytes) -> anyhow::Result<()> {
//!     // An address that does not parse is a message (a `String`), not an error type.
//!     let api: Endpoint = "unix:/run/trove/admin-9090.sock"
//!         .parse()
//!         .map_err(anyhow::Error::msg)?;
//!     let c = Client::new(api, Some(token));
//!     let opts = PutOptions {
//!         ttl: Some(Duration::from_secs(600)),
//!         tags: vec!["product-42".into()],
//!         ..Default::default()
//!     };
//!     c.put("http://shop.example.com/products/42", body, &opts).await?;
//!     c.purge_tag("product-42", Mode::Hard).await?;
//!     Ok(())
//! }
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
pub use trove_api as wire;
use trove_api::{Ack, Invalidate, Mode};

/// Where the admin API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    /// `127.0.0.1:9090`, `http://127.0.0.1:9090`, or a socket path (`/run/trove.sock`,
    /// `unix:/run/trove.sock`).
    fn from_str(s: &str) -> Result<Endpoint, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Endpoint::Unix(p.into()));
        }
        if s.starts_with('/') || s.starts_with('.') {
            return Ok(Endpoint::Unix(s.into()));
        }
        let addr = s.strip_prefix("http://").unwrap_or(s).trim_end_matches('/');
        addr.parse()
            .map(Endpoint::Tcp)
            .map_err(|_| format!("{s:?}: neither an address (127.0.0.1:9090) nor a socket path"))
    }
}

/// Whether calls share one kept-alive connection (the default) or open one each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reuse {
    #[default]
    KeepAlive,
    NewConnectionPerCall,
}

/// What went wrong with a call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API refused the call (a 4xx or 5xx with a JSON error).
    #[error("{status}: {code}: {message}")]
    Api {
        status: StatusCode,
        code: String,
        message: String,
    },
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("unexpected answer: {0}")]
    Protocol(String),
    #[error("timed out")]
    Timeout,
}

impl ClientError {
    /// The API's error code (`unauthorized`, `unknown-cache`, …), if it refused the call.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A raw answer: status, fields, body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A stored object as `get` returns it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub tags: Vec<String>,
    pub cache: Option<String>,
}

/// What a put stores besides the body.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// Freshness lifetime (`Cache-Control: max-age`, unless `fields` set one).
    pub ttl: Option<Duration>,
    pub tags: Vec<String>,
    /// A configured named cache.
    pub cache: Option<String>,
    /// Status code (200 when unset).
    pub status: Option<u16>,
    pub content_type: Option<String>,
    /// More stored response fields.
    pub fields: Vec<(String, String)>,
}

/// A client of one trove's admin API.
pub struct Client {
    endpoint: Endpoint,
    auth: Option<HeaderValue>,
    reuse: Reuse,
    timeout: Duration,
    conn: tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
}

fn query(pairs: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        q.append_pair(k, v);
    }
    q.finish()
}

fn segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

impl Client {
    /// A client of the API at `endpoint`, sending `token` as the bearer token.
    pub fn new(endpoint: Endpoint, token: Option<&str>) -> Client {
        Client {
            endpoint,
            auth: token.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()),
            reuse: Reuse::KeepAlive,
            timeout: Duration::from_secs(30),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    pub fn with_reuse(mut self, reuse: Reuse) -> Client {
        self.reuse = reuse;
        self
    }

    /// The bound on each call (30 s by default).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, ClientError> {
        macro_rules! handshake {
            ($stream:expr) => {{
                let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new($stream))
                    .await
                    .map_err(ClientError::Http)?;
                tokio::spawn(conn);
                send
            }};
        }
        Ok(match &self.endpoint {
            Endpoint::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a)
                    .await
                    .map_err(ClientError::Connect)?;
                let _ = s.set_nodelay(true);
                handshake!(s)
            }
            Endpoint::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p)
                    .await
                    .map_err(ClientError::Connect)?;
                handshake!(s)
            }
        })
    }

    /// Sends one request (`path_and_query` under the API root, e.g. `/v1/stats`) and
    /// returns the answer whatever its status.
    pub async fn raw(
        &self,
        method: Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, ClientError> {
        tokio::time::timeout(
            self.timeout,
            self.raw_inner(method, path_and_query, headers, body),
        )
        .await
        .map_err(|_| ClientError::Timeout)?
    }

    async fn raw_inner(
        &self,
        method: Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, ClientError> {
        let build = || {
            let mut req = Request::builder()
                .method(method.clone())
                .uri(path_and_query)
                .body(Full::new(body.clone()))
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            let h = req.headers_mut();
            *h = headers.clone();
            h.insert(header::HOST, HeaderValue::from_static("trove"));
            if let Some(a) = &self.auth {
                if !h.contains_key(header::AUTHORIZATION) {
                    h.insert(header::AUTHORIZATION, a.clone());
                }
            }
            if self.reuse == Reuse::NewConnectionPerCall {
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, ClientError>(req)
        };
        let mut guard = self.conn.lock().await;
        // A kept connection the server closed is found out here: retry once on a new one
        // (every call is safe to repeat: puts replace, invalidations are idempotent).
        for attempt in 0..2 {
            let mut send = match guard.take() {
                Some(s) if self.reuse == Reuse::KeepAlive && !s.is_closed() => s,
                _ => self.connect().await?,
            };
            if send.ready().await.is_err() {
                if attempt == 0 {
                    continue;
                }
                return Err(ClientError::Protocol("connection closed".into()));
            }
            let resp = match send.send_request(build()?).await {
                Ok(r) => r,
                Err(e) if attempt == 0 && (e.is_closed() || e.is_incomplete_message()) => continue,
                Err(e) => return Err(e.into()),
            };
            let (parts, body) = resp.into_parts();
            let body = body.collect().await?.to_bytes();
            if self.reuse == Reuse::KeepAlive {
                *guard = Some(send);
            }
            return Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            });
        }
        Err(ClientError::Protocol("connection closed".into()))
    }

    /// A call whose success answer is JSON.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path_and_query: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<T, ClientError> {
        let a = self.raw(method, path_and_query, headers, body).await?;
        let a = refused(a)?;
        serde_json::from_slice(&a.body).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Stores `body` under `url` (replacing every variant stored for it).
    pub async fn put(&self, url: &str, body: Bytes, opts: &PutOptions) -> Result<Ack, ClientError> {
        let mut pairs: Vec<(&str, String)> = vec![("url", url.to_string())];
        if let Some(t) = opts.ttl {
            pairs.push(("ttl", t.as_secs().to_string()));
        }
        if let Some(s) = opts.status {
            pairs.push(("status", s.to_string()));
        }
        if let Some(c) = &opts.cache {
            pairs.push(("cache", c.clone()));
        }
        for t in &opts.tags {
            pairs.push(("tag", t.clone()));
        }
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut h = HeaderMap::new();
        if let Some(ct) = &opts.content_type {
            let v = HeaderValue::from_str(ct).map_err(|e| ClientError::Protocol(e.to_string()))?;
            h.insert(header::CONTENT_TYPE, v);
        }
        for (n, v) in &opts.fields {
            let v = HeaderValue::from_str(&format!("{n}: {v}"))
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            h.append(wire::SET_FIELD, v);
        }
        let path = format!("/v1/object?{}", query(&refs));
        self.call(Method::PUT, &path, h, body).await
    }

    /// The stored object for `url` (its newest variant), or `None`.
    pub async fn get(&self, url: &str) -> Result<Option<Stored>, ClientError> {
        let path = format!("/v1/object?{}", query(&[("url", url)]));
        let a = self
            .raw(Method::GET, &path, HeaderMap::new(), Bytes::new())
            .await?;
        if a.status == StatusCode::NOT_FOUND && is_json(&a) {
            return Ok(None);
        }
        let a = refused(a)?;
        let text = |name: &str| {
            a.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let tags = text(wire::TAGS_FIELD)
            .map(|t| t.split(' ').map(str::to_string).collect())
            .unwrap_or_default();
        let cache = text(wire::CACHE_FIELD);
        Ok(Some(Stored {
            status: a.status,
            headers: a.headers,
            body: a.body,
            tags,
            cache,
        }))
    }

    /// Every stored variant of `url`, with metadata.
    pub async fn meta(&self, url: &str) -> Result<wire::ObjectMeta, ClientError> {
        let path = format!("/v1/meta?{}", query(&[("url", url)]));
        self.call(Method::GET, &path, HeaderMap::new(), Bytes::new())
            .await
    }

    /// Removes every variant of `url`.
    pub async fn delete(&self, url: &str) -> Result<Ack, ClientError> {
        let path = format!("/v1/object?{}", query(&[("url", url)]));
        self.call(Method::DELETE, &path, HeaderMap::new(), Bytes::new())
            .await
    }

    /// Any invalidation.
    pub async fn invalidate(&self, what: &Invalidate) -> Result<Ack, ClientError> {
        self.invalidate_waiting(what, None).await
    }

    /// [`Client::invalidate`]; in a cluster with a bus, the answer waits up to `wait_ms` for
    /// every live node to apply it (`Ack::not_applied_by` names those that did not).
    pub async fn invalidate_waiting(
        &self,
        what: &Invalidate,
        wait_ms: Option<u64>,
    ) -> Result<Ack, ClientError> {
        let body = serde_json::to_vec(what).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let path = match wait_ms {
            Some(ms) => format!("/v1/invalidate?wait_ms={ms}"),
            None => "/v1/invalidate".to_string(),
        };
        self.call(Method::POST, &path, h, body.into()).await
    }

    pub async fn purge_url(&self, url: &str, mode: Mode) -> Result<Ack, ClientError> {
        self.invalidate(&Invalidate {
            url: Some(url.into()),
            mode,
            ..Default::default()
        })
        .await
    }

    pub async fn purge_tag(&self, tag: &str, mode: Mode) -> Result<Ack, ClientError> {
        self.invalidate(&Invalidate {
            tag: Some(tag.into()),
            mode,
            ..Default::default()
        })
        .await
    }

    pub async fn purge_cache(&self, name: &str, mode: Mode) -> Result<Ack, ClientError> {
        self.invalidate(&Invalidate {
            cache: Some(name.into()),
            mode,
            ..Default::default()
        })
        .await
    }

    pub async fn purge_prefix(&self, prefix: &str, mode: Mode) -> Result<Ack, ClientError> {
        self.invalidate(&Invalidate {
            prefix: Some(prefix.into()),
            mode,
            ..Default::default()
        })
        .await
    }

    /// A ban: `subject` `url` or `header:NAME`, `op` `==`, `^=` or `~`.
    pub async fn ban(
        &self,
        subject: &str,
        op: &str,
        value: &str,
        mode: Mode,
    ) -> Result<Ack, ClientError> {
        self.invalidate(&Invalidate {
            ban: Some(wire::BanPattern {
                subject: subject.into(),
                op: op.into(),
                value: value.into(),
            }),
            mode,
            ..Default::default()
        })
        .await
    }

    /// The objects carrying `tag` (at most `limit` URLs) and how many.
    pub async fn tag(&self, tag: &str, limit: usize) -> Result<wire::Listing, ClientError> {
        let path = format!("/v1/tags/{}?limit={limit}", segment(tag));
        self.call(Method::GET, &path, HeaderMap::new(), Bytes::new())
            .await
    }

    /// The objects in a named cache (at most `limit` URLs) and how many.
    pub async fn cache(&self, name: &str, limit: usize) -> Result<wire::Listing, ClientError> {
        let path = format!("/v1/caches/{}?limit={limit}", segment(name));
        self.call(Method::GET, &path, HeaderMap::new(), Bytes::new())
            .await
    }

    /// Every configured named cache with its count.
    pub async fn caches(&self) -> Result<Vec<wire::NamedCache>, ClientError> {
        self.call(Method::GET, "/v1/caches", HeaderMap::new(), Bytes::new())
            .await
    }

    pub async fn stats(&self) -> Result<wire::Stats, ClientError> {
        self.call(Method::GET, "/v1/stats", HeaderMap::new(), Bytes::new())
            .await
    }

    /// `GET /v1/cluster`: the cluster as the node sees it; with `url`, which node owns it.
    pub async fn cluster(&self, url: Option<&str>) -> Result<wire::ClusterStatus, ClientError> {
        let path = match url {
            Some(u) => format!("/v1/cluster?{}", query(&[("url", u)])),
            None => "/v1/cluster".to_string(),
        };
        self.call(Method::GET, &path, HeaderMap::new(), Bytes::new())
            .await
    }

    pub async fn bans(&self) -> Result<Vec<wire::Ban>, ClientError> {
        self.call(Method::GET, "/v1/bans", HeaderMap::new(), Bytes::new())
            .await
    }
}

fn is_json(a: &Answer) -> bool {
    a.headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"))
}

/// A refusal as an error; a success as itself.
fn refused(a: Answer) -> Result<Answer, ClientError> {
    if a.status.is_success() {
        return Ok(a);
    }
    match serde_json::from_slice::<wire::ErrorBody>(&a.body) {
        Ok(e) => Err(ClientError::Api {
            status: a.status,
            code: e.error.code,
            message: e.error.message,
        }),
        Err(_) => Err(ClientError::Api {
            status: a.status,
            code: "http".into(),
            message: String::from_utf8_lossy(&a.body).into_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            "127.0.0.1:9090".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp("127.0.0.1:9090".parse().unwrap())
        );
        assert_eq!(
            "http://127.0.0.1:9090/".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp("127.0.0.1:9090".parse().unwrap())
        );
        assert_eq!(
            "unix:/run/t.sock".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/run/t.sock".into())
        );
        assert!("nonsense".parse::<Endpoint>().is_err());
    }
}
