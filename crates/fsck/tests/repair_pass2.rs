//! Pass 2 repairs on images the engine writes: each test damages one
//! directory field precisely, runs `repair` as `fsck -y`, and asserts that
//! the verdict is clean, that `e2fsck -fn` agrees, and that the names that
//! should survive do (listed with debugfs).

mod support;

use support::*;

use std::process::Command;
use std::sync::Arc;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_format::dir_entry::{TAIL_SIZE, set_block_checksum};
use ext4kit_format::htree::{inode_csum_seed, set_dx_checksum};
use ext4kit_format::superblock::RawSuperblock;

const BS: usize = 1024;

/// The image and the inodes of its directories.
struct Img {
    bytes: Vec<u8>,
    dir: u32,
    big: u32,
}

/// `/file`, `/dir` holding `a`, `bb`, `ccc` (regular files), and `/big`
/// with 300 names (an htree).
fn build() -> Img {
    let dev = Arc::new(MemDevice::new(vec![0; 8 << 20]));
    let opts = MkfsOptions {
        uuid: Some([9; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        block_size: Some(BS as u32),
        ..MkfsOptions::default()
    };
    mkfs(dev.as_ref(), &opts).expect("mkfs");
    let fs = Filesystem::open(Box::new(dev.clone() as Arc<dyn BlockDevice>), OpenOptions::default()).expect("open");
    fs.create(ROOT_INO, b"file", NodeKind::Regular, ATTR).unwrap();
    let dir = fs.create(ROOT_INO, b"dir", NodeKind::Directory, ATTR).unwrap().ino;
    for n in ["a", "bb", "ccc"] {
        fs.create(dir, n.as_bytes(), NodeKind::Regular, ATTR).unwrap();
    }
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    for i in 0..300 {
        fs.create(big, format!("name-{i:04}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap();
    }
    fs.unmount().expect("unmount");
    Img {
        bytes: dev.snapshot(),
        dir,
        big,
    }
}

/// The names in directory `ino`, `.` and `..` left out.
fn names(bytes: &[u8], ino: u32) -> Vec<String> {
    let out = debugfs_out(bytes, &format!("ls -p <{ino}>"));
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| l.split('/').nth(5).map(str::to_owned))
        .filter(|n| !n.is_empty() && n != "." && n != "..")
        .collect();
    v.sort();
    v
}

/// Directory `ino`'s checksum seed.
fn seed(bytes: &[u8], ino: u32) -> u32 {
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let out = debugfs_out(bytes, &format!("stat <{ino}>"));
    let gen_field = out.split("Generation:").nth(1).expect("generation");
    let generation: u32 = gen_field.split_whitespace().next().unwrap().parse().unwrap();
    inode_csum_seed(sb.csum_seed(), ino, generation)
}

/// Repairs, and asserts the outcome is clean, repaired `code`, and
/// e2fsck agrees.
fn fix_clean(bytes: Vec<u8>, code: &str) -> Vec<u8> {
    let (after, out) = fix(bytes);
    let fixed: Vec<&str> = out
        .runs
        .iter()
        .flat_map(|r| r.findings.iter())
        .filter(|f| f.fixed)
        .map(|f| f.code.name)
        .collect();
    assert!(fixed.contains(&code), "{code} not among the repairs {fixed:?}");
    let left: Vec<_> = out
        .verdict
        .findings
        .iter()
        .map(|f| (f.code.name, f.message.clone()))
        .collect();
    assert_eq!(out.verdict.unfixed_errors(), 0, "left: {left:?}");
    e2fsck_clean(&after);
    after
}

/// Offset in `bytes` of the record named `name` in block `blk`.
fn record(bytes: &[u8], blk: usize, name: &[u8]) -> usize {
    let b = &bytes[blk * BS..(blk + 1) * BS];
    let mut pos = 0;
    while pos + 8 <= BS {
        let rec_len = usize::from(u16::from_le_bytes([b[pos + 4], b[pos + 5]]));
        let nl = usize::from(b[pos + 6]);
        if &b[pos + 8..pos + 8 + nl] == name {
            return blk * BS + pos;
        }
        assert!(
            rec_len >= 12,
            "record chain ends before '{}'",
            String::from_utf8_lossy(name)
        );
        pos += rec_len;
    }
    panic!("no record '{}'", String::from_utf8_lossy(name));
}

fn reseal(bytes: &mut [u8], blk: usize, seed: u32) {
    set_block_checksum(&mut bytes[blk * BS..(blk + 1) * BS], seed);
}

fn small_dir() -> Vec<String> {
    vec!["a".into(), "bb".into(), "ccc".into()]
}

#[test]
fn a_bad_leaf_checksum_is_recomputed() {
    let img = build();
    let mut bytes = img.bytes;
    let blk = bmap(&bytes, img.dir, 0);
    bytes[(blk + 1) * BS - 1] ^= 0x55;
    let after = fix_clean(bytes, "P2_LEAF_NODE_ONLY_CSUM_INVALID");
    assert_eq!(names(&after, img.dir), small_dir());
}

#[test]
fn a_wrong_file_type_is_set() {
    let img = build();
    let mut bytes = img.bytes;
    let s = seed(&bytes, img.dir);
    let blk = bmap(&bytes, img.dir, 0);
    let at = record(&bytes, blk, b"bb");
    bytes[at + 7] = 2;
    reseal(&mut bytes, blk, s);
    let after = fix_clean(bytes, "P2_BAD_FILETYPE");
    assert_eq!(after[at + 7], 1, "regular file type restored");
    assert_eq!(names(&after, img.dir), small_dir());
}

#[test]
fn a_record_running_past_the_block_is_cut_at_its_end() {
    let img = build();
    let mut bytes = img.bytes;
    let s = seed(&bytes, img.dir);
    let blk = bmap(&bytes, img.dir, 0);
    let at = record(&bytes, blk, b"ccc");
    let len = u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]) + 8;
    bytes[at + 4..at + 6].copy_from_slice(&len.to_le_bytes());
    reseal(&mut bytes, blk, s);
    let after = fix_clean(bytes, "P2_DIR_CORRUPTED");
    let end = (blk + 1) * BS - TAIL_SIZE;
    assert_eq!(
        usize::from(u16::from_le_bytes([after[at + 4], after[at + 5]])),
        end - at
    );
    assert_eq!(names(&after, img.dir), small_dir());
}

#[test]
fn a_missing_dotdot_names_the_root_again() {
    let img = build();
    let mut bytes = img.bytes;
    let s = seed(&bytes, img.dir);
    let blk = bmap(&bytes, img.dir, 0);
    let at = record(&bytes, blk, b"..");
    bytes[at..at + 4].fill(0);
    reseal(&mut bytes, blk, s);
    let after = fix_clean(bytes, "P2_MISSING_DOT_DOT");
    assert_eq!(u32::from_le_bytes(after[at..at + 4].try_into().unwrap()), 2);
    assert_eq!(names(&after, img.dir), small_dir());
}

#[test]
fn a_repeated_name_for_the_same_inode_is_cleared() {
    let img = build();
    let mut bytes = img.bytes;
    let s = seed(&bytes, img.dir);
    let blk = bmap(&bytes, img.dir, 0);
    let at = record(&bytes, blk, b"bb");
    // "bb" and "ccc" become two records named "bb" for bb's inode.
    let next = at + usize::from(u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]));
    let ino = bytes[at..at + 4].to_vec();
    bytes[next..next + 4].copy_from_slice(&ino);
    bytes[next + 6] = 2;
    bytes[next + 8..next + 10].copy_from_slice(b"bb");
    reseal(&mut bytes, blk, s);
    // ccc's inode is now unattached: only its entry is gone, which pass 4
    // reports; the duplicate itself must be repaired here.
    let (after, out) = fix(bytes);
    let dup = out.runs.iter().flat_map(|r| r.findings.iter());
    assert!(dup.clone().any(|f| f.code.name == "P2_DUPLICATE_DIRENT" && f.fixed));
    assert_eq!(u32::from_le_bytes(after[next..next + 4].try_into().unwrap()), 0);
    assert!(!out.verdict.findings.iter().any(|f| f.code.pass() == 2), "pass 2 clean");
    let f = temp_image(&after);
    let e2 = Command::new("e2fsck").arg("-fn").arg(f.path()).output().unwrap();
    assert!(!String::from_utf8_lossy(&e2.stdout).contains("Pass 2: Checking directory structure\nDuplicate"));
}

#[test]
fn a_bad_htree_root_hash_order_drops_the_index_and_pass_3a_rebuilds_it() {
    let img = build();
    let mut bytes = img.bytes;
    let s = seed(&bytes, img.big);
    let blk = bmap(&bytes, img.big, 0);
    let root = &mut bytes[blk * BS..(blk + 1) * BS];
    // dx_root: 32 bytes of header, count/limit, block 0 entry, then
    // (hash, block) pairs: swap the first two hashes.
    let count = usize::from(u16::from_le_bytes([root[34], root[35]]));
    assert!(count >= 3, "the test needs an htree with three leaves");
    let (h1, h2) = (40, 48);
    let a: [u8; 4] = root[h1..h1 + 4].try_into().unwrap();
    let b: [u8; 4] = root[h2..h2 + 4].try_into().unwrap();
    root[h1..h1 + 4].copy_from_slice(&b);
    root[h2..h2 + 4].copy_from_slice(&a);
    set_dx_checksum(root, BS as u32, s).unwrap();
    let after = fix_clean(bytes, "P2_HTREE_HASH_ORDER");
    let n = names(&after, img.big);
    assert_eq!(n.len(), 300);
    let dump = debugfs_out(&after, &format!("htree_dump <{}>", img.big));
    assert!(dump.contains("Root node dump"), "indexed again: {dump}");
}
