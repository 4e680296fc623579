//! The mounted state, as the kernel keeps it in the superblock
//! (`ext4_setup_super`, `ext4_put_super`, `__ext4_error`): the first
//! committed write of a session sets `needs_recovery` when the file system
//! has a journal, and otherwise clears `EXT2_VALID_FS` in `s_state` (the
//! writes are not journaled, so an interrupted session must look unchecked),
//! counts the mount in `s_mnt_count` and stamps `s_mtime` (unless
//! [`crate::OpenOptions::count_mount`] is off) and, with
//! `orphan_file`, sets `ORPHAN_PRESENT`; [`Filesystem::unmount`] (or a drop)
//! frees the orphans still open and puts back the state found at open.
//! Corruption met while writing sets `EXT2_ERROR_FS` and the
//! `s_first_error_*` / `s_last_error_*` records.

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR, STATE_VALID};

use crate::clock;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::txn::Txn;

/// `s_first_error_errcode` for a corrupt structure (`EXT4_ERR_EFSCORRUPTED`).
const ERR_EFSCORRUPTED: u8 = 5;
/// `s_first_error_errcode` for a checksum mismatch (`EXT4_ERR_EFSBADCRC`).
const ERR_EFSBADCRC: u8 = 4;

/// What the engine remembers about the superblock's state in one session.
#[derive(Debug)]
pub(crate) struct Session {
    /// A write of this session has been committed (`s_state` says in use).
    in_use: AtomicBool,
    /// `s_state` found at open, plus `EXT2_ERROR_FS` once an error is
    /// recorded: what unmount writes back (`sbi->s_mount_state`).
    mount_state: AtomicU16,
}

impl Session {
    pub(crate) fn new(state: u16) -> Self {
        Self {
            in_use: AtomicBool::new(false),
            mount_state: AtomicU16::new(state),
        }
    }

    /// True once a write of this session has been committed.
    pub(crate) fn in_use(&self) -> bool {
        self.in_use.load(Ordering::Acquire)
    }

    /// Called by [`Txn::commit`] once the superblock is on the device.
    pub(crate) fn committed(&self, closing: bool) {
        self.in_use.store(!closing, Ordering::Release);
    }
}

/// What the first write of a session changes (the kernel's read-write
/// mount, `ext4_setup_super` and `ext4_load_journal`): without a journal
/// the state says unchecked; with one it stays as it was and
/// `needs_recovery` sends a crashed image to the journal instead.
pub(crate) fn mark_in_use(sb: &mut RawSuperblock, count_mount: bool, journaling: bool) {
    if journaling {
        let f = sb.s_feature_incompat.get() | IncompatFeatures::RECOVER.0;
        sb.s_feature_incompat.set(f);
    } else {
        sb.s_state.set(sb.s_state.get() & !STATE_VALID);
    }
    if count_mount {
        sb.s_mnt_count.set(sb.s_mnt_count.get().wrapping_add(1));
        let now = clock::now().secs;
        sb.s_mtime.set(now as u32);
        sb.s_mtime_hi = (now >> 32) as u8;
    }
    if sb.features().compat.contains(CompatFeatures::ORPHAN_FILE) {
        let ro = sb.s_feature_ro_compat.get() | RoCompatFeatures::ORPHAN_PRESENT.0;
        sb.s_feature_ro_compat.set(ro);
    }
}

impl Filesystem {
    /// Ends the session and reports what went wrong: frees every inode that
    /// was unlinked while open (the last [`Filesystem::release_file`] of
    /// each), empties the orphan list, restores the superblock state found
    /// at open (`clean` unless the image was unchecked or an error was
    /// recorded), and flushes the device. Dropping a `Filesystem` does the
    /// same but cannot report failures.
    ///
    /// # Errors
    /// The first failure of freeing an orphan, writing the superblock or
    /// flushing; the rest of the work is still attempted.
    pub fn unmount(self) -> Result<()> {
        self.close()
    }

    /// The work of [`Filesystem::unmount`]; idempotent, so that the drop
    /// after an unmount changes nothing.
    pub(crate) fn close(&self) -> Result<()> {
        let mut first_err = None;
        let open: Vec<u32> = self.open_files.lock().drain().map(|(ino, _)| ino).collect();
        for ino in open {
            if let Err(e) = self.evict(ino) {
                first_err.get_or_insert(e);
            }
        }
        if self.session.in_use()
            && let Err(e) = self.mark_clean()
        {
            first_err.get_or_insert(e);
        }
        if let Err(e) = self.sync() {
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Writes back the state found at open (`ext4_put_super`) and clears
    /// `ORPHAN_PRESENT` when the orphan file is empty.
    fn mark_clean(&self) -> Result<()> {
        let mut txn = Txn::begin(self)?;
        txn.set_closing();
        let empty = txn.orphan_file_empty()?;
        let state = self.session.mount_state.load(Ordering::Acquire);
        let sb = txn.sb_mut();
        sb.s_state.set(state);
        let incompat = sb.s_feature_incompat.get() & !IncompatFeatures::RECOVER.0;
        sb.s_feature_incompat.set(incompat);
        if empty {
            let ro = sb.s_feature_ro_compat.get() & !RoCompatFeatures::ORPHAN_PRESENT.0;
            sb.s_feature_ro_compat.set(ro);
        }
        txn.commit()
    }

    /// Passes `r` through; when it is corruption found by a write operation
    /// (`op`, e.g. `"unlink"`), first records it in the superblock the way
    /// `__ext4_error` does: `EXT2_ERROR_FS` in `s_state` (kept at unmount),
    /// `s_error_count`, and the first and last error records. Recording is
    /// best effort: the original error is what the caller gets.
    pub(crate) fn noting_errors<T>(&self, op: &str, r: Result<T>) -> Result<T> {
        if let Err(e) = &r
            && let Some((code, at)) = corruption(e)
            && self.read_only_reason.is_none()
        {
            let _ = self.record_error(op, code, at);
        }
        r
    }

    fn record_error(&self, op: &str, code: u8, at: Location) -> Result<()> {
        self.session.mount_state.fetch_or(STATE_ERROR, Ordering::AcqRel);
        let (ino, block) = match at {
            Location::Inode(i) => (i, 0),
            Location::Block { block, inode } => (inode, block),
            _ => (0, 0),
        };
        let mut func = [0u8; 32];
        let n = op.len().min(31);
        func[..n].copy_from_slice(&op.as_bytes()[..n]);
        let now = clock::now().secs;
        let mut txn = Txn::begin(self)?;
        let sb = txn.sb_mut();
        sb.s_state.set(sb.s_state.get() | STATE_ERROR);
        sb.s_error_count.set(sb.s_error_count.get().saturating_add(1));
        if sb.s_first_error_time.get() == 0 && sb.s_first_error_time_hi == 0 {
            sb.s_first_error_time.set(now as u32);
            sb.s_first_error_time_hi = (now >> 32) as u8;
            sb.s_first_error_ino.set(ino);
            sb.s_first_error_block.set(block);
            sb.s_first_error_func = func;
            sb.s_first_error_line.set(0);
            sb.s_first_error_errcode = code;
        }
        sb.s_last_error_time.set(now as u32);
        sb.s_last_error_time_hi = (now >> 32) as u8;
        sb.s_last_error_ino.set(ino);
        sb.s_last_error_block.set(block);
        sb.s_last_error_func = func;
        sb.s_last_error_line.set(0);
        sb.s_last_error_errcode = code;
        txn.commit()
    }
}

/// The error code and place of a corruption error; `None` for the rest.
fn corruption(e: &Error) -> Option<(u8, Location)> {
    match e {
        Error::Corrupt(c) => Some((ERR_EFSCORRUPTED, c.at)),
        Error::BadChecksum { at, .. } => Some((ERR_EFSBADCRC, *at)),
        _ => None,
    }
}
