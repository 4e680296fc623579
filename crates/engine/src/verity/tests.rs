//! The cache of proven tree blocks: filled by a read, used by the next,
//! dropped when the inode is freed, bounded; a data block is still checked
//! against a cached block on every read.

use std::collections::HashMap;

use super::cache::MAX_BYTES;
use super::read::Proven;
use crate::device::MemDevice;
use crate::mkfs::{MkfsOptions, mkfs};
use crate::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// A verity file of `len` bytes on a fresh 1 KiB-block image.
fn verity_file(len: usize) -> (Filesystem, u32, Vec<u8>) {
    let dev = MemDevice::new(vec![0; 32 << 20]);
    let opts = MkfsOptions {
        block_size: Some(1024),
        feature_edits: vec![("verity".into(), true)],
        ..MkfsOptions::default()
    };
    mkfs(&dev, &opts).unwrap();
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let ino = fs.create(ROOT_INO, b"v", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(ino, 0, &data).unwrap();
    fs.enable_verity(ino, &super::VerityOptions::default()).unwrap();
    (fs, ino, data)
}

fn read_all(fs: &Filesystem, ino: u32, chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        let n = fs.read_file_at(ino, out.len() as u64, &mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn reads_keep_the_proven_tree_and_unlink_drops_it() {
    // 600000 bytes in 1 KiB blocks, 32 hashes a block: levels of 19 and 1.
    let (fs, ino, data) = verity_file(600_000);
    assert_eq!(fs.verity_cache.bytes(), 0);
    assert_eq!(read_all(&fs, ino, 5000), data);
    assert_eq!(fs.verity_cache.bytes(), 20 * 1024, "every tree block kept once");
    assert_eq!(read_all(&fs, ino, 700), data);
    assert_eq!(fs.verity_cache.bytes(), 20 * 1024);
    fs.unlink(ROOT_INO, b"v").unwrap();
    assert_eq!(fs.verity_cache.bytes(), 0, "freed with the inode");
}

#[test]
fn a_changed_data_block_fails_against_a_cached_tree_block() {
    let (fs, ino, data) = verity_file(600_000);
    assert_eq!(read_all(&fs, ino, 65536), data);
    let inode = fs.inode(ino).unwrap();
    let tree = fs.verity_tree_cached(&inode).unwrap();
    let mut proven = Proven::new(&fs, &inode);
    let mut block = data[3 * 1024..4 * 1024].to_vec();
    fs.verify_block(&inode, &tree, 3, &block, &mut proven).unwrap();
    assert!(proven.local.is_empty(), "the path came from the cache");
    block[100] ^= 0x5a;
    let e = fs.verify_block(&inode, &tree, 3, &block, &mut proven).unwrap_err();
    assert!(matches!(e, Error::VerityMismatch(_)), "{e}");
}

#[test]
fn the_cache_stays_within_its_budget() {
    let (fs, ino, _) = verity_file(4096);
    let generation = fs.inode(ino).unwrap().raw.i_generation.get();
    let c = &fs.verity_cache;
    let tree = fs.verity_tree_cached(&fs.inode(ino).unwrap()).unwrap();
    let block = |n: u64| (n, std::sync::Arc::<[u8]>::from(vec![0u8; 1024]));
    for other in 100..110u32 {
        c.put_tree(other, 0, tree.clone());
        let blocks: HashMap<_, _> = (0..(MAX_BYTES / 1024 / 4) as u64).map(block).collect();
        c.put_blocks(other, 0, blocks);
        assert!(c.bytes() <= MAX_BYTES);
    }
    c.put_blocks(ino, generation, (0..4).map(block).collect());
    assert!(c.block(ino, generation, 3).is_some());
    assert!(c.block(ino, generation + 1, 3).is_none(), "another generation misses");
    assert!(c.bytes() <= MAX_BYTES);
}
