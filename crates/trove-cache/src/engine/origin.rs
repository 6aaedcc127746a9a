//! What the simulator's origin is asked and answers: a whole answer at once, its body as
//! bytes or only as a length; and how such a body is put into a stored object.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use trove_store::{Object, Storage};

use crate::status::OriginFailure;

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
    /// `n` zero bytes, stored as bytes (shared, not allocated): for a store that keeps
    /// what it is given, a disk tier.
    Zeros(u64),
}

impl AnswerBody {
    pub fn len(&self) -> u64 {
        match self {
            AnswerBody::Bytes(b) => b.len() as u64,
            AnswerBody::Sized(n) | AnswerBody::Zeros(n) => *n,
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

    /// Stores `body`, the body of the answer last fetched, in `obj` (inserted with its
    /// head): at once by default ([`fill`]). A trace replay may keep it to store
    /// where the server's body ended (in a server a body arrives after its head, and a
    /// client answered `304` or `HEAD` may ask again before it has).
    fn store_body(&mut self, store: &dyn Storage, obj: Arc<Object>, body: Option<AnswerBody>) {
        fill(store, &obj, body);
    }

    /// The time once a lower tier's copy has been opened or promoted, if it is not the
    /// request's: a server reads its clock again after the read (a replay, the time the
    /// trace recorded), and judges the copy's freshness then.
    fn after_lower(&mut self) -> Option<SystemTime> {
        None
    }

    /// Just before a lower tier's copy is read (opened or promoted): a replay puts the
    /// lower tier's writer where the server's was when it read (a server reads later
    /// than it looked up, on a blocking pool, and the writer goes on meanwhile).
    fn before_lower(&mut self) {}
}

/// Zeros a size-only body is written as when bodies must be real (`Engine::real_bodies`).
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// The body of the answer in hand, as the store is to get it: a size-only one as zeros
/// when `real` (shared, never allocated).
pub(super) fn body(answer: Option<OriginAnswer>, real: bool) -> Option<AnswerBody> {
    answer.map(|a| match a.body {
        AnswerBody::Sized(n) if real => AnswerBody::Zeros(n),
        b => b,
    })
}

/// Fills a just-inserted object with a whole body at once.
pub fn fill(store: &dyn Storage, obj: &Object, body: Option<AnswerBody>) {
    let _ = match body {
        Some(AnswerBody::Bytes(b)) => obj.body.append_now(b),
        Some(AnswerBody::Zeros(n)) => {
            let mut left = n;
            let mut res = Ok(());
            while left > 0 && res.is_ok() {
                let k = left.min(ZEROS.len() as u64) as usize;
                res = obj.body.append_now(bytes::Bytes::from_static(&ZEROS[..k]));
                left -= k as u64;
            }
            res
        }
        Some(AnswerBody::Sized(n)) => obj.body.append_sized_now(n),
        None => Ok(()),
    };
    obj.body.finish(Ok(()));
    store.recharge(obj);
}
