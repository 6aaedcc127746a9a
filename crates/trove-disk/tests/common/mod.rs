//! What the disk tier's integration tests share.

use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A test's own directory under the system's temp directory, emptied when made and removed
/// when dropped (a test that panics removes it too), so test runs do not leave a disk tier's
/// files behind.
pub struct Scratch(PathBuf);

impl Scratch {
    /// `trove-disk-<prefix>-<name>-<pid>`: unique per test and per process.
    pub fn new(prefix: &str, name: &str) -> Scratch {
        let d =
            std::env::temp_dir().join(format!("trove-disk-{prefix}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Scratch(d)
    }
}

impl Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl From<&Scratch> for PathBuf {
    fn from(s: &Scratch) -> PathBuf {
        s.0.clone()
    }
}
