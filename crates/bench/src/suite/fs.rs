//! The file-system interface every suite workload is written against, so
//! one definition runs on the engine (an image on the disk model) and on
//! any mounted directory. Paths are relative to the workload's own
//! directory, `/`-separated, without `.` or `..`.
//!
//! Time comes from [`BenchFs::sample`]: on an image the disk model's
//! virtual clock and counters beside the wall clock, on a directory the
//! wall clock alone. A workload brackets what it measures with two samples
//! and keeps the [`Span`].

use std::time::Instant;

use anyhow::Result;
use ext4kit_engine::device::{DiskStats, PageCacheStats};

use crate::modeled::PhaseStats;

/// An open file. Dropping it without [`BenchFs::close`] leaks the open on
/// an image, so workloads close what they open.
pub struct FileRef(pub(super) Open);

pub(super) enum Open {
    Host(std::fs::File),
    Engine(u32),
}

/// What `stat` tells a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// A directory.
    pub is_dir: bool,
    /// 512-byte sectors allocated.
    pub blocks: u64,
}

/// One directory entry (never `.` or `..`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name (lossily UTF-8).
    pub name: String,
    /// Inode number.
    pub ino: u64,
}

/// One mapped run of a file, in file-system blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Extent {
    /// First logical block.
    pub logical: u64,
    /// First physical block.
    pub physical: u64,
    /// Blocks in the run.
    pub len: u64,
}

/// Whether [`BenchFs::drop_caches`] could make the next access cold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cold {
    /// The next access reads the disk.
    Yes,
    /// Not root on a directory target: the host keeps its caches.
    No,
}

/// The operations the workloads use: those of a POSIX program.
pub trait BenchFs: Sync {
    /// Makes a directory (its parent exists).
    fn mkdir(&self, path: &str) -> Result<()>;
    /// Creates a new empty file (fails if it exists) and opens it for
    /// reading and writing.
    fn create(&self, path: &str) -> Result<FileRef>;
    /// Creates a file the caller knows does not exist, with no existence
    /// lookup where the file system allows it (seed 000's S_CR736 mode,
    /// §5.4), and opens it as [`BenchFs::create`] does.
    fn create_new_name(&self, path: &str) -> Result<FileRef>;
    /// Opens an existing file.
    fn open(&self, path: &str, write: bool) -> Result<FileRef>;
    /// Writes all of `data` at `offset`.
    fn write_at(&self, f: &FileRef, offset: u64, data: &[u8]) -> Result<()>;
    /// Reads up to `buf.len()` bytes; fewer only at the end of the file.
    fn read_at(&self, f: &FileRef, offset: u64, buf: &mut [u8]) -> Result<usize>;
    /// The open file's size.
    fn file_size(&self, f: &FileRef) -> Result<u64>;
    /// `fallocate(2)` mode 0: unwritten blocks over `offset..offset + len`,
    /// the size grown to its end.
    fn fallocate(&self, f: &FileRef, offset: u64, len: u64) -> Result<()>;
    /// `fsync(2)`: the file's data and metadata are durable.
    fn fsync(&self, f: &FileRef) -> Result<()>;
    /// Closes an open file.
    fn close(&self, f: FileRef) -> Result<()>;
    /// `lstat(2)`.
    fn stat(&self, path: &str) -> Result<Stat>;
    /// The entries of a directory, in the order the file system returns them.
    fn read_dir(&self, path: &str) -> Result<Vec<Entry>>;
    /// Removes a file.
    fn unlink(&self, path: &str) -> Result<()>;
    /// Removes an empty directory.
    fn rmdir(&self, path: &str) -> Result<()>;
    /// Renames, replacing a file at `to`.
    fn rename(&self, from: &str, to: &str) -> Result<()>;
    /// Makes everything durable (`syncfs`).
    fn sync(&self) -> Result<()>;
    /// Syncs, then forgets every cached block, so the next access reads the
    /// disk. No file may be open.
    fn drop_caches(&mut self) -> Result<Cold>;
    /// Extents of a file (physically contiguous runs, as `filefrag` counts).
    fn extents(&self, path: &str) -> Result<u64>;
    /// Where a file's blocks lie: its mapped runs in logical order, in
    /// file-system blocks, for layout plots.
    fn extent_map(&self, path: &str) -> Result<Vec<Extent>>;
    /// The clocks and counters now.
    fn sample(&self) -> Sample;
    /// Block size of the file system.
    fn block_size(&self) -> u64;
    /// Bytes the page cache in front of the disk holds at most, when the
    /// target sets it (an image); `None` on the host's own cache.
    fn cache_capacity(&self) -> Option<u64> {
        None
    }
}

/// A reading of the clocks and counters.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The wall clock.
    pub wall: Instant,
    /// The disk model's counters (image targets).
    pub disk: Option<DiskStats>,
    /// The page cache's counters (image targets).
    pub cache: Option<PageCacheStats>,
}

/// What happened between two samples.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Span {
    /// Wall-clock nanoseconds.
    pub wall_ns: u64,
    /// The disk model's figures (image targets only).
    pub modeled: Option<PhaseStats>,
    /// From the first timed piece's start to the last one's end, so that
    /// events stamped by another clock (`bench mount --profile`'s FUSE
    /// tracepoints) can be placed in their phase.
    #[serde(skip)]
    pub window: Option<(Instant, Instant)>,
}

impl Sample {
    /// The wall clock alone (directory targets).
    pub fn wall_only() -> Self {
        Self {
            wall: Instant::now(),
            disk: None,
            cache: None,
        }
    }

    /// From `self` to `later`.
    pub fn until(&self, later: &Sample) -> Span {
        let modeled = match (&self.disk, &later.disk) {
            (Some(d0), Some(d1)) => {
                let c0 = self.cache.unwrap_or_default();
                let c1 = later.cache.unwrap_or_default();
                Some(PhaseStats::between(d0, d1, &c0, &c1))
            }
            _ => None,
        };
        Span {
            wall_ns: later.wall.saturating_duration_since(self.wall).as_nanos() as u64,
            modeled,
            window: Some((self.wall, later.wall)),
        }
    }
}

impl Span {
    /// The time a report ranks by: modeled when there is a model (the same
    /// on every machine), wall otherwise.
    pub fn ns(&self) -> u64 {
        self.modeled.as_ref().map_or(self.wall_ns, |m| m.modeled_ns)
    }

    /// Adds `other` to `self` (a phase made of several timed pieces).
    pub fn add(&mut self, other: &Span) {
        self.wall_ns += other.wall_ns;
        self.window = match (self.window, other.window) {
            (Some((a0, a1)), Some((b0, b1))) => Some((a0.min(b0), a1.max(b1))),
            (a, b) => a.or(b),
        };
        match (&mut self.modeled, &other.modeled) {
            (Some(a), Some(b)) => a.add(b),
            (None, Some(b)) => self.modeled = Some(b.clone()),
            _ => {}
        }
    }
}

/// Splits `a/b/c` into (`a/b`, `c`); the parent of a top-level name is "".
pub fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// Times `f`: the span from a sample before to one after.
pub fn timed<T>(fs: &dyn BenchFs, f: impl FnOnce() -> Result<T>) -> Result<(T, Span)> {
    let a = fs.sample();
    let v = f()?;
    Ok((v, a.until(&fs.sample())))
}
