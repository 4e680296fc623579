//! Pass 3A: a directory whose hash index a repair drops is indexed again,
//! and `-D` rebuilds every directory. Images are made by the engine with
//! 1 KiB blocks (5,000 names need a two-level index there), with and
//! without metadata_csum; each test damages the index precisely, repairs,
//! and checks the result three ways: `e2fsck -fn`, the index debugfs
//! dumps, and a lookup of every name through the engine's htree code.

mod support;

use support::*;

use std::process::Command;
use std::sync::Arc;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::{BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_format::htree::{inode_csum_seed, set_dx_checksum};
use ext4kit_format::superblock::RawSuperblock;
use ext4kit_fsck::repair::{Outcome, repair};
use ext4kit_fsck::{Mode, Options};

const BS: usize = 1024;
const N: u32 = 5000;
/// `EXT4_INDEX_FL`.
const INDEX_FL: u32 = 0x1000;

fn name(i: u32) -> Vec<u8> {
    format!("entry-{i:05}{}", "x".repeat(i as usize % 13)).into_bytes()
}

/// An image with `/big` (5,000 names, an htree) and `/sparse` (a linear
/// directory of several blocks, most of its names removed).
struct Img {
    bytes: Vec<u8>,
    big: u32,
    sparse: u32,
}

fn build(csum: bool) -> Img {
    let (dev, fs) = engine_fs(32 << 20, 0x3a, |o| {
        if !csum {
            o.feature_edits.push(("metadata_csum".into(), false));
        }
    });
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    for i in 0..N {
        fs.create(big, &name(i), NodeKind::Regular, ATTR).unwrap();
    }
    let sparse = fs.create(ROOT_INO, b"sparse", NodeKind::Directory, ATTR).unwrap().ino;
    for i in 0..60 {
        fs.create(sparse, &name(i), NodeKind::Regular, ATTR).unwrap();
    }
    for i in (0..60).filter(|i| i % 10 != 0) {
        fs.unlink(sparse, &name(i)).unwrap();
    }
    fs.unmount().expect("unmount");
    Img {
        bytes: dev.snapshot(),
        big,
        sparse,
    }
}

/// Directory `ino`'s checksum seed.
fn seed(bytes: &[u8], ino: u32) -> u32 {
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let fs = open(bytes);
    let generation = fs.inode(ino).unwrap().raw.i_generation.get();
    inode_csum_seed(sb.csum_seed(), ino, generation)
}

fn open(bytes: &[u8]) -> Filesystem {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(bytes.to_vec()));
    Filesystem::open(Box::new(dev), OpenOptions::default()).expect("the engine opens the image")
}

/// `(i_size, i_flags)` of inode `ino`.
fn size_flags(bytes: &[u8], ino: u32) -> (u64, u32) {
    let raw = open(bytes).inode(ino).unwrap().raw;
    (raw.size(), raw.i_flags.get())
}

/// The dx entry slots of an index block: `(hash offset, block offset)` of entry `i`.
fn slot(first: usize, i: usize) -> (usize, usize) {
    (first + 8 * i, first + 8 * i + 4)
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Asserts `/big` is an htree again with `levels` index levels below the
/// root, that the engine finds each of its names, and that e2fsck agrees.
fn assert_indexed(bytes: &[u8], big: u32, levels: u8) {
    assert_e2fsck_clean(bytes, "after the rebuild");
    let (_, flags) = size_flags(bytes, big);
    assert_ne!(flags & INDEX_FL, 0, "INDEX_FL is set again");
    let dump = debugfs_out(bytes, &format!("htree_dump <{big}>"));
    assert!(
        dump.contains(&format!("Indirect levels: {levels}")),
        "{levels} index levels: {}",
        &dump[..dump.len().min(400)]
    );
    let fs = open(bytes);
    let dir = fs.inode(big).unwrap();
    for i in 0..N {
        assert!(
            fs.lookup(&dir, &name(i)).is_ok(),
            "lookup of name {i} through the index"
        );
    }
}

fn repair_with(bytes: &[u8], all: bool) -> (Outcome, Vec<u8>) {
    let mem = Arc::new(MemDevice::new(bytes.to_vec()));
    let dev: Arc<dyn BlockDevice> = mem.clone();
    let opts = Options {
        force: true,
        mode: Mode::Yes,
        rehash_all: all,
        ..Options::default()
    };
    let out = repair(&dev, &opts, &mut |_| {}).expect("repair runs");
    (out, mem.snapshot())
}

fn assert_rebuilt(out: &Outcome, code: &str) {
    let fixed = fixed_codes(out);
    assert!(fixed.contains(&code), "{code} repaired: {fixed:?}");
    assert!(
        fixed.contains(&"P3A_OPTIMIZE_DIR"),
        "the directory was rebuilt: {fixed:?}"
    );
    assert_eq!(out.verdict.unfixed_errors(), 0, "clean: {:?}", out.verdict.findings);
    assert!(
        out.verdict.findings.is_empty(),
        "the re-run finds nothing: {:?}",
        out.verdict.findings
    );
}

#[test]
fn a_bad_root_limit_is_rebuilt_with_two_levels() {
    let img = build(true);
    let mut bytes = img.bytes;
    assert_indexed(&bytes, img.big, 1);
    let root = bmap(&bytes, img.big, 0) * BS;
    bytes[root + 32..root + 34].copy_from_slice(&80u16.to_le_bytes());
    let (out, after) = repair_with(&bytes, false);
    assert_rebuilt(&out, "P2_HTREE_BAD_LIMIT");
    assert_indexed(&after, img.big, 1);
}

#[test]
fn a_bad_hash_range_is_rebuilt_without_metadata_csum() {
    let img = build(false);
    let mut bytes = img.bytes;
    let root = bmap(&bytes, img.big, 0) * BS;
    let count = usize::from(u16::from_le_bytes([bytes[root + 34], bytes[root + 35]]));
    assert!(count >= 2, "the root points at two interior nodes");
    // Raise entry 1's hash half-way to the next: names of the second
    // node below it now lie outside their range.
    let (h1, _) = slot(root + 32, 1);
    let next = if count > 2 {
        le32(&bytes, slot(root + 32, 2).0)
    } else {
        u32::MAX
    };
    let lo = le32(&bytes, h1);
    let raised = (lo / 2 + next / 2) & !1;
    bytes[h1..h1 + 4].copy_from_slice(&raised.to_le_bytes());
    let (out, after) = repair_with(&bytes, false);
    assert_rebuilt(&out, "P2_HTREE_MIN_HASH");
    assert_indexed(&after, img.big, 1);
}

#[test]
fn a_node_pointing_past_the_end_is_rebuilt() {
    let img = build(true);
    let mut bytes = img.bytes;
    let root = bmap(&bytes, img.big, 0) * BS;
    let node_lblk = le32(&bytes, slot(root + 32, 0).1);
    let node = bmap(&bytes, img.big, node_lblk) * BS;
    let (_, b3) = slot(node + 8, 3);
    bytes[b3..b3 + 4].copy_from_slice(&60_000u32.to_le_bytes());
    let s = seed(&bytes, img.big);
    set_dx_checksum(&mut bytes[node..node + BS], BS as u32, s).unwrap();
    let (out, after) = repair_with(&bytes, false);
    assert_rebuilt(&out, "P2_HTREE_BADBLK");
    assert_indexed(&after, img.big, 1);
}

/// `-D` on a clean image: the htree is rebuilt (its leaves a fifth free),
/// the sparse linear directory packed into one block, every name kept,
/// and a plain repair afterwards finds nothing.
fn dash_d_on_a_clean_image(csum: bool) {
    let img = build(csum);
    let before = img.bytes;
    let (big0, sparse0) = (size_flags(&before, img.big).0, size_flags(&before, img.sparse).0);
    let (out, after) = repair_with(&before, true);
    assert_eq!(out.verdict.unfixed_errors(), 0, "{:?}", out.verdict.findings);
    assert!(fixed_codes(&out).contains(&"P3A_OPTIMIZE_DIR"));
    assert_indexed(&after, img.big, 1);
    let (big1, sparse1) = (size_flags(&after, img.big).0, size_flags(&after, img.sparse).0);
    eprintln!("csum {csum}: /big {big0} -> {big1} bytes, /sparse {sparse0} -> {sparse1} bytes");
    assert!(sparse0 > BS as u64, "the sparse directory had several blocks");
    assert_eq!(sparse1, BS as u64, "six names pack into one block");
    assert_eq!(
        size_flags(&after, img.sparse).1 & INDEX_FL,
        0,
        "a one-block directory is linear"
    );
    let fs = open(&after);
    let sparse = fs.inode(img.sparse).unwrap();
    for i in (0..60).step_by(10) {
        assert!(fs.lookup(&sparse, &name(i)).is_ok(), "name {i} kept");
    }
    let (again, _) = repair_with(&after, false);
    assert!(again.runs.is_empty(), "nothing left to repair: {:?}", again.runs);
}

#[test]
fn dash_d_rebuilds_every_directory_with_metadata_csum() {
    dash_d_on_a_clean_image(true);
}

#[test]
fn dash_d_rebuilds_every_directory_without_metadata_csum() {
    dash_d_on_a_clean_image(false);
}

/// The kernel's own htree lookup on the rebuilt index: the repaired image
/// mounted read-only, every name looked up by path. Needs root and loop
/// devices; skips loudly without them.
#[test]
fn the_kernel_finds_every_name_in_a_rebuilt_index() {
    let img = build(true);
    let mut bytes = img.bytes;
    let root = bmap(&bytes, img.big, 0) * BS;
    bytes[root + 32..root + 34].copy_from_slice(&80u16.to_le_bytes());
    let (out, after) = repair_with(&bytes, false);
    assert_rebuilt(&out, "P2_HTREE_BAD_LIMIT");
    let f = temp_image(&after);
    let mnt = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-o", "loop,ro"])
        .arg(f.path())
        .arg(mnt.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(
            std::env::var_os("CI").is_none(),
            "mount -o loop,ro needs root and loop devices"
        );
        ext4kit_testkit::skipped!("cannot mount -o loop,ro here (needs root and loop devices)");
        return;
    }
    let missing: Vec<u32> = (0..N)
        .filter(|&i| {
            let p = mnt.path().join("big").join(String::from_utf8(name(i)).unwrap());
            std::fs::symlink_metadata(p).is_err()
        })
        .collect();
    let _ = Command::new("umount").arg(mnt.path()).status();
    assert!(
        missing.is_empty(),
        "the kernel misses {} names: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

/// On an image with itrees (seed 003) a dropped index takes the
/// directory's itree with it; after the repair the directory has both
/// trees again, the checker finds it clean, and without the itrees (which
/// e2fsck does not know) e2fsck agrees.
#[test]
fn a_dropped_index_gets_its_itree_back() {
    let img = build(true);
    let mem = Arc::new(MemDevice::new(img.bytes));
    let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default()).unwrap();
    assert!(fs.itree_add_all().unwrap().directories >= 1);
    fs.unmount().unwrap();
    let mut bytes = mem.snapshot();
    let itree_fl = ext4kit_format::itree::ITREE_FL;
    assert_ne!(size_flags(&bytes, img.big).1 & itree_fl, 0, "/big has an itree");
    let root = bmap(&bytes, img.big, 0) * BS;
    bytes[root + 32..root + 34].copy_from_slice(&80u16.to_le_bytes());
    let (out, after) = repair_with(&bytes, false);
    assert_rebuilt(&out, "P2_HTREE_BAD_LIMIT");
    assert!(
        out.verdict.notes.iter().any(|n| n.starts_with("itrees rebuilt for ")),
        "{:?}",
        out.verdict.notes
    );
    assert_ne!(size_flags(&after, img.big).1 & itree_fl, 0, "/big has its itree again");
    let recheck = ext4kit_fsck::check(
        &MemDevice::new(after.clone()),
        &Options {
            force: true,
            ..Options::default()
        },
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(recheck.errors(), 0, "{:?}", recheck.findings);
    let mem = Arc::new(MemDevice::new(after));
    let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default()).unwrap();
    fs.itree_remove_all().unwrap();
    fs.unmount().unwrap();
    assert_indexed(&mem.snapshot(), img.big, 1);
}
