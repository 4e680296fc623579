//! `Filesystem::remove_tree` (`rm -r`): removes a tree of every kind of
//! entry and gives back every block and inode; refuses `.` and `..`; a
//! chain of 16,000 directories goes on a thread with a 256 KiB stack (the
//! walk keeps its own stack); a failure inside one commit leaves the image
//! exactly as it was, and one after some commits says how far it got. A
//! power loss at any write of a removal, or of a batch of creates (what
//! `import` runs), or of a file built without a name over many commits
//! and named last (what `ext4kit write` runs), leaves the tree as it was
//! or as asked, never between, and `e2fsck -fn` clean.

#[path = "common/crash_cases.rs"]
mod crash_cases;
#[path = "common/mem_image.rs"]
mod mem_image;

use std::collections::BTreeMap;
use std::sync::Arc;

use ext4kit_engine::device::{CrashDevice, MemDevice, Survivors};
use ext4kit_engine::{Attr, BatchOptions, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO, RenameFlags};
use ext4kit_format::inode::flags::IMMUTABLE;
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::{require_tool, skip_unless};
use mem_image::{assert_clean, fresh_image_with};

const DIR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};
const FILE: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
fn open(dev: Arc<MemDevice>) -> Filesystem {
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("open")
}
/// Every path below the root (lost+found aside) with what it is: a
/// directory, a symlink's target or a file's contents.
fn listing(fs: &Filesystem) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(String::new(), ROOT_INO)];
    while let Some((path, ino)) = stack.pop() {
        for e in fs.read_dir(&fs.inode(ino).unwrap()).unwrap() {
            if e.name == b"." || e.name == b".." || (ino == ROOT_INO && e.name == b"lost+found") {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let inode = fs.inode(e.ino).unwrap();
            let what = if inode.is_dir() {
                stack.push((p.clone(), e.ino));
                b"<dir>".to_vec()
            } else if inode.file_type().unwrap() == ext4kit_format::inode::FileType::Symlink {
                fs.read_link(&inode).unwrap()
            } else {
                fs.read_all(&inode, 1 << 24).unwrap()
            };
            out.insert(p, what);
        }
    }
    out
}

/// A tree of every kind below `/t`: files with data (one sparse, one with
/// an xattr), a directory big enough for an htree, a symlink, a FIFO, a
/// hard link from outside the tree, a chain of directories.
fn build_tree(fs: &Filesystem, wide: usize) -> u32 {
    let mut b = fs.batch().unwrap();
    let t = b.create(ROOT_INO, b"t", NodeKind::Directory, DIR).unwrap().ino;
    let big = b.create(t, b"big", NodeKind::Directory, DIR).unwrap().ino;
    for i in 0..wide {
        let f = b
            .create(big, format!("file-{i:05}").as_bytes(), NodeKind::Regular, FILE)
            .unwrap();
        b.write(f.ino, 0, format!("data {i}").as_bytes()).unwrap();
    }
    let sparse = b.create(t, b"sparse", NodeKind::Regular, FILE).unwrap().ino;
    b.write(sparse, 3 << 20, b"end").unwrap();
    let x = b.create(t, b"xattr", NodeKind::Regular, FILE).unwrap().ino;
    b.set_xattr(x, b"user.big", &[7; 600], ext4kit_engine::XattrSet::Any)
        .unwrap();
    b.create(t, b"link", NodeKind::Symlink(b"big/file-00001".to_vec()), DIR)
        .unwrap();
    b.create(t, b"fifo", NodeKind::Fifo, FILE).unwrap();
    let outside = b.create(ROOT_INO, b"outside", NodeKind::Regular, FILE).unwrap().ino;
    b.write(outside, 0, b"kept").unwrap();
    b.link(outside, t, b"hard").unwrap();
    let mut cur = t;
    for i in 0..20 {
        cur = b
            .create(cur, format!("c{i}").as_bytes(), NodeKind::Directory, DIR)
            .unwrap()
            .ino;
    }
    b.create(cur, b"leaf", NodeKind::Regular, FILE).unwrap();
    b.finish().unwrap();
    t
}

fn free_counts(fs: &Filesystem) -> (u64, u64) {
    let s = fs.statfs();
    (s.blocks_free, s.files_free)
}

#[test]
fn removes_a_tree_and_frees_everything() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dev = Arc::new(MemDevice::new(fresh_image_with(32 << 20, None)));
    let fs = open(dev.clone());
    let before = free_counts(&fs);
    build_tree(&fs, 2_000);
    let removed = fs.remove_tree(ROOT_INO, b"t").expect("remove_tree");
    // t, big + 2,000 files, sparse, xattr, link, fifo, hard, 20 chain dirs, leaf.
    assert_eq!(removed, 1 + 1 + 2_000 + 5 + 20 + 1);
    let left = listing(&fs);
    assert_eq!(left.keys().collect::<Vec<_>>(), ["/outside"], "{left:?}");
    assert_eq!(fs.metadata(&fs.resolve(b"/outside").unwrap()).unwrap().nlink, 1);
    fs.unlink(ROOT_INO, b"outside").unwrap();
    assert_eq!(free_counts(&fs), before);
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "the image");
}

#[test]
fn refuses_dot_and_dotdot_before_any_change() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dev = Arc::new(MemDevice::new(fresh_image_with(16 << 20, None)));
    let fs = open(dev.clone());
    let t = build_tree(&fs, 10);
    let before = listing(&fs);
    for (dir, name) in [(ROOT_INO, &b".."[..]), (ROOT_INO, b"."), (t, b"."), (t, b"..")] {
        let e = fs.remove_tree(dir, name).expect_err("must refuse");
        assert_eq!(e.removed, 0);
        assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
        assert_eq!(listing(&fs), before);
    }
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "the image");
}

#[test]
fn a_failure_inside_one_commit_changes_nothing() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dev = Arc::new(MemDevice::new(fresh_image_with(16 << 20, None)));
    let fs = open(dev.clone());
    build_tree(&fs, 300);
    // The last entry the walk reaches: at the bottom of the chain.
    let leaf = fs
        .resolve(format!("/t/{}leaf", (0..20).map(|i| format!("c{i}/")).collect::<String>()).as_bytes())
        .unwrap();
    let flags = leaf.raw.flags() & ext4kit_engine::flags::USER_VISIBLE;
    fs.set_flags(leaf.ino, flags | IMMUTABLE, true).unwrap();
    let before = listing(&fs);
    let counts = free_counts(&fs);
    let e = fs.remove_tree(ROOT_INO, b"t").expect_err("an immutable file");
    assert_eq!(e.removed, 0, "{e}");
    assert!(matches!(e.error, Error::NotPermitted(_)), "{e}");
    assert!(String::from_utf8_lossy(&e.stopped_at).ends_with("c19/leaf"), "{e}");
    assert!(e.to_string().contains("nothing was removed"), "{e}");
    assert_eq!(listing(&fs), before);
    assert_eq!(free_counts(&fs), counts);

    // Committing every 50 removals: the ones committed stay, and the error says so.
    let e = fs
        .remove_tree_with(
            ROOT_INO,
            b"t",
            BatchOptions {
                max_ops: 50,
                ..BatchOptions::default()
            },
        )
        .expect_err("an immutable file");
    assert!(e.removed >= 300 && e.removed.is_multiple_of(50), "{e}");
    assert!(
        e.to_string().contains(&format!("{} entries were removed", e.removed)),
        "{e}"
    );
    let after = listing(&fs);
    assert_eq!(before.len() - after.len(), e.removed as usize);
    assert!(after.contains_key("/t/c0/c1/c2/c3/c4/c5/c6/c7/c8/c9/c10/c11/c12/c13/c14/c15/c16/c17/c18/c19/leaf"));
    fs.set_flags(leaf.ino, flags, true).unwrap();
    fs.remove_tree(ROOT_INO, b"t").unwrap();
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "the image");
}

#[test]
fn a_chain_of_16000_directories_on_a_small_stack() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    const DEPTH: usize = 16_000;
    let dev = Arc::new(MemDevice::new(fresh_image_with(48 << 20, Some(20_000))));
    let fs = open(dev.clone());
    let before = free_counts(&fs);
    let mut b = fs.batch().unwrap();
    let mut cur = ROOT_INO;
    for _ in 0..DEPTH {
        cur = b.create(cur, b"d", NodeKind::Directory, DIR).unwrap().ino;
    }
    b.create(cur, b"bottom", NodeKind::Regular, FILE).unwrap();
    b.finish().unwrap();
    // Moving the whole chain is one rename.
    fs.rename(ROOT_INO, b"d", ROOT_INO, b"chain", RenameFlags::default())
        .unwrap();
    let removed = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn_scoped_fs(&fs)
        .expect("remove_tree");
    assert_eq!(removed, DEPTH as u64 + 1);
    assert_eq!(free_counts(&fs), before);
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "the image");
}

/// Runs `remove_tree(/, "chain")` on a thread built by `self`.
trait SpawnScoped {
    fn spawn_scoped_fs(self, fs: &Filesystem) -> Result<u64, ext4kit_engine::RemoveTreeError>;
}

impl SpawnScoped for std::thread::Builder {
    fn spawn_scoped_fs(self, fs: &Filesystem) -> Result<u64, ext4kit_engine::RemoveTreeError> {
        std::thread::scope(|s| {
            self.spawn_scoped(s, || fs.remove_tree(ROOT_INO, b"chain"))
                .expect("spawn")
                .join()
                .expect("the removal thread")
        })
    }
}

/// Crash points of a recorded run: every flush point after `from`, and
/// `n` random points from `from` on with random survivors.
fn crash_points(dev: &CrashDevice, from: usize, n: usize, seed: u64) -> Vec<(usize, Survivors)> {
    let flushes = dev.flush_points().into_iter().filter(|&p| p >= from);
    let mut out = crash_cases::at_points(dev, flushes);
    out.extend(crash_cases::random_points(dev, from, n, &mut Rng::new(seed)));
    out
}

/// What a test compares after a crash: the listing, and the free block
/// and inode counts.
type State = (BTreeMap<String, Vec<u8>>, (u64, u64));

fn state(fs: &Filesystem) -> State {
    (listing(fs), free_counts(fs))
}

/// Recovers every crash point of the run recorded from write `start` on
/// (the flush points and 40 random ones from `seed`), checks each with
/// `e2fsck -fn`, and asserts its listing is `before`'s or `after`'s — and,
/// with `counts`, that one back at `before` also has its free counts.
fn assert_before_or_after(dev: &CrashDevice, start: usize, seed: u64, before: &State, after: &State, counts: bool) {
    for (point, s) in crash_points(dev, start, 40, seed) {
        let mem = Arc::new(MemDevice::new(dev.crash_image(point, s)));
        let fs = open(mem.clone());
        let (got, free) = state(&fs);
        fs.unmount().unwrap();
        assert_clean(&mem.snapshot(), &format!("crash at write {point} ({s:?})"));
        assert!(
            got == before.0 || got == after.0,
            "crash at write {point} of {} ({s:?}): {} entries, before {}, after {}",
            dev.writes(),
            got.len(),
            before.0.len(),
            after.0.len()
        );
        if counts && got == before.0 {
            assert_eq!(free, before.1, "crash at write {point}: space was not given back");
        }
    }
}

/// Every commit goes to the journal and is flushed at once (`-o sync`):
/// a removal of many commits would then show its steps to a crash.
fn open_syncing(dev: &Arc<CrashDevice>) -> Filesystem {
    let opts = OpenOptions {
        sync_writes: true,
        ..OpenOptions::default()
    };
    Filesystem::open(Box::new(dev.clone()), opts).unwrap()
}

fn crash_image() -> Arc<CrashDevice> {
    Arc::new(CrashDevice::with_atomic_unit(fresh_image_with(8 << 20, None), 4096))
}

#[test]
fn a_crash_during_a_tree_removal_leaves_before_or_after() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dev = crash_image();
    let fs = open_syncing(&dev);
    build_tree(&fs, 150);
    fs.sync().unwrap();
    let before = state(&fs);
    let start = dev.writes();
    fs.remove_tree(ROOT_INO, b"t").unwrap();
    let after = state(&fs);
    fs.unmount().unwrap();
    assert!(after.0.len() == 1 && before.0.len() > 150);
    assert_before_or_after(&dev, start, 0x7ee, &before, &after, false);
}

#[test]
fn a_crash_during_a_batch_of_creates_leaves_before_or_after() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dev = crash_image();
    let fs = open_syncing(&dev);
    fs.sync().unwrap();
    let before = state(&fs);
    let start = dev.writes();
    // What `import` does: creates, data, links and times in one batch.
    let mut b = fs.batch().unwrap();
    let top = b.create(ROOT_INO, b"imported", NodeKind::Directory, DIR).unwrap().ino;
    for d in 0..4 {
        let dir = b
            .create(top, format!("d{d}").as_bytes(), NodeKind::Directory, DIR)
            .unwrap()
            .ino;
        for f in 0..40 {
            let ino = b
                .create(dir, format!("f{f}").as_bytes(), NodeKind::Regular, FILE)
                .unwrap()
                .ino;
            b.write(ino, 0, &vec![(d * 40 + f) as u8; 100 * f + 1]).unwrap();
            if f == 0 && d > 0 {
                b.link(ino, top, format!("hard{d}").as_bytes()).unwrap();
            }
        }
    }
    b.finish().unwrap();
    let after = state(&fs);
    fs.unmount().unwrap();
    assert!(after.0.len() > 160);
    assert_before_or_after(&dev, start, 0xba7c, &before, &after, false);
}

/// A file written over many commits (1 MiB each) without a name and named
/// in the last one: a crash anywhere shows no file or the whole file, and
/// the recovered image holds no leftover inode or block (e2fsck, and the
/// free counts of the image before).
#[test]
fn a_crash_while_a_nameless_file_is_built_leaves_no_file_or_all_of_it() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let dev = crash_image();
    let fs = open_syncing(&dev);
    fs.sync().unwrap();
    let before = state(&fs);
    let start = dev.writes();
    let opts = BatchOptions {
        max_ops: 16_384,
        max_bytes: 1 << 20,
    };
    let mut b = fs.batch_with(opts).unwrap();
    let ino = b.create_tmpfile(ROOT_INO, FILE).unwrap().ino;
    let data: Vec<u8> = (0..(3 << 20) + 1234u32).map(|i| (i % 251) as u8).collect();
    for (i, chunk) in data.chunks(256 << 10).enumerate() {
        b.write(ino, (i * (256 << 10)) as u64, chunk).unwrap();
    }
    assert!(b.committed() > 0, "the file must take several commits");
    b.link_tmpfile(ino, ROOT_INO, b"built").unwrap();
    b.finish().unwrap();
    fs.release_file(ino).unwrap();
    let after = state(&fs);
    fs.unmount().unwrap();
    assert_eq!(after.0.get("/built"), Some(&data));
    assert_before_or_after(&dev, start, 0x7f11e, &before, &after, true);
}

/// A nameless file that is never named is freed at its release, and one
/// cannot be given a name that exists.
#[test]
fn a_nameless_file_never_named_is_freed() {
    let dev = Arc::new(MemDevice::new(fresh_image_with(8 << 20, None)));
    let fs = open(dev.clone());
    fs.create(ROOT_INO, b"taken", NodeKind::Regular, FILE).unwrap();
    let free_before = free_counts(&fs);
    let mut b = fs.batch().unwrap();
    let ino = b.create_tmpfile(ROOT_INO, FILE).unwrap().ino;
    b.write(ino, 0, &[7u8; 100_000]).unwrap();
    assert!(matches!(b.link_tmpfile(ino, ROOT_INO, b"taken"), Err(Error::Exists(_))));
    b.finish().unwrap();
    assert_ne!(free_counts(&fs), free_before);
    fs.release_file(ino).unwrap();
    assert_eq!(free_counts(&fs), free_before);
    let mut b = fs.batch().unwrap();
    assert!(
        b.link_tmpfile(ino, ROOT_INO, b"late").is_err(),
        "a freed file got a name"
    );
    drop(b);
    fs.unmount().unwrap();
    assert_clean(&dev.snapshot(), "the image");
}
