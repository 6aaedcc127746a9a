//! The proxy's settings, as read from the `[listener]`, `[access]`, `[cache]`, `[limits]`,
//! `[timeouts]`, `[origin_pool]`, `[connect]`, `[resolver]`, `[[origin]]` and `[log]`
//! sections of trove's TOML config. Every section rejects unknown keys, and every value has
//! a safe default. Every timeout must be greater than 0 ([`Settings::validate`]).

use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
pub use trove_tls::{CertFiles, ListenerTlsSettings, OriginTlsSettings};

/// Whether a listener is a forward proxy (clients send absolute URIs for any origin) or a
/// reverse proxy (requests go to the configured `[[origin]]` routes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Forward,
    Reverse,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Forward => "forward",
            Mode::Reverse => "reverse",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerSettings {
    pub addr: SocketAddr,
    pub mode: Mode,
    /// Terminate TLS on this listener with these certificates (`tls = { cert, key }`).
    #[serde(default)]
    pub tls: Option<trove_tls::ListenerTlsSettings>,
    /// Serve HTTP/2 here as well as HTTP/1.1: offered first by ALPN (`h2`) on a TLS
    /// listener; on a cleartext one, accepted with prior knowledge (`h2c`: a connection
    /// that opens with the HTTP/2 preface), for deployments behind a load balancer.
    #[serde(default)]
    pub http2: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessSettings {
    /// Client networks allowed to use the proxy. Default: loopback only.
    pub allow: Vec<IpNet>,
    /// Client networks allowed to send `PURGE`. Default: loopback only.
    pub purge: Vec<IpNet>,
    /// Ports a forward-proxy `http://` request may reach: numbers or `"low-high"` ranges.
    /// Default, like Squid's Safe_ports: 80, 443 and the unprivileged ports.
    pub safe_ports: Vec<String>,
    /// Client networks counted as local to trove's host: they may make trove connect to
    /// loopback, link-local and unspecified destinations, which other clients may not (see
    /// `crate::destination`). Default: loopback only (processes on this host).
    pub local_clients: Vec<IpNet>,
    /// Destinations any client may reach despite the destination guard's defaults: networks
    /// or addresses, optionally with a port or range: `"10.1.2.0/24"`, `"127.0.0.1:8080"`,
    /// `"[fd00::/8]:443"`. Trove's own listeners, multicast and broadcast stay refused.
    pub allow_destinations: Vec<String>,
    /// Also refuse private destinations (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7)
    /// to clients that are not local: for a forward proxy open to a wide network.
    pub deny_private_destinations: bool,
}

fn loopback() -> Vec<IpNet> {
    vec![
        "127.0.0.0/8".parse().expect("static"),
        "::1/128".parse().expect("static"),
    ]
}

impl Default for AccessSettings {
    fn default() -> Self {
        AccessSettings {
            allow: loopback(),
            purge: loopback(),
            safe_ports: vec!["80".into(), "443".into(), "1025-65535".into()],
            local_clients: loopback(),
            allow_destinations: Vec::new(),
            deny_private_destinations: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheSettings {
    /// Memory tier budget in bytes (`"256MiB"`, `"1GiB"` or an integer).
    #[serde(deserialize_with = "de_size")]
    pub memory: u64,
    /// Largest object stored; bigger responses stream through uncached.
    #[serde(deserialize_with = "de_size")]
    pub max_object: u64,
    /// `"s3-fifo"` (default), `"lru"`, `"sieve"` or `"w-tinylfu"`.
    #[serde(deserialize_with = "de_eviction")]
    pub eviction: trove_store::EvictionKind,
    /// How far (bytes) an origin may be read ahead of the fastest client when the response
    /// is not being stored.
    #[serde(deserialize_with = "de_size")]
    pub read_ahead: u64,
    /// Most bytes of one response body held in memory outside the store (see
    /// `trove_store::Body`): a body not, or no longer, being stored keeps only this much
    /// behind the origin, and a client further behind is detached (resumed on a fetch of
    /// its own, or cut off); a body of unknown length being stored is read at most this
    /// far ahead of its fastest client. At least `read_ahead`; a unit is required.
    #[serde(deserialize_with = "de_size")]
    pub stream_buffer: u64,
    /// Heuristic freshness: this fraction of the time since Last-Modified (RFC 9111 §4.2.2).
    pub heuristic_fraction: f64,
    /// Upper bound on heuristic freshness.
    #[serde(deserialize_with = "de_duration")]
    pub heuristic_max: Duration,
    /// `[cache.cookies]`: what to do with `Set-Cookie` and with requests carrying `Cookie`.
    pub cookies: trove_cache::CookiePolicy,
    /// `[cache.abort]`: whether to finish a fetch whose clients have all gone.
    pub abort: AbortSettings,
    /// How stale a stored response may be and still be served when its origin can't be
    /// reached (refused, reset, closed, timed out; RFC 9111 §4.2.4), unless its directives
    /// forbid it: Squid's `max_stale`. `"0s"` turns it off; a unit is required.
    #[serde(deserialize_with = "de_duration")]
    pub max_stale: Duration,
    /// `[cache.disk]`: the disk tier under the memory tier; none unless configured.
    pub disk: Option<DiskSettings>,
}

/// `[cache.disk]`, the disk tier (see `trove_disk`, which the binary opens from these):
/// where, how much, how often synced.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskSettings {
    /// The cache directory, or a list of them (one per disk); the budget is split evenly.
    #[serde(deserialize_with = "de_paths")]
    pub path: Vec<std::path::PathBuf>,
    /// Bytes of disk over all paths; a unit is required (`"10GiB"`).
    #[serde(deserialize_with = "de_size")]
    pub size: u64,
    /// The crash bound (see `trove_disk`'s writer): a `kill -9` loses at most the objects
    /// acknowledged (taken into the disk write queue) in the last `sync_interval`, a power
    /// loss the last two; the queue sheds what the writer would not reach in time. Default 1s.
    #[serde(
        default = "DiskSettings::default_sync",
        deserialize_with = "de_duration"
    )]
    pub sync_interval: Duration,
    /// The unit of writing and of reclaiming space. Default 16MiB; 64KiB to 128MiB.
    #[serde(default = "DiskSettings::default_region", deserialize_with = "de_size")]
    pub region_size: u64,
    /// `"fifo-reinsert"` (default: keep what was hit when its region is reclaimed) or `"fifo"`.
    #[serde(default, deserialize_with = "de_reclaim")]
    pub reclaim: Reclaim,
    /// Disk hits with a body of at least this many bytes are sent to the client with
    /// `sendfile(2)` straight from the data file and are not promoted into memory; smaller
    /// ones are read into the memory tier. Default 64KiB; a size above `region_size` turns
    /// sendfile off.
    #[serde(
        default = "DiskSettings::default_sendfile_min",
        deserialize_with = "de_size"
    )]
    pub sendfile_min: u64,
    /// The largest response stored on disk. A body larger than the memory tier takes
    /// (`[cache] max_object`, or `region_size` if less) is written to disk as it arrives,
    /// memory holding only `[cache] stream_buffer` of it, and streamed to every client
    /// asking meanwhile; larger than this, it passes through uncached. Default 1GiB; "0"
    /// turns that off (the memory tier's limit applies).
    #[serde(
        default = "DiskSettings::default_max_object",
        deserialize_with = "de_size"
    )]
    pub max_object: u64,
    /// What a directory that can't be used at start-up does: `"stop"` (the default: start-up
    /// fails with the reason, as Squid does for a bad `cache_dir`) or `"memory"` (trove runs
    /// on the memory tier alone, and `/healthz` and the status page say so).
    #[serde(default)]
    pub on_failure: DiskFailure,
}

/// `[cache.disk] reclaim`: what the disk tier keeps of a region it reclaims (the binary
/// hands it to the disk tier; see `trove_disk::Reclaim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reclaim {
    /// `"fifo-reinsert"`: objects hit since they were written are written again.
    #[default]
    FifoReinsert,
    /// `"fifo"`: everything in the region goes.
    Fifo,
}

impl Reclaim {
    /// The setting's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reclaim::FifoReinsert => "fifo-reinsert",
            Reclaim::Fifo => "fifo",
        }
    }

    pub fn parse(s: &str) -> Option<Reclaim> {
        match s {
            "fifo-reinsert" => Some(Reclaim::FifoReinsert),
            "fifo" => Some(Reclaim::Fifo),
            _ => None,
        }
    }
}

/// `[cache.disk] on_failure` (issue 19, defect 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskFailure {
    /// Start-up fails.
    #[default]
    Stop,
    /// Degrade to the memory tier alone.
    Memory,
}

impl DiskSettings {
    /// Checks each path without touching the disk tier's files: a directory this process
    /// can enter and write to, or one it can create. For `trove serve --check`.
    pub fn check_paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, p) in self.path.iter().enumerate() {
            let key = if self.path.len() == 1 {
                "cache.disk.path".to_string()
            } else {
                format!("cache.disk.path[{i}]")
            };
            let target = if p.exists() {
                if !p.is_dir() {
                    out.push(format!("{key}: {} is not a directory", p.display()));
                    continue;
                }
                p.as_path()
            } else {
                // Made at start: its nearest existing parent must be writable.
                match p.ancestors().skip(1).find(|a| a.exists()) {
                    Some(a) if a.is_dir() => a,
                    _ => {
                        out.push(format!("{key}: {} can't be created", p.display()));
                        continue;
                    }
                }
            };
            if rustix::fs::access(
                target,
                rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
            )
            .is_err()
            {
                out.push(format!(
                    "{key}: {} is not writable by this user",
                    target.display()
                ));
            }
        }
        out
    }
}

impl DiskSettings {
    fn default_max_object() -> u64 {
        1 << 30
    }
    fn default_sync() -> Duration {
        Duration::from_secs(1)
    }
    fn default_region() -> u64 {
        16 << 20
    }
    fn default_sendfile_min() -> u64 {
        64 << 10
    }
}

fn de_paths<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<std::path::PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(std::path::PathBuf),
        Many(Vec<std::path::PathBuf>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(p) => vec![p],
        OneOrMany::Many(v) => v,
    })
}

fn de_reclaim<'de, D: Deserializer<'de>>(d: D) -> Result<Reclaim, D::Error> {
    let s = String::deserialize(d)?;
    Reclaim::parse(&s).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown reclaim policy {s:?} (use \"fifo-reinsert\" or \"fifo\")"
        ))
    })
}

/// `[cache.abort]`, the abort policy (see `trove_cache::abort`): when every client of a
/// fetch that is not being stored has gone, finish it if at most `min_left` bytes remain or
/// at least `done_pct` percent has arrived; else stop.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AbortSettings {
    #[serde(deserialize_with = "de_size")]
    pub min_left: u64,
    pub done_pct: u8,
}

impl Default for AbortSettings {
    fn default() -> Self {
        let p = trove_cache::AbortPolicy::default();
        AbortSettings {
            min_left: p.min_left,
            done_pct: p.done_pct,
        }
    }
}

impl AbortSettings {
    pub fn policy(&self) -> trove_cache::AbortPolicy {
        trove_cache::AbortPolicy {
            min_left: self.min_left,
            done_pct: self.done_pct,
        }
    }
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            memory: 256 << 20,
            max_object: 64 << 20,
            eviction: trove_store::EvictionKind::default(),
            read_ahead: 64 << 10,
            stream_buffer: 1 << 20,
            heuristic_fraction: 0.1,
            heuristic_max: Duration::from_secs(86_400),
            cookies: trove_cache::CookiePolicy::default(),
            abort: AbortSettings::default(),
            max_stale: trove_http::Policy::default().max_stale,
            disk: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSettings {
    pub max_head_bytes: usize,
    pub max_headers: usize,
    /// Client connections held at once; more are refused at accept.
    pub max_client_connections: usize,
    /// Connections the kernel may queue on a listening socket before trove accepts them
    /// (`listen(2)`'s backlog). The kernel caps it at `net.core.somaxconn`.
    pub listen_backlog: u32,
    /// Requests waiting for an origin at once; more are answered 503 at once (load shedding).
    pub max_pending_origin_requests: usize,
    /// The slowest a request body may arrive, in bytes per second, once `[timeouts]
    /// client_body` has passed: each this many bytes received extends the body's deadline by
    /// one second (see `client::body`). A unit is required (`"1KiB"` or `"1KiB/s"`).
    #[serde(deserialize_with = "de_rate")]
    pub client_body_min_rate: u64,
    /// Request bodies up to this size are read whole before an origin connection is taken,
    /// so a slow sender holds only its own client connection. Larger bodies stream to the
    /// origin as they arrive, within `[origin_pool] max_uploads_per_origin`. A unit is
    /// required.
    #[serde(deserialize_with = "de_size")]
    pub client_body_buffer: u64,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            max_head_bytes: 64 * 1024,
            max_headers: 100,
            max_client_connections: 50_000,
            // Linux's own default somaxconn since 5.4: a burst of thousands of connects is
            // queued rather than dropped (the 128 std and tokio listen with overflowed when
            // 5,000 clients connected at once).
            listen_backlog: 4096,
            max_pending_origin_requests: 10_000,
            client_body_min_rate: 1 << 10,
            client_body_buffer: 64 << 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutSettings {
    /// Idle time allowed between requests on a client connection.
    #[serde(deserialize_with = "de_duration")]
    pub client_idle: Duration,
    /// Time allowed for a client to send a whole request head once it has started.
    #[serde(deserialize_with = "de_duration")]
    pub client_head: Duration,
    /// TCP connect to an origin.
    #[serde(deserialize_with = "de_duration")]
    pub connect: Duration,
    /// From sending a request to receiving the origin's response head.
    #[serde(deserialize_with = "de_duration")]
    pub origin_response: Duration,
    /// Longest silence allowed while reading an origin's body.
    #[serde(deserialize_with = "de_duration")]
    pub origin_body: Duration,
    /// Longest time a client may take to accept bytes we send.
    #[serde(deserialize_with = "de_duration")]
    pub client_write: Duration,
    /// Time allowed for a whole request body after its head, extended by one second for
    /// every `[limits] client_body_min_rate` bytes received (see `client::body`). A unit is
    /// required.
    #[serde(deserialize_with = "de_duration")]
    pub client_body: Duration,
    /// A graceful stop (`SIGTERM`, `trove stop`) waits this long at most for requests in
    /// flight before it exits anyway.
    #[serde(deserialize_with = "de_duration")]
    pub shutdown: Duration,
}

impl Default for TimeoutSettings {
    fn default() -> Self {
        TimeoutSettings {
            client_idle: Duration::from_secs(60),
            client_head: Duration::from_secs(30),
            connect: Duration::from_secs(5),
            origin_response: Duration::from_secs(60),
            origin_body: Duration::from_secs(60),
            client_write: Duration::from_secs(60),
            client_body: Duration::from_secs(30),
            shutdown: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolSettings {
    /// Connections to one origin (idle and busy) at most.
    pub max_per_origin: usize,
    /// Idle origin connections are closed after this long.
    #[serde(deserialize_with = "de_duration")]
    pub idle_timeout: Duration,
    /// Longest a request waits for a connection to an origin that has `max_per_origin`
    /// busy. A request the queue is not expected to reach within it (judged from the
    /// queue's length and the origin's recent service times) is shed at once: 503 with
    /// `Retry-After`. Zero queues nothing: a request finding every connection busy is shed.
    #[serde(deserialize_with = "de_duration")]
    pub max_queue_wait: Duration,
    /// A queue in which no request has found a connection free for this long is standing:
    /// overload rather than a burst. A request arriving at a standing queue joins it only
    /// if it is next in line or expected to get a connection within `overload_queue_wait`;
    /// the others are shed at once (503, `detail=shed-overload`).
    #[serde(deserialize_with = "de_duration")]
    pub overload_after: Duration,
    /// See `overload_after`.
    #[serde(deserialize_with = "de_duration")]
    pub overload_queue_wait: Duration,
    /// Connections to one origin that requests still streaming their body up may hold at
    /// once (bodies over `[limits] client_body_buffer`); more wait for one like for any
    /// connection, then get 503. Default: a quarter of `max_per_origin` (at least 1), so
    /// uploads, however slow, always leave connections to everything else.
    pub max_uploads_per_origin: Option<usize>,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_per_origin: 256,
            idle_timeout: Duration::from_secs(30),
            max_queue_wait: Duration::from_secs(1),
            overload_after: Duration::from_millis(100),
            overload_queue_wait: Duration::from_millis(20),
            max_uploads_per_origin: None,
        }
    }
}

impl PoolSettings {
    /// The upload limit in force (see `max_uploads_per_origin`).
    pub fn uploads_per_origin(&self) -> usize {
        self.max_uploads_per_origin
            .unwrap_or(self.max_per_origin / 4)
            .max(1)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectSettings {
    /// Ports CONNECT may reach. Default: 443 only.
    pub allowed_ports: Vec<u16>,
}

impl Default for ConnectSettings {
    fn default() -> Self {
        ConnectSettings {
            allowed_ports: vec![443],
        }
    }
}

/// `[resolver]`: how long answers about names are kept (see `crate::resolver`). The
/// durations need a unit (`"30s"`, `"1h"`): a bare number is refused.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResolverSettings {
    /// An answer is kept at most this long, however long its records' TTL. Greater than 0.
    #[serde(deserialize_with = "de_duration")]
    pub max_ttl: Duration,
    /// ... and at least this long, however short their TTL (0 follows the TTL exactly).
    #[serde(deserialize_with = "de_duration")]
    pub min_ttl: Duration,
    /// A failure (no such name, no address, no answer from the name servers) is kept this
    /// long, or the zone's shorter negative TTL; 0 keeps none.
    #[serde(deserialize_with = "de_duration")]
    pub negative_ttl: Duration,
    /// Names kept at most (answers and failures). At least 1.
    pub max_names: usize,
}

impl Default for ResolverSettings {
    fn default() -> Self {
        ResolverSettings {
            max_ttl: Duration::from_secs(3600),
            min_ttl: Duration::from_secs(1),
            negative_ttl: Duration::from_secs(30),
            max_names: 10_000,
        }
    }
}

/// A reverse-proxy route: requests whose Host and path match go to `upstreams`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginRoute {
    /// Host to match (case-insensitive, port ignored), or `"*"` for any.
    pub host: String,
    #[serde(default = "slash")]
    pub path_prefix: String,
    /// `http://host:port` or `https://host:port` URLs, tried in turn (round robin, failing
    /// over on connect errors).
    pub upstreams: Vec<String>,
    /// How TLS is spoken to this route's `https` upstreams; default: verified against the
    /// system's trust store, SNI from the upstream's host.
    #[serde(default)]
    pub tls: Option<trove_tls::OriginTlsSettings>,
}

fn slash() -> String {
    "/".into()
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `"-"` for standard output, a path to append to, or `""` for none.
    pub access: String,
    /// The replayable trace (`crate::trace`): a path to append to, `"-"` for standard
    /// output, or `""` (the default) for none.
    pub trace: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            access: "-".into(),
            trace: String::new(),
        }
    }
}

/// Everything the proxy needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listeners: Vec<ListenerSettings>,
    pub access: AccessSettings,
    pub cache: CacheSettings,
    pub limits: LimitSettings,
    pub timeouts: TimeoutSettings,
    pub origin_pool: PoolSettings,
    pub connect: ConnectSettings,
    pub resolver: ResolverSettings,
    pub origins: Vec<OriginRoute>,
    pub log: LogSettings,
    /// Addresses of trove's other listeners (the admin listener), as bound: the destination
    /// guard refuses them like the proxy's own. Not a config key: the binary fills it in.
    pub other_listeners: Vec<SocketAddr>,
    /// `[tags]`: tags (surrogate keys) read from origin responses.
    pub tags: TagSettings,
    /// `[[named_cache]]`: named caches (partitions) by host and path prefix.
    pub named_caches: Vec<NamedCacheRoute>,
    /// `[cluster]`: the nodes this one shares its cache with; none by default.
    pub cluster: Option<ClusterSettings>,
}

/// `[cluster]`: this node's id, every node of the cluster (this one among them) and how
/// they share keys. See `trove_cluster` for placement and health.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    /// This node's id (one of `nodes`).
    pub node: String,
    /// `"shard"`: each key has one owner, which the others ask; `"replicate"`: every node
    /// caches on its own.
    #[serde(default = "shard")]
    pub mode: String,
    /// Every node: `{ id = "a", addr = "10.0.0.1:8080" }`, `addr` being the node's reverse
    /// listener the others send their requests to.
    pub nodes: Vec<ClusterNode>,
    /// How often each peer is probed (a TCP connect).
    #[serde(default = "probe_interval", deserialize_with = "de_duration")]
    pub probe_interval: Duration,
    /// Time a probe may take.
    #[serde(default = "probe_timeout", deserialize_with = "de_duration")]
    pub probe_timeout: Duration,
    /// Failures in a row (probes or requests) after which a peer is taken as down.
    #[serde(default = "fail_after")]
    pub fail_after: u32,
    /// `[cluster.bus]`: the NATS JetStream stream that carries every invalidation a node
    /// accepts to every node (`crate::feed`). Without it each node's invalidations stay its
    /// own. Its `node` is this node's id unless given (and then must be the same).
    #[serde(default)]
    pub bus: Option<trove_bus::BusSettings>,
    /// What the node serves until it has read the bus up to date after a start (or while
    /// it can't reach it at start-up): `"misses"` (the default: nothing from the cache, so
    /// nothing another node purged meanwhile) or `"hits"` (the cache as it is, which may
    /// include objects purged while the node was away).
    #[serde(default = "until_current")]
    pub until_current: String,
}

/// A node of the cluster as configured.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterNode {
    pub id: String,
    pub addr: SocketAddr,
}

fn shard() -> String {
    "shard".into()
}
fn probe_interval() -> Duration {
    Duration::from_secs(1)
}
fn probe_timeout() -> Duration {
    Duration::from_millis(500)
}
fn fail_after() -> u32 {
    2
}
fn until_current() -> String {
    "misses".into()
}

impl ClusterSettings {
    /// The cluster this node belongs to, or why the settings can't make one.
    pub fn build(&self) -> Result<trove_cluster::Cluster, String> {
        let mode = match self.mode.as_str() {
            "shard" => trove_cluster::ClusterMode::Shard,
            "replicate" => trove_cluster::ClusterMode::Replicate,
            m => {
                return Err(format!(
                    "mode: {m:?} is neither \"shard\" nor \"replicate\""
                ))
            }
        };
        let nodes: Vec<trove_cluster::PeerSpec> = self
            .nodes
            .iter()
            .map(|n| trove_cluster::PeerSpec {
                id: n.id.clone(),
                addr: n.addr,
            })
            .collect();
        trove_cluster::Cluster::new(mode, &self.node, &nodes, self.fail_after)
    }

    /// The bus's settings for this node (its id filled in), or why they can't be used.
    pub fn bus_settings(&self) -> Result<Option<trove_bus::BusSettings>, String> {
        let Some(bus) = &self.bus else {
            return Ok(None);
        };
        let mut bus = bus.clone();
        if bus.node.is_empty() {
            bus.node = self.node.clone();
        } else if bus.node != self.node {
            return Err(format!(
                "bus.node {:?} is not this node's id {:?} (leave it out)",
                bus.node, self.node
            ));
        }
        bus.validate().map_err(|e| e.to_string())?;
        Ok(Some(bus))
    }

    /// Whether hits are served before the bus has been read up to date (`until_current`).
    pub fn hits_before_current(&self) -> bool {
        self.until_current == "hits"
    }
}

/// `[tags]`: which response fields carry tags, whether clients see them, and bounds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TagSettings {
    /// Response header fields whose values are tags, separated by spaces or commas.
    pub headers: Vec<String>,
    /// Remove those fields from what is stored and sent to clients.
    pub strip: bool,
    /// Longest tag accepted, in bytes (longer ones are dropped with a log line).
    pub max_length: usize,
    /// Most tags kept per object (the rest are dropped with a log line).
    pub max_per_object: usize,
}

impl Default for TagSettings {
    fn default() -> Self {
        TagSettings {
            headers: vec!["Surrogate-Key".into(), "Cache-Tag".into(), "xkey".into()],
            strip: true,
            max_length: 256,
            max_per_object: 64,
        }
    }
}

/// A named cache (a partition that can be listed and invalidated whole): objects whose URL
/// matches `host` and `path_prefix` belong to it (the longest prefix wins, an exact host
/// beats `"*"`); the admin API may also put objects into it by name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedCacheRoute {
    pub name: String,
    /// Host to match (case-insensitive, port ignored), or `"*"` for any.
    #[serde(default = "star")]
    pub host: String,
    #[serde(default = "slash")]
    pub path_prefix: String,
}

fn star() -> String {
    "*".into()
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listeners: vec![ListenerSettings {
                addr: "127.0.0.1:3128".parse().expect("static"),
                mode: Mode::Forward,
                tls: None,
                http2: false,
            }],
            access: AccessSettings::default(),
            cache: CacheSettings::default(),
            limits: LimitSettings::default(),
            timeouts: TimeoutSettings::default(),
            origin_pool: PoolSettings::default(),
            connect: ConnectSettings::default(),
            resolver: ResolverSettings::default(),
            origins: Vec::new(),
            log: LogSettings::default(),
            other_listeners: Vec::new(),
            tags: TagSettings::default(),
            named_caches: Vec::new(),
            cluster: None,
        }
    }
}

impl Settings {
    /// Checks what types alone can't: routes name usable upstreams, limits are sane. Every
    /// problem, one per line, each naming its key.
    pub fn validate(&self) -> Result<(), String> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// Every problem [`Settings::validate`] finds, each naming its key.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.listeners.is_empty() {
            p.push("listener: at least one listener is needed".into());
        }
        for (i, l) in self.listeners.iter().enumerate() {
            if let Some(tls) = &l.tls {
                for e in tls.problems() {
                    p.push(format!("listener[{i}].tls: {e}"));
                }
            }
        }
        for (i, n) in self.named_caches.iter().enumerate() {
            if n.name.is_empty() || n.name.len() > 128 {
                p.push(format!("named_cache[{i}].name: 1 to 128 bytes"));
            }
            if !n.path_prefix.starts_with('/')
                || trove_http::target::normal_path(&n.path_prefix).is_none()
            {
                p.push(format!(
                    "named_cache[{i}].path_prefix: must start with '/' and be well-formed"
                ));
            }
        }
        if let Some(c) = &self.cluster {
            if let Err(e) = c.build() {
                p.push(format!("cluster: {e}"));
            }
            if let Err(e) = c.bus_settings() {
                p.push(format!("cluster: {e}"));
            }
            if !matches!(c.until_current.as_str(), "misses" | "hits") {
                p.push(format!(
                    "cluster: until_current: {:?} is neither \"misses\" nor \"hits\"",
                    c.until_current
                ));
            }
            if c.probe_interval.is_zero() || c.probe_timeout.is_zero() {
                p.push("cluster: probe_interval and probe_timeout must be greater than 0".into());
            }
        }
        for h in &self.tags.headers {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                p.push(format!("tags.headers: {h:?} is not a header field name"));
            }
        }
        for (i, r) in self.origins.iter().enumerate() {
            if r.upstreams.is_empty() {
                p.push(format!(
                    "origin[{i}].upstreams: at least one upstream is needed"
                ));
            }
            if !r.path_prefix.starts_with('/') {
                p.push(format!("origin[{i}].path_prefix: must start with '/'"));
            }
            if trove_http::target::normal_path(&r.path_prefix).is_none() {
                p.push(format!(
                    "origin[{i}].path_prefix: {:?} has a malformed %-escape",
                    r.path_prefix
                ));
            }
            if r.host != "*" {
                match trove_http::target::parse_authority(&r.host) {
                    Ok(a) if a.port.is_none() => {}
                    Ok(_) => {
                        p.push(format!(
                            "origin[{i}].host: {:?}: name the host without a port (routes match any port)",
                            r.host
                        ))
                    }
                    Err(e) => p.push(format!("origin[{i}].host: {:?}: {e}", r.host)),
                }
            }
            let mut https = false;
            for u in &r.upstreams {
                match crate::upstream::Upstream::parse(u) {
                    Ok((_, scheme)) => https |= scheme == crate::upstream::UpstreamScheme::Https,
                    Err(e) => p.push(format!("origin[{i}].upstreams: {u:?}: {e}")),
                }
            }
            if let Some(tls) = &r.tls {
                if !https {
                    p.push(format!(
                        "origin[{i}].tls: applies to https:// upstreams, and this route has none"
                    ));
                }
                for e in tls.problems() {
                    p.push(format!("origin[{i}].tls: {e}"));
                }
            }
        }
        if self.listeners.iter().any(|l| l.mode == Mode::Reverse) && self.origins.is_empty() {
            p.push("origin: a reverse listener needs at least one [[origin]] route".into());
        }
        if let Err(e) = crate::acl::PortSet::parse(&self.access.safe_ports) {
            p.push(format!("access.safe_ports: {e}"));
        }
        for d in &self.access.allow_destinations {
            if let Err(e) = crate::acl::Exception::parse(d) {
                p.push(format!("access.allow_destinations: {e}"));
            }
        }
        if self.cache.memory < 1 << 20 {
            p.push("cache.memory: at least 1MiB".into());
        }
        if let Some(d) = &self.cache.disk {
            if d.path.is_empty() {
                p.push("cache.disk.path: at least one directory is needed".into());
            } else if d.region_size > 0 && d.size / d.path.len() as u64 / d.region_size < 3 {
                p.push(
                    "cache.disk.size: at least 3 regions (cache.disk.region_size) per path".into(),
                );
            }
            if !(64 << 10..=128 << 20).contains(&d.region_size) {
                p.push("cache.disk.region_size: between 64KiB and 128MiB".into());
            }
            if d.sync_interval.is_zero() {
                p.push("cache.disk.sync_interval: must be greater than 0".into());
            }
        }
        if self.cache.stream_buffer == 0 {
            p.push("cache.stream_buffer: must be greater than 0".into());
        }
        if self.cache.stream_buffer < self.cache.read_ahead {
            p.push("cache.stream_buffer: at least cache.read_ahead".into());
        }
        if !(0.0..=1.0).contains(&self.cache.heuristic_fraction) {
            p.push("cache.heuristic_fraction: must be between 0 and 1".into());
        }
        if self.limits.max_headers == 0 || self.limits.max_headers > 256 {
            p.push("limits.max_headers: must be between 1 and 256".into());
        }
        if self.limits.max_head_bytes < 1024 {
            p.push("limits.max_head_bytes: at least 1024".into());
        }
        if self.limits.listen_backlog == 0 {
            p.push("limits.listen_backlog: at least 1".into());
        }
        if self.origin_pool.max_per_origin == 0 {
            p.push("origin_pool.max_per_origin: at least 1".into());
        }
        if let Some(n) = self.origin_pool.max_uploads_per_origin {
            if n == 0 || n > self.origin_pool.max_per_origin {
                p.push(
                    "origin_pool.max_uploads_per_origin: between 1 and origin_pool.max_per_origin"
                        .into(),
                );
            }
        }
        if self.limits.client_body_min_rate == 0 {
            p.push("limits.client_body_min_rate: must be greater than 0".into());
        }
        if self.limits.client_body_buffer == 0 {
            p.push("limits.client_body_buffer: must be greater than 0".into());
        }
        // At zero a timeout fires at once (every connection, request or tunnel fails), and
        // the pool's reaper interval would be zero.
        let t = &self.timeouts;
        for (key, d) in [
            ("timeouts.client_idle", t.client_idle),
            ("timeouts.client_head", t.client_head),
            ("timeouts.connect", t.connect),
            ("timeouts.origin_response", t.origin_response),
            ("timeouts.origin_body", t.origin_body),
            ("timeouts.client_write", t.client_write),
            ("timeouts.client_body", t.client_body),
            ("timeouts.shutdown", t.shutdown),
            ("origin_pool.idle_timeout", self.origin_pool.idle_timeout),
        ] {
            if d.is_zero() {
                p.push(format!("{key}: must be greater than 0"));
            }
        }
        // A cache that keeps nothing would resolve on every request again.
        let r = &self.resolver;
        if r.max_ttl.is_zero() {
            p.push("resolver.max_ttl: must be greater than 0".into());
        }
        if r.min_ttl > r.max_ttl {
            p.push("resolver.min_ttl: must not exceed resolver.max_ttl".into());
        }
        if r.max_names == 0 {
            p.push("resolver.max_names: at least 1".into());
        }
        p
    }
}

/// The size units a config accepts, as the error messages list them.
pub const SIZE_UNITS: &str =
    "B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)";
/// The duration units a config accepts.
pub const DURATION_UNITS: &str = "ms, s, m, h, d";

/// Splits `"1.5GiB"` into its number and its unit (trimmed).
fn number_and_unit(s: &str) -> (&str, &str) {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    (num, unit.trim())
}

/// Parses a size with its unit: `"64KiB"`, `"256MiB"`, `"1GiB"`, `"10MB"`, `"512B"`. The unit
/// is required (a bare `"512"` is refused), any case; a bare `K`, `M`, `G` is refused as
/// ambiguous between powers of 1000 and 1024.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, unit) = number_and_unit(s);
    let s = s.trim();
    if unit.is_empty() {
        return Err(format!("size {s:?} needs a unit: {SIZE_UNITS}"));
    }
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?} (a number and a unit: {SIZE_UNITS})"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "b" => 1,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "k" | "m" | "g" | "t" => {
            return Err(format!(
                "size {s:?}: {unit:?} is ambiguous; write {num}{u}iB (powers of 1024) or {num}{u}B (powers of 1000)",
                u = unit.to_ascii_uppercase()
            ))
        }
        _ => return Err(format!("invalid size unit in {s:?} (use {SIZE_UNITS})")),
    };
    let bytes = n * mult as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// Parses a duration with its unit: `"250ms"`, `"5s"`, `"2m"`, `"1h"`, `"1d"`. The unit is
/// required (a bare `"5"` is refused).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = number_and_unit(s);
    let s = s.trim();
    if unit.is_empty() {
        return Err(format!("duration {s:?} needs a unit: {DURATION_UNITS}"));
    }
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (a number and a unit: {DURATION_UNITS})"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        _ => {
            return Err(format!(
                "invalid duration unit in {s:?} (use {DURATION_UNITS})"
            ))
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration {s:?}"))
}

/// A size: a string with its unit (see [`parse_size`]). A bare number is refused.
fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d).map_err(|_| {
        serde::de::Error::custom(format!(
            "give a size as a string with its unit, e.g. \"64MiB\" ({SIZE_UNITS})"
        ))
    })?;
    parse_size(&s).map_err(serde::de::Error::custom)
}

/// A duration: a string with its unit (see [`parse_duration`]). A bare number is refused.
fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d).map_err(|_| {
        serde::de::Error::custom(format!(
            "give a duration as a string with its unit, e.g. \"30s\" ({DURATION_UNITS})"
        ))
    })?;
    parse_duration(&s).map_err(serde::de::Error::custom)
}

/// A rate in bytes per second: a size with its unit, optionally followed by `/s`.
fn de_rate<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d).map_err(|_| {
        serde::de::Error::custom("give a rate as a string with its unit, e.g. \"1KiB/s\"")
    })?;
    let size = s.trim().strip_suffix("/s").unwrap_or(&s);
    parse_size(size).map_err(|e| serde::de::Error::custom(format!("rate: {e}")))
}

fn de_eviction<'de, D: Deserializer<'de>>(d: D) -> Result<trove_store::EvictionKind, D::Error> {
    let s = String::deserialize(d)?;
    trove_store::EvictionKind::parse(&s).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown eviction policy {s:?} (use \"s3-fifo\", \"lru\", \"sieve\" or \"w-tinylfu\")"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("100B").unwrap(), 100);
        assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("1.5 KiB").unwrap(), 1536);
        assert_eq!(parse_size("2tib").unwrap(), 2 << 40);
        assert!(parse_size("12 parsecs").is_err());
        let e = parse_size("100").unwrap_err();
        assert!(e.contains("needs a unit") && e.contains("KiB"), "{e}");
        let e = parse_size("1G").unwrap_err();
        assert!(e.contains("1GiB") && e.contains("1GB"), "{e}");
        assert!(parse_size("99999999TiB").is_err());
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("5").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("5 fortnights").is_err());
    }

    /// A zero duration would make a timeout fire at once, or panic `tokio::time::interval`
    /// (the origin pool's reaper): refused, naming the key.
    #[test]
    fn zero_durations_are_refused_by_name() {
        type Set = fn(&mut Settings);
        let cases: [(&str, Set); 8] = [
            ("origin_pool.idle_timeout", |s| {
                s.origin_pool.idle_timeout = Duration::ZERO
            }),
            ("timeouts.client_idle", |s| {
                s.timeouts.client_idle = Duration::ZERO
            }),
            ("timeouts.client_head", |s| {
                s.timeouts.client_head = Duration::ZERO
            }),
            ("timeouts.connect", |s| s.timeouts.connect = Duration::ZERO),
            ("timeouts.origin_response", |s| {
                s.timeouts.origin_response = Duration::ZERO
            }),
            ("timeouts.origin_body", |s| {
                s.timeouts.origin_body = Duration::ZERO
            }),
            ("timeouts.client_write", |s| {
                s.timeouts.client_write = Duration::ZERO
            }),
            ("timeouts.client_body", |s| {
                s.timeouts.client_body = Duration::ZERO
            }),
        ];
        for (key, set) in cases {
            let mut s = Settings::default();
            set(&mut s);
            let e = s.validate().expect_err(key);
            assert!(e.contains(key), "{key}: {e}");
            assert!(e.contains("greater than 0"), "{key}: {e}");
        }
        // Zero heuristic freshness is a meaningful setting (no heuristic caching).
        let mut s = Settings::default();
        s.cache.heuristic_max = Duration::ZERO;
        s.validate().unwrap();
        Settings::default().validate().unwrap();
    }

    /// The resolver cache must keep answers (else every request resolves again) and room
    /// for a name; 0 is meaningful for min_ttl (follow TTLs) and negative_ttl (keep no
    /// failure).
    #[test]
    fn resolver_settings_are_checked_by_name() {
        type Set = fn(&mut ResolverSettings);
        let cases: [(&str, Set); 3] = [
            ("resolver.max_ttl", |r| r.max_ttl = Duration::ZERO),
            ("resolver.max_names", |r| r.max_names = 0),
            ("resolver.min_ttl", |r| {
                r.min_ttl = Duration::from_secs(7200)
            }),
        ];
        for (key, set) in cases {
            let mut s = Settings::default();
            set(&mut s.resolver);
            let e = s.validate().expect_err(key);
            assert!(e.contains(key), "{key}: {e}");
        }
        let mut s = Settings::default();
        s.resolver.min_ttl = Duration::ZERO;
        s.resolver.negative_ttl = Duration::ZERO;
        s.validate().unwrap();
    }
}
