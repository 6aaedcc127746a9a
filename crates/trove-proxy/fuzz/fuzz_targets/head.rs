//! The request head parser and its framing rules, on a stream of pipelined heads: never a
//! panic, never a head that claims both a length and chunking, and every accepted head's
//! target either refused or normalised (the same path `trove serve` takes).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use trove_proxy::client::head::{parse, Framing, HeadLimits};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let limits = HeadLimits {
        max_head_bytes: 16 * 1024,
        max_headers: 64,
    };
    for _ in 0..8 {
        let before = buf.len();
        match parse(&mut buf, limits) {
            Ok(Some(head)) => {
                assert!(buf.len() < before, "a head was parsed but nothing consumed");
                if let Framing::Length(_) = head.framing {
                    assert!(head.headers.get(http::header::TRANSFER_ENCODING).is_none());
                }
                if head.method != http::Method::CONNECT {
                    let _ =
                        trove_http::Target::from_request(&head.target, &head.headers, head.version);
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
});
