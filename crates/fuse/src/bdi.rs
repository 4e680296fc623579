//! The mount's backing device info, `/sys/class/bdi/MAJOR:MINOR/`, where
//! the kernel keeps two limits a FUSE server wants to set and that FUSE's
//! INIT reply cannot raise:
//! - `read_ahead_kb` (`read_ahead_kb=`): FUSE starts every mount at
//!   128 KiB, so a cold sequential read waits on one small request after
//!   another; root may raise it, as `blockdev --setra` does for a disk.
//! - `max_bytes` (`max_dirty=`): the most dirty and in-flight page-cache
//!   data the kernel keeps for the mount (FUSE sets `strict_limit`, so the
//!   writer is throttled at this bound). [`crate::space`] keeps that much
//!   room so every byte `write(2)` accepted can be stored.
//!
//! The device number comes from `/proc/self/mountinfo`, not from `stat` on
//! the mount point: before the session serves, a `stat` would wait for a
//! reply from this very process.

use std::io;
use std::path::{Path, PathBuf};

/// Writes `value` to the mount's `knob` (e.g. `read_ahead_kb`).
///
/// # Errors
/// The mount is not in `/proc/self/mountinfo`, or the kernel refuses the
/// write (not root, no such knob on this kernel).
pub(crate) fn set(mountpoint: &Path, knob: &str, value: u64) -> io::Result<()> {
    let path = dir(mountpoint)?.join(knob);
    std::fs::write(&path, format!("{value}\n"))
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Reads the mount's `knob` as a number.
///
/// # Errors
/// As [`set`], or the file does not hold a number.
pub(crate) fn get(mountpoint: &Path, knob: &str) -> io::Result<u64> {
    let path = dir(mountpoint)?.join(knob);
    let text = std::fs::read_to_string(&path)?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{}: not a number", path.display())))
}

/// `/sys/class/bdi/MAJOR:MINOR` of the mount at `mountpoint`.
fn dir(mountpoint: &Path) -> io::Result<PathBuf> {
    // Only the parent is resolved: resolving the mount point itself would
    // look it up in the mount.
    let abs = std::path::absolute(mountpoint)?;
    let abs = match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)?.join(name),
        _ => abs,
    };
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let dev = device_of(&info, &abs).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is not a mount point", abs.display()),
        )
    })?;
    Ok(PathBuf::from(format!("/sys/class/bdi/{dev}")))
}

/// The `MAJOR:MINOR` of the newest FUSE mount at `at` in a mountinfo text:
/// fields are id, parent, device, root, mount point (with `\040`-style
/// escapes), options, then optional fields up to `-`, then the type.
fn device_of(mountinfo: &str, at: &Path) -> Option<String> {
    let want = escape(at);
    mountinfo
        .lines()
        .rfind(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let kind = f.iter().skip_while(|x| **x != "-").nth(1).copied().unwrap_or("");
            f.get(4) == Some(&want.as_str()) && (kind == "fuse" || kind.starts_with("fuse."))
        })
        .and_then(|l| l.split(' ').nth(2).map(str::to_string))
}

/// A path as mountinfo writes it: space, tab, newline and backslash as
/// octal escapes.
fn escape(p: &Path) -> String {
    let mut out = String::new();
    for c in p.to_string_lossy().chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => out.push_str(&format!("\\{:03o}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:39 / /tmp/my\\040mnt rw,nosuid,nodev,relatime shared:20 - fuse.ext4kit img.ext4 rw,user_id=0
41 22 0:40 / /tmp/other rw,relatime - fuse img2 rw
43 22 0:41 / /tmp/other rw,relatime - fuse.ext4kit img3 rw
44 22 0:42 / /tmp/plain rw,relatime - tmpfs tmpfs rw
";

    #[test]
    fn finds_the_newest_fuse_mount_at_a_path_with_escapes() {
        assert_eq!(device_of(INFO, Path::new("/tmp/my mnt")).as_deref(), Some("0:39"));
        assert_eq!(device_of(INFO, Path::new("/tmp/other")).as_deref(), Some("0:41"));
        assert_eq!(device_of(INFO, Path::new("/tmp/plain")), None, "not a FUSE mount");
        assert_eq!(device_of(INFO, Path::new("/tmp/none")), None);
    }

    #[test]
    fn escapes_as_mountinfo_does() {
        assert_eq!(escape(Path::new("/a b\\c")), "/a\\040b\\134c");
    }
}
