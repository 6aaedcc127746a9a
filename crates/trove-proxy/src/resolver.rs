//! Names to addresses, with a cache in front: every connection trove makes to a name goes
//! through here (forward requests and CONNECT tunnels, whose addresses the destination
//! guard then checks, and the operator's `[[origin]]` upstreams).
//!
//! A forward proxy that asks the system resolver per request pays a blocking
//! `getaddrinfo` on every hit it must check (a remote client's, see `crate::destination`)
//! and on every new origin connection; serious proxies keep their own cache of answers
//! instead (Squid's ipcache, nginx's `resolver … valid=`, Traffic Server's HostDB). So does
//! trove:
//!
//! - **Answers are kept as long as their records' TTL says**, bounded by
//!   `[resolver] min_ttl` and `max_ttl`; a failure (the name doesn't exist or has no
//!   address, the name server timed out or erred) is kept `negative_ttl`, or the shorter
//!   negative TTL the zone gives (RFC 2308).
//! - **One lookup per name at a time.** The first request for a name that isn't known
//!   starts the lookup in a task of its own (so it completes and is cached even if that
//!   request goes away), bounded by `[timeouts] connect`; requests for the same name
//!   meanwhile wait on it instead of asking again.
//! - **Bounded.** At most `max_names` names are kept; to make room the expired go first,
//!   then the answer closest to expiring (failures are kept shorter, so a client spraying
//!   made-up names mostly displaces its own failures, not the popular names).
//! - A cached answer is one immutable list of addresses (`Arc<[IpAddr]>`): what the
//!   destination guard checks is the very list the connection is then made to, so caching
//!   adds no window for DNS rebinding. A name's next answer, after expiry, is checked anew.
//!
//! Lookups are done by [hickory-resolver](https://docs.rs/hickory-resolver) (the
//! [`System`] source): the most used async DNS stub resolver in Rust, maintained by the
//! hickory-dns project, that reads `/etc/resolv.conf` (name servers, `search`, `ndots`,
//! `timeout`, `attempts`), speaks UDP and TCP on tokio without a blocking thread per
//! lookup, returns the records' TTLs (which `getaddrinfo` hides, so a cache over it could
//! only guess a lifetime), answers RFC 6761 special names itself (`localhost`, `*.invalid`
//! never leave the host) and caches per query type behind ours. trove adds what a proxy
//! needs on top: the cache above (hickory's own lookups cost microseconds even when
//! cached, which the hit path can't afford, and count nothing), and the C library's rule
//! for `/etc/hosts` (`hosts: files dns`): a name the hosts file lists is answered from it
//! alone, in both address families, never asking DNS for the family it lacks, as hickory
//! would. The hosts file and `resolv.conf` are read once, at start-up.
//!
//! IP literals never get here: `crate::destination::candidates` reads them first, in every
//! spelling the C library accepts.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::Query;
use hickory_resolver::proto::rr::{Name, RecordType};
use hickory_resolver::{Hosts, TokioResolver};
use parking_lot::RwLock;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::settings::ResolverSettings;

/// The longest name in presentation form: 253 characters, 254 with the root's dot.
const MAX_NAME_LEN: usize = 254;

/// How a request for a name's addresses was answered: the `result` label of
/// `trove_resolver_queries_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Answered {
    /// From the cache: addresses.
    Hit,
    /// From the cache: a failure kept for `negative_ttl`.
    NegativeHit,
    /// Not known: this request started a lookup.
    Miss,
    /// Not known, but a lookup was under way: this request waited for it.
    Joined,
}

impl Answered {
    pub const ALL: [Answered; 4] = [
        Answered::Hit,
        Answered::NegativeHit,
        Answered::Miss,
        Answered::Joined,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Answered::Hit => "hit",
            Answered::NegativeHit => "negative-hit",
            Answered::Miss => "miss",
            Answered::Joined => "joined",
        }
    }
}

/// Why a lookup failed: the `reason` label of `trove_resolver_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The name does not exist, or has no address (NXDOMAIN, NODATA).
    NotFound,
    /// No answer within `[timeouts] connect`, or the name servers timed out.
    Timeout,
    /// The name servers could not be asked, or answered with an error (SERVFAIL, …).
    Error,
}

impl Failure {
    pub const ALL: [Failure; 3] = [Failure::NotFound, Failure::Timeout, Failure::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            Failure::NotFound => "not-found",
            Failure::Timeout => "timeout",
            Failure::Error => "error",
        }
    }

    /// The failure as the I/O error callers report: `TimedOut` for a timeout (answered
    /// 504, like a connect timeout), `NotFound` or `Other` otherwise (502).
    pub fn to_io(self, name: &str) -> io::Error {
        let (kind, why) = match self {
            Failure::NotFound => (io::ErrorKind::NotFound, "the name has no address"),
            Failure::Timeout => (io::ErrorKind::TimedOut, "the name servers did not answer"),
            Failure::Error => (io::ErrorKind::Other, "the name servers failed"),
        };
        io::Error::new(kind, format!("{name}: {why}"))
    }
}

/// The resolver's counters, read when metrics are rendered.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    /// By [`Answered::ALL`].
    pub answered: [u64; Answered::ALL.len()],
    /// By [`Failure::ALL`]: lookups that failed (once per lookup, not per request).
    pub failures: [u64; Failure::ALL.len()],
    /// Names held (answers, failures and lookups under way).
    pub names: u64,
}

/// What a [`Source`] found for one name: addresses and how long they may be kept (the
/// records' TTL), or why there are none.
pub type Found = Result<Answer, Failed>;

/// Addresses of a name, in the order to try them.
#[derive(Debug, Clone)]
pub struct Answer {
    pub ips: Vec<IpAddr>,
    /// The smallest TTL of the records that gave them.
    pub ttl: Duration,
}

/// Why a name has no addresses.
#[derive(Debug, Clone)]
pub struct Failed {
    pub why: Failure,
    /// The zone's negative TTL (RFC 2308), when the answer carried one.
    pub ttl: Option<Duration>,
}

impl Failed {
    fn new(why: Failure) -> Failed {
        Failed { why, ttl: None }
    }
}

/// Where answers come from when the cache has none: [`System`] in trove, a scripted source
/// in tests.
pub trait Source: Send + Sync + 'static {
    fn lookup(&self, name: &str) -> Pin<Box<dyn Future<Output = Found> + Send + 'static>>;
}

/// What the cache knows about a name.
#[derive(Debug, Clone)]
enum Known {
    Addrs(Arc<[IpAddr]>),
    Failed(Failure),
}

enum Slot {
    Known {
        known: Known,
        until: Instant,
    },
    /// A lookup is under way; its answer arrives on the channel.
    Pending(watch::Receiver<Option<Known>>),
}

/// See the module docs. Cheap to clone: clones share one cache.
#[derive(Clone)]
pub struct Resolver {
    inner: Arc<Inner>,
}

struct Inner {
    names: RwLock<HashMap<Box<str>, Slot>>,
    source: Arc<dyn Source>,
    min_ttl: Duration,
    max_ttl: Duration,
    negative_ttl: Duration,
    max_names: usize,
    lookup_timeout: Duration,
    answered: [AtomicU64; Answered::ALL.len()],
    failures: [AtomicU64; Failure::ALL.len()],
}

impl Resolver {
    /// The system's resolver configuration (`/etc/resolv.conf`, `/etc/hosts`) through
    /// hickory, with the cache in front; a lookup may take `lookup_timeout` at most.
    pub fn system(settings: &ResolverSettings, lookup_timeout: Duration) -> Resolver {
        Resolver::with_source(
            settings,
            lookup_timeout,
            Arc::new(System::new(settings, lookup_timeout)),
        )
    }

    /// The cache in front of any source.
    pub fn with_source(
        settings: &ResolverSettings,
        lookup_timeout: Duration,
        source: Arc<dyn Source>,
    ) -> Resolver {
        Resolver {
            inner: Arc::new(Inner {
                names: RwLock::new(HashMap::new()),
                source,
                min_ttl: settings.min_ttl,
                max_ttl: settings.max_ttl,
                negative_ttl: settings.negative_ttl,
                max_names: settings.max_names.max(1),
                lookup_timeout,
                answered: Default::default(),
                failures: Default::default(),
            }),
        }
    }

    /// The addresses of `name` (not an IP literal), from the cache when it has a live
    /// answer, else from one lookup shared by everyone asking meanwhile. Callers bound the
    /// time they wait; the lookup itself is bounded by the `lookup_timeout`.
    pub async fn lookup(&self, name: &str) -> Result<Arc<[IpAddr]>, Failure> {
        let inner = &self.inner;
        // No DNS name is longer (RFC 1035 §2.3.4); refusing longer ones unasked also keeps
        // a cache entry's key small, whatever a client sends.
        if name.len() > MAX_NAME_LEN {
            return Err(Failure::NotFound);
        }
        let now = Instant::now();
        let joined = match inner.names.read().get(name) {
            Some(Slot::Known { known, until }) if *until > now => return inner.cached(known),
            Some(Slot::Pending(rx)) => Some(rx.clone()),
            _ => None,
        };
        let mut rx = match joined {
            Some(rx) => {
                inner.count(Answered::Joined);
                rx
            }
            None => match self.begin(name, now) {
                Ok(rx) => rx,
                Err(known) => return inner.cached(&known),
            },
        };
        let known = match rx.wait_for(Option::is_some).await {
            Ok(known) => known.clone(),
            // The lookup task ended without an answer (it panicked, or the runtime is
            // shutting down): forget it, so the next request starts another.
            Err(_) => None,
        };
        match known {
            Some(known) => answer(known),
            None => {
                let mut names = inner.names.write();
                if matches!(names.get(name), Some(Slot::Pending(p)) if p.same_channel(&rx)) {
                    names.remove(name);
                }
                Err(Failure::Error)
            }
        }
    }

    /// Under the write lock: the live answer if another request stored one meanwhile, the
    /// lookup under way if one started, else a new lookup, started here.
    fn begin(&self, name: &str, now: Instant) -> Result<watch::Receiver<Option<Known>>, Known> {
        let inner = &self.inner;
        let tx = {
            let mut names = inner.names.write();
            match names.get(name) {
                Some(Slot::Known { known, until }) if *until > now => return Err(known.clone()),
                Some(Slot::Pending(rx)) => {
                    inner.count(Answered::Joined);
                    return Ok(rx.clone());
                }
                Some(Slot::Known { .. }) => {} // expired: replaced in place
                None => inner.make_room(&mut names, now),
            }
            let (tx, rx) = watch::channel(None);
            names.insert(name.into(), Slot::Pending(rx));
            tx
        };
        inner.count(Answered::Miss);
        let rx = tx.subscribe();
        let task = Arc::clone(inner);
        let name: Box<str> = name.into();
        tokio::spawn(async move {
            let found =
                match tokio::time::timeout(task.lookup_timeout, task.source.lookup(&name)).await {
                    Ok(found) => found,
                    Err(_) => Err(Failed::new(Failure::Timeout)),
                };
            let (known, keep) = task.settle(found);
            {
                let mut names = task.names.write();
                if keep.is_zero() {
                    names.remove(&name);
                } else {
                    let until = Instant::now() + keep;
                    names.insert(
                        name,
                        Slot::Known {
                            known: known.clone(),
                            until,
                        },
                    );
                }
            }
            // Nobody waiting is fine.
            let _ = tx.send(Some(known));
        });
        Ok(rx)
    }

    /// The counters, for metrics.
    pub fn stats(&self) -> Stats {
        let inner = &self.inner;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            answered: std::array::from_fn(|i| load(&inner.answered[i])),
            failures: std::array::from_fn(|i| load(&inner.failures[i])),
            names: inner.names.read().len() as u64,
        }
    }
}

fn answer(known: Known) -> Result<Arc<[IpAddr]>, Failure> {
    match known {
        Known::Addrs(ips) => Ok(ips),
        Known::Failed(why) => Err(why),
    }
}

impl Inner {
    fn count(&self, a: Answered) {
        self.answered[a as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn cached(&self, known: &Known) -> Result<Arc<[IpAddr]>, Failure> {
        self.count(match known {
            Known::Addrs(_) => Answered::Hit,
            Known::Failed(_) => Answered::NegativeHit,
        });
        answer(known.clone())
    }

    /// What to keep for a lookup's result, and for how long.
    fn settle(&self, found: Found) -> (Known, Duration) {
        let failed = match found {
            Ok(a) => {
                let mut ips = Vec::with_capacity(a.ips.len());
                for ip in a.ips {
                    if !ips.contains(&ip) {
                        ips.push(ip);
                    }
                }
                if !ips.is_empty() {
                    let keep = a.ttl.clamp(self.min_ttl, self.max_ttl.max(self.min_ttl));
                    return (Known::Addrs(ips.into()), keep);
                }
                Failed::new(Failure::NotFound)
            }
            Err(f) => f,
        };
        self.failures[failed.why as usize].fetch_add(1, Ordering::Relaxed);
        let keep = failed
            .ttl
            .map_or(self.negative_ttl, |t| t.min(self.negative_ttl));
        (Known::Failed(failed.why), keep)
    }

    /// Makes room for one more name: drops the expired, then, while full, the answer
    /// closest to expiring. Lookups under way are never dropped (their waiters hold them),
    /// so the map may exceed `max_names` by the lookups in flight, which the requests
    /// waiting on them bound.
    fn make_room(&self, names: &mut HashMap<Box<str>, Slot>, now: Instant) {
        if names.len() < self.max_names {
            return;
        }
        names.retain(|_, s| !matches!(s, Slot::Known { until, .. } if *until <= now));
        while names.len() >= self.max_names {
            let victim = names
                .iter()
                .filter_map(|(k, s)| match s {
                    Slot::Known { until, .. } => Some((*until, k)),
                    Slot::Pending(_) => None,
                })
                .min_by_key(|(until, _)| *until)
                .map(|(_, k)| k.clone());
            match victim {
                Some(k) => {
                    names.remove(&k);
                }
                None => break,
            }
        }
    }
}

/// The system's resolver configuration through hickory: `/etc/hosts` first and alone for
/// the names it lists, DNS (as `/etc/resolv.conf` says) for the rest. See the module docs.
pub struct System {
    hosts: Hosts,
    dns: TokioResolver,
}

impl System {
    /// Reads `/etc/hosts` and `/etc/resolv.conf` now. Neither missing is fatal, as for the
    /// C library: no hosts file means no static names, no `resolv.conf` means the name
    /// server on this host (`127.0.0.1:53`).
    pub fn new(settings: &ResolverSettings, lookup_timeout: Duration) -> System {
        let hosts = Hosts::from_system().unwrap_or_else(|e| {
            tracing::warn!("cannot read the hosts file ({e}); names come from DNS alone");
            Hosts::default()
        });
        let mut builder = TokioResolver::builder_tokio().unwrap_or_else(|e| {
            tracing::warn!("cannot read the system's resolver configuration ({e}); asking the name server on 127.0.0.1");
            let local = NameServerConfig::udp_and_tcp(IpAddr::V4(Ipv4Addr::LOCALHOST));
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![local]),
                TokioRuntimeProvider::default(),
            )
        });
        configure(builder.options_mut(), settings, lookup_timeout);
        let dns = builder.build().unwrap_or_else(|e| {
            tracing::warn!("cannot build the resolver from the system's configuration ({e}); asking the name server on 127.0.0.1");
            let local = NameServerConfig::udp_and_tcp(IpAddr::V4(Ipv4Addr::LOCALHOST));
            let mut b = TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![local]),
                TokioRuntimeProvider::default(),
            );
            configure(b.options_mut(), settings, lookup_timeout);
            // The same options over a plain config: only a bug in hickory fails here.
            b.build().expect("a resolver for 127.0.0.1")
        });
        System { hosts, dns }
    }

    /// The hosts file's addresses for `name` (IPv4 first), if it lists the name.
    fn in_hosts_file(&self, name: &Name) -> Option<Vec<IpAddr>> {
        let mut ips = Vec::new();
        let mut listed = false;
        for rtype in [RecordType::A, RecordType::AAAA] {
            if let Some(found) = self
                .hosts
                .lookup_static_host(&Query::query(name.clone(), rtype))
            {
                listed = true;
                ips.extend(found.answers().iter().filter_map(|r| r.data.ip_addr()));
            }
        }
        listed.then_some(ips)
    }
}

/// trove's choices over what `resolv.conf` says.
fn configure(o: &mut ResolverOpts, settings: &ResolverSettings, lookup_timeout: Duration) {
    // Both families, IPv4 first: connections try addresses in order without Happy
    // Eyeballs, and a host without working IPv6 would wait on every IPv6 address first.
    o.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    // The hosts file is consulted by `System` itself, with the C library's precedence.
    o.use_hosts_file = ResolveHosts::Never;
    // hickory's per-query cache sits behind trove's: same bounds, same size.
    o.cache_size = settings.max_names as u64;
    o.positive_min_ttl = Some(settings.min_ttl);
    o.positive_max_ttl = Some(settings.max_ttl.max(settings.min_ttl));
    o.negative_max_ttl = Some(settings.negative_ttl);
    // No single query may outlast the whole lookup.
    o.timeout = o.timeout.min(lookup_timeout);
}

impl Source for System {
    fn lookup(&self, name: &str) -> Pin<Box<dyn Future<Output = Found> + Send + 'static>> {
        // ASCII names as they are (DNS allows `_` and more, which IDNA refuses; the C
        // library asks for them too); others through IDNA.
        let parsed = if name.is_ascii() {
            Name::from_ascii(name)
        } else {
            Name::from_utf8(name)
        };
        let Ok(parsed) = parsed else {
            return Box::pin(std::future::ready(Err(Failed::new(Failure::NotFound))));
        };
        if let Some(ips) = self.in_hosts_file(&parsed) {
            // The hosts file is static for trove's lifetime: `max_ttl` bounds it.
            return Box::pin(std::future::ready(Ok(Answer {
                ips,
                ttl: Duration::MAX,
            })));
        }
        let dns = self.dns.clone();
        Box::pin(async move {
            match dns.lookup_ip(parsed).await {
                Ok(found) => {
                    let now = std::time::Instant::now();
                    let records = found.as_lookup().answers().iter().map(|r| r.ttl).min();
                    let ttl = found
                        .valid_until()
                        .saturating_duration_since(now)
                        .min(Duration::from_secs(records.map_or(u64::MAX, u64::from)));
                    Ok(Answer {
                        ips: found.iter().collect(),
                        ttl,
                    })
                }
                Err(e) => Err(classify(&e)),
            }
        })
    }
}

fn classify(e: &NetError) -> Failed {
    match e {
        NetError::Dns(DnsError::NoRecordsFound(none)) => Failed {
            why: Failure::NotFound,
            ttl: none.negative_ttl.map(|s| Duration::from_secs(s.into())),
        },
        NetError::Timeout => Failed::new(Failure::Timeout),
        _ => Failed::new(Failure::Error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// A source answering from a script, counting lookups; `delay` holds each answer, and
    /// a lookup of `panics` panics.
    #[derive(Default)]
    struct Script {
        answers: Mutex<HashMap<String, Found>>,
        asked: AtomicUsize,
        delay: Duration,
        panics: Mutex<Option<String>>,
    }

    impl Script {
        fn with(delay: Duration, entries: &[(&str, Found)]) -> Arc<Script> {
            Arc::new(Script {
                answers: Mutex::new(
                    entries
                        .iter()
                        .map(|(n, f)| (n.to_string(), f.clone()))
                        .collect(),
                ),
                asked: AtomicUsize::new(0),
                delay,
                panics: Mutex::new(None),
            })
        }

        fn set(&self, name: &str, found: Found) {
            self.answers.lock().unwrap().insert(name.into(), found);
        }

        fn asked(&self) -> usize {
            self.asked.load(Ordering::SeqCst)
        }
    }

    impl Source for Script {
        fn lookup(&self, name: &str) -> Pin<Box<dyn Future<Output = Found> + Send + 'static>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let found = self
                .answers
                .lock()
                .unwrap()
                .get(name)
                .cloned()
                .unwrap_or(Err(Failed::new(Failure::NotFound)));
            let delay = self.delay;
            let panics = self.panics.lock().unwrap().as_deref() == Some(name);
            Box::pin(async move {
                assert!(!panics, "scripted panic");
                tokio::time::sleep(delay).await;
                found
            })
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn addrs(ips: &[&str], ttl_secs: u64) -> Found {
        Ok(Answer {
            ips: ips.iter().map(|s| ip(s)).collect(),
            ttl: Duration::from_secs(ttl_secs),
        })
    }

    fn settings() -> ResolverSettings {
        ResolverSettings {
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(3600),
            negative_ttl: Duration::from_secs(30),
            max_names: 100,
        }
    }

    fn resolver(source: &Arc<Script>, s: ResolverSettings) -> Resolver {
        Resolver::with_source(&s, Duration::from_secs(5), Arc::clone(source) as _)
    }

    fn count(r: &Resolver, a: Answered) -> u64 {
        r.stats().answered[a as usize]
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_kept_for_its_ttl_within_the_bounds() {
        let src = Script::with(
            Duration::ZERO,
            &[
                (
                    "a.test",
                    addrs(&["192.0.2.1", "192.0.2.1", "2001:db8::1"], 60),
                ),
                ("zero.test", addrs(&["192.0.2.2"], 0)),
                ("long.test", addrs(&["192.0.2.3"], 86_400 * 7)),
            ],
        );
        let r = resolver(&src, settings());
        let first = r.lookup("a.test").await.unwrap();
        assert_eq!(
            &*first,
            &[ip("192.0.2.1"), ip("2001:db8::1")],
            "deduplicated"
        );
        tokio::time::advance(Duration::from_secs(59)).await;
        let again = r.lookup("a.test").await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the very list is handed out");
        assert_eq!(src.asked(), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        r.lookup("a.test").await.unwrap();
        assert_eq!(src.asked(), 2, "asked again after the TTL");
        // TTL 0 is kept min_ttl; a week is kept max_ttl.
        r.lookup("zero.test").await.unwrap();
        r.lookup("zero.test").await.unwrap();
        assert_eq!(src.asked(), 3);
        tokio::time::advance(Duration::from_millis(1001)).await;
        r.lookup("zero.test").await.unwrap();
        r.lookup("long.test").await.unwrap();
        assert_eq!(src.asked(), 5);
        tokio::time::advance(Duration::from_secs(3599)).await;
        r.lookup("long.test").await.unwrap();
        assert_eq!(src.asked(), 5);
        tokio::time::advance(Duration::from_secs(2)).await;
        r.lookup("long.test").await.unwrap();
        assert_eq!(src.asked(), 6);
        assert_eq!(count(&r, Answered::Miss), 6);
        assert_eq!(count(&r, Answered::Hit), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_is_kept_negative_ttl_or_the_zone_s_shorter_one() {
        let src = Script::with(
            Duration::ZERO,
            &[(
                "short.test",
                Err(Failed {
                    why: Failure::NotFound,
                    ttl: Some(Duration::from_secs(5)),
                }),
            )],
        );
        let r = resolver(&src, settings());
        for _ in 0..3 {
            assert_eq!(r.lookup("gone.test").await, Err(Failure::NotFound));
        }
        assert_eq!(src.asked(), 1);
        assert_eq!(count(&r, Answered::NegativeHit), 2);
        assert_eq!(r.stats().failures[Failure::NotFound as usize], 1);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(r.lookup("gone.test").await, Err(Failure::NotFound));
        assert_eq!(src.asked(), 2);
        // The zone says 5 s: kept 5 s, not 30.
        r.lookup("short.test").await.unwrap_err();
        tokio::time::advance(Duration::from_secs(6)).await;
        r.lookup("short.test").await.unwrap_err();
        assert_eq!(src.asked(), 4);
        // An answer without an address is a failure like NXDOMAIN.
        src.set("empty.test", addrs(&[], 60));
        assert_eq!(r.lookup("empty.test").await, Err(Failure::NotFound));
        assert_eq!(r.stats().failures[Failure::NotFound as usize], 5);
        // The name appears: its next lookup finds it.
        src.set("gone.test", addrs(&["192.0.2.9"], 60));
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(&*r.lookup("gone.test").await.unwrap(), &[ip("192.0.2.9")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_negative_ttl_keeps_no_failure() {
        let src = Script::with(Duration::ZERO, &[]);
        let r = resolver(
            &src,
            ResolverSettings {
                negative_ttl: Duration::ZERO,
                ..settings()
            },
        );
        r.lookup("gone.test").await.unwrap_err();
        r.lookup("gone.test").await.unwrap_err();
        assert_eq!(src.asked(), 2);
        assert_eq!(r.stats().names, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_for_a_name_share_one_lookup() {
        let src = Script::with(
            Duration::from_millis(100),
            &[("a.test", addrs(&["192.0.2.1"], 60))],
        );
        let r = resolver(&src, settings());
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let r = r.clone();
                tokio::spawn(async move { r.lookup("a.test").await })
            })
            .collect();
        for w in waiters {
            assert_eq!(&*w.await.unwrap().unwrap(), &[ip("192.0.2.1")]);
        }
        assert_eq!(src.asked(), 1);
        assert_eq!(count(&r, Answered::Miss), 1);
        assert_eq!(count(&r, Answered::Joined), 9);
    }

    /// The lookup runs in its own task: a request that stops waiting (its client went
    /// away, its timeout fired) doesn't cancel it, and the answer is cached for the next.
    #[tokio::test(start_paused = true)]
    async fn a_lookup_outlives_the_request_that_started_it() {
        let src = Script::with(
            Duration::from_millis(100),
            &[("a.test", addrs(&["192.0.2.1"], 60))],
        );
        let r = resolver(&src, settings());
        let gave_up = tokio::time::timeout(Duration::from_millis(10), r.lookup("a.test")).await;
        assert!(gave_up.is_err());
        tokio::time::advance(Duration::from_millis(200)).await;
        r.lookup("a.test").await.unwrap();
        assert_eq!(src.asked(), 1, "the lookup was not started again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lookup_that_takes_too_long_is_a_timeout_kept_negative_ttl() {
        let src = Script::with(
            Duration::from_secs(60),
            &[("slow.test", addrs(&["192.0.2.1"], 60))],
        );
        let r = resolver(&src, settings());
        assert_eq!(r.lookup("slow.test").await, Err(Failure::Timeout));
        assert_eq!(r.lookup("slow.test").await, Err(Failure::Timeout));
        assert_eq!(src.asked(), 1);
        assert_eq!(r.stats().failures[Failure::Timeout as usize], 1);
    }

    /// A lookup task that dies (here: the source panics) fails its waiters once and leaves
    /// no wedged entry behind.
    #[tokio::test(start_paused = true)]
    async fn a_lookup_that_dies_is_forgotten() {
        let src = Script::with(Duration::ZERO, &[("boom.test", addrs(&["192.0.2.1"], 60))]);
        *src.panics.lock().unwrap() = Some("boom.test".into());
        let r = resolver(&src, settings());
        assert_eq!(r.lookup("boom.test").await, Err(Failure::Error));
        *src.panics.lock().unwrap() = None;
        assert_eq!(&*r.lookup("boom.test").await.unwrap(), &[ip("192.0.2.1")]);
        assert_eq!(src.asked(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_max_names_are_kept_and_the_soonest_to_expire_goes_first() {
        let src = Script::with(
            Duration::ZERO,
            &[
                ("popular.test", addrs(&["192.0.2.1"], 600)),
                ("brief.test", addrs(&["192.0.2.2"], 10)),
                ("new.test", addrs(&["192.0.2.3"], 600)),
            ],
        );
        let r = resolver(
            &src,
            ResolverSettings {
                max_names: 3,
                ..settings()
            },
        );
        r.lookup("popular.test").await.unwrap();
        r.lookup("brief.test").await.unwrap();
        r.lookup("made-up.test").await.unwrap_err(); // a failure, kept 30 s
        assert_eq!(r.stats().names, 3);
        r.lookup("new.test").await.unwrap();
        assert_eq!(r.stats().names, 3);
        // brief.test (10 s) went; the failure (30 s) and popular.test stayed.
        let asked = src.asked();
        r.lookup("popular.test").await.unwrap();
        r.lookup("made-up.test").await.unwrap_err();
        assert_eq!(src.asked(), asked);
        r.lookup("brief.test").await.unwrap();
        assert_eq!(src.asked(), asked + 1);
        assert_eq!(r.stats().names, 3);
    }

    #[tokio::test]
    async fn a_name_longer_than_dns_allows_is_not_asked_or_kept() {
        let src = Script::with(Duration::ZERO, &[]);
        let r = resolver(&src, settings());
        let long = format!("{}.test", "a".repeat(300));
        assert_eq!(r.lookup(&long).await, Err(Failure::NotFound));
        assert_eq!(src.asked(), 0);
        assert_eq!(r.stats().names, 0);
    }

    /// The system source on this machine: `localhost` from `/etc/hosts` (loopback only, as
    /// the C library answers), an `.invalid` name refused without asking a name server
    /// (RFC 6761), and neither blocks.
    #[tokio::test]
    async fn the_system_source_answers_localhost_from_the_hosts_file_and_refuses_invalid() {
        let r = Resolver::system(&settings(), Duration::from_secs(5));
        let ips = r.lookup("localhost").await.unwrap();
        assert!(
            !ips.is_empty() && ips.iter().all(IpAddr::is_loopback),
            "{ips:?}"
        );
        assert_eq!(
            r.lookup("no-such-host.invalid").await,
            Err(Failure::NotFound)
        );
        assert_eq!(
            r.lookup("no-such-host.invalid").await,
            Err(Failure::NotFound)
        );
        assert_eq!(count(&r, Answered::NegativeHit), 1);
    }
}
