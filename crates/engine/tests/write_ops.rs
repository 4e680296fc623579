//! The write path against the oracles: on mke2fs-made images of several
//! feature sets, create files, directories, links of every kind, write data
//! at scattered offsets (holes, extent trees that grow an index level),
//! fill a directory past one block, remove entries — then `e2fsck -fn` must
//! be clean and both the engine and the kernel must read back exactly the
//! model of what was written.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{mkfs, open};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO, RenameFlags, SetAttr};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 1000,
    gid: 100,
};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn open_rw(img: &Path) -> Filesystem {
    let dev = FileDevice::open(img, true).expect("open rw");
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("open fs")
}

/// Runs the workload; returns the expected regular-file contents by path.
fn workload(fs: &Filesystem) -> BTreeMap<String, Vec<u8>> {
    let mut model = BTreeMap::new();
    let bs = fs.block_size();
    let a = fs
        .create(ROOT_INO, b"a", NodeKind::Directory, Attr { perm: 0o755, ..ATTR })
        .unwrap();
    let b = fs
        .create(a.ino, b"b", NodeKind::Directory, Attr { perm: 0o700, ..ATTR })
        .unwrap();
    for (name, len) in [
        ("empty", 0usize),
        ("one", 1),
        ("block", bs),
        ("odd", 5000),
        ("big", 3 << 20),
    ] {
        let f = fs.create(a.ino, name.as_bytes(), NodeKind::Regular, ATTR).unwrap();
        let data = pattern(len, len as u8);
        // Two writes: the tail first, then the head, so the file grows out of order.
        let half = len / 2;
        fs.write(f.ino, half as u64, &data[half..]).unwrap();
        fs.write(f.ino, 0, &data[..half]).unwrap();
        model.insert(format!("a/{name}"), data);
    }
    // Every other block: 40 extents, so the root grows an index level.
    let sparse = fs.create(b.ino, b"sparse", NodeKind::Regular, ATTR).unwrap();
    let mut want = vec![0u8; 80 * bs + 10];
    for i in (0..80).step_by(2) {
        let chunk = pattern(bs, i as u8);
        fs.write(sparse.ino, (i * bs) as u64, &chunk).unwrap();
        want[i * bs..(i + 1) * bs].copy_from_slice(&chunk);
    }
    fs.write(sparse.ino, (80 * bs) as u64, &[0u8; 10]).unwrap();
    model.insert("a/b/sparse".into(), want);
    // Overwrite in the middle of a mapped range, across a block boundary.
    let big = fs.resolve(b"/a/big").unwrap();
    let patch = pattern(3000, 99);
    fs.write(big.ino, (bs as u64) * 3 - 1000, &patch).unwrap();
    let m = model.get_mut("a/big").unwrap();
    m[bs * 3 - 1000..bs * 3 + 2000].copy_from_slice(&patch);
    let one = fs.resolve(b"/a/one").unwrap();
    fs.link(one.ino, b.ino, b"one-link").unwrap();
    model.insert("a/b/one-link".into(), model["a/one"].clone());
    let odd = fs.resolve(b"/a/odd").unwrap();
    let mtime = ext4kit_format::inode::Timestamp {
        secs: 1_234_567_890,
        nsecs: 123_456_789,
    };
    let set = SetAttr {
        perm: Some(0o4750),
        uid: Some(0),
        gid: Some(70_000),
        mtime: Some(mtime),
        ..SetAttr::default()
    };
    fs.setattr(odd.ino, &set).unwrap();
    fs.create(a.ino, b"fast", NodeKind::Symlink(b"big".to_vec()), ATTR)
        .unwrap();
    fs.create(a.ino, b"slow", NodeKind::Symlink(vec![b'x'; 200]), ATTR)
        .unwrap();
    fs.create(a.ino, b"fifo", NodeKind::Fifo, ATTR).unwrap();
    fs.create(a.ino, b"tty", NodeKind::CharDevice(4, 64), ATTR).unwrap();
    fs.create(a.ino, b"disk", NodeKind::BlockDevice(259, 65536), ATTR)
        .unwrap();
    // A directory past one block, then removals.
    let many = fs
        .create(ROOT_INO, b"many", NodeKind::Directory, Attr { perm: 0o755, ..ATTR })
        .unwrap();
    for i in 0..300 {
        let name = format!("file-with-a-rather-long-name-{i:04}");
        let f = fs.create(many.ino, name.as_bytes(), NodeKind::Regular, ATTR).unwrap();
        fs.write(f.ino, 0, name.as_bytes()).unwrap();
        if i % 3 != 0 {
            model.insert(format!("many/{name}"), name.into_bytes());
        }
    }
    for i in (0..300).step_by(3) {
        fs.unlink(many.ino, format!("file-with-a-rather-long-name-{i:04}").as_bytes())
            .unwrap();
    }
    let gone = fs.create(ROOT_INO, b"gone", NodeKind::Directory, ATTR).unwrap();
    fs.create(gone.ino, b"x", NodeKind::Regular, ATTR).unwrap();
    assert!(matches!(fs.rmdir(ROOT_INO, b"gone"), Err(Error::NotEmpty(_))));
    fs.unlink(gone.ino, b"x").unwrap();
    fs.rmdir(ROOT_INO, b"gone").unwrap();
    renames(fs, &mut model);
    truncates(fs, &mut model);
    model
}

fn file(fs: &Filesystem, dir: u32, name: &str, body: &[u8]) {
    let f = fs.create(dir, name.as_bytes(), NodeKind::Regular, ATTR).unwrap();
    fs.write(f.ino, 0, body).unwrap();
}

fn renames(fs: &Filesystem, model: &mut BTreeMap<String, Vec<u8>>) {
    let dir = |p: &str| fs.resolve(p.as_bytes()).unwrap().ino;
    let plain = RenameFlags::default();
    let r = fs.create(ROOT_INO, b"r", NodeKind::Directory, ATTR).unwrap().ino;
    let d1 = fs.create(r, b"d1", NodeKind::Directory, ATTR).unwrap().ino;
    file(fs, d1, "f", b"f");
    file(fs, r, "x", b"x");
    file(fs, r, "y", b"y");
    fs.rename(r, b"x", r, b"x2", plain).unwrap();
    fs.rename(r, b"y", r, b"x2", plain).unwrap();
    fs.rename(r, b"d1", ROOT_INO, b"d1moved", plain).unwrap();
    fs.create(r, b"d2", NodeKind::Directory, ATTR).unwrap();
    fs.rename(ROOT_INO, b"d1moved", r, b"d2", plain).unwrap();
    let noreplace = RenameFlags {
        noreplace: true,
        ..plain
    };
    assert!(matches!(
        fs.rename(r, b"x2", r, b"d2", noreplace),
        Err(Error::Exists(_))
    ));
    assert!(matches!(fs.rename(r, b"x2", r, b"d2", plain), Err(Error::IsDir(_))));
    assert!(matches!(
        fs.rename(ROOT_INO, b"r", dir("/r/d2"), b"r", plain),
        Err(Error::InvalidArgument(_))
    ));
    let e = fs.create(ROOT_INO, b"e", NodeKind::Directory, ATTR).unwrap().ino;
    file(fs, e, "g", b"g");
    fs.rename(
        r,
        b"x2",
        ROOT_INO,
        b"e",
        RenameFlags {
            exchange: true,
            ..plain
        },
    )
    .unwrap();
    model.insert("r/d2/f".into(), b"f".to_vec());
    model.insert("e".into(), b"y".to_vec());
    model.insert("r/x2/g".into(), b"g".to_vec());
    assert_eq!(fs.lookup(&fs.resolve(b"/r/x2").unwrap(), b"..").unwrap(), r);
}

fn truncates(fs: &Filesystem, model: &mut BTreeMap<String, Vec<u8>>) {
    let bs = fs.block_size();
    let sparse = fs.resolve(b"/a/b/sparse").unwrap().ino;
    // Down into the index-level tree, then to a few extents, then up again.
    for keep in [41 * bs + 100, 5 * bs + 7] {
        fs.truncate(sparse, keep as u64).unwrap();
        model.get_mut("a/b/sparse").unwrap().truncate(keep);
    }
    fs.truncate(sparse, (9 * bs) as u64).unwrap();
    model.get_mut("a/b/sparse").unwrap().resize(9 * bs, 0);
    let big = fs.resolve(b"/a/big").unwrap().ino;
    fs.truncate(big, 0).unwrap();
    fs.write(big, 10, b"again").unwrap();
    model.insert("a/big".into(), [&[0u8; 10][..], b"again"].concat());
}

fn errors_change_nothing(fs: &Filesystem) {
    assert!(matches!(
        fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR),
        Err(Error::Exists(_))
    ));
    assert!(matches!(
        fs.create(ROOT_INO, &[b'n'; 256], NodeKind::Regular, ATTR),
        Err(Error::NameTooLong(_))
    ));
    assert!(matches!(fs.unlink(ROOT_INO, b"nope"), Err(Error::NotFound(_))));
    assert!(matches!(fs.unlink(ROOT_INO, b"a"), Err(Error::IsDir(_))));
    let f = fs.resolve(b"/a/one").unwrap();
    assert!(matches!(
        fs.rmdir(fs.resolve(b"/a").unwrap().ino, b"one"),
        Err(Error::NotDir(_))
    ));
    assert!(matches!(
        fs.create(f.ino, b"x", NodeKind::Regular, ATTR),
        Err(Error::NotDir(_))
    ));
    assert!(matches!(fs.write(f.ino, u64::MAX - 1, b"xx"), Err(Error::FileTooBig)));
    let a = fs.resolve(b"/a").unwrap();
    assert!(matches!(fs.link(a.ino, ROOT_INO, b"a2"), Err(Error::IsDir(_))));
    assert!(matches!(fs.link(f.ino, ROOT_INO, b"a"), Err(Error::Exists(_))));
}

fn check_engine(fs: &Filesystem, model: &BTreeMap<String, Vec<u8>>) {
    for (path, data) in model {
        let inode = fs.resolve(format!("/{path}").as_bytes()).unwrap();
        assert_eq!(fs.read_all(&inode, 1 << 30).unwrap(), *data, "{path}");
    }
    let many = fs.resolve(b"/many").unwrap();
    assert_eq!(fs.read_dir(&many).unwrap().len(), 2 + 200);
    assert_eq!(fs.read_link(&fs.resolve(b"/a/slow").unwrap()).unwrap(), vec![b'x'; 200]);
    assert!(fs.resolve(b"/gone").is_err());
}

fn check_kernel(img: &Path, model: &BTreeMap<String, Vec<u8>>) {
    let mnt = LoopMount::ro(img).expect("kernel mount");
    for (path, data) in model {
        assert_eq!(
            std::fs::read(mnt.path().join(path)).unwrap(),
            *data,
            "kernel view of {path}"
        );
    }
    let link = std::fs::read_link(mnt.path().join("a/fast")).unwrap();
    assert_eq!(link, Path::new("big"));
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let tty = std::fs::symlink_metadata(mnt.path().join("a/tty")).unwrap();
    assert!(tty.file_type().is_char_device());
    assert_eq!(tty.rdev(), libc::makedev(4, 64));
    let disk = std::fs::symlink_metadata(mnt.path().join("a/disk")).unwrap();
    assert_eq!(disk.rdev(), libc::makedev(259, 65536));
    let one = std::fs::symlink_metadata(mnt.path().join("a/one")).unwrap();
    assert_eq!((one.uid(), one.nlink()), (1000, 2));
    let odd = std::fs::symlink_metadata(mnt.path().join("a/odd")).unwrap();
    assert_eq!((odd.mode() & 0o7777, odd.uid(), odd.gid()), (0o4750, 0, 70_000));
    assert_eq!(odd.mtime(), 1_234_567_890);
    // 128-byte inodes have no room for nanoseconds.
    assert!([0, 123_456_789].contains(&odd.mtime_nsec()), "{}", odd.mtime_nsec());
    mnt.unmount().expect("unmount");
}

fn run_case(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, args, "64M") else {
        return;
    };
    let model = {
        let fs = open_rw(&img);
        let model = workload(&fs);
        errors_change_nothing(&fs);
        model
    };
    if let Ok(keep) = std::env::var("EXT4KIT_KEEP_IMAGE") {
        std::fs::copy(&img, keep).unwrap();
    }
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(
        fsck.is_clean(),
        "{args:?}: e2fsck -fn after the workload:\n{}",
        fsck.output
    );
    check_engine(&open(&img, OpenOptions::default()).unwrap(), &model);
    match can_loop_mount() {
        Ok(()) => check_kernel(&img, &model),
        Err(why) => ext4kit_testkit::skipped!("kernel read-back ({why})"),
    }
}

#[test]
fn ext4_default_4k() {
    run_case(&["-b", "4096"]);
}

#[test]
fn ext4_1k_blocks() {
    run_case(&["-b", "1024"]);
}

#[test]
fn ext4_without_metadata_csum_with_uninit_bg() {
    run_case(&["-b", "4096", "-O", "^metadata_csum,uninit_bg"]);
}

#[test]
fn ext4_64bit_meta_bg_small_groups() {
    run_case(&["-b", "1024", "-g", "1024", "-O", "64bit,meta_bg,^resize_inode"]);
}

#[test]
fn ext4_orphan_file_csum_seed_128_byte_inodes() {
    run_case(&["-b", "4096", "-I", "128", "-O", "orphan_file,metadata_csum_seed"]);
}

#[test]
fn read_only_images_refuse_writes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "8M") else {
        return;
    };
    let fs = open(&img, OpenOptions::default()).unwrap();
    assert!(matches!(
        fs.create(ROOT_INO, b"x", NodeKind::Regular, ATTR),
        Err(Error::ReadOnly)
    ));
}

/// A directory grown one name at a time past a one-level index: it becomes
/// an htree, leaves split, the root grows a second level and its nodes
/// split; e2fsck checks the index and every name stays reachable.
#[test]
fn big_directory_grows_an_htree() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "1024", "-N", "30000"], "64M") else {
        return;
    };
    let n = 6_000;
    {
        let fs = open_rw(&img);
        let d = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap();
        for i in 0..n {
            fs.create(
                d.ino,
                format!("entry-{i:06}-with-some-length").as_bytes(),
                NodeKind::Regular,
                ATTR,
            )
            .unwrap();
        }
        for i in (0..n).step_by(7) {
            fs.unlink(d.ino, format!("entry-{i:06}-with-some-length").as_bytes())
                .unwrap();
        }
    }
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let htree = common::run("debugfs", &["-R", "htree /big", img.to_str().unwrap()]);
    assert!(
        htree.contains("Indirect levels: 1"),
        "{}",
        &htree[..htree.len().min(300)]
    );
    let fs = open(&img, OpenOptions::default()).unwrap();
    let big = fs.resolve(b"/big").unwrap();
    for i in 0..n {
        let name = format!("entry-{i:06}-with-some-length");
        assert_eq!(fs.lookup(&big, name.as_bytes()).is_ok(), i % 7 != 0, "{name}");
    }
}

fn vfs_acl(user: u32) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (1u16, 6u16, u32::MAX),
        (2, 4, user),
        (4, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// Attributes set, replaced and removed in the inode and in blocks; a block
/// that mke2fs shared between two files is copied, not changed, when one
/// of them changes; e2fsck checks refcounts, hashes and checksums; the
/// kernel reads the values back.
#[test]
fn xattrs_in_inode_and_shared_blocks() {
    use ext4kit_engine::XattrSet;
    if !skip_unless_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "16M") else {
        return;
    };
    {
        // The kernel shares identical attribute blocks (mbcache).
        let mnt = LoopMount::rw(&img, &[]).unwrap();
        for f in ["s1", "s2"] {
            std::fs::write(mnt.path().join(f), f).unwrap();
            xattr::set(mnt.path().join(f), "user.shared", &[b'v'; 1500]).unwrap();
        }
        mnt.unmount().unwrap();
    }
    {
        let fs = open_rw(&img);
        let s1 = fs.resolve(b"/s1").unwrap().ino;
        let s1_block = fs.inode(s1).unwrap().raw.file_acl();
        assert_eq!(
            s1_block,
            fs.resolve(b"/s2").unwrap().raw.file_acl(),
            "the kernel should share the block"
        );
        fs.set_xattr(s1, b"user.shared", b"changed", XattrSet::Replace).unwrap();
        let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
        fs.set_xattr(f, b"user.small", b"1", XattrSet::Create).unwrap();
        assert!(matches!(
            fs.set_xattr(f, b"user.small", b"2", XattrSet::Create),
            Err(Error::Exists(_))
        ));
        assert!(matches!(
            fs.set_xattr(f, b"user.none", b"2", XattrSet::Replace),
            Err(Error::NoAttribute(_))
        ));
        fs.set_xattr(f, b"user.big", &vec![b'b'; 3000], XattrSet::Any).unwrap();
        fs.set_xattr(f, b"trusted.t", b"trusted", XattrSet::Any).unwrap();
        fs.set_xattr(f, b"system.posix_acl_access", &vfs_acl(1000), XattrSet::Any)
            .unwrap();
        fs.set_xattr(f, b"user.gone", b"x", XattrSet::Any).unwrap();
        fs.remove_xattr(f, b"user.gone").unwrap();
        assert!(matches!(fs.remove_xattr(f, b"user.gone"), Err(Error::NoAttribute(_))));
        let g = fs.create(ROOT_INO, b"g", NodeKind::Regular, ATTR).unwrap().ino;
        fs.set_xattr(g, b"user.big", &vec![b'g'; 3000], XattrSet::Any).unwrap();
        fs.unlink(ROOT_INO, b"g").unwrap();
        fs.unlink(ROOT_INO, b"s2").unwrap();
    }
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let fs = open(&img, OpenOptions::default()).unwrap();
    let f = fs.resolve(b"/f").unwrap();
    assert_eq!(fs.xattr(&f, b"user.big").unwrap(), vec![b'b'; 3000]);
    assert_eq!(fs.xattr(&f, b"system.posix_acl_access").unwrap(), vfs_acl(1000));
    assert_eq!(
        fs.xattr(&fs.resolve(b"/s1").unwrap(), b"user.shared").unwrap(),
        b"changed"
    );
    {
        let mnt = LoopMount::ro(&img).unwrap();
        assert_eq!(xattr::get(mnt.path().join("f"), "user.small").unwrap().unwrap(), b"1");
        assert_eq!(
            xattr::get(mnt.path().join("f"), "user.big").unwrap().unwrap(),
            vec![b'b'; 3000]
        );
        assert_eq!(
            xattr::get(mnt.path().join("f"), "trusted.t").unwrap().unwrap(),
            b"trusted"
        );
        assert_eq!(
            xattr::get(mnt.path().join("f"), "system.posix_acl_access")
                .unwrap()
                .unwrap(),
            vfs_acl(1000)
        );
        assert_eq!(
            xattr::get(mnt.path().join("s1"), "user.shared").unwrap().unwrap(),
            b"changed"
        );
        mnt.unmount().unwrap();
    }
}

fn skip_unless_mount() -> bool {
    match can_loop_mount() {
        Ok(()) => true,
        Err(why) => {
            ext4kit_testkit::skipped!("kernel read-back ({why})");
            false
        }
    }
}

#[test]
fn ext2_block_maps_1k() {
    run_case(&["-t", "ext2", "-b", "1024"]);
}

#[test]
fn ext3_block_maps_4k() {
    run_case(&["-t", "ext3", "-b", "4096"]);
}

/// A file fragmented into 2,000 extents on 1 KiB blocks needs an extent tree
/// of depth 2 (a leaf holds 84 extents, the root 4 entries); it is written,
/// shrunk back below one level, and checked by e2fsck and the kernel.
#[test]
fn extent_tree_grows_to_depth_two_and_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "1024"], "64M") else {
        return;
    };
    let bs = 1024usize;
    let mut want = Vec::new();
    {
        let fs = open_rw(&img);
        let f = fs.create(ROOT_INO, b"frag", NodeKind::Regular, ATTR).unwrap().ino;
        // Odd blocks first, then some even ones, so extents cannot merge.
        for i in (1..4000).step_by(2) {
            fs.write(f, (i * bs) as u64, &pattern(bs, i as u8)).unwrap();
        }
        want.resize(4000 * bs, 0);
        for i in (1..4000).step_by(2) {
            want[i * bs..(i + 1) * bs].copy_from_slice(&pattern(bs, i as u8));
        }
        for i in (0..400).step_by(4) {
            fs.write(f, (i * bs) as u64, &pattern(bs, 7)).unwrap();
            want[i * bs..(i + 1) * bs].copy_from_slice(&pattern(bs, 7));
        }
    }
    let depth = |img: &Path| common::run("debugfs", &["-R", "ex /frag", img.to_str().unwrap()]);
    assert!(
        depth(&img).contains(" 2/ 2 "),
        "expected depth 2:\n{}",
        &depth(&img)[..300]
    );
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn at depth 2:\n{}", fsck.output);
    {
        let fs = open_rw(&img);
        let f = fs.resolve(b"/frag").unwrap().ino;
        fs.truncate(f, (150 * bs + 10) as u64).unwrap();
        want.truncate(150 * bs + 10);
    }
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn after shrinking:\n{}", fsck.output);
    let fs = open(&img, OpenOptions::default()).unwrap();
    assert_eq!(fs.read_all(&fs.resolve(b"/frag").unwrap(), 1 << 30).unwrap(), want);
    if skip_unless_mount() {
        let mnt = LoopMount::ro(&img).unwrap();
        assert_eq!(std::fs::read(mnt.path().join("frag")).unwrap(), want);
        mnt.unmount().unwrap();
    }
}

/// A full file system: writes and creates (blocks, then inodes) fail with
/// ENOSPC and change nothing; reads and deletes keep working; space comes back.
#[test]
fn full_file_system_fails_cleanly_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(
        dir.path(),
        None,
        &["-b", "1024", "-N", "64", "-O", "^has_journal"],
        "4M",
    ) else {
        return;
    };
    let fs = open_rw(&img);
    let chunk = vec![0xA5u8; 64 * 1024];
    let f = fs.create(ROOT_INO, b"fill", NodeKind::Regular, ATTR).unwrap().ino;
    let mut off = 0u64;
    loop {
        match fs.write(f, off, &chunk) {
            Ok(_) => off += chunk.len() as u64,
            Err(e) => {
                assert!(matches!(e, Error::NoSpace), "{e}");
                assert_eq!(e.errno(), libc::ENOSPC);
                break;
            }
        }
    }
    assert_eq!(
        fs.resolve(b"/fill").unwrap().size(),
        off,
        "a failed write leaves the size alone"
    );
    let mut made = 0;
    let inode_err = loop {
        match fs.create(ROOT_INO, format!("n{made}").as_bytes(), NodeKind::Fifo, ATTR) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(inode_err, Error::NoSpace), "{inode_err}");
    assert!(made > 10);
    drop(fs);
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn when full:\n{}", fsck.output);
    let fs = open_rw(&img);
    assert_eq!(
        fs.read_all(&fs.resolve(b"/fill").unwrap(), 1 << 30).unwrap().len() as u64,
        off
    );
    fs.unlink(ROOT_INO, b"fill").unwrap();
    fs.unlink(ROOT_INO, b"n0").unwrap();
    let g = fs.create(ROOT_INO, b"again", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(g, 0, &chunk).unwrap();
    drop(fs);
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn after freeing:\n{}", fsck.output);
}

/// Out of inodes (blocks left): creates fail with ENOSPC, nothing changes.
#[test]
fn inode_exhaustion_is_enospc() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096", "-N", "32"], "16M") else {
        return;
    };
    let fs = open_rw(&img);
    let free = fs.superblock().s_free_inodes_count.get();
    for i in 0..free {
        fs.create(ROOT_INO, format!("f{i}").as_bytes(), NodeKind::Fifo, ATTR)
            .unwrap();
    }
    let e = fs
        .create(ROOT_INO, b"one-too-many", NodeKind::Regular, ATTR)
        .unwrap_err();
    assert!(matches!(e, Error::NoSpace), "{e}");
    assert!(fs.resolve(b"/one-too-many").is_err());
    drop(fs);
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
}

/// `dir_nlink`: past 65,000 subdirectories the parent's link count becomes
/// 1 ("too many to count"), as the kernel stores it; e2fsck agrees.
#[test]
fn dir_nlink_beyond_65000_subdirectories() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(
        dir.path(),
        None,
        &["-b", "1024", "-N", "70000", "-O", "^has_journal"],
        "160M",
    ) else {
        return;
    };
    {
        let fs = open_rw(&img);
        let p = fs.create(ROOT_INO, b"p", NodeKind::Directory, ATTR).unwrap().ino;
        for i in 0..65_010 {
            fs.create(p, format!("{i}").as_bytes(), NodeKind::Directory, ATTR)
                .unwrap();
        }
        assert_eq!(fs.inode(p).unwrap().raw.links(), 1);
        fs.rmdir(p, b"0").unwrap();
        assert_eq!(fs.inode(p).unwrap().raw.links(), 1, "stays uncounted");
    }
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
}

/// Inline-data bodies (made by mke2fs -d) that outgrow the inode are moved
/// to blocks: appending to a small file, adding and removing names in a
/// small directory, moving an inline directory; inline inodes are freed.
#[test]
fn inline_bodies_convert_on_change() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d/sub")).unwrap();
    std::fs::create_dir_all(src.join("other")).unwrap();
    std::fs::write(src.join("small"), b"tiny file").unwrap();
    std::fs::write(src.join("gone"), b"x").unwrap();
    std::fs::write(src.join("d/a"), b"a").unwrap();
    let Some(img) = mkfs(dir.path(), Some(&src), &["-O", "inline_data", "-I", "256"], "16M") else {
        return;
    };
    let mut small = b"tiny file".to_vec();
    {
        let fs = open_rw(&img);
        assert!(fs.resolve(b"/small").unwrap().has_inline_data());
        let f = fs.resolve(b"/small").unwrap().ino;
        let more = pattern(5000, 3);
        fs.write(f, small.len() as u64, &more).unwrap();
        small.extend_from_slice(&more);
        let d = fs.resolve(b"/d").unwrap();
        assert!(d.has_inline_data());
        fs.create(d.ino, b"new-name", NodeKind::Regular, ATTR).unwrap();
        fs.unlink(d.ino, b"a").unwrap();
        fs.unlink(ROOT_INO, b"gone").unwrap();
        let other = fs.resolve(b"/other").unwrap().ino;
        fs.rename(d.ino, b"sub", other, b"sub", RenameFlags::default()).unwrap();
        fs.rmdir(other, b"sub").unwrap();
    }
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let fs = open(&img, OpenOptions::default()).unwrap();
    assert!(
        fs.read_all(&fs.resolve(b"/small").unwrap(), 1 << 20).unwrap() == small,
        "engine view of /small"
    );
    let names: Vec<Vec<u8>> = fs
        .read_dir(&fs.resolve(b"/d").unwrap())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"new-name".to_vec()]);
    if skip_unless_mount() {
        let mnt = LoopMount::ro(&img).unwrap();
        assert!(
            std::fs::read(mnt.path().join("small")).unwrap() == small,
            "kernel view of /small"
        );
        assert!(mnt.path().join("d/new-name").exists());
        mnt.unmount().unwrap();
    }
}
