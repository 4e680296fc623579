//! Repairs of pass 0 (superblock, group descriptors, journal) and pass 1D
//! (blocks claimed twice), each on an engine-made image damaged in one
//! field: `fsck -y` must repair it, a recheck and `e2fsck -fn` must agree,
//! and the files must still read back.
//!
//! Pass 5 (bitmaps and counts) is repaired elsewhere; where a repair here
//! frees or allocates blocks, what may be left is pass 5's only.

mod support;

use support::*;

use std::sync::Arc;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::{BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::inode::set_inode_checksum;
use ext4kit_format::superblock::{Geometry, RawSuperblock};
use ext4kit_fsck::repair::Outcome;

const DATA: u8 = 0xab;
const LEN: usize = 20_000;

/// An image with two 20,000-byte files (inodes `a` < `b`).
struct Built {
    bytes: Vec<u8>,
    a: u32,
    b: u32,
}

fn build(features: &str) -> Built {
    let (dev, fs) = engine_fs(16 << 20, 7, |o| {
        if !features.is_empty() {
            o.add_features(features);
        }
    });
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(a, 0, &vec![DATA; LEN]).unwrap();
    let b = fs.create(ROOT_INO, b"b", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(b, 0, &vec![DATA ^ 0xff; LEN]).unwrap();
    fs.unmount().expect("unmount");
    Built {
        bytes: dev.snapshot(),
        a,
        b,
    }
}

fn geometry(bytes: &[u8]) -> (RawSuperblock, Geometry) {
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let geo = Geometry::from_superblock(&sb).unwrap();
    (sb, geo)
}

/// Rewrites the primary superblock after `edit` (checksum fixed).
fn edit_sb(bytes: &mut [u8], edit: impl FnOnce(&mut RawSuperblock)) {
    let (mut sb, _) = geometry(bytes);
    edit(&mut sb);
    if sb.features().metadata_csum() {
        sb.set_checksum();
    }
    bytes[1024..2048].copy_from_slice(&sb.encode());
}

/// Byte offset of group `g`'s primary descriptor.
fn desc_at(bytes: &[u8], g: u32) -> usize {
    let (_, geo) = geometry(bytes);
    (geo.first_data_block as usize + 1) * geo.block_size as usize + g as usize * usize::from(geo.desc_size)
}

fn desc(bytes: &[u8], g: u32) -> RawGroupDesc {
    let (_, geo) = geometry(bytes);
    RawGroupDesc::parse(&bytes[desc_at(bytes, g)..], usize::from(geo.desc_size)).unwrap()
}

/// Applies `edit` to inode `ino`'s record, checksum fixed.
fn edit_inode(bytes: &mut [u8], ino: u32, edit: impl FnOnce(&mut [u8])) {
    let (sb, geo) = geometry(bytes);
    let (g, idx) = geo.inode_location(ino).unwrap();
    let isz = usize::from(geo.inode_size);
    let at = desc(bytes, g).inode_table() as usize * geo.block_size as usize + idx as usize * isz;
    let rec = &mut bytes[at..at + isz];
    edit(rec);
    set_inode_checksum(rec, sb.csum_seed(), ino).unwrap();
}

/// `e2fsck -fn` on `bytes`: its exit status and transcript (`None` when
/// e2fsck is not installed).
fn e2fsck(bytes: &[u8]) -> Option<(i32, String)> {
    let dir = tempfile::tempdir().ok()?;
    let p = dir.path().join("r.img");
    std::fs::write(&p, bytes).ok()?;
    let out = std::process::Command::new("e2fsck").arg("-fn").arg(&p).output().ok()?;
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// The repair left nothing, and e2fsck agrees.
fn assert_clean(out: &Outcome, bytes: &[u8]) {
    let left: Vec<_> = out.verdict.findings.iter().map(|f| f.code.name).collect();
    assert_eq!(out.verdict.unfixed_errors(), 0, "left: {left:?}");
    assert!(out.fixed() > 0, "something was repaired");
    if let Some((code, text)) = e2fsck(bytes) {
        assert_eq!(code, 0, "{text}");
    }
}

/// The repair left nothing but pass 5's bitmaps and counts, and e2fsck
/// asks about nothing before its pass 5.
fn assert_clean_but_pass5(out: &Outcome, bytes: &[u8]) {
    let left: Vec<_> = out
        .verdict
        .findings
        .iter()
        .filter(|f| !f.fixed && f.pass != 5 && f.severity == ext4kit_fsck::Severity::Error)
        .map(|f| f.code.name)
        .collect();
    assert!(left.is_empty(), "left before pass 5: {left:?}");
    assert!(out.fixed() > 0, "something was repaired");
    if let Some((_, text)) = e2fsck(bytes) {
        let before5 = text.split("Pass 5").next().unwrap_or("");
        let asks = before5.lines().any(|l| l.contains('?'));
        assert!(!asks, "{text}");
    }
}

fn read_back(bytes: &[u8], ino: u32) -> Vec<u8> {
    let dev = Arc::new(MemDevice::new(bytes.to_vec()));
    let opts = OpenOptions {
        count_mount: false,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev as Arc<dyn BlockDevice>), opts).expect("the engine opens the repair");
    let mut buf = vec![0u8; LEN];
    let n = fs.read_file_at(ino, 0, &mut buf).expect("read");
    buf.truncate(n);
    buf
}

fn assert_files(bytes: &[u8], built: &Built) {
    assert_eq!(read_back(bytes, built.a), vec![DATA; LEN]);
    assert_eq!(read_back(bytes, built.b), vec![DATA ^ 0xff; LEN]);
}

#[test]
fn bad_extra_isize_fields_are_set_to_the_default() {
    let mut b = build("");
    edit_sb(&mut b.bytes, |sb| {
        sb.s_min_extra_isize.set(3);
        sb.s_want_extra_isize.set(500);
    });
    let (out, fixed) = repair_yes(&b.bytes);
    assert_clean(&out, &fixed);
    let (sb, _) = geometry(&fixed);
    assert_eq!((sb.s_min_extra_isize.get(), sb.s_want_extra_isize.get()), (32, 32));
    assert_files(&fixed, &b);
}

#[test]
fn sixty_four_bit_without_extents_gets_extents_back() {
    let mut b = build("");
    edit_sb(&mut b.bytes, |sb| {
        let v = sb.s_feature_incompat.get() & !0x40;
        sb.s_feature_incompat.set(v);
    });
    let (out, fixed) = repair_yes(&b.bytes);
    assert_clean(&out, &fixed);
    let (sb, _) = geometry(&fixed);
    assert_ne!(sb.s_feature_incompat.get() & 0x40, 0);
    assert_files(&fixed, &b);
}

#[test]
fn a_bad_descriptor_checksum_is_recomputed() {
    let mut b = build("");
    let at = desc_at(&b.bytes, 1);
    b.bytes[at + 0x1E] ^= 0x55; // bg_checksum
    let (out, fixed) = repair_yes(&b.bytes);
    assert!(
        out.runs[0]
            .findings
            .iter()
            .any(|f| f.code.name == "P0_GDT_CSUM" && f.fixed)
    );
    assert_clean_but_pass5(&out, &fixed);
    assert_files(&fixed, &b);
}

#[test]
fn an_invalid_unused_inode_count_is_cleared() {
    let mut b = build("");
    let (sb, geo) = geometry(&b.bytes);
    let at = desc_at(&b.bytes, 1);
    let mut gd = desc(&b.bytes, 1);
    gd.bg_itable_unused_lo.set((geo.inodes_per_group + 5) as u16);
    let ds = usize::from(geo.desc_size);
    let c = gd.compute_checksum(&geo.features, sb.csum_seed(), &sb.s_uuid, 1, ds);
    gd.bg_checksum.set(c);
    gd.encode_into(&mut b.bytes[at..at + ds]);
    let (out, fixed) = repair_yes(&b.bytes);
    assert_clean_but_pass5(&out, &fixed);
    assert_eq!(desc(&fixed, 1).itable_unused(), 0);
    assert_files(&fixed, &b);
}

#[test]
fn a_block_bitmap_outside_its_group_is_relocated() {
    let mut b = build("^flex_bg");
    let (sb, geo) = geometry(&b.bytes);
    let at = desc_at(&b.bytes, 1);
    let mut gd = desc(&b.bytes, 1);
    let old = gd.block_bitmap();
    gd.bg_block_bitmap_lo.set(3); // group 0's territory
    let ds = usize::from(geo.desc_size);
    let c = gd.compute_checksum(&geo.features, sb.csum_seed(), &sb.s_uuid, 1, ds);
    gd.bg_checksum.set(c);
    gd.encode_into(&mut b.bytes[at..at + ds]);
    let (out, fixed) = repair_yes(&b.bytes);
    assert_clean_but_pass5(&out, &fixed);
    let new = desc(&fixed, 1).block_bitmap();
    let first = geo.first_data_block as u64 + u64::from(geo.blocks_per_group);
    assert!(
        new >= first && new < first + u64::from(geo.blocks_per_group),
        "{new} in group 1 (was {old})"
    );
    assert_files(&fixed, &b);
}

#[test]
fn a_corrupt_journal_superblock_is_reset() {
    let mut b = build("");
    let (sb, geo) = geometry(&b.bytes);
    assert_ne!(sb.s_feature_compat.get() & 0x4, 0, "the image has a journal");
    // The journal's first block, from the extent in inode 8.
    let (g, idx) = geo.inode_location(8).unwrap();
    let isz = usize::from(geo.inode_size);
    let bs = geo.block_size as usize;
    let at = desc(&b.bytes, g).inode_table() as usize * bs + idx as usize * isz;
    let e = &b.bytes[at + 0x28 + 12..at + 0x28 + 24];
    let start =
        (u64::from(u16::from_le_bytes([e[6], e[7]])) << 32) | u64::from(u32::from_le_bytes([e[8], e[9], e[10], e[11]]));
    let jsb = start as usize * bs;
    b.bytes[jsb..jsb + 4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let (out, fixed) = repair_yes(&b.bytes);
    assert_clean(&out, &fixed);
    assert_eq!(&fixed[jsb..jsb + 4], &[0xc0, 0x3b, 0x39, 0x98]);
    assert_files(&fixed, &b);
}

#[test]
fn needs_recovery_without_a_journal_is_cleared() {
    let mut b = build("^has_journal");
    edit_sb(&mut b.bytes, |sb| {
        let v = sb.s_feature_incompat.get() | 0x4;
        sb.s_feature_incompat.set(v);
    });
    let (out, fixed) = repair_yes(&b.bytes);
    assert_clean(&out, &fixed);
    let (sb, _) = geometry(&fixed);
    assert_eq!(sb.s_feature_incompat.get() & 0x4, 0);
    assert_files(&fixed, &b);
}

#[test]
fn a_file_sharing_another_files_blocks_gets_its_own_copy() {
    let mut b = build("");
    // Point b's first extent at a's blocks: both now map a's 20 blocks.
    let (sb, geo) = geometry(&b.bytes);
    let (g, idx) = geo.inode_location(b.a).unwrap();
    let isz = usize::from(geo.inode_size);
    let at = desc(&b.bytes, g).inode_table() as usize * geo.block_size as usize + idx as usize * isz;
    let a_start: [u8; 6] = b.bytes[at + 0x28 + 12 + 6..at + 0x28 + 24].try_into().unwrap();
    edit_inode(&mut b.bytes, b.b, |r| {
        r[0x28 + 12 + 6..0x28 + 24].copy_from_slice(&a_start)
    });
    let _ = sb;
    let (out, fixed) = repair_yes(&b.bytes);
    assert!(
        out.runs[0]
            .findings
            .iter()
            .any(|f| f.code.name == "P1D_CLONE_QUESTION" && f.fixed)
    );
    assert_clean_but_pass5(&out, &fixed);
    // Both files read what a held; a (the lower inode) has the copy.
    assert_eq!(read_back(&fixed, b.a), vec![DATA; LEN]);
    assert_eq!(read_back(&fixed, b.b), vec![DATA; LEN]);
}
