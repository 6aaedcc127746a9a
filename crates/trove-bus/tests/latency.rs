//! How long the bus takes on loopback: publish → acknowledged, publish → delivered on another
//! node, and messages per second with many publishes in flight. A measurement, not a test
//! (tests never assert timings): run it by hand with
//! `cargo test -p trove-bus --release --test latency -- --ignored --nocapture`.

mod kit;

use std::time::{Duration, Instant};

use kit::{bus, Nats};
use trove_bus::Event;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

fn report(what: &str, mut d: Vec<Duration>) {
    d.sort();
    println!(
        "{what}: n={} p50={:?} p99={:?} max={:?}",
        d.len(),
        percentile(&d, 0.50),
        percentile(&d, 0.99),
        d[d.len() - 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test: run by hand with --ignored --nocapture"]
async fn publish_to_delivery_on_loopback() {
    const N: usize = 2000;
    let nats = Nats::start();
    let key = |s: &mut trove_bus::BusSettings| s.signing_key = Some("measurement key 0123".into());
    let a = bus(&nats, "a", key).await;
    let b = bus(&nats, "b", key).await;
    let mut consumer = b.consume(0).await.unwrap();
    let payload = vec![b'x'; 200];

    // One at a time: the latency an invalidation sees on an idle cluster.
    let (mut acked, mut delivered) = (Vec::with_capacity(N), Vec::with_capacity(N));
    for _ in 0..N {
        let t0 = Instant::now();
        let seq = a.publish(payload.clone()).await.unwrap();
        acked.push(t0.elapsed());
        match consumer.next().await.unwrap() {
            Event::Deliver(d) => {
                delivered.push(t0.elapsed());
                assert_eq!(d.seq, seq);
                d.ack().await.unwrap();
            }
            Event::Gap(g) => panic!("{g:?}"),
        }
    }
    report("publish -> acknowledged", acked);
    report("publish -> delivered on b", delivered);

    // Many in flight: what the stream takes cluster-wide.
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..32 {
        let a = a.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..(N / 32) {
                a.publish_with_id(&format!("w{w}-{i}"), payload.clone())
                    .await
                    .unwrap();
            }
        }));
    }
    let want = (N / 32) * 32;
    let mut got = 0;
    while got < want {
        if let Event::Deliver(d) = consumer.next().await.unwrap() {
            d.ack().await.unwrap();
            got += 1;
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let took = t0.elapsed();
    println!(
        "32 publishers, {want} messages: {:.0} msg/s published and delivered ({took:?})",
        want as f64 / took.as_secs_f64()
    );
}
