//! The replay: each trace record becomes a request to trove's own cache core
//! (`trove_cache::engine` over a `trove_store::MemoryStore`, the server's store with its
//! shard count and eviction policies) at the record's time on a virtual clock, answered by
//! the [`TraceOrigin`]. Several cache configurations (sizes × policies) are replayed side by
//! side from one pass over the trace, so the trace is read and parsed once.
//!
//! Work done once per distinct URL, not per request: parsing and normalising it into trove's
//! cache key, finding its server, whether it looks dynamic, its content type.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, Method};
use serde::Serialize;
use trove_cache::engine::Engine;
use trove_cache::{CookiePolicy, Outcome, Step};
use trove_http::Policy;
use trove_store::{EvictionKind, MemoryStore, Removal, Storage};

use crate::assume::{guess_type, is_hit_result, Assumptions, Head};
use crate::disk::{DiskModel, DiskTier};
use crate::intern::{FastMap, FastSet, Names};
use crate::net::{Exchange, NetModel, NetReport, Params};
use crate::origin::{Asked, Scratch, TraceOrigin, Wanted};
use crate::trace::csv::ID_HOST;
use crate::trace::synthetic::UNCACHABLE;
use crate::trace::Record;

/// `trove serve` splits its memory store into this many shards; eviction order depends on
/// it, so the replay uses the same.
pub const STORE_SHARDS: usize = 16;

/// `trove serve` names itself `trove-xxxx` in `Via`; a stored head is charged by its
/// length, so the replay's is as long.
const VIA: &str = "1.1 trove-0000";

/// One cache configuration to replay.
#[derive(Debug, Clone)]
pub struct Config {
    /// Memory budget in bytes; `None`: unbounded (nothing is ever evicted); `Some(0)`: no
    /// data cache at all.
    pub cache_size: Option<u64>,
    pub policy: EvictionKind,
    /// Largest object stored (`[cache] max_object`).
    pub max_object: u64,
    pub cookies: CookiePolicy,
    pub heuristic: Policy,
    /// The network model, or `None` for hit ratios only.
    pub net: Option<Params>,
    /// A disk tier under the memory tier, or `None` for memory only.
    pub disk: Option<DiskModel>,
}

#[derive(Debug, Default, Clone)]
struct Counters {
    requests: u64,
    hits: u64,
    bytes: u64,
    hit_bytes: u64,
    origin_requests: u64,
    origin_body_bytes: u64,
    outcomes: [u64; Outcome::ALL.len()],
}

struct Sim {
    cfg: Config,
    engine: Engine,
    disk: Option<DiskTier>,
    c: Counters,
    net: Option<NetModel>,
}

/// The engine one configuration replays through (its memory tier, policies and `Via`), and
/// its disk tier if it has one (its writer `held`: see [`DiskTier::open`]).
pub(crate) fn engine_for(cfg: &Config, held: bool) -> anyhow::Result<(Engine, Option<DiskTier>)> {
    let capacity = cfg.cache_size.unwrap_or(u64::MAX / 4);
    let memory = MemoryStore::new(capacity, STORE_SHARDS, cfg.max_object, cfg.policy);
    let (store, disk): (Arc<dyn Storage>, _) = match &cfg.disk {
        None => (Arc::new(memory), None),
        Some(model) => {
            let tier = DiskTier::open(memory, model, held)?;
            (tier.store.clone(), Some(tier))
        }
    };
    let mut engine = Engine::new(store, cfg.heuristic.clone(), cfg.cookies.clone());
    engine.via = HeaderValue::from_static(VIA);
    // Nothing is sent, and a memory tier alone never writes a head out: no wire form
    // (a disk tier writes it with each object's head).
    engine.wire = cfg.disk.is_some();
    if let Some(model) = &cfg.disk {
        engine.file_min = Some(model.sendfile_min);
        engine.real_bodies = true;
    }
    Ok((engine, disk))
}

impl Sim {
    fn new(cfg: Config) -> anyhow::Result<Sim> {
        let (engine, disk) = engine_for(&cfg, false)?;
        let net = cfg.net.clone().map(NetModel::new);
        Ok(Sim {
            cfg,
            engine,
            disk,
            c: Counters::default(),
            net,
        })
    }
}

/// What is known about one distinct URL.
#[derive(Debug)]
struct UrlInfo {
    key: Box<str>,
    server: u32,
    dynamic: bool,
    content_type: &'static str,
    /// Largest body a 200 for it has logged (its size when the log does not say).
    largest: u64,
    /// In [`Assumptions::uncachable`].
    uncachable: bool,
}

/// How one record was served by the first configuration (for `--outcomes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub outcome: Outcome,
    pub status: u16,
}

/// Object numbers seen: a bitmap for the small ones (traces number their objects densely,
/// from 0 or 1: a bit test instead of a hash-set insertion on every record), a set for the
/// rest (numbers that are hashes).
#[derive(Debug, Default)]
struct Seen {
    bits: Vec<u64>,
    /// Numbers in `bits`.
    dense: usize,
    sparse: FastSet<u64>,
}

/// Numbers below this are kept as bits: at most 8 MiB of them.
const DENSE: u64 = 1 << 26;

impl Seen {
    fn insert(&mut self, n: u64) {
        if n >= DENSE {
            self.sparse.insert(n);
            return;
        }
        let (word, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        if word >= self.bits.len() {
            // Doubles as a `Vec` grows: amortised, and bounded by `DENSE`.
            self.bits.resize(word + 1, 0);
        }
        if self.bits[word] & bit == 0 {
            self.bits[word] |= bit;
            self.dense += 1;
        }
    }

    fn len(&self) -> usize {
        self.dense + self.sparse.len()
    }
}

/// The replay of one trace through several configurations.
pub struct Replay {
    assumptions: Assumptions,
    urls: FastMap<Box<str>, u32>,
    /// Numbered objects (`Record::id`) by number, when the record does not give their
    /// size (a text trace's number that is not canonical is interned by its URL).
    numbered: FastMap<u64, u32>,
    /// Numbered objects whose records give their size: nothing about them needs keeping
    /// but that they were seen (their URL is their key; see [`Replay::feed`]).
    sized: Seen,
    /// The server id of [`ID_AUTHORITY`], once a numbered record has named it.
    id_server: Option<u32>,
    info: Vec<UrlInfo>,
    clients: Names,
    servers: Names,
    sims: Vec<Sim>,
    scratch: Scratch,
    clock: f64,
    /// The last clock reading and the instant it stands for.
    now: Option<(f64, SystemTime)>,
    first: Option<f64>,
    plain: HeaderMap,
    cookie: HeaderMap,
    via: HeaderValue,
    /// Records whose URL names nothing a cache could hold (CONNECT targets, garbage).
    pub unreplayable: u64,
    pub replayed: u64,
    outcomes: Option<Box<dyn Write>>,
}

impl Replay {
    /// The replay of `configs`; an error if a disk tier can't be opened.
    pub fn new(assumptions: Assumptions, configs: Vec<Config>) -> anyhow::Result<Replay> {
        let mut cookie = HeaderMap::new();
        cookie.insert(http::header::COOKIE, HeaderValue::from_static("session=1"));
        Ok(Replay {
            assumptions,
            urls: FastMap::default(),
            numbered: FastMap::default(),
            sized: Seen::default(),
            id_server: None,
            info: Vec::new(),
            clients: Names::default(),
            servers: Names::default(),
            sims: configs
                .into_iter()
                .map(Sim::new)
                .collect::<anyhow::Result<_>>()?,
            scratch: Scratch::default(),
            clock: 0.0,
            now: None,
            first: None,
            plain: HeaderMap::new(),
            cookie,
            via: HeaderValue::from_static(VIA),
            unreplayable: 0,
            replayed: 0,
            outcomes: None,
        })
    }

    /// Writes the first configuration's `RESULT/status` for every replayed record to `w`,
    /// one a line (the access log's result field, for comparing with a real cache).
    pub fn with_outcomes(mut self, w: Box<dyn Write>) -> Replay {
        self.outcomes = Some(w);
        self
    }

    fn url_id(&mut self, url: &str) -> Option<u32> {
        if let Some(&id) = self.urls.get(url) {
            return Some(id);
        }
        let id = self.intern(url)?;
        self.urls.insert(url.into(), id);
        Some(id)
    }

    /// Works out what is known of a URL seen for the first time.
    fn intern(&mut self, url: &str) -> Option<u32> {
        let (key, server) = match id_url_key(url) {
            // A numbered object's URL is its own cache key: nothing to parse (a trace of
            // one-hit wonders interns a URL for every fifth request).
            Some(key) => (key, self.servers.id(ID_AUTHORITY)),
            None => {
                let uri: http::Uri = url.parse().ok()?;
                let key = trove_http::key::cache_key(&uri)?;
                let host = uri.authority().map_or("", |a| a.as_str());
                (key.into_boxed_str(), self.servers.id(host))
            }
        };
        let id = self.info.len() as u32;
        self.info.push(UrlInfo {
            server,
            dynamic: Assumptions::is_dynamic(url),
            content_type: guess_type(url),
            key,
            largest: 0,
            uncachable: self.assumptions.uncachable.contains(url),
        });
        Some(id)
    }

    fn record_id(&mut self, r: &Record<'_>) -> Option<u32> {
        let Some(n) = r.id else {
            return self.url_id(r.url);
        };
        if let Some(&id) = self.numbered.get(&n) {
            return Some(id);
        }
        // Known by number from now on; the text map need not hold it too (a numbered
        // record's URL is always given with its number).
        let id = self.intern(r.url)?;
        self.numbered.insert(n, id);
        Some(id)
    }

    /// Replays one record through every configuration.
    pub fn feed(&mut self, r: &Record<'_>) -> std::io::Result<()> {
        // A numbered object of known size (every CSV and `oracleGeneral` record) is
        // replayed straight from its record: its URL is its cache key, on the one server
        // `ID_AUTHORITY`, not dynamic, of no guessable type. Nothing is interned for it, so
        // a trace of millions of one-hit wonders costs one set insertion each.
        let sized = match (r.id, r.object_size) {
            (Some(n), Some(size)) if r.url.starts_with(ID_HOST) => Some((n, size)),
            _ => None,
        };
        // Interned (`Ok`, its id), or replayed from its record (`Err`, its size).
        let known: Result<u32, u64> = match sized {
            Some((n, size)) => {
                self.sized.insert(n);
                Err(size)
            }
            None => match self.record_id(r) {
                Some(id) => Ok(id),
                None => {
                    self.unreplayable += 1;
                    return Ok(());
                }
            },
        };
        let id_server = match (sized, self.id_server) {
            (Some(_), None) => {
                let s = self.servers.id(ID_AUTHORITY);
                self.id_server = Some(s);
                s
            }
            (_, s) => s.unwrap_or(0),
        };
        self.replayed += 1;
        // Logs are not always in order (Squid writes a line when a transfer ends): the
        // virtual clock never goes back.
        self.clock = self.clock.max(r.time);
        self.first.get_or_insert(r.time);
        // Readers bound times (`trace::MAX_TIME`); a reader that did not still can't
        // overflow the clock.
        let now = match self.now {
            // Records share their time (a second's worth of a trace at whole seconds).
            Some((at, now)) if at == self.clock => now,
            _ => {
                let now =
                    Duration::try_from_secs_f64(self.clock.clamp(0.0, crate::trace::MAX_TIME))
                        .ok()
                        .and_then(|d| UNIX_EPOCH.checked_add(d))
                        .unwrap_or(UNIX_EPOCH);
                self.now = Some((self.clock, now));
                now
            }
        };
        let (server, dynamic, uncachable, guessed_type, largest) = match known {
            Ok(id) => {
                let info = &self.info[id as usize];
                (
                    info.server,
                    info.dynamic,
                    info.uncachable,
                    info.content_type,
                    Some((id, info.largest)),
                )
            }
            // `guess_type` finds no extension in `ID_HOST` and digits (a test checks).
            Err(_) => (id_server, false, false, "", None),
        };
        let cachable = r.content_type != UNCACHABLE
            && !uncachable
            && !(dynamic && self.assumptions.dynamic_uncachable);
        let mut wanted = Wanted {
            status: r.status,
            size: 0,
            version: r.object_size.unwrap_or(0),
            cachable,
            content_type: if r.content_type.is_empty() || r.content_type == UNCACHABLE {
                guessed_type
            } else {
                r.content_type
            },
        };
        // The body the record's byte count holds, and the object's size.
        let (body, size) = match (r.object_size, largest) {
            (Some(size), _) => (r.bytes, size),
            (None, None) => (r.bytes, r.bytes),
            (None, Some((id, largest))) => {
                let head = self.assumptions.head;
                let (added, fields) = match head {
                    Head::None => (0, 0),
                    _ => (
                        self.scratch.head_added(head, r.result, r.status),
                        self.scratch
                            .stored_fields(&self.assumptions, &wanted, &self.via),
                    ),
                };
                let mut body = head.body(r.bytes, r.status, added, fields);
                // A hit's head is not known to the byte (its `Age`): once a miss has said
                // what the object's size is, a hit's count does not change it.
                let hit = head == Head::Trove && is_hit_result(r.result);
                if hit && largest > 0 {
                    body = body.min(largest);
                }
                let largest = if r.status == 200 {
                    let l = largest.max(body);
                    self.info[id as usize].largest = l;
                    l
                } else {
                    largest
                };
                (body, largest.max(body))
            }
        };
        wanted.size = size;
        let key = match known {
            Ok(id) => &*self.info[id as usize].key,
            Err(_) => r.url,
        };
        let method = match r.method {
            "GET" => Method::GET,
            "HEAD" => Method::HEAD,
            m => Method::from_bytes(m.as_bytes()).unwrap_or(Method::GET),
        };
        let headers = if self.assumptions.has_cookie(r.client, r.url) {
            &self.cookie
        } else {
            &self.plain
        };
        let client = self.clients.id(r.client);
        for (i, sim) in self.sims.iter_mut().enumerate() {
            let mut origin = TraceOrigin {
                assumptions: &self.assumptions,
                wanted,
                scratch: &mut self.scratch,
                now,
                asked: Asked::default(),
            };
            let served = sim.engine.handle(&method, key, headers, now, &mut origin);
            if let Some(d) = &sim.disk {
                d.settle(None, None);
            }
            let asked = origin.asked;
            let hit = served.outcome.is_hit();
            let c = &mut sim.c;
            c.requests += 1;
            c.bytes = c.bytes.saturating_add(r.bytes);
            if hit {
                c.hits += 1;
                c.hit_bytes = c.hit_bytes.saturating_add(r.bytes);
            }
            c.origin_requests += u64::from(asked.requests);
            c.origin_body_bytes = c.origin_body_bytes.saturating_add(asked.body_bytes);
            c.outcomes[served.outcome.index()] += 1;
            if let Some(net) = &mut sim.net {
                let storing = served.steps.contains(&Step::Store);
                let acc = net.exchange(&Exchange {
                    time: self.clock,
                    client,
                    server,
                    delivered: body.min(size),
                    object_size: size,
                    origin_asked: asked.requests > 0,
                    origin_body: asked.body_bytes,
                    storing,
                });
                if acc.drop_stored {
                    sim.engine.store.remove(key, Removal::Failed);
                }
            }
            if i == 0 {
                if let Some(w) = &mut self.outcomes {
                    writeln!(
                        w,
                        "{}/{:03}",
                        served.outcome.as_str(),
                        served.status.as_u16()
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The results so far.
    pub fn results(&mut self) -> Vec<ConfigReport> {
        if let Some(w) = &mut self.outcomes {
            let _ = w.flush();
        }
        self.sims.iter().map(ConfigReport::of).collect()
    }

    pub fn distinct_urls(&self) -> usize {
        self.info.len() + self.sized.len()
    }

    pub fn servers(&self) -> usize {
        self.servers.len()
    }

    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Virtual time the trace covered, seconds.
    pub fn span(&self) -> f64 {
        self.first.map_or(0.0, |f| self.clock - f)
    }
}

/// The answers for one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    /// Bytes; `None` for an unbounded cache.
    pub cache_size: Option<u64>,
    pub policy: &'static str,
    pub requests: u64,
    pub hits: u64,
    pub hit_ratio: f64,
    pub bytes_to_clients: u64,
    pub hit_bytes: u64,
    pub byte_hit_ratio: f64,
    pub origin_requests: u64,
    /// Body bytes the origin sent (whole responses; the network model's figure accounts for
    /// aborted transfers).
    pub origin_body_bytes: u64,
    pub evictions: u64,
    pub stored_objects: u64,
    pub stored_bytes: u64,
    /// Requests by Squid result code.
    pub outcomes: BTreeMap<&'static str, u64>,
    pub network: Option<NetReport>,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl ConfigReport {
    /// Adds another node's figures for the same configuration (a modelled cluster): counts
    /// summed, ratios made again; a network model's figures do not add up and are dropped.
    pub fn add(&mut self, o: &ConfigReport) {
        self.requests += o.requests;
        self.hits += o.hits;
        self.bytes_to_clients += o.bytes_to_clients;
        self.hit_bytes += o.hit_bytes;
        self.origin_requests += o.origin_requests;
        self.origin_body_bytes += o.origin_body_bytes;
        self.evictions += o.evictions;
        self.stored_objects += o.stored_objects;
        self.stored_bytes += o.stored_bytes;
        for (k, v) in &o.outcomes {
            *self.outcomes.entry(k).or_insert(0) += v;
        }
        self.hit_ratio = ratio(self.hits, self.requests);
        self.byte_hit_ratio = ratio(self.hit_bytes, self.bytes_to_clients);
        self.network = None;
    }

    fn of(s: &Sim) -> ConfigReport {
        let st = s.engine.store.stats();
        ConfigReport {
            cache_size: s.cfg.cache_size,
            policy: s.cfg.policy.as_str(),
            requests: s.c.requests,
            hits: s.c.hits,
            hit_ratio: ratio(s.c.hits, s.c.requests),
            bytes_to_clients: s.c.bytes,
            hit_bytes: s.c.hit_bytes,
            byte_hit_ratio: ratio(s.c.hit_bytes, s.c.bytes),
            origin_requests: s.c.origin_requests,
            origin_body_bytes: s.c.origin_body_bytes,
            evictions: st.evictions,
            stored_objects: st.objects,
            stored_bytes: st.bytes,
            outcomes: Outcome::ALL
                .iter()
                .filter(|o| s.c.outcomes[o.index()] > 0)
                .map(|o| (o.as_str(), s.c.outcomes[o.index()]))
                .collect(),
            network: s.net.as_ref().map(NetModel::report),
        }
    }
}

/// The authority of [`ID_HOST`].
const ID_AUTHORITY: &str = "trace.invalid";

/// The cache key of a numbered object's URL (`ID_HOST` and decimal digits), which is the
/// URL itself, already normalised; `None` for any other URL.
fn id_url_key(url: &str) -> Option<Box<str>> {
    let digits = url.strip_prefix(ID_HOST)?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then(|| url.into())
}

/// The time a record's virtual clock reading stands for (exposed for tests).
pub fn instant(t: f64) -> SystemTime {
    Duration::try_from_secs_f64(t.clamp(0.0, crate::trace::MAX_TIME))
        .ok()
        .and_then(|d| UNIX_EPOCH.checked_add(d))
        .unwrap_or(UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut for numbered URLs gives the key and server the parser would.
    #[test]
    fn numbered_urls_are_their_own_keys() {
        for url in [
            "http://trace.invalid/0",
            "http://trace.invalid/18446744073709551615",
        ] {
            let uri: http::Uri = url.parse().unwrap();
            let parsed = trove_http::key::cache_key(&uri).unwrap();
            assert_eq!(id_url_key(url).as_deref(), Some(parsed.as_str()));
            assert_eq!(uri.authority().unwrap().as_str(), ID_AUTHORITY);
            // What `feed` assumes of a numbered URL without interning it.
            assert_eq!(guess_type(url), "");
            assert!(!Assumptions::is_dynamic(url));
        }
        for url in [
            "http://trace.invalid/",
            "http://trace.invalid/1?x",
            "http://trace.invalid/1/2",
            "http://TRACE.invalid/1",
        ] {
            assert_eq!(id_url_key(url), None, "{url}");
        }
    }
}
