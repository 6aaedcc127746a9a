//! Waking the tasks that wait on a body, without an async runtime: [`WakeList`] is the one
//! thing `Body` needed of tokio (`Notify::notify_waiters` and a `notified()` future made
//! before the state is checked), written here so trove-store (and the cache core that uses
//! it) builds without tokio and runs under any executor, the simulator's included.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// Tasks waiting for the next [`WakeList::wake_all`].
#[derive(Debug, Default)]
pub(crate) struct WakeList {
    /// Counts calls of [`WakeList::wake_all`]: a waiter made before a call is ready after it.
    calls: AtomicU64,
    waiting: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    next_id: u64,
    wakers: Vec<(u64, Waker)>,
}

impl WakeList {
    /// A future ready once [`WakeList::wake_all`] is called after this call: make it
    /// before checking the state waited on, then await it if the state says to wait (no
    /// wake-up in between is lost).
    pub(crate) fn wait(&self) -> Wait<'_> {
        Wait {
            list: self,
            seen: self.calls.load(Ordering::Acquire),
            id: None,
        }
    }

    /// Wakes every task waiting now.
    pub(crate) fn wake_all(&self) {
        let wakers = {
            let mut w = self.waiting.lock();
            // Under the lock: a waiter registering checks `calls` under it too.
            self.calls.fetch_add(1, Ordering::AcqRel);
            std::mem::take(&mut w.wakers)
        };
        for (_, w) in wakers {
            w.wake();
        }
    }
}

/// See [`WakeList::wait`].
#[derive(Debug)]
pub(crate) struct Wait<'a> {
    list: &'a WakeList,
    seen: u64,
    /// Its entry among the wakers, once polled.
    id: Option<u64>,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let list = self.list;
        let mut w = list.waiting.lock();
        if list.calls.load(Ordering::Acquire) != self.seen {
            return Poll::Ready(());
        }
        match self.id {
            Some(id) => match w.wakers.iter_mut().find(|(i, _)| *i == id) {
                Some((_, waker)) => waker.clone_from(cx.waker()),
                None => w.wakers.push((id, cx.waker().clone())),
            },
            None => {
                let id = w.next_id;
                w.next_id += 1;
                w.wakers.push((id, cx.waker().clone()));
                drop(w);
                self.id = Some(id);
            }
        }
        Poll::Pending
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.list.waiting.lock().wakers.retain(|(i, _)| *i != id);
        }
    }
}

/// A value handed over from another thread (a lower tier's read), awaited here.
#[derive(Debug)]
pub(crate) struct Slot<T> {
    value: Mutex<Option<T>>,
    wake: WakeList,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            value: Mutex::new(None),
            wake: WakeList::default(),
        }
    }
}

impl<T> Slot<T> {
    pub(crate) fn put(&self, v: T) {
        *self.value.lock() = Some(v);
        self.wake.wake_all();
    }

    /// The value, once put.
    pub(crate) async fn take(&self) -> T {
        loop {
            let wait = self.wake.wait();
            if let Some(v) = self.value.lock().take() {
                return v;
            }
            wait.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_wait_made_before_a_wake_is_ready_after_it_and_not_before() {
        let list = Arc::new(WakeList::default());
        let wait = list.wait();
        let mut wait = Box::pin(wait);
        let waker = futures_noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        list.wake_all();
        assert!(wait.as_mut().poll(&mut cx).is_ready());
        // Made after the wake: waits for the next one.
        let mut later = Box::pin(list.wait());
        assert!(later.as_mut().poll(&mut cx).is_pending());
        drop(later);
        assert!(
            list.waiting.lock().wakers.is_empty(),
            "a dropped wait leaves"
        );
    }

    #[tokio::test]
    async fn a_slot_hands_a_value_across_threads() {
        let slot = Arc::new(Slot::default());
        let s = Arc::clone(&slot);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            s.put(7u32);
        });
        assert_eq!(slot.take().await, 7);
    }

    fn futures_noop_waker() -> Waker {
        Waker::noop().clone()
    }
}
