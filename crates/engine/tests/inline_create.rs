//! Creates on an `inline_data` file system: a new file and a new directory
//! start inline (as mke2fs -d and the kernel make them), writes and entries
//! that fit stay inline, and the body moves to blocks on the first change
//! that does not fit; e2fsck -fn passes after each stage.

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions};
use ext4kit_testkit::tools::{assert_fsck_clean, require_tool, skip_unless};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn open(path: &std::path::Path) -> Filesystem {
    let dev = FileDevice::open(path, true).unwrap();
    Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap()
}

#[test]
fn new_files_and_directories_start_inline_and_grow_out() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must have e2fsck");
        return;
    }
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().set_len(16 << 20).unwrap();
    {
        let dev = FileDevice::open(f.path(), true).unwrap();
        let mut opts = MkfsOptions::default();
        opts.add_features("inline_data");
        mkfs(&dev, &opts).unwrap();
    }
    let fs = open(f.path());
    let file = fs.create(2, b"file", NodeKind::Regular, ATTR).unwrap();
    assert!(file.has_inline_data(), "an empty new file is inline");
    let dir = fs.create(2, b"dir", NodeKind::Directory, ATTR).unwrap();
    assert!(dir.has_inline_data(), "a new directory is inline");
    assert_eq!(dir.size(), 60);
    fs.write(file.ino, 0, &[5u8; 100]).unwrap();
    let child = fs.create(dir.ino, b"child", NodeKind::Regular, ATTR).unwrap();
    fs.write(child.ino, 0, b"small").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(f.path()).unwrap();

    let fs = open(f.path());
    let file = fs.resolve(b"/file").unwrap();
    assert!(file.has_inline_data(), "100 bytes fit a 256-byte inode");
    assert_eq!(fs.read_all(&file, 1 << 20).unwrap(), vec![5u8; 100]);
    assert!(fs.resolve(b"/dir").unwrap().has_inline_data(), "one entry fits i_block");
    fs.write(file.ino, 100, &[6u8; 2000]).unwrap();
    let dir = fs.resolve(b"/dir").unwrap();
    for i in 0..10 {
        fs.create(dir.ino, format!("entry_{i}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap();
    }
    fs.unmount().unwrap();
    assert_fsck_clean(f.path()).unwrap();

    let fs = open(f.path());
    let file = fs.resolve(b"/file").unwrap();
    assert!(!file.has_inline_data(), "2100 bytes moved to a block");
    let mut want = vec![5u8; 100];
    want.extend([6u8; 2000]);
    assert_eq!(fs.read_all(&file, 1 << 20).unwrap(), want);
    let dir = fs.resolve(b"/dir").unwrap();
    assert!(!dir.has_inline_data(), "eleven entries moved the directory to a block");
    assert_eq!(fs.read_dir(&dir).unwrap().len(), 13);
    let child = fs.resolve(b"/dir/child").unwrap();
    assert_eq!(fs.read_all(&child, 100).unwrap(), b"small");
}
