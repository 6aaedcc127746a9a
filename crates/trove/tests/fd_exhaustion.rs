//! Running out of file descriptors (issue 7): `trove serve` started under a low
//! `RLIMIT_NOFILE` warns at start-up that `max_client_connections` cannot be reached, pauses
//! accepting when the descriptors are used up (one warning, one count, no log flood), and
//! serves again once connections close.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::{origin_with, request, wait_for, TempDir, Trove};

/// Open files allowed to the child: about a dozen are in use once it listens.
const NOFILE: u32 = 40;

#[test]
fn out_of_descriptors_warns_pauses_accepting_and_recovers() {
    // Each response closes its connection, so trove keeps no origin descriptor open.
    let (origin, _) = origin_with(|_| {
        let body = "from the origin\n";
        format!(
            "HTTP/1.1 200 OK\r\ncache-control: max-age=300\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let dir = TempDir::new("fd-exhaustion");
    let trove = Trove::start_with_nofile(
        dir.path(),
        "[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n[log]\naccess = \"\"\n\
         [limits]\nmax_client_connections = 1000\n",
        NOFILE,
    );
    let (proxy, admin) = (trove.proxy(), trove.admin());
    // At start-up: the limit cannot hold max_client_connections.
    assert!(
        wait_for(Duration::from_secs(10), || trove
            .lines_with("RLIMIT_NOFILE")
            == 1),
        "a start-up warning names the limit: {:?}",
        trove.lines()
    );
    assert_eq!(trove.lines_with("max_client_connections = 1000"), 1);

    let get =
        format!("GET http://{origin}/x HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n");
    assert!(request(&proxy, &get).starts_with("HTTP/1.1 200"));

    // Twice as many idle connections as there are descriptors: those trove cannot accept
    // wait in the kernel's queue.
    let held: Vec<TcpStream> = (0..2 * NOFILE)
        .map(|_| TcpStream::connect(&proxy).unwrap())
        .collect();
    let paused = "accepting paused";
    assert!(
        wait_for(Duration::from_secs(10), || trove.lines_with(paused) > 0),
        "{:?}",
        trove.lines()
    );
    // One warning per pause, not one per retry. A pause may end and begin again once while
    // the descriptors of the first request's connection are released, so allow a few.
    assert!(
        trove.lines_with(paused) <= 3,
        "a warning per pause, not per retry: {:?}",
        trove.lines()
    );

    // Connections close: trove accepts and serves again (the stored response: no origin
    // connection needed).
    drop(held);
    assert!(wait_for(Duration::from_secs(10), || trove
        .lines_with("accepting connections again")
        > 0));
    let again = request(&proxy, &get);
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    assert!(again.ends_with("from the origin\n"), "{again}");

    // Every pause counted is one warning line: the metric and stderr agree (polled, since
    // stderr is read by a thread and a pause may still begin while descriptors are freed).
    let agree = wait_for(Duration::from_secs(10), || {
        let pauses = common::metric(&admin, "trove_accept_fd_exhausted_total");
        pauses >= 1.0 && trove.lines_with(paused) as f64 == pauses
    });
    assert!(
        agree,
        "one warning per pause, however long it lasted: {} lines, metric {}",
        trove.lines_with(paused),
        common::metric(&admin, "trove_accept_fd_exhausted_total")
    );
}
