//! Counters and histograms the proxy keeps, rendered in Prometheus text format.
//! Every metric name is declared once, in [`names`], and tests assert on those constants.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use trove_cache::resume::Detached;
use trove_cache::{Outcome, StaleServed, Tier};

use crate::destination::Refusal;
use crate::resolver::{self, Answered, Failure};

/// Metric names, declared once.
pub mod names {
    pub const REQUESTS: &str = "trove_requests_total";
    pub const HITS: &str = "trove_hits_total";
    pub const BYTES_TO_CLIENTS: &str = "trove_client_bytes_sent_total";
    pub const BYTES_FROM_CACHE: &str = "trove_cache_bytes_served_total";
    pub const BYTES_FROM_ORIGINS: &str = "trove_origin_bytes_received_total";
    pub const RESPONSE_SECONDS: &str = "trove_response_seconds";
    pub const CLIENT_CONNECTIONS_OPEN: &str = "trove_client_connections_open";
    pub const CLIENT_CONNECTIONS: &str = "trove_client_connections_total";
    pub const CLIENT_CONNECTIONS_REUSED: &str = "trove_client_connection_reuses_total";
    pub const ORIGIN_CONNECTIONS_OPEN: &str = "trove_origin_connections_open";
    pub const ORIGIN_CONNECTIONS_OPENED: &str = "trove_origin_connections_opened_total";
    pub const ORIGIN_CONNECTIONS_REUSED: &str = "trove_origin_connections_reused_total";
    pub const ORIGIN_REQUESTS: &str = "trove_origin_requests_total";
    pub const ORIGIN_ERRORS: &str = "trove_origin_errors_total";
    pub const BAD_REQUESTS: &str = "trove_bad_requests_total";
    pub const SHED: &str = "trove_shed_requests_total";
    pub const CLIENT_CONNECTIONS_REFUSED: &str = "trove_client_connections_refused_total";
    pub const ACCEPT_FD_EXHAUSTED: &str = "trove_accept_fd_exhausted_total";
    pub const STORE_BYTES: &str = "trove_store_bytes";
    pub const STORE_CAPACITY: &str = "trove_store_capacity_bytes";
    pub const STORE_OBJECTS: &str = "trove_store_objects";
    pub const STORE_EVICTIONS: &str = "trove_store_evictions_total";
    pub const STORE_REMOVALS: &str = "trove_store_removals_total";
    pub const ORIGIN_BYTES_WASTED: &str = "trove_origin_bytes_wasted_total";
    pub const ACCESS_LOG_DROPPED: &str = "trove_access_log_dropped_total";
    /// Connections the destination guard refused, by `reason` (`destination::Refusal`).
    pub const DESTINATIONS_REFUSED: &str = "trove_destinations_refused_total";
    /// Connections to the admin listener from outside `[admin] allow`.
    pub const ADMIN_REFUSED: &str = "trove_admin_connections_refused_total";
    pub const BODY_BUFFERED: &str = "trove_body_buffered_bytes";
    pub const READERS_DETACHED: &str = "trove_body_readers_detached_total";
    pub const BODY_TIMEOUTS: &str = "trove_request_body_timeouts_total";
    pub const CLIENT_ABORTS: &str = "trove_client_aborts_total";
    /// Requests for a name's addresses, by `result` (`resolver::Answered`): `hit`,
    /// `negative-hit` (a cached failure), `miss` (a lookup was started), `joined` (waited on
    /// one under way).
    pub const RESOLVER_QUERIES: &str = "trove_resolver_queries_total";
    /// Lookups that failed, by `reason` (`resolver::Failure`).
    pub const RESOLVER_FAILURES: &str = "trove_resolver_failures_total";
    /// Names the resolver's cache holds.
    pub const RESOLVER_NAMES: &str = "trove_resolver_names";
    /// Invalidations recorded (admin API and PURGE), by `kind` (`InvalidationKind`) and
    /// `mode` (`hard`, `soft`).
    pub const INVALIDATIONS: &str = "trove_invalidations_total";
    /// Invalidation rules not yet retired by the background sweep, and of those bans.
    pub const INVALIDATION_RULES: &str = "trove_invalidation_rules_pending";
    pub const BANS: &str = "trove_bans_pending";
    /// Bytes the pending bans' compiled patterns hold (issue 19: bounded, see `BanLimits`).
    pub const BAN_BYTES: &str = "trove_ban_bytes";
    /// (object, tag or named cache) pairs in the tag index.
    pub const TAG_MEMBERSHIPS: &str = "trove_tag_memberships";
    /// Tags from origin responses dropped for length or count (`[tags]`).
    pub const TAGS_DROPPED: &str = "trove_tags_dropped_total";
    /// Requests asked of their key's owner, another node of the cluster (shard mode).
    pub const CLUSTER_OWNER_REQUESTS: &str = "trove_cluster_owner_requests_total";
    /// Of those, the ones the owner could not answer (this node served them itself).
    pub const CLUSTER_OWNER_FAILURES: &str = "trove_cluster_owner_failures_total";
    /// Cluster nodes this node takes as up (itself included).
    pub const CLUSTER_NODES_UP: &str = "trove_cluster_nodes_up";
    /// Admin API calls, by `status` class (`2xx`, `4xx`, `5xx`).
    pub const API_REQUESTS: &str = "trove_api_requests_total";
    /// Stale stored responses served, by `reason` (`trove_cache::StaleServed`): `max-stale`,
    /// `stale-while-revalidate`, `stale-if-error`, `disconnected` (the origin could not be
    /// reached, within `[cache] max_stale`).
    pub const STALE_SERVED: &str = "trove_stale_served_total";
    /// TLS connections opened to origins, by `handshake` (`full`, `resumed`).
    pub const ORIGIN_TLS_CONNECTIONS: &str = "trove_origin_tls_connections_total";
    /// Origin requests sent on a pooled TLS connection (a part of
    /// `trove_origin_connections_reused_total`).
    pub const ORIGIN_TLS_REUSED: &str = "trove_origin_tls_connections_reused_total";
    /// TLS handshakes completed on the listeners, by `handshake` (`full`, `resumed`).
    pub const TLS_HANDSHAKES: &str = "trove_tls_handshakes_total";
    /// TLS handshakes failed on the listeners, by `reason` (`trove_tls::TlsFailure`).
    pub const TLS_HANDSHAKE_FAILURES: &str = "trove_tls_handshake_failures_total";
    /// Listener certificate sets read again (reload or renewal on disk), by `result`
    /// (`loaded`, `refused`: the old ones kept).
    pub const TLS_CERTIFICATE_RELOADS: &str = "trove_tls_certificate_reloads_total";
    /// Client connections accepted, by `protocol` (`http/1.1`, which counts 1.0 too;
    /// `h2`, chosen by ALPN; `h2c`, with prior knowledge).
    pub const CLIENT_CONNECTIONS_BY_PROTOCOL: &str = "trove_client_connections_by_protocol_total";
    /// HTTP/2 streams accepted from clients.
    pub const H2_STREAMS: &str = "trove_client_h2_streams_total";
    /// HTTP/2 streams being served.
    pub const H2_STREAMS_OPEN: &str = "trove_client_h2_streams_open";
    /// HTTP/2 streams trove reset, by `reason` (`write-timeout`: the client gave no window
    /// for `[timeouts] client_write`; `incomplete`: the reply could not be written whole,
    /// the client having reset the stream or the body having failed after its head).
    pub const H2_RESETS_SENT: &str = "trove_client_h2_resets_sent_total";
    /// HTTP/2 connections trove sent GOAWAY on, by `reason` (`stop`, `idle`; `flood`: a
    /// control-frame flood, closed with ENHANCE_YOUR_CALM, `client::h2::meter`).
    pub const H2_GOAWAYS_SENT: &str = "trove_client_h2_goaways_sent_total";
    /// Failed origin requests, by `upstream` (its host and port) and `reason` (the core's
    /// `OriginFailure`: `dns-error`, `connection-refused`, `timeout`, ...).
    pub const ORIGIN_FAILURES: &str = "trove_origin_failures_total";
    /// Stored responses served at lookup (fresh, stale, 304s and ranges included), by the
    /// store tier they came from (`tier`: `memory`, `disk`).
    pub const TIER_HITS: &str = "trove_tier_hits_total";
    /// Disk hits sent with `sendfile(2)` from the data file, and their body bytes.
    pub const DISK_SENDFILE_HITS: &str = "trove_disk_sendfile_hits_total";
    pub const DISK_SENDFILE_BYTES: &str = "trove_disk_sendfile_bytes_total";
    /// Zero-copy sends cut off (connection reset) because the record's region was reclaimed
    /// while it was being sent.
    pub const DISK_SENDFILE_ABORTED: &str = "trove_disk_sendfile_aborted_total";
    /// The disk tier (`[cache.disk]`, see `trove_disk`).
    pub const DISK_OBJECTS: &str = "trove_disk_objects";
    pub const DISK_BYTES: &str = "trove_disk_bytes";
    pub const DISK_CAPACITY: &str = "trove_disk_capacity_bytes";
    pub const DISK_INDEX_BYTES: &str = "trove_disk_index_bytes";
    pub const DISK_WRITES: &str = "trove_disk_writes_total";
    pub const DISK_WRITES_SYNCED: &str = "trove_disk_writes_synced_total";
    pub const DISK_WRITE_BYTES: &str = "trove_disk_write_bytes_total";
    pub const DISK_WRITES_DROPPED: &str = "trove_disk_writes_dropped_total";
    pub const DISK_HITS: &str = "trove_disk_hits_total";
    /// Records found torn, truncated or corrupt (at recovery or on a read), dropped.
    pub const DISK_CORRUPT: &str = "trove_disk_corrupt_records_total";
    pub const DISK_RECLAIMED: &str = "trove_disk_regions_reclaimed_total";
    pub const DISK_REINSERTED: &str = "trove_disk_reinserted_total";
    pub const DISK_IO_ERRORS: &str = "trove_disk_io_errors_total";
    /// Regions recovery dropped whole (a damaged header, a data file cut short).
    pub const DISK_REGIONS_DISCARDED: &str = "trove_disk_regions_discarded_total";
    /// Starts that found acknowledged invalidations damaged in the journal.
    pub const DISK_JOURNAL_DAMAGED: &str = "trove_disk_journal_damaged_total";
    pub const DISK_RECOVERED: &str = "trove_disk_recovered_objects";
    pub const DISK_RECOVERY_SECONDS: &str = "trove_disk_recovery_seconds";
    /// 1 once the index is back after a start.
    pub const DISK_READY: &str = "trove_disk_ready";
    /// 1 when the disk tier failed (or could not be opened) and trove is memory-only.
    pub const DISK_FAILED: &str = "trove_disk_failed";
    /// The crash bound (`[cache.disk] sync_interval`, see `trove_disk`'s writer): objects the
    /// write queue took (acknowledged), objects shed because the writer would not have reached
    /// them within the bound, acknowledged objects that still reached the file late, the longest
    /// acknowledgement-to-file delay seen, and the bytes the queue admits now.
    pub const DISK_WRITES_QUEUED: &str = "trove_disk_writes_queued_total";
    pub const DISK_WRITES_SHED: &str = "trove_disk_writes_shed_total";
    pub const DISK_WRITES_LATE: &str = "trove_disk_writes_late_total";
    pub const DISK_WRITE_DELAY_MAX: &str = "trove_disk_write_delay_max_seconds";
    pub const DISK_QUEUE_LIMIT: &str = "trove_disk_queue_limit_bytes";
    /// The invalidation journal (`trove_disk::journal`): its write-and-`fdatasync`s (what
    /// acknowledgements wait for), the time they took, and the file's size.
    pub const DISK_JOURNAL_SYNCS: &str = "trove_disk_journal_syncs_total";
    pub const DISK_JOURNAL_SYNC_SECONDS: &str = "trove_disk_journal_sync_seconds_total";
    pub const DISK_JOURNAL_BYTES: &str = "trove_disk_journal_bytes";
    /// Invalidation passes over the disk (`DiskStore::pass`) and the objects they removed.
    pub const DISK_PASSES: &str = "trove_disk_invalidation_passes_total";
    pub const DISK_PASS_REMOVED: &str = "trove_disk_invalidation_pass_removed_total";
}

/// Appends the disk tier's metrics; `None` when it could not be opened at all.
pub fn render_disk(out: &mut String, s: Option<&trove_store::LowerStats>) {
    let d = s.copied().unwrap_or_default();
    let failed = s.is_none_or(|s| s.failed);
    let gauges: [(&str, &str, f64); 8] = [
        (
            names::DISK_OBJECTS,
            "Objects the disk index holds.",
            d.objects as f64,
        ),
        (
            names::DISK_BYTES,
            "Bytes of disk regions in use.",
            d.bytes as f64,
        ),
        (
            names::DISK_CAPACITY,
            "The disk tier's budget in bytes.",
            d.capacity as f64,
        ),
        (
            names::DISK_INDEX_BYTES,
            "Bytes of memory the disk index takes.",
            d.index_bytes as f64,
        ),
        (
            names::DISK_RECOVERED,
            "Objects found on disk at start-up.",
            d.recovered_objects as f64,
        ),
        (
            names::DISK_RECOVERY_SECONDS,
            "Time the index took to come back at start-up.",
            d.recovery_micros as f64 / 1e6,
        ),
        (
            names::DISK_READY,
            "1 once the disk index is back.",
            u8::from(d.ready) as f64,
        ),
        (
            names::DISK_FAILED,
            "1 when the disk tier failed and trove serves from memory only.",
            u8::from(failed) as f64,
        ),
    ];
    for (name, help, v) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    }
    let counters: [(&str, &str, u64); 11] = [
        (names::DISK_WRITES, "Objects written to disk.", d.writes),
        (
            names::DISK_WRITES_SYNCED,
            "Of those, objects a sync has made durable (a crash of the machine keeps them).",
            d.writes_synced,
        ),
        (
            names::DISK_WRITE_BYTES,
            "Bytes written to disk.",
            d.write_bytes,
        ),
        (
            names::DISK_WRITES_DROPPED,
            "Objects not written (queue full, too large, or the tier failed).",
            d.writes_dropped,
        ),
        (names::DISK_HITS, "Objects read back from disk.", d.hits),
        (
            names::DISK_CORRUPT,
            "Torn, truncated or corrupt records dropped, never served.",
            d.corrupt,
        ),
        (
            names::DISK_RECLAIMED,
            "Disk regions reclaimed.",
            d.regions_reclaimed,
        ),
        (
            names::DISK_REINSERTED,
            "Objects kept by reinsertion when their region was reclaimed.",
            d.reinserted,
        ),
        (names::DISK_IO_ERRORS, "Disk I/O errors.", d.io_errors),
        (
            names::DISK_REGIONS_DISCARDED,
            "Regions recovery dropped whole: a damaged region header, a data file cut short.",
            d.regions_discarded,
        ),
        (
            names::DISK_JOURNAL_DAMAGED,
            "Starts that found the invalidation journal damaged (objects it may cover dropped).",
            d.journal_damaged,
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
    render_disk_bound(out, &d);
    render_journal(out, &d);
}

/// The invalidation journal's and the disk passes' figures.
fn render_journal(out: &mut String, d: &trove_store::LowerStats) {
    let counters: [(&str, &str, f64); 4] = [
        (
            names::DISK_JOURNAL_SYNCS,
            "Invalidation journal write-and-syncs (acknowledgements share them; reservations and puts' rules too).",
            d.journal_syncs as f64,
        ),
        (
            names::DISK_JOURNAL_SYNC_SECONDS,
            "Time those syncs took.",
            d.journal_sync_nanos as f64 / 1e9,
        ),
        (
            names::DISK_PASSES,
            "Invalidation passes over the disk completed.",
            d.passes as f64,
        ),
        (
            names::DISK_PASS_REMOVED,
            "Objects invalidation passes removed from the disk.",
            d.pass_removed as f64,
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
    let name = names::DISK_JOURNAL_BYTES;
    let _ = writeln!(
        out,
        "# HELP {name} Bytes of the invalidation journal.\n# TYPE {name} gauge\n{name} {}",
        d.journal_bytes
    );
}

/// The crash bound's measurements (see `names::DISK_WRITES_QUEUED`).
fn render_disk_bound(out: &mut String, d: &trove_store::LowerStats) {
    let counters: [(&str, &str, u64); 3] = [
        (
            names::DISK_WRITES_QUEUED,
            "Objects taken into the disk write queue (acknowledged: kept across a kill -9 once sync_interval has passed).",
            d.writes_queued,
        ),
        (
            names::DISK_WRITES_SHED,
            "Objects not written because the writer would not have reached them within sync_interval.",
            d.writes_shed,
        ),
        (
            names::DISK_WRITES_LATE,
            "Acknowledged objects that reached the file later than sync_interval after acknowledgement.",
            d.writes_late,
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
    let gauges: [(&str, &str, f64); 2] = [
        (
            names::DISK_WRITE_DELAY_MAX,
            "The longest time from an object's acknowledgement to its write to the file.",
            d.write_delay_max_micros as f64 / 1e6,
        ),
        (
            names::DISK_QUEUE_LIMIT,
            "Bytes the disk write queue admits now (what the writer drains in half of sync_interval).",
            d.queue_limit as f64,
        ),
    ];
    for (name, help, v) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    }
}

/// What an invalidation selected, for the metrics (`kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidationKind {
    Url,
    Tag,
    Cache,
    Prefix,
    Ban,
}

impl InvalidationKind {
    pub const ALL: [InvalidationKind; 5] = [
        InvalidationKind::Url,
        InvalidationKind::Tag,
        InvalidationKind::Cache,
        InvalidationKind::Prefix,
        InvalidationKind::Ban,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InvalidationKind::Url => "url",
            InvalidationKind::Tag => "tag",
            InvalidationKind::Cache => "cache",
            InvalidationKind::Prefix => "prefix",
            InvalidationKind::Ban => "ban",
        }
    }
}

/// Upper bounds (seconds) of the response-time histogram buckets.
pub const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A fixed-bucket histogram of durations.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| s <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Counts per bucket (not cumulative), and past the last bucket at the end.
    pub fn snapshot(&self) -> [u64; BUCKETS.len() + 1] {
        let mut out = [0; BUCKETS.len() + 1];
        let mut sum = 0;
        for (o, b) in out.iter_mut().zip(&self.buckets) {
            *o = b.load(Ordering::Relaxed);
            sum += *o;
        }
        out[BUCKETS.len()] = self.count.load(Ordering::Relaxed).saturating_sub(sum);
        out
    }

    fn render(&self, out: &mut String, name: &str, label: &str) {
        let mut cum = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cum += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{label},le=\"{b}\"}} {cum}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{label},le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{label}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{label}}} {count}");
    }
}

/// All of the proxy's counters.
/// HTTP/2 to clients (see [`names::H2_STREAMS`] and the names after it).
#[derive(Debug, Default)]
pub struct H2Counters {
    /// Connections on which ALPN chose `h2`.
    pub alpn: AtomicU64,
    /// Cleartext connections that opened with the HTTP/2 preface.
    pub prior_knowledge: AtomicU64,
    pub streams: AtomicU64,
    pub streams_open: AtomicI64,
    pub reset_write_timeout: AtomicU64,
    pub reset_incomplete: AtomicU64,
    pub goaway_stop: AtomicU64,
    pub goaway_idle: AtomicU64,
    pub goaway_flood: AtomicU64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    pub by_outcome: [AtomicU64; Outcome::ALL.len()],
    pub bytes_to_clients: AtomicU64,
    /// Of those, bytes of cacheable traffic (`Outcome::is_cacheable_traffic`).
    pub bytes_cacheable: AtomicU64,
    pub bytes_from_cache: AtomicU64,
    pub bytes_from_origins: AtomicU64,
    pub hit_time: Histogram,
    pub miss_time: Histogram,
    pub client_open: AtomicI64,
    pub client_accepted: AtomicU64,
    pub client_reused: AtomicU64,
    pub origin_open: AtomicI64,
    pub origin_opened: AtomicU64,
    pub origin_reused: AtomicU64,
    /// TLS connections to origins: full handshakes, resumed ones, requests on pooled ones.
    pub origin_tls_full: AtomicU64,
    pub origin_tls_resumed: AtomicU64,
    pub origin_tls_reused: AtomicU64,
    /// The TLS listeners' handshakes and certificate reloads (shared with each
    /// `trove_tls::ServerTls`).
    pub tls: Arc<trove_tls::TlsCounters>,
    /// HTTP/2 to clients (`client::h2`).
    pub h2: H2Counters,
    pub origin_requests: AtomicU64,
    pub origin_errors: AtomicU64,
    pub bad_requests: AtomicU64,
    /// Request bodies cut off for arriving too slowly (answered 408).
    pub body_timeouts: AtomicU64,
    /// Requests whose client went away before the exchange completed, mid-body or
    /// mid-response (the access log's `…_ABORTED`).
    pub client_aborts: AtomicU64,
    pub shed: AtomicU64,
    /// Connections closed at accept because `max_client_connections` were open.
    pub client_refused: AtomicU64,
    /// Times accepting paused because file descriptors ran out.
    pub accept_fd_exhausted: AtomicU64,
    /// Origin body bytes read that no client received (aborted transfers, seed 003 §IV.C).
    pub origin_bytes_wasted: AtomicU64,
    /// Destinations refused by the guard, by reason (as `Refusal::ALL`).
    pub destinations_refused: [AtomicU64; Refusal::ALL.len()],
    /// Admin connections refused by `[admin] allow`.
    pub admin_refused: AtomicU64,
    /// Response body bytes held in memory outside the store's budget: bodies streamed to
    /// clients without being stored, or that left the store while arriving. Shared with
    /// every such `trove_store::Body` (`Body::set_meter`).
    pub body_buffered: Arc<AtomicU64>,
    /// Readers detached from a body that left the store, by what became of them (as
    /// `Detached::ALL`).
    pub detached: [AtomicU64; Detached::ALL.len()],
    /// Invalidations by kind (as `InvalidationKind::ALL`) and mode: index `kind * 2 + soft`.
    pub invalidations: [AtomicU64; 2 * InvalidationKind::ALL.len()],
    /// Tags from origins dropped past `[tags]` bounds.
    pub tags_dropped: AtomicU64,
    pub cluster_owner_requests: AtomicU64,
    pub cluster_owner_failures: AtomicU64,
    /// Admin API calls by status class: 2xx, 4xx, 5xx.
    pub api_requests: [AtomicU64; 3],
    /// Stale responses served, by why (as `StaleServed::ALL`).
    pub stale_served: [AtomicU64; StaleServed::ALL.len()],
    /// Origin failures by upstream and reason (`origin::failures`).
    pub origin_failures: crate::origin::failures::UpstreamFailures,
    /// Hits by tier (as `Tier::ALL`).
    pub tier_hits: [AtomicU64; Tier::ALL.len()],
    /// Disk hits sent by `sendfile(2)`, their body bytes, and those cut off.
    pub sendfile_hits: AtomicU64,
    pub sendfile_bytes: AtomicU64,
    pub sendfile_aborted: AtomicU64,
}

/// Store figures, read when rendering.
#[derive(Debug, Default, Clone, Copy)]
pub struct StoreFigures {
    pub bytes: u64,
    pub capacity: u64,
    pub objects: u64,
    pub evictions: u64,
    /// Objects removed from the store, by reason (as `trove_store::Removal::ALL`).
    pub removed: [u64; trove_store::Removal::ALL.len()],
    pub log_dropped: u64,
    /// The resolver's counters.
    pub resolver: resolver::Stats,
}

/// The `q` quantile (0–1) of a [`Histogram::snapshot`] (or a difference of two), in seconds:
/// interpolated linearly inside its bucket, as Prometheus' `histogram_quantile` does. `None`
/// with no observations; past the last bucket, its bound.
pub fn quantile(counts: &[u64; BUCKETS.len() + 1], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, n) in counts.iter().enumerate() {
        if *n > 0 && (below + n) as f64 >= rank {
            let Some(upper) = BUCKETS.get(i) else {
                return BUCKETS.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { BUCKETS[i - 1] };
            let within = (rank - below as f64) / *n as f64;
            return Some(lower + (upper - lower) * within);
        }
        below += n;
    }
    BUCKETS.last().copied()
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
    /// Counts a finished request.
    pub fn record(&self, outcome: Outcome, elapsed: Duration, sent: u64) {
        inc(&self.by_outcome[outcome.index()]);
        self.bytes_to_clients.fetch_add(sent, Ordering::Relaxed);
        if outcome.is_cacheable_traffic() {
            self.bytes_cacheable.fetch_add(sent, Ordering::Relaxed);
        }
        if outcome.is_hit() {
            self.bytes_from_cache.fetch_add(sent, Ordering::Relaxed);
            self.hit_time.observe(elapsed);
        } else if outcome == Outcome::Shed {
            // Counted here, where every shed request ends, so no path can miss it; kept out
            // of the miss histogram, which its instant 503s would flatter.
            inc(&self.shed);
        } else if !matches!(outcome, Outcome::Denied | Outcome::Tunnel | Outcome::None) {
            self.miss_time.observe(elapsed);
        }
    }

    /// Counts a hit served from `tier`.
    pub fn count_tier_hit(&self, tier: Tier) {
        inc(&self.tier_hits[tier.index()]);
    }

    /// Appends the hits by tier and the zero-copy counters (with a disk tier).
    pub fn render_tiers(&self, out: &mut String) {
        let g = |o: &AtomicU64| o.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP {} Hits by the store tier that served them.",
            names::TIER_HITS
        );
        let _ = writeln!(out, "# TYPE {} counter", names::TIER_HITS);
        for t in Tier::ALL {
            let _ = writeln!(
                out,
                "{}{{tier=\"{}\"}} {}",
                names::TIER_HITS,
                t.as_str(),
                g(&self.tier_hits[t.index()])
            );
        }
        for (name, help, v) in [
            (
                names::DISK_SENDFILE_HITS,
                "Disk hits sent with sendfile from the data file.",
                g(&self.sendfile_hits),
            ),
            (
                names::DISK_SENDFILE_BYTES,
                "Body bytes sent with sendfile.",
                g(&self.sendfile_bytes),
            ),
            (
                names::DISK_SENDFILE_ABORTED,
                "Sendfile hits cut off because their region was reclaimed meanwhile.",
                g(&self.sendfile_aborted),
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {v}");
        }
    }

    /// Counts a destination the guard refused.
    pub fn count_refusal(&self, why: Refusal) {
        inc(&self.destinations_refused[why.index()]);
    }

    /// Counts a stale response served.
    pub fn count_stale(&self, why: StaleServed) {
        inc(&self.stale_served[why as usize]);
    }

    /// Counts a reader detached from a shared body.
    pub fn count_detached(&self, how: Detached) {
        inc(&self.detached[how as usize]);
    }

    /// The invalidation figures (appended to [`Metrics::render`]'s text).
    pub fn render_invalidations(
        &self,
        out: &mut String,
        inv: trove_store::invalidation::InvalidationStats,
    ) {
        let g = |o: &AtomicU64| o.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP {} Invalidations recorded, by kind and mode.",
            names::INVALIDATIONS
        );
        let _ = writeln!(out, "# TYPE {} counter", names::INVALIDATIONS);
        for (i, k) in InvalidationKind::ALL.iter().enumerate() {
            for (j, mode) in ["hard", "soft"].iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{}{{kind=\"{}\",mode=\"{mode}\"}} {}",
                    names::INVALIDATIONS,
                    k.as_str(),
                    g(&self.invalidations[i * 2 + j])
                );
            }
        }
        let gauges = [
            (
                names::INVALIDATION_RULES,
                "Invalidation rules not yet retired.",
                inv.pending,
            ),
            (names::BANS, "Bans not yet retired.", inv.bans),
            (
                names::BAN_BYTES,
                "Bytes the pending bans' compiled patterns hold.",
                inv.ban_bytes,
            ),
            (
                names::TAG_MEMBERSHIPS,
                "(object, tag) pairs in the tag index.",
                inv.memberships,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        let _ = writeln!(
            out,
            "# HELP {n} Tags from origins dropped past the [tags] bounds.\n# TYPE {n} counter\n{n} {}",
            g(&self.tags_dropped),
            n = names::TAGS_DROPPED
        );
        let _ = writeln!(
            out,
            "# HELP {n} Requests asked of their key's owner in the cluster.\n# TYPE {n} counter\n{n} {}",
            g(&self.cluster_owner_requests),
            n = names::CLUSTER_OWNER_REQUESTS
        );
        let _ = writeln!(
            out,
            "# HELP {n} Requests their key's owner could not answer (served here instead).\n# TYPE {n} counter\n{n} {}",
            g(&self.cluster_owner_failures),
            n = names::CLUSTER_OWNER_FAILURES
        );
        let _ = writeln!(
            out,
            "# HELP {} Admin API calls by status class.",
            names::API_REQUESTS
        );
        let _ = writeln!(out, "# TYPE {} counter", names::API_REQUESTS);
        for (i, c) in ["2xx", "4xx", "5xx"].iter().enumerate() {
            let _ = writeln!(
                out,
                "{}{{status=\"{c}\"}} {}",
                names::API_REQUESTS,
                g(&self.api_requests[i])
            );
        }
    }

    /// The HTTP/2 counters, and client connections by protocol.
    fn render_h2(&self, out: &mut String) {
        let g = |o: &AtomicU64| o.load(Ordering::Relaxed);
        let family = |out: &mut String, name: &str, help: &str, kind: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        let h = &self.h2;
        family(
            out,
            names::CLIENT_CONNECTIONS_BY_PROTOCOL,
            "Client connections accepted, by protocol.",
            "counter",
        );
        let (h2, h2c) = (g(&h.alpn), g(&h.prior_knowledge));
        let http1 = g(&self.client_accepted).saturating_sub(h2 + h2c);
        for (protocol, v) in [("http/1.1", http1), ("h2", h2), ("h2c", h2c)] {
            let _ = writeln!(
                out,
                "{}{{protocol=\"{protocol}\"}} {v}",
                names::CLIENT_CONNECTIONS_BY_PROTOCOL
            );
        }
        family(
            out,
            names::H2_STREAMS,
            "HTTP/2 streams accepted from clients.",
            "counter",
        );
        let _ = writeln!(out, "{} {}", names::H2_STREAMS, g(&h.streams));
        family(
            out,
            names::H2_STREAMS_OPEN,
            "HTTP/2 streams being served.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "{} {}",
            names::H2_STREAMS_OPEN,
            h.streams_open.load(Ordering::Relaxed)
        );
        family(
            out,
            names::H2_RESETS_SENT,
            "HTTP/2 streams reset by trove, by reason.",
            "counter",
        );
        for (reason, c) in [
            ("write-timeout", &h.reset_write_timeout),
            ("incomplete", &h.reset_incomplete),
        ] {
            let _ = writeln!(
                out,
                "{}{{reason=\"{reason}\"}} {}",
                names::H2_RESETS_SENT,
                g(c)
            );
        }
        family(
            out,
            names::H2_GOAWAYS_SENT,
            "HTTP/2 connections sent GOAWAY by trove, by reason.",
            "counter",
        );
        for (reason, c) in [
            ("stop", &h.goaway_stop),
            ("idle", &h.goaway_idle),
            ("flood", &h.goaway_flood),
        ] {
            let _ = writeln!(
                out,
                "{}{{reason=\"{reason}\"}} {}",
                names::H2_GOAWAYS_SENT,
                g(c)
            );
        }
    }

    /// The TLS counters, both sides.
    fn render_tls(&self, out: &mut String) {
        let g = |o: &AtomicU64| o.load(Ordering::Relaxed);
        let family = |out: &mut String, name: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        };
        family(
            out,
            names::ORIGIN_TLS_CONNECTIONS,
            "TLS connections opened to origins, by handshake kind.",
        );
        for (kind, c) in [
            ("full", &self.origin_tls_full),
            ("resumed", &self.origin_tls_resumed),
        ] {
            let _ = writeln!(
                out,
                "{}{{handshake=\"{kind}\"}} {}",
                names::ORIGIN_TLS_CONNECTIONS,
                g(c)
            );
        }
        family(
            out,
            names::ORIGIN_TLS_REUSED,
            "Origin requests sent on a pooled TLS connection.",
        );
        let _ = writeln!(
            out,
            "{} {}",
            names::ORIGIN_TLS_REUSED,
            g(&self.origin_tls_reused)
        );
        let t = &self.tls;
        let full = g(&t.handshakes).saturating_sub(g(&t.resumed));
        family(
            out,
            names::TLS_HANDSHAKES,
            "TLS handshakes completed on the listeners, by kind.",
        );
        for (kind, v) in [("full", full), ("resumed", g(&t.resumed))] {
            let _ = writeln!(out, "{}{{handshake=\"{kind}\"}} {v}", names::TLS_HANDSHAKES);
        }
        family(
            out,
            names::TLS_HANDSHAKE_FAILURES,
            "TLS handshakes failed on the listeners, by reason.",
        );
        for f in trove_tls::TlsFailure::ALL {
            let _ = writeln!(
                out,
                "{}{{reason=\"{}\"}} {}",
                names::TLS_HANDSHAKE_FAILURES,
                f.as_str(),
                g(&t.failures[f.index()])
            );
        }
        family(
            out,
            names::TLS_CERTIFICATE_RELOADS,
            "Listener certificates read again (reload, renewal on disk), by result.",
        );
        for (result, c) in [("loaded", &t.reloads), ("refused", &t.reload_failures)] {
            let _ = writeln!(
                out,
                "{}{{result=\"{result}\"}} {}",
                names::TLS_CERTIFICATE_RELOADS,
                g(c)
            );
        }
    }

    pub fn count(&self, outcome: Outcome) -> u64 {
        self.by_outcome[outcome.index()].load(Ordering::Relaxed)
    }

    /// Prometheus text exposition format 0.0.4.
    pub fn render(&self, store: StoreFigures) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let g = |o: &AtomicU64| o.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP {} Requests by cache result code.",
            names::REQUESTS
        );
        let _ = writeln!(out, "# TYPE {} counter", names::REQUESTS);
        let mut hits = 0;
        for o in Outcome::ALL {
            let n = self.count(o);
            if o.is_hit() {
                hits += n;
            }
            let _ = writeln!(out, "{}{{result=\"{}\"}} {n}", names::REQUESTS, o.as_str());
        }
        let counters: [(&str, &str, u64); 18] = [
            (names::HITS, "Requests served from the cache.", hits),
            (
                names::BYTES_TO_CLIENTS,
                "Bytes sent to clients.",
                g(&self.bytes_to_clients),
            ),
            (
                names::BYTES_FROM_CACHE,
                "Bytes sent to clients from the cache.",
                g(&self.bytes_from_cache),
            ),
            (
                names::BYTES_FROM_ORIGINS,
                "Body bytes received from origins.",
                g(&self.bytes_from_origins),
            ),
            (
                names::CLIENT_CONNECTIONS,
                "Client connections accepted.",
                g(&self.client_accepted),
            ),
            (
                names::CLIENT_CONNECTIONS_REUSED,
                "Requests on an already used client connection.",
                g(&self.client_reused),
            ),
            (
                names::ORIGIN_CONNECTIONS_OPENED,
                "Origin connections opened.",
                g(&self.origin_opened),
            ),
            (
                names::ORIGIN_CONNECTIONS_REUSED,
                "Origin requests sent on a pooled connection.",
                g(&self.origin_reused),
            ),
            (
                names::ORIGIN_REQUESTS,
                "Requests sent to origins.",
                g(&self.origin_requests),
            ),
            (
                names::ORIGIN_ERRORS,
                "Origin requests that failed (connect, timeout, bad response).",
                g(&self.origin_errors),
            ),
            (
                names::BAD_REQUESTS,
                "Malformed client requests refused.",
                g(&self.bad_requests),
            ),
            (
                names::BODY_TIMEOUTS,
                "Request bodies cut off for arriving too slowly (408).",
                g(&self.body_timeouts),
            ),
            (
                names::CLIENT_ABORTS,
                "Requests whose client went away mid-body or mid-response (logged ..._ABORTED).",
                g(&self.client_aborts),
            ),
            (
                names::SHED,
                "Requests shed under overload: answered 503 at once rather than queued for an origin.",
                g(&self.shed),
            ),
            (
                names::CLIENT_CONNECTIONS_REFUSED,
                "Client connections closed at accept because max_client_connections were open.",
                g(&self.client_refused),
            ),
            (
                names::ACCEPT_FD_EXHAUSTED,
                "Times accepting paused because file descriptors ran out (EMFILE, ENFILE).",
                g(&self.accept_fd_exhausted),
            ),
            (
                names::ORIGIN_BYTES_WASTED,
                "Origin body bytes read that no client received (aborted transfers).",
                g(&self.origin_bytes_wasted),
            ),
            (
                names::ADMIN_REFUSED,
                "Admin listener connections refused ([admin] allow).",
                g(&self.admin_refused),
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
        let gauges: [(&str, &str, i64); 6] = [
            (
                names::CLIENT_CONNECTIONS_OPEN,
                "Client connections open.",
                self.client_open.load(Ordering::Relaxed),
            ),
            (
                names::ORIGIN_CONNECTIONS_OPEN,
                "Origin connections open.",
                self.origin_open.load(Ordering::Relaxed),
            ),
            (
                names::BODY_BUFFERED,
                "Response body bytes held in memory outside the store (bodies not being stored).",
                self.body_buffered.load(Ordering::Relaxed) as i64,
            ),
            (
                names::STORE_BYTES,
                "Bytes held by the memory store.",
                store.bytes as i64,
            ),
            (
                names::STORE_CAPACITY,
                "Memory store budget in bytes.",
                store.capacity as i64,
            ),
            (
                names::STORE_OBJECTS,
                "Objects held by the memory store.",
                store.objects as i64,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        for (name, help, v) in [
            (
                names::STORE_EVICTIONS,
                "Objects evicted from the memory store.",
                store.evictions,
            ),
            (
                names::ACCESS_LOG_DROPPED,
                "Access log lines dropped because the writer fell behind.",
                store.log_dropped,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
        let name = names::READERS_DETACHED;
        let _ = writeln!(
            out,
            "# HELP {name} Readers that fell too far behind a body no longer stored, by what became of them.\n# TYPE {name} counter"
        );
        for how in Detached::ALL {
            let n = self.detached[how as usize].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{outcome=\"{}\"}} {n}", how.as_str());
        }
        let name = names::STORE_REMOVALS;
        let _ = writeln!(
            out,
            "# HELP {name} Objects that left the store, by reason.\n# TYPE {name} counter"
        );
        for why in trove_store::Removal::ALL {
            let n = store.removed[why as usize];
            let _ = writeln!(out, "{name}{{reason=\"{}\"}} {n}", why.as_str());
        }
        let name = names::DESTINATIONS_REFUSED;
        let _ = writeln!(
            out,
            "# HELP {name} Connections the destination guard refused, by reason.\n# TYPE {name} counter"
        );
        for why in Refusal::ALL {
            let n = g(&self.destinations_refused[why.index()]);
            let _ = writeln!(out, "{name}{{reason=\"{}\"}} {n}", why.as_str());
        }
        let name = names::RESOLVER_QUERIES;
        let _ = writeln!(
            out,
            "# HELP {name} Requests for a name's addresses, by how the resolver's cache answered.\n# TYPE {name} counter"
        );
        for a in Answered::ALL {
            let n = store.resolver.answered[a as usize];
            let _ = writeln!(out, "{name}{{result=\"{}\"}} {n}", a.as_str());
        }
        let name = names::RESOLVER_FAILURES;
        let _ = writeln!(
            out,
            "# HELP {name} Name lookups that failed, by reason.\n# TYPE {name} counter"
        );
        for why in Failure::ALL {
            let n = store.resolver.failures[why as usize];
            let _ = writeln!(out, "{name}{{reason=\"{}\"}} {n}", why.as_str());
        }
        let name = names::RESOLVER_NAMES;
        let _ = writeln!(
            out,
            "# HELP {name} Names held by the resolver's cache.\n# TYPE {name} gauge\n{name} {}",
            store.resolver.names
        );
        let name = names::ORIGIN_FAILURES;
        let _ = writeln!(
            out,
            "# HELP {name} Failed origin requests, by upstream and reason.\n# TYPE {name} counter"
        );
        for (upstream, reason, n) in self.origin_failures.counts() {
            let upstream = upstream.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(
                out,
                "{name}{{upstream=\"{upstream}\",reason=\"{reason}\"}} {n}"
            );
        }
        let name = names::RESPONSE_SECONDS;
        let _ = writeln!(
            out,
            "# HELP {name} Response time, first byte in to last byte out.\n# TYPE {name} histogram"
        );
        self.hit_time.render(&mut out, name, "kind=\"hit\"");
        self.miss_time.render(&mut out, name, "kind=\"miss\"");
        let name = names::STALE_SERVED;
        let _ = writeln!(
            out,
            "# HELP {name} Stale stored responses served, by why that was allowed.\n# TYPE {name} counter"
        );
        for why in StaleServed::ALL {
            let n = g(&self.stale_served[why as usize]);
            let _ = writeln!(out, "{name}{{reason=\"{}\"}} {n}", why.as_str());
        }
        self.render_tls(&mut out);
        self.render_h2(&mut out);
        out
    }
}
