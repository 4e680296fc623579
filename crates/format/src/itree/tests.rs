use super::*;
use crate::hash::HashVersion;
use crate::htree::{DxParams, DxRoot, root_limit, set_dx_checksum, verify_dx_checksum};

fn ctx(block: u64) -> NodeContext {
    NodeContext {
        block_size: 1024,
        dir_ino: 12,
        inode_seed: 0xdead_beef,
        block,
    }
}

fn leaf(ino: u32, hash: u32, name: &str) -> LeafEntry {
    LeafEntry {
        ino,
        hash,
        file_type: 1,
        name: name.as_bytes().to_vec(),
    }
}

#[test]
fn leaf_round_trips_and_checksum_binds_block_and_owner() {
    let node = Node::Leaf(vec![leaf(11, 4, "a"), leaf(11, 8, "bcdefgh"), leaf(40, 2, "x")]);
    let buf = node.encode(&ctx(77)).unwrap();
    assert_eq!(Node::parse(&buf, &ctx(77)).unwrap(), node);
    assert_eq!(buf[9], 0, "a nearly empty leaf is in class 0");
    let moved = Node::parse(&buf, &ctx(78)).unwrap_err();
    assert_eq!(moved.field, "checksum");
    let other = NodeContext { dir_ino: 13, ..ctx(77) };
    assert!(Node::parse(&buf, &other).is_err());
}

#[test]
fn index_round_trips_with_64_bit_blocks() {
    let entries = vec![
        IndexEntry {
            key: 0,
            block: (1 << 63) + (1 << 40) + 5,
            fullness: 3,
        },
        IndexEntry {
            key: key(90, 6),
            block: 9,
            fullness: 1,
        },
    ];
    let node = Node::Index { level: 2, entries };
    let buf = node.encode(&ctx(5)).unwrap();
    assert_eq!(Node::parse(&buf, &ctx(5)).unwrap(), node);
    let bad = Node::Index {
        level: 1,
        entries: vec![IndexEntry {
            key: 0,
            block: 0,
            fullness: 0,
        }],
    };
    assert!(bad.encode(&ctx(5)).is_err());
}

#[test]
fn a_node_of_another_layout_version_is_refused_by_name() {
    let node = Node::Leaf(vec![leaf(11, 4, "a")]);
    let mut buf = node.encode(&ctx(3)).unwrap();
    assert_eq!(buf[20], NODE_VERSION);
    buf[20] = 0;
    let crc = node_checksum(&buf, &ctx(3)).unwrap();
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
    let err = Node::parse(&buf, &ctx(3)).unwrap_err();
    assert_eq!(err.field, "version", "{err}");
}

#[test]
fn corrupt_nodes_are_errors_naming_the_field() {
    let node = Node::Leaf(vec![leaf(11, 4, "a"), leaf(12, 4, "b")]);
    let good = node.encode(&ctx(3)).unwrap();
    let reseal = |mut b: Vec<u8>| {
        let crc = node_checksum(&b, &ctx(3)).unwrap();
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let mut b = good.clone();
    b[0] ^= 1;
    assert_eq!(Node::parse(&b, &ctx(3)).unwrap_err().field, "magic");
    let mut b = good.clone();
    b[12..16].copy_from_slice(&5000u32.to_le_bytes());
    assert_eq!(Node::parse(&reseal(b), &ctx(3)).unwrap_err().field, "used");
    let mut b = good.clone();
    b[HEADER_SIZE..HEADER_SIZE + 4].copy_from_slice(&13u32.to_le_bytes());
    assert_eq!(Node::parse(&reseal(b), &ctx(3)).unwrap_err().field, "key");
    let mut b = good.clone();
    b[HEADER_SIZE + 8] = 200;
    assert!(Node::parse(&reseal(b), &ctx(3)).is_err());
    let mut b = good;
    b[8] = MAX_LEVELS + 1;
    assert_eq!(Node::parse(&reseal(b), &ctx(3)).unwrap_err().field, "level");
}

#[test]
fn fullness_classes_are_quarters() {
    assert_eq!(fullness_class(0, 100), 0);
    assert_eq!(fullness_class(24, 100), 0);
    assert_eq!(fullness_class(25, 100), 1);
    assert_eq!(fullness_class(74, 100), 2);
    assert_eq!(fullness_class(75, 100), 3);
    assert_eq!(fullness_class(100, 100), 3);
}

#[test]
fn link_sits_in_slots_the_htree_checksum_does_not_cover() {
    let params = DxParams {
        block_size: 1024,
        metadata_csum: true,
        large_dir: false,
    };
    let root = DxRoot::new(12, 2, HashVersion::HalfMd4, 1, &params);
    let mut buf = root.to_block(1024).unwrap();
    set_dx_checksum(&mut buf, 1024, 7).unwrap();
    assert_eq!(read_link(&buf, 1024, true).unwrap(), None);
    let link = Link {
        root: 1 << 33,
        levels: 2,
    };
    write_link(&mut buf, 1024, true, Some(link)).unwrap();
    verify_dx_checksum(&buf, 1024, 7).unwrap();
    assert_eq!(DxRoot::parse(&buf, &params).unwrap().entries, root.entries);
    assert_eq!(read_link(&buf, 1024, true).unwrap(), Some(link));
    assert_eq!(
        link_offset(1024, true) + LINK_SIZE,
        32 + usize::from(root_limit(1024, true)) * 8
    );
    write_link(&mut buf, 1024, true, None).unwrap();
    assert_eq!(read_link(&buf, 1024, true).unwrap(), None);
}

#[test]
fn raw_edits_match_the_decoded_form() {
    let c = ctx(9);
    let mut entries = vec![leaf(11, 4, "a"), leaf(11, 8, "bb"), leaf(40, 2, "x")];
    let mut buf = Node::Leaf(entries.clone()).encode(&c).unwrap();
    let new = leaf(20, 6, "middle");
    assert_eq!(raw::leaf_insert(&mut buf, &c, &new).unwrap(), Some(0));
    entries.insert(2, new);
    assert_eq!(Node::parse(&buf, &c).unwrap(), Node::Leaf(entries.clone()));
    let gone = raw::leaf_remove(&mut buf, &c, key(11, 8), b"bb").unwrap();
    assert_eq!(gone, Some((0, 3)));
    entries.remove(1);
    assert_eq!(Node::parse(&buf, &c).unwrap(), Node::Leaf(entries.clone()));
    assert_eq!(raw::leaf_remove(&mut buf, &c, key(11, 8), b"bb").unwrap(), None);
    let big = leaf(50, 2, &"n".repeat(255));
    let mut full = Node::Leaf((0..3).map(|i| leaf(60 + i, 0, &"f".repeat(255))).collect())
        .encode(&c)
        .unwrap();
    let before = full.clone();
    assert_eq!(raw::leaf_insert(&mut full, &c, &big).unwrap(), None);
    assert_eq!(full, before, "a refused insert leaves the block as it was");
}

#[test]
fn raw_index_lookup_and_class_update() {
    let c = ctx(4);
    let entries = vec![
        IndexEntry {
            key: 0,
            block: 100,
            fullness: 1,
        },
        IndexEntry {
            key: key(50, 0),
            block: 200,
            fullness: 2,
        },
        IndexEntry {
            key: key(90, 0),
            block: 300,
            fullness: 3,
        },
    ];
    let mut buf = Node::Index { level: 1, entries }.encode(&c).unwrap();
    assert_eq!(raw::index_child(&buf, &c, 1, key(10, 0)).unwrap(), (0, 100, 1));
    assert_eq!(raw::index_child(&buf, &c, 1, key(50, 0)).unwrap(), (1, 200, 2));
    assert_eq!(raw::index_child(&buf, &c, 1, u64::MAX).unwrap(), (2, 300, 3));
    raw::set_child_class(&mut buf, &c, 1, 0).unwrap();
    assert_eq!(raw::index_child(&buf, &c, 1, key(60, 0)).unwrap(), (1, 200, 0));
    assert!(raw::index_child(&buf, &c, 2, 0).is_err(), "the level is checked");
    buf[HEADER_SIZE + 20] ^= 1;
    assert!(
        raw::index_child(&buf, &c, 1, 0).is_err(),
        "a changed byte fails the checksum"
    );
}
