//! Invalidation by rule, applied lazily: URL purges, tags (surrogate keys), named caches,
//! URL prefixes and bans, hard (gone) or soft (stale), acknowledged in constant time
//! whatever the number of objects they cover.
//!
//! **Why rules and not a walk.** Removing every object that carries a tag, or lies under a
//! prefix, costs time proportional to what matches (or, for a prefix or a ban, to the
//! whole store). Here an invalidation appends one [`Rule`] to a log under a sequence
//! number and is done; the store is brought in line afterwards, by two means:
//!
//! - **At lookup** ([`Invalidations::verdict`]): every stored object carries in its
//!   [`Labels`] the sequence number current when the request that produced it was *sent*
//!   (`born`) and the newest rule it has been checked against (`checked`). An object is
//!   checked only against rules newer than both, once: the common hit costs one atomic load
//!   and a compare, however many rules are pending (Varnish's ban list grows a cost per hit
//!   instead). A hard match is [`Verdict::Dead`] (the caller removes it); a soft match is
//!   [`Verdict::Stale`] from the rule's time on, until a revalidation gives the object a
//!   newer `born`.
//! - **In the background** ([`Invalidations::sweep`]): a pass over the store checks every
//!   object the same way, removing the dead so their memory returns, and rules every object
//!   has been checked against are retired once no fetch sent before them can still be
//!   arriving (`retire_after`). An object older than a retired rule it was never checked
//!   against is taken as dead (it can only be a fetch slower than that bound).
//!
//! **Why `born` is the send time.** A response that left the origin before an
//! invalidation may arrive after it. Stamped with the sequence number at send time, it is
//! older than the rule and dies like any old copy: a fill still streaming in, a collapsed
//! fetch's followers, a 304 to a revalidation sent before the purge (the driver refetches).
//!
//! Tags and named caches are kept as stable XXH3 hashes ([`tag_hash`], [`cache_hash`]) so
//! a disk tier can persist them and a broker can carry them; [`Members`] keeps which objects
//! carry each (for listing and counting), and names for display.
//!
//! The rule log (`Rule` with its `seq`) is the record a persistent tier must keep, and the
//! message a fan-out to other nodes would carry: sequence-numbered and idempotent.
//!
//! Dependencies: `regex-automata` (the engine under the Rust project's `regex`,
//! linear-time: a ban pattern from an API caller can't make a lookup take exponential
//! time), used directly for its `memory_usage`: pending bans are bounded by count and by
//! the memory their compiled patterns hold ([`BanLimits`]; issue 19, defect 3).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::HeaderName;
use parking_lot::{Mutex, RwLock};

use crate::hash::{fast_map, key_hash, FastMap};
use crate::object::Object;
use crate::storage::{Removal, Storage};

const TAG_SEED: u64 = 0x7472_6f76_6574_6167; // "trovetag"
const CACHE_SEED: u64 = 0x7472_6f76_6563_6163; // "trovecac"
const MEMBER_SHARDS: usize = 16;

/// The stable hash of a tag (surrogate key).
pub fn tag_hash(tag: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(tag.as_bytes(), TAG_SEED)
}

/// The stable hash of a named cache's name.
pub fn cache_hash(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), CACHE_SEED)
}

/// What a rule selects.
#[derive(Debug, Clone)]
pub enum Selector {
    /// Every variant of one URL (the key's stable hash).
    Key(u64),
    /// Every object carrying a tag or belonging to a named cache (its hash).
    Tag(u64),
    /// Every URL starting with this (normalised) prefix.
    Prefix(String),
    /// Every object a ban pattern matches.
    Ban(Arc<Ban>),
}

impl Selector {
    fn matches(&self, obj: &Object, key: &mut Option<u64>) -> bool {
        match self {
            Selector::Key(h) => *key.get_or_insert_with(|| key_hash(&obj.key)) == *h,
            Selector::Tag(h) => obj.head.labels.carries(*h),
            Selector::Prefix(p) => obj.key.starts_with(p.as_str()),
            Selector::Ban(b) => b.matches(obj),
        }
    }
}

/// Hard: the objects are gone. Soft: they are stale, so stale-while-revalidate and
/// stale-if-error still apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Hard,
    Soft,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Hard => "hard",
            Mode::Soft => "soft",
        }
    }
}

/// One invalidation: sequence-numbered, idempotent to apply again.
#[derive(Debug, Clone)]
pub struct Rule {
    pub seq: u64,
    pub selector: Selector,
    pub mode: Mode,
    /// When it was made (soft staleness counts from here).
    pub at: SystemTime,
}

/// An object's standing against the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Alive,
    /// Soft-invalidated at `since`: stale from then on.
    Stale {
        since: SystemTime,
    },
    /// Hard-invalidated: never serve it.
    Dead,
}

/// What a ban pattern looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BanSubject {
    /// The normalised URL (the cache key).
    Url,
    /// A stored response header field.
    Header(HeaderName),
}

/// How a ban pattern compares.
#[derive(Debug, Clone)]
pub enum BanOp {
    Equals(String),
    Prefix(String),
    /// The pattern as written, and its compiled form.
    Regex(Arc<str>, regex_automata::meta::Regex),
}

/// A ban: every stored object whose subject the operator matches.
#[derive(Debug, Clone)]
pub struct Ban {
    pub subject: BanSubject,
    pub op: BanOp,
    /// Bytes the ban holds (its compiled pattern and the matching caches it may grow),
    /// charged against [`BanLimits::bytes`] while it is pending.
    pub cost: u64,
}

/// Why a ban pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BanError {
    #[error("unknown ban subject {0:?} (use \"url\" or \"header:NAME\")")]
    Subject(String),
    #[error("unknown ban operator {0:?} (use \"==\", \"^=\" or \"~\")")]
    Operator(String),
    #[error("invalid regular expression: {0}")]
    Regex(String),
    #[error("ban pattern longer than {0} bytes")]
    TooLong(usize),
    /// Past the bound on pending bans: nothing is recorded.
    #[error(
        "too many pending bans ({count} holding {bytes} bytes; at most {max_count} and \
         {max_bytes} bytes): wait until sweeps retire some, or ban by prefix or tag"
    )]
    TooMany {
        count: u64,
        bytes: u64,
        max_count: u64,
        max_bytes: u64,
    },
}

/// The longest ban pattern accepted (a regex's compiled size is bounded too).
pub const MAX_BAN_PATTERN: usize = 1024;

/// The most heap one compiled ban pattern may take (each of its forward and reverse
/// automata; `regex`'s own default is 10 MiB). Unicode classes are large: `\w{20}` takes
/// about 1 MiB, `(?-u:\w){20}` a few KiB.
pub const MAX_BAN_COMPILED: usize = 1 << 20;

/// The lazy DFA cache each matching thread may grow per ban pattern.
const BAN_DFA_CACHE: usize = 64 << 10;

/// The bound on pending bans (rules not yet retired): their number, and the bytes their
/// compiled patterns hold ([`Ban::cost`]). A ban past either is refused
/// ([`BanError::TooMany`]). Defaults: 10,000 bans, 64 MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BanLimits {
    pub count: u64,
    pub bytes: u64,
}

impl Default for BanLimits {
    fn default() -> Self {
        BanLimits {
            count: 10_000,
            bytes: 64 << 20,
        }
    }
}

impl Ban {
    /// Parses `subject` (`url`, `header:NAME`), `op` (`==`, `^=`, `~`) and `value`.
    pub fn parse(subject: &str, op: &str, value: &str) -> Result<Ban, BanError> {
        if value.len() > MAX_BAN_PATTERN {
            return Err(BanError::TooLong(MAX_BAN_PATTERN));
        }
        let subject = if subject.eq_ignore_ascii_case("url") {
            BanSubject::Url
        } else if let Some(name) = subject
            .strip_prefix("header:")
            .or_else(|| subject.strip_prefix("obj.http."))
        {
            BanSubject::Header(
                HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|_| BanError::Subject(subject.to_string()))?,
            )
        } else {
            return Err(BanError::Subject(subject.to_string()));
        };
        let op = match op {
            "==" => BanOp::Equals(value.to_string()),
            "^=" => BanOp::Prefix(value.to_string()),
            "~" => {
                use regex_automata::meta;
                let config = meta::Config::new()
                    .nfa_size_limit(Some(MAX_BAN_COMPILED))
                    .onepass_size_limit(Some(MAX_BAN_COMPILED))
                    .dfa_size_limit(Some(MAX_BAN_COMPILED))
                    .hybrid_cache_capacity(BAN_DFA_CACHE);
                let re = meta::Regex::builder()
                    .configure(config)
                    .build(value)
                    .map_err(|e| match e.size_limit() {
                        Some(limit) => BanError::Regex(format!(
                            "the pattern compiles to more than {limit} bytes (Unicode \
                             classes such as \\w are large: try (?-u:\\w), or a prefix)"
                        )),
                        None => BanError::Regex(e.to_string()),
                    })?;
                BanOp::Regex(value.into(), re)
            }
            other => return Err(BanError::Operator(other.to_string())),
        };
        let base = (std::mem::size_of::<Ban>() + value.len()) as u64;
        let cost = match &op {
            // The compiled pattern, and the caches a match grows: the lazy DFA's (forward
            // and reverse) and about as much again for the other engines'.
            BanOp::Regex(_, re) => base + re.memory_usage() as u64 + 4 * BAN_DFA_CACHE as u64,
            _ => base,
        };
        Ok(Ban { subject, op, cost })
    }

    /// The pattern as written (`url ~ ^http://a/`).
    pub fn describe(&self) -> String {
        let subject = match &self.subject {
            BanSubject::Url => "url".to_string(),
            BanSubject::Header(h) => format!("header:{h}"),
        };
        let (op, v) = match &self.op {
            BanOp::Equals(v) => ("==", v.as_str()),
            BanOp::Prefix(v) => ("^=", v.as_str()),
            BanOp::Regex(r, _) => ("~", &**r),
        };
        format!("{subject} {op} {v}")
    }

    /// The pattern's three parts as [`Ban::parse`] takes them (subject, operator, value):
    /// what a persisted rule stores.
    pub fn parts(&self) -> (String, &'static str, &str) {
        let subject = match &self.subject {
            BanSubject::Url => "url".to_string(),
            BanSubject::Header(h) => format!("header:{h}"),
        };
        match &self.op {
            BanOp::Equals(v) => (subject, "==", v.as_str()),
            BanOp::Prefix(v) => (subject, "^=", v.as_str()),
            BanOp::Regex(r, _) => (subject, "~", &**r),
        }
    }

    fn test(&self, s: &str) -> bool {
        match &self.op {
            BanOp::Equals(v) => s == v,
            BanOp::Prefix(v) => s.starts_with(v.as_str()),
            BanOp::Regex(_, r) => r.is_match(s),
        }
    }

    /// True when the ban covers `obj`.
    pub fn matches(&self, obj: &Object) -> bool {
        match &self.subject {
            BanSubject::Url => self.test(&obj.key),
            BanSubject::Header(h) => obj
                .head
                .headers
                .get_all(h)
                .iter()
                .any(|v| v.to_str().is_ok_and(|s| self.test(s))),
        }
    }
}

/// Where the rule log is made durable (a disk tier's journal, `trove_disk`): an
/// acknowledged invalidation must survive a crash as long as objects it covers do.
///
/// [`Journal::append`] calls come in sequence order under the log's lock, so they must be
/// quick (no I/O: a copy into a buffer). The durable calls never run under it:
/// [`Journal::reserve`] runs on the rule log's own reserver thread, ahead of need,
/// [`Journal::sync_through`] where the acknowledging caller runs it (the proxy's blocking
/// pool), [`Journal::compact`] in the background sweep, with the log unlocked.
pub trait Journal: Send + Sync {
    /// Appends `rule` (not yet written or durable). Errors are kept and reported by
    /// [`Journal::sync_through`].
    fn append(&self, rule: &Rule);
    /// Makes durable that no sequence number up to `upto` will be handed out again after
    /// a restart (objects are stamped with numbers that may never reach the journal as a
    /// rule: puts' rules are not waited for).
    fn reserve(&self, upto: u64) -> std::io::Result<()>;
    /// Returns once every rule up to `seq` appended so far is durable (`fdatasync`;
    /// concurrent callers share one).
    fn sync_through(&self, seq: u64) -> std::io::Result<()>;
    /// Rules were retired: keep only the rules of `snapshot()`'s state (rewrite the journal
    /// without the rest), and every rule appended after it was taken (those above
    /// [`Snapshot::through`]). Call `snapshot` (it read-locks the rule log briefly) once no
    /// write can reach the old journal, and never hold a lock the log's users need across
    /// the rewrite.
    fn compact(&self, snapshot: &dyn Fn() -> Snapshot) -> std::io::Result<()>;
    /// Makes durable where this cache stands in a feed of invalidations it applies from
    /// elsewhere (a cluster's bus), once every rule made from the feed up to there is
    /// durable ([`Journal::sync_through`]). Blocking. A journal that keeps none says so.
    fn keep_feed_position(&self, position: FeedPosition) -> std::io::Result<()> {
        let _ = position;
        Err(std::io::Error::other("this journal keeps no feed position"))
    }
    /// The position [`Journal::keep_feed_position`] last made durable (across restarts).
    fn feed_position(&self) -> Option<FeedPosition> {
        None
    }
}

/// Where a cache stands in a feed of invalidations made on other nodes (a cluster's bus):
/// every message up to `seq` of the feed's incarnation `epoch` has been applied, and the
/// rules made from them are durable. After a restart the node reads the feed on from there
/// before it serves a hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedPosition {
    pub epoch: u64,
    pub seq: u64,
}

/// The persistent part of the rule log: what a journal keeps and gives back at start-up.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every sequence number up to this one may have been handed out.
    pub reserved: u64,
    /// The newest retired rule.
    pub floor: u64,
    /// Pending rules, in sequence order (URL rules as [`Selector::Key`] rules).
    pub rules: Vec<Rule>,
    /// Every rule up to this one made before the snapshot was taken is in `rules` (or
    /// retired); later ones may be appended meanwhile.
    pub through: u64,
}

/// Sequence numbers reserved at a time (one durable journal write per this many rules).
pub const RESERVE_BLOCK: u64 = 4096;

struct Log {
    /// The next sequence number.
    next: u64,
    /// Sequence numbers up to this one are reserved in the journal (`u64::MAX` without one).
    reserved: u64,
    /// The newest retired rule: an object never checked against rules this old is dead.
    floor: u64,
    /// Tag, prefix and ban rules, in sequence order.
    rules: VecDeque<Arc<Rule>>,
    /// URL rules by key hash, the newest per key and mode: a lookup probes this once
    /// instead of walking every purged URL (puts and PURGEs make many).
    keys: FastMap<u64, KeyMarks>,
    /// Pending bans in `rules`, and the sum of their [`Ban::cost`].
    bans: u64,
    ban_bytes: u64,
}

impl Log {
    fn push_rule(&mut self, rule: Arc<Rule>) {
        if let Selector::Ban(b) = &rule.selector {
            self.bans += 1;
            self.ban_bytes += b.cost;
        }
        self.rules.push_back(rule);
    }

    fn pop_rule(&mut self) {
        if let Some(rule) = self.rules.pop_front() {
            if let Selector::Ban(b) = &rule.selector {
                self.bans -= 1;
                self.ban_bytes -= b.cost;
            }
        }
    }
}

/// The newest URL rules for one key.
#[derive(Debug, Clone, Copy)]
struct KeyMarks {
    hard: u64,
    soft: u64,
    soft_at: SystemTime,
    /// When the newest of them was made (it is retired after that).
    at: SystemTime,
}

/// Object id → object, for the objects carrying one tag.
type Carriers = FastMap<u64, Arc<Object>>;

/// Which objects carry each tag and named cache, and their names.
struct Members {
    shards: Vec<Mutex<FastMap<u64, Carriers>>>,
    names: Mutex<FastMap<u64, Arc<str>>>,
    /// What the index holds beyond each object's own memberships (those are in
    /// `Object::charge`): per distinct tag its map, per name its bytes. The memory tier
    /// counts it against its budget (issue 19, defect 4).
    bytes: AtomicU64,
}

/// Bytes one distinct tag's entry in the index costs (its map of carriers, the outer
/// map's slot): charged in [`Invalidations::index_bytes`].
const TAG_ENTRY_COST: u64 = 128;

/// Bytes one remembered name costs besides its text (the `Arc<str>` header, the map slot).
const NAME_COST: u64 = 48;

/// The invalidation state of a store: the rule log and the tag index. Shared by the tiers
/// of one cache (`Arc` it).
pub struct Invalidations {
    /// The newest rule's sequence number (0: none yet).
    last: AtomicU64,
    /// Where rules are made durable, if anywhere (a disk tier).
    journal: std::sync::OnceLock<Arc<dyn Journal>>,
    /// Reserves sequence numbers in the journal ahead of need, on a thread of its own.
    reserver: std::sync::OnceLock<Arc<Reserver>>,
    log: Arc<RwLock<Log>>,
    members: Members,
    /// Rules retired by sweeps, for the status figures.
    retired: AtomicU64,
    /// Every stored object has been checked against the rules up to this one.
    swept: AtomicU64,
    ban_limits: RwLock<BanLimits>,
}

impl std::fmt::Debug for Invalidations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invalidations")
            .field("last", &self.current())
            .field("pending", &self.pending())
            .finish()
    }
}

impl Default for Invalidations {
    fn default() -> Self {
        Invalidations::new()
    }
}

/// Counts for the status figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InvalidationStats {
    /// The newest sequence number.
    pub seq: u64,
    /// Rules not yet retired.
    pub pending: u64,
    /// Of those, bans.
    pub bans: u64,
    /// Bytes the pending bans hold ([`Ban::cost`]).
    pub ban_bytes: u64,
    pub retired: u64,
    /// Distinct tags and named caches with members.
    pub tags: u64,
    /// (object, tag) memberships.
    pub memberships: u64,
}

/// Reserves sequence numbers in the journal ahead of need, on a thread of its own, so no
/// sync runs under the rule log's lock or on the thread that adds a rule (see
/// [`Invalidations::add`]).
struct Reserver {
    state: Mutex<ReserveState>,
    changed: parking_lot::Condvar,
}

#[derive(Default)]
struct ReserveState {
    /// The highest number asked for.
    wanted: u64,
    /// The highest number reserved (or failed to be).
    done: u64,
    failed: bool,
    stop: bool,
}

impl Reserver {
    fn start(journal: Arc<dyn Journal>, log: Arc<RwLock<Log>>) -> Arc<Reserver> {
        let r = Arc::new(Reserver {
            state: Mutex::new(ReserveState::default()),
            changed: parking_lot::Condvar::new(),
        });
        let me = Arc::clone(&r);
        let started = std::thread::Builder::new()
            .name("trove-reserve".into())
            .spawn(move || me.run(&*journal, &log));
        if started.is_err() {
            // Without the thread nothing is reserved ahead: adds go on unreserved, as after
            // a failed reservation (`snapshot_of` still covers every number handed out).
            r.state.lock().failed = true;
        }
        r
    }

    fn run(&self, journal: &dyn Journal, log: &RwLock<Log>) {
        loop {
            let target = {
                let mut st = self.state.lock();
                loop {
                    if st.stop {
                        return;
                    }
                    if st.wanted > st.done && !st.failed {
                        break st.wanted;
                    }
                    self.changed.wait(&mut st);
                }
            };
            let ok = journal.reserve(target).is_ok();
            if ok {
                let mut l = log.write();
                l.reserved = l.reserved.max(target);
            }
            let mut st = self.state.lock();
            st.done = st.done.max(target);
            st.failed |= !ok;
            self.changed.notify_all();
        }
    }

    /// Asks for numbers up to `upto` to be reserved (not waiting).
    fn request(&self, upto: u64) {
        let mut st = self.state.lock();
        if upto > st.wanted {
            st.wanted = upto;
            self.changed.notify_all();
        }
    }

    /// Waits until `seq` is reserved, or reserving failed.
    fn wait_for(&self, seq: u64) {
        let mut st = self.state.lock();
        while st.done < seq && !st.failed && !st.stop {
            self.changed.wait(&mut st);
        }
    }

    fn failed(&self) -> bool {
        self.state.lock().failed
    }

    fn stop(&self) {
        self.state.lock().stop = true;
        self.changed.notify_all();
    }
}

impl Drop for Invalidations {
    fn drop(&mut self) {
        if let Some(r) = self.reserver.get() {
            r.stop();
        }
    }
}

impl Invalidations {
    pub fn new() -> Invalidations {
        Invalidations {
            last: AtomicU64::new(0),
            journal: std::sync::OnceLock::new(),
            reserver: std::sync::OnceLock::new(),
            log: Arc::new(RwLock::new(Log {
                next: 1,
                reserved: u64::MAX,
                floor: 0,
                rules: VecDeque::new(),
                keys: fast_map(),
                bans: 0,
                ban_bytes: 0,
            })),
            ban_limits: RwLock::new(BanLimits::default()),
            members: Members {
                shards: (0..MEMBER_SHARDS).map(|_| Mutex::new(fast_map())).collect(),
                names: Mutex::new(fast_map()),
                bytes: AtomicU64::new(0),
            },
            retired: AtomicU64::new(0),
            swept: AtomicU64::new(0),
        }
    }

    /// The sequence number to stamp a request sent now with (its response's `born`).
    pub fn current(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// Rules not yet retired.
    pub fn pending(&self) -> u64 {
        let log = self.log.read();
        (log.rules.len() + log.keys.len()) as u64
    }

    /// Takes up the rule log a journal kept (before any rule is made or object stored)
    /// and makes every later rule durable there. Sequence numbers go on after every one
    /// the journal reserved, so no object stamped before the restart looks newer than a
    /// rule made after it.
    pub fn attach_journal(&self, journal: Arc<dyn Journal>, restored: Snapshot) {
        {
            let mut log = self.log.write();
            let next = restored
                .rules
                .iter()
                .map(|r| r.seq)
                .max()
                .unwrap_or(0)
                .max(restored.reserved)
                .max(restored.floor)
                + 1;
            log.next = log.next.max(next);
            log.reserved = next - 1;
            log.floor = log.floor.max(restored.floor);
            let mut rules = restored.rules;
            rules.sort_by_key(|r| r.seq);
            for r in rules {
                Self::insert(&mut log, r);
            }
            self.last.store(log.next - 1, Ordering::Release);
        }
        if self.journal.set(Arc::clone(&journal)).is_err() {
            return; // Attached already.
        }
        let reserver = Reserver::start(journal, Arc::clone(&self.log));
        // The first block, before the first rule needs it.
        reserver.request(self.log.read().next - 1 + RESERVE_BLOCK);
        let _ = self.reserver.set(reserver);
    }

    /// True when rules are made durable in a journal (see [`Invalidations::durable`]).
    pub fn journaled(&self) -> bool {
        self.journal.get().is_some()
    }

    /// Returns once rule `seq` is durable (at once without a journal): what an
    /// acknowledgement waits for. Blocking (an `fdatasync`): call it off the async runtime.
    pub fn durable(&self, seq: u64) -> std::io::Result<()> {
        match self.journal.get() {
            Some(j) => j.sync_through(seq),
            None => Ok(()),
        }
    }

    /// Where this cache stood in the feed of other nodes' invalidations when the journal
    /// last kept it ([`Invalidations::keep_feed_position`]); `None` without a journal (a
    /// memory-only cache starts empty, so it has nothing to catch up on) or before the
    /// first.
    pub fn feed_position(&self) -> Option<FeedPosition> {
        self.journal.get().and_then(|j| j.feed_position())
    }

    /// Makes `position` durable, after the rules made from the feed up to it
    /// ([`Invalidations::durable`]). Without a journal there is nothing to keep. Blocking.
    pub fn keep_feed_position(&self, position: FeedPosition) -> std::io::Result<()> {
        match self.journal.get() {
            Some(j) => j.keep_feed_position(position),
            None => Ok(()),
        }
    }

    /// The persistent state: pending rules, the floor, the reservation.
    pub fn snapshot(&self) -> Snapshot {
        let log = self.log.read();
        Self::snapshot_of(&log)
    }

    fn snapshot_of(log: &Log) -> Snapshot {
        let mut rules: Vec<Rule> = log.rules.iter().map(|r| (**r).clone()).collect();
        for (h, m) in &log.keys {
            if m.hard > 0 {
                rules.push(Rule {
                    seq: m.hard,
                    selector: Selector::Key(*h),
                    mode: Mode::Hard,
                    at: m.at,
                });
            }
            if m.soft > 0 {
                rules.push(Rule {
                    seq: m.soft,
                    selector: Selector::Key(*h),
                    mode: Mode::Soft,
                    at: m.soft_at,
                });
            }
        }
        rules.sort_by_key(|r| r.seq);
        Snapshot {
            // Every number handed out is covered, reserved or not (a failed reservation).
            reserved: match log.reserved {
                u64::MAX => log.next - 1,
                r => r.max(log.next - 1),
            },
            floor: log.floor,
            rules,
            through: log.next - 1,
        }
    }

    fn insert(log: &mut Log, rule: Rule) {
        let Rule {
            seq,
            selector,
            mode,
            at,
        } = rule;
        if let Selector::Key(h) = selector {
            let m = log.keys.entry(h).or_insert(KeyMarks {
                hard: 0,
                soft: 0,
                soft_at: at,
                at,
            });
            match mode {
                Mode::Hard => m.hard = m.hard.max(seq),
                Mode::Soft => {
                    if seq > m.soft {
                        m.soft = seq;
                        m.soft_at = at;
                    }
                }
            }
            m.at = m.at.max(at);
        } else {
            log.push_rule(Arc::new(Rule {
                seq,
                selector,
                mode,
                at,
            }));
        }
    }

    /// Sets the bound on pending bans (bans already pending stay).
    pub fn set_ban_limits(&self, limits: BanLimits) {
        *self.ban_limits.write() = limits;
    }

    /// Records a ban as [`Invalidations::add`] does, unless pending bans are at their bound
    /// ([`BanLimits`]): then nothing is recorded and the error says why.
    pub fn add_ban(&self, ban: Ban, mode: Mode, at: SystemTime) -> Result<u64, BanError> {
        let limits = *self.ban_limits.read();
        let mut log = self.reserved_log();
        if log.bans + 1 > limits.count || log.ban_bytes.saturating_add(ban.cost) > limits.bytes {
            return Err(BanError::TooMany {
                count: log.bans,
                bytes: log.ban_bytes,
                max_count: limits.count,
                max_bytes: limits.bytes,
            });
        }
        Ok(self.add_locked(&mut log, Selector::Ban(Arc::new(ban)), mode, at))
    }

    /// Records an invalidation; returns its sequence number. Constant time (with a
    /// journal, a copy into its buffer too; see [`Invalidations::durable`] for the
    /// acknowledgement).
    pub fn add(&self, selector: Selector, mode: Mode, at: SystemTime) -> u64 {
        let mut log = self.reserved_log();
        self.add_locked(&mut log, selector, mode, at)
    }

    /// The log, write-locked, once its next sequence number is reserved in the journal (if
    /// any). The reservation is made on the reserver's thread, never under the lock: a
    /// block ahead of need, so this waits only when rules outrun it (more than half a
    /// block within one sync), and then without the lock, so lookups go on. A failed
    /// reservation is waited for no more (`durable` reports the failure).
    fn reserved_log(&self) -> parking_lot::RwLockWriteGuard<'_, Log> {
        loop {
            let log = self.log.write();
            let Some(r) = self.reserver.get() else {
                return log;
            };
            if log.next <= log.reserved || r.failed() {
                if log.next.saturating_add(RESERVE_BLOCK / 2) > log.reserved {
                    r.request(log.reserved.max(log.next).saturating_add(RESERVE_BLOCK));
                }
                return log;
            }
            let need = log.next;
            drop(log);
            r.request(need + RESERVE_BLOCK);
            r.wait_for(need);
        }
    }

    fn add_locked(&self, log: &mut Log, selector: Selector, mode: Mode, at: SystemTime) -> u64 {
        let seq = log.next;
        log.next += 1;
        if let Some(j) = self.journal.get() {
            j.append(&Rule {
                seq,
                selector: selector.clone(),
                mode,
                at,
            });
        }
        if let Selector::Key(h) = selector {
            let m = log.keys.entry(h).or_insert(KeyMarks {
                hard: 0,
                soft: 0,
                soft_at: at,
                at,
            });
            match mode {
                Mode::Hard => m.hard = seq,
                Mode::Soft => {
                    m.soft = seq;
                    m.soft_at = at;
                }
            }
            m.at = at;
        } else {
            log.push_rule(Arc::new(Rule {
                seq,
                selector,
                mode,
                at,
            }));
        }
        // Published under the lock, so a reader that sees `last` finds the rule.
        self.last.store(seq, Ordering::Release);
        seq
    }

    /// Pending rules, oldest first (bans only with `bans_only`), at most `limit`.
    pub fn rules(&self, bans_only: bool, limit: usize) -> Vec<Arc<Rule>> {
        self.log
            .read()
            .rules
            .iter()
            .filter(|r| !bans_only || matches!(r.selector, Selector::Ban(_)))
            .take(limit)
            .cloned()
            .collect()
    }

    /// `obj`'s standing against every rule made since the request that produced it was
    /// sent. Costs an atomic load when no rule is newer than what `obj` was last checked
    /// against; otherwise each newer rule is tested once.
    pub fn verdict(&self, obj: &Object) -> Verdict {
        self.verdict_through(obj, u64::MAX)
    }

    /// `obj`'s standing against the rules made since the request that produced it was sent
    /// up to the one numbered `upto`: what a pass that began when `upto` was the latest
    /// ([`Invalidations::current`]) judges, whatever is made while it runs (the next pass's
    /// work), so what it removes depends on where it began, not on how long it took.
    pub fn verdict_through(&self, obj: &Object, upto: u64) -> Verdict {
        let l = &obj.head.labels;
        let last = self.last.load(Ordering::Acquire).min(upto);
        let seen = l.born.max(l.checked.load(Ordering::Relaxed));
        if seen < last && self.check(obj, seen, upto) {
            return Verdict::Dead;
        }
        let soft = l.soft.load(Ordering::Relaxed);
        if soft > l.born {
            let since =
                SystemTime::UNIX_EPOCH + Duration::from_millis(l.soft_at.load(Ordering::Relaxed));
            Verdict::Stale { since }
        } else {
            Verdict::Alive
        }
    }

    /// Tests `obj` against the rules after `seen` through `upto`; true when one kills it.
    fn check(&self, obj: &Object, seen: u64, upto: u64) -> bool {
        let l = &obj.head.labels;
        let log = self.log.read();
        if seen < log.floor {
            // Rules it was never checked against are retired: it can only be a response to
            // a request sent before them that took longer than any fetch may.
            return true;
        }
        let soft = |seq: u64, at: SystemTime| {
            if l.soft.fetch_max(seq, Ordering::Relaxed) < seq {
                let ms = at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis() as u64;
                l.soft_at.store(ms, Ordering::Relaxed);
            }
        };
        let mut key = None;
        if !log.keys.is_empty() {
            let h = *key.get_or_insert_with(|| key_hash(&obj.key));
            if let Some(m) = log.keys.get(&h) {
                // A key keeps only its latest rule of each mode: one made past `upto`
                // hides any before it, left to the next pass.
                if m.hard > seen && m.hard <= upto {
                    return true;
                }
                if m.soft > seen && m.soft <= upto {
                    soft(m.soft, m.soft_at);
                }
            }
        }
        let from = log.rules.partition_point(|r| r.seq <= seen);
        let to = log.rules.partition_point(|r| r.seq <= upto);
        for r in log.rules.range(from..to.max(from)) {
            if !r.selector.matches(obj, &mut key) {
                continue;
            }
            match r.mode {
                Mode::Hard => return true,
                Mode::Soft => soft(r.seq, r.at),
            }
        }
        // Every rule made so far is in `log` (rules are added under its lock).
        l.checked
            .fetch_max((log.next - 1).min(upto), Ordering::Relaxed);
        false
    }

    /// When rules were made since the last pass, a pass over `store`: every object is
    /// judged (the dead removed). Then rules older than `retire_before` that every object
    /// has been checked against are retired. Runs off the request path; a pass costs time
    /// in proportion to the store.
    pub fn sweep(&self, store: &dyn Storage, retire_before: SystemTime) -> SweepReport {
        let upto = self.current();
        let mut report = SweepReport::default();
        if upto > self.swept.load(Ordering::Acquire) {
            store.scan(&mut |obj: &Arc<Object>| {
                report.checked += 1;
                if self.verdict(obj) == Verdict::Dead && store.remove_object(obj, Removal::Purged) {
                    report.removed += 1;
                }
            });
            if store.scans() {
                report.whole = true;
                self.swept.fetch_max(upto, Ordering::AcqRel);
            }
        }
        // Objects stored after the pass were checked as they entered (the fill's check after
        // its insert) or are younger than these rules.
        let swept = self.swept.load(Ordering::Acquire);
        {
            let mut log = self.log.write();
            let mut floor = log.floor;
            while let Some(r) = log.rules.front() {
                if r.seq > swept || r.at >= retire_before {
                    break;
                }
                floor = floor.max(r.seq);
                log.pop_rule();
                report.retired += 1;
            }
            let before = log.keys.len();
            log.keys.retain(|_, m| {
                let newest = m.hard.max(m.soft);
                let keep = newest > swept || m.at >= retire_before;
                if !keep {
                    floor = floor.max(newest);
                }
                keep
            });
            report.retired += (before - log.keys.len()) as u64;
            log.floor = floor;
        }
        if report.retired > 0 {
            if let Some(j) = self.journal.get() {
                // The snapshot under the read lock, the rewrite (a sync) without it: rules
                // appended meanwhile are above `through`, and the journal keeps them. A
                // failure (the journal logs it) leaves the longer journal, still right.
                let _ = j.compact(&|| Self::snapshot_of(&self.log.read()));
            }
        }
        self.retired.fetch_add(report.retired, Ordering::Relaxed);
        report
    }

    /// `obj` entered the store: index its tags and named cache.
    pub fn added(&self, obj: &Arc<Object>) {
        let l = &obj.head.labels;
        if l.is_empty() {
            return;
        }
        for h in l.tags.iter().chain(l.cache.iter()) {
            let mut shard = self.members.shards[*h as usize % MEMBER_SHARDS].lock();
            let carriers = shard.entry(*h).or_insert_with(|| {
                self.members
                    .bytes
                    .fetch_add(TAG_ENTRY_COST, Ordering::Relaxed);
                fast_map()
            });
            carriers.insert(obj.id(), Arc::clone(obj));
        }
    }

    /// Bytes the tag index holds besides what each object is charged for its own
    /// memberships: distinct tags' entries and the names remembered for listings.
    pub fn index_bytes(&self) -> u64 {
        self.members.bytes.load(Ordering::Relaxed)
    }

    /// `obj` left the store.
    pub fn removed(&self, obj: &Object) {
        let l = &obj.head.labels;
        if l.is_empty() {
            return;
        }
        for h in l.tags.iter().chain(l.cache.iter()) {
            let mut shard = self.members.shards[*h as usize % MEMBER_SHARDS].lock();
            if let Some(m) = shard.get_mut(h) {
                m.remove(&obj.id());
                if m.is_empty() {
                    shard.remove(h);
                    drop(shard);
                    let mut freed = TAG_ENTRY_COST;
                    if let Some(name) = self.members.names.lock().remove(h) {
                        freed += name.len() as u64 + NAME_COST;
                    }
                    self.members.bytes.fetch_sub(freed, Ordering::Relaxed);
                }
            }
        }
    }

    /// Remembers the name behind a tag or cache hash, for listings, while some stored
    /// object carries it (a name nothing carries would never be forgotten).
    pub fn name(&self, h: u64, name: &str) {
        // The shard's lock is held across the insert, so a `removed` that empties the tag
        // meanwhile either runs before (no carriers: nothing remembered) or after (it
        // forgets the name).
        let shard = self.members.shards[h as usize % MEMBER_SHARDS].lock();
        if shard.get(&h).is_none_or(|m| m.is_empty()) {
            return;
        }
        self.remember(h, name);
        drop(shard);
    }

    /// Remembers the name of a named cache (from the configuration: a bounded set), even
    /// before an object of it is stored.
    pub fn cache_name(&self, h: u64, name: &str) {
        self.remember(h, name);
    }

    fn remember(&self, h: u64, name: &str) {
        self.members.names.lock().entry(h).or_insert_with(|| {
            self.members
                .bytes
                .fetch_add(name.len() as u64 + NAME_COST, Ordering::Relaxed);
            Arc::from(name)
        });
    }

    /// The name behind a hash, if known.
    pub fn name_of(&self, h: u64) -> Option<Arc<str>> {
        self.members.names.lock().get(&h).cloned()
    }

    /// The objects carrying tag or cache hash `h` (at most `limit`) and how many there are,
    /// the dead left out.
    pub fn members(&self, h: u64, limit: usize) -> (u64, Vec<Arc<Object>>) {
        let all: Vec<Arc<Object>> = self.members.shards[h as usize % MEMBER_SHARDS]
            .lock()
            .get(&h)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let live: Vec<Arc<Object>> = all
            .into_iter()
            .filter(|o| self.verdict(o) != Verdict::Dead)
            .collect();
        let n = live.len() as u64;
        (n, live.into_iter().take(limit).collect())
    }

    pub fn stats(&self) -> InvalidationStats {
        let (pending, bans, ban_bytes) = {
            let log = self.log.read();
            (
                (log.rules.len() + log.keys.len()) as u64,
                log.bans,
                log.ban_bytes,
            )
        };
        let (mut tags, mut memberships) = (0u64, 0u64);
        for s in &self.members.shards {
            let s = s.lock();
            tags += s.len() as u64;
            memberships += s.values().map(|m| m.len() as u64).sum::<u64>();
        }
        InvalidationStats {
            seq: self.current(),
            pending,
            bans,
            ban_bytes,
            retired: self.retired.load(Ordering::Relaxed),
            tags,
            memberships,
        }
    }
}

/// What one [`Invalidations::sweep`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub checked: u64,
    pub removed: u64,
    pub retired: u64,
    /// This sweep scanned the store and the scan covered all of it ([`Storage::scans`]):
    /// with a disk tier, it passed over the disk. False for a sweep that scanned nothing
    /// (no rule since the last), whatever an earlier scan covered.
    pub whole: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Body;
    use crate::labels::Labels;
    use crate::object::ObjectHead;
    use crate::{EvictionKind, MemoryStore};
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};

    fn obj(key: &str, tags: &[&str], born: u64) -> Object {
        let mut headers = HeaderMap::new();
        headers.insert("x-kind", "page".parse().unwrap());
        Object::new(
            key.into(),
            String::new(),
            ObjectHead {
                status: StatusCode::OK,
                headers,
                request_headers: HeaderMap::new(),
                request_time: SystemTime::UNIX_EPOCH,
                response_time: SystemTime::UNIX_EPOCH,
                prepared: Default::default(),
                labels: Labels::new(tags.iter().map(|t| tag_hash(t)).collect(), None, born),
            },
            Body::complete(Bytes::from_static(b"x")),
        )
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn a_rule_kills_only_what_it_selects_and_only_older_objects() {
        let inv = Invalidations::new();
        let a = obj("http://h/a", &["x"], inv.current());
        let b = obj("http://h/b", &["y"], inv.current());
        inv.add(Selector::Tag(tag_hash("x")), Mode::Hard, t(10));
        assert_eq!(inv.verdict(&a), Verdict::Dead);
        assert_eq!(inv.verdict(&b), Verdict::Alive);
        let newer = obj("http://h/a", &["x"], inv.current());
        assert_eq!(inv.verdict(&newer), Verdict::Alive, "born after the rule");
    }

    /// A disk pass judges by the rules made before it began: one made while it runs (a
    /// prefix rule, or a URL's second rule) is left to the next pass, and the object is
    /// judged again then from where the pass left it.
    #[test]
    fn a_judgement_through_a_rule_ignores_the_rules_after_it() {
        let inv = Invalidations::new();
        let a = obj("http://h/a", &[], inv.current());
        let b = obj("http://h/b", &[], inv.current());
        inv.add(Selector::Key(key_hash("http://h/b")), Mode::Hard, t(1));
        let upto = inv.current();
        inv.add(Selector::Prefix("http://h/a".into()), Mode::Hard, t(2));
        inv.add(Selector::Key(key_hash("http://h/b")), Mode::Soft, t(3));
        assert_eq!(inv.verdict_through(&a, upto), Verdict::Alive);
        assert_eq!(inv.verdict_through(&b, upto), Verdict::Dead);
        // `a` was checked through `upto` only: the later rule still reaches it.
        assert_eq!(inv.verdict(&a), Verdict::Dead);
        // A key whose latest rule is past `upto` hides its earlier one until then.
        let c = obj("http://h/c", &[], inv.current());
        inv.add(Selector::Key(key_hash("http://h/c")), Mode::Hard, t(4));
        let upto = inv.current();
        inv.add(Selector::Key(key_hash("http://h/c")), Mode::Hard, t(5));
        assert_eq!(inv.verdict_through(&c, upto), Verdict::Alive);
        assert_eq!(inv.verdict(&c), Verdict::Dead);
    }

    #[test]
    fn soft_rules_make_stale_until_reborn() {
        let inv = Invalidations::new();
        let a = obj("http://h/a", &[], inv.current());
        inv.add(Selector::Prefix("http://h/".into()), Mode::Soft, t(10));
        assert_eq!(inv.verdict(&a), Verdict::Stale { since: t(10) });
        assert_eq!(inv.verdict(&a), Verdict::Stale { since: t(10) }, "kept");
        let mut fresh = obj("http://h/a", &[], 0);
        fresh.head.labels = a.head.labels.reborn(inv.current());
        assert_eq!(inv.verdict(&fresh), Verdict::Alive);
    }

    #[test]
    fn bans_match_url_and_headers_and_refuse_bad_patterns() {
        let inv = Invalidations::new();
        let a = obj("http://h/img/1.png", &[], 0);
        let b = obj("http://h/doc", &[], 0);
        let ban = Ban::parse("url", "~", r"\.png$").unwrap();
        inv.add(Selector::Ban(Arc::new(ban)), Mode::Hard, t(1));
        assert_eq!(inv.verdict(&a), Verdict::Dead);
        assert_eq!(inv.verdict(&b), Verdict::Alive);
        let hb = Ban::parse("header:X-Kind", "==", "page").unwrap();
        assert!(hb.matches(&b));
        assert!(matches!(
            Ban::parse("url", "~", "(unclosed"),
            Err(BanError::Regex(_))
        ));
        assert!(matches!(
            Ban::parse("cookie", "~", "x"),
            Err(BanError::Subject(_))
        ));
        assert!(matches!(
            Ban::parse("url", "=~", "x"),
            Err(BanError::Operator(_))
        ));
    }

    #[test]
    fn a_checked_object_is_not_tested_again() {
        let inv = Invalidations::new();
        let a = obj("http://h/a", &[], 0);
        for i in 0..1000 {
            inv.add(
                Selector::Key(key_hash(&format!("http://h/{i}"))),
                Mode::Hard,
                t(1),
            );
        }
        assert_eq!(inv.verdict(&a), Verdict::Alive);
        assert_eq!(a.head.labels.checked.load(Ordering::Relaxed), inv.current());
    }

    #[test]
    fn sweeps_remove_the_dead_and_retire_rules() {
        let store = MemoryStore::new(1 << 20, 4, 1 << 20, EvictionKind::Lru);
        let inv = store.invalidations().unwrap().clone();
        for i in 0..20 {
            let tag = if i % 2 == 0 { "even" } else { "odd" };
            store
                .insert(obj(&format!("http://h/{i}"), &[tag], inv.current()))
                .unwrap();
        }
        assert_eq!(inv.members(tag_hash("even"), 100).0, 10);
        inv.add(Selector::Tag(tag_hash("even")), Mode::Hard, t(1));
        assert_eq!(inv.members(tag_hash("even"), 100).0, 0, "dead left out");
        let r = inv.sweep(&store, t(2));
        assert_eq!((r.checked, r.removed, r.retired), (20, 10, 1));
        assert!(r.whole, "a memory store's scan covers it all");
        assert_eq!(store.stats().objects, 10);
        assert_eq!(inv.stats().memberships, 10);
        assert_eq!(inv.pending(), 0);
        // No rule since: nothing scanned, and the report does not claim a whole scan
        // (the trace's `whole`), though the store's last scan was.
        let again = inv.sweep(&store, t(2));
        assert_eq!(again.checked, 0);
        assert!(store.scans());
        assert!(
            !again.whole,
            "a sweep that scanned nothing passed over nothing"
        );
        // An object sent before the retired rule and never checked is taken as dead.
        assert_eq!(inv.verdict(&obj("http://h/late", &[], 0)), Verdict::Dead);
    }

    /// Issue 19, defect 3: pending bans are bounded by count and by the bytes their
    /// patterns hold; past either a ban is refused with a reason and nothing is recorded;
    /// a retired ban gives its bytes back.
    #[test]
    fn issue_19_bans_past_their_bound_are_refused_and_their_memory_counted() {
        let inv = Invalidations::new();
        inv.set_ban_limits(BanLimits {
            count: 3,
            bytes: u64::MAX,
        });
        let ban = |i: u32| Ban::parse("url", "~", &format!("^http://h/{i}/[a-z]+$")).unwrap();
        for i in 0..3 {
            inv.add_ban(ban(i), Mode::Hard, t(1)).unwrap();
        }
        let seq = inv.current();
        let err = inv.add_ban(ban(3), Mode::Hard, t(1)).unwrap_err();
        assert!(matches!(err, BanError::TooMany { count: 3, .. }), "{err}");
        assert!(err.to_string().contains("too many pending bans"), "{err}");
        assert_eq!(inv.current(), seq, "nothing recorded");
        let s = inv.stats();
        assert_eq!(s.bans, 3);
        assert!(s.ban_bytes >= 3 * ban(0).cost, "{s:?}");
        // By bytes: room for exactly two.
        let store = MemoryStore::new(1 << 20, 4, 1 << 20, EvictionKind::Lru);
        let inv = store.invalidations().unwrap().clone();
        inv.set_ban_limits(BanLimits {
            count: 100,
            bytes: 2 * ban(0).cost + 1,
        });
        inv.add_ban(ban(0), Mode::Hard, t(1)).unwrap();
        inv.add_ban(ban(1), Mode::Hard, t(1)).unwrap();
        assert!(inv.add_ban(ban(2), Mode::Hard, t(1)).is_err());
        // Retired by a sweep: the bytes come back.
        inv.sweep(&store, t(10));
        assert_eq!(inv.stats().ban_bytes, 0);
        assert_eq!(inv.stats().bans, 0);
        inv.add_ban(ban(2), Mode::Hard, t(11)).unwrap();
    }

    /// Issue 19, defect 3: a pattern whose automaton is too large is refused with a reason
    /// a caller can act on, not "error building NFA".
    #[test]
    fn issue_19_an_oversized_ban_pattern_says_why() {
        let err = Ban::parse("url", "~", r"\w{2000}").unwrap_err();
        assert!(err.to_string().contains("compiles to more than"), "{err}");
        assert!(Ban::parse("url", "~", r"(?-u:\w){20}").is_ok());
    }

    /// A journal whose reservations and compactions block until the test lets them go.
    #[derive(Default)]
    struct SlowJournal {
        gate: std::sync::Mutex<bool>,
        open: std::sync::Condvar,
        reserved: AtomicU64,
        /// Set while a durable call waits at the gate.
        waiting: std::sync::atomic::AtomicBool,
    }

    impl SlowJournal {
        fn wait_at_gate(&self) {
            self.waiting.store(true, Ordering::Release);
            let mut open = self.gate.lock().unwrap();
            while !*open {
                open = self.open.wait(open).unwrap();
            }
            self.waiting.store(false, Ordering::Release);
        }

        fn let_go(&self) {
            *self.gate.lock().unwrap() = true;
            self.open.notify_all();
        }

        fn until_waiting(&self) {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !self.waiting.load(Ordering::Acquire) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "never reached the journal"
                );
                std::thread::yield_now();
            }
        }
    }

    impl Journal for SlowJournal {
        fn append(&self, _rule: &Rule) {}
        fn reserve(&self, upto: u64) -> std::io::Result<()> {
            self.wait_at_gate(); // An `fdatasync` that takes its time.
            self.reserved.fetch_max(upto, Ordering::AcqRel);
            Ok(())
        }
        fn sync_through(&self, _seq: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn compact(&self, snapshot: &dyn Fn() -> Snapshot) -> std::io::Result<()> {
            let _ = snapshot();
            self.wait_at_gate();
            Ok(())
        }
    }

    /// Issue 21: the journal's reservation sync runs on the reserver's thread, never under
    /// the rule log's lock: lookups go on while it lasts, and a rule is handed its number
    /// only once that number is reserved.
    #[test]
    fn a_lookup_never_waits_for_the_journal_reservation_sync() {
        let inv = Arc::new(Invalidations::new());
        let journal = Arc::new(SlowJournal::default());
        inv.attach_journal(journal.clone(), Snapshot::default());
        journal.until_waiting(); // The first block is being reserved (and stalls).
        let adder = {
            let inv = Arc::clone(&inv);
            std::thread::spawn(move || inv.add(Selector::Tag(tag_hash("a")), Mode::Hard, t(1)))
        };
        // Lookups judge objects against the log meanwhile, at once.
        let o = obj("http://h/x", &["a"], 0);
        for _ in 0..100 {
            assert_eq!(inv.verdict(&o), Verdict::Alive);
            assert_eq!(
                inv.current(),
                0,
                "no number handed out before it is reserved"
            );
        }
        assert!(!adder.is_finished());
        journal.let_go();
        let seq = adder.join().unwrap();
        assert_eq!(seq, 1);
        assert!(journal.reserved.load(Ordering::Acquire) >= seq);
        assert_eq!(inv.verdict(&o), Verdict::Dead);
        assert!(inv.durable(seq).is_ok());
    }

    /// Issue 21: a compaction (a rewrite and a sync) runs with the rule log unlocked:
    /// lookups and new rules go on meanwhile.
    #[test]
    fn a_lookup_and_an_invalidation_never_wait_for_a_compaction() {
        let store = Arc::new(MemoryStore::new(1 << 20, 4, 1 << 20, EvictionKind::Lru));
        let inv = store.invalidations().unwrap().clone();
        let journal = Arc::new(SlowJournal::default());
        journal.let_go(); // Reservations pass; compactions are held below.
        inv.attach_journal(journal.clone(), Snapshot::default());
        inv.add(Selector::Tag(tag_hash("a")), Mode::Hard, t(1));
        *journal.gate.lock().unwrap() = false;
        let sweeper = {
            let (inv, store) = (Arc::clone(&inv), Arc::clone(&store));
            std::thread::spawn(move || inv.sweep(&*store, t(2)))
        };
        journal.until_waiting(); // Compacting, and stalled.
        let o = obj("http://h/x", &["b"], inv.current());
        assert_eq!(inv.verdict(&o), Verdict::Alive);
        let seq = inv.add(Selector::Tag(tag_hash("b")), Mode::Hard, t(3));
        assert_eq!(inv.verdict(&o), Verdict::Dead);
        assert!(!sweeper.is_finished());
        journal.let_go();
        assert_eq!(sweeper.join().unwrap().retired, 1);
        assert!(inv.durable(seq).is_ok());
    }
}
