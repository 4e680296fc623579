//! `mkfs` through the library on devices that do not read as zeros: a file
//! full of old bytes, and a memory device. The result must still pass
//! `e2fsck -fn` (inode tables, journal and first KiB zeroed as needed).

use ext4kit_engine::device::{FileDevice, MemDevice};
use ext4kit_engine::mkfs::{FsType, MkfsOptions, mkfs};
use ext4kit_engine::{BlockDevice, Filesystem, OpenOptions};
use ext4kit_testkit::tools::{assert_fsck_clean, require_tool, skip_unless};

fn dirty_file(len: usize) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    let junk: Vec<u8> = (0..len).map(|i| (i * 7 + 0xA5) as u8).collect();
    std::fs::write(f.path(), junk).unwrap();
    f
}

#[test]
fn old_bytes_on_the_device_do_not_leak_into_the_new_file_system() {
    let Some(_) = skip_unless(require_tool("e2fsck")) else {
        return;
    };
    for (fs_type, lazy) in [
        (FsType::Ext4, true),
        (FsType::Ext4, false),
        (FsType::Ext3, true),
        (FsType::Ext2, true),
    ] {
        let f = dirty_file(16 << 20);
        let dev = FileDevice::open(f.path(), true).unwrap();
        let opts = MkfsOptions {
            fs_type,
            lazy_itable_init: lazy,
            ..MkfsOptions::default()
        };
        let r = mkfs(&dev, &opts).unwrap();
        assert_eq!(r.plan.blocks_count, 16384);
        drop(dev);
        assert_fsck_clean(f.path()).unwrap_or_else(|e| panic!("{fs_type:?} lazy={lazy}: {e}"));
    }
}

#[test]
fn memory_device_round_trips_through_the_engine() {
    let dev = MemDevice::new(vec![0u8; 4 << 20]);
    let opts = MkfsOptions {
        timestamp: Some(1_700_000_000),
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        ..Default::default()
    };
    let r = mkfs(&dev, &opts).unwrap();
    assert_eq!(r.journal_blocks, 1024);
    let fs = Filesystem::open(Box::new(MemDevice::new(dev.snapshot())), OpenOptions::default()).unwrap();
    assert_eq!(fs.superblock().s_mkfs_time.get(), 1_700_000_000);
    let root = fs.resolve(b"/lost+found").unwrap();
    assert!(root.is_dir());
    assert!(!dev.is_empty());
}
