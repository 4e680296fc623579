//! Batches against the one-operation-per-transaction path: the same
//! workload (creates of every kind, a directory that grows an htree and
//! splits leaves, out-of-order and overlapping writes, truncates, hard links,
//! in-inode and block xattrs, ACLs, explicit times) done one call at a time
//! on one mke2fs image and through a `Batch` that commits every few
//! operations on an identical image must give the same inode numbers, the
//! same tree through the engine and through the kernel, the same free
//! counts, and `e2fsck -fn`-clean images. A batch that runs out of space
//! half-way leaves exactly its committed operations.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{
    Attr, Batch, BatchOptions, Error, Filesystem, Inode, NodeKind, OpenOptions, ROOT_INO, Result, SetAttr, XattrSet,
};
use ext4kit_format::inode::Timestamp;
use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 1000,
    gid: 100,
};

/// The write operations the workload uses, so one workload runs both ways.
trait Ops {
    fn create(&mut self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr) -> Result<Inode>;
    fn write(&mut self, ino: u32, off: u64, data: &[u8]) -> Result<usize>;
    fn truncate(&mut self, ino: u32, size: u64) -> Result<()>;
    fn setattr(&mut self, ino: u32, set: &SetAttr) -> Result<Inode>;
    fn link(&mut self, ino: u32, parent: u32, name: &[u8]) -> Result<()>;
    fn set_xattr(&mut self, ino: u32, name: &[u8], value: &[u8]) -> Result<()>;
    fn lookup(&mut self, dir: u32, name: &[u8]) -> Result<u32>;
}

impl Ops for &Filesystem {
    fn create(&mut self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr) -> Result<Inode> {
        Filesystem::create(self, parent, name, kind, attr)
    }
    fn write(&mut self, ino: u32, off: u64, data: &[u8]) -> Result<usize> {
        Filesystem::write(self, ino, off, data)
    }
    fn truncate(&mut self, ino: u32, size: u64) -> Result<()> {
        Filesystem::truncate(self, ino, size)
    }
    fn setattr(&mut self, ino: u32, set: &SetAttr) -> Result<Inode> {
        Filesystem::setattr(self, ino, set)
    }
    fn link(&mut self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        Filesystem::link(self, ino, parent, name)
    }
    fn set_xattr(&mut self, ino: u32, name: &[u8], value: &[u8]) -> Result<()> {
        Filesystem::set_xattr(self, ino, name, value, XattrSet::Any)
    }
    fn lookup(&mut self, dir: u32, name: &[u8]) -> Result<u32> {
        Filesystem::lookup(self, &self.inode(dir)?, name)
    }
}

impl Ops for Batch<'_> {
    fn create(&mut self, parent: u32, name: &[u8], kind: NodeKind, attr: Attr) -> Result<Inode> {
        Batch::create(self, parent, name, kind, attr)
    }
    fn write(&mut self, ino: u32, off: u64, data: &[u8]) -> Result<usize> {
        Batch::write(self, ino, off, data)
    }
    fn truncate(&mut self, ino: u32, size: u64) -> Result<()> {
        Batch::truncate(self, ino, size)
    }
    fn setattr(&mut self, ino: u32, set: &SetAttr) -> Result<Inode> {
        Batch::setattr(self, ino, set)
    }
    fn link(&mut self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        Batch::link(self, ino, parent, name)
    }
    fn set_xattr(&mut self, ino: u32, name: &[u8], value: &[u8]) -> Result<()> {
        Batch::set_xattr(self, ino, name, value, XattrSet::Any)
    }
    fn lookup(&mut self, dir: u32, name: &[u8]) -> Result<u32> {
        Batch::lookup(self, dir, name)
    }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

fn times(i: u32) -> SetAttr {
    let t = Timestamp {
        secs: 1_600_000_000 + i64::from(i) * 977,
        nsecs: (u64::from(i) * 1_000_003 % 1_000_000_000) as u32,
    };
    SetAttr {
        atime: Some(t),
        mtime: Some(t),
        ..SetAttr::default()
    }
}

/// An ACL in the VFS xattr form: user::rwx, group::r-x, other::---,
/// plus one named user, so it does not reduce to mode bits.
fn acl_value() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (1u16, 7u16, u32::MAX),
        (2, 6, 1234),
        (4, 5, u32::MAX),
        (0x10, 7, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// The workload; returns the inode numbers it created, in order.
fn workload(o: &mut impl Ops, bs: usize) -> Vec<u32> {
    let mut inos = Vec::new();
    let dir = |o: &mut dyn FnMut() -> Result<Inode>| o().unwrap().ino;
    let top = dir(&mut || o.create(ROOT_INO, b"top", NodeKind::Directory, Attr { perm: 0o755, ..ATTR }));
    inos.push(top);
    // A default ACL on `acl`: files made in it inherit an access ACL.
    let acl = dir(&mut || o.create(top, b"acl", NodeKind::Directory, Attr { perm: 0o775, ..ATTR }));
    o.set_xattr(acl, b"system.posix_acl_default", &acl_value()).unwrap();
    inos.push(acl);
    let f = o.create(acl, b"inherits", NodeKind::Regular, ATTR).unwrap().ino;
    o.write(f, 0, b"acl'd").unwrap();
    inos.push(f);
    // A directory of 700 files: becomes an htree and splits leaves inside
    // the batch; every name is looked up before it is added.
    let many = o
        .create(top, b"many", NodeKind::Directory, Attr { perm: 0o755, ..ATTR })
        .unwrap()
        .ino;
    inos.push(many);
    for i in 0..700u32 {
        let name = format!("file-with-a-longish-name-{i:05}");
        let ino = o.create(many, name.as_bytes(), NodeKind::Regular, ATTR).unwrap().ino;
        // A name added earlier in the same batch must be seen.
        assert!(matches!(
            o.create(many, name.as_bytes(), NodeKind::Regular, ATTR),
            Err(Error::Exists(_))
        ));
        assert_eq!(o.lookup(many, name.as_bytes()).unwrap(), ino);
        if i == 0 || i == 699 {
            // Block 0 is a leaf at first, an htree root at the end.
            assert_eq!(o.lookup(many, b"..").unwrap(), top);
            assert_eq!(o.lookup(many, b".").unwrap(), many);
        }
        let len = (i as usize * 37) % (3 * bs);
        if len > 0 {
            // Tail first, then head: the second write reads the partial
            // block the first one queued.
            let data = pattern(len, i);
            let half = len / 2;
            o.write(ino, half as u64, &data[half..]).unwrap();
            o.write(ino, 0, &data[..half]).unwrap();
        }
        if i % 50 == 0 {
            o.set_xattr(ino, b"user.small", format!("v{i}").as_bytes()).unwrap();
            // Too big for the inode: goes to an xattr block.
            o.set_xattr(ino, b"user.big", &pattern(bs / 2, i)).unwrap();
        }
        o.setattr(ino, &times(i)).unwrap();
        inos.push(ino);
    }
    // Overwrite across a block boundary, then truncate into a block.
    let big = o.create(top, b"big", NodeKind::Regular, ATTR).unwrap().ino;
    o.write(big, 0, &pattern(40 * bs, 7)).unwrap();
    o.write(big, 3 * bs as u64 - 100, &pattern(300, 8)).unwrap();
    o.truncate(big, 20 * bs as u64 + 5).unwrap();
    o.truncate(big, 30 * bs as u64).unwrap();
    o.setattr(big, &times(9000)).unwrap();
    inos.push(big);
    let target = vec![b'x'; 200];
    for (name, kind) in [
        (
            &b"short-link"[..],
            NodeKind::Symlink(b"many/file-with-a-longish-name-00001".to_vec()),
        ),
        (b"long-link", NodeKind::Symlink(target)),
        (b"fifo", NodeKind::Fifo),
        (b"chr", NodeKind::CharDevice(1, 3)),
        (b"blk", NodeKind::BlockDevice(300, 70000)),
    ] {
        let ino = o.create(top, name, kind, ATTR).unwrap().ino;
        o.setattr(ino, &times(ino)).unwrap();
        inos.push(ino);
    }
    let first = o.lookup(many, b"file-with-a-longish-name-00000").unwrap();
    o.link(first, top, b"hard").unwrap();
    assert!(matches!(o.link(first, top, b"hard"), Err(Error::Exists(_))));
    o.setattr(top, &times(1)).unwrap();
    o.setattr(acl, &times(2)).unwrap();
    o.setattr(many, &times(3)).unwrap();
    o.setattr(f, &times(4)).unwrap();
    inos
}

fn open_rw(img: &Path) -> Filesystem {
    Filesystem::open(Box::new(FileDevice::open(img, true).unwrap()), OpenOptions::default()).unwrap()
}

/// A listing of the tree under `ino` through the engine: path → (inode,
/// mode, owner, links, size, content, xattrs).
fn engine_tree(fs: &Filesystem, ino: u32, path: &str, out: &mut BTreeMap<String, String>) {
    let inode = fs.inode(ino).unwrap();
    let m = fs.metadata(&inode).unwrap();
    let mut xattrs = fs.xattrs(&inode).unwrap();
    xattrs.sort_by(|a, b| a.name.cmp(&b.name));
    let body = if inode.is_dir() {
        String::new()
    } else {
        format!("{:?}", fs.read_all(&inode, 1 << 24).unwrap_or_default())
    };
    out.insert(
        path.to_string(),
        format!(
            "ino={} mode={:o} uid={} gid={} nlink={} size={} mtime={:?} xattrs={:?} body={}",
            ino, m.perm, m.uid, m.gid, m.nlink, m.size, m.mtime, xattrs, body
        ),
    );
    if inode.is_dir() {
        for e in fs.read_dir(&inode).unwrap() {
            if e.name != b"." && e.name != b".." {
                let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                engine_tree(fs, e.ino, &p, out);
            }
        }
    }
}

fn free_counts(fs: &Filesystem) -> (u64, u32) {
    let sb = fs.superblock();
    (
        u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(sb.s_free_blocks_count_hi.get()) << 32),
        sb.s_free_inodes_count.get(),
    )
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).unwrap();
    assert_eq!(r.code, 0, "e2fsck -fn {}:\n{}", img.display(), r.output);
}

#[test]
fn batch_equals_one_by_one() {
    for args in [
        &["-O", "metadata_csum"][..],
        &["-b", "1024", "-O", "^metadata_csum"][..],
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (da, db) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&da).unwrap();
        std::fs::create_dir_all(&db).unwrap();
        let Some(img_a) = mkfs(&da, None, args, "32M") else {
            return;
        };
        std::fs::copy(&img_a, db.join("img")).unwrap();
        let img_b = db.join("img");
        let (inos_a, tree_a, free_a) = {
            let fs = open_rw(&img_a);
            let inos = workload(&mut &fs, fs.block_size());
            // Data held for delayed allocation gets its blocks here.
            fs.sync().unwrap();
            let mut t = BTreeMap::new();
            engine_tree(&fs, ROOT_INO, "", &mut t);
            (inos, t, free_counts(&fs))
        };
        let (inos_b, tree_b, free_b) = {
            let fs = open_rw(&img_b);
            let opts = BatchOptions {
                max_ops: 97,
                max_bytes: 256 << 10,
            };
            let mut b = fs.batch_with(opts).unwrap();
            let inos = workload(&mut b, fs.block_size());
            assert!(b.committed() > 0, "the batch committed in chunks");
            b.finish().unwrap();
            let mut t = BTreeMap::new();
            engine_tree(&fs, ROOT_INO, "", &mut t);
            (inos, t, free_counts(&fs))
        };
        assert_eq!(inos_a, inos_b, "{args:?}: same inode numbers");
        assert_eq!(free_a, free_b, "{args:?}: same free counts");
        for (p, a) in &tree_a {
            let b = tree_b
                .get(p)
                .unwrap_or_else(|| panic!("{args:?}: {p} missing from the batch image"));
            if p.is_empty() {
                continue; // the root's mtime is the time of the run
            }
            assert_eq!(a, b, "{args:?}: {p} differs");
        }
        assert_eq!(tree_a.len(), tree_b.len(), "{args:?}: same number of paths");
        assert_clean(&img_a);
        assert_clean(&img_b);
        if can_loop_mount().is_ok() {
            let ma = LoopMount::ro(&img_a).unwrap();
            let mb = LoopMount::ro(&img_b).unwrap();
            let opts = CompareOptions {
                root_metadata: false,
                ..CompareOptions::default()
            };
            let diffs = compare_trees(ma.path(), mb.path(), opts);
            assert!(
                diffs.is_empty(),
                "{args:?}: kernel views differ:\n{}",
                format_differences(&diffs)
            );
            let acl = xattr::get(mb.path().join("top/acl/inherits"), "system.posix_acl_access").unwrap();
            assert!(acl.is_some(), "the inherited access ACL is visible to the kernel");
            mb.unmount().unwrap();
            ma.unmount().unwrap();
        }
    }
}

#[test]
fn enospc_mid_batch_keeps_exactly_the_committed_part() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024", "-N", "256"], "4M") else {
        return;
    };
    let chunk = 37 * 1024 + 123;
    // Operation i: even = create f{i/2}, odd = write its data.
    let (done, committed, abandoned) = {
        let fs = open_rw(&img);
        let mut b = fs
            .batch_with(BatchOptions {
                max_ops: 10,
                max_bytes: 1 << 30,
            })
            .unwrap();
        let mut done = 0u64;
        let err = loop {
            let n = done / 2;
            let r = if done.is_multiple_of(2) {
                b.create(ROOT_INO, format!("f{n}").as_bytes(), NodeKind::Regular, ATTR)
                    .map(|_| ())
            } else {
                let ino = b.lookup(ROOT_INO, format!("f{n}").as_bytes()).unwrap();
                b.write(ino, 0, &pattern(chunk, n as u32)).map(|_| ())
            };
            match r {
                Ok(()) => done += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(err, Error::NoSpace), "{err:?}");
        let committed = b.committed();
        assert!(committed > 0 && committed <= done);
        // A write that ran out half-way abandons the batch: nothing after
        // the last commit survives. One that found no block at all changed
        // nothing, and the batch commits what it did.
        let abandoned = b.finish().is_err();
        (done, committed, abandoned)
    };
    let kept = if abandoned { committed } else { done };
    eprintln!("ops done {done}, committed {committed}, abandoned {abandoned}");
    assert_clean(&img);
    let fs = open_rw(&img);
    let root = fs.inode(ROOT_INO).unwrap();
    let mut names: Vec<String> = fs
        .read_dir(&root)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .filter(|n| n.starts_with('f'))
        .collect();
    names.sort_by_key(|n| n[1..].parse::<u64>().unwrap());
    let want_files = kept.div_ceil(2);
    assert_eq!(names.len() as u64, want_files, "exactly the committed creates");
    for n in 0..want_files {
        let inode = fs.resolve(format!("/f{n}").as_bytes()).unwrap();
        let body = fs.read_all(&inode, 1 << 20).unwrap();
        if 2 * n + 1 < kept {
            assert_eq!(body, pattern(chunk, n as u32), "f{n} has its data");
        } else {
            assert!(body.is_empty(), "f{n}'s write was not committed");
        }
    }
    drop(fs);
    assert_clean(&img);
    if can_loop_mount().is_ok() {
        let m = LoopMount::ro(&img).unwrap();
        let count = std::fs::read_dir(m.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with('f'))
            .count();
        assert_eq!(count as u64, want_files);
        if want_files > 0 {
            assert_eq!(std::fs::read(m.path().join("f0")).unwrap(), pattern(chunk, 0));
        }
        m.unmount().unwrap();
    }
}
