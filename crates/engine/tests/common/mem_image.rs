//! Images in memory for the engine's tests: made by the engine's own mkfs
//! (reproducible: fixed UUID, hash seed and time) and checked with the real
//! `e2fsck -fn` from their bytes.

#![allow(dead_code)]

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_testkit::tools::e2fsck_fn;

/// A fresh ext4 image of `size` bytes (journal included), with `inodes`
/// inodes when given.
pub fn fresh_image_with(size: usize, inodes: Option<u64>) -> Vec<u8> {
    fresh_image_made(size, inodes, &[])
}

/// A fresh ext4 image of `size` bytes with these features turned on
/// (`inline_data`, …) besides the defaults.
pub fn fresh_image_featuring(size: usize, features: &[&str]) -> Vec<u8> {
    fresh_image_made(size, None, features)
}

fn fresh_image_made(size: usize, inodes: Option<u64>, features: &[&str]) -> Vec<u8> {
    let dev = MemDevice::new(vec![0; size]);
    let opts = MkfsOptions {
        feature_edits: features.iter().map(|f| (f.to_string(), true)).collect(),
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        timestamp: Some(1_700_000_000),
        device_zeroed: true,
        inode_count: inodes,
        ..MkfsOptions::default()
    };
    mkfs(&dev, &opts).expect("mkfs");
    dev.snapshot()
}

/// [`fresh_image_with`] the default inode count.
pub fn fresh_image(size: usize) -> Vec<u8> {
    fresh_image_with(size, None)
}

/// `e2fsck -fn` on the bytes of an image; `what` names it in the failure.
pub fn assert_clean(img: &[u8], what: &str) {
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), img).unwrap();
    let r = e2fsck_fn(tmp.path()).unwrap();
    assert!(r.is_clean(), "{what}: e2fsck -fn:\n{}", r.output);
}
