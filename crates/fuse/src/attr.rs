//! Translating between the engine's view of an inode and FUSE's: inode
//! numbers (FUSE's root is 1, ext4's is 2), `stat` fields, times and ids.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ext4kit_engine::{Metadata, ROOT_INO};
use ext4kit_format::inode::{FileType as Ext4Type, Timestamp};
use fuser::{FileAttr, FileType, INodeNo};

use crate::options::{IdMap, MountConfig};

/// FUSE's number for ext4 inode `ino`.
pub(crate) fn fuse_ino(ino: u32) -> INodeNo {
    if ino == ROOT_INO {
        INodeNo(1)
    } else {
        INodeNo(u64::from(ino))
    }
}

/// The ext4 inode behind FUSE number `n` (`None` for numbers we never gave out).
pub(crate) fn ext4_ino(n: INodeNo) -> Option<u32> {
    match n.0 {
        1 => Some(ROOT_INO),
        0 => None,
        n => u32::try_from(n).ok(),
    }
}

pub(crate) fn fuse_type(t: Ext4Type) -> FileType {
    match t {
        Ext4Type::Regular => FileType::RegularFile,
        Ext4Type::Directory => FileType::Directory,
        Ext4Type::Symlink => FileType::Symlink,
        Ext4Type::CharDevice => FileType::CharDevice,
        Ext4Type::BlockDevice => FileType::BlockDevice,
        Ext4Type::Fifo => FileType::NamedPipe,
        Ext4Type::Socket => FileType::Socket,
    }
}

pub(crate) fn system_time(t: Timestamp) -> SystemTime {
    let base = if t.secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.secs as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs())
    };
    base + Duration::from_nanos(u64::from(t.nsecs))
}

pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            secs: d.as_secs() as i64,
            nsecs: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            let (secs, nsecs) = (-(d.as_secs() as i64), d.subsec_nanos());
            if nsecs == 0 {
                Timestamp { secs, nsecs: 0 }
            } else {
                Timestamp {
                    secs: secs - 1,
                    nsecs: 1_000_000_000 - nsecs,
                }
            }
        }
    }
}

/// A time from a `setattr` request. fuser 0.18 builds a time before 1970
/// as epoch − (|secs| + nsecs) instead of epoch − |secs| + nsecs (its
/// `system_time_from_time`); this undoes exactly that.
pub(crate) fn request_timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(_) => timestamp(t),
        Err(e) => Timestamp {
            secs: -(e.duration().as_secs() as i64),
            nsecs: e.duration().subsec_nanos(),
        },
    }
}

/// Linux's `new_encode_dev`: 12 bits of major, 20 of minor, interleaved.
fn encode_rdev((major, minor): (u32, u32)) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// `(major, minor)` from a `dev_t` as `mknod` passes it.
pub(crate) fn decode_rdev(rdev: u32) -> (u32, u32) {
    ((rdev >> 8) & 0xfff, (rdev & 0xff) | ((rdev >> 12) & 0xfff00))
}

pub(crate) fn file_attr(m: &Metadata, block_size: u32, cfg: &MountConfig) -> FileAttr {
    FileAttr {
        ino: fuse_ino(m.ino),
        size: m.size,
        blocks: m.blocks,
        atime: system_time(m.atime),
        mtime: system_time(m.mtime),
        ctime: system_time(m.ctime),
        crtime: m.crtime.map_or(UNIX_EPOCH, system_time),
        kind: fuse_type(m.file_type),
        perm: m.perm,
        nlink: m.nlink,
        uid: IdMap::to_host(cfg.uid_map, m.uid),
        gid: IdMap::to_host(cfg.gid_map, m.gid),
        rdev: encode_rdev(m.rdev),
        blksize: block_size,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_round_trip_and_root_is_one() {
        assert_eq!(fuse_ino(ROOT_INO), INodeNo(1));
        assert_eq!(ext4_ino(INodeNo(1)), Some(ROOT_INO));
        assert_eq!(ext4_ino(fuse_ino(12)), Some(12));
        assert_eq!(ext4_ino(INodeNo(0)), None);
        assert_eq!(ext4_ino(INodeNo(1 << 40)), None);
    }

    #[test]
    fn device_numbers_round_trip() {
        for dev in [(8, 1), (259, 70000), (0, 0), (4095, 0xfffff)] {
            assert_eq!(decode_rdev(encode_rdev(dev)), dev);
        }
    }

    #[test]
    fn request_times_undo_fusers_pre_1970_conversion() {
        // fuser turns (secs -5, nsecs 250 ms) into epoch - 5.25 s.
        let sent = UNIX_EPOCH - Duration::new(5, 250_000_000);
        let t = request_timestamp(sent);
        assert_eq!((t.secs, t.nsecs), (-5, 250_000_000));
        let later = UNIX_EPOCH + Duration::new(7, 9);
        assert_eq!(request_timestamp(later), timestamp(later));
    }

    #[test]
    fn times_before_1970_keep_their_nanoseconds() {
        let t = Timestamp {
            secs: -2,
            nsecs: 250_000_000,
        };
        assert_eq!(timestamp(system_time(t)), t);
        let t = Timestamp {
            secs: 1_700_000_000,
            nsecs: 999,
        };
        assert_eq!(timestamp(system_time(t)), t);
    }
}
