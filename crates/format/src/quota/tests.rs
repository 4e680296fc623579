use std::collections::BTreeMap;

use super::*;

fn usage(id: u32, space: u64, inodes: u64) -> Dquot {
    Dquot {
        id,
        curspace: space,
        curinodes: inodes,
        ..Dquot::default()
    }
}

fn reader(f: &[u8]) -> impl FnMut(u32) -> Option<Vec<u8>> + '_ {
    move |q| f.get(q as usize * QBLK..(q as usize + 1) * QBLK).map(<[u8]>::to_vec)
}

#[test]
fn build_then_read_round_trips() {
    let info = Info {
        bgrace: 3600,
        ..Info::new(QuotaType::Group)
    };
    let mut es = BTreeMap::new();
    for id in [0u32, 1000, 1001, 70_000, 0x0102_0304] {
        es.insert(id, usage(id, 4096 * u64::from(id % 7 + 1), 1));
    }
    es.insert(
        5,
        Dquot {
            id: 5,
            bhardlimit: 100,
            ..Dquot::default()
        },
    );
    let f = build(&info, &es);
    let head = Info::parse(&f[..QBLK], QuotaType::Group).expect("header");
    assert_eq!(head.bgrace, 3600);
    assert_eq!(head.blocks as usize, f.len() / QBLK);
    let got: BTreeMap<u32, Dquot> = read_entries(&head, reader(&f))
        .expect("tree")
        .into_iter()
        .map(|l| (l.dquot.id, l.dquot))
        .collect();
    assert_eq!(got, es);
    assert!(Info::parse(&f[..QBLK], QuotaType::User).is_err(), "magic is per type");
}

#[test]
fn tree_has_four_levels_and_shared_data_blocks() {
    let mut es = BTreeMap::new();
    for id in [0u32, 1000, 1001, 70_000] {
        es.insert(id, usage(id, 4096, 1));
    }
    let f = build(&Info::new(QuotaType::User), &es);
    let blk = |q: usize| &f[q * QBLK..(q + 1) * QBLK];
    // Header, root, then for id 0 L1, L2, L3 and a data block (the data
    // block last, as mke2fs and e2fsck lay it out); 1000 and 1001 share
    // L1, L2 and the data block (new L3); 70000 needs a new L2 and L3.
    assert_eq!(f.len() / QBLK, 9);
    assert_eq!(le32(blk(0), 28), 5, "the partial data block heads the free list");
    assert_eq!(u16::from_le_bytes([blk(5)[8], blk(5)[9]]), 4);
    assert_eq!(le32(blk(1), 0), 2);
    assert_eq!(le32(blk(4), 0), 5, "L3 of id 0 points at the data block");
}

#[test]
fn empty_id0_entry_is_marked_used() {
    let e = Dquot::default().to_bytes();
    assert!(e.iter().any(|&b| b != 0));
    assert!(!Dquot::default().worth_keeping());
}

#[test]
fn corrupt_trees_are_errors_not_panics() {
    let mut es = BTreeMap::new();
    es.insert(7, usage(7, 1024, 1));
    let good = build(&Info::new(QuotaType::User), &es);
    let info = Info::parse(&good[..QBLK], QuotaType::User).expect("header");
    // A reference past the file, a reference back to the root (a loop),
    // an unmapped block, a short block.
    for (at, v) in [(QBLK, 99u32), (QBLK, 1), (3 * QBLK, 0xffff)] {
        let mut f = good.clone();
        f[at..at + 4].copy_from_slice(&v.to_le_bytes());
        assert!(read_entries(&info, reader(&f)).is_err(), "{at}: {v}");
    }
    assert!(read_entries(&info, |_| None).is_err());
    assert!(read_entries(&info, |_| Some(vec![1; 10])).is_err());
    let huge = Info {
        blocks: u32::MAX,
        ..info
    };
    let mut f = good.clone();
    // Every root slot points at block 2 and block 2 at itself: bounded.
    for i in 0..256 {
        f[QBLK + i * 4..QBLK + i * 4 + 4].copy_from_slice(&2u32.to_le_bytes());
        f[2 * QBLK + i * 4..2 * QBLK + i * 4 + 4].copy_from_slice(&2u32.to_le_bytes());
    }
    assert!(read_entries(&huge, reader(&f)).is_err(), "a shared index block");
}

/// One entry: header, the four blocks of its path, the root; more
/// entries' blocks follow in numbering order.
#[test]
fn first_write_order_puts_the_root_after_the_first_path() {
    use super::first_write_order;
    assert_eq!(first_write_order(6), [0, 2, 3, 4, 5, 1]);
    assert_eq!(first_write_order(8), [0, 2, 3, 4, 5, 1, 6, 7]);
    assert_eq!(first_write_order(2), [0, 1]);
}
