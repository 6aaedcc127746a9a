//! What a driver and the [`Flow`](super::Flow) say to each other: [`Event`]s in,
//! [`Command`]s out, and the [`Env`] the machine may read while it decides.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderMap, HeaderValue, StatusCode};
use trove_store::{Labels, Object, ObjectHead, Refused, Removal, Storage};

use crate::decide::{Conditionals, Rules};
use crate::outcome::{Outcome, Tier};
use crate::purge::{Purge, PurgeRefused, Purged};
use crate::status::{CacheStatus, OriginFailure};

/// What the machine may read while it decides: the rules, the store (read only: its size
/// limit, its invalidation log, the variants stored for a key), the time, and how the
/// driver labels a response it is about to store.
#[derive(Clone, Copy)]
pub struct Env<'e> {
    pub rules: Rules<'e>,
    pub store: &'e dyn Storage,
    /// Now, on the driver's clock (real or virtual).
    pub now: SystemTime,
    /// What the cache adds to `Via`.
    pub via: &'e HeaderValue,
    pub labeler: &'e dyn Labeler,
}

/// How a response about to be stored is labelled (tags, named cache, invalidation stamp).
/// The proxy takes tags from the origin's fields (and may strip those fields); the
/// simulator keeps none. Labelling is bookkeeping the invalidation rules read later, not a
/// decision about this request.
pub trait Labeler {
    /// The labels for a response whose cleaned fields are `headers`, fetched by a request
    /// sent when the invalidation sequence number was `born`; the tag names travel with the
    /// [`Command::Insert`] so the driver can name them once the object is stored.
    fn label(&self, headers: &mut HeaderMap, born: u64) -> (Labels, Vec<String>);
}

/// A labeler for a store without tags or named caches: only the stamp.
pub struct Unlabelled;

impl Labeler for Unlabelled {
    fn label(&self, _: &mut HeaderMap, born: u64) -> (Labels, Vec<String>) {
        (Labels::default().reborn(born), Vec::new())
    }
}

/// An origin's answer as the machine needs it: its head. The body stays with the driver,
/// which later fills a stored object from it ([`Serve::fill`], [`Command::Fill`],
/// [`Command::FillAndWait`]), sends it on ([`Command::Forward`]) or drops it
/// ([`Command::Discard`]).
#[derive(Debug)]
pub struct Answer<'e> {
    pub status: StatusCode,
    /// As the origin sent them (the machine cleans them).
    pub headers: Fields<'e>,
    /// The body's length as framed (`None` while unknown).
    pub content_length: Option<u64>,
    pub request_time: SystemTime,
    pub response_time: SystemTime,
}

/// An answer's header fields as the driver hands them over.
#[derive(Debug)]
pub enum Fields<'e> {
    /// Lent: the machine copies what it keeps of them.
    Lent(&'e HeaderMap),
    /// Given up by a driver that reads them no more (the simulator's engine): the machine
    /// keeps them, leaving the map empty, instead of copying them.
    Given(&'e mut HeaderMap),
}

impl Fields<'_> {
    /// The fields.
    pub fn get(&self) -> &HeaderMap {
        match self {
            Fields::Lent(h) => h,
            Fields::Given(h) => h,
        }
    }
}

/// What the driver tells the machine. Each [`Command`] says which event answers it.
#[derive(Debug)]
pub enum Event<'e> {
    /// The first event of every flow.
    Start,
    /// An effect was carried out.
    Done,
    /// The variants stored for the key, after any lower tier was opened, and the tier
    /// they were read from (the disk when this request read them in).
    Found(&'e [Arc<Object>], Tier),
    /// Memory misses, but a lower tier may hold the key (`Storage::probe`): what to do
    /// about it is the machine's ([`Command::OpenFile`] or [`Command::Promote`]).
    Lower,
    /// The key's object opened where it lies in a lower tier's file, its body to be sent
    /// from there (a head, and a body of the right length never read), or nothing to send
    /// so.
    FileFound(Option<Arc<Object>>),
    /// Whether the key is remembered as uncacheable.
    Memo(bool),
    /// This request leads the fetch for its key.
    Leading,
    /// The fetch this request joined ended: with the object the leader stored, or with
    /// nothing this request may use (not stored, or the wait timed out).
    Joined(Option<Arc<Object>>),
    /// The origin's answer arrived (its head).
    Answer(Answer<'e>),
    /// The origin could not be reached or failed before a head.
    Failed(OriginFailure),
    /// The store took the object (now being filled), or refused it.
    Inserted(Result<Arc<Object>, Refused>),
    /// The freshened object, or `None` if the old one had left the store.
    Updated(Option<Arc<Object>>),
    /// A stored body was filled completely (true), or failed.
    Arrived(bool),
    /// The client may go on ([`Command::Guard`]); a driver that refuses ends the request
    /// with its own refusal instead.
    Allowed,
    /// Partial responses were combined (true if anything new was stored).
    Combined(bool),
    /// The PURGE was applied (durably), or refused.
    Purged(Result<Purged, PurgeRefused>),
}

/// A request to send to the origin. The driver builds it from the client's request:
/// its fields with conditionals stripped or kept, then `extra` added
/// ([`crate::decide::forward_fields`]).
#[derive(Debug)]
pub struct Send {
    pub conditionals: Conditionals,
    pub extra: Option<HeaderMap>,
    /// The client's request body goes up with it (a pass).
    pub with_body: bool,
    /// To the key's owner, another node of the cluster, marked so that it never forwards
    /// it again ([`Entry::Owner`](crate::decide::Entry::Owner)); else to the origin.
    pub to_owner: bool,
}

/// Which guard [`Command::Guard`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The request may reach the origin, or a stored copy of what it would fetch.
    Origin,
    /// A `PURGE`.
    Purge,
}

/// Serve a stored response.
#[derive(Debug)]
pub struct Serve {
    pub obj: Arc<Object>,
    pub outcome: Outcome,
    pub status: CacheStatus,
    /// Judge the client's conditionals and range against a plain GET, not the request's
    /// own fields: a stored answer to a POST is the client's whole response (RFC 9110
    /// §9.3.3), its preconditions were the origin's to judge.
    pub as_get: bool,
    /// Fields only this client gets (the `Set-Cookie` kept out of the store), if any
    /// (boxed: a hit has none, and the command stays small).
    pub leader_fields: Option<Box<HeaderMap>>,
    /// The object came from the origin just now (the log names the upstream).
    pub from_origin: bool,
    /// The object was just inserted from the answer in hand: start filling it once the
    /// client's reader exists, so the fill never runs ahead as if nobody were reading.
    pub fill: bool,
    /// Wake the requests that joined this one's fetch with the object.
    pub publish: bool,
    /// A hit at lookup, served from this tier (counted per tier).
    pub tier: Option<Tier>,
    /// A stored copy served as a hit: the driver feeds the eviction policy
    /// ([`Storage::touch`]) before it serves. Carried on the serve rather than as a command
    /// of its own: a hit is the commonest flow, and a round trip fewer.
    pub touch: bool,
    /// The body is the file the driver opened ([`Command::OpenFile`]), not the object's.
    pub file: bool,
}

impl Serve {
    /// A stored copy served as it is, found at lookup in `tier` (if known): a hit, which
    /// feeds the eviction policy (`touch`).
    pub fn stored(
        obj: Arc<Object>,
        outcome: Outcome,
        status: CacheStatus,
        tier: Option<Tier>,
    ) -> Serve {
        Serve {
            obj,
            outcome,
            status,
            as_get: false,
            leader_fields: None,
            from_origin: false,
            fill: false,
            publish: false,
            tier,
            file: false,
            touch: true,
        }
    }
}

/// Send the origin's answer on, not stored, with these cleaned fields.
#[derive(Debug)]
pub struct Forward {
    pub headers: HeaderMap,
    pub outcome: Outcome,
    pub status: CacheStatus,
}

/// Answer with a generated response.
#[derive(Debug)]
pub struct Respond {
    pub status: StatusCode,
    pub outcome: Outcome,
    pub cache_status: Option<CacheStatus>,
    pub text: Cow<'static, str>,
}

/// What the machine asks of its driver.
#[derive(Debug)]
pub enum Command {
    // Questions: the driver answers each with the event named.
    /// May this client have what the request asks for? The front end's guards: for a
    /// request that may reach the origin (a stored copy of it included), the destination
    /// guard; for a PURGE, the purge ACL. → [`Event::Allowed`], or the driver's refusal.
    Guard(Guard),
    /// Look the key up, opening a lower tier if memory lacks it. → [`Event::Found`]
    Lookup,
    /// Open the key's object where it lies in the lower tier, for a send from the file
    /// (`sendfile`): only a body of at least the tier's minimum. → [`Event::FileFound`]
    OpenFile,
    /// Promote the key from the lower tier into memory, then look it up.
    /// → [`Event::Found`] (from [`Tier::Disk`])
    Promote,
    /// Is the key remembered as uncacheable? → [`Event::Memo`]
    Memo,
    /// Lead or join the fetch for this key. → [`Event::Leading`] / [`Event::Joined`]
    Join,
    /// Send to the origin. → [`Event::Answer`] / [`Event::Failed`]
    Send(Box<Send>),
    /// Insert this object; the tag names are its labels' names. → [`Event::Inserted`]
    Insert(Arc<Object>, Vec<String>),
    /// Store `head` in place of the object's (same identity, same body). → [`Event::Updated`]
    Update(Arc<Object>, Box<ObjectHead>),
    /// Fill the just-inserted object from the answer in hand and wait until it is
    /// whole. → [`Event::Arrived`]
    FillAndWait(Arc<Object>),
    /// Combine the stored partial responses for the key
    /// ([`crate::partial::combine`]). → [`Event::Combined`]
    Combine,
    /// Apply this invalidation (durably). → [`Event::Purged`]
    Purge(Purge),

    // Effects: the driver carries them out and answers [`Event::Done`].
    /// Remove this object.
    Remove(Arc<Object>, Removal),
    /// Remove every variant stored under these keys (an unsafe method's invalidations).
    Invalidate(Vec<String>),
    /// Store `head` in place of the object's; nothing waits on it.
    Freshen(Arc<Object>, Box<ObjectHead>),
    /// Remember the key as uncacheable / forget that.
    Remember,
    Forget,
    /// The answer in hand will not be used: drop its body.
    Discard,
    /// Fill this just-inserted object from the answer in hand, in the background.
    Fill(Arc<Object>),
    /// Revalidate this stored object in the background (stale-while-revalidate), with a
    /// flow of its own ([`super::Flow::background`]).
    Revalidate(Arc<Object>),

    // Ends: the flow is over.
    Serve(Serve),
    Forward(Box<Forward>),
    Respond(Respond),
    /// The origin failed: a generated error the driver words with its own error.
    Fail {
        status: StatusCode,
        outcome: Outcome,
        cache_status: CacheStatus,
    },
    /// A background flow ended.
    Finish,
}

impl Command {
    /// The flow is over after this command.
    pub fn ends(&self) -> bool {
        matches!(
            self,
            Command::Serve(_)
                | Command::Forward(_)
                | Command::Respond(_)
                | Command::Fail { .. }
                | Command::Finish
        )
    }

    /// The driver answers this command with [`Event::Done`].
    pub fn is_effect(&self) -> bool {
        matches!(
            self,
            Command::Remove(..)
                | Command::Invalidate(_)
                | Command::Freshen(..)
                | Command::Remember
                | Command::Forget
                | Command::Discard
                | Command::Fill(_)
                | Command::Revalidate(_)
        )
    }

    /// Carries out an effect that changes only the store (remove, invalidate, freshen), the
    /// same for every driver; any other command is handed back. (A hit's touch rides on its
    /// [`Serve`].)
    pub fn on_store(self, store: &dyn Storage) -> Result<(), Command> {
        match self {
            Command::Remove(obj, why) => {
                store.remove_object(&obj, why);
            }
            Command::Invalidate(keys) => {
                for key in keys {
                    store.remove(&key, Removal::Invalidated);
                }
            }
            Command::Freshen(obj, head) => {
                store.update_meta(&obj, *head);
            }
            other => return Err(other),
        }
        Ok(())
    }

    /// Its name, for traces and the table-driven tests.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Guard(Guard::Origin) => "guard",
            Command::Guard(Guard::Purge) => "guard-purge",
            Command::Lookup => "lookup",
            Command::OpenFile => "open-file",
            Command::Promote => "promote",
            Command::Memo => "memo",
            Command::Join => "join",
            Command::Send(s) if s.to_owner => "ask-owner",
            Command::Send(s) if s.with_body => "send-body",
            Command::Send(s) if s.extra.is_some() => "send-conditional",
            Command::Send(_) => "send",
            Command::Insert(..) => "insert",
            Command::Update(..) => "update",
            Command::FillAndWait(_) => "fill-and-wait",
            Command::Combine => "combine",
            Command::Purge(_) => "purge",
            Command::Remove(..) => "remove",
            Command::Invalidate(_) => "invalidate",
            Command::Freshen(..) => "freshen",
            Command::Remember => "remember",
            Command::Forget => "forget",
            Command::Discard => "discard",
            Command::Fill(_) => "fill",
            Command::Revalidate(_) => "revalidate",
            Command::Serve(_) => "serve",
            Command::Forward(_) => "forward",
            Command::Respond(_) => "respond",
            Command::Fail { .. } => "fail",
            Command::Finish => "finish",
        }
    }
}
