//! `Filesystem::grow_online` on an open, writable file system: a shrink is
//! refused as the kernel refuses it, the same size is nothing to do, a
//! grow is planned (the offline planner's refusals included) and refused
//! as not done yet; the file system stays usable and e2fsck-clean.

mod common;

use ext4kit_engine::{Attr, Error, NodeKind, ROOT_INO};
use ext4kit_testkit::tools::assert_fsck_clean;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

#[test]
fn grow_online_refuses_shrinks_and_plans_grows() {
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &["-b", "1024"], "16M") else {
        return;
    };
    let fs = common::open_rw(&img);
    let before = fs.geometry().blocks_count;
    assert_eq!(before, 16384);

    let shrink = fs.grow_online(8192).unwrap_err();
    assert!(
        matches!(&shrink, Error::InvalidArgument(m) if m.contains("shrinking a mounted")),
        "{shrink}"
    );

    let same = fs.grow_online(before).unwrap();
    assert_eq!((same.old_blocks, same.new_blocks), (before, before));

    let grow = fs.grow_online(32768).unwrap_err();
    assert!(
        matches!(&grow, Error::Unsupported(m) if m.contains("16384 to 32768 blocks, 2 new groups")),
        "{grow}"
    );
    // Far past the reserved GDT blocks: the planner's own refusal.
    let far = fs.grow_online(1 << 31).unwrap_err();
    assert!(matches!(&far, Error::Unsupported(m) if m.contains("meta_bg")), "{far}");

    assert_eq!(fs.geometry().blocks_count, before);
    let f = fs.create(ROOT_INO, b"after", NodeKind::Regular, ATTR).unwrap();
    fs.write(f.ino, 0, b"still writable").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}
