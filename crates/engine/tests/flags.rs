//! Inode flags (`FS_IOC_SETFLAGS` semantics) and what they forbid: every
//! refused operation returns `EPERM` and changes nothing; the image stays
//! e2fsck-clean and the kernel sees the flags we set (`lsattr`). Access
//! times follow the `noatime`/`relatime`/`strictatime` policies and the
//! per-inode NOATIME flag.

mod common;

use std::path::Path;

use common::{mkfs, run};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{
    AtimePolicy, Attr, Error, FallocMode, Filesystem, NodeKind, OpenOptions, ROOT_INO, RenameFlags, SetAttr, XattrSet,
};
use ext4kit_format::inode::{Timestamp, flags as fl};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
const JOURNAL_DATA: u32 = 0x4000;
const DIRSYNC: u32 = 0x1_0000;
const INDEX: u32 = 0x1000;
const NODUMP: u32 = 0x40;

fn open_rw(img: &Path) -> Filesystem {
    let dev = FileDevice::open(img, true).expect("open rw");
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("open fs")
}

fn eperm<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.errno(), libc::EPERM, "{what}: {e}"),
        Ok(v) => panic!("{what}: succeeded ({v:?})"),
    }
}

fn eopnotsupp<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.errno(), libc::EOPNOTSUPP, "{what}: {e}"),
        Ok(v) => panic!("{what}: succeeded ({v:?})"),
    }
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "e2fsck -fn exited {}:\n{}", r.code, r.output);
}

/// The attribute letters `lsattr -d` shows for `path` on a kernel mount.
fn lsattr(path: &Path) -> String {
    let out = run("lsattr", &["-d", path.to_str().unwrap()]);
    out.split_whitespace().next().unwrap_or_default().to_string()
}

#[test]
fn immutable_refuses_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap();
    fs.write(f.ino, 0, b"frozen").unwrap();
    fs.set_xattr(f.ino, b"user.a", b"1", XattrSet::Any).unwrap();
    let other = fs.create(ROOT_INO, b"other", NodeKind::Regular, ATTR).unwrap();
    eperm(fs.set_flags(f.ino, fl::IMMUTABLE, false), "unprivileged IMMUTABLE");
    let before = fs.inode(f.ino).unwrap();
    let after = fs.set_flags(f.ino, fl::IMMUTABLE | fl::EXTENTS, true).unwrap();
    assert_eq!(after.raw.flags(), fl::IMMUTABLE | fl::EXTENTS);
    assert!(after.raw.ctime() >= before.raw.ctime());
    eperm(fs.write(f.ino, 6, b"more"), "write");
    eperm(fs.truncate(f.ino, 0), "truncate");
    let atime = Timestamp { secs: 1, nsecs: 0 };
    eperm(
        fs.setattr(
            f.ino,
            &SetAttr {
                atime: Some(atime),
                ..SetAttr::default()
            },
        ),
        "setattr atime",
    );
    eperm(fs.setattr(f.ino, &SetAttr::default()), "setattr of nothing");
    eperm(fs.unlink(ROOT_INO, b"f"), "unlink");
    eperm(
        fs.rename(ROOT_INO, b"f", ROOT_INO, b"g", RenameFlags::default()),
        "rename source",
    );
    eperm(
        fs.rename(ROOT_INO, b"other", ROOT_INO, b"f", RenameFlags::default()),
        "rename over it",
    );
    let exchange = RenameFlags {
        exchange: true,
        ..RenameFlags::default()
    };
    eperm(fs.rename(ROOT_INO, b"other", ROOT_INO, b"f", exchange), "exchange");
    eperm(fs.link(f.ino, ROOT_INO, b"f2"), "link");
    eperm(fs.set_xattr(f.ino, b"user.b", b"2", XattrSet::Any), "set_xattr");
    eperm(fs.remove_xattr(f.ino, b"user.a"), "remove_xattr");
    eperm(
        fs.fallocate(f.ino, 0, 4096, FallocMode::Allocate { keep_size: true }),
        "fallocate",
    );
    eperm(
        fs.set_flags(f.ino, fl::IMMUTABLE | fl::EXTENTS | fl::NOATIME, true),
        "other flags while immutable",
    );
    // Nothing changed; reads still work.
    assert_eq!(fs.read_all(&fs.resolve(b"/f").unwrap(), 100).unwrap(), b"frozen");
    assert_eq!(fs.inode(f.ino).unwrap().raw.flags(), fl::IMMUTABLE | fl::EXTENTS);
    assert_eq!(fs.resolve(b"/other").unwrap().ino, other.ino);
    drop(fs);
    assert_clean(&img);
    if can_loop_mount().is_ok() {
        let m = LoopMount::ro(&img).unwrap();
        assert!(lsattr(&m.path().join("f")).contains('i'), "the kernel sees i");
        drop(m);
    }
    // Clearing it (privileged) gives everything back.
    let fs = open_rw(&img);
    eperm(fs.set_flags(f.ino, fl::EXTENTS, false), "unprivileged clear");
    fs.set_flags(f.ino, fl::EXTENTS, true).unwrap();
    fs.write(f.ino, 6, b"!").unwrap();
    fs.link(f.ino, ROOT_INO, b"f2").unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    drop(fs);
    assert_clean(&img);
}

#[test]
fn append_only_allows_appending_only() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let f = fs.create(ROOT_INO, b"log", NodeKind::Regular, ATTR).unwrap();
    fs.write(f.ino, 0, b"line 1\n").unwrap();
    eperm(
        fs.set_flags(f.ino, fl::APPEND | fl::EXTENTS, false),
        "unprivileged APPEND",
    );
    fs.set_flags(f.ino, fl::APPEND | fl::EXTENTS, true).unwrap();
    fs.write(f.ino, 7, b"line 2\n").unwrap();
    eperm(fs.write(f.ino, 0, b"LINE"), "write below the end");
    eperm(fs.truncate(f.ino, 20), "truncate up");
    eperm(fs.truncate(f.ino, 0), "truncate down");
    eperm(
        fs.setattr(
            f.ino,
            &SetAttr {
                perm: Some(0o600),
                ..SetAttr::default()
            },
        ),
        "chmod",
    );
    eperm(
        fs.setattr(
            f.ino,
            &SetAttr {
                uid: Some(5),
                ..SetAttr::default()
            },
        ),
        "chown",
    );
    fs.setattr(f.ino, &SetAttr::default()).unwrap();
    eperm(fs.unlink(ROOT_INO, b"log"), "unlink");
    eperm(
        fs.rename(ROOT_INO, b"log", ROOT_INO, b"log2", RenameFlags::default()),
        "rename",
    );
    eperm(fs.link(f.ino, ROOT_INO, b"log2"), "link");
    eperm(fs.set_xattr(f.ino, b"user.x", b"1", XattrSet::Any), "set_xattr");
    eperm(fs.fallocate(f.ino, 0, 4096, FallocMode::PunchHole), "punch hole");
    fs.fallocate(f.ino, 0, 8192, FallocMode::Allocate { keep_size: true })
        .unwrap();
    // Unprivileged changes of other flags keep APPEND as it is.
    fs.set_flags(f.ino, fl::APPEND | fl::EXTENTS | NODUMP, false).unwrap();
    eperm(fs.set_flags(f.ino, fl::EXTENTS | NODUMP, false), "unprivileged clear");
    assert_eq!(
        fs.read_all(&fs.resolve(b"/log").unwrap(), 100).unwrap(),
        b"line 1\nline 2\n"
    );
    // An append-only directory: names may come, none may go.
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    fs.create(d.ino, b"old", NodeKind::Regular, ATTR).unwrap();
    fs.set_flags(d.ino, fl::APPEND | fl::EXTENTS, true).unwrap();
    fs.create(d.ino, b"new", NodeKind::Regular, ATTR).unwrap();
    eperm(fs.unlink(d.ino, b"old"), "unlink in an append-only directory");
    eperm(
        fs.rename(d.ino, b"old", ROOT_INO, b"moved", RenameFlags::default()),
        "rename out of it",
    );
    drop(fs);
    assert_clean(&img);
    if can_loop_mount().is_ok() {
        let m = LoopMount::ro(&img).unwrap();
        let letters = lsattr(&m.path().join("log"));
        assert!(letters.contains('a') && letters.contains('d'), "{letters}");
    }
}

#[test]
fn immutable_directory_refuses_new_and_removed_names() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    let inner = fs.create(d.ino, b"inner", NodeKind::Regular, ATTR).unwrap();
    fs.set_flags(d.ino, fl::IMMUTABLE | fl::EXTENTS, true).unwrap();
    eperm(fs.create(d.ino, b"x", NodeKind::Regular, ATTR), "create");
    eperm(fs.unlink(d.ino, b"inner"), "unlink");
    eperm(fs.link(inner.ino, d.ino, b"again"), "link into it");
    eperm(
        fs.rename(ROOT_INO, b"d", ROOT_INO, b"e", RenameFlags::default()),
        "rename it",
    );
    // The file inside is not itself immutable.
    fs.write(inner.ino, 0, b"ok").unwrap();
    drop(fs);
    assert_clean(&img);
}

#[test]
fn set_flags_follows_the_kernel_masks() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap();
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    let l = fs
        .create(ROOT_INO, b"l", NodeKind::Symlink(b"f".to_vec()), ATTR)
        .unwrap();
    eopnotsupp(fs.set_flags(f.ino, fl::EXTENTS | 0x8000_0000, false), "reserved bit");
    eopnotsupp(fs.set_flags(f.ino, fl::EXTENTS | DIRSYNC, false), "DIRSYNC on a file");
    eopnotsupp(fs.set_flags(f.ino, 0, false), "clearing EXTENTS (a migration)");
    eopnotsupp(fs.set_flags(l.ino, fl::IMMUTABLE, true), "IMMUTABLE on a symlink");
    eperm(
        fs.set_flags(f.ino, fl::EXTENTS | JOURNAL_DATA, false),
        "JOURNAL_DATA unprivileged",
    );
    fs.set_flags(f.ino, fl::EXTENTS | JOURNAL_DATA, true).unwrap();
    // Visible but unchangeable bits (INDEX) are ignored, as chattr relies on.
    let want = fl::EXTENTS | JOURNAL_DATA | fl::NOATIME;
    let got = fs.set_flags(f.ino, want | INDEX, false).unwrap();
    assert_eq!(got.raw.flags(), want);
    fs.set_flags(d.ino, fl::EXTENTS | DIRSYNC, false).unwrap();
    fs.set_flags(l.ino, NODUMP, false).unwrap();
    assert_eq!(fs.metadata(&fs.inode(l.ino).unwrap()).unwrap().flags & NODUMP, NODUMP);
    drop(fs);
    assert_clean(&img);
    if can_loop_mount().is_ok() {
        let m = LoopMount::ro(&img).unwrap();
        let letters = lsattr(&m.path().join("f"));
        assert!(letters.contains('A') && letters.contains('j'), "{letters}");
        assert!(lsattr(&m.path().join("d")).contains('D'));
    }
}

/// Sets the atime, mtime and ctime (seconds) of `ino` with debugfs.
fn set_times(img: &Path, ino: u32, atime: i64, mtime: i64, ctime: i64) {
    for (field, v) in [("atime", atime), ("mtime", mtime), ("ctime", ctime)] {
        let req = format!("sif <{ino}> {field} @{v}");
        run("debugfs", &["-w", "-R", &req, img.to_str().unwrap()]);
    }
}

#[test]
fn access_times_follow_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "32M") else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (hour, day) = (3600, 86_400);
    let ino = {
        let fs = open_rw(&img);
        let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap();
        assert!(!fs.touch_atime(f.ino, AtimePolicy::NoAtime).unwrap());
        // New: atime == mtime, so relatime updates once, then not again.
        assert!(fs.touch_atime(f.ino, AtimePolicy::Relatime).unwrap());
        assert!(!fs.touch_atime(f.ino, AtimePolicy::Relatime).unwrap());
        assert!(fs.touch_atime(f.ino, AtimePolicy::Strict).unwrap());
        f.ino
    };
    let atime = |img: &Path| {
        let fs = common::open(img, OpenOptions::default()).unwrap();
        fs.inode(ino).unwrap().raw.atime().secs
    };
    // Read an hour ago, changed three days ago: relatime leaves it.
    set_times(&img, ino, now - hour, now - 3 * day, now - 3 * day);
    assert!(!open_rw(&img).touch_atime(ino, AtimePolicy::Relatime).unwrap());
    assert_eq!(atime(&img), now - hour);
    // Read two days ago: a day old, so relatime refreshes it.
    set_times(&img, ino, now - 2 * day, now - 3 * day, now - 3 * day);
    assert!(open_rw(&img).touch_atime(ino, AtimePolicy::Relatime).unwrap());
    assert!(atime(&img) >= now);
    // Modified after the last read: refreshed.
    set_times(&img, ino, now - 2 * hour, now - hour, now - 3 * day);
    assert!(open_rw(&img).touch_atime(ino, AtimePolicy::Relatime).unwrap());
    // NOATIME on the inode wins over every policy.
    set_times(&img, ino, now - 2 * day, now - 3 * day, now - 3 * day);
    let fs = open_rw(&img);
    fs.set_flags(ino, fl::EXTENTS | fl::NOATIME, false).unwrap();
    assert!(!fs.touch_atime(ino, AtimePolicy::Strict).unwrap());
    assert!(!fs.touch_atime(ino, AtimePolicy::Relatime).unwrap());
    drop(fs);
    assert_eq!(atime(&img), now - 2 * day);
    assert_clean(&img);
    // A read-only image is never written.
    let ro = common::open(&img, OpenOptions::default()).unwrap();
    assert!(!ro.touch_atime(ino, AtimePolicy::Strict).unwrap());
}
