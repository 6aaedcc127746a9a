//! The table of the core's verdicts (`cases.table`), read into cases. Shared by the core's
//! own test (`tests/verdicts.rs`, the engine in virtual time) and trove-proxy's
//! (`tests/verdict_table.rs`, `trove serve` over loopback), so both drivers are held to
//! one table.
//!
//! Columns, separated by `|`:
//! - **name** of the case;
//! - **stored**: the response headers the origin gave a first GET (stored if storable),
//!   `name: value` pairs separated by `;`, or `-` for nothing asked before;
//! - **age**: seconds from that first GET to the request under test;
//! - **request**: method, then header fields, separated by `;`;
//! - **answer**: what the origin answers the request under test (and any background
//!   revalidation it causes): status then fields, `fail` (connection refused), `timeout`,
//!   or `-` when it must not be asked (asking then fails the request, which the result
//!   column catches). A 304 that does not answer the stored response is followed by a
//!   whole fetch, answered 200 with `max-age=60`;
//! - **result**: Squid's `RESULT/status`;
//! - **cache-status**: the `Cache-Status` member after `trove; ` (`-` for none);
//! - **asked**: origin requests for the request under test, `c` when each was
//!   conditional (`1c`);
//! - **then**: `RESULT/status` of a plain GET right after (the origin, if asked, answers
//!   200 with `max-age=60`), or `-`.
//!
//! A line `@policy reverse` runs the cases after it under a reverse proxy's policy (which
//! obeys the targeted fields `Trove-Cache-Control` and `CDN-Cache-Control`, RFC 9213),
//! `@policy forward` under a forward proxy's (the default).

#![allow(dead_code)] // Each test uses what it needs.

use http::{HeaderMap, HeaderName, HeaderValue};

pub const TABLE: &str = include_str!("cases.table");

/// The answer to a request the table does not script (`then`, and a refetch after a 304
/// that did not match).
pub const PLAIN_ANSWER: &str = "200; cache-control: max-age=60";

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    /// `None` for nothing stored.
    pub stored: Option<&'static str>,
    pub age: u64,
    pub method: &'static str,
    pub request: Vec<(&'static str, &'static str)>,
    pub answer: Answer,
    pub result: &'static str,
    pub cache_status: &'static str,
    pub asked: &'static str,
    pub then: Option<&'static str>,
    /// Under a reverse proxy's policy.
    pub reverse: bool,
}

/// What the origin does.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Never asked.
    Nothing,
    Fail,
    Timeout,
    /// Status and fields, then what follows a 304 (see the column's description).
    Respond(u16, Vec<(&'static str, &'static str)>),
}

impl Answer {
    pub fn parse(col: &'static str) -> Answer {
        match col.trim() {
            "-" => Answer::Nothing,
            "fail" => Answer::Fail,
            "timeout" => Answer::Timeout,
            s => {
                let mut parts = s.split(';');
                let status = parts.next().unwrap().trim().parse().expect("a status");
                Answer::Respond(status, pairs(parts))
            }
        }
    }

    /// The answers the origin gives in turn: a 304 is followed by a whole response.
    pub fn sequence(&self) -> Vec<Answer> {
        match self {
            Answer::Respond(304, _) => vec![self.clone(), Answer::parse(PLAIN_ANSWER)],
            Answer::Nothing => Vec::new(),
            other => vec![other.clone()],
        }
    }
}

/// `name: value` pairs.
pub fn pairs(parts: impl Iterator<Item = &'static str>) -> Vec<(&'static str, &'static str)> {
    parts
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (n, v) = p.split_once(':').unwrap_or_else(|| panic!("field {p:?}"));
            (n.trim(), v.trim())
        })
        .collect()
}

pub fn fields(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

pub fn cases() -> Vec<Case> {
    let mut reverse = false;
    TABLE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            if let Some(policy) = line.strip_prefix("@policy ") {
                reverse = match policy.trim() {
                    "reverse" => true,
                    "forward" => false,
                    other => panic!("unknown policy {other:?}"),
                };
                return None;
            }
            let c: Vec<&'static str> = line.split('|').map(str::trim).collect();
            assert_eq!(c.len(), 9, "nine columns: {line}");
            let mut request = c[3].split(';');
            Some(Case {
                name: c[0],
                stored: (c[1] != "-").then_some(c[1]),
                age: c[2].parse().expect("age"),
                method: request.next().unwrap().trim(),
                request: pairs(request),
                answer: Answer::parse(c[4]),
                result: c[5],
                cache_status: c[6],
                asked: c[7],
                then: (c[8] != "-").then_some(c[8]),
                reverse,
            })
        })
        .collect()
}

/// The `asked` column for `asked` origin requests of which `conditional` carried a validator.
pub fn asked(asked: usize, conditional: usize) -> String {
    let c = if asked > 0 && conditional == asked {
        "c"
    } else {
        ""
    };
    format!("{asked}{c}")
}

/// What a driver gave for one case, in the table's terms.
pub struct Got {
    /// `RESULT/status`.
    pub result: String,
    /// The whole `Cache-Status` member (`trove; …`), or empty for none.
    pub cache_status: String,
    pub asked: usize,
    pub conditional: usize,
    /// `RESULT/status` of the GET after, or `-`.
    pub then: String,
}

/// `None` when `got` is what `case` says; else the two side by side.
pub fn differs(case: &Case, got: &Got) -> Option<String> {
    let got = [
        got.result.clone(),
        got.cache_status
            .strip_prefix("trove; ")
            .unwrap_or("-")
            .to_string(),
        asked(got.asked, got.conditional),
        got.then.clone(),
    ];
    let want = [
        case.result,
        case.cache_status,
        case.asked,
        case.then.unwrap_or("-"),
    ];
    got.iter().zip(want).any(|(g, w)| g != w).then(|| {
        format!(
            "{}\n    want {}\n    got  {}",
            case.name,
            want.join(" | "),
            got.join(" | ")
        )
    })
}

/// Fails with every case that differs (`ran` cases were run).
pub fn assert_none_differ(failures: &[String], ran: usize) {
    assert!(
        failures.is_empty(),
        "{} of {ran} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
