use super::*;

const BS: usize = 1024;

fn dentry(parent: u32, ino: u32, name: &str) -> Dentry {
    Dentry {
        parent,
        ino,
        name: name.as_bytes().to_vec(),
    }
}

/// Writes `commits` (each a list of records) as the kernel lays them out:
/// a tail padded to the end of its block, the crc over each commit.
fn area(tid: u32, commits: &[Vec<Tag>], tail_tid: u32) -> Vec<Vec<u8>> {
    let mut blocks = Vec::new();
    let mut first = true;
    for c in commits {
        let mut b = Vec::new();
        if first {
            b.extend(encode(&Tag::Head { features: 0, tid }));
            first = false;
        }
        for t in c {
            b.extend(encode(t));
        }
        let mut tail = encode(&Tag::Tail { tid: tail_tid, crc: 0 });
        let pad = BS - b.len() - tail.len();
        tail[2..4].copy_from_slice(&((8 + pad) as u16).to_le_bytes());
        let crc = crc32c_raw(crc32c_raw(0, &b), &tail[..8]);
        tail[8..12].copy_from_slice(&crc.to_le_bytes());
        b.extend(tail);
        b.resize(BS, 0);
        blocks.push(b);
    }
    blocks
}

fn sample() -> Vec<Vec<Tag>> {
    let ext = Extent {
        logical: 0,
        len: 3,
        physical: 0x1_0000_0200,
        unwritten: true,
    };
    vec![
        vec![
            Tag::Inode {
                ino: 17,
                raw: vec![7; 160],
            },
            Tag::AddRange { ino: 17, extent: ext },
            Tag::Create(dentry(12, 17, "new")),
        ],
        vec![
            Tag::Unlink(dentry(12, 14, "gone")),
            Tag::Link(dentry(12, 17, "new2")),
            Tag::DelRange {
                ino: 15,
                lblk: 2,
                len: 0x7fff_ffff,
            },
        ],
    ]
}

fn scan_all(blocks: &[Vec<u8>], tid: u32) -> Result<Area> {
    scan(blocks.iter().map(|b| b.as_slice()), tid)
}

#[test]
fn valid_commits_replay_in_order() {
    let blocks = area(4, &sample(), 4);
    let a = scan_all(&blocks, 4).unwrap();
    assert_eq!((a.commits, a.blocks), (2, 2));
    let kept: Vec<_> = a
        .tags
        .iter()
        .filter(|t| !matches!(t, Tag::Head { .. } | Tag::Tail { .. }))
        .cloned()
        .collect();
    assert_eq!(kept, sample().concat());
}

#[test]
fn a_stale_head_or_no_head_means_nothing_to_replay() {
    let blocks = area(3, &sample(), 3);
    assert_eq!(scan_all(&blocks, 4).unwrap(), Area::default());
    assert_eq!(scan_all(&[vec![0; BS]], 4).unwrap(), Area::default());
}

#[test]
fn the_first_bad_tail_ends_the_area() {
    let mut blocks = area(4, &sample(), 4);
    blocks[1][20] ^= 1; // inside the second commit's unlink name
    let a = scan_all(&blocks, 4).unwrap();
    assert_eq!(a.commits, 1);
    // Without a good commit before it, a bad tail fails the replay.
    blocks[0][40] ^= 1;
    let e = scan_all(&blocks, 4).unwrap_err();
    assert!(e.is_checksum(), "{e}");
}

#[test]
fn a_tail_for_another_transaction_is_not_valid() {
    let blocks = area(4, &sample(), 5);
    assert!(scan_all(&blocks, 4).is_err());
}

#[test]
fn unknown_head_features_are_refused() {
    let mut b = encode(&Tag::Head { features: 1, tid: 4 });
    b.resize(BS, 0);
    assert!(scan_all(&[b], 4).is_err());
}

#[test]
fn bad_lengths_are_errors_not_panics() {
    let mut b = encode(&Tag::DelRange {
        ino: 1,
        lblk: 2,
        len: 3,
    });
    b[2] = 11;
    b.resize(BS, 0);
    assert!(records(&b).next().unwrap().is_err());
    let mut long = encode(&Tag::Pad);
    long[2..4].copy_from_slice(&2000u16.to_le_bytes());
    long.resize(BS, 0);
    assert!(records(&long).next().unwrap().is_err());
    let empty_name = encode(&Tag::Link(dentry(2, 3, "")));
    assert!(records(&empty_name).next().unwrap().is_err());
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut x: u32 = 0x1234_5678;
    for round in 0..400 {
        let mut blocks = area(4, &sample(), 4);
        for _ in 0..(round % 7 + 1) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let i = (x as usize) % blocks.len();
            let j = (x as usize >> 8) % BS;
            blocks[i][j] = (x >> 24) as u8;
        }
        let _ = scan_all(&blocks, 4);
        for b in &blocks {
            records(b).for_each(drop);
        }
    }
}

#[test]
fn area_size_defaults_to_256() {
    assert_eq!(area_blocks(0), 256);
    assert_eq!(area_blocks(16), 16);
}
