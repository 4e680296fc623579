//! [`Filesystem`]: an opened image, its validated geometry and group
//! descriptors, and the block-read primitives every other module uses.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use ext4kit_format::features::Features;
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::superblock::{Geometry, RawSuperblock};

use crate::cache::BlockCache;
use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};

/// What to do when the journal holds transactions that were never
/// checkpointed (the image was not unmounted cleanly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirtyJournal {
    /// Replay the journal as the kernel's mount does (default): into the
    /// image on a writable device, in memory only on a read-only one.
    #[default]
    Replay,
    /// Refuse to open ([`Error::NeedsRecovery`]).
    Refuse,
    /// Open and read the on-disk state as it is, which may be stale.
    ReadStale,
}

/// Options for [`Filesystem::open`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Verify metadata checksums on every read (default). When false, a
    /// mismatch is ignored and the structure is used as found.
    pub verify_checksums: bool,
    /// Policy for a dirty journal.
    pub dirty_journal: DirtyJournal,
    /// Bytes of metadata to cache.
    pub cache_bytes: usize,
    /// Flush the device after every operation (like `-o sync`). Off by
    /// default: as with the kernel, changes are durable after
    /// [`Filesystem::sync`] or when the `Filesystem` is dropped.
    pub sync_writes: bool,
    /// Count a session that writes as a mount, as the kernel does: bump
    /// `s_mnt_count` and stamp `s_mtime` at the first write (default). Off
    /// for building an image (like `mke2fs -d`), which is no mount; the
    /// clean/in-use state in `s_state` is kept either way.
    pub count_mount: bool,
    /// Most bytes of committed metadata held in memory before they are
    /// written back (see the `writeback` module); 64 MiB by default.
    pub writeback_bytes: usize,
    /// How the journal is written (`data=`, journal checksums, async
    /// commit), when the file system has one.
    pub journal: crate::journal::JournalOptions,
    /// Write through the journal when the file system has one (default).
    /// Off for building an image (`mkfs -d`, `import`), which, like
    /// `mke2fs -d`, writes in place: the superblock says "not clean" until
    /// the build is done.
    pub use_journal: bool,
    /// The shortest check interval of multi-mount protection, in seconds
    /// (default 5, the kernel's and e2fsprogs' `EXT4_MMP_MIN_CHECK_INTERVAL`).
    /// A writable open of an `mmp` image waits `2 * check + 1` seconds,
    /// where `check` is the largest of this, `s_mmp_update_interval` and
    /// the holder's `mmp_check_interval`: lowering it shortens the wait
    /// only on images made with a short interval (`mkfs -E
    /// mmp_update_interval=1`, for tests); the check itself always runs.
    pub mmp_min_check_interval: u16,
    /// Block and inode allocation policies and their tunables (`-o
    /// alloc=`, `inode_alloc=`, `stripe=`…): the kernel's by default.
    pub alloc: crate::alloc::AllocOptions,
    /// The order directory streams list in ([`Filesystem::dir_stream`]):
    /// the kernel's hash order by default (`-o readdir=`, `readdir_snapshot=`).
    pub readdir: crate::dir::ReadDirOptions,
    /// Read the superblock and group descriptors from a backup copy
    /// instead of the primary (e2fsck's `-b`/`-B`, the kernel's `sb=`);
    /// the file system is then read-only (see [`crate::backup_sb`]).
    pub superblock: Option<crate::SuperblockAt>,
    /// Whose layout new inline bodies follow on an `inline_data` file
    /// system: the kernel's by default, `mke2fs -d`'s for building images.
    pub inline: crate::InlinePolicy,
    /// The device holding the file system's external journal
    /// (`s_journal_inum` 0), checked against `s_journal_uuid` at open
    /// (the kernel's `journal_path=`; see [`crate::journal::external`]).
    pub journal_device: Option<crate::journal::JournalDevice>,
    /// Open counts carried over from the session that detached the image
    /// ([`Filesystem::detach`]) to let it grow while mounted: these inodes
    /// start open, and the orphan list, which holds the unlinked ones
    /// among them, is kept rather than emptied at open.
    pub keep_open: HashMap<u32, u32>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            verify_checksums: true,
            dirty_journal: DirtyJournal::Replay,
            cache_bytes: 64 << 20,
            sync_writes: false,
            count_mount: true,
            writeback_bytes: 64 << 20,
            journal: crate::journal::JournalOptions::default(),
            use_journal: true,
            mmp_min_check_interval: ext4kit_format::mmp::EXT4_MMP_MIN_CHECK_INTERVAL,
            alloc: crate::alloc::AllocOptions::default(),
            readdir: crate::dir::ReadDirOptions::default(),
            superblock: None,
            inline: crate::InlinePolicy::Kernel,
            journal_device: None,
            keep_open: HashMap::new(),
        }
    }
}

/// An opened ext2/3/4 file system. `Send + Sync`: any number of threads may
/// read through one instance.
pub struct Filesystem {
    pub(crate) dev: Box<dyn BlockDevice>,
    /// The primary superblock as last written (free counts, state).
    pub(crate) sb: RwLock<RawSuperblock>,
    pub(crate) geo: Geometry,
    /// Group descriptors as last written; layout fields never change.
    pub(crate) groups: RwLock<Vec<RawGroupDesc>>,
    /// Serializes transactions (one at a time). The file data of
    /// [`Filesystem::write`] is written after it is released, under the
    /// file's inode lock (see [`crate::inode_locks`] for the lock order).
    pub(crate) writer: Mutex<()>,
    pub(crate) csum_seed: u32,
    /// Byte offset of the superblock read at open: 1024, or a backup's.
    pub(crate) sb_offset: u64,
    pub(crate) opts: OpenOptions,
    /// File-system checksums wait until the journal is replayed (set at
    /// open only, see `mount.rs`); the journal's own checksums do not.
    pub(crate) csum_deferred: bool,
    pub(crate) cache: BlockCache,
    pub(crate) read_only_reason: crate::readonly::ReadOnlyReason,
    pub(crate) journal: crate::journal::JournalInfo,
    /// Changes go through the journal writer (`log`).
    pub(crate) journaling: bool,
    /// Blocks freed by transactions the journal has not committed.
    pub(crate) busy: crate::alloc::busy::BusyBlocks,
    /// Blocks kept in memory for streaming files ([`crate::alloc::prealloc`]).
    pub(crate) prealloc: crate::alloc::prealloc::Preallocs,
    /// The multiblock allocator's buddies, group lists and counts.
    pub(crate) mb: Mutex<crate::alloc::mballoc::MbState>,
    /// Where each directory's latest new inode went ([`crate::alloc::ialloc`]).
    pub(crate) ialloc_last: crate::alloc::ialloc::LastGroups,
    /// Open counts by inode ([`Filesystem::open_file`]).
    pub(crate) open_files: Mutex<HashMap<u32, u32>>,
    /// Where the next new name of each linear directory goes
    /// ([`Filesystem::create_new`]).
    pub(crate) dir_hints: crate::dir::hint::DirHints,
    /// How far each directory being emptied is known to be empty
    /// (`crate::dir::drain`).
    pub(crate) dir_drain: crate::dir::drain::DrainCursors,
    /// Value inodes met this session, by value hash ([`crate::ops::ea_cache`]).
    pub(crate) ea_cache: crate::ops::ea_cache::EaInodeCache,
    /// Verity descriptors and proven Merkle tree blocks ([`crate::verity::cache`]).
    pub(crate) verity_cache: crate::verity::cache::VerityCache,
    /// New regular files whose first write may make them inline.
    pub(crate) may_inline: crate::inode::inline::MayInline,
    /// The superblock's mounted/clean state in this session.
    pub(crate) session: crate::session::Session,
    /// Errors found and not yet in the superblock ([`crate::fs_error`]).
    pub(crate) errors: crate::fs_error::ErrorNotes,
    /// Multi-mount protection: the claim a writable open holds on the MMP
    /// block and the thread that keeps it ([`crate::mmp`]).
    pub(crate) mmp: crate::mmp::Mmp,
    /// Committed metadata not yet written to the device.
    pub(crate) dirty: Mutex<crate::writeback::Dirty>,
    /// The journal writer, when the file system has a journal and is
    /// opened for writing. Held through every write-back, so one runs at a
    /// time; taken before `data_in_flight` and `dirty`.
    pub(crate) log: Mutex<Option<crate::journal::writer::Log>>,
    /// Odd while a write-back is writing; bumped at its start and end, so a
    /// read that overlapped one can tell and read again.
    pub(crate) writeback_seq: std::sync::atomic::AtomicU64,
    /// Odd while a transaction's blocks enter the cache ([`Filesystem::publish`]);
    /// bumped at its start and end, so a reader of several blocks that must
    /// agree (an htree index and its leaves) can tell it saw a mix.
    pub(crate) publish_seq: std::sync::atomic::AtomicU64,
    /// Per-inode locks over file data (see [`crate::inode_locks`]).
    pub(crate) inode_locks: crate::inode_locks::InodeLocks,
    /// File data held for delayed allocation ([`crate::delalloc`]).
    pub(crate) delalloc: crate::delalloc::Delalloc,
    /// Quota files held by a writable session ([`crate::quota`]).
    pub(crate) quota: Mutex<crate::quota::Quotas>,
    /// Held shared by every writer whose file data is still on its way to
    /// the device after its metadata was published (see [`crate::ordered`]);
    /// taken exclusive by the write-back, so metadata never reaches the
    /// device before the data it points at (`data=ordered`).
    pub(crate) data_in_flight: RwLock<()>,
    /// fscrypt master keys given to this session ([`crate::crypt`]).
    pub(crate) keyring: crate::crypt::Keyring,
    /// Keys removed while files under them were open ([`crate::crypt::removal`]).
    pub(crate) removed_keys: crate::crypt::removal::Lingering,
    /// ext4's own reserve in clusters (`s_resv_clusters`), see
    /// [`Filesystem::resv_blocks`].
    pub(crate) resv_clusters: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Filesystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filesystem")
            .field("geometry", &self.geo)
            .finish_non_exhaustive()
    }
}

impl Drop for Filesystem {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; `unmount` reports them.
        let _ = self.close();
    }
}

impl Filesystem {
    /// Makes every committed change durable: writes the metadata waiting
    /// in memory, then flushes the device. Errors found meanwhile are in
    /// the superblock afterwards ([`Filesystem::commit_errors`]).
    ///
    /// # Errors
    /// [`Error::Io`] when the device cannot write or flush.
    pub fn sync(&self) -> Result<()> {
        let flushed = self.flush_all();
        self.sync_committed()?;
        flushed
    }

    /// [`Filesystem::sync`] of what transactions committed, leaving file
    /// data held for delayed allocation where it is: for callers that may
    /// hold the writer lock or an inode lock.
    pub(crate) fn sync_committed(&self) -> Result<()> {
        self.commit_errors()?;
        self.write_back_published()?;
        if self.journaling {
            // Every commit ends with a flush, and the data of each
            // transaction was written before the commit that carried it.
            return Ok(());
        }
        self.dev.flush().map_err(|source| self.write_failed(0, source))
    }

    /// File data goes through the journal (`data=journal`).
    pub(crate) fn journals_data(&self) -> bool {
        self.journaling && self.opts.journal.data == crate::journal::DataMode::Journal
    }

    /// A copy of the primary superblock as last written.
    pub fn superblock(&self) -> RawSuperblock {
        *self.sb.read()
    }

    /// The validated geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The feature sets.
    pub fn features(&self) -> Features {
        self.geo.features
    }

    /// A copy of the group descriptors, one per block group.
    pub fn group_descs(&self) -> Vec<RawGroupDesc> {
        self.groups.read().clone()
    }

    /// A copy of the descriptor of `group`.
    pub(crate) fn group_desc(&self, group: u32) -> Result<RawGroupDesc> {
        self.groups
            .read()
            .get(group as usize)
            .copied()
            .ok_or_else(|| Error::inconsistent(Location::Group(group), "group number out of range"))
    }

    /// What the journal looked like at open time.
    pub fn journal_info(&self) -> &crate::journal::JournalInfo {
        &self.journal
    }

    /// Why the image can only be read, if it can only be read (an unknown
    /// ro_compat feature, a read-only device, a device write that failed…).
    pub fn read_only_reason(&self) -> Option<&str> {
        self.read_only_reason.as_deref()
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> usize {
        self.geo.block_size as usize
    }

    /// Maps a decode failure to an error, or lets a checksum mismatch pass
    /// when checksums are not being verified.
    pub(crate) fn check(&self, at: Location, r: ext4kit_format::error::Result<()>) -> Result<()> {
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.is_checksum() && (!self.opts.verify_checksums || self.csum_deferred) => Ok(()),
            Err(e) => Err(Error::format(at, e)),
        }
    }

    /// [`Filesystem::check`] for the journal's own checksums, which a
    /// deferred check of the file system's does not cover.
    pub(crate) fn check_journal(&self, at: Location, r: ext4kit_format::error::Result<()>) -> Result<()> {
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.is_checksum() && !self.opts.verify_checksums => Ok(()),
            Err(e) => Err(Error::format(at, e)),
        }
    }

    /// Reads `buf.len()` bytes at byte `offset` of the device.
    /// Reads `buf.len()` bytes at byte `offset`, as committed: metadata
    /// still waiting in the write-back cache is laid over what the device
    /// holds, so a directory read as a file sees its latest entries.
    pub(crate) fn read_bytes(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        use std::sync::atomic::Ordering;
        loop {
            let seq = self.writeback_seq.load(Ordering::Acquire);
            self.dev
                .read_at(offset, buf)
                .map_err(|source| Error::Io { offset, source })?;
            self.overlay_dirty(offset, buf);
            // A write-back that ran meanwhile may have dropped a dirty copy
            // after this read saw the device's older bytes.
            if seq.is_multiple_of(2) && self.writeback_seq.load(Ordering::Acquire) == seq {
                return Ok(());
            }
            std::thread::yield_now();
        }
    }

    /// Checks that `block` lies inside the file system.
    pub(crate) fn check_block(&self, block: u64, at: Location) -> Result<()> {
        if block < u64::from(self.geo.first_data_block) || block >= self.geo.blocks_count {
            return Err(Error::inconsistent(
                at,
                format!("block number {block} is outside the file system"),
            ));
        }
        Ok(())
    }

    /// Reads metadata block `block` through the cache; on a miss, reads up to
    /// `ahead` blocks from it (the caller knows them to be metadata of the
    /// same kind, such as the rest of an inode table) in one request. One
    /// large read instead of many small ones is what makes a cold-cache walk
    /// fast (the kernel's `inode_readahead_blks` does the same). Blocks
    /// already cached are kept. `owner` names the inode the block belongs to
    /// (0 when none) for error reports.
    pub(crate) fn meta_block_ahead(&self, block: u64, ahead: u64, owner: u32) -> Result<Arc<[u8]>> {
        self.check_block(block, Location::Block { block, inode: owner })?;
        if let Some(b) = self.cache.get(block) {
            return Ok(b);
        }
        if let Some(b) = self.dirty_block(block) {
            self.cache.insert_if_absent(block, b.clone());
            return Ok(b);
        }
        let n = ahead.clamp(1, self.geo.blocks_count - block) as usize;
        let bs = self.block_size();
        let mut buf = vec![0u8; n * bs];
        self.read_bytes(block << self.geo.block_size_log2, &mut buf)?;
        // read_bytes laid the write-back copies over the device's; a block
        // committed while this read ran is already cached and kept.
        let mut first = None;
        for (i, chunk) in buf.chunks_exact(bs).enumerate() {
            let data: Arc<[u8]> = chunk.into();
            self.cache.insert_if_absent(block + i as u64, data.clone());
            first.get_or_insert(data);
        }
        first.ok_or_else(|| Error::inconsistent(Location::Block { block, inode: owner }, "empty metadata read"))
    }

    /// Reads one metadata block through the cache.
    pub(crate) fn meta_block(&self, block: u64, owner: u32) -> Result<Arc<[u8]>> {
        self.meta_block_ahead(block, 1, owner)
    }
}
