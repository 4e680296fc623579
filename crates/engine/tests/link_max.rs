//! `EXT4_LINK_MAX`: an inode holds at most 65,000 hard links
//! (`i_links_count` is 16 bits; `ext4_link` answers `EMLINK` beyond). The
//! names are spread over 100 directories so each stays a small linear one.

mod common;

use std::os::unix::fs::MetadataExt;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};
/// `EXT4_LINK_MAX`.
const LINK_MAX: u32 = 65_000;
const DIRS: u32 = 100;

#[test]
fn linking_past_65000_names_is_emlink_and_the_image_stays_clean() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), OpenOptions::default()).unwrap();
    let file = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(file, 0, b"linked").unwrap();
    let dirs: Vec<u32> = (0..DIRS)
        .map(|d| {
            fs.create(ROOT_INO, format!("d{d}").as_bytes(), NodeKind::Directory, ATTR)
                .unwrap()
                .ino
        })
        .collect();
    for i in 1..LINK_MAX {
        fs.link(file, dirs[(i % DIRS) as usize], format!("l{i}").as_bytes())
            .unwrap();
    }
    assert_eq!(fs.inode(file).unwrap().raw.links(), 65_000);
    let r = fs.link(file, ROOT_INO, b"one-too-many");
    assert!(matches!(r, Err(Error::TooManyLinks(_))), "{r:?}");
    assert_eq!(r.unwrap_err().errno(), libc::EMLINK);
    // Nothing changed: the name is absent, the count stays.
    assert!(fs.resolve(b"one-too-many").is_err());
    assert_eq!(fs.inode(file).unwrap().raw.links(), 65_000);
    // One name fewer makes room for exactly one more.
    fs.unlink(dirs[1], b"l1").unwrap();
    fs.link(file, ROOT_INO, b"last").unwrap();
    assert!(matches!(fs.link(file, ROOT_INO, b"again"), Err(Error::TooManyLinks(_))));
    drop(fs);
    let r = e2fsck_fn(&img).unwrap();
    assert!(r.is_clean(), "{}", r.output);
    if can_loop_mount().is_ok() {
        let mnt = LoopMount::ro(&img).expect("kernel mount");
        let md = std::fs::metadata(mnt.path().join("last")).unwrap();
        assert_eq!(md.nlink(), 65_000);
        assert_eq!(std::fs::read(mnt.path().join("d7/l7")).unwrap(), b"linked");
    }
}
