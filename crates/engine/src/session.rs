//! The mounted state, as the kernel keeps it in the superblock
//! (`ext4_setup_super`, `ext4_put_super`, `__ext4_error`): the first
//! committed write of a session sets `needs_recovery` when the file system
//! has a journal, and otherwise clears `EXT2_VALID_FS` in `s_state` (the
//! writes are not journaled, so an interrupted session must look unchecked),
//! counts the mount in `s_mnt_count` and stamps `s_mtime` (unless
//! [`crate::OpenOptions::count_mount`] is off) and, with
//! `orphan_file`, sets `ORPHAN_PRESENT`; [`Filesystem::unmount`] (or a drop)
//! frees the orphans still open and puts back the state found at open.
//! Corruption, met by reads or writes, is recorded as well (see
//! [`crate::fs_error`]).

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR, STATE_VALID};

use crate::clock;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::txn::Txn;

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

    /// An error was found: the state written at unmount says so
    /// (`sbi->s_mount_state |= EXT4_ERROR_FS`).
    pub(crate) fn error_found(&self) {
        self.mount_state.fetch_or(STATE_ERROR, Ordering::AcqRel);
    }

    /// A raw edit set `s_state`: unmount writes that back instead.
    pub(crate) fn set_mount_state(&self, state: u16) {
        self.mount_state.store(state, Ordering::Release);
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

    /// Remounting read-only (`ext4_remount` on the way to `SB_RDONLY`):
    /// writes back what delayed allocation holds, commits, and puts back
    /// the superblock state found at open, so the image is clean on disk
    /// while it stays open. Unlike [`Filesystem::unmount`] it keeps open
    /// files. The caller refuses writes from then on; once it allows them
    /// again, the first committed one marks the image in use, as a
    /// remount read-write does (`ext4_setup_super`).
    ///
    /// # Errors
    /// The first failure of writing back, committing or flushing.
    pub fn settle(&self) -> Result<()> {
        self.flush_all()?;
        self.commit_errors()?;
        if self.session.in_use() {
            self.mark_clean()?;
        }
        self.sync()
    }

    /// The work of [`Filesystem::unmount`]; idempotent, so that the drop
    /// after an unmount changes nothing.
    pub(crate) fn close(&self) -> Result<()> {
        let mut first_err = self.flush_all().err();
        if let Err(e) = self.commit_errors() {
            first_err.get_or_insert(e);
        }
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
        // Last: the block says clean only once nothing more is written.
        if let Err(e) = self.mmp.release() {
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
}
