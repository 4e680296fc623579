//! htree index blocks made by e2fsprogs (and, with `--ignored` as root, by
//! the kernel): parse, checksum, exact round trip, and hash lookup landing on
//! the leaf that really holds each name.
//!
//! `mkfs.ext4 -d` writes linear directories, so the default test indexes
//! them with `e2fsck -fyD` (e2fsprogs' rehash); 1 KiB blocks make 6,000 long
//! names need a two-level tree.

mod common;

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use ext4kit_format::hash::{HashVersion, dx_hash};
use ext4kit_format::htree::{DxEntry, DxNode, DxParams, DxRoot, find, inode_csum_seed, verify_dx_checksum};
use ext4kit_format::superblock::{RawSuperblock, SUPERBLOCK_OFFSET};

/// (directory, entries, name prefix): one single-level, one two-level tree.
const DIRS: [(&str, usize, &str); 2] = [
    ("small", 2_000, "f"),
    ("big", 6_000, "entry_with_a_rather_long_name_to_fill_blocks_"),
];

fn populate(root: &Path, dirs: &[(&str, usize, &str)]) {
    for (dir, n, prefix) in dirs {
        let dir = root.join(dir);
        fs::create_dir_all(&dir).unwrap();
        for i in 0..*n {
            fs::File::create(dir.join(format!("{prefix}{i}"))).unwrap();
        }
    }
}

/// What the test needs to know about the file system.
struct Fs {
    image: Vec<u8>,
    params: DxParams,
    csum_seed: Option<u32>,
    hash_seed: [u32; 4],
    s_flags: u32,
}

fn load(img: &Path) -> Fs {
    let image = fs::read(img).unwrap();
    let sb = RawSuperblock::parse(&image[SUPERBLOCK_OFFSET as usize..]).unwrap();
    let features = sb.features();
    Fs {
        params: DxParams {
            block_size: 1024 << sb.s_log_block_size.get(),
            metadata_csum: features.metadata_csum(),
            large_dir: features.names().iter().any(|n| n == "large_dir"),
        },
        csum_seed: features.metadata_csum().then(|| sb.csum_seed()),
        hash_seed: sb.s_hash_seed.map(|w| w.get()),
        s_flags: sb.s_flags.get(),
        image,
    }
}

/// Inode number and generation from `debugfs stat`.
fn inode_and_generation(debugfs: &Path, img: &Path, dir: &str) -> (u32, u32) {
    let stat = common::debugfs(debugfs, img, &format!("stat /{dir}"));
    let field = |key: &str| -> u32 {
        let at = stat.find(key).unwrap_or_else(|| panic!("{key} in {stat}")) + key.len();
        let digits: String = stat[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    (field("Inode:"), field("Generation:"))
}

/// The directory's blocks, in logical order (`debugfs blocks`).
fn dir_blocks(fs: &Fs, debugfs: &Path, img: &Path, dir: &str) -> Vec<Vec<u8>> {
    let bs = fs.params.block_size as usize;
    common::debugfs(debugfs, img, &format!("blocks /{dir}"))
        .split_whitespace()
        .map(|b| {
            let start = b.parse::<usize>().unwrap() * bs;
            fs.image[start..start + bs].to_vec()
        })
        .collect()
}

/// Names in a leaf block: (inode u32, rec_len u16, name_len u8, type u8, name).
fn leaf_names(block: &[u8]) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    let mut off = 0;
    while off + 8 <= block.len() {
        let inode = u32::from_le_bytes(block[off..off + 4].try_into().unwrap());
        let rec_len = usize::from(u16::from_le_bytes([block[off + 4], block[off + 5]]));
        let name_len = usize::from(block[off + 6]);
        if inode != 0 && name_len != 0 {
            names.push(block[off + 8..off + 8 + name_len].to_vec());
        }
        if rec_len < 8 {
            break;
        }
        off += rec_len;
    }
    names
}

/// How one index block is re-encoded: into a zeroed block, or over a buffer.
type Encode<'a> = &'a dyn Fn(&mut [u8]);

/// Checks an index block: its checksum, that encoding its view over the
/// original leaves it byte-identical, and that a fresh encoding (zeroed
/// slack) matches on every byte the view describes and, where the original's
/// unused slots are zero too, on every byte.
fn check_index_block(seed: Option<u32>, block: &[u8], encode: Encode<'_>, count_end: usize, what: &str) {
    if let Some(seed) = seed {
        verify_dx_checksum(block, block.len() as u32, seed).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    let mut over = block.to_vec();
    encode(&mut over);
    assert_eq!(over, block, "{what}: encode over the original");
    let mut fresh = vec![0u8; block.len()];
    encode(&mut fresh);
    let tail = block.len() - if seed.is_some() { 8 } else { 0 };
    assert_eq!(fresh[..count_end], block[..count_end], "{what}: header and entries");
    assert_eq!(fresh[tail..], block[tail..], "{what}: tail");
    if block[count_end..tail].iter().all(|&b| b == 0) {
        assert_eq!(fresh, block, "{what}: exact round trip");
    } else {
        eprintln!("{what}: unused entry slots hold stale bytes; compared the described ones");
    }
}

/// Parses the index of `/dir`, checks every index block, then checks that
/// hash lookup finds every name in the leaf that holds it. Returns the depth.
fn check_dir(fs: &Fs, debugfs: &Path, img: &Path, dir: &str) -> u8 {
    let (ino, generation) = inode_and_generation(debugfs, img, dir);
    let seed = fs.csum_seed.map(|s| inode_csum_seed(s, ino, generation));
    let blocks = dir_blocks(fs, debugfs, img, dir);
    let p = fs.params;
    let root = DxRoot::parse(&blocks[0], &p).unwrap_or_else(|e| panic!("{dir}: {e}"));
    let enc = |buf: &mut [u8]| root.encode(buf, p.block_size).unwrap();
    let used = 32 + 8 * root.entries.len();
    check_index_block(seed, &blocks[0], &enc, used, "root");

    // Map each leaf logical block to the index path that reaches it.
    let mut nodes: HashMap<u32, Vec<DxEntry>> = HashMap::new();
    if root.indirect_levels() == 1 {
        for e in &root.entries {
            let raw = &blocks[e.block as usize];
            let node = DxNode::parse(raw, &p).unwrap_or_else(|err| panic!("node {}: {err}", e.block));
            let enc = |buf: &mut [u8]| node.encode(buf, p.block_size).unwrap();
            check_index_block(seed, raw, &enc, 8 + 8 * node.entries.len(), "node");
            nodes.insert(e.block, node.entries);
        }
    }
    let version = HashVersion::effective(root.header.info.hash_version, fs.s_flags).unwrap();
    let mut checked = 0;
    let index_blocks: Vec<u32> = nodes.keys().copied().chain([0]).collect();
    for (lblk, block) in blocks.iter().enumerate() {
        if index_blocks.contains(&(lblk as u32)) {
            continue;
        }
        for name in leaf_names(block) {
            let hash = dx_hash(&name, version, &fs.hash_seed).unwrap().major;
            let mut leaf = root.entries[find(&root.entries, hash)].block;
            if let Some(entries) = nodes.get(&leaf) {
                leaf = entries[find(entries, hash)].block;
            }
            assert_eq!(leaf as usize, lblk, "{dir}: {}", String::from_utf8_lossy(&name));
            checked += 1;
        }
    }
    let expected = DIRS.iter().find(|d| d.0 == dir).map_or(0, |d| d.1);
    assert!(checked >= expected, "{dir}: only {checked} names found");
    confirm_with_debugfs(debugfs, img, dir, &root);
    eprintln!(
        "/{dir}: indirect_levels {}, {} index nodes, {checked} names looked up, csum {}",
        root.indirect_levels(),
        nodes.len(),
        seed.is_some()
    );
    root.indirect_levels()
}

/// `debugfs htree` agrees on depth and on the root's entries.
fn confirm_with_debugfs(debugfs: &Path, img: &Path, dir: &str, root: &DxRoot) {
    let dump = common::debugfs(debugfs, img, &format!("htree /{dir}"));
    let levels = format!("Indirect levels: {}", root.indirect_levels());
    assert!(dump.contains(&levels), "{dir}: {levels} not in debugfs dump");
    for (i, e) in root.entries.iter().enumerate() {
        let line = format!("Entry #{i}: Hash 0x{:08x}, block {}", e.hash, e.block);
        assert!(dump.contains(&line), "{dir}: `{line}` not in debugfs dump");
    }
}

fn build_and_check(features: &[&str]) {
    let Some(tools) = common::tools(&["mkfs.ext4", "debugfs", "e2fsck"]) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    populate(&src, &DIRS);
    let img = tmp.path().join("htree.img");
    let mut args = vec!["-b", "1024"];
    args.extend_from_slice(features);
    common::mkfs(&tools[0], &img, &args, Some(&src), "64M");
    // Exit status 1 means "file system was modified" (the rehash), not failure.
    let status = Command::new(&tools[2]).arg("-fyD").arg(&img).output().unwrap();
    assert!(matches!(status.status.code(), Some(0 | 1)), "e2fsck -fyD: {status:?}");
    let fs = load(&img);
    assert_eq!(fs.params.metadata_csum, features.is_empty());
    assert_eq!(check_dir(&fs, &tools[1], &img, "small"), 0);
    assert_eq!(check_dir(&fs, &tools[1], &img, "big"), 1);
}

#[test]
fn e2fsprogs_htree_with_metadata_csum() {
    build_and_check(&[]);
}

#[test]
fn e2fsprogs_htree_without_metadata_csum() {
    build_and_check(&["-O", "^metadata_csum"]);
}

/// Kernel-made trees: mounts a loop image, so it needs root and loop devices.
#[test]
fn kernel_htree_with_metadata_csum() {
    if !rustix::process::geteuid().is_root() {
        ext4kit_testkit::skipped!("kernel_htree_with_metadata_csum needs root for a loop mount");
        return;
    }
    let Some(tools) = common::tools(&["mkfs.ext4", "debugfs", "mount", "umount"]) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("kernel.img");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    common::mkfs(&tools[0], &img, &["-b", "1024"], None, "64M");
    common::run(Command::new(&tools[2]).arg("-o").arg("loop").arg(&img).arg(&mnt));
    populate(&mnt, &DIRS);
    common::run(Command::new(&tools[3]).arg(&mnt));
    let fs = load(&img);
    assert_eq!(check_dir(&fs, &tools[1], &img, "small"), 0);
    assert_eq!(check_dir(&fs, &tools[1], &img, "big"), 1);
}
