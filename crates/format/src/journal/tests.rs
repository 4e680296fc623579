use super::descriptor::{self, FLAG_ESCAPE, FLAG_LAST_TAG, FLAG_SAME_UUID, Tag};
use super::superblock::{CHECKSUM_TYPE_CRC32C, RawJournalSuperblock};
use super::*;

const UUID: [u8; 16] = *b"0123456789abcdef";

fn params(incompat: u32) -> JournalParams {
    JournalParams {
        block_size: 1024,
        incompat,
        csum_seed: csum_seed(&UUID),
    }
}

fn v3() -> JournalParams {
    params(INCOMPAT_REVOKE | INCOMPAT_64BIT | INCOMPAT_CSUM_V3)
}

fn tag(blocknr: u64, uuid: Option<[u8; 16]>) -> Tag {
    Tag {
        offset: 0,
        blocknr,
        flags: 0,
        checksum: 0xABCD,
        uuid,
    }
}

#[test]
fn tag_sizes_follow_journal_tag_bytes() {
    assert_eq!(v3().tag_bytes(), 16);
    assert_eq!(params(INCOMPAT_CSUM_V2 | INCOMPAT_64BIT).tag_bytes(), 14);
    assert_eq!(params(INCOMPAT_CSUM_V2).tag_bytes(), 10);
    assert_eq!(params(INCOMPAT_64BIT).tag_bytes(), 12);
    assert_eq!(params(0).tag_bytes(), 8);
}

#[test]
fn descriptor_round_trips_for_every_tag_layout() {
    for p in [
        v3(),
        params(INCOMPAT_CSUM_V2 | INCOMPAT_64BIT),
        params(INCOMPAT_CSUM_V2),
        params(0),
    ] {
        let big = if p.is_64bit() { 0x1_0000_0042 } else { 0x42 };
        let tags = [tag(big, Some(UUID)), tag(7, None), tag(9, None)];
        let block = descriptor::encode(&p, 77, &tags).unwrap();
        descriptor::verify_checksum(&block, &p).unwrap();
        let (seq, iter) = descriptor::tags(&block, &p).unwrap();
        assert_eq!(seq, 77);
        let got: Vec<Tag> = iter.map(Result::unwrap).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].blocknr, big);
        assert_eq!(got[0].uuid, Some(UUID));
        assert_eq!(got[1].flags & FLAG_SAME_UUID, FLAG_SAME_UUID);
        assert_eq!(got[2].flags & FLAG_LAST_TAG, FLAG_LAST_TAG);
        assert_eq!(got[2].offset, 12 + 2 * p.tag_bytes() + 16);
        assert_eq!(got[1].checksum, 0xABCD);
    }
}

#[test]
fn descriptor_corruption_is_named() {
    let p = v3();
    let mut block = descriptor::encode(&p, 5, &[tag(3, Some(UUID))]).unwrap();
    block[100] ^= 1;
    let err = descriptor::verify_checksum(&block, &p).unwrap_err();
    assert_eq!((err.field, err.offset), ("t_checksum", 1020));
    block[0] ^= 1;
    assert_eq!(descriptor::tags(&block, &p).unwrap_err().field, "h_magic");
    let commit = commit::encode(&p, 5, 0, 0);
    let err = descriptor::tags(&commit, &p).unwrap_err();
    assert_eq!((err.field, err.offset), ("h_blocktype", 4));
    assert!(descriptor::tags(&block[..512], &p).is_err());
}

#[test]
fn tag_walk_is_bounded_without_last_tag() {
    // 63 tags fill the block up to the tail; none carries LAST_TAG.
    let p = v3();
    let mut block = vec![0u8; 1024];
    let h = RawJournalHeader::new(BlockType::Descriptor, 1);
    block[..12].copy_from_slice(zerocopy::IntoBytes::as_bytes(&h));
    for k in 0..63 {
        block[12 + 16 * k + 7] = 2; // FLAG_SAME_UUID
    }
    assert_eq!(descriptor::tags(&block, &p).unwrap().1.count(), 63);
    // Without SAME_UUID the last tag's UUID would run into the tail.
    block[12 + 16 * 62 + 7] = 0;
    let all: Vec<_> = descriptor::tags(&block, &p).unwrap().1.collect();
    assert_eq!(all.len(), 63);
    let err = all[62].unwrap_err();
    assert_eq!((err.field, err.offset), ("t_flags", 12 + 16 * 62 + 4));
}

#[test]
fn data_block_checksums_v2_truncate_v3_full() {
    let data = vec![0x5Au8; 1024];
    for p in [v3(), params(INCOMPAT_CSUM_V2 | INCOMPAT_64BIT)] {
        let full = descriptor::data_checksum(&p, 9, &data);
        let stored = if p.has_csum_v3() { full } else { full & 0xFFFF };
        let mut t = tag(1, None);
        t.checksum = stored;
        descriptor::verify_data(&p, &t, 9, &data).unwrap();
        let err = descriptor::verify_data(&p, &t, 10, &data).unwrap_err();
        assert_eq!(err.field, "t_checksum");
    }
    assert!(!tag(1, None).escaped());
    assert!(
        Tag {
            flags: FLAG_ESCAPE,
            ..tag(1, None)
        }
        .escaped()
    );
}

#[test]
fn commit_block_checksum_round_trip() {
    let p = v3();
    let block = commit::encode(&p, 42, 1_700_000_000, 5);
    commit::verify_checksum(&p, &block).unwrap();
    let h = commit::RawCommitHeader::parse(&block).unwrap();
    assert_eq!(
        (h.sequence(), h.h_commit_sec.get(), h.h_commit_nsec.get()),
        (42, 1_700_000_000, 5)
    );
    let mut bad = block.clone();
    bad[1000] = 1;
    let err = commit::verify_checksum(&p, &bad).unwrap_err();
    assert_eq!((err.field, err.offset), ("h_chksum", 0x10));
    assert!(commit::verify_checksum(&p, &block[..100]).is_err());
}

#[test]
fn revoke_records_round_trip_and_r_count_is_checked() {
    for p in [v3(), params(INCOMPAT_CSUM_V2)] {
        let blocks = [5u64, 6, 1000];
        let block = revoke::encode(&p, 3, &blocks).unwrap();
        revoke::verify_checksum(&block, &p).unwrap();
        let (seq, it) = revoke::revoked(&block, &p).unwrap();
        assert_eq!(seq, 3);
        assert_eq!(it.collect::<Vec<_>>(), blocks);
        let mut bad = block.clone();
        bad[12..16].copy_from_slice(&1022u32.to_be_bytes());
        let err = revoke::revoked(&bad, &p).unwrap_err();
        assert_eq!((err.field, err.offset), ("r_count", 12));
        bad[12..16].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(revoke::revoked(&bad, &p).unwrap_err().field, "r_count");
    }
    assert!(revoke::encode(&params(0), 1, &[1 << 40]).is_err());
    assert!(revoke::encode(&v3(), 1, &[0; 200]).is_err());
}

fn superblock() -> RawJournalSuperblock {
    let mut buf = [0u8; 1024];
    let h = RawJournalHeader::new(BlockType::SuperblockV2, 1);
    buf[..12].copy_from_slice(zerocopy::IntoBytes::as_bytes(&h));
    let mut sb = RawJournalSuperblock::parse(&buf).unwrap();
    sb.s_blocksize.set(4096);
    sb.s_feature_incompat.set(INCOMPAT_CSUM_V3 | INCOMPAT_64BIT);
    sb.s_checksum_type = CHECKSUM_TYPE_CRC32C;
    sb.s_uuid = UUID;
    sb.set_checksum();
    sb
}

#[test]
fn journal_superblock_checksum_and_params() {
    let sb = superblock();
    sb.verify_checksum().unwrap();
    let p = sb.params().unwrap();
    assert_eq!((p.block_size, p.csum_seed), (4096, csum_seed(&UUID)));
    let mut bytes = sb.encode();
    bytes[0x200] ^= 1;
    let err = RawJournalSuperblock::parse(&bytes)
        .unwrap()
        .verify_checksum()
        .unwrap_err();
    assert_eq!((err.field, err.offset), ("s_checksum", 0xFC));
    let mut bad = sb;
    bad.s_blocksize.set(1000);
    assert_eq!(bad.params().unwrap_err().field, "s_blocksize");
    let mut bad = sb;
    bad.s_checksum_type = 1;
    assert_eq!(bad.params().unwrap_err().field, "s_checksum_type");
    bytes[4..8].copy_from_slice(&2u32.to_be_bytes());
    assert_eq!(RawJournalSuperblock::parse(&bytes).unwrap_err().field, "h_blocktype");
    assert!(RawJournalSuperblock::parse(&bytes[..1000]).is_err());
}
