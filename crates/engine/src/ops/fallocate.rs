//! fallocate(2) on regular files (`ext4_fallocate`): preallocating
//! unwritten extents, punching holes, and zeroing ranges by turning whole
//! blocks unwritten. Unwritten extents (`ee_len` > 32768, see `ifork.rst`)
//! read as zeros, so preallocation costs no data writes.
//!
//! Semantics follow the kernel (checked against Linux 6.18 in
//! `tests/fallocate.rs`): preallocation and zeroing need extent-mapped
//! files (`EOPNOTSUPP` otherwise, as `ext4_fallocate`); punching works on
//! block maps too (`ext4_ind_remove_space`); inline bodies are moved out
//! first (`ext4_convert_inline_data`). The whole call is one transaction, so
//! running out of space half-way leaves the image as it was (the kernel
//! keeps what it allocated before `ENOSPC`).

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::extent_edit::{mark, normalize, partition};
use crate::inode::extent_write::charge_blocks;
use crate::inode::write::set_times;
use crate::txn::Txn;

/// The kernel's page size on the architectures ext4 images usually come
/// from; a hole punched past `i_size` ends at the page holding `i_size`.
const PAGE_SIZE: u64 = 4096;

/// What [`Filesystem::fallocate`] does: the supported `FALLOC_FL_*` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocMode {
    /// Mode 0 (`keep_size: false`) or `FALLOC_FL_KEEP_SIZE`: unwritten
    /// extents over the holes of the range; without `keep_size` the size
    /// grows to the end of the range.
    Allocate {
        /// `FALLOC_FL_KEEP_SIZE`: the size stays, blocks may lie past it.
        keep_size: bool,
    },
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: whole blocks freed,
    /// partial blocks at the edges zeroed; the size never changes.
    PunchHole,
    /// `FALLOC_FL_ZERO_RANGE` (optionally `| FALLOC_FL_KEEP_SIZE`): whole
    /// blocks become unwritten (allocated where they were holes), partial
    /// blocks at the edges are zeroed.
    ZeroRange {
        /// `FALLOC_FL_KEEP_SIZE`.
        keep_size: bool,
    },
}

impl FallocMode {
    /// `FALLOC_FL_KEEP_SIZE` (linux/falloc.h).
    pub const FL_KEEP_SIZE: u32 = 0x01;
    /// `FALLOC_FL_PUNCH_HOLE`.
    pub const FL_PUNCH_HOLE: u32 = 0x02;
    /// `FALLOC_FL_NO_HIDE_STALE`.
    pub const FL_NO_HIDE_STALE: u32 = 0x04;
    /// `FALLOC_FL_COLLAPSE_RANGE`.
    pub const FL_COLLAPSE_RANGE: u32 = 0x08;
    /// `FALLOC_FL_ZERO_RANGE`.
    pub const FL_ZERO_RANGE: u32 = 0x10;
    /// `FALLOC_FL_INSERT_RANGE`.
    pub const FL_INSERT_RANGE: u32 = 0x20;
    /// `FALLOC_FL_UNSHARE_RANGE`.
    pub const FL_UNSHARE_RANGE: u32 = 0x40;
    /// `FALLOC_FL_WRITE_ZEROES` (Linux 6.17).
    pub const FL_WRITE_ZEROES: u32 = 0x80;

    /// The mode for fallocate(2)'s `mode` argument. As in Linux since 6.11
    /// (`vfs_fallocate` then `ext4_fallocate`; checked on 6.18), one
    /// operation bit at most, plus `FALLOC_FL_KEEP_SIZE`, which punching
    /// requires.
    ///
    /// # Errors
    /// [`Error::Unsupported`] (`EOPNOTSUPP`) for everything else: unknown
    /// bits, several operations at once (the kernel answers `EOPNOTSUPP` to
    /// those too, not `EINVAL`), punch without keep-size, and the operations
    /// this mode type does not carry: collapse and insert range (ext4 has
    /// them: [`Filesystem::collapse_range`], [`Filesystem::insert_range`]),
    /// unshare range, no-hide-stale and write-zeroes (ext4 has not).
    pub fn from_linux_flags(flags: u32) -> Result<Self> {
        let keep_size = flags & Self::FL_KEEP_SIZE != 0;
        let unsupported = |what: &str| Err(Error::Unsupported(format!("fallocate mode {flags:#x}: {what}")));
        match flags & !Self::FL_KEEP_SIZE {
            0 => Ok(Self::Allocate { keep_size }),
            Self::FL_PUNCH_HOLE if keep_size => Ok(Self::PunchHole),
            Self::FL_PUNCH_HOLE => unsupported("punch hole needs keep size"),
            Self::FL_ZERO_RANGE => Ok(Self::ZeroRange { keep_size }),
            Self::FL_COLLAPSE_RANGE | Self::FL_INSERT_RANGE => {
                unsupported("collapse and insert range are not supported")
            }
            _ => unsupported("unsupported operation or combination"),
        }
    }

    /// The `FALLOC_FL_*` bits of this mode.
    pub fn linux_flags(self) -> u32 {
        match self {
            Self::Allocate { keep_size } => u32::from(keep_size) * Self::FL_KEEP_SIZE,
            Self::PunchHole => Self::FL_PUNCH_HOLE | Self::FL_KEEP_SIZE,
            Self::ZeroRange { keep_size } => Self::FL_ZERO_RANGE | (u32::from(keep_size) * Self::FL_KEEP_SIZE),
        }
    }

    fn grows_size(self) -> bool {
        matches!(
            self,
            Self::Allocate { keep_size: false } | Self::ZeroRange { keep_size: false }
        )
    }
}

impl Filesystem {
    /// fallocate(2) on regular file `ino` for bytes `offset..offset + len`.
    ///
    /// Block ranges: allocation and zeroing cover every block the byte
    /// range touches; punching frees the blocks wholly inside it (after
    /// clamping, as the kernel does, to the page holding `i_size`; a punch
    /// starting at or past `i_size` does nothing). Updates mtime and ctime.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `len == 0`; [`Error::FileTooBig`] past
    /// 2^32 blocks; [`Error::IsDir`]; [`Error::Unsupported`] for
    /// allocation or zeroing on a block-mapped (ext2/ext3) file;
    /// [`Error::NoSpace`]; [`Error::ReadOnly`]. Nothing changes on error.
    pub fn fallocate(&self, ino: u32, offset: u64, len: u64, mode: FallocMode) -> Result<()> {
        if len == 0 {
            return Err(Error::InvalidArgument("fallocate of zero bytes".into()));
        }
        let end = offset.checked_add(len).ok_or(Error::FileTooBig)?;
        let _file = self.inode_locks.write(ino);
        self.flush_locked(ino)?;
        let mut txn = Txn::begin(self)?;
        txn.under_inode_lock();
        let mut inode = txn.inode(ino)?;
        inode.require_regular()?;
        // vfs_fallocate: EFBIG past the largest file, whatever the mode.
        self.check_file_end(&inode, end)?;
        // vfs_fallocate: nothing on an immutable file, only plain
        // allocation on an append-only one.
        super::flags::require_not_verity(&inode)?;
        match mode {
            FallocMode::Allocate { .. } => super::flags::require_mutable(&inode)?,
            _ => super::flags::require_changeable(&inode)?,
        }
        if mode == FallocMode::PunchHole && offset >= inode.size() {
            return Ok(());
        }
        if inode.has_inline_data() {
            txn.uninline(&mut inode)?;
        }
        if mode != FallocMode::PunchHole && !inode.uses_extents() {
            return Err(Error::Unsupported(format!(
                "fallocate {mode:?} on inode {ino}: needs an extent-mapped file (unwritten extents)"
            )));
        }
        match mode {
            FallocMode::Allocate { .. } => txn.preallocate(&mut inode, offset, end)?,
            FallocMode::PunchHole => {
                txn.use_reserve();
                txn.punch_hole(&mut inode, offset, end)?
            }
            FallocMode::ZeroRange { .. } => txn.zero_range(&mut inode, offset, end)?,
        }
        if mode.grows_size() && end > inode.size() {
            inode.raw.set_size(end);
        }
        set_times(&mut inode.raw, clock::now(), false);
        txn.write_inode(&mut inode)?;
        txn.commit()
    }
}

impl Txn<'_> {
    fn bs(&self) -> u64 {
        u64::from(self.fs.geo.block_size)
    }

    /// Unwritten extents over the holes of every block `offset..end` touches.
    fn preallocate(&mut self, inode: &mut Inode, offset: u64, end: u64) -> Result<()> {
        let bs = self.bs();
        let mut exts = self.extents(inode)?;
        self.alloc_unwritten(inode, &mut exts, offset / bs, end.div_ceil(bs))?;
        self.replace_extents(inode, normalize(exts))
    }

    /// Frees the whole blocks of `offset..end` (clamped to the page holding
    /// `i_size`) and zeroes the partial ones at its edges.
    fn punch_hole(&mut self, inode: &mut Inode, offset: u64, end: u64) -> Result<()> {
        let bs = self.bs();
        let end = if end > inode.size() {
            inode.size().next_multiple_of(PAGE_SIZE.max(bs))
        } else {
            end
        };
        self.zero_edges(inode, offset, end)?;
        let (lo, hi) = (offset.div_ceil(bs), end / bs);
        if lo >= hi {
            return Ok(());
        }
        if !inode.uses_extents() {
            return self.punch_block_map(inode, lo, hi);
        }
        let (kept, gone) = partition(&self.extents(inode)?, lo, hi);
        let freed = self.release_runs(&gone, &kept)?;
        charge_blocks(&mut inode.raw, -freed, self.fs.geo.block_size);
        self.replace_extents(inode, kept)
    }

    /// Every block `offset..end` touches allocated; the whole ones become
    /// unwritten, the partial ones at the edges are zeroed where written.
    fn zero_range(&mut self, inode: &mut Inode, offset: u64, end: u64) -> Result<()> {
        let bs = self.bs();
        let mut exts = self.extents(inode)?;
        self.alloc_unwritten(inode, &mut exts, offset / bs, end.div_ceil(bs))?;
        let (lo, hi) = (offset.div_ceil(bs), end / bs);
        let exts = if lo < hi {
            mark(&exts, lo, hi, true)
        } else {
            normalize(exts)
        };
        self.replace_extents(inode, exts)?;
        self.zero_edges(inode, offset, end)
    }

    /// Zeroes the bytes of `offset..end` that lie in partial blocks (at
    /// most two): only initialized blocks need it, holes and unwritten
    /// blocks read as zeros already.
    fn zero_edges(&mut self, inode: &Inode, offset: u64, end: u64) -> Result<()> {
        let bs = self.bs();
        let head_end = end.min(offset.next_multiple_of(bs));
        if !offset.is_multiple_of(bs) {
            self.zero_in_block(inode, offset, head_end)?;
        }
        let tail_start = (end - end % bs).max(head_end);
        if !end.is_multiple_of(bs) && tail_start < end {
            self.zero_in_block(inode, tail_start, end)?;
        }
        Ok(())
    }

    /// Zeroes `from..to` (inside one block) if that block is initialized.
    pub(crate) fn zero_in_block(&mut self, inode: &Inode, from: u64, to: u64) -> Result<()> {
        let bs = self.bs();
        let lblk = from / bs;
        let hit = self
            .body_runs(inode)?
            .into_iter()
            .find(|e| u64::from(e.logical) <= lblk && lblk < u64::from(e.logical) + u64::from(e.len));
        let Some(e) = hit.filter(|e| !e.unwritten) else {
            return Ok(());
        };
        let at = (e.physical + (lblk - u64::from(e.logical))) * bs;
        let mut buf = vec![0u8; bs as usize];
        self.read_data(at, &mut buf)?;
        // An encrypted block is one cipher unit: zeroed in plaintext.
        let key = self.fs.contents_key(inode)?;
        if let Some(k) = &key {
            k.decrypt_block(lblk, &mut buf)?;
        }
        buf[(from % bs) as usize..(from % bs + (to - from)) as usize].fill(0);
        if let Some(k) = &key {
            k.encrypt_block(lblk, &mut buf)?;
        }
        self.write_data(at, buf);
        Ok(())
    }
}
