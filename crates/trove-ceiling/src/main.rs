//! `trove-ceiling`: the upper bound for trove's cache-hit path.
//!
//! This is the least an HTTP/1.1 server built on trove's own stack (hyper 1 on tokio) can do per
//! request: parse the request, write a response whose body already sits in memory. It runs on one
//! current-thread tokio runtime so that it gets exactly the single core the proxies under test get.
//! Everything trove does on a cache hit beyond this server is overhead that needs a reason; the
//! hit-path benchmark (`bench/hits/run.sh`) quotes every proxy as a ratio to it.
//!
//! It deliberately has no dependency beyond the HTTP stack (no CLI parser, no logging): anything
//! added here would lower the ceiling it is meant to show.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const USAGE: &str = "usage: trove-ceiling [--addr HOST:PORT] [--size BYTES[k|m]]

Serves the same SIZE bytes, from memory, to every request on ADDR, with
`Cache-Control: public, max-age=3600` (the headers a cached object would carry).
Defaults: --addr 127.0.0.1:18091 --size 1024. Suffixes k and m mean KiB and MiB.";

#[derive(Debug, PartialEq)]
struct Args {
    addr: SocketAddr,
    size: usize,
}

fn parse_size(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((i, 'k' | 'K')) => (&text[..i], 1024),
        Some((i, 'm' | 'M')) => (&text[..i], 1024 * 1024),
        _ => (text, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("--size: `{text}` is not a byte count (e.g. 1024, 1k, 100k)"))
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        addr: SocketAddr::from(([127, 0, 0, 1], 18091)),
        size: 1024,
    };
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.to_owned());
        }
        let value = match inline.or_else(|| args.next()) {
            Some(value) => value,
            None => return Err(format!("{flag} needs a value\n\n{USAGE}")),
        };
        match flag.as_str() {
            "--addr" => {
                parsed.addr = value
                    .parse()
                    .map_err(|e| format!("--addr: `{value}` is not HOST:PORT ({e})"))?;
            }
            "--size" => parsed.size = parse_size(&value)?,
            _ => return Err(format!("unknown argument `{flag}`\n\n{USAGE}")),
        }
    }
    Ok(parsed)
}

fn response(body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    response
}

async fn serve(args: Args) -> std::io::Result<()> {
    let listener = TcpListener::bind(args.addr).await?;
    eprintln!(
        "trove-ceiling: serving {} bytes on http://{}",
        args.size,
        listener.local_addr()?
    );
    // One shared buffer: cloning `Bytes` is a reference-count increment, as a memory-tier hit would be.
    let body = Bytes::from(vec![b'x'; args.size]);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Out of descriptors (EMFILE) and the like: back off rather than spin on accept.
                eprintln!("trove-ceiling: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Like nginx's `tcp_nodelay on` for keep-alive connections: no Nagle delay on the last segment.
        let _ = stream.set_nodelay(true);
        let body = body.clone();
        tokio::spawn(async move {
            let service = service_fn(move |_request: Request<Incoming>| {
                let body = body.clone();
                async move { Ok::<_, Infallible>(response(body)) }
            });
            // A client that resets its connection is routine under load; nothing to report.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("trove-ceiling: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trove-ceiling: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_args, parse_size, Args};
    use std::net::SocketAddr;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse_args(list.iter().map(|s| s.to_string()))
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("100K"), Ok(102_400));
        assert_eq!(parse_size("2m"), Ok(2 * 1024 * 1024));
        assert!(parse_size("k").is_err());
        assert!(parse_size("ten").is_err());
    }

    #[test]
    fn flags_take_separate_or_inline_values() {
        let expected = Args {
            addr: "127.0.0.1:9000".parse::<SocketAddr>().unwrap(),
            size: 102_400,
        };
        assert_eq!(
            args(&["--addr", "127.0.0.1:9000", "--size", "100k"]),
            Ok(expected)
        );
        assert_eq!(
            args(&["--addr=127.0.0.1:9000", "--size=100k"])
                .unwrap()
                .size,
            102_400
        );
    }

    #[test]
    fn bad_input_is_an_error_not_a_default() {
        assert!(args(&["--addr", "nowhere"]).is_err());
        assert!(args(&["--size"]).is_err());
        assert!(args(&["--port", "1"]).is_err());
    }
}
