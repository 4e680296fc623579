//! The inode allocators (`-o inode_alloc=`) on images made by mke2fs with
//! many small groups (1 KiB blocks, 1,024 blocks per group, 64 groups):
//! the parent-group policy packs top-level directories in one group, Orlov
//! spreads them and keeps what goes inside a directory near it, the
//! flex_bg policy fills the first flex group until its free blocks fall to
//! the ratio. Against the kernel: the same directories made through a
//! loop mount and through the engine land in the same groups. Every image
//! ends `e2fsck -fn` clean. Figures print with `--nocapture`.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{AllocOptions, Attr, Filesystem, InodeAllocator, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, skip_unless};

const ATTR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};

/// Inodes per group on every image here (8,192 over 64 groups).
const IPG: u32 = 128;
const GROUPS: u32 = 64;

/// The image's layout: no flex_bg, or flex groups of 4 or 16 groups.
#[derive(Clone, Copy, Debug)]
enum Flex {
    None,
    Of(u32),
}

/// A 64 MiB image with fixed UUID and hash seed (so Orlov's hashed start
/// groups are the same on every run); `None` when mke2fs is missing.
fn image(dir: &Path, flex: Flex) -> Option<PathBuf> {
    let flex_args: Vec<String> = match flex {
        Flex::None => vec!["-O".into(), "^flex_bg".into()],
        Flex::Of(n) => vec!["-G".into(), n.to_string()],
    };
    let mut args = vec![
        "-b",
        "1024",
        "-g",
        "1024",
        "-N",
        "8192",
        "-U",
        "6a0d2f0e-1c1b-4d52-9a39-4d8b3c3f7e10",
        "-E",
        "hash_seed=1f7b6f0a-98f4-4a67-8c0e-2e4bd1a9c5d3",
    ];
    args.extend(flex_args.iter().map(String::as_str));
    let img = common::mkfs(dir, None, &args, "64M")?;
    let sb = common::read_sb(&img);
    let ipg = u32::from_le_bytes(sb[40..44].try_into().unwrap());
    assert_eq!(ipg, IPG, "mke2fs made {ipg} inodes per group");
    Some(img)
}

fn open_rw(img: &Path, policy: InodeAllocator) -> Filesystem {
    let dev = FileDevice::open(img, true).expect("open rw");
    let opts = OpenOptions {
        alloc: AllocOptions {
            inodes: policy,
            ..AllocOptions::default()
        },
        ..OpenOptions::default()
    };
    Filesystem::open(Box::new(dev), opts).expect("open fs")
}

fn group(ino: u32) -> u32 {
    (ino - 1) / IPG
}

fn mkdir(fs: &Filesystem, parent: u32, name: &str) -> u32 {
    fs.create(parent, name.as_bytes(), NodeKind::Directory, ATTR)
        .expect("mkdir")
        .ino
}

fn touch(fs: &Filesystem, parent: u32, name: &str) -> u32 {
    fs.create(parent, name.as_bytes(), NodeKind::Regular, ATTR)
        .expect("create")
        .ino
}

/// Makes `d00`..`d31` in the root; returns their inodes.
fn top_dirs(fs: &Filesystem) -> Vec<u32> {
    (0..32).map(|i| mkdir(fs, ROOT_INO, &format!("d{i:02}"))).collect()
}

fn assert_clean(img: &Path, what: &str) {
    let r = e2fsck_fn(img).expect("run e2fsck");
    assert!(r.is_clean(), "{what}: e2fsck -fn exited {}:\n{}", r.code, r.output);
}

fn groups_of(inos: &[u32]) -> BTreeSet<u32> {
    inos.iter().map(|&i| group(i)).collect()
}

#[test]
fn parent_puts_top_level_dirs_in_one_group() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), Flex::None) else {
        return;
    };
    let fs = open_rw(&img, InodeAllocator::Parent);
    let inos = top_dirs(&fs);
    fs.unmount().unwrap();
    assert_eq!(groups_of(&inos), BTreeSet::from([0]), "inodes {inos:?}");
    assert_clean(&img, "parent");
}

/// 32 directories in the root go to 32 different groups (55 of the 64
/// have average free inodes and blocks: group 0, the superblock backups'
/// and the journal's have fewer); on the image with flex groups of 4, to
/// the 11 of 16 flex groups with at least average free blocks.
#[test]
fn orlov_spreads_top_level_dirs() {
    for (flex, want) in [(Flex::None, 32), (Flex::Of(4), 11)] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = image(dir.path(), flex) else {
            return;
        };
        let fs = open_rw(&img, InodeAllocator::Orlov);
        let inos = top_dirs(&fs);
        fs.unmount().unwrap();
        let per = match flex {
            Flex::None => 1,
            Flex::Of(n) => n,
        };
        let units: BTreeSet<u32> = inos.iter().map(|&i| group(i) / per).collect();
        println!(
            "orlov {flex:?}: 32 top-level dirs in {} (flex) groups {units:?}",
            units.len()
        );
        assert_eq!(units.len(), want, "{flex:?}: groups {:?}", groups_of(&inos));
        assert_clean(&img, &format!("orlov {flex:?}"));
    }
}

/// Under Orlov a directory's files go to its group and its subdirectories
/// to its group or the few after it (each takes at most `max_dirs`: the
/// average plus `inodes_per_group / 16`, 8 here — per flex group too, so
/// with flex groups of 16 the subdirectories overflow into the next one).
#[test]
fn orlov_keeps_a_directorys_children_near_it() {
    for flex in [Flex::None, Flex::Of(16)] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = image(dir.path(), flex) else {
            return;
        };
        let fs = open_rw(&img, InodeAllocator::Orlov);
        let top = mkdir(&fs, ROOT_INO, "project");
        let home = group(top);
        let files: Vec<u32> = (0..60).map(|i| touch(&fs, top, &format!("f{i}"))).collect();
        let subs: Vec<u32> = (0..24).map(|i| mkdir(&fs, top, &format!("s{i}"))).collect();
        let deep: Vec<u32> = (0..20).map(|i| touch(&fs, subs[0], &format!("g{i}"))).collect();
        fs.unmount().unwrap();
        let (fg, sg) = (groups_of(&files), groups_of(&subs));
        println!("{flex:?}: dir in group {home}; files in {fg:?}; subdirs in {sg:?}");
        match flex {
            Flex::None => {
                assert_eq!(fg, BTreeSet::from([home]), "files");
                let dist: Vec<u32> = sg.iter().map(|&g| (g + GROUPS - home) % GROUPS).collect();
                assert!(dist.iter().all(|&d| d <= 4), "subdirs {sg:?} from {home}");
                assert!(sg.len() >= 2, "24 subdirs exceed max_dirs of one group: {sg:?}");
                assert_eq!(groups_of(&deep), BTreeSet::from([group(subs[0])]), "files of a subdir");
            }
            Flex::Of(n) => {
                let flexes = |inos: &[u32]| -> BTreeSet<u32> { inos.iter().map(|&i| group(i) / n).collect() };
                let (fh, next) = (home / n, (home / n + 1) % (GROUPS / n));
                assert_eq!(flexes(&files), BTreeSet::from([fh]), "files of a dir in group {home}");
                assert!(flexes(&subs).is_subset(&BTreeSet::from([fh, next])), "subdirs {sg:?}");
                assert_eq!(flexes(&deep), BTreeSet::from([group(subs[0]) / n]), "files of a subdir");
            }
        }
        assert_clean(&img, &format!("orlov children {flex:?}"));
    }
}

/// Free blocks of flex group `f` (of `n` groups) in percent of its size,
/// as `find_group_flex` computes it.
fn flex_free_percent(fs: &Filesystem, f: u32, n: u32) -> u64 {
    let descs = fs.group_descs();
    let free: u64 = descs[(f * n) as usize..((f + 1) * n) as usize]
        .iter()
        .map(|d| u64::from(d.free_blocks()))
        .sum();
    free * 100 / (1024 * u64::from(n))
}

/// The flex_bg policy: with flex groups of 16, directories and files all
/// go to flex group 0 (Orlov spreads the same directories over all four);
/// once 256 KiB files have taken flex group 0 down to 10% free blocks, the
/// next inodes go to flex group 1. (Files of a whole group's size would
/// go to the empty groups of the next flex groups, which is where mballoc
/// finds runs that long, and never fill flex group 0.)
#[test]
fn flexbg_fills_the_first_flex_group_to_the_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), Flex::Of(16)) else {
        return;
    };
    let fs = open_rw(&img, InodeAllocator::FlexBg);
    let dirs = top_dirs(&fs);
    let inos: Vec<u32> = dirs.iter().flat_map(|&d| [d, touch(&fs, d, "f")]).collect();
    assert!(inos.iter().all(|&i| group(i) < 16), "groups {:?}", groups_of(&inos));
    let chunk = vec![0x5Au8; 256 << 10];
    let mut n = 0;
    while flex_free_percent(&fs, 0, 16) > 10 {
        assert!(n < 80, "20 MiB written and flex group 0 still above 10% free");
        let f = touch(&fs, ROOT_INO, &format!("big{n}"));
        assert!(
            group(f) < 16,
            "big{n} left flex group 0 at {}% free",
            flex_free_percent(&fs, 0, 16)
        );
        fs.write(f, 0, &chunk).unwrap();
        fs.sync().unwrap();
        n += 1;
    }
    let after = [mkdir(&fs, ROOT_INO, "later"), touch(&fs, dirs[0], "later")];
    println!(
        "flexbg: {n} files of 256 KiB took flex group 0 to {}% free; then inodes {after:?}",
        flex_free_percent(&fs, 0, 16)
    );
    fs.unmount().unwrap();
    assert!(
        after.iter().all(|&i| group(i) / 16 == 1),
        "after filling: groups {after:?}"
    );
    assert_clean(&img, "flexbg");
}

/// What the oracle test creates, by path: 32 top-level directories, then
/// 12 subdirectories and 8 files in the first of them.
fn oracle_ops() -> Vec<(String, bool)> {
    let tops = (0..32).map(|i| (format!("d{i:02}"), true));
    let subs = (0..12).map(|i| (format!("d00/s{i:02}"), true));
    let files = (0..8).map(|i| (format!("d00/f{i:02}"), false));
    tops.chain(subs).chain(files).collect()
}

/// Makes `path` through the kernel mount at `root`; returns its inode.
fn kernel_make(root: &Path, path: &str, is_dir: bool) -> u32 {
    let p = root.join(path);
    if is_dir {
        std::fs::create_dir(&p).unwrap();
    } else {
        std::fs::write(&p, b"").unwrap();
    }
    std::fs::metadata(&p).unwrap().ino() as u32
}

/// Makes `path` through the engine; returns its inode.
fn engine_make(fs: &Filesystem, path: &str, is_dir: bool) -> u32 {
    let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
    let dir = if parent.is_empty() {
        ROOT_INO
    } else {
        fs.resolve(parent.as_bytes()).unwrap().ino
    };
    if is_dir {
        mkdir(fs, dir, name)
    } else {
        touch(fs, dir, name)
    }
}

/// The oracle ops on copies of one image, by the kernel and by the engine
/// with Orlov. `per_op`: each op in its own mount and open, so the kernel
/// starts from counters summed from the descriptors (exact) and neither
/// side remembers a directory's last group; else all in one mount.
fn oracle_run(img: &Path, dir: &Path, per_op: bool) -> (Vec<u32>, Vec<u32>) {
    let kimg = dir.join(if per_op { "kernel-per-op.img" } else { "kernel.img" });
    let eimg = dir.join(if per_op { "engine-per-op.img" } else { "engine.img" });
    std::fs::copy(img, &kimg).unwrap();
    std::fs::copy(img, &eimg).unwrap();
    let ops = oracle_ops();
    let batches: Vec<&[(String, bool)]> = if per_op { ops.chunks(1).collect() } else { vec![&ops] };
    let (mut kernel, mut ours) = (Vec::new(), Vec::new());
    for batch in batches {
        let mnt = LoopMount::rw(&kimg, &[]).expect("mount rw");
        kernel.extend(batch.iter().map(|(p, d)| kernel_make(mnt.path(), p, *d)));
        mnt.unmount().expect("unmount");
        let fs = open_rw(&eimg, InodeAllocator::Orlov);
        ours.extend(batch.iter().map(|(p, d)| engine_make(&fs, p, *d)));
        fs.unmount().unwrap();
    }
    assert_clean(&kimg, "kernel");
    assert_clean(&eimg, "engine");
    (kernel, ours)
}

/// The oracle: 32 top-level directories, then subdirectories and files in
/// one of them, made by the kernel through a loop mount and by the engine
/// with Orlov on copies of one image, on each layout. With exact inputs
/// (one op per mount) every inode lands in the kernel's group, and in fact
/// gets the kernel's inode number. In one long mount the kernel reads its
/// per-CPU counters, which lag by up to a batch per CPU: its average free
/// inodes per flex group stays at the fresh image's, so once every roomy
/// flex group holds two directories none is "above average" and it falls
/// back to the groups after the root's. That run is printed, not asserted.
#[test]
fn orlov_matches_the_kernel() {
    if skip_unless(can_loop_mount()).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with loop devices");
        return;
    }
    for flex in [Flex::None, Flex::Of(4), Flex::Of(16)] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = image(dir.path(), flex) else {
            return;
        };
        for per_op in [true, false] {
            let (kernel, ours) = oracle_run(&img, dir.path(), per_op);
            let (kg, og): (Vec<u32>, Vec<u32>) = (
                kernel.iter().map(|&i| group(i)).collect(),
                ours.iter().map(|&i| group(i)).collect(),
            );
            let same = kg.iter().zip(&og).filter(|(a, b)| a == b).count();
            let same_ino = kernel.iter().zip(&ours).filter(|(a, b)| a == b).count();
            let how = if per_op { "one op per mount" } else { "one mount" };
            println!("{flex:?}, {how}: kernel groups {kg:?}");
            println!("{flex:?}, {how}: engine groups {og:?}");
            println!(
                "{flex:?}, {how}: {same}/{n} groups, {same_ino}/{n} inode numbers match",
                n = kg.len()
            );
            if per_op {
                assert_eq!(kg, og, "{flex:?}: groups, kernel vs engine, exact inputs");
            }
        }
    }
}
