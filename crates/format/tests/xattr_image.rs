//! xattr parsing against images written by mke2fs (`-d`) and by the kernel.

mod e2tools;

use std::path::Path;

use e2tools::{LoopMount, debugfs, extra_isize, have_tools, mkfs, number_after, raw_inode};
use ext4kit_format::xattr::encode::{NewValue, NewXattr, encode_block, encode_ibody};
use ext4kit_format::xattr::{
    XattrEntry, XattrValue, block_hash, ibody_region, parse_block, parse_ibody, set_block_checksum,
    verify_block_checksum,
};
use rustix::fs::{XattrFlags, setxattr};

fn big_value(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ salt).collect()
}

fn set(path: &Path, name: &str, value: &[u8]) {
    setxattr(path, name, value, XattrFlags::empty()).unwrap();
}

fn values(entries: &[XattrEntry<'_>]) -> Vec<(String, Vec<u8>)> {
    entries
        .iter()
        .map(|e| {
            let XattrValue::Inline(v) = e.value else {
                panic!("ea_inode")
            };
            (String::from_utf8(e.full_name()).unwrap(), v.to_vec())
        })
        .collect()
}

fn as_new<'a>(entries: &'a [XattrEntry<'a>]) -> Vec<NewXattr<'a>> {
    entries
        .iter()
        .map(|e| {
            let XattrValue::Inline(v) = e.value else {
                panic!("ea_inode")
            };
            NewXattr {
                index: e.index(),
                name: e.name,
                value: NewValue::Bytes(v),
            }
        })
        .collect()
}

/// The xattr block of `path` with its block number.
fn xattr_block(img: &Path, path: &str) -> (u64, Vec<u8>) {
    let stat = debugfs(img, &format!("stat {path}"));
    let blk = number_after(&stat, "File ACL: ").expect("File ACL line");
    assert_ne!(blk, 0, "{path} has no xattr block");
    (blk, e2tools::read_block(img, blk))
}

#[test]
fn mke2fs_written_xattrs_parse_verify_and_round_trip() {
    let test = "mke2fs_written_xattrs";
    if !have_tools(test, &["mkfs.ext4", "debugfs"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let (small, big) = (src.join("small"), src.join("big"));
    std::fs::write(&small, b"s").unwrap();
    std::fs::write(&big, b"b").unwrap();
    if setxattr(&small, "user.color", b"blue", XattrFlags::empty()).is_err() {
        ext4kit_testkit::skipped!("{test}: host fs has no user xattrs");
        return;
    }
    set(&small, "user.hello", b"world!");
    let (v1, v2) = (big_value(2000, 0), big_value(700, 0x5A));
    set(&big, "user.big", &v1);
    set(&big, "user.more", &v2);
    let img = tmp.path().join("img");
    mkfs(&img, &["-b", "4096", "-I", "256", "-d", src.to_str().unwrap()], "16M");
    let sb = e2tools::superblock(&img);

    // In-inode: both small attributes, offsets relative to the first entry.
    let inode = raw_inode(&img, "/small");
    let region = ibody_region(&inode, extra_isize(&inode)).unwrap();
    let entries = parse_ibody(region).unwrap();
    let want = vec![
        ("user.color".to_string(), b"blue".to_vec()),
        ("user.hello".to_string(), b"world!".to_vec()),
    ];
    assert_eq!(values(&entries), want);
    assert_eq!(encode_ibody(&as_new(&entries), region.len()).unwrap(), region);

    // Block: the two large ones.
    let (blk, block) = xattr_block(&img, "/big");
    verify_block_checksum(sb.csum_seed(), blk, &block).unwrap();
    let parsed = parse_block(&block).unwrap();
    assert_eq!(
        values(&parsed.entries),
        vec![("user.big".to_string(), v1), ("user.more".to_string(), v2)]
    );
    parsed.entries.iter().for_each(|e| e.verify_hash().unwrap());
    // e2fsprogs leaves h_hash 0; everything else must match our encoder.
    let refcount = parsed.header.h_refcount.get();
    let mut ours = encode_block(&as_new(&parsed.entries), block.len(), refcount).unwrap();
    ours[12..16].copy_from_slice(&block[12..16]);
    set_block_checksum(sb.csum_seed(), blk, &mut ours).unwrap();
    assert!(ours == block, "encoded block differs from mke2fs's");
}

#[test]
fn kernel_written_xattr_block_round_trips_exactly() {
    let test = "kernel_written_xattr_block";
    if !have_tools(test, &["mkfs.ext4", "debugfs", "mount", "umount"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    mkfs(&img, &["-b", "4096", "-I", "256"], "16M");
    let Some(mnt) = LoopMount::new(test, &img) else {
        return;
    };
    let file = mnt.dir.join("f");
    std::fs::write(&file, b"data").unwrap();
    // Inserted in the kernel's sorted order so value placement is canonical.
    let (v1, v2) = (big_value(1500, 1), big_value(999, 2));
    set(&file, "user.k", b"small");
    set(&file, "user.b1", &v1);
    set(&file, "user.b2", &v2);
    mnt.unmount();

    let sb = e2tools::superblock(&img);
    let (blk, block) = xattr_block(&img, "/f");
    verify_block_checksum(sb.csum_seed(), blk, &block).unwrap();
    let parsed = parse_block(&block).unwrap();
    let names: Vec<String> = values(&parsed.entries).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["user.b1", "user.b2"]);
    parsed.entries.iter().for_each(|e| e.verify_hash().unwrap());
    assert_ne!(parsed.header.h_hash.get(), 0);
    assert_eq!(parsed.header.h_hash.get(), block_hash(&parsed.entries));
    let refcount = parsed.header.h_refcount.get();
    let mut ours = encode_block(&as_new(&parsed.entries), block.len(), refcount).unwrap();
    set_block_checksum(sb.csum_seed(), blk, &mut ours).unwrap();
    assert!(ours == block, "encoded block differs from the kernel's");

    let inode = raw_inode(&img, "/f");
    let region = ibody_region(&inode, extra_isize(&inode)).unwrap();
    let entries = parse_ibody(region).unwrap();
    assert_eq!(values(&entries), vec![("user.k".to_string(), b"small".to_vec())]);
}
