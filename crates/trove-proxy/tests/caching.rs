//! RFC 9111 behaviour through real sockets: each test names the requirement it checks.

mod kit;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kit::{respond, Action, Origin, Trove};

const URL: &str = "/doc";

async fn origin_with(headers: &'static [(&'static str, &'static str)]) -> Origin {
    Origin::start(move |_, n| respond(200, headers, format!("body {n}").as_bytes())).await
}

async fn twice(headers: &'static [(&'static str, &'static str)]) -> (Origin, Trove, kit::Response) {
    let origin = origin_with(headers).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let second = kit::get(&trove, URL, &[]).await;
    (origin, trove, second)
}

#[tokio::test]
async fn max_age_response_is_reused_while_fresh_9111_4_2() {
    let (origin, trove, r) = twice(&[("cache-control", "max-age=60")]).await;
    assert_eq!(origin.hits(), 1);
    assert_eq!(r.text(), "body 0");
    assert_eq!(trove.result(1).await, "TCP_MEM_HIT/200");
}

#[tokio::test]
async fn hit_carries_the_stored_header_fields_9111_4() {
    let (_, _, r) = twice(&[
        ("cache-control", "max-age=60"),
        ("x-origin", "kept"),
        ("content-type", "text/x-test"),
        ("etag", "\"t\""),
    ])
    .await;
    assert_eq!(r.header("x-origin"), Some("kept"));
    assert_eq!(r.header("content-type"), Some("text/x-test"));
    assert_eq!(r.header("etag"), Some("\"t\""));
    assert_eq!(r.header("cache-status"), Some("trove; hit"));
    assert_eq!(r.header("content-length"), Some("6"));
    assert_eq!(
        r.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("age"))
            .count(),
        1
    );
}

#[tokio::test]
async fn no_store_response_is_not_stored_9111_5_2_2_5() {
    let (origin, trove, r) = twice(&[("cache-control", "no-store, max-age=60")]).await;
    assert_eq!(origin.hits(), 2);
    assert_eq!(r.text(), "body 1");
    assert_eq!(trove.result(1).await, "TCP_MISS/200");
    assert!(r.header("cache-status").unwrap().contains("no-store"));
}

#[tokio::test]
async fn private_response_is_not_stored_by_a_shared_cache_9111_5_2_2_7() {
    let (origin, _, _) = twice(&[("cache-control", "private, max-age=60")]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn authorization_request_is_not_served_to_others_9111_3_5() {
    let origin = origin_with(&[("cache-control", "max-age=60")]).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let a = kit::get(&trove, URL, &[("authorization", "Bearer alice")]).await;
    let b = kit::get(&trove, URL, &[]).await;
    assert_eq!(a.text(), "body 0");
    assert_eq!(
        b.text(),
        "body 1",
        "alice's response must not be served to another client"
    );
}

#[tokio::test]
async fn authorization_response_with_public_is_stored_9111_3_5() {
    let origin = origin_with(&[("cache-control", "public, max-age=60")]).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[("authorization", "Bearer x")]).await;
    kit::get(&trove, URL, &[("authorization", "Bearer x")]).await;
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn s_maxage_overrides_max_age_in_a_shared_cache_9111_5_2_2_10() {
    let (origin, _, _) = twice(&[("cache-control", "max-age=0, s-maxage=60")]).await;
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn expires_in_the_past_means_stale_9111_5_3() {
    let (origin, _, _) = twice(&[("expires", "Thu, 01 Jan 1970 00:00:00 GMT")]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn heuristic_freshness_from_last_modified_9111_4_2_2() {
    // Modified long ago: 10% of that is far more than the test takes.
    let (origin, _, _) = twice(&[("last-modified", "Mon, 01 Jan 2001 00:00:00 GMT")]).await;
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn response_without_freshness_information_is_not_reused_9111_4_2() {
    let (origin, _, _) = twice(&[]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn age_header_is_sent_on_hits_9111_5_1() {
    let (_, _, r) = twice(&[("cache-control", "max-age=60"), ("age", "10")]).await;
    let age: u64 = r.header("age").unwrap().parse().unwrap();
    assert!(age >= 10, "age {age} includes the origin's Age");
}

#[tokio::test]
async fn stale_response_is_revalidated_and_304_freshens_it_9111_4_3() {
    let origin = Origin::start(|req, _| {
        if req.header("if-none-match") == Some("\"v1\"") {
            respond(
                304,
                &[
                    ("etag", "\"v1\""),
                    ("cache-control", "max-age=60"),
                    ("x-new", "yes"),
                ],
                b"",
            )
        } else {
            respond(
                200,
                &[("etag", "\"v1\""), ("cache-control", "max-age=0")],
                b"payload",
            )
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.text(), "payload");
    assert_eq!(
        r.header("x-new"),
        Some("yes"),
        "304 headers merged into the stored response"
    );
    assert_eq!(trove.result(1).await, "TCP_REFRESH_UNMODIFIED/200");
    // Freshened by the 304's max-age=60: now a plain hit.
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.text(), "payload");
    assert_eq!(origin.hits(), 2);
    assert_eq!(trove.result(2).await, "TCP_MEM_HIT/200");
}

#[tokio::test]
async fn last_modified_is_used_to_revalidate_9111_4_3_1() {
    let origin = Origin::start(|req, _| {
        if req.header("if-modified-since").is_some() {
            respond(304, &[], b"")
        } else {
            respond(
                200,
                &[
                    ("last-modified", "Mon, 01 Jan 2001 00:00:00 GMT"),
                    ("cache-control", "no-cache"),
                ],
                b"lm",
            )
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.text(), "lm");
    assert_eq!(
        origin.seen()[1].header("if-modified-since"),
        Some("Mon, 01 Jan 2001 00:00:00 GMT")
    );
}

#[tokio::test]
async fn no_cache_response_is_validated_before_each_reuse_9111_5_2_2_4() {
    let origin = Origin::start(|req, _| {
        if req.header("if-none-match").is_some() {
            respond(304, &[("etag", "\"a\"")], b"")
        } else {
            respond(
                200,
                &[
                    ("etag", "\"a\""),
                    ("cache-control", "no-cache, max-age=600"),
                ],
                b"nc",
            )
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    for _ in 0..3 {
        assert_eq!(kit::get(&trove, URL, &[]).await.text(), "nc");
    }
    assert_eq!(origin.hits(), 3);
}

#[tokio::test]
async fn request_no_cache_forces_validation_9111_5_2_1_4() {
    let origin = Origin::start(|req, _| {
        if req.header("if-none-match").is_some() {
            respond(304, &[("etag", "\"a\"")], b"")
        } else {
            respond(
                200,
                &[("etag", "\"a\""), ("cache-control", "max-age=600")],
                b"x",
            )
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    kit::get(&trove, URL, &[("cache-control", "no-cache")]).await;
    assert_eq!(origin.hits(), 2);
    assert_eq!(trove.result(1).await, "TCP_REFRESH_UNMODIFIED/200");
    kit::get(&trove, URL, &[("pragma", "no-cache")]).await;
    assert_eq!(
        origin.hits(),
        3,
        "Pragma: no-cache without Cache-Control, §5.4"
    );
}

#[tokio::test]
async fn request_max_age_limits_reuse_9111_5_2_1_1() {
    let (origin, trove, _) = twice(&[("cache-control", "max-age=600"), ("age", "100")]).await;
    kit::get(&trove, URL, &[("cache-control", "max-age=50")]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn request_min_fresh_limits_reuse_9111_5_2_1_3() {
    let (origin, trove, _) = twice(&[("cache-control", "max-age=100")]).await;
    let r = kit::get(&trove, URL, &[("cache-control", "min-fresh=500")]).await;
    assert_eq!(origin.hits(), 2);
    // The stored response was fresh; the request's own directive refused it (RFC 9211
    // §2.2 `fwd=request`, not `fwd=stale`).
    let status = r.header("cache-status").unwrap_or("");
    assert!(status.contains("fwd=request"), "{status}");
    assert!(trove.result(2).await.starts_with("TCP_CLIENT_REFRESH_MISS"));
}

#[tokio::test]
async fn request_max_stale_accepts_a_stale_response_9111_5_2_1_2() {
    let (origin, trove, _) = twice(&[("cache-control", "max-age=1"), ("age", "5")]).await;
    assert_eq!(origin.hits(), 2, "stale without max-stale");
    let r = kit::get(&trove, URL, &[("cache-control", "max-stale=3600")]).await;
    assert_eq!(origin.hits(), 2);
    assert_eq!(r.status, 200);
    assert!(trove.result(2).await.starts_with("TCP_STALE_HIT"));
}

#[tokio::test]
async fn only_if_cached_miss_gives_504_9111_5_2_1_7() {
    let origin = origin_with(&[("cache-control", "max-age=60")]).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let r = kit::get(&trove, URL, &[("cache-control", "only-if-cached")]).await;
    assert_eq!(r.status, 504);
    assert_eq!(origin.hits(), 0);
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[("cache-control", "only-if-cached")]).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn request_no_store_is_not_stored_9111_5_2_1_5() {
    let origin = origin_with(&[("cache-control", "max-age=60")]).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[("cache-control", "no-store")]).await;
    kit::get(&trove, URL, &[]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn vary_keeps_several_variants_9111_4_1() {
    let origin = Origin::start(|req, _| {
        let lang = req.header("accept-language").unwrap_or("none").to_string();
        respond(
            200,
            &[("cache-control", "max-age=60"), ("vary", "Accept-Language")],
            lang.as_bytes(),
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    assert_eq!(
        kit::get(&trove, URL, &[("accept-language", "en")])
            .await
            .text(),
        "en"
    );
    assert_eq!(
        kit::get(&trove, URL, &[("accept-language", "fr")])
            .await
            .text(),
        "fr"
    );
    assert_eq!(
        kit::get(&trove, URL, &[("accept-language", "en")])
            .await
            .text(),
        "en"
    );
    assert_eq!(
        kit::get(&trove, URL, &[("accept-language", "fr")])
            .await
            .text(),
        "fr"
    );
    assert_eq!(kit::get(&trove, URL, &[]).await.text(), "none");
    assert_eq!(origin.hits(), 3);
}

#[tokio::test]
async fn vary_matching_normalises_whitespace_and_case_9111_4_1() {
    let origin = Origin::start(|_, n| {
        respond(
            200,
            &[("cache-control", "max-age=60"), ("vary", "accept-encoding")],
            format!("{n}").as_bytes(),
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[("accept-encoding", "gzip, br")]).await;
    let r = kit::get(&trove, URL, &[("Accept-Encoding", "gzip,br")]).await;
    assert_eq!(r.text(), "0");
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn vary_star_is_never_reused_9111_4_1() {
    let (origin, _, _) = twice(&[("cache-control", "max-age=60"), ("vary", "*")]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn unsafe_method_invalidates_target_and_location_9111_4_4() {
    let origin = Origin::start(|req, n| {
        if req.method == "POST" {
            respond(
                201,
                &[
                    ("location", "/other"),
                    ("content-location", "http://elsewhere.example/doc"),
                ],
                b"",
            )
        } else {
            respond(
                200,
                &[("cache-control", "max-age=600")],
                format!("{} {n}", req.path).as_bytes(),
            )
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    kit::get(&trove, "/other", &[]).await;
    assert_eq!(origin.hits(), 2);
    let mut c = trove.client().await;
    c.send(b"POST /doc HTTP/1.1\r\nHost: test.local\r\nContent-Length: 2\r\n\r\nhi")
        .await;
    assert_eq!(c.read_response(false).await.unwrap().status, 201);
    kit::get(&trove, URL, &[]).await;
    kit::get(&trove, "/other", &[]).await;
    assert_eq!(
        origin.hits(),
        5,
        "both the target and Location were invalidated"
    );
}

#[tokio::test]
async fn failed_unsafe_method_does_not_invalidate_9111_4_4() {
    let origin = Origin::start(|req, _| {
        if req.method == "DELETE" {
            respond(500, &[], b"")
        } else {
            respond(200, &[("cache-control", "max-age=600")], b"x")
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    trove.client().await.request("DELETE", URL, &[]).await;
    kit::get(&trove, URL, &[]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn head_is_answered_from_a_stored_get_9110_9_3_2() {
    let (origin, trove, _) = twice(&[("cache-control", "max-age=60")]).await;
    let r = trove.client().await.request("HEAD", URL, &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("6"));
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn clients_conditional_request_gets_304_from_the_cache_9110_13_1_2() {
    let origin = origin_with(&[("cache-control", "max-age=60"), ("etag", "\"e1\"")]).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[("if-none-match", "\"e1\"")]).await;
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some("\"e1\""));
    assert_eq!(trove.result(1).await, "TCP_IMS_HIT/304");
    let r = kit::get(&trove, URL, &[("if-none-match", "\"other\"")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn clients_conditional_miss_is_answered_after_storing_the_full_response() {
    let origin = origin_with(&[("cache-control", "max-age=60"), ("etag", "\"e1\"")]).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let r = kit::get(&trove, URL, &[("if-none-match", "\"e1\"")]).await;
    assert_eq!(r.status, 304);
    assert!(origin.seen()[0].header("if-none-match").is_none());
    assert_eq!(kit::get(&trove, URL, &[]).await.text(), "body 0");
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn if_match_failure_gives_412_9110_13_1_1() {
    let (_, trove, _) = twice(&[("cache-control", "max-age=60"), ("etag", "\"e1\"")]).await;
    let r = kit::get(&trove, URL, &[("if-match", "\"nope\"")]).await;
    assert_eq!(r.status, 412);
}

#[tokio::test]
async fn range_is_served_from_a_stored_response_9110_14_2() {
    let origin = Origin::start(|_, _| {
        respond(
            200,
            &[("cache-control", "max-age=60"), ("etag", "\"r\"")],
            b"0123456789",
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[("range", "bytes=2-5")]).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.text(), "2345");
    assert_eq!(r.header("content-range"), Some("bytes 2-5/10"));
    let r = kit::get(&trove, URL, &[("range", "bytes=-3")]).await;
    assert_eq!(r.text(), "789");
    let r = kit::get(&trove, URL, &[("range", "bytes=20-")]).await;
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */10"));
    let r = kit::get(&trove, URL, &[("range", "bytes=0-1,8-9")]).await;
    assert_eq!(r.status, 206);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("multipart/byteranges"));
    assert!(r.text().contains("bytes 8-9/10"));
    let r = kit::get(
        &trove,
        URL,
        &[("range", "bytes=2-5"), ("if-range", "\"old\"")],
    )
    .await;
    assert_eq!(r.status, 200, "If-Range mismatch gives the whole response");
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn range_miss_fetches_the_whole_response_then_answers_the_range() {
    let origin =
        Origin::start(|_, _| respond(200, &[("cache-control", "max-age=60")], b"0123456789")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let r = kit::get(&trove, URL, &[("range", "bytes=0-3")]).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.text(), "0123");
    assert!(origin.seen()[0].header("range").is_none());
    assert_eq!(kit::get(&trove, URL, &[]).await.text(), "0123456789");
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn stale_if_error_serves_stale_when_the_origin_fails_5861_4() {
    let origin = Origin::start(|_, n| {
        if n == 0 {
            respond(
                200,
                &[
                    ("cache-control", "max-age=1, stale-if-error=600"),
                    ("age", "5"),
                ],
                b"old",
            )
        } else {
            respond(503, &[], b"down")
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.text(), "old");
    assert_eq!(trove.result(1).await, "TCP_REFRESH_FAIL_OLD/200");
}

#[tokio::test]
async fn must_revalidate_forbids_serving_stale_on_error_9111_5_2_2_2() {
    let origin = Origin::start(|_, n| {
        if n == 0 {
            respond(
                200,
                &[
                    (
                        "cache-control",
                        "max-age=1, must-revalidate, stale-if-error=600",
                    ),
                    ("age", "5"),
                ],
                b"old",
            )
        } else {
            respond(503, &[], b"down")
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.status, 503);
}

#[tokio::test]
async fn stale_while_revalidate_serves_stale_and_refreshes_in_background_5861_3() {
    let origin = Origin::start(|_, n| {
        respond(
            200,
            &[
                ("cache-control", "max-age=1, stale-while-revalidate=600"),
                ("age", "5"),
            ],
            format!("v{n}").as_bytes(),
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.text(), "v0", "stale served at once");
    assert!(trove.result(1).await.starts_with("TCP_STALE_HIT"));
    assert!(
        kit::eventually(|| origin.hits() == 2).await,
        "background revalidation happened"
    );
    assert!(
        kit::eventually(|| trove
            .running
            .shared
            .store
            .lookup(&format!("http://test.local{URL}"))
            .first()
            .is_some_and(|o| o.body.complete_bytes().as_deref() == Some(b"v1")))
        .await,
        "store now holds the refreshed response"
    );
}

#[tokio::test]
async fn cdn_cache_control_overrides_cache_control_in_reverse_mode_9213_2_1() {
    let (origin, _, _) = twice(&[
        ("cache-control", "no-store"),
        ("cdn-cache-control", "max-age=60"),
    ])
    .await;
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn trove_cache_control_is_obeyed_and_removed_in_reverse_mode() {
    let (origin, _, r) = twice(&[
        ("cache-control", "max-age=0"),
        ("trove-cache-control", "max-age=60"),
    ])
    .await;
    assert_eq!(origin.hits(), 1);
    assert!(r.header("trove-cache-control").is_none());
    assert_eq!(
        r.header("cache-control"),
        Some("max-age=0"),
        "browsers still see the origin's"
    );
}

#[tokio::test]
async fn targeted_fields_are_ignored_in_forward_mode() {
    let origin = origin_with(&[
        ("cache-control", "no-store"),
        ("cdn-cache-control", "max-age=60"),
    ])
    .await;
    let trove = Trove::forward(|_| {}).await;
    kit::get(&trove, &origin.url(URL), &[]).await;
    kit::get(&trove, &origin.url(URL), &[]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn purge_removes_a_stored_url() {
    let (origin, trove, _) = twice(&[("cache-control", "max-age=60")]).await;
    let r = trove.client().await.request("PURGE", URL, &[]).await;
    assert_eq!(r.status, 200);
    kit::get(&trove, URL, &[]).await;
    assert_eq!(origin.hits(), 2);
    let r = trove.client().await.request("PURGE", "/never", &[]).await;
    assert_eq!(r.status, 404);
}

/// An object a tag or prefix rule removed is not a `Vary` miss: `Cache-Status` says it was
/// invalidated (RFC 9211 has no `fwd` token for it, so a `detail`).
#[tokio::test]
async fn an_invalidated_object_is_a_miss_with_detail_invalidated_9211_2_8() {
    let (origin, trove, _) =
        twice(&[("cache-control", "max-age=60"), ("surrogate-key", "t1")]).await;
    let purge = trove
        .client()
        .await
        .request("PURGE", "/", &[("trove-purge-tag", "t1")])
        .await;
    assert_eq!(purge.status, 200, "{}", purge.text());
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(origin.hits(), 2);
    assert_eq!(
        r.header("cache-status"),
        Some("trove; fwd=miss; fwd-status=200; stored; detail=invalidated")
    );
    let purge = trove
        .client()
        .await
        .request("PURGE", "/", &[("trove-purge-prefix", "1")])
        .await;
    assert_eq!(purge.status, 200, "{}", purge.text());
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(
        r.header("cache-status"),
        Some("trove; fwd=miss; fwd-status=200; stored; detail=invalidated")
    );
}

/// `Trove-Purge-Tag:` with no tag is a mistake (an unset variable in a script), not a
/// request to purge the URL: it is refused and nothing is removed.
#[tokio::test]
async fn purge_with_an_empty_tag_field_is_refused() {
    let (origin, trove, _) = twice(&[("cache-control", "max-age=60")]).await;
    for field in [
        "trove-purge-tag",
        "xkey-purge",
        "xkey-softpurge",
        "trove-purge-cache",
    ] {
        let r = trove
            .client()
            .await
            .request("PURGE", URL, &[(field, "")])
            .await;
        assert_eq!(r.status, 400, "{field}: {}", r.text());
        assert!(r.text().contains(field), "{field}: {}", r.text());
        let r = trove
            .client()
            .await
            .request("PURGE", URL, &[(field, " , ")])
            .await;
        assert_eq!(r.status, 400, "{field}: {}", r.text());
    }
    kit::get(&trove, URL, &[]).await;
    assert_eq!(origin.hits(), 1, "still stored");
}

#[tokio::test]
async fn concurrent_misses_collapse_into_one_origin_fetch() {
    let origin = Origin::start(|_, _| Action::Slow {
        head: b"HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: 6\r\n\r\n".to_vec(),
        pieces: vec![b"abc".to_vec(), b"def".to_vec()],
        pause: Duration::from_millis(150),
    })
    .await;
    let trove = Arc::new(Trove::reverse(&origin, |_| {}).await);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let t = Arc::clone(&trove);
        tasks.push(tokio::spawn(
            async move { kit::get(&t, URL, &[]).await.text() },
        ));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), "abcdef");
    }
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn stored_response_streams_to_clients_while_it_arrives() {
    // The origin sends "first" at once and "end" 600 ms later: a cache that buffered the
    // whole object would show the client nothing until then.
    let origin = Origin::start(|_, _| Action::Slow {
        head: b"HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: 8\r\n\r\nfirst"
            .to_vec(),
        pieces: vec![b"end".to_vec()],
        pause: Duration::from_millis(600),
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let mut c = trove.client().await;
    c.send(b"GET /doc HTTP/1.1\r\nHost: test.local\r\n\r\n")
        .await;
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while !got.ends_with(b"first") && tokio::time::Instant::now() < deadline {
        let mut buf = [0u8; 1024];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(50), c.stream.read(&mut buf)).await
        {
            got.extend_from_slice(&buf[..n]);
        }
    }
    assert!(
        got.ends_with(b"first"),
        "first bytes arrived before the origin finished"
    );
    assert!(!got.ends_with(b"end"));
}

#[tokio::test]
async fn response_larger_than_max_object_streams_through_uncached() {
    let big = vec![b'z'; 300_000];
    let body = big.clone();
    let origin =
        Origin::start(move |_, _| respond(200, &[("cache-control", "max-age=60")], &body)).await;
    let trove = Trove::reverse(&origin, |s| s.cache.max_object = 100_000).await;
    assert_eq!(kit::get(&trove, URL, &[]).await.body, big);
    assert_eq!(kit::get(&trove, URL, &[]).await.body, big);
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn chunked_response_of_unknown_length_outgrowing_the_limit_is_not_kept() {
    let origin = Origin::start(|_, _| {
        let mut raw =
            b"HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ntransfer-encoding: chunked\r\n\r\n"
                .to_vec();
        for _ in 0..30 {
            raw.extend_from_slice(format!("{:x}\r\n", 10_000).as_bytes());
            raw.extend_from_slice(&[b'q'; 10_000]);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        Action::Raw(raw)
    })
    .await;
    let trove = Trove::reverse(&origin, |s| s.cache.max_object = 100_000).await;
    assert_eq!(kit::get(&trove, URL, &[]).await.body.len(), 300_000);
    assert_eq!(kit::get(&trove, URL, &[]).await.body.len(), 300_000);
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn client_that_vanishes_does_not_stop_a_stored_fetch() {
    let origin = Origin::start(|_, _| Action::Slow {
        head: b"HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: 6\r\n\r\nabc"
            .to_vec(),
        pieces: vec![b"def".to_vec()],
        pause: Duration::from_millis(200),
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    {
        let mut c = trove.client().await;
        c.send(b"GET /doc HTTP/1.1\r\nHost: test.local\r\n\r\n")
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    } // client gone mid-body
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.text(), "abcdef");
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn negative_responses_with_freshness_are_cached() {
    let origin =
        Origin::start(|_, _| respond(404, &[("cache-control", "max-age=60")], b"nope")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[]).await;
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(origin.hits(), 1);
    assert_eq!(trove.result(1).await, "TCP_NEGATIVE_HIT/404");
}

#[tokio::test]
async fn hop_by_hop_fields_are_not_forwarded_9110_7_6_1() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = Arc::clone(&seen);
    let origin = Origin::start(move |req, _| {
        if req.header("x-private-hop").is_none()
            && req.header("via").is_some_and(|v| v.contains("trove"))
        {
            s2.fetch_add(1, Ordering::SeqCst);
        }
        respond(
            200,
            &[
                ("connection", "x-secret"),
                ("x-secret", "1"),
                ("keep-alive", "timeout=5"),
            ],
            b"h",
        )
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let r = kit::get(
        &trove,
        URL,
        &[("connection", "x-private-hop"), ("x-private-hop", "1")],
    )
    .await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "Connection-listed field removed, Via added"
    );
    assert!(r.header("x-secret").is_none());
    assert!(r.header("keep-alive").is_none());
}

fn partial_origin(etag_for_second: &'static str) -> impl Fn(&kit::SeenRequest, usize) -> Action {
    // Answers the first request with bytes 0-4 of "0123456789", the second with 5-9.
    move |_, n| {
        let (range, body, etag) = if n == 0 {
            ("bytes 0-4/10", &b"01234"[..], "\"p\"")
        } else {
            ("bytes 5-9/10", &b"56789"[..], etag_for_second)
        };
        respond(
            206,
            &[
                ("cache-control", "max-age=60"),
                ("content-range", range),
                ("etag", etag),
            ],
            body,
        )
    }
}

#[tokio::test]
async fn stored_partial_response_answers_ranges_inside_it_9111_3_3() {
    let origin = Origin::start(partial_origin("\"p\"")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    let r = kit::get(&trove, URL, &[("range", "bytes=0-4")]).await;
    assert_eq!((r.status, r.text().as_str()), (206, "01234"));
    let r = kit::get(&trove, URL, &[("range", "bytes=1-3")]).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.text(), "123");
    assert_eq!(r.header("content-range"), Some("bytes 1-3/10"));
    assert_eq!(origin.hits(), 1, "served from the stored partial");
    // Outside the stored range: to the origin.
    kit::get(&trove, URL, &[("range", "bytes=6-8")]).await;
    assert_eq!(origin.hits(), 2);
}

#[tokio::test]
async fn partial_responses_with_the_same_validator_are_combined_9111_3_4() {
    let origin = Origin::start(partial_origin("\"p\"")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[("range", "bytes=0-4")]).await;
    kit::get(&trove, URL, &[("range", "bytes=5-9")]).await;
    assert_eq!(origin.hits(), 2);
    let r = kit::get(&trove, URL, &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "0123456789");
    assert!(r.header("content-range").is_none());
    assert_eq!(
        origin.hits(),
        2,
        "the whole response was combined from the two parts"
    );
}

#[tokio::test]
async fn partial_responses_with_different_validators_are_not_combined_9111_3_4() {
    let origin = Origin::start(partial_origin("\"other\"")).await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    kit::get(&trove, URL, &[("range", "bytes=0-4")]).await;
    kit::get(&trove, URL, &[("range", "bytes=5-9")]).await;
    kit::get(&trove, URL, &[]).await;
    assert_eq!(origin.hits(), 3);
}

/// RFC 9111 §4.3.5: a HEAD response that selects a stored GET response (same validator)
/// updates its stored header fields, so the fresher freshness it carries serves later GETs.
#[tokio::test]
async fn head_response_freshens_the_stored_get_9111_4_3_5() {
    let origin = Origin::start(|req, _| {
        if req.method == "HEAD" {
            // An origin that ignores the conditional and answers in full; a HEAD's
            // Content-Length is the GET's.
            Action::Raw(
                b"HTTP/1.1 200 OK\r\netag: \"v1\"\r\ncache-control: max-age=600\r\nx-seen: head\r\ncontent-length: 4\r\n\r\n"
                    .to_vec(),
            )
        } else {
            respond(200, &[("etag", "\"v1\""), ("cache-control", "max-age=0")], b"body")
        }
    })
    .await;
    let trove = Trove::reverse(&origin, |_| {}).await;
    assert_eq!(kit::get(&trove, "/h", &[]).await.text(), "body");
    let mut c = trove.client().await;
    let head = c.request("HEAD", "/h", &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(origin.hits(), 2);
    let later = kit::get(&trove, "/h", &[]).await;
    assert_eq!(later.text(), "body");
    assert_eq!(
        later.header("x-seen"),
        Some("head"),
        "fields updated from the HEAD"
    );
    assert_eq!(origin.hits(), 2, "the GET was a hit: the HEAD freshened it");
    assert_eq!(trove.result(2).await, "TCP_MEM_HIT/200");
}

/// Issue 18, over sockets: one eviction order for the whole memory tier. With `memory =
/// 4MiB` and LRU, distinct 1.2 MB objects each fetched twice in a row hit on the second
/// fetch every time, and a 1 KB object fetched between every two requests misses once.
/// With an order per shard (16 shards sharing the budget, each insertion evicting from its
/// own shard first) the second fetch hit 13 times in 60 and the small object missed 18
/// times.
#[tokio::test]
async fn one_eviction_order_for_the_whole_memory_tier() {
    let big = vec![b'b'; 1_200_000];
    let origin = Origin::start(move |req, _| {
        let body: &[u8] = if req.path.starts_with("/big/") {
            &big
        } else {
            b"small object, one kilobyte or so"
        };
        respond(200, &[("cache-control", "max-age=3600")], body)
    })
    .await;
    let trove = Trove::reverse(&origin, |s| {
        s.cache.memory = 4 << 20;
        s.cache.eviction = trove_store::EvictionKind::Lru;
    })
    .await;
    let mut client = trove.client().await;
    let (mut big_hits, mut small_misses) = (0, 0);
    for i in 0..60 {
        let path = format!("/big/{i}");
        for pass in 0..2 {
            let small = client.get("/small", &[]).await;
            assert_eq!(small.status, 200);
            if !small.header("cache-status").unwrap_or("").contains("; hit") {
                small_misses += 1;
            }
            let r = client.get(&path, &[]).await;
            assert_eq!((r.status, r.body.len()), (200, 1_200_000), "{path}");
            let hit = r.header("cache-status").unwrap_or("").contains("; hit");
            if pass == 1 && hit {
                big_hits += 1;
            }
        }
    }
    assert_eq!(big_hits, 60, "second fetches of a 1.2 MB object that hit");
    assert_eq!(small_misses, 1, "misses of the small object used all along");
    assert_eq!(origin.hits(), 61, "one origin fetch per object");
}
