//! The admin API under `/v1/` (docs/api.md): put, get and delete objects, invalidate by
//! URL, tag, named cache, prefix or ban (hard or soft), list and count by tag and named
//! cache, store statistics and pending bans. The work is `trove_proxy::manage`'s; this is
//! the HTTP surface: the bearer token, the query strings, JSON in and out (serde, with the
//! wire types of `trove-api` that the client crate shares), bounded bodies, and a JSON error
//! with a 4xx for every refusal — checked whole before anything is applied.
//!
//! Dependencies: `subtle` compares the token in constant time (the RustCrypto project's
//! crate for exactly that); `form_urlencoded` and `percent-encoding` (the `url` crate's
//! parts) read query strings and path segments.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde::Serialize;
use trove_api as wire;
use trove_proxy::feed;
use trove_proxy::manage::{self, ManageError};
use trove_proxy::Shared;

/// Where the API finds the proxy's shared state: fixed, or the generation current after
/// reloads.
type SharedSource = Box<dyn Fn() -> Option<Arc<Shared>> + Send + Sync>;

/// The admin API: the proxy's shared state, the token, and the largest put accepted (the
/// last two changed by a reload: [`Api::set_token`], [`Api::set_max_body`]).
pub struct Api {
    shared: SharedSource,
    /// `None`: the API is disabled (no token configured).
    token: std::sync::RwLock<Option<Vec<u8>>>,
    max_body: std::sync::atomic::AtomicU64,
}

impl Api {
    /// An API over `shared`; without a token every call is refused (403, `disabled`).
    pub fn new(shared: Arc<Shared>, token: Option<String>, max_body: u64) -> Api {
        Api {
            shared: Box::new(move || Some(Arc::clone(&shared))),
            token: std::sync::RwLock::new(token.filter(|t| !t.is_empty()).map(String::into_bytes)),
            max_body: max_body.into(),
        }
    }

    /// Takes a new token (a reload); `None` disables the API. Calls already authorized
    /// finish; the next request on any connection needs the new one.
    pub fn set_token(&self, token: Option<String>) {
        let t = token.filter(|t| !t.is_empty()).map(String::into_bytes);
        *self.token.write().unwrap_or_else(|e| e.into_inner()) = t;
    }

    /// Takes a new largest put body (a reload).
    pub fn set_max_body(&self, max_body: u64) {
        self.max_body.store(max_body, Ordering::Relaxed);
    }

    fn max_body(&self) -> u64 {
        self.max_body.load(Ordering::Relaxed)
    }

    /// An API over whichever generation is current (after reloads: its settings and named
    /// caches; the store is carried over). The token is the one given here.
    pub fn following(
        current: Arc<trove_proxy::listener::Current>,
        token: Option<String>,
        max_body: u64,
    ) -> Api {
        Api {
            shared: Box::new(move || current.get()),
            token: std::sync::RwLock::new(token.filter(|t| !t.is_empty()).map(String::into_bytes)),
            max_body: max_body.into(),
        }
    }

    fn authorized(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let guard = self.token.read().unwrap_or_else(|e| e.into_inner());
        let Some(token) = guard.as_ref() else {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "disabled",
                "the admin API is off: set [admin] token or token_file",
            ));
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .unwrap_or("");
        // Constant time in the token's content; a length mismatch is refused the same way.
        let ok = given.len() == token.len()
            && bool::from(subtle::ConstantTimeEq::ct_eq(
                given.as_bytes(),
                token.as_slice(),
            ));
        if ok {
            Ok(())
        } else {
            Err(Refusal::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong bearer token (Authorization: Bearer <[admin] token>)",
            ))
        }
    }
}

/// A refusal: status, stable code, message.
struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            code,
            message: message.into(),
        }
    }
}

impl From<ManageError> for Refusal {
    fn from(e: ManageError) -> Refusal {
        Refusal::new(e.status(), e.code(), e.to_string())
    }
}

fn bad(message: impl Into<String>) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, "bad-request", message)
}

/// A reply's body: whole (JSON, small objects) or streamed (a stored body read as it is
/// sent, never whole in memory: issue 19, defect 6).
pub enum ApiBody {
    Whole(Full<Bytes>),
    Stream(tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>),
}

impl http_body::Body for ApiBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        use std::task::Poll;
        match self.get_mut() {
            ApiBody::Whole(f) => match std::pin::Pin::new(f).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            ApiBody::Stream(rx) => match rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(http_body::Frame::data(b)))),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ApiBody::Whole(f) => f.is_end_stream(),
            ApiBody::Stream(_) => false,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            ApiBody::Whole(f) => f.size_hint(),
            ApiBody::Stream(_) => http_body::SizeHint::default(),
        }
    }
}

impl From<Bytes> for ApiBody {
    fn from(b: Bytes) -> ApiBody {
        ApiBody::Whole(Full::new(b))
    }
}

type Reply = Response<ApiBody>;

/// Chunks of a streamed body in flight between the store and the socket: with reads of at
/// most 256 KiB (disk fragments) a reply holds about a megabyte at most, whatever its size.
const STREAM_CHUNKS: usize = 2;

/// How long one chunk of a stored body may take to arrive while it is streamed.
const CHUNK_TIMEOUT: Duration = Duration::from_secs(30);

/// Streams `obj`'s body from its start; the reader stops when the client goes away.
fn stream_body(obj: &Arc<trove_store::Object>) -> ApiBody {
    let (tx, rx) = tokio::sync::mpsc::channel(STREAM_CHUNKS);
    let mut r = obj.body.reader(0);
    tokio::spawn(async move {
        loop {
            let item = match tokio::time::timeout(CHUNK_TIMEOUT, r.next()).await {
                Ok(Some(Ok(b))) => Ok(b),
                Ok(None) => return,
                Ok(Some(Err(e))) => Err(std::io::Error::other(format!(
                    "the stored body failed: {e}"
                ))),
                Err(_) => Err(std::io::Error::other("the stored body stalled")),
            };
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    });
    ApiBody::Stream(rx)
}

/// Answers one request under `/v1/`.
pub async fn handle(api: &Api, req: Request<Incoming>) -> Reply {
    let Some(shared) = (api.shared)() else {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            &wire::ErrorBody {
                error: wire::Error {
                    code: "stopping".into(),
                    message: "trove is stopping".into(),
                },
            },
        );
    };
    let reply = match answer(api, &shared, req).await {
        Ok(r) => r,
        Err(r) => {
            let body = wire::ErrorBody {
                error: wire::Error {
                    code: r.code.to_string(),
                    message: r.message,
                },
            };
            let mut resp = json(r.status, &body);
            if r.status == StatusCode::UNAUTHORIZED {
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            resp
        }
    };
    let class = match reply.status().as_u16() {
        200..=399 => 0,
        400..=499 => 1,
        _ => 2,
    };
    shared.metrics.api_requests[class].fetch_add(1, Ordering::Relaxed);
    reply
}

async fn answer(api: &Api, shared: &Shared, req: Request<Incoming>) -> Result<Reply, Refusal> {
    api.authorized(req.headers())?;
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query().unwrap_or(""));
    let rest = path
        .strip_prefix(wire::PREFIX)
        .and_then(|p| p.strip_prefix('/'))
        .unwrap_or("");
    let (first, second) = match rest.split_once('/') {
        Some((a, b)) => (a, Some(decode(b)?)),
        None => (rest, None),
    };
    let now = SystemTime::now();
    let method = req.method().clone();
    match (&method, first, second) {
        (&Method::PUT, "object", None) => {
            let url = query
                .only(&["url", "ttl", "status", "cache", "tag"], &["tag"])?
                .url()?;
            let put = read_put(api, shared, &query, url, req).await?;
            feed::check_put_size(shared, put.body.len())?;
            let shared_copy = shared.feed.is_some().then(|| put.clone());
            let mut ack = manage::put(shared, put, now)?;
            if let Some(put) = &shared_copy {
                feed::share_put(shared, put, &mut ack).await?;
            }
            Ok(json(StatusCode::CREATED, &ack))
        }
        (&Method::GET | &Method::HEAD, "object", None) => {
            get_object(
                shared,
                query.only(&["url"], &[])?.url()?,
                method == Method::HEAD,
            )
            .await
        }
        (&Method::DELETE, "object", None) => {
            let url = query.only(&["url", "wait_ms"], &[])?.url()?;
            let mut ack = manage::delete(shared, url, now)?;
            manage::durable(shared, ack.seq).await?;
            let call = wire::Invalidate {
                url: Some(url.to_string()),
                ..Default::default()
            };
            feed::share(shared, &call, query.wait()?, &mut ack).await?;
            Ok(json(StatusCode::OK, &ack))
        }
        (&Method::GET, "meta", None) => Ok(json(
            StatusCode::OK,
            &manage::meta(shared, query.only(&["url"], &[])?.url()?, now)?,
        )),
        (&Method::POST, "invalidate", None) => {
            query.only(&["wait_ms"], &[])?;
            let wait = query.wait()?;
            let body = read_body(req, 64 << 10).await?;
            let call: wire::Invalidate =
                serde_json::from_slice(&body).map_err(|e| bad(format!("invalid JSON: {e}")))?;
            let mut ack = manage::invalidate(shared, &call, now)?;
            manage::durable(shared, ack.seq).await?;
            feed::share(shared, &call, wait, &mut ack).await?;
            Ok(json(StatusCode::OK, &ack))
        }
        (&Method::GET, "tags", Some(tag)) => Ok(json(
            StatusCode::OK,
            &manage::list(shared, &tag, false, query.only(&["limit"], &[])?.limit()?)?,
        )),
        (&Method::GET, "caches", None) => {
            query.only(&[], &[])?;
            Ok(json(StatusCode::OK, &manage::caches(shared)))
        }
        (&Method::GET, "caches", Some(name)) => Ok(json(
            StatusCode::OK,
            &manage::list(shared, &name, true, query.only(&["limit"], &[])?.limit()?)?,
        )),
        (&Method::GET, "stats", None) => {
            query.only(&[], &[])?;
            Ok(json(StatusCode::OK, &manage::stats(shared)))
        }
        (&Method::GET, "cluster", None) => {
            let url = query.only(&["url"], &[])?.get("url");
            match manage::cluster(shared) {
                Some(mut c) => {
                    if let Some(url) = url {
                        c.owner = Some(manage::cluster_owner(shared, url)?);
                    }
                    if let Some(f) = &shared.feed {
                        c.bus = Some(f.status().await);
                    }
                    Ok(json(StatusCode::OK, &c))
                }
                None => Err(Refusal::new(
                    StatusCode::NOT_FOUND,
                    "no-cluster",
                    "this node has no [cluster]".to_string(),
                )),
            }
        }
        (&Method::GET, "bans", None) => Ok(json(
            StatusCode::OK,
            &manage::bans(shared, query.only(&["limit"], &[])?.limit()?),
        )),
        (
            _,
            "object" | "meta" | "invalidate" | "tags" | "caches" | "stats" | "bans" | "cluster",
            _,
        ) => Err(Refusal::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method",
            format!("{method} is not served at {path}"),
        )),
        _ => Err(Refusal::new(
            StatusCode::NOT_FOUND,
            "not-found",
            format!("no API call at {path}"),
        )),
    }
}

fn decode(s: &str) -> Result<String, Refusal> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| bad("path segment is not UTF-8"))
}

/// A query string's pairs, decoded.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Query {
        Query(form_urlencoded::parse(q.as_bytes()).into_owned().collect())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Refuses a parameter the call does not take, or one it takes once given twice
    /// (`repeated` may be given any number of times): docs/api.md promises `bad-request`
    /// for unknown fields, and an ignored `TTL=5` would store an object fresh forever.
    fn only(&self, known: &[&str], repeated: &[&str]) -> Result<&Self, Refusal> {
        for (i, (k, _)) in self.0.iter().enumerate() {
            if !known.contains(&k.as_str()) {
                return Err(bad(format!(
                    "unknown query parameter {k:?} (this call takes: {})",
                    known.join(", ")
                )));
            }
            if !repeated.contains(&k.as_str()) && self.0[..i].iter().any(|(p, _)| p == k) {
                return Err(bad(format!("query parameter {k:?} given twice")));
            }
        }
        Ok(self)
    }

    fn url(&self) -> Result<&str, Refusal> {
        self.get("url")
            .ok_or_else(|| bad("the url query parameter is required"))
    }

    fn number(&self, name: &str) -> Result<Option<u64>, Refusal> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("{name}: not a whole number: {v:?}")))
            })
            .transpose()
    }

    fn limit(&self) -> Result<usize, Refusal> {
        Ok(self.number("limit")?.unwrap_or(100).min(100_000) as usize)
    }

    /// `wait_ms`: how long an invalidation's answer waits for every live node of the
    /// cluster to apply it (at most a minute).
    fn wait(&self) -> Result<Option<Duration>, Refusal> {
        match self.number("wait_ms")? {
            Some(ms) if ms > 60_000 => Err(bad("wait_ms: at most 60000")),
            ms => Ok(ms.map(Duration::from_millis)),
        }
    }
}

async fn read_body(req: Request<Incoming>, max: u64) -> Result<Bytes, Refusal> {
    let too_large = || {
        Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too-large",
            format!("request body larger than {max} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), max as usize).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(bad(format!("cannot read the body: {e}"))),
    }
}

/// A put's object: the query gives `url`, `ttl`, `status`, `cache`, `tag` (repeated), the
/// `Content-Type` is stored, and each `Trove-Set: Name: value` field adds a stored field.
async fn read_put(
    api: &Api,
    shared: &Shared,
    query: &Query,
    url: &str,
    req: Request<Incoming>,
) -> Result<manage::Put, Refusal> {
    let mut headers = HeaderMap::new();
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        headers.insert(header::CONTENT_TYPE, ct.clone());
    }
    for v in req.headers().get_all(wire::SET_FIELD) {
        let line = v
            .to_str()
            .map_err(|_| bad("Trove-Set: not visible ASCII"))?;
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad(format!("Trove-Set: {line:?} is not \"Name: value\"")))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| bad(format!("Trove-Set: bad field name {name:?}")))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|_| bad(format!("Trove-Set: bad value for {name}")))?;
        headers.append(name, value);
    }
    let status = query.number("status")?.unwrap_or(200);
    let ttl = query.number("ttl")?.map(Duration::from_secs);
    let tags = query.all("tag");
    let cache = query.get("cache").map(str::to_string);
    // Checked before the body is read, so a refused put costs no upload.
    manage::check_tags(&shared.settings.tags, &tags)?;
    if let Some(c) = &cache {
        if !shared.named_caches.knows(c) {
            return Err(ManageError::UnknownCache(c.clone()).into());
        }
    }
    manage::key_of(url)?;
    let max = api.max_body().min(shared.store.max_object());
    // A copy of its own: the bytes hyper read share a buffer (kilobytes) with whatever else
    // arrived with them, and the store would keep all of it alive for a one-byte body.
    let body = Bytes::copy_from_slice(&read_body(req, max).await?);
    Ok(manage::Put {
        url: url.to_string(),
        // Past u16 is no status either: `manage::put` refuses it (not a wrapped value).
        status: u16::try_from(status).unwrap_or(u16::MAX),
        headers,
        body,
        ttl,
        cache,
        tags,
    })
}

/// The newest live variant of a URL, as stored, with its tags and named cache.
async fn get_object(shared: &Shared, url: &str, head_only: bool) -> Result<Reply, Refusal> {
    let (_, objs) = manage::stored(shared, url)?;
    let obj = objs.into_iter().next().ok_or(ManageError::NotFound)?;
    // The length, when known, goes in `Content-Length`: a streamed body that fails midway
    // then shows as short to the client, never as complete.
    let len = obj.body.expected_len().or_else(|| {
        obj.body
            .outcome()
            .is_some_and(|o| o.is_ok())
            .then(|| obj.body.len())
    });
    let body = if head_only {
        ApiBody::from(Bytes::new())
    } else {
        match obj.body.complete_bytes() {
            Some(b) => ApiBody::from(b),
            // Large, on disk, or still arriving: streamed as read, never whole in memory.
            None => stream_body(&obj),
        }
    };
    let (tags, cache) = manage::names(shared, &obj);
    let mut resp = Response::new(body);
    *resp.status_mut() = obj.head.status;
    let h = resp.headers_mut();
    if let (Some(n), false) = (len, head_only) {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    for (n, v) in &obj.head.headers {
        if n != header::CONTENT_LENGTH && n != header::TRANSFER_ENCODING {
            h.append(n.clone(), v.clone());
        }
    }
    if !tags.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&tags.join(" ")) {
            h.insert(wire::TAGS_FIELD, v);
        }
    }
    if let Some(c) = cache.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(wire::CACHE_FIELD, c);
    }
    Ok(resp)
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Reply {
    let body = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut r = Response::new(ApiBody::from(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
