//! Admin API load for BENCHMARKS.md ("Admin API"): sequential calls from one client, over
//! one kept-alive connection or a new connection per call (seed 002, Figure 5's shape),
//! over TCP or a Unix socket; filling the store with tagged objects; and the time to
//! acknowledge a tag invalidation.
//!
//! ```text
//! api_bench ENDPOINT TOKEN put|get keep|new SECONDS        # ops/s for SECONDS
//! api_bench ENDPOINT TOKEN fill N CONNECTIONS              # N puts tagged "all" and "g<i%1000>"
//! api_bench ENDPOINT TOKEN ack TAG                         # one tag invalidation's round trip
//! api_bench ENDPOINT TOKEN bans N                          # N bans that match nothing
//! api_bench ENDPOINT TOKEN acks N                          # N URL purges in a row: latency
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use trove_client::{wire::Mode, Client, Endpoint, PutOptions, Reuse};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let endpoint: Endpoint = args[1].parse().expect("endpoint");
    let token = args[2].clone();
    let body = Bytes::from(vec![b'x'; 1024]);
    match args[3].as_str() {
        "put" | "get" => {
            let reuse = if args[4] == "new" {
                Reuse::NewConnectionPerCall
            } else {
                Reuse::KeepAlive
            };
            let secs: u64 = args[5].parse().expect("seconds");
            let c = Client::new(endpoint, Some(&token)).with_reuse(reuse);
            let opts = PutOptions {
                ttl: Some(Duration::from_secs(600)),
                tags: vec!["bench".into()],
                ..Default::default()
            };
            if args[3] == "get" {
                for i in 0..100 {
                    c.put(&format!("http://bench/o/{i}"), body.clone(), &opts)
                        .await
                        .expect("put");
                }
            }
            let end = Instant::now() + Duration::from_secs(secs);
            let start = Instant::now();
            let mut n = 0u64;
            while Instant::now() < end {
                let url = format!("http://bench/o/{}", n % 100);
                if args[3] == "put" {
                    c.put(&url, body.clone(), &opts).await.expect("put");
                } else {
                    c.get(&url).await.expect("get").expect("stored");
                }
                n += 1;
            }
            let s = start.elapsed().as_secs_f64();
            println!(
                "{} {} {:.0} ops/s ({n} in {s:.1} s)",
                args[3],
                args[4],
                n as f64 / s
            );
        }
        "fill" => {
            let n: u64 = args[4].parse().expect("n");
            let conns: u64 = args[5].parse().expect("connections");
            let start = Instant::now();
            let mut tasks = Vec::new();
            for k in 0..conns {
                let c = Arc::new(Client::new(endpoint.clone(), Some(&token)));
                let body = Bytes::from_static(b"o");
                tasks.push(tokio::spawn(async move {
                    let mut i = k;
                    while i < n {
                        let opts = PutOptions {
                            ttl: Some(Duration::from_secs(3600)),
                            tags: vec!["all".into(), format!("g{}", i % 1000)],
                            ..Default::default()
                        };
                        c.put(&format!("http://bench/f/{i}"), body.clone(), &opts)
                            .await
                            .expect("put");
                        i += conns;
                    }
                }));
            }
            for t in tasks {
                t.await.expect("task");
            }
            println!("filled {n} in {:.1} s", start.elapsed().as_secs_f64());
        }
        "ack" => {
            let c = Client::new(endpoint, Some(&token));
            c.stats().await.expect("warm connection");
            let t = Instant::now();
            let ack = c.purge_tag(&args[4], Mode::Hard).await.expect("purge");
            let us = t.elapsed().as_micros();
            let t2 = Instant::now();
            c.stats().await.expect("stats");
            println!(
                "ack of tag {} (seq {}): {us} us round trip; a stats call on the same connection: {} us",
                args[4],
                ack.seq,
                t2.elapsed().as_micros()
            );
        }
        "bans" => {
            let n: u64 = args[4].parse().expect("n");
            let c = Client::new(endpoint, Some(&token));
            let t = Instant::now();
            for i in 0..n {
                c.ban("url", "~", &format!("^http://nomatch/{i}/"), Mode::Hard)
                    .await
                    .expect("ban");
            }
            println!("{n} bans in {:.2} s", t.elapsed().as_secs_f64());
        }
        "acks" => {
            // Acknowledgement latency of sequential URL invalidations on one kept-alive
            // connection (with a disk tier each waits for the journal's fdatasync).
            let n: usize = args[4].parse().expect("n");
            let c = Client::new(endpoint, Some(&token));
            c.stats().await.expect("warm connection");
            let mut lat = Vec::with_capacity(n);
            let t = Instant::now();
            for i in 0..n {
                let t0 = Instant::now();
                c.purge_url(&format!("http://bench/ack/{i}"), Mode::Hard)
                    .await
                    .expect("purge");
                lat.push(t0.elapsed());
            }
            let wall = t.elapsed();
            lat.sort();
            let at = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
            println!(
                "{n} acks: median {} us, p99 {} us, {:.0} acks/s",
                at(0.5).as_micros(),
                at(0.99).as_micros(),
                n as f64 / wall.as_secs_f64()
            );
        }
        other => panic!("unknown command {other}"),
    }
}
