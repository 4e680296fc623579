//! The kernel's use of an image, found as e2fsprogs'
//! `ext2fs_check_mount_point` finds it: the mount table, loop devices'
//! backing files, exclusive opens of block devices, swap space.

use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use super::InUse;

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone)]
pub struct MountEntry {
    /// `MAJ:MIN` of the mounted file system (for a block-device file
    /// system, the device's number).
    pub dev: (u32, u32),
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// File-system type, with its subtype (`fuse.ext4kit`).
    pub fstype: String,
    /// What was mounted (device, image path, or a FUSE server's fsname).
    pub source: String,
}

/// The mount table of this process's mount namespace, in mount order
/// (empty when `/proc` is not mounted).
pub fn mounts() -> Vec<MountEntry> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines().filter_map(parse_mountinfo).collect()
}

/// `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS`.
fn parse_mountinfo(line: &str) -> Option<MountEntry> {
    let f: Vec<&str> = line.split(' ').collect();
    let (ma, mi) = f.get(2)?.split_once(':')?;
    let sep = f.iter().position(|&x| x == "-")?;
    Some(MountEntry {
        dev: (ma.parse().ok()?, mi.parse().ok()?),
        mount_point: PathBuf::from(unescape(f.get(4)?)),
        fstype: f.get(sep + 1)?.to_string(),
        source: unescape(f.get(sep + 2)?),
    })
}

/// Undoes the kernel's octal escapes (`\040` for a space, …).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = b[i + 1..i + 4].iter().fold(0u16, |v, c| v * 8 + u16::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Loop devices whose backing file is the file `meta` describes: the
/// device node and its number.
fn loops_backed_by(meta: &Metadata) -> Vec<(PathBuf, (u32, u32))> {
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(backing) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let Ok(b) = std::fs::metadata(backing.trim_end_matches('\n')) else {
            continue;
        };
        if b.dev() != meta.dev() || b.ino() != meta.ino() {
            continue;
        }
        let Some(num) = std::fs::read_to_string(e.path().join("dev")).ok().and_then(|d| {
            let (a, b) = d.trim().split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        }) else {
            continue;
        };
        out.push((PathBuf::from("/dev").join(&name), num));
    }
    out
}

/// The backing file of the loop device `meta` describes, if it is one.
pub(super) fn loop_backing_file(meta: &Metadata) -> Option<PathBuf> {
    if !meta.file_type().is_block_device() {
        return None;
    }
    let rdev = meta.rdev();
    let sys = format!(
        "/sys/dev/block/{}:{}/loop/backing_file",
        libc::major(rdev),
        libc::minor(rdev)
    );
    let b = std::fs::read_to_string(sys).ok()?;
    let b = b.trim_end_matches('\n');
    (!b.ends_with(" (deleted)")).then(|| PathBuf::from(b))
}

/// True when `/proc/swaps` lists the image (same device number for a
/// block device, same device and inode for a file), as e2fsprogs checks.
fn is_swap(meta: &Metadata) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/swaps") else {
        return false;
    };
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .any(|name| {
            std::fs::metadata(unescape(name)).is_ok_and(|m| {
                if meta.file_type().is_block_device() {
                    m.file_type().is_block_device() && m.rdev() == meta.rdev()
                } else {
                    m.dev() == meta.dev() && m.ino() == meta.ino()
                }
            })
        })
}

/// The kernel's use of the image: a mount of its block device, or of a
/// loop device backed by it; with `writing`, also a loop device backed
/// by the image file that someone holds exclusively (`O_EXCL` → `EBUSY`).
pub(super) fn kernel_use(meta: &Metadata, writing: bool) -> Option<InUse> {
    if is_swap(meta) {
        return Some(InUse::Swap);
    }
    let table = mounts();
    let mounted_at = |dev: (u32, u32)| table.iter().rev().find(|m| m.dev == dev);
    if meta.file_type().is_block_device() {
        let rdev = meta.rdev();
        let m = mounted_at((libc::major(rdev), libc::minor(rdev)))?;
        return Some(InUse::Mounted {
            mount_point: m.mount_point.clone(),
            fstype: m.fstype.clone(),
            loop_device: None,
        });
    }
    if !meta.is_file() {
        return None;
    }
    let loops = loops_backed_by(meta);
    for (dev, num) in &loops {
        if let Some(m) = mounted_at(*num) {
            return Some(InUse::Mounted {
                mount_point: m.mount_point.clone(),
                fstype: m.fstype.clone(),
                loop_device: Some(dev.clone()),
            });
        }
    }
    if writing {
        for (dev, _) in loops {
            let held = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_EXCL)
                .open(&dev)
                .err()
                .is_some_and(|e| e.raw_os_error() == Some(libc::EBUSY));
            if held {
                return Some(InUse::Held { device: dev });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn mountinfo_lines() {
        let m = parse_mountinfo("36 35 7:3 / /mnt/my\\040disk rw,relatime shared:1 - ext4 /dev/loop3 rw,seclabel")
            .expect("parsed");
        assert_eq!(m.dev, (7, 3));
        assert_eq!(m.mount_point, Path::new("/mnt/my disk"));
        assert_eq!(m.fstype, "ext4");
        assert_eq!(m.source, "/dev/loop3");
        let f = parse_mountinfo("40 1 0:50 / /m rw - fuse.ext4kit /srv/a\\134b.img rw").expect("parsed");
        assert_eq!(f.fstype, "fuse.ext4kit");
        assert_eq!(f.source, "/srv/a\\b.img");
        assert!(parse_mountinfo("garbage").is_none());
    }
}
