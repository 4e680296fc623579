//! Growing a mounted file system (`ext4kit resize` on an image an
//! ext4kit mount serves): the checks and the plan of the kernel's online
//! resize (`ext4_resize_fs`, reached through `EXT4_IOC_RESIZE_FS`).
//!
//! Shrinking a mounted file system is refused, as the kernel refuses it.
//! A grow is planned with the offline planner ([`super::plan`]) against
//! the live superblock, so a grow the offline resize would refuse
//! (bigalloc, meta_bg, not enough reserved GDT blocks) is refused here
//! with the same message. Carrying it out is not done yet: the open
//! [`Filesystem`] reads its geometry (`Filesystem::geo`: block and group
//! counts) without a lock, hundreds of times, so adding groups under
//! the serving threads needs that geometry made swappable first (see
//! docs/resize.md, "Not yet"); until then the grow is refused as
//! unsupported, naming the groups it would add, before anything is
//! written or the image file extended.

use super::{ResizeReport, plan, size};
use crate::error::{Error, Result};
use crate::fs::Filesystem;

impl Filesystem {
    /// Grows this mounted file system to `want` blocks, as far as a
    /// mounted one can be: see the module documentation.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a shrink, a read-only file system
    /// or a size that cannot be had; [`Error::Unsupported`] for a grow
    /// the resize does not do, named, and for every live grow so far.
    pub fn grow_online(&self, want: u64) -> Result<ResizeReport> {
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
        if blocks <= geo.blocks_count {
            return Ok(report);
        }
        let p = plan::plan(self, blocks)?;
        report.new_blocks = blocks;
        report.new_groups = p.new.group_count;
        Err(Error::Unsupported(format!(
            "growing a mounted file system ({} to {blocks} blocks, {} new groups) is not done yet: \
             unmount it, resize the image, and mount it again",
            report.old_blocks,
            report.new_groups - report.old_groups
        )))
    }
}
