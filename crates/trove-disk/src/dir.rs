//! The cache directories: the lock, the format marker, the region files, and positioned
//! reads and writes of regions.
//!
//! Each configured path holds three files:
//!
//! - `trove.lock`: held with `flock(LOCK_EX | LOCK_NB)` for the life of the process, so a
//!   second trove pointed at the same directory refuses to start (the kernel drops the lock
//!   when the process dies, `kill -9` included, so a crash never leaves a stale lock).
//!   `rustix` gives `flock` without `unsafe`.
//! - `FORMAT`: `trove-disk <version>`. A newer version is refused with a message; an older
//!   one (or a directory without the marker) is discarded: its regions are ignored and
//!   overwritten.
//! - `regions.dat`: `budget / paths / region_size` regions back to back, written with
//!   `pwrite` and read with `pread` (std's `FileExt`), so readers never share a file cursor.
//!
//! Regions are numbered across all paths in order, so the writer spreads its regions over
//! every disk simply by going round.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::format::VERSION;

/// Why a cache directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process holds the directory.
    #[error("cache directory {0} is in use by another trove process (lock held on trove.lock)")]
    Locked(PathBuf),
    /// Written by a newer trove.
    #[error(
        "cache directory {path} has disk format version {found}, newer than this trove's {VERSION}: \
         run a newer trove, or empty the directory to start afresh"
    )]
    NewerFormat { path: PathBuf, found: u16 },
    /// The invalidation journal was written by a newer trove.
    #[error(
        "cache directory {path}: its invalidation journal has version {found}, newer than this trove's: \
         run a newer trove, or empty the directory to start afresh"
    )]
    NewerJournal { path: PathBuf, found: u16 },
    /// The directory can't be created, read or written.
    #[error("cache directory {path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    /// The budget leaves fewer regions than the writer needs.
    #[error("cache.disk: the budget holds {0} regions of the region size; at least 3 are needed")]
    TooSmall(u64),
}

impl OpenError {
    /// True for failures of the disk itself (degrade to memory-only), false for refusals an
    /// operator must act on (another process, a newer format, a bad config).
    pub fn is_io(&self) -> bool {
        matches!(self, OpenError::Io { .. })
    }
}

struct DataFile {
    file: File,
    dirty: AtomicBool,
    _lock: File,
}

/// The opened directories and their regions.
pub struct Dir {
    files: Vec<DataFile>,
    /// The directories, in order (`files[i]` is in `paths[i]`).
    paths: Vec<PathBuf>,
    /// Region number → (file, byte offset in it).
    regions: Vec<(usize, u64)>,
    region_size: u64,
    /// True when an old-format (or unmarked) directory was found and its contents discarded.
    pub discarded: bool,
    /// Data files found shorter than their full length (see [`FULL_LENGTH`]): (file, bytes
    /// found, full length). Whatever lay past the cut is lost; recovery says so.
    pub cut_short: Vec<(usize, u64, u64)>,
}

/// A marker: this directory's data file is kept at its full length (sparse), set at every
/// start, so one found shorter was cut by something else (issue 19, defect 7: a data file
/// truncated at a region boundary lost its tail regions without a word). Directories
/// without it (older troves') are extended without alarm at their first start.
pub const FULL_LENGTH: &str = ".full-length";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OpenError + '_ {
    move |err| OpenError::Io {
        path: path.to_path_buf(),
        err,
    }
}

fn lock(path: &Path) -> Result<File, OpenError> {
    let lock_path = path.join("trove.lock");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(io(path))?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            return Err(OpenError::Locked(path.to_path_buf()))
        }
        Err(e) => return Err(io(path)(e.into())),
    }
    // Informative only: which process holds it.
    let _ = f.set_len(0);
    let _ = writeln!(f, "{}", std::process::id());
    Ok(f)
}

/// Reads the `FORMAT` marker: `Some(version)`, or `None` when there is none.
fn format_of(path: &Path) -> Result<Option<u16>, OpenError> {
    let mut s = String::new();
    match File::open(path.join("FORMAT")) {
        Ok(mut f) => {
            f.read_to_string(&mut s).map_err(io(path))?;
        }
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    }
    Ok(s.trim()
        .strip_prefix("trove-disk ")
        .and_then(|v| v.parse().ok())
        .or(Some(0)))
}

impl Dir {
    /// Locks and opens every path (creating what is missing), splitting `budget` evenly.
    pub fn open(paths: &[PathBuf], budget: u64, region_size: u64) -> Result<Dir, OpenError> {
        let per_path = budget / paths.len().max(1) as u64 / region_size;
        let total = per_path * paths.len() as u64;
        if total < 3 {
            return Err(OpenError::TooSmall(total));
        }
        let mut files = Vec::new();
        let mut regions = Vec::new();
        let mut discarded = false;
        let mut cut_short = Vec::new();
        for (i, path) in paths.iter().enumerate() {
            std::fs::create_dir_all(path).map_err(io(path))?;
            let lock = lock(path)?;
            let data_path = path.join("regions.dat");
            let fresh = match format_of(path)? {
                Some(v) if v > VERSION => {
                    return Err(OpenError::NewerFormat {
                        path: path.clone(),
                        found: v,
                    })
                }
                Some(VERSION) => false,
                Some(_) => {
                    discarded = true;
                    true
                }
                None => {
                    discarded |= data_path.exists();
                    true
                }
            };
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(fresh)
                .open(&data_path)
                .map_err(io(path))?;
            if fresh {
                // The marker goes down only once the data file is empty.
                file.sync_all().map_err(io(path))?;
                let mut m = File::create(path.join("FORMAT")).map_err(io(path))?;
                writeln!(m, "trove-disk {VERSION}").map_err(io(path))?;
                m.sync_all().map_err(io(path))?;
            }
            let want = per_path * region_size;
            let had = file.metadata().map_err(io(path))?.len();
            let marked = path.join(FULL_LENGTH).exists();
            if had > want {
                // The budget shrank: what lay beyond it is gone.
                file.set_len(want).map_err(io(path))?;
            } else if had < want {
                if marked && !fresh {
                    cut_short.push((i, had, want));
                }
                // Sparse: no block is allocated until written.
                file.set_len(want).map_err(io(path))?;
            }
            if !marked {
                file.sync_all().map_err(io(path))?;
                File::create(path.join(FULL_LENGTH))
                    .and_then(|m| m.sync_all())
                    .map_err(io(path))?;
            }
            for r in 0..per_path {
                regions.push((i, r * region_size));
            }
            files.push(DataFile {
                file,
                dirty: AtomicBool::new(false),
                _lock: lock,
            });
        }
        Ok(Dir {
            files,
            paths: paths.to_vec(),
            regions,
            region_size,
            discarded,
            cut_short,
        })
    }

    /// Empties every data file (the index is empty then): used when the invalidation
    /// journal can't be trusted, so no object it may have covered comes back.
    pub fn wipe(&self) -> std::io::Result<()> {
        for (i, f) in self.files.iter().enumerate() {
            f.file.set_len(0)?;
            crate::crashlog::set_len(&self.data_path(i), 0);
            f.file.sync_all()?;
            crate::crashlog::sync(&self.data_path(i));
        }
        Ok(())
    }

    /// The data file of directory `i`.
    fn data_path(&self, i: usize) -> PathBuf {
        self.paths[i].join("regions.dat")
    }

    pub fn region_count(&self) -> u32 {
        self.regions.len() as u32
    }

    pub fn region_size(&self) -> u64 {
        self.region_size
    }

    /// Region `region`'s file and byte offset in it.
    pub fn place(&self, region: u32) -> (usize, u64) {
        self.regions[region as usize]
    }

    /// The order regions are first written in: each file from its start, the files taken
    /// in turn, so writes spread over every disk and each file grows only as needed.
    pub fn first_use_order(&self, region: u32) -> (u64, usize) {
        let (f, base) = self.regions[region as usize];
        (base, f)
    }

    /// Reads up to `buf.len()` bytes at `offset` in `region`; returns how many were there
    /// (a region never written reads short).
    pub fn read_at(&self, region: u32, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let (f, base) = self.regions[region as usize];
        let len = buf
            .len()
            .min(self.region_size.saturating_sub(offset) as usize);
        let file = &self.files[f].file;
        let mut done = 0;
        while done < len {
            match file.read_at(&mut buf[done..len], base + offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Reads up to `n` bytes at `offset` in `region` into a new buffer, without zeroing it
    /// first (a disk hit reads every byte it will use; zeroing 100 KB first cost a tenth of
    /// the hit path): rustix's `pread` into the vector's spare capacity, safe code.
    pub fn read_vec(&self, region: u32, offset: u64, n: usize) -> std::io::Result<Vec<u8>> {
        crate::crashlog::read_fault()?;
        let (f, base) = self.regions[region as usize];
        let n = n.min(self.region_size.saturating_sub(offset) as usize);
        let file = &self.files[f].file;
        let mut v = Vec::with_capacity(n.max(1));
        while v.len() < n {
            let at = base + offset + v.len() as u64;
            match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut v), at) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(v)
    }

    /// Tells the kernel `len` bytes at `offset` in `region` will be read soon
    /// (`posix_fadvise(WILLNEED)`: it starts reading them in the background). Recovery hints
    /// every summary before reading the first, so a cold page cache (after a reboot) is read
    /// by the device in parallel rather than one small read at a time. Advice only: errors
    /// are ignored.
    pub fn will_need(&self, region: u32, offset: u64, len: u64) {
        let (f, base) = self.regions[region as usize];
        let len = len.min(self.region_size.saturating_sub(offset));
        let _ = rustix::fs::fadvise(
            &self.files[f].file,
            base + offset,
            std::num::NonZeroU64::new(len),
            rustix::fs::Advice::WillNeed,
        );
    }

    /// The data file holding `region`, and the region's offset in it (for `sendfile`).
    pub fn file_at(&self, region: u32) -> (std::os::fd::BorrowedFd<'_>, u64) {
        use std::os::fd::AsFd;
        let (f, base) = self.regions[region as usize];
        (self.files[f].file.as_fd(), base)
    }

    /// Punches a hole over `region` (`fallocate(PUNCH_HOLE)`): its pages leave the page
    /// cache and the file, so bytes a socket still references from an earlier `sendfile`
    /// keep their value while the region is rewritten (see `zero_copy`).
    pub fn punch(&self, region: u32) -> std::io::Result<()> {
        use rustix::fs::FallocateFlags;
        let (f, base) = self.regions[region as usize];
        rustix::fs::fallocate(
            &self.files[f].file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            base,
            self.region_size,
        )?;
        crate::crashlog::record(|| crate::crashlog::Op::Punch {
            file: self.data_path(f),
            offset: base,
            len: self.region_size,
        });
        Ok(())
    }

    /// True when every directory's file system punches holes: tried on a scratch file.
    pub fn can_punch(&self) -> bool {
        self.paths.iter().all(|p| {
            let probe = p.join(".punch-probe");
            let ok = (|| {
                use rustix::fs::FallocateFlags;
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&probe)?;
                f.write_all_at(&[1u8; 8192], 0)?;
                rustix::fs::fallocate(
                    &f,
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                    0,
                    4096,
                )?;
                let mut b = [1u8; 1];
                f.read_exact_at(&mut b, 0)?;
                Ok::<bool, std::io::Error>(b[0] == 0)
            })();
            let _ = std::fs::remove_file(&probe);
            ok.unwrap_or(false)
        })
    }

    /// Reads `n` bytes at `offset` in `region` only if they are all in the page cache
    /// (`preadv2` with `RWF_NOWAIT`): `Ok(None)` when reading would wait for the disk, so a
    /// caller on an async runtime can go to a blocking pool instead.
    pub fn read_cached(
        &self,
        region: u32,
        offset: u64,
        n: usize,
    ) -> std::io::Result<Option<Vec<u8>>> {
        let (f, base) = self.regions[region as usize];
        let n = n.min(self.region_size.saturating_sub(offset) as usize);
        let mut v = vec![0u8; n];
        let mut bufs = [std::io::IoSliceMut::new(&mut v)];
        match rustix::io::preadv2(
            &self.files[f].file,
            &mut bufs,
            base + offset,
            rustix::io::ReadWriteFlags::NOWAIT,
        ) {
            Ok(got) if got == n => Ok(Some(v)),
            Ok(_) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::OPNOTSUPP) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `data` at `offset` in `region`.
    pub fn write_at(&self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let (f, base) = self.regions[region as usize];
        debug_assert!(offset + data.len() as u64 <= self.region_size);
        self.files[f].file.write_all_at(data, base + offset)?;
        crate::crashlog::write(&self.data_path(f), base + offset, data);
        self.files[f].dirty.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// `fdatasync`s every file written since the last sync: the power-loss bound.
    pub fn sync(&self) -> std::io::Result<()> {
        for (i, f) in self.files.iter().enumerate() {
            if f.dirty.swap(false, Ordering::Relaxed) {
                f.file.sync_data()?;
                crate::crashlog::sync(&self.data_path(i));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_opener_is_refused_while_the_first_holds_the_lock() {
        let d = tempdir("lock");
        let first = Dir::open(std::slice::from_ref(&d), 4 << 20, 1 << 20).unwrap();
        let e = Dir::open(std::slice::from_ref(&d), 4 << 20, 1 << 20)
            .err()
            .expect("refused");
        assert!(matches!(e, OpenError::Locked(_)), "{e}");
        assert!(e.to_string().contains("in use by another trove"), "{e}");
        drop(first);
        drop(Dir::open(std::slice::from_ref(&d), 4 << 20, 1 << 20).unwrap());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_newer_format_is_refused_with_a_message_and_an_older_one_discarded() {
        let d = tempdir("format");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("FORMAT"), format!("trove-disk {}\n", VERSION + 1)).unwrap();
        let e = Dir::open(std::slice::from_ref(&d), 4 << 20, 1 << 20)
            .err()
            .expect("refused");
        let msg = e.to_string();
        assert!(
            msg.contains("newer") && msg.contains(&format!("{}", VERSION + 1)),
            "{msg}"
        );
        std::fs::write(d.join("FORMAT"), "trove-disk 0\n").unwrap();
        std::fs::write(d.join("regions.dat"), vec![1u8; 4096]).unwrap();
        let dir = Dir::open(std::slice::from_ref(&d), 4 << 20, 1 << 20).unwrap();
        assert!(dir.discarded);
        // Emptied, then kept at its full length (sparse: zeros).
        let data = std::fs::read(d.join("regions.dat")).unwrap();
        assert_eq!(data.len() as u64, 4 << 20);
        assert!(data.iter().all(|&b| b == 0));
        drop(dir);
        let _ = std::fs::remove_dir_all(&d);
    }

    pub(crate) fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "trove-disk-test-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }
}
