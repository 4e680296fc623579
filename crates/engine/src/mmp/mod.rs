//! Multi-mount protection (`INCOMPAT_MMP`, `-O mmp`): a file system on
//! storage that several hosts reach (a SAN, a shared image) is written by
//! one of them at a time. The holder keeps rewriting a sequence number in
//! the block named by `s_mmp_block`; an opener that sees it change stays
//! away. The protocol is the kernel's (`fs/ext4/mmp.c`) and e2fsprogs'
//! (`lib/ext2fs/mmp.c`), so ext4kit, the kernel and e2fsck exclude each
//! other:
//!
//! - [`claim`]: a writable open checks the block, waits, and claims it.
//! - [`updater`]: while open, a thread keeps it updated and watches for
//!   another writer; [`Mmp::release`] (unmount, drop) marks it clean.
//! - [`guard`]: the device the engine writes through stops writing when
//!   the block is lost.
//! - [`site`]: reading and writing the block itself.
//!
//! A read-only open only reads the block and reports it
//! ([`Filesystem::mmp_status`]), as the kernel's read-only mounts and
//! e2fsprogs' read-only opens leave MMP alone.
//!
//! See `Documentation/filesystems/ext4/mmp.rst`; the record is
//! [`ext4kit_format::mmp::RawMmp`].

mod claim;
mod guard;
mod site;
mod updater;

use std::sync::{Arc, OnceLock};

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::mmp::RawMmp;
use ext4kit_format::superblock::{Geometry, RawSuperblock};

use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};
use crate::fs::{Filesystem, OpenOptions};
use crate::readonly::ReadOnlyReason;

/// What this session knows of the MMP block ([`Filesystem::mmp_status`]).
#[derive(Debug, Clone)]
pub struct MmpStatus {
    /// `s_mmp_block`.
    pub block: u64,
    /// `s_mmp_update_interval`, in seconds.
    pub update_interval: u16,
    /// The record: as this session last wrote it when it holds the block,
    /// as found at open otherwise.
    pub record: Option<RawMmp>,
    /// Why the record could not be read (a read-only open; a writable one
    /// fails instead), or why this session lost the block.
    pub problem: Option<String>,
    /// This session holds the block and keeps it updated.
    pub held: bool,
}

/// The MMP state of one open file system.
pub(crate) struct Mmp {
    /// What a read-only open found, or the block's place for a writer.
    found: Option<MmpStatus>,
    /// The updating thread of a writable open.
    updater: Option<updater::Updater>,
}

impl Mmp {
    /// No MMP: the feature is off.
    fn none() -> Self {
        Self {
            found: None,
            updater: None,
        }
    }

    /// Runs the open-time protocol on `dev` when the file system has MMP:
    /// a writable open (`read_only` unset) claims the block, waiting as the
    /// kernel does, and gets back a device that stops writing if the block
    /// is later lost; a read-only open reads the record and keeps `dev`.
    ///
    /// # Errors
    /// - [`Error::InUseElsewhere`] naming the holder's node and device when
    ///   another host or program holds the file system, or e2fsck runs.
    /// - [`Error::Corrupt`] at [`Location::Superblock`] for an
    ///   `s_mmp_block` outside the file system; [`Error::Corrupt`] /
    ///   [`Error::BadChecksum`] at the MMP block for a bad `mmp_magic` or
    ///   `mmp_checksum`; [`Error::Io`].
    pub(crate) fn start(
        dev: Box<dyn BlockDevice>,
        sb: &RawSuperblock,
        geo: &Geometry,
        opts: &OpenOptions,
        read_only: &ReadOnlyReason,
    ) -> Result<(Box<dyn BlockDevice>, Self)> {
        if !geo.features.incompat.contains(IncompatFeatures::MMP) {
            return Ok((dev, Self::none()));
        }
        let block = sb.s_mmp_block.get();
        let mut status = MmpStatus {
            block,
            update_interval: sb.s_mmp_update_interval.get(),
            record: None,
            problem: None,
            held: false,
        };
        let writable = read_only.as_deref().is_none();
        if block <= u64::from(geo.first_data_block) || block >= geo.blocks_count {
            let why = format!("s_mmp_block {block} is outside the file system: multi-mount protection cannot work");
            if writable {
                return Err(Error::inconsistent(Location::Superblock, why));
            }
            status.problem = Some(why);
            return Ok((dev, Self::with(status)));
        }
        let name = dev.name();
        let site = site::Site {
            dev: Arc::from(dev),
            block,
            offset: block << geo.block_size_log2,
            csum_seed: sb.csum_seed(),
            metadata_csum: geo.features.metadata_csum(),
            verify_checksums: opts.verify_checksums,
        };
        if !writable {
            match site.read() {
                Ok(rec) => status.record = Some(rec),
                Err(e) => status.problem = Some(e.to_string()),
            }
            return Ok((Box::new(site.dev), Self::with(status)));
        }
        let rec = claim::claim(
            &site,
            status.update_interval,
            opts.mmp_min_check_interval,
            name.as_bytes(),
        )?;
        let lost = Arc::new(OnceLock::new());
        let guard = guard::Guard {
            inner: site.dev.clone(),
            lost: lost.clone(),
        };
        let update = status.update_interval;
        match updater::Updater::start(
            site.clone(),
            rec,
            update,
            opts.mmp_min_check_interval,
            lost,
            read_only.share(),
        ) {
            Ok(u) => Ok((
                Box::new(guard),
                Self {
                    found: Some(status),
                    updater: Some(u),
                },
            )),
            Err(source) => {
                let mut clean = rec;
                clean.mmp_seq.set(ext4kit_format::mmp::EXT4_MMP_SEQ_CLEAN);
                let _ = site.write(&mut clean);
                Err(Error::Io {
                    offset: site.offset,
                    source: std::io::Error::new(source.kind(), format!("cannot start the MMP thread: {source}")),
                })
            }
        }
    }

    fn with(status: MmpStatus) -> Self {
        Self {
            found: Some(status),
            updater: None,
        }
    }

    /// Stops updating and marks the block clean (unmount, drop); nothing
    /// when this session does not hold it. Idempotent.
    ///
    /// # Errors
    /// [`Error::InUseElsewhere`] when the block was lost meanwhile;
    /// [`Error::Io`].
    pub(crate) fn release(&self) -> Result<()> {
        self.updater.as_ref().map_or(Ok(()), updater::Updater::release)
    }

    fn status(&self) -> Option<MmpStatus> {
        let mut s = self.found.clone()?;
        if let Some(u) = &self.updater {
            s.record = Some(u.record());
            s.problem = u.lost().map(str::to_string);
            s.held = s.problem.is_none();
        }
        Some(s)
    }
}

/// This host's node name, as written into MMP blocks.
pub(crate) fn host_nodename() -> Vec<u8> {
    site::nodename()
}

impl Filesystem {
    /// The multi-mount protection block as this session knows it; `None`
    /// without the `mmp` feature.
    pub fn mmp_status(&self) -> Option<MmpStatus> {
        self.mmp.status()
    }
}
