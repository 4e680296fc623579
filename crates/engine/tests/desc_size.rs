//! Group descriptors larger than 64 bytes (`s_desc_size` 128 … 1024, a
//! power of two, with `64bit`; `mkfs.ext4 -E desc_size=N`): the
//! descriptors are `s_desc_size` apart and their checksum runs over all of
//! it, the bytes past the 64 the kernel defines included. The engine opens
//! such an image, writes across its groups and leaves it clean.

mod common;

use common::{mkfs, open_rw};
use ext4kit_engine::{Attr, NodeKind, ROOT_INO};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn round_trip(desc_size: &str, block_size: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let ext = format!("desc_size={desc_size}");
    let args = ["-b", block_size, "-O", "64bit,metadata_csum", "-E", &ext];
    let Some(img) = mkfs(tmp.path(), None, &args, "48M") else {
        return;
    };
    let data: Vec<u8> = (0..20u32 << 20).map(|i| (i % 251) as u8).collect();
    let ino = {
        let fs = open_rw(&img);
        assert_eq!(fs.geometry().desc_size.to_string(), desc_size);
        let ino = fs.create(ROOT_INO, b"big", NodeKind::Regular, ATTR).unwrap().ino;
        fs.write(ino, 0, &data).unwrap();
        fs.unmount().unwrap();
        ino
    };
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "desc_size {desc_size}: e2fsck -fn:\n{}", fsck.output);
    let fs = open_rw(&img);
    let mut back = vec![0u8; data.len()];
    let n = fs.read_at(&fs.inode(ino).unwrap(), 0, &mut back).unwrap();
    assert_eq!(n, data.len());
    assert!(back == data, "desc_size {desc_size}: the file reads back changed");
}

#[test]
fn descriptors_of_128_bytes_open_and_stay_clean() {
    round_trip("128", "1024");
}

#[test]
fn descriptors_of_1024_bytes_open_and_stay_clean() {
    round_trip("1024", "4096");
}
