//! Keeping the MMP block while the file system is open for writing: a
//! thread (the kernel's `kmmpd`) rewrites the record every
//! `s_mmp_update_interval` seconds with the next sequence number, the time
//! and this node's name, so that another opener waiting on the block sees
//! it change and backs off. Before each update it reads the block back;
//! when someone else has written it (another sequence or node), the file
//! system was opened elsewhere regardless: the thread stops writing, the
//! engine's writes are refused from then on ([`super::guard`]), the file
//! system turns read-only, and the error is recorded in the superblock, as
//! `kmmpd` does with `ext4_error` ("Error while updating MMP info").
//!
//! [`Updater::release`] stops the thread at once (it sleeps on a condition
//! variable, not a plain sleep) and writes `EXT4_MMP_SEQ_CLEAN`, unless the
//! block was lost or has changed since this session last wrote it
//! (e2fsprogs' `ext2fs_mmp_stop`).

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ext4kit_format::mmp::{
    EXT4_MMP_MAX_UPDATE_INTERVAL, EXT4_MMP_SEQ_CLEAN, EXT4_MMP_SEQ_MAX, RawMmp, check_interval_for,
};
use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use parking_lot::{Condvar, Mutex};

use super::claim::holder;
use super::site::{Site, now_secs};
use crate::error::{Error, Result};
use crate::readonly::ReadOnlyReason;

/// `s_*_error_errcode` for `EBUSY` (`EXT4_ERR_EBUSY`), what `kmmpd` reports.
const ERR_EBUSY: u8 = 13;

/// The updating thread and what it shares with the engine.
pub(crate) struct Updater {
    shared: Arc<Shared>,
    site: Site,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    /// Set by [`Updater::release`]; the thread waits on `wake` for it.
    stop: Mutex<bool>,
    wake: Condvar,
    /// The record as last written by this session.
    record: Mutex<RawMmp>,
    /// Why the block was lost, once it is (shared with the guard device).
    lost: Arc<OnceLock<String>>,
    /// The engine's read-only reason, set when the block is lost.
    read_only: ReadOnlyReason,
}

impl Updater {
    /// Starts updating `record` (just claimed) every `update_interval`
    /// seconds (at least one).
    ///
    /// # Errors
    /// The OS error when the thread cannot be started.
    pub(crate) fn start(
        site: Site,
        record: RawMmp,
        update_interval: u16,
        min_check: u16,
        lost: Arc<OnceLock<String>>,
        read_only: ReadOnlyReason,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            stop: Mutex::new(false),
            wake: Condvar::new(),
            record: Mutex::new(record),
            lost,
            read_only,
        });
        // Never slower than the longest interval the tools allow: the check
        // interval others wait on is capped there too.
        let period = Duration::from_secs(u64::from(update_interval.clamp(1, EXT4_MMP_MAX_UPDATE_INTERVAL)));
        let (s, st) = (shared.clone(), site.clone());
        let thread = std::thread::Builder::new()
            .name("ext4kit-mmp".into())
            .spawn(move || run(&s, &st, period, min_check.max(1)))?;
        Ok(Self {
            shared,
            site,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The record as this session last wrote it.
    pub(crate) fn record(&self) -> RawMmp {
        *self.shared.record.lock()
    }

    /// Why the block was lost, if it was.
    pub(crate) fn lost(&self) -> Option<&str> {
        self.shared.lost.get().map(String::as_str)
    }

    /// Stops the thread and marks the block clean. Idempotent.
    ///
    /// # Errors
    /// [`Error::InUseElsewhere`] when the block was lost or someone else
    /// wrote it since the last update (it is then left as it is);
    /// [`Error::Io`] when it cannot be read or written.
    pub(crate) fn release(&self) -> Result<()> {
        let Some(thread) = self.thread.lock().take() else {
            return Ok(());
        };
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        let _ = thread.join();
        if let Some(why) = self.lost() {
            return Err(Error::InUseElsewhere(why.to_string()));
        }
        let mut rec = self.record();
        let now = self.site.read()?;
        if now.mmp_seq != rec.mmp_seq || now.mmp_nodename != rec.mmp_nodename {
            return Err(Error::InUseElsewhere(holder(
                &now,
                self.site.block,
                "wrote it while this file system was open; it was left as it is",
            )));
        }
        rec.mmp_seq.set(EXT4_MMP_SEQ_CLEAN);
        self.site.write(&mut rec)?;
        *self.shared.record.lock() = rec;
        Ok(())
    }
}

impl Drop for Updater {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// The thread: wait a period (or until stopped), check, update.
fn run(shared: &Shared, site: &Site, period: Duration, min_check: u16) {
    let mut last = Instant::now();
    loop {
        let deadline = Instant::now() + period;
        {
            let mut stop = shared.stop.lock();
            while !*stop && !shared.wake.wait_until(&mut stop, deadline).timed_out() {}
            if *stop {
                return;
            }
        }
        let mut rec = *shared.record.lock();
        match site.read() {
            Err(e) => {
                return lose(
                    shared,
                    site,
                    format!("the MMP block {} cannot be read: {e}", site.block),
                );
            }
            Ok(now) if now.mmp_seq != rec.mmp_seq || now.mmp_nodename != rec.mmp_nodename => {
                let what = "wrote it while this file system was open: it seems to be mounted twice";
                return lose(shared, site, holder(&now, site.block, what));
            }
            Ok(_) => {}
        }
        let next = rec.mmp_seq.get().wrapping_add(1);
        rec.mmp_seq
            .set(if next == 0 || next > EXT4_MMP_SEQ_MAX { 1 } else { next });
        // Like kmmpd: twice the time one round took, within the limits.
        rec.mmp_check_interval
            .set(check_interval_for(last.elapsed().as_secs(), min_check));
        last = Instant::now();
        if let Err(e) = site.write(&mut rec) {
            return lose(
                shared,
                site,
                format!("the MMP block {} cannot be written: {e}", site.block),
            );
        }
        *shared.record.lock() = rec;
    }
}

/// The block is no longer this session's: stop the engine's writes, turn
/// read-only and record the error in the superblock (best effort).
fn lose(shared: &Shared, site: &Site, why: String) {
    let msg = format!("multi-mount protection: {why}; the file system is read-only from now on");
    let _ = shared.lost.set(msg.clone());
    shared.read_only.set(msg);
    let _ = record_error(site);
}

/// Adds the error to the superblock on the device (`ext4_error` →
/// `save_error_info` → `ext4_commit_super`): read, change the error
/// fields only, write back. The engine's own copy is never written again.
fn record_error(site: &Site) -> Result<()> {
    let io = |source| Error::Io {
        offset: SUPERBLOCK_OFFSET,
        source,
    };
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    site.dev.read_at(SUPERBLOCK_OFFSET, &mut buf).map_err(io)?;
    let mut sb = RawSuperblock::parse(&buf).map_err(|e| Error::format(crate::Location::Superblock, e))?;
    let now = now_secs();
    let mut func = [0u8; 32];
    func[..5].copy_from_slice(b"kmmpd");
    sb.s_state.set(sb.s_state.get() | STATE_ERROR);
    sb.s_error_count.set(sb.s_error_count.get().saturating_add(1));
    if sb.s_first_error_time.get() == 0 && sb.s_first_error_time_hi == 0 {
        sb.s_first_error_time.set(now as u32);
        sb.s_first_error_time_hi = (now >> 32) as u8;
        sb.s_first_error_ino.set(0);
        sb.s_first_error_block.set(0);
        sb.s_first_error_func = func;
        sb.s_first_error_line.set(0);
        sb.s_first_error_errcode = ERR_EBUSY;
    }
    sb.s_last_error_time.set(now as u32);
    sb.s_last_error_time_hi = (now >> 32) as u8;
    sb.s_last_error_ino.set(0);
    sb.s_last_error_block.set(0);
    sb.s_last_error_func = func;
    sb.s_last_error_line.set(0);
    sb.s_last_error_errcode = ERR_EBUSY;
    if sb.features().metadata_csum() {
        sb.set_checksum();
    }
    site.dev.write_at(SUPERBLOCK_OFFSET, &sb.encode()).map_err(io)?;
    site.dev.flush().map_err(io)
}
