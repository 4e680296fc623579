//! Taking the MMP block at a writable open, as the kernel's
//! `ext4_multi_mount_protect` and e2fsprogs' `ext2fs_mmp_start` do:
//!
//! 1. Read the record. `EXT4_MMP_SEQ_FSCK` (e2fsck runs) and a sequence no
//!    tool writes are refused at once.
//! 2. A live-looking sequence: wait `wait_secs(check)` (twice the check
//!    interval plus one second) and read again. A holder that is alive has
//!    rewritten it by then: refuse, naming its node and device.
//! 3. Write a new random sequence with this node's name, wait as long
//!    again and read it back: another opener racing for the block has
//!    overwritten it by then, and both back off or one wins.
//!
//! A clean record skips step 2 but not step 3 (e2fsprogs' order; the
//! kernel waits nothing after a clean record, a race its maintainers have
//! acknowledged). Every writable open of an MMP image therefore takes at
//! least `2 * check + 1` seconds: 11 s with the default 5 s interval.

use std::time::Duration;

use ext4kit_format::mmp::{MmpState, RawMmp, check_interval_for, wait_secs};

use super::site::{Site, new_seq, nodename};
use crate::error::{Error, Result};

/// The record as this opener wrote it, once it holds the block.
pub(crate) fn claim(site: &Site, update_interval: u16, min_check: u16, bdevname: &[u8]) -> Result<RawMmp> {
    let mut rec = site.read()?;
    let check = update_interval.max(min_check).max(1).max(rec.mmp_check_interval.get());
    let wait = wait_secs(check);
    match rec.state() {
        MmpState::Clean => {}
        MmpState::Fsck => {
            return Err(busy(format!(
                "it is being checked by e2fsck on host {} (MMP block {} says so); if no e2fsck runs, \
                 clear it with `tune2fs -f -E clear_mmp`",
                show(&rec.nodename()),
                site.block
            )));
        }
        MmpState::Unknown(seq) => {
            return Err(busy(format!(
                "MMP block {} holds sequence {seq:#010x}, which means \"do not use\"; if the file system \
                 is in use nowhere, clear it with `tune2fs -f -E clear_mmp`",
                site.block
            )));
        }
        MmpState::Active(seq) => {
            std::thread::sleep(Duration::from_secs(wait));
            let again = site.read()?;
            if again.mmp_seq.get() != seq {
                return Err(busy(holder(&again, site.block, &format!("updated it within {wait} s"))));
            }
            rec = again;
        }
    }
    let seq = new_seq();
    rec.mmp_seq.set(seq);
    rec.set_nodename(&nodename());
    rec.set_bdevname(bdevname);
    rec.mmp_check_interval
        .set(check_interval_for(u64::from(update_interval.max(1)), min_check.max(1)));
    site.write(&mut rec)?;
    std::thread::sleep(Duration::from_secs(wait));
    let again = site.read()?;
    if again.mmp_seq.get() != seq {
        return Err(busy(holder(&again, site.block, "claimed it at the same time")));
    }
    Ok(rec)
}

/// "in use on host X, device Y (its MMP block N: … ; last update T)".
pub(crate) fn holder(rec: &RawMmp, block: u64, what: &str) -> String {
    format!(
        "in use on host {}, device {} (multi-mount protection: that holder {what}, MMP block {block}, \
         last update at {} s since the epoch)",
        show(&rec.nodename()),
        show(&rec.bdevname()),
        rec.mmp_time.get()
    )
}

fn show(name: &str) -> &str {
    if name.is_empty() { "?" } else { name }
}

fn busy(why: String) -> Error {
    Error::InUseElsewhere(why)
}
