//! `resize`: growing and shrinking an unmounted file system, as resize2fs
//! does, in three steps:
//! - [`plan`]: the new superblock — the size settled on ([`size::fit`]),
//!   block and inode counts, reserved GDT blocks, `s_backup_bgs`;
//! - [`grow`]: the new groups' tables placed as resize2fs places them
//!   ([`place`], flex_bg packing included), their descriptors, bitmaps,
//!   superblock and descriptor copies, the resize inode ([`resize_inode`]),
//!   all staged in memory ([`stage`]);
//! - [`write`]: written in an order that leaves the old or the new file
//!   system after a crash, the switch being one journal transaction.
//!
//! - [`shrink`]: the groups past the new end cut, after the inodes in use
//!   there are renumbered into the kept groups ([`inodes`]) and the blocks
//!   in use past the end moved below it ([`moves`], into [`dest`]).
//!
//! A grow needing more descriptor blocks than are reserved (without
//! meta_bg) first moves the tables and data in the way ([`displace`]).
//!
//! Refused, each with a message naming it: an image that needs e2fsck
//! first and a shrink below the `-P` estimate ([`minimum_size`]), unless
//! forced (as `resize2fs -f`); bigalloc; a shrink whose data does not
//! fit. Kept groups' tables past a shrink's end are moved ([`relocate`]).

mod dest;
mod displace;
mod grow;
mod inodes;
mod minimum;
mod moves;
mod online;
mod place;
mod plan;
mod relocate;
mod resize_inode;
mod shrink;
mod size;
mod stage;
mod superblocks;
mod usage;
mod write;

use std::path::Path;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR, STATE_VALID};

use crate::device::BlockDevice;
use crate::error::{Error, Location, Result};
use crate::fs::{Filesystem, OpenOptions};

pub use minimum::minimum_size;
pub use online::{OpenCounts, grow_detached, grow_detached_on};
pub use size::{SizeSpec, parse_size};

/// How to resize.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizeOptions {
    /// Resize an image that should be checked first, or shrink below the
    /// estimated minimum (`resize2fs -f`).
    pub force: bool,
    /// Zero the new inode tables even where a group checksum lets them be
    /// left for the kernel's lazy initialisation (resize2fs's
    /// `RESIZE2FS_FORCE_ITABLE_INIT`); without a group checksum they are
    /// always zeroed.
    pub zero_itables: bool,
}

/// What [`resize`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizeReport {
    /// Blocks before.
    pub old_blocks: u64,
    /// Blocks after.
    pub new_blocks: u64,
    /// Groups before and after.
    pub old_groups: u32,
    /// Groups after.
    pub new_groups: u32,
    /// Block size in bytes.
    pub block_size: u32,
    /// True when the switch was one journal transaction.
    pub journaled: bool,
    /// Blocks a shrink moved below the new end.
    pub moved_blocks: u64,
    /// Inodes a shrink renumbered out of the groups it cut.
    pub moved_inodes: u32,
}

/// Resizes the file system on `dev` to `want` blocks (`None`: as many as
/// the device holds). `progress(done, total)` is called as blocks go out.
///
/// # Errors
/// [`Error::InvalidArgument`] for an image needing a check (see
/// [`needs_check`]) or a size that cannot be had; [`Error::Unsupported`]
/// for what this resize does not do, named; I/O and corruption errors.
pub fn resize(
    dev: Box<dyn BlockDevice>,
    want: Option<u64>,
    opts: &ResizeOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ResizeReport> {
    let room = dev.len();
    resize_within(dev, want, room, opts, progress, &mut |_| Ok(()))
}

/// [`resize`] on a device that `extend(bytes)` can lengthen to `room`
/// bytes: it is called once the change is planned and staged, before the
/// first write, so a refused resize leaves the device as it was.
fn resize_within(
    dev: Box<dyn BlockDevice>,
    want: Option<u64>,
    room: u64,
    opts: &ResizeOptions,
    progress: &mut dyn FnMut(u64, u64),
    extend: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<ResizeReport> {
    let raw = read_superblock(dev.as_ref())?;
    if !opts.force
        && let Some(why) = needs_check(&raw)
    {
        return Err(Error::InvalidArgument(format!(
            "the file system {why}: run e2fsck -f first (or force the resize)"
        )));
    }
    let fs = Filesystem::open(
        dev,
        OpenOptions {
            count_mount: false,
            ..OpenOptions::default()
        },
    )?;
    if let Some(why) = fs.read_only_reason() {
        return Err(Error::InvalidArgument(format!("the image cannot be written: {why}")));
    }
    if fs.session.in_use() {
        fs.close()?;
    }
    plan::refuse_features(&fs.geo)?;
    let bs = u64::from(fs.geo.block_size);
    let want = want.unwrap_or(fs.dev.len() / bs);
    let blocks = size::fit(&fs.superblock(), &fs.geo, want)?;
    if blocks * bs > room {
        return Err(Error::InvalidArgument(format!(
            "the device holds {} blocks, fewer than the {blocks} asked for",
            room / bs
        )));
    }
    let mut report = ResizeReport {
        old_blocks: fs.geo.blocks_count,
        new_blocks: blocks,
        old_groups: fs.geo.group_count,
        block_size: fs.geo.block_size,
        ..ResizeReport::default()
    };
    if blocks == fs.geo.blocks_count {
        report.new_groups = fs.geo.group_count;
        return Ok(report);
    }
    if blocks < fs.geo.blocks_count && !opts.force {
        let min = minimum_size(&fs);
        if blocks < min {
            return Err(Error::InvalidArgument(format!(
                "new size {blocks} is smaller than the minimum ({min}, as resize -P estimates it; \
                 force the resize to try anyway)"
            )));
        }
    }
    let p = plan::plan(&fs, blocks)?;
    let st = if blocks < fs.geo.blocks_count {
        shrink::stage(&fs, &p)?
    } else {
        grow::stage(&fs, &p, opts.zero_itables)?
    };
    (report.moved_blocks, report.moved_inodes) = st.moved;
    if blocks * bs > fs.dev.len() {
        extend(blocks * bs)?;
    }
    report.journaled = write::write(&fs, &p, st, progress)?;
    report.new_groups = p.new.group_count;
    Ok(report)
}

/// [`resize`] of an image file, claimed for writing (an image in use is
/// refused); a size past the end of the file extends it, once the resize
/// is planned (a refused one leaves the file as it was); a shrunk image
/// file is cut to its new size.
///
/// # Errors
/// As [`resize`]; [`Error::InUseElsewhere`].
pub fn resize_image(
    path: &Path,
    size: Option<SizeSpec>,
    opts: &ResizeOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ResizeReport> {
    let dev = crate::tune::open_for_tune(path)?;
    let raw = read_superblock(&dev)?;
    let bs = 1024u32 << raw.s_log_block_size.get().min(6);
    let want = size.map(|s| s.blocks(bs));
    let mut room = dev.len();
    if let Some(w) = want {
        let bytes = w
            .checked_mul(u64::from(bs))
            .ok_or_else(|| Error::InvalidArgument(format!("new size {w} blocks is too large")))?;
        if bytes > room {
            let meta = std::fs::metadata(path).map_err(|source| Error::Io { offset: 0, source })?;
            if !meta.is_file() {
                return Err(Error::InvalidArgument(format!(
                    "the device holds {} blocks, fewer than the {w} asked for, and only an image file \
                     can be extended",
                    room / u64::from(bs)
                )));
            }
            room = bytes;
        }
    }
    // The claim stays with the device inside the file system; a second
    // handle only sets the length (`ftruncate`), as resize2fs does.
    let set_len = |len: u64| -> Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(len))
            .map_err(|source| Error::Io { offset: len, source })
    };
    let r = resize_within(Box::new(dev), want, room, opts, progress, &mut |len| set_len(len))?;
    // A resized image file longer than the size asked for is cut to it,
    // as resize2fs cuts it (to the size asked for, which may exceed the
    // file system when a too-small last group was left out), so that a
    // later resize without SIZE does not grow it back. The file system no
    // longer reaches past that length: a crash before or after the cut
    // leaves the new one.
    let meta = std::fs::metadata(path).map_err(|source| Error::Io { offset: 0, source })?;
    if let Some(w) = want
        && r.new_blocks != r.old_blocks
        && meta.is_file()
        && meta.len() > w * u64::from(bs)
    {
        set_len(w * u64::from(bs))?;
    }
    Ok(r)
}

/// Why resize2fs would ask for `e2fsck -f` first, if it would.
pub fn needs_check(sb: &RawSuperblock) -> Option<&'static str> {
    let state = sb.s_state.get();
    if state & STATE_ERROR != 0 {
        return Some("has recorded errors");
    }
    if state & STATE_VALID == 0 {
        return Some("was not cleanly unmounted");
    }
    if sb.s_lastcheck.get() < sb.s_mtime.get() {
        return Some("was mounted since its last check");
    }
    if sb.s_last_orphan.get() != 0 || sb.s_feature_incompat.get() & IncompatFeatures::RECOVER.0 != 0 {
        return Some("has orphans or a journal to recover");
    }
    None
}

fn read_superblock(dev: &dyn BlockDevice) -> Result<RawSuperblock> {
    let mut buf = vec![0u8; 1024];
    dev.read_at(1024, &mut buf)
        .map_err(|source| Error::Io { offset: 1024, source })?;
    RawSuperblock::parse(&buf).map_err(|e| Error::format(Location::Superblock, e))
}
