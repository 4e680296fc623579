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
//! least `2 * check + 1` seconds: with the default 5 s update interval,
//! 11 s on an image fresh from mke2fs (its record says 5 s) and 21 s once
//! the kernel or ext4kit has held it (they advertise twice the update
//! interval, `kmmpd`'s margin for slow writes); twice that to take over
//! from a holder that died.

use std::time::Duration;

use ext4kit_format::mmp::{EXT4_MMP_MAX_CHECK_INTERVAL, MmpState, RawMmp, check_interval_for, wait_secs};

use super::site::{Site, new_seq, nodename};
use crate::error::{Error, Result};

/// The record as this opener wrote it, once it holds the block.
pub(crate) fn claim(site: &Site, update_interval: u16, min_check: u16, bdevname: &[u8]) -> Result<RawMmp> {
    let mut rec = site.read()?;
    let check = check_secs(update_interval, min_check, rec.mmp_check_interval.get());
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

/// The check interval an opener waits on: the larger of the update
/// interval (raised to `min`) and the holder's `mmp_check_interval`, capped
/// where no live holder goes (the kernel's own limit, and the tools' limit
/// on the update interval) so a hostile image cannot make an open wait for
/// hours.
fn check_secs(update_interval: u16, min: u16, recorded: u16) -> u16 {
    update_interval
        .max(min)
        .max(1)
        .max(recorded)
        .min(EXT4_MMP_MAX_CHECK_INTERVAL)
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

#[cfg(test)]
mod tests {
    use super::check_secs;

    #[test]
    fn the_wait_follows_the_largest_interval_within_the_kernel_limit() {
        assert_eq!(check_secs(1, 5, 0), 5);
        assert_eq!(check_secs(1, 1, 2), 2);
        assert_eq!(check_secs(0, 0, 0), 1);
        assert_eq!(check_secs(60, 5, 10), 60);
        assert_eq!(check_secs(65535, 5, 65535), 300);
    }
}
