//! Hashed directories deep enough for a third index level. With `large_dir`
//! the root (`dx_root`) may sit above two levels of `dx_node`s
//! (`dx_root_info.indirect_levels` = 2); without it the kernel stops at one
//! level of nodes and answers `ENOSPC` ("index full, reach max htree
//! level"). See `Documentation/filesystems/ext4/directory.rst`.
//!
//! The trees are grown cheaply: 1 KiB blocks and 250-byte names leave three
//! entries per leaf, and names are created in ascending hash order, so every
//! split happens on the rightmost path and leaves the blocks left of it half
//! full — the fewest entries that force each split. `#[ignore]`d tests do
//! the same in random order (`cargo test -p ext4kit-engine --test large_dir
//! -- --ignored --nocapture` prints the counts and times).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO, RenameFlags};
use ext4kit_format::hash::{HashVersion, dx_hash};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::{e2fsck_fn, require_tools, skip_unless};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Length of every generated name: three records fill a 1 KiB leaf.
const NAME_LEN: usize = 250;

fn open_rw(img: &Path) -> Filesystem {
    let dev = FileDevice::open(img, true).expect("open rw");
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("open fs")
}

/// A 1 KiB-block image with room for `inodes` files and the `-O` list
/// `features` (which turns `large_dir` on or off).
fn image(dir: &Path, features: &str, inodes: usize) -> Option<std::path::PathBuf> {
    let n = inodes.to_string();
    mkfs(dir, None, &["-b", "1024", "-O", features, "-N", &n], "160M")
}

/// Name number `i`: a readable prefix padded to [`NAME_LEN`] bytes.
fn name(i: usize) -> Vec<u8> {
    let mut v = format!("n{i:06}-").into_bytes();
    v.resize(NAME_LEN, b'a' + (i % 26) as u8);
    v
}

/// The directory hash of `name` as the file system computes it (default
/// hash version, signed/unsigned flag and seed from the superblock).
fn hasher(fs: &Filesystem) -> impl Fn(&[u8]) -> u32 {
    let sb = fs.superblock();
    let unsigned = sb.s_flags.get() & 2 != 0;
    let version = HashVersion::from_code(sb.s_def_hash_version)
        .unwrap()
        .with_unsigned(unsigned);
    let seed = sb.s_hash_seed.map(|w| w.get());
    move |n: &[u8]| dx_hash(n, version, &seed).unwrap().major
}

/// Names `from..to` sorted by their hash.
fn hash_ordered(fs: &Filesystem, from: usize, to: usize) -> Vec<Vec<u8>> {
    let h = hasher(fs);
    let mut v: Vec<(u32, Vec<u8>)> = (from..to).map(|i| (h(&name(i)), name(i))).collect();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

/// `dx_root_info.indirect_levels` and `dx_countlimit.count` of the root.
fn root_shape(fs: &Filesystem, dir: u32) -> (u8, u16) {
    let inode = fs.inode(dir).unwrap();
    let mut b = [0u8; 36];
    fs.read_at(&inode, 0, &mut b).unwrap();
    (b[30], u16::from_le_bytes([b[34], b[35]]))
}

/// What a run of creates saw.
#[derive(Debug, Default)]
struct Grown {
    created: usize,
    /// Entries in the directory when the third level appeared.
    third_level_at: Option<usize>,
    /// Entries when a second-level node split under a three-level root.
    root_split_at: Option<usize>,
}

/// Creates `names` in `dir` until `stop` says so (after the create) or a
/// create fails; returns what happened and the error, if any.
fn grow(fs: &Filesystem, dir: u32, names: &[Vec<u8>], mut stop: impl FnMut(&Grown) -> bool) -> (Grown, Option<Error>) {
    let mut g = Grown::default();
    let mut size = 0;
    for n in names {
        if let Err(e) = fs.create(dir, n, NodeKind::Regular, ATTR) {
            return (g, Some(e));
        }
        g.created += 1;
        let s = fs.inode(dir).unwrap().size();
        if s != size {
            size = s;
            let (levels, count) = root_shape(fs, dir);
            if levels == 2 && g.third_level_at.is_none() {
                g.third_level_at = Some(g.created);
            }
            if levels == 2 && count > 2 && g.root_split_at.is_none() {
                g.root_split_at = Some(g.created);
            }
        }
        if stop(&g) {
            break;
        }
    }
    (g, None)
}

fn debugfs_levels(img: &Path, dir: &str) -> String {
    let out = common::run("debugfs", &["-R", &format!("htree {dir}"), img.to_str().unwrap()]);
    out.lines()
        .find(|l| l.contains("Indirect levels"))
        .unwrap_or("no root dump")
        .trim()
        .to_string()
}

fn assert_fsck_clean(img: &Path) {
    let fsck = e2fsck_fn(img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
}

/// The engine, opened afresh, lists exactly `want` in `/big` and finds each.
fn assert_engine_sees(img: &Path, want: &BTreeSet<Vec<u8>>) {
    let fs = common::open(img, OpenOptions::default()).unwrap();
    let big = fs.resolve(b"/big").unwrap();
    let listed: BTreeSet<Vec<u8>> = fs
        .read_dir(&big)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    assert_eq!(listed.len(), want.len(), "read_dir count");
    assert!(listed == *want, "read_dir lists other names");
    for n in want {
        fs.lookup(&big, n)
            .unwrap_or_else(|e| panic!("lookup {}: {e}", String::from_utf8_lossy(&n[..8])));
    }
}

/// True when the kernel can loop-mount images here; otherwise says loudly
/// what is skipped, and fails under `CI` (where the kernel checks must run).
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

/// The kernel lists exactly `want` in `/big` and stats a sample of them.
fn assert_kernel_sees(img: &Path, want: &BTreeSet<Vec<u8>>) {
    use std::os::unix::ffi::OsStrExt;
    if !kernel_available("kernel read-back") {
        return;
    }
    let m = LoopMount::ro(img).unwrap();
    let big = m.path().join("big");
    let listed: BTreeSet<Vec<u8>> = std::fs::read_dir(&big)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    assert_eq!(listed.len(), want.len(), "kernel readdir count");
    assert!(listed == *want, "kernel lists other names");
    let all: Vec<&Vec<u8>> = want.iter().collect();
    let mut rng = Rng::new(7);
    for _ in 0..300 {
        let n = all[rng.below(all.len() as u64) as usize];
        let p = big.join(std::ffi::OsStr::from_bytes(n));
        std::fs::metadata(&p).unwrap_or_else(|e| panic!("kernel stat {}: {e}", p.display()));
    }
    m.unmount().unwrap();
}

/// With `large_dir`, the ascending workload grows the root to a third
/// level, then keeps going until a second-level node under it splits into
/// the root: leaf, node and root splits at every depth. Then some names are
/// removed and renamed. The engine and the kernel list and find every name;
/// e2fsck checks the tree; debugfs sees `indirect_levels` 2; the kernel
/// adds names to the tree and e2fsck and the engine agree with it.
#[test]
fn large_dir_grows_a_third_level() {
    third_level_case("large_dir,metadata_csum");
}

/// As [`large_dir_grows_a_third_level`] without `metadata_csum`: no
/// `dx_tail`, so one more entry per index block (124 in the root, 127 in a
/// node) and leaves without a checksum tail.
#[test]
fn large_dir_grows_a_third_level_without_metadata_csum() {
    third_level_case("large_dir,^metadata_csum");
}

fn third_level_case(features: &str) {
    let dir = tempfile::tempdir().unwrap();
    let total = 26_000;
    let Some(img) = image(dir.path(), features, total + 1000) else {
        return;
    };
    let fs = open_rw(&img);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    let names = hash_ordered(&fs, 0, total);
    let t = Instant::now();
    let (g, err) = grow(&fs, big, &names, |g| {
        g.root_split_at.is_some_and(|at| g.created >= at + 50)
    });
    assert!(err.is_none(), "create failed: {err:?}");
    eprintln!("{features} ascending: {g:?} in {:.1?}", t.elapsed());
    let third = g.third_level_at.expect("no third level");
    assert!(g.root_split_at.is_some(), "no node split under the 3-level root: {g:?}");
    let mut want: BTreeSet<Vec<u8>> = names[..g.created].iter().cloned().collect();
    // Removals and renames on the three-level tree.
    for n in names[..g.created].iter().step_by(97) {
        fs.unlink(big, n).unwrap();
        want.remove(n);
    }
    let flags = RenameFlags::default();
    let kept = (1..g.created).step_by(101).filter(|i| i % 97 != 0);
    for (k, n) in kept.map(|i| &names[i]).enumerate() {
        let to = name(total + k);
        fs.rename(big, n, big, &to, flags).unwrap();
        want.remove(n);
        want.insert(to);
    }
    fs.sync().unwrap();
    drop(fs);
    assert!(third > 5_000, "third level after only {third} entries");
    assert_fsck_clean(&img);
    assert_eq!(debugfs_levels(&img, "/big"), "Indirect levels: 2");
    assert_engine_sees(&img, &want);
    assert_kernel_sees(&img, &want);
    if kernel_adds(&img, (total + 500..total + 1000).map(name), &mut want) {
        assert_fsck_clean(&img);
        assert_engine_sees(&img, &want);
    }
}

/// `ext4kit mkfs -O large_dir` (the library's mkfs, as the CLI calls it):
/// the feature is set, so the engine grows a third level on it; e2fsck,
/// debugfs and the kernel accept the result.
#[test]
fn engine_mkfs_with_large_dir_grows_a_third_level() {
    use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
    let Some(()) = skip_unless(require_tools(&["e2fsck", "debugfs"])) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    std::fs::File::create(&img).unwrap().set_len(160 << 20).unwrap();
    let mut opts = MkfsOptions {
        block_size: Some(1024),
        inode_count: Some(12_000),
        device_zeroed: true,
        ..MkfsOptions::default()
    };
    opts.add_features("large_dir");
    mkfs(&FileDevice::open(&img, true).unwrap(), &opts).unwrap();
    let fs = open_rw(&img);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    let names = hash_ordered(&fs, 0, 11_000);
    let (g, err) = grow(&fs, big, &names, |g| {
        g.third_level_at.is_some_and(|at| g.created >= at + 50)
    });
    assert!(err.is_none(), "create failed: {err:?}");
    assert!(g.third_level_at.is_some(), "no third level: {g:?}");
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img);
    assert_eq!(debugfs_levels(&img, "/big"), "Indirect levels: 2");
    let want: BTreeSet<Vec<u8>> = names[..g.created].iter().cloned().collect();
    assert_engine_sees(&img, &want);
    assert_kernel_sees(&img, &want);
}

/// Deleting from a three-level tree: nine names in ten go (in a shuffled
/// order, so leaves all over the tree empty, some completely), then the
/// rest. Leaves and index blocks stay, as the kernel leaves them (it never
/// shrinks an htree), so e2fsck must accept empty leaves under full index
/// levels; the engine and the kernel list exactly the survivors, new names
/// go into the emptied tree, and the emptied directory is removed cleanly.
#[test]
fn deleting_from_a_three_level_tree() {
    let dir = tempfile::tempdir().unwrap();
    let total = 26_000;
    let Some(img) = image(dir.path(), "large_dir,metadata_csum", total + 1000) else {
        return;
    };
    let fs = open_rw(&img);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    let names = hash_ordered(&fs, 0, total);
    let (g, err) = grow(&fs, big, &names, |g| {
        g.third_level_at.is_some_and(|at| g.created >= at + 50)
    });
    assert!(err.is_none(), "create failed: {err:?}");
    let mut order: Vec<usize> = (0..g.created).collect();
    let mut rng = Rng::new(11);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let (gone, kept) = order.split_at(g.created - g.created / 10);
    let t = Instant::now();
    for &i in gone {
        fs.unlink(big, &names[i]).unwrap();
    }
    eprintln!("deleted {} of {} names in {:.1?}", gone.len(), g.created, t.elapsed());
    assert_eq!(root_shape(&fs, big).0, 2, "the tree keeps its three levels");
    fs.sync().unwrap();
    drop(fs);
    let want: BTreeSet<Vec<u8>> = kept.iter().map(|&i| names[i].clone()).collect();
    assert_fsck_clean(&img);
    assert_engine_sees(&img, &want);
    assert_kernel_sees(&img, &want);

    let fs = open_rw(&img);
    for n in &want {
        fs.unlink(big, n).unwrap();
    }
    for n in &names[..200] {
        fs.create(big, n, NodeKind::Regular, ATTR).unwrap();
    }
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img);
    assert_engine_sees(&img, &names[..200].iter().cloned().collect());
    let fs = open_rw(&img);
    for n in &names[..200] {
        fs.unlink(big, n).unwrap();
    }
    fs.rmdir(ROOT_INO, b"big").unwrap();
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img);
}

/// The kernel creates `names` in `/big` (added to `want`); false when the
/// machine cannot loop-mount.
fn kernel_adds(img: &Path, names: impl Iterator<Item = Vec<u8>>, want: &mut BTreeSet<Vec<u8>>) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if !kernel_available("kernel adds names") {
        return false;
    }
    let m = LoopMount::rw(img, &[]).unwrap();
    for n in names {
        let p = m.path().join("big").join(std::ffi::OsStr::from_bytes(&n));
        std::fs::File::create(&p).unwrap_or_else(|e| panic!("kernel create {}: {e}", p.display()));
        want.insert(n);
    }
    m.unmount().unwrap();
    true
}

/// The same in random (name) order, the realistic fill: the third level
/// appears after about 21k names (`--nocapture` prints the figures).
#[test]
fn large_dir_third_level_in_random_order() {
    let dir = tempfile::tempdir().unwrap();
    let total = 80_000;
    let Some(img) = image(dir.path(), "large_dir", total + 100) else {
        return;
    };
    let fs = open_rw(&img);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    let names: Vec<Vec<u8>> = (0..total).map(name).collect();
    let t = Instant::now();
    let (g, err) = grow(&fs, big, &names, |g| {
        g.third_level_at.is_some_and(|at| g.created >= at + 1000)
    });
    assert!(err.is_none(), "create failed: {err:?}");
    eprintln!("random order: {g:?} in {:.1?}", t.elapsed());
    assert!(g.third_level_at.is_some(), "no third level after {total}");
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img);
    assert_eq!(debugfs_levels(&img, "/big"), "Indirect levels: 2");
    let want: BTreeSet<Vec<u8>> = names[..g.created].iter().cloned().collect();
    assert_engine_sees(&img, &want);
    assert_kernel_sees(&img, &want);
}

/// A three-level tree the kernel built (names in ascending hash order, so
/// the kernel's own root growth and node splits happen): the engine lists
/// and finds every name through it, then adds names in random order,
/// splitting leaves and nodes of the kernel's tree; e2fsck and the kernel
/// agree.
#[test]
fn kernel_built_three_level_tree() {
    use std::os::unix::ffi::OsStrExt;
    if !kernel_available("kernel-built large_dir tree") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The kernel's size-wise leaf split keeps two of three long names in
    // the lower block, so it needs about twice the engine's count.
    let total = 18_000;
    let Some(img) = image(dir.path(), "large_dir", total + 3000) else {
        return;
    };
    let names = hash_ordered(&common::open(&img, OpenOptions::default()).unwrap(), 0, total);
    let m = LoopMount::rw(&img, &[]).unwrap();
    std::fs::create_dir(m.path().join("big")).unwrap();
    for n in &names {
        std::fs::File::create(m.path().join("big").join(std::ffi::OsStr::from_bytes(n))).unwrap();
    }
    m.unmount().unwrap();
    assert_eq!(debugfs_levels(&img, "/big"), "Indirect levels: 2");
    let mut want: BTreeSet<Vec<u8>> = names.iter().cloned().collect();
    assert_engine_sees(&img, &want);
    let fs = open_rw(&img);
    let big = fs.resolve(b"/big").unwrap().ino;
    for i in total..total + 2500 {
        fs.create(big, &name(i), NodeKind::Regular, ATTR).unwrap();
        want.insert(name(i));
    }
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img);
    assert_engine_sees(&img, &want);
    assert_kernel_sees(&img, &want);
}

/// A three-level tree that e2fsck built (`e2fsck -fyD` re-indexes every
/// directory, packing leaves and index nodes full, unlike the kernel's
/// and the engine's half-full splits): the engine lists and finds every
/// name through it, then adds names, which split full nodes in the middle
/// of the tree rather than on its rightmost path; e2fsck and the kernel
/// agree.
#[test]
fn e2fsck_rebuilt_three_level_tree() {
    let dir = tempfile::tempdir().unwrap();
    let total = REHASH_NAMES;
    let Some(img) = image(dir.path(), "large_dir", total + 3000) else {
        return;
    };
    let fs = open_rw(&img);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    let names: Vec<Vec<u8>> = (0..total).map(name).collect();
    let (g, err) = grow(&fs, big, &names, |_| false);
    assert!(err.is_none(), "create failed after {}: {err:?}", g.created);
    fs.sync().unwrap();
    drop(fs);
    let out = std::process::Command::new("e2fsck")
        .args(["-fyD", img.to_str().unwrap()])
        .output()
        .unwrap();
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "e2fsck -fyD: {code:?}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Optimizing directories"),
        "e2fsck -fyD did not rebuild:\n{stdout}"
    );
    assert_fsck_clean(&img);
    assert_eq!(debugfs_levels(&img, "/big"), "Indirect levels: 2");
    let mut want: BTreeSet<Vec<u8>> = names.iter().cloned().collect();
    assert_engine_sees(&img, &want);
    let fs = open_rw(&img);
    for i in total..total + 2500 {
        fs.create(big, &name(i), NodeKind::Regular, ATTR).unwrap();
        want.insert(name(i));
    }
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img);
    assert_engine_sees(&img, &want);
    assert_kernel_sees(&img, &want);
}

/// Names that e2fsck's packed rebuild needs for a third level: more full
/// leaves (3 names each) than a full two-level index addresses, 123 root ×
/// 126 node entries × 3 = 46,494 (46,000 names keep two levels, 47,000
/// get three).
const REHASH_NAMES: usize = 48_000;

/// `dx_root_info.indirect_levels` comes from disk: a three-level root on a
/// file system without `large_dir` (the feature cleared), or a level count
/// of 3 with it, is refused by name, never trusted or panicked on. Reads
/// fall back to scanning the leaves, as the kernel does when `dx_probe`
/// rejects a root; an insert, which needs the index, fails with the
/// corruption error naming `dx_root_info` and the root's block.
#[test]
fn impossible_index_depth_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), "large_dir,^metadata_csum", 10_000) else {
        return;
    };
    let fs = open_rw(&img);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    let names = hash_ordered(&fs, 0, 9_000);
    let (g, err) = grow(&fs, big, &names, |g| g.third_level_at.is_some());
    assert!(err.is_none() && g.third_level_at.is_some(), "{g:?} {err:?}");
    fs.sync().unwrap();
    drop(fs);
    let want: BTreeSet<Vec<u8>> = names[..g.created].iter().cloned().collect();
    let largedir = ext4kit_format::features::IncompatFeatures::LARGEDIR.0;
    common::patch_sb(&img, |sb| {
        let v = sb.s_feature_incompat.get() & !largedir;
        sb.s_feature_incompat.set(v);
    });
    assert_depth_refused(&img, &want, b"3");
    common::patch_sb(&img, |sb| {
        let v = sb.s_feature_incompat.get() | largedir;
        sb.s_feature_incompat.set(v);
    });
    let out = common::run("debugfs", &["-R", "bmap /big 0", img.to_str().unwrap()]);
    let root: u64 = out.trim().parse().expect("debugfs bmap");
    patch_byte(&img, root * 1024 + 30, 3);
    assert_depth_refused(&img, &want, b"4");
}

/// The engine lists `want` in `/big`, finds a sample of it, and refuses to
/// add `new` there with a corruption error naming `indirect_levels`.
fn assert_depth_refused(img: &Path, want: &BTreeSet<Vec<u8>>, new: &[u8]) {
    let fs = open_rw(img);
    let big = fs.resolve(b"/big").unwrap();
    let listed = fs.read_dir(&big).unwrap().len();
    assert_eq!(listed, want.len() + 2, "read_dir by scanning");
    for n in want.iter().step_by(want.len() / 40) {
        fs.lookup(&big, n).unwrap();
    }
    let err = fs.create(big.ino, new, NodeKind::Regular, ATTR).unwrap_err();
    assert_eq!(err.errno(), libc::EUCLEAN, "{err}");
    let msg = err.to_string();
    assert!(msg.contains("dx_root_info") && msg.contains("indirect_levels"), "{msg}");
    eprintln!("refused: {msg}");
}

fn patch_byte(img: &Path, at: u64, value: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&[value], at).unwrap();
}

/// Without `large_dir` a directory's size is `i_size_lo` alone (the
/// kernel's `ext4_isize`; `i_size_high` was `i_dir_acl`): a stray high
/// word is ignored when read and cleared when the engine next writes the
/// directory, which leaves what e2fsck asks for. With `large_dir` the
/// high word counts.
#[test]
fn directory_size_high_word_needs_large_dir() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), "^large_dir", 2048) else {
        return;
    };
    let path = img.to_str().unwrap();
    common::run("debugfs", &["-w", "-R", "mkdir d", path]);
    let stray = (1u64 << 32) + 1024;
    common::run("debugfs", &["-w", "-R", &format!("sif /d size {stray}"), path]);
    let fs = open_rw(&img);
    let d = fs.resolve(b"/d").unwrap();
    assert_eq!(d.size(), 1024, "i_size_high of a directory without large_dir");
    for i in 0..20 {
        fs.create(d.ino, &name(i), NodeKind::Regular, ATTR).unwrap();
    }
    let grown = fs.resolve(b"/d").unwrap().size();
    assert!((2048..1 << 20).contains(&grown), "grew from 1 KiB to {grown}");
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img);

    common::patch_sb(&img, |sb| {
        let v = sb.s_feature_incompat.get() | ext4kit_format::features::IncompatFeatures::LARGEDIR.0;
        sb.s_feature_incompat.set(v);
    });
    common::run("debugfs", &["-w", "-R", &format!("sif /d size {stray}"), path]);
    let fs = common::open(&img, OpenOptions::default()).unwrap();
    assert_eq!(
        fs.resolve(b"/d").unwrap().size(),
        stray,
        "with large_dir the high word counts"
    );
}

/// Without `large_dir`, the same workload stops where the third level would
/// be needed, with `ENOSPC` and nothing changed: the image stays clean, the
/// tree keeps two levels, and the kernel refuses that same name with `ENOSPC`.
#[test]
fn without_large_dir_the_index_fills_with_enospc() {
    let dir = tempfile::tempdir().unwrap();
    let total = 20_000;
    let Some(img) = image(dir.path(), "^large_dir", total + 100) else {
        return;
    };
    let fs = open_rw(&img);
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    let names = hash_ordered(&fs, 0, total);
    let (g, err) = grow(&fs, big, &names, |_| false);
    let err = err.expect("the index never filled");
    eprintln!("without large_dir: full after {} entries: {err}", g.created);
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    assert!(matches!(err, Error::DirIndexFull(_)), "{err:?}");
    assert!(err.to_string().contains("maximum htree depth of 2 levels"), "{err}");
    let refused = &names[g.created];
    let bigi = fs.inode(big).unwrap();
    assert!(matches!(fs.lookup(&bigi, refused), Err(Error::NotFound(_))));
    assert_eq!(root_shape(&fs, big).0, 1);
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img);
    assert_eq!(debugfs_levels(&img, "/big"), "Indirect levels: 1");
    let want: BTreeSet<Vec<u8>> = names[..g.created].iter().cloned().collect();
    assert_engine_sees(&img, &want);
    assert_kernel_refuses(&img, refused);
    assert_fsck_clean(&img);
}

/// The kernel, on the same image, refuses the name the engine refused.
fn assert_kernel_refuses(img: &Path, refused: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    if !kernel_available("kernel ENOSPC comparison") {
        return;
    }
    let m = LoopMount::rw(img, &[]).unwrap();
    let p = m.path().join("big").join(std::ffi::OsStr::from_bytes(refused));
    let e = std::fs::File::create(&p).expect_err("the kernel added the name");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "kernel: {e}");
    m.unmount().unwrap();
}
