//! The reader threads spooled bodies are read back on (`DiskSpool`'s
//! `trove_store::Spool::read_at_then`): a client behind a spooled body's memory window waits
//! for a read here, never on its runtime thread. A few threads for the whole process,
//! whatever the number of readers, so the reads in flight (each a record buffer) stay few;
//! the rest queue.

use std::collections::VecDeque;
use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};

/// Reads in flight at once, over all bodies.
const THREADS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    /// Threads that started; with none, jobs run on the caller's thread.
    threads: usize,
}

static POOL: OnceLock<Pool> = OnceLock::new();

/// Runs `job` on a reader thread (started at the first call).
pub(crate) fn run(job: Job) {
    let pool = POOL.get_or_init(|| {
        let mut threads = 0;
        for i in 0..THREADS {
            let started = std::thread::Builder::new()
                .name(format!("trove-disk-read-{i}"))
                .spawn(serve);
            match started {
                Ok(_) => threads += 1,
                Err(e) => tracing::error!("disk tier: a reader thread did not start ({e})"),
            }
        }
        Pool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            threads,
        }
    });
    if pool.threads == 0 {
        return job();
    }
    pool.queue.lock().push_back(job);
    pool.ready.notify_one();
}

fn serve() {
    // `POOL` is set by the call that started this thread, before it queues anything.
    let pool = loop {
        match POOL.get() {
            Some(p) => break p,
            None => std::thread::yield_now(),
        }
    };
    loop {
        let job = {
            let mut q = pool.queue.lock();
            loop {
                match q.pop_front() {
                    Some(j) => break j,
                    None => pool.ready.wait(&mut q),
                }
            }
        };
        job();
    }
}
