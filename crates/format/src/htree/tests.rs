//! Hand-built and hand-corrupted index blocks. Blocks made by mke2fs/e2fsck
//! and the kernel are checked in `crates/format/tests/htree_image.rs`.

use super::*;
use crate::error::FormatErrorKind;

const P: DxParams = DxParams {
    block_size: 1024,
    metadata_csum: true,
    large_dir: false,
};

fn entries(n: u32) -> Vec<DxEntry> {
    (0..n)
        .map(|i| DxEntry {
            hash: i.wrapping_mul(0x0100_0000),
            block: i + 1,
        })
        .collect()
}

fn root_block(n: u32) -> Vec<u8> {
    let mut root = DxRoot::new(12, 2, HashVersion::HalfMd4, 1, &P);
    root.entries = entries(n);
    root.to_block(P.block_size).unwrap()
}

fn assert_invalid(err: FormatError, structure: &str, field: &str, offset: usize) {
    assert_eq!((err.structure, err.field, err.offset), (structure, field, offset));
    assert!(matches!(err.kind, FormatErrorKind::Invalid { .. }), "{err}");
}

#[test]
fn limits_match_the_kernel_formulas() {
    assert_eq!(root_limit(1024, false), 124);
    assert_eq!(root_limit(1024, true), 123);
    assert_eq!(node_limit(1024, false), 127);
    assert_eq!(node_limit(1024, true), 126);
    assert_eq!(root_limit(4096, true), 507);
    assert_eq!(node_limit(65536, false), 8191);
}

#[test]
fn built_root_parses_back() {
    let block = root_block(5);
    let root = DxRoot::parse(&block, &P).unwrap();
    assert_eq!(root.entries, entries(5));
    assert_eq!(root.limit, 123);
    assert_eq!(root.hash_version(), Some(HashVersion::HalfMd4));
    assert_eq!(root.indirect_levels(), 0);
    assert_eq!(&block[..12], &[12, 0, 0, 0, 12, 0, 1, 2, b'.', 0, 0, 0]);
    assert_eq!(root.to_block(1024).unwrap(), block);
}

#[test]
fn built_node_parses_back_at_64k() {
    let params = DxParams {
        block_size: 65536,
        metadata_csum: false,
        large_dir: true,
    };
    let node = DxNode::new(entries(3), &params);
    let block = node.to_block(65536).unwrap();
    assert_eq!(&block[4..6], &[0xff, 0xff]); // 65536 stored as EXT4_MAX_REC_LEN
    let back = DxNode::parse(&block, &params).unwrap();
    assert_eq!((back.entries, back.tail), (entries(3), None));
}

#[test]
fn count_above_limit_is_rejected() {
    let mut block = root_block(2);
    block[34..36].copy_from_slice(&124u16.to_le_bytes());
    assert_invalid(DxRoot::parse(&block, &P).unwrap_err(), "dx_countlimit", "count", 34);
    block[34..36].copy_from_slice(&0u16.to_le_bytes());
    assert_invalid(DxRoot::parse(&block, &P).unwrap_err(), "dx_countlimit", "count", 34);
}

#[test]
fn limit_must_match_block_size_and_csum() {
    let block = root_block(2);
    let no_csum = DxParams {
        metadata_csum: false,
        ..P
    };
    let err = DxRoot::parse(&block, &no_csum).unwrap_err();
    assert_invalid(err, "dx_countlimit", "limit", 32);
}

#[test]
fn truncated_buffer_is_an_error() {
    let block = root_block(2);
    let err = DxRoot::parse(&block[..1000], &P).unwrap_err();
    assert_eq!(err.structure, "dx_root");
    assert_eq!(err.kind, FormatErrorKind::Truncated { need: 1024, have: 1000 });
    assert!(DxNode::parse(&[], &P).is_err());
    assert!(dx_checksum(&block[..20], 1024, 0).is_err());
}

#[test]
fn info_fields_are_checked() {
    let cases: [(usize, u8, &str); 5] = [
        (24, 1, "reserved_zero"),
        (28, 3, "hash_version"),
        (29, 16, "info_length"),
        (30, 2, "indirect_levels"),
        (31, 1, "unused_flags"),
    ];
    for (at, value, field) in cases {
        let mut block = root_block(2);
        block[at] = value;
        assert_invalid(DxRoot::parse(&block, &P).unwrap_err(), "dx_root_info", field, at);
    }
}

#[test]
fn indirect_levels_follow_large_dir() {
    let mut block = root_block(2);
    block[30] = 2;
    let large = DxParams { large_dir: true, ..P };
    assert_eq!(DxRoot::parse(&block, &large).unwrap().indirect_levels(), 2);
    block[30] = 3;
    let err = DxRoot::parse(&block, &large).unwrap_err();
    assert_invalid(err, "dx_root_info", "indirect_levels", 30);
}

#[test]
fn fake_dirents_are_checked() {
    let mut block = root_block(2);
    block[4] = 16;
    assert_invalid(DxRoot::parse(&block, &P).unwrap_err(), "dx_root", "rec_len", 4);
    let mut block = root_block(2);
    block[16] = 0;
    assert_invalid(DxRoot::parse(&block, &P).unwrap_err(), "dx_root", "rec_len", 16);
    // A root is not a node.
    assert_invalid(DxNode::parse(&root_block(2), &P).unwrap_err(), "dx_node", "rec_len", 4);
    let err = DxRoot::parse(&[0u8; 1024], &P).unwrap_err();
    assert_invalid(err, "dx_root", "rec_len", 4);
    let err = DxRoot::parse(&[0u8; 1000], &DxParams { block_size: 1000, ..P });
    assert_invalid(err.unwrap_err(), "dx_root", "block_size", 0);
}

#[test]
fn find_picks_the_last_entry_not_above_the_hash() {
    let e = entries(4); // hashes 0, 0x01000000, 0x02000000, 0x03000000
    assert_eq!(find(&e, 0), 0);
    assert_eq!(find(&e, 0x00ff_ffff), 0);
    assert_eq!(find(&e, 0x0100_0000), 1);
    assert_eq!(find(&e, 0x0250_0000), 2);
    assert_eq!(find(&e, u32::MAX), 3);
    assert_eq!(find(&e[..1], u32::MAX), 0);
    assert_eq!(find(&[], 7), 0);
    // Entry 0's stored hash never matters.
    let mut odd = e.clone();
    odd[0].hash = u32::MAX;
    assert_eq!(find(&odd, 5), 0);
}

#[test]
fn checksum_set_then_verify_and_detects_changes() {
    let seed = inode_csum_seed(0x1234_5678, 12, 0);
    let mut block = root_block(3);
    set_dx_checksum(&mut block, 1024, seed).unwrap();
    verify_dx_checksum(&block, 1024, seed).unwrap();
    // Bytes beyond the used entries are not covered...
    block[200] ^= 0xff;
    verify_dx_checksum(&block, 1024, seed).unwrap();
    // ...but the used entries are.
    block[45] ^= 1;
    let err = verify_dx_checksum(&block, 1024, seed).unwrap_err();
    assert!(err.is_checksum());
    assert_eq!((err.structure, err.field, err.offset), ("dx_tail", "dt_checksum", 1020));
}

#[test]
fn checksum_needs_room_for_the_tail() {
    let no_csum = DxParams {
        metadata_csum: false,
        ..P
    };
    let block = DxRoot::new(12, 2, HashVersion::Tea, 1, &no_csum)
        .to_block(1024)
        .unwrap();
    let err = dx_checksum(&block, 1024, 0).unwrap_err();
    assert_invalid(err, "dx_countlimit", "limit", 32);
}

#[test]
fn encode_rejects_overfull_views() {
    let mut root = DxRoot::new(12, 2, HashVersion::Legacy, 1, &P);
    root.entries = entries(124);
    let err = root.to_block(1024).unwrap_err();
    assert_invalid(err, "dx_countlimit", "count", 34);
    root.entries.clear();
    assert!(root.to_block(1024).is_err());
}

#[test]
fn no_panic_on_garbage() {
    let mut block = vec![0u8; 1024];
    for seed in 0u32..2000 {
        let mut x = seed.wrapping_mul(2_654_435_761);
        for b in block.iter_mut().take(64) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x.to_le_bytes()[0];
        }
        // Keep the fake dirents plausible half of the time.
        if seed % 2 == 0 {
            block[4..6].copy_from_slice(&12u16.to_le_bytes());
            block[16..18].copy_from_slice(&1012u16.to_le_bytes());
        }
        let _ = DxRoot::parse(&block, &P);
        let _ = DxNode::parse(&block, &P);
        let _ = dx_checksum(&block, 1024, seed);
    }
}
