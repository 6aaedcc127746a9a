//! The synchronous driver: runs the core's decisions against a [`Storage`] and an
//! [`Origin`] that answers at once, in virtual time. The simulator (to come) replays traces
//! through it, and the equivalence tests check that it and `trove serve` agree request by
//! request.
//!
//! It is the proxy's driver without sockets: a fetch's body is whole when the origin
//! answers, a background revalidation (stale-while-revalidate) runs right after the
//! response it follows, and collapsing never happens (requests do not overlap).

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use trove_http::Policy;
use trove_store::{Object, Removal, Storage};

use crate::cookie::CookiePolicy;
use crate::decide::{self, Action, BodyState, Collapse, Conditionals, Entry, Fetch, Memo, Rules};
use crate::deliver;
use crate::lookup;
use crate::memo::PassMemo;
use crate::outcome::Outcome;
use crate::partial;
use crate::request::{Request, ResponseHead};
use crate::respond::{self, OnFailure, OnResponse, OnValidation};
use crate::status::{CacheStatus, Fwd, OriginFailure};
use crate::step::Steps;
use crate::Step;
use smallvec::smallvec;

/// A request sent forward.
#[derive(Debug)]
pub struct Forward<'a> {
    pub method: &'a Method,
    /// The cache key, which is the absolute URI.
    pub key: &'a str,
    pub headers: HeaderMap,
}

/// An origin's whole answer.
#[derive(Debug, Clone)]
pub struct OriginAnswer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: AnswerBody,
}

/// An answer's body: its bytes, or only its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerBody {
    Bytes(Bytes),
    /// `n` bytes nobody will read (a simulated origin's): stored size-only
    /// ([`trove_store::Body::append_sized_now`]), so an object of any size, up to
    /// terabytes, is decided on, charged and counted without being allocated.
    Sized(u64),
}

impl AnswerBody {
    pub fn len(&self) -> u64 {
        match self {
            AnswerBody::Bytes(b) => b.len() as u64,
            AnswerBody::Sized(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Bytes> for AnswerBody {
    fn from(b: Bytes) -> Self {
        AnswerBody::Bytes(b)
    }
}

/// The origin side, answering at once.
pub trait Origin {
    fn fetch(&mut self, req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure>;
}

/// How one request was served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub outcome: Outcome,
    pub status: StatusCode,
    pub cache_status: CacheStatus,
    pub steps: Steps,
}

/// The driver and the state it keeps between requests.
pub struct Engine {
    pub store: Arc<dyn Storage>,
    pub policy: Policy,
    pub cookies: CookiePolicy,
    /// What the cache adds to `Via` on stored responses.
    pub via: HeaderValue,
    memo: PassMemo,
}

struct Req<'a> {
    method: &'a Method,
    key: &'a str,
    headers: &'a HeaderMap,
    now: SystemTime,
}

impl Req<'_> {
    fn core(&self) -> Request<'_> {
        Request::new(self.method, self.headers)
    }
}

impl Engine {
    pub fn new(store: Arc<dyn Storage>, policy: Policy, cookies: CookiePolicy) -> Engine {
        Engine {
            store,
            policy,
            cookies,
            via: HeaderValue::from_static("1.1 trove"),
            memo: PassMemo::default(),
        }
    }

    fn rules(&self) -> Rules<'_> {
        Rules {
            policy: &self.policy,
            cookies: &self.cookies,
        }
    }

    /// Serves one request for `key` at `now`.
    pub fn handle(
        &mut self,
        method: &Method,
        key: &str,
        headers: &HeaderMap,
        now: SystemTime,
        origin: &mut dyn Origin,
    ) -> Served {
        let r = Req {
            method,
            key,
            headers,
            now,
        };
        match decide::entry(method, BodyState::Empty) {
            Entry::Purge => {
                let n = self.store.remove(key, Removal::Purged);
                let status = if n > 0 {
                    StatusCode::OK
                } else {
                    StatusCode::NOT_FOUND
                };
                served(
                    Outcome::Purge,
                    status,
                    CacheStatus::default(),
                    smallvec![Step::Purge],
                )
            }
            Entry::RefuseConnect => served(
                Outcome::None,
                StatusCode::METHOD_NOT_ALLOWED,
                CacheStatus::default(),
                smallvec![Step::Deliver],
            ),
            Entry::Pass => self.pass(&r, origin),
            Entry::Lookup => self.cacheable(&r, origin),
        }
    }

    fn pass(&mut self, r: &Req<'_>, origin: &mut dyn Origin) -> Served {
        let fwd = Forward {
            method: r.method,
            key: r.key,
            headers: r.headers.clone(),
        };
        let mut steps = smallvec![Step::Pass];
        match origin.fetch(&fwd) {
            Err(f) => failure(f, Fwd::Method, Outcome::Miss, steps),
            Ok(ans) => {
                let keys = respond::invalidations(r.method, r.key, ans.status, &ans.headers);
                if !keys.is_empty() {
                    steps.push(Step::Invalidate);
                }
                for k in keys {
                    self.store.remove(&k, Removal::Invalidated);
                }
                let headers = respond::clean_response_headers(&ans.headers, &self.via, r.now);
                let head = response_head(&ans, &headers, r.now);
                let max = self.store.max_object();
                let status = match respond::after_pass(r.core(), r.key, &head, self.rules(), max) {
                    OnResponse::Store { object, status, .. } => {
                        match self.store_whole(*object, &ans) {
                            Ok(_) => {
                                steps.push(Step::Store);
                                self.memo.forget(r.key);
                                status
                            }
                            Err(why) => respond::refused(status, why),
                        }
                    }
                    OnResponse::Pass { status, .. } => status,
                };
                served(Outcome::Miss, ans.status, status, steps)
            }
        }
    }

    fn cacheable(&mut self, r: &Req<'_>, origin: &mut dyn Origin) -> Served {
        let found = lookup::lookup_combining(&*self.store, r.key, r.core(), &self.policy, r.now);
        let memo = if found.is_miss() && self.memo.remembered(r.key, r.now) {
            Memo::Uncacheable
        } else {
            Memo::Unknown
        };
        let mut steps = smallvec![Step::Lookup];
        let action = decide::after_lookup(r.core(), found, self.rules(), memo);
        steps.push(action.step());
        match action {
            Action::Serve {
                obj,
                outcome,
                status,
                revalidate,
            } => {
                self.store.touch(&obj);
                let s = self.deliver(r, &obj, outcome, status, steps);
                if revalidate {
                    self.background_revalidate(r, &obj, origin);
                }
                s
            }
            Action::OnlyIfCached => served(
                Outcome::None,
                StatusCode::GATEWAY_TIMEOUT,
                CacheStatus::forward(Fwd::Miss).with_detail(crate::Detail::OnlyIfCached),
                steps,
            ),
            Action::Revalidate {
                obj,
                conditional,
                outcome,
                fwd,
            } => self.revalidate(r, obj, conditional, outcome, fwd, origin, steps),
            Action::Fetch(f) => self.fetch(r, f, origin, steps),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn revalidate(
        &mut self,
        r: &Req<'_>,
        obj: Arc<Object>,
        conditional: HeaderMap,
        outcome: Outcome,
        fwd: Fwd,
        origin: &mut dyn Origin,
        mut steps: Steps,
    ) -> Served {
        let f = Forward {
            method: r.method,
            key: r.key,
            headers: decide::forward_fields(
                r.headers.clone(),
                Conditionals::Strip,
                Some(&conditional),
            ),
        };
        let ans = match origin.fetch(&f) {
            Ok(a) => a,
            Err(e) => return self.failed(r, Some(&obj), fwd, outcome, e, steps),
        };
        let headers = respond::clean_response_headers(&ans.headers, &self.via, r.now);
        let head = response_head(&ans, &headers, r.now);
        match respond::after_validation(&obj, r.core(), &head, self.rules(), fwd, r.now) {
            OnValidation::Freshen { head, status, .. } => {
                steps.push(Step::Freshen);
                let fresh = self.freshen(&obj, *head);
                self.deliver(r, &fresh, Outcome::RefreshUnmodified, status, steps)
            }
            OnValidation::Refetch => {
                let f = Fetch {
                    fwd,
                    collapse: Collapse::No,
                    conditionals: Conditionals::Strip,
                    stale: Some(obj),
                    outcome: Outcome::RefreshModified,
                };
                self.fetch(r, f, origin, steps)
            }
            OnValidation::ServeStale { status } => {
                self.deliver(r, &obj, Outcome::RefreshFailOld, status, steps)
            }
            OnValidation::Replace => self.store_or_pass(r, ans, fwd, outcome, steps),
        }
    }

    /// Updates the stored head in place; serves the new head even if the object has gone.
    fn freshen(&self, obj: &Arc<Object>, head: trove_store::ObjectHead) -> Arc<Object> {
        match self.store.update_meta(obj, head.clone()) {
            Some(o) => o,
            None => Arc::new(Object::new(
                obj.key.clone(),
                obj.variant.clone(),
                head,
                Arc::clone(&obj.body),
            )),
        }
    }

    fn fetch(&mut self, r: &Req<'_>, f: Fetch, origin: &mut dyn Origin, steps: Steps) -> Served {
        if f.fwd == Fwd::VaryMiss {
            let stored = self.store.lookup(r.key);
            if let Some(c) = partial::completion(&stored, r.core()) {
                if let Some(s) = self.complete(r, &c, origin, steps.clone()) {
                    return s;
                }
            }
        }
        let fwd = Forward {
            method: r.method,
            key: r.key,
            headers: decide::forward_fields(r.headers.clone(), f.conditionals, None),
        };
        let ans = match origin.fetch(&fwd) {
            Ok(a) => a,
            Err(e) => return self.failed(r, f.stale.as_ref(), f.fwd, f.outcome, e, steps),
        };
        if let Some((obj, status)) =
            respond::stale_on_server_error(&f, r.core(), ans.status, self.rules(), r.now)
        {
            return self.deliver(r, &obj, Outcome::RefreshFailOld, status, steps);
        }
        self.store_or_pass(r, ans, f.fwd, f.outcome, steps)
    }

    /// Asks for the range a stored partial lacks, stores it, combines and serves (as the
    /// proxy's driver does); `None` when the answer can't be used so.
    fn complete(
        &mut self,
        r: &Req<'_>,
        c: &partial::Completion,
        origin: &mut dyn Origin,
        mut steps: Steps,
    ) -> Option<Served> {
        let f = Forward {
            method: r.method,
            key: r.key,
            headers: decide::forward_fields(
                r.headers.clone(),
                Conditionals::Strip,
                Some(&c.fields),
            ),
        };
        let ans = match origin.fetch(&f) {
            Ok(a) => a,
            Err(e) => return Some(self.failed(r, None, Fwd::Partial, Outcome::Miss, e, steps)),
        };
        match partial::after_completion(c, ans.status, &ans.headers) {
            partial::OnCompletion::Part => {}
            partial::OnCompletion::Other => {
                return Some(self.store_or_pass(r, ans, Fwd::Partial, Outcome::Miss, steps))
            }
        }
        let headers = respond::clean_response_headers(&ans.headers, &self.via, r.now);
        let head = response_head(&ans, &headers, r.now);
        let max = self.store.max_object();
        let OnResponse::Store { object, .. } =
            respond::after_fetch(r.core(), r.key, &head, self.rules(), Fwd::Partial, max)
        else {
            return None;
        };
        self.store_whole(*object, &ans).ok()?;
        steps.push(Step::Store);
        partial::combine(&*self.store, &self.policy, r.key);
        match lookup::lookup(&*self.store, r.key, r.core(), &self.policy, r.now) {
            lookup::Lookup::Found(obj, reuse)
                if !matches!(reuse, trove_http::Reuse::Unusable { .. }) =>
            {
                Some(self.deliver(r, &obj, Outcome::Miss, partial::completed_status(), steps))
            }
            _ => None,
        }
    }

    fn failed(
        &mut self,
        r: &Req<'_>,
        stale: Option<&Arc<Object>>,
        fwd: Fwd,
        outcome: Outcome,
        e: OriginFailure,
        steps: Steps,
    ) -> Served {
        match respond::after_failure(stale, r.core(), self.rules(), fwd, outcome, e, r.now) {
            OnFailure::ServeStale { obj, status } => {
                self.deliver(r, &obj, Outcome::RefreshFailOld, status, steps)
            }
            OnFailure::Error {
                status,
                outcome,
                cache_status,
            } => served(outcome, status, cache_status, steps),
        }
    }

    fn store_or_pass(
        &mut self,
        r: &Req<'_>,
        mut ans: OriginAnswer,
        fwd: Fwd,
        outcome: Outcome,
        mut steps: Steps,
    ) -> Served {
        // The length a HEAD's answer declares, read before cleaning drops the field.
        let declared_length = (*r.method == Method::HEAD)
            .then(|| {
                ans.headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse().ok())
            })
            .flatten();
        // The answer is ours: cleaned where it lies rather than copied (once per miss).
        let mut headers = std::mem::take(&mut ans.headers);
        respond::clean_response_headers_in_place(&mut headers, &self.via, r.now);
        let ans = &ans;
        let head = response_head(ans, &headers, r.now);
        if *r.method == Method::HEAD {
            // A HEAD's body is empty; the length it declares is the GET's.
            let declared = ResponseHead {
                content_length: declared_length,
                ..head
            };
            let stored = self.store.lookup(r.key);
            for (obj, h) in respond::head_updates(&stored, r.core(), &declared, self.rules()) {
                steps.push(Step::Freshen);
                self.store.update_meta(&obj, h);
            }
        }
        let max = self.store.max_object();
        match respond::after_fetch(r.core(), r.key, &head, self.rules(), fwd, max) {
            OnResponse::Store { object, status, .. } => match self.store_whole(*object, ans) {
                Ok(obj) => {
                    steps.push(Step::Store);
                    self.memo.forget(r.key);
                    self.deliver(r, &obj, outcome, status, steps)
                }
                Err(why) => {
                    self.memo.remember(r.key, r.now);
                    steps.push(Step::Deliver);
                    served(outcome, ans.status, respond::refused(status, why), steps)
                }
            },
            OnResponse::Pass { status, remember } => {
                if remember {
                    self.memo.remember(r.key, r.now);
                }
                steps.push(Step::Deliver);
                served(outcome, ans.status, status, steps)
            }
        }
    }

    /// Inserts `object` and fills its body with the whole answer at once.
    fn store_whole(
        &self,
        object: Object,
        ans: &OriginAnswer,
    ) -> Result<Arc<Object>, trove_store::Refused> {
        let obj = self.store.insert(object)?;
        let _ = match &ans.body {
            AnswerBody::Bytes(b) => obj.body.append_now(b.clone()),
            AnswerBody::Sized(n) => obj.body.append_sized_now(*n),
        };
        obj.body.finish(Ok(()));
        self.store.recharge(&obj);
        Ok(obj)
    }

    fn deliver(
        &self,
        r: &Req<'_>,
        obj: &Object,
        outcome: Outcome,
        status: CacheStatus,
        mut steps: Steps,
    ) -> Served {
        let d = deliver::delivery(obj, r.core());
        steps.push(Step::Deliver);
        served(
            deliver::outcome(outcome, d, obj.head.status),
            deliver::status(d, obj, r.core()),
            status,
            steps,
        )
    }

    /// stale-while-revalidate: the stale response was served; refresh it now.
    fn background_revalidate(&mut self, r: &Req<'_>, obj: &Arc<Object>, origin: &mut dyn Origin) {
        let get = Method::GET;
        let cond = trove_http::validation::conditional_headers(&obj.head.headers);
        let f = Forward {
            method: &get,
            key: r.key,
            headers: decide::forward_fields(r.headers.clone(), Conditionals::Strip, Some(&cond)),
        };
        let Ok(ans) = origin.fetch(&f) else { return };
        let headers = respond::clean_response_headers(&ans.headers, &self.via, r.now);
        let head = response_head(&ans, &headers, r.now);
        let req = Request::new(&get, r.headers);
        if ans.status == StatusCode::NOT_MODIFIED {
            if respond::answers(obj, &headers) {
                let h = respond::freshened_head(obj, &head, self.rules());
                self.store.update_meta(obj, h);
            }
            return;
        }
        let max = self.store.max_object();
        if let OnResponse::Store { object, .. } =
            respond::after_fetch(req, r.key, &head, self.rules(), Fwd::Stale, max)
        {
            let _ = self.store_whole(*object, &ans);
        }
    }
}

fn response_head<'a>(
    ans: &OriginAnswer,
    headers: &'a HeaderMap,
    now: SystemTime,
) -> ResponseHead<'a> {
    ResponseHead {
        status: ans.status,
        headers,
        content_length: Some(ans.body.len()),
        request_time: now,
        response_time: now,
    }
}

fn failure(f: OriginFailure, fwd: Fwd, outcome: Outcome, steps: Steps) -> Served {
    served(
        outcome,
        respond::failure_status(f),
        CacheStatus::forward(fwd).with_detail(crate::Detail::Origin(f)),
        steps,
    )
}

fn served(outcome: Outcome, status: StatusCode, cache_status: CacheStatus, steps: Steps) -> Served {
    Served {
        outcome,
        status,
        cache_status,
        steps,
    }
}
