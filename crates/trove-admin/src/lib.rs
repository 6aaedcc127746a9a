//! trove's admin listener: `/metrics` (Prometheus text format), `/healthz`, and a status
//! page for a browser at `/`. Separate from the proxy port so operators can firewall it apart;
//! loopback by default.
//!
//! It is built on hyper's server: this listener is not on the request hot path, and hyper
//! gives a correct HTTP/1.1 server for it with no code of our own to maintain.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What the admin listener shows; provided by the binary, which owns the proxy.
pub trait Source: Send + Sync + 'static {
    /// Prometheus text exposition.
    fn metrics(&self) -> String;
    /// A small HTML status page.
    fn status_page(&self) -> String;
}

/// Binds `addr` and serves until the runtime stops. Returns the bound address.
pub async fn serve(addr: SocketAddr, source: Arc<dyn Source>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let source = Arc::clone(&source);
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let source = Arc::clone(&source);
                    async move { Ok::<_, Infallible>(route(&*source, req)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(bound)
}

fn route(source: &dyn Source, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            source.metrics(),
        ),
        "/healthz" => text(StatusCode::OK, "text/plain", "ok\n".into()),
        "/" | "/status" => text(
            StatusCode::OK,
            "text/html; charset=utf-8",
            source.status_page(),
        ),
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

fn text(status: StatusCode, ctype: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}
