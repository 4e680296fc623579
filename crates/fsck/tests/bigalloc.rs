//! Bigalloc file systems (`bigalloc.rst`): block bitmaps hold one bit per
//! cluster, descriptors count free clusters. Images made by `mkfs.ext4 -d`
//! on 1 KiB and 4 KiB blocks with clusters of 4 to 16 blocks must check
//! clean; a flipped cluster bit and a wrong free-cluster count must be
//! found and repaired, with e2fsck -fn as the judge of every image.

mod support;

use std::path::Path;
use std::process::Command;

use ext4kit_engine::BlockDevice;
use ext4kit_engine::device::MemDevice;
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::superblock::{Geometry, RawSuperblock};
use ext4kit_fsck::{Mode, Options, check};
use support::{assert_e2fsck_clean, e2fsck_fn, fixed_codes, repair_yes};

/// A tree with files of many sizes, a sparse file, a directory of 2,000
/// entries, short and long symlinks and (when `setfattr` works here) an
/// xattr too big for the inode.
fn source_tree(dir: &Path) {
    let d = dir.join("many");
    std::fs::create_dir(&d).unwrap();
    for i in 0..2000 {
        std::fs::write(d.join(format!("entry_{i}")), b"").unwrap();
    }
    for (i, len) in [1usize, 1000, 4096, 5000, 70_000, 300_000].into_iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|k| (k * 7 + i) as u8).collect();
        std::fs::write(dir.join(format!("file_{len}")), data).unwrap();
    }
    let sparse = std::fs::File::create(dir.join("sparse")).unwrap();
    sparse.set_len(10 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"x", 5_000_000).unwrap();
    std::os::unix::fs::symlink("file_1", dir.join("short_link")).unwrap();
    std::os::unix::fs::symlink("l".repeat(100), dir.join("long_link")).unwrap();
    let value = "v".repeat(700);
    let _ = Command::new("setfattr")
        .args(["-n", "user.big", "-v", &value])
        .arg(dir.join("file_1000"))
        .status();
}

/// `mkfs.ext4 -d` of [`source_tree`] with `bs`-byte blocks and clusters of
/// `ratio` blocks; `None` (outside CI) when mkfs.ext4 is missing.
fn bigalloc_image(bs: u32, ratio: u32, features: &str) -> Option<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    source_tree(dir.path());
    let img = tempfile::NamedTempFile::new().unwrap();
    let status = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", &bs.to_string(), "-N", "4096"])
        .args(["-C", &(bs * ratio).to_string(), "-O", features, "-d"])
        .arg(dir.path())
        .arg(img.path())
        .arg("64M")
        .status();
    let Ok(status) = status else {
        assert!(std::env::var_os("CI").is_none(), "mkfs.ext4 is needed in CI");
        ext4kit_testkit::skipped!("mkfs.ext4 is not installed");
        return None;
    };
    assert!(status.success(), "mkfs.ext4 -b {bs} -C {}", bs * ratio);
    Some(std::fs::read(img.path()).unwrap())
}

/// `ext4kit fsck -fn`: the error findings' codes.
fn check_errors(bytes: &[u8]) -> Vec<&'static str> {
    let dev = MemDevice::read_only(bytes.to_vec());
    let opts = Options {
        force: true,
        mode: Mode::Check,
        ..Options::default()
    };
    let report = check(&dev as &dyn BlockDevice, &opts, &mut |_| {}).expect("the check runs");
    report
        .findings
        .iter()
        .filter(|f| f.severity == ext4kit_fsck::Severity::Error)
        .map(|f| f.code.name)
        .collect()
}

/// Group 0's descriptor and where it lies (the table follows the
/// superblock: block 2 with 1 KiB blocks, whose block 1 is the superblock).
fn group0(bytes: &[u8]) -> (Geometry, RawGroupDesc, usize) {
    let sb = RawSuperblock::parse(&bytes[1024..]).unwrap();
    let geo = Geometry::from_superblock(&sb).unwrap();
    let bs = geo.block_size as usize;
    let at = if bs == 1024 { 2 * bs } else { bs };
    let gd = RawGroupDesc::parse(&bytes[at..], usize::from(geo.desc_size)).unwrap();
    (geo, gd, at)
}

#[test]
fn fresh_bigalloc_images_check_clean() {
    for bs in [1024, 4096] {
        for ratio in [4, 8, 16] {
            let Some(img) = bigalloc_image(bs, ratio, "bigalloc") else {
                return;
            };
            let what = format!("{bs}-byte blocks, {ratio} per cluster");
            assert_e2fsck_clean(&img, &what);
            assert_eq!(check_errors(&img), Vec::<&str>::new(), "{what}");
        }
    }
}

/// Sets or clears the bitmap bit of the cluster holding `blk` in group 0.
fn flip_cluster_bit(img: &mut [u8], blk: u64) {
    let (geo, gd, _) = group0(img);
    let bit = (blk >> geo.cluster_bits) as usize;
    let at = gd.block_bitmap() as usize * geo.block_size as usize + bit / 8;
    img[at] ^= 1 << (bit % 8);
}

#[test]
fn a_flipped_cluster_bit_is_found_and_repaired() {
    for bs in [1024, 4096] {
        let Some(mut img) = bigalloc_image(bs, 16, "bigalloc,^metadata_csum") else {
            return;
        };
        let (geo, _, _) = group0(&img);
        // The last cluster of the file system is free; its bit is set.
        flip_cluster_bit(&mut img, geo.blocks_count - 1);
        assert_ne!(e2fsck_fn(&img).0, Some(0), "e2fsck sees the damage");
        assert!(
            check_errors(&img).contains(&"P5_BLOCK_UNUSED"),
            "{:?}",
            check_errors(&img)
        );
        let (out, after) = repair_yes(&img);
        assert!(fixed_codes(&out).contains(&"P5_BLOCK_UNUSED"));
        assert_eq!(out.verdict.unfixed_errors(), 0);
        assert_e2fsck_clean(&after, "after repairing a set bit");
        assert_eq!(check_errors(&after), Vec::<&str>::new());
    }
}

#[test]
fn a_cleared_bit_of_a_used_cluster_is_found_and_repaired() {
    let Some(mut img) = bigalloc_image(4096, 8, "bigalloc,^metadata_csum") else {
        return;
    };
    let (_, gd, _) = group0(&img);
    // The inode table's first cluster is in use.
    flip_cluster_bit(&mut img, gd.inode_table());
    assert_ne!(e2fsck_fn(&img).0, Some(0), "e2fsck sees the damage");
    assert!(
        check_errors(&img).contains(&"P5_BLOCK_USED"),
        "{:?}",
        check_errors(&img)
    );
    let (out, after) = repair_yes(&img);
    assert!(fixed_codes(&out).contains(&"P5_BLOCK_USED"));
    assert_e2fsck_clean(&after, "after repairing a cleared bit");
    assert_eq!(check_errors(&after), Vec::<&str>::new());
}

#[test]
fn a_wrong_free_cluster_count_is_found_and_repaired() {
    let Some(mut img) = bigalloc_image(1024, 4, "bigalloc,^metadata_csum") else {
        return;
    };
    let (geo, mut gd, at) = group0(&img);
    let right = gd.free_blocks();
    gd.set_free_blocks(right - 3);
    gd.encode_into(&mut img[at..at + usize::from(geo.desc_size)]);
    let (code, text) = e2fsck_fn(&img);
    assert_ne!(code, Some(0), "e2fsck sees the damage");
    assert!(text.contains(&format!("counted={right}")), "{text}");
    assert!(check_errors(&img).contains(&"P5_FREE_BLOCK_COUNT_GROUP"));
    let (out, after) = repair_yes(&img);
    assert!(fixed_codes(&out).contains(&"P5_FREE_BLOCK_COUNT_GROUP"));
    assert_e2fsck_clean(&after, "after repairing the free count");
    let (_, gd, _) = group0(&after);
    assert_eq!(gd.free_blocks(), right, "the count is in clusters");
    // The superblock counts the groups' free clusters in blocks.
    let ds = usize::from(geo.desc_size);
    let free: u32 = (0..geo.group_count as usize)
        .map(|g| RawGroupDesc::parse(&after[at + g * ds..], ds).unwrap().free_blocks())
        .sum();
    let sb = RawSuperblock::parse(&after[1024..]).unwrap();
    assert_eq!(sb.s_free_blocks_count_lo.get(), free << geo.cluster_bits);
}
