//! Positioned, streaming directory listing (`getdents`/`telldir`/`seekdir`):
//! a caller reads a directory from a position, gets each entry with the
//! position to resume after it, and may stop anywhere, change the
//! directory, and come back with that position.
//!
//! What a stream holds does not grow with the directory: the hash order
//! keeps the sorted entries of one leaf chain and a short list of
//! collision cookies; only the inode order's snapshot grows, up to a
//! configured limit, past which the stream falls back to hash order.
//!
//! Orders, chosen in one place ([`Filesystem::choose_cursor`]):
//! - `linear`: byte offsets, as the kernel's `ext4_readdir` for directories
//!   that are neither indexed nor one block long (no `dir_index`, or a big
//!   directory made without an index); entries of such a directory never
//!   move, so offsets stay valid while it changes.
//! - `hash_order`: the kernel's `ext4_dx_readdir` for indexed, one-block
//!   and inline directories (`is_dx_dir`): entries in (major, minor) hash
//!   order, positions from the hashes (`hash2pos`), so an htree leaf split,
//!   which moves entries between blocks, moves no position.
//! - `snapshot`: inode-number order from a sorted copy taken at position 0
//!   (seed 003's readdir-then-stat speed-up without a format change).
//!
//! Positions are opaque, non-zero, below 2^63 (a FUSE or `loff_t` offset);
//! 0 is the start. `.` and `..` come first in every order (for a one-block
//! directory the kernel hashes them like other names; here they keep the
//! places they have once it is indexed).
//!
//! See `Documentation/filesystems/ext4/directory.rst`.

mod hash_order;
mod itree_order;
mod linear;
mod snapshot;

use crate::dir::DirEntry;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

use hash_order::HashCursor;
use snapshot::Snapshot;

/// The order a [`DirStream`] lists entries in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadDirOrder {
    /// The kernel's order: hash order for indexed directories (and
    /// one-block and inline ones), byte order otherwise.
    #[default]
    Hash,
    /// Inode-number order, from a snapshot of the directory sorted at the
    /// start of each pass, for directories of at most
    /// [`ReadDirOptions::snapshot_limit`] entries; hash order beyond.
    /// Reading the inodes of a listing in this order visits the inode
    /// table sequentially (seed 003).
    Inode,
}

impl std::str::FromStr for ReadDirOrder {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "hash" => Ok(Self::Hash),
            "inode" => Ok(Self::Inode),
            _ => Err("expects hash or inode".into()),
        }
    }
}

/// How directory streams list ([`crate::OpenOptions::readdir`], or per
/// stream with [`Filesystem::dir_stream_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDirOptions {
    /// The order.
    pub order: ReadDirOrder,
    /// Most entries an inode-order snapshot holds (default
    /// [`DEFAULT_SNAPSHOT_LIMIT`]); a bigger directory is listed in hash
    /// order by that stream.
    pub snapshot_limit: usize,
}

/// One million entries: a snapshot costs 12 bytes per entry plus its name,
/// about 30 MB for 1,000,000 names of 16-20 bytes, the size of the default
/// metadata cache; the sort then takes a fraction of a second, against
/// minutes of cold `stat`s it saves.
pub const DEFAULT_SNAPSHOT_LIMIT: usize = 1_000_000;

impl Default for ReadDirOptions {
    fn default() -> Self {
        Self {
            order: ReadDirOrder::Hash,
            snapshot_limit: DEFAULT_SNAPSHOT_LIMIT,
        }
    }
}

/// An open listing of one directory: what it needs to continue from a
/// position it handed out. Not tied to a borrow of the [`Filesystem`], so a
/// front end keeps one per open directory handle.
#[derive(Debug)]
pub struct DirStream {
    ino: u32,
    opts: ReadDirOptions,
    cursor: Cursor,
}

/// The order a stream is in, with its state. The one place orders are
/// told apart; a new order is a new variant.
#[derive(Debug)]
enum Cursor {
    /// Not read yet from position 0: the order is chosen at the first read.
    Unset,
    Linear,
    Hash(HashCursor),
    Snapshot(Snapshot),
    /// The directory's itree (seed 003): inode order with stable positions.
    Itree,
}

impl DirStream {
    /// The inode this stream lists.
    pub fn ino(&self) -> u32 {
        self.ino
    }

    /// The order this stream serves now: [`ReadDirOrder::Inode`] only while
    /// it holds a snapshot (a directory over the limit falls back).
    pub fn order(&self) -> ReadDirOrder {
        match self.cursor {
            Cursor::Snapshot(_) | Cursor::Itree => ReadDirOrder::Inode,
            _ => ReadDirOrder::Hash,
        }
    }
}

impl Filesystem {
    /// Opens a stream over `dir` in the order of [`crate::OpenOptions::readdir`].
    /// Reads nothing yet.
    ///
    /// # Errors
    /// [`Error::NotDir`].
    pub fn dir_stream(&self, dir: &Inode) -> Result<DirStream> {
        self.dir_stream_with(dir, self.opts.readdir)
    }

    /// Opens a stream over `dir` in the order `opts` asks for.
    ///
    /// # Errors
    /// [`Error::NotDir`].
    pub fn dir_stream_with(&self, dir: &Inode, opts: ReadDirOptions) -> Result<DirStream> {
        self.require_dir(dir)?;
        Ok(DirStream {
            ino: dir.ino,
            opts,
            cursor: Cursor::Unset,
        })
    }

    /// Lists `dir` from position `pos` (0: the start, which also takes a
    /// fresh inode-order snapshot), calling `f(entry, next)` for each entry
    /// until it returns `Ok(false)` or the directory ends; `next` is where
    /// to resume to continue after `entry`. `dir` names the directory; it
    /// is read afresh, since it grows as it is listed.
    ///
    /// An entry present from the start of a pass to its end and not
    /// renamed is returned exactly once, whatever is created, removed or
    /// split in between; one created or removed meanwhile may or may not
    /// be. Costs per call: the index path (cached) and the leaf blocks read
    /// since the last call, and one sort of a leaf's entries.
    ///
    /// The caller keeps the position: to stop before an entry, return
    /// `Ok(false)` for it and resume later at the `next` of the entry
    /// before it, as a FUSE server does when its reply is full.
    ///
    /// ```
    /// # use ext4kit_engine::device::MemDevice;
    /// # use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
    /// # use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dev = MemDevice::new(vec![0; 16 << 20]);
    /// # mkfs(&dev, &MkfsOptions::default())?;
    /// # let fs = Filesystem::open(Box::new(dev), OpenOptions::default())?;
    /// let attr = Attr { perm: 0o644, uid: 0, gid: 0 };
    /// for i in 0..500 {
    ///     fs.create(ROOT_INO, format!("f{i}").as_bytes(), NodeKind::Regular, attr)?;
    /// }
    /// let root = fs.inode(ROOT_INO)?;
    /// let mut stream = fs.dir_stream(&root)?;
    /// let (mut pos, mut names) = (0, Vec::new());
    /// loop {
    ///     // Ten entries per call, as a small getdents buffer would take.
    ///     let before = names.len();
    ///     fs.read_dir_from(&root, &mut stream, pos, |e, next| {
    ///         if names.len() == before + 10 {
    ///             return Ok(false);
    ///         }
    ///         names.push(e.name.clone());
    ///         pos = next;
    ///         Ok(true)
    ///     })?;
    ///     if names.len() == before {
    ///         break;
    ///     }
    /// }
    /// assert_eq!(names.len(), 503); // ".", "..", "lost+found" and the files
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::NotFound`] once the directory is removed.
    /// - [`Error::InvalidArgument`] if `stream` is for another inode, or
    ///   `pos` is a collision cookie this stream no longer holds.
    /// - Corruption of the blocks read, located at the block: a leaf
    ///   pointer outside the directory or at an index block, index hashes
    ///   that do not ascend, bad checksums.
    pub fn read_dir_from(
        &self,
        dir: &Inode,
        stream: &mut DirStream,
        pos: u64,
        f: impl FnMut(&DirEntry, u64) -> Result<bool>,
    ) -> Result<()> {
        self.reading("read_dir_from", || self.read_dir_from_unrecorded(dir, stream, pos, f))
    }

    fn read_dir_from_unrecorded(
        &self,
        dir: &Inode,
        stream: &mut DirStream,
        pos: u64,
        f: impl FnMut(&DirEntry, u64) -> Result<bool>,
    ) -> Result<()> {
        if dir.ino != stream.ino {
            return Err(Error::InvalidArgument(format!(
                "directory stream of inode {} used on inode {}",
                stream.ino, dir.ino
            )));
        }
        let dir = &self.live_dir(dir.ino)?;
        let shown = self.presenter(dir)?;
        let mut f = f;
        let f = |e: &DirEntry, next: u64| {
            if shown.is_plain() {
                return f(e, next);
            }
            let e = DirEntry {
                name: shown.present(&e.name),
                ..e.clone()
            };
            f(&e, next)
        };
        if pos == 0 || matches!(stream.cursor, Cursor::Unset) {
            stream.cursor = self.choose_cursor(dir, &stream.opts, pos == 0)?;
        }
        match &mut stream.cursor {
            Cursor::Unset => Ok(()),
            Cursor::Linear => self.linear_from(dir, pos, f),
            Cursor::Hash(c) => self.hash_from(dir, c, pos, f),
            Cursor::Snapshot(s) => s.read_from(pos, f),
            Cursor::Itree => self.itree_from(dir, pos, f),
        }
    }

    /// Directory `ino` as it is now. One removed meanwhile (no links left;
    /// its blocks may already be another file's) is [`Error::NotFound`],
    /// as the kernel's `readdir` of a dead directory is `ENOENT`.
    pub(super) fn live_dir(&self, ino: u32) -> Result<Inode> {
        let dir = self.inode(ino)?;
        if dir.raw.links() == 0 {
            return Err(Error::NotFound(format!("directory inode {ino} was removed")));
        }
        self.require_dir(&dir)?;
        Ok(dir)
    }

    /// Picks the order for a pass over `dir`: its itree when it has one, a
    /// snapshot when asked for,
    /// at the start, and small enough; otherwise the kernel's choice
    /// (`is_dx_dir`: hash order when it can be computed, else byte order).
    fn choose_cursor(&self, dir: &Inode, opts: &ReadDirOptions, start: bool) -> Result<Cursor> {
        if crate::dir::itree::has_itree(dir) {
            return Ok(Cursor::Itree);
        }
        if start
            && opts.order == ReadDirOrder::Inode
            && let Some(s) = self.take_snapshot(dir, opts.snapshot_limit)?
        {
            return Ok(Cursor::Snapshot(s));
        }
        if self.hash_ordered(dir)? {
            return Ok(Cursor::Hash(HashCursor::default()));
        }
        Ok(Cursor::Linear)
    }
}

/// A reusable entry handed to callbacks, so a listing allocates no name
/// per entry.
fn fill<'a>(scratch: &'a mut DirEntry, ino: u32, ft: u8, name: &[u8]) -> &'a DirEntry {
    scratch.ino = ino;
    scratch.file_type = crate::dir::file_type_code(ft);
    scratch.name.clear();
    scratch.name.extend_from_slice(name);
    scratch
}

fn scratch() -> DirEntry {
    DirEntry {
        ino: 0,
        name: Vec::with_capacity(255),
        file_type: None,
    }
}
