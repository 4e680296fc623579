//! The checker as a library, on images the engine writes in memory: a
//! clean image has no findings (and `e2fsck -fn` agrees), and each planted
//! corruption is reported with e2fsck's problem number at the right inode.

use std::sync::Arc;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::inode::set_inode_checksum;
use ext4kit_format::superblock::{Geometry, RawSuperblock};
use ext4kit_fsck::{Options, Report, check};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Inodes of the files the image holds.
struct Built {
    bytes: Vec<u8>,
    file: u32,
    dir: u32,
    big: u32,
}

fn build() -> Built {
    let dev = Arc::new(MemDevice::new(vec![0; 16 << 20]));
    let opts = MkfsOptions {
        uuid: Some([7; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        block_size: Some(1024),
        ..MkfsOptions::default()
    };
    mkfs(dev.as_ref(), &opts).expect("mkfs");
    let fs = Filesystem::open(Box::new(dev.clone() as Arc<dyn BlockDevice>), OpenOptions::default()).expect("open");
    let file = fs.create(ROOT_INO, b"file", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(file, 0, &vec![0xab; 20_000]).unwrap();
    let dir = fs.create(ROOT_INO, b"dir", NodeKind::Directory, ATTR).unwrap().ino;
    fs.link(file, dir, b"hard").unwrap();
    fs.create(dir, b"sym", NodeKind::Symlink(b"../file".to_vec()), ATTR)
        .unwrap();
    let big = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR).unwrap().ino;
    for i in 0..400 {
        fs.create(big, format!("entry-{i:04}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap();
    }
    fs.unmount().expect("unmount");
    Built {
        bytes: dev.snapshot(),
        file,
        dir,
        big,
    }
}

fn run(bytes: &[u8]) -> Report {
    let dev = MemDevice::read_only(bytes.to_vec());
    check(
        &dev,
        &Options {
            force: true,
            ..Options::default()
        },
        &mut |_| {},
    )
    .expect("check runs")
}

fn codes(r: &Report) -> Vec<(&'static str, Option<u32>)> {
    r.findings.iter().map(|f| (f.code.name, f.inode)).collect()
}

/// Offset of inode `ino`'s record in the image.
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

/// Applies `edit` to inode `ino`'s record and fixes its checksum, so only
/// the planted inconsistency remains.
fn edit_inode(bytes: &mut [u8], ino: u32, edit: impl FnOnce(&mut [u8])) {
    let (at, isz, seed) = inode_at(bytes, ino);
    let rec = &mut bytes[at..at + isz];
    edit(rec);
    set_inode_checksum(rec, seed, ino).unwrap();
}

#[test]
fn an_image_the_engine_wrote_is_clean() {
    let b = build();
    let r = run(&b.bytes);
    assert!(r.findings.is_empty(), "{:?}", codes(&r));
    assert_eq!(r.errors(), 0);
    // The 400-entry directory was indexed, so pass 2 checked an htree.
    let (at, _, _) = inode_at(&b.bytes, b.big);
    let flags = u32::from_le_bytes(b.bytes[at + 0x20..at + 0x24].try_into().unwrap());
    assert_ne!(flags & 0x1000, 0, "the big directory has INDEX_FL");
    if let Ok(dir) = tempfile::tempdir() {
        let p = dir.path().join("i.img");
        std::fs::write(&p, &b.bytes).unwrap();
        if let Ok(out) = std::process::Command::new("e2fsck").arg("-fn").arg(&p).output() {
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
        }
    }
}

#[test]
fn a_wrong_link_count_is_pass_4() {
    let mut b = build();
    edit_inode(&mut b.bytes, b.file, |r| r[0x1A] = 5);
    let r = run(&b.bytes);
    assert!(
        codes(&r).contains(&("P4_BAD_REF_COUNT", Some(b.file))),
        "{:?}",
        codes(&r)
    );
}

#[test]
fn a_wrong_size_and_block_count_are_pass_1() {
    let mut b = build();
    edit_inode(&mut b.bytes, b.dir, |r| r[4] = r[4].wrapping_add(1));
    edit_inode(&mut b.bytes, b.file, |r| r[0x1C] = r[0x1C].wrapping_add(2));
    let c = codes(&run(&b.bytes));
    assert!(c.contains(&("P1_BAD_I_SIZE", Some(b.dir))), "{c:?}");
    assert!(c.contains(&("P1_BAD_I_BLOCKS", Some(b.file))), "{c:?}");
}

#[test]
fn a_torn_inode_checksum_is_reported() {
    let mut b = build();
    let (at, _, _) = inode_at(&b.bytes, b.file);
    b.bytes[at + 0x08] ^= 1; // i_atime, checksum left stale
    let c = codes(&run(&b.bytes));
    assert!(c.contains(&("P1_INODE_ONLY_CSUM_INVALID", Some(b.file))), "{c:?}");
}

#[test]
fn two_files_sharing_a_block_are_pass_1b() {
    let mut b = build();
    // Point the directory's first extent at the file's first block.
    let (fat, _, _) = inode_at(&b.bytes, b.file);
    let file_start: [u8; 6] = b.bytes[fat + 0x28 + 12 + 6..fat + 0x28 + 12 + 12].try_into().unwrap();
    edit_inode(&mut b.bytes, b.dir, |r| {
        r[0x28 + 12 + 6..0x28 + 12 + 12].copy_from_slice(&file_start)
    });
    let c = codes(&run(&b.bytes));
    assert!(c.contains(&("P1B_DUP_BLOCK", Some(b.file))), "{c:?}");
    assert!(c.contains(&("P1B_DUP_BLOCK", Some(b.dir))), "{c:?}");
}

/// The first inode of group 0's `bg_itable_unused` tail; with `expose`,
/// the tail is shortened by one (descriptor checksum fixed) so the scan
/// reads that inode.
fn tail_inode(bytes: &mut [u8], expose: bool) -> u32 {
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let geo = Geometry::from_superblock(&sb).unwrap();
    let ds = usize::from(geo.desc_size);
    let at = (geo.first_data_block as usize + 1) * geo.block_size as usize;
    let mut gd = RawGroupDesc::parse(&bytes[at..], ds).unwrap();
    let unused = gd.itable_unused();
    assert!(unused > 0, "group 0 has an unused tail");
    let ino = geo.inodes_per_group - unused + 1;
    if expose {
        gd.bg_itable_unused_lo.set((unused - 1) as u16);
        let c = gd.compute_checksum(&geo.features, sb.csum_seed(), &sb.s_uuid, 0, ds);
        gd.bg_checksum.set(c);
        gd.encode_into(&mut bytes[at..at + ds]);
    }
    ino
}

fn make_live(bytes: &mut [u8], ino: u32) {
    edit_inode(bytes, ino, |r| {
        r[0..2].copy_from_slice(&0o100644u16.to_le_bytes());
        r[0x1A] = 1;
    });
}

#[test]
fn the_unused_inode_tail_is_not_read() {
    let mut b = build();
    let spare = tail_inode(&mut b.bytes, false);
    make_live(&mut b.bytes, spare);
    let r = run(&b.bytes);
    assert!(r.findings.is_empty(), "{:?}", codes(&r));
}

#[test]
fn an_unreferenced_inode_is_pass_4_and_its_bitmap_bit_pass_5() {
    let mut b = build();
    let spare = tail_inode(&mut b.bytes, true);
    make_live(&mut b.bytes, spare);
    let c = codes(&run(&b.bytes));
    assert!(c.contains(&("P4_ZERO_LEN_INODE", Some(spare))), "{c:?}");
    assert!(
        c.iter().any(|(n, i)| n.starts_with("P5_INODE") && *i == Some(spare)),
        "{c:?}"
    );
}

#[test]
fn garbage_is_an_operational_error_not_a_panic() {
    let dev = MemDevice::read_only(vec![0xA5; 1 << 20]);
    let r = check(
        &dev,
        &Options {
            force: true,
            ..Options::default()
        },
        &mut |_| {},
    );
    assert_eq!(ext4kit_fsck::exit_code(&r), ext4kit_fsck::EXIT_OPERATIONAL);
}

#[test]
fn a_cancelled_check_is_exit_32_with_what_it_found() {
    let b = build();
    let dev = MemDevice::read_only(b.bytes);
    let stop = std::sync::atomic::AtomicBool::new(true);
    let opts = Options {
        force: true,
        cancel: Some(&stop),
        ..Options::default()
    };
    let r = check(&dev, &opts, &mut |_| {});
    assert!(matches!(r, Err(ext4kit_fsck::Fatal::Cancelled(_))));
    assert_eq!(ext4kit_fsck::exit_code(&r), ext4kit_fsck::EXIT_CANCELLED);
}

#[test]
fn without_force_a_clean_superblock_stops_after_pass_0() {
    let b = build();
    let dev = MemDevice::read_only(b.bytes);
    let now = 1_700_000_100;
    let r = check(
        &dev,
        &Options {
            now,
            ..Options::default()
        },
        &mut |_| {},
    )
    .unwrap();
    assert!(r.skipped_clean, "{:?}", r.notes);
    assert_eq!(r.passes, vec!["0".to_string()]);
}
