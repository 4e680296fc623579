//! Growing a mounted file system (`ext4kit resize` on an image an
//! ext4kit mount serves), as the kernel's online resize
//! (`ext4_resize_fs`, reached through `EXT4_IOC_RESIZE_FS`) does.
//!
//! The serving `Filesystem` reads its geometry (`Filesystem::geo`) and
//! descriptor table without a lock, so it is not grown in place: the
//! server stops serving for a moment and the grow goes in three steps,
//! each leaving a clean image on disk.
//! 1. [`Filesystem::plan_online_grow`] checks and plans the grow against
//!    the live superblock with the offline planner ([`super::plan`]), so a
//!    grow the offline resize would refuse (bigalloc, meta_bg past its
//!    reach) is refused with the same message while serving goes on; a
//!    shrink is refused as the kernel refuses it. A grow needing more
//!    descriptor blocks than are reserved is planned as offline: what lies
//!    where the longer table goes is moved ([`super::displace`]), where the
//!    kernel would switch to meta_bg instead.
//! 2. [`Filesystem::detach`] closes the session as an unmount does —
//!    delayed allocation written, journal committed and checkpointed,
//!    the state found at open put back, MMP released — except that files
//!    still open stay open: an unlinked one stays on the orphan list,
//!    which a crash from here on empties as after any crash.
//! 3. [`grow_detached`] runs the offline grow (crash-safe: one journal
//!    transaction switches from the old file system to the new one, see
//!    [`super::write`]) on the image file, extending it first, and the
//!    caller reopens the image with [`crate::OpenOptions::keep_open`] set
//!    to what [`Filesystem::detach`] returned.
//!
//! Moved blocks need nothing from the caller: the reopened `Filesystem`
//! reads every extent tree, block map, table location and xattr block
//! anew, and a front end names files by inode number and offset only
//! (inodes keep their numbers: a moved inode table keeps its contents).

use std::collections::HashMap;
use std::path::Path;

use super::{ResizeReport, grow, plan, size, write};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::fs::{Filesystem, OpenOptions};

/// Open counts by inode, carried from a detached session to the reopened
/// one ([`crate::OpenOptions::keep_open`]).
pub type OpenCounts = HashMap<u32, u32>;

impl Filesystem {
    /// Plans growing this mounted file system to `want` blocks: the
    /// report names the block and group counts it would have
    /// (`new_blocks == old_blocks`: nothing to do). Writes nothing.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a shrink, a read-only file system
    /// or a size that cannot be had; [`Error::Unsupported`] for a grow
    /// the resize does not do, named.
    pub fn plan_online_grow(&self, want: u64) -> Result<ResizeReport> {
        if let Some(why) = self.read_only_reason() {
            return Err(Error::InvalidArgument(format!(
                "the file system cannot be written: {why}"
            )));
        }
        let geo = self.geometry().clone();
        let mut report = ResizeReport {
            old_blocks: geo.blocks_count,
            new_blocks: geo.blocks_count,
            old_groups: geo.group_count,
            new_groups: geo.group_count,
            block_size: geo.block_size,
            ..ResizeReport::default()
        };
        if want < geo.blocks_count {
            return Err(Error::InvalidArgument(format!(
                "shrinking a mounted file system ({} to {want} blocks) is refused, as the kernel refuses it: \
                 unmount it, then resize the image",
                geo.blocks_count
            )));
        }
        plan::refuse_features(&geo)?;
        let blocks = size::fit(&self.superblock(), &geo, want)?;
        if blocks > geo.blocks_count {
            report.new_blocks = blocks;
            report.new_groups = plan::plan(self, blocks)?.new.group_count;
        }
        Ok(report)
    }

    /// Ends the session as [`Filesystem::unmount`] does but keeps the
    /// files still open: returns their open counts, and an unlinked one
    /// stays allocated on the orphan list. Nothing is written after this;
    /// dropping the `Filesystem` then releases the image.
    ///
    /// # Errors
    /// As [`Filesystem::unmount`]; the open counts are kept then, so the
    /// session can go on.
    pub fn detach(&self) -> Result<OpenCounts> {
        let open = std::mem::take(&mut *self.open_files.lock());
        if let Err(e) = self.close() {
            self.open_files.lock().extend(open);
            return Err(e);
        }
        Ok(open)
    }
}

/// Grows the file system in the image file `path`, which no one holds, to
/// `blocks` blocks (as planned by [`Filesystem::plan_online_grow`]),
/// extending the file once the grow is staged; `keep` are the files the
/// detached session still has open (kept on the orphan list).
///
/// # Errors
/// As the offline resize; [`Error::InUseElsewhere`] when the image is
/// claimed; a device that is not an image file holds fewer blocks.
pub fn grow_detached(path: &Path, blocks: u64, keep: &OpenCounts) -> Result<ResizeReport> {
    let dev = crate::tune::open_for_tune(path)?;
    let file = std::fs::metadata(path).is_ok_and(|m| m.is_file());
    grow_detached_on(Box::new(dev), blocks, keep, &mut |bytes| {
        if !file {
            return Err(Error::InvalidArgument(format!(
                "the device holds fewer than the {bytes} bytes asked for, and only an image file can be extended"
            )));
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(bytes))
            .map_err(|source| Error::Io { offset: bytes, source })
    })
}

/// [`grow_detached`] on `dev`, which `extend(bytes)` lengthens when the
/// grow needs more than it holds (called once the grow is staged, before
/// anything is written).
///
/// # Errors
/// As [`grow_detached`].
pub fn grow_detached_on(
    dev: Box<dyn BlockDevice>,
    blocks: u64,
    keep: &OpenCounts,
    extend: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<ResizeReport> {
    let opts = OpenOptions {
        count_mount: false,
        keep_open: keep.clone(),
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(dev, opts)?;
    if let Some(why) = fs.read_only_reason() {
        return Err(Error::InvalidArgument(format!("the image cannot be written: {why}")));
    }
    if fs.session.in_use() {
        fs.detach()?;
    }
    let mut report = fs.plan_online_grow(blocks)?;
    if report.new_blocks == report.old_blocks {
        fs.detach()?;
        return Ok(report);
    }
    let p = plan::plan(&fs, report.new_blocks)?;
    let st = grow::stage(&fs, &p, false)?;
    report.moved_blocks = st.moved.0;
    let bytes = report.new_blocks * u64::from(fs.geo.block_size);
    if bytes > fs.dev.len() {
        extend(bytes)?;
    }
    report.journaled = write::write(&fs, &p, st, &mut |_, _| {})?;
    report.new_groups = p.new.group_count;
    // The kept inodes must not be freed by the close on drop.
    fs.open_files.lock().clear();
    Ok(report)
}
