//! A record of what the disk tier asks of the file system after start-up — writes, length
//! changes, hole punches, `fdatasync`s, renames and directory syncs — for crash-consistency
//! tests in the manner of CrashMonkey and ALICE (issue 19): a test turns it on, drives the
//! tier, and rebuilds the directory as a power loss could have left it at any point (all
//! that was synced, plus any subset, in any order, possibly torn, of what was not), then
//! recovers from it. Off (one relaxed load per call) unless a test calls [`start`].
//!
//! Not a wrapper around the files: the tier's own calls report themselves here after they
//! succeed, so what is recorded is exactly what the kernel accepted.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// One operation the file system accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Write {
        file: PathBuf,
        offset: u64,
        data: Vec<u8>,
    },
    SetLen {
        file: PathBuf,
        len: u64,
    },
    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)`: zeros.
    Punch {
        file: PathBuf,
        offset: u64,
        len: u64,
    },
    /// `fdatasync` / `fsync` of a file: what was written to it before is durable.
    Sync {
        file: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    Remove {
        file: PathBuf,
    },
    /// `fsync` of a directory: the renames and removals in it before are durable.
    SyncDir {
        dir: PathBuf,
    },
    /// A point the test marks (an acknowledgement it received, say), with its number.
    Mark(u64),
}

static ON: AtomicBool = AtomicBool::new(false);
static FAIL_READS: AtomicBool = AtomicBool::new(false);

/// Makes every later read of a region's bytes fail with `EIO` (`on`), as a device that
/// shrank under its file system does, or read again (`!on`): a failing-file switch for
/// tests of what a failed disk leaves behind.
pub fn fail_reads(on: bool) {
    FAIL_READS.store(on, Ordering::SeqCst);
}

pub(crate) fn read_fault() -> std::io::Result<()> {
    if FAIL_READS.load(Ordering::Relaxed) {
        return Err(std::io::Error::from_raw_os_error(5));
    }
    Ok(())
}
static LOG: Mutex<Vec<Op>> = Mutex::new(Vec::new());

/// Starts recording (clearing what was recorded).
pub fn start() {
    LOG.lock().clear();
    ON.store(true, Ordering::SeqCst);
}

/// Stops recording and returns the operations, in the order they were accepted.
pub fn stop() -> Vec<Op> {
    ON.store(false, Ordering::SeqCst);
    std::mem::take(&mut *LOG.lock())
}

/// Marks a point in the record (see [`Op::Mark`]).
pub fn mark(n: u64) {
    record(|| Op::Mark(n));
}

pub(crate) fn record(op: impl FnOnce() -> Op) {
    if ON.load(Ordering::Relaxed) {
        let op = op();
        LOG.lock().push(op);
    }
}

pub(crate) fn write(file: &Path, offset: u64, data: &[u8]) {
    record(|| Op::Write {
        file: file.to_path_buf(),
        offset,
        data: data.to_vec(),
    });
}

pub(crate) fn sync(file: &Path) {
    record(|| Op::Sync {
        file: file.to_path_buf(),
    });
}

pub(crate) fn set_len(file: &Path, len: u64) {
    record(|| Op::SetLen {
        file: file.to_path_buf(),
        len,
    });
}
