//! `Range` and `Content-Range` parsing: no panic, and every satisfiable range lies inside the
//! representation. Input: an 8-byte representation length, then the field value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trove_http::range::{parse_content_range, parse_range};
use trove_http::{ByteRange, RangeOutcome};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (len, value) = data.split_at(8);
    let total = u64::from_le_bytes(len.try_into().expect("8 bytes")) % (1 << 40);
    let Ok(value) = std::str::from_utf8(value) else {
        return;
    };
    let _ = parse_content_range(value);
    let inside = |r: &ByteRange| r.first <= r.last && r.last < total;
    match parse_range(value, total) {
        RangeOutcome::Single(r) => assert!(inside(&r), "{value:?} of {total}: {r:?}"),
        RangeOutcome::Multi(rs) => {
            assert!(rs.len() > 1);
            for r in rs {
                assert!(inside(&r), "{value:?} of {total}: {r:?}");
            }
        }
        RangeOutcome::Full | RangeOutcome::Unsatisfiable => {}
    }
});
