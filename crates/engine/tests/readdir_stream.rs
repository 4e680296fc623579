//! Positioned directory streams (`Filesystem::read_dir_from`): hash order
//! equal to the kernel's getdents order, streams paused while the
//! directory grows, shrinks and splits leaves (each name present
//! throughout returned once, none twice), byte order for unindexed
//! directories, the inode-order snapshot and its fallback, and corrupt
//! indexes reported as errors.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::dir::{DirStream, ReadDirOptions, ReadDirOrder};
use ext4kit_engine::{Attr, Error, Filesystem, Inode, NodeKind, OpenOptions, ROOT_INO, RenameFlags};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Opens `img` for writing. Retries for a while when the image lock is
/// still held: a child process another test thread forks in the moment an
/// image is closed keeps the lock's file description until it execs.
fn open_rw(img: &Path) -> Filesystem {
    let mut tries = 0;
    let dev = loop {
        match FileDevice::open(img, true) {
            Ok(d) => break d,
            Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => panic!("open rw: {e:?}"),
        }
    };
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("open fs")
}

fn assert_fsck_clean(img: &Path, what: &str) {
    let r = e2fsck_fn(img).expect("e2fsck");
    assert!(r.is_clean(), "{what}: e2fsck -fn:\n{}", r.output);
}

/// True when the kernel can loop-mount here; otherwise a loud skip that
/// fails under `CI`.
fn kernel_available(what: &str) -> bool {
    match can_loop_mount() {
        Ok(()) => true,
        Err(why) => {
            ext4kit_testkit::skipped!("{what} ({why})");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs the kernel for {what}: {why}"
            );
            false
        }
    }
}

fn opts(order: ReadDirOrder, snapshot_limit: usize) -> ReadDirOptions {
    ReadDirOptions { order, snapshot_limit }
}

/// One pass from position 0 to the end: (name, inode, next position).
fn full_pass(fs: &Filesystem, dir: &Inode, s: &mut DirStream) -> Vec<(Vec<u8>, u32, u64)> {
    let mut out = Vec::new();
    fs.read_dir_from(dir, s, 0, |e, next| {
        out.push((e.name.clone(), e.ino, next));
        Ok(true)
    })
    .expect("read_dir_from");
    out
}

fn names_of(pass: &[(Vec<u8>, u32, u64)]) -> Vec<Vec<u8>> {
    pass.iter().map(|p| p.0.clone()).collect()
}

/// Reads at most `n` entries from `pos`; returns them and where to resume
/// (`pos` itself when nothing was left).
fn read_some(fs: &Filesystem, dir: &Inode, s: &mut DirStream, pos: u64, n: usize) -> (Vec<Vec<u8>>, u64) {
    let mut got = Vec::new();
    let mut at = pos;
    fs.read_dir_from(dir, s, pos, |e, next| {
        if got.len() == n {
            return Ok(false);
        }
        got.push(e.name.clone());
        at = next;
        Ok(true)
    })
    .expect("read_dir_from");
    (got, at)
}

fn shown(names: &[Vec<u8>]) -> Vec<String> {
    names.iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect()
}

fn random_name(rng: &mut Rng, serial: usize) -> Vec<u8> {
    let len = 1 + rng.below(40) as usize;
    let mut v = format!("f{serial}-").into_bytes();
    v.extend((0..len).map(|_| b'a' + rng.below(26) as u8));
    v
}

/// Names created in the kernel (a loop mount), listed by the kernel's
/// getdents and by the engine's hash-order stream: same order. Also for a
/// directory the engine grew, and for a one-block directory (the kernel
/// lists those in hash order too, `is_dx_dir`).
#[test]
fn hash_order_is_the_kernels_getdents_order() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024", "-N", "20000"], "64M") else {
        return;
    };
    if !kernel_available("kernel getdents order") {
        return;
    }
    let mut rng = Rng::new(3);
    let m = LoopMount::rw(&img, &[]).unwrap();
    for (d, n) in [("k", 4000), ("small", 6)] {
        std::fs::create_dir(m.path().join(d)).unwrap();
        for i in 0..n {
            let name = String::from_utf8(random_name(&mut rng, i)).unwrap();
            std::fs::write(m.path().join(d).join(name), b"").unwrap();
        }
    }
    m.unmount().unwrap();
    {
        let fs = open_rw(&img);
        let root = fs.inode(ROOT_INO).unwrap();
        let e = fs.create(ROOT_INO, b"e", NodeKind::Directory, ATTR).unwrap();
        assert!(fs.lookup(&root, b"e").is_ok());
        for i in 0..3000 {
            fs.create(e.ino, &random_name(&mut rng, i), NodeKind::Regular, ATTR)
                .unwrap();
        }
        fs.sync().unwrap();
    }
    assert_fsck_clean(&img, "after the engine's creates");
    let m = LoopMount::ro(&img).unwrap();
    let kernel: BTreeMap<&str, Vec<Vec<u8>>> = ["k", "small", "e"]
        .into_iter()
        .map(|d| {
            let names = std::fs::read_dir(m.path().join(d))
                .unwrap()
                .map(|e| e.unwrap().file_name().as_bytes().to_vec())
                .collect();
            (d, names)
        })
        .collect();
    m.unmount().unwrap();
    let fs = common::open(&img, OpenOptions::default()).unwrap();
    let root = fs.inode(ROOT_INO).unwrap();
    for (d, want) in &kernel {
        let dir = fs.inode(fs.lookup(&root, d.as_bytes()).unwrap()).unwrap();
        let mut s = fs.dir_stream(&dir).unwrap();
        let pass = full_pass(&fs, &dir, &mut s);
        assert_eq!(shown(&names_of(&pass[..2])), [".", ".."], "{d}: dots first");
        let ours: Vec<Vec<u8>> = names_of(&pass)
            .into_iter()
            .filter(|n| n != b"." && n != b"..")
            .collect();
        assert_eq!(ours.len(), want.len(), "{d}: count");
        assert!(
            ours == *want,
            "{d}: the engine's hash order differs from the kernel's getdents order"
        );
    }
}

/// `.` and `..` first, positions non-zero and below 2^63, each entry's
/// next position resumes right after it, and a whole pass equals
/// `read_dir`'s set.
#[test]
fn positions_resume_after_each_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024"], "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    let mut rng = Rng::new(11);
    for i in 0..600 {
        fs.create(d.ino, &random_name(&mut rng, i), NodeKind::Regular, ATTR)
            .unwrap();
    }
    let dir = fs.inode(d.ino).unwrap();
    for order in [ReadDirOrder::Hash, ReadDirOrder::Inode] {
        let mut s = fs.dir_stream_with(&dir, opts(order, 1_000_000)).unwrap();
        let pass = full_pass(&fs, &dir, &mut s);
        assert_eq!(&pass[0].0, b".", "{order:?}");
        assert_eq!(&pass[1].0, b"..", "{order:?}");
        let listed: BTreeSet<Vec<u8>> = names_of(&pass).into_iter().collect();
        let whole: BTreeSet<Vec<u8>> = fs.read_dir(&dir).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(listed, whole, "{order:?}");
        assert_eq!(pass.len(), whole.len(), "{order:?}: a name twice");
        for (i, (_, _, next)) in pass.iter().enumerate() {
            assert!(*next != 0 && *next < 1 << 63, "{order:?}: position {next:#x}");
            let (rest, _) = read_some(&fs, &dir, &mut s, *next, usize::MAX);
            assert_eq!(rest, names_of(&pass[i + 1..]), "{order:?}: resuming after entry {i}");
        }
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img, "after the creates");
}

/// Which names a paused stream returned, and how often.
struct Seen(BTreeMap<Vec<u8>, usize>);

/// Streams `d` in small steps, interleaving creates (which split leaves),
/// unlinks and renames; every name present from the start to the end is
/// returned exactly once and no name twice.
fn paused_stream_case(img: &Path, order: ReadDirOptions, seed: u64, initial: usize) {
    let fs = open_rw(img);
    let d = fs
        .create(ROOT_INO, format!("d{seed}").as_bytes(), NodeKind::Directory, ATTR)
        .unwrap();
    let mut rng = Rng::new(seed);
    let mut serial = 0;
    let mut live: Vec<Vec<u8>> = Vec::new();
    for _ in 0..initial {
        let n = random_name(&mut rng, serial);
        serial += 1;
        fs.create(d.ino, &n, NodeKind::Regular, ATTR).unwrap();
        live.push(n);
    }
    let mut stable: BTreeSet<Vec<u8>> = live.iter().cloned().collect();
    let start_size = fs.inode(d.ino).unwrap().size();
    let mut s = fs.dir_stream_with(&fs.inode(d.ino).unwrap(), order).unwrap();
    let mut seen = Seen(BTreeMap::new());
    let mut pos = 0;
    let mut first = true;
    // Mutations stop after 60 steps, so a stream chasing names appended
    // behind the end of a linear directory ends.
    for step in 0..100_000 {
        let dir = fs.inode(d.ino).unwrap();
        let take = 1 + rng.below(if initial < 10 { 2 } else { 10 }) as usize;
        let (got, next) = read_some(&fs, &dir, &mut s, pos, take);
        if got.is_empty() && !first {
            break;
        }
        first = false;
        pos = next;
        for g in got {
            *seen.0.entry(g).or_default() += 1;
        }
        if step < 60 {
            mutate(&fs, d.ino, &mut rng, &mut serial, &mut live, &mut stable);
        }
    }
    for (name, n) in &seen.0 {
        assert_eq!(
            *n,
            1,
            "{order:?} seed {seed}: {} returned {n} times",
            String::from_utf8_lossy(name)
        );
    }
    for name in &stable {
        assert!(
            seen.0.contains_key(name),
            "{order:?} seed {seed}: {} never returned",
            String::from_utf8_lossy(name)
        );
    }
    let size = fs.inode(d.ino).unwrap().size();
    assert!(
        size >= start_size + if initial < 10 { 2048 } else { 8192 },
        "{order:?} seed {seed}: the directory grew only from {start_size} to {size} bytes"
    );
    fs.unmount().unwrap();
}

/// Mostly creates (leaf splits), some unlinks and renames within the directory.
fn mutate(
    fs: &Filesystem,
    dir: u32,
    rng: &mut Rng,
    serial: &mut usize,
    live: &mut Vec<Vec<u8>>,
    stable: &mut BTreeSet<Vec<u8>>,
) {
    for _ in 0..5 + rng.below(40) {
        match rng.below(10) {
            0 if !live.is_empty() => {
                let n = live.swap_remove(rng.below(live.len() as u64) as usize);
                fs.unlink(dir, &n).unwrap();
                stable.remove(&n);
            }
            1 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let to = random_name(rng, *serial);
                *serial += 1;
                fs.rename(dir, &live[i], dir, &to, RenameFlags::default()).unwrap();
                stable.remove(&live[i]);
                live[i] = to;
            }
            _ => {
                let n = random_name(rng, *serial);
                *serial += 1;
                fs.create(dir, &n, NodeKind::Regular, ATTR).unwrap();
                live.push(n);
            }
        }
    }
}

#[test]
fn paused_hash_stream_survives_leaf_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024", "-N", "40000"], "64M") else {
        return;
    };
    for seed in 1..=6 {
        paused_stream_case(&img, opts(ReadDirOrder::Hash, 0), seed, 150);
    }
    // From one block: the stream starts on an unindexed directory (hashed
    // with the default hash version) that becomes an htree under it.
    for seed in 7..=9 {
        paused_stream_case(&img, opts(ReadDirOrder::Hash, 0), seed, 5);
    }
    assert_fsck_clean(&img, "after the paused hash-order streams");
}

#[test]
fn paused_inode_stream_and_its_fallback_survive_leaf_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024", "-N", "40000"], "64M") else {
        return;
    };
    for seed in 1..=3 {
        paused_stream_case(&img, opts(ReadDirOrder::Inode, 1_000_000), seed, 150);
        paused_stream_case(&img, opts(ReadDirOrder::Inode, 40), seed + 100, 150);
    }
    assert_fsck_clean(&img, "after the paused inode-order streams");
}

/// Without `dir_index` directories stay linear: positions are byte
/// offsets, and a paused stream holds the same guarantees.
#[test]
fn paused_linear_stream_survives_growth() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(
        tmp.path(),
        None,
        &["-b", "1024", "-O", "^dir_index", "-N", "40000"],
        "64M",
    ) else {
        return;
    };
    for seed in 1..=3 {
        paused_stream_case(&img, opts(ReadDirOrder::Hash, 0), seed, 150);
    }
    assert_fsck_clean(&img, "after the paused linear streams");
}

/// The snapshot lists `.`, `..`, then ascending inode numbers; past the
/// limit the stream serves hash order instead; a read from 0 takes a new
/// snapshot that shows names created since.
#[test]
fn inode_order_snapshot_is_sorted_and_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "4096", "-N", "20000"], "64M") else {
        return;
    };
    let fs = open_rw(&img);
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    let mut rng = Rng::new(5);
    // Inodes taken in creation order; freeing some early ones lets later
    // names reuse low numbers, so inode order differs from creation order.
    let mut names = Vec::new();
    for i in 0..500 {
        let n = random_name(&mut rng, i);
        fs.create(d.ino, &n, NodeKind::Regular, ATTR).unwrap();
        names.push(n);
    }
    for n in names.iter().step_by(7) {
        fs.unlink(d.ino, n).unwrap();
    }
    for i in 500..560 {
        fs.create(d.ino, &random_name(&mut rng, i), NodeKind::Regular, ATTR)
            .unwrap();
    }
    let dir = fs.inode(d.ino).unwrap();
    let entries = fs.read_dir(&dir).unwrap().len();
    let mut s = fs.dir_stream_with(&dir, opts(ReadDirOrder::Inode, entries)).unwrap();
    let pass = full_pass(&fs, &dir, &mut s);
    assert_eq!(s.order(), ReadDirOrder::Inode);
    assert_eq!(pass.len(), entries);
    assert_eq!((&pass[0].0[..], &pass[1].0[..]), (&b"."[..], &b".."[..]));
    let inos: Vec<u32> = pass[2..].iter().map(|p| p.1).collect();
    assert!(inos.windows(2).all(|w| w[0] <= w[1]), "not in inode order");
    let mut hash = fs.dir_stream_with(&dir, opts(ReadDirOrder::Hash, 0)).unwrap();
    let hash_pass = full_pass(&fs, &dir, &mut hash);
    assert_ne!(
        names_of(&hash_pass),
        names_of(&pass),
        "the test needs hash order to differ"
    );

    let mut over = fs
        .dir_stream_with(&dir, opts(ReadDirOrder::Inode, entries - 1))
        .unwrap();
    let fallback = full_pass(&fs, &dir, &mut over);
    assert_eq!(over.order(), ReadDirOrder::Hash, "one entry over the limit falls back");
    assert_eq!(names_of(&fallback), names_of(&hash_pass));

    fs.create(d.ino, b"late", NodeKind::Regular, ATTR).unwrap();
    let dir = fs.inode(d.ino).unwrap();
    let (rest, _) = read_some(&fs, &dir, &mut s, pass[10].2, usize::MAX);
    assert!(!rest.contains(&b"late".to_vec()), "the snapshot is immutable");
    let again = full_pass(&fs, &dir, &mut s);
    assert_eq!(
        s.order(),
        ReadDirOrder::Hash,
        "one more entry than the limit at the rewind"
    );
    assert!(names_of(&again).contains(&b"late".to_vec()));
    let mut bigger = fs
        .dir_stream_with(&dir, opts(ReadDirOrder::Inode, entries + 1))
        .unwrap();
    assert!(names_of(&full_pass(&fs, &dir, &mut bigger)).contains(&b"late".to_vec()));
    fs.unmount().unwrap();
    assert_fsck_clean(&img, "after the snapshot test");
}

/// Physical block of logical block 0 of `path` (debugfs `bmap`).
fn root_block(img: &Path, path: &str) -> u64 {
    let out = ext4kit_testkit::tools::debugfs(img, &format!("bmap {path} 0")).unwrap();
    out.trim().parse().unwrap_or_else(|_| panic!("debugfs bmap: {out:?}"))
}

/// A root entry pointing at the index itself, or past the directory's
/// end, is an error naming the block, not a loop or a panic.
#[test]
fn corrupt_leaf_pointers_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024", "-O", "^metadata_csum"], "16M") else {
        return;
    };
    {
        let fs = open_rw(&img);
        let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
        for i in 0..200 {
            fs.create(d.ino, format!("name-{i:04}").as_bytes(), NodeKind::Regular, ATTR)
                .unwrap();
        }
        fs.unmount().unwrap();
    }
    let block = root_block(&img, "/d");
    let good = std::fs::read(&img).unwrap();
    // dx_root: count/limit at 32, entry 0's block at 36, entry 1 at 40 (hash) and 44 (block).
    for (bad, what) in [(0u32, "index block"), (9_999, "unmapped")] {
        let mut data = good.clone();
        let at = block as usize * 1024 + 44;
        data[at..at + 4].copy_from_slice(&bad.to_le_bytes());
        std::fs::write(&img, &data).unwrap();
        let fs = common::open(&img, OpenOptions::default()).unwrap();
        let root = fs.inode(ROOT_INO).unwrap();
        let dir = fs.inode(fs.lookup(&root, b"d").unwrap()).unwrap();
        let mut s = fs.dir_stream(&dir).unwrap();
        let r = fs.read_dir_from(&dir, &mut s, 0, |_, _| Ok(true));
        let e = r.expect_err("a corrupt leaf pointer");
        assert!(matches!(e, Error::Corrupt(_)), "{what}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    std::fs::write(&img, &good).unwrap();
    assert_fsck_clean(&img, "the image before the corruption");
}

/// Names whose legacy hash (31 bits, no minor hash) is equal: found by a
/// birthday search, about nine pairs among 200,000 names.
fn legacy_collisions() -> Vec<Vec<Vec<u8>>> {
    use ext4kit_format::hash::{HashVersion, dx_hash};
    let mut by_hash: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
    for i in 0..200_000 {
        let n = format!("c{i}").into_bytes();
        let h = dx_hash(&n, HashVersion::Legacy, &[0; 4]).unwrap();
        by_hash.entry(h.major).or_default().push(n);
    }
    by_hash.into_values().filter(|g| g.len() > 1).collect()
}

/// Entries sharing a full hash share a position; the ones before the last
/// of a group are followed by cookies, so a caller taking one entry at a
/// time through a group neither loses nor repeats one.
#[test]
fn collision_groups_resume_through_cookies() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024"], "32M") else {
        return;
    };
    common::run("tune2fs", &["-E", "hash_alg=legacy", img.to_str().unwrap()]);
    let groups = legacy_collisions();
    assert!(groups.len() >= 3, "the search found {} collision groups", groups.len());
    let fs = open_rw(&img);
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    let mut rng = Rng::new(9);
    for i in 0..300 {
        fs.create(d.ino, &random_name(&mut rng, i), NodeKind::Regular, ATTR)
            .unwrap();
    }
    for n in groups.iter().flatten() {
        fs.create(d.ino, n, NodeKind::Regular, ATTR).unwrap();
    }
    let dir = fs.inode(d.ino).unwrap();
    let mut s = fs.dir_stream(&dir).unwrap();
    let pass = full_pass(&fs, &dir, &mut s);
    let cookies = pass.iter().filter(|p| p.2 >= 0x7fff_ffff << 32).count();
    assert_eq!(
        cookies,
        groups.iter().map(|g| g.len() - 1).sum::<usize>(),
        "one cookie per entry but a group's last"
    );
    let mut one_by_one = Vec::new();
    let mut pos = 0;
    loop {
        let (got, next) = read_some(&fs, &dir, &mut s, pos, 1);
        if got.is_empty() {
            break;
        }
        one_by_one.extend(got);
        pos = next;
    }
    assert_eq!(one_by_one, names_of(&pass), "one entry per call");
    for (i, (_, _, next)) in pass.iter().enumerate() {
        let (rest, _) = read_some(&fs, &dir, &mut s, *next, usize::MAX);
        let want = names_of(&pass[i + 1..]);
        assert!(
            rest == want,
            "resuming after entry {i} at {next:#x}: {:?} instead of {:?}",
            shown(&rest[..rest.len().min(4)]),
            shown(&want[..want.len().min(4)])
        );
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img, "after the collision test");
}

/// A stream over a directory removed under it ends in `NotFound` (the
/// kernel's `ENOENT` for a dead directory) and records nothing as
/// corruption, though its blocks are freed.
#[test]
fn a_removed_directory_streams_on_without_recording_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(tmp.path(), None, &["-b", "1024"], "16M") else {
        return;
    };
    let fs = open_rw(&img);
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    for i in 0..100 {
        fs.create(d.ino, format!("name-{i:04}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap();
    }
    let dir = fs.inode(d.ino).unwrap();
    let mut s = fs.dir_stream(&dir).unwrap();
    let (got, pos) = read_some(&fs, &dir, &mut s, 0, 10);
    assert_eq!(got.len(), 10);
    for i in 0..100 {
        fs.unlink(d.ino, format!("name-{i:04}").as_bytes()).unwrap();
    }
    fs.rmdir(ROOT_INO, b"d").unwrap();
    let r = fs.read_dir_from(&dir, &mut s, pos, |_, _| Ok(true));
    assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
    let r = fs.read_dir_from(&dir, &mut s, 0, |_, _| Ok(true));
    assert!(matches!(r, Err(Error::NotFound(_))), "from the start: {r:?}");
    assert_eq!(fs.superblock().s_error_count.get(), 0, "an error was recorded");
    fs.unmount().unwrap();
    assert_fsck_clean(&img, "after the removal");
}
