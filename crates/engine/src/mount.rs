//! Opening an image, one step per function as the kernel's `ext4_fill_super`
//! was split: read the superblock, check features, check geometry against
//! the device, load the group descriptors, look at the journal.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::superblock::{Geometry, RawSuperblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

use parking_lot::{Mutex, RwLock};

use crate::cache::BlockCache;
use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};
use crate::fs::{DirtyJournal, Filesystem, OpenOptions};

/// [`Filesystem::read_only_reason`] when nothing but the device keeps the
/// image read-only (inspection tools open that way and need not say so).
pub const READ_ONLY_DEVICE: &str = "the device is read-only";

/// Why a bigalloc image without extents opens read-only: block maps
/// cannot express the cluster rule (the kernel refuses to mount it).
pub const BIGALLOC_NO_EXTENTS: &str =
    "ro_compat feature bigalloc without incompat feature extents: writing needs extents, reading works";

/// Incompat features the engine reads correctly.
const READABLE_INCOMPAT: IncompatFeatures = IncompatFeatures(
    IncompatFeatures::FILETYPE.0
        | IncompatFeatures::RECOVER.0
        | IncompatFeatures::META_BG.0
        | IncompatFeatures::EXTENTS.0
        | IncompatFeatures::BIT64.0
        | IncompatFeatures::MMP.0
        | IncompatFeatures::FLEX_BG.0
        | IncompatFeatures::EA_INODE.0
        | IncompatFeatures::CSUM_SEED.0
        | IncompatFeatures::LARGEDIR.0
        | IncompatFeatures::INLINE_DATA.0
        | IncompatFeatures::CASEFOLD.0
        | IncompatFeatures::ENCRYPT.0,
);

/// Ro_compat features the engine understands (the rest force read-only).
const KNOWN_RO_COMPAT: RoCompatFeatures = RoCompatFeatures(
    RoCompatFeatures::SPARSE_SUPER.0
        | RoCompatFeatures::LARGE_FILE.0
        | RoCompatFeatures::HUGE_FILE.0
        | RoCompatFeatures::GDT_CSUM.0
        | RoCompatFeatures::DIR_NLINK.0
        | RoCompatFeatures::EXTRA_ISIZE.0
        | RoCompatFeatures::METADATA_CSUM.0
        | RoCompatFeatures::ORPHAN_PRESENT.0
        | RoCompatFeatures::ITREE.0
        | RoCompatFeatures::BIGALLOC.0
        | RoCompatFeatures::QUOTA.0
        | RoCompatFeatures::PROJECT.0
        | RoCompatFeatures::VERITY.0,
);

impl Filesystem {
    /// Opens the file system on `dev`.
    ///
    /// Reads the superblock and every group descriptor (a few blocks); no
    /// inode is read until asked for.
    ///
    /// # Errors
    /// - [`Error::Corrupt`] / [`Error::BadChecksum`] at [`Location::Superblock`]
    ///   or [`Location::Group`] for a bad superblock or descriptor.
    /// - [`Error::Unsupported`] naming each incompat feature the engine cannot
    ///   read (e.g. `compression`, or a bit no tool knows), and a casefold
    ///   `s_encoding` without known tables.
    /// - [`Error::NeedsRecovery`] when the journal is dirty and
    ///   [`OpenOptions::dirty_journal`] is [`DirtyJournal::Refuse`].
    /// - With [`DirtyJournal::Replay`] (the default), what replaying the
    ///   journal finds, located at its journal block: a log that does not
    ///   decode, a checksum mismatch inside a committed transaction, a
    ///   logged block outside the file system. Nothing is written then.
    ///
    /// With [`OpenOptions::superblock`] the superblock and descriptors are
    /// read from that backup and the file system is read-only
    /// ([`crate::backup_sb`]).
    pub fn open(dev: Box<dyn BlockDevice>, opts: OpenOptions) -> Result<Self> {
        let (dev, sb, sb_offset) = match opts.superblock {
            None => {
                let sb = read_superblock(dev.as_ref(), &opts)?;
                (dev, sb, SUPERBLOCK_OFFSET)
            }
            Some(at) => {
                let found = at.read(dev.as_ref(), opts.verify_checksums)?;
                let view: Box<dyn BlockDevice> = Box::new(crate::backup_sb::ReadOnlyView(dev));
                (view, found.sb, found.offset)
            }
        };
        // Features first: bigalloc and journal devices give the geometry
        // fields other meanings, which would read as corruption.
        let mut read_only_reason = check_features(&sb)?;
        let geo = Geometry::from_superblock(&sb).map_err(|e| Error::format(Location::Superblock, e))?;
        check_device_size(dev.as_ref(), &geo)?;
        if let Some(at) = opts.superblock {
            read_only_reason = Some(format!(
                "opened from the backup superblock at {}, read-only so that the damaged primary is not left beside newer copies; ext4kit fsck -fy rewrites the primary",
                at.describe()
            ));
        }
        if dev.read_only() && read_only_reason.is_none() {
            read_only_reason = Some(READ_ONLY_DEVICE.into());
        }
        let read_only_reason: crate::readonly::ReadOnlyReason = read_only_reason.into();
        // Before anything is written (replay, orphans), as the kernel's
        // ext4_fill_super checks MMP before loading the journal.
        let (dev, mmp) = crate::mmp::Mmp::start(dev, &sb, &geo, &opts, &read_only_reason)?;
        let csum_seed = sb.csum_seed();
        let state_at_open = sb.s_state.get();
        let cache = BlockCache::new(opts.cache_bytes, geo.block_size as usize);
        let busy = crate::alloc::busy::BusyBlocks::new(geo.first_data_block, geo.blocks_per_group);
        let dirty = crate::writeback::Dirty::new(opts.writeback_bytes);
        let kept_open = opts.keep_open.clone();
        let resv_clusters = crate::statfs::default_resv_clusters(&geo);
        let mut fs = Self {
            dev,
            sb: RwLock::new(sb),
            geo,
            groups: RwLock::new(Vec::new()),
            writer: Mutex::new(()),
            csum_seed,
            sb_offset,
            opts,
            csum_deferred: false,
            cache,
            read_only_reason,
            mmp,
            journal: Default::default(),
            journaling: false,
            open_files: Mutex::new(kept_open),
            prealloc: Default::default(),
            mb: Default::default(),
            ialloc_last: Default::default(),
            dir_hints: Default::default(),
            dir_drain: Default::default(),
            ea_cache: Default::default(),
            verity_cache: Default::default(),
            may_inline: Default::default(),
            session: crate::session::Session::new(state_at_open),
            errors: Default::default(),
            dirty: Mutex::new(dirty),
            log: Mutex::new(None),
            writeback_seq: Default::default(),
            keyring: Default::default(),
            removed_keys: Default::default(),
            resv_clusters: resv_clusters.into(),
            publish_seq: Default::default(),
            busy,
            inode_locks: Default::default(),
            delalloc: Default::default(),
            quota: Default::default(),
            data_in_flight: RwLock::new(()),
        };
        // A crash while a checkpoint was writing blocks home can leave the
        // group descriptors or the journal inode checksummed under a scheme
        // the home superblock does not have yet (a `tune` changing
        // `metadata_csum`); the journal sets them right. As e2fsck does,
        // checksums wait until the replay, then everything is read again.
        let lenient = fs.opts.dirty_journal == DirtyJournal::Replay
            && fs.sb.read().features().incompat.contains(IncompatFeatures::RECOVER);
        fs.csum_deferred = lenient;
        fs.groups = RwLock::new(fs.load_group_descs()?);
        fs.journal = fs.inspect_journal()?;
        if fs.journal.needs_recovery {
            match fs.opts.dirty_journal {
                DirtyJournal::Refuse => return Err(Error::NeedsRecovery),
                DirtyJournal::ReadStale => {}
                DirtyJournal::Replay => fs.replay_at_open()?,
            }
        } else if lenient {
            fs.csum_deferred = false;
            fs.reload()?;
        }
        fs.start_journal()?;
        fs.replay_fast_commits()?;
        fs.load_quotas();
        // As the kernel's mount does; corruption in the list is recorded
        // in the superblock and leaves the rest for e2fsck.
        if let Err(e) = fs.noting_errors("orphan_cleanup", fs.orphan_cleanup())
            && !matches!(e, Error::Corrupt(_) | Error::BadChecksum { .. })
        {
            return Err(e);
        }
        Ok(fs)
    }

    /// Loads the journal writer when this session may write to a file
    /// system with an internal journal. A journal that cannot be written
    /// (external, inconsistent) leaves the file system read-only, saying why.
    fn start_journal(&mut self) -> Result<()> {
        let journaled = self.geo.features.compat.contains(CompatFeatures::HAS_JOURNAL);
        if !journaled || !self.opts.use_journal || self.read_only_reason.is_some() {
            return Ok(());
        }
        match crate::journal::writer::Log::load(self, &self.opts.journal) {
            Ok(log) => {
                let quarter = (log.capacity() / 4) as usize * self.block_size();
                let mut d = self.dirty.lock();
                d.running_limit = d.running_limit.min(quarter);
                drop(d);
                *self.log.lock() = Some(log);
                self.journaling = true;
            }
            Err(e) => self.read_only_reason.set(format!("the journal cannot be written: {e}")),
        }
        Ok(())
    }

    /// Reads the superblock, geometry and group descriptors again, through
    /// the write-back overlay, after the journal replay changed them; the
    /// cache, which may hold blocks read before the replay, starts empty.
    pub(crate) fn reload(&mut self) -> Result<()> {
        let mut buf = [0u8; SUPERBLOCK_SIZE];
        self.read_bytes(self.sb_offset, &mut buf)?;
        let sb = parse_superblock(&buf, &self.opts)?;
        // Features first: bigalloc and journal devices give the geometry
        // fields other meanings, which would read as corruption.
        let mut read_only_reason = check_features(&sb)?;
        let geo = Geometry::from_superblock(&sb).map_err(|e| Error::format(Location::Superblock, e))?;
        check_device_size(self.dev.as_ref(), &geo)?;
        if self.dev.read_only() && read_only_reason.is_none() {
            read_only_reason = Some(READ_ONLY_DEVICE.into());
        }
        self.csum_seed = sb.csum_seed();
        self.session = crate::session::Session::new(sb.s_state.get());
        self.cache = BlockCache::new(self.opts.cache_bytes, geo.block_size as usize);
        self.busy = crate::alloc::busy::BusyBlocks::new(geo.first_data_block, geo.blocks_per_group);
        // Set, not replaced: the MMP thread shares this reason.
        if let Some(why) = read_only_reason {
            self.read_only_reason.set(why);
        }
        self.geo = geo;
        *self.sb.get_mut() = sb;
        let groups = self.load_group_descs()?;
        *self.groups.get_mut() = groups;
        self.journal = self.inspect_journal()?;
        Ok(())
    }

    /// Block holding the descriptor of `group`, following `meta_bg` when on.
    pub(crate) fn group_desc_block(&self, group: u32) -> u64 {
        let per_block = self.geo.descs_per_block();
        let desc_block = group / per_block;
        let meta_bg = self.geo.features.incompat.contains(IncompatFeatures::META_BG);
        if !meta_bg || desc_block < self.sb.read().s_first_meta_bg.get() {
            // After the primary superblock's block: `s_first_data_block`
            // save with 1 KiB blocks and bigalloc, where block 0 starts the
            // first cluster and the superblock is block 1.
            // A backup's copy follows the backup.
            let sb_block = self.sb_offset / u64::from(self.geo.block_size);
            return sb_block + 1 + u64::from(desc_block);
        }
        let mut group = desc_block * per_block;
        // From a backup, each meta group's second group holds the copy
        // (as libext2fs's `ext2fs_descriptor_block_loc2` reads it).
        if self.sb_offset != SUPERBLOCK_OFFSET && group + 1 < self.geo.group_count {
            group += 1;
        }
        let has_super = u64::from(self.group_has_super(group));
        self.geo.superblock_block(group) + has_super
    }

    /// True when `group` holds a superblock backup (and thus descriptors).
    pub fn group_has_super(&self, group: u32) -> bool {
        if self.geo.features.compat.contains(CompatFeatures::SPARSE_SUPER2) {
            let sb = self.sb.read();
            let b = [sb.s_backup_bgs[0].get(), sb.s_backup_bgs[1].get()];
            return group == 0 || b.contains(&group);
        }
        self.geo.group_has_super_sparse(group)
    }

    fn load_group_descs(&self) -> Result<Vec<RawGroupDesc>> {
        let ds = usize::from(self.geo.desc_size);
        let per_block = self.geo.descs_per_block();
        let uuid = self.sb.read().s_uuid;
        let mut out = Vec::with_capacity(self.geo.group_count as usize);
        for g in 0..self.geo.group_count {
            let blk = self.group_desc_block(g);
            let buf = self.meta_block(blk, 0).map_err(|e| relocate(e, g))?;
            let off = (g % per_block) as usize * ds;
            let desc = RawGroupDesc::parse(&buf[off..], ds).map_err(|e| Error::format(Location::Group(g), e))?;
            let r = desc.verify_checksum(&self.geo.features, self.csum_seed, &uuid, g, ds);
            self.check(Location::Group(g), r)?;
            self.check_group_layout(g, &desc)?;
            out.push(desc);
        }
        if self.sb_offset != SUPERBLOCK_OFFSET && self.geo.features.has_group_csum() {
            forget_uninit(&mut out);
        }
        Ok(out)
    }

    fn check_group_layout(&self, g: u32, d: &RawGroupDesc) -> Result<()> {
        let at = Location::Group(g);
        let uninit = d.flags() & ext4kit_format::group_desc::BG_BLOCK_UNINIT != 0;
        if !uninit || !self.geo.features.has_group_csum() {
            self.check_block(d.block_bitmap(), at)?;
        }
        self.check_block(d.inode_bitmap(), at)?;
        let table = d.inode_table();
        self.check_block(table, at)?;
        let end = table + u64::from(self.geo.inode_table_blocks);
        if end > self.geo.blocks_count {
            return Err(Error::inconsistent(
                at,
                format!("inode table {table}..{end} runs past the end of the file system"),
            ));
        }
        Ok(())
    }
}

/// A backup's descriptors are as old as the backup: a group they call
/// uninitialised may have been used since. As libext2fs does when it opens
/// from a backup, every inode table slot and bitmap is read as written.
fn forget_uninit(descs: &mut [RawGroupDesc]) {
    use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
    for d in descs {
        d.bg_flags.set(d.flags() & !(BG_BLOCK_UNINIT | BG_INODE_UNINIT));
        d.set_itable_unused(0);
    }
}

fn relocate(e: Error, group: u32) -> Error {
    match e {
        Error::Corrupt(c) => Error::inconsistent(Location::Group(group), format!("descriptor block: {c}")),
        other => other,
    }
}

fn read_superblock(dev: &dyn BlockDevice, opts: &OpenOptions) -> Result<RawSuperblock> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    if dev.len() < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE as u64 {
        return Err(Error::inconsistent(
            Location::Superblock,
            format!("the image is {} bytes, too small to hold a superblock", dev.len()),
        ));
    }
    dev.read_at(SUPERBLOCK_OFFSET, &mut buf).map_err(|source| Error::Io {
        offset: SUPERBLOCK_OFFSET,
        source,
    })?;
    parse_superblock(&buf, opts).map_err(|e| name_other_format(dev, &buf, e))
}

/// A bad magic names what the image looks like instead, when the first
/// bytes say (an XFS image, a partitioned disk, zeros).
fn name_other_format(dev: &dyn BlockDevice, sb: &[u8], e: Error) -> Error {
    if sb[0x38..0x3a] == ext4kit_format::superblock::EXT4_SUPER_MAGIC.to_le_bytes() {
        return e;
    }
    let len = dev.len().min(ext4kit_format::probe::PROBE_LEN as u64) as usize;
    let mut head = vec![0u8; len];
    match dev.read_at(0, &mut head) {
        Ok(()) => match ext4kit_format::probe::identify(&head) {
            Some(what) => Error::NotExt4(format!("it looks like {what}")),
            None => e,
        },
        Err(_) => e,
    }
}

fn parse_superblock(buf: &[u8], opts: &OpenOptions) -> Result<RawSuperblock> {
    let sb = RawSuperblock::parse(buf).map_err(|e| Error::format(Location::Superblock, e))?;
    if sb.s_magic.get() != ext4kit_format::superblock::EXT4_SUPER_MAGIC {
        return Err(Error::NotExt4(format!(
            "no ext2/3/4 magic number (0xef53) at byte 1080 but {:#06x}; if it is a damaged ext2/3/4 image, ext4kit fsck -fy repairs it from a backup superblock",
            sb.s_magic.get()
        )));
    }
    if let Err(e) = sb.verify_checksum()
        && opts.verify_checksums
    {
        return Err(Error::format(Location::Superblock, e));
    }
    Ok(sb)
}

/// Refuses what cannot be read; returns why writing must be refused, if so.
fn check_features(sb: &RawSuperblock) -> Result<Option<String>> {
    let f = sb.features();
    if f.incompat.contains(IncompatFeatures::JOURNAL_DEV) {
        return Err(Error::Unsupported(
            "an external journal device (incompat feature journal_dev), not a file system: it holds the journal of another image".into(),
        ));
    }
    let bad = IncompatFeatures(f.incompat.0 & !READABLE_INCOMPAT.0);
    if bad.0 != 0 {
        return Err(Error::Unsupported(format!(
            "incompat feature(s) {}",
            bad.names().join(", ")
        )));
    }
    crate::dir::casefold::check_encoding(sb)?;
    let unknown_ro = RoCompatFeatures(f.ro_compat.0 & !KNOWN_RO_COMPAT.0);
    if unknown_ro.0 == 0
        && f.ro_compat.contains(RoCompatFeatures::BIGALLOC)
        && !f.incompat.contains(IncompatFeatures::EXTENTS)
    {
        return Ok(Some(BIGALLOC_NO_EXTENTS.into()));
    }
    Ok((unknown_ro.0 != 0).then(|| {
        format!(
            "ro_compat feature(s) {} are not supported for writing",
            unknown_ro.names().join(", ")
        )
    }))
}

fn check_device_size(dev: &dyn BlockDevice, geo: &Geometry) -> Result<()> {
    let need = geo.blocks_count.saturating_mul(u64::from(geo.block_size));
    if dev.len() < need {
        return Err(Error::inconsistent(
            Location::Superblock,
            format!(
                "the superblock claims {} blocks ({need} bytes) but the image holds only {} bytes",
                geo.blocks_count,
                dev.len()
            ),
        ));
    }
    Ok(())
}
