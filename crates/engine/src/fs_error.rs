//! Corruption found on disk is recorded in the superblock, as the kernel's
//! `ext4_error` / `__ext4_error_inode` → `ext4_handle_error` →
//! `save_error_info` do, whether a read or a write met it: `EXT2_ERROR_FS`
//! in `s_state` (kept at unmount, so the image says "clean with errors"),
//! `s_error_count`, and the first and last error's time, inode, block,
//! function and error code (`s_first_error_*`, `s_last_error_*`). e2fsck
//! then checks the image even with `-p`.
//!
//! Two steps, as in the kernel. Noting ([`Filesystem::note_error`]) only
//! updates memory (`sbi->s_add_error_count` and the error records) and
//! takes no engine lock, so it is safe wherever corruption is found.
//! Committing ([`Filesystem::commit_errors`]) folds the notes into the
//! superblock (`ext4_update_super`) through a transaction, commits the
//! journal, and writes the superblock home at once (`ext4_commit_super`):
//! the kernel restores the error fields found before a journal replay, so
//! they must be on disk outside the log too. Every transaction also folds
//! pending notes into the superblock it writes.
//!
//! Reads are recorded by the public read methods ([`Filesystem::reading`]):
//! the innermost one that sees the error notes it (its name is the error's
//! function), and the outermost one commits, unless the thread holds an
//! engine lock (a read made inside a transaction or a write-back): the
//! notes then wait for the next transaction, commit or front-end call.
//! Writes are recorded by [`Filesystem::noting_errors`] around each
//! operation.
//!
//! A read-only open (a read-only device, `ext4kit cat`, `mount -o ro`) keeps
//! the notes in memory only: [`Filesystem::superblock`] shows them, the
//! image is not written. The kernel writes the superblock on a read-only
//! mount whenever the device itself is writable; ext4kit promises instead
//! that a read-only open leaves the image as it is.

use std::cell::Cell;

use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR};
use parking_lot::Mutex;

use crate::clock;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::txn::Txn;

/// `s_*_error_errcode` for a checksum mismatch (`EXT4_ERR_EFSBADCRC`).
const ERR_EFSBADCRC: u8 = 4;
/// `s_*_error_errcode` for a corrupt structure (`EXT4_ERR_EFSCORRUPTED`).
const ERR_EFSCORRUPTED: u8 = 5;

/// One error as the superblock records it.
#[derive(Debug, Clone, Copy)]
struct ErrorRecord {
    time: i64,
    ino: u32,
    block: u64,
    func: [u8; 32],
    code: u8,
}

/// Errors noted since the superblock last carried them (the kernel keeps
/// the same in `ext4_sb_info`).
#[derive(Debug, Default)]
pub(crate) struct ErrorNotes(Mutex<Notes>);

#[derive(Debug, Default)]
struct Notes {
    added: u32,
    first: Option<ErrorRecord>,
    last: Option<ErrorRecord>,
}

impl ErrorNotes {
    fn pending(&self) -> bool {
        self.0.lock().added > 0
    }

    /// Folds the pending notes into `sb` (`ext4_update_super`): the first
    /// error only when the superblock has none yet.
    pub(crate) fn fold_into(&self, sb: &mut RawSuperblock) {
        let mut n = self.0.lock();
        if n.added == 0 {
            return;
        }
        sb.s_state.set(sb.s_state.get() | STATE_ERROR);
        if let Some(f) = n.first
            && sb.s_first_error_time.get() == 0
            && sb.s_first_error_time_hi == 0
        {
            sb.s_first_error_time.set(f.time as u32);
            sb.s_first_error_time_hi = (f.time >> 32) as u8;
            sb.s_first_error_ino.set(f.ino);
            sb.s_first_error_block.set(f.block);
            sb.s_first_error_func = f.func;
            sb.s_first_error_line.set(0);
            sb.s_first_error_errcode = f.code;
        }
        if let Some(l) = n.last {
            sb.s_last_error_time.set(l.time as u32);
            sb.s_last_error_time_hi = (l.time >> 32) as u8;
            sb.s_last_error_ino.set(l.ino);
            sb.s_last_error_block.set(l.block);
            sb.s_last_error_func = l.func;
            sb.s_last_error_line.set(0);
            sb.s_last_error_errcode = l.code;
        }
        sb.s_error_count.set(sb.s_error_count.get().saturating_add(n.added));
        *n = Notes::default();
    }
}

thread_local! {
    /// How many public read methods this thread is inside.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Where the error this thread noted last was found: outer methods
    /// that see the same error pass it on without counting it again.
    static NOTED: Cell<Option<Location>> = const { Cell::new(None) };
}

/// Leaves one level of [`DEPTH`], also when the read panics.
struct Level(u32);

impl Drop for Level {
    fn drop(&mut self) {
        DEPTH.set(self.0);
    }
}

impl Filesystem {
    /// Runs the read `f` of the public method `op` and records the
    /// corruption it reports (see the module documentation).
    pub(crate) fn reading<T>(&self, op: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let depth = DEPTH.get();
        if depth == 0 {
            NOTED.set(None);
        }
        let r = {
            let _level = Level(depth);
            DEPTH.set(depth + 1);
            f()
        };
        if let Err(e) = &r
            && let Some((code, at)) = corruption(e)
        {
            if NOTED.get() != Some(at) {
                self.note_error(op, code, at);
                NOTED.set(Some(at));
            }
            if depth == 0 && self.holds_no_engine_lock() {
                let _ = self.commit_errors();
            }
        }
        r
    }

    /// Passes `r` through; when it is corruption found by a write operation
    /// (`op`, e.g. `"unlink"`), first records it. Called with no engine
    /// lock held. Recording is best effort: the original error is what the
    /// caller gets.
    pub(crate) fn noting_errors<T>(&self, op: &str, r: Result<T>) -> Result<T> {
        if let Err(e) = &r
            && let Some((code, at)) = corruption(e)
        {
            if NOTED.take() != Some(at) {
                self.note_error(op, code, at);
            }
            let _ = self.commit_errors();
        }
        r
    }

    /// Notes an error in memory (`save_error_info`): `op` names the
    /// function, `code` is the `EXT4_ERR_*` code.
    fn note_error(&self, op: &str, code: u8, at: Location) {
        self.session.error_found();
        let (ino, block) = match at {
            Location::Inode(i) => (i, 0),
            Location::Block { block, inode } => (inode, block),
            _ => (0, 0),
        };
        let mut func = [0u8; 32];
        let len = op.len().min(31);
        func[..len].copy_from_slice(&op.as_bytes()[..len]);
        let rec = ErrorRecord {
            time: clock::now().secs,
            ino,
            block,
            func,
            code,
        };
        let mut notes = self.errors.0.lock();
        notes.added = notes.added.saturating_add(1);
        notes.first.get_or_insert(rec);
        notes.last = Some(rec);
    }

    /// True when this thread holds none of the locks a commit takes, so it
    /// may commit now. A lock another thread holds looks the same: the
    /// notes then wait for a later commit.
    fn holds_no_engine_lock(&self) -> bool {
        self.writer.try_lock().is_some()
            && self.log.try_lock().is_some()
            && self.open_files.try_lock().is_some()
            && self.data_in_flight.try_write().is_some()
            && self.dirty.try_lock().is_some()
            && self.sb.try_write().is_some()
            && self.groups.try_write().is_some()
    }

    /// Writes the errors noted so far to the superblock on the device and
    /// makes them durable (through the journal, and in place, as the
    /// kernel's `ext4_handle_error` commits the superblock at once). The
    /// engine does this itself when it finds an error; a front end calls it
    /// before it stops on one (`errors=panic`). On a read-only open the
    /// notes go into the in-memory superblock only.
    ///
    /// Must not be called while another call into this `Filesystem` is in
    /// progress on the same thread (from a callback).
    ///
    /// # Errors
    /// [`Error::Io`] when the device cannot write or flush.
    pub fn commit_errors(&self) -> Result<()> {
        if !self.errors.pending() {
            return Ok(());
        }
        if self.read_only_reason.is_some() {
            let mut sb = self.sb.write();
            self.errors.fold_into(&mut sb);
            sb.set_checksum();
            return Ok(());
        }
        let mut txn = Txn::begin(self)?;
        txn.sb_mut();
        txn.commit()?;
        self.write_back_published()?;
        if self.journaling {
            let _log = self.log.lock();
            let sb = *self.sb.read();
            self.write_superblock(&sb)?;
        }
        self.dev.flush().map_err(|source| self.write_failed(0, source))
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
