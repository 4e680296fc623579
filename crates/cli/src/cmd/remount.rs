//! `ext4kit mount -o remount,… IMAGE DIR` and `mount -o remount,… DIR`
//! (mount(8) runs `mount.fuse.ext4kit` with the `remount` option): changes
//! a live mount instead of mounting again. The server hears of it through
//! [`ext4kit_fuse::remount_request`]; the kernel's side is mount(2) with
//! `MS_REMOUNT`, keeping the mount's other flags (`nosuid`, `nodev`…).

use std::path::Path;

use anyhow::{Context, Result, bail};
use ext4kit_fuse::remount_request::{CHANGEABLE, REMOUNT_REPLY, request_name};
use nix::mount::MsFlags;
use nix::sys::statvfs::FsFlags;

/// True when an `-o` list asks for a remount.
pub fn asked(options: &[String]) -> bool {
    options.iter().flat_map(|o| o.split(',')).any(|o| o.trim() == "remount")
}

/// Remounts the ext4kit mount at `mountpoint` with the changeable options
/// among `options` (the others, which mount(8) passes along from the
/// mount table, stay as they are).
pub fn run(mountpoint: &Path, options: &[String]) -> Result<()> {
    let lock = ext4kit_fuse::server_lock_path(mountpoint)?;
    super::mount::check_ours(mountpoint, &lock)?;
    let wanted: Vec<&str> = options
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::trim)
        .filter(|o| CHANGEABLE.contains(&o.split('=').next().unwrap_or_default()))
        .collect();
    let now = nix::sys::statvfs::statvfs(mountpoint).with_context(|| format!("statvfs {}", mountpoint.display()))?;
    let was_ro = now.flags().contains(FsFlags::ST_RDONLY);
    let ro = wanted.iter().rev().find_map(|o| match *o {
        "ro" => Some(true),
        "rw" => Some(false),
        _ => None,
    });
    let ro = ro.unwrap_or(was_ro);
    let flags = vfs_flags(now.flags(), &wanted, ro);
    if ro {
        // The kernel writes its dirty pages back while the server takes them.
        remount_vfs(mountpoint, flags)?;
        ask_server(mountpoint, &wanted)
    } else {
        ask_server(mountpoint, &wanted)?;
        remount_vfs(mountpoint, flags)
    }
}

/// The mount's flags for mount(2): its current ones, with read-only and
/// the access-time mode as asked.
fn vfs_flags(now: FsFlags, wanted: &[&str], ro: bool) -> MsFlags {
    let kept = [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_SYNCHRONOUS, MsFlags::MS_SYNCHRONOUS),
        (FsFlags::ST_MANDLOCK, MsFlags::MS_MANDLOCK),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
    ];
    let mut flags = MsFlags::MS_REMOUNT;
    for (st, ms) in kept {
        if now.contains(st) {
            flags |= ms;
        }
    }
    let atime = wanted.iter().rev().find_map(|o| match *o {
        "noatime" => Some(MsFlags::MS_NOATIME),
        "relatime" => Some(MsFlags::MS_RELATIME),
        "strictatime" | "atime" => Some(MsFlags::MS_STRICTATIME),
        _ => None,
    });
    flags |= atime.unwrap_or(if now.contains(FsFlags::ST_NOATIME) {
        MsFlags::MS_NOATIME
    } else if now.contains(FsFlags::ST_RELATIME) {
        MsFlags::MS_RELATIME
    } else {
        MsFlags::MS_STRICTATIME
    });
    if ro {
        flags |= MsFlags::MS_RDONLY;
    }
    flags
}

fn remount_vfs(mountpoint: &Path, flags: MsFlags) -> Result<()> {
    nix::mount::mount(None::<&str>, mountpoint, None::<&str>, flags, None::<&str>).map_err(|e| {
        let why = if e == nix::errno::Errno::EBUSY {
            " (files are open for writing, or removed while still open)"
        } else {
            ""
        };
        anyhow::anyhow!("cannot remount {}: {e}{why}", mountpoint.display())
    })
}

fn ask_server(mountpoint: &Path, wanted: &[&str]) -> Result<()> {
    let shown = mountpoint.display();
    match xattr::get(mountpoint, request_name(&wanted.join(","))) {
        Ok(Some(v)) if v == REMOUNT_REPLY => Ok(()),
        Ok(_) => bail!("{shown}: the server does not know ext4kit's remount"),
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {
            bail!(
                "{shown}: cannot be made read-write: it was mounted -o ro or turned read-only by errors=remount-ro; unmount, check and mount it again"
            )
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            bail!("{shown}: the server refused the options {wanted:?} (see its log)")
        }
        Err(e) => Err(e).with_context(|| format!("{shown}: remount")),
    }
}
