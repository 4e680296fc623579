//! Hash-order listing, as the kernel's `ext4_dx_readdir` (fs/ext4/dir.c).
//!
//! A name's position is `hash2pos` of its 64-bit form: `(major >> 1) << 32
//! | minor` (`dx_hash_info.hash`/`minor_hash`). Reading from position `p`
//! returns, in (position, name) order, every entry whose position is at
//! least `p`; the position handed out after an entry is its own plus one.
//! Leaves are visited through the index from the one `dx_probe` finds for
//! `p`'s major hash; a leaf and the leaves continuing its last hash (the
//! collision bit of the next index entry) are read together, so no hash
//! is split between two batches. `.` and `..` sit at hashes (0, 0) and
//! (2, 0), as `ext4_htree_fill_tree` puts them.
//!
//! Entries with one full 64-bit hash (a collision group; with the legacy
//! hash, whose minor is 0, about 23,000 pairs among 10 million names) share
//! a position, so a caller stopping inside a group could neither resume
//! after the part it has nor skip it. Entries of a group but its last are
//! handed a cookie instead: a position above every hash naming the group
//! and the entry's name, held by the stream (the most recent
//! [`MAX_COOKIES`]), whose resumption skips the group's names up to that
//! one. The kernel keeps the rest of a group in its per-file rbtree for
//! the same reason.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use ext4kit_format::dir_entry;
use ext4kit_format::features::CompatFeatures;
use ext4kit_format::hash::HashVersion;

use super::{fill, scratch};
use crate::dir::DirEntry;
use crate::dir::htree::Level;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// First position above every name's: `hash2pos` of the major hash
/// `0xfffffffe`, which `dx_hash` never returns. Positions from here up are
/// cookies; the kernel treats them all as end of directory.
const PAST_HASHES: u64 = 0x7fff_ffff << 32;

/// Position of `..` (major hash 2, minor 0); `.` is at 0.
const DOTDOT_POS: u64 = 1 << 32;

/// Most leaves one batch reads for a single major hash continued by the
/// collision bit; only a crafted directory comes near it.
const MAX_CHAIN_LEAVES: usize = 64;

/// Cookies a stream remembers (one per colliding name it has listed, the
/// oldest forgotten first): more than a FUSE reply of 128 KiB can hold, a
/// few hundred KiB at most.
const MAX_COOKIES: usize = 1024;

/// Attempts at a batch that no commit overlapped before one is taken as it is.
const CONSISTENT_TRIES: usize = 16;

fn hash2pos(major: u32, minor: u32) -> u64 {
    u64::from(major >> 1) << 32 | u64::from(minor)
}

fn pos2hash(pos: u64) -> u32 {
    u32::try_from((pos >> 32) << 1).unwrap_or(u32::MAX)
}

/// What a hash-order stream keeps between calls.
#[derive(Debug, Default)]
pub(super) struct HashCursor {
    batch: Option<Batch>,
    cookies: Cookies,
}

/// The sorted entries of one leaf chain with positions in `lo..hi`; names
/// in one buffer. A batch read before a change still lists its range
/// correctly as of its reading, so it is served until the caller leaves it.
#[derive(Default)]
struct Batch {
    lo: u64,
    hi: u64,
    items: Vec<Item>,
    names: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
struct Item {
    pos: u64,
    ino: u32,
    ft: u8,
    len: u8,
    off: u32,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("lo", &format_args!("{:#x}", self.lo))
            .field("hi", &format_args!("{:#x}", self.hi))
            .field("entries", &self.items.len())
            .finish_non_exhaustive()
    }
}

impl Batch {
    fn name(&self, i: &Item) -> &[u8] {
        let off = i.off as usize;
        &self.names[off..off + usize::from(i.len)]
    }

    fn push(&mut self, pos: u64, ino: u32, ft: u8, name: &[u8]) {
        if pos < self.lo {
            return;
        }
        self.items.push(Item {
            pos,
            ino,
            ft,
            len: u8::try_from(name.len()).unwrap_or(u8::MAX),
            off: u32::try_from(self.names.len()).unwrap_or(u32::MAX),
        });
        self.names.extend_from_slice(&name[..name.len().min(255)]);
    }

    /// Drops what lies past `hi` (an entry outside its leaf's hash range,
    /// which no lookup finds either) and sorts.
    fn finish(mut self, hi: u64) -> Self {
        self.hi = hi;
        self.items.retain(|i| i.pos < hi);
        let mut items = std::mem::take(&mut self.items);
        items.sort_unstable_by(|a, b| a.pos.cmp(&b.pos).then_with(|| self.name(a).cmp(self.name(b))));
        self.items = items;
        self
    }
}

/// Cookies handed out inside collision groups: (cookie, group position,
/// name of the entry the cookie follows).
#[derive(Debug, Default)]
struct Cookies {
    serial: u32,
    held: VecDeque<(u64, u64, Box<[u8]>)>,
}

impl Cookies {
    /// The cookie for the entry `name` of the group at `group`: the one
    /// already handed out for it, so passes over the same directory reuse
    /// cookies instead of pushing older ones out.
    fn issue(&mut self, group: u64, name: &[u8]) -> u64 {
        if let Some(c) = self.held.iter().find(|c| c.1 == group && *c.2 == *name) {
            return c.0;
        }
        self.serial = self.serial % 0xffff_fffe + 1;
        let cookie = PAST_HASHES | u64::from(self.serial);
        if self.held.len() == MAX_COOKIES {
            self.held.pop_front();
        }
        self.held.push_back((cookie, group, name.into()));
        cookie
    }

    fn resolve(&self, cookie: u64) -> Result<(u64, Box<[u8]>)> {
        self.held
            .iter()
            .rev()
            .find(|c| c.0 == cookie)
            .map(|c| (c.1, c.2.clone()))
            .ok_or_else(|| Error::InvalidArgument(format!("directory position {cookie:#x} is no longer held")))
    }
}

impl Filesystem {
    /// The kernel's `is_dx_dir`, narrowed to what can be hashed here: with
    /// `dir_index`, an indexed directory with a usable root, or a one-block
    /// or inline directory whose default hash version is known.
    pub(super) fn hash_ordered(&self, dir: &Inode) -> Result<bool> {
        if !self.geo.features.compat.contains(CompatFeatures::DIR_INDEX) {
            return Ok(false);
        }
        if self.indexed(dir) {
            return Ok(self.dx_root(dir)?.is_some());
        }
        let small = dir.has_inline_data() || dir.size() == u64::from(self.geo.block_size);
        Ok(small && self.default_hash().is_some())
    }

    /// The hash version the kernel's readdir gives `dir`'s entries (the
    /// no-key names of an encrypted directory carry it); `None` when it
    /// lists without hashes.
    pub(crate) fn readdir_hash_version(&self, dir: &Inode) -> Result<Option<HashVersion>> {
        if !self.hash_ordered(dir)? {
            return Ok(None);
        }
        if self.indexed(dir) {
            return Ok(self.dx_root(dir)?.map(|(_, v)| v));
        }
        Ok(self.default_hash())
    }

    /// `s_def_hash_version` as the kernel applies it to unindexed
    /// directories (`ext4_htree_fill_tree`).
    fn default_hash(&self) -> Option<HashVersion> {
        let sb = self.sb.read();
        HashVersion::effective(sb.s_def_hash_version, sb.s_flags.get()).filter(|v| *v != HashVersion::SipHash)
    }

    fn name_pos(&self, dir: &Inode, name: &[u8], version: HashVersion) -> Result<u64> {
        let h = self.name_dx_hash(dir, name, version)?;
        Ok(hash2pos(h.major, h.minor))
    }

    /// Lists `dir` in hash order from `pos` (see the module doc).
    pub(super) fn hash_from(
        &self,
        dir: &Inode,
        cur: &mut HashCursor,
        pos: u64,
        mut f: impl FnMut(&DirEntry, u64) -> Result<bool>,
    ) -> Result<()> {
        if pos == 0 {
            // Cookies stay: one handed out in an earlier pass still names
            // its entry.
            cur.batch = None;
        }
        let (mut at, mut skip) = if pos > PAST_HASHES {
            let (group, name) = cur.cookies.resolve(pos)?;
            (group, Some(name))
        } else {
            (pos, None)
        };
        let mut entry = scratch();
        // Each round moves `at` to a batch's end, which lies past it.
        let rounds = (dir.size() >> self.geo.block_size_log2) + 2;
        for _ in 0..rounds {
            if at >= PAST_HASHES {
                return Ok(());
            }
            if !cur.batch.as_ref().is_some_and(|b| b.lo <= at && at < b.hi) {
                cur.batch = Some(self.hash_batch(dir, at)?);
            }
            let Some(batch) = &cur.batch else { return Ok(()) };
            let first = batch.items.partition_point(|i| i.pos < at);
            for (k, item) in batch.items.iter().enumerate().skip(first) {
                let name = batch.name(item);
                if skip.as_deref().is_some_and(|s| item.pos == at && name <= s) {
                    continue;
                }
                let next = match batch.items.get(k + 1) {
                    Some(n) if n.pos == item.pos => cur.cookies.issue(item.pos, name),
                    _ => item.pos + 1,
                };
                if !f(fill(&mut entry, item.ino, item.ft, name), next)? {
                    return Ok(());
                }
            }
            at = batch.hi;
            skip = None;
        }
        Err(Error::inconsistent(
            Location::Inode(dir.ino),
            "hash-order listing visited more leaf chains than the directory has blocks",
        ))
    }

    /// The batch holding position `at`, read while no transaction
    /// published blocks, from the directory's inode as of that moment: a
    /// leaf split publishes the new leaf, the index entry naming it and
    /// the inode mapping it together, and a mix of before and after would
    /// skip the moved names or see a leaf outside the directory. A read
    /// that overlapped a publish is retried (errors included, which are
    /// then not reported as corruption); after [`CONSISTENT_TRIES`] the
    /// last one stands.
    fn hash_batch(&self, dir: &Inode, at: u64) -> Result<Batch> {
        let mut last = None;
        for _ in 0..CONSISTENT_TRIES {
            let seq = self.publish_seq.load(Ordering::Acquire);
            if seq.is_multiple_of(2) {
                let now = self.live_dir(dir.ino)?;
                let read = self.read_batch(&now, at);
                if self.publish_seq.load(Ordering::Acquire) == seq {
                    return read;
                }
                last = Some(read);
            }
            std::thread::yield_now();
        }
        last.unwrap_or_else(|| self.read_batch(dir, at))
    }

    fn read_batch(&self, dir: &Inode, at: u64) -> Result<Batch> {
        let batch = Batch {
            lo: at,
            ..Batch::default()
        };
        if let Some((root, version)) = self.dx_root(dir)? {
            let path = self.dx_descend(dir, root, pos2hash(at))?;
            return self.chain_batch(dir, batch, path, version);
        }
        self.small_dir_batch(dir, batch)
    }

    /// The leaf `path` ends at and the leaves continuing its last hash.
    fn chain_batch(&self, dir: &Inode, mut batch: Batch, mut path: Vec<Level>, version: HashVersion) -> Result<Batch> {
        let dotdot = self.dx_dotdot(dir)?;
        batch.push(0, dir.ino, 2, b".");
        batch.push(DOTDOT_POS, dotdot, 2, b"..");
        let params = self.dx_params();
        for _ in 0..MAX_CHAIN_LEAVES {
            let leaf = path.last().map_or(0, |l| l.entries[l.at].block);
            self.hash_block(dir, leaf.into(), true, version, &mut batch)?;
            match self.next_leaf(dir, &mut path, &params)? {
                Some(h) if h & 1 == 1 => continue,
                Some(h) => return self.ascending(dir, batch, hash2pos(h, 0)),
                None => return Ok(batch.finish(PAST_HASHES)),
            }
        }
        Err(Error::Unsupported(format!(
            "directory inode {}: a hash continued over more than {MAX_CHAIN_LEAVES} leaves",
            dir.ino
        )))
    }

    fn ascending(&self, dir: &Inode, batch: Batch, hi: u64) -> Result<Batch> {
        if hi <= batch.lo {
            return Err(Error::inconsistent(
                Location::Inode(dir.ino),
                format!(
                    "htree index hash {:#x} does not ascend past {:#x}",
                    pos2hash(hi),
                    pos2hash(batch.lo)
                ),
            ));
        }
        Ok(batch.finish(hi))
    }

    /// Adds the live entries of block `logical` with their positions; an
    /// htree leaf (`leaf`) must not be an index block, the one block of an
    /// unindexed directory (not `leaf`) has its `.` and `..` first.
    fn hash_block(&self, dir: &Inode, logical: u64, leaf: bool, version: HashVersion, batch: &mut Batch) -> Result<()> {
        let (block, buf) = self.dir_block(dir, logical)?;
        let at = Location::Block { block, inode: dir.ino };
        if leaf && (logical == 0 || self.is_dx_block(dir, &buf, logical)) {
            return Err(Error::inconsistent(
                at,
                format!("htree leaf pointer names index block {logical}"),
            ));
        }
        let mut failed = None;
        // Entries that carry their hash are placed by it, with or without
        // the key (`htree_dirblock_to_tree`; one too short for it at 0).
        let stored = self.hash_in_dirent(dir);
        let pos_of = |e: &dir_entry::DirEntry<'_>| match e.name {
            b"." if !leaf => Ok(0),
            b".." if !leaf => Ok(DOTDOT_POS),
            _ if stored => Ok(dir_entry::stored_hash(&buf, e).map_or(0, |(h, m)| hash2pos(h, m))),
            name => self.name_pos(dir, name, version),
        };
        self.scan_dir_block(dir, &buf, logical, at, |e| match pos_of(e) {
            Ok(pos) => {
                batch.push(pos, e.inode, e.file_type, e.name);
                false
            }
            Err(err) => {
                failed = Some(err);
                true
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    /// The inode `..` names in an indexed directory's root block.
    fn dx_dotdot(&self, dir: &Inode) -> Result<u32> {
        let (block, buf) = self.dir_block(dir, 0)?;
        let at = Location::Block { block, inode: dir.ino };
        let mut parent = None;
        self.scan_dir_block(dir, &buf, 0, at, |e| {
            if e.name == b".." {
                parent = Some(e.inode);
            }
            parent.is_some()
        })?;
        parent.ok_or_else(|| Error::inconsistent(at, "htree root has no \"..\" entry"))
    }

    /// A one-block or inline directory, hashed whole with the default hash
    /// version. `.` and `..` sit at (0, 0) and (2, 0) as in an indexed
    /// directory, so they keep their places when this one becomes indexed
    /// (the kernel's `htree_dirblock_to_tree` hashes a block's `.` and `..`
    /// like other names; it puts them first only for inline and indexed
    /// directories).
    fn small_dir_batch(&self, dir: &Inode, mut batch: Batch) -> Result<Batch> {
        let Some(version) = self.default_hash() else {
            return Err(Error::Unsupported(format!(
                "directory inode {}: unknown default hash",
                dir.ino
            )));
        };
        if dir.has_inline_data() {
            self.for_each_inline_dir_entry(dir, |e| {
                let pos = match e.name.as_slice() {
                    b"." => 0,
                    b".." => DOTDOT_POS,
                    name => self.name_pos(dir, name, version)?,
                };
                let ft = e.file_type.map_or(0, |t| t.dirent_code());
                batch.push(pos, e.ino, ft, &e.name);
                Ok(true)
            })?;
            return Ok(batch.finish(PAST_HASHES));
        }
        if dir.size() > u64::from(self.geo.block_size) {
            return Err(Error::InvalidArgument(format!(
                "directory inode {} grew past one block without an index during a hash-order listing; \
                 rewind it",
                dir.ino
            )));
        }
        self.hash_block(dir, 0, false, version, &mut batch)?;
        Ok(batch.finish(PAST_HASHES))
    }
}
