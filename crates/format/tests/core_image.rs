//! Superblocks, group descriptors, bitmaps, inodes, extent nodes and linear
//! directory blocks of mke2fs-made images: every one parses, its checksum
//! verifies, and encoding what was parsed gives back the same bytes.

mod e2tools;

use std::path::Path;

use ext4kit_format::dir_entry::{self, DirEntryIter};
use ext4kit_format::extent::{self, encode_node, parse_node};
use ext4kit_format::group_desc::{RawGroupDesc, bitmap_checksum};
use ext4kit_format::inode::{RawInode, verify_inode_checksum};
use ext4kit_format::superblock::{Geometry, RawSuperblock};

use e2tools::{have_tools, mkfs, read_at, read_block};

const CASES: &[&[&str]] = &[
    &["-b", "4096"],
    &["-b", "1024"],
    &["-b", "4096", "-O", "^metadata_csum,uninit_bg"],
    &["-b", "4096", "-O", "^64bit"],
    &["-b", "4096", "-O", "metadata_csum_seed,orphan_file"],
    &["-b", "2048", "-O", "64bit,meta_bg,^resize_inode"],
    &["-b", "4096", "-I", "128"],
    &["-t", "ext2", "-b", "1024", "-O", "^dir_index"],
    &["-b", "4096", "-O", "sparse_super2"],
];

fn source(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..300 {
        std::fs::write(src.join(format!("sub/f{i}")), vec![i as u8; i * 37]).unwrap();
    }
    std::fs::write(src.join("big"), vec![7u8; 3 << 20]).unwrap();
    src
}

#[test]
fn core_structures_round_trip_and_verify() {
    if !have_tools("core_structures_round_trip_and_verify", &["mkfs.ext4", "debugfs"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path());
    for args in CASES {
        let img = dir.path().join("img");
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["-d", src.to_str().unwrap()]);
        mkfs(&img, &full, "64M");
        check_image(&img, &format!("{args:?}"));
    }
}

fn check_image(img: &Path, what: &str) {
    let buf = read_at(img, 1024, 1024);
    let sb = RawSuperblock::parse(&buf).unwrap();
    assert_eq!(&sb.encode()[..], &buf[..], "{what}: superblock round trip");
    sb.verify_checksum().unwrap();
    let g = Geometry::from_superblock(&sb).unwrap();
    let seed = sb.csum_seed();
    let bs = g.block_size as u64;
    let ds = usize::from(g.desc_size);
    // Descriptors: without meta_bg they follow the superblock's block.
    let meta_bg = g
        .features
        .incompat
        .contains(ext4kit_format::features::IncompatFeatures::META_BG);
    let first_desc_block = u64::from(g.first_data_block) + 1;
    let groups = if meta_bg {
        g.descs_per_block().min(g.group_count)
    } else {
        g.group_count
    };
    let table = read_at(img, first_desc_block * bs, groups as usize * ds);
    for (i, raw) in table.chunks_exact(ds).enumerate() {
        let d = RawGroupDesc::parse(raw, ds).unwrap();
        let mut again = vec![0u8; ds];
        d.encode_into(&mut again);
        assert_eq!(again, raw, "{what}: group {i} round trip");
        d.verify_checksum(&g.features, seed, &sb.s_uuid, i as u32, ds)
            .unwrap_or_else(|e| panic!("{what}: group {i}: {e}"));
        if g.features.metadata_csum() {
            check_bitmaps(img, &g, &d, seed, what, i);
        }
    }
    check_inodes(img, &g, seed, &RawGroupDesc::parse(&table, ds).unwrap(), what);
}

fn check_bitmaps(img: &Path, g: &Geometry, d: &RawGroupDesc, seed: u32, what: &str, i: usize) {
    use ext4kit_format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
    if d.flags() & BG_BLOCK_UNINIT == 0 {
        let bb = read_block(img, d.block_bitmap());
        let c = bitmap_checksum(seed, &bb, g.blocks_per_group as usize / 8, g.desc_size);
        assert_eq!(c, d.block_bitmap_csum(), "{what}: group {i} block bitmap checksum");
    }
    if d.flags() & BG_INODE_UNINIT == 0 {
        let ib = read_block(img, d.inode_bitmap());
        let c = bitmap_checksum(seed, &ib, g.inodes_per_group as usize / 8, g.desc_size);
        assert_eq!(c, d.inode_bitmap_csum(), "{what}: group {i} inode bitmap checksum");
    }
}

/// Every used inode of group 0: parse, checksum, encode; extent roots and
/// tree blocks round trip; directory blocks iterate and verify.
fn check_inodes(img: &Path, g: &Geometry, seed: u32, d0: &RawGroupDesc, what: &str) {
    let isz = usize::from(g.inode_size);
    let count = g.inodes_per_group as usize - d0.itable_unused() as usize;
    let table = read_at(img, d0.inode_table() * u64::from(g.block_size), count * isz);
    for (i, rec) in table.chunks_exact(isz).enumerate() {
        let ino = i as u32 + 1;
        let raw = RawInode::parse(rec, isz).unwrap();
        if raw.i_mode.get() == 0 || raw.links() == 0 {
            continue;
        }
        let mut again = rec.to_vec();
        again[..].fill(0);
        again[128.min(isz)..].copy_from_slice(&rec[128.min(isz)..]);
        raw.encode_into(&mut again);
        assert_eq!(again, rec, "{what}: inode {ino} round trip");
        if g.features.metadata_csum() {
            verify_inode_checksum(rec, seed, ino).unwrap_or_else(|e| panic!("{what}: inode {ino}: {e}"));
        }
        if raw.has_flag(ext4kit_format::inode::flags::EXTENTS) {
            check_extents(img, g, &raw, seed, ino, what);
        }
    }
}

fn check_extents(img: &Path, g: &Geometry, raw: &RawInode, seed: u32, ino: u32, what: &str) {
    let root = parse_node(&raw.i_block, true).unwrap_or_else(|e| panic!("{what}: inode {ino}: {e}"));
    let mut again = raw.i_block;
    encode_node(&root, &mut again);
    assert_eq!(again, raw.i_block, "{what}: inode {ino} extent root round trip");
    let iseed = raw.csum_seed(seed, ino);
    let is_dir = raw.file_type() == Some(ext4kit_format::inode::FileType::Directory);
    if let extent::NodeEntries::Index(idx) = &root.entries {
        for child in idx {
            let blk = read_block(img, child.child);
            let node = parse_node(&blk, false).unwrap();
            let mut again = blk.clone();
            encode_node(&node, &mut again);
            assert_eq!(
                again[..12 + 12 * usize::from(node.header.eh_max.get())],
                blk[..12 + 12 * usize::from(node.header.eh_max.get())]
            );
            if g.features.metadata_csum() {
                extent::verify_block_checksum(&blk, iseed).unwrap();
            }
        }
    }
    if let (true, extent::NodeEntries::Leaf(v)) = (is_dir, &root.entries) {
        for e in v {
            for b in 0..u64::from(e.len) {
                let blk = read_block(img, e.physical + b);
                let tail = dir_entry::has_tail(&blk);
                assert_eq!(tail, g.features.metadata_csum(), "{what}: dir {ino} tail presence");
                if tail {
                    dir_entry::verify_block_checksum(&blk, iseed).unwrap();
                }
                let used = if tail {
                    blk.len() - dir_entry::TAIL_SIZE
                } else {
                    blk.len()
                };
                let mut n = 0;
                for r in DirEntryIter::new(&blk[..used], blk.len(), true) {
                    r.unwrap_or_else(|e| panic!("{what}: dir {ino} block {b}: {e}"));
                    n += 1;
                }
                assert!(n >= 1, "{what}: dir {ino} block {b} has no entries");
            }
        }
    }
}
