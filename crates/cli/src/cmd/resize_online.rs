//! `ext4kit resize` on a mounted file system: the target is an ext4kit
//! mount point, or an image an ext4kit mount holds (found through the
//! holder of its image lock). The request goes to the mount's server
//! ([`ext4kit_fuse::resize_request`]), which resizes while it serves, as
//! `resize2fs` on a mounted ext4 asks the kernel; a shrink is refused
//! there, as the kernel refuses it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ext4kit_engine::resize::parse_size;
use ext4kit_fuse::resize_request::{REFUSED, REPLY_MAX, RESIZED, request_name};

use super::sync::FUSE_SUPER_MAGIC;

/// The mount point to ask: `target` itself when it is a directory, else
/// where an ext4kit mount holding the image `target` serves it.
pub(crate) fn mount_of(target: &Path) -> Option<PathBuf> {
    if target.is_dir() {
        return Some(target.to_path_buf());
    }
    ext4kit_engine::device::inuse::lock_holder_of(target)?.mount_point
}

/// Asks the server at `mp` for a file system of `size` (as resize2fs
/// reads it; without it, the length of the image file `image`).
pub(crate) fn run(mp: &Path, image: Option<&Path>, size: Option<&str>) -> Result<()> {
    let shown = mp.display();
    let st = nix::sys::statfs::statfs(mp).with_context(|| format!("statfs {shown}"))?;
    if st.filesystem_type().0 as i64 != FUSE_SUPER_MAGIC {
        bail!("{shown}: not an ext4kit mount (not a FUSE file system)");
    }
    let bs = u32::try_from(st.block_size()).context("block size")?;
    let blocks = match (size, image) {
        (Some(s), _) => parse_size(s)?.blocks(bs),
        (None, Some(i)) => std::fs::metadata(i).with_context(|| format!("{}", i.display()))?.len() / u64::from(bs),
        (None, None) => bail!("{shown}: give the new SIZE of a mounted file system"),
    };
    let mut buf = vec![0u8; REPLY_MAX];
    let n = match rustix::fs::getxattr(mp, request_name(blocks).as_str(), &mut buf[..]) {
        Ok(n) => n,
        Err(rustix::io::Errno::NOTSUP | rustix::io::Errno::NOSYS | rustix::io::Errno::NODATA) => {
            bail!("{shown}: not an ext4kit mount (its server does not know ext4kit's resize)")
        }
        Err(e) => return Err(e).with_context(|| format!("{shown}: asking the server to resize")),
    };
    let reply = String::from_utf8_lossy(&buf[..n]);
    if let Some(why) = reply.strip_prefix(REFUSED) {
        bail!("{shown}: {why}");
    }
    let Some(counts) = reply.strip_prefix(RESIZED) else {
        bail!("{shown}: not an ext4kit mount (its server does not know ext4kit's resize)");
    };
    let c: Vec<u64> = counts.split(' ').filter_map(|v| v.parse().ok()).collect();
    let [old, new, old_groups, new_groups, bs] = c[..] else {
        bail!("{shown}: the server's answer is malformed: {reply}");
    };
    let kib = bs / 1024;
    if new == old {
        outln!("The filesystem is already {new} ({kib}k) blocks long.  Nothing to do!");
    } else {
        outln!(
            "The filesystem on {shown} is now {new} ({kib}k) blocks long ({new_groups} groups, was {old} blocks \
             in {old_groups}), grown while mounted."
        );
    }
    Ok(())
}
