//! The bus over a real nats-server on loopback, as short stories.

mod kit;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::header::HeaderMap;
use kit::{bus, delivery, next_within, until, Nats};
use trove_bus::{Auth, Bus, BusError, BusSettings, Event, Gap};

/// A delivery as a node applied it: its sequence and payload.
type Applied = (u64, Vec<u8>);

const KEY: &str = "a key every node of the test shares";

#[tokio::test]
async fn a_message_published_on_a_reaches_b_with_its_sequence() {
    let nats = Nats::start();
    let a = bus(&nats, "a", |_| {}).await;
    let b = bus(&nats, "b", |_| {}).await;
    let mut consumer = b.consume(0).await.unwrap();

    let seq = a.publish(&b"purge /logo.png"[..]).await.unwrap();
    assert_eq!(seq, 1);
    let d = delivery(&mut consumer).await;
    assert_eq!((d.seq, d.from_node.as_str()), (1, "a"));
    assert_eq!(&d.payload[..], b"purge /logo.png");

    assert_eq!(a.counters().published, 1);
    assert_eq!(b.counters().delivered, 1);
    let status = b.status().await;
    assert!(status.connected);
    assert_eq!(
        (status.last_stream_seq, status.last_applied, status.lag),
        (1, 1, 0)
    );
}

#[tokio::test]
async fn a_restarted_consumer_gets_exactly_what_it_missed() {
    let nats = Nats::start();
    let a = bus(&nats, "a", |_| {}).await;
    let b = bus(&nats, "b", |_| {}).await;
    let mut consumer = b.consume(0).await.unwrap();
    for i in 1..=3u64 {
        a.publish(format!("rule {i}")).await.unwrap();
        assert_eq!(delivery(&mut consumer).await.seq, i);
    }
    drop(consumer);

    // b is down while three more are published; it comes back knowing it applied 3.
    for i in 4..=6u64 {
        assert_eq!(a.publish(format!("rule {i}")).await.unwrap(), i);
    }
    let b = bus(&nats, "b", |_| {}).await;
    let mut consumer = b.consume(3).await.unwrap();
    for i in 4..=6u64 {
        let d = delivery(&mut consumer).await;
        assert_eq!((d.seq, &d.payload[..]), (i, format!("rule {i}").as_bytes()));
    }
    assert!(
        next_within(&mut consumer, Duration::from_millis(500))
            .await
            .is_none(),
        "nothing beyond what was missed"
    );
    assert_eq!(b.status().await.lag, 0);

    // A crash before applying (no ack, no journal): the node restarts from its journal's 5.
    drop(consumer);
    let mut consumer = b.consume(5).await.unwrap();
    assert_eq!(delivery(&mut consumer).await.seq, 6);
}

#[tokio::test]
async fn a_retried_publish_with_the_same_id_is_stored_once() {
    let nats = Nats::start();
    let a = bus(&nats, "a", |_| {}).await;
    let first = a.publish_with_id("a-rule-17", "x").await.unwrap();
    let again = a.publish_with_id("a-rule-17", "x").await.unwrap();
    assert_eq!(first, again);
    let c = a.counters();
    assert_eq!((c.published, c.duplicates), (1, 1));
    assert_eq!(a.status().await.last_stream_seq, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_killed_and_restarted_under_publishes_loses_and_repeats_nothing() {
    const N: usize = 150;
    let mut nats = Nats::start();
    let a = bus(&nats, "a", |s| s.publish_timeout = Duration::from_secs(1)).await;
    let b = bus(&nats, "b", |_| {}).await;
    let mut consumer = b.consume(0).await.unwrap();
    // b applies while the server dies and returns.
    let applied: Arc<Mutex<Vec<Applied>>> = Arc::default();
    let reader = {
        let applied = applied.clone();
        tokio::spawn(async move {
            loop {
                match consumer.next().await.unwrap() {
                    Event::Deliver(d) => {
                        applied.lock().unwrap().push((d.seq, d.payload.to_vec()));
                        // An ack lost to the outage only means JetStream offers it again.
                        let _ = d.ack().await;
                    }
                    Event::Gap(gap) => panic!("no gap expected: {gap:?}"),
                }
            }
        })
    };

    // The publisher retries each message under its own id until JetStream acknowledges it.
    let acked: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let failures = Arc::new(Mutex::new(0u32));
    let publisher = {
        let (a, acked, failures) = (a.clone(), acked.clone(), failures.clone());
        tokio::spawn(async move {
            for i in 0..N {
                loop {
                    match a.publish_with_id(&format!("a-{i}"), format!("m{i}")).await {
                        Ok(seq) => {
                            acked.lock().unwrap().push((i, seq));
                            break;
                        }
                        Err(e) => {
                            assert!(e.is_not_durable(), "{e}");
                            *failures.lock().unwrap() += 1;
                        }
                    }
                }
            }
        })
    };
    until("40 acknowledged publishes", || {
        acked.lock().unwrap().len() >= 40
    })
    .await;
    nats.kill();
    until("a publish to fail", || *failures.lock().unwrap() >= 1).await;
    nats.restart();
    publisher.await.unwrap();

    let acked = acked.lock().unwrap().clone();
    let last = acked.iter().map(|&(_, seq)| seq).max().unwrap();
    until("b to apply the last acknowledged message", || {
        applied.lock().unwrap().last().map(|(seq, _)| *seq) >= Some(last)
    })
    .await;
    reader.abort();

    let applied = applied.lock().unwrap().clone();
    let seqs: Vec<u64> = applied.iter().map(|(seq, _)| *seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "delivered out of order or twice: {seqs:?}"
    );
    let seen: BTreeMap<u64, Vec<u8>> = applied.into_iter().collect();
    for (i, seq) in &acked {
        assert_eq!(
            seen.get(seq).map(Vec::as_slice),
            Some(format!("m{i}").as_bytes()),
            "acknowledged message {i} (seq {seq}) was not delivered as itself"
        );
    }
    let distinct: BTreeSet<&Vec<u8>> = seen.values().collect();
    assert_eq!(
        distinct.len(),
        seen.len(),
        "a message was stored under two sequences"
    );
    assert_eq!(seen.len(), N);
    assert!(*failures.lock().unwrap() >= 1);
    assert_eq!(b.counters().gaps, 0);
}

#[tokio::test]
async fn forged_and_malformed_messages_are_rejected_and_counted() {
    let nats = Nats::start();
    let a = bus(&nats, "a", |s| s.signing_key = Some(KEY.into())).await;
    let b = bus(&nats, "b", |s| s.signing_key = Some(KEY.into())).await;
    let outsider = bus(&nats, "mallory", |s| {
        s.signing_key = Some("a key nobody else has".into())
    })
    .await;
    let raw = async_nats::connect(nats.url()).await.unwrap();
    let subject = b.settings().subject.clone();

    // 1: well-formed headers, a signature of zeros.
    let mut forged = HeaderMap::new();
    forged.insert("Trove-Bus", "1");
    forged.insert("Trove-Node", "a");
    forged.insert("Nats-Msg-Id", "forged-1");
    forged.insert("Trove-Signature", "00".repeat(32).as_str());
    raw.publish_with_headers(subject.clone(), forged, "purge everything".into())
        .await
        .unwrap();
    // 2: not a trove-bus message at all.
    raw.publish(subject.clone(), "\u{0}garbage".into())
        .await
        .unwrap();
    raw.flush().await.unwrap();
    // 3: signed, but with another key.
    outsider.publish("ban .*").await.unwrap();
    // 4: the real one.
    let seq = a.publish("purge /a").await.unwrap();
    assert_eq!(seq, 4, "all four were stored by the stream");

    let mut consumer = b.consume(0).await.unwrap();
    let d = delivery(&mut consumer).await;
    assert_eq!(
        (d.seq, d.from_node.as_str(), &d.payload[..]),
        (4, "a", &b"purge /a"[..])
    );
    let c = b.counters();
    assert_eq!(
        (c.rejected_forged, c.rejected_malformed, c.delivered),
        (2, 1, 1)
    );
    assert_eq!(c.rejected(), 3);
}

#[tokio::test]
async fn retention_exceeded_reports_a_gap_before_anything_else() {
    let nats = Nats::start();
    let small = |s: &mut BusSettings| s.max_msgs = Some(3);
    let a = bus(&nats, "a", small).await;
    for i in 1..=10u64 {
        assert_eq!(a.publish(format!("r{i}")).await.unwrap(), i);
    }
    // b applied 2, then 3..7 went before it came back.
    let b = bus(&nats, "b", small).await;
    let mut consumer = b.consume(2).await.unwrap();
    match next_within(&mut consumer, Duration::from_secs(10)).await {
        Some(Event::Gap(gap)) => assert_eq!(
            gap,
            Gap {
                missed_from: 3,
                first_available: 8
            }
        ),
        other => panic!("expected a gap first, got {other:?}"),
    }
    for i in 8..=10u64 {
        assert_eq!(delivery(&mut consumer).await.seq, i);
    }
    assert_eq!(b.counters().gaps, 1);

    // A node that applied 7 missed nothing.
    drop(consumer);
    let mut consumer = b.consume(7).await.unwrap();
    assert_eq!(delivery(&mut consumer).await.seq, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_that_lost_its_store_makes_consumers_report_a_gap() {
    let mut nats = Nats::start();
    let a = bus(&nats, "a", |_| {}).await;
    let b = bus(&nats, "b", |_| {}).await;
    let mut consumer = b.consume(0).await.unwrap();
    let mut epoch = 0;
    for i in 1..=5u64 {
        a.publish(format!("old {i}")).await.unwrap();
        let d = delivery(&mut consumer).await;
        assert_eq!(d.seq, i);
        epoch = d.epoch;
    }
    assert_ne!(epoch, 0);
    assert_eq!(consumer.epoch(), epoch);
    nats.restart_without_store();
    // The stream comes back empty and numbers from 1; past b's 5, so only the stream's
    // identity tells b that these are not the messages after its 5.
    for i in 1..=7u64 {
        assert_eq!(a.publish(format!("new {i}")).await.unwrap(), i);
    }
    match next_within(&mut consumer, Duration::from_secs(20)).await {
        Some(Event::Gap(gap)) => assert_eq!(
            gap,
            Gap {
                missed_from: 6,
                first_available: 1
            }
        ),
        other => panic!("expected a gap, got {other:?}"),
    }
    for i in 1..=7u64 {
        let d = delivery(&mut consumer).await;
        assert_eq!((d.seq, &d.payload[..]), (i, format!("new {i}").as_bytes()));
        assert_ne!(d.epoch, epoch);
    }

    // A node that was down through it, back with its journal's (epoch, 5): a gap too.
    let c = bus(&nats, "c", |_| {}).await;
    let mut consumer = c.consume_from(epoch, 5).await.unwrap();
    match next_within(&mut consumer, Duration::from_secs(10)).await {
        Some(Event::Gap(gap)) => assert_eq!(gap.missed_from, 6),
        other => panic!("expected a gap, got {other:?}"),
    }
    assert_eq!(delivery(&mut consumer).await.seq, 1);
}

#[tokio::test]
async fn publish_fails_within_its_timeout_when_nats_is_down() {
    let mut nats = Nats::start();
    let timeout = Duration::from_secs(1);
    let a = bus(&nats, "a", |s| s.publish_timeout = timeout).await;
    nats.kill();
    let started = Instant::now();
    let err = a.publish("purge /x").await.unwrap_err();
    let took = started.elapsed();
    assert!(err.is_not_durable(), "{err}");
    assert!(matches!(err, BusError::NotDurable { .. }), "{err}");
    // A generous bound: the point is that it ends, not how fast.
    assert!(took < timeout * 3, "publish took {took:?}");
    assert!(!a.status().await.connected);
}

#[tokio::test]
async fn publish_and_wait_names_the_node_that_did_not_apply() {
    let nats = Nats::start();
    let keyed = |s: &mut BusSettings| s.signing_key = Some(KEY.into());
    let a = bus(&nats, "a", keyed).await;
    let b = bus(&nats, "b", keyed).await;
    let _c = bus(&nats, "c", keyed).await; // connected, but never applies
    let applier = {
        let b = b.clone();
        tokio::spawn(async move {
            let mut consumer = b.consume(0).await.unwrap();
            loop {
                let d = delivery(&mut consumer).await;
                b.announce_applied(d.seq).await.unwrap();
            }
        })
    };
    // A forged announcement for c must not count.
    let raw = async_nats::connect(nats.url()).await.unwrap();
    let fake_c = tokio::spawn({
        let subject = a.settings().applied_subject();
        async move {
            for _ in 0..60 {
                let mut h = HeaderMap::new();
                h.insert("Trove-Bus", "1");
                h.insert("Trove-Node", "c");
                raw.publish_with_headers(subject.clone(), h, "1000".into())
                    .await
                    .unwrap();
                raw.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });

    let nodes = vec!["b".to_string(), "c".to_string()];
    let outcome = a
        .publish_and_wait("tag:news", &nodes, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(outcome.seq, 1);
    assert_eq!(outcome.missing, vec!["c".to_string()]);
    assert!(a.counters().rejected_forged >= 1);

    let everyone = a
        .publish_and_wait("tag:sport", &nodes[..1], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!((everyone.seq, everyone.missing.len()), (2, 0));
    applier.abort();
    fake_c.abort();
}

#[tokio::test]
async fn connecting_to_no_server_says_what_failed() {
    let nats = Nats::start();
    let url = nats.url();
    drop(nats);
    let mut s = BusSettings::for_node("a");
    s.servers = vec![url.clone()];
    s.connect_timeout = Duration::from_millis(500);
    let err = match Bus::connect(s).await {
        Err(e) => e,
        Ok(_) => panic!("connected to a stopped server"),
    };
    assert!(matches!(err, BusError::Connect { .. }), "{err}");
    assert!(err.to_string().contains(&url), "{err}");
    assert!(err.is_not_durable() && err.is_retryable());

    let bad = BusSettings::for_node("has.dot");
    assert!(matches!(
        Bus::connect(bad).await,
        Err(BusError::Settings(_))
    ));
}

#[tokio::test]
async fn a_token_is_needed_when_the_server_asks_for_one() {
    let nats = Nats::start_with(&["--auth", "s3cret-token"]);
    let mut s = nats.settings("a");
    s.auth = Auth::Token("s3cret-token".into());
    let a = Bus::connect(s.clone()).await.unwrap();
    assert_eq!(a.publish("x").await.unwrap(), 1);

    s.auth = Auth::None;
    let err = match Bus::connect(s).await {
        Err(e) => e,
        Ok(_) => panic!("connected without the token"),
    };
    assert!(matches!(err, BusError::Connect { .. }), "{err}");
}

#[tokio::test]
async fn an_existing_stream_is_checked_and_its_limits_follow_the_settings() {
    let nats = Nats::start();
    let _a = bus(&nats, "a", |_| {}).await;
    let _b = bus(&nats, "b", |s| s.max_msgs = Some(3)).await;
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut stream = js.get_stream("TROVE_INVALIDATIONS").await.unwrap();
    let config = stream.info().await.unwrap().config.clone();
    assert_eq!(config.max_messages, 3);
    assert_eq!(config.max_age, Duration::from_secs(24 * 3600));

    // A stream of that name that doesn't capture the bus's subject is not the bus's.
    let err = match Bus::connect(BusSettings {
        stream: "OTHER".into(),
        ..nats.settings("c")
    })
    .await
    {
        Err(e) => e,
        Ok(_) => panic!("two streams cannot capture one subject"),
    };
    assert!(matches!(err, BusError::Stream { .. }), "{err}");
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ELSEWHERE".into(),
        subjects: vec!["elsewhere".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let err = match Bus::connect(BusSettings {
        stream: "ELSEWHERE".into(),
        subject: "trove.other".into(),
        ..nats.settings("c")
    })
    .await
    {
        Err(e) => e,
        Ok(_) => panic!("connected to a stream that does not capture its subject"),
    };
    assert!(err.to_string().contains("captures"), "{err}");
}
