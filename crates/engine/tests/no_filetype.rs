//! Images made with `mkfs.ext4 -O ^filetype`: directory entries carry no
//! type byte there (it is the high half of a 16-bit `name_len`), so every
//! write path — create, mkdir's "." and "..", link, symlink, rename over a
//! name, a directory growing into an htree — must leave it 0. Issue 18's
//! first wrong write: each create set it, e2fsck reported "has filetype
//! set" and the engine could not list its own image.

mod common;

use std::collections::BTreeMap;

use common::{mkfs, open_rw};
use ext4kit_engine::{Attr, NodeKind, ROOT_INO, RenameFlags};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

#[test]
fn every_write_path_leaves_the_type_byte_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024", "-O", "^filetype"], "64M") else {
        return;
    };
    let mut want: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    {
        let fs = open_rw(&img);
        let dir_attr = Attr { perm: 0o755, ..ATTR };
        let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, dir_attr).unwrap().ino;
        for i in 0..600 {
            let n = format!("file-with-a-longer-name-{i:04}").into_bytes();
            want.insert(n.clone(), fs.create(d, &n, NodeKind::Regular, ATTR).unwrap().ino);
        }
        let sub = fs.create(d, b"sub", NodeKind::Directory, dir_attr).unwrap().ino;
        want.insert(b"sub".to_vec(), sub);
        let link = NodeKind::Symlink(b"file-with-a-longer-name-0001".to_vec());
        want.insert(b"sym".to_vec(), fs.create(d, b"sym", link, ATTR).unwrap().ino);
        let first = want[b"file-with-a-longer-name-0000".as_slice()];
        fs.link(first, d, b"hard").unwrap();
        want.insert(b"hard".to_vec(), first);
        fs.rename(
            d,
            b"file-with-a-longer-name-0002",
            d,
            b"file-with-a-longer-name-0003",
            RenameFlags::default(),
        )
        .unwrap();
        let moved = want.remove(b"file-with-a-longer-name-0002".as_slice()).unwrap();
        want.insert(b"file-with-a-longer-name-0003".to_vec(), moved);
        let dir = fs.inode(d).unwrap();
        assert!(dir.size() > 2 * 1024, "the directory should have grown into an htree");
        let listed: BTreeMap<Vec<u8>, u32> = fs
            .read_dir(&dir)
            .unwrap()
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .inspect(|e| assert_eq!(e.file_type, None, "{:?} carries a type", e.name))
            .map(|e| (e.name, e.ino))
            .collect();
        assert_eq!(listed, want);
        fs.unmount().unwrap();
    }
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    if can_loop_mount().is_err() {
        ext4kit_testkit::skipped!("the kernel's listing of the ^filetype image (no loop mounts)");
        assert!(std::env::var_os("CI").is_none(), "CI can loop-mount");
        return;
    }
    let m = LoopMount::ro(&img).unwrap();
    let mut seen = BTreeMap::new();
    for e in std::fs::read_dir(m.path().join("d")).unwrap() {
        let e = e.unwrap();
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::DirEntryExt;
        seen.insert(e.file_name().as_bytes().to_vec(), e.ino() as u32);
    }
    m.unmount().unwrap();
    assert_eq!(seen, want, "the kernel's listing");
}
