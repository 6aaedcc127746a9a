//! Shared by the simulator's test files: a scratch directory removed when dropped.

#![allow(dead_code)] // Each test file uses what it needs.

use std::path::PathBuf;

/// A scratch directory under the system's temporary directory, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("trove-sim-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    /// Writes `contents` to `name` in it; returns the path.
    pub fn file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
