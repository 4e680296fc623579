//! Pass 1 repairs, each on an image the engine wrote with one planted
//! fault: the repair must end with a clean verdict, `e2fsck -fn` must agree,
//! and the file's data must still read back.

mod support;

use support::*;

use ext4kit_engine::{NodeKind, ROOT_INO};
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::inode::set_inode_checksum;
use ext4kit_format::superblock::{Geometry, RawSuperblock};
use ext4kit_fsck::repair::Outcome;

const DATA: u8 = 0x5a;
const FILE_LEN: usize = 20_000;

struct Built {
    bytes: Vec<u8>,
    file: u32,
    dir: u32,
    sym: u32,
}

fn build() -> Built {
    let (dev, fs) = engine_fs(16 << 20, 9, |_| {});
    let file = fs.create(ROOT_INO, b"file", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(file, 0, &vec![DATA; FILE_LEN]).unwrap();
    let dir = fs.create(ROOT_INO, b"dir", NodeKind::Directory, ATTR).unwrap().ino;
    let sym = fs
        .create(dir, b"sym", NodeKind::Symlink(b"../file".to_vec()), ATTR)
        .unwrap()
        .ino;
    fs.unmount().expect("unmount");
    Built {
        bytes: dev.snapshot(),
        file,
        dir,
        sym,
    }
}

/// Offset and size of inode `ino`'s record, and the checksum seed.
fn inode_at(bytes: &[u8], ino: u32) -> (usize, usize, u32) {
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let geo = Geometry::from_superblock(&sb).unwrap();
    let bs = geo.block_size as usize;
    let (g, idx) = geo.inode_location(ino).unwrap();
    let gdt = (geo.first_data_block as usize + 1) * bs + g as usize * usize::from(geo.desc_size);
    let gd = RawGroupDesc::parse(&bytes[gdt..], usize::from(geo.desc_size)).unwrap();
    let isz = usize::from(geo.inode_size);
    (gd.inode_table() as usize * bs + idx as usize * isz, isz, sb.csum_seed())
}

/// Applies `edit` to inode `ino`'s record; with `csum`, the checksum is
/// set again so only the planted field is wrong.
fn edit_inode(bytes: &mut [u8], ino: u32, csum: bool, edit: impl FnOnce(&mut [u8])) {
    let (at, isz, seed) = inode_at(bytes, ino);
    let rec = &mut bytes[at..at + isz];
    edit(rec);
    if csum {
        set_inode_checksum(rec, seed, ino).unwrap();
    }
}

fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// The repair ends clean, e2fsck agrees, and the file's data reads back.
fn assert_repaired(out: &Outcome, after: &[u8], file: u32) {
    assert_clean_and_file_intact(out, after, file, FILE_LEN, DATA);
    e2fsck_clean(after);
}

#[test]
fn a_wrong_block_count_and_directory_size_are_set() {
    let mut b = build();
    edit_inode(&mut b.bytes, b.file, true, |r| r[0x1C] = r[0x1C].wrapping_add(2));
    edit_inode(&mut b.bytes, b.dir, true, |r| r[4] = r[4].wrapping_add(1));
    let (out, after) = repair_yes(&b.bytes);
    let codes = fixed_codes(&out);
    assert!(
        codes.contains(&"P1_BAD_I_BLOCKS") && codes.contains(&"P1_BAD_I_SIZE"),
        "{codes:?}"
    );
    let (at, _, _) = inode_at(&after, b.dir);
    assert_eq!(le32(&after, at + 4), 1024, "the directory is one block");
    assert_repaired(&out, &after, b.file);
}

#[test]
fn dtime_on_a_live_inode_is_cleared() {
    let mut b = build();
    edit_inode(&mut b.bytes, b.file, true, |r| {
        r[0x14..0x18].copy_from_slice(&1_800_000_000u32.to_le_bytes());
    });
    let (out, after) = repair_yes(&b.bytes);
    assert!(fixed_codes(&out).contains(&"P1_SET_DTIME"));
    let (at, _, _) = inode_at(&after, b.file);
    assert_eq!(le32(&after, at + 0x14), 0);
    assert_repaired(&out, &after, b.file);
}

#[test]
fn a_checksum_only_fault_is_rewritten() {
    let mut b = build();
    edit_inode(&mut b.bytes, b.file, false, |r| r[0x7C] ^= 0xff);
    let (out, after) = repair_yes(&b.bytes);
    assert_eq!(fixed_codes(&out), ["P1_INODE_ONLY_CSUM_INVALID"]);
    assert_repaired(&out, &after, b.file);
}

#[test]
fn immutable_on_a_symlink_is_dropped() {
    let mut b = build();
    edit_inode(&mut b.bytes, b.sym, true, |r| r[0x20] |= 0x10);
    let (out, after) = repair_yes(&b.bytes);
    assert!(fixed_codes(&out).contains(&"P1_SET_IMMUTABLE"));
    let (at, _, _) = inode_at(&after, b.sym);
    assert_eq!(le32(&after, at + 0x20) & 0x30, 0);
    assert_repaired(&out, &after, b.file);
}

#[test]
fn an_extent_past_the_end_of_the_disk_is_removed() {
    let mut b = build();
    // A second root extent after the file's own, starting past the end.
    edit_inode(&mut b.bytes, b.file, true, |r| {
        let ib = 0x28;
        assert_eq!(u16::from_le_bytes([r[ib + 2], r[ib + 3]]), 1, "one extent");
        r[ib + 2] = 2;
        let e = ib + 24;
        r[e..e + 4].copy_from_slice(&100u32.to_le_bytes());
        r[e + 4..e + 6].copy_from_slice(&4u16.to_le_bytes());
        r[e + 6..e + 8].fill(0);
        r[e + 8..e + 12].copy_from_slice(&9_000_000u32.to_le_bytes());
    });
    let (out, after) = repair_yes(&b.bytes);
    assert!(
        fixed_codes(&out).contains(&"P1_EXTENT_BAD_START_BLK"),
        "{:?}",
        fixed_codes(&out)
    );
    let (at, _, _) = inode_at(&after, b.file);
    assert_eq!(
        u16::from_le_bytes([after[at + 0x2A], after[at + 0x2B]]),
        1,
        "one extent left"
    );
    assert_repaired(&out, &after, b.file);
}
