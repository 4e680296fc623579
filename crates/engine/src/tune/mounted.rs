//! Refusing an image that is in use. A tune rewrites blocks under whoever
//! has the image open, so it runs only on an image nobody else has:
//!
//! - **another ext4kit** (a FUSE mount, an edit): every writer holds the
//!   image lock, so the exclusive claim of [`FileDevice::open`] fails and
//!   names the holder;
//! - **the kernel**: a mount of the image's block device, or of a loop
//!   device backed by the image file (`/sys/block/loop*/loop/backing_file`),
//!   found by the same claim (`crate::device::inuse`), which also opens a
//!   block device `O_EXCL`;
//! - **another host**: with `mmp`, the engine's open claims the MMP block
//!   ([`crate::mmp`]).
//!
//! Unlike tune2fs, nothing is changed on a mounted file system, not even
//! the fields the kernel would pick up (the label, the error behaviour):
//! the kernel keeps its own copy of the superblock and writes it back.

use std::path::Path;

use super::{TuneReport, TuneRequest, tune};
use crate::device::{FileDevice, InUseError};
use crate::error::{Error, Result};

/// Opens the image at `path` for a tune: claimed for writing, refused with
/// [`Error::InUseElsewhere`] naming the user when someone has it.
///
/// # Errors
/// [`Error::InUseElsewhere`]; [`Error::Io`] when the image cannot be opened.
pub fn open_for_tune(path: &Path) -> Result<FileDevice> {
    FileDevice::open(path, true).map_err(|e| {
        let busy = e.get_ref().and_then(|inner| inner.downcast_ref::<InUseError>());
        match busy {
            Some(b) => Error::InUseElsewhere(format!("refusing to tune {}: it is {}", b.path.display(), b.what)),
            None => Error::Io { offset: 0, source: e },
        }
    })
}

/// [`open_for_tune`], then [`tune`].
///
/// # Errors
/// As those two.
pub fn tune_image(path: &Path, req: &TuneRequest) -> Result<TuneReport> {
    let dev = open_for_tune(path)?;
    tune(Box::new(dev), req)
}
