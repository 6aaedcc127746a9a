//! Large memory hits, in process over real sockets: bodies on both sides of the size up to
//! which a complete body is joined into one buffer (1 MiB, `trove_store::Body`) and far past
//! it, sent whole, by range, after HEAD and 304 on the same connection, to a client that
//! reads slowly while its body leaves the store and others take its memory, and to clients
//! that vanish mid-body.

mod kit;

use kit::{object_body as body_of, object_path as path, objects_origin as origin, Origin, Trove};
use trove_proxy::Settings;

async fn trove(origin: &Origin, memory: u64, f: impl FnOnce(&mut Settings)) -> Trove {
    Trove::reverse(origin, |s: &mut Settings| {
        s.cache.memory = memory;
        s.cache.max_object = memory / 2;
        s.cache.eviction = trove_store::EvictionKind::Lru;
        f(s);
    })
    .await
}

#[tokio::test]
async fn memory_hits_from_64_kib_to_12_mib_arrive_whole_by_range_and_in_step() {
    let origin = origin().await;
    let trove = trove(&origin, 64 << 20, |_| {}).await;
    // Around the 1 MiB join, and bodies many socket buffers long.
    let sizes = [
        65_536,
        100_000,
        (1 << 20) - 1,
        1 << 20,
        (1 << 20) + 1,
        12 << 20,
    ];
    let mut c = trove.client().await;
    for (i, &len) in sizes.iter().enumerate() {
        let r = c.get(&path(i, len), &[]).await;
        assert!(r.body == body_of(i, len), "miss of {len}");
    }
    let before = origin.hits();

    // Twice each on one keep-alive connection: every hit whole and in order.
    for round in 0..2 {
        for (i, &len) in sizes.iter().enumerate() {
            let r = c.get(&path(i, len), &[]).await;
            assert_eq!(r.header("cache-status"), Some("trove; hit"), "{len}");
            assert_eq!(r.header("content-length"), Some(&*len.to_string()));
            assert!(r.body == body_of(i, len), "hit of {len}, round {round}");
        }
    }
    assert_eq!(origin.hits(), before);

    // Ranges of a joined body and of one kept in pieces, across piece boundaries.
    for (i, len) in [(4, (1 << 20) + 1), (5, 12 << 20)] {
        let (from, to) = (1000, len - 1000);
        let r = c
            .get(&path(i, len), &[("range", &format!("bytes={from}-{to}"))])
            .await;
        assert_eq!(r.status, 206);
        assert_eq!(
            r.header("content-range"),
            Some(&*format!("bytes {from}-{to}/{len}"))
        );
        assert!(r.body == body_of(i, len)[from..=to], "range of {len}");
    }
    // HEAD and a 304 send no body, and the connection stays in step.
    let (i, len) = (3, 1 << 20);
    let r = c.request("HEAD", &path(i, len), &[]).await;
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(r.header("content-length"), Some("1048576"));
    let r = c
        .get(&path(i, len), &[("if-none-match", "\"3-1048576\"")])
        .await;
    assert_eq!(r.status, 304);
    let r = c.get(&path(0, 65_536), &[]).await;
    assert!(r.body == body_of(0, 65_536));
    assert_eq!(origin.hits(), before);
}

#[tokio::test]
async fn a_slow_client_gets_every_byte_while_its_body_is_evicted() {
    let origin = origin().await;
    let trove = trove(&origin, 24 << 20, |_| {}).await;
    let len = 8 << 20;
    let a = path(1, len);
    kit::get(&trove, &a, &[]).await;

    // A client with a small receive window that reads a little of the hit, then stops.
    let slow = kit::SlowReader::start(trove.addr, &a, 16384).await;

    // Meanwhile the object is evicted by others of 1 MiB, whose buffers take its place.
    for i in 0..40 {
        kit::get(&trove, &path(100 + i, 1 << 20), &[]).await;
    }
    assert_eq!(
        kit::get(&trove, &a, &[("cache-control", "only-if-cached")])
            .await
            .status,
        504,
        "the object is gone from the cache"
    );

    // The slow client reads on: every byte is the body it asked for.
    let body = slow.body(len).await;
    assert_eq!(body.len(), len, "the whole body");
    let want = body_of(1, len);
    let wrong = body.iter().zip(&want).position(|(x, y)| x != y);
    assert_eq!(wrong, None, "a wrong byte at {wrong:?}");
}

#[tokio::test]
async fn a_client_that_vanishes_mid_send_leaves_trove_serving() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = origin().await;
    let trove = trove(&origin, 64 << 20, |_| {}).await;
    let len = 4 << 20;
    let b = path(2, len);
    kit::get(&trove, &b, &[]).await;
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(trove.addr).await.unwrap();
        s.write_all(format!("GET {b} HTTP/1.1\r\nHost: test.local\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut got = vec![0u8; 32 << 10];
        assert!(s.read(&mut got).await.unwrap() > 0);
        drop(s); // Gone with most of the body unsent.
    }
    let r = kit::get(&trove, &b, &[]).await;
    assert!(r.body == body_of(2, len));
    assert_eq!(r.header("cache-status"), Some("trove; hit"));
}
