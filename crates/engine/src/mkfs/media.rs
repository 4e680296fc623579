//! Is the device a rotating disk? For `-G auto` ([`super::flexsize`]):
//! the block layer says so in `/sys/dev/block/MAJ:MIN/queue/rotational`
//! (`1` rotating, `0` flash). A partition has no `queue/` of its own; its
//! disk's is one directory up. An image file sits on the device of its
//! file system (`st_dev`); a file system with no disk behind it (tmpfs,
//! overlayfs, btrfs's anonymous device numbers, major 0) gives no answer.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use super::flexsize::Media;

/// The media behind `path` (a block device, or any file on a file
/// system), from `/sys`; `None` when it cannot be told.
pub fn detect_media(path: &Path) -> Option<Media> {
    detect_media_in(Path::new("/sys"), path)
}

/// [`detect_media`] with sysfs mounted at `sys` (tests use a fake tree).
pub fn detect_media_in(sys: &Path, path: &Path) -> Option<Media> {
    let meta = std::fs::metadata(path).ok()?;
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    rotational(sys, major(dev), minor(dev))
}

/// `queue/rotational` of device `major:minor`, or of its parent disk.
pub fn rotational(sys: &Path, major: u32, minor: u32) -> Option<Media> {
    if major == 0 {
        return None;
    }
    let node = sys.join(format!("dev/block/{major}:{minor}"));
    let node = std::fs::canonicalize(&node).unwrap_or(node);
    let read = |dir: &Path| std::fs::read_to_string(dir.join("queue/rotational")).ok();
    let text = read(&node).or_else(|| node.parent().and_then(read))?;
    match text.trim() {
        "1" => Some(Media::Hdd),
        "0" => Some(Media::Ssd),
        _ => None,
    }
}

/// `major()` of a Linux `dev_t` (glibc's encoding).
fn major(dev: u64) -> u32 {
    (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32
}

/// `minor()` of a Linux `dev_t`.
fn minor(dev: u64) -> u32 {
    ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A fake `/sys`: a rotating disk 8:0 with partition 8:1, a flash
    /// disk 259:0.
    #[test]
    fn reads_rotational_for_disks_and_partitions() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(&s.join("devices/sda/queue/rotational"), "1\n");
        std::fs::create_dir_all(s.join("devices/sda/sda1")).unwrap();
        write(&s.join("devices/nvme0n1/queue/rotational"), "0\n");
        std::fs::create_dir_all(s.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(s.join("devices/sda"), s.join("dev/block/8:0")).unwrap();
        std::os::unix::fs::symlink(s.join("devices/sda/sda1"), s.join("dev/block/8:1")).unwrap();
        std::os::unix::fs::symlink(s.join("devices/nvme0n1"), s.join("dev/block/259:0")).unwrap();
        assert_eq!(rotational(s, 8, 0), Some(Media::Hdd));
        assert_eq!(rotational(s, 8, 1), Some(Media::Hdd), "a partition reads its disk's");
        assert_eq!(rotational(s, 259, 0), Some(Media::Ssd));
        assert_eq!(rotational(s, 0, 45), None, "tmpfs, overlayfs: no disk");
        assert_eq!(rotational(s, 7, 3), None, "not in this sysfs");
    }

    #[test]
    fn device_numbers_split_as_glibc_does() {
        let dev: u64 = (259 << 8) | 3 | (1 << 20);
        assert_eq!((major(dev), minor(dev)), (259, 3 | (1 << 8)));
        assert_eq!((major(0x0801), minor(0x0801)), (8, 1));
    }
}
