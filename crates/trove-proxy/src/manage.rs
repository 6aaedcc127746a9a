//! Application-managed caching (seed 002's DynamicWeb, grown up): put an object under a
//! URL, get it, delete it, and invalidate by URL, tag, named cache, prefix or ban, hard or
//! soft. The admin API (`trove-admin`) and `PURGE` on the proxy port both call these, so
//! the two can't disagree.
//!
//! Every URL a call names goes through [`trove_http::Target`], the one normaliser the
//! request path uses, so a call's key is exactly the key a client's request has.
//! Invalidations become rules in the store's [`Invalidations`] log (constant time, however
//! many objects they cover; see `trove_store::invalidation` for how and when they are
//! applied), and a URL's variants are also removed at once.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use trove_api as api;
use trove_http::{Target, TargetError};
use trove_store::hash::key_hash;
use trove_store::invalidation::{cache_hash, tag_hash, Ban, BanError, Mode, Selector};
use trove_store::{Body, Invalidations, Labels, Object, ObjectHead, Refused, Removal, Verdict};

use crate::metrics::InvalidationKind as Kind;
pub use crate::named_cache::NamedCaches;
use crate::settings::{Mode as ListenerMode, TagSettings};
use crate::state::Shared;

/// Why a call was refused: a 4xx with a stable code (see [`api::Error`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManageError {
    #[error("invalid URL: {0}")]
    BadUrl(&'static str),
    #[error("no named cache {0:?} is configured ([[named_cache]])")]
    UnknownCache(String),
    #[error("invalid ban pattern: {0}")]
    BadPattern(#[from] BanError),
    /// Pending bans are at their bound (count or memory): nothing was recorded.
    #[error("ban refused: {0}")]
    TooManyBans(BanError),
    #[error("{0}")]
    BadTag(String),
    #[error("object larger than the store admits ({0} bytes)")]
    TooLarge(u64),
    #[error("{0}")]
    BadRequest(String),
    #[error("nothing stored for this URL")]
    NotFound,
    /// The disk tier's invalidation journal could not make the rule durable: it is applied
    /// in memory, but a restart might undo it, so it is not acknowledged.
    #[error(
        "the invalidation could not be made durable ({0}); it applies until a restart, retry it"
    )]
    NotDurable(String),
}

impl ManageError {
    pub fn status(&self) -> StatusCode {
        match self {
            ManageError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ManageError::NotFound | ManageError::UnknownCache(_) => StatusCode::NOT_FOUND,
            ManageError::BadPattern(_) | ManageError::BadTag(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ManageError::BadUrl(_) | ManageError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ManageError::NotDurable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ManageError::TooManyBans(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ManageError::BadUrl(_) => "bad-url",
            ManageError::UnknownCache(_) => "unknown-cache",
            ManageError::BadPattern(_) => "bad-pattern",
            ManageError::BadTag(_) => "bad-tag",
            ManageError::TooLarge(_) => "too-large",
            ManageError::BadRequest(_) => "bad-request",
            ManageError::NotFound => "not-found",
            ManageError::NotDurable(_) => "not-durable",
            ManageError::TooManyBans(_) => "too-many-bans",
        }
    }

    pub fn body(&self) -> api::ErrorBody {
        api::ErrorBody {
            error: api::Error {
                code: self.code().to_string(),
                message: self.to_string(),
            },
        }
    }
}

fn bad_url(e: TargetError) -> ManageError {
    ManageError::BadUrl(e.as_str())
}

/// The normalised key of an absolute `http://` URL, exactly as a request for it is keyed.
pub fn key_of(url: &str) -> Result<String, ManageError> {
    Target::parse(url).map(Target::into_key).map_err(bad_url)
}

/// A URL prefix in the key's form: the scheme and authority normalised like a request's,
/// the path's escapes and case kept as a key keeps them (a prefix may end mid-segment, so
/// it is not given a trailing `/`).
pub fn prefix_of(prefix: &str) -> Result<String, ManageError> {
    key_of(prefix)
}

/// What an origin's tag fields said, within the bounds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct OriginTags {
    pub tags: Vec<String>,
    /// Tags dropped for being too long or too many.
    pub dropped: usize,
}

/// Reads the tags from `headers` (the fields `[tags] headers` names), and removes those
/// fields when `[tags] strip` says so.
pub fn origin_tags(settings: &TagSettings, headers: &mut HeaderMap) -> OriginTags {
    let mut out = OriginTags::default();
    for name in &settings.headers {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        for v in headers.get_all(&name) {
            let Ok(v) = v.to_str() else {
                out.dropped += 1;
                continue;
            };
            for t in v.split([' ', ',', '\t']).filter(|t| !t.is_empty()) {
                if out.tags.iter().any(|x| x == t) {
                    continue;
                }
                if t.len() > settings.max_length || out.tags.len() >= settings.max_per_object {
                    out.dropped += 1;
                } else {
                    out.tags.push(t.to_string());
                }
            }
        }
        if settings.strip {
            headers.remove(&name);
        }
    }
    out
}

/// Checks tags an API caller gave: each 1 to `max_length` bytes of visible ASCII, at most
/// `max_per_object`.
pub fn check_tags(settings: &TagSettings, tags: &[String]) -> Result<(), ManageError> {
    if tags.len() > settings.max_per_object {
        return Err(ManageError::BadTag(format!(
            "{} tags; at most {} per object ([tags] max_per_object)",
            tags.len(),
            settings.max_per_object
        )));
    }
    for t in tags {
        check_tag(settings, t)?;
    }
    Ok(())
}

fn check_tag(settings: &TagSettings, t: &str) -> Result<(), ManageError> {
    if t.is_empty() || t.len() > settings.max_length {
        return Err(ManageError::BadTag(format!(
            "a tag is 1 to {} bytes ([tags] max_length)",
            settings.max_length
        )));
    }
    if !t.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
        return Err(ManageError::BadTag(format!(
            "tag {t:?}: visible ASCII without commas only"
        )));
    }
    Ok(())
}

/// The labels for an object of `url` with `tags`, stamped `born` (its named cache: `cache`,
/// else the one the config gives its URL). Tag names are remembered for listings by
/// [`remember_tags`] once the object is stored.
pub fn labels(
    shared: &Shared,
    url: &Target,
    tags: &[String],
    cache: Option<&str>,
    born: u64,
) -> Labels {
    let inv = invalidations(shared);
    let hashes = tags.iter().map(|t| tag_hash(t)).collect();
    let cache = cache.or_else(|| shared.named_caches.select(url)).map(|n| {
        let h = cache_hash(n);
        inv.cache_name(h, n);
        h
    });
    Labels::new(hashes, cache, born)
}

/// Remembers the names of a stored object's tags, for listings (forgotten when the last
/// object carrying one leaves).
pub fn remember_tags(shared: &Shared, tags: &[String]) {
    let inv = invalidations(shared);
    for t in tags {
        inv.name(tag_hash(t), t);
    }
}

/// The store's invalidation state (the memory tier always keeps one).
pub fn invalidations(shared: &Shared) -> &Arc<Invalidations> {
    shared
        .invalidations
        .as_ref()
        .expect("the store keeps an invalidation log")
}

/// Returns once rule `seq` is durable — journaled and synced by the disk tier, at once
/// without one — waiting on the blocking pool, never on a runtime worker. Every
/// acknowledgement of an invalidation (the API's, `PURGE`'s) waits for this first, so a
/// restart, `kill -9` included, never undoes one that was acknowledged.
pub async fn durable(shared: &Shared, seq: u64) -> Result<(), ManageError> {
    let inv = invalidations(shared);
    if !inv.journaled() {
        return Ok(());
    }
    let inv = Arc::clone(inv);
    match tokio::task::spawn_blocking(move || inv.durable(seq)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ManageError::NotDurable(e.to_string())),
        Err(e) => Err(ManageError::NotDurable(e.to_string())),
    }
}

/// Records an invalidation and, for a URL, removes its variants at once. The caller
/// acknowledges it only after [`durable`].
pub fn invalidate(
    shared: &Shared,
    req: &api::Invalidate,
    now: SystemTime,
) -> Result<api::Ack, ManageError> {
    let mode = match req.mode {
        api::Mode::Hard => Mode::Hard,
        api::Mode::Soft => Mode::Soft,
    };
    let given = [
        req.url.is_some(),
        req.tag.is_some(),
        req.cache.is_some(),
        req.prefix.is_some(),
        req.ban.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if given != 1 {
        return Err(ManageError::BadRequest(
            "name exactly one of url, tag, cache, prefix, ban".into(),
        ));
    }
    let inv = invalidations(shared);
    let ack = |seq, kind: &str, removed, key| api::Ack {
        seq,
        kind: kind.to_string(),
        mode: req.mode,
        removed,
        key,
        bus_seq: None,
        not_applied_by: None,
    };
    let counted = |kind: Kind| {
        shared.metrics.invalidations[kind as usize * 2 + (mode == Mode::Soft) as usize]
            .fetch_add(1, Ordering::Relaxed);
    };
    // The replayable trace applies it where trove did (`crate::trace`).
    let traced = |kind: &'static str, value: String, seq: u64| {
        let inv = crate::trace::InvalidationRecord {
            kind,
            value,
            soft: mode == Mode::Soft,
            seq,
        };
        shared.trace.invalidation(&inv, now);
    };
    if let Some(url) = &req.url {
        let key = key_of(url)?;
        let seq = inv.add(Selector::Key(key_hash(&key)), mode, now);
        let removed = match mode {
            Mode::Hard => shared.store.remove(&key, Removal::Purged) as u64,
            Mode::Soft => shared.store.lookup(&key).len() as u64,
        };
        counted(Kind::Url);
        traced("url", key.clone(), seq);
        return Ok(ack(seq, "url", Some(removed), Some(key)));
    }
    if let Some(tag) = &req.tag {
        check_tag(&shared.settings.tags, tag)?;
        let seq = inv.add(Selector::Tag(tag_hash(tag)), mode, now);
        counted(Kind::Tag);
        traced("tag", tag.clone(), seq);
        return Ok(ack(seq, "tag", None, None));
    }
    if let Some(name) = &req.cache {
        if !shared.named_caches.knows(name) {
            return Err(ManageError::UnknownCache(name.clone()));
        }
        let seq = inv.add(Selector::Tag(cache_hash(name)), mode, now);
        counted(Kind::Cache);
        traced("cache", name.clone(), seq);
        return Ok(ack(seq, "cache", None, None));
    }
    if let Some(prefix) = &req.prefix {
        let p = prefix_of(prefix)?;
        let seq = inv.add(Selector::Prefix(p.clone()), mode, now);
        counted(Kind::Prefix);
        traced("prefix", p.clone(), seq);
        return Ok(ack(seq, "prefix", None, Some(p)));
    }
    if let Some(b) = &req.ban {
        let ban = Ban::parse(&b.subject, &b.op, &b.value)?;
        let seq = inv
            .add_ban(ban, mode, now)
            .map_err(ManageError::TooManyBans)?;
        counted(Kind::Ban);
        traced("ban", format!("{} {} {}", b.subject, b.op, b.value), seq);
        return Ok(ack(seq, "ban", None, None));
    }
    // Not reached (exactly one selector was checked above), but no panic on a request.
    Err(ManageError::BadRequest(
        "name exactly one of url, tag, cache, prefix, ban".into(),
    ))
}

/// A put: the DynamicWeb call. The object replaces whatever was stored for the URL.
#[derive(Debug, Clone)]
pub struct Put {
    pub url: String,
    pub status: u16,
    /// Stored response fields.
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Freshness lifetime; sets `Cache-Control: max-age` unless the fields have one.
    pub ttl: Option<Duration>,
    pub cache: Option<String>,
    pub tags: Vec<String>,
}

/// The freshness a put without a TTL gets (about ten years): until invalidated.
pub const UNTIL_INVALIDATED: &str = "max-age=315360000";

/// Fields a put may not set: framing is trove's, and tags go in `tags`.
fn settable(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::CONTENT_LENGTH
            | header::TRANSFER_ENCODING
            | header::CONNECTION
            | header::AGE
            | header::TE
            | header::TRAILER
            | header::UPGRADE
    ) && name.as_str() != "keep-alive"
}

/// Stores `put`; every variant stored before for the URL is replaced.
pub fn put(shared: &Shared, put: Put, now: SystemTime) -> Result<api::Ack, ManageError> {
    let url = Target::parse(&put.url).map_err(bad_url)?;
    // A status HTTP defines (RFC 9110 §15: three digits, 100–599; 600–999 are none), final,
    // and not a 304 (an answer to a condition, not a response to store).
    let status = StatusCode::from_u16(put.status)
        .ok()
        .filter(|s| (200..=599).contains(&s.as_u16()) && *s != StatusCode::NOT_MODIFIED)
        .ok_or_else(|| {
            ManageError::BadRequest(format!(
                "status {} can't be stored (200 to 599, not 304)",
                put.status
            ))
        })?;
    // Every hit on a put object goes to every client: a `Set-Cookie` stored with it would be
    // handed to all of them, which the cookie policy forbids unless it is "rfc".
    if put.headers.contains_key(header::SET_COOKIE)
        && shared.settings.cache.cookies.set_cookie != trove_cache::SetCookiePolicy::Rfc
    {
        return Err(ManageError::BadRequest(format!(
            "Set-Cookie can't be stored: every client would get it ([cache.cookies] \
             set_cookie = {:?})",
            shared.settings.cache.cookies.set_cookie.as_str()
        )));
    }
    check_tags(&shared.settings.tags, &put.tags)?;
    if let Some(c) = &put.cache {
        if !shared.named_caches.knows(c) {
            return Err(ManageError::UnknownCache(c.clone()));
        }
    }
    let max = shared.store.max_object();
    if put.body.len() as u64 > max {
        return Err(ManageError::TooLarge(max));
    }
    let mut headers = HeaderMap::new();
    for (n, v) in &put.headers {
        if settable(n) {
            headers.append(n.clone(), v.clone());
        }
    }
    let has_freshness =
        headers.contains_key(header::CACHE_CONTROL) || headers.contains_key(header::EXPIRES);
    match put.ttl {
        Some(ttl) if !has_freshness => {
            let v = format!("max-age={}", ttl.as_secs());
            headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_str(&v).expect("digits"),
            );
        }
        // DynamicWeb's objects stayed until invalidated: say so to trove alone (the
        // targeted field reverse listeners obey and never send on; RFC 9213).
        None if !has_freshness && !headers.contains_key(trove_http::TROVE_CACHE_CONTROL) => {
            headers.insert(
                trove_http::TROVE_CACHE_CONTROL,
                HeaderValue::from_static(UNTIL_INVALIDATED),
            );
        }
        _ => {}
    }
    if !headers.contains_key(header::DATE) {
        let d = httpdate::fmt_http_date(now);
        headers.insert(header::DATE, HeaderValue::from_str(&d).expect("date"));
    }
    let inv = invalidations(shared);
    let key = url.key().to_string();
    // Whatever was stored for the URL goes first: a put is the new truth for every variant.
    let seq = inv.add(Selector::Key(key_hash(&key)), Mode::Hard, now);
    shared.store.remove(&key, Removal::Replaced);
    let born = inv.current();
    let mut head = ObjectHead {
        status,
        headers,
        request_headers: HeaderMap::new(),
        request_time: now,
        response_time: now,
        prepared: Default::default(),
        labels: labels(shared, &url, &put.tags, put.cache.as_deref(), born),
    };
    trove_cache::prepare::prepare(shared.policy(ListenerMode::Reverse), &mut head);
    let obj = Object::new(key.clone(), String::new(), head, Body::complete(put.body));
    match shared.store.insert(obj) {
        Ok(_) => {
            remember_tags(shared, &put.tags);
            Ok(api::Ack {
                seq,
                kind: "put".into(),
                mode: api::Mode::Hard,
                removed: None,
                key: Some(key),
                bus_seq: None,
                not_applied_by: None,
            })
        }
        Err(Refused::TooLarge) => Err(ManageError::TooLarge(max)),
        Err(Refused::NotAdmitted) => {
            Err(ManageError::BadRequest("the store did not admit it".into()))
        }
    }
}

/// The stored objects for a URL that no rule has killed, newest first.
pub fn stored(shared: &Shared, url: &str) -> Result<(String, Vec<Arc<Object>>), ManageError> {
    let key = key_of(url)?;
    let inv = invalidations(shared);
    let mut live: Vec<Arc<Object>> = Vec::new();
    for o in shared.store.lookup(&key) {
        if inv.verdict(&o) == Verdict::Dead {
            shared.store.remove_object(&o, Removal::Purged);
        } else {
            live.push(o);
        }
    }
    live.sort_by_key(|o| std::cmp::Reverse(o.head.response_time));
    Ok((key, live))
}

/// The names of an object's tags and named cache.
pub fn names(shared: &Shared, obj: &Object) -> (Vec<String>, Option<String>) {
    let inv = invalidations(shared);
    let l = &obj.head.labels;
    let tags = l
        .tags
        .iter()
        .filter_map(|h| inv.name_of(*h).map(|n| n.to_string()))
        .collect();
    (
        tags,
        l.cache.and_then(|h| inv.name_of(h)).map(|n| n.to_string()),
    )
}

/// `GET /v1/meta`: every live variant of a URL.
pub fn meta(shared: &Shared, url: &str, now: SystemTime) -> Result<api::ObjectMeta, ManageError> {
    let (key, objs) = stored(shared, url)?;
    if objs.is_empty() {
        return Err(ManageError::NotFound);
    }
    let inv = invalidations(shared);
    let variants = objs
        .iter()
        .map(|o| {
            let (tags, cache) = names(shared, o);
            api::Variant {
                status: o.head.status.as_u16(),
                headers: o
                    .head
                    .headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                    .collect(),
                size: o.body.len(),
                complete: matches!(o.body.outcome(), Some(Ok(()))),
                tags,
                cache,
                age: now
                    .duration_since(o.head.response_time)
                    .unwrap_or_default()
                    .as_secs(),
                state: match inv.verdict(o) {
                    Verdict::Alive => "alive",
                    Verdict::Stale { .. } => "stale",
                    Verdict::Dead => "dead",
                }
                .into(),
            }
        })
        .collect();
    Ok(api::ObjectMeta { key, variants })
}

/// `DELETE /v1/object`: every variant of a URL, at once (a hard URL invalidation).
pub fn delete(shared: &Shared, url: &str, now: SystemTime) -> Result<api::Ack, ManageError> {
    let mut ack = invalidate(
        shared,
        &api::Invalidate {
            url: Some(url.to_string()),
            ..Default::default()
        },
        now,
    )?;
    ack.kind = "delete".into();
    Ok(ack)
}

/// `GET /v1/tags/NAME` or `/v1/caches/NAME`.
pub fn list(
    shared: &Shared,
    name: &str,
    cache: bool,
    limit: usize,
) -> Result<api::Listing, ManageError> {
    let h = if cache {
        if !shared.named_caches.knows(name) {
            return Err(ManageError::UnknownCache(name.to_string()));
        }
        cache_hash(name)
    } else {
        check_tag(&shared.settings.tags, name)?;
        tag_hash(name)
    };
    let (count, objs) = invalidations(shared).members(h, limit);
    let mut urls: Vec<String> = objs.iter().map(|o| o.key.clone()).collect();
    urls.sort();
    urls.dedup();
    Ok(api::Listing {
        name: name.to_string(),
        count,
        urls,
    })
}

/// `GET /v1/caches`.
pub fn caches(shared: &Shared) -> Vec<api::NamedCache> {
    let inv = invalidations(shared);
    shared
        .named_caches
        .names()
        .into_iter()
        .map(|n| api::NamedCache {
            name: n.to_string(),
            count: inv.members(cache_hash(n), 0).0,
        })
        .collect()
}

/// `GET /v1/stats`.
/// `GET /v1/cluster`: the cluster as this node sees it, `None` without one.
pub fn cluster(shared: &Shared) -> Option<api::ClusterStatus> {
    let c = shared.cluster.as_ref()?;
    // Health first: the shares follow from it (a node taken as down meanwhile owns none).
    let status = c.status();
    let shares = c.shares(10_000);
    Some(api::ClusterStatus {
        node: c.me().id.clone(),
        mode: c.mode.as_str().to_string(),
        owner: None,
        bus: None,
        nodes: status
            .into_iter()
            .zip(shares)
            .map(|(n, share)| api::ClusterNode {
                id: n.id,
                addr: n.addr,
                me: n.me,
                up: n.up,
                share,
                failures: n.failures,
                downs: n.downs,
            })
            .collect(),
    })
}

/// The id of the node that owns `url` now (`GET /v1/cluster?url=`): where a put for it must
/// go in shard mode, and which node's log has its hits.
pub fn cluster_owner(shared: &Shared, url: &str) -> Result<String, ManageError> {
    let key = key_of(url)?;
    let c = shared
        .cluster
        .as_ref()
        .ok_or_else(|| ManageError::BadRequest("this node has no [cluster]".into()))?;
    Ok(match c.owner(&key) {
        trove_cluster::Owner::Me => c.me().id.clone(),
        trove_cluster::Owner::Peer(p) => p.id.clone(),
    })
}

pub fn stats(shared: &Shared) -> api::Stats {
    let s = shared.store.stats();
    let i = invalidations(shared).stats();
    api::Stats {
        objects: s.objects,
        bytes: s.bytes,
        capacity: s.capacity,
        evictions: s.evictions,
        purged: s.removed(Removal::Purged),
        tiers: tiers(shared),
        seq: i.seq,
        pending_rules: i.pending,
        pending_bans: i.bans,
        tags: i.tags,
        memberships: i.memberships,
    }
}

/// Every tier's figures, memory first: the disk tier's too when `[cache.disk]` is set
/// (failed, when its directory could not be used).
pub fn tiers(shared: &Shared) -> Vec<api::TierStats> {
    let s = shared.store.stats();
    let mut tiers = vec![api::TierStats {
        tier: "memory".into(),
        objects: s.objects,
        bytes: s.bytes,
        capacity: s.capacity,
        evictions: s.evictions,
        ready: true,
        ..Default::default()
    }];
    if shared.has_disk() {
        let lower = shared.store.lower_stats();
        let d = lower.unwrap_or_default();
        tiers.push(api::TierStats {
            tier: "disk".into(),
            objects: d.objects,
            bytes: d.bytes,
            capacity: d.capacity,
            evictions: d.regions_reclaimed,
            writes_shed: d.writes_shed,
            writes_dropped: d.writes_dropped,
            ready: d.ready,
            failed: lower.is_none() || d.failed,
        });
    }
    tiers
}

/// `GET /v1/bans`: pending bans, oldest first.
pub fn bans(shared: &Shared, limit: usize) -> Vec<api::Ban> {
    invalidations(shared)
        .rules(true, limit)
        .iter()
        .filter_map(|r| match &r.selector {
            Selector::Ban(b) => Some(api::Ban {
                seq: r.seq,
                pattern: b.describe(),
                mode: match r.mode {
                    Mode::Hard => api::Mode::Hard,
                    Mode::Soft => api::Mode::Soft,
                },
                at: r
                    .at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs(),
            }),
            _ => None,
        })
        .collect()
}

/// Applies the rules to the store in the background, every `every`, while any are
/// pending: the dead are removed (their memory returns) and rules older than every fetch
/// that may still be arriving are retired. Off the request path (a thread of its own).
///
/// It follows the generation `current` names (reloads keep the store and its rules), and
/// ends when trove stops.
pub fn spawn_sweeper(current: Arc<crate::state::Current>, every: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(s) = current.get() else { return };
            let Some(inv) = s.invalidations.clone() else {
                return;
            };
            if inv.pending() == 0 {
                continue;
            }
            // A response to a request sent before a rule arrives within the origin's head
            // timeout (the object enters the store with its head); keep rules well past it.
            let t = &s.settings.timeouts;
            let keep = (t.origin_response + t.connect) * 2;
            let store = Arc::clone(&s.store);
            let trace = Arc::clone(&s.trace);
            drop(s);
            // A thread of its own, not the runtime's blocking pool: shutting down never
            // waits for a pass over a large store.
            let (tx, rx) = tokio::sync::oneshot::channel();
            std::thread::spawn(move || {
                let now = SystemTime::now();
                let before = now.checked_sub(keep).unwrap_or(SystemTime::UNIX_EPOCH);
                let queued = || store.lower_progress().map(|l| l.queued);
                let first = trace.enabled().then(queued).flatten();
                let report = inv.sweep(&*store, before);
                // The replay sweeps where trove swept (what it removes frees memory).
                // `whole` from this sweep's own scan: `scans` still says what an earlier
                // one covered when this one scanned nothing.
                trace.sweep(now, before, report.whole, first.zip(queued()));
                let _ = tx.send(report);
            });
            let _ = rx.await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_tags_split_bound_and_strip() {
        let s = TagSettings {
            max_length: 5,
            max_per_object: 3,
            ..TagSettings::default()
        };
        let mut h = HeaderMap::new();
        h.insert("surrogate-key", "a b  toolong".parse().unwrap());
        h.insert("cache-tag", "c,a,d,e".parse().unwrap());
        h.insert("x-other", "z".parse().unwrap());
        let t = origin_tags(&s, &mut h);
        assert_eq!(t.tags, vec!["a", "b", "c"]);
        assert_eq!(t.dropped, 3, "too long, then two past the count");
        assert!(!h.contains_key("surrogate-key") && !h.contains_key("cache-tag"));
        assert!(h.contains_key("x-other"));
    }

    #[test]
    fn keys_are_the_request_path_keys() {
        assert_eq!(
            key_of("HTTP://Example.COM:80/a/./b/%7e").unwrap(),
            "http://example.com/a/b/~"
        );
        assert!(key_of("/relative").is_err());
        assert_eq!(
            prefix_of("http://example.com").unwrap(),
            "http://example.com/"
        );
        assert_eq!(
            prefix_of("http://Example.com/img/x").unwrap(),
            "http://example.com/img/x"
        );
    }
}
