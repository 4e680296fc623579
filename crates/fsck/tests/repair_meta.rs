//! Repairs of file-system metadata: the bad-blocks inode (inode 1) and the
//! reserved inodes' flags, each on an image the engine wrote with one
//! planted fault. The repair must end with a clean verdict, `e2fsck -fn`
//! must agree, and the file's data must still read back.

mod support;

use support::*;

use ext4kit_engine::{NodeKind, ROOT_INO};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::inode::set_inode_checksum;
use ext4kit_format::superblock::{Geometry, RawSuperblock};
use ext4kit_fsck::repair::Outcome;

const DATA: u8 = 0x3c;
const FILE_LEN: usize = 9_000;
/// A block far past anything mkfs or the file uses (16 MiB of 1 KiB blocks).
const FREE_BLK: u32 = 16_300;

/// A 1 KiB-block image with one file; returns it and the file's inode.
fn build() -> (Vec<u8>, u32) {
    build_with(&[])
}

/// [`build`] with mkfs feature edits (name, on).
fn build_with(edits: &[(&str, bool)]) -> (Vec<u8>, u32) {
    let (dev, fs) = engine_fs(16 << 20, 7, |o| {
        o.feature_edits = edits.iter().map(|&(n, on)| (n.to_string(), on)).collect();
    });
    let file = fs.create(ROOT_INO, b"file", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(file, 0, &vec![DATA; FILE_LEN]).unwrap();
    fs.unmount().expect("unmount");
    (dev.snapshot(), file)
}

/// Applies `edit` to inode `ino`'s record and sets its checksum again.
fn edit_inode(bytes: &mut [u8], ino: u32, edit: impl FnOnce(&mut [u8])) {
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let geo = Geometry::from_superblock(&sb).unwrap();
    let bs = geo.block_size as usize;
    let (g, idx) = geo.inode_location(ino).unwrap();
    let gdt = (geo.first_data_block as usize + 1) * bs + g as usize * usize::from(geo.desc_size);
    let gd = RawGroupDesc::parse(&bytes[gdt..], usize::from(geo.desc_size)).unwrap();
    let isz = usize::from(geo.inode_size);
    let at = gd.inode_table() as usize * bs + idx as usize * isz;
    let rec = &mut bytes[at..at + isz];
    edit(rec);
    set_inode_checksum(rec, sb.csum_seed(), ino).unwrap();
}

/// Makes inode 1 list `blocks` directly (sizes as a real list has them).
fn plant_list(bytes: &mut [u8], blocks: &[u32]) {
    edit_inode(bytes, 1, |r| {
        for (i, b) in blocks.iter().enumerate() {
            r[0x28 + i * 4..0x2C + i * 4].copy_from_slice(&b.to_le_bytes());
        }
        let n = blocks.len() as u32;
        r[4..8].copy_from_slice(&(n * 1024).to_le_bytes());
        r[0x1C..0x20].copy_from_slice(&(n * 2).to_le_bytes());
    });
}

/// Inode 1's direct pointers after the repair.
fn list_after(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut copy = bytes.to_vec();
    edit_inode(&mut copy, 1, |r| {
        out = (0..12)
            .map(|i| u32::from_le_bytes(r[0x28 + i * 4..0x2C + i * 4].try_into().unwrap()))
            .collect();
    });
    out
}

/// The verdict is clean, e2fsck agrees, and the file reads back.
fn assert_repaired(out: &Outcome, after: &[u8], file: u32) {
    assert_clean_and_file_intact(out, after, file, FILE_LEN, DATA);
    e2fsck_clean(after);
}

#[test]
fn illegal_and_primary_entries_leave_the_bad_block_list() {
    let (mut bytes, file) = build();
    plant_list(&mut bytes, &[FREE_BLK, 900_000, 1]);
    let (out, after) = repair_yes(&bytes);
    let codes = fixed_codes(&out);
    assert!(codes.contains(&"P1_BB_ILLEGAL_BLOCK_NUM"), "{codes:?}");
    assert!(codes.contains(&"P1_BAD_PRIMARY_SUPERBLOCK"), "{codes:?}");
    assert_eq!(list_after(&after)[..3], [FREE_BLK, 0, 0], "the sound entry stays");
    assert_repaired(&out, &after, file);
}

#[test]
fn an_invalid_bad_blocks_inode_is_cleared() {
    let (mut bytes, file) = build();
    plant_list(&mut bytes, &[FREE_BLK]);
    edit_inode(&mut bytes, 1, |r| r[0..2].copy_from_slice(&0o100644u16.to_le_bytes()));
    let (out, after) = repair_yes(&bytes);
    assert!(
        fixed_codes(&out).contains(&"P1_INVALID_BAD_INODE"),
        "{:?}",
        fixed_codes(&out)
    );
    assert!(list_after(&after).iter().all(|&b| b == 0), "the list is empty");
    assert_repaired(&out, &after, file);
}

#[test]
fn a_reserved_inode_loses_the_casefold_flag() {
    let (mut bytes, file) = build();
    edit_inode(&mut bytes, 9, |r| {
        r[0x20..0x24].copy_from_slice(&0x4000_0000u32.to_le_bytes())
    });
    let (out, after) = repair_yes(&bytes);
    assert!(
        fixed_codes(&out).contains(&"P1_CASEFOLD_NONDIR"),
        "{:?}",
        fixed_codes(&out)
    );
    assert_repaired(&out, &after, file);
}

/// Rewrites the primary superblock through `edit`, with its checksum.
fn edit_super(bytes: &mut [u8], edit: impl FnOnce(&mut RawSuperblock)) {
    let mut sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    edit(&mut sb);
    if sb.features().metadata_csum() {
        sb.set_checksum();
    }
    bytes[1024..2048].copy_from_slice(&sb.encode());
}

/// Rewrites group `g`'s primary descriptor through `edit`, with its checksum.
fn edit_desc(bytes: &mut [u8], g: u32, edit: impl FnOnce(&mut RawGroupDesc)) {
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let geo = Geometry::from_superblock(&sb).unwrap();
    let ds = usize::from(geo.desc_size);
    let at = (geo.first_data_block as usize + 1) * geo.block_size as usize + g as usize * ds;
    let mut gd = RawGroupDesc::parse(&bytes[at..at + ds], ds).unwrap();
    edit(&mut gd);
    let c = gd.compute_checksum(&geo.features, sb.csum_seed(), &sb.s_uuid, g, ds);
    gd.bg_checksum.set(c);
    gd.encode_into(&mut bytes[at..at + ds]);
}

#[test]
fn a_sound_extent_file_turns_the_extents_feature_back_on() {
    let (mut bytes, file) = build_with(&[("64bit", false)]);
    edit_super(&mut bytes, |sb| {
        assert_eq!(
            sb.s_feature_incompat.get() & IncompatFeatures::BIT64.0,
            0,
            "built without 64bit"
        );
        let v = sb.s_feature_incompat.get() & !IncompatFeatures::EXTENTS.0;
        sb.s_feature_incompat.set(v);
    });
    let (out, after) = repair_yes(&bytes);
    assert!(
        fixed_codes(&out).contains(&"P1_EXTENT_FEATURE"),
        "{:?}",
        fixed_codes(&out)
    );
    let sb = RawSuperblock::parse(&after[1024..2048]).unwrap();
    assert_ne!(sb.s_feature_incompat.get() & IncompatFeatures::EXTENTS.0, 0);
    assert_repaired(&out, &after, file);
}

#[test]
fn an_inode_bitmap_on_the_block_bitmap_is_moved() {
    let (mut bytes, file) = build();
    edit_desc(&mut bytes, 1, |gd| {
        let bb = gd.block_bitmap();
        gd.bg_inode_bitmap_lo.set(bb as u32);
        gd.bg_inode_bitmap_hi.set((bb >> 32) as u32);
    });
    let (out, after) = repair_yes(&bytes);
    assert!(fixed_codes(&out).contains(&"P1_IB_CONFLICT"), "{:?}", fixed_codes(&out));
    assert_repaired(&out, &after, file);
}
