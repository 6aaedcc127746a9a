//! The last corners of RFC 9110 and 9111 a shared cache must cover (issue 11): a cache
//! disconnected from its origin, every HTTP-date form, interim responses, partial content,
//! and the smaller rules. Each test is a short story over real sockets, named after the
//! section it checks.

mod kit;

use std::net::SocketAddr;
use std::time::Duration;

use kit::{respond, Action, Origin, Trove};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use trove_proxy::metrics::names;

/// A stale stored response: `max-age=1` and already 5 s old.
fn stale(cc: &str) -> Action {
    respond(
        200,
        &[("cache-control", cc), ("age", "5"), ("etag", "\"v1\"")],
        b"old",
    )
}

fn stale_served(trove: &Trove, reason: &str) -> f64 {
    trove.metric(&format!("{}{{reason=\"{reason}\"}}", names::STALE_SERVED))
}

/// An origin that answers one request with `response` (closing the connection after it),
/// then stops listening: every later connection is refused. The port stays held by a
/// bound socket that never listens (the returned one: keep it), so no other listener can
/// take it meanwhile.
async fn one_shot_origin(response: &'static [u8]) -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = || {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.set_reuseport(true).unwrap();
        s
    };
    let hold = socket();
    hold.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = hold.local_addr().unwrap();
    let listening = socket();
    listening.bind(addr).unwrap();
    let listener = listening.listen(16).unwrap();
    tokio::spawn(async move {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        drop(listener);
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        let _ = s.write_all(response).await;
    });
    (hold, addr)
}

#[tokio::test]
async fn disconnected_origin_reset_serves_stale_9111_4_2_4() {
    let origin = Origin::start(|_, n| {
        if n == 0 {
            stale("max-age=1")
        } else {
            Action::Reset
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    assert_eq!(kit::get(&trove, "/", &[]).await.text(), "old");
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "old");
    assert_eq!(
        r.header("cache-status"),
        Some("trove; hit; fwd=stale; detail=stale-disconnected")
    );
    assert_eq!(trove.result(1).await, "TCP_REFRESH_FAIL_OLD/200");
    assert_eq!(stale_served(&trove, "disconnected"), 1.0);
}

#[tokio::test]
async fn disconnected_origin_closed_or_silent_serves_stale_9111_4_2_4() {
    // Closed without a response.
    let origin = Origin::start(|_, n| {
        if n == 0 {
            stale("max-age=1")
        } else {
            Action::RawClose(Vec::new())
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[]).await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "old"));
    assert!(r
        .header("cache-status")
        .is_some_and(|s| s.contains("detail=stale-disconnected")));

    // No response within the timeout.
    let origin = Origin::start(|_, n| {
        if n == 0 {
            stale("max-age=1")
        } else {
            Action::Hang
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |s| {
        s.timeouts.origin_response = Duration::from_millis(300);
    })
    .await;
    kit::get(&trove, "/", &[]).await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "old"));
    assert_eq!(stale_served(&trove, "disconnected"), 1.0);
}

#[tokio::test]
async fn disconnected_origin_refused_serves_stale_without_validators_9111_4_2_4() {
    // No validators: the stale response is refetched, not revalidated, and the refetch
    // finds the origin gone.
    let (_hold, addr) = one_shot_origin(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=1\r\nage: 5\r\ncontent-length: 3\r\nconnection: close\r\n\r\nold",
    )
    .await;
    let placeholder = Origin::start(|_, _| respond(500, &[], b"not this one")).await;
    let trove = Trove::reverse(&placeholder, |s| {
        s.origins[0].upstreams = vec![format!("http://{addr}")];
    })
    .await;
    assert_eq!(kit::get(&trove, "/", &[]).await.text(), "old");
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "old"));
    assert_eq!(
        r.header("cache-status"),
        Some("trove; hit; fwd=stale; detail=stale-disconnected")
    );
    assert_eq!(placeholder.hits(), 0);
}

#[tokio::test]
async fn disconnected_stale_is_forbidden_by_directives_9111_4_2_4() {
    for cc in [
        "max-age=1, must-revalidate",
        "max-age=1, proxy-revalidate",
        "s-maxage=1",
        "max-age=1, no-cache",
    ] {
        let origin =
            Origin::start(move |_, n| if n == 0 { stale(cc) } else { Action::Reset }).await;
        let trove = Trove::reverse(&origin, |_| {}).await;
        kit::get(&trove, "/", &[]).await;
        let r = kit::get(&trove, "/", &[]).await;
        assert_eq!(r.status, 504, "{cc}");
        assert_eq!(stale_served(&trove, "disconnected"), 0.0, "{cc}");
    }
    // A client asking for validation gets no stale copy either.
    let origin = Origin::start(|_, n| {
        if n == 0 {
            stale("max-age=1")
        } else {
            Action::Reset
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[]).await;
    let r = kit::get(&trove, "/", &[("cache-control", "no-cache")]).await;
    assert_eq!(r.status, 504);
}

#[tokio::test]
async fn disconnected_stale_stops_at_max_stale() {
    // 100 s old, fresh for 1: 99 s stale, past a 10 s bound.
    let origin = Origin::start(|_, n| {
        if n == 0 {
            respond(
                200,
                &[("cache-control", "max-age=1"), ("age", "100")],
                b"old",
            )
        } else {
            Action::Reset
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |s| {
        s.cache.max_stale = Duration::from_secs(10);
    })
    .await;
    kit::get(&trove, "/", &[]).await;
    assert_eq!(kit::get(&trove, "/", &[]).await.status, 504);
    assert_eq!(stale_served(&trove, "disconnected"), 0.0);

    // Zero turns it off.
    let origin = Origin::start(|_, n| {
        if n == 0 {
            stale("max-age=1")
        } else {
            Action::Reset
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |s| s.cache.max_stale = Duration::ZERO).await;
    kit::get(&trove, "/", &[]).await;
    assert_eq!(kit::get(&trove, "/", &[]).await.status, 504);
}

/// Two requests for `path` through a fresh trove in front of an origin answering `headers`:
/// the second one's result code.
async fn second_result(headers: &'static [(&'static str, &'static str)]) -> (String, usize) {
    let origin = Origin::start(move |_, _| respond(200, headers, b"body")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[]).await;
    kit::get(&trove, "/", &[]).await;
    (trove.result(1).await, origin.hits())
}

#[tokio::test]
async fn expires_in_every_date_form_is_read_leniently_9110_5_6_7() {
    // 1 January 2091 is a Monday; the weekday is wrong on purpose.
    for expires in [
        "Fri, 01 Jan 2091 00:00:00 GMT",
        "fri, 01 jan 2091 00:00:00 gmt",
        "Fri Jan  1 00:00:00 2091",
        "mon jan 01 00:00:00 2091",
    ] {
        let origin = Origin::start(move |_, _| respond(200, &[("expires", expires)], b"x")).await;
        let trove = Trove::reverse(&origin, |_| {}).await;
        kit::get(&trove, "/", &[]).await;
        kit::get(&trove, "/", &[]).await;
        assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200", "{expires}");
        assert_eq!(origin.hits(), 1, "{expires}");
    }
}

/// Close to an HTTP-date but in none of its three forms: an invalid date, so the response
/// is stale at once and the second request goes to the origin.
#[tokio::test]
async fn expires_beyond_the_three_forms_is_in_the_past_9111_5_3() {
    for expires in [
        "Thu, 18 Aug 2050 02:01:18 UTC",
        "Thu, 18 Aug 50 02:01:18 GMT",
        "Thu 18 Aug 2050 02:01:18 GMT",
        "Thu, 18-Aug-2050 02:01:18 GMT",
        "Thu, 18 Aug 2050 2:01:18 GMT",
        "Thu, 18  Aug 2050 02:01:18 GMT",
        "Thu, 8 Aug 2050 02:01:18 GMT",
        "Thursday, 18-Aug-2050 02:01:18 GMT",
        "Thu Aug 8 02:01:18 2050",
        "0",
    ] {
        let origin = Origin::start(move |_, _| respond(200, &[("expires", expires)], b"x")).await;
        let trove = Trove::reverse(&origin, |_| {}).await;
        kit::get(&trove, "/", &[]).await;
        kit::get(&trove, "/", &[]).await;
        assert_eq!(origin.hits(), 2, "{expires}");
    }
}

#[tokio::test]
async fn last_modified_in_rfc_850_form_gives_heuristic_freshness_9110_5_6_7() {
    // A lowercase RFC 850 date with the wrong weekday (6 November 1994 was a Sunday).
    let (result, hits) =
        second_result(&[("last-modified", "monday, 06-nov-94 08:49:37 gmt")]).await;
    assert_eq!((result.as_str(), hits), ("TCP_MEM_HIT/200", 1));
}

#[tokio::test]
async fn if_modified_since_in_every_date_form_and_an_invalid_one_ignored_9110_13_1_3() {
    let origin = Origin::start(|_, _| {
        respond(
            200,
            &[
                ("cache-control", "max-age=600"),
                ("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ],
            b"body",
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[]).await;
    for ims in ["Sun Nov  6 08:49:37 1994", "sunday, 06-nov-94 08:49:37 GMT"] {
        let r = kit::get(&trove, "/", &[("if-modified-since", ims)]).await;
        assert_eq!(r.status, 304, "{ims}");
    }
    // Not an HTTP-date (asctime pads a one-digit day): the condition is ignored.
    for ims in ["Sun Nov 6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 UTC"] {
        let r = kit::get(&trove, "/", &[("if-modified-since", ims)]).await;
        assert_eq!(r.status, 200, "{ims}");
    }
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn post_response_with_content_location_of_its_target_answers_a_later_get_9110_9_3_3() {
    let origin = Origin::start(|req, _| {
        if req.method == "POST" {
            respond(
                200,
                &[
                    ("cache-control", "max-age=600"),
                    ("content-location", "/doc"),
                ],
                b"posted",
            )
        } else {
            respond(200, &[("cache-control", "max-age=600")], b"from get")
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"POST /doc HTTP/1.1\r\nHost: test.local\r\nContent-Length: 4\r\n\r\nnote")
        .await;
    let r = c.read_response(false).await.expect("a response");
    assert_eq!(r.text(), "posted");
    assert_eq!(
        r.header("cache-status"),
        Some("trove; fwd=method; fwd-status=200; stored")
    );
    let r = kit::get(&trove, "/doc", &[]).await;
    assert_eq!(r.text(), "posted");
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn post_response_naming_another_uri_or_without_freshness_is_not_reused_9110_9_3_3() {
    for headers in [
        &[
            ("cache-control", "max-age=600"),
            ("content-location", "/other"),
        ][..],
        &[("content-location", "/doc")][..],
        &[
            ("cache-control", "max-age=600, private"),
            ("content-location", "/doc"),
        ][..],
    ] {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let origin = Origin::start(move |req, _| {
            if req.method == "POST" {
                Action::Respond {
                    status: 200,
                    headers: headers.clone(),
                    body: b"posted".to_vec(),
                }
            } else {
                respond(200, &[("cache-control", "max-age=600")], b"from get")
            }
        })
        .await;
        let trove = Trove::reverse(&origin, |_| {}).await;
        let mut c = trove.client().await;
        c.send(b"POST /doc HTTP/1.1\r\nHost: test.local\r\nContent-Length: 4\r\n\r\nnote")
            .await;
        assert_eq!(
            c.read_response(false).await.expect("a response").text(),
            "posted"
        );
        assert_eq!(kit::get(&trove, "/doc", &[]).await.text(), "from get");
        assert_eq!(origin.hits(), 2);
    }
}

#[tokio::test]
async fn vary_matching_normalises_accept_language_lists_9111_4_1() {
    let origin = Origin::start(|_, n| {
        respond(
            200,
            &[
                ("cache-control", "max-age=600"),
                ("vary", "Accept-Language"),
            ],
            format!("v{n}").as_bytes(),
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let first = [("accept-language", "en-GB, fr;q=0.5, de;q=0.3")];
    assert_eq!(kit::get(&trove, "/", &first).await.text(), "v0");
    for same in [
        "fr;q=0.50 , EN-gb,de;Q=0.300",
        "de;q=0.3,en-gb;q=1.0,fr;q=0.5",
    ] {
        let r = kit::get(&trove, "/", &[("accept-language", same)]).await;
        assert_eq!(r.text(), "v0", "{same}");
    }
    // A different preference is a different variant.
    let r = kit::get(
        &trove,
        "/",
        &[("accept-language", "fr, en-GB;q=0.5, de;q=0.3")],
    )
    .await;
    assert_eq!(r.text(), "v1");
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn if_modified_since_without_last_modified_compares_the_date_9110_13_1_3() {
    let now = std::time::SystemTime::now();
    let date: &'static str = Box::leak(httpdate::fmt_http_date(now).into_boxed_str());
    let origin = Origin::start(move |_, _| {
        respond(
            200,
            &[("cache-control", "max-age=600"), ("date", date)],
            b"body",
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[]).await;
    let r = kit::get(&trove, "/", &[("if-modified-since", date)]).await;
    assert_eq!(r.status, 304);
    let earlier = httpdate::fmt_http_date(now - Duration::from_secs(86_400));
    let r = kit::get(&trove, "/", &[("if-modified-since", &earlier)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(origin.hits(), 1);
}

/// An origin answering with these interim heads before a cacheable 200 whose body is `ok`.
fn with_interim(interim: &str) -> Action {
    Action::Raw(
        format!(
            "{interim}HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 2\r\n\r\nok"
        )
        .into_bytes(),
    )
}

const EARLY_HINTS: &str = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\n";
const PROCESSING: &str = "HTTP/1.1 102 Processing\r\n\r\n";

#[tokio::test]
async fn interim_responses_are_forwarded_to_http_1_1_clients_9110_15_2() {
    let origin = Origin::start(|_, _| with_interim(&format!("{PROCESSING}{EARLY_HINTS}"))).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"GET / HTTP/1.1\r\nHost: test.local\r\n\r\n").await;
    let processing = c.read_response(true).await.expect("102");
    assert_eq!(processing.status, 102);
    let hints = c.read_response(true).await.expect("103");
    assert_eq!(hints.status, 103);
    assert_eq!(hints.header("link"), Some("</style.css>; rel=preload"));
    assert_eq!(hints.header("x-hop"), None, "connection fields stay behind");
    let r = c.read_response(false).await.expect("the final response");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    assert_eq!(
        r.header("link"),
        None,
        "an interim field never joins the final response"
    );
    assert_eq!(trove.result(0).await, "TCP_MISS/200");

    // Stored without them: a hit has no interim response and no Link.
    c.send(b"GET / HTTP/1.1\r\nHost: test.local\r\n\r\n").await;
    let r = c.read_response(false).await.expect("a hit");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    assert_eq!(r.header("link"), None);
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn interim_responses_reach_passed_requests_too_9110_15_2() {
    let origin = Origin::start(|_, _| with_interim(EARLY_HINTS)).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"POST / HTTP/1.1\r\nHost: test.local\r\nContent-Length: 1\r\n\r\nx")
        .await;
    assert_eq!(c.read_response(true).await.expect("103").status, 103);
    let r = c.read_response(false).await.expect("the final response");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
}

#[tokio::test]
async fn no_interim_response_reaches_an_http_1_0_client_9110_15_2() {
    let origin = Origin::start(|_, _| with_interim(EARLY_HINTS)).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"GET / HTTP/1.0\r\nHost: test.local\r\n\r\n").await;
    let r = c.read_response(false).await.expect("the final response");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    assert_eq!(r.header("link"), None);
}

#[tokio::test]
async fn early_hints_reach_the_client_before_the_final_response_exists_9110_15_2() {
    // The origin sends 103, then holds the final response until the test has seen the 103.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let go = std::sync::Arc::clone(&release);
    tokio::spawn(async move {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        let _ = s.write_all(EARLY_HINTS.as_bytes()).await;
        go.notified().await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
    });
    let placeholder = Origin::start(|_, _| respond(500, &[], b"not this one")).await;
    let trove = Trove::reverse(&placeholder, |s| {
        s.origins[0].upstreams = vec![format!("http://{addr}")];
    })
    .await;
    let mut c = trove.client().await;
    c.send(b"GET / HTTP/1.1\r\nHost: test.local\r\n\r\n").await;
    let hints = c
        .read_response(true)
        .await
        .expect("103 while the final is held");
    assert_eq!(hints.status, 103);
    release.notify_one();
    let r = c.read_response(false).await.expect("the final response");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
}

/// An origin holding "0123456789" with a strong tag: a request with `Range` gets that range
/// (206), one without gets all of it; the very first request gets bytes 0-4 whatever it
/// asked (an origin that answers the range it was first asked for through another cache,
/// say), so a partial response is all trove holds.
fn ranged_origin(etag: &'static str) -> impl Fn(&kit::SeenRequest, usize) -> Action {
    move |req, n| {
        const BODY: &[u8] = b"0123456789";
        let wanted = req
            .header("range")
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
        let if_range_ok = req.header("if-range").is_none_or(|t| t == etag);
        let (first, last) = match wanted {
            _ if n == 0 => (0, 4),
            Some((a, b)) if if_range_ok && b < BODY.len() => (a, b),
            _ => {
                return respond(
                    200,
                    &[("cache-control", "max-age=600"), ("etag", etag)],
                    BODY,
                )
            }
        };
        let range = format!("bytes {first}-{last}/10");
        Action::Respond {
            status: 206,
            headers: vec![
                ("cache-control".into(), "max-age=600".into()),
                ("etag".into(), etag.into()),
                ("content-range".into(), range),
            ],
            body: BODY[first..=last].to_vec(),
        }
    }
}

#[tokio::test]
async fn a_stored_partial_is_completed_with_only_the_missing_range_9111_3_4() {
    let origin = Origin::start(ranged_origin("\"p\"")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let r = kit::get(&trove, "/", &[("range", "bytes=0-4")]).await;
    assert_eq!((r.status, r.text().as_str()), (206, "01234"));
    // Later ranges inside it come from the store (RFC 9111 §3.3).
    let r = kit::get(&trove, "/", &[("range", "bytes=2-3")]).await;
    assert_eq!((r.status, r.text().as_str()), (206, "23"));
    assert_eq!(origin.hits(), 1);
    // The whole response: only bytes 5-9 are asked for, under the stored tag.
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
    assert_eq!(
        r.header("cache-status"),
        Some("trove; fwd=partial; fwd-status=206; stored")
    );
    let asked = &origin.seen()[1];
    assert_eq!(asked.header("range"), Some("bytes=5-9"));
    assert_eq!(asked.header("if-range"), Some("\"p\""));
    // Now complete: a hit.
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
    assert_eq!(trove.result(3).await, "TCP_MEM_HIT/200");
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn a_range_past_a_stored_partial_asks_only_for_what_is_missing_9111_3_4() {
    let origin = Origin::start(ranged_origin("\"p\"")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[("range", "bytes=0-4")]).await;
    let r = kit::get(&trove, "/", &[("range", "bytes=3-7")]).await;
    assert_eq!((r.status, r.text().as_str()), (206, "34567"));
    assert_eq!(r.header("content-range"), Some("bytes 3-7/10"));
    assert_eq!(origin.seen()[1].header("range"), Some("bytes=5-7"));
    // 0-7 is held now.
    let r = kit::get(&trove, "/", &[("range", "bytes=1-6")]).await;
    assert_eq!((r.status, r.text().as_str()), (206, "123456"));
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn a_changed_representation_replaces_the_stored_partial_9110_13_1_5() {
    // The origin's tag is no longer the stored part's: If-Range fails, the whole new
    // response comes back and is what the client gets.
    let origin = Origin::start(|req, n| {
        if n == 0 {
            ranged_origin("\"old\"")(req, n)
        } else {
            ranged_origin("\"new\"")(req, n)
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, "/", &[("range", "bytes=0-4")]).await;
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
    assert_eq!(r.header("etag"), Some("\"new\""));
    assert_eq!(origin.seen()[1].header("if-range"), Some("\"old\""));
    let r = kit::get(&trove, "/", &[]).await;
    assert_eq!(r.header("etag"), Some("\"new\""));
    assert_eq!(origin.hits(), 2);
}
