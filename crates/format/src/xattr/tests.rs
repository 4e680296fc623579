use super::encode::{NewValue, NewXattr, encode_block, encode_ibody};
use super::*;

fn attr<'a>(index: u8, name: &'a [u8], value: &'a [u8]) -> NewXattr<'a> {
    NewXattr {
        index,
        name,
        value: NewValue::Bytes(value),
    }
}

fn sample_block() -> Vec<u8> {
    let big = vec![0xA5u8; 2000];
    let attrs = [
        attr(1, b"zz", b"two"),
        attr(6, b"selinux", b"ctx\0"),
        attr(1, b"a", &big),
        attr(1, b"b", b""),
    ];
    encode_block(&attrs, 4096, 1).unwrap()
}

#[test]
fn entry_hash_small_vector() {
    // name "a" folds to 0x61; one value word 0x62 after rotate-left 16.
    assert_eq!(entry_hash(b"a", b"b", false), 0x0061_0062);
    assert_eq!(entry_hash(b"a", b"b", true), 0x0061_0062);
    // Bytes >= 0x80 differ between the signed and unsigned variants.
    assert_ne!(entry_hash(&[0xC3], b"", false), entry_hash(&[0xC3], b"", true));
    assert_eq!(entry_hash(&[0xC3], b"", true), 0xFFFF_FFC3);
}

#[test]
fn block_round_trip_sorted_and_hashed() {
    let block = sample_block();
    let parsed = parse_block(&block).unwrap();
    let names: Vec<Vec<u8>> = parsed.entries.iter().map(XattrEntry::full_name).collect();
    let want: [&[u8]; 4] = [b"user.a", b"user.b", b"user.zz", b"security.selinux"];
    assert_eq!(names, want.map(<[u8]>::to_vec).to_vec());
    assert_eq!(parsed.entries[0].value, XattrValue::Inline(&[0xA5; 2000][..]));
    assert_eq!(parsed.entries[1].value, XattrValue::Inline(&[][..]));
    for e in &parsed.entries {
        e.verify_hash().unwrap();
    }
    assert_eq!(parsed.header.h_hash.get(), block_hash(&parsed.entries));
    // First value is packed against the end of the block.
    assert_eq!(parsed.entries[0].raw.e_value_offs.get(), 4096 - 2000);
}

#[test]
fn checksum_set_then_verify_and_detect_corruption() {
    let mut block = sample_block();
    set_block_checksum(0x1234_5678, 77, &mut block).unwrap();
    verify_block_checksum(0x1234_5678, 77, &block).unwrap();
    let err = verify_block_checksum(0x1234_5678, 78, &block).unwrap_err();
    assert_eq!((err.field, err.offset), ("h_checksum", 16));
    block[4000] ^= 1;
    assert!(
        verify_block_checksum(0x1234_5678, 77, &block)
            .unwrap_err()
            .is_checksum()
    );
}

#[test]
fn ibody_round_trip_offsets_relative_to_first_entry() {
    let attrs = [attr(7, b"data", b""), attr(1, b"k", b"value!")];
    let region = encode_ibody(&attrs, 256 - 128 - 32).unwrap();
    let entries = parse_ibody(&region).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].full_name(), b"system.data");
    assert_eq!(entries[1].value, XattrValue::Inline(&b"value!"[..]));
    assert_eq!(entries[1].raw.e_hash.get(), 0);
    // 96-byte region, 4-byte magic: value at 96 - 8 = 88, stored as 84.
    assert_eq!(entries[1].raw.e_value_offs.get(), 84);
    assert!(parse_ibody(&[0u8; 96]).unwrap().is_empty());
}

#[test]
fn ibody_region_checks_extra_isize() {
    let inode = [0u8; 256];
    assert_eq!(ibody_region(&inode, 32).unwrap().len(), 96);
    assert_eq!(ibody_region(&inode, 30).unwrap_err().field, "i_extra_isize");
    assert_eq!(ibody_region(&inode, 126).unwrap_err().field, "i_extra_isize");
}

#[test]
fn ea_inode_entries_return_the_inode() {
    let attrs = [NewXattr {
        index: 1,
        name: b"huge",
        value: NewValue::EaInode {
            inum: 42,
            size: 70000,
            value_hash: 9,
        },
    }];
    let block = encode_block(&attrs, 1024, 1).unwrap();
    let parsed = parse_block(&block).unwrap();
    assert_eq!(parsed.entries[0].value, XattrValue::EaInode { inum: 42, size: 70000 });
    assert_eq!(
        parsed.entries[0].raw.e_hash.get(),
        entry_hash_ea_inode(b"huge", 9, false)
    );
}

#[test]
fn corrupt_header_fields_are_named() {
    let mut block = sample_block();
    block[3] = 0;
    assert_eq!(parse_block(&block).unwrap_err().field, "h_magic");
    let mut block = sample_block();
    block[8] = 2;
    let err = parse_block(&block).unwrap_err();
    assert_eq!((err.field, err.offset), ("h_blocks", 8));
    assert!(parse_block(&block[..20]).is_err());
}

#[test]
fn corrupt_entries_name_field_and_entry_offset() {
    // Entry 0 is at 32 (name "a", 20 bytes), entry 1 at 52.
    let mut block = sample_block();
    block[52 + 2..52 + 4].copy_from_slice(&8u16.to_le_bytes()); // into the list
    block[52 + 8..52 + 12].copy_from_slice(&4u32.to_le_bytes());
    let err = parse_block(&block).unwrap_err();
    assert_eq!((err.field, err.offset), ("e_value_offs", 54));

    let mut block = sample_block();
    block[32 + 8..32 + 12].copy_from_slice(&5000u32.to_le_bytes());
    let err = parse_block(&block).unwrap_err();
    assert_eq!((err.field, err.offset), ("e_value_size", 40));

    let mut block = sample_block();
    block[32 + 4] = 1; // e_value_inum with a nonzero offset
    let err = parse_block(&block).unwrap_err();
    assert_eq!((err.field, err.offset), ("e_value_offs", 34));

    let mut block = sample_block();
    block[32 + 12] ^= 0xFF;
    let entries = parse_block(&block).unwrap().entries;
    let err = entries[0].verify_hash().unwrap_err();
    assert_eq!((err.field, err.offset), ("e_hash", 44));
}

#[test]
fn unterminated_list_and_huge_names_do_not_panic() {
    // A region full of 0xFF: no terminator before the end.
    let mut region = vec![0xFFu8; 96];
    region[..4].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
    let err = parse_ibody(&region).unwrap_err();
    assert_eq!((err.field, err.offset), ("e_name_len", 4));
    // Every short prefix of a valid block fails cleanly or parses.
    let block = sample_block();
    for len in 0..block.len() {
        let _ = parse_block(&block[..len]);
    }
}

#[test]
fn encoder_reports_no_space() {
    let big = vec![1u8; 900];
    let err = encode_block(&[attr(1, b"x", &big)], 1024, 1);
    assert!(err.is_ok());
    let err = encode_block(&[attr(1, b"x", &big), attr(1, b"y", &big)], 1024, 1).unwrap_err();
    assert_eq!(err.structure, "ext4_xattr_header");
    assert!(encode_ibody(&[attr(1, b"x", &big)], 96).is_err());
}

#[test]
fn split_name_prefers_whole_names() {
    assert_eq!(split_name(b"system.posix_acl_access"), Some((2, &b""[..])));
    assert_eq!(split_name(b"system.data"), Some((7, &b"data"[..])));
    assert_eq!(split_name(b"user.x"), Some((1, &b"x"[..])));
    assert_eq!(split_name(b"bogus.x"), None);
}
