//! Chunked request-body decoding (`client::body::RequestBody`, RFC 9112 §7.1) over arbitrary
//! bytes: never a panic, never more body bytes than were sent, and once a body is accepted
//! whatever followed it (the next pipelined request) is left exactly as it was sent.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use trove_proxy::client::body::{BodyLimits, ReadSide, RequestBody};
use trove_proxy::client::head::Framing;

thread_local! {
    static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
}

fuzz_target!(|data: &[u8]| {
    RT.with(|rt| {
        rt.block_on(async {
            let mut side = ReadSide::new(data);
            let limits = BodyLimits {
                idle: Duration::from_secs(5),
                deadline: Duration::from_secs(60),
                min_rate: 1,
            };
            let mut body = RequestBody::new(&mut side, Framing::Chunked, limits);
            let mut total = 0usize;
            let done = loop {
                match body.next().await {
                    Ok(Some(piece)) => {
                        total += piece.len();
                        assert!(total <= data.len(), "more body than input");
                    }
                    Ok(None) => break true,
                    Err(_) => break false,
                }
            };
            if done {
                let mut rest = side.buf.to_vec();
                rest.extend_from_slice(side.io);
                assert!(data.ends_with(&rest), "bytes after the body were changed");
                assert!(total + rest.len() < data.len() || data.is_empty());
            }
        });
    });
});
