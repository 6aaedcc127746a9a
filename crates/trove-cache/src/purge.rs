//! `PURGE`: what a request asks to invalidate (its URL, tags, a named cache or a prefix,
//! hard or soft) and what the client is answered. Who may purge is the front end's ACL;
//! applying a rule durably is the driver's (the proxy's invalidation log, the simulator's
//! store).

use std::borrow::Cow;

use std::time::SystemTime;

use http::{HeaderMap, StatusCode};
use trove_store::invalidation::{cache_hash, tag_hash, Mode, Selector};
use trove_store::{Removal, Storage};

/// Request fields of a `PURGE`: tags to invalidate instead of the URL (also Varnish
/// xkey's `xkey-purge` and `xkey-softpurge`), a named cache, the URL as a prefix, and soft
/// instead of hard.
pub mod fields {
    pub const TAG: &str = "trove-purge-tag";
    pub const CACHE: &str = "trove-purge-cache";
    pub const PREFIX: &str = "trove-purge-prefix";
    pub const SOFT: &str = "trove-purge-soft";
    pub const XKEY: &str = "xkey-purge";
    pub const XKEY_SOFT: &str = "xkey-softpurge";
}

/// What one `PURGE` invalidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// Every stored variant of the request's URL.
    Url,
    /// Every object carrying any of these tags (one rule each).
    Tags(Vec<String>),
    /// Every object in this named cache.
    Cache(String),
    /// Every URL starting with the request's.
    Prefix,
}

/// A parsed `PURGE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purge {
    pub what: What,
    /// Soft: objects become stale (may still be served stale or revalidated) rather than gone.
    pub soft: bool,
}

/// The driver's report of a purge it applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purged {
    /// The last rule's sequence number.
    pub seq: u64,
    /// Objects removed at once (a URL's variants); `None` where they go lazily.
    pub removed: Option<u64>,
    /// How many rules the purge made.
    pub rules: usize,
}

/// What the client is told: a status and a line of text (logged `TCP_PURGE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    pub status: StatusCode,
    pub text: Cow<'static, str>,
}

/// Why a purge was not applied, as the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRefused {
    pub status: StatusCode,
    pub text: String,
}

/// Reads a `PURGE`'s fields. A field that names tags (or a cache) but is empty is a
/// mistake, such as an unset variable in a script: falling back to a purge of the URL
/// would do something else, so it is refused.
pub fn parse(h: &HeaderMap) -> Result<Purge, Told> {
    use fields as pf;
    let flag = |name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"))
    };
    let words = |name: &str| -> Vec<String> {
        h.get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split([' ', ',', '\t']))
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect()
    };
    for name in [pf::TAG, pf::XKEY, pf::XKEY_SOFT, pf::CACHE] {
        if h.contains_key(name) && words(name).is_empty() {
            return Err(respond(
                StatusCode::BAD_REQUEST,
                format!("{name} is empty: name at least one").into(),
            ));
        }
    }
    let soft = flag(pf::SOFT) || h.contains_key(pf::XKEY_SOFT);
    let mut tags = words(pf::TAG);
    tags.extend(words(pf::XKEY));
    tags.extend(words(pf::XKEY_SOFT));
    let cache = h
        .get(pf::CACHE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let what = if !tags.is_empty() {
        What::Tags(tags)
    } else if let Some(c) = cache {
        What::Cache(c)
    } else if flag(pf::PREFIX) {
        What::Prefix
    } else {
        What::Url
    };
    Ok(Purge { what, soft })
}

/// What the client is told once the purge was applied, or refused.
pub fn answer(p: &Purge, result: Result<Purged, PurgeRefused>) -> Told {
    let done = match result {
        Ok(d) => d,
        Err(e) => return respond(e.status, e.text.into()),
    };
    let mode = if p.soft { "soft" } else { "hard" };
    match (&p.what, p.soft, done.removed) {
        // A hard purge of a URL says whether anything was stored, as it always has.
        (What::Url, false, Some(0)) => respond(
            StatusCode::NOT_FOUND,
            Cow::Borrowed("nothing stored for this URL"),
        ),
        (What::Url, false, Some(n)) => respond(
            StatusCode::OK,
            format!("purged {n} stored response(s)").into(),
        ),
        (what, _, _) => {
            let kind = match what {
                What::Url => "url",
                What::Tags(_) => "tag",
                What::Cache(_) => "cache",
                What::Prefix => "prefix",
            };
            respond(
                StatusCode::OK,
                format!(
                    "invalidated ({kind} {mode}, {} call(s)), seq {}",
                    done.rules, done.seq
                )
                .into(),
            )
        }
    }
}

/// A `PURGE` applied straight to a store's invalidation rules (a URL's variants removed at
/// once when hard), as the proxy's admin API applies it but without a journal to wait on:
/// the simulator's way.
pub fn apply(store: &dyn Storage, key: &str, p: &Purge, now: SystemTime) -> Purged {
    let mode = if p.soft { Mode::Soft } else { Mode::Hard };
    let selectors: Vec<Selector> = match &p.what {
        What::Url => vec![Selector::Key(trove_store::hash::key_hash(key))],
        What::Tags(tags) => tags.iter().map(|t| Selector::Tag(tag_hash(t))).collect(),
        What::Cache(name) => vec![Selector::Tag(cache_hash(name))],
        What::Prefix => vec![Selector::Prefix(key.to_string())],
    };
    let rules = selectors.len();
    let inv = store.invalidations();
    let seq = selectors
        .into_iter()
        .filter_map(|s| inv.map(|i| i.add(s, mode, now)))
        .last()
        .unwrap_or(0);
    let removed = match (&p.what, mode) {
        (What::Url, Mode::Hard) => Some(store.remove(key, Removal::Purged) as u64),
        (What::Url, Mode::Soft) => Some(store.lookup(key).len() as u64),
        _ => None,
    };
    Purged {
        seq,
        removed,
        rules,
    }
}

fn respond(status: StatusCode, text: Cow<'static, str>) -> Told {
    Told { status, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in fields {
            h.append(*n, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_plain_purge_is_of_the_url_and_hard() {
        let p = parse(&HeaderMap::new()).unwrap();
        assert_eq!(
            p,
            Purge {
                what: What::Url,
                soft: false
            }
        );
    }

    #[test]
    fn tags_win_over_a_cache_and_xkey_softpurge_is_soft() {
        let p = parse(&head(&[
            (fields::CACHE, "c"),
            (fields::XKEY_SOFT, "a b"),
            (fields::TAG, "x,y"),
        ]))
        .unwrap();
        assert_eq!(
            p.what,
            What::Tags(vec!["x".into(), "y".into(), "a".into(), "b".into()])
        );
        assert!(p.soft);
    }

    #[test]
    fn an_empty_tag_field_is_refused_not_read_as_the_url() {
        let r = parse(&head(&[(fields::TAG, " , ")])).unwrap_err();
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_hard_url_purge_says_whether_anything_was_stored() {
        let p = parse(&HeaderMap::new()).unwrap();
        let none = Purged {
            seq: 1,
            removed: Some(0),
            rules: 1,
        };
        assert_eq!(answer(&p, Ok(none)).status, StatusCode::NOT_FOUND);
        let two = Purged {
            seq: 2,
            removed: Some(2),
            rules: 1,
        };
        assert_eq!(answer(&p, Ok(two)).status, StatusCode::OK);
        let soft = Purge { soft: true, ..p };
        let none = Purged {
            seq: 3,
            removed: Some(0),
            rules: 1,
        };
        assert_eq!(answer(&soft, Ok(none)).status, StatusCode::OK);
    }
}
