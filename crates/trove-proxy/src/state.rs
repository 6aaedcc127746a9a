//! What every connection shares: settings, the store, the origin pool, metrics, the log.

use std::sync::{Arc, OnceLock, Weak};

use http::{HeaderValue, Version};
use parking_lot::{Mutex, RwLock};
use tokio::sync::Semaphore;
use trove_cache::memo::PassMemo;
use trove_cache::Rules;
use trove_http::Policy;
use trove_store::{MemoryStore, Storage};

use crate::access_log::AccessLog;
use crate::acl::Acl;
use crate::cache::collapse::KeyLocks;
use crate::destination::DestinationPolicy;
use crate::fd_limit::Freed;
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, StoreFigures};
use crate::origin::{Pool, PoolLimits, Reachability};
use crate::resolver::Resolver;
use crate::route::Routes;
use crate::settings::{Mode, Settings};
use crate::status::history::History;
use crate::trace::TraceLog;

/// Shared state of one running proxy.
pub struct Shared {
    pub settings: Settings,
    pub acl: Acl,
    pub purge_acl: Acl,
    /// Ports forward-proxy requests may reach.
    pub safe_ports: crate::acl::PortSet,
    /// Where clients may make trove connect (forward requests and CONNECT tunnels).
    pub destinations: Arc<DestinationPolicy>,
    /// Names to addresses, cached, for every connection trove makes to a name.
    pub resolver: Resolver,
    pub routes: Routes,
    /// How forward-proxy `https://` requests speak TLS: verified against the system's trust
    /// store. Made at the first such request, and kept by every generation.
    pub forward_tls: Arc<std::sync::OnceLock<Option<Arc<trove_tls::OriginConnector>>>>,
    /// The store, behind the storage interface the cache core is written against.
    pub store: Arc<dyn Storage>,
    pub pool: Arc<Pool>,
    pub metrics: Arc<Metrics>,
    /// Shared by every generation while `log.access` is unchanged.
    pub log: Arc<AccessLog>,
    /// The replayable trace (`log.trace`), shared like `log`.
    pub trace: Arc<TraceLog>,
    forward_policy: Policy,
    reverse_policy: Policy,
    /// Fetches in progress, by cache key, that later requests may join.
    pub fetches: Arc<KeyLocks>,
    /// Background revalidations in progress (stale-while-revalidate), one per key.
    pub revalidations: Arc<KeyLocks>,
    /// Keys whose last response could not be stored (uncacheable or too large), so their
    /// misses forward the client's own Range and validators (see `trove_cache::memo`).
    pub memo: Arc<Mutex<PassMemo>>,
    /// `[cluster]`: the nodes sharing this cache and their health (kept across a reload
    /// that did not change it; probed by a task of its own while it lives).
    pub cluster: Option<Arc<trove_cluster::Cluster>>,
    /// `[cluster.bus]`: the cluster's feed of invalidations (one for the process's life).
    pub feed: Option<Arc<crate::feed::Feed>>,
    /// This instance's name in `Via` (and loop detection).
    pub via_name: String,
    /// `Via` as `1.1 <name>`: on responses (the origins speak HTTP/1.1) and on requests
    /// received over HTTP/1.1; see [`Shared::request_via`] for the others.
    pub via: HeaderValue,
    via_http2: HeaderValue,
    via_http10: HeaderValue,
    /// Requests allowed to wait on origins at once; past this, 503 at once.
    pub origin_slots: Arc<Semaphore>,
    /// Signalled when a client connection closes (an acceptor out of descriptors waits on it).
    pub freed: Arc<Freed>,
    /// Graceful stop, shared by every generation.
    pub lifecycle: Arc<Lifecycle>,
    /// The generation a reload made after this one (see [`crate::lifecycle`]).
    pub successor: Successor,
    /// The last minutes of the counters, for the status page (shared by every generation).
    pub history: Arc<History>,
    /// Named caches (`[[named_cache]]`).
    pub named_caches: crate::named_cache::NamedCaches,
    /// The store's invalidation rules and tag index (`crate::manage`).
    pub invalidations: Option<Arc<trove_store::Invalidations>>,
    /// `[cache.disk]` was configured but its directory could not be used at start-up: trove
    /// runs memory-only (logged once, and `trove_disk_failed` says so).
    pub disk_unavailable: bool,
}

/// Opens the tiers under the memory tier at start-up, from `[cache.disk]`. trove-proxy
/// knows tiers only through the storage interface: the binary passes the disk tier's
/// opener ([`crate::start_with`]), and [`Shared::new`] has none.
pub trait OpenLower: Send + Sync {
    /// `memory` with the tiers `cache` configures under it. `body_meter` counts the bytes
    /// bodies hold outside the store (a tier that spools bodies charges their windows to it).
    fn open(
        &self,
        memory: MemoryStore,
        cache: &crate::settings::CacheSettings,
        body_meter: Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<Arc<dyn Storage>, LowerError>;
}

/// Why [`OpenLower::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// The directory can't be used (unwritable, missing, failing): `[cache.disk]
    /// on_failure` decides whether trove stops or runs on memory alone.
    #[error("{0}")]
    Unusable(String),
    /// Anything else (held by another process, a newer format): start-up stops.
    #[error("{0}")]
    Fatal(String),
}

impl Shared {
    /// The `Via` trove adds to a request it forwards: the protocol it received the request
    /// with, then its name (RFC 9110, 7.6.3): `2 <name>` for HTTP/2, `1.0 <name>`, else
    /// `1.1 <name>`.
    pub fn request_via(&self, version: Version) -> &HeaderValue {
        match version {
            Version::HTTP_2 => &self.via_http2,
            Version::HTTP_10 => &self.via_http10,
            _ => &self.via,
        }
    }

    /// `None` while the disk tier configured works (or none is configured); else why not:
    /// it could not be used at start-up, or it failed since (I/O errors). For `/healthz`
    /// and the status page (issue 19, defect 11).
    pub fn disk_health(&self) -> Option<String> {
        if self.disk_unavailable {
            return Some("the disk tier could not be used at start-up; memory tier only".into());
        }
        let d = self.store.lower_stats()?;
        d.failed.then(|| {
            "the disk tier failed (I/O errors); memory tier only until a restart".to_string()
        })
    }

    /// Builds the shared state; must run inside a tokio runtime (the pool starts a reaper).
    /// `listening` are the proxy's bound listener addresses, which the destination guard
    /// refuses (with `settings.other_listeners`).
    /// Without an opener of lower tiers, `[cache.disk]` is refused (see
    /// [`Shared::with_lower`]).
    pub fn new(settings: Settings, listening: &[std::net::SocketAddr]) -> std::io::Result<Shared> {
        Shared::build(settings, listening, Start::First(None))
    }

    /// [`Shared::new`], opening the tiers under memory with `lower`.
    pub fn with_lower(
        settings: Settings,
        listening: &[std::net::SocketAddr],
        lower: &dyn OpenLower,
    ) -> std::io::Result<Shared> {
        Shared::build(settings, listening, Start::First(Some(lower)))
    }

    /// The generation after `prev` for a reload: `settings` applied over what `prev` carries
    /// over (see [`crate::lifecycle`]). Nothing of `prev` changes; the caller links them.
    pub fn after(
        prev: &Shared,
        mut settings: Settings,
        listening: &[std::net::SocketAddr],
    ) -> std::io::Result<Shared> {
        // What only a restart changes stays as it runs, so the next reload compares with
        // what is in effect: a change reverted before a restart is no change.
        let (running, next) = (&prev.settings.cache, &mut settings.cache);
        if next.disk != running.disk {
            tracing::warn!("cache.disk: a change takes effect at the next start, not on reload");
            next.disk = running.disk.clone();
        }
        next.eviction = running.eviction;
        Shared::build(settings, listening, Start::After(prev))
    }

    fn build(
        settings: Settings,
        listening: &[std::net::SocketAddr],
        start: Start<'_>,
    ) -> std::io::Result<Shared> {
        let (prev, lower) = match start {
            Start::First(lower) => (None, lower),
            Start::After(p) => (Some(p), None),
        };
        let metrics = match prev {
            Some(p) => Arc::clone(&p.metrics),
            None => Arc::new(Metrics::default()),
        };
        let history = match prev {
            Some(p) => Arc::clone(&p.history),
            None => {
                let h = Arc::new(History::default());
                History::start_sampling(&h, &metrics);
                h
            }
        };
        let a = &settings.access;
        let own = listening
            .iter()
            .chain(&settings.other_listeners)
            .copied()
            .collect();
        let destinations = Arc::new(
            DestinationPolicy::new(
                &a.local_clients,
                &a.allow_destinations,
                a.deny_private_destinations,
                own,
            )
            .map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("access.allow_destinations: {e}"),
                )
            })?,
        );
        // Lookups are bounded like the connections they are for.
        let resolver = match prev {
            Some(p)
                if p.settings.resolver == settings.resolver
                    && p.settings.timeouts.connect == settings.timeouts.connect =>
            {
                p.resolver.clone()
            }
            _ => Resolver::system(&settings.resolver, settings.timeouts.connect),
        };
        let c = &settings.cache;
        // The store, its tiers and their objects are carried over by a reload.
        let (store, disk_unavailable) = match prev {
            Some(p) => {
                let store = Arc::clone(&p.store);
                if (c.memory, c.max_object)
                    != (p.settings.cache.memory, p.settings.cache.max_object)
                {
                    store.resize(c.memory, c.max_object);
                }
                (store, p.disk_unavailable)
            }
            None => open_tiers(c, lower, &metrics.body_buffered)?,
        };
        // The admin API and PURGE record invalidations here (`crate::manage`): a store
        // without a rule log is refused at start rather than failing on the first call.
        let invalidations = Some(store.invalidations().cloned().ok_or_else(|| {
            std::io::Error::other("the store keeps no invalidation log (Storage::invalidations)")
        })?);
        let named_caches = crate::named_cache::NamedCaches::new(&settings.named_caches);
        let limits = PoolLimits {
            max_per_origin: settings.origin_pool.max_per_origin,
            max_uploads: settings.origin_pool.uploads_per_origin(),
            idle_timeout: settings.origin_pool.idle_timeout,
            connect_timeout: settings.timeouts.connect,
            max_queue_wait: settings.origin_pool.max_queue_wait,
            overload: crate::origin::Overload {
                after: settings.origin_pool.overload_after,
                queue_wait: settings.origin_pool.overload_queue_wait,
            },
        };
        // A pool is carried over while its limits and its guard are unchanged; otherwise a
        // new one starts and the old one's connections finish their requests and close.
        let pool = match prev {
            Some(p)
                if p.pool.limits()
                    == PoolLimits {
                        max_uploads: limits.max_uploads.max(1),
                        ..limits
                    }
                    && p.settings.access == settings.access
                    && p.settings.listeners == settings.listeners
                    && p.settings.other_listeners == settings.other_listeners =>
            {
                Arc::clone(&p.pool)
            }
            _ => Pool::new(
                limits,
                Arc::clone(&metrics),
                Reachability {
                    destinations: Arc::clone(&destinations),
                    resolver: resolver.clone(),
                },
            ),
        };
        let log = match prev {
            Some(p) if p.log.target() == settings.log.access => Arc::clone(&p.log),
            _ => Arc::new(AccessLog::open(&settings.log.access).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("log.access: cannot open {:?}: {e}", settings.log.access),
                )
            })?),
        };
        let trace = match prev {
            Some(p) if p.trace.target() == settings.log.trace => Arc::clone(&p.trace),
            _ => Arc::new(TraceLog::open(&settings.log.trace).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("log.trace: cannot open {:?}: {e}", settings.log.trace),
                )
            })?),
        };
        let base = Policy {
            heuristic_fraction: c.heuristic_fraction,
            heuristic_max: c.heuristic_max,
            max_stale: c.max_stale,
            ..Policy::default()
        };
        let reverse_policy = Policy {
            targeted_fields: Policy::reverse_proxy().targeted_fields,
            ..base.clone()
        };
        let via_name = match prev {
            Some(p) => p.via_name.clone(),
            None => format!(
                "trove-{:04x}",
                std::process::id() as u16 ^ (rand_seed() as u16)
            ),
        };
        let via_as = |protocol: &str| {
            HeaderValue::from_str(&format!("{protocol} {via_name}")).expect("ascii")
        };
        let (via, via_http2, via_http10) = (via_as("1.1"), via_as("2"), via_as("1.0"));
        let cluster = match (&settings.cluster, prev) {
            (None, _) => None,
            (Some(c), Some(p)) if p.settings.cluster.as_ref() == Some(c) => p.cluster.clone(),
            (Some(c), _) => {
                let cluster = Arc::new(
                    c.build()
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
                );
                tokio::spawn(trove_cluster::probe_loop(
                    Arc::downgrade(&cluster),
                    c.probe_interval,
                    c.probe_timeout,
                ));
                Some(cluster)
            }
        };
        let feed = match (&settings.cluster, prev) {
            (c, Some(p)) => {
                let wanted = c.as_ref().and_then(|c| c.bus_settings().ok().flatten());
                if wanted.as_ref() != p.feed.as_ref().map(|f| f.settings()) {
                    tracing::warn!("[cluster.bus] changed: it takes effect at the next start");
                }
                p.feed.clone()
            }
            (Some(c), None) => c
                .bus_settings()
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?
                .map(|b| Arc::new(crate::feed::Feed::new(b, c.hits_before_current()))),
            (None, None) => None,
        };
        let origin_slots = match prev {
            Some(p)
                if p.settings.limits.max_pending_origin_requests
                    == settings.limits.max_pending_origin_requests =>
            {
                Arc::clone(&p.origin_slots)
            }
            _ => Arc::new(Semaphore::new(settings.limits.max_pending_origin_requests)),
        };
        Ok(Shared {
            acl: Acl::new(&settings.access.allow),
            purge_acl: Acl::new(&settings.access.purge),
            safe_ports: crate::acl::PortSet::parse(&settings.access.safe_ports)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            destinations,
            resolver,
            routes: Routes::new(&settings.origins),
            forward_tls: prev.map_or_else(Arc::default, |p| Arc::clone(&p.forward_tls)),
            origin_slots,
            settings,
            store,
            pool,
            metrics,
            log,
            trace,
            forward_policy: base,
            reverse_policy,
            fetches: prev.map_or_else(Arc::default, |p| Arc::clone(&p.fetches)),
            revalidations: prev.map_or_else(Arc::default, |p| Arc::clone(&p.revalidations)),
            memo: prev.map_or_else(
                || Arc::new(Mutex::new(PassMemo::default())),
                |p| Arc::clone(&p.memo),
            ),
            cluster,
            feed,
            via_name,
            via,
            via_http2,
            via_http10,
            freed: prev.map_or_else(Arc::default, |p| Arc::clone(&p.freed)),
            lifecycle: prev.map_or_else(Arc::default, |p| Arc::clone(&p.lifecycle)),
            successor: Successor::default(),
            history,
            named_caches,
            invalidations,
            disk_unavailable,
        })
    }

    /// The connector for forward-proxy `https://` requests (`None` if TLS could not be set
    /// up at all, which the first such request logs).
    pub fn forward_tls(&self) -> Option<Arc<trove_tls::OriginConnector>> {
        self.forward_tls
            .get_or_init(
                || match trove_tls::OriginConnector::new(&Default::default()) {
                    Ok(c) => Some(Arc::new(c)),
                    Err(e) => {
                        tracing::error!(error = %e, "TLS to origins unavailable");
                        None
                    }
                },
            )
            .clone()
    }

    /// The newest generation if a reload made one after this (see [`crate::lifecycle`]).
    pub fn newest(&self) -> Option<Arc<Shared>> {
        self.successor.newest()
    }

    /// The caching policy for requests arriving on a listener of `mode`: reverse listeners
    /// also obey the targeted fields `Trove-Cache-Control` and `CDN-Cache-Control`.
    pub fn policy(&self, mode: Mode) -> &Policy {
        match mode {
            Mode::Forward => &self.forward_policy,
            Mode::Reverse => &self.reverse_policy,
        }
    }

    /// The rules the cache core judges requests of a listener of `mode` by.
    pub fn rules(&self, mode: Mode) -> Rules<'_> {
        Rules {
            policy: self.policy(mode),
            cookies: &self.settings.cache.cookies,
            wire: true,
        }
    }

    /// True when `[cache.disk]` is configured: a lower tier runs under memory, or could not
    /// be used at start-up.
    pub fn has_disk(&self) -> bool {
        self.disk_unavailable || self.store.lower_stats().is_some()
    }

    /// The Prometheus text of all metrics.
    pub fn render_metrics(&self) -> String {
        let mut out = self.render_core_metrics();
        if let Some(c) = &self.cluster {
            use std::fmt::Write as _;
            let up = c.status().iter().filter(|n| n.up).count();
            let _ = writeln!(
                out,
                "# HELP {n} Cluster nodes this node takes as up (itself included).\n# TYPE {n} gauge\n{n} {up}",
                n = crate::metrics::names::CLUSTER_NODES_UP
            );
        }
        if let Some(f) = &self.feed {
            f.metrics(&mut out);
        }
        if self.has_disk() {
            let stats = self.store.lower_stats();
            crate::metrics::render_disk(&mut out, stats.as_ref());
            self.metrics.render_tiers(&mut out);
        }
        out
    }

    fn render_core_metrics(&self) -> String {
        let s = self.store.stats();
        let inv = self
            .invalidations
            .as_ref()
            .map(|i| i.stats())
            .unwrap_or_default();
        let mut out = self.metrics.render(StoreFigures {
            bytes: s.bytes,
            capacity: s.capacity,
            objects: s.objects,
            evictions: s.evictions,
            removed: s.removed,
            log_dropped: self.log.dropped(),
            resolver: self.resolver.stats(),
        });
        self.metrics.render_invalidations(&mut out, inv);
        out
    }
}

/// How a generation starts: the first, with the opener of lower tiers if any, or after a
/// reload of `prev`.
enum Start<'a> {
    First(Option<&'a dyn OpenLower>),
    After(&'a Shared),
}

/// The memory tier alone, or with lower tiers under it (`lower`). A directory another
/// process holds, or one of a newer format, stops start-up with the reason; so does a
/// directory that can't be used (unwritable, missing, failing), unless `[cache.disk]
/// on_failure = "memory"`: then trove runs memory-only, with one log line, and `/healthz`
/// and the status page say so ([`Shared::disk_health`]). Returns the store and whether the
/// disk tier was configured but unavailable.
fn open_tiers(
    c: &crate::settings::CacheSettings,
    lower: Option<&dyn OpenLower>,
    body_meter: &Arc<std::sync::atomic::AtomicU64>,
) -> std::io::Result<(Arc<dyn Storage>, bool)> {
    let memory = || MemoryStore::new(c.memory, 16, c.max_object, c.eviction);
    let Some(d) = &c.disk else {
        return Ok((Arc::new(memory()), false));
    };
    let Some(lower) = lower else {
        return Err(std::io::Error::other(
            "cache.disk: this program opens no disk tier (start it with one: `trove serve`)",
        ));
    };
    match lower.open(memory(), c, Arc::clone(body_meter)) {
        Ok(store) => Ok((store, false)),
        Err(LowerError::Unusable(e)) if d.on_failure == crate::settings::DiskFailure::Memory => {
            tracing::error!("disk tier unavailable ({e}); trove goes on with the memory tier only");
            Ok((Arc::new(memory()), true))
        }
        Err(LowerError::Unusable(e)) => Err(std::io::Error::other(format!(
            "cache.disk: {e} (set [cache.disk] on_failure = \"memory\" to run without it)"
        ))),
        Err(LowerError::Fatal(e)) => Err(std::io::Error::other(e)),
    }
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

/// The proxy's current generation, as the acceptors (and whoever else asks, like the admin
/// listener) see it: a reload replaces it (see [`crate::lifecycle`]).
#[derive(Debug, Default)]
pub struct Current(RwLock<Weak<Shared>>);

impl Current {
    /// The current generation, while the proxy runs.
    pub fn get(&self) -> Option<Arc<Shared>> {
        self.0.read().upgrade()
    }

    pub(crate) fn set(&self, shared: &Arc<Shared>) {
        *self.0.write() = Arc::downgrade(shared);
    }
}

/// The generation after this one, once a reload made it.
#[derive(Default)]
pub struct Successor(OnceLock<Arc<Shared>>);

impl std::fmt::Debug for Successor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Successor")
            .field("reloaded", &self.0.get().is_some())
            .finish()
    }
}

impl Successor {
    /// The newest generation after this one, if any.
    pub fn newest(&self) -> Option<Arc<Shared>> {
        let mut next = Arc::clone(self.0.get()?);
        while let Some(n) = next.successor.0.get() {
            next = Arc::clone(n);
        }
        Some(next)
    }

    /// Sets the generation after this one (once).
    pub(crate) fn set(&self, next: Arc<Shared>) {
        let _ = self.0.set(next);
    }
}
