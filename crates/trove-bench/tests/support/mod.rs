//! A toy forward proxy for testing the instrument itself: it can cache (replaying stored headers
//! verbatim, as real caches do) and it can corrupt one body byte, so tests show the bench tells
//! hits from misses and catches a wrong byte.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// What the toy proxy does.
#[derive(Clone, Copy, Debug)]
pub struct Behaviour {
    /// Store `Cache-Control: public` responses and serve later requests from the store.
    pub cache: bool,
    /// Flip one byte of the body of the n-th response (1-based).
    pub corrupt_nth: Option<u64>,
}

struct State {
    b: Behaviour,
    store: Mutex<HashMap<String, (http::response::Parts, Bytes)>>,
    served: Arc<AtomicU64>,
}

/// Starts the proxy on a runtime thread of its own; returns its address.
#[allow(dead_code)] // each test binary compiles this module; not every one calls this
pub fn start(b: Behaviour) -> SocketAddr {
    start_counted(b).0
}

/// [`start`], also returning the count of responses the proxy has served.
pub fn start_counted(b: Behaviour) -> (SocketAddr, Arc<AtomicU64>) {
    let served = Arc::new(AtomicU64::new(0));
    let count = served.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            let st = Arc::new(State {
                b,
                store: Mutex::new(HashMap::new()),
                served,
            });
            loop {
                let (s, _) = l.accept().await.unwrap();
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
    });
    (rx.recv().unwrap(), count)
}

async fn handle(
    st: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let key = req.uri().to_string();
    let stored =
        st.b.cache
            .then(|| st.store.lock().unwrap().get(&key).cloned())
            .flatten();
    let (parts, mut body) = match stored {
        Some(v) => v,
        None => {
            let authority = req.uri().authority().unwrap().to_string();
            let s = tokio::net::TcpStream::connect(&authority).await.unwrap();
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut out = Request::get(req.uri().path())
                .body(Empty::<Bytes>::new())
                .unwrap();
            *out.headers_mut() = req.headers().clone();
            let resp = send.send_request(out).await.unwrap();
            let (mut parts, body) = resp.into_parts();
            parts.headers.remove(http::header::CONNECTION);
            let body = body.collect().await.unwrap().to_bytes();
            let public = parts
                .headers
                .get(http::header::CACHE_CONTROL)
                .is_some_and(|v| v == "public");
            if st.b.cache && public {
                st.store
                    .lock()
                    .unwrap()
                    .insert(key, (parts.clone(), body.clone()));
            }
            (parts, body)
        }
    };
    let n = st.served.fetch_add(1, Relaxed) + 1;
    if st.b.corrupt_nth == Some(n) && !body.is_empty() {
        let mut v = body.to_vec();
        let i = v.len() / 2;
        v[i] ^= 0x20;
        body = Bytes::from(v);
    }
    Ok(Response::from_parts(parts, Full::new(body)))
}

#[derive(clap::Parser)]
struct Top {
    #[command(flatten)]
    bench: trove_bench::BenchArgs,
}

/// Runs `trove bench ARGS` (a `run` command line) in this process and returns its report.
pub fn run(args: &str) -> trove_bench::report::Report {
    use clap::Parser;
    let argv = std::iter::once("bench").chain(args.split_whitespace());
    let trove_bench::Command::Run(a) = Top::try_parse_from(argv).unwrap().bench.command else {
        panic!("not a run command")
    };
    trove_bench::cli_execute(&a).unwrap()
}
