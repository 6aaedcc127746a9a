//! Interim (1xx) response heads from an origin, on their way to the client that waits for
//! the final response (RFC 9110 §15.2; which ones go, and with which fields, is
//! `trove_http::interim`'s rule).
//!
//! hyper 1 reports them through a callback set on the request
//! (`hyper::ext::on_informational`), called on the origin connection's task while it parses
//! the response, before it hands over the final head. A queue ([`Interim`]) carries them
//! from there to the client connection's task, which writes them while it waits for the
//! reply ([`InterimSlot::forward_while`]). The queue is made only when the request goes to
//! an origin, so a hit costs nothing; it is bounded: an origin sending endless 1xx heads
//! gets [`MAX_QUEUED`] through between two writes to the client, the rest dropped.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::task::{Poll, Waker};

use http::{HeaderMap, StatusCode, Version};
use parking_lot::Mutex;

/// Most interim heads held for a client at once.
pub const MAX_QUEUED: usize = 16;

/// One interim response, fields already cleaned for forwarding.
#[derive(Debug)]
pub struct InterimHead {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

/// The interim responses for one client request, between hyper's callback and the client's
/// connection.
#[derive(Debug)]
pub struct Interim {
    client_version: Version,
    queue: Mutex<Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    heads: Vec<InterimHead>,
    /// The client connection's task, when it waits for heads.
    waiting: Option<Waker>,
}

impl Interim {
    /// Has hyper report the interim responses to `req` here.
    pub fn attach<B>(self: &Arc<Self>, req: &mut http::Request<B>) {
        let q = Arc::clone(self);
        hyper::ext::on_informational(req, move |res| q.push(res.status(), res.headers()));
    }

    fn push(&self, status: StatusCode, headers: &HeaderMap) {
        if !trove_http::interim::forwards(status, self.client_version) {
            return;
        }
        let mut q = self.queue.lock();
        if q.heads.len() < MAX_QUEUED {
            q.heads.push(InterimHead {
                status,
                headers: trove_http::interim::forwarded_fields(headers),
            });
        }
        let waker = q.waiting.take();
        drop(q);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The heads that arrived, oldest first; when there are none, `waker` is woken when one
    /// comes.
    fn take_or_wait(&self, waker: &Waker) -> Vec<InterimHead> {
        let mut q = self.queue.lock();
        if q.heads.is_empty() {
            q.waiting = Some(waker.clone());
        }
        std::mem::take(&mut q.heads)
    }

    fn take(&self) -> Vec<InterimHead> {
        std::mem::take(&mut self.queue.lock().heads)
    }
}

/// Where interim responses to one client request will go, made on the client connection's
/// task before the request is handled; the queue inside is created the first time the
/// request goes to an origin.
#[derive(Debug)]
pub struct InterimSlot {
    client_version: Version,
    queue: OnceLock<Arc<Interim>>,
}

/// What [`InterimSlot::forward_while`] hands its writer.
pub enum Forwarded<R> {
    Heads(Vec<InterimHead>),
    Done(R, Vec<InterimHead>),
}

impl InterimSlot {
    /// A slot for a request from a client speaking `client_version`, or `None` when that
    /// client may get no interim response at all (HTTP/1.0).
    pub fn for_client(client_version: Version) -> Option<InterimSlot> {
        trove_http::interim::to_client(client_version).then(|| InterimSlot {
            client_version,
            queue: OnceLock::new(),
        })
    }

    /// The queue for an origin request made for this client.
    pub fn queue(&self) -> &Arc<Interim> {
        self.queue.get_or_init(|| {
            Arc::new(Interim {
                client_version: self.client_version,
                queue: Mutex::new(Queue::default()),
            })
        })
    }

    /// Polls `reply` until either it is ready (with the heads that came before it) or
    /// interim heads have come (the caller writes them, then calls again).
    pub async fn next<F: Future + Unpin>(&self, reply: &mut F) -> Forwarded<F::Output> {
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = std::pin::Pin::new(&mut *reply).poll(cx) {
                let heads = self.queue.get().map(|q| q.take()).unwrap_or_default();
                return Poll::Ready(Forwarded::Done(r, heads));
            }
            // The queue may have been made during that poll: look (and register) after it.
            match self.queue.get().map(|q| q.take_or_wait(cx.waker())) {
                Some(heads) if !heads.is_empty() => Poll::Ready(Forwarded::Heads(heads)),
                _ => Poll::Pending,
            }
        })
        .await
    }
}
